/* ref_xpos.c - double reference of xPos (see ref_xpos.h), written as
 * torchscale writes it: a scale per pair from arange(0, D, 2), sin and cos
 * from inv_freq = 1 / base^(arange(0, D/2) / (D/2)), each multiplied by the
 * scale and repeated on both members of a pair, then x cos + rotate(x) sin.
 */
#include "ref_xpos.h"

#include <math.h>

int64_t ref_xpos_centre(const pa_xpos *x, const int32_t *qpos, int nq, const int32_t *kpos, int nk)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < nq; i++) {
        lo = fmin(lo, qpos[i]);
        hi = fmax(hi, qpos[i]);
    }
    for (int j = 0; j < nk; j++) {
        lo = fmin(lo, kpos[j]);
        hi = fmax(hi, kpos[j]);
    }
    if (nq + nk == 0 || fmax(fabs(lo), fabs(hi)) / x->scale_base * log2(3.5) <= 96.0)
        return 0;
    return (int64_t)floor((lo + hi) / 2.0);
}

void ref_xpos_apply(const pa_xpos *x, int head_dim, int32_t pos, int64_t centre, int downscale,
                    double *v)
{
    int half = head_dim / 2;
    double out[4096];
    for (int i = 0; i < half; i++) {
        /* XPOS.__init__: scale = (arange(0, head_dim, 2) + 0.4 head_dim) / (1.4 head_dim) */
        double zeta = ((double)(2 * i) + 0.4 * head_dim) / (1.4 * head_dim);
        /* fixed_pos_embedding: dim = head_dim / 2, inv_freq = 1 / base^(i / dim) */
        double inv_freq = 1.0 / pow(x->base, (double)i / (double)half);
        double s = pow(zeta, ((double)pos - (double)centre) / x->scale_base);
        if (downscale)
            s = 1.0 / s;
        double c = cos((double)pos * inv_freq) * s, sn = sin((double)pos * inv_freq) * s;
        int a = x->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i : i;
        int b = x->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i + 1 : i + half;
        /* rotate_every_two: (x0, x1) -> (-x1, x0) */
        out[a] = v[a] * c - v[b] * sn;
        out[b] = v[b] * c + v[a] * sn;
    }
    for (int d = 0; d < 2 * half; d++)
        v[d] = out[d];
}
