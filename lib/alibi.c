/* alibi.c - ALiBi head slopes (Press et al. 2022, "Train Short, Test Long").
 *
 * The closed form below equals the paper's recursive get_slopes recipe for any
 * head count at max_bias 8, and is ggml's form for other max_bias values.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

pa_status pa__alibi_check(const pa_alibi *a, int32_t num_heads, pa_error *err)
{
    if (a == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "alibi scheme is NULL");
    if (num_heads < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "num_heads",
                        "num_heads=%d must be at least 1", (int)num_heads);
    if (a->slopes != NULL) {
        if (a->num_slopes != num_heads)
            return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.slopes",
                            "scheme.slopes has %d values but num_heads=%d", (int)a->num_slopes,
                            (int)num_heads);
        for (int32_t h = 0; h < num_heads; h++) {
            if (!isfinite(a->slopes[h])) {
                char field[64];
                snprintf(field, sizeof field, "scheme.slopes[%d]", (int)h);
                return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                                "scheme.slopes[%d]=%g is not finite", (int)h, (double)a->slopes[h]);
            }
        }
        return PA_STATUS_OK;
    }
    if (!isfinite(a->max_bias) || a->max_bias <= 0.0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.max_bias",
                        "scheme.max_bias=%g must be finite and > 0", a->max_bias);
    return PA_STATUS_OK;
}

pa_status pa_alibi_slopes(const pa_alibi *a, int32_t num_heads, float *slopes, pa_error *err)
{
    pa_status st = pa__alibi_check(a, num_heads, err);
    if (st != PA_STATUS_OK)
        return st;
    if (slopes == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "slopes", "slopes output is NULL");
    if (a->slopes != NULL) {
        memcpy(slopes, a->slopes, (size_t)num_heads * sizeof *slopes);
        return PA_STATUS_OK;
    }

    /* n = 2^floor(log2 H), found with integers so no log2 rounding can bite. */
    int32_t n = 1;
    while (n <= num_heads / 2)
        n *= 2;
    for (int32_t h = 0; h < num_heads; h++) {
        double e;
        if (h < n)
            e = -a->max_bias * (double)(h + 1) / (double)n;
        else
            e = -a->max_bias * (double)(2 * (h - n) + 1) / (2.0 * (double)n);
        slopes[h] = (float)exp2(e);
    }
    return PA_STATUS_OK;
}
