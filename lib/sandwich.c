/* sandwich.c - the Sandwich bias (Chi et al. 2023, "Dissecting Transformer
 * Length Extrapolation via the Lens of Receptive Field Analysis"), as
 * NVIDIA NeMo's SandwichRelativePositionEmbedding computes it
 * (nemo/collections/nlp/modules/common/megatron/position_embedding/
 * sandwich_relative_position_embedding.py): the sinusoids' dot product at
 * distance |m - n| over frequencies i = 1 .. ceil(d/2), minus d/2, divided
 * by 8 (h + 1) / H for head h. NeMo works in float32; this is in double.
 */
#include "internal.h"

#include <math.h>

pa_status pa_sandwich_check(const pa_sandwich *s, int32_t head_dim, pa_error *err)
{
    if (s == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "sandwich scheme is NULL");
    if (s->hidden_size < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.hidden_size",
                        "scheme.hidden_size=%d must be >= 1 (or 0 for head_dim)",
                        (int)s->hidden_size);
    if (s->hidden_size == 0 && head_dim < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.hidden_size",
                        "scheme.hidden_size is 0 (head_dim) but head_dim=%d", (int)head_dim);
    return PA_STATUS_OK;
}

int32_t pa_sandwich_hidden_size(const pa_sandwich *s, int32_t head_dim)
{
    return s->hidden_size > 0 ? s->hidden_size : head_dim;
}

double pa__sandwich_sum(int32_t hidden_size, double distance)
{
    /* torch.arange(1, d/2 + 1) has ceil(d/2) values: 1 .. ceil(d/2). */
    const int32_t terms = (int32_t)(((int64_t)hidden_size + 1) / 2);
    double sum = 0.0;
    for (int32_t i = 1; i <= terms; i++)
        sum += cos(distance * pow(10000.0, -2.0 * (double)i / (double)hidden_size));
    return sum - (double)hidden_size / 2.0;
}

void pa__sandwich_sums(int32_t hidden_size, int64_t d0, int32_t n, double *out)
{
    /* From d0 (cos and sin from libm, as pa__sandwich_sum) each distance
     * advances every angle by its frequency: a complex multiplication by
     * (cos f, sin f), as lib/rope.c's tables do along positions. Over at
     * most 32 steps the drift stays below 1e-14. The terms are added in
     * pa__sandwich_sum's order. */
    enum { CHUNK = 64 };
    const int32_t terms = (int32_t)(((int64_t)hidden_size + 1) / 2);
    for (int32_t k = 0; k < n; k++)
        out[k] = 0.0;
    for (int32_t i0 = 1; i0 <= terms; i0 += CHUNK) {
        const int32_t w = terms - i0 + 1 < CHUNK ? terms - i0 + 1 : CHUNK;
        double sc[CHUNK], ss[CHUNK], zc[CHUNK], zs[CHUNK];
        for (int32_t i = 0; i < w; i++) {
            const double f = pow(10000.0, -2.0 * (double)(i0 + i) / (double)hidden_size);
            sc[i] = cos(f);
            ss[i] = sin(f);
            zc[i] = cos((double)d0 * f);
            zs[i] = sin((double)d0 * f);
        }
        for (int32_t k = 0; k < n; k++) {
            if (k > 0)
                for (int32_t i = 0; i < w; i++) {
                    const double c = zc[i] * sc[i] - zs[i] * ss[i];
                    zs[i] = zc[i] * ss[i] + zs[i] * sc[i];
                    zc[i] = c;
                }
            for (int32_t i = 0; i < w; i++)
                out[k] += zc[i];
        }
    }
    for (int32_t k = 0; k < n; k++)
        out[k] -= (double)hidden_size / 2.0;
}

double pa__sandwich_head(double sum, int32_t num_heads, int32_t h)
{
    return sum * (double)num_heads / (8.0 * (double)(h + 1));
}

double pa_sandwich_bias(int32_t hidden_size, int32_t num_heads, int32_t h, double distance)
{
    return pa__sandwich_head(pa__sandwich_sum(hidden_size, distance), num_heads, h);
}
