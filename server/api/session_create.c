/* session_create.c - the requests that make a session (api/sessions.c
 * serves the rest of /v1/sessions): POST /v1/sessions creates one (201),
 * POST /v1/sessions/{id}/fork makes a copy-on-write copy (201). Both do
 * their work when prepared (on the HTTP thread: they copy no keys) and
 * answer with the new session's JSON (api_session_fill). docs/sessions.md.
 *
 * A session is made from a scheme and its dims, or from a served model's
 * layer ("model", "layer": api/session_model.c): the layer's derived
 * scheme and dims, and the model's name and layer kept with the session
 * (its file too), so that an attention item over it takes that layer's
 * options.
 */
#include "api/job.h"
#include "api/json.h"
#include "api/request.h"
#include "api/sessions.h"
#include "codec/json_lift.h"
#include "store/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert((int)API_SESSION_ID_MAX == (int)SRV_KV_ID_LEN, "api/protocol.h's session id size");

/* ------------------------------------------------------------------------- */
/* POST /v1/sessions                                                         */
/* ------------------------------------------------------------------------- */

/* The job of create and fork: done when prepared, rendered with status. */
typedef struct made {
    srv_kv_info info;
} made;

static void scheme_owner_free(void *owner)
{
    api_scheme_free(owner);
    free(owner);
}

/* dflt_window > 0: the window of a window eviction that gives none (a
 * session of a model's sliding-window layer: its window). */
static bool parse_eviction(const cJSON *node, const api_ctx *ctx, int32_t dflt_window,
                           srv_kv_spec *sp, api_err *e)
{
    static const char *const known[] = {"type", "window", "sinks", "reposition"};
    const char *type;
    const cJSON *m;
    bool present;

    sp->eviction = SRV_KV_EVICT_NONE;
    if (node == NULL)
        return true;
    if (!cJSON_IsObject(node))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "eviction",
                        "eviction must be an object ({\"type\": \"none\"} or {\"type\": "
                        "\"window\", \"window\": W, \"sinks\": S, \"reposition\": bool}), found %s",
                        api_json_type(node));
    if (!api_check_fields(node, known, 4, "eviction", "eviction", ctx, e))
        return false;
    m = api_member(node, "type");
    if (m == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "eviction.type",
                        "eviction.type is required: none or window");
    if (!api_get_string(m, "eviction.type", ctx, &type, e))
        return false;
    if (strcmp(type, "none") == 0) {
        for (size_t i = 1; i < 4; i++)
            if (api_member(node, known[i]) != NULL) {
                char f[32];
                snprintf(f, sizeof f, "eviction.%s", known[i]);
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                                "eviction.%s belongs to eviction type 'window', not 'none'",
                                known[i]);
            }
        return true;
    }
    if (strcmp(type, "window") != 0)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "eviction.type",
                        "eviction.type='%.32s' is not an eviction: none or window", type);
    sp->eviction = SRV_KV_EVICT_WINDOW;
    if (!api_opt_int(node, "window", ctx, &sp->window, &present, e))
        return false;
    if (!present && dflt_window > 0)
        sp->window = dflt_window;
    else if (!present)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "eviction.window",
                        "eviction.window is required with type 'window' (but for a sliding "
                        "layer of a model): the recent tokens kept");
    if (!api_opt_int(node, "sinks", ctx, &sp->sinks, &present, e))
        return false;
    m = api_member(node, "reposition");
    return m == NULL || api_get_bool(m, "eviction.reposition", ctx, &sp->reposition, e);
}

/* A dimension of a create request (name) into *out: the model layer's
 * (want, its config key src) when from a model, and then a given value
 * must agree; else required (what says what it is) unless dflt > 0. */
static bool parse_dim(const cJSON *root, const api_ctx *ctx, const char *name, const char *what,
                      const api_session_model *fm, int32_t want, const srv_model_source *src,
                      int32_t dflt, int32_t *out, api_err *e)
{
    bool present;
    if (!api_opt_int(root, name, ctx, out, &present, e))
        return false;
    if (fm->model != NULL) {
        if (present && *out != want)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s=%d does not match the %d of %s (config \"%s\": %s): leave it "
                            "out, or send %d",
                            name, (int)*out, (int)want, fm->who, src != NULL ? src->key : "",
                            src != NULL ? src->value : "", (int)want);
        *out = want;
        return true;
    }
    if (!present && dflt > 0) {
        *out = dflt;
        return true;
    }
    if (!present)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s is required: %s", name, what);
    return true;
}

/* The spec of a create request; the scheme is malloc'd into *owner. */
static bool parse_spec(const cJSON *root, const api_ctx *ctx, const api_session_model *fm,
                       srv_kv_spec *sp, api_scheme **owner, api_err *e)
{
    const srv_model_layer *L = fm->layer;
    const cJSON *m, *lw = L != NULL ? api_member(L->options, "window") : NULL;
    bool present;

    memset(sp, 0, sizeof *sp);
    *owner = NULL;
    if (!parse_dim(root, ctx, "num_kv_heads", "the heads of the keys and values (Hkv)", fm,
                   L ? L->num_kv_heads : 0, L ? &L->kv_heads : NULL, 0, &sp->num_kv_heads, e) ||
        !parse_dim(root, ctx, "head_dim", "the keys' dimension per head (D)", fm,
                   L ? L->head_dim : 0, L ? &L->dim : NULL, 0, &sp->head_dim, e) ||
        /* A model's values are as wide as its keys (MLA, whose are not, is
         * refused above). */
        !parse_dim(root, ctx, "v_head_dim", "the values' dimension per head (Dv)", fm,
                   L ? L->head_dim : 0, L ? &L->dim : NULL, sp->head_dim, &sp->v_head_dim, e))
        return false;
    if ((m = api_member(root, "dtype")) != NULL) {
        const char *dt;
        if (!api_get_string(m, "dtype", ctx, &dt, e))
            return false;
        if (strcmp(dt, "bf16") == 0)
            sp->dtype = PA_DTYPE_BF16;
        else if (strcmp(dt, "f16") == 0)
            sp->dtype = PA_DTYPE_F16;
        else if (strcmp(dt, "f32") == 0)
            sp->dtype = PA_DTYPE_F32;
        else
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "dtype",
                            "dtype='%.32s' is not a storage type (f32, bf16, f16)", dt);
    }
    if (!parse_eviction(api_member(root, "eviction"), ctx,
                        cJSON_IsNumber(lw) ? (int32_t)lw->valuedouble : 0, sp, e))
        return false;
    if (!api_opt_int(root, "max_tokens", ctx, &sp->max_tokens, &present, e))
        return false;
    if (!present) {
        if (sp->eviction != SRV_KV_EVICT_WINDOW)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "max_tokens",
                            "max_tokens is required with eviction 'none': the most tokens the "
                            "session keeps");
        sp->max_tokens = sp->window > 0 && sp->sinks >= 0 && sp->sinks <= INT32_MAX - sp->window
                             ? sp->sinks + sp->window
                             : 0;
    }
    *owner = malloc(sizeof **owner);
    if (*owner == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    if (!api_scheme_parse(L != NULL ? api_member(L->options, "scheme") : api_member(root, "scheme"),
                          ctx, *owner, e)) {
        free(*owner);
        *owner = NULL;
        return false;
    }
    if (fm->model != NULL) {
        sp->model = fm->model->name;
        sp->layer = L->layer;
    }
    sp->scheme = &(*owner)->s;
    sp->scheme_owner = *owner;
    sp->scheme_free = scheme_owner_free;
    return true;
}

/* Replaces, in a copy of the request's tree, each array the parser lifted
 * out of the body (codec/json_lift.h: a marker string) by its original
 * text, so that the copy prints as the client sent it. */
static bool unlift(cJSON *node, const srv_lift *lift)
{
    for (cJSON *ch = node->child; ch != NULL; ch = ch->next) {
        const srv_lifted *l = cJSON_IsString(ch) ? srv_lift_find(lift, ch) : NULL;
        cJSON *rep;
        if (l == NULL) {
            if ((cJSON_IsObject(ch) || cJSON_IsArray(ch)) && !unlift(ch, lift))
                return false;
            continue;
        }
        rep = cJSON_ParseWithLength(l->text, l->text_len);
        if (rep == NULL && l->b64) { /* the string's characters without quotes */
            char *t = malloc(l->text_len + 1);
            if (t == NULL)
                return false;
            memcpy(t, l->text, l->text_len);
            t[l->text_len] = '\0';
            rep = cJSON_CreateString(t);
            free(t);
        }
        /* ReplaceItemViaPointer keeps no member name: the object's own
         * replace names it. */
        if (rep == NULL ||
            !(ch->string != NULL ? cJSON_ReplaceItemInObjectCaseSensitive(node, ch->string, rep)
                                 : cJSON_ReplaceItemViaPointer(node, ch, rep))) {
            cJSON_Delete(rep);
            return false;
        }
        ch = rep;
    }
    return true;
}

/* The request's "scheme" as JSON text (malloc'd), what a snapshot keeps to
 * rebuild it (srv_api_session_scheme); NULL when out of memory. */
static char *scheme_text(const cJSON *node, const api_ctx *ctx)
{
    cJSON *copy = cJSON_Duplicate(node, true);
    char *text = NULL;
    if (copy != NULL && (ctx->lift == NULL || unlift(copy, ctx->lift)))
        text = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    return text;
}

static bool made_render(srv_job *job, cJSON *root)
{
    const made *m = job->impl;
    return api_session_fill(root, &m->info);
}

static void made_destroy(void *impl)
{
    free(impl);
}

/* A job of no task whose answer is info, 201. */
static bool made_job(const srv_endpoint *ep, const srv_kv_info *info, srv_job **job,
                     srv_reply *reply)
{
    made *m = malloc(sizeof *m);
    *job = m != NULL ? api_job_new(ep, 0) : NULL;
    if (*job == NULL) {
        free(m);
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory");
        return false;
    }
    m->info = *info;
    (*job)->impl = m;
    (*job)->status = 201;
    return true;
}

/* Creates the session root describes (a POST /v1/sessions body) into
 * *info; false with e set, the cache unchanged. */
static bool create_session(const cJSON *root, const api_ctx *ctx, srv_kv_info *info, api_err *e)
{
    static const char *const known[] = {"scheme", "num_kv_heads", "head_dim", "v_head_dim",
                                        "dtype",  "max_tokens",   "eviction", "id",
                                        "model",  "layer"};
    srv_kv_cache *c = NULL;
    srv_kv_spec sp;
    srv_kv_err ke;
    api_scheme *owner = NULL;
    char id[SRV_KV_ID_LEN], *scheme_json;
    const char *want_id = NULL;
    const cJSON *m;
    api_session_model fm;
    bool ok;

    if (!api_session_cache(ctx->lim, &c, e) ||
        !api_check_fields(root, known, sizeof known / sizeof *known, "", "a session", ctx, e))
        return false;
    /* The client's id (for a balancer that routes by it), checked first
     * so that a bad one is named before the rest. */
    if ((m = api_member(root, "id")) != NULL) {
        if (!api_get_string(m, "id", ctx, &want_id, e))
            return false;
        if (!srv_kv_id_valid(want_id))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "id",
                            "id='%.80s' is not a session id: 1 to %d characters of A-Z a-z 0-9 _ "
                            ". -, not starting with '.'",
                            want_id, SRV_KV_ID_LEN - 1);
    }
    if (!api_session_model_parse(root, ctx, &fm, e) || !parse_spec(root, ctx, &fm, &sp, &owner, e))
        return false;
    if (!api_check_memory(owner->bytes, ctx->lim, e)) {
        scheme_owner_free(owner);
        return false;
    }
    /* The scheme as sent (or as the model's layer derived it), so that the
     * session can be saved (--cache-dir). */
    sp.scheme_json = scheme_json =
        fm.model != NULL ? cJSON_PrintUnformatted(api_member(fm.layer->options, "scheme"))
                         : scheme_text(api_member(root, "scheme"), ctx);
    if (scheme_json == NULL) {
        scheme_owner_free(owner);
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    }
    ok = srv_kv_create_as(c, &sp, want_id, id, &ke);
    free(scheme_json); /* the session keeps a copy */
    if (!ok) {
        scheme_owner_free(owner); /* still ours on failure */
        api_session_err(e, &ke, ctx->lim);
        /* A scheme the request did not send: named by the model's layer. */
        if (fm.model != NULL && strncmp(e->field, "scheme", 6) == 0) {
            const size_t w = strlen(fm.who) + 2; /* "who: " before the message */
            size_t n = strlen(e->message);
            if (w + n >= sizeof e->message)
                n = sizeof e->message - w - 1;
            memmove(e->message + w, e->message, n);
            e->message[w + n] = '\0';
            memcpy(e->message, fm.who, w - 2);
            memcpy(e->message + w - 2, ": ", 2);
            snprintf(e->field, sizeof e->field, "%s", "model");
        }
        return false;
    }
    if (!srv_kv_info_get(c, id, info, &ke)) { /* expired or deleted already */
        api_session_err(e, &ke, ctx->lim);
        return false;
    }
    return true;
}

bool api_session_create(const cJSON *spec, const api_ctx *ctx, char id[API_SESSION_ID_MAX],
                        api_err *e)
{
    srv_kv_info info;
    if (!create_session(spec, ctx, &info, e))
        return false;
    snprintf(id, API_SESSION_ID_MAX, "%s", info.id);
    return true;
}

static bool create_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply)
{
    srv_kv_info info;
    api_err e;

    *job = NULL;
    if (!create_session(root, ctx, &info, &e)) {
        api_reply_err(reply, &e);
        return false;
    }
    return made_job(&srv_ep_sessions_create, &info, job, reply);
}

/* Create and fork render the whole answer (no timing: nothing was
 * computed), so they are marked batch. */
const srv_endpoint srv_ep_sessions_create = {
    .name = "sessions_create",
    .batch = true,
    .prepare = create_prepare,
    .render = made_render,
    .destroy = made_destroy,
};

/* ------------------------------------------------------------------------- */
/* POST /v1/sessions/{id}/fork                                               */
/* ------------------------------------------------------------------------- */

static bool fork_prepare(const cJSON *root, const api_ctx *ctx, const srv_endpoint_args *args,
                         srv_job **job, srv_reply *reply)
{
    srv_kv_cache *c = NULL;
    srv_kv_info info;
    srv_kv_err ke;
    char id[SRV_KV_ID_LEN];
    api_err e;

    *job = NULL;
    if (!api_session_cache(ctx->lim, &c, &e) ||
        !api_check_fields(root, NULL, 0, "", "a fork (it takes no fields)", ctx, &e))
        goto fail;
    if ((!srv_kv_fork(c, api_session_path_id(args), id, &ke) &&
         !(api_session_adopt(ctx->lim, api_session_path_id(args), &ke) &&
           srv_kv_fork(c, api_session_path_id(args), id, &ke))) ||
        !srv_kv_info_get(c, id, &info, &ke)) {
        api_session_err(&e, &ke, ctx->lim);
        goto fail;
    }
    return made_job(&srv_ep_session_fork, &info, job, reply);

fail:
    api_reply_err(reply, &e);
    return false;
}

const srv_endpoint srv_ep_session_fork = {
    .name = "session_fork",
    .batch = true,
    .body_optional = true,
    .prepare_args = fork_prepare,
    .render = made_render,
    .destroy = made_destroy,
};
