/* attention.c - multi-head attention with every positional scheme.
 *
 * Per head and block of BQ queries, keys are visited in tiles of BK: the
 * logits tile comes from one product against the kv head's keys, packed
 * transposed once per kv head (lib/tile.c), softcap, the scheme's bias, the
 * caller's bias and the masks are applied in one pass, and an online softmax
 * (Milakov & Gimelshein 2018, as in FlashAttention) folds the tile into a
 * running output that starts from the head's sink, so without returned
 * weights the working memory does not grow with the sequence length. Tiles
 * that the causal, window, chunk, padding or caller's mask hide entirely are
 * skipped.
 */
#include "attention_plan.h"
#include "softmax.h"
#include "tile.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

enum { BQ = 64, BK = 256 };

/* Rows per group on a causal diagonal tile, where each group multiplies
 * only up to its own last visible key: the row blocks of the QK^T and PV
 * micro-kernels (lib/tile.c), so that neither runs a part-empty block. */
enum { QK_ROWS = 8, PV_ROWS = 6 };

/* T5 buckets come from a table over relative positions [-max_distance,
 * max_distance] (farther ones share the outermost bucket) when it has at
 * most this many entries; from pa_t5_bucket per logit otherwise. */
enum { T5_TABLE_MAX = 1 << 17 };

/* Everything the kernel reads besides the caller's tensors, carved from the
 * workspace by layout(). */
typedef struct buffers {
    float *xp;            /* [L, d_model]: x plus the absolute encoding */
    float *q, *k, *v;     /* layer-mode projections [L, H*D], [L, Hkv*D], [L, Hkv*Dv] */
    float *kt;            /* [D, pa__tile_kt_ld(Lk)] one kv head's keys, transposed */
    float *vhead;         /* [Lk, Dv] one kv head's values, contiguous (Hkv > 1) */
    float *qblk;          /* [BQ, D] rope or norms: one block of queries (or keys) as
                         attention sees them */
    float *q_inv, *k_inv; /* [Lq], [Lk] inverse RMS of each token's whole projection
                             (q/k norms with a weight of H*D, Hkv*D) */
    float *attn;          /* [Lq, H*Dv] before w_o */
    float *cos_q, *sin_q; /* [Lq, r/2] */
    float *cos_k, *sin_k; /* [Lk, r/2]; may alias the q tables */
    int32_t *qpos, *kpos; /* [Lq], [Lk] effective positions */
    float *slopes;        /* [H] alibi */
    int32_t *t5_bucket;   /* [2*max_distance+1] t5: bucket of each relative position */
    float *S;             /* [BQ, BK] logits, then probabilities */
    float *O;             /* [BQ, Dv] running output */
    float *m, *l;         /* [BQ] running max and denominator */
    float *qrel;          /* [BQ, 2K+1] shaw q . rel_k */
    bool *overflow;       /* set when a row's logits were not finite */
    bool kpos_sorted;     /* kpos non-decreasing: each row's visible keys are one run */
} buffers;

/* True when the q and k position arrays are the same sequence, so one set
 * of rope tables serves both. */
static bool same_positions(const pa__plan *p)
{
    if (p->Lq != p->Lk)
        return false;
    if (p->layer)
        return true;
    if (p->q_mrope != NULL || p->k_mrope != NULL) /* the angles' positions */
        return p->q_mrope == p->k_mrope;
    return p->q_positions == NULL && p->k_positions == NULL;
}

static void layout(const pa__plan *p, pa__ws *w, buffers *b)
{
    const pa_attention *a = p->a;
    size_t Lq = (size_t)p->Lq, Lk = (size_t)p->Lk;
    size_t tq = Lq < BQ ? Lq : BQ;
    size_t tk = Lk < BK ? Lk : BK;

    memset(b, 0, sizeof *b);
    if (p->layer) {
        if (p->absolute)
            b->xp = pa__ws_take(w, Lq * (size_t)a->d_model, sizeof(float));
        b->q = pa__ws_take(w, Lq * (size_t)p->H * (size_t)p->D, sizeof(float));
        b->k = pa__ws_take(w, Lk * (size_t)p->Hkv * (size_t)p->D, sizeof(float));
        b->v = pa__ws_take(w, Lk * (size_t)p->Hkv * (size_t)p->Dv, sizeof(float));
        if (a->w_o != NULL)
            b->attn = pa__ws_take(w, Lq * (size_t)p->H * (size_t)p->Dv, sizeof(float));
    }
    if (p->rope || a->q_norm != NULL || a->k_norm != NULL)
        b->qblk = pa__ws_take(w, BQ * (size_t)p->D, sizeof(float));
    if (a->q_norm != NULL && a->q_norm_len != p->D)
        b->q_inv = pa__ws_take(w, Lq, sizeof(float));
    if (a->k_norm != NULL && a->k_norm_len != p->D)
        b->k_inv = pa__ws_take(w, Lk, sizeof(float));
    if (p->rope) {
        /* Rotated keys one kv head at a time and queries one block at a
         * time: O(Lk*D), not O(L*H*D), whatever the head count. */
        size_t half = (size_t)p->r / 2;
        b->cos_q = pa__ws_take(w, Lq * half, sizeof(float));
        b->sin_q = pa__ws_take(w, Lq * half, sizeof(float));
        if (same_positions(p) || a->k_prerotated) { /* prerotated: never read */
            b->cos_k = b->cos_q;
            b->sin_k = b->sin_q;
        } else {
            b->cos_k = pa__ws_take(w, Lk * half, sizeof(float));
            b->sin_k = pa__ws_take(w, Lk * half, sizeof(float));
        }
    }
    b->kt = pa__ws_take(w, (size_t)p->D * pa__tile_kt_ld(p->Lk), sizeof(float));
    if (p->Hkv > 1)
        b->vhead = pa__ws_take(w, Lk * (size_t)p->Dv, sizeof(float));
    b->qpos = pa__ws_take(w, Lq, sizeof(int32_t));
    b->kpos = pa__ws_take(w, Lk, sizeof(int32_t));
    if (p->scheme->type == PA_SCHEME_ALIBI)
        b->slopes = pa__ws_take(w, (size_t)p->H, sizeof(float));
    if (p->scheme->type == PA_SCHEME_T5 && p->scheme->t5.max_distance <= T5_TABLE_MAX / 2)
        b->t5_bucket = pa__ws_take(w, 2 * (size_t)p->scheme->t5.max_distance + 1, sizeof(int32_t));
    b->S = pa__ws_take(w, tq * tk, sizeof(float));
    b->O = pa__ws_take(w, tq * (size_t)p->Dv, sizeof(float));
    b->m = pa__ws_take(w, tq, sizeof(float));
    b->l = pa__ws_take(w, tq, sizeof(float));
    if (p->scheme->type == PA_SCHEME_SHAW)
        b->qrel = pa__ws_take(w, tq * (2 * (size_t)p->scheme->shaw.max_relative_position + 1),
                              sizeof(float));
}

size_t pa_attention_workspace_size(const pa_attention *a)
{
    pa__plan p;
    pa__ws w;
    buffers b;
    pa__plan_init(&p, a);
    pa__ws_init(&w, NULL, 0);
    layout(&p, &w, &b);
    return pa__ws_size(&w);
}

/* ------------------------------------------------------------------------- */
/* Logit bias and masks                                                      */
/* ------------------------------------------------------------------------- */

/* kpos - qpos clamped into int32: T5 buckets and Shaw indices saturate long
 * before the clamp matters. */
static inline int32_t rel_pos(int32_t kp, int32_t qp)
{
    int64_t d = (int64_t)kp - (int64_t)qp;
    if (d > INT32_MAX)
        return INT32_MAX;
    if (d < INT32_MIN)
        return INT32_MIN;
    return (int32_t)d;
}

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

static bool needs_mask(const pa__plan *p)
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
 * qp (visible() is !hidden_left && !hidden_right), by binary search. */
static void visible_span(const pa__plan *p, int32_t qp, const int32_t *kpos, int32_t *lo,
                         int32_t *hi)
{
    int32_t a = *lo, b = *hi;
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
static void visible_range(const pa__plan *p, int32_t qmin, int32_t qmax, const int32_t *kpos,
                          bool sorted, int32_t j0, int32_t nk, int32_t *lo, int32_t *hi)
{
    int32_t a = j0, b = pa__min_i32(j0 + nk, p->key_len);
    if (sorted && a < b) {
        int32_t l = a, h = b;
        visible_span(p, qmin, kpos, &l, &h); /* left end: against the first query */
        a = l;
        l = a;
        h = b;
        visible_span(p, qmax, kpos, &l, &h); /* right end: against the last */
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
static void mask_range(const pa__plan *p, int32_t h, int32_t i0, int32_t nq, int32_t *lo,
                       int32_t *hi)
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

/* The logits tile S [nq, nk] of head h (scale * q.k) into what the softmax
 * takes: Shaw's scale * q.rel_k added, softcap, the scheme's position bias
 * and the caller's bias added, masked entries -inf. Entries already -inf
 * (columns a causal group did not compute) stay so. */
static void bias_and_mask(const pa__plan *p, const buffers *b, int32_t h, int32_t i0, int32_t nq,
                          int32_t j0, int32_t nk)
{
    const pa_scheme *s = p->scheme;
    const pa_attention *a = p->a;
    const int32_t *kpos = b->kpos + j0;
    const float *bias =
        a->bias != NULL ? a->bias + (size_t)(a->bias_heads == 1 ? 0 : h) * p->Lq * p->Lk : NULL;
    const uint8_t *mask =
        a->mask != NULL ? a->mask + (size_t)(a->mask_heads == 1 ? 0 : h) * p->Lq * p->Lk : NULL;
    for (int32_t i = 0; i < nq; i++) {
        float *row = b->S + (size_t)i * nk;
        int32_t qp = b->qpos[i0 + i];
        if (s->type == PA_SCHEME_SHAW) {
            int32_t K = s->shaw.max_relative_position;
            const float *qr = b->qrel + (size_t)i * (2 * (size_t)K + 1);
            for (int32_t j = 0; j < nk; j++)
                row[j] += qr[pa_shaw_index(rel_pos(kpos[j], qp), K)];
        }
        if (a->softcap > 0.0f)
            pa__row_softcap(row, nk, a->softcap);
        switch (s->type) {
        case PA_SCHEME_ALIBI: {
            float m = b->slopes[h];
            if (s->alibi.symmetric) {
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
                int32_t bucket = pa_t5_bucket(rel_pos(kpos[j], qp), t->bidirectional,
                                              t->num_buckets, t->max_distance);
                row[j] += t->table[(size_t)bucket * p->H + h];
            }
            break;
        }
        default:
            break;
        }
        if (bias != NULL) {
            const float *brow = bias + (size_t)(i0 + i) * p->Lk + j0;
            for (int32_t j = 0; j < nk; j++)
                row[j] += brow[j];
        }
        if (needs_mask(p) && b->kpos_sorted) {
            /* Visibility is an interval of key positions, so of key indices
             * here: its ends by binary search, the hidden ends filled. */
            int32_t lo = 0, hi = pa__max_i32(0, pa__min_i32(nk, p->key_len - j0));
            visible_span(p, qp, kpos, &lo, &hi);
            pa__row_fill(row, lo, -INFINITY);
            pa__row_fill(row + hi, nk - hi, -INFINITY);
            if (mask != NULL) {
                const uint8_t *mrow = mask + (size_t)(i0 + i) * p->Lk + j0;
                for (int32_t j = lo; j < hi; j++)
                    if (!mrow[j])
                        row[j] = -INFINITY;
            }
        } else if (needs_mask(p)) {
            const uint8_t *mrow = mask != NULL ? mask + (size_t)(i0 + i) * p->Lk + j0 : NULL;
            for (int32_t j = 0; j < nk; j++) {
                if (j0 + j >= p->key_len || !visible(p, qp, kpos[j]) || (mrow != NULL && !mrow[j]))
                    row[j] = -INFINITY;
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* The kernel                                                                */
/* ------------------------------------------------------------------------- */

typedef struct head_io {
    const float *Q; /* [Lq, ldq] rows; head h at column h*D */
    const float *K; /* [Lk, ldk]; kv head g at column g*D */
    const float *V; /* [Lk, ldv]; kv head g at column g*Dv */
    int ldq, ldk, ldv;
    float *out;              /* [Lq, H*Dv] */
    float *weights, *logits; /* [H, Lq, Lk] or NULL */
    float *q_rot, *k_rot;    /* rope: rotated q and k to return, or NULL */
} head_io;

/* One head's operands for attend_block: the query block, the packed K^T
 * and the value columns of its kv head, each with its row stride. */
typedef struct head_ops {
    const float *Qb;
    const float *Kt;
    const float *Vh;
    int ldq, ldv;
    size_t ldkt;
} head_ops;

/* Causal, sorted key positions: the end of the keys in [j0, j1) that any
 * of the gn queries from row r sees (the first key past the latest). */
static int32_t group_end(const pa__plan *p, const buffers *b, int32_t r, int32_t gn, int32_t j0,
                         int32_t j1)
{
    int32_t q = INT32_MIN, lo = j0, hi = j1;
    for (int32_t i = r; i < r + gn; i++)
        q = pa__max_i32(q, b->qpos[i]);
    visible_span(p, q, b->kpos, &lo, &hi);
    return hi;
}

/* Writes -inf logits for a hidden tile, so the rows stay complete. */
static void fill_hidden(float *rows, size_t ld, int32_t nq, int32_t nk)
{
    for (int32_t i = 0; i < nq; i++)
        for (int32_t j = 0; j < nk; j++)
            rows[(size_t)i * ld + (size_t)j] = -INFINITY;
}

static void attend_block(const pa__plan *p, const buffers *b, const head_io *io, const head_ops *op,
                         int32_t h, int32_t i0, int32_t nq)
{
    const int32_t Dv = p->Dv;
    const float *Qb = op->Qb, *Vh = op->Vh;
    float *store = io->logits != NULL ? io->logits : io->weights;
    float *store_rows = store ? store + ((size_t)h * p->Lq + i0) * p->Lk : NULL;
    int32_t qmin = INT32_MAX, qmax = INT32_MIN;
    const pa_shaw *shaw = p->scheme->type == PA_SCHEME_SHAW ? &p->scheme->shaw : NULL;
    const int32_t nrel = shaw ? 2 * shaw->max_relative_position + 1 : 0;
    bool grouped;

    for (int32_t i = 0; i < nq; i++) {
        qmin = pa__min_i32(qmin, b->qpos[i0 + i]);
        qmax = pa__max_i32(qmax, b->qpos[i0 + i]);
        /* A sink is a key of its own with logit s_h and no value: the row
         * starts as if it had been folded in (max s_h, sum exp(0) = 1). */
        b->m[i] = p->a->sinks != NULL ? p->a->sinks[h] : -INFINITY;
        b->l[i] = p->a->sinks != NULL ? 1.0f : 0.0f;
    }
    memset(b->O, 0, (size_t)nq * Dv * sizeof(float));
    if (shaw) {
        /* qrel [nq, 2K+1] = scale * Q_block rel_k^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nrel, p->D, p->scale, Qb, op->ldq,
                    shaw->rel_k, p->D, 0.0f, b->qrel, nrel);
    }

    for (int32_t t0 = 0; t0 < p->Lk; t0 += BK) {
        const int32_t tn = pa__min_i32(BK, p->Lk - t0);
        int32_t j0, j1, nk;
        visible_range(p, qmin, qmax, b->kpos, b->kpos_sorted, t0, tn, &j0, &j1);
        if (p->a->mask != NULL && j0 < j1)
            mask_range(p, h, i0, nq, &j0, &j1);
        if (store_rows) {
            fill_hidden(store_rows + t0, (size_t)p->Lk, nq, j0 - t0);
            fill_hidden(store_rows + j1, (size_t)p->Lk, nq, t0 + tn - j1);
        }
        nk = j1 - j0;
        if (nk == 0)
            continue;
        /* Causal with ordered positions: the block's rows see more keys row
         * by row, so on the diagonal tile each group of rows multiplies only
         * up to its last visible key (the masked triangle is skipped; the
         * columns past it are -inf, as the mask would make them). */
        if (p->a->causal && b->kpos_sorted && b->kpos[j1 - 1] > qmin) {
            for (int32_t g = 0; g < nq; g += QK_ROWS) {
                const int32_t gn = pa__min_i32(QK_ROWS, nq - g);
                const int32_t e = group_end(p, b, i0 + g, gn, j0, j1);
                pa__tile_qk(gn, e - j0, p->D, p->scale, Qb + (size_t)g * op->ldq, op->ldq,
                            op->Kt + j0, op->ldkt, b->S + (size_t)g * nk, nk);
                for (int32_t i = g; i < g + gn; i++)
                    pa__row_fill(b->S + (size_t)i * nk + (e - j0), nk - (e - j0), -INFINITY);
            }
            grouped = true;
        } else {
            pa__tile_qk(nq, nk, p->D, p->scale, Qb, op->ldq, op->Kt + j0, op->ldkt, b->S, nk);
            grouped = false;
        }
        bias_and_mask(p, b, h, i0, nq, j0, nk);
        if (store_rows) {
            for (int32_t i = 0; i < nq; i++)
                memcpy(store_rows + (size_t)i * p->Lk + j0, b->S + (size_t)i * nk,
                       (size_t)nk * sizeof(float));
        }
        /* Online softmax: fold this tile into the running max, denominator
         * and output of each row. */
        for (int32_t i = 0; i < nq; i++) {
            float *row = b->S + (size_t)i * nk;
            float tmax = pa__row_max(row, nk), mnew, alpha;
            if (tmax == -INFINITY) {
                memset(row, 0, (size_t)nk * sizeof(float));
                continue;
            }
            mnew = tmax > b->m[i] ? tmax : b->m[i];
            alpha = b->m[i] == -INFINITY ? 0.0f : expf(b->m[i] - mnew);
            b->l[i] = b->l[i] * alpha + pa__row_exp_sum(row, nk, mnew);
            b->m[i] = mnew;
            if (alpha != 1.0f)
                pa__row_scale(b->O + (size_t)i * Dv, b->O + (size_t)i * Dv, Dv, alpha);
        }
        if (grouped) {
            /* Past a row's last visible key its weights are 0 (masked), and
             * every column up to its QK group's end was computed or -inf. */
            for (int32_t g = 0; g < nq; g += PV_ROWS) {
                const int32_t gn = pa__min_i32(PV_ROWS, nq - g);
                const int32_t e = group_end(p, b, i0 + g, gn, j0, j1);
                pa__tile_pv(gn, Dv, e - j0, b->S + (size_t)g * nk, nk, Vh + (size_t)j0 * op->ldv,
                            op->ldv, b->O + (size_t)g * Dv, Dv);
            }
        } else {
            pa__tile_pv(nq, Dv, nk, b->S, nk, Vh + (size_t)j0 * op->ldv, op->ldv, b->O, Dv);
        }
        if (shaw && shaw->rel_v != NULL) {
            const int32_t K = shaw->max_relative_position;
            for (int32_t i = 0; i < nq; i++) {
                const float *prow = b->S + (size_t)i * nk;
                float *o = b->O + (size_t)i * Dv;
                int32_t qp = b->qpos[i0 + i];
                for (int32_t j = 0; j < nk; j++) {
                    const float *rv;
                    if (prow[j] == 0.0f)
                        continue;
                    rv = shaw->rel_v + (size_t)pa_shaw_index(rel_pos(b->kpos[j0 + j], qp), K) * Dv;
                    for (int32_t d = 0; d < Dv; d++)
                        o[d] += prow[j] * rv[d];
                }
            }
        }
    }

    for (int32_t i = 0; i < nq; i++) {
        float *dst = io->out + (size_t)(i0 + i) * p->H * Dv + (size_t)h * Dv;
        /* Finite inputs whose products overflow give +inf or NaN logits;
         * the running max or sum then stops being finite. */
        if (!isfinite(b->l[i]) || b->m[i] == INFINITY)
            *b->overflow = true;
        const float *o = b->O + (size_t)i * Dv;
        float inv = b->l[i] > 0.0f ? 1.0f / b->l[i] : 0.0f;
        pa__row_scale(dst, o, Dv, inv);
        if (io->weights != NULL) {
            const float *src = store_rows + (size_t)i * p->Lk;
            float *w = io->weights + ((size_t)h * p->Lq + i0 + i) * p->Lk;
            if (inv > 0.0f) {
                if (w != src)
                    memcpy(w, src, (size_t)p->Lk * sizeof(float));
                pa__row_exp_scale(w, p->Lk, b->m[i], inv);
            } else {
                memset(w, 0, (size_t)p->Lk * sizeof(float));
            }
        }
    }
}

/* An RMSNorm (posattn.h): its weight, length (D per head, or the whole
 * projection) and eps, and the whole-row inverse RMS of each token. */
typedef struct row_norm {
    const float *w;
    int32_t len;
    float eps;
    const float *inv;
} row_norm;

/* Rows [n] of head `head` (src: row stride ld) as attention sees them, into
 * dst [n, D]: RMS-normalised when nm->w is set, then rotated with the table
 * rows of those positions (rope); copied to ret (row stride ret_ld) when the
 * caller asked for the tensor. */
static void prep_rows(const pa__plan *p, const row_norm *nm, int32_t head, const float *cos_t,
                      const float *sin_t, const float *src, int ld, int32_t n, float *dst,
                      float *ret, int ret_ld)
{
    const size_t half = (size_t)p->r / 2;
    const int32_t D = p->D;
    for (int32_t i = 0; i < n; i++) {
        const float *x = src + (size_t)i * ld;
        float *y = dst + (size_t)i * D;
        if (nm->w != NULL) {
            const float *wh = nm->len == D ? nm->w : nm->w + (size_t)head * D;
            float s;
            if (nm->len == D) {
                double ss = 0.0;
                for (int32_t d = 0; d < D; d++)
                    ss += (double)x[d] * x[d];
                s = (float)(1.0 / sqrt(ss / D + nm->eps));
            } else {
                s = nm->inv[i];
            }
            for (int32_t d = 0; d < D; d++)
                y[d] = x[d] * s * wh[d];
        } else {
            memcpy(y, x, (size_t)D * sizeof(float));
        }
        if (p->rope)
            pa_rope_apply(&p->scheme->rope, D, 1, 1, cos_t + (size_t)i * half,
                          sin_t + (size_t)i * half, y, y);
        if (ret != NULL)
            memcpy(ret + (size_t)i * ret_ld, y, (size_t)D * sizeof(float));
    }
}

/* inv[i] = 1 / sqrt(mean(x[i]^2) + eps) over rows x [n, cols]. */
static void inverse_rms(const float *x, int32_t n, int32_t cols, float eps, float *inv)
{
    for (int32_t i = 0; i < n; i++) {
        double ss = 0.0;
        const float *r = x + (size_t)i * cols;
        for (int32_t c = 0; c < cols; c++)
            ss += (double)r[c] * r[c];
        inv[i] = (float)(1.0 / sqrt(ss / cols + eps));
    }
}

/* Work is split into units of (query head, block of BQ queries), numbered
 * head-major; a part runs units [u0, u1). Each unit's outputs are disjoint
 * from every other's, so parts may run concurrently. */
static int32_t blocks_per_head(const pa__plan *p)
{
    return (p->Lq + BQ - 1) / BQ;
}

static void attend(const pa__plan *p, const buffers *b, const head_io *io, int64_t u0, int64_t u1)
{
    const pa_attention *a = p->a;
    const size_t half = (size_t)p->r / 2;
    const int64_t nb = blocks_per_head(p);
    const row_norm qn = {a->q_norm, a->q_norm_len, a->q_norm_eps, b->q_inv};
    const row_norm kn = {a->k_norm, a->k_norm_len, a->k_norm_eps, b->k_inv};
    const bool prep_q = p->rope || qn.w != NULL;
    const bool prep_k = (p->rope && !a->k_prerotated) || kn.w != NULL;
    for (int32_t g = 0; g < p->Hkv; g++) {
        /* Units of kv head g: [g*group*nb, (g+1)*group*nb). */
        const int64_t g0 = (int64_t)g * p->group * nb, g1 = g0 + (int64_t)p->group * nb;
        head_ops op;
        const float *Kh = io->K + (size_t)g * p->D;
        if (g1 <= u0 || g0 >= u1)
            continue;
        op.Vh = io->V + (size_t)g * p->Dv;
        op.ldv = io->ldv;
        if (b->vhead != NULL) {
            /* Value rows Hkv*Dv floats apart share few cache sets (a 2 KiB
             * stride maps a tile's rows onto 2 of L1's 64 sets): gather the
             * head's rows once so the tiles stream from contiguous memory. */
            for (int32_t j = 0; j < p->Lk; j++)
                memcpy(b->vhead + (size_t)j * p->Dv, op.Vh + (size_t)j * io->ldv,
                       (size_t)p->Dv * sizeof(float));
            op.Vh = b->vhead;
            op.ldv = p->Dv;
        }
        op.Kt = b->kt;
        op.ldkt = pa__tile_kt_ld(p->Lk);
        /* Keys packed once per kv head (every query block of the group reads
         * them); with norms or rope, normalised and rotated BQ rows at a
         * time on the way. */
        if (prep_k) {
            /* The part holding the kv head's first unit returns its keys. */
            float *ret = io->k_rot != NULL && g0 >= u0 ? io->k_rot + (size_t)g * p->D : NULL;
            for (int32_t j0 = 0; j0 < p->Lk; j0 += BQ) {
                const int32_t n = pa__min_i32(BQ, p->Lk - j0);
                row_norm nm = kn;
                if (nm.inv != NULL)
                    nm.inv += j0;
                prep_rows(p, &nm, g, p->rope ? b->cos_k + (size_t)j0 * half : NULL,
                          p->rope ? b->sin_k + (size_t)j0 * half : NULL, Kh + (size_t)j0 * io->ldk,
                          io->ldk, n, b->qblk, ret ? ret + (size_t)j0 * io->ldk : NULL, io->ldk);
                pa__tile_pack_kt(n, p->D, b->qblk, p->D, b->kt + j0, op.ldkt);
            }
        } else {
            pa__tile_pack_kt(p->Lk, p->D, Kh, io->ldk, b->kt, op.ldkt);
        }
        for (int64_t u = g0 > u0 ? g0 : u0; u < g1 && u < u1; u++) {
            const int32_t h = (int32_t)(u / nb), i0 = (int32_t)(u % nb) * BQ;
            const int32_t nq = pa__min_i32(BQ, p->Lq - i0);
            op.Qb = io->Q + (size_t)i0 * io->ldq + (size_t)h * p->D;
            op.ldq = io->ldq;
            if (prep_q) {
                row_norm nm = qn;
                if (nm.inv != NULL)
                    nm.inv += i0;
                prep_rows(p, &nm, h, p->rope ? b->cos_q + (size_t)i0 * half : NULL,
                          p->rope ? b->sin_q + (size_t)i0 * half : NULL, op.Qb, io->ldq, nq,
                          b->qblk,
                          io->q_rot ? io->q_rot + (size_t)i0 * io->ldq + (size_t)h * p->D : NULL,
                          io->ldq);
                op.Qb = b->qblk;
                op.ldq = p->D;
            }
            attend_block(p, b, io, &op, h, i0, nq);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Preparation: positions, projections, rotation                             */
/* ------------------------------------------------------------------------- */

static void fill_positions(const pa__plan *p, buffers *b)
{
    for (int32_t i = 0; i < p->Lq; i++)
        b->qpos[i] = p->q_positions ? p->q_positions[i] : p->Lk - p->Lq + i;
    b->kpos_sorted = true;
    for (int32_t j = 0; j < p->Lk; j++) {
        b->kpos[j] = p->k_positions ? p->k_positions[j] : j;
        if (j > 0 && b->kpos[j] < b->kpos[j - 1])
            b->kpos_sorted = false;
    }
}

/* The largest position that chooses an angle (the M-RoPE rows when given):
 * dynamic and longrope scale by it. */
static int32_t max_position(const pa__plan *p, const buffers *b)
{
    int32_t mx = INT32_MIN;
    for (size_t i = 0; i < (p->q_mrope ? 3 : 1) * (size_t)p->Lq; i++)
        mx = pa__max_i32(mx, p->q_mrope ? p->q_mrope[i] : b->qpos[i]);
    for (size_t j = 0; j < (p->k_mrope ? 3 : 1) * (size_t)p->Lk; j++)
        mx = pa__max_i32(mx, p->k_mrope ? p->k_mrope[j] : b->kpos[j]);
    return mx;
}

/* x [L, d_model] plus the scheme's encoding of the token positions. */
static pa_status add_absolute(const pa__plan *p, const buffers *b, pa_error *err)
{
    const pa_attention *a = p->a;
    size_t n = (size_t)p->Lk * (size_t)a->d_model;
    pa_status st;
    if (p->scheme->type == PA_SCHEME_SINUSOIDAL)
        st = pa_sinusoidal_encode(&p->scheme->sinusoidal, b->kpos, p->Lk, a->d_model, b->xp, err);
    else
        st = pa_learned_encode(&p->scheme->learned, b->kpos, p->Lk, b->xp, err);
    if (st != PA_STATUS_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        b->xp[i] += a->x[i];
    return PA_STATUS_OK;
}

/* out [L, n] = x w (+ bias [n] on every row, when given). */
static void project(const float *x, int32_t L, int32_t d_model, const float *w, const float *bias,
                    int32_t n, float *out)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, n, d_model, 1.0f, x, d_model, w, n,
                0.0f, out, n);
    if (bias != NULL)
        for (int32_t i = 0; i < L; i++)
            for (int32_t c = 0; c < n; c++)
                out[(size_t)i * n + c] += bias[c];
}

pa_status pa_attention_run(const pa_attention *a, const pa_attention_out *out, void *ws,
                           size_t ws_size, pa_error *err)
{
    return pa_attention_run_part(a, out, 0, 1, ws, ws_size, err);
}

pa_status pa_attention_run_part(const pa_attention *a, const pa_attention_out *out, int32_t part,
                                int32_t nparts, void *ws, size_t ws_size, pa_error *err)
{
    pa__plan p;
    pa__ws w;
    buffers b;
    head_io io;
    pa_status st;
    size_t need;
    bool overflow = false;

    st = pa_attention_check(a, err);
    if (st != PA_STATUS_OK)
        return st;
    if (out == NULL || out->output == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "output", "an output buffer is required");
    need = pa_attention_workspace_size(a);
    if (need == 0)
        return pa__fail(err, PA_STATUS_TOO_LARGE, "", "the workspace size overflows");
    if (ws == NULL || ws_size < need)
        return pa__fail(err, PA_STATUS_WORKSPACE_TOO_SMALL, "",
                        "workspace of %zu bytes is smaller than the %zu bytes needed", ws_size,
                        need);
    if (nparts < 1 || part < 0 || part >= nparts)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "part",
                        "part=%d of nparts=%d: need 0 <= part < nparts", (int)part, (int)nparts);
    if (nparts > 1 && a->x != NULL)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "part",
                        "layer mode runs in one part (its projections span every head)");
    pa__plan_init(&p, a);
    pa__ws_init_aligned(&w, ws, ws_size);
    layout(&p, &w, &b);
    fill_positions(&p, &b);
    b.overflow = &overflow;

    memset(&io, 0, sizeof io);
    io.ldq = p.H * p.D;
    io.ldk = p.Hkv * p.D;
    io.ldv = p.Hkv * p.Dv;
    io.weights = out->weights;
    io.logits = out->logits;
    io.out = a->w_o != NULL ? b.attn : out->output;

    if (p.layer) {
        const float *xin = a->x;
        if (p.absolute) {
            st = add_absolute(&p, &b, err);
            if (st != PA_STATUS_OK)
                return st;
            xin = b.xp;
        }
        project(xin, p.Lq, a->d_model, a->w_q, a->b_q, io.ldq, b.q);
        project(xin, p.Lk, a->d_model, a->w_k, a->b_k, io.ldk, b.k);
        project(xin, p.Lk, a->d_model, a->w_v, a->b_v, io.ldv, b.v);
        io.Q = b.q;
        io.K = b.k;
        io.V = b.v;
    } else {
        io.Q = a->q;
        io.K = a->k;
        io.V = a->v;
    }

    if (p.rope) {
        const pa_rope *r = &p.scheme->rope;
        int32_t maxpos = max_position(&p, &b);
        st = p.q_mrope != NULL
                 ? pa_rope_cos_sin_mrope(r, p.D, p.q_mrope, p.Lq, maxpos, b.cos_q, b.sin_q, err)
                 : pa_rope_cos_sin(r, p.D, b.qpos, p.Lq, maxpos, b.cos_q, b.sin_q, err);
        if (st == PA_STATUS_OK && b.cos_k != b.cos_q)
            st = p.k_mrope != NULL
                     ? pa_rope_cos_sin_mrope(r, p.D, p.k_mrope, p.Lk, maxpos, b.cos_k, b.sin_k, err)
                     : pa_rope_cos_sin(r, p.D, b.kpos, p.Lk, maxpos, b.cos_k, b.sin_k, err);
        if (st != PA_STATUS_OK)
            return st;
    }
    if (b.q_inv != NULL)
        inverse_rms(io.Q, p.Lq, io.ldq, a->q_norm_eps, b.q_inv);
    if (b.k_inv != NULL)
        inverse_rms(io.K, p.Lk, io.ldk, a->k_norm_eps, b.k_inv);
    /* q and k as attention sees them: written on the way by the kernel when
     * it normalises or rotates them, copied here otherwise. */
    if (p.rope || a->q_norm != NULL)
        io.q_rot = out->q_rot;
    else if (part == 0 && out->q_rot != NULL)
        memcpy(out->q_rot, io.Q, (size_t)p.Lq * io.ldq * sizeof(float));
    if ((p.rope && !a->k_prerotated) || a->k_norm != NULL)
        io.k_rot = out->k_rot;
    else if (part == 0 && out->k_rot != NULL)
        memcpy(out->k_rot, io.K, (size_t)p.Lk * io.ldk * sizeof(float));
    if (p.scheme->type == PA_SCHEME_ALIBI) {
        st = pa_alibi_slopes(&p.scheme->alibi, p.H, b.slopes, err);
        if (st != PA_STATUS_OK)
            return st;
    }
    if (b.t5_bucket != NULL) {
        const pa_t5 *t = &p.scheme->t5;
        for (int32_t d = -t->max_distance; d <= t->max_distance; d++)
            b.t5_bucket[d + t->max_distance] =
                pa_t5_bucket(d, t->bidirectional, t->num_buckets, t->max_distance);
    }
    {
        const int64_t units = (int64_t)p.H * blocks_per_head(&p);
        attend(&p, &b, &io, units * part / nparts, units * (part + 1) / nparts);
    }
    if (overflow)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, p.layer ? "x" : "q",
                        "the attention logits overflow float32 (some scale * q.k is beyond "
                        "3.4e38 or not a number): scale the inputs down");

    if (a->w_o != NULL)
        project(b.attn, p.Lq, p.H * p.Dv, a->w_o, a->b_o, a->d_out, out->output);
    return PA_STATUS_OK;
}
