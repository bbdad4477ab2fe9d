/* ref_rope2d.h - plain double-precision reference of 2-D RoPE for the unit
 * tests, transliterated from the peers' layouts: timm
 * timm/layers/pos_embed_sincos.py (freq_bands, build_fourier_pos_embed with
 * in_pixels=False, build_rotary_pos_embed, apply_rot_embed_cat) for
 * "axial", and mistral-inference src/mistral_inference/rope.py
 * (precompute_freqs_cis_2d, apply_rotary_emb) for "pixtral". It shares no
 * code with lib/rope2d.c.
 */
#ifndef PA_REF_ROPE2D_H
#define PA_REF_ROPE2D_H

#include "posattn.h"

#include <stdbool.h>
#include <stdint.h>

/* Token t of n: its (row, column) coordinate as the peer forms it (timm:
 * (index + grid_offset) / grid * ref), from pos2 [2, n] or the row-major
 * grid after the prefix tokens; false for a prefix token (not rotated). */
bool ref_rope2d_coord(const pa_rope2d *r, const int32_t *pos2, int n, int t, double *row,
                      double *col);

/* v [head_dim] of head `head` (of num_heads) rotated in place at coordinate
 * (row, col); only mixed reads the head (timm get_mixed_freqs: t_x
 * freqs[0][h] + t_y freqs[1][h], repeat_interleave(2)). */
void ref_rope2d_apply(const pa_rope2d *r, int head_dim, int head, int num_heads, double row,
                      double col, double *v);

#endif
