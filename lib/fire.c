/* fire.c - FIRE (Li et al. 2023, "Functional Interpolation for Relative
 * Positions Improves Long Context Transformers"): its parameters, its bias
 * evaluated directly, and the per-call tables the attention kernels use
 * (lib/attention.c prepares them, lib/attention_mask.c applies them).
 *
 * The numbers are those of the peer implementation mcleish7/arithmetic
 * (cramming/architectures/embeddings.py, class FIRE): psi(x) = log(|c x| +
 * 1), x = psi(|i - j|) / (psi(max(i, |L|)) + eps), an MLP
 * Linear(1, hidden) -> ReLU -> Linear(hidden, H) of that scalar.
 *
 * The MLP of a scalar with a ReLU is piecewise linear in x, with a
 * breakpoint at -b1[k] / w1[k] for each unit with w1[k] != 0. The kernels
 * do not run the MLP per logit: per call, the breakpoints are sorted and
 * each segment's slope and intercept per head summed (in double), so a
 * logit costs a psi (tabled by distance), a division, a segment step and
 * one multiply-add.
 */
#include "internal.h"

#include "bias_row.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static pa_status check_array(const float *v, int32_t n, int32_t want, const char *name,
                             const char *want_text, pa_error *err)
{
    char field[64];
    if (v == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, name,
                        "%s is required: fire's MLP needs %s = %d values", name, want_text,
                        (int)want);
    if (n != want)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, name, "%s has %d values but %s = %d", name,
                        (int)n, want_text, (int)want);
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            snprintf(field, sizeof field, "%s[%d]", name, (int)i);
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field, "%s=%g is not finite", field,
                            (double)v[i]);
        }
    }
    return PA_STATUS_OK;
}

pa_status pa_fire_check(const pa_fire *f, int32_t num_heads, pa_error *err)
{
    char text[96];
    int32_t hidden;
    pa_status st;
    if (f == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "fire scheme is NULL");
    if (num_heads < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "num_heads",
                        "num_heads=%d must be at least 1", (int)num_heads);
    if (!isfinite(f->c))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.c", "scheme.c=%g is not finite",
                        f->c);
    if (!isfinite(f->L))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.L", "scheme.L=%g is not finite",
                        f->L);
    if (!isfinite(f->eps) || !(f->eps > 0.0))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.eps",
                        "scheme.eps=%g must be finite and > 0 (it keeps the normaliser "
                        "psi(max(i, |L|)) + eps away from 0)",
                        f->eps);
    if (f->w1 == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.w1",
                        "scheme.w1 is required: the first layer's weights [hidden] (hidden is "
                        "their count)");
    hidden = f->num_w1;
    if (hidden < 1 || hidden > PA_FIRE_MAX_HIDDEN)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.w1",
                        "scheme.w1 has %d values: hidden must be in [1, %d]", (int)hidden,
                        PA_FIRE_MAX_HIDDEN);
    if ((st = check_array(f->w1, f->num_w1, hidden, "scheme.w1", "hidden", err)) != PA_STATUS_OK)
        return st;
    snprintf(text, sizeof text, "hidden (scheme.w1's length)");
    if ((st = check_array(f->b1, f->num_b1, hidden, "scheme.b1", text, err)) != PA_STATUS_OK)
        return st;
    if ((int64_t)hidden * num_heads > INT32_MAX)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.w2",
                        "scheme.w2 would need hidden * num_heads = %d * %d values: too many",
                        (int)hidden, (int)num_heads);
    snprintf(text, sizeof text, "hidden * num_heads = %d * %d", (int)hidden, (int)num_heads);
    if ((st = check_array(f->w2, f->num_w2, hidden * num_heads, "scheme.w2", text, err)) !=
        PA_STATUS_OK)
        return st;
    return check_array(f->b2, f->num_b2, num_heads, "scheme.b2", "num_heads", err);
}

double pa__fire_psi(const pa_fire *f, double distance)
{
    return log1p(fabs(f->c * distance));
}

double pa__fire_norm(const pa_fire *f, double qpos)
{
    const double L = fabs(f->L);
    return pa__fire_psi(f, qpos > L ? qpos : L) + f->eps;
}

double pa_fire_bias(const pa_fire *f, int32_t H, int32_t h, double qpos, double kpos)
{
    const int32_t hidden = f->num_w1;
    const double x = pa__fire_psi(f, fabs(qpos - kpos)) / pa__fire_norm(f, qpos);
    double sum = f->b2[h];
    for (int32_t k = 0; k < hidden; k++) {
        const double u = (double)f->w1[k] * x + (double)f->b1[k];
        if (u > 0.0)
            sum += (double)f->w2[(size_t)k * H + h] * u;
    }
    return sum;
}

static int unit_order(const void *a, const void *b)
{
    const double x = ((const pa__fire_unit *)a)->t, y = ((const pa__fire_unit *)b)->t;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* Adds sign * unit k's linear piece w2[k, h] (w1[k] x + b1[k]) to every
 * head's slope and intercept of one segment. */
static void add_unit(const pa_fire *f, int32_t H, int32_t k, double sign, double *seg)
{
    const double w1 = f->w1[k], b1 = f->b1[k];
    for (int32_t h = 0; h < H; h++) {
        const double w2 = sign * (double)f->w2[(size_t)k * H + h];
        seg[2 * (size_t)h] += w2 * w1;
        seg[2 * (size_t)h + 1] += w2 * b1;
    }
}

int32_t pa__fire_segments(const pa_fire *f, int32_t H, pa__fire_unit *units, double *bp,
                          double *seg)
{
    const int32_t hidden = f->num_w1;
    const size_t stride = 2 * (size_t)H; /* one segment: [H][slope, intercept] */
    int32_t nbp = 0;
    double *s0 = seg;
    for (int32_t k = 0; k < hidden; k++) {
        if (f->w1[k] != 0.0f) {
            units[nbp].t = -(double)f->b1[k] / (double)f->w1[k];
            units[nbp].k = k;
            nbp++;
        }
    }
    qsort(units, (size_t)nbp, sizeof *units, unit_order);
    for (int32_t n = 0; n < nbp; n++)
        bp[n] = units[n].t;
    /* Segment 0, x below every breakpoint: units with w1 < 0 are on; a unit
     * with w1 == 0 is the constant relu(b1) on every segment. */
    for (int32_t h = 0; h < H; h++) {
        s0[2 * (size_t)h] = 0.0;
        s0[2 * (size_t)h + 1] = f->b2[h];
    }
    for (int32_t k = 0; k < hidden; k++) {
        if (f->w1[k] < 0.0f)
            add_unit(f, H, k, 1.0, s0);
        else if (f->w1[k] == 0.0f && f->b1[k] > 0.0f)
            for (int32_t h = 0; h < H; h++)
                s0[2 * (size_t)h + 1] += (double)f->w2[(size_t)k * H + h] * (double)f->b1[k];
    }
    /* Past breakpoint n its unit switches: on when w1 > 0, off when w1 < 0. */
    for (int32_t n = 0; n < nbp; n++) {
        const int32_t k = units[n].k;
        double *prev = seg + (size_t)n * stride, *next = prev + stride;
        for (size_t e = 0; e < stride; e++)
            next[e] = prev[e];
        add_unit(f, H, k, f->w1[k] > 0.0f ? 1.0 : -1.0, next);
    }
    return nbp;
}

double pa__fire_segment_value(const double *seg, int32_t H, int32_t s, int32_t h, double x)
{
    const double *e = seg + ((size_t)s * H + (size_t)h) * 2;
    return e[0] * x + e[1];
}

pa_status pa__fire_span(int32_t H, const double *bp, int32_t nbp, const double *seg, double xmax,
                        pa_error *err)
{
    /* Piecewise linear: its extremes on [0, xmax] are at the ends or at a
     * breakpoint between them. */
    for (int32_t s = 0; s <= nbp; s++) {
        const double lo = s > 0 ? bp[s - 1] : -INFINITY, hi = s < nbp ? bp[s] : INFINITY;
        double xs[2];
        if (hi < 0.0 || lo > xmax)
            continue;
        xs[0] = lo > 0.0 ? lo : 0.0;
        xs[1] = hi < xmax ? hi : xmax;
        for (int32_t h = 0; h < H; h++) {
            for (int e = 0; e < 2; e++) {
                const double v = pa__fire_segment_value(seg, H, s, h, xs[e]);
                if (!isfinite((float)v))
                    return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.w2",
                                    "the fire bias of head %d overflows float32 (%g at "
                                    "normalised distance %g): scale scheme.w2 or scheme.b2 down",
                                    (int)h, v, xs[e]);
            }
        }
    }
    return PA_STATUS_OK;
}

/* The segment of x: bp[s - 1] <= x < bp[s], walking from s. */
static inline int32_t segment_from(const double *bp, int32_t nbp, int32_t s, double x)
{
    while (s > 0 && x < bp[s - 1])
        s--;
    while (s < nbp && x >= bp[s])
        s++;
    return s;
}

/* The smallest m in [lo, hi) with psi[m] * inv >= x (psi increasing), or
 * hi if there is none: galloping out from the guess g, then halving. The
 * same answer as halving [lo, hi), in a few steps when g is near it. */
static int32_t first_at_least(const double *psi, double inv, double x, int32_t lo, int32_t hi,
                              int32_t g)
{
    int64_t a, b, step = 1; /* the answer is in (a, b]: psi[a] below x or a = lo - 1 */
    if (lo >= hi)
        return hi;
    g = g < lo ? lo : g >= hi ? hi - 1 : g;
    if (psi[g] * inv >= x) {
        a = lo - 1;
        b = g;
        while (b - step >= lo) {
            if (!(psi[b - step] * inv >= x)) {
                a = b - step;
                break;
            }
            b -= step;
            step *= 2;
        }
    } else {
        a = g;
        b = hi;
        while (a + step < hi) {
            if (psi[a + step] * inv >= x) {
                b = a + step;
                break;
            }
            a += step;
            step *= 2;
        }
    }
    while (b - a > 1) {
        const int64_t m = a + (b - a) / 2;
        if (psi[m] * inv >= x)
            b = m;
        else
            a = m;
    }
    return (int32_t)b;
}

void pa__fire_thresholds(const pa__fire_tables *t, int32_t i)
{
    const double inv = 1.0 / t->norm[i];
    const size_t nb = (size_t)(t->nbp > 0 ? t->nbp : 1);
    int32_t *thr = t->dthr + (size_t)i * nb, lo = 0;
    /* Row i - 1's thresholds are the guesses: neighbouring rows' normalisers
     * are equal up to |L| and close past it. psi grows with d and bp with
     * k: each threshold is past the last. */
    const int32_t *prev = i > 0 ? thr - nb : NULL;
    for (int32_t k = 0; k < t->nbp; k++)
        thr[k] = lo = first_at_least(t->psi, inv, t->bp[k], lo, t->psi_n, prev ? prev[k] : lo);
}

void pa__fire_row(float *row, const int32_t *kpos, int32_t n, int32_t qp, int32_t i,
                  const pa__fire_tables *t, int32_t h, int32_t H, double c, bool sorted)
{
    const double *bp = t->bp, norm = t->norm[i];
    const int32_t nbp = t->nbp;
    int32_t s = t->nbp / 2;
    if (sorted && t->dthr != NULL && n > 0) {
        /* Keys at or before the query, [0, e): their distance does not grow
         * with j, so each segment is one run of keys, and a run is one
         * vectorized multiply-add. The keys after the query are left as
         * they are: fire is causal, they are masked. The run's end comes
         * from the row's distance thresholds: O(1) with consecutive keys, a
         * binary search over the positions otherwise. */
        const double inv = 1.0 / norm;
        const int32_t *thr = t->dthr + (size_t)i * (size_t)(nbp > 0 ? nbp : 1);
        const bool unit = (int64_t)kpos[n - 1] - kpos[0] == n - 1;
        int32_t e = 0, j = 0;
        if (unit) {
            const int64_t v = (int64_t)qp - kpos[0] + 1;
            e = v < 0 ? 0 : v > n ? n : (int32_t)v;
        } else {
            int32_t hi = n;
            while (e < hi) {
                const int32_t m = e + (hi - e) / 2;
                if (kpos[m] <= qp)
                    e = m + 1;
                else
                    hi = m;
            }
        }
        while (j < e) {
            const int32_t d = qp - kpos[j];
            const double *sg;
            int32_t a = j + 1, b = e;
            while (s > 0 && d < thr[s - 1])
                s--;
            while (s < nbp && d >= thr[s])
                s++;
            if (s == 0) {
                a = e;
            } else if (unit) {
                const int64_t v = (int64_t)j + d - thr[s - 1] + 1;
                a = v > e ? e : (int32_t)v;
            } else {
                const int64_t kmax = (int64_t)qp - thr[s - 1]; /* d >= thr: kpos <= kmax */
                while (a < b) {
                    const int32_t m = a + (b - a) / 2;
                    if (kpos[m] <= kmax)
                        a = m + 1;
                    else
                        b = m;
                }
            }
            sg = t->seg + ((size_t)s * H + (size_t)h) * 2;
            if (unit)
                pa__row_fire_unit(row + j, a - j, t->psi + d, sg[0] * inv, sg[1]);
            else
                pa__row_fire(row + j, kpos + j, a - j, qp, t->psi, inv, sg[0], sg[1]);
            j = a;
        }
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        const int64_t d0 = (int64_t)qp - kpos[j], d = d0 < 0 ? -d0 : d0;
        const double ps = d < t->psi_n ? t->psi[d] : log1p(fabs(c * (double)d));
        const double x = ps / norm;
        const double *e;
        /* Neighbouring keys have neighbouring distances: the segment moves
         * by a step or two, if at all, along a row of sorted keys. */
        s = segment_from(bp, nbp, s, x);
        e = t->seg + ((size_t)s * H + (size_t)h) * 2;
        row[j] += (float)(e[0] * x + e[1]);
    }
}
