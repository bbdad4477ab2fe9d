/* test_shaw.c - lib/shaw.c: the clipped relative index against ref_shaw_index
 * (including int32 extremes) and the rel_k / rel_v table checks. */
#include "ref_encodings.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "testutil.h"

#include <string.h>


/* The largest K whose 2K+1 rows fit int32. */
#define MAX_K ((INT32_MAX - 1) / 2)

static void test_index_matches_reference(void **state)
{
    (void)state;
    const int32_t ks[] = {0, 1, 2, 3, 16, 64, 1000, 1 << 20, MAX_K};
    const int32_t extremes[] = {INT32_MIN, INT32_MIN + 1, -MAX_K - 1,    -MAX_K,
                                MAX_K,     MAX_K + 1,     INT32_MAX - 1, INT32_MAX};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        int32_t k = ks[i];
        for (int32_t rel = -2100; rel <= 2100; rel++) {
            int32_t got = pa_shaw_index(rel, k);
            assert_int_equal(got, ref_shaw_index(rel, k));
            assert_true(got >= 0 && got <= 2 * k);
        }
        for (size_t e = 0; e < sizeof extremes / sizeof extremes[0]; e++)
            assert_int_equal(pa_shaw_index(extremes[e], k), ref_shaw_index(extremes[e], k));
    }
}

static void test_index_known(void **state)
{
    (void)state;
    const int32_t rel[] = {-9, -3, -2, -1, 0, 1, 2, 3, 9};
    const int32_t want[] = {0, 0, 0, 1, 2, 3, 4, 4, 4};
    for (size_t i = 0; i < 9; i++)
        assert_int_equal(pa_shaw_index(rel[i], 2), want[i]);
    assert_int_equal(pa_shaw_index(INT32_MIN, MAX_K), 0);
    assert_int_equal(pa_shaw_index(INT32_MAX, MAX_K), 2 * MAX_K);
    assert_int_equal(pa_shaw_index(0, MAX_K), MAX_K);
    assert_int_equal(pa_shaw_index(INT32_MIN, 0), 0);
    assert_int_equal(pa_shaw_index(INT32_MAX, 0), 0);
    /* K < 0 is rejected by the check; the index is defined as 0 anyway. */
    assert_int_equal(pa_shaw_index(5, -1), 0);
    assert_int_equal(pa_shaw_index(-5, INT32_MIN), 0);
}

static pa_shaw make_shaw(int32_t k, const float *rel_k, int32_t head_dim, const float *rel_v,
                         int32_t v_head_dim)
{
    pa_shaw s;
    memset(&s, 0, sizeof s);
    s.max_relative_position = k;
    s.rel_k = rel_k;
    s.rel_k_rows = 2 * k + 1;
    s.rel_k_cols = head_dim;
    s.rel_v = rel_v;
    s.rel_v_rows = rel_v != NULL ? 2 * k + 1 : 0;
    s.rel_v_cols = v_head_dim;
    return s;
}

static void expect_error(const pa_shaw *s, int32_t d, int32_t dv, pa_status want, const char *field,
                         const char *message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa__shaw_check(s, d, dv, &err), want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
    assert_int_equal(pa__shaw_check(s, d, dv, NULL), want);
}

static void test_check(void **state)
{
    (void)state;
    float tk[5 * 8] = {0}, tv[5 * 6] = {0};
    pa_error err;
    pa_shaw s = make_shaw(2, tk, 8, NULL, 0);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 8, &err), PA_STATUS_OK, &err);
    s = make_shaw(2, tk, 8, tv, 6);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 6, &err), PA_STATUS_OK, &err);
    /* v_head_dim 0 means head_dim, as in pa_attention. */
    s = make_shaw(2, tk, 8, tk, 8);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 0, &err), PA_STATUS_OK, &err);
    /* K = 0: one row. */
    s = make_shaw(0, tk, 8, NULL, 0);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 8, &err), PA_STATUS_OK, &err);
    /* The largest K: only the shapes are read, never the rows. */
    s = make_shaw(MAX_K, tk, 8, NULL, 0);
    assert_int_equal(s.rel_k_rows, INT32_MAX);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 8, &err), PA_STATUS_OK, &err);

    expect_error(NULL, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    s = make_shaw(2, tk, 8, NULL, 0);
    s.max_relative_position = -1;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.max_relative_position",
                 "max_relative_position=-1");
    s.max_relative_position = MAX_K + 1;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.max_relative_position",
                 "max_relative_position=1073741824");
    s.max_relative_position = INT32_MAX;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.max_relative_position",
                 "must be in [0, 1073741823]");

    s = make_shaw(2, NULL, 8, NULL, 0);
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.rel_k", "NULL");
    s = make_shaw(2, tk, 8, NULL, 0);
    s.rel_k_rows = 4;
    expect_error(&s, 8, 8, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_k.shape[0]",
                 "shape[0]=4 does not equal 2*max_relative_position+1=5");
    s = make_shaw(2, tk, 8, NULL, 0);
    expect_error(&s, 16, 8, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_k.shape[1]",
                 "shape[1]=8 does not equal head_dim=16");

    s = make_shaw(2, tk, 8, tv, 6);
    s.rel_v_rows = 7;
    expect_error(&s, 8, 6, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[0]",
                 "shape[0]=7 does not equal 2*max_relative_position+1=5");
    s = make_shaw(2, tk, 8, tv, 6);
    expect_error(&s, 8, 8, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[1]",
                 "shape[1]=6 does not equal v_head_dim=8");
    expect_error(&s, 8, 0, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[1]",
                 "shape[1]=6 does not equal v_head_dim=8");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_matches_reference),
        cmocka_unit_test(test_index_known),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests_name("shaw", tests, NULL, NULL);
}
