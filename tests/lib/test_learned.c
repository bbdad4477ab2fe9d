/* test_learned.c - lib/learned.c: table lookups against ref_learned, the
 * row-range errors and the internal check pa_attention_check uses. */
#include "ref_encodings.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define SENTINEL 12345.0f

static void assert_untouched(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_true(x[i] == SENTINEL);
}

static float *make_table(int32_t rows, int32_t cols, uint64_t seed)
{
    tu_rng r;
    float *t = tu_alloc((size_t)rows * (size_t)cols, sizeof *t);
    tu_rng_seed(&r, seed);
    tu_fill(&r, t, (size_t)rows * (size_t)cols, -1.0, 1.0);
    return t;
}

/* A lookup is a copy: exact equality (atol 0). */
static void test_encode_matches_reference(void **state)
{
    (void)state;
    const int32_t shapes[][2] = {{50, 7}, {1, 1}, {3, 1}, {1, 5}, {1024, 64}};
    const int32_t offsets[] = {0, 2};
    tu_rng r;
    tu_rng_seed(&r, 11);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (size_t o = 0; o < 2; o++) {
            pa_learned l = {.rows = shapes[s][0], .cols = shapes[s][1], .offset = offsets[o]};
            l.table = make_table(l.rows, l.cols, 100 + s);
            int32_t n = 40, pos[40];
            for (int32_t i = 0; i < n; i++)
                pos[i] = (int32_t)tu_uniform(&r, 0.0, (double)l.rows) - l.offset;
            pos[0] = -l.offset;             /* first row */
            pos[1] = l.rows - 1 - l.offset; /* last row */
            float *got = tu_alloc((size_t)n * (size_t)l.cols, sizeof *got);
            double *want = tu_alloc((size_t)n * (size_t)l.cols, sizeof *want);
            pa_error err;
            TU_ASSERT_STATUS(pa_learned_encode(&l, pos, n, got, &err), PA_STATUS_OK, &err);
            ref_learned(l.table, l.cols, l.offset, pos, n, want);
            TU_ASSERT_CLOSE(got, want, (size_t)n * (size_t)l.cols, 0.0, 0.0);
            free(got);
            free(want);
            free((void *)l.table);
        }
    }
}

static void test_empty(void **state)
{
    (void)state;
    float t[4] = {1, 2, 3, 4};
    pa_learned l = {.table = t, .rows = 2, .cols = 2};
    pa_error err;
    TU_ASSERT_STATUS(pa_learned_encode(&l, NULL, 0, NULL, &err), PA_STATUS_OK, &err);
}

static void expect_encode_error(const pa_learned *l, const int32_t *pos, int32_t n, float *out,
                                pa_status want, const char *field, const char *message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_learned_encode(l, pos, n, out, &err), want, &err);
    assert_string_equal(err.field, field);
    if (message != NULL && strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
    assert_int_equal(pa_learned_encode(l, pos, n, out, NULL), want);
}

/* OPT-style offset 2 with 1024 rows: position 1030 is row 1032. */
static void test_out_of_range_message(void **state)
{
    (void)state;
    pa_learned l = {.rows = 1024, .cols = 4, .offset = 2};
    l.table = make_table(l.rows, l.cols, 3);
    const int32_t pos[] = {0, 1, 2, 3, 4, 1030, 6};
    float out[7 * 4];
    for (size_t i = 0; i < 28; i++)
        out[i] = SENTINEL;
    expect_encode_error(&l, pos, 7, out, PA_STATUS_OUT_OF_RANGE, "positions[5]",
                        "position 1030 + offset 2 = row 1032 is outside the learned table of "
                        "1024 rows");
    /* Rows before the bad one were not written either. */
    assert_untouched(out, 28);

    /* Boundaries: -2 + 2 = row 0 is fine, -3 + 2 = -1 is not; 1021 is the last. */
    const int32_t ok[] = {-2, 1021};
    pa_error err;
    TU_ASSERT_STATUS(pa_learned_encode(&l, ok, 2, out, &err), PA_STATUS_OK, &err);
    const int32_t low[] = {-3};
    expect_encode_error(&l, low, 1, out, PA_STATUS_OUT_OF_RANGE, "positions[0]",
                        "position -3 + offset 2 = row -1 is outside");
    const int32_t high[] = {5, 1022};
    expect_encode_error(&l, high, 2, out, PA_STATUS_OUT_OF_RANGE, "positions[1]",
                        "row 1024 is outside");

    /* position + offset must not wrap around int32 into the table. */
    l.offset = INT32_MAX;
    const int32_t big[] = {INT32_MAX};
    expect_encode_error(&l, big, 1, out, PA_STATUS_OUT_OF_RANGE, "positions[0]",
                        "row 4294967294 is outside");
    l.offset = INT32_MIN;
    const int32_t wrap[] = {INT32_MIN};
    expect_encode_error(&l, wrap, 1, out, PA_STATUS_OUT_OF_RANGE, "positions[0]",
                        "row -4294967296 is outside");
    free((void *)l.table);
}

static void test_encode_errors(void **state)
{
    (void)state;
    float t[6] = {0};
    pa_learned l = {.table = t, .rows = 3, .cols = 2};
    const int32_t pos[] = {0, 1};
    float out[4];
    for (size_t i = 0; i < 4; i++)
        out[i] = SENTINEL;

    expect_encode_error(NULL, pos, 2, out, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    l.table = NULL;
    expect_encode_error(&l, pos, 2, out, PA_STATUS_INVALID_ARGUMENT, "scheme.table", "NULL");
    l.table = t;
    l.rows = 0;
    expect_encode_error(&l, pos, 2, out, PA_STATUS_INVALID_ARGUMENT, "scheme.table.shape[0]",
                        "shape[0]=0");
    l.rows = 3;
    l.cols = -1;
    expect_encode_error(&l, pos, 2, out, PA_STATUS_INVALID_ARGUMENT, "scheme.table.shape[1]",
                        "shape[1]=-1");
    l.cols = 2;
    expect_encode_error(&l, pos, -1, out, PA_STATUS_INVALID_ARGUMENT, "length", "length=-1");
    expect_encode_error(&l, NULL, 2, out, PA_STATUS_INVALID_ARGUMENT, "positions", "length=2");
    expect_encode_error(&l, pos, 2, NULL, PA_STATUS_INVALID_ARGUMENT, "out", "length=2");
    assert_untouched(out, 4);
}

static void test_internal_check(void **state)
{
    (void)state;
    float t[10 * 4] = {0};
    pa_learned l = {.table = t, .rows = 10, .cols = 4, .offset = 0};
    pa_error err;
    const int32_t pos[] = {0, 9, 3};

    TU_ASSERT_STATUS(pa__learned_check(&l, 4, pos, 3, "k_positions", &err), PA_STATUS_OK, &err);

    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa__learned_check(&l, 8, pos, 3, "k_positions", &err),
                     PA_STATUS_SHAPE_MISMATCH, &err);
    assert_string_equal(err.field, "scheme.table.shape[1]");
    assert_non_null(strstr(err.message, "shape[1]=4 does not equal d_model=8"));

    l.table = NULL;
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, pos, 3, "k_positions", &err),
                     PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "scheme.table");
    l.table = t;

    const int32_t bad[] = {0, 1, 2, 3, 4, 10};
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, bad, 6, "k_positions", &err), PA_STATUS_OUT_OF_RANGE,
                     &err);
    assert_string_equal(err.field, "k_positions[5]");
    assert_string_equal(err.message,
                        "position 10 + offset 0 = row 10 is outside the learned table of 10 rows");

    /* NULL positions stand for the default 0 .. n-1. */
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, NULL, 10, "q_positions", &err), PA_STATUS_OK, &err);
    /* Too short for them: the error names the table the caller sent, not
     * the positions it did not. */
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, NULL, 11, "q_positions", &err),
                     PA_STATUS_OUT_OF_RANGE, &err);
    assert_string_equal(err.field, "scheme.table.shape[0]");
    assert_string_equal(err.message,
                        "scheme.table has 10 rows, too few for the default q_positions 0..10 (one "
                        "per token, offset 0): send a table of at least 11 rows, or q_positions "
                        "within it");
    l.offset = 2;
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, NULL, 8, "q_positions", &err), PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, NULL, 9, "q_positions", &err), PA_STATUS_OUT_OF_RANGE,
                     &err);
    assert_string_equal(err.field, "scheme.table.shape[0]");
    assert_non_null(strstr(err.message, "0..8 (one per token, offset 2): send a table of at least "
                                        "11 rows"));
    l.offset = -1;
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, NULL, 3, "q_positions", &err), PA_STATUS_OUT_OF_RANGE,
                     &err);
    assert_string_equal(err.field, "scheme.offset");
    assert_string_equal(err.message, "scheme.offset=-1 puts the default q_positions 0..2 at rows "
                                     "-1..1, before the table's first row");
    l.offset = 2;
    TU_ASSERT_STATUS(pa__learned_check(&l, 4, NULL, 0, "q_positions", NULL), PA_STATUS_OK, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_matches_reference), cmocka_unit_test(test_empty),
        cmocka_unit_test(test_out_of_range_message),     cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_internal_check),
    };
    return cmocka_run_group_tests_name("learned", tests, NULL, NULL);
}
