/* test_similarity.c - lib/similarity.c: sim = P P^T against a double Gram
 * matrix of the reference encodings, the sinusoidal shift-rotation residual,
 * learned tables, workspace sizing and errors. */
#include "ref_encodings.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 12345.0f

/* sim tolerance: P is float (rounding 6e-8 per entry) and sgemm/ssyrk sums
 * dim float products, so the error grows with dim: atol = 1e-6 * dim. */
#define SIM_ATOL_PER_DIM 1e-6
/* Shift residual: both encodings are rounded to float (<= 3e-8 each) and the
 * rotation has gain <= sqrt(2), so the residual is ~1e-7; we require < 1e-6. */
#define SHIFT_RESIDUAL_MAX 1e-6

typedef struct run {
    float *sim;
    double residual;
    pa_status st;
    pa_error err;
} run;

static run analyze(const pa_scheme *s, const int32_t *pos, int32_t n, int32_t dim, int32_t shift,
                   bool want_residual)
{
    run r;
    size_t ws_size = pa_similarity_workspace_size(n, dim);
    assert_true(ws_size > 0);
    void *ws = tu_alloc(ws_size, 1);
    r.sim = tu_alloc((size_t)n * (size_t)n, sizeof *r.sim);
    r.residual = -1.0;
    memset(&r.err, 0, sizeof r.err);
    r.st = pa_analyze_similarity(s, pos, n, dim, shift, ws, ws_size, r.sim,
                                 want_residual ? &r.residual : NULL, &r.err);
    free(ws);
    return r;
}

static void check_sim(const float *sim, const double *p_ref, int32_t n, int32_t dim)
{
    double *want = tu_alloc((size_t)n * (size_t)n, sizeof *want);
    ref_gram(p_ref, n, dim, want);
    TU_ASSERT_CLOSE(sim, want, (size_t)n * (size_t)n, SIM_ATOL_PER_DIM * dim, 0.0);
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < n; j++)
            assert_true(sim[(size_t)i * (size_t)n + (size_t)j] ==
                        sim[(size_t)j * (size_t)n + (size_t)i]);
    free(want);
}

static void test_sinusoidal_sim(void **state)
{
    (void)state;
    const int32_t dims[] = {1, 2, 3, 8, 33, 64, 129};
    const pa_sinusoidal_layout layouts[] = {PA_SINUSOIDAL_LAYOUT_INTERLEAVED,
                                            PA_SINUSOIDAL_LAYOUT_CONCAT};
    int32_t pos[40];
    for (int32_t i = 0; i < 40; i++)
        pos[i] = i * i - 3 * i; /* irregular, with repeats and large gaps */
    pos[39] = 1 << 24;
    for (size_t l = 0; l < 2; l++) {
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            pa_scheme s;
            pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
            s.sinusoidal.layout = layouts[l];
            const int32_t ns[] = {1, 5, 40};
            for (size_t k = 0; k < 3; k++) {
                int32_t n = ns[k], dim = dims[d];
                run r = analyze(&s, pos, n, dim, 3, false);
                TU_ASSERT_STATUS(r.st, PA_STATUS_OK, &r.err);
                double *p = tu_alloc((size_t)n * (size_t)dim, sizeof *p);
                ref_sinusoidal(&s.sinusoidal, pos, n, dim, p);
                check_sim(r.sim, p, n, dim);
                free(p);
                free(r.sim);
            }
        }
    }
}

/* For consecutive positions the sinusoidal sim depends only on i - j
 * (sum_k cos((i - j) w_k) for even dim): a Toeplitz matrix. */
static void test_sinusoidal_sim_is_toeplitz(void **state)
{
    (void)state;
    int32_t pos[32];
    for (int32_t i = 0; i < 32; i++)
        pos[i] = 100 + i;
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    run r = analyze(&s, pos, 32, 64, 0, false);
    TU_ASSERT_STATUS(r.st, PA_STATUS_OK, &r.err);
    for (int32_t i = 0; i + 1 < 32; i++)
        for (int32_t j = 0; j + 1 < 32; j++)
            assert_true(fabs(r.sim[i * 32 + j] - r.sim[(i + 1) * 32 + j + 1]) <
                        2 * SIM_ATOL_PER_DIM * 64);
    /* The diagonal is |PE|^2 = dim/2 = 32 for even dim. */
    for (int32_t i = 0; i < 32; i++)
        assert_true(fabs(r.sim[i * 33] - 32.0) < SIM_ATOL_PER_DIM * 64);
    free(r.sim);
}

static void test_shift_residual(void **state)
{
    (void)state;
    const int32_t dims[] = {1, 2, 3, 8, 63, 64, 512};
    const int32_t shifts[] = {0, 1, 7, -13, 1000, 100000, -(1 << 24)};
    int32_t pos[50];
    for (int32_t i = 0; i < 49; i++)
        pos[i] = i;
    pos[49] = 1 << 28;
    for (int l = 0; l < 2; l++) {
        pa_scheme s;
        pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
        s.sinusoidal.layout = (pa_sinusoidal_layout)l;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            for (size_t k = 0; k < sizeof shifts / sizeof shifts[0]; k++) {
                run r = analyze(&s, pos, 50, dims[d], shifts[k], true);
                TU_ASSERT_STATUS(r.st, PA_STATUS_OK, &r.err);
                if (!(r.residual >= 0.0 && r.residual < SHIFT_RESIDUAL_MAX))
                    fail_msg("layout %d dim %d shift %d: residual %g", l, dims[d], shifts[k],
                             r.residual);
                /* Shift 0 is the identity on identical encodings; dim 1 has no
                 * pair at all (interleaved lone sine, concat zero pad). */
                if (shifts[k] == 0 || dims[d] == 1)
                    assert_true(r.residual == 0.0);
                free(r.sim);
            }
        }
    }
    /* A non-zero shift really compares two encodings: float rounding shows. */
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    run r = analyze(&s, pos, 50, 64, 7, true);
    assert_true(r.residual > 0.0);
    free(r.sim);
}

static void test_learned(void **state)
{
    (void)state;
    const int32_t rows = 100, cols = 16;
    float *table = tu_alloc((size_t)rows * cols, sizeof *table);
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    tu_fill(&rng, table, (size_t)rows * cols, -1.0, 1.0);
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_LEARNED);
    s.learned.table = table;
    s.learned.rows = rows;
    s.learned.cols = cols;
    s.learned.offset = 2;

    int32_t pos[30];
    for (int32_t i = 0; i < 30; i++)
        pos[i] = (int32_t)tu_uniform(&rng, -2.0, 98.0);
    run r = analyze(&s, pos, 30, cols, 5, true);
    TU_ASSERT_STATUS(r.st, PA_STATUS_OK, &r.err);
    assert_true(isnan(r.residual)); /* no rotation structure in a learned table */
    double *p = tu_alloc((size_t)30 * cols, sizeof *p);
    ref_learned(table, cols, 2, pos, 30, p);
    check_sim(r.sim, p, 30, cols);

    /* Non-trivial: random rows are neither orthogonal nor shift-invariant. */
    double max_off = 0.0;
    for (int32_t i = 0; i < 30; i++)
        for (int32_t j = 0; j < 30; j++)
            if (pos[i] != pos[j])
                max_off = fmax(max_off, fabs(r.sim[i * 30 + j]));
    assert_true(max_off > 0.5);
    free(p);
    free(r.sim);

    /* Without a residual pointer nothing else is written. */
    r = analyze(&s, pos, 30, cols, 0, false);
    TU_ASSERT_STATUS(r.st, PA_STATUS_OK, &r.err);
    assert_true(r.residual == -1.0);
    free(r.sim);
    free(table);
}

/* Finite rows whose dot product leaves float32: an error, not inf. */
static void test_learned_overflow(void **state)
{
    (void)state;
    float table[2 * 2] = {1.0f, 1.0f, 1.0e19f, 1.0e19f};
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_LEARNED);
    s.learned.table = table;
    s.learned.rows = 2;
    s.learned.cols = 2;
    const int32_t pos[2] = {0, 1};
    /* 1e19 * 1e19 * 2 = 2e38: still finite. */
    run r = analyze(&s, pos, 2, 2, 0, false);
    TU_ASSERT_STATUS(r.st, PA_STATUS_OK, &r.err);
    assert_float_equal(r.sim[3], 2.0e38f, 1e32);
    free(r.sim);
    table[2] = table[3] = 1.5e19f; /* 4.5e38 */
    r = analyze(&s, pos, 2, 2, 0, false);
    TU_ASSERT_STATUS(r.st, PA_STATUS_OUT_OF_RANGE, &r.err);
    assert_string_equal(r.err.field, "similarity");
    free(r.sim);
}

static void test_empty(void **state)
{
    (void)state;
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    size_t need = pa_similarity_workspace_size(0, 8);
    assert_true(need > 0);
    void *ws = tu_alloc(need, 1);
    double residual = -1.0;
    pa_error err;
    TU_ASSERT_STATUS(pa_analyze_similarity(&s, NULL, 0, 8, 3, ws, need, NULL, &residual, &err),
                     PA_STATUS_OK, &err);
    assert_true(residual == 0.0); /* max over no positions */
    free(ws);
}

/* The workspace may start anywhere: the size includes alignment slack. */
static void test_workspace(void **state)
{
    (void)state;
    assert_int_equal(pa_similarity_workspace_size(-1, 8), 0);
    assert_int_equal(pa_similarity_workspace_size(8, 0), 0);
    assert_true(pa_similarity_workspace_size(10, 16) >= 10 * 16 * sizeof(float));
    /* 2^62 floats are 2^64 bytes: reported as 0 (overflow), and the analysis
     * says TOO_LARGE before reading positions or writing sim. */
    assert_int_equal(pa_similarity_workspace_size(INT32_MAX, INT32_MAX), 0);

    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    int32_t pos[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    size_t need = pa_similarity_workspace_size(10, 16);
    char *buf = tu_alloc(need + 3, 1);
    float sim[100];
    double residual;
    pa_error err;
    for (size_t off = 0; off < 4; off++) {
        TU_ASSERT_STATUS(
            pa_analyze_similarity(&s, pos, 10, 16, 1, buf + off, need, sim, &residual, &err),
            PA_STATUS_OK, &err);
        assert_true(residual < SHIFT_RESIDUAL_MAX);
    }
    TU_ASSERT_STATUS(
        pa_analyze_similarity(&s, pos, INT32_MAX, INT32_MAX, 0, buf, need, sim, NULL, &err),
        PA_STATUS_TOO_LARGE, &err);
    assert_string_equal(err.field, "dim");
    free(buf);
}

static void expect_error(const pa_scheme *s, const int32_t *pos, int32_t n, int32_t dim,
                         int32_t shift, void *ws, size_t ws_size, bool with_sim, pa_status want,
                         const char *field, const char *message)
{
    float sim[16];
    double residual = 777.0;
    pa_error err;
    for (int i = 0; i < 16; i++)
        sim[i] = SENTINEL;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_analyze_similarity(s, pos, n, dim, shift, ws, ws_size,
                                           with_sim ? sim : NULL, &residual, &err),
                     want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
    for (int i = 0; i < 16; i++)
        assert_true(sim[i] == SENTINEL);
    assert_true(residual == 777.0);
}

static void test_errors(void **state)
{
    (void)state;
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    int32_t pos[4] = {0, 1, 2, 3};
    size_t need = pa_similarity_workspace_size(4, 8);
    void *ws = tu_alloc(need, 1);

    expect_error(NULL, pos, 4, 8, 1, ws, need, true, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    pa_scheme rope;
    pa_scheme_init(&rope, PA_SCHEME_ROPE);
    expect_error(&rope, pos, 4, 8, 1, ws, need, true, PA_STATUS_UNSUPPORTED, "scheme.type",
                 "not rope");
    pa_scheme bogus = s;
    bogus.type = (pa_scheme_type)42;
    expect_error(&bogus, pos, 4, 8, 1, ws, need, true, PA_STATUS_UNSUPPORTED, "scheme.type",
                 "unknown");
    expect_error(&s, pos, 4, 0, 1, ws, need, true, PA_STATUS_INVALID_ARGUMENT, "dim", "dim=0");
    expect_error(&s, pos, -2, 8, 1, ws, need, true, PA_STATUS_INVALID_ARGUMENT, "length",
                 "length=-2");
    expect_error(&s, NULL, 4, 8, 1, ws, need, true, PA_STATUS_INVALID_ARGUMENT, "positions",
                 "length=4");
    expect_error(&s, pos, 4, 8, 1, ws, need, false, PA_STATUS_INVALID_ARGUMENT, "sim", "length=4");
    s.sinusoidal.base = -1.0;
    expect_error(&s, pos, 4, 8, 1, ws, need, true, PA_STATUS_INVALID_ARGUMENT, "scheme.base",
                 "scheme.base=-1");
    s.sinusoidal.base = 10000.0;
    expect_error(&s, pos, 4, 8, 1, ws, need - 1, true, PA_STATUS_WORKSPACE_TOO_SMALL, "workspace",
                 "smaller than");
    expect_error(&s, pos, 4, 8, 1, NULL, need, true, PA_STATUS_WORKSPACE_TOO_SMALL, "workspace",
                 "smaller than");

    /* p + shift must stay an int32 position, but only when the residual is asked for. */
    int32_t far[4] = {0, 1, INT32_MAX - 1, 3};
    expect_error(&s, far, 4, 8, 2, ws, need, true, PA_STATUS_OUT_OF_RANGE, "shift",
                 "positions[2]=2147483646 + shift=2 overflows int32");
    int32_t low[4] = {INT32_MIN, 0, 0, 0};
    expect_error(&s, low, 4, 8, -1, ws, need, true, PA_STATUS_OUT_OF_RANGE, "shift",
                 "positions[0]=-2147483648 + shift=-1");
    float sim[16];
    pa_error err;
    TU_ASSERT_STATUS(pa_analyze_similarity(&s, far, 4, 8, 2, ws, need, sim, NULL, &err),
                     PA_STATUS_OK, &err);

    /* learned: dim must equal the table's cols, and rows must be in range. */
    float table[6 * 8] = {0};
    pa_scheme l;
    pa_scheme_init(&l, PA_SCHEME_LEARNED);
    l.learned.table = table;
    l.learned.rows = 6;
    l.learned.cols = 8;
    size_t need4 = pa_similarity_workspace_size(4, 4);
    void *ws4 = tu_alloc(need4, 1);
    expect_error(&l, pos, 4, 4, 0, ws4, need4, true, PA_STATUS_SHAPE_MISMATCH,
                 "scheme.table.shape[1]", "shape[1]=8 does not equal d_model=4");
    int32_t outside[4] = {0, 5, 6, 1};
    expect_error(&l, outside, 4, 8, 0, ws, need, true, PA_STATUS_OUT_OF_RANGE, "positions[2]",
                 "position 6 + offset 0 = row 6 is outside the learned table of 6 rows");
    l.learned.table = NULL;
    expect_error(&l, pos, 4, 8, 0, ws, need, true, PA_STATUS_INVALID_ARGUMENT, "scheme.table",
                 "NULL");
    free(ws4);
    free(ws);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sinusoidal_sim),   cmocka_unit_test(test_sinusoidal_sim_is_toeplitz),
        cmocka_unit_test(test_shift_residual),   cmocka_unit_test(test_learned),
        cmocka_unit_test(test_learned_overflow), cmocka_unit_test(test_empty),
        cmocka_unit_test(test_workspace),        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("similarity", tests, NULL, NULL);
}
