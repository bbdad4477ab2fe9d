/* posattn_analysis.h - the analyses that explain the schemes: the permutation test,
 * RoPE's and xPos' score against offset, the similarity of absolute
 * encodings and the content/position split of the logits.
 *
 * Part of libposattn's public API: posattn.h includes this file inside
 * its extern "C" block, after the status codes and errors (and, for the
 * analyses, after attention); include posattn.h.
 */
#ifndef POSATTN_H
#error "include posattn.h, which includes this file"
#endif
#ifndef POSATTN_ANALYSIS_H
#define POSATTN_ANALYSIS_H

/* ------------------------------------------------------------------------- */
/* Analyses                                                                  */
/* ------------------------------------------------------------------------- */

/* Permutation test: for a self-attention descriptor (layer mode, or q/k/v with
 * Lq == Lk) and a permutation perm [L] of the token rows, computes
 * max |f(P x) - P f(x)| over all outputs, with positions left as they are.
 * ~0 for NoPE without a causal mask; clearly non-zero for position-aware
 * schemes. Workspace: pa_permutation_workspace_size(a). */
size_t pa_permutation_workspace_size(const pa_attention *a);
pa_status pa_analyze_permutation(const pa_attention *a, const int32_t *perm, void *ws,
                                 size_t ws_size, double *max_abs_diff, pa_error *err);

/* RoPE score against offset. For vectors q, k [head_dim] and n_offsets offsets:
 *   score[o]  = <R(base_position + offsets[o]) q, R(base_position) k>
 *   spread[o] = max - min over positions[0..n_positions) p of
 *               <R(p + offsets[o]) q, R(p) k>
 * The score depends only on the offset, so spread is ~0 (float rounding).
 * base_position, positions[j] and each of them plus every offset must lie in
 * [0, INT32_MAX]. No workspace (vectors live on the stack), so head_dim is
 * limited to 1024 (PA_STATUS_TOO_LARGE beyond). */
pa_status pa_analyze_rope_offset(const pa_rope *r, int32_t head_dim, const float *q, const float *k,
                                 const int32_t *offsets, int32_t n_offsets, int32_t base_position,
                                 const int32_t *positions, int32_t n_positions, float *score,
                                 float *spread, pa_error *err);
/* The same analysis for xPos: R(m) q and R(n) k also scaled pair by pair,
 * so the score is <R(m) q, R(n) k> with pair i times zeta_i^((m - n) /
 * scale_base) (pa_xpos): still a function of the offset alone. Computed
 * about the key's position, which the product does not depend on. */
pa_status pa_analyze_xpos_offset(const pa_xpos *x, int32_t head_dim, const float *q, const float *k,
                                 const int32_t *offsets, int32_t n_offsets, int32_t base_position,
                                 const int32_t *positions, int32_t n_positions, float *score,
                                 float *spread, pa_error *err);

/* Similarity of absolute encodings: sim [n, n] = P P^T for P [n, dim] the
 * sinusoidal or learned encodings of positions [n]. For sinusoidal, also
 * shift_residual = max over p, dims of |PE(p + shift) - M(shift) PE(p)| with
 * M(shift) the fixed block rotation by shift * w_k (pass NULL to skip).
 * Workspace: pa_similarity_workspace_size(n, dim) bytes. */
size_t pa_similarity_workspace_size(int32_t n, int32_t dim);
pa_status pa_analyze_similarity(const pa_scheme *s, const int32_t *positions, int32_t n,
                                int32_t dim, int32_t shift, void *ws, size_t ws_size, float *sim,
                                double *shift_residual, pa_error *err);

/* Decomposition of the attention logits (before masks) into content and
 * position terms, each [H, Lq, Lk]:
 *   content + position = logits for every scheme;
 *   absolute schemes (layer mode required, x = e + p):
 *     cc = scale (e Wq)(e Wk)^T, cp = scale (e Wq)(p Wk)^T,
 *     pc = scale (p Wq)(e Wk)^T, pp = scale (p Wq)(p Wk)^T,
 *     content = cc, position = cp + pc + pp;
 *   bias schemes: content = scale q.k, position = the bias (t5, alibi,
 *     kerple, sandwich) or
 *     scale q.rel_k (+ scale k.rel_k with key_term) (shaw); rope: content =
 *     unrotated scale q.k, position = rotated logits - content; none:
 *     position = 0.
 *   With softcap, content is softcap(scale q.k) (as the model caps it) and
 *   position the rest; the caller's bias is position. The query scalings
 *   (attn_temperature_tuning, logn_scaling) depend on position only: content
 *   is computed without them, so their share is position (with NoPE,
 *   position = (factor - 1) * content). Masks (chunk and mask included) do
 *   not apply; sinks change weights, not logits. cope is refused
 *   (PA_STATUS_UNSUPPORTED): its position term counts the keys the masks
 *   leave visible, so it has no value without them; pa_attention_run's
 *   logits hold it. Absolute schemes reject
 *   softcap, bias, q/k norms, b_q, b_k (their four terms are bilinear in e
 *   and p, and those are not) and the query scalings. fire is refused
 *   (PA_STATUS_UNSUPPORTED, "scheme.type"): it is defined on causal pairs
 *   only, and the split is over every pair.
 * Terms not defined for a scheme (cc..pp for non-absolute) are left untouched
 * and may be NULL. Workspace: pa_decompose_workspace_size(a). */
typedef struct pa_decomposition {
    float *content;  /* [H, Lq, Lk] required */
    float *position; /* [H, Lq, Lk] required */
    float *content_content, *content_position, *position_content, *position_position;
} pa_decomposition;

size_t pa_decompose_workspace_size(const pa_attention *a);
pa_status pa_analyze_decompose(const pa_attention *a, const pa_decomposition *out, void *ws,
                               size_t ws_size, pa_error *err);

#endif /* POSATTN_ANALYSIS_H */
