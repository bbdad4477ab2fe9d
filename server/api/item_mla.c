/* item_mla.c - an attention item's "mla" option: DeepSeek's multi-head
 * latent attention with decoupled RoPE (include/posattn_mla.h) in
 * /v1/attention. Its object, the item tensors k_rope and c_kv, the shapes
 * of the expanded form (k = k_nope [Lk, H, D_nope], v [Lk, H, Dv]) and of
 * the absorbed one (c_kv [Lk, R], mla.w_uk [H, D_nope, R], mla.w_uv
 * [H, Dv, R]); called by api_item_parse (item.c) in place of its q/k/v.
 */
#include "api/request.h"

#include "api/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mla_fields[] = {"rope_dim", "absorbed", "w_uk", "w_uv"};

bool api_item_parse_mla(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *d = api_member(obj, "mla"), *m;
    pa_mla *o = &it->mla_opt;

    if (d == NULL) {
        const char *stray = api_member(obj, "k_rope") != NULL ? "k_rope"
                            : api_member(obj, "c_kv") != NULL ? "c_kv"
                                                              : NULL;
        if (stray != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, stray,
                            "%s is an input of MLA: send it with the item option mla "
                            "{\"rope_dim\": D_rope}",
                            stray);
        return true;
    }
    if (!cJSON_IsObject(d))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "mla",
                        "mla must be an object {\"rope_dim\": D_rope, \"absorbed\": false or "
                        "true, \"w_uk\": [H, D_nope, R], \"w_uv\": [H, Dv, R]}, found %s",
                        api_json_type(d));
    if (!api_check_fields(d, mla_fields, sizeof mla_fields / sizeof mla_fields[0], "mla", "mla",
                          ctx, e))
        return false;
    /* The library refuses layer mode too, but parse_layer would speak first. */
    if (api_member(obj, "x") != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "x",
                        "mla takes q, k (k_nope), k_rope and v, or q, k_rope and c_kv (layer "
                        "mode is not supported)");
    if (it->diff)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "mla",
                        "mla and differential both given: an item is one or the other");
    memset(o, 0, sizeof *o);
    if ((m = api_member(d, "rope_dim")) == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "mla.rope_dim",
                        "mla.rope_dim is required: D_rope, the rotated dims at the end of each "
                        "query head and the width of k_rope (qk_rope_head_dim)");
    if (!api_get_int(m, "mla.rope_dim", ctx, &o->rope_dim, e))
        return false;
    if ((m = api_member(d, "absorbed")) != NULL &&
        !api_get_bool(m, "mla.absorbed", ctx, &o->absorbed, e))
        return false;
    for (int i = 0; i < 2; i++) {
        const char *name = i == 0 ? "mla.w_uk" : "mla.w_uv";
        if ((m = api_member(d, name + 4)) == NULL)
            continue;
        if (!o->absorbed)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                            "%s belongs to the absorbed form: set mla.absorbed true (with c_kv), "
                            "or send k and v",
                            name);
        if (!api_get_tensor(m, name, ctx, 3, i == 0 ? &it->w_uk : &it->w_uv, e))
            return false;
    }
    it->mla = true;
    return true;
}

/* w [H, want1 (any when want1 < 0), R]. */
static bool weight_shape(const srv_tensor *w, const char *name, int32_t H, int64_t want1, int32_t R,
                         const api_ctx *ctx, api_err *e)
{
    char field[32];
    if (w->shape[0] == H && (want1 < 0 || w->shape[1] == want1) && w->shape[2] == R)
        return true;
    snprintf(field, sizeof field, "%s.shape", name);
    if (want1 < 0)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, field,
                        "%s=[%lld, %lld, %lld] must be [H, Dv, R] with H=%d (q.shape[1]) and "
                        "R=%d (c_kv.shape[1])",
                        field, (long long)w->shape[0], (long long)w->shape[1],
                        (long long)w->shape[2], (int)H, (int)R);
    return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, field,
                    "%s=[%lld, %lld, %lld] must be [H, D_nope, R]=[%d, %lld, %d] (q.shape[1], "
                    "q.shape[2] - mla.rope_dim, c_kv.shape[1])",
                    field, (long long)w->shape[0], (long long)w->shape[1], (long long)w->shape[2],
                    (int)H, (long long)want1, (int)R);
}

/* An explicit count must agree with the shapes. */
static bool agree(const cJSON *obj, const char *name, int32_t from_shape, const char *shape_name,
                  const api_ctx *ctx, api_err *e)
{
    int32_t given;
    bool present;
    if (!api_opt_int(obj, name, ctx, &given, &present, e))
        return false;
    if (present && given != from_shape)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name, "%s=%d does not match %s=%d", name,
                        (int)given, shape_name, (int)from_shape);
    return true;
}

/* The keys: k [Lk, H, D_nope] and v [Lk, H, Dv], or c_kv [Lk, R] with the
 * weights. */
static bool parse_keys(const cJSON *obj, const api_ctx *ctx, api_item *it, int32_t Dn, api_err *e)
{
    const int32_t H = it->H;
    if (it->mla_opt.absorbed) {
        const char *kv = api_member(obj, "k") != NULL ? "k" : api_member(obj, "v") ? "v" : NULL;
        if (kv != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, kv,
                            "with mla.absorbed the keys and values are up-projections of c_kv: "
                            "send c_kv [Lk, R] with mla.w_uk and mla.w_uv, not k and v");
        if (api_member(obj, "c_kv") == NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "c_kv",
                            "c_kv [Lk, R] is required with mla.absorbed (the compressed cache, "
                            "after kv_a_layernorm)");
        for (int i = 0; i < 2; i++)
            if ((i == 0 ? it->w_uk : it->w_uv).data == NULL)
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, i == 0 ? "mla.w_uk" : "mla.w_uv",
                                "%s is required with mla.absorbed (%s)",
                                i == 0 ? "mla.w_uk" : "mla.w_uv",
                                i == 0 ? "[H, D_nope, R]: k_nope = w_uk[h] c_kv"
                                       : "[H, Dv, R]: v = w_uv[h] c_kv");
        if (!api_get_tensor(api_member(obj, "c_kv"), "c_kv", ctx, 2, &it->c_kv, e))
            return false;
        const int32_t R = (int32_t)it->c_kv.shape[1];
        if (!weight_shape(&it->w_uk, "mla.w_uk", H, Dn, R, ctx, e) ||
            !weight_shape(&it->w_uv, "mla.w_uv", H, -1, R, ctx, e))
            return false;
        it->Lk = (int32_t)it->c_kv.shape[0];
        it->Dv = (int32_t)it->w_uv.shape[1];
        it->mla_opt.kv_lora_rank = R;
        it->mla_opt.c_kv = it->c_kv.data;
        it->mla_opt.w_uk = it->w_uk.data;
        it->mla_opt.w_uv = it->w_uv.data;
        return true;
    }
    if (api_member(obj, "c_kv") != NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "c_kv",
                        "c_kv is the absorbed form's cache: set mla.absorbed true (with mla.w_uk "
                        "and mla.w_uv), or send k (k_nope) and v");
    if (api_member(obj, "k") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "k",
                        "k is required with mla (k_nope [Lk, H, D_nope]; or mla.absorbed with "
                        "c_kv)");
    if (api_member(obj, "v") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "v",
                        "v is required with mla ([Lk, H, Dv]; or mla.absorbed with c_kv)");
    if (!api_get_tensor(api_member(obj, "k"), "k", ctx, 3, &it->k, e) ||
        !api_get_tensor(api_member(obj, "v"), "v", ctx, 3, &it->v, e))
        return false;
    it->Lk = (int32_t)it->k.shape[0];
    if (it->k.shape[1] != H)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "k.shape[1]=%lld does not equal q.shape[1]=%d: with mla k is k_nope, a "
                        "head per query head (the shared head is k_rope)",
                        (long long)it->k.shape[1], (int)H);
    if (it->k.shape[2] != Dn)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "k.shape[2]=%lld does not equal q.shape[2] - mla.rope_dim = %d - %d (with "
                        "mla k is k_nope [Lk, H, D_nope])",
                        (long long)it->k.shape[2], (int)it->D, (int)it->mla_opt.rope_dim);
    if (it->v.shape[0] != it->Lk)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape[0]=%lld does not equal k.shape[0]=%d (keys)",
                        (long long)it->v.shape[0], (int)it->Lk);
    if (it->v.shape[1] != H)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "v.shape",
                        "v.shape[1]=%lld does not equal q.shape[1]=%d (with mla, a head per "
                        "query head)",
                        (long long)it->v.shape[1], (int)H);
    it->Dv = (int32_t)it->v.shape[2];
    it->att.k = it->k.data;
    it->att.v = it->v.data;
    return true;
}

bool api_item_mla_qkv(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    static const char *const layer_only[] = {"w_q", "w_k", "w_v", "w_o"};
    const int32_t Dr = it->mla_opt.rope_dim;
    const srv_tensor *kr = &it->k_rope;
    const char *keys = it->mla_opt.absorbed ? "c_kv" : "k";

    for (size_t i = 0; i < sizeof layer_only / sizeof layer_only[0]; i++)
        if (api_member(obj, layer_only[i]) != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, layer_only[i],
                            "%s is a layer-mode input: mla takes q, k_rope and k, v (or c_kv)",
                            layer_only[i]);
    if (api_member(obj, "q") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q",
                        "q [Lq, H, D_nope + D_rope] is required with mla");
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(api_member(obj, "q"), "shape")) == 4)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "q.shape",
                        "mla takes one sequence: a batch (4-D q) is not supported; send the "
                        "sequences as separate items");
    if (api_member(obj, "query_length") != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "query_length",
                        "query_length is not supported with mla: send the real query rows only");
    if (!api_get_tensor(api_member(obj, "q"), "q", ctx, 3, &it->q, e))
        return false;
    it->B = 1;
    it->batched = false;
    it->Lq = (int32_t)it->q.shape[0];
    it->H = (int32_t)it->q.shape[1];
    it->D = (int32_t)it->q.shape[2];
    it->Hkv = it->H;
    if (Dr < 2 || Dr % 2 != 0 || Dr >= it->D)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "mla.rope_dim",
                        "mla.rope_dim=%d must be even, >= 2 and below q.shape[2]=%d (q's heads "
                        "are D_nope + D_rope wide)",
                        (int)Dr, (int)it->D);
    if (!parse_keys(obj, ctx, it, it->D - Dr, e))
        return false;

    /* k_rope [Lk, D_rope], or Hugging Face's and vLLM's one head [Lk, 1, D_rope]. */
    if (api_member(obj, "k_rope") == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "k_rope",
                        "k_rope [Lk, mla.rope_dim] is required with mla (the rotated key part "
                        "every head shares)");
    if (!api_get_tensor(api_member(obj, "k_rope"), "k_rope", ctx, 0, &it->k_rope, e))
        return false;
    if (kr->ndim != 2 && kr->ndim != 3)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k_rope.shape",
                        "k_rope has %d dimensions: it is [Lk, D_rope] or [Lk, 1, D_rope]",
                        kr->ndim);
    if (kr->ndim == 3 && kr->shape[1] != 1)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k_rope.shape",
                        "k_rope.shape[1]=%lld must be 1: k_rope is one head shared by all, "
                        "[Lk, D_rope] or [Lk, 1, D_rope]",
                        (long long)kr->shape[1]);
    if (kr->shape[0] != it->Lk)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k_rope.shape",
                        "k_rope.shape[0]=%lld does not equal %s.shape[0]=%d (keys)",
                        (long long)kr->shape[0], keys, (int)it->Lk);
    if (kr->shape[kr->ndim - 1] != Dr)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k_rope.shape",
                        "k_rope.shape[%d]=%lld does not equal mla.rope_dim=%d", kr->ndim - 1,
                        (long long)kr->shape[kr->ndim - 1], (int)Dr);
    if (!agree(obj, "num_heads", it->H, "q.shape[1]", ctx, e) ||
        !agree(obj, "num_kv_heads", it->H, "q.shape[1] (mla: a k_nope head per query head)", ctx,
               e) ||
        !agree(obj, "head_dim", it->D, "q.shape[2]", ctx, e))
        return false;

    it->mla_opt.k_rope = kr->data;
    it->att.num_heads = it->H;
    it->att.num_kv_heads = it->H;
    it->att.head_dim = it->D;
    it->att.v_head_dim = it->Dv;
    it->att.q_len = it->Lq;
    it->att.k_len = it->Lk;
    it->att.q = it->q.data;
    it->out_ndim = 3;
    it->out_shape[0] = it->Lq;
    it->out_shape[1] = it->H;
    it->out_shape[2] = it->Dv;
    {
        const srv_tensor *ts[] = {&it->k_rope, &it->c_kv, &it->w_uk, &it->w_uv};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            it->input_bytes = api_add_sat(it->input_bytes, api_tensor_bytes(ts[i]));
    }
    return true;
}

void api_item_mla_free(api_item *it)
{
    api_tensor_release(&it->k_rope);
    api_tensor_release(&it->c_kv);
    api_tensor_release(&it->w_uk);
    api_tensor_release(&it->w_uv);
}
