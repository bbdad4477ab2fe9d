/* test_batch.c - batched items in POST /v1/attention without HTTP:
 * q [B, Lq, H, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] with per-sequence
 * key_length [B] and positions [B, L], layer mode's x [B, L, d_model],
 * Hugging Face's attention_mask [B, Lk], masks and biases broadcast over B
 * and H, and a batch split over head groups. Each batched answer is compared
 * bit for bit (b64, memcmp) with the same sequences sent as separate items,
 * for every scheme; the results' shapes carry the leading B; errors name the
 * sequence. The fixture is tests/server/api/batch_fixture.c.
 */
#include "batch_fixture.h"
#include "api_harness.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The scheme of case c (tables included), as a fresh object: every scheme
 * of q, k, v items (sinusoidal and learned add to x: layer mode). */
static cJSON *scheme_case(int c, const float *table)
{
    cJSON *sch;
    switch (c) {
    case 0:
        return scheme_of("{\"type\":\"none\"}");
    case 1:
        sch = scheme_of("{\"type\":\"shaw\",\"max_relative_position\":2}");
        cJSON_AddItemToObject(sch, "rel_k", jtensor(table, 2, 5, D));
        cJSON_AddItemToObject(sch, "rel_v", jtensor(table + 5 * D, 2, 5, DV));
        return sch;
    case 2:
        sch = scheme_of("{\"type\":\"t5\",\"num_buckets\":8,\"max_distance\":16}");
        cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 8, H));
        return sch;
    case 3:
        return scheme_of("{\"type\":\"rope\"}");
    case 4:
        return scheme_of("{\"type\":\"rope\",\"scaling\":\"yarn\",\"factor\":4,"
                         "\"original_max_position\":8}");
    case 5:
        return scheme_of("{\"type\":\"alibi\"}");
    default: /* Hugging Face BERT's relative_key_query, no position clipped */
        sch = scheme_of("{\"type\":\"shaw\",\"max_relative_position\":20,"
                        "\"direction\":\"query_minus_key\",\"key_term\":true}");
        cJSON_AddItemToObject(sch, "rel_k", jtensor(table, 2, 41, D));
        return sch;
    }
}
#define N_CASES 7

/* Scheme case c over the sequences of s, causal or not, as one batched
 * item and as B items: the same answers, bit for bit. */
static void check_batch(const seqs *s, int c, const float *table, int causal)
{
    int status;
    char what[64];
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    cJSON *item = cJSON_CreateObject(), *items[B];
    cJSON *qp = cJSON_CreateArray(), *kp = cJSON_CreateArray();
    snprintf(what, sizeof what, "case %d causal %d", c, causal);
    cJSON_AddItemToObject(item, "scheme", scheme_case(c, table));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s->q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s->k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s->v, 4, v4));
    cJSON_AddItemToObject(item, "key_length", jints(s->key_length, B));
    for (int b = 0; b < B; b++) {
        cJSON_AddItemToArray(qp, jints(s->qpos[b], L));
        cJSON_AddItemToArray(kp, jints(s->kpos[b], L));
    }
    cJSON_AddItemToObject(item, "q_positions", qp);
    cJSON_AddItemToObject(item, "k_positions", kp);
    cJSON_AddBoolToObject(item, "causal", causal);
    cJSON_AddItemToObject(item, "return", ret_all());
    cJSON *ans = run(&item, 1, &status);
    expect_ok(ans, status);
    const cJSON *bo = output_at(ans, 0);
    if (cJSON_GetObjectItemCaseSensitive(bo, "output") == NULL)
        fail_msg("%s: no output: %.300s", what, cJSON_PrintUnformatted(bo));
    assert_int_equal(dim(bo, "output", 3), DV);
    assert_int_equal(dim(bo, "weights", 1), H);

    for (int b = 0; b < B; b++) {
        const int q3[] = {L, H, D}, k3[] = {L, HKV, D}, v3[] = {L, HKV, DV};
        items[b] = cJSON_CreateObject();
        cJSON_AddItemToObject(items[b], "scheme", scheme_case(c, table));
        cJSON_AddItemToObject(items[b], "q", jtensor_b64(s->q + (size_t)b * L * H * D, 3, q3));
        cJSON_AddItemToObject(items[b], "k", jtensor_b64(s->k + (size_t)b * L * HKV * D, 3, k3));
        cJSON_AddItemToObject(items[b], "v", jtensor_b64(s->v + (size_t)b * L * HKV * DV, 3, v3));
        cJSON_AddNumberToObject(items[b], "key_length", s->key_length[b]);
        cJSON_AddItemToObject(items[b], "q_positions", jints(s->qpos[b], L));
        cJSON_AddItemToObject(items[b], "k_positions", jints(s->kpos[b], L));
        cJSON_AddBoolToObject(items[b], "causal", causal);
        cJSON_AddItemToObject(items[b], "return", ret_all());
    }
    cJSON *sep = run(items, B, &status);
    expect_ok(sep, status);
    same_as_items(bo, sep, B, what);

    /* The sequences do differ: sequence 1 is not sequence 0. */
    size_t n;
    float *o = decode(bo, "output", &n);
    assert_true(memcmp(o, o + n / B, n / B * sizeof(float)) != 0);
    free(o);
    cJSON_Delete(ans);
    cJSON_Delete(sep);
}

/* Every scheme, causal or not, GQA, Dv != D, per-sequence key_length and
 * positions: batched == separate items. */
static void test_batch_equals_items(void **state)
{
    (void)state;
    seqs s;
    tu_rng r;
    float *table;
    seqs_make(&s, 9001);
    tu_rng_seed(&r, 9002);
    table = rnd(&r, 24 * H * D, -0.5, 0.5);
    for (int c = 0; c < N_CASES; c++)
        for (int causal = 0; causal < 2; causal++)
            check_batch(&s, c, table, causal);
    free(table);
    seqs_free(&s);
}

/* Shaw's key term holds the table rows the positions reach, which differ
 * by sequence: a batch's workspace is the largest any sequence needs (here
 * the last, whose keys are five apart). */
static void test_batch_shaw_key_term_spans(void **state)
{
    (void)state;
    seqs s;
    tu_rng r;
    float *table;
    seqs_make(&s, 9011);
    tu_rng_seed(&r, 9012);
    table = rnd(&r, 24 * H * D, -0.5, 0.5);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            s.qpos[b][i] = i;
            s.kpos[b][i] = (2 * b + 1) * i;
        }
    check_batch(&s, N_CASES - 1, table, 0);
    free(table);
    seqs_free(&s);
}

/* attention_mask [B, Lk] ANDed with a shared per-head mask, a bias
 * [B, 1, Lq, Lk] and one key_length for all: equal to separate items that
 * carry the combined mask [H, Lq, Lk] and their own bias [Lq, Lk]. */
static void test_padding_mask_and_broadcast(void **state)
{
    (void)state;
    seqs s;
    tu_rng r;
    uint8_t shared[H * L * L], am[B * L];
    float *bias;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    const int m3[] = {1, H, L, L}, am2[] = {B, L}, b4[] = {B, 1, L, L};
    seqs_make(&s, 9101);
    tu_rng_seed(&r, 9102);
    for (int i = 0; i < H * L * L; i++)
        shared[i] = tu_uniform(&r, 0, 1) < 0.8;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < L; j++)
            am[b * L + j] = !(j >= L - b) && !(b == 2 && j == 0); /* right padding, one hole */
    bias = rnd(&r, (size_t)B * L * L, -1, 1);

    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
    {
        float mf[H * L * L], af[B * L];
        for (int i = 0; i < H * L * L; i++)
            mf[i] = shared[i];
        for (int i = 0; i < B * L; i++)
            af[i] = am[i];
        cJSON *m = jtensor(mf, 4, m3[0], m3[1], m3[2], m3[3]);
        cJSON *a = jtensor(af, 2, am2[0], am2[1]);
        cJSON_AddStringToObject(m, "dtype", "bool");
        cJSON_AddStringToObject(a, "dtype", "bool");
        cJSON_AddItemToObject(item, "mask", m);
        cJSON_AddItemToObject(item, "attention_mask", a);
    }
    cJSON_AddItemToObject(item, "bias", jtensor_b64(bias, 4, b4));
    cJSON_AddNumberToObject(item, "key_length", 5);
    cJSON_AddTrueToObject(item, "causal");
    cJSON_AddItemToObject(item, "return", ret_all());
    cJSON *ans = run(&item, 1, &status);
    expect_ok(ans, status);

    cJSON *items[B];
    for (int b = 0; b < B; b++) {
        const int q3[] = {L, H, D}, k3[] = {L, HKV, D}, v3[] = {L, HKV, DV}, bb[] = {L, L};
        float mf[H * L * L];
        for (int i = 0; i < H * L * L; i++)
            mf[i] = shared[i] && am[b * L + i % L];
        items[b] = cJSON_CreateObject();
        cJSON_AddItemToObject(items[b], "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(items[b], "q", jtensor_b64(s.q + (size_t)b * L * H * D, 3, q3));
        cJSON_AddItemToObject(items[b], "k", jtensor_b64(s.k + (size_t)b * L * HKV * D, 3, k3));
        cJSON_AddItemToObject(items[b], "v", jtensor_b64(s.v + (size_t)b * L * HKV * DV, 3, v3));
        cJSON_AddItemToObject(items[b], "mask", jtensor(mf, 3, H, L, L));
        cJSON_AddItemToObject(items[b], "bias", jtensor_b64(bias + (size_t)b * L * L, 2, bb));
        cJSON_AddNumberToObject(items[b], "key_length", 5);
        cJSON_AddTrueToObject(items[b], "causal");
        cJSON_AddItemToObject(items[b], "return", ret_all());
    }
    cJSON *sep = run(items, B, &status);
    expect_ok(sep, status);
    same_as_items(output_at(ans, 0), sep, B, "attention_mask");
    cJSON_Delete(ans);
    cJSON_Delete(sep);
    free(bias);
    seqs_free(&s);
}

static void test_batch_errors(void **state)
{
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 9301);
    const int32_t kl_bad[] = {6, 900, 2}, kl_neg[] = {6, -1, 2}, kl_two[] = {6, 4};
    batch_error("key_length", jints(kl_bad, 3), "OUT_OF_RANGE", "inputs[0].key_length[1]",
                "key_length[1]=900 exceeds k.shape[1]=6");
    batch_error("key_length", jints(kl_neg, 3), "OUT_OF_RANGE", "inputs[0].key_length[1]",
                "key_length[1]=-1 is negative");
    batch_error("key_length", jints(kl_two, 2), "SHAPE_MISMATCH", "inputs[0].key_length",
                "2 values but the batch has 3 sequences");
    {
        float *k = rnd(&r, (size_t)2 * L * HKV * D, -1, 1);
        const int k4[] = {2, L, HKV, D};
        batch_error("k", jtensor_b64(k, 4, k4), "SHAPE_MISMATCH", "inputs[0].k.shape",
                    "k.shape[0]=2 does not equal q.shape[0]=3 (batch)");
        free(k);
    }
    {
        float *k = rnd(&r, (size_t)L * HKV * D, -1, 1);
        const int k3[] = {L, HKV, D};
        batch_error("k", jtensor_b64(k, 3, k3), "SHAPE_MISMATCH", "inputs[0].k.shape",
                    "k.shape has 3 dimensions, expected 4");
        free(k);
    }
    {
        float m[2 * L] = {0};
        batch_error("attention_mask", jtensor(m, 2, 2, L), "SHAPE_MISMATCH",
                    "inputs[0].attention_mask.shape", "must be [B, Lk]=[3, 6]");
        float b[2 * L * L] = {0};
        batch_error("bias", jtensor(b, 4, 2, 1, L, L), "SHAPE_MISMATCH", "inputs[0].bias.shape",
                    "[B, H, Lq, Lk]=[3, 4, 6, 6]");
    }
    {
        cJSON *rows = cJSON_CreateArray();
        const int32_t p[L + 1] = {0, 1, 2, 3, 4, 5, 6};
        for (int b = 0; b < B; b++)
            cJSON_AddItemToArray(rows, jints(p, L + 1));
        batch_error("q_positions", rows, "SHAPE_MISMATCH", "inputs[0].q_positions",
                    "rows of 7 values but q.shape[1]=6");
    }
    {
        /* The analyses explain one sequence. */
        seqs s;
        int status;
        srv_limits lim = limits();
        const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
        cJSON *req = cJSON_CreateObject();
        seqs_make(&s, 9303);
        cJSON_AddStringToObject(req, "analysis", "permutation");
        cJSON_AddItemToObject(req, "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(req, "q", jtensor_b64(s.q, 4, q4));
        cJSON_AddItemToObject(req, "k", jtensor_b64(s.k, 4, k4));
        cJSON_AddItemToObject(req, "v", jtensor_b64(s.v, 4, v4));
        cJSON *ans = call_json(&srv_ep_analyze, req, &lim, &status);
        expect_error(ans, status, 400, "SHAPE_MISMATCH", "q.shape");
        cJSON_Delete(ans);
        seqs_free(&s);
    }
}

/* A batch big enough to be split over head groups too: sequence b, part p
 * is task b * parts + p, and the answer is still the separate items'. */
static void test_batch_split_over_parts(void **state)
{
    (void)state;
    enum { BB = 2, LL = 256, HH = 4, DD = 64 }; /* 2 * 256^2 * 64 * 4 MACs per sequence */
    tu_rng r;
    int status;
    const int q4[] = {BB, LL, HH, DD}, q3[] = {LL, HH, DD};
    const size_t per = (size_t)LL * HH * DD;
    tu_rng_seed(&r, 9401);
    float *q = rnd(&r, BB * per, -1, 1), *k = rnd(&r, BB * per, -1, 1),
          *v = rnd(&r, BB * per, -1, 1);
    cJSON *item = cJSON_CreateObject(), *items[BB];
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(k, 4, q4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(v, 4, q4));
    cJSON_AddTrueToObject(item, "causal");
    cJSON *ans = run_parts(&item, 1, 4, &status);
    expect_ok(ans, status);
    for (int b = 0; b < BB; b++) {
        items[b] = cJSON_CreateObject();
        cJSON_AddItemToObject(items[b], "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(items[b], "q", jtensor_b64(q + b * per, 3, q3));
        cJSON_AddItemToObject(items[b], "k", jtensor_b64(k + b * per, 3, q3));
        cJSON_AddItemToObject(items[b], "v", jtensor_b64(v + b * per, 3, q3));
        cJSON_AddTrueToObject(items[b], "causal");
    }
    cJSON *sep = run(items, BB, &status);
    expect_ok(sep, status);
    size_t nb, ns;
    float *fb = decode(output_at(ans, 0), "output", &nb);
    assert_int_equal(nb, BB * per);
    for (int b = 0; b < BB; b++) {
        float *fs = decode(output_at(sep, b), "output", &ns);
        assert_int_equal(ns, per);
        if (memcmp(fb + b * per, fs, per * sizeof(float)) != 0)
            fail_msg("sequence %d differs when split over parts", b);
        free(fs);
    }
    free(fb);
    cJSON_Delete(ans);
    cJSON_Delete(sep);
    free(q);
    free(k);
    free(v);
}

/* Layer mode: x [B, L, d_model] with shared weights, for the absolute
 * schemes (which add to x) and rope, with w_o, per-sequence positions and
 * attention_mask: batched == separate items; and a position past the
 * learned table in one sequence is an error that names it. */
static void test_layer_batch(void **state)
{
    (void)state;
    enum { DM = 16, DOUT = 5 };
    tu_rng r;
    int status;
    tu_rng_seed(&r, 9501);
    float *x = rnd(&r, (size_t)B * L * DM, -1, 1), *wq = rnd(&r, DM * H * D, -0.3, 0.3),
          *wk = rnd(&r, DM * HKV * D, -0.3, 0.3), *wv = rnd(&r, DM * HKV * DV, -0.3, 0.3),
          *wo = rnd(&r, H * DV * DOUT, -0.3, 0.3), *table = rnd(&r, 16 * DM, -0.5, 0.5);
    float am[B * L];
    int32_t pos[B][L];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            pos[b][i] = 2 * b + i; /* up to 4 + 5 = 9 < 16 rows */
            am[b * L + i] = i < L - b;
        }
    const char *schemes[] = {"{\"type\":\"sinusoidal\"}", "{\"type\":\"learned\"}",
                             "{\"type\":\"rope\"}"};
    for (int c = 0; c < 3; c++) {
        const int x3[] = {B, L, DM}, x2[] = {L, DM};
        cJSON *items[B], *rows = cJSON_CreateArray();
        cJSON *item = cJSON_CreateObject();
        cJSON *sch = scheme_of(schemes[c]);
        if (c == 1)
            cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 16, DM));
        cJSON_AddItemToObject(item, "scheme", sch);
        cJSON_AddItemToObject(item, "x", jtensor_b64(x, 3, x3));
        cJSON_AddItemToObject(item, "w_q", jtensor(wq, 2, DM, H * D));
        cJSON_AddItemToObject(item, "w_k", jtensor(wk, 2, DM, HKV * D));
        cJSON_AddItemToObject(item, "w_v", jtensor(wv, 2, DM, HKV * DV));
        cJSON_AddItemToObject(item, "w_o", jtensor(wo, 2, H * DV, DOUT));
        cJSON_AddNumberToObject(item, "num_heads", H);
        cJSON_AddNumberToObject(item, "num_kv_heads", HKV);
        cJSON_AddTrueToObject(item, "causal");
        for (int b = 0; b < B; b++)
            cJSON_AddItemToArray(rows, jints(pos[b], L));
        cJSON_AddItemToObject(item, "q_positions", rows);
        cJSON_AddItemToObject(item, "attention_mask", jtensor(am, 2, B, L));
        cJSON_AddItemToObject(item, "return", ret_all());
        cJSON *ans = run(&item, 1, &status);
        expect_ok(ans, status);
        assert_int_equal(dim(output_at(ans, 0), "output", 2), DOUT);
        for (int b = 0; b < B; b++) {
            float mf[L * L];
            for (int i = 0; i < L * L; i++)
                mf[i] = am[b * L + i % L];
            items[b] = cJSON_CreateObject();
            sch = scheme_of(schemes[c]);
            if (c == 1)
                cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 16, DM));
            cJSON_AddItemToObject(items[b], "scheme", sch);
            cJSON_AddItemToObject(items[b], "x", jtensor_b64(x + (size_t)b * L * DM, 2, x2));
            cJSON_AddItemToObject(items[b], "w_q", jtensor(wq, 2, DM, H * D));
            cJSON_AddItemToObject(items[b], "w_k", jtensor(wk, 2, DM, HKV * D));
            cJSON_AddItemToObject(items[b], "w_v", jtensor(wv, 2, DM, HKV * DV));
            cJSON_AddItemToObject(items[b], "w_o", jtensor(wo, 2, H * DV, DOUT));
            cJSON_AddNumberToObject(items[b], "num_heads", H);
            cJSON_AddNumberToObject(items[b], "num_kv_heads", HKV);
            cJSON_AddTrueToObject(items[b], "causal");
            cJSON_AddItemToObject(items[b], "q_positions", jints(pos[b], L));
            cJSON_AddItemToObject(items[b], "mask", jtensor(mf, 2, L, L));
            cJSON_AddItemToObject(items[b], "return", ret_all());
        }
        cJSON *sep = run(items, B, &status);
        expect_ok(sep, status);
        same_as_items(output_at(ans, 0), sep, B, schemes[c]);
        cJSON_Delete(ans);
        cJSON_Delete(sep);
    }
    {
        const int x3[] = {B, L, DM};
        cJSON *item = cJSON_CreateObject(), *rows = cJSON_CreateArray();
        cJSON *sch = scheme_of("{\"type\":\"learned\"}");
        cJSON_AddItemToObject(sch, "table", jtensor(table, 2, 8, DM)); /* 8 rows */
        cJSON_AddItemToObject(item, "scheme", sch);
        cJSON_AddItemToObject(item, "x", jtensor_b64(x, 3, x3));
        cJSON_AddItemToObject(item, "w_q", jtensor(wq, 2, DM, H * D));
        cJSON_AddItemToObject(item, "w_k", jtensor(wk, 2, DM, HKV * D));
        cJSON_AddItemToObject(item, "w_v", jtensor(wv, 2, DM, HKV * DV));
        cJSON_AddNumberToObject(item, "num_heads", H);
        cJSON_AddNumberToObject(item, "num_kv_heads", HKV);
        for (int b = 0; b < B; b++)
            cJSON_AddItemToArray(rows, jints(pos[b], L)); /* sequence 2 reaches 9 */
        cJSON_AddItemToObject(item, "q_positions", rows);
        cJSON *ans = run(&item, 1, &status);
        expect_item_error(ans, 0, "OUT_OF_RANGE", NULL);
        const char *msg = str_at(output_at(ans, 0), "error", "message");
        if (msg == NULL || strstr(msg, "sequence 2 of the batch") == NULL)
            fail_msg("message \"%s\" does not name sequence 2", msg ? msg : "(none)");
        cJSON_Delete(ans);
    }
    free(x);
    free(wq);
    free(wk);
    free(wv);
    free(wo);
    free(table);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_equals_items),
        cmocka_unit_test(test_batch_shaw_key_term_spans),
        cmocka_unit_test(test_padding_mask_and_broadcast),
        cmocka_unit_test(test_batch_split_over_parts),
        cmocka_unit_test(test_layer_batch),
        cmocka_unit_test(test_batch_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
