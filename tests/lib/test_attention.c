/* test_attention.c - lib/attention.c and lib/attention_check.c against the
 * double-precision reference in ref_attention.c, for every scheme, both input
 * modes, masks, GQA and edge shapes; plus every validation error.
 *
 * Tolerance: float32 kernels against double, inputs in [-1, 1]:
 * |got - want| <= 2e-5 + 1e-4 |want| for outputs, weights and logits.
 */
#include "attention_fixture.h"
#include "attention_plan.h"
#include "ref_attention.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */

static void test_each_scheme_qkv(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
        for (int causal = 0; causal < 2; causal++) {
            fixture f;
            setup_qkv(&f, qkv_schemes[s], 7, 11, 4, 2, 8, 6, 100 + s);
            add_tables(&f, 4, 8, 6, s);
            f.a.causal = causal;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
    }
}

static void test_each_scheme_layer(void **state)
{
    (void)state;
    const pa_scheme_type all[] = {PA_SCHEME_NONE, PA_SCHEME_SINUSOIDAL, PA_SCHEME_LEARNED,
                                  PA_SCHEME_ROPE, PA_SCHEME_ALIBI,      PA_SCHEME_T5,
                                  PA_SCHEME_SHAW};
    for (size_t s = 0; s < sizeof all / sizeof all[0]; s++) {
        for (int with_wo = 0; with_wo < 2; with_wo++) {
            fixture f;
            tu_rng r;
            setup_layer(&f, all[s], 9, 12, 2, 1, 4, 0, with_wo ? 5 : 0, 200 + s);
            add_tables(&f, 2, 4, 4, s);
            if (all[s] == PA_SCHEME_LEARNED) {
                tu_rng_seed(&r, 7);
                f.table = rand_tensor(&r, 16 * 12, -1, 1);
                f.scheme.learned.table = f.table;
                f.scheme.learned.rows = 16;
                f.scheme.learned.cols = 12;
                f.scheme.learned.offset = 2;
            }
            f.a.causal = true;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
    }
}

/* Sizes that cross the BQ=64 query and the key tiles (256 keys under
 * POSATTN_TILE_KEYS=256, as make test runs the library's tests again; the
 * first case crosses the default's 1024 too), so the online softmax folds
 * several tiles and causal skips some of them. */
static void test_multi_tile(void **state)
{
    (void)state;
    for (int causal = 0; causal < 2; causal++) {
        fixture f;
        setup_qkv(&f, PA_SCHEME_ROPE, 150, 2 * pa__tile_keys() + 100, 2, 1, 16, 0, 300 + causal);
        f.a.causal = causal;
        check_against_reference(&f.a, causal ? WANT_WEIGHTS : 0);
        fixture_free(&f);
    }
    {
        fixture f;
        setup_qkv(&f, PA_SCHEME_ALIBI, 600, 600, 2, 2, 8, 0, 303);
        f.a.causal = true;
        f.a.window = 100;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        fixture_free(&f);
    }
    {
        /* Ordered positions with gaps, a symmetric window and padding: each
         * row's visible keys are one run that the kernel trims from both
         * ends; the run starts and ends inside tiles. */
        fixture f;
        int32_t *qpos = tu_alloc(300, sizeof(int32_t)), *kpos = tu_alloc(700, sizeof(int32_t));
        for (int32_t i = 0; i < 300; i++)
            qpos[i] = 3 * i + 1;
        for (int32_t j = 0; j < 700; j++)
            kpos[j] = j + j / 7;
        setup_qkv(&f, PA_SCHEME_T5, 300, 700, 2, 1, 8, 0, 304);
        add_tables(&f, 2, 8, 8, 1);
        f.a.q_positions = qpos;
        f.a.k_positions = kpos;
        f.a.window = 90;
        f.a.key_length = 650;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        f.a.causal = true;
        check_against_reference(&f.a, WANT_WEIGHTS);
        fixture_free(&f);
        free(qpos);
        free(kpos);
    }
}

/* T5 buckets past max_distance (the clamped table) both ways, one-way
 * buckets, and a max_distance too large for the table (per-logit path). */
static void test_t5_far_positions(void **state)
{
    (void)state;
    const int32_t mds[] = {20, 70000};
    for (size_t m = 0; m < sizeof mds / sizeof *mds; m++) {
        for (int bidir = 0; bidir < 2; bidir++) {
            fixture f;
            int32_t qpos[40], kpos[90];
            for (int32_t i = 0; i < 40; i++)
                qpos[i] = 5 * i + (int32_t)(m * 60000);
            for (int32_t j = 0; j < 90; j++)
                kpos[j] = 3 * j - 40;
            setup_qkv(&f, PA_SCHEME_T5, 40, 90, 2, 2, 8, 0, 320 + m * 2 + bidir);
            f.scheme.t5.num_buckets = 8;
            f.scheme.t5.max_distance = mds[m];
            f.scheme.t5.bidirectional = bidir;
            add_tables(&f, 2, 8, 8, 1);
            f.a.q_positions = qpos;
            f.a.k_positions = kpos;
            check_against_reference(&f.a, WANT_LOGITS);
            fixture_free(&f);
        }
    }
}

static void test_rope_variants(void **state)
{
    (void)state;
    static float factors[4] = {1.0f, 2.0f, 4.0f, 8.0f};
    for (int scaling = 0; scaling < PA_ROPE_SCALING_COUNT; scaling++) {
        for (int layout = 0; layout < 2; layout++) {
            fixture f;
            setup_qkv(&f, PA_SCHEME_ROPE, 5, 9, 2, 2, 10, 0, 400 + scaling * 2 + layout);
            f.scheme.rope.layout = (pa_rope_layout)layout;
            f.scheme.rope.rotary_dim = 8; /* partial rotary: dims 8, 9 pass through */
            f.scheme.rope.scaling = (pa_rope_scaling)scaling;
            f.scheme.rope.factor = 4.0;
            f.scheme.rope.original_max_position = 6;
            f.scheme.rope.short_factor = factors;
            f.scheme.rope.short_factor_len = 4;
            f.scheme.rope.long_factor = factors;
            f.scheme.rope.long_factor_len = 4;
            f.scheme.rope.partial_rotary_factor = 0.5; /* proportional: pairs 2, 3 zero */
            f.scheme.rope.alpha = 3.0;                 /* ntk_alpha */
            check_against_reference(&f.a, WANT_ROT | WANT_LOGITS);
            fixture_free(&f);
        }
    }
}

static void test_masks_and_positions(void **state)
{
    (void)state;
    int32_t qpos[4] = {10, 3, 7, 7}, kpos[6] = {0, 5, 9, 2, 12, 8};
    fixture f;

    /* Padding and a symmetric window, not causal. */
    setup_qkv(&f, PA_SCHEME_T5, 4, 6, 2, 1, 5, 0, 500);
    add_tables(&f, 2, 5, 5, 1);
    f.a.key_length = 4;
    f.a.window = 3;
    f.a.q_positions = qpos;
    f.a.k_positions = kpos;
    check_against_reference(&f.a, WANT_ALL);

    /* Causal with explicit, unordered positions. */
    f.a.key_length = -1;
    f.a.window = 0;
    f.a.causal = true;
    check_against_reference(&f.a, WANT_ALL);

    /* Explicit scale overrides T5's 1.0. */
    f.a.scale_set = true;
    f.a.scale = 0.25f;
    check_against_reference(&f.a, WANT_LOGITS);
    fixture_free(&f);
}

/* Default positions align the causal mask bottom-right: with Lq=2, Lk=5 the
 * first query sees keys 0..3, the second all five. */
static void test_causal_bottom_right(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    float out[2 * 1 * 2], w[2 * 5];
    pa_attention_out o = {.output = out, .weights = w};
    void *ws;
    size_t wsz;

    setup_qkv(&f, PA_SCHEME_NONE, 2, 5, 1, 1, 2, 0, 600);
    f.a.causal = true;
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    assert_true(w[4] == 0.0f);
    assert_true(w[3] > 0.0f);
    for (int j = 0; j < 5; j++)
        assert_true(w[5 + j] > 0.0f);
    free(ws);
    fixture_free(&f);
}

/* A row whose every key is masked gives zeros, never NaN. */
static void test_fully_masked_rows(void **state)
{
    (void)state;
    fixture f;
    setup_qkv(&f, PA_SCHEME_ALIBI, 3, 4, 2, 2, 3, 0, 700);
    f.a.key_length = 0;
    check_against_reference(&f.a, WANT_ALL);

    /* Only the first query row is fully masked: key positions all after it. */
    int32_t qpos[3] = {0, 5, 6}, kpos[4] = {1, 2, 3, 4};
    f.a.key_length = -1;
    f.a.causal = true;
    f.a.q_positions = qpos;
    f.a.k_positions = kpos;
    {
        pa_error err;
        float out[3 * 2 * 3], w[2 * 3 * 4];
        pa_attention_out o = {.output = out, .weights = w};
        size_t wsz = pa_attention_workspace_size(&f.a);
        void *ws = tu_alloc(wsz, 1);
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
        for (int d = 0; d < 3; d++)
            assert_true(out[d] == 0.0f && out[3 + d] == 0.0f);
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            assert_false(isnan(w[i]));
        free(ws);
    }
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
}

static void test_edge_shapes(void **state)
{
    (void)state;
    fixture f;
    setup_qkv(&f, PA_SCHEME_ROPE, 1, 1, 1, 1, 2, 0, 800); /* L = 1 */
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
    setup_qkv(&f, PA_SCHEME_ALIBI, 3, 5, 3, 3, 7, 5, 801); /* odd D, Dv != D, 3 heads */
    f.a.causal = true;
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
    setup_qkv(&f, PA_SCHEME_SHAW, 9, 2, 2, 1, 3, 1, 802); /* Lq > Lk, Dv = 1 */
    add_tables(&f, 2, 3, 1, 3);
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
    setup_layer(&f, PA_SCHEME_ROPE, 1, 3, 1, 1, 2, 0, 0, 803);
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
}

/* GQA equals MHA with each kv head repeated H/Hkv times (repeat_interleave). */
static void test_gqa_equals_repeated_mha(void **state)
{
    (void)state;
    const int L = 13, H = 6, Hkv = 2, D = 4, G = H / Hkv;
    fixture g, m;
    pa_error err;
    setup_qkv(&g, PA_SCHEME_ROPE, L, L, H, Hkv, D, 0, 900);
    g.a.causal = true;
    setup_qkv(&m, PA_SCHEME_ROPE, L, L, H, H, D, 0, 901);
    m.a.causal = true;
    memcpy(m.q, g.q, (size_t)L * H * D * sizeof(float));
    for (int t = 0; t < L; t++)
        for (int h = 0; h < H; h++) {
            memcpy(m.k + ((size_t)t * H + h) * D, g.k + ((size_t)t * Hkv + h / G) * D,
                   (size_t)D * sizeof(float));
            memcpy(m.v + ((size_t)t * H + h) * D, g.v + ((size_t)t * Hkv + h / G) * D,
                   (size_t)D * sizeof(float));
        }
    float *og = tu_alloc((size_t)L * H * D, sizeof(float));
    float *om = tu_alloc((size_t)L * H * D, sizeof(float));
    pa_attention_out outg = {.output = og}, outm = {.output = om};
    size_t wg = pa_attention_workspace_size(&g.a), wm = pa_attention_workspace_size(&m.a);
    void *wsg = tu_alloc(wg, 1), *wsm = tu_alloc(wm, 1);
    TU_ASSERT_STATUS(pa_attention_run(&g.a, &outg, wsg, wg, &err), PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa_attention_run(&m.a, &outm, wsm, wm, &err), PA_STATUS_OK, &err);
    for (size_t i = 0; i < (size_t)L * H * D; i++)
        assert_float_equal(og[i], om[i], 1e-6);
    free(og);
    free(om);
    free(wsg);
    free(wsm);
    fixture_free(&g);
    fixture_free(&m);
}

/* Working memory for L=32768, H=8, D=64 without weights stays under 64 MB. */
static void test_workspace_bound(void **state)
{
    (void)state;
    pa_scheme s;
    pa_attention a;
    float dummy = 0;
    for (int t = 0; t < 2; t++) {
        pa_scheme_init(&s, t ? PA_SCHEME_ROPE : PA_SCHEME_NONE);
        pa_attention_init(&a, &s);
        a.num_heads = 8;
        a.head_dim = 64;
        a.q_len = a.k_len = 32768;
        a.q = a.k = a.v = &dummy;
        size_t bytes = pa_attention_workspace_size(&a);
        print_message("workspace %s L=32768 H=8 D=64: %.1f MB\n", pa_scheme_type_name(s.type),
                      bytes / 1048576.0);
        assert_true(bytes < 64u * 1024 * 1024);
        /* Beyond a constant: one kv head's keys (transposed) and values
         * (gathered), and with rope the cos and sin tables; not the heads,
         * not L*L. */
        assert_true(bytes < (size_t)(t ? 3 : 2) * 32768 * 64 * sizeof(float) + 1024 * 1024);
    }
}

/* Running every part of a split call writes exactly what one call writes. */
static void test_parts_equal_whole(void **state)
{
    (void)state;
    const int nparts_list[] = {1, 2, 3, 7, 64};
    fixture f;
    pa_error err;
    setup_qkv(&f, PA_SCHEME_ROPE, 150, 170, 6, 2, 8, 0, 1200);
    f.a.causal = true;
    const size_t nout = (size_t)150 * 6 * 8, nw = (size_t)6 * 150 * 170;
    const size_t nq = nout, nk = (size_t)170 * 2 * 8;
    size_t wsz = pa_attention_workspace_size(&f.a);
    void *ws = tu_alloc(wsz, 1);
    pa_attention_out whole = {tu_alloc(nout, 4),
                              tu_alloc(nw, 4),
                              tu_alloc(nw, 4),
                              tu_alloc(nq, 4),
                              tu_alloc(nk, 4),
                              NULL,
                              NULL,
                              NULL,
                              0};
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &whole, ws, wsz, &err), PA_STATUS_OK, &err);
    for (size_t t = 0; t < sizeof nparts_list / sizeof nparts_list[0]; t++) {
        int n = nparts_list[t];
        pa_attention_out parts = {tu_alloc(nout, 4),
                                  tu_alloc(nw, 4),
                                  tu_alloc(nw, 4),
                                  tu_alloc(nq, 4),
                                  tu_alloc(nk, 4),
                                  NULL,
                                  NULL,
                                  NULL,
                                  0};
        for (int i = n - 1; i >= 0; i--) /* any order */
            TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &parts, i, n, ws, wsz, &err), PA_STATUS_OK,
                             &err);
        assert_memory_equal(parts.output, whole.output, nout * 4);
        assert_memory_equal(parts.weights, whole.weights, nw * 4);
        assert_memory_equal(parts.logits, whole.logits, nw * 4);
        assert_memory_equal(parts.q_rot, whole.q_rot, nq * 4);
        assert_memory_equal(parts.k_rot, whole.k_rot, nk * 4);
        free(parts.output);
        free(parts.weights);
        free(parts.logits);
        free(parts.q_rot);
        free(parts.k_rot);
    }
    TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &whole, 2, 2, ws, wsz, &err),
                     PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "part");
    TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &whole, 0, 0, ws, wsz, &err),
                     PA_STATUS_INVALID_ARGUMENT, &err);
    free(whole.output);
    free(whole.weights);
    free(whole.logits);
    free(whole.q_rot);
    free(whole.k_rot);
    free(ws);
    fixture_free(&f);

    setup_layer(&f, PA_SCHEME_NONE, 4, 4, 2, 2, 2, 0, 0, 1201);
    float out[4 * 2 * 2];
    pa_attention_out o = {.output = out};
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &o, 0, 2, ws, wsz, &err), PA_STATUS_UNSUPPORTED,
                     &err);
    free(ws);
    fixture_free(&f);
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

static void expect_error(const pa_attention *a, pa_status want, const char *field)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    pa_status st = pa_attention_check(a, &err);
    TU_ASSERT_STATUS(st, want, &err);
    assert_string_equal(err.field, field);
    assert_true(strlen(err.message) > 0);
}

static void test_errors(void **state)
{
    (void)state;
    fixture f;
    setup_qkv(&f, PA_SCHEME_NONE, 4, 4, 8, 8, 4, 0, 1000);
    pa_attention a = f.a;
    pa_error err;

    a.num_kv_heads = 3;
    expect_error(&a, PA_STATUS_SHAPE_MISMATCH, "num_kv_heads");
    pa_attention_check(&a, &err);
    assert_string_equal(err.message, "num_kv_heads=3 does not divide num_heads=8");
    a = f.a;
    a.num_heads = 0;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "num_heads");
    a = f.a;
    a.head_dim = -1;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "head_dim");
    a = f.a;
    a.q_len = 0;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "q.shape[0]");
    a = f.a;
    a.k = NULL;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "k");
    a = f.a;
    a.window = -2;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "window");
    a = f.a;
    a.key_length = 5;
    expect_error(&a, PA_STATUS_OUT_OF_RANGE, "key_length");
    a = f.a;
    a.scale_set = true;
    a.scale = NAN;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "scale");
    a = f.a;
    a.scheme = NULL;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "scheme");
    a = f.a;
    a.num_heads = 1 << 20;
    a.num_kv_heads = 1;
    a.head_dim = 1 << 12;
    expect_error(&a, PA_STATUS_TOO_LARGE, "q");

    /* Absolute schemes need layer mode. */
    f.scheme.type = PA_SCHEME_SINUSOIDAL;
    expect_error(&f.a, PA_STATUS_UNSUPPORTED, "scheme.type");
    f.scheme.type = PA_SCHEME_ROPE;
    f.scheme.rope.rotary_dim = 3;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim");
    f.scheme.type = PA_SCHEME_T5;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.table");
    f.scheme.type = PA_SCHEME_SHAW;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.rel_k");
    f.scheme.type = PA_SCHEME_ALIBI;
    f.scheme.alibi.num_slopes = 3;
    f.scheme.alibi.slopes = f.q;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "scheme.slopes");
    f.scheme.type = (pa_scheme_type)99;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.type");
    fixture_free(&f);

    /* Layer mode. */
    setup_layer(&f, PA_SCHEME_LEARNED, 6, 4, 2, 2, 2, 0, 0, 1001);
    f.table = tu_alloc(8 * 4, sizeof(float));
    f.scheme.learned.table = f.table;
    f.scheme.learned.rows = 8;
    f.scheme.learned.cols = 4;
    f.scheme.learned.offset = 3; /* rows 3..8: one past the table */
    /* default positions: the table is what the caller sent */
    expect_error(&f.a, PA_STATUS_OUT_OF_RANGE, "scheme.table.shape[0]");
    f.scheme.learned.offset = 0;
    int32_t pos[6] = {0, 1, 2, 3, 4, 9};
    f.a.k_positions = pos;
    expect_error(&f.a, PA_STATUS_OUT_OF_RANGE, "k_positions[5]");
    pos[5] = 5;
    int32_t qpos[6] = {0, 1, 2, 3, 5, 5};
    f.a.q_positions = qpos;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_positions[4]");
    f.a.q_positions = NULL;
    a = f.a;
    a.w_v = NULL;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "w_v");
    a = f.a;
    a.q = f.x;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "x");
    a = f.a;
    a.w_o = f.wq;
    a.d_out = 0;
    expect_error(&a, PA_STATUS_INVALID_ARGUMENT, "w_o.shape[1]");
    TU_ASSERT_STATUS(pa_attention_check(&f.a, &err), PA_STATUS_OK, &err);
    fixture_free(&f);
}

/* Finite inputs whose logits overflow float32 are an error, not NaN output
 * (found by the request fuzzer). */
static void test_overflowing_logits(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    float out[1 * 1 * 2];
    pa_attention_out o = {.output = out};
    setup_qkv(&f, PA_SCHEME_NONE, 1, 2, 1, 1, 2, 0, 1300);
    f.q[0] = f.q[1] = 1e20f;
    f.k[0] = f.k[1] = 1e20f;
    f.k[2] = f.k[3] = -1e20f;
    size_t wsz = pa_attention_workspace_size(&f.a);
    void *ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OUT_OF_RANGE, &err);
    assert_string_equal(err.field, "q");
    /* Large but representable logits are fine: softmax subtracts the max. */
    f.q[0] = f.q[1] = 1e18f;
    f.k[0] = f.k[1] = 1e18f;
    f.k[2] = f.k[3] = -1e18f;
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    assert_true(isfinite(out[0]) && isfinite(out[1]));
    free(ws);
    fixture_free(&f);
}

/* Finite inputs whose results are not: each an OUT_OF_RANGE naming what
 * overflowed, never an answer with inf or NaN in it (issue #19). */
static void expect_out_of_range(const pa_attention *a, size_t nout, const char *field)
{
    pa_error err;
    size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    pa_attention_out o = {
        tu_alloc(nout, sizeof(float)), NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OUT_OF_RANGE, &err);
    assert_string_equal(err.field, field);
    free(o.output);
    free(ws);
}

static void test_overflowing_results(void **state)
{
    (void)state;
    fixture f;
    /* The output: v near 3e38 of one sign, averaged with weights summing
     * to 1, rounds past float's range; on both kernels (Lq 1: decode). */
    for (int Lq = 1; Lq <= 20; Lq += 19) {
        setup_qkv(&f, PA_SCHEME_NONE, Lq, 4, 2, 2, 4, 0, 1400 + (uint64_t)Lq);
        for (size_t i = 0; i < (size_t)4 * 2 * 4; i++)
            f.v[i] = 3.4028233e38f;
        for (size_t i = 0; i < (size_t)Lq * 2 * 4; i++)
            f.q[i] = 0.0f;       /* equal weights: the mean of equal values... */
        f.v[0] = 3.4028235e38f;  /* ...with the largest float beside them */
        f.v[8] = 3.4028235e38f;  /* (key 1, kv head 0) */
        f.v[16] = 3.4028235e38f; /* (key 2) */
        f.v[24] = 3.4028235e38f; /* (key 3) */
        f.a.scale_set = true;
        f.a.scale = 1.0f;
        {
            /* Sums past FLT_MAX: the online output accumulates, then divides. */
            expect_out_of_range(&f.a, (size_t)Lq * 2 * 4, "v");
        }
        fixture_free(&f);
    }
    /* Layer mode: a projection of finite x and weights past 3.4e38. */
    setup_layer(&f, PA_SCHEME_NONE, 3, 4, 2, 2, 2, 0, 3, 1410);
    f.x[0] = 3e38f;
    f.wq[0] = 10.0f;
    expect_out_of_range(&f.a, 3 * 3, "w_q");
    f.wq[0] = 0.1f;
    f.wo[0] = 3e38f;
    f.wo[3] = 3e38f;
    for (int i = 0; i < 3 * 4; i++)
        f.x[i] = 1.0f;
    for (int i = 0; i < 4 * 2 * 2; i++)
        f.wv[i] = 100.0f;
    expect_out_of_range(&f.a, 3 * 3, "w_o");
    fixture_free(&f);
    /* learned: x + P past 3.4e38 (a table row of 3e38 added to x of 1e38). */
    setup_layer(&f, PA_SCHEME_LEARNED, 2, 4, 2, 2, 2, 0, 0, 1421);
    {
        float table[2 * 4];
        for (int i = 0; i < 8; i++)
            table[i] = 3.0e38f;
        f.scheme.learned.table = table;
        f.scheme.learned.rows = 2;
        f.scheme.learned.cols = 4;
        for (int i = 0; i < 8; i++)
            f.x[i] = 1.0e38f;
        expect_out_of_range(&f.a, 2 * 2 * 2, "x");
    }
    fixture_free(&f);
    /* ALiBi: a slope so large that slope * distance is -inf. */
    setup_qkv(&f, PA_SCHEME_ALIBI, 2, 3, 2, 2, 4, 0, 1430);
    {
        const float slopes[2] = {3e38f, 0.5f};
        f.scheme.alibi.slopes = slopes;
        f.scheme.alibi.num_slopes = 2;
        f.a.causal = true;
        expect_out_of_range(&f.a, 2 * 2 * 4, "scheme.slopes");
    }
    fixture_free(&f);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <xmmintrin.h>

/* The kernels flush subnormal results to zero (lib/cpu.h) on the caller's
 * thread for the call only: the caller's floating-point state is the same
 * afterwards, whether it had flush-to-zero itself or not, and ALiBi's far
 * keys (probabilities near 1e-38 times values) still match the reference. */
static void test_fp_state_restored(void **state)
{
    (void)state;
    const unsigned before = _mm_getcsr();
    for (int c = 0; c < 2; c++) {
        fixture f;
        setup_qkv(&f, PA_SCHEME_ALIBI, c == 0 ? 300 : 1, 300, 4, 2, 16, 0, 5100 + (uint64_t)c);
        f.a.causal = true;
        _mm_setcsr(before & ~0x8040u); /* neither FTZ nor DAZ */
        check_against_reference(&f.a, 0);
        assert_int_equal(_mm_getcsr() & 0x8040u, 0);
        _mm_setcsr(before | 0x8000u); /* the caller's own FTZ stays */
        check_against_reference(&f.a, WANT_WEIGHTS);
        assert_int_equal(_mm_getcsr() & 0x8040u, 0x8000u);
        _mm_setcsr(before);
        fixture_free(&f);
    }
}

/* Flush-to-zero is for results only: subnormal inputs are read as they are
 * (denormals-are-zero would read them as 0). A q of subnormal values times
 * keys near 1e38 gives logits near 1; under DAZ they would be 0. Both
 * kernels (decode, Lq <= 8, and tiled), against the reference. */
static void test_subnormal_inputs_read(void **state)
{
    (void)state;
    for (int c = 0; c < 2; c++) {
        const int Lq = c == 0 ? 3 : 20, Lk = 24, H = 2, D = 8;
        fixture f;
        setup_qkv(&f, PA_SCHEME_NONE, Lq, Lk, H, H, D, 0, 5150 + (uint64_t)c);
        for (int i = 0; i < Lq * H * D; i++)
            f.q[i] = (i % D == 0) ? (float)(1e-39 * (1 + i % 5)) : 0.0f; /* subnormal */
        for (int j = 0; j < Lk * H * D; j++)
            f.k[j] = (j % D == 0) ? (float)(1e38 * (0.5 + 0.02 * (j % 7))) : 1.0f;
        assert_true(fpclassify(f.q[0]) == FP_SUBNORMAL);
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        fixture_free(&f);
    }
}
#endif

/* pa_attention_run re-validates, refuses a small workspace, and leaves the
 * outputs untouched on error. */
static void test_run_errors(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    float out[4 * 2 * 2];
    pa_attention_out o = {.output = out};
    setup_qkv(&f, PA_SCHEME_NONE, 4, 4, 2, 2, 2, 0, 1100);
    size_t wsz = pa_attention_workspace_size(&f.a);
    char *ws = tu_alloc(wsz + 1, 1);
    for (size_t i = 0; i < 16; i++)
        out[i] = 42.0f;
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz - 1, &err), PA_STATUS_WORKSPACE_TOO_SMALL,
                     &err);
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, NULL, 0, &err), PA_STATUS_WORKSPACE_TOO_SMALL,
                     &err);
    f.a.num_kv_heads = 3;
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_SHAPE_MISMATCH, &err);
    for (size_t i = 0; i < 16; i++)
        assert_true(out[i] == 42.0f);
    f.a.num_kv_heads = 2;
    o.output = NULL;
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_INVALID_ARGUMENT, &err);
    assert_string_equal(err.field, "output");
    /* An unaligned workspace still works (the library aligns it). */
    o.output = out;
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws + 1, wsz, &err), PA_STATUS_OK, &err);
    free(ws);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_scheme_qkv),
        cmocka_unit_test(test_each_scheme_layer),
        cmocka_unit_test(test_multi_tile),
        cmocka_unit_test(test_t5_far_positions),
        cmocka_unit_test(test_rope_variants),
        cmocka_unit_test(test_masks_and_positions),
        cmocka_unit_test(test_causal_bottom_right),
        cmocka_unit_test(test_fully_masked_rows),
        cmocka_unit_test(test_edge_shapes),
        cmocka_unit_test(test_gqa_equals_repeated_mha),
        cmocka_unit_test(test_workspace_bound),
        cmocka_unit_test(test_parts_equal_whole),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_run_errors),
        cmocka_unit_test(test_overflowing_results),
#if defined(__x86_64__) && defined(__GNUC__)
        cmocka_unit_test(test_fp_state_restored),
        cmocka_unit_test(test_subnormal_inputs_read),
#endif
        cmocka_unit_test(test_overflowing_logits),
    };
    return cmocka_run_group_tests_name("attention", tests, NULL, NULL);
}
