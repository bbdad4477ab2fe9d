/* scheme.c - a request's scheme object into a pa_scheme (with the tables
 * it borrows), and the one table of scheme parameters that the parser reads
 * and GET /v1/schemes documents. Every disagreement is reported with the
 * field and the values; the core library checks the scheme against the
 * shapes later.
 */
#include "api/request.h"

#include "api/json.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Scheme parameters                                                         */
/* ------------------------------------------------------------------------- */

#define OFF(m) offsetof(pa_scheme, m)
#define SC(x) (1u << PA_ROPE_SCALING_##x)
#define SC_FACTOR                                                                                  \
    (SC(LINEAR) | SC(NTK) | SC(DYNAMIC) | SC(YARN) | SC(LLAMA3) | SC(LONGROPE) | SC(PROPORTIONAL))
#define SC_ORIG (SC(DYNAMIC) | SC(YARN) | SC(LLAMA3) | SC(LONGROPE))

/* The one list of scheme parameters: the parser reads it and GET
 * /v1/schemes renders it, so the two cannot disagree. Defaults are read from
 * pa_scheme_init at the offset. */
static const api_param params[] = {
    {PA_SCHEME_SINUSOIDAL, "base", API_PARAM_NUMBER, OFF(sinusoidal.base), 0, NULL, "optional",
     "frequency base: PE[p, 2i] = sin(p / base^(2i/d))"},
    {PA_SCHEME_SINUSOIDAL, "layout", API_PARAM_ENUM, OFF(sinusoidal.layout), 0, NULL, "optional",
     "'interleaved' (Vaswani et al.: sin on even dims, cos on odd) or 'concat' "
     "(tensor2tensor / fairseq: [sin | cos])"},
    {PA_SCHEME_LEARNED, "table", API_PARAM_TENSOR, 0, 0, "[rows, d_model]", "required",
     "learned position embeddings; row (position + offset) is added to x"},
    {PA_SCHEME_LEARNED, "offset", API_PARAM_INT, OFF(learned.offset), 0, NULL, "optional",
     "added to each position to find its row (OPT uses 2); a row outside the table is an "
     "error"},
    {PA_SCHEME_SHAW, "max_relative_position", API_PARAM_INT, OFF(shaw.max_relative_position), 0,
     NULL, "optional",
     "K >= 0: the relative position (see direction) is clipped to [-K, K]; the tables have 2K+1 "
     "rows"},
    {PA_SCHEME_SHAW, "direction", API_PARAM_ENUM, OFF(shaw.direction), 0, NULL, "optional",
     "the tables' index: 'key_minus_query' (Shaw et al.: clip(kpos - qpos, -K, K) + K) or "
     "'query_minus_key' (Hugging Face BERT relative_key / relative_key_query: clip(qpos - kpos, "
     "-K, K) + K; with K = max_position_embeddings - 1, rel_k is BERT's distance_embedding "
     "weight as stored)"},
    {PA_SCHEME_SHAW, "key_term", API_PARAM_BOOL, OFF(shaw.key_term), 0, NULL, "optional",
     "also add scale * k_j . rel_k[index] to the logits (BERT relative_key_query; with GQA the "
     "query head's kv head)"},
    {PA_SCHEME_SHAW, "rel_k", API_PARAM_TENSOR, 0, 0, "[2K+1, D]", "required for attention",
     "relative key embeddings: logits += scale * q_i . rel_k[index] (index by direction)"},
    {PA_SCHEME_SHAW, "rel_v", API_PARAM_TENSOR, 0, 0, "[2K+1, Dv]", "optional",
     "relative value embeddings: output += sum_j a_ij rel_v[index]"},
    {PA_SCHEME_T5, "num_buckets", API_PARAM_INT, OFF(t5.num_buckets), 0, NULL, "optional",
     "buckets of relative position (even and >= 4 when bidirectional)"},
    {PA_SCHEME_T5, "max_distance", API_PARAM_INT, OFF(t5.max_distance), 0, NULL, "optional",
     "distance beyond which relative positions share the last bucket"},
    {PA_SCHEME_T5, "bidirectional", API_PARAM_BOOL, OFF(t5.bidirectional), 0, NULL, "optional",
     "true for encoder buckets (both directions), false for causal decoder buckets"},
    {PA_SCHEME_T5, "table", API_PARAM_TENSOR, 0, 0, "[num_buckets, H]", "required for attention",
     "logit bias per bucket and head (T5 does not scale logits)"},
    {PA_SCHEME_ROPE, "base", API_PARAM_NUMBER, OFF(rope.base), 0, NULL, "optional",
     "frequency base: inv_freq[i] = base^(-2i/r)"},
    {PA_SCHEME_ROPE, "rotary_dim", API_PARAM_INT, OFF(rope.rotary_dim), 0, NULL, "optional",
     "r, the dims rotated (even, <= head_dim; 0 = head_dim); the others pass through"},
    {PA_SCHEME_ROPE, "layout", API_PARAM_ENUM, OFF(rope.layout), 0, NULL, "optional",
     "'neox' (pairs i, i + r/2; HF rotate_half) or 'gptj' (pairs 2i, 2i+1)"},
    {PA_SCHEME_ROPE, "scaling", API_PARAM_ENUM, OFF(rope.scaling), 0, NULL, "optional",
     "context extension: none, linear, ntk, dynamic, yarn, llama3, longrope, proportional "
     "(HF semantics), ntk_alpha (vLLM's Hunyuan)"},
    {PA_SCHEME_ROPE, "factor", API_PARAM_NUMBER, OFF(rope.factor), SC_FACTOR, NULL,
     "required for linear, ntk, dynamic, yarn",
     "scaling factor (0 = the scaling's default: llama3 8, longrope 1, proportional 1)"},
    {PA_SCHEME_ROPE, "original_max_position", API_PARAM_INT, OFF(rope.original_max_position),
     SC_ORIG, NULL, "required for dynamic, yarn, longrope",
     "context length the model was trained on (0 = the default: llama3 8192)"},
    {PA_SCHEME_ROPE, "attention_factor", API_PARAM_NUMBER, OFF(rope.attention_factor), 0, NULL,
     "optional",
     "multiplies cos and sin (0 = the scaling's default: yarn 0.1 ln(factor) + 1, or "
     "mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set; longrope "
     "sqrt(1 + ln(factor) / ln(original_max_position)), 1 when factor <= 1; 1 for the others)"},
    {PA_SCHEME_ROPE, "beta_fast", API_PARAM_NUMBER, OFF(rope.beta_fast), SC(YARN), NULL, "optional",
     "yarn: rotations at which the ramp starts keeping original frequencies"},
    {PA_SCHEME_ROPE, "beta_slow", API_PARAM_NUMBER, OFF(rope.beta_slow), SC(YARN), NULL, "optional",
     "yarn: rotations below which frequencies are fully interpolated"},
    {PA_SCHEME_ROPE, "truncate", API_PARAM_BOOL, OFF(rope.truncate), SC(YARN), NULL, "optional",
     "yarn: floor/ceil the ramp bounds, as HF does by default"},
    {PA_SCHEME_ROPE, "mscale", API_PARAM_NUMBER, OFF(rope.mscale), SC(YARN), NULL, "optional",
     "yarn: with mscale_all_dim, attention factor mscale(f, mscale)/mscale(f, mscale_all_dim) "
     "(0 = unset)"},
    {PA_SCHEME_ROPE, "mscale_all_dim", API_PARAM_NUMBER, OFF(rope.mscale_all_dim), SC(YARN), NULL,
     "optional", "yarn: see mscale (0 = unset)"},
    {PA_SCHEME_ROPE, "low_freq_factor", API_PARAM_NUMBER, OFF(rope.low_freq_factor), SC(LLAMA3),
     NULL, "optional",
     "llama3: wavelengths above original_max_position/low_freq_factor are divided by factor"},
    {PA_SCHEME_ROPE, "high_freq_factor", API_PARAM_NUMBER, OFF(rope.high_freq_factor), SC(LLAMA3),
     NULL, "optional", "llama3: wavelengths below original_max_position/high_freq_factor are kept"},
    {PA_SCHEME_ROPE, "short_factor", API_PARAM_NUMBER_ARRAY, 0, SC(LONGROPE), "[rotary_dim/2]",
     "required for longrope",
     "longrope: per-frequency factors used while max position + 1 <= original_max_position"},
    {PA_SCHEME_ROPE, "long_factor", API_PARAM_NUMBER_ARRAY, 0, SC(LONGROPE), "[rotary_dim/2]",
     "required for longrope", "longrope: per-frequency factors used beyond it"},
    {PA_SCHEME_ROPE, "partial_rotary_factor", API_PARAM_NUMBER, OFF(rope.partial_rotary_factor),
     SC(PROPORTIONAL), NULL, "optional",
     "proportional (Gemma 4): in (0, 1]; the first floor(partial_rotary_factor * r / 2) "
     "frequencies keep base^(-2i/r), the rest are 0 (those pairs pass unrotated); the "
     "denominator stays r"},
    {PA_SCHEME_ROPE, "alpha", API_PARAM_NUMBER, OFF(rope.alpha), SC(NTK_ALPHA), NULL,
     "required for ntk_alpha", "ntk_alpha (Hunyuan): base' = base * alpha^(r/(r-2)), > 0"},
    {PA_SCHEME_ROPE, "mrope_section", API_PARAM_INT_ARRAY, 0, 0, "[3]", "optional",
     "multimodal RoPE (Qwen2-VL, Qwen2.5-VL): [t, h, w] frequencies, summing to rotary_dim/2, "
     "that take their angle from the temporal, height and width position rows; q_positions "
     "and k_positions may then be [3, L] (masks follow token order)"},
    {PA_SCHEME_ROPE, "mrope_interleaved", API_PARAM_BOOL, OFF(rope.mrope_interleaved), 0, NULL,
     "optional",
     "Qwen3-VL: h and w take every third frequency from 1 and 2 (up to 3h, 3w), t the rest, "
     "instead of contiguous sections"},
    {PA_SCHEME_ALIBI, "max_bias", API_PARAM_NUMBER, OFF(alibi.max_bias), 0, NULL, "optional",
     "slopes m_h = 2^(-max_bias (h+1) / n), n = 2^floor(log2 H) (Press et al. for any H)"},
    {PA_SCHEME_ALIBI, "symmetric", API_PARAM_BOOL, OFF(alibi.symmetric), 0, NULL, "optional",
     "bias -m_h |qpos - kpos| instead of -m_h (qpos - kpos)"},
    {PA_SCHEME_ALIBI, "slopes", API_PARAM_NUMBER_ARRAY, 0, 0, "[H]", "optional",
     "explicit slopes, replacing the computed ones"},
    {PA_SCHEME_KERPLE, "form", API_PARAM_ENUM, OFF(kerple.form), 0, NULL, "optional",
     "'log': bias -r1_h log(1 + r2_h |qpos - kpos|); 'power': -r1_h |qpos - kpos|^r2_h "
     "(chijames/KERPLE ParallelKerpleLog, ParallelKerplePower)"},
    {PA_SCHEME_KERPLE, "r1", API_PARAM_NUMBER_ARRAY, 0, 0, "[H]", "required",
     "per head: the multiplier (>= 0.01; the reference clamps below)"},
    {PA_SCHEME_KERPLE, "r2", API_PARAM_NUMBER_ARRAY, 0, 0, "[H]", "required",
     "per head: log's distance factor, power's exponent (>= 0.01; power: <= 2)"},
    {PA_SCHEME_SANDWICH, "hidden_size", API_PARAM_INT, OFF(sandwich.hidden_size), 0, NULL,
     "optional",
     "d, NeMo's hidden_size (its kv_channels: the head dim; 0 = head_dim; required by "
     "/v1/encode): bias (sum_{i=1}^{ceil(d/2)} cos(|qpos - kpos| / 10000^(2i/d)) - d/2) * H / "
     "(8 (h+1))"},
    {PA_SCHEME_XPOS, "base", API_PARAM_NUMBER, OFF(xpos.base), 0, NULL, "optional",
     "frequency base: theta_i = base^(-2i/D), as rope (torchscale fixes 10000)"},
    {PA_SCHEME_XPOS, "scale_base", API_PARAM_NUMBER, OFF(xpos.scale_base), 0, NULL, "optional",
     "> 0: q at m times zeta_i^(m/scale_base), k at n times zeta_i^(-n/scale_base), zeta_i = "
     "(2i + 0.4 D) / (1.4 D) (torchscale XPOS); positions shifted by a common centre, which "
     "cancels in q.k"},
    {PA_SCHEME_XPOS, "layout", API_PARAM_ENUM, OFF(xpos.layout), 0, NULL, "optional",
     "'gptj' (pairs 2i, 2i+1: torchscale's rotate_every_two) or 'neox' (pairs i, i + D/2)"},
    {PA_SCHEME_ROPE2D, "variant", API_PARAM_ENUM, OFF(rope2d.variant), 0, NULL, "optional",
     "'axial' (timm RotaryEmbeddingCat, in_pixels=False, as EVA-02: D/4 bands base^(-k/(D/4)) "
     "per axis, the first D/4 pairs by row, the rest by column) or 'pixtral' "
     "(mistral-inference precompute_freqs_cis_2d: theta_j = base^(-2j/D); rows take the even "
     "j, columns the odd ones) or 'dinov3' (facebookresearch/dinov3 RopePositionEmbedding: "
     "axial's pairs, frequencies 2 pi / base^(2k/(D/2)), coordinates 2 (i + 1/2) / n - 1; needs "
     "grid; send its base, 100) or 'mixed' (RoPE-Mixed: learned per-head freqs)"},
    {PA_SCHEME_ROPE2D, "base", API_PARAM_NUMBER, OFF(rope2d.base), 0, NULL, "optional",
     "timm's temperature, Pixtral's rope_theta (> 0)"},
    {PA_SCHEME_ROPE2D, "layout", API_PARAM_ENUM, OFF(rope2d.layout), 0, NULL, "optional",
     "'gptj' (pairs 2p, 2p+1: timm's rot, mistral-inference's complex view) or 'neox' (pairs "
     "p, p + D/2: Hugging Face Pixtral and Qwen2-VL, timm's rotate_half); default gptj, neox "
     "for variant dinov3 (its rope_rotate_half)"},
    {PA_SCHEME_ROPE2D, "grid", API_PARAM_INT_ARRAY, 0, 0, "[2]", "optional",
     "[rows, cols] of patches: token prefix_tokens + t is at (t / cols, t % cols), row-major, "
     "when q_positions / k_positions [2, L] are not sent"},
    {PA_SCHEME_ROPE2D, "ref_grid", API_PARAM_INT_ARRAY, 0, 0, "[2]", "optional",
     "axial: timm's ref_feat_shape [rows, cols] (EVA-02's resize rule): coordinates times "
     "ref / grid; needs grid"},
    {PA_SCHEME_ROPE2D, "grid_offset", API_PARAM_NUMBER, OFF(rope2d.grid_offset), 0, NULL,
     "optional", "axial: timm's grid_offset, added to both coordinates"},
    {PA_SCHEME_ROPE2D, "in_pixels", API_PARAM_BOOL, OFF(rope2d.in_pixels), 0, NULL, "optional",
     "axial: timm's pixel grid (RotaryEmbeddingCat's default in_pixels=True): each axis's "
     "coordinates linspace(-1, 1, n), bands pi * pixel_freq_bands(max_res, linear_bands); "
     "needs grid"},
    {PA_SCHEME_ROPE2D, "max_res", API_PARAM_NUMBER, OFF(rope2d.max_res), 0, NULL, "optional",
     "in_pixels: timm's max_res (0 = 224, timm's default): the highest band is pi * max_res / 2"},
    {PA_SCHEME_ROPE2D, "linear_bands", API_PARAM_BOOL, OFF(rope2d.linear_bands), 0, NULL,
     "optional", "in_pixels: bands spaced linearly (default false: log-spaced, as timm)"},
    {PA_SCHEME_ROPE2D, "prefix_tokens", API_PARAM_INT, OFF(rope2d.prefix_tokens), 0, NULL,
     "optional",
     "leading tokens left unrotated (class and register tokens), as timm and DINOv3 leave "
     "their prefix"},
    {PA_SCHEME_ROPE2D, "merge_size", API_PARAM_INT, OFF(rope2d.merge_size), 0, NULL, "optional",
     "m > 1: the grid's tokens come in m x m blocks, row-major, as Qwen2-VL's vision tower "
     "orders them (rot_pos_emb); grid rows and cols multiples of m"},
    {PA_SCHEME_ROPE2D, "freqs", API_PARAM_TENSOR, 0, 0, "[2, H, D/2]", "required for mixed",
     "mixed (RoPE-Mixed, timm RotaryEmbeddingMixed): each head's learned frequencies, fx then "
     "fy; pair p of head h turns by row * fx[h, p] + col * fy[h, p]; num_kv_heads must equal "
     "num_heads"},
    {PA_SCHEME_ROPE2D, "normalize", API_PARAM_ENUM, OFF(rope2d.normalize), 0, NULL, "optional",
     "dinov3: 'separate' (each axis by its own size), 'max' or 'min' (both by max or min of "
     "rows and cols), DINOv3's normalize_coords"},
    {PA_SCHEME_FIRE, "c", API_PARAM_NUMBER, OFF(fire.c), 0, NULL, "optional",
     "psi(x) = log(|c x| + 1), applied to |qpos - kpos| and to the normaliser's position (the "
     "peer's init_c)"},
    {PA_SCHEME_FIRE, "L", API_PARAM_NUMBER, OFF(fire.L), 0, NULL, "optional",
     "threshold: the normaliser is psi(max(qpos, |L|)) + eps (the peer's |L_multiplier * "
     "init_L|)"},
    {PA_SCHEME_FIRE, "eps", API_PARAM_NUMBER, OFF(fire.eps), 0, NULL, "optional",
     "> 0, added to the normaliser: x = psi(|qpos - kpos|) / (psi(max(qpos, |L|)) + eps)"},
    {PA_SCHEME_FIRE, "w1", API_PARAM_NUMBER_ARRAY, 0, 0, "[hidden]", "required",
     "first layer's weights (Linear(1, hidden); mlp.0.weight flattened); hidden is their count"},
    {PA_SCHEME_FIRE, "b1", API_PARAM_NUMBER_ARRAY, 0, 0, "[hidden]", "required",
     "first layer's biases (mlp.0.bias)"},
    {PA_SCHEME_FIRE, "w2", API_PARAM_NUMBER_ARRAY, 0, 0, "[hidden, H]", "required",
     "second layer's weights, row-major w2[k * H + h]: the transpose of PyTorch's mlp.2.weight "
     "[H, hidden]; bias_h = b2[h] + sum_k w2[k, h] relu(w1[k] x + b1[k])"},
    {PA_SCHEME_FIRE, "b2", API_PARAM_NUMBER_ARRAY, 0, 0, "[H]", "required",
     "second layer's biases (mlp.2.bias), one per head"},
    {PA_SCHEME_COPE, "npos_max", API_PARAM_INT, OFF(cope.npos_max), 0, NULL, "optional",
     "positions 0 .. npos_max-1 (>= 2; 0 = pos_emb's rows, which it must match): p_ij = "
     "min(sum_{t >= j} g_it, npos_max - 1), g_it = sigmoid(scale q_i.k_t), 0 for hidden keys"},
    {PA_SCHEME_COPE, "pos_emb", API_PARAM_TENSOR, 0, 0, "[npos_max, D] or [H, npos_max, D]",
     "required",
     "position embeddings, shared by the heads or one table per head (the transpose of "
     "facebookresearch/RAM's [1, head_dim, npos]); the logit gains e[ceil p] w + e[floor p] "
     "(1 - w), e = q_i.pos_emb, w = p - floor p, times scale unless nodiv"},
    {PA_SCHEME_COPE, "nodiv", API_PARAM_BOOL, OFF(cope.nodiv), 0, NULL, "optional",
     "the reference's --cope-nodiv: logit = scale q.k + pos instead of scale (q.k + pos)"},
};

#undef OFF
#undef SC
#undef SC_FACTOR
#undef SC_ORIG

const api_param *api_params(size_t *n)
{
    *n = sizeof params / sizeof params[0];
    return params;
}

const char *api_param_enum_name(const api_param *p, int v)
{
    if (p->type == PA_SCHEME_SINUSOIDAL)
        return pa_sinusoidal_layout_name((pa_sinusoidal_layout)v);
    if (p->type == PA_SCHEME_SHAW)
        return pa_shaw_direction_name((pa_shaw_direction)v);
    if (p->type == PA_SCHEME_KERPLE)
        return pa_kerple_form_name((pa_kerple_form)v);
    if (p->type == PA_SCHEME_ROPE2D && strcmp(p->name, "variant") == 0)
        return pa_rope2d_variant_name((pa_rope2d_variant)v);
    if (p->type == PA_SCHEME_ROPE2D && strcmp(p->name, "normalize") == 0)
        return pa_rope2d_normalize_name((pa_rope2d_normalize)v);
    if (strcmp(p->name, "layout") == 0)
        return pa_rope_layout_name((pa_rope_layout)v);
    return pa_rope_scaling_name((pa_rope_scaling)v);
}

const char *api_param_kind_name(api_param_kind k)
{
    switch (k) {
    case API_PARAM_NUMBER:
        return "number";
    case API_PARAM_INT:
        return "integer";
    case API_PARAM_BOOL:
        return "boolean";
    case API_PARAM_ENUM:
        return "string";
    case API_PARAM_TENSOR:
        return "tensor";
    case API_PARAM_NUMBER_ARRAY:
        return "number[]";
    case API_PARAM_INT_ARRAY:
        return "integer[]";
    }
    return "unknown";
}

static const api_param *find_param(pa_scheme_type type, const char *name)
{
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        if (params[i].type == type && strcmp(params[i].name, name) == 0)
            return &params[i];
    return NULL;
}

/* Names of the scalings in mask, for messages. */
static void scaling_list(unsigned mask, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < PA_ROPE_SCALING_COUNT; s++) {
        if (mask & (1u << s)) {
            int w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "",
                             pa_rope_scaling_name((pa_rope_scaling)s));
            if (w < 0 || (size_t)w >= cap - used)
                break;
            used += (size_t)w;
        }
    }
}

static bool parse_enum(const api_param *p, const cJSON *v, const char *rel, const api_ctx *ctx,
                       pa_scheme *s, api_err *e)
{
    const char *name;
    bool ok;
    if (!api_get_string(v, rel, ctx, &name, e))
        return false;
    if (p->type == PA_SCHEME_SINUSOIDAL) {
        ok = pa_sinusoidal_layout_from_name(name, &s->sinusoidal.layout);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'interleaved' or 'concat'", rel, name);
    } else if (p->type == PA_SCHEME_SHAW) {
        ok = pa_shaw_direction_from_name(name, &s->shaw.direction);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'key_minus_query' or 'query_minus_key'", rel, name);
    } else if (p->type == PA_SCHEME_KERPLE) {
        ok = pa_kerple_form_from_name(name, &s->kerple.form);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'log' or 'power'", rel, name);
    } else if (p->type == PA_SCHEME_ROPE2D && strcmp(p->name, "variant") == 0) {
        ok = pa_rope2d_variant_from_name(name, &s->rope2d.variant);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'axial', 'pixtral', 'dinov3' or 'mixed'", rel, name);
    } else if (p->type == PA_SCHEME_ROPE2D && strcmp(p->name, "normalize") == 0) {
        ok = pa_rope2d_normalize_from_name(name, &s->rope2d.normalize);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'separate', 'max' or 'min'", rel, name);
    } else if (strcmp(p->name, "layout") == 0) {
        ok = pa_rope_layout_from_name(name, p->type == PA_SCHEME_XPOS     ? &s->xpos.layout
                                            : p->type == PA_SCHEME_ROPE2D ? &s->rope2d.layout
                                                                          : &s->rope.layout);
        if (!ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not 'neox' or 'gptj'", rel, name);
    } else {
        ok = pa_rope_scaling_from_name(name, &s->rope.scaling);
        if (!ok) {
            char list[128];
            scaling_list((1u << PA_ROPE_SCALING_COUNT) - 1, list, sizeof list);
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                            "%s='%.32s' is not a rope scaling (%s)", rel, name, list);
        }
    }
    return true;
}

size_t api_tensor_bytes(const srv_tensor *t)
{
    return t->borrowed ? 0 : api_mul_sat(t->count, sizeof(float));
}

static bool parse_tensor_param(const api_param *p, const cJSON *v, const char *rel,
                               const api_ctx *ctx, api_scheme *out, api_err *e)
{
    srv_tensor *t = p->type == PA_SCHEME_SHAW
                        ? (strcmp(p->name, "rel_k") == 0 ? &out->rel_k : &out->rel_v)
                        : &out->table;
    /* cope's pos_emb is [npos_max, D] or [H, npos_max, D]; rope2d's freqs
     * [2, H, D/2]. */
    if (!api_get_tensor(v, rel, ctx,
                        p->type == PA_SCHEME_COPE     ? 0
                        : p->type == PA_SCHEME_ROPE2D ? 3
                                                      : 2,
                        t, e))
        return false;
    out->bytes = api_add_sat(out->bytes, api_tensor_bytes(t));
    switch (p->type) {
    case PA_SCHEME_ROPE2D:
        if (t->shape[0] != 2)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, rel,
                            "%s.shape[0]=%lld: it is [2, num_heads, head_dim/2], fx then fy", rel,
                            (long long)t->shape[0]);
        out->s.rope2d.freqs = t->data;
        out->s.rope2d.num_freqs = (int32_t)t->count;
        break;
    case PA_SCHEME_COPE:
        if (t->ndim != 2 && t->ndim != 3)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, rel,
                            "%s has %d dims; it is [npos_max, head_dim] (shared by the heads) or "
                            "[num_heads, npos_max, head_dim]",
                            rel, t->ndim);
        out->s.cope.pos_emb = t->data;
        out->s.cope.pos_emb_heads = t->ndim == 3 ? (int32_t)t->shape[0] : 1;
        out->s.cope.pos_emb_rows = (int32_t)t->shape[t->ndim - 2];
        out->s.cope.pos_emb_cols = (int32_t)t->shape[t->ndim - 1];
        break;
    case PA_SCHEME_LEARNED:
        out->s.learned.table = t->data;
        out->s.learned.rows = (int32_t)t->shape[0];
        out->s.learned.cols = (int32_t)t->shape[1];
        break;
    case PA_SCHEME_T5:
        out->s.t5.table = t->data;
        out->s.t5.table_rows = (int32_t)t->shape[0];
        out->s.t5.table_cols = (int32_t)t->shape[1];
        break;
    default:
        if (t == &out->rel_k) {
            out->s.shaw.rel_k = t->data;
            out->s.shaw.rel_k_rows = (int32_t)t->shape[0];
            out->s.shaw.rel_k_cols = (int32_t)t->shape[1];
        } else {
            out->s.shaw.rel_v = t->data;
            out->s.shaw.rel_v_rows = (int32_t)t->shape[0];
            out->s.shaw.rel_v_cols = (int32_t)t->shape[1];
        }
        break;
    }
    return true;
}

static bool parse_array_param(const api_param *p, const cJSON *v, const char *rel,
                              const api_ctx *ctx, api_scheme *out, api_err *e)
{
    float *a = NULL;
    int32_t n = 0;
    if (!api_get_float_array(v, rel, ctx, &a, &n, e))
        return false;
    out->bytes = api_add_sat(out->bytes, (size_t)n * sizeof(float));
    if (p->type == PA_SCHEME_ALIBI) {
        out->slopes = a;
        out->s.alibi.slopes = a;
        out->s.alibi.num_slopes = n;
    } else if (p->type == PA_SCHEME_KERPLE && strcmp(p->name, "r1") == 0) {
        out->r1 = a;
        out->s.kerple.r1 = a;
        out->s.kerple.num_r1 = n;
    } else if (p->type == PA_SCHEME_KERPLE) {
        out->r2 = a;
        out->s.kerple.r2 = a;
        out->s.kerple.num_r2 = n;
    } else if (p->type == PA_SCHEME_FIRE) {
        pa_fire *f = &out->s.fire;
        if (strcmp(p->name, "w1") == 0) {
            out->w1 = a;
            f->w1 = a;
            f->num_w1 = n;
        } else if (strcmp(p->name, "b1") == 0) {
            out->b1 = a;
            f->b1 = a;
            f->num_b1 = n;
        } else if (strcmp(p->name, "w2") == 0) {
            out->w2 = a;
            f->w2 = a;
            f->num_w2 = n;
        } else {
            out->b2 = a;
            f->b2 = a;
            f->num_b2 = n;
        }
    } else if (strcmp(p->name, "short_factor") == 0) {
        out->short_factor = a;
        out->s.rope.short_factor = a;
        out->s.rope.short_factor_len = n;
    } else {
        out->long_factor = a;
        out->s.rope.long_factor = a;
        out->s.rope.long_factor_len = n;
    }
    return true;
}

static bool parse_param(const api_param *p, const cJSON *v, const api_ctx *ctx, api_scheme *out,
                        api_err *e)
{
    char rel[API_FIELD_MAX];
    char *at = (char *)&out->s + p->offset;
    snprintf(rel, sizeof rel, "scheme.%s", p->name);
    switch (p->kind) {
    case API_PARAM_NUMBER:
        return api_get_number(v, rel, ctx, (double *)(void *)at, e);
    case API_PARAM_INT:
        return api_get_int(v, rel, ctx, (int32_t *)(void *)at, e);
    case API_PARAM_BOOL:
        return api_get_bool(v, rel, ctx, (bool *)(void *)at, e);
    case API_PARAM_ENUM:
        return parse_enum(p, v, rel, ctx, &out->s, e);
    case API_PARAM_TENSOR:
        return parse_tensor_param(p, v, rel, ctx, out, e);
    case API_PARAM_NUMBER_ARRAY:
        return parse_array_param(p, v, rel, ctx, out, e);
    case API_PARAM_INT_ARRAY: { /* mrope_section; rope2d's grid, ref_grid */
        int32_t *a = NULL, n = 0;
        const int want = p->type == PA_SCHEME_ROPE2D ? 2 : 3;
        if (!api_get_int_array(v, rel, ctx, &a, &n, e))
            return false;
        if (n != want) {
            free(a);
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, rel,
                            "%s has %d values; it needs %d (%s)", rel, (int)n, want,
                            want == 3 ? "[t, h, w]" : "[rows, cols]");
        }
        if (p->type != PA_SCHEME_ROPE2D) {
            memcpy(out->s.rope.mrope_section, a, 3 * sizeof(int32_t));
        } else if (strcmp(p->name, "grid") == 0) {
            out->s.rope2d.grid_rows = a[0];
            out->s.rope2d.grid_cols = a[1];
        } else {
            out->s.rope2d.ref_rows = a[0];
            out->s.rope2d.ref_cols = a[1];
        }
        free(a);
        return true;
    }
    }
    return api_fail(e, ctx, SRV_ERR_INTERNAL, rel, "unhandled parameter kind");
}

void api_tensor_release(srv_tensor *t)
{
    if (t->data != NULL)
        srv_tensor_free(t);
    memset(t, 0, sizeof *t);
}

void api_scheme_free(api_scheme *s)
{
    if (s == NULL)
        return;
    api_tensor_release(&s->table);
    api_tensor_release(&s->rel_k);
    api_tensor_release(&s->rel_v);
    free(s->short_factor);
    free(s->long_factor);
    free(s->slopes);
    free(s->r1);
    free(s->r2);
    free(s->w1);
    free(s->b1);
    free(s->w2);
    free(s->b2);
    memset(s, 0, sizeof *s);
}

bool api_scheme_parse(const cJSON *node, const api_ctx *ctx, api_scheme *out, api_err *e)
{
    const char *known[32];
    size_t n_known = 0;
    const char *type_name;
    pa_scheme_type type;
    const cJSON *m;
    char what[64];

    memset(out, 0, sizeof *out);
    if (node == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme",
                        "scheme is required: an object with a 'type' (none, sinusoidal, "
                        "learned, shaw, t5, rope, alibi, kerple, sandwich, xpos, rope2d, fire, "
                        "cope) and its parameters");
    if (!cJSON_IsObject(node))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme",
                        "scheme must be an object with a 'type', found %s", api_json_type(node));
    m = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (m == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                        "scheme.type is required (none, sinusoidal, learned, shaw, t5, rope, "
                        "alibi, kerple, sandwich, xpos, rope2d, fire, cope)");
    if (!api_get_string(m, "scheme.type", ctx, &type_name, e))
        return false;
    if (!pa_scheme_type_from_name(type_name, &type))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                        "scheme.type='%.32s' is not a scheme (none, sinusoidal, learned, shaw, "
                        "t5, rope, alibi, kerple, sandwich, xpos, rope2d, fire, cope)",
                        type_name);
    pa_scheme_init(&out->s, type);

    known[n_known++] = "type";
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        if (params[i].type == type && n_known < sizeof known / sizeof known[0])
            known[n_known++] = params[i].name;
    {
        /* "scheme '<type>'" (a name of lib/'s table, far shorter than
         * what), without snprintf's cost on every item. */
        const char *tn = pa_scheme_type_name(type);
        const size_t n = strnlen(tn, sizeof what - 10);
        memcpy(what, "scheme '", 8);
        memcpy(what + 8, tn, n);
        memcpy(what + 8 + n, "'", 2);
    }
    if (!api_check_fields(node, known, n_known, "scheme", what, ctx, e))
        return false;

    cJSON_ArrayForEach(m, node)
    {
        const api_param *p;
        if (strcmp(m->string, "type") == 0)
            continue;
        p = find_param(type, m->string);
        if (p == NULL || !parse_param(p, m, ctx, out, e)) {
            if (p == NULL)
                api_fail(e, ctx, SRV_ERR_INTERNAL, "scheme", "parameter table mismatch");
            api_scheme_free(out);
            return false;
        }
    }

    /* DINOv3 pairs halves: its layout unless the request says otherwise. */
    if (type == PA_SCHEME_ROPE2D && out->s.rope2d.variant == PA_ROPE2D_DINOV3 &&
        cJSON_GetObjectItemCaseSensitive(node, "layout") == NULL)
        out->s.rope2d.layout = PA_ROPE_LAYOUT_NEOX;
    /* cope's npos_max defaults to the table's positions. */
    if (type == PA_SCHEME_COPE && out->s.cope.npos_max == 0)
        out->s.cope.npos_max = out->s.cope.pos_emb_rows;

    /* A rope parameter that the chosen scaling does not read would be
     * silently ignored: reject it, which also catches a forgotten scaling. */
    if (type == PA_SCHEME_ROPE) {
        cJSON_ArrayForEach(m, node)
        {
            const api_param *p = find_param(type, m->string);
            if (p != NULL && p->scalings != 0 &&
                !(p->scalings & (1u << (unsigned)out->s.rope.scaling))) {
                char rel[API_FIELD_MAX], list[128];
                snprintf(rel, sizeof rel, "scheme.%s", p->name);
                scaling_list(p->scalings, list, sizeof list);
                api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, rel,
                         "%s applies to rope scaling %s only, but scheme.scaling is '%s'", rel,
                         list, pa_rope_scaling_name(out->s.rope.scaling));
                api_scheme_free(out);
                return false;
            }
        }
    }
    return true;
}
