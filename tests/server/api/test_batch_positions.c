/* test_batch_positions.c - per-sequence positions and lengths in batched
 * items of POST /v1/attention, without HTTP: positions and key lengths as
 * int32/int64 tensors, query_length (padded query rows), M-RoPE rows
 * [B, 3, L], and k_prerotated keys (a batch's k_rot sent back as k), each
 * bit for bit against the plain form; their errors name the element.
 * The fixture is tests/server/api/batch_fixture.c.
 */
#include "batch_fixture.h"
#include "api_harness.h"
#include "codec/base64.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* {"shape":[...], "dtype":"i32"|"i64", "b64":...} of little-endian
 * integers. */
static cJSON *jint_tensor(const int64_t *v, int rows, int n, bool i64)
{
    size_t count = (size_t)(rows > 0 ? rows : 1) * (size_t)n, width = i64 ? 8 : 4;
    unsigned char *bytes = tu_alloc(count * width, 1);
    char *text = tu_alloc(srv_b64_encoded_len(count * width) + 1, 1);
    cJSON *t = cJSON_CreateObject(), *sh = cJSON_AddArrayToObject(t, "shape");
    for (size_t i = 0; i < count; i++)
        for (size_t k = 0; k < width; k++)
            bytes[i * width + k] = (unsigned char)((uint64_t)v[i] >> (8 * k));
    if (rows > 0)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(rows));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(n));
    cJSON_AddStringToObject(t, "dtype", i64 ? "i64" : "i32");
    srv_b64_encode(bytes, count * width, text);
    cJSON_AddStringToObject(t, "b64", text);
    free(bytes);
    free(text);
    return t;
}

/* Positions and key lengths as int32 / int64 tensors in base64 give the
 * answer of the JSON arrays, bit for bit; their errors name the element. */
static void test_integer_tensors(void **state)
{
    (void)state;
    seqs s;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    int64_t kl[B], qp[B * L], kp[B * L];
    seqs_make(&s, 9601);
    for (int b = 0; b < B; b++) {
        kl[b] = s.key_length[b];
        for (int i = 0; i < L; i++) {
            qp[b * L + i] = s.qpos[b][i];
            kp[b * L + i] = s.kpos[b][i];
        }
    }
    cJSON *ans[2];
    for (int form = 0; form < 2; form++) {
        cJSON *item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
        cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
        cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
        cJSON_AddTrueToObject(item, "causal");
        cJSON_AddItemToObject(item, "return", ret_all());
        if (form == 0) {
            cJSON *qr = cJSON_CreateArray(), *kr = cJSON_CreateArray();
            for (int b = 0; b < B; b++) {
                cJSON_AddItemToArray(qr, jints(s.qpos[b], L));
                cJSON_AddItemToArray(kr, jints(s.kpos[b], L));
            }
            cJSON_AddItemToObject(item, "key_length", jints(s.key_length, B));
            cJSON_AddItemToObject(item, "q_positions", qr);
            cJSON_AddItemToObject(item, "k_positions", kr);
        } else {
            cJSON_AddItemToObject(item, "key_length", jint_tensor(kl, 0, B, true));
            cJSON_AddItemToObject(item, "q_positions", jint_tensor(qp, B, L, false));
            cJSON_AddItemToObject(item, "k_positions", jint_tensor(kp, B, L, true));
        }
        ans[form] = run(&item, 1, &status);
        expect_ok(ans[form], status);
        if (str_at(output_at(ans[form], 0), "error", "message") != NULL)
            fail_msg("form %d: %s", form, str_at(output_at(ans[form], 0), "error", "message"));
    }
    for (int r = 0; r < NRESULTS; r++) {
        size_t n0, n1;
        float *a = decode(output_at(ans[0], 0), RESULTS[r], &n0);
        float *b = decode(output_at(ans[1], 0), RESULTS[r], &n1);
        assert_int_equal(n0, n1);
        assert_memory_equal(a, b, n0 * sizeof(float));
        free(a);
        free(b);
    }
    cJSON_Delete(ans[0]);
    cJSON_Delete(ans[1]);
    seqs_free(&s);

    /* A 3-D q takes them too: one sequence's positions as i64. */
    qp[4] = (int64_t)1 << 40;
    batch_error("q_positions", jint_tensor(qp, B, L, true), "OUT_OF_RANGE",
                "inputs[0].q_positions[4]", "is outside the int32 range");
    {
        cJSON *t = jint_tensor(kl, 0, B, false);
        cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("f32"));
        batch_error("key_length", t, "UNSUPPORTED", "inputs[0].key_length.dtype",
                    "\"i32\" or \"i64\"");
        t = jint_tensor(kl, 0, B, false);
        cJSON_ReplaceItemInObjectCaseSensitive(t, "b64", cJSON_CreateString("AAAA"));
        batch_error("key_length", t, "INVALID_ARGUMENT", "inputs[0].key_length.b64",
                    "base64 of 12 bytes");
    }
}

/* A batched item over seqs s (rope, causal, per-sequence key_length), with
 * query_length ql (NULL: none) and the results asked for. */
static cJSON *ql_item(const seqs *s, const int32_t *ql, bool all)
{
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s->q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s->k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s->v, 4, v4));
    cJSON_AddItemToObject(item, "key_length", jints(s->key_length, B));
    if (ql != NULL)
        cJSON_AddItemToObject(item, "query_length", jints(ql, B));
    cJSON_AddTrueToObject(item, "causal");
    if (all)
        cJSON_AddItemToObject(item, "return", ret_all());
    return item;
}

/* query_length: the real rows are those of the padded batch, bit for bit;
 * the rows past it are a fully masked row's (output, weights, q_rot 0,
 * logits -inf); k_rot is untouched. */
static void test_query_length(void **state)
{
    (void)state;
    seqs s;
    int status;
    const int32_t ql[B] = {6, 3, 4};
    seqs_make(&s, 9701);
    cJSON *item = ql_item(&s, NULL, true);
    cJSON *full = run(&item, 1, &status);
    expect_ok(full, status);
    item = ql_item(&s, ql, true);
    cJSON *part = run(&item, 1, &status);
    expect_ok(part, status);
    /* rows: per sequence, the row count and row size of each result */
    const size_t rows[NRESULTS] = {L, H * L, H * L, L, L, H * L, H * L};
    const size_t row_len[NRESULTS] = {H * DV, L, L, H * D, HKV * D, 1, 1};
    for (int r = 0; r < NRESULTS; r++) {
        size_t n0, n1;
        float *a = decode(output_at(full, 0), RESULTS[r], &n0);
        float *b = decode(output_at(part, 0), RESULTS[r], &n1);
        assert_int_equal(n0, n1);
        for (int q = 0; q < B; q++) {
            for (size_t i = 0; i < rows[r]; i++) {
                size_t at = ((size_t)q * rows[r] + i) * row_len[r];
                /* weights, logits, entropy and distance rows are [H, Lq]: the
                 * query row is i % L */
                size_t qrow = (r == 1 || r == 2 || r == 5 || r == 6) ? i % L : i;
                if (r == 4 || qrow < (size_t)ql[q]) {
                    if (memcmp(a + at, b + at, row_len[r] * sizeof(float)) != 0)
                        fail_msg("%s: sequence %d row %zu differs", RESULTS[r], q, i);
                } else {
                    for (size_t j = 0; j < row_len[r]; j++)
                        if (r == 2 ? !(isinf(b[at + j]) && b[at + j] < 0) : b[at + j] != 0.0f)
                            fail_msg("%s: padding row %zu of sequence %d holds %g", RESULTS[r], i,
                                     q, (double)b[at + j]);
                }
            }
        }
        free(a);
        free(b);
    }
    cJSON_Delete(full);
    cJSON_Delete(part);

    batch_error("query_length", jints((const int32_t[]){6, 0, 2}, B), "OUT_OF_RANGE",
                "inputs[0].query_length[1]", "query_length[1]=0 is below 1");
    batch_error("query_length", cJSON_CreateNumber(7), "OUT_OF_RANGE", "inputs[0].query_length",
                "must be 1 up to q.shape[1]=6");
    {
        float m[H * L * L];
        for (int i = 0; i < H * L * L; i++)
            m[i] = 1;
        cJSON *it2 = ql_item(&s, ql, false);
        int st;
        cJSON_AddItemToObject(it2, "mask", jtensor(m, 3, H, L, L));
        cJSON *ans = run(&it2, 1, &st);
        expect_item_error(ans, 0, "UNSUPPORTED", "inputs[0].query_length");
        cJSON_Delete(ans);
    }
    seqs_free(&s);
}

/* query_length on an item split over head groups (output only): parts
 * write their heads' real rows, part 0 zeroes the rest. */
static void test_query_length_split(void **state)
{
    (void)state;
    enum { BB = 2, LL = 256, HH = 4, DD = 64 };
    tu_rng r;
    int status;
    const int q4[] = {BB, LL, HH, DD};
    const size_t per = (size_t)LL * HH * DD;
    const int32_t ql[BB] = {256, 100};
    tu_rng_seed(&r, 9801);
    float *q = rnd(&r, BB * per, -1, 1), *k = rnd(&r, BB * per, -1, 1),
          *v = rnd(&r, BB * per, -1, 1);
    cJSON *ans[2];
    for (int with = 0; with < 2; with++) {
        cJSON *item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(q, 4, q4));
        cJSON_AddItemToObject(item, "k", jtensor_b64(k, 4, q4));
        cJSON_AddItemToObject(item, "v", jtensor_b64(v, 4, q4));
        cJSON_AddTrueToObject(item, "causal");
        if (with)
            cJSON_AddItemToObject(item, "query_length", jints(ql, BB));
        ans[with] = run_parts(&item, 1, 4, &status);
        expect_ok(ans[with], status);
    }
    size_t n0, n1;
    float *a = decode(output_at(ans[0], 0), "output", &n0);
    float *b = decode(output_at(ans[1], 0), "output", &n1);
    assert_int_equal(n0, n1);
    for (int s = 0; s < BB; s++) {
        size_t real = (size_t)ql[s] * HH * DD;
        assert_memory_equal(a + s * per, b + s * per, real * sizeof(float));
        for (size_t i = real; i < per; i++)
            if (b[s * per + i] != 0.0f)
                fail_msg("sequence %d: padding element %zu is %g", s, i, (double)b[s * per + i]);
    }
    free(a);
    free(b);
    cJSON_Delete(ans[0]);
    cJSON_Delete(ans[1]);
    free(q);
    free(k);
    free(v);
}

/* M-RoPE rows per sequence, [B, 3, L], equal separate items with [3, L]. */
static void test_mrope_rows_per_sequence(void **state)
{
    (void)state;
    seqs s;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    const char *sch = "{\"type\":\"rope\",\"mrope_section\":[2,1,1]}";
    int32_t rows[B][3][L];
    seqs_make(&s, 9901);
    for (int b = 0; b < B; b++)
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < L; i++)
                rows[b][r][i] = r == 0 ? i + b : (i * (r + 1) + 2 * b) % 5; /* t, h, w */
    cJSON *item = cJSON_CreateObject(), *qr = cJSON_CreateArray();
    cJSON_AddItemToObject(item, "scheme", scheme_of(sch));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
    cJSON_AddTrueToObject(item, "causal");
    for (int b = 0; b < B; b++) {
        cJSON *one = cJSON_CreateArray();
        for (int r = 0; r < 3; r++)
            cJSON_AddItemToArray(one, jints(rows[b][r], L));
        cJSON_AddItemToArray(qr, one);
    }
    cJSON_AddItemToObject(item, "q_positions", qr);
    cJSON_AddItemToObject(item, "k_positions", cJSON_Duplicate(qr, true));
    cJSON_AddItemToObject(item, "return", ret_all());
    cJSON *ans = run(&item, 1, &status);
    expect_ok(ans, status);
    cJSON *items[B];
    for (int b = 0; b < B; b++) {
        const int q3[] = {L, H, D}, k3[] = {L, HKV, D}, v3[] = {L, HKV, DV};
        cJSON *one = cJSON_CreateArray();
        for (int r = 0; r < 3; r++)
            cJSON_AddItemToArray(one, jints(rows[b][r], L));
        items[b] = cJSON_CreateObject();
        cJSON_AddItemToObject(items[b], "scheme", scheme_of(sch));
        cJSON_AddItemToObject(items[b], "q", jtensor_b64(s.q + (size_t)b * L * H * D, 3, q3));
        cJSON_AddItemToObject(items[b], "k", jtensor_b64(s.k + (size_t)b * L * HKV * D, 3, k3));
        cJSON_AddItemToObject(items[b], "v", jtensor_b64(s.v + (size_t)b * L * HKV * DV, 3, v3));
        cJSON_AddTrueToObject(items[b], "causal");
        cJSON_AddItemToObject(items[b], "q_positions", one);
        cJSON_AddItemToObject(items[b], "k_positions", cJSON_Duplicate(one, true));
        cJSON_AddItemToObject(items[b], "return", ret_all());
    }
    cJSON *sep = run(items, B, &status);
    expect_ok(sep, status);
    same_as_items(output_at(ans, 0), sep, B, "mrope [B, 3, L]");
    cJSON_Delete(ans);
    cJSON_Delete(sep);
    seqs_free(&s);
}

/* k_prerotated over HTTP's JSON: a batch's k_rot sent back as k with
 * k_prerotated gives the same output bit for bit (a KV cache of rotated
 * keys); without the flag the keys would be rotated twice. */
static void test_k_prerotated(void **state)
{
    (void)state;
    seqs s;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    const char *const names[] = {"output", "k_rot"};
    seqs_make(&s, 9951);
    cJSON *ans[3];
    float *krot = NULL;
    for (int pass = 0; pass < 3; pass++) {
        cJSON *item = cJSON_CreateObject(), *kp = cJSON_CreateArray();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
        cJSON_AddItemToObject(item, "k", jtensor_b64(pass == 0 ? s.k : krot, 4, k4));
        cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
        for (int b = 0; b < B; b++)
            cJSON_AddItemToArray(kp, jints(s.kpos[b], L));
        cJSON_AddItemToObject(item, "k_positions", kp);
        cJSON_AddTrueToObject(item, "causal");
        if (pass > 0)
            cJSON_AddBoolToObject(item, "k_prerotated", pass == 1);
        cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(names, 2));
        ans[pass] = run(&item, 1, &status);
        expect_ok(ans[pass], status);
        if (pass == 0) {
            size_t n;
            krot = decode(output_at(ans[0], 0), "k_rot", &n);
            assert_int_equal(n, (size_t)B * L * HKV * D);
        }
    }
    size_t n0, n1, n2;
    float *o0 = decode(output_at(ans[0], 0), "output", &n0);
    float *o1 = decode(output_at(ans[1], 0), "output", &n1);
    float *o2 = decode(output_at(ans[2], 0), "output", &n2);
    assert_int_equal(n0, n1);
    assert_memory_equal(o0, o1, n0 * sizeof(float));
    assert_true(memcmp(o0, o2, n0 * sizeof(float)) != 0); /* rotated twice */
    free(o0);
    free(o1);
    free(o2);
    free(krot);
    for (int pass = 0; pass < 3; pass++)
        cJSON_Delete(ans[pass]);
    seqs_free(&s);
    {
        cJSON *item = cJSON_CreateObject();
        int st;
        const int q3[] = {L, H, D}, k3[] = {L, HKV, D}, v3[] = {L, HKV, DV};
        seqs_make(&s, 9952);
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"alibi\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 3, q3));
        cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 3, k3));
        cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 3, v3));
        cJSON_AddTrueToObject(item, "k_prerotated");
        cJSON *bad = run(&item, 1, &st);
        expect_item_error(bad, 0, "INVALID_ARGUMENT", "inputs[0].k_prerotated");
        cJSON_Delete(bad);
        seqs_free(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integer_tensors),    cmocka_unit_test(test_query_length),
        cmocka_unit_test(test_query_length_split), cmocka_unit_test(test_mrope_rows_per_sequence),
        cmocka_unit_test(test_k_prerotated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
