/* posattn_diff.h - differential attention (Ye et al. 2024, "Differential
 * Transformer"), the part of libposattn's public API that builds on
 * pa_attention (posattn.h).
 *
 * Per output head h, two softmax maps of the same keys are subtracted:
 *   A_h = softmax(s q_a k_a^T) - lambda softmax(s q_b k_b^T)
 *   O_h = A_h V_h                                     [Lq, 2D]
 *   O_h = (1 - lambda_init) RMSNorm(O_h) * subln_weight   (with subln)
 *   lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2)
 *            + lambda_init   (or lambda as given)
 * with s the attention scale (default 1/sqrt(D)). The two heads a, b of h
 * and V_h come from two peers' layouts (pairs):
 *   interleaved  microsoft/unilm Diff-Transformer/multihead_diffattn.py:
 *                q [Lq, 2H, D], k [Lk, Hk, D], v [Lk, Hk/2, 2D]; a = 2h,
 *                b = 2h + 1; k head of query head j: j / n (repeat_kv,
 *                n = 2H / Hk); V_h = v[h / n]. Its subln has a weight [2D]
 *                and eps 1e-5.
 *   halves       Hugging Face modeling_diffllama.py (DiffLlamaAttention):
 *                q [Lq, 2H, D], k and v [Lk, Hk, D]; a = h, b = h + H;
 *                V_h = cat(v[a / n], v[b / n]) (repeat_kv, then
 *                cat(chunk(v, 2, heads), dim=-1)); its RMSNorm has no
 *                weight and eps rms_norm_eps.
 * The scheme applies to all 2H query heads and Hk key heads as in both
 * peers (RoPE: the same angles for every head); schemes with per-head
 * parameters (alibi, t5, kerple, sandwich, fire, cope, shaw) and the
 * absolute ones are refused, as are layer mode, sinks, a bias or mask with
 * more than one plane, packed sequences and k_norm/q_norm (the peers have
 * none). Masks, causal, window, chunk, positions, softcap, the query
 * scalings and k_prerotated apply to both maps.
 */
#ifndef POSATTN_DIFF_H
#define POSATTN_DIFF_H

#include "posattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pa_diff_pairs {
    PA_DIFF_PAIRS_INTERLEAVED = 0, /* unilm: heads 2h, 2h+1; v [Lk, Hk/2, 2D] */
    PA_DIFF_PAIRS_HALVES           /* Hugging Face DiffLlama: heads h, h+H; v [Lk, Hk, D] */
} pa_diff_pairs;

typedef struct pa_differential {
    pa_diff_pairs pairs;
    double lambda; /* used when lambda_q1 is NULL; finite */
    /* [D] each (all four or none): lambda from them as above */
    const float *lambda_q1, *lambda_k1, *lambda_q2, *lambda_k2;
    double lambda_init;        /* finite, < 1 with subln (pa_diff_lambda_init(depth)) */
    bool subln;                /* default true: RMSNorm over 2D, then * (1 - lambda_init) */
    const float *subln_weight; /* [2D] or NULL (no weight, Hugging Face's) */
    double subln_eps;          /* > 0, default 1e-5 (unilm's) */
} pa_differential;

/* Defaults: interleaved, lambda 0, lambda_init 0, subln on, eps 1e-5. */
void pa_diff_init(pa_differential *d);
/* Both peers' lambda_init for layer index depth: 0.8 - 0.6 exp(-0.3 depth). */
double pa_diff_lambda_init(int32_t depth);
/* lambda as the call uses it, for head_dim D (the d must have passed the
 * check). */
double pa_diff_lambda(const pa_differential *d, int32_t head_dim);
/* Checks d against a (q/k/v mode, 2H query heads, the scheme and options
 * above); errors name the field ("differential.lambda_q1", "scheme.type"). */
pa_status pa_diff_check(const pa_attention *a, const pa_differential *d, pa_error *err);
/* Bytes of workspace pa_diff_run needs. */
size_t pa_diff_workspace_size(const pa_attention *a, const pa_differential *d);
/* output [Lq, H, 2D]; weights [H, Lq, Lk] (A_h, may be NULL). Finite or an
 * error, as pa_attention_run. */
pa_status pa_diff_run(const pa_attention *a, const pa_differential *d, float *output,
                      float *weights, void *ws, size_t ws_size, pa_error *err);

#ifdef __cplusplus
}
#endif
#endif /* POSATTN_DIFF_H */
