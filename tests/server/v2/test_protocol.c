/* test_protocol.c - server/v2/protocol.c: the Open Inference Protocol's
 * record as http/ uses it (api/api.h's srv_protocol): the path check of the
 * model routes (a bare 404 for an unknown model's ready route; the models
 * of --model through the limits), the GET answers of each operation with
 * the server's readiness and counters, the infer operation as the only one
 * with a body, the error shape, the framing header, and which requests
 * count in a model's counters, under which key.
 */
#include "api_harness.h" /* limits() */
#include "testutil.h"
#include "v2/v2.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const srv_protocol *P = &srv_v2_protocol;

static srv_route_params params(const char *name, const char *version)
{
    srv_route_params p;
    snprintf(p.name, sizeof p.name, "%s", name);
    snprintf(p.version, sizeof p.version, "%s", version);
    return p;
}

static void test_record(void **state)
{
    (void)state;
    assert_string_equal(P->name, "v2");
    assert_string_equal(P->prefix, "/v2");
    assert_string_equal(P->framing_header, "Inference-Header-Content-Length");
    assert_true(P->error_shape == srv_v2_reply_error);
}

/* The fixture gemma2 config as --model g2 and --model t5 would load it. */
static srv_model_set *load_set(void)
{
    static const srv_model_spec specs[] = {{"g2", "tests/fixtures/models/gemma2.json"},
                                           {"t5", "tests/fixtures/models/gemma2.json"}};
    srv_model_set *set = NULL;
    char err[512];
    if (!srv_model_set_load(specs, 2, &set, err, sizeof err))
        fail_msg("%s", err);
    return set;
}

static void test_check(void **state)
{
    (void)state;
    char msg[256];
    srv_limits lim = limits();
    srv_route_params p = params("attention-rope", "");
    srv_protocol_ctx pc = {&lim, &p, true, NULL, NULL};
    assert_true(P->check(SRV_V2_OP_MODEL, &pc, msg, sizeof msg));
    p = params("attention-rope", "1");
    assert_true(P->check(SRV_V2_OP_INFER, &pc, msg, sizeof msg));
    /* An unknown version or model: the 404's message names it... */
    p = params("attention-rope", "2");
    assert_false(P->check(SRV_V2_OP_INFER, &pc, msg, sizeof msg));
    assert_non_null(strstr(msg, "has no version '2'"));
    p = params("attention-nope", "");
    assert_false(P->check(SRV_V2_OP_MODEL_STATS, &pc, msg, sizeof msg));
    assert_non_null(strstr(msg, "unknown model 'attention-nope'"));
    /* ... but a model's ready route answers a bare 404 ([V2]: 4xx, no body). */
    strcpy(msg, "x");
    assert_false(P->check(SRV_V2_OP_MODEL_READY, &pc, msg, sizeof msg));
    assert_string_equal(msg, "");
    /* The models of --model are models too, with the same one version. */
    p = params("g2", "");
    assert_false(P->check(SRV_V2_OP_MODEL, &pc, msg, sizeof msg));
    lim.models = load_set();
    assert_true(P->check(SRV_V2_OP_MODEL, &pc, msg, sizeof msg));
    assert_true(P->check(SRV_V2_OP_MODEL_READY, &pc, msg, sizeof msg));
    p = params("g2", "1");
    assert_true(P->check(SRV_V2_OP_INFER, &pc, msg, sizeof msg));
    p = params("g2", "2");
    assert_false(P->check(SRV_V2_OP_MODEL_STATS, &pc, msg, sizeof msg));
    assert_non_null(strstr(msg, "model 'g2' has no version '2'"));
    p = params("g3", "");
    assert_false(P->check(SRV_V2_OP_MODEL, &pc, msg, sizeof msg));
    assert_non_null(strstr(msg, "those of --model: g2, t5"));
    srv_model_set_free((srv_model_set *)lim.models);
}

typedef struct seen {
    int calls;
    char keys[PA_SCHEME_COUNT + 2][16];
} seen;

static void counts(void *arg, const char *key, srv_model_counts *out)
{
    seen *s = arg;
    snprintf(s->keys[s->calls++ % (PA_SCHEME_COUNT + 2)], 16, "%s", key);
    if (strcmp(key, "alibi") == 0)
        out->success = 5;
    if (strcmp(key, "model:t5") == 0)
        out->success = 6;
}

static void test_answers(void **state)
{
    (void)state;
    srv_limits lim = limits();
    srv_route_params p = params("attention-alibi", "");
    seen s = {0};
    srv_protocol_ctx pc = {&lim, &p, true, counts, &s};
    srv_reply r;

    memset(&r, 0, sizeof r);
    P->answer(SRV_V2_OP_LIVE, &pc, &r);
    assert_int_equal(r.http_status, 200);
    assert_int_equal(r.body_len, 0);
    srv_reply_free(&r);
    /* Ready follows the server's readiness: 200, else 400. */
    P->answer(SRV_V2_OP_READY, &pc, &r);
    assert_int_equal(r.http_status, 200);
    pc.ready = false;
    P->answer(SRV_V2_OP_MODEL_READY, &pc, &r);
    assert_int_equal(r.http_status, 400);
    assert_int_equal(r.body_len, 0);
    srv_reply_free(&r);

    P->answer(SRV_V2_OP_SERVER, &pc, &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(strstr(r.body, "\"binary_tensor_data\""));
    srv_reply_free(&r);
    P->answer(SRV_V2_OP_MODEL, &pc, &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(strstr(r.body, "\"name\":\"attention-alibi\""));
    srv_reply_free(&r);

    /* Statistics ask the counters of a model by its key: the scheme's name. */
    P->answer(SRV_V2_OP_MODEL_STATS, &pc, &r);
    assert_int_equal(r.http_status, 200);
    assert_int_equal(s.calls, 1);
    assert_string_equal(s.keys[0], "alibi");
    assert_non_null(strstr(r.body, "\"inference_count\":5"));
    srv_reply_free(&r);
    /* Every model's: the schemes' by name, then those of --model. */
    s.calls = 0;
    lim.models = load_set();
    P->answer(SRV_V2_OP_STATS, &pc, &r);
    assert_int_equal(r.http_status, 200);
    assert_int_equal(s.calls, PA_SCHEME_COUNT + 2);
    for (int t = 0; t < PA_SCHEME_COUNT; t++)
        assert_string_equal(s.keys[t], pa_scheme_type_name((pa_scheme_type)t));
    assert_string_equal(s.keys[PA_SCHEME_COUNT], "model:g2");
    assert_string_equal(s.keys[PA_SCHEME_COUNT + 1], "model:t5");
    assert_non_null(strstr(r.body, "{\"name\":\"t5\",\"version\":\"1\""));
    assert_non_null(strstr(r.body, "\"inference_count\":6"));
    srv_reply_free(&r);
    p = params("g2", "");
    P->answer(SRV_V2_OP_MODEL, &pc, &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(strstr(r.body, "\"parameters\":{\"layer\":0}"));
    srv_reply_free(&r);
    srv_model_set_free((srv_model_set *)lim.models);
    lim.models = NULL;
    p = params("attention-alibi", "");

    /* Infer has a body: not a GET answer. */
    P->answer(SRV_V2_OP_INFER, &pc, &r);
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
}

static void test_prepare(void **state)
{
    (void)state;
    srv_limits lim = limits();
    srv_route_params p = params("attention-none", "");
    srv_protocol_ctx pc = {&lim, &p, true, NULL, NULL};
    srv_reply r;
    srv_job *job = (srv_job *)&r;
    static const char body[] =
        "{\"inputs\":[{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,0]},"
        "{\"name\":\"k\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[1,0]},"
        "{\"name\":\"v\",\"shape\":[1,1,2],\"datatype\":\"FP32\",\"data\":[3,4]}]}";

    memset(&r, 0, sizeof r);
    /* Only infer takes a body. */
    assert_false(P->prepare(SRV_V2_OP_MODEL, &pc, body, strlen(body), -1, &job, &r));
    assert_null(job);
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
    assert_true(P->prepare(SRV_V2_OP_INFER, &pc, body, strlen(body), -1, &job, &r));
    assert_int_equal(srv_job_task_count(job), 1);
    srv_job_free(job);
    /* The framing value is the JSON header's length: past the body, refused. */
    assert_false(
        P->prepare(SRV_V2_OP_INFER, &pc, body, strlen(body), (int64_t)strlen(body) + 1, &job, &r));
    assert_int_equal(r.http_status, 400);
    assert_non_null(strstr(r.body, "past the end of the"));
    srv_reply_free(&r);
}

/* Only an infer request of a known model counts in its model's counters:
 * a scheme's under the scheme's name, a --model model's under "model:NAME"
 * (so that a --model t5 and attention-t5 count apart). */
static void test_model_key(void **state)
{
    (void)state;
    srv_limits lim = limits();
    srv_route_params p = params("attention-t5", "");
    srv_protocol_ctx pc = {&lim, &p, true, NULL, NULL};
    char buf[80];
    assert_string_equal(P->model_key(SRV_V2_OP_INFER, &pc, buf, sizeof buf), "t5");
    assert_null(P->model_key(SRV_V2_OP_MODEL, &pc, buf, sizeof buf));
    assert_null(P->model_key(SRV_V2_OP_MODEL_STATS, &pc, buf, sizeof buf));
    p = params("t5", "");
    assert_null(P->model_key(SRV_V2_OP_INFER, &pc, buf, sizeof buf));
    lim.models = load_set();
    assert_string_equal(P->model_key(SRV_V2_OP_INFER, &pc, buf, sizeof buf), "model:t5");
    assert_null(P->model_key(SRV_V2_OP_MODEL, &pc, buf, sizeof buf));
    p = params("attention-t5", "");
    assert_string_equal(P->model_key(SRV_V2_OP_INFER, &pc, buf, sizeof buf), "t5");
    srv_model_set_free((srv_model_set *)lim.models);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record),    cmocka_unit_test(test_check),
        cmocka_unit_test(test_answers),   cmocka_unit_test(test_prepare),
        cmocka_unit_test(test_model_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
