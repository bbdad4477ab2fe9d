/* transpose16.h - a 16 x 16 block of 32-bit elements transposed in zmm
 * registers, for the packings of K^T (lib/tile.c, lib/tile_bf16.c).
 *
 * Four rounds of 16 shuffles, as in the usual 16 x 16 transpose: pairs of
 * rows interleaved by 32 and then 64 bits within each 128-bit lane, which
 * leaves lane L of register 4i + e holding rows 4i .. 4i + 3 at column
 * 4L + e, and the 4 x 4 of 128-bit lanes transposed with vshufi32x4. A
 * gather per output row (the way it was done before) costs several times
 * more on AMD's cores.
 */
#ifndef PA_TRANSPOSE16_H
#define PA_TRANSPOSE16_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Element j of r[i] becomes element i of r[j]. */
static inline __attribute__((always_inline, target("avx512f"))) void pa__transpose16(__m512i r[16])
{
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44);
        const __m512i v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
        r[e] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[4 + e] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[8 + e] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + e] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* Rows 0 .. rows-1 of r (rows <= 16) to dst + i * ld (ld in 32-bit
 * elements), each row's first jn lanes (all 16 with plain stores): the
 * transposed block's rows into a packed K^T. The loop is unrolled whole,
 * so that r is indexed by constants and stays in registers. */
static inline __attribute__((always_inline, target("avx512f"))) void
pa__store16_rows(void *dst, size_t ld, const __m512i r[16], int32_t rows, int32_t jn)
{
    const __mmask16 k = jn >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << jn) - 1u);
#pragma GCC unroll 16
    for (int32_t i = 0; i < 16; i++) {
        if (i >= rows)
            break;
        char *row = (char *)dst + (size_t)i * ld * 4;
        if (jn >= 16)
            _mm512_storeu_si512(row, r[i]);
        else
            _mm512_mask_storeu_epi32(row, k, r[i]);
    }
}
#endif

#endif
