/* hist.c - posattn-load's latency histogram: HdrHistogram-style log-linear
 * buckets (two significant digits) in a fixed array, so a long run costs no
 * memory per request and percentiles never need a sort.
 */
#include "load.h"

#include <string.h>

static int msb(uint64_t v)
{
    int n = 0;
    while (v >>= 1)
        n++;
    return n;
}

static int bucket_of(uint64_t v)
{
    if (v < 2 * HIST_SUB_HALF)
        return (int)v;
    int b = msb(v) - 6; /* 2 * HIST_SUB_HALF = 2^7: sub lands in [64, 128) */
    if (b > HIST_MAX_SHIFT) {
        b = HIST_MAX_SHIFT;
        v = ((uint64_t)(2 * HIST_SUB_HALF) << b) - 1;
    }
    uint64_t sub = v >> b;
    return 2 * HIST_SUB_HALF + (b - 1) * HIST_SUB_HALF + (int)(sub - HIST_SUB_HALF);
}

static uint64_t bucket_high(int idx)
{
    if (idx < 2 * HIST_SUB_HALF)
        return (uint64_t)idx;
    int b = (idx - 2 * HIST_SUB_HALF) / HIST_SUB_HALF + 1;
    uint64_t sub = (uint64_t)((idx - 2 * HIST_SUB_HALF) % HIST_SUB_HALF + HIST_SUB_HALF);
    return ((sub + 1) << b) - 1;
}

void load_hist_init(load_hist *h)
{
    memset(h, 0, sizeof *h);
}

void load_hist_record(load_hist *h, uint64_t us)
{
    h->counts[bucket_of(us)]++;
    if (h->total == 0 || us < h->min_us)
        h->min_us = us;
    if (us > h->max_us)
        h->max_us = us;
    h->total++;
    h->sum_us += (double)us;
}

void load_hist_merge(load_hist *dst, const load_hist *src)
{
    if (src->total == 0)
        return;
    for (int i = 0; i < HIST_BUCKETS; i++)
        dst->counts[i] += src->counts[i];
    if (dst->total == 0 || src->min_us < dst->min_us)
        dst->min_us = src->min_us;
    if (src->max_us > dst->max_us)
        dst->max_us = src->max_us;
    dst->total += src->total;
    dst->sum_us += src->sum_us;
}

uint64_t load_hist_percentile(const load_hist *h, double p)
{
    if (h->total == 0)
        return 0;
    if (p >= 100.0)
        return h->max_us;
    /* The smallest value with at least ceil(p% of total) values at or below. */
    double want = p / 100.0 * (double)h->total;
    uint64_t target = (uint64_t)want;
    if ((double)target < want)
        target++;
    if (target < 1)
        target = 1;
    uint64_t seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= target) {
            uint64_t v = bucket_high(i);
            return v > h->max_us ? h->max_us : v;
        }
    }
    return h->max_us;
}
