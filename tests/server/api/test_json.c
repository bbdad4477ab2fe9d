/* test_json.c - server/api/json.c: field paths and api_fail/api_fail_pa
 * prefixes, echoed ids, unknown and repeated member names, the typed readers
 * of one value (field and value in each message), output_dtype/encoding,
 * tensor sources, saturating sizes. The array readers are test_json_arrays.c.
 */
#include "api/json.h"
#include "api/protocol.h"
#include "codec/base64.h"
#include "api_harness.h" /* ERR_IS */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Error paths                                                               */
/* ------------------------------------------------------------------------- */

static void test_path(void **state)
{
    (void)state;
    char buf[API_FIELD_MAX];
    api_ctx top = {NULL, "", NULL, NULL}, item = {NULL, "inputs[2]", NULL, NULL};
    assert_string_equal(api_path(buf, sizeof buf, &top, "k"), "k");
    assert_string_equal(api_path(buf, sizeof buf, NULL, "k.shape[1]"), "k.shape[1]");
    assert_string_equal(api_path(buf, sizeof buf, &item, "k.shape[1]"), "inputs[2].k.shape[1]");
    /* An index joins without a dot; an empty name is the prefix alone. */
    assert_string_equal(api_path(buf, sizeof buf, &item, "[3]"), "inputs[2][3]");
    assert_string_equal(api_path(buf, sizeof buf, &item, ""), "inputs[2]");
    assert_string_equal(api_path(buf, sizeof buf, &item, NULL), "inputs[2]");
    /* Cut to fit, NUL-terminated. */
    memset(buf, 'x', sizeof buf);
    assert_string_equal(api_path(buf, 8, &item, "k"), "inputs[");
    assert_string_equal(api_path(buf, 11, &item, "k"), "inputs[2].");
    assert_string_equal(api_path(buf, 12, &item, "k"), "inputs[2].k");
    buf[0] = 'z';
    api_path(buf, 0, &item, "k"); /* no room: untouched */
    assert_int_equal(buf[0], 'z');
}

static void test_item_prefix(void **state)
{
    (void)state;
    char buf[32], want[40];
    const size_t cases[] = {0, 7, 10, 42, 1000, 1234567890, SIZE_MAX};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(buf, 'x', sizeof buf);
        snprintf(want, sizeof want, "inputs[%zu]", cases[i]);
        assert_string_equal(api_item_prefix(buf, cases[i]), want);
    }
}

static void test_fail_prefixes(void **state)
{
    (void)state;
    api_err e;
    api_ctx top = {NULL, "", NULL, NULL}, item = {NULL, "inputs[4]", NULL, NULL};
    assert_false(api_fail(&e, &item, SRV_ERR_OUT_OF_RANGE, "scheme.base",
                          "scheme.base=%d is below %s", -3, "0"));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[4].scheme.base", "scheme.base=-3 is below 0");
    assert_false(api_fail(&e, &top, SRV_ERR_INVALID_ARGUMENT, "q", "bad q"));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "q", "bad q");

    /* A core library error: its field gets the prefix, its status a code. */
    pa_error pe = {.status = PA_STATUS_SHAPE_MISMATCH};
    snprintf(pe.field, sizeof pe.field, "k.shape[1]");
    snprintf(pe.message, sizeof pe.message, "k.shape[1]=3 does not divide num_heads=8");
    assert_false(api_fail_pa(&e, &item, &pe));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[4].k.shape[1]",
           "k.shape[1]=3 does not divide num_heads=8");
    assert_false(api_fail_pa(&e, &top, &pe));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "k.shape[1]", "does not divide");
    pe.status = PA_STATUS_TOO_LARGE;
    pe.field[0] = '\0';
    assert_false(api_fail_pa(&e, &item, &pe));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "inputs[4]", "num_heads=8");
    pe.status = PA_STATUS_WORKSPACE_TOO_SMALL;
    assert_false(api_fail_pa(&e, &item, &pe));
    assert_int_equal(e.code, SRV_ERR_INTERNAL);
}

/* A tensor parser's reply becomes an api_err (and is freed); an api_err
 * becomes a reply, with no field when it has none. */
static void test_reply_round_trip(void **state)
{
    (void)state;
    srv_reply r;
    api_err e;
    memset(&r, 0, sizeof r);
    srv_reply_error(&r, SRV_ERR_SHAPE_MISMATCH, "inputs[1].q.shape", "q has %d dims", 2);
    assert_false(api_fail_reply(&e, &r));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[1].q.shape", "q has 2 dims");
    assert_null(r.body);
    memset(&r, 0, sizeof r);
    r.error = SRV_ERR_INVALID_ARGUMENT;
    assert_false(api_fail_reply(&e, &r)); /* no body: a generic message */
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "", "invalid tensor");

    memset(&r, 0, sizeof r);
    api_reply_err(&r, &e);
    assert_int_equal(r.http_status, 400);
    cJSON *body = cJSON_ParseWithLength(r.body, r.body_len);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "code")),
                        "INVALID_ARGUMENT");
    assert_null(cJSON_GetObjectItemCaseSensitive(err, "field"));
    cJSON_Delete(body);
    srv_reply_free(&r);
    api_fail(&e, NULL, SRV_ERR_PAYLOAD_TOO_LARGE, "k", "too big");
    api_reply_err(&r, &e);
    assert_int_equal(r.http_status, 413);
    assert_non_null(strstr(r.body, "\"field\":\"k\""));
    srv_reply_free(&r);
}

/* An echoed id prints as cJSON would print the id sent: integers 0 <= id <
 * 1e15 as digits (raw), everything else as a copy. */
static void test_id_node(void **state)
{
    (void)state;
    const double nums[] = {
        0, 1, 42, 2147483648.0, 999999999999999.0, 1e15, 1e16, 123.5, -1.0, -0.0, -1e3, 1e300, 0.1};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        cJSON *id = cJSON_CreateNumber(nums[i]), *copy = api_id_node(id);
        char *want = cJSON_PrintUnformatted(id), *got = cJSON_PrintUnformatted(copy);
        if (strcmp(want, got) != 0)
            fail_msg("id %.17g: echoed as %s, sent as %s", nums[i], got, want);
        /* The fast path only where it is exact. */
        assert_true(cJSON_IsRaw(copy) == (nums[i] >= 0 && nums[i] < 1e15 &&
                                          nums[i] == floor(nums[i]) && !signbit(nums[i])));
        cJSON_free(want);
        cJSON_free(got);
        cJSON_Delete(id);
        cJSON_Delete(copy);
    }
    const char *others[] = {"\"req-7\"", "null", "true", "{\"a\":[1,{\"b\":2}]}", "[1,2]"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        cJSON *id = json_of(others[i]), *copy = api_id_node(id);
        assert_non_null(copy);
        assert_true(copy != id);
        assert_true(cJSON_Compare(id, copy, true));
        cJSON_Delete(id);
        cJSON_Delete(copy);
    }
}

/* ------------------------------------------------------------------------- */
/* Member names                                                              */
/* ------------------------------------------------------------------------- */

static void test_check_fields(void **state)
{
    (void)state;
    static const char *const known[] = {"alpha", "beta", "gamma"};
    srv_limits lim = json_limits(16);
    api_ctx item = {&lim, "inputs[1]", NULL, NULL}, top = {&lim, "", NULL, NULL};
    api_err e;
    cJSON *o = json_of("{\"gamma\":1,\"alpha\":2}");
    assert_true(api_check_fields(o, known, 3, "scheme", "scheme 'x'", &item, &e));
    cJSON_Delete(o);
    o = json_of("{}");
    assert_true(api_check_fields(o, known, 3, "", "the request", &top, &e));
    cJSON_Delete(o);

    /* Unknown: the field is its path, the message lists the known names. */
    o = json_of("{\"alpha\":1,\"delta\":2}");
    assert_false(api_check_fields(o, known, 3, "scheme", "scheme 'x'", &item, &e));
    ERR_IS(&e, SRV_ERR_UNKNOWN_FIELD, "inputs[1].scheme.delta",
           "scheme 'x' has no field 'delta' (known: alpha, beta, gamma)");
    assert_false(api_check_fields(o, known, 3, "", "the request", &top, &e));
    ERR_IS(&e, SRV_ERR_UNKNOWN_FIELD, "delta", "the request has no field 'delta'");
    assert_false(api_check_fields(o, known, 0, "", "the request", &top, &e));
    ERR_IS(&e, SRV_ERR_UNKNOWN_FIELD, "alpha", "no field 'alpha' (known: none)");
    cJSON_Delete(o);
    /* Names are case-sensitive. */
    o = json_of("{\"Alpha\":1}");
    assert_false(api_check_fields(o, known, 3, "", "the request", &top, &e));
    ERR_IS(&e, SRV_ERR_UNKNOWN_FIELD, "Alpha", "'Alpha'");
    cJSON_Delete(o);

    /* A repeated name is an error, not a silent overwrite. */
    o = json_of("{\"beta\":1,\"gamma\":0,\"beta\":2}");
    assert_false(api_check_fields(o, known, 3, "scheme", "scheme 'x'", &item, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[1].scheme.beta",
           "field 'beta' appears more than once in scheme 'x'");
    cJSON_Delete(o);

    /* A long unknown name: whole in the field, cut in the message. */
    char name[101], text[160];
    memset(name, 'n', 100);
    name[100] = '\0';
    snprintf(text, sizeof text, "{\"%s\":1}", name);
    o = json_of(text);
    assert_false(api_check_fields(o, known, 3, "", "the request", &top, &e));
    assert_string_equal(e.field, name);
    assert_null(strstr(e.message, name));
    name[64] = '\0';
    snprintf(text, sizeof text, "'%s...'", name);
    assert_non_null(strstr(e.message, text));
    cJSON_Delete(o);
}

/* Repeats are caught for each of 64 names, the last one included. */
static void test_check_fields_64(void **state)
{
    (void)state;
    char names[64][16], text[64];
    const char *known[64];
    srv_limits lim = json_limits(16);
    api_ctx top = {&lim, "", NULL, NULL};
    api_err e;
    for (int i = 0; i < 64; i++) {
        snprintf(names[i], sizeof names[i], "f%d", i);
        known[i] = names[i];
    }
    for (int i = 0; i < 64; i += 7) {
        int k = i > 56 ? 63 : i;
        snprintf(text, sizeof text, "{\"f%d\":1,\"f%d\":2}", k, k);
        cJSON *o = json_of(text);
        assert_false(api_check_fields(o, known, 64, "", "the request", &top, &e));
        ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, names[k], "appears more than once");
        cJSON_Delete(o);
    }
    cJSON *o = json_of("{\"f0\":1,\"f63\":2,\"f31\":3}");
    assert_true(api_check_fields(o, known, 64, "", "the request", &top, &e));
    cJSON_Delete(o);
}

/* ------------------------------------------------------------------------- */
/* Typed readers                                                             */
/* ------------------------------------------------------------------------- */

static void test_get_int(void **state)
{
    (void)state;
    srv_limits lim = json_limits(16);
    api_ctx ctx = {&lim, "inputs[0]", NULL, NULL};
    api_err e;
    int32_t v = 0;
    cJSON *n;

    n = cJSON_CreateNumber(2147483647.0);
    assert_true(api_get_int(n, "window", &ctx, &v, &e));
    assert_int_equal(v, INT32_MAX);
    cJSON_SetNumberValue(n, -2147483648.0);
    assert_true(api_get_int(n, "window", &ctx, &v, &e));
    assert_int_equal(v, INT32_MIN);
    cJSON_SetNumberValue(n, 2147483648.0);
    assert_false(api_get_int(n, "window", &ctx, &v, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[0].window",
           "window=2147483648 is outside the int32 range [-2147483648, 2147483647]");
    cJSON_SetNumberValue(n, -2147483649.0);
    assert_false(api_get_int(n, "window", &ctx, &v, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[0].window", "window=-2147483649");
    cJSON_SetNumberValue(n, 2.5);
    assert_false(api_get_int(n, "window", &ctx, &v, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].window",
           "window must be an integer, found 2.5");
    cJSON_SetNumberValue(n, INFINITY);
    assert_false(api_get_int(n, "window", &ctx, &v, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].window", "must be a finite integer");
    cJSON_Delete(n);
    n = cJSON_CreateString("7");
    assert_false(api_get_int(n, "window", &ctx, &v, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].window",
           "window must be an integer, found string");
    cJSON_Delete(n);
    assert_false(api_get_int(NULL, "window", &ctx, &v, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].window", "found nothing");
    assert_int_equal(v, INT32_MIN); /* untouched by failures */

    /* api_opt_int: absent is fine and says so. */
    cJSON *o = json_of("{\"a\":3,\"b\":true}");
    bool present = true;
    v = -7;
    assert_true(api_opt_int(o, "z", &ctx, &v, &present, &e));
    assert_false(present);
    assert_int_equal(v, -7);
    assert_true(api_opt_int(o, "a", &ctx, &v, &present, &e));
    assert_true(present);
    assert_int_equal(v, 3);
    assert_false(api_opt_int(o, "b", &ctx, &v, &present, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].b", "b must be an integer, found boolean");
    assert_ptr_equal(api_member(o, "a"), o->child);
    assert_null(api_member(o, "A"));
    cJSON_Delete(o);
}

static void test_get_number_bool_string(void **state)
{
    (void)state;
    srv_limits lim = json_limits(16);
    api_ctx ctx = {&lim, "inputs[3]", NULL, NULL};
    api_err e;
    double d = 0;
    bool b = false;
    const char *s = NULL;
    cJSON *o = json_of("{\"n\":-1.25e-3,\"t\":true,\"f\":false,\"s\":\"neox\",\"z\":null,\"a\":[1],"
                       "\"o\":{}}");

    assert_true(api_get_number(api_member(o, "n"), "scale", &ctx, &d, &e));
    assert_true(d == -1.25e-3);
    assert_false(api_get_number(api_member(o, "s"), "scale", &ctx, &d, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[3].scale", "scale must be a number, found string");
    assert_false(api_get_number(api_member(o, "t"), "scale", &ctx, &d, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[3].scale", "found boolean");
    cJSON *nan = cJSON_CreateNumber(NAN);
    assert_false(api_get_number(nan, "scale", &ctx, &d, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[3].scale", "scale must be a finite number");
    cJSON_Delete(nan);
    assert_true(d == -1.25e-3);

    assert_true(api_get_bool(api_member(o, "t"), "causal", &ctx, &b, &e));
    assert_true(b);
    assert_true(api_get_bool(api_member(o, "f"), "causal", &ctx, &b, &e));
    assert_false(b);
    assert_false(api_get_bool(api_member(o, "n"), "causal", &ctx, &b, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[3].causal",
           "causal must be true or false, found number");
    assert_false(api_get_bool(api_member(o, "z"), "causal", &ctx, &b, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[3].causal", "found null");

    assert_true(api_get_string(api_member(o, "s"), "scheme.layout", &ctx, &s, &e));
    assert_string_equal(s, "neox");
    assert_false(api_get_string(api_member(o, "a"), "scheme.layout", &ctx, &s, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[3].scheme.layout",
           "scheme.layout must be a string, found array");
    assert_false(api_get_string(api_member(o, "o"), "scheme.layout", &ctx, &s, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[3].scheme.layout", "found object");
    cJSON_Delete(o);
}

/* ------------------------------------------------------------------------- */
/* Arrays                                                                    */
/* ------------------------------------------------------------------------- */

static void test_output_dtype_and_encoding(void **state)
{
    (void)state;
    srv_limits lim = json_limits(16);
    api_ctx ctx = {&lim, "inputs[5]", NULL, NULL};
    api_err e;
    srv_wire w = SRV_WIRE_F64;
    srv_encoding enc = SRV_ENCODING_B64;
    cJSON *o = json_of("{\"a\":\"f32\",\"b\":\"f16\",\"c\":\"bf16\",\"d\":\"f64\",\"e\":\"F16\","
                       "\"n\":16,\"j\":\"json\",\"x\":\"b64\",\"h\":\"hex\"}");

    assert_true(api_get_output_dtype(api_member(o, "b"), &ctx, &w, &e));
    assert_int_equal(w, SRV_WIRE_F16);
    assert_true(api_get_output_dtype(api_member(o, "c"), &ctx, &w, &e));
    assert_int_equal(w, SRV_WIRE_BF16);
    assert_true(api_get_output_dtype(api_member(o, "a"), &ctx, &w, &e));
    assert_int_equal(w, SRV_WIRE_F32);
    assert_false(api_get_output_dtype(api_member(o, "d"), &ctx, &w, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[5].output_dtype",
           "output_dtype='f64' is not 'f32', 'f16' or 'bf16'");
    assert_false(api_get_output_dtype(api_member(o, "e"), &ctx, &w, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[5].output_dtype", "'F16'");
    assert_false(api_get_output_dtype(api_member(o, "n"), &ctx, &w, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[5].output_dtype",
           "output_dtype must be a string, found number");
    assert_int_equal(w, SRV_WIRE_F32);

    assert_true(api_get_encoding(api_member(o, "x"), &ctx, &enc, &e));
    assert_int_equal(enc, SRV_ENCODING_B64);
    assert_true(api_get_encoding(api_member(o, "j"), &ctx, &enc, &e));
    assert_int_equal(enc, SRV_ENCODING_JSON);
    assert_false(api_get_encoding(api_member(o, "h"), &ctx, &enc, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[5].output_encoding",
           "output_encoding='hex' is not 'json' or 'b64'");
    assert_false(api_get_encoding(api_member(o, "n"), &ctx, &enc, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[5].output_encoding", "found number");
    cJSON_Delete(o);
}

/* A tensor source that owns one node and records what it was asked. */
typedef struct probe_source {
    api_tensor_source src;
    const cJSON *mine;
    int calls, want_ndim;
    srv_elem kind;
    char name[32];
} probe_source;

static bool probe_owns(const api_tensor_source *src, const cJSON *node)
{
    return node == ((const probe_source *)(const void *)src)->mine;
}

static bool probe_get(const api_tensor_source *src, const cJSON *node, const char *name,
                      const api_ctx *ctx, int want_ndim, srv_elem kind, srv_tensor *out, api_err *e)
{
    probe_source *p = (probe_source *)(uintptr_t)(const void *)src;
    (void)node;
    (void)ctx;
    (void)e;
    p->calls++;
    p->want_ndim = want_ndim;
    p->kind = kind;
    snprintf(p->name, sizeof p->name, "%s", name);
    memset(out, 0, sizeof *out);
    out->ndim = 1;
    out->shape[0] = 1;
    out->count = 1;
    return true;
}

static void test_get_tensor(void **state)
{
    (void)state;
    srv_limits lim = json_limits(16);
    api_ctx ctx = {&lim, "inputs[1]", NULL, NULL};
    api_err e;
    srv_tensor t;
    cJSON *o =
        json_of("{\"q\":{\"shape\":[2,2],\"data\":[1,2,3,4]},\"k\":{\"shape\":[3],\"data\":[1,2]},"
                "\"big\":{\"shape\":[17],\"b64\":\"\"},\"m\":{\"ref\":\"table\"}}");

    memset(&t, 0, sizeof t);
    assert_true(api_get_tensor(api_member(o, "q"), "q", &ctx, 2, &t, &e));
    assert_int_equal(t.ndim, 2);
    assert_true(t.data[3] == 4.0f);
    srv_tensor_free(&t);
    /* Errors name the tensor under the context's prefix. */
    assert_false(api_get_tensor(api_member(o, "q"), "q", &ctx, 3, &t, &e));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[1].q.shape", "has 2 dimensions, expected 3");
    assert_false(api_get_tensor(api_member(o, "k"), "k", &ctx, 1, &t, &e));
    assert_int_equal(e.code, SRV_ERR_SHAPE_MISMATCH);
    assert_non_null(strstr(e.field, "inputs[1].k"));
    assert_false(api_get_tensor(api_member(o, "big"), "big", &ctx, 1, &t, &e));
    assert_int_equal(e.code, SRV_ERR_PAYLOAD_TOO_LARGE);
    /* A mask cannot be a named tensor. */
    assert_false(api_get_tensor_as(api_member(o, "m"), "mask", &ctx, 2, SRV_ELEM_BOOL, &t, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[1].mask", "mask cannot be a named tensor");
    /* Without a store a reference names no tensor. */
    assert_false(api_get_tensor(api_member(o, "m"), "scheme.table", &ctx, 2, &t, &e));
    ERR_IS(&e, SRV_ERR_UNKNOWN_TENSOR, "inputs[1].scheme.table.ref",
           "='table' names no loaded tensor");

    /* A node the source owns is the source's to read, with the same arguments. */
    probe_source p = {{probe_owns, probe_get, NULL}, api_member(o, "k"), 0, 0, SRV_ELEM_FLOAT, ""};
    api_ctx with = {&lim, "inputs[1]", &p.src, NULL};
    assert_true(
        api_get_tensor_as(api_member(o, "k"), "bias", &with, 3, SRV_ELEM_FLOAT_NEG_INF, &t, &e));
    assert_int_equal(p.calls, 1);
    assert_int_equal(p.want_ndim, 3);
    assert_int_equal(p.kind, SRV_ELEM_FLOAT_NEG_INF);
    assert_string_equal(p.name, "bias");
    assert_true(api_get_tensor(api_member(o, "q"), "q", &with, 2, &t, &e)); /* not its node */
    assert_int_equal(p.calls, 1);
    srv_tensor_free(&t);
    cJSON_Delete(o);
}

static void test_small_helpers(void **state)
{
    (void)state;
    int32_t *p = api_range_positions(5, 3);
    assert_true(p[0] == 5 && p[1] == 6 && p[2] == 7);
    free(p);
    p = api_range_positions(-2, 4);
    assert_true(p[0] == -2 && p[3] == 1);
    free(p);

    const int32_t v[3] = {0, -7, INT32_MAX};
    cJSON *o = cJSON_CreateObject();
    assert_true(api_add_int_array(o, "shape", v, 3));
    assert_true(api_add_int_array(o, "none", v, 0));
    char *text = cJSON_PrintUnformatted(o);
    assert_string_equal(text, "{\"shape\":[0,-7,2147483647],\"none\":[]}");
    cJSON_free(text);
    cJSON_Delete(o);

    static const struct {
        const char *json, *type;
    } types[] = {{"1", "number"},  {"\"a\"", "string"}, {"true", "boolean"}, {"false", "boolean"},
                 {"null", "null"}, {"[]", "array"},     {"{}", "object"}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        cJSON *j = json_of(types[i].json);
        assert_string_equal(api_json_type(j), types[i].type);
        cJSON_Delete(j);
    }
    assert_string_equal(api_json_type(NULL), "nothing");
}

/* a * b and a + b saturate at SIZE_MAX instead of wrapping. */
static void test_saturating_sizes(void **state)
{
    (void)state;
    const size_t half = (size_t)1 << (sizeof(size_t) * 8 / 2);
    assert_int_equal(api_mul_sat(0, SIZE_MAX), 0);
    assert_int_equal(api_mul_sat(SIZE_MAX, 0), 0);
    assert_int_equal(api_mul_sat(1, SIZE_MAX), SIZE_MAX);
    assert_int_equal(api_mul_sat(6, 7), 42);
    assert_int_equal(api_mul_sat(half - 1, half + 1), SIZE_MAX); /* 2^64 - 1 exactly */
    assert_int_equal(api_mul_sat(half, half), SIZE_MAX);         /* 2^64 wraps to 0 */
    assert_int_equal(api_mul_sat(half, half + 1), SIZE_MAX);
    assert_int_equal(api_mul_sat(SIZE_MAX / 3, 3), SIZE_MAX / 3 * 3);
    assert_int_equal(api_mul_sat(SIZE_MAX / 3 + 1, 3), SIZE_MAX);
    assert_int_equal(api_mul_sat(2, SIZE_MAX / 2 + 1), SIZE_MAX);

    assert_int_equal(api_add_sat(0, 0), 0);
    assert_int_equal(api_add_sat(40, 2), 42);
    assert_int_equal(api_add_sat(SIZE_MAX - 1, 1), SIZE_MAX);
    assert_int_equal(api_add_sat(SIZE_MAX - 1, 2), SIZE_MAX); /* wraps to 0 */
    assert_int_equal(api_add_sat(1, SIZE_MAX), SIZE_MAX);
    assert_int_equal(api_add_sat(SIZE_MAX, SIZE_MAX), SIZE_MAX);
    assert_int_equal(api_add_sat(SIZE_MAX / 2, SIZE_MAX / 2), SIZE_MAX - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path),
        cmocka_unit_test(test_item_prefix),
        cmocka_unit_test(test_fail_prefixes),
        cmocka_unit_test(test_reply_round_trip),
        cmocka_unit_test(test_id_node),
        cmocka_unit_test(test_check_fields),
        cmocka_unit_test(test_check_fields_64),
        cmocka_unit_test(test_get_int),
        cmocka_unit_test(test_get_number_bool_string),
        cmocka_unit_test(test_output_dtype_and_encoding),
        cmocka_unit_test(test_get_tensor),
        cmocka_unit_test(test_small_helpers),
        cmocka_unit_test(test_saturating_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
