/* test_api_attention.c - the JSON API (server/api/) without HTTP, POST /v1/attention
 * answers: every output, mixed batches, layer mode, b64 in and out, ids, a
 * large item split into parts; and GET /v1/schemes and the worker
 * workspace. Requests go through tests/api_harness.c (srv_job_prepare, every
 * task on this thread, srv_job_finish, the answer parsed back with cJSON).
 * Numbers are checked against the core library called directly on the same
 * inputs (the JSON round trip of "%.9g" is exact for float32, so the
 * tolerance, 1e-6 + 1e-6 |want|, only absorbs nothing but formatting).
 * Errors are test_api_errors.c; /v1/encode and /v1/analyze are
 * test_encode.c, test_analyze.c and test_extrapolation.c.
 */
#include "api_harness.h"
#include "api/api.h"
#include "api/attention.h"
#include "codec/tensor.h"
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
    ans = call_json(&srv_ep_attention, req, &lim, &status);
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
    ans = call_json(&srv_ep_attention, batch(items, 5), &lim, &status);
    expect_batch_status(ans, status);
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

/* shaw as Hugging Face BERT's relative_key_query (direction query_minus_key,
 * key_term) with GQA and logits, against the library; and Shaw's defaults
 * spelled out answer as their absence does. */
static void test_attention_shaw_bert(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    tu_rng r;
    float *rel_k;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int status;
    cJSON *items[3], *sch, *ans;
    const char *names[] = {"output", "logits"};

    tu_rng_seed(&r, 71);
    qkv_make(&f, 5, 7, 4, 2, 4, 4, 7);
    rel_k = rnd(&r, 13 * 4, -1, 1); /* max_position_embeddings 7: [2*7 - 1, D] */
    sch = scheme_of("{\"type\":\"shaw\",\"max_relative_position\":6,"
                    "\"direction\":\"query_minus_key\",\"key_term\":true}");
    cJSON_AddItemToObject(sch, "rel_k", jtensor(rel_k, 2, 13, 4));
    items[0] = qkv_item(&f, sch);
    cJSON_AddItemToObject(items[0], "return", cJSON_CreateStringArray(names, 2));
    sch = scheme_of("{\"type\":\"shaw\",\"max_relative_position\":6}");
    cJSON_AddItemToObject(sch, "rel_k", jtensor(rel_k, 2, 13, 4));
    items[1] = qkv_item(&f, sch);
    sch = scheme_of("{\"type\":\"shaw\",\"max_relative_position\":6,"
                    "\"direction\":\"key_minus_query\",\"key_term\":false}");
    cJSON_AddItemToObject(sch, "rel_k", jtensor(rel_k, 2, 13, 4));
    items[2] = qkv_item(&f, sch);
    ans = call_json(&srv_ep_attention, batch(items, 3), &lim, &status);
    expect_ok(ans, status);

    pa_scheme_init(&s, PA_SCHEME_SHAW);
    s.shaw.max_relative_position = 6;
    s.shaw.rel_k = rel_k;
    s.shaw.rel_k_rows = 13;
    s.shaw.rel_k_cols = 4;
    s.shaw.direction = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;
    s.shaw.key_term = true;
    qkv_desc(&f, &s, &a);
    lib_run(&a, (size_t)5 * 4 * 4, &want);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    result_is(output_at(ans, 0), "logits", want.logits, want.n_scores);
    lib_free(&want);
    {
        const cJSON *o1 = cJSON_GetObjectItemCaseSensitive(output_at(ans, 1), "output");
        const cJSON *o2 = cJSON_GetObjectItemCaseSensitive(output_at(ans, 2), "output");
        const cJSON *o0 = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "output");
        assert_true(cJSON_Compare(o1, o2, true));
        assert_false(cJSON_Compare(o0, o1, true));
    }
    qkv_free(&f);
    free(rel_k);
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
    ans = call_json(&srv_ep_attention, batch(items, 2), &lim, &status);
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
    ans = call_json(&srv_ep_attention, req, &lim, &status);
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

/* Large b64 answers encoded straight into the final text
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

    for (int i = 0; i < 2; i++) {
        qkv_make(&f[i], L, L, H, H, D, D, 40 + (uint64_t)i);
        items[i] = qkv_item(&f[i], scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(items[i], "return", cJSON_CreateStringArray(ret, 3));
        cJSON_AddBoolToObject(items[i], "causal", i == 1);
    }
    req = batch(items, 2);
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    ans = call_json(&srv_ep_attention, req, &lim, &status);
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
    assert_true(srv_job_prepare(&srv_ep_attention, body, strlen(body), &lim, &job, &reply));
    assert_int_equal(srv_job_task_count(job), 3);
    assert_string_equal(srv_job_task_scheme(job, 1), "rope");
    assert_string_equal(srv_job_task_scheme(job, 2), "none");
    for (size_t t = 3; t-- > 0;)
        srv_job_run_task(job, t, &ws);
    /* The parts overlap: 1000..1100 and 1050..1170 us. */
    srv_job_set_timing(job, 0, 5, 1000, 1100);
    srv_job_set_timing(job, 1, 9, 1050, 1170);
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
        /* Timing of a split item: the longest wait, the wall time from the
         * first part's start to the last one's end, and the summed CPU. */
        const cJSON *timing = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "timing");
        assert_int_equal((int)num(timing, "queue_us"), 9);
        assert_int_equal((int)num(timing, "compute_us"), 170);
        assert_int_equal((int)num(timing, "cpu_us"), 220);
    }
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ans, "errors")));
    lib_free(&want);
    qkv_free(&big);
    qkv_free(&small);
    cJSON_Delete(ans);
}

/* A long decode item (one query row, output only) is split by keys: its
 * parts leave partial states that the last one to finish merges, in either
 * order, into the library's answer (to float rounding). */
static void test_attention_split_decode(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    cJSON *items[1], *body_json, *ans;
    char *body;
    srv_reply reply;
    srv_workspace ws = {NULL, 0};

    lim.parallel_parts = 2;
    qkv_make(&f, 1, 8192, 16, 1, 64, 64, 7); /* 2*8192*64*16 = 16.8 M MACs: split */
    items[0] = qkv_item(&f, scheme_of("{\"type\":\"alibi\"}"));
    cJSON_AddTrueToObject(items[0], "causal");
    body_json = batch(items, 1);
    body = cJSON_PrintUnformatted(body_json);
    cJSON_Delete(body_json);
    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    qkv_desc(&f, &s, &a);
    a.causal = true;
    lib_run(&a, (size_t)f.H * f.Dv, &want);
    for (int order = 0; order < 2; order++) {
        srv_job *job = NULL;
        memset(&reply, 0, sizeof reply);
        assert_true(srv_job_prepare(&srv_ep_attention, body, strlen(body), &lim, &job, &reply));
        assert_int_equal(srv_job_task_count(job), 2);
        srv_job_run_task(job, order == 0 ? 0 : 1, &ws);
        srv_job_run_task(job, order == 0 ? 1 : 0, &ws);
        srv_job_finish(job, &reply);
        srv_job_free(job);
        assert_int_equal(reply.http_status, 200);
        ans = cJSON_ParseWithLength(reply.body, reply.body_len);
        srv_reply_free(&reply);
        result_is(output_at(ans, 0), "output", want.out, want.n_out);
        cJSON_Delete(ans);
    }
    srv_workspace_free(&ws);
    free(body);
    lib_free(&want);
    qkv_free(&f);
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
    srv_endpoint_answer(&srv_ep_schemes, NULL, &reply);
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
        cmocka_unit_test(test_attention_shaw_bert),
        cmocka_unit_test(test_attention_layer_mode),
        cmocka_unit_test(test_attention_b64),
        cmocka_unit_test(test_attention_b64_large),
        cmocka_unit_test(test_id_node_and_prefix),
        cmocka_unit_test(test_attention_split_item),
        cmocka_unit_test(test_attention_split_decode),
        cmocka_unit_test(test_schemes),
        cmocka_unit_test(test_workspace),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
