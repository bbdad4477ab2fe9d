/* test_api_packed.c - packed sequences (cu_seqlens, cu_seqlens_k) in POST
 * /v1/attention without HTTP (server/api/item_packed.c): a packed item
 * answers what the same sequences sent as separate items of the same
 * request answer, bit for bit in the JSON numbers (and in the b64 bytes,
 * in f16 on the wire, split over parts, and written from within the
 * packed buffer by the deferred b64 writer); its weights, logits, entropy
 * and distance come as a list, one tensor per sequence; the 400s name the
 * field and the values; the size limit names its flag; the analyses refuse
 * it.
 */
#include "api_harness.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 4, HKV = 2, D = 8 };

/* The bytes of one tensor node's values: float32 from JSON numbers (null
 * = -inf), or b64's bytes as they are (*w bytes a value: 2 for f16). */
static unsigned char *values(const cJSON *t, size_t *n, size_t *w)
{
    const cJSON *d, *data = cJSON_GetObjectItemCaseSensitive(t, "data");
    const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(t, "b64");
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "datatype"));
    size_t count = 1, i = 0, len = 0;
    float *out;
    if (t == NULL)
        fail_msg("missing tensor");
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(t, "shape"))
    {
        count *= (size_t)d->valuedouble;
    }
    out = tu_alloc(count ? count : 1, sizeof(float));
    *w = 4;
    if (data != NULL) {
        cJSON_ArrayForEach(d, data)
        {
            assert_true(i < count);
            out[i++] = cJSON_IsNull(d) ? -INFINITY : (float)d->valuedouble;
        }
        assert_int_equal(i, count);
    } else {
        *w = dt != NULL && strcmp(dt, "FP32") != 0 ? 2 : 4;
        assert_non_null(b64);
        assert_true(srv_b64_decode(b64->valuestring, strlen(b64->valuestring), (unsigned char *)out,
                                   count * 4, &len));
        assert_int_equal(len, count * *w);
    }
    *n = count;
    return (unsigned char *)out;
}

static void same_bits(const unsigned char *a, const unsigned char *b, size_t bytes,
                      const char *what)
{
    if (memcmp(a, b, bytes) != 0)
        fail_msg("%s differs from the separate items", what);
}

/* The case: S sequences of q [L_s, H, D] and k/v [Lk_s, HKV, D]. */
typedef struct packed_case {
    int S;
    const int32_t *cq, *ck; /* ck NULL: self-attention */
    const char *scheme;
    bool causal;
    const char *encoding, *dtype; /* NULL: json, f32 */
    int parts;
} packed_case;

static cJSON *ret_list(void)
{
    static const char *const names[] = {"output",   "weights", "logits", "entropy",
                                        "distance", "q_rot",   "k_rot"};
    return cJSON_CreateStringArray(names, 7);
}

static void check_case(const packed_case *pc, uint64_t seed)
{
    const int32_t *ck = pc->ck ? pc->ck : pc->cq;
    const int Lq = pc->cq[pc->S], Lk = ck[pc->S];
    qkv f;
    cJSON *items[8], *req;
    srv_limits lim = limits();
    int status;
    assert_true(pc->S + 1 <= 8);
    qkv_make(&f, Lq, Lk, H, HKV, D, D, seed);
    lim.parallel_parts = pc->parts;
    items[0] = qkv_item(&f, scheme_of(pc->scheme));
    cJSON_AddItemToObject(items[0], "cu_seqlens", jints(pc->cq, pc->S + 1));
    if (pc->ck != NULL)
        cJSON_AddItemToObject(items[0], "cu_seqlens_k", jints(pc->ck, pc->S + 1));
    for (int s = 0; s < pc->S; s++) {
        qkv g = f;
        g.Lq = pc->cq[s + 1] - pc->cq[s];
        g.Lk = ck[s + 1] - ck[s];
        g.q = f.q + (size_t)pc->cq[s] * H * D;
        g.k = f.k + (size_t)ck[s] * HKV * D;
        g.v = f.v + (size_t)ck[s] * HKV * D;
        items[s + 1] = qkv_item(&g, scheme_of(pc->scheme));
    }
    for (int i = 0; i <= pc->S; i++) {
        cJSON_AddBoolToObject(items[i], "causal", pc->causal);
        cJSON_AddItemToObject(items[i], "return", ret_list());
    }
    req = batch(items, pc->S + 1);
    if (pc->encoding)
        cJSON_AddStringToObject(req, "output_encoding", pc->encoding);
    if (pc->dtype)
        cJSON_AddStringToObject(req, "output_dtype", pc->dtype);
    cJSON *ans = call_json(&srv_ep_attention, req, &lim, &status);
    expect_ok(ans, status);
    const cJSON *p = output_at(ans, 0);
    {
        /* By row: output, q_rot, k_rot packed as the inputs. */
        static const char *const rows[] = {"output", "q_rot", "k_rot"};
        for (int r = 0; r < 3; r++) {
            size_t n, at = 0, w, w1;
            unsigned char *all = values(cJSON_GetObjectItemCaseSensitive(p, rows[r]), &n, &w);
            for (int s = 0; s < pc->S; s++) {
                size_t m;
                unsigned char *one = values(
                    cJSON_GetObjectItemCaseSensitive(output_at(ans, s + 1), rows[r]), &m, &w1);
                assert_true(at + m <= n);
                assert_int_equal(w, w1);
                same_bits(all + at * w, one, m * w, rows[r]);
                at += m;
                free(one);
            }
            assert_int_equal(at, n);
            free(all);
        }
    }
    {
        /* By sequence: a list of the separate items' tensors. */
        static const char *const lists[] = {"weights", "logits", "entropy", "distance"};
        for (int r = 0; r < 4; r++) {
            const cJSON *l = cJSON_GetObjectItemCaseSensitive(p, lists[r]);
            assert_true(cJSON_IsArray(l));
            assert_int_equal(cJSON_GetArraySize(l), pc->S);
            for (int s = 0; s < pc->S; s++) {
                const cJSON *sep =
                    cJSON_GetObjectItemCaseSensitive(output_at(ans, s + 1), lists[r]);
                const cJSON *got = cJSON_GetArrayItem(l, s);
                size_t n, m, wa, wb;
                unsigned char *a = values(got, &n, &wa), *b = values(sep, &m, &wb);
                char *sa = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(got, "shape"));
                char *sb = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(sep, "shape"));
                assert_string_equal(sa, sb);
                assert_int_equal(n, m);
                assert_int_equal(wa, wb);
                same_bits(a, b, n * wa, lists[r]);
                free(sa);
                free(sb);
                free(a);
                free(b);
            }
        }
    }
    cJSON_Delete(ans);
    qkv_free(&f);
}

static const int32_t cu4[] = {0, 3, 11, 12, 30};

static void test_packed_equals_items(void **state)
{
    (void)state;
    static const char *const schemes[] = {"{\"type\":\"rope\"}", "{\"type\":\"alibi\"}",
                                          "{\"type\":\"none\"}", "{\"type\":\"xpos\"}"};
    for (int sc = 0; sc < 4; sc++)
        for (int causal = 0; causal < 2; causal++) {
            packed_case pc = {4, cu4, NULL, schemes[sc], causal, NULL, NULL, 1};
            check_case(&pc, 8000 + (uint64_t)(sc * 2 + causal));
        }
}

/* Cross attention (cu_seqlens_k), decode (one query per sequence). */
static void test_cross_and_decode(void **state)
{
    (void)state;
    static const int32_t cq[] = {0, 5, 7, 20}, ck[] = {0, 2, 14, 30};
    static const int32_t dq[] = {0, 1, 2, 3}, dk[] = {0, 9, 10, 40};
    packed_case cross = {3, cq, ck, "{\"type\":\"rope\"}", true, NULL, NULL, 1};
    packed_case dec = {3, dq, dk, "{\"type\":\"rope\"}", true, NULL, NULL, 1};
    check_case(&cross, 8100);
    check_case(&dec, 8101);
}

/* b64 and f16 on the wire; a packed item big enough to be split over
 * three parts. */
static void test_wire_and_parts(void **state)
{
    (void)state;
    static const int32_t big[] = {0, 300, 600, 900}; /* 17M multiply-adds: split */
    packed_case b64 = {4, cu4, NULL, "{\"type\":\"rope\"}", true, "b64", NULL, 1};
    packed_case f16 = {4, cu4, NULL, "{\"type\":\"rope\"}", true, "b64", "f16", 1};
    packed_case f16j = {4, cu4, NULL, "{\"type\":\"alibi\"}", false, NULL, "f16", 1};
    packed_case parts = {3, big, NULL, "{\"type\":\"rope\"}", true, "b64", NULL, 3};
    /* A small sequence, then one whose b64 weights (4 x 80 x 80) the answer
     * writes straight from within the packed buffer (srv_defer). */
    static const int32_t late[] = {0, 1, 81};
    packed_case deferred = {2, late, NULL, "{\"type\":\"alibi\"}", true, "b64", NULL, 1};
    check_case(&b64, 8200);
    check_case(&f16, 8201);
    check_case(&f16j, 8202);
    check_case(&parts, 8203);
    check_case(&deferred, 8204);
}

/* Layer mode: x [14, d_model] packs 5 + 9 tokens; a learned table of 10
 * rows serves both (positions restart; the 14 rows unpacked would be
 * refused), w_o per sequence. Equal to the two items bit for bit. */
static void test_layer_mode(void **state)
{
    (void)state;
    enum { L = 14, DM = 8, HH = 2, HK = 1, DD = 4, DOUT = 6 };
    static const int32_t cu[] = {0, 5, 14};
    tu_rng r;
    int status;
    srv_limits lim = limits();
    cJSON *items[3];
    float *x, *wq, *wk, *wv, *wo, *table;
    tu_rng_seed(&r, 8600);
    x = rnd(&r, (size_t)L * DM, -1, 1);
    wq = rnd(&r, (size_t)DM * HH * DD, -0.5, 0.5);
    wk = rnd(&r, (size_t)DM * HK * DD, -0.5, 0.5);
    wv = rnd(&r, (size_t)DM * HK * DD, -0.5, 0.5);
    wo = rnd(&r, (size_t)HH * DD * DOUT, -0.5, 0.5);
    table = rnd(&r, (size_t)10 * DM, -1, 1);
    for (int i = 0; i < 3; i++) {
        const int r0 = i == 0 ? 0 : cu[i - 1], n = i == 0 ? L : cu[i] - cu[i - 1];
        cJSON *sch = scheme_of("{\"type\":\"learned\"}");
        cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 10, DM));
        items[i] = cJSON_CreateObject();
        cJSON_AddItemToObject(items[i], "scheme", sch);
        cJSON_AddItemToObject(items[i], "x", jtensor(x + (size_t)r0 * DM, 2, n, DM));
        cJSON_AddItemToObject(items[i], "w_q", jtensor(wq, 2, DM, HH * DD));
        cJSON_AddItemToObject(items[i], "w_k", jtensor(wk, 2, DM, HK * DD));
        cJSON_AddItemToObject(items[i], "w_v", jtensor(wv, 2, DM, HK * DD));
        cJSON_AddItemToObject(items[i], "w_o", jtensor(wo, 2, HH * DD, DOUT));
        cJSON_AddNumberToObject(items[i], "num_heads", HH);
        cJSON_AddNumberToObject(items[i], "num_kv_heads", HK);
        cJSON_AddTrueToObject(items[i], "causal");
        cJSON_AddItemToObject(items[i], "return",
                              cJSON_CreateStringArray((const char *[]){"output", "weights"}, 2));
    }
    cJSON_AddItemToObject(items[0], "cu_seqlens", jints(cu, 3));
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 3), &lim, &status);
    expect_ok(ans, status);
    {
        size_t n, w, at = 0;
        unsigned char *all =
            values(cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "output"), &n, &w);
        const cJSON *wl = cJSON_GetObjectItemCaseSensitive(output_at(ans, 0), "weights");
        assert_int_equal(n, (size_t)L * DOUT);
        for (int s = 0; s < 2; s++) {
            size_t m, w1, nw, mw;
            const cJSON *o = output_at(ans, s + 1);
            unsigned char *one = values(cJSON_GetObjectItemCaseSensitive(o, "output"), &m, &w1);
            unsigned char *pw = values(cJSON_GetArrayItem(wl, s), &nw, &w1);
            unsigned char *sw = values(cJSON_GetObjectItemCaseSensitive(o, "weights"), &mw, &w1);
            same_bits(all + at * w, one, m * w, "output");
            assert_int_equal(nw, mw);
            same_bits(pw, sw, nw * 4, "weights");
            at += m;
            free(one);
            free(pw);
            free(sw);
        }
        assert_int_equal(at, n);
        free(all);
    }
    cJSON_Delete(ans);
    free(x);
    free(wq);
    free(wk);
    free(wv);
    free(wo);
    free(table);
}

/* One item with cu_seqlens set as given, its error. */
static void expect_packed_error(const char *extra_json, int Lq, int Lk, const char *code,
                                const char *field, const char *says)
{
    qkv f;
    int status;
    srv_limits lim = limits();
    cJSON *items[1], *extra = json_of(extra_json), *m;
    qkv_make(&f, Lq, Lk, H, HKV, D, D, 8300);
    items[0] = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
    while ((m = extra->child) != NULL) {
        cJSON_DetachItemViaPointer(extra, m);
        cJSON_AddItemToObject(items[0], m->string, m);
    }
    cJSON_Delete(extra);
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    {
        char full[64];
        snprintf(full, sizeof full, "inputs[0].%s", field);
        expect_item_error(ans, 0, code, full);
    }
    const char *msg = str_at(output_at(ans, 0), "error", "message");
    if (strstr(msg, says) == NULL)
        fail_msg("message '%s' does not say '%s'", msg, says);
    assert_int_equal(status, 400);
    cJSON_Delete(ans);
    qkv_free(&f);
}

static void test_errors(void **state)
{
    (void)state;
    expect_packed_error("{\"cu_seqlens\":[0]}", 6, 6, "INVALID_ARGUMENT", "cu_seqlens",
                        "has 1 values");
    expect_packed_error("{\"cu_seqlens\":[1,6]}", 6, 6, "INVALID_ARGUMENT", "cu_seqlens",
                        "cu_seqlens[0]=1 must be 0");
    expect_packed_error("{\"cu_seqlens\":[0,4,5]}", 6, 6, "SHAPE_MISMATCH", "cu_seqlens",
                        "ends at 5, but the packed length L=6 (q.shape[0])");
    expect_packed_error("{\"cu_seqlens\":[0,4,4,6]}", 6, 6, "INVALID_ARGUMENT", "cu_seqlens[2]",
                        "cu_seqlens[2]=4 after cu_seqlens[1]=4");
    expect_packed_error("{\"cu_seqlens\":[0,4,6],\"cu_seqlens_k\":[0,8]}", 6, 8, "SHAPE_MISMATCH",
                        "cu_seqlens_k", "cu_seqlens_k has 2 values but cu_seqlens has 3");
    expect_packed_error("{\"cu_seqlens\":[0,4,6],\"cu_seqlens_k\":[0,3,7]}", 6, 8, "SHAPE_MISMATCH",
                        "cu_seqlens_k", "L=8 (k.shape[0] and v.shape[0])");
    expect_packed_error("{\"cu_seqlens_k\":[0,3,6]}", 6, 6, "INVALID_ARGUMENT", "cu_seqlens_k",
                        "send cu_seqlens too");
    expect_packed_error("{\"cu_seqlens\":[0,3,6],\"key_length\":4}", 6, 6, "INVALID_ARGUMENT",
                        "key_length", "no padding");
    expect_packed_error("{\"cu_seqlens\":\"0,6\"}", 6, 6, "INVALID_ARGUMENT", "cu_seqlens",
                        "cu_seqlens");
}

/* The weights of every sequence together past --max-tensor-elements: a 413
 * that names the flag. */
static void test_size_limit(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 10, 20};
    qkv f;
    int status;
    srv_limits lim = limits();
    cJSON *items[1];
    lim.max_tensor_elements = 700; /* q is 20*4*8 = 640; weights 4*(100+100) = 800 */
    qkv_make(&f, 20, 20, H, HKV, D, D, 8400);
    items[0] = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(items[0], "cu_seqlens", jints(cu, 3));
    cJSON_AddItemToObject(items[0], "return",
                          cJSON_CreateStringArray((const char *[]){"weights"}, 1));
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    expect_item_error(ans, 0, "PAYLOAD_TOO_LARGE", "inputs[0].weights");
    assert_non_null(strstr(str_at(output_at(ans, 0), "error", "message"), "--max-tensor-elements"));
    cJSON_Delete(ans);
    qkv_free(&f);
}

/* The analyses explain one sequence. */
static void test_analyze_refuses(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 3, 6};
    qkv f;
    int status;
    srv_limits lim = limits();
    qkv_make(&f, 6, 6, H, HKV, D, D, 8500);
    cJSON *req = qkv_item(&f, scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddStringToObject(req, "analysis", "permutation");
    cJSON_AddItemToObject(req, "cu_seqlens", jints(cu, 3));
    cJSON *ans = call_json(&srv_ep_analyze, req, &lim, &status);
    expect_error(ans, status, 400, "INVALID_ARGUMENT", "cu_seqlens");
    cJSON_Delete(ans);
    qkv_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_equals_items),
        cmocka_unit_test(test_cross_and_decode),
        cmocka_unit_test(test_wire_and_parts),
        cmocka_unit_test(test_layer_mode),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_size_limit),
        cmocka_unit_test(test_analyze_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
