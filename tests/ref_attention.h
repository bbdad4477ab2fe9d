/* ref_attention.h - plain double-precision reference of multi-head attention
 * under every scheme, written from the definitions (not from lib/), for the
 * unit tests. Slow: O(H Lq Lk D) with no tiling.
 */
#ifndef PA_REF_ATTENTION_H
#define PA_REF_ATTENTION_H

#include "posattn.h"

/* Computes what pa_attention_run documents for *a, in double. Any output
 * pointer may be NULL. Shapes as in pa_attention_out; masked logits -inf. */
void ref_attention(const pa_attention *a, double *out, double *weights, double *logits,
                   double *q_rot, double *k_rot);

/* Effective sizes, as the reference resolves them. */
int ref_attention_out_len(const pa_attention *a);

#endif
