/* test_paged.c - paged keys and values (pa_attention's k_pages, v_pages,
 * page_tokens): every result of a paged call equals the call that sends
 * the same rows in one k and v, bit for bit, in the decode kernel (few
 * query rows) and the tiled one, for the schemes of q/k/v mode, GQA,
 * masks, sinks, returned weights, logits, q_rot, k_rot and statistics,
 * the split by query heads (pa_attention_run_part) and by keys
 * (pa_attention_run_keys); pages scattered through a pool in shuffled
 * order, the last one partly used; and the refusals.
 */
#include "attention_fixture.h"
#include "ref_attention.h"

#include <math.h>

#include <stdlib.h>
#include <string.h>

/* The rows of k [Lk, row] in pages of pt rows, placed in a pool in
 * shuffled order: pages[i] is page i. The pool's unused rows hold NaN, so
 * a kernel that reads past a page's rows (or an unused tail) shows it. */
typedef struct paged {
    float *pool;
    const float **pages;
    int32_t n;
} paged;

static void page_out(paged *pg, const float *x, int32_t Lk, size_t row, int32_t pt, tu_rng *r)
{
    const int32_t n = (Lk + pt - 1) / pt, slots = n + 3;
    int32_t *slot = tu_alloc((size_t)slots, sizeof(int32_t));
    const size_t page = (size_t)pt * row;
    pg->n = n;
    pg->pool = tu_alloc((size_t)slots * page, sizeof(float));
    pg->pages = tu_alloc((size_t)n, sizeof(*pg->pages));
    for (size_t e = 0; e < (size_t)slots * page; e++)
        pg->pool[e] = NAN;
    for (int32_t i = 0; i < slots; i++)
        slot[i] = i;
    for (int32_t i = slots - 1; i > 0; i--) { /* Fisher-Yates */
        const int32_t j = (int32_t)tu_uniform(r, 0, i + 1), t = slot[i];
        slot[i] = slot[j];
        slot[j] = t;
    }
    for (int32_t i = 0; i < n; i++) {
        const int32_t rows = Lk - i * pt < pt ? Lk - i * pt : pt;
        float *dst = pg->pool + (size_t)slot[i] * page;
        memcpy(dst, x + (size_t)i * page, (size_t)rows * row * sizeof(float));
        pg->pages[i] = dst;
    }
    free(slot);
}

static void paged_free(paged *pg)
{
    free(pg->pool);
    free(pg->pages);
}

/* Every output of a call, allocated for a's sizes. */
typedef struct outs {
    pa_attention_out o;
    size_t n[8];
} outs;

static void outs_alloc(outs *x, const pa_attention *a, bool weights)
{
    const int H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H, D = a->head_dim;
    const int Dv = a->v_head_dim ? a->v_head_dim : D, Lq = a->q_len, Lk = a->k_len;
    memset(x, 0, sizeof *x);
    x->n[0] = (size_t)Lq * H * Dv;
    x->n[1] = x->n[2] = weights ? (size_t)H * Lq * Lk : 0;
    x->n[3] = (size_t)Lq * H * D;
    x->n[4] = (size_t)Lk * Hkv * D;
    x->n[5] = x->n[6] = x->n[7] = (size_t)H * Lq;
    x->o.output = tu_alloc(x->n[0], sizeof(float));
    if (weights) {
        x->o.weights = tu_alloc(x->n[1], sizeof(float));
        x->o.logits = tu_alloc(x->n[2], sizeof(float));
    }
    x->o.q_rot = tu_alloc(x->n[3], sizeof(float));
    x->o.k_rot = tu_alloc(x->n[4], sizeof(float));
    x->o.entropy = tu_alloc(x->n[5], sizeof(float));
    x->o.distance = tu_alloc(x->n[6], sizeof(float));
    x->o.far_share = tu_alloc(x->n[7], sizeof(float));
    x->o.far_distance = Lk / 4;
}

static float **outs_ptrs(outs *x, float **p)
{
    p[0] = x->o.output;
    p[1] = x->o.weights;
    p[2] = x->o.logits;
    p[3] = x->o.q_rot;
    p[4] = x->o.k_rot;
    p[5] = x->o.entropy;
    p[6] = x->o.distance;
    p[7] = x->o.far_share;
    return p;
}

static void outs_free(outs *x)
{
    float *p[8];
    outs_ptrs(x, p);
    for (int i = 0; i < 8; i++)
        free(p[i]);
}

static const char *const out_names[8] = {"output", "weights", "logits",   "q_rot",
                                         "k_rot",  "entropy", "distance", "far_share"};

static void same_bits(outs *x, outs *y, const char *what)
{
    float *p[8], *q[8];
    outs_ptrs(x, p);
    outs_ptrs(y, q);
    for (int i = 0; i < 8; i++)
        if (p[i] != NULL && memcmp(p[i], q[i], x->n[i] * sizeof(float)) != 0) {
            size_t e = 0;
            while (memcmp(p[i] + e, q[i] + e, sizeof(float)) == 0)
                e++;
            fail_msg("%s: %s[%zu] contiguous %.9g, paged %.9g", what, out_names[i], e,
                     (double)p[i][e], (double)q[i][e]);
        }
}

/* How a call is run: whole, in two parts by heads, or by keys. */
enum { WHOLE, PARTS, KEYS };

static void run(const pa_attention *a, outs *x, int how)
{
    pa_error err;
    const size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    if (how == WHOLE) {
        TU_ASSERT_STATUS(pa_attention_run(a, &x->o, ws, wsz, &err), PA_STATUS_OK, &err);
    } else if (how == PARTS) {
        for (int p = 1; p >= 0; p--) /* any order */
            TU_ASSERT_STATUS(pa_attention_run_part(a, &x->o, p, 2, ws, wsz, &err), PA_STATUS_OK,
                             &err);
    } else {
        const size_t psz = pa_attention_partials_size(a, &x->o, 3);
        void *parts = tu_alloc(psz, 1);
        assert_true(psz > 0);
        for (int p = 0; p < 3; p++)
            TU_ASSERT_STATUS(pa_attention_run_keys(a, &x->o, p, 3, parts, ws, wsz, &err),
                             PA_STATUS_OK, &err);
        TU_ASSERT_STATUS(pa_attention_merge(a, &x->o, 3, parts, &err), PA_STATUS_OK, &err);
        free(parts);
    }
    free(ws);
}

typedef struct pcase {
    pa_scheme_type type;
    int Lq, Lk, H, Hkv, D, Dv, pt;
    bool prerotated, causal, masks;
} pcase;

static void check_case(const pcase *c, uint64_t seed)
{
    fixture f;
    tu_rng r;
    paged kp, vp;
    pa_attention a;
    float *sinks = NULL, *bias = NULL;
    uint8_t *mask = NULL;
    const int Dv = c->Dv ? c->Dv : c->D;
    tu_rng_seed(&r, seed);
    setup_qkv(&f, c->type, c->Lq, c->Lk, c->H, c->Hkv, c->D, c->Dv, seed);
    add_tables(&f, c->H, c->D, Dv, seed);
    f.a.causal = c->causal;
    f.a.k_prerotated = c->prerotated;
    if (c->masks) {
        sinks = rand_tensor(&r, (size_t)c->H, -1, 1);
        bias = rand_tensor(&r, (size_t)c->Lq * c->Lk, -0.5, 0.5);
        mask = rand_mask(&r, (size_t)c->H * c->Lq * c->Lk, 0.85);
        f.a.sinks = sinks;
        f.a.bias = bias;
        f.a.bias_heads = 1;
        f.a.mask = mask;
        f.a.mask_heads = c->H;
        f.a.window = c->Lk / 2;
        f.a.key_length = c->Lk - 5;
    }
    page_out(&kp, f.k, c->Lk, (size_t)c->Hkv * c->D, c->pt, &r);
    page_out(&vp, f.v, c->Lk, (size_t)c->Hkv * Dv, c->pt, &r);
    a = f.a;
    a.k = a.v = NULL;
    a.k_pages = kp.pages;
    a.v_pages = vp.pages;
    a.page_tokens = c->pt;
    for (int how = WHOLE; how <= KEYS; how++) {
        outs x, y;
        const bool keys = how == KEYS;
        if (keys && pa_attention_partials_size(&f.a, &(pa_attention_out){0}, 3) == 0)
            continue; /* this call does not split by keys */
        outs_alloc(&x, &f.a, !keys || c->Lq <= 8);
        outs_alloc(&y, &f.a, !keys || c->Lq <= 8);
        run(&f.a, &x, how);
        run(&a, &y, how);
        same_bits(&x, &y, how == WHOLE ? "run" : how == PARTS ? "run_part" : "run_keys");
        outs_free(&x);
        outs_free(&y);
    }
    paged_free(&kp);
    paged_free(&vp);
    free(sinks);
    free(bias);
    free(mask);
    fixture_free(&f);
}

static void test_decode(void **state)
{
    (void)state;
    static const pcase cases[] = {
        {PA_SCHEME_NONE, 1, 300, 4, 2, 16, 0, 16, .causal = false},
        {PA_SCHEME_ROPE, 1, 257, 8, 2, 32, 0, 32, .prerotated = true, .causal = true},
        {PA_SCHEME_ROPE, 3, 200, 4, 4, 16, 8, 16, .causal = true, .masks = true},
        {PA_SCHEME_ALIBI, 8, 130, 4, 1, 16, 24, 64, .causal = true, .masks = true},
        {PA_SCHEME_T5, 2, 95, 2, 2, 8, 0, 48, .causal = true},
        {PA_SCHEME_XPOS, 1, 77, 2, 1, 16, 0, 16, .causal = false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], 7100 + i);
}

static void test_prefill(void **state)
{
    (void)state;
    static const pcase cases[] = {
        {PA_SCHEME_ROPE, 70, 70, 4, 2, 16, 0, 16, .causal = true},
        {PA_SCHEME_ROPE, 20, 150, 2, 2, 16, 8, 32, .prerotated = true, .masks = true},
        {PA_SCHEME_SHAW, 40, 50, 2, 1, 8, 0, 16, .causal = true},
        {PA_SCHEME_ALIBI, 65, 300, 4, 4, 8, 16, 64, .masks = true},
        {PA_SCHEME_NONE, 9, 33, 2, 1, 8, 0, 16, .causal = false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], 7200 + i);
}

/* A paged call against the double reference too (on the gathered rows, as
 * the contiguous call's check): the pages are read at the right rows. */
static void test_reference(void **state)
{
    (void)state;
    fixture f;
    tu_rng r;
    paged kp, vp;
    outs y;
    double *want;
    tu_rng_seed(&r, 7300);
    setup_qkv(&f, PA_SCHEME_ROPE, 2, 100, 4, 2, 16, 0, 7300);
    f.a.causal = true;
    want = tu_alloc((size_t)2 * 4 * 16, sizeof(double));
    ref_attention(&f.a, want, NULL, NULL, NULL, NULL);
    page_out(&kp, f.k, 100, 2 * 16, 16, &r);
    page_out(&vp, f.v, 100, 2 * 16, 16, &r);
    f.a.k = f.a.v = NULL;
    f.a.k_pages = kp.pages;
    f.a.v_pages = vp.pages;
    f.a.page_tokens = 16;
    outs_alloc(&y, &f.a, false);
    run(&f.a, &y, WHOLE);
    TU_ASSERT_CLOSE(y.o.output, want, y.n[0], ATOL, RTOL);
    outs_free(&y);
    free(want);
    paged_free(&kp);
    paged_free(&vp);
    f.a.k = f.k; /* fixture_free frees its own */
    fixture_free(&f);
}

static void expect(const pa_attention *a, pa_status st, const char *field)
{
    pa_error err = {0};
    assert_int_equal(pa_attention_check(a, &err), st);
    if (strcmp(err.field, field) != 0)
        fail_msg("field %s, want %s (%s)", err.field, field, err.message);
}

static void test_errors(void **state)
{
    (void)state;
    fixture f;
    const float *pages[4] = {NULL, NULL, NULL, NULL};
    float one[64 * 2 * 8] = {0}, w = 1.0f;
    pa_attention a;
    setup_qkv(&f, PA_SCHEME_NONE, 2, 40, 2, 2, 8, 0, 7400);
    a = f.a;
    a.k_pages = pages;
    expect(&a, PA_STATUS_INVALID_ARGUMENT, "k"); /* k and pages */
    a.k = a.v = NULL;
    expect(&a, PA_STATUS_INVALID_ARGUMENT, "v_pages");
    a.v_pages = pages;
    a.page_tokens = 24;
    expect(&a, PA_STATUS_INVALID_ARGUMENT, "page_tokens");
    a.page_tokens = 16;
    expect(&a, PA_STATUS_INVALID_ARGUMENT, "k_pages"); /* page 0 is NULL */
    pages[0] = pages[1] = one;
    expect(&a, PA_STATUS_INVALID_ARGUMENT, "k_pages"); /* 40 keys fill 3 pages */
    pages[2] = one;
    expect(&a, PA_STATUS_OK, "");
    a.k_norm = &w;
    a.k_norm_len = 8;
    a.k_norm_eps = 1e-6f;
    expect(&a, PA_STATUS_UNSUPPORTED, "k_norm");
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("paged", tests, NULL, NULL);
}
