/* session_model.c - a session made from a served model's layer (issue #33,
 * docs/sessions.md "Sessions of a model's layer"): POST /v1/sessions's
 * "model" and "layer" (api/session_create.c takes the layer's scheme and dims
 * from here), the check a saved one passes at start (the model loaded, the
 * layer deriving the same scheme and dims), and an attention item over one,
 * which takes the layer's options as an item with that "model" and "layer"
 * would (api/model_item.c), but the session's scheme and k_norm.
 */
#include "api/request.h"

#include "api/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options of a layer a session cannot keep: attention whose cache is
 * not one layer's keys and values, or a scheme table no config holds. */
static bool layer_keepable(const api_session_model *fm, const api_ctx *ctx, api_err *e)
{
    const srv_model_layer *L = fm->layer;
    if (api_member(L->options, "mla") != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "model",
                        "%s is MLA (config \"%s\"): a session keeps one layer's keys and values, "
                        "not MLA's latent cache",
                        fm->who,
                        srv_model_source_of(L, "mla") ? srv_model_source_of(L, "mla")->key
                                                      : "model_type");
    if (api_member(L->options, "differential") != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "model",
                        "%s is differential attention: its pairs of heads cannot keep a session",
                        fm->who);
    for (size_t i = 0; i < L->n_needs; i++)
        if (strncmp(L->needs[i].field, "scheme.", 7) == 0)
            return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "model",
                            "%s's scheme needs %s (%s), which no config holds: create the "
                            "session with \"scheme\" and the table instead of \"model\"",
                            fm->who, L->needs[i].field, L->needs[i].what);
    return true;
}

bool api_session_model_parse(const cJSON *root, const api_ctx *ctx, api_session_model *fm,
                             api_err *e)
{
    const cJSON *mv = api_member(root, "model"), *lv = api_member(root, "layer");
    int32_t layer = 0;

    memset(fm, 0, sizeof *fm);
    if (mv == NULL) {
        if (lv != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "layer",
                            "layer applies to a model: send \"model\" (a model loaded with "
                            "--model) with it, or \"scheme\" without it");
        return true;
    }
    if (!cJSON_IsString(mv))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "model",
                        "model must be the name of a model loaded with --model (a session keeps "
                        "its model by name), found %s",
                        api_json_type(mv));
    if (api_member(root, "scheme") != NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme",
                        "scheme comes from the config of model \"%.64s\": send \"scheme\" or "
                        "\"model\" and \"layer\", not both",
                        mv->valuestring);
    if (!api_model_find(ctx, mv->valuestring, false, &fm->model, e))
        return false;
    if (lv == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "layer",
                        "layer is required with model: the layer of model \"%s\" (0 to %d) "
                        "whose keys and values the session keeps",
                        fm->model->name, (int)fm->model->n_layers - 1);
    if (!api_get_int(lv, "layer", ctx, &layer, e))
        return false;
    if ((fm->layer = srv_model_layer_at(fm->model, NULL, layer)) == NULL)
        return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "layer",
                        "layer=%d is outside the %d layers of model \"%s\" (%s): 0 to %d",
                        (int)layer, (int)fm->model->n_layers, fm->model->name,
                        fm->model->model_type, (int)fm->model->n_layers - 1);
    api_model_label(fm->model, fm->layer, fm->who, sizeof fm->who);
    return layer_keepable(fm, ctx, e);
}

bool api_session_model_still(const api_ctx *ctx, const cJSON *scheme, const srv_kv_spec *spec,
                             char *err, size_t cap)
{
    const srv_model *m =
        ctx->lim != NULL ? srv_model_set_find(ctx->lim->models, spec->model) : NULL;
    const srv_model_layer *L = m != NULL ? srv_model_layer_at(m, NULL, spec->layer) : NULL;
    if (m == NULL)
        snprintf(err, cap, "it was made from model \"%s\", which is not loaded (--model %s=...)",
                 spec->model, spec->model);
    else if (L == NULL)
        snprintf(err, cap, "it was made from layer %d of model \"%s\", which has %d layers now",
                 (int)spec->layer, spec->model, (int)m->n_layers);
    else if (!cJSON_Compare(scheme, api_member(L->options, "scheme"), true) ||
             spec->num_kv_heads != L->num_kv_heads || spec->head_dim != L->head_dim ||
             spec->v_head_dim != L->head_dim)
        snprintf(err, cap,
                 "model \"%s\" layer %d's config now derives another scheme or other dims "
                 "(num_kv_heads=%d, head_dim=%d) than the session was made with (num_kv_heads=%d, "
                 "head_dim=%d, v_head_dim=%d)",
                 spec->model, (int)spec->layer, (int)L->num_kv_heads, (int)L->head_dim,
                 (int)spec->num_kv_heads, (int)spec->head_dim, (int)spec->v_head_dim);
    else
        return true;
    return false;
}

/* The options a session made from a model does not take from its layer:
 * the scheme is the session's own (kept with it), and its keys were
 * normalised before they were appended (a cache holds them after k_norm;
 * the core library refuses k_norm over paged keys). */
static const char *const session_kept[] = {"scheme", "k_norm"};

bool api_session_model_merge(const cJSON *obj, const api_ctx *ctx, api_model_use *mu, void **hold,
                             api_err *e)
{
    /* A list of sessions: its first one's layer (they share it: item_session.c) */
    const cJSON *id = cJSON_IsArray(api_member(obj, "session"))
                          ? cJSON_GetArrayItem(api_member(obj, "session"), 0)
                          : api_member(obj, "session");
    srv_kv_cache *c = ctx->lim != NULL ? ctx->lim->sessions : NULL;
    const srv_model *m = NULL;
    const srv_model_layer *L;
    srv_kv_info info;
    srv_kv_err ke;
    char who[160];

    *hold = NULL;
    memset(mu, 0, sizeof *mu);
    /* Unknown sessions and bad ids are api_item_parse_session's to refuse. */
    if (c == NULL || !cJSON_IsString(id) || !srv_kv_info_hold(c, id->valuestring, &info, hold, &ke))
        *hold = NULL;
    if (*hold == NULL || info.model[0] == '\0')
        return api_model_merge(obj, ctx, mu, e);
    if (!api_model_find(ctx, info.model, false, &m, e)) /* loaded at its creation: always there */
        return false;
    if ((L = srv_model_layer_at(m, NULL, info.layer)) == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "session",
                        "session '%s' names layer %d of model \"%s\", which has %d", info.id,
                        (int)info.layer, m->name, (int)m->n_layers);
    api_model_label(m, L, who, sizeof who);
    for (size_t i = 0; i < 2; i++) {
        const char *f = i == 0 ? "layer" : "stack";
        if (api_member(obj, f) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                            "%s is the session's: session '%s' keeps %s; leave %s out", f, info.id,
                            who, f);
    }
    return api_model_merge_layer(obj, ctx, m, L, session_kept,
                                 sizeof session_kept / sizeof *session_kept, mu, e);
}
