/* attention_mask.c - which keys each query sees (causal, window, chunk,
 * padding, the caller's mask) and the logit biases (Shaw, softcap, ALiBi,
 * T5, KERPLE, Sandwich, FIRE, CoPE, the caller's bias), applied to a tile of
 * logits in one pass.
 */
#include "attention_kernel.h"

#include "bias_row.h"
#include "softmax.h"

#include <math.h>

/* The first position of qp's chunk: C * floor(qp / C). */
static inline int64_t chunk_start(int32_t qp, int32_t C)
{
    int64_t q = qp / C;
    if (qp % C < 0)
        q--;
    return q * C;
}

static inline bool visible(const pa__plan *p, int32_t qp, int32_t kp)
{
    int64_t d = (int64_t)qp - (int64_t)kp;
    if (p->a->causal && d < 0)
        return false;
    if (p->a->window > 0) {
        if (d >= p->a->window)
            return false;
        if (!p->a->causal && -d >= p->a->window)
            return false;
    }
    if (p->a->chunk_size > 0) {
        const int64_t c0 = chunk_start(qp, p->a->chunk_size);
        if (kp < c0 || kp >= c0 + p->a->chunk_size)
            return false;
    }
    return true;
}

/* Masks by position (causal, window, chunk): each hides an interval's
 * complement of key positions from a query. */
static bool position_mask(const pa__plan *p)
{
    return p->a->causal || p->a->window > 0 || p->a->chunk_size > 0;
}

bool pa__needs_mask(const pa__plan *p)
{
    return position_mask(p) || p->key_len < p->Lk || p->a->mask != NULL;
}

/* Whether key kp may be visible to some query of a block whose positions
 * span [qmin, qmax]. */
static inline bool maybe_visible(const pa__plan *p, int32_t qmin, int32_t qmax, int32_t kp)
{
    if (p->a->causal && kp > qmax)
        return false;
    if (p->a->window > 0) {
        /* visible needs qpos - kpos < W, i.e. kpos > qpos - W */
        if ((int64_t)kp <= (int64_t)qmin - p->a->window)
            return false;
        if (!p->a->causal && (int64_t)kp >= (int64_t)qmax + p->a->window)
            return false;
    }
    if (p->a->chunk_size > 0) {
        const int32_t C = p->a->chunk_size;
        if (kp < chunk_start(qmin, C) || kp >= chunk_start(qmax, C) + C)
            return false;
    }
    return true;
}

/* Hidden from query position qp by the window or the chunk below it (left)
 * or by the causal mask, the window or the chunk above it (right): never
 * both, and with sorted key positions each holds for a prefix (left) or a
 * suffix (right). */
static inline bool hidden_left(const pa__plan *p, int32_t qp, int32_t kp)
{
    if (p->a->chunk_size > 0 && kp < chunk_start(qp, p->a->chunk_size))
        return true;
    return p->a->window > 0 && (int64_t)qp - (int64_t)kp >= p->a->window;
}

static inline bool hidden_right(const pa__plan *p, int32_t qp, int32_t kp)
{
    if (p->a->chunk_size > 0 && kp >= chunk_start(qp, p->a->chunk_size) + p->a->chunk_size)
        return true;
    if (p->a->causal)
        return kp > qp;
    return p->a->window > 0 && (int64_t)kp - (int64_t)qp >= p->a->window;
}

/* Narrows [*lo, *hi) of sorted key positions kpos to the keys visible from
 * qp (visible() is !hidden_left && !hidden_right): by arithmetic with
 * consecutive positions (unit), else by binary search. */
void pa__visible_span(const pa__plan *p, int32_t qp, const int32_t *kpos, bool unit, int32_t *lo,
                      int32_t *hi)
{
    int32_t a = *lo, b = *hi;
    if (unit && a < b) {
        /* Visible positions are [plo, phi] (hidden_left is kp < plo,
         * hidden_right kp > phi), and key m is at position kpos[0] + m. */
        int64_t plo = INT64_MIN, phi = INT64_MAX;
        const int64_t base = kpos[0];
        if (p->a->causal)
            phi = qp;
        if (p->a->window > 0) {
            plo = (int64_t)qp - p->a->window + 1;
            if (!p->a->causal)
                phi = (int64_t)qp + p->a->window - 1;
        }
        if (p->a->chunk_size > 0) {
            const int64_t c0 = chunk_start(qp, p->a->chunk_size);
            plo = plo > c0 ? plo : c0;
            phi = phi < c0 + p->a->chunk_size - 1 ? phi : c0 + p->a->chunk_size - 1;
        }
        /* The first key at or past plo, then the first past phi. */
        if (plo != INT64_MIN && plo - base > a)
            a = plo - base >= b ? b : (int32_t)(plo - base);
        if (phi != INT64_MAX && phi - base + 1 < b)
            b = phi - base + 1 <= a ? a : (int32_t)(phi - base + 1);
        *lo = a;
        *hi = b;
        return;
    }
    while (a < b) { /* the first key not hidden on the left */
        const int32_t m = a + (b - a) / 2;
        if (hidden_left(p, qp, kpos[m]))
            a = m + 1;
        else
            b = m;
    }
    *lo = a;
    b = *hi;
    while (a < b) { /* from there, the first hidden on the right */
        const int32_t m = a + (b - a) / 2;
        if (hidden_right(p, qp, kpos[m]))
            b = m;
        else
            a = m + 1;
    }
    *hi = a;
}

/* Narrows the tile [j0, j0 + nk) to [*lo, *hi), outside which every key is
 * hidden from every query of the block (by padding, causal or window): those
 * keys are neither multiplied nor exponentiated. With ordered positions this
 * trims the diagonal tiles of a causal mask to their visible half, by binary
 * search (a key hidden from the block's last query on the right, or from
 * its first on the left, is hidden from all of it); otherwise by walking in
 * from both ends. lo == hi when the whole tile is hidden. */
void pa__visible_range(const pa__plan *p, int32_t qmin, int32_t qmax, const int32_t *kpos,
                       bool sorted, bool unit, int32_t j0, int32_t nk, int32_t *lo, int32_t *hi)
{
    int32_t a = j0, b = pa__min_i32(j0 + nk, p->key_len);
    if (sorted && a < b) {
        int32_t l = a, h = b;
        pa__visible_span(p, qmin, kpos, unit, &l, &h); /* left end: against the first query */
        a = l;
        l = a;
        h = b;
        pa__visible_span(p, qmax, kpos, unit, &l, &h); /* right end: against the last */
        b = pa__max_i32(a, h);
    } else if (position_mask(p)) {
        while (a < b && !maybe_visible(p, qmin, qmax, kpos[a]))
            a++;
        while (b > a && !maybe_visible(p, qmin, qmax, kpos[b - 1]))
            b--;
    }
    if (a >= b)
        a = b = j0;
    *lo = a;
    *hi = b;
}

/* Narrows [*lo, *hi) to the columns where the caller's mask lets some query
 * of rows [i0, i0 + nq) of head h attend: lo == hi when it hides them all. */
void pa__mask_range(const pa__plan *p, int32_t h, int32_t i0, int32_t nq, int32_t *lo, int32_t *hi)
{
    const pa_attention *a = p->a;
    const uint8_t *plane = a->mask + (size_t)(a->mask_heads == 1 ? 0 : h) * p->Lq * p->Lk;
    int32_t first = *hi, last = *lo;
    for (int32_t i = 0; i < nq; i++) {
        const uint8_t *row = plane + (size_t)(i0 + i) * p->Lk;
        for (int32_t j = *lo; j < first; j++)
            if (row[j]) {
                first = j;
                break;
            }
        for (int32_t j = *hi; j > last && j > first; j--)
            if (row[j - 1]) {
                last = j;
                break;
            }
    }
    if (first >= last)
        first = last = *lo;
    *lo = first;
    *hi = last;
}

void pa__mask_row(const pa__plan *p, const buffers *b, int32_t h, int32_t qi, float *row,
                  int32_t j0, int32_t nk)
{
    const pa_attention *a = p->a;
    const int32_t *kpos = b->kpos + j0;
    const int32_t qp = b->qpos[qi];
    const uint8_t *mrow =
        a->mask != NULL
            ? a->mask + ((size_t)(a->mask_heads == 1 ? 0 : h) * p->Lq + (size_t)qi) * p->Lk + j0
            : NULL;
    if (!pa__needs_mask(p))
        return;
    if (b->kpos_sorted) {
        /* Visibility is an interval of key positions, so of key indices
         * here: its ends by binary search, the hidden ends filled. */
        int32_t lo = 0, hi = pa__max_i32(0, pa__min_i32(nk, p->key_len - j0));
        /* Both ends visible: all of it (most tiles off the diagonal). */
        if (hi == 0 || !visible(p, qp, kpos[0]) || !visible(p, qp, kpos[hi - 1]))
            pa__visible_span(p, qp, kpos, b->kpos_unit, &lo, &hi);
        pa__row_fill(row, lo, -INFINITY);
        pa__row_fill(row + hi, nk - hi, -INFINITY);
        if (mrow != NULL)
            for (int32_t j = lo; j < hi; j++)
                if (!mrow[j])
                    row[j] = -INFINITY;
    } else {
        for (int32_t j = 0; j < nk; j++) {
            if (j0 + j >= p->key_len || !visible(p, qp, kpos[j]) || (mrow != NULL && !mrow[j]))
                row[j] = -INFINITY;
        }
    }
}

/* The logits tile S [nq, nk] of head h (scale * q.k) into what the softmax
 * takes: Shaw's scale * q.rel_k (and scale * k.rel_k) added, softcap, the
 * scheme's position bias and the caller's bias added, masked entries -inf.
 * Entries already -inf (columns a causal group did not compute) stay so. */
void pa__bias_and_mask(const pa__plan *p, const buffers *b, float *S, int32_t h, int32_t i0,
                       int32_t nq, int32_t j0, int32_t nk)
{
    const pa_scheme *s = p->scheme;
    const pa_attention *a = p->a;
    const int32_t *kpos = b->kpos + j0;
    const float *bias =
        a->bias != NULL ? a->bias + (size_t)(a->bias_heads == 1 ? 0 : h) * p->Lq * p->Lk : NULL;
    for (int32_t i = 0; i < nq; i++) {
        float *row = S + (size_t)i * nk;
        int32_t qp = b->qpos[i0 + i];
        if (s->type == PA_SCHEME_SHAW) {
            /* qrel's rows are by kpos - qpos whatever the direction (the
             * tiled kernel reverses them for query_minus_key). */
            int32_t K = s->shaw.max_relative_position;
            const float *qr = b->qrel + (size_t)i * (2 * (size_t)K + 1);
            if (b->pos_small)
                pa__row_add_rel(row, kpos, nk, qp, qr, K, b->kpos_unit);
            else
                for (int32_t j = 0; j < nk; j++)
                    row[j] += qr[pa_shaw_index(pa__rel_pos(kpos[j], qp), K)];
            if (b->krel != NULL)
                pa__row_add_rel_key(row, kpos, nk, qp, b->krel + j0, b->krel_ld, b->krel_lo, K,
                                    s->shaw.direction == PA_SHAW_DIRECTION_QUERY_MINUS_KEY,
                                    b->kpos_unit);
        }
        if (a->softcap > 0.0f)
            pa__row_softcap(row, nk, a->softcap);
        switch (s->type) {
        case PA_SCHEME_ALIBI: {
            float m = b->slopes[h];
            if (b->pos_small) {
                pa__row_alibi(row, kpos, nk, qp, m, s->alibi.symmetric);
            } else if (s->alibi.symmetric) {
                for (int32_t j = 0; j < nk; j++)
                    row[j] -= m * fabsf((float)((int64_t)qp - kpos[j]));
            } else {
                for (int32_t j = 0; j < nk; j++)
                    row[j] -= m * (float)((int64_t)qp - kpos[j]);
            }
            break;
        }
        case PA_SCHEME_T5: {
            const pa_t5 *t = &s->t5;
            if (b->t5_bias != NULL && b->pos_small) {
                pa__row_add_rel(row, kpos, nk, qp,
                                b->t5_bias + (size_t)h * (2 * (size_t)t->max_distance + 1),
                                t->max_distance, b->kpos_unit);
                break;
            }
            if (b->t5_bucket != NULL) {
                /* Past max_distance every bucket is the outermost one of
                 * its direction, so clamped positions index the table. */
                const int64_t md = t->max_distance;
                const float *col = t->table + h;
                for (int32_t j = 0; j < nk; j++) {
                    int64_t d = (int64_t)kpos[j] - qp;
                    d = d < -md ? -md : d > md ? md : d;
                    row[j] += col[(size_t)b->t5_bucket[d + md] * p->H];
                }
                break;
            }
            for (int32_t j = 0; j < nk; j++) {
                int32_t bucket = pa_t5_bucket(pa__rel_pos(kpos[j], qp), t->bidirectional,
                                              t->num_buckets, t->max_distance);
                row[j] += t->table[(size_t)bucket * p->H + h];
            }
            break;
        }
        case PA_SCHEME_KERPLE:
        case PA_SCHEME_SANDWICH:
            if (b->dist_bias != NULL) {
                pa__row_add_dist(row, kpos, nk, qp, b->dist_bias + (size_t)h * b->dist_n,
                                 b->kpos_unit);
            } else if (s->type == PA_SCHEME_KERPLE) {
                for (int32_t j = 0; j < nk; j++)
                    row[j] += (float)pa_kerple_bias(&s->kerple, h, fabs((double)qp - kpos[j]));
            } else {
                const int32_t hs = pa_sandwich_hidden_size(&s->sandwich, p->D);
                for (int32_t j = 0; j < nk; j++)
                    row[j] += (float)pa_sandwich_bias(hs, p->H, h, fabs((double)qp - kpos[j]));
            }
            break;
        case PA_SCHEME_FIRE:
            /* fire requires causal: keys after the query are masked below. */
            pa__fire_row(row, kpos, nk, qp, i0 + i, &b->fire, h, p->H, s->fire.c,
                         b->kpos_sorted && a->causal);
            break;
        case PA_SCHEME_COPE:
            /* The block's position term, computed before its tiles
             * (lib/cope.c): rows of b->cope are the block's rows. */
            pa__row_add(row, b->cope + (size_t)i * b->cope_ld + j0, nk);
            break;
        default:
            break;
        }
        if (bias != NULL) {
            /* The slice two rows on: each row's is Lk floats on, on a new
             * page, where the hardware's prefetchers start again. */
            if (i + 2 < nq)
                for (int32_t j = 0; j < nk; j += 16)
                    __builtin_prefetch(bias + (size_t)(i0 + i + 2) * p->Lk + j0 + j, 0, 3);
            pa__row_add(row, bias + (size_t)(i0 + i) * p->Lk + j0, nk);
        }
        pa__mask_row(p, b, h, i0 + i, row, j0, nk);
    }
}
