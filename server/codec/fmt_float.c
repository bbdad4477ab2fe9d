/* fmt_float.c - see fmt_float.h. The decimal is found with Schubfach
 * (R. Giulietti, "The Schubfach way to render doubles", 2020-2022), in its
 * binary32 form as in the JDK's FloatToDecimal: no loops, a table of 64-bit
 * powers of ten per binary exponent, one 64x64->128 multiplication. Its
 * digits are made in a register (SWAR) and laid out with stores at computed
 * offsets, without branches for the common layouts. The loop over a tensor
 * (srv_fmt_float_array) has all of it inlined, and with AVX-512 finds the
 * decimals of eight values at once (fmt8_decimal). bench/check_fmt_float_exhaustive.c
 * checks all 2^32 inputs (round trip through strtof and through strtod +
 * cast, shortest length; and with --diff, the same bytes as the previous
 * version, tests/ref_fmt_float.c).
 */
#include "codec/fmt_float.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The conversions of srv_fmt_float_array, eight at a time, with AVX-512
 * (F, DQ, CD) where the CPU has it (fmt_vector). FMT_FLOAT_NO_SIMD leaves
 * it out, as the portable build in test_fmt_float does. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__SIZEOF_INT128__) &&                      \
    !defined(FMT_FLOAT_NO_SIMD) && !defined(FMT_FLOAT_NO_INT128)
#define FMT_X86 1
#include <immintrin.h>
#else
#define FMT_X86 0
#endif

/* The floor-log helpers below shift negative numbers right and rely on that
 * being arithmetic (implementation-defined in C, true of GCC and Clang). */
_Static_assert((-5 >> 1) == -3, "right shift of negative int must be arithmetic");

enum {
    FMT_C_MIN = 1 << 23, /* smallest significand of a normal float */
    FMT_Q_MIN = -149,    /* exponent of the subnormals: v = c 2^q */
    FMT_K_MIN = -45,     /* range of k = floor(log10(v's ulp)) over all floats */
    FMT_K_MAX = 31,
};

/* floor(q log10(2)), floor(q log10(2) + log10(3/4)), floor(e log2(10)):
 * exact for |q|, |e| far beyond the ranges used here (checked with exact
 * rational arithmetic for q in [-151, 106], e in [-60, 60]). flog10_pow2
 * made the SCALE table (fmt_float_scale.h) and is kept for test_fmt_float,
 * which checks the table with it. */
#if defined(__GNUC__)
#define FMT_KEEP __attribute__((unused))
#else
#define FMT_KEEP
#endif
static FMT_KEEP inline int flog10_pow2(int q)
{
    return (int)(((int64_t)q * 661971961083) >> 41);
}

static inline int flog10_three_quarters_pow2(int q)
{
    return (int)(((int64_t)q * 661971961083 - 274743187321) >> 41);
}

static inline int flog2_pow10(int e)
{
    return (int)(((int64_t)e * 913124641741) >> 38);
}

/* G[k - FMT_K_MIN] = floor(10^-k 2^(62 - flog2_pow10(-k))) + 1, a 63-bit
 * upper approximation of 10^-k (Schubfach's g1 + 1). Generated with Python's
 * exact fractions:
 *   f = flog2_pow10(-k); g1 = (floor(Fraction(10)**-k * 2**(125 - f)) + 1) >> 63
 */
static const uint64_t G[FMT_K_MAX - FMT_K_MIN + 1] = {
    0x59aedfc10d7279c6u, 0x47bf19673df52e38u, 0x72cb5bd86321e38du, 0x5bd5e313828182d7u,
    0x4977e8dc68679be0u, 0x758ca7c70d7292ffu, 0x5e0a1fd271287599u, 0x4b3b4ca85a86c47bu,
    0x785ee10d5da46d91u, 0x604be73de4838adau, 0x4d0985cb1d3608afu, 0x7b426fab61f00de4u,
    0x629b8c891b267183u, 0x4ee2d6d415b85acfu, 0x7e37be2022c0914cu, 0x64f964e68233a770u,
    0x50c783eb9b5c85f3u, 0x409f9cbc7c4a04c3u, 0x6765c793fa10079eu, 0x52b7d2dcc80cd2e5u,
    0x422ca8b0a00a4251u, 0x69e10de76676d081u, 0x54b40b1f852bda01u, 0x43c33c1937564801u,
    0x6c6b935b8bbd4001u, 0x56bc75e2d6310001u, 0x4563918244f40001u, 0x6f05b59d3b200001u,
    0x58d15e1762800001u, 0x470de4df82000001u, 0x71afd498d0000001u, 0x5af3107a40000001u,
    0x48c2739500000001u, 0x746a528800000001u, 0x5d21dba000000001u, 0x4a817c8000000001u,
    0x7735940000000001u, 0x5f5e100000000001u, 0x4c4b400000000001u, 0x7a12000000000001u,
    0x61a8000000000001u, 0x4e20000000000001u, 0x7d00000000000001u, 0x6400000000000001u,
    0x5000000000000001u, 0x4000000000000001u, 0x6666666666666667u, 0x51eb851eb851eb86u,
    0x4189374bc6a7ef9eu, 0x68db8bac710cb296u, 0x53e2d6238da3c212u, 0x431bde82d7b634dbu,
    0x6b5fca6af2bd215fu, 0x55e63b88c230e77fu, 0x44b82fa09b5a52ccu, 0x6df37f675ef6eae0u,
    0x57f5ff85e5925580u, 0x465e6604b7a84466u, 0x709709a125da070au, 0x5a126e1a84ae6c08u,
    0x480ebe7b9d58566du, 0x734aca5f6226f0aeu, 0x5c3bd5191b525a25u, 0x49c97747490eae84u,
    0x760f253edb4ab0d3u, 0x5e72843249088d76u, 0x4b8ed0283a6d3df8u, 0x78e480405d7b9659u,
    0x60b6cd004ac94514u, 0x4d5f0a66a23a9daau, 0x7bcb43d769f762a9u, 0x63090312bb2c4eeeu,
    0x4f3a68dbc8f03f25u, 0x7ec3daf941806507u, 0x65697bfa9acd1da0u, 0x51212ffbaf0a7e19u,
    0x40e7599625a1fe7bu,
};

#include "codec/fmt_float_scale.h"

/* Always inlined into srv_fmt_float and into srv_fmt_float_array's loop, so
 * the loop pays no call and keeps its registers. */
#if defined(__GNUC__)
#define FMT_INLINE inline __attribute__((always_inline))
#define FMT_NOINLINE __attribute__((noinline))
#define FMT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define FMT_INLINE inline
#define FMT_NOINLINE
#define FMT_UNLIKELY(x) (x)
#endif

/* The 128-bit product a b as two halves. */
#if defined(__SIZEOF_INT128__) && !defined(FMT_FLOAT_NO_INT128)
__extension__ typedef unsigned __int128 fmt_u128;

static FMT_INLINE void mul_128(uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi)
{
    fmt_u128 prod = (fmt_u128)a * b;
    *lo = (uint64_t)prod;
    *hi = (uint64_t)(prod >> 64);
}
#else
static FMT_INLINE void mul_128(uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi)
{
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p10 + (uint32_t)p01;
    *lo = (mid << 32) | (uint32_t)p00;
    *hi = p11 + (p10 >> 32) + (p01 >> 32) + (mid >> 32);
}
#endif

/* The high halves x, xl, xr of g cp, g cp - dl and g cp + d, for 128-bit
 * d = d_hi 2^64 + d_lo and dl likewise. The sums are done on 64-bit halves
 * (a 128-bit value assembled from two halves makes GCC go through the
 * stack, where the wide reload of two narrow stores stalls). */
static FMT_INLINE void mul_ends(uint64_t g, uint64_t cp, uint64_t d_hi, uint64_t d_lo,
                                uint64_t dl_hi, uint64_t dl_lo, uint64_t *x, uint64_t *xl,
                                uint64_t *xr)
{
    uint64_t lo, hi;
    mul_128(g, cp, &lo, &hi);
    *x = hi;
    *xr = hi + d_hi + (lo + d_lo < lo);
    *xl = hi - dl_hi - (lo < dl_lo);
}

/* "e<x>" for the exponents x of float32 decimals, -45 to 38, as 4 bytes
 * (NUL-padded). */
enum { EXP_MIN = -45, EXP_MAX = 38 };
static const char EXPONENTS[EXP_MAX - EXP_MIN + 1][5] = {
    "e-45", "e-44", "e-43", "e-42", "e-41", "e-40", "e-39", "e-38", "e-37", "e-36", "e-35", "e-34",
    "e-33", "e-32", "e-31", "e-30", "e-29", "e-28", "e-27", "e-26", "e-25", "e-24", "e-23", "e-22",
    "e-21", "e-20", "e-19", "e-18", "e-17", "e-16", "e-15", "e-14", "e-13", "e-12", "e-11", "e-10",
    "e-9",  "e-8",  "e-7",  "e-6",  "e-5",  "e-4",  "e-3",  "e-2",  "e-1",  "e0",   "e1",   "e2",
    "e3",   "e4",   "e5",   "e6",   "e7",   "e8",   "e9",   "e10",  "e11",  "e12",  "e13",  "e14",
    "e15",  "e16",  "e17",  "e18",  "e19",  "e20",  "e21",  "e22",  "e23",  "e24",  "e25",  "e26",
    "e27",  "e28",  "e29",  "e30",  "e31",  "e32",  "e33",  "e34",  "e35",  "e36",  "e37",  "e38",
};

/* SCALE9[n] = 10^(9 - n): the multiplier that makes an n-digit number
 * nine digits long. */
static const uint32_t SCALE9[10] = {1000000000, 100000000, 10000000, 1000000, 100000,
                                    10000,      1000,      100,      10,      1};

/* Index of the highest set bit of w != 0 (bsr). */
static FMT_INLINE int64_t log2_floor64(uint64_t w)
{
#if defined(__GNUC__)
    return 63 - __builtin_clzll(w);
#else
    int n = 0;
    while (w >>= 1)
        n++;
    return n;
#endif
}

/* The number of decimal digits of f > 0 (K. Willets' table): entry i, for f
 * in [2^i, 2^(i+1)), holds d << 32 with d the digit count of 2^i, plus
 * 2^32 - 10^d when 10^d < 2^32, so that adding f carries into bit 32 exactly
 * when f >= 10^d. One load and an add instead of nine compares. */
static const uint64_t DIGIT_COUNT[32] = {
    0x00000001fffffff6u, 0x00000001fffffff6u, 0x00000001fffffff6u, 0x00000001fffffff6u,
    0x00000002ffffff9cu, 0x00000002ffffff9cu, 0x00000002ffffff9cu, 0x00000003fffffc18u,
    0x00000003fffffc18u, 0x00000003fffffc18u, 0x00000004ffffd8f0u, 0x00000004ffffd8f0u,
    0x00000004ffffd8f0u, 0x00000004ffffd8f0u, 0x00000005fffe7960u, 0x00000005fffe7960u,
    0x00000005fffe7960u, 0x00000006fff0bdc0u, 0x00000006fff0bdc0u, 0x00000006fff0bdc0u,
    0x00000007ff676980u, 0x00000007ff676980u, 0x00000007ff676980u, 0x00000007ff676980u,
    0x00000008fa0a1f00u, 0x00000008fa0a1f00u, 0x00000008fa0a1f00u, 0x00000009c4653600u,
    0x00000009c4653600u, 0x00000009c4653600u, 0x0000000a00000000u, 0x0000000a00000000u,
};

static FMT_INLINE int64_t count_digits(uint64_t f)
{
    return (int64_t)((f + DIGIT_COUNT[log2_floor64(f)]) >> 32);
}

/* The 8 decimal digits of hi 10^4 + lo (hi, lo < 10^4), given as the word
 * v = hi | lo << 32, as one word: byte i (counting from the least
 * significant) is the value of digit i (from the left), 0..9. Computed
 * lane-parallel in a register ("SWAR"): each 4-digit lane is split into two
 * 2-digit lanes, each of those into two digits, every split one multiply by
 * a reciprocal plus one multiply-subtract, written as
 * q | (v - q m) << s = (v << s) - q (m 2^s - 1). */
static FMT_INLINE uint64_t digits8(uint64_t v)
{
    uint64_t hund = ((v * 10486) >> 20) & 0x0000007F0000007Fu; /* lane / 100 */
    v = (v << 16) - hund * ((100u << 16) - 1);                 /* 4 x 2 digits */
    uint64_t tens = ((v * 103) >> 10) & 0x000F000F000F000Fu;   /* lane / 10 */
    return (v << 8) - tens * ((10u << 8) - 1);                 /* 8 x 1 digit */
}

/* Stores the 8 bytes of w at p, least significant byte first. */
static FMT_INLINE void store8(char *p, uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &w, 8);
#else
    for (int i = 0; i < 8; i++)
        p[i] = (char)(w >> (8 * i));
#endif
}

/* The shortest decimal of a finite, nonzero |v|, ready to print: n
 * significant digits (1 to 9), the first as the ASCII character lead, the
 * other eight as the ASCII bytes of w (first digit in the least significant
 * byte, '0' past the n-th), and x, the exponent of d.ddd form: |v| reads
 * back from lead.w 10^x. */
typedef struct fmt_dec {
    uint64_t w;
    int64_t n, x; /* 64-bit: no sign extensions in the printer's addresses */
    char lead;
} fmt_dec;

/* Schubfach's choice (the JDK's FloatToDecimal.toDecimal), given the high
 * halves x, xl, xr of g cb 2^h and of the same for the interval's ends (see
 * to_decimal) and out = c & 1 (1 when the interval is open): returns the
 * decimal significand f for 10^k, which may end in zeros, and sets *s_out to
 * s = floor(4 v 10^-k / 4), of which f has the digit count, or is the next
 * power of ten.
 *
 * The JDK compares vbl, vb and vbr (x, xl, xr / 2^31 rounded to odd) with
 * multiples of 4, m << 2 (vbl + out <= m << 2, (m << 2) + out <= vbr). That
 * is the same as comparing before the rounding, xl + out <= m << 33 and
 * likewise for vbr, so the rounding is never done. The interval is between
 * 1 and 10 units of 10^k wide, so it holds at most one multiple of 10^(k+1)
 * and at least one of 10^k. A multiple of 10^(k+1) inside is the shorter
 * answer, sp10 or sp10 + 10 with sp10 = floor(s / 10) 10. (The JDK tries
 * this only when s >= 100 and scales tiny subnormals by 10, because Java
 * wants at least two digits; we want the shortest, so "1e-45", not
 * "1.4e-45".) */
static FMT_INLINE uint32_t pick(uint64_t x, uint64_t xl, uint64_t xr, uint64_t out, uint64_t *s_out)
{
    uint64_t s = x >> 33; /* 1 <= s < 10^9 */
    uint64_t xlo = xl + out, xro = xr - out;
    uint64_t sp10 = (uint32_t)s / 10 * 10; /* 32-bit: a multiply, not a 128-bit one */
    unsigned upin = xlo <= sp10 << 33;
    unsigned wpin = (sp10 + 10) << 33 <= xro;
    /* Otherwise s or t = s + 1, whichever is inside (at least one is); if
     * both, the nearer to v, ties to even. That is the nearer one, rnd
     * (x / 2^33 rounded half to even), unless it is outside: then the
     * other. Which case applies is data-dependent and unpredictable, so
     * all are computed and selected with masks (compilers may turn ?: and
     * && into jumps). */
    uint64_t rnd = (x + 0xFFFFFFFFu + (s & 1)) >> 33;
    uint64_t r1 = rnd + (rnd << 33 < xlo) - (rnd << 33 > xro);
    /* upin and wpin never both hold: the interval is narrower than 10
     * units of 10^k. */
    uint64_t r10 = sp10 + 10 * (uint64_t)wpin;
    uint64_t use10 = 0 - (uint64_t)(upin | wpin);
    *s_out = s;
    return (uint32_t)((r10 & use10) | (r1 & ~use10));
}

/* pick for a power of two above the subnormals, v = 2^23 2^q: the gap
 * below v is half the gap above, so the interval is [4c - 1, 4c + 2] in
 * quarter units and k = floor(log10(3/4 2^q)). Rare, so computed here
 * rather than tabled. */
static uint32_t pick_pow2(int q, int *k_out, uint64_t *s_out)
{
    int k = flog10_three_quarters_pow2(q);
    int h = q + flog2_pow10(-k) + 33; /* 33..36 */
    uint64_t g = G[k - FMT_K_MIN];
    uint64_t x, xl, xr;
    mul_ends(g, (uint64_t)FMT_C_MIN << (h + 2), g >> (63 - h), g << (h + 1), g >> (64 - h), g << h,
             &x, &xl, &xr);
    *k_out = k;
    return pick(x, xl, xr, 0, s_out);
}

/* The cases to_decimal leaves to this (significand bits t = 0, or
 * subnormal): f as pick returns it, with *k_out, and the multiplier and
 * exponent of the nine-digit form as SCALE would give them. */
static FMT_NOINLINE uint32_t pick_rare(uint32_t bq, uint32_t t, uint32_t *m_out, int64_t *x_out)
{
    uint64_t s;
    uint32_t f;
    int k;
    if (t == 0 && bq > 1) {
        f = pick_pow2((int)bq - 150, &k, &s);
    } else {
        const fmt_scale *sc = &SCALE[bq];
        uint32_t c = bq ? t | FMT_C_MIN : t;
        uint64_t x, xl, xr;
        mul_ends(sc->g, (uint64_t)c << sc->h2, sc->d_hi, sc->d_lo, sc->d_hi, sc->d_lo, &x, &xl,
                 &xr);
        f = pick(x, xl, xr, c & 1, &s);
        k = sc->k;
    }
    int64_t n0 = count_digits(s);
    *m_out = SCALE9[n0];
    *x_out = k + n0 - 1;
    return f;
}

/* The decimal of the finite, nonzero float with bit pattern bits (the sign
 * bit is ignored): the one with fewest significant digits in the float's
 * rounding interval, the nearest to it if several (ties to even). This is
 * Schubfach, in its binary32 form as in the JDK: no loops, one 64x64->128
 * multiplication. */
static FMT_INLINE fmt_dec to_decimal(uint32_t bits)
{
    /* v = c 2^q; subnormals have q = FMT_Q_MIN and no hidden bit. */
    uint32_t bq = (bits >> 23) & 0xFF;
    uint32_t t = bits & 0x7FFFFF;
    uint32_t f, m;
    fmt_dec d;
    if (!FMT_UNLIKELY(t == 0 || bq == 0)) {
        /* The rounding interval [vl, vr] is closed when c is even (round
         * half to even reads the midpoints back as v), open when c is odd.
         * In quarter units v is cb = 4c and the ends are cb - 2 and cb + 2.
         * x, xl and xr are the high halves of g cb 2^h and of the same for
         * the ends, which differ from it by d = g 2^(h+1): one
         * multiplication. */
        const fmt_scale *sc = &SCALE[bq];
        uint32_t c = t | FMT_C_MIN;
        uint64_t x, xl, xr, s;
        mul_ends(sc->g, (uint64_t)c << sc->h2, sc->d_hi, sc->d_lo, sc->d_hi, sc->d_lo, &x, &xl,
                 &xr);
        f = pick(x, xl, xr, c & 1, &s);
        /* The multiplier to nine digits from s's digit count, which the
         * table gives with one comparison, while f is still being
         * selected. */
        unsigned more = s >= sc->thr;
        m = more ? sc->m_hi : sc->m_lo;
        d.x = sc->x0 + (int64_t)more;
    } else {
        f = pick_rare(bq, t, &m, &d.x);
    }
    /* The digits as exactly nine, f9 in [10^8, 10^9): f has the digits of
     * s, or is the next power of ten (s + 1 or sp10 + 10 rounding up). */
    uint32_t f9 = f * m;
    if (FMT_UNLIKELY(f9 == 1000000000)) {
        f9 = 100000000;
        d.x++;
    }
    /* Exactly one float32 has a shortest decimal, 7.038531e-26, within
     * 2^-54 of the midpoint to its neighbour: read as a double and then
     * narrowed (cJSON, JavaScript, NumPy readers) it rounds twice and lands
     * on the neighbour. It gets the nearest 8-digit decimal, which survives
     * both readings. The exhaustive check covers both. */
    if (FMT_UNLIKELY(bits << 1 == 0x15AE43FDu << 1)) {
        f9 = 703853070;
        d.x = -26;
    }

    /* The lead digit and a word of the other eight: f9 / 10^4 (five
     * digits) and f9 / 10^8 (the lead) side by side, so the two 4-digit
     * lanes are ready after one dependent multiplication. */
    uint64_t hi5 = f9 / 10000, lead = f9 / 100000000;
    /* hi5 - 10^4 lead | (f9 - 10^4 hi5) << 32, the two lanes, as one sum. */
    uint64_t w = digits8(((uint64_t)f9 << 32) - hi5 * ((10000ull << 32) - 1) - lead * 10000);
    /* Zero bytes at the top of w are trailing zeros. Digits are at most 9,
     * so with the top set bit of (w << 1) | 1 in byte j of w (j = -1 for
     * w = 0), n = j + 2. */
    d.n = (log2_floor64((w << 1) | 1) + 15) >> 3;
    d.w = w | 0x3030303030303030u; /* to ASCII */
    d.lead = (char)('0' + lead);
    return d;
}

/* The layouts print_decimal leaves to this: exponent notation, integers
 * and one-digit values below 0.01 ("1e-3", not "0.001"); any layout, in
 * fact, the common ones included. lead, w, n and x as in fmt_dec; end as
 * in print_decimal. */
static FMT_NOINLINE int print_rare(char *p, char lead, uint64_t w, int n, int x, char end)
{
    /* Plain notation unless exponent notation is strictly shorter. */
    int ax = x < 0 ? -x : x;
    int sci_len = n + (n > 1) + 2 + (x < 0) + (ax >= 10);
    int plain_len = x >= n - 1 ? x + 1 : x >= 0 ? n + 1 : n + 1 - x;
    int len;
    if (plain_len > sci_len) { /* d.ddde-x */
        p[0] = lead;
        p[1] = '.';
        store8(p + 2, w);
        memcpy(p + (n > 1 ? n + 1 : 1), EXPONENTS[x - EXP_MIN], 4);
        len = sci_len;
    } else if (x >= n - 1) { /* ddd000, at most 13 characters */
        p[0] = lead;
        store8(p + 1, w);
        store8(p + 9, 0x3030303030303030u);
        len = x + 1;
    } else if (x >= 0) { /* dd.ddd: x <= 7 */
        p[0] = lead;
        store8(p + 1, w);
        store8(p + x + 2, w >> (8 * x));
        p[x + 1] = '.';
        len = n + 1;
    } else { /* 0.0ddd: at most two zeros after the point, or "1e-4" is shorter */
        memcpy(p, "0.00", 4);
        p[1 - x] = lead;
        store8(p + 2 - x, w);
        len = n + 1 - x;
    }
    p[len] = end;
    return len;
}

/* Writes the decimal d at p, which has room for SRV_FMT_FLOAT_BUF - 1 bytes,
 * and returns the length (at most 14); p[length] is end (NUL, or the comma
 * of an array) and the bytes after it are scratch. Nothing is read back. */
static FMT_INLINE int print_decimal(char *p, fmt_dec d, char end)
{
    ptrdiff_t n = (ptrdiff_t)d.n, x = (ptrdiff_t)d.x;
    uint64_t w = d.w;
    /* Plain notation with a fraction is what most values get: from
     * "0.00ddd" (x = -3) to "dddddddd.d" (x = n - 2), except "0.00d", for
     * which "de-3" is shorter. That is lo <= x + 3 <= n + 1 with lo = 1 for
     * n = 1, else 0: one unsigned comparison, with one = -lo. Those layouts
     * share one branch-free sequence of stores at computed offsets, so the
     * digit count and the exponent, which vary from value to value, cost no
     * mispredicted branch. */
    ptrdiff_t one = (n - 2) >> 63;
    if ((size_t)(x + 3 + one) > (size_t)(n + 1 + one))
        return print_rare(p, d.lead, w, (int)n, (int)x, end);
    ptrdiff_t neg = x >> 63;    /* -1 when x < 0: "0." and -x - 1 zeros first */
    ptrdiff_t xp = x & ~neg;    /* max(x, 0): digits before the point, minus one */
    ptrdiff_t zeros = -x & neg; /* max(-x, 0): leading zeros, the one before the point included */
    memcpy(p, "0.00", 4);
    p[zeros - neg] = d.lead;
    store8(p + zeros - neg + 1, w);
    /* The digits after the point, moved one place right to make room for
     * it; for x < 0 this rewrites the same bytes. */
    store8(p + 2 + xp + zeros, w >> (8 * xp));
    p[xp + 1] = '.';
    ptrdiff_t len = n + 1 + zeros;
    p[len] = end;
    return (int)len;
}

/* Finite and not zero: (bits << 1) is neither 0 nor at least 0xFF000000. */
static FMT_INLINE int is_ordinary(uint32_t bits)
{
    return (uint32_t)(bits << 1) - 1 < 0xFEFFFFFFu;
}

/* srv_fmt_float for the values that are not is_ordinary: zeros,
 * infinities and NaN. */
static FMT_NOINLINE int fmt_special(uint32_t bits, char *buf)
{
    uint32_t t = bits & 0x7FFFFF;
    int sign = (int)(bits >> 31);
    buf[0] = '-';
    if ((bits << 1) == 0) {
        memcpy(buf + sign, "0", 2);
        return sign + 1;
    }
    if (t) { /* NaN, whatever its sign bit */
        memcpy(buf, "nan", 4);
        return 3;
    }
    memcpy(buf + sign, "inf", 4);
    return sign + 3;
}

int srv_fmt_float(float v, char *buf)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    if (FMT_UNLIKELY(!is_ordinary(bits)))
        return fmt_special(bits, buf);
    /* The sign without a branch: signs of real data are a coin toss. */
    char *p = buf;
    *p = '-';
    p += bits >> 31;
    return (int)(p - buf) + print_decimal(p, to_decimal(bits), '\0');
}

size_t srv_fmt_float_array_size(size_t count)
{
    enum { PER_VALUE = SRV_FMT_FLOAT_MAX + 1 };
    if (count > (SIZE_MAX - 2 - SRV_FMT_FLOAT_BUF) / PER_VALUE)
        return 0;
    return count * PER_VALUE + 2 + SRV_FMT_FLOAT_BUF;
}

/* One value and its comma at p; returns the end. */
static FMT_INLINE char *put_value(char *p, uint32_t bits)
{
    if (((bits >> 23) & 0xFF) == 0xFF) {
        memcpy(p, "null", 4);
        p += 4;
    } else {
        float v;
        memcpy(&v, &bits, sizeof v);
        p += srv_fmt_float(v, p);
    }
    *p = ',';
    return p + 1;
}

/* One ordinary value (is_ordinary), already converted, and its comma. */
static FMT_INLINE char *put_decimal(char *p, uint32_t bits, fmt_dec d)
{
    *p = '-';
    p += bits >> 31;
    return p + print_decimal(p, d, ',') + 1;
}

static bool forced_scalar; /* srv_fmt_float_force_scalar's */

void srv_fmt_float_force_scalar(bool on)
{
    forced_scalar = on;
}

#if FMT_X86

#define FMT_AVX512 __attribute__((target("avx512f,avx512dq,avx512cd")))

/* What the vector code reads of SCALE, by 8-byte words from an entry's
 * start: g, then thr | m_lo << 32 and m_hi | k << 32 | x0 << 40 | h2 << 48
 * (little-endian x86). d is not read: it is g 2^(h+1), two shifts. */
_Static_assert(sizeof(fmt_scale) == 40 && offsetof(fmt_scale, g) == 0 &&
                   offsetof(fmt_scale, thr) == 24 && offsetof(fmt_scale, m_lo) == 28 &&
                   offsetof(fmt_scale, m_hi) == 32 && offsetof(fmt_scale, x0) == 37 &&
                   offsetof(fmt_scale, h2) == 38,
               "fmt_scale's layout, as fmt8_decimal gathers it");

/* -1 in the 64-bit lanes of k, 0 elsewhere. */
#define FMT_ONES(k) _mm512_movm_epi64(k)

/* to_decimal of eight floats at once, one per 64-bit lane, for the lanes
 * to_decimal's common case takes (none of t = 0, bq = 0, bq = 255 and the
 * one double-rounding float): the same steps and the same numbers, with
 * the 64 x 64 -> 128-bit product made of two 32 x 32 -> 64-bit ones (the
 * low 32 bits of c 2^h2 are zero, h2 being at least 35). Returns the mask
 * of those lanes; the others' results are meaningless. */
FMT_AVX512 static inline __mmask8 fmt8_decimal(__m256i bits32, uint64_t w[8], int64_t n[8],
                                               int64_t x[8], int64_t lead[8])
{
    const __m512i bits = _mm512_cvtepu32_epi64(bits32);
    const __m512i one = _mm512_set1_epi64(1);
    const __m512i bq = _mm512_and_si512(_mm512_srli_epi64(bits, 23), _mm512_set1_epi64(0xFF));
    const __m512i t = _mm512_and_si512(bits, _mm512_set1_epi64(0x7FFFFF));
    __mmask8 ok = _mm512_test_epi64_mask(t, t) & _mm512_test_epi64_mask(bq, bq) &
                  _mm512_cmpneq_epi64_mask(bq, _mm512_set1_epi64(0xFF)) &
                  _mm512_cmpneq_epi64_mask(_mm512_and_si512(bits, _mm512_set1_epi64(0x7FFFFFFF)),
                                           _mm512_set1_epi64(0x15AE43FD));
    /* Entries bq * 5 words in; other lanes read entry 0. */
    const __m512i at = _mm512_maskz_mullo_epi64(ok, bq, _mm512_set1_epi64(5));
    const long long *base = (const long long *)(const void *)SCALE;
    const __m512i g = _mm512_i64gather_epi64(at, base, 8);
    const __m512i q3 = _mm512_i64gather_epi64(at, base + 3, 8);
    const __m512i q4 = _mm512_i64gather_epi64(at, base + 4, 8);
    const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFF);
    const __m512i h2 = _mm512_and_si512(_mm512_srli_epi64(q4, 48), _mm512_set1_epi64(0xFF));
    const __m512i thr = _mm512_and_si512(q3, lo32), m_lo = _mm512_srli_epi64(q3, 32);
    const __m512i m_hi = _mm512_and_si512(q4, lo32);
    const __m512i x0 = _mm512_srai_epi64(_mm512_slli_epi64(q4, 16), 56);
    const __m512i c = _mm512_or_si512(t, _mm512_set1_epi64(1 << 23));
    /* c 2^h2 = c1 2^32, and g c1 = (g >> 32) c1 2^32 + (g mod 2^32) c1. */
    const __m512i c1 = _mm512_sllv_epi64(c, _mm512_sub_epi64(h2, _mm512_set1_epi64(32)));
    const __m512i a = _mm512_mul_epu32(_mm512_srli_epi64(g, 32), c1), b = _mm512_mul_epu32(g, c1);
    const __m512i hi = _mm512_add_epi64(a, _mm512_srli_epi64(b, 32)), lo = _mm512_slli_epi64(b, 32);
    /* d = g 2^(h+1), h = h2 - 2: d_hi = g >> (63 - h), d_lo = g << (h + 1). */
    const __m512i d_hi = _mm512_srlv_epi64(g, _mm512_sub_epi64(_mm512_set1_epi64(65), h2));
    const __m512i d_lo = _mm512_sllv_epi64(g, _mm512_sub_epi64(h2, one));
    /* mul_ends: x = hi, xr = hi + d_hi + carry, xl = hi - d_hi - borrow. */
    const __m512i xr =
        _mm512_sub_epi64(_mm512_add_epi64(hi, d_hi),
                         FMT_ONES(_mm512_cmplt_epu64_mask(_mm512_add_epi64(lo, d_lo), lo)));
    const __m512i xl =
        _mm512_add_epi64(_mm512_sub_epi64(hi, d_hi), FMT_ONES(_mm512_cmplt_epu64_mask(lo, d_lo)));
    /* pick */
    const __m512i out = _mm512_and_si512(c, one);
    const __m512i s = _mm512_srli_epi64(hi, 33);
    const __m512i xlo = _mm512_add_epi64(xl, out), xro = _mm512_sub_epi64(xr, out);
    const __m512i q10 = _mm512_srli_epi64(_mm512_mul_epu32(s, _mm512_set1_epi64(3435973837u)), 35);
    const __m512i sp10 = _mm512_add_epi64(_mm512_slli_epi64(q10, 3), _mm512_slli_epi64(q10, 1));
    const __mmask8 upin = _mm512_cmple_epu64_mask(xlo, _mm512_slli_epi64(sp10, 33));
    const __mmask8 wpin = _mm512_cmple_epu64_mask(
        _mm512_slli_epi64(_mm512_add_epi64(sp10, _mm512_set1_epi64(10)), 33), xro);
    const __m512i rnd = _mm512_srli_epi64(
        _mm512_add_epi64(_mm512_add_epi64(hi, lo32), _mm512_and_si512(s, one)), 33);
    const __m512i rs = _mm512_slli_epi64(rnd, 33);
    const __m512i r1 =
        _mm512_add_epi64(_mm512_sub_epi64(rnd, FMT_ONES(_mm512_cmplt_epu64_mask(rs, xlo))),
                         FMT_ONES(_mm512_cmpgt_epu64_mask(rs, xro)));
    const __m512i r10 = _mm512_mask_add_epi64(sp10, wpin, sp10, _mm512_set1_epi64(10));
    const __m512i f = _mm512_mask_blend_epi64(upin | wpin, r1, r10);
    /* the nine-digit form */
    const __mmask8 more = _mm512_cmpge_epu64_mask(s, thr);
    const __m512i m = _mm512_mask_blend_epi64(more, m_lo, m_hi);
    __m512i ex = _mm512_mask_add_epi64(x0, more, x0, one);
    __m512i f9 = _mm512_mul_epu32(f, m);
    const __mmask8 top = _mm512_cmpeq_epi64_mask(f9, _mm512_set1_epi64(1000000000));
    f9 = _mm512_mask_mov_epi64(f9, top, _mm512_set1_epi64(100000000));
    ex = _mm512_mask_add_epi64(ex, top, ex, one);
    /* digits: hi5 = f9 / 10^4, ld = f9 / 10^8 (f9 < 2^32) */
    const __m512i hi5 = _mm512_srli_epi64(_mm512_mul_epu32(f9, _mm512_set1_epi64(3518437209u)), 45);
    const __m512i ld = _mm512_srli_epi64(_mm512_mul_epu32(f9, _mm512_set1_epi64(1441151881u)), 57);
    const __m512i k4 = _mm512_set1_epi64(10000);
    __m512i v = _mm512_sub_epi64(
        _mm512_add_epi64(_mm512_slli_epi64(_mm512_sub_epi64(f9, _mm512_mul_epu32(hi5, k4)), 32),
                         hi5),
        _mm512_mul_epu32(ld, k4));
    /* digits8 */
    const __m512i hund =
        _mm512_and_si512(_mm512_srli_epi64(_mm512_mullo_epi64(v, _mm512_set1_epi64(10486)), 20),
                         _mm512_set1_epi64(0x0000007F0000007F));
    v = _mm512_sub_epi64(_mm512_slli_epi64(v, 16),
                         _mm512_mullo_epi64(hund, _mm512_set1_epi64((100 << 16) - 1)));
    const __m512i tens =
        _mm512_and_si512(_mm512_srli_epi64(_mm512_mullo_epi64(v, _mm512_set1_epi64(103)), 10),
                         _mm512_set1_epi64(0x000F000F000F000F));
    const __m512i wd = _mm512_sub_epi64(_mm512_slli_epi64(v, 8),
                                        _mm512_mullo_epi64(tens, _mm512_set1_epi64((10 << 8) - 1)));
    /* n = (log2_floor((w << 1) | 1) + 15) >> 3, log2_floor = 63 - lzcnt */
    const __m512i nn = _mm512_srli_epi64(
        _mm512_sub_epi64(_mm512_set1_epi64(78),
                         _mm512_lzcnt_epi64(_mm512_or_si512(_mm512_slli_epi64(wd, 1), one))),
        3);
    _mm512_storeu_si512(w, _mm512_or_si512(wd, _mm512_set1_epi64(0x3030303030303030)));
    _mm512_storeu_si512(n, nn);
    _mm512_storeu_si512(x, ex);
    _mm512_storeu_si512(lead, _mm512_add_epi64(ld, _mm512_set1_epi64('0')));
    return ok;
}

/* srv_fmt_float_array's values from *at, in batches of up to FMT_BATCH
 * while eight are left: each batch's groups of eight converted by
 * fmt8_decimal first, whose conversions (gathers and multiplications) are
 * independent of one another and overlap, then printed as put_decimal
 * prints them; a group with a value fmt8_decimal does not take goes
 * through put_value. */
enum { FMT_BATCH = 64 };
FMT_AVX512 static char *fmt_array_avx512(const float *v, size_t count, size_t *at, char *p)
{
    size_t i = *at;
    while (i + 8 <= count) {
        uint64_t w[FMT_BATCH];
        int64_t n[FMT_BATCH], x[FMT_BATCH], lead[FMT_BATCH];
        uint32_t bits[FMT_BATCH];
        __mmask8 ok[FMT_BATCH / 8];
        const size_t m = count - i >= FMT_BATCH ? FMT_BATCH : (count - i) / 8 * 8;
        memcpy(bits, v + i, m * sizeof *bits);
        for (size_t g = 0; g < m; g += 8)
            ok[g / 8] = fmt8_decimal(_mm256_loadu_si256((const __m256i *)(const void *)(bits + g)),
                                     w + g, n + g, x + g, lead + g);
        for (size_t g = 0; g < m; g += 8) {
            if (ok[g / 8] == 0xFF) {
                for (size_t k = g; k < g + 8; k++) {
                    fmt_dec d;
                    d.w = w[k];
                    d.n = n[k];
                    d.x = x[k];
                    d.lead = (char)lead[k];
                    p = put_decimal(p, bits[k], d);
                }
            } else {
                for (size_t k = g; k < g + 8; k++)
                    p = put_value(p, bits[k]);
            }
        }
        i += m;
    }
    *at = i;
    return p;
}

/* Whether fmt_array_avx512 runs here. */
static bool fmt_vector(void)
{
    /* Valgrind reports no AVX-512 here, so it runs the scalar code. */
    return !forced_scalar && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd");
}
#endif

size_t srv_fmt_float_array(const float *v, size_t count, char *buf)
{
    char *p = buf;
    *p++ = '[';
    size_t i = 0;
#if FMT_X86
    if (count >= 8 && fmt_vector())
        p = fmt_array_avx512(v, count, &i, p);
#endif
    /* Two values at a time: both conversions come before both stores, so
     * the processor overlaps two independent chains of multiplications
     * (measured 5-10% faster than one at a time; four at a time was
     * slower). */
    for (; i + 2 <= count; i += 2) {
        uint32_t a, b;
        memcpy(&a, &v[i], sizeof a);
        memcpy(&b, &v[i + 1], sizeof b);
        if (is_ordinary(a) & is_ordinary(b)) {
            fmt_dec da = to_decimal(a), db = to_decimal(b);
            p = put_decimal(p, a, da);
            p = put_decimal(p, b, db);
        } else {
            p = put_value(p, a);
            p = put_value(p, b);
        }
    }
    for (; i < count; i++) {
        uint32_t a;
        memcpy(&a, &v[i], sizeof a);
        p = put_value(p, a);
    }
    /* The last comma becomes the bracket; with no values, the bracket
     * follows '['. */
    p -= count != 0;
    *p++ = ']';
    *p = '\0';
    return (size_t)(p - buf);
}
