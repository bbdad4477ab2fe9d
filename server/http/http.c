/* http.c - see http.h.
 *
 * One request's life: the first handler call routes it and refuses what can
 * be refused before the body arrives (404, 405, 401, 413 by Content-Length);
 * later calls collect the body; the last call parses it into a job
 * (srv_job_prepare), submits the job's tasks to the pool and suspends the
 * connection. When the last task is done, the pool's loop thread renders the
 * answer and resumes the connection, and the handler queues the response.
 */
#include "http/http.h"

#include "api/api.h"
#include "common/reply.h"
#include "http/deadline.h"
#include "http/routes.h"
#include "http/web.h"
#include "v2/v2.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* openapi.yaml, embedded by the Makefile (build/server/embed_openapi.c). */
extern const unsigned char srv_openapi_yaml[];
extern const size_t srv_openapi_yaml_len;

struct srv_http {
    struct MHD_Daemon *daemon;
    const srv_config *cfg;
    srv_pool *pool;
    srv_metrics *metrics;
    srv_limits limits;
    atomic_bool draining;
    atomic_int_fast64_t in_flight; /* jobs handed to the pool, not yet answered */
    atomic_int_fast64_t open;      /* requests from first handler call to completion */
    MHD_socket listen_fd;          /* after quiesce: ours to close */
    srv_deadlines *deadlines;      /* every connection's header and body deadline */
    /* Workspaces of the tiny jobs run on the HTTP threads (start_job), kept
     * for the next one; a slot is taken and refilled with one atomic
     * exchange, so no thread ever waits for one. */
    _Atomic(srv_workspace *) inline_ws[4];
};

typedef struct request request;

typedef struct task_arg {
    request *req;
    size_t index;
} task_arg;

struct request {
    srv_http *h;
    struct MHD_Connection *conn;
    srv_conn *conn_deadline; /* the connection's record in h->deadlines */
    srv_route route;
    char method[8];
    char path[128];
    char model[128];          /* SRV_ROUTE_V2_MODEL..INFER: the model name */
    int64_t infer_header_len; /* Inference-Header-Content-Length, -1 when absent */
    uint64_t start_ns;
    uint64_t deadline_ns;
    /* Server-Timing phases (us): first header byte to the whole body in,
     * the body to a prepared job (parse), and the answer's rendering. */
    uint64_t upload_us, parse_us, render_us;

    char *body;
    size_t body_len, body_cap;
    size_t body_off; /* the body starts here in the buffer, so that the binary
                        part of a v2 request is 16-byte aligned (v2/v2.h) */
    bool body_too_large;
    bool refused; /* answer refused_error once the body is read and dropped */
    srv_error refused_error;
    char refused_msg[160];

    srv_job *job;
    srv_task *tasks;
    task_arg *args;
    size_t ntasks;
    atomic_size_t remaining;
    atomic_uint_fast64_t max_queue_us;
    atomic_uint_fast64_t sum_compute_us;
    bool submitted;

    srv_reply reply;
    bool reply_ready; /* set on the loop thread before the resume */
    bool recorded;    /* counted in the metrics (and out of in_flight) */
    int status;       /* sent status, for the log */
    size_t bytes_out;
};

/* Compares in time independent of where the strings differ. */
static bool equal_const_time(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < lb; i++)
        diff |= (unsigned char)(a[i < la ? i : 0] ^ b[i]);
    return diff == 0;
}

static bool authorized(const srv_http *h, struct MHD_Connection *c)
{
    const char *auth, *prefix = "Bearer ";
    if (h->cfg->api_key[0] == '\0')
        return true;
    auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth == NULL || strncmp(auth, prefix, strlen(prefix)) != 0)
        return false;
    return equal_const_time(auth + strlen(prefix), h->cfg->api_key);
}

/* ------------------------------------------------------------------------- */
/* Responses                                                                 */
/* ------------------------------------------------------------------------- */

static void set_text(srv_reply *r, int status, const char *type, const char *text)
{
    size_t n = strlen(text);
    r->http_status = status;
    r->content_type = type;
    r->body = malloc(n + 1);
    r->body_len = r->body ? n : 0;
    if (r->body)
        memcpy(r->body, text, n + 1);
}

/* Counts the request as answered, once: when its answer is queued (so a
 * client that has read the answer sees the metrics already moved), or at
 * completion for one that never got an answer. */
static void record_answer(request *q)
{
    srv_http *h = q->h;
    if (q->recorded)
        return;
    q->recorded = true;
    if (q->status == 0)
        q->status = 499; /* the client went away before an answer was queued */
    srv_metrics_request(h->metrics, srv_routes[q->route].label, q->status,
                        (double)(srv_now_ns() - q->start_ns) / 1e9, q->body_len, q->bytes_out);
    if (q->submitted) {
        atomic_fetch_sub(&h->in_flight, 1);
        srv_metrics_in_flight_add(h->metrics, -1);
    }
}

/* Writes us microseconds as milliseconds with three decimals ("12.345",
 * as "%.3f" would, without printf); returns the end, where a NUL is. */
static char *put_ms(char *p, uint64_t us)
{
    char digits[24];
    int n = 0;
    uint64_t ms = us / 1000;
    unsigned frac = (unsigned)(us % 1000);
    do {
        digits[n++] = (char)('0' + ms % 10);
        ms /= 10;
    } while (ms != 0);
    while (n > 0)
        *p++ = digits[--n];
    *p++ = '.';
    *p++ = (char)('0' + frac / 100);
    *p++ = (char)('0' + frac / 10 % 10);
    *p++ = (char)('0' + frac % 10);
    *p = '\0';
    return p;
}

static enum MHD_Result send_reply(request *q)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    srv_reply *r = &q->reply;
    char timing[256];

    if (srv_route_is_v2(q->route))
        srv_v2_reply_error(r); /* {"error":"..."}, whichever layer refused */
    if (r->body != NULL) {
        resp = MHD_create_response_from_buffer(r->body_len, r->body, MHD_RESPMEM_MUST_FREE);
        if (resp != NULL)
            r->body = NULL; /* MHD owns it now */
    } else {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
    if (r->infer_header_len > 0) {
        char n[24];
        snprintf(n, sizeof n, "%zu", r->infer_header_len);
        MHD_add_response_header(resp, "Inference-Header-Content-Length", n);
    }
    {
        uint64_t total_us = (srv_now_ns() - q->start_ns + 500) / 1000;
        char *p = timing;
        if (q->submitted) {
            p = put_ms(stpcpy(p, "upload;dur="), q->upload_us);
            p = put_ms(stpcpy(p, ", parse;dur="), q->parse_us);
            p = put_ms(stpcpy(p, ", queue;dur="), atomic_load(&q->max_queue_us));
            p = put_ms(stpcpy(p, ", compute;dur="), atomic_load(&q->sum_compute_us));
            p = put_ms(stpcpy(p, ", render;dur="), q->render_us);
            p = stpcpy(p, ", ");
        }
        put_ms(stpcpy(p, "total;dur="), total_us);
        MHD_add_response_header(resp, "Server-Timing", timing);
    }
    if (r->http_status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (r->http_status == MHD_HTTP_METHOD_NOT_ALLOWED && q->route != SRV_ROUTE_NOT_FOUND)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, srv_routes[q->route].method);
    if (r->http_status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (atomic_load(&q->h->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (q->route == SRV_ROUTE_PAGE || q->route == SRV_ROUTE_WEB) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, SRV_WEB_CACHE_CONTROL);
        MHD_add_response_header(resp, "Content-Security-Policy", SRV_WEB_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    srv_conn_set_phase(q->conn_deadline, SRV_CONN_BUSY, 0);
    q->status = r->http_status;
    q->bytes_out = r->body_len;
    ret = MHD_queue_response(q->conn, (unsigned)r->http_status, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES)
        record_answer(q);
    return ret;
}

static enum MHD_Result send_error(request *q, srv_error e, const char *field, const char *msg)
{
    srv_reply_free(&q->reply);
    srv_reply_error(&q->reply, e, field, "%s", msg);
    return send_reply(q);
}

/* ------------------------------------------------------------------------- */
/* Work on the pool                                                          */
/* ------------------------------------------------------------------------- */

/* srv_job_finish, timed for Server-Timing. */
static void finish_job(request *q)
{
    uint64_t t0 = srv_now_ns();
    srv_job_finish(q->job, &q->reply);
    q->render_us = (srv_now_ns() - t0) / 1000u;
}

static void task_run(void *arg, uint64_t queue_us, srv_workspace *ws)
{
    task_arg *a = arg;
    request *q = a->req;
    uint64_t t0 = srv_now_ns(), compute_us, prev;

    srv_metrics_queue(q->h->metrics, (double)queue_us / 1e6);
    srv_metrics_queue_depth_add(q->h->metrics, -1);
    if (t0 > q->deadline_ns) {
        srv_job_set_timed_out(q->job, a->index);
        return;
    }
    srv_job_run_task(q->job, a->index, ws);
    compute_us = (srv_now_ns() - t0) / 1000u;
    srv_job_set_timing(q->job, a->index, queue_us, compute_us);
    srv_metrics_compute(q->h->metrics, srv_job_task_scheme(q->job, a->index),
                        (double)compute_us / 1e6);
    atomic_fetch_add(&q->sum_compute_us, compute_us);
    prev = atomic_load(&q->max_queue_us);
    while (queue_us > prev && !atomic_compare_exchange_weak(&q->max_queue_us, &prev, queue_us))
        ;
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

static enum MHD_Result start_job(request *q)
{
    srv_http *h = q->h;
    uint64_t t0 = srv_now_ns();
    size_t n;

    q->upload_us = (t0 - q->start_ns) / 1000u;
    if (atomic_load(&h->draining))
        return send_error(q, SRV_ERR_DRAINING, NULL,
                          "the server is shutting down; retry on another replica");
    if (q->route == SRV_ROUTE_V2_INFER
            ? !srv_v2_infer_prepare(q->model, q->body ? q->body + q->body_off : "", q->body_len,
                                    q->infer_header_len, &h->limits, &q->job, &q->reply)
            : !srv_job_prepare(srv_routes[q->route].ep, q->body ? q->body : "", q->body_len,
                               &h->limits, &q->job, &q->reply))
        return send_reply(q);
    q->parse_us = (srv_now_ns() - t0) / 1000u;
    n = srv_job_task_count(q->job);
    q->tasks = calloc(n ? n : 1, sizeof *q->tasks);
    q->args = calloc(n ? n : 1, sizeof *q->args);
    if (q->tasks == NULL || q->args == NULL)
        return send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        q->args[i] = (task_arg){q, i};
        q->tasks[i] = (srv_task){task_run, task_done, &q->args[i], 0};
    }
    q->ntasks = n;
    atomic_store(&q->remaining, n);
    q->deadline_ns = q->start_ns + (uint64_t)(h->cfg->request_timeout * 1e9);
    if (n == 0) { /* nothing to compute */
        finish_job(q);
        return send_reply(q);
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
        return send_reply(q);
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

/* ------------------------------------------------------------------------- */
/* Plain endpoints                                                           */
/* ------------------------------------------------------------------------- */

/* Ready by /readyz's rule: not draining, and the queue not full. */
static bool ready(srv_http *h)
{
    return !atomic_load(&h->draining) && srv_pool_queued(h->pool) < srv_pool_max_queued(h->pool);
}

static enum MHD_Result serve_simple(request *q)
{
    srv_http *h = q->h;
    if (srv_routes[q->route].ep != NULL) { /* GET /v1/schemes, /v1/tensors */
        srv_endpoint_answer(srv_routes[q->route].ep, &h->limits, &q->reply);
        return send_reply(q);
    }
    switch (q->route) {
    case SRV_ROUTE_HEALTHZ:
        set_text(&q->reply, 200, "application/json", "{\"status\":\"ok\"}");
        break;
    case SRV_ROUTE_READYZ:
        if (atomic_load(&h->draining))
            set_text(&q->reply, 503, "application/json", "{\"status\":\"draining\"}");
        else if (srv_pool_queued(h->pool) >= srv_pool_max_queued(h->pool))
            set_text(&q->reply, 503, "application/json", "{\"status\":\"saturated\"}");
        else
            set_text(&q->reply, 200, "application/json", "{\"status\":\"ready\"}");
        break;
    /* [V2] health: 200 is true, 4xx false, the body empty; ready as /readyz. */
    case SRV_ROUTE_V2_LIVE:
        set_text(&q->reply, 200, "text/plain", "");
        break;
    case SRV_ROUTE_V2_READY:
    case SRV_ROUTE_V2_MODEL_READY:
        set_text(&q->reply, ready(h) ? 200 : 400, "text/plain", "");
        break;
    case SRV_ROUTE_V2_SERVER:
        srv_v2_server_metadata(&q->reply);
        break;
    case SRV_ROUTE_V2_MODEL:
        srv_v2_model_metadata(q->model, &q->reply);
        break;
    case SRV_ROUTE_METRICS: {
        size_t len = 0;
        char *text = srv_metrics_render(h->metrics, &len);
        if (text == NULL)
            return send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
        q->reply.http_status = 200;
        q->reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
        q->reply.body = text;
        q->reply.body_len = len;
        break;
    }
    case SRV_ROUTE_OPENAPI: {
        size_t n = srv_openapi_yaml_len;
        q->reply.http_status = 200;
        q->reply.content_type = "application/yaml";
        q->reply.body = malloc(n ? n : 1);
        if (q->reply.body == NULL)
            return send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
        memcpy(q->reply.body, srv_openapi_yaml, n);
        q->reply.body_len = n;
        break;
    }
    case SRV_ROUTE_PAGE:
    case SRV_ROUTE_WEB: {
        srv_web_file f;
        if (!srv_web_find(q->path, &f))
            return send_error(q, SRV_ERR_NOT_FOUND, NULL, "no such file of the web page");
        q->reply.http_status = 200;
        q->reply.content_type = f.content_type;
        q->reply.body = malloc(f.len ? f.len : 1);
        if (q->reply.body == NULL)
            return send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
        memcpy(q->reply.body, f.data, f.len);
        q->reply.body_len = f.len;
        break;
    }
    default:
        return send_error(q, SRV_ERR_NOT_FOUND, NULL, "no such route");
    }
    return send_reply(q);
}

/* ------------------------------------------------------------------------- */
/* The handler                                                               */
/* ------------------------------------------------------------------------- */

/* An error known before the body arrives. Answered at once when no body
 * follows, or when the client waits for "100 Continue" (then it never sends
 * the body). Otherwise the body is read and dropped first: answering and
 * closing while the client still sends makes its TCP stack see a reset, and
 * clients that send the whole body first (urllib, fetch) lose the answer. */
enum { DROP_BODY_LIMIT = 16 << 20 };

static enum MHD_Result refuse(request *q, struct MHD_Connection *c, srv_error e, const char *msg)
{
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    bool body = te != NULL || (cl != NULL && strtoull(cl, NULL, 10) > 0);
    if (!body || (expect != NULL && strcasecmp(expect, "100-continue") == 0))
        return send_error(q, e, NULL, msg);
    q->refused = true;
    q->refused_error = e;
    snprintf(q->refused_msg, sizeof q->refused_msg, "%s", msg);
    return MHD_YES;
}

static enum MHD_Result first_call(srv_http *h, struct MHD_Connection *c, const char *url,
                                  const char *method, request *q)
{
    bool method_ok;
    const char *cl;
    char msg[160];
    srv_web_file file;

    q->route = srv_route_find(url, method, &method_ok, q->model, sizeof q->model);
    if (q->route == SRV_ROUTE_NOT_FOUND) {
        snprintf(msg, sizeof msg, "no route %.64s %.64s", method, url);
        return refuse(q, c, SRV_ERR_NOT_FOUND, msg);
    }
    if (!method_ok) {
        snprintf(msg, sizeof msg, "%.64s takes %s, not %.16s", url, srv_routes[q->route].method,
                 method);
        return refuse(q, c, SRV_ERR_METHOD_NOT_ALLOWED, msg);
    }
    if (q->route == SRV_ROUTE_WEB && (strlen(url) >= sizeof q->path || !srv_web_find(url, &file))) {
        snprintf(msg, sizeof msg, "no file %.64s in the web page", url);
        return refuse(q, c, SRV_ERR_NOT_FOUND, msg);
    }
    if (srv_routes[q->route].api && !authorized(h, c))
        return refuse(q, c, SRV_ERR_UNAUTHORIZED,
                      "a valid API key is required: Authorization: Bearer <key>");
    if (srv_route_is_v2_model(q->route) && !srv_v2_model_known(q->model)) {
        srv_v2_unknown_model(q->model, msg, sizeof msg);
        return refuse(q, c, SRV_ERR_NOT_FOUND, msg);
    }
    q->infer_header_len = -1;
    if (q->route == SRV_ROUTE_V2_INFER &&
        (cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length")) !=
            NULL) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (cl[0] < '0' || cl[0] > '9' || *end != '\0' || n > (unsigned long long)INT64_MAX) {
            snprintf(msg, sizeof msg, "Inference-Header-Content-Length='%.32s' is not a byte count",
                     cl);
            return refuse(q, c, SRV_ERR_INVALID_ARGUMENT, msg);
        }
        q->infer_header_len = (int64_t)n;
        q->body_off = (16 - (size_t)(n % 16)) % 16;
    }
    cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (n > h->cfg->max_body_bytes) {
            snprintf(msg, sizeof msg, "body of %llu bytes exceeds the limit of %zu bytes", n,
                     h->cfg->max_body_bytes);
            /* Reading and dropping a body is worth it only while it is small:
             * a huge one is refused at once and the connection closed. */
            if (n - h->cfg->max_body_bytes > DROP_BODY_LIMIT)
                return send_error(q, SRV_ERR_PAYLOAD_TOO_LARGE, NULL, msg);
            return refuse(q, c, SRV_ERR_PAYLOAD_TOO_LARGE, msg);
        }
    }
    return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls)
{
    srv_http *h = cls;
    request *q = *con_cls;
    (void)version;

    if (q == NULL) {
        q = calloc(1, sizeof *q);
        if (q == NULL)
            return MHD_NO;
        q->h = h;
        q->conn = c;
        q->start_ns = srv_now_ns();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        atomic_init(&q->remaining, 0);
        atomic_init(&q->max_queue_us, 0);
        atomic_init(&q->sum_compute_us, 0);
        *con_cls = q;
        atomic_fetch_add(&h->open, 1);
        {
            const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
            q->conn_deadline = ci != NULL ? ci->socket_context : NULL;
        }
        srv_conn_set_phase(q->conn_deadline, SRV_CONN_BODY, q->start_ns);
        return first_call(h, c, url, method, q);
    }
    if (q->reply_ready)
        return send_reply(q);
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        /* Each byte resets libmicrohttpd's idle timeout, so a body sent a byte
         * at a time would hold the connection forever: the connection timeout
         * (whole seconds, as given to MHD below) also bounds the whole upload.
         * Closing is the only answer mid-upload. */
        if (h->cfg->request_timeout > 0 &&
            srv_now_ns() - q->start_ns >
                (uint64_t)(unsigned)(h->cfg->request_timeout + 0.999) * 1000000000u) {
            q->status = 408; /* for the access log and metrics */
            return MHD_NO;
        }
        if (q->refused)
            return MHD_YES; /* dropped: the answer is already decided */
        if (q->body_too_large || q->body_len + n > h->cfg->max_body_bytes) {
            q->body_too_large = true;
            return MHD_YES; /* discard the rest; answer 413 at the end */
        }
        if (q->body_off + q->body_len + n + 1 > q->body_cap) {
            size_t cap = q->body_cap ? q->body_cap : 4096;
            char *nb;
            if (q->body_cap == 0) {
                /* Sized once from Content-Length (already checked against
                 * the limit): a large body is not copied through a dozen
                 * doublings. Pages a lying client never fills stay virtual. */
                const char *cl =
                    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
                unsigned long long want = cl != NULL ? strtoull(cl, NULL, 10) : 0;
                if (want > 0 && want <= h->cfg->max_body_bytes && q->body_off + want + 1 > cap)
                    cap = q->body_off + (size_t)want + 1;
            }
            while (cap < q->body_off + q->body_len + n + 1)
                cap *= 2;
            nb = realloc(q->body, cap);
            if (nb == NULL)
                return MHD_NO;
            q->body = nb;
            q->body_cap = cap;
        }
        memcpy(q->body + q->body_off + q->body_len, upload_data, n);
        q->body_len += n;
        q->body[q->body_off + q->body_len] = '\0';
        return MHD_YES;
    }
    /* The whole request is in: no deadline while it is computed. */
    srv_conn_set_phase(q->conn_deadline, SRV_CONN_BUSY, 0);
    if (q->refused)
        return send_error(q, q->refused_error, NULL, q->refused_msg);
    if (q->body_too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "body exceeds the limit of %zu bytes", h->cfg->max_body_bytes);
        return send_error(q, SRV_ERR_PAYLOAD_TOO_LARGE, NULL, msg);
    }
    if (srv_routes[q->route].method[0] == 'P')
        return start_job(q);
    return serve_simple(q);
}

static void log_access(const request *q, double seconds)
{
    const srv_config *cfg = q->h->cfg;
    time_t now = time(NULL);
    struct tm tm;
    char ts[32];
    if (cfg->log_format == SRV_LOG_OFF)
        return;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (cfg->log_format == SRV_LOG_JSON)
        fprintf(stderr,
                "{\"ts\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
                "\"bytes_in\":%zu,\"bytes_out\":%zu,\"items\":%zu,\"queue_ms\":%.3f,"
                "\"compute_ms\":%.3f,\"duration_ms\":%.3f}\n",
                ts, q->method, srv_routes[q->route].path ? srv_routes[q->route].path : "-",
                q->status, q->body_len, q->bytes_out, q->ntasks,
                (double)atomic_load(&q->max_queue_us) / 1e3,
                (double)atomic_load(&q->sum_compute_us) / 1e3, seconds * 1e3);
    else
        fprintf(stderr, "%s %s %s %d %zu %zu %.3fms\n", ts, q->method,
                srv_routes[q->route].path ? srv_routes[q->route].path : "-", q->status, q->body_len,
                q->bytes_out, seconds * 1e3);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    srv_http *h = cls;
    request *q = *con_cls;
    double seconds;
    (void)c;
    (void)toe;
    if (q == NULL)
        return;
    seconds = (double)(srv_now_ns() - q->start_ns) / 1e9;
    /* On keep-alive the next request's headers are due from now. */
    srv_conn_set_phase(q->conn_deadline, SRV_CONN_HEADERS, srv_now_ns());
    record_answer(q);
    log_access(q, seconds);
    atomic_fetch_sub(&h->open, 1);
    srv_job_free(q->job);
    srv_reply_free(&q->reply);
    free(q->tasks);
    free(q->args);
    free(q->body);
    free(q);
    *con_cls = NULL;
}

/* A connection opens in the headers phase and leaves the deadlines' set before
 * libmicrohttpd closes its socket. */
static void notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe)
{
    srv_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context =
            ci != NULL ? srv_deadlines_open(h->deadlines, ci->connect_fd, srv_now_ns()) : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        srv_deadlines_close(h->deadlines, *socket_context);
        *socket_context = NULL;
    }
}

/* On the pool's loop thread, every SWEEP_MS. */
enum { SWEEP_MS = 200 };
static void sweep(void *arg)
{
    srv_http *h = arg;
    srv_deadlines_sweep(h->deadlines, srv_now_ns());
}

/* ------------------------------------------------------------------------- */

static bool resolve(const char *host, int port, struct sockaddr_storage *ss, bool *v6)
{
    struct addrinfo hints, *res = NULL;
    char service[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(service, sizeof service, "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0 || res == NULL)
        return false;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return true;
}

srv_http *srv_http_start(const srv_config *cfg, srv_pool *pool, srv_metrics *metrics,
                         int *bound_port)
{
    struct sockaddr_storage ss;
    bool v6 = false;
    unsigned threads = 2; /* HTTP threads only parse and copy; 1 would be a warning */
    const union MHD_DaemonInfo *info;
    /* Whole seconds, like libmicrohttpd's idle timeout below. */
    unsigned timeout_s = (unsigned)(cfg->request_timeout + 0.999);
    srv_http *h = calloc(1, sizeof *h);

    if (h == NULL)
        return NULL;
    h->cfg = cfg;
    h->pool = pool;
    h->metrics = metrics;
    h->limits.max_batch_items = cfg->max_batch_items;
    h->limits.max_tensor_elements = cfg->max_tensor_elements;
    h->limits.max_request_memory = cfg->max_request_memory;
    h->limits.parallel_parts = cfg->workers;
    h->limits.tensors = cfg->tensor_store;
    atomic_init(&h->draining, false);
    atomic_init(&h->in_flight, 0);
    atomic_init(&h->open, 0);
    h->listen_fd = MHD_INVALID_SOCKET;
    h->deadlines = srv_deadlines_new((uint64_t)timeout_s * 1000000000u);
    if (h->deadlines == NULL) {
        free(h);
        return NULL;
    }
    if (!resolve(cfg->host, cfg->port, &ss, &v6)) {
        fprintf(stderr, "posattnd: cannot resolve --host %s\n", cfg->host);
        srv_deadlines_free(h->deadlines);
        free(h);
        return NULL;
    }
    h->daemon = MHD_start_daemon(
        MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
        (uint16_t)cfg->port, NULL, NULL, handler, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_NOTIFY_COMPLETED, completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, h, MHD_OPTION_END);
    if (h->daemon == NULL) {
        fprintf(stderr, "posattnd: cannot listen on %s:%d\n", cfg->host, cfg->port);
        srv_deadlines_free(h->deadlines);
        free(h);
        return NULL;
    }
    /* libmicrohttpd's timeout is reset by every byte; the sweep bounds the
     * headers and the body however slowly they come. */
    if (timeout_s > 0)
        srv_pool_set_ticker(pool, SWEEP_MS, sweep, h);
    info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info != NULL ? info->port : cfg->port;
    return h;
}

void srv_http_drain(srv_http *h)
{
    atomic_store(&h->draining, true);
}

void srv_http_quiesce(srv_http *h)
{
    if (h->listen_fd == MHD_INVALID_SOCKET)
        h->listen_fd = MHD_quiesce_daemon(h->daemon);
}

int64_t srv_http_in_flight(const srv_http *h)
{
    return atomic_load(&((srv_http *)h)->in_flight);
}

int64_t srv_http_open_requests(const srv_http *h)
{
    return atomic_load(&((srv_http *)h)->open);
}

void srv_http_stop(srv_http *h)
{
    if (h == NULL)
        return;
    srv_pool_set_ticker(h->pool, 0, NULL, NULL);
    MHD_stop_daemon(h->daemon);
    if (h->listen_fd != MHD_INVALID_SOCKET)
        close(h->listen_fd);
    srv_deadlines_free(h->deadlines);
    for (size_t i = 0; i < sizeof h->inline_ws / sizeof *h->inline_ws; i++) {
        srv_workspace *w = atomic_exchange(&h->inline_ws[i], NULL);
        if (w != NULL) {
            srv_workspace_free(w);
            free(w);
        }
    }
    free(h);
}
