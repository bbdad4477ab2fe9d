/* attention_decode.c - a few queries against many keys: decode.
 *
 * One new token (or a few: speculative drafts) against a long KV cache is
 * bound by reading K and V, not by arithmetic. The tiled kernel would pack
 * each kv head's keys (a copy of the cache) and read them once per query
 * head. Here the keys are visited once, in blocks of DEC_BK in memory order
 * (key j of every kv head is one row of k, so the cache streams front to
 * back), and each key serves every query row of its kv head's group while it
 * is in L1: the logits are dot products, then the bias and mask pass and the
 * online softmax of the tiled kernel, then the values are added row by row.
 * Neither K nor V is copied; keys that need a norm or a rotation are
 * prepared one row at a time.
 *
 * Keys and values in 16 bits (kv_dtype) are read where they lie, half the
 * bytes, and widened on the way: in registers by the AVX2 row kernels
 * (F16C's vcvtph2ps, or bf16's 16-bit shift), element by element by the
 * portable ones, and into an L1 scratch row for the AVX-512 ones, which
 * then run as for float rows. Each row kernel sums exactly as its float
 * twin does, so the bits equal the float call on the widened rows.
 *
 * The state of a row (running max, sum and unnormalised output) can be
 * computed over a share of the keys and the shares merged afterwards
 * (pa__decode_finish): split-K, as flash-decoding does (Dao, Haziza, Massa
 * and Sizov 2023), so one decode runs on every core.
 */
#include "attention_kernel.h"

#include "cpu.h"
#include "dtype.h"
#include "softmax.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define PA_DEC_X86 1
#include <immintrin.h>
#define PA_AVX512 __attribute__((target("avx512f")))
#define PA_AVX2 __attribute__((target("avx2,f16c")))
#endif

bool pa__decode_fits(const pa__plan *p)
{
    return p->Lq <= 8 && p->scheme->type != PA_SCHEME_SHAW && p->scheme->type != PA_SCHEME_COPE;
}

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
                    acc[u] += x[c + u] * y[c + u];
            for (; c < d; c++)
                acc[0] += x[c] * y[c];
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
                y[c] += w * v[c];
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
                    acc[u] += x[c + u] * pa__dtype_get(t, y, (size_t)(c + u));
            for (; c < d; c++)
                acc[0] += x[c] * pa__dtype_get(t, y, (size_t)c);
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
                y[c] += w * pa__dtype_get(t, v, (size_t)c);
        }
    }
}

static void dot_rows_bf16(const float *q, int32_t n, int32_t d, const uint16_t *k, size_t ldk,
                          int32_t nk, float scale, float *s, size_t lds, float *scratch)
{
    (void)scratch;
    dot_rows_t(PA_DTYPE_BF16, q, n, d, k, ldk, nk, scale, s, lds);
}

static void dot_rows_f16(const float *q, int32_t n, int32_t d, const uint16_t *k, size_t ldk,
                         int32_t nk, float scale, float *s, size_t lds, float *scratch)
{
    (void)scratch;
    dot_rows_t(PA_DTYPE_F16, q, n, d, k, ldk, nk, scale, s, lds);
}

static void pv_block_bf16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                          const uint16_t *V, size_t ldv, int32_t nk, int32_t d, float *scratch)
{
    (void)scratch;
    pv_block_t(PA_DTYPE_BF16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

static void pv_block_f16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                         const uint16_t *V, size_t ldv, int32_t nk, int32_t d, float *scratch)
{
    (void)scratch;
    pv_block_t(PA_DTYPE_F16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

#if PA_DEC_X86

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

/* R rows (1 or 2) against 4 keys of dot_rows: lane u of acc[r][t] is
 * dot_rows's acc[u], added to as it is (a multiply, then an add: no fused
 * multiply-add, whose single rounding would differ), and the tail and the
 * final sum done as it does them. Keys past nk repeat the first and are not
 * stored. */
PA_AVX2 static inline __attribute__((always_inline)) void
dot_tile2(const int R, pa_dtype t, const float *q, int32_t d, const void *k, size_t ldk, int32_t nk,
          float scale, float *s, size_t lds)
{
    __m256 acc[2][4];
    size_t kt[4];
    int32_t c = 0;
    for (int u = 0; u < 4; u++)
        kt[u] = u < nk ? (size_t)u * ldk : 0;
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[r][u] = _mm256_setzero_ps();
    for (; c + 8 <= d; c += 8) {
        const __m256 k0 = ld8(t, k, kt[0] + (size_t)c), k1 = ld8(t, k, kt[1] + (size_t)c);
        const __m256 k2 = ld8(t, k, kt[2] + (size_t)c), k3 = ld8(t, k, kt[3] + (size_t)c);
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_loadu_ps(q + (size_t)r * d + c);
            acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(x, k0));
            acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(x, k1));
            acc[r][2] = _mm256_add_ps(acc[r][2], _mm256_mul_ps(x, k2));
            acc[r][3] = _mm256_add_ps(acc[r][3], _mm256_mul_ps(x, k3));
        }
    }
    if (R == 2 && nk == 4 && c == d) {
        /* The eight sums at once: transposed, vector e holds lane e of
         * each accumulator, so the same tree of adds runs in every lane. */
        const __m256 t0 = _mm256_unpacklo_ps(acc[0][0], acc[0][1]);
        const __m256 t1 = _mm256_unpackhi_ps(acc[0][0], acc[0][1]);
        const __m256 t2 = _mm256_unpacklo_ps(acc[0][2], acc[0][3]);
        const __m256 t3 = _mm256_unpackhi_ps(acc[0][2], acc[0][3]);
        const __m256 t4 = _mm256_unpacklo_ps(acc[1][0], acc[1][1]);
        const __m256 t5 = _mm256_unpackhi_ps(acc[1][0], acc[1][1]);
        const __m256 t6 = _mm256_unpacklo_ps(acc[1][2], acc[1][3]);
        const __m256 t7 = _mm256_unpackhi_ps(acc[1][2], acc[1][3]);
        const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
        const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
        const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
        const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
        /* Lane e of a[e]: row 0's four keys in lanes 0-3, row 1's in 4-7. */
        const __m256 e0 = _mm256_permute2f128_ps(u0, u4, 0x20);
        const __m256 e1 = _mm256_permute2f128_ps(u1, u5, 0x20);
        const __m256 e2 = _mm256_permute2f128_ps(u2, u6, 0x20);
        const __m256 e3 = _mm256_permute2f128_ps(u3, u7, 0x20);
        const __m256 e4 = _mm256_permute2f128_ps(u0, u4, 0x31);
        const __m256 e5 = _mm256_permute2f128_ps(u1, u5, 0x31);
        const __m256 e6 = _mm256_permute2f128_ps(u2, u6, 0x31);
        const __m256 e7 = _mm256_permute2f128_ps(u3, u7, 0x31);
        const __m256 sum =
            _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(e0, e4), _mm256_add_ps(e1, e5)),
                          _mm256_add_ps(_mm256_add_ps(e2, e6), _mm256_add_ps(e3, e7)));
        const __m256 sc = _mm256_mul_ps(_mm256_set1_ps(scale), sum);
        _mm_storeu_ps(s, _mm256_castps256_ps128(sc));
        _mm_storeu_ps(s + lds, _mm256_extractf128_ps(sc, 1));
        return;
    }
    for (int r = 0; r < R; r++)
        for (int32_t u = 0; u < nk; u++) {
            const float *x = q + (size_t)r * d;
            float a[8];
            _mm256_storeu_ps(a, acc[r][u]);
            for (int32_t e = c; e < d; e++)
                a[0] += x[e] * pa__dtype_get(t, k, kt[u] + (size_t)e);
            s[(size_t)r * lds + (size_t)u] =
                scale * (((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])));
        }
}

PA_AVX2 static inline __attribute__((always_inline)) void
dot_rows_avx2_t(pa_dtype t, const float *q, int32_t n, int32_t d, const void *k, size_t ldk,
                int32_t nk, float scale, float *s, size_t lds)
{
    int32_t r = 0;
    for (; r + 2 <= n; r += 2)
        dot_tile2(2, t, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
    if (r < n)
        dot_tile2(1, t, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
}

/* R rows (1 to 4) by 8W columns (W 1 or 2) from c of pv_block: each row's
 * columns stay in registers across the nk keys and take, key after key,
 * the same w * v additions as pv_block's (a zero weight skipped), so
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
            acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(wv, v0));
            if (W > 1)
                acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(wv, v1));
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
                    y[e] += w * pa__dtype_get(t, V, (size_t)j * ldv + (size_t)e);
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
                                       size_t ldk, int32_t nk, float scale, float *s, size_t lds,
                                       float *scratch)
{
    (void)scratch;
    dot_rows_avx2_t(PA_DTYPE_BF16, q, n, d, k, ldk, nk, scale, s, lds);
}

PA_AVX2 static void dot_rows_avx2_f16(const float *q, int32_t n, int32_t d, const uint16_t *k,
                                      size_t ldk, int32_t nk, float scale, float *s, size_t lds,
                                      float *scratch)
{
    (void)scratch;
    dot_rows_avx2_t(PA_DTYPE_F16, q, n, d, k, ldk, nk, scale, s, lds);
}

PA_AVX2 static void pv_block_avx2(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                  const float *V, size_t ldv, int32_t nk, int32_t d)
{
    pv_block_avx2_t(PA_DTYPE_F32, o, ldo, P, ldp, n, V, ldv, nk, d);
}

PA_AVX2 static void pv_block_avx2_bf16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                       const uint16_t *V, size_t ldv, int32_t nk, int32_t d,
                                       float *scratch)
{
    (void)scratch;
    pv_block_avx2_t(PA_DTYPE_BF16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

PA_AVX2 static void pv_block_avx2_f16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                      const uint16_t *V, size_t ldv, int32_t nk, int32_t d,
                                      float *scratch)
{
    (void)scratch;
    pv_block_avx2_t(PA_DTYPE_F16, o, ldo, P, ldp, n, V, ldv, nk, d);
}

/* ------------------------------------------------------------------------- */
/* AVX-512                                                                   */
/* ------------------------------------------------------------------------- */

/* The lanes of 16 that hold the `left` floats still to go (none when
 * left <= 0). */
static inline __mmask16 tail16(int32_t left)
{
    if (left >= 16)
        return (__mmask16)0xFFFF;
    return left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

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

/* R rows (1 to 4) against 4 keys: 4R accumulators (independent chains of
 * fused multiply-adds), each 16 floats of q and of k loaded once; keys past
 * nk repeat the first and are not stored. */
PA_AVX512 static inline __attribute__((always_inline)) void
dot_tile(const int R, const float *q, int32_t d, const float *k, size_t ldk, int32_t nk,
         float scale, float *s, size_t lds)
{
    const float *kt[4];
    __m512 acc[4][4];
    int32_t c = 0;
    const __m512i pick = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    for (int t = 0; t < 4; t++)
        kt[t] = k + (t < nk ? (size_t)t * ldk : 0);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            acc[r][t] = _mm512_setzero_ps();
    for (; c + 16 <= d; c += 16) {
        const __m512 k0 = _mm512_loadu_ps(kt[0] + c), k1 = _mm512_loadu_ps(kt[1] + c);
        const __m512 k2 = _mm512_loadu_ps(kt[2] + c), k3 = _mm512_loadu_ps(kt[3] + c);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 x = _mm512_loadu_ps(q + (size_t)r * d + c);
            acc[r][0] = _mm512_fmadd_ps(x, k0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, k1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(x, k2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(x, k3, acc[r][3]);
        }
    }
    if (c < d) {
        const __mmask16 m = tail16(d - c);
        const __m512 k0 = _mm512_maskz_loadu_ps(m, kt[0] + c),
                     k1 = _mm512_maskz_loadu_ps(m, kt[1] + c);
        const __m512 k2 = _mm512_maskz_loadu_ps(m, kt[2] + c),
                     k3 = _mm512_maskz_loadu_ps(m, kt[3] + c);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 x = _mm512_maskz_loadu_ps(m, q + (size_t)r * d + c);
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

PA_AVX512 static void dot_rows_avx512(const float *q, int32_t n, int32_t d, const float *k,
                                      size_t ldk, int32_t nk, float scale, float *s, size_t lds)
{
    int32_t r = 0;
    for (; r + 4 <= n; r += 4)
        dot_tile(4, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
    switch (n - r) {
    case 3:
        dot_tile(3, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
        break;
    case 2:
        dot_tile(2, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
        break;
    case 1:
        dot_tile(1, q + (size_t)r * d, d, k, ldk, nk, scale, s + (size_t)r * lds, lds);
        break;
    default:
        break;
    }
}

/* R rows (1 to 4) by 64 columns from c of pv_block, the sums in 4R
 * registers across all nk keys, then added to o once. */
PA_AVX512 static inline __attribute__((always_inline)) void
pv_tile(const int R, const bool full, float *o, size_t ldo, const float *P, size_t ldp,
        const float *V, size_t ldv, int32_t nk, int32_t c, int32_t d)
{
    const __mmask16 m0 = tail16(d - c), m1 = tail16(d - c - 16), m2 = tail16(d - c - 32),
                    m3 = tail16(d - c - 48);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[r][u] = _mm512_setzero_ps();
    for (int32_t j = 0; j < nk; j++) {
        const float *v = V + (size_t)j * ldv + c;
        const __m512 v0 = full ? _mm512_loadu_ps(v) : _mm512_maskz_loadu_ps(m0, v);
        const __m512 v1 = full ? _mm512_loadu_ps(v + 16) : _mm512_maskz_loadu_ps(m1, v + 16);
        const __m512 v2 = full ? _mm512_loadu_ps(v + 32) : _mm512_maskz_loadu_ps(m2, v + 32);
        const __m512 v3 = full ? _mm512_loadu_ps(v + 48) : _mm512_maskz_loadu_ps(m3, v + 48);
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
            pv_tile(4, full, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c,    \
                    d);                                                                            \
        if (n - r == 3)                                                                            \
            pv_tile(3, full, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c,    \
                    d);                                                                            \
        else if (n - r == 2)                                                                       \
            pv_tile(2, full, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c,    \
                    d);                                                                            \
        else if (n - r == 1)                                                                       \
            pv_tile(1, full, o + (size_t)r * ldo, ldo, P + (size_t)r * ldp, ldp, V, ldv, nk, c,    \
                    d);                                                                            \
    } while (0)

/* 64 columns at a time: unmasked loads while whole, masked on the tail. */
PA_AVX512 static void pv_block_avx512(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                      const float *V, size_t ldv, int32_t nk, int32_t d)
{
    int32_t c = 0;
    for (; c + 64 <= d; c += 64)
        PV_TILES(true);
    if (c < d)
        PV_TILES(false);
}

#undef PV_TILES

/* 16-bit keys and values for the AVX-512 kernels: the nk rows widened into
 * scratch [nk, d] (in L1), then the float kernel on them, which reads the
 * same floats the float call does. */
static void dot_rows_avx512_16(pa_dtype t, const float *q, int32_t n, int32_t d, const uint16_t *k,
                               size_t ldk, int32_t nk, float scale, float *s, size_t lds,
                               float *scratch)
{
    for (int32_t u = 0; u < nk; u++)
        pa__widen(t, k + (size_t)u * ldk, (size_t)d, scratch + (size_t)u * d);
    dot_rows_avx512(q, n, d, scratch, (size_t)d, nk, scale, s, lds);
}

static void dot_rows_avx512_bf16(const float *q, int32_t n, int32_t d, const uint16_t *k,
                                 size_t ldk, int32_t nk, float scale, float *s, size_t lds,
                                 float *scratch)
{
    dot_rows_avx512_16(PA_DTYPE_BF16, q, n, d, k, ldk, nk, scale, s, lds, scratch);
}

static void dot_rows_avx512_f16(const float *q, int32_t n, int32_t d, const uint16_t *k, size_t ldk,
                                int32_t nk, float scale, float *s, size_t lds, float *scratch)
{
    dot_rows_avx512_16(PA_DTYPE_F16, q, n, d, k, ldk, nk, scale, s, lds, scratch);
}

static void pv_block_avx512_16(pa_dtype t, float *o, size_t ldo, const float *P, size_t ldp,
                               int32_t n, const uint16_t *V, size_t ldv, int32_t nk, int32_t d,
                               float *scratch)
{
    for (int32_t j = 0; j < nk; j++)
        pa__widen(t, V + (size_t)j * ldv, (size_t)d, scratch + (size_t)j * d);
    pv_block_avx512(o, ldo, P, ldp, n, scratch, (size_t)d, nk, d);
}

static void pv_block_avx512_bf16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                 const uint16_t *V, size_t ldv, int32_t nk, int32_t d,
                                 float *scratch)
{
    pv_block_avx512_16(PA_DTYPE_BF16, o, ldo, P, ldp, n, V, ldv, nk, d, scratch);
}

static void pv_block_avx512_f16(float *o, size_t ldo, const float *P, size_t ldp, int32_t n,
                                const uint16_t *V, size_t ldv, int32_t nk, int32_t d,
                                float *scratch)
{
    pv_block_avx512_16(PA_DTYPE_F16, o, ldo, P, ldp, n, V, ldv, nk, d, scratch);
}

#endif

/* The row kernels of this run: chosen once per call. dot16 and pv16 read
 * keys and values of the call's 16-bit kv_dtype; scratch is b->dkw (dot16,
 * [4, D]) or b->dvw (pv16, [PA__VRUN, Dv]). */
typedef struct row_ops {
    void (*dot)(const float *, int32_t, int32_t, const float *, size_t, int32_t, float, float *,
                size_t);
    void (*pv)(float *, size_t, const float *, size_t, int32_t, const float *, size_t, int32_t,
               int32_t);
    void (*dot16)(const float *, int32_t, int32_t, const uint16_t *, size_t, int32_t, float,
                  float *, size_t, float *);
    void (*pv16)(float *, size_t, const float *, size_t, int32_t, const uint16_t *, size_t, int32_t,
                 int32_t, float *);
} row_ops;

static row_ops pick_ops(pa_dtype t)
{
    const bool f16 = t == PA_DTYPE_F16;
    row_ops ops = {dot_rows, pv_block, f16 ? dot_rows_f16 : dot_rows_bf16,
                   f16 ? pv_block_f16 : pv_block_bf16};
#if PA_DEC_X86
    if (pa__cpu_avx512()) {
        ops.dot = dot_rows_avx512;
        ops.pv = pv_block_avx512;
        ops.dot16 = f16 ? dot_rows_avx512_f16 : dot_rows_avx512_bf16;
        ops.pv16 = f16 ? pv_block_avx512_f16 : pv_block_avx512_bf16;
    } else if (pa__cpu_avx2()) {
        ops.dot = dot_rows_avx2;
        ops.pv = pv_block_avx2;
        ops.dot16 = f16 ? dot_rows_avx2_f16 : dot_rows_avx2_bf16;
        ops.pv16 = f16 ? pv_block_avx2_f16 : pv_block_avx2_bf16;
    }
#endif
    return ops;
}

/* ------------------------------------------------------------------------- */
/* The kernel                                                                */
/* ------------------------------------------------------------------------- */

/* Asks for n bytes from x into L2, a cache line at a time. */
static inline void prefetch(const void *x, size_t n)
{
#if defined(__GNUC__)
    for (size_t i = 0; i < n; i += 64)
        __builtin_prefetch((const char *)x + i, 0, 2);
#else
    (void)x;
    (void)n;
#endif
}

void pa__decode_keys(const pa__plan *p, const buffers *b, int32_t *j0, int32_t *j1)
{
    int32_t qmin = INT32_MAX, qmax = INT32_MIN;
    for (int32_t i = 0; i < p->Lq; i++) {
        qmin = pa__min_i32(qmin, b->qpos[i]);
        qmax = pa__max_i32(qmax, b->qpos[i]);
    }
    pa__visible_range(p, qmin, qmax, b->kpos, b->kpos_sorted, 0, p->Lk, j0, j1);
}

/* Queries of heads [h0, h1) as attention sees them, into b->dq. */
static void prep_queries(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0,
                         int32_t h1)
{
    const row_norm qn = pa__row_norm(p, b, false);
    for (int32_t h = h0; h < h1; h++) {
        float *dst = b->dq + (size_t)h * p->Lq * p->D;
        const float *src = io->Q + (size_t)h * p->D;
        if (p->rope || qn.on || p->q_scale)
            pa__prep_rows(p, &qn, h, pa__rope_tab(p, b->cos_q, h, p->Lq),
                          pa__rope_tab(p, b->sin_q, h, p->Lq), b->q_scale, src, io->ldq, p->Lq, dst,
                          io->q_rot ? io->q_rot + (size_t)h * p->D : NULL, io->ldq);
        else
            for (int32_t i = 0; i < p->Lq; i++)
                memcpy(dst + (size_t)i * p->D, src + (size_t)i * io->ldq,
                       (size_t)p->D * sizeof(float));
    }
}

/* Keys [j, j + n) of kv head g (n <= 4, within a page) as float rows:
 * *src with row stride *ld, in place, or widened into b->dkw when 16-bit. */
static void key_rows(const pa__plan *p, const buffers *b, const head_io *io, int32_t g, int32_t j,
                     int32_t n, const float **src, int *ld)
{
    if (io->kvt == PA_DTYPE_F32) {
        *src = pa__krow(io, j) + (size_t)g * p->D;
        *ld = io->ldk;
        return;
    }
    for (int32_t t = 0; t < n; t++)
        pa__widen(io->kvt, (const uint16_t *)pa__krow_raw(io, j + t) + (size_t)g * p->D,
                  (size_t)p->D, b->dkw + (size_t)t * p->D);
    *src = b->dkw;
    *ld = p->D;
}

/* The returned results of keys [f0, f1) that rows of heads [h0, h1) own:
 * their logits start at -inf (weights hold logits until the finish), so
 * that keys the kernel skips read as masked; and with k rotated or
 * normalised here, the k_rot rows of the kv heads whose first query head is
 * in [h0, h1). */
static void own_results(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0,
                        int32_t h1, int32_t f0, int32_t f1, bool prep_k)
{
    float *store = io->logits != NULL ? io->logits : io->weights;
    const size_t half = (size_t)p->r / 2;
    if (store != NULL)
        for (int32_t r = h0 * p->Lq; r < h1 * p->Lq; r++)
            pa__row_fill(store + (size_t)r * p->Lk + f0, f1 - f0, -INFINITY);
    if (io->k_rot == NULL || !prep_k)
        return;
    for (int32_t g = (h0 + p->group - 1) / p->group; g * p->group < h1; g++) {
        const row_norm kn = pa__row_norm(p, b, true);
        for (int32_t j = f0; j < f1;) {
            const int32_t n = pa__krun(io, j, pa__min_i32(4, f1 - j));
            row_norm nm = kn;
            if (nm.inv != NULL)
                nm.inv += j;
            const float *src;
            int ld;
            key_rows(p, b, io, g, j, n, &src, &ld);
            pa__prep_rows(
                p, &nm, g, p->rope ? pa__rope_tab(p, b->cos_k, g, p->Lk) + (size_t)j * half : NULL,
                p->rope ? pa__rope_tab(p, b->sin_k, g, p->Lk) + (size_t)j * half : NULL, NULL, src,
                ld, n, b->dk, io->k_rot + (size_t)j * io->ldk + (size_t)g * p->D, io->ldk);
            j += n;
        }
    }
}

void pa__decode(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0, int32_t h1,
                int32_t j0, int32_t j1, int32_t f0, int32_t f1, bool sink, float *state)
{
    float *store = io->logits != NULL ? io->logits : io->weights;
    const pa_attention *a = p->a;
    const row_ops ops = pick_ops(io->kvt);
    const bool kv16 = io->kvt != PA_DTYPE_F32;
    const size_t es = pa__dtype_size(io->kvt);
    const int32_t Lq = p->Lq, D = p->D, Dv = p->Dv, G = p->group;
    const size_t half = (size_t)p->r / 2, st = PA__STATE(Dv);
    const int32_t g0 = h0 / G, g1 = (h1 + G - 1) / G; /* kv heads of [h0, h1) */
    const row_norm kn = pa__row_norm(p, b, true);
    const bool prep_k = (p->rope && !a->k_prerotated) || kn.on;
    const int32_t r0 = h0 * Lq, r1 = h1 * Lq;
    const bool stats = pa__want_stats(io);
    int32_t qmin = INT32_MAX, qmax = INT32_MIN;

    for (int32_t i = 0; i < Lq; i++) {
        qmin = pa__min_i32(qmin, b->qpos[i]);
        qmax = pa__max_i32(qmax, b->qpos[i]);
    }
    prep_queries(p, b, io, h0, h1);
    own_results(p, b, io, h0, h1, f0, f1, prep_k);
    for (int32_t r = r0; r < r1; r++) {
        float *s = state + (size_t)r * st;
        /* A sink is a key with logit s_h and no value (attention_prefill.c). */
        s[0] = sink && a->sinks != NULL ? a->sinks[r / Lq] : -INFINITY;
        s[1] = sink && a->sinks != NULL ? 1.0f : 0.0f;
        /* over the keys only */
        s[PA__STATE_A] = s[PA__STATE_B] = s[PA__STATE_K] = s[PA__STATE_F] = 0.0f;
        memset(s + PA__STATE_O, 0, (size_t)Dv * sizeof(float));
    }

    for (int32_t t0 = j0; t0 < j1; t0 += DEC_BK) {
        int32_t lo, hi, nk;
        pa__visible_range(p, qmin, qmax, b->kpos, b->kpos_sorted, t0, pa__min_i32(DEC_BK, j1 - t0),
                          &lo, &hi);
        nk = hi - lo;
        if (nk == 0)
            continue;
        /* Logits [H*Lq, nk]: four keys at a time, in memory order (and
         * within a page: each key's logit is its own sum either way). */
        for (int32_t j = lo, nj; j < hi; j += nj) {
            nj = pa__krun(io, j, pa__min_i32(4, hi - j));
            for (int32_t g = g0; g < g1; g++) {
                const int32_t hs = pa__max_i32(h0, g * G), he = pa__min_i32(h1, (g + 1) * G);
                const float *kr;
                size_t ldk;
                if (!prep_k && kv16) { /* read in place, widened in the row kernel */
                    ops.dot16(b->dq + (size_t)hs * Lq * D, (he - hs) * Lq, D,
                              (const uint16_t *)pa__krow_raw(io, j) + (size_t)g * D,
                              (size_t)io->ldk, nj, p->scale,
                              b->dS + (size_t)hs * Lq * nk + (j - lo), (size_t)nk, b->dkw);
                    continue;
                }
                if (prep_k) {
                    int ld;
                    key_rows(p, b, io, g, j, nj, &kr, &ld);
                    ldk = (size_t)ld;
                } else {
                    kr = pa__krow(io, j) + (size_t)g * D;
                    ldk = (size_t)io->ldk;
                }
                if (prep_k) {
                    for (int32_t t = 0; t < nj; t++) {
                        row_norm nm = kn;
                        if (nm.inv != NULL)
                            nm.inv += j + t;
                        pa__prep_rows(
                            p, &nm, g,
                            p->rope ? pa__rope_tab(p, b->cos_k, g, p->Lk) + (size_t)(j + t) * half
                                    : NULL,
                            p->rope ? pa__rope_tab(p, b->sin_k, g, p->Lk) + (size_t)(j + t) * half
                                    : NULL,
                            NULL, kr + (size_t)t * ldk, (int)ldk, 1, b->dk + (size_t)t * D, NULL,
                            0);
                    }
                    kr = b->dk;
                    ldk = (size_t)D;
                }
                ops.dot(b->dq + (size_t)hs * Lq * D, (he - hs) * Lq, D, kr, ldk, nj, p->scale,
                        b->dS + (size_t)hs * Lq * nk + (j - lo), (size_t)nk);
            }
            /* These keys' values, for the pass below that reads them a kv
             * head at a time (rows Hkv*Dv floats apart, which the hardware
             * prefetchers do not follow). */
            for (int32_t t = 0; t < nj; t++)
                prefetch((const char *)pa__vrow_raw(io, j + t) + (size_t)g0 * Dv * es,
                         (size_t)(g1 - g0) * Dv * es);
        }
        /* Biases, masks and the online softmax, row by row. */
        for (int32_t h = h0; h < h1; h++) {
            float *Sh = b->dS + (size_t)h * Lq * nk;
            pa__bias_and_mask(p, b, Sh, h, 0, Lq, lo, nk);
            if (store != NULL)
                for (int32_t i = 0; i < Lq; i++)
                    memcpy(store + (size_t)(h * Lq + i) * p->Lk + lo, Sh + (size_t)i * nk,
                           (size_t)nk * sizeof(float));
            for (int32_t i = 0; i < Lq; i++) {
                float *row = Sh + (size_t)i * nk, *s = state + (size_t)(h * Lq + i) * st;
                const float tmax = pa__row_max(row, nk);
                float mnew, alpha;
                if (tmax == -INFINITY) {
                    memset(row, 0, (size_t)nk * sizeof(float));
                    continue;
                }
                mnew = tmax > s[0] ? tmax : s[0];
                alpha = s[0] == -INFINITY ? 0.0f : expf(s[0] - mnew);
                if (stats) { /* as in attention_prefill.c */
                    float spl, spd, spf;
                    const float e = pa__row_exp_sum_stats(row, nk, mnew, b->kpos + lo, b->qpos[i],
                                                          io->far, &spl, &spd, &spf);
                    float *sa = s + PA__STATE_A, *sb = s + PA__STATE_B, *sk = s + PA__STATE_K;
                    *sa = (*sk > 0.0f ? alpha * (*sa + (s[0] - mnew) * *sk) : 0.0f) + spl;
                    *sb = *sb * alpha + spd;
                    s[PA__STATE_F] = s[PA__STATE_F] * alpha + spf;
                    *sk = *sk * alpha + e;
                    s[1] = s[1] * alpha + e;
                } else {
                    s[1] = s[1] * alpha + pa__row_exp_sum(row, nk, mnew);
                }
                s[0] = mnew;
                if (alpha != 1.0f)
                    pa__row_scale(s + PA__STATE_O, s + PA__STATE_O, Dv, alpha);
            }
        }
        /* Values: each kv head's block (in L2, prefetched above) into
         * its rows, in runs of PA__VRUN keys at multiples of it, which a
         * page never splits: paged and contiguous calls sum alike. */
        for (int32_t g = g0; g < g1; g++) {
            const int32_t hs = pa__max_i32(h0, g * G), he = pa__min_i32(h1, (g + 1) * G);
            for (int32_t s0 = lo, s1; s0 < hi; s0 = s1) {
                s1 = pa__min_i32(hi, (s0 / PA__VRUN + 1) * PA__VRUN);
                if (kv16)
                    ops.pv16(state + (size_t)hs * Lq * st + PA__STATE_O, st,
                             b->dS + (size_t)hs * Lq * nk + (s0 - lo), (size_t)nk, (he - hs) * Lq,
                             (const uint16_t *)pa__vrow_raw(io, s0) + (size_t)g * Dv,
                             (size_t)io->ldv, s1 - s0, Dv, b->dvw);
                else
                    ops.pv(state + (size_t)hs * Lq * st + PA__STATE_O, st,
                           b->dS + (size_t)hs * Lq * nk + (s0 - lo), (size_t)nk, (he - hs) * Lq,
                           pa__vrow(io, s0) + (size_t)g * Dv, (size_t)io->ldv, s1 - s0, Dv);
            }
        }
    }
}

void pa__decode_finish(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0,
                       int32_t h1, const float *states, int32_t nparts)
{
    const int32_t Lq = p->Lq, Dv = p->Dv;
    const size_t st = PA__STATE(Dv), stride = (size_t)p->H * Lq * st;
    for (int32_t r = h0 * Lq; r < h1 * Lq; r++) {
        const int32_t h = r / Lq, i = r % Lq;
        float *dst = io->out + (size_t)i * p->H * Dv + (size_t)h * Dv;
        float m = -INFINITY, l = 0.0f, sa = 0.0f, sb = 0.0f, sk = 0.0f, sf = 0.0f;
        for (int32_t k = 0; k < nparts; k++) {
            const float mk = states[k * stride + (size_t)r * st];
            m = mk > m ? mk : m;
        }
        /* Finite inputs whose products overflow give +inf or NaN logits;
         * the running max or sum then stops being finite. The parts'
         * statistics merge as their sums do, each rebased to the common max. */
        for (int32_t k = 0; k < nparts; k++) {
            const float *s = states + k * stride + (size_t)r * st;
            float w;
            if (s[0] == -INFINITY)
                continue;
            w = m == INFINITY ? 1.0f : expf(s[0] - m);
            l += s[1] * w;
            if (s[PA__STATE_K] > 0.0f) {
                sa += w * (s[PA__STATE_A] + (s[0] - m) * s[PA__STATE_K]);
                sb += w * s[PA__STATE_B];
                sf += w * s[PA__STATE_F];
                sk += w * s[PA__STATE_K];
            }
        }
        if (!isfinite(l) || m == INFINITY)
            *b->overflow = true;
        if (pa__want_stats(io))
            pa__row_stats(l, sk, sa, sb, sf, io, (size_t)r);
        memset(dst, 0, (size_t)Dv * sizeof(float));
        if (io->weights != NULL) {
            /* The row's logits (in weights, or copied from logits) into
             * its softmax, as the tiled kernel finishes a row. */
            float *w = io->weights + (size_t)r * p->Lk;
            if (l > 0.0f) {
                if (io->logits != NULL)
                    memcpy(w, io->logits + (size_t)r * p->Lk, (size_t)p->Lk * sizeof(float));
                pa__row_exp_scale(w, p->Lk, m, 1.0f / l);
            } else {
                memset(w, 0, (size_t)p->Lk * sizeof(float));
            }
        }
        if (!(l > 0.0f))
            continue; /* every key hidden: a zero row, as the tiled kernel gives */
        for (int32_t k = 0; k < nparts; k++) {
            const float *s = states + k * stride + (size_t)r * st;
            float w;
            if (s[0] == -INFINITY)
                continue;
            w = (m == INFINITY ? 1.0f : expf(s[0] - m)) / l;
            for (int32_t d = 0; d < Dv; d++)
                dst[d] += w * s[PA__STATE_O + d];
        }
        if (!pa__row_finite(dst, (size_t)Dv))
            *b->overflow_out = true;
    }
}
