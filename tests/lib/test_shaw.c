/* test_shaw.c - lib/shaw.c: the clipped relative index against ref_shaw_index
 * (including int32 extremes), both directions, and the scheme and table
 * checks; and the shaw scheme in attention: Hugging Face BERT's
 * relative_key / relative_key_query against a literal port of its forward
 * (tests/ref_bert.c), and direction and key_term with GQA, explicit
 * positions, masks and layer mode against tests/ref_attention.c. */
#include "attention_fixture.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "ref_attention.h"
#include "ref_bert.h"
#include "ref_encodings.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* The largest K whose 2K+1 rows fit int32. */
#define MAX_K ((INT32_MAX - 1) / 2)

static void test_index_matches_reference(void **state)
{
    (void)state;
    const int32_t ks[] = {0, 1, 2, 3, 16, 64, 1000, 1 << 20, MAX_K};
    const int32_t extremes[] = {INT32_MIN, INT32_MIN + 1, -MAX_K - 1,    -MAX_K,
                                MAX_K,     MAX_K + 1,     INT32_MAX - 1, INT32_MAX};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        int32_t k = ks[i];
        for (int32_t rel = -2100; rel <= 2100; rel++) {
            int32_t got = pa_shaw_index(rel, k);
            assert_int_equal(got, ref_shaw_index(rel, k));
            assert_true(got >= 0 && got <= 2 * k);
        }
        for (size_t e = 0; e < sizeof extremes / sizeof extremes[0]; e++)
            assert_int_equal(pa_shaw_index(extremes[e], k), ref_shaw_index(extremes[e], k));
    }
}

static void test_index_known(void **state)
{
    (void)state;
    const int32_t rel[] = {-9, -3, -2, -1, 0, 1, 2, 3, 9};
    const int32_t want[] = {0, 0, 0, 1, 2, 3, 4, 4, 4};
    for (size_t i = 0; i < 9; i++)
        assert_int_equal(pa_shaw_index(rel[i], 2), want[i]);
    assert_int_equal(pa_shaw_index(INT32_MIN, MAX_K), 0);
    assert_int_equal(pa_shaw_index(INT32_MAX, MAX_K), 2 * MAX_K);
    assert_int_equal(pa_shaw_index(0, MAX_K), MAX_K);
    assert_int_equal(pa_shaw_index(INT32_MIN, 0), 0);
    assert_int_equal(pa_shaw_index(INT32_MAX, 0), 0);
    /* K < 0 is rejected by the check; the index is defined as 0 anyway. */
    assert_int_equal(pa_shaw_index(5, -1), 0);
    assert_int_equal(pa_shaw_index(-5, INT32_MIN), 0);
}

static pa_shaw make_shaw(int32_t k, const float *rel_k, int32_t head_dim, const float *rel_v,
                         int32_t v_head_dim)
{
    pa_shaw s;
    memset(&s, 0, sizeof s);
    s.max_relative_position = k;
    s.rel_k = rel_k;
    s.rel_k_rows = 2 * k + 1;
    s.rel_k_cols = head_dim;
    s.rel_v = rel_v;
    s.rel_v_rows = rel_v != NULL ? 2 * k + 1 : 0;
    s.rel_v_cols = v_head_dim;
    return s;
}

static void expect_error(const pa_shaw *s, int32_t d, int32_t dv, pa_status want, const char *field,
                         const char *message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa__shaw_check(s, d, dv, &err), want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
    assert_int_equal(pa__shaw_check(s, d, dv, NULL), want);
}

static void test_check(void **state)
{
    (void)state;
    float tk[5 * 8] = {0}, tv[5 * 6] = {0};
    pa_error err;
    pa_shaw s = make_shaw(2, tk, 8, NULL, 0);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 8, &err), PA_STATUS_OK, &err);
    s = make_shaw(2, tk, 8, tv, 6);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 6, &err), PA_STATUS_OK, &err);
    /* v_head_dim 0 means head_dim, as in pa_attention. */
    s = make_shaw(2, tk, 8, tk, 8);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 0, &err), PA_STATUS_OK, &err);
    /* K = 0: one row. */
    s = make_shaw(0, tk, 8, NULL, 0);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 8, &err), PA_STATUS_OK, &err);
    /* The largest K: only the shapes are read, never the rows. */
    s = make_shaw(MAX_K, tk, 8, NULL, 0);
    assert_int_equal(s.rel_k_rows, INT32_MAX);
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 8, &err), PA_STATUS_OK, &err);

    expect_error(NULL, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme", "NULL");
    s = make_shaw(2, tk, 8, NULL, 0);
    s.max_relative_position = -1;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.max_relative_position",
                 "max_relative_position=-1");
    s.max_relative_position = MAX_K + 1;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.max_relative_position",
                 "max_relative_position=1073741824");
    s.max_relative_position = INT32_MAX;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.max_relative_position",
                 "must be in [0, 1073741823]");

    s = make_shaw(2, NULL, 8, NULL, 0);
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.rel_k", "NULL");
    s = make_shaw(2, tk, 8, NULL, 0);
    s.rel_k_rows = 4;
    expect_error(&s, 8, 8, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_k.shape[0]",
                 "shape[0]=4 does not equal 2*max_relative_position+1=5");
    s = make_shaw(2, tk, 8, NULL, 0);
    expect_error(&s, 16, 8, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_k.shape[1]",
                 "shape[1]=8 does not equal head_dim=16");

    s = make_shaw(2, tk, 8, tv, 6);
    s.rel_v_rows = 7;
    expect_error(&s, 8, 6, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[0]",
                 "shape[0]=7 does not equal 2*max_relative_position+1=5");
    s = make_shaw(2, tk, 8, tv, 6);
    expect_error(&s, 8, 8, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[1]",
                 "shape[1]=6 does not equal v_head_dim=8");
    expect_error(&s, 8, 0, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[1]",
                 "shape[1]=6 does not equal v_head_dim=8");

    /* The direction is one of the two; key_term is any bool. */
    s = make_shaw(2, tk, 8, NULL, 0);
    s.direction = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;
    s.key_term = true;
    TU_ASSERT_STATUS(pa__shaw_check(&s, 8, 8, &err), PA_STATUS_OK, &err);
    s.direction = (pa_shaw_direction)2;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.direction",
                 "scheme.direction=2 is not a direction");
    s.direction = (pa_shaw_direction)-1;
    expect_error(&s, 8, 8, PA_STATUS_INVALID_ARGUMENT, "scheme.direction", "direction=-1");
}

/* pa_shaw_pair_index: clip(kpos - qpos) + K, or clip(qpos - kpos) + K, for
 * any int32 positions; the names of the directions. */
static void test_pair_index(void **state)
{
    (void)state;
    const int32_t ks[] = {0, 1, 3, 1000, MAX_K};
    const int32_t pos[] = {INT32_MIN, INT32_MIN + 1, -MAX_K, -1001,         -7,       -1, 0, 1, 2,
                           7,         999,           MAX_K,  INT32_MAX - 1, INT32_MAX};
    const size_t np = sizeof pos / sizeof pos[0];
    pa_scheme sch;
    pa_shaw_direction d = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;

    pa_scheme_init(&sch, PA_SCHEME_SHAW); /* Shaw's by default */
    assert_int_equal(sch.shaw.direction, PA_SHAW_DIRECTION_KEY_MINUS_QUERY);
    assert_false(sch.shaw.key_term);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        pa_shaw s = sch.shaw;
        s.max_relative_position = ks[i];
        for (size_t a = 0; a < np; a++)
            for (size_t b = 0; b < np; b++) {
                const int64_t rel = (int64_t)pos[b] - pos[a];
                s.direction = PA_SHAW_DIRECTION_KEY_MINUS_QUERY;
                assert_int_equal(pa_shaw_pair_index(&s, pos[a], pos[b]),
                                 ref_shaw_index(rel, ks[i]));
                s.direction = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;
                assert_int_equal(pa_shaw_pair_index(&s, pos[a], pos[b]),
                                 ref_shaw_index(-rel, ks[i]));
            }
    }
    /* BERT: K = max_position_embeddings - 1 = 4, query 1 and key 3: distance
     * -2, row -2 + 4 = 2; Shaw's would be row 6. */
    sch.shaw.max_relative_position = 4;
    sch.shaw.direction = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;
    assert_int_equal(pa_shaw_pair_index(&sch.shaw, 1, 3), 2);
    sch.shaw.direction = PA_SHAW_DIRECTION_KEY_MINUS_QUERY;
    assert_int_equal(pa_shaw_pair_index(&sch.shaw, 1, 3), 6);

    assert_string_equal(pa_shaw_direction_name(PA_SHAW_DIRECTION_KEY_MINUS_QUERY),
                        "key_minus_query");
    assert_string_equal(pa_shaw_direction_name(PA_SHAW_DIRECTION_QUERY_MINUS_KEY),
                        "query_minus_key");
    assert_null(pa_shaw_direction_name((pa_shaw_direction)2));
    assert_null(pa_shaw_direction_name((pa_shaw_direction)-1));
    assert_true(pa_shaw_direction_from_name("key_minus_query", &d));
    assert_int_equal(d, PA_SHAW_DIRECTION_KEY_MINUS_QUERY);
    assert_true(pa_shaw_direction_from_name("query_minus_key", &d));
    assert_int_equal(d, PA_SHAW_DIRECTION_QUERY_MINUS_KEY);
    assert_false(pa_shaw_direction_from_name("Query_minus_key", &d));
    assert_false(pa_shaw_direction_from_name("", &d));
    assert_false(pa_shaw_direction_from_name(NULL, &d));
    assert_int_equal(d, PA_SHAW_DIRECTION_QUERY_MINUS_KEY); /* untouched */
}

/* ------------------------------------------------------------------------- */
/* Attention: Hugging Face BERT                                              */
/* ------------------------------------------------------------------------- */

/* A BERT attention call: q/k/v with H heads of D, and the scheme as BERT's
 * relative_key (key_query false) or relative_key_query is configured:
 * direction query_minus_key, K = max_position_embeddings - 1, rel_k =
 * distance_embedding.weight [2M - 1, D], the default scale 1/sqrt(D). pad
 * keys at the end are padding (HF's attention_mask 0, posattn's
 * key_length). Without a cache and Lq != Lk HF numbers the queries 0 ..
 * Lq-1: posattn is given them; with a cache (one query) HF's position
 * key_length - 1 is posattn's default. */
static void check_bert(int Lq, int Lk, int H, int D, int M, bool key_query, bool use_cache, int pad,
                       uint64_t seed)
{
    fixture f;
    tu_rng r;
    pa_error err;
    pa_attention_out out = {0};
    uint8_t *mask = tu_alloc((size_t)Lk, 1);
    double *want = tu_alloc((size_t)Lq * H * D, sizeof(double));
    double *wantp = tu_alloc((size_t)H * Lq * Lk, sizeof(double));
    size_t wsz;
    void *ws;

    setup_qkv(&f, PA_SCHEME_SHAW, Lq, Lk, H, H, D, 0, seed);
    tu_rng_seed(&r, seed + 1);
    f.rel_k = rand_tensor(&r, (size_t)(2 * M - 1) * D, -1, 1);
    f.scheme.shaw.max_relative_position = M - 1;
    f.scheme.shaw.rel_k = f.rel_k;
    f.scheme.shaw.rel_k_rows = 2 * M - 1;
    f.scheme.shaw.rel_k_cols = D;
    f.scheme.shaw.direction = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;
    f.scheme.shaw.key_term = key_query;
    for (int j = 0; j < Lk; j++)
        mask[j] = j < Lk - pad;
    if (pad > 0)
        f.a.key_length = Lk - pad;
    if (!use_cache && Lq != Lk) {
        f.qpos = tu_alloc((size_t)Lq, sizeof(int32_t));
        for (int i = 0; i < Lq; i++)
            f.qpos[i] = i;
        f.a.q_positions = f.qpos;
    }
    assert_true(!use_cache || Lq == 1);

    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    out.output = tu_alloc((size_t)Lq * H * D, sizeof(float));
    out.weights = tu_alloc((size_t)H * Lq * Lk, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &out, ws, wsz, &err), PA_STATUS_OK, &err);
    ref_bert_relative(f.q, f.k, f.v, Lq, Lk, H, D, f.rel_k, M, key_query, use_cache,
                      pad > 0 ? mask : NULL, want, wantp);
    TU_ASSERT_CLOSE(out.output, want, (size_t)Lq * H * D, ATOL, RTOL);
    TU_ASSERT_CLOSE(out.weights, wantp, (size_t)H * Lq * Lk, ATOL, RTOL);
    free(out.output);
    free(out.weights);
    free(ws);
    free(mask);
    free(want);
    free(wantp);
    fixture_free(&f);
}

static void test_bert_relative_key(void **state)
{
    (void)state;
    /* The whole table: L = max_position_embeddings reaches every row. */
    check_bert(12, 12, 2, 8, 12, false, false, 0, 1101);
    check_bert(7, 7, 3, 5, 512, false, false, 0, 1102); /* bert-base's table rows */
    /* Several query blocks and key tiles (64 queries; 256 keys with
     * POSATTN_TILE_KEYS=256). */
    check_bert(300, 300, 2, 6, 300, false, false, 0, 1103);
    check_bert(40, 40, 2, 8, 64, false, false, 5, 1104);
}

static void test_bert_relative_key_query(void **state)
{
    (void)state;
    check_bert(12, 12, 2, 8, 12, true, false, 0, 1201);
    check_bert(7, 7, 3, 5, 512, true, false, 0, 1202);
    check_bert(300, 300, 2, 6, 300, true, false, 0, 1203);
    check_bert(40, 40, 2, 8, 64, true, false, 5, 1204);
    check_bert(1, 33, 2, 8, 40, true, true, 0, 1205);  /* a step with a cache */
    check_bert(7, 19, 2, 4, 24, true, false, 0, 1206); /* Lq != Lk, queries 0 .. 6 */
    check_bert(70, 20, 1, 4, 70, true, false, 3, 1207);
}

/* ------------------------------------------------------------------------- */
/* Attention: direction and key_term in general                              */
/* ------------------------------------------------------------------------- */

/* A q/k/v shaw case with tables of K (rel_v of Dv too) and the given
 * direction and key term. */
static void setup_shaw(fixture *f, int Lq, int Lk, int H, int Hkv, int D, int Dv, int K,
                       pa_shaw_direction dir, bool key_term, uint64_t seed)
{
    setup_qkv(f, PA_SCHEME_SHAW, Lq, Lk, H, Hkv, D, Dv, seed);
    f->scheme.shaw.max_relative_position = K;
    add_tables(f, H, D, Dv ? Dv : D, seed);
    f->scheme.shaw.direction = dir;
    f->scheme.shaw.key_term = key_term;
}

static int32_t *positions(int n, int32_t first, int32_t step)
{
    int32_t *p = tu_alloc((size_t)n, sizeof(int32_t));
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)((int64_t)first + (int64_t)i * step);
    return p;
}

static void test_against_reference(void **state)
{
    (void)state;
    for (int c = 0; c < 4; c++) {
        const pa_shaw_direction dir =
            c & 1 ? PA_SHAW_DIRECTION_QUERY_MINUS_KEY : PA_SHAW_DIRECTION_KEY_MINUS_QUERY;
        const bool kt = c & 2;
        const uint64_t seed = 1300 + 16 * (uint64_t)c;
        fixture f;
        tu_rng r;

        /* GQA, clipped, causal, rel_v with Dv != D, two query blocks. */
        setup_shaw(&f, 70, 70, 4, 2, 8, 5, 3, dir, kt, seed);
        f.a.causal = true;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);

        /* MQA, Lq != Lk past one key tile, explicit positions: keys two
         * apart, queries in reverse order from before the first key to
         * past the last. */
        setup_shaw(&f, 9, 300, 3, 1, 4, 0, 7, dir, kt, seed + 1);
        f.kpos = positions(300, 1, 2);
        f.qpos = positions(9, 620, -77);
        f.a.k_positions = f.kpos;
        f.a.q_positions = f.qpos;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS | WANT_STATS);
        /* The same, causal with a window: visibility by position. */
        f.a.causal = true;
        f.a.window = 40;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        fixture_free(&f);

        /* Unsorted key positions, a padded key, K past every distance. */
        setup_shaw(&f, 20, 20, 2, 2, 6, 0, 40, dir, kt, seed + 2);
        f.kpos = tu_alloc(20, sizeof(int32_t));
        for (int j = 0; j < 20; j++)
            f.kpos[j] = (j * 7) % 20;
        f.a.k_positions = f.kpos;
        f.a.key_length = 19;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);

        /* Positions past 2^30 (the kernels' int64 paths) near INT32_MAX,
         * one key at INT32_MIN. */
        setup_shaw(&f, 5, 9, 2, 1, 4, 3, 4, dir, kt, seed + 3);
        f.kpos = positions(9, INT32_MAX - 8, 1);
        f.kpos[4] = INT32_MIN;
        f.qpos = positions(5, INT32_MAX - 4, 1);
        f.a.k_positions = f.kpos;
        f.a.q_positions = f.qpos;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        f.kpos[4] = INT32_MAX - 4; /* consecutive again: the runs of bias_row.c */
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        fixture_free(&f);

        /* One query row (Shaw never takes the decode kernel), K larger
         * than the distances reached. */
        setup_shaw(&f, 1, 50, 4, 2, 8, 0, 60, dir, kt, seed + 4);
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);

        /* The key term reads keys as attention sees them: after k_norm
         * (over the whole projection), with softcap and a scale of the
         * caller's, which multiplies every term. */
        setup_shaw(&f, 10, 10, 2, 2, 4, 0, 3, dir, kt, seed + 5);
        tu_rng_seed(&r, seed);
        f.table = rand_tensor(&r, 8, 0.5, 1.5); /* shaw has no table: the weight */
        f.a.k_norm = f.table;
        f.a.k_norm_len = 8;
        f.a.k_norm_eps = 1e-6f;
        f.a.softcap = 1.5f;
        f.a.scale_set = true;
        f.a.scale = 0.8f;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);

        /* Layer mode with a key bias (BERT's projections). */
        setup_layer(&f, PA_SCHEME_SHAW, 12, 16, 2, 1, 4, 0, 6, seed + 6);
        f.scheme.shaw.max_relative_position = 11;
        add_tables(&f, 2, 4, 4, seed + 6);
        f.scheme.shaw.direction = dir;
        f.scheme.shaw.key_term = kt;
        f.table = rand_tensor(&r, 4, -1, 1); /* b_k [Hkv*D] */
        f.a.b_k = f.table;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);
    }
}

/* The tests above would see a kernel that swapped the direction (of the
 * logits or of rel_v), dropped the key term, scaled only q.k or took the
 * key term from the wrong kv head: each such mistake, made in the
 * reference instead, moves the results far past the tolerance. */
static void test_mistakes_are_visible(void **state)
{
    (void)state;
    enum { L = 24, H = 4, Hkv = 2, D = 8, K = 5 };
    const size_t nw = (size_t)H * L * L, no = (size_t)L * H * D;
    fixture f;
    pa_error err;
    pa_attention_out out = {0};
    pa_scheme mut, none;
    pa_attention a;
    double *want = tu_alloc(nw, sizeof(double)), *plain = tu_alloc(nw, sizeof(double));
    double *nokt = tu_alloc(nw, sizeof(double)), *wout = tu_alloc(no, sizeof(double));
    float *kswap = tu_alloc((size_t)L * Hkv * D, sizeof(float));
    float *vrev = tu_alloc((size_t)(2 * K + 1) * D, sizeof(float));
    size_t wsz;
    void *ws;

    setup_shaw(&f, L, L, H, Hkv, D, 0, K, PA_SHAW_DIRECTION_QUERY_MINUS_KEY, true, 1401);
    f.a.scale_set = true;
    f.a.scale = 0.6f;
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    out.output = tu_alloc(no, sizeof(float));
    out.logits = tu_alloc(nw, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &out, ws, wsz, &err), PA_STATUS_OK, &err);
    ref_attention(&f.a, wout, NULL, want, NULL, NULL);
    TU_ASSERT_CLOSE(out.logits, want, nw, ATOL, RTOL);
    TU_ASSERT_CLOSE(out.output, wout, no, ATOL, RTOL);

    a = f.a;
    mut = f.scheme;
    a.scheme = &mut;
    /* The other direction. */
    mut.shaw.direction = PA_SHAW_DIRECTION_KEY_MINUS_QUERY;
    ref_attention(&a, NULL, NULL, want, NULL, NULL);
    assert_true(tu_worst(out.logits, want, nw, ATOL, RTOL, NULL) > 100);
    /* rel_v by the other direction: its rows reversed. */
    mut.shaw.direction = PA_SHAW_DIRECTION_QUERY_MINUS_KEY;
    for (int r = 0; r < 2 * K + 1; r++)
        memcpy(vrev + (size_t)r * D, f.rel_v + (size_t)(2 * K - r) * D, D * sizeof(float));
    mut.shaw.rel_v = vrev;
    ref_attention(&a, wout, NULL, NULL, NULL, NULL);
    assert_true(tu_worst(out.output, wout, no, ATOL, RTOL, NULL) > 100);
    mut.shaw.rel_v = f.rel_v;
    /* No key term. */
    mut.shaw.key_term = false;
    ref_attention(&a, NULL, NULL, nokt, NULL, NULL);
    assert_true(tu_worst(out.logits, nokt, nw, ATOL, RTOL, NULL) > 100);
    /* The scale on q.k only: plain + (logits - plain) / scale. */
    pa_scheme_init(&none, PA_SCHEME_NONE);
    a.scheme = &none;
    ref_attention(&a, NULL, NULL, plain, NULL, NULL);
    ref_attention(&f.a, NULL, NULL, want, NULL, NULL);
    for (size_t i = 0; i < nw; i++)
        want[i] = plain[i] + (want[i] - plain[i]) / 0.6;
    assert_true(tu_worst(out.logits, want, nw, ATOL, RTOL, NULL) > 100);
    /* The key term of the other kv head: the logits without it, plus the
     * key term that keys with their kv heads swapped give. */
    for (int j = 0; j < L; j++)
        for (int g = 0; g < Hkv; g++)
            memcpy(kswap + ((size_t)j * Hkv + g) * D, f.k + ((size_t)j * Hkv + (Hkv - 1 - g)) * D,
                   D * sizeof(float));
    a.scheme = &mut;
    a.k = kswap;
    mut.shaw.key_term = true;
    ref_attention(&a, NULL, NULL, want, NULL, NULL);
    mut.shaw.key_term = false;
    ref_attention(&a, NULL, NULL, plain, NULL, NULL);
    for (size_t i = 0; i < nw; i++)
        want[i] = nokt[i] + (want[i] - plain[i]);
    assert_true(tu_worst(out.logits, want, nw, ATOL, RTOL, NULL) > 100);

    free(out.output);
    free(out.logits);
    free(ws);
    free(want);
    free(plain);
    free(nokt);
    free(wout);
    free(kswap);
    free(vrev);
    fixture_free(&f);
}

/* Parts (pa_attention_run_part) compute the key term of their kv heads
 * each: together they write what one call writes, bit for bit. */
static void test_parts(void **state)
{
    (void)state;
    enum { Lq = 130, Lk = 90, H = 6, Hkv = 3, D = 8, NP = 5 };
    const size_t no = (size_t)Lq * H * D, nw = (size_t)H * Lq * Lk;
    fixture f;
    pa_error err;
    pa_attention_out one = {0}, parts = {0};
    size_t wsz;
    void *ws;
    setup_shaw(&f, Lq, Lk, H, Hkv, D, 0, 9, PA_SHAW_DIRECTION_QUERY_MINUS_KEY, true, 1501);
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    one.output = tu_alloc(no, sizeof(float));
    one.logits = tu_alloc(nw, sizeof(float));
    parts.output = tu_alloc(no, sizeof(float));
    parts.logits = tu_alloc(nw, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &one, ws, wsz, &err), PA_STATUS_OK, &err);
    for (int p = NP - 1; p >= 0; p--)
        TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &parts, p, NP, ws, wsz, &err), PA_STATUS_OK,
                         &err);
    assert_memory_equal(one.output, parts.output, no * sizeof(float));
    assert_memory_equal(one.logits, parts.logits, nw * sizeof(float));
    check_against_reference(&f.a, WANT_LOGITS);
    free(one.output);
    free(one.logits);
    free(parts.output);
    free(parts.logits);
    free(ws);
    fixture_free(&f);
}

/* The key term's workspace holds only the table rows the positions reach:
 * K = 2^16 over ten tokens needs 19 rows, not 2^17 + 1. */
static void test_key_term_workspace(void **state)
{
    (void)state;
    enum { L = 10, K = 1 << 16 };
    fixture f;
    size_t without, with;
    setup_shaw(&f, L, L, 2, 1, 4, 0, K, PA_SHAW_DIRECTION_QUERY_MINUS_KEY, false, 1601);
    without = pa_attention_workspace_size(&f.a);
    f.scheme.shaw.key_term = true;
    with = pa_attention_workspace_size(&f.a);
    assert_true(without > 0 && with > without);
    assert_true(with - without <= 19 * 16 * sizeof(float) + 64);
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
}

/* The decomposition's position term holds the key term: content +
 * position is the logits. */
static void test_decompose(void **state)
{
    (void)state;
    enum { L = 9, H = 2, D = 4, N = H * L * L };
    fixture f;
    pa_error err;
    float content[N], position[N], sum[N];
    double want[N];
    pa_decomposition d = {content, position, NULL, NULL, NULL, NULL};
    size_t wsz;
    void *ws;
    setup_shaw(&f, L, L, H, 1, D, 0, 3, PA_SHAW_DIRECTION_QUERY_MINUS_KEY, true, 1701);
    wsz = pa_decompose_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, wsz, &err), PA_STATUS_OK, &err);
    ref_attention(&f.a, NULL, NULL, want, NULL, NULL);
    for (int i = 0; i < N; i++)
        sum[i] = content[i] + position[i];
    TU_ASSERT_CLOSE(sum, want, N, ATOL, RTOL);
    free(ws);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_matches_reference),
        cmocka_unit_test(test_index_known),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_pair_index),
        cmocka_unit_test(test_bert_relative_key),
        cmocka_unit_test(test_bert_relative_key_query),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_mistakes_are_visible),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_key_term_workspace),
        cmocka_unit_test(test_decompose),
    };
    return cmocka_run_group_tests_name("shaw", tests, NULL, NULL);
}
