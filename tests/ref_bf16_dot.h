/* ref_bf16_dot.h - compute_dtype bf16's arithmetic written from its definition
 * (AVX-512 BF16's vdpbf16ps in the Intel SDM), apart from lib/: rounding
 * to bf16 and the pairwise dot product accumulated in float32.
 */
#ifndef PA_REF_BF16_DOT_H
#define PA_REF_BF16_DOT_H

#include <stddef.h>

/* x rounded to 8 significant bits, ties to even; |x| below float's
 * smallest normal becomes a zero of its sign; past bf16's largest, inf. */
float ref_bf16dp_round(float x);

/* acc, then for each pair p of a[0..n) and b (element i at b[i * sb]):
 * acc = fmaf(a[2p+1], b[2p+1], acc); acc = fmaf(a[2p], b[2p], acc), with
 * an odd n's missing element 0. The operands are used as given (round
 * them first). */
float ref_bf16dp_dot(float acc, const float *a, const float *b, size_t sb, size_t n);

#endif
