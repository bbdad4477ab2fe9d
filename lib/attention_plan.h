/* attention_plan.h - a validated attention descriptor with its defaults
 * resolved, shared by the attention kernel and the analyses built on it.
 */
#ifndef PA_ATTENTION_PLAN_H
#define PA_ATTENTION_PLAN_H

#include "internal.h"

typedef struct pa__plan {
    const pa_attention *a;
    const pa_scheme *scheme;
    bool layer;         /* x and weights given */
    bool rope;          /* q and k are rotated (rope, xpos or rope2d) */
    bool xpos;          /* ... and scaled: separate q and k tables */
    bool rope2d;        /* ... by (row, column) coordinates */
    int32_t rope_heads; /* tables per head (rope2d mixed: H), else 1 */
    bool absolute;      /* the scheme adds an encoding to x */
    bool q_norm;        /* q is RMS-normalised (with a weight or without) */
    bool k_norm;
    bool q_scale; /* attn_temperature_tuning or logn_scaling scale the q rows */
    bool cbf16;   /* compute_dtype bf16: the tiles' products in bf16 pairs (tile.h) */
    int32_t bk;   /* keys per tile of the tiled kernel (pa__tile_keys) */
    int32_t H, Hkv, group, D, Dv, Lq, Lk;
    int32_t key_len; /* keys at or past this index are padding */
    int32_t r;       /* rotary dim (rope only) */
    float scale;
    const int32_t *q_positions; /* as given (NULL = default) after layer-mode merging */
    const int32_t *k_positions;
    const int32_t *q_mrope, *k_mrope; /* [3, L] M-RoPE positions, merged the same way */
    const int32_t *q_pos2, *k_pos2;   /* [2, L] rope2d coordinates (NULL: the grid's) */
    pa_rope rope_cfg; /* the rotation: scheme->rope, or xpos's as pa_xpos_rope gives it */
} pa__plan;

/* Keys per tile of the tiled kernel: PA__TILE_KEYS, or POSATTN_TILE_KEYS
 * from the environment (a multiple of 16 from 16 to 8192; others are
 * ignored), read once. The tiles' size moves the online softmax's running
 * max, so results agree across sizes to float rounding, not bit for bit;
 * `make test` runs the library's tests again with 256, where their
 * sequences of a few hundred keys cross several tiles. */
enum { PA__TILE_KEYS = 1024 };
int32_t pa__tile_keys(void);

/* Resolves defaults for a descriptor that passed pa_attention_check. */
void pa__plan_init(pa__plan *p, const pa_attention *a);

/* pa_attention_check and pa_attention_workspace_size for one sequence
 * (cu_seqlens ignored): lib/attention_check.c, lib/attention.c. The public
 * entry points (lib/attention_entry.c) send packed descriptors to
 * lib/attention_packed.c and the rest here. */
pa_status pa__check_one(const pa_attention *a, pa_error *err);
size_t pa__workspace_one(const pa_attention *a);

/* lib/attention_packed.c: packed sequences (cu_seqlens), each run as the
 * call of that sequence alone. */
pa_status pa__packed_check(const pa_attention *a, pa_error *err);
size_t pa__packed_workspace_size(const pa_attention *a);
/* pa_attention_run_part of a packed descriptor. */
pa_status pa__packed_run_part(const pa_attention *a, const pa_attention_out *out, int32_t part,
                              int32_t nparts, void *ws, size_t ws_size, pa_error *err);
/* lib/attention.c: pa_attention_run_part of one sequence, without the
 * floating-point environment (the caller holds it). */
pa_status pa__run_part_one(const pa_attention *a, const pa_attention_out *out, int32_t part,
                           int32_t nparts, void *ws, size_t ws_size, pa_error *err);

/* lib/attention_qscale.c: the query scalings by position (posattn.h). */

/* Whether a (checked) descriptor scales its query rows. */
bool pa__qscale_on(const pa_attention *a);
/* Validates the scalings' parameters, and the query positions they read
 * (Lq of them, defaults resolved as pa__plan_init does). */
pa_status pa__qscale_check(const pa_attention *a, int32_t Lq, int32_t Lk, pa_error *err);
/* scale[i] = the factor of the query at position qpos[i], i < n. */
void pa__qscale_fill(const pa_attention *a, const int32_t *qpos, int32_t n, float *scale);

#endif
