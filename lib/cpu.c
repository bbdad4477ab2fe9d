/* cpu.c - see cpu.h. */
#include "cpu.h"

#include "posattn.h"

#include <stdatomic.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <xmmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

static bool detect(void)
{
    const char *force = getenv("POSATTN_KERNEL");
    if (force != NULL && (strcmp(force, "portable") == 0 || strcmp(force, "avx2") == 0))
        return false;
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

bool pa__cpu_avx512(void)
{
    /* -1 until the first call; racing first calls store the same answer. */
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = detect() ? 1 : 0;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v == 1;
}

static bool detect_avx2(void)
{
    const char *force = getenv("POSATTN_KERNEL");
    if (force != NULL && strcmp(force, "portable") == 0)
        return false;
#if defined(__x86_64__) && defined(__GNUC__)
    /* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
     * does not know "f16c". */
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
           (c & (1u << 29)) != 0;
#else
    return false;
#endif
}

bool pa__cpu_avx2(void)
{
    static _Atomic int cached = -1; /* as in pa__cpu_avx512 */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = detect_avx2() ? 1 : 0;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v == 1;
}

/* A feature cached as in pa__cpu_avx512: -1 until the first call. */
static bool cached_feature(_Atomic int *cached, bool (*detect_fn)(void))
{
    int v = atomic_load_explicit(cached, memory_order_relaxed);
    if (v < 0) {
        v = detect_fn() ? 1 : 0;
        atomic_store_explicit(cached, v, memory_order_relaxed);
    }
    return v == 1;
}

static bool detect_avx512_bf16(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    /* BW and VL too, for the packings' 16-bit stores (every CPU with
     * AVX-512 BF16 has them). */
    return pa__cpu_avx512() && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
           (a & (1u << 5)) != 0;
#else
    return false;
#endif
}

bool pa__cpu_avx512_bf16(void)
{
    static _Atomic int cached = -1;
    return cached_feature(&cached, detect_avx512_bf16);
}

static bool detect_avx2_fma(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return pa__cpu_avx2() && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

bool pa__cpu_avx2_fma(void)
{
    static _Atomic int cached = -1;
    return cached_feature(&cached, detect_avx2_fma);
}

const char *pa_kernel_name(void)
{
    return pa__cpu_avx512() ? "avx512" : pa__cpu_avx2_fma() ? "avx2" : "portable";
}

unsigned pa__fp_enter(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8000u); /* FTZ */
    return saved;
#else
    return 0;
#endif
}

void pa__fp_leave(unsigned saved)
{
#if defined(__x86_64__) && defined(__GNUC__)
    _mm_setcsr(saved);
#else
    (void)saved;
#endif
}
