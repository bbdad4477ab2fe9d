/* item_options.c - the options of current models in an attention item
 * (softcap, sinks, chunk_size, mask, bias, attention_mask, k_prerotated,
 * q/k norms, projection biases): their table for GET /v1/schemes and
 * their parsing, called by api_item_parse (item.c) once the shapes are
 * known.
 */
#include "api/request.h"

#include "api/json.h"

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
    if ((m = api_member(v, "eps")) != NULL && !api_get_number(m, path, ctx, &eps, e))
        return false;
    if (!(eps > 0) || eps > 3.4e38)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, path,
                        "%s=%.17g must be a positive number", path, eps);
    snprintf(path, sizeof path, "%s.weight", name);
    if ((m = api_member(v, "weight")) == NULL)
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
        if (!parse_norm(v, "q_norm", it->H, ctx, &it->q_norm, &it->att.q_norm_len,
                        &it->att.q_norm_eps, e))
            return false;
        it->att.q_norm = it->q_norm.data;
    }
    if ((v = api_member(obj, "k_norm")) != NULL) {
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
