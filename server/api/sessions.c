/* sessions.c - /v1/sessions: sessions (KV caches that live in posattnd,
 * store/kv_cache.h) over the JSON API, but for the requests that make one
 * (api/session_create.c: create and fork). GET /v1/sessions lists them
 * (?offset=&limit=) with the cache's totals, GET and DELETE
 * /v1/sessions/{id} show and drop one, POST /v1/sessions/{id}/append adds
 * tokens' keys and values. Every answer that names a session is its JSON
 * (api_session_fill, api/sessions.h). docs/sessions.md.
 *
 * An append runs as the job's one task (a worker, or the HTTP thread when
 * small), so two appends to one session can meet and the second is refused
 * (SESSION_BUSY). Every sessions request first drops the sessions idle past
 * --session-ttl (api_session_cache; srv_kv_expire: from the least recently
 * used, stopping at the first that is not), as /metrics does.
 * srv_job_session_step finds the session steps of a finished job for the
 * step histogram (runtime/metrics.h).
 */
#include "api/job.h"
#include "api/json.h"
#include "api/request.h"
#include "api/sessions.h"
#include "store/kv_cache.h"
#include "store/kv_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LIST_DEFAULT = 100, LIST_MAX = 1000 };

/* ------------------------------------------------------------------------- */
/* Errors and the session's JSON                                             */
/* ------------------------------------------------------------------------- */

/* The store's error as the API's; SESSION_NOT_FOUND names this replica
 * (--replica-id), so that a client behind a balancer learns where its
 * request went. */
void api_session_err(api_err *e, const srv_kv_err *ke, const srv_limits *lim)
{
    e->code = ke->code;
    snprintf(e->field, sizeof e->field, "%s", ke->field);
    if (ke->code == SRV_ERR_SESSION_NOT_FOUND && lim != NULL && lim->replica != NULL &&
        lim->replica[0] != '\0' && strstr(ke->message, " on replica ") == NULL)
        snprintf(e->message, sizeof e->message, "%s (replica %s)", ke->message, lim->replica);
    else
        snprintf(e->message, sizeof e->message, "%s", ke->message);
}

/* The cache, or false with NOT_IMPLEMENTED (a server built without one:
 * tests of other endpoints); idle sessions past their ttl dropped. */
bool api_session_cache(const srv_limits *lim, srv_kv_cache **c, api_err *e)
{
    if (lim == NULL || lim->sessions == NULL)
        return api_fail(e, NULL, SRV_ERR_NOT_IMPLEMENTED, "", "this server keeps no sessions");
    *c = lim->sessions;
    srv_kv_expire(*c);
    return true;
}

const char *api_session_path_id(const srv_endpoint_args *a)
{
    return a != NULL && a->params != NULL ? a->params->id : "";
}

/* t.shape[d] against the session's figure what = want (item_session.c too). */
bool api_session_dim(const srv_tensor *t, const char *name, int d, int64_t want, const char *what,
                     const api_ctx *ctx, api_err *e)
{
    char f[48];
    if (t->shape[d] == want)
        return true;
    snprintf(f, sizeof f, "%s.shape[%d]", name, d);
    return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, f,
                    "%s.shape[%d]=%lld does not equal the session's %s=%lld", name, d,
                    (long long)t->shape[d], what, (long long)want);
}

static bool add_int(cJSON *o, const char *name, int64_t v)
{
    return cJSON_AddItemToObject(o, name, srv_json_int(v));
}

/* The members of a session's JSON, added to o. */
bool api_session_fill(cJSON *o, const srv_kv_info *in)
{
    const srv_kv_spec *sp = &in->spec;
    cJSON *pos, *ev;
    bool ok = cJSON_AddStringToObject(o, "id", in->id) && add_int(o, "length", in->length) &&
              add_int(o, "appended", in->appended) &&
              add_int(o, "next_position", in->next_position);
    if (!ok)
        return false;
    if (in->length > 0) {
        pos = cJSON_AddObjectToObject(o, "positions");
        ok = pos != NULL && add_int(pos, "first", in->first_position) &&
             add_int(pos, "last", in->last_position);
    } else {
        ok = cJSON_AddNullToObject(o, "positions") != NULL;
    }
    ok = ok && add_int(o, "bytes", (int64_t)in->bytes) &&
         add_int(o, "shared_blocks", (int64_t)in->shared_blocks) &&
         cJSON_AddStringToObject(o, "dtype", pa_dtype_name(sp->dtype)) &&
         cJSON_AddStringToObject(o, "scheme", pa_scheme_type_name(in->scheme_type)) &&
         add_int(o, "num_kv_heads", sp->num_kv_heads) && add_int(o, "head_dim", sp->head_dim) &&
         add_int(o, "v_head_dim", sp->v_head_dim) && add_int(o, "max_tokens", sp->max_tokens);
    if (ok && in->model[0] != '\0') /* made from a served model */
        ok = cJSON_AddStringToObject(o, "model", in->model) && add_int(o, "layer", in->layer);
    ev = ok ? cJSON_AddObjectToObject(o, "eviction") : NULL;
    if (ev == NULL)
        return false;
    if (sp->eviction == SRV_KV_EVICT_WINDOW)
        ok = cJSON_AddStringToObject(ev, "type", "window") && add_int(ev, "window", sp->window) &&
             add_int(ev, "sinks", sp->sinks) &&
             cJSON_AddBoolToObject(ev, "reposition", sp->reposition);
    else
        ok = cJSON_AddStringToObject(ev, "type", "none") != NULL;
    return ok && add_int(ev, "evicted", in->evicted) &&
           cJSON_AddBoolToObject(o, "keys_prerotated", in->prerotated) &&
           cJSON_AddNumberToObject(o, "idle_s", (double)(int64_t)(in->idle_s * 1000.0) / 1000.0);
}

/* root (taken over) printed as the reply. */
static void reply_root(srv_reply *reply, int status, cJSON *root, bool ok)
{
    char *body = ok && root != NULL ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (body == NULL) {
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory rendering the answer");
        return;
    }
    srv_reply_json(reply, status, body, strlen(body));
}

/* ------------------------------------------------------------------------- */
/* POST /v1/sessions/{id}/append                                             */
/* ------------------------------------------------------------------------- */

typedef struct appending {
    srv_kv_cache *cache;
    const srv_limits *lim; /* the server's, for error messages */
    char id[SRV_KV_ID_LEN];
    srv_tensor k, v;   /* [n, Hkv, D], [n, Hkv, Dv] */
    int32_t *pos, n;   /* [n] or NULL */
    srv_kv_info after; /* the session once appended */
} appending;

static void append_destroy(void *impl)
{
    appending *a = impl;
    api_tensor_release(&a->k);
    api_tensor_release(&a->v);
    free(a->pos);
    free(a);
}

/* A tensor's dim d against the session's figure. */

static bool append_prepare(const cJSON *root, const api_ctx *ctx, const srv_endpoint_args *args,
                           srv_job **job, srv_reply *reply)
{
    static const char *const known[] = {"k", "v", "k_positions"};
    srv_kv_cache *c = NULL;
    srv_kv_info info;
    srv_kv_err ke;
    const srv_kv_spec *sp = &info.spec;
    appending *a = NULL;
    const cJSON *m;
    api_err e;
    size_t need;

    *job = NULL;
    if (!api_session_cache(ctx->lim, &c, &e))
        goto fail;
    if (!srv_kv_info_get(c, api_session_path_id(args), &info, &ke) &&
        !(api_session_adopt(ctx->lim, api_session_path_id(args), &ke) &&
          srv_kv_info_get(c, api_session_path_id(args), &info, &ke))) {
        api_session_err(&e, &ke, ctx->lim);
        goto fail;
    }
    if (!api_check_fields(root, known, 3, "", "an append", ctx, &e))
        goto fail;
    a = calloc(1, sizeof *a);
    if (a == NULL) {
        api_fail(&e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    a->cache = c;
    a->lim = ctx->lim;
    snprintf(a->id, sizeof a->id, "%s", info.id);
    if ((m = api_member(root, "k")) == NULL || api_member(root, "v") == NULL) {
        api_fail(&e, ctx, SRV_ERR_INVALID_ARGUMENT, m == NULL ? "k" : "v",
                 "%s is required: the new tokens' %s [n, num_kv_heads, %s]", m == NULL ? "k" : "v",
                 m == NULL ? "keys" : "values", m == NULL ? "head_dim" : "v_head_dim");
        goto fail;
    }
    if (!api_get_tensor(m, "k", ctx, 3, &a->k, &e) ||
        !api_get_tensor(api_member(root, "v"), "v", ctx, 3, &a->v, &e))
        goto fail;
    if (!api_session_dim(&a->k, "k", 1, sp->num_kv_heads, "num_kv_heads", ctx, &e) ||
        !api_session_dim(&a->k, "k", 2, sp->head_dim, "head_dim", ctx, &e) ||
        !api_session_dim(&a->v, "v", 1, sp->num_kv_heads, "num_kv_heads", ctx, &e) ||
        !api_session_dim(&a->v, "v", 2, sp->v_head_dim, "v_head_dim", ctx, &e))
        goto fail;
    if (a->v.shape[0] != a->k.shape[0]) {
        api_fail(&e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape[0]",
                 "v.shape[0]=%lld does not equal k.shape[0]=%lld: a value per key",
                 (long long)a->v.shape[0], (long long)a->k.shape[0]);
        goto fail;
    }
    a->n = (int32_t)a->k.shape[0];
    if ((m = api_member(root, "k_positions")) != NULL) {
        int32_t np;
        if (!api_get_int_array(m, "k_positions", ctx, &a->pos, &np, &e))
            goto fail;
        if (np != a->n) {
            api_fail(&e, ctx, SRV_ERR_SHAPE_MISMATCH, "k_positions",
                     "k_positions has %d values, k.shape[0]=%d: one per new token", (int)np,
                     (int)a->n);
            goto fail;
        }
    }
    /* The request's memory: what it brought (tensors, positions) and the
     * blocks it may add are the cache's, counted against --cache-mb. */
    need = api_add_sat(api_add_sat(api_tensor_bytes(&a->k), api_tensor_bytes(&a->v)),
                       a->pos != NULL ? (size_t)a->n * sizeof *a->pos : 0);
    if (!api_check_memory(need, ctx->lim, &e))
        goto fail;
    *job = api_job_new(&srv_ep_session_append, 1);
    if (*job == NULL) {
        api_fail(&e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    (*job)->impl = a;
    (*job)->tasks[0].scheme_name = pa_scheme_type_name(info.scheme_type);
    /* The rows copied (and rotated): small appends run on the HTTP thread. */
    (*job)->tasks[0].macs =
        (double)a->n * (double)sp->num_kv_heads * (double)(sp->head_dim + sp->v_head_dim);
    return true;

fail:
    if (a != NULL)
        append_destroy(a);
    api_reply_err(reply, &e);
    return false;
}

static void append_run(srv_job *job, size_t i, void *ws, size_t ws_size)
{
    appending *a = job->impl;
    srv_kv_err ke;
    api_err e;
    (void)ws;
    (void)ws_size;
    if (!srv_kv_append(a->cache, a->id, a->k.data, a->v.data, a->n, a->pos, &ke) ||
        !srv_kv_info_get(a->cache, a->id, &a->after, &ke)) {
        api_session_err(&e, &ke, a->lim);
        api_task_fail(job, i, &e);
    }
}

static bool append_render(srv_job *job, cJSON *root)
{
    const appending *a = job->impl;
    return api_session_fill(root, &a->after);
}

const srv_endpoint srv_ep_session_append = {
    .name = "session_append",
    .prepare_args = append_prepare,
    .run = append_run,
    .render = append_render,
    .destroy = append_destroy,
};

/* ------------------------------------------------------------------------- */
/* GET /v1/sessions, GET and DELETE /v1/sessions/{id}                        */
/* ------------------------------------------------------------------------- */

/* A query parameter as a count in [0, max]; def when absent. */
static bool query_count(const srv_endpoint_args *a, const char *key, size_t def, size_t max,
                        size_t *out, api_err *e)
{
    const char *s = a != NULL && a->query != NULL ? a->query(a->query_arg, key) : NULL;
    char *end;
    unsigned long long v;
    if (s == NULL) {
        *out = def;
        return true;
    }
    v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || v > max)
        return api_fail(e, NULL, SRV_ERR_INVALID_ARGUMENT, key,
                        "%s='%.32s' is not a count from 0 to %zu", key, s, max);
    *out = (size_t)v;
    return true;
}

static void list_answer(const srv_limits *lim, const srv_endpoint_args *args, srv_reply *reply)
{
    srv_kv_cache *c = NULL;
    srv_kv_stats st;
    srv_kv_info *infos = NULL;
    size_t offset, limit, total = 0, n;
    cJSON *root = NULL, *list, *cache;
    api_err e;
    bool ok;

    if (!api_session_cache(lim, &c, &e) ||
        !query_count(args, "offset", 0, SIZE_MAX / 2, &offset, &e) ||
        !query_count(args, "limit", LIST_DEFAULT, LIST_MAX, &limit, &e)) {
        api_reply_err(reply, &e);
        return;
    }
    infos = malloc((limit ? limit : 1) * sizeof *infos);
    root = cJSON_CreateObject();
    if (infos == NULL || root == NULL) {
        free(infos);
        cJSON_Delete(root);
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory");
        return;
    }
    n = srv_kv_list(c, offset, infos, limit, &total);
    srv_kv_stats_get(c, &st);
    list = cJSON_AddArrayToObject(root, "sessions");
    ok = list != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(list, o)) {
            cJSON_Delete(o);
            ok = false;
            break;
        }
        ok = api_session_fill(o, &infos[i]);
    }
    ok = ok && add_int(root, "offset", (int64_t)offset) && add_int(root, "limit", (int64_t)limit) &&
         add_int(root, "total", (int64_t)total) &&
         (cache = cJSON_AddObjectToObject(root, "cache")) != NULL &&
         add_int(cache, "sessions", (int64_t)st.sessions) &&
         add_int(cache, "bytes", (int64_t)st.bytes) &&
         add_int(cache, "budget_bytes", (int64_t)st.budget) &&
         add_int(cache, "blocks_used", (int64_t)st.blocks_used) &&
         add_int(cache, "blocks_shared", (int64_t)st.blocks_shared);
    free(infos);
    reply_root(reply, 200, root, ok);
}

const srv_endpoint srv_ep_sessions_list = {
    .name = "sessions",
    .answer_args = list_answer,
};

static void get_answer(const srv_limits *lim, const srv_endpoint_args *args, srv_reply *reply)
{
    srv_kv_cache *c = NULL;
    srv_kv_info info;
    srv_kv_err ke;
    api_err e;
    cJSON *root;

    if (!api_session_cache(lim, &c, &e)) {
        api_reply_err(reply, &e);
        return;
    }
    if (!srv_kv_info_get(c, api_session_path_id(args), &info, &ke) &&
        !(api_session_adopt(lim, api_session_path_id(args), &ke) &&
          srv_kv_info_get(c, api_session_path_id(args), &info, &ke))) {
        api_session_err(&e, &ke, lim);
        api_reply_err(reply, &e);
        return;
    }
    root = cJSON_CreateObject();
    reply_root(reply, 200, root, root != NULL && api_session_fill(root, &info));
}

const srv_endpoint srv_ep_session_get = {
    .name = "session",
    .answer_args = get_answer,
};

bool api_session_scheme_type(const srv_limits *lim, const char *id, pa_scheme_type *type,
                             api_err *e)
{
    srv_kv_cache *c = NULL;
    srv_kv_info info;
    srv_kv_err ke;
    if (!api_session_cache(lim, &c, e))
        return false;
    if (!srv_kv_info_get(c, id, &info, &ke) &&
        !(api_session_adopt(lim, id, &ke) && srv_kv_info_get(c, id, &info, &ke))) {
        api_session_err(e, &ke, lim);
        return false;
    }
    *type = info.scheme_type;
    return true;
}

bool api_session_delete(const srv_limits *lim, const char *id, api_err *e)
{
    srv_kv_cache *c = NULL;
    srv_kv_err ke;
    if (!api_session_cache(lim, &c, e))
        return false;
    if (!srv_kv_delete(c, id, &ke) &&
        !(api_session_adopt(lim, id, &ke) && srv_kv_delete(c, id, &ke))) {
        api_session_err(e, &ke, lim);
        return false;
    }
    if (lim->cache_dir != NULL && lim->cache_dir[0] != '\0')
        srv_kv_unlink(lim->cache_dir, id);
    return true;
}

static void delete_answer(const srv_limits *lim, const srv_endpoint_args *args, srv_reply *reply)
{
    api_err e;
    cJSON *root;
    const char *id = api_session_path_id(args);

    if (!api_session_delete(lim, id, &e)) {
        api_reply_err(reply, &e);
        return;
    }
    root = cJSON_CreateObject();
    reply_root(reply, 200, root,
               root != NULL && cJSON_AddStringToObject(root, "id", id) &&
                   cJSON_AddBoolToObject(root, "deleted", true));
}

const srv_endpoint srv_ep_session_delete = {
    .name = "session_delete",
    .answer_args = delete_answer,
};

/* ------------------------------------------------------------------------- */
/* Decode steps, for the metrics                                             */
/* ------------------------------------------------------------------------- */

bool srv_job_session_step(const srv_job *job, size_t *at, const char **scheme, double *seconds)
{
    size_t t = *at;
    while (job != NULL && t < job->n_tasks) {
        const size_t step = job->tasks[t].step, first = t;
        uint64_t start = UINT64_MAX, end = 0;
        bool ok = step != 0;
        if (step == 0) {
            t++;
            continue;
        }
        /* An item's tasks are consecutive (api/attention.c). */
        for (; t < job->n_tasks && job->tasks[t].step == step; t++) {
            const api_task *k = &job->tasks[t];
            ok = ok && !k->failed && !k->timed_out && k->end_us != 0;
            start = k->start_us < start ? k->start_us : start;
            end = k->end_us > end ? k->end_us : end;
        }
        if (ok) {
            *at = t;
            *scheme = srv_job_task_scheme(job, first);
            *seconds = (double)(end - start) / 1e6;
            return true;
        }
    }
    *at = t;
    return false;
}
