/* test_rope.c - lib/rope.c: validation (pa_rope_check and the errors of every
 * entry point), the inverse frequencies of every scaling and the attention
 * factors, against the double-precision reference of Hugging Face's formulas
 * in tests/ref_rope.c. The cos/sin tables and the rotation kernel are in
 * tests/lib/test_rope_apply.c; the shared configurations in tests/lib/rope_configs.h.
 *
 * Tolerances: inv_freq and attention factors are double on both sides and
 * must agree to 1e-10 relative.
 */
#include "testutil.h"
#include "ref_rope.h"
#include "rope_configs.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define PI 3.14159265358979323846

static void assert_close_d(const double *got, const double *want, int n, double rtol,
                           const char *what)
{
    for (int i = 0; i < n; i++) {
        if (!(fabs(got[i] - want[i]) <= rtol * fabs(want[i]))) {
            print_error("%s[%d] = %.17g, reference %.17g (rtol %.1e)\n", what, i, got[i], want[i],
                        rtol);
            fail();
        }
    }
}

/* ------------------------------------------------------------------------- */

static void test_rotary_dim(void **state)
{
    (void)state;
    pa_rope r = rope_defaults();
    assert_int_equal(pa_rope_rotary_dim(&r, 64), 64);
    r.rotary_dim = 32;
    assert_int_equal(pa_rope_rotary_dim(&r, 64), 32);
    assert_int_equal(pa_rope_check(&r, 64, NULL), PA_STATUS_OK);
    r.rotary_dim = 64;
    assert_int_equal(pa_rope_check(&r, 65, NULL), PA_STATUS_OK);
}

static void test_default_known_values(void **state)
{
    (void)state;
    pa_rope r = rope_defaults();
    double inv[32], af = -1.0;
    pa_error err;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 4, 0, inv, &af, &err), PA_STATUS_OK, &err);
    assert_true(inv[0] == 1.0);
    assert_true(fabs(inv[1] - 0.01) <= 1e-15);
    assert_true(af == 1.0);

    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 0, inv, NULL, &err), PA_STATUS_OK, &err);
    for (int i = 0; i < 32; i++)
        assert_true(fabs(inv[i] - pow(10000.0, -2.0 * i / 64.0)) <= 1e-14 * inv[i]);
}

static void test_linear_and_ntk_known_values(void **state)
{
    (void)state;
    pa_error err;
    double inv[2], af;
    pa_rope r = rope_config(PA_ROPE_SCALING_LINEAR, 0, 4);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 4, 0, inv, &af, &err), PA_STATUS_OK, &err);
    assert_true(fabs(inv[0] - 0.25) <= 1e-15 && fabs(inv[1] - 0.0025) <= 1e-15 && af == 1.0);
    r.factor = 0.5; /* linear accepts any positive factor */
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 4, 0, inv, &af, &err), PA_STATUS_OK, &err);
    assert_true(fabs(inv[1] - 0.02) <= 1e-15);

    /* ntk, r = 4, factor 2: base' = 1e4 * 2^2, inv[1] = base'^(-1/2) = 0.005. */
    r = rope_defaults();
    r.scaling = PA_ROPE_SCALING_NTK;
    r.factor = 2.0;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 4, 123456, inv, &af, &err), PA_STATUS_OK, &err);
    assert_true(inv[0] == 1.0 && fabs(inv[1] - 0.005) <= 1e-15 && af == 1.0);
}

/* Every scaling against the reference, for several head/rotary dims and
 * largest positions on both sides of original_max_position. */
static void test_inv_freq_vs_reference(void **state)
{
    (void)state;
    const struct {
        int32_t head_dim, rotary_dim;
    } dims[] = {{64, 0}, {64, 32}, {65, 64}, {128, 0}, {22, 22}, {8, 6}};
    const int32_t maxpos[] = {0, 100, 4095, 4096, 8191, 8192, 20000, 1000000};
    for (int sc = 0; sc < PA_ROPE_SCALING_COUNT; sc++) {
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            int32_t D = dims[d].head_dim, rd = dims[d].rotary_dim ? dims[d].rotary_dim : D;
            pa_rope r = rope_config((pa_rope_scaling)sc, dims[d].rotary_dim, rd);
            for (size_t m = 0; m < sizeof maxpos / sizeof maxpos[0]; m++) {
                double got[64], want[64], af, ref_af;
                pa_error err;
                TU_ASSERT_STATUS(pa_rope_inv_freq(&r, D, maxpos[m], got, &af, &err), PA_STATUS_OK,
                                 &err);
                ref_rope_inv_freq(&r, D, maxpos[m], want, &ref_af);
                assert_close_d(got, want, rd / 2, 1e-10, pa_rope_scaling_name(r.scaling));
                assert_close_d(&af, &ref_af, 1, 1e-12, "attention_factor");
            }
        }
    }
}

static void test_yarn_variants_vs_reference(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_YARN, 0, 128);
    const struct {
        double factor, beta_fast, beta_slow, mscale, mscale_all_dim;
        bool truncate;
        int32_t orig;
        double base;
    } v[] = {
        {4.0, 32.0, 1.0, 0.0, 0.0, true, 4096, 10000.0},
        {4.0, 0.0, 0.0, 0.0, 0.0, false, 4096, 10000.0},
        {40.0, 32.0, 1.0, 1.0, 0.707, true, 4096, 10000.0},
        {16.0, 64.0, 2.0, 0.0, 0.0, true, 2048, 500000.0},
        {32.0, 32.0, 1.0, 0.0, 0.0, false, 4, 10000.0}, /* tiny orig: high < low */
        {1.0, 32.0, 1.0, 0.0, 0.0, true, 4096, 10000.0},
        {8.0, 4.0, 4.0, 0.0, 0.0, true, 4096, 10000.0},
        {8.0, 32.0, 1.0, 0.0, 0.0, true, 6, 10000.0},    /* low == high == 0: +0.001 guard */
        {8.0, 32.0, 1.0, 0.5, 0.0, true, 4096, 10000.0}, /* mscale alone is ignored */
    };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        r.factor = v[k].factor;
        r.beta_fast = v[k].beta_fast;
        r.beta_slow = v[k].beta_slow;
        r.mscale = v[k].mscale;
        r.mscale_all_dim = v[k].mscale_all_dim;
        r.truncate = v[k].truncate;
        r.original_max_position = v[k].orig;
        r.base = v[k].base;
        for (int rd = 4; rd <= 128; rd *= 2) {
            double got[64], want[64], af, ref_af;
            pa_error err;
            r.rotary_dim = rd;
            TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, got, &af, &err), PA_STATUS_OK, &err);
            ref_rope_inv_freq(&r, 128, 0, want, &ref_af);
            assert_close_d(got, want, rd / 2, 1e-10, "yarn inv_freq");
            assert_close_d(&af, &ref_af, 1, 1e-12, "yarn attention_factor");
        }
    }
}

static void test_dynamic_is_stateless(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_DYNAMIC, 0, 64);
    pa_rope plain = rope_defaults();
    double a[32], b[32], c[32], d[32], p[32], af;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&plain, 64, 0, p, NULL, NULL), PA_STATUS_OK, NULL);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 4095, a, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(af == 1.0);
    /* Below original_max_position: the plain frequencies. */
    assert_memory_equal(a, p, sizeof a);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 8191, b, NULL, NULL), PA_STATUS_OK, NULL);
    /* seq = 8192 = 2 orig: base' = base * (2f - (f-1))^(r/(r-2)) = base * 3^(64/62). */
    double base2 = 10000.0 * pow(3.0, 64.0 / 62.0);
    for (int i = 0; i < 32; i++)
        assert_true(fabs(b[i] - pow(base2, -2.0 * i / 64.0)) <= 1e-12 * b[i]);
    assert_true(b[31] < a[31]);
    /* The same call twice, and a short call after a long one, are unaffected. */
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 8191, c, NULL, NULL), PA_STATUS_OK, NULL);
    assert_memory_equal(b, c, sizeof b);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 10, d, NULL, NULL), PA_STATUS_OK, NULL);
    assert_memory_equal(d, p, sizeof d);
    /* A negative largest position behaves as "short". */
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, -50, d, NULL, NULL), PA_STATUS_OK, NULL);
    assert_memory_equal(d, p, sizeof d);
}

static void test_yarn_known_values(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_YARN, 0, 128);
    pa_rope plain = rope_defaults();
    double inv[64], p[64], af;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&plain, 128, 0, p, NULL, NULL), PA_STATUS_OK, NULL);

    /* factor 1: the plain frequencies and attention factor 1. */
    r.factor = 1.0;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_close_d(inv, p, 64, 1e-14, "yarn factor 1");
    assert_true(af == 1.0);

    /* factor 4, orig 4096, base 1e4, r 128: the ramp runs from dim
     * floor(20.94) = 20 to ceil(45.03) = 46. */
    r.factor = 4.0;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(fabs(af - (0.1 * log(4.0) + 1.0)) <= 1e-15);
    for (int i = 0; i <= 20; i++)
        assert_true(fabs(inv[i] - p[i]) <= 1e-14 * p[i]);
    for (int i = 46; i < 64; i++)
        assert_true(fabs(inv[i] - p[i] / 4.0) <= 1e-14 * p[i]);
    /* i = 33 is half way: inv = p/4 * 0.5 + p * 0.5. */
    assert_true(fabs(inv[33] - p[33] * (0.125 + 0.5)) <= 1e-14 * p[33]);
    for (int i = 21; i < 46; i++)
        assert_true(inv[i] < p[i] && inv[i] > p[i] / 4.0);

    /* mscale / mscale_all_dim (DeepSeek). */
    r.factor = 40.0;
    r.mscale = 1.0;
    r.mscale_all_dim = 0.707;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, inv, &af, NULL), PA_STATUS_OK, NULL);
    double want = (0.1 * log(40.0) + 1.0) / (0.1 * 0.707 * log(40.0) + 1.0);
    assert_true(fabs(af - want) <= 1e-15);
    /* Only one of the two set: the plain default, whatever the other is. */
    r.mscale = 0.5;
    r.mscale_all_dim = 0.0;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(fabs(af - (0.1 * log(40.0) + 1.0)) <= 1e-15);
    /* An explicit attention factor wins. */
    r.attention_factor = 0.5;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(af == 0.5);
}

static void test_llama3_known_values(void **state)
{
    (void)state;
    pa_rope r = rope_defaults();
    r.scaling = PA_ROPE_SCALING_LLAMA3;
    r.base = 500000.0;
    /* factor 0 and orig 0 mean 8 and 8192; low 1 and high 4 from pa_scheme_init. */
    pa_rope plain = r;
    plain.scaling = PA_ROPE_SCALING_NONE;
    double inv[64], p[64], af;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&plain, 128, 0, p, NULL, NULL), PA_STATUS_OK, NULL);
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(af == 1.0);
    assert_true(inv[0] == p[0]);
    assert_true(fabs(inv[63] - p[63] / 8.0) <= 1e-14 * p[63]);
    int n_high = 0, n_low = 0, n_mid = 0;
    for (int i = 0; i < 64; i++) {
        double wl = 2.0 * PI / p[i];
        if (wl < 8192.0 / 4.0) {
            assert_true(inv[i] == p[i]);
            n_high++;
        } else if (wl > 8192.0) {
            assert_true(fabs(inv[i] - p[i] / 8.0) <= 1e-14 * p[i]);
            n_low++;
        } else {
            double smooth = (8192.0 / wl - 1.0) / 3.0;
            assert_true(fabs(inv[i] - ((1 - smooth) * p[i] / 8.0 + smooth * p[i])) <= 1e-13 * p[i]);
            n_mid++;
        }
    }
    assert_true(n_high > 0 && n_low > 0 && n_mid > 0);

    /* The explicit equivalents of the defaults give the same result. */
    double e[64];
    r.factor = 8.0;
    r.original_max_position = 8192;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 128, 0, e, NULL, NULL), PA_STATUS_OK, NULL);
    assert_memory_equal(e, inv, sizeof e);
}

/* The bands of pa_rope_bands_of, from the definitions: HF's
 * find_correction_dim(n, dim, base, max_pos) = dim ln(max_pos / (n 2 pi)) /
 * (2 ln base) of beta_fast and beta_slow (floored, ceiled with truncate),
 * and llama3's orig / high_freq_factor, orig / low_freq_factor. */
static void test_bands(void **state)
{
    (void)state;
    pa_rope_bands b;
    pa_error err;
    pa_rope r = rope_config(PA_ROPE_SCALING_YARN, 0, 128);
    r.factor = 4.0;
    TU_ASSERT_STATUS(pa_rope_bands_of(&r, 128, &b, &err), PA_STATUS_OK, &err);
    /* orig 4096, base 1e4, r 128: 20.94 and 45.03 (test_yarn_known_values) */
    assert_true(b.yarn_low == 20.0 && b.yarn_high == 46.0);
    assert_true(b.llama3_low_freq_wavelength == -1.0 && b.llama3_high_freq_wavelength == -1.0);
    r.truncate = false;
    r.beta_fast = 16.0;
    r.beta_slow = 2.0;
    TU_ASSERT_STATUS(pa_rope_bands_of(&r, 128, &b, &err), PA_STATUS_OK, &err);
    {
        const double want_lo = 128.0 * log(4096.0 / (16.0 * 2.0 * PI)) / (2.0 * log(10000.0));
        const double want_hi = 128.0 * log(4096.0 / (2.0 * 2.0 * PI)) / (2.0 * log(10000.0));
        assert_true(fabs(b.yarn_low - want_lo) <= 1e-12 && fabs(b.yarn_high - want_hi) <= 1e-12);
    }
    pa_rope l = rope_defaults();
    l.scaling = PA_ROPE_SCALING_LLAMA3;
    l.base = 500000.0;
    l.low_freq_factor = 2.0;
    l.high_freq_factor = 8.0;
    TU_ASSERT_STATUS(pa_rope_bands_of(&l, 128, &b, &err), PA_STATUS_OK, &err);
    assert_true(b.llama3_high_freq_wavelength == 8192.0 / 8.0); /* orig 0 means 8192 */
    assert_true(b.llama3_low_freq_wavelength == 8192.0 / 2.0);
    assert_true(b.yarn_low == -1.0);
    l = rope_defaults();
    TU_ASSERT_STATUS(pa_rope_bands_of(&l, 64, &b, &err), PA_STATUS_OK, &err);
    assert_true(b.yarn_low == -1.0 && b.llama3_low_freq_wavelength == -1.0);
    assert_int_equal(pa_rope_bands_of(&l, 64, NULL, &err), PA_STATUS_INVALID_ARGUMENT);
    l.rotary_dim = 65;
    assert_int_equal(pa_rope_bands_of(&l, 64, &b, &err), PA_STATUS_INVALID_ARGUMENT);
}

static void test_longrope_switch_and_attention(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    pa_rope plain = rope_defaults();
    double inv[32], p[32], af;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&plain, 64, 0, p, NULL, NULL), PA_STATUS_OK, NULL);

    /* max_position + 1 = 4096 is not > orig: short factors. */
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 4095, inv, &af, NULL), PA_STATUS_OK, NULL);
    for (int i = 0; i < 32; i++)
        assert_true(fabs(inv[i] - p[i] / (double)g_short[i]) <= 1e-13 * p[i]);
    assert_true(fabs(af - sqrt(1.0 + log(32.0) / log(4096.0))) <= 1e-15);
    /* max_position + 1 = 4097 > orig: long factors. */
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 4096, inv, &af, NULL), PA_STATUS_OK, NULL);
    for (int i = 0; i < 32; i++)
        assert_true(fabs(inv[i] - p[i] / (double)g_long[i]) <= 1e-13 * p[i]);

    /* factor 0 (= 1) and factor <= 1: attention factor 1. */
    r.factor = 0.0;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 10, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(af == 1.0);
    r.factor = 0.5;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 10, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(af == 1.0);
    r.attention_factor = 1.25;
    TU_ASSERT_STATUS(pa_rope_inv_freq(&r, 64, 10, inv, &af, NULL), PA_STATUS_OK, NULL);
    assert_true(af == 1.25);
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

/* Runs pa_rope_check, pa_rope_inv_freq and pa_rope_cos_sin on a bad
 * configuration and checks status, field and untouched outputs. */
static void expect_error(const pa_rope *r, int32_t head_dim, pa_status want, const char *field,
                         const char *message, int line)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    pa_status st = pa_rope_check(r, head_dim, &err);
    if (st != want || strcmp(err.field, field) != 0) {
        print_error("line %d: got %s '%s' (%s), want %s '%s'\n", line, pa_status_name(st),
                    err.field, err.message, pa_status_name(want), field);
        fail();
    }
    assert_int_equal(err.status, want);
    assert_true(strlen(err.message) > 0);
    if (message != NULL)
        assert_string_equal(err.message, message);
    assert_int_equal(pa_rope_check(r, head_dim, NULL), want);

    double inv[4] = {-1, -1, -1, -1}, af = -1;
    memset(&err, 0, sizeof err);
    assert_int_equal(pa_rope_inv_freq(r, head_dim, 10, inv, &af, &err), want);
    assert_string_equal(err.field, field);
    assert_true(inv[0] == -1 && inv[3] == -1 && af == -1);

    const int32_t pos[2] = {0, 1};
    float c[4] = {-1, -1, -1, -1}, s[4] = {-1, -1, -1, -1};
    memset(&err, 0, sizeof err);
    assert_int_equal(pa_rope_cos_sin(r, head_dim, pos, 2, 1, c, s, &err), want);
    assert_string_equal(err.field, field);
    assert_true(c[0] == -1 && s[0] == -1 && c[3] == -1 && s[3] == -1);
}

#define EXPECT_ERROR(r, hd, st, field, msg) expect_error((r), (hd), (st), (field), (msg), __LINE__)

static void test_errors_common(void **state)
{
    (void)state;
    pa_rope r;
    pa_error err;
    assert_int_equal(pa_rope_check(NULL, 64, &err), PA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(err.field, "scheme");

    r = rope_defaults();
    r.layout = (pa_rope_layout)7;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.layout", NULL);
    r = rope_defaults();
    r.scaling = PA_ROPE_SCALING_COUNT;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.scaling", NULL);
    r.scaling = (pa_rope_scaling)-1;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.scaling", NULL);

    r = rope_defaults();
    EXPECT_ERROR(&r, 0, PA_STATUS_OUT_OF_RANGE, "head_dim", "head_dim=0 must be >= 1");
    EXPECT_ERROR(&r, -4, PA_STATUS_OUT_OF_RANGE, "head_dim", NULL);
    /* rotary_dim 0 means head_dim, which must then be even. */
    EXPECT_ERROR(&r, 65, PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim", NULL);
    EXPECT_ERROR(&r, 1, PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim", NULL);
    r.rotary_dim = 65;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim",
                 "scheme.rotary_dim=65 must be even and <= head_dim=64");
    r.rotary_dim = 66;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.rotary_dim",
                 "scheme.rotary_dim=66 must be even and <= head_dim=64");
    r.rotary_dim = -2;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.rotary_dim", NULL);

    r = rope_defaults();
    r.base = 1.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.base", "scheme.base=1 must be > 1");
    r.base = 0.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.base", NULL);
    r.base = NAN;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.base", NULL);
    r.base = INFINITY;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.base", NULL);

    r = rope_defaults();
    r.attention_factor = -1.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.attention_factor", NULL);
    r.attention_factor = INFINITY;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.attention_factor", NULL);
    /* Finite in double, infinite as the float32 factor of cos and sin. */
    r.attention_factor = 1e39;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.attention_factor", NULL);
    r.attention_factor = FLT_MAX; /* the largest that is still finite */
    assert_int_equal(pa_rope_check(&r, 64, &err), PA_STATUS_OK);
}

static void test_errors_factor(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_LINEAR, 0, 64);
    r.factor = 0.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.factor",
                 "scheme.factor is required for rope scaling 'linear'");
    r.factor = -2.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.factor", NULL);
    r.factor = NAN;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.factor", NULL);

    r = rope_config(PA_ROPE_SCALING_NTK, 0, 64);
    r.factor = 0.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.factor",
                 "scheme.factor is required for rope scaling 'ntk'");
    r.factor = 0.5;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.factor",
                 "scheme.factor=0.5 must be >= 1 for rope scaling 'ntk'");
    r.factor = 2.0;
    r.rotary_dim = 2;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.rotary_dim", NULL);

    r = rope_config(PA_ROPE_SCALING_DYNAMIC, 0, 64);
    r.factor = 0.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.factor", NULL);
    r.factor = 0.99;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.factor", NULL);
    r.factor = 2.0;
    r.original_max_position = 0;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.original_max_position",
                 "scheme.original_max_position is required for rope scaling 'dynamic'");
    r.original_max_position = -1;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.original_max_position", NULL);
    r.original_max_position = 4096;
    EXPECT_ERROR(&r, 2, PA_STATUS_OUT_OF_RANGE, "scheme.rotary_dim", NULL);
}

static void test_errors_yarn(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_YARN, 0, 64);
    r.factor = 0.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.factor",
                 "scheme.factor is required for rope scaling 'yarn'");
    r.factor = 0.9;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.factor", NULL);
    r.factor = INFINITY;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.factor", NULL);
    r = rope_config(PA_ROPE_SCALING_YARN, 0, 64);
    r.original_max_position = 0;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.original_max_position",
                 "scheme.original_max_position is required for rope scaling 'yarn'");
    r = rope_config(PA_ROPE_SCALING_YARN, 0, 64);
    r.beta_fast = -1.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.beta_fast", NULL);
    r.beta_fast = 1.0;
    r.beta_slow = 32.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.beta_fast",
                 "scheme.beta_fast=1 must be >= scheme.beta_slow=32");
    r.beta_fast = 32.0;
    r.beta_slow = NAN;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.beta_slow", NULL);
    r.beta_slow = 1.0;
    r.mscale = -1.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.mscale", NULL);
    r.mscale = 1.0;
    r.mscale_all_dim = INFINITY;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.mscale_all_dim", NULL);
}

static void test_errors_llama3(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_LLAMA3, 0, 64);
    r.low_freq_factor = 4.0;
    r.high_freq_factor = 1.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.high_freq_factor",
                 "scheme.low_freq_factor=4 must be < scheme.high_freq_factor=1");
    r.high_freq_factor = 4.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.high_freq_factor", NULL);
    r.low_freq_factor = 0.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.low_freq_factor", NULL);
    r.low_freq_factor = NAN;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.low_freq_factor", NULL);
    r = rope_config(PA_ROPE_SCALING_LLAMA3, 0, 64);
    r.high_freq_factor = INFINITY;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.high_freq_factor", NULL);
    r = rope_config(PA_ROPE_SCALING_LLAMA3, 0, 64);
    r.factor = -8.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.factor", NULL);
    r.factor = 8.0;
    r.original_max_position = -8192;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.original_max_position", NULL);
}

static void test_errors_longrope(void **state)
{
    (void)state;
    pa_rope r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    r.original_max_position = 0;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.original_max_position",
                 "scheme.original_max_position is required for rope scaling 'longrope'");
    r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    r.short_factor_len = 3;
    EXPECT_ERROR(&r, 64, PA_STATUS_SHAPE_MISMATCH, "scheme.short_factor",
                 "scheme.short_factor has 3 values, expected rotary_dim/2=32");
    r = rope_config(PA_ROPE_SCALING_LONGROPE, 32, 32);
    r.long_factor_len = 32;
    EXPECT_ERROR(&r, 64, PA_STATUS_SHAPE_MISMATCH, "scheme.long_factor",
                 "scheme.long_factor has 32 values, expected rotary_dim/2=16");
    r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    r.short_factor = NULL;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.short_factor",
                 "scheme.short_factor is required for rope scaling 'longrope'");
    r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    r.long_factor = NULL;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.long_factor", NULL);

    float bad[32];
    for (int i = 0; i < 32; i++)
        bad[i] = 1.0f;
    bad[2] = 0.0f;
    r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    r.short_factor = bad;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.short_factor[2]", NULL);
    bad[2] = 1.0f;
    bad[31] = NAN;
    r.short_factor = g_short;
    r.long_factor = bad;
    EXPECT_ERROR(&r, 64, PA_STATUS_INVALID_ARGUMENT, "scheme.long_factor[31]", NULL);

    r = rope_config(PA_ROPE_SCALING_LONGROPE, 0, 64);
    r.factor = -1.0;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.factor", NULL);
    /* ln(1) = 0 in the default attention factor. */
    r.factor = 4.0;
    r.original_max_position = 1;
    EXPECT_ERROR(&r, 64, PA_STATUS_OUT_OF_RANGE, "scheme.original_max_position", NULL);
    r.attention_factor = 1.5;
    assert_int_equal(pa_rope_check(&r, 64, NULL), PA_STATUS_OK);
}

/* The original_max_position in effect: llama3's default for 0, the field
 * otherwise, 0 for a scaling without one. */
static void test_original_max_position(void **state)
{
    (void)state;
    pa_rope r;
    memset(&r, 0, sizeof r);
    r.scaling = PA_ROPE_SCALING_LLAMA3;
    assert_int_equal(pa_rope_original_max_position(&r), 8192);
    r.original_max_position = 4096;
    assert_int_equal(pa_rope_original_max_position(&r), 4096);
    r.scaling = PA_ROPE_SCALING_YARN;
    assert_int_equal(pa_rope_original_max_position(&r), 4096);
    r.original_max_position = 0;
    assert_int_equal(pa_rope_original_max_position(&r), 0);
    assert_int_equal(pa_rope_original_max_position(NULL), 0);
}

static void test_errors_arguments(void **state)
{
    (void)state;
    pa_rope r = rope_defaults();
    pa_error err;
    const int32_t pos[2] = {0, 1};
    float c[64], s[64];
    c[0] = s[0] = -1.0f;
    assert_int_equal(pa_rope_inv_freq(&r, 64, 0, NULL, NULL, &err), PA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(err.field, "inv_freq");
    assert_int_equal(pa_rope_cos_sin(&r, 64, pos, -1, 1, c, s, &err), PA_STATUS_OUT_OF_RANGE);
    assert_string_equal(err.field, "positions");
    assert_int_equal(pa_rope_cos_sin(&r, 64, NULL, 2, 1, c, s, &err), PA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(err.field, "positions");
    assert_int_equal(pa_rope_cos_sin(&r, 64, pos, 2, 1, NULL, s, &err), PA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(err.field, "cos");
    assert_int_equal(pa_rope_cos_sin(&r, 64, pos, 2, 1, c, NULL, &err), PA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(err.field, "sin");
    assert_true(c[0] == -1.0f && s[0] == -1.0f);
    /* n = 0 is fine and writes nothing, even with NULL tables. */
    TU_ASSERT_STATUS(pa_rope_cos_sin(&r, 64, NULL, 0, 0, NULL, NULL, &err), PA_STATUS_OK, &err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rotary_dim),
        cmocka_unit_test(test_default_known_values),
        cmocka_unit_test(test_linear_and_ntk_known_values),
        cmocka_unit_test(test_inv_freq_vs_reference),
        cmocka_unit_test(test_yarn_variants_vs_reference),
        cmocka_unit_test(test_dynamic_is_stateless),
        cmocka_unit_test(test_yarn_known_values),
        cmocka_unit_test(test_llama3_known_values),
        cmocka_unit_test(test_bands),
        cmocka_unit_test(test_longrope_switch_and_attention),
        cmocka_unit_test(test_errors_common),
        cmocka_unit_test(test_errors_factor),
        cmocka_unit_test(test_errors_yarn),
        cmocka_unit_test(test_errors_llama3),
        cmocka_unit_test(test_errors_longrope),
        cmocka_unit_test(test_errors_arguments),
        cmocka_unit_test(test_original_max_position),
    };
    return cmocka_run_group_tests_name("rope", tests, rope_configs_setup, NULL);
}
