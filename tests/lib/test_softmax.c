/* test_softmax.c - lib/softmax.c: the row passes of the online softmax
 * against double-precision exp, on every length up to past two vectors (the
 * 16-lane tails), with -inf (masked), NaN (overflowed) and extreme logits;
 * and the softcap pass against double tanh.
 *
 * The argument row[j] - m is a float difference (rounded before the exp);
 * the references take the same float. Tolerance: softmax.h promises exp
 * within 2 ulp of expf; against the
 * correctly rounded double exp that is 3 float ulp (expf itself is within
 * 1 ulp), i.e. rtol 3 * 2^-23 = 3.6e-7. Sums: n terms, each within that,
 * added in float: rtol 3.6e-7 + n * 2^-24.
 */
#include "softmax.h" /* tests may reach inside lib/ */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

#define EXP_RTOL 3.6e-7

static void test_max_all_tails(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 21);
    float row[67];
    for (int32_t n = 1; n <= 67; n++) {
        tu_fill(&rng, row, (size_t)n, -50, 50);
        for (int32_t at = 0; at < n; at++) {
            float keep = row[at];
            float want = -INFINITY;
            row[at] = 1000.0f; /* the max at every position, tails included */
            for (int32_t j = 0; j < n; j++)
                want = row[j] > want ? row[j] : want;
            assert_true(pa__row_max(row, n) == want);
            row[at] = keep;
        }
    }
}

static void test_max_special(void **state)
{
    (void)state;
    float row[40];
    for (int j = 0; j < 40; j++)
        row[j] = -INFINITY;
    assert_true(pa__row_max(row, 40) == -INFINITY); /* fully masked */
    assert_true(pa__row_max(row, 0) == -INFINITY);  /* empty */
    row[33] = NAN; /* ignored by the max; the exp pass reports it */
    row[7] = -3.0f;
    assert_true(pa__row_max(row, 40) == -3.0f);
}

static void test_exp_sum_against_double(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 22);
    float row[300];
    double want[300];
    const int32_t lens[] = {1, 2, 15, 16, 17, 31, 32, 33, 255, 256, 300};
    for (size_t c = 0; c < sizeof lens / sizeof *lens; c++) {
        const int32_t n = lens[c];
        /* x - m spans [-87, 0]: the whole range the softmax feeds it. */
        tu_fill(&rng, row, (size_t)n, -80, 7);
        const float m = 7.0f;
        double sum = 0;
        for (int32_t j = 0; j < n; j++) {
            want[j] = exp((double)(float)(row[j] - m)); /* the argument is a float */
            sum += want[j];
        }
        float got = pa__row_exp_sum(row, n, m);
        TU_ASSERT_CLOSE(row, want, (size_t)n, 0.0, EXP_RTOL);
        assert_true(fabs(got - sum) <= sum * (EXP_RTOL + n * 6e-8));
    }
}

static void test_exp_sum_special(void **state)
{
    (void)state;
    float row[20];
    for (int j = 0; j < 20; j++)
        row[j] = (float)j;
    row[3] = -INFINITY; /* masked: exactly 0 */
    row[18] = -200.0f;  /* underflows: exactly 0 */
    float s = pa__row_exp_sum(row, 20, 19.0f);
    assert_true(row[3] == 0.0f && row[18] == 0.0f);
    assert_true(row[19] == 1.0f); /* exp(0) */
    assert_true(isfinite(s) && s > 1.0f);
    for (int j = 0; j < 20; j++)
        row[j] = 0.0f;
    row[17] = NAN; /* an overflowed logit: the sum shows it */
    s = pa__row_exp_sum(row, 20, 0.0f);
    assert_true(isnan(row[17]) && isnan(s));
}

static void test_exp_scale(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 23);
    float row[45];
    double want[45];
    tu_fill(&rng, row, 45, -30, 2);
    row[40] = -INFINITY;
    for (int j = 0; j < 45; j++)
        want[j] = exp((double)(float)(row[j] - 2.0f)) * 0.25;
    pa__row_exp_scale(row, 45, 2.0f, 0.25f);
    TU_ASSERT_CLOSE(row, want, 45, 0.0, EXP_RTOL);
    assert_true(row[40] == 0.0f);
}

/* Scale (in place and into another row) and fill: every element of every
 * length through the vector bodies and tails, nothing past the end. */
static void test_scale_and_fill(void **state)
{
    (void)state;
    for (int32_t n = 0; n <= 70; n++) {
        float src[72], dst[72];
        for (int32_t j = 0; j < 72; j++) {
            src[j] = (float)j * 0.75f - 20.0f;
            dst[j] = 99.0f;
        }
        pa__row_scale(dst, src, n, -1.5f);
        for (int32_t j = 0; j < 72; j++)
            assert_true(dst[j] == (j < n ? src[j] * -1.5f : 99.0f));
        pa__row_scale(src, src, n, 0.5f);
        for (int32_t j = 0; j < 72; j++)
            assert_true(src[j] == ((float)j * 0.75f - 20.0f) * (j < n ? 0.5f : 1.0f));
        pa__row_fill(dst, n, -INFINITY);
        for (int32_t j = 0; j < 72; j++)
            assert_true(j < n ? dst[j] == -INFINITY : dst[j] == 99.0f);
    }
}

/* softcap: cap * tanh(x / cap) within 4 ulp of cap (plus 1e-7 relative) of
 * the double value over the whole range, both branches of the tanh and their
 * boundary at |x / cap| = 0.625; -inf stays -inf (a masked logit must not
 * come back as -cap), NaN stays NaN, and huge values give exactly +-cap. */
static void test_softcap(void **state)
{
    (void)state;
    enum { N = 4099 };
    const float caps[] = {1.0f, 30.0f, 50.0f};
    float *row = malloc(N * sizeof *row), *x = malloc(N * sizeof *x);
    assert_non_null(row);
    assert_non_null(x);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        const float cap = caps[c];
        for (int j = 0; j < N; j++)
            x[j] = row[j] = cap * (float)(-8.0 + 16.0 * j / (N - 1)); /* x / cap in [-8, 8] */
        x[7] = row[7] = 0.625f * cap;
        x[8] = row[8] = -0.625f * cap;
        x[9] = row[9] = 0.6249f * cap;
        pa__row_softcap(row, N, cap);
        for (int j = 0; j < N; j++) {
            double want = cap * tanh((double)x[j] / cap);
            assert_true(fabs(row[j] - want) <= 4 * cap * 0x1p-24 + 1e-7 * fabs(want));
        }
        row[0] = -INFINITY;
        row[1] = NAN;
        row[2] = 1e30f;
        row[3] = -1e30f;
        row[4] = INFINITY;
        pa__row_softcap(row, 5, cap);
        assert_true(row[0] == -INFINITY);
        assert_true(isnan(row[1]));
        assert_true(row[2] == cap && row[3] == -cap && row[4] == cap);
    }
    free(row);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_all_tails),
        cmocka_unit_test(test_max_special),
        cmocka_unit_test(test_exp_sum_against_double),
        cmocka_unit_test(test_exp_sum_special),
        cmocka_unit_test(test_exp_scale),
        cmocka_unit_test(test_scale_and_fill),
        cmocka_unit_test(test_softcap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
