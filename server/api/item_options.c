/* item_options.c - the options of current models in an attention item
 * (softcap, sinks, chunk_size, mask, bias, attention_mask, k_prerotated,
 * q/k norms, the query scalings by position, projection biases): their
 * table for GET /v1/schemes and their parsing, called by api_item_parse
 * (item.c) once the shapes are known.
 */
#include "api/request.h"

#include "api/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
     "content logit l (scale q.k after rope, with shaw's q.rel_k and k.rel_k terms) -> softcap * "
     "tanh(l / softcap), before position biases, bias and masks",
     "Gemma 2 (as Hugging Face, FlashAttention and ggml; ONNX Attention masks first)", "parameter",
     NULL},
    {"sinks", "tensor", "[H]",
     "a raw logit per query head joins each row's softmax and is dropped: w_ij = exp(l_ij - m) / "
     "(sum_j exp(l_ij - m) + exp(s_h - m))",
     "gpt-oss", "input", NULL},
    {"chunk_size", "integer", NULL,
     "a key is visible only when floor(qpos / C) == floor(kpos / C); ANDed with the other masks",
     "Llama 4 chunked local attention (ggml chunked SWA)", "parameter", NULL},
    {"mask", "tensor", "[Lq, Lk], [1 or H, Lq, Lk], or in a batch [1 or B, 1 or H, Lq, Lk]",
     "booleans by index, true = may attend (SDPA, ONNX); ANDed with causal, window, chunk_size and "
     "key_length; JSON true/false or 0/1, b64 of one byte per element",
     "prefix-LM, document masks, StreamingLLM, any mask", "input (BOOL)", NULL},
    {"bias", "tensor", "[Lq, Lk], [1 or H, Lq, Lk], or in a batch [1 or B, 1 or H, Lq, Lk]",
     "added to the logits with the position bias, after softcap; -inf (b64) hides the key",
     "SDPA attn_mask (float), ONNX Attention attn_mask", "input", NULL},
    {"attention_mask", "tensor", "[B, Lk]",
     "Hugging Face's key padding mask: 1 = a real token, 0 = padding (hidden); ANDed with the "
     "other masks, per sequence of a batch (3-D q or 2-D x is B = 1)",
     "Hugging Face attention_mask (2-D)", "not yet (v2 inputs are one sequence)", NULL},
    {"k_prerotated", "boolean", NULL,
     "k holds keys already rotated at k_positions (as a KV cache stores them): only q is "
     "rotated; rope, q/k/v items, not with k_norm",
     "decode against a cache of rotated keys (vLLM, llama.cpp, HF caches)", "parameter", "false"},
    {"compute_dtype", "string", "\"f32\" (default) or \"bf16\"",
     "bf16: q (after norms, rope and query scalings) and k rounded to bf16, q.k summed in float32 "
     "over bf16 pairs; the softmax in float32; the probabilities and v rounded to bf16 and P.v "
     "summed in float32 (vdpbf16ps where the CPU has AVX-512 BF16, the same bits elsewhere: "
     "/v1/schemes machine.bf16_path); error about 2^-8 relative; every query count runs the tiled "
     "kernel; not with mla or differential. f16 is refused (it needs AVX-512 FP16)",
     "PyTorch SDPA and FlashAttention on bf16 tensors, llama.cpp's bf16 dot products", "parameter",
     "\"f32\""},
    {"q_norm", "object",
     "{\"weight\": [D] or [H*D] (optional), \"eps\": 1e-6, \"weight_offset\": 0}",
     "RMSNorm of q before rope: x * (weight + weight_offset) / sqrt(mean(x^2) + eps), over each "
     "head for a weight of D, over the whole projection for H*D, the multiplier summed in "
     "float32 (Gemma stores weight - 1: weight_offset 1); without a weight x / sqrt(mean(x^2) + "
     "eps) over each head",
     "Qwen3, Gemma 3 ([D]); OLMo 2 ([H*D]); Llama 4 (no weight)",
     "input q_norm_weight, parameters q_norm_eps, q_norm_weight_offset",
     "{\"eps\": 1e-6, \"weight_offset\": 0}"},
    {"k_norm", "object",
     "{\"weight\": [D] or [Hkv*D] (optional), \"eps\": 1e-6, \"weight_offset\": 0}",
     "RMSNorm of k before rope, as q_norm", "Qwen3, Gemma 3 ([D]); OLMo 2 ([Hkv*D]); Llama 4",
     "input k_norm_weight, parameters k_norm_eps, k_norm_weight_offset",
     "{\"eps\": 1e-6, \"weight_offset\": 0}"},
    {"attn_temperature_tuning", "object", "{\"floor_scale\": 8192, \"attn_scale\": 0.1}",
     "q at position p (q_positions or the default) times log(floor((p + 1) / floor_scale) + 1) * "
     "attn_scale + 1, after norms and rope; the factor in double, rounded to float once; "
     "positions >= 0, not M-RoPE rows; any scheme",
     "Llama 4 NoPE layers (Hugging Face Llama4TextAttention)",
     "parameters attn_temperature_tuning_floor_scale, attn_temperature_tuning_attn_scale",
     "{\"floor_scale\": 8192, \"attn_scale\": 0.1}"},
    {"logn_scaling", "object", "{\"train_length\": T}",
     "q at position p times log(p + 1) / log(T) when p + 1 > T (else 1), after norms and rope; "
     "the factor in double, rounded to float once; not M-RoPE rows; any scheme",
     "Qwen-1 use_logn_attn (T = seq_length)", "parameter logn_scaling_train_length", NULL},
    {"b_q", "tensor", "[H*D]", "layer mode: q = x w_q + b_q", "GPT-2, BERT, Qwen2", "input", NULL},
    {"b_k", "tensor", "[Hkv*D]", "layer mode: k = x w_k + b_k", "GPT-2, BERT, Qwen2", "input",
     NULL},
    {"b_v", "tensor", "[Hkv*Dv]", "layer mode: v = x w_v + b_v", "GPT-2, BERT, Qwen2", "input",
     NULL},
    {"b_o", "tensor", "[d_out]", "layer mode: output = attn w_o + b_o (with w_o)", "GPT-2, BERT",
     "input", NULL},
    {"cu_seqlens", "integer array", "[S+1]",
     "packed sequences: q [L_total, H, D] (x) holds S sequences back to back, sequence s the rows "
     "cu_seqlens[s] .. cu_seqlens[s+1]-1; attention block-diagonal, each sequence exactly its own "
     "item (positions restart, causal per sequence); weights, logits, entropy, distance a list "
     "per sequence",
     "FlashAttention flash_attn_varlen_func, xFormers BlockDiagonalMask.from_seqlens, PyTorch "
     "varlen attention (vision towers, packed training batches)",
     "input (INT32 or INT64)", NULL},
    {"cu_seqlens_k", "integer array", "[S+1]",
     "with cu_seqlens: the keys' boundaries in k/v when they differ (cross attention, decode "
     "against packed caches); default cu_seqlens",
     "FlashAttention cu_seqlens_k", "input (INT32 or INT64)", NULL},
    {"differential", "object",
     "{\"pairs\": \"interleaved\" or \"halves\", \"lambda\": l or lambda_q1, lambda_k1, "
     "lambda_q2, lambda_k2 [D], \"lambda_init\": l0 or \"depth\": n, \"subln\": true, "
     "\"subln_weight\": [2D], \"subln_eps\": 1e-5}",
     "differential attention: q [Lq, 2H, D], per output head softmax(q_a k_a) - lambda "
     "softmax(q_b k_b) times V_h [Lk, 2D], then (1 - lambda_init) RMSNorm * subln_weight; lambda "
     "= exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init, lambda_init = 0.8 "
     "- 0.6 exp(-0.3 depth); interleaved: heads 2h, 2h+1, v [Lk, Hk/2, 2D]; halves: heads h, "
     "h+H, v [Lk, Hk, D]; output [Lq, H, 2D], weights [H, Lq, Lk]; schemes none, rope, xpos, "
     "rope2d; not with layer mode, batches, packed, sinks, per-head masks, q/k norms",
     "Differential Transformer (microsoft/unilm multihead_diffattn: interleaved), Hugging Face "
     "DiffLlama (halves)",
     "parameters differential_pairs, differential_lambda, differential_lambda_init, "
     "differential_depth, differential_subln, differential_subln_eps (the vectors: not yet)",
     "{\"pairs\": \"interleaved\", \"lambda_init\": 0, \"subln\": true, \"subln_eps\": 1e-5}"},
    {"mla", "object",
     "{\"rope_dim\": D_rope, \"absorbed\": false, \"w_uk\": [H, D_nope, R], \"w_uv\": "
     "[H, Dv, R]} with item tensors k_rope [Lk, D_rope] (or [Lk, 1, D_rope]) and, absorbed, c_kv "
     "[Lk, R]",
     "multi-head latent attention with decoupled RoPE: q [Lq, H, D_nope + D_rope], k = k_nope "
     "[Lk, H, D_nope], v [Lk, H, Dv]; l_hij = s (q_nope_hi . k_nope_hj + rot(q_rope_hi) . "
     "rot(k_rope_j)), the rope over the D_rope dims alone, one k_rope for every head; s = "
     "(D_nope + D_rope)^-0.5 times mscale(factor, mscale_all_dim)^2 under yarn (Hugging Face's); "
     "absorbed: k_nope_hj = w_uk[h] c_kv_j, v_hj = w_uv[h] c_kv_j (kv_b_proj.weight viewed "
     "[H, D_nope + Dv, R]), computed over the latent c_kv, equal to the expanded form to float "
     "rounding; output [Lq, H, Dv], k_rot [Lk, D_rope]; schemes rope (no M-RoPE) and none; not "
     "with layer mode, batches, packed, query_length, softcap, q/k norms, query scalings",
     "DeepSeek-V2/V3 (Hugging Face DeepseekV3Attention; the absorbed form: vLLM, SGLang, "
     "FlashMLA)",
     "parameters mla_rope_dim, mla_absorbed; inputs k_rope, c_kv, w_uk, w_uv",
     "{\"absorbed\": false}"},
};

const api_option *api_options(size_t *n)
{
    *n = sizeof options / sizeof options[0];
    return options;
}

/* A norm as the descriptor holds it (q's or k's members of pa_attention). */
typedef struct norm_out {
    srv_tensor *w;
    int32_t *len;
    float *eps, *offset;
    bool *unweighted;
} norm_out;

/* {"weight": tensor, "eps": number, "weight_offset": number} at member name
 * (q_norm, k_norm); without a weight, the norm without one. */
static bool parse_norm(const cJSON *v, const char *name, const api_ctx *ctx, const norm_out *o,
                       api_err *e)
{
    static const char *const fields[] = {"weight", "eps", "weight_offset"};
    char path[48];
    double eps = 1e-6, offset = 0.0;
    const cJSON *m, *w;
    if (!cJSON_IsObject(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s must be an object {\"weight\": tensor, \"eps\": number, "
                        "\"weight_offset\": number}, found %s",
                        name, api_json_type(v));
    if (!api_check_fields(v, fields, 3, name, name, ctx, e))
        return false;
    snprintf(path, sizeof path, "%s.eps", name);
    if ((m = api_member(v, "eps")) != NULL && !api_get_number(m, path, ctx, &eps, e))
        return false;
    if (!(eps > 0) || eps > 3.4e38)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s=%.17g must be a positive number", path, eps);
    w = api_member(v, "weight");
    snprintf(path, sizeof path, "%s.weight_offset", name);
    if ((m = api_member(v, "weight_offset")) != NULL) {
        if (!api_get_number(m, path, ctx, &offset, e))
            return false;
        if (w == NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s=%.17g is added to %s.weight, but %s has no weight", path, offset,
                            name, name);
        if (fabs(offset) > 3.4e38)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path, "%s=%.17g is past float32",
                            path, offset);
    }
    *o->eps = (float)eps;
    *o->offset = (float)offset;
    if (w == NULL) { /* x / sqrt(mean(x^2) + eps) over each head: Llama 4's L2Norm */
        *o->unweighted = true;
        return true;
    }
    snprintf(path, sizeof path, "%s.weight", name);
    if (!api_get_tensor(w, path, ctx, 1, o->w, e))
        return false;
    *o->len = (int32_t)o->w->shape[0];
    return true;
}

/* attn_temperature_tuning {"floor_scale": F, "attn_scale": A}, Llama 4's
 * values (8192, 0.1) for a member left out. */
static bool parse_temperature(const cJSON *v, const api_ctx *ctx, api_item *it, api_err *e)
{
    static const char *const fields[] = {"floor_scale", "attn_scale"};
    double val[2] = {8192.0, 0.1};
    if (!cJSON_IsObject(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "attn_temperature_tuning",
                        "attn_temperature_tuning must be an object {\"floor_scale\": number, "
                        "\"attn_scale\": number} (defaults 8192 and 0.1), found %s",
                        api_json_type(v));
    if (!api_check_fields(v, fields, 2, "attn_temperature_tuning", "attn_temperature_tuning", ctx,
                          e))
        return false;
    for (int i = 0; i < 2; i++) {
        const cJSON *m = api_member(v, fields[i]);
        char path[48];
        snprintf(path, sizeof path, "attn_temperature_tuning.%s", fields[i]);
        if (m != NULL && !api_get_number(m, path, ctx, &val[i], e))
            return false;
        if (!(val[i] > 0))
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                            "%s=%.17g must be a positive number", path, val[i]);
    }
    it->att.temperature_floor_scale = val[0];
    it->att.temperature_attn_scale = val[1];
    return true;
}

/* logn_scaling {"train_length": T}, T >= 2 required. */
static bool parse_logn(const cJSON *v, const api_ctx *ctx, api_item *it, api_err *e)
{
    static const char *const fields[] = {"train_length"};
    const char *path = "logn_scaling.train_length";
    const cJSON *m;
    int32_t t;
    if (!cJSON_IsObject(v))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "logn_scaling",
                        "logn_scaling must be an object {\"train_length\": integer}, found %s",
                        api_json_type(v));
    if (!api_check_fields(v, fields, 1, "logn_scaling", "logn_scaling", ctx, e))
        return false;
    if ((m = api_member(v, "train_length")) == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s is required: the context length the model was trained at (Qwen-1's "
                        "seq_length)",
                        path);
    if (!api_get_int(m, path, ctx, &t, e))
        return false;
    if (t < 2)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s=%d must be at least 2 (the factor divides by log(train_length))", path,
                        (int)t);
    it->att.logn_train_length = t;
    return true;
}

/* A layer-mode projection bias of n values. */
static bool parse_proj_bias(const cJSON *obj, const char *name, int64_t n, const char *what,
                            const api_ctx *ctx, const api_item *it, srv_tensor *t,
                            const float **out, api_err *e)
{
    const cJSON *v = api_member(obj, name);
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
bool api_item_parse_options(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *v;
    bool present;
    int32_t iv;

    if ((v = api_member(obj, "compute_dtype")) != NULL) {
        const char *s;
        if (!api_get_string(v, "compute_dtype", ctx, &s, e))
            return false;
        if (strcmp(s, "f32") == 0)
            it->att.compute_dtype = PA_DTYPE_F32;
        else if (strcmp(s, "bf16") == 0)
            it->att.compute_dtype = PA_DTYPE_BF16;
        else if (strcmp(s, "f16") == 0)
            return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "compute_dtype",
                            "compute_dtype \"f16\" is not available: f16 products need the CPU "
                            "feature AVX-512 FP16, and posattn computes in \"f32\" or \"bf16\"");
        else
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "compute_dtype",
                            "compute_dtype \"%s\" is not one of \"f32\", \"bf16\"", s);
    }
    if ((v = api_member(obj, "k_prerotated")) != NULL &&
        !api_get_bool(v, "k_prerotated", ctx, &it->att.k_prerotated, e))
        return false;
    if ((v = api_member(obj, "softcap")) != NULL) {
        double d;
        if (!api_get_number(v, "softcap", ctx, &d, e))
            return false;
        if (!(d > 0) || d > 3.4e38)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "softcap",
                            "softcap=%.17g must be a positive number (leave it out for none)", d);
        it->att.softcap = (float)d;
    }
    if (!api_opt_int(obj, "chunk_size", ctx, &iv, &present, e))
        return false;
    if (present) {
        if (iv < 1)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "chunk_size",
                            "chunk_size=%d must be positive (leave it out for none)", (int)iv);
        it->att.chunk_size = iv;
    }
    if ((v = api_member(obj, "sinks")) != NULL) {
        if (!api_get_tensor(v, "sinks", ctx, 1, &it->sinks, e))
            return false;
        if (it->sinks.shape[0] != it->H)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "sinks.shape[0]",
                            "sinks.shape[0]=%lld must be num_heads=%d: one sink per query head",
                            (long long)it->sinks.shape[0], (int)it->H);
        it->att.sinks = it->sinks.data;
    }
    if ((v = api_member(obj, "mask")) != NULL) {
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
    if ((v = api_member(obj, "attention_mask")) != NULL && !parse_padding_mask(v, ctx, it, e))
        return false;
    if ((v = api_member(obj, "bias")) != NULL) {
        if (!parse_score_tensor(v, "bias", SRV_ELEM_FLOAT_NEG_INF, ctx, it, &it->bias,
                                &it->att.bias_heads, &it->bias_stride, e))
            return false;
        it->att.bias = it->bias.data;
    }
    if ((v = api_member(obj, "q_norm")) != NULL) {
        const norm_out o = {&it->q_norm, &it->att.q_norm_len, &it->att.q_norm_eps,
                            &it->att.q_norm_offset, &it->att.q_norm_unweighted};
        if (!parse_norm(v, "q_norm", ctx, &o, e))
            return false;
        it->att.q_norm = it->q_norm.data;
    }
    if ((v = api_member(obj, "k_norm")) != NULL) {
        const norm_out o = {&it->k_norm, &it->att.k_norm_len, &it->att.k_norm_eps,
                            &it->att.k_norm_offset, &it->att.k_norm_unweighted};
        if (!parse_norm(v, "k_norm", ctx, &o, e))
            return false;
        it->att.k_norm = it->k_norm.data;
    }
    if ((v = api_member(obj, "attn_temperature_tuning")) != NULL &&
        !parse_temperature(v, ctx, it, e))
        return false;
    if ((v = api_member(obj, "logn_scaling")) != NULL && !parse_logn(v, ctx, it, e))
        return false;
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
