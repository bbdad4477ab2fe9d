/* tile_bf16.c - the tiles' two products in bf16 (tile.h): q.k and P.v as
 * bf16 dot products accumulated in float32, for compute_dtype bf16.
 *
 * The definition is AVX-512 BF16's vdpbf16ps (Intel SDM: "FP32 FMA with
 * DAZ in, FTZ out and RNE rounding"): per float32 lane and pair of bf16
 * elements, acc += a[2i+1] * b[2i+1], then acc += a[2i] * b[2i]. Three
 * ways compute it (tile.h):
 *   - vdpbf16ps itself where the CPU has AVX-512 BF16: 32 products an
 *     instruction, twice float32's FMA rate at half the bytes;
 *   - the float32 FMA tile kernels (lib/tile.c) on the rounded values,
 *     each pair's elements swapped: their runs of fused multiply-adds along
 *     the inner dimension are then exactly the pairs' sums, at float32's
 *     speed (no pair to split in the inner loop);
 *   - plain C with fmaf in the same order.
 * A bf16 product is exact in float32 (8-bit significands make 16 bits),
 * so each step rounds once, as the instruction does; the kernels run with
 * flush-to-zero (pa__fp_enter) and pa__bf16_round leaves no subnormal
 * operand, so the three agree bit for bit (tests/lib/test_bf16.c).
 */
#include "tile.h"

#include "cpu.h"
#include "dtype.h"
#include "lanes16.h"
#include "posattn.h"
#include "transpose16.h"

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

/* x as the bf16 it rounds to, widened back (exact). */
static inline float bf16_float(float x)
{
    return pa__bf16_f32(pa__bf16_round(x));
}

void pa__bf16_put_pair(pa__bf16_way w, float lo, float hi, uint32_t *dst)
{
    if (w == PA__BF16_FMA) { /* (2p + 1, 2p) as floats */
        const float f[2] = {bf16_float(hi), bf16_float(lo)};
        memcpy(dst, f, sizeof f);
    } else {
        dst[0] = (uint32_t)pa__bf16_round(lo) | (uint32_t)pa__bf16_round(hi) << 16;
    }
}

#if PA_BF16_X86
/* pa__bf16_put_pair for PA__BF16_FMA over 4 pairs of finite x: each value
 * rounded as pa__bf16_round does (to nearest even; below float's smallest
 * normal to a zero of its sign), then the two of each pair swapped. */
__attribute__((target("avx2"))) static void put_pairs8_fma(const float *x, uint32_t *dst)
{
    const __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)x);
    const __m256i expo = _mm256_and_si256(u, _mm256_set1_epi32(0x7F800000));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i up = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd));
    const __m256i rounded = _mm256_and_si256(up, _mm256_set1_epi32((int)0xFFFF0000u));
    const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u));
    const __m256i tiny = _mm256_cmpeq_epi32(expo, _mm256_setzero_si256());
    const __m256 r = _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, sign, tiny));
    _mm256_storeu_ps((float *)(void *)dst, _mm256_permute_ps(r, 0xB1)); /* (1,0,3,2,...) */
}

/* The packings for PA__BF16_DPBF16 with vcvtneps2bf16, which rounds as
 * pa__bf16_round does: to nearest even, a subnormal input to a zero of its
 * sign (DAZ), a NaN kept quiet; the two agree on every float (checked
 * exhaustively on an AMD EPYC; tests/lib/test_bf16.c checks ties,
 * subnormals and zeros through every packing). A pair is two bf16 in
 * memory order (2p at the lower address), so a run of floats rounded in
 * order is a run of pairs. BW and VL for the 16-bit masked stores: every
 * CPU with AVX-512 BF16 has them (pa__cpu_avx512_bf16 checks). */
#define PA_CVT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* x [n] rounded into the bf16 at y [n] (y may be 2-byte aligned only). */
PA_CVT static void round_run_dp(const float *x, int32_t n, void *y)
{
    char *out = y;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(out + 2 * (size_t)i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 k = pa__lanes16(n - i);
        _mm256_mask_storeu_epi16(out + 2 * (size_t)i, k,
                                 (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

/* One bf16 zero at byte offset 2 * i of y. */
static inline void zero_at(void *y, size_t i)
{
    const uint16_t z = 0;
    memcpy((char *)y + 2 * i, &z, sizeof z);
}

/* pa__bf16_pack_rows for PA__BF16_DPBF16. */
PA_CVT static void pack_rows_dp(int32_t m, int32_t kdim, const float *src, int lds, uint32_t *dst,
                                int ldd)
{
    for (int32_t i = 0; i < m; i++) {
        uint32_t *y = dst + (size_t)i * (size_t)ldd;
        if (i + 8 < m) /* as pa__prep_rows: rows lds apart, the row 8 ahead */
            for (int32_t c = 0; c < kdim; c += 16)
                _mm_prefetch((const char *)(src + (size_t)(i + 8) * (size_t)lds + (size_t)c),
                             _MM_HINT_T0);
        round_run_dp(src + (size_t)i * (size_t)lds, kdim, y);
        if (kdim & 1)
            zero_at(y, (size_t)kdim);
    }
}

/* pa__bf16_pack_kt for PA__BF16_DPBF16: 16 keys by 16 pairs at a time,
 * each key's 32 dimensions rounded in order into a register (16 pairs),
 * the 16 registers transposed into kt's rows. */
PA_CVT static void pack_kt_dp(int32_t n, int32_t d, const float *k, int ldk, uint32_t *kt,
                              size_t ld)
{
    const int32_t np = (d + 1) / 2;
    for (int32_t j0 = 0; j0 < n; j0 += 16) {
        const int32_t jn = n - j0 < 16 ? n - j0 : 16;
        for (int32_t p0 = 0; p0 < np; p0 += 16) {
            const int32_t pn = np - p0 < 16 ? np - p0 : 16;
            const int32_t c0 = 2 * p0, cn = d - c0 < 32 ? d - c0 : 32;
            __m512i r[16];
#pragma GCC unroll 16
            for (int32_t j = 0; j < 16; j++) {
                const float *row = k + (size_t)(j0 + j) * (size_t)ldk + (size_t)c0;
                r[j] = j >= jn    ? _mm512_setzero_si512()
                       : cn == 32 ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 16),
                                                                 _mm512_loadu_ps(row))
                                  : (__m512i)_mm512_cvtne2ps_pbh(
                                        _mm512_maskz_loadu_ps(pa__lanes16(cn - 16), row + 16),
                                        _mm512_maskz_loadu_ps(pa__lanes16(cn), row));
                if (j0 + 32 <= n) /* as pack_kt_avx512 (tile.c) */
                    for (int32_t c = 0; c < cn; c += 16)
                        _mm_prefetch((const char *)(row + 16 * (size_t)ldk + c), _MM_HINT_T0);
            }
            pa__transpose16(r);
            pa__store16_rows(kt + (size_t)p0 * ld + (size_t)j0, ld, r, pn, jn);
        }
    }
}

/* pa__bf16_pack_v for PA__BF16_DPBF16: rows 2t and 2t + 1 rounded and
 * interleaved, 16 columns at a time. */
PA_CVT static void pack_v_dp(int32_t n, int32_t dv, const float *v, int ldv, uint32_t *v2, int ldv2)
{
    for (int32_t t = 0; 2 * t < n; t++) {
        const float *r0 = v + (size_t)(2 * t) * (size_t)ldv;
        const float *r1 = 2 * t + 1 < n ? r0 + ldv : NULL;
        uint32_t *dst = v2 + (size_t)t * (size_t)ldv2;
        for (int32_t c = 0; c < dv; c += 16) {
            const __mmask16 k = pa__lanes16(dv - c);
            const bool whole = dv - c >= 16;
            const __m512 lo = whole ? _mm512_loadu_ps(r0 + c) : _mm512_maskz_loadu_ps(k, r0 + c);
            const __m512 hi = r1 == NULL ? _mm512_setzero_ps()
                              : whole    ? _mm512_loadu_ps(r1 + c)
                                         : _mm512_maskz_loadu_ps(k, r1 + c);
            const __m512i lo16 = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
            const __m512i hi16 = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
            const __m512i y = _mm512_or_si512(lo16, _mm512_slli_epi32(hi16, 16));
            if (whole)
                _mm512_storeu_si512(dst + c, y);
            else
                _mm512_mask_storeu_epi32(dst + c, k, y);
        }
    }
}
#endif

void pa__bf16_pack_probs(pa__bf16_way w, const float *x, int32_t n, int32_t lead, uint32_t *dst)
{
    const int u = pa__bf16_units(w);
    int32_t t = 0;
    const int32_t np = (lead + n + 1) / 2;
#if PA_BF16_X86
    if (w == PA__BF16_DPBF16) { /* the bf16 run: lead zero, x rounded, an odd end's zero */
        if (lead)
            zero_at(dst, 0);
        round_run_dp(x, n, (char *)dst + 2 * (size_t)lead);
        if ((lead + n) & 1)
            zero_at(dst, (size_t)(lead + n));
        return;
    }
#endif
    if (lead) { /* the first pair: (outside, x[0]) */
        pa__bf16_put_pair(w, 0.0f, n > 0 ? x[0] : 0.0f, dst);
        t = 1;
    }
#if PA_BF16_X86
    if (w == PA__BF16_FMA) /* pair t holds x[2t - lead], x[2t + 1 - lead] */
        for (; 2 * t - lead + 8 <= n; t += 4)
            put_pairs8_fma(x + 2 * t - lead, dst + (size_t)t * 2);
#endif
    for (; t < np; t++) {
        const int32_t c0 = 2 * t - lead, c1 = c0 + 1;
        pa__bf16_put_pair(w, c0 >= 0 && c0 < n ? x[c0] : 0.0f, c1 < n ? x[c1] : 0.0f,
                          dst + (size_t)t * u);
    }
}

void pa__bf16_pack_rows(pa__bf16_way w, int32_t m, int32_t kdim, const float *src, int lds,
                        uint32_t *dst, int ldd)
{
    const int u = pa__bf16_units(w);
#if PA_BF16_X86
    if (w == PA__BF16_DPBF16) {
        pack_rows_dp(m, kdim, src, lds, dst, ldd);
        return;
    }
#endif
    for (int32_t i = 0; i < m; i++) {
        const float *x = src + (size_t)i * (size_t)lds;
        uint32_t *y = dst + (size_t)i * (size_t)ldd;
        for (int32_t d = 0; d < kdim; d += 2)
            pa__bf16_put_pair(w, x[d], d + 1 < kdim ? x[d + 1] : 0.0f, y + (size_t)(d / 2 * u));
    }
}

void pa__bf16_pack_kt(pa__bf16_way w, int32_t n, int32_t d, const float *k, int ldk, uint32_t *kt,
                      size_t ld)
{
    const int u = pa__bf16_units(w);
#if PA_BF16_X86
    if (w == PA__BF16_DPBF16) {
        pack_kt_dp(n, d, k, ldk, kt, ld);
        return;
    }
#endif
    for (int32_t j0 = 0; j0 < n; j0 += 16) { /* as pa__tile_pack_kt: 16 keys at a time */
        const int32_t jn = n - j0 < 16 ? n - j0 : 16;
        for (int32_t c = 0; c < d; c += 2) {
            uint32_t *dst = kt + (size_t)(c / 2 * u) * ld + (size_t)j0;
            for (int32_t j = 0; j < jn; j++) {
                const float *row = k + (size_t)(j0 + j) * (size_t)ldk;
                const float lo = row[c], hi = c + 1 < d ? row[c + 1] : 0.0f;
                if (w == PA__BF16_FMA) { /* rows 2p (the pair's high), 2p + 1 */
                    const float f[2] = {bf16_float(hi), bf16_float(lo)};
                    memcpy(dst + j, &f[0], sizeof(float));
                    memcpy(dst + ld + j, &f[1], sizeof(float));
                } else {
                    pa__bf16_put_pair(w, lo, hi, dst + j);
                }
            }
        }
    }
}

void pa__bf16_pack_v(pa__bf16_way w, int32_t n, int32_t dv, const float *v, int ldv, uint32_t *v2,
                     int ldv2)
{
    const int u = pa__bf16_units(w);
#if PA_BF16_X86
    if (w == PA__BF16_DPBF16) {
        pack_v_dp(n, dv, v, ldv, v2, ldv2);
        return;
    }
#endif
    for (int32_t t = 0; 2 * t < n; t++) {
        const float *r0 = v + (size_t)(2 * t) * (size_t)ldv;
        const float *r1 = 2 * t + 1 < n ? r0 + ldv : NULL;
        uint32_t *dst = v2 + (size_t)t * (size_t)u * (size_t)ldv2;
        for (int32_t c = 0; c < dv; c++) {
            const float lo = r0[c], hi = r1 != NULL ? r1[c] : 0.0f;
            if (w == PA__BF16_FMA) {
                const float f[2] = {bf16_float(hi), bf16_float(lo)};
                memcpy(dst + c, &f[0], sizeof(float));
                memcpy(dst + ldv2 + c, &f[1], sizeof(float));
            } else {
                pa__bf16_put_pair(w, lo, hi, dst + c);
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Plain C                                                                   */
/* ------------------------------------------------------------------------- */

/* The high (element 2p + 1) and low (2p) halves of a pair. */
static inline float hi_f(uint32_t w)
{
    return pa__bf16_f32((uint16_t)(w >> 16));
}

static inline float lo_f(uint32_t w)
{
    return pa__bf16_f32((uint16_t)(w & 0xFFFFu));
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

/* The products element by element. */
static void qk_portable(int32_t m, int32_t n, int32_t np, float alpha, const uint32_t *A2, int lda2,
                        const uint32_t *Bt2, size_t ldb, float *S, int lds)
{
    for (int32_t i = 0; i < m; i++)
        for (int32_t j = 0; j < n; j++)
            S[(size_t)i * (size_t)lds + (size_t)j] =
                dot_pairs(0.0f, np, A2 + (size_t)i * (size_t)lda2, Bt2 + (size_t)j, ldb) * alpha;
}

static void pv_portable(int32_t m, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                        const uint32_t *V2, int ldv2, float *O, int ldo)
{
    for (int32_t i = 0; i < m; i++)
        for (int32_t c = 0; c < n; c++) {
            float *o = O + (size_t)i * (size_t)ldo + (size_t)c;
            *o = dot_pairs(*o, np, P2 + (size_t)i * (size_t)ldp2, V2 + (size_t)c, (size_t)ldv2);
        }
}

#if PA_BF16_X86

#define PA_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------- */
/* AVX-512 BF16                                                              */
/* ------------------------------------------------------------------------- */

#define PA_BF16 __attribute__((target("avx512f,avx512bf16")))

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
        mk[v] = pa__lanes16(n - j - 16 * v); /* columns j + 16v .. n-1 */
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
    switch ((n - j + 15) / 16) { /* 1 to 63 columns left: 1 to 4 vectors */
    case 4:
        qk16_block(R, 4, j, n, np, alpha, A2, lda2, Bt2, ldb, S, lds);
        break;
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
        mk[v] = pa__lanes16(n - c - 16 * v);
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
    switch ((n - c + 15) / 16) { /* as qk16_rows */
    case 4:
        pv16_block(R, 4, c, n, np, P2, ldp2, V2, ldv2, O, ldo);
        break;
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

bool pa__bf16_can(pa__bf16_way w)
{
    switch (w) {
    case PA__BF16_PORTABLE:
        return true;
    case PA__BF16_FMA:
        return pa__tile_fma();
    case PA__BF16_DPBF16:
        return pa__cpu_avx512_bf16();
    }
    return false;
}

pa__bf16_way pa__bf16_chosen(void)
{
    if (pa__bf16_can(PA__BF16_DPBF16))
        return PA__BF16_DPBF16;
    if (pa__bf16_can(PA__BF16_FMA))
        return PA__BF16_FMA;
    return PA__BF16_PORTABLE;
}

const char *pa__bf16_way_name(pa__bf16_way w)
{
    return w == PA__BF16_DPBF16 ? "avx512_bf16" : w == PA__BF16_FMA ? "fma" : "portable";
}

const char *pa_bf16_path(void)
{
    return pa__bf16_way_name(pa__bf16_chosen());
}

void pa__tile_qk_bf16(pa__bf16_way w, int32_t m, int32_t n, int32_t np, float alpha,
                      const uint32_t *A, int lda, const uint32_t *Bt, size_t ldb, float *S, int lds)
{
    if (m <= 0 || n <= 0)
        return;
    if (w == PA__BF16_FMA) {
        pa__tile_qk(m, n, 2 * np, alpha, (const float *)(const void *)A, lda,
                    (const float *)(const void *)Bt, ldb, S, lds);
        return;
    }
#if PA_BF16_X86
    if (w == PA__BF16_DPBF16) {
        qk_avx512_bf16(m, n, np, alpha, A, lda, Bt, ldb, S, lds);
        return;
    }
#endif
    qk_portable(m, n, np, alpha, A, lda, Bt, ldb, S, lds);
}

void pa__tile_pv_bf16(pa__bf16_way w, int32_t m, int32_t n, int32_t np, const uint32_t *P, int ldp,
                      const uint32_t *V, int ldv, float *O, int ldo)
{
    if (m <= 0 || n <= 0 || np <= 0)
        return;
    if (w == PA__BF16_FMA) {
        pa__tile_pv(m, n, 2 * np, (const float *)(const void *)P, ldp,
                    (const float *)(const void *)V, ldv, O, ldo);
        return;
    }
#if PA_BF16_X86
    if (w == PA__BF16_DPBF16) {
        pv_avx512_bf16(m, n, np, P, ldp, V, ldv, O, ldo);
        return;
    }
#endif
    pv_portable(m, n, np, P, ldp, V, ldv, O, ldo);
}
