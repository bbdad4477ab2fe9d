/* softmax.c - vectorizable exp and the row passes of the online softmax.
 *
 * The logits tile costs D multiply-adds per entry in sgemm but one exp in
 * the softmax, and a libm expf call is scalar: written as straight-line
 * arithmetic (a polynomial in the reduced argument, scaled by 2^n through the exponent
 * bits) the loops below vectorize, and target_clones picks x86-64-v3 code
 * (AVX2 and FMA, where fmaf is one instruction) at load time where the
 * processor has it; elsewhere on x86 fmaf is a libm call. With AVX-512,
 * and for the max and exp passes with AVX2 (softmax_avx2.c), the same
 * arithmetic runs as explicit intrinsics (GCC leaves the max pass scalar:
 * it will not turn the NaN-ignoring select into vmaxps on its own, and it
 * turns the exp's clamps and selects into about 50 instructions per eight
 * lanes, twice the intrinsics' count). Built with -O3 and
 * -fno-trapping-math (Makefile): the selects below may then be if-converted;
 * nothing here relies on floating-point exception flags.
 */
#include "softmax.h"

#include "cpu.h"
#include "lanes16.h"
#include "tile.h"

#include <math.h>
#include <string.h>

/* Not under the sanitizers: their instrumentation of the ifunc resolvers runs
 * before the sanitizer runtime is set up. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&       \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* x86-64-v3: AVX2 with FMA, so that the fmaf of the exp and the softcap's
 * tanh (written so for the AVX-512 code's bits) is one instruction ("avx2"
 * alone builds without FMA, where each would be a libm call, as it is in
 * "default", on an x86-64 without FMA: the same bits, slowly). */
#define PA__CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define PA__CLONES
#endif

/* exp(x) for x <= ~88; exactly 0 below -87 (so -inf gives 0); NaN stays NaN,
 * so that a logit that overflowed shows in the row's sum. The clamps are
 * written so that NaN never reaches the integer conversion. The reduction
 * and the polynomial are fused multiply-adds, each rounded once: the
 * AVX2 and AVX-512 exps below and in softmax_avx2.c do exactly these, so
 * every path's exp has the same bits (checked over every float up to 88
 * and quiet NaNs, the three paths alike). The polynomial: 1 + c1 r + ... +
 * c5 r^5, a minimax fit of exp's relative error on [-ln2/2, ln2/2] (9.2e-8
 * in exact arithmetic), Horner's rule in five fused multiply-adds: within
 * 1.999 ulp of the exact exp and 1.63e-7 relative on every float in (-87,
 * 88]. Cephes' expf before it (degree 7 as 1 + r + r^2 q(r), two more
 * operations) was within 1.02 ulp; the exp pass took 3-7% of a prefill's
 * time more (AMD Zen 5), for probabilities that the products' rounding
 * moves more than that. */
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
    r = fmaf(-n, ln2_hi, xc);
    r = fmaf(-n, ln2_lo, r);
    p = 8.2902638e-3f;
    p = fmaf(p, r, 4.1898161e-2f);
    p = fmaf(p, r, 1.6667639e-1f);
    p = fmaf(p, r, 4.9999148e-1f);
    p = fmaf(p, r, 9.9999970e-1f);
    p = fmaf(p, r, 1.0f);
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

PA__CLONES static float row_max(const float *row, int32_t n)
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

PA__CLONES static float row_exp_sum(float *row, int32_t n, float m)
{
    for (int32_t j = 0; j < n; j++)
        row[j] = exp_lane(row[j] - m);
    return lane_sum(row, n);
}

/* |a - b| for any two int32, exact in uint32 (the wrapped difference of
 * the larger and the smaller), then rounded once to float: converting each
 * position first would lose every distance below 128 near 2^31. */
static inline float abs_diff(int32_t a, int32_t b)
{
    const int32_t hi = a > b ? a : b, lo = a > b ? b : a;
    return (float)((uint32_t)hi - (uint32_t)lo);
}

/* Three sums in 16 lanes each; p > 0 selects away p * (-inf) = NaN. */
PA__CLONES static float row_exp_sum_stats(float *row, int32_t n, float m, const int32_t *kpos,
                                          int32_t qpos, float far, float *spl, float *spd,
                                          float *spf)
{
    float ls[16] = {0}, la[16] = {0}, ld[16] = {0}, lf[16] = {0};
    float s = 0.0f, a = 0.0f, d = 0.0f, f = 0.0f;
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) {
            const float x = row[j + k] - m, p = exp_lane(x);
            const float dist = abs_diff(kpos[j + k], qpos);
            row[j + k] = p;
            ls[k] += p;
            la[k] += p > 0.0f ? p * x : 0.0f;
            ld[k] += p * dist;
            lf[k] += dist > far ? p : 0.0f;
        }
    for (; j < n; j++) {
        const float x = row[j] - m, p = exp_lane(x);
        const float dist = abs_diff(kpos[j], qpos);
        row[j] = p;
        s += p;
        a += p > 0.0f ? p * x : 0.0f;
        d += p * dist;
        f += dist > far ? p : 0.0f;
    }
    for (int k = 0; k < 16; k++) {
        s += ls[k];
        a += la[k];
        d += ld[k];
        f += lf[k];
    }
    *spl = a;
    *spd = d;
    *spf = f;
    return s;
}

PA__CLONES static void row_exp_scale(float *row, int32_t n, float m, float scale)
{
    for (int32_t j = 0; j < n; j++)
        row[j] = exp_lane(row[j] - m) * scale;
}

/* Plain loops: GCC vectorizes them here (-O3), for AVX2 and the default
 * target alike; the attention kernel itself is built at -O2, which does not
 * vectorize a loop of unknown length. */
PA__CLONES void pa__row_scale(float *dst, const float *src, int32_t n, float s)
{
    for (int32_t j = 0; j < n; j++)
        dst[j] = src[j] * s;
}

/* pa__row_scale that also says whether every product is finite, checked
 * in registers: reading dst back after the stores waits for them (an
 * output row of the prefill is cold, its lines still on their way). */
PA__CLONES bool pa__row_scale_finite(float *dst, const float *src, int32_t n, float s)
{
    int ok = 1;
    for (int32_t j = 0; j < n; j++) {
        const float y = src[j] * s;
        dst[j] = y;
        ok &= (y - y) == 0.0f;
    }
    return ok != 0;
}

/* x - x is 0 for a finite x and NaN for inf or NaN; the AND over a row
 * vectorizes (no early exit). */
PA__CLONES bool pa__row_finite(const float *x, size_t n)
{
    int ok = 1;
    for (size_t j = 0; j < n; j++)
        ok &= (x[j] - x[j]) == 0.0f;
    return ok != 0;
}

PA__CLONES void pa__row_fill(float *row, int32_t n, float v)
{
    for (int32_t j = 0; j < n; j++)
        row[j] = v;
}

/* tanh(x) as straight-line arithmetic in two pieces that meet at |x| = 1,
 * where x - tanh(x) and 1 - tanh(x) are both 0.31 of tanh(x), so that the
 * rounding of either correction costs the same there:
 *   |x| < 1:  x + x^3 r(x^2), r of degree 6,
 *   |x| >= 1: sign(x) (1 - c(|x|) / e(|x|)), c and e of degree 6,
 * minimax fits of (tanh(x) / x - 1) / x^2 on [0, 1] and of 1 - tanh(x) on
 * [1, 9.1]. |x| is clamped at 9.1, where the second piece gives exactly 1
 * (tanh(x) rounds to 1 from 9.01). No exp and one division: within 1.32 ulp
 * of tanh over every float (bench_attention checks them all), as Cephes'
 * 1 - 2 / (exp(2|x|) + 1) it replaces (1.33), in 0.6 of its time, and the
 * first piece alone (row_softcap's common case) in a sixth. fmaf
 * throughout, so that the AVX-512 code (tanh16_*) gives the same bits.
 * NaN stays NaN; +-inf give +-1. */
static inline float tanh_small(float x)
{
    const float t = x * x, xt = x * t;
    float r = -3.584520018e-04f;
    r = fmaf(r, t, 2.301364671e-03f);
    r = fmaf(r, t, -7.946106605e-03f);
    r = fmaf(r, t, 2.148665674e-02f);
    r = fmaf(r, t, -5.387980118e-02f);
    r = fmaf(r, t, 1.333234459e-01f);
    r = fmaf(r, t, -3.333329558e-01f);
    return fmaf(xt, r, x);
}

static inline float tanh_big(float x)
{
    float ax = fabsf(x), c, e, big;
    ax = ax > 9.1f ? 9.1f : ax; /* NaN stays */
    c = 2.863357167e-06f;
    c = fmaf(c, ax, -1.373906853e-04f);
    c = fmaf(c, ax, 2.789388876e-03f);
    c = fmaf(c, ax, -3.075924329e-02f);
    c = fmaf(c, ax, 1.948571950e-01f);
    c = fmaf(c, ax, -6.742134094e-01f);
    c = fmaf(c, ax, 9.979472756e-01f);
    e = 3.202619962e-03f;
    e = fmaf(e, ax, 3.137739142e-03f);
    e = fmaf(e, ax, 6.673985720e-02f);
    e = fmaf(e, ax, 1.310945004e-01f);
    e = fmaf(e, ax, 5.394895077e-01f);
    e = fmaf(e, ax, 3.136959374e-01f);
    e = fmaf(e, ax, 1.0f);
    big = 1.0f - c / e;
    return x < 0.0f ? -big : big;
}

PA__CLONES void pa__row_sigmoid(float *row, int32_t n)
{
    for (int32_t j = 0; j < n; j++) {
        const float x = row[j];
        const float g = 1.0f / (1.0f + exp_lane(-x));
        row[j] = x == -INFINITY ? 0.0f : g;
    }
}

/* The softcap of n <= 16 logits (-inf kept): both pieces of the tanh, or
 * only the first, in a third of the time, when no finite logit reaches the
 * cap. A logit gets the same bits either way. */
static inline void softcap_block(float *row, int32_t n, float cap, float inv)
{
    int wide = 0;
    /* Left rolled, GCC vectorizes the test; unrolled first, it would not. */
#pragma GCC unroll 1
    for (int32_t k = 0; k < n; k++) {
        const float x = row[k];
        wide |= fabsf(x * inv) >= 1.0f && x != -INFINITY;
    }
    if (wide) {
        for (int32_t k = 0; k < n; k++) {
            const float x = row[k], u = x * inv;
            const float t = cap * (fabsf(u) < 1.0f ? tanh_small(u) : tanh_big(u));
            row[k] = x == -INFINITY ? x : t;
        }
    } else {
        for (int32_t k = 0; k < n; k++) {
            const float x = row[k];
            const float t = cap * tanh_small(x * inv);
            row[k] = x == -INFINITY ? x : t;
        }
    }
}

/* Sixteen logits at a time, as the AVX-512 code. */
PA__CLONES static void row_softcap(float *row, int32_t n, float cap)
{
    const float inv = 1.0f / cap;
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        softcap_block(row + j, 16, cap, inv);
    if (j < n)
        softcap_block(row + j, n - j, cap, inv);
}

/* ------------------------------------------------------------------------- */
/* AVX-512                                                                   */
/* ------------------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PA_AVX512 __attribute__((target("avx512f")))

/* exp_lane on 16 lanes, with the same constants, for x <= 88 or NaN (its
 * callers pass logit - running max): the same bits, checked on every such
 * float once (quiet NaNs; signalling ones never come from arithmetic).
 * exp_lane's clamps are left out: below -87 the lane is zeroed anyway, a
 * NaN goes through every operation with its bits, and -inf gives NaN in
 * the middle and 0 at the end. 18% less time a vector than with them. */
PA_AVX512 static inline __m512 exp16(__m512 x)
{
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    __m512 p;
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    p = _mm512_fmadd_ps(_mm512_set1_ps(8.2902638e-3f), r, _mm512_set1_ps(4.1898161e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6667639e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.9999148e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.9999970e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    {
        /* p * 2^n in one instruction: n is an integer in [-126, 127] (in
         * the lanes kept) and p in [0.7, 1.5], so 2^n and the product are
         * normal floats and vscalefps rounds once, as exp_lane's multiply
         * by the exponent bits does: the same bits. */
        const __m512 y = _mm512_scalef_ps(p, n);
        /* Not above -87 (-inf, underflow): 0; NaN (unordered): y, x's NaN. */
        return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLE_UQ), y);
    }
}

/* The row loops below take whole blocks of 16 with a constant full mask,
 * which the compiler turns into plain loads and stores, and the last,
 * partial block with its mask: masked stores cost more on AMD's cores
 * (the exp pass 15% more, measured on a Zen 5). */
#define PA_FULL16 ((__mmask16)0xFFFF)

/* vmaxps returns its second operand when either is NaN: NaN ignored. */
#define ROW_MAX_BLOCK(k) m = _mm512_max_ps(_mm512_mask_loadu_ps(m, (k), row + j), m)

PA_AVX512 static float row_max_avx512(const float *row, int32_t n)
{
    __m512 m = _mm512_set1_ps(-INFINITY);
    int32_t j = 0;
    {
        /* Four chains: one vmaxps waits for the last (its latency is
         * several times its throughput), and the row is in L1 or L2. */
        __m512 m1 = m, m2 = m, m3 = m;
        for (; j + 64 <= n; j += 64) {
            m = _mm512_max_ps(_mm512_loadu_ps(row + j), m);
            m1 = _mm512_max_ps(_mm512_loadu_ps(row + j + 16), m1);
            m2 = _mm512_max_ps(_mm512_loadu_ps(row + j + 32), m2);
            m3 = _mm512_max_ps(_mm512_loadu_ps(row + j + 48), m3);
        }
        m = _mm512_max_ps(_mm512_max_ps(m, m1), _mm512_max_ps(m2, m3));
    }
    for (; j + 16 <= n; j += 16)
        ROW_MAX_BLOCK(PA_FULL16);
    if (j < n)
        ROW_MAX_BLOCK(pa__lanes16(n - j));
    return _mm512_reduce_max_ps(m);
}

/* One block of row_exp_sum_avx512: its probabilities in place, added to
 * sum. */
PA_AVX512 static inline __m512 exp_sum_block(float *row, __mmask16 k, __m512 vm, __m512 sum)
{
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row), vm));
    _mm512_mask_storeu_ps(row, k, e);
    return _mm512_mask_add_ps(sum, k, sum, e);
}

PA_AVX512 static float row_exp_sum_avx512(float *row, int32_t n, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        sum = exp_sum_block(row + j, PA_FULL16, vm, sum);
    if (j < n)
        sum = exp_sum_block(row + j, pa__lanes16(n - j), vm, sum);
    return _mm512_reduce_add_ps(sum);
}

PA_AVX512 static float row_exp_sum_stats_avx512(float *row, int32_t n, float m, const int32_t *kpos,
                                                int32_t qpos, float far, float *spl, float *spd,
                                                float *spf)
{
    const __m512 vm = _mm512_set1_ps(m), vfar = _mm512_set1_ps(far);
    const __m512i vq = _mm512_set1_epi32(qpos);
    __m512 sum = _mm512_setzero_ps(), sa = _mm512_setzero_ps(), sd = _mm512_setzero_ps(),
           sf = _mm512_setzero_ps();
    for (int32_t j = 0; j < n; j += 16) {
        const __mmask16 k = pa__lanes16(n - j);
        const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + j), vm);
        const __m512 e = exp16(x);
        const __mmask16 live = _mm512_mask_cmp_ps_mask(k, e, _mm512_setzero_ps(), _CMP_GT_OQ);
        /* |kpos - qpos| as abs_diff: max - min in uint32, then rounded. */
        const __m512i kp = _mm512_maskz_loadu_epi32(k, kpos + j);
        const __m512 dist = _mm512_cvtepu32_ps(
            _mm512_sub_epi32(_mm512_max_epi32(kp, vq), _mm512_min_epi32(kp, vq)));
        _mm512_mask_storeu_ps(row + j, k, e);
        sum = _mm512_mask_add_ps(sum, k, sum, e);
        sa = _mm512_mask3_fmadd_ps(e, x, sa, live);
        sd = _mm512_mask3_fmadd_ps(e, dist, sd, live);
        sf = _mm512_mask_add_ps(sf, _mm512_mask_cmp_ps_mask(live, dist, vfar, _CMP_GT_OQ), sf, e);
    }
    *spl = _mm512_reduce_add_ps(sa);
    *spd = _mm512_reduce_add_ps(sd);
    *spf = _mm512_reduce_add_ps(sf);
    return _mm512_reduce_add_ps(sum);
}

#define EXP_SCALE_BLOCK(k)                                                                         \
    _mm512_mask_storeu_ps(                                                                         \
        row + j, (k),                                                                              \
        _mm512_mul_ps(exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps((k), row + j), vm)), vs))

PA_AVX512 static void row_exp_scale_avx512(float *row, int32_t n, float m, float scale)
{
    const __m512 vm = _mm512_set1_ps(m), vs = _mm512_set1_ps(scale);
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        EXP_SCALE_BLOCK(PA_FULL16);
    if (j < n)
        EXP_SCALE_BLOCK(pa__lanes16(n - j));
}

/* tanh_small and tanh_big on 16 lanes, operation by operation. */
PA_AVX512 static inline __m512 tanh16_small(__m512 x)
{
    const __m512 t = _mm512_mul_ps(x, x), xt = _mm512_mul_ps(x, t);
    __m512 r = _mm512_set1_ps(-3.584520018e-04f);
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(2.301364671e-03f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-7.946106605e-03f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(2.148665674e-02f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-5.387980118e-02f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(1.333234459e-01f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-3.333329558e-01f));
    return _mm512_fmadd_ps(xt, r, x);
}

PA_AVX512 static inline __m512 tanh16_big(__m512 x)
{
    /* vminps returns its second operand when either is NaN: NaN stays. */
    const __m512 ax = _mm512_min_ps(_mm512_set1_ps(9.1f), _mm512_abs_ps(x));
    __m512 c = _mm512_set1_ps(2.863357167e-06f), e = _mm512_set1_ps(3.202619962e-03f), big;
    c = _mm512_fmadd_ps(c, ax, _mm512_set1_ps(-1.373906853e-04f));
    c = _mm512_fmadd_ps(c, ax, _mm512_set1_ps(2.789388876e-03f));
    c = _mm512_fmadd_ps(c, ax, _mm512_set1_ps(-3.075924329e-02f));
    c = _mm512_fmadd_ps(c, ax, _mm512_set1_ps(1.948571950e-01f));
    c = _mm512_fmadd_ps(c, ax, _mm512_set1_ps(-6.742134094e-01f));
    c = _mm512_fmadd_ps(c, ax, _mm512_set1_ps(9.979472756e-01f));
    e = _mm512_fmadd_ps(e, ax, _mm512_set1_ps(3.137739142e-03f));
    e = _mm512_fmadd_ps(e, ax, _mm512_set1_ps(6.673985720e-02f));
    e = _mm512_fmadd_ps(e, ax, _mm512_set1_ps(1.310945004e-01f));
    e = _mm512_fmadd_ps(e, ax, _mm512_set1_ps(5.394895077e-01f));
    e = _mm512_fmadd_ps(e, ax, _mm512_set1_ps(3.136959374e-01f));
    e = _mm512_fmadd_ps(e, ax, _mm512_set1_ps(1.0f));
    big = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(c, e));
    return _mm512_mask_sub_ps(big, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ),
                              _mm512_setzero_ps(), big);
}

/* One block of row_softcap_avx512. */
PA_AVX512 static inline void softcap_block16(float *row, __mmask16 k, __m512 vc, __m512 vi)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    const __m512 x = _mm512_maskz_loadu_ps(k, row), u = _mm512_mul_ps(x, vi);
    /* -inf (masked) stays -inf */
    const __mmask16 masked = _mm512_cmp_ps_mask(x, ninf, _CMP_EQ_OQ);
    const __m512 au = _mm512_abs_ps(u);
    __m512 t = tanh16_small(u);
    if (_mm512_mask_cmp_ps_mask(k & (__mmask16)~masked, au, one, _CMP_GE_OQ) != 0)
        t = _mm512_mask_mov_ps(tanh16_big(u), _mm512_cmp_ps_mask(au, one, _CMP_LT_OQ), t);
    t = _mm512_mul_ps(vc, t);
    _mm512_mask_storeu_ps(row, k, _mm512_mask_mov_ps(t, masked, x));
}

/* row_softcap's blocks of 16, the last one masked. */
PA_AVX512 static void row_softcap_avx512(float *row, int32_t n, float cap)
{
    const __m512 vc = _mm512_set1_ps(cap), vi = _mm512_set1_ps(1.0f / cap);
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        softcap_block16(row + j, PA_FULL16, vc, vi);
    if (j < n)
        softcap_block16(row + j, pa__lanes16(n - j), vc, vi);
}

/* row_exp_sum_avx512 (the same sum, the same probabilities in row) that
 * also writes them as pa__bf16_pack_probs(PA__BF16_DPBF16, ...) does, with
 * the same vcvtneps2bf16: one pass over the tile's row instead of two. */
#define PA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
PA_AVX512_BF16 static inline __m512 exp_sum_pairs_block(float *row, char *out, __mmask16 k,
                                                        __m512 vm, __m512 sum)
{
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row), vm));
    _mm512_mask_storeu_ps(row, k, e);
    _mm256_mask_storeu_epi16(out, k, (__m256i)_mm512_cvtneps_pbh(e));
    return _mm512_mask_add_ps(sum, k, sum, e);
}

PA_AVX512_BF16 static float row_exp_sum_pairs_avx512(float *row, int32_t n, float m, int32_t lead,
                                                     uint32_t *dst)
{
    const __m512 vm = _mm512_set1_ps(m);
    const uint16_t zero = 0;
    char *out = (char *)dst + 2 * (size_t)lead;
    __m512 sum = _mm512_setzero_ps();
    int32_t j = 0;
    if (lead)
        memcpy(dst, &zero, sizeof zero);
    for (; j + 16 <= n; j += 16)
        sum = exp_sum_pairs_block(row + j, out + 2 * (size_t)j, PA_FULL16, vm, sum);
    if (j < n)
        sum = exp_sum_pairs_block(row + j, out + 2 * (size_t)j, pa__lanes16(n - j), vm, sum);
    if ((lead + n) & 1)
        memcpy((char *)dst + 2 * (size_t)(lead + n), &zero, sizeof zero);
    return _mm512_reduce_add_ps(sum);
}

#define PA_HAVE_AVX512() pa__cpu_avx512()
#else
#define PA_HAVE_AVX512() 0
#define row_max_avx512 row_max
#define row_exp_sum_avx512 row_exp_sum
#define row_exp_sum_stats_avx512 row_exp_sum_stats
#define row_exp_scale_avx512 row_exp_scale
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define PA_HAVE_AVX2() pa__cpu_avx2_fma()
#else
#define PA_HAVE_AVX2() 0
#define pa__row_max_avx2 row_max
#define pa__row_exp_sum_avx2 row_exp_sum
#define pa__row_exp_scale_avx2 row_exp_scale
#define pa__row_exp_sum_stats_avx2 row_exp_sum_stats
#endif

float pa__row_max(const float *row, int32_t n)
{
    return PA_HAVE_AVX512() ? row_max_avx512(row, n)
           : PA_HAVE_AVX2() ? pa__row_max_avx2(row, n)
                            : row_max(row, n);
}

float pa__row_exp_sum(float *row, int32_t n, float m)
{
    return PA_HAVE_AVX512() ? row_exp_sum_avx512(row, n, m)
           : PA_HAVE_AVX2() ? pa__row_exp_sum_avx2(row, n, m)
                            : row_exp_sum(row, n, m);
}

float pa__row_exp_sum_pairs(pa__bf16_way w, float *row, int32_t n, float m, int32_t lead,
                            uint32_t *dst)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (w == PA__BF16_DPBF16 && pa__cpu_avx512_bf16())
        return row_exp_sum_pairs_avx512(row, n, m, lead, dst);
#endif
    const float sum = pa__row_exp_sum(row, n, m);
    pa__bf16_pack_probs(w, row, n, lead, dst);
    return sum;
}

float pa__row_exp_sum_stats(float *row, int32_t n, float m, const int32_t *kpos, int32_t qpos,
                            float far, float *spl, float *spd, float *spf)
{
    return PA_HAVE_AVX512() ? row_exp_sum_stats_avx512(row, n, m, kpos, qpos, far, spl, spd, spf)
           : PA_HAVE_AVX2() ? pa__row_exp_sum_stats_avx2(row, n, m, kpos, qpos, far, spl, spd, spf)
                            : row_exp_sum_stats(row, n, m, kpos, qpos, far, spl, spd, spf);
}

void pa__row_exp_scale(float *row, int32_t n, float m, float scale)
{
    if (PA_HAVE_AVX512())
        row_exp_scale_avx512(row, n, m, scale);
    else if (PA_HAVE_AVX2())
        pa__row_exp_scale_avx2(row, n, m, scale);
    else
        row_exp_scale(row, n, m, scale);
}

void pa__row_softcap(float *row, int32_t n, float cap)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (PA_HAVE_AVX512()) {
        row_softcap_avx512(row, n, cap);
        return;
    }
#endif
    row_softcap(row, n, cap);
}
