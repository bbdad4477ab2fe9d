/* test_item_qscale.c - the query scalings by position (attn_temperature_tuning,
 * logn_scaling) and the q/k norm variants (no weight, weight_offset) in
 * POST /v1/attention and /v1/analyze, without HTTP: each reaches the
 * computation (the answer differs from the same item without it, equals
 * the core library on the same descriptor to formatting, 1e-6 + 1e-6
 * |want|, and the float64 reference of tests/ref_attention.c, 2e-5 + 1e-4
 * |want|); defaults; batches with per-sequence positions and query_length
 * bit for bit against their sequences; layer mode; every error names its
 * field and values, with HTTP 400. Requests go through tests/api_harness.c
 * and tests/server/api/batch_fixture.c.
 */
#include "api_harness.h"
#include "batch_fixture.h"
#include "ref_attention.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* They reach the computation                                                */
/* ------------------------------------------------------------------------- */

/* One variant: the options' JSON and the descriptor fields they mean. */
typedef struct variant {
    const char *name, *json; /* {"member": value, ...} merged into the item */
    double floor_scale, attn_scale;
    int32_t train_length;
    bool q_unweighted, k_unweighted, q_weight;
    float q_offset, k_eps;
    int32_t first_pos; /* q_positions are first_pos, first_pos + 3, ... */
} variant;

static const variant variants[] = {
    {"temperature", "{\"attn_temperature_tuning\":{\"floor_scale\":2,\"attn_scale\":0.5}}", 2.0,
     0.5, 0, false, false, false, 0.0f, 0.0f, 0},
    /* Llama 4's defaults: the first step is at position 8191. */
    {"temperature defaults", "{\"attn_temperature_tuning\":{}}", 8192.0, 0.1, 0, false, false,
     false, 0.0f, 0.0f, 8180},
    {"floor_scale only", "{\"attn_temperature_tuning\":{\"floor_scale\":3}}", 3.0, 0.1, 0, false,
     false, false, 0.0f, 0.0f, 0},
    {"logn", "{\"logn_scaling\":{\"train_length\":4}}", 0.0, 0.0, 4, false, false, false, 0.0f,
     0.0f, 0},
    {"norms without weights", "{\"q_norm\":{},\"k_norm\":{\"eps\":0.25}}", 0.0, 0.0, 0, true, true,
     false, 0.0f, 0.25f, 0},
    {"weight_offset", "{\"q_norm\":{\"weight\":WQ,\"weight_offset\":1}}", 0.0, 0.0, 0, false, false,
     true, 1.0f, 0.0f, 0},
    {"everything",
     "{\"attn_temperature_tuning\":{\"floor_scale\":4,\"attn_scale\":0.3},\"logn_scaling\":{"
     "\"train_length\":10},\"q_norm\":{\"weight\":WQ,\"weight_offset\":1},\"k_norm\":{\"eps\":0."
     "25}}",
     4.0, 0.3, 10, false, true, true, 1.0f, 0.25f, 2},
};

/* The item's answer as b64 floats: result name of output 0. */
static float *answer_of(cJSON *item, const char *name, size_t *n)
{
    int status;
    cJSON *ans = run(&item, 1, &status);
    if (status != 200)
        fail_msg("%s", str_at(output_at(ans, 0), "error", "message"));
    float *f = decode(output_at(ans, 0), name, n);
    cJSON_Delete(ans);
    return f;
}

static void test_reach_computation(void **state)
{
    (void)state;
    static const char *const names[] = {"output", "q_rot", "weights"};
    static const int shapes[][2] = {{5, 9}, {20, 30}}; /* decode, tiled */
    tu_rng r;
    tu_rng_seed(&r, 7100);
    float *wq = rnd(&r, 8, -0.5, 0.5);
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const variant *x = &variants[v];
        for (int sh = 0; sh < 2; sh++) {
            const int Lq = shapes[sh][0], Lk = shapes[sh][1], NH = 4, NKV = 2, HD = 8;
            const size_t nout = (size_t)Lq * NH * HD;
            int32_t qpos[20];
            qkv f;
            pa_scheme s;
            pa_attention a;
            lib_out want;
            size_t n;
            char *opts = tu_alloc(strlen(x->json) + 256, 1), *wq_json;
            qkv_make(&f, Lq, Lk, NH, NKV, HD, HD, 7101 + 2 * v + (uint64_t)sh);
            for (int i = 0; i < Lq; i++)
                qpos[i] = x->first_pos + 3 * i;
            /* The weight's JSON in place of WQ. */
            cJSON *wj = jtensor(wq, 1, 8);
            wq_json = cJSON_PrintUnformatted(wj);
            cJSON_Delete(wj);
            const char *at = strstr(x->json, "WQ");
            if (at != NULL)
                sprintf(opts, "%.*s%s%s", (int)(at - x->json), x->json, wq_json, at + 2);
            else
                strcpy(opts, x->json);
            free(wq_json);

            cJSON *item[2], *extra = json_of(opts), *m;
            for (int with = 0; with < 2; with++) {
                item[with] = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
                cJSON_AddItemToObject(item[with], "q_positions", jints(qpos, Lq));
                cJSON_AddTrueToObject(item[with], "causal");
                cJSON_AddItemToObject(item[with], "return", cJSON_CreateStringArray(names, 3));
                if (with)
                    cJSON_ArrayForEach(m, extra)
                        cJSON_AddItemToObject(item[with], m->string, cJSON_Duplicate(m, true));
            }
            cJSON_Delete(extra);
            free(opts);

            pa_scheme_init(&s, PA_SCHEME_ROPE);
            qkv_desc(&f, &s, &a);
            a.q_positions = qpos;
            a.causal = true;
            a.temperature_floor_scale = x->floor_scale;
            a.temperature_attn_scale = x->attn_scale;
            a.logn_train_length = x->train_length;
            a.q_norm_unweighted = x->q_unweighted;
            a.k_norm_unweighted = x->k_unweighted;
            a.q_norm_eps = a.k_norm_eps = 1e-6f; /* the default */
            if (x->k_eps > 0)
                a.k_norm_eps = x->k_eps;
            if (x->q_weight) {
                a.q_norm = wq;
                a.q_norm_len = 8;
                a.q_norm_offset = x->q_offset;
            }
            lib_run(&a, nout, &want);
            double *ref = tu_alloc(nout, sizeof(double));
            ref_attention(&a, ref, NULL, NULL, NULL, NULL);

            float *plain = answer_of(item[0], "output", &n);
            assert_int_equal(n, nout);
            cJSON *ans;
            int status;
            ans = run(&item[1], 1, &status);
            if (status != 200)
                fail_msg("%s: %s", x->name, str_at(output_at(ans, 0), "error", "message"));
            result_is(output_at(ans, 0), "output", want.out, want.n_out);
            result_is(output_at(ans, 0), "q_rot", want.q_rot, want.n_q);
            result_is(output_at(ans, 0), "weights", want.weights, want.n_scores);
            float *got = decode(output_at(ans, 0), "output", &n);
            TU_ASSERT_CLOSE(got, ref, nout, 2e-5, 1e-4);
            double diff = 0;
            for (size_t i = 0; i < nout; i++)
                diff = fmax(diff, fabs(got[i] - plain[i]));
            if (!(diff > 1e-3))
                fail_msg("%s (Lq=%d): the answer is the plain one (max diff %g)", x->name, Lq,
                         diff);
            cJSON_Delete(ans);
            free(got);
            free(plain);
            free(ref);
            lib_free(&want);
            qkv_free(&f);
        }
    }
    free(wq);
}

/* weight_offset is added to the weight: {weight w, weight_offset 1} is
 * {weight w + 1}, and {} (no weight) is {weight ones}, bit for bit. */
static void test_norm_forms_agree(void **state)
{
    (void)state;
    tu_rng r;
    qkv f;
    float w[8], w1[8], ones[8];
    size_t n0, n1;
    tu_rng_seed(&r, 7200);
    for (int d = 0; d < 8; d++) {
        w[d] = (float)tu_uniform(&r, -0.9, 0.9);
        w1[d] = w[d] + 1.0f;
        ones[d] = 1.0f;
    }
    qkv_make(&f, 4, 7, 2, 1, 8, 8, 7201);
    for (int form = 0; form < 2; form++) {
        cJSON *a = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
        cJSON *b = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
        cJSON *qa = cJSON_AddObjectToObject(a, "q_norm"),
              *qb = cJSON_AddObjectToObject(b, "q_norm");
        if (form == 0) {
            cJSON_AddItemToObject(qa, "weight", jtensor(w, 1, 8));
            cJSON_AddNumberToObject(qa, "weight_offset", 1);
            cJSON_AddItemToObject(qb, "weight", jtensor(w1, 1, 8));
        } else {
            cJSON_AddItemToObject(qb, "weight", jtensor(ones, 1, 8));
        }
        float *x = answer_of(a, "output", &n0), *y = answer_of(b, "output", &n1);
        assert_int_equal(n0, n1);
        assert_memory_equal(x, y, n0 * sizeof(float));
        free(x);
        free(y);
    }
    qkv_free(&f);
}

/* ------------------------------------------------------------------------- */
/* Batches and layer mode                                                    */
/* ------------------------------------------------------------------------- */

static void add_options(cJSON *item)
{
    cJSON_AddItemToObject(item, "attn_temperature_tuning",
                          json_of("{\"floor_scale\":2,\"attn_scale\":0.5}"));
    cJSON_AddItemToObject(item, "logn_scaling", json_of("{\"train_length\":4}"));
    cJSON_AddItemToObject(item, "q_norm", json_of("{}"));
    cJSON_AddItemToObject(item, "k_norm",
                          json_of("{\"weight\":{\"shape\":[8],\"data\":[0,0.5,-0.5,0.25,0,1,-0.25,"
                                  "0.1]},\"weight_offset\":1}"));
}

/* A batch with per-sequence positions (rows [B, L]) and key lengths
 * equals its sequences sent alone, bit for bit, for every result; and
 * with query_length (default positions kept for the real rows) its real
 * rows equal the full batch's. */
static void test_batches(void **state)
{
    (void)state;
    seqs s;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    const int q3[] = {L, H, D}, k3[] = {L, HKV, D}, v3[] = {L, HKV, DV};
    seqs_make(&s, 7300);
    cJSON *item = cJSON_CreateObject(), *items[B];
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"alibi\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
    cJSON *qp = cJSON_CreateArray(), *kp = cJSON_CreateArray();
    for (int b = 0; b < B; b++) {
        cJSON_AddItemToArray(qp, jints(s.qpos[b], L));
        cJSON_AddItemToArray(kp, jints(s.kpos[b], L));
    }
    cJSON_AddItemToObject(item, "q_positions", qp);
    cJSON_AddItemToObject(item, "k_positions", kp);
    cJSON_AddItemToObject(item, "key_length", jints(s.key_length, B));
    cJSON_AddTrueToObject(item, "causal");
    cJSON_AddItemToObject(item, "return", ret_all());
    add_options(item);
    cJSON *batched = run(&item, 1, &status);
    expect_ok(batched, status);
    for (int b = 0; b < B; b++) {
        items[b] = cJSON_CreateObject();
        cJSON_AddItemToObject(items[b], "scheme", scheme_of("{\"type\":\"alibi\"}"));
        cJSON_AddItemToObject(items[b], "q", jtensor_b64(s.q + (size_t)b * L * H * D, 3, q3));
        cJSON_AddItemToObject(items[b], "k", jtensor_b64(s.k + (size_t)b * L * HKV * D, 3, k3));
        cJSON_AddItemToObject(items[b], "v", jtensor_b64(s.v + (size_t)b * L * HKV * DV, 3, v3));
        cJSON_AddItemToObject(items[b], "q_positions", jints(s.qpos[b], L));
        cJSON_AddItemToObject(items[b], "k_positions", jints(s.kpos[b], L));
        cJSON_AddNumberToObject(items[b], "key_length", s.key_length[b]);
        cJSON_AddTrueToObject(items[b], "causal");
        cJSON_AddItemToObject(items[b], "return", ret_all());
        add_options(items[b]);
    }
    cJSON *sep = run(items, B, &status);
    expect_ok(sep, status);
    same_as_items(output_at(batched, 0), sep, B, "scaled batch");
    cJSON_Delete(batched);
    cJSON_Delete(sep);

    /* query_length: rows 0 .. ql-1 keep the positions Lk - Lq + i of the
     * full rows (not Lk - ql + i), so their scaled answers are the same. */
    const int32_t ql[B] = {6, 2, 4};
    cJSON *ans[2];
    for (int with = 0; with < 2; with++) {
        item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
        cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
        cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
        cJSON_AddItemToObject(item, "attn_temperature_tuning",
                              json_of("{\"floor_scale\":1,\"attn_scale\":0.5}"));
        if (with)
            cJSON_AddItemToObject(item, "query_length", jints(ql, B));
        ans[with] = run(&item, 1, &status);
        expect_ok(ans[with], status);
    }
    size_t n0, n1;
    float *full = decode(output_at(ans[0], 0), "output", &n0);
    float *part = decode(output_at(ans[1], 0), "output", &n1);
    assert_int_equal(n0, n1);
    for (int b = 0; b < B; b++)
        assert_memory_equal(full + (size_t)b * L * H * DV, part + (size_t)b * L * H * DV,
                            (size_t)ql[b] * H * DV * sizeof(float));
    free(full);
    free(part);
    cJSON_Delete(ans[0]);
    cJSON_Delete(ans[1]);
    seqs_free(&s);
}

/* Layer mode (q positions are the tokens'), with w_o: the library's answer
 * on the same descriptor, and another than without the options. */
static void test_layer_mode(void **state)
{
    (void)state;
    tu_rng r;
    int status;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    int32_t pos[6] = {0, 2, 4, 6, 8, 10};
    tu_rng_seed(&r, 7400);
    float *x = rnd(&r, 6 * 8, -1, 1), *w_q = rnd(&r, 8 * 8, -0.5, 0.5);
    float *w_k = rnd(&r, 8 * 4, -0.5, 0.5), *w_v = rnd(&r, 8 * 4, -0.5, 0.5);
    float *w_o = rnd(&r, 8 * 3, -0.5, 0.5);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "x", jtensor(x, 2, 6, 8));
    cJSON_AddItemToObject(item, "w_q", jtensor(w_q, 2, 8, 8));
    cJSON_AddItemToObject(item, "w_k", jtensor(w_k, 2, 8, 4));
    cJSON_AddItemToObject(item, "w_v", jtensor(w_v, 2, 8, 4));
    cJSON_AddItemToObject(item, "w_o", jtensor(w_o, 2, 8, 3));
    cJSON_AddNumberToObject(item, "num_heads", 2);
    cJSON_AddNumberToObject(item, "num_kv_heads", 1);
    cJSON_AddItemToObject(item, "q_positions", jints(pos, 6));
    cJSON_AddTrueToObject(item, "causal");
    cJSON_AddItemToObject(item, "attn_temperature_tuning",
                          json_of("{\"floor_scale\":3,\"attn_scale\":1}"));
    cJSON_AddItemToObject(item, "logn_scaling", json_of("{\"train_length\":5}"));
    cJSON_AddItemToObject(item, "q_norm", json_of("{\"eps\":1e-5}"));
    srv_limits lim = limits();
    cJSON *ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_ok(ans, status);
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    pa_attention_init(&a, &s);
    a.x = x;
    a.seq_len = 6;
    a.d_model = 8;
    a.w_q = w_q;
    a.w_k = w_k;
    a.w_v = w_v;
    a.w_o = w_o;
    a.d_out = 3;
    a.num_heads = 2;
    a.num_kv_heads = 1;
    a.head_dim = 4;
    a.q_positions = pos;
    a.causal = true;
    a.temperature_floor_scale = 3.0;
    a.temperature_attn_scale = 1.0;
    a.logn_train_length = 5;
    a.q_norm_unweighted = true;
    a.q_norm_eps = 1e-5f;
    lib_run(&a, 6 * 3, &want);
    result_is(output_at(ans, 0), "output", want.out, want.n_out);
    lib_free(&want);
    a.temperature_floor_scale = a.temperature_attn_scale = 0.0;
    a.logn_train_length = 0;
    lib_run(&a, 6 * 3, &want);
    double diff = 0;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "output"), "data");
    for (int i = 0; i < 6 * 3; i++)
        diff = fmax(diff, fabs(cJSON_GetArrayItem(data, i)->valuedouble - want.out[i]));
    assert_true(diff > 1e-3);
    lib_free(&want);
    cJSON_Delete(ans);
    free(x);
    free(w_q);
    free(w_k);
    free(w_v);
    free(w_o);
}

/* ------------------------------------------------------------------------- */
/* Errors and analyses                                                       */
/* ------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *scheme, *extra, *code, *field, *message_part;
    } bad[] = {
        {"{\"type\":\"none\"}", "\"attn_temperature_tuning\":8192", "INVALID_ARGUMENT",
         "inputs[0].attn_temperature_tuning", "found number"},
        {"{\"type\":\"none\"}", "\"attn_temperature_tuning\":{\"floor_scale\":0}",
         "INVALID_ARGUMENT", "inputs[0].attn_temperature_tuning.floor_scale",
         "floor_scale=0 must be a positive"},
        {"{\"type\":\"none\"}", "\"attn_temperature_tuning\":{\"floor_scale\":-2.5}",
         "INVALID_ARGUMENT", "inputs[0].attn_temperature_tuning.floor_scale", "=-2.5"},
        {"{\"type\":\"none\"}", "\"attn_temperature_tuning\":{\"attn_scale\":0}",
         "INVALID_ARGUMENT", "inputs[0].attn_temperature_tuning.attn_scale",
         "attn_scale=0 must be"},
        {"{\"type\":\"none\"}", "\"attn_temperature_tuning\":{\"attn_scale\":\"big\"}",
         "INVALID_ARGUMENT", "inputs[0].attn_temperature_tuning.attn_scale", "found string"},
        {"{\"type\":\"none\"}", "\"attn_temperature_tuning\":{\"temperature\":1}", "UNKNOWN_FIELD",
         "inputs[0].attn_temperature_tuning.temperature", "floor_scale, attn_scale"},
        {"{\"type\":\"none\"}",
         "\"attn_temperature_tuning\":{\"floor_scale\":1,\"attn_scale\":1e300}", "OUT_OF_RANGE",
         "inputs[0].attn_temperature_tuning", "past float32"},
        {"{\"type\":\"none\"}", "\"attn_temperature_tuning\":{},\"q_positions\":[4,-3]",
         "OUT_OF_RANGE", "inputs[0].q_positions[1]", "q_positions[1]=-3"},
        {"{\"type\":\"rope\",\"mrope_section\":[1,0,0]}",
         "\"attn_temperature_tuning\":{},\"q_positions\":[[0,1],[0,1],[0,1]],"
         "\"k_positions\":[[0,1],[0,1],[0,1]]",
         "UNSUPPORTED", "inputs[0].attn_temperature_tuning", "M-RoPE"},
        {"{\"type\":\"none\"}", "\"logn_scaling\":[]", "INVALID_ARGUMENT", "inputs[0].logn_scaling",
         "found array"},
        {"{\"type\":\"none\"}", "\"logn_scaling\":{}", "INVALID_ARGUMENT",
         "inputs[0].logn_scaling.train_length", "is required"},
        {"{\"type\":\"none\"}", "\"logn_scaling\":{\"train_length\":1}", "INVALID_ARGUMENT",
         "inputs[0].logn_scaling.train_length", "train_length=1 must be at least 2"},
        {"{\"type\":\"none\"}", "\"logn_scaling\":{\"train_length\":2.5}", "INVALID_ARGUMENT",
         "inputs[0].logn_scaling.train_length", "integer"},
        {"{\"type\":\"none\"}", "\"logn_scaling\":{\"train_len\":4}", "UNKNOWN_FIELD",
         "inputs[0].logn_scaling.train_len", "train_length"},
        {"{\"type\":\"rope\",\"mrope_section\":[1,0,0]}",
         "\"logn_scaling\":{\"train_length\":2},\"q_positions\":[[0,1],[0,1],[0,1]]", "UNSUPPORTED",
         "inputs[0].logn_scaling", "M-RoPE"},
        {"{\"type\":\"none\"}", "\"q_norm\":{\"weight_offset\":1}", "INVALID_ARGUMENT",
         "inputs[0].q_norm.weight_offset", "q_norm.weight_offset=1 is added to q_norm.weight"},
        {"{\"type\":\"none\"}", "\"k_norm\":{\"eps\":1e-6,\"weight_offset\":-0.5}",
         "INVALID_ARGUMENT", "inputs[0].k_norm.weight_offset", "=-0.5"},
        {"{\"type\":\"none\"}",
         "\"q_norm\":{\"weight\":{\"shape\":[2],\"data\":[1,1]},\"weight_offset\":\"one\"}",
         "INVALID_ARGUMENT", "inputs[0].q_norm.weight_offset", "found string"},
        {"{\"type\":\"none\"}",
         "\"q_norm\":{\"weight\":{\"shape\":[2],\"data\":[1,1]},\"weight_offset\":1e39}",
         "INVALID_ARGUMENT", "inputs[0].q_norm.weight_offset", "past float32"},
        {"{\"type\":\"none\"}", "\"q_norm\":{\"eps\":0}", "INVALID_ARGUMENT",
         "inputs[0].q_norm.eps", "eps=0"},
        {"{\"type\":\"none\"}", "\"q_norm\":{\"offset\":1}", "UNKNOWN_FIELD",
         "inputs[0].q_norm.offset", "weight, eps, weight_offset"},
        {"{\"type\":\"rope\"}", "\"k_norm\":{},\"k_prerotated\":true", "INVALID_ARGUMENT",
         "inputs[0].k_norm", "k_prerotated"},
    };
    srv_limits lim = limits();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[1024];
        int status;
        snprintf(body, sizeof body,
                 "{\"inputs\":[{\"scheme\":%s,%s,"
                 "\"q\":{\"shape\":[2,1,2],\"data\":[1,0,0,1]},"
                 "\"k\":{\"shape\":[2,1,2],\"data\":[1,0,0,1]},"
                 "\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]}}]}",
                 bad[i].scheme, bad[i].extra);
        cJSON *ans = call(&srv_ep_attention, body, &lim, &status);
        assert_int_equal(status, 400);
        expect_item_error(ans, 0, bad[i].code, bad[i].field);
        const char *msg = str_at(output_at(ans, 0), "error", "message");
        if (msg == NULL || strstr(msg, bad[i].message_part) == NULL)
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, msg ? msg : "(none)",
                     bad[i].message_part);
        cJSON_Delete(ans);
    }
}

/* In a batch, the sequence whose position is refused is named. */
static void test_batch_position_error(void **state)
{
    (void)state;
    seqs s;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    seqs_make(&s, 7350);
    s.qpos[1][2] = -1;
    cJSON *item = cJSON_CreateObject(), *qp = cJSON_CreateArray();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
    for (int b = 0; b < B; b++)
        cJSON_AddItemToArray(qp, jints(s.qpos[b], L));
    cJSON_AddItemToObject(item, "q_positions", qp);
    cJSON_AddItemToObject(item, "attn_temperature_tuning", json_of("{}"));
    cJSON *ans = run(&item, 1, &status);
    assert_int_equal(status, 400);
    expect_item_error(ans, 0, "OUT_OF_RANGE", "inputs[0].q_positions[2]");
    const char *msg = str_at(output_at(ans, 0), "error", "message");
    assert_non_null(msg);
    assert_non_null(strstr(msg, "sequence 1 of the batch: q_positions[2]=-1"));
    cJSON_Delete(ans);
    seqs_free(&s);
}

/* The decomposition counts the scaling as position: with NoPE and
 * temperature tuning, content is the plain logits and position is
 * (factor - 1) * content; an absolute scheme refuses it. */
static void test_decomposition(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    int status;
    const int NL = 6, NH = 2, HD = 4;
    qkv_make(&f, NL, NL, NH, NH, HD, HD, 7500);
    cJSON *req = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddStringToObject(req, "analysis", "decomposition");
    cJSON_AddItemToObject(req, "attn_temperature_tuning",
                          json_of("{\"floor_scale\":2,\"attn_scale\":1}"));
    cJSON *ans = call_json(&srv_ep_analyze, req, &lim, &status);
    if (status != 200)
        fail_msg("%s", str_at(ans, "error", "message"));
    const cJSON *c =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ans, "content"), "data");
    const cJSON *p =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ans, "position"), "data");
    int moved = 0;
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < NL; i++)
            for (int j = 0; j < NL; j++) {
                const int k = (h * NL + i) * NL + j;
                const double fac = log(floor((i + 1) / 2.0) + 1.0) + 1.0;
                const double cv = cJSON_GetArrayItem(c, k)->valuedouble;
                const double pv = cJSON_GetArrayItem(p, k)->valuedouble;
                double dot = 0;
                for (int d = 0; d < HD; d++)
                    dot += (double)f.q[(i * NH + h) * HD + d] * f.k[(j * NH + h) * HD + d];
                assert_true(fabs(cv - dot / 2.0) <= 1e-5);
                assert_true(fabs(pv - (fac - 1.0) * cv) <= 1e-5);
                moved += fabs(pv) > 1e-3;
            }
    assert_true(moved > NL * NL);
    cJSON_Delete(ans);
    qkv_free(&f);

    const char *absolute = "{\"analysis\":\"decomposition\",\"scheme\":{\"type\":\"sinusoidal\"},"
                           "\"x\":{\"shape\":[3,4],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12]},"
                           "\"w_q\":{\"shape\":[4,4],\"data\":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]},"
                           "\"w_k\":{\"shape\":[4,4],\"data\":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]},"
                           "\"w_v\":{\"shape\":[4,4],\"data\":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]},"
                           "\"num_heads\":1,\"logn_scaling\":{\"train_length\":2}}";
    ans = call(&srv_ep_analyze, absolute, &lim, &status);
    expect_error(ans, status, 400, "UNSUPPORTED", "logn_scaling");
    cJSON_Delete(ans);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reach_computation),
        cmocka_unit_test(test_norm_forms_agree),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_layer_mode),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_batch_position_error),
        cmocka_unit_test(test_decomposition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
