/* tile.h - the two products of an attention tile (lib/tile.c).
 *
 * S = alpha * Q K^T and O += P V over one block of queries and one tile of
 * keys. Keys come packed and transposed once per kv head (pa__tile_pack_kt),
 * so both products read their right operand row by row. On x86-64 CPUs with
 * AVX-512 they run register-blocked FMA micro-kernels, with AVX2 and FMA the
 * same in 8-float vectors; elsewhere (and under POSATTN_KERNEL=portable)
 * they call OpenBLAS's sgemm with the same operands, so results agree to
 * rounding.
 *
 * Private to lib/, and a test-only interface: tests/lib/test_tile.c checks
 * the kernels and bench/bench_attention.c measures them as a ceiling of
 * attention; nothing else outside lib/ includes it (tools/check_layering.py).
 */
#ifndef PA_TILE_H
#define PA_TILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Row stride of a packed K^T of n keys: n rounded up to 16 floats, plus
 * 16 when that is a multiple of 256 (1 KiB). A micro-kernel walks down
 * the rows of a column block, one row per step of the inner dimension:
 * rows a multiple of 4 KiB apart (2048 keys: 8 KiB) all fall in one set
 * of a 32 KiB 8-way L1 and evict each other every few steps, so each block
 * would stream from L2 (on an AVX2 EPYC, attention at 2048 keys and D=128
 * took 265 ms with the extra cache line against 280-297 ms without). */
static inline size_t pa__tile_kt_ld(int32_t n)
{
    const size_t ld = ((size_t)n + 15) & ~(size_t)15;
    return ld % 256 == 0 ? ld + 16 : ld;
}

/* kt [d, ld] = k[n, d]^T for k with row stride ldk: columns 0..n-1 of kt's
 * d rows (row stride ld, ld >= n) are written, padding is left alone. A
 * K^T is packed whole (ld = pa__tile_kt_ld(n_keys)) or a slice of keys at a
 * time into kt + first_key. */
void pa__tile_pack_kt(int32_t n, int32_t d, const float *k, int ldk, float *kt, size_t ld);

/* S [m, n] (row stride lds) = alpha * A [m, kdim] (row stride lda) times
 * Bt [kdim, n] (row stride ldb): the logits of m queries against n keys,
 * Bt being a column window of a packed K^T. */
void pa__tile_qk(int32_t m, int32_t n, int32_t kdim, float alpha, const float *A, int lda,
                 const float *Bt, size_t ldb, float *S, int lds);

/* O [m, n] (row stride ldo) += P [m, kdim] (row stride ldp) times
 * V [kdim, n] (row stride ldv): probabilities times values. */
void pa__tile_pv(int32_t m, int32_t n, int32_t kdim, const float *P, int ldp, const float *V,
                 int ldv, float *O, int ldo);

/* True when the AVX-512 micro-kernels run (for benchmarks and tests). */
bool pa__tile_native(void);

/* ------------------------------------------------------------------------- */
/* bf16 compute (pa_attention.compute_dtype, lib/tile_bf16.c)                */
/* ------------------------------------------------------------------------- */

/* Operands in bf16 pairs: a uint32_t holds two bf16 values, element 2p in
 * its low half and 2p + 1 in its high half (the order of AVX-512 BF16's
 * vdpbf16ps). Each product of the tiles sums, per output element, over the
 * pairs in order: acc = fma(a[2p+1], b[2p+1], acc), then fma(a[2p], b[2p],
 * acc), in float32 with round to nearest even, as vdpbf16ps does (a
 * product of two bf16 values is exact in float32, so the fused and the
 * plain multiply-add agree but where a product underflows). Every path
 * (vdpbf16ps, AVX2 + FMA, plain C) computes those bits. */

/* x rounded to the nearest bf16, ties to even; values below float's
 * smallest normal become a zero of their sign (vdpbf16ps reads subnormal
 * inputs as zero). */
uint16_t pa__bf16_round(float x);

/* dst [m, ceil(kdim/2)] pairs (row stride ldd words) = rows of src [m,
 * kdim] (row stride lds) rounded; an odd kdim's last pair is (x, 0). */
void pa__bf16_pack_rows(int32_t m, int32_t kdim, const float *src, int lds, uint32_t *dst, int ldd);

/* kt2 [ceil(d/2), ld] pairs: column j holds key j's dimensions (2p, 2p+1),
 * k [n, d] with row stride ldk; columns 0..n-1 are written. As
 * pa__tile_pack_kt, a slice of keys at a time into kt2 + first_key. */
void pa__bf16_pack_kt(int32_t n, int32_t d, const float *k, int ldk, uint32_t *kt2, size_t ld);

/* v2 [ceil(n/2), dv] pairs (row stride ldv2 words): column c of row t
 * holds values (2t, 2t+1) of column c of v [n, dv] (row stride ldv); an
 * odd n's last row pairs with 0. */
void pa__bf16_pack_v(int32_t n, int32_t dv, const float *v, int ldv, uint32_t *v2, int ldv2);

/* S [m, n] (row stride lds) = alpha * (A2 [m, np] pairs (row stride lda2)
 * times Bt2 [np, n] pairs (row stride ldb)): alpha multiplies each sum. */
void pa__tile_qk_bf16(int32_t m, int32_t n, int32_t np, float alpha, const uint32_t *A2, int lda2,
                      const uint32_t *Bt2, size_t ldb, float *S, int lds);

/* O [m, n] (row stride ldo) += P2 [m, np] pairs (row stride ldp2) times
 * V2 [np, n] pairs (row stride ldv2), each element's sum starting from O. */
void pa__tile_pv_bf16(int32_t m, int32_t n, int32_t np, const uint32_t *P2, int ldp2,
                      const uint32_t *V2, int ldv2, float *O, int ldo);

/* Which path runs the bf16 products: "avx512_bf16" (vdpbf16ps), "avx2"
 * (AVX2 and FMA), "portable". POSATTN_KERNEL=portable forces the last. */
const char *pa__bf16_path(void);

/* Test-only: the same products by a named path ("portable", "avx2",
 * "avx512_bf16"); false when this CPU cannot run it. */
bool pa__tile_qk_bf16_by(const char *path, int32_t m, int32_t n, int32_t np, float alpha,
                         const uint32_t *A2, int lda2, const uint32_t *Bt2, size_t ldb, float *S,
                         int lds);
bool pa__tile_pv_bf16_by(const char *path, int32_t m, int32_t n, int32_t np, const uint32_t *P2,
                         int ldp2, const uint32_t *V2, int ldv2, float *O, int ldo);

#endif
