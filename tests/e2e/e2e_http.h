/* e2e_http.h - the C end-to-end tests' one HTTP harness: a growable string,
 * a libcurl client (blocking and concurrent requests), raw requests on a
 * socket, posattnd started and stopped through tests/e2e_server.c, JSON
 * error checks and /metrics sums. Linked into tests/e2e/test_e2e_*.c
 * (attention cases are in tests/e2e/e2e_cases.h) and tests/e2e/test_badinput.c
 * (its table's runner, tests/e2e/badinput_table.c).
 *
 * Every function fails the running cmocka test on an unexpected error.
 * Buffers and answers belong to the caller (sb_free, resp_free).
 */
#ifndef E2E_HTTP_H
#define E2E_HTTP_H

#include "e2e_server.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <stdbool.h>
#include <stddef.h>

/* A growable string; {0} is empty. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

/* Room for extra more bytes and the NUL. */
void sb_reserve(sbuf *b, size_t extra);
void sb_put(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void sb_printf(sbuf *b, const char *fmt, ...);
/* s, times times over. */
void sb_repeat(sbuf *b, const char *s, size_t times);
void sb_free(sbuf *b);
/* strstr ignoring case (strcasestr is a GNU extension). */
const char *find_nocase(const char *hay, const char *needle);

/* Monotonic seconds; a sleep that resumes after signals. */
double now_s(void);
void sleep_s(double s);

typedef e2e_server server; /* tests/e2e_server.c */

/* An answer: status, curl's result, body and headers, timings. */
typedef struct resp {
    long status;
    CURLcode rc;
    sbuf body;
    sbuf headers;
    double seconds;
    double done_at; /* now_s() when the transfer finished */
} resp;

void resp_free(resp *r);
/* The last value of header `name` (case-insensitive) into out; false if absent. */
bool resp_header(const resp *r, const char *name, char *out, size_t cap);

/* One transfer, for multi_run or for options a test sets itself. */
typedef struct xfer {
    CURL *e;
    struct curl_slist *hdrs;
    resp r;
    double t0;
} xfer;

/* body (NULL for none) must outlive the transfer; hdrs is NULL-terminated. */
void xfer_init(xfer *x, const char *method, const char *url, const char *body, size_t len,
               const char *const *hdrs, long timeout_ms);
void xfer_finish(xfer *x, CURLcode rc);
void xfer_cleanup(xfer *x);
/* One blocking request; *r receives the answer (free with resp_free), r->rc
 * says whether there was one. http_do allows 30 s. */
void http_request(resp *r, const char *method, const char *url, const char *body, size_t len,
                  const char *const *hdrs, long timeout_ms);
void http_do(resp *r, const char *method, const char *url, const char *body, size_t len,
             const char *const *hdrs);
/* n transfers at once; tick (may be NULL) runs about every 10 ms. */
void multi_run(xfer *xs, int n, double timeout_s, void (*tick)(void *ctx, double t), void *ctx);

/* posattnd (found by e2e_http_init) with extra flags, once /healthz is 200. */
void server_start(server *s, const char *const *flags);
void server_stop_ok(server *s, bool already_signalled);
void server_kill(server *s);
/* A cmocka setup and teardown for tests that start their own server: *state
 * is a server not started yet; own_teardown kills one a failed test left
 * running, and frees it. */
int own_setup(void **state);
int own_teardown(void **state);

/* Requests to a started server; a transport error fails the test. */
void url_of(char *out, size_t cap, const server *s, const char *path);
void get(resp *r, const server *s, const char *path, const char *const *hdrs);
void post(resp *r, const server *s, const char *path, const char *body, size_t len,
          const char *const *hdrs);
/* Everything the server sent on one raw connection (free in with sb_free). */
typedef struct stream {
    sbuf in;
    bool closed;       /* it closed the connection (else wait_s passed) */
    double seconds;    /* from connect to the end */
    size_t answer_len; /* the first answer's bytes, head and body, when it has
                        * a Content-Length (else 0) */
} stream;

/* Sends len bytes of req on a fresh connection to 127.0.0.1:port (the
 * server may answer and close before all is sent) and reads until it closes
 * or wait_s passes; with one_answer, also until the first answer is whole. */
void raw_exchange(stream *st, int port, const char *req, size_t len, double wait_s,
                  bool one_answer);
/* The first answer's status (0: none) and, unless body is NULL, its body:
 * up to its Content-Length, or all that came (NULL when the head is cut). */
long raw_answer(const stream *st, const char **body, size_t *body_len);

/* The body as JSON (free with cJSON_Delete); not JSON fails the test. */
cJSON *parse_json(const resp *r);
/* An error answer: HTTP status, error.code and (unless NULL) error.field. */
void check_error(const resp *r, long status, const char *code, const char *want_field);

/* /metrics as text (free()), and the sum of one metric's matching samples. */
char *get_metrics(const server *s);
double metric_sum(const char *text, const char *name, const char *const *labels);

/* For main: checks the machine is little-endian, finds posattnd ($POSATTND,
 * else beside the test's build folder), ignores SIGPIPE and initialises
 * libcurl (the caller ends with curl_global_cleanup). Returns 0, or 1 after
 * printing why the test cannot run; name prefixes that message. */
int e2e_http_init(const char *argv0, const char *name);
/* The posattnd e2e_http_init found. */
const char *e2e_posattnd_path(void);

#endif
