/* test_fire.c - lib/fire.c and FIRE in attention: the bias against the
 * double reference transliterated from mcleish7/arithmetic's FIRE
 * (tests/ref_encodings.c), the checks and their messages, and attention
 * against the double reference in both kernels (GQA, Lq != Lk with explicit
 * positions, positions near 2^31, several hidden sizes). Parameters are
 * chosen so that each part of the formula (psi's abs, the normaliser's
 * max(i, |L|), eps, the ReLU, w2's layout) moves the numbers past the
 * tolerance if it were wrong. */
#include "attention_fixture.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "ref_encodings.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An MLP with random weights, owned by the test. */
typedef struct mlp {
    float *w1, *b1, *w2, *b2;
    int hidden, H;
} mlp;

static void mlp_init(mlp *m, int hidden, int H, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    m->hidden = hidden;
    m->H = H;
    /* Breakpoints -b1/w1 spread over [0, ~2], where x lives. */
    m->w1 = rand_tensor(&r, (size_t)hidden, -3.0, 3.0);
    m->b1 = rand_tensor(&r, (size_t)hidden, -2.0, 2.0);
    m->w2 = rand_tensor(&r, (size_t)hidden * H, -1.0, 1.0);
    m->b2 = rand_tensor(&r, (size_t)H, -1.0, 1.0);
    if (hidden > 3) {
        m->w1[1] = 0.0f; /* a constant unit: relu(b1) */
        m->b1[1] = 0.75f;
        m->w1[2] = 0.0f; /* one that is always off */
        m->b1[2] = -0.5f;
        m->w1[3] = 2.0f * m->w1[0]; /* the same breakpoint as unit 0 */
        m->b1[3] = 2.0f * m->b1[0];
    }
}

static void mlp_free(mlp *m)
{
    free(m->w1);
    free(m->b1);
    free(m->w2);
    free(m->b2);
}

static void fire_scheme(pa_scheme *s, const mlp *m)
{
    pa_scheme_init(s, PA_SCHEME_FIRE);
    s->fire.w1 = m->w1;
    s->fire.num_w1 = m->hidden;
    s->fire.b1 = m->b1;
    s->fire.num_b1 = m->hidden;
    s->fire.w2 = m->w2;
    s->fire.num_w2 = m->hidden * m->H;
    s->fire.b2 = m->b2;
    s->fire.num_b2 = m->H;
}

static double want_bias(const pa_fire *f, int H, int h, int64_t i, int64_t j)
{
    return ref_fire(f->c, f->L, f->eps, f->w1, f->b1, f->num_w1, f->w2, f->b2, H, h, i, j);
}

/* The parameter sets every bias test runs: defaults, then each part of
 * the formula made visible (a small L so that max(i, |L|) is i; a negative
 * c and L for the abs; a large eps; a large c). */
static const double PARAMS[][3] = {
    /* c, L, eps */
    {0.1, 512.0, 1e-6}, {0.1, 2.0, 1e-6}, {-0.3, -3.0, 1e-6}, {0.1, 4.0, 0.25}, {5.0, 0.0, 1e-3},
};
#define NPARAMS (sizeof PARAMS / sizeof *PARAMS)

static void test_defaults_and_names(void **state)
{
    (void)state;
    pa_scheme s;
    pa_scheme_type t;
    pa_scheme_init(&s, PA_SCHEME_FIRE);
    assert_true(s.fire.c == 0.1 && s.fire.L == 512.0 && s.fire.eps == 1e-6);
    assert_null(s.fire.w1);
    assert_string_equal(pa_scheme_type_name(PA_SCHEME_FIRE), "fire");
    assert_true(pa_scheme_type_from_name("fire", &t) && t == PA_SCHEME_FIRE);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_FIRE), PA_POSITION_SITE_LOGITS);
}

static void test_bias_formula(void **state)
{
    (void)state;
    static const int64_t pos[][2] = {
        {0, 0},       {1, 0},          {7, 3},
        {600, 0},     {600, 599},      {5, 9},
        {100000, 12}, {2147483647, 0}, {2147483647, 2147483000},
        {-40, -90},   {-5, 0},
    };
    mlp m;
    mlp_init(&m, 32, 6, 11);
    for (size_t c = 0; c < NPARAMS; c++) {
        pa_scheme s;
        fire_scheme(&s, &m);
        s.fire.c = PARAMS[c][0];
        s.fire.L = PARAMS[c][1];
        s.fire.eps = PARAMS[c][2];
        for (int h = 0; h < 6; h++)
            for (size_t p = 0; p < sizeof pos / sizeof *pos; p++) {
                double got = pa_fire_bias(&s.fire, 6, h, (double)pos[p][0], (double)pos[p][1]);
                double want = want_bias(&s.fire, 6, h, pos[p][0], pos[p][1]);
                assert_true(fabs(got - want) <= 1e-12 * (1.0 + fabs(want)));
            }
    }
    mlp_free(&m);
    /* Hand values with one unit, w1 = w2 = 1, b1 = b2 = 0: the bias is x. */
    {
        const float one = 1.0f, zero = 0.0f;
        pa_scheme s;
        pa_scheme_init(&s, PA_SCHEME_FIRE);
        s.fire.w1 = s.fire.w2 = &one;
        s.fire.b1 = s.fire.b2 = &zero;
        s.fire.num_w1 = s.fire.num_b1 = s.fire.num_w2 = s.fire.num_b2 = 1;
        /* Below L the normaliser is psi(512) = log(52.2). */
        assert_true(fabs(pa_fire_bias(&s.fire, 1, 0, 100, 90) - log(2.0) / (log(52.2) + 1e-6)) <
                    1e-12);
        /* Past it, psi(i): x(1000, 0) = psi(1000) / (psi(1000) + eps). */
        assert_true(fabs(pa_fire_bias(&s.fire, 1, 0, 1000, 0) - log(101.0) / (log(101.0) + 1e-6)) <
                    1e-12);
        assert_true(pa_fire_bias(&s.fire, 1, 0, 9, 9) == 0.0);
        /* |i - j|: a key after the query as far as one before it. */
        assert_true(pa_fire_bias(&s.fire, 1, 0, 20, 25) == pa_fire_bias(&s.fire, 1, 0, 20, 15));
    }
}

static void expect_fire_check(const pa_fire *f, int H, pa_status want, const char *field,
                              const char *message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_fire_check(f, H, &err), want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
}

static void test_check(void **state)
{
    (void)state;
    mlp m;
    pa_scheme s;
    mlp_init(&m, 32, 12, 5);
    fire_scheme(&s, &m);
    TU_ASSERT_STATUS(pa_fire_check(&s.fire, 12, NULL), PA_STATUS_OK, NULL);
    expect_fire_check(NULL, 12, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    expect_fire_check(&s.fire, 0, PA_STATUS_INVALID_ARGUMENT, "num_heads", "num_heads=0");
    s.fire.num_w2 = 31;
    expect_fire_check(&s.fire, 12, PA_STATUS_SHAPE_MISMATCH, "scheme.w2",
                      "scheme.w2 has 31 values but hidden * num_heads = 32 * 12 = 384");
    s.fire.num_w2 = 384;
    expect_fire_check(&s.fire, 11, PA_STATUS_SHAPE_MISMATCH, "scheme.w2",
                      "scheme.w2 has 384 values but hidden * num_heads = 32 * 11 = 352");
    s.fire.num_b1 = 31;
    expect_fire_check(&s.fire, 12, PA_STATUS_SHAPE_MISMATCH, "scheme.b1",
                      "scheme.b1 has 31 values but hidden (scheme.w1's length) = 32");
    s.fire.num_b1 = 32;
    s.fire.num_b2 = 13;
    expect_fire_check(&s.fire, 12, PA_STATUS_SHAPE_MISMATCH, "scheme.b2",
                      "scheme.b2 has 13 values but num_heads = 12");
    s.fire.num_b2 = 12;
    m.w1[3] = NAN;
    expect_fire_check(&s.fire, 12, PA_STATUS_INVALID_ARGUMENT, "scheme.w1[3]", "is not finite");
    m.w1[3] = 1.0f;
    m.w2[100] = INFINITY;
    expect_fire_check(&s.fire, 12, PA_STATUS_INVALID_ARGUMENT, "scheme.w2[100]", "is not finite");
    m.w2[100] = 1.0f;
    s.fire.b2 = NULL;
    expect_fire_check(&s.fire, 12, PA_STATUS_INVALID_ARGUMENT, "scheme.b2",
                      "scheme.b2 is required");
    s.fire.b2 = m.b2;
    s.fire.w1 = NULL;
    expect_fire_check(&s.fire, 12, PA_STATUS_INVALID_ARGUMENT, "scheme.w1",
                      "scheme.w1 is required");
    s.fire.w1 = m.w1;
    s.fire.num_w1 = 0;
    expect_fire_check(&s.fire, 12, PA_STATUS_SHAPE_MISMATCH, "scheme.w1",
                      "hidden must be in [1, 65536]");
    s.fire.num_w1 = 32;
    s.fire.eps = 0.0;
    expect_fire_check(&s.fire, 12, PA_STATUS_INVALID_ARGUMENT, "scheme.eps",
                      "scheme.eps=0 must be");
    s.fire.eps = 1e-6;
    s.fire.c = INFINITY;
    expect_fire_check(&s.fire, 12, PA_STATUS_INVALID_ARGUMENT, "scheme.c", "not finite");
    s.fire.c = 0.1;
    s.fire.L = NAN;
    expect_fire_check(&s.fire, 12, PA_STATUS_INVALID_ARGUMENT, "scheme.L", "not finite");
    s.fire.L = 512.0;
    TU_ASSERT_STATUS(pa_fire_check(&s.fire, 12, NULL), PA_STATUS_OK, NULL);
    mlp_free(&m);
    /* Through pa_attention_check: causal is required, then the shapes. */
    {
        fixture f;
        pa_error err;
        mlp_init(&m, 8, 4, 6);
        setup_qkv(&f, PA_SCHEME_FIRE, 3, 3, 4, 4, 8, 0, 1);
        fire_scheme(&f.scheme, &m);
        TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_INVALID_ARGUMENT, &err);
        assert_string_equal(err.field, "causal");
        assert_non_null(strstr(err.message, "fire needs causal=true"));
        f.a.causal = true;
        TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_OK, &err);
        f.scheme.fire.num_w2 = 31;
        TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_SHAPE_MISMATCH, &err);
        assert_string_equal(err.field, "scheme.w2");
        fixture_free(&f);
        mlp_free(&m);
    }
}

/* The bias matrix (zero q and k, scale 1) of a causal call against the
 * reference: hidden sizes 1 .. 200, every parameter set, positions small,
 * past L, and near 2^31 (distances past the psi table). */
static void test_bias_matrix(void **state)
{
    (void)state;
    static const int hiddens[] = {1, 2, 5, 32, 200};
    static const int32_t qa[] = {0, 2, 3, 9, 600, 1025}, ka[] = {0, 1, 3, 8, 9, 500, 600, 1024};
    static const int32_t qb[] = {2147483647, 2147483000, 1500000000},
                         kb[] = {0, 5, 1000000, 1500000000, 2147482000, 2147483000, 2147483647};
    /* Keys out of order: the per-logit segment walk, not the runs. */
    static const int32_t kc[] = {9, 0, 600, 3, 1024, 1, 8};
    const struct {
        const int32_t *q, *k;
        int nq, nk;
    } sets[] = {{qa, ka, 6, 8}, {qb, kb, 3, 7}, {qa, kc, 6, 7}};
    double worst = 0.0;
    for (size_t hi = 0; hi < sizeof hiddens / sizeof *hiddens; hi++)
        for (size_t c = 0; c < NPARAMS; c++)
            for (size_t ps = 0; ps < sizeof sets / sizeof *sets; ps++) {
                const int H = 3, nq = sets[ps].nq, nk = sets[ps].nk;
                mlp m;
                pa_scheme s;
                float *got;
                mlp_init(&m, hiddens[hi], H, 100 + hi);
                fire_scheme(&s, &m);
                s.fire.c = PARAMS[c][0];
                s.fire.L = PARAMS[c][1];
                s.fire.eps = PARAMS[c][2];
                got = bias_probe(&s, H, 1, sets[ps].q, nq, sets[ps].k, nk, true);
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < nq; i++)
                        for (int j = 0; j < nk; j++) {
                            const float g = got[((size_t)h * nq + i) * nk + j];
                            double want, e;
                            if (sets[ps].k[j] > sets[ps].q[i]) {
                                assert_true(isinf(g) && g < 0.0f);
                                continue;
                            }
                            want = want_bias(&s.fire, H, h, sets[ps].q[i], sets[ps].k[j]);
                            e = fabs(g - want) / (1.0 + fabs(want));
                            worst = e > worst ? e : worst;
                            if (e > 1e-6)
                                fail_msg("hidden %d params %zu set %zu h %d i %d j %d: %.9g vs "
                                         "%.9g",
                                         hiddens[hi], c, ps, h, i, j, (double)g, want);
                        }
                free(got);
                mlp_free(&m);
            }
    print_message("fire bias: worst |got - want| / (1 + |want|) = %.3g\n", worst);
}

/* Attention against the reference: both kernels (output only: decode for
 * few rows; with logits and weights: tiled), GQA, Lq != Lk, explicit and
 * out-of-order positions, several hidden sizes. */
static void test_attention(void **state)
{
    (void)state;
    static const int shapes[][6] = {
        /* Lq, Lk, H, Hkv, D, hidden */
        {1, 1, 4, 4, 8, 1},      {1, 200, 8, 2, 16, 32},  {5, 300, 4, 1, 8, 7},
        {17, 17, 8, 4, 16, 64},  {70, 130, 4, 2, 32, 32}, {3, 9, 2, 2, 5, 3},
        {130, 300, 2, 1, 8, 16},
    };
    uint64_t seed = 3700;
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
        for (int variant = 0; variant < 4; variant++) {
            fixture f;
            mlp m;
            const int Lq = shapes[c][0], Lk = shapes[c][1], H = shapes[c][2];
            int32_t *qp = NULL, *kp = NULL;
            setup_qkv(&f, PA_SCHEME_FIRE, Lq, Lk, H, shapes[c][3], shapes[c][4], 0, seed);
            mlp_init(&m, shapes[c][5], H, seed++);
            fire_scheme(&f.scheme, &m);
            f.a.causal = true;
            f.scheme.fire.L = variant & 1 ? 8.0 : 512.0;
            if (variant & 2) {
                /* Explicit positions: queries out of order, keys with gaps,
                 * some keys after some queries. */
                qp = tu_alloc((size_t)Lq, sizeof *qp);
                kp = tu_alloc((size_t)Lk, sizeof *kp);
                for (int i = 0; i < Lq; i++)
                    qp[i] = 3 * Lk + 7 - 3 * ((i * 5) % Lq);
                for (int j = 0; j < Lk; j++)
                    kp[j] = 3 * j + (j % 2);
                f.a.q_positions = qp;
                f.a.k_positions = kp;
            }
            check_against_reference(&f.a, 0);
            check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS | WANT_STATS);
            fixture_free(&f);
            mlp_free(&m);
            free(qp);
            free(kp);
        }
}

/* Positions near 2^31 and far apart: psi per logit past the table. */
static void test_far_positions(void **state)
{
    (void)state;
    int32_t kpos[6] = {0, 1, 5, 1000000, 300000000, 2000000000};
    int32_t qpos[3] = {2147483647, 2000000000, 1500000000};
    for (int hid = 1; hid <= 64; hid *= 8) {
        fixture f;
        mlp m;
        setup_qkv(&f, PA_SCHEME_FIRE, 3, 6, 4, 2, 8, 0, 77 + (uint64_t)hid);
        mlp_init(&m, hid, 4, 78 + (uint64_t)hid);
        fire_scheme(&f.scheme, &m);
        f.a.causal = true;
        f.a.q_positions = qpos;
        f.a.k_positions = kpos;
        check_against_reference(&f.a, WANT_LOGITS | WANT_WEIGHTS);
        check_against_reference(&f.a, 0);
        fixture_free(&f);
        mlp_free(&m);
    }
}

/* A bias past float32 is refused, naming scheme.w2; the decomposition
 * (every pair, unmasked) is refused for fire. */
/* pa__fire_thresholds, which searches out from the row before's
 * thresholds, against their definition read off by a scan: rows whose
 * normalisers rise (positions past |L|), stay (before it), fall and jump
 * (positions out of order), breakpoints below, inside and past psi's
 * range, and repeated ones. */
static void test_thresholds(void **state)
{
    (void)state;
    enum { PSI_N = 700, ROWS = 300, NBP = 9 };
    static double psi[PSI_N], norm[ROWS];
    static int32_t dthr[ROWS * NBP];
    const double bp[NBP] = {-1.0, 0.0, 0.05, 0.3, 0.3, 0.61, 0.9, 1.2, 7.0};
    pa__fire_tables t;
    tu_rng rng;
    tu_rng_seed(&rng, 77);
    memset(&t, 0, sizeof t);
    for (int32_t d = 0; d < PSI_N; d++)
        psi[d] = log1p(0.37 * d);
    for (int32_t i = 0; i < ROWS; i++) {
        const double q = i < 100   ? (double)(i < 40 ? 20 : 40 + i)       /* flat, then rising */
                         : i < 200 ? 300.0 - i                            /* falling */
                                   : floor(tu_uniform(&rng, 0.0, 900.0)); /* jumping */
        norm[i] = log1p(0.37 * (q > 30.0 ? q : 30.0)) + 1e-6;
    }
    t.bp = (double *)bp;
    t.nbp = NBP;
    t.norm = norm;
    t.psi = psi;
    t.psi_n = PSI_N;
    t.dthr = dthr;
    for (int32_t i = 0; i < ROWS; i++) {
        pa__fire_thresholds(&t, i);
        for (int32_t k = 0; k < NBP; k++) {
            int32_t want = 0;
            while (want < PSI_N && !(psi[want] * (1.0 / norm[i]) >= bp[k]))
                want++;
            if (dthr[i * NBP + k] != want)
                fail_msg("row %d breakpoint %d (%g): threshold %d, want %d", (int)i, (int)k, bp[k],
                         (int)dthr[i * NBP + k], (int)want);
        }
    }
}

static void test_refusals(void **state)
{
    (void)state;
    fixture f;
    mlp m;
    pa_attention_out out = {0};
    pa_error err;
    pa_status st;
    size_t wsz;
    void *ws;
    mlp_init(&m, 4, 2, 9);
    setup_qkv(&f, PA_SCHEME_FIRE, 2, 2, 2, 2, 4, 0, 9);
    fire_scheme(&f.scheme, &m);
    f.a.causal = true;
    m.w1[0] = 1.0f;
    m.b1[0] = 1.0f;
    m.w2[0] = 3e38f;
    m.w2[1] = 3e38f;
    m.b2[0] = 3e38f;
    out.output = tu_alloc(2 * 2 * 4, sizeof(float));
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    st = pa_attention_run(&f.a, &out, ws, wsz, &err);
    free(ws);
    free(out.output);
    TU_ASSERT_STATUS(st, PA_STATUS_OUT_OF_RANGE, &err);
    assert_string_equal(err.field, "scheme.w2");
    {
        pa_decomposition d;
        size_t n = 2 * 2 * 2;
        memset(&d, 0, sizeof d);
        d.content = tu_alloc(n, sizeof(float));
        d.position = tu_alloc(n, sizeof(float));
        wsz = pa_decompose_workspace_size(&f.a);
        ws = tu_alloc(wsz, 1);
        TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, wsz, &err), PA_STATUS_UNSUPPORTED,
                         &err);
        assert_string_equal(err.field, "scheme.type");
        free(ws);
        free(d.content);
        free(d.position);
    }
    fixture_free(&f);
    mlp_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_names),
        cmocka_unit_test(test_bias_formula),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_bias_matrix),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_far_positions),
        cmocka_unit_test(test_thresholds),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests_name("fire", tests, NULL, NULL);
}
