/* test_infer_sequence.c - server/v2/infer.c's sequences (Triton's
 * sequence extension: parameters sequence_id, sequence_start,
 * sequence_end, and the sequence_* sizes), without HTTP: requests go
 * through srv_v2_infer_prepare against a session cache, tasks run on this
 * thread. Checks that a start makes the session "seq-<id>" with the
 * model's scheme, k and v's dims and the sizes (max_tokens 4096 by
 * default), that steps append and read it, that end deletes it, and the
 * refusals: an unknown id without a start (404), a start on a live id
 * (409), a start that fails later leaving no session, parameters out of
 * place, ids that are no ids. tests/e2e/v2_sequences.py checks the answers
 * against /v1 over HTTP.
 */
#include "api_harness.h" /* limits() */
#include "store/kv_cache.h"
#include "v2/v2.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_kv_cache *cache_new(void)
{
    srv_kv_cache *c = srv_kv_cache_new(
        &(srv_kv_config){.budget_bytes = (size_t)8 << 20, .block_tokens = 16, .ttl_s = 0});
    assert_non_null(c);
    return c;
}

/* One infer request: parameters (JSON text, inside {}), n tokens of k and
 * v ([n, 1, 2]; none when 0) and q [1, 2, qd]. Returns the HTTP status;
 * the answer (or error) text into out[cap]. */
static int infer(srv_kv_cache *c, const char *model, const char *params, int n, int qd, char *out,
                 size_t cap)
{
    srv_limits lim = limits();
    srv_job *job = NULL;
    srv_reply reply;
    char body[4096], kv[1024] = "";
    int status;
    size_t o = 0;

    lim.sessions = c;
    if (n > 0) {
        char data[256] = "";
        for (int i = 0; i < 2 * n; i++)
            snprintf(data + strlen(data), sizeof data - strlen(data), "%s0.%d", i ? "," : "",
                     i % 10);
        snprintf(kv, sizeof kv,
                 ",{\"name\":\"k\",\"shape\":[%d,1,2],\"datatype\":\"FP32\",\"data\":[%s]}"
                 ",{\"name\":\"v\",\"shape\":[%d,1,2],\"datatype\":\"FP32\",\"data\":[%s]}",
                 n, data, n, data);
    }
    o = (size_t)snprintf(body, sizeof body,
                         "{\"parameters\":{%s},\"inputs\":[{\"name\":\"q\",\"shape\":[1,2,%d],"
                         "\"datatype\":\"FP32\",\"data\":[",
                         params, qd);
    for (int i = 0; i < 2 * qd; i++)
        o += (size_t)snprintf(body + o, sizeof body - o, "%s0.5", i ? "," : "");
    snprintf(body + o, sizeof body - o, "]}%s]}", kv);
    memset(&reply, 0, sizeof reply);
    if (srv_v2_infer_prepare(model, body, strlen(body), -1, &lim, &job, &reply)) {
        srv_workspace ws = {NULL, 0};
        for (size_t i = 0; i < srv_job_task_count(job); i++)
            srv_job_run_task(job, i, &ws);
        srv_workspace_free(&ws);
        srv_job_finish(job, &reply);
        srv_job_free(job);
    } else {
        assert_null(job);
    }
    status = reply.http_status;
    snprintf(out, cap, "%.*s", (int)reply.body_len, reply.body != NULL ? reply.body : "");
    srv_reply_free(&reply);
    return status;
}

static void expect(srv_kv_cache *c, const char *model, const char *params, int n, int qd,
                   int status, const char *needle)
{
    char out[2048];
    int st = infer(c, model, params, n, qd, out, sizeof out);
    if (st != status || strstr(out, needle) == NULL)
        fail_msg("%s {%s}: %d '%s', expected %d with '%s'", model, params, st, out, status, needle);
}

static bool info_of(srv_kv_cache *c, const char *id, srv_kv_info *info)
{
    srv_kv_err ke;
    return srv_kv_info_get(c, id, info, &ke);
}

static void test_start_steps_end(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new();
    srv_kv_info info;

    expect(c, "attention-rope", "\"sequence_id\":42,\"sequence_start\":true,\"base\":100", 3, 2,
           200, "\"shape\":[1,2,2]");
    assert_true(info_of(c, "seq-42", &info));
    assert_int_equal(info.length, 3);
    assert_int_equal(info.scheme_type, PA_SCHEME_ROPE);
    assert_int_equal(info.spec.num_kv_heads, 1);
    assert_int_equal(info.spec.head_dim, 2);
    assert_int_equal(info.spec.v_head_dim, 2);
    assert_int_equal(info.spec.max_tokens, 4096);
    assert_int_equal(info.spec.eviction, SRV_KV_EVICT_NONE);
    expect(c, "attention-rope", "\"sequence_id\":42,\"causal\":true", 1, 2, 200, "outputs");
    expect(c, "attention-rope", "\"sequence_id\":\"42\"", 0, 2, 200, "outputs"); /* the same */
    assert_true(info_of(c, "seq-42", &info));
    assert_int_equal(info.length, 4);
    expect(c, "attention-rope", "\"sequence_id\":42,\"sequence_end\":true", 1, 2, 200, "outputs");
    assert_false(info_of(c, "seq-42", &info));
    expect(c, "attention-rope", "\"sequence_id\":42", 1, 2, 404,
           "parameters.sequence_id=42 is not a live sequence");
    /* Start and end in one request: a sequence of one step. */
    expect(c, "attention-alibi",
           "\"sequence_id\":\"one\",\"sequence_start\":true,"
           "\"sequence_end\":true",
           2, 2, 200, "outputs");
    assert_false(info_of(c, "seq-one", &info));
    srv_kv_cache_free(c);
}

/* A step's append lands when its task runs: a start whose job is freed
 * unrun (the queue was full) leaves no sequence, and an end whose job is
 * freed unrun leaves the sequence as it was. */
static void test_unrun(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new();
    srv_limits lim = limits();
    srv_kv_info info;
    srv_job *job = NULL;
    srv_reply reply;
    const char *start = "{\"parameters\":{\"sequence_id\":7,\"sequence_start\":true},"
                        "\"inputs\":[{\"name\":\"q\",\"shape\":[1,2,2],\"datatype\":"
                        "\"FP32\",\"data\":[1,2,3,4]},{\"name\":\"k\",\"shape\":[1,1,2],"
                        "\"datatype\":\"FP32\",\"data\":[1,2]},{\"name\":\"v\",\"shape\":"
                        "[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}";

    lim.sessions = c;
    memset(&reply, 0, sizeof reply);
    assert_true(srv_v2_infer_prepare("attention-alibi", start, strlen(start), -1, &lim, &job,
                                     &reply));
    assert_true(info_of(c, "seq-7", &info)); /* made at parse, empty */
    assert_int_equal(info.length, 0);
    srv_job_free(job);
    assert_false(info_of(c, "seq-7", &info));

    expect(c, "attention-alibi", "\"sequence_id\":7,\"sequence_start\":true", 2, 2, 200,
           "outputs");
    {
        const char *e2 = "{\"parameters\":{\"sequence_id\":7,\"sequence_end\":true},"
                         "\"inputs\":[{\"name\":\"q\",\"shape\":[1,2,2],\"datatype\":"
                         "\"FP32\",\"data\":[1,2,3,4]},{\"name\":\"k\",\"shape\":[1,1,2],"
                         "\"datatype\":\"FP32\",\"data\":[1,2]},{\"name\":\"v\",\"shape\":"
                         "[1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}";
        job = NULL;
        assert_true(
            srv_v2_infer_prepare("attention-alibi", e2, strlen(e2), -1, &lim, &job, &reply));
        srv_job_free(job);
    }
    assert_true(info_of(c, "seq-7", &info));
    assert_int_equal(info.length, 2);
    srv_kv_cache_free(c);
}

static void test_sizes(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new();
    srv_kv_info info;

    expect(c, "attention-alibi",
           "\"sequence_id\":\"w\",\"sequence_start\":true,"
           "\"sequence_window\":4,\"sequence_sinks\":1,"
           "\"sequence_reposition\":true",
           2, 2, 200, "outputs");
    assert_true(info_of(c, "seq-w", &info));
    assert_int_equal(info.spec.eviction, SRV_KV_EVICT_WINDOW);
    assert_int_equal(info.spec.window, 4);
    assert_int_equal(info.spec.sinks, 1);
    assert_true(info.spec.reposition);
    assert_int_equal(info.spec.max_tokens, 5);
    for (int i = 0; i < 6; i++)
        expect(c, "attention-alibi", "\"sequence_id\":\"w\"", 1, 2, 200, "outputs");
    assert_true(info_of(c, "seq-w", &info));
    assert_int_equal(info.length, 5);
    expect(c, "attention-none",
           "\"sequence_id\":7,\"sequence_start\":true,"
           "\"sequence_max_tokens\":3",
           2, 2, 200, "outputs");
    assert_true(info_of(c, "seq-7", &info));
    assert_int_equal(info.spec.max_tokens, 3);
    expect(c, "attention-none", "\"sequence_id\":7", 2, 2, 409, "max_tokens=3");
    expect(c, "attention-none",
           "\"sequence_id\":8,\"sequence_start\":true,"
           "\"sequence_max_tokens\":0",
           1, 2, 400, "parameters.sequence_max_tokens=0");
    expect(c, "attention-none",
           "\"sequence_id\":8,\"sequence_start\":true,"
           "\"sequence_window\":0",
           1, 2, 400, "parameters.sequence_window=0");
    assert_false(info_of(c, "seq-8", &info));
    srv_kv_cache_free(c);
}

static void test_refusals(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new();
    srv_kv_info info;

    expect(c, "attention-rope", "\"sequence_id\":5", 1, 2, 404, "sequence_start true");
    expect(c, "attention-rope", "\"sequence_id\":5,\"sequence_start\":true", 1, 2, 200, "outputs");
    expect(c, "attention-rope", "\"sequence_id\":5,\"sequence_start\":true", 1, 2, 409,
           "parameters.sequence_id=5: sequence_start names a live sequence");
    assert_true(info_of(c, "seq-5", &info));
    assert_int_equal(info.length, 1);
    expect(c, "attention-alibi", "\"sequence_id\":5", 1, 2, 400,
           "a sequence of model attention-rope");
    expect(c, "attention-rope", "\"sequence_id\":5,\"base\":10", 1, 2, 400,
           "parameters.base is the sequence's");
    expect(c, "attention-rope", "\"sequence_id\":5,\"sequence_window\":3", 1, 2, 400,
           "goes with sequence_start");
    expect(c, "attention-rope", "\"sequence_id\":5,\"key_length\":1", 1, 2, 400, "key_length");
    /* A start refused after the session was made leaves none. */
    expect(c, "attention-rope", "\"sequence_id\":6,\"sequence_start\":true", 1, 4, 400,
           "q.shape[2]=4");
    assert_false(info_of(c, "seq-6", &info));
    expect(c, "attention-rope", "\"sequence_id\":6,\"sequence_start\":true", 0, 2, 400,
           "needs inputs k");
    expect(c, "attention-rope", "\"sequence_start\":true", 1, 2, 400,
           "parameters.sequence_start belongs to a sequence");
    expect(c, "attention-rope", "\"sequence_id\":8,\"sequence_start\":true,\"sequence_sinks\":1", 1,
           2, 400, "goes with parameters.sequence_window");
    /* 0 and "" are no sequence: a stateless request, which a start or an
     * end cannot be. */
    expect(c, "attention-rope", "\"sequence_id\":0", 1, 2, 200, "outputs");
    expect(c, "attention-rope", "\"sequence_id\":\"\"", 1, 2, 200, "outputs");
    expect(c, "attention-rope", "\"sequence_id\":0,\"sequence_end\":true", 1, 2, 400, "not 0 or");
    expect(c, "attention-rope", "\"sequence_id\":-1", 1, 2, 400, "is not a sequence id");
    expect(c, "attention-rope", "\"sequence_id\":2.5", 1, 2, 400, "is not a sequence id");
    expect(c, "attention-rope", "\"sequence_id\":\"a b\"", 1, 2, 400, "is not a sequence id");
    expect(c, "attention-rope", "\"sequence_id\":true", 1, 2, 400,
           "must be an unsigned integer or a string");
    expect(c, "attention-rope", "\"sequence_id\":1,\"sequence_end\":1", 1, 2, 400,
           "parameters.sequence_end");
    srv_kv_cache_free(c);
}

static void test_without_cache(void **state)
{
    (void)state;
    expect(NULL, "attention-rope", "\"sequence_id\":1,\"sequence_start\":true", 1, 2, 501,
           "keeps no sessions");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_steps_end),
        cmocka_unit_test(test_unrun),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_without_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
