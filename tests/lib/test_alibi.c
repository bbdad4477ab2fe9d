/* test_alibi.c - lib/alibi.c: head slopes against Press et al.'s recursive
 * get_slopes (max_bias 8) and ggml's max_bias form, explicit slopes, errors. */
#include "ref_encodings.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "testutil.h"

#include <math.h>
#include <string.h>


#define SENTINEL 12345.0f

/* One float ulp relative (2^-23): the slopes are exp2 of exact exponents, so
 * the library and the double references differ only by float rounding. */
#define SLOPE_RTOL 1.2e-7

static pa_alibi default_alibi(void)
{
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    return s.alibi;
}

static void test_press_recipe_all_head_counts(void **state)
{
    (void)state;
    pa_alibi a = default_alibi();
    for (int32_t h = 1; h <= 64; h++) {
        float got[64];
        double want[64];
        pa_error err;
        TU_ASSERT_STATUS(pa_alibi_slopes(&a, h, got, &err), PA_STATUS_OK, &err);
        ref_alibi_get_slopes(h, want);
        TU_ASSERT_CLOSE(got, want, (size_t)h, 0.0, SLOPE_RTOL);
    }
}

static void test_eight_heads_exact(void **state)
{
    (void)state;
    pa_alibi a = default_alibi();
    float got[8];
    TU_ASSERT_STATUS(pa_alibi_slopes(&a, 8, got, NULL), PA_STATUS_OK, NULL);
    for (int h = 0; h < 8; h++)
        assert_true(got[h] == ldexpf(1.0f, -(h + 1)));
}

/* 12 heads: 2^-1 .. 2^-8 for the first 8, then every other slope of 16
 * heads: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5. */
static void test_twelve_heads_known(void **state)
{
    (void)state;
    pa_alibi a = default_alibi();
    float got[12];
    double want[12];
    for (int h = 0; h < 8; h++)
        want[h] = ldexp(1.0, -(h + 1));
    for (int h = 8; h < 12; h++)
        want[h] = pow(2.0, -0.5 - (h - 8));
    TU_ASSERT_STATUS(pa_alibi_slopes(&a, 12, got, NULL), PA_STATUS_OK, NULL);
    TU_ASSERT_CLOSE(got, want, 12, 0.0, SLOPE_RTOL);
}

static void test_other_max_bias(void **state)
{
    (void)state;
    const double biases[] = {0.5, 1.0, 4.0, 16.0, 8.0};
    pa_alibi a = default_alibi();
    for (size_t b = 0; b < sizeof biases / sizeof biases[0]; b++) {
        a.max_bias = biases[b];
        for (int32_t h = 1; h <= 40; h++) {
            float got[40];
            double want[40];
            TU_ASSERT_STATUS(pa_alibi_slopes(&a, h, got, NULL), PA_STATUS_OK, NULL);
            ref_alibi_slopes(h, biases[b], want);
            TU_ASSERT_CLOSE(got, want, (size_t)h, 0.0, SLOPE_RTOL);
        }
    }
    /* The two references agree at max_bias 8 (a check on the references). */
    double press[64], ggml[64];
    ref_alibi_get_slopes(48, press);
    ref_alibi_slopes(48, 8.0, ggml);
    for (int h = 0; h < 48; h++)
        assert_true(fabs(press[h] - ggml[h]) <= 1e-15 * ggml[h]);
}

static void test_explicit_slopes(void **state)
{
    (void)state;
    const float mine[3] = {0.25f, -1.5f, 0.0f};
    pa_alibi a = default_alibi();
    a.slopes = mine;
    a.num_slopes = 3;
    a.max_bias = NAN; /* not read when slopes are given */
    float got[3];
    pa_error err;
    TU_ASSERT_STATUS(pa_alibi_slopes(&a, 3, got, &err), PA_STATUS_OK, &err);
    assert_memory_equal(got, mine, sizeof mine);
    TU_ASSERT_STATUS(pa__alibi_check(&a, 3, &err), PA_STATUS_OK, &err);
}

static void expect_error(const pa_alibi *a, int32_t heads, float *out, pa_status want,
                         const char *field, const char *message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_alibi_slopes(a, heads, out, &err), want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
    assert_int_equal(pa_alibi_slopes(a, heads, out, NULL), want);
    if (out != NULL) {
        /* The internal check agrees with the public function. */
        memset(&err, 0, sizeof err);
        TU_ASSERT_STATUS(pa__alibi_check(a, heads, &err), want, &err);
        assert_string_equal(err.field, field);
    }
}

static void test_errors(void **state)
{
    (void)state;
    float out[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    pa_alibi a = default_alibi();

    expect_error(NULL, 4, out, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    expect_error(&a, 0, out, PA_STATUS_INVALID_ARGUMENT, "num_heads", "num_heads=0");
    expect_error(&a, -3, out, PA_STATUS_INVALID_ARGUMENT, "num_heads", "num_heads=-3");
    const double bad[] = {0.0, -8.0, INFINITY, NAN};
    for (size_t i = 0; i < 4; i++) {
        a.max_bias = bad[i];
        expect_error(&a, 4, out, PA_STATUS_INVALID_ARGUMENT, "scheme.max_bias", "scheme.max_bias=");
    }
    a.max_bias = 8.0;

    const float three[3] = {0.5f, 0.25f, 0.125f};
    a.slopes = three;
    a.num_slopes = 3;
    expect_error(&a, 4, out, PA_STATUS_SHAPE_MISMATCH, "scheme.slopes",
                 "scheme.slopes has 3 values but num_heads=4");
    const float nonfinite[4] = {0.5f, 0.25f, INFINITY, NAN};
    a.slopes = nonfinite;
    a.num_slopes = 4;
    expect_error(&a, 4, out, PA_STATUS_INVALID_ARGUMENT, "scheme.slopes[2]",
                 "scheme.slopes[2]=inf is not finite");
    a.slopes = NULL;
    expect_error(&a, 4, NULL, PA_STATUS_INVALID_ARGUMENT, "slopes", "NULL");

    for (int i = 0; i < 4; i++)
        assert_true(out[i] == SENTINEL);
    TU_ASSERT_STATUS(pa__alibi_check(&a, 4, NULL), PA_STATUS_OK, NULL);
}

/* The bias helper other tests use: -m (q - k), or -m |q - k|. */
static void test_reference_bias(void **state)
{
    (void)state;
    assert_true(ref_alibi_bias(0.5, 5, 2, false) == -1.5);
    assert_true(ref_alibi_bias(0.5, 2, 5, false) == 1.5);
    assert_true(ref_alibi_bias(0.5, 2, 5, true) == -1.5);
    assert_true(ref_alibi_bias(0.25, 7, 7, true) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_press_recipe_all_head_counts),
        cmocka_unit_test(test_eight_heads_exact),
        cmocka_unit_test(test_twelve_heads_known),
        cmocka_unit_test(test_other_max_bias),
        cmocka_unit_test(test_explicit_slopes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_reference_bias),
    };
    return cmocka_run_group_tests_name("alibi", tests, NULL, NULL);
}
