/* test_attention_qscale.c - the query scalings by position (lib/attention_qscale.c:
 * Llama 4's attention temperature tuning, Qwen-1's logn scaling) and the
 * RMSNorm variants (no weight, a weight offset) in lib/attention*.c.
 *
 * The factors are checked against literal values (computed once with
 * Python's math module, rounded to float32), so that each careless version
 * of a formula (no floor, p for p + 1, a log that is off by one, logn below
 * the training length, an offset left out) fails on a named position; and
 * everything against the double-precision reference in tests/ref_attention.c
 * with every scheme, mask, GQA, both kernels (decode: Lq <= 8, tiled:
 * longer), layer mode, split parts and split keys. Tolerance as
 * tests/lib/attention_fixture.h: |got - want| <= 2e-5 + 1e-4 |want|.
 */
#include "attention_fixture.h"
#include "ref_attention.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* q as attention sees it (out.q_rot) for a, tu_alloc'd [Lq, H, D]. */
static float *q_rot_of(const pa_attention *a)
{
    pa_error err;
    const int Lq = pa_attention_q_len(a), H = a->num_heads, D = a->head_dim;
    const int Dv = a->v_head_dim ? a->v_head_dim : D;
    pa_attention_out o = {0};
    size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    float *q_rot = tu_alloc((size_t)Lq * H * D, sizeof(float));
    o.output = tu_alloc((size_t)Lq * H * Dv, sizeof(float));
    o.q_rot = q_rot;
    TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    free(o.output);
    free(ws);
    return q_rot;
}

/* ------------------------------------------------------------------------- */
/* The factors                                                               */
/* ------------------------------------------------------------------------- */

/* q of ones (NoPE, no norm): q_rot holds each row's factor exactly. Both
 * kernels (Lq = 8: decode; Lq = 9: tiled) and every head of a GQA call. */
static void expect_factors(double floor_scale, double attn_scale, int32_t train_length,
                           const int32_t *pos, const float *want, int n)
{
    for (int pad = 0; pad < 2; pad++) {
        const int Lq = 8 + pad, H = 4, D = 3;
        fixture f;
        int32_t qpos[9];
        float *q_rot;
        setup_qkv(&f, PA_SCHEME_NONE, Lq, 5, H, 2, D, 0, 5000);
        for (size_t i = 0; i < (size_t)Lq * H * D; i++)
            f.q[i] = 1.0f;
        for (int i = 0; i < Lq; i++)
            qpos[i] = pos[i % n];
        f.a.q_positions = qpos;
        f.a.temperature_floor_scale = floor_scale;
        f.a.temperature_attn_scale = attn_scale;
        f.a.logn_train_length = train_length;
        q_rot = q_rot_of(&f.a);
        for (int i = 0; i < Lq; i++)
            for (int c = 0; c < H * D; c++)
                if (q_rot[(size_t)i * H * D + c] != want[i % n])
                    fail_msg("Lq=%d position %d: factor %.9g, want %.9g", Lq, (int)qpos[i],
                             (double)q_rot[(size_t)i * H * D + c], (double)want[i % n]);
        free(q_rot);
        fixture_free(&f);
    }
}

static void test_factors_exact(void **state)
{
    (void)state;
    /* floor_scale 4, attn_scale 0.5: log(floor((p + 1) / 4) + 1) * 0.5 + 1.
     * p = 0 and 2 give exactly 1 (no floor: 2 gives 1.28; a log of
     * floor + 2: 0 gives 1.35); p = 3 is the first step (p for p + 1: 1). */
    static const int32_t tp[] = {0, 2, 3, 6, 7, 11, 100};
    static const float tw[] = {1.0f,          1.0f,          1.3465735912f, 1.3465735912f,
                               1.5493061543f, 1.6931471825f, 2.6290483475f};
    /* Llama 4's defaults, 8192 and 0.1: 1 up to position 8190. */
    static const int32_t lp[] = {0, 8190, 8191, 16382, 16383, 100000};
    static const float lw[] = {1.0f,          1.0f,          1.0693147182f,
                               1.0693147182f, 1.1098612547f, 1.2564948797f};
    /* logn, train_length 8: 1 while p + 1 <= 8 (p = 6 and 7: logn below T
     * would give 0.94 and 1), then log(p + 1) / log(8) (p = 8: p + 1 > 8;
     * p > 8 would give 1). */
    static const int32_t np[] = {0, 6, 7, 8, 9, 63, 1000};
    static const float nw[] = {1.0f, 1.0f, 1.0f, 1.0566416979f, 1.1073093414f, 2.0f, 3.3224086761f};
    /* Both: their product, rounded once (p = 63: 16 steps of 4; 2 x
     * (log(17) * 0.5 + 1)). */
    static const int32_t bp[] = {5, 63};
    const float bw[] = {(float)(log(2.0) * 0.5 + 1.0), (float)(2.0 * (log(17.0) * 0.5 + 1.0))};

    expect_factors(4.0, 0.5, 0, tp, tw, 7);
    expect_factors(8192.0, 0.1, 0, lp, lw, 6);
    expect_factors(0.0, 0.0, 8, np, nw, 7);
    expect_factors(4.0, 0.5, 8, bp, bw, 2);
}

/* The factor is the double value rounded once; Hugging Face computes it in
 * float32 op by op. The two are within one float ulp of each other over
 * Llama 4's range (a million positions, Llama 4's defaults). */
static void test_factor_vs_float32_chain(void **state)
{
    (void)state;
    enum { N = 4000 };
    fixture f;
    int32_t *pos = tu_alloc(N, sizeof(int32_t));
    float *q_rot;
    int exact = 0;
    setup_qkv(&f, PA_SCHEME_NONE, N, 1, 1, 1, 1, 0, 5010);
    for (int i = 0; i < N; i++) {
        pos[i] = i * 257 + (i % 7) * 8191;
        f.q[i] = 1.0f;
    }
    f.a.q_positions = pos;
    f.a.temperature_floor_scale = 8192.0;
    f.a.temperature_attn_scale = 0.1;
    q_rot = q_rot_of(&f.a);
    for (int i = 0; i < N; i++) {
        const float p = (float)pos[i];
        const float hf = logf(floorf((p + 1.0f) / 8192.0f) + 1.0f) * 0.1f + 1.0f;
        const double want = log(floor(((double)pos[i] + 1.0) / 8192.0) + 1.0) * 0.1 + 1.0;
        assert_true(q_rot[i] == (float)want);
        assert_true(fabsf(q_rot[i] - hf) <= nextafterf(hf, 4.0f) - hf);
        exact += q_rot[i] == hf;
    }
    assert_true(exact > N / 2); /* mostly the same bits */
    free(q_rot);
    free(pos);
    fixture_free(&f);
}

/* ------------------------------------------------------------------------- */
/* Against the reference                                                     */
/* ------------------------------------------------------------------------- */

/* Each q/k/v scheme, GQA, decode and tiled shapes (a row past one tile of
 * keys), positions given and default, causal or not. Positions cross the
 * factors' steps so that rows differ by whole units. */
static void run_scaled_schemes(double floor_scale, double attn_scale, int32_t train_length,
                               uint64_t seed)
{
    static const int shapes[][2] = {{3, 11}, {8, 40}, {70, 300}};
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
        for (int sh = 0; sh < 3; sh++) {
            const int Lq = shapes[sh][0], Lk = shapes[sh][1];
            fixture f;
            int32_t qpos[70], kpos[300];
            setup_qkv(&f, qkv_schemes[s], Lq, Lk, 4, 2, 8, 0, seed + 10 * s + (uint64_t)sh);
            add_tables(&f, 4, 8, 8, s);
            for (int i = 0; i < Lq; i++)
                qpos[i] = 3 * i + 4 * (int)s;
            for (int j = 0; j < Lk; j++)
                kpos[j] = j;
            if ((s + (size_t)sh) % 2 == 0) {
                f.a.q_positions = qpos;
                f.a.k_positions = kpos;
            }
            f.a.causal = sh != 1;
            f.a.temperature_floor_scale = floor_scale;
            f.a.temperature_attn_scale = attn_scale;
            f.a.logn_train_length = train_length;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
    }
}

static void test_temperature_reference(void **state)
{
    (void)state;
    run_scaled_schemes(4.0, 0.5, 0, 5100);
    run_scaled_schemes(8192.0, 0.1, 0, 5200); /* Llama 4's: all 1 at these positions */
}

static void test_logn_reference(void **state)
{
    (void)state;
    run_scaled_schemes(0.0, 0.0, 6, 5300);
    run_scaled_schemes(2.0, 0.25, 20, 5400); /* both */
}

/* Every mask and option with both scalings and both norm variants (q with
 * a weight and an offset, k without a weight), rope and ALiBi, decode and
 * tiled; parts that split the heads write what one run writes, bit for
 * bit; parts that split the keys agree to rounding, part 0's q_rot bit for
 * bit. */
static void test_with_every_option(void **state)
{
    (void)state;
    static const int shapes[][2] = {{5, 60}, {130, 300}};
    for (int sh = 0; sh < 2; sh++) {
        const int Lq = shapes[sh][0], Lk = shapes[sh][1], H = 4, Hkv = 2, D = 8;
        const pa_scheme_type type = sh == 0 ? PA_SCHEME_ROPE : PA_SCHEME_ALIBI;
        tu_rng r;
        fixture f;
        pa_error err;
        float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f}, qw[8];
        int32_t *qpos = tu_alloc((size_t)Lq, sizeof(int32_t));
        int32_t *kpos = tu_alloc((size_t)Lk, sizeof(int32_t));
        uint8_t *mask;
        float *bias;
        tu_rng_seed(&r, 5500 + (uint64_t)sh);
        mask = rand_mask(&r, (size_t)H * Lq * Lk, 0.8);
        bias = rand_tensor(&r, (size_t)Lq * Lk, -1, 1);
        for (int d = 0; d < D; d++)
            qw[d] = (float)tu_uniform(&r, -0.5, 0.5); /* stored as weight - 1 */
        for (int i = 0; i < Lq; i++)
            qpos[i] = (i * 37) % 200 + 50;
        for (int j = 0; j < Lk; j++)
            kpos[j] = j;
        setup_qkv(&f, type, Lq, Lk, H, Hkv, D, 0, 5510 + (uint64_t)sh);
        f.a.q_positions = qpos;
        f.a.k_positions = kpos;
        f.a.causal = true;
        f.a.window = 120;
        f.a.key_length = Lk - 20;
        f.a.softcap = 2.0f;
        f.a.sinks = sinks;
        f.a.chunk_size = sh == 0 ? 128 : 64;
        f.a.mask = mask;
        f.a.mask_heads = H;
        f.a.bias = bias;
        f.a.bias_heads = 1;
        f.a.q_norm = qw;
        f.a.q_norm_len = D;
        f.a.q_norm_eps = 1e-6f;
        f.a.q_norm_offset = 1.0f;
        f.a.k_norm_unweighted = true;
        f.a.k_norm_eps = 1e-5f;
        f.a.temperature_floor_scale = 16.0;
        f.a.temperature_attn_scale = 0.3;
        f.a.logn_train_length = 100;
        check_against_reference(&f.a, WANT_ALL);

        size_t nout = (size_t)Lq * H * D, nw = (size_t)H * Lq * Lk, nq = nout;
        size_t wsz = pa_attention_workspace_size(&f.a);
        void *ws = tu_alloc(wsz, 1);
        pa_attention_out whole = {.output = tu_alloc(nout, 4),
                                  .weights = tu_alloc(nw, 4),
                                  .logits = tu_alloc(nw, 4),
                                  .q_rot = tu_alloc(nq, 4)};
        pa_attention_out parts = {.output = tu_alloc(nout, 4),
                                  .weights = tu_alloc(nw, 4),
                                  .logits = tu_alloc(nw, 4),
                                  .q_rot = tu_alloc(nq, 4)};
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &whole, ws, wsz, &err), PA_STATUS_OK, &err);
        for (int i = 0; i < 3; i++)
            TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &parts, i, 3, ws, wsz, &err), PA_STATUS_OK,
                             &err);
        assert_memory_equal(parts.output, whole.output, nout * 4);
        assert_memory_equal(parts.weights, whole.weights, nw * 4);
        assert_memory_equal(parts.logits, whole.logits, nw * 4);
        assert_memory_equal(parts.q_rot, whole.q_rot, nq * 4);

        size_t psz = pa_attention_partials_size(&f.a, &parts, 3);
        if (sh == 0) { /* decode: split the keys */
            void *partials = tu_alloc(psz, 1);
            double *want = tu_alloc(nout, sizeof(double));
            assert_true(psz > 0);
            memset(parts.q_rot, 0, nq * 4);
            for (int i = 2; i >= 0; i--)
                TU_ASSERT_STATUS(pa_attention_run_keys(&f.a, &parts, i, 3, partials, ws, wsz, &err),
                                 PA_STATUS_OK, &err);
            TU_ASSERT_STATUS(pa_attention_merge(&f.a, &parts, 3, partials, &err), PA_STATUS_OK,
                             &err);
            for (size_t i = 0; i < nout; i++)
                want[i] = whole.output[i];
            TU_ASSERT_CLOSE(parts.output, want, nout, 1e-6, 1e-5);
            assert_memory_equal(parts.q_rot, whole.q_rot, nq * 4);
            free(want);
            free(partials);
        } else {
            assert_true(psz == 0);
        }
        free(whole.output);
        free(whole.weights);
        free(whole.logits);
        free(whole.q_rot);
        free(parts.output);
        free(parts.weights);
        free(parts.logits);
        free(parts.q_rot);
        free(ws);
        fixture_free(&f);
        free(qpos);
        free(kpos);
        free(mask);
        free(bias);
    }
}

/* Layer mode (one sequence: q positions are the tokens'), with w_o, given
 * positions and the defaults, absolute schemes too. */
static void test_layer_mode(void **state)
{
    (void)state;
    static const pa_scheme_type types[] = {PA_SCHEME_NONE, PA_SCHEME_SINUSOIDAL, PA_SCHEME_ROPE,
                                           PA_SCHEME_ALIBI};
    int32_t pos[20];
    for (int i = 0; i < 20; i++)
        pos[i] = 5 * i + 1;
    for (size_t s = 0; s < sizeof types / sizeof types[0]; s++) {
        for (int given = 0; given < 2; given++) {
            fixture f;
            setup_layer(&f, types[s], given ? 20 : 6, 12, 4, 2, 4, 0, s % 2 ? 5 : 0,
                        5600 + 2 * s + (uint64_t)given);
            f.a.k_positions = given ? pos : NULL;
            f.a.causal = true;
            f.a.temperature_floor_scale = 3.0;
            f.a.temperature_attn_scale = 0.75;
            f.a.logn_train_length = given ? 30 : 3;
            f.a.q_norm_unweighted = s == 2;
            f.a.q_norm_eps = 1e-6f;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
    }
}

/* k_prerotated: the scalings touch q only, so keys the library rotated
 * itself, given back as k, give the same answer bit for bit. */
static void test_k_prerotated(void **state)
{
    (void)state;
    static const int shapes[][2] = {{2, 33}, {20, 40}};
    for (int sh = 0; sh < 2; sh++) {
        const int Lq = shapes[sh][0], Lk = shapes[sh][1], H = 4, Hkv = 2, D = 16;
        const size_t nout = (size_t)Lq * H * D, nk = (size_t)Lk * Hkv * D;
        fixture f;
        pa_error err;
        setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, H, Hkv, D, 0, 5700 + (uint64_t)sh);
        f.a.causal = true;
        f.a.temperature_floor_scale = 4.0;
        f.a.temperature_attn_scale = 0.5;
        f.a.logn_train_length = 10;
        size_t wsz = pa_attention_workspace_size(&f.a);
        void *ws = tu_alloc(wsz, 1);
        pa_attention_out a = {.output = tu_alloc(nout, 4), .k_rot = tu_alloc(nk, 4)};
        pa_attention_out b = {.output = tu_alloc(nout, 4)};
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &a, ws, wsz, &err), PA_STATUS_OK, &err);
        pa_attention pre = f.a;
        pre.k = a.k_rot;
        pre.k_prerotated = true;
        TU_ASSERT_STATUS(pa_attention_run(&pre, &b, ws, wsz, &err), PA_STATUS_OK, &err);
        assert_memory_equal(a.output, b.output, nout * 4);
        free(a.output);
        free(a.k_rot);
        free(b.output);
        free(ws);
        fixture_free(&f);
    }
}

/* ------------------------------------------------------------------------- */
/* The norm variants                                                         */
/* ------------------------------------------------------------------------- */

/* Runs a and returns its q_rot and k_rot concatenated and its output. */
static float *rot_and_out(const pa_attention *a, size_t *n)
{
    pa_error err;
    const int Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a), H = a->num_heads;
    const int Hkv = a->num_kv_heads ? a->num_kv_heads : H, D = a->head_dim;
    const size_t nq = (size_t)Lq * H * D, nk = (size_t)Lk * Hkv * D;
    size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    float *all = tu_alloc(2 * nq + nk, sizeof(float));
    pa_attention_out o = {.q_rot = all, .k_rot = all + nq, .output = all + nq + nk};
    TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    free(ws);
    *n = 2 * nq + nk;
    return all;
}

/* Without a weight, against the reference (every scheme, GQA, a large eps
 * that matters); and bit for bit the norm with a weight of ones. With an
 * offset: the reference, and bit for bit the weight w + offset passed as
 * the weight (per head and whole projection); Gemma's zero-initialised
 * weight with offset 1 is the weightless norm. */
static void test_norm_variants(void **state)
{
    (void)state;
    const int H = 4, Hkv = 2, D = 8;
    tu_rng r;
    float ones[32], w[32], w1[32], zeros[32];
    tu_rng_seed(&r, 5800);
    for (int i = 0; i < 32; i++) {
        ones[i] = 1.0f;
        zeros[i] = 0.0f;
        w[i] = (float)tu_uniform(&r, -0.9, 0.9);
        w1[i] = w[i] + 1.0f;
    }
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
        for (int sh = 0; sh < 2; sh++) {
            fixture f;
            float *x, *y;
            size_t n, m;
            setup_qkv(&f, qkv_schemes[s], sh ? 20 : 4, 9, H, Hkv, D, 0, 5801 + 2 * s + sh);
            add_tables(&f, H, D, D, s);
            for (size_t i = 0; i < (size_t)9 * Hkv * D; i++)
                f.k[i] *= (float)(1 + i % 5);
            f.a.causal = s % 2 == 0;
            f.a.q_norm_unweighted = true;
            f.a.q_norm_eps = 1e-6f;
            f.a.k_norm_unweighted = true;
            f.a.k_norm_eps = 0.25f;
            check_against_reference(&f.a, WANT_ALL);
            x = rot_and_out(&f.a, &n);
            f.a.q_norm_unweighted = f.a.k_norm_unweighted = false;
            f.a.q_norm = f.a.k_norm = ones;
            f.a.q_norm_len = f.a.k_norm_len = D;
            y = rot_and_out(&f.a, &m);
            assert_memory_equal(x, y, n * sizeof(float));
            free(y);
            f.a.q_norm = f.a.k_norm = zeros; /* Gemma's init, stored as weight - 1 */
            f.a.q_norm_offset = f.a.k_norm_offset = 1.0f;
            y = rot_and_out(&f.a, &m);
            assert_memory_equal(x, y, n * sizeof(float));
            free(y);
            free(x);

            for (int whole = 0; whole < 2; whole++) {
                f.a.q_norm = f.a.k_norm = w;
                f.a.q_norm_len = whole ? H * D : D;
                f.a.k_norm_len = whole ? Hkv * D : D;
                f.a.q_norm_offset = f.a.k_norm_offset = 1.0f;
                check_against_reference(&f.a, WANT_ALL);
                x = rot_and_out(&f.a, &n);
                f.a.q_norm = f.a.k_norm = w1;
                f.a.q_norm_offset = f.a.k_norm_offset = 0.0f;
                y = rot_and_out(&f.a, &m);
                assert_memory_equal(x, y, n * sizeof(float));
                free(y);
                /* The offset is read: without it, another answer. */
                f.a.q_norm = f.a.k_norm = w;
                y = rot_and_out(&f.a, &m);
                assert_true(memcmp(x, y, n * sizeof(float)) != 0);
                free(y);
                free(x);
            }
            fixture_free(&f);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Decomposition and errors                                                  */
/* ------------------------------------------------------------------------- */

/* NoPE with temperature tuning: content is the logits without the scaling,
 * position = (factor - 1) * content; rope: content + position = logits. */
static void test_decomposition(void **state)
{
    (void)state;
    const int L = 12, H = 2, D = 4;
    const size_t n = (size_t)H * L * L;
    for (int s = 0; s < 2; s++) {
        fixture f;
        pa_error err;
        float *c = tu_alloc(n, 4), *pp = tu_alloc(n, 4), *c0 = tu_alloc(n, 4);
        float *p0 = tu_alloc(n, 4);
        double *lg = tu_alloc(n, sizeof(double)), *sum = tu_alloc(n, sizeof(double));
        setup_qkv(&f, s ? PA_SCHEME_ROPE : PA_SCHEME_NONE, L, L, H, H, D, 0, 5900 + (uint64_t)s);
        size_t wsz = pa_decompose_workspace_size(&f.a);
        void *ws = tu_alloc(wsz, 1);
        pa_decomposition d0 = {.content = c0, .position = p0}, d = {.content = c, .position = pp};
        TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d0, ws, wsz, &err), PA_STATUS_OK, &err);
        f.a.temperature_floor_scale = 3.0;
        f.a.temperature_attn_scale = 1.0;
        wsz = pa_decompose_workspace_size(&f.a);
        free(ws);
        ws = tu_alloc(wsz, 1);
        TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, wsz, &err), PA_STATUS_OK, &err);
        assert_memory_equal(c, c0, n * 4);
        ref_attention(&f.a, NULL, NULL, lg, NULL, NULL);
        for (size_t i = 0; i < n; i++)
            sum[i] = (double)c[i] + pp[i];
        for (size_t i = 0; i < n; i++)
            assert_true(fabs(sum[i] - lg[i]) <= 1e-5 + 1e-4 * fabs(lg[i]));
        if (s == 0) {
            for (int h = 0; h < H; h++)
                for (int i = 0; i < L; i++) {
                    const double fac = log(floor((i + 1) / 3.0) + 1.0) + 1.0;
                    for (int j = 0; j < L; j++) {
                        const size_t k = ((size_t)h * L + i) * L + j;
                        assert_true(fabs(pp[k] - (fac - 1.0) * c[k]) <= 1e-5);
                    }
                }
        }
        free(ws);
        free(c);
        free(pp);
        free(c0);
        free(p0);
        free(lg);
        free(sum);
        fixture_free(&f);
    }
}

static void expect_error(const pa_attention *a, pa_status want, const char *field)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_attention_check(a, &err), want, &err);
    assert_string_equal(err.field, field);
    assert_true(strlen(err.message) > 0);
}

static void test_errors(void **state)
{
    (void)state;
    fixture f;
    int32_t qpos[2] = {3, -1}, rows[3 * 2] = {0, 1, 0, 1, 0, 1};
    float w[4] = {1, 1, 1, 1};
    setup_qkv(&f, PA_SCHEME_NONE, 2, 4, 2, 1, 4, 0, 6000);

    f.a.temperature_floor_scale = -1.0;
    f.a.temperature_attn_scale = 0.1;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "attn_temperature_tuning.floor_scale");
    f.a.temperature_floor_scale = NAN;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "attn_temperature_tuning.floor_scale");
    f.a.temperature_floor_scale = 0.0; /* attn_scale alone */
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "attn_temperature_tuning.floor_scale");
    f.a.temperature_floor_scale = 8192.0;
    f.a.temperature_attn_scale = 0.0;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "attn_temperature_tuning.attn_scale");
    f.a.temperature_attn_scale = INFINITY;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "attn_temperature_tuning.attn_scale");
    f.a.temperature_floor_scale = 1.0;
    f.a.temperature_attn_scale = 1e300; /* finite, its factor is not a float */
    expect_error(&f.a, PA_STATUS_OUT_OF_RANGE, "attn_temperature_tuning");
    f.a.temperature_floor_scale = 8192.0;
    f.a.temperature_attn_scale = 0.1;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.a.q_positions = qpos;
    expect_error(&f.a, PA_STATUS_OUT_OF_RANGE, "q_positions[1]");
    qpos[1] = 0;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.a.temperature_floor_scale = 0.0;
    f.a.temperature_attn_scale = 0.0;
    qpos[1] = -1; /* logn is defined there: 1 */
    f.a.logn_train_length = 4;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.a.logn_train_length = 1;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "logn_scaling.train_length");
    f.a.logn_train_length = -5;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "logn_scaling.train_length");
    f.a.logn_train_length = 0;
    f.a.q_positions = NULL;
    fixture_free(&f);

    /* Default positions below 0 (Lq > Lk) with temperature tuning. */
    setup_qkv(&f, PA_SCHEME_NONE, 4, 2, 1, 1, 4, 0, 6001);
    f.a.temperature_floor_scale = 8192.0;
    f.a.temperature_attn_scale = 0.1;
    expect_error(&f.a, PA_STATUS_OUT_OF_RANGE, "q_positions");
    fixture_free(&f);

    /* M-RoPE rows: refused, naming the option. */
    setup_qkv(&f, PA_SCHEME_ROPE, 2, 2, 1, 1, 8, 0, 6002);
    f.scheme.rope.mrope_section[0] = 2;
    f.scheme.rope.mrope_section[1] = 1;
    f.scheme.rope.mrope_section[2] = 1;
    f.a.q_mrope_positions = rows;
    f.a.k_mrope_positions = rows;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.a.logn_train_length = 2;
    expect_error(&f.a, PA_STATUS_UNSUPPORTED, "logn_scaling");
    f.a.temperature_floor_scale = 2.0;
    f.a.temperature_attn_scale = 0.1;
    expect_error(&f.a, PA_STATUS_UNSUPPORTED, "attn_temperature_tuning");
    f.a.q_mrope_positions = f.a.k_mrope_positions = NULL; /* mrope_section alone is fine */
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    fixture_free(&f);

    /* The norm variants. */
    setup_qkv(&f, PA_SCHEME_ROPE, 2, 3, 2, 2, 4, 0, 6003);
    f.a.q_norm_offset = 1.0f;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_norm.weight_offset");
    f.a.q_norm_unweighted = true;
    f.a.q_norm_eps = 1e-6f;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_norm.weight_offset");
    f.a.q_norm_offset = 0.0f;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.a.q_norm_eps = 0.0f;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_norm.eps");
    f.a.q_norm_eps = 1e-6f;
    f.a.q_norm = w;
    f.a.q_norm_len = 4;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_norm.weight");
    f.a.q_norm_unweighted = false;
    f.a.q_norm_offset = NAN;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_norm.weight_offset");
    f.a.q_norm_offset = 1.0f;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.a.k_norm_offset = -1.0f;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "k_norm.weight_offset");
    f.a.k_norm_offset = 0.0f;
    f.a.k_norm_unweighted = true;
    f.a.k_norm_eps = 1e-6f;
    f.a.k_prerotated = true; /* a cache holds keys after their norm */
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "k_norm");
    fixture_free(&f);

    /* The absolute schemes' four-way decomposition has no place for them. */
    static const char *const names[] = {"attn_temperature_tuning", "logn_scaling", "q_norm"};
    for (int i = 0; i < 3; i++) {
        pa_error err;
        setup_layer(&f, PA_SCHEME_SINUSOIDAL, 3, 4, 2, 2, 2, 0, 0, 6004);
        if (i == 0) {
            f.a.temperature_floor_scale = 2.0;
            f.a.temperature_attn_scale = 0.1;
        } else if (i == 1) {
            f.a.logn_train_length = 2;
        } else {
            f.a.q_norm_unweighted = true;
            f.a.q_norm_eps = 1e-6f;
        }
        size_t wsz = pa_decompose_workspace_size(&f.a), n = 2 * 3 * 3;
        void *ws = tu_alloc(wsz, 1);
        float *c = tu_alloc(n, 4), *pp = tu_alloc(n, 4);
        pa_decomposition d = {.content = c, .position = pp};
        TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, wsz, &err), PA_STATUS_UNSUPPORTED,
                         &err);
        assert_string_equal(err.field, names[i]);
        free(ws);
        free(c);
        free(pp);
        fixture_free(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_factors_exact),
        cmocka_unit_test(test_factor_vs_float32_chain),
        cmocka_unit_test(test_temperature_reference),
        cmocka_unit_test(test_logn_reference),
        cmocka_unit_test(test_with_every_option),
        cmocka_unit_test(test_layer_mode),
        cmocka_unit_test(test_k_prerotated),
        cmocka_unit_test(test_norm_variants),
        cmocka_unit_test(test_decomposition),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
