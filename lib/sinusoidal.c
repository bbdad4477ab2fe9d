/* sinusoidal.c - fixed sinusoidal position encodings (Vaswani et al. 2017).
 *
 * Two layouts: interleaved (the paper's sin/cos pairs per frequency) and concat
 * (tensor2tensor get_timing_signal_1d / fairseq: all sines, then all cosines).
 * Angles are computed in double and rounded to float only when stored.
 */
#include "internal.h"

#include <math.h>

/* Frequencies handled per pass over the rows: enough to amortise pow/exp, small
 * enough to live on the stack. */
#define FREQ_CHUNK 128

static pa_status validate(const pa_sinusoidal *s, const int32_t *positions, int32_t n, int32_t dim,
                          const float *out, pa_error *err)
{
    if (s == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "sinusoidal scheme is NULL");
    if (dim < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "dim", "dim=%d must be at least 1",
                        (int)dim);
    if (n < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "length", "length=%d must not be negative",
                        (int)n);
    if (positions == NULL && n > 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions",
                        "positions is NULL but length=%d", (int)n);
    if (!isfinite(s->base) || s->base <= 0.0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.base",
                        "scheme.base=%g must be finite and > 0", s->base);
    if (s->layout != PA_SINUSOIDAL_LAYOUT_INTERLEAVED && s->layout != PA_SINUSOIDAL_LAYOUT_CONCAT)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.layout",
                        "scheme.layout=%d is not a sinusoidal layout", (int)s->layout);
    if (out == NULL && n > 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "out", "out is NULL but length=%d",
                        (int)n);
    return PA_STATUS_OK;
}

/* Interleaved: column c has frequency base^(-2*(c/2)/dim); even c is the sine,
 * odd c the cosine. With odd dim the last column is a lone sine. */
static void encode_interleaved(double base, const int32_t *positions, int32_t n, int32_t dim,
                               float *out)
{
    int32_t npairs = dim / 2 + dim % 2; /* (dim + 1) / 2 could overflow */
    double freq[FREQ_CHUNK];

    for (int32_t k0 = 0; k0 < npairs; k0 += FREQ_CHUNK) {
        int32_t kn = pa__min_i32(FREQ_CHUNK, npairs - k0);
        for (int32_t k = 0; k < kn; k++)
            freq[k] = 1.0 / pow(base, (2.0 * (double)(k0 + k)) / (double)dim);
        for (int32_t p = 0; p < n; p++) {
            float *row = out + (size_t)p * (size_t)dim;
            double pos = (double)positions[p];
            for (int32_t k = 0; k < kn; k++) {
                int32_t c = 2 * (k0 + k);
                double a = pos * freq[k];
                row[c] = (float)sin(a);
                if (c + 1 < dim)
                    row[c + 1] = (float)cos(a);
            }
        }
    }
}

/* Concat: half = dim/2 frequencies w_k = exp(-k ln(base) / max(half-1, 1));
 * columns [0, half) are sines, [half, 2 half) cosines, and an odd dim's last
 * column is zero. */
static void encode_concat(double base, const int32_t *positions, int32_t n, int32_t dim, float *out)
{
    int32_t half = dim / 2;
    double inc = log(base) / (double)pa__max_i32(half - 1, 1);
    double freq[FREQ_CHUNK];

    if (dim % 2 != 0) {
        for (int32_t p = 0; p < n; p++)
            out[(size_t)p * (size_t)dim + (size_t)(dim - 1)] = 0.0f;
    }
    for (int32_t k0 = 0; k0 < half; k0 += FREQ_CHUNK) {
        int32_t kn = pa__min_i32(FREQ_CHUNK, half - k0);
        for (int32_t k = 0; k < kn; k++)
            freq[k] = exp(-(double)(k0 + k) * inc);
        for (int32_t p = 0; p < n; p++) {
            float *row = out + (size_t)p * (size_t)dim;
            double pos = (double)positions[p];
            for (int32_t k = 0; k < kn; k++) {
                double a = pos * freq[k];
                row[k0 + k] = (float)sin(a);
                row[half + k0 + k] = (float)cos(a);
            }
        }
    }
}

pa_status pa_sinusoidal_encode(const pa_sinusoidal *s, const int32_t *positions, int32_t n,
                               int32_t dim, float *out, pa_error *err)
{
    pa_status st = validate(s, positions, n, dim, out, err);
    if (st != PA_STATUS_OK || n == 0)
        return st;
    if (s->layout == PA_SINUSOIDAL_LAYOUT_CONCAT)
        encode_concat(s->base, positions, n, dim, out);
    else
        encode_interleaved(s->base, positions, n, dim, out);
    return PA_STATUS_OK;
}
