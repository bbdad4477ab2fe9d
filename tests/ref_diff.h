/* ref_diff.h - plain double-precision reference of differential attention
 * for the unit tests, written from the peers' forward passes (microsoft/
 * unilm multihead_diffattn.py, Hugging Face modeling_diffllama.py): the
 * 2H-head softmax maps of tests/ref_attention.c, then the pair's
 * subtraction, A V with V built as each peer builds it, the RMSNorm and
 * (1 - lambda_init). Shares no code with lib/differential.c.
 */
#ifndef PA_REF_DIFF_H
#define PA_REF_DIFF_H

#include "posattn_diff.h"

/* out [Lq, H, 2D], weights [H, Lq, Lk] (either may be NULL), for a as
 * posattn_diff.h documents it. */
void ref_diff(const pa_attention *a, const pa_differential *d, double *out, double *weights);

#endif
