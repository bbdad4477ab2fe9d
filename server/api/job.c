/* job.c - the job lifecycle of the JSON API: the body parsed once (tensor
 * numbers lifted first, codec/json_lift.h), handed to the endpoint's
 * preparer, each task run with a worker's workspace, the answer rendered.
 * Endpoints plug in through their struct srv_endpoint (api/job.h); this file
 * names none of them.
 *
 * Threads: prepare runs on an HTTP thread, run_task on workers (each task
 * touches only its own api_task and item), finish after every task is done.
 * There is no global mutable state.
 */
#include "api/job.h"

#include "api/json.h"
#include "api/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* Worker workspaces                                                         */
/* ------------------------------------------------------------------------- */

enum { WS_ALIGN = 64, WS_MIN = 64 * 1024 };

void *srv_workspace_reserve(srv_workspace *ws, size_t n)
{
    size_t cap;
    void *p = NULL;

    if (ws == NULL)
        return NULL;
    if (n == 0)
        n = 1;
    if (ws->p != NULL && ws->cap >= n)
        return ws->p;
    /* Grow geometrically so a worker that sees slowly growing requests does
     * not reallocate (and touch fresh pages) each time; a request far above
     * the current size gets what it asks for. */
    cap = ws->cap <= SIZE_MAX / 2 ? ws->cap * 2 : n;
    if (cap < WS_MIN)
        cap = WS_MIN;
    if (cap < n)
        cap = n <= SIZE_MAX - 4095 ? (n + 4095) & ~(size_t)4095 : n;
    if (posix_memalign(&p, WS_ALIGN, cap) != 0) {
        p = NULL;
        if (cap > n && posix_memalign(&p, WS_ALIGN, n) != 0)
            p = NULL;
        if (p == NULL)
            return NULL; /* the old buffer is kept */
        cap = n;
    }
    free(ws->p);
    ws->p = p;
    ws->cap = cap;
    return p;
}

void srv_workspace_free(srv_workspace *ws)
{
    if (ws == NULL)
        return;
    free(ws->p);
    ws->p = NULL;
    ws->cap = 0;
}

/* ------------------------------------------------------------------------- */
/* Jobs                                                                      */
/* ------------------------------------------------------------------------- */

srv_job *api_job_new(const srv_endpoint *ep, size_t n_tasks)
{
    srv_job *job = calloc(1, sizeof *job);
    if (job == NULL)
        return NULL;
    job->tasks = calloc(n_tasks ? n_tasks : 1, sizeof *job->tasks);
    if (job->tasks == NULL) {
        free(job);
        return NULL;
    }
    job->ep = ep;
    job->n_tasks = n_tasks;
    for (size_t i = 0; i < n_tasks; i++)
        job->tasks[i].scheme_name = "none";
    return job;
}

void api_task_fail(srv_job *job, size_t i, const api_err *err)
{
    job->tasks[i].failed = true;
    job->tasks[i].err = *err;
}

bool srv_endpoint_takes_body(const srv_endpoint *ep)
{
    return ep != NULL && (ep->prepare != NULL || ep->prepare_args != NULL);
}

void srv_endpoint_answer(const srv_endpoint *ep, const srv_limits *lim, srv_reply *reply)
{
    srv_endpoint_answer_args(ep, lim, NULL, reply);
}

void srv_endpoint_answer_args(const srv_endpoint *ep, const srv_limits *lim,
                              const srv_endpoint_args *args, srv_reply *reply)
{
    if (ep != NULL && ep->answer_args != NULL) {
        ep->answer_args(lim, args, reply);
        return;
    }
    if (ep == NULL || ep->answer == NULL) {
        srv_reply_error(reply, SRV_ERR_NOT_FOUND, NULL, "no such endpoint");
        return;
    }
    ep->answer(lim, reply);
}

bool srv_job_prepare(const srv_endpoint *ep, const char *body, size_t len, const srv_limits *lim,
                     srv_job **job, srv_reply *reply)
{
    return srv_job_prepare_args(ep, NULL, body, len, lim, job, reply);
}

bool srv_job_prepare_args(const srv_endpoint *ep, const srv_endpoint_args *args, const char *body,
                          size_t len, const srv_limits *lim, srv_job **job, srv_reply *reply)
{
    api_err e;
    api_body b;
    bool ok;

    *job = NULL;
    if (!srv_endpoint_takes_body(ep)) {
        srv_reply_error(reply, SRV_ERR_NOT_FOUND, NULL, "no such endpoint");
        return false;
    }
    if (len == 0 && ep->body_optional) {
        body = "{}";
        len = 2;
    }
    if (!api_body_read(body, len, lim, true, &b, &e)) {
        api_reply_err(reply, &e);
        return false;
    }
    api_ctx ctx = {lim, "", NULL, b.lifted ? &b.lift : NULL};
    ok = ep->prepare_args != NULL ? ep->prepare_args(b.root, &ctx, args, job, reply)
                                  : ep->prepare(b.root, &ctx, job, reply);
    if (ok && !api_job_check_cost(*job, lim, &e)) {
        srv_job_free(*job);
        *job = NULL;
        api_reply_err(reply, &e);
        ok = false;
    }
    /* The tree (with any JSON tensor data) goes now: the job keeps only
     * parsed floats and duplicated ids. */
    api_body_free(&b);
    return ok;
}

bool api_job_check_cost(const srv_job *job, const srv_limits *lim, api_err *e)
{
    double macs = 0.0, gflop;
    if (job == NULL || lim->max_request_gflop <= 0.0)
        return true;
    for (size_t i = 0; i < job->n_tasks; i++)
        macs += job->tasks[i].cost > 0.0 ? job->tasks[i].cost : job->tasks[i].macs;
    gflop = 2.0 * macs / 1e9;
    if (gflop <= lim->max_request_gflop)
        return true;
    return api_fail(e, NULL, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                    "request needs an estimated %.0f GFLOP of compute (from its shapes), limit "
                    "%.0f GFLOP " SRV_LIMIT_COMPUTE,
                    gflop < 1.0 ? 1.0 : gflop, lim->max_request_gflop);
}

void api_job_set_view(srv_job *job, api_job_view view, void (*view_free)(void *view_ctx),
                      void *view_ctx)
{
    job->view = view;
    job->view_free = view_free;
    job->view_ctx = view_ctx;
}

size_t srv_job_task_count(const srv_job *job)
{
    return job != NULL ? job->n_tasks : 0;
}

const char *srv_job_task_scheme(const srv_job *job, size_t i)
{
    if (job == NULL || i >= job->n_tasks || job->tasks[i].scheme_name == NULL)
        return "none";
    return job->tasks[i].scheme_name;
}

bool srv_job_task_failed(const srv_job *job, size_t i)
{
    return job != NULL && i < job->n_tasks && job->tasks[i].failed;
}

bool srv_job_task_keep(srv_job *job, size_t i)
{
    if (job == NULL || i >= job->n_tasks || job->ep->keep == NULL)
        return false;
    return job->ep->keep(job, i);
}

double srv_job_task_macs(const srv_job *job, size_t i)
{
    if (job == NULL || i >= job->n_tasks)
        return 0;
    return job->tasks[i].macs;
}

size_t srv_job_task_workspace(const srv_job *job, size_t i)
{
    if (job == NULL || i >= job->n_tasks)
        return 0;
    return job->tasks[i].workspace;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void srv_job_run_task(srv_job *job, size_t i, srv_workspace *ws)
{
    api_task *t;
    srv_workspace local = {NULL, 0};
    srv_workspace *use = ws != NULL ? ws : &local;
    void *buf = NULL;
    uint64_t t0;

    if (job == NULL || i >= job->n_tasks)
        return;
    t = &job->tasks[i];
    if (t->failed || t->timed_out)
        return;
    t0 = now_us();
    if (t->workspace > 0) {
        buf = srv_workspace_reserve(use, t->workspace);
        if (buf == NULL) {
            api_err e;
            api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "could not allocate %zu bytes of workspace",
                     t->workspace);
            api_task_fail(job, i, &e);
            srv_workspace_free(&local);
            return;
        }
    }
    job->ep->run(job, i, buf, t->workspace);
    t->start_us = t0;
    t->end_us = now_us();
    t->compute_us = t->cpu_us = t->end_us - t0;
    srv_workspace_free(&local);
}

void srv_job_set_timing(srv_job *job, size_t i, uint64_t queue_us, uint64_t start_us,
                        uint64_t end_us)
{
    api_task *t;
    if (job == NULL || i >= job->n_tasks)
        return;
    t = &job->tasks[i];
    t->queue_us = queue_us;
    t->start_us = start_us;
    t->end_us = end_us > start_us ? end_us : start_us;
    t->compute_us = t->cpu_us = t->end_us - t->start_us;
}

void srv_job_set_timed_out(srv_job *job, size_t i)
{
    if (job == NULL || i >= job->n_tasks)
        return;
    job->tasks[i].timed_out = true;
}

bool api_render_timing(cJSON *obj, const api_task *t)
{
    cJSON *timing = cJSON_AddObjectToObject(obj, "timing");
    return timing != NULL &&
           cJSON_AddItemToObject(timing, "queue_us", srv_json_int((int64_t)t->queue_us)) &&
           cJSON_AddItemToObject(timing, "compute_us", srv_json_int((int64_t)t->compute_us)) &&
           cJSON_AddItemToObject(timing, "cpu_us", srv_json_int((int64_t)t->cpu_us));
}

bool api_render_error(cJSON *obj, const api_err *e)
{
    /* Messages quote request text cut at a byte limit, perhaps inside a
     * character: the answer stays valid UTF-8, as srv_reply_error keeps a
     * whole request's error. */
    char message[API_MESSAGE_MAX], field[API_FIELD_MAX];
    cJSON *err = cJSON_AddObjectToObject(obj, "error");
    srv_utf8_copy(message, sizeof message, e->message);
    srv_utf8_copy(field, sizeof field, e->field);
    if (err == NULL || !cJSON_AddStringToObject(err, "code", srv_error_code(e->code)) ||
        !cJSON_AddStringToObject(err, "message", message))
        return false;
    return field[0] == '\0' || cJSON_AddStringToObject(err, "field", field) != NULL;
}

void api_timeout_err(api_err *e, const char *field)
{
    e->code = SRV_ERR_TIMEOUT;
    snprintf(e->field, sizeof e->field, "%s", field);
    snprintf(e->message, sizeof e->message, "the request deadline passed before this %s could run",
             field[0] ? "item" : "request");
}

/* The timing of a request of several tasks (an extrapolation's lengths):
 * the longest wait, the wall time from the first start to the last end,
 * and the run times summed. */
static bool render_merged_timing(cJSON *root, const srv_job *job)
{
    api_task m = job->tasks[0];
    for (size_t i = 1; i < job->n_tasks; i++) {
        const api_task *t = &job->tasks[i];
        if (t->queue_us > m.queue_us)
            m.queue_us = t->queue_us;
        if (t->start_us < m.start_us)
            m.start_us = t->start_us;
        if (t->end_us > m.end_us)
            m.end_us = t->end_us;
        m.cpu_us += t->cpu_us;
    }
    if (job->n_tasks > 1)
        m.compute_us = m.end_us - m.start_us;
    return api_render_timing(root, &m);
}

void srv_job_finish(srv_job *job, srv_reply *reply)
{
    srv_defer defer = {0};
    cJSON *root;
    char *body;
    size_t len = 0;
    bool ok;

    if (job == NULL) {
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "no job to finish");
        return;
    }
    if (job->view != NULL) {
        job->view(job, job->view_ctx, reply);
        return;
    }
    if (!job->ep->batch) {
        /* Not a batch: a task's failure (the first), or else a task's
         * timeout, is the whole answer. */
        api_err e;
        for (size_t i = 0; i < job->n_tasks; i++)
            if (job->tasks[i].failed) {
                api_reply_err(reply, &job->tasks[i].err);
                return;
            }
        for (size_t i = 0; i < job->n_tasks; i++)
            if (job->tasks[i].timed_out) {
                api_timeout_err(&e, "");
                api_reply_err(reply, &e);
                return;
            }
    }
    /* Large base64 outputs are encoded straight into the final text
     * (srv_defer in tensor.h): the job's outputs live until it is freed. */
    srv_defer_set_current(&defer);
    root = cJSON_CreateObject();
    ok = root != NULL && job->ep->render(job, root) &&
         (job->ep->batch || render_merged_timing(root, job));
    srv_defer_set_current(NULL);
    body = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (body != NULL) {
        len = strlen(body);
        if (defer.n > 0) {
            char *full = srv_defer_apply(&defer, body, len, &len);
            cJSON_free(body);
            body = full;
        }
    }
    srv_defer_free(&defer);
    if (body == NULL) {
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory rendering the answer");
        return;
    }
    srv_reply_json(reply, job->status != 0 ? job->status : 200, body, len);
}

void srv_job_free(srv_job *job)
{
    if (job == NULL)
        return;
    if (job->view_free != NULL)
        job->view_free(job->view_ctx);
    if (job->impl != NULL && job->ep->destroy != NULL)
        job->ep->destroy(job->impl);
    free(job->tasks);
    free(job->roof_frac);
    free(job);
}
