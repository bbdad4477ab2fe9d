/* rope_offset.c - the RoPE relative-position analysis: the score
 * <R(m) q, R(n) k> as a function of m - n, and how little it varies with m;
 * the same for xPos, whose pairs also carry zeta_i^((m - n) / scale_base).
 *
 * Everything is computed in double from pa_rope_inv_freq and
 * pa__rope_rotate_one (lib/rope.c); only the results are rounded to float.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>

/* The analysis keeps its vectors on the stack (it takes no workspace), which
 * bounds the head dimension it accepts. Real models use head_dim <= 256. */
#define MAX_HEAD_DIM 1024

static double dot(const double *a, const double *b, int32_t n)
{
    double acc = 0.0;
    for (int32_t i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

/* Checks that position + offset is a valid position (>= 0 and an int32). */
static pa_status check_shifted(int64_t pos, const char *pos_name, int32_t o, int32_t oi,
                               pa_error *err)
{
    char field[64];
    int64_t v = pos + (int64_t)o;
    if (v >= 0 && v <= INT32_MAX)
        return PA_STATUS_OK;
    snprintf(field, sizeof field, "offsets[%d]", (int)oi);
    return pa__fail(err, PA_STATUS_OUT_OF_RANGE, field,
                    "%s=%lld + offsets[%d]=%d = %lld is outside [0, %d]", pos_name, (long long)pos,
                    (int)oi, (int)o, (long long)v, (int)INT32_MAX);
}

/* xPos's factor on the score of a query at m against a key at n: pair i
 * of the rotated query times zeta_i^((m - n) / scale_base). The kernels
 * scale q and k about a common centre c (zeta^((m - c)/sb) and
 * zeta^(-(n - c)/sb)); their product is this factor for every c, and taking
 * c = n keeps it finite for positions up to 2^31. */
static void xpos_factor(const pa_xpos *x, const pa_rope *r, int32_t head_dim, const double *lz,
                        int64_t m, int64_t n, double *qr)
{
    const int32_t h = head_dim / 2;
    const double e = (double)(m - n) / x->scale_base;
    for (int32_t i = 0; i < h; i++) {
        const double s = exp(e * lz[i]);
        qr[r->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i : i] *= s;
        qr[r->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i + 1 : i + h] *= s;
    }
}

/* The offset analysis of rope (x NULL) or of xpos (r its rotation). */
static pa_status offset_scores(const pa_rope *r, const pa_xpos *x, int32_t head_dim, const float *q,
                               const float *k, const int32_t *offsets, int32_t n_offsets,
                               int32_t base_position, const int32_t *positions, int32_t n_positions,
                               float *score, float *spread, pa_error *err)
{
    char name[64];
    pa_status st = x != NULL ? pa_xpos_check(x, head_dim, err) : pa_rope_check(r, head_dim, err);
    double lz[MAX_HEAD_DIM / 2];
    if (st != PA_STATUS_OK)
        return st;
    if (head_dim > MAX_HEAD_DIM)
        return pa__fail(err, PA_STATUS_TOO_LARGE, "head_dim",
                        "head_dim=%d is larger than the %d this analysis supports", (int)head_dim,
                        MAX_HEAD_DIM);
    if (q == NULL || k == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, q == NULL ? "q" : "k",
                        "%s must not be NULL", q == NULL ? "q" : "k");
    if (n_offsets < 0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "offsets",
                        "the number of offsets n_offsets=%d must be >= 0", (int)n_offsets);
    if (n_positions < 0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "positions",
                        "the number of positions n_positions=%d must be >= 0", (int)n_positions);
    if (n_offsets > 0 && (offsets == NULL || score == NULL || spread == NULL)) {
        const char *what = offsets == NULL ? "offsets" : score == NULL ? "score" : "spread";
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, what, "%s must not be NULL", what);
    }
    if (n_positions > 0 && positions == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions", "positions must not be NULL");
    if (base_position < 0)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "base_position",
                        "base_position=%d must be >= 0", (int)base_position);

    /* The smallest and largest positions the analysis will use. */
    bool use_positions = n_positions > 0;
    int32_t jmin = 0, jmax = 0;
    for (int32_t j = 0; j < n_positions; j++) {
        if (positions[j] < 0) {
            snprintf(name, sizeof name, "positions[%d]", (int)j);
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, name, "%s=%d must be >= 0", name,
                            (int)positions[j]);
        }
        if (positions[j] < positions[jmin])
            jmin = j;
        if (positions[j] > positions[jmax])
            jmax = j;
    }
    int32_t pmax = use_positions ? pa__max_i32(base_position, positions[jmax]) : base_position;
    int32_t max_used = pmax;
    for (int32_t o = 0; o < n_offsets; o++) {
        st = check_shifted(base_position, "base_position", offsets[o], o, err);
        if (st == PA_STATUS_OK && use_positions) {
            int32_t j = offsets[o] < 0 ? jmin : jmax;
            snprintf(name, sizeof name, "positions[%d]", (int)j);
            st = check_shifted(positions[j], name, offsets[o], o, err);
        }
        if (st != PA_STATUS_OK)
            return st;
        /* Both sums were checked to fit in int32 above. */
        max_used = pa__max_i32(max_used, base_position + offsets[o]);
        if (use_positions)
            max_used = pa__max_i32(max_used, positions[jmax] + offsets[o]);
    }

    double inv_freq[MAX_HEAD_DIM / 2];
    double af;
    st = pa_rope_inv_freq(r, head_dim, max_used, inv_freq, &af, err);
    if (st != PA_STATUS_OK)
        return st;

    if (x != NULL)
        for (int32_t i = 0; i < head_dim / 2; i++)
            lz[i] = log((2.0 * i + 0.4 * head_dim) / (1.4 * head_dim));

    double qr[MAX_HEAD_DIM], kr[MAX_HEAD_DIM];
    for (int32_t o = 0; o < n_offsets; o++) {
        pa__rope_rotate_one(r, head_dim, inv_freq, af, base_position + offsets[o], q, qr);
        pa__rope_rotate_one(r, head_dim, inv_freq, af, base_position, k, kr);
        if (x != NULL)
            xpos_factor(x, r, head_dim, lz, (int64_t)base_position + offsets[o], base_position, qr);
        const double sc = dot(qr, kr, head_dim);
        score[o] = (float)sc;
        double lo = INFINITY, hi = -INFINITY;
        for (int32_t j = 0; j < n_positions; j++) {
            pa__rope_rotate_one(r, head_dim, inv_freq, af, positions[j] + offsets[o], q, qr);
            pa__rope_rotate_one(r, head_dim, inv_freq, af, positions[j], k, kr);
            if (x != NULL)
                xpos_factor(x, r, head_dim, lz, (int64_t)positions[j] + offsets[o], positions[j],
                            qr);
            double v = dot(qr, kr, head_dim);
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
        spread[o] = n_positions > 0 ? (float)(hi - lo) : 0.0f;
        /* Formed in double, returned in float32: finite or an error. */
        if (!isfinite(score[o]) || !isfinite(spread[o])) {
            const bool s = !isfinite(score[o]);
            snprintf(name, sizeof name, "%s[%d]", s ? "score" : "spread", (int)o);
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, name,
                            "%s=%g at offset %d overflows float32 (q and k are too large for "
                            "their rotated dot products): scale them down",
                            name, s ? sc : hi - lo, (int)offsets[o]);
        }
    }
    return PA_STATUS_OK;
}

pa_status pa_analyze_rope_offset(const pa_rope *r, int32_t head_dim, const float *q, const float *k,
                                 const int32_t *offsets, int32_t n_offsets, int32_t base_position,
                                 const int32_t *positions, int32_t n_positions, float *score,
                                 float *spread, pa_error *err)
{
    return offset_scores(r, NULL, head_dim, q, k, offsets, n_offsets, base_position, positions,
                         n_positions, score, spread, err);
}

pa_status pa_analyze_xpos_offset(const pa_xpos *x, int32_t head_dim, const float *q, const float *k,
                                 const int32_t *offsets, int32_t n_offsets, int32_t base_position,
                                 const int32_t *positions, int32_t n_positions, float *score,
                                 float *spread, pa_error *err)
{
    pa_rope r;
    if (x == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "xpos configuration is NULL");
    pa_xpos_rope(x, &r);
    return offset_scores(&r, x, head_dim, q, k, offsets, n_offsets, base_position, positions,
                         n_positions, score, spread, err);
}
