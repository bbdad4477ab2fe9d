/* lanes16.h - pa__lanes16: the mask of the first n of 16 lanes, for the
 * AVX-512 kernels' partial blocks (softmax.c, decode_rows.c, tile_bf16.c,
 * rope_apply.c). Integer arithmetic only, so it inlines into code of any
 * target.
 */
#ifndef PA_LANES16_H
#define PA_LANES16_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdint.h>

/* Lanes 0 .. n-1 of 16: none when n <= 0, all when n >= 16. */
static inline __mmask16 pa__lanes16(int32_t n)
{
    if (n >= 16)
        return (__mmask16)0xFFFF;
    return n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
#endif

#endif
