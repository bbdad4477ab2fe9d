/* cope.c - CoPE (Golovneva et al. 2024, "Contextual Position Encoding:
 * Learning to Count What's Important"): the scheme's check and the position
 * term of one block of query rows, which the tiled kernel computes before
 * the block's tiles and adds in its bias pass (attention_mask.c).
 *
 * The formula (posattn.h, pa_cope) is that of the authors' code,
 * facebookresearch/RAM projects/cope/src/cope/context_position.py. A row's
 * positions are suffix sums of its gates over every key it sees, so a block
 * needs its content logits over all its keys before any tile: one extra
 * product against the packed K^T (the gates), one product q.E [nq,
 * npos_max], and a scan that sums and interpolates, into one [nq, Lk]
 * buffer.
 */
#include "attention_kernel.h"

#include "softmax.h"
#include "tile.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

pa_status pa_cope_check(const pa_cope *c, int32_t num_heads, int32_t head_dim, pa_error *err)
{
    size_t n, per_head;
    if (c == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "cope scheme is NULL");
    if (num_heads < 1 || head_dim < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "num_heads",
                        "num_heads=%d and head_dim=%d must be at least 1", (int)num_heads,
                        (int)head_dim);
    if (c->npos_max < 2 || c->npos_max > PA_COPE_NPOS_MAX)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.npos_max",
                        "scheme.npos_max=%d must be in [2, %d] (positions 0 .. npos_max-1)",
                        (int)c->npos_max, PA_COPE_NPOS_MAX);
    if (c->pos_emb == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.pos_emb",
                        "scheme.pos_emb is required: [npos_max=%d, head_dim=%d] shared by the "
                        "heads, or [num_heads=%d, %d, %d]",
                        (int)c->npos_max, (int)head_dim, (int)num_heads, (int)c->npos_max,
                        (int)head_dim);
    if (c->pos_emb_heads != 1 && c->pos_emb_heads != num_heads)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.pos_emb",
                        "scheme.pos_emb has %d heads: 1 (shared) or num_heads=%d",
                        (int)c->pos_emb_heads, (int)num_heads);
    if (c->pos_emb_rows != 0 && c->pos_emb_rows != c->npos_max)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.npos_max",
                        "scheme.npos_max=%d does not match scheme.pos_emb's %d positions (its "
                        "shape is [npos_max, head_dim] or [num_heads, npos_max, head_dim])",
                        (int)c->npos_max, (int)c->pos_emb_rows);
    if (c->pos_emb_cols != 0 && c->pos_emb_cols != head_dim)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.pos_emb",
                        "scheme.pos_emb has rows of %d values but head_dim=%d (its shape is "
                        "[npos_max, head_dim] or [num_heads, npos_max, head_dim])",
                        (int)c->pos_emb_cols, (int)head_dim);
    if (!pa__mul_size((size_t)c->npos_max, (size_t)head_dim, &per_head) ||
        !pa__mul_size(per_head, (size_t)c->pos_emb_heads, &n))
        return pa__fail(err, PA_STATUS_TOO_LARGE, "scheme.pos_emb",
                        "scheme.pos_emb's size overflows");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(c->pos_emb[i])) {
            const size_t hh = i / per_head, f = i % per_head / (size_t)head_dim,
                         d = i % (size_t)head_dim;
            char field[96];
            snprintf(field, sizeof field, "scheme.pos_emb[%d][%d][%d]", (int)hh, (int)f, (int)d);
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field, "%s=%g is not finite", field,
                            (double)c->pos_emb[i]);
        }
    return PA_STATUS_OK;
}

void pa__cope_block(const pa__plan *p, const buffers *b, int32_t h, const float *Qb, int ldq,
                    const float *Kt, size_t ldkt, int32_t i0, int32_t nq)
{
    const pa_cope *c = &p->scheme->cope;
    const pa_attention *a = p->a;
    const int32_t Lk = p->Lk, npos = c->npos_max;
    const float *E = c->pos_emb + (c->pos_emb_heads == 1 ? 0 : (size_t)h * npos * p->D);
    const float *bias =
        a->bias != NULL ? a->bias + (size_t)(a->bias_heads == 1 ? 0 : h) * p->Lq * Lk : NULL;
    const double mult = c->nodiv ? 1.0 : (double)p->scale;
    double pmax;
    int32_t ne;
    float *C = b->cope;
    const size_t ld = b->cope_ld;
    double acc[BQ];
    int32_t qmin = INT32_MAX, qmax = INT32_MIN, lo, hi, n;

    for (int32_t i = 0; i < nq; i++) {
        qmin = pa__min_i32(qmin, b->qpos[i0 + i]);
        qmax = pa__max_i32(qmax, b->qpos[i0 + i]);
    }
    /* The keys some row of the block may see; others are hidden from all. */
    pa__visible_range(p, qmin, qmax, b->kpos, b->kpos_sorted, b->kpos_unit, 0, Lk, &lo, &hi);
    if (a->mask != NULL && lo < hi)
        pa__mask_range(p, h, i0, nq, &lo, &hi);
    n = hi - lo;
    for (int32_t i = 0; i < nq; i++) {
        pa__row_fill(C + (size_t)i * ld, lo, 0.0f);
        pa__row_fill(C + (size_t)i * ld + hi, Lk - hi, 0.0f);
    }
    if (n == 0)
        return;

    /* Gates: sigmoid(scale q.k), 0 where a mask (or a -inf bias) hides the
     * key. */
    pa__tile_qk(nq, n, p->D, p->scale, Qb, ldq, Kt + lo, ldkt, C + lo, (int)ld);
    for (int32_t i = 0; i < nq; i++) {
        float *row = C + (size_t)i * ld + lo;
        pa__mask_row(p, b, h, i0 + i, row, lo, n);
        if (bias != NULL) {
            const float *brow = bias + (size_t)(i0 + i) * Lk + lo;
            for (int32_t j = 0; j < n; j++)
                if (brow[j] == -INFINITY)
                    row[j] = -INFINITY;
        }
        pa__row_sigmoid(row, n);
    }

    /* e [nq, ne] = Q E^T: each row's term at every whole position it may
     * reach. A sum of n gates, each at most 1, is at most n (also in
     * rounded arithmetic): positions past n are never read, and the clamp
     * to n is no clamp. */
    ne = pa__min_i32(npos, n + 1);
    pmax = (double)(ne - 1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, ne, p->D, 1.0f, Qb, ldq, E, p->D, 0.0f,
                b->cope_qe, ne);

    /* Positions: suffix sums from the last key, the block's rows side by
     * side (independent sums, not one serial chain per row), in double and
     * clamped to npos_max - 1 (a NaN gate clamps too: its logit flags the
     * overflow in the tile pass); each interpolated at once, in double, so
     * a position past 2^k keeps its fraction to 2^-52, not 2^(k-24). */
    for (int32_t i = 0; i < nq; i++)
        acc[i] = 0.0;
    for (int32_t j = hi - 1; j >= lo; j--) {
        float *col = C + j;
        for (int32_t i = 0; i < nq; i++) {
            const float *e = b->cope_qe + (size_t)i * ne;
            double pos, w;
            int32_t f, ce;
            acc[i] += col[(size_t)i * ld];
            pos = acc[i] < pmax ? acc[i] : pmax;
            f = (int32_t)pos; /* pos >= 0: truncation is floor */
            w = pos - f;
            ce = f + (w > 0.0); /* ceil */
            col[(size_t)i * ld] = (float)(((double)e[ce] * w + (double)e[f] * (1.0 - w)) * mult);
        }
    }
    for (int32_t i = 0; i < nq; i++)
        /* q.E past 3.4e38: a -inf term would hide the key silently. */
        if (!pa__row_finite(C + (size_t)i * ld + lo, (size_t)n))
            *b->overflow = true;
}
