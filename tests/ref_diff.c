/* ref_diff.c - see ref_diff.h. */
#include "ref_diff.h"

#include "ref_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_diff(const pa_attention *a, const pa_differential *d, double *out, double *weights)
{
    const int H2 = a->num_heads, H = H2 / 2, Hk = a->num_kv_heads ? a->num_kv_heads : H2;
    const int D = a->head_dim, Lq = a->q_len, Lk = a->k_len, n = H2 / Hk;
    const bool inter = d->pairs == PA_DIFF_PAIRS_INTERLEAVED;
    double lambda = d->lambda;
    double *w = malloc((size_t)H2 * Lq * Lk * sizeof *w);
    float *zero_v = calloc((size_t)Lk * Hk, sizeof(float));
    pa_attention b = *a;
    if (w == NULL || zero_v == NULL)
        abort();
    /* The 2H maps, as the peers' softmax over q (2H heads) against
     * repeat_kv(k) gives them; v does not enter the weights. */
    b.v = zero_v;
    b.v_head_dim = 1;
    ref_attention(&b, NULL, w, NULL, NULL, NULL);
    if (d->lambda_q1 != NULL) {
        double s1 = 0.0, s2 = 0.0;
        for (int i = 0; i < D; i++) {
            s1 += (double)d->lambda_q1[i] * d->lambda_k1[i];
            s2 += (double)d->lambda_q2[i] * d->lambda_k2[i];
        }
        lambda = exp(s1) - exp(s2) + d->lambda_init;
    }
    for (int h = 0; h < H; h++) {
        /* unilm: view(bsz, H, 2, L, L)[:, :, 0] - lambda [:, :, 1];
         * DiffLlama: chunk(2, heads): head h and h + H. */
        const int ha = inter ? 2 * h : h, hb = inter ? 2 * h + 1 : h + H;
        for (int i = 0; i < Lq; i++) {
            double *o = out != NULL ? out + ((size_t)i * H + h) * 2 * D : NULL;
            double ss = 0.0;
            if (o != NULL)
                memset(o, 0, 2 * (size_t)D * sizeof *o);
            for (int j = 0; j < Lk; j++) {
                const double A =
                    w[((size_t)ha * Lq + i) * Lk + j] - lambda * w[((size_t)hb * Lq + i) * Lk + j];
                if (weights != NULL)
                    weights[((size_t)h * Lq + i) * Lk + j] = A;
                if (o == NULL)
                    continue;
                for (int c = 0; c < 2 * D; c++) {
                    double v;
                    if (inter) { /* repeat_kv(v [Hk/2 heads of 2D], n_rep = H / (Hk/2)) */
                        v = a->v[((size_t)j * (Hk / 2) + h / (H / (Hk / 2))) * 2 * D + c];
                    } else { /* repeat_kv to 2H heads of D, then cat(chunk(v, 2)) */
                        const int src = c < D ? h : h + H;
                        v = a->v[((size_t)j * Hk + src / n) * D + (c < D ? c : c - D)];
                    }
                    o[c] += A * v;
                }
            }
            if (o == NULL || !d->subln)
                continue;
            for (int c = 0; c < 2 * D; c++)
                ss += o[c] * o[c];
            for (int c = 0; c < 2 * D; c++)
                o[c] = o[c] / sqrt(ss / (2 * D) + d->subln_eps) *
                       (d->subln_weight != NULL ? d->subln_weight[c] : 1.0) *
                       (1.0 - d->lambda_init);
        }
    }
    free(w);
    free(zero_v);
}
