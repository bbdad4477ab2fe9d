/* test_json_lift.c - server/json_lift.c: tensor number arrays parsed before
 * cJSON give exactly what cJSON and srv_tensor_parse give without it: the
 * same float bits, or the same error (code, field, message); what is not
 * plainly valid is left for cJSON; client strings cannot pose as markers.
 * With "dtype" f16 or bf16 the lifted float32 rounds on to the type, and
 * must still equal the text's own rounding, at the ties above all.
 * tests/server/codec/test_json_numbers.c tests the number readers.
 */
#include "codec/base64.h"
#include "codec/json_lift.h"
#include "codec/tensor.h"
#include "lift_fixture.h"
#include "ref_half.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_nested_and_shapes(void **state)
{
    (void)state;
    /* Fits: nested as the shape, or flat. */
    assert_int_equal(check_same("{\"t\":{\"shape\":[2,3],\"data\":[[1,2,3],[4,5,6]]}}"), 1);
    assert_int_equal(check_same("{\"t\":{\"shape\":[2,3],\"data\":[1,2,3,4,5,6]}}"), 1);
    assert_int_equal(check_same("{\"t\":{\"data\" : [ [ [1] , [2] ] ] , \"shape\":[1,2,1]}}"), 1);
    /* Lifted but not fitting: the usual errors, from the original text. */
    assert_int_equal(check_same("{\"t\":{\"shape\":[3,2],\"data\":[[1,2,3],[4,5,6]]}}"), 1);
    assert_int_equal(check_same("{\"t\":{\"shape\":[6],\"data\":[[1,2,3],[4,5,6]]}}"), 1);
    assert_int_equal(check_same("{\"t\":{\"shape\":[7],\"data\":[1,2,3,4,5,6]}}"), 1);
    assert_int_equal(check_same("{\"t\":{\"shape\":[2,2,2],\"data\":[[1,2],[3,4]]}}"), 1);
}

static void test_left_for_cjson(void **state)
{
    (void)state;
    static const char *const arrays[] = {
        "[[1,2],[3]]",
        "[1,[2]]",
        "[[1],2]",
        "[]",
        "[[]]",
        "[1,\"2\"]",
        "[1,null]",
        "[true]",
        "[01]",
        "[1.]",
        "[.5]",
        "[+1]",
        "[1e]",
        "[-]",
        "[1,]",
        "[1 2]",
        "[1e39]",
        "[-3.5e38]",
        "[1e999]",
        "[[[[[[[[[1]]]]]]]]]",
        "[1234567890123456789012345678901234567890123456789012345678901234]"};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) {
        for (int pad = 0; pad < 2; pad++) { /* without and with the fast paths' slack after */
            char body[256];
            snprintf(body, sizeof body, "{\"t\":{\"shape\":[1],\"data\":%s}%s%s%s}", arrays[i],
                     pad ? ", \"pad\": \"" : "", pad ? PAD : "", pad ? "\"" : "");
            cJSON *j = cJSON_Parse(body);
            if (j == NULL)
                continue; /* not JSON at all: api_body_read's business */
            cJSON_Delete(j);
            if (check_same(body) != 0)
                fail_msg("lifted %s", body);
        }
    }
}

static void test_b64(void **state)
{
    (void)state;
    /* 1.0, -2.5, 3e38 as little-endian float32. */
    const char *ok = "AACAPwAAIMA5tmF/";
    static const char *const cases[] = {
        "{\"t\":{\"shape\":[3],\"b64\":\"%s\"}}",      /* fits */
        "{\"t\":{\"b64\" : \"%s\", \"shape\":[1,3]}}", /* fits, other order */
        "{\"t\":{\"shape\":[4],\"b64\":\"%s\"}}",      /* wrong size: usual error */
        "{\"t\":{\"shape\":[3],\"data\":\"%s\"}}",     /* base64 under data */
    };
    char body[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(body, sizeof body, cases[i], ok);
        assert_int_equal(check_same(body), i < 3 ? 1 : 0);
    }
    /* Not base64, padding, a NaN, an escape, numbers: left for cJSON. */
    static const char *const left[] = {
        "{\"t\":{\"shape\":[1],\"b64\":\"AAC*\"}}",   "{\"t\":{\"shape\":[1],\"b64\":\"AACAPw=\"}}",
        "{\"t\":{\"shape\":[1],\"b64\":\"AACA\"}}",   "{\"t\":{\"shape\":[1],\"b64\":\"\"}}",
        "{\"t\":{\"shape\":[1],\"b64\":\"AAC\\/\"}}", "{\"t\":{\"shape\":[1],\"b64\":[1]}}",
    };
    for (size_t i = 0; i < sizeof left / sizeof *left; i++)
        assert_int_equal(check_same(left[i]), 0);
    /* A NaN inside: left for cJSON (the lift checks each decoded block),
     * the same error either way. */
    assert_int_equal(check_same("{\"t\":{\"shape\":[1],\"b64\":\"AADAfw==\"}}"), 0);

    /* Long enough to be decoded in several steps (json_lift.c B64_STEP,
     * 64 Ki characters): lifted whole; an inf in a later step, or padding
     * at the end of a step, is not lifted and gets the usual error. */
    enum { N = 60000 }; /* 240000 bytes, 320000 characters: 5 steps */
    float *vals = malloc(N * sizeof *vals);
    char *big = malloc(N * sizeof(float) / 3 * 4 + 256);
    assert_non_null(vals);
    assert_non_null(big);
    for (int variant = 0; variant < 4; variant++) {
        size_t at = (size_t)sprintf(big, "{\"t\":{\"shape\":[%d],\"b64\":\"", N);
        for (size_t i = 0; i < N; i++)
            vals[i] = (float)i * 0.25f - 7000.0f;
        if (variant == 1)
            vals[N - 10] = INFINITY; /* in the last step */
        if (variant == 2)
            vals[12288 + 1] = NAN; /* in the second step */
        srv_b64_encode((const unsigned char *)vals, N * sizeof *vals, big + at);
        if (variant == 3) { /* the first two steps end in a padded quad */
            memcpy(big + at + 65536 - 4, "AA==", 4);
            memcpy(big + at + 2 * 65536 - 4, "AA==", 4);
        }
        strcat(big, "\"}}");
        assert_int_equal(check_same(big), variant == 0 ? 1 : 0);
    }
    free(vals);
    free(big);
    /* output_encoding's value "b64" is not a key. */
    srv_lift lift;
    const char *v = "{\"output_encoding\":\"b64\",\"x\":\"AAAA\"}";
    assert_false(srv_lift_scan(v, strlen(v), &lift));
}

static void test_only_data_values(void **state)
{
    (void)state;
    srv_lift lift;
    /* Other keys, "data" as a value, and "data" under another spelling. */
    const char *body = "{\"shape\":[1,2],\"x\":\"data\",\"y\":[3,4],\"Data\":[5],\"datas\":[6]}";
    assert_false(srv_lift_scan(body, strlen(body), &lift));
    /* A "data" key inside a string is text, not a key. */
    body = "{\"s\":\"a \\\"data\\\": [1,2]\",\"t\":{\"shape\":[1],\"data\":[7]}}";
    assert_true(srv_lift_scan(body, strlen(body), &lift));
    assert_int_equal(lift.count, 1);
    assert_true(lift.items[0].n == 1 && lift.items[0].data[0] == 7.0f);
    assert_non_null(strstr(lift.text, "\"a \\\"data\\\": [1,2]\""));
    srv_lift_free(&lift);
}

/* A client string cannot be read as a marker: a body with a \u escape or a
 * raw control byte in a string is not lifted at all. */
static void test_markers_unforgeable(void **state)
{
    (void)state;
    srv_lift lift;
    outcome o;
    const char *forged = "{\"t\":{\"shape\":[1],\"data\":\"\\u00010\"},\"u\":{\"data\":[9]}}";
    assert_false(srv_lift_scan(forged, strlen(forged), &lift));
    assert_int_equal(parse_t(forged, true, &o), 0);
    assert_false(o.ok);
    assert_non_null(strstr(o.err.body, "must be an array"));
    outcome_free(&o);

    const char raw[] = "{\"s\":\"\x01"
                       "0\",\"t\":{\"shape\":[1],\"data\":[1]}}";
    assert_false(srv_lift_scan(raw, strlen(raw), &lift));

    /* Without its lift, a marker is just a string. */
    const char *body = "{\"t\":{\"shape\":[2],\"data\":[1,2]}}";
    assert_true(srv_lift_scan(body, strlen(body), &lift));
    cJSON *root = cJSON_Parse(lift.text);
    const cJSON *data =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "t"), "data");
    assert_null(srv_lift_find(NULL, data));
    assert_true(srv_lift_find(&lift, data) == &lift.items[0]);
    cJSON_Delete(root);
    srv_lift_free(&lift);
}

/* srv_lift_reparse gives a marker's original text as cJSON reads it:
 * nested numbers as nested arrays (spacing and spelling as sent), base64
 * as its string; for anything else NULL, and no failure. */
static void test_reparse(void **state)
{
    (void)state;
    srv_lift lift;
    bool failed = true;
    const char *body = "{\"t\":{\"shape\":[2,2],\"data\":[[1, 2.50],[3e0,-4]]},"
                       "\"u\":{\"shape\":[3],\"b64\":\"AACAPwAAIMA5tmF/\"},\"v\":\"x\"}";
    assert_true(srv_lift_scan(body, strlen(body), &lift));
    cJSON *root = cJSON_Parse(lift.text);
    assert_non_null(root);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "t");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "u");
    cJSON *tree = srv_lift_reparse(&lift, cJSON_GetObjectItemCaseSensitive(t, "data"), &failed);
    assert_false(failed);
    assert_non_null(tree);
    assert_int_equal(cJSON_GetArraySize(tree), 2);
    assert_true(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetArrayItem(tree, 0), 1)) == 2.5);
    assert_true(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetArrayItem(tree, 1), 1)) == -4.0);
    cJSON_Delete(tree);
    failed = true;
    tree = srv_lift_reparse(&lift, cJSON_GetObjectItemCaseSensitive(u, "b64"), &failed);
    assert_false(failed);
    assert_true(cJSON_IsString(tree));
    assert_string_equal(cJSON_GetStringValue(tree), "AACAPwAAIMA5tmF/");
    cJSON_Delete(tree);
    /* Not markers: a plain string, a shape, and a marker without its lift. */
    failed = true;
    assert_null(srv_lift_reparse(&lift, cJSON_GetObjectItemCaseSensitive(root, "v"), &failed));
    assert_false(failed);
    failed = true;
    assert_null(srv_lift_reparse(&lift, cJSON_GetObjectItemCaseSensitive(t, "shape"), &failed));
    assert_false(failed);
    failed = true;
    assert_null(srv_lift_reparse(NULL, cJSON_GetObjectItemCaseSensitive(t, "data"), &failed));
    assert_false(failed);
    cJSON_Delete(root);
    srv_lift_free(&lift);
}

/* Base64 of a bf16 or f16 tensor: taken from the lift and widened (the
 * same floats as the text path), or, where the lift cannot take it, the
 * same answer or error: an infinity or NaN among the values (the lift's
 * float32 words pass some of them), an odd count (bytes not whole float32
 * words: the text path, the same floats), and a size the shape does not
 * fit. */
static void test_b64_half(void **state)
{
    (void)state;
    enum { N = 4096 };
    uint16_t v[N + 1];
    char *body = malloc(N * 3 + 256);
    uint64_t seed = 7;
    assert_non_null(body);
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int c = 0; c < 6; c++) {
            const int n = c == 4 ? N - 1 : N, shape = c == 5 ? N + 2 : n;
            for (int i = 0; i < n; i++) {
                uint16_t h = (uint16_t)splitmix(&seed);
                /* finite: an exponent below the top */
                if (bf16 ? (h & 0x7f80u) == 0x7f80u : (h & 0x7c00u) == 0x7c00u)
                    h ^= bf16 ? 0x4000u : 0x4000u;
                v[i] = h;
            }
            if (c == 1) /* an infinity, in the high half of a float32 word */
                v[777] = bf16 ? 0xff80u : 0x7c00u;
            if (c == 2) /* in the low half */
                v[778] = bf16 ? 0x7f80u : 0xfc00u;
            if (c == 3) /* a NaN */
                v[1001] = bf16 ? 0x7fc1u : 0x7e01u;
            int at = sprintf(body, "{\"t\":{\"shape\":[%d],\"dtype\":\"%s\",\"b64\":\"", shape,
                             bf16 ? "bf16" : "f16");
            unsigned char bytes[2 * (N + 1)];
            for (int i = 0; i < n; i++) {
                bytes[2 * i] = (unsigned char)(v[i] & 0xff);
                bytes[2 * i + 1] = (unsigned char)(v[i] >> 8);
            }
            srv_b64_encode(bytes, 2 * (size_t)n, body + at);
            strcat(body, "\"}}");
            outcome o;
            const size_t lifted = check_same(body);
            parse_t(body, true, &o);
            if (c == 0 || c == 4) { /* valid; an odd count is not lifted */
                assert_int_equal(lifted, c == 0 ? 1 : 0);
                assert_true(o.ok);
                for (int i = 0; i < n; i++) {
                    const double want = bf16 ? ref_bf16_value(v[i]) : ref_f16_value(v[i]);
                    if ((double)o.t.data[i] != want || !signbit(o.t.data[i]) != !signbit(want))
                        fail_msg("%s element %d: %a, want %a", bf16 ? "bf16" : "f16", i,
                                 (double)o.t.data[i], want);
                }
            } else {
                assert_false(o.ok);
            }
            outcome_free(&o);
        }
    free(body);
}

/* f16 and bf16 data: decimals on, just off and far from the ties, past the
 * ranges, then random ones; each equal to the text path bit for bit (a
 * lifted float32 that sits on a tie must not round on: 1.000488281250001
 * is above the f16 tie 1 + 2^-11 but its float32 is the tie). */
static void test_half_dtypes(void **state)
{
    (void)state;
    static const char *const fixed[] = {
        "1.00048828125",   "1.000488281250001", "1.000488281249999", "-1.000488281250001",
        "1.00146484375",   "65504",             "65519.99",          "65520",
        "65520.0000001",   "2.98023223876953125e-8", "2.9802322387695313e-8", "3e-8",
        "1e-9",            "1.00390625",        "1.0039062500001",   "1.0117187500001",
        "3.3961e38",       "3.3895313892515355e38", "0.1",           "-0"};
    static const char *const types[] = {"f16", "bf16"};
    char body[512];
    tu_rng rng;
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
            snprintf(body, sizeof body,
                     "{\"t\":{\"dtype\":\"%s\",\"shape\":[2],\"data\":[0.5,%s]}, \"pad\": \"" PAD "\"}",
                     types[t], fixed[i]);
            assert_int_equal(check_same(body), 1);
        }
    }
    /* Ties among other numbers, nested and spaced: read again from the text. */
    for (int t = 0; t < 2; t++) {
        snprintf(body, sizeof body,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[2,3],\"data\":[[ 1.000488281250001 ,0.25,"
                 "1.0039062500001],\n[1.00048828125,\t-1.0039062499999, 1.00390625E0 ]]}, "
                 "\"pad\": \"" PAD "\"}",
                 types[t]);
        assert_int_equal(check_same(body), 1);
    }
    /* Ties far apart among many numbers, in rows of 50, with and without
     * spaces: each found again by counting the commas before it. */
    for (int t = 0; t < 4; t++) {
        static const size_t at[] = {0, 1, 9, 57, 58, 400, 1203, 1999};
        const size_t n = 2000;
        size_t len = 0, k = 0;
        char *big = malloc(n * 24 + 128);
        assert_non_null(big);
        len += (size_t)sprintf(big, "{\"t\":{\"dtype\":\"%s\",\"shape\":[40,50],\"data\":[",
                               types[t & 1]);
        for (size_t i = 0; i < n; i++) {
            const bool tie = k < sizeof at / sizeof *at && at[k] == i;
            k += tie;
            len += (size_t)sprintf(big + len, "%s%s%s%s", i % 50 == 0 ? (i ? "],[" : "[") : ",",
                                   t & 2 ? " " : "",
                                   tie ? (i & 1 ? "-1.0039062500001" : "1.000488281250001")
                                       : (i % 3 ? "0.25" : "-1.5e-3"),
                                   t & 2 ? "\n" : "");
        }
        sprintf(big + len, "]]}}");
        assert_int_equal(check_same(big), 1);
        free(big);
    }
    tu_rng_seed(&rng, 17);
    for (int r = 0; r < 20; r++) {
        size_t at = 0, n = 512;
        char *big = malloc(n * 32 + 128);
        assert_non_null(big);
        at += (size_t)sprintf(big, "{\"t\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data\":[",
                              types[r & 1], n);
        for (size_t i = 0; i < n; i++) {
            double v = tu_uniform(&rng, -1, 1) * pow(10.0, tu_uniform(&rng, -9, 4));
            at += (size_t)sprintf(big + at, i ? ",%.*g" : "%.*g", 3 + (int)(i % 15), v);
        }
        sprintf(big + at, "]}}");
        assert_int_equal(check_same(big), 1);
        free(big);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_and_shapes),
        cmocka_unit_test(test_half_dtypes),
        cmocka_unit_test(test_left_for_cjson),
        cmocka_unit_test(test_b64),
        cmocka_unit_test(test_only_data_values),
        cmocka_unit_test(test_markers_unforgeable),
        cmocka_unit_test(test_reparse),
        cmocka_unit_test(test_b64_half),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
