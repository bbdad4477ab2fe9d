/* test_rope2d.c - lib/rope2d.c and rope2d in attention: the angles of each
 * pair written out by hand for both variants, attention against the double
 * reference (tests/ref_rope2d.c, from timm's and mistral-inference's
 * layouts) with grids, prefix tokens, timm's ref_feat_shape and
 * grid_offset, explicit coordinates, GQA, Lq != Lk and layer mode in both
 * kernels, k_prerotated bit for bit, and the errors.
 */
#include "attention_fixture.h"
#include "ref_rope2d.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void rope2d(pa_scheme *s, pa_rope2d_variant v, pa_rope_layout layout)
{
    pa_scheme_init(s, PA_SCHEME_ROPE2D);
    s->rope2d.variant = v;
    s->rope2d.layout = layout;
}

/* Pair by pair, D = 8 (two pairs per axis), base 100 so that the
 * exponents differ visibly: axial's bands are 100^0, 100^(-1/2) on each
 * axis; Pixtral's rows take theta_0, theta_2 = 100^0, 100^(-1/2) and its
 * columns theta_1, theta_3 = 100^(-1/4), 100^(-3/4). */
static void test_angles_by_hand(void **state)
{
    (void)state;
    const int32_t pos2[2 * 3] = {0, 3, 5, /* rows */ 0, 7, 2 /* columns */};
    const double want[2][4] = {{1.0, 0.1, 1.0, 0.1},
                               {1.0, 0.1, pow(100.0, -0.25), 0.001 * 31.6227766016838}};
    for (int v = 0; v < 2; v++) {
        pa_scheme s;
        float c[3 * 4], sn[3 * 4];
        rope2d(&s, (pa_rope2d_variant)v, PA_ROPE_LAYOUT_GPTJ);
        s.rope2d.base = 100.0;
        TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 8, pos2, 3, c, sn, NULL), PA_STATUS_OK, NULL);
        for (int t = 0; t < 3; t++)
            for (int p = 0; p < 4; p++) {
                double coord = p < 2 ? pos2[t] : pos2[3 + t];
                double a = coord * want[v][p];
                assert_true(fabs(c[t * 4 + p] - cos(a)) < 1e-6);
                assert_true(fabs(sn[t * 4 + p] - sin(a)) < 1e-6);
            }
    }
    assert_string_equal(pa_scheme_type_name(PA_SCHEME_ROPE2D), "rope2d");
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_ROPE2D), PA_POSITION_SITE_QK_ROTATION);
}

/* The grid: row-major after the prefix tokens, which stay unrotated; timm's
 * ref_feat_shape scales a coordinate by ref / grid and grid_offset shifts it. */
static void test_grid_tables(void **state)
{
    (void)state;
    pa_scheme s;
    float c[(2 + 12) * 4], sn[(2 + 12) * 4];
    rope2d(&s, PA_ROPE2D_AXIAL, PA_ROPE_LAYOUT_GPTJ);
    s.rope2d.grid_rows = 3;
    s.rope2d.grid_cols = 4;
    s.rope2d.ref_rows = 6;
    s.rope2d.ref_cols = 2;
    s.rope2d.grid_offset = 0.5;
    s.rope2d.prefix_tokens = 2;
    TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 8, NULL, 14, c, sn, NULL), PA_STATUS_OK, NULL);
    for (int p = 0; p < 8; p++)
        assert_true(c[p] == 1.0f && sn[p] == 0.0f); /* the two prefix tokens */
    /* token 2 + 7 = patch (1, 3): row (1 + 0.5) * 6/3 = 3, column (3 + 0.5) * 2/4 = 1.75 */
    assert_true(fabs(c[9 * 4 + 0] - cos(3.0)) < 1e-6 && fabs(sn[9 * 4 + 1] - sin(0.03)) < 1e-6);
    assert_true(fabs(c[9 * 4 + 2] - cos(1.75)) < 1e-6 && fabs(sn[9 * 4 + 3] - sin(0.0175)) < 1e-6);
}

/* timm's in_pixels by hand: a 3 x 5 grid, D = 8 (two bands per axis),
 * max_res 16: coordinates linspace(-1, 1, n), rows -1, 0, 1 and columns
 * -1, -0.5, .., 1; log bands pi * 2^(0, 3) = pi, 8 pi; linear ones pi *
 * (1, 8). Token 7 = patch (1, 2): row 0, column 0; token 13 = (2, 3): row
 * 1, column 0.5; with ref_grid 6 x 10 both double. */
static void test_in_pixels_by_hand(void **state)
{
    (void)state;
    pa_scheme s;
    float c[15 * 4], sn[15 * 4];
    const double PI_ = 3.14159265358979323846;
    for (int lin = 0; lin < 2; lin++) {
        rope2d(&s, PA_ROPE2D_AXIAL, PA_ROPE_LAYOUT_GPTJ);
        s.rope2d.grid_rows = 3;
        s.rope2d.grid_cols = 5;
        s.rope2d.in_pixels = true;
        s.rope2d.max_res = 16.0;
        s.rope2d.linear_bands = lin;
        TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 8, NULL, 15, c, sn, NULL), PA_STATUS_OK,
                         NULL);
        /* token 7: both coordinates 0 */
        for (int p = 0; p < 4; p++)
            assert_true(fabs(c[7 * 4 + p] - 1.0) < 1e-6 && fabs(sn[7 * 4 + p]) < 1e-6);
        /* token 13: row 1 (bands pi, 8 pi), column 0.5 */
        assert_true(fabs(sn[13 * 4 + 0] - sin(PI_)) < 1e-5);
        assert_true(fabs(c[13 * 4 + 1] - cos(8.0 * PI_)) < 1e-5);
        assert_true(fabs(sn[13 * 4 + 2] - sin(0.5 * PI_)) < 1e-5);
        assert_true(fabs(c[13 * 4 + 3] - cos(0.5 * 8.0 * PI_)) < 1e-5);
        /* token 0 = (0, 0): both -1 */
        assert_true(fabs(sn[0] - sin(-PI_)) < 1e-5 && fabs(sn[2] - sin(-PI_)) < 1e-5);
    }
    /* the log bands differ from the linear ones past the ends: max_res 64,
     * three bands: pi (1, 2^2.5, 32) against pi (1, 16.5, 32) */
    s.rope2d.max_res = 64.0;
    s.rope2d.linear_bands = false;
    s.rope2d.grid_rows = 3;
    s.rope2d.grid_cols = 3;
    {
        float c2[9 * 6], s2[9 * 6];
        TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 12, NULL, 9, c2, s2, NULL), PA_STATUS_OK,
                         NULL);
        /* token 8 = (2, 2): row 1; pair 1 turns by pi 2^2.5 */
        assert_true(fabs(s2[8 * 6 + 1] - sin(PI_ * pow(2.0, 2.5))) < 1e-5);
        s.rope2d.linear_bands = true;
        TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 12, NULL, 9, c2, s2, NULL), PA_STATUS_OK,
                         NULL);
        assert_true(fabs(s2[8 * 6 + 1] - sin(PI_ * 16.5)) < 1e-5);
    }
    /* ref_grid doubles the coordinates */
    rope2d(&s, PA_ROPE2D_AXIAL, PA_ROPE_LAYOUT_GPTJ);
    s.rope2d.grid_rows = 3;
    s.rope2d.grid_cols = 5;
    s.rope2d.ref_rows = 6;
    s.rope2d.ref_cols = 10;
    s.rope2d.in_pixels = true;
    s.rope2d.max_res = 16.0;
    TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 8, NULL, 15, c, sn, NULL), PA_STATUS_OK, NULL);
    assert_true(fabs(sn[13 * 4 + 0] - sin(2.0 * PI_)) < 1e-5);
    assert_true(fabs(sn[13 * 4 + 2] - sin(1.0 * PI_)) < 1e-5);
}

/* DINOv3 by hand: a 2 x 4 grid, D = 8 (two bands per axis), base 100:
 * periods 1 and 100^(1/2) = 10, coordinates 2 (i + 1/2) / n - 1 with n the
 * axis's size ("separate") or max(2, 4) = 4 ("max"). And Qwen2-VL's merge
 * order: a 4 x 4 grid in 2 x 2 blocks puts token 6 at block 1 (rows 0-1,
 * columns 2-3), its third patch: (1, 2). */
static void test_dinov3_and_merge_by_hand(void **state)
{
    (void)state;
    const double two_pi = 6.283185307179586;
    for (int nz = 0; nz < 2; nz++) {
        pa_scheme s;
        float c[8 * 4], sn[8 * 4];
        rope2d(&s, PA_ROPE2D_DINOV3, PA_ROPE_LAYOUT_NEOX);
        s.rope2d.base = 100.0;
        s.rope2d.grid_rows = 2;
        s.rope2d.grid_cols = 4;
        s.rope2d.normalize = nz ? PA_ROPE2D_NORMALIZE_MAX : PA_ROPE2D_NORMALIZE_SEPARATE;
        TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 8, NULL, 8, c, sn, NULL), PA_STATUS_OK, NULL);
        /* token 5 = (1, 1): row 2 * 1.5 / 2 - 1 = 0.5 (0.75 / 2 = -0.25 with n 4),
         * column 2 * 1.5 / 4 - 1 = -0.25 */
        const double row = nz ? -0.25 : 0.5, col = -0.25;
        const double ang[4] = {two_pi * row, two_pi * row / 10.0, two_pi * col,
                               two_pi * col / 10.0};
        for (int p = 0; p < 4; p++)
            if (fabs(c[5 * 4 + p] - cos(ang[p])) > 1e-6 || fabs(sn[5 * 4 + p] - sin(ang[p])) > 1e-6)
                fail_msg("dinov3 %s pair %d: cos %g sin %g, want angle %g", nz ? "max" : "separate",
                         p, (double)c[5 * 4 + p], (double)sn[5 * 4 + p], ang[p]);
    }
    {
        pa_scheme s;
        float c[16 * 4], sn[16 * 4];
        rope2d(&s, PA_ROPE2D_AXIAL, PA_ROPE_LAYOUT_NEOX);
        s.rope2d.grid_rows = s.rope2d.grid_cols = 4;
        s.rope2d.merge_size = 2;
        TU_ASSERT_STATUS(pa_rope2d_cos_sin(&s.rope2d, 8, NULL, 16, c, sn, NULL), PA_STATUS_OK,
                         NULL);
        assert_true(fabs(c[6 * 4 + 0] - cos(1.0)) < 1e-6 && fabs(c[6 * 4 + 2] - cos(2.0)) < 1e-6);
        /* token 11: block 2 (rows 2-3, columns 0-1), last patch: (3, 1) */
        assert_true(fabs(sn[11 * 4 + 0] - sin(3.0)) < 1e-6 &&
                    fabs(sn[11 * 4 + 2] - sin(1.0)) < 1e-6);
    }
}

/* Attention against the reference: both variants and layouts, grids with
 * a prefix (prefill, Lq = Lk = 2 + 20) and explicit coordinates with
 * Lq != Lk (decode, 3 queries against 70 keys), GQA, causal or not. */
static void test_attention_vs_reference(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 61);
    for (int v = 0; v < 3; v++)
        for (int layout = 0; layout < 2; layout++) {
            fixture f;
            setup_qkv(&f, PA_SCHEME_ROPE2D, 22, 22, 4, 2, 16, 0, 600 + (uint64_t)(2 * v + layout));
            rope2d(&f.scheme, (pa_rope2d_variant)v, (pa_rope_layout)layout);
            f.scheme.rope2d.grid_rows = 4;
            f.scheme.rope2d.grid_cols = 5;
            f.scheme.rope2d.prefix_tokens = 2;
            if (v == PA_ROPE2D_AXIAL) {
                f.scheme.rope2d.ref_rows = f.scheme.rope2d.ref_cols = 16;
                f.scheme.rope2d.grid_offset = 0.25;
            }
            if (v == PA_ROPE2D_DINOV3)
                f.scheme.rope2d.normalize = (pa_rope2d_normalize)(1 + layout); /* max, min */
            check_against_reference(&f.a, WANT_ALL);
            if (v == PA_ROPE2D_AXIAL) { /* timm's pixel grid and bands, both spacings */
                f.scheme.rope2d.in_pixels = true;
                f.scheme.rope2d.grid_offset = 0.0;
                f.scheme.rope2d.max_res = 32.0;
                f.scheme.rope2d.linear_bands = layout;
                check_against_reference(&f.a, WANT_ALL);
                f.scheme.rope2d.in_pixels = f.scheme.rope2d.linear_bands = false;
                f.scheme.rope2d.max_res = 0.0;
                f.scheme.rope2d.grid_offset = 0.25;
            }
            f.a.causal = true;
            check_against_reference(&f.a, WANT_WEIGHTS | WANT_ROT);
            fixture_free(&f);

            int32_t q2[2 * 3], k2[2 * 70];
            for (int j = 0; j < 70; j++) {
                k2[j] = j / 9;
                k2[70 + j] = (j * 7) % 9 + (v ? 0 : -3); /* negative columns: allowed */
            }
            for (int i = 0; i < 3; i++) {
                q2[i] = 2 * i + 1;
                q2[3 + i] = 8 - i;
            }
            setup_qkv(&f, PA_SCHEME_ROPE2D, 3, 70, 8, 2, 32, 24, 700 + (uint64_t)(2 * v + layout));
            rope2d(&f.scheme, (pa_rope2d_variant)v, (pa_rope_layout)layout);
            if (v == PA_ROPE2D_DINOV3) { /* the grid normalises the given rows */
                f.scheme.rope2d.grid_rows = 8;
                f.scheme.rope2d.grid_cols = 9;
            }
            f.a.q_positions_2d = q2;
            f.a.k_positions_2d = k2;
            check_against_reference(&f.a, WANT_ALL);
            fixture_free(&f);
        }
}

static void expect_status(const pa_attention *a, pa_status st, const char *field)
{
    pa_error err = {0};
    assert_int_equal(pa_attention_check(a, &err), st);
    if (st != PA_STATUS_OK && strcmp(err.field, field) != 0)
        fail_msg("field %s, want %s (%s)", err.field, field, err.message);
}

/* RoPE-Mixed: each head its own learned frequencies [2, H, D/2]; prefill
 * and decode, causal, explicit rows and a grid with a class token; the
 * heads' angles by hand for one token; GQA refused. */
static void test_mixed(void **state)
{
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 77);
    for (int c = 0; c < 3; c++) {
        fixture f;
        const int H = 4, D = 16, Lq = c == 2 ? 2 : 13, Lk = 13;
        float *fr = rand_tensor(&rng, (size_t)2 * H * D / 2, -1.0, 1.0);
        int32_t pos2[2 * 13];
        for (int t = 0; t < 13; t++) {
            pos2[t] = t / 4;
            pos2[13 + t] = t % 4 - 1;
        }
        setup_qkv(&f, PA_SCHEME_ROPE2D, Lq, Lk, H, H, D, 0, 7800 + (uint64_t)c);
        f.scheme.rope2d.variant = PA_ROPE2D_MIXED;
        f.scheme.rope2d.freqs = fr;
        f.scheme.rope2d.num_freqs = 2 * H * D / 2;
        if (c == 0) {
            f.scheme.rope2d.grid_rows = 3;
            f.scheme.rope2d.grid_cols = 4;
            f.scheme.rope2d.prefix_tokens = 1;
        } else {
            f.a.q_positions_2d = c == 1 ? pos2 : pos2 + 0; /* decode: the first two rows */
            f.a.k_positions_2d = pos2;
            if (c == 2) {
                static int32_t q2[4];
                q2[0] = pos2[11];
                q2[1] = pos2[12];
                q2[2] = pos2[13 + 11];
                q2[3] = pos2[13 + 12];
                f.a.q_positions_2d = q2;
            }
        }
        f.a.causal = c != 0;
        check_against_reference(&f.a, WANT_ALL);
        if (c == 0) {
            float co[4 * 13 * 8], si[4 * 13 * 8];
            TU_ASSERT_STATUS(
                pa_rope2d_cos_sin_mixed(&f.scheme.rope2d, D, H, NULL, 13, co, si, NULL),
                PA_STATUS_OK, NULL);
            /* token 1 + 6 = patch (1, 2): head 3, pair 5 */
            const double a = 1.0 * fr[3 * 8 + 5] + 2.0 * fr[(4 + 3) * 8 + 5];
            assert_true(fabs(co[(3 * 13 + 7) * 8 + 5] - cos(a)) < 1e-6);
            assert_true(fabs(si[(3 * 13 + 7) * 8 + 5] - sin(a)) < 1e-6);
            f.a.num_kv_heads = 2;
            expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "num_kv_heads");
            f.a.num_kv_heads = H;
            f.scheme.rope2d.num_freqs = 7;
            expect_status(&f.a, PA_STATUS_SHAPE_MISMATCH, "scheme.freqs");
        }
        free(fr);
        fixture_free(&f);
    }
}

/* Layer mode, EVA-02's shape: a class token then a 4 x 4 grid, one array of
 * coordinates or the grid for both sides; and a projection's prefix row
 * comes back unrotated. */
static void test_layer_mode(void **state)
{
    (void)state;
    fixture f;
    setup_layer(&f, PA_SCHEME_ROPE2D, 17, 32, 4, 4, 8, 8, 0, 800);
    f.scheme.rope2d.grid_rows = f.scheme.rope2d.grid_cols = 4;
    f.scheme.rope2d.prefix_tokens = 1;
    check_against_reference(&f.a, WANT_ALL);
    f.scheme.rope2d.prefix_tokens = 0; /* Qwen2-VL: 16 = 4 x 4 in 2 x 2 blocks, and one more */
    f.scheme.rope2d.grid_rows = 2;
    f.scheme.rope2d.grid_cols = 8;
    f.scheme.rope2d.merge_size = 2;
    f.scheme.rope2d.layout = PA_ROPE_LAYOUT_NEOX;
    f.scheme.rope2d.prefix_tokens = 1;
    check_against_reference(&f.a, WANT_ALL);
    f.scheme.rope2d.merge_size = 0;
    f.scheme.rope2d.grid_rows = f.scheme.rope2d.grid_cols = 4;
    {
        int32_t pos2[2 * 17];
        for (int t = 0; t < 17; t++) {
            pos2[t] = (t * 5) % 4;
            pos2[17 + t] = t / 4;
        }
        f.a.q_positions_2d = pos2;
        check_against_reference(&f.a, WANT_ALL);
        f.a.q_positions_2d = NULL;
    }
    fixture_free(&f);
}

/* k_prerotated: keys rotated by the library once (k_rot), then read as
 * they are, answer as the full call does, bit for bit. */
static void test_k_prerotated(void **state)
{
    (void)state;
    fixture f;
    int32_t q2[2] = {2, 3};
    pa_attention_out out = {0}, out2 = {0};
    pa_error err;
    setup_qkv(&f, PA_SCHEME_ROPE2D, 1, 12, 2, 1, 8, 0, 900);
    rope2d(&f.scheme, PA_ROPE2D_PIXTRAL, PA_ROPE_LAYOUT_GPTJ);
    f.scheme.rope2d.grid_rows = 3;
    f.scheme.rope2d.grid_cols = 4;
    f.a.q_positions_2d = q2;
    size_t wsz = pa_attention_workspace_size(&f.a);
    void *ws = tu_alloc(wsz, 1);
    out.output = tu_alloc(2 * 8, sizeof(float));
    out.k_rot = tu_alloc(12 * 8, sizeof(float));
    out.q_rot = tu_alloc(2 * 8, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &out, ws, wsz, &err), PA_STATUS_OK, &err);
    f.a.k = out.k_rot;
    f.a.k_prerotated = true;
    out2.output = tu_alloc(2 * 8, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(&f.a, &out2, ws, wsz, &err), PA_STATUS_OK, &err);
    assert_memory_equal(out.output, out2.output, 2 * 8 * sizeof(float));
    free(ws);
    free(out.output);
    free(out.k_rot);
    free(out.q_rot);
    free(out2.output);
    f.a.k = f.k;
    fixture_free(&f);
}

static void test_errors(void **state)
{
    (void)state;
    fixture f;
    int32_t pos2[2 * 6] = {0};
    setup_qkv(&f, PA_SCHEME_ROPE2D, 6, 6, 2, 2, 8, 0, 1000);
    /* No coordinates and no grid. */
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_positions_2d");
    f.scheme.rope2d.grid_rows = 2;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_cols");
    f.scheme.rope2d.grid_cols = 2; /* 4 patches, 6 tokens */
    expect_status(&f.a, PA_STATUS_SHAPE_MISMATCH, "q_positions_2d");
    f.scheme.rope2d.prefix_tokens = 2;
    expect_status(&f.a, PA_STATUS_OK, "");
    f.scheme.rope2d.ref_rows = 4;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.ref_cols");
    f.scheme.rope2d.ref_cols = 4;
    f.scheme.rope2d.variant = PA_ROPE2D_PIXTRAL;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.ref_rows");
    f.scheme.rope2d.ref_rows = f.scheme.rope2d.ref_cols = 0;
    f.scheme.rope2d.grid_offset = 0.5;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_offset");
    f.scheme.rope2d.grid_offset = 0.0;
    f.scheme.rope2d.in_pixels = true; /* timm's, axial only */
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.in_pixels");
    f.scheme.rope2d.variant = PA_ROPE2D_AXIAL;
    f.scheme.rope2d.grid_offset = 0.5; /* timm adds it to index grids only */
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_offset");
    f.scheme.rope2d.grid_offset = 0.0;
    f.scheme.rope2d.max_res = -1.0;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.max_res");
    f.scheme.rope2d.in_pixels = false;
    f.scheme.rope2d.max_res = 64.0; /* without in_pixels it means nothing */
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.max_res");
    f.scheme.rope2d.max_res = 0.0;
    f.scheme.rope2d.variant = PA_ROPE2D_PIXTRAL;
    f.scheme.rope2d.base = 0.0;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.base");
    f.scheme.rope2d.base = 10000.0;
    f.scheme.rope2d.prefix_tokens = -1;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.prefix_tokens");
    f.scheme.rope2d.prefix_tokens = 2;
    f.scheme.rope2d.merge_size = 3; /* 2 x 2 is not in 3 x 3 blocks */
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.merge_size");
    f.scheme.rope2d.merge_size = 0;
    f.scheme.rope2d.normalize = PA_ROPE2D_NORMALIZE_MAX;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.normalize");
    f.scheme.rope2d.variant = PA_ROPE2D_DINOV3;
    expect_status(&f.a, PA_STATUS_OK, "");
    f.scheme.rope2d.grid_rows = f.scheme.rope2d.grid_cols = 0;
    f.a.q_positions_2d = f.a.k_positions_2d = pos2;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_rows");
    f.a.q_positions_2d = f.a.k_positions_2d = NULL;
    fixture_free(&f);

    setup_qkv(&f, PA_SCHEME_ROPE2D, 6, 6, 2, 2, 6, 0, 1001);
    f.a.q_positions_2d = f.a.k_positions_2d = pos2;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "head_dim");
    fixture_free(&f);

    /* 2-D coordinates belong to rope2d. */
    setup_qkv(&f, PA_SCHEME_ROPE, 6, 6, 2, 2, 8, 0, 1002);
    f.a.q_positions_2d = pos2;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "q_positions_2d");
    fixture_free(&f);

    /* Keys without coordinates while the queries have theirs. */
    setup_qkv(&f, PA_SCHEME_ROPE2D, 6, 6, 2, 2, 8, 0, 1003);
    f.a.q_positions_2d = pos2;
    expect_status(&f.a, PA_STATUS_INVALID_ARGUMENT, "k_positions_2d");
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_angles_by_hand),
        cmocka_unit_test(test_in_pixels_by_hand),
        cmocka_unit_test(test_dinov3_and_merge_by_hand),
        cmocka_unit_test(test_grid_tables),
        cmocka_unit_test(test_attention_vs_reference),
        cmocka_unit_test(test_layer_mode),
        cmocka_unit_test(test_k_prerotated),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_mixed),
    };
    return cmocka_run_group_tests_name("rope2d", tests, NULL, NULL);
}
