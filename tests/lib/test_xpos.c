/* test_xpos.c - lib/xpos.c and xpos in attention: the tables against the
 * torchscale transliteration (tests/ref_xpos.c), the checks, attention
 * against the double reference in both kernels (GQA, Lq != Lk with explicit
 * positions, causal, both layouts), positions near 2^31, the centre's
 * refusal, k_prerotated bit for bit, and logits that a wrong exponent sign,
 * 0.5 for 0.4, a scale on q only or the other layout would miss.
 */
#include "attention_fixture.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "ref_xpos.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void xpos_scheme(pa_scheme *s, pa_rope_layout layout, double scale_base)
{
    pa_scheme_init(s, PA_SCHEME_XPOS);
    s->xpos.layout = layout;
    s->xpos.scale_base = scale_base;
}

static void test_defaults_and_zeta(void **state)
{
    (void)state;
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_XPOS);
    assert_true(s.xpos.base == 10000.0 && s.xpos.scale_base == 512.0);
    assert_int_equal(s.xpos.layout, PA_ROPE_LAYOUT_GPTJ);
    assert_string_equal(pa_scheme_type_name(PA_SCHEME_XPOS), "xpos");
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_XPOS), PA_POSITION_SITE_QK_ROTATION);
    double z[4];
    pa_xpos_zeta(8, z);
    /* (2i + 3.2) / 11.2 */
    assert_true(fabs(z[0] - 3.2 / 11.2) < 1e-15 && fabs(z[3] - 9.2 / 11.2) < 1e-15);
}

static void test_tables(void **state)
{
    (void)state;
    const int D = 12, half = D / 2;
    int32_t pos[5] = {0, 1, 7, 513, -300};
    for (int layout = 0; layout < 2; layout++)
        for (int sign = -1; sign <= 1; sign += 2) {
            pa_scheme s;
            xpos_scheme(&s, (pa_rope_layout)layout, 512.0);
            float c[5 * 6], sn[5 * 6], sc[5 * 6];
            TU_ASSERT_STATUS(pa_xpos_cos_sin(&s.xpos, D, pos, 5, 40, sign, c, sn, sc, NULL),
                             PA_STATUS_OK, NULL);
            pa_rope r;
            pa_xpos_rope(&s.xpos, &r);
            for (int t = 0; t < 5; t++) {
                /* A basis vector e_a of pair i rotated by the library and by
                 * the reference. */
                for (int i = 0; i < half; i++) {
                    int a = layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i : i;
                    int b = layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i + 1 : i + half;
                    float x[12] = {0}, y[12];
                    double v[12] = {0};
                    x[a] = 1.0f;
                    v[a] = 1.0;
                    pa_rope_apply(&r, D, 1, 1, c + t * half, sn + t * half, x, y);
                    ref_xpos_apply(&s.xpos, D, pos[t], 40, sign < 0, v);
                    for (int d = 0; d < D; d++)
                        assert_true(fabs(y[d] - v[d]) <= 1e-6 * (1.0 + fabs(v[d])));
                    assert_true(fabs(y[b]) > 0.0 || pos[t] == 0);
                    double zeta = (2.0 * i + 0.4 * D) / (1.4 * D);
                    double want = pow(zeta, sign * (pos[t] - 40) / 512.0);
                    assert_true(fabs(sc[t * half + i] - want) <= 1e-6 * want);
                }
            }
        }
}

static void expect_fail(pa_status st, pa_error *err, const char *field, const char *message)
{
    TU_ASSERT_STATUS(st, PA_STATUS_INVALID_ARGUMENT, err);
    assert_string_equal(err->field, field);
    if (strstr(err->message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err->message, message);
}

/* Runs of consecutive positions, where lib/xpos.c advances the angle and
 * the scale step by step (re-anchored every 32 rows and after a jump):
 * every entry against cos, sin and zeta^(sign (pos - centre) / scale_base)
 * in double, within float's rounding (3e-7 of the scale; the steps' drift
 * is below 1e-14). Runs past two anchors, a jump, negative positions. */
static void test_tables_runs(void **state)
{
    (void)state;
    enum { N = 171, D = 16, HALF = D / 2 };
    int32_t pos[N];
    static float c[N * HALF], sn[N * HALF], sc[N * HALF];
    for (int t = 0; t < N; t++)
        pos[t] = t < 100 ? t : t < 140 ? 900 + t : t - 190;
    for (int sign = -1; sign <= 1; sign += 2) {
        pa_scheme s;
        xpos_scheme(&s, PA_ROPE_LAYOUT_GPTJ, 512.0);
        TU_ASSERT_STATUS(pa_xpos_cos_sin(&s.xpos, D, pos, N, 60, sign, c, sn, sc, NULL),
                         PA_STATUS_OK, NULL);
        for (int t = 0; t < N; t++)
            for (int i = 0; i < HALF; i++) {
                const double freq = 1.0 / pow(s.xpos.base, 2.0 * i / D);
                const double zeta = (2.0 * i + 0.4 * D) / (1.4 * D);
                const double z = pow(zeta, sign * (pos[t] - 60) / 512.0);
                const double wc = cos(pos[t] * freq) * z, ws = sin(pos[t] * freq) * z;
                if (!(fabs(c[t * HALF + i] - wc) <= 3e-7 * z &&
                      fabs(sn[t * HALF + i] - ws) <= 3e-7 * z &&
                      fabs(sc[t * HALF + i] - z) <= 3e-7 * z))
                    fail_msg("sign %d position %d pair %d: cos %.9g sin %.9g scale %.9g, want "
                             "%.9g %.9g %.9g",
                             sign, (int)pos[t], i, (double)c[t * HALF + i],
                             (double)sn[t * HALF + i], (double)sc[t * HALF + i], wc, ws, z);
            }
    }
}

static void test_check(void **state)
{
    (void)state;
    pa_scheme s;
    pa_error err;
    xpos_scheme(&s, PA_ROPE_LAYOUT_GPTJ, 512.0);
    TU_ASSERT_STATUS(pa_xpos_check(&s.xpos, 8, NULL), PA_STATUS_OK, NULL);
    expect_fail(pa_xpos_check(&s.xpos, 7, &err), &err, "head_dim", "head_dim=7 must be even");
    s.xpos.scale_base = 0.0;
    expect_fail(pa_xpos_check(&s.xpos, 8, &err), &err, "scheme.scale_base", "scale_base=0");
    s.xpos.scale_base = 512.0;
    s.xpos.base = -1.0;
    expect_fail(pa_xpos_check(&s.xpos, 8, &err), &err, "scheme.base", "scheme.base=-1");
    s.xpos.base = 10000.0;
    s.xpos.layout = (pa_rope_layout)5;
    expect_fail(pa_xpos_check(&s.xpos, 8, &err), &err, "scheme.layout", "not a rope layout");
    /* Through pa_attention_check: an odd head. */
    fixture f;
    setup_qkv(&f, PA_SCHEME_XPOS, 3, 3, 2, 2, 5, 0, 1);
    expect_fail(pa_attention_check(&f.a, &err), &err, "head_dim", "must be even");
    fixture_free(&f);
}

static void test_attention(void **state)
{
    (void)state;
    static const int shapes[][5] = {
        /* Lq, Lk, H, Hkv, D */
        {1, 1, 4, 4, 8},    {1, 200, 8, 2, 16},  {5, 300, 4, 1, 8},
        {17, 17, 8, 4, 16}, {70, 130, 4, 2, 32}, {3, 9, 2, 2, 6},
    };
    uint64_t seed = 3700;
    for (int layout = 0; layout < 2; layout++)
        for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
            for (int variant = 0; variant < 4; variant++) {
                fixture f;
                const int Lq = shapes[c][0], Lk = shapes[c][1];
                int32_t *qp = NULL, *kp = NULL;
                setup_qkv(&f, PA_SCHEME_XPOS, Lq, Lk, shapes[c][2], shapes[c][3], shapes[c][4], 0,
                          seed++);
                xpos_scheme(&f.scheme, (pa_rope_layout)layout, variant & 2 ? 64.0 : 512.0);
                f.a.causal = variant & 1;
                if (variant & 2) {
                    /* Explicit positions: queries past the keys, out of order. */
                    qp = tu_alloc((size_t)Lq, sizeof *qp);
                    kp = tu_alloc((size_t)Lk, sizeof *kp);
                    for (int i = 0; i < Lq; i++)
                        qp[i] = Lk + 7 - 3 * ((i * 5) % Lq);
                    for (int j = 0; j < Lk; j++)
                        kp[j] = 2 * j;
                    f.a.q_positions = qp;
                    f.a.k_positions = kp;
                }
                check_against_reference(&f.a, 0);
                check_against_reference(&f.a, WANT_ALL | WANT_ROT);
                fixture_free(&f);
                free(qp);
                free(kp);
            }
}

/* Layer mode: q and k projected from the same x, rotated and scaled. */
static void test_layer_mode(void **state)
{
    (void)state;
    for (int causal = 0; causal < 2; causal++) {
        fixture f;
        setup_layer(&f, PA_SCHEME_XPOS, 9, 12, 4, 2, 8, 8, 0, 800 + (uint64_t)causal);
        xpos_scheme(&f.scheme, PA_ROPE_LAYOUT_GPTJ, 16.0);
        f.a.causal = causal;
        check_against_reference(&f.a, WANT_ALL | WANT_ROT);
        fixture_free(&f);
    }
}

static bool all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* Positions near 2^31 (the midpoint centre), a wide but representable
 * span, and a span no centre can hold. */
static void test_huge_positions(void **state)
{
    (void)state;
    const int32_t top = INT32_MAX;
    int32_t qpos[3] = {top, top - 1, top - 9}, kpos[40];
    for (int j = 0; j < 40; j++)
        kpos[j] = top - 39 + j;
    for (int causal = 0; causal < 2; causal++) {
        fixture f;
        setup_qkv(&f, PA_SCHEME_XPOS, 3, 40, 4, 2, 16, 0, 91 + (uint64_t)causal);
        f.a.q_positions = qpos;
        f.a.k_positions = kpos;
        f.a.causal = causal;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS | WANT_ROT | WANT_STATS);
        f.scheme.type = PA_SCHEME_NONE;
        check_against_reference(&f.a, WANT_WEIGHTS);
        f.scheme.type = PA_SCHEME_XPOS;
        float *out, *w = run_weights(&f.a, &out);
        assert_true(all_finite(w, 4 * 3 * 40) && all_finite(out, 3 * 4 * 16));
        free(w);
        free(out);
        fixture_free(&f);
    }
    /* Within +-27000 (scale_base 512) the centre is 0; 0..50000 needs the midpoint. */
    {
        int32_t q2[2] = {20000, 1000}, k2[3] = {-20000, 0, 20000};
        int64_t c;
        pa_scheme s;
        xpos_scheme(&s, PA_ROPE_LAYOUT_GPTJ, 512.0);
        TU_ASSERT_STATUS(pa_xpos_centre(&s.xpos, q2, 2, k2, 3, false, &c, NULL), PA_STATUS_OK,
                         NULL);
        assert_true(c == 0);
        k2[0] = 5000;
        q2[0] = 50000;
        TU_ASSERT_STATUS(pa_xpos_centre(&s.xpos, q2, 2, k2, 3, false, &c, NULL), PA_STATUS_OK,
                         NULL);
        assert_true(c == 25000);
        assert_int_equal(ref_xpos_centre(&s.xpos, q2, 2, k2, 3), 25000);
        fixture f;
        setup_qkv(&f, PA_SCHEME_XPOS, 2, 3, 2, 2, 8, 0, 5);
        f.a.q_positions = q2;
        f.a.k_positions = k2;
        check_against_reference(&f.a, WANT_ALL | WANT_ROT);
        fixture_free(&f);
    }
    {
        int32_t q3[1] = {top}, k3[2] = {0, top};
        pa_error err;
        fixture f;
        setup_qkv(&f, PA_SCHEME_XPOS, 1, 2, 2, 2, 8, 0, 6);
        f.a.q_positions = q3;
        f.a.k_positions = k3;
        size_t wsz = pa_attention_workspace_size(&f.a);
        void *ws = tu_alloc(wsz, 1);
        pa_attention_out o;
        memset(&o, 0, sizeof o);
        o.output = tu_alloc(2 * 8, sizeof(float));
        expect_fail(pa_attention_run(&f.a, &o, ws, wsz, &err), &err, "q_positions",
                    "the span must be at most");
        free(o.output);
        free(ws);
        fixture_free(&f);
    }
}

/* k_rot of a call is a KV cache: sent back with k_prerotated the answer is
 * the same bit for bit; keys that cannot be scaled about 0 are refused. */
static void test_prerotated(void **state)
{
    (void)state;
    for (int c = 0; c < 2; c++) {
        const int Lq = c ? 1 : 6, Lk = 50, H = 4, Hkv = 2, D = 16;
        fixture f;
        pa_error err;
        int32_t qp[6], kp[50];
        for (int i = 0; i < Lq; i++)
            qp[i] = 1000 + 50 - Lq + i;
        for (int j = 0; j < Lk; j++)
            kp[j] = 1000 + j;
        setup_qkv(&f, PA_SCHEME_XPOS, Lq, Lk, H, Hkv, D, 0, 400 + (uint64_t)c);
        f.a.q_positions = qp;
        f.a.k_positions = kp;
        f.a.causal = true;
        size_t wsz = pa_attention_workspace_size(&f.a);
        void *ws = tu_alloc(wsz, 1);
        pa_attention_out o1, o2;
        memset(&o1, 0, sizeof o1);
        memset(&o2, 0, sizeof o2);
        o1.output = tu_alloc((size_t)Lq * H * D, sizeof(float));
        o1.logits = tu_alloc((size_t)H * Lq * Lk, sizeof(float));
        o1.k_rot = tu_alloc((size_t)Lk * Hkv * D, sizeof(float));
        o2.output = tu_alloc((size_t)Lq * H * D, sizeof(float));
        o2.logits = tu_alloc((size_t)H * Lq * Lk, sizeof(float));
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &o1, ws, wsz, &err), PA_STATUS_OK, &err);
        f.a.k = o1.k_rot;
        f.a.k_prerotated = true;
        free(ws);
        wsz = pa_attention_workspace_size(&f.a);
        ws = tu_alloc(wsz, 1);
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &o2, ws, wsz, &err), PA_STATUS_OK, &err);
        assert_memory_equal(o1.output, o2.output, (size_t)Lq * H * D * sizeof(float));
        assert_memory_equal(o1.logits, o2.logits, (size_t)H * Lq * Lk * sizeof(float));
        check_against_reference(&f.a, WANT_LOGITS);
        /* Past +-27200 at scale_base 512 the keys cannot be scaled about 0. */
        kp[0] = 40000;
        expect_fail(pa_attention_run(&f.a, &o2, ws, wsz, &err), &err, "k_prerotated",
                    "scaled about position 0");
        free(ws);
        free(o1.output);
        free(o1.logits);
        free(o1.k_rot);
        free(o2.output);
        free(o2.logits);
        fixture_free(&f);
    }
}

enum { MUT_NONE, MUT_SIGN, MUT_HALF, MUT_Q_ONLY, MUT_LAYOUT };

/* One logit q.k / sqrt(D) from a formula with a deliberate change. */
static double mutant_logit(const float *q, const float *k, int D, int m, int n, int mut)
{
    double acc = 0.0;
    int half = D / 2;
    for (int i = 0; i < half; i++) {
        double g = mut == MUT_HALF ? 0.5 : 0.4;
        double zeta = (2.0 * i + g * D) / ((1.0 + g) * D);
        double th = 1.0 / pow(10000.0, (double)i / half);
        bool gptj = mut != MUT_LAYOUT;
        int a = gptj ? 2 * i : i, b = gptj ? 2 * i + 1 : i + half;
        double qs = pow(zeta, m / 64.0), ks = pow(zeta, -n / 64.0);
        if (mut == MUT_SIGN) {
            qs = 1.0 / qs;
            ks = 1.0 / ks;
        }
        if (mut == MUT_Q_ONLY)
            ks = 1.0;
        double qa = (q[a] * cos(m * th) - q[b] * sin(m * th)) * qs;
        double qb = (q[b] * cos(m * th) + q[a] * sin(m * th)) * qs;
        double ka = (k[a] * cos(n * th) - k[b] * sin(n * th)) * ks;
        double kb = (k[b] * cos(n * th) + k[a] * sin(n * th)) * ks;
        acc += qa * ka + qb * kb;
    }
    return acc / sqrt((double)D);
}

static void test_mutations(void **state)
{
    (void)state;
    const int D = 8, Lq = 3, Lk = 5;
    int32_t qp[3] = {100, 150, 200}, kp[5] = {0, 30, 90, 140, 200};
    fixture f;
    setup_qkv(&f, PA_SCHEME_XPOS, Lq, Lk, 1, 1, D, 0, 4242);
    xpos_scheme(&f.scheme, PA_ROPE_LAYOUT_GPTJ, 64.0);
    f.a.q_positions = qp;
    f.a.k_positions = kp;
    size_t wsz = pa_attention_workspace_size(&f.a);
    void *ws = tu_alloc(wsz, 1);
    pa_attention_out o;
    pa_error err;
    memset(&o, 0, sizeof o);
    o.output = tu_alloc((size_t)Lq * D, sizeof(float));
    o.logits = tu_alloc((size_t)Lq * Lk, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    for (int mut = MUT_NONE; mut <= MUT_LAYOUT; mut++) {
        double worst = 0.0;
        for (int i = 0; i < Lq; i++)
            for (int j = 0; j < Lk; j++) {
                double want = mutant_logit(f.q + i * D, f.k + j * D, D, qp[i], kp[j], mut);
                double got = o.logits[i * Lk + j];
                worst = fmax(worst, fabs(got - want) / (1e-3 + fabs(want)));
            }
        if (mut == MUT_NONE)
            assert_true(worst < 1e-4);
        else if (!(worst > 1e-2))
            fail_msg("mutation %d is not seen: worst relative difference %g", mut, worst);
    }
    free(o.output);
    free(o.logits);
    free(ws);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_zeta), cmocka_unit_test(test_tables),
        cmocka_unit_test(test_tables_runs),       cmocka_unit_test(test_check),
        cmocka_unit_test(test_attention),         cmocka_unit_test(test_huge_positions),
        cmocka_unit_test(test_prerotated),        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_layer_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
