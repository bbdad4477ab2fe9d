/* dtype.c - rows of 16-bit keys and values widened to float32 (see
 * dtype.h): F16C and AVX2 in registers where the CPU has them
 * (pa__cpu_avx2), the exact scalar conversions elsewhere. Both give the
 * same bits: the conversions are exact.
 */
#include "dtype.h"

#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define PA_DT_X86 1
#include <immintrin.h>
#endif

const char *pa_dtype_name(pa_dtype t)
{
    switch (t) {
    case PA_DTYPE_F32:
        return "f32";
    case PA_DTYPE_BF16:
        return "bf16";
    case PA_DTYPE_F16:
        return "f16";
    }
    return "unknown";
}

#if PA_DT_X86
__attribute__((target("avx2,f16c"))) static void widen_avx2(pa_dtype t, const uint16_t *src,
                                                            size_t n, float *dst)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        const __m256 f = t == PA_DTYPE_F16
                             ? _mm256_cvtph_ps(h)
                             : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        _mm256_storeu_ps(dst + i, f);
    }
    for (; i < n; i++)
        dst[i] = pa__dtype_get(t, src, i);
}
#endif

void pa__widen(pa_dtype t, const void *src, size_t n, float *dst)
{
    if (t == PA_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
#if PA_DT_X86
    if (pa__cpu_avx2()) {
        widen_avx2(t, (const uint16_t *)src, n, dst);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = pa__dtype_get(t, src, i);
}
