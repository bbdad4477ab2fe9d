/* attention_qscale.c - the query scalings by position of current models:
 * Llama 4's attention temperature tuning and Qwen-1's logn scaling
 * (posattn.h, "Query scaling by position"). One factor per query row,
 * which the kernels multiply into q where they prepare its rows
 * (pa__prep_rows), after the norm and rope.
 */
#include "attention_plan.h"

#include <math.h>
#include <stdio.h>

bool pa__qscale_on(const pa_attention *a)
{
    return a->temperature_floor_scale > 0.0 || a->logn_train_length > 0;
}

/* The factor of a query at position p >= 0 (or any p without temperature
 * tuning), in double:
 *   log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1   Hugging Face
 *       Llama4TextAttention's attn_scales (there in float32);
 *   log(p + 1) / log(T) when p + 1 > T, else 1                 Qwen-1's
 *       logn_list, math.log(i, seq_length) for i = p + 1 > seq_length. */
static double factor(const pa_attention *a, int32_t p)
{
    const double p1 = (double)p + 1.0;
    double f = 1.0;
    if (a->temperature_floor_scale > 0.0)
        f = log(floor(p1 / a->temperature_floor_scale) + 1.0) * a->temperature_attn_scale + 1.0;
    if (a->logn_train_length > 0 && p1 > (double)a->logn_train_length)
        f *= log(p1) / log((double)a->logn_train_length);
    return f;
}

void pa__qscale_fill(const pa_attention *a, const int32_t *qpos, int32_t n, float *scale)
{
    for (int32_t i = 0; i < n; i++)
        scale[i] = (float)factor(a, qpos[i]);
}

static pa_status check_positive(const char *field, double v, pa_error *err)
{
    if (v > 0.0 && isfinite(v))
        return PA_STATUS_OK;
    return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                    "%s=%g must be a positive finite number", field, v);
}

pa_status pa__qscale_check(const pa_attention *a, int32_t Lq, int32_t Lk, pa_error *err)
{
    const bool temp = a->temperature_floor_scale != 0.0 || a->temperature_attn_scale != 0.0;
    const char *name = temp ? "attn_temperature_tuning" : "logn_scaling";
    const int32_t *qpos = a->q_positions;
    int32_t lo = INT32_MAX, hi = INT32_MIN, at = 0;
    pa_status st;

    if (!temp && a->logn_train_length == 0)
        return PA_STATUS_OK;
    if (temp) {
        st = check_positive("attn_temperature_tuning.floor_scale", a->temperature_floor_scale, err);
        if (st == PA_STATUS_OK)
            st = check_positive("attn_temperature_tuning.attn_scale", a->temperature_attn_scale,
                                err);
        if (st != PA_STATUS_OK)
            return st;
    }
    if (a->logn_train_length != 0 && a->logn_train_length < 2)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "logn_scaling.train_length",
                        "logn_scaling.train_length=%d must be at least 2 (the factor divides by "
                        "its log)",
                        (int)a->logn_train_length);
    if (a->q_mrope_positions != NULL || a->k_mrope_positions != NULL)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, name,
                        "%s scales each query by its token position, and with M-RoPE position "
                        "rows [3, L] no one row is that position: send 1-D positions, or leave "
                        "%s out",
                        name, name);
    if (!temp)
        return PA_STATUS_OK; /* logn's factor is 1 to 31 for any int32 position */

    /* The factor grows with p: the smallest position must be in its
     * domain, the largest must give a float. */
    if (a->x != NULL && qpos == NULL)
        qpos = a->k_positions; /* layer mode: one sequence */
    for (int32_t i = 0; i < Lq; i++) {
        const int32_t p = qpos != NULL ? qpos[i] : Lk - Lq + i;
        if (p < lo) {
            lo = p;
            at = i;
        }
        hi = p > hi ? p : hi;
    }
    if (lo < 0) {
        char field[32];
        snprintf(field, sizeof field, "q_positions[%d]", (int)at);
        if (qpos == NULL)
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "q_positions",
                            "attn_temperature_tuning needs positions >= 0, but query %d's "
                            "default position is Lk - Lq + %d = %d (Lq=%d > Lk=%d): send "
                            "q_positions",
                            (int)at, (int)at, (int)lo, (int)Lq, (int)Lk);
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, field,
                        "%s=%d: attn_temperature_tuning takes log(floor((p + 1) / floor_scale) + "
                        "1), which needs positions >= 0",
                        field, (int)lo);
    }
    if (!isfinite((float)factor(a, hi)))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, name,
                        "the query scale at position %d is %g, past float32: log(floor((p + 1) "
                        "/ floor_scale) + 1) * attn_scale + 1 with floor_scale=%g, attn_scale=%g",
                        (int)hi, factor(a, hi), a->temperature_floor_scale,
                        a->temperature_attn_scale);
    return PA_STATUS_OK;
}
