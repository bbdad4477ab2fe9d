/* test_job.c - server/api/job.c through an endpoint of the test's own:
 * srv_job_prepare refusing endpoints and bodies, the context it hands over,
 * task accounting at and past the last task, runs, timeouts, failures and
 * views in the answer, freeing; srv_workspace_reserve's growth and failure.
 */
#include "api/job.h"
#include "api/json.h"
#include "api/protocol.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_limits lim_of(void)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = 1 << 16,
                      .max_request_memory = (size_t)64 << 20,
                      .parallel_parts = 1};
    return lim;
}

/* ------------------------------------------------------------------------- */
/* A probe endpoint                                                          */
/* ------------------------------------------------------------------------- */

enum { MAX_TASKS = 8 };

typedef struct probe {
    int runs[MAX_TASKS];
    void *ws[MAX_TASKS];
    size_t ws_size[MAX_TASKS];
    int status; /* set as job->status by a batch render */
} probe;

/* What the preparer saw, and how often the hooks ran. */
static struct {
    int prepares, destroys, renders, views, view_frees;
    const srv_limits *lim;
    bool prefix_empty, had_lift, had_source;
    float t1; /* t.data[1] read through the context, when there is a t */
} seen;

/* Records what the preparer is handed; false with *reply filled for a body
 * with "fail", or a "t" that is no tensor. */
static bool probe_seen(const cJSON *root, const api_ctx *ctx, srv_reply *reply)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "t");
    api_err e;
    seen.prepares++;
    seen.lim = ctx->lim;
    seen.prefix_empty = ctx->prefix != NULL && ctx->prefix[0] == '\0';
    seen.had_lift = ctx->lift != NULL;
    seen.had_source = ctx->source != NULL;
    if (cJSON_GetObjectItemCaseSensitive(root, "fail") != NULL) {
        srv_reply_error(reply, SRV_ERR_SHAPE_MISMATCH, "q.shape", "the probe refuses q.shape=[%d]",
                        3);
        return false;
    }
    if (t != NULL) {
        srv_tensor tt;
        if (!api_get_tensor(t, "t", ctx, 1, &tt, &e)) {
            api_reply_err(reply, &e);
            return false;
        }
        seen.t1 = tt.data[1];
        srv_tensor_free(&tt);
    }
    return true;
}

static void probe_run(srv_job *job, size_t i, void *ws, size_t ws_size)
{
    probe *p = job->impl;
    p->runs[i]++;
    p->ws[i] = ws;
    p->ws_size[i] = ws_size;
    if (ws != NULL)
        memset(ws, 0xa5, ws_size); /* the whole buffer is writable */
}

static bool probe_render(srv_job *job, cJSON *root)
{
    probe *p = job->impl;
    int ran = 0;
    seen.renders++;
    for (size_t i = 0; i < job->n_tasks; i++)
        ran += p->runs[i];
    if (p->status != 0)
        job->status = p->status;
    return cJSON_AddNumberToObject(root, "ran", ran) != NULL;
}

static void probe_destroy(void *impl)
{
    seen.destroys++;
    free(impl);
}

static bool single_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply);
static bool batch_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply);

static const srv_endpoint probe_single = {
    .name = "probe",
    .prepare = single_prepare,
    .run = probe_run,
    .render = probe_render,
    .destroy = probe_destroy,
};

static const srv_endpoint probe_batch = {
    .name = "probe_batch",
    .batch = true,
    .prepare = batch_prepare,
    .run = probe_run,
    .render = probe_render,
    .destroy = probe_destroy,
};

/* {"tasks":n, "workspace":[bytes per task...], "fail":..., "t":tensor} */
static bool prepare_as(const srv_endpoint *ep, const cJSON *root, const api_ctx *ctx, srv_job **job,
                       srv_reply *reply)
{
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(root, "tasks");
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(root, "workspace");
    size_t n = tasks != NULL ? (size_t)tasks->valuedouble : 1;
    srv_job *j;
    if (!probe_seen(root, ctx, reply))
        return false;
    assert_true(n <= MAX_TASKS);
    j = api_job_new(ep, n);
    assert_non_null(j);
    j->impl = tu_alloc(1, sizeof(probe));
    for (size_t i = 0; i < n; i++) {
        const cJSON *w = cJSON_GetArrayItem(ws, (int)i);
        j->tasks[i].workspace = w != NULL ? (size_t)w->valuedouble : 0;
        j->tasks[i].macs = 1.5 * (double)(i + 1);
        j->tasks[i].scheme_name = i % 2 ? "alibi" : "rope";
    }
    *job = j;
    return true;
}

static bool single_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply)
{
    return prepare_as(&probe_single, root, ctx, job, reply);
}

static bool batch_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply)
{
    return prepare_as(&probe_batch, root, ctx, job, reply);
}

static srv_job *prepared(const srv_endpoint *ep, const char *body)
{
    srv_limits lim = lim_of();
    srv_job *job = NULL;
    srv_reply reply;
    memset(&reply, 0, sizeof reply);
    if (!srv_job_prepare(ep, body, strlen(body), &lim, &job, &reply))
        fail_msg("%s: %.*s", body, (int)reply.body_len, reply.body ? reply.body : "");
    assert_non_null(job);
    assert_null(reply.body);
    return job;
}

/* The reply's status and error {code, field}, and a word of its message. */
static void reply_is(srv_reply *r, int status, const char *code, const char *field,
                     const char *words)
{
    if (r->http_status != status)
        fail_msg("status %d, wanted %d: %.*s", r->http_status, status, (int)r->body_len,
                 r->body ? r->body : "");
    cJSON *body = cJSON_ParseWithLength(r->body, r->body_len);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");
    const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "code"));
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message"));
    const char *f = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "field"));
    if (c == NULL || strcmp(c, code) != 0 || m == NULL || strstr(m, words) == NULL ||
        (field == NULL) != (f == NULL) || (field != NULL && strcmp(f, field) != 0))
        fail_msg("wanted %s '%s' at %s: %.*s", code, words, field ? field : "(no field)",
                 (int)r->body_len, r->body);
    cJSON_Delete(body);
    srv_reply_free(r);
}

/* ------------------------------------------------------------------------- */
/* Prepare                                                                   */
/* ------------------------------------------------------------------------- */

static bool prep(const srv_endpoint *ep, const char *body, const srv_limits *lim, srv_job **job,
                 srv_reply *r)
{
    return srv_job_prepare(ep, body, strlen(body), lim, job, r);
}

static void test_prepare_refuses(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    srv_reply r;
    srv_job *job = (srv_job *)(uintptr_t)1;
    int before;
    memset(&r, 0, sizeof r);
    memset(&seen, 0, sizeof seen);

    /* An endpoint without a body, or none: 404 before the body is read. */
    assert_false(prep(&srv_ep_schemes, "{}", &lim, &job, &r));
    assert_null(job);
    reply_is(&r, 404, "NOT_FOUND", NULL, "no such endpoint");
    job = (srv_job *)(uintptr_t)1;
    assert_false(prep(NULL, "{}", &lim, &job, &r));
    assert_null(job);
    reply_is(&r, 404, "NOT_FOUND", NULL, "no such endpoint");
    assert_false(srv_endpoint_takes_body(NULL));
    assert_false(srv_endpoint_takes_body(&srv_ep_schemes));
    assert_false(srv_endpoint_takes_body(&srv_ep_tensors));
    assert_true(srv_endpoint_takes_body(&probe_single));
    assert_true(srv_endpoint_takes_body(&srv_ep_attention));
    srv_endpoint_answer(&probe_single, &lim, &r);
    reply_is(&r, 404, "NOT_FOUND", NULL, "no such endpoint");
    srv_endpoint_answer(NULL, &lim, &r);
    reply_is(&r, 404, "NOT_FOUND", NULL, "no such endpoint");

    /* Bodies that are no JSON object never reach the preparer. */
    before = seen.prepares;
    assert_false(prep(&probe_single, "[1,2]", &lim, &job, &r));
    reply_is(&r, 400, "INVALID_ARGUMENT", NULL, "JSON object");
    assert_false(prep(&probe_single, "{\"tasks\":", &lim, &job, &r));
    reply_is(&r, 400, "MALFORMED_JSON", NULL, "byte");
    assert_false(prep(&probe_single, "", &lim, &job, &r));
    reply_is(&r, 400, "MALFORMED_JSON", NULL, "byte 0 of 0");
    lim.max_request_memory = 16;
    assert_false(prep(&probe_single, "{\"tasks\":1,\"x\":[1,2,3,4,5,6,7,8]}", &lim, &job, &r));
    reply_is(&r, 413, "PAYLOAD_TOO_LARGE", NULL, "--max-request-mb");
    assert_int_equal(seen.prepares, before);
    assert_null(job);

    /* The preparer's own refusal is the answer. */
    lim = lim_of();
    assert_false(prep(&probe_single, "{\"fail\":1}", &lim, &job, &r));
    assert_null(job);
    reply_is(&r, 400, "SHAPE_MISMATCH", "q.shape", "the probe refuses q.shape=[3]");
    assert_int_equal(seen.prepares, before + 1);
}

/* The preparer gets the limits, the prefix "", no source, and the arrays
 * lifted from the body through the context; only len bytes are read. */
static void test_prepare_context(void **state)
{
    (void)state;
    static const char body[] = "{\"t\":{\"shape\":[2],\"data\":[0.5,-3.25]},\"tasks\":2}tail";
    srv_limits lim = lim_of();
    srv_reply r;
    srv_job *job = NULL;
    memset(&r, 0, sizeof r);
    memset(&seen, 0, sizeof seen);
    assert_true(srv_job_prepare(&probe_single, body, strlen(body) - 4, &lim, &job, &r));
    assert_ptr_equal(seen.lim, &lim);
    assert_true(seen.prefix_empty);
    assert_true(seen.had_lift);
    assert_false(seen.had_source);
    assert_true(seen.t1 == -3.25f);
    assert_int_equal(srv_job_task_count(job), 2);
    srv_job_free(job);
    assert_int_equal(seen.destroys, 1);

    job = prepared(&probe_single, "{\"tasks\":1}");
    assert_false(seen.had_lift); /* nothing lifted: no lift */
    srv_job_free(job);
}

/* ------------------------------------------------------------------------- */
/* Tasks                                                                     */
/* ------------------------------------------------------------------------- */

static void test_task_accounting(void **state)
{
    (void)state;
    srv_job *job = prepared(&probe_single, "{\"tasks\":3,\"workspace\":[0,100,4096]}");
    assert_int_equal(srv_job_task_count(job), 3);
    assert_int_equal(srv_job_task_count(NULL), 0);
    assert_string_equal(srv_job_task_scheme(job, 0), "rope");
    assert_string_equal(srv_job_task_scheme(job, 1), "alibi");
    assert_string_equal(srv_job_task_scheme(job, 2), "rope");
    assert_string_equal(srv_job_task_scheme(NULL, 0), "none");
    assert_true(srv_job_task_macs(job, 0) == 1.5 && srv_job_task_macs(job, 2) == 4.5);
    assert_true(srv_job_task_macs(NULL, 0) == 0);
    assert_int_equal(srv_job_task_workspace(job, 1), 100);
    assert_int_equal(srv_job_task_workspace(job, 2), 4096);
    assert_int_equal(srv_job_task_workspace(NULL, 0), 0);
    job->tasks[1].scheme_name = NULL;
    assert_string_equal(srv_job_task_scheme(job, 1), "none");

    /* Past the last task: the job says it has 2, but a third record exists
     * in memory, so an off-by-one would read or write it visibly. */
    job->n_tasks = 2;
    assert_int_equal(srv_job_task_count(job), 2);
    assert_string_equal(srv_job_task_scheme(job, 2), "none");
    assert_true(srv_job_task_macs(job, 2) == 0);
    assert_int_equal(srv_job_task_workspace(job, 2), 0);
    srv_job_set_timed_out(job, 2);
    assert_false(job->tasks[2].timed_out);
    srv_job_set_timing(job, 2, 7, 10, 20);
    assert_int_equal(job->tasks[2].queue_us, 0);
    srv_workspace ws = {NULL, 0};
    srv_job_run_task(job, 2, &ws);
    assert_int_equal(((probe *)job->impl)->runs[2], 0);
    assert_null(ws.p);
    srv_job_set_timed_out(job, 1); /* the last one is in range */
    assert_true(job->tasks[1].timed_out);
    srv_job_set_timed_out(NULL, 0);
    srv_job_set_timing(NULL, 0, 1, 2, 3);
    srv_job_run_task(NULL, 0, &ws);
    job->n_tasks = 3;
    srv_job_free(job);

    /* api_job_new's tasks start as "none", zeroed. */
    job = api_job_new(&probe_single, 2);
    assert_string_equal(srv_job_task_scheme(job, 1), "none");
    assert_int_equal(srv_job_task_workspace(job, 1), 0);
    assert_false(job->tasks[1].failed || job->tasks[1].timed_out);
    srv_job_free(job); /* no impl: destroy is not called */
    job = api_job_new(&probe_single, 0);
    assert_non_null(job);
    assert_int_equal(srv_job_task_count(job), 0);
    srv_job_free(job);
}

static void test_run_tasks(void **state)
{
    (void)state;
    srv_job *job = prepared(&probe_single, "{\"tasks\":4,\"workspace\":[0,1000,70000,10]}");
    probe *p = job->impl;
    srv_workspace ws = {NULL, 0};

    srv_job_run_task(job, 0, &ws);
    assert_int_equal(p->runs[0], 1);
    assert_null(p->ws[0]); /* no workspace asked: none given */
    assert_int_equal(p->ws_size[0], 0);
    assert_null(ws.p);
    srv_job_run_task(job, 1, &ws);
    assert_non_null(p->ws[1]);
    assert_int_equal((uintptr_t)p->ws[1] % 64, 0);
    assert_int_equal(p->ws_size[1], 1000);
    assert_ptr_equal(p->ws[1], ws.p); /* the worker's buffer */
    assert_true(ws.cap >= 1000);
    srv_job_run_task(job, 2, &ws); /* grows it */
    assert_ptr_equal(p->ws[2], ws.p);
    assert_int_equal(p->ws_size[2], 70000);
    assert_true(ws.cap >= 70000);
    /* Without a worker's workspace the task gets one of its own. */
    srv_job_run_task(job, 3, NULL);
    assert_non_null(p->ws[3]);
    assert_int_equal((uintptr_t)p->ws[3] % 64, 0);
    assert_int_equal(p->ws_size[3], 10);
    /* Timing of a run: one clock, start before end. */
    const api_task *t = &job->tasks[2];
    assert_true(t->start_us > 0 && t->end_us >= t->start_us);
    assert_int_equal(t->compute_us, t->end_us - t->start_us);
    assert_int_equal(t->cpu_us, t->compute_us);

    /* A failed or timed-out task does not run again. */
    api_err e;
    api_fail(&e, NULL, SRV_ERR_OUT_OF_RANGE, "k", "no");
    api_task_fail(job, 0, &e);
    srv_job_run_task(job, 0, &ws);
    assert_int_equal(p->runs[0], 1);
    assert_true(job->tasks[0].failed);
    assert_string_equal(job->tasks[0].err.field, "k");
    srv_job_set_timed_out(job, 1);
    srv_job_run_task(job, 1, &ws);
    assert_int_equal(p->runs[1], 1);
    srv_workspace_free(&ws);
    srv_job_free(job);
}

/* A workspace that cannot be had fails the task, naming the bytes, and the
 * endpoint's run is never called. */
static void test_run_task_without_memory(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip(); /* the sanitizers' allocators abort on such a request */
#else
    srv_job *job = prepared(&probe_single, "{\"tasks\":1}");
    srv_workspace ws = {NULL, 0};
    srv_reply r;
    job->tasks[0].workspace = (size_t)1 << 62;
    srv_job_run_task(job, 0, &ws);
    assert_int_equal(((probe *)job->impl)->runs[0], 0);
    assert_true(job->tasks[0].failed);
    assert_int_equal(job->tasks[0].err.code, SRV_ERR_INTERNAL);
    assert_non_null(strstr(job->tasks[0].err.message,
                           "could not allocate 4611686018427387904 bytes of workspace"));
    memset(&r, 0, sizeof r);
    srv_job_finish(job, &r);
    reply_is(&r, 500, "INTERNAL", NULL, "4611686018427387904 bytes");
    srv_job_free(job);
    /* Also with the task's own workspace. */
    job = prepared(&probe_single, "{\"tasks\":1}");
    job->tasks[0].workspace = (size_t)1 << 62;
    srv_job_run_task(job, 0, NULL);
    assert_true(job->tasks[0].failed);
    srv_job_free(job);
#endif
}

/* ------------------------------------------------------------------------- */
/* The answer                                                                */
/* ------------------------------------------------------------------------- */

static cJSON *finished(srv_job *job, int want_status)
{
    srv_reply r;
    memset(&r, 0, sizeof r);
    srv_job_finish(job, &r);
    if (r.http_status != want_status)
        fail_msg("status %d, wanted %d: %.*s", r.http_status, want_status, (int)r.body_len,
                 r.body ? r.body : "");
    cJSON *ans = cJSON_ParseWithLength(r.body, r.body_len);
    assert_non_null(ans);
    srv_reply_free(&r);
    return ans;
}

static void test_finish_single(void **state)
{
    (void)state;
    srv_reply r;
    memset(&r, 0, sizeof r);
    memset(&seen, 0, sizeof seen);

    /* Ran: the render's answer and the task's timing. */
    srv_job *job = prepared(&probe_single, "{}");
    srv_job_run_task(job, 0, NULL);
    srv_job_set_timing(job, 0, 5, 100, 130);
    cJSON *ans = finished(job, 200);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(ans, "ran")->valueint, 1);
    const cJSON *timing = cJSON_GetObjectItemCaseSensitive(ans, "timing");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(timing, "queue_us")->valueint, 5);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(timing, "compute_us")->valueint, 30);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(timing, "cpu_us")->valueint, 30);
    cJSON_Delete(ans);
    /* An end before the start counts as no time, not as a wrapped one. */
    srv_job_set_timing(job, 0, 0, 200, 150);
    assert_int_equal(job->tasks[0].end_us, 200);
    assert_int_equal(job->tasks[0].compute_us, 0);
    srv_job_free(job);

    /* Timed out: 504 TIMEOUT for the whole request, no render. */
    job = prepared(&probe_single, "{}");
    srv_job_set_timed_out(job, 0);
    assert_true(job->tasks[0].timed_out);
    srv_job_run_task(job, 0, NULL);
    assert_int_equal(((probe *)job->impl)->runs[0], 0);
    int renders = seen.renders;
    srv_job_finish(job, &r);
    reply_is(&r, 504, "TIMEOUT", NULL, "the request deadline passed before this request could run");
    assert_int_equal(seen.renders, renders);
    srv_job_free(job);

    /* Failed: its error is the answer (a failure that also timed out too). */
    job = prepared(&probe_single, "{}");
    api_err e;
    api_ctx ctx = {NULL, "", NULL, NULL};
    api_fail(&e, &ctx, SRV_ERR_OUT_OF_RANGE, "q_positions[2]", "q_positions[2]=%d is negative", -4);
    api_task_fail(job, 0, &e);
    srv_job_finish(job, &r);
    reply_is(&r, 400, "OUT_OF_RANGE", "q_positions[2]", "q_positions[2]=-4 is negative");
    srv_job_set_timed_out(job, 0);
    srv_job_finish(job, &r);
    reply_is(&r, 400, "OUT_OF_RANGE", "q_positions[2]", "is negative");
    srv_job_free(job);

    srv_job_finish(NULL, &r);
    reply_is(&r, 500, "INTERNAL", NULL, "no job to finish");
}

/* A batch renders every item itself, timed out or not; its status is the
 * render's. */
static void test_finish_batch(void **state)
{
    (void)state;
    srv_job *job = prepared(&probe_batch, "{\"tasks\":3}");
    srv_job_run_task(job, 0, NULL);
    srv_job_set_timed_out(job, 1);
    srv_job_run_task(job, 1, NULL);
    srv_job_run_task(job, 2, NULL);
    cJSON *ans = finished(job, 200);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(ans, "ran")->valueint, 2);
    assert_null(cJSON_GetObjectItemCaseSensitive(ans, "timing")); /* per item, the render's */
    assert_null(cJSON_GetObjectItemCaseSensitive(ans, "error"));
    cJSON_Delete(ans);
    ((probe *)job->impl)->status = 400;
    ans = finished(job, 400);
    cJSON_Delete(ans);
    srv_job_free(job);
}

static void probe_view(srv_job *job, void *view_ctx, srv_reply *reply)
{
    char *body = malloc(32);
    seen.views++;
    assert_non_null(body);
    snprintf(body, 32, "{\"view\":%d}", *(int *)view_ctx + (int)job->n_tasks);
    srv_reply_json(reply, 201, body, strlen(body));
}

static void probe_view_free(void *view_ctx)
{
    seen.view_frees++;
    free(view_ctx);
}

static void test_view_and_free(void **state)
{
    (void)state;
    memset(&seen, 0, sizeof seen);
    srv_job *job = prepared(&probe_single, "{\"tasks\":2}");
    int *vc = tu_alloc(1, sizeof *vc);
    *vc = 40;
    api_job_set_view(job, probe_view, probe_view_free, vc);
    srv_job_set_timed_out(job, 0); /* the view answers, whatever the tasks did */
    cJSON *ans = finished(job, 201);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(ans, "view")->valueint, 42);
    cJSON_Delete(ans);
    assert_int_equal(seen.views, 1);
    assert_int_equal(seen.renders, 0);
    srv_job_free(job);
    assert_int_equal(seen.view_frees, 1);
    assert_int_equal(seen.destroys, 1);

    /* A view without a free function, a job without impl: nothing else runs. */
    job = api_job_new(&probe_single, 1);
    api_job_set_view(job, probe_view, NULL, vc = tu_alloc(1, sizeof *vc));
    srv_job_free(job);
    free(vc);
    assert_int_equal(seen.view_frees, 1);
    assert_int_equal(seen.destroys, 1);
    srv_job_free(NULL);
}

static void test_render_helpers(void **state)
{
    (void)state;
    api_err e;
    api_timeout_err(&e, "inputs[3]");
    assert_int_equal(e.code, SRV_ERR_TIMEOUT);
    assert_string_equal(e.field, "inputs[3]");
    assert_string_equal(e.message, "the request deadline passed before this item could run");
    api_timeout_err(&e, "");
    assert_string_equal(e.field, "");
    assert_string_equal(e.message, "the request deadline passed before this request could run");

    cJSON *o = cJSON_CreateObject();
    assert_true(api_render_error(o, &e));
    api_fail(&e, NULL, SRV_ERR_SHAPE_MISMATCH, "k.shape", "k.shape[1]=3");
    cJSON *o2 = cJSON_CreateObject();
    assert_true(api_render_error(o2, &e));
    api_task t = {.queue_us = 3, .compute_us = 40, .cpu_us = 70};
    assert_true(api_render_timing(o2, &t));
    char *a = cJSON_PrintUnformatted(o), *b = cJSON_PrintUnformatted(o2);
    assert_string_equal(a, "{\"error\":{\"code\":\"TIMEOUT\",\"message\":\"the request deadline "
                           "passed before this request could run\"}}");
    assert_string_equal(b, "{\"error\":{\"code\":\"SHAPE_MISMATCH\",\"message\":\"k.shape[1]=3\","
                           "\"field\":\"k.shape\"},\"timing\":{\"queue_us\":3,\"compute_us\":40,"
                           "\"cpu_us\":70}}");
    cJSON_free(a);
    cJSON_free(b);
    cJSON_Delete(o);
    cJSON_Delete(o2);
}

/* True when s is well-formed UTF-8 (RFC 3629). */
static bool utf8_ok(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        size_t n = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (n == 0 || i + n > len)
            return false;
        for (size_t k = 1; k < n; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        i += n;
    }
    return true;
}

/* An item error that quotes request text cut at a byte limit (an unknown
 * name cut at 64 bytes in the middle of an e-acute) is rendered into a batch
 * answer by api_render_error. The reply layer cleans such text for a whole
 * request's error (srv_reply_error: "so the body stays valid JSON for
 * strict parsers"); the item's error must come out as valid UTF-8 too. */
static void test_render_error_keeps_utf8(void **state)
{
    (void)state;
    static const char *const known[] = {"q"};
    char name[80], text[128];
    srv_limits lim = lim_of();
    api_ctx ctx = {&lim, "inputs[0]", NULL, NULL};
    api_err e;
    srv_reply r;
    memset(name, 'a', 63);
    snprintf(name + 63, sizeof name - 63,
             "\xc3\xa9"
             "b"); /* "é" at bytes 63 and 64 */
    snprintf(text, sizeof text, "{\"%s\":1}", name);
    cJSON *o = cJSON_Parse(text);
    assert_false(api_check_fields(o, known, 1, "", "an attention item", &ctx, &e));
    cJSON_Delete(o);
    /* A whole request's error: cleaned by the reply layer. */
    memset(&r, 0, sizeof r);
    api_reply_err(&r, &e);
    assert_true(utf8_ok(r.body, r.body_len));
    srv_reply_free(&r);
    /* A batch item's error. */
    o = cJSON_CreateObject();
    assert_true(api_render_error(o, &e));
    char *body = cJSON_PrintUnformatted(o);
    if (!utf8_ok(body, strlen(body)))
        fail_msg("not UTF-8: %s", body);
    cJSON_free(body);
    cJSON_Delete(o);
}

/* ------------------------------------------------------------------------- */
/* Workspaces                                                                */
/* ------------------------------------------------------------------------- */

static void test_workspace_reserve(void **state)
{
    (void)state;
    srv_workspace ws = {NULL, 0};
    void *p, *q;

    assert_null(srv_workspace_reserve(NULL, 10));
    /* At least 64 KiB at first, even for 0 bytes. */
    p = srv_workspace_reserve(&ws, 0);
    assert_non_null(p);
    assert_int_equal(ws.cap, 64 * 1024);
    assert_int_equal((uintptr_t)p % 64, 0);
    assert_ptr_equal(srv_workspace_reserve(&ws, 100), p);
    assert_ptr_equal(srv_workspace_reserve(&ws, 64 * 1024), p); /* exactly the capacity */
    assert_int_equal(ws.cap, 64 * 1024);
    /* One byte more doubles it. */
    q = srv_workspace_reserve(&ws, 64 * 1024 + 1);
    assert_non_null(q);
    assert_ptr_equal(q, ws.p);
    assert_int_equal(ws.cap, 128 * 1024);
    assert_int_equal((uintptr_t)q % 64, 0);
    memset(q, 1, ws.cap);
    /* Far above: what is asked, rounded up to 4 KiB. */
    q = srv_workspace_reserve(&ws, 1000001);
    assert_int_equal(ws.cap, 1003520);
    assert_int_equal((uintptr_t)q % 64, 0);
    memset(q, 2, ws.cap);
    q = srv_workspace_reserve(&ws, 1003521);
    assert_int_equal(ws.cap, 2 * 1003520);
    srv_workspace_free(&ws);
    assert_null(ws.p);
    assert_int_equal(ws.cap, 0);
    srv_workspace_free(&ws); /* twice is harmless */
    srv_workspace_free(NULL);

    /* Aligned whatever the size. */
    for (size_t n = 1; n < (size_t)1 << 22; n = n * 3 + 7) {
        srv_workspace w = {NULL, 0};
        p = srv_workspace_reserve(&w, n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        assert_true(w.cap >= n);
        srv_workspace_free(&w);
    }
}

/* A growth that cannot be allocated returns NULL and keeps the old buffer,
 * its contents and its capacity. */
static void test_workspace_reserve_fails(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip(); /* the sanitizers' allocators abort on such a request */
#else
    srv_workspace ws = {NULL, 0};
    unsigned char *p = srv_workspace_reserve(&ws, 1000);
    assert_non_null(p);
    memset(p, 0x5c, ws.cap);
    size_t cap = ws.cap;
    assert_null(srv_workspace_reserve(&ws, (size_t)1 << 62));
    assert_ptr_equal(ws.p, p);
    assert_int_equal(ws.cap, cap);
    assert_true(p[0] == 0x5c && p[cap - 1] == 0x5c);
    /* Rounded up to 4 KiB, then retried at the exact size: both fail. */
    assert_null(srv_workspace_reserve(&ws, ((size_t)1 << 62) + 1));
    assert_ptr_equal(ws.p, p);
    assert_int_equal(ws.cap, cap);
    assert_ptr_equal(srv_workspace_reserve(&ws, cap), p); /* still serves */
    srv_workspace_free(&ws);
    /* From nothing: NULL, and still nothing. */
    assert_null(srv_workspace_reserve(&ws, (size_t)1 << 62));
    assert_null(ws.p);
    assert_int_equal(ws.cap, 0);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_refuses),
        cmocka_unit_test(test_prepare_context),
        cmocka_unit_test(test_task_accounting),
        cmocka_unit_test(test_run_tasks),
        cmocka_unit_test(test_run_task_without_memory),
        cmocka_unit_test(test_finish_single),
        cmocka_unit_test(test_finish_batch),
        cmocka_unit_test(test_view_and_free),
        cmocka_unit_test(test_render_helpers),
        cmocka_unit_test(test_render_error_keeps_utf8),
        cmocka_unit_test(test_workspace_reserve),
        cmocka_unit_test(test_workspace_reserve_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
