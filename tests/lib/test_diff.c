/* test_diff.c - lib/differential.c: differential attention against the
 * double reference of both peers' layouts (tests/ref_diff.c): unilm's
 * interleaved pairs and Hugging Face DiffLlama's halves, MHA and GQA,
 * lambda given or from its four vectors, subln with a weight, without one
 * and off, rope and none, causal, positions and Lq != Lk in both kernels,
 * the weights A; and the errors.
 */
#include "attention_fixture.h"
#include "posattn_diff.h"
#include "ref_diff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct dcase {
    pa_diff_pairs pairs;
    int Lq, Lk, H2, Hk, D;
    bool vectors, subln, weighted, causal;
    pa_scheme_type scheme;
} dcase;

static void run_case(const dcase *c, uint64_t seed)
{
    tu_rng r;
    pa_scheme s;
    pa_attention a;
    pa_differential d;
    pa_error err;
    const int H = c->H2 / 2, Dv = c->pairs == PA_DIFF_PAIRS_INTERLEAVED ? 2 * c->D : c->D;
    const int Hv = c->pairs == PA_DIFF_PAIRS_INTERLEAVED ? c->Hk / 2 : c->Hk;
    float *q, *k, *v, *lam[4], *sw, *out, *w;
    double *rout, *rw;
    size_t nout = (size_t)c->Lq * H * 2 * c->D, nw = (size_t)H * c->Lq * c->Lk;
    tu_rng_seed(&r, seed);
    q = rand_tensor(&r, (size_t)c->Lq * c->H2 * c->D, -1, 1);
    k = rand_tensor(&r, (size_t)c->Lk * c->Hk * c->D, -1, 1);
    v = rand_tensor(&r, (size_t)c->Lk * Hv * Dv, -1, 1);
    for (int i = 0; i < 4; i++)
        lam[i] = rand_tensor(&r, (size_t)c->D, -0.3, 0.3);
    sw = rand_tensor(&r, 2 * (size_t)c->D, 0.5, 1.5);
    pa_scheme_init(&s, c->scheme);
    pa_attention_init(&a, &s);
    a.num_heads = c->H2;
    a.num_kv_heads = c->Hk;
    a.head_dim = c->D;
    a.q_len = c->Lq;
    a.k_len = c->Lk;
    a.q = q;
    a.k = k;
    a.v = v;
    a.causal = c->causal;
    pa_diff_init(&d);
    d.pairs = c->pairs;
    d.lambda_init = pa_diff_lambda_init(3);
    d.lambda = 0.37;
    if (c->vectors) {
        d.lambda_q1 = lam[0];
        d.lambda_k1 = lam[1];
        d.lambda_q2 = lam[2];
        d.lambda_k2 = lam[3];
    }
    d.subln = c->subln;
    d.subln_weight = c->weighted ? sw : NULL;
    size_t wsz = pa_diff_workspace_size(&a, &d);
    void *ws = tu_alloc(wsz, 1);
    out = tu_alloc(nout, sizeof(float));
    w = tu_alloc(nw, sizeof(float));
    rout = tu_alloc(nout, sizeof(double));
    rw = tu_alloc(nw, sizeof(double));
    TU_ASSERT_STATUS(pa_diff_run(&a, &d, out, w, ws, wsz, &err), PA_STATUS_OK, &err);
    ref_diff(&a, &d, rout, rw);
    TU_ASSERT_CLOSE(out, rout, nout, ATOL, RTOL);
    TU_ASSERT_CLOSE(w, rw, nw, ATOL, RTOL);
    /* Without the weights asked for: the same output. */
    {
        float *out2 = tu_alloc(nout, sizeof(float));
        TU_ASSERT_STATUS(pa_diff_run(&a, &d, out2, NULL, ws, wsz, &err), PA_STATUS_OK, &err);
        assert_memory_equal(out, out2, nout * sizeof(float));
        free(out2);
    }
    free(ws);
    free(out);
    free(w);
    free(rout);
    free(rw);
    free(q);
    free(k);
    free(v);
    for (int i = 0; i < 4; i++)
        free(lam[i]);
    free(sw);
}

static void test_against_reference(void **state)
{
    (void)state;
    static const dcase cases[] = {
        /* unilm: MHA (2H query heads, 2H key heads), lambda from its vectors */
        {PA_DIFF_PAIRS_INTERLEAVED, 40, 40, 4, 4, 16, true, true, true, true, PA_SCHEME_ROPE},
        /* unilm with GQA: 8 query heads, 4 key heads, v 2 heads of 2D */
        {PA_DIFF_PAIRS_INTERLEAVED, 70, 70, 8, 4, 8, true, true, true, false, PA_SCHEME_ROPE},
        /* DiffLlama: halves, GQA, no subln weight, lambda given */
        {PA_DIFF_PAIRS_HALVES, 33, 33, 8, 2, 16, false, true, false, true, PA_SCHEME_ROPE},
        /* decode shape (the decode kernel), halves, no subln */
        {PA_DIFF_PAIRS_HALVES, 2, 90, 4, 2, 8, true, false, false, true, PA_SCHEME_NONE},
        /* decode, interleaved, xpos */
        {PA_DIFF_PAIRS_INTERLEAVED, 1, 300, 4, 2, 8, false, true, true, true, PA_SCHEME_XPOS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], 9100 + i);
}

static void test_lambda(void **state)
{
    (void)state;
    pa_differential d;
    float q1[2] = {0.5f, 1.0f}, k1[2] = {1.0f, 0.5f}, q2[2] = {0.0f, 1.0f}, k2[2] = {0.25f, -1.0f};
    pa_diff_init(&d);
    assert_true(fabs(pa_diff_lambda_init(0) - 0.2) < 1e-15);
    assert_true(fabs(pa_diff_lambda_init(4) - (0.8 - 0.6 * exp(-1.2))) < 1e-15);
    d.lambda = 0.5;
    assert_true(pa_diff_lambda(&d, 2) == 0.5);
    d.lambda_init = 0.3;
    d.lambda_q1 = q1;
    d.lambda_k1 = k1;
    d.lambda_q2 = q2;
    d.lambda_k2 = k2;
    assert_true(fabs(pa_diff_lambda(&d, 2) - (exp(1.0) - exp(-1.0) + 0.3)) < 1e-12);
}

static void expect(const pa_attention *a, const pa_differential *d, pa_status st, const char *field)
{
    pa_error err = {0};
    assert_int_equal(pa_diff_check(a, d, &err), st);
    if (strcmp(err.field, field) != 0)
        fail_msg("field %s, want %s (%s)", err.field, field, err.message);
}

static void test_errors(void **state)
{
    (void)state;
    fixture f;
    pa_differential d;
    float lam[8] = {0}, sinks[4] = {0};
    setup_qkv(&f, PA_SCHEME_ROPE, 6, 6, 4, 4, 8, 16, 9200);
    pa_diff_init(&d);
    assert_int_equal(pa_diff_check(&f.a, &d, NULL), PA_STATUS_OK);
    f.a.num_kv_heads = 3;
    expect(&f.a, &d, PA_STATUS_SHAPE_MISMATCH, "num_kv_heads");
    f.a.num_kv_heads = 4;
    f.a.v_head_dim = 8;
    expect(&f.a, &d, PA_STATUS_SHAPE_MISMATCH, "v_head_dim");
    f.a.v_head_dim = 0;
    f.a.sinks = sinks;
    expect(&f.a, &d, PA_STATUS_UNSUPPORTED, "sinks");
    f.a.sinks = NULL;
    d.lambda_q1 = lam;
    expect(&f.a, &d, PA_STATUS_INVALID_ARGUMENT, "differential.lambda_q1");
    d.lambda_q1 = NULL;
    d.lambda_init = 1.0;
    expect(&f.a, &d, PA_STATUS_INVALID_ARGUMENT, "differential.lambda_init");
    d.lambda_init = 0.5;
    d.subln_eps = 0.0;
    expect(&f.a, &d, PA_STATUS_INVALID_ARGUMENT, "differential.subln_eps");
    d.subln_eps = 1e-5;
    f.scheme.type = PA_SCHEME_ALIBI;
    expect(&f.a, &d, PA_STATUS_UNSUPPORTED, "scheme.type");
    f.scheme.type = PA_SCHEME_ROPE;
    f.a.num_heads = 3;
    f.a.num_kv_heads = 3;
    expect(&f.a, &d, PA_STATUS_SHAPE_MISMATCH, "num_heads");
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_lambda),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("differential", tests, NULL, NULL);
}
