/* http.c - see http.h. The daemon and a request's life; the answer is
 * built in respond.c and the job run by jobs.c (request.h).
 *
 * One request's life: the first handler call routes it and refuses what can
 * be refused before the body arrives (404, 405, 401, 413 by Content-Length);
 * later calls collect the body; the last call parses it into a job
 * (srv_job_prepare), submits the job's tasks to the pool and suspends the
 * connection. When the last task is done, the pool's loop thread renders the
 * answer and resumes the connection, and the handler queues the response.
 */
#include "http/http.h"

#include "http/cors.h"
#include "http/jobs.h"
#include "http/respond.h"
#include "http/request.h"
#include "http/tls.h"
#include "http/web.h"
#include "runtime/keys.h"
#include "runtime/log.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Whether the request carries a key of the set in force (runtime/keys.h,
 * which a reload may replace at any moment: this request sees the old set
 * or the new one); q->key_name then names it for the log, and a refusal is
 * counted by why. */
static bool key_ok(const srv_http *h, struct MHD_Connection *c, request *q, const srv_keys *keys);

static bool authorized(const srv_http *h, struct MHD_Connection *c, request *q)
{
    const srv_keys *keys;
    bool ok;
    if (h->cfg->keys == NULL)
        return true;
    keys = srv_keyring_acquire(h->cfg->keys);
    ok = keys->n == 0 || key_ok(h, c, q, keys);
    srv_keyring_release(h->cfg->keys);
    return ok;
}

static bool key_ok(const srv_http *h, struct MHD_Connection *c, request *q, const srv_keys *keys)
{
    const char *auth = NULL, *prefix = "Bearer ";
    size_t len = 0, np = strlen(prefix);
    int i;
    /* The header's whole length: a NUL inside it ("Bearer KEY\0junk") must
     * not end the comparison early. */
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
                                      strlen(MHD_HTTP_HEADER_AUTHORIZATION), &auth,
                                      &len) != MHD_YES ||
        auth == NULL) {
        srv_metrics_auth_refused(h->metrics, "missing");
        return false;
    }
    /* RFC 9110 sec. 11.1: the scheme is case-insensitive, and one or more
     * spaces follow it. */
    if (len < np || strncasecmp(auth, prefix, np) != 0) {
        srv_metrics_auth_refused(h->metrics, "scheme");
        return false;
    }
    while (np < len && auth[np] == ' ')
        np++;
    i = srv_keys_match(keys, auth + np, len - np);
    if (i < 0) {
        srv_metrics_auth_refused(h->metrics, "key");
        return false;
    }
    srv_keys_name(keys, i, q->key_name, sizeof q->key_name);
    return true;
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
        return http_send_error(q, e, NULL, msg);
    q->refused = true;
    q->refused_error = e;
    snprintf(q->refused_msg, sizeof q->refused_msg, "%s", msg);
    return MHD_YES;
}

/* ------------------------------------------------------------------------- */
/* The path                                                                  */
/* ------------------------------------------------------------------------- */

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* libmicrohttpd's percent-decoding of the path (and of query arguments),
 * except that %00 and %25 stay as they are: a NUL would end the path the
 * handler sees, so "/healthz%00junk" would answer as /healthz and a front
 * proxy's path rules would not mean what they say. Kept escaped, "%00" can
 * only come from an encoded NUL (a '%' of the client's stays "%25"), which
 * first_call refuses; no route has a '%', so neither aliases a route. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    char *out = s;
    (void)cls;
    (void)c;
    for (const char *in = s; *in != '\0';) {
        int hi = in[0] == '%' ? hex_digit(in[1]) : -1, lo = hi >= 0 ? hex_digit(in[2]) : -1;
        int v = hi * 16 + lo;
        if (lo >= 0 && v != 0 && v != '%') {
            *out++ = (char)v;
            in += 3;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
    return (size_t)(out - s);
}

/* ------------------------------------------------------------------------- */
/* Framing (RFC 9112 sec. 6)                                                 */
/* ------------------------------------------------------------------------- */

typedef struct framing {
    int n_cl, n_te;
    const char *cl, *te;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    framing *f = cls;
    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        f->n_cl++;
        f->cl = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->n_te++;
        f->te = value;
    }
    return MHD_YES;
}

/* A request whose body's length is ambiguous: two Content-Length headers
 * (a proxy that reads the last one and posattnd, which would read the
 * first, see different requests), Content-Length beside Transfer-Encoding,
 * or a transfer coding other than chunked. False, with the error, status
 * and message to answer before any body is read; the connection is then
 * closed, since where the next request would start is unknown. A single
 * malformed Content-Length (a sign, a list, past 2^64) is refused by
 * libmicrohttpd itself before this handler runs. */
static bool framing_ok(struct MHD_Connection *c, srv_error *e, char *msg, size_t cap)
{
    framing f = {0, 0, NULL, NULL};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if (f.n_cl > 1) {
        *e = SRV_ERR_INVALID_ARGUMENT;
        snprintf(msg, cap, "Content-Length appears %d times: send it once", f.n_cl);
        return false;
    }
    if (f.n_cl > 0 && f.n_te > 0) {
        *e = SRV_ERR_INVALID_ARGUMENT;
        snprintf(msg, cap, "Content-Length and Transfer-Encoding together: send one of them");
        return false;
    }
    if (f.n_te > 1 || (f.te != NULL && strcasecmp(f.te, "chunked") != 0)) {
        *e = SRV_ERR_NOT_IMPLEMENTED;
        snprintf(msg, cap, "Transfer-Encoding='%.48s'%s is not supported: only chunked",
                 f.te != NULL ? f.te : "", f.n_te > 1 ? " (and more)" : "");
        return false;
    }
    return true;
}

static enum MHD_Result first_call(srv_http *h, struct MHD_Connection *c, const char *url,
                                  const char *method, request *q)
{
    bool method_ok;
    const char *cl;
    char msg[256];
    srv_web_file file;
    srv_error fe;

    q->cors_allow = srv_cors_allow(
        h->cfg, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN));
    q->route = srv_route_find(url, method, &method_ok, &q->params);
    q->shape = srv_url_protocol(url);
    const srv_route_def *d = &srv_routes[q->route];
    if (!framing_ok(c, &fe, msg, sizeof msg)) {
        q->close = true;
        return http_send_error(q, fe, NULL, msg);
    }
    if (strstr(url, "%00") != NULL) {
        snprintf(msg, sizeof msg, "the path %.64s holds %%00 (a NUL byte): no path has one", url);
        return refuse(q, c, SRV_ERR_INVALID_ARGUMENT, msg);
    }
    if (q->route == SRV_ROUTE_NOT_FOUND) {
        snprintf(msg, sizeof msg, "no route %.64s %.64s", method, url);
        return refuse(q, c, SRV_ERR_NOT_FOUND, msg);
    }
    /* A browser's preflight (Fetch standard, CORS-preflight request): an
     * OPTIONS naming the method to come, from an allowed origin. It
     * carries no credentials, so the key is not asked for; the request
     * that follows is checked as any other. */
    if (q->cors_allow != NULL && strcmp(method, "OPTIONS") == 0 &&
        q->route != SRV_ROUTE_NOT_FOUND &&
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method") != NULL) {
        q->preflight = true; /* answered once the request is in: the connection stays open */
        http_set_text(&q->reply, 204, "text/plain", "");
        return MHD_YES;
    }
    if (!method_ok) {
        char allow[64];
        snprintf(msg, sizeof msg, "%.64s takes %s, not %.16s", url,
                 srv_route_allow(q->route, allow, sizeof allow), method);
        return refuse(q, c, SRV_ERR_METHOD_NOT_ALLOWED, msg);
    }
    if (q->route == SRV_ROUTE_WEB && (strlen(url) >= sizeof q->path || !srv_web_find(url, &file))) {
        snprintf(msg, sizeof msg, "no file %.64s in the web page", url);
        return refuse(q, c, SRV_ERR_NOT_FOUND, msg);
    }
    if (srv_routes[q->route].api && !authorized(h, c, q))
        return refuse(q, c, SRV_ERR_UNAUTHORIZED,
                      "a valid API key is required: Authorization: Bearer <key>");
    srv_protocol_ctx pc;
    if (d->proto != NULL)
        http_protocol_ctx(q, &pc);
    if (d->proto != NULL && srv_route_has_params(q->route) &&
        !d->proto->check(d->op, &pc, msg, sizeof msg)) {
        if (msg[0] == '\0') { /* a bare 404: no body */
            http_set_text(&q->reply, 404, "text/plain", "");
            return http_send_reply(q);
        }
        return refuse(q, c, SRV_ERR_NOT_FOUND, msg);
    }
    q->framing = -1;
    if (d->proto != NULL && d->proto->framing_header != NULL &&
        (cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, d->proto->framing_header)) != NULL) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (cl[0] < '0' || cl[0] > '9' || *end != '\0' || n > (unsigned long long)INT64_MAX) {
            snprintf(msg, sizeof msg, "%s='%.32s' is not a byte count", d->proto->framing_header,
                     cl);
            return refuse(q, c, SRV_ERR_INVALID_ARGUMENT, msg);
        }
        q->framing = (int64_t)n;
        q->body_off = (16 - (size_t)(n % 16)) % 16;
    }
    cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (n > h->cfg->max_body_bytes) {
            snprintf(msg, sizeof msg,
                     "body of %llu bytes exceeds the limit of %zu bytes " SRV_LIMIT_BODY, n,
                     h->cfg->max_body_bytes);
            /* Reading and dropping a body is worth it only while it is small:
             * a huge one is refused at once and the connection closed. */
            if (n - h->cfg->max_body_bytes > DROP_BODY_LIMIT)
                return http_send_error(q, SRV_ERR_PAYLOAD_TOO_LARGE, NULL, msg);
            return refuse(q, c, SRV_ERR_PAYLOAD_TOO_LARGE, msg);
        }
    }
    return MHD_YES;
}

/* snprintf(dst, cap, "%s", src) without printf's per-call cost (a few
 * hundred instructions, twice a request): src cut to cap - 1 bytes. */
static void copy_cut(char *dst, size_t cap, const char *src)
{
    const size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
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
        copy_cut(q->method, sizeof q->method, method);
        copy_cut(q->path, sizeof q->path, url);
        atomic_init(&q->remaining, 0);
        q->framing = -1; /* no framing header */
        atomic_init(&q->max_queue_us, 0);
        atomic_init(&q->sum_compute_us, 0);
        atomic_init(&q->first_start_us, UINT64_MAX);
        atomic_init(&q->last_end_us, 0);
        *con_cls = q;
        atomic_fetch_add(&h->open, 1);
        {
            const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
            q->conn_deadline = ci != NULL ? ci->socket_context : NULL;
            srv_conn_mark_served(q->conn_deadline);
        }
        srv_conn_set_phase(q->conn_deadline, SRV_CONN_BODY, q->start_ns);
        return first_call(h, c, url, method, q);
    }
    if (q->reply_ready)
        return http_send_reply(q);
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
        if (q->refused || q->preflight)
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
        return http_send_error(q, q->refused_error, NULL, q->refused_msg);
    if (q->preflight)
        return http_send_reply(q);
    if (q->body_too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "body exceeds the limit of %zu bytes " SRV_LIMIT_BODY,
                 h->cfg->max_body_bytes);
        return http_send_error(q, SRV_ERR_PAYLOAD_TOO_LARGE, NULL, msg);
    }
    if (srv_routes[q->route].method[0] == 'P')
        return http_start_job(q);
    return http_serve_simple(q);
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
    /* Which key authorised it, by its line in the key file ("flag" for
     * --api-key), never the key itself. */
    const char *key = q->key_name[0] != '\0' ? q->key_name : "-";
    if (cfg->log_format == SRV_LOG_JSON)
        fprintf(stderr,
                "{\"ts\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
                "\"bytes_in\":%zu,\"bytes_out\":%zu,\"items\":%zu,\"queue_ms\":%.3f,"
                "\"compute_ms\":%.3f,\"cpu_ms\":%.3f,\"duration_ms\":%.3f,\"key\":\"%s\"}\n",
                ts, q->method, srv_routes[q->route].path ? srv_routes[q->route].path : "-",
                q->status, q->body_len, q->bytes_out, q->ntasks,
                (double)atomic_load(&q->max_queue_us) / 1e3,
                (double)srv_request_compute_us(q) / 1e3,
                (double)atomic_load(&q->sum_compute_us) / 1e3, seconds * 1e3, key);
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
    if (q == NULL)
        return;
    seconds = (double)(srv_now_ns() - q->start_ns) / 1e9;
    /* Ended before the answer was out (libmicrohttpd's idle timeout on a
     * client that reads too slowly, or the client gone): reset, not
     * trickled out, and counted with the sweep's cuts. */
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && srv_conn_abort_send(q->conn_deadline))
        srv_metrics_connections_cut(h->metrics, "send", 1);
    /* On keep-alive the next request's headers are due from now. */
    srv_conn_set_phase(q->conn_deadline, SRV_CONN_HEADERS, srv_now_ns());
    http_record_answer(q);
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
        if (h->tls.cert_pem != NULL && !srv_conn_served(*socket_context)) {
            /* A TLS connection that closed without a request: its handshake
             * failed (an untrusted certificate, an old version, plain HTTP
             * on the port, a TCP probe, the peer gone) or never finished in
             * --request-timeout. */
            const uint64_t open_ns = srv_now_ns() - srv_conn_since(*socket_context);
            const bool late =
                srv_conn_was_cut(*socket_context) ||
                (h->cfg->request_timeout > 0 && (double)open_ns >= h->cfg->request_timeout * 1e9);
            srv_metrics_tls_failed(h->metrics, late ? "timeout" : "failed");
        }
        srv_deadlines_close(h->deadlines, *socket_context);
        *socket_context = NULL;
    }
}

/* On the pool's loop thread, every SWEEP_MS. */
enum { SWEEP_MS = 200 };
static void sweep(void *arg)
{
    srv_http *h = arg;
    size_t cut[SRV_CONN_CUT_PHASES];
    if (srv_deadlines_sweep(h->deadlines, srv_now_ns(), cut) > 0)
        for (int k = 0; k < SRV_CONN_CUT_PHASES; k++)
            if (cut[k] > 0) {
                static const char *const names[] = {"headers", "body", "send"};
                srv_metrics_connections_cut(h->metrics, names[k], cut[k]);
                if (k == SRV_CONN_SEND)
                    srv_log_event(h->cfg->log_format, "warn", "connections_cut",
                                  "%zu connection(s) cut: the client had not read its answer "
                                  "within --request-timeout",
                                  cut[k]);
            }
}

/* libmicrohttpd's own messages, and GnuTLS's that it relays (a failed TLS
 * handshake: "Error: received handshake message out of context.", a port
 * it cannot bind), as posattnd's event lines: with --log-format json every
 * line on stderr stays a JSON object. MHD_USE_ERROR_LOG makes it call this;
 * cls is the config, alive as long as the daemon. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    const srv_config *cfg = cls;
    char msg[1024];
    size_t n;
    vsnprintf(msg, sizeof msg, fmt, ap);
    n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    if (n > 0)
        srv_log_event(cfg->log_format, "warn", "libmicrohttpd", "%s", msg);
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
    h->limits.max_request_gflop = (double)cfg->max_request_gflop;
    h->limits.parallel_parts = cfg->workers;
    h->limits.tensors = cfg->tensor_store;
    h->limits.models = cfg->model_set;
    h->limits.sessions = cfg->kv_cache;
    h->limits.cache_dir = cfg->cache_dir;
    h->limits.machine = cfg->machine;
    h->limits.replica = cfg->replica_id;
    h->limits.cache_root = cfg->cache_shared ? cfg->cache_root : NULL;
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
        srv_log_event(cfg->log_format, "error", "start", "cannot resolve --host %s", cfg->host);
        srv_deadlines_free(h->deadlines);
        free(h);
        return NULL;
    }
    /* HTTPS: the pair is read and checked first (a bad one stops start-up
     * naming the file); libmicrohttpd does the TLS with GnuTLS. */
    struct MHD_OptionItem tls_opts[4] = {{MHD_OPTION_END, 0, NULL}};
    if (cfg->tls_cert[0] != '\0') {
        char msg[512];
        if (!srv_tls_load(cfg->tls_cert, cfg->tls_key, &h->tls, msg, sizeof msg)) {
            srv_log_event(cfg->log_format, "error", "start", "cannot serve HTTPS: %s", msg);
            srv_deadlines_free(h->deadlines);
            free(h);
            return NULL;
        }
        tls_opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls.cert_pem};
        tls_opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls.key_pem};
        tls_opts[2] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                              (void *)(uintptr_t)srv_tls_priorities};
        tls_opts[3] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    }
    /* poll, not epoll (MHD_USE_AUTO's pick on Linux): libmicrohttpd 0.9.75
     * races in MHD_quiesce_daemon with epoll and a thread pool (the main
     * thread's EPOLL_CTL_DEL of the listen socket fails when a worker has
     * just removed it itself, and it panics: "Failed to remove listen FD
     * from epoll set", exit 134 in a drain, about one run in five of
     * test_timeout_504). With poll, quiescing signals the workers instead.
     * Each connection's memory pool (libmicrohttpd's default 32 KiB, its
     * read buffer among it) is 128 KiB: a 33 MB JSON body then arrives in
     * a median 8.4-8.9 ms against 13-17 (9 requests each, q, k, v [1024,
     * 8, 64] as Python's json writes them, to 127.0.0.1); the pool is
     * mmap'd, so the pages a connection never reads into stay virtual. */
    h->daemon = MHD_start_daemon(
        MHD_USE_POLL | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0) |
            (cfg->tls_cert[0] != '\0' ? MHD_USE_TLS : 0),
        (uint16_t)cfg->port, NULL, NULL, handler, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
        (void *)cfg, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
        threads, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, MHD_OPTION_CONNECTION_LIMIT, 4096u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)128 * 1024, MHD_OPTION_NOTIFY_COMPLETED,
        completed, h, MHD_OPTION_NOTIFY_CONNECTION, notify_connection, h,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (h->daemon == NULL) {
        srv_tls_free(&h->tls);
        srv_log_event(cfg->log_format, "error", "start",
                      "cannot listen on %s:%d (is another server using it?): choose another "
                      "port with --port N or POSATTN_PORT=N (0 picks any free port)",
                      cfg->host, cfg->port);
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
    srv_tls_free(&h->tls);
    free(h);
}
