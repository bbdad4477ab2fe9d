/* test_infer.c - server/v2/infer.c and segments.c: an infer request
 * translated into an attention job, without HTTP: requests go through
 * srv_v2_infer_prepare, every task runs on this thread, srv_job_finish
 * renders the protocol's answer. Checks that binary inputs are borrowed
 * from the body in place (copied only when misaligned), that answers are
 * bit-identical to /v1/attention on the same inputs, the binary answer's
 * layout, the options of current models, and error replies
 * ({"error":"..."} with the status). tests/e2e/v2.py covers the same over
 * HTTP; test_infer_parameters.c the options' scalar parameters;
 * test_model.c the models' metadata and statistics.
 */
#include "api_harness.h" /* limits() */
#include "api/attention.h"
#include "infer_fixture.h"
#include "v2/v2.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binary_borrowed_and_exact),
        cmocka_unit_test(test_binary_misaligned_is_copied),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_binary_arrays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
