/* ref_mla.h - plain double-precision reference of DeepSeek's MLA with
 * decoupled RoPE for the unit tests, written from Hugging Face's
 * DeepseekV3Attention.forward: the query and the key of each head are the
 * concatenations of their parts, the rope applies to the D_rope dims of
 * both and the shared k_rope is expanded to every head, then ordinary
 * attention (tests/ref_attention.c) at HF's scale. The absorbed form's
 * k_nope and v are w_uk c_kv and w_uv c_kv, taken in double. Shares no
 * code with lib/mla.c.
 */
#ifndef PA_REF_MLA_H
#define PA_REF_MLA_H

#include "posattn_mla.h"

/* HF's softmax_scale: (D_nope + D_rope)^-0.5, times yarn_get_mscale(factor,
 * mscale_all_dim)^2 when the scheme is yarn with mscale_all_dim. */
double ref_mla_scale(const pa_attention *a);

/* out [Lq, H, Dv], weights [H, Lq, Lk], q_rot [Lq, H, D_nope + D_rope],
 * k_rot [Lk, D_rope] (any may be NULL), for a and m as posattn_mla.h
 * documents them. */
void ref_mla(const pa_attention *a, const pa_mla *m, double *out, double *weights, double *q_rot,
             double *k_rot);

#endif
