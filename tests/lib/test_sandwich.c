/* test_sandwich.c - lib/sandwich.c and Sandwich in attention: the bias
 * against the transliteration of NVIDIA NeMo's
 * SandwichRelativePositionEmbedding (tests/ref_encodings.c), the check, and
 * attention against the double reference in both kernels, with checks that
 * fail if the per-head scaling, the sign, the first frequency or |m - n|
 * were wrong. */
#include "attention_fixture.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "ref_encodings.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_bias_formula(void **state)
{
    (void)state;
    const int32_t sizes[] = {1, 2, 5, 8, 64, 128};
    const double dists[] = {0, 1, 3, 50, 1000, 123456, 2e9};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int32_t H = 1; H <= 12; H += 5)
            for (int32_t h = 0; h < H; h++)
                for (size_t i = 0; i < sizeof dists / sizeof *dists; i++) {
                    double got = pa_sandwich_bias(sizes[s], H, h, dists[i]);
                    double want = ref_sandwich(sizes[s], H, h, dists[i]);
                    /* Angles of a few ulps of distance: the two write
                     * 10000^(-2i/d) differently. */
                    double tol = 1e-9 * (1.0 + fabs(want)) + 1e-15 * dists[i] * sizes[s];
                    assert_true(fabs(got - want) <= tol);
                }
    /* Distance 0: every cosine 1, so 0 for even d; for odd d NeMo's
     * ceil(d/2) terms leave (1/2) H / (8 (h + 1)). */
    assert_true(pa_sandwich_bias(64, 8, 3, 0.0) == 0.0);
    assert_true(fabs(pa_sandwich_bias(5, 8, 1, 0.0) - 0.5 * 8.0 / 16.0) < 1e-15);
    /* Hand value, d = 2: one term cos(rel / 10000) - 1, over 8 (h+1) / H. */
    assert_true(fabs(pa_sandwich_bias(2, 4, 1, 300.0) - (cos(0.03) - 1.0) * 4.0 / 16.0) < 1e-15);
    /* Never positive for even d (a sum of d/2 cosines is at most d/2). */
    for (double d = 0; d < 5000; d += 37)
        assert_true(pa_sandwich_bias(16, 4, 0, d) <= 0.0);
}

static void test_check(void **state)
{
    (void)state;
    pa_scheme s;
    pa_error err;
    pa_scheme_init(&s, PA_SCHEME_SANDWICH);
    assert_int_equal(s.sandwich.hidden_size, 0);
    TU_ASSERT_STATUS(pa_sandwich_check(&s.sandwich, 16, &err), PA_STATUS_OK, &err);
    assert_int_equal(pa_sandwich_hidden_size(&s.sandwich, 16), 16);
    s.sandwich.hidden_size = 24;
    assert_int_equal(pa_sandwich_hidden_size(&s.sandwich, 16), 24);
    s.sandwich.hidden_size = -2;
    TU_ASSERT_STATUS(pa_sandwich_check(&s.sandwich, 16, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "scheme.hidden_size");
    assert_non_null(strstr(err.message, "scheme.hidden_size=-2"));
    TU_ASSERT_STATUS(pa_sandwich_check(NULL, 16, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(pa_scheme_type_name(PA_SCHEME_SANDWICH), "sandwich");
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_SANDWICH), PA_POSITION_SITE_LOGITS);
}

/* The bias matrix with zero q and k: the formula on |m - n|, head h's
 * value head 0's over (h + 1), hidden_size default the head dim. */
static void test_bias_matrix(void **state)
{
    (void)state;
    const int32_t qpos[3] = {9, 2, 5}, kpos[5] = {0, 3, 5, 9, 14};
    const int H = 4;
    pa_scheme s;
    float *got, *dflt;
    pa_scheme_init(&s, PA_SCHEME_SANDWICH);
    s.sandwich.hidden_size = 8;
    got = bias_probe(&s, H, 1, qpos, 3, kpos, 5, false);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) {
                double d = fabs((double)qpos[i] - kpos[j]);
                double want = ref_sandwich(8, H, h, d);
                float g = got[((size_t)h * 3 + i) * 5 + j];
                assert_true(fabs(g - want) <= 1e-6 * (1.0 + fabs(want)));
                assert_true(d == 0 ? g == 0.0f : g < 0.0f);
                if (h > 0)
                    assert_true(fabs(g * (h + 1) - got[(size_t)i * 5 + j]) <= 1e-5);
            }
    /* |m - n|: key 14 from query 9 and key 0 from query 5. */
    assert_true(got[4] == got[2 * 5 + 0]);
    /* hidden_size 0 is the head dim: D = 8 gives the same bias. */
    s.sandwich.hidden_size = 0;
    dflt = bias_probe(&s, H, 8, qpos, 3, kpos, 5, false);
    for (size_t x = 0; x < (size_t)H * 15; x++)
        assert_true(dflt[x] == got[x]);
    free(got);
    free(dflt);
}

static void test_attention(void **state)
{
    (void)state;
    static const int shapes[][6] = {
        /* Lq, Lk, H, Hkv, D, hidden_size */
        {1, 1, 4, 4, 8, 0},    {1, 200, 8, 2, 16, 0},  {5, 300, 4, 1, 8, 64},
        {17, 17, 8, 4, 16, 7}, {70, 130, 4, 2, 32, 0}, {3, 9, 2, 2, 5, 0},
    };
    uint64_t seed = 5100;
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
        for (int variant = 0; variant < 4; variant++) {
            fixture f;
            const int Lq = shapes[c][0], Lk = shapes[c][1];
            int32_t *qp = NULL;
            setup_qkv(&f, PA_SCHEME_SANDWICH, Lq, Lk, shapes[c][2], shapes[c][3], shapes[c][4], 0,
                      seed++);
            f.scheme.sandwich.hidden_size = shapes[c][5];
            f.a.causal = variant & 1;
            if (variant & 2) {
                qp = tu_alloc((size_t)Lq, sizeof *qp);
                for (int i = 0; i < Lq; i++)
                    qp[i] = Lk + 7 - 3 * ((i * 5) % Lq);
                f.a.q_positions = qp;
                f.a.window = Lk / 2 + 1;
            }
            check_against_reference(&f.a, 0);
            check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS | WANT_STATS);
            fixture_free(&f);
            free(qp);
        }
}

/* Positions far apart: no table by distance, the bias per logit. */
static void test_far_positions(void **state)
{
    (void)state;
    int32_t kpos[6] = {0, 1, 5, 1000000, 300000000, 2000000000};
    int32_t qpos[3] = {2000000000, 7, 1500000000};
    fixture f;
    setup_qkv(&f, PA_SCHEME_SANDWICH, 3, 6, 4, 2, 8, 0, 91);
    f.a.q_positions = qpos;
    f.a.k_positions = kpos;
    check_against_reference(&f.a, WANT_LOGITS | WANT_WEIGHTS);
    check_against_reference(&f.a, 0);
    fixture_free(&f);
}

/* The table's runs (pa__sandwich_sums: angles advanced by angle addition
 * from the run's first distance) against the sum of libm cosines at each
 * distance, within 1e-12 (the steps' drift is about 1e-15 a term) plus
 * what rounding the product distance x frequency costs the libm sums'
 * arguments (2^-52 of the distance a term, as far as 1.2e5): odd and
 * even hidden sizes, more than one chunk of 64 frequencies, runs from 0,
 * from far distances, and short ones. */
static void test_sums_runs(void **state)
{
    (void)state;
    static const int32_t sizes[] = {1, 16, 37, 130, 200};
    static const int64_t starts[] = {0, 5, 1000, 123456};
    static const int32_t lens[] = {1, 17, PA__SANDWICH_RUN};
    double got[PA__SANDWICH_RUN];
    for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
        for (size_t b = 0; b < sizeof starts / sizeof starts[0]; b++)
            for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
                pa__sandwich_sums(sizes[a], starts[b], lens[c], got);
                for (int32_t k = 0; k < lens[c]; k++) {
                    const double want = pa__sandwich_sum(sizes[a], (double)(starts[b] + k));
                    const double d = (double)(starts[b] + k);
                    const double tol = 1e-12 + 4e-16 * (double)((sizes[a] + 1) / 2) * d;
                    if (!(fabs(got[k] - want) <= tol))
                        fail_msg("hidden %d, distance %lld: %.17g, want %.17g", (int)sizes[a],
                                 (long long)(starts[b] + k), got[k], want);
                }
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bias_formula),  cmocka_unit_test(test_check),
        cmocka_unit_test(test_bias_matrix),   cmocka_unit_test(test_attention),
        cmocka_unit_test(test_far_positions), cmocka_unit_test(test_sums_runs),
    };
    return cmocka_run_group_tests_name("sandwich", tests, NULL, NULL);
}
