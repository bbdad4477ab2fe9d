/* internal.h - private helpers shared by the files of libposattn.
 *
 * Error reporting, size arithmetic that cannot overflow silently, and the
 * workspace carve-up. Nothing here is part of the public API.
 */
#ifndef PA_INTERNAL_H
#define PA_INTERNAL_H

#include "posattn.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PA__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PA__PRINTF(f, a)
#endif

/* Fills *err (if non-NULL) and returns status, so callers write
 *   return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "k.shape[1]", "...", ...); */
pa_status pa__fail(pa_error *err, pa_status status, const char *field, const char *fmt, ...)
    PA__PRINTF(4, 5);

/* Alignment of every block carved from a workspace: one cache line, which is
 * also enough for any SIMD load the compiler or OpenBLAS may use. */
#define PA__WS_ALIGN ((size_t)64)

/* Workspace layout: the same code computes the size (base == NULL) and hands
 * out the blocks (base != NULL), so the two can never disagree. */
typedef struct pa__ws {
    char *base;
    size_t used;
    size_t cap;
    bool overflow;
} pa__ws;

static inline void pa__ws_init(pa__ws *w, void *base, size_t cap)
{
    w->base = (char *)base;
    w->used = 0;
    w->cap = cap;
    w->overflow = false;
}

/* Reserves count * elem bytes (count may be 0) and returns the block, or NULL
 * when only measuring or on overflow. */
static inline void *pa__ws_take(pa__ws *w, size_t count, size_t elem)
{
    size_t bytes, start;
    if (w->overflow)
        return NULL;
    if (elem != 0 && count > SIZE_MAX / elem) {
        w->overflow = true;
        return NULL;
    }
    bytes = count * elem;
    start = (w->used + PA__WS_ALIGN - 1) & ~(PA__WS_ALIGN - 1);
    if (start < w->used || bytes > SIZE_MAX - start - PA__WS_ALIGN) {
        w->overflow = true;
        return NULL;
    }
    w->used = start + bytes;
    if (w->base == NULL || w->used > w->cap)
        return NULL;
    return w->base + start;
}

/* Total bytes for the layout, with slack to align an unaligned base; 0 on overflow. */
static inline size_t pa__ws_size(const pa__ws *w)
{
    if (w->overflow || w->used > SIZE_MAX - PA__WS_ALIGN)
        return 0;
    return w->used + PA__WS_ALIGN;
}

/* Aligns a caller's workspace pointer up to PA__WS_ALIGN; shrinks cap to match. */
static inline void pa__ws_init_aligned(pa__ws *w, void *base, size_t cap)
{
    uintptr_t p = (uintptr_t)base;
    uintptr_t a = (p + PA__WS_ALIGN - 1) & ~(uintptr_t)(PA__WS_ALIGN - 1);
    size_t shift = (size_t)(a - p);
    if (base == NULL || cap < shift)
        pa__ws_init(w, NULL, 0);
    else
        pa__ws_init(w, (void *)a, cap - shift);
}

/* a * b for non-negative int32 values as size_t; false on overflow. */
static inline bool pa__mul_size(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > SIZE_MAX / b)
        return false;
    *out = a * b;
    return true;
}

static inline int32_t pa__min_i32(int32_t a, int32_t b)
{
    return a < b ? a : b;
}

static inline int32_t pa__max_i32(int32_t a, int32_t b)
{
    return a > b ? a : b;
}

/* Rotates one vector x [head_dim] to position `position` in double, from
 * inv_freq [r/2] and attention_factor as pa_rope_inv_freq returns them
 * (lib/rope.c; used by the analyses). out [head_dim]. */
void pa__rope_rotate_one(const pa_rope *r, int32_t head_dim, const double *inv_freq,
                         double attention_factor, int32_t position, const float *x, double *out);

/* Validation used by pa_attention_check for each scheme's tables; each fills
 * *err with a field under "scheme." (e.g. "scheme.rel_k.shape[0]"). */
/* learned: cols == d_model, and position + offset within [0, rows) for every
 * positions[i] (NULL: the defaults 0 .. n-1); positions_field names the array
 * ("k_positions"). */
pa_status pa__learned_check(const pa_learned *l, int32_t d_model, const int32_t *positions,
                            int32_t n, const char *positions_field, pa_error *err);
/* alibi: max_bias finite and > 0 (when slopes are computed), num_slopes == H
 * and every slope finite (when given). */
pa_status pa__alibi_check(const pa_alibi *a, int32_t num_heads, pa_error *err);
/* Sandwich in two steps (pa_sandwich_bias = head(sum(d, distance), H, h)):
 * the head-independent sum of cosines minus d/2, then head h's factor
 * H / (8 (h + 1)). */
double pa__sandwich_sum(int32_t hidden_size, double distance);
/* pa__sandwich_sum at distances d0 .. d0 + n - 1 into out [n], n <= 32
 * (PA__SANDWICH_RUN): the same sums to within 1e-14 of each cosine, in a
 * tenth of the libm calls (lib/sandwich.c). */
enum { PA__SANDWICH_RUN = 32 };
void pa__sandwich_sums(int32_t hidden_size, int64_t d0, int32_t n, double *out);
double pa__sandwich_head(double sum, int32_t num_heads, int32_t h);
/* FIRE's per-call tables (lib/fire.c): the MLP as segments between its
 * sorted breakpoints, each head's slope and intercept on each. */
typedef struct pa__fire_unit {
    double t;  /* breakpoint -b1[k] / w1[k] */
    int32_t k; /* its unit */
} pa__fire_unit;
typedef struct pa__fire_tables {
    double *bp; /* [nbp] sorted breakpoints (nbp <= hidden) */
    int32_t nbp;
    double *seg;  /* [nbp + 1, H, 2] slope and intercept: segment s is [bp[s-1], bp[s]) */
    double *norm; /* [Lq] psi(max(qpos, |L|)) + eps of each query row */
    double *psi;  /* [psi_n] psi(d) by distance d, or NULL (computed per logit) */
    int32_t psi_n;
    pa__fire_unit *units; /* [hidden] scratch for the sort */
    /* [Lq, hidden] or NULL (with psi only): row i's distance thresholds,
     * dthr[i, k] the smallest d with psi[d] / norm[i] >= bp[k] (psi_n if
     * none): the keys of segment s are those with dthr[s - 1] <= d <
     * dthr[s]. */
    int32_t *dthr;
} pa__fire_tables;
/* psi(d) = log(|c d| + 1) (as log1p) and the normaliser psi(max(qpos, |L|))
 * + eps of a query row. */
double pa__fire_psi(const pa_fire *f, double distance);
double pa__fire_norm(const pa_fire *f, double qpos);
/* Sorts the breakpoints of units with w1 != 0 into bp [hidden] (units
 * [hidden] scratch) and fills seg [(hidden + 1), H, 2]; returns their
 * count nbp. O(hidden (log hidden + H)), in double. */
int32_t pa__fire_segments(const pa_fire *f, int32_t H, pa__fire_unit *units, double *bp,
                          double *seg);
/* Head h's bias on segment s at x: slope * x + intercept. */
double pa__fire_segment_value(const double *seg, int32_t H, int32_t s, int32_t h, double x);
/* PA_STATUS_OUT_OF_RANGE naming scheme.w2 when some head's bias on x in [0,
 * xmax] is not finite as a float. */
pa_status pa__fire_span(int32_t H, const double *bp, int32_t nbp, const double *seg, double xmax,
                        pa_error *err);
/* row[j] += head h's FIRE bias for keys kpos[0..n) of a query at qp with
 * the normaliser of query row i, from the call's tables (psi per logit past
 * psi_n).
 * sorted: kpos non-decreasing, and the keys after qp are masked by the
 * caller (causal): those are then left untouched, and the others are added
 * a segment's run at a time. */
void pa__fire_row(float *row, const int32_t *kpos, int32_t n, int32_t qp, int32_t i,
                  const pa__fire_tables *t, int32_t h, int32_t H, double c, bool sorted);
/* Fills row i's distance thresholds t->dthr[i, 0..nbp) from t->psi,
 * t->norm[i] and t->bp; rows in order (row i - 1's, filled, are its
 * guesses). */
void pa__fire_thresholds(const pa__fire_tables *t, int32_t i);
/* t5 for attention: pa_t5_check plus table non-NULL with shape [num_buckets, H]. */
pa_status pa__t5_check_table(const pa_t5 *t, int32_t num_heads, pa_error *err);
/* shaw: K >= 0, a known direction, rel_k non-NULL with shape [2K+1,
 * head_dim], rel_v NULL or [2K+1, v_head_dim]. */
pa_status pa__shaw_check(const pa_shaw *s, int32_t head_dim, int32_t v_head_dim, pa_error *err);

#endif /* PA_INTERNAL_H */
