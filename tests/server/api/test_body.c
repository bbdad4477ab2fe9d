/* test_body.c - server/api/body.c: the one reader of request bodies
 * (api/protocol.h's api_body_read). Tensor arrays lifted before cJSON and
 * taken by the parsers through the context, not a global; without the lift
 * the arrays stay in the tree; errors named at their byte in the body as
 * sent; the parse tree bounded by the request memory limit from the exact
 * count of its values before cJSON runs; what is not a JSON object refused.
 */
#include "api/json.h"
#include "api/protocol.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_limits limits(size_t memory)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = 1 << 20,
                      .max_request_memory = memory,
                      .parallel_parts = 1};
    return lim;
}

static const char tensor_body[] = "{\"t\":{\"shape\":[2,2],\"data\":[[1.5,-2],[3,0.25]]}}";

/* Lifted: the tree holds a marker, the context's lift its floats. */
static void test_lift_travels_in_the_context(void **state)
{
    (void)state;
    srv_limits lim = limits(1 << 20);
    api_body b;
    api_err e;
    srv_tensor t;
    memset(&t, 0, sizeof t);
    assert_true(api_body_read(tensor_body, strlen(tensor_body), &lim, true, &b, &e));
    assert_true(b.lifted);
    assert_int_equal(b.lift.count, 1);
    const cJSON *node = cJSON_GetObjectItemCaseSensitive(b.root, "t");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(node, "data");
    assert_true(cJSON_IsString(data)); /* a marker, not an array of nodes */
    /* Without the lift in the context the marker is no tensor data. */
    api_ctx bare = {&lim, "", NULL, NULL};
    assert_false(api_get_tensor(node, "t", &bare, 2, &t, &e));
    assert_int_equal(e.code, SRV_ERR_INVALID_ARGUMENT);
    api_ctx ctx = {&lim, "", NULL, &b.lift};
    assert_true(api_get_tensor(node, "t", &ctx, 2, &t, &e));
    assert_int_equal(t.ndim, 2);
    assert_true(t.data[0] == 1.5f && t.data[1] == -2.0f && t.data[2] == 3.0f && t.data[3] == 0.25f);
    srv_tensor_free(&t);
    api_body_free(&b);
    assert_null(b.root);
    api_body_free(&b); /* twice is harmless */
}

/* lift false (a protocol that reads its arrays as nodes): a plain tree. */
static void test_no_lift(void **state)
{
    (void)state;
    srv_limits lim = limits(1 << 20);
    api_body b;
    api_err e;
    assert_true(api_body_read(tensor_body, strlen(tensor_body), &lim, false, &b, &e));
    assert_false(b.lifted);
    const cJSON *data =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b.root, "t"), "data");
    assert_true(cJSON_IsArray(data));
    assert_int_equal(cJSON_GetArraySize(data), 2);
    api_body_free(&b);
}

/* A syntax error after a lifted array is named at its byte in the body as
 * sent (the lifted text is shorter), with the bytes around it. */
static void test_error_at_the_byte_sent(void **state)
{
    (void)state;
    static const char body[] = "{\"t\":{\"shape\":[3],\"data\":[1,2,3]},x}";
    srv_limits lim = limits(1 << 20);
    api_body b;
    api_err e;
    char want[64];
    size_t at = (size_t)(strchr(body, 'x') - body);
    assert_false(api_body_read(body, strlen(body), &lim, true, &b, &e));
    assert_null(b.root);
    assert_int_equal(e.code, SRV_ERR_MALFORMED_JSON);
    snprintf(want, sizeof want, "at byte %zu of %zu", at, strlen(body));
    if (strstr(e.message, want) == NULL)
        fail_msg("%s: wanted '%s'", e.message, want);
    assert_non_null(strstr(e.message, "before 'x}'"));
}

/* The tree bound counts the values exactly: a comma or bracket inside a
 * string is no value. 1 + 1 + n values of 64-byte nodes, plus the text. */
static void test_tree_bound(void **state)
{
    (void)state;
    enum { N = 4000 };
    char *body = malloc(16 + 2 * N + 64);
    size_t len, need;
    api_body b;
    api_err e;
    char want[64];
    assert_non_null(body);
    len = (size_t)sprintf(body, "{\"s\":\",,,[[{{\",\"a\":[");
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(body + len, "%s0", i ? "," : "");
    len += (size_t)sprintf(body + len, "]}");
    need = (N + 3) * sizeof(cJSON) + len; /* the object, "s", "a" and N numbers */
    srv_limits lim = limits(need - 1);
    assert_false(api_body_read(body, len, &lim, false, &b, &e));
    assert_int_equal(e.code, SRV_ERR_PAYLOAD_TOO_LARGE);
    snprintf(want, sizeof want, "up to %d JSON values", N + 3);
    if (strstr(e.message, want) == NULL)
        fail_msg("%s: wanted '%s'", e.message, want);
    assert_non_null(strstr(e.message, "--max-request-mb"));
    lim = limits(need);
    assert_true(api_body_read(body, len, &lim, false, &b, &e));
    api_body_free(&b);
    free(body);
}

/* The lifted floats count against the limit too, before cJSON runs. */
static void test_lift_bound(void **state)
{
    (void)state;
    enum { N = 30000 };
    char *body = malloc(64 + 2 * N);
    size_t len;
    api_body b;
    api_err e;
    assert_non_null(body);
    len = (size_t)sprintf(body, "{\"t\":{\"shape\":[%d],\"data\":[", N);
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(body + len, "%s1", i ? "," : "");
    len += (size_t)sprintf(body + len, "]}}");
    srv_limits lim = limits(4 * N);
    assert_false(api_body_read(body, len, &lim, true, &b, &e));
    assert_int_equal(e.code, SRV_ERR_PAYLOAD_TOO_LARGE);
    assert_non_null(strstr(e.message, "its tensor numbers as float32"));
    assert_false(b.lifted);
    free(body);
}

static void test_not_an_object(void **state)
{
    (void)state;
    srv_limits lim = limits(1 << 20);
    api_body b;
    api_err e;
    assert_false(api_body_read("[1]", 3, &lim, true, &b, &e));
    assert_int_equal(e.code, SRV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "must be a JSON object, found array"));
    assert_false(api_body_read("  ", 2, &lim, true, &b, &e));
    assert_int_equal(e.code, SRV_ERR_MALFORMED_JSON);
    assert_false(api_body_read(NULL, 0, &lim, true, &b, &e));
    assert_int_equal(e.code, SRV_ERR_MALFORMED_JSON);
    assert_non_null(strstr(e.message, "empty"));
    /* Not NUL-terminated: only len bytes are read. */
    assert_true(api_body_read("{}garbage", 2, &lim, true, &b, &e));
    api_body_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lift_travels_in_the_context),
        cmocka_unit_test(test_no_lift),
        cmocka_unit_test(test_error_at_the_byte_sent),
        cmocka_unit_test(test_tree_bound),
        cmocka_unit_test(test_lift_bound),
        cmocka_unit_test(test_not_an_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
