/* test_api_errors.c - the JSON API (server/api/) without HTTP, POST
 * /v1/attention requests that fail: wrong as a whole (4xx with code, HTTP
 * status and field), wrong items (their own error in a 200 answer), size
 * limits, and job timing with timed-out items. Requests go through
 * tests/api_harness.c; the answers that succeed are test_api_attention.c.
 */
#include "api_harness.h"
#include "api/api.h"
#include "api/attention.h"
#include "codec/tensor.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* POST /v1/attention: errors, limits, timeouts                              */
/* ------------------------------------------------------------------------- */

/* Requests wrong at the top level fail as a whole. */
static void test_attention_request_errors(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int status;
        const char *code, *field;
    } cases[] = {
        {"", 400, "MALFORMED_JSON", NULL},
        {"   ", 400, "MALFORMED_JSON", NULL},
        {"{\"inputs\":[", 400, "MALFORMED_JSON", NULL},
        {"{\"inputs\":[]} x", 400, "MALFORMED_JSON", NULL},
        {"{\"inputs\":[]}{}", 400, "MALFORMED_JSON", NULL},
        {"[1,2]", 400, "INVALID_ARGUMENT", NULL},
        {"{}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":{}}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[]}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[{}],\"extra\":1}", 400, "UNKNOWN_FIELD", "extra"},
        {"{\"inputs\":[{}],\"output_encoding\":\"hex\"}", 400, "INVALID_ARGUMENT",
         "output_encoding"},
        {"{\"inputs\":[{}],\"output_encoding\":1}", 400, "INVALID_ARGUMENT", "output_encoding"},
        {"{\"inputs\":[{},{},{}]}", 413, "PAYLOAD_TOO_LARGE", "inputs"},
        {"{\"inputs\":[{}],\"inputs\":[{}]}", 400, "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":1e999}", 400, "INVALID_ARGUMENT", "inputs"},
    };
    srv_limits lim = limits();
    lim.max_batch_items = 2;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status;
        cJSON *ans = call(&srv_ep_attention, cases[i].body, &lim, &status);
        expect_error(ans, status, cases[i].status, cases[i].code, cases[i].field);
        cJSON_Delete(ans);
    }
    /* A very deep nesting is malformed (cJSON's limit), not a crash. */
    {
        size_t depth = 10000;
        char *body = tu_alloc(2 * depth + 1, 1);
        int status;
        cJSON *ans;
        memset(body, '[', depth);
        memset(body + depth, ']', depth);
        ans = call(&srv_ep_attention, body, &lim, &status);
        expect_error(ans, status, 400, "MALFORMED_JSON", NULL);
        cJSON_Delete(ans);
        free(body);
    }
}

/* A MALFORMED_JSON message names the cause and shows the bytes around the
 * place; nesting is mentioned only when it is the cause. */
static void test_malformed_json_messages(void **state)
{
    (void)state;
    static const struct {
        const char *body, *has, *lacks;
    } cases[] = {
        {"hello", "before 'hello'", "nesting"},
        {"{\"inputs\":[1,}", "after '{\"inputs\":[1,', before '}'", "nesting"},
        {"{\"inputs\":[", "at the end, after '{\"inputs\":['", "nesting"},
        {"{\"inputs\":[\x01]}", "before '\\x01]}'", "nesting"},
        {"{\"a\":\"0123456789012345678901234567890123456789\" x}",
         "after '8901234567890123456789\" ', before 'x}'", NULL},
    };
    srv_limits lim = limits();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status;
        cJSON *ans = call(&srv_ep_attention, cases[i].body, &lim, &status);
        const char *msg = str_at(ans, "error", "message");
        expect_error(ans, status, 400, "MALFORMED_JSON", NULL);
        if (strstr(msg, cases[i].has) == NULL ||
            (cases[i].lacks != NULL && strstr(msg, cases[i].lacks) != NULL))
            fail_msg("%s: message '%s' should say \"%s\"%s%s", cases[i].body, msg, cases[i].has,
                     cases[i].lacks ? " and not " : "", cases[i].lacks ? cases[i].lacks : "");
        cJSON_Delete(ans);
    }
    {
        size_t depth = 1001;
        char *body = tu_alloc(2 * depth + 1, 1);
        int status;
        cJSON *ans;
        memset(body, '[', depth);
        memset(body + depth, ']', depth);
        ans = call(&srv_ep_attention, body, &lim, &status);
        expect_error(ans, status, 400, "MALFORMED_JSON", NULL);
        assert_non_null(strstr(str_at(ans, "error", "message"), "nesting"));
        cJSON_Delete(ans);
        free(body);
    }
}

/* Items wrong in themselves get their own error; the request answers 200. */
static void test_attention_item_errors(void **state)
{
    (void)state;
#define QKV3                                                                                       \
    "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"                                        \
    "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"                                        \
    "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}"
#define NONE "\"scheme\":{\"type\":\"none\"},"
    static const struct {
        const char *item;
        const char *code, *field, *message_part;
    } cases[] = {
        {"{" NONE QKV3 ",\"foo\":1}", "UNKNOWN_FIELD", "inputs[0].foo", "'foo'"},
        /* The whole list of known names, to the last. */
        {"{" NONE QKV3 ",\"bar\":1}", "UNKNOWN_FIELD", "inputs[0].bar",
         "(known: scheme, q, k, v, x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads, head_dim, "
         "causal, window, key_length, q_positions, k_positions, scale, softcap, sinks, mask, "
         "bias, chunk_size, q_norm, k_norm, b_q, b_k, b_v, b_o, attention_mask, query_length, "
         "k_prerotated, compute_dtype, attn_temperature_tuning, logn_scaling, cu_seqlens, "
         "cu_seqlens_k, model, "
         "layer, stack, override, id, "
         "return, output_dtype, differential, mla, k_rope, c_kv, session, append)"},
        {"{\"scheme\":{\"type\":\"rope\",\"table\":1}," QKV3 "}", "UNKNOWN_FIELD",
         "inputs[0].scheme.table", "scheme 'rope'"},
        {"{\"scheme\":{\"type\":\"rope\",\"base\":\"big\"}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.base", "found string"},
        {"{\"scheme\":{\"type\":\"rope\",\"rotary_dim\":1}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.rotary_dim", "even"},
        {"{\"scheme\":{\"type\":\"rope\",\"factor\":2}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.factor", "scaling"},
        {"{\"scheme\":{\"type\":\"rope\",\"scaling\":\"linear\",\"beta_fast\":2}," QKV3 "}",
         "INVALID_ARGUMENT", "inputs[0].scheme.beta_fast", "yarn"},
        {"{\"scheme\":{\"type\":\"rope\",\"scaling\":\"warp\"}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.scaling", "warp"},
        {"{\"scheme\":{\"type\":\"moon\"}," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme.type",
         "moon"},
        {"{\"scheme\":{}," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme.type", NULL},
        {"{\"scheme\":\"rope\"," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme", "found string"},
        {"{" QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme", "required"},
        {"{\"scheme\":{\"type\":\"none\",\"type\":\"none\"}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.type", "more than once"},
        {"{" NONE QKV3 ",\"causal\":1}", "INVALID_ARGUMENT", "inputs[0].causal", "found number"},
        {"{" NONE QKV3 ",\"window\":1.5}", "INVALID_ARGUMENT", "inputs[0].window", "integer"},
        {"{" NONE QKV3 ",\"key_length\":3e9}", "OUT_OF_RANGE", "inputs[0].key_length", "int32"},
        {"{" NONE QKV3 ",\"key_length\":3}", "OUT_OF_RANGE", "inputs[0].key_length", NULL},
        {"{" NONE QKV3 ",\"window\":-1}", "INVALID_ARGUMENT", "inputs[0].window", NULL},
        {"{" NONE QKV3 ",\"scale\":\"x\"}", "INVALID_ARGUMENT", "inputs[0].scale", "found string"},
        {"{" NONE QKV3 ",\"q_positions\":[0]}", "SHAPE_MISMATCH", "inputs[0].q_positions",
         "q.shape[0]=2"},
        {"{" NONE QKV3 ",\"k_positions\":[0,\"a\"]}", "INVALID_ARGUMENT",
         "inputs[0].k_positions[1]", "found string"},
        {"{" NONE QKV3 ",\"return\":[\"output\",\"attn\"]}", "INVALID_ARGUMENT",
         "inputs[0].return[1]", "attn"},
        {"{" NONE QKV3 ",\"return\":\"output\"}", "INVALID_ARGUMENT", "inputs[0].return", NULL},
        {"{" NONE QKV3 ",\"num_heads\":4}", "SHAPE_MISMATCH", "inputs[0].num_heads",
         "q.shape[1]=2"},
        {"{" NONE QKV3 ",\"x\":{\"shape\":[1,1],\"data\":[1]}}", "INVALID_ARGUMENT", "inputs[0].q",
         "not both"},
        {"{" NONE QKV3 ",\"w_q\":{\"shape\":[1,1],\"data\":[1]}}", "INVALID_ARGUMENT",
         "inputs[0].w_q", "layer"},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}", "INVALID_ARGUMENT",
         "inputs[0].k", NULL},
        {"{" NONE "\"q\":{\"shape\":[2,2],\"data\":[1,2,3,4]},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].q.shape", NULL},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"k\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].k.shape", "k.shape[2]=4 does not equal q.shape[2]=2"},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[1,2,4],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].v.shape", "v.shape[0]=1"},
        {"{" NONE "\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7]},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].q.data", NULL},
        {"{" NONE
         "\"q\":{\"shape\":[2,2,2],\"b64\":\"AA!AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"},"
         "\"k\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"v\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}}",
         "INVALID_ARGUMENT", NULL, NULL},
        {"{\"scheme\":{\"type\":\"sinusoidal\"}," QKV3 "}", "UNSUPPORTED", "inputs[0].scheme.type",
         "layer mode"},
        {"{\"scheme\":{\"type\":\"t5\"}," QKV3 "}", "INVALID_ARGUMENT", "inputs[0].scheme.table",
         NULL},
        {"{\"scheme\":{\"type\":\"alibi\",\"slopes\":[1]}," QKV3 "}", "SHAPE_MISMATCH",
         "inputs[0].scheme.slopes", NULL},
        {"{\"scheme\":{\"type\":\"alibi\",\"slopes\":[]}," QKV3 "}", "INVALID_ARGUMENT",
         "inputs[0].scheme.slopes", "empty"},
        {"{" NONE "\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "INVALID_ARGUMENT", "inputs[0].num_heads", "num_heads"},
        {"{" NONE "\"num_heads\":3,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].w_q.shape", "num_heads=3"},
        {"{" NONE "\"num_heads\":2,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[3,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "SHAPE_MISMATCH", "inputs[0].w_q.shape", "x.shape[1]=4"},
        {"{\"scheme\":{\"type\":\"learned\",\"table\":{\"shape\":[1,4],\"data\":[1,2,3,4]}},"
         "\"num_heads\":2,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "OUT_OF_RANGE", "inputs[0].scheme.table.shape[0]",
         "scheme.table has 1 rows, too few for the default k_positions 0..1"},
        /* Positions the caller sent are named as sent. */
        {"{\"scheme\":{\"type\":\"learned\",\"table\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]}}"
         ","
         "\"num_heads\":2,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},\"k_positions\":[0,2],"
         "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
         "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}}",
         "OUT_OF_RANGE", "inputs[0].k_positions[1]", "outside the learned table"},
        {"7", "INVALID_ARGUMENT", "inputs[0]", "object"},
    };
    srv_limits lim = limits();
    const char *good = "{\"id\":\"ok\"," NONE QKV3 "}";

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i].item) + strlen(good) + 32;
        char *body = tu_alloc(len, 1);
        int status;
        cJSON *ans;
        snprintf(body, len, "{\"inputs\":[%s,%s]}", cases[i].item, good);
        ans = call(&srv_ep_attention, body, &lim, &status);
        if (status != 200)
            fail_msg("case %zu: status %d (%s)", i, status, str_at(ans, "error", "message"));
        expect_item_error(ans, 0, cases[i].code, cases[i].field);
        if (cases[i].message_part != NULL &&
            strstr(str_at(output_at(ans, 0), "error", "message"), cases[i].message_part) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i,
                     str_at(output_at(ans, 0), "error", "message"), cases[i].message_part);
        /* The valid neighbour still ran. */
        assert_non_null(cJSON_GetObjectItemCaseSensitive(output_at(ans, 1), "output"));
        cJSON_Delete(ans);
        free(body);
    }
#undef QKV3
#undef NONE
}

/* Size limits: results over max_tensor_elements are item errors; a request
 * over max_request_memory is a 413 with the figure. */
static void test_attention_limits(void **state)
{
    (void)state;
    srv_limits lim = limits();
    qkv f;
    cJSON *item, *ans;
    int status;
    const char *ret[] = {"weights"};

    qkv_make(&f, 16, 16, 2, 2, 4, 4, 3);
    lim.max_tensor_elements = 256; /* q, k, v have 128; weights would have 512 */
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(ret, 1));
    ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    assert_int_equal(status, 413); /* the only item failed: its status */
    expect_item_error(ans, 0, "PAYLOAD_TOO_LARGE", "inputs[0].weights");
    cJSON_Delete(ans);

    lim.max_tensor_elements = 100; /* q itself is too big */
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    assert_int_equal(status, 413);
    expect_item_error(ans, 0, "PAYLOAD_TOO_LARGE", "inputs[0].q");
    cJSON_Delete(ans);
    qkv_free(&f);

    /* 768 KB of inputs, 256 KB of output and 2 MB of weights, the
     * workspace, and the answer's text (589824 floats as JSON numbers of at
     * most 15 characters and a comma: 9 MB): over 2 MB (b64 inputs, so that
     * parsing the 1 MB body fits). */
    lim = limits();
    lim.max_request_memory = (size_t)2 << 20;
    qkv_make(&f, 512, 512, 2, 2, 64, 64, 4);
    {
        const int shape[3] = {512, 2, 64};
        item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"none\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(f.q, 3, shape));
        cJSON_AddItemToObject(item, "k", jtensor_b64(f.k, 3, shape));
        cJSON_AddItemToObject(item, "v", jtensor_b64(f.v, 3, shape));
        cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(ret, 1));
    }
    ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", NULL);
    assert_string_equal(
        str_at(ans, "error", "message"),
        "request needs 13 MB (inputs, results, workspaces and the answer's text), "
        "limit 2 MB (set by --max-request-mb or POSATTN_MAX_REQUEST_MB); base64 answers "
        "take a third of JSON's");
    cJSON_Delete(ans);

    /* The same as JSON numbers under a 512 KB limit: their floats alone
     * (768 KB, parsed before the tree) are over it. */
    lim.max_request_memory = (size_t)512 << 10;
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", NULL);
    assert_non_null(strstr(str_at(ans, "error", "message"), "to parse"));
    cJSON_Delete(ans);
    qkv_free(&f);
}

/* Timing set by the pool wins; timed-out items are TIMEOUT errors. */
static void test_job_timing_and_timeout(void **state)
{
    (void)state;
    srv_limits lim = limits();
    const char *body =
        "{\"inputs\":[{\"scheme\":{\"type\":\"rope\"},"
        "\"q\":{\"shape\":[1,1,2],\"data\":[1,2]},\"k\":{\"shape\":[1,1,2],\"data\":[1,2]},"
        "\"v\":{\"shape\":[1,1,2],\"data\":[1,2]}},"
        "{\"scheme\":{\"type\":\"alibi\"},"
        "\"q\":{\"shape\":[1,1,2],\"data\":[1,2]},\"k\":{\"shape\":[1,1,2],\"data\":[1,2]},"
        "\"v\":{\"shape\":[1,1,2],\"data\":[1,2]}},{\"scheme\":{\"type\":\"t5\"}}]}";
    srv_job *job = NULL;
    srv_reply reply;
    srv_workspace ws = {NULL, 0};
    cJSON *ans;
    const cJSON *timing;

    memset(&reply, 0, sizeof reply);
    assert_true(srv_job_prepare(&srv_ep_attention, body, strlen(body), &lim, &job, &reply));
    assert_int_equal(srv_job_task_count(job), 3);
    assert_string_equal(srv_job_task_scheme(job, 0), "rope");
    assert_string_equal(srv_job_task_scheme(job, 1), "alibi");
    assert_string_equal(srv_job_task_scheme(job, 2), "t5"); /* invalid, but labelled */
    assert_true(srv_job_task_workspace(job, 0) > 0);
    assert_int_equal(srv_job_task_workspace(job, 2), 0);
    srv_job_run_task(job, 0, &ws);
    srv_job_set_timing(job, 0, 7, 500, 511);
    srv_job_set_timed_out(job, 1);
    srv_job_run_task(job, 2, &ws); /* invalid: a no-op */
    srv_job_finish(job, &reply);
    srv_job_free(job);
    srv_workspace_free(&ws);
    assert_int_equal(reply.http_status, 200);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    srv_reply_free(&reply);
    timing = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "timing");
    assert_int_equal((int)num(timing, "queue_us"), 7);
    assert_int_equal((int)num(timing, "compute_us"), 11);
    assert_int_equal((int)num(timing, "cpu_us"), 11);
    expect_item_error(ans, 1, "TIMEOUT", "inputs[1]");
    expect_item_error(ans, 2, "INVALID_ARGUMENT", "inputs[2].q");
    cJSON_Delete(ans);

    /* A single-task endpoint answers 504. */
    body = "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":4}";
    memset(&reply, 0, sizeof reply);
    assert_true(srv_job_prepare(&srv_ep_encode, body, strlen(body), &lim, &job, &reply));
    assert_int_equal(srv_job_task_count(job), 1);
    srv_job_set_timed_out(job, 0);
    srv_job_finish(job, &reply);
    srv_job_free(job);
    assert_int_equal(reply.http_status, 504);
    ans = cJSON_ParseWithLength(reply.body, reply.body_len);
    assert_string_equal(str_at(ans, "error", "code"), "TIMEOUT");
    cJSON_Delete(ans);
    srv_reply_free(&reply);

    /* Out-of-range indices and NULL are harmless. */
    srv_job_free(NULL);
    assert_int_equal(srv_job_task_count(NULL), 0);
    assert_string_equal(srv_job_task_scheme(NULL, 0), "none");
}

/* output_dtype f16: a finite value the type cannot hold is the item's
 * OUT_OF_RANGE naming the result, whichever result holds it (output,
 * logits, q_rot, k_rot) and whichever its sign; a logit of -180000 from
 * overflow must not pass for a masked key's -inf. q, k and v are [1, 1, 4]
 * with rope at position 0 (no rotation: q_rot is q, k_rot is k). */
static void test_f16_overflow_every_result(void **state)
{
    (void)state;
    static const struct {
        const char *q, *k, *v, *ret, *result;
        const char *value;
    } cases[] = {
        {"0.1,0.1,0.1,0.1", "0.1,0.1,0.1,0.1", "-70000,1,1,1", "\"output\"", "output", "-70000"},
        {"300,300,300,300", "300,300,300,300", "1,1,1,1", "\"output\",\"logits\"", "logits",
         "180000"},
        {"300,300,300,300", "-300,-300,-300,-300", "1,1,1,1", "\"output\",\"logits\"", "logits",
         "-180000"},
        {"70000,0,0,0", "1e-6,0,0,0", "1,1,1,1", "\"output\",\"q_rot\"", "q_rot", "70000"},
        {"1e-6,0,0,0", "-70000,0,0,0", "1,1,1,1", "\"output\",\"k_rot\"", "k_rot", "-70000"},
    };
    srv_limits lim = limits();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char body[1024], want[64];
        int status;
        snprintf(body, sizeof body,
                 "{\"inputs\":[{\"scheme\":{\"type\":\"rope\"},\"q\":{\"shape\":[1,1,4],"
                 "\"data\":[%s]},\"k\":{\"shape\":[1,1,4],\"data\":[%s]},\"v\":{\"shape\":[1,"
                 "1,4],\"data\":[%s]},\"return\":[%s],\"output_dtype\":\"f16\"}]}",
                 cases[c].q, cases[c].k, cases[c].v, cases[c].ret);
        cJSON *ans = call(&srv_ep_attention, body, &lim, &status);
        expect_item_error(ans, 0, "OUT_OF_RANGE", "inputs[0].output_dtype");
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "error"), "message"));
        snprintf(want, sizeof want, "%s holds %s", cases[c].result, cases[c].value);
        if (msg == NULL || strstr(msg, want) == NULL || strstr(msg, "65504") == NULL)
            fail_msg("case %zu: '%s' does not say '%s'", c, msg ? msg : "(none)", want);
        cJSON_Delete(ans);
        /* The same request in f32 answers. */
        char *f16 = strstr(body, "\"f16\"");
        memcpy(f16, "\"f32\"", 5);
        ans = call(&srv_ep_attention, body, &lim, &status);
        expect_ok(ans, status);
        cJSON_Delete(ans);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_overflow_every_result),
        cmocka_unit_test(test_attention_request_errors),
        cmocka_unit_test(test_malformed_json_messages),
        cmocka_unit_test(test_attention_item_errors),
        cmocka_unit_test(test_attention_limits),
        cmocka_unit_test(test_job_timing_and_timeout),
    };
    return cmocka_run_group_tests_name("api_errors", tests, NULL, NULL);
}
