/* jobs.c - see request.h: a request's body into a job (srv_job_prepare for
 * an endpoint of api/, the route's protocol's prepare for its own), its tasks on the
 * worker pool with the connection suspended, and the answer rendered on the
 * pool's loop thread when the last task is done. A tiny job runs on the HTTP
 * thread itself.
 */
#include "http/jobs.h"
#include "http/respond.h"
#include "http/request.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Work on the pool                                                          */
/* ------------------------------------------------------------------------- */

/* srv_job_finish, timed for Server-Timing. */
static void finish_job(request *q)
{
    uint64_t t0 = srv_now_ns();
    const char *scheme;
    double seconds, fraction;
    srv_job_finish(q->job, &q->reply);
    q->render_us = (srv_now_ns() - t0) / 1000u;
    /* Each session step's wall time (posattn_session_step_duration_seconds). */
    for (size_t at = 0; srv_job_session_step(q->job, &at, &scheme, &seconds);)
        srv_metrics_session_step(q->h->metrics, scheme, seconds);
    for (size_t k = 0; srv_job_roofline_item(q->job, k, &scheme, &fraction); k++)
        srv_metrics_fraction_of_peak(q->h->metrics, scheme, fraction);
}

/* A task left the queue after queue_us: counted, and the longest wait of
 * its request kept, whether it then runs, finds its deadline passed, or was
 * dropped from the queue at it. */
static void task_dequeued(request *q, uint64_t queue_us)
{
    uint64_t prev = atomic_load(&q->max_queue_us);
    srv_metrics_queue(q->h->metrics, (double)queue_us / 1e6);
    srv_metrics_queue_depth_add(q->h->metrics, -1);
    while (queue_us > prev && !atomic_compare_exchange_weak(&q->max_queue_us, &prev, queue_us))
        ;
}

static void task_run(void *arg, uint64_t queue_us, srv_workspace *ws)
{
    task_arg *a = arg;
    request *q = a->req;
    uint64_t t0 = srv_now_ns(), compute_us, prev;

    task_dequeued(q, queue_us);
    if (t0 > q->deadline_ns && !srv_job_task_keep(q->job, a->index)) {
        srv_job_set_timed_out(q->job, a->index);
        return;
    }
    srv_job_run_task(q->job, a->index, ws);
    uint64_t t1 = srv_now_ns();
    compute_us = (t1 - t0) / 1000u;
    srv_job_set_timing(q->job, a->index, queue_us, t0 / 1000u, t1 / 1000u);
    prev = atomic_load(&q->first_start_us);
    while (t0 / 1000u < prev &&
           !atomic_compare_exchange_weak(&q->first_start_us, &prev, t0 / 1000u))
        ;
    prev = atomic_load(&q->last_end_us);
    while (t1 / 1000u > prev && !atomic_compare_exchange_weak(&q->last_end_us, &prev, t1 / 1000u))
        ;
    /* The histogram times successful computations: a failed item (often
     * refused in microseconds, before computing anything) would pull its
     * quantiles down. Nanoseconds, for the microsecond buckets. */
    if (srv_job_task_failed(q->job, a->index))
        srv_metrics_item_error(q->h->metrics, srv_job_task_scheme(q->job, a->index));
    else
        srv_metrics_compute(q->h->metrics, srv_job_task_scheme(q->job, a->index),
                            (double)(t1 - t0) / 1e9);
    atomic_fetch_add(&q->sum_compute_us, compute_us);
}

/* On the pool's loop thread: task a is past its deadline in the queue;
 * false drops it (task_expired follows). */
static bool task_keep(void *arg)
{
    task_arg *a = arg;
    return srv_job_task_keep(a->req->job, a->index);
}

/* On the pool's loop thread: task a was dropped from the queue at its
 * request's deadline (runtime/pool.h) and never ran; done follows. */
static void task_expired(void *arg, uint64_t queue_us)
{
    task_arg *a = arg;
    task_dequeued(a->req, queue_us);
    srv_job_set_timed_out(a->req->job, a->index);
}

/* On the pool's loop thread. */
static void task_done(void *arg)
{
    task_arg *a = arg;
    request *q = a->req;
    if (atomic_fetch_sub(&q->remaining, 1) != 1)
        return;
    finish_job(q);
    q->reply_ready = true;
    MHD_resume_connection(q->conn);
}

/* A workspace for a tiny job: a kept one, or a new empty one (NULL: out of
 * memory). */
static srv_workspace *inline_ws_take(srv_http *h)
{
    for (size_t i = 0; i < sizeof h->inline_ws / sizeof *h->inline_ws; i++) {
        srv_workspace *w = atomic_exchange(&h->inline_ws[i], NULL);
        if (w != NULL)
            return w;
    }
    return calloc(1, sizeof(srv_workspace));
}

/* Keeps w for the next tiny job if a slot is free and w is small. */
static void inline_ws_give(srv_http *h, srv_workspace *w)
{
    enum { KEEP_MAX = 4 << 20 };
    if (w->cap <= KEEP_MAX) {
        for (size_t i = 0; i < sizeof h->inline_ws / sizeof *h->inline_ws; i++) {
            srv_workspace *none = NULL;
            if (atomic_compare_exchange_strong(&h->inline_ws[i], &none, w))
                return;
        }
    }
    srv_workspace_free(w);
    free(w);
}

/* Jobs of one task up to this many multiply-adds (tens of microseconds)
 * run on the HTTP thread that parsed them. */
#ifndef INLINE_MAX_MACS
#define INLINE_MAX_MACS (4.0 * 1024 * 1024)
#endif

enum MHD_Result http_start_job(request *q)
{
    srv_http *h = q->h;
    uint64_t t0 = srv_now_ns();
    size_t n;

    q->upload_us = (t0 - q->start_ns) / 1000u;
    if (atomic_load(&h->draining))
        return http_send_error(q, SRV_ERR_DRAINING, NULL,
                               "the server is shutting down; retry on another replica");
    const srv_route_def *d = &srv_routes[q->route];
    const char *body = q->body != NULL ? q->body + q->body_off : "";
    bool prepared;
    if (d->proto != NULL) {
        srv_protocol_ctx pc;
        http_protocol_ctx(q, &pc);
        prepared = d->proto->prepare(d->op, &pc, body, q->body_len, q->framing, &q->job, &q->reply);
    } else {
        srv_endpoint_args args;
        http_endpoint_args(q, &args);
        prepared =
            srv_job_prepare_args(d->ep, &args, body, q->body_len, &h->limits, &q->job, &q->reply);
    }
    if (!prepared)
        return http_send_reply(q);
    q->parse_us = (srv_now_ns() - t0) / 1000u;
    n = srv_job_task_count(q->job);
    q->tasks = calloc(n ? n : 1, sizeof *q->tasks);
    q->args = calloc(n ? n : 1, sizeof *q->args);
    if (q->tasks == NULL || q->args == NULL)
        return http_send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
    q->deadline_ns = q->start_ns + (uint64_t)(h->cfg->request_timeout * 1e9);
    for (size_t i = 0; i < n; i++) {
        q->args[i] = (task_arg){q, i};
        q->tasks[i] = (srv_task){.run = task_run,
                                 .done = task_done,
                                 .arg = &q->args[i],
                                 .deadline_ns = q->deadline_ns,
                                 .expired = task_expired,
                                 .keep = task_keep};
    }
    q->ntasks = n;
    atomic_store(&q->remaining, n);
    if (n == 0) { /* nothing to compute */
        finish_job(q);
        return http_send_reply(q);
    }
    if (n == 1 && srv_job_task_macs(q->job, 0) > 0 &&
        srv_job_task_macs(q->job, 0) <= INLINE_MAX_MACS) {
        /* A tiny job runs here on the HTTP thread: handing it to a worker
         * and back (four thread wake-ups) costs more than computing it. It
         * is counted as in flight and timed as a task with no queue. */
        srv_workspace *ws = inline_ws_take(h);
        q->submitted = true;
        atomic_fetch_add(&h->in_flight, 1);
        srv_metrics_in_flight_add(h->metrics, 1);
        srv_metrics_queue_depth_add(h->metrics, 1);
        task_run(&q->args[0], 0, ws); /* with ws NULL, a workspace of its own */
        if (ws != NULL)
            inline_ws_give(h, ws);
        finish_job(q);
        return http_send_reply(q);
    }
    /* Suspend before submitting: a fast task may finish (and resume) at once. */
    q->submitted = true;
    atomic_fetch_add(&h->in_flight, 1);
    srv_metrics_in_flight_add(h->metrics, 1);
    MHD_suspend_connection(q->conn);
    srv_metrics_queue_depth_add(h->metrics, (int64_t)n);
    if (!srv_pool_submit(h->pool, q->tasks, n)) {
        srv_metrics_queue_depth_add(h->metrics, -(int64_t)n);
        q->submitted = false;
        atomic_fetch_sub(&h->in_flight, 1);
        srv_metrics_in_flight_add(h->metrics, -1);
        srv_reply_free(&q->reply);
        srv_reply_error(&q->reply, SRV_ERR_OVERLOADED, NULL,
                        "the queue is full (%d tasks waiting); retry after 1 s",
                        srv_pool_max_queued(h->pool));
        q->reply_ready = true;
        MHD_resume_connection(q->conn);
    }
    return MHD_YES;
}
