/* test_attention_mask.c - what lib/attention_mask.c applies to each tile of
 * logits, against the double-precision reference in tests/ref_attention.c:
 * softcap, chunk_size, the caller's mask and bias, the causal and window
 * boundaries with unsorted positions, and the relative schemes' biases over
 * several key tiles; each with every scheme, GQA, Lq != Lk, tiles the masks
 * hide whole and fully masked rows.
 *
 * Tolerance as tests/lib/attention_fixture.h: |got - want| <= 2e-5 +
 * 1e-4 |want|. Each case is also built so that the mistake a careless hand
 * would make (softcap after the bias, the mask's polarity, a chunk boundary
 * off by one) moves the answer well past that.
 */
#include "attention_fixture.h"
#include "ref_attention.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* softcap                                                                   */
/* ------------------------------------------------------------------------- */

/* Logits up to ~4 (inputs in [-2, 2], D = 8) against a cap of 1.5: the cap
 * bends most of them. T5's table and ALiBi's slopes are large enough that
 * capping after the position bias gives other weights. */
static void test_softcap_each_scheme(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
        for (int causal = 0; causal < 2; causal++) {
            fixture f;
            setup_qkv(&f, qkv_schemes[s], 7, 11, 4, 2, 8, 6, 3100 + s);
            add_tables(&f, 4, 8, 6, s);
            for (size_t i = 0; i < (size_t)7 * 4 * 8; i++)
                f.q[i] *= 2.0f;
            f.a.causal = causal;
            f.a.softcap = 1.5f;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
    }
}

/* softcap(l) stays within (-c, c) for content logits, however large. */
static void test_softcap_bounds_logits(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    setup_qkv(&f, PA_SCHEME_NONE, 5, 9, 2, 2, 4, 0, 3110);
    for (size_t i = 0; i < (size_t)5 * 2 * 4; i++)
        f.q[i] *= 40.0f;
    f.a.softcap = 3.0f;
    size_t nw = (size_t)2 * 5 * 9, wsz = pa_attention_workspace_size(&f.a);
    float out[5 * 2 * 4], *logits = tu_alloc(nw, sizeof(float));
    void *ws = tu_alloc(wsz, 1);
    pa_attention_out o = {.output = out, .logits = logits};
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    double big = 0;
    for (size_t i = 0; i < nw; i++) {
        assert_true(fabsf(logits[i]) <= 3.0f);
        big = fmax(big, fabs(logits[i]));
    }
    assert_true(big > 2.9); /* some were far past the cap before it */
    check_against_reference(&f.a, WANT_ALL);
    free(logits);
    free(ws);
    fixture_free(&f);
}

/* ------------------------------------------------------------------------- */
/* chunk_size                                                                */
/* ------------------------------------------------------------------------- */

/* Chunks by floor(pos / C): negative positions, ordered and unordered
 * positions (the kernel's two paths), with and without causal and a window;
 * keys on both sides of every chunk boundary. */
static void test_chunk_positions(void **state)
{
    (void)state;
    int32_t qpos[6] = {-4, -1, 0, 2, 5, 3}, kpos[9] = {-6, -4, -3, -1, 0, 1, 2, 3, 6};
    int32_t kpos_unordered[9] = {3, -4, 6, 0, -1, 2, -6, 1, -3};
    for (int v = 0; v < 5; v++) {
        fixture f;
        setup_qkv(&f, v == 3 ? PA_SCHEME_T5 : PA_SCHEME_ROPE, 6, 9, 2, 1, 8, 0, 3300 + v);
        add_tables(&f, 2, 8, 8, v);
        f.a.chunk_size = 3;
        f.a.q_positions = qpos;
        f.a.k_positions = v == 2 || v == 4 ? kpos_unordered : kpos;
        f.a.causal = v >= 1 && v <= 3;
        f.a.window = v == 3 ? 2 : 0;
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);
    }
}

/* Default positions (token order) over several tiles, causal and not: a
 * chunk of C keys spans tiles, and tiles outside a query block's chunks
 * are skipped. Weights across a chunk boundary are exactly 0. */
static void test_chunk_tiles(void **state)
{
    (void)state;
    for (int causal = 0; causal < 2; causal++) {
        fixture f;
        float *out, *w;
        setup_qkv(&f, PA_SCHEME_NONE, 600, 600, 2, 1, 8, 0, 3310 + causal);
        f.a.causal = causal;
        f.a.chunk_size = 100;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        w = run_weights(&f.a, &out);
        /* query 199 (chunk 1) sees keys 100..199 (..199 causal) only */
        assert_true(w[(size_t)199 * 600 + 99] == 0.0f);
        assert_true(w[(size_t)199 * 600 + 100] > 0.0f);
        assert_true(w[(size_t)199 * 600 + 200] == 0.0f);
        assert_true((w[(size_t)150 * 600 + 199] > 0.0f) == !causal);
        free(out);
        free(w);
        fixture_free(&f);
    }
}

/* ------------------------------------------------------------------------- */
/* mask                                                                      */
/* ------------------------------------------------------------------------- */

static void test_mask_shared_and_per_head(void **state)
{
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 3400);
    for (int heads = 1; heads <= 4; heads += 3) {
        for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
            fixture f;
            uint8_t *mask = rand_mask(&r, (size_t)heads * 7 * 10, 0.6);
            setup_qkv(&f, qkv_schemes[s], 7, 10, 4, 2, 8, 0, 3401 + s);
            add_tables(&f, 4, 8, 8, s);
            f.a.mask = mask;
            f.a.mask_heads = heads;
            f.a.causal = s % 2 == 1;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
            free(mask);
        }
    }
}

/* Per-head masks on the tiled kernel (Lq > 8): each head sees its own band
 * of keys, [16 h, 16 h + 12), so a plane found at the wrong offset (a
 * stride of Lk instead of Lq Lk between heads) shows another head's band
 * and hides keys this one may see. */
static void test_mask_per_head_prefill(void **state)
{
    (void)state;
    enum { Lq = 40, Lk = 64, H = 4 };
    uint8_t *mask = tu_alloc((size_t)H * Lq * Lk, 1);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Lq; i++)
            for (int j = 0; j < Lk; j++)
                mask[((size_t)h * Lq + i) * Lk + j] = j >= 16 * h && j < 16 * h + 12;
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
        fixture f;
        float *out, *w;
        setup_qkv(&f, qkv_schemes[s], Lq, Lk, H, 2, 8, 0, 3450 + s);
        add_tables(&f, H, 8, 8, s);
        f.a.mask = mask;
        f.a.mask_heads = H;
        check_against_reference(&f.a, WANT_ALL);
        w = run_weights(&f.a, &out);
        /* head 3, query 30: its band only, and all of it */
        for (int j = 0; j < Lk; j++)
            assert_true((w[((size_t)3 * Lq + 30) * Lk + j] > 0.0f) == (j >= 48 && j < 60));
        free(out);
        free(w);
        fixture_free(&f);
    }
    free(mask);
}

/* 1 lets a query attend and 0 hides (SDPA's and ONNX's boolean masks): a
 * mask with one 1 per row puts all of the row's weight on that key. */
static void test_mask_polarity(void **state)
{
    (void)state;
    fixture f;
    uint8_t mask[3 * 4] = {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    float *out, *w;
    setup_qkv(&f, PA_SCHEME_ALIBI, 3, 4, 1, 1, 4, 0, 3410);
    f.a.mask = mask;
    f.a.mask_heads = 1;
    w = run_weights(&f.a, &out);
    assert_true(w[2] == 1.0f && w[0] == 0.0f && w[1] == 0.0f && w[3] == 0.0f);
    assert_true(w[4] == 1.0f);
    for (int j = 0; j < 4; j++)
        assert_true(w[8 + j] == 0.0f); /* a fully masked row */
    for (int d = 0; d < 4; d++) {
        assert_true(out[d] == f.v[2 * 4 + d]);
        assert_true(out[8 + d] == 0.0f);
    }
    free(out);
    free(w);
    check_against_reference(&f.a, WANT_ALL);
    fixture_free(&f);
}

/* A document mask (block diagonal, documents of 150 tokens) over 600 keys:
 * whole tiles are hidden from each query block, and the kernel skips them. */
static void test_mask_document_tiles(void **state)
{
    (void)state;
    const int L = 600, doc = 150;
    uint8_t *mask = tu_alloc((size_t)L * L, 1);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++)
            mask[(size_t)i * L + j] = i / doc == j / doc;
    for (int causal = 0; causal < 2; causal++) {
        fixture f;
        setup_qkv(&f, PA_SCHEME_ROPE, L, L, 2, 2, 8, 0, 3420 + causal);
        f.a.mask = mask;
        f.a.mask_heads = 1;
        f.a.causal = causal;
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        fixture_free(&f);
    }
    free(mask);
}

/* ------------------------------------------------------------------------- */
/* bias                                                                      */
/* ------------------------------------------------------------------------- */

/* A bias [H, Lq, Lk] or [1, Lq, Lk] with -inf entries (which hide their
 * keys), added after softcap: with a cap of 1 and a bias up to 3, adding
 * it before the cap would flatten it. */
static void test_bias(void **state)
{
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 3500);
    for (int heads = 1; heads <= 4; heads += 3) {
        for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++) {
            fixture f;
            size_t n = (size_t)heads * 5 * 12;
            float *bias = rand_tensor(&r, n, -3, 3);
            for (size_t i = 0; i < n; i += 7)
                bias[i] = -INFINITY;
            setup_qkv(&f, qkv_schemes[s], 5, 12, 4, 4, 8, 0, 3501 + s);
            add_tables(&f, 4, 8, 8, s);
            f.a.bias = bias;
            f.a.bias_heads = heads;
            f.a.softcap = heads == 4 ? 1.0f : 0.0f;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
            free(bias);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Boundaries and relative biases over tiles                                 */
/* ------------------------------------------------------------------------- */

/* Unsorted positions (the tiles are trimmed by walking in from both ends,
 * not by binary search): a tile whose one visible key sits at its edge at
 * exactly the causal boundary (kpos == the largest qpos), and a window's
 * key exactly W away (hidden) beside one W-1 away (visible), both kernels. */
static void test_unsorted_boundaries(void **state)
{
    (void)state;
    for (int c = 0; c < 4; c++) {
        fixture f;
        const int Lq = c % 2 ? 1 : 12; /* decode kernel, tiled kernel */
        int32_t qpos[12], kpos[5];
        static const int32_t causal_k[5] = {9, 8, 7, 6, 3}, window_k[5] = {7, 30, 25, 14, 6};
        setup_qkv(&f, PA_SCHEME_NONE, Lq, 5, 2, 2, 8, 0, 4600 + (uint64_t)c);
        for (int i = 0; i < Lq; i++)
            qpos[i] = c < 2 ? 3 - (i % 2) * 5 : 10 - (i % 2) * 20;
        memcpy(kpos, c < 2 ? causal_k : window_k, sizeof kpos);
        f.a.q_positions = qpos;
        f.a.k_positions = kpos;
        f.a.causal = c < 2;
        f.a.window = c < 2 ? 0 : 4;
        check_against_reference(&f.a, c % 2 ? 0 : WANT_WEIGHTS);
        fixture_free(&f);
    }
}

/* The biases by relative position (Shaw's logits and values, T5, ALiBi
 * both ways) over several key tiles, with consecutive positions (the runs
 * of lib/bias_row.c), spaced ones and shuffled ones, near and past each
 * scheme's clipping distance. */
static void test_relative_biases(void **state)
{
    (void)state;
    const int Lq = 70, Lk = 600, H = 4, D = 8;
    int32_t qpos[70], kpos[600];
    for (int c = 0; c < 4; c++) {
        for (int layout = 0; layout < 3; layout++) {
            fixture f;
            const pa_scheme_type t = c == 0   ? PA_SCHEME_SHAW
                                     : c == 1 ? PA_SCHEME_T5
                                              : PA_SCHEME_ALIBI;
            setup_qkv(&f, t, Lq, Lk, H, 2, D, 0, 4400 + (uint64_t)(10 * c + layout));
            if (t == PA_SCHEME_SHAW)
                f.scheme.shaw.max_relative_position = 3;
            if (t == PA_SCHEME_T5) {
                f.scheme.t5.num_buckets = 8;
                f.scheme.t5.max_distance = 20;
            }
            add_tables(&f, H, D, D, 4500 + (uint64_t)c);
            f.scheme.alibi.symmetric = c == 3;
            for (int i = 0; i < Lq; i++)
                qpos[i] = 17 * i + 3;
            for (int j = 0; j < Lk; j++)
                kpos[j] = layout == 0 ? j + 5 : layout == 1 ? 2 * j : (j * 257) % Lk;
            f.a.q_positions = qpos;
            f.a.k_positions = kpos;
            f.a.causal = c == 2; /* ALiBi's causal form; the others both ways */
            check_against_reference(&f.a, WANT_WEIGHTS);
            fixture_free(&f);
        }
    }
}

/* Query positions past 2^30 with key positions past -2^30: the distance
 * (more than 2^31) does not fit int32, and the biases take the wide path
 * (lib/attention.c's pos_small is false by the queries alone; the keys
 * are within 2^30), against the reference: Shaw's clipping and T5's bucket
 * of a positive distance, and ALiBi's logits (a wrapped distance flips the
 * bias's sign). */
static void test_relative_biases_far_queries(void **state)
{
    (void)state;
    enum { Lq = 12, Lk = 300, H = 2, D = 8 };
    int32_t qpos[Lq], kpos[Lk];
    for (int i = 0; i < Lq; i++)
        qpos[i] = (1 << 30) + (1 << 29) + 7 * i;
    for (int j = 0; j < Lk; j++)
        kpos[j] = -(1 << 30) + j;
    for (int c = 0; c < 3; c++) {
        fixture f;
        const pa_scheme_type t = c == 0 ? PA_SCHEME_SHAW : c == 1 ? PA_SCHEME_T5 : PA_SCHEME_ALIBI;
        setup_qkv(&f, t, Lq, Lk, H, 1, D, 0, 4600 + (uint64_t)c);
        if (t == PA_SCHEME_SHAW)
            f.scheme.shaw.max_relative_position = 3;
        add_tables(&f, H, D, D, 4610 + (uint64_t)c);
        f.a.q_positions = qpos;
        f.a.k_positions = kpos;
        if (t != PA_SCHEME_ALIBI) {
            check_against_reference(&f.a, WANT_ALL);
        } else {
            /* ALiBi's biases of about -10^8 differ by less than float's
             * spacing there, so its weights say nothing; its logits (the
             * bias's sign and size) do, to float's relative precision. */
            const size_t n = (size_t)H * Lq * Lk;
            pa_attention_out o = {0};
            pa_error err;
            size_t wsz = pa_attention_workspace_size(&f.a);
            void *ws = tu_alloc(wsz, 1);
            double *rl = tu_alloc(n, sizeof(double)), *rout = tu_alloc((size_t)Lq * H * D, 8),
                   *rw = tu_alloc(n, sizeof(double));
            o.output = tu_alloc((size_t)Lq * H * D, sizeof(float));
            o.logits = tu_alloc(n, sizeof(float));
            TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
            ref_attention(&f.a, rout, rw, rl, NULL, NULL);
            TU_ASSERT_CLOSE(o.logits, rl, n, 0.0, 1e-6);
            free(o.output);
            free(o.logits);
            free(ws);
            free(rl);
            free(rout);
            free(rw);
        }
        fixture_free(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relative_biases_far_queries),
        cmocka_unit_test(test_softcap_each_scheme),
        cmocka_unit_test(test_softcap_bounds_logits),
        cmocka_unit_test(test_chunk_positions),
        cmocka_unit_test(test_chunk_tiles),
        cmocka_unit_test(test_mask_shared_and_per_head),
        cmocka_unit_test(test_mask_per_head_prefill),
        cmocka_unit_test(test_mask_polarity),
        cmocka_unit_test(test_mask_document_tiles),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_relative_biases),
        cmocka_unit_test(test_unsorted_boundaries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
