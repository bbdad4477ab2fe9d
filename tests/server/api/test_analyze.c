/* test_analyze.c - POST /v1/analyze (server/api/analyze.c) without HTTP:
 * permutation, decomposition (with the options too), rope_offset,
 * similarity and rope_spectrum against the core library and the references,
 * the errors, and results that leave float32 (one of them /v1/encode's).
 * Requests go through tests/api_harness.c (tolerance 1e-6 + 1e-6 |want|).
 * The extrapolation analysis has its own file, test_extrapolation.c.
 */
#include "api_harness.h"
#include "api/api.h"
#include "ref_rope.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

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

    /* xpos: its own analysis (the decay by offset), with its parameters. */
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"xpos\",\"scale_base\":8},"
               "\"q\":[0.5,-1,0.25,2],\"k\":[1,0.5,-0.5,0.75]}",
               &lim, &status);
    if (status != 200)
        fail_msg("%s", str_at(ans, "error", "message"));
    pa_scheme_init(&s, PA_SCHEME_XPOS);
    s.xpos.scale_base = 8.0;
    TU_ASSERT_STATUS(pa_analyze_xpos_offset(&s.xpos, 4, q, k, offsets, 33, 16, positions, 64, score,
                                            spread, &err),
                     PA_STATUS_OK, &err);
    result_is(ans, "score", score, 33);
    result_is(ans, "spread", spread, 33);
    cJSON_Delete(ans);
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"xpos\"},\"q\":[1,2,3],"
               "\"k\":[1,2,3]}",
               &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "head_dim");
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

/* rope_spectrum: every column from the reference's inv_freq (double) by
 * its definition, the bands, the defaults and the errors. */
/* rope_spectrum of proportional: zero frequencies have an infinite
 * wavelength (null in JSON), no rotations and no full period. */
static void test_analyze_rope_spectrum_proportional(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans = call(&srv_ep_analyze,
                      "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"rope\",\"scaling\":"
                      "\"proportional\",\"partial_rotary_factor\":0.5},\"head_dim\":16,"
                      "\"length\":8192,\"train_length\":4096}",
                      &lim, &status);
    expect_ok(ans, status);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ans, "wavelength"), "data");
    const cJSON *rot = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ans, "rotations_length"), "data");
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ans, "full_period_in_training"), "data");
    assert_int_equal(cJSON_GetArraySize(w), 8);
    for (int i = 0; i < 8; i++) {
        if (i < 4) {
            assert_true(cJSON_IsNumber(cJSON_GetArrayItem(w, i)));
        } else {
            assert_true(cJSON_IsNull(cJSON_GetArrayItem(w, i)));
            assert_true(cJSON_GetArrayItem(rot, i)->valuedouble == 0.0);
            assert_int_equal(cJSON_GetArrayItem(full, i)->valueint, 0);
        }
    }
    assert_int_equal(cJSON_GetArrayItem(full, 0)->valueint, 1);
    cJSON_Delete(ans);
}

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

    /* llama3 without original_max_position: its documented default, 8192
     * (GET /v1/schemes: "0 = the default: llama3 8192"), is the train_length. */
    ans = call(&srv_ep_analyze,
               "{\"analysis\":\"rope_spectrum\",\"scheme\":{\"type\":\"rope\",\"scaling\":"
               "\"llama3\",\"factor\":8},\"head_dim\":8}",
               &lim, &status);
    expect_ok(ans, status);
    assert_int_equal((int)num(ans, "train_length"), 8192);
    assert_int_equal((int)num(ans, "length"), 8192);
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
        cmocka_unit_test(test_analyze_permutation),
        cmocka_unit_test(test_analyze_decomposition),
        cmocka_unit_test(test_analyze_rope_offset_and_similarity),
        cmocka_unit_test(test_analyze_and_encode_overflow),
        cmocka_unit_test(test_analyze_rope_spectrum),
        cmocka_unit_test(test_analyze_rope_spectrum_proportional),
        cmocka_unit_test(test_analyze_decomposition_options),
    };
    return cmocka_run_group_tests_name("api_analyze", tests, NULL, NULL);
}
