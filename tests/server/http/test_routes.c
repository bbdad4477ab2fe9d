/* test_routes.c - server/http/routes.c: which route a method and path name, the
 * path parameters of the protocol routes ({name}, {version}: the v2 models),
 * and the table's own consistency: its endpoints, its protocol rows, and how
 * each may be used. */
#include "api/api.h"
#include "http/routes.h"
#include "testutil.h"
#include "v2/v2.h"

#include <stdio.h>
#include <string.h>

static char version[32];

/* model gets the route's model name (cut to 31 bytes), version[] its version. */
static srv_route find(const char *url, const char *method, bool *ok, char *model)
{
    srv_route_params m;
    strcpy(m.name, "untouched");
    strcpy(m.version, "untouched");
    srv_route r = srv_route_find(url, method, ok, &m);
    snprintf(model, 32, "%.31s", m.name);
    snprintf(version, sizeof version, "%s", m.version);
    return r;
}

/* The v2 operation of the route url names, -1 when it is no v2 route. */
static int v2op(const char *url, const char *method, bool *ok, char *model)
{
    srv_route r = find(url, method, ok, model);
    return srv_routes[r].proto == &srv_v2_protocol ? srv_routes[r].op : -1;
}

static void test_exact_paths(void **state)
{
    (void)state;
    bool ok;
    char model[32];
    for (int i = SRV_ROUTE_NOT_FOUND + 1; srv_routes[i].path != NULL; i++) {
        const srv_route_def *d = &srv_routes[i];
        /* The first row of the path: where another method is refused. */
        int first = i;
        while (first > SRV_ROUTE_NOT_FOUND + 1 && strcmp(srv_routes[first - 1].path, d->path) == 0)
            first--;
        if (srv_route_has_params(i))
            continue; /* their paths hold a {name} */
        assert_int_equal(find(d->path, d->method, &ok, model), i);
        assert_true(ok);
        assert_string_equal(model, ""); /* no parameters */
        /* HEAD answers where GET does; other methods are refused. */
        if (strcmp(d->method, "GET") == 0) {
            assert_int_equal(find(d->path, "HEAD", &ok, model), i);
            assert_true(ok);
        }
        assert_int_equal(find(d->path, "DELETE", &ok, model), first);
        assert_false(ok);
    }
}

/* One path, several methods (/v1/sessions, /v1/sessions/{id}): the row
 * whose method matches, else the first row of the path (405) with every
 * method in Allow; {id} is a path parameter. */
static void test_methods_of_a_path(void **state)
{
    (void)state;
    bool ok;
    srv_route_params p;
    char allow[64];
    assert_int_equal(srv_route_find("/v1/sessions", "GET", &ok, &p), SRV_ROUTE_SESSIONS);
    assert_true(ok);
    assert_int_equal(srv_route_find("/v1/sessions", "HEAD", &ok, &p), SRV_ROUTE_SESSIONS);
    assert_true(ok);
    assert_int_equal(srv_route_find("/v1/sessions", "POST", &ok, &p), SRV_ROUTE_SESSIONS_CREATE);
    assert_true(ok);
    assert_int_equal(srv_route_find("/v1/sessions", "PUT", &ok, &p), SRV_ROUTE_SESSIONS);
    assert_false(ok);
    assert_string_equal(srv_route_allow(SRV_ROUTE_SESSIONS, allow, sizeof allow), "GET, POST");
    assert_int_equal(srv_route_find("/v1/sessions/abc", "GET", &ok, &p), SRV_ROUTE_SESSION);
    assert_true(ok);
    assert_string_equal(p.id, "abc");
    assert_string_equal(p.name, "");
    assert_int_equal(srv_route_find("/v1/sessions/abc", "DELETE", &ok, &p),
                     SRV_ROUTE_SESSION_DELETE);
    assert_true(ok);
    assert_string_equal(p.id, "abc");
    assert_int_equal(srv_route_find("/v1/sessions/abc", "POST", &ok, &p), SRV_ROUTE_SESSION);
    assert_false(ok);
    assert_string_equal(srv_route_allow(SRV_ROUTE_SESSION, allow, sizeof allow), "GET, DELETE");
    assert_int_equal(srv_route_find("/v1/sessions/abc/append", "POST", &ok, &p),
                     SRV_ROUTE_SESSION_APPEND);
    assert_true(ok);
    assert_string_equal(p.id, "abc");
    assert_int_equal(srv_route_find("/v1/sessions/abc/fork", "GET", &ok, &p),
                     SRV_ROUTE_SESSION_FORK);
    assert_false(ok);
    assert_string_equal(srv_route_allow(SRV_ROUTE_SESSION_FORK, allow, sizeof allow), "POST");
    assert_int_equal(srv_route_find("/v1/sessions/", "GET", &ok, &p), SRV_ROUTE_NOT_FOUND);
    assert_int_equal(srv_route_find("/v1/sessions/a/b", "GET", &ok, &p), SRV_ROUTE_NOT_FOUND);
    /* An id longer than its buffer is cut. */
    char url[160];
    snprintf(url, sizeof url, "/v1/sessions/%0100d", 7);
    assert_int_equal(srv_route_find(url, "GET", &ok, &p), SRV_ROUTE_SESSION);
    assert_int_equal(strlen(p.id), sizeof p.id - 1);
}

static void test_not_found(void **state)
{
    (void)state;
    static const char *const urls[] = {"/v1/attention/",
                                       "/v1",
                                       "/v1/Attention",
                                       "/healthz/x",
                                       "",
                                       "/v2//",
                                       "/v2/models",
                                       "/v2/models/",
                                       "/v2/models//infer",
                                       "/v2/models/m/versions",
                                       "/v2/models/m/versions/",
                                       "/v2/models/m/versions//infer",
                                       "/v2/models/m/versions/1/",
                                       "/v2/models/m/infer/x",
                                       "/v2/models/m/stats/x",
                                       "/v2/models/stats/x",
                                       "/webx"};
    bool ok;
    char model[32];
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        if (find(urls[i], "GET", &ok, model) != SRV_ROUTE_NOT_FOUND)
            fail_msg("%s found a route", urls[i]);
        assert_true(ok);
    }
}

static void test_web_prefix(void **state)
{
    (void)state;
    bool ok;
    char model[32];
    assert_int_equal(find("/web/app.js", "GET", &ok, model), SRV_ROUTE_WEB);
    assert_int_equal(find("/web/", "GET", &ok, model), SRV_ROUTE_WEB);
    assert_int_equal(find("/", "GET", &ok, model), SRV_ROUTE_PAGE);
    assert_int_equal(find("/", "POST", &ok, model), SRV_ROUTE_PAGE);
    assert_false(ok);
}

static void test_v2_models(void **state)
{
    (void)state;
    bool ok;
    char model[32];
    assert_int_equal(v2op("/v2/models/attention-rope", "GET", &ok, model), SRV_V2_OP_MODEL);
    assert_true(ok);
    assert_string_equal(model, "attention-rope");
    assert_int_equal(v2op("/v2/models/attention-t5/ready", "GET", &ok, model),
                     SRV_V2_OP_MODEL_READY);
    assert_string_equal(model, "attention-t5");
    assert_int_equal(v2op("/v2/models/x/infer", "POST", &ok, model), SRV_V2_OP_INFER);
    assert_true(ok);
    assert_string_equal(model, "x");
    assert_int_equal(v2op("/v2/models/x/infer", "GET", &ok, model), SRV_V2_OP_INFER);
    assert_false(ok);
    /* A name longer than the buffer is cut, never overflows it. */
    assert_int_equal(
        v2op("/v2/models/0123456789012345678901234567890123456789/infer", "POST", &ok, model),
        SRV_V2_OP_INFER);
    assert_int_equal(strlen(model), 31);
    assert_int_equal(v2op("/v2", "GET", &ok, model), SRV_V2_OP_SERVER);
    assert_int_equal(v2op("/v2/", "GET", &ok, model), SRV_V2_OP_SERVER);
    assert_true(ok);
    /* The versioned forms name the same routes, with the version. */
    assert_int_equal(v2op("/v2/models/attention-rope", "GET", &ok, model), SRV_V2_OP_MODEL);
    assert_string_equal(version, "");
    assert_int_equal(v2op("/v2/models/attention-rope/versions/1", "GET", &ok, model),
                     SRV_V2_OP_MODEL);
    assert_string_equal(model, "attention-rope");
    assert_string_equal(version, "1");
    assert_int_equal(v2op("/v2/models/a/versions/12/ready", "GET", &ok, model),
                     SRV_V2_OP_MODEL_READY);
    assert_string_equal(model, "a");
    assert_string_equal(version, "12");
    assert_int_equal(v2op("/v2/models/a/versions/x/infer", "POST", &ok, model), SRV_V2_OP_INFER);
    assert_string_equal(version, "x");
    assert_int_equal(v2op("/v2/models/a/stats", "GET", &ok, model), SRV_V2_OP_MODEL_STATS);
    assert_string_equal(version, "");
    assert_int_equal(v2op("/v2/models/a/versions/1/stats", "GET", &ok, model),
                     SRV_V2_OP_MODEL_STATS);
    assert_string_equal(version, "1");
    /* Every model's statistics is not a model named "stats". */
    assert_int_equal(v2op("/v2/models/stats", "GET", &ok, model), SRV_V2_OP_STATS);
    assert_string_equal(model, "");
    assert_int_equal(v2op("/v2/models/stats/ready", "GET", &ok, model), SRV_V2_OP_MODEL_READY);
    assert_string_equal(model, "stats");
    /* A version longer than its buffer is cut too. */
    assert_int_equal(
        v2op("/v2/models/a/versions/0123456789012345678901234567890123456789", "GET", &ok, model),
        SRV_V2_OP_MODEL);
    assert_int_equal(strlen(version), 31);
    /* Errors of any path under /v2 take the protocol's shape. */
    assert_true(srv_url_protocol("/v2") == &srv_v2_protocol &&
                srv_url_protocol("/v2/x") == &srv_v2_protocol && srv_url_protocol("/v2x") == NULL &&
                srv_url_protocol("/v1/attention") == NULL);
    assert_true(srv_route_has_params(find("/v2/models/a/stats", "GET", &ok, model)) &&
                !srv_route_has_params(find("/v2/models/stats", "GET", &ok, model)) &&
                !srv_route_has_params(find("/v2", "GET", &ok, model)) &&
                !srv_route_has_params(SRV_ROUTE_ATTENTION));
}

/* Every route has a path, a method and a label; the API routes are the
 * /v1 and /v2 routes other than the health probes. */
static void test_table(void **state)
{
    (void)state;
    for (int i = SRV_ROUTE_NOT_FOUND + 1; srv_routes[i].path != NULL; i++) {
        const srv_route_def *d = &srv_routes[i];
        /* answered by at most one of an endpoint and a protocol, and a
         * protocol's row by the protocol's prefix */
        assert_false(d->ep != NULL && d->proto != NULL);
        if (d->proto != NULL)
            assert_true(srv_url_protocol(d->path) == d->proto);
        assert_non_null(d->label);
        assert_true(strcmp(d->method, "GET") == 0 || strcmp(d->method, "POST") == 0 ||
                    strcmp(d->method, "DELETE") == 0);
        bool versioned = strncmp(d->path, "/v1/", 4) == 0 || strncmp(d->path, "/v2", 3) == 0;
        bool probe = strstr(d->path, "health") != NULL || strstr(d->path, "/ready") != NULL;
        assert_true(d->api == (versioned && !probe));
    }
    assert_null(srv_routes[SRV_ROUTE_NOT_FOUND].path);
    assert_null(srv_routes[SRV_ROUTE_NOT_FOUND].proto);
}

/* The dispatch table: every /v1 route, and only those, names the api/
 * endpoint that answers it; a POST route's endpoint takes a body (a job),
 * a GET route's answers at once, and each refuses the other use with a 404
 * (the HTTP layer never mixes them up, but the API must not trust it to). */
static void test_endpoints(void **state)
{
    (void)state;
    const srv_limits lim = {.max_batch_items = 4,
                            .max_tensor_elements = 1024,
                            .max_request_memory = 1 << 20,
                            .parallel_parts = 1};
    for (int i = SRV_ROUTE_NOT_FOUND + 1; srv_routes[i].path != NULL; i++) {
        const srv_route_def *d = &srv_routes[i];
        srv_reply r;
        srv_job *job = (srv_job *)&r; /* must be set to NULL on refusal */
        assert_true((d->ep != NULL) == (strncmp(d->path, "/v1/", 4) == 0));
        if (d->ep == NULL)
            continue;
        assert_true(srv_endpoint_takes_body(d->ep) == (strcmp(d->method, "POST") == 0));
        memset(&r, 0, sizeof r);
        if (strncmp(d->path, "/v1/sessions", 12) == 0) {
            /* A server without a session cache (lim has none): 501. */
            if (srv_endpoint_takes_body(d->ep)) {
                assert_false(srv_job_prepare(d->ep, "{}", 2, &lim, &job, &r));
                assert_null(job);
            } else {
                srv_endpoint_answer(d->ep, &lim, &r);
            }
            assert_int_equal(r.http_status, 501);
            srv_reply_free(&r);
            continue;
        }
        if (srv_endpoint_takes_body(d->ep)) {
            srv_endpoint_answer(d->ep, &lim, &r);
            assert_int_equal(r.http_status, 404);
            assert_int_equal(r.error, SRV_ERR_NOT_FOUND);
        } else {
            assert_false(srv_job_prepare(d->ep, "{}", 2, &lim, &job, &r));
            assert_null(job);
            assert_int_equal(r.http_status, 404);
            srv_reply_free(&r);
            memset(&r, 0, sizeof r);
            srv_endpoint_answer(d->ep, &lim, &r);
            assert_int_equal(r.http_status, 200);
            assert_non_null(r.body);
            assert_true(r.body_len > 2 && r.body[0] == '{');
        }
        srv_reply_free(&r);
    }
    srv_reply r;
    srv_job *job = NULL;
    memset(&r, 0, sizeof r);
    assert_false(srv_job_prepare(NULL, "{}", 2, &lim, &job, &r));
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_paths),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_web_prefix),
        cmocka_unit_test(test_v2_models),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_methods_of_a_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
