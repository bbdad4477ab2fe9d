/* test_api.c - the JSON API (server/api*.c) without HTTP: requests go
 * through srv_job_prepare, every task runs on this thread, srv_job_finish
 * renders, and the answer is parsed back with cJSON. Numbers are checked
 * against the core library called directly on the same inputs (the JSON
 * round trip of "%.9g" is exact for float32, so the tolerance, 1e-6 + 1e-6
 * |want|, only absorbs nothing but formatting). Error answers are checked
 * for code, HTTP status and field. The harness is tests/api_harness.c.
 */
#include "api_harness.h"
#include "api.h"
#include "api_internal.h"
#include "tensor.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* POST /v1/attention                                                        */
/* ------------------------------------------------------------------------- */

/* rope with yarn, GQA, causal with a KV cache (Lq < Lk), every output. */
static void test_attention_rope_all_outputs(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int status;
    cJSON *item, *req, *ans;
    const cJSON *o;
    const char *names[] = {"output", "weights", "logits", "q_rot", "k_rot"};

    qkv_make(&f, 3, 7, 4, 2, 8, 6, 1);
    item = qkv_item(&f, scheme_of("{\"type\":\"rope\",\"scaling\":\"yarn\",\"factor\":4,"
                                  "\"original_max_position\":4,\"layout\":\"gptj\"}"));
    cJSON_AddStringToObject(item, "id", "first");
    cJSON_AddTrueToObject(item, "causal");
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(names, 5));
    req = batch(&item, 1);
    ans = call_json(SRV_EP_ATTENTION, req, &lim, &status);
    expect_ok(ans, status);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ans, "errors")));
    o = output_at(ans, 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "id")), "first");

    pa_scheme_init(&s, PA_SCHEME_ROPE);
    s.rope.scaling = PA_ROPE_SCALING_YARN;
    s.rope.factor = 4;
    s.rope.original_max_position = 4;
    s.rope.layout = PA_ROPE_LAYOUT_GPTJ;
    qkv_desc(&f, &s, &a);
    a.causal = true;
    lib_run(&a, (size_t)f.Lq * f.H * f.Dv, &want);
    shape_is(o, "output", 3, 3, 4, 6);
    shape_is(o, "weights", 3, 4, 3, 7);
    shape_is(o, "k_rot", 3, 7, 2, 8);
    result_is(o, "output", want.out, want.n_out);
    result_is(o, "weights", want.weights, want.n_scores);
    result_is(o, "logits", want.logits, want.n_scores); /* masked: null -> -inf */
    result_is(o, "q_rot", want.q_rot, want.n_q);
    result_is(o, "k_rot", want.k_rot, want.n_k);
    assert_true(isinf(want.logits[6]));
    assert_true(num(cJSON_GetObjectItemCaseSensitive(o, "timing"), "compute_us") >= 0);
    lib_free(&want);
    qkv_free(&f);
    cJSON_Delete(ans);
}

/* A batch mixing schemes and sizes, with one invalid item: the others run. */
static void test_attention_mixed_batch(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f0, f1, f2, f3, f4;
    tu_rng r;
    float *t5_table, *rel_k, *rel_v;
    cJSON *items[5], *sch, *ans;
    int status;
    pa_scheme s;
    pa_attention a;
    lib_out want;

    tu_rng_seed(&r, 99);
    qkv_make(&f0, 5, 5, 8, 2, 4, 4, 2); /* alibi, GQA 8/2 */
    qkv_make(&f1, 4, 6, 2, 2, 8, 8, 3); /* t5 */
    qkv_make(&f2, 6, 6, 2, 1, 4, 3, 4); /* shaw, MQA, Dv != D */
    qkv_make(&f3, 2, 2, 8, 3, 4, 4, 5); /* invalid: 3 does not divide 8 */
    qkv_make(&f4, 1, 9, 3, 3, 5, 5, 6); /* none, L = 1 */
    t5_table = rnd(&r, 8 * 2, -1, 1);
    rel_k = rnd(&r, 5 * 4, -1, 1);
    rel_v = rnd(&r, 5 * 3, -1, 1);

    items[0] = qkv_item(&f0, scheme_of("{\"type\":\"alibi\",\"symmetric\":true}"));
    cJSON_AddNumberToObject(items[0], "id", 7);
    cJSON_AddNumberToObject(items[0], "window", 3);
    sch = scheme_of("{\"type\":\"t5\",\"num_buckets\":8,\"max_distance\":16}");
    cJSON_AddItemToObject(sch, "table", jtensor(t5_table, 2, 8, 2));
    items[1] = qkv_item(&f1, sch);
    cJSON_AddItemToObject(items[1], "id", cJSON_Parse("{\"nested\":[1,2]}"));
    cJSON_AddNumberToObject(items[1], "key_length", 4);
    sch = scheme_of("{\"type\":\"shaw\",\"max_relative_position\":2}");
    cJSON_AddItemToObject(sch, "rel_k", jtensor(rel_k, 2, 5, 4));
    cJSON_AddItemToObject(sch, "rel_v", jtensor(rel_v, 2, 5, 3));
    items[2] = qkv_item(&f2, sch);
    items[3] = qkv_item(&f3, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(items[3], "id", "bad");
    items[4] = qkv_item(&f4, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddNumberToObject(items[4], "scale", 0.5);
    ans = call_json(SRV_EP_ATTENTION, batch(items, 5), &lim, &status);
    expect_ok(ans, status);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ans, "outputs")), 5);

    /* The invalid item names the field and the values. */
    expect_item_error(ans, 3, "SHAPE_MISMATCH", "inputs[3].k.shape");
    assert_string_equal(str_at(output_at(ans, 3), "error", "message"),
                        "k.shape[1]=3 does not divide num_heads=8");
    assert_string_equal(
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(output_at(ans, 3), "id")), "bad");
    assert_null(cJSON_GetObjectItemCaseSensitive(output_at(ans, 3), "output"));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(output_at(ans, 2), "id")));
    assert_int_equal((int)num(output_at(ans, 0), "id"), 7);
    {
        cJSON *want_id = cJSON_Parse("{\"nested\":[1,2]}");
        assert_true(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(output_at(ans, 1), "id"),
                                  want_id, true));
        cJSON_Delete(want_id);
    }

    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    s.alibi.symmetric = true;
    qkv_desc(&f0, &s, &a);
    a.window = 3;
    lib_run(&a, (size_t)5 * 8 * 4, &want);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    assert_null(cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "weights"));
    lib_free(&want);

    pa_scheme_init(&s, PA_SCHEME_T5);
    s.t5.num_buckets = 8;
    s.t5.max_distance = 16;
    s.t5.table = t5_table;
    s.t5.table_rows = 8;
    s.t5.table_cols = 2;
    qkv_desc(&f1, &s, &a);
    a.key_length = 4;
    lib_run(&a, (size_t)4 * 2 * 8, &want);
    result_is(output_at(ans, 1), "output", want.out, want.n_out);
    lib_free(&want);

    pa_scheme_init(&s, PA_SCHEME_SHAW);
    s.shaw.max_relative_position = 2;
    s.shaw.rel_k = rel_k;
    s.shaw.rel_k_rows = 5;
    s.shaw.rel_k_cols = 4;
    s.shaw.rel_v = rel_v;
    s.shaw.rel_v_rows = 5;
    s.shaw.rel_v_cols = 3;
    qkv_desc(&f2, &s, &a);
    lib_run(&a, (size_t)6 * 2 * 3, &want);
    result_is(output_at(ans, 2), "output", want.out, want.n_out);
    lib_free(&want);

    pa_scheme_init(&s, PA_SCHEME_NONE);
    qkv_desc(&f4, &s, &a);
    a.scale_set = true;
    a.scale = 0.5f;
    lib_run(&a, (size_t)1 * 3 * 5, &want);
    result_is(output_at(ans, 4), "output", want.out, want.n_out);
    lib_free(&want);

    qkv_free(&f0);
    qkv_free(&f1);
    qkv_free(&f2);
    qkv_free(&f3);
    qkv_free(&f4);
    free(t5_table);
    free(rel_k);
    free(rel_v);
    cJSON_Delete(ans);
}

/* Layer mode: sinusoidal with w_o and explicit positions, learned with an
 * offset and GQA, both against the library. */
static void test_attention_layer_mode(void **state)
{
    (void)state;
    srv_limits lim = limits();
    tu_rng r;
    const int L = 5, dm = 6, H = 2, Hkv = 1, D = 4, Dv = 3, dout = 7;
    float *x, *wq, *wk, *wv, *wo, *table;
    int32_t pos[5] = {3, 4, 5, 6, 7};
    cJSON *items[2], *sch, *ans;
    int status;
    pa_scheme s;
    pa_attention a;
    lib_out want;

    tu_rng_seed(&r, 7);
    x = rnd(&r, (size_t)L * dm, -1, 1);
    wq = rnd(&r, (size_t)dm * H * D, -0.5, 0.5);
    wk = rnd(&r, (size_t)dm * Hkv * D, -0.5, 0.5);
    wv = rnd(&r, (size_t)dm * Hkv * Dv, -0.5, 0.5);
    wo = rnd(&r, (size_t)H * Dv * dout, -0.5, 0.5);
    table = rnd(&r, (size_t)12 * dm, -1, 1);

    for (int i = 0; i < 2; i++) {
        items[i] = cJSON_CreateObject();
        cJSON_AddItemToObject(items[i], "x", jtensor(x, 2, L, dm));
        cJSON_AddItemToObject(items[i], "w_q", jtensor(wq, 2, dm, H * D));
        cJSON_AddItemToObject(items[i], "w_k", jtensor(wk, 2, dm, Hkv * D));
        cJSON_AddItemToObject(items[i], "w_v", jtensor(wv, 2, dm, Hkv * Dv));
        cJSON_AddNumberToObject(items[i], "num_heads", H);
        cJSON_AddNumberToObject(items[i], "num_kv_heads", Hkv);
        cJSON_AddTrueToObject(items[i], "causal");
    }
    cJSON_AddItemToObject(items[0], "scheme",
                          scheme_of("{\"type\":\"sinusoidal\",\"layout\":\"concat\"}"));
    cJSON_AddItemToObject(items[0], "w_o", jtensor(wo, 2, H * Dv, dout));
    cJSON_AddItemToObject(items[0], "q_positions", jints(pos, L));
    sch = scheme_of("{\"type\":\"learned\",\"offset\":2}");
    cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 12, dm));
    cJSON_AddItemToObject(items[1], "scheme", sch);
    cJSON_AddItemToObject(items[1], "k_positions", jints(pos, L));
    ans = call_json(SRV_EP_ATTENTION, batch(items, 2), &lim, &status);
    expect_ok(ans, status);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ans, "errors")));

    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    s.sinusoidal.layout = PA_SINUSOIDAL_LAYOUT_CONCAT;
    pa_attention_init(&a, &s);
    a.num_heads = H;
    a.num_kv_heads = Hkv;
    a.head_dim = D;
    a.v_head_dim = Dv;
    a.x = x;
    a.seq_len = L;
    a.d_model = dm;
    a.w_q = wq;
    a.w_k = wk;
    a.w_v = wv;
    a.w_o = wo;
    a.d_out = dout;
    a.causal = true;
    a.q_positions = pos;
    lib_run(&a, (size_t)L * dout, &want);
    shape_is(output_at(ans, 0), "output", 2, L, dout);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    lib_free(&want);

    pa_scheme_init(&s, PA_SCHEME_LEARNED);
    s.learned.table = table;
    s.learned.rows = 12;
    s.learned.cols = dm;
    s.learned.offset = 2;
    a.w_o = NULL;
    a.d_out = 0;
    a.q_positions = NULL;
    a.k_positions = pos;
    lib_run(&a, (size_t)L * H * Dv, &want);
    shape_is(output_at(ans, 1), "output", 3, L, H, Dv);
    result_is(output_at(ans, 1), "output", want.out, want.n_out);
    lib_free(&want);

    free(x);
    free(wq);
    free(wk);
    free(wv);
    free(wo);
    free(table);
    cJSON_Delete(ans);
}

/* b64 in, b64 out, nested JSON data in. */
static void test_attention_b64(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    cJSON *item, *req, *ans, *nested;
    int status;
    const int qs[3] = {4, 2, 4}, ks[3] = {4, 2, 4};
    const char *ret[] = {"output", "logits"};
    pa_scheme s;
    pa_attention a;
    lib_out want;

    qkv_make(&f, 4, 4, 2, 2, 4, 4, 11);
    item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\",\"rotary_dim\":2}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(f.q, 3, qs));
    cJSON_AddItemToObject(item, "k", jtensor_b64(f.k, 3, ks));
    /* v as nested arrays [4][2][4] */
    nested = cJSON_CreateArray();
    for (int i = 0; i < 4; i++) {
        cJSON *row = cJSON_CreateArray();
        for (int h = 0; h < 2; h++)
            cJSON_AddItemToArray(row, cJSON_CreateFloatArray(f.v + (i * 2 + h) * 4, 4));
        cJSON_AddItemToArray(nested, row);
    }
    {
        cJSON *v = cJSON_CreateObject();
        cJSON_AddItemToObject(v, "shape", cJSON_CreateIntArray(qs, 3));
        cJSON_AddItemToObject(v, "data", nested);
        cJSON_AddStringToObject(v, "datatype", "FP32");
        cJSON_AddItemToObject(item, "v", v);
    }
    cJSON_AddTrueToObject(item, "causal");
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(ret, 2));
    req = batch(&item, 1);
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    ans = call_json(SRV_EP_ATTENTION, req, &lim, &status);
    expect_ok(ans, status);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "output"), "b64"));

    pa_scheme_init(&s, PA_SCHEME_ROPE);
    s.rope.rotary_dim = 2;
    qkv_desc(&f, &s, &a);
    a.causal = true;
    lib_run(&a, (size_t)4 * 2 * 4, &want);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    result_is(output_at(ans, 0), "logits", want.logits, want.n_scores); /* -inf in b64 */
    lib_free(&want);
    qkv_free(&f);
    cJSON_Delete(ans);
}

/* b64 answers large enough to be encoded straight into the final text
 * (srv_defer, tensor.h), two items, several tensors each: every value
 * where it belongs. */
static void test_attention_b64_large(void **state)
{
    (void)state;
    srv_limits lim = limits();
    enum { L = 64, H = 8, D = 64 }; /* output, weights, q_rot: 32768 floats each */
    const char *ret[] = {"output", "weights", "q_rot"};
    cJSON *items[2], *req, *ans;
    qkv f[2];
    int status;

    assert_true((size_t)L * H * D >= SRV_DEFER_MIN_FLOATS);
    for (int i = 0; i < 2; i++) {
        qkv_make(&f[i], L, L, H, H, D, D, 40 + (uint64_t)i);
        items[i] = qkv_item(&f[i], scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(items[i], "return", cJSON_CreateStringArray(ret, 3));
        cJSON_AddBoolToObject(items[i], "causal", i == 1);
    }
    req = batch(items, 2);
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    ans = call_json(SRV_EP_ATTENTION, req, &lim, &status);
    expect_ok(ans, status);
    for (int i = 0; i < 2; i++) {
        pa_scheme s;
        pa_attention a;
        lib_out want;
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        qkv_desc(&f[i], &s, &a);
        a.causal = i == 1;
        lib_run(&a, (size_t)L * H * D, &want);
        result_is(output_at(ans, i), "output", want.out, want.n_out);
        result_is(output_at(ans, i), "weights", want.weights, want.n_scores);
        result_is(output_at(ans, i), "q_rot", want.q_rot, want.n_q);
        lib_free(&want);
        qkv_free(&f[i]);
    }
    cJSON_Delete(ans);
}

/* An echoed id prints exactly as cJSON prints the id sent; the item
 * prefix is "inputs[i]". */
static void test_id_node_and_prefix(void **state)
{
    (void)state;
    static const char *const ids[] = {
        "0",    "-0",   "7",           "-7",   "999999999999999", "-999999999999999",
        "1e15", "1e16", "2.5",         "1e-7", "123456789.5",     "\"x\"",
        "null", "true", "{\"k\":[1]}", "[]",   "4294967296",      "-2147483649"};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        cJSON *id = cJSON_Parse(ids[i]), *echo;
        char *want, *got;
        assert_non_null(id);
        echo = api_id_node(id);
        assert_non_null(echo);
        want = cJSON_PrintUnformatted(id);
        got = cJSON_PrintUnformatted(echo);
        if (strcmp(want, got) != 0)
            fail_msg("id %s: echoed %s, cJSON prints %s", ids[i], got, want);
        cJSON_free(want);
        cJSON_free(got);
        cJSON_Delete(id);
        cJSON_Delete(echo);
    }
    char buf[32];
    assert_string_equal(api_item_prefix(buf, 0), "inputs[0]");
    assert_string_equal(api_item_prefix(buf, 907), "inputs[907]");
    assert_string_equal(api_item_prefix(buf, SIZE_MAX), "inputs[18446744073709551615]");
}

/* Requests wrong at the top level fail as a whole. */
static void test_attention_request_errors(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int status;
        const char *code, *field;
    } cases[] = {
        {"", 400, "MALFORMED_JSON", NULL},
        {"   ", 400, "MALFORMED_JSON", NULL},
        {"{\"inputs\":[", 400, "MALFORMED_JSON", NULL},
        {"{\"inputs\":[]} x", 400, "MALFORMED_JSON", NULL},
        {"{\"inputs\":[]}{}", 400, "MALFORMED_JSON", NULL},
        {"[1,2]", 400, "INVALID_ARGUMENT", NULL},
        {"{}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":{}}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[]}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[{}],\"extra\":1}", 400, "UNKNOWN_FIELD", "extra"},
        {"{\"inputs\":[{}],\"output_encoding\":\"hex\"}", 400, "INVALID_ARGUMENT",
         "output_encoding"},
        {"{\"inputs\":[{}],\"output_encoding\":1}", 400, "INVALID_ARGUMENT", "output_encoding"},
        {"{\"inputs\":[{},{},{}]}", 413, "PAYLOAD_TOO_LARGE", "inputs"},
        {"{\"inputs\":[{}],\"inputs\":[{}]}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":1e999}", 400, "INVALID_ARGUMENT", "inputs"},
    };
    srv_limits lim = limits();
    lim.max_batch_items = 2;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status;
        cJSON *ans = call(SRV_EP_ATTENTION, cases[i].body, &lim, &status);
        expect_error(ans, status, cases[i].status, cases[i].code, cases[i].field);
        cJSON_Delete(ans);
    }
    /* A very deep nesting is malformed (cJSON's limit), not a crash. */
    {
        size_t depth = 10000;
        char *body = tu_alloc(2 * depth + 1, 1);
        int status;
        cJSON *ans;
        memset(body, '[', depth);
        memset(body + depth, ']', depth);
        ans = call(SRV_EP_ATTENTION, body, &lim, &status);
        expect_error(ans, status, 400, "MALFORMED_JSON", NULL);
        cJSON_Delete(ans);
        free(body);
    }
}

/* Items wrong in themselves get their own error; the request answers 200. */
static void test_attention_item_errors(void **state)
{
    (void)state;
#define QKV3                                                                                       \
    "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"                                        \
    "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"                                        \
    "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}"
#define NONE "\"scheme\":{\"type\":\"none\"},"
    static const struct {
        const char *item;
        const char *code, *field, *message_part;
    } cases[] = {
        {"{" NONE QKV3 ",\"foo\":1}", "UNKNOWN_FIELD", "inputs[0].foo", "'foo'"},
        {"{\"scheme\":{\"type\":\"rope\",\"table\":1}," QKV3 "}", "UNKNOWN_FIELD",
         "inputs[0].scheme.table", "scheme 'rope'"},
        {"{\"scheme\":{\"type\":\"rope\",\"base\":\"big\"}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.base", "found string"},
        {"{\"scheme\":{\"type\":\"rope\",\"rotary_dim\":1}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.rotary_dim", "even"},
        {"{\"scheme\":{\"type\":\"rope\",\"factor\":2}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.factor", "scaling"},
        {"{\"scheme\":{\"type\":\"rope\",\"scaling\":\"linear\",\"beta_fast\":2}," QKV3 "}",
         "INVALID_ARGUMENT", "inputs[0].scheme.beta_fast", "yarn"},
        {"{\"scheme\":{\"type\":\"rope\",\"scaling\":\"warp\"}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.scaling", "warp"},
        {"{\"scheme\":{\"type\":\"moon\"}," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme.type",
         "moon"},
        {"{\"scheme\":{}," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme.type", NULL},
        {"{\"scheme\":\"rope\"," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme", "found string"},
        {"{" QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme", "required"},
        {"{\"scheme\":{\"type\":\"none\",\"type\":\"none\"}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.type", "more than once"},
        {"{" NONE QKV3 ",\"causal\":1}", "INVALID_ARGUMENT", "inputs[0].causal", "found number"},
        {"{" NONE QKV3 ",\"window\":1.5}", "INVALID_ARGUMENT", "inputs[0].window", "integer"},
        {"{" NONE QKV3 ",\"key_length\":3e9}", "OUT_OF_RANGE", "inputs[0].key_length", "int32"},
        {"{" NONE QKV3 ",\"key_length\":3}", "OUT_OF_RANGE", "inputs[0].key_length", NULL},
        {"{" NONE QKV3 ",\"window\":-1}", "INVALID_ARGUMENT", "inputs[0].window", NULL},
        {"{" NONE QKV3 ",\"scale\":\"x\"}", "INVALID_ARGUMENT", "inputs[0].scale", "found string"},
        {"{" NONE QKV3 ",\"q_positions\":[0]}", "SHAPE_MISMATCH", "inputs[0].q_positions",
         "q.shape[0]=2"},
        {"{" NONE QKV3 ",\"k_positions\":[0,\"a\"]}", "INVALID_ARGUMENT",
         "inputs[0].k_positions[1]", "found string"},
        {"{" NONE QKV3 ",\"return\":[\"output\",\"attn\"]}", "INVALID_ARGUMENT",
         "inputs[0].return[1]", "attn"},
        {"{" NONE QKV3 ",\"return\":\"output\"}", "INVALID_ARGUMENT", "inputs[0].return", NULL},
        {"{" NONE QKV3 ",\"num_heads\":4}", "SHAPE_MISMATCH", "inputs[0].num_heads",
         "q.shape[1]=2"},
        {"{" NONE QKV3 ",\"x\":{\"shape\":[1,1],\"data\":[1]}}", "INVALID_ARGUMENT", "inputs[0].q",
         "not both"},
        {"{" NONE QKV3 ",\"w_q\":{\"shape\":[1,1],\"data\":[1]}}", "INVALID_ARGUMENT",
         "inputs[0].w_q", "layer"},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}", "INVALID_ARGUMENT",
         "inputs[0].k", NULL},
        {"{" NONE "\"q\":{\"shape\":[2,2],\"data\":[1,2,3,4]},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].q.shape", NULL},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"k\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].k.shape", "k.shape[2]=4 does not equal q.shape[2]=2"},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].v.shape", "v.shape[0]=1"},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7]},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].q.data", NULL},
        {"{" NONE
         "\"q\":{\"shape\":[2,2,2],\"b64\":\"AA!AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}",
         "INVALID_ARGUMENT", NULL, NULL},
        {"{\"scheme\":{\"type\":\"sinusoidal\"}," QKV3 "}", "UNSUPPORTED", "inputs[0].scheme.type",
         "layer mode"},
        {"{\"scheme\":{\"type\":\"t5\"}," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme.table",
         NULL},
        {"{\"scheme\":{\"type\":\"alibi\",\"slopes\":[1]}," QKV3 "}", "SHAPE_MISMATCH",
         "inputs[0].scheme.slopes", NULL},
        {"{\"scheme\":{\"type\":\"alibi\",\"slopes\":[]}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.slopes", "empty"},
        {"{" NONE "\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "INVALID_ARGUMENT", "inputs[0].num_heads", "num_heads"},
        {"{" NONE "\"num_heads\":3,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].w_q.shape", "num_heads=3"},
        {"{" NONE "\"num_heads\":2,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[3,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].w_q.shape", "x.shape[1]=4"},
        {"{\"scheme\":{\"type\":\"learned\",\"table\":{\"shape\":[1,4],\"data\":[1,2,3,4]}},"
         "\"num_heads\":2,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "OUT_OF_RANGE", "inputs[0].k_positions[1]", "outside the learned table"},
        {"7", "INVALID_ARGUMENT", "inputs[0]", "object"},
    };
    srv_limits lim = limits();
    const char *good = "{\"id\":\"ok\"," NONE QKV3 "}";

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i].item) + strlen(good) + 32;
        char *body = tu_alloc(len, 1);
        int status;
        cJSON *ans;
        snprintf(body, len, "{\"inputs\":[%s,%s]}", cases[i].item, good);
        ans = call(SRV_EP_ATTENTION, body, &lim, &status);
        if (status != 200)
            fail_msg("case %zu: status %d (%s)", i, status, str_at(ans, "error", "message"));
        expect_item_error(ans, 0, cases[i].code, cases[i].field);
        if (cases[i].message_part != NULL &&
            strstr(str_at(output_at(ans, 0), "error", "message"), cases[i].message_part) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i,
                     str_at(output_at(ans, 0), "error", "message"), cases[i].message_part);
        /* The valid neighbour still ran. */
        assert_non_null(cJSON_GetObjectItemCaseSensitive(output_at(ans, 1), "output"));
        cJSON_Delete(ans);
        free(body);
    }
#undef QKV3
#undef NONE
}

/* Size limits: results over max_tensor_elements are item errors; a request
 * over max_request_memory is a 413 with the figure. */
static void test_attention_limits(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    cJSON *item, *ans;
    int status;
    const char *ret[] = {"weights"};

    qkv_make(&f, 16, 16, 2, 2, 4, 4, 3);
    lim.max_tensor_elements = 256; /* q, k, v have 128; weights would have 512 */
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(ret, 1));
    ans = call_json(SRV_EP_ATTENTION, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    expect_item_error(ans, 0, "PAYLOAD_TOO_LARGE", "inputs[0].weights");
    cJSON_Delete(ans);

    lim.max_tensor_elements = 100; /* q itself is too big */
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    ans = call_json(SRV_EP_ATTENTION, batch(&item, 1), &lim, &status);
    expect_item_error(ans, 0, "PAYLOAD_TOO_LARGE", "inputs[0].q");
    cJSON_Delete(ans);
    qkv_free(&f);

    /* 768 KB of inputs, 256 KB of output and 2 MB of weights, plus the
     * workspace: over 2 MB (b64, so that parsing the 1 MB body fits). */
    lim = limits();
    lim.max_request_memory = (size_t)2 << 20;
    qkv_make(&f, 512, 512, 2, 2, 64, 64, 4);
    {
        const int shape[3] = {512, 2, 64};
        item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"none\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(f.q, 3, shape));
        cJSON_AddItemToObject(item, "k", jtensor_b64(f.k, 3, shape));
        cJSON_AddItemToObject(item, "v", jtensor_b64(f.v, 3, shape));
        cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(ret, 1));
    }
    ans = call_json(SRV_EP_ATTENTION, batch(&item, 1), &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", NULL);
    assert_string_equal(str_at(ans, "error", "message"), "request needs 4 MB, limit 2 MB");
    cJSON_Delete(ans);

    /* The same as JSON numbers under a 512 KB limit: their floats alone
     * (768 KB, parsed before the tree) are over it. */
    lim.max_request_memory = (size_t)512 << 10;
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    ans = call_json(SRV_EP_ATTENTION, batch(&item, 1), &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", NULL);
    assert_non_null(strstr(str_at(ans, "error", "message"), "to parse"));
    cJSON_Delete(ans);
    qkv_free(&f);
}

/* A large q/k/v item is split into parallel_parts tasks; run in any order they
 * give the library's answer, and the small item beside it stays one task. */
static void test_attention_split_item(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv big, small;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    cJSON *items[2], *body_json, *ans;
    char *body;
    srv_job *job = NULL;
    srv_reply reply;
    srv_workspace ws = {NULL, 0};
    const char *names[] = {"output", "weights", "k_rot"};

    lim.parallel_parts = 2;
    qkv_make(&big, 256, 256, 4, 2, 64, 64, 5); /* 2*256*256*64*4 = 33.5 M MACs: split */
    qkv_make(&small, 3, 3, 1, 1, 4, 4, 6);
    items[0] = qkv_item(&big, scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddTrueToObject(items[0], "causal");
    cJSON_AddItemToObject(items[0], "return", cJSON_CreateStringArray(names, 3));
    items[1] = qkv_item(&small, scheme_of("{\"type\":\"none\"}"));
    body_json = batch(items, 2);
    body = cJSON_PrintUnformatted(body_json);
    cJSON_Delete(body_json);

    memset(&reply, 0, sizeof reply);
    assert_true(srv_job_prepare(SRV_EP_ATTENTION, body, strlen(body), &lim, &job, &reply));
    assert_int_equal(srv_job_task_count(job), 3);
    assert_string_equal(srv_job_task_scheme(job, 1), "rope");
    assert_string_equal(srv_job_task_scheme(job, 2), "none");
    for (size_t t = 3; t-- > 0;)
        srv_job_run_task(job, t, &ws);
    srv_job_set_timing(job, 0, 5, 100);
    srv_job_set_timing(job, 1, 9, 120);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    srv_workspace_free(&ws);
    free(body);
    assert_int_equal(reply.http_status, 200);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    srv_reply_free(&reply);

    pa_scheme_init(&s, PA_SCHEME_ROPE);
    qkv_desc(&big, &s, &a);
    a.causal = true;
    lib_run(&a, (size_t)big.Lq * big.H * big.Dv, &want);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    result_is(output_at(ans, 0), "weights", want.weights, want.n_scores);
    result_is(output_at(ans, 0), "k_rot", want.k_rot, want.n_k);
    {
        /* Timing of a split item: the longest wait, the summed compute. */
        const cJSON *timing = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "timing");
        assert_int_equal((int)num(timing, "queue_us"), 9);
        assert_int_equal((int)num(timing, "compute_us"), 220);
    }
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ans, "errors")));
    lib_free(&want);
    qkv_free(&big);
    qkv_free(&small);
    cJSON_Delete(ans);
}

/* Timing set by the pool wins; timed-out items are TIMEOUT errors. */
static void test_job_timing_and_timeout(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const char *body =
        "{\"inputs\":[{\"scheme\":{\"type\":\"rope\"},"
        "\"q\":{\"shape\":[1,1,2],\"data\":[1,2]},\"k\":{\"shape\":[1,1,2],\"data\":[1,2]},"
        "\"v\":{\"shape\":[1,1,2],\"data\":[1,2]}},"
        "{\"scheme\":{\"type\":\"alibi\"},"
        "\"q\":{\"shape\":[1,1,2],\"data\":[1,2]},\"k\":{\"shape\":[1,1,2],\"data\":[1,2]},"
        "\"v\":{\"shape\":[1,1,2],\"data\":[1,2]}},{\"scheme\":{\"type\":\"t5\"}}]}";
    srv_job *job = NULL;
    srv_reply reply;
    srv_workspace ws = {NULL, 0};
    cJSON *ans;
    const cJSON *timing;

    memset(&reply, 0, sizeof reply);
    assert_true(srv_job_prepare(SRV_EP_ATTENTION, body, strlen(body), &lim, &job, &reply));
    assert_int_equal(srv_job_task_count(job), 3);
    assert_string_equal(srv_job_task_scheme(job, 0), "rope");
    assert_string_equal(srv_job_task_scheme(job, 1), "alibi");
    assert_string_equal(srv_job_task_scheme(job, 2), "t5"); /* invalid, but labelled */
    assert_true(srv_job_task_workspace(job, 0) > 0);
    assert_int_equal(srv_job_task_workspace(job, 2), 0);
    srv_job_run_task(job, 0, &ws);
    srv_job_set_timing(job, 0, 7, 11);
    srv_job_set_timed_out(job, 1);
    srv_job_run_task(job, 2, &ws); /* invalid: a no-op */
    srv_job_finish(job, &reply);
    srv_job_free(job);
    srv_workspace_free(&ws);
    assert_int_equal(reply.http_status, 200);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    srv_reply_free(&reply);
    timing = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "timing");
    assert_int_equal((int)num(timing, "queue_us"), 7);
    assert_int_equal((int)num(timing, "compute_us"), 11);
    expect_item_error(ans, 1, "TIMEOUT", "inputs[1]");
    expect_item_error(ans, 2, "INVALID_ARGUMENT", "inputs[2].q");
    cJSON_Delete(ans);

    /* A single-task endpoint answers 504. */
    body = "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":4}";
    memset(&reply, 0, sizeof reply);
    assert_true(srv_job_prepare(SRV_EP_ENCODE, body, strlen(body), &lim, &job, &reply));
    assert_int_equal(srv_job_task_count(job), 1);
    srv_job_set_timed_out(job, 0);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    assert_int_equal(reply.http_status, 504);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    assert_string_equal(str_at(ans, "error", "code"), "TIMEOUT");
    cJSON_Delete(ans);
    srv_reply_free(&reply);

    /* Out-of-range indices and NULL are harmless. */
    srv_job_free(NULL);
    assert_int_equal(srv_job_task_count(NULL), 0);
    assert_string_equal(srv_job_task_scheme(NULL, 0), "none");
}

/* ------------------------------------------------------------------------- */
/* POST /v1/encode                                                           */
/* ------------------------------------------------------------------------- */

static void test_encode_absolute(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans, *req, *sch;
    int32_t pos[4] = {0, 5, 2, 9};
    float want[4 * 7];
    float *table;
    tu_rng r;
    pa_sinusoidal sin_p = {10000.0, PA_SINUSOIDAL_LAYOUT_CONCAT};
    pa_learned lp;
    pa_error err;

    ans = call(SRV_EP_ENCODE,
               "{\"scheme\":{\"type\":\"sinusoidal\",\"layout\":\"concat\"},"
               "\"positions\":[0,5,2,9],\"dim\":7}",
               &lim, &status);
    expect_ok(ans, status);
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&sin_p, pos, 4, 7, want, &err), PA_STATUS_OK, &err);
    shape_is(ans, "encoding", 2, 4, 7);
    result_is(ans, "encoding", want, 4 * 7);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "scheme")),
                        "sinusoidal");
    cJSON_Delete(ans);

    tu_rng_seed(&r, 5);
    table = rnd(&r, 12 * 3, -1, 1);
    req = cJSON_CreateObject();
    sch = cJSON_AddObjectToObject(req, "scheme");
    cJSON_AddStringToObject(sch, "type", "learned");
    cJSON_AddNumberToObject(sch, "offset", 2);
    cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 12, 3));
    cJSON_AddNumberToObject(req, "length", 4);
    ans = call_json(SRV_EP_ENCODE, req, &lim, &status);
    expect_ok(ans, status);
    lp.table = table;
    lp.rows = 12;
    lp.cols = 3;
    lp.offset = 2;
    {
        int32_t p4[4] = {0, 1, 2, 3};
        TU_ASSERT_STATUS(pa_learned_encode(&lp, p4, 4, want, &err), PA_STATUS_OK, &err);
    }
    result_is(ans, "encoding", want, 4 * 3);
    cJSON_Delete(ans);

    /* A position past the table is a 400 naming it. */
    req = cJSON_CreateObject();
    sch = cJSON_AddObjectToObject(req, "scheme");
    cJSON_AddStringToObject(sch, "type", "learned");
    cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 12, 3));
    cJSON_AddItemToObject(req, "positions", jints(pos, 4));
    pos[3] = 12;
    cJSON_ReplaceItemInObject(req, "positions", jints(pos, 4));
    ans = call_json(SRV_EP_ENCODE, req, &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "positions[3]");
    cJSON_Delete(ans);
    free(table);
}

static void test_encode_rope(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans;
    pa_rope rope;
    pa_scheme s;
    pa_error err;
    int32_t pos[6] = {0, 1, 2, 100, 5000, 3};
    double inv_d[4], af;
    float inv[4], cosw[6 * 4], sinw[6 * 4];

    ans = call(SRV_EP_ENCODE,
               "{\"scheme\":{\"type\":\"rope\",\"scaling\":\"dynamic\",\"factor\":2,"
               "\"original_max_position\":64},\"positions\":[0,1,2,100,5000,3],\"dim\":8}",
               &lim, &status);
    if (status != 200)
        fail_msg("%s", str_at(ans, "error", "message"));
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    rope = s.rope;
    rope.scaling = PA_ROPE_SCALING_DYNAMIC;
    rope.factor = 2;
    rope.original_max_position = 64;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&rope, 8, 5000, inv_d, &af, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 4; i++)
        inv[i] = (float)inv_d[i];
    TU_ASSERT_STATUS(pa_rope_cos_sin(&rope, 8, pos, 6, 5000, cosw, sinw, &err), PA_STATUS_OK, &err);
    result_is(ans, "inv_freq", inv, 4);
    result_is(ans, "cos", cosw, 24);
    result_is(ans, "sin", sinw, 24);
    assert_true(fabs(num(ans, "attention_factor") - af) < 1e-12);
    assert_int_equal((int)num(ans, "rotary_dim"), 8);
    cJSON_Delete(ans);

    /* rope needs dim; odd rotary_dim is the library's error. */
    ans = call(SRV_EP_ENCODE, "{\"scheme\":{\"type\":\"rope\"},\"length\":3}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "dim");
    cJSON_Delete(ans);
    ans = call(SRV_EP_ENCODE,
               "{\"scheme\":{\"type\":\"rope\",\"rotary_dim\":3},\"length\":3,"
               "\"dim\":8}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "scheme.rotary_dim");
    cJSON_Delete(ans);
}

static void test_encode_relative(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans, *req, *sch;
    float slopes[3], *bias, *table;
    pa_alibi al = {8.0, false, NULL, 0};
    pa_error err;
    tu_rng r;
    const int Lq = 2, Lk = 5, H = 3;
    const cJSON *grid;

    /* alibi: slopes and bias [H, Lq, Lk], q positions Lk-Lq .. Lk-1. */
    ans = call(SRV_EP_ENCODE,
               "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":3,\"q_length\":2,\"k_length\":5}",
               &lim, &status);
    expect_ok(ans, status);
    TU_ASSERT_STATUS(pa_alibi_slopes(&al, H, slopes, &err), PA_STATUS_OK, &err);
    result_is(ans, "slopes", slopes, 3);
    bias = tu_alloc((size_t)H * Lq * Lk, sizeof(float));
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Lq; i++)
            for (int j = 0; j < Lk; j++)
                bias[(h * Lq + i) * Lk + j] = -slopes[h] * (float)((Lk - Lq + i) - j);
    shape_is(ans, "bias", 3, H, Lq, Lk);
    result_is(ans, "bias", bias, (size_t)H * Lq * Lk);
    cJSON_Delete(ans);

    /* Slopes alone without lengths. */
    ans = call(SRV_EP_ENCODE, "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":3}", &lim, &status);
    expect_ok(ans, status);
    assert_null(cJSON_GetObjectItemCaseSensitive(ans, "bias"));
    cJSON_Delete(ans);

    /* t5: buckets as an INT32 grid, bias from the table. */
    tu_rng_seed(&r, 8);
    table = rnd(&r, 8 * H, -1, 1);
    req = cJSON_CreateObject();
    sch = cJSON_AddObjectToObject(req, "scheme");
    cJSON_AddStringToObject(sch, "type", "t5");
    cJSON_AddNumberToObject(sch, "num_buckets", 8);
    cJSON_AddNumberToObject(sch, "max_distance", 6);
    cJSON_AddFalseToObject(sch, "bidirectional");
    cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 8, H));
    cJSON_AddNumberToObject(req, "q_length", Lq);
    cJSON_AddNumberToObject(req, "k_length", Lk);
    ans = call_json(SRV_EP_ENCODE, req, &lim, &status);
    expect_ok(ans, status);
    grid = cJSON_GetObjectItemCaseSensitive(ans, "buckets");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(grid, "datatype")),
                        "INT32");
    for (int i = 0; i < Lq; i++) {
        for (int j = 0; j < Lk; j++) {
            int b = pa_t5_bucket(j - (Lk - Lq + i), false, 8, 6);
            int got =
                (int)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(grid, "data"), i * Lk + j)
                    ->valuedouble;
            assert_int_equal(got, b);
            for (int h = 0; h < H; h++)
                bias[(h * Lq + i) * Lk + j] = table[b * H + h];
        }
    }
    result_is(ans, "bias", bias, (size_t)H * Lq * Lk);
    cJSON_Delete(ans);

    /* shaw: index with explicit positions. */
    ans = call(SRV_EP_ENCODE,
               "{\"scheme\":{\"type\":\"shaw\",\"max_relative_position\":2},"
               "\"q_positions\":[0,10],\"k_positions\":[0,1,9]}",
               &lim, &status);
    expect_ok(ans, status);
    {
        const int qp[2] = {0, 10}, kp[3] = {0, 1, 9};
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(ans, "index"), "data");
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                assert_int_equal((int)cJSON_GetArrayItem(data, i * 3 + j)->valuedouble,
                                 pa_shaw_index(kp[j] - qp[i], 2));
    }
    cJSON_Delete(ans);

    /* none: a note. */
    ans = call(SRV_EP_ENCODE, "{\"scheme\":{\"type\":\"none\"}}", &lim, &status);
    expect_ok(ans, status);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(ans, "note"));
    cJSON_Delete(ans);

    /* Errors: missing num_heads, a field that does not apply, unknown field. */
    ans = call(SRV_EP_ENCODE, "{\"scheme\":{\"type\":\"alibi\"},\"q_length\":2}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "num_heads");
    cJSON_Delete(ans);
    ans = call(SRV_EP_ENCODE, "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":2,\"dim\":4}", &lim,
               &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "dim");
    cJSON_Delete(ans);
    ans = call(SRV_EP_ENCODE, "{\"scheme\":{\"type\":\"none\"},\"lenght\":4}", &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "lenght");
    cJSON_Delete(ans);
    ans = call(SRV_EP_ENCODE, "{\"scheme\":{\"type\":\"t5\"}}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "q_length");
    cJSON_Delete(ans);
    free(bias);
    free(table);
}

/* ------------------------------------------------------------------------- */
/* POST /v1/analyze                                                          */
/* ------------------------------------------------------------------------- */

static void test_analyze_permutation(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    cJSON *req, *ans;
    int status;
    int32_t perm[6] = {2, 0, 1, 5, 4, 3};
    pa_scheme s;
    pa_attention a;
    pa_error err;
    size_t ws_size;
    void *ws;
    double want;

    qkv_make(&f, 6, 6, 2, 2, 4, 4, 21);
    req = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddStringToObject(req, "analysis", "permutation");
    cJSON_AddItemToObject(req, "permutation", jints(perm, 6));
    cJSON_AddStringToObject(req, "id", "p");
    ans = call_json(SRV_EP_ANALYZE, req, &lim, &status);
    expect_ok(ans, status);
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    qkv_desc(&f, &s, &a);
    ws_size = pa_permutation_workspace_size(&a);
    ws = tu_alloc(ws_size, 1);
    TU_ASSERT_STATUS(pa_analyze_permutation(&a, perm, ws, ws_size, &want, &err), PA_STATUS_OK,
                     &err);
    assert_true(fabs(num(ans, "max_abs_diff") - want) <= 1e-12);
    assert_true(want > 1e-3);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "id")), "p");
    cJSON_Delete(ans);

    /* Default permutation (reversed); NoPE is equivariant. */
    req = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(req, "analysis", "permutation");
    ans = call_json(SRV_EP_ANALYZE, req, &lim, &status);
    expect_ok(ans, status);
    assert_true(num(ans, "max_abs_diff") < 1e-5);
    cJSON_Delete(ans);

    /* A repeated entry, and return (not an analysis field). */
    req = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(req, "analysis", "permutation");
    perm[1] = 2;
    cJSON_AddItemToObject(req, "permutation", jints(perm, 6));
    ans = call_json(SRV_EP_ANALYZE, req, &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "permutation[1]");
    cJSON_Delete(ans);
    req = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(req, "analysis", "permutation");
    cJSON_AddItemToObject(req, "return", cJSON_CreateArray());
    ans = call_json(SRV_EP_ANALYZE, req, &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "return");
    cJSON_Delete(ans);
    free(ws);
    qkv_free(&f);
}

static void test_analyze_decomposition(void **state)
{
    (void)state;
    srv_limits lim = limits();
    tu_rng r;
    const int L = 4, dm = 6, H = 2, D = 3;
    float *x, *wq, *wk, *wv;
    cJSON *req, *ans;
    int status;
    pa_scheme s;
    pa_attention a;
    pa_error err;
    float *t[6];
    pa_decomposition d;
    size_t n = (size_t)H * L * L, ws_size;
    void *ws;
    const char *names[6] = {"content",          "position",         "content_content",
                            "content_position", "position_content", "position_position"};

    tu_rng_seed(&r, 31);
    x = rnd(&r, (size_t)L * dm, -1, 1);
    wq = rnd(&r, (size_t)dm * H * D, -1, 1);
    wk = rnd(&r, (size_t)dm * H * D, -1, 1);
    wv = rnd(&r, (size_t)dm * H * D, -1, 1);
    req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "analysis", "decomposition");
    cJSON_AddItemToObject(req, "scheme", scheme_of("{\"type\":\"sinusoidal\"}"));
    cJSON_AddItemToObject(req, "x", jtensor(x, 2, L, dm));
    cJSON_AddItemToObject(req, "w_q", jtensor(wq, 2, dm, H * D));
    cJSON_AddItemToObject(req, "w_k", jtensor(wk, 2, dm, H * D));
    cJSON_AddItemToObject(req, "w_v", jtensor(wv, 2, dm, H * D));
    cJSON_AddNumberToObject(req, "num_heads", H);
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    ans = call_json(SRV_EP_ANALYZE, req, &lim, &status);
    if (status != 200)
        fail_msg("%s", str_at(ans, "error", "message"));

    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    pa_attention_init(&a, &s);
    a.num_heads = H;
    a.head_dim = D;
    a.x = x;
    a.seq_len = L;
    a.d_model = dm;
    a.w_q = wq;
    a.w_k = wk;
    a.w_v = wv;
    for (int i = 0; i < 6; i++)
        t[i] = tu_alloc(n, sizeof(float));
    d.content = t[0];
    d.position = t[1];
    d.content_content = t[2];
    d.content_position = t[3];
    d.position_content = t[4];
    d.position_position = t[5];
    ws_size = pa_decompose_workspace_size(&a);
    ws = tu_alloc(ws_size, 1);
    TU_ASSERT_STATUS(pa_analyze_decompose(&a, &d, ws, ws_size, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 6; i++) {
        shape_is(ans, names[i], 3, H, L, L);
        result_is(ans, names[i], t[i], n);
        free(t[i]);
    }
    cJSON_Delete(ans);
    free(ws);
    free(x);
    free(wq);
    free(wk);
    free(wv);
}

static void test_analyze_rope_offset_and_similarity(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans;
    pa_scheme s;
    pa_error err;
    const float q[4] = {0.5f, -1.0f, 0.25f, 2.0f}, k[4] = {1.0f, 0.5f, -0.5f, 0.75f};
    int32_t offsets[33], positions[64];
    float score[33], spread[33];

    /* Defaults: offsets -16..16, base_position and positions start at 16. */
    ans = call(SRV_EP_ANALYZE,
               "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"rope\"},"
               "\"q\":[0.5,-1,0.25,2],\"k\":{\"shape\":[4],\"data\":[1,0.5,-0.5,0.75]}}",
               &lim, &status);
    if (status != 200)
        fail_msg("%s", str_at(ans, "error", "message"));
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    for (int i = 0; i < 33; i++)
        offsets[i] = i - 16;
    for (int i = 0; i < 64; i++)
        positions[i] = 16 + i;
    TU_ASSERT_STATUS(pa_analyze_rope_offset(&s.rope, 4, q, k, offsets, 33, 16, positions, 64, score,
                                            spread, &err),
                     PA_STATUS_OK, &err);
    result_is(ans, "score", score, 33);
    result_is(ans, "spread", spread, 33);
    assert_int_equal((int)num(ans, "base_position"), 16);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ans, "offsets")), 33);
    assert_true(num(ans, "max_spread") < 1e-4);
    cJSON_Delete(ans);

    ans = call(SRV_EP_ANALYZE,
               "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"alibi\"},\"q\":[1,2],"
               "\"k\":[1,2]}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "scheme.type");
    cJSON_Delete(ans);
    ans = call(SRV_EP_ANALYZE,
               "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"rope\"},\"q\":[1,2],"
               "\"k\":[1,2,3,4]}",
               &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "k");
    cJSON_Delete(ans);

    /* Similarity of sinusoidal encodings, with the shift residual. */
    {
        int32_t pos[5] = {0, 1, 2, 3, 4};
        float sim[25];
        double resid;
        size_t ws_size = pa_similarity_workspace_size(5, 6);
        void *ws = tu_alloc(ws_size, 1);
        ans = call(SRV_EP_ANALYZE,
                   "{\"analysis\":\"similarity\",\"scheme\":{\"type\":\"sinusoidal\"},"
                   "\"length\":5,\"dim\":6,\"shift\":3}",
                   &lim, &status);
        expect_ok(ans, status);
        pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
        TU_ASSERT_STATUS(pa_analyze_similarity(&s, pos, 5, 6, 3, ws, ws_size, sim, &resid, &err),
                         PA_STATUS_OK, &err);
        result_is(ans, "similarity", sim, 25);
        assert_true(fabs(num(ans, "shift_residual") - resid) < 1e-12);
        cJSON_Delete(ans);
        free(ws);
    }
    ans = call(SRV_EP_ANALYZE,
               "{\"analysis\":\"similarity\",\"scheme\":{\"type\":\"rope\"},\"length\":5}", &lim,
               &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "scheme.type");
    cJSON_Delete(ans);
    ans = call(SRV_EP_ANALYZE, "{\"analysis\":\"entropy\"}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "analysis");
    cJSON_Delete(ans);
    ans = call(SRV_EP_ANALYZE,
               "{\"analysis\":\"similarity\",\"scheme\":{\"type\":\"sinusoidal\"},\"length\":5,"
               "\"dim\":4,\"q\":[1]}",
               &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "q");
    cJSON_Delete(ans);
}

/* ------------------------------------------------------------------------- */
/* GET /v1/schemes, workspaces                                               */
/* ------------------------------------------------------------------------- */

static void test_schemes(void **state)
{
    (void)state;
    srv_reply reply;
    cJSON *ans;
    const cJSON *schemes, *sc;
    int count = 0;

    memset(&reply, 0, sizeof reply);
    srv_schemes_reply(&reply);
    assert_int_equal(reply.http_status, 200);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    srv_reply_free(&reply);
    schemes = cJSON_GetObjectItemCaseSensitive(ans, "schemes");
    cJSON_ArrayForEach(sc, schemes)
    {
        pa_scheme_type t;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sc, "name"));
        assert_true(pa_scheme_type_from_name(name, &t));
        assert_string_equal(
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sc, "position_site")),
            pa_position_site_name(pa_scheme_position_site(t)));
        if (t == PA_SCHEME_ROPE) {
            const cJSON *p;
            bool saw_base = false;
            cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(sc, "parameters"))
            {
                if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name")),
                           "base") == 0) {
                    saw_base = true;
                    assert_true(num(p, "default") == 10000.0);
                }
            }
            assert_true(saw_base);
            assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(sc, "scalings")),
                             PA_ROPE_SCALING_COUNT);
        }
        count++;
    }
    assert_int_equal(count, PA_SCHEME_COUNT);
    cJSON_Delete(ans);
}

static void test_workspace(void **state)
{
    (void)state;
    srv_workspace ws = {NULL, 0};
    void *p, *q;

    p = srv_workspace_reserve(&ws, 100);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    assert_true(ws.cap >= 100);
    memset(p, 1, 100);
    q = srv_workspace_reserve(&ws, 50); /* kept */
    assert_ptr_equal(p, q);
    q = srv_workspace_reserve(&ws, ws.cap + 1); /* grows */
    assert_non_null(q);
    assert_int_equal((uintptr_t)q % 64, 0);
    assert_true(ws.cap >= 2 * 100); /* doubled */
    memset(q, 2, ws.cap);
    q = srv_workspace_reserve(&ws, (size_t)10 << 20); /* far above: what it asks for */
    assert_non_null(q);
    assert_true(ws.cap >= (size_t)10 << 20 && ws.cap < (size_t)11 << 20);
    memset(q, 3, ws.cap);
    assert_null(srv_workspace_reserve(NULL, 10));
    srv_workspace_free(&ws);
    assert_null(ws.p);
    assert_int_equal(ws.cap, 0);
    srv_workspace_free(&ws);
    srv_workspace_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_rope_all_outputs),
        cmocka_unit_test(test_attention_mixed_batch),
        cmocka_unit_test(test_attention_layer_mode),
        cmocka_unit_test(test_attention_b64),
        cmocka_unit_test(test_attention_b64_large),
        cmocka_unit_test(test_id_node_and_prefix),
        cmocka_unit_test(test_attention_request_errors),
        cmocka_unit_test(test_attention_item_errors),
        cmocka_unit_test(test_attention_limits),
        cmocka_unit_test(test_job_timing_and_timeout),
        cmocka_unit_test(test_attention_split_item),
        cmocka_unit_test(test_encode_absolute),
        cmocka_unit_test(test_encode_rope),
        cmocka_unit_test(test_encode_relative),
        cmocka_unit_test(test_analyze_permutation),
        cmocka_unit_test(test_analyze_decomposition),
        cmocka_unit_test(test_analyze_rope_offset_and_similarity),
        cmocka_unit_test(test_schemes),
        cmocka_unit_test(test_workspace),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
