/* ref_xpos.h - plain double-precision reference of xPos for the unit tests,
 * transliterated from microsoft/torchscale
 * torchscale/component/xpos_relative_position.py (commit 776b070d):
 * fixed_pos_embedding, rotate_every_two, duplicate_interleave,
 * apply_rotary_pos_emb and XPOS. It shares no code with lib/xpos.c.
 */
#ifndef PA_REF_XPOS_H
#define PA_REF_XPOS_H

#include "posattn.h"

#include <stdint.h>

/* The centre posattn documents (posattn.h pa_xpos): 0 when every factor
 * 3.5^(|p| / scale_base) <= 2^96, else floor((min + max) / 2). */
int64_t ref_xpos_centre(const pa_xpos *x, const int32_t *qpos, int nq, const int32_t *kpos, int nk);

/* x [head_dim] at position pos rotated and scaled in place: scale
 * zeta^((pos - centre) / scale_base), or its inverse with downscale. */
void ref_xpos_apply(const pa_xpos *x, int head_dim, int32_t pos, int64_t centre, int downscale,
                    double *v);

#endif
