/* tile.h - the two products of an attention tile (lib/tile.c).
 *
 * S = alpha * Q K^T and O += P V over one block of queries and one tile of
 * keys. Keys come packed and transposed once per kv head (pa__tile_pack_kt),
 * so both products read their right operand row by row. On x86-64 CPUs with
 * AVX-512 they run register-blocked FMA micro-kernels; elsewhere they call
 * OpenBLAS's sgemm with the same operands, so results agree to rounding.
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

/* Row stride of a packed K^T of n keys: n rounded up to 16 floats. */
static inline size_t pa__tile_kt_ld(int32_t n)
{
    return ((size_t)n + 15) & ~(size_t)15;
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

/* True when the FMA micro-kernels run (for benchmarks and tests). */
bool pa__tile_native(void);

#endif
