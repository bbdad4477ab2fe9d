/* test_api_batch.c - batched items in POST /v1/attention without HTTP:
 * q [B, Lq, H, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] with per-sequence
 * key_length [B] and positions [B, L], layer mode's x [B, L, d_model],
 * Hugging Face's attention_mask
 * [B, Lk], masks and biases broadcast over B and H. Each batched answer is
 * compared bit for bit (b64, memcmp) with the same sequences sent as
 * separate items, for every scheme; the results' shapes carry the leading
 * B; errors name the sequence. Requests go through tests/api_harness.c.
 */
#include "api_harness.h"
#include "codec/base64.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, L = 6, H = 4, HKV = 2, D = 8, DV = 6 };

static const char *const RESULTS[] = {"output", "weights", "logits",  "q_rot",
                                      "k_rot",  "entropy", "distance"};
enum { NRESULTS = 7 };

/* Result obj.name (b64 float32) into a fresh buffer; *n its floats. */
static float *decode(const cJSON *obj, const char *name, size_t *n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, name);
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "b64"));
    size_t len, cap, got = 0;
    float *f;
    if (s == NULL)
        fail_msg("%s has no b64", name);
    len = strlen(s);
    cap = len / 4 * 3 + 4;
    f = tu_alloc(cap / 4 + 1, sizeof(float));
    assert_true(srv_b64_decode(s, len, (unsigned char *)f, cap, &got));
    *n = got / sizeof(float);
    return f;
}

static int64_t dim(const cJSON *obj, const char *name, int d)
{
    const cJSON *sh =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, name), "shape");
    return (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
}

/* The B sequences' inputs, one buffer each way. */
typedef struct seqs {
    float *q, *k, *v; /* [B, L, H, D], [B, L, HKV, D], [B, L, HKV, DV] */
    int32_t qpos[B][L], kpos[B][L];
    int32_t key_length[B];
} seqs;

static void seqs_make(seqs *s, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    s->q = rnd(&r, (size_t)B * L * H * D, -1, 1);
    s->k = rnd(&r, (size_t)B * L * HKV * D, -1, 1);
    s->v = rnd(&r, (size_t)B * L * HKV * DV, -1, 1);
    for (int b = 0; b < B; b++) {
        s->key_length[b] = L - 2 * b; /* 6, 4, 2 */
        for (int i = 0; i < L; i++) {
            s->qpos[b][i] = 3 * b + i;     /* each sequence its own offset */
            s->kpos[b][i] = 3 * b + i + b; /* and k apart from q */
        }
    }
}

static void seqs_free(seqs *s)
{
    free(s->q);
    free(s->k);
    free(s->v);
}

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
    default:
        return scheme_of("{\"type\":\"alibi\"}");
    }
}
#define N_CASES 6

static cJSON *ret_all(void)
{
    return cJSON_CreateStringArray(RESULTS, NRESULTS);
}

/* {"inputs":[items], "output_encoding":"b64"} through the endpoint, with
 * parts per item (1: the sequences are the only split). */
static cJSON *run_parts(cJSON **items, int n, int parts, int *status)
{
    srv_limits lim = limits();
    cJSON *req = batch(items, n);
    lim.parallel_parts = parts;
    cJSON_AddStringToObject(req, "output_encoding", "b64");
    return call_json(&srv_ep_attention, req, &lim, status);
}

static cJSON *run(cJSON **items, int n, int *status)
{
    return run_parts(items, n, 1, status);
}

/* Sequence b of the batched answer equals item b of the separate one, bit
 * for bit, for every result; and the batched shapes lead with B. */
static void same_as_items(const cJSON *batched, const cJSON *sep, int n_seq, const char *what)
{
    for (int r = 0; r < NRESULTS; r++) {
        size_t nb, ns;
        float *fb = decode(batched, RESULTS[r], &nb);
        assert_int_equal(dim(batched, RESULTS[r], 0), n_seq);
        assert_int_equal(nb % (size_t)n_seq, 0);
        for (int b = 0; b < n_seq; b++) {
            const cJSON *o = output_at(sep, b);
            float *fs = decode(o, RESULTS[r], &ns);
            assert_int_equal(ns * (size_t)n_seq, nb);
            const cJSON *sh = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(o, RESULTS[r]), "shape");
            const cJSON *bsh = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(batched, RESULTS[r]), "shape");
            assert_int_equal(cJSON_GetArraySize(bsh), cJSON_GetArraySize(sh) + 1);
            for (int d = 0; d < cJSON_GetArraySize(sh); d++)
                assert_int_equal(dim(batched, RESULTS[r], d + 1), dim(o, RESULTS[r], d));
            if (memcmp(fb + (size_t)b * ns, fs, ns * sizeof(float)) != 0)
                fail_msg("%s: %s of sequence %d differs from the separate item", what, RESULTS[r],
                         b);
            free(fs);
        }
        free(fb);
    }
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
    for (int c = 0; c < N_CASES; c++) {
        for (int causal = 0; causal < 2; causal++) {
            int status;
            char what[64];
            const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
            cJSON *item = cJSON_CreateObject(), *items[B];
            cJSON *qp = cJSON_CreateArray(), *kp = cJSON_CreateArray();
            snprintf(what, sizeof what, "case %d causal %d", c, causal);
            cJSON_AddItemToObject(item, "scheme", scheme_case(c, table));
            cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
            cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
            cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
            cJSON_AddItemToObject(item, "key_length", jints(s.key_length, B));
            for (int b = 0; b < B; b++) {
                cJSON_AddItemToArray(qp, jints(s.qpos[b], L));
                cJSON_AddItemToArray(kp, jints(s.kpos[b], L));
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
                cJSON_AddItemToObject(items[b], "q",
                                      jtensor_b64(s.q + (size_t)b * L * H * D, 3, q3));
                cJSON_AddItemToObject(items[b], "k",
                                      jtensor_b64(s.k + (size_t)b * L * HKV * D, 3, k3));
                cJSON_AddItemToObject(items[b], "v",
                                      jtensor_b64(s.v + (size_t)b * L * HKV * DV, 3, v3));
                cJSON_AddNumberToObject(items[b], "key_length", s.key_length[b]);
                cJSON_AddItemToObject(items[b], "q_positions", jints(s.qpos[b], L));
                cJSON_AddItemToObject(items[b], "k_positions", jints(s.kpos[b], L));
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
    }
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

/* One batched item with a single change; the error expected. */
static void batch_error(const char *key, cJSON *value, const char *code, const char *field,
                        const char *message_part)
{
    seqs s;
    int status;
    const int q4[] = {B, L, H, D}, k4[] = {B, L, HKV, D}, v4[] = {B, L, HKV, DV};
    seqs_make(&s, 9201);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(s.q, 4, q4));
    cJSON_AddItemToObject(item, "k", jtensor_b64(s.k, 4, k4));
    cJSON_AddItemToObject(item, "v", jtensor_b64(s.v, 4, v4));
    if (cJSON_GetObjectItemCaseSensitive(item, key) != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(item, key, value);
    else
        cJSON_AddItemToObject(item, key, value);
    cJSON *ans = run(&item, 1, &status);
    expect_item_error(ans, 0, code, field);
    const char *msg = str_at(output_at(ans, 0), "error", "message");
    if (msg == NULL || strstr(msg, message_part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", msg ? msg : "(none)", message_part);
    cJSON_Delete(ans);
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
                "inputs[0].q_positions[4]", "does not fit in int32");
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
        cmocka_unit_test(test_batch_equals_items),
        cmocka_unit_test(test_padding_mask_and_broadcast),
        cmocka_unit_test(test_batch_split_over_parts),
        cmocka_unit_test(test_layer_batch),
        cmocka_unit_test(test_integer_tensors),
        cmocka_unit_test(test_query_length),
        cmocka_unit_test(test_query_length_split),
        cmocka_unit_test(test_mrope_rows_per_sequence),
        cmocka_unit_test(test_k_prerotated),
        cmocka_unit_test(test_batch_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
