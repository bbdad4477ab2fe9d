/* test_api_cope.c - cope through the JSON API (server/api/scheme.c's
 * npos_max, pos_emb, nodiv): /v1/attention equals the library (shared and
 * per-head tables, GQA, explicit positions, causal and not, nodiv, npos_max
 * from the table), pos_emb sent as f16 and bf16, the 400s that name the
 * field, /v1/encode's refusal, GET /v1/schemes, and /v1/analyze
 * extrapolation running through the library for cope. */
#include "api_harness.h"
#include "ref_attention.h"
#include "ref_half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* {"type":"cope","pos_emb":{shape,data}[, "npos_max":npos][, "nodiv":true]} */
static cJSON *cope_json(const float *E, int heads, int npos, int D, bool give_npos, bool nodiv,
                        const char *dtype)
{
    cJSON *s = cJSON_CreateObject(), *t;
    cJSON_AddStringToObject(s, "type", "cope");
    t = heads == 0 ? jtensor(E, 2, npos, D) : jtensor(E, 3, heads, npos, D);
    if (dtype != NULL)
        cJSON_AddStringToObject(t, "dtype", dtype);
    cJSON_AddItemToObject(s, "pos_emb", t);
    if (give_npos)
        cJSON_AddNumberToObject(s, "npos_max", npos);
    if (nodiv)
        cJSON_AddTrueToObject(s, "nodiv");
    return s;
}

static void fail_unless_ok(cJSON *ans, int status)
{
    if (status != 200) {
        char *txt = cJSON_PrintUnformatted(ans);
        fail_msg("status %d: %.400s", status, txt);
    }
}

/* /v1/attention equals the library. */
static void test_attention_matches_library(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const int32_t qpos[3] = {9, 4, 12};
    for (int variant = 0; variant < 8; variant++) {
        const int H = 4, D = 8, npos = variant & 4 ? 6 : 14;
        const int heads = variant & 2 ? H : 0;
        const bool causal = variant & 1, nodiv = variant == 3 || variant == 6;
        qkv f;
        pa_scheme s;
        pa_attention a;
        lib_out o;
        int status;
        tu_rng r;
        float *E;
        cJSON *item;
        tu_rng_seed(&r, 90 + (uint64_t)variant);
        E = rnd(&r, (size_t)(heads ? heads : 1) * npos * D, -1, 1);
        qkv_make(&f, 3, 13, H, 2, D, 8, 60 + (uint64_t)variant);
        pa_scheme_init(&s, PA_SCHEME_COPE);
        s.cope.npos_max = npos;
        s.cope.pos_emb = E;
        s.cope.pos_emb_heads = heads ? heads : 1;
        s.cope.nodiv = nodiv;
        qkv_desc(&f, &s, &a);
        a.q_positions = variant >= 4 ? qpos : NULL;
        a.causal = causal;
        lib_run(&a, (size_t)3 * H * 8, &o);
        item = qkv_item(&f, cope_json(E, heads, npos, D, variant & 1, nodiv, NULL));
        if (variant >= 4)
            cJSON_AddItemToObject(item, "q_positions", jints(qpos, 3));
        cJSON_AddBoolToObject(item, "causal", causal);
        cJSON_AddItemToObject(item, "return", cJSON_Parse("[\"output\",\"logits\",\"weights\"]"));
        cJSON *items[1] = {item};
        cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        fail_unless_ok(ans, status);
        result_is(output_at(ans, 0), "output", o.out, o.n_out);
        result_is(output_at(ans, 0), "logits", o.logits, o.n_scores);
        result_is(output_at(ans, 0), "weights", o.weights, o.n_scores);
        cJSON_Delete(ans);
        lib_free(&o);
        qkv_free(&f);
        free(E);
    }
}

/* pos_emb as f16 and bf16 numbers on the wire: rounded to the type, then
 * used in float32, as the library computes with the rounded table. */
static void test_half_tables(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const int H = 2, D = 4, npos = 5;
    for (int bf = 0; bf < 2; bf++) {
        qkv f;
        pa_scheme s;
        pa_attention a;
        lib_out o;
        int status;
        tu_rng r;
        float E[5 * 4], Er[5 * 4];
        tu_rng_seed(&r, 3 + (uint64_t)bf);
        for (int i = 0; i < npos * D; i++) {
            E[i] = (float)tu_uniform(&r, -1, 1);
            Er[i] = bf ? (float)ref_bf16_value(ref_bf16_round(E[i]))
                       : (float)ref_f16_value(ref_f16_round(E[i]));
        }
        qkv_make(&f, 6, 6, H, H, D, D, 70 + (uint64_t)bf);
        pa_scheme_init(&s, PA_SCHEME_COPE);
        s.cope.npos_max = npos;
        s.cope.pos_emb = Er;
        s.cope.pos_emb_heads = 1;
        qkv_desc(&f, &s, &a);
        a.causal = true;
        lib_run(&a, (size_t)6 * H * D, &o);
        cJSON *item = qkv_item(&f, cope_json(E, 0, npos, D, false, false, bf ? "bf16" : "f16"));
        cJSON_AddTrueToObject(item, "causal");
        cJSON *items[1] = {item};
        cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        fail_unless_ok(ans, status);
        result_is(output_at(ans, 0), "output", o.out, o.n_out);
        cJSON_Delete(ans);
        lib_free(&o);
        qkv_free(&f);
    }
}

/* The refusals name the field and the values. */
static void test_errors(void **state)
{
    (void)state;
    srv_limits lim = limits();
    static const struct {
        const char *scheme, *extra, *code, *field, *words;
    } bad[] = {
        {"{\"type\":\"cope\",\"npos_max\":4}", "", "INVALID_ARGUMENT", "scheme.pos_emb",
         "scheme.pos_emb is required"},
        {"{\"type\":\"cope\",\"npos_max\":1,\"pos_emb\":{\"shape\":[1,4],\"data\":[0,0,0,0]}}", "",
         "INVALID_ARGUMENT", "scheme.npos_max", "scheme.npos_max=1 must be in [2,"},
        {"{\"type\":\"cope\",\"npos_max\":3,\"pos_emb\":{\"shape\":[2,4],\"data\":[0,0,0,0,0,0,0,"
         "0]}}",
         "", "SHAPE_MISMATCH", "scheme.npos_max",
         "scheme.npos_max=3 does not match scheme.pos_emb's 2 positions"},
        {"{\"type\":\"cope\",\"pos_emb\":{\"shape\":[2,3],\"data\":[0,0,0,0,0,0]}}", "",
         "SHAPE_MISMATCH", "scheme.pos_emb", "rows of 3 values but head_dim=4"},
        {"{\"type\":\"cope\",\"pos_emb\":{\"shape\":[3,2,4],\"data\":[0,0,0,0,0,0,0,0,0,0,0,0,0,"
         "0,0,0,0,0,0,0,0,0,0,0]}}",
         "", "SHAPE_MISMATCH", "scheme.pos_emb",
         "scheme.pos_emb has 3 heads: 1 (shared) or "
         "num_heads=2"},
        {"{\"type\":\"cope\",\"pos_emb\":{\"shape\":[8],\"data\":[0,0,0,0,0,0,0,0]}}", "",
         "SHAPE_MISMATCH", "scheme.pos_emb", "scheme.pos_emb has 1 dims"},
        {"{\"type\":\"cope\",\"pos_emb\":{\"shape\":[2,4],\"data\":[0,0,0,0,0,0,0,0]},"
         "\"nodiv\":1}",
         "", "INVALID_ARGUMENT", "scheme.nodiv", "scheme.nodiv"},
        {"{\"type\":\"cope\",\"pos_emb\":{\"shape\":[2,4],\"data\":[0,0,0,0,0,0,0,0]}}",
         ",\"k_prerotated\":true", "INVALID_ARGUMENT", "k_prerotated", "k_prerotated"},
        {"{\"type\":\"cope\",\"pos_emb\":{\"shape\":[2,4],\"data\":[0,0,0,0,0,0,0,0]},"
         "\"slopes\":[1]}",
         "", "UNKNOWN_FIELD", "scheme.slopes", "slopes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int status;
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"inputs\":[{\"scheme\":%s,\"q\":{\"shape\":[1,2,4],\"data\":[1,0,0,0,0,1,0,0]},"
                 "\"k\":{\"shape\":[1,2,4],\"data\":[1,0,0,0,0,1,0,0]},"
                 "\"v\":{\"shape\":[1,2,4],\"data\":[1,0,0,0,0,1,0,0]}%s}]}",
                 bad[i].scheme, bad[i].extra);
        cJSON *ans = call(&srv_ep_attention, body, &lim, &status);
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "error");
        const char *msg = err ? str_at(output_at(ans, 0), "error", "message") : NULL;
        if (msg == NULL) {
            char *txt = cJSON_PrintUnformatted(ans);
            fail_msg("case %zu: no item error: %.400s", i, txt);
        }
        char field[96];
        snprintf(field, sizeof field, "inputs[0].%s", bad[i].field);
        expect_item_error(ans, 0, bad[i].code, field);
        if (strstr(msg, bad[i].words) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i, msg, bad[i].words);
        cJSON_Delete(ans);
    }
}

/* /v1/encode has no q and k: cope is refused, pointing at /v1/attention. */
static void test_encode_refused(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans = call(&srv_ep_encode,
                      "{\"scheme\":{\"type\":\"cope\",\"pos_emb\":{\"shape\":[2,4],"
                      "\"data\":[0,0,0,0,0,0,0,0]}},\"q_length\":3}",
                      &lim, &status);
    const char *msg = str_at(ans, "error", "message");
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "scheme.type");
    assert_non_null(msg);
    assert_non_null(strstr(msg, "/v1/attention"));
    cJSON_Delete(ans);
}

static void test_schemes_lists_it(void **state)
{
    (void)state;
    srv_limits lim = limits();
    srv_reply r;
    cJSON *ans, *s;
    int found = 0;
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
        if (strcmp(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, "cope") != 0)
            continue;
        found++;
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "position_site")->valuestring,
                            "logits");
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(s, "parameters"))
        {
            strcat(names, cJSON_GetObjectItemCaseSensitive(p, "name")->valuestring);
            strcat(names, " ");
        }
        assert_string_equal(names, "npos_max pos_emb nodiv ");
    }
    assert_int_equal(found, 1);
    cJSON_Delete(ans);
}

/* extrapolation runs through the library for cope: each length's whole
 * means against the double reference's row statistics. */
static void test_extrapolation(void **state)
{
    (void)state;
    enum { LMAX = 40, H = 2, D = 8, T = 16, NPOS = 12 };
    srv_limits lim = limits();
    int status;
    tu_rng r;
    float *q, *k, *v, *E;
    pa_scheme s;
    pa_attention a;
    tu_rng_seed(&r, 17);
    q = rnd(&r, (size_t)LMAX * H * D, -1, 1);
    k = rnd(&r, (size_t)LMAX * H * D, -1, 1);
    v = rnd(&r, (size_t)LMAX * H * D, -1, 1);
    E = rnd(&r, (size_t)NPOS * D, -1, 1);
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "analysis", "extrapolation");
    cJSON_AddItemToObject(req, "scheme", cope_json(E, 0, NPOS, D, true, false, NULL));
    cJSON_AddNumberToObject(req, "train_length", T);
    cJSON_AddItemToObject(req, "lengths", cJSON_Parse("[16,40]"));
    cJSON_AddItemToObject(req, "q", jtensor(q, 3, LMAX, H, D));
    cJSON_AddItemToObject(req, "k", jtensor(k, 3, LMAX, H, D));
    cJSON_AddItemToObject(req, "v", jtensor(v, 3, LMAX, H, D));
    cJSON_AddTrueToObject(req, "causal");
    cJSON *ans = call_json(&srv_ep_analyze, req, &lim, &status);
    fail_unless_ok(ans, status);
    pa_scheme_init(&s, PA_SCHEME_COPE);
    s.cope.npos_max = NPOS;
    s.cope.pos_emb = E;
    s.cope.pos_emb_heads = 1;
    pa_attention_init(&a, &s);
    a.num_heads = H;
    a.head_dim = D;
    a.q = q;
    a.k = k;
    a.v = v;
    a.causal = true;
    for (int li = 0; li < 2; li++) {
        const int32_t L = li == 0 ? 16 : 40;
        double ent[H * LMAX], dist[H * LMAX];
        const cJSON *lo = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "lengths"), li);
        a.q_len = a.k_len = L;
        ref_attention_stats(&a, ent, dist);
        for (int h = 0; h < H; h++) {
            double want = 0.0, got;
            for (int32_t i = 0; i < L; i++)
                want += ent[(size_t)h * L + i] / L;
            got =
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lo, "entropy"), h)->valuedouble;
            if (fabs(got - want) > 1e-4 + 1e-4 * fabs(want))
                fail_msg("length %d head %d entropy: got %.9g want %.9g", (int)L, h, got, want);
        }
    }
    cJSON_Delete(ans);
    free(q);
    free(k);
    free(v);
    free(E);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_matches_library),
        cmocka_unit_test(test_half_tables),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_encode_refused),
        cmocka_unit_test(test_schemes_lists_it),
        cmocka_unit_test(test_extrapolation),
    };
    return cmocka_run_group_tests_name("api_cope", tests, NULL, NULL);
}
