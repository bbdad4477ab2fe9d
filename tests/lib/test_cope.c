/* test_cope.c - lib/cope.c and CoPE in attention: the checks, a hand case,
 * and attention against the double reference (tests/ref_cope.c, written
 * from facebookresearch/RAM's formula): causal self-attention, decode-sized
 * rows (Lq = 1, which the tiled kernel runs for cope), Lq != Lk with
 * explicit and out-of-order positions, GQA, shared and per-head pos_emb, a
 * small npos_max where the clamp bites, window, chunk, padding, the
 * caller's mask and -inf bias (all gate 0), nodiv, softcap, sinks,
 * returned weights, logits and row statistics; layer mode with q/k norms;
 * split into parts. */
#include "attention_fixture.h"
#include "internal.h" /* tests may reach inside lib/ */
#include "ref_cope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A cope scheme on f with random pos_emb [heads, npos, D] in [-1, 1]. */
static void cope_scheme(fixture *f, int npos, int heads, bool nodiv, uint64_t seed)
{
    tu_rng r;
    const int D = f->a.head_dim;
    tu_rng_seed(&r, seed);
    free(f->table);
    f->table = rand_tensor(&r, (size_t)heads * npos * D, -1, 1);
    f->scheme.cope.npos_max = npos;
    f->scheme.cope.pos_emb = f->table;
    f->scheme.cope.pos_emb_heads = heads;
    f->scheme.cope.nodiv = nodiv;
}

static void expect_refusal(const pa_attention *a, pa_status want, const char *field,
                           const char *message)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_attention_check(a, &err), want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, message) == NULL)
        fail_msg("message '%s' lacks '%s'", err.message, message);
}

static void test_check(void **state)
{
    (void)state;
    fixture f;
    pa_scheme_type t;
    setup_qkv(&f, PA_SCHEME_COPE, 4, 4, 4, 2, 8, 0, 1);
    /* Without pos_emb: required. */
    f.scheme.cope.npos_max = 5;
    expect_refusal(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.pos_emb",
                   "scheme.pos_emb is required");
    cope_scheme(&f, 5, 1, false, 2);
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    f.scheme.cope.npos_max = 1;
    expect_refusal(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.npos_max",
                   "scheme.npos_max=1 must be in [2,");
    f.scheme.cope.npos_max = PA_COPE_NPOS_MAX + 1;
    expect_refusal(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.npos_max", "must be in [2, 16777216]");
    f.scheme.cope.npos_max = 5;
    f.scheme.cope.pos_emb_heads = 3;
    expect_refusal(&f.a, PA_STATUS_SHAPE_MISMATCH, "scheme.pos_emb",
                   "scheme.pos_emb has 3 heads: 1 (shared) or num_heads=4");
    f.scheme.cope.pos_emb_heads = 1;
    f.scheme.cope.pos_emb_rows = 6;
    expect_refusal(&f.a, PA_STATUS_SHAPE_MISMATCH, "scheme.npos_max",
                   "scheme.npos_max=5 does not match scheme.pos_emb's 6 positions");
    f.scheme.cope.pos_emb_rows = 5;
    f.scheme.cope.pos_emb_cols = 7;
    expect_refusal(&f.a, PA_STATUS_SHAPE_MISMATCH, "scheme.pos_emb",
                   "rows of 7 values but head_dim=8");
    f.scheme.cope.pos_emb_cols = 8;
    f.table[2 * 8 + 3] = NAN;
    expect_refusal(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.pos_emb[0][2][3]", "is not finite");
    f.table[2 * 8 + 3] = INFINITY;
    expect_refusal(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.pos_emb[0][2][3]", "is not finite");
    f.table[2 * 8 + 3] = 0.5f;
    /* k_prerotated is rope's and xpos's. */
    f.a.k_prerotated = true;
    expect_refusal(&f.a, PA_STATUS_INVALID_ARGUMENT, "k_prerotated", "k_prerotated");
    f.a.k_prerotated = false;
    expect_refusal(&f.a, PA_STATUS_OK, "", "");
    fixture_free(&f);
    {
        pa_error err;
        pa_cope c = {0};
        TU_ASSERT_STATUS(pa_cope_check(NULL, 1, 1, &err), PA_STATUS_INVALID_ARGUMENT, &err);
        assert_string_equal(err.field, "scheme");
        TU_ASSERT_STATUS(pa_cope_check(&c, 0, 4, &err), PA_STATUS_INVALID_ARGUMENT, &err);
        assert_string_equal(err.field, "num_heads");
    }
    assert_string_equal(pa_scheme_type_name(PA_SCHEME_COPE), "cope");
    assert_true(pa_scheme_type_from_name("cope", &t) && t == PA_SCHEME_COPE);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_COPE), PA_POSITION_SITE_LOGITS);
}

/* Hand case: k = 0, so every gate is sigmoid(0) = 1/2 and the causal row
 * of query 3 counts positions 2, 1.5, 1, 0.5; q = e0 and E[f] = (f^2, 0..),
 * so q.E[f] = f^2 and the interpolation gives 4, 2.5, 1, 0.5. */
static void test_hand(void **state)
{
    (void)state;
    fixture f;
    const int L = 4, D = 2, npos = 4;
    float E[4 * 2] = {0, 0, 1, 0, 4, 0, 9, 0};
    float logits[4 * 4], out[4 * 2];
    pa_attention_out o = {0};
    pa_error err;
    size_t wsz;
    void *ws;
    const double want[2][4] = {{4, 2.5, 1, 0.5}, {4, 2.5, 1, 0.5}};
    setup_qkv(&f, PA_SCHEME_COPE, L, L, 1, 1, D, 0, 5);
    for (int i = 0; i < L * D; i++) {
        f.q[i] = i % D == 0 ? 1.0f : 0.0f;
        f.k[i] = 0.0f;
    }
    f.scheme.cope.npos_max = npos;
    f.scheme.cope.pos_emb = E;
    f.scheme.cope.pos_emb_heads = 1;
    f.a.causal = true;
    o.output = out;
    o.logits = logits;
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    for (int nodiv = 0; nodiv < 2; nodiv++) {
        const double s = nodiv ? 1.0 : 1.0 / sqrt(2.0);
        f.scheme.cope.nodiv = nodiv;
        TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
        for (int j = 0; j < L; j++)
            assert_true(fabs(logits[3 * L + j] - s * want[nodiv][j]) < 1e-5);
        /* Row 0 sees key 0 alone: position 1/2, term (0 + 1) / 2. */
        assert_true(fabs(logits[0] - s * 0.5) < 1e-6);
        assert_true(isinf(logits[1]) && logits[1] < 0);
    }
    /* npos_max 3: positions past 2 clamp, query 3's first key reads 4 there. */
    f.scheme.cope.npos_max = 3;
    f.scheme.cope.nodiv = true;
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    assert_true(fabs(logits[3 * L + 0] - 4.0) < 1e-6);
    assert_true(fabs(logits[3 * L + 1] - 2.5) < 1e-6);
    free(ws);
    f.table = NULL;
    fixture_free(&f);
}

/* The largest unclamped position of head h over the call's rows (default
 * positions and scale, causal or not, no other mask). */
static double max_position(const pa_attention *a, int h)
{
    const int Lq = a->q_len, Lk = a->k_len, D = a->head_dim, H = a->num_heads;
    const int Hkv = a->num_kv_heads ? a->num_kv_heads : H;
    double mx = 0;
    for (int i = 0; i < Lq; i++) {
        const float *qi = a->q + ((size_t)i * H + h) * D;
        double sum = 0;
        for (int j = 0; j < Lk; j++) {
            const float *kj = a->k + ((size_t)j * Hkv + h / (H / Hkv)) * D;
            double dot = 0;
            for (int d = 0; d < D; d++)
                dot += (double)qi[d] * kj[d];
            if (!a->causal || j <= i + (Lk - Lq))
                sum += 1.0 / (1.0 + exp(-dot / sqrt((double)D)));
        }
        mx = sum > mx ? sum : mx;
    }
    return mx;
}

/* Attention against the reference over shapes, masks, heads and tables. */
static void test_attention(void **state)
{
    (void)state;
    static const int shapes[][5] = {
        /* Lq, Lk, H, Hkv, D */
        {1, 1, 4, 4, 8},     {1, 200, 8, 2, 16}, {5, 300, 4, 1, 8},    {17, 17, 8, 4, 16},
        {70, 130, 4, 2, 32}, {3, 9, 2, 2, 5},    {130, 130, 2, 1, 16}, {300, 300, 2, 2, 8},
    };
    uint64_t seed = 4100;
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
        for (int variant = 0; variant < 16; variant++) {
            fixture f;
            const int Lq = shapes[c][0], Lk = shapes[c][1], H = shapes[c][2];
            int32_t *qp = NULL;
            /* npos_max: the full range (Lk + 1, the reference's block_size
             * + 1) or 5, where the clamp bites on long rows. */
            const int npos = variant & 4 ? 5 : Lk + 1;
            setup_qkv(&f, PA_SCHEME_COPE, Lq, Lk, H, shapes[c][3], shapes[c][4], 0, seed);
            cope_scheme(&f, npos, variant & 8 ? H : 1, variant & 2, seed + 1);
            seed += 2;
            f.a.causal = variant & 1;
            if (variant == 3 || variant == 12) {
                /* Explicit query positions: past the keys and out of order. */
                qp = tu_alloc((size_t)Lq, sizeof *qp);
                for (int i = 0; i < Lq; i++)
                    qp[i] = Lk + 7 - 3 * ((i * 5) % Lq);
                f.a.q_positions = qp;
                f.a.window = Lk / 2 + 1;
            }
            if (variant == 5 || variant == 14)
                f.a.window = Lk / 3 + 1; /* keys past the window gate 0 */
            check_against_reference(&f.a, 0);
            check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS | WANT_STATS);
            fixture_free(&f);
            free(qp);
        }
}

/* The clamp bites: with npos_max 5 the rows of a long causal call count
 * past 4 (so the test above exercises it). */
static void test_clamp_reached(void **state)
{
    (void)state;
    fixture f;
    setup_qkv(&f, PA_SCHEME_COPE, 300, 300, 2, 2, 8, 0, 99);
    cope_scheme(&f, 5, 1, false, 100);
    f.a.causal = true;
    assert_true(max_position(&f.a, 0) > 20.0);
    check_against_reference(&f.a, WANT_LOGITS);
    fixture_free(&f);
}

/* Masks other than position ones, options and outputs: chunk, padding
 * (key_length), the caller's mask (per head), a -inf bias, softcap, sinks,
 * out-of-order key positions, a fully masked row. */
static void test_masks_and_options(void **state)
{
    (void)state;
    for (int variant = 0; variant < 8; variant++) {
        fixture f;
        tu_rng r;
        const int Lq = 40, Lk = 90, H = 4;
        uint8_t *mask = NULL;
        float *bias = NULL, sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
        int32_t kpos[90];
        tu_rng_seed(&r, 700 + (uint64_t)variant);
        setup_qkv(&f, PA_SCHEME_COPE, Lq, Lk, H, 2, 16, 0, 500 + (uint64_t)variant);
        cope_scheme(&f, 33, variant & 1 ? H : 1, variant & 2, 600 + (uint64_t)variant);
        f.a.causal = variant != 6;
        switch (variant) {
        case 0:
            f.a.chunk_size = 16;
            break;
        case 1:
            f.a.key_length = 61;
            break;
        case 2:
            mask = rand_mask(&r, (size_t)H * Lq * Lk, 0.7);
            for (int j = 0; j < Lk; j++)
                mask[(size_t)3 * Lk + j] = 0; /* head 0, row 3: every key hidden */
            f.a.mask = mask;
            f.a.mask_heads = H;
            break;
        case 3:
            bias = rand_tensor(&r, (size_t)Lq * Lk, -1, 1);
            for (size_t x = 0; x < (size_t)Lq * Lk; x += 3)
                bias[x] = -INFINITY;
            f.a.bias = bias;
            f.a.bias_heads = 1;
            break;
        case 4:
            f.a.softcap = 0.3f;
            f.a.sinks = sinks;
            break;
        case 5:
            /* Keys out of order: the unsorted visibility path. */
            for (int j = 0; j < Lk; j++)
                kpos[j] = (j * 37) % Lk;
            f.a.k_positions = kpos;
            f.a.window = 30;
            break;
        case 6:
            f.a.sinks = sinks;
            f.a.window = 20; /* symmetric band, not causal */
            break;
        default:
            f.a.scale_set = true;
            f.a.scale = 0.4f;
            f.a.softcap = 2.0f;
            break;
        }
        check_against_reference(&f.a, 0);
        check_against_reference(&f.a, WANT_ALL);
        fixture_free(&f);
        free(mask);
        free(bias);
    }
}

/* Layer mode: q and k projected from one x (and normalised: the gates and
 * q.E read q as attention sees it), w_o after. */
static void test_layer(void **state)
{
    (void)state;
    for (int norm = 0; norm < 2; norm++) {
        fixture f;
        setup_layer(&f, PA_SCHEME_COPE, 70, 24, 4, 2, 8, 0, 12, 800 + (uint64_t)norm);
        cope_scheme(&f, 71, 4, false, 801);
        f.a.causal = true;
        if (norm) {
            f.a.q_norm_unweighted = f.a.k_norm_unweighted = true;
            f.a.q_norm_eps = f.a.k_norm_eps = 1e-6f;
        }
        check_against_reference(&f.a, 0);
        check_against_reference(&f.a, WANT_WEIGHTS | WANT_LOGITS);
        fixture_free(&f);
    }
}

/* Parts: the same result whether one part or three run the call; cope
 * does not split by keys. */
static void test_parts(void **state)
{
    (void)state;
    fixture f;
    pa_attention_out one = {0}, three = {0};
    const int Lq = 150, Lk = 150, H = 3, D = 16;
    size_t n = (size_t)Lq * H * D, wsz;
    void *ws;
    pa_error err;
    setup_qkv(&f, PA_SCHEME_COPE, Lq, Lk, H, 1, D, 0, 41);
    cope_scheme(&f, 64, H, false, 42);
    f.a.causal = true;
    one.output = tu_alloc(n, sizeof(float));
    three.output = tu_alloc(n, sizeof(float));
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &one, ws, wsz, &err), PA_STATUS_OK, &err);
    for (int part = 0; part < 3; part++)
        TU_ASSERT_STATUS(pa_attention_run_part(&f.a, &three, part, 3, ws, wsz, &err), PA_STATUS_OK,
                         &err);
    assert_memory_equal(one.output, three.output, n * sizeof(float));
    assert_int_equal(pa_attention_partials_size(&f.a, &one, 2), 0);
    free(ws);
    free(one.output);
    free(three.output);
    fixture_free(&f);
}

/* A position term past float32 is refused, not a silent -inf. */
static void test_overflow(void **state)
{
    (void)state;
    fixture f;
    pa_attention_out out = {0};
    pa_error err;
    pa_status st;
    size_t wsz;
    void *ws;
    setup_qkv(&f, PA_SCHEME_COPE, 3, 3, 2, 2, 4, 0, 9);
    cope_scheme(&f, 4, 1, true, 10);
    for (int i = 0; i < 4 * 4; i++)
        f.table[i] = 3e38f;
    for (int i = 0; i < 3 * 2 * 4; i++)
        f.q[i] = -2.0f;
    out.output = tu_alloc(3 * 2 * 4, sizeof(float));
    wsz = pa_attention_workspace_size(&f.a);
    ws = tu_alloc(wsz, 1);
    st = pa_attention_run(&f.a, &out, ws, wsz, &err);
    TU_ASSERT_STATUS(st, PA_STATUS_OUT_OF_RANGE, &err);
    free(ws);
    free(out.output);
    fixture_free(&f);
}

/* The content/position split is refused: cope's term depends on the masks. */
static void test_decompose(void **state)
{
    (void)state;
    fixture f;
    pa_decomposition d;
    pa_error err;
    size_t n = 4 * 5 * 5, wsz;
    void *ws;
    setup_qkv(&f, PA_SCHEME_COPE, 5, 5, 4, 2, 8, 0, 55);
    cope_scheme(&f, 6, 1, false, 56);
    memset(&d, 0, sizeof d);
    d.content = tu_alloc(n, sizeof(float));
    d.position = tu_alloc(n, sizeof(float));
    wsz = pa_decompose_workspace_size(&f.a);
    ws = tu_alloc(wsz > 0 ? wsz : 1, 1);
    TU_ASSERT_STATUS(pa_analyze_decompose(&f.a, &d, ws, wsz, &err), PA_STATUS_UNSUPPORTED, &err);
    assert_string_equal(err.field, "scheme.type");
    free(ws);
    free(d.content);
    free(d.position);
    fixture_free(&f);
}

/* The reference itself on a hand row: gates of visible keys only, suffix
 * sums, clamp, interpolation, nodiv. */
static void test_reference(void **state)
{
    (void)state;
    float E[3] = {0.0f, 1.0f, 4.0f}; /* D = 1: q.E[f] = q E[f] */
    pa_cope c = {.npos_max = 3, .pos_emb = E, .pos_emb_heads = 1, .nodiv = false};
    const double q = 2.0, gl[4] = {0.0, 1e9, 0.0, -1e9};
    const bool vis[4] = {true, false, true, true};
    double p[4], t[4];
    ref_cope_row(&c, 1, 0, 0.5, &q, gl, vis, 4, p, t);
    /* gates 1/2, 0 (hidden), 1/2, 0 (sigmoid(-1e9)): suffix 1, 1/2, 1/2, 0 */
    assert_true(fabs(p[0] - 1.0) < 1e-12 && fabs(p[1] - 0.5) < 1e-12);
    assert_true(fabs(p[2] - 0.5) < 1e-12 && fabs(p[3]) < 1e-12);
    /* term = 0.5 * q * interp(E, p): p 1 -> 1; p 1/2 -> 1/2 */
    assert_true(fabs(t[0] - 1.0) < 1e-12 && fabs(t[2] - 0.5) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),         cmocka_unit_test(test_hand),
        cmocka_unit_test(test_reference),     cmocka_unit_test(test_attention),
        cmocka_unit_test(test_clamp_reached), cmocka_unit_test(test_masks_and_options),
        cmocka_unit_test(test_parts),         cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_decompose),     cmocka_unit_test(test_layer),
    };
    return cmocka_run_group_tests_name("cope", tests, NULL, NULL);
}
