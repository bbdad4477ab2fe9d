/* test_rope_gemma4_hunyuan.c - lib/rope.c's two scalings of issue #31:
 * "proportional" (Gemma 4's global layers, transformers'
 * _compute_proportional_rope_parameters) and "ntk_alpha" (Hunyuan, vLLM's
 * DynamicNTKAlphaRotaryEmbedding). Known values written from the formulas,
 * the checks and their messages, which dims rotate in each layout, and
 * attention through the rope path (GQA, explicit positions, k_prerotated)
 * against the double-precision reference (tests/ref_rope.c,
 * tests/ref_attention.c). Each known-value case is chosen so that a plausible
 * mistake (denominator p*r instead of r, zeros at the wrong pairs, exponent
 * r/(r-1), head dim instead of rotary dim) changes the answer.
 */
#include "attention_fixture.h"
#include "ref_rope.h"
#include "rope_configs.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void expect_error(const pa_rope *r, int32_t hd, pa_status st, const char *field,
                         const char *msg, int line)
{
    pa_error err;
    double inv[256];
    memset(&err, 0, sizeof err);
    inv[0] = -7.0;
    if (pa_rope_inv_freq(r, hd, 0, inv, NULL, &err) != st || strcmp(err.field, field) != 0 ||
        (msg != NULL && strcmp(err.message, msg) != 0) || inv[0] != -7.0) {
        print_error("line %d: want %s on %s ('%s'), got %s on %s: %s\n", line,
                    pa_status_name(st), field, msg ? msg : "", pa_status_name(err.status),
                    err.field, err.message);
        fail();
    }
}
#define EXPECT_ERROR(r, hd, st, field, msg) expect_error((r), (hd), (st), (field), (msg), __LINE__)

static pa_rope proportional(double p, double factor)
{
    pa_rope r = rope_defaults();
    r.scaling = PA_ROPE_SCALING_PROPORTIONAL;
    r.partial_rotary_factor = p;
    r.factor = factor;
    return r;
}

static pa_rope ntk_alpha(double alpha)
{
    pa_rope r = rope_defaults();
    r.scaling = PA_ROPE_SCALING_NTK_ALPHA;
    r.alpha = alpha;
    return r;
}

/* ------------------------------------------------------------------------- */
/* proportional                                                              */
/* ------------------------------------------------------------------------- */

static void test_proportional_known_values(void **state)
{
    (void)state;
    double inv[256], af = -1.0;
    pa_error err;

    /* D = 16, p = 0.5: k = 4 pairs keep 10000^(-2i/16), 4 are zero. Partial
     * rotary (r = 8) would give 10000^(-2i/8): inv[1] 0.1 instead of 10^-0.5. */
    pa_rope r = proportional(0.5, 0.0);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 16, 0, inv, &af, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 4; i++)
        assert_true(fabs(inv[i] - pow(10.0, -0.5 * i)) <= 1e-15);
    assert_true(fabs(inv[1] - 0.31622776601683794) <= 1e-15);
    for (int i = 4; i < 8; i++)
        assert_true(inv[i] == 0.0);
    assert_true(af == 1.0);

    /* factor divides every frequency (zeros stay zero). */
    r.factor = 4.0;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 16, 0, inv, &af, &err), PA_STATUS_OK, &err);
    assert_true(inv[0] == 0.25 && fabs(inv[2] - 0.025) <= 1e-17 && inv[7] == 0.0);

    /* Gemma 4's global layer: head 512, theta 1e6, p = 0.25: 64 of 256 pairs. */
    r = proportional(0.25, 0.0);
    r.base = 1e6;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 512, 0, inv, &af, &err), PA_STATUS_OK, &err);
    assert_true(inv[63] > 0.0 && inv[64] == 0.0 && inv[255] == 0.0);
    assert_true(fabs(inv[63] - pow(1e6, -126.0 / 512.0)) <= 1e-15 * inv[63]);

    /* k = int(p * D // 2): the product floored. 0.3 * 10 = 3.0000000000000004
     * -> 1 pair; 0.7 * 10 = 7.000000000000001 -> 3 pairs. */
    r = proportional(0.3, 0.0);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 10, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    assert_true(inv[0] == 1.0 && inv[1] == 0.0);
    r.partial_rotary_factor = 0.7;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 10, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    assert_true(inv[2] > 0.0 && inv[3] == 0.0 && inv[4] == 0.0);

    /* p = 1 is plain rope divided by factor (HF's linear). */
    r = proportional(1.0, 2.0);
    pa_rope lin = rope_config(PA_ROPE_SCALING_LINEAR, 0, 64);
    double want[32];
    lin.factor = 2.0;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&lin, 64, 0, want, NULL, &err), PA_STATUS_OK, &err);
    assert_memory_equal(inv, want, 32 * sizeof(double));

    /* With rotary_dim set, r takes the place of HF's head_dim. */
    r = proportional(0.5, 0.0);
    r.rotary_dim = 8;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 16, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    assert_true(fabs(inv[1] - 0.1) <= 1e-16 && inv[2] == 0.0 && inv[3] == 0.0);
}

/* Which dims a proportional rope rotates: neox pairs (i, i + D/2), so the
 * zero pairs leave [k, D/2) and [D/2 + k, D) unchanged; gptj leaves [2k, D). */
static void test_proportional_which_dims_rotate(void **state)
{
    (void)state;
    enum { D = 16 };
    const int32_t pos[1] = {5};
    float x[D], y[D], c[D / 2], s[D / 2];
    pa_error err;
    for (int d = 0; d < D; d++)
        x[d] = 0.25f + 0.125f * (float)d;
    for (int layout = 0; layout < 2; layout++) {
        pa_rope r = proportional(0.5, 0.0); /* k = 4 */
        r.layout = (pa_rope_layout)layout;
        TU_ASSERT_STATUS(pa_rope_cos_sin(&r, D, pos, 1, 5, c, s, &err), PA_STATUS_OK, &err);
        for (int i = 4; i < D / 2; i++)
            assert_true(c[i] == 1.0f && s[i] == 0.0f);
        pa_rope_apply(&r, D, 1, 1, c, s, x, y);
        for (int d = 0; d < D; d++) {
            bool rotates = layout == PA_ROPE_LAYOUT_NEOX ? (d % (D / 2)) < 4 : d < 8;
            if (rotates)
                assert_true(y[d] != x[d]);
            else
                assert_true(y[d] == x[d]);
        }
        /* and the reference agrees to float precision */
        double inv[D / 2], af, xd[D], want[D];
        for (int d = 0; d < D; d++)
            xd[d] = x[d];
        ref_rope_inv_freq(&r, D, 5, inv, &af);
        ref_rope_rotate(&r, D, inv, af, 5, xd, want);
        for (int d = 0; d < D; d++)
            assert_true(fabs(y[d] - want[d]) <= 1e-6);
    }
}

static void test_proportional_errors(void **state)
{
    (void)state;
    pa_rope r = proportional(0.0, 0.0);
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.partial_rotary_factor",
                 "scheme.partial_rotary_factor=0 must be in (0, 1] for rope scaling "
                 "'proportional' (the share of frequency pairs that rotate)");
    r.partial_rotary_factor = 1.5;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.partial_rotary_factor", NULL);
    r.partial_rotary_factor = -0.25;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.partial_rotary_factor", NULL);
    r.partial_rotary_factor = NAN;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.partial_rotary_factor",
                 "scheme.partial_rotary_factor=nan must be finite");
    r = proportional(0.25, -2.0);
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.factor", NULL);
    r.factor = INFINITY;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.factor", NULL);
    /* a share of 2 pairs rounds to none: allowed, every pair is zero */
    r = proportional(0.25, 0.0);
    double inv[1];
    pa_error err;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 2, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    assert_true(inv[0] == 0.0);
}

/* ------------------------------------------------------------------------- */
/* ntk_alpha                                                                 */
/* ------------------------------------------------------------------------- */

static void test_ntk_alpha_known_values(void **state)
{
    (void)state;
    double inv[64], af = -1.0;
    pa_error err;

    /* r = 8, alpha = 1000: base' = 1e4 * 1000^(8/6) = 1e8, inv[i] = 1e8^(-i/4)
     * = 10^(-2i). r/(r-1) would give 1000^(8/7) and inv[1] 0.0139. */
    pa_rope r = ntk_alpha(1000.0);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 8, 123, inv, &af, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 4; i++)
        assert_true(fabs(inv[i] - pow(10.0, -2.0 * i)) <= 1e-12 * pow(10.0, -2.0 * i));
    assert_true(af == 1.0);

    /* The exponent and the denominator are the rotary dim, not the head:
     * head 16, rotary 8 gives the same numbers. */
    r.rotary_dim = 8;
    double same[4];
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 16, 123, same, NULL, &err), PA_STATUS_OK, &err);
    assert_memory_equal(inv, same, 4 * sizeof(double));

    /* r = 4, alpha = 2: base' = 4e4, inv[1] = 0.005. Independent of position. */
    r = ntk_alpha(2.0);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 4, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    assert_true(inv[0] == 1.0 && fabs(inv[1] - 0.005) <= 1e-17);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 4, 1000000, same, NULL, &err), PA_STATUS_OK, &err);
    assert_memory_equal(inv, same, 2 * sizeof(double));

    /* alpha = 1 is plain rope. */
    r = ntk_alpha(1.0);
    pa_rope plain = rope_defaults();
    double want[64];
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&plain, 128, 0, want, NULL, &err), PA_STATUS_OK, &err);
    assert_memory_equal(inv, want, 64 * sizeof(double));
}

static void test_ntk_alpha_errors(void **state)
{
    (void)state;
    pa_rope r = ntk_alpha(0.0);
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.alpha",
                 "scheme.alpha is required for rope scaling 'ntk_alpha'");
    r.alpha = -2.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.alpha", "scheme.alpha=-2 must be > 0");
    r.alpha = NAN;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.alpha", NULL);
    r.alpha = 4.0;
    r.rotary_dim = 2;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.rotary_dim",
                 "rope scaling 'ntk_alpha' needs a rotary dim > 2 (exponent r/(r-2)), got 2");
    /* r = 4: base * alpha^2 overflows, or falls to 1 and below. */
    r = ntk_alpha(1e300);
    EXPECT_ERROR(&r, 4, PA_STATUS_OUT_OF_RANGE, "scheme.alpha",
                 "scheme.alpha=1e+300 makes the base scheme.base * alpha^(r/(r-2)) = inf (r=4); "
                 "it must be finite and > 1");
    r.alpha = 0.01;
    EXPECT_ERROR(&r, 4, PA_STATUS_OUT_OF_RANGE, "scheme.alpha", NULL);
    r.alpha = 0.5; /* 1e4 / 4: a smaller base is still a base */
    assert_int_equal(pa_rope_check(&r, 4, NULL), PA_STATUS_OK);
}

/* ------------------------------------------------------------------------- */
/* Attention through the rope path                                           */
/* ------------------------------------------------------------------------- */

static void set_scaling(fixture *f, pa_rope_scaling sc, int layout)
{
    pa_rope *r = &f->scheme.rope;
    r->scaling = sc;
    r->layout = (pa_rope_layout)layout;
    r->partial_rotary_factor = 0.25;
    r->alpha = 1000.0;
    r->base = sc == PA_ROPE_SCALING_PROPORTIONAL ? 1e6 : 10000.0;
}

/* GQA (8 query heads on 2), explicit positions with gaps and repeats, both
 * layouts: output, logits and the rotated q and k against the reference. */
static void test_attention_vs_reference(void **state)
{
    (void)state;
    const pa_rope_scaling sc[2] = {PA_ROPE_SCALING_PROPORTIONAL, PA_ROPE_SCALING_NTK_ALPHA};
    int32_t qpos[3] = {900, 4, 4000}, kpos[7] = {0, 3, 3, 77, 2500, 4000, 12};
    for (int s = 0; s < 2; s++) {
        for (int layout = 0; layout < 2; layout++) {
            fixture f;
            setup_qkv(&f, PA_SCHEME_ROPE, 3, 7, 8, 2, 16, 0, 3100 + 10 * s + layout);
            set_scaling(&f, sc[s], layout);
            f.a.q_positions = qpos;
            f.a.k_positions = kpos;
            check_against_reference(&f.a, WANT_ROT | WANT_LOGITS | WANT_WEIGHTS);
            f.a.causal = true;
            check_against_reference(&f.a, WANT_LOGITS);
            fixture_free(&f);
        }
    }
}

static float *run(const pa_attention *a, float *k_rot)
{
    pa_error err;
    size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz ? wsz : 1, 1);
    size_t n = (size_t)pa_attention_q_len(a) * (size_t)a->num_heads * (size_t)a->head_dim;
    pa_attention_out o;
    memset(&o, 0, sizeof o);
    o.output = tu_alloc(n, sizeof(float));
    o.k_rot = k_rot;
    TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    free(ws);
    return o.output;
}

/* Keys rotated once and sent as a cache give the same answer, bit for bit;
 * the unrotated keys taken as rotated do not (the zero pairs of proportional
 * are not all of them). */
static void test_k_prerotated(void **state)
{
    (void)state;
    const pa_rope_scaling sc[2] = {PA_ROPE_SCALING_PROPORTIONAL, PA_ROPE_SCALING_NTK_ALPHA};
    for (int s = 0; s < 2; s++) {
        for (int layout = 0; layout < 2; layout++) {
            enum { Lq = 2, Lk = 40, H = 4, Hkv = 2, D = 16 };
            fixture f;
            float *krot = tu_alloc((size_t)Lk * Hkv * D, sizeof(float));
            setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, H, Hkv, D, 0, 3200 + 10 * s + layout);
            set_scaling(&f, sc[s], layout);
            f.a.causal = true;
            float *plain = run(&f.a, krot);
            const float *k = f.a.k;
            f.a.k = krot;
            f.a.k_prerotated = true;
            float *pre = run(&f.a, NULL);
            assert_memory_equal(plain, pre, (size_t)Lq * H * D * sizeof(float));
            free(pre);
            f.a.k = k;
            pre = run(&f.a, NULL);
            assert_true(memcmp(plain, pre, (size_t)Lq * H * D * sizeof(float)) != 0);
            free(pre);
            free(plain);
            free(krot);
            fixture_free(&f);
        }
    }
}

/* A proportional rope changes attention (it is not the identity) and differs
 * from partial rotary over the same share of dims. */
static void test_proportional_is_not_partial_rotary(void **state)
{
    (void)state;
    fixture f;
    setup_qkv(&f, PA_SCHEME_ROPE, 4, 9, 2, 2, 16, 0, 3300);
    set_scaling(&f, PA_ROPE_SCALING_PROPORTIONAL, 0);
    f.scheme.rope.partial_rotary_factor = 0.5;
    float *prop = run(&f.a, NULL);
    f.scheme.rope.scaling = PA_ROPE_SCALING_NONE;
    f.scheme.rope.rotary_dim = 8;
    float *partial = run(&f.a, NULL);
    assert_true(memcmp(prop, partial, 4 * 2 * 16 * sizeof(float)) != 0);
    free(prop);
    free(partial);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proportional_known_values),
        cmocka_unit_test(test_proportional_which_dims_rotate),
        cmocka_unit_test(test_proportional_errors),
        cmocka_unit_test(test_ntk_alpha_known_values),
        cmocka_unit_test(test_ntk_alpha_errors),
        cmocka_unit_test(test_attention_vs_reference),
        cmocka_unit_test(test_k_prerotated),
        cmocka_unit_test(test_proportional_is_not_partial_rotary),
    };
    return cmocka_run_group_tests_name("rope_gemma4_hunyuan", tests, rope_configs_setup, NULL);
}
