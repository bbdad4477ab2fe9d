/* respond.c - see request.h: a request's answer as libmicrohttpd sends it
 * (content type, Server-Timing, the headers of each status, the page's
 * security headers), the metrics count of each answer, and the routes that
 * need no job (health, metrics, OpenAPI, the web page, GET endpoints of the
 * API through their api/ records).
 */
#include "http/respond.h"
#include "http/cors.h"
#include "http/request.h"

#include "http/web.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* openapi.yaml, embedded by the Makefile (build/server/embed_openapi.c). */
extern const unsigned char srv_openapi_yaml[];
extern const size_t srv_openapi_yaml_len;

/* ------------------------------------------------------------------------- */
/* Responses                                                                 */
/* ------------------------------------------------------------------------- */

void http_set_text(srv_reply *r, int status, const char *type, const char *text)
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
void http_record_answer(request *q)
{
    srv_http *h = q->h;
    if (q->recorded)
        return;
    q->recorded = true;
    if (q->status == 0)
        q->status = 499; /* the client went away before an answer was queued */
    const double seconds = (double)(srv_now_ns() - q->start_ns) / 1e9;
    srv_metrics_request(h->metrics, srv_routes[q->route].label, q->status, seconds, q->body_len,
                        q->bytes_out);
    const srv_route_def *d = &srv_routes[q->route];
    const char *model = NULL;
    char key[160];
    if (d->proto != NULL && d->proto->model_key != NULL) {
        srv_protocol_ctx pc;
        http_protocol_ctx(q, &pc);
        model = d->proto->model_key(d->op, &pc, key, sizeof key);
    }
    if (model != NULL) {
        /* Triton's phases: the longest wait of a task, the body parsed, the
         * computation's wall time, the answer rendered. */
        const double phases[SRV_PHASE_COUNT] = {
            [SRV_PHASE_QUEUE] = (double)atomic_load(&q->max_queue_us) / 1e6,
            [SRV_PHASE_INPUT] = (double)q->parse_us / 1e6,
            [SRV_PHASE_INFER] = (double)srv_request_compute_us(q) / 1e6,
            [SRV_PHASE_OUTPUT] = (double)q->render_us / 1e6,
        };
        srv_metrics_model_infer(h->metrics, model, q->status == 200, seconds, phases);
    }
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

/* The strings of parts[0 .. n) one after another at p (cap bytes, NUL
 * included), or nothing if they do not all fit. Returns the end. */
static char *put_parts(char *p, size_t cap, const char *const *parts, size_t n)
{
    size_t len = 0, at = 0;
    for (size_t i = 0; i < n; i++)
        len += strlen(parts[i]);
    if (len >= cap) {
        *p = '\0'; /* never a cut entry */
        return p;
    }
    for (size_t i = 0; i < n; i++) {
        const size_t k = strlen(parts[i]);
        memcpy(p + at, parts[i], k);
        at += k;
    }
    p[at] = '\0';
    return p + at;
}

/* Appends the roofline of an attention job's items to Server-Timing at p
 * (cap bytes): their flops and bytes summed and, with the probe's peaks,
 * the fraction the request's compute wall time reached (api/roofline.c):
 * ", roofline;desc="compute 0.412";flops=..;bytes=..;fraction=0.412;bound=compute".
 * Returns the end (p when there is none). */
static char *add_roofline(const request *q, char *p, size_t cap)
{
    double flops, bytes, fraction;
    int threads;
    bool compute, bf16;
    char fl[SRV_ROOFLINE_TEXT], by[SRV_ROOFLINE_TEXT], fr[SRV_ROOFLINE_TEXT];
    if (!srv_job_roofline(q->job, &flops, &bytes, &threads, &bf16))
        return p;
    /* Without printf for the floats: a small request's answer is a few
     * microseconds of work, and each conversion cost a fraction of one. */
    const char *f = srv_roofline_count(flops, fl), *b = srv_roofline_count(bytes, by);
    if (srv_roofline_fraction(q->h->limits.machine, flops, bytes, srv_request_compute_us(q),
                              threads, bf16, &fraction, &compute)) {
        const char *bound = compute ? "compute" : "memory";
        srv_roofline_text(fraction, fr);
        const char *parts[] = {", roofline;desc=\"", bound, " ",       fr,
                               "\";flops=",          f,     ";bytes=", b,
                               ";fraction=",         fr,    ";bound=", bound};
        return put_parts(p, cap, parts, sizeof parts / sizeof parts[0]);
    }
    const char *parts[] = {", roofline;flops=", f, ";bytes=", b};
    return put_parts(p, cap, parts, sizeof parts / sizeof parts[0]);
}

enum MHD_Result http_send_reply(request *q)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    srv_reply *r = &q->reply;
    char timing[512];

    if (q->shape != NULL)
        q->shape->error_shape(r); /* the protocol's shape, whichever layer refused */
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
    if (r->len_header != NULL) {
        char n[24];
        snprintf(n, sizeof n, "%zu", r->len_value);
        MHD_add_response_header(resp, r->len_header, n);
    }
    {
        uint64_t total_us = (srv_now_ns() - q->start_ns + 500) / 1000;
        char *p = timing;
        if (q->submitted) {
            p = put_ms(stpcpy(p, "upload;dur="), q->upload_us);
            p = put_ms(stpcpy(p, ", parse;dur="), q->parse_us);
            p = put_ms(stpcpy(p, ", queue;dur="), atomic_load(&q->max_queue_us));
            p = put_ms(stpcpy(p, ", compute;dur="), srv_request_compute_us(q));
            p = put_ms(stpcpy(p, ", cpu;dur="), atomic_load(&q->sum_compute_us));
            p = put_ms(stpcpy(p, ", render;dur="), q->render_us);
            p = add_roofline(q, p, sizeof timing - 64 - (size_t)(p - timing));
            p = stpcpy(p, ", ");
        }
        /* total stays last: clients read it as the header's end. */
        put_ms(stpcpy(p, "total;dur="), total_us);
        MHD_add_response_header(resp, "Server-Timing", timing);
    }
    /* Which replica answered (--replica-id): behind a balancer, the proof
     * that a session's requests reach one replica (docs/deploy.md). */
    if (q->h->limits.replica != NULL && q->h->limits.replica[0] != '\0')
        MHD_add_response_header(resp, "X-Posattn-Replica", q->h->limits.replica);
    if (r->http_status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (r->http_status == MHD_HTTP_METHOD_NOT_ALLOWED && q->route != SRV_ROUTE_NOT_FOUND) {
        char allow[64];
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                srv_route_allow(q->route, allow, sizeof allow));
    }
    if (r->http_status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (atomic_load(&q->h->draining) || q->close)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (q->route == SRV_ROUTE_PAGE || q->route == SRV_ROUTE_WEB) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, SRV_WEB_CACHE_CONTROL);
        MHD_add_response_header(resp, "Content-Security-Policy", SRV_WEB_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    if (q->h->cfg->n_cors_origins > 0) {
        char methods[64];
        srv_cors_headers(q->h->cfg, resp, q->cors_allow, q->preflight,
                         srv_route_allow(q->route, methods, sizeof methods));
    }
    /* The answer is due to the client within the same bound as its request. */
    srv_conn_set_phase(q->conn_deadline, SRV_CONN_SEND, srv_now_ns());
    q->status = r->http_status;
    q->bytes_out = r->body_len;
    ret = MHD_queue_response(q->conn, (unsigned)r->http_status, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES)
        http_record_answer(q);
    return ret;
}

enum MHD_Result http_send_error(request *q, srv_error e, const char *field, const char *msg)
{
    srv_reply_free(&q->reply);
    srv_reply_error(&q->reply, e, field, "%s", msg);
    return http_send_reply(q);
}

/* ------------------------------------------------------------------------- */
/* Plain endpoints                                                           */
/* ------------------------------------------------------------------------- */

/* Ready by /readyz's rule: not draining, and the queue not full. */
static bool ready(srv_http *h)
{
    return !atomic_load(&h->draining) && srv_pool_queued(h->pool) < srv_pool_max_queued(h->pool);
}

/* A protocol's model counters (srv_protocol_ctx.counts). */
static void model_counts(void *arg, const char *key, srv_model_counts *out)
{
    srv_metrics_model_counts(arg, key, out);
}

static const char *query_value(void *arg, const char *key)
{
    return MHD_lookup_connection_value(arg, MHD_GET_ARGUMENT_KIND, key);
}

void http_endpoint_args(request *q, srv_endpoint_args *a)
{
    a->params = &q->params;
    a->query = query_value;
    a->query_arg = q->conn;
}

void http_protocol_ctx(request *q, srv_protocol_ctx *pc)
{
    pc->lim = &q->h->limits;
    pc->params = &q->params;
    pc->ready = ready(q->h);
    pc->counts = model_counts;
    pc->counts_arg = q->h->metrics;
}

enum MHD_Result http_serve_simple(request *q)
{
    srv_http *h = q->h;
    const srv_route_def *d = &srv_routes[q->route];
    if (d->ep != NULL) { /* GET /v1/schemes, /v1/tensors, /v1/sessions/{id}; DELETE */
        srv_endpoint_args args;
        http_endpoint_args(q, &args);
        srv_endpoint_answer_args(d->ep, &h->limits, &args, &q->reply);
        return http_send_reply(q);
    }
    if (d->proto != NULL) {
        srv_protocol_ctx pc;
        http_protocol_ctx(q, &pc);
        d->proto->answer(d->op, &pc, &q->reply);
        return http_send_reply(q);
    }
    switch (q->route) {
    case SRV_ROUTE_HEALTHZ:
        http_set_text(&q->reply, 200, "application/json", "{\"status\":\"ok\"}");
        break;
    case SRV_ROUTE_READYZ:
        if (atomic_load(&h->draining))
            http_set_text(&q->reply, 503, "application/json", "{\"status\":\"draining\"}");
        else if (srv_pool_queued(h->pool) >= srv_pool_max_queued(h->pool))
            http_set_text(&q->reply, 503, "application/json", "{\"status\":\"saturated\"}");
        else
            http_set_text(&q->reply, 200, "application/json", "{\"status\":\"ready\"}");
        break;
    case SRV_ROUTE_METRICS: {
        size_t len = 0;
        char *text = srv_metrics_render(h->metrics, &len);
        if (text == NULL)
            return http_send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
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
            return http_send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
        memcpy(q->reply.body, srv_openapi_yaml, n);
        q->reply.body_len = n;
        break;
    }
    case SRV_ROUTE_PAGE:
    case SRV_ROUTE_WEB: {
        srv_web_file f;
        if (!srv_web_find(q->path, &f))
            return http_send_error(q, SRV_ERR_NOT_FOUND, NULL, "no such file of the web page");
        q->reply.http_status = 200;
        q->reply.content_type = f.content_type;
        q->reply.body = malloc(f.len ? f.len : 1);
        if (q->reply.body == NULL)
            return http_send_error(q, SRV_ERR_INTERNAL, NULL, "out of memory");
        memcpy(q->reply.body, f.data, f.len);
        q->reply.body_len = f.len;
        break;
    }
    default:
        return http_send_error(q, SRV_ERR_NOT_FOUND, NULL, "no such route");
    }
    return http_send_reply(q);
}
