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

/* The row statistics of pa_attention_out from the reference's weights:
 * entropy[h, i] = -sum_j w ln w (w > 0), distance[h, i] = sum_j w
 * |qpos_i - kpos_j|, positions resolved by the documented defaults. Either
 * may be NULL. */
void ref_attention_stats(const pa_attention *a, double *entropy, double *distance);
/* far[h, i] = sum_j w over the keys with |qpos_i - kpos_j| > far_distance. */
void ref_attention_far_share(const pa_attention *a, int far_distance, double *far);

/* Effective sizes, as the reference resolves them. */
int ref_attention_out_len(const pa_attention *a);

#endif
