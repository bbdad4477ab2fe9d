/* ref_bf16_dot.c - see ref_bf16_dot.h. */
#include "ref_bf16_dot.h"

#include <float.h>
#include <math.h>

float ref_bf16dp_round(float x)
{
    int e;
    double m;
    if (!isfinite(x))
        return x;
    if (fabsf(x) < FLT_MIN)
        return copysignf(0.0f, x);
    m = frexp((double)x, &e);      /* x = m 2^e, 0.5 <= |m| < 1 */
    m = nearbyint(ldexp(m, 8));    /* 8 bits, to nearest even */
    return (float)ldexp(m, e - 8); /* exact, or inf past the range */
}

float ref_bf16dp_dot(float acc, const float *a, const float *b, size_t sb, size_t n)
{
    for (size_t p = 0; 2 * p < n; p++) {
        const size_t lo = 2 * p, hi = lo + 1;
        const float ah = hi < n ? a[hi] : 0.0f, bh = hi < n ? b[hi * sb] : 0.0f;
        acc = fmaf(ah, bh, acc);
        acc = fmaf(a[lo], b[lo * sb], acc);
    }
    return acc;
}
