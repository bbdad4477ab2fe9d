/* item.c - an attention item into a pa_attention. Sizes come from the
 * tensors' shapes; every disagreement is reported with the field and the
 * values before the core library is called, and then pa_attention_check
 * validates the rest.
 */
#include "api/request.h"

#include "api/json.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Attention items                                                           */
/* ------------------------------------------------------------------------- */

static const char *const attention_fields[] = {
    "scheme",       "q",           "k",          "v",       "x",
    "w_q",          "w_k",         "w_v",        "w_o",     "num_heads",
    "num_kv_heads", "head_dim",    "causal",     "window",  "key_length",
    "q_positions",  "k_positions", "scale",      "softcap", "sinks",
    "mask",         "bias",        "chunk_size", "q_norm",  "k_norm",
    "b_q",          "b_k",         "b_v",        "b_o",     "attention_mask",
    "query_length", "k_prerotated",
};

void api_item_free(api_item *it)
{
    if (it == NULL)
        return;
    api_scheme_free(&it->scheme);
    api_tensor_release(&it->q);
    api_tensor_release(&it->k);
    api_tensor_release(&it->v);
    api_tensor_release(&it->x);
    api_tensor_release(&it->w_q);
    api_tensor_release(&it->w_k);
    api_tensor_release(&it->w_v);
    api_tensor_release(&it->w_o);
    api_tensor_release(&it->sinks);
    api_tensor_release(&it->bias);
    api_tensor_release(&it->q_norm);
    api_tensor_release(&it->k_norm);
    api_tensor_release(&it->b_q);
    api_tensor_release(&it->b_k);
    api_tensor_release(&it->b_v);
    api_tensor_release(&it->b_o);
    free(it->mask);
    free(it->q_mrope);
    free(it->k_mrope);
    free(it->q_positions);
    free(it->k_positions);
    free(it->key_lengths);
    free(it->query_lengths);
    free(it->default_qpos);
    memset(it, 0, sizeof *it);
}

static const cJSON *member(const cJSON *obj, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(obj, name);
}

/* An optional int member; *present tells whether it was there. */
static bool opt_int(const cJSON *obj, const char *name, const api_ctx *ctx, int32_t *out,
                    bool *present, api_err *e)
{
    const cJSON *v = member(obj, name);
    *present = v != NULL;
    return v == NULL || api_get_int(v, name, ctx, out, e);
}

/* A count that must be positive (num_heads, num_kv_heads, head_dim). */
static bool opt_count(const cJSON *obj, const char *name, const api_ctx *ctx, int32_t *out,
                      bool *present, api_err *e)
{
    if (!opt_int(obj, name, ctx, out, present, e))
        return false;
    if (*present && *out < 1)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s=%d must be at least 1", name,
                        (int)*out);
    return true;
}

/* An explicit count that must agree with a shape in q/k/v mode. */
static bool agree(const cJSON *obj, const char *name, int32_t from_shape, const char *shape_name,
                  const api_ctx *ctx, api_err *e)
{
    int32_t given;
    bool present;
    if (!opt_count(obj, name, ctx, &given, &present, e))
        return false;
    if (present && given != from_shape)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name, "%s=%d does not match %s=%d", name,
                        (int)given, shape_name, (int)from_shape);
    return true;
}

static bool parse_qkv(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    static const char *const layer_only[] = {"w_q", "w_k", "w_v", "w_o"};
    for (size_t i = 0; i < sizeof layer_only / sizeof layer_only[0]; i++)
        if (member(obj, layer_only[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, layer_only[i],
                            "%s is a layer-mode input: send x with w_q, w_k, w_v, or q, k and v "
                            "without weights",
                            layer_only[i]);
    if (member(obj, "q") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q",
                        "q is required (or x with w_q, w_k, w_v for layer mode)");
    if (member(obj, "k") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "k", "k is required with q");
    if (member(obj, "v") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "v", "v is required with q");
    /* A q whose shape has 4 dims is a batch; anything else is held to 3
     * (and told so), named tensors included. */
    const cJSON *qshape = cJSON_GetObjectItemCaseSensitive(member(obj, "q"), "shape");
    if (!api_get_tensor(member(obj, "q"), "q", ctx, cJSON_GetArraySize(qshape) == 4 ? 4 : 3, &it->q,
                        e))
        return false;
    /* o: the leading batch dim, when there is one; the messages name the
     * dims as the client sent them. */
    const int o = it->q.ndim - 3;
    if (!api_get_tensor(member(obj, "k"), "k", ctx, it->q.ndim, &it->k, e) ||
        !api_get_tensor(member(obj, "v"), "v", ctx, it->q.ndim, &it->v, e))
        return false;
    it->B = o ? (int32_t)it->q.shape[0] : 1;
    it->batched = o != 0;
    if (o && it->k.shape[0] != it->B)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "k.shape[0]=%lld does not equal q.shape[0]=%d (batch)",
                        (long long)it->k.shape[0], (int)it->B);
    if (o && it->v.shape[0] != it->B)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape[0]=%lld does not equal q.shape[0]=%d (batch)",
                        (long long)it->v.shape[0], (int)it->B);

    it->Lq = (int32_t)it->q.shape[o];
    it->H = (int32_t)it->q.shape[o + 1];
    it->D = (int32_t)it->q.shape[o + 2];
    it->Lk = (int32_t)it->k.shape[o];
    it->Hkv = (int32_t)it->k.shape[o + 1];
    if (it->k.shape[o + 2] != it->D)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "k.shape[%d]=%lld does not equal q.shape[%d]=%d (head_dim)", o + 2,
                        (long long)it->k.shape[o + 2], o + 2, (int)it->D);
    if (it->H % it->Hkv != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "k.shape[%d]=%d does not divide num_heads=%d", o + 1, (int)it->Hkv,
                        (int)it->H);
    if (it->v.shape[o] != it->Lk)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape[%d]=%lld does not equal k.shape[%d]=%d (keys)", o,
                        (long long)it->v.shape[o], o, (int)it->Lk);
    if (it->v.shape[o + 1] != it->Hkv)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape[%d]=%lld does not equal k.shape[%d]=%d (num_kv_heads)", o + 1,
                        (long long)it->v.shape[o + 1], o + 1, (int)it->Hkv);
    it->Dv = (int32_t)it->v.shape[o + 2];
    if (!agree(obj, "num_heads", it->H, o ? "q.shape[2]" : "q.shape[1]", ctx, e) ||
        !agree(obj, "num_kv_heads", it->Hkv, o ? "k.shape[2]" : "k.shape[1]", ctx, e) ||
        !agree(obj, "head_dim", it->D, o ? "q.shape[3]" : "q.shape[2]", ctx, e))
        return false;

    it->att.num_heads = it->H;
    it->att.num_kv_heads = it->Hkv;
    it->att.head_dim = it->D;
    it->att.v_head_dim = it->Dv;
    it->att.q_len = it->Lq;
    it->att.k_len = it->Lk;
    it->att.q = it->q.data;
    it->att.k = it->k.data;
    it->att.v = it->v.data;
    it->out_ndim = 3;
    it->out_shape[0] = it->Lq;
    it->out_shape[1] = it->H;
    it->out_shape[2] = it->Dv;
    return true;
}

/* w.shape[0] must be d_model (x.shape[xd]) and w.shape[1] cols. */
static bool weight_shape(const srv_tensor *w, const char *name, int32_t d_model, int xd,
                         int64_t cols, const char *cols_text, const api_ctx *ctx, api_err *e)
{
    char rel[32];
    snprintf(rel, sizeof rel, "%s.shape", name);
    if (w->shape[0] != d_model)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, rel,
                        "%s.shape[0]=%lld does not equal x.shape[%d]=%d (d_model)", name,
                        (long long)w->shape[0], xd, (int)d_model);
    if (cols >= 0 && w->shape[1] != cols)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, rel,
                        "%s.shape[1]=%lld does not equal %s=%lld", name, (long long)w->shape[1],
                        cols_text, (long long)cols);
    return true;
}

static bool parse_layer(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    static const char *const qkv_only[] = {"q", "k", "v"};
    int32_t H, Hkv, D, d_model;
    bool has_hkv, has_d, has_h;
    char text[64];

    for (size_t i = 0; i < sizeof qkv_only / sizeof qkv_only[0]; i++)
        if (member(obj, qkv_only[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, qkv_only[i],
                            "send either q, k and v, or x with w_q, w_k and w_v, not both");
    static const char *const needed[] = {"w_q", "w_k", "w_v"};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (member(obj, needed[i]) == NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, needed[i], "layer mode (x) needs %s",
                            needed[i]);
    if (!opt_count(obj, "num_heads", ctx, &H, &has_h, e))
        return false;
    if (!has_h)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "num_heads",
                        "layer mode (x) needs num_heads");
    if (!opt_count(obj, "num_kv_heads", ctx, &Hkv, &has_hkv, e) ||
        !opt_count(obj, "head_dim", ctx, &D, &has_d, e))
        return false;
    if (!has_hkv)
        Hkv = H;
    if (H % Hkv != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "num_kv_heads",
                        "num_kv_heads=%d does not divide num_heads=%d", (int)Hkv, (int)H);

    /* x [B, L, d_model] is a batch (its shape says so, as for q). */
    const cJSON *xshape = cJSON_GetObjectItemCaseSensitive(member(obj, "x"), "shape");
    if (!api_get_tensor(member(obj, "x"), "x", ctx, cJSON_GetArraySize(xshape) == 3 ? 3 : 2, &it->x,
                        e) ||
        !api_get_tensor(member(obj, "w_q"), "w_q", ctx, 2, &it->w_q, e) ||
        !api_get_tensor(member(obj, "w_k"), "w_k", ctx, 2, &it->w_k, e) ||
        !api_get_tensor(member(obj, "w_v"), "w_v", ctx, 2, &it->w_v, e))
        return false;
    if (member(obj, "w_o") != NULL &&
        !api_get_tensor(member(obj, "w_o"), "w_o", ctx, 2, &it->w_o, e))
        return false;
    const int o = it->x.ndim - 2;
    d_model = (int32_t)it->x.shape[o + 1];
    it->B = o ? (int32_t)it->x.shape[0] : 1;
    it->batched = o != 0;

    if (!has_d) {
        if (it->w_q.shape[1] % H != 0)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "w_q.shape",
                            "w_q.shape[1]=%lld is not a multiple of num_heads=%d; set head_dim "
                            "or fix w_q",
                            (long long)it->w_q.shape[1], (int)H);
        D = (int32_t)(it->w_q.shape[1] / H);
    }
    snprintf(text, sizeof text, "num_heads*head_dim=%d*%d", (int)H, (int)D);
    if (!weight_shape(&it->w_q, "w_q", d_model, o + 1, (int64_t)H * D, text, ctx, e))
        return false;
    snprintf(text, sizeof text, "num_kv_heads*head_dim=%d*%d", (int)Hkv, (int)D);
    if (!weight_shape(&it->w_k, "w_k", d_model, o + 1, (int64_t)Hkv * D, text, ctx, e) ||
        !weight_shape(&it->w_v, "w_v", d_model, o + 1, -1, NULL, ctx, e))
        return false;
    if (it->w_v.shape[1] % Hkv != 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "w_v.shape",
                        "w_v.shape[1]=%lld is not a multiple of num_kv_heads=%d",
                        (long long)it->w_v.shape[1], (int)Hkv);
    it->H = H;
    it->Hkv = Hkv;
    it->D = D;
    it->Dv = (int32_t)(it->w_v.shape[1] / Hkv);
    it->Lq = it->Lk = (int32_t)it->x.shape[o];
    if (it->w_o.data != NULL && it->w_o.shape[0] != (int64_t)H * it->Dv)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "w_o.shape",
                        "w_o.shape[0]=%lld does not equal num_heads*v_head_dim=%d*%d",
                        (long long)it->w_o.shape[0], (int)H, (int)it->Dv);

    it->att.num_heads = H;
    it->att.num_kv_heads = Hkv;
    it->att.head_dim = D;
    it->att.v_head_dim = it->Dv;
    it->att.x = it->x.data;
    it->att.seq_len = it->Lq;
    it->att.d_model = d_model;
    it->att.w_q = it->w_q.data;
    it->att.w_k = it->w_k.data;
    it->att.w_v = it->w_v.data;
    if (it->w_o.data != NULL) {
        it->att.w_o = it->w_o.data;
        it->att.d_out = (int32_t)it->w_o.shape[1];
        it->out_ndim = 2;
        it->out_shape[0] = it->Lq;
        it->out_shape[1] = it->att.d_out;
    } else {
        it->out_ndim = 3;
        it->out_shape[0] = it->Lq;
        it->out_shape[1] = H;
        it->out_shape[2] = it->Dv;
    }
    return true;
}

/* Positions [L]; or, with mrope (rope with mrope_section), [3, L]: three
 * rows (temporal, height, width) into *mrope, [3 * L] flat; or, in a batch
 * of B sequences, [B, L], one row per sequence (*stride = L). */
static bool parse_positions(const cJSON *obj, const char *name, int32_t want, const char *what,
                            bool mrope_ok, int32_t batch, const api_ctx *ctx, int32_t **out,
                            int32_t **mrope, size_t *stride, size_t *mrope_stride, api_err *e)
{
    const cJSON *v = member(obj, name);
    int32_t n = 0;
    if (v == NULL)
        return true;
    if (batch > 0 && mrope_ok && api_int_rank(v) == 3) {
        /* [B, 3, L]: each sequence its own M-RoPE rows */
        const cJSON *seq;
        int32_t b = 0;
        if (cJSON_GetArraySize(v) != batch)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s holds %d sequences' rows but the batch has %d", name,
                            cJSON_GetArraySize(v), (int)batch);
        if ((*mrope = malloc((size_t)batch * 3 * (size_t)want * sizeof(int32_t))) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory");
        cJSON_ArrayForEach(seq, v)
        {
            char path[48];
            int32_t *rows = NULL;
            snprintf(path, sizeof path, "%s[%d]", name, (int)b);
            if (!api_get_int_rows(seq, path, ctx, 3, &rows, &n, e))
                return false;
            if (n != want) {
                free(rows);
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                                "%s has rows of %d values but %s=%d", path, (int)n, what,
                                (int)want);
            }
            memcpy(*mrope + (size_t)b * 3 * (size_t)want, rows, 3 * (size_t)want * sizeof *rows);
            free(rows);
            b++;
        }
        *mrope_stride = 3 * (size_t)want;
        return true;
    }
    if (batch > 0 && !mrope_ok && api_int_rank(v) == 2) {
        if (!api_get_int_rows(v, name, ctx, batch, out, &n, e))
            return false;
        if (n != want)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s has rows of %d values but %s=%d", name, (int)n, what, (int)want);
        *stride = (size_t)want;
        return true;
    }
    if (api_int_rank(v) == 2) {
        if (!mrope_ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                            "%s is [3, L] (M-RoPE rows) only for scheme rope with "
                            "mrope_section; send [L] positions",
                            name);
        if (!api_get_int_rows(v, name, ctx, 3, mrope, &n, e))
            return false;
        if (n != want)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s has rows of %d values but %s=%d", name, (int)n, what, (int)want);
        return true;
    }
    if (!api_get_int_array(v, name, ctx, out, &n, e))
        return false;
    if (n != want)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name, "%s has %d values but %s=%d", name,
                        (int)n, what, (int)want);
    return true;
}

/* A per-sequence length: [B] values in lo .. hi (hi is shape[1] of the
 * tensor named by what), each named when wrong. */
static bool per_sequence(const cJSON *v, const char *name, int32_t lo, int32_t hi,
                         const char *what, const api_ctx *ctx, const api_item *it, int32_t **out,
                         api_err *e)
{
    int32_t n = 0;
    if (!api_get_int_array(v, name, ctx, out, &n, e))
        return false;
    if (n != it->B)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                        "%s has %d values but the batch has %d sequences (%s.shape[0]); send "
                        "one per sequence, or one number for all",
                        name, (int)n, (int)it->B, what);
    for (int32_t b = 0; b < n; b++) {
        char f[32];
        snprintf(f, sizeof f, "%s[%d]", name, (int)b);
        if ((*out)[b] < lo || (*out)[b] > hi)
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, f, "%s=%d %s %s.shape[%d]=%d", f,
                            (int)(*out)[b],
                            (*out)[b] < lo ? (lo ? "is below 1; 1 up to" : "is negative; 0 up to")
                                           : "exceeds",
                            what, it->batched ? 1 : 0, (int)hi);
    }
    return true;
}

/* query_length: a number or [B], the real query rows of each sequence;
 * rows past it are not computed (output and weights 0, logits -inf, as a
 * fully masked row). The rows are a prefix of q, so the library runs on
 * q_len = query_length; what would change their layout is refused. */
static bool parse_query_length(const cJSON *v, const api_ctx *ctx, api_item *it, api_err *e)
{
    const int32_t *sec = it->scheme.s.rope.mrope_section;
    if (it->att.x != NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "query_length",
                        "query_length is for q, k, v items: in layer mode q and k are the same "
                        "tokens (use key_length or attention_mask)");
    if (it->scheme.s.type == PA_SCHEME_ROPE && (sec[0] != 0 || sec[1] != 0 || sec[2] != 0) &&
        it->q_mrope != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "query_length",
                        "query_length with M-RoPE position rows [3, Lq] is not supported: send "
                        "the sequences as separate items");
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        if (!per_sequence(v, "query_length", 1, it->Lq, "q", ctx, it, &it->query_lengths, e))
            return false;
    } else {
        int32_t iv;
        if (!api_get_int(v, "query_length", ctx, &iv, e))
            return false;
        if (iv < 1 || iv > it->Lq)
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "query_length",
                            "query_length=%d must be 1 up to q.shape[%d]=%d", (int)iv,
                            it->batched ? 1 : 0, (int)it->Lq);
        if ((it->query_lengths = malloc((size_t)it->B * sizeof(int32_t))) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "query_length", "out of memory");
        for (int32_t b = 0; b < it->B; b++)
            it->query_lengths[b] = iv;
    }
    if (it->q_positions == NULL) { /* the default positions, kept for the real rows */
        if ((it->default_qpos = api_range_positions(it->Lk - it->Lq, it->Lq)) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "query_length", "out of memory");
        it->att.q_positions = it->default_qpos;
    }
    return true;
}

static bool parse_masks(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *v;
    bool present;
    int32_t iv;

    if ((v = member(obj, "causal")) != NULL && !api_get_bool(v, "causal", ctx, &it->att.causal, e))
        return false;
    if (!opt_int(obj, "window", ctx, &iv, &present, e))
        return false;
    if (present)
        it->att.window = iv;
    if ((v = member(obj, "key_length")) != NULL && (cJSON_IsArray(v) || cJSON_IsObject(v))) {
        if (!per_sequence(v, "key_length", 0, it->Lk, it->att.x != NULL ? "x" : "k", ctx, it,
                          &it->key_lengths, e))
            return false;
        it->att.key_length = it->key_lengths[0];
    } else {
        if (!opt_int(obj, "key_length", ctx, &iv, &present, e))
            return false;
        if (present)
            it->att.key_length = iv;
    }
    if ((v = member(obj, "scale")) != NULL) {
        double d;
        if (!api_get_number(v, "scale", ctx, &d, e))
            return false;
        it->att.scale_set = true;
        it->att.scale = (float)d;
    }
    bool layer = it->att.x != NULL;
    const int32_t *sec = it->scheme.s.rope.mrope_section;
    bool mrope = it->scheme.s.type == PA_SCHEME_ROPE && (sec[0] != 0 || sec[1] != 0 || sec[2] != 0);
    int32_t batch = it->batched ? it->B : 0;
    if (!parse_positions(obj, "q_positions", it->Lq,
                         layer ? (batch ? "x.shape[1]" : "x.shape[0]")
                               : (batch ? "q.shape[1]" : "q.shape[0]"),
                         mrope, batch, ctx, &it->q_positions, &it->q_mrope, &it->q_pos_stride,
                         &it->q_mrope_stride, e) ||
        !parse_positions(obj, "k_positions", it->Lk,
                         layer ? (batch ? "x.shape[1]" : "x.shape[0]")
                               : (batch ? "k.shape[1]" : "k.shape[0]"),
                         mrope, batch, ctx, &it->k_positions, &it->k_mrope, &it->k_pos_stride,
                         &it->k_mrope_stride, e))
        return false;
    it->att.q_positions = it->q_positions;
    it->att.k_positions = it->k_positions;
    it->att.q_mrope_positions = it->q_mrope;
    it->att.k_mrope_positions = it->k_mrope;
    if ((v = member(obj, "query_length")) != NULL && !parse_query_length(v, ctx, it, e))
        return false;
    return true;
}

/* A mask or bias: [Lq, Lk] (shared by every head) or [1 or H, Lq, Lk], and
 * in a batch [1 or B, 1 or H, Lq, Lk] (SDPA's broadcast); *heads gets the
 * head dim (1 for 2-D), *stride the elements between sequences (0: one for
 * all). */
static bool parse_score_tensor(const cJSON *v, const char *name, srv_elem kind, const api_ctx *ctx,
                               const api_item *it, srv_tensor *t, int32_t *heads, size_t *stride,
                               api_err *e)
{
    char path[64];
    if (!api_get_tensor_as(v, name, ctx, 0, kind, t, e))
        return false;
    snprintf(path, sizeof path, "%s.shape", name);
    if (t->ndim == 4 && it->batched && (t->shape[0] == 1 || t->shape[0] == it->B) &&
        (t->shape[1] == 1 || t->shape[1] == it->H) && t->shape[2] == it->Lq &&
        t->shape[3] == it->Lk) {
        *heads = (int32_t)t->shape[1];
        *stride = t->shape[0] == 1 ? 0 : (size_t)t->shape[1] * (size_t)it->Lq * (size_t)it->Lk;
        return true;
    }
    *stride = 0;
    if (t->ndim < 2 || t->ndim > 3 || t->shape[t->ndim - 2] != it->Lq ||
        t->shape[t->ndim - 1] != it->Lk ||
        (t->ndim == 3 && t->shape[0] != 1 && t->shape[0] != it->H)) {
        char got[96];
        size_t at = 0;
        for (int d = 0; d < t->ndim && at < sizeof got; d++)
            at += (size_t)snprintf(got + at, sizeof got - at, "%s%lld", d ? "," : "",
                                   (long long)t->shape[d]);
        if (it->batched)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                            "%s=[%s] must be [Lq, Lk]=[%d, %d], [H, Lq, Lk]=[%d, %d, %d] or "
                            "[B, H, Lq, Lk]=[%d, %d, %d, %d] (B or H may be 1)",
                            path, got, (int)it->Lq, (int)it->Lk, (int)it->H, (int)it->Lq,
                            (int)it->Lk, (int)it->B, (int)it->H, (int)it->Lq, (int)it->Lk);
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                        "%s=[%s] must be [Lq, Lk]=[%d, %d] or [H, Lq, Lk]=[%d, %d, %d] (or a "
                        "leading 1)",
                        path, got, (int)it->Lq, (int)it->Lk, (int)it->H, (int)it->Lq, (int)it->Lk);
    }
    *heads = t->ndim == 3 ? (int32_t)t->shape[0] : 1;
    return true;
}

static const api_option options[] = {
    {"softcap", "number", NULL,
     "content logit l (scale q.k after rope, with shaw's q.rel_k) -> softcap * tanh(l / softcap), "
     "before position biases, bias and masks",
     "Gemma 2 (as Hugging Face, FlashAttention and ggml; ONNX Attention masks first)", "parameter"},
    {"sinks", "tensor", "[H]",
     "a raw logit per query head joins each row's softmax and is dropped: w_ij = exp(l_ij - m) / "
     "(sum_j exp(l_ij - m) + exp(s_h - m))",
     "gpt-oss", "input"},
    {"chunk_size", "integer", NULL,
     "a key is visible only when floor(qpos / C) == floor(kpos / C); ANDed with the other masks",
     "Llama 4 chunked local attention (ggml chunked SWA)", "parameter"},
    {"mask", "tensor", "[Lq, Lk], [1 or H, Lq, Lk], or in a batch [1 or B, 1 or H, Lq, Lk]",
     "booleans by index, true = may attend (SDPA, ONNX); ANDed with causal, window, chunk_size and "
     "key_length; JSON true/false or 0/1, b64 of one byte per element",
     "prefix-LM, document masks, StreamingLLM, any mask", "input (BOOL)"},
    {"bias", "tensor", "[Lq, Lk], [1 or H, Lq, Lk], or in a batch [1 or B, 1 or H, Lq, Lk]",
     "added to the logits with the position bias, after softcap; -inf (b64) hides the key",
     "SDPA attn_mask (float), ONNX Attention attn_mask", "input"},
    {"attention_mask", "tensor", "[B, Lk]",
     "Hugging Face's key padding mask: 1 = a real token, 0 = padding (hidden); ANDed with the "
     "other masks, per sequence of a batch (3-D q or 2-D x is B = 1)",
     "Hugging Face attention_mask (2-D)", "not yet (v2 inputs are one sequence)"},
    {"k_prerotated", "boolean", NULL,
     "k holds keys already rotated at k_positions (as a KV cache stores them): only q is "
     "rotated; rope, q/k/v items, not with k_norm",
     "decode against a cache of rotated keys (vLLM, llama.cpp, HF caches)", "parameter"},
    {"q_norm", "object", "{\"weight\": [D] or [H*D], \"eps\": 1e-6}",
     "RMSNorm of q before rope: x * weight / sqrt(mean(x^2) + eps), over each head for a weight "
     "of D, over the whole projection for H*D; the weight is the multiplier (Gemma stores "
     "weight - 1: pass 1 + it)",
     "Qwen3, Gemma 3 ([D]); OLMo 2 ([H*D])", "input q_norm_weight, parameter q_norm_eps"},
    {"k_norm", "object", "{\"weight\": [D] or [Hkv*D], \"eps\": 1e-6}",
     "RMSNorm of k before rope, as q_norm", "Qwen3, Gemma 3 ([D]); OLMo 2 ([Hkv*D])",
     "input k_norm_weight, parameter k_norm_eps"},
    {"b_q", "tensor", "[H*D]", "layer mode: q = x w_q + b_q", "GPT-2, BERT, Qwen2", "input"},
    {"b_k", "tensor", "[Hkv*D]", "layer mode: k = x w_k + b_k", "GPT-2, BERT, Qwen2", "input"},
    {"b_v", "tensor", "[Hkv*Dv]", "layer mode: v = x w_v + b_v", "GPT-2, BERT, Qwen2", "input"},
    {"b_o", "tensor", "[d_out]", "layer mode: output = attn w_o + b_o (with w_o)", "GPT-2, BERT",
     "input"},
};

const api_option *api_options(size_t *n)
{
    *n = sizeof options / sizeof options[0];
    return options;
}

/* {"weight": tensor, "eps": number} at member name (q_norm, k_norm). */
static bool parse_norm(const cJSON *v, const char *name, int32_t heads, const api_ctx *ctx,
                       srv_tensor *w, int32_t *len, float *eps_out, api_err *e)
{
    static const char *const fields[] = {"weight", "eps"};
    char path[48];
    double eps = 1e-6;
    const cJSON *m;
    if (!cJSON_IsObject(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s must be an object {\"weight\": tensor, \"eps\": number}, found %s",
                        name, api_json_type(v));
    if (!api_check_fields(v, fields, 2, name, name, ctx, e))
        return false;
    snprintf(path, sizeof path, "%s.eps", name);
    if ((m = member(v, "eps")) != NULL && !api_get_number(m, path, ctx, &eps, e))
        return false;
    if (!(eps > 0) || eps > 3.4e38)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s=%.17g must be a positive number", path, eps);
    snprintf(path, sizeof path, "%s.weight", name);
    if ((m = member(v, "weight")) == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s is required: [head_dim] or [%d * head_dim]", path, (int)heads);
    if (!api_get_tensor(m, path, ctx, 1, w, e))
        return false;
    *len = (int32_t)w->shape[0];
    *eps_out = (float)eps;
    return true;
}

/* A layer-mode projection bias of n values. */
static bool parse_proj_bias(const cJSON *obj, const char *name, int64_t n, const char *what,
                            const api_ctx *ctx, const api_item *it, srv_tensor *t,
                            const float **out, api_err *e)
{
    const cJSON *v = member(obj, name);
    char path[32];
    if (v == NULL)
        return true;
    if (it->att.x == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s is a projection bias: it needs layer mode (x with w_q, w_k, w_v)",
                        name);
    if (n < 0)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s needs %s", name, what);
    if (!api_get_tensor(v, name, ctx, 1, t, e))
        return false;
    snprintf(path, sizeof path, "%s.shape[0]", name);
    if (t->shape[0] != n)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path, "%s=%lld must be %s=%lld", path,
                        (long long)t->shape[0], what, (long long)n);
    *out = t->data;
    return true;
}

/* Hugging Face's key padding mask, attention_mask [B, Lk] of 0/1 (1 = a
 * real token): ANDed into the mask, which becomes one [mask_heads, Lq, Lk]
 * per sequence. */
static bool parse_padding_mask(const cJSON *v, const api_ctx *ctx, api_item *it, api_err *e)
{
    srv_tensor m = {0};
    if (!api_get_tensor_as(v, "attention_mask", ctx, 2, SRV_ELEM_BOOL, &m, e))
        return false;
    if (m.shape[0] != it->B || m.shape[1] != it->Lk) {
        api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "attention_mask.shape",
                 "attention_mask.shape=[%lld,%lld] must be [B, Lk]=[%d, %d]", (long long)m.shape[0],
                 (long long)m.shape[1], (int)it->B, (int)it->Lk);
        api_tensor_release(&m);
        return false;
    }
    int32_t mh = it->mask != NULL ? it->att.mask_heads : 1;
    size_t per = (size_t)mh * (size_t)it->Lq * (size_t)it->Lk,
           all = api_mul_sat(per, (size_t)it->B);
    uint8_t *mask = all < SIZE_MAX ? malloc(all ? all : 1) : NULL;
    if (mask == NULL) {
        api_tensor_release(&m);
        return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "attention_mask",
                        "no memory for the per-sequence masks (%d x %zu bytes)", (int)it->B, per);
    }
    for (int32_t b = 0; b < it->B; b++) {
        const uint8_t *shared = it->mask != NULL ? it->mask + (size_t)b * it->mask_stride : NULL;
        uint8_t *dst = mask + (size_t)b * per;
        for (size_t i = 0; i < per; i++)
            dst[i] = (shared == NULL || shared[i]) && m.data[(size_t)b * it->Lk + i % it->Lk] != 0;
    }
    it->input_bytes = api_add_sat(it->input_bytes, api_add_sat(all, api_tensor_bytes(&m)));
    api_tensor_release(&m);
    free(it->mask);
    it->mask = mask;
    it->mask_stride = per;
    it->att.mask = mask;
    it->att.mask_heads = mh;
    return true;
}

/* softcap, sinks, chunk_size, mask, bias, norms and projection biases: the
 * options of current models. */
static bool parse_options(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *v;
    bool present;
    int32_t iv;

    if ((v = member(obj, "k_prerotated")) != NULL &&
        !api_get_bool(v, "k_prerotated", ctx, &it->att.k_prerotated, e))
        return false;
    if ((v = member(obj, "softcap")) != NULL) {
        double d;
        if (!api_get_number(v, "softcap", ctx, &d, e))
            return false;
        if (!(d > 0) || d > 3.4e38)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "softcap",
                            "softcap=%.17g must be a positive number (leave it out for none)", d);
        it->att.softcap = (float)d;
    }
    if (!opt_int(obj, "chunk_size", ctx, &iv, &present, e))
        return false;
    if (present) {
        if (iv < 1)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "chunk_size",
                            "chunk_size=%d must be positive (leave it out for none)", (int)iv);
        it->att.chunk_size = iv;
    }
    if ((v = member(obj, "sinks")) != NULL) {
        if (!api_get_tensor(v, "sinks", ctx, 1, &it->sinks, e))
            return false;
        if (it->sinks.shape[0] != it->H)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "sinks.shape[0]",
                            "sinks.shape[0]=%lld must be num_heads=%d: one sink per query head",
                            (long long)it->sinks.shape[0], (int)it->H);
        it->att.sinks = it->sinks.data;
    }
    if ((v = member(obj, "mask")) != NULL) {
        srv_tensor m = {0};
        if (!parse_score_tensor(v, "mask", SRV_ELEM_BOOL, ctx, it, &m, &it->att.mask_heads,
                                &it->mask_stride, e)) {
            api_tensor_release(&m);
            return false;
        }
        it->mask = malloc(m.count ? m.count : 1);
        if (it->mask == NULL) {
            api_tensor_release(&m);
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "mask", "out of memory for the mask");
        }
        for (size_t i = 0; i < m.count; i++)
            it->mask[i] = m.data[i] != 0.0f;
        /* The parsed floats were held too, while they were converted. */
        it->input_bytes = api_add_sat(it->input_bytes, api_mul_sat(m.count, 1 + sizeof(float)));
        api_tensor_release(&m);
        it->att.mask = it->mask;
    }
    if ((v = member(obj, "attention_mask")) != NULL && !parse_padding_mask(v, ctx, it, e))
        return false;
    if ((v = member(obj, "bias")) != NULL) {
        if (!parse_score_tensor(v, "bias", SRV_ELEM_FLOAT_NEG_INF, ctx, it, &it->bias,
                                &it->att.bias_heads, &it->bias_stride, e))
            return false;
        it->att.bias = it->bias.data;
    }
    if ((v = member(obj, "q_norm")) != NULL) {
        if (!parse_norm(v, "q_norm", it->H, ctx, &it->q_norm, &it->att.q_norm_len,
                        &it->att.q_norm_eps, e))
            return false;
        it->att.q_norm = it->q_norm.data;
    }
    if ((v = member(obj, "k_norm")) != NULL) {
        if (!parse_norm(v, "k_norm", it->Hkv, ctx, &it->k_norm, &it->att.k_norm_len,
                        &it->att.k_norm_eps, e))
            return false;
        it->att.k_norm = it->k_norm.data;
    }
    if (it->query_lengths != NULL && ((it->mask != NULL && it->att.mask_heads > 1) ||
                                      (it->bias.data != NULL && it->att.bias_heads > 1)))
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "query_length",
                        "query_length with a per-head %s [H, Lq, Lk] is not supported: send the "
                        "%s shared by the heads ([Lq, Lk]), or no query_length",
                        it->mask != NULL && it->att.mask_heads > 1 ? "mask" : "bias",
                        it->mask != NULL && it->att.mask_heads > 1 ? "mask" : "bias");
    return parse_proj_bias(obj, "b_q", (int64_t)it->H * it->D, "num_heads * head_dim", ctx, it,
                           &it->b_q, &it->att.b_q, e) &&
           parse_proj_bias(obj, "b_k", (int64_t)it->Hkv * it->D, "num_kv_heads * head_dim", ctx, it,
                           &it->b_k, &it->att.b_k, e) &&
           parse_proj_bias(obj, "b_v", (int64_t)it->Hkv * it->Dv, "num_kv_heads * v's head_dim",
                           ctx, it, &it->b_v, &it->att.b_v, e) &&
           parse_proj_bias(obj, "b_o", it->att.w_o != NULL ? it->att.d_out : -1,
                           it->att.w_o != NULL ? "w_o.shape[1]" : "w_o", ctx, it, &it->b_o,
                           &it->att.b_o, e);
}

bool api_item_parse(const cJSON *obj, const api_ctx *ctx, const char *const *extra, size_t n_extra,
                    api_item *out, api_err *e)
{
    const char *known[64];
    size_t n_known = 0;
    pa_error pe;

    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(obj))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "",
                        "an attention item must be an object, found %s", api_json_type(obj));
    for (size_t i = 0; i < sizeof attention_fields / sizeof attention_fields[0]; i++)
        known[n_known++] = attention_fields[i];
    for (size_t i = 0; i < n_extra && n_known < sizeof known / sizeof known[0]; i++)
        known[n_known++] = extra[i];
    if (!api_check_fields(obj, known, n_known, "", "an attention item", ctx, e))
        return false;

    if (!api_scheme_parse(member(obj, "scheme"), ctx, &out->scheme, e))
        goto fail;
    pa_attention_init(&out->att, &out->scheme.s);
    if (member(obj, "x") != NULL) {
        if (!parse_layer(obj, ctx, out, e))
            goto fail;
    } else if (!parse_qkv(obj, ctx, out, e)) {
        goto fail;
    }
    if (!parse_masks(obj, ctx, out, e) || !parse_options(obj, ctx, out, e))
        goto fail;

    if (pa_attention_check(&out->att, &pe) != PA_STATUS_OK) {
        api_fail_pa(e, ctx, &pe);
        goto fail;
    }
    /* Each further sequence that has inputs of its own (positions, key
     * length), with the sequence named. */
    if (out->key_lengths != NULL || out->query_lengths != NULL || out->q_pos_stride != 0 ||
        out->k_pos_stride != 0 || out->q_mrope_stride != 0 || out->k_mrope_stride != 0) {
        for (int32_t b = out->query_lengths != NULL ? 0 : 1; b < out->B; b++) {
            pa_attention sa;
            api_item_sequence(out, b, &sa);
            if (pa_attention_check(&sa, &pe) != PA_STATUS_OK) {
                api_fail_pa(e, ctx, &pe);
                api_err_in_sequence(e, b);
                goto fail;
            }
        }
    }

    out->ret = API_RET_OUTPUT;
    out->input_bytes = api_add_sat(out->input_bytes, out->scheme.bytes); /* the mask's so far */
    {
        const srv_tensor *ts[] = {&out->q,     &out->k,    &out->v,      &out->x,
                                  &out->w_q,   &out->w_k,  &out->w_v,    &out->w_o,
                                  &out->sinks, &out->bias, &out->q_norm, &out->k_norm,
                                  &out->b_q,   &out->b_k,  &out->b_v,    &out->b_o};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            out->input_bytes = api_add_sat(out->input_bytes, api_tensor_bytes(ts[i]));
    }
    if (out->q_positions != NULL)
        out->input_bytes = api_add_sat(out->input_bytes,
                                       (size_t)out->Lq * (out->q_pos_stride ? (size_t)out->B : 1) *
                                           sizeof(int32_t));
    if (out->k_positions != NULL)
        out->input_bytes = api_add_sat(out->input_bytes,
                                       (size_t)out->Lk * (out->k_pos_stride ? (size_t)out->B : 1) *
                                           sizeof(int32_t));
    if (out->key_lengths != NULL)
        out->input_bytes = api_add_sat(out->input_bytes, (size_t)out->B * sizeof(int32_t));
    if (out->query_lengths != NULL)
        out->input_bytes = api_add_sat(out->input_bytes, (size_t)(out->B + out->Lq) * sizeof(int32_t));
    if (out->q_mrope != NULL)
        out->input_bytes = api_add_sat(
            out->input_bytes,
            3 * (size_t)out->Lq * (out->q_mrope_stride ? (size_t)out->B : 1) * sizeof(int32_t));
    if (out->k_mrope != NULL)
        out->input_bytes = api_add_sat(
            out->input_bytes,
            3 * (size_t)out->Lk * (out->k_mrope_stride ? (size_t)out->B : 1) * sizeof(int32_t));
    return true;

fail:
    api_item_free(out);
    return false;
}

bool api_item_parse_return(const cJSON *v, const api_ctx *ctx, api_item *out, api_err *e)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"output", API_RET_OUTPUT},
                 {"weights", API_RET_WEIGHTS},
                 {"logits", API_RET_LOGITS},
                 {"q_rot", API_RET_Q_ROT},
                 {"k_rot", API_RET_K_ROT}};
    const cJSON *it;
    int i = 0;

    if (v == NULL) {
        out->ret = API_RET_OUTPUT;
        return true;
    }
    if (!cJSON_IsArray(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "return",
                        "return must be an array of names (output, weights, logits, q_rot, "
                        "k_rot), found %s",
                        api_json_type(v));
    out->ret = 0;
    cJSON_ArrayForEach(it, v)
    {
        char rel[32];
        size_t k = 0;
        snprintf(rel, sizeof rel, "return[%d]", i++);
        if (!cJSON_IsString(it))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel, "%s must be a string, found %s",
                            rel, api_json_type(it));
        while (k < sizeof names / sizeof names[0] && strcmp(names[k].name, it->valuestring) != 0)
            k++;
        if (k == sizeof names / sizeof names[0])
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not one of output, weights, logits, q_rot, k_rot", rel,
                            it->valuestring);
        out->ret |= names[k].bit;
    }
    return true;
}

bool api_check_learned_rows(const pa_learned *l, const int32_t *pos, int32_t n, const char *field,
                            const api_ctx *ctx, api_err *e)
{
    for (int32_t i = 0; i < n; i++) {
        int64_t row = (int64_t)pos[i] + l->offset;
        if (row < 0 || row >= l->rows) {
            char f[64];
            snprintf(f, sizeof f, "%s[%d]", field, (int)i);
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, f,
                            "position %d + offset %d = row %lld is outside the learned table of "
                            "%d rows",
                            (int)pos[i], (int)l->offset, (long long)row, (int)l->rows);
        }
    }
    return true;
}

int32_t api_max_position(const int32_t *pos, int32_t n)
{
    int32_t m = 0;
    if (pos == NULL)
        return n > 0 ? n - 1 : 0;
    for (int32_t i = 0; i < n; i++)
        if (i == 0 || pos[i] > m)
            m = pos[i];
    return m;
}

void api_item_sequence(const api_item *it, int32_t b, pa_attention *att)
{
    size_t sb = (size_t)b;
    *att = it->att;
    if (it->query_lengths != NULL)
        att->q_len = it->query_lengths[b]; /* a prefix of the rows */
    if (b == 0)
        return;
    if (att->x != NULL) {
        att->x += sb * (size_t)it->Lq * (size_t)att->d_model;
    } else {
        att->q += sb * (size_t)it->Lq * (size_t)it->H * (size_t)it->D;
        att->k += sb * (size_t)it->Lk * (size_t)it->Hkv * (size_t)it->D;
        att->v += sb * (size_t)it->Lk * (size_t)it->Hkv * (size_t)it->Dv;
    }
    if (it->key_lengths != NULL)
        att->key_length = it->key_lengths[b];
    if (att->q_positions != NULL)
        att->q_positions += sb * it->q_pos_stride;
    if (att->k_positions != NULL)
        att->k_positions += sb * it->k_pos_stride;
    if (att->q_mrope_positions != NULL)
        att->q_mrope_positions += sb * it->q_mrope_stride;
    if (att->k_mrope_positions != NULL)
        att->k_mrope_positions += sb * it->k_mrope_stride;
    if (att->mask != NULL)
        att->mask += sb * it->mask_stride;
    if (att->bias != NULL)
        att->bias += sb * it->bias_stride;
}

int api_item_result_shape(const api_item *it, unsigned which, int64_t shape[4])
{
    int64_t one[3];
    int n = 3, o = it->batched ? 1 : 0;
    switch (which) {
    case API_RET_OUTPUT:
        n = it->out_ndim;
        memcpy(one, it->out_shape, sizeof one);
        break;
    case API_RET_WEIGHTS:
    case API_RET_LOGITS:
        one[0] = it->H, one[1] = it->Lq, one[2] = it->Lk;
        break;
    case API_RET_Q_ROT:
        one[0] = it->Lq, one[1] = it->H, one[2] = it->D;
        break;
    default:
        one[0] = it->Lk, one[1] = it->Hkv, one[2] = it->D;
        break;
    }
    shape[0] = it->B;
    memcpy(shape + o, one, (size_t)n * sizeof *shape);
    return n + o;
}

size_t api_item_count(const api_item *it, unsigned which)
{
    int64_t shape[4];
    int n = api_item_result_shape(it, which, shape);
    size_t c = 1;
    for (int d = it->batched ? 1 : 0; d < n; d++)
        c = api_mul_sat(c, (size_t)shape[d]);
    return c;
}

void api_err_in_sequence(api_err *e, int32_t b)
{
    char m[sizeof e->message];
    memcpy(m, e->message, sizeof m);
    snprintf(e->message, sizeof e->message, "sequence %d of the batch: %.*s", (int)b,
             (int)sizeof m - 40, m);
}
