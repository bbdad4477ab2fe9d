/* test_infer_model.c - server/v2/infer.c for the models of --model: an
 * infer request to model NAME with parameters.layer (and stack) becomes
 * the /v1 item {"model": NAME, "layer": L, ...}, so its answer is bit for
 * bit the /v1 answer (JSON or binary inputs; sinks, positions, T5's table
 * as inputs), and the /v1 refusals (a layer out of range, a missing
 * tensor, an option the config decides, heads that disagree) come back in
 * the protocol's shape naming the parameter or input. Without HTTP, as
 * test_infer.c; tests/e2e/v2_models.py covers the same over HTTP.
 */
#include "api_harness.h" /* limits(), call() */
#include "codec/base64.h"
#include "testutil.h"
#include "v2/v2.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n zeros as JSON array members. */
#define Z8 "0,0,0,0,0,0,0,0"
#define Z32 Z8 "," Z8 "," Z8 "," Z8
#define Z64 Z32 "," Z32

enum { L = 5, H = 4, HKV = 2, D = 16, NQ = L * H * D, NK = L * HKV * D, NT5 = L * H * D };

static srv_model_set *set;

static int setup(void **state)
{
    static const srv_model_spec specs[] = {
        {"g2", "tests/fixtures/models/gemma2.json"},
        {"oss", "tests/fixtures/models/gpt_oss.json"},
        {"t5", "tests/fixtures/models/t5.json"},
        {"q3", "tests/fixtures/models/qwen3.json"},
        {"dl", "tests/fixtures/models/diffllama.json"},
    };
    char err[512];
    (void)state;
    if (!srv_model_set_load(specs, sizeof specs / sizeof specs[0], &set, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_model_set_free(set);
    return 0;
}

static srv_limits model_limits(void)
{
    srv_limits lim = limits();
    lim.models = set;
    return lim;
}

/* "[x0,x1,...]" with every float32 exact (%.9g). */
static char *json_floats(const float *x, size_t n)
{
    char *buf = tu_alloc(n * 18 + 3, 1), *p = buf;
    *p++ = '[';
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s%.9g", i ? "," : "", (double)x[i]);
    *p++ = ']';
    *p = '\0';
    return buf;
}

static void run_tasks(srv_job *job)
{
    srv_workspace ws = {NULL, 0};
    for (size_t i = 0; i < srv_job_task_count(job); i++)
        srv_job_run_task(job, i, &ws);
    srv_workspace_free(&ws);
}

/* /v1/attention with one item (its members as JSON text, without braces),
 * the output decoded from base64 into out[n]. */
static void v1_output(const char *members, float *out, size_t n)
{
    srv_limits lim = model_limits();
    size_t len = strlen(members) + 64, got = 0;
    char *body = tu_alloc(len, 1);
    int status;
    snprintf(body, len, "{\"output_encoding\":\"b64\",\"inputs\":[{%s}]}", members);
    cJSON *ans = call(&srv_ep_attention, body, &lim, &status);
    free(body);
    expect_ok(ans, status);
    const cJSON *item = output_at(ans, 0);
    const char *b64 = str_at(item, "output", "b64");
    if (b64 == NULL)
        fail_msg("no output: %s", cJSON_PrintUnformatted(item));
    assert_true(srv_b64_decode(b64, strlen(b64), (unsigned char *)out, n * sizeof(float), &got));
    assert_int_equal(got, n * sizeof(float));
    cJSON_Delete(ans);
}

/* An infer request that must succeed with one binary output of n floats
 * (the request asks binary_data_output): its bytes into out. */
static void v2_output(const char *model, const char *body, size_t len, int64_t hlen, float *out,
                      size_t n)
{
    srv_limits lim = model_limits();
    srv_job *job = NULL;
    srv_reply reply;
    memset(&reply, 0, sizeof reply);
    if (!srv_v2_infer_prepare(model, body, len, hlen, &lim, &job, &reply))
        fail_msg("%.*s", (int)reply.body_len, reply.body);
    run_tasks(job);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    if (reply.http_status != 200)
        fail_msg("%d %.*s", reply.http_status, (int)reply.body_len, reply.body);
    assert_non_null(reply.len_header);
    assert_int_equal(reply.body_len, reply.len_value + n * sizeof(float));
    cJSON *head = cJSON_ParseWithLength(reply.body, reply.len_value);
    assert_string_equal(cJSON_GetObjectItem(head, "model_name")->valuestring, model);
    cJSON_Delete(head);
    memcpy(out, reply.body + reply.len_value, n * sizeof(float));
    srv_reply_free(&reply);
}

/* An infer request (JSON only) that must fail with status and a message
 * containing needle ('^': starting with it). */
static void expect_refusal(const char *model, const char *body, int status, const char *needle)
{
    srv_limits lim = model_limits();
    srv_job *job = (srv_job *)&lim;
    srv_reply reply;
    memset(&reply, 0, sizeof reply);
    assert_false(srv_v2_infer_prepare(model, body, strlen(body), -1, &lim, &job, &reply));
    assert_null(job);
    assert_int_equal(reply.http_status, status);
    cJSON *ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    const cJSON *err = cJSON_GetObjectItem(ans, "error");
    assert_true(cJSON_IsString(err));
    assert_int_equal(cJSON_GetArraySize(ans), 1);
    if (needle[0] == '^' ? strncmp(err->valuestring, needle + 1, strlen(needle + 1)) != 0
                         : strstr(err->valuestring, needle) == NULL)
        fail_msg("error '%s' does not contain '%s'", err->valuestring, needle);
    cJSON_Delete(ans);
    srv_reply_free(&reply);
}

typedef struct problem {
    float q[NQ], k[NT5], v[NT5], sinks[H], table[32 * H];
    char *jq, *jk, *jv, *jsinks, *jtable;
} problem;

static void problem_make(problem *p, uint64_t seed, int hkv)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    tu_fill(&r, p->q, NQ, -1, 1);
    tu_fill(&r, p->k, (size_t)L * hkv * D, -1, 1);
    tu_fill(&r, p->v, (size_t)L * hkv * D, -1, 1);
    tu_fill(&r, p->sinks, H, -1, 1);
    tu_fill(&r, p->table, 32 * H, -1, 1);
    p->jq = json_floats(p->q, NQ);
    p->jk = json_floats(p->k, (size_t)L * hkv * D);
    p->jv = json_floats(p->v, (size_t)L * hkv * D);
    p->jsinks = json_floats(p->sinks, H);
    p->jtable = json_floats(p->table, 32 * H);
}

static void problem_free(problem *p)
{
    free(p->jq);
    free(p->jk);
    free(p->jv);
    free(p->jsinks);
    free(p->jtable);
}

/* gpt-oss, every layer (sliding and full, sinks on each), with JSON inputs
 * and with binary ones: the /v1 model item's answer, bit for bit. */
static void test_layers_bit_identical(void **state)
{
    (void)state;
    static problem p;
    static float want[NQ], got[NQ];
    size_t cap = 64 * 1024;
    char *v1 = tu_alloc(cap, 1), *body = tu_alloc(cap, 1);
    problem_make(&p, 11, HKV);
    for (int layer = 0; layer < 4; layer++) {
        snprintf(v1, cap,
                 "\"model\":\"oss\",\"layer\":%d,\"q\":{\"shape\":[5,4,16],\"data\":%s},"
                 "\"k\":{\"shape\":[5,2,16],\"data\":%s},\"v\":{\"shape\":[5,2,16],\"data\":%s},"
                 "\"sinks\":{\"shape\":[4],\"data\":%s}",
                 layer, p.jq, p.jk, p.jv, p.jsinks);
        v1_output(v1, want, NQ);

        snprintf(body, cap,
                 "{\"parameters\":{\"layer\":%d,\"binary_data_output\":true},\"inputs\":["
                 "{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
                 "{\"name\":\"k\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
                 "{\"name\":\"v\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
                 "{\"name\":\"sinks\",\"shape\":[4],\"datatype\":\"FP32\",\"data\":%s}]}",
                 layer, p.jq, p.jk, p.jv, p.jsinks);
        v2_output("oss", body, strlen(body), -1, got, NQ);
        assert_memory_equal(got, want, sizeof want);

        /* The same with every input binary, the header padded to 16 bytes. */
        int n = snprintf(body, cap,
                         "{\"parameters\":{\"layer\":%d,\"binary_data_output\":true},\"inputs\":["
                         "{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\","
                         "\"parameters\":{\"binary_data_size\":%zu}},"
                         "{\"name\":\"k\",\"shape\":[5,2,16],\"datatype\":\"FP32\","
                         "\"parameters\":{\"binary_data_size\":%zu}},"
                         "{\"name\":\"v\",\"shape\":[5,2,16],\"datatype\":\"FP32\","
                         "\"parameters\":{\"binary_data_size\":%zu}},"
                         "{\"name\":\"sinks\",\"shape\":[4],\"datatype\":\"FP32\","
                         "\"parameters\":{\"binary_data_size\":%zu}}]}",
                         layer, sizeof p.q, (size_t)NK * 4, (size_t)NK * 4, sizeof p.sinks);
        size_t hlen = ((size_t)n + 15) / 16 * 16, len = hlen;
        memset(body + n, ' ', hlen - (size_t)n);
        memcpy(body + len, p.q, sizeof p.q), len += sizeof p.q;
        memcpy(body + len, p.k, (size_t)NK * 4), len += (size_t)NK * 4;
        memcpy(body + len, p.v, (size_t)NK * 4), len += (size_t)NK * 4;
        memcpy(body + len, p.sinks, sizeof p.sinks), len += sizeof p.sinks;
        memset(got, 0, sizeof got);
        v2_output("oss", body, len, (int64_t)hlen, got, NQ);
        assert_memory_equal(got, want, sizeof want);
    }
    problem_free(&p);
    free(v1);
    free(body);
}

/* The options of a /v1 model item as parameters and inputs: Gemma 2 with
 * positions and causal off; T5's decoder with its table as an input; an
 * override of the derived base. */
static void test_options_and_stacks(void **state)
{
    (void)state;
    static problem p;
    static float want[NQ], got[NQ];
    size_t cap = 64 * 1024;
    char *v1 = tu_alloc(cap, 1), *body = tu_alloc(cap, 1);

    problem_make(&p, 12, HKV);
    snprintf(v1, cap,
             "\"model\":\"g2\",\"layer\":1,\"causal\":false,\"q_positions\":[7,8,9,10,11],"
             "\"k_positions\":[3,4,5,6,7],\"q\":{\"shape\":[5,4,16],\"data\":%s},"
             "\"k\":{\"shape\":[5,2,16],\"data\":%s},\"v\":{\"shape\":[5,2,16],\"data\":%s}",
             p.jq, p.jk, p.jv);
    v1_output(v1, want, NQ);
    snprintf(body, cap,
             "{\"parameters\":{\"layer\":1,\"causal\":false,\"binary_data_output\":true},"
             "\"inputs\":[{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"k\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"v\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"q_positions\",\"shape\":[5],\"datatype\":\"INT32\","
             "\"data\":[7,8,9,10,11]},"
             "{\"name\":\"k_positions\",\"shape\":[5],\"datatype\":\"INT64\","
             "\"data\":[3,4,5,6,7]}]}",
             p.jq, p.jk, p.jv);
    v2_output("g2", body, strlen(body), -1, got, NQ);
    assert_memory_equal(got, want, sizeof want);

    /* An override replaces the derived base, as on /v1. */
    snprintf(v1, cap,
             "\"model\":\"g2\",\"override\":true,\"scheme\":{\"base\":500},"
             "\"q\":{\"shape\":[5,4,16],\"data\":%s},"
             "\"k\":{\"shape\":[5,2,16],\"data\":%s},\"v\":{\"shape\":[5,2,16],\"data\":%s}",
             p.jq, p.jk, p.jv);
    v1_output(v1, want, NQ);
    snprintf(body, cap,
             "{\"parameters\":{\"override\":true,\"base\":500,\"binary_data_output\":true},"
             "\"inputs\":[{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"k\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"v\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s}]}",
             p.jq, p.jk, p.jv);
    v2_output("g2", body, strlen(body), -1, got, NQ);
    assert_memory_equal(got, want, sizeof want);
    problem_free(&p);

    /* T5's decoder, layer 1: causal, the decoder's buckets, the table an input. */
    problem_make(&p, 13, H);
    snprintf(v1, cap,
             "\"model\":\"t5\",\"stack\":\"decoder\",\"layer\":1,"
             "\"scheme\":{\"table\":{\"shape\":[32,4],\"data\":%s}},"
             "\"q\":{\"shape\":[5,4,16],\"data\":%s},"
             "\"k\":{\"shape\":[5,4,16],\"data\":%s},\"v\":{\"shape\":[5,4,16],\"data\":%s}",
             p.jtable, p.jq, p.jk, p.jv);
    v1_output(v1, want, NQ);
    snprintf(body, cap,
             "{\"parameters\":{\"stack\":\"decoder\",\"layer\":1,\"binary_data_output\":true},"
             "\"inputs\":[{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"k\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"v\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"table\",\"shape\":[32,4],\"datatype\":\"FP32\",\"data\":%s}]}",
             p.jq, p.jk, p.jv, p.jtable);
    v2_output("t5", body, strlen(body), -1, got, NQ);
    assert_memory_equal(got, want, sizeof want);
    /* The encoder (the default stack) answers otherwise: bidirectional. */
    snprintf(body, cap,
             "{\"parameters\":{\"layer\":1,\"binary_data_output\":true},"
             "\"inputs\":[{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"k\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"v\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"table\",\"shape\":[32,4],\"datatype\":\"FP32\",\"data\":%s}]}",
             p.jq, p.jk, p.jv, p.jtable);
    v2_output("t5", body, strlen(body), -1, got, NQ);
    assert_memory_not_equal(got, want, sizeof want);
    problem_free(&p);
    free(v1);
    free(body);
}

/* The /v1 refusals in the protocol's shape, naming the parameter or input. */
static void test_refusals(void **state)
{
    (void)state;
    static const char inputs[] =
        "{\"name\":\"q\",\"shape\":[1,4,16],\"datatype\":\"FP32\",\"data\":[" Z64 "]},"
        "{\"name\":\"k\",\"shape\":[1,2,16],\"datatype\":\"FP32\",\"data\":[" Z32 "]},"
        "{\"name\":\"v\",\"shape\":[1,2,16],\"datatype\":\"FP32\",\"data\":[" Z32 "]}";
    char body[4096];
#define REQ(params, extra)                                                                         \
    (snprintf(body, sizeof body, "{\"parameters\":{%s},\"inputs\":[%s%s]}", params, inputs,        \
              extra),                                                                              \
     body)

    expect_refusal("oss", REQ("\"layer\":1", ""), 400,
                   "^model \"oss\" (gpt_oss) layer 1 has attention sinks (config \"model_type\": "
                   "\"gpt_oss\"): give \"sinks\" [4]");
    expect_refusal("g2", REQ("\"layer\":4", ""), 400,
                   "^parameters.layer=4 is outside the model's 4 layers (0 to 3)");
    expect_refusal("g2", REQ("\"layer\":-1", ""), 400, "^parameters.layer=-1 is outside");
    expect_refusal("g2", REQ("\"layer\":\"1\"", ""), 400, "parameters.layer");
    expect_refusal("g2", REQ("\"layer\":1.5", ""), 400, "parameters.layer");
    expect_refusal("g2", REQ("\"stack\":\"decoder\"", ""), 400,
                   "^parameters.stack is for encoder-decoder models (T5); gemma2 has one stack");
    expect_refusal("t5", REQ("\"stack\":\"middle\"", ""), 400,
                   "^parameters.stack must be \"encoder\" or \"decoder\"");
    expect_refusal("t5", REQ("\"stack\":\"decoder\",\"layer\":2", ""), 400,
                   "^parameters.layer=2 is outside the decoder's 2 layers (0 to 1)");
    expect_refusal("g2", REQ("\"scale\":0.5", ""), 400,
                   "^parameters.scale is decided by the model's config (\"query_pre_attn_scalar\": "
                   "256 gives 0.0625");
    expect_refusal("g2", REQ("\"scale\":0.5", ""), 400, "or send parameters.override true");
    expect_refusal("g2", REQ("\"base\":500", ""), 400,
                   "^parameters.base is decided by the model's config (\"rope_theta\"");
    expect_refusal("g2", REQ("\"override\":1", ""), 400, "parameters.override");
    expect_refusal("g2", REQ("\"max_bias\":8", ""), 400,
                   "^parameters.max_bias is not a parameter of model g2 (known: "
                   "binary_data_output, layer, stack, override, causal,");
    expect_refusal("attention-rope", REQ("\"layer\":1", ""), 400,
                   "^parameters.layer is not a parameter of model attention-rope (known: "
                   "binary_data_output, causal,");
    expect_refusal("t5", REQ("", ""), 400, "give \"table\" [32, 4]");
    expect_refusal("q3", REQ("", ""), 400, "give \"q_norm_weight\" [32]");
    expect_refusal("g2",
                   REQ("", ",{\"name\":\"slopes\",\"shape\":[4],\"datatype\":\"FP32\","
                           "\"data\":[1,1,1,1]}"),
                   400, "^inputs[3].name='slopes' is not an input of model g2 (inputs: q, k, v,");
    expect_refusal("g3", REQ("", ""), 404, "those of --model: g2, oss, t5, q3");
    /* Heads the config does not have. */
    snprintf(body, sizeof body,
             "{\"inputs\":[{\"name\":\"q\",\"shape\":[1,2,16],\"datatype\":\"FP32\",\"data\":[" Z32
             "]},%s]}",
             strchr(inputs, '}') + 2);
    expect_refusal("g2", body, 400, "q.shape[1]=2 does not match the 4 heads of model \"g2\"");
#undef REQ
}

/* DiffLlama: differential's vectors as the inputs lambda_q1 .. lambda_k2;
 * the output [5, 2, 32] is /v1's bit for bit. */
static void test_diffllama_vectors(void **state)
{
    (void)state;
    static problem p;
    static float want[NQ], got[NQ];
    static const char *const lam[4] = {"[0.1,-0.2,0.05,0,0.3,0,0,0.1,0,0,0,0,0,0,0.3,-0.1]",
                                       "[0.2,0.1,-0.05,0,0.1,0,0,0.2,0,0.1,0,0,0,0,-0.3,0.1]",
                                       "[-0.1,0.2,0,0,0,0.1,0,0,0,0,0.2,0,0,0,0.1,0]",
                                       "[0.1,0.1,0.1,0,0,0,0,0,0,0,0,0.3,0,0,0,0.2]"};
    size_t cap = 64 * 1024;
    char *v1 = tu_alloc(cap, 1), *body = tu_alloc(cap, 1);
    problem_make(&p, 13, HKV);
    snprintf(v1, cap,
             "\"model\":\"dl\",\"layer\":2,\"q\":{\"shape\":[5,4,16],\"data\":%s},"
             "\"k\":{\"shape\":[5,2,16],\"data\":%s},\"v\":{\"shape\":[5,2,16],\"data\":%s},"
             "\"differential\":{\"lambda_q1\":%s,\"lambda_k1\":%s,\"lambda_q2\":%s,"
             "\"lambda_k2\":%s}",
             p.jq, p.jk, p.jv, lam[0], lam[1], lam[2], lam[3]);
    v1_output(v1, want, NQ);
    snprintf(body, cap,
             "{\"parameters\":{\"layer\":2,\"binary_data_output\":true},\"inputs\":["
             "{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"k\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"v\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"lambda_q1\",\"shape\":[16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"lambda_k1\",\"shape\":[16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"lambda_q2\",\"shape\":[16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"lambda_k2\",\"shape\":[16],\"datatype\":\"FP32\",\"data\":%s}]}",
             p.jq, p.jk, p.jv, lam[0], lam[1], lam[2], lam[3]);
    v2_output("dl", body, strlen(body), -1, got, NQ);
    assert_memory_equal(got, want, sizeof want);

    /* A vector missing: named as the input. */
    snprintf(body, cap,
             "{\"inputs\":["
             "{\"name\":\"q\",\"shape\":[5,4,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"k\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s},"
             "{\"name\":\"v\",\"shape\":[5,2,16],\"datatype\":\"FP32\",\"data\":%s}]}",
             p.jq, p.jk, p.jv);
    expect_refusal("dl", body, 400, "give \"lambda_q1\" [16]");
    problem_free(&p);
    free(v1);
    free(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layers_bit_identical),
        cmocka_unit_test(test_options_and_stacks),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_diffllama_vectors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
