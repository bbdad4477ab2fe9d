/* rope2d.c - 2-D RoPE for image patches (posattn.h pa_rope2d): the angle of
 * each rotary pair from a token's row or column coordinate, as timm's axial
 * RotaryEmbeddingCat and Pixtral's precompute_freqs_cis_2d lay them out.
 * The rotation itself is lib/rope.c's (pa_rope_apply and the kernels' rope
 * path); this file checks the configuration and fills the tables.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PI 3.14159265358979323846

static const char *const variant_names[] = {"axial", "pixtral", "dinov3", "mixed"};
static const char *const normalize_names[] = {"separate", "max", "min"};

static int index_of(const char *const *names, int n, const char *name)
{
    for (int i = 0; name != NULL && i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

const char *pa_rope2d_variant_name(pa_rope2d_variant variant)
{
    return variant >= PA_ROPE2D_AXIAL && variant <= PA_ROPE2D_MIXED ? variant_names[variant] : NULL;
}

bool pa_rope2d_variant_from_name(const char *name, pa_rope2d_variant *out)
{
    const int i = index_of(variant_names, 4, name);
    if (i >= 0)
        *out = (pa_rope2d_variant)i;
    return i >= 0;
}

const char *pa_rope2d_normalize_name(pa_rope2d_normalize n)
{
    return n >= PA_ROPE2D_NORMALIZE_SEPARATE && n <= PA_ROPE2D_NORMALIZE_MIN ? normalize_names[n]
                                                                             : NULL;
}

bool pa_rope2d_normalize_from_name(const char *name, pa_rope2d_normalize *out)
{
    const int i = index_of(normalize_names, 3, name);
    if (i >= 0)
        *out = (pa_rope2d_normalize)i;
    return i >= 0;
}

static pa_status both_or_none(const char *a, int32_t va, const char *b, int32_t vb, pa_error *err)
{
    if (va < 0 || vb < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, va < 0 ? a : b, "%s=%d must be >= 0",
                        va < 0 ? a : b, (int)(va < 0 ? va : vb));
    if ((va == 0) != (vb == 0))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, va == 0 ? a : b,
                        "%s=%d and %s=%d: give both (rows and columns) or neither", a, (int)va, b,
                        (int)vb);
    return PA_STATUS_OK;
}

pa_status pa_rope2d_check(const pa_rope2d *r, int32_t head_dim, pa_error *err)
{
    pa_status st;
    if (r == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "rope2d configuration is NULL");
    if (pa_rope2d_variant_name(r->variant) == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.variant",
                        "scheme.variant=%d is not axial, pixtral, dinov3 or mixed",
                        (int)r->variant);
    if (pa_rope2d_normalize_name(r->normalize) == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.normalize",
                        "scheme.normalize=%d is not separate, max or min", (int)r->normalize);
    if (head_dim < 4 || head_dim % 4 != 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "head_dim",
                        "rope2d gives a quarter of the dims to each axis's pairs: head_dim=%d "
                        "must be a multiple of 4",
                        (int)head_dim);
    if (!isfinite(r->base) || !(r->base > 0.0))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.base",
                        "scheme.base=%g must be finite and > 0", r->base);
    if (pa_rope_layout_name(r->layout) == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.layout",
                        "scheme.layout=%d is not a rope layout", (int)r->layout);
    if ((st = both_or_none("scheme.grid_rows", r->grid_rows, "scheme.grid_cols", r->grid_cols,
                           err)) != PA_STATUS_OK ||
        (st = both_or_none("scheme.ref_rows", r->ref_rows, "scheme.ref_cols", r->ref_cols, err)) !=
            PA_STATUS_OK)
        return st;
    if ((int64_t)r->grid_rows * r->grid_cols > INT32_MAX)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.grid_rows",
                        "a grid of %d x %d patches is past 2^31 tokens", (int)r->grid_rows,
                        (int)r->grid_cols);
    if (r->ref_rows > 0 && r->grid_rows == 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.ref_rows",
                        "the reference grid rescales coordinates by ref / grid (timm's "
                        "ref_feat_shape): it needs the scheme's grid");
    if (r->variant != PA_ROPE2D_AXIAL && (r->ref_rows > 0 || r->grid_offset != 0.0))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT,
                        r->ref_rows > 0 ? "scheme.ref_rows" : "scheme.grid_offset",
                        "%s is timm's (variant axial), not %s's",
                        r->ref_rows > 0 ? "scheme.ref_rows" : "scheme.grid_offset",
                        pa_rope2d_variant_name(r->variant));
    if ((r->in_pixels || r->max_res != 0.0 || r->linear_bands) && r->variant != PA_ROPE2D_AXIAL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT,
                        r->in_pixels        ? "scheme.in_pixels"
                        : r->max_res != 0.0 ? "scheme.max_res"
                                            : "scheme.linear_bands",
                        "in_pixels, max_res and linear_bands are timm's (variant axial), not %s's",
                        pa_rope2d_variant_name(r->variant));
    if (!r->in_pixels && (r->max_res != 0.0 || r->linear_bands))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT,
                        r->max_res != 0.0 ? "scheme.max_res" : "scheme.linear_bands",
                        "%s shapes timm's pixel bands: it needs in_pixels",
                        r->max_res != 0.0 ? "scheme.max_res" : "scheme.linear_bands");
    if (r->in_pixels && r->grid_rows == 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_rows",
                        "in_pixels spreads each axis's coordinates over [-1, 1] by the grid's "
                        "size: it needs the scheme's grid (rows, cols)");
    if (r->in_pixels && r->grid_offset != 0.0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_offset",
                        "timm adds grid_offset to index coordinates only, not to in_pixels' "
                        "[-1, 1] ones: leave scheme.grid_offset 0");
    if (!isfinite(r->max_res) || r->max_res < 0.0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.max_res",
                        "scheme.max_res=%g must be finite and > 0 (0: timm's 224)", r->max_res);
    if (!isfinite(r->grid_offset))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_offset",
                        "scheme.grid_offset=%g is not finite", r->grid_offset);
    if (r->prefix_tokens < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.prefix_tokens",
                        "scheme.prefix_tokens=%d must be >= 0", (int)r->prefix_tokens);
    if (r->variant == PA_ROPE2D_MIXED && r->freqs == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.freqs",
                        "mixed needs its learned frequencies, scheme.freqs [2, H, D/2]");
    if (r->variant == PA_ROPE2D_MIXED) {
        for (int32_t i = 0; i < r->num_freqs; i++)
            if (!isfinite(r->freqs[i]))
                return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.freqs",
                                "scheme.freqs[%d] is not finite", (int)i);
    }
    if (r->variant == PA_ROPE2D_DINOV3 && r->grid_rows == 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.grid_rows",
                        "dinov3 normalises coordinates by the grid's size: it needs the "
                        "scheme's grid (rows, cols)");
    if (r->variant != PA_ROPE2D_DINOV3 && r->normalize != PA_ROPE2D_NORMALIZE_SEPARATE)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.normalize",
                        "scheme.normalize is dinov3's, not %s's",
                        pa_rope2d_variant_name(r->variant));
    if (r->merge_size < 0 || r->merge_size > 64)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.merge_size",
                        "scheme.merge_size=%d must be in [0, 64]", (int)r->merge_size);
    if (r->merge_size > 1 &&
        (r->grid_rows == 0 || r->grid_rows % r->merge_size || r->grid_cols % r->merge_size))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.merge_size",
                        "scheme.merge_size=%d orders the grid in %d x %d blocks: the grid's "
                        "rows and cols (%d, %d) must be multiples of it",
                        (int)r->merge_size, (int)r->merge_size, (int)r->merge_size,
                        (int)r->grid_rows, (int)r->grid_cols);
    return PA_STATUS_OK;
}

void pa_rope2d_rope(const pa_rope2d *r, pa_rope *out)
{
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    *out = s.rope;
    out->base = r->base;
    out->layout = r->layout;
}

double pa_rope2d_pair(const pa_rope2d *r, int32_t head_dim, int32_t p, int *axis)
{
    const int32_t q = head_dim / 4; /* pairs per axis */
    const int32_t k = p < q ? p : p - q;
    *axis = p < q ? 0 : 1;
    if (r->variant == PA_ROPE2D_PIXTRAL) /* theta_j = base^(-2j/D), j = 2k or 2k + 1 */
        return pow(r->base, -2.0 * (2.0 * k + *axis) / head_dim);
    if (r->variant == PA_ROPE2D_DINOV3) /* 2 pi / periods, periods = base^(2k / (D/2)) */
        return 2.0 * PI / pow(r->base, 2.0 * k / (head_dim / 2));
    if (r->in_pixels) { /* timm pixel_freq_bands: pi linspace(1, max / 2) or 2^linspace */
        const double mx = r->max_res != 0.0 ? r->max_res : 224.0;
        const double t = q > 1 ? (double)k / (q - 1) : 0.0;
        return PI * (r->linear_bands ? 1.0 + t * (mx / 2.0 - 1.0) : exp2(t * (log2(mx) - 1.0)));
    }
    return pow(r->base, -(double)k / q); /* timm freq_bands(step=1): base^(-k/nb) */
}

/* The grid covers n tokens (when the coordinates come from it). */
static pa_status check_tokens(const pa_rope2d *r, const int32_t *positions2, int32_t n,
                              float *cos_out, float *sin_out, pa_error *err)
{
    if (n < 0 || (n > 0 && (cos_out == NULL || sin_out == NULL)))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions",
                        "n=%d tokens need non-NULL tables", (int)n);
    if (positions2 == NULL) {
        const int64_t cells = (int64_t)r->grid_rows * r->grid_cols;
        if (cells == 0)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions",
                            "rope2d needs each token's (row, column): send the 2-D positions "
                            "[2, L] or the scheme's grid (rows, cols)");
        if ((int64_t)n != r->prefix_tokens + cells)
            return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "positions",
                            "%d tokens, but a grid of %d x %d patches after %d prefix tokens "
                            "is %lld",
                            (int)n, (int)r->grid_rows, (int)r->grid_cols, (int)r->prefix_tokens,
                            (long long)(r->prefix_tokens + cells));
    }
    return PA_STATUS_OK;
}

/* Token t's coordinates as the variant forms them (t >= prefix_tokens). */
static void coords(const pa_rope2d *r, const int32_t *positions2, int32_t n, int32_t t, double *c)
{
    const int32_t pre = r->prefix_tokens;
    double scale[2] = {1.0, 1.0};
    if (r->ref_rows > 0) { /* timm: t / feat_shape * ref_feat_shape */
        scale[0] = (double)r->ref_rows / r->grid_rows;
        scale[1] = (double)r->ref_cols / r->grid_cols;
    }
    if (r->variant == PA_ROPE2D_DINOV3) { /* 2 (i + 1/2) / n - 1 */
        const int32_t big = r->grid_rows > r->grid_cols ? r->grid_rows : r->grid_cols;
        const int32_t small = r->grid_rows < r->grid_cols ? r->grid_rows : r->grid_cols;
        const pa_rope2d_normalize nz = r->normalize;
        scale[0] = 2.0 / (nz == PA_ROPE2D_NORMALIZE_MAX   ? big
                          : nz == PA_ROPE2D_NORMALIZE_MIN ? small
                                                          : r->grid_rows);
        scale[1] = 2.0 / (nz == PA_ROPE2D_NORMALIZE_MAX   ? big
                          : nz == PA_ROPE2D_NORMALIZE_MIN ? small
                                                          : r->grid_cols);
    }
    if (positions2 != NULL) {
        c[0] = positions2[t];
        c[1] = positions2[(size_t)n + t];
    } else if (r->merge_size > 1) { /* m x m blocks, row-major in and out */
        const int32_t m = r->merge_size, u = t - pre, blk = u / (m * m), in = u % (m * m),
                      bcols = r->grid_cols / m;
        c[0] = (double)(blk / bcols) * m + in / m;
        c[1] = (double)(blk % bcols) * m + in % m;
    } else {
        c[0] = (t - pre) / r->grid_cols;
        c[1] = (t - pre) % r->grid_cols;
    }
    if (r->in_pixels) { /* linspace(-1, 1, n), then ref / grid */
        c[0] = (r->grid_rows > 1 ? -1.0 + 2.0 * c[0] / (r->grid_rows - 1) : -1.0) * scale[0];
        c[1] = (r->grid_cols > 1 ? -1.0 + 2.0 * c[1] / (r->grid_cols - 1) : -1.0) * scale[1];
    } else if (r->variant == PA_ROPE2D_DINOV3) {
        c[0] = (c[0] + 0.5) * scale[0] - 1.0;
        c[1] = (c[1] + 0.5) * scale[1] - 1.0;
    } else {
        c[0] = (c[0] + r->grid_offset) * scale[0];
        c[1] = (c[1] + r->grid_offset) * scale[1];
    }
}

/* Prefix tokens: cos 1, sin 0. */
static void unrotated(float *cos_out, float *sin_out, int32_t pre, int32_t half)
{
    for (int32_t t = 0; t < pre; t++) {
        for (int32_t p = 0; p < half; p++) {
            cos_out[(size_t)t * half + p] = 1.0f;
            sin_out[(size_t)t * half + p] = 0.0f;
        }
    }
}

pa_status pa_rope2d_cos_sin(const pa_rope2d *r, int32_t head_dim, const int32_t *positions2,
                            int32_t n, float *cos_out, float *sin_out, pa_error *err)
{
    enum { CHUNK = 64 };
    pa_status st = pa_rope2d_check(r, head_dim, err);
    int32_t half, pre;
    if (st != PA_STATUS_OK)
        return st;
    if (r->variant == PA_ROPE2D_MIXED)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.variant",
                        "mixed has angles per head: pa_rope2d_cos_sin_mixed");
    if ((st = check_tokens(r, positions2, n, cos_out, sin_out, err)) != PA_STATUS_OK)
        return st;
    half = head_dim / 2;
    pre = r->prefix_tokens < n ? r->prefix_tokens : n;
    unrotated(cos_out, sin_out, pre, half);
    for (int32_t p0 = 0; p0 < half; p0 += CHUNK) {
        const int32_t w = half - p0 < CHUNK ? half - p0 : CHUNK;
        double f[CHUNK];
        int ax[CHUNK];
        for (int32_t i = 0; i < w; i++)
            f[i] = pa_rope2d_pair(r, head_dim, p0 + i, &ax[i]);
        for (int32_t t = pre; t < n; t++) {
            double c[2];
            coords(r, positions2, n, t, c);
            for (int32_t i = 0; i < w; i++) {
                const double a = c[ax[i]] * f[i];
                cos_out[(size_t)t * half + p0 + i] = (float)cos(a);
                sin_out[(size_t)t * half + p0 + i] = (float)sin(a);
            }
        }
    }
    return PA_STATUS_OK;
}

pa_status pa_rope2d_cos_sin_mixed(const pa_rope2d *r, int32_t head_dim, int32_t num_heads,
                                  const int32_t *positions2, int32_t n, float *cos_out,
                                  float *sin_out, pa_error *err)
{
    pa_status st = pa_rope2d_check(r, head_dim, err);
    int32_t half, pre;
    size_t plane;
    if (st != PA_STATUS_OK)
        return st;
    if (r->variant != PA_ROPE2D_MIXED)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.variant",
                        "pa_rope2d_cos_sin_mixed is for variant mixed, not %s",
                        pa_rope2d_variant_name(r->variant));
    if ((int64_t)r->num_freqs != (int64_t)num_heads * head_dim)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.freqs",
                        "scheme.freqs has %d values but [2, H, D/2] is 2 x %d x %d = %lld",
                        (int)r->num_freqs, (int)num_heads, (int)(head_dim / 2),
                        (long long)num_heads * head_dim);
    if ((st = check_tokens(r, positions2, n, cos_out, sin_out, err)) != PA_STATUS_OK)
        return st;
    half = head_dim / 2;
    pre = r->prefix_tokens < n ? r->prefix_tokens : n;
    plane = (size_t)n * half;
    for (int32_t h = 0; h < num_heads; h++) {
        const float *fx = r->freqs + (size_t)h * half;
        const float *fy = r->freqs + ((size_t)num_heads + h) * half;
        float *co = cos_out + (size_t)h * plane, *si = sin_out + (size_t)h * plane;
        unrotated(co, si, pre, half);
        for (int32_t t = pre; t < n; t++) {
            double c[2];
            coords(r, positions2, n, t, c);
            for (int32_t p = 0; p < half; p++) {
                const double a = c[0] * fx[p] + c[1] * fy[p];
                co[(size_t)t * half + p] = (float)cos(a);
                si[(size_t)t * half + p] = (float)sin(a);
            }
        }
    }
    return PA_STATUS_OK;
}
