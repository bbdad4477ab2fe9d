/* xpos.c - xPos (Sun et al. 2022): RoPE whose pairs also decay as
 * zeta_i^((m - n) / scale_base), as microsoft/torchscale's XPOS computes it.
 * The rotation is lib/rope.c's; this file adds the per-position factors,
 * folded into the cos and sin tables as torchscale folds them.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

pa_status pa_xpos_check(const pa_xpos *x, int32_t head_dim, pa_error *err)
{
    if (x == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "xpos configuration is NULL");
    if (head_dim < 2 || head_dim % 2 != 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "head_dim",
                        "xpos rotates pairs: head_dim=%d must be even and >= 2", (int)head_dim);
    if (!isfinite(x->base) || !(x->base > 0.0))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.base",
                        "scheme.base=%g must be finite and > 0", x->base);
    if (!isfinite(x->scale_base) || !(x->scale_base > 0.0))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.scale_base",
                        "scheme.scale_base=%g must be finite and > 0", x->scale_base);
    if (pa_rope_layout_name(x->layout) == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.layout",
                        "scheme.layout=%d is not a rope layout", (int)x->layout);
    return PA_STATUS_OK;
}

void pa_xpos_rope(const pa_xpos *x, pa_rope *out)
{
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    *out = s.rope;
    out->base = x->base;
    out->layout = x->layout;
}

void pa_xpos_zeta(int32_t head_dim, double *zeta)
{
    for (int32_t i = 0; i < head_dim / 2; i++)
        zeta[i] = (2.0 * i + 0.4 * head_dim) / (1.4 * head_dim);
}

/* log2 of the largest factor at distance d from the centre: 1 / zeta_0 =
 * 3.5 for every head_dim. */
static double log2_factor(const pa_xpos *x, double d)
{
    return d / x->scale_base * log2(3.5);
}

pa_status pa_xpos_centre(const pa_xpos *x, const int32_t *qpos, int32_t nq, const int32_t *kpos,
                         int32_t nk, bool centre_zero, int64_t *centre, pa_error *err)
{
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int32_t i = 0; i < nq; i++) {
        lo = qpos[i] < lo ? qpos[i] : lo;
        hi = qpos[i] > hi ? qpos[i] : hi;
    }
    for (int32_t j = 0; j < nk; j++) {
        lo = kpos[j] < lo ? kpos[j] : lo;
        hi = kpos[j] > hi ? kpos[j] : hi;
    }
    if (lo > hi) { /* no positions */
        *centre = 0;
        return PA_STATUS_OK;
    }
    int64_t far = llabs(lo) > llabs(hi) ? llabs(lo) : llabs(hi);
    if (log2_factor(x, (double)far) <= PA_XPOS_MAX_LOG2_SCALE) {
        *centre = 0;
        return PA_STATUS_OK;
    }
    if (centre_zero)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "k_prerotated",
                        "xpos keys prerotated are scaled about position 0, but position %lld "
                        "makes the factor 3.5^(%lld/scale_base=%g) exceed 2^%d; positions must "
                        "be within +-%.0f",
                        (long long)far, (long long)far, x->scale_base, PA_XPOS_MAX_LOG2_SCALE,
                        floor(PA_XPOS_MAX_LOG2_SCALE / log2(3.5) * x->scale_base));
    /* lo + hi fits in int64; floor division for a negative sum. */
    int64_t sum = lo + hi, c = sum >= 0 ? sum / 2 : -((-sum + 1) / 2);
    int64_t half = hi - c > c - lo ? hi - c : c - lo;
    if (log2_factor(x, (double)half) > PA_XPOS_MAX_LOG2_SCALE)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "q_positions",
                        "xpos positions span %lld..%lld: about their midpoint the factor "
                        "3.5^(%lld/scale_base=%g) exceeds 2^%d in float32; the span must be at "
                        "most %.0f",
                        (long long)lo, (long long)hi, (long long)half, x->scale_base,
                        PA_XPOS_MAX_LOG2_SCALE,
                        2.0 * floor(PA_XPOS_MAX_LOG2_SCALE / log2(3.5) * x->scale_base));
    *centre = c;
    return PA_STATUS_OK;
}

pa_status pa_xpos_cos_sin(const pa_xpos *x, int32_t head_dim, const int32_t *positions, int32_t n,
                          int64_t centre, int sign, float *cos_out, float *sin_out,
                          float *scale_out, pa_error *err)
{
    pa_status st = pa_xpos_check(x, head_dim, err);
    if (st != PA_STATUS_OK)
        return st;
    if (n < 0 || (n > 0 && (positions == NULL || cos_out == NULL || sin_out == NULL)))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions",
                        "n=%d positions need non-NULL positions and tables", (int)n);
    if (sign != 1 && sign != -1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "sign", "sign=%d must be 1 or -1", sign);
    enum { CHUNK = 64 };
    const size_t half = (size_t)head_dim / 2;
    double freq[CHUNK], lz[CHUNK];
    for (size_t i0 = 0; i0 < half; i0 += CHUNK) {
        size_t w = half - i0 < CHUNK ? half - i0 : CHUNK;
        for (size_t i = 0; i < w; i++) {
            double two_i = 2.0 * (double)(i0 + i);
            freq[i] = 1.0 / pow(x->base, two_i / head_dim);
            lz[i] = log((two_i + 0.4 * head_dim) / (1.4 * head_dim));
        }
        for (int32_t t = 0; t < n; t++) {
            double pos = (double)positions[t];
            /* Exact: both are integers below 2^33. */
            double e = ((double)positions[t] - (double)centre) / x->scale_base;
            size_t row = (size_t)t * half + i0;
            for (size_t i = 0; i < w; i++) {
                double theta = pos * freq[i];
                double s = exp(e * lz[i]);
                if (sign < 0)
                    s = 1.0 / s; /* torchscale: downscale -> scale = 1 / scale */
                cos_out[row + i] = (float)(cos(theta) * s);
                sin_out[row + i] = (float)(sin(theta) * s);
                if (scale_out != NULL)
                    scale_out[row + i] = (float)s;
            }
        }
    }
    return PA_STATUS_OK;
}
