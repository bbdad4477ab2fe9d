/* item_session.c - an attention item that names a session (issue #33):
 * "session": ID instead of k and v, with q [Lq, H, D] and an optional
 * "append": {"k", "v", "k_positions"} applied first, so that a decode step
 * is one round trip. The keys and values are the session's pages in place
 * (pa_attention's k_pages, v_pages), at its virtual positions
 * (store/kv_cache.h), kept rotated when its scheme is rope
 * (k_prerotated); the scheme is the session's.
 *
 * The item is read in two steps around api_item_parse's checks:
 * api_item_parse_session reads q and the append against the session as it
 * is and sizes the keys as the append will leave them (a window keeps at
 * most sinks + window), so every field is checked before anything changes;
 * api_item_session_commit then appends and takes the view the task reads
 * (held until the item is freed: a later append or delete does not change
 * what it reads). A query's default position follows the session's last
 * token: next_position - Lq + i.
 */
#include "api/request.h"

#include "api/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fields an item with a session may not have: the session provides them. */
static const char *const refused[] = {
    "k",
    "v",
    "x",
    "scheme",
    "k_positions",
    "k_prerotated",
    "key_length",
    "mla",
    "differential",
    "cu_seqlens",
    "cu_seqlens_k",
    "query_length",
    "model",
    "w_q",
    "w_k",
    "w_v",
    "w_o",
};

static bool from_kv(api_err *e, const api_ctx *ctx, const srv_kv_err *ke)
{
    return api_fail(e, ctx, ke->code, ke->field, "%s", ke->message);
}

/* t.shape[d] against the session's figure what = want (sessions.c too). */
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

/* The append's tensors and positions, checked against the session. */
static bool parse_append(const cJSON *a, const api_ctx *ctx, const srv_kv_spec *sp, api_item *it,
                         api_err *e)
{
    static const char *const known[] = {"k", "v", "k_positions"};
    const cJSON *m;
    if (!cJSON_IsObject(a))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "append",
                        "append must be an object {\"k\": [n, num_kv_heads, head_dim], \"v\": "
                        "[n, num_kv_heads, v_head_dim], \"k_positions\": [n]}, found %s",
                        api_json_type(a));
    if (!api_check_fields(a, known, 3, "append", "an append", ctx, e))
        return false;
    if (api_member(a, "k") == NULL || api_member(a, "v") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT,
                        api_member(a, "k") == NULL ? "append.k" : "append.v",
                        "an append needs k [n, num_kv_heads, head_dim] and v [n, num_kv_heads, "
                        "v_head_dim]");
    if (!api_get_tensor(api_member(a, "k"), "append.k", ctx, 3, &it->app_k, e) ||
        !api_get_tensor(api_member(a, "v"), "append.v", ctx, 3, &it->app_v, e) ||
        !api_session_dim(&it->app_k, "append.k", 1, sp->num_kv_heads, "num_kv_heads", ctx, e) ||
        !api_session_dim(&it->app_k, "append.k", 2, sp->head_dim, "head_dim", ctx, e) ||
        !api_session_dim(&it->app_v, "append.v", 1, sp->num_kv_heads, "num_kv_heads", ctx, e) ||
        !api_session_dim(&it->app_v, "append.v", 2, sp->v_head_dim, "v_head_dim", ctx, e))
        return false;
    if (it->app_v.shape[0] != it->app_k.shape[0])
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "append.v.shape[0]",
                        "append.v.shape[0]=%lld does not equal append.k.shape[0]=%lld",
                        (long long)it->app_v.shape[0], (long long)it->app_k.shape[0]);
    it->app_n = (int32_t)it->app_k.shape[0];
    if ((m = api_member(a, "k_positions")) != NULL) {
        int32_t n;
        if (!api_get_int_array(m, "append.k_positions", ctx, &it->app_pos, &n, e))
            return false;
        if (n != it->app_n)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "append.k_positions",
                            "append.k_positions has %d values, append.k.shape[0]=%d", (int)n,
                            (int)it->app_n);
    }
    it->input_bytes = api_add_sat(api_add_sat(it->input_bytes, api_tensor_bytes(&it->app_k)),
                                  api_tensor_bytes(&it->app_v));
    return true;
}

/* Retained tokens after appending n to a session of info (all or none). */
static int64_t length_after(const srv_kv_info *info, int32_t n)
{
    const srv_kv_spec *sp = &info->spec;
    const int64_t len = (int64_t)info->length + n;
    if (sp->eviction == SRV_KV_EVICT_WINDOW && len > (int64_t)sp->sinks + sp->window)
        return (int64_t)sp->sinks + sp->window;
    return len;
}

bool api_item_parse_session(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *id = api_member(obj, "session"), *qs;
    srv_kv_info info;
    srv_kv_err ke;
    int64_t lk, pages;
    const srv_kv_spec *sp = &info.spec;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (api_member(obj, refused[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, refused[i],
                            "%s is the session's: an item with \"session\" sends q (and an "
                            "\"append\" of new keys and values), not %s",
                            refused[i], refused[i]);
    if (!cJSON_IsString(id) || id->valuestring[0] == '\0')
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "session",
                        "session must be a session's id (a string from POST /v1/sessions), "
                        "found %s",
                        api_json_type(id));
    if (ctx->lim == NULL || ctx->lim->sessions == NULL)
        return api_fail(e, ctx, SRV_ERR_NOT_FOUND, "session",
                        "this server keeps no sessions (it was started without a session cache)");
    it->sess_cache = ctx->lim->sessions;
    if (!srv_kv_info_hold(it->sess_cache, id->valuestring, &info, &it->sess_hold, &ke))
        return from_kv(e, ctx, &ke);
    snprintf(it->session_id, sizeof it->session_id, "%s", info.id);
    it->session = true;
    /* The session's scheme (held until the item is freed). */
    it->scheme.s = *sp->scheme;
    pa_attention_init(&it->att, &it->scheme.s);
    if (api_member(obj, "q") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q",
                        "q [Lq, num_heads, head_dim] is required with a session");
    qs = cJSON_GetObjectItemCaseSensitive(api_member(obj, "q"), "shape");
    if (cJSON_GetArraySize(qs) == 4)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q.shape",
                        "q has 4 dimensions (a batch): an item with one session takes q [Lq, "
                        "num_heads, head_dim]; send one item per session");
    if (!api_get_tensor(api_member(obj, "q"), "q", ctx, 3, &it->q, e) ||
        !api_session_dim(&it->q, "q", 2, sp->head_dim, "head_dim", ctx, e))
        return false;
    if (it->q.shape[1] % sp->num_kv_heads != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "q.shape[1]",
                        "q.shape[1]=%lld query heads: the session's num_kv_heads=%d must divide "
                        "them",
                        (long long)it->q.shape[1], (int)sp->num_kv_heads);
    if (api_member(obj, "append") != NULL &&
        !parse_append(api_member(obj, "append"), ctx, sp, it, e))
        return false;
    lk = length_after(&info, it->app_n);
    if (lk < 1)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "session",
                        "session '%s' holds no tokens: append some first (\"append\")",
                        it->session_id);
    if (sp->eviction == SRV_KV_EVICT_NONE && lk > sp->max_tokens)
        return api_fail(e, ctx, SRV_ERR_SESSION_FULL, "append.k",
                        "session '%s' holds %d of its max_tokens=%d tokens: %d more do not fit "
                        "(eviction none)",
                        it->session_id, (int)info.length, (int)sp->max_tokens, (int)it->app_n);
    it->Lq = (int32_t)it->q.shape[0];
    it->H = (int32_t)it->q.shape[1];
    it->D = sp->head_dim;
    it->Dv = sp->v_head_dim;
    it->Hkv = sp->num_kv_heads;
    it->Lk = (int32_t)lk;
    it->B = 1;
    /* The descriptor as the append will leave it; its pages until then
     * are stand-ins the checks only count. */
    pages = (lk + info.page_tokens - 1) / info.page_tokens;
    it->sess_pages = calloc((size_t)pages, sizeof *it->sess_pages);
    if (it->sess_pages == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    for (int64_t p = 0; p < pages; p++)
        it->sess_pages[p] = it->q.data; /* never read */
    it->att.num_heads = it->H;
    it->att.num_kv_heads = it->Hkv;
    it->att.head_dim = it->D;
    it->att.v_head_dim = it->Dv;
    it->att.q_len = it->Lq;
    it->att.k_len = it->Lk;
    it->att.q = it->q.data;
    it->att.k_pages = it->sess_pages;
    it->att.v_pages = it->sess_pages;
    it->att.page_tokens = info.page_tokens;
    it->att.k_prerotated = info.prerotated;
    it->out_ndim = 3;
    it->out_shape[0] = it->Lq;
    it->out_shape[1] = it->H;
    it->out_shape[2] = it->Dv;
    return true;
}

bool api_item_session_commit(api_item *it, const api_ctx *ctx, api_err *e)
{
    srv_kv_err ke;
    pa_error pe;
    if (it->app_n > 0 && !srv_kv_append(it->sess_cache, it->session_id, it->app_k.data,
                                        it->app_v.data, it->app_n, it->app_pos, &ke))
        return from_kv(e, ctx, &ke);
    if (!srv_kv_view_take(it->sess_cache, it->session_id, &it->sess_view, &ke))
        return from_kv(e, ctx, &ke);
    it->sess_viewed = true;
    it->Lk = it->sess_view.length;
    it->att.k_len = it->Lk;
    it->att.k_pages = it->sess_view.k_pages;
    it->att.v_pages = it->sess_view.v_pages;
    it->att.page_tokens = it->sess_view.page_tokens;
    it->att.k_positions = it->sess_view.positions;
    it->att.k_prerotated = it->sess_view.prerotated;
    if (it->att.q_positions == NULL) { /* the session's last Lq tokens */
        it->default_qpos = malloc((size_t)it->Lq * sizeof *it->default_qpos);
        if (it->default_qpos == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        for (int32_t i = 0; i < it->Lq; i++)
            it->default_qpos[i] = it->sess_view.next_position - it->Lq + i;
        it->att.q_positions = it->default_qpos;
    }
    /* Another request may have appended between the checks and the view:
     * the call as it now is. */
    if (pa_attention_check(&it->att, &pe) != PA_STATUS_OK) {
        api_fail_pa(e, ctx, &pe);
        return false;
    }
    return true;
}

void api_item_session_free(api_item *it)
{
    if (it->sess_viewed)
        srv_kv_view_release(it->sess_cache, &it->sess_view);
    if (it->sess_hold != NULL)
        srv_kv_scheme_release(it->sess_cache, it->sess_hold);
    it->sess_viewed = false;
    it->sess_hold = NULL;
    api_tensor_release(&it->app_k);
    api_tensor_release(&it->app_v);
    free(it->app_pos);
    free(it->sess_pages);
    it->app_pos = NULL;
    it->sess_pages = NULL;
}
