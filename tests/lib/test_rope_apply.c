/* test_rope_apply.c - lib/rope.c: the cos/sin tables (pa_rope_cos_sin) and the
 * rotation kernel (pa_rope_apply) for every scaling and both layouts, against
 * the double-precision reference of Hugging Face's formulas in
 * tests/ref_rope.c. Validation and the inverse frequencies are in
 * tests/lib/test_rope.c; the shared configurations in tests/lib/rope_configs.h.
 *
 * Tolerances: cos/sin tables are float32 roundings of double values: 2e-7
 * absolute (times the attention factor). Rotated values of magnitude ~1: 1e-5
 * absolute + 1e-5 relative at every position we use (up to 1e5: the angle is
 * computed in double, so only the table rounding remains).
 */
#include "testutil.h"
#include "ref_rope.h"
#include "rope_configs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* cos/sin tables                                                            */
/* ------------------------------------------------------------------------- */

static void test_cos_sin_vs_reference(void **state)
{
    (void)state;
    const int32_t pos[] = {0, 1, -1, 7, -300, 4095, 4096, 65535, 99999, -100000};
    enum { N = sizeof pos / sizeof pos[0] };
    for (int sc = 0; sc < PA_ROPE_SCALING_COUNT; sc++) {
        const int32_t dims[][2] = {{64, 0}, {65, 64}, {96, 32}, {6, 0}};
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            int32_t D = dims[d][0], rd = dims[d][1] ? dims[d][1] : D;
            pa_rope r = rope_config((pa_rope_scaling)sc, dims[d][1], rd);
            int32_t maxpos = 99999;
            float c[N * 32], s[N * 32];
            double wc[N * 32], ws[N * 32], af;
            double inv[32];
            pa_error err;
            TU_ASSERT_STATUS(pa_rope_cos_sin(&r, D, pos, N, maxpos, c, s, &err), PA_STATUS_OK,
                             &err);
            ref_rope_cos_sin(&r, D, pos, N, maxpos, wc, ws);
            ref_rope_inv_freq(&r, D, maxpos, inv, &af);
            TU_ASSERT_CLOSE(c, wc, (size_t)N * (size_t)(rd / 2), 2e-7 * af, 0.0);
            TU_ASSERT_CLOSE(s, ws, (size_t)N * (size_t)(rd / 2), 2e-7 * af, 0.0);
        }
    }
}

/* Runs of consecutive positions (where the table advances the angle by a
 * complex multiplication between libm anchors every 32 rows), across zero,
 * after a jump, and far out: as close to the reference as single rows. */
static void test_cos_sin_runs_vs_reference(void **state)
{
    (void)state;
    enum { N = 300 + 70 + 100 };
    static int32_t pos[N];
    for (int32_t t = 0; t < 300; t++)
        pos[t] = t - 40; /* -40 .. 259 */
    for (int32_t t = 0; t < 70; t++)
        pos[300 + t] = 5 + t; /* a jump back, then a run */
    for (int32_t t = 0; t < 100; t++)
        pos[370 + t] = 99000 + t;
    for (int sc = 0; sc < PA_ROPE_SCALING_COUNT; sc++) {
        const int32_t D = 128;
        pa_rope r = rope_config((pa_rope_scaling)sc, 0, D);
        int32_t maxpos = 99999;
        float *c = tu_alloc((size_t)N * 64, sizeof(float)),
              *s = tu_alloc((size_t)N * 64, sizeof(float));
        double *wc = tu_alloc((size_t)N * 64, sizeof(double)),
               *ws = tu_alloc((size_t)N * 64, sizeof(double));
        double inv[64], af;
        pa_error err;
        TU_ASSERT_STATUS(pa_rope_cos_sin(&r, D, pos, N, maxpos, c, s, &err), PA_STATUS_OK, &err);
        ref_rope_cos_sin(&r, D, pos, N, maxpos, wc, ws);
        ref_rope_inv_freq(&r, D, maxpos, inv, &af);
        TU_ASSERT_CLOSE(c, wc, (size_t)N * 64, 2e-7 * af, 0.0);
        TU_ASSERT_CLOSE(s, ws, (size_t)N * 64, 2e-7 * af, 0.0);
        free(c);
        free(s);
        free(wc);
        free(ws);
    }
}

static void test_cos_sin_attention_factor(void **state)
{
    (void)state;
    const int32_t pos[] = {0, 5};
    float c[2 * 64], s[2 * 64];
    /* yarn default: 0.1 ln(f) + 1 multiplies cos and sin. */
    pa_rope r = rope_config(PA_ROPE_SCALING_YARN, 0, 128);
    double af = 0.1 * log(4.0) + 1.0;
    TU_ASSERT_STATUS(pa_rope_cos_sin(&r, 128, pos, 2, 5, c, s, NULL), PA_STATUS_OK, NULL);
    for (int i = 0; i < 64; i++) {
        assert_true(fabs(c[i] - af) <= 1e-7 && s[i] == 0.0f);
        assert_true(fabs((double)c[64 + i] * c[64 + i] + (double)s[64 + i] * s[64 + i] - af * af) <=
                    1e-6);
    }
    /* longrope default sqrt(1 + ln(f)/ln(orig)). */
    r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 128);
    af = sqrt(1.0 + log(32.0) / log(4096.0));
    TU_ASSERT_STATUS(pa_rope_cos_sin(&r, 128, pos, 2, 5, c, s, NULL), PA_STATUS_OK, NULL);
    for (int i = 0; i < 64; i++)
        assert_true(fabs(c[i] - af) <= 1e-7 && s[i] == 0.0f);
    /* An explicit factor on a scaling whose default is 1. */
    r = rope_defaults();
    r.attention_factor = 2.0;
    TU_ASSERT_STATUS(pa_rope_cos_sin(&r, 128, pos, 2, 5, c, s, NULL), PA_STATUS_OK, NULL);
    assert_true(c[0] == 2.0f);
    assert_true(fabs(c[64] - 2.0 * cos(5.0)) <= 2e-7 && fabs(s[64] - 2.0 * sin(5.0)) <= 2e-7);
}

/* longrope and dynamic use max_position as given, not the table's positions. */
static void test_cos_sin_uses_max_position(void **state)
{
    (void)state;
    const int32_t pos[] = {0, 3, 10};
    float c1[3 * 32], s1[3 * 32], c2[3 * 32], s2[3 * 32];
    double wc[3 * 32], ws[3 * 32];
    pa_rope r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    TU_ASSERT_STATUS(pa_rope_cos_sin(&r, 64, pos, 3, 10, c1, s1, NULL), PA_STATUS_OK, NULL);
    TU_ASSERT_STATUS(pa_rope_cos_sin(&r, 64, pos, 3, 5000, c2, s2, NULL), PA_STATUS_OK, NULL);
    ref_rope_cos_sin(&r, 64, pos, 3, 5000, wc, ws);
    TU_ASSERT_CLOSE(c2, wc, 96, 3e-7, 0.0);
    TU_ASSERT_CLOSE(s2, ws, 96, 3e-7, 0.0);
    assert_true(memcmp(s1, s2, sizeof s1) != 0);
}

/* ------------------------------------------------------------------------- */
/* Rotation                                                                  */
/* ------------------------------------------------------------------------- */

static void rotate_with_lib(const pa_rope *r, int32_t D, int32_t n, int32_t heads,
                            const int32_t *pos, int32_t maxpos, const float *x, float *out)
{
    int32_t half = pa_rope_rotary_dim(r, D) / 2;
    float *c = tu_alloc((size_t)n * (size_t)half, sizeof(float));
    float *s = tu_alloc((size_t)n * (size_t)half, sizeof(float));
    pa_error err;
    TU_ASSERT_STATUS(pa_rope_cos_sin(r, D, pos, n, maxpos, c, s, &err), PA_STATUS_OK, &err);
    pa_rope_apply(r, D, n, heads, c, s, x, out);
    free(c);
    free(s);
}

static void test_pairs_explicit(void **state)
{
    (void)state;
    const int32_t pos[] = {1};
    const float e0[4] = {1, 0, 0, 0};
    float out[4];
    pa_rope r = rope_defaults();
    /* r = 4: inv_freq = {1, 0.01}. NeoX pairs dim 0 with dim 2. */
    rotate_with_lib(&r, 4, 1, 1, pos, 1, e0, out);
    assert_true(fabs(out[0] - cos(1.0)) <= 1e-7 && out[1] == 0.0f);
    assert_true(fabs(out[2] - sin(1.0)) <= 1e-7 && out[3] == 0.0f);
    /* GPT-J pairs dim 0 with dim 1. */
    r.layout = PA_ROPE_LAYOUT_GPTJ;
    rotate_with_lib(&r, 4, 1, 1, pos, 1, e0, out);
    assert_true(fabs(out[0] - cos(1.0)) <= 1e-7 && fabs(out[1] - sin(1.0)) <= 1e-7);
    assert_true(out[2] == 0.0f && out[3] == 0.0f);
    /* GPT-J, the second pair turns by 0.01. */
    const float e2[4] = {0, 0, 1, 0};
    rotate_with_lib(&r, 4, 1, 1, pos, 1, e2, out);
    assert_true(fabs(out[2] - cos(0.01)) <= 1e-7 && fabs(out[3] - sin(0.01)) <= 1e-7);
}

static void test_apply_vs_reference(void **state)
{
    (void)state;
    const int32_t pos[] = {0, 1, -7, 1000, 99999};
    enum { N = 5, H = 3 };
    const int32_t dims[][2] = {{64, 0}, {64, 32}, {65, 64}, {22, 0}, {40, 2}, {128, 0}, {17, 16}};
    tu_rng rng;
    tu_rng_seed(&rng, 42);
    for (int layout = 0; layout < 2; layout++) {
        for (int sc = 0; sc < PA_ROPE_SCALING_COUNT; sc++) {
            for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
                int32_t D = dims[d][0], rd = dims[d][1] ? dims[d][1] : D;
                if ((sc == PA_ROPE_SCALING_NTK || sc == PA_ROPE_SCALING_DYNAMIC ||
                     sc == PA_ROPE_SCALING_NTK_ALPHA) &&
                    rd <= 2)
                    continue;
                pa_rope r = rope_config((pa_rope_scaling)sc, dims[d][1], rd);
                r.layout = (pa_rope_layout)layout;
                size_t total = (size_t)N * H * (size_t)D;
                float *x = tu_alloc(total, sizeof(float));
                float *out = tu_alloc(total, sizeof(float));
                double *want = tu_alloc(total, sizeof(double));
                tu_fill(&rng, x, total, -1.0, 1.0);
                rotate_with_lib(&r, D, N, H, pos, 99999, x, out);
                ref_rope_rotate_tensor(&r, D, N, H, pos, 99999, x, want);
                TU_ASSERT_CLOSE(out, want, total, 1e-5, 1e-5);
                /* Dims r.. pass through bit for bit. */
                for (size_t row = 0; row < (size_t)N * H; row++)
                    for (int32_t k = rd; k < D; k++)
                        assert_true(out[row * (size_t)D + (size_t)k] ==
                                    x[row * (size_t)D + (size_t)k]);
                free(x);
                free(out);
                free(want);
            }
        }
    }
}

static void test_apply_in_place(void **state)
{
    (void)state;
    const int32_t pos[] = {3, 0, 17, 2048, 5};
    enum { N = 5, H = 4 };
    const int32_t dims[][2] = {{64, 0}, {64, 48}, {65, 64}, {26, 0}, {10, 2}};
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    for (int layout = 0; layout < 2; layout++) {
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            int32_t D = dims[d][0];
            pa_rope r = rope_defaults();
            r.rotary_dim = dims[d][1];
            r.layout = (pa_rope_layout)layout;
            size_t total = (size_t)N * H * (size_t)D;
            float *x = tu_alloc(total, sizeof(float));
            float *y = tu_alloc(total, sizeof(float));
            float *out = tu_alloc(total, sizeof(float));
            tu_fill(&rng, x, total, -2.0, 2.0);
            memcpy(y, x, total * sizeof(float));
            double *want = tu_alloc(total, sizeof(double));
            rotate_with_lib(&r, D, N, H, pos, 2048, x, out);
            rotate_with_lib(&r, D, N, H, pos, 2048, y, y);
            /* Not bit for bit: with FMA contraction (-march=native) the two
             * kernels may round differently. */
            for (size_t i = 0; i < total; i++)
                want[i] = out[i];
            TU_ASSERT_CLOSE(y, want, total, 1e-6, 1e-6);
            ref_rope_rotate_tensor(&r, D, N, H, pos, 2048, x, want);
            TU_ASSERT_CLOSE(y, want, total, 1e-5, 1e-5);
            free(x);
            free(y);
            free(out);
            free(want);
        }
    }
}

/* Every output is two products, each rounded, then their difference or
 * sum, rounded, on whichever kernel the CPU runs (make test runs this file
 * under POSATTN_KERNEL=portable and avx2 too): the bits of a row do not
 * depend on the CPU. A fused multiply-add, rounding once, gives other bits
 * in most of these outputs. Every pair count from 1 to 40 and around 64,
 * so that each kernel's blocks and tails are both met, in place and not,
 * with dimensions past rotary_dim. */
static void test_apply_two_roundings(void **state)
{
    (void)state;
    enum { N = 3, H = 2 };
    const int32_t extra[] = {0, 3};
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    for (int layout = 0; layout < 2; layout++) {
        for (int32_t h = 1; h <= 70; h = h < 40 ? h + 1 : h + 6) {
            for (size_t e = 0; e < sizeof extra / sizeof extra[0]; e++) {
                const int32_t rd = 2 * h, D = rd + extra[e];
                const size_t total = (size_t)N * H * (size_t)D;
                pa_rope r = rope_defaults();
                r.rotary_dim = extra[e] ? rd : 0;
                r.layout = (pa_rope_layout)layout;
                float *c = tu_alloc((size_t)N * (size_t)h, sizeof(float));
                float *s = tu_alloc((size_t)N * (size_t)h, sizeof(float));
                float *x = tu_alloc(total, sizeof(float));
                float *out = tu_alloc(total, sizeof(float));
                float *want = tu_alloc(total, sizeof(float));
                tu_fill(&rng, c, (size_t)N * (size_t)h, -1.5, 1.5);
                tu_fill(&rng, s, (size_t)N * (size_t)h, -1.5, 1.5);
                tu_fill(&rng, x, total, -2.0, 2.0);
                for (int32_t t = 0; t < N; t++)
                    for (int32_t hd = 0; hd < H; hd++) {
                        const float *xr = x + ((size_t)t * H + (size_t)hd) * (size_t)D;
                        float *wr = want + ((size_t)t * H + (size_t)hd) * (size_t)D;
                        memcpy(wr, xr, (size_t)D * sizeof(float));
                        for (int32_t i = 0; i < h; i++) {
                            const int32_t i0 = layout ? 2 * i : i, i1 = layout ? 2 * i + 1 : i + h;
                            const float a = xr[i0], b = xr[i1], ci = c[t * h + i],
                                        si = s[t * h + i];
                            volatile float ac = a * ci, bs = b * si, bc = b * ci, as = a * si;
                            wr[i0] = ac - bs;
                            wr[i1] = bc + as;
                        }
                    }
                pa_rope_apply(&r, D, N, H, c, s, x, out);
                assert_memory_equal(out, want, total * sizeof(float));
                pa_rope_apply(&r, D, N, H, c, s, x, x);
                assert_memory_equal(x, want, total * sizeof(float));
                free(c);
                free(s);
                free(x);
                free(out);
                free(want);
            }
        }
    }
}

static void test_apply_empty(void **state)
{
    (void)state;
    pa_rope r = rope_defaults();
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
    float c[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0}; /* [n=2, r/2=2] */
    pa_rope_apply(&r, 4, 0, 2, c, s, x, out);
    pa_rope_apply(&r, 4, 2, 0, c, s, x, out);
    for (int i = 0; i < 8; i++)
        assert_true(out[i] == 0.0f);
    /* Position 0 with attention factor 1 is the identity. */
    pa_rope_apply(&r, 4, 2, 1, c, s, x, out);
    assert_memory_equal(out, x, sizeof x);
}

/* M-RoPE tables for every scaling, both section layouts and partial
 * rotary: frequency i at the position of its row, against the reference's
 * cos(pos3[row(i)] * inv_freq[i]) * attention factor; runs of consecutive
 * positions in each row (the complex-multiplication path) and jumps. */
static void test_cos_sin_mrope(void **state)
{
    (void)state;
    enum { N = 70 };
    static int32_t pos3[3 * N];
    for (int t = 0; t < N; t++) {
        pos3[t] = t / 10;                  /* temporal: runs of 10 */
        pos3[N + t] = 100 + t % 7;         /* height */
        pos3[2 * N + t] = t < 35 ? t : -t; /* width: a run, then jumps */
    }
    const int32_t secs[][3] = {{4, 6, 6}, {2, 3, 3}, {16, 0, 0}, {5, 2, 9}};
    for (int sc = 0; sc < PA_ROPE_SCALING_COUNT; sc++) {
        for (size_t k = 0; k < sizeof secs / sizeof secs[0]; k++) {
            for (int inter = 0; inter < 2; inter++) {
                int32_t D = k == 1 ? 24 : 32, rd = k == 1 ? 16 : 32; /* sums: rd / 2 */
                pa_rope r = rope_config((pa_rope_scaling)sc, k == 1 ? 16 : 0, rd);
                float c[N * 16], s[N * 16];
                double inv[16], af;
                pa_error err;
                memcpy(r.mrope_section, secs[k], sizeof r.mrope_section);
                r.mrope_interleaved = inter;
                TU_ASSERT_STATUS(pa_rope_cos_sin_mrope(&r, D, pos3, N, 200, c, s, &err),
                                 PA_STATUS_OK, &err);
                ref_rope_inv_freq(&r, D, 200, inv, &af);
                for (int t = 0; t < N; t++) {
                    for (int i = 0; i < rd / 2; i++) {
                        int row = ref_mrope_row(&r, i);
                        assert_int_equal(pa_rope_mrope_row(&r, i), row);
                        double th = (double)pos3[row * N + t] * inv[i];
                        assert_true(fabs(c[t * (rd / 2) + i] - cos(th) * af) <= 2e-7 * af);
                        assert_true(fabs(s[t * (rd / 2) + i] - sin(th) * af) <= 2e-7 * af);
                    }
                }
            }
        }
    }
}

/* The two layouts of the sections, spelled out for [2, 3, 3] (8
 * frequencies): Qwen2-VL's contiguous t t h h h w w w, Qwen3-VL's
 * interleaved t h w t h w h w (h and w take every third index from 1 and 2
 * up to 3 * their count, t the rest). */
static void test_mrope_rows_explicit(void **state)
{
    (void)state;
    pa_rope r;
    pa_scheme s;
    const int contiguous[8] = {0, 0, 1, 1, 1, 2, 2, 2}, interleaved[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    r = s.rope;
    r.mrope_section[0] = 2;
    r.mrope_section[1] = 3;
    r.mrope_section[2] = 3;
    for (int i = 0; i < 8; i++)
        assert_int_equal(pa_rope_mrope_row(&r, i), contiguous[i]);
    r.mrope_interleaved = true;
    for (int i = 0; i < 8; i++)
        assert_int_equal(pa_rope_mrope_row(&r, i), interleaved[i]);
    /* Qwen3-VL's own [24, 20, 20]: index 61 (61 % 3 == 1, < 60 is false) is t. */
    r.mrope_section[0] = 24;
    r.mrope_section[1] = 20;
    r.mrope_section[2] = 20;
    assert_int_equal(pa_rope_mrope_row(&r, 58), 1);
    assert_int_equal(pa_rope_mrope_row(&r, 59), 2);
    assert_int_equal(pa_rope_mrope_row(&r, 61), 0);
    assert_int_equal(pa_rope_mrope_row(&r, 62), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cos_sin_mrope),
        cmocka_unit_test(test_mrope_rows_explicit),
        cmocka_unit_test(test_cos_sin_vs_reference),
        cmocka_unit_test(test_cos_sin_runs_vs_reference),
        cmocka_unit_test(test_cos_sin_attention_factor),
        cmocka_unit_test(test_cos_sin_uses_max_position),
        cmocka_unit_test(test_pairs_explicit),
        cmocka_unit_test(test_apply_vs_reference),
        cmocka_unit_test(test_apply_in_place),
        cmocka_unit_test(test_apply_two_roundings),
        cmocka_unit_test(test_apply_empty),
    };
    return cmocka_run_group_tests_name("rope_apply", tests, rope_configs_setup, NULL);
}
