/* test_tensor_file.c - the header parsers of server/store/tensor_file.c:
 * every malformed safetensors and .npy header (with the error named),
 * checkpoint entries and good files in each dtype and order, and the
 * float16/bfloat16/float64 conversions against an independent double
 * formula (all 65536 half values). Files are built in memory (tensor_bytes.c).
 */
#include "testutil.h"

#include "codec/half.h"
#include "store/tensor_file.h"
#include "tensor_bytes.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Checks                                                                    */
/* ------------------------------------------------------------------------- */

static void st_expect_error(buf b, const char *msg)
{
    srv_tensor_entry *es = (srv_tensor_entry *)(uintptr_t)0x1;
    size_t n = 77;
    char err[512] = "";
    if (srv_safetensors_parse(b.p, b.n, &es, &n, err, sizeof err))
        fail_msg("parsed, expected an error with '%s'", msg);
    if (strstr(err, msg) == NULL)
        fail_msg("error '%s' lacks '%s'", err, msg);
    assert_true(es == (srv_tensor_entry *)(uintptr_t)0x1 && n == 77); /* untouched */
    free(b.p);
}

static void npy_expect_error(buf b, const char *msg)
{
    srv_tensor_entry e;
    char err[512] = "";
    memset(&e, 0x5A, sizeof e);
    if (srv_npy_parse(b.p, b.n, &e, err, sizeof err))
        fail_msg("parsed, expected an error with '%s'", msg);
    if (strstr(err, msg) == NULL)
        fail_msg("error '%s' lacks '%s'", err, msg);
    assert_int_equal(e.ndim, 0x5A5A5A5A);
    free(b.p);
}

/* ------------------------------------------------------------------------- */
/* safetensors headers                                                       */
/* ------------------------------------------------------------------------- */

static void test_safetensors_errors(void **state)
{
    (void)state;
    buf b = {NULL, 0};
    put(&b, "\x10\0\0", 3);
    st_expect_error(b, "too short");
    st_expect_error(st("{" T23("F32", 0, 24) "}", 4096, six, 24), "header length 4096 runs past");
    st_expect_error(st("{" T23("F32", 0, 24), 0, six, 24), "not valid JSON");
    st_expect_error(st("{" T23("F32", 0, 24) "}  x", 0, six, 24),
                    "header has byte 0x78 after the JSON object");
    /* The format pads with spaces (0x20) only. */
    st_expect_error(st("{" T23("F32", 0, 24) "}\t", 0, six, 24), "byte 0x09 after the JSON");
    st_expect_error(st("[1, 2]", 0, six, 24), "begins with byte 0x5b, not '{'");
    st_expect_error(st(" {" T23("F32", 0, 24) "}", 0, six, 24), "begins with byte 0x20");
    st_expect_error(st("{" T23("F4", 0, 24) "}", 0, six, 24),
                    "dtype 'F4' is not a safetensors dtype of whole bytes");
    st_expect_error(st("{" T23("I64", 0, 24) "}", 0, six, 24), "of I64 needs 48");
    st_expect_error(st("{" T23("F8_E4M3", 0, 24) "}", 0, six, 24), "of F8_E4M3 needs 6");
    /* Every byte of the data area belongs to exactly one tensor. */
    st_expect_error(st("{" T23("F16", 0, 12) ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                                             "\"data_offsets\":[16,24]}}",
                       0, six, 24),
                    "bytes [12, 16) of the data area belong to no tensor (a hole before 'b')");
    st_expect_error(st("{" T23("F16", 12, 24) "}", 0, six, 24),
                    "bytes [0, 12) of the data area belong to no tensor");
    st_expect_error(st("{" T23("F16", 0, 12) "}", 0, six, 24),
                    "12 bytes follow the last tensor's data (it ends at 12, the data area is 24");
    st_expect_error(st("{}", 0, six, 4), "4 bytes follow the last tensor's data");
    st_expect_error(
        st("{\"__metadata__\":{\"format\":\"pt\",\"step\":3}," T23("F32", 0, 24) "}", 0, six, 24),
        "__metadata__ value 'step' is not a string");
    st_expect_error(st("{\"__metadata__\":[1]," T23("F32", 0, 24) "}", 0, six, 24),
                    "__metadata__ is not an object");
    /* Truncated data: the offsets reach past the end of the file. */
    st_expect_error(st("{" T23("F32", 0, 24) "}", 0, six, 20),
                    "data_offsets [0, 24] are out of range: the data area is 20 bytes");
    st_expect_error(st("{" T23("F32", 24, 48) "}", 0, six, 24), "out of range");
    st_expect_error(st("{" T23("F32", 24, 0) "}", 0, six, 24), "end before they begin");
    st_expect_error(st("{" T23("F32", 0, 20) "}", 0, six, 24),
                    "hold 20 bytes but shape [2, 3] of F32 needs 24");
    st_expect_error(st("{" T23("F16", 0, 24) "}", 0, six, 24), "of F16 needs 12");
    st_expect_error(st("{" T23("F32", 0, 24) ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],"
                                             "\"data_offsets\":[12,24]}}",
                       0, six, 24),
                    "tensors 'a' [0, 24) and 'b' [12, 24) overlap");
    st_expect_error(st("{" T23("F32", 0, 24) "," T23("F32", 0, 24) "}", 0, six, 24),
                    "tensor 'a' appears twice");
    st_expect_error(
        st("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,3],\"data_offsets\":[0,0]}}", 0, six, 24),
        "shape[0] is not a non-negative integer");
    st_expect_error(st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                       "\"data_offsets\":[0,4]}}",
                       0, six, 24),
                    "9 dimensions");
    st_expect_error(
        st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 0, six, 24),
        "shape[0]");
    st_expect_error(st("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                       "\"data_offsets\":[0,4]}}",
                       0, six, 24),
                    "more elements than can be addressed");
    st_expect_error(
        st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 0, six, 24),
        "two non-negative integers");
    st_expect_error(
        st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 0, six, 24),
        "unknown header field 'x'");
    st_expect_error(st("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 0, six, 24),
                    "dtype is missing");
    st_expect_error(st("{\"a\":3}", 0, six, 24), "not an object");
}

/* What real checkpoints hold: tensors of dtypes posattnd does not compute
 * with, empty ones and 0-rank ones parse (and are refused only when
 * picked, srv_tensor_entry_servable); an empty tensor may share its offset
 * with the next one. */
static void test_safetensors_checkpoint_entries(void **state)
{
    (void)state;
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"ids\":{\"dtype\":\"I64\",\"shape\":[1,2],\"data_offsets\":[0,16]},"
                    "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[2,2],\"data_offsets\":[16,20]},"
                    "\"none\":{\"dtype\":\"F32\",\"shape\":[0,2],\"data_offsets\":[20,20]},"
                    "\"step\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[20,24]}}";
    buf b = st(h, 0, six, 24);
    srv_tensor_entry *es = NULL;
    size_t n = 0;
    char err[320] = "";
    if (!srv_safetensors_parse(b.p, b.n, &es, &n, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(n, 4);
    assert_int_equal(es[0].dtype, SRV_DTYPE_OTHER);
    assert_string_equal(es[0].dtype_name, "I64");
    assert_int_equal(es[0].elem_size, 8);
    assert_int_equal(es[1].elem_size, 1);
    assert_int_equal(es[2].count, 0);
    assert_int_equal(es[3].ndim, 0);
    assert_int_equal(es[3].count, 1);
    assert_false(srv_tensor_entry_servable(&es[0], err, sizeof err));
    assert_string_equal(err, "tensor 'ids' is I64: posattnd computes with F32, F16, BF16 and F64 "
                             "(the file's other tensors may be of any dtype)");
    assert_false(srv_tensor_entry_servable(&es[2], err, sizeof err));
    assert_string_equal(err, "tensor 'none' is empty (shape [0, 2]): posattnd serves values");
    assert_false(srv_tensor_entry_servable(&es[3], err, sizeof err));
    assert_non_null(strstr(err, "tensor 'step' is 0-rank (a scalar)"));
    free(es);
    free(b.p);
}

static void test_safetensors_ok(void **state)
{
    (void)state;
    /* Two tensors in reverse order of offsets, metadata ignored, padding. */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}   ";
    buf b = st(h, 0, six, 24);
    srv_tensor_entry *es = NULL;
    size_t n = 0;
    char err[256] = "";
    size_t base = 8 + strlen(h);

    if (!srv_safetensors_parse(b.p, b.n, &es, &n, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(n, 2);
    assert_string_equal(es[0].name, "w");
    assert_int_equal(es[0].dtype, SRV_DTYPE_F32);
    assert_int_equal(es[0].ndim, 2);
    assert_int_equal(es[0].count, 4);
    assert_int_equal(es[0].offset, base + 8);
    assert_int_equal(es[0].nbytes, 16);
    assert_string_equal(es[1].name, "b");
    assert_int_equal(es[1].dtype, SRV_DTYPE_BF16);
    assert_int_equal(es[1].offset, base);
    assert_int_equal(es[1].nbytes, 8);
    free(es);
    free(b.p);

    /* Only metadata: zero tensors (the store refuses that, not the parser). */
    b = st("{\"__metadata__\":{}}", 0, NULL, 0);
    es = NULL;
    assert_true(srv_safetensors_parse(b.p, b.n, &es, &n, err, sizeof err));
    assert_int_equal(n, 0);
    assert_null(es);
    free(b.p);
}

/* ------------------------------------------------------------------------- */
/* .npy headers                                                              */
/* ------------------------------------------------------------------------- */

static void test_npy_errors(void **state)
{
    (void)state;
    buf b = npy(1, NPY("<f4", "False", "(2, 3)"), six, 24);
    b.p[1] = 'X';
    npy_expect_error(b, "does not start with \\x93NUMPY");
    b = npy(1, NPY("<f4", "False", "(2, 3)"), six, 24);
    b.p[6] = 4;
    npy_expect_error(b, "version 4.0 is not supported");
    b = npy(1, NPY("<f4", "False", "(2, 3)"), six, 24);
    b.p[9] = 0x7f; /* header length 32512+ */
    npy_expect_error(b, "runs past the end");
    npy_expect_error(npy(1, NPY("<i8", "False", "(3,)"), six, 24), "'<i8' is not supported");
    npy_expect_error(npy(1, NPY("<c8", "False", "(3,)"), six, 24), "'<c8' is not supported");
    npy_expect_error(npy(1, NPY("|u1", "False", "(3,)"), six, 3), "'|u1' is not supported");
    npy_expect_error(npy(1, NPY("<f4", "False", "(2, 3)"), six, 20),
                     "truncated data: shape (2, 3) of <f4 needs 24 data bytes, the file has 20");
    npy_expect_error(npy(1, NPY("<f4", "False", "(5,)"), six, 24),
                     "size mismatch: shape (5) of <f4 needs 20");
    npy_expect_error(npy(1, NPY("<f4", "False", "()"), six, 4), "scalar");
    npy_expect_error(npy(1, NPY("<f4", "False", "(2, 0)"), six, 0), "shape[1] is 0");
    npy_expect_error(npy(1, "{'descr': '<f4', 'shape': (6,), }", six, 24), "lacks 'fortran_order'");
    npy_expect_error(
        npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", six, 24),
        "unknown or repeated key 'x'");
    npy_expect_error(
        npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}", six, 24),
        "structured");
    npy_expect_error(npy(1, "[1, 2]", six, 24), "not a Python dict");
}

static void test_npy_ok(void **state)
{
    (void)state;
    srv_tensor_entry e;
    char err[256] = "";
    buf b = npy(1, NPY("<f4", "False", "(2, 3)"), six, 24);
    if (!srv_npy_parse(b.p, b.n, &e, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(e.dtype, SRV_DTYPE_F32);
    assert_int_equal(e.ndim, 2);
    assert_int_equal(e.shape[0], 2);
    assert_int_equal(e.shape[1], 3);
    assert_int_equal(e.offset % 64, 0);
    assert_int_equal(e.offset + 24, b.n);
    assert_memory_equal(b.p + e.offset, six, 24);
    free(b.p);

    b = npy(2, "{\"descr\": \"<f2\", \"fortran_order\": False, \"shape\": (12,)}", six, 24);
    if (!srv_npy_parse(b.p, b.n, &e, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(e.dtype, SRV_DTYPE_F16);
    assert_int_equal(e.ndim, 1);
    assert_int_equal(e.count, 12);
    assert_int_equal(e.offset % 64, 0);
    assert_int_equal(e.offset + 24, b.n);
    free(b.p);

    b = npy(3, NPY("<f8", "False", "(1, 1, 3)"), six, 24);
    assert_true(srv_npy_parse(b.p, b.n, &e, err, sizeof err));
    assert_int_equal(e.dtype, SRV_DTYPE_F64);
    assert_int_equal(e.ndim, 3);
    free(b.p);
}

/* np.save of any float array: big-endian and Fortran-order files convert
 * to the C-order float32 values of the same array. */
static void test_npy_orders(void **state)
{
    (void)state;
    /* a = [[0.5, -1, 2.25], [3, -4.5, 1e-3]] as NumPy would store it. */
    const float fort[6] = {six[0], six[3], six[1], six[4], six[2], six[5]};
    unsigned char be4[24], be8[48], bef[24];
    float out[6];
    size_t bad;
    srv_tensor_entry e;
    char err[256] = "";
    for (int i = 0; i < 6; i++) {
        uint32_t u, v;
        double x = (double)six[i];
        uint64_t w;
        memcpy(&u, &six[i], 4);
        memcpy(&v, &fort[i], 4);
        memcpy(&w, &x, 8);
        for (int k = 0; k < 4; k++) {
            be4[4 * i + k] = (unsigned char)(u >> (24 - 8 * k));
            bef[4 * i + k] = (unsigned char)(v >> (24 - 8 * k));
        }
        for (int k = 0; k < 8; k++)
            be8[8 * i + k] = (unsigned char)(w >> (56 - 8 * k));
    }
    static const struct {
        const char *dict;
        int which; /* 0 le C, 1 le F, 2 be f4 C, 3 be f8 C, 4 be f4 F */
    } cases[] = {{NPY("<f4", "True", "(2, 3)"), 1},  {NPY(">f4", "False", "(2, 3)"), 2},
                 {NPY(">f8", "False", "(2, 3)"), 3}, {NPY(">f4", "True", "(2, 3)"), 4},
                 {NPY("<f4", "True", "(6,)"), 0},    {NPY("=f4", "False", "(2, 3)"), 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const void *data = cases[c].which == 0   ? (const void *)six
                           : cases[c].which == 1 ? (const void *)fort
                           : cases[c].which == 2 ? (const void *)be4
                           : cases[c].which == 3 ? (const void *)be8
                                                 : (const void *)bef;
        buf b = npy(1, cases[c].dict, data, cases[c].which == 3 ? 48 : 24);
        if (!srv_npy_parse(b.p, b.n, &e, err, sizeof err))
            fail_msg("%s: %s", cases[c].dict, err);
        assert_true(srv_tensor_entry_servable(&e, err, sizeof err));
        memset(out, 0, sizeof out);
        assert_true(srv_tensor_entry_to_f32(&e, b.p, out, &bad));
        if (memcmp(out, six, sizeof out) != 0)
            fail_msg("%s: [%g %g %g %g %g %g]", cases[c].dict, (double)out[0], (double)out[1],
                     (double)out[2], (double)out[3], (double)out[4], (double)out[5]);
        free(b.p);
    }
    /* A 3-D Fortran array: element (i, j, k) at i + 2 j + 6 k in the file. */
    {
        float f3[24], c3[24], got[24];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++) {
                    float v = (float)(100 * i + 10 * j + k);
                    f3[i + 2 * j + 6 * k] = v;
                    c3[(i * 3 + j) * 4 + k] = v;
                }
        buf b = npy(1, NPY("<f4", "True", "(2, 3, 4)"), f3, sizeof f3);
        assert_true(srv_npy_parse(b.p, b.n, &e, err, sizeof err));
        assert_true(srv_tensor_entry_to_f32(&e, b.p, got, &bad));
        assert_memory_equal(got, c3, sizeof c3);
        free(b.p);
    }
}

/* ------------------------------------------------------------------------- */
/* Conversions                                                               */
/* ------------------------------------------------------------------------- */

/* IEEE binary16 by its definition, in double. */
static double ref_f16(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v = exp == 0 ? man * pow(2.0, -24) : (1.0 + man / 1024.0) * pow(2.0, exp - 15);
    return sign ? -v : v;
}

static double ref_bf16(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 7) & 255, man = h & 127;
    double v = exp == 0 ? man * pow(2.0, -133) : (1.0 + man / 128.0) * pow(2.0, exp - 127);
    return sign ? -v : v;
}

static void test_conversions(void **state)
{
    (void)state;
    /* Every finite half and bfloat16 value, exactly. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = srv_f16_to_f32((uint16_t)h), g = srv_bf16_to_f32((uint16_t)h);
        if (((h >> 10) & 31) != 31 && (double)f != ref_f16((uint16_t)h))
            fail_msg("f16 0x%04x: got %.9g want %.17g", h, (double)f, ref_f16((uint16_t)h));
        if (((h >> 7) & 255) != 255 && (double)g != ref_bf16((uint16_t)h))
            fail_msg("bf16 0x%04x: got %.9g want %.17g", h, (double)g, ref_bf16((uint16_t)h));
    }
    /* Named values: subnormals, extremes, signed zero, inf and NaN. */
    assert_true(srv_f16_to_f32(0x0001) == 5.9604644775390625e-08f); /* 2^-24 */
    assert_true(srv_f16_to_f32(0x03ff) == 6.09755516052246094e-05f);
    assert_true(srv_f16_to_f32(0x0400) == 6.103515625e-05f); /* 2^-14 */
    assert_true(srv_f16_to_f32(0x3c00) == 1.0f);
    assert_true(srv_f16_to_f32(0x3555) == 0.333251953125f);
    assert_true(srv_f16_to_f32(0xc000) == -2.0f);
    assert_true(srv_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(srv_f16_to_f32(0x8000) == 0.0f && signbit(srv_f16_to_f32(0x8000)));
    assert_true(isinf(srv_f16_to_f32(0x7c00)) && srv_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(srv_f16_to_f32(0xfc00)) && srv_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(srv_f16_to_f32(0x7e00)));
    assert_true(srv_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(srv_bf16_to_f32(0x4049) == 3.140625f);
    assert_true(srv_bf16_to_f32(0xc040) == -3.0f);
    assert_true(srv_bf16_to_f32(0x0001) == (float)ldexp(1.0, -133));
    assert_true(isinf(srv_bf16_to_f32(0x7f80)));
    assert_true(isnan(srv_bf16_to_f32(0x7fc0)));

    /* Buffers: little-endian bytes at an odd address; a non-finite value
     * stops the conversion at its index. */
    unsigned char raw[1 + 4 * 8];
    float out[4];
    size_t bad = 99;
    const unsigned char f16[] = {0x00, 0x3c, 0x01, 0x00, 0x00, 0xc0, 0xff, 0x7b};
    memcpy(raw + 1, f16, sizeof f16);
    assert_true(srv_dtype_to_f32(SRV_DTYPE_F16, raw + 1, 4, out, &bad));
    assert_true(out[0] == 1.0f && out[1] == 5.9604644775390625e-08f && out[2] == -2.0f &&
                out[3] == 65504.0f);
    const unsigned char f16inf[] = {0x00, 0x3c, 0x00, 0x7c};
    assert_false(srv_dtype_to_f32(SRV_DTYPE_F16, f16inf, 2, out, &bad));
    assert_int_equal(bad, 1);
    const double d[4] = {0.1, -2.5, 1e-300, 3.4028234663852886e38};
    for (int i = 0; i < 4; i++) {
        uint64_t u;
        memcpy(&u, &d[i], 8);
        for (int k = 0; k < 8; k++)
            raw[1 + 8 * i + k] = (unsigned char)(u >> (8 * k));
    }
    assert_true(srv_dtype_to_f32(SRV_DTYPE_F64, raw + 1, 4, out, &bad));
    assert_true(out[0] == 0.1f && out[1] == -2.5f && out[2] == 0.0f && out[3] == FLT_MAX);
    const double big = 1e39;
    uint64_t u;
    memcpy(&u, &big, 8);
    for (int k = 0; k < 8; k++)
        raw[1 + 8 + k] = (unsigned char)(u >> (8 * k));
    assert_false(srv_dtype_to_f32(SRV_DTYPE_F64, raw + 1, 4, out, &bad));
    assert_int_equal(bad, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_errors),
        cmocka_unit_test(test_safetensors_checkpoint_entries),
        cmocka_unit_test(test_safetensors_ok),
        cmocka_unit_test(test_npy_errors),
        cmocka_unit_test(test_npy_ok),
        cmocka_unit_test(test_npy_orders),
        cmocka_unit_test(test_conversions),
    };
    return cmocka_run_group_tests_name("tensor_file", tests, NULL, NULL);
}
