/* test_api_diff.c - differential attention through the JSON API (server/
 * api/item_diff.c, attention.c's pa_diff_run): /v1/attention against the
 * library's pa_diff_run bit for bit in the JSON numbers (both peers'
 * layouts, lambda given and from the four vectors with depth, a subln
 * weight, rope with causal, GQA, subln off), f16 on the wire with
 * output_dtype f16, the output and weights shapes, and the 400s naming the
 * fields. */
#include "api_harness.h"
#include "ref_half.h"
#include "posattn_diff.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* q [Lq, 2H, D], k [Lk, Hk, D], v by the pairs' layout. */
typedef struct dfix {
    int Lq, Lk, H, Hk, D;
    bool halves;
    float *q, *k, *v;
    int vh, vd; /* v's heads and width */
} dfix;

static void dfix_make(dfix *f, int Lq, int Lk, int H, int Hk, int D, bool halves, uint64_t seed,
                      bool half_round)
{
    tu_rng r;
    float *t[3];
    size_t n[3];
    tu_rng_seed(&r, seed);
    f->Lq = Lq, f->Lk = Lk, f->H = H, f->Hk = Hk, f->D = D, f->halves = halves;
    f->vh = halves ? Hk : Hk / 2;
    f->vd = halves ? D : 2 * D;
    n[0] = (size_t)Lq * 2 * H * D, n[1] = (size_t)Lk * Hk * D, n[2] = (size_t)Lk * f->vh * f->vd;
    for (int i = 0; i < 3; i++) {
        t[i] = rnd(&r, n[i], -1, 1);
        if (half_round) /* values f16 holds exactly: the wire's dtype loses nothing */
            for (size_t j = 0; j < n[i]; j++)
                t[i][j] = (float)ref_f16_value(ref_f16_round(t[i][j]));
    }
    f->q = t[0], f->k = t[1], f->v = t[2];
}

static void dfix_free(dfix *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
}

static cJSON *dfix_item(const dfix *f, const char *scheme, const char *dtype)
{
    cJSON *it = cJSON_CreateObject(), *t[3];
    cJSON_AddItemToObject(it, "scheme", scheme_of(scheme));
    t[0] = jtensor(f->q, 3, f->Lq, 2 * f->H, f->D);
    t[1] = jtensor(f->k, 3, f->Lk, f->Hk, f->D);
    t[2] = jtensor(f->v, 3, f->Lk, f->vh, f->vd);
    for (int i = 0; i < 3; i++) {
        if (dtype != NULL)
            cJSON_AddStringToObject(t[i], "dtype", dtype);
        cJSON_AddItemToObject(it, i == 0 ? "q" : i == 1 ? "k" : "v", t[i]);
    }
    return it;
}

static void dfix_desc(const dfix *f, const pa_scheme *s, pa_attention *a)
{
    pa_attention_init(a, s);
    a->num_heads = 2 * f->H;
    a->num_kv_heads = f->Hk;
    a->head_dim = f->D;
    a->q_len = f->Lq;
    a->k_len = f->Lk;
    a->q = f->q;
    a->k = f->k;
    a->v = f->v;
}

/* The library's answer: out [Lq, H, 2D], w [H, Lq, Lk] (malloc'd). */
static void lib_diff(const pa_attention *a, const pa_differential *d, const dfix *f, float **out,
                     float **w)
{
    pa_error err;
    size_t ws_size = pa_diff_workspace_size(a, d);
    void *ws = tu_alloc(ws_size, 1);
    *out = tu_alloc((size_t)f->Lq * f->H * 2 * f->D, sizeof(float));
    *w = tu_alloc((size_t)f->H * f->Lq * f->Lk, sizeof(float));
    if (pa_diff_run(a, d, *out, *w, ws, ws_size, &err) != PA_STATUS_OK)
        fail_msg("pa_diff_run: %s: %s", err.field, err.message);
    free(ws);
}

/* obj.name's JSON numbers equal want bit for bit, flat data of n values. */
static void exact_is(const cJSON *obj, const char *name, const float *want, size_t n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, name);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(t, "data"), *d;
    size_t i = 0;
    assert_non_null(data);
    cJSON_ArrayForEach(d, data)
    {
        assert_true(i < n);
        if ((float)d->valuedouble != want[i])
            fail_msg("%s[%zu]: got %.9g, want %.9g", name, i, d->valuedouble, (double)want[i]);
        i++;
    }
    assert_int_equal(i, n);
}

static void fail_unless_ok(cJSON *ans, int status)
{
    if (status != 200) {
        char *txt = cJSON_PrintUnformatted(ans);
        fail_msg("status %d: %.600s", status, txt);
    }
}

static cJSON *vec_json(const float *v, int n, bool as_tensor)
{
    return as_tensor ? jtensor(v, 1, n) : cJSON_CreateFloatArray(v, n);
}

typedef struct dcase {
    bool halves, rope, causal, vectors, tensors, weight, subln_off;
    int Lq, Lk, H, Hk, D;
    double lambda, lambda_init;
    int depth; /* with vectors: lambda_init from depth */
} dcase;

static void run_case(const dcase *c, uint64_t seed)
{
    srv_limits lim = limits();
    dfix f;
    pa_scheme s;
    pa_attention a;
    pa_differential d;
    float *out, *w, *vec[4], *sw;
    int status;
    tu_rng r;
    const int D = c->D;

    dfix_make(&f, c->Lq, c->Lk, c->H, c->Hk, D, c->halves, seed, false);
    tu_rng_seed(&r, seed + 1000);
    for (int i = 0; i < 4; i++)
        vec[i] = rnd(&r, (size_t)D, -0.3, 0.3);
    sw = rnd(&r, (size_t)2 * D, 0.5, 1.5);
    pa_scheme_init(&s, c->rope ? PA_SCHEME_ROPE : PA_SCHEME_NONE);
    dfix_desc(&f, &s, &a);
    a.causal = c->causal;
    pa_diff_init(&d);
    d.pairs = c->halves ? PA_DIFF_PAIRS_HALVES : PA_DIFF_PAIRS_INTERLEAVED;
    cJSON *dj = cJSON_CreateObject();
    cJSON_AddStringToObject(dj, "pairs", c->halves ? "halves" : "interleaved");
    if (c->vectors) {
        static const char *const names[4] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"};
        d.lambda_q1 = vec[0], d.lambda_k1 = vec[1], d.lambda_q2 = vec[2], d.lambda_k2 = vec[3];
        d.lambda_init = pa_diff_lambda_init(c->depth);
        for (int i = 0; i < 4; i++)
            cJSON_AddItemToObject(dj, names[i], vec_json(vec[i], D, c->tensors));
        cJSON_AddNumberToObject(dj, "depth", c->depth);
    } else {
        d.lambda = c->lambda;
        d.lambda_init = c->lambda_init;
        cJSON_AddNumberToObject(dj, "lambda", c->lambda);
        cJSON_AddNumberToObject(dj, "lambda_init", c->lambda_init);
    }
    if (c->subln_off) {
        d.subln = false;
        cJSON_AddFalseToObject(dj, "subln");
    }
    if (c->weight) {
        d.subln_weight = sw;
        cJSON_AddItemToObject(dj, "subln_weight", vec_json(sw, 2 * D, c->tensors));
    }
    lib_diff(&a, &d, &f, &out, &w);

    cJSON *item = dfix_item(&f, c->rope ? "{\"type\":\"rope\"}" : "{\"type\":\"none\"}", NULL);
    if (c->causal)
        cJSON_AddTrueToObject(item, "causal");
    cJSON_AddItemToObject(item, "differential", dj);
    cJSON_AddItemToObject(item, "return", cJSON_Parse("[\"output\",\"weights\"]"));
    cJSON *items[1] = {item};
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    fail_unless_ok(ans, status);
    shape_is(output_at(ans, 0), "output", 3, c->Lq, c->H, 2 * D);
    shape_is(output_at(ans, 0), "weights", 3, c->H, c->Lq, c->Lk);
    exact_is(output_at(ans, 0), "output", out, (size_t)c->Lq * c->H * 2 * D);
    exact_is(output_at(ans, 0), "weights", w, (size_t)c->H * c->Lq * c->Lk);
    cJSON_Delete(ans);
    free(out);
    free(w);
    for (int i = 0; i < 4; i++)
        free(vec[i]);
    free(sw);
    dfix_free(&f);
}

static void test_attention_matches_library(void **state)
{
    (void)state;
    const dcase cases[] = {
        /* unilm's layout, lambda given, no scheme; MHA (k's heads = q's). */
        {.Lq = 5, .Lk = 5, .H = 2, .Hk = 4, .D = 8, .lambda = 0.3, .lambda_init = 0.2},
        /* DiffLlama's halves, the same. */
        {.halves = true,
         .Lq = 5,
         .Lk = 5,
         .H = 2,
         .Hk = 4,
         .D = 8,
         .lambda = 0.3,
         .lambda_init = 0.2},
        /* rope, causal, GQA (8 query heads on 2 key heads), lambda from the
         * vectors (number arrays) and depth, a subln weight. */
        {.rope = true,
         .causal = true,
         .vectors = true,
         .weight = true,
         .depth = 3,
         .Lq = 6,
         .Lk = 6,
         .H = 4,
         .Hk = 2,
         .D = 8},
        {.halves = true,
         .rope = true,
         .causal = true,
         .vectors = true,
         .weight = true,
         .depth = 5,
         .Lq = 6,
         .Lk = 6,
         .H = 4,
         .Hk = 2,
         .D = 8},
        /* the vectors as 1-D tensors; decode rows (Lq < Lk) with causal. */
        {.halves = true,
         .rope = true,
         .causal = true,
         .vectors = true,
         .tensors = true,
         .weight = true,
         .depth = 0,
         .Lq = 2,
         .Lk = 7,
         .H = 2,
         .Hk = 2,
         .D = 4},
        {.rope = true,
         .causal = true,
         .vectors = true,
         .tensors = true,
         .weight = true,
         .depth = 1,
         .Lq = 2,
         .Lk = 7,
         .H = 2,
         .Hk = 2,
         .D = 4},
        /* subln off: lambda_init plays no part. */
        {.halves = true,
         .subln_off = true,
         .Lq = 3,
         .Lk = 4,
         .H = 1,
         .Hk = 1,
         .D = 6,
         .lambda = 0.7,
         .lambda_init = 3.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], 50 + i);
}

/* q, k, v sent as f16 (values f16 holds, so the library sees the same
 * floats) with output_dtype f16: the library's output rounded to f16. */
static void test_f16_wire(void **state)
{
    (void)state;
    srv_limits lim = limits();
    for (int halves = 0; halves < 2; halves++) {
        dfix f;
        pa_scheme s;
        pa_attention a;
        pa_differential d;
        float *out, *w;
        int status;
        const size_t n = (size_t)4 * 2 * 8;
        dfix_make(&f, 4, 4, 2, 2, 4, halves, 80 + (uint64_t)halves, true);
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        dfix_desc(&f, &s, &a);
        a.causal = true;
        pa_diff_init(&d);
        d.pairs = halves ? PA_DIFF_PAIRS_HALVES : PA_DIFF_PAIRS_INTERLEAVED;
        d.lambda = 0.5;
        d.lambda_init = pa_diff_lambda_init(2);
        lib_diff(&a, &d, &f, &out, &w);
        for (size_t i = 0; i < n; i++)
            out[i] = (float)ref_f16_value(ref_f16_round(out[i]));
        cJSON *item = dfix_item(&f, "{\"type\":\"rope\"}", "f16");
        cJSON_AddTrueToObject(item, "causal");
        cJSON_AddItemToObject(item, "differential",
                              json_of(halves ? "{\"pairs\":\"halves\",\"lambda\":0.5,\"depth\":2}"
                                             : "{\"lambda\":0.5,\"depth\":2}"));
        cJSON_AddStringToObject(item, "output_dtype", "f16");
        cJSON *items[1] = {item};
        cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        fail_unless_ok(ans, status);
        shape_is(output_at(ans, 0), "output", 3, 4, 2, 8);
        exact_is(output_at(ans, 0), "output", out, n);
        cJSON_Delete(ans);
        free(out);
        free(w);
        dfix_free(&f);
    }
}

/* One item with differential `dj` (and extra members), expected to fail
 * with code at field. */
static void refused(const char *scheme, const char *dj, const char *extra, bool halves_v,
                    const char *code, const char *field)
{
    srv_limits lim = limits();
    dfix f;
    int status;
    char path[64];
    dfix_make(&f, 3, 3, 2, 2, 4, halves_v, 7, false);
    cJSON *item = dfix_item(&f, scheme, NULL);
    cJSON_AddItemToObject(item, "differential", json_of(dj));
    if (extra != NULL) {
        cJSON *x = json_of(extra), *m;
        cJSON_ArrayForEach(m, x)
        {
            cJSON_AddItemToObject(item, m->string, cJSON_Duplicate(m, true));
        }
        cJSON_Delete(x);
    }
    cJSON *items[1] = {item};
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    snprintf(path, sizeof path, "inputs[0].%s", field);
    expect_item_error(ans, 0, code, path);
    cJSON_Delete(ans);
    dfix_free(&f);
}

static void test_refusals(void **state)
{
    (void)state;
    const char *none = "{\"type\":\"none\"}";
    refused(none, "{\"lambda\":0.1,\"lamda_init\":0.2}", NULL, false, "UNKNOWN_FIELD",
            "differential.lamda_init");
    refused(none, "[1]", NULL, false, "INVALID_ARGUMENT", "differential");
    refused(none, "{\"pairs\":\"blocks\",\"lambda\":0.1}", NULL, false, "INVALID_ARGUMENT",
            "differential.pairs");
    refused(none, "{}", NULL, false, "INVALID_ARGUMENT", "differential.lambda");
    refused(none, "{\"lambda\":0.1,\"lambda_q1\":[1,2,3,4]}", NULL, false, "INVALID_ARGUMENT",
            "differential.lambda");
    refused(none, "{\"lambda_q1\":[1,2,3,4],\"lambda_k1\":[1,2,3,4],\"lambda_q2\":[1,2,3,4]}", NULL,
            false, "INVALID_ARGUMENT", "differential.lambda_k2");
    refused(none,
            "{\"lambda_q1\":[1,2,3],\"lambda_k1\":[1,2,3,4],\"lambda_q2\":[1,2,3,4],"
            "\"lambda_k2\":[1,2,3,4]}",
            NULL, false, "SHAPE_MISMATCH", "differential.lambda_q1");
    refused(none, "{\"lambda\":0.1,\"subln_weight\":[1,2,3,4]}", NULL, false, "SHAPE_MISMATCH",
            "differential.subln_weight");
    refused(none, "{\"lambda\":0.1,\"subln\":false,\"subln_weight\":[1,1,1,1,1,1,1,1]}", NULL,
            false, "INVALID_ARGUMENT", "differential.subln_weight");
    refused(none, "{\"lambda\":0.1,\"lambda_init\":0.2,\"depth\":1}", NULL, false,
            "INVALID_ARGUMENT", "differential.depth");
    refused(none, "{\"lambda\":0.1,\"depth\":-1}", NULL, false, "INVALID_ARGUMENT",
            "differential.depth");
    /* The library's own checks, through pa_error. */
    refused(none, "{\"lambda\":0.1,\"lambda_init\":1.5}", NULL, false, "INVALID_ARGUMENT",
            "differential.lambda_init");
    refused(none, "{\"lambda\":0.1,\"subln_eps\":0}", NULL, false, "INVALID_ARGUMENT",
            "differential.subln_eps");
    refused("{\"type\":\"alibi\"}", "{\"lambda\":0.1}", NULL, false, "UNSUPPORTED", "scheme.type");
    refused(none, "{\"lambda\":0.1}", "{\"sinks\":{\"shape\":[2],\"data\":[0.5,0.5]}}", false,
            "UNSUPPORTED", "sinks");
    refused(none, "{\"lambda\":0.1}", "{\"cu_seqlens\":[0,1,3]}", false, "UNSUPPORTED",
            "cu_seqlens");
    refused(none, "{\"lambda\":0.1}",
            "{\"mask\":{\"shape\":[2,3,3],\"data\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}}", false,
            "UNSUPPORTED", "mask");
    refused(none, "{\"lambda\":0.1}", "{\"q_norm\":{}}", false, "UNSUPPORTED", "q_norm");
    refused(none, "{\"lambda\":0.1}", "{\"query_length\":2}", false, "UNSUPPORTED", "query_length");
    /* Results other than output and weights. */
    refused(none, "{\"lambda\":0.1}", "{\"return\":[\"output\",\"logits\"]}", false, "UNSUPPORTED",
            "return");
    refused(none, "{\"lambda\":0.1}", "{\"return\":[\"entropy\"]}", false, "UNSUPPORTED", "return");
    /* v in the other peer's layout: halves' v [3, 2, 4] under interleaved,
     * interleaved's [3, 1, 8] under halves. */
    refused(none, "{\"lambda\":0.1}", NULL, true, "SHAPE_MISMATCH", "v.shape");
    refused(none, "{\"pairs\":\"halves\",\"lambda\":0.1}", NULL, false, "SHAPE_MISMATCH",
            "v.shape");
}

/* Odd head counts, layer mode and batches, with messages that say so. */
static void test_refused_shapes(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    static const struct {
        const char *body, *code, *field, *word;
    } cases[] = {
        {"{\"inputs\":[{\"scheme\":{\"type\":\"none\"},\"q\":{\"shape\":[1,3,2],\"data\":[1,2,3,4,"
         "5,6]},"
         "\"k\":{\"shape\":[1,1,2],\"data\":[1,2]},\"v\":{\"shape\":[1,1,2],\"data\":[1,2]},"
         "\"differential\":{\"pairs\":\"halves\",\"lambda\":0.1}}]}",
         "SHAPE_MISMATCH", "inputs[0].q.shape", "even"},
        {"{\"inputs\":[{\"scheme\":{\"type\":\"none\"},\"q\":{\"shape\":[1,2,2],\"data\":[1,2,3,4]}"
         ","
         "\"k\":{\"shape\":[1,1,2],\"data\":[1,2]},\"v\":{\"shape\":[1,1,4],\"data\":[1,2,3,4]},"
         "\"differential\":{\"lambda\":0.1}}]}",
         "SHAPE_MISMATCH", "inputs[0].k.shape", "even"},
        {"{\"inputs\":[{\"scheme\":{\"type\":\"none\"},\"q\":{\"shape\":[1,1,2,2],\"data\":[1,2,3,"
         "4]},"
         "\"k\":{\"shape\":[1,1,2,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[1,1,1,4],"
         "\"data\":[1,2,3,4]},\"differential\":{\"lambda\":0.1}}]}",
         "UNSUPPORTED", "inputs[0].q.shape", "batch"},
        {"{\"inputs\":[{\"scheme\":{\"type\":\"none\"},\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,"
         "6,7,8]},"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]},"
         "\"num_heads\":2,\"differential\":{\"lambda\":0.1}}]}",
         "UNSUPPORTED", "inputs[0].x", "layer mode"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *ans = call(&srv_ep_attention, cases[i].body, &lim, &status);
        expect_item_error(ans, 0, cases[i].code, cases[i].field);
        const char *msg = str_at(output_at(ans, 0), "error", "message");
        if (msg == NULL || strstr(msg, cases[i].word) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i, msg ? msg : "", cases[i].word);
        cJSON_Delete(ans);
    }
    /* /v1/analyze does not take it. */
    cJSON *ans = call(
        &srv_ep_analyze,
        "{\"inputs\":[{\"scheme\":{\"type\":\"none\"},\"q\":{\"shape\":[1,2,2],\"data\":[1,2,3,4]},"
        "\"k\":{\"shape\":[1,2,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[1,1,4],"
        "\"data\":[1,2,3,4]},\"differential\":{\"lambda\":0.1}}]}",
        &lim, &status);
    assert_int_equal(status, 400);
    cJSON_Delete(ans);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_matches_library),
        cmocka_unit_test(test_f16_wire),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_refused_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
