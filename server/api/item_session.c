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

/* The append's tensors and positions, checked against the sessions'
 * shapes (sp): k [n, Hkv, D], v [n, Hkv, Dv], k_positions [n], with a
 * leading [B] for a list of B sessions (k_positions [B, n]). */
static bool parse_append(const cJSON *a, const api_ctx *ctx, const srv_kv_spec *sp, api_item *it,
                         api_err *e)
{
    static const char *const known[] = {"k", "v", "k_positions"};
    const int o = it->batched ? 1 : 0, nd = 3 + o;
    const cJSON *m;
    if (!cJSON_IsObject(a))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "append",
                        "append must be an object {\"k\": [%sn, num_kv_heads, head_dim], \"v\": "
                        "[%sn, num_kv_heads, v_head_dim], \"k_positions\": [%sn]}, found %s",
                        o ? "B, " : "", o ? "B, " : "", o ? "B, " : "", api_json_type(a));
    if (!api_check_fields(a, known, 3, "append", "an append", ctx, e))
        return false;
    if (api_member(a, "k") == NULL || api_member(a, "v") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT,
                        api_member(a, "k") == NULL ? "append.k" : "append.v",
                        "an append needs k [%sn, num_kv_heads, head_dim] and v [%sn, "
                        "num_kv_heads, v_head_dim]",
                        o ? "B, " : "", o ? "B, " : "");
    if (!api_get_tensor(api_member(a, "k"), "append.k", ctx, nd, &it->app_k, e) ||
        !api_get_tensor(api_member(a, "v"), "append.v", ctx, nd, &it->app_v, e) ||
        (o && !api_session_dim(&it->app_k, "append.k", 0, it->n_sess, "count (of \"session\")",
                               ctx, e)) ||
        (o && !api_session_dim(&it->app_v, "append.v", 0, it->n_sess, "count (of \"session\")",
                               ctx, e)) ||
        !api_session_dim(&it->app_k, "append.k", 1 + o, sp->num_kv_heads, "num_kv_heads", ctx,
                         e) ||
        !api_session_dim(&it->app_k, "append.k", 2 + o, sp->head_dim, "head_dim", ctx, e) ||
        !api_session_dim(&it->app_v, "append.v", 1 + o, sp->num_kv_heads, "num_kv_heads", ctx,
                         e) ||
        !api_session_dim(&it->app_v, "append.v", 2 + o, sp->v_head_dim, "v_head_dim", ctx, e))
        return false;
    if (it->app_v.shape[o] != it->app_k.shape[o])
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, o ? "append.v.shape[1]" : "append.v.shape[0]",
                        "append.v.shape[%d]=%lld does not equal append.k.shape[%d]=%lld", o,
                        (long long)it->app_v.shape[o], o, (long long)it->app_k.shape[o]);
    it->app_n = (int32_t)it->app_k.shape[o];
    if ((m = api_member(a, "k_positions")) != NULL) {
        const int rows = o ? it->n_sess : 1;
        it->app_pos = malloc((size_t)rows * (size_t)it->app_n * sizeof *it->app_pos);
        if (it->app_pos == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        if (o && (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != rows))
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "append.k_positions",
                            "append.k_positions must be [B, n] = [%d, %d] with a list of "
                            "sessions",
                            rows, (int)it->app_n);
        for (int r = 0; r < rows; r++) {
            int32_t n, *row;
            char f[40];
            snprintf(f, sizeof f, o ? "append.k_positions[%d]" : "append.k_positions", r);
            if (!api_get_int_array(o ? cJSON_GetArrayItem(m, r) : m, f, ctx, &row, &n, e))
                return false;
            if (n != it->app_n) {
                free(row);
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, f,
                                "%s has %d values, append.k.shape[%d]=%d", f, (int)n, o,
                                (int)it->app_n);
            }
            memcpy(it->app_pos + (size_t)r * it->app_n, row, (size_t)n * sizeof *row);
            free(row);
        }
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

/* Session b of a list against session 0: what one descriptor must share
 * (the heads, the dims, the scheme as sent, keys kept rotated or not). */
static bool same_kind(const srv_kv_info *first, const srv_kv_info *in, int32_t b,
                      const api_ctx *ctx, api_err *e)
{
    const srv_kv_spec *p = &first->spec, *q = &in->spec;
    const char *what = NULL;
    int64_t x = 0, y = 0;
    char f[32];
    if (p->num_kv_heads != q->num_kv_heads)
        what = "num_kv_heads", x = p->num_kv_heads, y = q->num_kv_heads;
    else if (p->head_dim != q->head_dim)
        what = "head_dim", x = p->head_dim, y = q->head_dim;
    else if (p->v_head_dim != q->v_head_dim)
        what = "v_head_dim", x = p->v_head_dim, y = q->v_head_dim;
    snprintf(f, sizeof f, "session[%d]", (int)b);
    if (what == NULL && p->dtype != q->dtype)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, f,
                        "session[%d] '%s' stores %s, session[0] '%s' stores %s: the sessions of "
                        "one item share their storage type",
                        (int)b, in->id, pa_dtype_name(q->dtype), first->id,
                        pa_dtype_name(p->dtype));
    if (what != NULL)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, f,
                        "session[%d] '%s' has %s=%lld, session[0] '%s' has %lld: the sessions of "
                        "one item share their shapes",
                        (int)b, in->id, what, (long long)y, first->id, (long long)x);
    if (strcmp(first->model, in->model) != 0 || first->layer != in->layer)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                        "session[%d] '%s' is of %s%s layer %d, session[0] '%s' of %s%s layer %d: "
                        "the sessions of one item share their model's layer",
                        (int)b, in->id, in->model[0] ? "model " : "no model", in->model,
                        (int)in->layer, first->id, first->model[0] ? "model " : "no model",
                        first->model, (int)first->layer);
    if (first->scheme_type != in->scheme_type || first->prerotated != in->prerotated ||
        (p->scheme_json == NULL) != (q->scheme_json == NULL) ||
        (p->scheme_json != NULL && strcmp(p->scheme_json, q->scheme_json) != 0))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                        "session[%d] '%s' has the scheme %s, session[0] '%s' has %s: the sessions "
                        "of one item share their scheme (as created); send them in items of their "
                        "own",
                        (int)b, in->id, q->scheme_json != NULL ? q->scheme_json : "(unsaved)",
                        first->id, p->scheme_json != NULL ? p->scheme_json : "(unsaved)");
    return true;
}

/* "session": an id, or a list of ids (a batch). */
static bool parse_ids(const cJSON *id, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *x;
    int32_t n = 0;
    if (cJSON_IsString(id) && id->valuestring[0] != '\0') {
        it->n_sess = 1;
    } else if (cJSON_IsArray(id) && cJSON_GetArraySize(id) > 0) {
        it->batched = true;
        it->n_sess = cJSON_GetArraySize(id);
        if ((size_t)it->n_sess > ctx->lim->max_batch_items)
            return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "session",
                            "session lists %d sessions; the limit is %zu (as items per request)",
                            (int)it->n_sess, ctx->lim->max_batch_items);
    } else {
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "session",
                        "session must be a session's id (a string from POST /v1/sessions) or a "
                        "list of them, found %s",
                        cJSON_IsArray(id) ? "an empty list" : api_json_type(id));
    }
    it->sess = calloc((size_t)it->n_sess, sizeof *it->sess);
    if (it->sess == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    if (!it->batched) {
        snprintf(it->sess[0].id, sizeof it->sess[0].id, "%s", id->valuestring);
        return true;
    }
    cJSON_ArrayForEach(x, id)
    {
        char f[32];
        snprintf(f, sizeof f, "session[%d]", (int)n);
        if (!cJSON_IsString(x) || x->valuestring[0] == '\0')
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                            "%s must be a session's id (a string), found %s", f,
                            api_json_type(x));
        for (int32_t j = 0; j < n; j++)
            if (strcmp(it->sess[j].id, x->valuestring) == 0)
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                                "%s='%s' is session[%d] too: a list names each session once", f,
                                x->valuestring, (int)j);
        snprintf(it->sess[n].id, sizeof it->sess[n].id, "%s", x->valuestring);
        n++;
    }
    return true;
}

bool api_item_parse_session(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *qs;
    srv_kv_info first, info;
    srv_kv_err ke;
    int64_t lk = 0, pages;
    const srv_kv_spec *sp = &first.spec;
    const int o = cJSON_IsArray(api_member(obj, "session")) ? 1 : 0;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (api_member(obj, refused[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, refused[i],
                            "%s is the session's: an item with \"session\" sends q (and an "
                            "\"append\" of new keys and values), not %s",
                            refused[i], refused[i]);
    /* Masks over keys cannot be one tensor over sessions of other lengths. */
    if (o && (api_member(obj, "mask") != NULL || api_member(obj, "bias") != NULL))
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED,
                        api_member(obj, "mask") != NULL ? "mask" : "bias",
                        "an item with a list of sessions takes no %s (its sessions' lengths "
                        "differ): send one item per session",
                        api_member(obj, "mask") != NULL ? "mask" : "bias");
    if (ctx->lim == NULL || ctx->lim->sessions == NULL)
        return api_fail(e, ctx, SRV_ERR_NOT_FOUND, "session",
                        "this server keeps no sessions (it was started without a session cache)");
    it->session = true;
    it->sess_cache = ctx->lim->sessions;
    it->sess_lim = ctx->lim;
    if (!parse_ids(api_member(obj, "session"), ctx, it, e))
        return false;
    for (int32_t b = 0; b < it->n_sess; b++) {
        api_sess_seq *ss = &it->sess[b];
        if (!srv_kv_info_hold(it->sess_cache, ss->id, b == 0 ? &first : &info, &ss->hold, &ke) &&
            !(api_session_adopt(ctx->lim, ss->id, &ke) &&
              srv_kv_info_hold(it->sess_cache, ss->id, b == 0 ? &first : &info, &ss->hold, &ke))) {
            char f[32];
            snprintf(f, sizeof f, "session[%d]", (int)b);
            return api_fail(e, ctx, ke.code, o ? f : ke.field, "%s", ke.message);
        }
        if (b > 0 && !same_kind(&first, &info, b, ctx, e))
            return false;
        ss->expect = (b == 0 ? &first : &info)->appended;
    }
    /* The sessions' scheme (held until the item is freed). */
    it->scheme.s = *sp->scheme;
    pa_attention_init(&it->att, &it->scheme.s);
    if (api_member(obj, "q") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q",
                        "q [%sLq, num_heads, head_dim] is required with a session",
                        o ? "B, " : "");
    qs = cJSON_GetObjectItemCaseSensitive(api_member(obj, "q"), "shape");
    if (cJSON_GetArraySize(qs) != 3 + o)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "q.shape",
                        o ? "q has %d dimensions: an item with a list of sessions takes q [B, "
                            "Lq, num_heads, head_dim], B the sessions listed"
                          : "q has %d dimensions: an item with one session takes q [Lq, "
                            "num_heads, head_dim] (a list of sessions takes [B, Lq, num_heads, "
                            "head_dim])",
                        cJSON_GetArraySize(qs));
    if (!api_get_tensor(api_member(obj, "q"), "q", ctx, 3 + o, &it->q, e) ||
        (o && !api_session_dim(&it->q, "q", 0, it->n_sess, "count (of \"session\")", ctx, e)) ||
        !api_session_dim(&it->q, "q", 2 + o, sp->head_dim, "head_dim", ctx, e))
        return false;
    if (it->q.shape[1 + o] % sp->num_kv_heads != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, o ? "q.shape[2]" : "q.shape[1]",
                        "q.shape[%d]=%lld query heads: the session's num_kv_heads=%d must divide "
                        "them",
                        1 + o, (long long)it->q.shape[1 + o], (int)sp->num_kv_heads);
    if (api_member(obj, "append") != NULL &&
        !parse_append(api_member(obj, "append"), ctx, sp, it, e))
        return false;
    /* Each session as the append will leave it; the keys are as many as
     * the longest holds. */
    for (int32_t b = 0; b < it->n_sess; b++) {
        srv_kv_info cur;
        const srv_kv_info *in = &cur;
        int64_t len;
        char f[32];
        if (b == 0) {
            in = &first;
        } else if (!srv_kv_info_get(it->sess_cache, it->sess[b].id, &cur, &ke)) {
            return from_kv(e, ctx, &ke);
        }
        snprintf(f, sizeof f, o ? "session[%d]" : "session", (int)b);
        len = length_after(in, it->app_n);
        if (len < 1)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                            "session '%s' holds no tokens: append some first (\"append\")",
                            in->id);
        if (in->spec.eviction == SRV_KV_EVICT_NONE && len > in->spec.max_tokens)
            return api_fail(e, ctx, SRV_ERR_SESSION_FULL, "append.k",
                            "session '%s' holds %d of its max_tokens=%d tokens: %d more do not "
                            "fit (eviction none)",
                            in->id, (int)in->length, (int)in->spec.max_tokens, (int)it->app_n);
        it->sess[b].length = (int32_t)len;
        lk = len > lk ? len : lk;
    }
    it->Lq = (int32_t)it->q.shape[o];
    it->H = (int32_t)it->q.shape[1 + o];
    it->D = sp->head_dim;
    it->Dv = sp->v_head_dim;
    it->Hkv = sp->num_kv_heads;
    it->Lk = (int32_t)lk;
    it->B = it->n_sess;
    /* The descriptor of the longest session as the append will leave it;
     * its pages until then are stand-ins the checks only count. */
    pages = (lk + first.page_tokens - 1) / first.page_tokens;
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
    it->att.page_tokens = first.page_tokens;
    it->att.k_prerotated = first.prerotated;
    it->att.kv_dtype = sp->dtype;
    it->out_ndim = 3;
    it->out_shape[0] = it->Lq;
    it->out_shape[1] = it->H;
    it->out_shape[2] = it->Dv;
    it->sess_pending = it->app_n > 0;
    atomic_init(&it->sess_state, API_SESS_ST_OPEN);
    return true;
}

bool api_item_session_ragged(const api_item *it)
{
    for (int32_t b = 0; it->session && b < it->n_sess; b++)
        if (it->sess[b].length != it->Lk)
            return true;
    return false;
}

void api_item_session_sequence(const api_item *it, int32_t b, pa_attention *att)
{
    const api_sess_seq *ss = &it->sess[b];
    att->q = it->q.data + (size_t)b * (size_t)it->Lq * (size_t)it->H * (size_t)it->D;
    att->k_len = ss->length;
    if (ss->viewed) {
        att->k_pages = ss->view.k_pages;
        att->v_pages = ss->view.v_pages;
        att->page_tokens = ss->view.page_tokens;
        att->k_positions = ss->view.positions;
        att->k_prerotated = ss->view.prerotated;
        att->kv_dtype = ss->view.dtype;
    }
    if (it->q_positions != NULL)
        att->q_positions = it->q_positions + (size_t)b * it->q_pos_stride;
    else if (ss->qpos != NULL)
        att->q_positions = ss->qpos;
}

/* Session b reads the view it holds, checked as it now is: a session read
 * without an append may have taken tokens between the item's checks and
 * the view. The item's keys are as many as the longest session holds. */
static bool adopt_view(api_item *it, int32_t b, const api_ctx *ctx, api_err *e)
{
    api_sess_seq *ss = &it->sess[b];
    pa_attention att;
    pa_error pe;
    ss->viewed = true;
    ss->length = ss->view.length;
    if (ss->length > it->Lk) { /* grown since its checks (a read): sized anew */
        const int32_t pages = (ss->length + ss->view.page_tokens - 1) / ss->view.page_tokens;
        const float **sp = realloc(it->sess_pages, (size_t)pages * sizeof *sp);
        if (sp == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        for (int32_t p = 0; p < pages; p++)
            sp[p] = it->q.data;
        it->sess_pages = sp;
        it->Lk = ss->length;
        it->att.k_len = it->Lk;
        it->att.k_pages = it->att.v_pages = sp;
    }
    if (it->q_positions == NULL) { /* the session's last Lq tokens */
        ss->qpos = malloc((size_t)it->Lq * sizeof *ss->qpos);
        if (ss->qpos == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        for (int32_t i = 0; i < it->Lq; i++)
            ss->qpos[i] = ss->view.next_position - it->Lq + i;
        if (b == 0)
            it->att.q_positions = ss->qpos;
    }
    att = it->att;
    api_item_session_sequence(it, b, &att);
    if (pa_attention_check(&att, &pe) != PA_STATUS_OK) {
        char f[32];
        if (!it->batched) {
            api_fail_pa(e, ctx, &pe);
            return false;
        }
        snprintf(f, sizeof f, "session[%d]", (int)b);
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f, "session '%s': %s", ss->id,
                        pe.message);
    }
    return true;
}

bool api_item_session_commit(api_item *it, const api_ctx *ctx, api_err *e)
{
    srv_kv_err ke;
    if (it->sess_pending) /* at its first task (api_item_session_start) */
        return true;
    for (int32_t b = 0; b < it->n_sess; b++) {
        if (!srv_kv_view_take(it->sess_cache, it->sess[b].id, &it->sess[b].view, &ke))
            return from_kv(e, ctx, &ke);
        if (!adopt_view(it, b, ctx, e))
            return false;
    }
    return true;
}

/* The appends and their views, once: api_item_session_start's first part.
 * A list's sessions append in order; when one is refused, the ones before
 * it have appended (the error says which). */
static bool append_now(api_item *it, const api_ctx *ctx, api_err *e)
{
    const size_t kn = (size_t)it->app_n * (size_t)it->Hkv;
    srv_kv_err ke;
    api_err ignored;
    for (int32_t b = 0; b < it->n_sess; b++) {
        api_sess_seq *ss = &it->sess[b];
        if (!srv_kv_append_view(it->sess_cache, ss->id, it->app_k.data + (size_t)b * kn * it->D,
                                it->app_v.data + (size_t)b * kn * it->Dv, it->app_n,
                                it->app_pos != NULL ? it->app_pos + (size_t)b * it->app_n : NULL,
                                ss->expect, &ss->view, &ke)) {
            char f[32];
            snprintf(f, sizeof f, "session[%d]", (int)b);
            if (b == 0)
                return api_fail(e, ctx, ke.code, it->batched ? f : ke.field, "%s", ke.message);
            return api_fail(e, ctx, ke.code, f,
                            "%s (session[0] to session[%d] took their append)", ke.message,
                            (int)b - 1);
        }
        if (!adopt_view(it, b, ctx, e))
            return false;
    }
    /* A v2 sequence_end: the view keeps what this step reads. */
    if (it->sess_end)
        api_session_delete(it->sess_lim, it->sess[0].id, &ignored);
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
    return !end || api_session_delete(it->sess_lim, it->sess[0].id, e);
}

bool api_item_session_names(const api_item *it, const char *id)
{
    for (int32_t b = 0; it->session && b < it->n_sess; b++)
        if (strcmp(it->sess[b].id, id) == 0)
            return true;
    return false;
}

void api_item_session_free(api_item *it)
{
    /* A session this request created whose append never landed is not
     * left behind (a refused v2 sequence_start). */
    if (it->sess_created && atomic_load(&it->sess_state) != API_SESS_ST_DONE) {
        api_err ignored;
        api_session_delete(it->sess_lim, it->sess[0].id, &ignored);
    }
    it->sess_created = false;
    for (int32_t b = 0; it->sess != NULL && b < it->n_sess; b++) {
        api_sess_seq *ss = &it->sess[b];
        if (ss->viewed)
            srv_kv_view_release(it->sess_cache, &ss->view);
        if (ss->hold != NULL)
            srv_kv_scheme_release(it->sess_cache, ss->hold);
        free(ss->qpos);
    }
    free(it->sess);
    it->sess = NULL;
    it->n_sess = 0;
    api_tensor_release(&it->app_k);
    api_tensor_release(&it->app_v);
    free(it->app_pos);
    free(it->sess_pages);
    it->app_pos = NULL;
    it->sess_pages = NULL;
}
