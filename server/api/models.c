/* models.c - GET /v1/models: every model loaded with --model and its
 * attention layer by layer (model/model.h's rendering: runs of identical
 * layers); POST /v1/models/resolve: the same for a config.json sent as the
 * body, so that a user sees what posattn understood before sending
 * tensors.
 */
#include "api/job.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void models_answer(const srv_limits *lim, srv_reply *reply)
{
    const srv_model_set *s = lim != NULL ? lim->models : NULL;
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "models");
    char *body = NULL;
    bool ok = list != NULL;
    for (size_t i = 0; ok && i < srv_model_set_count(s); i++) {
        cJSON *m = srv_model_render(srv_model_set_at(s, i));
        ok = m != NULL && cJSON_AddItemToArray(list, m);
        if (!ok)
            cJSON_Delete(m);
    }
    if (ok)
        body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (body == NULL) {
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory rendering the models");
        return;
    }
    srv_reply_json(reply, 200, body, strlen(body));
}

const srv_endpoint srv_ep_models = {
    .name = "models",
    .answer = models_answer,
};

/* ------------------------------------------------------------------------- */
/* POST /v1/models/resolve                                                   */
/* ------------------------------------------------------------------------- */

static bool resolve_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job_out,
                            srv_reply *reply)
{
    srv_model *m = NULL;
    srv_model_err me;
    api_err e;
    srv_job *job;
    cJSON *rendered;

    if (!srv_model_derive(root, NULL, &m, &me)) {
        api_fail(&e, ctx, SRV_ERR_INVALID_ARGUMENT, me.key, "%s", me.message);
        api_reply_err(reply, &e);
        return false;
    }
    rendered = srv_model_render(m);
    srv_model_free(m);
    if (rendered == NULL || (job = api_job_new(&srv_ep_models_resolve, 1)) == NULL) {
        cJSON_Delete(rendered);
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory resolving the config");
        return false;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(rendered, "name"); /* a config has no name */
    job->impl = rendered;
    job->tasks[0].scheme_name = "none";
    *job_out = job;
    return true;
}

static void resolve_run(srv_job *job, size_t i, void *ws, size_t ws_size)
{
    (void)job, (void)i, (void)ws, (void)ws_size; /* derived in prepare: nothing to compute */
}

static bool resolve_render(srv_job *job, cJSON *root)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, (cJSON *)job->impl)
    {
        cJSON *c = cJSON_Duplicate(m, true);
        if (c == NULL || !cJSON_AddItemToObject(root, m->string, c)) {
            cJSON_Delete(c);
            return false;
        }
    }
    return true;
}

static void resolve_destroy(void *impl)
{
    cJSON_Delete(impl);
}

const srv_endpoint srv_ep_models_resolve = {
    .name = "models_resolve",
    .prepare = resolve_prepare,
    .run = resolve_run,
    .render = resolve_render,
    .destroy = resolve_destroy,
};
