/* test_badinput.c - posattnd against bad input (issue 5): starts the real
 * binary on a free loopback port and sends it one table of malformed,
 * mistyped, oversized and unauthorized requests over HTTP. Each row names the
 * status, error.code and error.field it must get back. After the table the
 * server must still answer /healthz, and running the table three times must
 * not grow its RSS beyond a small margin (figures printed).
 *
 * This file holds the rows and the test; tests/e2e/badinput_table.c sends a
 * row (through the e2e HTTP harness, tests/e2e/e2e_http.c) and checks its
 * answer. The binary is $POSATTND, else posattnd beside this
 * test's build folder (<BUILD>/tests/test_badinput -> <BUILD>/posattnd), else
 * build/posattnd. Every request has a timeout; servers die with the test
 * (PR_SET_PDEATHSIG).
 */
#include "badinput_table.h"
#include "e2e_server.h"
#include "testutil.h"

#include <curl/curl.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define API_KEY "s3cret-key"
/* RSS may grow by this much between the first and the third pass. Under
 * ASan or TSan (server and test are built with the same SAN) the allocator's
 * quarantine grows RSS by design: the figures are printed, not checked; the
 * sanitizer's own leak check at the server's exit (exit status 0 required)
 * takes the place of the RSS check. */
#define RSS_MARGIN_KB (8 * 1024)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_CHECKED 0
#else
#define RSS_CHECKED 1
#endif

/* ------------------------------------------------------------------------- */
/* Bodies                                                                    */
/* ------------------------------------------------------------------------- */

#define T222 "{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8]}"
#define QKV "\"q\":" T222 ",\"k\":" T222 ",\"v\":" T222
#define NONE "\"scheme\":{\"type\":\"none\"}"
#define ROPE "\"scheme\":{\"type\":\"rope\"}"
/* One attention item in a batch of one. */
#define ITEM(...) "{\"inputs\":[{" __VA_ARGS__ "}]}"
/* 8 zero floats, base64 of 32 bytes. */
#define B64_8 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

static void gen_deep_array(sbuf *b)
{
    sb_puts(b, "{\"inputs\":");
    sb_repeat(b, "[", 10000);
    sb_repeat(b, "]", 10000);
    sb_puts(b, "}");
}

static void gen_deep_object(sbuf *b)
{
    sb_puts(b, "{\"inputs\":[{" NONE ",\"q\":");
    sb_repeat(b, "{\"a\":", 10000);
    sb_puts(b, "1");
    sb_repeat(b, "}", 10000);
    sb_puts(b, "}]}");
}

static void gen_deep_data(sbuf *b)
{
    sb_puts(b, "{\"inputs\":[{" NONE ",\"q\":{\"shape\":[1,1,1],\"data\":");
    sb_repeat(b, "[", 10000);
    sb_puts(b, "1");
    sb_repeat(b, "]", 10000);
    sb_puts(b, "},\"k\":" T222 ",\"v\":" T222 "}]}");
}

static void gen_batch(sbuf *b, size_t n)
{
    sb_puts(b, "{\"inputs\":[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            sb_puts(b, ",");
        sb_puts(b, "{" NONE "," QKV "}");
    }
    sb_puts(b, "]}");
}

static void gen_batch_65(sbuf *b)
{
    gen_batch(b, 65); /* default --max-batch-items 64 */
}

static void gen_batch_64(sbuf *b)
{
    gen_batch(b, 64);
}

/* Content-Length: 1 GB, only the headers sent. */
static void gen_raw_1gb(sbuf *b)
{
    sb_puts(b, "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{\"inputs\":[");
}

static void gen_raw_body_longer(sbuf *b)
{
    /* 10 bytes announced, 40 sent: the body is the first 10 bytes. */
    sb_puts(b, "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               "Content-Type: application/json\r\nContent-Length: 10\r\n\r\n"
               "{\"inputs\":[{},{},{},{},{},{},{},{}]}");
}

static void gen_raw_bad_length(sbuf *b)
{
    sb_puts(b, "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Content-Type: application/json\r\nContent-Length: abc\r\n\r\n{\"inputs\":[]}");
}

/* ------------------------------------------------------------------------- */
/* The table                                                                 */
/* ------------------------------------------------------------------------- */

#define A "/v1/attention"
#define E "/v1/encode"
#define Z "/v1/analyze"
#define POST(n, path, body, st, code, field)                                                       \
    {                                                                                              \
        n, 0, "POST", path, NULL, body, NULL, false, st, code, field, false, 0                     \
    }
/* A one-item batch whose item fails: the answer has the item's status. */
#define ITEMERR_ST(n, body, st, code, field)                                                       \
    {                                                                                              \
        n, 0, "POST", A, NULL, body, NULL, false, st, code, field, true, 0                         \
    }
#define ITEMERR(n, body, code, field) ITEMERR_ST(n, body, 400, code, field)
#define GEN(n, path, g, st, code, field)                                                           \
    {                                                                                              \
        n, 0, "POST", path, NULL, NULL, g, false, st, code, field, false, 0                        \
    }

static const bcase cases[] = {
    /* Malformed and truncated JSON. */
    POST("empty body", A, "", 400, "MALFORMED_JSON", NULL),
    POST("whitespace", A, "  \n ", 400, "MALFORMED_JSON", NULL),
    POST("truncated", A, "{\"inputs\":[", 400, "MALFORMED_JSON", NULL),
    POST("truncated string", A, "{\"inputs\":[{\"scheme\":{\"type\":\"no", 400, "MALFORMED_JSON",
         NULL),
    POST("trailing garbage", A, "{\"inputs\":[]} x", 400, "MALFORMED_JSON", NULL),
    POST("two documents", A, "{\"inputs\":[]}{}", 400, "MALFORMED_JSON", NULL),
    POST("single quotes", A, "{'inputs':[]}", 400, "MALFORMED_JSON", NULL),
    POST("trailing comma", A, "{\"inputs\":[1,],}", 400, "MALFORMED_JSON", NULL),
    POST("NaN literal", A, ITEM(NONE ",\"scale\":NaN," QKV), 400, "MALFORMED_JSON", NULL),
    POST("Infinity literal", A, ITEM(NONE ",\"scale\":Infinity," QKV), 400, "MALFORMED_JSON", NULL),
    POST("bare word", A, "{\"inputs\":[true, nul]}", 400, "MALFORMED_JSON", NULL),
    POST("encode truncated", E, "{\"scheme\":", 400, "MALFORMED_JSON", NULL),
    POST("analyze truncated", Z, "{\"analysis\":\"perm", 400, "MALFORMED_JSON", NULL),
    /* JSON as RFC 8259 has it, stricter than cJSON (codec/json_check.h). */
    POST("leading zero in data", A,
         ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[007,2,3,4,5,6,7,8]},\"k\":" T222
                   ",\"v\":" T222),
         400, "MALFORMED_JSON", NULL),
    POST("leading zero in a scalar", A, ITEM(NONE "," QKV ",\"window\":02"), 400, "MALFORMED_JSON",
         NULL),
    POST("NUL in a scheme type", A, ITEM("\"scheme\":{\"type\":\"none\\u0000junk\"}," QKV), 400,
         "MALFORMED_JSON", NULL),
    POST("NUL in an id", A, ITEM("\"id\":\"a\\u0000b\"," NONE "," QKV), 400, "MALFORMED_JSON",
         NULL),
    POST("invalid UTF-8 in an id", A, ITEM("\"id\":\"a\xff\xfe\"," NONE "," QKV), 400,
         "MALFORMED_JSON", NULL),
    POST("lone surrogate in an id", A, ITEM("\"id\":\"\\ud800\"," NONE "," QKV), 400,
         "MALFORMED_JSON", NULL),
    POST("raw tab in a string", A, ITEM("\"id\":\"a\tb\"," NONE "," QKV), 400, "MALFORMED_JSON",
         NULL),
    POST("v2 leading zero", "/v2/models/attention-none/infer",
         "{\"inputs\":[{\"name\":\"q\",\"shape\":[1,1,2],\"datatype\":\"FP32\","
         "\"data\":[01,2]}]}",
         400, "-", NULL),
    GEN("nesting 10000 deep (arrays)", A, gen_deep_array, 400, "MALFORMED_JSON", NULL),
    GEN("nesting 10000 deep (objects)", A, gen_deep_object, 400, "MALFORMED_JSON", NULL),
    GEN("nesting 10000 deep (data)", A, gen_deep_data, 400, "MALFORMED_JSON", NULL),

    /* Wrong types, top level. */
    POST("body is an array", A, "[1,2]", 400, "INVALID_ARGUMENT", NULL),
    POST("body is a number", A, "7", 400, "INVALID_ARGUMENT", NULL),
    POST("inputs is an object", A, "{\"inputs\":{}}", 400, "INVALID_ARGUMENT", "inputs"),
    POST("inputs is a string", A, "{\"inputs\":\"x\"}", 400, "INVALID_ARGUMENT", "inputs"),
    POST("inputs is 1e999", A, "{\"inputs\":1e999}", 400, "INVALID_ARGUMENT", "inputs"),
    POST("output_encoding number", A, "{\"inputs\":[{}],\"output_encoding\":1}", 400,
         "INVALID_ARGUMENT", "output_encoding"),
    POST("output_encoding unknown", A, "{\"inputs\":[{}],\"output_encoding\":\"hex\"}", 400,
         "INVALID_ARGUMENT", "output_encoding"),
    POST("inputs twice", A, "{\"inputs\":[{}],\"inputs\":[{}]}", 400, "INVALID_ARGUMENT", "inputs"),
    POST("unknown top-level field", A, "{\"inputs\":[{}],\"extra\":1}", 400, "UNKNOWN_FIELD",
         "extra"),
    /* Missing fields. */
    POST("missing inputs", A, "{}", 400, "INVALID_ARGUMENT", "inputs"),
    POST("empty batch", A, "{\"inputs\":[]}", 400, "INVALID_ARGUMENT", "inputs"),
    GEN("batch of 65 (limit 64)", A, gen_batch_65, 413, "PAYLOAD_TOO_LARGE", "inputs"),
    ITEMERR("item is a number", "{\"inputs\":[7]}", "INVALID_ARGUMENT", "inputs[0]"),
    ITEMERR("missing scheme", ITEM(QKV), "INVALID_ARGUMENT", "inputs[0].scheme"),
    ITEMERR("missing scheme.type", ITEM("\"scheme\":{}," QKV), "INVALID_ARGUMENT",
            "inputs[0].scheme.type"),
    ITEMERR("missing k", ITEM(NONE ",\"q\":" T222 ",\"v\":" T222), "INVALID_ARGUMENT",
            "inputs[0].k"),
    ITEMERR("missing shape",
            ITEM(NONE ",\"q\":{\"data\":[1,2,3,4,5,6,7,8]},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    ITEMERR("missing data", ITEM(NONE ",\"q\":{\"shape\":[2,2,2]},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    /* Wrong types inside an item. */
    ITEMERR("scheme is a string", ITEM("\"scheme\":\"rope\"," QKV), "INVALID_ARGUMENT",
            "inputs[0].scheme"),
    ITEMERR("scheme.type number", ITEM("\"scheme\":{\"type\":3}," QKV), "INVALID_ARGUMENT",
            "inputs[0].scheme.type"),
    ITEMERR("rope base string", ITEM("\"scheme\":{\"type\":\"rope\",\"base\":\"big\"}," QKV),
            "INVALID_ARGUMENT", "inputs[0].scheme.base"),
    ITEMERR("causal number", ITEM(NONE "," QKV ",\"causal\":1"), "INVALID_ARGUMENT",
            "inputs[0].causal"),
    ITEMERR("window float", ITEM(NONE "," QKV ",\"window\":1.5"), "INVALID_ARGUMENT",
            "inputs[0].window"),
    ITEMERR("scale string", ITEM(NONE "," QKV ",\"scale\":\"x\""), "INVALID_ARGUMENT",
            "inputs[0].scale"),
    ITEMERR("q is an array", ITEM(NONE ",\"q\":[1,2],\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "inputs[0].q"),
    ITEMERR("shape is a string",
            ITEM(NONE ",\"q\":{\"shape\":\"2x2x2\",\"data\":[1]},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "inputs[0].q.shape"),
    ITEMERR("shape entry float",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2.5],\"data\":[1]},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    ITEMERR("data entry string",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,"
                      "\"8\"]},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    ITEMERR("data entry null",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,"
                      "null]},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    ITEMERR("return is a string", ITEM(NONE "," QKV ",\"return\":\"output\""), "INVALID_ARGUMENT",
            "inputs[0].return"),
    ITEMERR("return unknown", ITEM(NONE "," QKV ",\"return\":[\"attn\"]"), "INVALID_ARGUMENT",
            "inputs[0].return[0]"),
    ITEMERR("position string", ITEM(NONE "," QKV ",\"k_positions\":[0,\"a\"]"), "INVALID_ARGUMENT",
            "inputs[0].k_positions[1]"),
    /* Unknown scheme and parameter names. */
    ITEMERR("unknown scheme", ITEM("\"scheme\":{\"type\":\"moon\"}," QKV), "INVALID_ARGUMENT",
            "inputs[0].scheme.type"),
    ITEMERR("unknown scheme param", ITEM("\"scheme\":{\"type\":\"rope\",\"bsae\":10}," QKV),
            "UNKNOWN_FIELD", "inputs[0].scheme.bsae"),
    ITEMERR("param of another scheme", ITEM("\"scheme\":{\"type\":\"alibi\",\"base\":10}," QKV),
            "UNKNOWN_FIELD", "inputs[0].scheme.base"),
    ITEMERR("unknown item field", ITEM(NONE "," QKV ",\"foo\":1"), "UNKNOWN_FIELD",
            "inputs[0].foo"),
    ITEMERR("unknown tensor field",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,"
                      "8],\"dtyp\":\"f16\"},\"k\":" T222 ",\"v\":" T222),
            "UNKNOWN_FIELD", "inputs[0].q.dtyp"),
    ITEMERR("unknown rope scaling",
            ITEM("\"scheme\":{\"type\":\"rope\",\"scaling\":\"warp\"}," QKV), "INVALID_ARGUMENT",
            "inputs[0].scheme.scaling"),
    POST("encode unknown field", E, "{\"scheme\":{\"type\":\"none\"},\"lenght\":4}", 400,
         "UNKNOWN_FIELD", "lenght"),
    POST("encode unknown scheme", E, "{\"scheme\":{\"type\":\"moon\"}}", 400, "INVALID_ARGUMENT",
         "scheme.type"),
    POST("analyze unknown analysis", Z, "{\"analysis\":\"vibes\"," NONE "," QKV "}", 400,
         "INVALID_ARGUMENT", "analysis"),
    POST("analyze unknown field", Z,
         "{\"analysis\":\"permutation\"," NONE "," QKV ",\"return\":[]}", 400, "UNKNOWN_FIELD",
         "return"),
    /* Shapes against data. */
    ITEMERR("data too short",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7]},"
                      "\"k\":" T222 ",\"v\":" T222),
            "SHAPE_MISMATCH", "inputs[0].q.data"),
    ITEMERR("data too long",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,6,7,8,9]},"
                      "\"k\":" T222 ",\"v\":" T222),
            "SHAPE_MISMATCH", "inputs[0].q.data"),
    ITEMERR("nested data ragged",
            ITEM(NONE ",\"q\":{\"shape\":[2,1,2],\"data\":[[[1,2]],[[3]]]},"
                      "\"k\":" T222 ",\"v\":" T222),
            "SHAPE_MISMATCH", "*"),
    ITEMERR("q rank 2",
            ITEM(NONE ",\"q\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
                      "\"k\":" T222 ",\"v\":" T222),
            "SHAPE_MISMATCH", "inputs[0].q.shape"),
    ITEMERR("k head dim differs",
            ITEM(NONE ",\"q\":" T222 ",\"k\":{\"shape\":[1,2,4],\"data\":"
                      "[1,2,3,4,5,6,7,8]},\"v\":{\"shape\":[1,2,4],\"data\":"
                      "[1,2,3,4,5,6,7,8]}"),
            "SHAPE_MISMATCH", "inputs[0].k.shape"),
    ITEMERR("v length differs",
            ITEM(NONE ",\"q\":" T222 ",\"k\":" T222 ",\"v\":{\"shape\":[1,2,"
                      "4],\"data\":[1,2,3,4,5,6,7,8]}"),
            "SHAPE_MISMATCH", "inputs[0].v.shape"),
    /* Negative, zero, absurd dimensions; products overflowing size_t. */
    ITEMERR("negative dim",
            ITEM(NONE ",\"q\":{\"shape\":[-2,2,2],\"data\":[1]},\"k\":" T222 ",\"v\":" T222), "*",
            "inputs[0].q.shape[0]"),
    ITEMERR("zero dim",
            ITEM(NONE ",\"q\":{\"shape\":[2,0,2],\"data\":[]},\"k\":" T222 ",\"v\":" T222), "*",
            "*"),
    ITEMERR("absurd dim",
            ITEM(NONE ",\"q\":{\"shape\":[1e300,2,2],\"data\":[1]},\"k\":" T222 ",\"v\":" T222),
            "*", "inputs[0].q.shape[0]"),
    ITEMERR("dims overflow size_t",
            ITEM(NONE ",\"q\":{\"shape\":[4294967296,4294967296,"
                      "4294967296],\"data\":[1]},\"k\":" T222 ",\"v\":" T222),
            "*", "*"),
    ITEMERR_ST("dims 2^31 each",
               ITEM(NONE ",\"q\":{\"shape\":[2147483647,2147483647,2147483647],"
                         "\"b64\":\"" B64_8 "\"},\"k\":" T222 ",\"v\":" T222),
               413, "*", "*"),
    ITEMERR_ST("over max tensor elements",
               ITEM(NONE ",\"q\":{\"shape\":[4096,64,128],\"b64\":\"" B64_8 "\"},\"k\":" T222
                         ",\"v\":" T222),
               413, "PAYLOAD_TOO_LARGE", "*"),
    /* Out-of-range numbers, NaN/Infinity spelled in ways JSON allows. */
    ITEMERR("data 1e39 (over float)",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[1,2,3,4,5,"
                      "6,7,1e39]},\"k\":" T222 ",\"v\":" T222),
            "OUT_OF_RANGE", "*"),
    ITEMERR("data -1e39",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[-1e39,2,3,4,5,6,7,8]},"
                      "\"k\":" T222 ",\"v\":" T222),
            "OUT_OF_RANGE", "*"),
    ITEMERR("data 1e999",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"data\":[1e999,2,3,4,5,6,7,8]},"
                      "\"k\":" T222 ",\"v\":" T222),
            "*", "*"),
    ITEMERR("scale 1e39", ITEM(NONE "," QKV ",\"scale\":1e39"), "*", "inputs[0].scale"),
    ITEMERR("rope base 1e999", ITEM("\"scheme\":{\"type\":\"rope\",\"base\":1e999}," QKV), "*",
            "inputs[0].scheme.base"),
    ITEMERR("rope base negative", ITEM("\"scheme\":{\"type\":\"rope\",\"base\":-1}," QKV), "*",
            "inputs[0].scheme.base"),
    ITEMERR("key_length 3e9", ITEM(NONE "," QKV ",\"key_length\":3e9"), "OUT_OF_RANGE",
            "inputs[0].key_length"),
    ITEMERR("window negative", ITEM(NONE "," QKV ",\"window\":-1"), "INVALID_ARGUMENT",
            "inputs[0].window"),
    ITEMERR("key_length negative", ITEM(NONE "," QKV ",\"key_length\":-1"), "INVALID_ARGUMENT",
            "inputs[0].key_length"),
    ITEMERR("chunk_size negative", ITEM(NONE "," QKV ",\"chunk_size\":-2"), "INVALID_ARGUMENT",
            "inputs[0].chunk_size"),
    /* Heads. */
    ITEMERR("H not divisible by Hkv",
            ITEM(NONE ",\"q\":{\"shape\":[2,3,2],\"data\":[1,2,3,4,5,"
                      "6,1,2,3,4,5,6]},\"k\":" T222 ",\"v\":" T222),
            "SHAPE_MISMATCH", "*"),
    ITEMERR("num_heads mismatch", ITEM(NONE "," QKV ",\"num_heads\":4"), "SHAPE_MISMATCH",
            "inputs[0].num_heads"),
    POST("encode alibi no num_heads", E, "{\"scheme\":{\"type\":\"alibi\"},\"q_length\":2}", 400,
         "INVALID_ARGUMENT", "num_heads"),
    /* rotary_dim. */
    ITEMERR("rotary_dim odd", ITEM("\"scheme\":{\"type\":\"rope\",\"rotary_dim\":1}," QKV),
            "INVALID_ARGUMENT", "inputs[0].scheme.rotary_dim"),
    ITEMERR("rotary_dim > D", ITEM("\"scheme\":{\"type\":\"rope\",\"rotary_dim\":4}," QKV), "*",
            "inputs[0].scheme.rotary_dim"),
    ITEMERR("rotary_dim negative", ITEM("\"scheme\":{\"type\":\"rope\",\"rotary_dim\":-2}," QKV),
            "*", "inputs[0].scheme.rotary_dim"),
    /* Positions. */
    ITEMERR("q_positions wrong length", ITEM(NONE "," QKV ",\"q_positions\":[0]"), "SHAPE_MISMATCH",
            "inputs[0].q_positions"),
    /* Negative positions are valid for the relative schemes (RoPE shifts);
     * for a learned table they are a row outside it. */
    POST("learned position negative", E,
         "{\"scheme\":{\"type\":\"learned\",\"table\":{\"shape\":[2,2],\"data\":[1,2,3,4]}},"
         "\"positions\":[0,-1]}",
         400, "OUT_OF_RANGE", "positions[1]"),
    ITEMERR("position 1e10", ITEM(ROPE "," QKV ",\"k_positions\":[0,1e10]"), "OUT_OF_RANGE",
            "inputs[0].k_positions[1]"),
    ITEMERR("past the learned table",
            ITEM("\"scheme\":{\"type\":\"learned\",\"table\":{\"shape\":[1,4],\"data\":[1,2,3,4]}},"
                 "\"num_heads\":2,\"x\":{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]},"
                 "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
                 "\"w_k\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
                 "\"w_v\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]}"),
            "OUT_OF_RANGE", "inputs[0].scheme.table.shape[0]"),
    POST("encode learned position past table", E,
         "{\"scheme\":{\"type\":\"learned\",\"table\":{\"shape\":[2,2],\"data\":[1,2,3,4]}},"
         "\"positions\":[0,5]}",
         400, "OUT_OF_RANGE", "*"),
    /* base64. */
    ITEMERR("b64 invalid char",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"b64\":\"AA!AAAAAAAAAAAAAAA"
                      "AAAAAAAAAAAAAAAAAAAAAAAAA=\"},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    ITEMERR(
        "b64 bad padding",
        ITEM(NONE
             ",\"q\":{\"shape\":[2,2,2],\"b64\":\"AAAA=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"},"
             "\"k\":" T222 ",\"v\":" T222),
        "INVALID_ARGUMENT", "*"),
    ITEMERR("b64 bits under padding",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"b64\":\"AAAAAAAAAAAA"
                      "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=\"},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "inputs[0].q.b64"),
    ITEMERR("b64 wrong length",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"b64\":\"AAAAAAAA\"},"
                      "\"k\":" T222 ",\"v\":" T222),
            "SHAPE_MISMATCH", "*"),
    ITEMERR("b64 not a multiple of 4 bytes",
            ITEM(NONE ",\"q\":{\"shape\":[1,1,1],\"b64\":\"AAA="
                      "\"},\"k\":" T222 ",\"v\":" T222),
            "*", "*"),
    ITEMERR("b64 and data both",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"b64\":\"" B64_8
                      "\",\"data\":[1,2,3,4,5,6,7,8]},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    ITEMERR("b64 a number",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"b64\":12},\"k\":" T222 ",\"v\":" T222),
            "INVALID_ARGUMENT", "*"),
    ITEMERR("b64 holding a NaN",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"b64\":\"AACAPwAAAEAAAEBA"
                      "AACAQAAAoEAAAMBAAADgQAAAwH8=\"},\"k\":" T222 ",\"v\":" T222),
            "OUT_OF_RANGE", "inputs[0].q.b64[7]"),
    ITEMERR("b64 holding +inf",
            ITEM(NONE ",\"q\":{\"shape\":[2,2,2],\"b64\":\"AACAPwAAAEAAAEBA"
                      "AACAQAAAoEAAAMBAAADgQAAAgH8=\"},\"k\":" T222 ",\"v\":" T222),
            "OUT_OF_RANGE", "inputs[0].q.b64[7]"),
    /* More wrong types and values on /v1/encode and /v1/analyze. */
    POST("encode dim string", E,
         "{\"scheme\":{\"type\":\"sinusoidal\"},\"dim\":\"4\",\"length\":2}", 400,
         "INVALID_ARGUMENT", "dim"),
    POST("encode dim zero", E, "{\"scheme\":{\"type\":\"sinusoidal\"},\"dim\":0,\"length\":2}", 400,
         "*", "dim"),
    POST("encode length negative", E,
         "{\"scheme\":{\"type\":\"sinusoidal\"},\"dim\":4,\"length\":-2}", 400, "*", "length"),
    POST("encode length absurd", E,
         "{\"scheme\":{\"type\":\"sinusoidal\"},\"dim\":4096,"
         "\"length\":2147483647}",
         413, "PAYLOAD_TOO_LARGE", "*"),
    POST("encode rope rotary_dim > dim", E,
         "{\"scheme\":{\"type\":\"rope\",\"rotary_dim\":8},"
         "\"dim\":4,\"length\":2}",
         400, "*", "scheme.rotary_dim"),
    POST("encode body is a string", E, "\"rope\"", 400, "INVALID_ARGUMENT", NULL),
    POST("analyze offsets string", Z,
         "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"rope\"},"
         "\"q\":{\"shape\":[4],\"data\":[1,0,0,1]},\"k\":{\"shape\":[4],"
         "\"data\":[0,1,1,0]},\"offsets\":\"1,2\"}",
         400, "INVALID_ARGUMENT", "offsets"),
    POST("analyze missing analysis", Z, "{" NONE "," QKV "}", 400, "INVALID_ARGUMENT", "analysis"),
    POST("analyze permutation out of range", Z,
         "{\"analysis\":\"permutation\"," NONE "," QKV ",\"permutation\":[0,7]}", 400, "*",
         "permutation[1]"),
    /* Layer mode: H not divisible by Hkv. */
    ITEMERR("layer H % Hkv",
            ITEM(NONE ",\"num_heads\":4,\"num_kv_heads\":3,"
                      "\"x\":{\"shape\":[1,4],\"data\":[1,2,3,4]},"
                      "\"w_q\":{\"shape\":[4,4],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]},"
                      "\"w_k\":{\"shape\":[4,3],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4]},"
                      "\"w_v\":{\"shape\":[4,3],\"data\":[1,2,3,4,5,6,7,8,1,2,3,4]}"),
            "SHAPE_MISMATCH", "*"),
    /* Size limits on the wire. */
    {"Content-Length 1 GB", 0, NULL, NULL, NULL, NULL, gen_raw_1gb, true, 413, "PAYLOAD_TOO_LARGE",
     NULL, false, 1.0},
    {"body longer than announced", 0, NULL, NULL, NULL, NULL, gen_raw_body_longer, true, 400,
     "MALFORMED_JSON", NULL, false, 0},
    /* libmicrohttpd answers this one itself, before posattnd sees it: not JSON. */
    {"Content-Length not a number", 0, NULL, NULL, NULL, NULL, gen_raw_bad_length, true, 400, "-",
     NULL, false, 0},
    /* Methods and paths. */
    {"GET on POST route", 0, "GET", A, NULL, NULL, NULL, false, 405, "METHOD_NOT_ALLOWED", NULL,
     false, 0},
    {"PUT on POST route", 0, "PUT", E, NULL, "{}", NULL, false, 405, "METHOD_NOT_ALLOWED", NULL,
     false, 0},
    {"DELETE healthz", 0, "DELETE", "/healthz", NULL, NULL, NULL, false, 405, "METHOD_NOT_ALLOWED",
     NULL, false, 0},
    {"POST on GET route", 0, "POST", "/v1/schemes", NULL, "{}", NULL, false, 405,
     "METHOD_NOT_ALLOWED", NULL, false, 0},
    {"unknown path", 0, "GET", "/v3/attention", NULL, NULL, NULL, false, 404, "NOT_FOUND", NULL,
     false, 0},
    {"unknown path with body", 0, "POST", "/v1/attention/", NULL, "{}", NULL, false, 404,
     "NOT_FOUND", NULL, false, 0},
    {"dot-dot path", 0, "GET", "/../../etc/passwd", NULL, NULL, NULL, false, 404, "NOT_FOUND", NULL,
     false, 0},
    {"query string", 0, "GET", "/healthz?x=1", NULL, NULL, NULL, false, 200, NULL, NULL, false, 0},
    /* An encoded NUL would end the path the handler sees: refused, never a
     * route (#29). An encoded '%' stays itself; other escapes decode. */
    {"NUL in the path", 0, "GET", "/healthz%00junk", NULL, NULL, NULL, false, 400,
     "INVALID_ARGUMENT", NULL, false, 0},
    {"NUL in an API path", 0, "GET", "/v1/schemes%00x", NULL, NULL, NULL, false, 400,
     "INVALID_ARGUMENT", NULL, false, 0},
    {"NUL in a page path", 0, "GET", "/web/app.js%00.html", NULL, NULL, NULL, false, 400,
     "INVALID_ARGUMENT", NULL, false, 0},
    {"NUL at the end", 0, "GET", "/healthz%00", NULL, NULL, NULL, false, 400, "INVALID_ARGUMENT",
     NULL, false, 0},
    {"an encoded percent", 0, "GET", "/healthz%2500", NULL, NULL, NULL, false, 404, "NOT_FOUND",
     NULL, false, 0},
    {"an encoded letter", 0, "GET", "/he%61lthz", NULL, NULL, NULL, false, 200, NULL, NULL, false,
     0},
    /* API key (server 1 runs with --api-key). */
    {"no API key", 1, "POST", A, NULL, ITEM(NONE "," QKV), NULL, false, 401, "UNAUTHORIZED", NULL,
     false, 0},
    {"wrong API key", 1, "POST", A, "Authorization: Bearer nope", ITEM(NONE "," QKV), NULL, false,
     401, "UNAUTHORIZED", NULL, false, 0},
    {"API key prefix", 1, "GET", "/v1/schemes", "Authorization: Bearer s3cret", NULL, NULL, false,
     401, "UNAUTHORIZED", NULL, false, 0},
    {"API key longer", 1, "GET", "/v1/schemes", "Authorization: Bearer " API_KEY "x", NULL, NULL,
     false, 401, "UNAUTHORIZED", NULL, false, 0},
    {"API key not Bearer", 1, "GET", "/v1/schemes", "Authorization: Basic " API_KEY, NULL, NULL,
     false, 401, "UNAUTHORIZED", NULL, false, 0},
    {"API key empty", 1, "GET", "/v1/schemes", "Authorization: Bearer ", NULL, NULL, false, 401,
     "UNAUTHORIZED", NULL, false, 0},
    {"good API key", 1, "GET", "/v1/schemes", "Authorization: Bearer " API_KEY, NULL, NULL, false,
     200, NULL, NULL, false, 0},
    /* RFC 9110: the scheme is case-insensitive, one or more spaces follow. */
    {"bearer in lower case", 1, "GET", "/v1/schemes", "Authorization: bearer " API_KEY, NULL, NULL,
     false, 200, NULL, NULL, false, 0},
    {"BEARER and two spaces", 1, "GET", "/v1/schemes", "Authorization: BEARER  " API_KEY, NULL,
     NULL, false, 200, NULL, NULL, false, 0},
    {"Bearer without a space", 1, "GET", "/v1/schemes", "Authorization: Bearer" API_KEY, NULL, NULL,
     false, 401, "UNAUTHORIZED", NULL, false, 0},
    {"healthz needs no key", 1, "GET", "/healthz", NULL, NULL, NULL, false, 200, NULL, NULL, false,
     0},
    /* And the valid neighbours of the limits. */
    GEN("batch of 64 (the limit)", A, gen_batch_64, 200, NULL, NULL),
    POST("a valid item", A, ITEM(NONE "," QKV), 200, NULL, NULL),
};

#define NCASES (sizeof cases / sizeof cases[0])

/* ------------------------------------------------------------------------- */

static void test_badinput_table(void **state)
{
    (void)state;
    const char *const open_flags[] = {"--workers", "2", NULL};
    const char *const key_flags[] = {"--workers", "2", "--api-key", API_KEY, NULL};
    long rss[4];
    size_t failed = 0;
    bool verbose = getenv("BADINPUT_VERBOSE") != NULL;

    e2e_server_start(&servers[0], e2e_posattnd_path(), open_flags);
    e2e_server_start(&servers[1], e2e_posattnd_path(), key_flags);
    assert_int_equal(healthz_status(&servers[0]), 200);
    rss[0] = rss_kb(servers[0].pid);
    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < NCASES; i++)
            if (!run_case(&cases[i], verbose && pass == 0, pass == 0))
                failed++;
        rss[pass + 1] = rss_kb(servers[0].pid);
        if (failed > 0)
            break;
    }
    if (failed > 0)
        fail_msg("%zu of the bad-input cases failed", failed);

    /* Still up, on both servers. */
    assert_int_equal(healthz_status(&servers[0]), 200);
    assert_int_equal(healthz_status(&servers[1]), 200);
    print_message("badinput: RSS start %ld kB, after pass 1 %ld kB, pass 2 %ld kB, pass 3 %ld kB "
                  "(growth after pass 1: %ld kB, margin %d kB%s)\n",
                  rss[0], rss[1], rss[2], rss[3], rss[3] - rss[1], RSS_MARGIN_KB,
                  RSS_CHECKED ? "" : ", not checked under a sanitizer");
    if (RSS_CHECKED && rss[3] - rss[1] > RSS_MARGIN_KB)
        fail_msg("RSS grew by %ld kB from pass 1 to pass 3", rss[3] - rss[1]);
    e2e_server_stop_ok(&servers[0], false);
    e2e_server_stop_ok(&servers[1], false);
    print_message("badinput: %zu cases\n", NCASES);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        e2e_server_kill(&servers[i]);
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_badinput_table, teardown),
    };
    int rc;
    (void)argc;
    if (e2e_http_init(argv[0], "test_badinput") != 0)
        return 1;
    rc = cmocka_run_group_tests_name("badinput", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
