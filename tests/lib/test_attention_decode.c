/* test_attention_decode.c - the decode kernel (lib/attention_decode.c): a
 * few query rows against many keys, with every scheme and option, split by
 * query heads (pa_attention_run_part) and by keys (pa_attention_run_keys,
 * pa_attention_merge), against the double-precision reference
 * (tests/ref_attention.c) within the fixture's tolerance.
 *
 * Every case first asserts that the decode kernel takes it
 * (pa_attention_partials_size > 0), so none passes through the tiled kernel
 * by accident, and checks every result it returns (weights, logits, q_rot,
 * k_rot) besides the output, which asking for them leaves unchanged. make test runs this file
 * twice: with the AVX-512 kernels where the CPU has them, and with POSATTN_KERNEL=portable.
 * Where the AVX2 row kernels run (AVX2 and F16C, no AVX-512), they must give
 * the portable kernels' bits: test_avx2_is_portable runs this binary again
 * with POSATTN_KERNEL=portable and compares (float32, bf16 and f16 rows).
 */
#include "attention_fixture.h"
#include "cpu.h"
#include "ref_attention.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static size_t out_len(const pa_attention *a)
{
    return (size_t)ref_attention_out_len(a);
}

static void *workspace(const pa_attention *a, size_t *n)
{
    *n = pa_attention_workspace_size(a);
    assert_true(*n > 0);
    return tu_alloc(*n, 1);
}

/* The decode kernel takes *a when only the output is asked for. */
static void assert_decodes(const pa_attention *a)
{
    pa_attention_out o = {(float *)1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    assert_true(pa_attention_partials_size(a, &o, 2) > 0);
}

/* Output only, through pa_attention_run: the decode kernel. */
static float *run_output(const pa_attention *a)
{
    pa_error err;
    size_t wsz;
    void *ws = workspace(a, &wsz);
    pa_attention_out o = {
        tu_alloc(out_len(a), sizeof(float)), NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    free(ws);
    return o.output;
}

/* Output through nparts parts that split the keys, run in reverse order
 * (any order must do), then merged. */
static float *run_split(const pa_attention *a, int nparts)
{
    pa_error err;
    size_t wsz;
    void *ws = workspace(a, &wsz);
    pa_attention_out o = {
        tu_alloc(out_len(a), sizeof(float)), NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    size_t psz = pa_attention_partials_size(a, &o, nparts);
    void *partials;
    assert_true(psz > 0);
    partials = tu_alloc(psz, 1);
    for (int p = nparts - 1; p >= 0; p--)
        TU_ASSERT_STATUS(pa_attention_run_keys(a, &o, p, nparts, partials, ws, wsz, &err),
                         PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa_attention_merge(a, &o, nparts, partials, &err), PA_STATUS_OK, &err);
    free(partials);
    free(ws);
    return o.output;
}

static void assert_matches_reference(const float *got, const pa_attention *a)
{
    size_t n = out_len(a);
    size_t nw = (size_t)a->num_heads * pa_attention_q_len(a) * pa_attention_k_len(a);
    double *want = tu_alloc(n, sizeof(double)), *w = tu_alloc(nw, sizeof(double));
    double *l = tu_alloc(nw, sizeof(double));
    ref_attention(a, want, w, l, NULL, NULL);
    TU_ASSERT_CLOSE(got, want, n, ATOL, RTOL);
    free(want);
    free(w);
    free(l);
}

/* Every result (output, weights, logits, q_rot, k_rot) through nparts
 * parts that split the keys, against the reference. */
static void check_split_all(const pa_attention *a, int nparts)
{
    pa_error err;
    size_t wsz, psz;
    const int H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H, D = a->head_dim;
    const int Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    const size_t nout = out_len(a), nw = (size_t)H * Lq * Lk, nq = (size_t)Lq * H * D,
                 nk = (size_t)Lk * Hkv * D;
    void *ws = workspace(a, &wsz), *partials;
    pa_attention_out o = {tu_alloc(nout, 4),
                          tu_alloc(nw, 4),
                          tu_alloc(nw, 4),
                          tu_alloc(nq, 4),
                          tu_alloc(nk, 4),
                          tu_alloc((size_t)H * Lq, 4),
                          tu_alloc((size_t)H * Lq, 4),
                          tu_alloc((size_t)H * Lq, 4),
                          Lk / 3};
    double *re = tu_alloc((size_t)H * Lq, 8), *rd = tu_alloc((size_t)H * Lq, 8);
    double *rout = tu_alloc(nout, 8), *rw = tu_alloc(nw, 8), *rl = tu_alloc(nw, 8);
    double *rq = tu_alloc(nq, 8), *rk = tu_alloc(nk, 8);
    psz = pa_attention_partials_size(a, &o, nparts);
    assert_true(psz > 0);
    partials = tu_alloc(psz, 1);
    for (int p = nparts - 1; p >= 0; p--)
        TU_ASSERT_STATUS(pa_attention_run_keys(a, &o, p, nparts, partials, ws, wsz, &err),
                         PA_STATUS_OK, &err);
    TU_ASSERT_STATUS(pa_attention_merge(a, &o, nparts, partials, &err), PA_STATUS_OK, &err);
    ref_attention(a, rout, rw, rl, rq, rk);
    TU_ASSERT_CLOSE(o.output, rout, nout, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.weights, rw, nw, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.logits, rl, nw, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.q_rot, rq, nq, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.k_rot, rk, nk, ATOL, RTOL);
    /* The statistics merge across parts as the sums do. */
    ref_attention_stats(a, re, rd);
    TU_ASSERT_CLOSE(o.entropy, re, (size_t)H * Lq, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.distance, rd, (size_t)H * Lq, ATOL, RTOL);
    ref_attention_far_share(a, o.far_distance, rd);
    TU_ASSERT_CLOSE(o.far_share, rd, (size_t)H * Lq, ATOL, RTOL);
    free(o.far_share);
    free(o.entropy);
    free(o.distance);
    free(re);
    free(rd);
    free(o.output);
    free(o.weights);
    free(o.logits);
    free(o.q_rot);
    free(o.k_rot);
    free(rout);
    free(rw);
    free(rl);
    free(rq);
    free(rk);
    free(partials);
    free(ws);
}

/* The reference, one part (output alone, then every result, which gives
 * the same output bit for bit), and key splits over 2, 3 and 5 parts. */
static void check_all_ways(const pa_attention *a)
{
    float *got, *again;
    assert_decodes(a);
    got = run_output(a);
    assert_matches_reference(got, a);
    check_against_reference(a, WANT_ALL);
    {
        pa_error err;
        size_t wsz, nw = (size_t)a->num_heads * pa_attention_q_len(a) * pa_attention_k_len(a);
        void *ws = workspace(a, &wsz);
        pa_attention_out o = {
            tu_alloc(out_len(a), 4), tu_alloc(nw, 4), NULL, NULL, NULL, NULL, NULL, NULL, 0};
        TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
        again = o.output;
        assert_memory_equal(again, got, out_len(a) * sizeof(float));
        free(o.weights);
        free(ws);
    }
    free(again);
    free(got);
    for (int np = 2; np <= 5; np += np == 3 ? 2 : 1) {
        got = run_split(a, np);
        assert_matches_reference(got, a);
        free(got);
    }
    check_split_all(a, 3);
}

/* ------------------------------------------------------------------------- */

/* Each scheme, over lengths around the block of 64 keys, with multi-head,
 * grouped and multi-query heads and head sizes that are and are not
 * multiples of 16 floats (the vector tails). */
static void test_schemes_and_shapes(void **state)
{
    (void)state;
    static const pa_scheme_type types[] = {PA_SCHEME_NONE, PA_SCHEME_ROPE, PA_SCHEME_ALIBI,
                                           PA_SCHEME_T5};
    static const int lens[][2] = {{1, 1}, {1, 63}, {1, 64}, {1, 200}, {3, 130}, {8, 257}};
    static const int heads[][4] = {{4, 4, 16, 0}, {8, 2, 24, 40}, {6, 1, 8, 0}, {4, 2, 64, 0}};
    uint64_t seed = 100;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t s = 0; s < sizeof lens / sizeof *lens; s++)
            for (size_t h = 0; h < sizeof heads / sizeof *heads; h++) {
                fixture f;
                const int H = heads[h][0], Hkv = heads[h][1], D = heads[h][2], Dv = heads[h][3];
                setup_qkv(&f, types[t], lens[s][0], lens[s][1], H, Hkv, D, Dv, seed++);
                add_tables(&f, H, D, Dv, seed);
                f.a.causal = (s + h) % 2 == 0;
                check_all_ways(&f.a);
                fixture_free(&f);
            }
}

/* Every option the decode kernel takes, alone and together: window, chunk,
 * padding, sinks, softcap, the caller's mask and bias, q/k norms, positions
 * out of order. */
static void test_options(void **state)
{
    (void)state;
    const int Lq = 5, Lk = 300, H = 4, Hkv = 2, D = 16;
    float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f}, norm[2 * 16];
    int32_t qpos[5], kpos[300];
    tu_rng r;
    uint8_t *mask;
    float *bias;
    tu_rng_seed(&r, 77);
    mask = rand_mask(&r, (size_t)H * Lq * Lk, 0.7);
    bias = rand_tensor(&r, (size_t)H * Lq * Lk, -1, 1);
    for (int d = 0; d < 2 * D; d++)
        norm[d] = 0.5f + 0.05f * (float)d;
    for (int i = 0; i < Lq; i++)
        qpos[i] = 250 + 9 * i;
    for (int opt = 0; opt <= 10; opt++) {
        fixture f;
        setup_qkv(&f, opt % 2 ? PA_SCHEME_ROPE : PA_SCHEME_ALIBI, Lq, Lk, H, Hkv, D, 0,
                  200 + (uint64_t)opt);
        f.a.causal = true;
        f.a.q_positions = qpos;
        if (opt == 0 || opt == 10)
            f.a.window = 70;
        if (opt == 1 || opt == 10)
            f.a.chunk_size = 64;
        if (opt == 2 || opt == 10)
            f.a.key_length = 170;
        if (opt == 3 || opt == 10)
            f.a.sinks = sinks;
        if (opt == 4 || opt == 10)
            f.a.softcap = 1.5f;
        if (opt == 5 || opt == 10) {
            f.a.mask = mask;
            f.a.mask_heads = opt == 5 ? H : 1;
        }
        if (opt == 6 || opt == 10) {
            f.a.bias = bias;
            f.a.bias_heads = opt == 6 ? H : 1;
        }
        if (opt == 7 || opt == 10) { /* per head */
            f.a.q_norm = norm;
            f.a.q_norm_len = D;
            f.a.q_norm_eps = 1e-6f;
            f.a.k_norm = norm + 3;
            f.a.k_norm_len = D;
            f.a.k_norm_eps = 1e-5f;
        }
        if (opt == 8) { /* over the whole projection */
            f.a.k_norm = norm;
            f.a.k_norm_len = Hkv * D;
            f.a.k_norm_eps = 1e-6f;
        }
        if (opt == 9) { /* keys out of order, not causal */
            for (int j = 0; j < Lk; j++)
                kpos[j] = (j * 131) % Lk;
            f.a.k_positions = kpos;
            f.a.causal = false;
            f.a.window = 90;
        }
        check_all_ways(&f.a);
        fixture_free(&f);
    }
    free(mask);
    free(bias);
}

/* Keys kept already rotated (k_prerotated) give the answer of rotating them
 * here, bit for bit: the same rotation, applied earlier. */
static void test_k_prerotated(void **state)
{
    (void)state;
    const int Lq = 2, Lk = 150, H = 8, Hkv = 2, D = 32;
    fixture f;
    pa_error err;
    size_t wsz, nk = (size_t)Lk * Hkv * D;
    void *ws;
    float *plain, *pre;
    float *krot = tu_alloc(nk, sizeof(float)), *tmp;
    setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, H, Hkv, D, 0, 300);
    f.a.causal = true;
    ws = workspace(&f.a, &wsz);
    {
        /* k_rot, rotated by the decode kernel for every key */
        size_t nw = (size_t)H * Lq * Lk;
        pa_attention_out o = {
            tu_alloc(out_len(&f.a), 4), tu_alloc(nw, 4), NULL, NULL, krot, NULL, NULL, NULL, 0};
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
        free(o.output);
        free(o.weights);
    }
    plain = run_output(&f.a);
    tmp = f.k;
    f.a.k = krot;
    f.a.k_prerotated = true;
    check_all_ways(&f.a);
    pre = run_output(&f.a);
    assert_memory_equal(plain, pre, out_len(&f.a) * sizeof(float));
    free(pre);
    f.a.k = tmp; /* unrotated keys taken as rotated: another answer */
    pre = run_output(&f.a);
    assert_true(memcmp(plain, pre, out_len(&f.a) * sizeof(float)) != 0);
    free(pre);
    free(plain);
    free(krot);
    free(ws);
    fixture_free(&f);
}

/* Parts that split the query heads write exactly what one run writes, and
 * one part of a key split does too. */
static void test_parts_bit_identical(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    size_t wsz, n;
    void *ws;
    float *whole, *parts, *one;
    setup_qkv(&f, PA_SCHEME_ROPE, 3, 333, 8, 2, 24, 0, 400);
    f.a.causal = true;
    n = out_len(&f.a);
    ws = workspace(&f.a, &wsz);
    whole = run_output(&f.a);
    parts = tu_alloc(n, sizeof(float));
    for (int np = 2; np <= 9; np++) {
        pa_attention_out o = {parts, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        memset(parts, 0xff, n * sizeof(float));
        for (int p = 0; p < np; p++)
            TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &o, p, np, ws, wsz, &err), PA_STATUS_OK,
                             &err);
        assert_memory_equal(parts, whole, n * sizeof(float));
    }
    one = run_split(&f.a, 1);
    assert_memory_equal(one, whole, n * sizeof(float));
    free(one);
    free(parts);
    free(whole);
    free(ws);
    fixture_free(&f);
}

/* More parts than keys: some shares are empty (part 0's among them, which
 * still carries the sink). Rows whose every key is hidden answer zeros. */
static void test_empty_shares_and_hidden_rows(void **state)
{
    (void)state;
    float sinks[2] = {1.0f, -0.5f};
    for (int c = 0; c < 3; c++) {
        fixture f;
        float *got;
        setup_qkv(&f, PA_SCHEME_NONE, 2, 3, 2, 1, 16, 0, 500 + (uint64_t)c);
        if (c >= 1)
            f.a.sinks = sinks;
        if (c == 2)
            f.a.key_length = 0; /* nothing visible: zero rows, sink or not */
        assert_decodes(&f.a);
        for (int np = 1; np <= 7; np++) {
            got = run_split(&f.a, np);
            assert_matches_reference(got, &f.a);
            if (c == 2)
                for (size_t i = 0; i < out_len(&f.a); i++)
                    assert_true(got[i] == 0.0f);
            free(got);
        }
        fixture_free(&f);
    }
}

/* Finite inputs whose logits overflow: OUT_OF_RANGE, from the run and from
 * the merge of a key split. */
static void test_overflow(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    size_t wsz, psz;
    void *ws, *partials;
    setup_qkv(&f, PA_SCHEME_NONE, 1, 100, 2, 2, 16, 0, 600);
    f.q[3] = 3e38f;
    f.k[3 + 50 * 2 * 16] = 3e38f;
    ws = workspace(&f.a, &wsz);
    {
        pa_attention_out o = {
            tu_alloc(out_len(&f.a), 4), NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OUT_OF_RANGE, &err);
        assert_string_equal(err.field, "q");
        psz = pa_attention_partials_size(&f.a, &o, 2);
        partials = tu_alloc(psz, 1);
        for (int p = 0; p < 2; p++)
            TU_ASSERT_STATUS(pa_attention_run_keys(&f.a, &o, p, 2, partials, ws, wsz, &err),
                             PA_STATUS_OK, &err);
        TU_ASSERT_STATUS(pa_attention_merge(&f.a, &o, 2, partials, &err), PA_STATUS_OUT_OF_RANGE,
                         &err);
        free(partials);
        free(o.output);
    }
    free(ws);
    fixture_free(&f);
}

/* What the decode kernel does not take goes to the tiled kernel, and the
 * key split refuses it by name. */
static void test_not_split(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    float buf[4096], kr[4096];
    char ws[64];
    pa_attention_out plain = {buf, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    pa_attention_out weights = {buf, buf, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    pa_attention_out logits = {buf, NULL, buf, NULL, NULL, NULL, NULL, NULL, 0};
    pa_attention_out krot = {buf, NULL, NULL, NULL, kr, NULL, NULL, NULL, 0};

    setup_qkv(&f, PA_SCHEME_ROPE, 8, 20, 2, 2, 8, 0, 700);
    /* Whatever is returned: the kernel is chosen by shape. */
    assert_true(pa_attention_partials_size(&f.a, &plain, 2) > 0);
    assert_true(pa_attention_partials_size(&f.a, &weights, 2) > 0);
    assert_true(pa_attention_partials_size(&f.a, &logits, 2) > 0);
    assert_true(pa_attention_partials_size(&f.a, &krot, 2) > 0);
    TU_ASSERT_STATUS(pa_attention_run_keys(&f.a, &weights, 0, 2, buf, ws, sizeof ws, &err),
                     PA_STATUS_WORKSPACE_TOO_SMALL, &err);
    fixture_free(&f);

    setup_qkv(&f, PA_SCHEME_NONE, 9, 20, 2, 2, 8, 0, 701); /* 9 query rows */
    assert_true(pa_attention_partials_size(&f.a, &plain, 2) == 0);
    {
        size_t wsz;
        void *w = workspace(&f.a, &wsz);
        TU_ASSERT_STATUS(pa_attention_run_keys(&f.a, &plain, 0, 2, kr, w, wsz, &err),
                         PA_STATUS_UNSUPPORTED, &err);
        assert_string_equal(err.field, "part");
        TU_ASSERT_STATUS(pa_attention_merge(&f.a, &plain, 2, kr, &err), PA_STATUS_UNSUPPORTED,
                         &err);
        free(w);
    }
    fixture_free(&f);

    setup_qkv(&f, PA_SCHEME_SHAW, 2, 20, 2, 2, 8, 0, 702);
    f.scheme.shaw.max_relative_position = 4;
    add_tables(&f, 2, 8, 8, 702);
    assert_true(pa_attention_partials_size(&f.a, &plain, 2) == 0);
    check_against_reference(&f.a, 0); /* the tiled kernel, Lq = 2 */
    fixture_free(&f);

    setup_layer(&f, PA_SCHEME_ALIBI, 4, 8, 2, 2, 4, 0, 0, 703);
    assert_true(pa_attention_partials_size(&f.a, &plain, 1) == 0);
    check_against_reference(&f.a, 0); /* layer mode: the decode kernel, one part */
    fixture_free(&f);
}

/* The outputs of decode calls that reach every branch of the row kernels
 * (rows 1 to 5 per kv head, head dims with 8- and 1-column tails, zero
 * weights from masks), float32, bf16 and f16, one after the other in a
 * buffer of *n floats (tu_alloc'd). */
static float *path_outputs(size_t *n)
{
    static const int shapes[][6] = {
        /* Lq, Lk, H, Hkv, D, Dv */
        {1, 200, 8, 2, 128, 128}, {2, 150, 6, 2, 13, 7}, {5, 99, 2, 2, 40, 24},
        {3, 70, 4, 1, 9, 31},     {1, 64, 5, 5, 16, 8},
    };
    const size_t ns = sizeof shapes / sizeof shapes[0];
    float *all = NULL;
    *n = 0;
    for (size_t c = 0; c < ns; c++)
        for (int t = 0; t < 3; t++) {
            const int *sh = shapes[c];
            fixture f;
            tu_rng r;
            uint16_t *k16 = NULL, *v16 = NULL;
            uint8_t *mask;
            float *sinks;
            const size_t nk = (size_t)sh[1] * sh[3] * sh[4], nv = (size_t)sh[1] * sh[3] * sh[5];
            pa_attention_out o = {0};
            pa_error err;
            size_t wsz, no = (size_t)sh[0] * sh[2] * sh[5];
            void *ws;
            setup_qkv(&f, PA_SCHEME_ALIBI, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5],
                      800 + 3 * c + (size_t)t);
            tu_rng_seed(&r, 850 + c);
            mask = rand_mask(&r, (size_t)sh[0] * sh[1], 0.7);
            sinks = rand_tensor(&r, (size_t)sh[2], -1, 1);
            f.a.mask = mask;
            f.a.mask_heads = 1;
            f.a.sinks = sinks;
            f.a.causal = true;
            if (t > 0) { /* random patterns of magnitude below 2, some zero */
                f.a.kv_dtype = t == 1 ? PA_DTYPE_BF16 : PA_DTYPE_F16;
                k16 = tu_alloc(nk, sizeof(uint16_t));
                v16 = tu_alloc(nv, sizeof(uint16_t));
                for (size_t i = 0; i < nk + nv; i++) {
                    const uint16_t sign = tu_uniform(&r, 0, 1) < 0.5 ? 0x8000 : 0;
                    const uint16_t e = (uint16_t)(t == 1 ? 115 + tu_uniform(&r, 0, 13)
                                                         : 3 + tu_uniform(&r, 0, 13));
                    const uint16_t m = (uint16_t)tu_uniform(&r, 0, t == 1 ? 128 : 1024);
                    const uint16_t h = (uint16_t)(sign | (t == 1 ? e << 7 : e << 10) | m);
                    if (i < nk)
                        k16[i] = h;
                    else
                        v16[i - nk] = h;
                }
                f.a.k = (const float *)(const void *)k16;
                f.a.v = (const float *)(const void *)v16;
            }
            assert_decodes(&f.a);
            all = realloc(all, (*n + no) * sizeof(float));
            assert_non_null(all);
            o.output = all + *n;
            ws = workspace(&f.a, &wsz);
            TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
            *n += no;
            free(ws);
            free(mask);
            free(sinks);
            free(k16);
            free(v16);
            fixture_free(&f);
        }
    return all;
}

/* With the AVX2 row kernels (lib/cpu.h): the bits of the portable ones. */
static void test_avx2_is_portable(void **state)
{
    char path[] = "/tmp/posattn_paths_XXXXXX";
    size_t n, m;
    float *mine, *theirs;
    int fd, status;
    pid_t pid;
    FILE *fp;
    (void)state;
    if (pa__cpu_avx512() || !pa__cpu_avx2()) {
        print_message("the AVX2 row kernels do not run here (%s): nothing to compare\n",
                      pa_kernel_name());
        return;
    }
    mine = path_outputs(&n);
    fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("POSATTN_KERNEL", "portable", 1);
        execl("/proc/self/exe", "test_attention_decode", "--paths", path, (char *)NULL);
        _exit(127);
    }
    assert_true(waitpid(pid, &status, 0) == pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    theirs = tu_alloc(n, sizeof(float));
    fp = fopen(path, "rb");
    assert_non_null(fp);
    m = fread(theirs, sizeof(float), n, fp);
    fclose(fp);
    unlink(path);
    assert_int_equal(m, n);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&mine[i], &theirs[i], sizeof(float)) != 0)
            fail_msg("output value %zu: AVX2 %.9g, portable %.9g", i, (double)mine[i],
                     (double)theirs[i]);
    free(mine);
    free(theirs);
}

/* --paths FILE: path_outputs into FILE (test_avx2_is_portable's child). */
static int write_paths(const char *path)
{
    size_t n;
    float *x = path_outputs(&n);
    FILE *fp = fopen(path, "wb");
    const bool ok = fp != NULL && fwrite(x, sizeof(float), n, fp) == n;
    if (fp != NULL)
        fclose(fp);
    free(x);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schemes_and_shapes),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_k_prerotated),
        cmocka_unit_test(test_parts_bit_identical),
        cmocka_unit_test(test_empty_shares_and_hidden_rows),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_not_split),
        cmocka_unit_test(test_avx2_is_portable),
    };
    if (argc == 3 && strcmp(argv[1], "--paths") == 0)
        return write_paths(argv[2]);
    print_message("kernels: %s\n", pa_kernel_name());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
