/* tile.c - see tile.h.
 *
 * The micro-kernels keep a block of C in zmm registers and stream the right
 * operand row by row: per step of the inner dimension, NV vectors of 16
 * floats are loaded once and each of R rows broadcasts one element of the
 * left operand into NV fused multiply-adds (the register blocking of the
 * GotoBLAS/BLIS micro-kernel, without packing the left operand: a block of
 * at most 64 queries stays in L1). Column tails use AVX-512 masks, so any n
 * works without padding the output.
 *
 * QK: R = 6 rows x NV = 4 vectors (24 accumulators), right operand K^T.
 * PV: R = 6 rows x NV = 4 vectors (24 accumulators), right operand V.
 *
 * On CPUs with AVX2 and FMA but no AVX-512, the same micro-kernels in
 * 8-float vectors (6 rows x 2 vectors); OpenBLAS only under
 * POSATTN_KERNEL=portable or on CPUs without either.
 *
 * OpenBLAS has register-blocked kernels of its own, but on CPUs newer than
 * the build knows (this project's machines among them) it falls back to its
 * SSE3 "Prescott" kernels at a quarter of the FMA rate; these kernels follow
 * the CPU's own flags instead.
 */
#include "tile.h"

#include "cpu.h"
#include "transpose16.h"

#include <cblas.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define PA_TILE_X86 1
#include <immintrin.h>
#endif

/* pa__tile_pack_kt without AVX-512. */
static void pack_kt(int32_t n, int32_t d, const float *k, int ldk, float *kt, size_t ld)
{
    /* Blocks of 16 keys: each read row is used whole, each written row
     * gets 16 contiguous floats. */
    for (int32_t j0 = 0; j0 < n; j0 += 16) {
        const int32_t jn = n - j0 < 16 ? n - j0 : 16;
        for (int32_t c = 0; c < d; c++) {
            float *dst = kt + (size_t)c * ld + (size_t)j0;
            for (int32_t j = 0; j < jn; j++)
                dst[j] = k[(size_t)(j0 + j) * (size_t)ldk + (size_t)c];
        }
    }
}

/* ------------------------------------------------------------------------- */
/* OpenBLAS                                                                  */
/* ------------------------------------------------------------------------- */

static void qk_blas(int32_t m, int32_t n, int32_t kdim, float alpha, const float *A, int lda,
                    const float *Bt, size_t ldb, float *S, int lds)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, kdim, alpha, A, lda, Bt, (int)ldb,
                0.0f, S, lds);
}

static void pv_blas(int32_t m, int32_t n, int32_t kdim, const float *P, int ldp, const float *V,
                    int ldv, float *O, int ldo)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, kdim, 1.0f, P, ldp, V, ldv, 1.0f,
                O, ldo);
}

/* ------------------------------------------------------------------------- */
/* AVX-512                                                                   */
/* ------------------------------------------------------------------------- */

#if PA_TILE_X86

#define PA_AVX512 __attribute__((target("avx512f")))
#define PA_INLINE static inline __attribute__((always_inline))

/* The lanes of a 16-float vector that hold columns c .. n-1 (c < n or none). */
PA_AVX512 PA_INLINE __mmask16 lanes(int32_t c, int32_t n)
{
    int32_t left = n - c;
    if (left >= 16)
        return (__mmask16)0xFFFF;
    return left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* S[R, NV*16 columns from j] = alpha * A[R, kdim] Bt[kdim, ...]; `full`
 * when all NV*16 columns are there (plain loads, no masks). */
PA_AVX512 PA_INLINE void qk_block(const int R, const int NV, const bool full, int32_t j, int32_t n,
                                  int32_t kdim, float alpha, const float *A, int lda,
                                  const float *Bt, size_t ldb, float *S, int lds)
{
    __m512 acc[6][4];
    __mmask16 mk[4];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
        mk[v] = lanes(j + 16 * v, n);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int32_t d = 0; d < kdim; d++) {
        const float *b = Bt + (size_t)d * ldb + (size_t)j;
        __m512 bv[4];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            bv[v] = full ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(mk[v], b + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 a = _mm512_set1_ps(A[(size_t)r * (size_t)lda + (size_t)d]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_fmadd_ps(a, bv[v], acc[r][v]);
        }
    }
    {
        const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) {
                float *dst = S + (size_t)r * (size_t)lds + (size_t)j + 16 * v;
                if (full)
                    _mm512_storeu_ps(dst, _mm512_mul_ps(acc[r][v], va));
                else
                    _mm512_mask_storeu_ps(dst, mk[v], _mm512_mul_ps(acc[r][v], va));
            }
    }
}

/* 64 columns at a time (6 x 4 accumulators, as PV's micro-kernel), then
 * the tail of 1 to 3 vectors. */
PA_AVX512 PA_INLINE void qk_rows(const int R, int32_t n, int32_t kdim, float alpha, const float *A,
                                 int lda, const float *Bt, size_t ldb, float *S, int lds)
{
    int32_t j = 0;
    for (; j + 64 <= n; j += 64)
        qk_block(R, 4, true, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
    switch ((n - j + 15) / 16) {
    case 4:
        qk_block(R, 4, false, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
        break;
    case 3:
        qk_block(R, 3, false, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
        break;
    case 2:
        qk_block(R, 2, false, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
        break;
    case 1:
        qk_block(R, 1, false, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
        break;
    default:
        break;
    }
}

PA_AVX512 static void qk_avx512(int32_t m, int32_t n, int32_t kdim, float alpha, const float *A,
                                int lda, const float *Bt, size_t ldb, float *S, int lds)
{
    int32_t i = 0;
    for (; i + 6 <= m; i += 6)
        qk_rows(6, n, kdim, alpha, A + (size_t)i * lda, lda, Bt, ldb, S + (size_t)i * lds, lds);
#define QK_TAIL(r)                                                                                 \
    case r:                                                                                        \
        qk_rows(r, n, kdim, alpha, A + (size_t)i * lda, lda, Bt, ldb, S + (size_t)i * lds, lds);   \
        break
    switch (m - i) {
        QK_TAIL(1);
        QK_TAIL(2);
        QK_TAIL(3);
        QK_TAIL(4);
        QK_TAIL(5);
    default:
        break;
    }
#undef QK_TAIL
}

/* O[R, NV*16 columns from c] += P[R, kdim] V[kdim, ...]; `full` when all
 * NV*16 columns are there (plain loads and stores, no masks). */
PA_AVX512 PA_INLINE void pv_block(const int R, const int NV, const bool full, int32_t c, int32_t n,
                                  int32_t kdim, const float *P, int ldp, const float *V, int ldv,
                                  float *O, int ldo)
{
    __m512 acc[6][4];
    __mmask16 mk[4];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
        mk[v] = lanes(c + 16 * v, n);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            const float *o = O + (size_t)r * (size_t)ldo + (size_t)c + 16 * v;
            acc[r][v] = full ? _mm512_loadu_ps(o) : _mm512_maskz_loadu_ps(mk[v], o);
        }
    for (int32_t k = 0; k < kdim; k++) {
        const float *b = V + (size_t)k * (size_t)ldv + (size_t)c;
        __m512 bv[4];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            bv[v] = full ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(mk[v], b + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 p = _mm512_set1_ps(P[(size_t)r * (size_t)ldp + (size_t)k]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_fmadd_ps(p, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            float *o = O + (size_t)r * (size_t)ldo + (size_t)c + 16 * v;
            if (full)
                _mm512_storeu_ps(o, acc[r][v]);
            else
                _mm512_mask_storeu_ps(o, mk[v], acc[r][v]);
        }
}

PA_AVX512 PA_INLINE void pv_rows(const int R, int32_t n, int32_t kdim, const float *P, int ldp,
                                 const float *V, int ldv, float *O, int ldo)
{
    int32_t c = 0;
    for (; c + 64 <= n; c += 64)
        pv_block(R, 4, true, c, n, kdim, P, ldp, V, ldv, O, ldo);
    switch ((n - c + 15) / 16) {
    case 4:
        pv_block(R, 4, false, c, n, kdim, P, ldp, V, ldv, O, ldo);
        break;
    case 3:
        pv_block(R, 3, false, c, n, kdim, P, ldp, V, ldv, O, ldo);
        break;
    case 2:
        pv_block(R, 2, false, c, n, kdim, P, ldp, V, ldv, O, ldo);
        break;
    case 1:
        pv_block(R, 1, false, c, n, kdim, P, ldp, V, ldv, O, ldo);
        break;
    default:
        break;
    }
}

PA_AVX512 static void pv_avx512(int32_t m, int32_t n, int32_t kdim, const float *P, int ldp,
                                const float *V, int ldv, float *O, int ldo)
{
    int32_t i = 0;
    for (; i + 6 <= m; i += 6)
        pv_rows(6, n, kdim, P + (size_t)i * ldp, ldp, V, ldv, O + (size_t)i * ldo, ldo);
#define PV_TAIL(r)                                                                                 \
    case r:                                                                                        \
        pv_rows(r, n, kdim, P + (size_t)i * ldp, ldp, V, ldv, O + (size_t)i * ldo, ldo);           \
        break
    switch (m - i) {
        PV_TAIL(1);
        PV_TAIL(2);
        PV_TAIL(3);
        PV_TAIL(4);
        PV_TAIL(5);
    default:
        break;
    }
#undef PV_TAIL
}

/* ------------------------------------------------------------------------- */
/* AVX2 + FMA                                                                */
/* ------------------------------------------------------------------------- */

/* The same blocking in 8-float vectors: R = 6 rows x NV = 2 vectors, 12
 * accumulators, the two right-operand vectors and a broadcast, 15 of the 16
 * ymm registers. Column tails load and store through lane masks. */

#define PA_AVX2 __attribute__((target("avx2,fma")))

/* The lanes of an 8-float vector that hold columns c .. n-1. */
PA_AVX2 PA_INLINE __m256i lanes8(int32_t c, int32_t n)
{
    const int32_t left = n - c < 0 ? 0 : n - c > 8 ? 8 : n - c;
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), idx);
}

PA_AVX2 PA_INLINE void qk2_block(const int R, const int NV, const bool full, int32_t j, int32_t n,
                                 int32_t kdim, float alpha, const float *A, int lda,
                                 const float *Bt, size_t ldb, float *S, int lds)
{
    __m256 acc[6][2];
    __m256i mk[2];
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++)
        mk[v] = lanes8(j + 8 * v, n);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (int32_t d = 0; d < kdim; d++) {
        const float *b = Bt + (size_t)d * ldb + (size_t)j;
        __m256 bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            bv[v] = full ? _mm256_loadu_ps(b + 8 * v) : _mm256_maskload_ps(b + 8 * v, mk[v]);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 a = _mm256_broadcast_ss(A + (size_t)r * (size_t)lda + (size_t)d);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm256_fmadd_ps(a, bv[v], acc[r][v]);
        }
    }
    {
        const __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                float *dst = S + (size_t)r * (size_t)lds + (size_t)j + 8 * v;
                if (full)
                    _mm256_storeu_ps(dst, _mm256_mul_ps(acc[r][v], va));
                else
                    _mm256_maskstore_ps(dst, mk[v], _mm256_mul_ps(acc[r][v], va));
            }
    }
}

PA_AVX2 PA_INLINE void qk2_rows(const int R, int32_t n, int32_t kdim, float alpha, const float *A,
                                int lda, const float *Bt, size_t ldb, float *S, int lds)
{
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        qk2_block(R, 2, true, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
    if (n - j > 8)
        qk2_block(R, 2, false, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
    else if (n - j > 0)
        qk2_block(R, 1, false, j, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
}

PA_AVX2 static void qk_avx2(int32_t m, int32_t n, int32_t kdim, float alpha, const float *A,
                            int lda, const float *Bt, size_t ldb, float *S, int lds)
{
    int32_t i = 0;
    for (; i + 6 <= m; i += 6)
        qk2_rows(6, n, kdim, alpha, A + (size_t)i * lda, lda, Bt, ldb, S + (size_t)i * lds, lds);
#define QK2_TAIL(r)                                                                                \
    case r:                                                                                        \
        qk2_rows(r, n, kdim, alpha, A + (size_t)i * lda, lda, Bt, ldb, S + (size_t)i * lds, lds);  \
        break
    switch (m - i) {
        QK2_TAIL(1);
        QK2_TAIL(2);
        QK2_TAIL(3);
        QK2_TAIL(4);
        QK2_TAIL(5);
    default:
        break;
    }
#undef QK2_TAIL
}

PA_AVX2 PA_INLINE void pv2_block(const int R, const int NV, const bool full, int32_t c, int32_t n,
                                 int32_t kdim, const float *P, int ldp, const float *V, int ldv,
                                 float *O, int ldo)
{
    __m256 acc[6][2];
    __m256i mk[2];
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++)
        mk[v] = lanes8(c + 8 * v, n);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            const float *o = O + (size_t)r * (size_t)ldo + (size_t)c + 8 * v;
            acc[r][v] = full ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, mk[v]);
        }
    for (int32_t k = 0; k < kdim; k++) {
        const float *b = V + (size_t)k * (size_t)ldv + (size_t)c;
        __m256 bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            bv[v] = full ? _mm256_loadu_ps(b + 8 * v) : _mm256_maskload_ps(b + 8 * v, mk[v]);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 p = _mm256_broadcast_ss(P + (size_t)r * (size_t)ldp + (size_t)k);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm256_fmadd_ps(p, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            float *o = O + (size_t)r * (size_t)ldo + (size_t)c + 8 * v;
            if (full)
                _mm256_storeu_ps(o, acc[r][v]);
            else
                _mm256_maskstore_ps(o, mk[v], acc[r][v]);
        }
}

PA_AVX2 PA_INLINE void pv2_rows(const int R, int32_t n, int32_t kdim, const float *P, int ldp,
                                const float *V, int ldv, float *O, int ldo)
{
    int32_t c = 0;
    for (; c + 16 <= n; c += 16)
        pv2_block(R, 2, true, c, n, kdim, P, ldp, V, ldv, O, ldo);
    if (n - c > 8)
        pv2_block(R, 2, false, c, n, kdim, P, ldp, V, ldv, O, ldo);
    else if (n - c > 0)
        pv2_block(R, 1, false, c, n, kdim, P, ldp, V, ldv, O, ldo);
}

PA_AVX2 static void pv_avx2(int32_t m, int32_t n, int32_t kdim, const float *P, int ldp,
                            const float *V, int ldv, float *O, int ldo)
{
    int32_t i = 0;
    for (; i + 6 <= m; i += 6)
        pv2_rows(6, n, kdim, P + (size_t)i * ldp, ldp, V, ldv, O + (size_t)i * ldo, ldo);
#define PV2_TAIL(r)                                                                                \
    case r:                                                                                        \
        pv2_rows(r, n, kdim, P + (size_t)i * ldp, ldp, V, ldv, O + (size_t)i * ldo, ldo);          \
        break
    switch (m - i) {
        PV2_TAIL(1);
        PV2_TAIL(2);
        PV2_TAIL(3);
        PV2_TAIL(4);
        PV2_TAIL(5);
    default:
        break;
    }
#undef PV2_TAIL
}

/* pack_kt on 16 keys by 16 dimensions at a time: rows read and written
 * 16 floats at a time, transposed in registers. */
PA_AVX512 static void pack_kt_avx512(int32_t n, int32_t d, const float *k, int ldk, float *kt,
                                     size_t ld)
{
    for (int32_t j0 = 0; j0 < n; j0 += 16) {
        const int32_t jn = n - j0 < 16 ? n - j0 : 16;
        for (int32_t c0 = 0; c0 < d; c0 += 16) {
            const int32_t cn = d - c0 < 16 ? d - c0 : 16;
            const __mmask16 kc = lanes(0, cn);
            __m512i r[16];
#pragma GCC unroll 16
            for (int32_t j = 0; j < 16; j++) {
                const float *row = k + (size_t)(j0 + j) * (size_t)ldk + (size_t)c0;
                r[j] = j < jn ? _mm512_maskz_loadu_epi32(kc, row) : _mm512_setzero_si512();
                /* The same columns of the next 16 keys: rows ldk apart are
                 * too far for the hardware's prefetchers. */
                if (j0 + 32 <= n)
                    _mm_prefetch((const char *)(row + 16 * (size_t)ldk), _MM_HINT_T0);
            }
            pa__transpose16(r);
            pa__store16_rows(kt + (size_t)c0 * ld + (size_t)j0, ld, r, cn, jn);
        }
    }
}

bool pa__tile_native(void)
{
    return pa__cpu_avx512();
}

bool pa__tile_fma(void)
{
    return pa__cpu_avx512() || pa__cpu_avx2_fma();
}

#else

bool pa__tile_native(void)
{
    return false;
}

bool pa__tile_fma(void)
{
    return false;
}

#endif

/* ------------------------------------------------------------------------- */
/* Dispatch                                                                  */
/* ------------------------------------------------------------------------- */

void pa__tile_pack_kt(int32_t n, int32_t d, const float *k, int ldk, float *kt, size_t ld)
{
#if PA_TILE_X86
    if (pa__tile_native()) {
        pack_kt_avx512(n, d, k, ldk, kt, ld);
        return;
    }
#endif
    pack_kt(n, d, k, ldk, kt, ld);
}

void pa__tile_qk(int32_t m, int32_t n, int32_t kdim, float alpha, const float *A, int lda,
                 const float *Bt, size_t ldb, float *S, int lds)
{
    if (m <= 0 || n <= 0)
        return;
#if PA_TILE_X86
    if (pa__tile_native()) {
        qk_avx512(m, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
        return;
    }
    if (pa__cpu_avx2_fma()) {
        qk_avx2(m, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
        return;
    }
#endif
    qk_blas(m, n, kdim, alpha, A, lda, Bt, ldb, S, lds);
}

void pa__tile_pv(int32_t m, int32_t n, int32_t kdim, const float *P, int ldp, const float *V,
                 int ldv, float *O, int ldo)
{
    if (m <= 0 || n <= 0 || kdim <= 0)
        return;
#if PA_TILE_X86
    if (pa__tile_native()) {
        pv_avx512(m, n, kdim, P, ldp, V, ldv, O, ldo);
        return;
    }
    if (pa__cpu_avx2_fma()) {
        pv_avx2(m, n, kdim, P, ldp, V, ldv, O, ldo);
        return;
    }
#endif
    pv_blas(m, n, kdim, P, ldp, V, ldv, O, ldo);
}
