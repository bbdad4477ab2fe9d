/* bias_row.c - see bias_row.h. Plain loops that GCC vectorizes at -O3
 * (Makefile), cloned for AVX-512 and AVX2 where the CPU has them, as in
 * lib/softmax.c. */
#include "bias_row.h"

#include "clones.h"

#include <math.h>

PA__CLONES void pa__row_alibi(float *row, const int32_t *kpos, int32_t n, int32_t qp, float m,
                              bool symmetric)
{
    if (symmetric) {
        for (int32_t j = 0; j < n; j++)
            row[j] -= m * fabsf((float)(qp - kpos[j]));
    } else {
        for (int32_t j = 0; j < n; j++)
            row[j] -= m * (float)(qp - kpos[j]);
    }
}

PA__CLONES void pa__row_add_dist(float *row, const int32_t *kpos, int32_t n, int32_t qp,
                                 const float *tab, bool unit)
{
    if (unit && n > 0) {
        /* Key j is at distance |d0 - j|, d0 = qp - kpos[0]: keys up to the
         * query read the table backwards from d0, later ones forwards. */
        const int64_t d0 = (int64_t)qp - kpos[0];
        const int32_t a = d0 < 0 ? 0 : d0 + 1 < n ? (int32_t)d0 + 1 : n;
        for (int32_t j = 0; j < a; j++)
            row[j] += tab[d0 - j];
        for (int32_t j = a; j < n; j++)
            row[j] += tab[j - d0];
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        const int64_t d = (int64_t)qp - kpos[j];
        row[j] += tab[d < 0 ? -d : d];
    }
}

PA__CLONES void pa__row_fire(float *row, const int32_t *kpos, int32_t n, int32_t qp,
                             const double *psi, double inv, double slope, double icpt)
{
    for (int32_t j = 0; j < n; j++)
        row[j] += (float)(slope * (psi[qp - kpos[j]] * inv) + icpt);
}

PA__CLONES void pa__row_fire_unit(float *row, int32_t n, const double *psi, double slope,
                                  double icpt)
{
    /* Key j reads psi[-j]. Walked from the run's last key, the table is
     * read forwards and the row backwards: GCC 12 vectorizes that, but
     * not the double loads at a negative step (it ran one logit at a
     * time, a third of a FIRE call). Each logit gets the same bits. */
    const double *p = psi - (n - 1);
    for (int32_t j = 0; j < n; j++)
        row[n - 1 - j] += (float)(slope * p[j] + icpt);
}

PA__CLONES void pa__row_add(float *row, const float *src, int32_t n)
{
    for (int32_t j = 0; j < n; j++)
        row[j] += src[j];
}

/* Sums with 16 independent lanes, which vectorize without reassociating one
 * accumulator (as lib/softmax.c sums). */
static inline float lane_sum(const float *x, int32_t n)
{
    float acc[16] = {0};
    float s = 0.0f;
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int u = 0; u < 16; u++)
            acc[u] += x[j + u];
    for (; j < n; j++)
        acc[0] += x[j];
    for (int u = 0; u < 16; u++)
        s += acc[u];
    return s;
}

/* [*a, *b): the keys j whose kpos[0] + j - qp lies within [-md, md]. */
static void unit_span(const int32_t *kpos, int32_t n, int32_t qp, int32_t md, int32_t *a,
                      int32_t *b)
{
    const int64_t d0 = (int64_t)kpos[0] - qp; /* relative position of key 0 */
    int64_t lo = -md - d0, hi = md - d0 + 1;
    lo = lo < 0 ? 0 : lo > n ? n : lo;
    hi = hi < lo ? lo : hi > n ? n : hi;
    *a = (int32_t)lo;
    *b = (int32_t)hi;
}

PA__CLONES void pa__row_add_rel(float *row, const int32_t *kpos, int32_t n, int32_t qp,
                                const float *tab, int32_t md, bool unit)
{
    if (n <= 0)
        return;
    if (unit) {
        int32_t a, b;
        const float left = tab[0], right = tab[2 * md];
        int64_t off; /* tab index of key 0: key j's is off + j */
        unit_span(kpos, n, qp, md, &a, &b);
        off = (int64_t)kpos[0] - qp + md;
        for (int32_t j = 0; j < a; j++)
            row[j] += left;
        for (int32_t j = a; j < b; j++)
            row[j] += tab[off + j];
        for (int32_t j = b; j < n; j++)
            row[j] += right;
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        int32_t d = kpos[j] - qp;
        d = d < -md ? -md : d > md ? md : d;
        row[j] += tab[d + md];
    }
}

PA__CLONES void pa__row_add_rel_key(float *row, const int32_t *kpos, int32_t n, int32_t qp,
                                    const float *kr, size_t ld, int32_t lo, int32_t md,
                                    bool reverse, bool unit)
{
    if (n <= 0)
        return;
    if (unit) {
        /* Keys before a and from b on are clipped to one end of the table
         * each: their terms are a contiguous run of one kr row. */
        int32_t a, b;
        int64_t off; /* key 0's unclipped index is off (+ j, or - j when reverse) */
        unit_span(kpos, n, qp, md, &a, &b);
        off = reverse ? md - ((int64_t)kpos[0] - qp) : (int64_t)kpos[0] - qp + md;
        if (a > 0) {
            const float *src = kr + (size_t)((reverse ? 2 * (int64_t)md : 0) - lo) * ld;
            for (int32_t j = 0; j < a; j++)
                row[j] += src[j];
        }
        if (reverse) {
            for (int32_t j = a; j < b; j++)
                row[j] += kr[(size_t)(off - j - lo) * ld + (size_t)j];
        } else {
            for (int32_t j = a; j < b; j++)
                row[j] += kr[(size_t)(off + j - lo) * ld + (size_t)j];
        }
        if (b < n) {
            const float *src = kr + (size_t)((reverse ? 0 : 2 * (int64_t)md) - lo) * ld;
            for (int32_t j = b; j < n; j++)
                row[j] += src[j];
        }
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        int64_t d = (int64_t)kpos[j] - qp;
        d = reverse ? -d : d;
        d = d < -md ? -md : d > md ? md : d;
        row[j] += kr[(size_t)(d + md - lo) * ld + (size_t)j];
    }
}

PA__CLONES void pa__row_bin_rel(const float *p, const int32_t *kpos, int32_t n, int32_t qp,
                                float *bins, int32_t md, bool unit)
{
    if (n <= 0)
        return;
    if (unit) {
        int32_t a, b;
        int64_t off;
        unit_span(kpos, n, qp, md, &a, &b);
        off = (int64_t)kpos[0] - qp + md;
        bins[0] += lane_sum(p, a);
        for (int32_t j = a; j < b; j++)
            bins[off + j] += p[j];
        bins[2 * md] += lane_sum(p + b, n - b);
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        int32_t d = kpos[j] - qp;
        d = d < -md ? -md : d > md ? md : d;
        bins[d + md] += p[j];
    }
}
