/* test_item_session.c - server/api/item_session.c's append, when it lands:
 * an attention item with "session" and "append" changes the session only
 * when its first task starts, never at parse time. A request that is read
 * and then refused (its job freed unrun, as for a full queue) or whose
 * deadline passes before it runs leaves the session as it was; once the
 * append landed, every part of the item runs, deadline or not; an append
 * checked against a session that took tokens since is refused
 * (SESSION_BUSY) with nothing appended; a batch may not name a session it
 * appends to twice. The step's answer equals the stateless request over
 * the session's keys and values. Tasks run on this thread, in the order a
 * test chooses (srv_job_run_task, srv_job_task_keep).
 */
#include "api_harness.h"
#include "store/kv_cache.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HKV = 2, D = 8 };

static srv_kv_cache *cache_new(void)
{
    srv_kv_cache *c = srv_kv_cache_new(
        &(srv_kv_config){.budget_bytes = (size_t)64 << 20, .block_tokens = 16, .ttl_s = 0});
    assert_non_null(c);
    return c;
}

/* A session of scheme (JSON) with hkv heads of d, holding n tokens of k,
 * v from the fixture rows [0, n); its id into id. */
static void session_new(srv_kv_cache *c, const char *scheme, int hkv, int d, const float *k,
                        const float *v, int n, char id[SRV_KV_ID_LEN])
{
    srv_limits lim = limits();
    char body[512];
    int status;
    cJSON *ans;
    srv_kv_err ke;

    lim.sessions = c;
    snprintf(body, sizeof body,
             "{\"scheme\":%s,\"num_kv_heads\":%d,\"head_dim\":%d,\"max_tokens\":4096}", scheme,
             hkv, d);
    ans = call(&srv_ep_sessions_create, body, &lim, &status);
    assert_int_equal(status, 201);
    snprintf(id, SRV_KV_ID_LEN, "%s", cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring);
    cJSON_Delete(ans);
    if (n > 0 && !srv_kv_append(c, id, k, v, n, NULL, &ke))
        fail_msg("append: %s", ke.message);
}

static int32_t length_of(srv_kv_cache *c, const char *id)
{
    srv_kv_info info;
    srv_kv_err ke;
    if (!srv_kv_info_get(c, id, &info, &ke))
        fail_msg("%s: %s", id, ke.message);
    return info.length;
}

/* {"session": id, "q": q [1, h, d], "append": {"k": row k, "v": row v}}. */
static cJSON *step_item(const char *id, const float *q, int h, int d, const float *k,
                        const float *v, int hkv)
{
    cJSON *it = cJSON_CreateObject(), *app = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "session", id);
    cJSON_AddItemToObject(it, "q", jtensor(q, 3, 1, h, d));
    cJSON_AddItemToObject(app, "k", jtensor(k, 3, 1, hkv, d));
    cJSON_AddItemToObject(app, "v", jtensor(v, 3, 1, hkv, d));
    cJSON_AddItemToObject(it, "append", app);
    return it;
}

/* Prepares a request (no task run): the job. */
static srv_job *prepare(cJSON *req, const srv_limits *lim)
{
    char *text = cJSON_PrintUnformatted(req);
    srv_job *job = NULL;
    srv_reply r;
    memset(&r, 0, sizeof r);
    assert_non_null(text);
    if (!srv_job_prepare(&srv_ep_attention, text, strlen(text), lim, &job, &r))
        fail_msg("prepare: %.*s", (int)r.body_len, r.body);
    cJSON_Delete(req);
    free(text);
    return job;
}

static cJSON *finish(srv_job *job, int *status)
{
    srv_reply r;
    cJSON *ans;
    memset(&r, 0, sizeof r);
    srv_job_finish(job, &r);
    srv_job_free(job);
    *status = r.http_status;
    ans = cJSON_ParseWithLength(r.body, r.body_len);
    assert_non_null(ans);
    srv_reply_free(&r);
    return ans;
}

/* The append lands when the task runs, and the step equals the stateless
 * request over the n + 1 tokens; a job freed unrun changes nothing. */
static void test_append_at_run(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new();
    srv_limits lim = limits();
    qkv f;
    char id[SRV_KV_ID_LEN];
    srv_job *job;
    cJSON *ans, *sl;
    int status;
    const float *qlast;

    qkv_make(&f, 1, 6, 4, HKV, D, D, 11);
    lim.sessions = c;
    session_new(c, "{\"type\":\"rope\"}", HKV, D, f.k, f.v, 5, id);
    qlast = f.q;

    /* Read, then dropped unrun (a full queue): nothing appended. */
    job = prepare(batch((cJSON *[]){step_item(id, qlast, 4, D, f.k + 5 * HKV * D,
                                              f.v + 5 * HKV * D, HKV)},
                        1),
                  &lim);
    assert_int_equal(length_of(c, id), 5);
    srv_job_free(job);
    assert_int_equal(length_of(c, id), 5);

    /* Read: still 5; run: 6. */
    job = prepare(batch((cJSON *[]){step_item(id, qlast, 4, D, f.k + 5 * HKV * D,
                                              f.v + 5 * HKV * D, HKV)},
                        1),
                  &lim);
    assert_int_equal(length_of(c, id), 5);
    for (size_t i = 0; i < srv_job_task_count(job); i++)
        srv_job_run_task(job, i, NULL);
    assert_int_equal(length_of(c, id), 6);
    ans = finish(job, &status);
    expect_ok(ans, status);

    /* The stateless request: the 6 tokens at 0..5, q at 5 (rope rotates
     * them itself; the session keeps its keys rotated). */
    {
        cJSON *it = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
        int32_t qp = 5;
        cJSON_AddItemToObject(it, "q_positions", jints(&qp, 1));
        sl = call_json(&srv_ep_attention, batch((cJSON *[]){it}, 1), &lim, &status);
        expect_ok(sl, status);
    }
    {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "output");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(output_at(sl, 0), "output");
        char *ta = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(a, "data"));
        char *tb = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(b, "data"));
        assert_string_equal(ta, tb); /* bit for bit: the same shortest text */
        free(ta);
        free(tb);
    }
    cJSON_Delete(ans);
    cJSON_Delete(sl);
    qkv_free(&f);
    srv_kv_cache_free(c);
}

/* A task past its deadline before the append abandons it: the item times
 * out and the session is as it was, whether the pool drops the task or a
 * worker that took it runs it. */
static void test_deadline_before_append(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new();
    srv_limits lim = limits();
    qkv f;
    char id[SRV_KV_ID_LEN];
    srv_job *job;
    cJSON *ans;
    int status;

    qkv_make(&f, 1, 4, 4, HKV, D, D, 12);
    lim.sessions = c;
    session_new(c, "{\"type\":\"alibi\"}", HKV, D, f.k, f.v, 3, id);
    for (int took = 0; took < 2; took++) {
        job = prepare(batch((cJSON *[]){step_item(id, f.q, 4, D, f.k + 3 * HKV * D,
                                                  f.v + 3 * HKV * D, HKV)},
                            1),
                      &lim);
        assert_false(srv_job_task_keep(job, 0)); /* past its deadline: dropped */
        assert_false(srv_job_task_keep(job, 0)); /* and says so again */
        if (took)
            srv_job_run_task(job, 0, NULL); /* a worker had taken it */
        else
            srv_job_set_timed_out(job, 0);
        ans = finish(job, &status);
        expect_item_error(ans, 0, "TIMEOUT", "inputs[0]");
        cJSON_Delete(ans);
        assert_int_equal(length_of(c, id), 3);
    }
    qkv_free(&f);
    srv_kv_cache_free(c);
}

/* An item split over keys (decode on two workers): once its first part
 * appended, the other part runs past the deadline; if the other part's
 * deadline passes first, neither appends. */
static void test_parts(void **state)
{
    (void)state;
    enum { H = 32, HK = 8, DD = 128, N = 2048 };
    srv_kv_cache *c = cache_new();
    srv_limits lim = limits();
    qkv f;
    char id[SRV_KV_ID_LEN];
    srv_job *job;
    cJSON *ans;
    int status;

    qkv_make(&f, 1, N + 2, H, HK, DD, DD, 13);
    lim.sessions = c;
    lim.parallel_parts = 2;
    session_new(c, "{\"type\":\"none\"}", HK, DD, f.k, f.v, N, id);

    job = prepare(batch((cJSON *[]){step_item(id, f.q, H, DD, f.k + (size_t)N * HK * DD,
                                              f.v + (size_t)N * HK * DD, HK)},
                        1),
                  &lim);
    assert_int_equal(srv_job_task_count(job), 2);
    srv_job_run_task(job, 0, NULL); /* appends */
    assert_int_equal(length_of(c, id), N + 1);
    assert_true(srv_job_task_keep(job, 1)); /* must run: the append landed */
    srv_job_run_task(job, 1, NULL);
    ans = finish(job, &status);
    expect_ok(ans, status);
    cJSON_Delete(ans);

    job = prepare(batch((cJSON *[]){step_item(id, f.q, H, DD, f.k + (size_t)(N + 1) * HK * DD,
                                              f.v + (size_t)(N + 1) * HK * DD, HK)},
                        1),
                  &lim);
    assert_false(srv_job_task_keep(job, 1)); /* part 1 dropped at its deadline */
    srv_job_set_timed_out(job, 1);
    srv_job_run_task(job, 0, NULL); /* part 0 started in time: finds it abandoned */
    ans = finish(job, &status);
    expect_item_error(ans, 0, "TIMEOUT", "inputs[0]");
    cJSON_Delete(ans);
    assert_int_equal(length_of(c, id), N + 1);
    qkv_free(&f);
    srv_kv_cache_free(c);
}

/* Another append between the item's checks and its run: refused, nothing
 * appended; a batch that names a session it appends to twice: the second
 * item refused. */
static void test_conflicts(void **state)
{
    (void)state;
    srv_kv_cache *c = cache_new();
    srv_limits lim = limits();
    qkv f;
    char id[SRV_KV_ID_LEN];
    srv_job *job;
    srv_kv_err ke;
    cJSON *ans;
    int status;

    qkv_make(&f, 1, 8, 4, HKV, D, D, 14);
    lim.sessions = c;
    session_new(c, "{\"type\":\"none\"}", HKV, D, f.k, f.v, 3, id);
    job = prepare(batch((cJSON *[]){step_item(id, f.q, 4, D, f.k + 3 * HKV * D,
                                              f.v + 3 * HKV * D, HKV)},
                        1),
                  &lim);
    assert_true(srv_kv_append(c, id, f.k + 4 * HKV * D, f.v + 4 * HKV * D, 1, NULL, &ke));
    srv_job_run_task(job, 0, NULL);
    ans = finish(job, &status);
    expect_item_error(ans, 0, "SESSION_BUSY", "inputs[0].session");
    assert_int_equal(status, 409);
    assert_non_null(strstr(str_at(output_at(ans, 0), "error", "message"),
                           "took 1 tokens after this request was checked (3 then, 4 now)"));
    cJSON_Delete(ans);
    assert_int_equal(length_of(c, id), 4);

    {
        cJSON *read = cJSON_CreateObject();
        cJSON_AddStringToObject(read, "session", id);
        cJSON_AddItemToObject(read, "q", jtensor(f.q, 3, 1, 4, D));
        ans = call_json(&srv_ep_attention,
                        batch((cJSON *[]){step_item(id, f.q, 4, D, f.k + 5 * HKV * D,
                                                    f.v + 5 * HKV * D, HKV),
                                          read},
                              2),
                        &lim, &status);
    }
    assert_int_equal(status, 200);
    assert_null(cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "error"));
    expect_item_error(ans, 1, "INVALID_ARGUMENT", "inputs[1].session");
    assert_non_null(strstr(str_at(output_at(ans, 1), "error", "message"),
                           "inputs[0] names session"));
    cJSON_Delete(ans);
    assert_int_equal(length_of(c, id), 5);
    qkv_free(&f);
    srv_kv_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_at_run),
        cmocka_unit_test(test_deadline_before_append),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_conflicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
