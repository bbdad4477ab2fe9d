/* test_infer.c - server/v2/infer.c and segments.c: an infer request
 * translated into an attention job, without HTTP: requests go through
 * srv_v2_infer_prepare, every task runs on this thread, srv_job_finish
 * renders the protocol's answer. Checks that binary inputs are borrowed
 * from the body in place (copied only when misaligned), that answers are
 * bit-identical to /v1/attention on the same inputs, the binary answer's
 * layout, the options of current models (the query scalings' and norm
 * variants' scalar parameters too), and error replies
 * ({"error":"..."} with the status). tests/e2e/v2.py covers the same over
 * HTTP; test_model.c the models' metadata and statistics.
 */
#include "api_harness.h" /* limits() */
#include "api/attention.h"
#include "v2/v2.h"
#include "posattn_diff.h"
#include "posattn_mla.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 6, H = 2, D = 4, N = L * H * D };

typedef struct inputs {
    float q[N], k[N], v[N];
} inputs;

static void make_inputs(inputs *in, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    tu_fill(&r, in->q, N, -1, 1);
    tu_fill(&r, in->k, N, -1, 1);
    tu_fill(&r, in->v, N, -1, 1);
}

static const char binary_header[] =
    "{\"parameters\":{\"causal\":true,\"binary_data_output\":true},\"inputs\":["
    "{\"name\":\"q\",\"shape\":[6,2,4],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":"
    "192}},"
    "{\"name\":\"k\",\"shape\":[6,2,4],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":"
    "192}},"
    "{\"name\":\"v\",\"shape\":[6,2,4],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":"
    "192}}],"
    "\"outputs\":[{\"name\":\"output\"},{\"name\":\"weights\"}]}";

/* A body at buf + off: the header padded with spaces to hlen bytes, then
 * q, k, v. Returns the body's length. */
static size_t binary_body(char *buf, size_t off, size_t hlen, const inputs *in)
{
    size_t n = strlen(binary_header);
    assert_true(hlen >= n);
    memcpy(buf + off, binary_header, n);
    memset(buf + off + n, ' ', hlen - n);
    memcpy(buf + off + hlen, in->q, sizeof in->q);
    memcpy(buf + off + hlen + sizeof in->q, in->k, sizeof in->k);
    memcpy(buf + off + hlen + 2 * sizeof in->q, in->v, sizeof in->v);
    return hlen + 3 * sizeof in->q;
}

static void run_tasks(srv_job *job)
{
    srv_workspace ws = {NULL, 0};
    for (size_t i = 0; i < srv_job_task_count(job); i++)
        srv_job_run_task(job, i, &ws);
    srv_workspace_free(&ws);
}

/* The same inputs through /v1/attention (b64 answers): output, weights. */
static void v1_answer(const inputs *in, float *output, float *weights)
{
    static const int shape[3] = {L, H, D};
    const float *t[3] = {in->q, in->k, in->v};
    const char *names[3] = {"q", "k", "v"};
    srv_limits lim = limits();
    cJSON *req = cJSON_CreateObject(), *item = cJSON_CreateObject(), *ans;
    cJSON *list = cJSON_AddArrayToObject(req, "inputs");
    srv_job *job = NULL;
    srv_reply reply;
    char *body, text[64];
    size_t n = 0;

    memset(&reply, 0, sizeof reply);
    cJSON_AddItemToArray(list, item);
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(item, "scheme"), "type", "rope");
    cJSON_AddBoolToObject(item, "causal", true);
    cJSON_AddItemToObject(item, "return",
                          cJSON_CreateStringArray((const char *const[]){"output", "weights"}, 2));
    for (int i = 0; i < 3; i++) {
        cJSON *tn = cJSON_AddObjectToObject(item, names[i]);
        char *b64 = tu_alloc(srv_b64_encoded_len(sizeof in->q) + 1, 1);
        cJSON_AddItemToObject(tn, "shape", cJSON_CreateIntArray(shape, 3));
        srv_b64_encode((const unsigned char *)t[i], sizeof in->q, b64);
        cJSON_AddStringToObject(tn, "b64", b64);
        free(b64);
    }
    body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    assert_true(srv_job_prepare(&srv_ep_attention, body, strlen(body), &lim, &job, &reply));
    free(body);
    run_tasks(job);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    srv_reply_free(&reply);
    item = cJSON_GetArrayItem(cJSON_GetObjectItem(ans, "outputs"), 0);
    snprintf(text, sizeof text, "%s", "output");
    assert_true(srv_b64_decode(
        cJSON_GetObjectItem(cJSON_GetObjectItem(item, text), "b64")->valuestring,
        strlen(cJSON_GetObjectItem(cJSON_GetObjectItem(item, text), "b64")->valuestring),
        (unsigned char *)output, N * sizeof(float), &n));
    assert_int_equal(n, N * sizeof(float));
    const char *w = cJSON_GetObjectItem(cJSON_GetObjectItem(item, "weights"), "b64")->valuestring;
    assert_true(
        srv_b64_decode(w, strlen(w), (unsigned char *)weights, H * L * L * sizeof(float), &n));
    assert_int_equal(n, H * L * L * sizeof(float));
    cJSON_Delete(ans);
}

/* ------------------------------------------------------------------------- */

static void test_binary_borrowed_and_exact(void **state)
{
    (void)state;
    static inputs in;
    float want_out[N], want_w[H * L * L];
    srv_limits lim = limits();
    size_t hlen = (strlen(binary_header) + 15) / 16 * 16; /* binary part 16-byte aligned */
    char *buf = malloc(hlen + 3 * sizeof in.q + 16);
    srv_job *job = NULL;
    srv_reply reply;
    const api_item *it;
    cJSON *head, *outs;
    size_t len;

    assert_non_null(buf);
    make_inputs(&in, 1);
    v1_answer(&in, want_out, want_w);
    len = binary_body(buf, 0, hlen, &in);
    memset(&reply, 0, sizeof reply);
    assert_true(
        srv_v2_infer_prepare("attention-rope", buf, len, (int64_t)hlen, &lim, &job, &reply));

    /* q, k and v are the body's bytes, not copies. */
    assert_non_null(it = api_attention_item(job, 0));
    assert_true(it->q.borrowed && it->k.borrowed && it->v.borrowed);
    assert_ptr_equal(it->q.data, (const void *)(buf + hlen));
    assert_ptr_equal(it->v.data, (const void *)(buf + hlen + 2 * sizeof in.q));

    run_tasks(job);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    assert_int_equal(reply.http_status, 200);
    assert_string_equal(reply.content_type, "application/octet-stream");
    assert_true(reply.len_value > 0);
    assert_string_equal(reply.len_header, "Inference-Header-Content-Length");
    assert_int_equal(reply.body_len, reply.len_value + sizeof want_out + sizeof want_w);
    head = cJSON_ParseWithLength(reply.body, reply.len_value);
    assert_non_null(head);
    outs = cJSON_GetObjectItem(head, "outputs");
    assert_int_equal(cJSON_GetArraySize(outs), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(outs, 0), "name")->valuestring,
                        "output");
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(outs, 1), "parameters"),
                            "binary_data_size")
            ->valueint,
        (int)sizeof want_w);
    assert_memory_equal(reply.body + reply.len_value, want_out, sizeof want_out);
    assert_memory_equal(reply.body + reply.len_value + sizeof want_out, want_w, sizeof want_w);
    cJSON_Delete(head);
    srv_reply_free(&reply);
    free(buf);
}

static void test_binary_misaligned_is_copied(void **state)
{
    (void)state;
    static inputs in;
    float want_out[N], want_w[H * L * L];
    srv_limits lim = limits();
    size_t hlen = (strlen(binary_header) + 15) / 16 * 16;
    char *buf = malloc(hlen + 3 * sizeof in.q + 16);
    srv_job *job = NULL;
    srv_reply reply;
    const api_item *it;
    size_t len;

    assert_non_null(buf);
    make_inputs(&in, 2);
    v1_answer(&in, want_out, want_w);
    len = binary_body(buf, 1, hlen, &in); /* floats at an odd address */
    memset(&reply, 0, sizeof reply);
    assert_true(
        srv_v2_infer_prepare("attention-rope", buf + 1, len, (int64_t)hlen, &lim, &job, &reply));
    assert_non_null(it = api_attention_item(job, 0));
    assert_false(it->q.borrowed);
    assert_memory_equal(it->q.data, in.q, sizeof in.q);
    run_tasks(job);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    assert_int_equal(reply.http_status, 200);
    assert_memory_equal(reply.body + reply.len_value, want_out, sizeof want_out);
    srv_reply_free(&reply);
    free(buf);
}

/* One request that must fail: its status and error message (which contains
 * needle; a needle that starts with '^' must start the message). */
static void expect_v2_error(const char *model, const char *body, size_t len, int64_t hlen,
                            int status, const char *needle)
{
    srv_limits lim = limits();
    srv_job *job = (srv_job *)&lim; /* must be reset to NULL */
    srv_reply reply;
    cJSON *ans;
    const cJSON *err;

    memset(&reply, 0, sizeof reply);
    assert_false(srv_v2_infer_prepare(model, body, len, hlen, &lim, &job, &reply));
    assert_null(job);
    assert_int_equal(reply.http_status, status);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    assert_non_null(ans);
    err = cJSON_GetObjectItem(ans, "error");
    assert_true(cJSON_IsString(err));
    assert_int_equal(cJSON_GetArraySize(ans), 1);
    if (needle[0] == '^' ? strncmp(err->valuestring, needle + 1, strlen(needle + 1)) != 0
                         : strstr(err->valuestring, needle) == NULL)
        fail_msg("error '%s' does not contain '%s'", err->valuestring, needle);
    cJSON_Delete(ans);
    srv_reply_free(&reply);
}

static void test_errors(void **state)
{
    (void)state;
    static inputs in;
    size_t hlen = strlen(binary_header);
    char *buf = malloc(hlen + 3 * sizeof in.q + 8);
    size_t len;
    const char *j;

    assert_non_null(buf);
    make_inputs(&in, 3);
    len = binary_body(buf, 0, hlen, &in);
    expect_v2_error("attention-nope", buf, len, (int64_t)hlen, 404,
                    "unknown model 'attention-nope'");
    expect_v2_error("attention-rope", buf, len, 0, 400, "raw binary request");
    expect_v2_error("attention-rope", buf, len, (int64_t)len + 1, 400, "past the end");
    expect_v2_error("attention-rope", buf, len - 4, (int64_t)hlen, 400, "reaches past the end");
    memset(buf + len, 0, 4);
    expect_v2_error("attention-rope", buf, len + 4, (int64_t)hlen, 400, "add up to 576");
    expect_v2_error("attention-rope", buf, hlen, -1, 400, "no Inference-Header-Content-Length");
    j = "{\"inputs\":["
        "{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1]},"
        "{\"name\":\"k\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
        "{\"name\":\"v\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}";
    expect_v2_error("attention-rope", j, strlen(j), -1, 400,
                    "q.shape product 2 does not match data length 1");
    /* More values than the shape holds is as wrong as fewer. */
    j = "{\"inputs\":["
        "{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2,3]},"
        "{\"name\":\"k\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
        "{\"name\":\"v\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}";
    expect_v2_error("attention-rope", j, strlen(j), -1, 400,
                    "q.shape product 2 does not match data length 3");
    j = "{\"inputs\":[{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"INT32\",\"data\":[1,2]}]}";
    expect_v2_error("attention-rope", j, strlen(j), -1, 400, "q.datatype='INT32'");
    j = "{\"parameters\":{\"rotary_dim\":3},\"inputs\":["
        "{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
        "{\"name\":\"k\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
        "{\"name\":\"v\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}";
    expect_v2_error("attention-rope", j, strlen(j), -1, 400, "parameters.rotary_dim=3");
    j = "{\"parameters\":{\"max_bias\":1},\"inputs\":[]}";
    expect_v2_error("attention-rope", j, strlen(j), -1, 400,
                    "parameters.max_bias is not a parameter");
    j = "{\"inputs\":[{\"name\":\"slopes\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1]}]}";
    expect_v2_error("attention-alibi", j, strlen(j), -1, 400, "slopes.data has 1 values");
    j = "{\"inputs\":[{\"name\":\"slopes\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1,2,3]}]}";
    expect_v2_error("attention-alibi", j, strlen(j), -1, 400, "slopes.data has 3 values");
    /* An output's errors name it as the request does (outputs[i]). */
    j = "{\"outputs\":[{\"name\":\"output\",\"extra\":1}],\"inputs\":["
        "{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
        "{\"name\":\"k\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},"
        "{\"name\":\"v\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}";
    expect_v2_error("attention-rope", j, strlen(j), -1, 400, "^outputs[0] has no field 'extra'");
    j = "{\"outputs\":[7],\"inputs\":[]}";
    expect_v2_error("attention-rope", j, strlen(j), -1, 400, "^outputs[0] must be an object");
    free(buf);
}

/* The options of current models as a v2 infer request: softcap and
 * chunk_size as parameters, sinks (FP32), a mask (BOOL, one byte per
 * element) and a bias (FP32 with -inf) as binary inputs, a JSON mask of
 * booleans too; the answer against the library on the same descriptor. */
static void test_options(void **state)
{
    (void)state;
    enum { OL = 5, OH = 2, OD = 4 };
    srv_limits lim = limits();
    qkv f;
    pa_scheme s;
    pa_attention a;
    lib_out want;
    float sinks[OH] = {0.5f, -0.25f}, bias[OL * OL];
    uint8_t mask[OH * OL * OL];
    tu_rng r;
    char head[4096], *buf;
    size_t hlen, len, at;
    srv_job *job = NULL;
    srv_reply reply;

    tu_rng_seed(&r, 4200);
    for (size_t i = 0; i < sizeof mask; i++)
        mask[i] = tu_uniform(&r, 0, 1) < 0.75;
    for (int i = 0; i < OL * OL; i++)
        bias[i] = i % 6 == 1 ? -INFINITY : (float)tu_uniform(&r, -1, 1);
    qkv_make(&f, OL, OL, OH, OH, OD, OD, 4201);
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    qkv_desc(&f, &s, &a);
    a.causal = true;
    a.softcap = 1.5f;
    a.chunk_size = 3;
    a.sinks = sinks;
    a.mask = mask;
    a.mask_heads = OH;
    a.bias = bias;
    a.bias_heads = 1;
    lib_run(&a, (size_t)OL * OH * OD, &want);

    snprintf(head, sizeof head,
             "{\"parameters\":{\"causal\":true,\"softcap\":1.5,\"chunk_size\":3,"
             "\"binary_data_output\":true},\"inputs\":["
             "{\"name\":\"q\",\"shape\":[5,2,4],\"datatype\":\"FP32\",\"parameters\":"
             "{\"binary_data_size\":160}},"
             "{\"name\":\"k\",\"shape\":[5,2,4],\"datatype\":\"FP32\",\"parameters\":"
             "{\"binary_data_size\":160}},"
             "{\"name\":\"v\",\"shape\":[5,2,4],\"datatype\":\"FP32\",\"parameters\":"
             "{\"binary_data_size\":160}},"
             "{\"name\":\"sinks\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[0.5,-0.25]},"
             "{\"name\":\"bias\",\"shape\":[5,5],\"datatype\":\"FP32\",\"parameters\":"
             "{\"binary_data_size\":100}},"
             "{\"name\":\"mask\",\"shape\":[2,5,5],\"datatype\":\"BOOL\",\"parameters\":"
             "{\"binary_data_size\":50}}],"
             "\"outputs\":[{\"name\":\"output\"}]}");
    hlen = (strlen(head) + 15) / 16 * 16;
    len = hlen + 3 * 160 + 100 + 50;
    buf = tu_alloc(len, 1);
    memset(buf, ' ', hlen);
    memcpy(buf, head, strlen(head));
    at = hlen;
    memcpy(buf + at, f.q, 160);
    memcpy(buf + (at += 160), f.k, 160);
    memcpy(buf + (at += 160), f.v, 160);
    memcpy(buf + (at += 160), bias, 100);
    memcpy(buf + (at += 100), mask, 50);
    memset(&reply, 0, sizeof reply);
    assert_true(
        srv_v2_infer_prepare("attention-rope", buf, len, (int64_t)hlen, &lim, &job, &reply));
    run_tasks(job);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    assert_int_equal(reply.http_status, 200);
    assert_int_equal(reply.body_len, reply.len_value + sizeof(float) * want.n_out);
    {
        /* The binary part starts right after the JSON header: any alignment. */
        for (size_t i = 0; i < want.n_out; i++) {
            float got;
            memcpy(&got, reply.body + reply.len_value + i * sizeof got, sizeof got);
            assert_true(got == want.out[i]); /* the same kernel on the same bytes */
        }
    }
    srv_reply_free(&reply);

    /* The mask as JSON booleans instead: the same answer. */
    {
        char *json = strstr(head, "{\"name\":\"mask\"");
        size_t hl2;
        char *buf2;
        assert_non_null(json);
        at = (size_t)sprintf(json, "{\"name\":\"mask\",\"shape\":[2,5,5],\"datatype\":\"BOOL\","
                                   "\"data\":[");
        for (size_t i = 0; i < sizeof mask; i++)
            at += (size_t)sprintf(json + at, "%s%s", i ? "," : "", mask[i] ? "true" : "false");
        sprintf(json + at, "]}],\"outputs\":[{\"name\":\"output\"}]}");
        assert_true(strlen(head) < sizeof head);
        hl2 = (strlen(head) + 15) / 16 * 16;
        buf2 = tu_alloc(hl2 + 3 * 160 + 100, 1);
        memset(buf2, ' ', hl2);
        memcpy(buf2, head, strlen(head));
        memcpy(buf2 + hl2, buf + hlen, 3 * 160 + 100);
        assert_true(srv_v2_infer_prepare("attention-rope", buf2, hl2 + 3 * 160 + 100, (int64_t)hl2,
                                         &lim, &job, &reply));
        run_tasks(job);
        srv_job_finish(job, &reply);
        srv_job_free(job);
        assert_int_equal(reply.http_status, 200);
        assert_memory_equal(reply.body + reply.len_value, want.out, sizeof(float) * want.n_out);
        srv_reply_free(&reply);
        free(buf2);
    }

    /* A mask byte other than 0 or 1 is refused, naming the input. */
    buf[len - 1] = 2;
    assert_false(
        srv_v2_infer_prepare("attention-rope", buf, len, (int64_t)hlen, &lim, &job, &reply));
    assert_int_equal(reply.http_status, 400);
    assert_non_null(strstr(reply.body, "\"mask is byte 2 at element 49"));
    srv_reply_free(&reply);
    free(buf);
    lib_free(&want);
    qkv_free(&f);
}

/* The output of an infer request (JSON answer) as floats into out[n]. */
static void infer_output(const char *model, const char *body, size_t len, int64_t hlen, float *out,
                         size_t n)
{
    srv_limits lim = limits();
    srv_job *job = NULL;
    srv_reply reply;
    memset(&reply, 0, sizeof reply);
    if (!srv_v2_infer_prepare(model, body, len, hlen, &lim, &job, &reply))
        fail_msg("%.*s", (int)reply.body_len, reply.body);
    run_tasks(job);
    srv_job_finish(job, &reply);
    assert_int_equal(reply.http_status, 200);
    cJSON *root = cJSON_ParseWithLength(reply.body, reply.body_len);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "outputs"), 0), "data");
    assert_int_equal(cJSON_GetArraySize(data), (int)n);
    for (size_t i = 0; i < n; i++)
        out[i] = (float)cJSON_GetArrayItem(data, (int)i)->valuedouble;
    cJSON_Delete(root);
    srv_reply_free(&reply);
    srv_job_free(job);
}

/* Arrays of numbers in binary: M-RoPE rows [3, L] as INT32 and INT64 and a
 * scheme's float array (ALiBi's slopes) as FP32 segments, read from the
 * bytes by /v1's readers through the segment source, give the answer of
 * the same numbers in JSON (flat and as rows), value for value. */
static void test_binary_arrays(void **state)
{
    (void)state;
    static const int32_t rows[3 * L] = {0, 1, 2, 3, 4, 5, 0, 0, 1, 1, 2, 2, 5, 4, 3, 2, 1, 0};
    static const float slopes[H] = {0.5f, 0.125f};
    inputs in;
    float want[N], got[N];
    char head[4096], body[8192];
    make_inputs(&in, 7);
    for (int w = 0; w < 3; w++) { /* JSON flat, INT32 binary, INT64 binary */
        size_t n = 0, hlen;
        char q[1024] = "", k[1024] = "", v[1024] = "", json_rows[256] = "";
        for (int i = 0; i < N; i++) {
            snprintf(q + strlen(q), sizeof q - strlen(q), "%s%.9g", i ? "," : "", in.q[i]);
            snprintf(k + strlen(k), sizeof k - strlen(k), "%s%.9g", i ? "," : "", in.k[i]);
            snprintf(v + strlen(v), sizeof v - strlen(v), "%s%.9g", i ? "," : "", in.v[i]);
        }
        for (int i = 0; i < 3 * L; i++)
            snprintf(json_rows + strlen(json_rows), sizeof json_rows - strlen(json_rows), "%s%d",
                     i ? "," : "", (int)rows[i]);
        snprintf(head, sizeof head,
                 "{\"inputs\":["
                 "{\"name\":\"q\",\"shape\":[6,2,4],\"datatype\":\"FP32\",\"data\":[%s]},"
                 "{\"name\":\"k\",\"shape\":[6,2,4],\"datatype\":\"FP32\",\"data\":[%s]},"
                 "{\"name\":\"v\",\"shape\":[6,2,4],\"datatype\":\"FP32\",\"data\":[%s]},"
                 "{\"name\":\"mrope_section\",\"shape\":[3],\"datatype\":\"INT32\",%s},"
                 "{\"name\":\"q_positions\",\"shape\":[3,6],\"datatype\":\"%s\",%s%s%s}]}",
                 q, k, v, w == 0 ? "\"data\":[1,0,1]" : "\"parameters\":{\"binary_data_size\":12}",
                 w == 2 ? "INT64" : "INT32", w == 0 ? "\"data\":[" : "", w == 0 ? json_rows : "",
                 w == 0   ? "]"
                 : w == 1 ? "\"parameters\":{\"binary_data_size\":72}"
                          : "\"parameters\":{\"binary_data_size\":144}");
        hlen = (strlen(head) + 15) / 16 * 16;
        memset(body, ' ', hlen);
        memcpy(body, head, strlen(head));
        n = hlen;
        if (w > 0) {
            static const int32_t section[3] = {1, 0, 1};
            memcpy(body + n, section, sizeof section);
            n += sizeof section;
        }
        for (int i = 0; w > 0 && i < 3 * L; i++) {
            int64_t x = rows[i];
            memcpy(body + n, &x, w == 2 ? 8 : 4); /* little-endian host */
            n += w == 2 ? 8 : 4;
        }
        infer_output("attention-rope", body, n, w == 0 ? -1 : (int64_t)hlen, w == 0 ? want : got,
                     N);
        if (w > 0)
            assert_memory_equal(got, want, sizeof want);
    }
    /* ALiBi's slopes: JSON, then an FP32 segment. */
    for (int w = 0; w < 2; w++) {
        size_t n, hlen;
        snprintf(head, sizeof head,
                 "{\"inputs\":[{\"name\":\"q\",\"shape\":[6,2,4],\"datatype\":\"FP32\","
                 "\"parameters\":{\"binary_data_size\":192}},"
                 "{\"name\":\"k\",\"shape\":[6,2,4],\"datatype\":\"FP32\","
                 "\"parameters\":{\"binary_data_size\":192}},"
                 "{\"name\":\"v\",\"shape\":[6,2,4],\"datatype\":\"FP32\","
                 "\"parameters\":{\"binary_data_size\":192}},"
                 "{\"name\":\"slopes\",\"shape\":[2],\"datatype\":\"FP32\",%s}]}",
                 w == 0 ? "\"data\":[0.5,0.125]" : "\"parameters\":{\"binary_data_size\":8}");
        hlen = (strlen(head) + 15) / 16 * 16;
        memset(body, ' ', hlen);
        memcpy(body, head, strlen(head));
        n = hlen;
        memcpy(body + n, in.q, sizeof in.q);
        memcpy(body + n + sizeof in.q, in.k, sizeof in.k);
        memcpy(body + n + 2 * sizeof in.q, in.v, sizeof in.v);
        n += 3 * sizeof in.q;
        if (w == 1) {
            memcpy(body + n, slopes, sizeof slopes);
            n += sizeof slopes;
        }
        infer_output("attention-alibi", body, n, (int64_t)hlen, w == 0 ? want : got, N);
        if (w > 0)
            assert_memory_equal(got, want, sizeof want);
    }
}

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
        cmocka_unit_test(test_binary_borrowed_and_exact),
        cmocka_unit_test(test_binary_misaligned_is_copied),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_binary_arrays),
        cmocka_unit_test(test_qscale_parameters),
        cmocka_unit_test(test_shaw_parameters),
        cmocka_unit_test(test_differential_parameters),
        cmocka_unit_test(test_mla_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
