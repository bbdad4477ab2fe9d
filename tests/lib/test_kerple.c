/* test_kerple.c - lib/kerple.c and KERPLE in attention: the bias against
 * the transliteration of chijames/KERPLE (tests/ref_encodings.c), the
 * checks, and attention against the double reference in both kernels (GQA,
 * Lq != Lk with explicit positions, causal and not, window), with checks
 * that fail if the form, the sign, the per-head parameters or |m - n| were
 * wrong. */
#include "attention_fixture.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "ref_encodings.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const float R1[8] = {0.5f, 1.0f, 2.0f, 0.25f, 0.75f, 1.5f, 0.01f, 3.0f};
static const float R2[8] = {0.1f, 1.0f, 0.5f, 2.0f, 1.25f, 0.01f, 1.75f, 0.3f};

static void kerple_scheme(pa_scheme *s, pa_kerple_form form, int H)
{
    pa_scheme_init(s, PA_SCHEME_KERPLE);
    s->kerple.form = form;
    s->kerple.r1 = R1;
    s->kerple.num_r1 = H;
    s->kerple.r2 = R2;
    s->kerple.num_r2 = H;
}

static double want_bias(pa_kerple_form form, int h, double diff)
{
    return form == PA_KERPLE_FORM_POWER ? ref_kerple_power(R1[h], R2[h], diff)
                                        : ref_kerple_log(R1[h], R2[h], diff);
}

static void test_bias_formula(void **state)
{
    (void)state;
    const double dists[] = {0, 1, 2, 7, 100, 4095, 1e6, 2147483647.0};
    for (int f = 0; f < 2; f++) {
        pa_scheme s;
        kerple_scheme(&s, (pa_kerple_form)f, 8);
        for (int h = 0; h < 8; h++)
            for (size_t i = 0; i < sizeof dists / sizeof *dists; i++) {
                double got = pa_kerple_bias(&s.kerple, h, dists[i]);
                double want = want_bias((pa_kerple_form)f, h, dists[i]);
                assert_true(fabs(got - want) <= 1e-12 * (1.0 + fabs(want)));
            }
    }
    /* Hand values: log 0.5 * log(1 + 0.1 * 10) = 0.5 ln 2; power 0.25 * 3^2. */
    {
        pa_scheme s;
        kerple_scheme(&s, PA_KERPLE_FORM_LOG, 8);
        assert_true(fabs(pa_kerple_bias(&s.kerple, 0, 10.0) + 0.5 * log(2.0)) < 1e-7);
        assert_true(pa_kerple_bias(&s.kerple, 0, 0.0) == 0.0);
        s.kerple.form = PA_KERPLE_FORM_POWER;
        assert_true(fabs(pa_kerple_bias(&s.kerple, 3, 3.0) + 0.25 * 9.0) < 1e-12);
    }
}

static void expect_kerple_check(const pa_kerple *k, int H, pa_status want, const char *field,
                                const char *message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_kerple_check(k, H, &err), want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
}

static void test_check(void **state)
{
    (void)state;
    pa_scheme s;
    float low[4] = {0.5f, 0.5f, 0.5f, 0.001f}, big[4] = {0.5f, 2.5f, 0.5f, 0.5f};
    float nan4[4] = {0.5f, NAN, 0.5f, 0.5f};
    kerple_scheme(&s, PA_KERPLE_FORM_LOG, 4);
    TU_ASSERT_STATUS(pa_kerple_check(&s.kerple, 4, NULL), PA_STATUS_OK, NULL);
    expect_kerple_check(NULL, 4, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    expect_kerple_check(&s.kerple, 0, PA_STATUS_INVALID_ARGUMENT, "num_heads", "num_heads=0");
    expect_kerple_check(&s.kerple, 5, PA_STATUS_SHAPE_MISMATCH, "scheme.r1",
                        "scheme.r1 has 4 values but num_heads=5");
    s.kerple.r2 = low;
    expect_kerple_check(&s.kerple, 4, PA_STATUS_INVALID_ARGUMENT, "scheme.r2[3]",
                        "scheme.r2[3]=0.001 is below 0.01");
    s.kerple.r2 = R2;
    s.kerple.r1 = low;
    expect_kerple_check(&s.kerple, 4, PA_STATUS_INVALID_ARGUMENT, "scheme.r1[3]",
                        "scheme.r1[3]=0.001 is below 0.01");
    s.kerple.r1 = nan4;
    expect_kerple_check(&s.kerple, 4, PA_STATUS_INVALID_ARGUMENT, "scheme.r1[1]", "is not finite");
    s.kerple.r1 = NULL;
    expect_kerple_check(&s.kerple, 4, PA_STATUS_INVALID_ARGUMENT, "scheme.r1",
                        "scheme.r1 is required");
    /* An exponent above 2: fine for log, refused for power. */
    s.kerple.r1 = R1;
    s.kerple.r2 = big;
    TU_ASSERT_STATUS(pa_kerple_check(&s.kerple, 4, NULL), PA_STATUS_OK, NULL);
    s.kerple.form = PA_KERPLE_FORM_POWER;
    expect_kerple_check(&s.kerple, 4, PA_STATUS_INVALID_ARGUMENT, "scheme.r2[1]", "above 2");
    s.kerple.form = (pa_kerple_form)7;
    expect_kerple_check(&s.kerple, 4, PA_STATUS_INVALID_ARGUMENT, "scheme.form",
                        "not log or power");
    /* Through pa_attention_check. */
    {
        fixture f;
        pa_error err;
        setup_qkv(&f, PA_SCHEME_KERPLE, 3, 3, 4, 4, 8, 0, 1);
        TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_INVALID_ARGUMENT, &err);
        assert_string_equal(err.field, "scheme.r1");
        fixture_free(&f);
    }
    assert_string_equal(pa_kerple_form_name(PA_KERPLE_FORM_POWER), "power");
    {
        pa_kerple_form form;
        assert_true(pa_kerple_form_from_name("log", &form) && form == PA_KERPLE_FORM_LOG);
        assert_false(pa_kerple_form_from_name("Log", &form));
    }
}

/* Bias matrix with zero q and k: exactly the formula on |m - n|, negative,
 * per head, non-causal symmetric. */
static void test_bias_matrix(void **state)
{
    (void)state;
    const int32_t qpos[3] = {9, 2, 5}, kpos[5] = {0, 3, 5, 9, 14};
    for (int f = 0; f < 2; f++) {
        pa_scheme s;
        float *got;
        kerple_scheme(&s, (pa_kerple_form)f, 4);
        got = bias_probe(&s, 4, 1, qpos, 3, kpos, 5, false);
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 5; j++) {
                    double d = fabs((double)qpos[i] - kpos[j]);
                    double want = want_bias((pa_kerple_form)f, h, d);
                    float g = got[((size_t)h * 3 + i) * 5 + j];
                    assert_true(fabs(g - want) <= 1e-6 * (1.0 + fabs(want)));
                    assert_true(d == 0 ? g == 0.0f : g < 0.0f); /* a penalty */
                }
        /* |m - n|: key 14 from query 9 (ahead) and key 0 from 5 are both 5 away. */
        for (int h = 0; h < 4; h++)
            assert_true(got[((size_t)h * 3 + 0) * 5 + 4] == got[((size_t)h * 3 + 2) * 5 + 0]);
        /* Per head: heads 0 and 1 differ at every distance > 0. */
        assert_true(got[1] != got[5 * 3 + 1]);
        free(got);
    }
    /* log and power differ (same parameters). */
    {
        pa_scheme sl, sp;
        kerple_scheme(&sl, PA_KERPLE_FORM_LOG, 4);
        kerple_scheme(&sp, PA_KERPLE_FORM_POWER, 4);
        float *a = bias_probe(&sl, 4, 1, qpos, 3, kpos, 5, false);
        float *b = bias_probe(&sp, 4, 1, qpos, 3, kpos, 5, false);
        assert_true(a[0] != b[0]);
        free(a);
        free(b);
    }
    /* Causal: the visible pairs as non-causal, the others hidden. */
    {
        pa_scheme s;
        kerple_scheme(&s, PA_KERPLE_FORM_LOG, 4);
        float *c = bias_probe(&s, 4, 1, qpos, 3, kpos, 5, true);
        float *n = bias_probe(&s, 4, 1, qpos, 3, kpos, 5, false);
        for (size_t x = 0; x < 4 * 3 * 5; x++) {
            int i = (int)(x / 5 % 3), j = (int)(x % 5);
            if (kpos[j] <= qpos[i])
                assert_true(c[x] == n[x]);
            else
                assert_true(isinf(c[x]) && c[x] < 0);
        }
        free(c);
        free(n);
    }
}

/* Attention against the reference: both kernels (output only: decode for
 * few rows; with logits and weights: tiled), GQA, Lq != Lk, explicit and
 * out-of-order positions, causal or not, window. */
static void test_attention(void **state)
{
    (void)state;
    static const int shapes[][5] = {
        /* Lq, Lk, H, Hkv, D */
        {1, 1, 4, 4, 8},    {1, 200, 8, 2, 16},  {5, 300, 4, 1, 8},
        {17, 17, 8, 4, 16}, {70, 130, 4, 2, 32}, {3, 9, 2, 2, 5},
    };
    uint64_t seed = 3100;
    for (int form = 0; form < 2; form++)
        for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
            for (int variant = 0; variant < 4; variant++) {
                fixture f;
                const int Lq = shapes[c][0], Lk = shapes[c][1], H = shapes[c][2];
                int32_t *qp = NULL;
                setup_qkv(&f, PA_SCHEME_KERPLE, Lq, Lk, H, shapes[c][3], shapes[c][4], 0, seed++);
                kerple_scheme(&f.scheme, (pa_kerple_form)form, H);
                f.a.causal = variant & 1;
                if (variant & 2) {
                    /* Explicit query positions: past the keys and out of order. */
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
    for (int form = 0; form < 2; form++) {
        fixture f;
        setup_qkv(&f, PA_SCHEME_KERPLE, 3, 6, 4, 2, 8, 0, 77 + (uint64_t)form);
        kerple_scheme(&f.scheme, (pa_kerple_form)form, 4);
        f.a.q_positions = qpos;
        f.a.k_positions = kpos;
        check_against_reference(&f.a, WANT_LOGITS | WANT_WEIGHTS);
        check_against_reference(&f.a, 0);
        fixture_free(&f);
    }
}

/* A bias past float32 is refused, naming the head. */
static void test_overflow(void **state)
{
    (void)state;
    fixture f;
    float r1[2] = {1.0f, 1e38f}, r2[2] = {1.0f, 2.0f};
    int32_t kpos[2] = {0, 1 << 30};
    pa_attention_out out = {0};
    pa_error err;
    pa_status st;
    size_t wsz;
    void *ws;
    setup_qkv(&f, PA_SCHEME_KERPLE, 2, 2, 2, 2, 4, 0, 9);
    f.scheme.kerple.form = PA_KERPLE_FORM_POWER;
    f.scheme.kerple.r1 = r1;
    f.scheme.kerple.r2 = r2;
    f.scheme.kerple.num_r1 = f.scheme.kerple.num_r2 = 2;
    f.a.k_positions = kpos;
    out.output = tu_alloc(2 * 2 * 4, sizeof(float));
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    st = pa_attention_run(&f.a, &out, ws, wsz, &err);
    free(ws);
    free(out.output);
    fixture_free(&f);
    TU_ASSERT_STATUS(st, PA_STATUS_OUT_OF_RANGE, &err);
    assert_string_equal(err.field, "scheme.r1[1]");
}

/* The decomposition: content = scale q.k, position = the bias. */
static void test_decompose(void **state)
{
    (void)state;
    fixture f;
    pa_decomposition d;
    pa_error err;
    const int H = 4, Lq = 6, Lk = 6;
    size_t n = (size_t)H * Lq * Lk, wsz;
    float *want;
    void *ws;
    setup_qkv(&f, PA_SCHEME_KERPLE, Lq, Lk, H, 2, 8, 0, 55);
    kerple_scheme(&f.scheme, PA_KERPLE_FORM_LOG, H);
    memset(&d, 0, sizeof d);
    d.content = tu_alloc(n, sizeof(float));
    d.position = tu_alloc(n, sizeof(float));
    wsz = pa_decompose_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, wsz, &err), PA_STATUS_OK, &err);
    want = bias_probe(&f.scheme, H, 1, NULL, Lq, NULL, Lk, false);
    for (size_t x = 0; x < n; x++)
        assert_true(fabsf(d.position[x] - want[x]) <= 1e-5f * (1.0f + fabsf(want[x])));
    free(ws);
    free(want);
    free(d.content);
    free(d.position);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bias_formula),  cmocka_unit_test(test_check),
        cmocka_unit_test(test_bias_matrix),   cmocka_unit_test(test_attention),
        cmocka_unit_test(test_far_positions), cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_decompose),
    };
    return cmocka_run_group_tests_name("kerple", tests, NULL, NULL);
}
