/* test_item_options.c - the options of current models in POST /v1/attention
 * (softcap, sinks, chunk_size, mask, bias) without HTTP: JSON and base64
 * forms of each, their answers against the core library called directly on
 * the same descriptor (tolerance 1e-6 + 1e-6 |want|, formatting only), the
 * mask's forms (booleans, 0/1 numbers, one byte per element in b64), a
 * bias with -inf (b64), the request memory they count for, and every error
 * naming its field. Requests go through tests/api_harness.c.
 */
#include "api_harness.h"
#include "codec/base64.h"
#include "ref_attention.h"
#include "ref_half.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* {"shape":[Lq, Lk] or [heads, Lq, Lk], "data":[true/false...] or [0/1...]} */
static cJSON *jmask(const uint8_t *m, int heads, int Lq, int Lk, bool as_bools)
{
    cJSON *t = cJSON_CreateObject(), *shape = cJSON_AddArrayToObject(t, "shape");
    cJSON *data = cJSON_AddArrayToObject(t, "data");
    size_t n = (size_t)heads * Lq * Lk;
    if (heads > 0)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(heads));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(Lq));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(Lk));
    if (heads == 0)
        n = (size_t)Lq * Lk;
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(data, as_bools ? cJSON_CreateBool(m[i]) : cJSON_CreateNumber(m[i]));
    return t;
}

/* {"shape":[...], "b64": one byte per element} */
static cJSON *jmask_b64(const uint8_t *m, int heads, int Lq, int Lk)
{
    size_t n = (size_t)heads * Lq * Lk;
    char *b64 = tu_alloc(srv_b64_encoded_len(n) + 1, 1);
    cJSON *t = cJSON_CreateObject(), *shape = cJSON_AddArrayToObject(t, "shape");
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(heads));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(Lq));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(Lk));
    srv_b64_encode(m, n, b64);
    cJSON_AddStringToObject(t, "b64", b64);
    free(b64);
    return t;
}

/* An item over f with every option; the descriptor a gets the same. */
typedef struct opts {
    float sinks[4];
    uint8_t mask[4 * 5 * 9];
    float bias[5 * 9];
} opts;

static void opts_make(opts *o, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int h = 0; h < 4; h++)
        o->sinks[h] = (float)tu_uniform(&r, -1, 1);
    for (size_t i = 0; i < sizeof o->mask; i++)
        o->mask[i] = tu_uniform(&r, 0, 1) < 0.7;
    for (size_t i = 0; i < sizeof o->bias / sizeof o->bias[0]; i++)
        o->bias[i] = (float)tu_uniform(&r, -2, 2);
}

static void opts_desc(const opts *o, pa_attention *a)
{
    a->softcap = 2.5f;
    a->sinks = o->sinks;
    a->chunk_size = 4;
    a->mask = o->mask;
    a->mask_heads = 4;
    a->bias = o->bias;
    a->bias_heads = 1;
    a->causal = true;
}

/* softcap, sinks, chunk_size, a per-head mask of booleans and a shared bias,
 * with rope and GQA, Lq != Lk; every output against the library. */
static void test_all_options_json(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    opts o;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int status;
    const char *names[] = {"output", "weights", "logits"};
    qkv_make(&f, 5, 9, 4, 2, 8, 8, 4100);
    opts_make(&o, 4101);
    cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddNumberToObject(item, "softcap", 2.5);
    cJSON_AddItemToObject(item, "sinks", jtensor(o.sinks, 1, 4));
    cJSON_AddNumberToObject(item, "chunk_size", 4);
    cJSON_AddItemToObject(item, "mask", jmask(o.mask, 4, 5, 9, true));
    cJSON_AddItemToObject(item, "bias", jtensor(o.bias, 2, 5, 9));
    cJSON_AddTrueToObject(item, "causal");
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(names, 3));
    cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    const cJSON *out = output_at(ans, 0);

    pa_scheme_init(&s, PA_SCHEME_ROPE);
    qkv_desc(&f, &s, &a);
    opts_desc(&o, &a);
    lib_run(&a, (size_t)f.Lq * f.H * f.Dv, &want);
    result_is(out, "output", want.out, want.n_out);
    result_is(out, "weights", want.weights, want.n_scores);
    result_is(out, "logits", want.logits, want.n_scores);

    /* Without the options the answer differs (the request did carry them). */
    pa_attention plain;
    lib_out base;
    qkv_desc(&f, &s, &plain);
    plain.causal = true;
    lib_run(&plain, (size_t)f.Lq * f.H * f.Dv, &base);
    double diff = 0;
    for (size_t i = 0; i < want.n_out; i++)
        diff = fmax(diff, fabs(want.out[i] - base.out[i]));
    assert_true(diff > 1e-2);
    lib_free(&base);
    lib_free(&want);
    cJSON_Delete(ans);
    qkv_free(&f);
}

/* return entropy and distance: [H, Lq] each, equal (within float
 * rounding) to the double reference's -sum w ln w and sum w |qpos - kpos|,
 * with sinks, a mask, custom key positions and softcap; asked for alone
 * (no weights) as well. */
static void test_row_statistics(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    opts o;
    pa_scheme s;
    pa_attention a;
    int status;
    const int32_t kpos[9] = {0, 3, 4, 9, 11, 12, 20, 21, 30};
    const char *names[] = {"entropy", "distance"};
    double re[4 * 5], rd[4 * 5];
    float we[4 * 5], wd[4 * 5];
    qkv_make(&f, 5, 9, 4, 2, 8, 8, 4150);
    opts_make(&o, 4151);
    cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"alibi\"}"));
    cJSON_AddNumberToObject(item, "softcap", 2.5);
    cJSON_AddItemToObject(item, "sinks", jtensor(o.sinks, 1, 4));
    cJSON_AddItemToObject(item, "mask", jmask(o.mask, 4, 5, 9, true));
    cJSON_AddItemToObject(item, "k_positions", jints(kpos, 9));
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(names, 2));
    cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    const cJSON *out = output_at(ans, 0);
    assert_null(cJSON_GetObjectItemCaseSensitive(out, "output"));
    {
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(out, "entropy"), "shape");
        assert_int_equal(cJSON_GetArraySize(shape), 2);
        assert_int_equal(cJSON_GetArrayItem(shape, 0)->valueint, 4);
        assert_int_equal(cJSON_GetArrayItem(shape, 1)->valueint, 5);
    }

    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    qkv_desc(&f, &s, &a);
    opts_desc(&o, &a);
    a.chunk_size = 0;
    a.bias = NULL;
    a.causal = false;
    a.k_positions = kpos;
    ref_attention_stats(&a, re, rd);
    for (int i = 0; i < 20; i++) {
        we[i] = (float)re[i];
        wd[i] = (float)rd[i];
    }
    result_is(out, "entropy", we, 20);
    result_is(out, "distance", wd, 20);
    cJSON_Delete(ans);
    qkv_free(&f);
}

/* The mask as 0/1 numbers (lifted before cJSON), as booleans, and as one
 * byte per element in base64 give the same answer; the bias in base64 may
 * hold -inf, which hides its key. */
static void test_mask_forms_and_bias_b64(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    opts o;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int status;
    const int bshape[3] = {1, 5, 9};
    qkv_make(&f, 5, 9, 4, 4, 4, 4, 4110);
    opts_make(&o, 4111);
    o.bias[3] = -INFINITY;
    o.bias[9 + 1] = -INFINITY;
    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    qkv_desc(&f, &s, &a);
    a.mask = o.mask;
    a.mask_heads = 4;
    a.bias = o.bias;
    a.bias_heads = 1;
    lib_run(&a, (size_t)f.Lq * f.H * f.Dv, &want);
    assert_true(want.weights[3] == 0.0f && want.weights[10] == 0.0f);
    for (int form = 0; form < 3; form++) {
        cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"alibi\"}"));
        const char *names[] = {"output", "weights"};
        cJSON_AddItemToObject(
            item, "mask", form == 2 ? jmask_b64(o.mask, 4, 5, 9) : jmask(o.mask, 4, 5, 9, form));
        cJSON_AddItemToObject(item, "bias", jtensor_b64(o.bias, 3, bshape));
        cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(names, 2));
        cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
        expect_ok(ans, status);
        result_is(output_at(ans, 0), "output", want.out, want.n_out);
        result_is(output_at(ans, 0), "weights", want.weights, want.n_scores);
        cJSON_Delete(ans);
    }
    lib_free(&want);
    qkv_free(&f);
}

/* A mask counts toward the request memory: a limit the plain item fits in
 * refuses the same item with a large mask (413), naming the figures. */
static void test_mask_counts_memory(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    int status;
    const int L = 256;
    uint8_t *m = tu_alloc((size_t)4 * L * L, 1);
    memset(m, 1, (size_t)4 * L * L);
    qkv_make(&f, L, L, 4, 4, 2, 2, 4120);
    lim.max_request_memory = 1u << 20;
    cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    cJSON_Delete(ans);
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddItemToObject(item, "mask", jmask_b64(m, 4, L, L));
    ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", NULL);
    cJSON_Delete(ans);
    free(m);
    qkv_free(&f);
}

/* Each option's bad values: the code and the field of the error. */
static void test_option_errors(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    int status;
    static const struct {
        const char *member, *json, *code, *field;
    } bad[] = {
        {"softcap", "0", "INVALID_ARGUMENT", "inputs[0].softcap"},
        {"softcap", "-1.5", "INVALID_ARGUMENT", "inputs[0].softcap"},
        {"softcap", "\"big\"", "INVALID_ARGUMENT", "inputs[0].softcap"},
        {"softcap", "1e39", "INVALID_ARGUMENT", "inputs[0].softcap"},
        {"chunk_size", "0", "INVALID_ARGUMENT", "inputs[0].chunk_size"},
        {"chunk_size", "2.5", "INVALID_ARGUMENT", "inputs[0].chunk_size"},
        {"sinks", "{\"shape\":[3],\"data\":[1,2,3]}", "SHAPE_MISMATCH", "inputs[0].sinks.shape[0]"},
        {"sinks", "{\"shape\":[2,2],\"data\":[1,2,3,4]}", "SHAPE_MISMATCH",
         "inputs[0].sinks.shape"},
        {"mask", "{\"shape\":[3,3],\"data\":[1,1,1,1,1,1,1,1,1]}", "SHAPE_MISMATCH",
         "inputs[0].mask.shape"},
        {"mask", "{\"shape\":[3,2,2],\"data\":[1,1,1,1,1,1,1,1,1,1,1,1]}", "SHAPE_MISMATCH",
         "inputs[0].mask.shape"},
        {"mask", "{\"shape\":[2,2],\"data\":[1,0,2,1]}", "INVALID_ARGUMENT",
         "inputs[0].mask.data[2]"},
        {"mask", "{\"shape\":[2,2],\"data\":[[true,false],[true,\"yes\"]]}", "INVALID_ARGUMENT",
         "inputs[0].mask.data[1][1]"},
        {"mask", "{\"shape\":[2,2],\"b64\":\"AQACAQ==\"}", "INVALID_ARGUMENT",
         "inputs[0].mask.b64[2]"},
        {"mask", "{\"shape\":[2,2],\"b64\":\"AQAB\"}", "SHAPE_MISMATCH", "inputs[0].mask.b64"},
        {"mask", "{\"shape\":[2,2],\"datatype\":\"FP32\",\"data\":[1,0,0,1]}", "UNSUPPORTED",
         "inputs[0].mask.datatype"},
        {"mask", "{\"ref\":\"m\"}", "INVALID_ARGUMENT", "inputs[0].mask"},
        {"bias", "{\"shape\":[2,3],\"data\":[0,0,0,0,0,0]}", "SHAPE_MISMATCH",
         "inputs[0].bias.shape"},
        /* +inf and NaN in a bias: b64 of 0x7f800000 and 0x7fc00000 */
        {"bias", "{\"shape\":[2,2],\"b64\":\"AAAAAAAAgH8AAAAAAAAAAA==\"}", "OUT_OF_RANGE",
         "inputs[0].bias.b64[1]"},
        {"bias", "{\"shape\":[2,2],\"b64\":\"AAAAAAAAAAAAAMB/AAAAAA==\"}", "OUT_OF_RANGE",
         "inputs[0].bias.b64[2]"},
    };
    qkv_make(&f, 2, 2, 2, 2, 2, 2, 4130);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
        cJSON_AddItemToObject(item, bad[i].member, cJSON_Parse(bad[i].json));
        cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
        expect_batch_status(ans, status);
        expect_item_error(ans, 0, bad[i].code, bad[i].field);
        cJSON_Delete(ans);
    }
    /* -inf is a bias's own value: accepted (b64 of 0xff800000 first). */
    cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddItemToObject(item, "bias",
                          cJSON_Parse("{\"shape\":[2,2],\"b64\":\"AACA/wAAAAAAAAAAAAAAAA==\"}"));
    cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ans, "errors")));
    cJSON_Delete(ans);
    qkv_free(&f);
}

/* q_norm and k_norm (a per-head weight and a whole-projection one), and in
 * layer mode the projection biases with w_o; against the library. */
static void test_norms_and_biases(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int status;
    tu_rng r;
    const char *names[] = {"output", "q_rot", "k_rot"};
    tu_rng_seed(&r, 4150);
    float *wq = rnd(&r, 8, 0.5, 1.5), *wk = rnd(&r, 2 * 8, 0.5, 1.5);
    qkv_make(&f, 5, 7, 4, 2, 8, 8, 4151);
    cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
    cJSON *qn = cJSON_AddObjectToObject(item, "q_norm");
    cJSON_AddItemToObject(qn, "weight", jtensor(wq, 1, 8));
    cJSON *kn = cJSON_AddObjectToObject(item, "k_norm");
    cJSON_AddItemToObject(kn, "weight", jtensor(wk, 1, 16));
    cJSON_AddNumberToObject(kn, "eps", 0.5);
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(names, 3));
    cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    qkv_desc(&f, &s, &a);
    a.q_norm = wq;
    a.q_norm_len = 8;
    a.q_norm_eps = 1e-6f; /* the default */
    a.k_norm = wk;
    a.k_norm_len = 16;
    a.k_norm_eps = 0.5f;
    lib_run(&a, (size_t)f.Lq * f.H * f.Dv, &want);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    result_is(output_at(ans, 0), "q_rot", want.q_rot, want.n_q);
    result_is(output_at(ans, 0), "k_rot", want.k_rot, want.n_k);
    lib_free(&want);
    cJSON_Delete(ans);
    qkv_free(&f);

    /* Layer mode: L=4, d_model=6, H=2, Hkv=1, D=3, d_out=5. */
    float *x = rnd(&r, 4 * 6, -1, 1), *w_q = rnd(&r, 6 * 6, -0.4, 0.4);
    float *w_k = rnd(&r, 6 * 3, -0.4, 0.4), *w_v = rnd(&r, 6 * 3, -0.4, 0.4);
    float *w_o = rnd(&r, 6 * 5, -0.4, 0.4), *b = rnd(&r, 6 + 3 + 3 + 5, -1, 1);
    item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"alibi\"}"));
    cJSON_AddItemToObject(item, "x", jtensor(x, 2, 4, 6));
    cJSON_AddItemToObject(item, "w_q", jtensor(w_q, 2, 6, 6));
    cJSON_AddItemToObject(item, "w_k", jtensor(w_k, 2, 6, 3));
    cJSON_AddItemToObject(item, "w_v", jtensor(w_v, 2, 6, 3));
    cJSON_AddItemToObject(item, "w_o", jtensor(w_o, 2, 6, 5));
    cJSON_AddNumberToObject(item, "num_heads", 2);
    cJSON_AddNumberToObject(item, "num_kv_heads", 1);
    cJSON_AddItemToObject(item, "b_q", jtensor(b, 1, 6));
    cJSON_AddItemToObject(item, "b_k", jtensor(b + 6, 1, 3));
    cJSON_AddItemToObject(item, "b_v", jtensor(b + 9, 1, 3));
    cJSON_AddItemToObject(item, "b_o", jtensor(b + 12, 1, 5));
    cJSON_AddTrueToObject(item, "causal");
    ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    pa_attention_init(&a, &s);
    a.x = x;
    a.seq_len = 4;
    a.d_model = 6;
    a.w_q = w_q;
    a.w_k = w_k;
    a.w_v = w_v;
    a.w_o = w_o;
    a.d_out = 5;
    a.num_heads = 2;
    a.num_kv_heads = 1;
    a.head_dim = 3;
    a.b_q = b;
    a.b_k = b + 6;
    a.b_v = b + 9;
    a.b_o = b + 12;
    a.causal = true;
    lib_run(&a, 4 * 5, &want);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    lib_free(&want);
    cJSON_Delete(ans);

    /* Their errors, each naming its field. */
    static const struct {
        const char *member, *json, *code, *field;
    } bad[] = {
        {"q_norm", "{\"weight\":{\"shape\":[4],\"data\":[1,1,1,1]}}", "SHAPE_MISMATCH",
         "inputs[0].q_norm.weight"},
        {"q_norm", "{\"eps\":1e-6,\"weight_offset\":1}", "INVALID_ARGUMENT",
         "inputs[0].q_norm.weight_offset"},
        {"k_norm", "{\"weight\":{\"shape\":[3],\"data\":[1,1,1]},\"eps\":0}", "INVALID_ARGUMENT",
         "inputs[0].k_norm.eps"},
        {"k_norm", "{\"weight\":{\"shape\":[3],\"data\":[1,1,1]},\"epsilon\":1}", "UNKNOWN_FIELD",
         "inputs[0].k_norm.epsilon"},
        {"b_q", "{\"shape\":[5],\"data\":[1,1,1,1,1]}", "SHAPE_MISMATCH", "inputs[0].b_q.shape[0]"},
        {"b_v", "{\"shape\":[2],\"data\":[1,1]}", "SHAPE_MISMATCH", "inputs[0].b_v.shape[0]"},
        {"b_o", "{\"shape\":[4],\"data\":[1,1,1,1]}", "SHAPE_MISMATCH", "inputs[0].b_o.shape[0]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"none\"}"));
        cJSON_AddItemToObject(item, "x", jtensor(x, 2, 4, 6));
        cJSON_AddItemToObject(item, "w_q", jtensor(w_q, 2, 6, 6));
        cJSON_AddItemToObject(item, "w_k", jtensor(w_k, 2, 6, 3));
        cJSON_AddItemToObject(item, "w_v", jtensor(w_v, 2, 6, 3));
        cJSON_AddItemToObject(item, "w_o", jtensor(w_o, 2, 6, 5));
        cJSON_AddNumberToObject(item, "num_heads", 2);
        cJSON_AddNumberToObject(item, "num_kv_heads", 1);
        cJSON_AddItemToObject(item, bad[i].member, cJSON_Parse(bad[i].json));
        ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
        expect_batch_status(ans, status);
        expect_item_error(ans, 0, bad[i].code, bad[i].field);
        cJSON_Delete(ans);
    }
    free(x);
    free(w_q);
    free(w_k);
    free(w_v);
    free(w_o);
    free(b);
    free(wq);
    free(wk);
}

/* M-RoPE: mrope_section (and mrope_interleaved) in the rope scheme, and
 * q_positions / k_positions as [3, L] rows; against the library. */
static void test_mrope(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int status;
    int32_t qm[3 * 4] = {5, 5, 5, 5, 1, 1, 2, 2, 3, 4, 3, 4};
    int32_t km[3 * 6] = {0, 1, 5, 5, 5, 5, 0, 1, 1, 1, 2, 2, 0, 1, 3, 4, 3, 4};
    qkv_make(&f, 4, 6, 2, 1, 16, 16, 4160);
    for (int inter = 0; inter < 2; inter++) {
        cJSON *item =
            qkv_item(&f, scheme_of(inter ? "{\"type\":\"rope\",\"mrope_section\":[2,3,3],"
                                           "\"mrope_interleaved\":true}"
                                         : "{\"type\":\"rope\",\"mrope_section\":[2,3,3]}"));
        cJSON *qp = cJSON_AddArrayToObject(item, "q_positions");
        cJSON *kp = cJSON_AddArrayToObject(item, "k_positions");
        for (int r = 0; r < 3; r++) {
            cJSON_AddItemToArray(qp, jints(qm + 4 * r, 4));
            cJSON_AddItemToArray(kp, jints(km + 6 * r, 6));
        }
        cJSON_AddTrueToObject(item, "causal");
        cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
        expect_ok(ans, status);
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        s.rope.mrope_section[0] = 2;
        s.rope.mrope_section[1] = 3;
        s.rope.mrope_section[2] = 3;
        s.rope.mrope_interleaved = inter;
        qkv_desc(&f, &s, &a);
        a.q_mrope_positions = qm;
        a.k_mrope_positions = km;
        a.causal = true;
        lib_run(&a, (size_t)f.Lq * f.H * f.Dv, &want);
        result_is(output_at(ans, 0), "output", want.out, want.n_out);
        lib_free(&want);
        cJSON_Delete(ans);
    }
    static const struct {
        const char *scheme, *qpos, *code, *field;
    } bad[] = {
        {"{\"type\":\"rope\"}", "[[0,1,2,3],[0,1,2,3],[0,1,2,3]]", "INVALID_ARGUMENT",
         "inputs[0].q_positions"},
        {"{\"type\":\"rope\",\"mrope_section\":[2,3,3]}", "[[0,1,2,3],[0,1,2,3]]", "SHAPE_MISMATCH",
         "inputs[0].q_positions"},
        {"{\"type\":\"rope\",\"mrope_section\":[2,3,3]}", "[[0,1,2,3],[0,1,2],[0,1,2,3]]",
         "SHAPE_MISMATCH", "inputs[0].q_positions[1]"},
        {"{\"type\":\"rope\",\"mrope_section\":[2,3]}", NULL, "SHAPE_MISMATCH",
         "inputs[0].scheme.mrope_section"},
        {"{\"type\":\"rope\",\"mrope_section\":[2,3,4]}", NULL, "SHAPE_MISMATCH",
         "inputs[0].scheme.mrope_section"},
        {"{\"type\":\"rope\",\"mrope_interleaved\":true}", NULL, "INVALID_ARGUMENT",
         "inputs[0].scheme.mrope_interleaved"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *item = qkv_item(&f, scheme_of(bad[i].scheme));
        if (bad[i].qpos != NULL)
            cJSON_AddItemToObject(item, "q_positions", cJSON_Parse(bad[i].qpos));
        cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
        expect_batch_status(ans, status);
        expect_item_error(ans, 0, bad[i].code, bad[i].field);
        cJSON_Delete(ans);
    }
    qkv_free(&f);
}

/* output_dtype f16 / bf16, for the request or one item: b64 answers hold the
 * type's bytes of the library's float32 results rounded to nearest even
 * (tests/ref_half.c), JSON answers the rounded values, datatype FP16 /
 * BF16; masked logits stay -inf; a finite value the type cannot hold is the
 * item's OUT_OF_RANGE, not an infinity. */
static void test_output_dtype(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int status;
    const char *names[] = {"output", "logits"};
    qkv_make(&f, 3, 5, 2, 2, 4, 4, 4170);
    pa_scheme_init(&s, PA_SCHEME_NONE);
    qkv_desc(&f, &s, &a);
    a.causal = true;
    lib_run(&a, (size_t)3 * 2 * 4, &want);
    for (int v = 0; v < 4; v++) {
        const bool bf = v % 2, b64 = v >= 2;
        cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
        cJSON_AddTrueToObject(item, "causal");
        cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(names, 2));
        if (v == 3) /* the item's own, over the request's */
            cJSON_AddStringToObject(item, "output_dtype", "bf16");
        cJSON *req = batch(&item, 1);
        cJSON_AddStringToObject(req, "output_dtype", v == 3 ? "f16" : bf ? "bf16" : "f16");
        if (b64)
            cJSON_AddStringToObject(req, "output_encoding", "b64");
        cJSON *ans = call_json(&srv_ep_attention, req, &lim, &status);
        expect_ok(ans, status);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "output");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "logits");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "datatype")),
                            bf ? "BF16" : "FP16");
        for (int t = 0; t < 2; t++) {
            const cJSON *tn = t == 0 ? o : l;
            const float *src = t == 0 ? want.out : want.logits;
            size_t n = t == 0 ? want.n_out : want.n_scores;
            if (b64) {
                const char *text =
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tn, "b64"));
                unsigned char *bytes = tu_alloc(2 * n, 1);
                size_t got = 0;
                assert_non_null(text);
                assert_true(srv_b64_decode(text, strlen(text), bytes, 2 * n, &got));
                assert_int_equal(got, 2 * n);
                for (size_t i = 0; i < n; i++) {
                    uint16_t h = (uint16_t)(bytes[2 * i] | bytes[2 * i + 1] << 8);
                    uint16_t w = isinf(src[i]) ? (bf ? 0xff80 : 0xfc00)
                                 : bf          ? ref_bf16_round(src[i])
                                               : ref_f16_round(src[i]);
                    assert_int_equal(h, w);
                }
                free(bytes);
            } else {
                const cJSON *d = cJSON_GetObjectItemCaseSensitive(tn, "data");
                for (size_t i = 0; i < n; i++) {
                    const cJSON *x = cJSON_GetArrayItem(d, (int)i);
                    if (isinf(src[i])) {
                        assert_true(cJSON_IsNull(x)); /* masked */
                        continue;
                    }
                    double w = bf ? ref_bf16_value(ref_bf16_round(src[i]))
                                  : ref_f16_value(ref_f16_round(src[i]));
                    assert_true((float)x->valuedouble == (float)w); /* shortest float32 text */
                }
            }
        }
        cJSON_Delete(ans);
    }
    lib_free(&want);

    /* 1e5 overflows f16 but not bf16. */
    for (size_t i = 0; i < (size_t)5 * 2 * 4; i++)
        f.v[i] = 1e5f;
    for (int bf = 0; bf < 2; bf++) {
        cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
        cJSON_AddStringToObject(item, "output_dtype", bf ? "bf16" : "f16");
        cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
        expect_batch_status(ans, status);
        if (bf) {
            assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ans, "errors")));
        } else {
            expect_item_error(ans, 0, "OUT_OF_RANGE", "inputs[0].output_dtype");
            assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "errors")));
        }
        cJSON_Delete(ans);
    }
    cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(item, "output_dtype", "f64");
    cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].output_dtype");
    cJSON_Delete(ans);
    qkv_free(&f);
}

/* GET /v1/schemes documents every option the parser reads, and the parser
 * reads every option it documents: a wrong type for each is an error on
 * that option's own field, never UNKNOWN_FIELD. */
static void test_schemes_document_options(void **state)
{
    (void)state;
    srv_limits lim = limits();
    srv_reply reply;
    qkv f;
    int status, n = 0;
    const char *want[] = {"softcap",
                          "sinks",
                          "chunk_size",
                          "mask",
                          "bias",
                          "attention_mask",
                          "k_prerotated",
                          "compute_dtype",
                          "q_norm",
                          "k_norm",
                          "attn_temperature_tuning",
                          "logn_scaling",
                          "b_q",
                          "b_k",
                          "b_v",
                          "b_o",
                          "cu_seqlens",
                          "cu_seqlens_k",
                          "differential",
                          "mla"};
    memset(&reply, 0, sizeof reply);
    srv_endpoint_answer(&srv_ep_schemes, &lim, &reply);
    assert_int_equal(reply.http_status, 200);
    cJSON *ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    srv_reply_free(&reply);
    const cJSON *opt;
    qkv_make(&f, 2, 2, 2, 2, 2, 2, 4140);
    cJSON_ArrayForEach(opt, cJSON_GetObjectItemCaseSensitive(ans, "options"))
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opt, "name"));
        char field[64];
        assert_non_null(name);
        assert_string_equal(name, want[n]);
        assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opt, "description")));
        assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opt, "models")));
        assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opt, "kserve")));
        cJSON *item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
        cJSON_AddStringToObject(item, name, "wrong");
        cJSON *res = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
        snprintf(field, sizeof field, "inputs[0].%s", name);
        expect_item_error(res, 0, "INVALID_ARGUMENT", field);
        cJSON_Delete(res);
        n++;
    }
    assert_int_equal(n, (int)(sizeof want / sizeof want[0]));
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(ans, "dtypes");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(dt, "input")), 4);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(dt, "output")), 3);
    /* The shapes table names every tensor of an item and each result. */
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(ans, "shapes");
    static const char *const named[] = {
        "q",      "k",     "v",     "x",      "key_length", "attention_mask", "output", "weights",
        "logits", "q_rot", "k_rot", "k_rope", "c_kv"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        const cJSON *row = cJSON_GetObjectItemCaseSensitive(shapes, named[i]);
        assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "one")));
        assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "batch")));
    }
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(shapes, "q"), "batch")),
                        "[B, Lq, H, D]");
    cJSON_Delete(ans);
    qkv_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_options_json),
        cmocka_unit_test(test_row_statistics),
        cmocka_unit_test(test_mask_forms_and_bias_b64),
        cmocka_unit_test(test_mask_counts_memory),
        cmocka_unit_test(test_option_errors),
        cmocka_unit_test(test_schemes_document_options),
        cmocka_unit_test(test_norms_and_biases),
        cmocka_unit_test(test_mrope),
        cmocka_unit_test(test_output_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
