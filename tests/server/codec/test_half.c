/* test_half.c - server/codec/half.c against tests/ref_half.c (the types'
 * definitions, rounding by search): every one of the 65536 patterns of f16
 * and of bf16 widened, the bulk widening (F16C where the CPU has it) equal
 * to the scalar one bit for bit, and narrowing from float32 and from double
 * at every value, every midpoint (ties to even), just off each midpoint,
 * the overflow threshold, subnormals, signed zeros and NaN; then a million
 * seeded random floats and doubles. Exact: no tolerance. And
 * srv_f32_is_tie, the test that lets lifted JSON numbers round on through
 * float32, against its definition: a float32 is a tie exactly when the
 * doubles just below and just above it round to different values.
 */
#include "codec/half.h"
#include "ref_half.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Widening: every pattern, value and bits (NaN keeps its sign and is NaN). */
static void test_widen_all_patterns(void **state)
{
    (void)state;
    for (uint32_t p = 0; p < 65536; p++) {
        double want = ref_f16_value((uint16_t)p), wantb = ref_bf16_value((uint16_t)p);
        float got = srv_f16_to_f32((uint16_t)p), gotb = srv_bf16_to_f32((uint16_t)p);
        if (isnan(want)) {
            assert_true(isnan(got));
            assert_int_equal(bits_of(got) >> 31, p >> 15);
        } else {
            assert_true((double)got == want);
            assert_int_equal(signbit(got) != 0, (p >> 15) != 0);
        }
        if (isnan(wantb))
            assert_true(isnan(gotb));
        else
            assert_true((double)gotb == wantb);
        assert_int_equal(bits_of(gotb), p << 16);
    }
}

/* The bulk forms against the scalar ones over every pattern, at every
 * alignment and length tail (the F16C loop takes 8 at a time). */
static void test_bulk_equals_scalar(void **state)
{
    (void)state;
    unsigned char *src = malloc(2 * 65536 + 1);
    float *dst = malloc(65536 * sizeof(float));
    assert_non_null(src);
    assert_non_null(dst);
    print_message("f16 bulk widening: %s\n", srv_half_native() ? "F16C" : "portable");
    for (int off = 0; off < 2; off++) {
        for (uint32_t p = 0; p < 65536; p++) {
            src[off + 2 * p] = (unsigned char)(p & 0xff);
            src[off + 2 * p + 1] = (unsigned char)(p >> 8);
        }
        for (size_t n = 65536; n > 65520; n--) {
            srv_f16_to_f32_n(src + off, dst, n);
            for (size_t p = 0; p < n; p++)
                assert_int_equal(bits_of(dst[p]), bits_of(srv_f16_to_f32((uint16_t)p)));
            srv_bf16_to_f32_n(src + off, dst, n);
            for (size_t p = 0; p < n; p++)
                assert_int_equal(bits_of(dst[p]), (uint32_t)p << 16);
        }
    }
    free(src);
    free(dst);
}

/* Narrowing at every finite value, at each midpoint between neighbours and
 * just off it, from double and (where float32 holds it) from float. */
static void check_narrowing(const char *what, double (*val)(uint16_t), uint16_t (*ref)(double),
                            uint16_t (*from64)(double), uint16_t (*from32)(float), uint16_t max)
{
    for (uint32_t p = 0; p <= max; p++) {
        for (int neg = 0; neg < 2; neg++) {
            double v = val((uint16_t)p) * (neg ? -1 : 1);
            double next =
                p < max ? val((uint16_t)(p + 1)) : val(max) * 2 - val((uint16_t)(max - 1));
            double mid = (fabs(v) + next) / 2 * (neg ? -1 : 1); /* exact in double */
            double off = (next - fabs(v)) * 0x1p-20 * (neg ? -1 : 1);
            const double xs[] = {v, mid, mid + off, mid - off};
            for (int k = 0; k < 4; k++) {
                uint16_t want = ref(xs[k]);
                if (from64(xs[k]) != want)
                    fail_msg("%s from double %.17g: got 0x%04x, want 0x%04x", what, xs[k],
                             from64(xs[k]), want);
                if ((double)(float)xs[k] == xs[k] && from32((float)xs[k]) != want)
                    fail_msg("%s from float %.9g: got 0x%04x, want 0x%04x", what, xs[k],
                             from32((float)xs[k]), want);
            }
        }
    }
}

static void test_narrow_every_value_and_midpoint(void **state)
{
    (void)state;
    check_narrowing("f16", ref_f16_value, ref_f16_round, srv_f64_to_f16, srv_f32_to_f16, 0x7bff);
    check_narrowing("bf16", ref_bf16_value, ref_bf16_round, srv_f64_to_bf16, srv_f32_to_bf16,
                    0x7f7f);
}

/* The edges by name: overflow, the smallest subnormal's half, zeros, NaN,
 * infinity, and double rounding (a double just above a midpoint that
 * float32 would round onto it). */
static void test_narrow_edges(void **state)
{
    (void)state;
    assert_int_equal(srv_f64_to_f16(65504.0), 0x7bff);
    assert_int_equal(srv_f64_to_f16(65519.99), 0x7bff);
    assert_int_equal(srv_f64_to_f16(65520.0), 0x7c00); /* the tie goes to even: up */
    assert_int_equal(srv_f64_to_f16(-1e10), 0xfc00);
    assert_int_equal(srv_f64_to_f16(0x1p-25), 0x0000); /* half the smallest subnormal: even */
    assert_int_equal(srv_f64_to_f16(0x1.0000000000001p-25), 0x0001);
    assert_int_equal(srv_f64_to_f16(0x1p-24), 0x0001);
    assert_int_equal(srv_f64_to_f16(-0.0), 0x8000);
    assert_int_equal(srv_f64_to_f16(INFINITY), 0x7c00);
    assert_int_equal(srv_f64_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(srv_f64_to_f16(NAN) & 0x7e00, 0x7e00); /* quiet */
    assert_int_equal(srv_f32_to_f16(-NAN) >> 15, 1);
    assert_int_equal(srv_f64_to_bf16(3.4e38), 0x7f80);
    assert_int_equal(srv_f64_to_bf16(-0.0), 0x8000);
    assert_int_equal(srv_f64_to_bf16(NAN) & 0x7fc0, 0x7fc0);
    /* A NaN whose payload is only in the bits the narrowing drops (the low
     * 13 of f16, the low 16 of bf16) stays a NaN, quiet, sign kept: without
     * the quiet bit forced it would come out an infinity. */
    static const uint32_t payload_nans[] = {0x7f800001u, 0x7f801fffu, 0xff800001u, 0x7f80ffffu};
    for (size_t i = 0; i < sizeof payload_nans / sizeof *payload_nans; i++) {
        float f;
        memcpy(&f, &payload_nans[i], sizeof f);
        const uint16_t h = srv_f32_to_f16(f), b = srv_f32_to_bf16(f);
        assert_int_equal(h & 0x7e00u, 0x7e00u);
        assert_int_equal(h >> 15, payload_nans[i] >> 31);
        assert_int_equal(b & 0x7fc0u, 0x7fc0u);
        assert_int_equal(b >> 15, payload_nans[i] >> 31);
        assert_true(isnan(srv_f16_to_f32(h)) && isnan(srv_bf16_to_f32(b)));
    }
    assert_int_equal(srv_f64_to_bf16(0x1p-133), 0x0001); /* bf16's smallest subnormal */
    assert_int_equal(srv_f64_to_bf16(0x1p-134), 0x0000);
    /* 1 + 2^-11 is f16's midpoint between 1 and 1 + 2^-10; a hair above
     * it must round up, though the float32 nearest to it is the midpoint. */
    double above = 1.0 + 0x1p-11 + 0x1p-40;
    assert_int_equal(srv_f32_to_f16((float)above), 0x3c00);
    assert_int_equal(srv_f64_to_f16(above), 0x3c01);
    double above_b = 1.0 + 0x1p-8 + 0x1p-40;
    assert_int_equal(srv_f32_to_bf16((float)above_b), 0x3f80);
    assert_int_equal(srv_f64_to_bf16(above_b), 0x3f81);
}

/* A million seeded floats and doubles over the whole range (bit patterns,
 * so every exponent appears) against the search. */
static void test_narrow_random(void **state)
{
    (void)state;
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 1000000; i++) {
        uint64_t z;
        uint32_t u;
        float f;
        double d;
        s += 0x9e3779b97f4a7c15ULL;
        z = s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        u = (uint32_t)z;
        memcpy(&f, &u, sizeof f);
        if (isfinite(f)) {
            assert_int_equal(srv_f32_to_f16(f), ref_f16_round(f));
            assert_int_equal(srv_f32_to_bf16(f), ref_bf16_round(f));
        }
        /* doubles near the types' range: exponent -30 .. 20 */
        d = ldexp(1.0 + (double)(z >> 12) * 0x1p-52, (int)((z >> 2) % 51) - 30) *
            ((z & 1) ? -1 : 1);
        assert_int_equal(srv_f64_to_f16(d), ref_f16_round(d));
        assert_int_equal(srv_f64_to_bf16(d), ref_bf16_round(d));
    }
}

/* The definition by search: no rounding boundary lies strictly between two
 * adjacent doubles (boundaries are float32 values), so f is on one exactly
 * when its double neighbours round apart. */
static int ref_is_tie(float f, int bf16)
{
    double lo = nextafter((double)f, -INFINITY), hi = nextafter((double)f, INFINITY);
    if (bf16)
        return ref_bf16_value(ref_bf16_round(lo)) != ref_bf16_value(ref_bf16_round(hi));
    return ref_f16_value(ref_f16_round(lo)) != ref_f16_value(ref_f16_round(hi));
}

static void check_tie(float f)
{
    for (int bf16 = 0; bf16 < 2; bf16++)
        if (srv_f32_is_tie(f, bf16) != ref_is_tie(f, bf16))
            fail_msg("srv_f32_is_tie(%a, %s) = %d, want %d", (double)f, bf16 ? "bf16" : "f16",
                     srv_f32_is_tie(f, bf16), ref_is_tie(f, bf16));
}

/* Random float32 bits from the xorshift state s; a quarter with an f16
 * tie's low bits, a quarter with a bf16 tie's. */
static uint32_t tie_shaped(uint64_t *s)
{
    uint32_t u;
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    u = (uint32_t)(*s >> 16);
    if ((*s & 3) == 0)
        u = (u & ~0x1fffu) | 0x1000u;
    else if ((*s & 3) == 1)
        u = (u & ~0xffffu) | 0x8000u;
    return u;
}

/* Every f16 and bf16 value and midpoint with its float32 neighbours, then
 * random patterns, a quarter of them with tie-shaped low bits. */
static void test_is_tie(void **state)
{
    (void)state;
    for (uint32_t p = 0; p < 0x7c00u; p++) {
        float v = (float)ref_f16_value((uint16_t)p);
        float mid = (float)((ref_f16_value((uint16_t)p) + ref_f16_value((uint16_t)(p + 1))) / 2);
        const float xs[] = {v, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 4; k++) {
            check_tie(xs[k]);
            check_tie(-xs[k]);
        }
    }
    for (uint32_t p = 0; p < 0x7f80u; p++) {
        uint32_t u = p << 16 | 0x8000u;
        float mid;
        memcpy(&mid, &u, sizeof mid);
        check_tie(mid);
        check_tie(nextafterf(mid, 0));
        check_tie(nextafterf(mid, INFINITY));
    }
    uint64_t s = 0x2545f4914f6cdd1dULL;
    for (int i = 0; i < 1000000; i++) {
        const uint32_t u = tie_shaped(&s);
        float f;
        memcpy(&f, &u, sizeof f);
        if (isfinite(f))
            check_tie(f);
    }
}

/* srv_f32_round_through_half against the definitions: each value not a
 * tie becomes the value of ref_*_round, each tie stays, the count is the
 * ties', and a value rounding to infinity (or one that is not finite)
 * makes it SIZE_MAX. Runs of 1000 random and tie-shaped floats, whole
 * blocks and tails alike. */
static void test_round_through(void **state)
{
    (void)state;
    enum { N = 1000 };
    float x[N], want[N];
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (int round = 0; round < 400; round++) {
        const int bf16 = round & 1, n = N - round % 17;
        size_t ties = 0, got;
        for (int i = 0; i < n; i++) {
            uint32_t u = tie_shaped(&s);
            /* Within range: exponents 102 to 141 for f16 (below 2^15), 0 to
             * 252 for bf16 (below 2^126); the edges are checked below. */
            u = (u & 0x807fffffu) |
                ((bf16 ? (uint32_t)(s >> 8) % 253u : 102u + (uint32_t)(s >> 8) % 40u) << 23);
            memcpy(&x[i], &u, sizeof u);
            if (srv_f32_is_tie(x[i], bf16)) {
                want[i] = x[i];
                ties++;
            } else {
                want[i] = bf16 ? (float)ref_bf16_value(ref_bf16_round(x[i]))
                               : (float)ref_f16_value(ref_f16_round(x[i]));
            }
        }
        got = srv_f32_round_through_half(x, (size_t)n, bf16);
        assert_int_equal(got, ties);
        for (int i = 0; i < n; i++)
            if (bits_of(x[i]) != bits_of(want[i]))
                fail_msg("%s element %d: %a, want %a", bf16 ? "bf16" : "f16", i, (double)x[i],
                         (double)want[i]);
    }
    /* Past the range, or not finite: refused wherever it sits. */
    const float past[2][3] = {{65520.0f, -1e30f, INFINITY}, {FLT_MAX, -FLT_MAX, NAN}};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int k = 0; k < 3; k++)
            for (int at = 0; at < 40; at += 13) {
                for (int i = 0; i < 40; i++)
                    x[i] = 0.5f;
                x[at] = past[bf16][k];
                assert_true(srv_f32_round_through_half(x, 40, bf16) == SIZE_MAX);
            }
    x[0] = 65504.0f;       /* f16's largest: stays */
    x[1] = -3.3895314e38f; /* bf16's largest: stays */
    assert_int_equal(srv_f32_round_through_half(x, 1, 0), 0);
    assert_int_equal(srv_f32_round_through_half(x + 1, 1, 1), 0);
    assert_true(x[0] == 65504.0f && x[1] == -3.3895314e38f);
}

/* srv_f32_to_half_n gives srv_f32_to_f16's and srv_f32_to_bf16's bits
 * (F16C's vcvtps2ph for f16 where the CPU has it): every f16 and bf16
 * value, midpoint and neighbour as float32, infinities, NaNs of every
 * payload shape, then random bit patterns, at every offset of a run of
 * eight (the vector body and its tail). */
static void test_narrow_bulk(void **state)
{
    (void)state;
    enum { N = 4 * 65536 + 64 };
    float *x = tu_alloc(N, sizeof(float));
    uint16_t *got = tu_alloc(N, sizeof(uint16_t));
    size_t n = 0;
    for (uint32_t p = 0; p < 65536; p++) {
        const double v = ref_f16_value((uint16_t)p), w = ref_bf16_value((uint16_t)p);
        if (isfinite(v)) {
            const double next = ref_f16_value((uint16_t)(p + 1));
            x[n++] = (float)v;
            x[n++] =
                isfinite(next) && p != 0x7bffu && p != 0xfbffu ? (float)((v + next) / 2) : 1.0f;
        }
        x[n++] = (float)w; /* NaN and infinity patterns of bf16 too */
        x[n++] = nextafterf((float)w, 0.0f);
    }
    const uint32_t specials[] = {0x7f800001u, 0x7fc00000u, 0xffbfffffu, 0x7f802000u,
                                 0x7fffffffu, 0x477ff000u, 0x477fefffu, 0x7f7f8000u,
                                 0x7f7f7fffu, 0x33000000u, 0x33000001u, 0x80000001u};
    for (size_t k = 0; k < sizeof specials / sizeof *specials && n < N; k++)
        memcpy(&x[n++], &specials[k], sizeof(float));
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (size_t off = 0; off < 8; off++) {
            srv_f32_to_half_n(x + off, got, n - off, bf16);
            for (size_t i = 0; i < n - off; i++) {
                const uint16_t want =
                    bf16 ? srv_f32_to_bf16(x[off + i]) : srv_f32_to_f16(x[off + i]);
                if (got[i] != want)
                    fail_msg("%s of %a (0x%08x): 0x%04x, one at a time 0x%04x",
                             bf16 ? "bf16" : "f16", (double)x[off + i], bits_of(x[off + i]), got[i],
                             want);
            }
        }
    uint64_t s = 0x2545f4914f6cdd1dULL;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < N; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            const uint32_t u = (uint32_t)(s >> 11);
            memcpy(&x[i], &u, sizeof u);
        }
        srv_f32_to_half_n(x, got, N, round & 1);
        for (size_t i = 0; i < N; i++)
            if (got[i] != ((round & 1) ? srv_f32_to_bf16(x[i]) : srv_f32_to_f16(x[i])))
                fail_msg("random 0x%08x: 0x%04x", bits_of(x[i]), got[i]);
    }
    free(x);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widen_all_patterns),
        cmocka_unit_test(test_bulk_equals_scalar),
        cmocka_unit_test(test_narrow_every_value_and_midpoint),
        cmocka_unit_test(test_narrow_edges),
        cmocka_unit_test(test_narrow_random),
        cmocka_unit_test(test_is_tie),
        cmocka_unit_test(test_round_through),
        cmocka_unit_test(test_narrow_bulk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
