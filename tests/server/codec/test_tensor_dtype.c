/* test_tensor_dtype.c - server/codec/tensor.c's wire types: a tensor's
 * "dtype" (f32, f16, bf16, f64) or "datatype" (FP32, FP16, BF16, FP64). b64
 * bytes of each type widen to exactly the values tests/ref_half.c gives
 * them; JSON numbers round once to the type (ties to even, no double
 * rounding through float32); values past a type's range, non-finite bytes,
 * wrong lengths, unknown and disagreeing names are errors naming the field;
 * a bias keeps -inf in any width. Exact: no tolerance.
 */
#include "codec/base64.h"
#include "codec/half.h"
#include "codec/tensor.h"
#include "ref_half.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD "inputs[0].q"

/* Parses json as kind; on success the floats (malloc'd) and their count. */
static float *parse(const char *json, srv_elem kind, size_t *n, srv_reply *err)
{
    cJSON *node = cJSON_Parse(json);
    srv_tensor t = {0};
    assert_non_null(node);
    memset(err, 0, sizeof *err);
    bool ok = srv_tensor_parse_as(node, FIELD, 0, 1 << 20, kind, NULL, &t, err);
    cJSON_Delete(node);
    if (!ok)
        return NULL;
    *n = t.count;
    return t.data;
}

static void expect_fail(const char *json, srv_elem kind, srv_error code, const char *field,
                        const char *msg)
{
    srv_reply err;
    size_t n;
    float *f = parse(json, kind, &n, &err);
    if (f != NULL)
        fail_msg("parse of %s succeeded", json);
    assert_int_equal(err.error, code);
    if (strstr(err.body, field) == NULL || (msg != NULL && strstr(err.body, msg) == NULL))
        fail_msg("%s: got %s, want field %s and ...%s...", json, err.body, field, msg ? msg : "");
    srv_reply_free(&err);
}

/* {"shape":[n],key:dt,"b64":...} of n little-endian elements of esize. */
static char *b64_tensor_key(const char *key, const char *dt, const unsigned char *bytes, size_t n,
                            size_t esize)
{
    size_t len = srv_b64_encoded_len(n * esize);
    char *b64 = tu_alloc(len + 1, 1), *json = tu_alloc(len + 96, 1);
    srv_b64_encode(bytes, n * esize, b64);
    b64[len] = '\0';
    snprintf(json, len + 96, "{\"shape\":[%zu],\"%s\":\"%s\",\"b64\":\"%s\"}", n, key, dt, b64);
    free(b64);
    return json;
}

static char *b64_tensor(const char *dt, const unsigned char *bytes, size_t n, size_t esize)
{
    return b64_tensor_key("dtype", dt, bytes, n, esize);
}

/* Every finite f16 and bf16 pattern as b64: widened to exactly its value;
 * the same through "datatype" names. */
static void test_b64_every_pattern(void **state)
{
    (void)state;
    unsigned char *bytes = tu_alloc(2 * 65536, 1);
    for (int bf = 0; bf < 2; bf++) {
        size_t n = 0;
        uint16_t *pat = tu_alloc(65536, sizeof *pat);
        for (uint32_t p = 0; p < 65536; p++) {
            double v = bf ? ref_bf16_value((uint16_t)p) : ref_f16_value((uint16_t)p);
            if (!isfinite(v))
                continue;
            pat[n] = (uint16_t)p;
            bytes[2 * n] = (unsigned char)(p & 0xff);
            bytes[2 * n + 1] = (unsigned char)(p >> 8);
            n++;
        }
        for (int named = 0; named < 2; named++) {
            const char *dt = bf ? (named ? "BF16" : "bf16") : (named ? "FP16" : "f16");
            char *json = b64_tensor_key(named ? "datatype" : "dtype", dt, bytes, n, 2);
            srv_reply err;
            size_t got_n = 0;
            float *f = parse(json, SRV_ELEM_FLOAT, &got_n, &err);
            if (f == NULL)
                fail_msg("%s: %s", dt, err.body);
            assert_int_equal(got_n, n);
            for (size_t i = 0; i < n; i++) {
                double want = bf ? ref_bf16_value(pat[i]) : ref_f16_value(pat[i]);
                if ((double)f[i] != want || !signbit(f[i]) != !signbit(want))
                    fail_msg("%s pattern 0x%04x: got %.9g, want %.9g", dt, pat[i], f[i], want);
            }
            free(f);
            free(json);
        }
        free(pat);
    }
    free(bytes);
}

/* "datatype":"FP16" works as "dtype":"f16" does; the two must agree. */
static void test_datatype_names(void **state)
{
    (void)state;
    srv_reply err;
    size_t n;
    float *f = parse("{\"shape\":[2],\"datatype\":\"FP16\",\"b64\":\"ADwAwA==\"}", SRV_ELEM_FLOAT,
                     &n, &err); /* 0x3c00 = 1, 0xc000 = -2 */
    assert_non_null(f);
    assert_true(f[0] == 1.0f && f[1] == -2.0f);
    free(f);
    f = parse("{\"shape\":[2],\"datatype\":\"BF16\",\"dtype\":\"bf16\",\"b64\":\"gD8AwA==\"}",
              SRV_ELEM_FLOAT, &n, &err); /* 0x3f80 = 1, 0xc000 = -2 */
    assert_non_null(f);
    assert_true(f[0] == 1.0f && f[1] == -2.0f);
    free(f);
    expect_fail("{\"shape\":[2],\"datatype\":\"FP16\",\"dtype\":\"bf16\",\"b64\":\"ADwAwA==\"}",
                SRV_ELEM_FLOAT, SRV_ERR_INVALID_ARGUMENT, FIELD ".dtype", "disagrees");
    expect_fail("{\"shape\":[2],\"dtype\":\"f8\",\"data\":[1,2]}", SRV_ELEM_FLOAT,
                SRV_ERR_UNSUPPORTED, FIELD ".dtype", "f16");
    expect_fail("{\"shape\":[2],\"dtype\":16,\"data\":[1,2]}", SRV_ELEM_FLOAT,
                SRV_ERR_INVALID_ARGUMENT, FIELD ".dtype", "string");
    expect_fail("{\"shape\":[2],\"dtype\":\"f16\",\"data\":[true,false]}", SRV_ELEM_BOOL,
                SRV_ERR_UNSUPPORTED, FIELD ".dtype", "BOOL");
}

/* JSON numbers round once to the type: 1 + 2^-11 (f16's tie between 1 and
 * its neighbour) goes to even, a hair above it goes up although float32
 * would first round it onto the tie; 0.1 becomes f16's 0.1; past the
 * range is an error. */
static void test_json_rounds_to_type(void **state)
{
    (void)state;
    srv_reply err;
    size_t n;
    char json[256];
    const double xs[] = {
        1.0 + 0x1p-11, 1.0 + 0x1p-11 + 0x1p-40, 0.1, -65504.0, 65519.0, 0x1p-24, 0x1p-26, 3.0e38};
    const int nx = (int)(sizeof xs / sizeof xs[0]);
    for (int bf = 0; bf < 2; bf++) {
        int at = snprintf(json, sizeof json, "{\"shape\":[%d],\"dtype\":\"%s\",\"data\":[",
                          bf ? nx : nx - 1, bf ? "bf16" : "f16");
        for (int i = 0; i < (bf ? nx : nx - 1); i++) /* f16 cannot hold 3e38 */
            at += snprintf(json + at, sizeof json - (size_t)at, "%s%.17g", i ? "," : "", xs[i]);
        snprintf(json + at, sizeof json - (size_t)at, "]}");
        float *f = parse(json, SRV_ELEM_FLOAT, &n, &err);
        if (f == NULL)
            fail_msg("%s: %s", json, err.body);
        for (int i = 0; i < (bf ? nx : nx - 1); i++) {
            double want =
                bf ? ref_bf16_value(ref_bf16_round(xs[i])) : ref_f16_value(ref_f16_round(xs[i]));
            if ((double)f[i] != want)
                fail_msg("%s %.17g: got %.9g, want %.9g", bf ? "bf16" : "f16", xs[i], f[i], want);
        }
        assert_true(bf || f[1] == (float)(1.0 + 0x1p-10)); /* rounded up, not to even */
        free(f);
    }
    expect_fail("{\"shape\":[1],\"dtype\":\"f16\",\"data\":[65520]}", SRV_ELEM_FLOAT,
                SRV_ERR_OUT_OF_RANGE, FIELD ".data[0]", "f16 range");
    expect_fail("{\"shape\":[1],\"dtype\":\"bf16\",\"data\":[3.4e38]}", SRV_ELEM_FLOAT,
                SRV_ERR_OUT_OF_RANGE, FIELD ".data[0]", "bf16 range");
}

/* f64 bytes: rounded to float32 once; beyond float32 an error; the b64
 * length is per the type; non-finite patterns are errors, except -inf in a
 * bias. */
static void test_b64_errors_and_f64(void **state)
{
    (void)state;
    srv_reply err;
    size_t n;
    const double d[3] = {0.1, -2.5, 1e-50};
    unsigned char bytes[24];
    for (int i = 0; i < 3; i++) {
        uint64_t u;
        memcpy(&u, &d[i], 8);
        for (int k = 0; k < 8; k++)
            bytes[8 * i + k] = (unsigned char)(u >> (8 * k));
    }
    char *json = b64_tensor("f64", bytes, 3, 8);
    float *f = parse(json, SRV_ELEM_FLOAT, &n, &err);
    assert_non_null(f);
    assert_true(f[0] == 0.1f && f[1] == -2.5f && f[2] == 0.0f);
    free(f);
    free(json);
    const double big = 1e39;
    uint64_t u;
    memcpy(&u, &big, 8);
    for (int k = 0; k < 8; k++)
        bytes[8 + k] = (unsigned char)(u >> (8 * k));
    json = b64_tensor("f64", bytes, 3, 8);
    expect_fail(json, SRV_ELEM_FLOAT, SRV_ERR_OUT_OF_RANGE, FIELD ".b64[1]", "outside float32");
    free(json);
    /* f16: 2 bytes each, so 4 floats' worth of text is 8 f16 values */
    expect_fail("{\"shape\":[3],\"dtype\":\"f16\",\"b64\":\"AAAAAA==\"}", SRV_ELEM_FLOAT,
                SRV_ERR_SHAPE_MISMATCH, FIELD ".b64", "3 f16 = 6 bytes");
    /* f16 inf (0x7c00) and NaN (0x7e00) */
    expect_fail("{\"shape\":[2],\"dtype\":\"f16\",\"b64\":\"AAAAfA==\"}", SRV_ELEM_FLOAT,
                SRV_ERR_OUT_OF_RANGE, FIELD ".b64[1]", "infinity");
    expect_fail("{\"shape\":[2],\"dtype\":\"bf16\",\"b64\":\"wH8AAA==\"}", SRV_ELEM_FLOAT,
                SRV_ERR_OUT_OF_RANGE, FIELD ".b64[0]", "NaN");
    /* -inf (0xfc00 in f16, 0xff80 in bf16) is a bias's own value */
    f = parse("{\"shape\":[2],\"dtype\":\"f16\",\"b64\":\"APwAPA==\"}", SRV_ELEM_FLOAT_NEG_INF, &n,
              &err);
    assert_non_null(f);
    assert_true(f[0] == -INFINITY && f[1] == 1.0f);
    free(f);
    f = parse("{\"shape\":[1],\"dtype\":\"bf16\",\"b64\":\"gP8=\"}", SRV_ELEM_FLOAT_NEG_INF, &n,
              &err);
    assert_non_null(f);
    assert_true(f[0] == -INFINITY);
    free(f);
    expect_fail("{\"shape\":[1],\"dtype\":\"bf16\",\"b64\":\"gP8=\"}", SRV_ELEM_FLOAT,
                SRV_ERR_OUT_OF_RANGE, FIELD ".b64[0]", "infinity");
}

/* srv_wire_overflow finds the first finite value that rounds to the
 * type's infinity, as narrowing one at a time tells it: at and around the
 * ties above each type's largest value, either sign, anywhere in a run;
 * infinities and NaNs (masked logits) are never an overflow. */
static void test_wire_overflow(void **state)
{
    (void)state;
    const float f16[] = {65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, FLT_MAX};
    const float bf[] = {3.3895314e38f, nextafterf(3.3963677e38f, 0.0f), 3.3963677e38f, FLT_MAX};
    float x[37];
    for (int w = 0; w < 2; w++) {
        const srv_wire wire = w ? SRV_WIRE_BF16 : SRV_WIRE_F16;
        const float *v = w ? bf : f16;
        const size_t nv = w ? sizeof bf / sizeof *bf : sizeof f16 / sizeof *f16;
        for (size_t k = 0; k < nv; k++)
            for (int sign = 0; sign < 2; sign++)
                for (size_t at = 0; at < 37; at += 6) {
                    size_t got = 99;
                    for (size_t i = 0; i < 37; i++)
                        x[i] = i % 3 == 0 ? -INFINITY : i % 5 == 0 ? NAN : 1.5f;
                    x[at] = sign ? -v[k] : v[k];
                    const uint16_t h = w ? srv_f32_to_bf16(x[at]) : srv_f32_to_f16(x[at]);
                    const bool want = (h & 0x7fffu) == (w ? 0x7f80u : 0x7c00u);
                    assert_int_equal(srv_wire_overflow(x, 37, wire, &got), want);
                    if (want)
                        assert_int_equal(got, at);
                }
    }
    for (size_t i = 0; i < 37; i++)
        x[i] = FLT_MAX;
    size_t got = 99;
    assert_false(srv_wire_overflow(x, 37, SRV_WIRE_F32, &got));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_every_pattern),   cmocka_unit_test(test_datatype_names),
        cmocka_unit_test(test_json_rounds_to_type), cmocka_unit_test(test_b64_errors_and_f64),
        cmocka_unit_test(test_wire_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
