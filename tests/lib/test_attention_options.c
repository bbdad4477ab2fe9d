/* test_attention_options.c - the options of current models in lib/attention.c
 * that change the inputs or the softmax (sinks, q/k RMSNorm, projection
 * biases, M-RoPE rows, k_prerotated) against the double-precision reference
 * in tests/ref_attention.c: each with every scheme, GQA, Lq != Lk, unordered
 * positions, rows longer than a tile, split parts, and every option at once
 * (the masks and biases of test_attention_mask.c included); plus their errors.
 *
 * Tolerance as tests/lib/attention_fixture.h: |got - want| <= 2e-5 +
 * 1e-4 |want|. Each case is also built so that the mistake a careless hand
 * would make (a sink that keeps weight) moves the answer well past that.
 */
#include "attention_fixture.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* sinks                                                                     */
/* ------------------------------------------------------------------------- */

static void test_sinks(void **state)
{
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 3200);
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
        fixture f;
        float sinks[4];
        for (int h = 0; h < 4; h++)
            sinks[h] = (float)tu_uniform(&r, -1, 2);
        setup_qkv(&f, qkv_schemes[s], 6, 13, 4, 1, 8, 0, 3201 + s);
        add_tables(&f, 4, 8, 8, s);
        f.a.sinks = sinks;
        f.a.causal = s % 2 == 0;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);
    }
}

/* Entropy and distance over rows longer than one tile of keys (256 with
 * POSATTN_TILE_KEYS=256, as make test runs the library a second time),
 * where a later tile's larger logit moves the running max and the sums
 * must follow it; inputs in [-3, 3] so the max moves by whole units. With
 * and without sinks, causal and windowed, unsorted key positions, and
 * with the weights asked for or not (the statistics never need them). */
static void test_stats_long_rows(void **state)
{
    (void)state;
    static const pa_scheme_type types[] = {PA_SCHEME_NONE, PA_SCHEME_ALIBI, PA_SCHEME_ROPE,
                                           PA_SCHEME_T5};
    tu_rng r;
    tu_rng_seed(&r, 3900);
    for (size_t s = 0; s < sizeof types / sizeof types[0]; s++) {
        fixture f;
        float sinks[2] = {(float)tu_uniform(&r, 0, 3), (float)tu_uniform(&r, -2, 1)};
        int32_t *kp = tu_alloc(700, sizeof(int32_t)), *qp = tu_alloc(70, sizeof(int32_t));
        setup_qkv(&f, types[s], 70, 700, 2, 1, 16, 0, 3901 + s);
        add_tables(&f, 2, 16, 16, s);
        for (size_t i = 0; i < (size_t)70 * 2 * 16; i++)
            f.q[i] *= 3.0f;
        if (s == 1 || s == 3) { /* positions that are not the indices */
            for (int j = 0; j < 700; j++)
                kp[j] = (j * 37) % 700 * 3;
            for (int i = 0; i < 70; i++)
                qp[i] = 1500 + 7 * i;
            f.a.k_positions = kp;
            f.a.q_positions = qp;
        }
        f.a.sinks = s >= 2 ? sinks : NULL;
        f.a.causal = s % 2 == 0;
        f.a.window = s == 2 ? 300 : 0;
        check_against_reference(&f.a, WANT_STATS);
        check_against_reference(&f.a, WANT_ALL);
        free(kp);
        free(qp);
        fixture_free(&f);
    }
}

/* The row statistics at positions near 2^31 and at negative ones, where
 * float has 128 positions per step: the distances are the positions'
 * differences, rounded once. Prefill (Lq 70) and decode (Lq 2) kernels,
 * and positions spanning all of int32. */
static void test_stats_far_positions(void **state)
{
    (void)state;
    static const int32_t starts[] = {INT32_MAX - 800, INT32_MIN, -1000};
    static const int lqs[] = {70, 2};
    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
        for (size_t l = 0; l < 2; l++) {
            fixture f;
            const int Lq = lqs[l], Lk = 300;
            int32_t kp[300], qp[70];
            setup_qkv(&f, PA_SCHEME_NONE, Lq, Lk, 2, 1, 16, 0, 4100 + s * 2 + l);
            for (int j = 0; j < Lk; j++)
                kp[j] = starts[s] + 2 * j;
            for (int i = 0; i < Lq; i++)
                qp[i] = starts[s] + 2 * (Lk - Lq + i) + 1;
            f.a.k_positions = kp;
            f.a.q_positions = qp;
            f.a.causal = true;
            check_against_reference(&f.a, WANT_STATS);
            fixture_free(&f);
        }
    }
    {
        /* A query at INT32_MAX against a key at INT32_MIN: 2^32 - 1 apart. */
        fixture f;
        int32_t kp[2] = {INT32_MIN, INT32_MAX - 3}, qp[1] = {INT32_MAX};
        setup_qkv(&f, PA_SCHEME_NONE, 1, 2, 1, 1, 8, 0, 4200);
        f.a.k_positions = kp;
        f.a.q_positions = qp;
        check_against_reference(&f.a, WANT_STATS);
        fixture_free(&f);
    }
}

/* The sink takes weight from the keys: every row's weights sum to
 * 1 - exp(s - m) / (sum + exp(s - m)) < 1, and a row with every key hidden
 * puts all of it on the sink (zero output, zero weights). */
static void test_sinks_take_weight(void **state)
{
    (void)state;
    fixture f;
    float sinks[2] = {1.0f, -0.5f}, *out, *w;
    int32_t qpos[3] = {0, 4, 9}, kpos[5] = {1, 2, 3, 4, 5};
    setup_qkv(&f, PA_SCHEME_NONE, 3, 5, 2, 2, 4, 0, 3210);
    f.a.sinks = sinks;
    f.a.causal = true;
    f.a.q_positions = qpos;
    f.a.k_positions = kpos;
    w = run_weights(&f.a, &out);
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < 3; i++) {
            double sum = 0;
            for (int j = 0; j < 5; j++)
                sum += w[((size_t)h * 3 + i) * 5 + j];
            if (i == 0)
                assert_true(sum == 0.0); /* query 0 sees no key */
            else
                assert_true(sum > 0.05 && sum < 0.99);
        }
    }
    for (int d = 0; d < 2 * 4; d++)
        assert_true(out[d] == 0.0f);
    check_against_reference(&f.a, WANT_ALL);
    free(out);
    free(w);
    f.a.key_length = 0; /* every row fully masked */
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
}

/* ------------------------------------------------------------------------- */
/* q/k RMSNorm and projection biases                                         */
/* ------------------------------------------------------------------------- */

/* Per-head norms (weight [D]: Qwen3, Gemma 3) and whole-projection norms
 * ([H*D], [Hkv*D]: OLMo 2) with every q/k/v scheme and GQA; q_rot and k_rot
 * are q and k as attention sees them (normalised, then rotated). The two
 * kinds give different answers on the same inputs. */
static void test_qk_norm(void **state)
{
    (void)state;
    const int H = 4, Hkv = 2, D = 8;
    tu_rng r;
    tu_rng_seed(&r, 3800);
    float *wq_head = rand_tensor(&r, D, 0.5, 1.5), *wk_head = rand_tensor(&r, D, 0.5, 1.5);
    float *wq_all = rand_tensor(&r, (size_t)H * D, 0.5, 1.5);
    float *wk_all = rand_tensor(&r, (size_t)Hkv * D, 0.5, 1.5);
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
        for (int whole = 0; whole < 2; whole++) {
            fixture f;
            setup_qkv(&f, qkv_schemes[s], 5, 9, H, Hkv, D, 0, 3801 + s);
            add_tables(&f, H, D, D, s);
            for (size_t i = 0; i < (size_t)9 * Hkv * D; i++)
                f.k[i] *= (float)(1 + i % 5); /* rows of unequal size */
            f.a.q_norm = whole ? wq_all : wq_head;
            f.a.q_norm_len = whole ? H * D : D;
            f.a.q_norm_eps = 1e-6f;
            f.a.k_norm = whole ? wk_all : wk_head;
            f.a.k_norm_len = whole ? Hkv * D : D;
            f.a.k_norm_eps = 0.25f; /* large enough to matter */
            f.a.causal = s % 2 == 0;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
    }
    {
        /* Whole against per-head on the same inputs: different weights. */
        fixture f;
        float *o1, *o2, *w1, *w2;
        setup_qkv(&f, PA_SCHEME_NONE, 4, 4, 2, 2, 4, 0, 3810);
        for (size_t i = 0; i < 4 * 2 * 4; i++)
            f.q[i] *= (float)(1 + (i / 4) % 2 * 5); /* heads of unequal size */
        float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        f.a.q_norm = ones;
        f.a.q_norm_len = 4;
        f.a.q_norm_eps = 1e-6f;
        w1 = run_weights(&f.a, &o1);
        f.a.q_norm_len = 8;
        w2 = run_weights(&f.a, &o2);
        double diff = 0;
        for (int i = 0; i < 2 * 4 * 4; i++)
            diff = fmax(diff, fabs(w1[i] - w2[i]));
        assert_true(diff > 1e-2);
        check_against_reference(&f.a, WANT_ALL);
        free(o1);
        free(o2);
        free(w1);
        free(w2);
        fixture_free(&f);
    }
    free(wq_head);
    free(wk_head);
    free(wq_all);
    free(wk_all);
}

/* Layer mode with b_q, b_k, b_v and b_o (GPT-2, BERT, Qwen2), with and
 * without norms and w_o, for every scheme layer mode takes. */
static void test_projection_biases(void **state)
{
    (void)state;
    const pa_scheme_type all[] = {PA_SCHEME_NONE,  PA_SCHEME_SINUSOIDAL, PA_SCHEME_ROPE,
                                  PA_SCHEME_ALIBI, PA_SCHEME_T5,         PA_SCHEME_SHAW};
    tu_rng r;
    tu_rng_seed(&r, 3900);
    float *bq = rand_tensor(&r, 4 * 4, -1, 1), *bk = rand_tensor(&r, 2 * 4, -1, 1);
    float *bv = rand_tensor(&r, 2 * 4, -1, 1), *bo = rand_tensor(&r, 5, -1, 1);
    float *wn = rand_tensor(&r, 4 * 4, 0.5, 1.5);
    for (size_t s = 0; s < sizeof all / sizeof all[0]; s++) {
        for (int v = 0; v < 3; v++) {
            fixture f;
            setup_layer(&f, all[s], 7, 12, 4, 2, 4, 0, v == 2 ? 0 : 5, 3901 + s);
            add_tables(&f, 4, 4, 4, s);
            f.a.b_q = bq;
            f.a.b_k = bk;
            f.a.b_v = bv;
            f.a.b_o = v == 2 ? NULL : bo;
            if (v == 1) {
                f.a.q_norm = wn;
                f.a.q_norm_len = 4 * 4;
                f.a.q_norm_eps = 1e-5f;
                f.a.k_norm = wn;
                f.a.k_norm_len = 4;
                f.a.k_norm_eps = 1e-5f;
            }
            f.a.causal = true;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
    }
    free(bq);
    free(bk);
    free(bv);
    free(bo);
    free(wn);
}

/* ------------------------------------------------------------------------- */
/* M-RoPE                                                                    */
/* ------------------------------------------------------------------------- */

/* Three position rows per token choose the angles (both section layouts,
 * both pair layouts, a scaling, GQA, Lq != Lk); causal follows token
 * order, not the rows. Without rows, the three are the 1-D positions:
 * the answer is plain rope's, bit for bit. */
static void test_mrope(void **state)
{
    (void)state;
    const int Lq = 6, Lk = 9, D = 16;
    int32_t qm[3 * 6], km[3 * 9];
    for (int i = 0; i < Lq; i++) {
        qm[i] = 3;                   /* temporal: one frame */
        qm[Lq + i] = 10 + i / 3;     /* height */
        qm[2 * Lq + i] = 20 + i % 3; /* width */
    }
    for (int j = 0; j < Lk; j++) {
        km[j] = j < 3 ? j : 3;
        km[Lk + j] = j < 3 ? j : 10 + (j - 3) / 3;
        km[2 * Lk + j] = j < 3 ? j : 20 + (j - 3) % 3;
    }
    for (int v = 0; v < 4; v++) {
        fixture f;
        setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, 4, 2, D, 0, 3950 + v);
        f.scheme.rope.mrope_section[0] = 2;
        f.scheme.rope.mrope_section[1] = 3;
        f.scheme.rope.mrope_section[2] = 3;
        f.scheme.rope.mrope_interleaved = v % 2;
        f.scheme.rope.layout = v >= 2 ? PA_ROPE_LAYOUT_GPTJ : PA_ROPE_LAYOUT_NEOX;
        if (v == 3) {
            /* dynamic scaling reads the largest position that makes an
             * angle: 25 in the rows, 8 in token order */
            f.scheme.rope.scaling = PA_ROPE_SCALING_DYNAMIC;
            f.scheme.rope.factor = 2.0;
            f.scheme.rope.original_max_position = 8;
            f.scheme.rope.mrope_section[1] = 1;
            f.scheme.rope.mrope_section[2] = 5; /* h != w */
            for (int i = 0; i < Lq; i++)
                qm[2 * Lq + i] = 20 + i;
        }
        f.a.q_mrope_positions = qm;
        f.a.k_mrope_positions = km;
        f.a.causal = true;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);
    }
    {
        /* No rows: plain rope exactly; rows that differ: another answer. */
        fixture f;
        float *o1, *o2, *w1, *w2;
        setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, 2, 2, D, 0, 3960);
        f.a.causal = true;
        w1 = run_weights(&f.a, &o1);
        f.scheme.rope.mrope_section[0] = 4;
        f.scheme.rope.mrope_section[1] = 2;
        f.scheme.rope.mrope_section[2] = 2;
        w2 = run_weights(&f.a, &o2);
        assert_memory_equal(o1, o2, (size_t)Lq * 2 * D * sizeof(float));
        free(o2);
        free(w2);
        f.a.q_mrope_positions = qm;
        f.a.k_mrope_positions = km;
        w2 = run_weights(&f.a, &o2);
        double diff = 0;
        for (int i = 0; i < 2 * Lq * Lk; i++)
            diff = fmax(diff, fabs(w1[i] - w2[i]));
        assert_true(diff > 1e-3);
        check_against_reference(&f.a, WANT_ALL);
        free(o1);
        free(o2);
        free(w1);
        free(w2);
        fixture_free(&f);
    }
    {
        /* Lq == Lk with rows for q and k apart: their tables are not
         * shared (they are without rows). */
        fixture f;
        setup_qkv(&f, PA_SCHEME_ROPE, 6, 6, 2, 1, D, 0, 3965);
        f.scheme.rope.mrope_section[0] = 2;
        f.scheme.rope.mrope_section[1] = 3;
        f.scheme.rope.mrope_section[2] = 3;
        f.a.q_mrope_positions = qm;
        f.a.k_mrope_positions = km; /* its first 3 * 6 values as [3, 6] */
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);
    }
    {
        /* Layer mode: one array for q and k. */
        fixture f;
        int32_t lm[3 * 5] = {0, 1, 2, 2, 2, 0, 1, 5, 5, 6, 0, 1, 7, 8, 7};
        setup_layer(&f, PA_SCHEME_ROPE, 5, 12, 2, 1, 8, 0, 0, 3970);
        f.scheme.rope.mrope_section[0] = 1;
        f.scheme.rope.mrope_section[1] = 2;
        f.scheme.rope.mrope_section[2] = 1;
        f.a.q_mrope_positions = lm;
        f.a.causal = true;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);
    }
}

/* ------------------------------------------------------------------------- */
/* Everything at once                                                        */
/* ------------------------------------------------------------------------- */

/* Every option with rope, GQA, a window, padding and unordered positions,
 * Lq != Lk, across tiles; then split into parts, which must write exactly
 * what one run writes. */
static void test_all_options(void **state)
{
    (void)state;
    const int Lq = 130, Lk = 300, H = 4, Hkv = 2, D = 8;
    tu_rng r;
    fixture f;
    pa_error err;
    float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    int32_t *qpos = tu_alloc(Lq, sizeof(int32_t)), *kpos = tu_alloc(Lk, sizeof(int32_t));
    uint8_t *mask;
    float *bias;
    tu_rng_seed(&r, 3600);
    mask = rand_mask(&r, (size_t)H * Lq * Lk, 0.8);
    bias = rand_tensor(&r, (size_t)Lq * Lk, -1, 1);
    for (int i = 0; i < Lq; i++)
        qpos[i] = (i * 37) % 200 + 50;
    for (int j = 0; j < Lk; j++)
        kpos[j] = j;
    setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, H, Hkv, D, 0, 3601);
    f.a.q_positions = qpos;
    f.a.k_positions = kpos;
    f.a.causal = true;
    f.a.window = 120;
    f.a.key_length = 280;
    f.a.softcap = 2.0f;
    f.a.sinks = sinks;
    f.a.chunk_size = 64;
    f.a.mask = mask;
    f.a.mask_heads = H;
    f.a.bias = bias;
    f.a.bias_heads = 1;
    float knorm[8] = {1.0f, 0.5f, 2.0f, 1.5f, 1.0f, 0.75f, 1.25f, 1.0f};
    f.a.k_norm = knorm;
    f.a.k_norm_len = D;
    f.a.k_norm_eps = 1e-6f;
    check_against_reference(&f.a, WANT_ALL);

    size_t nout = (size_t)Lq * H * D, nw = (size_t)H * Lq * Lk;
    size_t wsz = pa_attention_workspace_size(&f.a);
    void *ws = tu_alloc(wsz, 1);
    pa_attention_out whole = {
        tu_alloc(nout, 4), tu_alloc(nw, 4), tu_alloc(nw, 4), NULL, NULL, NULL, NULL, NULL, 0};
    pa_attention_out parts = {
        tu_alloc(nout, 4), tu_alloc(nw, 4), tu_alloc(nw, 4), NULL, NULL, NULL, NULL, NULL, 0};
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &whole, ws, wsz, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 3; i++)
        TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &parts, i, 3, ws, wsz, &err), PA_STATUS_OK,
                         &err);
    assert_memory_equal(parts.output, whole.output, nout * 4);
    assert_memory_equal(parts.weights, whole.weights, nw * 4);
    assert_memory_equal(parts.logits, whole.logits, nw * 4);
    free(whole.output);
    free(whole.weights);
    free(whole.logits);
    free(parts.output);
    free(parts.weights);
    free(parts.logits);
    free(ws);
    fixture_free(&f);

    /* Layer mode, every option, with w_o. */
    setup_layer(&f, PA_SCHEME_ALIBI, 9, 12, 4, 2, 4, 0, 5, 3602);
    f.a.causal = true;
    f.a.softcap = 1.0f;
    f.a.sinks = sinks;
    f.a.chunk_size = 4;
    f.a.mask = mask; /* its first 4*9*9 entries as [4, 9, 9] */
    f.a.mask_heads = H;
    f.a.bias = bias;
    f.a.bias_heads = 1;
    f.a.q_norm = knorm;
    f.a.q_norm_len = 4;
    f.a.q_norm_eps = 1e-6f;
    f.a.b_q = bias; /* [H*D] = 16 values */
    f.a.b_v = bias + 16;
    f.a.b_o = bias + 32;
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
    free(qpos);
    free(kpos);
    free(mask);
    free(bias);
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

static void expect_error(const pa_attention *a, pa_status want, const char *field)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_attention_check(a, &err), want, &err);
    assert_string_equal(err.field, field);
    assert_true(strlen(err.message) > 0);
}

static void test_option_errors(void **state)
{
    (void)state;
    fixture f;
    float sinks[2] = {0.0f, NAN};
    uint8_t mask[3 * 2 * 4] = {0};
    float bias[3 * 2 * 4] = {0};
    setup_qkv(&f, PA_SCHEME_NONE, 2, 4, 2, 1, 4, 0, 3700);

    f.a.softcap = -1.0f;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "softcap");
    f.a.softcap = NAN;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "softcap");
    f.a.softcap = INFINITY;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "softcap");
    f.a.softcap = 0.0f;

    f.a.chunk_size = -2;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "chunk_size");
    f.a.chunk_size = 0;

    f.a.sinks = sinks;
    expect_error(&f.a, PA_STATUS_OUT_OF_RANGE, "sinks[1]");
    sinks[1] = 1.0f;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);

    f.a.mask = mask;
    f.a.mask_heads = 3;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "mask.shape[0]");
    f.a.mask_heads = 0;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "mask.shape[0]");
    f.a.mask_heads = 2;

    f.a.bias = bias;
    f.a.bias_heads = 3;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "bias.shape[0]");
    f.a.bias_heads = 1;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);

    f.a.q_norm = bias;
    f.a.q_norm_len = 3;
    f.a.q_norm_eps = 1e-6f;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "q_norm.weight");
    f.a.q_norm_len = 8; /* H * D */
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.a.q_norm_eps = 0.0f;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_norm.eps");
    f.a.q_norm = NULL;
    f.a.k_norm = bias;
    f.a.k_norm_len = 8; /* Hkv = 1: D = 4 or 4 */
    f.a.k_norm_eps = 1e-6f;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "k_norm.weight");
    f.a.k_norm = NULL;
    f.a.b_q = bias;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "b_q");
    f.a.b_q = NULL;
    fixture_free(&f);

    setup_layer(&f, PA_SCHEME_NONE, 3, 4, 2, 2, 2, 0, 0, 3701);
    f.a.b_o = bias;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "b_o");
    fixture_free(&f);

    /* M-RoPE: the sections against the rotary dim, their rows' scheme. */
    int32_t rows[3 * 2] = {0, 1, 0, 1, 0, 1};
    setup_qkv(&f, PA_SCHEME_ROPE, 2, 2, 1, 1, 8, 0, 3703);
    f.scheme.rope.mrope_section[0] = 2;
    f.scheme.rope.mrope_section[1] = 1;
    f.scheme.rope.mrope_section[2] = 2;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "scheme.mrope_section");
    f.scheme.rope.mrope_section[2] = -1;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.mrope_section");
    memset(f.scheme.rope.mrope_section, 0, sizeof f.scheme.rope.mrope_section);
    f.scheme.rope.mrope_interleaved = true;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.mrope_interleaved");
    f.scheme.rope.mrope_interleaved = false;
    f.a.q_mrope_positions = rows;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_mrope_positions");
    fixture_free(&f);

    /* The absolute schemes' four-way decomposition is bilinear: a norm has
     * no such split. */
    setup_layer(&f, PA_SCHEME_SINUSOIDAL, 3, 4, 2, 2, 2, 0, 0, 3702);
    f.a.q_norm = bias;
    f.a.q_norm_len = 2;
    f.a.q_norm_eps = 1e-6f;
    {
        pa_error err;
        size_t wsz = pa_decompose_workspace_size(&f.a), n = 2 * 3 * 3;
        void *ws = tu_alloc(wsz, 1);
        float *c = tu_alloc(n, 4), *pp = tu_alloc(n, 4);
        pa_decomposition d = {.content = c, .position = pp};
        TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, wsz, &err), PA_STATUS_UNSUPPORTED,
                         &err);
        assert_string_equal(err.field, "q_norm");
        free(ws);
        free(c);
        free(pp);
    }
    fixture_free(&f);
}

/* All of a's results, each tu_alloc'd (q_rot, k_rot too). */
typedef struct all_out {
    float *out, *weights, *logits, *q_rot, *k_rot;
    size_t n_out, n_sc, n_q, n_k;
} all_out;

static void run_all_out(const pa_attention *a, all_out *r)
{
    pa_error err;
    int H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H;
    int D = a->head_dim, Dv = a->v_head_dim ? a->v_head_dim : D;
    int Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    pa_attention_out o = {0};
    size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    r->n_out = (size_t)Lq * H * Dv;
    r->n_sc = (size_t)H * Lq * Lk;
    r->n_q = (size_t)Lq * H * D;
    r->n_k = (size_t)Lk * Hkv * D;
    o.output = r->out = tu_alloc(r->n_out, sizeof(float));
    o.weights = r->weights = tu_alloc(r->n_sc, sizeof(float));
    o.logits = r->logits = tu_alloc(r->n_sc, sizeof(float));
    o.q_rot = r->q_rot = tu_alloc(r->n_q, sizeof(float));
    o.k_rot = r->k_rot = tu_alloc(r->n_k, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    free(ws);
}

static void all_out_free(all_out *r)
{
    free(r->out);
    free(r->weights);
    free(r->logits);
    free(r->q_rot);
    free(r->k_rot);
}

/* k_prerotated: keys the library rotated itself (its k_rot), given back as
 * k with k_prerotated, give the same answer bit for bit: the decode kernel
 * (Lq <= 8) and the tiled one (Lq = 20, where rotating the keys twice
 * would go unseen by the decode shapes), GQA, custom positions, plain rope, YaRN, partial
 * rotary_dim, GPT-J layout and M-RoPE rows; k_rot then returns k as given.
 * Given unrotated keys it answers differently (the flag is read). */
static void test_k_prerotated(void **state)
{
    (void)state;
    static const int shapes[][2] = {{1, 33}, {5, 12}, {20, 40}};
    for (int c = 0; c < 5; c++) {
        for (int sh = 0; sh < 3; sh++) {
            const int Lq = shapes[sh][0], Lk = shapes[sh][1], D = 16;
            fixture f;
            int32_t qp[20], kp[40], qm[3 * 20], km[3 * 40];
            all_out plain, pre;
            setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, 4, 2, D, 0, 4200 + (uint64_t)(10 * c + sh));
            for (int i = 0; i < Lq; i++)
                qp[i] = 40 + 3 * i;
            for (int j = 0; j < Lk; j++)
                kp[j] = 2 * j + 1;
            f.a.q_positions = qp;
            f.a.k_positions = kp;
            f.a.causal = c != 1;
            if (c == 1) {
                f.scheme.rope.scaling = PA_ROPE_SCALING_YARN;
                f.scheme.rope.factor = 4.0;
                f.scheme.rope.original_max_position = 16;
            } else if (c == 2) {
                f.scheme.rope.rotary_dim = 8;
            } else if (c == 3) {
                f.scheme.rope.layout = PA_ROPE_LAYOUT_GPTJ;
            } else if (c == 4) {
                f.scheme.rope.mrope_section[0] = 4;
                f.scheme.rope.mrope_section[1] = 2;
                f.scheme.rope.mrope_section[2] = 2;
                for (int r = 0; r < 3; r++) {
                    for (int i = 0; i < Lq; i++)
                        qm[r * Lq + i] = qp[i] + r;
                    for (int j = 0; j < Lk; j++)
                        km[r * Lk + j] = kp[j] * (r + 1) % 50;
                }
                f.a.q_mrope_positions = qm;
                f.a.k_mrope_positions = km;
            }
            run_all_out(&f.a, &plain);
            pa_attention b = f.a;
            b.k = plain.k_rot;
            b.k_prerotated = true;
            run_all_out(&b, &pre);
            assert_memory_equal(plain.out, pre.out, plain.n_out * sizeof(float));
            assert_memory_equal(plain.weights, pre.weights, plain.n_sc * sizeof(float));
            assert_memory_equal(plain.logits, pre.logits, plain.n_sc * sizeof(float));
            assert_memory_equal(plain.q_rot, pre.q_rot, plain.n_q * sizeof(float));
            assert_memory_equal(pre.k_rot, plain.k_rot, plain.n_k * sizeof(float));
            all_out_free(&pre);
            /* The unrotated keys taken as rotated: another answer. */
            b.k = f.k;
            run_all_out(&b, &pre);
            assert_true(memcmp(plain.out, pre.out, plain.n_out * sizeof(float)) != 0);
            all_out_free(&pre);
            all_out_free(&plain);
            fixture_free(&f);
        }
    }
    {
        /* Refused where it cannot hold, naming the field. */
        fixture f;
        pa_error err;
        float w[16];
        for (int d = 0; d < 16; d++)
            w[d] = 1.0f;
        setup_qkv(&f, PA_SCHEME_ALIBI, 2, 3, 2, 2, 16, 0, 4300);
        f.a.k_prerotated = true;
        TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_INVALID_ARGUMENT, &err);
        assert_string_equal(err.field, "k_prerotated");
        fixture_free(&f);
        setup_qkv(&f, PA_SCHEME_ROPE, 2, 3, 2, 2, 16, 0, 4301);
        f.a.k_prerotated = true;
        f.a.k_norm = w;
        f.a.k_norm_len = 16;
        f.a.k_norm_eps = 1e-6f;
        TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_INVALID_ARGUMENT, &err);
        assert_string_equal(err.field, "k_norm");
        fixture_free(&f);
        setup_layer(&f, PA_SCHEME_ROPE, 3, 8, 2, 2, 4, 4, 0, 4302);
        f.a.k_prerotated = true;
        TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_INVALID_ARGUMENT, &err);
        assert_string_equal(err.field, "k_prerotated");
        fixture_free(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sinks),           cmocka_unit_test(test_sinks_take_weight),
        cmocka_unit_test(test_stats_long_rows), cmocka_unit_test(test_stats_far_positions),
        cmocka_unit_test(test_qk_norm),         cmocka_unit_test(test_projection_biases),
        cmocka_unit_test(test_mrope),           cmocka_unit_test(test_all_options),
        cmocka_unit_test(test_option_errors),   cmocka_unit_test(test_k_prerotated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
