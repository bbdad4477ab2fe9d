/* test_json_numbers.c - the number readers behind the lift
 * (server/codec/json_array.c): each JSON number becomes the float cJSON
 * and strtod make of it, bit for bit, whichever reader takes it (one at a
 * time, in runs, eight at a time with AVX-512 VBMI2, 17 to 19 digits by
 * one multiplication), and what a reader cannot take is handed on or
 * left for cJSON with the same error. tests/server/codec/test_json_lift.c
 * tests the lift around them.
 */
#include "codec/json_array.h"
#include "codec/json_check.h"
#include "codec/json_lift.h"
#include "lift_fixture.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_numbers_bit_identical(void **state)
{
    (void)state;
    static const char *const fixed[] = {"0",
                                        "-0",
                                        "1",
                                        "-1",
                                        "0.5",
                                        "1e0",
                                        "1E+2",
                                        "2e-3",
                                        "123456789",
                                        "0.1",
                                        "0.30000001",
                                        "3.4028235e38",
                                        "3.40282356e38",
                                        "-3.4028235e38",
                                        "1e-45",
                                        "1.4e-45",
                                        "7e-46",
                                        "1e-400",
                                        "9007199254740993",
                                        "12345678901234567890123",
                                        "0.000000000000000000001234",
                                        "1.00000000000000000000000001",
                                        "4.9406564584124654e-324",
                                        "1e22",
                                        "1e23",
                                        "8e-23",
                                        "123456789012345678e-30",
                                        "0e400",
                                        "-0.0e-5",
                                        /* 2^64 + 1 and 2^64 as 20 digits: a
                                         * 64-bit digit sum would wrap */
                                        "1844674.4073709551617",
                                        "-18446744.073709551616"};
    char body[8192];
    size_t at = (size_t)snprintf(body, sizeof body, "{\"t\":{\"shape\":[%zu],\"data\":[",
                                 sizeof fixed / sizeof *fixed);
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        at += (size_t)snprintf(body + at, sizeof body - at, "%s%s", i ? ", " : "", fixed[i]);
    snprintf(body + at, sizeof body - at, "]}}");
    assert_int_equal(check_same(body), 1);
    /* The same followed by enough text that the last numbers, too, take the
     * fast paths (they need some bytes of text after them). */
    snprintf(body + at, sizeof body - at, "]}, \"pad\": \"%s\"}", PAD);
    assert_int_equal(check_same(body), 1);

    /* Every digit-run shape around the fast path's limits: 1-10 integer
     * digits, 0-20 fraction digits (leading zeros among them), signs. */
    tu_rng digits;
    tu_rng_seed(&digits, 7);
    for (int lz = 0; lz < 2; lz++) {
        char *big = malloc(64 * 1024);
        size_t n = 0;
        at = 0;
        for (int i = 1; i <= 10; i++) {
            for (int f = 0; f <= 20; f++, n++) {
                char num[40];
                size_t k = 0;
                if (n % 2)
                    num[k++] = '-';
                for (int d = 0; d < i; d++)
                    num[k++] = (char)('0' + (d == 0 ? 1 + (int)tu_uniform(&digits, 0, 8.99)
                                                    : (int)tu_uniform(&digits, 0, 9.99)));
                if (lz && i == 1)
                    num[k - 1] = '0';
                if (f > 0)
                    num[k++] = '.';
                for (int d = 0; d < f; d++)
                    num[k++] =
                        (char)('0' + (lz && d < f / 2 ? 0 : (int)tu_uniform(&digits, 0, 9.99)));
                num[k] = '\0';
                at += (size_t)sprintf(big + 200 + at, "%s%s", n ? "," : "", num);
            }
        }
        char head[200];
        int h = snprintf(head, sizeof head, "{\"t\":{\"shape\":[%zu],\"data\":[", n);
        memmove(big + 200 - h, head, (size_t)h);
        sprintf(big + 200 + at, "]}, \"pad\": \"%s\"}", PAD);
        assert_int_equal(check_same(big + 200 - h), 1);
        free(big);
    }

    /* Random floats and doubles in every usual print form. */
    static const char *const fmts[] = {"%.9g", "%.17g", "%g", "%.3e", "%.12f", "%.0f"};
    tu_rng rng;
    tu_rng_seed(&rng, 31);
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
        char *big = malloc(300000);
        size_t n = 4000;
        at = (size_t)sprintf(big, "{\"t\":{\"shape\":[%zu],\"data\":[", n);
        for (size_t i = 0; i < n; i++) {
            double mag = pow(10.0, tu_uniform(&rng, -30, 30));
            double v = tu_uniform(&rng, -1, 1) * (f == 5 ? 1e6 : mag);
            at += (size_t)sprintf(big + at, i ? "," : "");
            at += (size_t)sprintf(big + at, fmts[f], v);
        }
        sprintf(big + at, "]}}");
        assert_int_equal(check_same(big), 1);
        free(big);
    }
}

/* One number's text as srv_json_number reads it against strtod's double,
 * bit for bit. */
static void same_double(const char *text)
{
    double got, want = strtod(text, NULL);
    if (!srv_json_number(text, strlen(text), &got) || memcmp(&got, &want, sizeof got) != 0)
        fail_msg("%s: lift %a, strtod %a", text, got, want);
}

/* m 10^-k written as digits with the point placed (or before leading
 * zeros), or as m then an exponent. */
static void write_scaled(char *buf, size_t cap, uint64_t m, int k, bool exponent)
{
    char d[24];
    const int n = snprintf(d, sizeof d, "%llu", (unsigned long long)m);
    if (exponent)
        snprintf(buf, cap, "%se-%d", d, k);
    else if (k < n)
        snprintf(buf, cap, "%.*s.%s", n - k, d, d + n - k);
    else
        snprintf(buf, cap, "0.%0*d%s", k - n, 0, d);
}

/* Numbers of 17 to 19 significant digits over 10^1 .. 10^22, which Python
 * writes for float32 values widened to double, past the exact fast path
 * (more than 2^53): the double the lift makes by multiplication is
 * strtod's, at random, on the ties between two doubles (which only the
 * division decides) and beside them, and beside float32's ties, where a
 * double one unit off would round to the other float. */
static void test_long_numbers(void **state)
{
    (void)state;
    uint64_t seed = 41;
    char buf[64];
    enum { BATCH = 500 };
    char *body = malloc(BATCH * 32 + 64);
    size_t at = 0;
    assert_non_null(body);
    for (int i = 0; i < 300000; i++) {
        const uint64_t r = splitmix(&seed);
        const int k = 1 + (int)(r % 22), digits = 16 + (int)((r >> 8) % 4);
        uint64_t m = splitmix(&seed);
        if (digits < 20) { /* into [10^(digits-1), 10^digits) */
            uint64_t lo = 1, span;
            for (int j = 1; j < digits; j++)
                lo *= 10;
            span = digits == 19 ? UINT64_MAX - lo : 9 * lo;
            m = lo + m % span;
        }
        write_scaled(buf, sizeof buf, m, k, (r >> 16) & 1);
        same_double(buf);
        /* Some in arrays too, through the lift's own readers (scalar and
         * eight at a time), against cJSON's floats. */
        if (i < 40 * BATCH) {
            if (i % BATCH == 0)
                at = (size_t)sprintf(body, "{\"t\":{\"shape\":[%d],\"data\":[", BATCH);
            at += (size_t)sprintf(body + at, "%s%s", i % BATCH ? "," : "", buf);
            if (i % BATCH == BATCH - 1) {
                strcpy(body + at, "]}}");
                srv_lift_force_scalar(i / BATCH % 2 == 1);
                assert_int_equal(check_same(body), 1);
                srv_lift_force_scalar(false);
            }
        }
    }
    free(body);
    /* Ties: a (54 bits, odd) 2^-s is halfway between two doubles; it is
     * m 10^-k with m = a 5^k 2^(k - s), for s <= k. And its neighbours. */
    for (int k = 1; k <= 4; k++) {
        uint64_t p5 = 1;
        for (int j = 0; j < k; j++)
            p5 *= 5;
        for (int i = 0; i < 2000; i++) {
            const uint64_t a = (((uint64_t)1 << 53) | (splitmix(&seed) >> 11)) | 1;
            const int s = (int)(splitmix(&seed) % (uint64_t)(k + 1));
            const uint64_t m = a * p5 << (k - s);
            if (m / p5 >> (k - s) != a || m <= ((uint64_t)1 << 53))
                continue; /* past 2^64 */
            for (int dm = -1; dm <= 1; dm++) {
                write_scaled(buf, sizeof buf, m + (uint64_t)(int64_t)dm, k, dm == 0);
                same_double(buf);
            }
        }
    }
    /* Halfway between two float32 values, as 17 to 19 digits near it. */
    for (int i = 0; i < 20000; i++) {
        const float f = (float)ldexp((double)(splitmix(&seed) >> 40) + 0x1p24, -24 - i % 40);
        const double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
        for (int digits = 17; digits <= 19; digits++) {
            snprintf(buf, sizeof buf, "%.*e", digits - 1, mid);
            same_double(buf);
            snprintf(buf, sizeof buf, "%.*e", digits - 1, nextafter(mid, 0.0));
            same_double(buf);
        }
    }
}

/* The run of plain numbers parsed without the per-element loop (json_lift.c's
 * parse_leaf_fast): every element shape it takes or hands back, at every
 * place in an array, each array ending at every distance from the body's
 * end (the run needs 48 bytes after an element), so that taking a number
 * it should not, or ending a run one element off, shows as different bits,
 * a shape error, or an array lifted that cJSON refuses. */
static void test_fast_runs(void **state)
{
    (void)state;
    /* Plain (taken), then shapes the run hands back to the careful loop. */
    static const char *const elems[] = {
        "0.5", "-0.25", "7", "-0", "0", "0.0", "1234567.1234567890", "9.000000000000001",
        "0.12345678", "0.123456789", "-1.00000000", "1234567.123456789012",
        /* exponents read in the runs (m * 10^e10 for |e10| <= 22), and
         * past that handed back */
        "1e22", "1e-22", "1.5e+05", "1e05", "-2.5E-3", "1.234567890123e-10", "9.9e-7", "0e0",
        "-0e-0", "4.0584753e-5", "7e+22", "1e23", "1e-23", "1.2345678901234e-10", "4e-45",
        "3.4028235e38", "1e38", "123e-2",
        /* halfway between two floats: ties to even, as strtod + cast */
        "4194304.25", "4194304.75", "-8388607.5", "2097152.125", "0.000030517578125",
        /* handed back */
        "12345678", "12345678.5", "1e3", "1.5E-3", "0.5e1", "1.1234567890123",
        "-0.1234567890123456", "9007199254740993", "0.90071992547409931", "1234567.1234567890123",
        /* 2^64 + 1 and 2^64 in 20 digits: a 64-bit digit sum would wrap */
        "1844674.4073709551617", "-1844674.4073709551616"};
    static const char *const bad[] = {"01",   "-01",   "00.5", "1.",   ".5",    "-",     "+1",
                                      "1.e5", "\"1\"", "1 2",  "[1]",  "1,",    "1e",    "-.5",
                                      "0x10", "1.5.5", ":.5",  "0.:",  "1:",    "/.5",   "0./",
                                      "1.5:", "1e+",   "1e-",  "1ee2", "1e2.5", "1e2e3", "1.5e",
                                      "1e 2", "1e+-2", "01e2", "1.e2", "1e2:"};
    static const char *const seps[] = {",", ", ", " , ", ",\n  "};
    const size_t ne = sizeof elems / sizeof *elems;
    char *body = malloc(1 << 16);
    tu_rng rng;
    tu_rng_seed(&rng, 5);

    /* Each element shape among plain ones at each place of a 24-element
     * array, with each separator, then followed by 0..64 pad bytes. */
    for (size_t e = 0; e < ne; e++) {
        for (size_t sep = 0; sep < sizeof seps / sizeof *seps; sep++) {
            for (int place = 0; place < 24; place += 5) {
                for (int pad = 0; pad <= 64; pad += (pad < 56 ? 7 : 1)) {
                    size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[24],\"data\":[");
                    for (int i = 0; i < 24; i++) {
                        if (i)
                            at += (size_t)sprintf(body + at, "%s", seps[(sep + (size_t)i / 7) % 4 == 0 ? 0 : sep]);
                        if (i == place)
                            at += (size_t)sprintf(body + at, "%s", elems[e]);
                        else
                            at += (size_t)sprintf(body + at, "%s", elems[(size_t)tu_uniform(&rng, 0, 16.99)]);
                    }
                    sprintf(body + at, "]}, \"p\": \"%.*s\"}", pad, PAD PAD);
                    assert_int_equal(check_same(body), 1);
                }
            }
        }
    }
    /* A bad element after a run of plain ones: nothing lifted, the usual
     * error from cJSON or the shape check. */
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        for (int place = 0; place < 3; place++) {
            size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[3],\"data\":[");
            for (int i = 0; i < 3; i++)
                at += (size_t)sprintf(body + at, "%s%s", i ? "," : "", i == place ? bad[b] : "0.5");
            sprintf(body + at, "]}, \"p\": \"%s\"}", PAD);
            cJSON *j = cJSON_Parse(body);
            if (j == NULL) {
                /* Not JSON: api_body_read checks the text after the lift,
                 * so the lift must leave the array in it. */
                srv_lift lift;
                if (srv_lift_scan(body, strlen(body), &lift)) {
                    srv_lift_free(&lift);
                    fail_msg("lifted %s", body);
                }
                continue;
            }
            cJSON_Delete(j);
            if (check_same(body) != 0)
                fail_msg("lifted %s", body);
        }
    }
    /* Halfway between two floats, and one unit of the last digit either
     * side, with 2..11 fraction digits (floats of 2^13..2^22, whose
     * halfway points have that many binary and so decimal places): the
     * double must be the correctly rounded one for the float conversion
     * to tie to even as strtod + cast does (a division by 10^k, not a
     * multiplication by its rounded reciprocal). Then the same with an
     * exponent and a newline after each comma: the careful loop's
     * parse_number. */
    for (int e = 13; e <= 22 + 10; e++) {
        const int frac = 24 - (e > 22 ? e - 10 : e);
        const char *sep = e > 22 ? ",\n" : ",", *expo = e > 22 ? "e0" : "";
        size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[600],\"data\":[");
        for (int i = 0; i < 200; i++) {
            const double j = floor(tu_uniform(&rng, 0, 1 << 23));
            const double h =
                ldexp(2 * (double)((1 << 23) + (int64_t)j) + 1, (e > 22 ? e - 10 : e) - 24);
            const double unit = pow(10.0, -frac);
            for (int side = -1; side <= 1; side++)
                at += (size_t)sprintf(body + at, "%s%.*f%s", i || side > -1 ? sep : "", frac,
                                      h + side * unit, expo);
        }
        sprintf(body + at, "]}, \"p\": \"%s\"}", PAD);
        assert_int_equal(check_same(body), 1);
    }
    /* 17 to 19 significant digits (as Python writes a float32 widened to
     * double, and more), past 2^53 and so past Clinger's exact path: the
     * midpoints between neighbouring floats, which such digits name to
     * within far less than half a double's unit, so strtod lands on the
     * midpoint's double and the float conversion ties to even; a double one
     * unit off would round the other way. Then the floats themselves, and
     * with exponents and newlines (the careful loop). */
    for (int form = 0; form < 5; form++) {
        size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[600],\"data\":[");
        for (int i = 0; i < 600; i++) {
            const float f =
                (float)(tu_uniform(&rng, -1, 1) * pow(10.0, floor(tu_uniform(&rng, -6, 5))));
            const double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
            const int digits = 17 + i % 3;
            /* Form 4: 18 or 19 digits next to the point halfway between
             * the midpoint's double and the next one up, where the double
             * strtod picks decides which way the float goes: the
             * quotient's rounding, its sticky bit included. */
            const long double tie = ((long double)mid + nextafter(mid, INFINITY)) / 2;
            if (form == 4)
                at += (size_t)sprintf(body + at, "%s%.*Le", i ? "," : "", 17 + i % 2, tie);
            else if (form == 0)
                at += (size_t)sprintf(body + at, "%s%.*g", i ? "," : "", digits, mid);
            else if (form == 1)
                at += (size_t)sprintf(body + at, "%s%.*g", i ? ", " : "", digits, (double)f);
            else if (form == 2)
                at += (size_t)sprintf(body + at, "%s%.*e", i ? "," : "", digits - 1, mid);
            else
                at += (size_t)sprintf(body + at, "%s%.*g", i ? ",\n" : "", digits, mid);
        }
        sprintf(body + at, "]}, \"p\": \"%s\"}", PAD);
        assert_int_equal(check_same(body), 1);
    }
    /* Nested: runs in each innermost array, and a ragged one. */
    assert_int_equal(check_same("{\"t\":{\"shape\":[2,2],\"data\":[[0.5,-1.25],[3,4.0]]},\"p\":\"" PAD
                                "\"}"),
                     1);
    assert_int_equal(check_same("{\"t\":{\"shape\":[2,2],\"data\":[[0.5,-1.25],[3,4.0,5]]},\"p\":\"" PAD
                                "\"}"),
                     0);
    /* A number at the cuts between the runs and the careful loop: 96
     * bytes from a window's start to the body's end (one at a time), 128
     * (eight at a time), and every length around them. */
    for (int tail = 40; tail <= 150; tail++) {
        size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[3],\"data\":[0.25,-0.375,1.5]}");
        memset(body + at, ' ', (size_t)tail);
        strcpy(body + at + (size_t)tail, "}");
        assert_int_equal(check_same(body), 1);
    }
    free(body);
}

/* Eight at a time (eight_numbers, on a CPU with AVX-512 VBMI2): an element of
 * every shape, short or not, valid or not, at each place of a 40-element
 * array of short ones, after "," or ", ", with 0..150 bytes of text after
 * the array (eight numbers are read only with 128 bytes from the first):
 * the same floats or error as cJSON, nothing lifted from what cJSON
 * refuses. Then the same with the scalar code alone. A check left out of
 * the vector code (a second dot, a leading zero, a length over 8, a space
 * too many) shows as other bits, or as an array lifted that cJSON refuses. */
static void check_eight_at_a_time(void)
{
    static const char *const shortv[] = {
        "0",        "-0",      "7",        "12345678",  "-1234567", "0.5",
        "1.25",     "-0.9729", "123.4567", "1234567.8", "0.000001", "9.999999",
        "99999999", "1.0",     "10",       "-10.5",     "0.0",      "-0.000030"};
    static const char *const other[] = {
        /* valid, too long for the vector code */
        "123456789", "0.1234567", "-0.12345678", "3.1415926", "1e5", "1.5E-3", "0.5e1",
        "9007199254740993",
        /* not JSON, or not a plain number there */
        "01", "-01", "00", "00.5", "1..2", "1.2.3", ".5", "5.", "4194304.", "-", "--1", "+1", "1 ",
        "  1", "\n1", "-.5", "0x1", "1.5:", "\"1\"", "1-", "1.-5", "0-", "1] 2", "1],[2"};
    const size_t ns = sizeof shortv / sizeof *shortv;
    char *body = malloc(1 << 16);
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    for (size_t k = 0; k < ns + sizeof other / sizeof *other; k++) {
        const char *elem = k < ns ? shortv[k] : other[k - ns];
        for (int place = 0; place < 24; place++) {
            const int pad = (int)tu_uniform(&rng, 0, 150.99);
            size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[40],\"data\":[");
            const char *why;
            for (int i = 0; i < 40; i++) {
                if (i)
                    at +=
                        (size_t)sprintf(body + at, "%s", tu_uniform(&rng, 0, 1) < 0.7 ? "," : ", ");
                at += (size_t)sprintf(body + at, "%s",
                                      i == place ? elem
                                                 : shortv[(size_t)tu_uniform(&rng, 0, ns - 0.01)]);
            }
            at += (size_t)sprintf(body + at, "]}, \"p\": \"");
            for (int i = 0; i < pad; i++)
                body[at++] = '.';
            strcpy(body + at, "\"}");
            /* Not JSON (RFC 8259, where cJSON reads "01" or "5."
             * leniently): api_body_read checks the text after the lift, so
             * the error must still be in it (an array lifted only when the
             * error is outside it, as in "[1] 2"). */
            if (!srv_json_check(body, strlen(body), &at, &why, NULL)) {
                srv_lift lift;
                if (srv_lift_scan(body, strlen(body), &lift)) {
                    const bool hidden = srv_json_check(lift.text, lift.len, &at, &why, NULL);
                    srv_lift_free(&lift);
                    if (hidden)
                        fail_msg("the lift hid the error of %s", body);
                }
                continue;
            }
            if (check_same(body) != 1 && k < ns)
                fail_msg("not lifted: %s", body);
        }
    }
    free(body);
}

static void test_eight_at_a_time(void **state)
{
    (void)state;
    check_eight_at_a_time();
    srv_lift_force_scalar(true);
    check_eight_at_a_time();
    test_fast_runs(state);
    srv_lift_force_scalar(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers_bit_identical),
        cmocka_unit_test(test_long_numbers),
        cmocka_unit_test(test_fast_runs),
        cmocka_unit_test(test_eight_at_a_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
