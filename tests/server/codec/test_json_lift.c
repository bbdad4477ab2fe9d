/* test_json_lift.c - server/json_lift.c: tensor number arrays parsed before
 * cJSON give exactly what cJSON and srv_tensor_parse give without it: the
 * same float bits, or the same error (code, field, message); what is not
 * plainly valid is left for cJSON; client strings cannot pose as markers.
 * With "dtype" f16 or bf16 the lifted float32 rounds on to the type, and
 * must still equal the text's own rounding, at the ties above all.
 */
#include "codec/json_array.h"
#include "codec/json_check.h"
#include "codec/json_lift.h"
#include "codec/base64.h"
#include "codec/tensor.h"
#include "ref_half.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text put after an array so that its numbers have the parser's fast-path
 * slack after them. */
#define PAD "................................................"

typedef struct outcome {
    bool ok;
    srv_tensor t;
    srv_reply err;
} outcome;

/* Parses body's member "t" as a tensor, with or without the lift. Returns
 * how many arrays were lifted. */
static size_t parse_t(const char *body, bool use_lift, outcome *o)
{
    srv_lift lift;
    bool lifted = use_lift && srv_lift_scan(body, strlen(body), &lift);
    cJSON *root = cJSON_Parse(lifted ? lift.text : body);
    size_t n = lifted ? lift.count : 0;
    memset(o, 0, sizeof *o);
    assert_non_null(root);
    o->ok = srv_tensor_parse_as(cJSON_GetObjectItemCaseSensitive(root, "t"), "t", 0, 1u << 20,
                                SRV_ELEM_FLOAT, lifted ? &lift : NULL, &o->t, &o->err);
    cJSON_Delete(root);
    if (lifted)
        srv_lift_free(&lift);
    return n;
}

static void outcome_free(outcome *o)
{
    srv_tensor_free(&o->t);
    srv_reply_free(&o->err);
}

/* Both ways agree; returns the number of arrays lifted. */
static size_t check_same(const char *body)
{
    outcome a, b;
    size_t n = parse_t(body, true, &a);
    parse_t(body, false, &b);
    if (a.ok != b.ok)
        fail_msg("lifted %s, plain %s: %.200s", a.ok ? "ok" : "error", b.ok ? "ok" : "error", body);
    if (a.ok) {
        assert_int_equal(a.t.ndim, b.t.ndim);
        assert_int_equal(a.t.count, b.t.count);
        assert_memory_equal(a.t.shape, b.t.shape, sizeof a.t.shape);
        if (memcmp(a.t.data, b.t.data, a.t.count * sizeof(float)) != 0)
            fail_msg("float bits differ: %.200s", body);
    } else {
        assert_int_equal(a.err.http_status, b.err.http_status);
        assert_int_equal(a.err.body_len, b.err.body_len);
        assert_memory_equal(a.err.body, b.err.body, a.err.body_len);
    }
    outcome_free(&a);
    outcome_free(&b);
    return n;
}

static void test_numbers_bit_identical(void **state)
{
    (void)state;
    static const char *const fixed[] = {"0",
                                        "-0",
                                        "1",
                                        "-1",
                                        "0.5",
                                        "1e0",
                                        "1E+2",
                                        "2e-3",
                                        "123456789",
                                        "0.1",
                                        "0.30000001",
                                        "3.4028235e38",
                                        "3.40282356e38",
                                        "-3.4028235e38",
                                        "1e-45",
                                        "1.4e-45",
                                        "7e-46",
                                        "1e-400",
                                        "9007199254740993",
                                        "12345678901234567890123",
                                        "0.000000000000000000001234",
                                        "1.00000000000000000000000001",
                                        "4.9406564584124654e-324",
                                        "1e22",
                                        "1e23",
                                        "8e-23",
                                        "123456789012345678e-30",
                                        "0e400",
                                        "-0.0e-5",
                                        /* 2^64 + 1 and 2^64 as 20 digits: a
                                         * 64-bit digit sum would wrap */
                                        "1844674.4073709551617",
                                        "-18446744.073709551616"};
    char body[8192];
    size_t at = (size_t)snprintf(body, sizeof body, "{\"t\":{\"shape\":[%zu],\"data\":[",
                                 sizeof fixed / sizeof *fixed);
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        at += (size_t)snprintf(body + at, sizeof body - at, "%s%s", i ? ", " : "", fixed[i]);
    snprintf(body + at, sizeof body - at, "]}}");
    assert_int_equal(check_same(body), 1);
    /* The same followed by enough text that the last numbers, too, take the
     * fast paths (they need some bytes of text after them). */
    snprintf(body + at, sizeof body - at, "]}, \"pad\": \"%s\"}", PAD);
    assert_int_equal(check_same(body), 1);

    /* Every digit-run shape around the fast path's limits: 1-10 integer
     * digits, 0-20 fraction digits (leading zeros among them), signs. */
    tu_rng digits;
    tu_rng_seed(&digits, 7);
    for (int lz = 0; lz < 2; lz++) {
        char *big = malloc(64 * 1024);
        size_t n = 0;
        at = 0;
        for (int i = 1; i <= 10; i++) {
            for (int f = 0; f <= 20; f++, n++) {
                char num[40];
                size_t k = 0;
                if (n % 2)
                    num[k++] = '-';
                for (int d = 0; d < i; d++)
                    num[k++] = (char)('0' + (d == 0 ? 1 + (int)tu_uniform(&digits, 0, 8.99)
                                                    : (int)tu_uniform(&digits, 0, 9.99)));
                if (lz && i == 1)
                    num[k - 1] = '0';
                if (f > 0)
                    num[k++] = '.';
                for (int d = 0; d < f; d++)
                    num[k++] =
                        (char)('0' + (lz && d < f / 2 ? 0 : (int)tu_uniform(&digits, 0, 9.99)));
                num[k] = '\0';
                at += (size_t)sprintf(big + 200 + at, "%s%s", n ? "," : "", num);
            }
        }
        char head[200];
        int h = snprintf(head, sizeof head, "{\"t\":{\"shape\":[%zu],\"data\":[", n);
        memmove(big + 200 - h, head, (size_t)h);
        sprintf(big + 200 + at, "]}, \"pad\": \"%s\"}", PAD);
        assert_int_equal(check_same(big + 200 - h), 1);
        free(big);
    }

    /* Random floats and doubles in every usual print form. */
    static const char *const fmts[] = {"%.9g", "%.17g", "%g", "%.3e", "%.12f", "%.0f"};
    tu_rng rng;
    tu_rng_seed(&rng, 31);
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
        char *big = malloc(300000);
        size_t n = 4000;
        at = (size_t)sprintf(big, "{\"t\":{\"shape\":[%zu],\"data\":[", n);
        for (size_t i = 0; i < n; i++) {
            double mag = pow(10.0, tu_uniform(&rng, -30, 30));
            double v = tu_uniform(&rng, -1, 1) * (f == 5 ? 1e6 : mag);
            at += (size_t)sprintf(big + at, i ? "," : "");
            at += (size_t)sprintf(big + at, fmts[f], v);
        }
        sprintf(big + at, "]}}");
        assert_int_equal(check_same(big), 1);
        free(big);
    }
}

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

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* One number's text as srv_json_number reads it against strtod's double,
 * bit for bit. */
static void same_double(const char *text)
{
    double got, want = strtod(text, NULL);
    if (!srv_json_number(text, strlen(text), &got) || memcmp(&got, &want, sizeof got) != 0)
        fail_msg("%s: lift %a, strtod %a", text, got, want);
}

/* m 10^-k written as digits with the point placed (or before leading
 * zeros), or as m then an exponent. */
static void write_scaled(char *buf, size_t cap, uint64_t m, int k, bool exponent)
{
    char d[24];
    const int n = snprintf(d, sizeof d, "%llu", (unsigned long long)m);
    if (exponent)
        snprintf(buf, cap, "%se-%d", d, k);
    else if (k < n)
        snprintf(buf, cap, "%.*s.%s", n - k, d, d + n - k);
    else
        snprintf(buf, cap, "0.%0*d%s", k - n, 0, d);
}

/* Numbers of 17 to 19 significant digits over 10^1 .. 10^22, which Python
 * writes for float32 values widened to double, past the exact fast path
 * (more than 2^53): the double the lift makes by multiplication is
 * strtod's, at random, on the ties between two doubles (which only the
 * division decides) and beside them, and beside float32's ties, where a
 * double one unit off would round to the other float. */
static void test_long_numbers(void **state)
{
    (void)state;
    uint64_t seed = 41;
    char buf[64];
    enum { BATCH = 500 };
    char *body = malloc(BATCH * 32 + 64);
    size_t at = 0;
    assert_non_null(body);
    for (int i = 0; i < 300000; i++) {
        const uint64_t r = splitmix(&seed);
        const int k = 1 + (int)(r % 22), digits = 16 + (int)((r >> 8) % 4);
        uint64_t m = splitmix(&seed);
        if (digits < 20) { /* into [10^(digits-1), 10^digits) */
            uint64_t lo = 1, span;
            for (int j = 1; j < digits; j++)
                lo *= 10;
            span = digits == 19 ? UINT64_MAX - lo : 9 * lo;
            m = lo + m % span;
        }
        write_scaled(buf, sizeof buf, m, k, (r >> 16) & 1);
        same_double(buf);
        /* Some in arrays too, through the lift's own readers (scalar and
         * eight at a time), against cJSON's floats. */
        if (i < 40 * BATCH) {
            if (i % BATCH == 0)
                at = (size_t)sprintf(body, "{\"t\":{\"shape\":[%d],\"data\":[", BATCH);
            at += (size_t)sprintf(body + at, "%s%s", i % BATCH ? "," : "", buf);
            if (i % BATCH == BATCH - 1) {
                strcpy(body + at, "]}}");
                srv_lift_force_scalar(i / BATCH % 2 == 1);
                assert_int_equal(check_same(body), 1);
                srv_lift_force_scalar(false);
            }
        }
    }
    free(body);
    /* Ties: a (54 bits, odd) 2^-s is halfway between two doubles; it is
     * m 10^-k with m = a 5^k 2^(k - s), for s <= k. And its neighbours. */
    for (int k = 1; k <= 4; k++) {
        uint64_t p5 = 1;
        for (int j = 0; j < k; j++)
            p5 *= 5;
        for (int i = 0; i < 2000; i++) {
            const uint64_t a = (((uint64_t)1 << 53) | (splitmix(&seed) >> 11)) | 1;
            const int s = (int)(splitmix(&seed) % (uint64_t)(k + 1));
            const uint64_t m = a * p5 << (k - s);
            if (m / p5 >> (k - s) != a || m <= ((uint64_t)1 << 53))
                continue; /* past 2^64 */
            for (int dm = -1; dm <= 1; dm++) {
                write_scaled(buf, sizeof buf, m + (uint64_t)(int64_t)dm, k, dm == 0);
                same_double(buf);
            }
        }
    }
    /* Halfway between two float32 values, as 17 to 19 digits near it. */
    for (int i = 0; i < 20000; i++) {
        const float f = (float)ldexp((double)(splitmix(&seed) >> 40) + 0x1p24, -24 - i % 40);
        const double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
        for (int digits = 17; digits <= 19; digits++) {
            snprintf(buf, sizeof buf, "%.*e", digits - 1, mid);
            same_double(buf);
            snprintf(buf, sizeof buf, "%.*e", digits - 1, nextafter(mid, 0.0));
            same_double(buf);
        }
    }
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

/* The run of plain numbers parsed without the per-element loop (json_lift.c's
 * parse_leaf_fast): every element shape it takes or hands back, at every
 * place in an array, each array ending at every distance from the body's
 * end (the run needs 48 bytes after an element), so that taking a number
 * it should not, or ending a run one element off, shows as different bits,
 * a shape error, or an array lifted that cJSON refuses. */
static void test_fast_runs(void **state)
{
    (void)state;
    /* Plain (taken), then shapes the run hands back to the careful loop. */
    static const char *const elems[] = {
        "0.5", "-0.25", "7", "-0", "0", "0.0", "1234567.1234567890", "9.000000000000001",
        "0.12345678", "0.123456789", "-1.00000000", "1234567.123456789012",
        /* exponents read in the runs (m * 10^e10 for |e10| <= 22), and
         * past that handed back */
        "1e22", "1e-22", "1.5e+05", "1e05", "-2.5E-3", "1.234567890123e-10", "9.9e-7", "0e0",
        "-0e-0", "4.0584753e-5", "7e+22", "1e23", "1e-23", "1.2345678901234e-10", "4e-45",
        "3.4028235e38", "1e38", "123e-2",
        /* halfway between two floats: ties to even, as strtod + cast */
        "4194304.25", "4194304.75", "-8388607.5", "2097152.125", "0.000030517578125",
        /* handed back */
        "12345678", "12345678.5", "1e3", "1.5E-3", "0.5e1", "1.1234567890123",
        "-0.1234567890123456", "9007199254740993", "0.90071992547409931", "1234567.1234567890123",
        /* 2^64 + 1 and 2^64 in 20 digits: a 64-bit digit sum would wrap */
        "1844674.4073709551617", "-1844674.4073709551616"};
    static const char *const bad[] = {"01",   "-01",   "00.5", "1.",   ".5",    "-",     "+1",
                                      "1.e5", "\"1\"", "1 2",  "[1]",  "1,",    "1e",    "-.5",
                                      "0x10", "1.5.5", ":.5",  "0.:",  "1:",    "/.5",   "0./",
                                      "1.5:", "1e+",   "1e-",  "1ee2", "1e2.5", "1e2e3", "1.5e",
                                      "1e 2", "1e+-2", "01e2", "1.e2", "1e2:"};
    static const char *const seps[] = {",", ", ", " , ", ",\n  "};
    const size_t ne = sizeof elems / sizeof *elems;
    char *body = malloc(1 << 16);
    tu_rng rng;
    tu_rng_seed(&rng, 5);

    /* Each element shape among plain ones at each place of a 24-element
     * array, with each separator, then followed by 0..64 pad bytes. */
    for (size_t e = 0; e < ne; e++) {
        for (size_t sep = 0; sep < sizeof seps / sizeof *seps; sep++) {
            for (int place = 0; place < 24; place += 5) {
                for (int pad = 0; pad <= 64; pad += (pad < 56 ? 7 : 1)) {
                    size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[24],\"data\":[");
                    for (int i = 0; i < 24; i++) {
                        if (i)
                            at += (size_t)sprintf(body + at, "%s", seps[(sep + (size_t)i / 7) % 4 == 0 ? 0 : sep]);
                        if (i == place)
                            at += (size_t)sprintf(body + at, "%s", elems[e]);
                        else
                            at += (size_t)sprintf(body + at, "%s", elems[(size_t)tu_uniform(&rng, 0, 16.99)]);
                    }
                    sprintf(body + at, "]}, \"p\": \"%.*s\"}", pad, PAD PAD);
                    assert_int_equal(check_same(body), 1);
                }
            }
        }
    }
    /* A bad element after a run of plain ones: nothing lifted, the usual
     * error from cJSON or the shape check. */
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        for (int place = 0; place < 3; place++) {
            size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[3],\"data\":[");
            for (int i = 0; i < 3; i++)
                at += (size_t)sprintf(body + at, "%s%s", i ? "," : "", i == place ? bad[b] : "0.5");
            sprintf(body + at, "]}, \"p\": \"%s\"}", PAD);
            cJSON *j = cJSON_Parse(body);
            if (j == NULL) {
                /* Not JSON: api_body_read checks the text after the lift,
                 * so the lift must leave the array in it. */
                srv_lift lift;
                if (srv_lift_scan(body, strlen(body), &lift)) {
                    srv_lift_free(&lift);
                    fail_msg("lifted %s", body);
                }
                continue;
            }
            cJSON_Delete(j);
            if (check_same(body) != 0)
                fail_msg("lifted %s", body);
        }
    }
    /* Halfway between two floats, and one unit of the last digit either
     * side, with 2..11 fraction digits (floats of 2^13..2^22, whose
     * halfway points have that many binary and so decimal places): the
     * double must be the correctly rounded one for the float conversion
     * to tie to even as strtod + cast does (a division by 10^k, not a
     * multiplication by its rounded reciprocal). Then the same with an
     * exponent and a newline after each comma: the careful loop's
     * parse_number. */
    for (int e = 13; e <= 22 + 10; e++) {
        const int frac = 24 - (e > 22 ? e - 10 : e);
        const char *sep = e > 22 ? ",\n" : ",", *expo = e > 22 ? "e0" : "";
        size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[600],\"data\":[");
        for (int i = 0; i < 200; i++) {
            const double j = floor(tu_uniform(&rng, 0, 1 << 23));
            const double h =
                ldexp(2 * (double)((1 << 23) + (int64_t)j) + 1, (e > 22 ? e - 10 : e) - 24);
            const double unit = pow(10.0, -frac);
            for (int side = -1; side <= 1; side++)
                at += (size_t)sprintf(body + at, "%s%.*f%s", i || side > -1 ? sep : "", frac,
                                      h + side * unit, expo);
        }
        sprintf(body + at, "]}, \"p\": \"%s\"}", PAD);
        assert_int_equal(check_same(body), 1);
    }
    /* 17 to 19 significant digits (as Python writes a float32 widened to
     * double, and more), past 2^53 and so past Clinger's exact path: the
     * midpoints between neighbouring floats, which such digits name to
     * within far less than half a double's unit, so strtod lands on the
     * midpoint's double and the float conversion ties to even; a double one
     * unit off would round the other way. Then the floats themselves, and
     * with exponents and newlines (the careful loop). */
    for (int form = 0; form < 5; form++) {
        size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[600],\"data\":[");
        for (int i = 0; i < 600; i++) {
            const float f =
                (float)(tu_uniform(&rng, -1, 1) * pow(10.0, floor(tu_uniform(&rng, -6, 5))));
            const double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
            const int digits = 17 + i % 3;
            /* Form 4: 18 or 19 digits next to the point halfway between
             * the midpoint's double and the next one up, where the double
             * strtod picks decides which way the float goes: the
             * quotient's rounding, its sticky bit included. */
            const long double tie = ((long double)mid + nextafter(mid, INFINITY)) / 2;
            if (form == 4)
                at += (size_t)sprintf(body + at, "%s%.*Le", i ? "," : "", 17 + i % 2, tie);
            else if (form == 0)
                at += (size_t)sprintf(body + at, "%s%.*g", i ? "," : "", digits, mid);
            else if (form == 1)
                at += (size_t)sprintf(body + at, "%s%.*g", i ? ", " : "", digits, (double)f);
            else if (form == 2)
                at += (size_t)sprintf(body + at, "%s%.*e", i ? "," : "", digits - 1, mid);
            else
                at += (size_t)sprintf(body + at, "%s%.*g", i ? ",\n" : "", digits, mid);
        }
        sprintf(body + at, "]}, \"p\": \"%s\"}", PAD);
        assert_int_equal(check_same(body), 1);
    }
    /* Nested: runs in each innermost array, and a ragged one. */
    assert_int_equal(check_same("{\"t\":{\"shape\":[2,2],\"data\":[[0.5,-1.25],[3,4.0]]},\"p\":\"" PAD
                                "\"}"),
                     1);
    assert_int_equal(check_same("{\"t\":{\"shape\":[2,2],\"data\":[[0.5,-1.25],[3,4.0,5]]},\"p\":\"" PAD
                                "\"}"),
                     0);
    /* A number at the cuts between the runs and the careful loop: 96
     * bytes from a window's start to the body's end (one at a time), 128
     * (eight at a time), and every length around them. */
    for (int tail = 40; tail <= 150; tail++) {
        size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[3],\"data\":[0.25,-0.375,1.5]}");
        memset(body + at, ' ', (size_t)tail);
        strcpy(body + at + (size_t)tail, "}");
        assert_int_equal(check_same(body), 1);
    }
    free(body);
}

/* Eight at a time (eight_numbers, on a CPU with AVX-512 VBMI2): an element of
 * every shape, short or not, valid or not, at each place of a 40-element
 * array of short ones, after "," or ", ", with 0..150 bytes of text after
 * the array (eight numbers are read only with 128 bytes from the first):
 * the same floats or error as cJSON, nothing lifted from what cJSON
 * refuses. Then the same with the scalar code alone. A check left out of
 * the vector code (a second dot, a leading zero, a length over 8, a space
 * too many) shows as other bits, or as an array lifted that cJSON refuses. */
static void check_eight_at_a_time(void)
{
    static const char *const shortv[] = {
        "0",        "-0",      "7",        "12345678",  "-1234567", "0.5",
        "1.25",     "-0.9729", "123.4567", "1234567.8", "0.000001", "9.999999",
        "99999999", "1.0",     "10",       "-10.5",     "0.0",      "-0.000030"};
    static const char *const other[] = {
        /* valid, too long for the vector code */
        "123456789", "0.1234567", "-0.12345678", "3.1415926", "1e5", "1.5E-3", "0.5e1",
        "9007199254740993",
        /* not JSON, or not a plain number there */
        "01", "-01", "00", "00.5", "1..2", "1.2.3", ".5", "5.", "4194304.", "-", "--1", "+1", "1 ",
        "  1", "\n1", "-.5", "0x1", "1.5:", "\"1\"", "1-", "1.-5", "0-", "1] 2", "1],[2"};
    const size_t ns = sizeof shortv / sizeof *shortv;
    char *body = malloc(1 << 16);
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    for (size_t k = 0; k < ns + sizeof other / sizeof *other; k++) {
        const char *elem = k < ns ? shortv[k] : other[k - ns];
        for (int place = 0; place < 24; place++) {
            const int pad = (int)tu_uniform(&rng, 0, 150.99);
            size_t at = (size_t)sprintf(body, "{\"t\":{\"shape\":[40],\"data\":[");
            const char *why;
            for (int i = 0; i < 40; i++) {
                if (i)
                    at +=
                        (size_t)sprintf(body + at, "%s", tu_uniform(&rng, 0, 1) < 0.7 ? "," : ", ");
                at += (size_t)sprintf(body + at, "%s",
                                      i == place ? elem
                                                 : shortv[(size_t)tu_uniform(&rng, 0, ns - 0.01)]);
            }
            at += (size_t)sprintf(body + at, "]}, \"p\": \"");
            for (int i = 0; i < pad; i++)
                body[at++] = '.';
            strcpy(body + at, "\"}");
            /* Not JSON (RFC 8259, where cJSON reads "01" or "5."
             * leniently): api_body_read checks the text after the lift, so
             * the error must still be in it (an array lifted only when the
             * error is outside it, as in "[1] 2"). */
            if (!srv_json_check(body, strlen(body), &at, &why, NULL)) {
                srv_lift lift;
                if (srv_lift_scan(body, strlen(body), &lift)) {
                    const bool hidden = srv_json_check(lift.text, lift.len, &at, &why, NULL);
                    srv_lift_free(&lift);
                    if (hidden)
                        fail_msg("the lift hid the error of %s", body);
                }
                continue;
            }
            if (check_same(body) != 1 && k < ns)
                fail_msg("not lifted: %s", body);
        }
    }
    free(body);
}

static void test_eight_at_a_time(void **state)
{
    (void)state;
    check_eight_at_a_time();
    srv_lift_force_scalar(true);
    check_eight_at_a_time();
    test_fast_runs(state);
    srv_lift_force_scalar(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers_bit_identical),
        cmocka_unit_test(test_nested_and_shapes),
        cmocka_unit_test(test_half_dtypes),
        cmocka_unit_test(test_left_for_cjson),
        cmocka_unit_test(test_b64),
        cmocka_unit_test(test_only_data_values),
        cmocka_unit_test(test_markers_unforgeable),
        cmocka_unit_test(test_reparse),
        cmocka_unit_test(test_b64_half),
        cmocka_unit_test(test_long_numbers),
        cmocka_unit_test(test_fast_runs),
        cmocka_unit_test(test_eight_at_a_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
