/* test_encode.c - POST /v1/encode (server/api/encode.c) without HTTP: the
 * absolute schemes, rope and the relative schemes' biases and indices, the
 * options' own signals (chunk_visible, M-RoPE rows), and the errors.
 * Requests go through tests/api_harness.c; numbers are checked against the
 * core library called directly on the same inputs (tolerance 1e-6 + 1e-6 |want|).
 */
#include "api_harness.h"
#include "api/api.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

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

/* The scalings of issue #31 through /v1/encode: proportional's zero
 * frequencies (cos 1, sin 0 in those columns), ntk_alpha's base. */
static void test_encode_proportional_and_ntk_alpha(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    const int32_t pos[3] = {0, 7, 300};
    static const char *const req[2] = {
        "{\"scheme\":{\"type\":\"rope\",\"scaling\":\"proportional\",\"partial_rotary_factor\":"
        "0.25,\"base\":1000000},\"positions\":[0,7,300],\"dim\":16}",
        "{\"scheme\":{\"type\":\"rope\",\"scaling\":\"ntk_alpha\",\"alpha\":1000,\"rotary_dim\":8},"
        "\"positions\":[0,7,300],\"dim\":16}"};
    for (int k = 0; k < 2; k++) {
        pa_scheme s;
        pa_error err;
        double inv_d[8], af;
        float inv[8], cosw[3 * 8], sinw[3 * 8];
        cJSON *ans = call(&srv_ep_encode, req[k], &lim, &status);
        if (status != 200)
            fail_msg("%s", str_at(ans, "error", "message"));
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        if (k == 0) {
            s.rope.scaling = PA_ROPE_SCALING_PROPORTIONAL;
            s.rope.partial_rotary_factor = 0.25;
            s.rope.base = 1e6;
        } else {
            s.rope.scaling = PA_ROPE_SCALING_NTK_ALPHA;
            s.rope.alpha = 1000;
            s.rope.rotary_dim = 8;
        }
        int half = k == 0 ? 8 : 4;
        TU_ASSERT_STATUS(pa_rope_inv_freq(&s.rope, 16, 300, inv_d, &af, &err), PA_STATUS_OK, &err);
        for (int i = 0; i < half; i++)
            inv[i] = (float)inv_d[i];
        TU_ASSERT_STATUS(pa_rope_cos_sin(&s.rope, 16, pos, 3, 300, cosw, sinw, &err), PA_STATUS_OK,
                         &err);
        result_is(ans, "inv_freq", inv, half);
        result_is(ans, "cos", cosw, 3 * half);
        result_is(ans, "sin", sinw, 3 * half);
        if (k == 0) { /* 2 of 8 pairs rotate */
            assert_true(inv[1] > 0.0f && inv[2] == 0.0f && inv[7] == 0.0f);
            assert_true(cosw[8 + 2] == 1.0f && sinw[8 + 7] == 0.0f && sinw[8 + 1] != 0.0f);
        } else { /* base 1e4 * 1000^(8/6) = 1e8 */
            assert_true(fabs(inv_d[1] - 0.01) < 1e-15);
        }
        cJSON_Delete(ans);
    }
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
    /* BERT's direction: the row of qpos - kpos. */
    ans = call(&srv_ep_encode,
               "{\"scheme\":{\"type\":\"shaw\",\"max_relative_position\":2,"
               "\"direction\":\"query_minus_key\",\"key_term\":true},"
               "\"q_positions\":[0,10],\"k_positions\":[0,1,9]}",
               &lim, &status);
    expect_ok(ans, status);
    {
        static const int want[6] = {2, 1, 0, 4, 4, 3};
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(ans, "index"), "data");
        for (int c = 0; c < 6; c++)
            assert_int_equal((int)cJSON_GetArrayItem(data, c)->valuedouble, want[c]);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_absolute),
        cmocka_unit_test(test_encode_rope),
        cmocka_unit_test(test_encode_proportional_and_ntk_alpha),
        cmocka_unit_test(test_encode_relative),
        cmocka_unit_test(test_encode_options),
    };
    return cmocka_run_group_tests_name("api_encode", tests, NULL, NULL);
}
