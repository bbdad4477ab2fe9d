/* ref_rope.h - plain double-precision reference of RoPE for the unit tests.
 *
 * A line-by-line transliteration of Hugging Face transformers'
 * modeling_rope_utils.py (_compute_default/linear_scaling/dynamic_ntk/yarn/
 * llama3/longrope_parameters, plus the static "ntk" formula) and of
 * apply_rotary_pos_emb / rotate_half. It shares no code with lib/rope.c and
 * does no validation: pass a configuration that pa_rope_check accepts.
 * Fields that are 0 take the defaults documented in posattn.h.
 */
#ifndef PA_REF_ROPE_H
#define PA_REF_ROPE_H

#include <stdint.h>

#include "posattn.h"

/* HF get_mscale(scale, mscale): 1 when scale <= 1, else 0.1*mscale*ln(scale) + 1. */
double ref_rope_get_mscale(double scale, double mscale);

/* inv_freq [r/2] and the attention factor (cos/sin multiplier) for a call
 * whose largest position is max_position (dynamic: seq_len = max_position+1;
 * longrope: long factors when max_position+1 > original_max_position).
 * attention_factor may be NULL. */
void ref_rope_inv_freq(const pa_rope *r, int head_dim, int max_position, double *inv_freq,
                       double *attention_factor);

/* x [head_dim] rotated to `position`: for each pair (neox (i, i+r/2), gptj
 * (2i, 2i+1)) x0' = x0 c - x1 s, x1' = x1 c + x0 s with c, s = cos, sin of
 * position*inv_freq[i] times attention_factor; dims r.. are copied unscaled. */
void ref_rope_rotate(const pa_rope *r, int head_dim, const double *inv_freq,
                     double attention_factor, int position, const double *x, double *out);

/* M-RoPE: the position row (0 temporal, 1 height, 2 width) of frequency i,
 * from Hugging Face's code: apply_multimodal_rotary_pos_emb (Qwen2-VL) splits
 * cat(freqs, freqs) into mrope_section * 2 chunks, chunk k reading row k % 3;
 * apply_interleaved_mrope (Qwen3-VL) starts from row 0 and overwrites
 * freqs[..., offset : 3 * mrope_section[dim] : 3] with row dim, offset = dim,
 * for dim 1 and 2. 0 when the sections are all zero. */
int ref_mrope_row(const pa_rope *r, int i);

/* ref_rope_rotate with frequency i at position pos3[ref_mrope_row(r, i)]. */
void ref_rope_rotate_mrope(const pa_rope *r, int head_dim, const double *inv_freq,
                           double attention_factor, const int pos3[3], const double *x,
                           double *out);

/* Convenience for tensors: x [n, heads, head_dim] (float) rotated row t to
 * positions[t] into out [n, heads, head_dim] (double), with the frequencies of
 * ref_rope_inv_freq(r, head_dim, max_position). */
void ref_rope_rotate_tensor(const pa_rope *r, int head_dim, int n, int heads,
                            const int32_t *positions, int max_position, const float *x,
                            double *out);

/* The cos and sin tables [n, r/2], already times the attention factor. */
void ref_rope_cos_sin(const pa_rope *r, int head_dim, const int32_t *positions, int n,
                      int max_position, double *cos_out, double *sin_out);

#endif
