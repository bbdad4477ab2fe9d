/* test_rope_offset.c - lib/rope_offset.c: the score <R(m) q, R(n) k> depends
 * only on m - n, for rope and for xPos (whose pairs also carry
 * zeta_i^((m - n) / scale_base), checked against tests/ref_xpos.c).
 *
 * The library computes in double and rounds the results to float, so the
 * tolerances are float rounding of the result: scores within 1e-6 relative +
 * 1e-6 * |q||k| af^2 absolute of a reference computed directly from
 * tests/ref_rope.c, and spreads below 1e-6 * |q||k| af^2.
 */
#include "testutil.h"
#include "ref_rope.h"
#include "ref_xpos.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float g_short[64], g_long[64];

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < 64; i++) {
        g_short[i] = 1.0f + 0.05f * (float)i;
        g_long[i] = 2.0f + 0.5f * (float)i;
    }
    return 0;
}

static pa_rope rope_defaults(void)
{
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    return s.rope;
}

static pa_rope rope_config(pa_rope_scaling scaling, int32_t rotary_dim, int32_t r)
{
    pa_rope p = rope_defaults();
    p.scaling = scaling;
    p.rotary_dim = rotary_dim;
    switch (scaling) {
    case PA_ROPE_SCALING_LINEAR:
    case PA_ROPE_SCALING_NTK:
        p.factor = 4.0;
        break;
    case PA_ROPE_SCALING_DYNAMIC:
        p.factor = 4.0;
        p.original_max_position = 2048;
        break;
    case PA_ROPE_SCALING_YARN:
        p.factor = 8.0;
        p.original_max_position = 2048;
        break;
    case PA_ROPE_SCALING_LLAMA3:
        p.base = 500000.0;
        p.original_max_position = 1024;
        break;
    case PA_ROPE_SCALING_LONGROPE:
        p.factor = 16.0;
        p.original_max_position = 2048;
        p.short_factor = g_short;
        p.long_factor = g_long;
        p.short_factor_len = p.long_factor_len = r / 2;
        break;
    case PA_ROPE_SCALING_PROPORTIONAL:
        p.partial_rotary_factor = 0.25;
        break;
    case PA_ROPE_SCALING_NTK_ALPHA:
        p.alpha = 50.0;
        break;
    default:
        break;
    }
    return p;
}

static double norm(const float *x, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

/* <R(m) q, R(n) k> with the reference, at the frequencies for max_position. */
static double ref_score(const pa_rope *r, int D, int max_position, const float *q, const float *k,
                        int m, int n)
{
    double inv[64], af, qd[128], kd[128], qr[128], kr[128], acc = 0.0;
    ref_rope_inv_freq(r, D, max_position, inv, &af);
    for (int i = 0; i < D; i++) {
        qd[i] = q[i];
        kd[i] = k[i];
    }
    ref_rope_rotate(r, D, inv, af, m, qd, qr);
    ref_rope_rotate(r, D, inv, af, n, kd, kr);
    for (int i = 0; i < D; i++)
        acc += qr[i] * kr[i];
    return acc;
}

static void test_spread_and_score_vs_reference(void **state)
{
    (void)state;
    const int32_t offsets[] = {-5, 0, 1, 17, 300, 4000};
    const int32_t positions[] = {5, 10, 500, 2047, 7000, 1234};
    enum { NO = sizeof offsets / sizeof offsets[0], NP = sizeof positions / sizeof positions[0] };
    const int32_t base = 1000;
    const int32_t max_used = 7000 + 4000;
    const int32_t dims[][2] = {{64, 0}, {64, 32}, {65, 64}, {128, 0}, {6, 0}};
    tu_rng rng;
    tu_rng_seed(&rng, 3);
    for (int layout = 0; layout < 2; layout++) {
        for (int sc = 0; sc < PA_ROPE_SCALING_COUNT; sc++) {
            for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
                int32_t D = dims[d][0], rd = dims[d][1] ? dims[d][1] : D;
                pa_rope r = rope_config((pa_rope_scaling)sc, dims[d][1], rd);
                r.layout = (pa_rope_layout)layout;
                float q[128], k[128], score[NO], spread[NO];
                double want[NO], af, inv[64];
                pa_error err;
                tu_fill(&rng, q, (size_t)D, -1.0, 1.0);
                tu_fill(&rng, k, (size_t)D, -1.0, 1.0);
                TU_ASSERT_STATUS(pa_analyze_rope_offset(&r, D, q, k, offsets, NO, base, positions,
                                                        NP, score, spread, &err),
                                 PA_STATUS_OK, &err);
                ref_rope_inv_freq(&r, D, max_used, inv, &af);
                double scale = norm(q, D) * norm(k, D) * (af > 1.0 ? af * af : 1.0);
                for (int o = 0; o < NO; o++) {
                    want[o] = ref_score(&r, D, max_used, q, k, base + offsets[o], base);
                    if (!(spread[o] >= 0.0f && spread[o] <= 1e-6 * scale)) {
                        print_error("%s layout %d D %d r %d offset %d: spread %g (scale %g)\n",
                                    pa_rope_scaling_name(r.scaling), layout, D, rd, offsets[o],
                                    (double)spread[o], scale);
                        fail();
                    }
                }
                TU_ASSERT_CLOSE(score, want, NO, 1e-6 * scale, 1e-6);
            }
        }
    }
}

/* Offset 0 is the plain dot product, times af^2 on the rotated dims. */
static void test_offset_zero_is_dot(void **state)
{
    (void)state;
    const int32_t zero[] = {0}, positions[] = {0, 3, 99};
    float q[64], k[64], score, spread;
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    tu_fill(&rng, q, 64, -1.0, 1.0);
    tu_fill(&rng, k, 64, -1.0, 1.0);
    double rot = 0.0, pass = 0.0;
    for (int i = 0; i < 64; i++) {
        if (i < 48)
            rot += (double)q[i] * k[i];
        else
            pass += (double)q[i] * k[i];
    }

    pa_rope r = rope_defaults();
    TU_ASSERT_STATUS(
        pa_analyze_rope_offset(&r, 64, q, k, zero, 1, 7, positions, 3, &score, &spread, NULL),
        PA_STATUS_OK, NULL);
    double want = rot + pass;
    TU_ASSERT_CLOSE(&score, &want, 1, 1e-6, 1e-6);
    assert_true(spread <= 1e-6f);

    /* yarn, partial rotary r = 48: af^2 on the rotated dims only. */
    r = rope_config(PA_ROPE_SCALING_YARN, 48, 48);
    double af = 0.1 * log(8.0) + 1.0;
    TU_ASSERT_STATUS(
        pa_analyze_rope_offset(&r, 64, q, k, zero, 1, 7, positions, 3, &score, &spread, NULL),
        PA_STATUS_OK, NULL);
    want = af * af * rot + pass;
    TU_ASSERT_CLOSE(&score, &want, 1, 1e-6, 1e-6);
}

/* head_dim 2, q = k = e0: score(o) = cos(o * inv_freq[0]) = cos(o). */
static void test_score_known_values(void **state)
{
    (void)state;
    const int32_t offsets[] = {-3, -1, 0, 1, 2, 10};
    const int32_t positions[] = {3, 50};
    const float e0[2] = {1.0f, 0.0f};
    float score[6], spread[6];
    double want[6];
    for (int layout = 0; layout < 2; layout++) {
        pa_rope r = rope_defaults();
        r.layout = (pa_rope_layout)layout;
        TU_ASSERT_STATUS(
            pa_analyze_rope_offset(&r, 2, e0, e0, offsets, 6, 3, positions, 2, score, spread, NULL),
            PA_STATUS_OK, NULL);
        for (int o = 0; o < 6; o++)
            want[o] = cos((double)offsets[o]);
        TU_ASSERT_CLOSE(score, want, 6, 1e-7, 1e-7);
        for (int o = 0; o < 6; o++)
            assert_true(spread[o] <= 1e-7f);
    }
}

/* dynamic and longrope see the largest position the analysis uses:
 * max(base_position, positions) + max(offsets). */
static void test_max_position_is_largest_used(void **state)
{
    (void)state;
    const int32_t offsets[] = {0, 5};
    const int32_t short_pos[] = {0, 20}, long_pos[] = {0, 95};
    float q[16], k[16], s1[2], s2[2], sp[2];
    tu_rng rng;
    tu_rng_seed(&rng, 5);
    tu_fill(&rng, q, 16, -1.0, 1.0);
    tu_fill(&rng, k, 16, -1.0, 1.0);
    pa_rope r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 16);
    r.original_max_position = 100;
    /* Largest used 25: short factors. */
    TU_ASSERT_STATUS(
        pa_analyze_rope_offset(&r, 16, q, k, offsets, 2, 10, short_pos, 2, s1, sp, NULL),
        PA_STATUS_OK, NULL);
    /* Largest used 95 + 5 = 100, and 100 + 1 > 100: long factors. */
    TU_ASSERT_STATUS(
        pa_analyze_rope_offset(&r, 16, q, k, offsets, 2, 10, long_pos, 2, s2, sp, NULL),
        PA_STATUS_OK, NULL);
    double w1[2], w2[2];
    for (int o = 0; o < 2; o++) {
        w1[o] = ref_score(&r, 16, 25, q, k, 10 + offsets[o], 10);
        w2[o] = ref_score(&r, 16, 100, q, k, 10 + offsets[o], 10);
    }
    TU_ASSERT_CLOSE(s1, w1, 2, 1e-6, 1e-6);
    TU_ASSERT_CLOSE(s2, w2, 2, 1e-6, 1e-6);
    assert_true(fabs(w1[1] - w2[1]) > 1e-3); /* the switch is visible */

    /* The same through base_position alone: 95 + 5 with no positions. */
    TU_ASSERT_STATUS(pa_analyze_rope_offset(&r, 16, q, k, offsets, 2, 95, NULL, 0, s2, sp, NULL),
                     PA_STATUS_OK, NULL);
    for (int o = 0; o < 2; o++)
        w2[o] = ref_score(&r, 16, 100, q, k, 95 + offsets[o], 95);
    TU_ASSERT_CLOSE(s2, w2, 2, 1e-6, 1e-6);
}

static void test_empty_inputs(void **state)
{
    (void)state;
    const int32_t offsets[] = {0, 4};
    float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, k[8] = {1, 0, 0, 1, 0, 1, 1, 0};
    float score[2] = {-1, -1}, spread[2] = {-1, -1};
    pa_rope r = rope_defaults();
    /* No positions: spread 0 by definition, score still computed. */
    TU_ASSERT_STATUS(
        pa_analyze_rope_offset(&r, 8, q, k, offsets, 2, 0, NULL, 0, score, spread, NULL),
        PA_STATUS_OK, NULL);
    assert_true(spread[0] == 0.0f && spread[1] == 0.0f);
    double want = 0.0;
    for (int i = 0; i < 8; i++)
        want += (double)q[i] * k[i];
    TU_ASSERT_CLOSE(score, &want, 1, 1e-6, 1e-6);
    /* No offsets: nothing written, NULL outputs allowed. */
    score[0] = -1.0f;
    TU_ASSERT_STATUS(pa_analyze_rope_offset(&r, 8, q, k, NULL, 0, 0, offsets, 2, NULL, NULL, NULL),
                     PA_STATUS_OK, NULL);
}

static void expect_error(pa_status st, const pa_error *err, pa_status want, const char *field,
                         const float *score, const float *spread, int line)
{
    if (st != want || strcmp(err->field, field) != 0) {
        print_error("line %d: got %s '%s' (%s), want %s '%s'\n", line, pa_status_name(st),
                    err->field, err->message, pa_status_name(want), field);
        fail();
    }
    assert_true(strlen(err->message) > 0);
    for (int i = 0; i < 3; i++)
        assert_true(score[i] == -1.0f && spread[i] == -1.0f);
}

#define CALL(r, D, offs, no, base, pos, np)                                                        \
    pa_analyze_rope_offset((r), (D), q, k, (offs), (no), (base), (pos), (np), score, spread, &err)
#define EXPECT(st, want, field) expect_error((st), &err, (want), (field), score, spread, __LINE__)

static void test_errors(void **state)
{
    (void)state;
    static float q[2048], k[2048];
    float score[3] = {-1, -1, -1}, spread[3] = {-1, -1, -1};
    const int32_t offs[3] = {0, -20, 5};
    const int32_t pos[3] = {30, 40, 50};
    pa_error err;
    pa_rope r = rope_defaults();

    TU_ASSERT_STATUS(CALL(&r, 64, offs, 3, 20, pos, 3), PA_STATUS_OK, &err);
    for (int i = 0; i < 3; i++)
        score[i] = spread[i] = -1.0f;

    pa_rope bad = r;
    bad.rotary_dim = 65;
    EXPECT(CALL(&bad, 64, offs, 3, 20, pos, 3), PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim");
    bad = rope_config(PA_ROPE_SCALING_YARN, 0, 64);
    bad.factor = 0.0;
    EXPECT(CALL(&bad, 64, offs, 3, 20, pos, 3), PA_STATUS_INVALID_ARGUMENT, "scheme.factor");
    EXPECT(CALL(&r, 2048, offs, 3, 20, pos, 3), PA_STATUS_TOO_LARGE, "head_dim");
    EXPECT(CALL(&r, 0, offs, 3, 20, pos, 3), PA_STATUS_OUT_OF_RANGE, "head_dim");
    EXPECT(pa_analyze_rope_offset(&r, 64, NULL, k, offs, 3, 20, pos, 3, score, spread, &err),
           PA_STATUS_INVALID_ARGUMENT, "q");
    EXPECT(pa_analyze_rope_offset(&r, 64, q, NULL, offs, 3, 20, pos, 3, score, spread, &err),
           PA_STATUS_INVALID_ARGUMENT, "k");
    EXPECT(CALL(&r, 64, offs, -1, 20, pos, 3), PA_STATUS_OUT_OF_RANGE, "offsets");
    EXPECT(CALL(&r, 64, offs, 3, 20, pos, -1), PA_STATUS_OUT_OF_RANGE, "positions");
    EXPECT(CALL(&r, 64, NULL, 3, 20, pos, 3), PA_STATUS_INVALID_ARGUMENT, "offsets");
    EXPECT(CALL(&r, 64, offs, 3, 20, NULL, 3), PA_STATUS_INVALID_ARGUMENT, "positions");
    EXPECT(pa_analyze_rope_offset(&r, 64, q, k, offs, 3, 20, pos, 3, NULL, spread, &err),
           PA_STATUS_INVALID_ARGUMENT, "score");
    EXPECT(pa_analyze_rope_offset(&r, 64, q, k, offs, 3, 20, pos, 3, score, NULL, &err),
           PA_STATUS_INVALID_ARGUMENT, "spread");
    EXPECT(CALL(&r, 64, offs, 3, -1, pos, 3), PA_STATUS_OUT_OF_RANGE, "base_position");
    /* base_position + offsets[1] = 19 - 20 < 0. */
    EXPECT(CALL(&r, 64, offs, 3, 19, pos, 3), PA_STATUS_OUT_OF_RANGE, "offsets[1]");
    assert_non_null(strstr(err.message, "base_position=19"));
    /* positions[0] + offsets[1] = 15 - 20 < 0. */
    const int32_t low_pos[3] = {30, 15, 50};
    EXPECT(CALL(&r, 64, offs, 3, 20, low_pos, 3), PA_STATUS_OUT_OF_RANGE, "offsets[1]");
    assert_non_null(strstr(err.message, "positions[1]=15"));
    const int32_t neg_pos[3] = {30, 40, -3};
    EXPECT(CALL(&r, 64, offs, 3, 20, neg_pos, 3), PA_STATUS_OUT_OF_RANGE, "positions[2]");
    /* Past INT32_MAX. */
    EXPECT(CALL(&r, 64, offs, 3, INT32_MAX - 2, pos, 3), PA_STATUS_OUT_OF_RANGE, "offsets[2]");
    const int32_t big_pos[3] = {30, INT32_MAX - 1, 50};
    EXPECT(CALL(&r, 64, offs, 3, 20, big_pos, 3), PA_STATUS_OUT_OF_RANGE, "offsets[2]");
    /* A NULL err is fine. */
    assert_int_equal(pa_analyze_rope_offset(&r, 64, q, k, offs, 3, -1, pos, 3, score, spread, NULL),
                     PA_STATUS_OUT_OF_RANGE);
}

/* Finite q and k whose rotated dot product leaves float32. */
static void test_score_overflow(void **state)
{
    (void)state;
    float q[4], k[4], score[2], spread[2];
    const int32_t offs[2] = {0, 3};
    const int32_t pos[2] = {4, 9};
    pa_error err;
    pa_rope r = rope_defaults();
    for (int i = 0; i < 4; i++)
        q[i] = k[i] = 9.0e18f; /* at offset 0: 4 * 8.1e37 = 3.24e38, finite */
    TU_ASSERT_STATUS(pa_analyze_rope_offset(&r, 4, q, k, offs, 2, 10, pos, 2, score, spread, &err),
                     PA_STATUS_OK, &err);
    assert_true(isfinite(score[0]) && score[0] > 3.0e38f);
    for (int i = 0; i < 4; i++)
        q[i] = k[i] = 1.0e19f; /* 4e38 */
    TU_ASSERT_STATUS(pa_analyze_rope_offset(&r, 4, q, k, offs, 2, 10, pos, 2, score, spread, &err),
                     PA_STATUS_OUT_OF_RANGE, &err);
    assert_string_equal(err.field, "score[0]");
}

/* xPos: the score against torchscale's transliteration (tests/ref_xpos.c:
 * q scaled up at m, k down at n, about centre 0), both layouts and scale
 * bases; the spread over positions is float rounding of the score. */
static void test_xpos_vs_reference(void **state)
{
    (void)state;
    const int32_t offsets[] = {-300, -5, 0, 1, 17, 300, 2000};
    const int32_t positions[] = {300, 310, 900, 2047, 5000};
    enum { NO = sizeof offsets / sizeof offsets[0], NP = sizeof positions / sizeof positions[0] };
    const int32_t base = 1000;
    const double scale_bases[] = {512.0, 64.0};
    const int32_t dims[] = {64, 8, 128};
    tu_rng rng;
    tu_rng_seed(&rng, 5);
    for (int layout = 0; layout < 2; layout++) {
        for (int sb = 0; sb < 2; sb++) {
            for (int d = 0; d < 3; d++) {
                const int32_t D = dims[d];
                pa_scheme s;
                pa_scheme_init(&s, PA_SCHEME_XPOS);
                s.xpos.layout = (pa_rope_layout)layout;
                s.xpos.scale_base = scale_bases[sb];
                float q[128], k[128], score[NO], spread[NO];
                double qv[128], kv[128], want[NO], tol[NO];
                pa_error err;
                tu_fill(&rng, q, (size_t)D, -1.0, 1.0);
                tu_fill(&rng, k, (size_t)D, -1.0, 1.0);
                TU_ASSERT_STATUS(pa_analyze_xpos_offset(&s.xpos, D, q, k, offsets, NO, base,
                                                        positions, NP, score, spread, &err),
                                 PA_STATUS_OK, &err);
                for (int o = 0; o < NO; o++) {
                    double aq = 0.0, ak = 0.0;
                    want[o] = 0.0;
                    for (int i = 0; i < D; i++) {
                        qv[i] = q[i];
                        kv[i] = k[i];
                    }
                    ref_xpos_apply(&s.xpos, D, base + offsets[o], 0, 0, qv);
                    ref_xpos_apply(&s.xpos, D, base, 0, 1, kv);
                    for (int i = 0; i < D; i++) {
                        want[o] += qv[i] * kv[i];
                        aq += qv[i] * qv[i];
                        ak += kv[i] * kv[i];
                    }
                    /* Float rounding of a dot product of these vectors. */
                    tol[o] = 1e-6 * sqrt(aq * ak);
                    if (!(spread[o] >= 0.0f && spread[o] <= tol[o])) {
                        print_error("xpos layout %d sb %g D %d offset %d: spread %g (tol %g)\n",
                                    layout, s.xpos.scale_base, D, offsets[o], (double)spread[o],
                                    tol[o]);
                        fail();
                    }
                    if (fabs(score[o] - want[o]) > tol[o] + 1e-6 * fabs(want[o])) {
                        print_error("xpos layout %d sb %g D %d offset %d: score %.9g, want %.9g\n",
                                    layout, s.xpos.scale_base, D, offsets[o], (double)score[o],
                                    want[o]);
                        fail();
                    }
                }
            }
        }
    }
}

/* Positions near 2^31, where zeta^(p / scale_base) alone is far past
 * double: the score is the one at small positions, and finite. */
static void test_xpos_large_positions(void **state)
{
    (void)state;
    const int32_t offsets[] = {-64, 0, 64};
    const int32_t far[] = {INT32_MAX - 64, INT32_MAX - 1000};
    float q[64], k[64], near_score[3], far_score[3], spread[3];
    pa_error err;
    pa_scheme s;
    tu_rng rng;
    pa_scheme_init(&s, PA_SCHEME_XPOS);
    tu_rng_seed(&rng, 9);
    tu_fill(&rng, q, 64, -1.0, 1.0);
    tu_fill(&rng, k, 64, -1.0, 1.0);
    TU_ASSERT_STATUS(pa_analyze_xpos_offset(&s.xpos, 64, q, k, offsets, 3, 64, NULL, 0, near_score,
                                            spread, &err),
                     PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa_analyze_xpos_offset(&s.xpos, 64, q, k, offsets, 3, INT32_MAX - 64, far, 2,
                                            far_score, spread, &err),
                     PA_STATUS_OK, &err);
    for (int o = 0; o < 3; o++) {
        assert_true(isfinite(far_score[o]));
        /* cos(p theta) at p ~ 2^31 carries ~2^31 * 2^-53 of angle error. */
        assert_true(fabsf(far_score[o] - near_score[o]) <= 1e-5f * (1.0f + fabsf(near_score[o])));
        assert_true(spread[o] <= 1e-5f * (1.0f + fabsf(near_score[o])));
    }
    /* Offsets change the decay: a longer reach scores differently. */
    assert_true(fabsf(near_score[0] - near_score[2]) > 1e-3f);
    TU_ASSERT_STATUS(
        pa_analyze_xpos_offset(&s.xpos, 7, q, k, offsets, 3, 64, NULL, 0, near_score, spread, &err),
        PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "head_dim");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spread_and_score_vs_reference),
        cmocka_unit_test(test_score_overflow),
        cmocka_unit_test(test_offset_zero_is_dot),
        cmocka_unit_test(test_score_known_values),
        cmocka_unit_test(test_max_position_is_largest_used),
        cmocka_unit_test(test_empty_inputs),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_xpos_vs_reference),
        cmocka_unit_test(test_xpos_large_positions),
    };
    return cmocka_run_group_tests_name("rope_offset", tests, setup, NULL);
}
