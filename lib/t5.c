/* t5.c - T5 relative-position buckets (Raffel et al. 2020), bit-exact with
 * Hugging Face T5Attention._relative_position_bucket on CPU torch.
 *
 * HF computes the logarithmic part in float32 and truncates toward zero, so
 * this file does the same arithmetic in float to land on the same buckets
 * (CPU torch semantics: the Python scalars are cast to float32 and divided by,
 * not multiplied by a reciprocal as CUDA kernels may).
 *
 * Valid configurations (pa_t5_check), from the formula: per direction there
 * are nb = num_buckets (causal) or num_buckets/2 (bidirectional) buckets and
 * max_exact = nb/2 exact ones. max_exact >= 1 is needed (else log(rel/0)), so
 * num_buckets >= 2 causal and even and >= 4 bidirectional; max_distance >
 * max_exact is needed (else log(max_distance/max_exact) <= 0). For a rejected
 * configuration pa_t5_bucket returns 0 rather than invoking undefined
 * behaviour.
 */
#include "internal.h"

#include <math.h>

/* Buckets per direction and the exact-bucket count, as HF derives them. */
static int64_t effective_buckets(bool bidirectional, int32_t num_buckets)
{
    return bidirectional ? (int64_t)num_buckets / 2 : (int64_t)num_buckets;
}

int32_t pa_t5_bucket(int32_t relative_position, bool bidirectional, int32_t num_buckets,
                     int32_t max_distance)
{
    int64_t rel = relative_position; /* 64 bits: |INT32_MIN| must not wrap */
    int64_t nb = effective_buckets(bidirectional, num_buckets);
    int64_t max_exact = nb / 2;
    int64_t bucket = 0;

    /* A configuration pa_t5_check rejects would make HF divide by zero or
     * take log(0); define it as bucket 0 instead of undefined behaviour. */
    if (max_exact < 1 || (int64_t)max_distance <= max_exact)
        return 0;

    if (bidirectional) {
        if (rel > 0)
            bucket += nb;
        rel = rel < 0 ? -rel : rel;
    } else {
        rel = rel < 0 ? -rel : 0;
    }
    if (rel < max_exact)
        return (int32_t)(bucket + rel);

    /* torch: log(rel.float() / max_exact) / math.log(max_distance / max_exact)
     *        * (num_buckets - max_exact), all float32 (the Python scalars are
     * cast to float32), then .to(torch.long) truncates toward zero. */
    float ratio = (float)rel / (float)max_exact;
    float lg = logf(ratio);
    float denom = (float)log((double)max_distance / (double)max_exact);
    float scaled = lg / denom * (float)(nb - max_exact);
    int64_t large;
    /* scaled >= 0 here. Clamp before converting so a huge value cannot
     * overflow the integer conversion; the result is the same as HF's min(). */
    if ((double)scaled >= (double)(nb - max_exact))
        large = nb - 1;
    else
        large = max_exact + (int64_t)scaled;
    if (large > nb - 1)
        large = nb - 1;
    return (int32_t)(bucket + large);
}

pa_status pa_t5_check(const pa_t5 *t, pa_error *err)
{
    if (t == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "t5 scheme is NULL");
    if (t->bidirectional) {
        if (t->num_buckets < 4 || t->num_buckets % 2 != 0)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.num_buckets",
                            "scheme.num_buckets=%d must be even and >= 4 when bidirectional "
                            "(num_buckets/4 exact buckets per direction must be >= 1)",
                            (int)t->num_buckets);
    } else if (t->num_buckets < 2) {
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.num_buckets",
                        "scheme.num_buckets=%d must be >= 2 (num_buckets/2 exact buckets "
                        "must be >= 1)",
                        (int)t->num_buckets);
    }
    int64_t max_exact = effective_buckets(t->bidirectional, t->num_buckets) / 2;
    if ((int64_t)t->max_distance <= max_exact)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.max_distance",
                        "scheme.max_distance=%d must exceed max_exact=%d (num_buckets=%d, %s); "
                        "otherwise log(max_distance/max_exact) <= 0",
                        (int)t->max_distance, (int)max_exact, (int)t->num_buckets,
                        t->bidirectional ? "bidirectional" : "causal");
    return PA_STATUS_OK;
}

pa_status pa__t5_check_table(const pa_t5 *t, int32_t num_heads, pa_error *err)
{
    pa_status st = pa_t5_check(t, err);
    if (st != PA_STATUS_OK)
        return st;
    if (t->table == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.table",
                        "scheme.table is NULL: t5 attention needs a [num_buckets, H] bias table");
    if (t->table_rows != t->num_buckets)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.table.shape[0]",
                        "scheme.table.shape[0]=%d does not equal num_buckets=%d",
                        (int)t->table_rows, (int)t->num_buckets);
    if (t->table_cols != num_heads)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.table.shape[1]",
                        "scheme.table.shape[1]=%d does not equal num_heads=%d", (int)t->table_cols,
                        (int)num_heads);
    return PA_STATUS_OK;
}
