/* ref_mla.c - see ref_mla.h. */
#include "ref_mla.h"

#include "ref_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ref_mla_scale(const pa_attention *a)
{
    double s = 1.0 / sqrt((double)a->head_dim);
    const pa_rope *r = &a->scheme->rope;
    if (a->scheme->type == PA_SCHEME_ROPE && r->scaling == PA_ROPE_SCALING_YARN &&
        r->mscale_all_dim != 0.0 && r->factor > 1.0) {
        const double m = 0.1 * r->mscale_all_dim * log(r->factor) + 1.0;
        s *= m * m;
    }
    return s;
}

void ref_mla(const pa_attention *a, const pa_mla *m, double *out, double *weights, double *q_rot,
             double *k_rot)
{
    const int H = a->num_heads, Dr = m->rope_dim, Dn = a->head_dim - Dr, Dq = Dn + Dr;
    const int Dv = a->v_head_dim ? a->v_head_dim : a->head_dim, Lq = a->q_len, Lk = a->k_len;
    const int R = m->kv_lora_rank;
    /* Every head's query and key with the rotated part first, so that the
     * reference's rope (its first rotary_dim dims) is the rope of the
     * D_rope dims; a dot product does not see the order of its terms. */
    float *q = malloc((size_t)Lq * H * Dq * sizeof *q);
    float *k = malloc((size_t)Lk * H * Dq * sizeof *k);
    float *v = malloc((size_t)Lk * H * Dv * sizeof *v);
    double *qr = q_rot != NULL ? malloc((size_t)Lq * H * Dq * sizeof *qr) : NULL;
    double *kr = k_rot != NULL ? malloc((size_t)Lk * H * Dq * sizeof *kr) : NULL;
    pa_scheme s = *a->scheme;
    pa_attention b = *a;
    if (q == NULL || k == NULL || v == NULL || (q_rot != NULL && qr == NULL) ||
        (k_rot != NULL && kr == NULL))
        abort();
    for (int i = 0; i < Lq; i++)
        for (int h = 0; h < H; h++) {
            const float *src = a->q + ((size_t)i * H + h) * Dq;
            float *dst = q + ((size_t)i * H + h) * Dq;
            memcpy(dst, src + Dn, (size_t)Dr * sizeof *dst);
            memcpy(dst + Dr, src, (size_t)Dn * sizeof *dst);
        }
    for (int j = 0; j < Lk; j++)
        for (int h = 0; h < H; h++) {
            float *dst = k + ((size_t)j * H + h) * Dq;
            memcpy(dst, m->k_rope + (size_t)j * Dr, (size_t)Dr * sizeof *dst);
            for (int c = 0; c < Dn; c++) {
                double x = 0.0;
                if (!m->absorbed) {
                    x = a->k[((size_t)j * H + h) * Dn + c];
                } else { /* kv_b_proj's rows of head h, k part */
                    for (int t = 0; t < R; t++)
                        x += (double)m->w_uk[((size_t)h * Dn + c) * R + t] *
                             m->c_kv[(size_t)j * R + t];
                }
                dst[Dr + c] = (float)x;
            }
            for (int c = 0; c < Dv; c++) {
                double x = 0.0;
                if (!m->absorbed) {
                    x = a->v[((size_t)j * H + h) * Dv + c];
                } else {
                    for (int t = 0; t < R; t++)
                        x += (double)m->w_uv[((size_t)h * Dv + c) * R + t] *
                             m->c_kv[(size_t)j * R + t];
                }
                v[((size_t)j * H + h) * Dv + c] = (float)x;
            }
        }
    if (s.type == PA_SCHEME_ROPE)
        s.rope.rotary_dim = Dr;
    b.scheme = &s;
    b.num_kv_heads = H;
    b.head_dim = Dq;
    b.v_head_dim = Dv;
    b.q = q;
    b.k = k;
    b.v = v;
    b.scale_set = true;
    b.scale = a->scale_set ? a->scale : (float)ref_mla_scale(a);
    ref_attention(&b, out, weights, NULL, qr, kr);
    if (q_rot != NULL)
        for (int i = 0; i < Lq; i++)
            for (int h = 0; h < H; h++) {
                const double *src = qr + ((size_t)i * H + h) * Dq;
                double *dst = q_rot + ((size_t)i * H + h) * Dq;
                memcpy(dst, src + Dr, (size_t)Dn * sizeof *dst);
                memcpy(dst + Dn, src, (size_t)Dr * sizeof *dst);
            }
    if (k_rot != NULL)
        for (int j = 0; j < Lk; j++)
            memcpy(k_rot + (size_t)j * Dr, kr + (size_t)j * H * Dq, (size_t)Dr * sizeof *k_rot);
    free(q);
    free(k);
    free(v);
    free(qr);
    free(kr);
}
