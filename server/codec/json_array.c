/* json_array.c - see json_array.h. */
#include "codec/json_array.h"

#include "codec/float32.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define SRV_LIFT_X86 1
#include <immintrin.h>
#endif

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static size_t skip_space(const char *s, size_t len, size_t p)
{
    while (p < len && srv_json_is_space(s[p]))
        p++;
    return p;
}

/* ------------------------------------------------------------------------- */
/* Numbers                                                                   */
/* ------------------------------------------------------------------------- */

/* 10^0 .. 10^22: exact in double. */
static const double pow10_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 lift_u128;

/* 10^0 .. 10^19: exact in 64 bits. */
static const uint64_t pow10_u64_19[20] = {1u,
                                          10u,
                                          100u,
                                          1000u,
                                          10000u,
                                          100000u,
                                          1000000u,
                                          10000000u,
                                          100000000u,
                                          1000000000u,
                                          10000000000u,
                                          100000000000u,
                                          1000000000000u,
                                          10000000000000u,
                                          100000000000000u,
                                          1000000000000000u,
                                          10000000000000000u,
                                          100000000000000000u,
                                          1000000000000000000u,
                                          10000000000000000000u};

/* The double nearest m / 10^k, ties to even, as strtod rounds: for m > 0
 * below 2^64 and 1 <= k <= 22, where m may exceed 2^53 (17 to 19 digits,
 * as Python writes a float32 widened to double). The quotient is taken
 * exactly in 128-bit integers with 54 or 55 bits, m 2^s / 10^k (m 2^s
 * fits: m has lm bits, 10^22 74, and s = 54 + 74 - lm at most; for s < 0,
 * m / (10^k 2^-s)), then rounded to 53 with the remainder as the sticky
 * bit. */
__attribute__((noinline)) static double div_pow10(uint64_t m, int k)
{
    /* The bits of 10^k: floor(k log2(10)) + 1. */
    static const unsigned char bits10[23] = {1,  4,  7,  10, 14, 17, 20, 24, 27, 30, 34, 37,
                                             40, 44, 47, 50, 54, 57, 60, 64, 67, 70, 74};
    const lift_u128 d =
        k <= 19 ? (lift_u128)pow10_u64_19[k] : (lift_u128)pow10_u64_19[19] * pow10_u64_19[k - 19];
    const int ld = bits10[k], lm = 64 - __builtin_clzll(m);
    lift_u128 q, r;
    int s, drop;
    uint64_t mant, half, low;
    s = 54 + ld - lm; /* q in [2^53, 2^55) */
    if (s >= 0) {
        q = ((lift_u128)m << s) / d;
        r = ((lift_u128)m << s) % d;
    } else { /* 19 digits over a small 10^k: m / (d 2^-s), -s <= 9 */
        q = (lift_u128)m / (d << -s);
        r = (lift_u128)m % (d << -s);
    }
    drop = (q >> 54) != 0 ? 2 : 1;
    mant = (uint64_t)(q >> drop);
    half = (uint64_t)1 << (drop - 1);
    low = (uint64_t)q & ((half << 1) - 1);
    if (low > half || (low == half && (r != 0 || (mant & 1) != 0)))
        mant++; /* 2^53 at most: still exact */
    {
        /* mant 2^(drop - s), a normal double (at least 10^-22): its bits
         * built here, where ldexp is a libm call. A mant of 2^53 carries
         * into the exponent field, as it should. */
        const uint64_t bits =
            ((uint64_t)(drop - s + 52 + 1023) << 52) + (mant - ((uint64_t)1 << 52));
        double v;
        memcpy(&v, &bits, sizeof v);
        return v;
    }
}

/* floor(2^(127 + b_k) / 10^k) for k = 1 .. 22, b_k the bits of 10^k (so
 * each has its top bit, bit 127, set), as two 64-bit halves: 10^-k to 128
 * bits, for mul_pow10. */
static const uint64_t recip10[23][2] = {
    {0, 0},
    {0xccccccccccccccccu, 0xccccccccccccccccu}, /* 10^-1 */
    {0xa3d70a3d70a3d70au, 0x3d70a3d70a3d70a3u}, /* 10^-2 */
    {0x83126e978d4fdf3bu, 0x645a1cac083126e9u}, /* 10^-3 */
    {0xd1b71758e219652bu, 0xd3c36113404ea4a8u}, /* 10^-4 */
    {0xa7c5ac471b478423u, 0x0fcf80dc33721d53u}, /* 10^-5 */
    {0x8637bd05af6c69b5u, 0xa63f9a49c2c1b10fu}, /* 10^-6 */
    {0xd6bf94d5e57a42bcu, 0x3d32907604691b4cu}, /* 10^-7 */
    {0xabcc77118461cefcu, 0xfdc20d2b36ba7c3du}, /* 10^-8 */
    {0x89705f4136b4a597u, 0x31680a88f8953030u}, /* 10^-9 */
    {0xdbe6fecebdedd5beu, 0xb573440e5a884d1bu}, /* 10^-10 */
    {0xafebff0bcb24aafeu, 0xf78f69a51539d748u}, /* 10^-11 */
    {0x8cbccc096f5088cbu, 0xf93f87b7442e45d3u}, /* 10^-12 */
    {0xe12e13424bb40e13u, 0x2865a5f206b06fb9u}, /* 10^-13 */
    {0xb424dc35095cd80fu, 0x538484c19ef38c94u}, /* 10^-14 */
    {0x901d7cf73ab0acd9u, 0x0f9d37014bf60a10u}, /* 10^-15 */
    {0xe69594bec44de15bu, 0x4c2ebe687989a9b3u}, /* 10^-16 */
    {0xb877aa3236a4b449u, 0x09befeb9fad487c2u}, /* 10^-17 */
    {0x9392ee8e921d5d07u, 0x3aff322e62439fcfu}, /* 10^-18 */
    {0xec1e4a7db69561a5u, 0x2b31e9e3d06c32e5u}, /* 10^-19 */
    {0xbce5086492111aeau, 0x88f4bb1ca6bcf584u}, /* 10^-20 */
    {0x971da05074da7beeu, 0xd3f6fc16ebca5e03u}, /* 10^-21 */
    {0xf1c90080baf72cb1u, 0x5324c68b12dd6338u}, /* 10^-22 */
};

/* div_pow10's double by multiplication, where it is certain: false when
 * the product cannot decide the rounding (then div_pow10 does). With m
 * shifted up to m' = m 2^z (top bit 63) and T = recip10[k], the exact
 * X = m' 2^(127 + b_k) / 10^k lies in (m' T, m' T + m'), so the top 128
 * bits H of the 192-bit product m' T are X's or one less. The double takes
 * H's top 53 bits; the t bits below them (74 or 75) round it: down when
 * H's tail is below half less one, up when it is half or more (X, past
 * the product, is then past half; a tail of all ones carrying over rounds
 * up either way). A tail of half less one, where every exact tie falls
 * (about 2^-74 of other numbers), goes to the division. Eisel and Lemire's
 * method ("Number Parsing at a Gigabyte per Second", 2021) with its table
 * cut to the 22 powers the division served: one 64 x 128-bit product for
 * two 128-bit divisions. */
static inline bool mul_pow10(uint64_t m, int k, double *out)
{
    static const unsigned char bits10[23] = {1,  4,  7,  10, 14, 17, 20, 24, 27, 30, 34, 37,
                                             40, 44, 47, 50, 54, 57, 60, 64, 67, 70, 74};
    const int z = __builtin_clzll(m);
    const uint64_t mm = m << z;
    const lift_u128 lo = (lift_u128)mm * recip10[k][1], hi = (lift_u128)mm * recip10[k][0];
    const lift_u128 h = hi + (lo >> 64); /* the product's top 128 bits, m' T >> 64 */
    /* t is 74 or 75, so the tail's top part and half are in H's low bits
     * (half's low word is 0): the comparisons in 64 bits, and the rounding
     * without a branch (it goes either way, at random, number by number). */
    const uint64_t H = (uint64_t)(h >> 64), Lw = (uint64_t)h;
    const int t = (int)(H >> 63) + 74, th = t - 64;
    const uint64_t tail_hi = H & (((uint64_t)1 << th) - 1), half_hi = (uint64_t)1 << (th - 1);
    uint64_t mant = H >> th;
    if (tail_hi == half_hi - 1 && Lw == UINT64_MAX)
        return false; /* a tail of half less one */
    mant += tail_hi >= half_hi; /* 2^53 at most: carries into the exponent below */
    {
        /* x = m / 10^k = mant 2^(t + 64 - 127 - b_k - z). */
        const int e = t + 64 - 127 - bits10[k] - z;
        const uint64_t bits = ((uint64_t)(e + 52 + 1023) << 52) + (mant - ((uint64_t)1 << 52));
        memcpy(out, &bits, sizeof *out);
        return true;
    }
}
#endif

/* m 10^e10 as the double strtod would give, when it can be had without
 * it: m below 2^53 and |e10| at most 22, one correctly rounded operation
 * on exact operands (Clinger 1990); m of up to 19 digits and e10 in
 * [-22, -1], mul_pow10 or div_pow10. False otherwise. */
static inline bool decimal_double(uint64_t m, int e10, double *out)
{
    if (m <= ((uint64_t)1 << 53) && e10 >= -22 && e10 <= 22) {
        const double d = (double)m;
        *out = e10 < 0 ? d / pow10_exact[-e10] : d * pow10_exact[e10];
        return true;
    }
#if defined(__SIZEOF_INT128__)
    if (e10 >= -22 && e10 < 0) {
        if (!mul_pow10(m, -e10, out))
            *out = div_pow10(m, -e10);
        return true;
    }
#endif
    return false;
}

/* One number in JSON's grammar, -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?, at
 * s[*pos], to the double strtod would give: decimal_double when its 19
 * significant digits hold it all; otherwise strtod itself. False for
 * anything else. */
static bool parse_number(const char *s, size_t len, size_t *pos, double *out)
{
    size_t p = *pos;
    const size_t start = p;
    bool neg = false, exact = true;
    uint64_t m = 0;
    int digits = 0;
    long e10 = 0;

    if (p < len && s[p] == '-') {
        neg = true;
        p++;
    }
    if (p >= len || !is_digit(s[p]))
        return false;
    if (s[p] == '0') {
        p++;
    } else {
        for (; p < len && is_digit(s[p]); p++) {
            if (digits < 19) {
                m = m * 10 + (uint64_t)(s[p] - '0');
                digits++;
            } else {
                e10++;
                exact &= s[p] == '0';
            }
        }
    }
    if (p < len && s[p] == '.') {
        p++;
        if (p >= len || !is_digit(s[p]))
            return false;
        for (; p < len && is_digit(s[p]); p++) {
            if (m == 0 && s[p] == '0') {
                e10--; /* a leading zero: not a significant digit */
            } else if (digits < 19) {
                m = m * 10 + (uint64_t)(s[p] - '0');
                digits++;
                e10--;
            } else {
                exact &= s[p] == '0';
            }
        }
    }
    if (p < len && (s[p] == 'e' || s[p] == 'E')) {
        bool eneg = false;
        long x = 0;
        p++;
        if (p < len && (s[p] == '+' || s[p] == '-'))
            eneg = s[p++] == '-';
        if (p >= len || !is_digit(s[p]))
            return false;
        for (; p < len && is_digit(s[p]); p++)
            x = x < 100000 ? x * 10 + (s[p] - '0') : x;
        e10 += eneg ? -x : x;
    }
    /* cJSON reads at most 63 characters of a number and rejects the body
     * when one is longer: so does this (by leaving it to cJSON). */
    if (p - start > 63)
        return false;
    *pos = p;
    if (exact && e10 >= -22 && e10 <= 22 && decimal_double(m, (int)e10, out)) {
        *out = neg ? -*out : *out;
        return true;
    }
    {
        char buf[64];
        const size_t n = p - start;
        memcpy(buf, s + start, n);
        buf[n] = '\0';
        *out = strtod(buf, NULL);
        return true;
    }
}

/* Eight bytes of s, the first in the low byte (the load below is only used
 * on little-endian hosts, where that is what memcpy gives). */
static inline uint64_t load8(const char *s)
{
    uint64_t v;
    memcpy(&v, s, sizeof v);
    return v;
}

/* How many of v's bytes, from the low one, are ASCII digits (0..8): a byte
 * is a digit when its high nibble is 3 and adding 6 keeps it 3. A carry out
 * of a byte >= 0xFA only reaches later bytes, past the first non-digit. */
static inline int leading_digits(uint64_t v)
{
    const uint64_t hi = 0xF0F0F0F0F0F0F0F0u, three = 0x3030303030303030u;
    uint64_t nd = ((v & hi) ^ three) | (((v + 0x0606060606060606u) & hi) ^ three);
    return nd == 0 ? 8 : __builtin_ctzll(nd) / 8;
}

/* The value of the first k (1..8) digit bytes of v (Lemire's SWAR: the
 * digits moved to the high bytes, zeros below them as leading zeros, then
 * pairs, quads and the octet combined with three multiplications). */
static inline uint64_t digits_value(uint64_t v, int k)
{
    v = (v << (8 * (8 - k))) & 0x0F0F0F0F0F0F0F0Fu;
    v = (v * 2561) >> 8;
    v = ((v & 0x00FF00FF00FF00FFu) * 6553601) >> 16;
    return ((v & 0x0000FFFF0000FFFFu) * 42949672960001u) >> 32;
}

static const uint64_t pow10_u64[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* ------------------------------------------------------------------------- */
/* Arrays                                                                    */
/* ------------------------------------------------------------------------- */

static bool push(srv_json_floats *a, float v, size_t text_left)
{
    if (a->n == a->cap) {
        /* First: as many as the text can hold (a number and a comma take
         * two bytes at least), up to 4096; then double. */
        size_t cap = a->cap ? a->cap * 2 : text_left / 2 + 1 < 4096 ? text_left / 2 + 1 : 4096;
        float *d = realloc(a->data, cap * sizeof *d);
        if (d == NULL)
            return false;
        a->data = d;
        a->cap = cap;
    }
    a->data[a->n++] = v;
    return true;
}

/* Room for at least more floats past a->n (the first allocation as push's). */
static bool reserve(srv_json_floats *a, size_t more, size_t text_left)
{
    if (a->cap - a->n >= more)
        return true;
    size_t cap = a->cap ? a->cap * 2 : text_left / 2 + 1 < 4096 ? text_left / 2 + 1 : 4096;
    if (cap < a->n + more)
        cap = a->n + more;
    float *d = realloc(a->data, cap * sizeof *d);
    if (d == NULL)
        return false;
    a->data = d;
    a->cap = cap;
    return true;
}

bool srv_json_number(const char *s, size_t len, double *out)
{
    size_t p = 0;
    return parse_number(s, len, &p, out) && p == len;
}

static bool forced_scalar; /* srv_json_array_force_scalar's */

void srv_json_array_force_scalar(bool on)
{
    forced_scalar = on;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* Bit i set when p[i] is ',' or ']', for i in 0..63. */
static inline uint64_t separators64(const char *p)
{
    uint64_t m = 0;
#if SRV_LIFT_X86
    const __m128i comma = _mm_set1_epi8(','), close = _mm_set1_epi8(']');
    for (int i = 0; i < 4; i++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
        const __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, close));
        m |= (uint64_t)(uint32_t)_mm_movemask_epi8(hit) << (16 * i);
    }
#else
    for (int i = 0; i < 64; i++)
        m |= (uint64_t)(p[i] == ',' || p[i] == ']') << i;
#endif
    return m;
}

/* The unsigned number c[0..n), n known (the separator after it found
 * already), when it is D{1,7}(.D{1,24})?([eE][+-]?D{1,2})? without a
 * leading zero, with 19 digits at most and a power of ten e10 (the
 * exponent less the fraction's digits) decimal_double takes: its double
 * into *out, true (the double parse_number gives). False for anything
 * else (parse_number's to read or refuse). Reads at most 8 bytes past
 * c + n. */
__attribute__((always_inline)) static inline bool short_number(const char *c, size_t n, double *out)
{
    const char *const end = c + n;
    uint64_t m, v;
    int k, ki, kf = 0, x = 0;
    if (n >= 3 && c[1] == '.' && (unsigned)(c[0] - '0') <= 9) {
        m = (uint64_t)(c[0] - '0'); /* D.F...: the usual shape, without the digit count */
        ki = m != 0;                /* 0.F: the 0 is no significant digit */
        c++;
    } else {
        v = load8(c);
        ki = leading_digits(v);
        if (ki == 0 || ki == 8 || (ki > 1 && *c == '0'))
            return false;
        m = digits_value(v, ki);
        c += ki;
    }
    if (c < end && *c == '.') {
        /* Eight digits a load; past 19 in all m may have wrapped, and the
         * number is refused below. */
        c++;
        v = load8(c);
        kf = leading_digits(v);
        if (kf == 0)
            return false; /* "1." */
        m = m * pow10_u64[kf] + digits_value(v, kf);
        c += kf;
        k = kf;
        for (int i = 0; i < 2 && __builtin_expect(k == 8, 0); i++) { /* a longer fraction */
            v = load8(c);
            k = leading_digits(v);
            if (k > 0) {
                m = m * pow10_u64[k] + digits_value(v, k);
                c += k;
                kf += k;
            }
        }
        if (ki + kf > 19)
            return false;
    }
    if (c < end) { /* an exponent, to the separator: [eE][+-]?D{1,2} */
        const char *q = c + 1;
        const bool eneg = *q == '-';
        if ((*c | 0x20) != 'e')
            return false;
        q += *q == '-' || *q == '+';
        if (end - q == 1 && is_digit(q[0]))
            x = q[0] - '0';
        else if (end - q == 2 && is_digit(q[0]) && is_digit(q[1]))
            x = 10 * (q[0] - '0') + (q[1] - '0');
        else
            return false;
        x = eneg ? -x : x;
    }
    return decimal_double(m, x - kf, out);
}

#if SRV_LIFT_X86
#define SRV_LIFT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi,bmi2")))

/* 0..63, a byte each. */
static const unsigned char lift_iota[64] = {
    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
    22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
    44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

/* Eight numbers at once: the eight elements from s[*at] on, which end at
 * the first eight separators (',' or ']') of the 128 bytes from there,
 * into out[0..8), when each is -?D+(.D+)? of at most 8 characters after
 * its sign (at most one space before it, no leading zero) and only the
 * last separator may be ']'. Then true, with *at past the eighth separator
 * and *end at it. False, nothing changed, for anything else (short_number
 * then reads them one by one). s must have 128 bytes from *at.
 *
 * All in vector registers (AVX-512 VBMI2, VBMI, BW): the separators'
 * offsets compressed out of the two 64-byte masks (vpcompressb), each
 * number's first bytes gathered from the 128 (vpermi2b), its space and
 * sign skipped, then in 64-bit lanes: the checks, the dot taken out (the
 * bytes above it moved down one), the digits right-aligned and combined by
 * pairs, quads and the octet (vpmaddubsw, vpmaddwd, vpmuludq), then the
 * same operations as short_number's caller: the integer to double, one
 * division by the exact power of ten, the sign, the float conversion. */
static SRV_LIFT_AVX512 bool eight_numbers(const char *s, size_t *at, size_t *end, float *out)
{
    const size_t p = *at;
    const __m512i w0 = _mm512_loadu_si512(s + p), w1 = _mm512_loadu_si512(s + p + 64);
    const __m512i comma = _mm512_set1_epi8(','), close = _mm512_set1_epi8(']');
    const __mmask64 close0 = _mm512_cmpeq_epi8_mask(w0, close);
    const __mmask64 close1 = _mm512_cmpeq_epi8_mask(w1, close);
    const __mmask64 sep0 = _mm512_cmpeq_epi8_mask(w0, comma) | close0;
    const __mmask64 sep1 = _mm512_cmpeq_epi8_mask(w1, comma) | close1;
    const int c0 = __builtin_popcountll(sep0);
    if (c0 + __builtin_popcountll(sep1) < 8)
        return false;
    const __m512i iota = _mm512_loadu_si512(lift_iota);
    const __m512i one = _mm512_set1_epi64(1);
    /* The first eight separators' offsets, in bytes 0..7: those of the
     * first 64 bytes, then (from byte c0 on) those of the next 64. */
    const __m512i p0 = _mm512_maskz_compress_epi8(sep0, iota);
    const __m512i p1 =
        _mm512_maskz_compress_epi8(sep1, _mm512_add_epi8(iota, _mm512_set1_epi8(64)));
    const __m512i sel = _mm512_mask_add_epi8(iota, c0 >= 8 ? 0 : ~(__mmask64)0 << c0, iota,
                                             _mm512_set1_epi8((char)(64 - c0)));
    const __m128i e8 = _mm512_castsi512_si128(_mm512_permutex2var_epi8(p0, sel, p1));
    const __m512i e = _mm512_cvtepu8_epi64(e8);
    /* The eighth from the masks (pdep: the eighth set bit), which is
     * quicker than from e8: the next call's loads wait for it. */
    const size_t eighth = c0 >= 8
                              ? (size_t)_tzcnt_u64(_pdep_u64((uint64_t)1 << 7, sep0))
                              : 64 + (size_t)_tzcnt_u64(_pdep_u64((uint64_t)1 << (7 - c0), sep1));
    /* No ']' before the eighth separator. */
    const size_t first_close =
        close0 != 0 ? (size_t)_tzcnt_u64(close0) : 64 + (size_t)_tzcnt_u64(close1);
    if (first_close < eighth)
        return false;
    /* Each number's start: 0, then one past the separator before it; its
     * first eight bytes (an index of 128 and more wraps: those bytes are
     * past its separator, and not read). */
    const __m512i a = _mm512_maskz_add_epi64(
        0xFE, _mm512_permutexvar_epi64(_mm512_set_epi64(6, 5, 4, 3, 2, 1, 0, 0), e), one);
    const __m512i spread = _mm512_set1_epi64(0x0706050403020100);
    const __m512i bcast = _mm512_set4_epi32(0x08080808, 0x08080808, 0, 0);
    const __m512i head =
        _mm512_permutex2var_epi8(w0, _mm512_add_epi8(_mm512_shuffle_epi8(a, bcast), spread), w1);
    /* One space, then a sign: skipped; the number from c on. */
    const uint64_t lane0 = 0x0101010101010101u;
    const uint64_t sp = _mm512_cmpeq_epi8_mask(head, _mm512_set1_epi8(' ')) & lane0;
    const uint64_t mi = _mm512_cmpeq_epi8_mask(head, _mm512_set1_epi8('-'));
    const uint64_t ng = (mi & lane0 & ~sp) | ((mi >> 1) & sp);
    const __mmask8 space = (__mmask8)_pext_u64(sp, lane0), neg = (__mmask8)_pext_u64(ng, lane0);
    const __m512i c = _mm512_mask_add_epi64(_mm512_mask_add_epi64(a, space, a, one), neg,
                                            _mm512_mask_add_epi64(a, space, a, one), one);
    const __m512i n = _mm512_sub_epi64(e, c);
    /* 1 to 8 characters each (a number past its separator wraps). */
    if (_mm512_cmpgt_epu64_mask(_mm512_sub_epi64(n, one), _mm512_set1_epi64(7)) != 0)
        return false;
    const __m512i r =
        _mm512_permutex2var_epi8(w0, _mm512_add_epi8(_mm512_shuffle_epi8(c, bcast), spread), w1);
    const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    /* The bytes of each number: the low len of its lane. */
    const __m512i lmask = _mm512_srlv_epi64(
        _mm512_set1_epi64(-1), _mm512_slli_epi64(_mm512_sub_epi64(_mm512_set1_epi64(8), n), 3));
    const __mmask64 in = _mm512_test_epi8_mask(lmask, lmask);
    const __m512i t = _mm512_sub_epi8(r, _mm512_set1_epi8('0'));
    const __mmask64 dig = _mm512_cmple_epu8_mask(t, _mm512_set1_epi8(9)) & in;
    const __mmask64 dot = _mm512_cmpeq_epi8_mask(r, _mm512_set1_epi8('.')) & in;
    const __mmask64 lead0 = _mm512_cmpeq_epi8_mask(t, zero) & dig;
    const uint64_t first = 0x0101010101010101u;
    /* The last byte of each number (a lane's top bit never comes from the
     * next lane's first). */
    const uint64_t last = in & ~((in >> 1) & 0x7F7F7F7F7F7F7F7Fu);
    /* Only digits and dots; no dot first or last; no leading zero. */
    if ((in & ~(dig | dot)) != 0 || (dot & (first | last)) != 0 ||
        (lead0 & first & (dig >> 1)) != 0)
        return false;
    /* At most one dot a number: the dots of each lane counted. */
    const __m512i dots = _mm512_sad_epu8(_mm512_maskz_mov_epi8(dot, ones), zero);
    if (_mm512_cmpgt_epu64_mask(dots, _mm512_set1_epi64(1)) != 0)
        return false;

    /* The digits, the dot's byte and those past the number zero; the bytes
     * below the dot kept, those above moved down one. */
    const __m512i dv = _mm512_maskz_mov_epi8(dot, _mm512_set1_epi8(-1));
    const __m512i below = _mm512_andnot_si512(dv, _mm512_sub_epi64(dv, _mm512_set1_epi64(1)));
    const __m512i d = _mm512_maskz_mov_epi8(dig, t);
    const __m512i joined = _mm512_or_si512(_mm512_and_si512(d, below),
                                           _mm512_srli_epi64(_mm512_andnot_si512(below, d), 8));
    /* Digits before the dot (all of them without one), and after it. */
    const __mmask64 lo = _mm512_test_epi8_mask(below, below) & in;
    const __m512i nlo = _mm512_sad_epu8(_mm512_maskz_mov_epi8(lo, ones), zero);
    const __m512i frac = _mm512_sub_epi64(_mm512_sub_epi64(n, nlo), dots);
    const __m512i ndig = _mm512_sub_epi64(n, dots);
    /* Right-aligned (leading zero bytes), then pairs, quads, the octet. */
    const __m512i ra = _mm512_sllv_epi64(
        joined, _mm512_slli_epi64(_mm512_sub_epi64(_mm512_set1_epi64(8), ndig), 3));
    const __m512i pairs = _mm512_maddubs_epi16(ra, _mm512_set1_epi16(0x010A));
    const __m512i quads = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x00010064));
    const __m512i m = _mm512_add_epi64(_mm512_mul_epu32(quads, _mm512_set1_epi64(10000)),
                                       _mm512_srli_epi64(quads, 32));
    /* Exact: m < 10^8, the divisor 10^frac (frac <= 6) exact. */
    const __m512d pow10 = _mm512_loadu_pd(pow10_exact);
    __m512d v = _mm512_div_pd(_mm512_cvtepi32_pd(_mm512_cvtepi64_epi32(m)),
                              _mm512_permutexvar_pd(frac, pow10));
    v = _mm512_castsi512_pd(_mm512_mask_xor_epi64(_mm512_castpd_si512(v), (__mmask8)neg,
                                                  _mm512_castpd_si512(v),
                                                  _mm512_set1_epi64(INT64_MIN)));
    _mm256_storeu_ps(out, _mm512_cvtpd_ps(v));
    *at = p + eighth + 1;
    *end = p + eighth;
    return true;
}
#endif

/* Whether eight_numbers runs here. */
static bool lift_vector(void)
{
#if SRV_LIFT_X86
    /* Valgrind reports no AVX-512 here, so it runs the scalar code. */
    return !forced_scalar && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
#else
    return false;
#endif
}

/* The leading elements of the leaf array whose first element starts at
 * s[p] (just past its '[' and any spaces), appended to a, as long as each
 * is a plain -?D{1,7}(.D{1,12})? (below 2^53), after one space at most
 * (", " as Python's json.dumps writes) and followed directly by ',' or ']':
 * the loop of parse_array with the per-element costs taken out. The
 * separators of 64 bytes of text are found at once (SSE2), so each number's
 * end is known before it is read and the numbers of a window are parsed
 * independently of one another, not each after the last one's length. Each
 * number is the same double as parse_number's, one correctly rounded
 * division of exact operands, then the same float conversion. Returns the
 * position of the array's ']' with *closed set, or else of the element that
 * ended the run (anything else: newlines, an exponent, long digit runs, a
 * non-number, the text's end), where the careful loop goes on. *count: the
 * elements appended. */
static size_t parse_leaf_fast(const char *s, size_t len, size_t p, srv_json_floats *a,
                              int64_t *count, bool *closed)
{
    const size_t n0 = a->n;
    bool vector = lift_vector();

    *closed = false;
    /* A window's 64 bytes, and a number's loads up to 16 bytes past its end. */
    while (p + 96 <= len) {
        uint64_t seps;
        size_t n = a->n, at = p;
        float *data;
        if (!reserve(a, 64, len - p))
            break;
        data = a->data;
#if SRV_LIFT_X86
        /* Eight at a time while they are short; after the first eight that
         * are not (long digit runs, exponents), one at a time. */
        for (size_t e; vector && at + 128 <= len && a->cap - n >= 8; n += 8) {
            if (!eight_numbers(s, &at, &e, data + n)) {
                vector = false;
                break;
            }
            if (s[e] == ']') {
                a->n = n + 8;
                *closed = true;
                *count = (int64_t)(a->n - n0);
                return e;
            }
        }
        a->n = n;
        p = at;
        if (p + 96 > len)
            break;
        if (a->cap - n < 64)
            continue; /* room for this window's numbers first */
#else
        (void)vector;
#endif
        seps = separators64(s + p);
        if (seps == 0)
            break; /* a 64-byte element: the careful loop's */
        do {
            const size_t e = p + (size_t)__builtin_ctzll(seps);
            const char *c = s + at;
            double d;
            bool neg;
            c += *c == ' ';
            neg = *c == '-';
            c += neg;
            if (c > s + e || !short_number(c, (size_t)(s + e - c), &d)) {
                a->n = n;
                *count = (int64_t)(n - n0);
                return at;
            }
            {
                /* The sign applied without a branch: it is random in
                 * most tensors, and a mispredicted branch costs more than
                 * the number. */
                const uint64_t sign = (uint64_t)neg << 63;
                uint64_t bits;
                memcpy(&bits, &d, sizeof bits);
                bits ^= sign;
                memcpy(&d, &bits, sizeof d);
                data[n++] = (float)d;
            }
            if (s[e] == ']') {
                a->n = n;
                *closed = true;
                *count = (int64_t)(n - n0);
                return e;
            }
            at = e + 1;
            seps &= seps - 1;
        } while (seps != 0);
        a->n = n;
        p = at;
    }
    *count = (int64_t)(a->n - n0);
    return p;
}
#endif

bool srv_json_array(const char *s, size_t len, size_t *pos, int level, srv_json_floats *a)
{
    size_t p = *pos + 1;
    int64_t n = 0;
    int rejoins = 8; /* runs that may still read nothing (below) */
    if (level >= SRV_MAX_DIMS)
        return false;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    p = skip_space(s, len, p);
    if (p < len && s[p] != '[' && (a->leaf < 0 || a->leaf == level)) {
        bool closed;
        p = parse_leaf_fast(s, len, p, a, &n, &closed);
        if (n > 0)
            a->leaf = level;
        if (closed)
            goto done;
    }
#endif
    for (;;) {
        p = skip_space(s, len, p);
        if (p >= len)
            return false;
        if (s[p] == '[') {
            if (a->leaf >= 0 && a->leaf <= level)
                return false; /* numbers and arrays side by side */
            if (!srv_json_array(s, len, &p, level + 1, a))
                return false;
        } else {
            double d;
            float f;
            bool fast = false;
            if (a->leaf < 0)
                a->leaf = level;
            if (a->leaf != level)
                return false;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            {
                /* The number's characters, then short_number over them
                 * (it reads 8 bytes past their end at most). */
                const char *c = s + p + (s[p] == '-');
                size_t e = (size_t)(c - s);
                while (e < len && (is_digit(s[e]) || s[e] == '.' || (s[e] | 0x20) == 'e' ||
                                   s[e] == '+' || s[e] == '-'))
                    e++;
                if (len - e > 8 && short_number(c, (size_t)(s + e - c), &d)) {
                    d = s[p] == '-' ? -d : d;
                    p = e;
                    fast = true;
                }
            }
#endif
            if (fast)
                f = (float)d; /* below 2^53 * 10^22: within float range */
            else if (!parse_number(s, len, &p, &d) || !srv_double_to_float(d, &f))
                return false;
            if (!push(a, f, len - p))
                return false;
        }
        n++;
        p = skip_space(s, len, p);
        if (p < len && s[p] == ',') {
            p++;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            /* A number the runs could not read (an exponent, say) does not
             * leave the rest of a long array to this loop: the runs go on
             * from the next, until eight of them have read nothing. */
            if (a->leaf == level && rejoins > 0) {
                int64_t k;
                bool closed;
                p = parse_leaf_fast(s, len, skip_space(s, len, p), a, &k, &closed);
                n += k;
                rejoins -= k == 0;
                if (closed)
                    goto done;
            }
#else
            (void)rejoins;
#endif
            continue;
        }
        if (p < len && s[p] == ']')
            break;
        return false;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
done:
#endif
    if (a->dims[level] == 0)
        a->dims[level] = n;
    else if (a->dims[level] != n)
        return false; /* ragged */
    *pos = p + 1;
    return true;
}
