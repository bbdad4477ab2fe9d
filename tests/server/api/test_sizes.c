/* test_sizes.c - server/api/sizes.c: api_check_result_size at and over
 * --max-tensor-elements (saturating, naming the result and its shape),
 * api_rendered_bytes against the text it bounds, and api_check_memory's 413
 * naming the figure rounded up, the limit and --max-request-mb.
 */
#include "api/json.h"
#include "api/protocol.h"
#include "codec/base64.h"
#include "codec/fmt_float.h"
#include "api_harness.h" /* ERR_IS */
#include "testutil.h"

#include <float.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static srv_limits lim_of(size_t max_elements, size_t memory)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = max_elements,
                      .max_request_memory = memory,
                      .parallel_parts = 1};
    return lim;
}

static void test_result_size(void **state)
{
    (void)state;
    srv_limits lim = lim_of(12, 1 << 20);
    api_ctx ctx = {&lim, "inputs[2]", NULL, NULL};
    api_err e;
    const int64_t at[2] = {3, 4}, over[1] = {13}, three[3] = {2, 3, 4};

    assert_true(api_check_result_size("weights", 2, at, &ctx, &e)); /* exactly the limit */
    assert_true(api_check_result_size("weights", 0, at, &ctx, &e)); /* a scalar: 1 value */
    assert_false(api_check_result_size("weights", 1, over, &ctx, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "inputs[2].weights",
           "weights [13] would have 13 values; the limit per tensor is 12",
           "--max-tensor-elements");
    assert_false(api_check_result_size("logits", 3, three, &ctx, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "inputs[2].logits",
           "logits [2, 3, 4] would have 24 values; the limit per tensor is 12");
    lim.max_tensor_elements = 24;
    assert_true(api_check_result_size("logits", 3, three, &ctx, &e));

    /* A product past SIZE_MAX saturates: refused, never wrapped to a small
     * count (2^32 * 2^32 wraps to 0). */
    const int64_t huge[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
    lim.max_tensor_elements = (size_t)1 << 40;
    api_ctx top = {&lim, "", NULL, NULL};
    assert_false(api_check_result_size("output", 2, huge, &top, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "output", "output [4294967296, 4294967296]",
           "would have 18446744073709551615 values");
    const int64_t wraps[3] = {(int64_t)1 << 62, 4, 1};
    assert_false(api_check_result_size("output", 3, wraps, &top, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "output", "[4611686018427387904, 4, 1]");
    /* The longest shape still fits the message. */
    const int64_t four[4] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
    assert_false(api_check_result_size("weights", 4, four, &top, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "weights",
           "[2147483647, 2147483647, 2147483647, 2147483647]");
}

/* The bound of an answer's text: JSON numbers at their longest printed
 * length plus a comma each; base64's 16 characters per 3 floats, rounded
 * up, plus 64. */
static void test_rendered_bytes(void **state)
{
    (void)state;
    const size_t per = SRV_FMT_FLOAT_MAX + 1;
    assert_int_equal(api_rendered_bytes(0, SRV_ENCODING_JSON), 0);
    assert_int_equal(api_rendered_bytes(4, SRV_ENCODING_JSON), per);
    assert_int_equal(api_rendered_bytes(7, SRV_ENCODING_JSON), per); /* whole floats */
    assert_int_equal(api_rendered_bytes(4000, SRV_ENCODING_JSON), 1000 * per);
    assert_int_equal(api_rendered_bytes(0, SRV_ENCODING_B64), 16 + 64);
    assert_int_equal(api_rendered_bytes(8, SRV_ENCODING_B64), 16 + 64);
    assert_int_equal(api_rendered_bytes(12, SRV_ENCODING_B64), 32 + 64);
    assert_int_equal(api_rendered_bytes(1200, SRV_ENCODING_B64), 101 * 16 + 64);

    /* Each bounds the real text: n numbers of the longest length (a float
     * prints in at most SRV_FMT_FLOAT_MAX characters) with commas between,
     * and base64 of n floats with its quotes. */
    char one[SRV_FMT_FLOAT_BUF];
    const float samples[] = {-FLT_MIN, -FLT_MAX, -1.17549435e-38f, -0.1f, -1e-45f};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++)
        assert_true(srv_fmt_float(samples[i], one) <= SRV_FMT_FLOAT_MAX);
    const size_t longest = SRV_FMT_FLOAT_MAX;
    for (size_t n = 1; n <= 300; n++) {
        size_t json = n * longest + (n - 1);
        size_t b64 = srv_b64_encoded_len(n * 4) + 2;
        if (api_rendered_bytes(n * 4, SRV_ENCODING_JSON) < json)
            fail_msg("%zu floats: JSON bound %zu < %zu", n,
                     api_rendered_bytes(n * 4, SRV_ENCODING_JSON), json);
        if (api_rendered_bytes(n * 4, SRV_ENCODING_B64) < b64)
            fail_msg("%zu floats: b64 bound %zu < %zu", n,
                     api_rendered_bytes(n * 4, SRV_ENCODING_B64), b64);
    }

    /* Huge results saturate rather than wrap to a small figure. */
    assert_int_equal(api_rendered_bytes(SIZE_MAX / 4, SRV_ENCODING_JSON), SIZE_MAX / 16 * 16);
    assert_int_equal(api_rendered_bytes(SIZE_MAX / 2, SRV_ENCODING_JSON), SIZE_MAX);
    assert_int_equal(api_rendered_bytes(SIZE_MAX, SRV_ENCODING_JSON), SIZE_MAX);
    assert_int_equal(api_rendered_bytes(SIZE_MAX, SRV_ENCODING_B64), SIZE_MAX);
    assert_int_equal(api_rendered_bytes(SIZE_MAX / 2, SRV_ENCODING_B64),
                     (SIZE_MAX / 8 / 3 + 1) * 16 + 64);
    /* The groups' characters fit, the 64 more do not. */
    size_t groups = SIZE_MAX / 16 - 1;
    assert_int_equal(api_rendered_bytes(groups * 12, SRV_ENCODING_B64), SIZE_MAX);
    groups = SIZE_MAX / 16 - 5; /* 16 (groups + 1) + 64 = SIZE_MAX - 15 */
    assert_int_equal(api_rendered_bytes(groups * 12, SRV_ENCODING_B64), (groups + 1) * 16 + 64);
}

static void test_check_memory(void **state)
{
    (void)state;
    const size_t mb = (size_t)1 << 20;
    srv_limits lim = lim_of(16, 4 * mb);
    api_err e;

    assert_true(api_check_memory(0, &lim, &e));
    assert_true(api_check_memory(4 * mb, &lim, &e)); /* exactly the limit */
    assert_false(api_check_memory(4 * mb + 1, &lim, &e));
    /* Rounded up: never the limit's own figure. */
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "",
           "request needs 5 MB (inputs, results, workspaces and the answer's text), limit 4 MB",
           "--max-request-mb", "POSATTN_MAX_REQUEST_MB", "base64 answers take a third of JSON's");
    assert_false(api_check_memory(8 * mb, &lim, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "", "request needs 8 MB", "limit 4 MB");
    assert_false(api_check_memory(SIZE_MAX - 1, &lim, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "", "request needs 17592186044416 MB");
    /* A saturated estimate says so instead of a figure. */
    assert_false(api_check_memory(SIZE_MAX, &lim, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "",
           "request needs more memory than can be counted, limit 4 MB", "--max-request-mb");
    assert_null(strstr(e.message, "18446744073709551615"));

    /* A limit that is not a whole number of MB. */
    lim.max_request_memory = 3 * mb / 2;
    assert_true(api_check_memory(3 * mb / 2, &lim, &e));
    assert_false(api_check_memory(3 * mb / 2 + 1, &lim, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "", "request needs 2 MB", "limit 1 MB");
    lim.max_request_memory = 0;
    assert_true(api_check_memory(0, &lim, &e));
    assert_false(api_check_memory(1, &lim, &e));
    ERR_IS(&e, SRV_ERR_PAYLOAD_TOO_LARGE, "", "request needs 1 MB", "limit 0 MB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_result_size),
        cmocka_unit_test(test_rendered_bytes),
        cmocka_unit_test(test_check_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
