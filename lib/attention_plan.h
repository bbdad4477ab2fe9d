/* attention_plan.h - a validated attention descriptor with its defaults
 * resolved, shared by the attention kernel and the analyses built on it.
 */
#ifndef PA_ATTENTION_PLAN_H
#define PA_ATTENTION_PLAN_H

#include "internal.h"

typedef struct pa__plan {
    const pa_attention *a;
    const pa_scheme *scheme;
    bool layer;    /* x and weights given */
    bool rope;     /* q and k are rotated */
    bool absolute; /* the scheme adds an encoding to x */
    int32_t H, Hkv, group, D, Dv, Lq, Lk;
    int32_t key_len; /* keys at or past this index are padding */
    int32_t r;       /* rotary dim (rope only) */
    float scale;
    const int32_t *q_positions; /* as given (NULL = default) after layer-mode merging */
    const int32_t *k_positions;
    const int32_t *q_mrope, *k_mrope; /* [3, L] M-RoPE positions, merged the same way */
} pa__plan;

/* Resolves defaults for a descriptor that passed pa_attention_check. */
void pa__plan_init(pa__plan *p, const pa_attention *a);

#endif
