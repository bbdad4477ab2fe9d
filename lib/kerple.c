/* kerple.c - KERPLE's parameters and bias (Chi et al. 2022, "KERPLE:
 * Kernelized Relative Positional Embedding for Length Extrapolation").
 *
 * The formulas are those of the authors' code, chijames/KERPLE
 * megatron/mpu/layers.py (ParallelKerpleLog, ParallelKerplePower): there the
 * parameters are clamped to >= 1e-2 (the power's exponent to <= 2) before
 * every use; here such a value is refused, naming the head, so that what is
 * computed is always what was sent. The attention kernels apply the bias
 * (lib/attention_mask.c); this file checks and evaluates it.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>

/* The reference's eps: the smallest value it lets a parameter take, as the
 * float the parameter is (0.01 itself passes). */
#define KERPLE_MIN 0.01f

static pa_status check_values(const float *v, int32_t n, int32_t num_heads, const char *name,
                              double hi, pa_error *err)
{
    char field[64];
    if (v == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, name,
                        "%s is required: kerple needs one value per head (num_heads=%d)", name,
                        (int)num_heads);
    if (n != num_heads)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, name, "%s has %d values but num_heads=%d",
                        name, (int)n, (int)num_heads);
    for (int32_t h = 0; h < n; h++) {
        double x = v[h];
        snprintf(field, sizeof field, "%s[%d]", name, (int)h);
        if (!isfinite(x))
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field, "%s=%g is not finite", field,
                            x);
        if (v[h] < KERPLE_MIN)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                            "%s=%g is below 0.01 (the KERPLE reference clamps its parameters "
                            "to >= 1e-2; send 0.01 for the value it would use)",
                            field, x);
        if (x > hi)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                            "%s=%g is above 2: the power form's exponent is in (0, 2] (the "
                            "KERPLE reference clamps it to <= 2; send 2 for the value it would "
                            "use)",
                            field, x);
    }
    return PA_STATUS_OK;
}

pa_status pa_kerple_check(const pa_kerple *k, int32_t num_heads, pa_error *err)
{
    pa_status st;
    if (k == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "kerple scheme is NULL");
    if (num_heads < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "num_heads",
                        "num_heads=%d must be at least 1", (int)num_heads);
    if (k->form != PA_KERPLE_FORM_LOG && k->form != PA_KERPLE_FORM_POWER)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.form",
                        "scheme.form=%d is not log or power", (int)k->form);
    st = check_values(k->r1, k->num_r1, num_heads, "scheme.r1", INFINITY, err);
    if (st != PA_STATUS_OK)
        return st;
    return check_values(k->r2, k->num_r2, num_heads, "scheme.r2",
                        k->form == PA_KERPLE_FORM_POWER ? 2.0 : INFINITY, err);
}

double pa_kerple_bias(const pa_kerple *k, int32_t h, double distance)
{
    const double r1 = k->r1[h], r2 = k->r2[h];
    if (k->form == PA_KERPLE_FORM_POWER)
        return -r1 * pow(distance, r2);
    return -r1 * log1p(r2 * distance);
}
