/* test_fmt_float.c - the shortest round-trip float32 formatter
 * (server/codec/fmt_float.c): exact texts for edge values, then a million random
 * floats checked for round trip (strtof, and strtod + cast), shortest length
 * (a direct proof for each, and a brute-force "%.{1..9}g" search for every
 * 10th), nearest choice, JSON grammar and buffer bounds. Then the same text,
 * byte for byte, as the formatter before the fast printer
 * (tests/ref_fmt_float.c) for millions of bit patterns, from srv_fmt_float,
 * from srv_fmt_float_array and from the portable build of the same source
 * (no __int128). All 2^32 inputs are checked by
 * bench/check_fmt_float_exhaustive.c, which takes minutes.
 */
#include "testutil.h"

#include "codec/fmt_float.h"
#include "json_number.h"
#include "ref_fmt_float.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GUARD = 16, RANDOM_COUNT = 1000000, DIFF_RANDOM_COUNT = 4000000, DIFF_WINDOW = 20000 };

/* The same source built without __int128 (the path compilers without it
 * take), under other names, so both builds are compared here. */
int portable_fmt_float(float v, char *buf);
size_t portable_fmt_float_array_size(size_t count);
size_t portable_fmt_float_array(const float *v, size_t count, char *buf);
void portable_fmt_float_force_scalar(bool on);
#define FMT_FLOAT_NO_INT128
#define srv_fmt_float portable_fmt_float
#define srv_fmt_float_array_size portable_fmt_float_array_size
#define srv_fmt_float_array portable_fmt_float_array
#define srv_fmt_float_force_scalar portable_fmt_float_force_scalar
#include "codec/fmt_float.c"
#undef srv_fmt_float
#undef srv_fmt_float_array_size
#undef srv_fmt_float_array
#undef srv_fmt_float_force_scalar

/* Under valgrind (make valgrind) the libc conversions run ~60x slower, so the
 * sweeps take every stride()-th value instead: memory errors do not need a
 * million samples to show. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef UNDER_VALGRIND
#define UNDER_VALGRIND() 0
#endif

static int stride(void)
{
    return UNDER_VALGRIND() ? 50 : 1;
}

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Formats v into text (SRV_FMT_FLOAT_BUF + GUARD bytes) and checks what
 * holds for any input: length, NUL, nothing written past
 * SRV_FMT_FLOAT_BUF. */
static int format(float v, char *text)
{
    char buf[SRV_FMT_FLOAT_BUF + GUARD];
    memset(buf, 0x5A, sizeof buf);
    int n = srv_fmt_float(v, buf);
    for (size_t i = SRV_FMT_FLOAT_BUF; i < sizeof buf; i++)
        if (buf[i] != 0x5A)
            fail_msg("0x%08x: wrote byte %zu, past SRV_FMT_FLOAT_BUF", (unsigned)to_bits(v), i);
    if (n < 1 || n > SRV_FMT_FLOAT_MAX || buf[n] != '\0' || strlen(buf) != (size_t)n)
        fail_msg("0x%08x: returned %d for a text of %zu characters", (unsigned)to_bits(v), n,
                 strnlen(buf, SRV_FMT_FLOAT_BUF));
    memcpy(text, buf, (size_t)n + 1);
    return n;
}

/* Reads back as v both ways: strtof, and strtod then a cast (how cJSON and
 * most JSON readers get a float). */
static bool reads_back(const char *s, float v)
{
    return to_bits(strtof(s, NULL)) == to_bits(v) && to_bits((float)strtod(s, NULL)) == to_bits(v);
}

static bool reads_back_as(uint64_t d, int k, float v)
{
    char s[48];
    snprintf(s, sizeof s, "%llue%d", (unsigned long long)d, k);
    return reads_back(s, v);
}

/* The brute force: the smallest precision p for which "%.{p}g" reads back as
 * v. It may be one more than the true shortest length, when the nearest
 * p-digit decimal falls outside v's (asymmetric) rounding interval but
 * another p-digit decimal is inside. */
static int brute_force_digits(float v)
{
    char s[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(s, sizeof s, "%.*g", p, (double)v);
        if (reads_back(s, v))
            return p;
    }
    return 99;
}

typedef struct stats {
    int brute_every;               /* run the brute force on every n-th value (0: never) */
    long count;                    /* values checked */
    long brute_runs, brute_longer; /* brute force runs; those that needed more digits */
} stats;

/* Every property of one finite v; fails the test with the value otherwise. */
static void check_value(float v, stats *st)
{
    char text[SRV_FMT_FLOAT_BUF + GUARD], neg[SRV_FMT_FLOAT_BUF + GUARD];
    uint32_t bits = to_bits(v);
    format(v, text);
    if (!is_json_number(text))
        fail_msg("0x%08x: \"%s\" is not a JSON number", (unsigned)bits, text);
    char *end;
    float back = strtof(text, &end);
    if (*end != '\0' || to_bits(back) != bits)
        fail_msg("0x%08x (%.9g): \"%s\" reads back as %.9g", (unsigned)bits, (double)v, text,
                 (double)back);
    back = (float)strtod(text, NULL);
    if (to_bits(back) != bits)
        fail_msg("0x%08x (%.9g): \"%s\" reads back through strtod as %.9g", (unsigned)bits,
                 (double)v, text, (double)back);

    /* The sign is the only difference between v and -v. */
    format(-v, neg);
    const char *mag = text[0] == '-' ? text + 1 : text;
    const char *nmag = neg[0] == '-' ? neg + 1 : neg;
    if (strcmp(mag, nmag) != 0 || (text[0] == '-') == (neg[0] == '-'))
        fail_msg("0x%08x: \"%s\" and its negation \"%s\"", (unsigned)bits, text, neg);

    uint64_t d;
    int k;
    int n = decompose(mag, &d, &k);
    if (v == 0) {
        assert_int_equal(n, 0);
        return;
    }
    /* Shortest, by proof: neither neighbour of D 10^K on the grid of
     * (n-1)-digit decimals reads back as v (see the exhaustive check). */
    float av = fabsf(v);
    if (n >= 2 && (reads_back_as(d / 10, k + 1, av) || reads_back_as(d / 10 + 1, k + 1, av)))
        fail_msg("0x%08x: \"%s\" is not shortest: %llu or %llu e%d reads back too", (unsigned)bits,
                 text, (unsigned long long)(d / 10), (unsigned long long)(d / 10 + 1), k + 1);
    /* Shortest, by brute force: never longer than the first "%.{p}g" that
     * round-trips. */
    if (st->brute_every && st->count++ % st->brute_every == 0) {
        int brute = brute_force_digits(av);
        if (n > brute)
            fail_msg("0x%08x: \"%s\" has %d digits, \"%%.%dg\" round-trips", (unsigned)bits, text,
                     n, brute);
        st->brute_runs++;
        st->brute_longer += n < brute;
    }
    /* Nearest: when the correctly rounded n-digit decimal ("%.{n-1}e")
     * round-trips, it is the one we print. */
    char near[32];
    snprintf(near, sizeof near, "%.*e", n - 1, (double)av);
    if (reads_back(near, av) && strtod(near, NULL) != strtod(mag, NULL))
        fail_msg("0x%08x: \"%s\", but \"%s\" is nearer and reads back too", (unsigned)bits, text,
                 near);
}

static void expect_text(float v, const char *want)
{
    char text[SRV_FMT_FLOAT_BUF + GUARD];
    int n = format(v, text);
    if (strcmp(text, want) != 0)
        fail_msg("0x%08x (%.9g): got \"%s\", want \"%s\"", (unsigned)to_bits(v), (double)v, text,
                 want);
    assert_int_equal(n, (int)strlen(want));
    stats st = {.brute_every = 1};
    check_value(v, &st);
}

static void test_exact_texts(void **state)
{
    (void)state;
    expect_text(0.0f, "0");
    expect_text(-0.0f, "-0");
    expect_text(1.0f, "1");
    expect_text(-1.0f, "-1");
    expect_text(3.0f, "3");
    expect_text(0.1f, "0.1");
    expect_text(-0.1f, "-0.1");
    expect_text(0.3f, "0.3");
    expect_text(2.5f, "2.5");
    expect_text(1.0f / 3.0f, "0.33333334");
    expect_text(2.0f / 3.0f, "0.6666667");
    expect_text(3.14159265f, "3.1415927");
    expect_text(123.45f, "123.45");
    expect_text(100.0f, "100");
    expect_text(1000.0f, "1e3"); /* exponent form when strictly shorter */
    expect_text(1234.0f, "1234");
    expect_text(0.01f, "0.01");
    expect_text(0.001f, "1e-3");
    expect_text(0.00123f, "0.00123");
    expect_text(0.000123f, "1.23e-4");
    expect_text(1e-7f, "1e-7");
    expect_text(1.5e20f, "1.5e20");
    expect_text(1e10f, "1e10");
    expect_text(1e38f, "1e38");
    expect_text(123456792.0f, "123456790");
    expect_text(16777215.0f, "16777215");
    expect_text(16777216.0f, "16777216");
    expect_text(16777218.0f, "16777218");
    expect_text(FLT_MAX, "3.4028235e38");
    expect_text(-FLT_MAX, "-3.4028235e38");
    expect_text(FLT_MIN, "1.1754944e-38");
    expect_text(-FLT_MIN, "-1.1754944e-38");
    expect_text(from_bits(0x007FFFFF), "1.1754942e-38"); /* largest subnormal */
    expect_text(from_bits(0x00000001), "1e-45");         /* smallest subnormal */
    expect_text(from_bits(0x80000001), "-1e-45");
    expect_text(from_bits(0x00000002), "3e-45");
    expect_text(from_bits(0x00000003), "4e-45");
    expect_text(FLT_EPSILON, "1.1920929e-7");
    expect_text(nextafterf(1.0f, 2.0f), "1.0000001");
    expect_text(nextafterf(1.0f, 0.0f), "0.99999994");
    /* The one float whose shortest decimal, 7.038531e-26, lies within 2^-54
     * of a midpoint: strtod + cast would round twice and miss. */
    expect_text(from_bits(0x15AE43FD), "7.0385307e-26");
    expect_text(from_bits(0x95AE43FD), "-7.0385307e-26");
    /* The longest text there is, 15 characters. */
    expect_text(-1.17549435e-38f, "-1.1754944e-38");
    expect_text(from_bits(0x80800001), "-1.1754945e-38");
}

static void test_non_finite(void **state)
{
    (void)state;
    char text[SRV_FMT_FLOAT_BUF + GUARD];
    assert_int_equal(format(INFINITY, text), 3);
    assert_string_equal(text, "inf");
    assert_int_equal(format(-INFINITY, text), 4);
    assert_string_equal(text, "-inf");
    assert_int_equal(format(NAN, text), 3);
    assert_string_equal(text, "nan");
    assert_int_equal(format(-NAN, text), 3);
    assert_string_equal(text, "nan");
}

/* Every power of ten in float range prints as one digit, and so do the
 * floats next to the power-of-two boundaries, where the rounding interval is
 * lopsided. */
static void test_powers(void **state)
{
    (void)state;
    stats st = {.brute_every = 1};
    for (int e = -45; e <= 38; e++) {
        char s[16];
        snprintf(s, sizeof s, "1e%d", e);
        float v = strtof(s, NULL);
        char text[SRV_FMT_FLOAT_BUF + GUARD];
        format(v, text);
        uint64_t d;
        int k;
        if (decompose(text, &d, &k) != 1 || d != 1 || k != e)
            fail_msg("%s prints as \"%s\"", s, text);
        check_value(v, &st);
    }
    for (int e = -149; e <= 127; e++) {
        float p2 = ldexpf(1.0f, e);
        check_value(p2, &st);
        check_value(nextafterf(p2, 0.0f), &st);
        check_value(nextafterf(p2, INFINITY), &st);
    }
}

/* Every subnormal with a short significand and every float with a short
 * decimal form near the edges of the exponent range. */
static void test_ranges(void **state)
{
    (void)state;
    stats st = {.brute_every = 1};
    const uint32_t step = (uint32_t)stride();
    for (uint32_t b = 0; b < 20000; b += step)
        check_value(from_bits(b), &st); /* subnormals, smallest first */
    for (uint32_t b = 0x007FFFFF - 2000; b <= 0x00800000 + 2000; b += step)
        check_value(from_bits(b), &st); /* across FLT_MIN */
    for (uint32_t b = 0x7F7FFFFF - 2000; b <= 0x7F7FFFFF; b += step)
        check_value(from_bits(b), &st); /* up to FLT_MAX */
    for (uint32_t i = 1; i <= 20000; i += step)
        check_value((float)i, &st); /* integers: their own shortest form */
    for (uint32_t i = 1; i <= 20000; i += step)
        check_value((float)i / 1000.0f, &st); /* short decimals */
}

/* A million floats: half uniform over all finite bit patterns, half from a
 * layer-like distribution (normal, scales 1e-3 to 1e3). */
static void test_random(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 20240917);
    /* The brute force costs up to nine snprintf calls a value: every 10th. */
    stats st = {.brute_every = 10};
    const int count = RANDOM_COUNT / stride();
    for (int i = 0; i < count; i++) {
        float v;
        if (i % 2 == 0) {
            uint32_t b;
            do {
                b = (uint32_t)(tu_uniform(&rng, 0, 4294967296.0));
            } while (((b >> 23) & 0xFF) == 0xFF);
            v = from_bits(b);
        } else {
            double u1 = tu_uniform(&rng, 1e-12, 1), u2 = tu_uniform(&rng, 0, 1);
            double scale = pow(10.0, tu_uniform(&rng, -3, 3));
            v = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) * scale);
        }
        check_value(v, &st);
    }
    /* The brute force may be a digit longer (lopsided intervals), never
     * shorter; say how often, so a change is visible. */
    print_message("%d values; brute-force %%.{p}g run on %ld, longer than ours for %ld\n", count,
                  st.brute_runs, st.brute_longer);
}

/* The texts are numbers to cJSON too, and concatenated into one buffer the
 * way tensor.c does they make a valid JSON array with the same floats. */
static void test_json_array(void **state)
{
    (void)state;
    enum { N = 4096 };
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    float *x = tu_alloc(N, sizeof *x);
    char *buf = tu_alloc(N * (SRV_FMT_FLOAT_MAX + 1) + 2 + SRV_FMT_FLOAT_BUF, 1);
    for (int i = 0; i < N; i++)
        x[i] = (float)(tu_uniform(&rng, -1, 1) * pow(10.0, tu_uniform(&rng, -40, 38)));
    x[0] = -0.0f;
    x[1] = FLT_MAX;
    x[2] = from_bits(1);
    char *p = buf;
    *p++ = '[';
    for (int i = 0; i < N; i++) {
        if (i)
            *p++ = ',';
        p += srv_fmt_float(x[i], p);
    }
    *p++ = ']';
    *p = '\0';
    cJSON *arr = cJSON_Parse(buf);
    assert_non_null(arr);
    assert_int_equal(cJSON_GetArraySize(arr), N);
    int i = 0;
    for (const cJSON *c = arr->child; c; c = c->next, i++) {
        assert_true(cJSON_IsNumber(c));
        float got = (float)c->valuedouble; /* cJSON reads doubles with strtod */
        if (to_bits(got) != to_bits(x[i]))
            fail_msg("element %d: 0x%08x came back as 0x%08x", i, (unsigned)to_bits(x[i]),
                     (unsigned)to_bits(got));
    }
    cJSON_Delete(arr);
    free(buf);
    free(x);
}

/* Fails unless srv_fmt_float, its portable build and the reference
 * (the formatter before the fast printer) write the same text and length for
 * the bit pattern b. */
static void expect_same_as_ref(uint32_t b)
{
    char got[SRV_FMT_FLOAT_BUF + GUARD], port[SRV_FMT_FLOAT_BUF + GUARD],
        want[SRV_FMT_FLOAT_BUF + GUARD];
    float v = from_bits(b);
    int n = format(v, got);
    int np = portable_fmt_float(v, port);
    int nr = ref_fmt_float(v, want);
    if (n != nr || strcmp(got, want) != 0)
        fail_msg("0x%08x: \"%s\" (%d), the reference wrote \"%s\" (%d)", (unsigned)b, got, n, want,
                 nr);
    if (np != nr || strncmp(port, want, (size_t)nr + 1) != 0)
        fail_msg("0x%08x: the portable build wrote \"%.*s\", the reference \"%s\"", (unsigned)b, np,
                 port, want);
}

static uint32_t next_bits(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (uint32_t)((*s * 0x2545F4914F6CDD1Du) >> 32);
}

/* Byte for byte the reference's text: random bit patterns (both signs,
 * non-finite ones included), every pattern within DIFF_WINDOW of each power
 * of ten (where the digit count and the layout change) and of each power of
 * two (where the rounding interval is lopsided), and every subnormal with a
 * short significand. */
static void test_same_as_reference(void **state)
{
    (void)state;
    const uint32_t step = (uint32_t)stride();
    uint64_t s = 0x243F6A8885A308D3u;
    const int count = DIFF_RANDOM_COUNT / stride();
    for (int i = 0; i < count; i++)
        expect_same_as_ref(next_bits(&s));
    for (int e = -45; e <= 38; e++) {
        char txt[16];
        snprintf(txt, sizeof txt, "1e%d", e);
        uint32_t b = to_bits(strtof(txt, NULL));
        for (uint32_t d = 0; d < DIFF_WINDOW; d += step) {
            expect_same_as_ref(b + d);
            expect_same_as_ref(b - d);
        }
    }
    for (uint32_t bq = 1; bq < 255; bq++)
        for (uint32_t d = 0; d < 64; d++) {
            expect_same_as_ref((bq << 23) + d);
            expect_same_as_ref((bq << 23) - d);
        }
    for (uint32_t b = 0; b < DIFF_WINDOW; b += step)
        expect_same_as_ref(b | 0x80000000u);
}

/* Values with 1 to 9 significant digits at every decimal exponent, so each
 * layout (0.00ddd, 0.0d, d.ddd, dddd.d, ddd00, d.ddde-x, de+x) and each
 * switch between them is met with every digit count, and the digits ending
 * in zeros ("1.2", "120", "1.2e5"). */
static void test_layouts(void **state)
{
    (void)state;
    stats st = {.brute_every = 0};
    static const char *const digits[] = {"123456789", "987654321", "100000001",
                                         "999999999", "500000000", "120000000"};
    for (size_t t = 0; t < sizeof digits / sizeof *digits; t++)
        for (int n = 1; n <= 9; n++)
            for (int e = -46; e <= 39; e++) {
                char txt[32];
                snprintf(txt, sizeof txt, "%.1s.%.*se%d", digits[t], n - 1, digits[t] + 1, e);
                float v = strtof(txt, NULL);
                if (!isfinite(v))
                    continue;
                expect_same_as_ref(to_bits(v));
                expect_same_as_ref(to_bits(v) + 1);
                expect_same_as_ref(to_bits(v) - 1);
                if (v != 0)
                    check_value(v, &st);
            }
    /* Where plain notation gives way to exponent notation, and back. */
    expect_text(0.0012f, "0.0012"); /* as long as "1.2e-3" */
    expect_text(0.002f, "2e-3");
    expect_text(0.02f, "0.02");
    expect_text(0.05f, "0.05");
    expect_text(0.5f, "0.5");
    expect_text(0.00123456f, "0.00123456");
    expect_text(0.0001234f, "1.234e-4");
    expect_text(0.123456789f, "0.12345679");
    expect_text(1.5f, "1.5");
    expect_text(12.5f, "12.5");
    expect_text(1234567.5f, "1234567.5");
    expect_text(8388607.5f, "8388607.5"); /* eight digits before the point */
    expect_text(10.0f, "10");
    expect_text(12000.0f, "12000");
    expect_text(120000.0f, "1.2e5");
    expect_text(9999999.0f, "9999999");
    expect_text(1e7f, "1e7");
    expect_text(99999.99f, "99999.99");
    expect_text(9.99e-4f, "9.99e-4");
    expect_text(0.00099999f, "9.9999e-4");
    expect_text(100.0f, "100");
    expect_text(0.099999994f, "0.099999994");
    expect_text(0.99999994f, "0.99999994");
    expect_text(-0.00999999977f, "-0.01");
}

/* srv_fmt_float_array: "[...]" with exactly srv_fmt_float's texts, null
 * for non-finite values, odd and even counts (it works in pairs), within
 * srv_fmt_float_array_size bytes. */
static void check_array(const float *x, size_t n)
{
    size_t size = srv_fmt_float_array_size(n);
    assert_true(size > 0);
    char *buf = tu_alloc(size + GUARD, 1);
    char *want = tu_alloc(size + GUARD, 1);
    size_t len = 0;
    for (int scalar = 1; scalar >= 0; scalar--) {
        /* The values one at a time, then eight at a time where AVX-512
         * runs (the second pass's text is the one checked below). */
        srv_fmt_float_force_scalar(scalar);
        memset(buf, 0x5A, size + GUARD);
        len = srv_fmt_float_array(x, n, buf);
        for (size_t i = size; i < size + GUARD; i++)
            if ((unsigned char)buf[i] != 0x5A)
                fail_msg("%zu values: wrote byte %zu of %zu", n, i, size);
        if (scalar)
            memcpy(want, buf, len + 1);
        else if (strcmp(buf, want) != 0)
            fail_msg("%zu values: eight at a time \"%.80s\", one at a time \"%.80s\"", n, buf,
                     want);
    }
    char *p = want;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        if (isfinite(x[i])) {
            p += ref_fmt_float(x[i], p);
        } else {
            memcpy(p, "null", 4);
            p += 4;
        }
    }
    *p++ = ']';
    *p = '\0';
    assert_int_equal(len, (size_t)(p - want));
    assert_int_equal(strlen(buf), len);
    if (strcmp(buf, want) != 0)
        fail_msg("%zu values: \"%.80s\", want \"%.80s\"", n, buf, want);
    size_t plen = portable_fmt_float_array(x, n, buf);
    assert_int_equal(plen, len);
    assert_string_equal(buf, want);
    free(buf);
    free(want);
}

static void test_array(void **state)
{
    (void)state;
    enum { N = 20000 };
    float *x = tu_alloc(N, sizeof *x);
    uint64_t s = 0x13198A2E03707344u;
    for (size_t i = 0; i < N; i++)
        x[i] = from_bits(next_bits(&s)); /* NaN and infinities included */
    for (size_t n = 0; n <= 9; n++)
        check_array(x, n);
    /* Around the AVX-512 path's batches of 64 values and groups of 8. */
    const size_t edges[] = {15, 16, 17, 63, 64, 65, 71, 72, 127, 128, 129, 136};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        check_array(x + i, edges[i]);
    check_array(x, N);
    check_array(x + 1, N - 1);
    /* The one float that gets an 8-digit text (see fmt_float.h) among
     * seven ordinary ones: a group the AVX-512 path takes but that value. */
    for (size_t i = 0; i < 8; i++)
        x[i] = from_bits(0x15AE43FDu + (uint32_t)i - 3);
    check_array(x, 8);
    const float special[] = {
        0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -FLT_MAX, from_bits(1), from_bits(0x15AE43FD)};
    const size_t ns = sizeof special / sizeof *special;
    for (size_t i = 0; i < N; i++)
        x[i] = special[(i * 7 + i / ns) % ns]; /* every pair of specials, both orders */
    check_array(x, N);
    check_array(x + 1, N - 1);
    assert_int_equal(srv_fmt_float_array_size(SIZE_MAX / 8), 0);
    char empty[2 + SRV_FMT_FLOAT_BUF];
    assert_int_equal(srv_fmt_float_array(NULL, 0, empty), 2);
    assert_string_equal(empty, "[]");
    free(x);
}

/* The same windows through srv_fmt_float_array, whose AVX-512 path
 * converts eight neighbouring patterns at a time: each window's patterns in
 * order, one array (check_array compares it with the reference, one value
 * at a time and the portable build). */
static void test_array_windows(void **state)
{
    (void)state;
    const uint32_t half = DIFF_WINDOW / (uint32_t)stride();
    float *x = tu_alloc(2 * (size_t)half, sizeof *x);
    for (int e = -45; e <= 38; e++) {
        char txt[16];
        snprintf(txt, sizeof txt, "1e%d", e);
        uint32_t b = to_bits(strtof(txt, NULL)) - half;
        for (uint32_t d = 0; d < 2 * half; d++)
            x[d] = from_bits(b + d);
        check_array(x, 2 * (size_t)half);
    }
    for (uint32_t bq = 1; bq < 255; bq++) {
        for (uint32_t d = 0; d < 128; d++)
            x[d] = from_bits((bq << 23) + d - 64);
        check_array(x, 128);
    }
    free(x);
}

/* The tables in fmt_float.c (visible here through the portable build)
 * against the formulas they were generated from. */
static void test_tables(void **state)
{
    (void)state;
    for (int bq = 0; bq < 255; bq++) {
        int q = bq ? bq - 150 : FMT_Q_MIN;
        int k = flog10_pow2(q);
        int h = q + flog2_pow10(-k) + 33;
        const fmt_scale *sc = &SCALE[bq];
        uint64_t g = G[k - FMT_K_MIN];
        if (sc->k != k || sc->h2 != h + 2 || sc->g != g || sc->d_hi != g >> (63 - h) ||
            sc->d_lo != g << (h + 1))
            fail_msg("SCALE[%d] does not match k=%d h=%d", bq, k, h);
        if (bq == 0)
            continue;
        /* s = x >> 33 at both ends of the binade (it grows with c). */
        uint64_t lo, hi_min, hi_max;
        mul_128(g, (uint64_t)FMT_C_MIN << (h + 2), &lo, &hi_min);
        mul_128(g, (uint64_t)(2 * FMT_C_MIN - 1) << (h + 2), &lo, &hi_max);
        uint64_t s_min = hi_min >> 33, s_max = hi_max >> 33;
        int64_t n = count_digits(s_min);
        uint64_t p10 = 1;
        for (int64_t i = 0; i < n; i++)
            p10 *= 10;
        uint32_t thr = s_max >= p10 ? (uint32_t)p10 : UINT32_MAX;
        assert_true(count_digits(s_max) <= n + 1);
        if (sc->thr != thr || sc->m_lo != SCALE9[n] || (n < 9 && sc->m_hi != SCALE9[n + 1]) ||
            sc->x0 != k + n - 1)
            fail_msg("SCALE[%d]: digit counts of s in [%llu, %llu] do not match", bq,
                     (unsigned long long)s_min, (unsigned long long)s_max);
    }
    for (uint64_t p10 = 1, n = 1; p10 < 1000000000; p10 *= 10, n++) {
        assert_int_equal(count_digits(p10), n);
        assert_int_equal(count_digits(p10 * 10 - 1), n);
        assert_int_equal(SCALE9[n] * p10, 100000000);
    }
    for (int i = 0; i < 30; i++) {
        uint64_t b = (uint64_t)1 << i;
        char txt[16];
        assert_int_equal(count_digits(b), snprintf(txt, sizeof txt, "%llu", (unsigned long long)b));
        assert_int_equal(count_digits(2 * b - 1),
                         snprintf(txt, sizeof txt, "%llu", (unsigned long long)(2 * b - 1)));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_texts),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_powers),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_json_array),
        cmocka_unit_test(test_same_as_reference),
        cmocka_unit_test(test_array_windows),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_array),
        cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests_name("fmt_float", tests, NULL, NULL);
}
