/* e2e_http.c - see e2e_http.h. */
#include "e2e_http.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static char posattnd_path[4096];

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void sb_reserve(sbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL)
        fail_msg("out of memory (%zu bytes)", cap);
    b->p = p;
    b->cap = cap;
}

void sb_put(sbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void sb_puts(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void
sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    sb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_repeat(sbuf *b, const char *s, size_t times)
{
    for (size_t i = 0; i < times; i++)
        sb_puts(b, s);
}

void sb_free(sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

const char *find_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay != '\0'; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return hay;
    return NULL;
}

static void server_dump_log(const server *s)
{
    e2e_server_dump_log(s);
}

void resp_free(resp *r)
{
    sb_free(&r->body);
    sb_free(&r->headers);
    memset(r, 0, sizeof *r);
}

static size_t write_cb(char *p, size_t size, size_t n, void *ud)
{
    sb_put(ud, p, size * n);
    return size * n;
}

/* Headers are kept as "\nname: value\r" lines so a lookup can anchor on '\n'. */
static size_t header_cb(char *p, size_t size, size_t n, void *ud)
{
    sbuf *b = ud;
    if (b->len == 0)
        sb_puts(b, "\n");
    sb_put(b, p, size * n);
    return size * n;
}

/* Copies the value of header `name` (case-insensitive; the last one) into out. */
bool resp_header(const resp *r, const char *name, char *out, size_t cap)
{
    const char *p = r->headers.p, *found = NULL;
    size_t nl = strlen(name);
    if (p == NULL)
        return false;
    for (const char *q = p; (q = strchr(q, '\n')) != NULL; q++)
        if (strncasecmp(q + 1, name, nl) == 0 && q[1 + nl] == ':')
            found = q + 1 + nl + 1;
    if (found == NULL)
        return false;
    while (*found == ' ')
        found++;
    size_t len = strcspn(found, "\r\n");
    if (len >= cap)
        len = cap - 1;
    memcpy(out, found, len);
    out[len] = '\0';
    return true;
}

/* Sets up one request. body may be NULL (GET) or a body to POST (not copied:
 * it must outlive the transfer). hdrs: NULL-terminated extra headers. */
void xfer_init(xfer *x, const char *method, const char *url, const char *body, size_t len,
               const char *const *hdrs, long timeout_ms)
{
    memset(x, 0, sizeof *x);
    x->e = curl_easy_init();
    assert_non_null(x->e);
    curl_easy_setopt(x->e, CURLOPT_URL, url);
    curl_easy_setopt(x->e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(x->e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(x->e, CURLOPT_WRITEDATA, &x->r.body);
    curl_easy_setopt(x->e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(x->e, CURLOPT_HEADERDATA, &x->r.headers);
    curl_easy_setopt(x->e, CURLOPT_FORBID_REUSE, 1L);
    if (body != NULL) {
        curl_easy_setopt(x->e, CURLOPT_POST, 1L);
        curl_easy_setopt(x->e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(x->e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        x->hdrs = curl_slist_append(x->hdrs, "Content-Type: application/json");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(x->e, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(x->e, CURLOPT_NOBODY, 1L);
    /* No "Expect: 100-continue" unless a test asks for it. */
    bool expect = false;
    for (size_t i = 0; hdrs != NULL && hdrs[i] != NULL; i++) {
        x->hdrs = curl_slist_append(x->hdrs, hdrs[i]);
        if (strncasecmp(hdrs[i], "Expect:", 7) == 0)
            expect = true;
    }
    if (!expect)
        x->hdrs = curl_slist_append(x->hdrs, "Expect:");
    curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, x->hdrs);
    x->t0 = now_s();
}

void xfer_finish(xfer *x, CURLcode rc)
{
    x->r.rc = rc;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &x->r.status);
    x->r.done_at = now_s();
    x->r.seconds = x->r.done_at - x->t0;
}

void xfer_cleanup(xfer *x)
{
    if (x->e != NULL)
        curl_easy_cleanup(x->e);
    curl_slist_free_all(x->hdrs);
    x->e = NULL;
    x->hdrs = NULL;
}

/* One blocking request; *r receives the answer (free with resp_free). */
void http_request(resp *r, const char *method, const char *url, const char *body, size_t len,
                  const char *const *hdrs, long timeout_ms)
{
    xfer x;
    xfer_init(&x, method, url, body, len, hdrs, timeout_ms);
    xfer_finish(&x, curl_easy_perform(x.e));
    *r = x.r;
    xfer_cleanup(&x);
}

void http_do(resp *r, const char *method, const char *url, const char *body, size_t len,
             const char *const *hdrs)
{
    http_request(r, method, url, body, len, hdrs, 30000L);
}

void raw_exchange(stream *st, int port, const char *req, size_t len, double wait_s, bool one_answer)
{
    struct sockaddr_in a = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    double t0 = now_s();
    memset(st, 0, sizeof *st);
    assert_true(fd >= 0);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    (void)!send(fd, req, len, MSG_NOSIGNAL); /* it may answer and close first */
    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        char buf[4096];
        int left_ms = (int)((t0 + wait_s - now_s()) * 1000);
        ssize_t got;
        if (left_ms <= 0)
            break;
        if (poll(&pf, 1, left_ms) <= 0)
            continue;
        got = recv(fd, buf, sizeof buf, 0);
        if (got <= 0) {
            st->closed = true;
            break;
        }
        sb_put(&st->in, buf, (size_t)got);
        const char *eoh = strstr(st->in.p, "\r\n\r\n");
        if (eoh != NULL && st->answer_len == 0) {
            const char *cl = find_nocase(st->in.p, "\r\nContent-Length:");
            if (cl != NULL && cl < eoh)
                st->answer_len = (size_t)(eoh + 4 - st->in.p) + strtoul(cl + 17, NULL, 10);
        }
        if (one_answer && st->answer_len != 0 && st->in.len >= st->answer_len)
            break;
    }
    st->seconds = now_s() - t0;
    close(fd);
}

long raw_answer(const stream *st, const char **body, size_t *body_len)
{
    long status = 0;
    if (st->in.p == NULL || sscanf(st->in.p, "HTTP/1.%*d %ld", &status) != 1)
        return 0;
    if (body != NULL) {
        const char *eoh = strstr(st->in.p, "\r\n\r\n");
        *body = NULL;
        *body_len = 0;
        if (eoh != NULL) {
            size_t head = (size_t)(eoh + 4 - st->in.p);
            *body = eoh + 4;
            *body_len = st->answer_len != 0 && st->answer_len < st->in.len ? st->answer_len - head
                                                                           : st->in.len - head;
        }
    }
    return status;
}

/* Runs n transfers concurrently until all are done or timeout_s passes.
 * tick (may be NULL) is called about every 10 ms with the elapsed time. */
void multi_run(xfer *xs, int n, double timeout_s, void (*tick)(void *ctx, double t), void *ctx)
{
    CURLM *m = curl_multi_init();
    int running = 0;
    double t0 = now_s();
    assert_non_null(m);
    for (int i = 0; i < n; i++)
        curl_multi_add_handle(m, xs[i].e);
    do {
        CURLMsg *msg;
        int left;
        curl_multi_perform(m, &running);
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            for (int i = 0; i < n; i++)
                if (xs[i].e == msg->easy_handle)
                    xfer_finish(&xs[i], msg->data.result);
        }
        if (tick != NULL)
            tick(ctx, now_s() - t0);
        if (running > 0)
            curl_multi_poll(m, NULL, 0, 10, NULL);
    } while (running > 0 && now_s() - t0 < timeout_s);
    for (int i = 0; i < n; i++)
        curl_multi_remove_handle(m, xs[i].e);
    curl_multi_cleanup(m);
    assert_int_equal(running, 0); /* else the overall timeout passed */
}

/* Starts posattnd on 127.0.0.1, port 0, with extra flags (NULL-terminated),
 * and waits for /healthz. */
void server_start(server *s, const char *const *flags)
{
    char health[96];
    double deadline;
    e2e_server_start(s, posattnd_path, flags);
    snprintf(health, sizeof health, "%s/healthz", s->url);
    deadline = now_s() + 10.0;
    for (;;) {
        resp r;
        http_do(&r, "GET", health, NULL, 0, NULL);
        long st = r.status;
        resp_free(&r);
        if (st == 200)
            break;
        if (now_s() > deadline) {
            server_dump_log(s);
            fail_msg("posattnd /healthz did not answer 200 within 10 s");
        }
        sleep_s(0.02);
    }
}

void server_stop_ok(server *s, bool already_signalled)
{
    e2e_server_stop_ok(s, already_signalled);
}

void server_kill(server *s)
{
    e2e_server_kill(s);
}

int own_setup(void **state)
{
    server *s = calloc(1, sizeof *s);
    s->pid = -1;
    s->out_fd = -1;
    *state = s;
    return 0;
}

int own_teardown(void **state)
{
    server_kill(*state);
    free(*state);
    return 0;
}

void url_of(char *out, size_t cap, const server *s, const char *path)
{
    snprintf(out, cap, "%s%s", s->url, path);
}

void get(resp *r, const server *s, const char *path, const char *const *hdrs)
{
    char url[256];
    url_of(url, sizeof url, s, path);
    http_do(r, "GET", url, NULL, 0, hdrs);
    if (r->rc != CURLE_OK)
        fail_msg("GET %s: %s", path, curl_easy_strerror(r->rc));
}

void post(resp *r, const server *s, const char *path, const char *body, size_t len,
          const char *const *hdrs)
{
    char url[256];
    url_of(url, sizeof url, s, path);
    http_do(r, "POST", url, body, len, hdrs);
    if (r->rc != CURLE_OK)
        fail_msg("POST %s: %s", path, curl_easy_strerror(r->rc));
}

cJSON *parse_json(const resp *r)
{
    cJSON *j = cJSON_ParseWithLength(r->body.p ? r->body.p : "", r->body.len);
    if (j == NULL)
        fail_msg("answer (HTTP %ld) is not JSON: %.300s", r->status, r->body.p ? r->body.p : "");
    return j;
}

/* Asserts an error answer: HTTP status, error.code, and (if want_field) that
 * error.field contains want_field. Returns nothing; frees nothing. */
void check_error(const resp *r, long status, const char *code, const char *want_field)
{
    cJSON *j, *e;
    const char *got_code, *field, *msg;
    if (r->status != status)
        fail_msg("HTTP %ld, expected %ld: %.400s", r->status, status, r->body.p ? r->body.p : "");
    j = parse_json(r);
    e = cJSON_GetObjectItemCaseSensitive(j, "error");
    assert_non_null(e);
    got_code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
    msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
    field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "field"));
    assert_non_null(got_code);
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);
    if (strcmp(got_code, code) != 0)
        fail_msg("error.code %s, expected %s (%s)", got_code, code, msg);
    if (want_field != NULL && (field == NULL || strstr(field, want_field) == NULL))
        fail_msg("error.field '%s' does not name '%s' (%s)", field ? field : "(none)", want_field,
                 msg);
    cJSON_Delete(j);
}

/* Sums the samples of `name` whose labels contain every "k=\"v\"" in labels. */
double metric_sum(const char *text, const char *name, const char *const *labels)
{
    double sum = 0;
    size_t nl = strlen(name);
    for (const char *line = text; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, name, nl) != 0 || (line[nl] != '{' && line[nl] != ' '))
            continue;
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        if (len >= sizeof buf)
            continue;
        memcpy(buf, line, len);
        buf[len] = '\0';
        bool ok = true;
        for (size_t i = 0; labels != NULL && labels[i] != NULL; i++)
            if (strstr(buf, labels[i]) == NULL)
                ok = false;
        if (!ok)
            continue;
        const char *val = strrchr(buf, ' ');
        if (val != NULL)
            sum += strtod(val + 1, NULL);
    }
    return sum;
}

char *get_metrics(const server *s)
{
    resp r;
    char type[128];
    get(&r, s, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", type, sizeof type));
    assert_non_null(strstr(type, "text/plain"));
    char *text = r.body.p;
    r.body.p = NULL;
    resp_free(&r);
    return text;
}

/* $POSATTND, else posattnd in this binary's build folder (<BUILD>/tests/..),
 * else build/posattnd. */
static void find_binary(const char *argv0)
{
    const char *env = getenv("POSATTND");
    const char *slash = strrchr(argv0, '/');
    if (env != NULL && env[0] != '\0')
        snprintf(posattnd_path, sizeof posattnd_path, "%s", env);
    else if (slash != NULL)
        snprintf(posattnd_path, sizeof posattnd_path, "%.*s/../posattnd", (int)(slash - argv0),
                 argv0);
    else
        snprintf(posattnd_path, sizeof posattnd_path, "build/posattnd");
}

const char *e2e_posattnd_path(void)
{
    return posattnd_path;
}

int e2e_http_init(const char *argv0, const char *name)
{
    const uint32_t one = 1;
    if (*(const unsigned char *)&one != 1) {
        fprintf(stderr, "%s: the b64 checks assume a little-endian machine\n", name);
        return 1;
    }
    find_binary(argv0);
    if (access(posattnd_path, X_OK) != 0) {
        fprintf(stderr, "%s: %s is not an executable (build it, or set POSATTND)\n", name,
                posattnd_path);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}
