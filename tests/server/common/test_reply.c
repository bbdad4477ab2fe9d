/* test_reply.c - JSON replies and the error body (server/common/reply.c). */
#include "testutil.h"

#include "common/reply.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Parses r's body and returns its "error" object (root in *root). */
static const cJSON *error_of(const srv_reply *r, cJSON **root)
{
    assert_non_null(r->body);
    assert_int_equal(strlen(r->body), r->body_len);
    *root = cJSON_ParseWithLength(r->body, r->body_len);
    assert_non_null(*root);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(*root, "error");
    assert_true(cJSON_IsObject(e));
    return e;
}

static const char *member(const cJSON *obj, const char *name)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, name));
}

static void test_error_body_shape(void **state)
{
    (void)state;
    srv_reply r = {0};
    srv_reply_error(&r, SRV_ERR_SHAPE_MISMATCH, "inputs[2].k.shape",
                    "k.shape[1]=%d does not divide num_heads=%d", 3, 8);
    assert_int_equal(r.http_status, 400);
    assert_int_equal(r.error, SRV_ERR_SHAPE_MISMATCH);
    assert_string_equal(r.content_type, "application/json");
    assert_string_equal(r.body,
                        "{\"error\":{\"code\":\"SHAPE_MISMATCH\",\"message\":\"k.shape[1]=3 "
                        "does not divide num_heads=8\",\"field\":\"inputs[2].k.shape\"}}");
    cJSON *root;
    const cJSON *e = error_of(&r, &root);
    assert_string_equal(member(e, "code"), "SHAPE_MISMATCH");
    assert_string_equal(member(e, "message"), "k.shape[1]=3 does not divide num_heads=8");
    assert_string_equal(member(e, "field"), "inputs[2].k.shape");
    assert_int_equal(cJSON_GetArraySize(root), 1);
    assert_int_equal(cJSON_GetArraySize(e), 3);
    cJSON_Delete(root);
    srv_reply_free(&r);
    assert_null(r.body);
    assert_int_equal(r.body_len, 0);
    srv_reply_free(&r); /* twice is harmless */
    srv_reply_free(NULL);
}

static void test_error_without_field(void **state)
{
    (void)state;
    const char *fields[2] = {NULL, ""};
    for (int i = 0; i < 2; i++) {
        srv_reply r = {0};
        srv_reply_error(&r, SRV_ERR_NOT_FOUND, fields[i], "no route for %s", "/v2/x");
        cJSON *root;
        const cJSON *e = error_of(&r, &root);
        assert_int_equal(r.http_status, 404);
        assert_string_equal(member(e, "code"), "NOT_FOUND");
        assert_string_equal(member(e, "message"), "no route for /v2/x");
        assert_null(cJSON_GetObjectItemCaseSensitive(e, "field"));
        cJSON_Delete(root);
        srv_reply_free(&r);
    }
}

static void test_every_error_code(void **state)
{
    (void)state;
    for (int i = 0; i < SRV_ERR_COUNT; i++) {
        srv_reply r = {0};
        srv_reply_error(&r, (srv_error)i, "f", "m");
        assert_int_equal(r.http_status, srv_error_http_status((srv_error)i));
        assert_true(r.http_status >= 400 && r.http_status < 600);
        cJSON *root;
        const cJSON *e = error_of(&r, &root);
        assert_string_equal(member(e, "code"), srv_error_code((srv_error)i));
        cJSON_Delete(root);
        srv_reply_free(&r);
    }
    assert_int_equal(srv_error_http_status(SRV_ERR_PAYLOAD_TOO_LARGE), 413);
    assert_int_equal(srv_error_http_status(SRV_ERR_TIMEOUT), 504);
}

static void test_escaping_and_limits(void **state)
{
    (void)state;
    srv_reply r = {0};
    /* Quotes, backslashes and control characters survive the round trip. */
    const char *nasty = "say \"hi\"\\ \n\t\x01 end";
    srv_reply_error(&r, SRV_ERR_INVALID_ARGUMENT, "a\"b", "%s", nasty);
    cJSON *root;
    const cJSON *e = error_of(&r, &root);
    assert_string_equal(member(e, "message"), nasty);
    assert_string_equal(member(e, "field"), "a\"b");
    cJSON_Delete(root);
    srv_reply_free(&r);

    /* Invalid UTF-8 becomes '?', valid multi-byte text is kept. */
    srv_reply_error(&r, SRV_ERR_UNKNOWN_FIELD,
                    "x.\xff\xfe"
                    "caf\xc3\xa9",
                    "bad \xc3 \xe2\x82\xac");
    e = error_of(&r, &root);
    assert_string_equal(member(e, "field"), "x.??caf\xc3\xa9");
    assert_string_equal(member(e, "message"), "bad ? \xe2\x82\xac");
    cJSON_Delete(root);
    srv_reply_free(&r);

    /* A huge message or field (from request text) is truncated. */
    size_t big = 100000;
    char *s = tu_alloc(big + 1, 1);
    memset(s, 'k', big);
    srv_reply_error(&r, SRV_ERR_UNKNOWN_FIELD, s, "unknown key %s", s);
    e = error_of(&r, &root);
    const char *m = member(e, "message");
    assert_true(strlen(m) < 1024);
    assert_string_equal(m + strlen(m) - 3, "...");
    assert_true(strlen(member(e, "field")) < 256);
    assert_true(r.body_len < 2000);
    cJSON_Delete(root);
    srv_reply_free(&r);
    free(s);
}

static void test_reply_json(void **state)
{
    (void)state;
    srv_reply r = {0};
    char *body = strdup("{\"ok\":true}");
    srv_reply_json(&r, 200, body, strlen(body));
    assert_int_equal(r.http_status, 200);
    assert_string_equal(r.content_type, "application/json");
    assert_ptr_equal(r.body, body);
    assert_int_equal(r.body_len, 11);
    srv_reply_free(&r);
    assert_null(r.body);

    srv_reply_json(&r, 204, NULL, 5);
    assert_null(r.body);
    assert_int_equal(r.body_len, 0);
    srv_reply_free(&r);
}

/* cJSON allocation that always fails, to reach the out-of-memory fallback. */
static void *failing_malloc(size_t n)
{
    (void)n;
    return NULL;
}

static void test_out_of_memory_fallback(void **state)
{
    (void)state;
    cJSON_Hooks hooks = {failing_malloc, free};
    cJSON_InitHooks(&hooks);
    srv_reply r = {0};
    srv_reply_error(&r, SRV_ERR_SHAPE_MISMATCH, "f", "message %d", 1);
    cJSON_InitHooks(NULL);

    assert_int_equal(r.http_status, 500);
    assert_int_equal(r.error, SRV_ERR_INTERNAL);
    cJSON *root;
    const cJSON *e = error_of(&r, &root);
    assert_string_equal(member(e, "code"), "INTERNAL");
    cJSON_Delete(root);
    /* The fallback is a malloc'd copy, so plain free() (libmicrohttpd's
     * MUST_FREE) and srv_reply_free are both correct. */
    srv_reply_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_body_shape), cmocka_unit_test(test_error_without_field),
        cmocka_unit_test(test_every_error_code), cmocka_unit_test(test_escaping_and_limits),
        cmocka_unit_test(test_reply_json),       cmocka_unit_test(test_out_of_memory_fallback),
    };
    return cmocka_run_group_tests_name("reply", tests, NULL, NULL);
}
