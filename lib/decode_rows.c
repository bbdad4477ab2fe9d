/* decode_rows.c - the decode kernel's row kernels (see decode_rows.h):
 * portable C, AVX2 (with F16C) and AVX-512, for float keys and values and
 * for 16-bit ones (kv_dtype), which are widened as they are read.
 *
 * Every variant of a kernel sums as the portable C does for its path: the
 * AVX2 ones are the portable sums eight lanes at a time (fused
 * multiply-adds, fmaf in the C, in the same order, so their bits are the
 * portable ones); the AVX-512 ones use fused multiply-adds in their own
 * order, and their 16-bit twins widen the rows in registers and run the
 * float code's sums on them. A 16-bit call therefore gives, on every path,
 * the bits of the float call on the widened rows.
 *
 * Fused, not a multiply then an add: decode is one multiply-add per
 * element read, and on CPUs whose adds and multiplies issue on separate
 * pipes (AMD Zen) the pair of instructions filled the front end, not the
 * pipes (the AVX2 kernels took 16-17 cycles per key and query row at
 * D = 128 against 8 for the multiply-adds alone; fused, 12-13). Where
 * the C runs without an FMA instruction (x86 without AVX2, where nothing
 * else is fast either) fmaf is a libm call.
 */
#include "decode_rows.h"

#include "cpu.h"
#include "dtype.h"
#include "lanes16.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define PA_DEC_X86 1
#include <immintrin.h>
#define PA_AVX512 __attribute__((target("avx512f")))
#define PA_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

/* ------------------------------------------------------------------------- */
/* Row kernels                                                               */
/* ------------------------------------------------------------------------- */

/* s[r * lds + t] = scale * q_r . k_t for the n rows q_r = q + r * d and
 * the nk (1 to 4) keys k_t = k + t * ldk. */
static void dot_rows(const float *q, int32_t n, int32_t d, const float *k, size_t ldk, int32_t nk,
                     float scale, float *s, size_t lds)
{
    for (int32_t r = 0; r < n; r++)
        for (int32_t t = 0; t < nk; t++) {
            const float *x = q + (size_t)r * d, *y = k + (size_t)t * ldk;
            float acc[8] = {0};
            int32_t c = 0;
            for (; c + 8 <= d; c += 8)
                for (int32_t u = 0; u < 8; u++)
                    acc[u] = fmaf(x[c + u], y[c + u], acc[u]);
            for (; c < d; c++)
                acc[0] = fmaf(x[c], y[c], acc[0]);
            s[(size_t)r * lds + (size_t)t] = scale * (((acc[0] + acc[4]) + (acc[1] + acc[5])) +
                                                      ((acc[2] + acc[6]) + (acc[3] + acc[7])));
        }
}

/* o_r += sum_j P[r * ldp + j] V[j * ldv + c] over d columns c, for the n
 * rows o_r = o + r * ldo and nk keys j. */
static void pv_block(float *o, size_t ldo, const float *P, size_t ldp, int32_t n, const float *V,
                     size_t ldv, int32_t nk, int32_t d)
{
    for (int32_t r = 0; r < n; r++) {
        float *y = o + (size_t)r * ldo;
        for (int32_t j = 0; j < nk; j++) {
            const float w = P[(size_t)r * ldp + (size_t)j];
            const float *v = V + (size_t)j * ldv;
            if (w == 0.0f)
                continue;
            for (int32_t c = 0; c < d; c++)
                y[c] = fmaf(w, v[c], y[c]);
        }
    }
}

/* dot_rows and pv_block over keys and values of a 16-bit type t, each
 * element widened as it is read: the same sums in the same order. */
static inline __attribute__((always_inline)) void dot_rows_t(pa_dtype t, const float *q, int32_t n,
                                                             int32_t d, const uint16_t *k,
                                                             size_t ldk, int32_t nk, float scale,
                                                             float *s, size_t lds)
{
    for (int32_t r = 0; r < n; r++)
        for (int32_t tt = 0; tt < nk; tt++) {
            const float *x = q + (size_t)r * d;
            const uint16_t *y = k + (size_t)tt * ldk;
            float acc[8] = {0};
            int32_t c = 0;
            for (; c + 8 <= d; c += 8)
                for (int32_t u = 0; u < 8; u++)
                    acc[u] = fmaf(x[c + u], pa__dtype_get(t, y, (size_t)(c + u)), acc[u]);
            for (; c < d; c++)
                acc[0] = fmaf(x[c], pa__dtype_get(t, y, (size_t)c), acc[0]);
            s[(size_t)r * lds + (size_t)tt] = scale * (((acc[0] + acc[4]) + (acc[1] + acc[5])) +
                                                       ((acc[2] + acc[6]) + (acc[3] + acc[7])));
        }
}

static inline __attribute__((always_inline)) void pv_block_t(pa_dtype t, float *o, size_t ldo,
                                                             const float *P, size_t ldp, int32_t n,
                                                             const uint16_t *V, size_t ldv,
                                                             int32_t nk, int32_t d)
{
    for (int32_t r = 0; r < n; r++) {
        float *y = o + (size_t)r * ldo;
        for (int32_t j = 0; j < nk; j++) {
            const float w = P[(size_t)r * ldp + (size_t)j];
            const uint16_t *v = V + (size_t)j * ldv;
            if (w == 0.0f)
                continue;
            for (int32_t c = 0; c < d; c++)
                y[c] = fmaf(w, pa__dtype_get(t, v, (size_t)c), y[c]);
        }
    }
}

static void dot_rows_bf16(const float *q, int32_t n, int32_t d, const uint16_t *k, size_t ldk,
                          int32_t nk, float scale, float *s, size_t lds)
{
    dot_rows_t(PA_DTYPE_BF16, q, n, d, k, ldk, nk, scale, s, lds);
}

static void dot_rows_f16(const float *q, int32_t n, int32_t d, const uint16_t *k, size_t ldk,
                         int32_t nk, float scale, float *s, size_t lds)
{
    dot_rows_t(PA_DTYPE_F16, q, n, d, k, ldk, nk, scale, s, lds);
}

static void pv_block_bf16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                          const uint16_t *V, size_t ldv, int32_t nk, int32_t d)
{
    pv_block_t(PA_DTYPE_BF16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

static void pv_block_f16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                         const uint16_t *V, size_t ldv, int32_t nk, int32_t d)
{
    pv_block_t(PA_DTYPE_F16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

#if PA_DEC_X86

/* Rows [0, n) four at a time, then the one to three left: CALL(R, r) for
 * rows [r, r + R), R a constant (the kernels below are unrolled by it). */
#define PA_BY_FOUR_ROWS(n, CALL)                                                                   \
    do {                                                                                           \
        int32_t r_ = 0;                                                                            \
        for (; r_ + 4 <= (n); r_ += 4)                                                             \
            CALL(4, r_);                                                                           \
        switch ((n)-r_) {                                                                          \
        case 3:                                                                                    \
            CALL(3, r_);                                                                           \
            break;                                                                                 \
        case 2:                                                                                    \
            CALL(2, r_);                                                                           \
            break;                                                                                 \
        case 1:                                                                                    \
            CALL(1, r_);                                                                           \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------- */
/* AVX2: the portable sums, eight lanes at a time                            */
/* ------------------------------------------------------------------------- */

/* Eight elements from x[i] of type t, as floats. */
PA_AVX2 static inline __attribute__((always_inline)) __m256 ld8(pa_dtype t, const void *x, size_t i)
{
    __m128i h;
    if (t == PA_DTYPE_F32)
        return _mm256_loadu_ps((const float *)x + i);
    h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)x + i));
    if (t == PA_DTYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* dot_rows's final sum of the eight lanes of each of a0..a3, in its
 * order ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)), as four floats:
 * the halves added, then two rounds of pairwise adds. */
PA_AVX2 static inline __m128 lane_sums4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    const __m128 h0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    const __m128 h1 = _mm_add_ps(_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1));
    const __m128 h2 = _mm_add_ps(_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1));
    const __m128 h3 = _mm_add_ps(_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1));
    return _mm_hadd_ps(_mm_hadd_ps(h0, h1), _mm_hadd_ps(h2, h3));
}

/* R rows (1 to 3) against 4 keys of dot_rows: lane u of acc[r][t] is
 * dot_rows's acc[u], taking the same fused multiply-adds in the same
 * order, and the tail and the final sum done as it does them. Each key
 * vector serves the R rows while in a register, so a group of G query
 * heads reads its keys ceil(G / 3) times, from L1 after the first. Keys
 * past nk repeat the first and are not stored. */
PA_AVX2 static inline __attribute__((always_inline)) void
dot_tile3(const int R, pa_dtype t, const float *q, int32_t d, const void *k, size_t ldk, int32_t nk,
          float scale, float *s, size_t lds)
{
    __m256 acc[3][4];
    size_t kt[4];
    int32_t c = 0;
    for (int u = 0; u < 4; u++)
        kt[u] = u < nk ? (size_t)u * ldk : 0;
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[r][u] = _mm256_setzero_ps();
    for (; c + 8 <= d; c += 8) {
        const __m256 k0 = ld8(t, k, kt[0] + (size_t)c), k1 = ld8(t, k, kt[1] + (size_t)c);
        const __m256 k2 = ld8(t, k, kt[2] + (size_t)c), k3 = ld8(t, k, kt[3] + (size_t)c);
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_loadu_ps(q + (size_t)r * d + c);
            acc[r][0] = _mm256_fmadd_ps(x, k0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, k1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(x, k2, acc[r][2]);
            acc[r][3] = _mm256_fmadd_ps(x, k3, acc[r][3]);
        }
    }
    if (c < d) /* the tail into lane 0, as dot_rows adds it */
        for (int r = 0; r < R; r++)
            for (int u = 0; u < 4; u++) {
                const float *x = q + (size_t)r * d;
                float a[8];
                _mm256_storeu_ps(a, acc[r][u]);
                for (int32_t e = c; e < d; e++)
                    a[0] = fmaf(x[e], pa__dtype_get(t, k, kt[u] + (size_t)e), a[0]);
                acc[r][u] = _mm256_loadu_ps(a);
            }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++) {
        const __m128 sc =
            _mm_mul_ps(_mm_set1_ps(scale), lane_sums4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        if (nk == 4) {
            _mm_storeu_ps(s + (size_t)r * lds, sc);
        } else {
            float out[4];
            _mm_storeu_ps(out, sc);
            for (int32_t u = 0; u < nk; u++)
                s[(size_t)r * lds + (size_t)u] = out[u];
        }
    }
}

/* R rows (1 to 4) against one key: dot_tile3's sums for its key 0 (lane
 * u of acc[r] is dot_rows's acc[u], the tail into lane 0, and lane_sums4,
 * which folds each of its inputs alike, over the rows where dot_tile3 has
 * the keys), so one key's row is read once. */
PA_AVX2 static inline __attribute__((always_inline)) void dot_key8(const int R, pa_dtype t,
                                                                   const float *q, int32_t d,
                                                                   const void *k, float scale,
                                                                   float *s, size_t lds)
{
    __m256 acc[4];
    int32_t c = 0;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        acc[r] = _mm256_setzero_ps();
    for (; c + 8 <= d; c += 8) {
        const __m256 kv = ld8(t, k, (size_t)c);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)r * d + c), kv, acc[r]);
    }
    if (c < d) /* the tail into lane 0, as dot_rows adds it */
        for (int r = 0; r < R; r++) {
            const float *x = q + (size_t)r * d;
            float a[8];
            _mm256_storeu_ps(a, acc[r]);
            for (int32_t e = c; e < d; e++)
                a[0] = fmaf(x[e], pa__dtype_get(t, k, (size_t)e), a[0]);
            acc[r] = _mm256_loadu_ps(a);
        }
    {
        float out[4];
        _mm_storeu_ps(out,
                      _mm_mul_ps(_mm_set1_ps(scale), lane_sums4(acc[0], acc[1], acc[2], acc[3])));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            s[(size_t)r * lds] = out[r];
    }
}

PA_AVX2 static inline __attribute__((always_inline)) void
dot_rows_avx2_t(pa_dtype t, const float *q, int32_t n, int32_t d, const void *k, size_t ldk,
                int32_t nk, float scale, float *s, size_t lds)
{
    int32_t r = 0;
#define KEY_ROWS(R, r0) dot_key8(R, t, q + (size_t)(r0)*d, d, k, scale, s + (size_t)(r0)*lds, lds)
    if (nk == 1) {
        PA_BY_FOUR_ROWS(n, KEY_ROWS);
        return;
    }
#undef KEY_ROWS
    /* Three rows' 12 accumulators, four keys and a query row are 17
     * vectors: with float keys GCC reads one key from memory in each
     * multiply-add, but 16-bit keys must be widened in registers, and a
     * spilled accumulator made a store-to-load chain of every step (0.55x
     * the speed of two rows at a time). */
    for (; t == PA_DTYPE_F32 && r + 3 <= n; r += 3)
        dot_tile3(3, t, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
    for (; r + 2 <= n; r += 2)
        dot_tile3(2, t, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
    if (r < n)
        dot_tile3(1, t, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
}

/* R rows (1 to 4) by 8W columns (W 1 or 2) from c of pv_block: each row's
 * columns stay in registers across the nk keys and take, key after key,
 * the same fused w * v additions as pv_block's (a zero weight skipped), so
 * every element sees the same sums in the same order. dense: no weight of
 * the tile is zero (nothing to skip, no test). */
PA_AVX2 static inline __attribute__((always_inline)) void
pv_tile2(const int R, const int W, const bool dense, pa_dtype t, float *o, size_t ldo,
         const float *P, size_t ldp, const void *V, size_t ldv, int32_t nk, int32_t c)
{
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int u = 0; u < W; u++)
            acc[r][u] = _mm256_loadu_ps(o + (size_t)r * ldo + c + 8 * u);
    for (int32_t j = 0; j < nk; j++) {
        const size_t at = (size_t)j * ldv + (size_t)c;
        const __m256 v0 = ld8(t, V, at), v1 = W > 1 ? ld8(t, V, at + 8) : v0;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const float *w = P + (size_t)r * ldp + (size_t)j;
            __m256 wv;
            if (!dense && *w == 0.0f)
                continue;
            wv = _mm256_broadcast_ss(w);
            acc[r][0] = _mm256_fmadd_ps(wv, v0, acc[r][0]);
            if (W > 1)
                acc[r][1] = _mm256_fmadd_ps(wv, v1, acc[r][1]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int u = 0; u < W; u++)
            _mm256_storeu_ps(o + (size_t)r * ldo + c + 8 * u, acc[r][u]);
}

/* Rows [r, r + R) of pv_block_avx2_t: 16 columns at a time, then 8, then
 * the last ones one by one. */
PA_AVX2 static inline __attribute__((always_inline)) void
pv_rows2(const int R, pa_dtype t, float *o, size_t ldo, const float *P, size_t ldp, const void *V,
         size_t ldv, int32_t nk, int32_t d)
{
    int32_t c = 0;
    bool dense = true;
    for (int r = 0; r < R; r++)
        for (int32_t j = 0; j < nk; j++)
            dense = dense && P[(size_t)r * ldp + (size_t)j] != 0.0f;
    if (dense)
        for (; c + 16 <= d; c += 16)
            pv_tile2(R, 2, true, t, o, ldo, P, ldp, V, ldv, nk, c);
    else
        for (; c + 16 <= d; c += 16)
            pv_tile2(R, 2, false, t, o, ldo, P, ldp, V, ldv, nk, c);
    if (c + 8 <= d) {
        pv_tile2(R, 1, false, t, o, ldo, P, ldp, V, ldv, nk, c);
        c += 8;
    }
    if (c < d)
        for (int r = 0; r < R; r++) {
            float *y = o + (size_t)r * ldo;
            for (int32_t j = 0; j < nk; j++) {
                const float w = P[(size_t)r * ldp + (size_t)j];
                if (w == 0.0f)
                    continue;
                for (int32_t e = c; e < d; e++)
                    y[e] = fmaf(w, pa__dtype_get(t, V, (size_t)j * ldv + (size_t)e), y[e]);
            }
        }
}

PA_AVX2 static inline __attribute__((always_inline)) void
pv_block_avx2_t(pa_dtype t, float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                const void *V, size_t ldv, int32_t nk, int32_t d)
{
    int32_t r = 0;
    for (; r + 4 <= n; r += 4)
        pv_rows2(4, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, d);
    switch (n - r) {
    case 3:
        pv_rows2(3, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, d);
        break;
    case 2:
        pv_rows2(2, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, d);
        break;
    case 1:
        pv_rows2(1, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, d);
        break;
    default:
        break;
    }
}

PA_AVX2 static void dot_rows_avx2(const float *q, int32_t n, int32_t d, const float *k, size_t ldk,
                                  int32_t nk, float scale, float *s, size_t lds)
{
    dot_rows_avx2_t(PA_DTYPE_F32, q, n, d, k, ldk, nk, scale, s, lds);
}

PA_AVX2 static void dot_rows_avx2_bf16(const float *q, int32_t n, int32_t d, const uint16_t *k,
                                       size_t ldk, int32_t nk, float scale, float *s, size_t lds)
{
    dot_rows_avx2_t(PA_DTYPE_BF16, q, n, d, k, ldk, nk, scale, s, lds);
}

PA_AVX2 static void dot_rows_avx2_f16(const float *q, int32_t n, int32_t d, const uint16_t *k,
                                      size_t ldk, int32_t nk, float scale, float *s, size_t lds)
{
    dot_rows_avx2_t(PA_DTYPE_F16, q, n, d, k, ldk, nk, scale, s, lds);
}

PA_AVX2 static void pv_block_avx2(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                  const float *V, size_t ldv, int32_t nk, int32_t d)
{
    pv_block_avx2_t(PA_DTYPE_F32, o, ldo, P, ldp, n, V, ldv, nk, d);
}

PA_AVX2 static void pv_block_avx2_bf16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                       const uint16_t *V, size_t ldv, int32_t nk, int32_t d)
{
    pv_block_avx2_t(PA_DTYPE_BF16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

PA_AVX2 static void pv_block_avx2_f16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                      const uint16_t *V, size_t ldv, int32_t nk, int32_t d)
{
    pv_block_avx2_t(PA_DTYPE_F16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

/* ------------------------------------------------------------------------- */
/* AVX-512                                                                   */
/* ------------------------------------------------------------------------- */

/* The sums of the 16 lanes of a0, a1, a2, a3, in lanes 0, 4, 8 and 12:
 * halves, quarters, then pairs folded in 9 shuffles and adds, where four
 * separate reductions take 24. */
PA_AVX512 static inline __m512 sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
    const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44),  /* a0 lo | a1 lo */
                                   _mm512_shuffle_f32x4(a0, a1, 0xEE)); /* a0 hi | a1 hi */
    const __m512 y =
        _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    /* Quarters: lanes 0-3 a0, 4-7 a1, 8-11 a2, 12-15 a3. */
    __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
    z = _mm512_add_ps(z, _mm512_permute_ps(z, 0x4E)); /* pairs of pairs */
    return _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1));
}

/* 16 elements of type t from x[i], as floats (widening is exact); the
 * first `left` of them where left < 16, the others 0. */
PA_AVX512 static inline __attribute__((always_inline)) __m512 ld16(pa_dtype t, const void *x,
                                                                   size_t i, int32_t left)
{
    __m256i h;
    if (t == PA_DTYPE_F32)
        return left >= 16 ? _mm512_loadu_ps((const float *)x + i)
                          : _mm512_maskz_loadu_ps(pa__lanes16(left), (const float *)x + i);
    if (left >= 16) {
        h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)x + i));
    } else { /* AVX-512F has no masked 16-bit load */
        uint16_t part[16] = {0};
        memcpy(part, (const uint16_t *)x + i, (size_t)(left > 0 ? left : 0) * sizeof(uint16_t));
        h = _mm256_loadu_si256((const __m256i *)(const void *)part);
    }
    if (t == PA_DTYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* R rows (1 to 4) against 4 keys of type t: 4R accumulators (independent
 * chains of fused multiply-adds), each 16 floats of q and of k loaded once
 * (16-bit keys widened in registers, so the sums are the float call's on
 * the widened rows); keys past nk repeat the first and are not stored. */
PA_AVX512 static inline __attribute__((always_inline)) void
dot_tile(const int R, pa_dtype t, const float *q, int32_t d, const void *k, size_t ldk, int32_t nk,
         float scale, float *s, size_t lds)
{
    size_t kt[4];
    __m512 acc[4][4];
    int32_t c = 0;
    const __m512i pick = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    for (int u = 0; u < 4; u++)
        kt[u] = u < nk ? (size_t)u * ldk : 0;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[r][u] = _mm512_setzero_ps();
    for (; c < d; c += 16) {
        const int32_t left = c + 16 <= d ? 16 : d - c; /* whole vectors, then the tail */
        const __m512 k0 = ld16(t, k, kt[0] + (size_t)c, left),
                     k1 = ld16(t, k, kt[1] + (size_t)c, left);
        const __m512 k2 = ld16(t, k, kt[2] + (size_t)c, left),
                     k3 = ld16(t, k, kt[3] + (size_t)c, left);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 x = ld16(PA_DTYPE_F32, q, (size_t)r * d + (size_t)c, left);
            acc[r][0] = _mm512_fmadd_ps(x, k0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, k1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(x, k2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(x, k3, acc[r][3]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const __m512 sums =
            _mm512_mul_ps(sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(s + (size_t)r * lds, (__mmask16)((1u << nk) - 1u),
                              _mm512_permutexvar_ps(pick, sums));
    }
}

/* Up to 4 rows against one key: dot_tile's sums for key 0 (the same
 * fused multiply-adds per row, the same reduction tree in sum4, which
 * folds each of its inputs alike), with the rows where dot_tile has the
 * keys, so one key's row is read once. */
PA_AVX512 static inline __attribute__((always_inline)) void dot_key(const int R, pa_dtype t,
                                                                    const float *q, int32_t d,
                                                                    const void *k, float scale,
                                                                    float *s, size_t lds)
{
    __m512 acc[4];
    int32_t c = 0;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        acc[r] = _mm512_setzero_ps();
    for (; c < d; c += 16) {
        const int32_t left = c + 16 <= d ? 16 : d - c;
        const __m512 kv = ld16(t, k, (size_t)c, left);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r] =
                _mm512_fmadd_ps(ld16(PA_DTYPE_F32, q, (size_t)r * d + (size_t)c, left), kv, acc[r]);
    }
    {
        float out[16];
        _mm512_storeu_ps(
            out, _mm512_mul_ps(sum4(acc[0], acc[1], acc[2], acc[3]), _mm512_set1_ps(scale)));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            s[(size_t)r * lds] = out[4 * r];
    }
}

PA_AVX512 static inline __attribute__((always_inline)) void
dot_rows_avx512_t(pa_dtype t, const float *q, int32_t n, int32_t d, const void *k, size_t ldk,
                  int32_t nk, float scale, float *s, size_t lds)
{
#define KEY_ROWS(R, r0) dot_key(R, t, q + (size_t)(r0)*d, d, k, scale, s + (size_t)(r0)*lds, lds)
#define TILE_ROWS(R, r0)                                                                           \
    dot_tile(R, t, q + (size_t)(r0)*d, d, k, ldk, nk, scale, s + (size_t)(r0)*lds, lds)
    if (nk == 1)
        PA_BY_FOUR_ROWS(n, KEY_ROWS);
    else
        PA_BY_FOUR_ROWS(n, TILE_ROWS);
#undef KEY_ROWS
#undef TILE_ROWS
}

/* R rows (1 to 4) by 64 columns from c of pv_block, the sums in 4R
 * registers across all nk keys, then added to o once; values of type t
 * widened in registers. */
PA_AVX512 static inline __attribute__((always_inline)) void
pv_tile(const int R, const bool full, pa_dtype t, float *o, size_t ldo, const float *P, size_t ldp,
        const void *V, size_t ldv, int32_t nk, int32_t c, int32_t d)
{
    const int32_t left = full ? 64 : d - c; /* full: no mask, no test */
    const __mmask16 m0 = pa__lanes16(left), m1 = pa__lanes16(left - 16),
                    m2 = pa__lanes16(left - 32), m3 = pa__lanes16(left - 48);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[r][u] = _mm512_setzero_ps();
    for (int32_t j = 0; j < nk; j++) {
        const size_t v = (size_t)j * ldv + (size_t)c;
        const __m512 v0 = ld16(t, V, v, left), v1 = ld16(t, V, v + 16, left - 16);
        const __m512 v2 = ld16(t, V, v + 32, left - 32), v3 = ld16(t, V, v + 48, left - 48);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 w = _mm512_set1_ps(P[(size_t)r * ldp + (size_t)j]);
            acc[r][0] = _mm512_fmadd_ps(w, v0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(w, v1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(w, v2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(w, v3, acc[r][3]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float *y = o + (size_t)r * ldo + c;
        _mm512_mask_storeu_ps(y, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, y), acc[r][0]));
        _mm512_mask_storeu_ps(y + 16, m1,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m1, y + 16), acc[r][1]));
        _mm512_mask_storeu_ps(y + 32, m2,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m2, y + 32), acc[r][2]));
        _mm512_mask_storeu_ps(y + 48, m3,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m3, y + 48), acc[r][3]));
    }
}

#define PV_TILES(full)                                                                             \
    do {                                                                                           \
        int32_t r = 0;                                                                             \
        for (; r + 4 <= n; r += 4)                                                                 \
            pv_tile(4, full, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c, \
                    d);                                                                            \
        if (n - r == 3)                                                                            \
            pv_tile(3, full, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c, \
                    d);                                                                            \
        else if (n - r == 2)                                                                       \
            pv_tile(2, full, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c, \
                    d);                                                                            \
        else if (n - r == 1)                                                                       \
            pv_tile(1, full, t, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c, \
                    d);                                                                            \
    } while (0)

/* 64 columns at a time: whole vectors while whole, masked on the tail. */
PA_AVX512 static inline __attribute__((always_inline)) void
pv_block_avx512_t(pa_dtype t, float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                  const void *V, size_t ldv, int32_t nk, int32_t d)
{
    int32_t c = 0;
    for (; c + 64 <= d; c += 64)
        PV_TILES(true);
    if (c < d)
        PV_TILES(false);
}

#undef PV_TILES

/* decode_rows.h's dot_heads16: dot_rows_avx512_t with nk = 1 per kv head. */
PA_AVX512 static inline __attribute__((always_inline)) void
dot_heads_avx512_t(pa_dtype t, const float *q, int32_t n, int32_t heads, int32_t d, const void *k,
                   const void *ka, const void *va, int32_t dv, float scale, float *s, size_t lds)
{
    const size_t es = sizeof(uint16_t);
    for (int32_t i = 0; i < heads; i++) {
        pa__prefetch_span(ka != NULL ? (const char *)ka + (size_t)i * (size_t)d * es : NULL,
                          (size_t)d * es);
        pa__prefetch_span(va != NULL ? (const char *)va + (size_t)i * (size_t)dv * es : NULL,
                          (size_t)dv * es);
        dot_rows_avx512_t(t, q + (size_t)i * (size_t)n * (size_t)d, n, d,
                          (const char *)k + (size_t)i * (size_t)d * es, 0, 1, scale,
                          s + (size_t)i * (size_t)n * lds, lds);
    }
}

/* CALL(D) with D the constant 64 or 128 where d is one of them (the
 * common head sizes), else d: the loop over d then unrolls whole, which
 * took a key and kv head's logits at D = 128 (4 query rows, one key) from
 * 10.1-10.4 ns to 7.4-7.6 for bf16 keys and from 13.4-14.0 to 11.1-11.2
 * for float ones, on an AMD EPYC. The same instructions otherwise, so
 * the same bits. */
#define PA_BY_HEAD_DIM(d, CALL)                                                                    \
    do {                                                                                           \
        if ((d) == 64)                                                                             \
            CALL(64);                                                                              \
        else if ((d) == 128)                                                                       \
            CALL(128);                                                                             \
        else                                                                                       \
            CALL(d);                                                                               \
    } while (0)

PA_AVX512 static void dot_heads_avx512_bf16(const float *q, int32_t n, int32_t heads, int32_t d,
                                            const uint16_t *k, const void *ka, const void *va,
                                            int32_t dv, float scale, float *s, size_t lds)
{
#define HEADS(D) dot_heads_avx512_t(PA_DTYPE_BF16, q, n, heads, D, k, ka, va, dv, scale, s, lds)
    PA_BY_HEAD_DIM(d, HEADS);
#undef HEADS
}

PA_AVX512 static void dot_heads_avx512_f16(const float *q, int32_t n, int32_t heads, int32_t d,
                                           const uint16_t *k, const void *ka, const void *va,
                                           int32_t dv, float scale, float *s, size_t lds)
{
#define HEADS(D) dot_heads_avx512_t(PA_DTYPE_F16, q, n, heads, D, k, ka, va, dv, scale, s, lds)
    PA_BY_HEAD_DIM(d, HEADS);
#undef HEADS
}

PA_AVX512 static void dot_rows_avx512(const float *q, int32_t n, int32_t d, const float *k,
                                      size_t ldk, int32_t nk, float scale, float *s, size_t lds)
{
#define ROWS(D) dot_rows_avx512_t(PA_DTYPE_F32, q, n, D, k, ldk, nk, scale, s, lds)
    PA_BY_HEAD_DIM(d, ROWS);
#undef ROWS
}

PA_AVX512 static void dot_rows_avx512_bf16(const float *q, int32_t n, int32_t d, const uint16_t *k,
                                           size_t ldk, int32_t nk, float scale, float *s,
                                           size_t lds)
{
#define ROWS(D) dot_rows_avx512_t(PA_DTYPE_BF16, q, n, D, k, ldk, nk, scale, s, lds)
    PA_BY_HEAD_DIM(d, ROWS);
#undef ROWS
}

PA_AVX512 static void dot_rows_avx512_f16(const float *q, int32_t n, int32_t d, const uint16_t *k,
                                          size_t ldk, int32_t nk, float scale, float *s, size_t lds)
{
#define ROWS(D) dot_rows_avx512_t(PA_DTYPE_F16, q, n, D, k, ldk, nk, scale, s, lds)
    PA_BY_HEAD_DIM(d, ROWS);
#undef ROWS
}

PA_AVX512 static void pv_block_avx512(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                      const float *V, size_t ldv, int32_t nk, int32_t d)
{
    pv_block_avx512_t(PA_DTYPE_F32, o, ldo, P, ldp, n, V, ldv, nk, d);
}

PA_AVX512 static void pv_block_avx512_bf16(float *o, size_t ldo, const float *P, size_t ldp,
                                           int32_t n, const uint16_t *V, size_t ldv, int32_t nk,
                                           int32_t d)
{
    pv_block_avx512_t(PA_DTYPE_BF16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

PA_AVX512 static void pv_block_avx512_f16(float *o, size_t ldo, const float *P, size_t ldp,
                                          int32_t n, const uint16_t *V, size_t ldv, int32_t nk,
                                          int32_t d)
{
    pv_block_avx512_t(PA_DTYPE_F16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

#endif

pa__row_ops pa__row_ops_pick(pa_dtype t)
{
    const bool f16 = t == PA_DTYPE_F16;
    pa__row_ops ops = {
        dot_rows, pv_block, f16 ? dot_rows_f16 : dot_rows_bf16, f16 ? pv_block_f16 : pv_block_bf16,
        false,    NULL};
#if PA_DEC_X86
    if (pa__cpu_avx512()) {
        ops.key_major = true;
        ops.dot = dot_rows_avx512;
        ops.pv = pv_block_avx512;
        ops.dot16 = f16 ? dot_rows_avx512_f16 : dot_rows_avx512_bf16;
        ops.pv16 = f16 ? pv_block_avx512_f16 : pv_block_avx512_bf16;
        ops.dot_heads16 = f16 ? dot_heads_avx512_f16 : dot_heads_avx512_bf16;
    } else if (pa__cpu_avx2_fma()) {
        ops.key_major = true;
        ops.dot = dot_rows_avx2;
        ops.pv = pv_block_avx2;
        ops.dot16 = f16 ? dot_rows_avx2_f16 : dot_rows_avx2_bf16;
        ops.pv16 = f16 ? pv_block_avx2_f16 : pv_block_avx2_bf16;
    }
#endif
    return ops;
}
