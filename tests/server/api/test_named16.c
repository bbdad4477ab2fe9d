/* test_named16.c - named k and v in 16 bits (server/store/tensor_store.c,
 * server/api/item.c): a BF16 or F16 tensor of a safetensors file keeps its
 * file's bits beside its float32 copy when they sit 4-byte aligned, and an
 * attention item whose k and v name two such tensors of one type reads them
 * in 16 bits (pa_attention.kv_dtype): the same output, bit for bit, as the
 * item with the widened values inline, and half the key and value bytes in
 * its timing. A batch, a mixed pair, a type mismatch and a tensor the file
 * holds unaligned read float32, with the same results. A .npy f2 array
 * keeps its bits when little-endian.
 */
#include "api/job.h"
#include "store/tensor_store.h"
#include "../store/tensor_bytes.h"
#include "api_harness.h"
#include "ref_half.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LQ = 3, LK = 40, H = 4, HKV = 2, D = 8, B = 2 };
#define KV ((size_t)LK * HKV * D) /* elements of one k or v */

static char tmpdir[64];
static srv_tensor_store *store;
/* The tensors' values as float32 (exactly the widened 16-bit ones). */
static float kb[B * KV], vb[B * KV], kf[KV], vf[KV], q[B * LQ * H * D];
static uint16_t kb16[B * KV], vb16[B * KV], kf16[KV], vf16[KV];

/* n random values rounded to bf16 (or f16) into bits and their floats. */
static void fill16(tu_rng *r, bool bf16, size_t n, uint16_t *bits, float *vals)
{
    for (size_t i = 0; i < n; i++) {
        const float x = (float)tu_uniform(r, -2, 2);
        bits[i] = bf16 ? ref_bf16_round(x) : ref_f16_round(x);
        vals[i] = (float)(bf16 ? ref_bf16_value(bits[i]) : ref_f16_value(bits[i]));
    }
}

/* A safetensors file of every tensor above, its header padded to 8 bytes
 * as the format asks: k and v (BF16 [LK, HKV, D], then the same 4-D [B,
 * LK, HKV, D]), kh and vh (F16), and "odd", kf16 again at an offset two
 * bytes past a multiple of four (after "pad", one F16 0: the format allows
 * no hole). */
static int setup(void **state)
{
    (void)state;
    tu_rng r;
    char path[128], h[800], body[760];
    const size_t kvb = KV * 2, bb = B * KV * 2;
    size_t o = 0, n = 0;
    unsigned char *data;
    tu_rng_seed(&r, 1616);
    fill16(&r, true, B * KV, kb16, kb);
    fill16(&r, true, B * KV, vb16, vb);
    fill16(&r, false, KV, kf16, kf);
    fill16(&r, false, KV, vf16, vf);
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        q[i] = (float)tu_uniform(&r, -1, 1);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_named16.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    data = tu_alloc(2 * kvb + 2 * bb + 2 * kvb + 2 + kvb, 1);
#define PUT(src, bytes) (memcpy(data + o, (src), (bytes)), o += (bytes))
    PUT(kb16, kvb);
    PUT(vb16, kvb);
    PUT(kb16, bb);
    PUT(vb16, bb);
    PUT(kf16, kvb);
    PUT(vf16, kvb);
    o += 2;
    PUT(kf16, kvb);
#undef PUT
    n += (size_t)snprintf(
        body + n, sizeof body - n,
        "{\"k\":{\"dtype\":\"BF16\",\"shape\":[%d,%d,%d],\"data_offsets\":[0,%zu]},"
        "\"v\":{\"dtype\":\"BF16\",\"shape\":[%d,%d,%d],\"data_offsets\":[%zu,%zu]},"
        "\"k4\":{\"dtype\":\"BF16\",\"shape\":[%d,%d,%d,%d],\"data_offsets\":[%zu,%zu]},"
        "\"v4\":{\"dtype\":\"BF16\",\"shape\":[%d,%d,%d,%d],\"data_offsets\":[%zu,%zu]},",
        LK, HKV, D, kvb, LK, HKV, D, kvb, 2 * kvb, B, LK, HKV, D, 2 * kvb, 2 * kvb + bb, B, LK, HKV,
        D, 2 * kvb + bb, 2 * kvb + 2 * bb);
    o = 2 * kvb + 2 * bb;
    snprintf(body + n, sizeof body - n,
             "\"kh\":{\"dtype\":\"F16\",\"shape\":[%d,%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"vh\":{\"dtype\":\"F16\",\"shape\":[%d,%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"pad\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[%zu,%zu]},"
             "\"odd\":{\"dtype\":\"F16\",\"shape\":[%d,%d,%d],\"data_offsets\":[%zu,%zu]}}",
             LK, HKV, D, o, o + kvb, LK, HKV, D, o + kvb, o + 2 * kvb, o + 2 * kvb, o + 2 * kvb + 2,
             LK, HKV, D, o + 2 * kvb + 2, o + 3 * kvb + 2);
    snprintf(h, sizeof h, "%-*s", (int)((strlen(body) + 7) / 8 * 8), body);
    {
        buf b = st(h, 0, data, 2 * kvb + 2 * bb + 3 * kvb + 2);
        FILE *f;
        snprintf(path, sizeof path, "%s/kv.safetensors", tmpdir);
        f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
        fclose(f);
        free(b.p);
    }
    free(data);
    {
        /* kf16 as .npy: little-endian (kept), and big-endian (widened only) */
        char npy_le[128], npy_be[128];
        uint16_t swapped[KV];
        for (size_t i = 0; i < KV; i++)
            swapped[i] = (uint16_t)(kf16[i] << 8 | kf16[i] >> 8);
        buf le = npy(1, NPY("<f2", "False", "(40, 2, 8)"), kf16, sizeof kf16);
        buf be = npy(1, NPY(">f2", "False", "(40, 2, 8)"), swapped, sizeof swapped);
        snprintf(npy_le, sizeof npy_le, "%s/kle.npy", tmpdir);
        snprintf(npy_be, sizeof npy_be, "%s/kbe.npy", tmpdir);
        for (int i = 0; i < 2; i++) {
            FILE *f = fopen(i == 0 ? npy_le : npy_be, "wb");
            buf *b = i == 0 ? &le : &be;
            assert_non_null(f);
            assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
            fclose(f);
            free(b->p);
        }
        static const char *const names[] = {"k", "v", "k4", "v4", "kh", "vh", "odd", "kle", "kbe"};
        srv_tensor_spec sp[9];
        char err[512] = "";
        memset(sp, 0, sizeof sp);
        for (int i = 0; i < 9; i++) {
            snprintf(sp[i].name, sizeof sp[i].name, "%s", names[i]);
            snprintf(sp[i].path, sizeof sp[i].path, "%s", i < 7 ? path : i == 7 ? npy_le : npy_be);
            if (i < 7)
                snprintf(sp[i].tensor, sizeof sp[i].tensor, "%s", names[i]);
        }
        if (!srv_tensor_store_load(sp, 9, &store, err, sizeof err)) {
            fprintf(stderr, "test_named16: %s\n", err);
            return -1;
        }
    }
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    srv_tensor_store_free(store);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static srv_limits lim_with_store(void)
{
    srv_limits lim = limits();
    lim.tensors = store;
    return lim;
}

/* The store keeps the bits where they are aligned, and only there. */
static void test_store_keeps_bits(void **state)
{
    (void)state;
    const srv_named_tensor *k = srv_tensor_store_find(store, "k");
    const srv_named_tensor *kh = srv_tensor_store_find(store, "kh");
    const srv_named_tensor *odd = srv_tensor_store_find(store, "odd");
    assert_non_null(k);
    assert_non_null(kh);
    assert_non_null(odd);
    assert_non_null(k->data16);
    assert_memory_equal(k->data16, kb16, KV * sizeof(uint16_t));
    assert_memory_equal(k->data, kb, KV * sizeof(float)); /* the float copy as before */
    assert_non_null(kh->data16);
    assert_memory_equal(kh->data16, kf16, KV * sizeof(uint16_t));
    assert_null(odd->data16); /* two bytes past a float's alignment: float32 only */
    assert_memory_equal(odd->data, kf, KV * sizeof(float));
    /* .npy f2: kept when little-endian; a big-endian file is widened only */
    const srv_named_tensor *le = srv_tensor_store_find(store, "kle");
    const srv_named_tensor *be = srv_tensor_store_find(store, "kbe");
    assert_non_null(le);
    assert_non_null(be);
    assert_non_null(le->data16);
    assert_memory_equal(le->data16, kf16, KV * sizeof(uint16_t));
    assert_null(be->data16);
    assert_memory_equal(be->data, kf, KV * sizeof(float));
}

/* One item: q inline (the first LQ rows, or B batches of them), k and v
 * from the given JSON (a {"ref"} or an inline tensor), causal, scheme
 * rope; the answer's first output. */
static cJSON *answer(cJSON *k, cJSON *v, int lq, bool batched, cJSON **timing)
{
    srv_limits lim = lim_with_store();
    int status;
    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "q",
                          batched ? jtensor(q, 4, B, lq, H, D) : jtensor(q, 3, lq, H, D));
    cJSON_AddItemToObject(item, "k", k);
    cJSON_AddItemToObject(item, "v", v);
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddTrueToObject(item, "causal");
    cJSON *req = batch(&item, 1);
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    cJSON *ans = call_json(&srv_ep_attention, req, &lim, &status);
    expect_ok(ans, status);
    cJSON *out = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(ans, "outputs"), 0);
    cJSON_Delete(ans);
    *timing = cJSON_GetObjectItemCaseSensitive(out, "timing");
    return out;
}

static cJSON *ref(const char *name)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "ref", name);
    return o;
}

/* Both answers' outputs have the same bytes. */
static void same_output(const cJSON *a, const cJSON *b, const char *what)
{
    const char *x = str_at(a, "output", "b64"), *y = str_at(b, "output", "b64");
    assert_non_null(x);
    assert_non_null(y);
    if (strcmp(x, y) != 0)
        fail_msg("%s: the outputs differ", what);
}

/* Named 16-bit k and v give the inline float32 item's output, for a prefill
 * (the tiled kernel) and a decode (the decode kernel), reading 2 bytes an
 * element: the bytes of the timing are the inline item's less 2 (D + Dv)
 * Hkv a key. */
static void test_named_kv_in_16_bits(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++)
        for (int lq = 1; lq <= LQ; lq += LQ - 1) {
            const char *kn = t == 0 ? "k" : "kh", *vn = t == 0 ? "v" : "vh";
            const float *kw = t == 0 ? kb : kf, *vw = t == 0 ? vb : vf;
            cJSON *t16, *t32;
            cJSON *a = answer(ref(kn), ref(vn), lq, false, &t16);
            cJSON *b =
                answer(jtensor(kw, 3, LK, HKV, D), jtensor(vw, 3, LK, HKV, D), lq, false, &t32);
            char what[64];
            snprintf(what, sizeof what, "%s and %s, Lq=%d", kn, vn, lq);
            same_output(a, b, what);
            if (num(t32, "bytes") - num(t16, "bytes") != 2.0 * LK * HKV * (D + D))
                fail_msg("%s: bytes %.0f named, %.0f inline: not 2 bytes a key and value element",
                         what, num(t16, "bytes"), num(t32, "bytes"));
            cJSON_Delete(a);
            cJSON_Delete(b);
        }
}

/* Where the item cannot read 16 bits it reads the float copy: the same
 * output, and float32's bytes. */
static void test_float_where_not(void **state)
{
    (void)state;
    static const struct {
        const char *k, *v;
        bool batched;
    } cases[] = {
        {"k4", "v4", true},   /* a batch steps through float rows */
        {"k", "vh", false},   /* bf16 keys, f16 values */
        {"kh", "odd", false}, /* the values unaligned in the file */
        {"k", NULL, false},   /* the values inline */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bool bt = cases[i].batched;
        const float *kw = bt ? kb : strcmp(cases[i].k, "k") == 0 ? kb : kf;
        const float *vw = bt                               ? vb
                          : cases[i].v == NULL             ? vf
                          : strcmp(cases[i].v, "vh") == 0  ? vf
                          : strcmp(cases[i].v, "odd") == 0 ? kf
                                                           : vb;
        cJSON *t16, *t32;
        cJSON *a =
            answer(ref(cases[i].k),
                   cases[i].v != NULL ? ref(cases[i].v) : jtensor(vw, 3, LK, HKV, D), LQ, bt, &t16);
        cJSON *b =
            answer(bt ? jtensor(kw, 4, B, LK, HKV, D) : jtensor(kw, 3, LK, HKV, D),
                   bt ? jtensor(vw, 4, B, LK, HKV, D) : jtensor(vw, 3, LK, HKV, D), LQ, bt, &t32);
        char what[64];
        snprintf(what, sizeof what, "k %s, v %s", cases[i].k, cases[i].v ? cases[i].v : "inline");
        same_output(a, b, what);
        if (num(t16, "bytes") != num(t32, "bytes"))
            fail_msg("%s: bytes %.0f named, %.0f inline", what, num(t16, "bytes"),
                     num(t32, "bytes"));
        cJSON_Delete(a);
        cJSON_Delete(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_keeps_bits),
        cmocka_unit_test(test_named_kv_in_16_bits),
        cmocka_unit_test(test_float_where_not),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
