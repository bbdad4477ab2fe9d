/* test_sinusoidal.c - lib/sinusoidal.c against the double references of
 * tests/ref_encodings.c (Vaswani interleaved, tensor2tensor concat). */
#include "ref_encodings.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 12345.0f

static void fill_sentinel(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = SENTINEL;
}

static void assert_untouched(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_true(x[i] == SENTINEL);
}

/* Encodes positions with both the library and the reference and compares.
 * Tolerance: float rounding of values in [-1, 1] (6e-8) plus the double angle
 * error, which grows with |pos|: atol is chosen by the caller. */
static void check_against_ref(pa_sinusoidal_layout layout, double base, const int32_t *pos,
                              int32_t n, int32_t dim, double atol)
{
    pa_sinusoidal s = {.base = base, .layout = layout};
    float *got = tu_alloc((size_t)n * (size_t)dim, sizeof *got);
    double *want = tu_alloc((size_t)n * (size_t)dim, sizeof *want);
    pa_error err;
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, pos, n, dim, got, &err), PA_STATUS_OK, &err);
    ref_sinusoidal(&s, pos, n, dim, want);
    TU_ASSERT_CLOSE(got, want, (size_t)n * (size_t)dim, atol, 0.0);
    free(got);
    free(want);
}

static const int32_t dims[] = {1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 255, 256, 257, 301, 512};

static void test_interleaved_matches_reference(void **state)
{
    (void)state;
    int32_t pos[64];
    for (int32_t i = 0; i < 64; i++)
        pos[i] = i * 37 - 500; /* negative, zero and positive */
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        check_against_ref(PA_SINUSOIDAL_LAYOUT_INTERLEAVED, 10000.0, pos, 64, dims[d], 2e-7);
        check_against_ref(PA_SINUSOIDAL_LAYOUT_INTERLEAVED, 500.0, pos, 64, dims[d], 2e-7);
    }
}

static void test_concat_matches_reference(void **state)
{
    (void)state;
    int32_t pos[64];
    for (int32_t i = 0; i < 64; i++)
        pos[i] = i * 41 - 700;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        check_against_ref(PA_SINUSOIDAL_LAYOUT_CONCAT, 10000.0, pos, 64, dims[d], 2e-7);
        check_against_ref(PA_SINUSOIDAL_LAYOUT_CONCAT, 1e6, pos, 64, dims[d], 2e-7);
    }
}

/* Large positions: angles up to 2^31 rad. The library and the reference may
 * differ by an ulp of the angle (2^31 * 2^-52 ~ 5e-7), so atol is 2e-6. */
static void test_large_positions(void **state)
{
    (void)state;
    const int32_t pos[] = {INT32_MAX, INT32_MIN, 1 << 30, -(1 << 30), 1000000007, 65536, -1};
    int32_t n = (int32_t)(sizeof pos / sizeof pos[0]);
    for (int32_t dim = 1; dim <= 9; dim++) {
        check_against_ref(PA_SINUSOIDAL_LAYOUT_INTERLEAVED, 10000.0, pos, n, dim, 2e-6);
        check_against_ref(PA_SINUSOIDAL_LAYOUT_CONCAT, 10000.0, pos, n, dim, 2e-6);
    }
    check_against_ref(PA_SINUSOIDAL_LAYOUT_INTERLEAVED, 10000.0, pos, n, 128, 2e-6);
    check_against_ref(PA_SINUSOIDAL_LAYOUT_CONCAT, 10000.0, pos, n, 128, 2e-6);
}

/* Hand-computed values: the formulas themselves, not just agreement. */
static void test_known_values(void **state)
{
    (void)state;
    pa_sinusoidal s = {.base = 10000.0, .layout = PA_SINUSOIDAL_LAYOUT_INTERLEAVED};
    const int32_t pos[] = {0, 1};
    float out[2 * 5];
    pa_error err;

    /* d = 5: frequencies 1, 10000^(-2/5), 10000^(-4/5); column 4 a lone sine. */
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, pos, 2, 5, out, &err), PA_STATUS_OK, &err);
    double w1 = pow(10000.0, -0.4), w2 = pow(10000.0, -0.8);
    const double want_i[10] = {0, 1, 0, 1, 0, sin(1.0), cos(1.0), sin(w1), cos(w1), sin(w2)};
    TU_ASSERT_CLOSE(out, want_i, 10, 1e-7, 0.0);

    /* concat d = 5: half 2, inc = ln(10000)/1, w = {1, 1e-4}; last column 0. */
    s.layout = PA_SINUSOIDAL_LAYOUT_CONCAT;
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, pos, 2, 5, out, &err), PA_STATUS_OK, &err);
    const double want_c[10] = {0, 0, 1, 1, 0, sin(1.0), sin(1e-4), cos(1.0), cos(1e-4), 0};
    TU_ASSERT_CLOSE(out, want_c, 10, 1e-7, 0.0);
    assert_true(out[4] == 0.0f && out[9] == 0.0f);
}

/* dim 1: interleaved is sin(p); concat is the zero pad alone. */
static void test_dim_one(void **state)
{
    (void)state;
    const int32_t pos[] = {0, 1, 2, -3, 100};
    float out[5];
    double want[5];
    pa_error err;
    pa_sinusoidal s = {.base = 10000.0, .layout = PA_SINUSOIDAL_LAYOUT_INTERLEAVED};
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, pos, 5, 1, out, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 5; i++)
        want[i] = sin((double)pos[i]);
    TU_ASSERT_CLOSE(out, want, 5, 1e-7, 0.0);

    s.layout = PA_SINUSOIDAL_LAYOUT_CONCAT;
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, pos, 5, 1, out, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 5; i++)
        assert_true(out[i] == 0.0f);
}

/* n = 0 is valid with NULL positions and output; n = 1 writes one row only. */
static void test_empty_and_single(void **state)
{
    (void)state;
    pa_sinusoidal s = {.base = 10000.0, .layout = PA_SINUSOIDAL_LAYOUT_INTERLEAVED};
    pa_error err;
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, NULL, 0, 8, NULL, &err), PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, NULL, 0, INT32_MAX, NULL, &err), PA_STATUS_OK, &err);

    float out[16];
    double want[8];
    const int32_t p = 7;
    fill_sentinel(out, 16);
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s, &p, 1, 8, out, NULL), PA_STATUS_OK, NULL);
    ref_sinusoidal(&s, &p, 1, 8, want);
    TU_ASSERT_CLOSE(out, want, 8, 2e-7, 0.0);
    assert_untouched(out + 8, 8);
}

static void expect_error(const pa_sinusoidal *s, const int32_t *pos, int32_t n, int32_t dim,
                         float *out, pa_status want, const char *field, const char *in_message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    pa_status st = pa_sinusoidal_encode(s, pos, n, dim, out, &err);
    TU_ASSERT_STATUS(st, want, &err);
    assert_int_equal(err.status, want);
    assert_string_equal(err.field, field);
    if (strstr(err.message, in_message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, in_message);
    /* err may be NULL: the status is still returned. */
    assert_int_equal(pa_sinusoidal_encode(s, pos, n, dim, out, NULL), want);
}

static void test_errors(void **state)
{
    (void)state;
    pa_sinusoidal s = {.base = 10000.0, .layout = PA_SINUSOIDAL_LAYOUT_INTERLEAVED};
    const int32_t pos[] = {0, 1, 2};
    float out[3 * 4];
    fill_sentinel(out, 12);

    expect_error(NULL, pos, 3, 4, out, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    expect_error(&s, pos, 3, 0, out, PA_STATUS_INVALID_ARGUMENT, "dim", "dim=0");
    expect_error(&s, pos, 3, -5, out, PA_STATUS_INVALID_ARGUMENT, "dim", "dim=-5");
    expect_error(&s, pos, -1, 4, out, PA_STATUS_INVALID_ARGUMENT, "length", "length=-1");
    expect_error(&s, NULL, 3, 4, out, PA_STATUS_INVALID_ARGUMENT, "positions", "length=3");
    expect_error(&s, pos, 3, 4, NULL, PA_STATUS_INVALID_ARGUMENT, "out", "length=3");

    const double bad_bases[] = {0.0, -2.0, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_bases / sizeof bad_bases[0]; i++) {
        s.base = bad_bases[i];
        expect_error(&s, pos, 3, 4, out, PA_STATUS_INVALID_ARGUMENT, "scheme.base", "scheme.base=");
    }
    s.base = 10000.0;
    s.layout = (pa_sinusoidal_layout)7;
    expect_error(&s, pos, 3, 4, out, PA_STATUS_INVALID_ARGUMENT, "scheme.layout",
                 "scheme.layout=7");
    assert_untouched(out, 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interleaved_matches_reference),
        cmocka_unit_test(test_concat_matches_reference),
        cmocka_unit_test(test_large_positions),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_dim_one),
        cmocka_unit_test(test_empty_and_single),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("sinusoidal", tests, NULL, NULL);
}
