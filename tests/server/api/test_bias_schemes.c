/* test_bias_schemes.c - kerple and sandwich through the JSON API
 * (server/api/scheme.c's parameters, api/encode.c's bias, api/schemes.c):
 * /v1/encode's bias against the double references, /v1/attention against
 * the library (one sequence, a batch, explicit positions, GQA, causal),
 * the errors that name the head, and GET /v1/schemes. */
#include "api_harness.h"
#include "ref_encodings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_encode_kerple(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    static const double r1[2] = {0.5, 1.0}, r2[2] = {0.1, 1.5};
    const int32_t qp[2] = {4, 1}, kp[3] = {0, 2, 7};
    for (int power = 0; power < 2; power++) {
        char body[512];
        float want[2 * 2 * 3];
        snprintf(
            body, sizeof body,
            "{\"scheme\":{\"type\":\"kerple\",\"form\":\"%s\",\"r1\":[0.5,1],\"r2\":[0.1,1.5]},"
            "\"q_positions\":[4,1],\"k_positions\":[0,2,7]}",
            power ? "power" : "log");
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++) {
                    double d = fabs((double)qp[i] - kp[j]);
                    want[(h * 2 + i) * 3 + j] = (float)(power ? ref_kerple_power(r1[h], r2[h], d)
                                                              : ref_kerple_log(r1[h], r2[h], d));
                }
        cJSON *ans = call(&srv_ep_encode, body, &lim, &status);
        expect_ok(ans, status);
        shape_is(ans, "bias", 3, 2, 2, 3);
        result_is(ans, "bias", want, 12);
        cJSON_Delete(ans);
    }
}

static void test_encode_sandwich(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    float want[3 * 2 * 4];
    for (int h = 0; h < 3; h++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                want[(h * 2 + i) * 4 + j] =
                    (float)ref_sandwich(16, 3, h, fabs((double)(i + 2) - j));
    cJSON *ans = call(&srv_ep_encode,
                      "{\"scheme\":{\"type\":\"sandwich\",\"hidden_size\":16},\"num_heads\":3,"
                      "\"q_length\":2,\"k_length\":4}",
                      &lim, &status);
    expect_ok(ans, status);
    shape_is(ans, "bias", 3, 3, 2, 4);
    result_is(ans, "bias", want, 24);
    cJSON_Delete(ans);
}

static void test_errors(void **state)
{
    (void)state;
    srv_limits lim = limits();
    static const struct {
        const char *body, *code, *field, *words;
    } bad[] = {
        {"{\"scheme\":{\"type\":\"kerple\",\"r1\":[1,1,1,1],\"r2\":[1,1,1,0.001]},\"q_length\":2}",
         "INVALID_ARGUMENT", "scheme.r2[3]", "scheme.r2[3]=0.001 is below 0.01"},
        {"{\"scheme\":{\"type\":\"kerple\",\"form\":\"power\",\"r1\":[1],\"r2\":[2.5]},"
         "\"q_length\":2}",
         "INVALID_ARGUMENT", "scheme.r2[0]", "above 2"},
        {"{\"scheme\":{\"type\":\"kerple\",\"form\":\"exp\",\"r1\":[1],\"r2\":[1]},\"q_length\":2}",
         "INVALID_ARGUMENT", "scheme.form", "not 'log' or 'power'"},
        {"{\"scheme\":{\"type\":\"kerple\",\"r2\":[1]},\"q_length\":2}", "INVALID_ARGUMENT",
         "scheme.r1", "required"},
        {"{\"scheme\":{\"type\":\"kerple\",\"r1\":[1,1],\"r2\":[1,1]},\"num_heads\":3,"
         "\"q_length\":2}",
         "SHAPE_MISMATCH", "num_heads", "num_heads=3"},
        {"{\"scheme\":{\"type\":\"sandwich\"},\"num_heads\":2,\"q_length\":2}", "INVALID_ARGUMENT",
         "scheme.hidden_size", "hidden_size"},
        {"{\"scheme\":{\"type\":\"sandwich\",\"hidden_size\":8},\"q_length\":2}",
         "INVALID_ARGUMENT", "num_heads", "required"},
        {"{\"scheme\":{\"type\":\"sandwich\",\"slopes\":[1]},\"num_heads\":1,\"q_length\":2}",
         "UNKNOWN_FIELD", "scheme.slopes", "slopes"},
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

/* /v1/attention equals the library, for one sequence with explicit
 * positions and GQA, causal and not. */
static void test_attention_matches_library(void **state)
{
    (void)state;
    srv_limits lim = limits();
    static const float r1[4] = {0.5f, 1.0f, 0.25f, 2.0f}, r2[4] = {0.1f, 1.5f, 0.75f, 0.01f};
    const int32_t qpos[3] = {9, 4, 12};
    for (int t = 0; t < 3; t++)
        for (int causal = 0; causal < 2; causal++) {
            qkv f;
            pa_scheme s;
            pa_attention a;
            lib_out o;
            int status;
            cJSON *sch, *item;
            qkv_make(&f, 3, 13, 4, 2, 8, 8, 40 + (uint64_t)(t * 2 + causal));
            if (t < 2) {
                pa_scheme_init(&s, PA_SCHEME_KERPLE);
                s.kerple.form = t ? PA_KERPLE_FORM_POWER : PA_KERPLE_FORM_LOG;
                s.kerple.r1 = r1;
                s.kerple.r2 = r2;
                s.kerple.num_r1 = s.kerple.num_r2 = 4;
                sch = scheme_of(t ? "{\"type\":\"kerple\",\"form\":\"power\",\"r1\":[0.5,1,0.25,2],"
                                    "\"r2\":[0.1,1.5,0.75,0.01]}"
                                  : "{\"type\":\"kerple\",\"r1\":[0.5,1,0.25,2],"
                                    "\"r2\":[0.1,1.5,0.75,0.01]}");
            } else {
                pa_scheme_init(&s, PA_SCHEME_SANDWICH);
                sch = scheme_of("{\"type\":\"sandwich\"}");
            }
            qkv_desc(&f, &s, &a);
            a.q_positions = qpos;
            a.causal = causal;
            lib_run(&a, (size_t)3 * 4 * 8, &o);
            item = qkv_item(&f, sch);
            cJSON_AddItemToObject(item, "q_positions", jints(qpos, 3));
            cJSON_AddBoolToObject(item, "causal", causal);
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

/* A batch [B, L, H, D] answers each sequence as sent alone. */
static void test_batch(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const int B = 3, L = 5, H = 2, D = 4;
    tu_rng r;
    tu_rng_seed(&r, 8);
    float *q = rnd(&r, (size_t)B * L * H * D, -1, 1), *k = rnd(&r, (size_t)B * L * H * D, -1, 1),
          *v = rnd(&r, (size_t)B * L * H * D, -1, 1);
    static const char *const schemes[] = {
        "{\"type\":\"kerple\",\"form\":\"power\",\"r1\":[0.5,2],\"r2\":[1.5,0.5]}",
        "{\"type\":\"sandwich\",\"hidden_size\":6}"};
    for (int s = 0; s < 2; s++) {
        int status;
        cJSON *item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of(schemes[s]));
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
            cJSON_AddItemToObject(one, "scheme", scheme_of(schemes[s]));
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
    }
    free(q);
    free(k);
    free(v);
}

static void test_schemes_lists_them(void **state)
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
        const char *name = cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring;
        char names[128] = "";
        const cJSON *p;
        if (strcmp(name, "kerple") != 0 && strcmp(name, "sandwich") != 0)
            continue;
        found++;
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "position_site")->valuestring,
                            "logits");
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(s, "parameters"))
        {
            strcat(names, cJSON_GetObjectItemCaseSensitive(p, "name")->valuestring);
            strcat(names, " ");
        }
        assert_string_equal(names, strcmp(name, "kerple") == 0 ? "form r1 r2 " : "hidden_size ");
    }
    assert_int_equal(found, 2);
    cJSON_Delete(ans);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_kerple), cmocka_unit_test(test_encode_sandwich),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_attention_matches_library),
        cmocka_unit_test(test_batch),         cmocka_unit_test(test_schemes_lists_them),
    };
    return cmocka_run_group_tests_name("bias_schemes", tests, NULL, NULL);
}
