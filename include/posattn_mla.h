/* posattn_mla.h - DeepSeek's multi-head latent attention (MLA) with
 * decoupled RoPE (DeepSeek-V2 and V3; Hugging Face modeling_deepseek_v3.py,
 * DeepseekV3Attention), the part of libposattn's public API that builds
 * on pa_attention (posattn.h).
 *
 * Each query head has a part without position, D_nope wide, and a rotated
 * part, D_rope wide; every head shares one rotated key per position:
 *   q       [Lq, H, D_nope + D_rope]  (q_nope, then q_rope, per head)
 *   k_nope  [Lk, H, D_nope]           (the descriptor's k)
 *   k_rope  [Lk, D_rope]              (one head, shared by all H)
 *   v       [Lk, H, Dv]               (Dv may differ from D_nope + D_rope)
 *   logit   l_hij = s (q_nope_hi . k_nope_hj + rot(q_rope_hi) . rot(k_rope_j))
 * with rot the scheme's rope over the D_rope dims alone (Hugging Face sets
 * the rope's head_dim to qk_rope_head_dim), in its layout: DeepSeek's
 * checkpoints pair neighbouring dims (rope_interleave, layout gptj here;
 * Hugging Face permutes those dims to halves before rotating, so its
 * rotated q and k hold the same pairs in another order, which no dot
 * product sees). s defaults to HF's: (D_nope + D_rope)^-0.5, times
 * mscale(factor, mscale_all_dim)^2 when the scheme is yarn with
 * mscale_all_dim set (yarn_get_mscale: 0.1 m ln(factor) + 1, 1 when
 * factor <= 1); scale_set overrides it. The yarn attention factor in the
 * rope tables applies as for any rope.
 *
 * The absorbed form (what serving engines run: vLLM, SGLang, FlashMLA)
 * keeps the cache compressed: c_kv [Lk, R] (R = kv_lora_rank, after
 * kv_a_layernorm), and k_nope, v are its up-projections
 *   k_nope_hj = w_uk[h] c_kv_j,  w_uk [H, D_nope, R]
 *   v_hj      = w_uv[h] c_kv_j,  w_uv [H, Dv, R]
 * (kv_b_proj.weight viewed as [H, D_nope + Dv, R] and split on its middle
 * axis). The queries are absorbed instead, q_nope_hi w_uk[h] [R], and
 * every head attends to the one latent row per position (as multi-query
 * attention over R + D_rope dims), then w_uv[h] takes each head's latent
 * output to Dv. Equal to the expanded form to float rounding.
 *
 * Cost: the rotated-part logits of every head are one matrix product
 * against k_rope, which each call reads once (not once per head); the
 * rest runs in pa_attention's kernels (the decode kernel for few query
 * rows: it reads k_nope and v, or c_kv, once per position). Query rows
 * are taken in blocks whose rotated-part logits [H, rows, Lk] stay within
 * PA_MLA_LOGITS_MAX values; weights and logits are returned (as
 * pa_attention_out documents them, [H, Lq, Lk]) only when H*Lq*Lk is
 * within that too.
 *
 * Of pa_attention, q/k/v mode with scheme rope (any scaling, no M-RoPE
 * sections) or none; causal, window, chunk_size, key_length, q_positions,
 * k_positions, mask, bias, sinks, scale apply as they document;
 * num_kv_heads 0 or H; k_prerotated: k_rope is stored rotated, as a
 * cache keeps it. Refused, each naming its field: layer mode, the other
 * schemes, softcap (it would come between the two parts' sum and the
 * bias), q/k norms, the query scalings, M-RoPE and rope2d positions,
 * packed sequences.
 *
 * pa_attention_out: output [Lq, H, Dv]; weights, logits [H, Lq, Lk];
 * q_rot [Lq, H, D_nope + D_rope] (q_nope as given, q_rope rotated);
 * k_rot [Lk, D_rope] (k_rope rotated); entropy, distance, far_share
 * [H, Lq].
 */
#ifndef POSATTN_MLA_H
#define POSATTN_MLA_H

#include "posattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most rotated-part logits one block of query rows holds. */
#define PA_MLA_LOGITS_MAX ((size_t)1 << 24)

typedef struct pa_mla {
    int32_t rope_dim;    /* D_rope: even, >= 2, < head_dim (head_dim = D_nope + D_rope) */
    const float *k_rope; /* [Lk, D_rope] */
    /* The absorbed form: the descriptor's k and v are NULL, v_head_dim is Dv. */
    bool absorbed;
    int32_t kv_lora_rank; /* R >= 1 */
    const float *c_kv;    /* [Lk, R] */
    const float *w_uk;    /* [H, D_nope, R] */
    const float *w_uv;    /* [H, Dv, R] */
} pa_mla;

/* The default scale of an MLA call (above) for its scheme and head_dim. */
float pa_mla_default_scale(const pa_attention *a);
/* Checks a and m as above; errors name the field as a request does
 * ("mla.rope_dim", "k_rope", "mla.w_uk", "softcap"). */
pa_status pa_mla_check(const pa_attention *a, const pa_mla *m, pa_error *err);
/* Bytes of workspace pa_mla_run needs (0 if the size overflows);
 * independent of which outputs are asked for. */
size_t pa_mla_workspace_size(const pa_attention *a, const pa_mla *m);
/* Runs MLA; out as above (output required). Finite or an error, as
 * pa_attention_run. */
pa_status pa_mla_run(const pa_attention *a, const pa_mla *m, const pa_attention_out *out, void *ws,
                     size_t ws_size, pa_error *err);

#ifdef __cplusplus
}
#endif
#endif /* POSATTN_MLA_H */
