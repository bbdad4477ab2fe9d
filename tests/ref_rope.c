/* ref_rope.c - see ref_rope.h. Each function mirrors the Python it names,
 * in double, with torch.arange spelled out as loops. Deliberately naive. */
#include "ref_rope.h"

#include <math.h>
#include <stdlib.h>

#define REF_PI 3.14159265358979323846

static int ref_dim(const pa_rope *r, int head_dim)
{
    return r->rotary_dim != 0 ? r->rotary_dim : head_dim;
}

/* _compute_default_rope_parameters:
 *   inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2) / dim)) */
static void default_inv_freq(double base, int dim, double *inv_freq)
{
    for (int j = 0, i = 0; j < dim; j += 2, i++)
        inv_freq[i] = 1.0 / pow(base, (double)j / (double)dim);
}

/* _compute_linear_scaling_rope_parameters: default, then inv_freq /= factor. */
static void linear_inv_freq(double base, int dim, double factor, double *inv_freq)
{
    default_inv_freq(base, dim, inv_freq);
    for (int i = 0; i < dim / 2; i++)
        inv_freq[i] /= factor;
}

/* _compute_ntk_parameters: base = base * factor ** (dim / (dim - 2)). */
static void ntk_inv_freq(double base, int dim, double factor, double *inv_freq)
{
    base = base * pow(factor, (double)dim / (double)(dim - 2));
    default_inv_freq(base, dim, inv_freq);
}

/* _compute_dynamic_ntk_parameters:
 *   seq_len = seq_len if seq_len > max_position_embeddings else max_position_embeddings
 *   base = base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim -
 * 2)) */
static void dynamic_inv_freq(double base, int dim, double factor, double max_position_embeddings,
                             double seq_len, double *inv_freq)
{
    seq_len = seq_len > max_position_embeddings ? seq_len : max_position_embeddings;
    base = base * pow((factor * seq_len / max_position_embeddings) - (factor - 1.0),
                      (double)dim / (double)(dim - 2));
    default_inv_freq(base, dim, inv_freq);
}

/* _compute_proportional_rope_parameters (transformers, Gemma 4):
 *   rope_angles = int(rope_proportion * head_dim // 2)
 *   inv_freq_rotated = 1.0 / (base ** (torch.arange(0, 2 * rope_angles, 2) / head_dim))
 *   nope_angles = head_dim // 2 - rope_angles
 *   inv_freq = cat(inv_freq_rotated, zeros(nope_angles)); inv_freq /= factor */
static void proportional_inv_freq(double base, int head_dim, double rope_proportion,
                                  double factor, double *inv_freq)
{
    int rope_angles = (int)floor(rope_proportion * (double)head_dim / 2.0);
    int nope_angles = head_dim / 2 - rope_angles;
    int n = 0;
    for (int j = 0; j < 2 * rope_angles; j += 2)
        inv_freq[n++] = 1.0 / pow(base, (double)j / (double)head_dim);
    for (int z = 0; z < nope_angles; z++)
        inv_freq[n++] = 0.0;
    for (int i = 0; i < n; i++)
        inv_freq[i] /= factor;
}

/* vLLM DynamicNTKAlphaRotaryEmbedding._compute_cos_sin_cache:
 *   base = self.base * self.scaling_alpha ** (self.rotary_dim / (self.rotary_dim - 2))
 *   inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2) / rotary_dim)) */
static void ntk_alpha_inv_freq(double base, int rotary_dim, double scaling_alpha,
                               double *inv_freq)
{
    base = base * pow(scaling_alpha, (double)rotary_dim / (double)(rotary_dim - 2));
    default_inv_freq(base, rotary_dim, inv_freq);
}

double ref_rope_get_mscale(double scale, double mscale)
{
    if (scale <= 1.0)
        return 1.0;
    return 0.1 * mscale * log(scale) + 1.0;
}

/* find_correction_dim(num_rotations, dim, base, max_position_embeddings) */
static double find_correction_dim(double num_rotations, double dim, double base,
                                  double max_position_embeddings)
{
    return (dim * log(max_position_embeddings / (num_rotations * 2.0 * REF_PI))) /
           (2.0 * log(base));
}

/* find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings, truncate) */
static void find_correction_range(double low_rot, double high_rot, double dim, double base,
                                  double max_position_embeddings, int truncate, double *low_out,
                                  double *high_out)
{
    double low = find_correction_dim(low_rot, dim, base, max_position_embeddings);
    double high = find_correction_dim(high_rot, dim, base, max_position_embeddings);
    if (truncate) {
        low = floor(low);
        high = ceil(high);
    }
    *low_out = low > 0.0 ? low : 0.0;                /* max(low, 0) */
    *high_out = high < dim - 1.0 ? high : dim - 1.0; /* min(high, dim - 1) */
}

/* linear_ramp_factor(min, max, dim) */
static void linear_ramp_factor(double min, double max, int dim, double *ramp)
{
    if (min == max)
        max += 0.001;
    for (int i = 0; i < dim; i++) {
        double linear = ((double)i - min) / (max - min);
        ramp[i] = linear < 0.0 ? 0.0 : linear > 1.0 ? 1.0 : linear;
    }
}

/* _compute_yarn_parameters, without HF's replacement of factor by
 * max_position_embeddings / original_max_position_embeddings. */
static void yarn_inv_freq(const pa_rope *r, double base, int dim, double *inv_freq,
                          double *attention_factor_out)
{
    double factor = r->factor;
    double attention_factor = r->attention_factor;
    double mscale = r->mscale, mscale_all_dim = r->mscale_all_dim;
    double original_max_position_embeddings = r->original_max_position;

    if (attention_factor == 0.0) {
        if (mscale != 0.0 && mscale_all_dim != 0.0)
            attention_factor =
                ref_rope_get_mscale(factor, mscale) / ref_rope_get_mscale(factor, mscale_all_dim);
        else
            attention_factor = ref_rope_get_mscale(factor, 1.0);
    }
    double beta_fast = r->beta_fast != 0.0 ? r->beta_fast : 32.0;
    double beta_slow = r->beta_slow != 0.0 ? r->beta_slow : 1.0;

    int half = dim / 2;
    double *pos_freqs = calloc((size_t)half + 1, sizeof(double));
    double *ramp = calloc((size_t)half + 1, sizeof(double));
    if (pos_freqs == NULL || ramp == NULL)
        abort();
    for (int j = 0, i = 0; j < dim; j += 2, i++)
        pos_freqs[i] = pow(base, (double)j / (double)dim);

    double low, high;
    find_correction_range(beta_fast, beta_slow, dim, base, original_max_position_embeddings,
                          r->truncate ? 1 : 0, &low, &high);
    linear_ramp_factor(low, high, half, ramp);
    for (int i = 0; i < half; i++) {
        double inv_freq_extrapolation = 1.0 / pos_freqs[i];
        double inv_freq_interpolation = 1.0 / (factor * pos_freqs[i]);
        double inv_freq_extrapolation_factor = 1.0 - ramp[i];
        inv_freq[i] = inv_freq_interpolation * (1.0 - inv_freq_extrapolation_factor) +
                      inv_freq_extrapolation * inv_freq_extrapolation_factor;
    }
    free(pos_freqs);
    free(ramp);
    *attention_factor_out = attention_factor;
}

/* _compute_longrope_parameters with seq_len = max_position + 1. */
static void longrope_inv_freq(const pa_rope *r, double base, int dim, double seq_len,
                              double *inv_freq, double *attention_factor_out)
{
    double factor = r->factor != 0.0 ? r->factor : 1.0;
    double attention_factor = r->attention_factor;
    double original_max_position_embeddings = r->original_max_position;
    if (attention_factor == 0.0) {
        if (factor <= 1.0)
            attention_factor = 1.0;
        else
            attention_factor = sqrt(1.0 + log(factor) / log(original_max_position_embeddings));
    }
    const float *ext_factors =
        seq_len > original_max_position_embeddings ? r->long_factor : r->short_factor;
    for (int j = 0, i = 0; j < dim; j += 2, i++) {
        double inv_freq_shape = (double)j / (double)dim;
        inv_freq[i] = 1.0 / ((double)ext_factors[i] * pow(base, inv_freq_shape));
    }
    *attention_factor_out = attention_factor;
}

/* _compute_llama3_parameters */
static void llama3_inv_freq(const pa_rope *r, double base, int dim, double *inv_freq)
{
    double factor = r->factor != 0.0 ? r->factor : 8.0;
    double low_freq_factor = r->low_freq_factor;
    double high_freq_factor = r->high_freq_factor;
    double old_context_len = r->original_max_position != 0 ? r->original_max_position : 8192.0;

    default_inv_freq(base, dim, inv_freq);
    double low_freq_wavelen = old_context_len / low_freq_factor;
    double high_freq_wavelen = old_context_len / high_freq_factor;
    for (int i = 0; i < dim / 2; i++) {
        double wavelen = 2.0 * REF_PI / inv_freq[i];
        double inv_freq_llama = wavelen > low_freq_wavelen ? inv_freq[i] / factor : inv_freq[i];
        double smooth_factor =
            (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
        double smoothed_inv_freq =
            (1.0 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
        int is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        inv_freq[i] = is_medium_freq ? smoothed_inv_freq : inv_freq_llama;
    }
}

void ref_rope_inv_freq(const pa_rope *r, int head_dim, int max_position, double *inv_freq,
                       double *attention_factor)
{
    int dim = ref_dim(r, head_dim);
    double base = r->base;
    double af = 1.0;
    double seq_len = (double)max_position + 1.0;
    switch (r->scaling) {
    case PA_ROPE_SCALING_LINEAR:
        linear_inv_freq(base, dim, r->factor, inv_freq);
        break;
    case PA_ROPE_SCALING_NTK:
        ntk_inv_freq(base, dim, r->factor, inv_freq);
        break;
    case PA_ROPE_SCALING_DYNAMIC:
        dynamic_inv_freq(base, dim, r->factor, r->original_max_position, seq_len, inv_freq);
        break;
    case PA_ROPE_SCALING_YARN:
        yarn_inv_freq(r, base, dim, inv_freq, &af);
        break;
    case PA_ROPE_SCALING_LLAMA3:
        llama3_inv_freq(r, base, dim, inv_freq);
        break;
    case PA_ROPE_SCALING_LONGROPE:
        longrope_inv_freq(r, base, dim, seq_len, inv_freq, &af);
        break;
    case PA_ROPE_SCALING_PROPORTIONAL:
        proportional_inv_freq(base, dim, r->partial_rotary_factor,
                              r->factor != 0.0 ? r->factor : 1.0, inv_freq);
        break;
    case PA_ROPE_SCALING_NTK_ALPHA:
        ntk_alpha_inv_freq(base, dim, r->alpha, inv_freq);
        break;
    default:
        default_inv_freq(base, dim, inv_freq);
        break;
    }
    /* An explicit attention_factor wins for every scaling. */
    if (r->attention_factor != 0.0)
        af = r->attention_factor;
    if (attention_factor != NULL)
        *attention_factor = af;
}

/* apply_rotary_pos_emb: q_embed = q * cos + rotate_half(q) * sin with
 * cos = cat(freqs, freqs).cos() * attention_scaling, on the first r dims
 * (partial rotary: q_rot, q_pass = q[..., :r], q[..., r:]). */
void ref_rope_rotate(const pa_rope *r, int head_dim, const double *inv_freq,
                     double attention_factor, int position, const double *x, double *out)
{
    int dim = ref_dim(r, head_dim);
    int half = dim / 2;
    if (r->layout == PA_ROPE_LAYOUT_GPTJ) {
        /* Meta's complex form: (x[2i] + i x[2i+1]) * e^{i theta_i}. */
        for (int i = 0; i < half; i++) {
            double theta = (double)position * inv_freq[i];
            double c = cos(theta) * attention_factor, s = sin(theta) * attention_factor;
            double re = x[2 * i], im = x[2 * i + 1];
            out[2 * i] = re * c - im * s;
            out[2 * i + 1] = re * s + im * c;
        }
    } else {
        for (int d = 0; d < dim; d++) {
            int i = d % half; /* emb = cat(freqs, freqs) */
            double theta = (double)position * inv_freq[i];
            double c = cos(theta) * attention_factor, s = sin(theta) * attention_factor;
            /* rotate_half(x) = cat(-x2, x1) */
            double rot = d < half ? -x[d + half] : x[d - half];
            out[d] = x[d] * c + rot * s;
        }
    }
    for (int d = dim; d < head_dim; d++)
        out[d] = x[d];
}

int ref_mrope_row(const pa_rope *r, int i)
{
    const int32_t *sec = r->mrope_section;
    if (sec[0] == 0 && sec[1] == 0 && sec[2] == 0)
        return 0;
    if (r->mrope_interleaved) {
        int row = 0;
        for (int dim = 1; dim <= 2; dim++)
            for (int idx = dim; idx < 3 * sec[dim]; idx += 3)
                if (idx == i)
                    row = dim;
        return row;
    }
    /* The chunks of cat(freqs, freqs) split by mrope_section * 2: walk them
     * until the one holding index i (i < r/2, in the first copy). */
    int start = 0;
    for (int k = 0; k < 6; k++) {
        int len = sec[k % 3];
        if (i < start + len)
            return k % 3;
        start += len;
    }
    return 0;
}

void ref_rope_rotate_mrope(const pa_rope *r, int head_dim, const double *inv_freq,
                           double attention_factor, const int pos3[3], const double *x, double *out)
{
    int dim = ref_dim(r, head_dim);
    int half = dim / 2;
    if (r->layout == PA_ROPE_LAYOUT_GPTJ) {
        for (int i = 0; i < half; i++) {
            double theta = (double)pos3[ref_mrope_row(r, i)] * inv_freq[i];
            double c = cos(theta) * attention_factor, s = sin(theta) * attention_factor;
            double re = x[2 * i], im = x[2 * i + 1];
            out[2 * i] = re * c - im * s;
            out[2 * i + 1] = re * s + im * c;
        }
    } else {
        for (int d = 0; d < dim; d++) {
            int i = d % half;
            double theta = (double)pos3[ref_mrope_row(r, i)] * inv_freq[i];
            double c = cos(theta) * attention_factor, s = sin(theta) * attention_factor;
            double rot = d < half ? -x[d + half] : x[d - half];
            out[d] = x[d] * c + rot * s;
        }
    }
    for (int d = dim; d < head_dim; d++)
        out[d] = x[d];
}

void ref_rope_rotate_tensor(const pa_rope *r, int head_dim, int n, int heads,
                            const int32_t *positions, int max_position, const float *x, double *out)
{
    int dim = ref_dim(r, head_dim);
    double *inv_freq = calloc((size_t)dim / 2 + 1, sizeof(double));
    double *xd = calloc((size_t)head_dim + 1, sizeof(double));
    if (inv_freq == NULL || xd == NULL)
        abort();
    double af;
    ref_rope_inv_freq(r, head_dim, max_position, inv_freq, &af);
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < heads; h++) {
            size_t off = ((size_t)t * (size_t)heads + (size_t)h) * (size_t)head_dim;
            for (int d = 0; d < head_dim; d++)
                xd[d] = x[off + (size_t)d];
            ref_rope_rotate(r, head_dim, inv_freq, af, positions[t], xd, out + off);
        }
    }
    free(inv_freq);
    free(xd);
}

void ref_rope_cos_sin(const pa_rope *r, int head_dim, const int32_t *positions, int n,
                      int max_position, double *cos_out, double *sin_out)
{
    int half = ref_dim(r, head_dim) / 2;
    double *inv_freq = calloc((size_t)half + 1, sizeof(double));
    if (inv_freq == NULL)
        abort();
    double af;
    ref_rope_inv_freq(r, head_dim, max_position, inv_freq, &af);
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            double theta = (double)positions[t] * inv_freq[i];
            cos_out[(size_t)t * (size_t)half + (size_t)i] = cos(theta) * af;
            sin_out[(size_t)t * (size_t)half + (size_t)i] = sin(theta) * af;
        }
    }
    free(inv_freq);
}
