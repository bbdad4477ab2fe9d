/* test_e2e_limits.c - end-to-end tests of posattnd's refusals by key and by
 * size, each on a server of its own started with the flags under test:
 * --api-key (401; probes, metrics and the page stay open), --api-key-file
 * (rotation, refusals counted, keys never logged), and 413 by body size,
 * batch items, tensor elements and request memory, the answer's rendered
 * text included. Each test starts and stops its server (own_setup and
 * own_teardown in tests/e2e/e2e_http.c); load, timeouts and signals are in
 * test_e2e_drain.c, the core routes on one shared server in test_e2e_http.c.
 */
#include "e2e_cases.h"
#include "e2e_http.h"
#include "testutil.h"

#include <cjson/cJSON.h>

#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* Tests with their own server                                               */
/* ------------------------------------------------------------------------- */

/* Asserts that the answer's error message contains part (a 413 names the
 * flag and the variable of the limit it hit). */
static void check_message_has(const resp *r, const char *part)
{
    cJSON *j = parse_json(r);
    const char *m = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message"));
    if (m == NULL || strstr(m, part) == NULL)
        fail_msg("message '%s' does not say '%s'", m ? m : "-", part);
    cJSON_Delete(j);
}

/* 401 with --api-key; 413 by body size, tensor size and request memory. */
static void test_auth_and_limits(void **state)
{
    static const char *const flags[] = {"--api-key",
                                        "e2e-secret",
                                        "--max-body-mb",
                                        "1",
                                        "--max-request-mb",
                                        "1",
                                        "--max-tensor-elements",
                                        "5000",
                                        "--max-batch-items",
                                        "4",
                                        NULL};
    static const char *const good[] = {"Authorization: Bearer e2e-secret", NULL};
    static const char *const wrong[] = {"Authorization: Bearer nope", NULL};
    static const char *const basic[] = {"Authorization: Basic ZTJlLXNlY3JldA==", NULL};
    static const char *const good_expect[] = {"Authorization: Bearer e2e-secret",
                                              "Expect: 100-continue", NULL};
    static const char *const good_chunked[] = {"Authorization: Bearer e2e-secret",
                                               "Transfer-Encoding: chunked", NULL};
    server *s = *state;
    acase c;
    sbuf body = {0}, big = {0};
    resp r;
    char www[64];

    server_start(s, flags);
    acase_init(&c, "auth", PA_SCHEME_ROPE, 3, 3, 2, 2, 8, 8, 13);
    c.causal = true;
    acase_reference(&c);
    sb_request(&body, &c, 1, ENC_FLAT, false);

    post(&r, s, "/v1/attention", body.p, body.len, NULL);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    assert_true(resp_header(&r, "WWW-Authenticate", www, sizeof www));
    assert_non_null(strstr(www, "Bearer"));
    resp_free(&r);
    post(&r, s, "/v1/attention", body.p, body.len, wrong);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    post(&r, s, "/v1/attention", body.p, body.len, basic);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    get(&r, s, "/v1/schemes", NULL);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);

    /* Probes, metrics and the web page stay open. */
    get(&r, s, "/healthz", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, s, "/", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, s, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    /* The right key works. */
    post(&r, s, "/v1/attention", body.p, body.len, good);
    assert_int_equal(r.status, 200);
    {
        cJSON *j = parse_json(&r);
        check_output(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), &c);
        cJSON_Delete(j);
    }
    resp_free(&r);
    get(&r, s, "/v1/schemes", good);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    /* 413: a 2 MB body against --max-body-mb 1, announced by Content-Length
     * (with and without Expect: 100-continue) and streamed in chunks. */
    sb_puts(&big, "{\"inputs\":[],\"pad\":\"");
    while (big.len < 2u << 20)
        sb_puts(&big, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    sb_puts(&big, "\"}");
    post(&r, s, "/v1/attention", big.p, big.len, good_expect);
    check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
    check_message_has(&r, "--max-body-mb or POSATTN_MAX_BODY_MB");
    resp_free(&r);
    post(&r, s, "/v1/attention", big.p, big.len, good);
    check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
    check_message_has(&r, "--max-body-mb or POSATTN_MAX_BODY_MB");
    resp_free(&r);
    post(&r, s, "/v1/attention", big.p, big.len, good_chunked);
    check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
    check_message_has(&r, "--max-body-mb or POSATTN_MAX_BODY_MB");
    resp_free(&r);
    sb_free(&big);

    /* 413: five items against --max-batch-items 4. */
    {
        acase t[5];
        sbuf b = {0};
        for (int i = 0; i < 5; i++)
            acase_init(&t[i], "batch", PA_SCHEME_NONE, 2, 2, 1, 1, 2, 2, 30 + (uint64_t)i);
        sb_request(&b, t, 5, ENC_FLAT, false);
        post(&r, s, "/v1/attention", b.p, b.len, good);
        check_error(&r, 413, "PAYLOAD_TOO_LARGE", "inputs");
        check_message_has(&r, "--max-batch-items or POSATTN_MAX_BATCH_ITEMS");
        resp_free(&r);
        sb_free(&b);
        for (int i = 0; i < 5; i++)
            acase_free(&t[i]);
    }

    /* 413: a tensor over --max-tensor-elements 5000 (q [40,16,8] = 5120). */
    {
        acase t;
        sbuf b = {0};
        acase_init(&t, "elements", PA_SCHEME_NONE, 40, 4, 16, 1, 8, 8, 14);
        sb_request(&b, &t, 1, ENC_B64, false);
        post(&r, s, "/v1/attention", b.p, b.len, good);
        assert_int_equal(r.status, 413); /* the only item failed: its status */
        check_item_error(&r, 0, "PAYLOAD_TOO_LARGE", "inputs[0].q");
        {
            cJSON *j = parse_json(&r);
            const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), "error"),
                "message"));
            if (m == NULL ||
                strstr(m, "--max-tensor-elements or POSATTN_MAX_TENSOR_ELEMENTS") == NULL)
                fail_msg("413 message '%s' does not name its flag", m ? m : "-");
            cJSON_Delete(j);
        }
        resp_free(&r);
        sb_free(&b);
        acase_free(&t);
    }

    /* 413: weights [1, 1024, 1024] need 4 MB against --max-request-mb 1;
     * the message states the figure. */
    {
        acase t;
        sbuf b = {0};
        cJSON *j, *e;
        const char *msg;
        acase_init(&t, "memory", PA_SCHEME_NONE, 1024, 1024, 1, 1, 1, 1, 15);
        t.want_weights = true;
        sb_request(&b, &t, 1, ENC_B64, false);
        post(&r, s, "/v1/attention", b.p, b.len, good);
        check_item_error(&r, 0, "PAYLOAD_TOO_LARGE", "inputs[0]");
        assert_int_equal(r.status, 413);
        j = parse_json(&r);
        e = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), "error");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code")),
                            "PAYLOAD_TOO_LARGE");
        msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
        assert_non_null(msg);
        if (strpbrk(msg, "0123456789") == NULL)
            fail_msg("413 message '%s' states no figure", msg);
        cJSON_Delete(j);
        resp_free(&r);
        sb_free(&b);
        acase_free(&t);
    }

    sb_free(&body);
    acase_free(&c);
    server_stop_ok(s, false);
}

/* The answer's text is part of a request's memory: an encoding whose
 * float32 values fit --max-request-mb 64 but whose JSON text does not is a
 * 413 naming the flag before any work; the same in base64 fits. */
static void test_rendered_memory_counted(void **state)
{
    static const char *const flags[] = {"--max-request-mb", "64", NULL};
    static const char json[] = "{\"scheme\":{\"type\":\"sinusoidal\"},\"length\":2048,"
                               "\"dim\":2048}";
    static const char b64[] = "{\"scheme\":{\"type\":\"sinusoidal\"},\"length\":2048,"
                              "\"dim\":2048,\"output_encoding\":\"b64\"}";
    server *s = *state;
    resp r;
    cJSON *j;
    const char *msg;
    server_start(s, flags);
    /* 4 M floats: 16 MB as float32, about 64 MB as JSON numbers. */
    post(&r, s, "/v1/encode", json, strlen(json), NULL);
    check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
    j = parse_json(&r);
    msg = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "--max-request-mb"));
    cJSON_Delete(j);
    resp_free(&r);
    post(&r, s, "/v1/encode", b64, strlen(b64), NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    server_stop_ok(s, false);
}

/* The value of the metrics sample that starts with series, or -1. */
static double metric(server *s, const char *series)
{
    resp r;
    double v = -1;
    const char *p;
    get(&r, s, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    if ((p = strstr(r.body.p, series)) != NULL)
        v = strtod(p + strlen(series), NULL);
    resp_free(&r);
    return v;
}

/* --api-key-file: both keys of the file work (rotation: the new one added
 * before the old one goes), a key taken out stops working at the next
 * start, refusals are counted by reason, and the access log names the
 * key's line, never the key. */
static void test_api_key_file(void **state)
{
    static const char *const k_old[] = {"Authorization: Bearer old-key-1", NULL};
    static const char *const k_new[] = {"Authorization: Bearer new-key-2", NULL};
    static const char *const k_bad[] = {"Authorization: Bearer old-key", NULL};
    static const char *const basic[] = {"Authorization: Basic b2xkLWtleS0x", NULL};
    server *s = *state;
    char path[64];
    const char *flags[] = {"--api-key-file", path, NULL};
    FILE *f;
    resp r;
    snprintf(path, sizeof path, "/tmp/posattn-keys-%d", (int)getpid());
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("# keys of posattnd\nold-key-1\n\nnew-key-2\n", f);
    fclose(f);
    chmod(path, 0600);
    server_start(s, flags);
    get(&r, s, "/v1/schemes", k_old);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, s, "/v1/schemes", k_new);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, s, "/v1/schemes", k_bad);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    get(&r, s, "/v1/schemes", basic);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    get(&r, s, "/v1/schemes", NULL);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    assert_true(metric(s, "posattn_auth_refused_total{reason=\"key\"} ") == 1);
    assert_true(metric(s, "posattn_auth_refused_total{reason=\"scheme\"} ") == 1);
    assert_true(metric(s, "posattn_auth_refused_total{reason=\"missing\"} ") == 1);
    {
        /* The log: the key's line, never the key. A request's access line
         * is written after its answer is sent: read until the last
         * request's line is there (at most 5 s). */
        char text[65536];
        for (int tries = 0; tries < 100; tries++) {
            FILE *lf = fopen(s->log, "r");
            size_t n;
            assert_non_null(lf);
            n = fread(text, 1, sizeof text - 1, lf);
            text[n] = '\0';
            fclose(lf);
            if (strstr(text, "\"key\":\"line 4\"") != NULL)
                break;
            nanosleep(&(struct timespec){0, 50 * 1000000}, NULL);
        }
        assert_non_null(strstr(text, "\"key\":\"line 2\""));
        assert_non_null(strstr(text, "\"key\":\"line 4\""));
        assert_null(strstr(text, "old-key-1"));
        assert_null(strstr(text, "new-key-2"));
    }
    server_stop_ok(s, false);

    /* The old key taken out; after a restart it no longer works. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("new-key-2\n", f);
    fclose(f);
    server_start(s, flags);
    get(&r, s, "/v1/schemes", k_old);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    get(&r, s, "/v1/schemes", k_new);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    server_stop_ok(s, false);
    unlink(path);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auth_and_limits, own_setup, own_teardown),
        cmocka_unit_test_setup_teardown(test_api_key_file, own_setup, own_teardown),
        cmocka_unit_test_setup_teardown(test_rendered_memory_counted, own_setup, own_teardown),
    };
    int rc;

    (void)argc;
    if (e2e_http_init(argv[0], "test_e2e_limits") != 0)
        return 1;
    rc = cmocka_run_group_tests_name("e2e_limits", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
