/* half.c - see half.h.
 *
 * Narrowing goes through double, where float32 and every JSON number are
 * exact: the significand is scaled to the target's width by ldexp (exact),
 * rounded once by rint (to nearest even, the default rounding mode), and a
 * carry out of the significand moves the exponent. Widening is bit
 * arithmetic; the bulk f16 widening uses F16C's vcvtph2ps when the CPU has
 * it, which gives the same bits (both are exact).
 */
#include "codec/half.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define HALF_X86 1
#else
#define HALF_X86 0
#endif

float srv_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    float f;
    if (e == 0x1f) {
        /* inf, or a NaN with its payload, quiet (as vcvtph2ps makes it) */
        bits = sign | 0x7f800000u | (m << 13) | (m != 0 ? 0x00400000u : 0);
    } else if (e != 0) {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        bits = sign;
    } else {
        /* subnormal, m * 2^-24: normalise the significand */
        uint32_t shift = 0;
        while (!(m & 0x400u)) {
            m <<= 1;
            shift++;
        }
        bits = sign | ((113u - shift) << 23) | ((m & 0x3ffu) << 13);
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

float srv_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* value = sign * q * 2^(e - frac_bits) with q in [2^frac_bits, 2^(frac_bits+1))
 * for normals, into the type's bits; emin and emax are the type's exponent
 * range, frac_bits its fraction width. */
static uint16_t narrow(double d, int frac_bits, int emin, int emax, uint16_t quiet_nan)
{
    uint64_t x;
    uint16_t sign;
    double a = fabs(d), q;
    int e;
    memcpy(&x, &d, sizeof x);
    sign = (uint16_t)((x >> 48) & 0x8000u);
    if (isnan(d))
        return (uint16_t)(sign | quiet_nan);
    if (isinf(d))
        return (uint16_t)(sign | ((uint16_t)((emax - emin + 2) << frac_bits))); /* inf */
    if (a == 0.0)
        return sign;
    e = ilogb(a);
    if (e < emin) {
        /* subnormal: a multiple of 2^(emin - frac_bits) */
        q = rint(ldexp(a, frac_bits - emin));
        return (uint16_t)(sign | (uint16_t)q); /* q == 2^frac_bits is the smallest normal */
    }
    q = rint(ldexp(a, frac_bits - e));
    if (q == ldexp(1.0, frac_bits + 1)) { /* rounded up past the significand */
        q = ldexp(1.0, frac_bits);
        e++;
    }
    if (e > emax)
        return (uint16_t)(sign | ((uint16_t)((emax - emin + 2) << frac_bits)));
    return (uint16_t)(sign | (uint16_t)((e - emin + 1) << frac_bits) |
                      (uint16_t)(q - ldexp(1.0, frac_bits)));
}

uint16_t srv_f64_to_f16(double d)
{
    return narrow(d, 10, -14, 15, 0x7e00u);
}

uint16_t srv_f64_to_bf16(double d)
{
    return narrow(d, 7, -126, 127, 0x7fc0u);
}

/* From float32 by bit arithmetic (the answers and lifted JSON numbers go
 * this way, so it must be fast): the same results as the double path,
 * which the tests check over every value and midpoint. */
uint16_t srv_f32_to_f16(float f)
{
    uint32_t u, sign, e, m, r;
    memcpy(&u, &f, sizeof u);
    sign = (u >> 16) & 0x8000u;
    e = (u >> 23) & 0xffu;
    m = u & 0x7fffffu;
    if (e == 0xff) /* inf, or NaN made quiet */
        return (uint16_t)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));
    if (e >= 143) /* >= 65536 */
        return (uint16_t)(sign | 0x7c00u);
    if (e < 113) { /* below 2^-14: a multiple of 2^-24, or zero */
        uint32_t shift, sig = m | 0x800000u, q, rem, half;
        if (e < 102) /* below 2^-25 */
            return (uint16_t)sign;
        shift = 126 - e;
        q = sig >> shift;
        rem = sig & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    r = ((e - 112) << 10) | (m >> 13);
    if ((m & 0x1fffu) > 0x1000u || ((m & 0x1fffu) == 0x1000u && (r & 1)))
        r++; /* a carry into the exponent is right; past 0x7bff it is infinity */
    return (uint16_t)(sign | r);
}

uint16_t srv_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN, made quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

int srv_f32_is_tie(float f, int bf16)
{
    uint32_t u, e, m;
    memcpy(&u, &f, sizeof u);
    e = (u >> 23) & 0xffu;
    m = u & 0x7fffffu;
    if (e == 0xff)
        return 0;
    if (bf16)
        return (u & 0xffffu) == 0x8000u;
    if (e >= 143 || e < 102) /* to infinity or to zero, never halfway */
        return 0;
    if (e < 113) {
        uint32_t shift = 126 - e, sig = m | 0x800000u;
        return (sig & ((1u << shift) - 1)) == 1u << (shift - 1);
    }
    return (m & 0x1fffu) == 0x1000u;
}

/* The loops of srv_f32_round_through_half, each branch-free: a tie keeps
 * its bits, anything else takes its rounded ones; the flags collect ties
 * and values past the range. */
static size_t round_through_bf16(float *x, size_t n, uint32_t *bad)
{
    size_t ties = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u, r;
        memcpy(&u, &x[i], sizeof u);
        const uint32_t tie = (u & 0xffffu) == 0x8000u;
        r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        *bad |= (u & 0x7f800000u) == 0x7f800000u || (r & 0x7f800000u) == 0x7f800000u;
        r = tie ? u : r;
        ties += tie;
        memcpy(&x[i], &r, sizeof r);
    }
    return ties;
}

static size_t round_through_f16(float *x, size_t n, uint32_t *bad)
{
    size_t ties = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u, r, sub_bits;
        memcpy(&u, &x[i], sizeof u);
        const uint32_t e = (u >> 23) & 0xffu, a = u & 0x7fffffffu, sign = u & 0x80000000u;
        /* Below 2^-14 (f16's subnormals, and what rounds to zero): to a
         * multiple of 2^-24 by one float addition, which rounds to nearest
         * even at 2^-24 in [0.5, 1). */
        float fa;
        memcpy(&fa, &a, sizeof fa);
        const float sub = (fa + 0.5f) - 0.5f;
        memcpy(&sub_bits, &sub, sizeof sub_bits);
        /* From 2^-14: 11 significant bits, rounded at bit 13 of the float
         * (a carry into the exponent is right; to 2^16 is past the range). */
        r = e < 113 ? sub_bits : (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;
        *bad |= e == 0xffu || r >= 0x47800000u; /* not finite, or 2^16 and up */
        /* srv_f32_is_tie, without its branches. */
        const uint32_t sh = e >= 102 && e < 113 ? 126 - e : 31;
        const uint32_t sig = (u & 0x7fffffu) | 0x800000u;
        const uint32_t tie = (e >= 113 && e < 143 && (u & 0x1fffu) == 0x1000u) ||
                             (sh < 31 && (sig & ((1u << sh) - 1)) == 1u << (sh - 1));
        r = tie ? u : (r | sign);
        ties += tie;
        memcpy(&x[i], &r, sizeof r);
    }
    return ties;
}

size_t srv_f32_round_through_half(float *x, size_t n, int bf16)
{
    uint32_t bad = 0;
    const size_t ties = bf16 ? round_through_bf16(x, n, &bad) : round_through_f16(x, n, &bad);
    return bad ? SIZE_MAX : ties;
}

/* ------------------------------------------------------------------------- */
/* Bulk widening                                                             */
/* ------------------------------------------------------------------------- */

static void f16_portable(const unsigned char *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = srv_f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
}

#if HALF_X86
__attribute__((target("avx,f16c"))) static void f16_native(const unsigned char *src, float *dst,
                                                           size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    f16_portable(src + 2 * i, dst + i, n - i);
}
#endif

#if HALF_X86
/* CPUID leaf 1: F16C (ecx bit 29) and AVX (28), which the OS must save
 * (OSXSAVE, bit 27, and XCR0's SSE and AVX state). Asked directly: clang 14's
 * __builtin_cpu_supports does not know "f16c". */
static int detect_f16c(void)
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if ((c & (7u << 27)) != (7u << 27))
        return 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u;
}
#endif

int srv_half_native(void)
{
#if HALF_X86
    /* cpuid traps to the hypervisor on a VM: asked once. A relaxed atomic
     * (threads may race to store the same answer). */
    static _Atomic int native = -1;
    int n = atomic_load_explicit(&native, memory_order_relaxed);
    if (n < 0) {
        n = detect_f16c();
        atomic_store_explicit(&native, n, memory_order_relaxed);
    }
    return n;
#else
    return 0;
#endif
}

#if HALF_X86
__attribute__((target("avx,f16c"))) static void f16_narrow_native(const float *src, uint16_t *dst,
                                                                  size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = srv_f32_to_f16(src[i]);
}
#endif

void srv_f32_to_half_n(const float *src, uint16_t *dst, size_t n, int bf16)
{
    if (bf16) {
        /* srv_f32_to_bf16 with its NaN case a select, not a branch */
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &src[i], sizeof u);
            const uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
            const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
            dst[i] = (uint16_t)(nan ? (u >> 16) | 0x40u : r);
        }
        return;
    }
#if HALF_X86
    if (srv_half_native()) {
        f16_narrow_native(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = srv_f32_to_f16(src[i]);
}

void srv_f16_to_f32_n(const void *src, float *dst, size_t n)
{
#if HALF_X86
    if (srv_half_native()) {
        f16_native(src, dst, n);
        return;
    }
#endif
    f16_portable(src, dst, n);
}

void srv_bf16_to_f32_n(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = ((uint32_t)s[2 * i] | (uint32_t)s[2 * i + 1] << 8) << 16;
        memcpy(&dst[i], &bits, sizeof bits);
    }
}
