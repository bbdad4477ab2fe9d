/* test_api_rope2d.c - the rope2d scheme through the JSON API (server/api/
 * scheme.c's parameters, item.c's [2, L] positions, api/encode.c): /v1/
 * attention against the library (both variants, grid with a prefix token
 * and ref_grid, explicit [2, L] rows with Lq != Lk, a batch of [B, 2, L]
 * rows), /v1/encode's tables against the formula written out, the errors
 * with the API's field names, and GET /v1/schemes. */
#include "api_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *rows_json(const int32_t *rows, int n)
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, jints(rows, n));
    cJSON_AddItemToArray(a, jints(rows + n, n));
    return a;
}

static void run_case(const char *scheme_json, const pa_scheme *s, int Lq, int Lk, const int32_t *q2,
                     const int32_t *k2, uint64_t seed)
{
    srv_limits lim = limits();
    qkv f;
    pa_attention a;
    lib_out o;
    int status;
    qkv_make(&f, Lq, Lk, 4, 2, 8, 8, seed);
    qkv_desc(&f, s, &a);
    a.q_positions_2d = q2;
    a.k_positions_2d = k2;
    lib_run(&a, (size_t)Lq * 4 * 8, &o);
    cJSON *item = qkv_item(&f, scheme_of(scheme_json));
    if (q2 != NULL)
        cJSON_AddItemToObject(item, "q_positions", rows_json(q2, Lq));
    if (k2 != NULL)
        cJSON_AddItemToObject(item, "k_positions", rows_json(k2, Lk));
    cJSON_AddItemToObject(item, "return", cJSON_Parse("[\"output\",\"logits\"]"));
    cJSON *items[1] = {item};
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    if (status != 200) {
        char *txt = cJSON_PrintUnformatted(ans);
        fail_msg("status %d: %.400s", status, txt);
    }
    result_is(output_at(ans, 0), "output", o.out, o.n_out);
    result_is(output_at(ans, 0), "logits", o.logits, o.n_scores);
    cJSON_Delete(ans);
    lib_free(&o);
    qkv_free(&f);
}

static void test_attention_matches_library(void **state)
{
    (void)state;
    pa_scheme s;
    int32_t q2[2 * 2] = {1, 3, 2, 0}, k2[2 * 9];
    for (int j = 0; j < 9; j++) {
        k2[j] = j / 3;
        k2[9 + j] = j % 3;
    }
    /* A class token then a 2 x 4 grid, EVA-02's rescaling to a 4 x 4 reference. */
    pa_scheme_init(&s, PA_SCHEME_ROPE2D);
    s.rope2d.grid_rows = 2;
    s.rope2d.grid_cols = 4;
    s.rope2d.ref_rows = s.rope2d.ref_cols = 4;
    s.rope2d.prefix_tokens = 1;
    s.rope2d.grid_offset = 0.5;
    run_case("{\"type\":\"rope2d\",\"grid\":[2,4],\"ref_grid\":[4,4],\"prefix_tokens\":1,"
             "\"grid_offset\":0.5}",
             &s, 9, 9, NULL, NULL, 31);
    /* Pixtral, Hugging Face's layout, explicit rows: 2 queries, 9 keys. */
    pa_scheme_init(&s, PA_SCHEME_ROPE2D);
    s.rope2d.variant = PA_ROPE2D_PIXTRAL;
    s.rope2d.layout = PA_ROPE_LAYOUT_NEOX;
    s.rope2d.base = 100.0;
    run_case("{\"type\":\"rope2d\",\"variant\":\"pixtral\",\"layout\":\"neox\",\"base\":100}", &s,
             2, 9, q2, k2, 32);
    /* DINOv3 (its layout, neox, when the request names none) with a class
     * token before a 2 x 4 grid; Qwen2-VL's 2 x 2 merge order. */
    pa_scheme_init(&s, PA_SCHEME_ROPE2D);
    s.rope2d.variant = PA_ROPE2D_DINOV3;
    s.rope2d.layout = PA_ROPE_LAYOUT_NEOX;
    s.rope2d.base = 100.0;
    s.rope2d.grid_rows = 2;
    s.rope2d.grid_cols = 4;
    s.rope2d.prefix_tokens = 1;
    s.rope2d.normalize = PA_ROPE2D_NORMALIZE_MAX;
    run_case("{\"type\":\"rope2d\",\"variant\":\"dinov3\",\"base\":100,\"grid\":[2,4],"
             "\"prefix_tokens\":1,\"normalize\":\"max\"}",
             &s, 9, 9, NULL, NULL, 33);
    pa_scheme_init(&s, PA_SCHEME_ROPE2D);
    s.rope2d.layout = PA_ROPE_LAYOUT_NEOX;
    s.rope2d.grid_rows = 2;
    s.rope2d.grid_cols = 4;
    s.rope2d.merge_size = 2;
    run_case("{\"type\":\"rope2d\",\"layout\":\"neox\",\"grid\":[2,4],\"merge_size\":2}", &s, 8, 8,
             NULL, NULL, 34);
}

/* RoPE-Mixed: freqs [2, H, D/2] as a tensor; attention equals the library
 * (MHA, as mixed requires), encode gives [H, n, D/2] tables; GQA and a
 * missing table are 400s naming the field. */
static void test_mixed(void **state)
{
    (void)state;
    srv_limits lim = limits();
    float fr[2 * 2 * 4];
    char text[1024];
    size_t used = 0;
    pa_scheme s;
    qkv f;
    pa_attention a;
    lib_out o;
    int status;
    for (int i = 0; i < 16; i++)
        fr[i] = 0.1f * (float)(i + 1) * (i % 3 == 0 ? -1.0f : 1.0f);
    used += (size_t)snprintf(text + used, sizeof text - used,
                             "{\"type\":\"rope2d\",\"variant\":\"mixed\",\"grid\":[2,3],"
                             "\"freqs\":{\"shape\":[2,2,4],\"data\":[");
    for (int i = 0; i < 16; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%.9g", i ? "," : "",
                                 (double)fr[i]);
    snprintf(text + used, sizeof text - used, "]}}");
    pa_scheme_init(&s, PA_SCHEME_ROPE2D);
    s.rope2d.variant = PA_ROPE2D_MIXED;
    s.rope2d.grid_rows = 2;
    s.rope2d.grid_cols = 3;
    s.rope2d.freqs = fr;
    s.rope2d.num_freqs = 16;
    qkv_make(&f, 6, 6, 2, 2, 8, 8, 41);
    qkv_desc(&f, &s, &a);
    lib_run(&a, (size_t)6 * 2 * 8, &o);
    {
        cJSON *item = qkv_item(&f, scheme_of(text));
        cJSON_AddItemToObject(item, "return", cJSON_Parse("[\"output\",\"logits\"]"));
        cJSON *items[1] = {item};
        cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        expect_batch_status(ans, status);
        result_is(output_at(ans, 0), "output", o.out, o.n_out);
        result_is(output_at(ans, 0), "logits", o.logits, o.n_scores);
        cJSON_Delete(ans);
    }
    lib_free(&o);
    qkv_free(&f);
    {
        /* encode: head 1, token 4 = (1, 1): pair 2 turns by fx[1][2] + fy[1][2] */
        char body[1200];
        snprintf(body, sizeof body, "{\"scheme\":%s,\"dim\":8}", text);
        cJSON *ans = call(&srv_ep_encode, body, &lim, &status);
        expect_ok(ans, status);
        shape_is(ans, "cos", 3, 2, 6, 4);
        const cJSON *d =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ans, "cos"), "data");
        const double want = cos((double)fr[1 * 4 + 2] + (double)fr[(2 + 1) * 4 + 2]);
        assert_true(fabs(cJSON_GetArrayItem(d, (1 * 6 + 4) * 4 + 2)->valuedouble - want) < 1e-6);
        cJSON_Delete(ans);
    }
    {
        /* GQA, and no table */
        qkv g;
        qkv_make(&f, 6, 6, 4, 2, 8, 8, 42);
        qkv_make(&g, 6, 6, 2, 2, 8, 8, 43);
        cJSON *items[2] = {qkv_item(&f, scheme_of(text)),
                           qkv_item(&g, scheme_of("{\"type\":\"rope2d\",\"variant\":\"mixed\","
                                                  "\"grid\":[2,3]}"))};
        cJSON *ans = call_json(&srv_ep_attention, batch(items, 2), &lim, &status);
        expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].num_kv_heads");
        expect_item_error(ans, 1, "INVALID_ARGUMENT", "inputs[1].scheme.freqs");
        cJSON_Delete(ans);
        qkv_free(&f);
        qkv_free(&g);
    }
}

/* A batch of two images' tokens with their own [2, L] rows each. */
static void test_batch_rows(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    const char *body = "{\"inputs\":[{\"scheme\":{\"type\":\"rope2d\"},"
                       "\"q\":{\"shape\":[2,2,1,4],\"data\":[1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1]},"
                       "\"k\":{\"shape\":[2,2,1,4],\"data\":[1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1]},"
                       "\"v\":{\"shape\":[2,2,1,4],\"data\":[1,2,3,4, 5,6,7,8, 1,2,3,4, 5,6,7,8]},"
                       "\"q_positions\":[[[0,1],[0,0]],[[0,0],[0,1]]],"
                       "\"k_positions\":[[[0,1],[0,0]],[[0,0],[0,1]]],\"return\":[\"logits\"]}]}";
    cJSON *ans = call(&srv_ep_attention, body, &lim, &status);
    expect_batch_status(ans, status);
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "logits");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(lg, "data");
    assert_int_equal(cJSON_GetArraySize(d), 2 * 1 * 2 * 2);
    /* Axial, D = 4: pair 0 turns by the row, pair 1 by the column (one
     * band each, frequency 1). Sequence 0: k1 = e1 one row down, so q0 .
     * k1 = e0 . R(1) e1 = -sin 1; sequence 1: k1 = e3 one column across,
     * q0 . k1 = e2 . R(1) e3 = -sin 1 too, times scale 1/2. Had sequence 1
     * read sequence 0's rows, e3 would not turn and its logit would be 0. */
    for (int b = 0; b < 2; b++) {
        double l01 = cJSON_GetArrayItem(d, b * 4 + 1)->valuedouble;
        if (fabs(l01 + 0.5 * sin(1.0)) > 1e-6)
            fail_msg("sequence %d: logit q0.k1 %g, want %g", b, l01, -0.5 * sin(1.0));
    }
    cJSON_Delete(ans);
}

static void test_encode(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    /* Pixtral, D = 8, base 100: rows take 100^0 and 100^-1/2, columns
     * 100^-1/4 and 100^-3/4; tokens (0, 2) and (3, 1). */
    const double f[4] = {1.0, 0.1, pow(100.0, -0.25), pow(100.0, -0.75)};
    const int axis[4] = {0, 0, 1, 1};
    const double rc[2][2] = {{0, 2}, {3, 1}};
    float inv[4], cs[8], sn[8];
    for (int p = 0; p < 4; p++) {
        inv[p] = (float)f[p];
        for (int t = 0; t < 2; t++) {
            cs[t * 4 + p] = (float)cos(rc[t][axis[p]] * f[p]);
            sn[t * 4 + p] = (float)sin(rc[t][axis[p]] * f[p]);
        }
    }
    cJSON *ans = call(&srv_ep_encode,
                      "{\"scheme\":{\"type\":\"rope2d\",\"variant\":\"pixtral\",\"base\":100},"
                      "\"positions\":[[0,3],[2,1]],\"dim\":8}",
                      &lim, &status);
    expect_ok(ans, status);
    result_is(ans, "inv_freq", inv, 4);
    result_is(ans, "cos", cs, 8);
    result_is(ans, "sin", sn, 8);
    {
        const cJSON *ax =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ans, "axis"), "data");
        for (int p = 0; p < 4; p++)
            assert_int_equal(cJSON_GetArrayItem(ax, p)->valueint, axis[p]);
    }
    cJSON_Delete(ans);
    /* From the grid: 1 + 2 x 3 tokens, the first unrotated. */
    ans = call(&srv_ep_encode,
               "{\"scheme\":{\"type\":\"rope2d\",\"grid\":[2,3],\"prefix_tokens\":1},\"dim\":4}",
               &lim, &status);
    expect_ok(ans, status);
    shape_is(ans, "cos", 2, 7, 2);
    cJSON_Delete(ans);
}

static void test_errors(void **state)
{
    (void)state;
    srv_limits lim = limits();
    static const struct {
        const char *body, *code, *field, *words;
    } bad[] = {
        {"{\"scheme\":{\"type\":\"rope2d\",\"variant\":\"eva\"},\"positions\":[[1],[1]],\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.variant", "not 'axial', 'pixtral', 'dinov3' or 'mixed'"},
        {"{\"scheme\":{\"type\":\"rope2d\",\"variant\":\"dinov3\"},\"positions\":[[1],[1]],"
         "\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.grid", "needs the scheme's grid"},
        {"{\"scheme\":{\"type\":\"rope2d\",\"grid\":[2,3],\"merge_size\":2},\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.merge_size", "multiples of it"},
        {"{\"scheme\":{\"type\":\"rope2d\",\"grid\":[2]},\"dim\":4}", "SHAPE_MISMATCH",
         "scheme.grid", "[rows, cols]"},
        {"{\"scheme\":{\"type\":\"rope2d\"},\"positions\":[[1],[1]],\"dim\":6}", "INVALID_ARGUMENT",
         "head_dim", "multiple of 4"},
        {"{\"scheme\":{\"type\":\"rope2d\"},\"dim\":4}", "INVALID_ARGUMENT", "positions",
         "positions [2, n]"},
        {"{\"scheme\":{\"type\":\"rope2d\",\"ref_grid\":[4,4]},\"positions\":[[1],[1]],"
         "\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.ref_grid", "needs the scheme's grid"},
        {"{\"scheme\":{\"type\":\"rope2d\",\"variant\":\"pixtral\",\"grid_offset\":1},"
         "\"positions\":[[1],[1]],\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.grid_offset", "variant axial"},
        {"{\"scheme\":{\"type\":\"rope2d\",\"in_pixels\":true},\"positions\":[[1],[1]],"
         "\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.grid", "needs the scheme's grid"},
        {"{\"scheme\":{\"type\":\"rope2d\",\"max_res\":64},\"positions\":[[1],[1]],"
         "\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.max_res", "needs in_pixels"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int status;
        cJSON *ans = call(&srv_ep_encode, bad[i].body, &lim, &status);
        const char *msg = str_at(ans, "error", "message");
        expect_error(ans, status, 400, bad[i].code, bad[i].field);
        if (msg == NULL || strstr(msg, bad[i].words) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i, msg ? msg : "(none)", bad[i].words);
        cJSON_Delete(ans);
    }
    /* Attention: the keys without coordinates, named by the API's field;
     * a grid that does not cover the tokens; [2, L] rows under rope. */
    {
        int status;
        cJSON *ans = call(&srv_ep_attention,
                          "{\"inputs\":[{\"scheme\":{\"type\":\"rope2d\"},"
                          "\"q\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"k\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"v\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"q_positions\":[[0,1],[2,3]]},"
                          "{\"scheme\":{\"type\":\"rope2d\",\"grid\":[1,3]},"
                          "\"q\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"k\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"v\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]}},"
                          "{\"scheme\":{\"type\":\"rope\"},"
                          "\"q\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"k\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"v\":{\"shape\":[2,1,4],\"data\":[1,0,0,0,0,1,0,0]},"
                          "\"q_positions\":[[0,1],[2,3]]}]}",
                          &lim, &status);
        expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].k_positions");
        expect_item_error(ans, 1, "SHAPE_MISMATCH", "inputs[1].q_positions");
        expect_item_error(ans, 2, "INVALID_ARGUMENT", "inputs[2].q_positions");
        cJSON_Delete(ans);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_matches_library),
        cmocka_unit_test(test_batch_rows),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
