/* test_infer_parameters.c - server/v2/infer.c's scalar parameters of the
 * /v1 item options that take no tensor of their own: the query scalings'
 * and norm variants' (attn_temperature_tuning_*, logn_scaling_*, q/k_norm_*),
 * Shaw's direction and key_term, differential_* and mla_*. Each answer
 * against the library's on the same descriptor, each refusal naming the
 * parameter. Without HTTP, as test_infer.c (infer_fixture.h).
 */
#include "api_harness.h" /* qkv, lib_run() */
#include "infer_fixture.h"
#include "posattn_diff.h"
#include "posattn_mla.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The scalar parameters of the query scalings and the norm variants reach
 * the computation: the library's answer on the same descriptor; their
 * errors name the /v1 field and the value. */
static void test_qscale_parameters(void **state)
{
    (void)state;
    static const float kw[D] = {0.0f, 0.5f, -0.5f, 0.25f};
    inputs in;
    qkv f = {L, L, H, H, D, D, NULL, NULL, NULL};
    pa_scheme s;
    pa_attention a;
    lib_out want;
    float got[N];
    char head[4096];
    make_inputs(&in, 11);
    f.q = in.q;
    f.k = in.k;
    f.v = in.v;
    snprintf(head, sizeof head, "%s",
             "{\"parameters\":{\"causal\":true,"
             "\"attn_temperature_tuning_floor_scale\":2,\"attn_temperature_tuning_attn_scale\":0.5,"
             "\"logn_scaling_train_length\":3,\"q_norm_eps\":1e-5,\"k_norm_weight_offset\":1},"
             "\"inputs\":[");
    for (int t = 0; t < 3; t++) {
        const float *x = t == 0 ? in.q : t == 1 ? in.k : in.v;
        snprintf(head + strlen(head), sizeof head - strlen(head),
                 "{\"name\":\"%c\",\"shape\":[6,2,4],\"datatype\":\"FP32\",\"data\":[", "qkv"[t]);
        for (int i = 0; i < N; i++)
            snprintf(head + strlen(head), sizeof head - strlen(head), "%s%.9g", i ? "," : "",
                     (double)x[i]);
        snprintf(head + strlen(head), sizeof head - strlen(head), "]},");
    }
    snprintf(head + strlen(head), sizeof head - strlen(head),
             "{\"name\":\"k_norm_weight\",\"shape\":[4],\"datatype\":\"FP32\","
             "\"data\":[0,0.5,-0.5,0.25]}]}");
    assert_true(strlen(head) < sizeof head - 1);
    infer_output("attention-rope", head, strlen(head), -1, got, N);
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    qkv_desc(&f, &s, &a);
    a.causal = true;
    a.temperature_floor_scale = 2.0;
    a.temperature_attn_scale = 0.5;
    a.logn_train_length = 3;
    a.q_norm_unweighted = true;
    a.q_norm_eps = 1e-5f;
    a.k_norm = kw;
    a.k_norm_len = D;
    a.k_norm_eps = 1e-6f;
    a.k_norm_offset = 1.0f;
    lib_run(&a, N, &want);
    for (int i = 0; i < N; i++)
        assert_true(fabsf(got[i] - want.out[i]) <= 1e-6f + 1e-6f * fabsf(want.out[i]));
    lib_free(&want);

    static const struct {
        const char *param, *needle;
    } bad[] = {
        {"\"logn_scaling_train_length\":1", "logn_scaling.train_length=1 must be at least 2"},
        {"\"logn_scaling_train_length\":0.5", "parameters.logn_scaling_train_length"},
        {"\"attn_temperature_tuning_attn_scale\":-1", "attn_temperature_tuning.attn_scale=-1"},
        {"\"attn_temperature_tuning_floor_scale\":\"x\"",
         "parameters.attn_temperature_tuning_floor_scale must be a number"},
        {"\"q_norm_weight_offset\":1", "q_norm.weight_offset=1 is added to q_norm.weight"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"parameters\":{%s},\"inputs\":["
                 "{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
                 "{\"name\":\"k\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
                 "{\"name\":\"v\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}",
                 bad[i].param);
        expect_v2_error("attention-none", body, strlen(body), -1, 400, bad[i].needle);
    }
}

/* attention-shaw takes direction and key_term as parameters (Hugging Face
 * BERT's relative_key_query), and names a wrong direction with its value. */
static void test_shaw_parameters(void **state)
{
    (void)state;
    static const float rel_k[5 * 2] = {0.5f, -1, 0.25f, 2, -0.75f, 1, 1.5f, -0.5f, 0, 0.125f};
    static const float q[3 * 2] = {1, 0.5f, -0.25f, 1, 0.75f, -1};
    static const float k[3 * 2] = {0.5f, 1, -1, 0.25f, 1, 0.5f};
    static const float v[3 * 2] = {1, 2, 3, 4, 5, 6};
    const char *j =
        "{\"parameters\":{\"max_relative_position\":2,"
        "\"direction\":\"query_minus_key\",\"key_term\":true},\"inputs\":["
        "{\"name\":\"q\",\"shape\":[3,1,2],\"datatype\":\"FP32\","
        "\"data\":[1,0.5,-0.25,1,0.75,-1]},"
        "{\"name\":\"k\",\"shape\":[3,1,2],\"datatype\":\"FP32\","
        "\"data\":[0.5,1,-1,0.25,1,0.5]},"
        "{\"name\":\"v\",\"shape\":[3,1,2],\"datatype\":\"FP32\",\"data\":[1,2,3,4,5,6]},"
        "{\"name\":\"rel_k\",\"shape\":[5,2],\"datatype\":\"FP32\","
        "\"data\":[0.5,-1,0.25,2,-0.75,1,1.5,-0.5,0,0.125]}]}";
    float got[6], want[6], ws[4096];
    pa_scheme sch;
    pa_attention a;
    pa_attention_out out = {0};
    pa_error err;

    infer_output("attention-shaw", j, strlen(j), -1, got, 6);
    pa_scheme_init(&sch, PA_SCHEME_SHAW);
    sch.shaw.max_relative_position = 2;
    sch.shaw.rel_k = rel_k;
    sch.shaw.rel_k_rows = 5;
    sch.shaw.rel_k_cols = 2;
    sch.shaw.direction = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;
    sch.shaw.key_term = true;
    pa_attention_init(&a, &sch);
    a.num_heads = 1;
    a.head_dim = 2;
    a.q_len = a.k_len = 3;
    a.q = q;
    a.k = k;
    a.v = v;
    out.output = want;
    assert_true(pa_attention_workspace_size(&a) <= sizeof ws);
    TU_ASSERT_STATUS(pa_attention_run(&a, &out, ws, sizeof ws, &err), PA_STATUS_OK, &err);
    assert_memory_equal(got, want, sizeof want);

    j = "{\"parameters\":{\"direction\":\"sideways\"},\"inputs\":[]}";
    expect_v2_error(
        "attention-shaw", j, strlen(j), -1, 400,
        "parameters.direction='sideways' is not 'key_minus_query' or 'query_minus_key'");
    j = "{\"parameters\":{\"key_term\":1},\"inputs\":[]}";
    expect_v2_error("attention-shaw", j, strlen(j), -1, 400,
                    "parameters.key_term must be true or false");
}

/* Differential attention's scalar parameters (differential_*): q [3, 4, 2]
 * (2 output heads), k [3, 2, 2], v [3, 1, 4] (unilm's layout) or [3, 2, 2]
 * (halves), the answer pa_diff_run's; a vector-free lambda only. */
static void test_differential_parameters(void **state)
{
    (void)state;
    float q[3 * 4 * 2], k[3 * 2 * 2], v[3 * 2 * 2], got[3 * 2 * 4], want[3 * 2 * 4];
    tu_rng r;
    tu_rng_seed(&r, 21);
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        q[i] = (float)tu_uniform(&r, -1, 1);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        k[i] = (float)tu_uniform(&r, -1, 1), v[i] = (float)tu_uniform(&r, -1, 1);
    for (int halves = 0; halves < 2; halves++) {
        char body[4096];
        const float *const t[3] = {q, k, v};
        const int n[3] = {24, 12, 12};
        const char *const shape[3] = {"[3,4,2]", "[3,2,2]", halves ? "[3,2,2]" : "[3,1,4]"};
        pa_scheme s;
        pa_attention a;
        pa_differential d;
        pa_error err;
        snprintf(body, sizeof body,
                 "{\"parameters\":{\"causal\":true,\"differential_pairs\":\"%s\","
                 "\"differential_lambda\":0.25,\"differential_depth\":2,"
                 "\"differential_subln_eps\":1e-6},\"inputs\":[",
                 halves ? "halves" : "interleaved");
        for (int j = 0; j < 3; j++) {
            snprintf(body + strlen(body), sizeof body - strlen(body),
                     "%s{\"name\":\"%c\",\"shape\":%s,\"datatype\":\"FP32\",\"data\":[",
                     j ? "," : "", "qkv"[j], shape[j]);
            for (int i = 0; i < n[j]; i++)
                snprintf(body + strlen(body), sizeof body - strlen(body), "%s%.9g", i ? "," : "",
                         (double)t[j][i]);
            snprintf(body + strlen(body), sizeof body - strlen(body), "]}");
        }
        snprintf(body + strlen(body), sizeof body - strlen(body), "]}");
        assert_true(strlen(body) < sizeof body - 1);
        infer_output("attention-rope", body, strlen(body), -1, got, 24);
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        pa_attention_init(&a, &s);
        a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 2;
        a.q_len = a.k_len = 3;
        a.q = q, a.k = k, a.v = v, a.causal = true;
        pa_diff_init(&d);
        d.pairs = halves ? PA_DIFF_PAIRS_HALVES : PA_DIFF_PAIRS_INTERLEAVED;
        d.lambda = 0.25;
        d.lambda_init = pa_diff_lambda_init(2);
        d.subln_eps = 1e-6;
        size_t ws_size = pa_diff_workspace_size(&a, &d);
        void *ws = tu_alloc(ws_size, 1);
        assert_int_equal(pa_diff_run(&a, &d, want, NULL, ws, ws_size, &err), PA_STATUS_OK);
        free(ws);
        for (int i = 0; i < 24; i++)
            assert_true(got[i] == want[i]);
    }
    static const char body[] =
        "{\"parameters\":{\"differential_lambda\":0.1,\"differential_pairs\":\"blocks\"},"
        "\"inputs\":[{\"name\":\"q\",\"shape\":[1,2,2],\"datatype\":\"FP32\",\"data\":[1,2,3,4]},"
        "{\"name\":\"k\",\"shape\":[1,2,2],\"datatype\":\"FP32\",\"data\":[1,2,3,4]},"
        "{\"name\":\"v\",\"shape\":[1,1,4],\"datatype\":\"FP32\",\"data\":[1,2,3,4]}]}";
    expect_v2_error("attention-none", body, strlen(body), -1, 400, "differential.pairs='blocks'");
}

/* Appends input {name, shape, FP32, data} (n values) to body. */
static void add_input(char *body, size_t cap, const char *name, const char *shape, const float *d,
                      int n)
{
    snprintf(body + strlen(body), cap - strlen(body),
             "%s{\"name\":\"%s\",\"shape\":%s,\"datatype\":\"FP32\",\"data\":[",
             body[strlen(body) - 1] == '[' ? "" : ",", name, shape);
    for (int i = 0; i < n; i++)
        snprintf(body + strlen(body), cap - strlen(body), "%s%.9g", i ? "," : "", (double)d[i]);
    snprintf(body + strlen(body), cap - strlen(body), "]}");
}

/* MLA: the parameters mla_rope_dim, mla_absorbed and the inputs k_rope,
 * c_kv, w_uk, w_uv. q [3, 2, 6] (D_nope 4, D_rope 2); expanded k [3, 2, 4],
 * v [3, 2, 3], k_rope [3, 2]; absorbed c_kv [3, 5], k_rope [3, 1, 2],
 * w_uk [2, 4, 5], w_uv [2, 3, 5]; the answer pa_mla_run's, bit for bit. */
static void test_mla_parameters(void **state)
{
    (void)state;
    float q[36], k[24], v[18], kr[6], c[15], wuk[40], wuv[30], got[18], want[18];
    float *const all[7] = {q, k, v, kr, c, wuk, wuv};
    const int n[7] = {36, 24, 18, 6, 15, 40, 30};
    tu_rng r;
    tu_rng_seed(&r, 32);
    for (int t = 0; t < 7; t++)
        for (int i = 0; i < n[t]; i++)
            all[t][i] = (float)tu_uniform(&r, -1, 1);
    for (int absorbed = 0; absorbed < 2; absorbed++) {
        char body[8192];
        pa_scheme s;
        pa_attention a;
        pa_mla m;
        pa_error err;
        snprintf(body, sizeof body,
                 "{\"parameters\":{\"causal\":true,\"layout\":\"gptj\",\"mla_rope_dim\":2%s},"
                 "\"inputs\":[",
                 absorbed ? ",\"mla_absorbed\":true" : "");
        add_input(body, sizeof body, "q", "[3,2,6]", q, 36);
        if (absorbed) {
            add_input(body, sizeof body, "c_kv", "[3,5]", c, 15);
            add_input(body, sizeof body, "k_rope", "[3,1,2]", kr, 6);
            add_input(body, sizeof body, "w_uk", "[2,4,5]", wuk, 40);
            add_input(body, sizeof body, "w_uv", "[2,3,5]", wuv, 30);
        } else {
            add_input(body, sizeof body, "k", "[3,2,4]", k, 24);
            add_input(body, sizeof body, "v", "[3,2,3]", v, 18);
            add_input(body, sizeof body, "k_rope", "[3,2]", kr, 6);
        }
        snprintf(body + strlen(body), sizeof body - strlen(body), "]}");
        assert_true(strlen(body) < sizeof body - 1);
        infer_output("attention-rope", body, strlen(body), -1, got, 18);
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        s.rope.layout = PA_ROPE_LAYOUT_GPTJ;
        pa_attention_init(&a, &s);
        a.num_heads = 2, a.head_dim = 6, a.v_head_dim = 3;
        a.q_len = a.k_len = 3;
        a.q = q, a.causal = true;
        memset(&m, 0, sizeof m);
        m.rope_dim = 2;
        m.k_rope = kr;
        if (absorbed) {
            m.absorbed = true, m.kv_lora_rank = 5, m.c_kv = c, m.w_uk = wuk, m.w_uv = wuv;
        } else {
            a.k = k, a.v = v;
        }
        size_t ws_size = pa_mla_workspace_size(&a, &m);
        void *ws = tu_alloc(ws_size, 1);
        pa_attention_out out = {.output = want};
        assert_int_equal(pa_mla_run(&a, &m, &out, ws, ws_size, &err), PA_STATUS_OK);
        free(ws);
        for (int i = 0; i < 18; i++)
            assert_true(got[i] == want[i]);
    }
    /* A refusal: k_nope's width against q's and mla_rope_dim. */
    char body[2048] = "{\"parameters\":{\"mla_rope_dim\":2},\"inputs\":[";
    add_input(body, sizeof body, "q", "[3,2,6]", q, 36);
    add_input(body, sizeof body, "k", "[3,2,6]", q, 36);
    add_input(body, sizeof body, "v", "[3,2,3]", v, 18);
    add_input(body, sizeof body, "k_rope", "[3,2]", kr, 6);
    snprintf(body + strlen(body), sizeof body - strlen(body), "]}");
    expect_v2_error("attention-none", body, strlen(body), -1, 400,
                    "k.shape[2]=6 does not equal q.shape[2] - mla.rope_dim = 6 - 2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qscale_parameters),
        cmocka_unit_test(test_shaw_parameters),
        cmocka_unit_test(test_differential_parameters),
        cmocka_unit_test(test_mla_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
