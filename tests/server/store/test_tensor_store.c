/* test_tensor_store.c - named tensors (server/store/tensor_store.c): loading
 * real safetensors and .npy files from a temporary folder (mapped in place,
 * converted or copied) and every way a load fails, and {"ref"} tensors that
 * borrow the store's data without a copy, through srv_job_prepare as well.
 * The files are built by tests/server/store/tensor_bytes.c.
 */
#include "testutil.h"

#include "api/api.h"
#include "store/tensor_file.h"
#include "store/tensor_store.h"
#include "tensor_bytes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

    srv_limits lim = {.max_batch_items = 8,
                      .max_tensor_elements = (size_t)1 << 24,
                      .max_request_memory = (size_t)100 << 10,
                      .parallel_parts = 1,
                      .tensors = s};
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
        cmocka_unit_test(test_store_load),
        cmocka_unit_test(test_store_errors),
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_refs_through_api),
    };
    return cmocka_run_group_tests_name("tensor_store", tests, make_tmp, remove_tmp);
}
