/* test_session_create.c - server/api/session_create.c: POST /v1/sessions
 * through the api layer (tests/server/api/session_fixture.h): every create
 * refusal naming its field; a client's chosen id; the scheme kept as JSON
 * (srv_api_session_scheme rebuilds it) and a delete removing the session's
 * file; a session of a served model's layer, an item over it and its
 * session step (srv_job_session_step). test_sessions.c has the rest of
 * /v1/sessions.
 */
#include "api/api.h"
#include "api_harness.h"
#include "session_fixture.h"
#include "store/kv_cache.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double at_num(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(n))
        fail_msg("%s is not a number", name);
    return n->valuedouble;
}

/* A create body's refusal: status, code and field. */
static void create_refused(const srv_limits *lim, const char *body, int want, const char *code,
                           const char *field, const char *words)
{
    int status;
    cJSON *ans = post(&srv_ep_sessions_create, NULL, body, lim, &status);
    if (code == NULL)
        assert_int_equal(status, want);
    else
        expect_error(ans, status, want, code, field);
    if (words != NULL && strstr(str_at(ans, "error", "message"), words) == NULL)
        fail_msg("message '%s' lacks '%s'", str_at(ans, "error", "message"), words);
    cJSON_Delete(ans);
}

static void test_create_refusals(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
#define S "\"scheme\":{\"type\":\"rope\"}"
    create_refused(&lim, "{\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4}", 400,
                   "INVALID_ARGUMENT", "scheme", "required");
    create_refused(&lim, "{" S ",\"head_dim\":2,\"max_tokens\":4}", 400, "INVALID_ARGUMENT",
                   "num_kv_heads", "required");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"max_tokens\":4}", 400, "INVALID_ARGUMENT",
                   "head_dim", "required");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2}", 400, "INVALID_ARGUMENT",
                   "max_tokens", "required");
    create_refused(&lim, "{" S ",\"num_kv_heads\":0,\"head_dim\":2,\"max_tokens\":4}", 400,
                   "INVALID_ARGUMENT", "num_kv_heads", "num_kv_heads=0");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":0}", 400,
                   "INVALID_ARGUMENT", "max_tokens", "max_tokens=0");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":3,\"max_tokens\":4}", 400, NULL,
                   NULL, NULL);
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"bogus\":1}",
                   400, "UNKNOWN_FIELD", "bogus", "bogus");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"dtype\":\"i8\"}",
                   400, "INVALID_ARGUMENT", "dtype", "i8");
    create_refused(&lim, "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"dtype\":3}",
                   400, "INVALID_ARGUMENT", "dtype", NULL);
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":1}", 400,
                   "INVALID_ARGUMENT", "eviction", "object");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{}}",
                   400, "INVALID_ARGUMENT", "eviction.type", "required");
    create_refused(
        &lim,
        "{" S
        ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{\"type\":\"lru\"}}",
        400, "INVALID_ARGUMENT", "eviction.type", "lru");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"none\",\"window\":2}}",
                   400, "INVALID_ARGUMENT", "eviction.window", "window");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"size\":2}}",
                   400, "UNKNOWN_FIELD", "eviction.size", NULL);
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"sinks\":2}}",
                   400, "INVALID_ARGUMENT", "eviction.window", "required");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"window\":4,\"sinks\":1}}",
                   400, "INVALID_ARGUMENT", "eviction.window", "max_tokens=4");
    create_refused(&lim,
                   "{" S ",\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4,\"eviction\":{"
                   "\"type\":\"window\",\"window\":2,\"reposition\":1}}",
                   400, "INVALID_ARGUMENT", "eviction.reposition", NULL);
    create_refused(&lim,
                   "{\"scheme\":{\"type\":\"cope\"},\"num_kv_heads\":1,\"head_dim\":2,"
                   "\"max_tokens\":4}",
                   400, "UNSUPPORTED", "scheme.type", "cope");
    create_refused(&lim,
                   "{\"scheme\":{\"type\":\"rope\",\"bogus\":1},\"num_kv_heads\":1,\"head_dim\":2,"
                   "\"max_tokens\":4}",
                   400, "UNKNOWN_FIELD", "scheme.bogus", NULL);
    create_refused(&lim, "[1]", 400, "INVALID_ARGUMENT", NULL, NULL);
    create_refused(&lim, "{", 400, "MALFORMED_JSON", NULL, NULL);
#undef S
    /* Nothing was created. */
    {
        srv_kv_stats st;
        srv_kv_stats_get(c, &st);
        assert_int_equal(st.sessions, 0);
    }
    srv_kv_cache_free(c);
}

/* A client's "id": taken as is, SESSION_EXISTS when taken, refused naming
 * "id" when not of the charset; SESSION_NOT_FOUND names the replica. */
static void test_chosen_id(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN];
    int status;
    cJSON *ans;
#define BODY(idjson)                                                                               \
    "{\"id\":" idjson ",\"scheme\":{\"type\":\"alibi\"},\"num_kv_heads\":1,\"head_dim\":2,"        \
    "\"max_tokens\":4}"
    create(BODY("\"conv-9.a_B\""), &lim, id);
    assert_string_equal(id, "conv-9.a_B");
    create_refused(&lim, BODY("\"conv-9.a_B\""), 409, "SESSION_EXISTS", "id", "conv-9.a_B");
    create_refused(&lim, BODY("\".x\""), 400, "INVALID_ARGUMENT", "id", "not starting with '.'");
    create_refused(&lim, BODY("\"a/b\""), 400, "INVALID_ARGUMENT", "id", "A-Z a-z 0-9 _ . -");
    create_refused(&lim, BODY("\"\""), 400, "INVALID_ARGUMENT", "id", NULL);
    create_refused(&lim, BODY("7"), 400, "INVALID_ARGUMENT", "id", NULL);
    create_refused(&lim,
                   BODY("\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\""),
                   400, "INVALID_ARGUMENT", "id", "1 to 64");
    create(BODY("\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\""), &lim, id);
    assert_int_equal(strlen(id), 64);
#undef BODY
    ans = answer(&srv_ep_session_get, "conv-9.a_B", NULL, &lim, &status);
    assert_int_equal(status, 200);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "id")),
                        "conv-9.a_B");
    cJSON_Delete(ans);
    /* The replica is named when the server has a name. */
    ans = answer(&srv_ep_session_get, "nope", NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", "session");
    assert_null(strstr(str_at(ans, "error", "message"), "(replica"));
    cJSON_Delete(ans);
    lim.replica = "pod-3";
    ans = answer(&srv_ep_session_get, "nope", NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", "session");
    assert_non_null(strstr(str_at(ans, "error", "message"), "(replica pod-3)"));
    cJSON_Delete(ans);
    ans = append("nope", 1, 1, 2, NULL, &lim, &status);
    expect_error(ans, status, 404, "SESSION_NOT_FOUND", "session");
    assert_non_null(strstr(str_at(ans, "error", "message"), "(replica pod-3)"));
    cJSON_Delete(ans);
    srv_kv_cache_free(c);
}

/* Create keeps the request's scheme as JSON (arrays the parser lifted out
 * of the body put back), and srv_api_session_scheme makes the same scheme
 * from it; a delete removes the session's file under --cache-dir. */
static void test_scheme_json(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    char id[SRV_KV_ID_LEN], dir[] = "/tmp/posattn-sessions-XXXXXX", path[128], err[256];
    srv_kv_info info;
    srv_kv_err ke;
    srv_kv_spec sp;
    int status;
    cJSON *ans, *kept;
    FILE *f;

    create("{\"scheme\":{\"type\":\"t5\",\"num_buckets\":4,\"max_distance\":8,"
           "\"table\":{\"shape\":[4,1],\"data\":[0.5,1.5,-2,3]}},"
           "\"num_kv_heads\":1,\"head_dim\":2,\"max_tokens\":4}",
           &lim, id);
    assert_true(srv_kv_info_get(c, id, &info, &ke));
    assert_non_null(info.spec.scheme_json);
    kept = cJSON_Parse(info.spec.scheme_json);
    assert_non_null(kept);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(kept, "type")), "t5");
    {
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(kept, "table"), "data");
        assert_true(cJSON_IsArray(data));
        assert_int_equal(cJSON_GetArraySize(data), 4);
        assert_true(cJSON_GetArrayItem(data, 2)->valuedouble == -2.0);
    }
    cJSON_Delete(kept);
    memset(&sp, 0, sizeof sp);
    assert_true(srv_api_session_scheme(&lim, info.spec.scheme_json, &sp, err, sizeof err));
    assert_int_equal(sp.scheme->type, PA_SCHEME_T5);
    assert_int_equal(sp.scheme->t5.num_buckets, 4);
    assert_true(sp.scheme->t5.table[2] == -2.0f);
    sp.scheme_free(sp.scheme_owner);
    /* What does not parse says why. */
    memset(&sp, 0, sizeof sp);
    assert_false(srv_api_session_scheme(&lim, "{\"type\":", &sp, err, sizeof err));
    assert_non_null(strstr(err, "not JSON"));
    assert_false(srv_api_session_scheme(&lim, "{\"type\":\"warp\"}", &sp, err, sizeof err));
    assert_non_null(strstr(err, "scheme.type"));
    assert_null(sp.scheme_owner);

    /* DELETE removes dir/ID.safetensors. */
    assert_non_null(mkdtemp(dir));
    lim.cache_dir = dir;
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, id);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    ans = answer(&srv_ep_session_delete, id, NULL, &lim, &status);
    assert_int_equal(status, 200);
    cJSON_Delete(ans);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(rmdir(dir), 0);
    srv_kv_cache_free(c);
}

/* A /v1/attention body of one item over session id: extra members (each
 * followed by a comma), q [1, 4, 16] and append (a JSON object). */
static char *step_body(const char *id, const char *extra, const char *append_json)
{
    char *b = malloc(strlen(extra) + strlen(append_json) + 512);
    sprintf(b,
            "{\"inputs\":[{\"session\":\"%s\",%s"
            "\"q\":{\"shape\":[1,4,16],\"data\":[%s]},\"append\":%s}]}",
            id, extra,
            "1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
            "1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
            append_json);
    return b;
}

/* A session of a served model's layer: its scheme and dims from the
 * config (dims sent must agree), model and layer shown; an item over it
 * takes the layer's options (a conflicting one refused unless override);
 * the finished job's session step has its scheme and wall time; a saved
 * session's scheme is rebuilt only while the model still derives it. */
static void test_model_session(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new((size_t)1 << 20, 0);
    srv_limits lim = lim_of(c);
    srv_model_set *models = NULL;
    srv_model_spec specs[] = {{"g2", "tests/fixtures/models/gemma2.json"}};
    char id[SRV_KV_ID_LEN], err[256], *kv, *body;
    srv_kv_info info;
    srv_kv_spec sp;
    srv_job *job = NULL;
    srv_reply r;
    const char *scheme = NULL;
    double seconds = 0;
    size_t at = 0;
    int status;
    cJSON *ans;

    assert_true(srv_model_set_load(specs, 1, &models, err, sizeof err));
    lim.models = models;
    ans = post(&srv_ep_sessions_create, NULL,
               "{\"model\":\"g2\",\"layer\":0,\"head_dim\":16,\"max_tokens\":8}", &lim, &status);
    assert_int_equal(status, 201);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "model")), "g2");
    assert_int_equal((int)at_num(ans, "layer"), 0);
    assert_int_equal((int)at_num(ans, "num_kv_heads"), 2);
    assert_int_equal((int)at_num(ans, "v_head_dim"), 16);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "scheme")),
                        "rope");
    snprintf(id, sizeof id, "%s",
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ans, "id")));
    cJSON_Delete(ans);
    ans = post(&srv_ep_sessions_create, NULL,
               "{\"model\":\"g2\",\"layer\":0,\"v_head_dim\":8,\"max_tokens\":8}", &lim, &status);
    expect_error(ans, status, 400, "SHAPE_MISMATCH", "v_head_dim");
    cJSON_Delete(ans);
    ans = post(&srv_ep_sessions_create, NULL, "{\"model\":\"g2\",\"layer\":-1,\"max_tokens\":8}",
               &lim, &status);
    expect_error(ans, status, 400, "OUT_OF_RANGE", "layer");
    cJSON_Delete(ans);

    /* One step over it: the layer's options merged (softcap refused
     * without override, layer refused), then the step's scheme and wall
     * time. */
    kv = append_body(1, 2, 16, 3, NULL);
    body = step_body(id, "\"softcap\":2,", kv);
    ans = call(&srv_ep_attention, body, &lim, &status);
    expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].softcap");
    cJSON_Delete(ans);
    free(body);
    body = step_body(id, "\"layer\":1,", kv);
    ans = call(&srv_ep_attention, body, &lim, &status);
    expect_item_error(ans, 0, "INVALID_ARGUMENT", "inputs[0].layer");
    cJSON_Delete(ans);
    free(body);
    body = step_body(id, "\"softcap\":2,\"override\":true,", kv);
    memset(&r, 0, sizeof r);
    assert_true(srv_job_prepare(&srv_ep_attention, body, strlen(body), &lim, &job, &r));
    assert_int_equal(srv_job_task_count(job), 1);
    srv_job_run_task(job, 0, NULL);
    srv_job_set_timing(job, 0, 5, 1000, 1250);
    assert_true(srv_job_session_step(job, &at, &scheme, &seconds));
    assert_string_equal(scheme, "rope");
    assert_true(seconds == 250e-6);
    assert_false(srv_job_session_step(job, &at, &scheme, &seconds));
    srv_job_finish(job, &r);
    srv_job_free(job);
    ans = parse_reply(&r, &status);
    expect_ok(ans, status);
    cJSON_Delete(ans);
    free(body);
    free(kv);

    /* A saved session's scheme, checked against the model loaded now. */
    assert_true(srv_kv_info_get(c, id, &info, NULL));
    assert_string_equal(info.model, "g2");
    memset(&sp, 0, sizeof sp);
    sp.model = "g2";
    sp.num_kv_heads = 2;
    sp.head_dim = sp.v_head_dim = 16;
    assert_true(srv_api_session_scheme(&lim, info.spec.scheme_json, &sp, err, sizeof err));
    sp.scheme_free(sp.scheme_owner);
    memset(&sp, 0, sizeof sp);
    sp.model = "g3";
    assert_false(srv_api_session_scheme(&lim, "{\"type\":\"none\"}", &sp, err, sizeof err));
    assert_non_null(strstr(err, "not loaded"));
    sp.model = "g2";
    sp.num_kv_heads = 2;
    sp.head_dim = sp.v_head_dim = 16;
    assert_false(srv_api_session_scheme(&lim, "{\"type\":\"none\"}", &sp, err, sizeof err));
    assert_non_null(strstr(err, "another scheme"));
    sp.layer = 7;
    assert_false(srv_api_session_scheme(&lim, info.spec.scheme_json, &sp, err, sizeof err));
    assert_non_null(strstr(err, "has 4 layers"));
    assert_null(sp.scheme_owner);
    srv_kv_cache_free(c);
    srv_model_set_free(models);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_refusals),
        cmocka_unit_test(test_chosen_id),
        cmocka_unit_test(test_scheme_json),
        cmocka_unit_test(test_model_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
