/* request.h - private to http/: the server and one request's record as the
 * three files of the HTTP layer share them. http.c owns the daemon and a
 * request's life (route, refuse, receive, log); jobs.c (jobs.h) hands a
 * prepared job to the pool and resumes the connection when it is done;
 * respond.c (respond.h) builds and queues the response and answers the
 * routes that need no job.
 */
#ifndef SRV_HTTP_REQUEST_H
#define SRV_HTTP_REQUEST_H

#include "api/api.h"
#include "common/reply.h"
#include "http/deadline.h"
#include "http/http.h"
#include "http/routes.h"
#include "http/tls.h"
#include "runtime/config.h"
#include "runtime/metrics.h"
#include "runtime/pool.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    srv_tls tls;                   /* --tls-cert / --tls-key, read at start (http/tls.h) */
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
    srv_route_params params;   /* the path's {name} and {version} */
    const srv_protocol *shape; /* under a protocol's prefix: its errors' shape, or NULL */
    char key_name[24];         /* the accepted API key ("line N", "flag"); "": none */
    int64_t framing;           /* the route's framing header (a byte count), -1 when absent */
    uint64_t start_ns;
    uint64_t deadline_ns;
    /* Server-Timing phases (us): first header byte to the whole body in,
     * the body to a prepared job (parse), and the answer's rendering. */
    uint64_t upload_us, parse_us, render_us;

    char *body;
    size_t body_len, body_cap;
    size_t body_off; /* the body starts here in the buffer, so that the part
                        after a framed header is 16-byte aligned (api/api.h) */
    bool body_too_large;
    bool refused; /* answer refused_error once the body is read and dropped */
    srv_error refused_error;
    char refused_msg[256];
    bool close; /* answer with Connection: close (framing refused) */
    /* --cors-origin (http/cors.h): Access-Control-Allow-Origin for the
     * request's Origin, NULL when it is not allowed (or CORS is off); and
     * whether this is a preflight OPTIONS, answered 204 without the key. */
    const char *cors_allow;
    bool preflight;

    srv_job *job;
    srv_task *tasks;
    task_arg *args;
    size_t ntasks;
    atomic_size_t remaining;
    atomic_uint_fast64_t max_queue_us;
    atomic_uint_fast64_t sum_compute_us; /* CPU: the tasks' run times summed */
    /* Wall: the first task's start and the last one's end (us, monotonic);
     * first_start_us is UINT64_MAX until a task starts. */
    atomic_uint_fast64_t first_start_us, last_end_us;
    bool submitted;

    srv_reply reply;
    bool reply_ready; /* set on the loop thread before the resume */
    bool recorded;    /* counted in the metrics (and out of in_flight) */
    int status;       /* sent status, for the log */
    size_t bytes_out;
};

/* The request's compute wall time: its first task's start to its last
 * one's end (0 before any ran); sum_compute_us is the CPU time (jobs.c). */
static inline uint64_t srv_request_compute_us(const request *q)
{
    uint64_t a = atomic_load(&q->first_start_us), b = atomic_load(&q->last_end_us);
    return b > a ? b - a : 0;
}

#endif
