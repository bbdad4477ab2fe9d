/* test_tensor_store.c - named tensors (server/store/tensor_file.c,
 * server/store/tensor_store.c): every malformed safetensors and .npy header, the
 * float16/bfloat16/float64 conversions against an independent double
 * formula (all 65536 half values), loading real files from a temporary
 * folder, and {"ref"} tensors that borrow the store's data without a copy,
 * through srv_job_prepare as well. */
#include "testutil.h"

#include "api/api.h"
#include "codec/half.h"
#include "store/tensor_file.h"
#include "store/tensor_store.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* Builders                                                                  */
/* ------------------------------------------------------------------------- */

typedef struct buf {
    unsigned char *p;
    size_t n;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    assert_non_null(b->p);
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* safetensors bytes: the header as given (length hlen, or strlen(header)
 * when hlen is 0), then data. */
static buf st(const char *header, uint64_t hlen, const void *data, size_t n)
{
    buf b = {NULL, 0};
    unsigned char len[8];
    uint64_t h = hlen ? hlen : strlen(header);
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(h >> (8 * i));
    put(&b, len, 8);
    put(&b, header, strlen(header));
    if (n > 0)
        put(&b, data, n);
    return b;
}

/* .npy bytes, version 1 (or 2), with the dict text as given, padded so the
 * data starts 64-byte aligned, then data. */
static buf npy(int version, const char *dict, const void *data, size_t n)
{
    buf b = {NULL, 0};
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)version, 0};
    size_t pre_n = version == 1 ? 10 : 12, hl = strlen(dict) + 1;
    char hdr[512];
    hl += (64 - (pre_n + hl) % 64) % 64;
    snprintf(hdr, sizeof hdr, "%-*s", (int)hl - 1, dict);
    hdr[hl - 1] = '\n';
    hdr[hl] = '\0';
    for (size_t i = 0; i < pre_n - 8; i++)
        pre[8 + i] = (unsigned char)(hl >> (8 * i));
    put(&b, pre, pre_n);
    put(&b, hdr, hl);
    if (n > 0)
        put(&b, data, n);
    return b;
}

static const float six[6] = {0.5f, -1.0f, 2.25f, 3.0f, -4.5f, 1e-3f};

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

#define T23(dtype, b, e)                                                                           \
    "\"a\":{\"dtype\":\"" dtype "\",\"shape\":[2,3],\"data_offsets\":[" #b "," #e "]}"

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

#define NPY(descr, order, shape)                                                                   \
    "{'descr': '" descr "', 'fortran_order': " order ", 'shape': " shape ", }"

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

/* ------------------------------------------------------------------------- */
/* The store, from files                                                     */
/* ------------------------------------------------------------------------- */

static char tmpdir[64];

static int make_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_tensor_store.XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int remove_tmp(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes b (and frees it) to tmpdir/name; returns the path (static slot). */
static const char *write_file(const char *name, buf b)
{
    static char paths[64][256];
    static int next;
    char *p = paths[next++ % 64];
    FILE *f;
    snprintf(p, 256, "%s/%s", tmpdir, name);
    f = fopen(p, "wb");
    assert_non_null(f);
    if (b.n > 0)
        assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    free(b.p);
    return p;
}

static srv_tensor_spec spec(const char *name, const char *path, const char *tensor)
{
    srv_tensor_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "%s", name);
    snprintf(s.path, sizeof s.path, "%s", path);
    snprintf(s.tensor, sizeof s.tensor, "%s", tensor ? tensor : "");
    return s;
}

/* Loads specs expecting failure with the path and msg in the message. */
static void load_expect_error(const srv_tensor_spec *specs, size_t n, const char *path,
                              const char *msg)
{
    srv_tensor_store *s = (srv_tensor_store *)(uintptr_t)0x1;
    char err[1024] = "";
    if (srv_tensor_store_load(specs, n, &s, err, sizeof err))
        fail_msg("loaded, expected an error with '%s'", msg);
    assert_true(s == (srv_tensor_store *)(uintptr_t)0x1);
    if ((path != NULL && strstr(err, path) == NULL) || strstr(err, msg) == NULL)
        fail_msg("error '%s' lacks '%s' or '%s'", err, path ? path : "", msg);
}

/* A store with: tab (F32 safetensors, aligned: mapped), half (F16,
 * converted), odd (F32 at an unaligned offset: copied), vec (.npy). */
static srv_tensor_store *load_good(void)
{
    /* The header is padded to 8 + 192 bytes, so the data is aligned. */
    char h[193];
    snprintf(h, sizeof h, "%-192s",
             "{\"tab\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
             "\"half\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[24,32]}}");
    unsigned char data[32];
    const unsigned char f16[] = {0x00, 0x3c, 0x01, 0x00, 0x00, 0xc0, 0xff, 0x7b};
    char odd[96];
    srv_tensor_spec sp[4];
    memcpy(data, six, 24);
    memcpy(data + 24, f16, 8);
    /* Pad so that the data starts at an odd address (8 + header length). */
    snprintf(odd, sizeof odd, "{\"x\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}");
    while ((8 + strlen(odd)) % 4 != 1)
        strcat(odd, " ");
    sp[0] = spec("tab", write_file("model.safetensors", st(h, 0, data, 32)), "tab");
    sp[1] = spec("half", sp[0].path, "half");
    sp[2] = spec("odd", write_file("odd.safetensors", st(odd, 0, six, 24)), NULL);
    sp[3] =
        spec("vec.1", write_file("vec.npy", npy(1, NPY("<f4", "False", "(6,)"), six, 24)), NULL);
    srv_tensor_store *s = NULL;
    char err[512] = "";
    if (!srv_tensor_store_load(sp, 4, &s, err, sizeof err))
        fail_msg("%s", err);
    return s;
}

static void test_store_load(void **state)
{
    (void)state;
    srv_tensor_store *s = load_good();
    const srv_named_tensor *t;

    assert_int_equal(srv_tensor_store_count(s), 4);
    t = srv_tensor_store_find(s, "tab");
    assert_non_null(t);
    assert_true(t->mapped); /* used in place from the mapping */
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->count, 6);
    assert_memory_equal(t->data, six, 24);
    assert_string_equal(t->tensor, "tab");
    t = srv_tensor_store_find(s, "half");
    assert_false(t->mapped);
    assert_int_equal(t->dtype, SRV_DTYPE_F16);
    assert_int_equal(t->file_bytes, 8);
    assert_true(t->data[0] == 1.0f && t->data[1] == 5.9604644775390625e-08f &&
                t->data[2] == -2.0f && t->data[3] == 65504.0f);
    t = srv_tensor_store_find(s, "odd");
    assert_false(t->mapped); /* unaligned F32: copied */
    assert_string_equal(t->tensor, "x");
    assert_memory_equal(t->data, six, 24);
    t = srv_tensor_store_find(s, "vec.1");
    assert_true(t->mapped);
    assert_string_equal(t->tensor, "");
    assert_memory_equal(t->data, six, 24);
    assert_null(srv_tensor_store_find(s, "nope"));
    assert_ptr_equal(srv_tensor_store_at(s, 0), srv_tensor_store_find(s, "tab"));
    assert_null(srv_tensor_store_at(s, 4));

    /* GET /v1/tensors. */
    srv_reply r;
    memset(&r, 0, sizeof r);
    srv_endpoint_answer(&srv_ep_tensors, &(srv_limits){.tensors = s}, &r);
    assert_int_equal(r.http_status, 200);
    cJSON *root = cJSON_ParseWithLength(r.body, r.body_len);
    const cJSON *list = cJSON_GetObjectItem(root, "tensors"), *half = cJSON_GetArrayItem(list, 1);
    assert_int_equal(cJSON_GetArraySize(list), 4);
    assert_string_equal(cJSON_GetObjectItem(half, "name")->valuestring, "half");
    assert_string_equal(cJSON_GetObjectItem(half, "dtype")->valuestring, "F16");
    assert_string_equal(cJSON_GetObjectItem(half, "tensor")->valuestring, "half");
    assert_non_null(strstr(cJSON_GetObjectItem(half, "file")->valuestring, "model.safetensors"));
    assert_int_equal(cJSON_GetObjectItem(half, "bytes")->valuedouble, 8);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(half, "shape")), 2);
    cJSON_Delete(root);
    srv_reply_free(&r);
    srv_tensor_store_free(s);

    /* No specs: no store, an empty list. */
    s = (srv_tensor_store *)(uintptr_t)0x1;
    assert_true(srv_tensor_store_load(NULL, 0, &s, NULL, 0));
    assert_null(s);
    memset(&r, 0, sizeof r);
    srv_endpoint_answer(&srv_ep_tensors, &(srv_limits){.tensors = NULL}, &r);
    assert_int_equal(r.http_status, 200);
    assert_memory_equal(r.body, "{\"tensors\":[]}", r.body_len);
    srv_reply_free(&r);
    srv_tensor_store_free(NULL);
}

static void test_store_errors(void **state)
{
    (void)state;
    const char *two = write_file(
        "two.safetensors", st("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]}}",
                              0, six, 24));
    srv_tensor_spec sp[2];

    sp[0] = spec("t", two, NULL);
    load_expect_error(sp, 1, two, "holds 2 tensors; pick one with t=");
    load_expect_error(sp, 1, two, "(tensors: a, b)");
    sp[0] = spec("t", two, "c");
    load_expect_error(sp, 1, two, "no tensor 'c' in the file (tensors: a, b)");
    sp[0] = spec("t", two, "a");
    sp[1] = spec("t", two, "b");
    load_expect_error(sp, 2, two, "tensor name 't' is given twice");

    /* Each malformed file, named in the message. */
    const struct {
        const char *file;
        buf b;
        const char *msg;
    } bad[] = {
        {"trunc.safetensors", st("{" T23("F32", 0, 24) "}", 0, six, 12), "out of range"},
        {"hlen.safetensors", st("{" T23("F32", 0, 24) "}", 1000, six, 24), "runs past the end"},
        {"overlap.safetensors",
         st("{" T23("F32", 0, 24) ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                                  "\"data_offsets\":[20,24]}}",
            0, six, 24),
         "overlap"},
        {"range.safetensors", st("{" T23("F32", 4, 28) "}", 0, six, 24), "out of range"},
        {"dtype.safetensors",
         st("{\"a\":{\"dtype\":\"U8\",\"shape\":[24],\"data_offsets\":[0,24]}}", 0, six, 24),
         "tensor 'a' is U8: posattnd computes with F32, F16, BF16 and F64"},
        {"dup.safetensors", st("{" T23("F32", 0, 24) "," T23("F32", 0, 24) "}", 0, six, 24),
         "appears twice"},
        {"size.safetensors", st("{" T23("F32", 0, 16) "}", 0, six, 24), "needs 24"},
        {"empty.safetensors", st("{}", 0, NULL, 0), "holds no tensors"},
        {"zero.safetensors", {NULL, 0}, "too short"},
        {"nan.safetensors",
         st("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 0,
            "\x00\x3c\x00\x7e", 4),
         "element 1 of F16 is not finite"},
        {"magic.npy", st("{}", 0, six, 24), "\\x93NUMPY"},
        {"trunc.npy", npy(1, NPY("<f4", "False", "(2, 3)"), six, 8), "truncated data"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = write_file(bad[i].file, bad[i].b);
        sp[0] = spec("t", p, NULL);
        load_expect_error(sp, 1, p, bad[i].msg);
    }
    /* Inf stored as F32 in place is refused too. */
    float withinf[3] = {1.0f, INFINITY, 2.0f};
    const char *p = write_file("inf.npy", npy(1, NPY("<f4", "False", "(3,)"), withinf, 12));
    sp[0] = spec("t", p, NULL);
    load_expect_error(sp, 1, p, "element 1 is not finite");

    /* A good file then a bad one: nothing is loaded (and nothing leaks). */
    sp[0] = spec("a", two, "a");
    sp[1] = spec("b", p, NULL);
    load_expect_error(sp, 2, p, "not finite");

    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.npy", tmpdir);
    sp[0] = spec("t", missing, NULL);
    load_expect_error(sp, 1, missing, "cannot open");
    sp[0] = spec("t", two, NULL);
    snprintf(sp[0].path, sizeof sp[0].path, "%s", tmpdir);
    load_expect_error(sp, 1, tmpdir, "must end in .safetensors or .npy");
    sp[0] = spec("t", write_file("one.npy", npy(1, NPY("<f4", "False", "(6,)"), six, 24)), "x");
    load_expect_error(sp, 1, "one.npy", "a .npy file holds one array; drop ':x'");

    /* A checkpoint's other tensors may be anything; the picked one may not. */
    const char *ck = write_file(
        "ck.safetensors", st("{\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                             "\"none\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                             "\"one\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]},"
                             "\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]}}",
                             0, six, 24));
    srv_tensor_store *s = NULL;
    char err[512] = "";
    sp[0] = spec("w", ck, "w");
    if (!srv_tensor_store_load(sp, 1, &s, err, sizeof err))
        fail_msg("%s", err);
    const srv_named_tensor *w = srv_tensor_store_find(s, "w");
    assert_non_null(w);
    assert_memory_equal(w->data, six + 3, 3 * sizeof(float));
    srv_tensor_store_free(s);
    sp[0] = spec("t", ck, "ids");
    load_expect_error(sp, 1, ck, "tensor 'ids' is I64");
    sp[0] = spec("t", ck, "none");
    load_expect_error(sp, 1, ck, "tensor 'none' is empty (shape [0])");
    sp[0] = spec("t", ck, "one");
    load_expect_error(sp, 1, ck, "tensor 'one' is 0-rank");
}

/* ------------------------------------------------------------------------- */
/* References                                                                */
/* ------------------------------------------------------------------------- */

static void ref_expect_error(const srv_tensor_store *s, const char *json, int want_ndim,
                             const char *code, const char *field, const char *msg)
{
    cJSON *node = cJSON_Parse(json), *root, *e;
    srv_reply r;
    srv_tensor t;
    memset(&r, 0, sizeof r);
    memset(&t, 0x5A, sizeof t);
    assert_non_null(node);
    assert_true(srv_tensor_is_ref(node));
    assert_false(srv_tensor_store_ref(s, node, "scheme.table", want_ndim, &t, &r));
    assert_int_equal(t.ndim, 0x5A5A5A5A);
    assert_int_equal(r.http_status, 400);
    root = cJSON_ParseWithLength(r.body, r.body_len);
    e = cJSON_GetObjectItem(root, "error");
    assert_string_equal(cJSON_GetObjectItem(e, "code")->valuestring, code);
    assert_string_equal(cJSON_GetObjectItem(e, "field")->valuestring, field);
    if (strstr(cJSON_GetObjectItem(e, "message")->valuestring, msg) == NULL)
        fail_msg("message '%s' lacks '%s'", cJSON_GetObjectItem(e, "message")->valuestring, msg);
    cJSON_Delete(root);
    cJSON_Delete(node);
    srv_reply_free(&r);
}

static void test_refs(void **state)
{
    (void)state;
    srv_tensor_store *s = load_good();
    cJSON *node = cJSON_Parse("{\"ref\":\"tab\"}");
    srv_tensor t;
    srv_reply r;
    memset(&r, 0, sizeof r);

    assert_true(srv_tensor_store_ref(s, node, "scheme.table", 2, &t, &r));
    /* No copy: the very data of the store. */
    assert_ptr_equal(t.data, srv_tensor_store_find(s, "tab")->data);
    assert_true(t.borrowed);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 2);
    assert_int_equal(t.shape[1], 3);
    assert_int_equal(t.count, 6);
    srv_tensor_free(&t); /* frees nothing: the store still holds it */
    assert_null(t.data);
    assert_memory_equal(srv_tensor_store_find(s, "tab")->data, six, 24);
    cJSON_Delete(node);

    assert_false(srv_tensor_is_ref(NULL));
    node = cJSON_Parse("{\"shape\":[1],\"data\":[1]}");
    assert_false(srv_tensor_is_ref(node));
    cJSON_Delete(node);

    ref_expect_error(s, "{\"ref\":\"nope\"}", 0, "UNKNOWN_TENSOR", "scheme.table.ref",
                     "scheme.table.ref='nope' names no loaded tensor (loaded: tab, half, odd, "
                     "vec.1)");
    ref_expect_error(NULL, "{\"ref\":\"nope\"}", 0, "UNKNOWN_TENSOR", "scheme.table.ref",
                     "none are loaded");
    /* Names match whole: a prefix or an extension of a loaded name is not it. */
    ref_expect_error(s, "{\"ref\":\"ta\"}", 0, "UNKNOWN_TENSOR", "scheme.table.ref",
                     "names no loaded tensor");
    ref_expect_error(s, "{\"ref\":\"tab2\"}", 0, "UNKNOWN_TENSOR", "scheme.table.ref",
                     "names no loaded tensor");
    assert_null(srv_tensor_store_find(s, "vec"));
    assert_null(srv_tensor_store_find(s, "tabs"));
    ref_expect_error(s, "{\"ref\":\"vec.1\"}", 2, "SHAPE_MISMATCH", "scheme.table.ref",
                     "has 1 dimensions, expected 2");
    ref_expect_error(s, "{\"ref\":3}", 0, "INVALID_ARGUMENT", "scheme.table.ref", "a string");
    ref_expect_error(s, "{\"ref\":\"tab\",\"data\":[1]}", 0, "UNKNOWN_FIELD", "scheme.table.data",
                     "only 'ref'");
    srv_tensor_store_free(s);
}

/* Through the API: a learned table by reference borrows the store's data,
 * answers as the same table inline does, and is not request memory. */
static void test_refs_through_api(void **state)
{
    (void)state;
    enum { ROWS = 512, COLS = 64 };
    float *table = malloc(ROWS * COLS * sizeof *table);
    tu_rng rng;
    tu_rng_seed(&rng, 9);
    tu_fill(&rng, table, ROWS * COLS, -1, 1);
    buf b = npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (512, 64), }", table,
                ROWS * COLS * sizeof *table);
    srv_tensor_spec sp[2] = {
        spec("wpe", write_file("wpe.npy", b), NULL),
        spec("qv",
             write_file("qv.npy", npy(1, NPY("<f4", "False", "(64,)"), table, 64 * sizeof *table)),
             NULL)};
    srv_tensor_store *s = NULL;
    char err[256];
    if (!srv_tensor_store_load(sp, 2, &s, err, sizeof err))
        fail_msg("%s", err);

    srv_limits lim = {8, (size_t)1 << 24, (size_t)100 << 10, 1, s};
    const char *body = "{\"scheme\":{\"type\":\"learned\",\"table\":{\"ref\":\"wpe\"}},"
                       "\"positions\":[3,0,511],\"output_encoding\":\"b64\"}";
    srv_job *job = NULL;
    srv_reply r;
    srv_workspace ws = {NULL, 0};
    memset(&r, 0, sizeof r);
    /* The table is 128 KB and the limit 100 KB: inline it does not fit
     * (checked below), by reference it costs nothing. */
    if (!srv_job_prepare(&srv_ep_encode, body, strlen(body), &lim, &job, &r))
        fail_msg("%.*s", (int)r.body_len, r.body);
    for (size_t i = 0; i < srv_job_task_count(job); i++)
        srv_job_run_task(job, i, &ws);
    srv_job_finish(job, &r);
    srv_job_free(job);
    srv_workspace_free(&ws);
    assert_int_equal(r.http_status, 200);
    cJSON *root = cJSON_ParseWithLength(r.body, r.body_len);
    const cJSON *enc = NULL, *m;
    cJSON_ArrayForEach(m, root) if (cJSON_IsObject(m) && cJSON_GetObjectItem(m, "b64")) enc = m;
    assert_non_null(enc);
    unsigned char got[3 * COLS * 4];
    size_t n = 0;
    const char *b64 = cJSON_GetObjectItem(enc, "b64")->valuestring;
    assert_true(srv_b64_decode(b64, strlen(b64), got, sizeof got, &n));
    assert_int_equal(n, sizeof got);
    /* Learned encoding of position p is table row p, exactly. */
    assert_memory_equal(got, table + 3 * COLS, COLS * 4);
    assert_memory_equal(got + COLS * 4, table, COLS * 4);
    assert_memory_equal(got + 2 * COLS * 4, table + 511 * COLS, COLS * 4);
    srv_reply_free(&r);

    /* The same table inline: 413. */
    {
        size_t raw = ROWS * COLS * sizeof *table;
        char *b64t = malloc(srv_b64_encoded_len(raw) + 1), *inl = malloc(raw * 2 + 256);
        srv_b64_encode((const unsigned char *)table, raw, b64t);
        sprintf(inl,
                "{\"scheme\":{\"type\":\"learned\",\"table\":{\"shape\":[512,64],\"b64\":\"%s\"}},"
                "\"positions\":[3,0,511],\"output_encoding\":\"b64\"}",
                b64t);
        memset(&r, 0, sizeof r);
        assert_false(srv_job_prepare(&srv_ep_encode, inl, strlen(inl), &lim, &job, &r));
        assert_int_equal(r.http_status, 413);
        srv_reply_free(&r);
        lim.max_request_memory = (size_t)1 << 30; /* and with room, it answers as the ref did */
        memset(&r, 0, sizeof r);
        assert_true(srv_job_prepare(&srv_ep_encode, inl, strlen(inl), &lim, &job, &r));
        for (size_t i = 0; i < srv_job_task_count(job); i++)
            srv_job_run_task(job, i, &ws);
        srv_job_finish(job, &r);
        srv_job_free(job);
        srv_workspace_free(&ws);
        assert_int_equal(r.http_status, 200);
        assert_non_null(strstr(r.body, b64));
        srv_reply_free(&r);
        free(inl);
        free(b64t);
    }

    /* rope_offset takes q and k as 1-D tensors and keeps their data: a
     * loaded one is copied (ASan would catch a free of the store's data). */
    {
        const char *ana = "{\"analysis\":\"rope_offset\",\"scheme\":{\"type\":\"rope\"},"
                          "\"q\":{\"ref\":\"qv\"},\"k\":{\"ref\":\"qv\"},\"offsets\":[1,2]}";
        memset(&r, 0, sizeof r);
        if (!srv_job_prepare(&srv_ep_analyze, ana, strlen(ana), &lim, &job, &r))
            fail_msg("%.*s", (int)r.body_len, r.body);
        for (size_t i = 0; i < srv_job_task_count(job); i++)
            srv_job_run_task(job, i, &ws);
        srv_job_finish(job, &r);
        srv_job_free(job);
        srv_workspace_free(&ws);
        assert_int_equal(r.http_status, 200);
        srv_reply_free(&r);
        assert_memory_equal(srv_tensor_store_find(s, "qv")->data, table, 64 * sizeof *table);
    }

    /* A position outside the loaded table: the library's error, as inline. */
    const char *bad = "{\"scheme\":{\"type\":\"learned\",\"table\":{\"ref\":\"wpe\"}},"
                      "\"positions\":[512]}";
    memset(&r, 0, sizeof r);
    assert_false(srv_job_prepare(&srv_ep_encode, bad, strlen(bad), &lim, &job, &r));
    assert_int_equal(r.http_status, 400);
    srv_reply_free(&r);

    cJSON_Delete(root);
    srv_tensor_store_free(s);
    free(table);
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
        cmocka_unit_test(test_store_load),
        cmocka_unit_test(test_store_errors),
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_refs_through_api),
    };
    return cmocka_run_group_tests_name("tensor_store", tests, make_tmp, remove_tmp);
}
