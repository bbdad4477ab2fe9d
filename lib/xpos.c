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
    /* As lib/rope.c's tables: where a position follows the previous one,
     * the angle advances by freq (a complex multiplication by (cos freq,
     * sin freq)) and the scale by the factor exp(lz / scale_base), instead
     * of three libm calls (cos, sin and exp of every entry, for q's table
     * and k's: an xpos prefill took 1.17x a rope one's time). Every
     * ANCHOR-th row, and after any jump, they come from libm again, so the
     * drift stays below 1e-14, far under float's 6e-8. */
    enum { CHUNK = 64, ANCHOR = 32 };
    const size_t half = (size_t)head_dim / 2;
    double freq[CHUNK], lz[CHUNK], step_c[CHUNK], step_s[CHUNK], step_z[CHUNK];
    double zc[CHUNK], zs[CHUNK], zz[CHUNK];
    for (size_t i0 = 0; i0 < half; i0 += CHUNK) {
        size_t w = half - i0 < CHUNK ? half - i0 : CHUNK;
        for (size_t i = 0; i < w; i++) {
            double two_i = 2.0 * (double)(i0 + i);
            freq[i] = 1.0 / pow(x->base, two_i / head_dim);
            lz[i] = log((two_i + 0.4 * head_dim) / (1.4 * head_dim));
            step_c[i] = cos(freq[i]);
            step_s[i] = sin(freq[i]);
            step_z[i] = exp(lz[i] / x->scale_base);
        }
        for (int32_t t = 0; t < n; t++) {
            double pos = (double)positions[t];
            /* Exact: both are integers below 2^33. */
            double e = ((double)positions[t] - (double)centre) / x->scale_base;
            size_t row = (size_t)t * half + i0;
            if (t % ANCHOR == 0 || (int64_t)positions[t] != (int64_t)positions[t - 1] + 1) {
                for (size_t i = 0; i < w; i++) {
                    double theta = pos * freq[i];
                    zc[i] = cos(theta);
                    zs[i] = sin(theta);
                    zz[i] = exp(e * lz[i]);
                }
            } else {
                for (size_t i = 0; i < w; i++) {
                    double nc = zc[i] * step_c[i] - zs[i] * step_s[i];
                    zs[i] = zc[i] * step_s[i] + zs[i] * step_c[i];
                    zc[i] = nc;
                    zz[i] *= step_z[i];
                }
            }
            for (size_t i = 0; i < w; i++) {
                /* torchscale: downscale -> scale = 1 / scale */
                double s = sign < 0 ? 1.0 / zz[i] : zz[i];
                cos_out[row + i] = (float)(zc[i] * s);
                sin_out[row + i] = (float)(zs[i] * s);
                if (scale_out != NULL)
                    scale_out[row + i] = (float)s;
            }
        }
    }
    return PA_STATUS_OK;
}
