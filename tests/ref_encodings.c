/* ref_encodings.c - see ref_encodings.h. Straightforward transliterations:
 * clarity over speed, double everywhere except where the original computes in
 * float32 (the T5 log branch). */
#include "ref_encodings.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

void ref_sinusoidal_interleaved(const int32_t *positions, int32_t n, int32_t dim, double base,
                                double *out)
{
    for (int32_t p = 0; p < n; p++) {
        for (int32_t c = 0; c < dim; c++) {
            int32_t i = c / 2;
            double angle = (double)positions[p] / pow(base, (double)(2 * i) / (double)dim);
            out[(size_t)p * (size_t)dim + (size_t)c] = (c % 2 == 0) ? sin(angle) : cos(angle);
        }
    }
}

void ref_sinusoidal_concat(const int32_t *positions, int32_t n, int32_t dim, double base,
                           double *out)
{
    /* get_timing_signal_1d(length, channels, min_timescale=1, max_timescale=base) */
    double min_timescale = 1.0, max_timescale = base;
    int32_t num_timescales = dim / 2;
    double log_timescale_increment =
        log(max_timescale / min_timescale) / fmax((double)num_timescales - 1.0, 1.0);
    for (int32_t p = 0; p < n; p++) {
        double *row = out + (size_t)p * (size_t)dim;
        for (int32_t k = 0; k < num_timescales; k++) {
            double inv_timescale = min_timescale * exp((double)k * -log_timescale_increment);
            double scaled_time = (double)positions[p] * inv_timescale;
            row[k] = sin(scaled_time);
            row[num_timescales + k] = cos(scaled_time);
        }
        /* tf.pad(signal, [[0, 0], [0, tf.mod(channels, 2)]]) */
        if (dim % 2 != 0)
            row[dim - 1] = 0.0;
    }
}

void ref_sinusoidal(const pa_sinusoidal *s, const int32_t *positions, int32_t n, int32_t dim,
                    double *out)
{
    if (s->layout == PA_SINUSOIDAL_LAYOUT_CONCAT)
        ref_sinusoidal_concat(positions, n, dim, s->base, out);
    else
        ref_sinusoidal_interleaved(positions, n, dim, s->base, out);
}

void ref_learned(const float *table, int32_t cols, int32_t offset, const int32_t *positions,
                 int32_t n, double *out)
{
    for (int32_t i = 0; i < n; i++) {
        int64_t row = (int64_t)positions[i] + offset;
        for (int32_t c = 0; c < cols; c++)
            out[(size_t)i * (size_t)cols + (size_t)c] =
                table[(size_t)row * (size_t)cols + (size_t)c];
    }
}

/* def get_slopes_power_of_2(n):
 *     start = (2**(-2**-(math.log2(n)-3)))
 *     ratio = start
 *     return [start*ratio**i for i in range(n)] */
static void get_slopes_power_of_2(int32_t n, double *out)
{
    double start = pow(2.0, -pow(2.0, -(log2((double)n) - 3.0)));
    double ratio = start;
    for (int32_t i = 0; i < n; i++)
        out[i] = start * pow(ratio, (double)i);
}

/* def get_slopes(n):
 *     if math.log2(n).is_integer():
 *         return get_slopes_power_of_2(n)
 *     else:
 *         closest_power_of_2 = 2**math.floor(math.log2(n))
 *         return get_slopes_power_of_2(closest_power_of_2) + \
 *                get_slopes(2*closest_power_of_2)[0::2][:n-closest_power_of_2] */
void ref_alibi_get_slopes(int32_t n, double *out)
{
    double l2 = log2((double)n);
    if (l2 == floor(l2)) {
        get_slopes_power_of_2(n, out);
        return;
    }
    int32_t closest_power_of_2 = (int32_t)pow(2.0, floor(l2));
    get_slopes_power_of_2(closest_power_of_2, out);

    /* The recursion's argument is a power of two, so it recurses once. */
    int32_t m = 2 * closest_power_of_2;
    double *twice = malloc((size_t)m * sizeof *twice);
    if (twice == NULL)
        abort();
    ref_alibi_get_slopes(m, twice);
    for (int32_t j = 0; j < n - closest_power_of_2; j++)
        out[closest_power_of_2 + j] = twice[2 * j];
    free(twice);
}

void ref_alibi_slopes(int32_t num_heads, double max_bias, double *out)
{
    /* ggml_soft_max / ggml_alibi: n_head_log2 = 1 << floor(log2(n_head)) */
    int32_t n_head_log2 = 1 << (int32_t)floor(log2((double)num_heads));
    double m0 = pow(2.0, -max_bias / (double)n_head_log2);
    double m1 = pow(2.0, -(max_bias / 2.0) / (double)n_head_log2);
    for (int32_t h = 0; h < num_heads; h++)
        out[h] = h < n_head_log2 ? pow(m0, (double)(h + 1))
                                 : pow(m1, (double)(2 * (h - n_head_log2) + 1));
}

double ref_alibi_bias(double slope, int32_t qpos, int32_t kpos, bool symmetric)
{
    double d = (double)qpos - (double)kpos;
    return -slope * (symmetric ? fabs(d) : d);
}

double ref_kerple_log(double bias_p, double bias_a, double diff)
{
    return -bias_p * log(1.0 + bias_a * diff); /* log kernel */
}

double ref_kerple_power(double bias_a, double bias_p, double diff)
{
    double bias = pow(diff, bias_p);
    return -bias * bias_a;
}

double ref_sandwich(int32_t hidden_size, int32_t num_attention_heads, int32_t h, double rel)
{
    double bias = 0.0;
    /* torch.arange(1, hidden_size / 2 + 1): 1, 2, ... while < hidden_size/2 + 1 */
    for (double i = 1.0; i < (double)hidden_size / 2.0 + 1.0; i += 1.0) {
        double inv_freq = 1.0 / pow(10000.0, 2.0 * i / (double)hidden_size);
        bias += cos(rel * inv_freq);
    }
    return (bias - (double)hidden_size / 2.0) /
           ((double)(h + 1) * 8.0 / (double)num_attention_heads);
}

double ref_fire(double c, double L, double eps, const float *w1, const float *b1, int32_t hidden,
                const float *w2, const float *b2, int32_t num_heads, int32_t h, int64_t i,
                int64_t j)
{
    double threshold = fabs(L);
    double position = (double)i > threshold ? (double)i : threshold;
    double relative_distance = log(fabs(c * (double)(i - j)) + 1.0);
    double position_normalizer = log(fabs(c * position) + 1.0);
    double normalized = relative_distance / (position_normalizer + eps);
    double out = b2[h];
    for (int32_t k = 0; k < hidden; k++) {
        double pre = (double)w1[k] * normalized + (double)b1[k];
        double act = pre > 0.0 ? pre : 0.0; /* ReLU */
        out += (double)w2[(size_t)k * num_heads + h] * act;
    }
    return out;
}

int64_t ref_t5_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                      int64_t max_distance)
{
    int64_t relative_buckets = 0;
    if (bidirectional) {
        num_buckets /= 2; /* num_buckets //= 2 */
        relative_buckets += (relative_position > 0 ? 1 : 0) * num_buckets;
        relative_position = relative_position < 0 ? -relative_position : relative_position;
    } else {
        /* -torch.min(relative_position, torch.zeros_like(relative_position)) */
        relative_position = -(relative_position < 0 ? relative_position : 0);
    }
    int64_t max_exact = num_buckets / 2;
    bool is_small = relative_position < max_exact;
    if (is_small)
        return relative_buckets + relative_position;

    /* torch.log(relative_position.float() / max_exact)
     *     / math.log(max_distance / max_exact) * (num_buckets - max_exact)
     * float32 tensor ops; the Python scalars become float32. Only evaluated on
     * the large branch (torch evaluates both and discards this one). */
    float t = (float)relative_position;
    t = t / (float)max_exact;
    t = logf(t);
    t = t / (float)log((double)max_distance / (double)max_exact);
    t = t * (float)(num_buckets - max_exact);
    int64_t relative_position_if_large = max_exact + (int64_t)t; /* .to(torch.long) */
    if (relative_position_if_large > num_buckets - 1)
        relative_position_if_large = num_buckets - 1;
    return relative_buckets + relative_position_if_large;
}

int64_t ref_shaw_index(int64_t relative_position, int64_t max_relative_position)
{
    int64_t k = max_relative_position;
    int64_t r = relative_position < -k ? -k : (relative_position > k ? k : relative_position);
    return r + k;
}

void ref_gram(const double *p, int32_t n, int32_t dim, double *sim)
{
    for (int32_t i = 0; i < n; i++) {
        for (int32_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (int32_t c = 0; c < dim; c++)
                acc +=
                    p[(size_t)i * (size_t)dim + (size_t)c] * p[(size_t)j * (size_t)dim + (size_t)c];
            sim[(size_t)i * (size_t)n + (size_t)j] = acc;
        }
    }
}
