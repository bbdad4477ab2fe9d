/* rope.c - rotary position embedding: validation, inverse frequencies under
 * every Hugging Face scaling, cos/sin tables and the rotation kernel.
 *
 * The scalings follow transformers' modeling_rope_utils.py; the formulas are in
 * include/posattn.h above pa_rope. The attention core (lib/attention.c) calls
 * pa_rope_cos_sin once per call and pa_rope_apply (lib/rope_apply.c) on q
 * and k.
 */
#include "internal.h"

#include "clones.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PI 3.14159265358979323846

/* The tables are plain loops that GCC vectorizes at -O3 (Makefile), cloned
 * (clones.h): in the profile of a rope prefill (L = 2048, D = 64,
 * compute_dtype bf16) they fell from 1.4% of the time to 0.25%. Every clone
 * rounds each product and sum alone (ISO C, no contraction), so all give
 * the same bits. Not the rotation (rope_apply.c, built at -O2, one copy):
 * GCC's vectorizer turns its pairs into vfmaddsub where the CPU has FMA,
 * which rounds once where the C rounds twice. */

/* Defaults of the Llama 3.1 scaling, used when the field is 0. */
#define LLAMA3_FACTOR 8.0
#define LLAMA3_ORIG 8192

/* Frequencies computed per pass of pa_rope_cos_sin: a small stack buffer, so
 * the tables are built without allocating. */
#define FREQ_CHUNK 256

/* ------------------------------------------------------------------------- */
/* Validation                                                                */
/* ------------------------------------------------------------------------- */

static const char *scaling_name(pa_rope_scaling s)
{
    const char *n = pa_rope_scaling_name(s);
    return n != NULL ? n : "?";
}

/* A value that is 0 for "required and missing", else must be finite and
 * >= lo (or > lo when !inclusive). */
static pa_status check_required_factor(const pa_rope *r, double lo, bool inclusive, pa_error *err)
{
    const char *sn = scaling_name(r->scaling);
    if (r->factor == 0.0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.factor",
                        "scheme.factor is required for rope scaling '%s'", sn);
    if (!isfinite(r->factor))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.factor",
                        "scheme.factor=%g must be finite", r->factor);
    if (inclusive ? r->factor < lo : r->factor <= lo)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.factor",
                        "scheme.factor=%g must be %s %g for rope scaling '%s'", r->factor,
                        inclusive ? ">=" : ">", lo, sn);
    return PA_STATUS_OK;
}

/* An optional factor (0 = default) that must be finite and > 0 when set. */
static pa_status check_optional_factor(const pa_rope *r, pa_error *err)
{
    if (r->factor == 0.0)
        return PA_STATUS_OK;
    if (!isfinite(r->factor))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.factor",
                        "scheme.factor=%g must be finite", r->factor);
    if (r->factor < 0.0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.factor",
                        "scheme.factor=%g must be > 0 (0 means the default)", r->factor);
    return PA_STATUS_OK;
}

static pa_status check_orig(const pa_rope *r, pa_error *err)
{
    if (r->original_max_position == 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.original_max_position",
                        "scheme.original_max_position is required for rope scaling '%s'",
                        scaling_name(r->scaling));
    if (r->original_max_position < 1)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.original_max_position",
                        "scheme.original_max_position=%d must be >= 1",
                        (int)r->original_max_position);
    return PA_STATUS_OK;
}

/* ntk and dynamic raise the factor to r/(r-2). */
static pa_status check_r_above_2(const pa_rope *r, int32_t rd, pa_error *err)
{
    if (rd <= 2)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.rotary_dim",
                        "rope scaling '%s' needs a rotary dim > 2 (exponent r/(r-2)), got %d",
                        scaling_name(r->scaling), (int)rd);
    return PA_STATUS_OK;
}

static pa_status check_ext_factors(const float *v, int32_t len, int32_t half, const char *name,
                                   pa_error *err)
{
    char field[64];
    if (v == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, name,
                        "%s is required for rope scaling 'longrope'", name);
    if (len != half)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, name,
                        "%s has %d values, expected rotary_dim/2=%d", name, (int)len, (int)half);
    for (int32_t i = 0; i < len; i++) {
        if (!isfinite(v[i]) || v[i] <= 0.0f) {
            snprintf(field, sizeof field, "%s[%d]", name, (int)i);
            return pa__fail(err,
                            isfinite(v[i]) ? PA_STATUS_OUT_OF_RANGE : PA_STATUS_INVALID_ARGUMENT,
                            field, "%s=%g must be finite and > 0", field, (double)v[i]);
        }
    }
    return PA_STATUS_OK;
}

static pa_status check_yarn(const pa_rope *r, pa_error *err)
{
    pa_status st = check_required_factor(r, 1.0, true, err);
    if (st == PA_STATUS_OK)
        st = check_orig(r, err);
    if (st != PA_STATUS_OK)
        return st;
    const struct {
        double v;
        const char *name;
    } opt[] = {{r->beta_fast, "scheme.beta_fast"},
               {r->beta_slow, "scheme.beta_slow"},
               {r->mscale, "scheme.mscale"},
               {r->mscale_all_dim, "scheme.mscale_all_dim"}};
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
        if (!isfinite(opt[i].v))
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, opt[i].name, "%s=%g must be finite",
                            opt[i].name, opt[i].v);
        if (opt[i].v < 0.0)
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, opt[i].name,
                            "%s=%g must be >= 0 (0 means the default)", opt[i].name, opt[i].v);
    }
    double fast = r->beta_fast != 0.0 ? r->beta_fast : 32.0;
    double slow = r->beta_slow != 0.0 ? r->beta_slow : 1.0;
    if (fast < slow)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.beta_fast",
                        "scheme.beta_fast=%g must be >= scheme.beta_slow=%g", fast, slow);
    return PA_STATUS_OK;
}

static pa_status check_llama3(const pa_rope *r, pa_error *err)
{
    pa_status st = check_optional_factor(r, err);
    if (st != PA_STATUS_OK)
        return st;
    if (r->original_max_position < 0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.original_max_position",
                        "scheme.original_max_position=%d must be >= 1 (0 means %d)",
                        (int)r->original_max_position, LLAMA3_ORIG);
    if (!isfinite(r->low_freq_factor))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.low_freq_factor",
                        "scheme.low_freq_factor=%g must be finite", r->low_freq_factor);
    if (!isfinite(r->high_freq_factor))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.high_freq_factor",
                        "scheme.high_freq_factor=%g must be finite", r->high_freq_factor);
    if (r->low_freq_factor <= 0.0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.low_freq_factor",
                        "scheme.low_freq_factor=%g must be > 0", r->low_freq_factor);
    if (r->low_freq_factor >= r->high_freq_factor)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.high_freq_factor",
                        "scheme.low_freq_factor=%g must be < scheme.high_freq_factor=%g",
                        r->low_freq_factor, r->high_freq_factor);
    return PA_STATUS_OK;
}

static pa_status check_longrope(const pa_rope *r, int32_t half, pa_error *err)
{
    pa_status st = check_orig(r, err);
    if (st == PA_STATUS_OK)
        st = check_optional_factor(r, err);
    if (st == PA_STATUS_OK)
        st = check_ext_factors(r->short_factor, r->short_factor_len, half, "scheme.short_factor",
                               err);
    if (st == PA_STATUS_OK)
        st = check_ext_factors(r->long_factor, r->long_factor_len, half, "scheme.long_factor", err);
    if (st != PA_STATUS_OK)
        return st;
    /* The default attention factor divides by ln(orig). */
    if (r->attention_factor == 0.0 && r->factor > 1.0 && r->original_max_position == 1)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.original_max_position",
                        "scheme.original_max_position=1 makes the default attention factor "
                        "sqrt(1 + ln(factor)/ln(1)) infinite; set scheme.attention_factor");
    return PA_STATUS_OK;
}

/* proportional: partial_rotary_factor in (0, 1] (the share of pairs that
 * keep a frequency); factor optional. */
static pa_status check_proportional(const pa_rope *r, pa_error *err)
{
    pa_status st = check_optional_factor(r, err);
    if (st != PA_STATUS_OK)
        return st;
    if (!isfinite(r->partial_rotary_factor))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.partial_rotary_factor",
                        "scheme.partial_rotary_factor=%g must be finite", r->partial_rotary_factor);
    if (!(r->partial_rotary_factor > 0.0 && r->partial_rotary_factor <= 1.0))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.partial_rotary_factor",
                        "scheme.partial_rotary_factor=%g must be in (0, 1] for rope scaling "
                        "'proportional' (the share of frequency pairs that rotate)",
                        r->partial_rotary_factor);
    return PA_STATUS_OK;
}

/* ntk_alpha: alpha required, > 0, and the new base finite and > 1. */
static pa_status check_ntk_alpha(const pa_rope *r, int32_t rd, pa_error *err)
{
    if (r->alpha == 0.0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.alpha",
                        "scheme.alpha is required for rope scaling 'ntk_alpha'");
    if (!isfinite(r->alpha))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.alpha",
                        "scheme.alpha=%g must be finite", r->alpha);
    if (r->alpha < 0.0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.alpha",
                        "scheme.alpha=%g must be > 0", r->alpha);
    pa_status st = check_r_above_2(r, rd, err);
    if (st != PA_STATUS_OK)
        return st;
    double nb = r->base * pow(r->alpha, (double)rd / (double)(rd - 2));
    if (!isfinite(nb) || !(nb > 1.0))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.alpha",
                        "scheme.alpha=%g makes the base scheme.base * alpha^(r/(r-2)) = %g "
                        "(r=%d); it must be finite and > 1",
                        r->alpha, nb, (int)rd);
    return PA_STATUS_OK;
}

pa_status pa_rope_check(const pa_rope *r, int32_t head_dim, pa_error *err)
{
    if (r == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme",
                        "the rope parameters are missing");
    if ((int)r->layout < 0 || (int)r->layout > (int)PA_ROPE_LAYOUT_GPTJ)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.layout",
                        "scheme.layout=%d is not a rope layout", (int)r->layout);
    if ((int)r->scaling < 0 || (int)r->scaling >= (int)PA_ROPE_SCALING_COUNT)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.scaling",
                        "scheme.scaling=%d is not a rope scaling", (int)r->scaling);
    if (head_dim < 1)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "head_dim", "head_dim=%d must be >= 1",
                        (int)head_dim);
    if (r->rotary_dim < 0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.rotary_dim",
                        "scheme.rotary_dim=%d must be 0 (= head_dim) or even and <= head_dim=%d",
                        (int)r->rotary_dim, (int)head_dim);
    if (r->rotary_dim == 0 && head_dim % 2 != 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim",
                        "scheme.rotary_dim=0 means head_dim=%d, which is odd; set an even "
                        "scheme.rotary_dim < %d",
                        (int)head_dim, (int)head_dim);
    if (r->rotary_dim % 2 != 0 || r->rotary_dim > head_dim)
        return pa__fail(
            err, r->rotary_dim % 2 != 0 ? PA_STATUS_INVALID_ARGUMENT : PA_STATUS_OUT_OF_RANGE,
            "scheme.rotary_dim", "scheme.rotary_dim=%d must be even and <= head_dim=%d",
            (int)r->rotary_dim, (int)head_dim);
    int32_t rd = pa_rope_rotary_dim(r, head_dim);
    {
        const int32_t *sec = r->mrope_section;
        int64_t sum = (int64_t)sec[0] + sec[1] + sec[2];
        for (int k = 0; k < 3; k++)
            if (sec[k] < 0)
                return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.mrope_section",
                                "scheme.mrope_section[%d]=%d must be >= 0", k, (int)sec[k]);
        if ((sec[0] != 0 || sec[1] != 0 || sec[2] != 0) && sum != rd / 2)
            return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.mrope_section",
                            "scheme.mrope_section=[%d, %d, %d] sums to %lld; it must be "
                            "rotary_dim/2=%d (one section per rotated frequency)",
                            (int)sec[0], (int)sec[1], (int)sec[2], (long long)sum, (int)(rd / 2));
        if (r->mrope_interleaved && sum == 0)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.mrope_interleaved",
                            "scheme.mrope_interleaved needs scheme.mrope_section");
    }
    if (!isfinite(r->base))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.base",
                        "scheme.base=%g must be finite", r->base);
    if (r->base <= 1.0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.base", "scheme.base=%g must be > 1",
                        r->base);
    if (!isfinite(r->attention_factor))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.attention_factor",
                        "scheme.attention_factor=%g must be finite", r->attention_factor);
    if (r->attention_factor < 0.0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.attention_factor",
                        "scheme.attention_factor=%g must be > 0 (0 means the default)",
                        r->attention_factor);
    /* cos and sin are returned times the factor in float32: past FLT_MAX
     * every table entry but the zeros would be infinite. */
    if (r->attention_factor > FLT_MAX)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.attention_factor",
                        "scheme.attention_factor=%g is beyond float32's range (%g): cos and sin "
                        "times it would overflow",
                        r->attention_factor, (double)FLT_MAX);

    pa_status st = PA_STATUS_OK;
    switch (r->scaling) {
    case PA_ROPE_SCALING_NONE:
        break;
    case PA_ROPE_SCALING_LINEAR:
        st = check_required_factor(r, 0.0, false, err);
        break;
    case PA_ROPE_SCALING_NTK:
        st = check_required_factor(r, 1.0, true, err);
        if (st == PA_STATUS_OK)
            st = check_r_above_2(r, rd, err);
        break;
    case PA_ROPE_SCALING_DYNAMIC:
        st = check_required_factor(r, 1.0, true, err);
        if (st == PA_STATUS_OK)
            st = check_orig(r, err);
        if (st == PA_STATUS_OK)
            st = check_r_above_2(r, rd, err);
        break;
    case PA_ROPE_SCALING_YARN:
        st = check_yarn(r, err);
        break;
    case PA_ROPE_SCALING_LLAMA3:
        st = check_llama3(r, err);
        break;
    case PA_ROPE_SCALING_LONGROPE:
        st = check_longrope(r, rd / 2, err);
        break;
    case PA_ROPE_SCALING_PROPORTIONAL:
        st = check_proportional(r, err);
        break;
    case PA_ROPE_SCALING_NTK_ALPHA:
        st = check_ntk_alpha(r, rd, err);
        break;
    case PA_ROPE_SCALING_COUNT:
        break;
    }
    return st;
}

int32_t pa_rope_rotary_dim(const pa_rope *r, int32_t head_dim)
{
    return r != NULL && r->rotary_dim != 0 ? r->rotary_dim : head_dim;
}

int32_t pa_rope_original_max_position(const pa_rope *r)
{
    if (r == NULL)
        return 0;
    if (r->original_max_position == 0 && r->scaling == PA_ROPE_SCALING_LLAMA3)
        return LLAMA3_ORIG;
    return r->original_max_position;
}

/* ------------------------------------------------------------------------- */
/* Inverse frequencies                                                       */
/* ------------------------------------------------------------------------- */

/* Everything a scaling needs, resolved once per call (defaults applied, base
 * adjusted, yarn's ramp bounds found), so frequencies can be produced in
 * chunks. Built only from a checked pa_rope. */
typedef struct rope_plan {
    pa_rope_scaling scaling;
    int32_t r;
    double base;
    double factor;
    double attention;
    double ramp_low, ramp_high;       /* yarn */
    double orig, low_freq, high_freq; /* llama3 */
    const float *ext;                 /* longrope */
    int32_t rotating;                 /* proportional: pairs below keep a frequency */
} rope_plan;

/* HF get_mscale(scale, mscale). */
static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* HF find_correction_dim: the dim index at which a frequency turns num_rot
 * times over orig positions. */
static double yarn_correction_dim(double num_rot, double r, double base, double orig)
{
    return r * log(orig / (num_rot * 2.0 * PI)) / (2.0 * log(base));
}

static void plan_init(const pa_rope *r, int32_t head_dim, int32_t max_position, rope_plan *p)
{
    memset(p, 0, sizeof *p);
    p->scaling = r->scaling;
    p->r = pa_rope_rotary_dim(r, head_dim);
    p->base = r->base;
    p->factor = r->factor;
    p->attention = 1.0;
    double rd = (double)p->r;
    double orig = (double)r->original_max_position;

    switch (r->scaling) {
    case PA_ROPE_SCALING_NTK:
        p->base = r->base * pow(r->factor, rd / (rd - 2.0));
        break;
    case PA_ROPE_SCALING_DYNAMIC: {
        double seq = fmax((double)max_position + 1.0, orig);
        p->base = r->base * pow(r->factor * seq / orig - (r->factor - 1.0), rd / (rd - 2.0));
        break;
    }
    case PA_ROPE_SCALING_YARN: {
        double fast = r->beta_fast != 0.0 ? r->beta_fast : 32.0;
        double slow = r->beta_slow != 0.0 ? r->beta_slow : 1.0;
        double lo = yarn_correction_dim(fast, rd, r->base, orig);
        double hi = yarn_correction_dim(slow, rd, r->base, orig);
        if (r->truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        lo = fmax(lo, 0.0);
        hi = fmin(hi, rd - 1.0);
        if (lo == hi)
            hi += 0.001; /* HF's guard against a zero-width ramp */
        p->ramp_low = lo;
        p->ramp_high = hi;
        if (r->mscale != 0.0 && r->mscale_all_dim != 0.0)
            p->attention =
                yarn_mscale(r->factor, r->mscale) / yarn_mscale(r->factor, r->mscale_all_dim);
        else
            p->attention = yarn_mscale(r->factor, 1.0);
        break;
    }
    case PA_ROPE_SCALING_LLAMA3:
        p->factor = r->factor != 0.0 ? r->factor : LLAMA3_FACTOR;
        p->orig = r->original_max_position != 0 ? orig : (double)LLAMA3_ORIG;
        p->low_freq = r->low_freq_factor;
        p->high_freq = r->high_freq_factor;
        break;
    case PA_ROPE_SCALING_LONGROPE: {
        double f = r->factor != 0.0 ? r->factor : 1.0;
        p->ext = (double)max_position + 1.0 > orig ? r->long_factor : r->short_factor;
        p->attention = f <= 1.0 ? 1.0 : sqrt(1.0 + log(f) / log(orig));
        break;
    }
    case PA_ROPE_SCALING_PROPORTIONAL:
        /* HF: int(rope_proportion * head_dim // 2), the product floored. */
        p->factor = r->factor != 0.0 ? r->factor : 1.0;
        p->rotating = (int32_t)floor(r->partial_rotary_factor * rd / 2.0);
        break;
    case PA_ROPE_SCALING_NTK_ALPHA:
        p->base = r->base * pow(r->alpha, rd / (rd - 2.0));
        break;
    case PA_ROPE_SCALING_NONE:
    case PA_ROPE_SCALING_LINEAR:
    case PA_ROPE_SCALING_COUNT:
        break;
    }
    if (r->attention_factor != 0.0)
        p->attention = r->attention_factor;
}

/* inv_freq for i in [i0, i1), written to out[0 .. i1-i0). */
static void plan_inv_freq(const rope_plan *p, int32_t i0, int32_t i1, double *out)
{
    double rd = (double)p->r;
    for (int32_t i = i0; i < i1; i++) {
        double pos_freq = pow(p->base, 2.0 * i / rd);
        double inv = 1.0 / pos_freq;
        switch (p->scaling) {
        case PA_ROPE_SCALING_LINEAR:
            inv /= p->factor;
            break;
        case PA_ROPE_SCALING_YARN: {
            /* ramp 0 keeps the original frequency (extrapolation), 1 divides
             * it by factor (interpolation). */
            double ramp = ((double)i - p->ramp_low) / (p->ramp_high - p->ramp_low);
            ramp = fmin(fmax(ramp, 0.0), 1.0);
            inv = inv / p->factor * ramp + inv * (1.0 - ramp);
            break;
        }
        case PA_ROPE_SCALING_LLAMA3: {
            double wavelen = 2.0 * PI / inv;
            if (wavelen > p->orig / p->low_freq) {
                inv /= p->factor;
            } else if (!(wavelen < p->orig / p->high_freq)) {
                double smooth = (p->orig / wavelen - p->low_freq) / (p->high_freq - p->low_freq);
                inv = (1.0 - smooth) * inv / p->factor + smooth * inv;
            }
            break;
        }
        case PA_ROPE_SCALING_LONGROPE:
            inv = 1.0 / ((double)p->ext[i] * pos_freq);
            break;
        case PA_ROPE_SCALING_PROPORTIONAL:
            inv = i < p->rotating ? inv / p->factor : 0.0;
            break;
        case PA_ROPE_SCALING_NONE:
        case PA_ROPE_SCALING_NTK:
        case PA_ROPE_SCALING_DYNAMIC:
        case PA_ROPE_SCALING_NTK_ALPHA:
        case PA_ROPE_SCALING_COUNT:
            break;
        }
        out[i - i0] = inv;
    }
}

pa_status pa_rope_bands_of(const pa_rope *r, int32_t head_dim, pa_rope_bands *out, pa_error *err)
{
    rope_plan p;
    pa_status st = pa_rope_check(r, head_dim, err);
    if (st != PA_STATUS_OK)
        return st;
    if (out == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "bands", "bands must not be NULL");
    plan_init(r, head_dim, 0, &p);
    out->yarn_low = out->yarn_high = -1.0;
    out->llama3_high_freq_wavelength = out->llama3_low_freq_wavelength = -1.0;
    if (r->scaling == PA_ROPE_SCALING_YARN) {
        /* The ramp as plan_inv_freq uses it: the same numbers. */
        out->yarn_low = p.ramp_low;
        out->yarn_high = p.ramp_high;
    } else if (r->scaling == PA_ROPE_SCALING_LLAMA3) {
        out->llama3_high_freq_wavelength = p.orig / p.high_freq;
        out->llama3_low_freq_wavelength = p.orig / p.low_freq;
    }
    return PA_STATUS_OK;
}

pa_status pa_rope_inv_freq(const pa_rope *r, int32_t head_dim, int32_t max_position,
                           double *inv_freq, double *attention_factor, pa_error *err)
{
    pa_status st = pa_rope_check(r, head_dim, err);
    if (st != PA_STATUS_OK)
        return st;
    if (inv_freq == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "inv_freq", "inv_freq must not be NULL");
    rope_plan p;
    plan_init(r, head_dim, max_position, &p);
    plan_inv_freq(&p, 0, p.r / 2, inv_freq);
    if (attention_factor != NULL)
        *attention_factor = p.attention;
    return PA_STATUS_OK;
}

int pa_rope_mrope_row(const pa_rope *r, int32_t i)
{
    const int32_t *sec = r->mrope_section;
    if (sec[0] == 0 && sec[1] == 0 && sec[2] == 0)
        return 0;
    if (r->mrope_interleaved) {
        if (i % 3 == 1 && i < 3 * sec[1])
            return 1;
        if (i % 3 == 2 && i < 3 * sec[2])
            return 2;
        return 0;
    }
    return i < sec[0] ? 0 : i < sec[0] + sec[1] ? 1 : 2;
}

/* The tables' columns of position row `row` (all columns when mrope is
 * NULL) from positions [n]. */
static void fill_tables(const rope_plan *p, const pa_rope *mrope, int row, const int32_t *positions,
                        int32_t n, float *cos_out, float *sin_out);

static pa_status cos_sin_args(const pa_rope *r, int32_t head_dim, const void *positions, int32_t n,
                              const float *cos_out, const float *sin_out, pa_error *err)
{
    pa_status st = pa_rope_check(r, head_dim, err);
    if (st != PA_STATUS_OK)
        return st;
    if (n < 0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "positions",
                        "the number of positions n=%d must be >= 0", (int)n);
    if (n == 0)
        return PA_STATUS_OK;
    if (positions == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions", "positions must not be NULL");
    if (cos_out == NULL || sin_out == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, cos_out == NULL ? "cos" : "sin",
                        "the %s table must not be NULL", cos_out == NULL ? "cos" : "sin");
    return PA_STATUS_OK;
}

pa_status pa_rope_cos_sin_mrope(const pa_rope *r, int32_t head_dim, const int32_t *positions3,
                                int32_t n, int32_t max_position, float *cos_out, float *sin_out,
                                pa_error *err)
{
    pa_status st = cos_sin_args(r, head_dim, positions3, n, cos_out, sin_out, err);
    if (st != PA_STATUS_OK || n == 0)
        return st;
    rope_plan p;
    plan_init(r, head_dim, max_position, &p);
    for (int row = 0; row < 3; row++)
        fill_tables(&p, r, row, positions3 + (size_t)row * (size_t)n, n, cos_out, sin_out);
    return PA_STATUS_OK;
}

pa_status pa_rope_cos_sin(const pa_rope *r, int32_t head_dim, const int32_t *positions, int32_t n,
                          int32_t max_position, float *cos_out, float *sin_out, pa_error *err)
{
    pa_status st = cos_sin_args(r, head_dim, positions, n, cos_out, sin_out, err);
    if (st != PA_STATUS_OK || n == 0)
        return st;
    rope_plan p;
    plan_init(r, head_dim, max_position, &p);
    fill_tables(&p, NULL, 0, positions, n, cos_out, sin_out);
    return PA_STATUS_OK;
}

PA__CLONES static void fill_tables(const rope_plan *pp, const pa_rope *mrope, int row,
                                   const int32_t *positions, int32_t n, float *cos_out,
                                   float *sin_out)
{
    const rope_plan p = *pp;
    size_t half = (size_t)(p.r / 2);
    /* cos and sin of pos * freq in double. Where a position follows the
     * previous one, the angle advances by freq: a complex multiplication by
     * (cos freq, sin freq) instead of two libm calls (their cost was most of
     * a small request's RoPE). Every ANCHOR-th row, and after any jump, the
     * angle comes from libm again, so rounding drift stays below 1e-14,
     * far under float's 6e-8. */
    enum { ANCHOR = 32 };
    double freq[FREQ_CHUNK], step_c[FREQ_CHUNK], step_s[FREQ_CHUNK];
    double zc[FREQ_CHUNK], zs[FREQ_CHUNK];
    for (int32_t i0 = 0; i0 < p.r / 2; i0 += FREQ_CHUNK) {
        int32_t i1 = pa__min_i32(i0 + FREQ_CHUNK, p.r / 2);
        size_t w = (size_t)(i1 - i0);
        plan_inv_freq(&p, i0, i1, freq);
        for (size_t i = 0; i < w; i++) {
            step_c[i] = cos(freq[i]);
            step_s[i] = sin(freq[i]);
        }
        for (int32_t t = 0; t < n; t++) {
            double pos = (double)positions[t];
            float *c = cos_out + (size_t)t * half + (size_t)i0;
            float *s = sin_out + (size_t)t * half + (size_t)i0;
            if (t % ANCHOR == 0 || (int64_t)positions[t] != (int64_t)positions[t - 1] + 1) {
                for (size_t i = 0; i < w; i++) {
                    double theta = pos * freq[i];
                    zc[i] = cos(theta);
                    zs[i] = sin(theta);
                }
            } else {
                for (size_t i = 0; i < w; i++) {
                    double nc = zc[i] * step_c[i] - zs[i] * step_s[i];
                    zs[i] = zc[i] * step_s[i] + zs[i] * step_c[i];
                    zc[i] = nc;
                }
            }
            if (mrope == NULL) {
                for (size_t i = 0; i < w; i++) {
                    c[i] = (float)(zc[i] * p.attention);
                    s[i] = (float)(zs[i] * p.attention);
                }
            } else {
                for (size_t i = 0; i < w; i++) {
                    if (pa_rope_mrope_row(mrope, i0 + (int32_t)i) != row)
                        continue;
                    c[i] = (float)(zc[i] * p.attention);
                    s[i] = (float)(zs[i] * p.attention);
                }
            }
        }
    }
}
