/* test_item.c - server/api/item.c: api_item_parse of q/k/v and layer-mode
 * items (sizes, and each disagreement's field and values under the prefix),
 * result shapes and counts with and without a batch, api_item_sequence's
 * strides for per-sequence inputs, and return, learned rows, max position.
 */
#include "api/json.h"
#include "api/protocol.h"
#include "api/request.h"
#include "api_harness.h" /* ERR_IS */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_limits lim_of(void)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = 1 << 16,
                      .max_request_memory = (size_t)64 << 20,
                      .parallel_parts = 1};
    return lim;
}

/* {"shape":[...], "data":[...]}: element i is (i % 17) / 8 - 1 + seed. */
static cJSON *tensor(double seed, int ndim, ...)
{
    cJSON *t = cJSON_CreateObject(), *shape = cJSON_AddArrayToObject(t, "shape");
    cJSON *data = cJSON_AddArrayToObject(t, "data");
    size_t n = 1;
    va_list ap;
    va_start(ap, ndim);
    for (int d = 0; d < ndim; d++) {
        int s = va_arg(ap, int);
        n *= (size_t)s;
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(s));
    }
    va_end(ap);
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(data, cJSON_CreateNumber((double)(i % 17) / 8 - 1 + seed));
    return t;
}

static cJSON *js(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    if (j == NULL)
        fail_msg("the test's JSON does not parse: %s", text);
    return j;
}

/* A q/k/v item, 3-D (B = 0) or a batch of B. */
static cJSON *item_of_qkv(const char *scheme, int B, int Lq, int Lk, int H, int Hkv, int D, int Dv)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "scheme", js(scheme));
    if (B == 0) {
        cJSON_AddItemToObject(o, "q", tensor(0.0, 3, Lq, H, D));
        cJSON_AddItemToObject(o, "k", tensor(0.5, 3, Lk, Hkv, D));
        cJSON_AddItemToObject(o, "v", tensor(1.0, 3, Lk, Hkv, Dv));
    } else {
        cJSON_AddItemToObject(o, "q", tensor(0.0, 4, B, Lq, H, D));
        cJSON_AddItemToObject(o, "k", tensor(0.5, 4, B, Lk, Hkv, D));
        cJSON_AddItemToObject(o, "v", tensor(1.0, 4, B, Lk, Hkv, Dv));
    }
    return o;
}

static const char *const extra[] = {"id", "return"};

/* Parses obj (deleted) as an item at prefix. */
static bool parse(cJSON *obj, const char *prefix, api_item *it, api_err *e)
{
    static srv_limits lim;
    lim = lim_of();
    api_ctx ctx = {&lim, prefix, NULL, NULL};
    bool ok = api_item_parse(obj, &ctx, extra, 2, it, e);
    cJSON_Delete(obj);
    return ok;
}

static void parse_ok(cJSON *obj, api_item *it)
{
    api_err e;
    if (!parse(obj, "inputs[0]", it, &e))
        fail_msg("%s (%s)", e.message, e.field);
}

/* Sets member name of o to the JSON text (replacing it). */
static cJSON *with(cJSON *o, const char *name, const char *text)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, name);
    cJSON_AddItemToObject(o, name, js(text));
    return o;
}

#define PARSE_FAILS(obj, code, field, ...)                                                         \
    do {                                                                                           \
        api_item it_;                                                                              \
        api_err e_;                                                                                \
        if (parse((obj), "inputs[0]", &it_, &e_))                                                  \
            fail_msg("accepted, wanted %s", (field));                                              \
        ERR_IS(&e_, (code), (field), __VA_ARGS__);                                                 \
    } while (0)

#define NONE "{\"type\":\"none\"}"

/* ------------------------------------------------------------------------- */
/* q/k/v items                                                               */
/* ------------------------------------------------------------------------- */

static void test_qkv_sizes(void **state)
{
    (void)state;
    api_item it;
    parse_ok(item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6), &it);
    assert_int_equal(it.Lq, 5);
    assert_int_equal(it.Lk, 7);
    assert_int_equal(it.H, 4);
    assert_int_equal(it.Hkv, 2);
    assert_int_equal(it.D, 8);
    assert_int_equal(it.Dv, 6);
    assert_int_equal(it.B, 1);
    assert_false(it.batched);
    assert_int_equal(it.att.num_heads, 4);
    assert_int_equal(it.att.num_kv_heads, 2);
    assert_int_equal(it.att.head_dim, 8);
    assert_int_equal(it.att.v_head_dim, 6);
    assert_int_equal(it.att.q_len, 5);
    assert_int_equal(it.att.k_len, 7);
    assert_ptr_equal(it.att.q, it.q.data);
    assert_ptr_equal(it.att.k, it.k.data);
    assert_ptr_equal(it.att.v, it.v.data);
    assert_ptr_equal(it.att.scheme, &it.scheme.s);
    assert_null(it.att.x);
    assert_int_equal(it.att.key_length, -1);
    assert_false(it.att.causal);
    assert_int_equal(it.ret, API_RET_OUTPUT);
    assert_int_equal(it.out_ndim, 3);
    assert_true(it.out_shape[0] == 5 && it.out_shape[1] == 4 && it.out_shape[2] == 6);
    assert_int_equal(it.input_bytes, (5 * 4 * 8 + 7 * 2 * 8 + 7 * 2 * 6) * sizeof(float));
    api_item_free(&it);
    assert_null(it.q.data);

    /* Explicit counts that agree, the caller's extra names, options. */
    cJSON *o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_AddNumberToObject(o, "num_heads", 4);
    cJSON_AddNumberToObject(o, "num_kv_heads", 2);
    cJSON_AddNumberToObject(o, "head_dim", 8);
    cJSON_AddTrueToObject(o, "causal");
    cJSON_AddNumberToObject(o, "window", 3);
    cJSON_AddNumberToObject(o, "key_length", 6);
    cJSON_AddNumberToObject(o, "scale", 0.25);
    cJSON_AddStringToObject(o, "id", "req-1");
    with(o, "k_positions", "[0,1,2,3,4,5,6]");
    parse_ok(o, &it);
    assert_true(it.att.causal);
    assert_int_equal(it.att.window, 3);
    assert_int_equal(it.att.key_length, 6);
    assert_true(it.att.scale_set && it.att.scale == 0.25f);
    assert_ptr_equal(it.att.k_positions, it.k_positions);
    assert_int_equal(it.k_positions[6], 6);
    assert_int_equal(it.input_bytes, (5 * 4 * 8 + 7 * 2 * 8 + 7 * 2 * 6 + 7) * sizeof(float));
    api_item_free(&it);
}

static void test_qkv_errors(void **state)
{
    (void)state;
    cJSON *o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "k", tensor(0, 3, 7, 2, 6));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].k.shape",
                "k.shape[2]=6 does not equal q.shape[2]=8 (head_dim)");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 3, 8, 6);
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].k.shape",
                "k.shape[1]=3 does not divide num_heads=4");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "v", tensor(0, 3, 6, 2, 6));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].v.shape",
                "v.shape[0]=6 does not equal k.shape[0]=7 (keys)");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "v", tensor(0, 3, 7, 1, 6));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].v.shape",
                "v.shape[1]=1 does not equal k.shape[1]=2 (num_kv_heads)");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_AddNumberToObject(o, "num_heads", 2);
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].num_heads",
                "num_heads=2 does not match q.shape[1]=4");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_AddNumberToObject(o, "head_dim", 0);
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].head_dim", "head_dim=0 must be at least 1");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_AddNumberToObject(o, "key_length", -1);
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].key_length",
                "key_length=-1 must be 0 or more");
    o = with(item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6), "q_positions", "[0,1,2,3]");
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].q_positions",
                "q_positions has 4 values but q.shape[0]=5");
    o = with(item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6), "k_positions", "[[0,1,2,3,4,5,6]]");
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].k_positions",
                "only for scheme rope with mrope_section");

    /* Which inputs an item needs. */
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "q");
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].q", "q is required");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "v");
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].v", "v is required with q");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_AddItemToObject(o, "w_o", tensor(0, 2, 24, 4));
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].w_o", "w_o is a layer-mode input");
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "scheme");
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].scheme", "scheme is required");

    /* Names: unknown ones refused (the caller's extras are known). */
    o = item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6);
    cJSON_AddNumberToObject(o, "heads", 4);
    PARSE_FAILS(o, SRV_ERR_UNKNOWN_FIELD, "inputs[0].heads",
                "an attention item has no field 'heads'", "num_heads", "return");
    PARSE_FAILS(js("[1]"), SRV_ERR_INVALID_ARGUMENT, "inputs[0]",
                "an attention item must be an object, found array");

    /* The core library's check, its field under the item's prefix. */
    o = item_of_qkv("{\"type\":\"rope\",\"rotary_dim\":3}", 0, 5, 7, 4, 2, 8, 6);
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].scheme.rotary_dim", "rotary_dim");

    /* A batch: the leading dims must agree. */
    o = item_of_qkv(NONE, 2, 5, 7, 4, 2, 8, 6);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "k", tensor(0, 4, 3, 7, 2, 8));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].k.shape",
                "k.shape[0]=3 does not equal q.shape[0]=2 (batch)");
    o = item_of_qkv(NONE, 2, 5, 7, 4, 2, 8, 6);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "k", tensor(0, 4, 2, 7, 2, 6));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].k.shape",
                "k.shape[3]=6 does not equal q.shape[3]=8 (head_dim)");
    o = item_of_qkv(NONE, 2, 5, 7, 4, 2, 8, 6);
    cJSON_AddNumberToObject(o, "num_kv_heads", 4);
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].num_kv_heads",
                "num_kv_heads=4 does not match k.shape[2]=2");
    o = with(item_of_qkv(NONE, 2, 5, 7, 4, 2, 8, 6), "key_length", "[7,8]");
    PARSE_FAILS(o, SRV_ERR_OUT_OF_RANGE, "inputs[0].key_length[1]",
                "key_length[1]=8 exceeds k.shape[1]=7");
    o = with(item_of_qkv(NONE, 2, 5, 7, 4, 2, 8, 6), "key_length", "[7,7,7]");
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].key_length",
                "key_length has 3 values but the batch has 2 sequences");
    o = with(item_of_qkv(NONE, 2, 5, 7, 4, 2, 8, 6), "query_length", "[1,0]");
    PARSE_FAILS(o, SRV_ERR_OUT_OF_RANGE, "inputs[0].query_length[1]",
                "query_length[1]=0 is below 1; 1 up to q.shape[1]=5");
}

static void test_layer_mode(void **state)
{
    (void)state;
    api_item it;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "scheme", js(NONE));
    cJSON_AddItemToObject(o, "x", tensor(0, 2, 6, 16));
    cJSON_AddItemToObject(o, "w_q", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_k", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_v", tensor(0, 2, 16, 12));
    cJSON_AddNumberToObject(o, "num_heads", 2);
    cJSON *copy = cJSON_Duplicate(o, true);
    parse_ok(o, &it);
    assert_int_equal(it.H, 2);
    assert_int_equal(it.Hkv, 2);
    assert_int_equal(it.D, 4);
    assert_int_equal(it.Dv, 6);
    assert_int_equal(it.Lq, 6);
    assert_int_equal(it.Lk, 6);
    assert_ptr_equal(it.att.x, it.x.data);
    assert_int_equal(it.att.d_model, 16);
    assert_int_equal(it.att.seq_len, 6);
    assert_int_equal(it.out_ndim, 3);
    assert_true(it.out_shape[0] == 6 && it.out_shape[1] == 2 && it.out_shape[2] == 6);
    api_item_free(&it);

    /* With w_o the output is [L, d_out]. */
    o = cJSON_Duplicate(copy, true);
    cJSON_AddItemToObject(o, "w_o", tensor(0, 2, 12, 10));
    parse_ok(o, &it);
    assert_int_equal(it.out_ndim, 2);
    assert_true(it.out_shape[0] == 6 && it.out_shape[1] == 10);
    assert_int_equal(it.att.d_out, 10);
    assert_ptr_equal(it.att.w_o, it.w_o.data);
    api_item_free(&it);

    o = cJSON_Duplicate(copy, true);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "num_heads");
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].num_heads",
                "layer mode (x) needs num_heads");
    o = cJSON_Duplicate(copy, true);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "w_q", tensor(0, 2, 16, 9));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].w_q.shape",
                "w_q.shape[1]=9 is not a multiple of num_heads=2");
    o = cJSON_Duplicate(copy, true);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "w_q", tensor(0, 2, 15, 8));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].w_q.shape",
                "w_q.shape[0]=15 does not equal x.shape[1]=16 (d_model)");
    o = cJSON_Duplicate(copy, true);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "w_k", tensor(0, 2, 16, 6));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].w_k.shape",
                "w_k.shape[1]=6 does not equal num_kv_heads*head_dim=2*4=8");
    o = cJSON_Duplicate(copy, true);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "w_v", tensor(0, 2, 16, 7));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].w_v.shape",
                "w_v.shape[1]=7 is not a multiple of num_kv_heads=2");
    o = cJSON_Duplicate(copy, true);
    cJSON_AddItemToObject(o, "w_o", tensor(0, 2, 11, 10));
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].w_o.shape",
                "w_o.shape[0]=11 does not equal num_heads*v_head_dim=2*6");
    o = cJSON_Duplicate(copy, true);
    cJSON_AddNumberToObject(o, "num_kv_heads", 3);
    PARSE_FAILS(o, SRV_ERR_SHAPE_MISMATCH, "inputs[0].num_kv_heads",
                "num_kv_heads=3 does not divide num_heads=2");
    o = cJSON_Duplicate(copy, true);
    cJSON_AddItemToObject(o, "k", tensor(0, 3, 6, 2, 4));
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].k", "send either q, k and v, or x");
    o = cJSON_Duplicate(copy, true);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "w_v");
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].w_v", "layer mode (x) needs w_v");
    o = cJSON_Duplicate(copy, true);
    cJSON_AddNumberToObject(o, "query_length", 2);
    PARSE_FAILS(o, SRV_ERR_INVALID_ARGUMENT, "inputs[0].query_length",
                "query_length is for q, k, v items");
    cJSON_Delete(copy);
}

/* ------------------------------------------------------------------------- */
/* Results                                                                   */
/* ------------------------------------------------------------------------- */

static void result_shape_is(const api_item *it, unsigned which, int ndim, ...)
{
    int64_t shape[4];
    va_list ap;
    int n = api_item_result_shape(it, which, shape);
    if (n != ndim)
        fail_msg("result %u: rank %d, wanted %d", which, n, ndim);
    va_start(ap, ndim);
    for (int d = 0; d < ndim; d++) {
        int64_t w = va_arg(ap, int);
        if (shape[d] != w) {
            va_end(ap);
            fail_msg("result %u: shape[%d]=%lld, wanted %lld", which, d, (long long)shape[d],
                     (long long)w);
        }
    }
    va_end(ap);
}

static void test_result_shapes_and_counts(void **state)
{
    (void)state;
    api_item it;
    /* Lq 5, Lk 7, H 4, Hkv 2, D 8, Dv 6: every dim distinct. */
    parse_ok(item_of_qkv(NONE, 0, 5, 7, 4, 2, 8, 6), &it);
    result_shape_is(&it, API_RET_OUTPUT, 3, 5, 4, 6);
    result_shape_is(&it, API_RET_WEIGHTS, 3, 4, 5, 7);
    result_shape_is(&it, API_RET_LOGITS, 3, 4, 5, 7);
    result_shape_is(&it, API_RET_Q_ROT, 3, 5, 4, 8);
    result_shape_is(&it, API_RET_K_ROT, 3, 7, 2, 8);
    result_shape_is(&it, API_RET_ENTROPY, 2, 4, 5);
    result_shape_is(&it, API_RET_DISTANCE, 2, 4, 5);
    assert_int_equal(api_item_count(&it, API_RET_OUTPUT), 5 * 4 * 6);
    assert_int_equal(api_item_count(&it, API_RET_WEIGHTS), 4 * 5 * 7);
    assert_int_equal(api_item_count(&it, API_RET_Q_ROT), 5 * 4 * 8);
    assert_int_equal(api_item_count(&it, API_RET_K_ROT), 7 * 2 * 8);
    assert_int_equal(api_item_count(&it, API_RET_ENTROPY), 4 * 5);
    api_item_free(&it);

    /* A batch of 3: a leading B, and counts of one sequence. */
    parse_ok(item_of_qkv(NONE, 3, 5, 7, 4, 2, 8, 6), &it);
    assert_int_equal(it.B, 3);
    assert_true(it.batched);
    result_shape_is(&it, API_RET_OUTPUT, 4, 3, 5, 4, 6);
    result_shape_is(&it, API_RET_LOGITS, 4, 3, 4, 5, 7);
    result_shape_is(&it, API_RET_K_ROT, 4, 3, 7, 2, 8);
    result_shape_is(&it, API_RET_DISTANCE, 3, 3, 4, 5);
    assert_int_equal(api_item_count(&it, API_RET_OUTPUT), 5 * 4 * 6);
    assert_int_equal(api_item_count(&it, API_RET_WEIGHTS), 4 * 5 * 7);
    assert_int_equal(api_item_count(&it, API_RET_ENTROPY), 4 * 5);
    api_item_free(&it);

    /* Layer mode with w_o: output [L, d_out], or [B, L, d_out]. */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "scheme", js(NONE));
    cJSON_AddItemToObject(o, "x", tensor(0, 3, 2, 6, 16));
    cJSON_AddItemToObject(o, "w_q", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_k", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_v", tensor(0, 2, 16, 12));
    cJSON_AddItemToObject(o, "w_o", tensor(0, 2, 12, 10));
    cJSON_AddNumberToObject(o, "num_heads", 2);
    parse_ok(o, &it);
    result_shape_is(&it, API_RET_OUTPUT, 3, 2, 6, 10);
    result_shape_is(&it, API_RET_WEIGHTS, 4, 2, 2, 6, 6);
    assert_int_equal(api_item_count(&it, API_RET_OUTPUT), 6 * 10);
    api_item_free(&it);

    /* Counts saturate. */
    memset(&it, 0, sizeof it);
    it.B = 1;
    it.H = it.Lq = it.Lk = INT32_MAX;
    assert_int_equal(api_item_count(&it, API_RET_WEIGHTS), SIZE_MAX);
    it.Lk = 1;
    assert_int_equal(api_item_count(&it, API_RET_WEIGHTS), (size_t)INT32_MAX * INT32_MAX);
}

/* ------------------------------------------------------------------------- */
/* Sequences of a batch                                                      */
/* ------------------------------------------------------------------------- */

/* B 3, Lq 2, Lk 5, H 2, Hkv 1, D 4, Dv 3, with every per-sequence input. */
static void test_sequence_strides(void **state)
{
    (void)state;
    api_item it;
    pa_attention a;
    cJSON *o = item_of_qkv(NONE, 3, 2, 5, 2, 1, 4, 3);
    with(o, "q_positions", "[[3,4],[13,14],[23,24]]");
    with(o, "k_positions", "[[0,1,2,3,4],[10,11,12,13,14],[20,21,22,23,24]]");
    with(o, "key_length", "[5,4,3]");
    with(o, "query_length", "[2,1,2]");
    cJSON *mask = tensor(0, 4, 3, 1, 2, 5), *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(mask, "data"))
    {
        cJSON_SetNumberValue(m, 1);
    }
    cJSON_AddItemToObject(o, "mask", mask);
    cJSON_AddItemToObject(o, "bias", tensor(0, 4, 3, 1, 2, 5));
    parse_ok(o, &it);
    assert_int_equal(it.q_pos_stride, 2);
    assert_int_equal(it.k_pos_stride, 5);
    assert_int_equal(it.mask_stride, 10);
    assert_int_equal(it.bias_stride, 10);
    for (int32_t b = 0; b < 3; b++) {
        api_item_sequence(&it, b, &a);
        assert_ptr_equal(a.q, it.q.data + (size_t)b * 2 * 2 * 4);
        assert_ptr_equal(a.k, it.k.data + (size_t)b * 5 * 1 * 4);
        assert_ptr_equal(a.v, it.v.data + (size_t)b * 5 * 1 * 3);
        assert_ptr_equal(a.q_positions, it.q_positions + (size_t)b * 2);
        assert_ptr_equal(a.k_positions, it.k_positions + (size_t)b * 5);
        assert_int_equal(a.q_positions[0], 10 * b + 3);
        assert_int_equal(a.k_positions[4], 10 * b + 4);
        assert_ptr_equal(a.mask, it.mask + (size_t)b * 10);
        assert_ptr_equal(a.bias, it.bias.data + (size_t)b * 10);
        assert_int_equal(a.key_length, 5 - b);
        assert_int_equal(a.q_len, b == 1 ? 1 : 2);
        /* What is not per sequence stays. */
        assert_int_equal(a.k_len, 5);
        assert_int_equal(a.num_heads, 2);
        assert_ptr_equal(a.scheme, it.att.scheme);
    }
    api_item_free(&it);

    /* Shared positions (one [Lk] row) and no per-sequence lengths. */
    o = item_of_qkv(NONE, 3, 2, 5, 2, 1, 4, 3);
    with(o, "k_positions", "[7,8,9,10,11]");
    cJSON_AddNumberToObject(o, "key_length", 4);
    parse_ok(o, &it);
    assert_int_equal(it.k_pos_stride, 0);
    for (int32_t b = 0; b < 3; b++) {
        api_item_sequence(&it, b, &a);
        assert_ptr_equal(a.k_positions, it.k_positions);
        assert_null(a.q_positions);
        assert_int_equal(a.key_length, 4);
        assert_int_equal(a.q_len, 2);
        assert_ptr_equal(a.v, it.v.data + (size_t)b * 5 * 1 * 3);
    }
    api_item_free(&it);
}

/* M-RoPE rows per sequence, [B, 3, L]; and layer mode's x. */
static void test_sequence_strides_mrope_and_layer(void **state)
{
    (void)state;
    api_item it;
    pa_attention a;
    cJSON *o = item_of_qkv("{\"type\":\"rope\",\"mrope_section\":[1,1,0]}", 2, 2, 3, 2, 2, 4, 4);
    with(o, "q_positions", "[[[1,2],[3,4],[5,6]],[[11,12],[13,14],[15,16]]]");
    with(o, "k_positions", "[[[0,1,2],[0,1,2],[0,1,2]],[[10,11,12],[10,11,12],[10,11,12]]]");
    parse_ok(o, &it);
    assert_int_equal(it.q_mrope_stride, 6);
    assert_int_equal(it.k_mrope_stride, 9);
    for (int32_t b = 0; b < 2; b++) {
        api_item_sequence(&it, b, &a);
        assert_ptr_equal(a.q_mrope_positions, it.q_mrope + (size_t)b * 6);
        assert_ptr_equal(a.k_mrope_positions, it.k_mrope + (size_t)b * 9);
        assert_int_equal(a.q_mrope_positions[5], 10 * b + 6);
        assert_int_equal(a.k_mrope_positions[8], 10 * b + 2);
    }
    assert_int_equal(it.input_bytes,
                     (2 * 2 * 2 * 4 + 2 * 2 * 3 * 2 * 4 + 2 * 3 * 2 + 2 * 3 * 3) * sizeof(float));
    api_item_free(&it);

    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "scheme", js(NONE));
    cJSON_AddItemToObject(o, "x", tensor(0, 3, 3, 6, 16));
    cJSON_AddItemToObject(o, "w_q", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_k", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_v", tensor(0, 2, 16, 12));
    cJSON_AddNumberToObject(o, "num_heads", 2);
    parse_ok(o, &it);
    assert_int_equal(it.B, 3);
    for (int32_t b = 0; b < 3; b++) {
        api_item_sequence(&it, b, &a);
        assert_ptr_equal(a.x, it.x.data + (size_t)b * 6 * 16);
        assert_null(a.q);
        assert_ptr_equal(a.w_q, it.w_q.data); /* weights are shared */
    }
    api_item_free(&it);
}

/* A later sequence's own inputs are checked, and the error names it:
 * learned rows in range for sequence 0, one past the table in sequence 1. */
static void test_sequence_checked(void **state)
{
    (void)state;
    api_item it;
    api_err e;
    cJSON *o = cJSON_CreateObject(), *scheme = js("{\"type\":\"learned\"}");
    cJSON_AddItemToObject(scheme, "table", tensor(0, 2, 4, 16));
    cJSON_AddItemToObject(o, "scheme", scheme);
    cJSON_AddItemToObject(o, "x", tensor(0, 3, 2, 3, 16));
    cJSON_AddItemToObject(o, "w_q", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_k", tensor(0, 2, 16, 8));
    cJSON_AddItemToObject(o, "w_v", tensor(0, 2, 16, 8));
    cJSON_AddNumberToObject(o, "num_heads", 2);
    with(o, "q_positions", "[[0,1,2],[1,2,3]]");
    with(o, "k_positions", "[[0,1,2],[1,2,3]]");
    cJSON *bad = cJSON_Duplicate(o, true);
    parse_ok(o, &it);
    assert_int_equal(it.q_pos_stride, 3);
    api_item_free(&it);
    with(bad, "q_positions", "[[0,1,2],[1,2,4]]");
    with(bad, "k_positions", "[[0,1,2],[1,2,4]]");
    assert_false(parse(bad, "inputs[1]", &it, &e));
    assert_int_equal(e.code, SRV_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(e.field, "inputs[1].")); /* the core's field, prefixed */
    if (strncmp(e.message, "sequence 1 of the batch: ", 25) != 0)
        fail_msg("the sequence is not named: %s (%s)", e.message, e.field);

    /* api_err_in_sequence puts the sequence first and keeps the field. */
    api_fail(&e, NULL, SRV_ERR_OUT_OF_RANGE, "k_positions[3]", "k_positions[3]=%d is negative", -2);
    api_err_in_sequence(&e, 2);
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "k_positions[3]",
           "sequence 2 of the batch: k_positions[3]=-2 is negative");
    memset(e.message, 'm', sizeof e.message - 1);
    e.message[sizeof e.message - 1] = '\0';
    api_err_in_sequence(&e, 12);
    assert_int_equal(strncmp(e.message, "sequence 12 of the batch: mmm", 29), 0);
    assert_true(strlen(e.message) < sizeof e.message);
}

/* ------------------------------------------------------------------------- */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------- */

static void test_return(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    api_ctx ctx = {&lim, "inputs[2]", NULL, NULL};
    api_item it;
    api_err e;
    memset(&it, 0, sizeof it);
    assert_true(api_item_parse_return(NULL, &ctx, &it, &e));
    assert_int_equal(it.ret, API_RET_OUTPUT);
    cJSON *v = js("[\"weights\",\"entropy\",\"distance\",\"k_rot\"]");
    assert_true(api_item_parse_return(v, &ctx, &it, &e));
    assert_int_equal(it.ret, API_RET_WEIGHTS | API_RET_ENTROPY | API_RET_DISTANCE | API_RET_K_ROT);
    cJSON_Delete(v);
    v = js("[]");
    assert_true(api_item_parse_return(v, &ctx, &it, &e));
    assert_int_equal(it.ret, 0);
    cJSON_Delete(v);
    v = js("\"output\"");
    assert_false(api_item_parse_return(v, &ctx, &it, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[2].return",
           "return must be an array of names (output, weights, logits, q_rot, k_rot, entropy, "
           "distance), found string");
    cJSON_Delete(v);
    v = js("[\"output\",\"Weights\"]");
    assert_false(api_item_parse_return(v, &ctx, &it, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[2].return[1]",
           "return[1]='Weights' is not one of output, weights");
    cJSON_Delete(v);
    v = js("[\"output\",\"logits\",7]");
    assert_false(api_item_parse_return(v, &ctx, &it, &e));
    ERR_IS(&e, SRV_ERR_INVALID_ARGUMENT, "inputs[2].return[2]",
           "return[2] must be a string, found number");
    cJSON_Delete(v);
    for (int r = 0; r < API_NRES; r++) {
        char text[32];
        snprintf(text, sizeof text, "[\"%s\"]", api_result_names[r]);
        v = js(text);
        assert_true(api_item_parse_return(v, &ctx, &it, &e));
        assert_int_equal(it.ret, 1u << r);
        cJSON_Delete(v);
    }
    assert_int_equal(1u << 0, API_RET_OUTPUT);
    assert_int_equal(1u << 6, API_RET_DISTANCE);
    assert_string_equal(api_result_names[6], "distance");
}

static void test_learned_rows_and_max_position(void **state)
{
    (void)state;
    srv_limits lim = lim_of();
    api_ctx ctx = {&lim, "inputs[1]", NULL, NULL};
    api_err e;
    pa_learned l = {.rows = 4, .cols = 2, .offset = 2};
    const int32_t ok[3] = {-2, 0, 1}, past[3] = {0, 1, 2}, before[2] = {1, -3};
    assert_true(api_check_learned_rows(&l, ok, 3, "positions", &ctx, &e)); /* rows 0 and 3 */
    assert_false(api_check_learned_rows(&l, past, 3, "positions", &ctx, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[1].positions[2]",
           "position 2 + offset 2 = row 4 is outside the learned table of 4 rows");
    assert_false(api_check_learned_rows(&l, before, 2, "k_positions", &ctx, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[1].k_positions[1]",
           "position -3 + offset 2 = row -1 is outside");
    /* No wrap: the row is computed in 64 bits. */
    const int32_t big[1] = {INT32_MAX};
    l.offset = 10;
    assert_false(api_check_learned_rows(&l, big, 1, "positions", &ctx, &e));
    ERR_IS(&e, SRV_ERR_OUT_OF_RANGE, "inputs[1].positions[0]", "row 2147483657");

    const int32_t p1[4] = {3, -1, 7, 2}, p2[2] = {-5, -2}, p3[1] = {-9};
    assert_int_equal(api_max_position(NULL, 5), 4);
    assert_int_equal(api_max_position(NULL, 0), 0);
    assert_int_equal(api_max_position(p1, 4), 7);
    assert_int_equal(api_max_position(p2, 2), -2);
    assert_int_equal(api_max_position(p3, 1), -9);
    assert_int_equal(api_max_position(p1, 2), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qkv_sizes),
        cmocka_unit_test(test_qkv_errors),
        cmocka_unit_test(test_layer_mode),
        cmocka_unit_test(test_result_shapes_and_counts),
        cmocka_unit_test(test_sequence_strides),
        cmocka_unit_test(test_sequence_strides_mrope_and_layer),
        cmocka_unit_test(test_sequence_checked),
        cmocka_unit_test(test_return),
        cmocka_unit_test(test_learned_rows_and_max_position),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
