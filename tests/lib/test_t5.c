/* test_t5.c - lib/t5.c: buckets against a literal transliteration of Hugging
 * Face's _relative_position_bucket (float32 log branch), known T5 values, and
 * the configuration and table checks. */
#include "ref_encodings.h"
#include "testutil.h"

#include <string.h>

/* Internal (lib/internal.h); declared here because tests see include/ only. */
pa_status pa__t5_check_table(const pa_t5 *t, int32_t num_heads, pa_error *err);

typedef struct config {
    int32_t num_buckets, max_distance;
    bool bidirectional;
} config;

/* Valid configurations: the T5 default, others seen in models, odd causal
 * counts, max_distance just above max_exact, and max_distance below the
 * reach of [-1000, 1000]. */
static const config configs[] = {
    {32, 128, true}, {32, 128, false}, {16, 64, true},   {16, 64, false},
    {64, 256, true}, {64, 256, false}, {8, 20, true},    {8, 20, false},
    {4, 2, true},    {2, 2, false},    {33, 100, false}, {128, 1000, true},
    {32, 9, true},   {32, 17, false},  {320, 161, true}, {1000, 2000, false},
};

static void test_matches_hf_reference(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        const config *k = &configs[c];
        pa_t5 t = {.num_buckets = k->num_buckets,
                   .max_distance = k->max_distance,
                   .bidirectional = k->bidirectional};
        TU_ASSERT_STATUS(pa_t5_check(&t, NULL), PA_STATUS_OK, NULL);
        for (int32_t rel = -1000; rel <= 1000; rel++) {
            int32_t got = pa_t5_bucket(rel, k->bidirectional, k->num_buckets, k->max_distance);
            int64_t want = ref_t5_bucket(rel, k->bidirectional, k->num_buckets, k->max_distance);
            if (got != want)
                fail_msg("num_buckets=%d max_distance=%d bidirectional=%d rel=%d: bucket %d, "
                         "HF %lld",
                         k->num_buckets, k->max_distance, k->bidirectional, rel, got,
                         (long long)want);
            assert_true(got >= 0 && got < k->num_buckets);
        }
    }
}

/* Values of HF T5 with the default 32 buckets / max_distance 128. */
static void test_known_values(void **state)
{
    (void)state;
    const struct {
        int32_t rel, bidir, causal;
    } known[] = {
        {0, 0, 0},      {-1, 1, 1},     {1, 17, 0},    {-7, 7, 7},    {7, 23, 0},
        {-8, 8, 8},     {8, 24, 0},     {-15, 9, 15},  {-16, 10, 16}, {16, 26, 0},
        {-20, 10, 17},  {20, 26, 0},    {-32, 12, 21}, {-64, 14, 26}, {-127, 15, 31},
        {-128, 15, 31}, {-200, 15, 31}, {200, 31, 0},  {1000, 31, 0}, {-1000, 15, 31},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        assert_int_equal(pa_t5_bucket(known[i].rel, true, 32, 128), known[i].bidir);
        assert_int_equal(pa_t5_bucket(known[i].rel, false, 32, 128), known[i].causal);
        assert_int_equal(ref_t5_bucket(known[i].rel, true, 32, 128), known[i].bidir);
        assert_int_equal(ref_t5_bucket(known[i].rel, false, 32, 128), known[i].causal);
    }
    /* Causal: every future key (rel > 0) shares bucket 0. */
    for (int32_t rel = 1; rel <= 1000; rel++)
        assert_int_equal(pa_t5_bucket(rel, false, 32, 128), 0);
}

/* int32 extremes: |INT32_MIN| must not wrap; extreme but valid parameters
 * must not overflow the float -> integer conversion. */
static void test_extremes(void **state)
{
    (void)state;
    const int32_t rels[] = {INT32_MIN, INT32_MIN + 1, -1000000, 1000000, INT32_MAX - 1, INT32_MAX};
    const config big[] = {
        {32, 128, true},
        {32, 128, false},
        {1 << 20, (1 << 19) + 1, false},
        {INT32_MAX - 1, INT32_MAX, true},
        {INT32_MAX, (1 << 30), false},
        {4, INT32_MAX, true},
    };
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        pa_t5 t = {.num_buckets = big[c].num_buckets,
                   .max_distance = big[c].max_distance,
                   .bidirectional = big[c].bidirectional};
        TU_ASSERT_STATUS(pa_t5_check(&t, NULL), PA_STATUS_OK, NULL);
        for (size_t r = 0; r < sizeof rels / sizeof rels[0]; r++) {
            int32_t got = pa_t5_bucket(rels[r], t.bidirectional, t.num_buckets, t.max_distance);
            int64_t want = ref_t5_bucket(rels[r], t.bidirectional, t.num_buckets, t.max_distance);
            assert_int_equal(got, want);
        }
    }
    assert_int_equal(pa_t5_bucket(INT32_MIN, true, 32, 128), 15);
    assert_int_equal(pa_t5_bucket(INT32_MAX, true, 32, 128), 31);
    assert_int_equal(pa_t5_bucket(INT32_MIN, false, 32, 128), 31);
    assert_int_equal(pa_t5_bucket(INT32_MAX, false, 32, 128), 0);
}

/* Configurations pa_t5_check rejects give bucket 0, never UB. */
static void test_degenerate_bucket_is_zero(void **state)
{
    (void)state;
    const config bad[] = {{0, 128, true},   {1, 128, false}, {2, 128, true},  {3, 128, true},
                          {-4, 128, false}, {32, 8, true},   {32, 16, false}, {32, -5, true}};
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++)
        for (int32_t rel = -300; rel <= 300; rel += 7)
            assert_int_equal(
                pa_t5_bucket(rel, bad[c].bidirectional, bad[c].num_buckets, bad[c].max_distance),
                0);
}

static void expect_check_error(int32_t nb, int32_t md, bool bidir, const char *field,
                               const char *message)
{
    pa_t5 t = {.num_buckets = nb, .max_distance = md, .bidirectional = bidir};
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_t5_check(&t, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
    assert_int_equal(pa_t5_check(&t, NULL), PA_STATUS_INVALID_ARGUMENT);
    /* pa__t5_check_table reports the same problem first. */
    float table[4] = {0};
    t.table = table;
    t.table_rows = nb;
    t.table_cols = 1;
    TU_ASSERT_STATUS(pa__t5_check_table(&t, 1, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, field);
}

static void test_check(void **state)
{
    (void)state;
    pa_scheme s;
    pa_error err;
    pa_scheme_init(&s, PA_SCHEME_T5);
    TU_ASSERT_STATUS(pa_t5_check(&s.t5, &err), PA_STATUS_OK, &err);

    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_t5_check(NULL, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "scheme");

    /* Bidirectional: num_buckets/4 exact buckets per direction must be >= 1,
     * so num_buckets even and >= 4. Causal: num_buckets/2 >= 1. */
    expect_check_error(2, 128, true, "scheme.num_buckets", "num_buckets=2");
    expect_check_error(3, 128, true, "scheme.num_buckets", "num_buckets=3");
    expect_check_error(33, 128, true, "scheme.num_buckets", "num_buckets=33");
    expect_check_error(0, 128, true, "scheme.num_buckets", "num_buckets=0");
    expect_check_error(1, 128, false, "scheme.num_buckets", "num_buckets=1");
    expect_check_error(-8, 128, false, "scheme.num_buckets", "num_buckets=-8");
    /* max_distance must exceed max_exact, or log(max_distance/max_exact) <= 0. */
    expect_check_error(32, 8, true, "scheme.max_distance",
                       "max_distance=8 must exceed max_exact=8");
    expect_check_error(32, 16, false, "scheme.max_distance",
                       "max_distance=16 must exceed max_exact=16");
    expect_check_error(4, 1, true, "scheme.max_distance", "max_distance=1");
    expect_check_error(2, 0, false, "scheme.max_distance", "max_distance=0");
    expect_check_error(32, -1, true, "scheme.max_distance", "max_distance=-1");

    const config ok[] = {
        {4, 2, true}, {2, 2, false}, {3, 2, false}, {32, 9, true}, {32, 17, false}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pa_t5 t = {.num_buckets = ok[i].num_buckets,
                   .max_distance = ok[i].max_distance,
                   .bidirectional = ok[i].bidirectional};
        TU_ASSERT_STATUS(pa_t5_check(&t, &err), PA_STATUS_OK, &err);
    }
}

static void test_check_table(void **state)
{
    (void)state;
    float table[32 * 8] = {0};
    pa_scheme s;
    pa_error err;
    pa_scheme_init(&s, PA_SCHEME_T5);
    pa_t5 t = s.t5;
    t.table = table;
    t.table_rows = 32;
    t.table_cols = 8;
    TU_ASSERT_STATUS(pa__t5_check_table(&t, 8, &err), PA_STATUS_OK, &err);

    t.table = NULL;
    TU_ASSERT_STATUS(pa__t5_check_table(&t, 8, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "scheme.table");
    t.table = table;

    t.table_rows = 16;
    TU_ASSERT_STATUS(pa__t5_check_table(&t, 8, &err), PA_STATUS_SHAPE_MISMATCH, &err);
    assert_string_equal(err.field, "scheme.table.shape[0]");
    assert_non_null(strstr(err.message, "shape[0]=16 does not equal num_buckets=32"));
    t.table_rows = 32;

    TU_ASSERT_STATUS(pa__t5_check_table(&t, 4, &err), PA_STATUS_SHAPE_MISMATCH, &err);
    assert_string_equal(err.field, "scheme.table.shape[1]");
    assert_non_null(strstr(err.message, "shape[1]=8 does not equal num_heads=4"));

    TU_ASSERT_STATUS(pa__t5_check_table(NULL, 4, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "scheme");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_hf_reference),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_degenerate_bucket_is_zero),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_check_table),
    };
    return cmocka_run_group_tests_name("t5", tests, NULL, NULL);
}
