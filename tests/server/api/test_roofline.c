/* test_roofline.c - server/api/roofline.c: an item's flops and bytes
 * against hand-computed values (full, causal, bottom-right causal, window
 * causal and symmetric, decode over a window, GQA with Dv != D, padding,
 * key positions out of order, packed sequences, returned weights), the
 * fraction of peak and its bound, and the fields left out without a probe.
 * Each figure is small enough to count on paper; a formula that counts a
 * masked logit, forgets Dv or reads k and v once per query head fails.
 */
#include "api/roofline.h"

#include "api_harness.h"
#include "store/kv_cache.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* One item (q, k, v from a fixture, scheme none, then the extra members as
 * JSON text ("" for none)) through the endpoint with lim: its timing. */
static cJSON *timing_of(const srv_limits *lim, int Lq, int Lk, int H, int Hkv, int Dd, int Dv,
                        const char *extra)
{
    qkv f;
    cJSON *item, *ans, *timing;
    int status;
    qkv_make(&f, Lq, Lk, H, Hkv, Dd, Dv, 7);
    item = qkv_item(&f, scheme_of("{\"type\":\"none\"}"));
    if (extra[0] != '\0') {
        char buf[512];
        cJSON *more, *m;
        snprintf(buf, sizeof buf, "{%s}", extra);
        more = json_of(buf);
        while ((m = more->child) != NULL) {
            cJSON_DetachItemViaPointer(more, m);
            cJSON_AddItemToObject(item, m->string, m);
        }
        cJSON_Delete(more);
    }
    ans = call_json(&srv_ep_attention, batch(&item, 1), lim, &status);
    assert_int_equal(status, 200);
    timing = cJSON_DetachItemFromObjectCaseSensitive(
        (cJSON *)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "outputs"), 0),
        "timing");
    assert_non_null(timing);
    cJSON_Delete(ans);
    qkv_free(&f);
    return timing;
}

/* The item's flops and bytes are want_flops and want_bytes. */
static void work_is(int Lq, int Lk, int H, int Hkv, int Dd, int Dv, const char *extra,
                    double want_flops, double want_bytes)
{
    srv_limits lim = limits();
    cJSON *t = timing_of(&lim, Lq, Lk, H, Hkv, Dd, Dv, extra);
    if (num(t, "flops") != want_flops || num(t, "bytes") != want_bytes)
        fail_msg("%s: flops %.0f bytes %.0f, want %.0f and %.0f", extra, num(t, "flops"),
                 num(t, "bytes"), want_flops, want_bytes);
    cJSON_Delete(t);
}

/* flops = 2 (D + Dv) H visible; bytes = 4 (Lq H D + keys Hkv (D + Dv) + Lq H Dv). */
static double flops_of(int H, int Dd, int Dv, double visible)
{
    return 2.0 * (Dd + Dv) * H * visible;
}

static double bytes_of(int Lq, int H, int Hkv, int Dd, int Dv, double keys)
{
    return 4.0 * ((double)Lq * H * Dd + keys * Hkv * (Dd + Dv) + (double)Lq * H * Dv);
}

static void test_full(void **state)
{
    (void)state;
    /* Every one of the 4 x 6 logits: 2 (8 + 8) 2 24 = 1536. */
    work_is(4, 6, 2, 2, 8, 8, "", 1536, 4.0 * (64 + 192 + 64));
    assert_true(flops_of(2, 8, 8, 24) == 1536);
}

static void test_causal_gqa_dv(void **state)
{
    (void)state;
    /* 5 x 5 causal: 1 + 2 + 3 + 4 + 5 = 15 logits a head, not 25; Dv 4 is
     * not D 8; one kv head of two query heads is read once:
     * flops 2 (8 + 4) 2 15 = 720, bytes 4 (5*2*8 + 5*1*12 + 5*2*4) = 720. */
    work_is(5, 5, 2, 1, 8, 4, "\"causal\":true", 720, 720);
}

static void test_causal_bottom_right(void **state)
{
    (void)state;
    /* q at positions 4, 5 of 6 keys: 5 + 6 = 11 logits; every key seen. */
    work_is(2, 6, 2, 2, 8, 8, "\"causal\":true", flops_of(2, 8, 8, 11),
            bytes_of(2, 2, 2, 8, 8, 6));
}

static void test_window(void **state)
{
    (void)state;
    /* Causal with window 3 over 8: rows see 1, 2, 3, 3, 3, 3, 3, 3 = 21. */
    work_is(8, 8, 2, 2, 8, 8, "\"causal\":true,\"window\":3", flops_of(2, 8, 8, 21),
            bytes_of(8, 2, 2, 8, 8, 8));
    /* Symmetric band |qpos - kpos| < 2 over 5: 2, 3, 3, 3, 2 = 13. */
    work_is(5, 5, 2, 2, 8, 8, "\"window\":2", flops_of(2, 8, 8, 13), bytes_of(5, 2, 2, 8, 8, 5));
}

static void test_decode_window(void **state)
{
    (void)state;
    /* One query at position 39 over 40 keys, window 8: 8 logits a head and
     * only those 8 keys read (the kernel skips the rest), of 2 kv heads:
     * flops 2 16 4 8 = 1024, bytes 4 (1*4*8 + 8*2*16 + 1*4*8) = 1280. */
    work_is(1, 40, 4, 2, 8, 8, "\"causal\":true,\"window\":8", 1024, 1280);
    /* Without the window every key: 40 a head. */
    work_is(1, 40, 4, 2, 8, 8, "\"causal\":true", flops_of(4, 8, 8, 40),
            bytes_of(1, 4, 2, 8, 8, 40));
}

static void test_key_length(void **state)
{
    (void)state;
    /* Keys 4 and 5 are padding: 2 rows x 4 keys. */
    work_is(2, 6, 2, 2, 8, 8, "\"key_length\":4", flops_of(2, 8, 8, 8), bytes_of(2, 2, 2, 8, 8, 4));
}

static void test_positions_out_of_order(void **state)
{
    (void)state;
    /* Keys at 3, 0, 2, 1; queries at 1 and 2, causal: 2 + 3 = 5 logits,
     * and the keys at 0, 1, 2 read. */
    work_is(2, 4, 2, 2, 8, 8, "\"causal\":true,\"q_positions\":[1,2],\"k_positions\":[3,0,2,1]",
            flops_of(2, 8, 8, 5), bytes_of(2, 2, 2, 8, 8, 3));
}

static void test_packed(void **state)
{
    (void)state;
    /* Sequences of 2 and 3 tokens, causal within each: 3 + 6 = 9, never the
     * 25 of the whole square. */
    work_is(5, 5, 2, 2, 8, 8, "\"causal\":true,\"cu_seqlens\":[0,2,5]", flops_of(2, 8, 8, 9),
            bytes_of(5, 2, 2, 8, 8, 5));
}

static void test_returned_weights(void **state)
{
    (void)state;
    /* weights [H, Lq, Lk] written too: 2 * 4 * 6 floats more. */
    work_is(4, 6, 2, 2, 8, 8, "\"return\":[\"output\",\"weights\"]", flops_of(2, 8, 8, 24),
            bytes_of(4, 2, 2, 8, 8, 6) + 4.0 * 2 * 4 * 6);
}

/* A step over a session stored in bf16 reads its keys and values at 2
 * bytes an element (q and the results stay float32). */
static void test_session_bf16(void **state)
{
    (void)state;
    srv_kv_cache *c = srv_kv_cache_new(
        &(srv_kv_config){.budget_bytes = (size_t)8 << 20, .block_tokens = 16, .ttl_s = 0});
    srv_limits lim = limits();
    qkv f;
    cJSON *ans, *item, *t;
    int status;
    char body[160];
    srv_kv_err ke;
    const char *id;

    lim.sessions = c;
    qkv_make(&f, 1, 5, 4, 2, 8, 8, 3);
    snprintf(body, sizeof body,
             "{\"scheme\":{\"type\":\"none\"},\"num_kv_heads\":2,\"head_dim\":8,"
             "\"max_tokens\":16,\"dtype\":\"%s\"}",
             "bf16");
    ans = call(&srv_ep_sessions_create, body, &lim, &status);
    assert_int_equal(status, 201);
    id = cJSON_GetObjectItemCaseSensitive(ans, "id")->valuestring;
    assert_true(srv_kv_append(c, id, f.k, f.v, 5, NULL, &ke));
    item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "session", id);
    cJSON_AddItemToObject(item, "q", jtensor(f.q, 3, 1, 4, 8));
    cJSON_Delete(ans);
    ans = call_json(&srv_ep_attention, batch(&item, 1), &lim, &status);
    assert_int_equal(status, 200);
    t = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "outputs"), 0), "timing");
    /* 5 keys of 2 kv heads of 8 + 8 at 2 bytes; q and output 1 x 4 x 8 at 4 */
    assert_true(num(t, "bytes") == 4.0 * (32 + 32) + 2.0 * 5 * 2 * 16);
    assert_true(num(t, "flops") == flops_of(4, 8, 8, 5));
    cJSON_Delete(ans);
    qkv_free(&f);
    srv_kv_cache_free(c);
}

static void test_fraction(void **state)
{
    srv_machine m;
    double f = -1;
    bool compute = false;
    (void)state;
    memset(&m, 0, sizeof m);
    m.probed = true;
    m.workers = m.threads = 2;
    m.gflops_1 = 4, m.gflops_n = 8, m.read_gbps_1 = 1, m.read_gbps_n = 4;
    /* 2 GFLOP and 0.5 GB in one second on one thread: 0.5 of compute, 0.5
     * of memory; 3 GFLOP: 0.75, compute. */
    assert_true(srv_roofline_fraction(&m, 3e9, 0.5e9, 1000000, 1, false, &f, &compute));
    assert_true(fabs(f - 0.75) < 1e-12 && compute);
    /* 0.9 GB: memory bound at 0.9. */
    assert_true(srv_roofline_fraction(&m, 2e9, 0.9e9, 1000000, 1, false, &f, &compute));
    assert_true(fabs(f - 0.9) < 1e-12 && !compute);
    /* The workers' peaks for an item in parts: 3 / 8 vs 0.9 / 4. */
    assert_true(srv_roofline_fraction(&m, 3e9, 0.9e9, 1000000, 2, false, &f, &compute));
    assert_true(fabs(f - 0.375) < 1e-12 && compute);
    /* Half the time, twice the fraction. */
    assert_true(srv_roofline_fraction(&m, 3e9, 0.5e9, 500000, 1, false, &f, &compute));
    assert_true(fabs(f - 1.5) < 1e-12);
    /* bf16 work: float32's peak until the machine has a bf16 one, then
     * that one (3 GFLOP in a second against 12: 0.25, compute). */
    assert_false(srv_roofline_bf16_peak(&m));
    assert_true(srv_roofline_fraction(&m, 3e9, 0.5e9, 1000000, 1, true, &f, &compute));
    assert_true(fabs(f - 0.75) < 1e-12 && compute);
    m.bf16_gflops_1 = 12, m.bf16_gflops_n = 24;
    assert_true(srv_roofline_bf16_peak(&m));
    assert_true(srv_roofline_fraction(&m, 3e9, 0.1e9, 1000000, 1, true, &f, &compute));
    assert_true(fabs(f - 0.25) < 1e-12 && compute);
    assert_true(srv_roofline_fraction(&m, 3e9, 0.1e9, 1000000, 2, true, &f, &compute));
    assert_true(fabs(f - 0.125) < 1e-12 && compute);
    /* ... and float32 work still float32's. */
    assert_true(srv_roofline_fraction(&m, 3e9, 0.1e9, 1000000, 1, false, &f, &compute));
    assert_true(fabs(f - 0.75) < 1e-12 && compute);
    /* Nothing to say: no time, no probe, no machine. */
    f = -1;
    assert_false(srv_roofline_fraction(&m, 3e9, 0.5e9, 0, 1, false, &f, &compute));
    assert_false(srv_roofline_fraction(NULL, 3e9, 0.5e9, 10, 1, false, &f, &compute));
    m.probed = false;
    assert_false(srv_roofline_fraction(&m, 3e9, 0.5e9, 10, 1, false, &f, &compute));
    assert_true(f == -1);
}

static void test_fields_with_and_without_probe(void **state)
{
    srv_limits lim = limits();
    srv_machine m;
    cJSON *t;
    (void)state;
    /* No machine: the work, no fraction. */
    t = timing_of(&lim, 64, 64, 2, 2, 16, 16, "\"causal\":true");
    assert_non_null(cJSON_GetObjectItemCaseSensitive(t, "flops"));
    assert_non_null(cJSON_GetObjectItemCaseSensitive(t, "bytes"));
    assert_null(cJSON_GetObjectItemCaseSensitive(t, "fraction_of_peak"));
    assert_null(cJSON_GetObjectItemCaseSensitive(t, "bound"));
    cJSON_Delete(t);
    /* --no-probe's machine: the same. */
    memset(&m, 0, sizeof m);
    m.workers = 1;
    lim.machine = &m;
    t = timing_of(&lim, 64, 64, 2, 2, 16, 16, "\"causal\":true");
    assert_null(cJSON_GetObjectItemCaseSensitive(t, "fraction_of_peak"));
    cJSON_Delete(t);
    /* A probed one (tiny peaks, so that any time gives a fraction): the
     * fraction, its bound and whose peak. A run under a microsecond has
     * no fraction, so the item is big enough to take longer. */
    m.probed = true;
    m.threads = 1;
    m.gflops_1 = m.gflops_n = 1e-3;
    m.read_gbps_1 = m.read_gbps_n = 1e-3;
    t = timing_of(&lim, 128, 128, 4, 2, 32, 32, "\"causal\":true");
    assert_true(num(t, "compute_us") > 0);
    assert_true(num(t, "fraction_of_peak") > 0);
    /* flops / bytes here is 2*64*4*8256 / 4(128*4*32*2 + 128*2*64) above 1
     * flop per byte, and both peaks are equal: compute bound. */
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "bound")),
                        "compute");
    assert_true(num(t, "peak_threads") == 1);
    /* flops / (compute_us x 1e3 x GFLOP/s) within its rounding. */
    assert_true(fabs(num(t, "fraction_of_peak") /
                         (num(t, "flops") / (num(t, "compute_us") * 1e3 * 1e-3)) -
                     1) < 1e-3);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "peak_dtype")),
                        "f32");
    cJSON_Delete(t);
    /* compute_dtype bf16 on a machine with a bf16 peak (twice float32's
     * here): that peak, and half the fraction the same time would be. */
    m.bf16_gflops_1 = m.bf16_gflops_n = 2e-3;
    t = timing_of(&lim, 128, 128, 4, 2, 32, 32, "\"causal\":true,\"compute_dtype\":\"bf16\"");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "peak_dtype")),
                        "bf16");
    assert_true(fabs(num(t, "fraction_of_peak") /
                         (num(t, "flops") / (num(t, "compute_us") * 1e3 * 2e-3)) -
                     1) < 1e-3);
    cJSON_Delete(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_causal_gqa_dv),
        cmocka_unit_test(test_causal_bottom_right),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_decode_window),
        cmocka_unit_test(test_key_length),
        cmocka_unit_test(test_positions_out_of_order),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_returned_weights),
        cmocka_unit_test(test_session_bf16),
        cmocka_unit_test(test_fraction),
        cmocka_unit_test(test_fields_with_and_without_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
