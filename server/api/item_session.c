/* item_session.c - an attention item that names a session (issue #33):
 * "session": ID instead of k and v, with q [Lq, H, D] and an optional
 * "append": {"k", "v", "k_positions"} applied first, so that a decode step
 * is one round trip. The keys and values are the session's pages in place
 * (pa_attention's k_pages, v_pages), at its virtual positions
 * (store/kv_cache.h), kept rotated when its scheme is rope
 * (k_prerotated); the scheme is the session's.
 *
 * The item is read against the session as it is (api_item_parse_session):
 * q and the append are checked and the keys sized as the append will leave
 * them (a window keeps at most sinks + window), so every field is checked
 * before anything changes. Then:
 *   - without an append, api_item_session_commit takes the view the tasks
 *     read, at once (held until the item is freed: a later append or
 *     delete does not change what it reads);
 *   - with one, nothing changes until the item's first task starts
 *     (api_item_session_start): a request refused after it was read (the
 *     queue full, its deadline passed) leaves the session as it was. The
 *     append then lands only if the session took no token since the item
 *     was read (else SESSION_BUSY, nothing appended), and the view is taken
 *     in the same step. The item's other parts wait for it; a part that
 *     finds its deadline passed before then abandons the item (its append
 *     never lands), and once the append landed every part runs, deadline
 *     or not (api_item_session_keep), so an answer never hides an append.
 * A query's default position follows the session's last token:
 * next_position - Lq + i.
 */
#include "api/request.h"

#include "api/json.h"

#include <sched.h>
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
    it->sess_lim = ctx->lim;
    it->sess_expect = info.appended;
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
    it->sess_pending = it->app_n > 0;
    atomic_init(&it->sess_state, API_SESS_ST_OPEN);
    return true;
}

/* The item reads the view it holds (it->sess_view), checked as it now is:
 * the session may have taken tokens between the item's checks and the
 * view (a read without an append). */
static bool adopt_view(api_item *it, const api_ctx *ctx, api_err *e)
{
    pa_error pe;
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
    if (pa_attention_check(&it->att, &pe) != PA_STATUS_OK) {
        api_fail_pa(e, ctx, &pe);
        return false;
    }
    return true;
}

bool api_item_session_commit(api_item *it, const api_ctx *ctx, api_err *e)
{
    srv_kv_err ke;
    if (it->sess_pending) /* at its first task (api_item_session_start) */
        return true;
    if (!srv_kv_view_take(it->sess_cache, it->session_id, &it->sess_view, &ke))
        return from_kv(e, ctx, &ke);
    return adopt_view(it, ctx, e);
}

/* The append and its view, once: api_item_session_start's first part. */
static bool append_now(api_item *it, const api_ctx *ctx, api_err *e)
{
    srv_kv_err ke;
    api_err ignored;
    if (!srv_kv_append_view(it->sess_cache, it->session_id, it->app_k.data, it->app_v.data,
                            it->app_n, it->app_pos, it->sess_expect, &it->sess_view, &ke))
        return from_kv(e, ctx, &ke);
    if (!adopt_view(it, ctx, e))
        return false;
    /* A v2 sequence_end: the view keeps what this step reads. */
    if (it->sess_end)
        api_session_delete(it->sess_lim, it->session_id, &ignored);
    return true;
}

api_sess_start api_item_session_start(api_item *it, const api_ctx *ctx, api_err *e)
{
    int st = API_SESS_ST_OPEN;
    if (!it->sess_pending)
        return API_SESS_RUN;
    if (atomic_compare_exchange_strong(&it->sess_state, &st, API_SESS_ST_COMMITTING)) {
        const bool ok = append_now(it, ctx, e);
        atomic_store(&it->sess_state, ok ? API_SESS_ST_DONE : API_SESS_ST_FAILED);
        return ok ? API_SESS_RUN : API_SESS_FAILS;
    }
    while (st == API_SESS_ST_COMMITTING) { /* another part appends: an append's time */
        sched_yield();
        st = atomic_load(&it->sess_state);
    }
    return st == API_SESS_ST_DONE ? API_SESS_RUN : st == API_SESS_ST_FAILED ? API_SESS_SKIP
                                                                      : API_SESS_ABANDONED;
}

bool api_item_session_keep(api_item *it)
{
    int st = API_SESS_ST_OPEN;
    if (!it->sess_pending)
        return false;
    if (atomic_compare_exchange_strong(&it->sess_state, &st, API_SESS_ST_ABANDONED))
        return false;
    return st != API_SESS_ST_ABANDONED;
}

bool api_item_session_own(api_item *it, bool created, bool end, api_err *e)
{
    if (!it->session)
        return true;
    if (it->sess_pending) {
        it->sess_created = created;
        it->sess_end = end;
        return true;
    }
    return !end || api_session_delete(it->sess_lim, it->session_id, e);
}

void api_item_session_free(api_item *it)
{
    /* A session this request created whose append never landed is not
     * left behind (a refused v2 sequence_start). */
    if (it->sess_created && atomic_load(&it->sess_state) != API_SESS_ST_DONE) {
        api_err ignored;
        api_session_delete(it->sess_lim, it->session_id, &ignored);
    }
    it->sess_created = false;
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
