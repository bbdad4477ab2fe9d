/* test_json_arrays.c - server/api/json.c's readers of arrays: int and float
 * arrays (length, element type and range, each error naming the element),
 * the same as {shape, dtype, data | b64} tensors (i32 and i64, base64 and
 * lifted text), lengths given as a count or as positions, the rank of an
 * integer value, and M-RoPE rows [3, L].
 */
#include "api/json.h"
#include "api/protocol.h"
#include "api_harness.h" /* ERR_IS, json_limits, json_of */
#include "codec/base64.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_int_array(void **state)
{
    (void)state;
    srv_limits lim = json_limits(4);
    api_ctx ctx = {&lim, "inputs[0]", NULL, NULL};
    api_err e;
    int32_t *a = NULL, n = 0;
    cJSON *v = json_of("[5,-1,2147483647,0]");

    assert_true(api_get_int_array(v, "k_positions", &ctx, &a, &n, &e));
    assert_int_equal(n, 4); /* exactly the limit */
    assert_int_equal(a[0], 5);
    assert_int_equal(a[1], -1);
    assert_int_equal(a[2], INT32_MAX);
    assert_int_equal(a[3], 0);
    free(a);
    cJSON_Delete(v);

    v = json_of("[1,2,3,4,5]");
    assert_false(api_get_int_array(v, "k_positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "inputs[0].k_positions",
           "k_positions has 5 values; the limit per array is 4", "--max-tensor-elements");
    cJSON_Delete(v);
    v = json_of("[]");
    assert_false(api_get_int_array(v, "k_positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].k_positions", "k_positions must not be empty");
    cJSON_Delete(v);
    v = json_of("\"0,1\"");
    assert_false(api_get_int_array(v, "k_positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].k_positions",
           "k_positions must be an array, found string");
    cJSON_Delete(v);
    /* The element is named. */
    v = json_of("[0,1,2.5]");
    assert_false(api_get_int_array(v, "k_positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].k_positions[2]",
           "k_positions[2] must be an integer, found 2.5");
    cJSON_Delete(v);
    v = json_of("[0,null]");
    assert_false(api_get_int_array(v, "k_positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].k_positions[1]", "found null");
    cJSON_Delete(v);
    v = json_of("[3e9]");
    assert_false(api_get_int_array(v, "k_positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[0].k_positions[0]", "k_positions[0]=3000000000");
    cJSON_Delete(v);
}

/* {"shape":[n], "dtype", "data" | "b64"}: the form of int32/int64 arrays. */
static void test_int_array_as_tensor(void **state)
{
    (void)state;
    srv_limits lim = json_limits(6);
    api_ctx ctx = {&lim, "", NULL, NULL};
    api_err e;
    int32_t *a = NULL, n = 0;
    char b64[64], text[160];
    cJSON *v;

    v = json_of("{\"shape\":[3],\"data\":[7,8,-9]}");
    assert_true(api_get_int_array(v, "positions", &ctx, &a, &n, &e));
    assert_int_equal(n, 3);
    assert_true(a[0] == 7 && a[1] == 8 && a[2] == -9);
    free(a);
    cJSON_Delete(v);

    const int32_t i32[3] = {4, -5, 2147483647};
    srv_b64_encode((const unsigned char *)i32, sizeof i32, b64);
    snprintf(text, sizeof text, "{\"shape\":[3],\"dtype\":\"i32\",\"b64\":\"%s\"}", b64);
    v = json_of(text);
    assert_true(api_get_int_array(v, "positions", &ctx, &a, &n, &e));
    assert_int_equal(n, 3);
    assert_memory_equal(a, i32, sizeof i32);
    free(a);
    cJSON_Delete(v);

    /* i64: values in int32 pass, one outside is named with its value. */
    int64_t i64[2] = {-2147483648LL, 12};
    srv_b64_encode((const unsigned char *)i64, sizeof i64, b64);
    snprintf(text, sizeof text, "{\"shape\":[2],\"dtype\":\"i64\",\"b64\":\"%s\"}", b64);
    v = json_of(text);
    assert_true(api_get_int_array(v, "positions", &ctx, &a, &n, &e));
    assert_true(n == 2 && a[0] == INT32_MIN && a[1] == 12);
    free(a);
    cJSON_Delete(v);
    i64[1] = 2147483648LL;
    srv_b64_encode((const unsigned char *)i64, sizeof i64, b64);
    snprintf(text, sizeof text, "{\"shape\":[2],\"dtype\":\"i64\",\"b64\":\"%s\"}", b64);
    v = json_of(text);
    assert_false(api_get_int_array(v, "positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "positions[1]",
           "positions[1]=2147483648 is outside the int32 range");
    cJSON_Delete(v);
    /* b64 of the wrong length for its shape and dtype. */
    snprintf(text, sizeof text, "{\"shape\":[3],\"dtype\":\"i64\",\"b64\":\"%s\"}", b64);
    v = json_of(text);
    assert_false(api_get_int_array(v, "positions", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "positions.b64",
           "must be base64 of 24 bytes (3 int64 values), found 24 characters");
    cJSON_Delete(v);

    static const struct {
        const char *json;
        srv_error code;
        const char *field, *words;
    } bad[] = {
        {"{\"shape\":[2],\"data\":[1,2,3]}", SRV_ERR_SHAPE_MISMATCH, "positions",
         "positions.data does not hold the 2 values of its shape"},
        {"{\"shape\":[2],\"data\":[1,2],\"b64\":\"AAAA\"}", SRV_ERR_INVALID_ARGUMENT, "positions",
         "needs exactly one of data"},
        {"{\"shape\":[2]}", SRV_ERR_INVALID_ARGUMENT, "positions", "needs exactly one of data"},
        {"{\"shape\":[2],\"dtype\":\"f32\",\"data\":[1,2]}", SRV_ERR_UNSUPPORTED, "positions.dtype",
         "\"i32\" or \"i64\""},
        {"{\"shape\":[2],\"data\":[1,2],\"extra\":1}", SRV_ERR_UNKNOWN_FIELD, "positions.extra",
         "positions has no field 'extra'"},
        {"{\"shape\":[2,1],\"data\":[1,2]}", SRV_ERR_SHAPE_MISMATCH, "positions.shape",
         "positions.shape must be [n]"},
        {"{\"shape\":[0],\"data\":[]}", SRV_ERR_INVALID_ARGUMENT, "positions.shape",
         "positions.shape[0] must be a positive integer"},
        {"{\"shape\":[7],\"data\":[1,2,3,4,5,6,7]}", SRV_ERR_PAYLOAD_TOO_LARGE, "positions",
         "positions has 7 values; the limit per array is 6"},
        {"{\"shape\":[2],\"data\":[1,1.5]}", SRV_ERR_INVALID_ARGUMENT, "positions.data[1]",
         "found 1.5"},
        {"{\"shape\":[2],\"b64\":7}", SRV_ERR_INVALID_ARGUMENT, "positions.b64",
         "must be a base64 string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = json_of(bad[i].json);
        a = NULL;
        if (api_get_int_array(v, "positions", &ctx, &a, &n, &e))
            fail_msg("%s was accepted", bad[i].json);
        ERR_IS(&e, bad[i].code, bad[i].field, bad[i].words);
        assert_null(a);
        cJSON_Delete(v);
    }
}

static void test_float_array(void **state)
{
    (void)state;
    srv_limits lim = json_limits(3);
    api_ctx ctx = {&lim, "inputs[1]", NULL, NULL};
    api_err e;
    float *a = NULL;
    int32_t n = 0;
    cJSON *v = cJSON_CreateArray();
    cJSON_AddItemToArray(v, cJSON_CreateNumber(-1.5));
    cJSON_AddItemToArray(v, cJSON_CreateNumber(FLT_MAX));
    cJSON_AddItemToArray(v, cJSON_CreateNumber(-FLT_MAX));
    assert_true(api_get_float_array(v, "scheme.slopes", &ctx, &a, &n, &e));
    assert_int_equal(n, 3);
    assert_true(a[0] == -1.5f && a[1] == FLT_MAX && a[2] == -FLT_MAX);
    free(a);
    cJSON_AddItemToArray(v, cJSON_CreateNumber(1));
    assert_false(api_get_float_array(v, "scheme.slopes", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "inputs[1].scheme.slopes",
           "scheme.slopes has 4 values; the limit per array is 3");
    cJSON_Delete(v);

    v = json_of("[1, 1e39]");
    assert_false(api_get_float_array(v, "scheme.slopes", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[1].scheme.slopes[1]",
           "scheme.slopes[1]=1e+39 is outside the float32 range");
    cJSON_Delete(v);
    v = json_of("[1, \"2\"]");
    assert_false(api_get_float_array(v, "scheme.slopes", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[1].scheme.slopes[1]",
           "scheme.slopes[1] must be a number, found string");
    cJSON_Delete(v);
    v = json_of("[]");
    assert_false(api_get_float_array(v, "scheme.slopes", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[1].scheme.slopes", "must not be empty");
    cJSON_Delete(v);
    /* Not an array (a tensor object is not read here). */
    v = json_of("{\"shape\":[1],\"data\":[1]}");
    assert_false(api_get_float_array(v, "scheme.slopes", &ctx, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[1].scheme.slopes", "found object");
    cJSON_Delete(v);
}

static void test_get_length(void **state)
{
    (void)state;
    srv_limits lim = json_limits(8);
    api_ctx ctx = {&lim, "inputs[2]", NULL, NULL};
    api_err e;
    int32_t n = -1, *pos = NULL;
    cJSON *o;

    o = json_of("{}");
    assert_true(api_get_length(o, "length", "positions", &ctx, &n, &pos, &e));
    assert_int_equal(n, 0);
    assert_null(pos);
    cJSON_Delete(o);
    o = json_of("{\"length\":8}");
    assert_true(api_get_length(o, "length", "positions", &ctx, &n, &pos, &e));
    assert_int_equal(n, 8);
    assert_null(pos);
    cJSON_Delete(o);
    o = json_of("{\"positions\":[4,2,9]}");
    assert_true(api_get_length(o, "length", "positions", &ctx, &n, &pos, &e));
    assert_int_equal(n, 3);
    assert_true(pos[0] == 4 && pos[1] == 2 && pos[2] == 9);
    free(pos);
    pos = NULL;
    cJSON_Delete(o);
    o = json_of("{\"length\":3,\"positions\":[4,2,9]}");
    assert_true(api_get_length(o, "length", "positions", &ctx, &n, &pos, &e));
    assert_int_equal(n, 3);
    free(pos);
    pos = NULL;
    cJSON_Delete(o);

    o = json_of("{\"q_length\":4,\"q_positions\":[4,2,9]}");
    assert_false(api_get_length(o, "q_length", "q_positions", &ctx, &n, &pos, &e));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[2].q_positions",
           "q_positions has 3 values but q_length=4");
    free(pos); /* the array was read before the counts were compared */
    pos = NULL;
    cJSON_Delete(o);
    o = json_of("{\"length\":0}");
    assert_false(api_get_length(o, "length", "positions", &ctx, &n, &pos, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[2].length", "length=0 must be at least 1");
    cJSON_Delete(o);
    o = json_of("{\"length\":9}");
    assert_false(api_get_length(o, "length", "positions", &ctx, &n, &pos, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "inputs[2].length",
           "length=9 is more than the 8 values allowed per tensor", "--max-tensor-elements");
    cJSON_Delete(o);
    o = json_of("{\"length\":\"4\"}");
    assert_false(api_get_length(o, "length", "positions", &ctx, &n, &pos, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[2].length", "found string");
    cJSON_Delete(o);
    assert_null(pos);
}

static void test_int_rank(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int rank;
    } cases[] = {
        {"[1,2]", 1},
        {"[]", 1},
        {"7", 1},
        {"[[1,2],[3,4]]", 2},
        {"[[[1]],[[2]]]", 3},
        {"{\"shape\":[5],\"data\":[1,2,3,4,5]}", 1},
        {"{\"shape\":[3,2],\"data\":[1,2,3,4,5,6]}", 2},
        {"{\"data\":[1]}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *v = json_of(cases[i].json);
        if (api_int_rank(v) != cases[i].rank)
            fail_msg("%s: rank %d, wanted %d", cases[i].json, api_int_rank(v), cases[i].rank);
        cJSON_Delete(v);
    }
}

static void test_int_rows(void **state)
{
    (void)state;
    srv_limits lim = json_limits(16);
    api_ctx ctx = {&lim, "inputs[0]", NULL, NULL};
    api_err e;
    int32_t *a = NULL, n = 0;
    const int32_t want[6] = {1, 2, 3, 4, 5, 6};
    cJSON *v;

    v = json_of("[[1,2],[3,4],[5,6]]");
    assert_true(api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e));
    assert_int_equal(n, 2);
    assert_memory_equal(a, want, sizeof want);
    free(a);
    assert_false(api_get_int_rows(v, "q_positions", &ctx, 2, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[0].q_positions",
           "q_positions must be [2, L]: 2 arrays of positions, found array of 3");
    cJSON_Delete(v);
    v = json_of("{\"a\":1}");
    assert_false(api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e));
    assert_int_equal(e.code, SRV_ERR_UNKNOWN_FIELD); /* read as an int tensor */
    cJSON_Delete(v);
    v = json_of("5");
    assert_false(api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[0].q_positions", "found number of 0");
    cJSON_Delete(v);
    v = json_of("[[1,2,3],[4,5],[6,7,8]]");
    assert_false(api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[0].q_positions[1]",
           "q_positions[1] has 2 values but q_positions[0] has 3");
    cJSON_Delete(v);
    v = json_of("[[1,2],[3,4],[5,\"x\"]]");
    assert_false(api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[0].q_positions[2][1]", "found string");
    cJSON_Delete(v);

    /* The tensor form, [rows, n], with nested or flat data. */
    const char *forms[] = {"{\"shape\":[3,2],\"data\":[[1,2],[3,4],[5,6]]}",
                           "{\"shape\":[3,2],\"data\":[1,2,3,4,5,6]}",
                           "{\"shape\":[3,2],\"dtype\":\"i32\",\"b64\":\"%s\"}"};
    char b64[64], text[128];
    srv_b64_encode((const unsigned char *)want, sizeof want, b64);
    for (size_t i = 0; i < 3; i++) {
        snprintf(text, sizeof text, forms[i], b64);
        v = json_of(text);
        a = NULL;
        if (!api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e))
            fail_msg("%s: %s", text, e.message);
        assert_int_equal(n, 2);
        assert_memory_equal(a, want, sizeof want);
        free(a);
        cJSON_Delete(v);
    }
    v = json_of("{\"shape\":[2,3],\"data\":[1,2,3,4,5,6]}");
    assert_false(api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[0].q_positions.shape",
           "q_positions.shape=[2, 3] must have 3 rows");
    cJSON_Delete(v);
    v = json_of("{\"shape\":[3,2],\"data\":[[1,2],[3,4],[5,6,7]]}");
    assert_false(api_get_int_rows(v, "q_positions", &ctx, 3, &a, &n, &e));
    ERR_IS(&e, SRV_ERR_SHAPE_MISMATCH, "inputs[0].q_positions.data[2]", "has 3 values");
    cJSON_Delete(v);
}

/* ------------------------------------------------------------------------- */
/* Names, tensors, helpers                                                   */
/* ------------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int_array),   cmocka_unit_test(test_int_array_as_tensor),
        cmocka_unit_test(test_float_array), cmocka_unit_test(test_get_length),
        cmocka_unit_test(test_int_rank),    cmocka_unit_test(test_int_rows),
    };
    return cmocka_run_group_tests_name("api_json_arrays", tests, NULL, NULL);
}
