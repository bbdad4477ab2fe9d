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

/* True when either FMA micro-kernel (AVX-512, AVX2) runs, not OpenBLAS:
 * then each element of either product is one run of fused multiply-adds
 * along the inner dimension, in its order (pa__bf16_chosen relies on it). */
bool pa__tile_fma(void);

/* ------------------------------------------------------------------------- */
/* bf16 compute (pa_attention.compute_dtype, lib/tile_bf16.c)                */
/* ------------------------------------------------------------------------- */

/* Each product of the tiles sums, per output element, over pairs of
 * elements (2p, 2p+1) in order: acc = fma(a[2p+1], b[2p+1], acc), then
 * fma(a[2p], b[2p], acc), in float32 with round to nearest even, from bf16
 * operands, as AVX-512 BF16's vdpbf16ps does (a product of two bf16 values
 * is exact in float32, so the fused and the plain multiply-add agree but
 * where a product underflows). Three ways compute those bits:
 *   PA__BF16_PORTABLE  plain C with fmaf, on pairs;
 *   PA__BF16_FMA       the float32 tile kernels (pa__tile_qk, pa__tile_pv
 *                      with AVX-512 or AVX2), whose every element is a run
 *                      of fused multiply-adds along the inner dimension, on
 *                      the rounded values as floats with each pair's two
 *                      elements swapped: its runs are the pairs' sums;
 *   PA__BF16_DPBF16    vdpbf16ps itself, on pairs.
 * Operands are packed by the way that multiplies them, in 4-byte units: a
 * uint32_t holding a pair (element 2p in its low half, 2p + 1 in its high
 * half: vdpbf16ps's order), or, for PA__BF16_FMA, two floats per pair
 * (2p + 1, then 2p). ld and offsets count those units. */
typedef enum pa__bf16_way { PA__BF16_PORTABLE, PA__BF16_FMA, PA__BF16_DPBF16 } pa__bf16_way;

/* The way this process takes: vdpbf16ps where the CPU has AVX-512 BF16,
 * else the float32 FMA kernels where it has AVX-512 or AVX2 and FMA, else
 * plain C (POSATTN_KERNEL=portable too). */
pa__bf16_way pa__bf16_chosen(void);
/* Whether this CPU can run w. */
bool pa__bf16_can(pa__bf16_way w);
/* "portable", "fma", "avx512_bf16". */
const char *pa__bf16_way_name(pa__bf16_way w);

/* Units of one pair of w's packing: 1 (a uint32_t) or 2 (floats). */
static inline int pa__bf16_units(pa__bf16_way w)
{
    return w == PA__BF16_FMA ? 2 : 1;
}

/* x rounded to the nearest bf16, ties to even; values below float's
 * smallest normal become a zero of their sign (vdpbf16ps reads subnormal
 * inputs as zero). */
uint16_t pa__bf16_round(float x);

/* The pair (lo, hi) rounded, at dst[0] (and dst[1] for PA__BF16_FMA). */
void pa__bf16_put_pair(pa__bf16_way w, float lo, float hi, uint32_t *dst);

/* A row of probabilities x [n] by pairs of keys (2t, 2t+1) counted from
 * lead (0 or 1) keys before x[0], into dst [ceil((lead + n) / 2) pairs]:
 * pair t holds x[2t - lead] and x[2t + 1 - lead], a key outside [0, n) as
 * 0. The same as pa__bf16_put_pair pair by pair, vectorized for
 * PA__BF16_FMA (x finite) and PA__BF16_DPBF16 (vcvtneps2bf16, as are
 * that way's other packings). */
void pa__bf16_pack_probs(pa__bf16_way w, const float *x, int32_t n, int32_t lead, uint32_t *dst);

/* dst [m, ceil(kdim/2) pairs] (row stride ldd units) = rows of src [m,
 * kdim] (row stride lds) rounded; an odd kdim's last pair is (x, 0). */
void pa__bf16_pack_rows(pa__bf16_way w, int32_t m, int32_t kdim, const float *src, int lds,
                        uint32_t *dst, int ldd);

/* kt [ceil(d/2) pairs of rows, ld units]: column j holds key j's
 * dimensions pair by pair, k [n, d] with row stride ldk; columns 0..n-1
 * are written. As pa__tile_pack_kt, a slice of keys at a time into kt +
 * first_key. */
void pa__bf16_pack_kt(pa__bf16_way w, int32_t n, int32_t d, const float *k, int ldk, uint32_t *kt,
                      size_t ld);

/* v2 [ceil(n/2) pairs of rows, ldv2 units]: column c holds the values of
 * keys (2t, 2t+1) of column c of v [n, dv] (row stride ldv); an odd n's
 * last pair takes 0. Pair t starts at v2 + t * units * ldv2. */
void pa__bf16_pack_v(pa__bf16_way w, int32_t n, int32_t dv, const float *v, int ldv, uint32_t *v2,
                     int ldv2);

/* S [m, n] (row stride lds) = alpha * (A [m, np pairs] (row stride lda
 * units) times Bt [np pairs, n] (row stride ldb units)): alpha multiplies
 * each sum. */
void pa__tile_qk_bf16(pa__bf16_way w, int32_t m, int32_t n, int32_t np, float alpha,
                      const uint32_t *A, int lda, const uint32_t *Bt, size_t ldb, float *S,
                      int lds);

/* O [m, n] (row stride ldo) += P [m, np pairs] (row stride ldp units)
 * times V [np pairs, n] (row stride ldv units), each element's sum
 * starting from O. */
void pa__tile_pv_bf16(pa__bf16_way w, int32_t m, int32_t n, int32_t np, const uint32_t *P, int ldp,
                      const uint32_t *V, int ldv, float *O, int ldo);

#endif
