/* softmax_avx2.c - the softmax's max, exp-and-sum, exp-and-scale and
 * exp-and-statistics row passes (lib/softmax.c) written out for AVX2 and
 * FMA, with the bits of the C.
 *
 * softmax.c's passes are plain C that GCC vectorizes through
 * target_clones; its exp, though, comes out of the vectorizer as about 50
 * instructions per eight lanes, most of them the if-converted clamps and
 * selects (a prefill spent 17% of its time in them at D = 64). Here the
 * same arithmetic runs as intrinsics: the same fused multiply-adds in the
 * same order, the clamps as vmaxps and vminps (which return the second
 * operand when either is NaN, as the C's selects do), the same 16 lanes
 * for the sums and the same order of their final additions. So a row gives
 * the same bits whichever runs, and the decode kernel's AVX2 path stays the
 * portable one (tests/lib/test_softmax_avx2.c checks every pass against
 * softmax.c's, bit for bit). A prefill at L = 2048, D = 64 took 0.86x the
 * time of the vectorized C on an AMD EPYC; with the row statistics
 * (entropy and distance) 0.48x.
 */
#include "softmax.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define PA_AVX2 __attribute__((target("avx2,fma")))

/* softmax.c's exp_lane on eight lanes (and the AVX-512 exp16's): for x
 * <= ~88, exactly 0 below -87 (so -inf gives 0), NaN kept. vroundps to
 * nearest is the C's 1.5 * 2^23 trick. */
PA_AVX2 static inline __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.0f);
    /* x > -87 ? x : -87 (NaN -> -87), then xc < 88 ? xc : 88 */
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    __m256 p;
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    p = _mm256_fmadd_ps(_mm256_set1_ps(8.2902638e-3f), r, _mm256_set1_ps(4.1898161e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6667639e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999148e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(9.9999970e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    {
        const __m256i bits =
            _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
        const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
        const __m256 live = _mm256_cmp_ps(x, lo, _CMP_GT_OQ);
        const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
        /* x > -87 ? y : (x == x ? 0 : x) */
        return _mm256_blendv_ps(_mm256_and_ps(nan, x), y, live);
    }
}

/* The n - j < 8 lanes left from j, the rest -inf: a masked load. */
PA_AVX2 static inline __m256i tail_mask(int32_t left)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), idx);
}

PA_AVX2 float pa__row_max_avx2(const float *row, int32_t n)
{
    __m256 l0 = _mm256_set1_ps(-INFINITY), l1 = l0;
    float lane[16];
    float m = -INFINITY;
    int32_t j = 0;
    /* row > lane ? row : lane: vmaxps(row, lane) keeps lane for a NaN row */
    for (; j + 16 <= n; j += 16) {
        l0 = _mm256_max_ps(_mm256_loadu_ps(row + j), l0);
        l1 = _mm256_max_ps(_mm256_loadu_ps(row + j + 8), l1);
    }
    for (; j < n; j++)
        m = row[j] > m ? row[j] : m;
    _mm256_storeu_ps(lane, l0);
    _mm256_storeu_ps(lane + 8, l1);
    for (int k = 0; k < 16; k++)
        m = lane[k] > m ? lane[k] : m;
    return m;
}

/* exp8 of the row's tail [j, n) (fewer than 16) into row, one vector of
 * up to 8 at a time. */
PA_AVX2 static inline void exp_tail(float *row, int32_t j, int32_t n, __m256 vm, __m256 vs,
                                    bool scale)
{
    for (; j < n; j += 8) {
        const __m256i k = tail_mask(n - j);
        __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(row + j, k), vm));
        if (scale)
            e = _mm256_mul_ps(e, vs);
        _mm256_maskstore_ps(row + j, k, e);
    }
}

PA_AVX2 float pa__row_exp_sum_avx2(float *row, int32_t n, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    float lane[16];
    float sum = 0.0f;
    int32_t j = 0;
    /* The exps, then their sums: in one loop the two running sums took the
     * registers the exp's constants need, and GCC kept them on the stack,
     * a store-to-load chain per step. */
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(row + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm)));
    exp_tail(row, j, n, vm, vm, false);
    for (j = 0; j + 16 <= n; j += 16) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(row + j));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(row + j + 8));
    }
    /* softmax.c's lane_sum: the tail added in order, then the 16 lanes */
    for (; j < n; j++)
        sum += row[j];
    _mm256_storeu_ps(lane, s0);
    _mm256_storeu_ps(lane + 8, s1);
    for (int k = 0; k < 16; k++)
        sum += lane[k];
    return sum;
}

/* softmax.c's abs_diff on eight lanes: max - min in uint32, rounded once
 * to float. AVX2 converts only signed integers: the high and low 16 bits
 * convert exactly, the high half times 65536 is exact, and the one add
 * rounds the exact distance, as the C's conversion does. */
PA_AVX2 static inline __m256 abs_diff8(__m256i a, __m256i b)
{
    const __m256i d = _mm256_sub_epi32(_mm256_max_epi32(a, b), _mm256_min_epi32(a, b));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(d, 16));
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(d, _mm256_set1_epi32(0xFFFF)));
    return _mm256_add_ps(_mm256_mul_ps(hi, _mm256_set1_ps(65536.0f)), lo);
}

/* softmax.c's row_exp_sum_stats: the exps of 64 logits at a time into a
 * buffer, then the four sums of those 64 over the 16 lanes (each a
 * multiply, then an add, as the C does them), then the exps into the row:
 * the eight running sums and the exp's constants do not fit the registers
 * together. The tail and the lanes' final additions in the C's order. */
PA_AVX2 float pa__row_exp_sum_stats_avx2(float *row, int32_t n, float m, const int32_t *kpos,
                                         int32_t qpos, float far, float *spl, float *spd,
                                         float *spf)
{
    const __m256 vm = _mm256_set1_ps(m), zero = _mm256_setzero_ps(), vfar = _mm256_set1_ps(far);
    const __m256i vq = _mm256_set1_epi32(qpos);
    __m256 ls[2] = {zero, zero}, la[2] = {zero, zero}, ld[2] = {zero, zero}, lf[2] = {zero, zero};
    float e[64], lane[16];
    float sum = 0.0f, a = 0.0f, d = 0.0f, f = 0.0f;
    int32_t j = 0;
    for (; j + 16 <= n;) {
        const int32_t c = n - j >= 64 ? 64 : (n - j) / 16 * 16;
        for (int32_t i = 0; i < c; i += 8)
            _mm256_storeu_ps(e + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j + i), vm)));
        for (int32_t i = 0; i < c; i += 8) {
            const int h = (i / 8) & 1; /* lanes 0-7 or 8-15 */
            const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(row + j + i), vm);
            const __m256 p = _mm256_loadu_ps(e + i);
            const __m256 dist =
                abs_diff8(_mm256_loadu_si256((const __m256i *)(const void *)(kpos + j + i)), vq);
            ls[h] = _mm256_add_ps(ls[h], p);
            la[h] = _mm256_add_ps(
                la[h], _mm256_and_ps(_mm256_cmp_ps(p, zero, _CMP_GT_OQ), _mm256_mul_ps(p, x)));
            ld[h] = _mm256_add_ps(ld[h], _mm256_mul_ps(p, dist));
            lf[h] = _mm256_add_ps(lf[h], _mm256_and_ps(_mm256_cmp_ps(dist, vfar, _CMP_GT_OQ), p));
        }
        memcpy(row + j, e, (size_t)c * sizeof(float));
        j += c;
    }
    if (j < n) { /* fewer than 16 left: the C's tail, one logit after another */
        const int32_t t = n - j;
        for (int32_t i = 0; i < t; i++)
            e[i] = row[j + i];
        exp_tail(e, 0, t, vm, vm, false);
        for (int32_t i = 0; i < t; i++) {
            const float x = row[j + i] - m, p = e[i];
            const int32_t kp = kpos[j + i], hi = kp > qpos ? kp : qpos, lo = kp > qpos ? qpos : kp;
            const float dist = (float)((uint32_t)hi - (uint32_t)lo);
            row[j + i] = p;
            sum += p;
            a += p > 0.0f ? p * x : 0.0f;
            d += p * dist;
            f += dist > far ? p : 0.0f;
        }
    }
#define PA_LANES(acc, into)                                                                        \
    do {                                                                                           \
        _mm256_storeu_ps(lane, acc[0]);                                                            \
        _mm256_storeu_ps(lane + 8, acc[1]);                                                        \
        for (int k = 0; k < 16; k++)                                                               \
            into += lane[k];                                                                       \
    } while (0)
    PA_LANES(ls, sum);
    PA_LANES(la, a);
    PA_LANES(ld, d);
    PA_LANES(lf, f);
#undef PA_LANES
    *spl = a;
    *spd = d;
    *spf = f;
    return sum;
}

PA_AVX2 void pa__row_exp_scale_avx2(float *row, int32_t n, float m, float scale)
{
    const __m256 vm = _mm256_set1_ps(m), vs = _mm256_set1_ps(scale);
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(row + j,
                         _mm256_mul_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm)), vs));
    exp_tail(row, j, n, vm, vs, true);
}

#endif
