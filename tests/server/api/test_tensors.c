/* test_tensors.c - server/api/tensors.c: GET /v1/tensors is an empty list
 * without a tensor store (or limits), and with one loaded from safetensors
 * and .npy files lists each tensor in load order: name, shape, dtype in the
 * file, file, tensor name and bytes as stored. Takes no body.
 */
#include "api/job.h"
#include "store/tensor_store.h"
#include "../store/tensor_bytes.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[64];

static int make_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_tensors.XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int remove_tmp(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes b (and frees it) to tmpdir/name into path[cap]. */
static void write_file(const char *name, buf b, char *path, size_t cap)
{
    FILE *f;
    snprintf(path, cap, "%s/%s", tmpdir, name);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    free(b.p);
}

static srv_limits lim_of(const srv_tensor_store *s)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = 1 << 16,
                      .max_request_memory = (size_t)64 << 20,
                      .parallel_parts = 1,
                      .tensors = s};
    return lim;
}

/* The answer's text (malloc'd), status 200 checked. */
static char *answer_text(const srv_limits *lim)
{
    srv_reply r;
    char *text;
    memset(&r, 0, sizeof r);
    srv_endpoint_answer(&srv_ep_tensors, lim, &r);
    assert_int_equal(r.http_status, 200);
    assert_non_null(strstr(r.content_type, "application/json"));
    text = tu_alloc(r.body_len + 1, 1);
    memcpy(text, r.body, r.body_len);
    srv_reply_free(&r);
    return text;
}

static void test_no_store(void **state)
{
    (void)state;
    srv_limits lim = lim_of(NULL);
    char *a = answer_text(&lim), *b = answer_text(NULL);
    assert_string_equal(a, "{\"tensors\":[]}");
    assert_string_equal(b, "{\"tensors\":[]}");
    free(a);
    free(b);

    /* A GET endpoint: no body taken. */
    srv_reply r;
    srv_job *job = NULL;
    memset(&r, 0, sizeof r);
    assert_false(srv_endpoint_takes_body(&srv_ep_tensors));
    assert_false(srv_job_prepare(&srv_ep_tensors, "{}", 2, &lim, &job, &r));
    assert_null(job);
    assert_int_equal(r.http_status, 404);
    srv_reply_free(&r);
}

/* One tensor of the answer, every member checked and no other. */
static void entry_is(const cJSON *o, const char *name, int ndim, const int64_t *shape,
                     const char *dtype, const char *file, const char *tensor, double bytes)
{
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape"), *d;
    int k = 0;
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name")), name);
    assert_int_equal(cJSON_GetArraySize(sh), ndim);
    cJSON_ArrayForEach(d, sh)
    {
        assert_true(cJSON_IsNumber(d) && d->valuedouble == (double)shape[k]);
        k++;
    }
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "dtype")), dtype);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "file")), file);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "tensor")),
                        tensor);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bytes");
    if (!cJSON_IsNumber(b) || b->valuedouble != bytes)
        fail_msg("%s: bytes %g, wanted %g", name, cJSON_IsNumber(b) ? b->valuedouble : -1, bytes);
    assert_int_equal(cJSON_GetArraySize(o), 6);
}

static void test_with_store(void **state)
{
    (void)state;
    /* A safetensors file with an F32 [2, 3] and an F16 [2, 2, 1] tensor (the
     * header padded so the data is aligned), and a .npy of 6 float64. */
    char h[193], st_path[256], npy_path[256];
    snprintf(h, sizeof h, "%-192s",
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
             "\"h\":{\"dtype\":\"F16\",\"shape\":[2,2,1],\"data_offsets\":[24,32]}}");
    unsigned char data[32];
    const unsigned char f16[8] = {0x00, 0x3c, 0x01, 0x00, 0x00, 0xc0, 0xff, 0x7b};
    memcpy(data, six, 24);
    memcpy(data + 24, f16, 8);
    write_file("model.safetensors", st(h, 0, data, 32), st_path, sizeof st_path);
    double d6[6];
    for (int i = 0; i < 6; i++)
        d6[i] = six[i];
    write_file("pos.npy", npy(1, NPY("<f8", "False", "(6,)"), d6, sizeof d6), npy_path,
               sizeof npy_path);

    srv_tensor_spec sp[3];
    memset(sp, 0, sizeof sp);
    snprintf(sp[0].name, sizeof sp[0].name, "half");
    snprintf(sp[0].path, sizeof sp[0].path, "%s", st_path);
    snprintf(sp[0].tensor, sizeof sp[0].tensor, "h");
    snprintf(sp[1].name, sizeof sp[1].name, "emb.w");
    snprintf(sp[1].path, sizeof sp[1].path, "%s", st_path);
    snprintf(sp[1].tensor, sizeof sp[1].tensor, "w");
    snprintf(sp[2].name, sizeof sp[2].name, "pos");
    snprintf(sp[2].path, sizeof sp[2].path, "%s", npy_path);
    srv_tensor_store *s = NULL;
    char err[512] = "";
    if (!srv_tensor_store_load(sp, 3, &s, err, sizeof err))
        fail_msg("%s", err);

    srv_limits lim = lim_of(s);
    char *text = answer_text(&lim);
    cJSON *ans = cJSON_Parse(text);
    assert_non_null(ans);
    assert_int_equal(cJSON_GetArraySize(ans), 1);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(ans, "tensors");
    assert_int_equal(cJSON_GetArraySize(list), 3);
    /* In load order; bytes as stored in the file, not as float32. */
    const int64_t s0[3] = {2, 2, 1}, s1[2] = {2, 3}, s2[1] = {6};
    entry_is(cJSON_GetArrayItem(list, 0), "half", 3, s0, "F16", st_path, "h", 8);
    entry_is(cJSON_GetArrayItem(list, 1), "emb.w", 2, s1, "F32", st_path, "w", 24);
    entry_is(cJSON_GetArrayItem(list, 2), "pos", 1, s2, "F64", npy_path, "", 48);
    cJSON_Delete(ans);
    free(text);

    /* The same store answers the same text each time (read-only). */
    char *again = answer_text(&lim);
    text = answer_text(&lim);
    assert_string_equal(text, again);
    free(text);
    free(again);
    srv_tensor_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_store),
        cmocka_unit_test(test_with_store),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
