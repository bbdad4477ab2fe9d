/* test_api_xpos.c - the xpos scheme through the JSON API (server/api/
 * scheme.c's parameters, api/encode.c, api/schemes.c): /v1/attention
 * against the library (both layouts, causal, explicit and huge positions,
 * GQA), /v1/encode's factors against the formula, the errors, and GET
 * /v1/schemes. */
#include "api_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_attention_matches_library(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const int32_t near[3] = {9, 4, 12}, huge[3] = {2147483647, 2147483640, 2147483646};
    for (int t = 0; t < 4; t++)
        for (int causal = 0; causal < 2; causal++) {
            qkv f;
            pa_scheme s;
            pa_attention a;
            lib_out o;
            int status;
            int32_t kpos[13];
            const int32_t *qpos = t == 3 ? huge : near;
            for (int j = 0; j < 13; j++)
                kpos[j] = t == 3 ? 2147483647 - 12 + j : j;
            qkv_make(&f, 3, 13, 4, 2, 8, 8, 70 + (uint64_t)(t * 2 + causal));
            pa_scheme_init(&s, PA_SCHEME_XPOS);
            s.xpos.layout = t == 1 ? PA_ROPE_LAYOUT_NEOX : PA_ROPE_LAYOUT_GPTJ;
            s.xpos.scale_base = t == 2 ? 8.0 : 512.0;
            cJSON *sch = scheme_of(t == 1   ? "{\"type\":\"xpos\",\"layout\":\"neox\"}"
                                   : t == 2 ? "{\"type\":\"xpos\",\"scale_base\":8}"
                                            : "{\"type\":\"xpos\"}");
            qkv_desc(&f, &s, &a);
            a.q_positions = qpos;
            a.k_positions = kpos;
            a.causal = causal;
            lib_run(&a, (size_t)3 * 4 * 8, &o);
            cJSON *item = qkv_item(&f, sch);
            cJSON_AddItemToObject(item, "q_positions", jints(qpos, 3));
            cJSON_AddItemToObject(item, "k_positions", jints(kpos, 13));
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

static void test_encode(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    const int32_t pos[3] = {0, 5, 700};
    float scale[3 * 4], zeta[4], inv[4], cs[3 * 4], sn[3 * 4];
    for (int i = 0; i < 4; i++) {
        double z = (2.0 * i + 3.2) / 11.2, th = 1.0 / pow(10000.0, 2.0 * i / 8);
        zeta[i] = (float)z;
        inv[i] = (float)th;
        for (int p = 0; p < 3; p++) {
            scale[p * 4 + i] = (float)pow(z, pos[p] / 512.0);
            cs[p * 4 + i] = (float)cos(pos[p] * th);
            sn[p * 4 + i] = (float)sin(pos[p] * th);
        }
    }
    cJSON *ans = call(&srv_ep_encode,
                      "{\"scheme\":{\"type\":\"xpos\"},\"positions\":[0,5,700],"
                      "\"dim\":8}",
                      &lim, &status);
    expect_ok(ans, status);
    assert_true(num(ans, "centre") == 0.0 && num(ans, "rotary_dim") == 8.0);
    shape_is(ans, "scale", 2, 3, 4);
    result_is(ans, "zeta", zeta, 4);
    result_is(ans, "inv_freq", inv, 4);
    result_is(ans, "scale", scale, 12);
    result_is(ans, "cos", cs, 12);
    result_is(ans, "sin", sn, 12);
    cJSON_Delete(ans);
    /* Far from 0: the midpoint centre, the factors about it. */
    ans = call(&srv_ep_encode,
               "{\"scheme\":{\"type\":\"xpos\"},\"positions\":[2147483600,"
               "2147483646],\"dim\":2}",
               &lim, &status);
    expect_ok(ans, status);
    assert_true(num(ans, "centre") == 2147483623.0);
    float want2[2] = {(float)pow(0.4 / 1.4, -23 / 512.0), (float)pow(0.4 / 1.4, 23 / 512.0)};
    result_is(ans, "scale", want2, 2);
    cJSON_Delete(ans);
}

static void test_errors(void **state)
{
    (void)state;
    srv_limits lim = limits();
    static const struct {
        const char *body, *code, *field, *words;
    } bad[] = {
        {"{\"scheme\":{\"type\":\"xpos\",\"scale_base\":0},\"positions\":[1],\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.scale_base", "scale_base=0 must be finite and > 0"},
        {"{\"scheme\":{\"type\":\"xpos\",\"layout\":\"x\"},\"positions\":[1],\"dim\":4}",
         "INVALID_ARGUMENT", "scheme.layout", "not 'neox' or 'gptj'"},
        {"{\"scheme\":{\"type\":\"xpos\"},\"positions\":[1]}", "INVALID_ARGUMENT", "dim",
         "the head dimension"},
        {"{\"scheme\":{\"type\":\"xpos\"},\"positions\":[1],\"dim\":5}", "INVALID_ARGUMENT",
         "head_dim", "must be even"},
        {"{\"scheme\":{\"type\":\"xpos\"},\"positions\":[0,2147483647],\"dim\":4}",
         "INVALID_ARGUMENT", "q_positions", "the span must be at most 54390"},
        {"{\"scheme\":{\"type\":\"xpos\",\"rotary_dim\":2},\"positions\":[1],\"dim\":4}",
         "UNKNOWN_FIELD", "scheme.rotary_dim", "rotary_dim"},
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_matches_library),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
