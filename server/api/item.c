/* item.c - an attention item into a pa_attention: q, k and v (or layer
 * mode's x and weights) size it, every disagreement reported with the
 * field and the values; its positions and masks (item_positions.c) and the
 * other item_*.c parts follow, then pa_attention_check validates the rest.
 * Also "return", and a batch's sequences and result shapes.
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
    "scheme",
    "q",
    "k",
    "v",
    "x",
    "w_q",
    "w_k",
    "w_v",
    "w_o",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
    "window",
    "key_length",
    "q_positions",
    "k_positions",
    "scale",
    "softcap",
    "sinks",
    "mask",
    "bias",
    "chunk_size",
    "q_norm",
    "k_norm",
    "b_q",
    "b_k",
    "b_v",
    "b_o",
    "attention_mask",
    "query_length",
    "k_prerotated",
    "compute_dtype",
    "attn_temperature_tuning",
    "logn_scaling",
    "cu_seqlens", /* api/item_packed.c */
    "cu_seqlens_k",
    "model", /* api/model_item.c: these four are read before the others */
    "layer",
    "stack",
    "override",
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
    free(it->cu_seqlens);
    free(it->cu_seqlens_k);
    api_item_session_free(it);
    api_item_diff_free(it);
    api_item_mla_free(it);
    memset(it, 0, sizeof *it);
}

/* A count that must be positive (num_heads, num_kv_heads, head_dim). */
static bool opt_count(const cJSON *obj, const char *name, const api_ctx *ctx, int32_t *out,
                      bool *present, api_err *e)
{
    if (!api_opt_int(obj, name, ctx, out, present, e))
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
        if (api_member(obj, layer_only[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, layer_only[i],
                            "%s is a layer-mode input: send x with w_q, w_k, w_v, or q, k and v "
                            "without weights",
                            layer_only[i]);
    if (api_member(obj, "q") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q",
                        "q is required (or x with w_q, w_k, w_v for layer mode)");
    if (api_member(obj, "k") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "k", "k is required with q");
    if (api_member(obj, "v") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "v", "v is required with q");
    /* A q whose shape has 4 dims is a batch; anything else is held to 3
     * (and told so), named tensors included. */
    const cJSON *qshape = cJSON_GetObjectItemCaseSensitive(api_member(obj, "q"), "shape");
    if (!api_get_tensor(api_member(obj, "q"), "q", ctx, cJSON_GetArraySize(qshape) == 4 ? 4 : 3,
                        &it->q, e))
        return false;
    /* o: the leading batch dim, when there is one; the messages name the
     * dims as the client sent them. */
    const int o = it->q.ndim - 3;
    if (!api_get_tensor(api_member(obj, "k"), "k", ctx, it->q.ndim, &it->k, e) ||
        !api_get_tensor(api_member(obj, "v"), "v", ctx, it->q.ndim, &it->v, e))
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
    if (!it->diff && it->v.shape[o + 1] != it->Hkv) /* differential: api_item_diff_shapes */
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
    /* Named k and v of one 16-bit type lend their file's bits, which the
     * kernels widen where they read them: the same results, half the bytes
     * read. Not in a batch (api_item_sequence steps through float rows) nor
     * differential attention, whose kernel builds its own keys. */
    if (it->k.bits16 != NULL && it->v.bits16 != NULL && it->k.bits16_type == it->v.bits16_type &&
        !it->batched && !it->diff) {
        it->att.k = (const float *)(const void *)it->k.bits16;
        it->att.v = (const float *)(const void *)it->v.bits16;
        it->att.kv_dtype = (pa_dtype)it->k.bits16_type;
    }
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
        if (api_member(obj, qkv_only[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, qkv_only[i],
                            "send either q, k and v, or x with w_q, w_k and w_v, not both");
    static const char *const needed[] = {"w_q", "w_k", "w_v"};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (api_member(obj, needed[i]) == NULL)
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
    const cJSON *xshape = cJSON_GetObjectItemCaseSensitive(api_member(obj, "x"), "shape");
    if (!api_get_tensor(api_member(obj, "x"), "x", ctx, cJSON_GetArraySize(xshape) == 3 ? 3 : 2,
                        &it->x, e) ||
        !api_get_tensor(api_member(obj, "w_q"), "w_q", ctx, 2, &it->w_q, e) ||
        !api_get_tensor(api_member(obj, "w_k"), "w_k", ctx, 2, &it->w_k, e) ||
        !api_get_tensor(api_member(obj, "w_v"), "w_v", ctx, 2, &it->w_v, e))
        return false;
    if (api_member(obj, "w_o") != NULL &&
        !api_get_tensor(api_member(obj, "w_o"), "w_o", ctx, 2, &it->w_o, e))
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

/* api_item_parse, once; *late set when the item's session was taken over
 * from another replica (api/session_load.c) after its layer's options were
 * merged without it. */
static bool item_parse(const cJSON *obj, const api_ctx *ctx, const char *const *extra,
                       size_t n_extra, api_item *out, api_err *e, bool *late)
{
    const char *known[64];
    size_t n_known = 0;
    pa_error pe;
    api_model_use mu;
    void *sess_hold = NULL; /* api_session_model_merge's */
    const bool sess = cJSON_IsObject(obj) && api_member(obj, "session") != NULL;

    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(obj))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "",
                        "an attention item must be an object, found %s", api_json_type(obj));
    if (sess && api_member(obj, "model") != NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "model",
                        "an item with \"session\" takes the session's scheme (and, for a session "
                        "made from a model, its layer's options): leave \"model\" out");
    /* A session another replica of a shared --cache-dir saved is taken
     * over first (api/session_load.c), so that its layer's options merge. */
    if (sess && ctx->lim != NULL && ctx->lim->sessions != NULL) {
        const cJSON *id = api_member(obj, "session");
        srv_kv_info in;
        srv_kv_err ke;
        if (cJSON_IsArray(id))
            id = cJSON_GetArrayItem(id, 0);
        if (cJSON_IsString(id) && !srv_kv_info_get(ctx->lim->sessions, id->valuestring, &in, &ke))
            api_session_adopt(ctx->lim, id->valuestring, &ke); /* else parse reports it */
    }
    /* An item that names a model is read merged with its layer's options;
     * one over a session made from a model, with the session's layer's. */
    if (!(sess ? api_session_model_merge(obj, ctx, &mu, &sess_hold, e)
               : api_model_merge(obj, ctx, &mu, e))) {
        if (sess_hold != NULL)
            srv_kv_scheme_release(ctx->lim->sessions, sess_hold);
        return false;
    }
    if (mu.merged != NULL)
        obj = mu.merged;
    for (size_t i = 0; i < sizeof attention_fields / sizeof attention_fields[0]; i++)
        known[n_known++] = attention_fields[i];
    for (size_t i = 0; i < n_extra && n_known < sizeof known / sizeof known[0]; i++)
        known[n_known++] = extra[i];
    if (!api_check_fields(obj, known, n_known, "", "an attention item", ctx, e))
        goto fail;

    if (sess) {
        if (!api_item_parse_session(obj, ctx, out, e)) /* api/item_session.c */
            goto fail;
        /* The session read is the one whose layer was merged: not one
         * taken over from a draining replica since the merge, which looked
         * for it before that replica had let it go (read again, merged
         * with it), nor one deleted and created again under its id. */
        if (out->sess[0].hold != sess_hold) {
            *late = sess_hold == NULL;
            api_fail(e, ctx, SRV_ERR_SESSION_BUSY, "session",
                     "session '%s' was deleted and created again while this item was read: "
                     "send it again",
                     out->sess[0].id);
            goto fail;
        }
    } else if (!api_scheme_parse(api_member(obj, "scheme"), ctx, &out->scheme, e)) {
        goto fail;
    }
    if (!out->session)
        pa_attention_init(&out->att, &out->scheme.s);
    if (!out->session &&
        (!api_item_parse_diff(obj, ctx, out, e) || !api_item_parse_mla(obj, ctx, out, e)))
        goto fail;
    if (out->session) {
        /* q, the append and the session's keys: read above */
    } else if (api_member(obj, "x") != NULL) {
        if (!parse_layer(obj, ctx, out, e))
            goto fail;
    } else if (out->mla ? !api_item_mla_qkv(obj, ctx, out, e) /* api/item_mla.c */
                        : !parse_qkv(obj, ctx, out, e) || !api_item_diff_shapes(obj, ctx, out, e)) {
        goto fail;
    }
    if (!api_model_check_shapes(&mu, out, ctx, e) || !api_item_parse_positions(obj, ctx, out, e) ||
        !api_item_parse_options(obj, ctx, out, e) || !api_item_parse_packed(obj, ctx, out, e))
        goto fail;

    if ((out->diff  ? pa_diff_check(&out->att, &out->dif, &pe)
         : out->mla ? pa_mla_check(&out->att, &out->mla_opt, &pe)
                    : pa_attention_check(&out->att, &pe)) != PA_STATUS_OK) {
        api_fail_pa(e, ctx, &pe);
        goto fail;
    }
    /* Every field checked: the session's append, and its view. */
    if (out->session && !api_item_session_commit(out, ctx, e))
        goto fail;
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
        out->input_bytes =
            api_add_sat(out->input_bytes, (size_t)(out->B + out->Lq) * sizeof(int32_t));
    if (out->q_mrope != NULL) /* 3 rows (M-RoPE) or 2 (rope2d): counted as 3 */
        out->input_bytes = api_add_sat(
            out->input_bytes,
            3 * (size_t)out->Lq * (out->q_mrope_stride ? (size_t)out->B : 1) * sizeof(int32_t));
    if (out->k_mrope != NULL)
        out->input_bytes = api_add_sat(
            out->input_bytes,
            3 * (size_t)out->Lk * (out->k_mrope_stride ? (size_t)out->B : 1) * sizeof(int32_t));
    api_model_use_free(&mu);
    if (sess_hold != NULL)
        srv_kv_scheme_release(ctx->lim->sessions, sess_hold);
    return true;

fail:
    api_model_use_free(&mu);
    if (sess_hold != NULL)
        srv_kv_scheme_release(ctx->lim->sessions, sess_hold);
    api_item_free(out);
    return false;
}

bool api_item_parse(const cJSON *obj, const api_ctx *ctx, const char *const *extra, size_t n_extra,
                    api_item *out, api_err *e)
{
    bool late = false;
    return item_parse(obj, ctx, extra, n_extra, out, e, &late) ||
           (late && item_parse(obj, ctx, extra, n_extra, out, e, &late));
}

const char *const api_result_names[API_NRES] = {"output", "weights", "logits",  "q_rot",
                                                "k_rot",  "entropy", "distance"};

bool api_item_parse_return(const cJSON *v, const api_ctx *ctx, api_item *out, api_err *e)
{
    const cJSON *it;
    int i = 0;

    if (v == NULL) {
        out->ret = API_RET_OUTPUT;
        return true;
    }
    if (!cJSON_IsArray(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "return",
                        "return must be an array of names (output, weights, logits, q_rot, "
                        "k_rot, entropy, distance), found %s",
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
        while (k < API_NRES && strcmp(api_result_names[k], it->valuestring) != 0)
            k++;
        if (k == API_NRES)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not one of output, weights, logits, q_rot, k_rot, "
                            "entropy, distance",
                            rel, it->valuestring);
        if (out->diff && k > 1) /* api/item_diff.c */
            return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "return",
                            "%s='%s' is not available with differential attention: it returns "
                            "output [Lq, H, 2 head_dim] and weights [H, Lq, Lk]",
                            rel, it->valuestring);
        /* api/item_mla.c: the library returns the maps while they fit. */
        if (out->mla && (k == 1 || k == 2) &&
            api_mul_sat(api_mul_sat((size_t)out->H, (size_t)out->Lq), (size_t)out->Lk) >
                PA_MLA_LOGITS_MAX)
            return api_fail(e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, api_result_names[k],
                            "%s [H, Lq, Lk] = [%d, %d, %d] is more than the %zu values mla "
                            "returns (the output has no such limit)",
                            api_result_names[k], (int)out->H, (int)out->Lq, (int)out->Lk,
                            PA_MLA_LOGITS_MAX);
        out->ret |= 1u << k;
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
    if (it->session) {                     /* its session's pages (api/item_session.c) */
        api_item_session_sequence(it, b, att);
        return;
    }
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
    if (att->q_positions_2d != NULL)
        att->q_positions_2d += sb * it->q_mrope_stride;
    if (att->k_positions_2d != NULL)
        att->k_positions_2d += sb * it->k_mrope_stride;
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
        if (api_item_is_packed(it)) { /* a list by sequence, held flat */
            one[0] = (int64_t)pa_attention_weights_len(&it->att);
            n = 1;
            break;
        }
        one[0] = it->H, one[1] = it->Lq, one[2] = it->Lk;
        break;
    case API_RET_Q_ROT:
        one[0] = it->Lq, one[1] = it->H, one[2] = it->D;
        break;
    case API_RET_ENTROPY:
    case API_RET_DISTANCE:
        one[0] = it->H, one[1] = it->Lq;
        n = 2;
        if (api_item_is_packed(it)) {
            one[0] = (int64_t)it->H * it->Lq;
            n = 1;
        }
        break;
    default:
        one[0] = it->Lk, one[1] = it->Hkv, one[2] = it->D;
        if (it->mla) { /* the one rotated key head, [Lk, D_rope] */
            one[1] = it->mla_opt.rope_dim;
            n = 2;
        }
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
