/* ref_fmt_float.c - see ref_fmt_float.h. A verbatim copy of
 * server/fmt_float.c at commit 39ba74a (Schubfach, then a printer with a
 * branch per layout), with srv_fmt_float renamed. Do not change it: it is
 * the reference.
 */
#include "ref_fmt_float.h"

#include "codec/fmt_float.h"

#include <stdint.h>
#include <string.h>

/* The floor-log helpers below shift negative numbers right and rely on that
 * being arithmetic (implementation-defined in C, true of GCC and Clang). */
_Static_assert((-5 >> 1) == -3, "right shift of negative int must be arithmetic");

enum {
    FMT_P = 24,          /* significand bits, the hidden one included */
    FMT_C_MIN = 1 << 23, /* smallest significand of a normal float */
    FMT_Q_MIN = -149,    /* exponent of the subnormals: v = c 2^q */
    FMT_K_MIN = -45,     /* range of k = floor(log10(v's ulp)) over all floats */
    FMT_K_MAX = 31,
};

/* floor(q log10(2)), floor(q log10(2) + log10(3/4)), floor(e log2(10)):
 * exact for |q|, |e| far beyond the ranges used here (checked with exact
 * rational arithmetic for q in [-151, 106], e in [-60, 60]). */
static inline int flog10_pow2(int q)
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

#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 fmt_u128;
#endif

/* The high 64 bits of a * b. */
static inline uint64_t mul_hi64(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    return (uint64_t)(((fmt_u128)a * b) >> 64);
#else
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p10 + (uint32_t)p01;
    return p11 + (p10 >> 32) + (p01 >> 32) + (mid >> 32);
#endif
}

/* floor(g cp / 2^95) from the high half of the product, with bit 0 also set
 * when the 31 bits below it are not all zero ("round to odd"): an inexact
 * result then never equals a multiple of 4, which is what the interval tests
 * in to_decimal compare against. The low half of the product is not needed
 * for binary32 (Schubfach's proof; the exhaustive check agrees). */
static inline uint64_t round_to_odd(uint64_t g, uint64_t cp)
{
    uint64_t x1 = mul_hi64(g, cp);
    return (x1 >> 31) | (((x1 & 0xFFFFFFFFu) + 0xFFFFFFFFu) >> 32);
}

/* For v = c 2^q (0 < c < 2^24), returns the decimal significand f and sets
 * *e10 so that f 10^*e10 is the shortest decimal in v's rounding interval,
 * the nearest one to v if several. f may end in zeros. */
static inline uint32_t to_decimal(int q, uint32_t c, int *e10)
{
    /* The rounding interval [vl, vr] is closed when c is even (round half to
     * even reads the midpoints back as v), open when c is odd. Everything is
     * in quarter units: cb = 4c. */
    uint64_t out = c & 1;
    uint64_t cb = (uint64_t)c << 2;
    uint64_t cbr = cb + 2;
    uint64_t cbl;
    int k;
    if (c != FMT_C_MIN || q == FMT_Q_MIN) {
        cbl = cb - 2;
        k = flog10_pow2(q);
    } else {
        /* At a power of two the gap below is half the gap above. */
        cbl = cb - 1;
        k = flog10_three_quarters_pow2(q);
    }
    int h = q + flog2_pow10(-k) + 33; /* 33..36, so cb << h < 2^63 */
    uint64_t g = G[k - FMT_K_MIN];

    /* vb = 4 v 10^-k, vbl and vbr the interval's ends likewise. */
    uint64_t vb = round_to_odd(g, cb << h);
    uint64_t vbl = round_to_odd(g, cbl << h);
    uint64_t vbr = round_to_odd(g, cbr << h);

    /* The interval is between 1 and 10 units of 10^k wide, so it holds at
     * most one multiple of 10^(k+1) and at least one of 10^k. A multiple of
     * 10^(k+1) inside is the shorter answer. (The JDK tries this only when
     * s >= 100 and scales tiny subnormals by 10, because Java wants at least
     * two digits; we want the shortest, so "1e-45", not "1.4e-45".) */
    uint64_t s = vb >> 2;
    uint64_t sp10 = s / 10 * 10;
    uint64_t tp10 = sp10 + 10;
    unsigned upin = vbl + out <= sp10 << 2;
    unsigned wpin = (tp10 << 2) + out <= vbr;
    /* Otherwise s or s + 1, whichever is inside; if both, the nearer to v,
     * ties to even. Which case applies is data-dependent and unpredictable,
     * so all are computed and selected with arithmetic, not branches (the
     * compiler turns && and ?: on these into jumps). */
    uint64_t t = s + 1;
    unsigned uin = vbl + out <= s << 2;
    unsigned win = (t << 2) + out <= vbr;
    int64_t cmp = (int64_t)vb - (int64_t)((s + t) << 1);
    unsigned below = (cmp < 0) | ((cmp == 0) & (((unsigned)s & 1) ^ 1)); /* v nearer to s */
    unsigned pick_s = (uin & (win ^ 1)) | ((uin ^ win ^ 1) & below);
    uint64_t r1 = t - pick_s;
    uint64_t r10 = tp10 - 10 * (uint64_t)upin;
    uint64_t use10 = 0 - (uint64_t)(upin ^ wpin);
    *e10 = k;
    return (uint32_t)((r10 & use10) | (r1 & ~use10));
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

static const uint32_t POW10[10] = {1,      10,      100,      1000,      10000,
                                   100000, 1000000, 10000000, 100000000, 1000000000};

static inline int count_digits(uint32_t f)
{
    return 1 + (f >= 10) + (f >= 100) + (f >= 1000) + (f >= 10000) + (f >= 100000) +
           (f >= 1000000) + (f >= 10000000) + (f >= 100000000);
}

/* The 8 decimal digits of r < 10^8 as one word: byte i (counting from the
 * least significant) is the value of digit i (from the left), 0..9. Computed
 * lane-parallel in a register ("SWAR"), so the text is stored with one 8-byte
 * write and never read back. */
static inline uint64_t digits8(uint32_t r)
{
    uint64_t v = (uint64_t)(r / 10000) | (uint64_t)(r % 10000) << 32; /* 2 x 4 digits */
    uint64_t hund = ((v * 10486) >> 20) & 0x0000007F0000007Fu;        /* lane / 100 */
    v = hund | (v - hund * 100) << 16;                                /* 4 x 2 digits */
    uint64_t tens = ((v * 103) >> 10) & 0x000F000F000F000Fu;          /* lane / 10 */
    return tens | (v - tens * 10) << 8;                               /* 8 x 1 digit */
}

/* Stores the 8 bytes of w at p, least significant byte first. */
static inline void store8(char *p, uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &w, 8);
#else
    for (int i = 0; i < 8; i++)
        p[i] = (char)(w >> (8 * i));
#endif
}

/* Number of leading zero bits of w != 0. */
static inline int clz64(uint64_t w)
{
#if defined(__GNUC__)
    return __builtin_clzll(w);
#else
    int n = 0;
    while (!(w >> 63)) {
        w <<= 1;
        n++;
    }
    return n;
#endif
}

/* Writes f 10^e (0 < f < 10^9) at p, which has room for
 * SRV_FMT_FLOAT_BUF - 1 bytes, and returns the length (at most 14); p[length]
 * is NUL and the bytes after it are scratch. Every store has a fixed size and
 * nothing is read back, so no store-forwarding stalls. (A branch-free layout,
 * all stores at computed offsets, measured slower: real data mostly takes one
 * layout, which the branch predictor learns.) */
static inline int print_decimal(char *p, uint32_t f, int e)
{
    /* The digits as exactly nine, d.dddddddd with trailing zeros: the lead
     * digit and the word w of the other eight. x is the exponent in that
     * form, n the number of significant digits. */
    int n0 = count_digits(f);
    int x = e + n0 - 1;
    f *= POW10[9 - n0];
    char lead = (char)('0' + f / 100000000);
    uint64_t w = digits8(f % 100000000);
    /* Zero bytes at the top of w are trailing zeros. Bytes are at most 9, so
     * the top bit of w is clear and clz((w << 1) | 1) + 1 is clz(w), or 64
     * when w = 0. */
    int n = 9 - (clz64((w << 1) | 1) + 1) / 8;
    w |= 0x3030303030303030u; /* to ASCII */

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
    p[len] = '\0';
    return len;
}

int ref_fmt_float(float v, char *buf)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    char *p = buf;
    /* The sign without a branch: signs of real data are a coin toss. */
    *p = '-';
    p += bits >> 31;
    uint32_t bq = (bits >> 23) & 0xFF; /* biased exponent */
    uint32_t t = bits & 0x7FFFFF;      /* trailing significand bits */

    if (bq == 0xFF) {
        memcpy(t ? buf : p, t ? "nan" : "inf", 4);
        return t ? 3 : (int)(p - buf) + 3;
    }
    if ((bits << 1) == 0) {
        p[0] = '0';
        p[1] = '\0';
        return (int)(p - buf) + 1;
    }
    /* v = c 2^q; subnormals have q = FMT_Q_MIN and no hidden bit. */
    int q = bq ? (int)bq - 150 : FMT_Q_MIN;
    uint32_t c = bq ? FMT_C_MIN | t : t;
    uint32_t f;
    int e = 0;
    /* An integer below 2^24 is its own shortest form: a decimal with fewer
     * significant digits near it is a multiple of a larger power of ten, so
     * another integer, at least 1 away, and the rounding interval is at most
     * 1 wide. */
    if (q < 0 && q > -FMT_P && (c >> -q) << -q == c) {
        f = c >> -q;
    } else {
        f = to_decimal(q, c, &e);
        /* Exactly one float32 has a shortest decimal, 7.038531e-26, within
         * 2^-54 of the midpoint to its neighbour: read as a double and then
         * narrowed (cJSON, JavaScript, NumPy readers) it rounds twice and
         * lands on the neighbour. It gets the nearest 8-digit decimal, which
         * survives both readings. The exhaustive check covers both. */
        if ((bits & 0x7FFFFFFF) == 0x15AE43FD) {
            f = 70385307;
            e = -33;
        }
    }
    return (int)(p - buf) + print_decimal(p, f, e);
}
