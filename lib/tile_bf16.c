/* tile_bf16.c - the tiles' two products in bf16 (tile.h): q.k and P.v as
 * bf16 dot products accumulated in float32, for compute_dtype bf16.
 *
 * The definition is AVX-512 BF16's vdpbf16ps (Intel SDM: "FP32 FMA with
 * DAZ in, FTZ out and RNE rounding"): per float32 lane and pair of bf16
 * elements, acc += a[2i+1] * b[2i+1], then acc += a[2i] * b[2i]. Three
 * paths compute it:
 *   - vdpbf16ps itself where the CPU has AVX-512 BF16: 32 products an
 *     instruction, twice float32's FMA rate at half the bytes;
 *   - AVX2 + FMA: each pair split into its high and low halves (a mask and
 *     a shift give two float32 vectors) and two fused multiply-adds, high
 *     first;
 *   - plain C with fmaf in the same order.
 * A bf16 product is exact in float32 (8-bit significands make 16 bits),
 * so each step rounds once, as the instruction does; the kernels run with
 * flush-to-zero (pa__fp_enter) and pa__bf16_round leaves no subnormal
 * operand, so the three agree bit for bit (tests/lib/test_bf16.c).
 *
 * Operands are packed in pairs (tile.h): the left one row by row, the
 * right one so that a vector load takes 8 or 16 output columns' pairs.
 */
#include "tile.h"

#include "cpu.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define PA_BF16_X86 1
#include <immintrin.h>
#endif

uint16_t pa__bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7F800000u) == 0) /* zero or subnormal: a zero of its sign */
        return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7F800000u) == 0x7F800000u) /* inf, NaN (kept quiet) */
        return (uint16_t)((u >> 16) | ((u & 0x007FFFFFu) != 0 ? 0x0040u : 0));
    u += 0x7FFFu + ((u >> 16) & 1u); /* to nearest, ties to even; may carry into inf */
    return (uint16_t)(u >> 16);
}

static inline uint32_t pair(float lo, float hi)
{
    return (uint32_t)pa__bf16_round(lo) | (uint32_t)pa__bf16_round(hi) << 16;
}

void pa__bf16_pack_rows(int32_t m, int32_t kdim, const float *src, int lds, uint32_t *dst, int ldd)
{
    for (int32_t i = 0; i < m; i++) {
        const float *x = src + (size_t)i * (size_t)lds;
        uint32_t *y = dst + (size_t)i * (size_t)ldd;
        int32_t d = 0;
        for (; d + 1 < kdim; d += 2)
            y[d / 2] = pair(x[d], x[d + 1]);
        if (d < kdim)
            y[d / 2] = pair(x[d], 0.0f);
    }
}

void pa__bf16_pack_kt(int32_t n, int32_t d, const float *k, int ldk, uint32_t *kt2, size_t ld)
{
    for (int32_t j0 = 0; j0 < n; j0 += 16) { /* as pa__tile_pack_kt: 16 keys at a time */
        const int32_t jn = n - j0 < 16 ? n - j0 : 16;
        for (int32_t c = 0; c < d; c += 2) {
            uint32_t *dst = kt2 + (size_t)(c / 2) * ld + (size_t)j0;
            for (int32_t j = 0; j < jn; j++) {
                const float *row = k + (size_t)(j0 + j) * (size_t)ldk;
                dst[j] = pair(row[c], c + 1 < d ? row[c + 1] : 0.0f);
            }
        }
    }
}

void pa__bf16_pack_v(int32_t n, int32_t dv, const float *v, int ldv, uint32_t *v2, int ldv2)
{
    for (int32_t t = 0; 2 * t < n; t++) {
        const float *r0 = v + (size_t)(2 * t) * (size_t)ldv;
        const float *r1 = 2 * t + 1 < n ? r0 + ldv : NULL;
        uint32_t *dst = v2 + (size_t)t * (size_t)ldv2;
        for (int32_t c = 0; c < dv; c++)
            dst[c] = pair(r0[c], r1 != NULL ? r1[c] : 0.0f);
    }
}

/* ------------------------------------------------------------------------- */
/* Plain C                                                                   */
/* ------------------------------------------------------------------------- */

static inline float hi_f(uint32_t w)
{
    const uint32_t u = w & 0xFFFF0000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float lo_f(uint32_t w)
{
    const uint32_t u = w << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One element's sum over np pairs from acc: a[p] (stride 1) against b[p]
 * (stride sb). */
static inline float dot_pairs(float acc, int32_t np, const uint32_t *a, const uint32_t *b,
                              size_t sb)
{
    for (int32_t p = 0; p < np; p++) {
        const uint32_t x = a[p], y = b[(size_t)p * sb];
        acc = fmaf(hi_f(x), hi_f(y), acc);
        acc = fmaf(lo_f(x), lo_f(y), acc);
    }
    return acc;
}

/* Columns [c0, n) of the products, element by element. */
static void qk_portable(int32_t m, int32_t c0, int32_t n, int32_t np, float alpha,
                        const uint32_t *A2, int lda2, const uint32_t *Bt2, size_t ldb, float *S,
                        int lds)
{
    for (int32_t i = 0; i < m; i++)
        for (int32_t j = c0; j < n; j++)
            S[(size_t)i * (size_t)lds + (size_t)j] =
                dot_pairs(0.0f, np, A2 + (size_t)i * (size_t)lda2, Bt2 + (size_t)j, ldb) * alpha;
}

static void pv_portable(int32_t m, int32_t c0, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                        const uint32_t *V2, int ldv2, float *O, int ldo)
{
    for (int32_t i = 0; i < m; i++)
        for (int32_t c = c0; c < n; c++) {
            float *o = O + (size_t)i * (size_t)ldo + (size_t)c;
            *o = dot_pairs(*o, np, P2 + (size_t)i * (size_t)ldp2, V2 + (size_t)c, (size_t)ldv2);
        }
}

#if PA_BF16_X86

#define PA_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------- */
/* AVX2 + FMA                                                                */
/* ------------------------------------------------------------------------- */

#define PA_AVX2 __attribute__((target("avx2,fma")))

/* R rows x 16 columns from j: the pairs' high halves, then the low. */
PA_AVX2 PA_INLINE void qk2_block(const int R, int32_t j, int32_t np, float alpha,
                                 const uint32_t *A2, int lda2, const uint32_t *Bt2, size_t ldb,
                                 float *S, int lds)
{
    const __m256i mhi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int32_t p = 0; p < np; p++) {
        const uint32_t *b = Bt2 + (size_t)p * ldb + (size_t)j;
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)b);
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 8));
        const __m256 h0 = _mm256_castsi256_ps(_mm256_and_si256(b0, mhi));
        const __m256 h1 = _mm256_castsi256_ps(_mm256_and_si256(b1, mhi));
        const __m256 l0 = _mm256_castsi256_ps(_mm256_slli_epi32(b0, 16));
        const __m256 l1 = _mm256_castsi256_ps(_mm256_slli_epi32(b1, 16));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint32_t w = A2[(size_t)r * (size_t)lda2 + (size_t)p];
            const __m256 ah = _mm256_set1_ps(hi_f(w)), al = _mm256_set1_ps(lo_f(w));
            acc[r][0] = _mm256_fmadd_ps(ah, h0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ah, h1, acc[r][1]);
            acc[r][0] = _mm256_fmadd_ps(al, l0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(al, l1, acc[r][1]);
        }
    }
    {
        const __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            float *dst = S + (size_t)r * (size_t)lds + (size_t)j;
            _mm256_storeu_ps(dst, _mm256_mul_ps(acc[r][0], va));
            _mm256_storeu_ps(dst + 8, _mm256_mul_ps(acc[r][1], va));
        }
    }
}

PA_AVX2 PA_INLINE void qk2_rows(const int R, int32_t n, int32_t np, float alpha, const uint32_t *A2,
                                int lda2, const uint32_t *Bt2, size_t ldb, float *S, int lds)
{
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        qk2_block(R, j, np, alpha, A2, lda2, Bt2, ldb, S, lds);
    qk_portable(R, j, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
}

PA_AVX2 static void qk_avx2(int32_t m, int32_t n, int32_t np, float alpha, const uint32_t *A2,
                            int lda2, const uint32_t *Bt2, size_t ldb, float *S, int lds)
{
    int32_t i = 0;
    for (; i + 4 <= m; i += 4)
        qk2_rows(4, n, np, alpha, A2 + (size_t)i * lda2, lda2, Bt2, ldb, S + (size_t)i * lds, lds);
    switch (m - i) {
    case 3:
        qk2_rows(3, n, np, alpha, A2 + (size_t)i * lda2, lda2, Bt2, ldb, S + (size_t)i * lds, lds);
        break;
    case 2:
        qk2_rows(2, n, np, alpha, A2 + (size_t)i * lda2, lda2, Bt2, ldb, S + (size_t)i * lds, lds);
        break;
    case 1:
        qk2_rows(1, n, np, alpha, A2 + (size_t)i * lda2, lda2, Bt2, ldb, S + (size_t)i * lds, lds);
        break;
    default:
        break;
    }
}

PA_AVX2 PA_INLINE void pv2_block(const int R, int32_t c, int32_t np, const uint32_t *P2, int ldp2,
                                 const uint32_t *V2, int ldv2, float *O, int ldo)
{
    const __m256i mhi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const float *o = O + (size_t)r * (size_t)ldo + (size_t)c;
        acc[r][0] = _mm256_loadu_ps(o);
        acc[r][1] = _mm256_loadu_ps(o + 8);
    }
    for (int32_t t = 0; t < np; t++) {
        const uint32_t *b = V2 + (size_t)t * (size_t)ldv2 + (size_t)c;
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)b);
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 8));
        const __m256 h0 = _mm256_castsi256_ps(_mm256_and_si256(b0, mhi));
        const __m256 h1 = _mm256_castsi256_ps(_mm256_and_si256(b1, mhi));
        const __m256 l0 = _mm256_castsi256_ps(_mm256_slli_epi32(b0, 16));
        const __m256 l1 = _mm256_castsi256_ps(_mm256_slli_epi32(b1, 16));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint32_t w = P2[(size_t)r * (size_t)ldp2 + (size_t)t];
            const __m256 ah = _mm256_set1_ps(hi_f(w)), al = _mm256_set1_ps(lo_f(w));
            acc[r][0] = _mm256_fmadd_ps(ah, h0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ah, h1, acc[r][1]);
            acc[r][0] = _mm256_fmadd_ps(al, l0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(al, l1, acc[r][1]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float *o = O + (size_t)r * (size_t)ldo + (size_t)c;
        _mm256_storeu_ps(o, acc[r][0]);
        _mm256_storeu_ps(o + 8, acc[r][1]);
    }
}

PA_AVX2 PA_INLINE void pv2_rows(const int R, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                                const uint32_t *V2, int ldv2, float *O, int ldo)
{
    int32_t c = 0;
    for (; c + 16 <= n; c += 16)
        pv2_block(R, c, np, P2, ldp2, V2, ldv2, O, ldo);
    pv_portable(R, c, n, np, P2, ldp2, V2, ldv2, O, ldo);
}

PA_AVX2 static void pv_avx2(int32_t m, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                            const uint32_t *V2, int ldv2, float *O, int ldo)
{
    int32_t i = 0;
    for (; i + 4 <= m; i += 4)
        pv2_rows(4, n, np, P2 + (size_t)i * ldp2, ldp2, V2, ldv2, O + (size_t)i * ldo, ldo);
    switch (m - i) {
    case 3:
        pv2_rows(3, n, np, P2 + (size_t)i * ldp2, ldp2, V2, ldv2, O + (size_t)i * ldo, ldo);
        break;
    case 2:
        pv2_rows(2, n, np, P2 + (size_t)i * ldp2, ldp2, V2, ldv2, O + (size_t)i * ldo, ldo);
        break;
    case 1:
        pv2_rows(1, n, np, P2 + (size_t)i * ldp2, ldp2, V2, ldv2, O + (size_t)i * ldo, ldo);
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------- */
/* AVX-512 BF16                                                              */
/* ------------------------------------------------------------------------- */

#define PA_BF16 __attribute__((target("avx512f,avx512bf16")))

/* The lanes of a 16-float vector that hold columns c .. n-1 (c < n or none). */
PA_BF16 PA_INLINE __mmask16 lanes16(int32_t c, int32_t n)
{
    const int32_t left = n - c;
    if (left >= 16)
        return (__mmask16)0xFFFF;
    return left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* R rows x NV*16 columns from j, as tile.c's qk_block with one vdpbf16ps
 * per pair where that has one FMA per element. */
PA_BF16 PA_INLINE void qk16_block(const int R, const int NV, int32_t j, int32_t n, int32_t np,
                                  float alpha, const uint32_t *A2, int lda2, const uint32_t *Bt2,
                                  size_t ldb, float *S, int lds)
{
    __m512 acc[6][4];
    __mmask16 mk[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        mk[v] = lanes16(j + 16 * v, n);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int32_t p = 0; p < np; p++) {
        const uint32_t *b = Bt2 + (size_t)p * ldb + (size_t)j;
        __m512bh bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = (__m512bh)_mm512_maskz_loadu_epi32(mk[v], b + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512bh a =
                (__m512bh)_mm512_set1_epi32((int)A2[(size_t)r * (size_t)lda2 + (size_t)p]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, bv[v]);
        }
    }
    {
        const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                _mm512_mask_storeu_ps(S + (size_t)r * (size_t)lds + (size_t)j + 16 * v, mk[v],
                                      _mm512_mul_ps(acc[r][v], va));
    }
}

PA_BF16 PA_INLINE void qk16_rows(const int R, int32_t n, int32_t np, float alpha,
                                 const uint32_t *A2, int lda2, const uint32_t *Bt2, size_t ldb,
                                 float *S, int lds)
{
    int32_t j = 0;
    for (; j + 64 <= n; j += 64)
        qk16_block(R, 4, j, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
    switch ((n - j + 15) / 16) {
    case 3:
        qk16_block(R, 3, j, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
        break;
    case 2:
        qk16_block(R, 2, j, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
        break;
    case 1:
        qk16_block(R, 1, j, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
        break;
    default:
        break;
    }
}

PA_BF16 static void qk_avx512_bf16(int32_t m, int32_t n, int32_t np, float alpha,
                                   const uint32_t *A2, int lda2, const uint32_t *Bt2, size_t ldb,
                                   float *S, int lds)
{
    int32_t i = 0;
    for (; i + 6 <= m; i += 6)
        qk16_rows(6, n, np, alpha, A2 + (size_t)i * lda2, lda2, Bt2, ldb, S + (size_t)i * lds, lds);
#define QK16_TAIL(r)                                                                               \
    case r:                                                                                        \
        qk16_rows(r, n, np, alpha, A2 + (size_t)i * lda2, lda2, Bt2, ldb, S + (size_t)i * lds,     \
                  lds);                                                                            \
        break
    switch (m - i) {
        QK16_TAIL(1);
        QK16_TAIL(2);
        QK16_TAIL(3);
        QK16_TAIL(4);
        QK16_TAIL(5);
    default:
        break;
    }
#undef QK16_TAIL
}

PA_BF16 PA_INLINE void pv16_block(const int R, const int NV, int32_t c, int32_t n, int32_t np,
                                  const uint32_t *P2, int ldp2, const uint32_t *V2, int ldv2,
                                  float *O, int ldo)
{
    __m512 acc[6][4];
    __mmask16 mk[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        mk[v] = lanes16(c + 16 * v, n);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] =
                _mm512_maskz_loadu_ps(mk[v], O + (size_t)r * (size_t)ldo + (size_t)c + 16 * v);
    for (int32_t t = 0; t < np; t++) {
        const uint32_t *b = V2 + (size_t)t * (size_t)ldv2 + (size_t)c;
        __m512bh bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = (__m512bh)_mm512_maskz_loadu_epi32(mk[v], b + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512bh a =
                (__m512bh)_mm512_set1_epi32((int)P2[(size_t)r * (size_t)ldp2 + (size_t)t]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, bv[v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(O + (size_t)r * (size_t)ldo + (size_t)c + 16 * v, mk[v],
                                  acc[r][v]);
}

PA_BF16 PA_INLINE void pv16_rows(const int R, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                                 const uint32_t *V2, int ldv2, float *O, int ldo)
{
    int32_t c = 0;
    for (; c + 64 <= n; c += 64)
        pv16_block(R, 4, c, n, np, P2, ldp2, V2, ldv2, O, ldo);
    switch ((n - c + 15) / 16) {
    case 3:
        pv16_block(R, 3, c, n, np, P2, ldp2, V2, ldv2, O, ldo);
        break;
    case 2:
        pv16_block(R, 2, c, n, np, P2, ldp2, V2, ldv2, O, ldo);
        break;
    case 1:
        pv16_block(R, 1, c, n, np, P2, ldp2, V2, ldv2, O, ldo);
        break;
    default:
        break;
    }
}

PA_BF16 static void pv_avx512_bf16(int32_t m, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                                   const uint32_t *V2, int ldv2, float *O, int ldo)
{
    int32_t i = 0;
    for (; i + 6 <= m; i += 6)
        pv16_rows(6, n, np, P2 + (size_t)i * ldp2, ldp2, V2, ldv2, O + (size_t)i * ldo, ldo);
#define PV16_TAIL(r)                                                                               \
    case r:                                                                                        \
        pv16_rows(r, n, np, P2 + (size_t)i * ldp2, ldp2, V2, ldv2, O + (size_t)i * ldo, ldo);      \
        break
    switch (m - i) {
        PV16_TAIL(1);
        PV16_TAIL(2);
        PV16_TAIL(3);
        PV16_TAIL(4);
        PV16_TAIL(5);
    default:
        break;
    }
#undef PV16_TAIL
}

#endif /* PA_BF16_X86 */

/* ------------------------------------------------------------------------- */
/* Dispatch                                                                  */
/* ------------------------------------------------------------------------- */

enum path { PATH_PORTABLE, PATH_AVX2, PATH_AVX512_BF16 };

static enum path chosen(void)
{
    if (pa__cpu_avx512_bf16())
        return PATH_AVX512_BF16;
    if (pa__cpu_avx2_fma())
        return PATH_AVX2;
    return PATH_PORTABLE;
}

const char *pa__bf16_path(void)
{
    static const char *const names[] = {"portable", "avx2", "avx512_bf16"};
    return names[chosen()];
}

/* The path a name asks for, when this CPU runs it. */
static bool by_name(const char *name, enum path *out)
{
    if (strcmp(name, "portable") == 0)
        *out = PATH_PORTABLE;
    else if (strcmp(name, "avx2") == 0 && pa__cpu_avx2_fma())
        *out = PATH_AVX2;
    else if (strcmp(name, "avx512_bf16") == 0 && pa__cpu_avx512_bf16())
        *out = PATH_AVX512_BF16;
    else
        return false;
    return true;
}

static void qk_run(enum path w, int32_t m, int32_t n, int32_t np, float alpha, const uint32_t *A2,
                   int lda2, const uint32_t *Bt2, size_t ldb, float *S, int lds)
{
    if (m <= 0 || n <= 0)
        return;
#if PA_BF16_X86
    if (w == PATH_AVX512_BF16) {
        qk_avx512_bf16(m, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
        return;
    }
    if (w == PATH_AVX2) {
        qk_avx2(m, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
        return;
    }
#endif
    (void)w;
    qk_portable(m, 0, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
}

static void pv_run(enum path w, int32_t m, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                   const uint32_t *V2, int ldv2, float *O, int ldo)
{
    if (m <= 0 || n <= 0 || np <= 0)
        return;
#if PA_BF16_X86
    if (w == PATH_AVX512_BF16) {
        pv_avx512_bf16(m, n, np, P2, ldp2, V2, ldv2, O, ldo);
        return;
    }
    if (w == PATH_AVX2) {
        pv_avx2(m, n, np, P2, ldp2, V2, ldv2, O, ldo);
        return;
    }
#endif
    (void)w;
    pv_portable(m, 0, n, np, P2, ldp2, V2, ldv2, O, ldo);
}

void pa__tile_qk_bf16(int32_t m, int32_t n, int32_t np, float alpha, const uint32_t *A2, int lda2,
                      const uint32_t *Bt2, size_t ldb, float *S, int lds)
{
    qk_run(chosen(), m, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
}

void pa__tile_pv_bf16(int32_t m, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                      const uint32_t *V2, int ldv2, float *O, int ldo)
{
    pv_run(chosen(), m, n, np, P2, ldp2, V2, ldv2, O, ldo);
}

bool pa__tile_qk_bf16_by(const char *path, int32_t m, int32_t n, int32_t np, float alpha,
                         const uint32_t *A2, int lda2, const uint32_t *Bt2, size_t ldb, float *S,
                         int lds)
{
    enum path w;
    if (!by_name(path, &w))
        return false;
    qk_run(w, m, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
    return true;
}

bool pa__tile_pv_bf16_by(const char *path, int32_t m, int32_t n, int32_t np, const uint32_t *P2,
                         int ldp2, const uint32_t *V2, int ldv2, float *O, int ldo)
{
    enum path w;
    if (!by_name(path, &w))
        return false;
    pv_run(w, m, n, np, P2, ldp2, V2, ldv2, O, ldo);
    return true;
}
