/* test_api_encode_analyze.c - the JSON API (server/api/) without HTTP,
 * POST /v1/encode (absolute, rope and relative schemes) and POST /v1/analyze
 * (permutation, decomposition, rope offset and similarity), answers and
 * errors. Requests go through tests/api_harness.c; numbers are checked
 * against the core library called directly on the same inputs (tolerance
 * 1e-6 + 1e-6 |want|, see tests/api_harness.h).
 */
#include "api_harness.h"
#include "api/api.h"
#include "api/attention.h"
#include "codec/tensor.h"
#include "ref_attention.h"
#include "ref_rope.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

    ans = call(&srv_ep_encode,
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
    ans = call_json(&srv_ep_encode, req, &lim, &status);
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
    ans = call_json(&srv_ep_encode, req, &lim, &status);
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

    ans = call(&srv_ep_encode,
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
    ans = call(&srv_ep_encode, "{\"scheme\":{\"type\":\"rope\"},\"length\":3}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "dim");
    cJSON_Delete(ans);
    ans = call(&srv_ep_encode,
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
    ans = call(&srv_ep_encode,
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
    ans = call(&srv_ep_encode, "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":3}", &lim, &status);
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
    ans = call_json(&srv_ep_encode, req, &lim, &status);
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
    ans = call(&srv_ep_encode,
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
    ans = call(&srv_ep_encode, "{\"scheme\":{\"type\":\"none\"}}", &lim, &status);
    expect_ok(ans, status);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(ans, "note"));
    cJSON_Delete(ans);

    /* Errors: missing num_heads, a field that does not apply, unknown field. */
    ans = call(&srv_ep_encode, "{\"scheme\":{\"type\":\"alibi\"},\"q_length\":2}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "num_heads");
    cJSON_Delete(ans);
    ans = call(&srv_ep_encode, "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":2,\"dim\":4}", &lim,
               &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "dim");
    cJSON_Delete(ans);
    ans = call(&srv_ep_encode, "{\"scheme\":{\"type\":\"none\"},\"lenght\":4}", &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "lenght");
    cJSON_Delete(ans);
    ans = call(&srv_ep_encode, "{\"scheme\":{\"type\":\"t5\"}}", &lim, &status);
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
    ans = call_json(&srv_ep_analyze, req, &lim, &status);
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
    ans = call_json(&srv_ep_analyze, req, &lim, &status);
    expect_ok(ans, status);
    assert_true(num(ans, "max_abs_diff") < 1e-5);
    cJSON_Delete(ans);

    /* A repeated entry, and return (not an analysis field). */
    req = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(req, "analysis", "permutation");
    perm[1] = 2;
    cJSON_AddItemToObject(req, "permutation", jints(perm, 6));
    ans = call_json(&srv_ep_analyze, req, &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "permutation[1]");
    cJSON_Delete(ans);
    req = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(req, "analysis", "permutation");
    cJSON_AddItemToObject(req, "return", cJSON_CreateArray());
    ans = call_json(&srv_ep_analyze, req, &lim, &status);
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
    ans = call_json(&srv_ep_analyze, req, &lim, &status);
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

/* The options' own signals in /v1/encode: chunk_visible [Lq, Lk] for any
 * scheme with chunk_size (by floor(qpos / C), with causal when asked; the
 * positions negative too), and for M-RoPE the row each frequency reads and
 * the tables from positions [3, n]. */
static void test_encode_options(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans = call(&srv_ep_encode,
                      "{\"scheme\":{\"type\":\"none\"},\"chunk_size\":3,"
                      "\"q_positions\":[-4,-1,0,2,5],\"k_positions\":[-6,-3,-1,0,2,3,6]}",
                      &lim, &status);
    expect_ok(ans, status);
    const int32_t qp[5] = {-4, -1, 0, 2, 5}, kp[7] = {-6, -3, -1, 0, 2, 3, 6};
    const cJSON *vis = cJSON_GetObjectItemCaseSensitive(ans, "chunk_visible");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(vis, "data")), 35);
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 7; j++) {
            int want = floor(qp[i] / 3.0) == floor(kp[j] / 3.0);
            const cJSON *c =
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(vis, "data"), i * 7 + j);
            assert_int_equal((int)c->valuedouble, want);
        }
    }
    cJSON_Delete(ans);
    /* causal too, default positions (Lq = Lk = 6), a relative scheme's
     * bias beside it */
    ans = call(&srv_ep_encode,
               "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":2,\"q_length\":6,"
               "\"chunk_size\":4,\"causal\":true}",
               &lim, &status);
    expect_ok(ans, status);
    shape_is(ans, "bias", 3, 2, 6, 6);
    vis = cJSON_GetObjectItemCaseSensitive(ans, "chunk_visible");
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            assert_int_equal(
                (int)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(vis, "data"), i * 6 + j)
                    ->valuedouble,
                j <= i && i / 4 == j / 4);
    cJSON_Delete(ans);

    /* M-RoPE: rows [3, 3], sections [1, 1, 2] of dim 8 */
    ans = call(&srv_ep_encode,
               "{\"scheme\":{\"type\":\"rope\",\"mrope_section\":[1,1,2]},\"dim\":8,"
               "\"positions\":[[0,1,2],[0,5,5],[0,6,7]]}",
               &lim, &status);
    expect_ok(ans, status);
    const int32_t rows[3][3] = {{0, 1, 2}, {0, 5, 5}, {0, 6, 7}}, row_of[4] = {0, 1, 2, 2};
    const cJSON *mr = cJSON_GetObjectItemCaseSensitive(ans, "mrope_row");
    const cJSON *cs =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ans, "cos"), "data");
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            (int)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(mr, "data"), i)->valuedouble,
            row_of[i]);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 4; i++) {
            double th = rows[row_of[i]][t] * pow(10000.0, -2.0 * i / 8);
            assert_true(fabs(cJSON_GetArrayItem(cs, t * 4 + i)->valuedouble - cos(th)) < 1e-6);
        }
    cJSON_Delete(ans);

    static const struct {
        const char *body, *code, *field;
    } bad[] = {
        {"{\"scheme\":{\"type\":\"none\"},\"causal\":true}", "INVALID_ARGUMENT", "causal"},
        {"{\"scheme\":{\"type\":\"none\"},\"chunk_size\":0,\"q_length\":2}", "INVALID_ARGUMENT",
         "chunk_size"},
        {"{\"scheme\":{\"type\":\"none\"},\"chunk_size\":2}", "INVALID_ARGUMENT", "q_length"},
        {"{\"scheme\":{\"type\":\"rope\",\"mrope_section\":[1,1,2]},\"dim\":8,"
         "\"positions\":[[0,1],[0,1]]}",
         "SHAPE_MISMATCH", "positions"},
        {"{\"scheme\":{\"type\":\"rope\",\"mrope_section\":[1,1,2]},\"dim\":8,\"length\":3,"
         "\"positions\":[[0,1],[0,1],[0,1]]}",
         "SHAPE_MISMATCH", "length"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ans = call(&srv_ep_encode, bad[i].body, &lim, &status);
        expect_error(ans, status, 400, bad[i].code, bad[i].field);
        cJSON_Delete(ans);
    }
}

/* The decomposition with the options: softcap and a bias (content is the
 * capped content logit, the bias is position), masks ignored; content +
 * position still the logits of the same item without masks. */
static void test_analyze_decomposition_options(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    tu_rng r;
    int status;
    const int Lq = 4, Lk = 5, H = 2;
    tu_rng_seed(&r, 41);
    float *bias = rnd(&r, (size_t)Lq * Lk, -1, 1);
    qkv_make(&f, Lq, Lk, H, H, 4, 4, 42);
    for (size_t i = 0; i < (size_t)Lq * H * 4; i++)
        f.q[i] *= 3.0f;
    cJSON *req = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddStringToObject(req, "analysis", "decomposition");
    cJSON_AddNumberToObject(req, "softcap", 1.0);
    cJSON_AddItemToObject(req, "bias", jtensor(bias, 2, Lq, Lk));
    cJSON_AddNumberToObject(req, "chunk_size", 2);
    cJSON_AddTrueToObject(req, "causal");
    cJSON *ans = call_json(&srv_ep_analyze, req, &lim, &status);
    if (status != 200)
        fail_msg("%s", str_at(ans, "error", "message"));

    /* The same item's logits without masks, from /v1/attention's path. */
    pa_scheme s;
    pa_attention a;
    lib_out want;
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    qkv_desc(&f, &s, &a);
    a.softcap = 1.0f;
    a.bias = bias;
    a.bias_heads = 1;
    lib_run(&a, (size_t)Lq * H * 4, &want);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(ans, "content");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(ans, "position");
    size_t n = (size_t)H * Lq * Lk;
    float *cd = tu_alloc(n, sizeof(float)), *pd = tu_alloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) {
        cd[i] = (float)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "data"), (int)i)
                    ->valuedouble;
        pd[i] = (float)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p, "data"), (int)i)
                    ->valuedouble;
        assert_true(fabsf(cd[i]) <= 1.0f); /* capped: |content| < softcap */
        assert_true(fabs(cd[i] + pd[i] - want.logits[i]) <= 1e-5 + 1e-5 * fabs(want.logits[i]));
    }
    free(cd);
    free(pd);
    lib_free(&want);
    cJSON_Delete(ans);
    qkv_free(&f);
    free(bias);
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
    ans = call(&srv_ep_analyze,
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

    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"alibi\"},\"q\":[1,2],"
               "\"k\":[1,2]}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "scheme.type");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
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
        ans = call(&srv_ep_analyze,
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
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"similarity\",\"scheme\":{\"type\":\"rope\"},\"length\":5}", &lim,
               &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "scheme.type");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze, "{\"analysis\":\"entropy\"}", &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "analysis");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"similarity\",\"scheme\":{\"type\":\"sinusoidal\"},\"length\":5,"
               "\"dim\":4,\"q\":[1]}",
               &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "q");
    cJSON_Delete(ans);
}

/* The generator README documents for "inputs": "gaussian", written out
 * again: splitmix64, then Box-Muller pairs (cos, then sin). */
static uint64_t ref_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void ref_gaussian(uint64_t *st, float *out, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(ref_splitmix64(st) >> 11) + 1.0) / 9007199254740992.0;
        double u2 = ((double)(ref_splitmix64(st) >> 11) + 1.0) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1)), t = 2.0 * 3.14159265358979323846 * u2;
        out[i] = (float)(r * cos(t));
        if (i + 1 < n)
            out[i + 1] = (float)(r * sin(t));
    }
}

/* Per head, the mean of want[h, r] over rows [r0, r1) of length L. */
static double band_mean(const double *want, int32_t L, int h, int32_t r0, int32_t r1)
{
    double s = 0.0;
    for (int32_t r = r0; r < r1; r++)
        s += want[(size_t)h * L + r];
    return s / (r1 - r0);
}

/* extrapolation: the bands' means of entropy, distance and far share
 * against the double reference at each length (ALiBi, causal, inputs the
 * documented gaussian ones, also sent as tensors: the same answer); the
 * errors. */
static void test_analyze_extrapolation(void **state)
{
    (void)state;
    enum { LMAX = 40, H = 2, D = 8, T = 16 };
    srv_limits lim = limits();
    int status;
    float q[LMAX * H * D], k[LMAX * H * D], v[LMAX * H * D];
    uint64_t st = 7;
    ref_gaussian(&st, q, sizeof q / sizeof q[0]);
    ref_gaussian(&st, k, sizeof k / sizeof k[0]);
    ref_gaussian(&st, v, sizeof v / sizeof v[0]);

    cJSON *ans = call(&srv_ep_analyze,
                      "{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"alibi\"},"
                      "\"train_length\":16,\"lengths\":[16,40],\"inputs\":\"gaussian\","
                      "\"num_heads\":2,\"head_dim\":8,\"seed\":7,\"id\":\"x\"}",
                      &lim, &status);
    expect_ok(ans, status);
    /* The same inputs as tensors give the same answer. */
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "analysis", "extrapolation");
    cJSON_AddItemToObject(req, "scheme", cJSON_Parse("{\"type\":\"alibi\"}"));
    cJSON_AddNumberToObject(req, "train_length", T);
    cJSON_AddItemToObject(req, "lengths", cJSON_Parse("[16,40]"));
    cJSON_AddItemToObject(req, "q", jtensor(q, 3, LMAX, H, D));
    cJSON_AddItemToObject(req, "k", jtensor(k, 3, LMAX, H, D));
    cJSON_AddItemToObject(req, "v", jtensor(v, 3, LMAX, H, D));
    cJSON_AddTrueToObject(req, "causal");
    cJSON_AddStringToObject(req, "id", "x");
    cJSON *ans2 = call_json(&srv_ep_analyze, req, &lim, &status);
    expect_ok(ans2, status);
    cJSON_DeleteItemFromObject(ans, "timing");
    cJSON_DeleteItemFromObject(ans2, "timing");
    assert_true(cJSON_Compare(ans, ans2, true));
    cJSON_Delete(ans2);

    pa_scheme s;
    pa_attention a;
    pa_scheme_init(&s, PA_SCHEME_ALIBI);
    pa_attention_init(&a, &s);
    a.num_heads = H;
    a.head_dim = D;
    a.q = q;
    a.k = k;
    a.v = v;
    a.causal = true;
    const cJSON *lens = cJSON_GetObjectItemCaseSensitive(ans, "lengths");
    assert_int_equal(cJSON_GetArraySize(lens), 2);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring, "x");
    for (int li = 0; li < 2; li++) {
        const int32_t L = li == 0 ? 16 : 40;
        double ent[H * LMAX], dist[H * LMAX], far[H * LMAX];
        const cJSON *lo = cJSON_GetArrayItem(lens, li);
        const cJSON *bands = cJSON_GetObjectItemCaseSensitive(lo, "bands");
        a.q_len = a.k_len = L;
        ref_attention_stats(&a, ent, dist);
        ref_attention_far_share(&a, T, far);
        assert_int_equal((int)num(lo, "length"), L);
        assert_int_equal(cJSON_GetArraySize(bands), (L + T - 1) / T);
        for (int b = 0; b <= cJSON_GetArraySize(bands); b++) {
            /* b == count: the whole length */
            const bool all = b == cJSON_GetArraySize(bands);
            const cJSON *bo = all ? lo : cJSON_GetArrayItem(bands, b);
            const int32_t r0 = all ? 0 : b * T, r1 = all ? L : (r0 + T < L ? r0 + T : L);
            if (!all) {
                assert_int_equal((int)num(bo, "from"), r0);
                assert_int_equal((int)num(bo, "to"), r1);
            }
            for (int h = 0; h < H; h++) {
                const double *refs[3] = {ent, dist, far};
                const char *names[3] = {"entropy", "distance", "far_share"};
                for (int si = 0; si < 3; si++) {
                    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(bo, names[si]);
                    double got = cJSON_GetArrayItem(arr, h)->valuedouble;
                    double want = band_mean(refs[si], L, h, r0, r1);
                    if (fabs(got - want) > 1e-4 + 1e-4 * fabs(want))
                        fail_msg("length %d band %d head %d %s: got %.9g want %.9g", (int)L, b, h,
                                 names[si], got, want);
                }
            }
        }
    }
    /* Past the training length some weight is far (more than T back). */
    {
        const cJSON *last = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(lens, 1), "bands"), 2);
        assert_true(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(last, "far_share"), 1)
                        ->valuedouble > 0.0);
    }
    cJSON_Delete(ans);

    static const struct {
        const char *body, *code, *field;
    } bad[] = {
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"lengths\":[4],"
         "\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "train_length"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "lengths"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4,0],\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "lengths[1]"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4],\"inputs\":\"uniform\",\"num_heads\":1,\"head_dim\":4}",
         "INVALID_ARGUMENT", "inputs"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4],\"inputs\":\"gaussian\",\"head_dim\":4}",
         "INVALID_ARGUMENT", "num_heads"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
         "\"lengths\":[4],\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":4,"
         "\"q\":[1]}",
         "UNKNOWN_FIELD", "q"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":2,"
         "\"lengths\":[3],\"q\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},\"k\":{\"shape\":"
         "[2,1,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]}}",
         "OUT_OF_RANGE", "lengths"},
        {"{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":2,"
         "\"lengths\":[2],\"q\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},\"k\":{\"shape\":"
         "[2,1,2],\"data\":[1,2,3,4]},\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},"
         "\"key_length\":1}",
         "UNSUPPORTED", "key_length"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ans = call(&srv_ep_analyze, bad[i].body, &lim, &status);
        expect_error(ans, status, 400, bad[i].code, bad[i].field);
        cJSON_Delete(ans);
    }
    /* Bounded like attention: refused before anything is generated. */
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"none\"},\"train_length\":4,"
               "\"lengths\":[4,2000000000],\"inputs\":\"gaussian\",\"num_heads\":8,"
               "\"head_dim\":64}",
               &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", "lengths");
    cJSON_Delete(ans);
}

/* rope_spectrum: every column from the reference's inv_freq (double) by
 * its definition, the bands, the defaults and the errors. */
static void test_analyze_rope_spectrum(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    pa_scheme s;
    double inv[8], inv0[8], af;
    float want[5][8];
    int32_t full[8];
    cJSON *ans = call(&srv_ep_analyze,
                      "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"rope\",\"scaling\":"
                      "\"yarn\",\"factor\":4,\"original_max_position\":4096},\"head_dim\":16,"
                      "\"length\":16384}",
                      &lim, &status);
    expect_ok(ans, status);
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    s.rope.scaling = PA_ROPE_SCALING_YARN;
    s.rope.factor = 4.0;
    s.rope.original_max_position = 4096;
    ref_rope_inv_freq(&s.rope, 16, 16383, inv, &af);
    s.rope.scaling = PA_ROPE_SCALING_NONE;
    ref_rope_inv_freq(&s.rope, 16, 16383, inv0, NULL);
    for (int i = 0; i < 8; i++) {
        double wave = 2.0 * 3.14159265358979323846 / inv[i];
        want[0][i] = (float)inv[i];
        want[1][i] = (float)inv0[i];
        want[2][i] = (float)wave;
        want[3][i] = (float)(4096.0 / wave);
        want[4][i] = (float)(16384.0 / wave);
        full[i] = wave <= 4096.0;
    }
    result_is(ans, "inv_freq", want[0], 8);
    result_is(ans, "inv_freq_unscaled", want[1], 8);
    result_is(ans, "wavelength", want[2], 8);
    result_is(ans, "rotations_train", want[3], 8);
    result_is(ans, "rotations_length", want[4], 8);
    {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(ans, "full_period_in_training"), "data");
        int n_full = 0;
        assert_int_equal(cJSON_GetArraySize(d), 8);
        for (int i = 0; i < 8; i++) {
            assert_int_equal(cJSON_GetArrayItem(d, i)->valueint, full[i]);
            n_full += full[i];
        }
        assert_true(n_full > 0 && n_full < 8); /* the split is there */
    }
    assert_true(fabs(num(ans, "attention_factor") - af) < 1e-12);
    assert_int_equal((int)num(ans, "train_length"), 4096);
    assert_int_equal((int)num(ans, "rotary_dim"), 16);
    {
        /* find_correction_dim of 32 and 1 over 4096, base 1e4, r 16:
         * 2.618 -> 2 and 5.629 -> 6 */
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(ans, "bands");
        assert_true(num(b, "yarn_low") == 2.0 && num(b, "yarn_high") == 6.0);
    }
    cJSON_Delete(ans);

    /* train_length from the request; length defaults to it. */
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"rope\"},\"head_dim\":8,"
               "\"train_length\":100}",
               &lim, &status);
    expect_ok(ans, status);
    assert_int_equal((int)num(ans, "length"), 100);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ans, "bands")), 0);
    cJSON_Delete(ans);

    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"rope\"},\"head_dim\":8}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "train_length");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"alibi\"},\"head_dim\":8}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "scheme.type");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"rope\"},\"train_length\":"
               "64}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "head_dim");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"rope\"},\"head_dim\":8,"
               "\"train_length\":64,\"q\":[1]}",
               &lim, &status);
    expect_error(ans, status, 400, "UNKNOWN_FIELD", "q");
    cJSON_Delete(ans);
}

/* Finite inputs whose results leave float32: an error naming the result,
 * never null (JSON's rendering of inf) in an answer. */
static void test_analyze_and_encode_overflow(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans;

    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"rope\"},"
               "\"q\":[1e19,1e19,1e19,1e19],\"k\":[1e19,1e19,1e19,1e19],\"offsets\":[0]}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "score[0]");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"similarity\",\"scheme\":{\"type\":\"learned\",\"table\":"
               "{\"shape\":[2,2],\"data\":[1,1,3e38,3e38]}},\"length\":2,\"dim\":2}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "similarity");
    cJSON_Delete(ans);
    ans = call(&srv_ep_encode,
               "{\"scheme\":{\"type\":\"rope\",\"attention_factor\":1e300},\"length\":2,"
               "\"dim\":4}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "scheme.attention_factor");
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"decomposition\",\"scheme\":{\"type\":\"learned\",\"table\":"
               "{\"shape\":[1,2],\"data\":[1.2e19,1.2e19]}},\"x\":{\"shape\":[1,2],\"data\":"
               "[1.2e19,1.2e19]},\"num_heads\":1,\"w_q\":{\"shape\":[2,2],\"data\":[1,0,0,1]},"
               "\"w_k\":{\"shape\":[2,2],\"data\":[1,0,0,1]},\"w_v\":{\"shape\":[2,2],"
               "\"data\":[1,0,0,1]}}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "position");
    cJSON_Delete(ans);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_absolute),
        cmocka_unit_test(test_encode_rope),
        cmocka_unit_test(test_encode_relative),
        cmocka_unit_test(test_analyze_permutation),
        cmocka_unit_test(test_analyze_decomposition),
        cmocka_unit_test(test_analyze_rope_offset_and_similarity),
        cmocka_unit_test(test_analyze_and_encode_overflow),
        cmocka_unit_test(test_analyze_rope_spectrum),
        cmocka_unit_test(test_analyze_extrapolation),
        cmocka_unit_test(test_encode_options),
        cmocka_unit_test(test_analyze_decomposition_options),
    };
    return cmocka_run_group_tests_name("api_encode_analyze", tests, NULL, NULL);
}
