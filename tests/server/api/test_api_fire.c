/* test_api_fire.c - fire through the JSON API (server/api/scheme.c's
 * parameters, api/encode.c's bias, api/schemes.c): /v1/encode's bias
 * against the double reference (tests/ref_encodings.c), /v1/attention
 * against the library (explicit positions, Lq != Lk, GQA, a batch), the
 * analysis extrapolation running, the 400s that name the field, and GET
 * /v1/schemes. */
#include "api_harness.h"
#include "ref_encodings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* hidden 3, H 2: w2 [3, 2] row-major. */
static const float W1[3] = {1.5f, -2.0f, 0.75f}, B1[3] = {-0.5f, 1.0f, 0.25f};
static const float W2[6] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, B2[2] = {0.1f, -0.2f};
#define MLP_JSON                                                                                   \
    "\"w1\":[1.5,-2,0.75],\"b1\":[-0.5,1,0.25],\"w2\":[0.5,-1,2,0.25,-0.75,1.5],\"b2\":[0.1,-0.2]"

static void fire_of(pa_scheme *s, double c, double L)
{
    pa_scheme_init(s, PA_SCHEME_FIRE);
    s->fire.c = c;
    s->fire.L = L;
    s->fire.w1 = W1;
    s->fire.b1 = B1;
    s->fire.w2 = W2;
    s->fire.b2 = B2;
    s->fire.num_w1 = s->fire.num_b1 = 3;
    s->fire.num_w2 = 6;
    s->fire.num_b2 = 2;
}

/* The bias [H, Lq, Lk] at explicit positions (one query past L, keys after
 * some queries: null there, as fire's causal attention hides them). */
static void test_encode(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    const int32_t qp[3] = {4, 1, 40}, kp[4] = {0, 2, 7, 40};
    float want[2 * 3 * 4];
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                want[(h * 3 + i) * 4 + j] =
                    kp[j] > qp[i]
                        ? -INFINITY
                        : (float)ref_fire(0.3, -8.0, 1e-6, W1, B1, 3, W2, B2, 2, h, qp[i], kp[j]);
    cJSON *ans = call(&srv_ep_encode,
                      "{\"scheme\":{\"type\":\"fire\",\"c\":0.3,\"L\":-8," MLP_JSON "},"
                      "\"q_positions\":[4,1,40],\"k_positions\":[0,2,7,40]}",
                      &lim, &status);
    expect_ok(ans, status);
    shape_is(ans, "bias", 3, 2, 3, 4);
    result_is(ans, "bias", want, 24);
    cJSON_Delete(ans);
    /* Defaults (c 0.1, L 512), num_heads agreeing with b2. */
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                want[(h * 2 + i) * 3 + j] = j > i + 1 ? -INFINITY
                                                      : (float)ref_fire(0.1, 512.0, 1e-6, W1, B1, 3,
                                                                        W2, B2, 2, h, i + 1, j);
    ans = call(&srv_ep_encode,
               "{\"scheme\":{\"type\":\"fire\"," MLP_JSON "},\"num_heads\":2,\"q_length\":2,"
               "\"k_length\":3}",
               &lim, &status);
    expect_ok(ans, status);
    shape_is(ans, "bias", 3, 2, 2, 3);
    result_is(ans, "bias", want, 12);
    cJSON_Delete(ans);
}

static void test_encode_errors(void **state)
{
    (void)state;
    srv_limits lim = limits();
    static const struct {
        const char *body, *code, *field, *words;
    } bad[] = {
        {"{\"scheme\":{\"type\":\"fire\",\"w1\":[1,2],\"b1\":[1,2],\"w2\":[1,2,3],\"b2\":[1,2]},"
         "\"q_length\":2}",
         "SHAPE_MISMATCH", "scheme.w2",
         "scheme.w2 has 3 values but hidden * num_heads = 2 * 2 = 4"},
        {"{\"scheme\":{\"type\":\"fire\",\"w1\":[1,2],\"b1\":[1],\"w2\":[1,2],\"b2\":[1]},"
         "\"q_length\":2}",
         "SHAPE_MISMATCH", "scheme.b1", "scheme.b1 has 1 values but hidden"},
        {"{\"scheme\":{\"type\":\"fire\",\"b1\":[1],\"w2\":[1],\"b2\":[1]},\"q_length\":2}",
         "INVALID_ARGUMENT", "scheme.w1", "scheme.w1 is required"},
        {"{\"scheme\":{\"type\":\"fire\",\"eps\":0," MLP_JSON "},\"q_length\":2}",
         "INVALID_ARGUMENT", "scheme.eps", "scheme.eps=0 must be finite and > 0"},
        {"{\"scheme\":{\"type\":\"fire\"," MLP_JSON "},\"num_heads\":3,\"q_length\":2}",
         "SHAPE_MISMATCH", "num_heads", "num_heads=3 does not equal the 2 values of scheme.b2"},
        {"{\"scheme\":{\"type\":\"fire\",\"r1\":[1]," MLP_JSON "},\"q_length\":2}", "UNKNOWN_FIELD",
         "scheme.r1", "r1"},
        {"{\"scheme\":{\"type\":\"fire\"," MLP_JSON "}}", "INVALID_ARGUMENT", "q_length",
         "required for scheme 'fire'"},
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
}

/* /v1/attention equals the library: explicit q positions, Lq != Lk, GQA. */
static void test_attention_matches_library(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const int32_t qpos[3] = {9, 4, 12};
    for (int t = 0; t < 2; t++) {
        qkv f;
        pa_scheme s;
        pa_attention a;
        lib_out o;
        int status;
        cJSON *item;
        qkv_make(&f, 3, 13, 2, 1, 8, 8, 60 + (uint64_t)t);
        fire_of(&s, t ? -0.5 : 0.1, t ? 3.0 : 512.0);
        qkv_desc(&f, &s, &a);
        a.q_positions = qpos;
        a.causal = true;
        lib_run(&a, (size_t)3 * 2 * 8, &o);
        item = qkv_item(&f, scheme_of(t ? "{\"type\":\"fire\",\"c\":-0.5,\"L\":3," MLP_JSON "}"
                                        : "{\"type\":\"fire\"," MLP_JSON "}"));
        cJSON_AddItemToObject(item, "q_positions", jints(qpos, 3));
        cJSON_AddBoolToObject(item, "causal", 1);
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
}

/* Without causal, and with heads that do not match the MLP: 400s naming
 * the field, in a batch with a valid neighbour that still runs. */
static void test_attention_errors(void **state)
{
    (void)state;
    srv_limits lim = limits();
    static const struct {
        int H;
        const char *extra, *code, *field, *words;
    } bad[] = {
        {2, "", "INVALID_ARGUMENT", "inputs[0].causal", "fire needs causal=true"},
        {2, ",\"causal\":false", "INVALID_ARGUMENT", "inputs[0].causal", "causal decoder"},
        {3, ",\"causal\":true", "SHAPE_MISMATCH", "inputs[0].scheme.w2",
         "scheme.w2 has 6 values but hidden * num_heads = 3 * 3 = 9"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv f;
        int status;
        cJSON *item, *good, *ans;
        char body[256];
        qkv_make(&f, 2, 2, bad[i].H, bad[i].H, 4, 4, 5);
        snprintf(body, sizeof body,
                 "{\"type\":\"fire\""
                 "," MLP_JSON "}");
        item = qkv_item(&f, scheme_of(body));
        if (bad[i].extra[0] != '\0')
            cJSON_AddBoolToObject(item, "causal", strstr(bad[i].extra, "true") != NULL);
        good = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
        cJSON *items[2] = {item, good};
        ans = call_json(&srv_ep_attention, batch(items, 2), &lim, &status);
        if (status != 200)
            fail_msg("case %zu: status %d (%s)", i, status, str_at(ans, "error", "message"));
        expect_item_error(ans, 0, bad[i].code, bad[i].field);
        if (strstr(str_at(output_at(ans, 0), "error", "message"), bad[i].words) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i,
                     str_at(output_at(ans, 0), "error", "message"), bad[i].words);
        assert_non_null(cJSON_GetObjectItemCaseSensitive(output_at(ans, 1), "output"));
        cJSON_Delete(ans);
        qkv_free(&f);
    }
}

/* A batch [B, L, H, D] answers each sequence as sent alone. */
static void test_batch(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const int B = 3, L = 5, H = 2, D = 4;
    const char *sch = "{\"type\":\"fire\",\"L\":2," MLP_JSON "}";
    tu_rng r;
    tu_rng_seed(&r, 8);
    float *q = rnd(&r, (size_t)B * L * H * D, -1, 1), *k = rnd(&r, (size_t)B * L * H * D, -1, 1),
          *v = rnd(&r, (size_t)B * L * H * D, -1, 1);
    int status;
    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of(sch));
    cJSON_AddItemToObject(item, "q", jtensor(q, 4, B, L, H, D));
    cJSON_AddItemToObject(item, "k", jtensor(k, 4, B, L, H, D));
    cJSON_AddItemToObject(item, "v", jtensor(v, 4, B, L, H, D));
    cJSON_AddBoolToObject(item, "causal", 1);
    cJSON *items[1] = {item};
    cJSON *all = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    expect_ok(all, status);
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(output_at(all, 0), "output");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(out, "data");
    for (int b = 0; b < B; b++) {
        size_t n = (size_t)L * H * D;
        float *want = malloc(n * sizeof *want);
        cJSON *one = cJSON_CreateObject(), *ans;
        cJSON_AddItemToObject(one, "scheme", scheme_of(sch));
        cJSON_AddItemToObject(one, "q", jtensor(q + b * n, 3, L, H, D));
        cJSON_AddItemToObject(one, "k", jtensor(k + b * n, 3, L, H, D));
        cJSON_AddItemToObject(one, "v", jtensor(v + b * n, 3, L, H, D));
        cJSON_AddBoolToObject(one, "causal", 1);
        cJSON *ones[1] = {one};
        for (size_t x = 0; x < n; x++)
            want[x] = (float)cJSON_GetArrayItem(data, (int)(b * n + x))->valuedouble;
        ans = call_json(&srv_ep_attention, batch(ones, 1), &lim, &status);
        expect_ok(ans, status);
        result_is(output_at(ans, 0), "output", want, n);
        cJSON_Delete(ans);
        free(want);
    }
    cJSON_Delete(all);
    free(q);
    free(k);
    free(v);
}

/* /v1/analyze extrapolation runs for fire (causal), every band finite. */
static void test_extrapolation_runs(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    const cJSON *lens, *lo;
    cJSON *ans = call(&srv_ep_analyze,
                      "{\"analysis\":\"extrapolation\",\"scheme\":{\"type\":\"fire\",\"L\":16,"
                      "\"w1\":[1.5,-2,0.75],\"b1\":[-0.5,1,0.25],\"w2\":[0.5,-1,2],"
                      "\"b2\":[0.1]},\"train_length\":16,\"lengths\":[16,40],"
                      "\"inputs\":\"gaussian\",\"num_heads\":1,\"head_dim\":8,\"seed\":7}",
                      &lim, &status);
    expect_ok(ans, status);
    lens = cJSON_GetObjectItemCaseSensitive(ans, "lengths");
    assert_int_equal(cJSON_GetArraySize(lens), 2);
    cJSON_ArrayForEach(lo, lens)
    {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(lo, "entropy");
        assert_true(cJSON_IsNumber(cJSON_GetArrayItem(e, 0)));
        assert_true(isfinite(cJSON_GetArrayItem(e, 0)->valuedouble));
    }
    cJSON_Delete(ans);
}

static void test_schemes_lists_it(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int found = 0;
    srv_reply r;
    cJSON *ans, *s;
    memset(&r, 0, sizeof r);
    srv_endpoint_answer(&srv_ep_schemes, &lim, &r);
    assert_int_equal(r.http_status, 200);
    ans = cJSON_ParseWithLength(r.body, r.body_len);
    srv_reply_free(&r);
    assert_non_null(ans);
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(ans, "schemes"))
    {
        char names[128] = "";
        const cJSON *p;
        if (strcmp(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, "fire") != 0)
            continue;
        found++;
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "position_site")->valuestring,
                            "logits");
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(s, "parameters"))
        {
            strcat(names, cJSON_GetObjectItemCaseSensitive(p, "name")->valuestring);
            strcat(names, " ");
        }
        assert_string_equal(names, "c L eps w1 b1 w2 b2 ");
    }
    assert_int_equal(found, 1);
    cJSON_Delete(ans);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_attention_matches_library),
        cmocka_unit_test(test_attention_errors),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_extrapolation_runs),
        cmocka_unit_test(test_schemes_lists_it),
    };
    return cmocka_run_group_tests_name("api_fire", tests, NULL, NULL);
}
