/* test_e2e_framing.c - HTTP/1.1 framing (RFC 9112 sec. 6) over raw sockets
 * against a posattnd of its own: requests whose body length is ambiguous
 * (two Content-Length headers, Content-Length beside Transfer-Encoding, a
 * transfer coding other than chunked) get one well-formed error at once,
 * before any body is read, with Connection: close, and the connection is
 * closed, so that nothing sent after them is answered as a request; each
 * refusal is counted in /metrics. A plain chunked request still works. And
 * the API key is compared over the header's whole length. The raw requests
 * go through the e2e harness's raw_exchange (tests/e2e/e2e_http.c).
 */
#include "e2e_http.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static server srv;

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* One refused request: exactly one answer with this status and code, with
 * Connection: close, and the connection closed within a second. */
static void expect_refused(const char *name, const char *req, long status, const char *code)
{
    stream st;
    long got = 0;
    const char *eoh;
    cJSON *body;
    raw_exchange(&st, srv.port, req, strlen(req), 3.0, false);
    if (st.in.p == NULL)
        fail_msg("%s: no answer (closed=%d after %.2f s)", name, st.closed, st.seconds);
    if (count_of(st.in.p, "HTTP/1.") != 1)
        fail_msg("%s: %d answers on one connection: %.300s", name, count_of(st.in.p, "HTTP/1."),
                 st.in.p);
    assert_int_equal(sscanf(st.in.p, "HTTP/1.%*d %ld", &got), 1);
    if (got != status)
        fail_msg("%s: status %ld, want %ld: %.300s", name, got, status, st.in.p);
    eoh = strstr(st.in.p, "\r\n\r\n");
    assert_non_null(eoh);
    if (find_nocase(st.in.p, "\r\nConnection: close\r\n") == NULL ||
        find_nocase(st.in.p, "\r\nConnection: close\r\n") > eoh)
        fail_msg("%s: no Connection: close: %.300s", name, st.in.p);
    if (!st.closed || st.seconds > 1.0)
        fail_msg("%s: connection %s after %.2f s", name, st.closed ? "closed" : "still open",
                 st.seconds);
    body = cJSON_Parse(eoh + 4);
    assert_non_null(body);
    assert_string_equal(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(body, "error"), "code")),
        code);
    cJSON_Delete(body);
    sb_free(&st.in);
}

#define BODY "{\"inputs\":[]}"
#define KEY "framing-key"
#define POST                                                                                       \
    "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"         \
    "Authorization: Bearer " KEY "\r\n"
/* A second request behind the first, which must never be answered. */
#define SMUGGLED "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

/* The status of the one answer to a raw request of len bytes. */
static long raw_status(const char *req, size_t len)
{
    stream st;
    raw_exchange(&st, srv.port, req, len, 2.0, false);
    long got = raw_answer(&st, NULL, NULL);
    sb_free(&st.in);
    return got;
}

/* The key is compared over the header's whole length: a prefix of it is
 * refused. (A NUL inside the header, "Bearer KEY\0junk", never reaches
 * posattnd: libmicrohttpd 0.9.75 ends the value at the NUL while parsing,
 * so the request carries the key and is let in.) */
static void test_key_whole_header(void **state)
{
    (void)state;
    static const char ok[] = "GET /v1/schemes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             "Authorization: Bearer " KEY "\r\n\r\n";
    static const char prefix[] = "GET /v1/schemes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                 "Authorization: Bearer framing\r\n\r\n";
    assert_int_equal(raw_status(ok, sizeof ok - 1), 200);
    assert_int_equal(raw_status(prefix, sizeof prefix - 1), 401);
}

static void test_ambiguous_lengths(void **state)
{
    (void)state;
    expect_refused("two equal Content-Length",
                   POST "Content-Length: 13\r\nContent-Length: 13\r\n\r\n" BODY SMUGGLED, 400,
                   "INVALID_ARGUMENT");
    expect_refused("two different Content-Length",
                   POST "Content-Length: 13\r\nContent-Length: 0\r\n\r\n" BODY SMUGGLED, 400,
                   "INVALID_ARGUMENT");
    expect_refused("Content-Length and chunked",
                   POST "Content-Length: 18\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "d\r\n" BODY "\r\n0\r\n\r\n" SMUGGLED,
                   400, "INVALID_ARGUMENT");
    expect_refused("chunked and Content-Length",
                   POST "Transfer-Encoding: chunked\r\nContent-Length: 18\r\n\r\n"
                        "d\r\n" BODY "\r\n0\r\n\r\n" SMUGGLED,
                   400, "INVALID_ARGUMENT");
}

static void test_transfer_codings(void **state)
{
    (void)state;
    expect_refused("identity", POST "Transfer-Encoding: identity\r\n\r\n" BODY, 501,
                   "NOT_IMPLEMENTED");
    expect_refused("gzip, chunked", POST "Transfer-Encoding: gzip, chunked\r\n\r\n", 501,
                   "NOT_IMPLEMENTED");
    expect_refused("chunked, gzip", POST "Transfer-Encoding: chunked, gzip\r\n\r\n", 501,
                   "NOT_IMPLEMENTED");
    expect_refused("chunked twice",
                   POST "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "0\r\n\r\n",
                   501, "NOT_IMPLEMENTED");
}

/* A well-framed chunked request is answered, and its connection kept. */
static void test_chunked_still_works(void **state)
{
    (void)state;
    stream st;
    const char *req = POST "Transfer-Encoding: chunked\r\n\r\n"
                           "5\r\n{\"inp\r\n8\r\nuts\":[]}\r\n0\r\n\r\n" SMUGGLED;
    raw_exchange(&st, srv.port, req, strlen(req), 1.0, false);
    assert_non_null(st.in.p);
    /* Both answered: the batch (400, empty inputs) and the GET behind it. */
    assert_int_equal(count_of(st.in.p, "HTTP/1.1 "), 2);
    assert_non_null(strstr(st.in.p, "HTTP/1.1 400"));
    assert_non_null(strstr(st.in.p, "HTTP/1.1 200"));
    assert_false(st.closed);
    sb_free(&st.in);
}

/* A malformed Content-Length is refused by libmicrohttpd before posattnd
 * sees the request; the connection is still closed at once. */
static void test_malformed_length_closed(void **state)
{
    (void)state;
    static const char *const reqs[] = {POST "Content-Length: -1\r\n\r\n" BODY SMUGGLED,
                                       POST "Content-Length: 13, 13\r\n\r\n" BODY SMUGGLED,
                                       POST "Content-Length: 99999999999999999999999\r\n\r\n"};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        stream st;
        long got = 0;
        raw_exchange(&st, srv.port, reqs[i], strlen(reqs[i]), 3.0, false);
        assert_non_null(st.in.p);
        assert_int_equal(sscanf(st.in.p, "HTTP/1.%*d %ld", &got), 1);
        assert_true(got == 400 || got == 413);
        assert_true(st.closed && st.seconds < 1.0);
        assert_null(strstr(st.in.p, "HTTP/1.1 200")); /* nothing smuggled answered */
        sb_free(&st.in);
    }
}

/* Counted: the refusals above are in posattn_requests_total by status. */
static void test_refusals_counted(void **state)
{
    (void)state;
    static const char *const s400[] = {"code=\"400\"", NULL};
    static const char *const s501[] = {"code=\"501\"", NULL};
    char *m = get_metrics(&srv);
    assert_true(metric_sum(m, "posattn_requests_total", s501) >= 4);
    assert_true(metric_sum(m, "posattn_requests_total", s400) >= 4);
    free(m);
}

static int setup(void **state)
{
    static const char *const flags[] = {"--workers", "1", "--request-timeout", "5", "--api-key",
                                        KEY,         NULL};
    (void)state;
    srv.pid = -1;
    srv.out_fd = -1;
    server_start(&srv, flags);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    server_stop_ok(&srv, false);
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ambiguous_lengths),   cmocka_unit_test(test_transfer_codings),
        cmocka_unit_test(test_chunked_still_works), cmocka_unit_test(test_malformed_length_closed),
        cmocka_unit_test(test_key_whole_header),    cmocka_unit_test(test_refusals_counted),
    };
    int rc;
    (void)argc;
    if (e2e_http_init(argv[0], "test_e2e_framing") != 0)
        return 1;
    rc = cmocka_run_group_tests_name("e2e_framing", tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
