/* test_tensor.c - tensor parsing and rendering (server/codec/tensor.c): every
 * error path with its field and code, flat and nested data, base64 tensors
 * (the codec itself is tests/test_base64.c). */
#include "testutil.h"

#include "codec/tensor.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD "inputs[0].q"

/* Parses json (NULL: a missing node) and expects failure with the code, the
 * field and, when msg is set, that substring in the message; also checks
 * that *out was left untouched. */
static void expect_error(const char *json, int want_ndim, size_t max_elements, srv_error code,
                         const char *field, const char *msg)
{
    cJSON *node = NULL;
    if (json) {
        node = cJSON_Parse(json);
        if (!node)
            fail_msg("test JSON does not parse: %s", json);
    }
    srv_tensor out, before;
    memset(&out, 0xA5, sizeof out);
    before = out;
    srv_reply err = {0};
    bool ok = srv_tensor_parse(node, FIELD, want_ndim, max_elements, &out, &err);
    if (ok)
        fail_msg("parse of %s succeeded; expected %s at %s", json ? json : "(null)",
                 srv_error_code(code), field);
    assert_memory_equal(&out, &before, sizeof out);
    assert_int_equal(err.error, code);
    assert_int_equal(err.http_status, srv_error_http_status(code));
    assert_non_null(err.body);

    cJSON *body = cJSON_Parse(err.body);
    assert_non_null(body);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(body, "error");
    const char *got_code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
    const char *got_field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "field"));
    const char *got_msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
    assert_non_null(got_code);
    assert_non_null(got_msg);
    if (strcmp(got_code, srv_error_code(code)) != 0 || !got_field ||
        strcmp(got_field, field) != 0 || (msg && !strstr(got_msg, msg)))
        fail_msg("%s\n  got  %s at %s: %s\n  want %s at %s: ...%s...", json ? json : "(null)",
                 got_code, got_field ? got_field : "(none)", got_msg, srv_error_code(code), field,
                 msg ? msg : "");
    cJSON_Delete(body);
    cJSON_Delete(node);
    srv_reply_free(&err);
}

static srv_tensor parse_ok(const char *json, int want_ndim, size_t max_elements)
{
    cJSON *node = cJSON_Parse(json);
    assert_non_null(node);
    srv_tensor t = {0};
    srv_reply err = {0};
    if (!srv_tensor_parse(node, FIELD, want_ndim, max_elements, &t, &err))
        fail_msg("parse of %s failed: %s", json, err.body ? err.body : "(no body)");
    cJSON_Delete(node);
    return t;
}

static void test_parse_errors_object(void **state)
{
    (void)state;
    expect_error(NULL, 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD, "missing");
    expect_error("[1,2]", 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD, "got an array");
    expect_error("3", 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD, "got a number");
    expect_error("{\"shape\":[2],\"data\":[1,2],\"foo\":1}", 0, 100, SRV_ERR_UNKNOWN_FIELD,
                 FIELD ".foo", NULL);
    expect_error("{\"Shape\":[2],\"data\":[1,2]}", 0, 100, SRV_ERR_UNKNOWN_FIELD, FIELD ".Shape",
                 NULL);
    expect_error("{\"shape\":[2],\"shape\":[2],\"data\":[1,2]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".shape", "more than once");
    expect_error("{\"shape\":[2],\"data\":[1,2],\"datatype\":\"FP8\"}", 0, 100,
                 SRV_ERR_UNSUPPORTED, FIELD ".datatype", "FP8");
    expect_error("{\"shape\":[2],\"data\":[1,2],\"datatype\":32}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".datatype", NULL);
    expect_error("{\"shape\":[2],\"data\":[1,2],\"b64\":\"AAAAAAAAAAA=\"}", 0, 100,
                 SRV_ERR_INVALID_ARGUMENT, FIELD, "exactly one");
    expect_error("{\"shape\":[2]}", 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD, "data");
}

static void test_parse_errors_shape(void **state)
{
    (void)state;
    expect_error("{\"data\":[1]}", 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD ".shape", "missing");
    expect_error("{\"shape\":\"2\",\"data\":[1,2]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".shape", "got a string");
    expect_error("{\"shape\":[],\"data\":[]}", 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD ".shape",
                 "0 dimensions");
    expect_error("{\"shape\":[1,1,1,1,1,1,1,1,1],\"data\":[1]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".shape", "9 dimensions");
    expect_error("{\"shape\":[2,3],\"data\":[1,2,3,4,5,6]}", 3, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".shape", "2 dimensions, expected 3");
    expect_error("{\"shape\":[2.5],\"data\":[1,2]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".shape[0]", "2.5");
    expect_error("{\"shape\":[2,-1],\"data\":[1,2]}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".shape[1]", "-1");
    expect_error("{\"shape\":[0],\"data\":[]}", 0, 100, SRV_ERR_OUT_OF_RANGE, FIELD ".shape[0]",
                 "=0");
    expect_error("{\"shape\":[2147483648],\"data\":[]}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".shape[0]", "2147483648");
    expect_error("{\"shape\":[\"2\"],\"data\":[1,2]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".shape[0]", "got a string");
    expect_error("{\"shape\":[true],\"data\":[1]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".shape[0]", "got a boolean");
    expect_error("{\"shape\":[1,null],\"data\":[1]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".shape[1]", "got null");
    /* (2^31-1)^3 overflows a 64-bit size_t. */
    expect_error("{\"shape\":[2147483647,2147483647,2147483647],\"data\":[]}", 0, (size_t)-1,
                 SRV_ERR_PAYLOAD_TOO_LARGE, FIELD ".shape", "more elements than can be addressed");
    expect_error("{\"shape\":[10,10],\"data\":[]}", 0, 50, SRV_ERR_PAYLOAD_TOO_LARGE, FIELD,
                 "has 100 elements (shape [10,10]), more than the limit of 50");
}

static void test_parse_errors_flat(void **state)
{
    (void)state;
    expect_error("{\"shape\":[2],\"data\":\"x\"}", 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD ".data",
                 "must be an array");
    expect_error("{\"shape\":[2,3,4],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,"
                 "20,21,22,23]}",
                 0, 100, SRV_ERR_SHAPE_MISMATCH, FIELD ".data",
                 "inputs[0].q.shape product 24 does not match data length 23");
    expect_error("{\"shape\":[3],\"data\":[1,2,3,4]}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".data", "product 3 does not match data length 4");
    expect_error("{\"shape\":[3],\"data\":[1,\"a\",3]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".data[1]", "must be a number, got a string");
    expect_error("{\"shape\":[3],\"data\":[1,2,1e300]}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".data[2]", "inputs[0].q.data[2]=1.0000000000000001e+300");
    expect_error("{\"shape\":[3],\"data\":[1,2,-1e39]}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".data[2]", "float32 range");
    /* cJSON turns 1e400 into infinity. */
    expect_error("{\"shape\":[1],\"data\":[1e400]}", 0, 100, SRV_ERR_OUT_OF_RANGE, FIELD ".data[0]",
                 NULL);
    expect_error("{\"shape\":[2],\"data\":[1,{}]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".data[1]", "got an object");
    /* Rank 1 cannot be nested. */
    expect_error("{\"shape\":[2],\"data\":[[1],[2]]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".data[0]", "got an array");
    /* Flat data that turns nested part way. */
    expect_error("{\"shape\":[2,2],\"data\":[1,[2],3,4]}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".data[1]", "got an array");
}

static void test_parse_errors_nested(void **state)
{
    (void)state;
    expect_error("{\"shape\":[2,3],\"data\":[[1,2,3]]}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".data", "has 1 elements, but shape[0]=2");
    expect_error("{\"shape\":[2,3],\"data\":[[1,2,3],[4,5]]}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".data[1]", "has 2 elements, but shape[1]=3");
    expect_error("{\"shape\":[2,3],\"data\":[[1,2,3],4]}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".data[1]", "a number");
    expect_error("{\"shape\":[2,3],\"data\":[[1,2,[3]],[4,5,6]]}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".data[0][2]", "deeper");
    expect_error("{\"shape\":[2,3],\"data\":[[1,2,3],[4,5,1e300]]}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".data[1][2]", "inputs[0].q.data[1][2]=");
    expect_error("{\"shape\":[2,3],\"data\":[[1,2,3],[4,null,6]]}", 0, 100,
                 SRV_ERR_INVALID_ARGUMENT, FIELD ".data[1][1]", "got null");
    expect_error("{\"shape\":[2,2,2],\"data\":[[[1,2],[3,4]],[[5,6],[7,\"x\"]]]}", 0, 100,
                 SRV_ERR_INVALID_ARGUMENT, FIELD ".data[1][1][1]", NULL);
    expect_error("{\"shape\":[2,2,2],\"data\":[[[1,2],[3,4]],[[5,6],[7]]]}", 0, 100,
                 SRV_ERR_SHAPE_MISMATCH, FIELD ".data[1][1]", "shape[2]=2");
    /* Nested two deep against a rank-3 shape. */
    expect_error("{\"shape\":[2,2,2],\"data\":[[1,2],[3,4]]}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".data[0][0]", "a number");
}

static void test_parse_errors_b64(void **state)
{
    (void)state;
    /* shape [2]: 8 bytes, 12 characters with one '='. */
    expect_error("{\"shape\":[2],\"b64\":5}", 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD ".b64",
                 "must be a base64 string");
    expect_error("{\"shape\":[2],\"b64\":\"AAAAAAAA\"}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".b64", "decodes to 6 bytes, but shape [2] needs 2 float32 = 8 bytes");
    expect_error("{\"shape\":[2],\"b64\":\"AAAAAAAAAAA\"}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".b64", "has 11 characters");
    expect_error("{\"shape\":[2],\"b64\":\"\"}", 0, 100, SRV_ERR_SHAPE_MISMATCH, FIELD ".b64",
                 "has 0 characters");
    expect_error("{\"shape\":[2],\"b64\":\"AAAA*AAAAAA=\"}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".b64", "character 4 (0x2a)");
    expect_error("{\"shape\":[2],\"b64\":\"AAAAAAAAAA*=\"}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".b64", "character 10");
    expect_error("{\"shape\":[2],\"b64\":\"AA=AAAAAAAA=\"}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".b64", "character 2");
    expect_error("{\"shape\":[2],\"b64\":\"AAAAAAAAAAB=\"}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".b64", "non-zero bits");
    /* Right length, one '=' too many: 7 bytes. */
    expect_error("{\"shape\":[2],\"b64\":\"AAAAAAAAAA==\"}", 0, 100, SRV_ERR_SHAPE_MISMATCH,
                 FIELD ".b64", "decodes to 7 bytes");
    expect_error("{\"shape\":[2],\"b64\":\"AAAAAAAA AA=\"}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".b64", "character 8");
    /* url-safe alphabet is not accepted */
    expect_error("{\"shape\":[2],\"b64\":\"AAAA-AAAAAA=\"}", 0, 100, SRV_ERR_INVALID_ARGUMENT,
                 FIELD ".b64", NULL);
    /* NaN (0x7fc00000) as the second float: bytes 00 00 80 3f 00 00 c0 7f. */
    expect_error("{\"shape\":[2],\"b64\":\"AACAPwAAwH8=\"}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".b64[1]", "NaN");
    /* +inf (0x7f800000) as the first. */
    expect_error("{\"shape\":[1],\"b64\":\"AACAfw==\"}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".b64[0]", "infinity");
    /* One NaN or -inf among 40 floats, in the blocks of 16 the check reads
     * at once and in the tail after them: each is found and placed. */
    static const size_t at[] = {0, 7, 15, 16, 31, 32, 39};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        float v[40];
        char b64[256], json[320], field[64];
        for (size_t i = 0; i < 40; i++)
            v[i] = (float)i - 20.5f;
        v[at[k]] = k % 2 ? -INFINITY : NAN;
        srv_b64_encode((const unsigned char *)v, sizeof v, b64);
        snprintf(json, sizeof json, "{\"shape\":[40],\"b64\":\"%s\"}", b64);
        snprintf(field, sizeof field, FIELD ".b64[%zu]", at[k]);
        expect_error(json, 0, 100, SRV_ERR_OUT_OF_RANGE, field, k % 2 ? "infinity" : "NaN");
    }

    /* shape [100]: 400 bytes, 536 characters, long enough for the vector
     * decoder's 64-character blocks; the messages are the same. */
    char json[640], *b = json + sprintf(json, "{\"shape\":[100],\"b64\":\"");
    memset(b, 'A', 536);
    memcpy(b + 534, "==\"}", 5);
    b[533] = 'B';
    expect_error(json, 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD ".b64",
                 "non-zero bits before the padding at character 533");
    b[533] = 'A';
    b[300] = '\xff';
    expect_error(json, 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD ".b64",
                 "character 300 (0xff) is not in the standard alphabet");
    b[100] = '=';
    expect_error(json, 0, 100, SRV_ERR_INVALID_ARGUMENT, FIELD ".b64", "character 100 (0x3d)");
}

static void test_parse_flat_and_nested(void **state)
{
    (void)state;
    const float want[6] = {1, -2.5f, 0.1f, 3e-40f, 65504, -0.0f};
    srv_tensor a = parse_ok("{\"shape\":[2,3],\"data\":[1,-2.5,0.1,3e-40,65504,-0.0]}", 2, 6);
    srv_tensor b = parse_ok(
        "{\"datatype\":\"FP32\",\"data\":[[1,-2.5,0.1],[3e-40,65504,-0]],\"shape\":[2,3]}", 0, 6);
    srv_tensor c =
        parse_ok("{\"shape\":[3,1,2],\"data\":[[[1,-2.5]],[[0.1,3e-40]],[[65504,-0.0]]]}", 3, 100);
    srv_tensor *all[3] = {&a, &b, &c};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(all[k]->count, 6);
        assert_non_null(all[k]->data);
        assert_memory_equal(all[k]->data, want, sizeof want);
    }
    assert_int_equal(a.ndim, 2);
    assert_true(a.shape[0] == 2 && a.shape[1] == 3);
    assert_int_equal(c.ndim, 3);
    assert_true(c.shape[0] == 3 && c.shape[1] == 1 && c.shape[2] == 2);
    for (int k = 0; k < 3; k++) {
        srv_tensor_free(all[k]);
        assert_null(all[k]->data);
        srv_tensor_free(all[k]); /* twice is harmless */
    }
    srv_tensor_free(NULL);

    /* The edge of float range: FLT_MAX printed with 8 digits rounds to it. */
    srv_tensor m = parse_ok("{\"shape\":[3],\"data\":[3.4028235e38,-3.40282356e38,1e-50]}", 1, 3);
    assert_true(m.data[0] == FLT_MAX && m.data[1] == -FLT_MAX && m.data[2] == 0.0f);
    srv_tensor_free(&m);
    expect_error("{\"shape\":[1],\"data\":[3.4028236e38]}", 0, 100, SRV_ERR_OUT_OF_RANGE,
                 FIELD ".data[0]", NULL);

    /* Exactly max_elements is allowed. */
    srv_tensor e = parse_ok("{\"shape\":[4],\"data\":[1,2,3,4]}", 1, 4);
    assert_int_equal(e.count, 4);
    srv_tensor_free(&e);
}

/* Renders {name: tensor} and returns the cJSON object of the tensor. */
static cJSON *render(cJSON *root, const float *data, int ndim, const int64_t *shape,
                     srv_encoding enc)
{
    assert_true(srv_tensor_render(root, "t", data, ndim, shape, enc));
    /* Print and parse again, as a client would see it. */
    char *text = cJSON_PrintUnformatted(root);
    assert_non_null(text);
    cJSON *back = cJSON_Parse(text);
    free(text);
    assert_non_null(back);
    return back;
}

static void test_render_and_parse_back(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    const int64_t shape[3] = {3, 4, 5};
    float x[60];
    for (int i = 0; i < 60; i++) {
        double mag = pow(10.0, tu_uniform(&rng, -38, 38));
        x[i] = (float)(tu_uniform(&rng, -1, 1) * mag);
    }
    x[0] = FLT_MAX;
    x[1] = -FLT_MIN;
    x[2] = 1e-45f; /* smallest subnormal */
    x[3] = -0.0f;
    x[4] = 0.1f;

    for (int enc = SRV_ENCODING_JSON; enc <= SRV_ENCODING_B64; enc++) {
        cJSON *root = cJSON_CreateObject();
        cJSON *back = render(root, x, 3, shape, (srv_encoding)enc);
        cJSON *t = cJSON_GetObjectItemCaseSensitive(back, "t");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "datatype")),
                            "FP32");
        assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(t, "shape")));
        if (enc == SRV_ENCODING_B64) {
            assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(t, "b64")));
            assert_null(cJSON_GetObjectItemCaseSensitive(t, "data"));
        } else {
            assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(t, "data")));
            assert_null(cJSON_GetObjectItemCaseSensitive(t, "b64"));
        }
        srv_tensor p = {0};
        srv_reply err = {0};
        if (!srv_tensor_parse(t, "t", 3, 60, &p, &err))
            fail_msg("parse back failed: %s", err.body);
        assert_int_equal(p.ndim, 3);
        assert_memory_equal(p.shape, shape, sizeof shape);
        /* Bit-exact: the shortest round-trip text reads back the same float, -0 included. */
        assert_memory_equal(p.data, x, sizeof x);
        srv_tensor_free(&p);
        cJSON_Delete(back);
        cJSON_Delete(root);
    }
}

/* Deferred text (srv_defer): the same text, byte for byte, as rendering in
 * the tree, for base64 and JSON numbers (non-finite values as null), large
 * and small; a client string holding the placeholder bytes is printed
 * escaped and left alone; a narrowed output dtype stays in the tree. */
static void test_render_deferred(void **state)
{
    (void)state;
    const size_t big = 16389, small = 7;
    float *a = malloc(big * sizeof *a), *b = malloc(big * sizeof *b), c[7];
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < big; i++) {
        a[i] = (float)i * 0.37f - 100.0f;
        b[i] = -(float)i / 3.0f;
    }
    for (size_t i = 0; i < small; i++)
        c[i] = (float)i - 2.5f;
    b[3] = -INFINITY;
    b[big - 1] = NAN;
    char *text[2] = {NULL, NULL};
    size_t len[2];
    for (int deferred = 0; deferred < 2; deferred++) {
        srv_defer d = {0};
        const int64_t sa[1] = {(int64_t)big}, sb[2] = {1, (int64_t)big}, sc[1] = {(int64_t)small};
        if (deferred)
            srv_defer_set_current(&d);
        cJSON *root = cJSON_CreateObject();
        assert_non_null(cJSON_AddStringToObject(root, "id", "x\0020\003y")); /* 02 0 03 */
        assert_true(srv_tensor_render(root, "a", a, 1, sa, SRV_ENCODING_B64));
        assert_true(srv_tensor_render(root, "c", c, 1, sc, SRV_ENCODING_B64));
        assert_true(srv_tensor_render(root, "j", c, 1, sc, SRV_ENCODING_JSON));
        assert_true(srv_tensor_render(root, "b", b, 2, sb, SRV_ENCODING_B64));
        assert_true(srv_tensor_render(root, "bj", b, 2, sb, SRV_ENCODING_JSON));
        assert_true(srv_tensor_render_as(root, "h", c, 1, sc, SRV_ENCODING_JSON, SRV_WIRE_F16));
        srv_defer_set_current(NULL);
        assert_int_equal(d.n, deferred ? 5 : 0); /* all but the narrowed one */
        char *printed = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        assert_non_null(printed);
        len[deferred] = strlen(printed);
        if (deferred) {
            assert_true(len[1] < 1000); /* the tree held placeholders only */
            text[1] = srv_defer_apply(&d, printed, len[1], &len[1]);
            cJSON_free(printed);
            assert_non_null(text[1]);
        } else {
            text[0] = printed;
        }
        srv_defer_free(&d);
    }
    assert_int_equal(len[0], len[1]);
    assert_int_equal(strlen(text[1]), len[1]);
    assert_memory_equal(text[0], text[1], len[0]);
    cJSON_free(text[0]);
    free(text[1]);
    free(a);
    free(b);
}

static void test_render_non_finite_and_edges(void **state)
{
    (void)state;
    const float x[4] = {-INFINITY, 1.5f, NAN, INFINITY};
    const int64_t shape[2] = {2, 2};
    cJSON *root = cJSON_CreateObject();
    assert_true(srv_tensor_render(root, "logits", x, 2, shape, SRV_ENCODING_JSON));
    char *text = cJSON_PrintUnformatted(root);
    assert_string_equal(text, "{\"logits\":{\"shape\":[2,2],\"datatype\":\"FP32\","
                              "\"data\":[null,1.5,null,null]}}");
    free(text);
    cJSON_Delete(root);

    /* b64 keeps -inf as bits. */
    root = cJSON_CreateObject();
    assert_true(srv_tensor_render(root, "logits", x, 1, shape, SRV_ENCODING_B64));
    text = cJSON_PrintUnformatted(root);
    assert_string_equal(
        text, "{\"logits\":{\"shape\":[2],\"datatype\":\"FP32\",\"b64\":\"AACA/wAAwD8=\"}}");
    free(text);
    cJSON_Delete(root);

    /* An empty tensor. */
    const int64_t zero[2] = {0, 3};
    root = cJSON_CreateObject();
    assert_true(srv_tensor_render(root, "e", NULL, 2, zero, SRV_ENCODING_JSON));
    assert_true(srv_tensor_render(root, "f", NULL, 2, zero, SRV_ENCODING_B64));
    text = cJSON_PrintUnformatted(root);
    assert_string_equal(text, "{\"e\":{\"shape\":[0,3],\"datatype\":\"FP32\",\"data\":[]},"
                              "\"f\":{\"shape\":[0,3],\"datatype\":\"FP32\",\"b64\":\"\"}}");
    free(text);

    /* Invalid arguments (our own bugs) fail cleanly and add nothing. */
    const int64_t neg[1] = {-1};
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_false(srv_tensor_render(root, "g", x, 0, shape, SRV_ENCODING_JSON));
    assert_false(srv_tensor_render(root, "g", x, 9, nine, SRV_ENCODING_JSON));
    assert_false(srv_tensor_render(root, "g", x, 1, neg, SRV_ENCODING_JSON));
    assert_false(srv_tensor_render(NULL, "g", x, 1, shape, SRV_ENCODING_JSON));
    assert_false(srv_tensor_render(root, "g", NULL, 1, shape, SRV_ENCODING_JSON));
    assert_null(cJSON_GetObjectItemCaseSensitive(root, "g"));
    cJSON_Delete(root);
}

/* Big enough to see the decoder's speed in the output; checks correctness
 * only (times are not pass/fail in unit tests). */
static void test_b64_large(void **state)
{
    (void)state;
    size_t count = (size_t)1 << 20;
    float *x = tu_alloc(count, sizeof *x);
    tu_rng rng;
    tu_rng_seed(&rng, 3);
    tu_fill(&rng, x, count, -4, 4);
    const int64_t shape[2] = {1024, 1024};
    cJSON *root = cJSON_CreateObject();
    /* Rendered values are raw text nodes: print and parse, as a client would. */
    cJSON *back = render(root, x, 2, shape, SRV_ENCODING_B64);
    srv_tensor p = {0};
    srv_reply err = {0};
    if (!srv_tensor_parse(cJSON_GetObjectItemCaseSensitive(back, "t"), "t", 2, count, &p, &err))
        fail_msg("%s", err.body);
    assert_memory_equal(p.data, x, count * sizeof *x);
    srv_tensor_free(&p);
    cJSON_Delete(back);
    cJSON_Delete(root);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors_object),
        cmocka_unit_test(test_parse_errors_shape),
        cmocka_unit_test(test_parse_errors_flat),
        cmocka_unit_test(test_parse_errors_nested),
        cmocka_unit_test(test_parse_errors_b64),
        cmocka_unit_test(test_parse_flat_and_nested),
        cmocka_unit_test(test_render_and_parse_back),
        cmocka_unit_test(test_render_non_finite_and_edges),
        cmocka_unit_test(test_render_deferred),
        cmocka_unit_test(test_b64_large),
    };
    return cmocka_run_group_tests_name("tensor", tests, NULL, NULL);
}
