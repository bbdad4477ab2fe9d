/* test_analysis.c - the permutation test and the logit decomposition
 * (lib/analysis.c), checked against pa_attention_run and the double
 * references. Tolerances: sums of float32 terms vs float32 logits,
 * |diff| <= 1e-5 + 1e-4 |want|.
 */
#include "ref_attention.h"
#include "ref_encodings.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    pa_scheme s;
    pa_attention a;
    float *q, *k, *v, *x, *wq, *wk, *wv, *table, *rel_k;
} fixture;

static void fixture_free(fixture *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->x);
    free(f->wq);
    free(f->wk);
    free(f->wv);
    free(f->table);
    free(f->rel_k);
}

static float *rnd(tu_rng *r, size_t n, double lo, double hi)
{
    float *t = tu_alloc(n, sizeof(float));
    tu_fill(r, t, n, lo, hi);
    return t;
}

/* Self-attention fixture, L tokens, H heads of D; tables for any scheme. */
static void make(fixture *f, pa_scheme_type type, bool layer, int L, int H, int D, uint64_t seed)
{
    tu_rng r;
    const int dm = 8;
    memset(f, 0, sizeof *f);
    tu_rng_seed(&r, seed);
    pa_scheme_init(&f->s, type);
    pa_attention_init(&f->a, &f->s);
    f->a.num_heads = H;
    f->a.head_dim = D;
    if (layer) {
        f->x = rnd(&r, (size_t)L * dm, -1, 1);
        f->wq = rnd(&r, (size_t)dm * H * D, -0.5, 0.5);
        f->wk = rnd(&r, (size_t)dm * H * D, -0.5, 0.5);
        f->wv = rnd(&r, (size_t)dm * H * D, -0.5, 0.5);
        f->a.x = f->x;
        f->a.seq_len = L;
        f->a.d_model = dm;
        f->a.w_q = f->wq;
        f->a.w_k = f->wk;
        f->a.w_v = f->wv;
    } else {
        f->q = rnd(&r, (size_t)L * H * D, -1, 1);
        f->k = rnd(&r, (size_t)L * H * D, -1, 1);
        f->v = rnd(&r, (size_t)L * H * D, -1, 1);
        f->a.q = f->q;
        f->a.k = f->k;
        f->a.v = f->v;
        f->a.q_len = f->a.k_len = L;
    }
    switch (type) {
    case PA_SCHEME_LEARNED:
        f->table = rnd(&r, (size_t)(L + 2) * dm, -1, 1);
        f->s.learned = (pa_learned){f->table, L + 2, dm, 2};
        break;
    case PA_SCHEME_T5:
        f->table = rnd(&r, 32 * (size_t)H, -1, 1);
        f->s.t5.table = f->table;
        f->s.t5.table_rows = 32;
        f->s.t5.table_cols = H;
        break;
    case PA_SCHEME_SHAW:
        f->rel_k = rnd(&r, 5 * (size_t)D, -1, 1);
        f->s.shaw.max_relative_position = 2;
        f->s.shaw.rel_k = f->rel_k;
        f->s.shaw.rel_k_rows = 5;
        f->s.shaw.rel_k_cols = D;
        break;
    default:
        break;
    }
}

static double perm_diff(const pa_attention *a, const int32_t *perm)
{
    pa_error err;
    double d = -1;
    size_t n = pa_permutation_workspace_size(a);
    void *ws = tu_alloc(n, 1);
    TU_ASSERT_STATUS(pa_analyze_permutation(a, perm, ws, n, &d, &err), PA_STATUS_OK, &err);
    free(ws);
    return d;
}

static void test_permutation(void **state)
{
    (void)state;
    enum { L = 12 };
    int32_t perm[L];
    for (int i = 0; i < L; i++)
        perm[i] = (i * 5 + 3) % L; /* 5 is coprime with 12: a permutation */

    fixture f;
    make(&f, PA_SCHEME_NONE, false, L, 2, 8, 1);
    double nope = perm_diff(&f.a, perm);
    print_message("permutation none: %.3g\n", nope);
    assert_true(nope < 1e-5);
    f.a.causal = true; /* the causal mask itself carries order */
    assert_true(perm_diff(&f.a, perm) > 1e-2);
    fixture_free(&f);

    make(&f, PA_SCHEME_NONE, true, L, 2, 8, 2);
    assert_true(perm_diff(&f.a, perm) < 1e-5);
    fixture_free(&f);

    const struct {
        pa_scheme_type t;
        bool layer;
    } aware[] = {{PA_SCHEME_ROPE, false}, {PA_SCHEME_ALIBI, false},     {PA_SCHEME_T5, false},
                 {PA_SCHEME_SHAW, false}, {PA_SCHEME_SINUSOIDAL, true}, {PA_SCHEME_LEARNED, true}};
    for (size_t i = 0; i < sizeof aware / sizeof aware[0]; i++) {
        make(&f, aware[i].t, aware[i].layer, L, 2, 8, 10 + i);
        double d = perm_diff(&f.a, perm);
        print_message("permutation %s: %.3g\n", pa_scheme_type_name(aware[i].t), d);
        assert_true(d > 1e-2);
        fixture_free(&f);
    }
}

static void test_permutation_errors(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    double d = 123;
    int32_t perm[4] = {0, 1, 2, 3};
    make(&f, PA_SCHEME_NONE, false, 4, 1, 2, 3);
    size_t n = pa_permutation_workspace_size(&f.a);
    void *ws = tu_alloc(n, 1);
    perm[2] = 4;
    TU_ASSERT_STATUS(pa_analyze_permutation(&f.a, perm, ws, n, &d, &err), PA_STATUS_OUT_OF_RANGE,
                     &err);
    assert_string_equal(err.field, "permutation[2]");
    perm[2] = 1;
    TU_ASSERT_STATUS(pa_analyze_permutation(&f.a, perm, ws, n, &d, &err),
                     PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "permutation[2]");
    perm[2] = 2;
    TU_ASSERT_STATUS(pa_analyze_permutation(&f.a, perm, ws, n - 100, &d, &err),
                     PA_STATUS_WORKSPACE_TOO_SMALL, &err);
    TU_ASSERT_STATUS(pa_analyze_permutation(&f.a, NULL, ws, n, &d, &err),
                     PA_STATUS_INVALID_ARGUMENT, &err);
    assert_true(d == 123);
    f.a.k_len = 3;
    TU_ASSERT_STATUS(pa_analyze_permutation(&f.a, perm, ws, n, &d, &err), PA_STATUS_SHAPE_MISMATCH,
                     &err);
    free(ws);
    fixture_free(&f);
}

/* Runs the decomposition; checks content + position against the unmasked
 * logits of pa_attention_run; returns the terms for further checks. */
static void decompose(const pa_attention *a, float *content, float *position, float *cc, float *cp,
                      float *pc, float *pp)
{
    pa_error err;
    int H = a->num_heads, Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    size_t n = (size_t)H * Lq * Lk;
    pa_decomposition d = {content, position, cc, cp, pc, pp};
    size_t wsz = pa_decompose_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    double *want = tu_alloc(n, sizeof(double));
    TU_ASSERT_STATUS(pa_analyze_decompose(a, &d, ws, wsz, &err), PA_STATUS_OK, &err);

    pa_attention u = *a;
    u.causal = false;
    u.window = 0;
    u.key_length = -1;
    ref_attention(&u, NULL, NULL, want, NULL, NULL);
    float *sum = tu_alloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        sum[i] = content[i] + position[i];
    TU_ASSERT_CLOSE(sum, want, n, 1e-5, 1e-4);
    free(sum);
    free(want);
    free(ws);
}

static void test_decompose_bias_schemes(void **state)
{
    (void)state;
    enum { L = 6, H = 2, D = 4, N = H * L * L };
    float content[N], position[N];
    double want[N];
    const pa_scheme_type types[] = {PA_SCHEME_NONE, PA_SCHEME_ALIBI, PA_SCHEME_T5, PA_SCHEME_SHAW,
                                    PA_SCHEME_ROPE};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        fixture f;
        make(&f, types[t], false, L, H, D, 40 + t);
        f.a.causal = true; /* ignored: terms are before masks */
        decompose(&f.a, content, position, NULL, NULL, NULL, NULL);

        /* content is the NoPE logits with the same scale. */
        pa_scheme none;
        pa_scheme_init(&none, PA_SCHEME_NONE);
        pa_attention c = f.a;
        c.scheme = &none;
        c.causal = false;
        c.scale_set = true;
        c.scale = pa_attention_scale(&f.a);
        ref_attention(&c, NULL, NULL, want, NULL, NULL);
        TU_ASSERT_CLOSE(content, want, N, 1e-5, 1e-4);

        if (types[t] == PA_SCHEME_NONE) {
            for (int i = 0; i < N; i++)
                assert_true(fabsf(position[i]) < 1e-6f);
        }
        if (types[t] == PA_SCHEME_ALIBI) {
            /* position is the bias itself: -m_h (qpos - kpos). */
            double slopes[H];
            ref_alibi_slopes(H, 8.0, slopes);
            for (int h = 0; h < H; h++)
                for (int i = 0; i < L; i++)
                    for (int j = 0; j < L; j++)
                        want[(h * L + i) * L + j] = ref_alibi_bias(slopes[h], i, j, false);
            TU_ASSERT_CLOSE(position, want, N, 1e-5, 1e-4);
        }
        fixture_free(&f);
    }
}

static void test_decompose_absolute(void **state)
{
    (void)state;
    enum { L = 5, H = 2, D = 3, N = H * L * L };
    float content[N], position[N], cc[N], cp[N], pc[N], pp[N];
    for (int t = 0; t < 2; t++) {
        fixture f;
        make(&f, t ? PA_SCHEME_LEARNED : PA_SCHEME_SINUSOIDAL, true, L, H, D, 60 + t);
        decompose(&f.a, content, position, cc, cp, pc, pp);
        for (int i = 0; i < N; i++) {
            assert_float_equal(cc[i], content[i], 0);
            assert_float_equal(cp[i] + pc[i] + pp[i], position[i], 1e-5);
        }
        /* cc is the NoPE logits of the same layer. */
        pa_scheme none;
        pa_scheme_init(&none, PA_SCHEME_NONE);
        pa_attention c = f.a;
        c.scheme = &none;
        double want[N];
        ref_attention(&c, NULL, NULL, want, NULL, NULL);
        TU_ASSERT_CLOSE(cc, want, N, 1e-5, 1e-4);
        /* pp is the logits of the encodings alone (x = 0). */
        float *zero = tu_alloc((size_t)L * 8, sizeof(float));
        c = f.a;
        c.x = zero;
        ref_attention(&c, NULL, NULL, want, NULL, NULL);
        TU_ASSERT_CLOSE(pp, want, N, 1e-5, 1e-4);
        free(zero);
        fixture_free(&f);
    }
}

/* Four finite terms whose sum leaves float32: x = p = (E, E) with
 * identity projections makes each term E^2 * 2 / sqrt(2) = 2.04e38. */
static void test_decompose_overflow(void **state)
{
    (void)state;
    enum { L = 1, DM = 2, N = 1 };
    const float E = 1.2e19f;
    float x[L * DM] = {E, E}, table[DM] = {E, E}, eye[DM * DM] = {1, 0, 0, 1};
    float content[N], position[N], cc[N], cp[N], pc[N], pp[N];
    pa_scheme s;
    pa_attention a;
    pa_error err;
    pa_scheme_init(&s, PA_SCHEME_LEARNED);
    s.learned = (pa_learned){table, 1, DM, 0};
    pa_attention_init(&a, &s);
    a.num_heads = 1;
    a.head_dim = DM;
    a.x = x;
    a.seq_len = L;
    a.d_model = DM;
    a.w_q = a.w_k = a.w_v = eye;
    pa_decomposition d = {content, position, cc, cp, pc, pp};
    size_t n = pa_decompose_workspace_size(&a);
    void *ws = tu_alloc(n, 1);
    TU_ASSERT_STATUS(pa_analyze_decompose(&a, &d, ws, n, &err), PA_STATUS_OUT_OF_RANGE, &err);
    assert_string_equal(err.field, "position");
    /* Half the size: all finite, and the sum is there. */
    x[0] = x[1] = table[0] = table[1] = E / 2;
    TU_ASSERT_STATUS(pa_analyze_decompose(&a, &d, ws, n, &err), PA_STATUS_OK, &err);
    assert_float_equal(position[0], cp[0] + pc[0] + pp[0], 1e33);
    assert_true(position[0] > 1.0e38f);
    free(ws);
}

static void test_decompose_errors(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    float c[4], p[4];
    pa_decomposition d = {c, p, NULL, NULL, NULL, NULL};
    make(&f, PA_SCHEME_NONE, false, 2, 1, 2, 5);
    size_t n = pa_decompose_workspace_size(&f.a);
    void *ws = tu_alloc(n, 1);
    TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, n - 1 - 64, &err),
                     PA_STATUS_WORKSPACE_TOO_SMALL, &err);
    d.position = NULL;
    TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, n, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    d.position = p;
    f.a.head_dim = 0;
    TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, n, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "head_dim");
    free(ws);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_permutation),
        cmocka_unit_test(test_permutation_errors),
        cmocka_unit_test(test_decompose_bias_schemes),
        cmocka_unit_test(test_decompose_absolute),
        cmocka_unit_test(test_decompose_overflow),
        cmocka_unit_test(test_decompose_errors),
    };
    return cmocka_run_group_tests_name("analysis", tests, NULL, NULL);
}
