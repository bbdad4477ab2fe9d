/* softmax.c - vectorizable exp and the row passes of the online softmax.
 *
 * The logits tile costs D multiply-adds per entry in sgemm but one exp in
 * the softmax, and a libm expf call is scalar: written as straight-line
 * arithmetic (Cephes' expf polynomial, scaled by 2^n through the exponent
 * bits) the loops below vectorize, and target_clones picks AVX-512 or AVX2
 * code at load time where the processor has it. Built with -O3 and
 * -fno-trapping-math (Makefile): the selects below may then be if-converted;
 * nothing here relies on floating-point exception flags.
 */
#include "softmax.h"

#include <math.h>
#include <string.h>

/* Not under the sanitizers: their instrumentation of the ifunc resolvers runs
 * before the sanitizer runtime is set up. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&      \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define PA__CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PA__CLONES
#endif

/* exp(x) for x <= ~88; exactly 0 below -87 (so -inf gives 0); NaN stays NaN,
 * so that a logit that overflowed shows in the row's sum. The clamps are
 * written so that NaN never reaches the integer conversion. */
static inline float exp_lane(float x)
{
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    float xc = x > -87.0f ? x : -87.0f; /* NaN -> -87 */
    float n, r, p;
    int32_t bits;
    float scale;

    xc = xc < 88.0f ? xc : 88.0f;
    /* Round to nearest by the 1.5 * 2^23 trick: |xc * log2e| < 2^22, and a
     * libm floorf call would stop the loop from vectorizing. */
    n = (xc * log2e + 12582912.0f) - 12582912.0f;
    r = xc - n * ln2_hi;
    r = r - n * ln2_lo;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    bits = ((int32_t)n + 127) << 23;
    memcpy(&scale, &bits, sizeof scale);
    return x > -87.0f ? p * scale : (x == x ? 0.0f : x);
}

/* Sums with 16 independent lanes, which vectorize without reassociating one
 * accumulator (the result differs from a serial sum only in rounding). */
static inline float lane_sum(const float *x, int32_t n)
{
    float lane[16] = {0};
    float sum = 0.0f;
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++)
            lane[k] += x[j + k];
    for (; j < n; j++)
        sum += x[j];
    for (int k = 0; k < 16; k++)
        sum += lane[k];
    return sum;
}

PA__CLONES float pa__row_max(const float *row, int32_t n)
{
    float lane[16];
    float m = -INFINITY;
    int32_t j = 0;
    for (int k = 0; k < 16; k++)
        lane[k] = -INFINITY;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++)
            lane[k] = row[j + k] > lane[k] ? row[j + k] : lane[k];
    for (; j < n; j++)
        m = row[j] > m ? row[j] : m;
    for (int k = 0; k < 16; k++)
        m = lane[k] > m ? lane[k] : m;
    return m;
}

PA__CLONES float pa__row_exp_sum(float *row, int32_t n, float m)
{
    for (int32_t j = 0; j < n; j++)
        row[j] = exp_lane(row[j] - m);
    return lane_sum(row, n);
}

PA__CLONES void pa__row_exp_scale(float *row, int32_t n, float m, float scale)
{
    for (int32_t j = 0; j < n; j++)
        row[j] = exp_lane(row[j] - m) * scale;
}
