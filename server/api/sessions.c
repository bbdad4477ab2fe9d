/* sessions.c - /v1/sessions: sessions (KV caches that live in posattnd,
 * store/kv_cache.h) over the JSON API. POST /v1/sessions creates one (201),
 * GET /v1/sessions lists them (?offset=&limit=) with the cache's totals,
 * GET and DELETE /v1/sessions/{id} show and drop one, POST
 * /v1/sessions/{id}/append adds tokens' keys and values, POST
 * /v1/sessions/{id}/fork makes a copy-on-write copy (201). Every answer
 * that names a session is its JSON (session_fill). docs/sessions.md.
 *
 * A session is made from a scheme and its dims, or from a served model's
 * layer ("model", "layer": api/session_model.c): the layer's derived
 * scheme and dims, and the model's name and layer kept with the session
 * (its file too), so that an attention item over it takes that layer's
 * options. srv_job_session_step finds the session steps of a finished job
 * for the step histogram (runtime/metrics.h).
 *
 * Create and fork do their work when prepared (on the HTTP thread: they
 * copy no keys); an append runs as the job's one task (a worker, or the
 * HTTP thread when small), so two appends to one session can meet and the
 * second is refused (SESSION_BUSY). Every sessions request first drops the
 * sessions idle past --session-ttl (srv_kv_expire: from the least recently
 * used, stopping at the first that is not), as /metrics does.
 */
#include "api/job.h"
#include "api/json.h"
#include "api/request.h"
#include "codec/json_lift.h"
#include "store/kv_cache.h"
#include "store/kv_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LIST_DEFAULT = 100, LIST_MAX = 1000 };

_Static_assert((int)API_SESSION_ID_MAX == (int)SRV_KV_ID_LEN, "api/protocol.h's session id size");

/* ------------------------------------------------------------------------- */
/* Errors and the session's JSON                                             */
/* ------------------------------------------------------------------------- */

/* The store's error as the API's; SESSION_NOT_FOUND names this replica
 * (--replica-id), so that a client behind a balancer learns where its
 * request went. */
static void err_of_kv(api_err *e, const srv_kv_err *ke, const srv_limits *lim)
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
static bool cache_of(const srv_limits *lim, srv_kv_cache **c, api_err *e)
{
    if (lim == NULL || lim->sessions == NULL)
        return api_fail(e, NULL, SRV_ERR_NOT_IMPLEMENTED, "", "this server keeps no sessions");
    *c = lim->sessions;
    srv_kv_expire(*c);
    return true;
}

static const char *path_id(const srv_endpoint_args *a)
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
static bool session_fill(cJSON *o, const srv_kv_info *in)
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
    return session_fill(root, &m->info);
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

    if (!cache_of(ctx->lim, &c, e) ||
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
        err_of_kv(e, &ke, ctx->lim);
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
        err_of_kv(e, &ke, ctx->lim);
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

bool api_session_scheme_type(const srv_limits *lim, const char *id, pa_scheme_type *type,
                             api_err *e)
{
    srv_kv_cache *c = NULL;
    srv_kv_info info;
    srv_kv_err ke;
    if (!cache_of(lim, &c, e))
        return false;
    if (!srv_kv_info_get(c, id, &info, &ke) &&
        !(api_session_adopt(lim, id, &ke) && srv_kv_info_get(c, id, &info, &ke))) {
        err_of_kv(e, &ke, lim);
        return false;
    }
    *type = info.scheme_type;
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
    if (!cache_of(ctx->lim, &c, &e) ||
        !api_check_fields(root, NULL, 0, "", "a fork (it takes no fields)", ctx, &e))
        goto fail;
    if ((!srv_kv_fork(c, path_id(args), id, &ke) &&
         !(api_session_adopt(ctx->lim, path_id(args), &ke) &&
           srv_kv_fork(c, path_id(args), id, &ke))) ||
        !srv_kv_info_get(c, id, &info, &ke)) {
        err_of_kv(&e, &ke, ctx->lim);
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
    if (!cache_of(ctx->lim, &c, &e))
        goto fail;
    if (!srv_kv_info_get(c, path_id(args), &info, &ke) &&
        !(api_session_adopt(ctx->lim, path_id(args), &ke) &&
          srv_kv_info_get(c, path_id(args), &info, &ke))) {
        err_of_kv(&e, &ke, ctx->lim);
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
        err_of_kv(&e, &ke, a->lim);
        api_task_fail(job, i, &e);
    }
}

static bool append_render(srv_job *job, cJSON *root)
{
    const appending *a = job->impl;
    return session_fill(root, &a->after);
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

    if (!cache_of(lim, &c, &e) || !query_count(args, "offset", 0, SIZE_MAX / 2, &offset, &e) ||
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
        ok = session_fill(o, &infos[i]);
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

    if (!cache_of(lim, &c, &e)) {
        api_reply_err(reply, &e);
        return;
    }
    if (!srv_kv_info_get(c, path_id(args), &info, &ke) &&
        !(api_session_adopt(lim, path_id(args), &ke) &&
          srv_kv_info_get(c, path_id(args), &info, &ke))) {
        err_of_kv(&e, &ke, lim);
        api_reply_err(reply, &e);
        return;
    }
    root = cJSON_CreateObject();
    reply_root(reply, 200, root, root != NULL && session_fill(root, &info));
}

const srv_endpoint srv_ep_session_get = {
    .name = "session",
    .answer_args = get_answer,
};

bool api_session_delete(const srv_limits *lim, const char *id, api_err *e)
{
    srv_kv_cache *c = NULL;
    srv_kv_err ke;
    if (!cache_of(lim, &c, e))
        return false;
    if (!srv_kv_delete(c, id, &ke) &&
        !(api_session_adopt(lim, id, &ke) && srv_kv_delete(c, id, &ke))) {
        err_of_kv(e, &ke, lim);
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
    const char *id = path_id(args);

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
