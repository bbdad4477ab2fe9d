/* rope_configs.h - the RoPE configurations tests/lib/test_rope.c and
 * tests/lib/test_rope_apply.c share: the defaults of pa_scheme_init, one valid
 * configuration of each scaling, and the longrope factor tables those point
 * to (filled by rope_configs_setup, the group setup of both files).
 */
#ifndef TESTS_ROPE_CONFIGS_H
#define TESTS_ROPE_CONFIGS_H

#include <stdint.h>

#include "posattn.h"

static float g_short[512], g_long[512];

static inline pa_rope rope_defaults(void)
{
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    return s.rope;
}

/* A valid configuration of `scaling` for rotary dim r (head_dim >= r). */
static inline pa_rope rope_config(pa_rope_scaling scaling, int32_t rotary_dim, int32_t r)
{
    pa_rope p = rope_defaults();
    p.scaling = scaling;
    p.rotary_dim = rotary_dim;
    switch (scaling) {
    case PA_ROPE_SCALING_LINEAR:
        p.factor = 4.0;
        break;
    case PA_ROPE_SCALING_NTK:
        p.factor = 3.0;
        break;
    case PA_ROPE_SCALING_DYNAMIC:
        p.factor = 2.0;
        p.original_max_position = 4096;
        break;
    case PA_ROPE_SCALING_YARN:
        p.factor = 4.0;
        p.original_max_position = 4096;
        break;
    case PA_ROPE_SCALING_LLAMA3:
        p.base = 500000.0;
        p.factor = 8.0;
        p.original_max_position = 8192;
        break;
    case PA_ROPE_SCALING_LONGROPE:
        p.factor = 32.0;
        p.original_max_position = 4096;
        p.short_factor = g_short;
        p.long_factor = g_long;
        p.short_factor_len = p.long_factor_len = r / 2;
        break;
    case PA_ROPE_SCALING_PROPORTIONAL:
        p.partial_rotary_factor = 0.5; /* r/4 pairs rotate, r/4 are zero */
        p.factor = 2.0;
        break;
    case PA_ROPE_SCALING_NTK_ALPHA:
        p.alpha = 1000.0; /* Hunyuan-A13B's value */
        break;
    default:
        break;
    }
    return p;
}

/* The group setup: short factors 1 + 0.01 i, long factors 1 + 0.25 i. */
static inline int rope_configs_setup(void **state)
{
    (void)state;
    for (int i = 0; i < 512; i++) {
        g_short[i] = 1.0f + 0.01f * (float)i;
        g_long[i] = 1.0f + 0.25f * (float)i;
    }
    return 0;
}

#endif
