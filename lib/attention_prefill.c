/* attention_prefill.c - the tiled kernel: blocks of queries against tiles
 * of keys.
 *
 * Per head and block of BQ queries, keys are visited in tiles of bk: the
 * logits tile comes from one product against the kv head's keys, packed
 * transposed once per kv head (lib/tile.c), softcap, the scheme's bias, the
 * caller's bias and the masks are applied in one pass (attention_mask.c),
 * and an online softmax (Milakov & Gimelshein 2018, as in FlashAttention)
 * folds the tile into a running output that starts from the head's sink, so
 * without returned weights the working memory does not grow with the
 * sequence length. Tiles that the causal, window, chunk, padding or
 * caller's mask hide entirely are skipped.
 */
#include "attention_kernel.h"

#include "bias_row.h"
#include "dtype.h"
#include "softmax.h"
#include "tile.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Rows per group on a causal diagonal tile, where each group multiplies
 * only up to its own last visible key: the row blocks of the QK^T and PV
 * micro-kernels (lib/tile.c), so that neither runs a part-empty block. */
enum { QK_ROWS = 6, PV_ROWS = 6 };

/* One head's operands for attend_block: the query block, the packed K^T
 * and the value columns of its kv head, each with its row stride. */
typedef struct head_ops {
    const float *Qb;
    const float *Kt;
    const float *Vh;
    int ldq, ldv;
    size_t ldkt;
    /* compute_dtype bf16: the same operands packed by the way that
     * multiplies them (tile.h; u its units a pair): Q2 [nq, d2 u], Kt2
     * [d2 u, ldkt], V2 [ceil(Lk/2) u, Dv], d2 = ceil(D/2). */
    const uint32_t *Q2, *Kt2, *V2;
    int d2;
    pa__bf16_way way;
} head_ops;

/* b->p2's row stride: a tile's pairs of keys, in the way's units. */
static int p2_ld(const pa__plan *p, pa__bf16_way w)
{
    return (p->bk / 2 + 1) * pa__bf16_units(w);
}

/* S [gn, n] (row stride lds) = the logits of rows [g, g + gn) of the block
 * against keys [j0, j0 + n): float32 or bf16 products. */
static void block_qk(const pa__plan *p, const head_ops *op, int32_t g, int32_t gn, int32_t j0,
                     int32_t n, float *S, int lds)
{
    const int u = pa__bf16_units(op->way);
    if (p->cbf16)
        pa__tile_qk_bf16(op->way, gn, n, op->d2, p->scale, op->Q2 + (size_t)g * op->d2 * u,
                         op->d2 * u, op->Kt2 + j0, op->ldkt, S, lds);
    else
        pa__tile_qk(gn, n, p->D, p->scale, op->Qb + (size_t)g * op->ldq, op->ldq, op->Kt + j0,
                    op->ldkt, S, lds);
}

/* O [gn, Dv] of rows [g, g + gn) += their probabilities over keys [j0, j0
 * + n) (b->S, row stride nk) times the values: float32 or bf16 (b->p2,
 * packed by the online softmax for the whole tile). */
static void block_pv(const pa__plan *p, const buffers *b, const head_ops *op, int32_t g, int32_t gn,
                     int32_t j0, int32_t n, int32_t nk)
{
    if (p->cbf16) {
        const int32_t lead = j0 & 1, u = pa__bf16_units(op->way);
        pa__tile_pv_bf16(op->way, gn, p->Dv, (lead + n + 1) / 2,
                         b->p2 + (size_t)g * (size_t)p2_ld(p, op->way), p2_ld(p, op->way),
                         op->V2 + (size_t)(j0 / 2) * (size_t)u * p->Dv, p->Dv,
                         b->O + (size_t)g * p->Dv, p->Dv);
    } else {
        pa__tile_pv(gn, p->Dv, n, b->S + (size_t)g * nk, nk, op->Vh + (size_t)j0 * op->ldv, op->ldv,
                    b->O + (size_t)g * p->Dv, p->Dv);
    }
}

/* Causal, sorted key positions: the end of the keys in [j0, j1) that any
 * of the gn queries from row r sees (the first key past the latest). */
static int32_t group_end(const pa__plan *p, const buffers *b, int32_t r, int32_t gn, int32_t j0,
                         int32_t j1)
{
    int32_t q = INT32_MIN, lo = j0, hi = j1;
    for (int32_t i = r; i < r + gn; i++)
        q = pa__max_i32(q, b->qpos[i]);
    pa__visible_span(p, q, b->kpos, b->kpos_unit, &lo, &hi);
    return hi;
}

/* x[0 .. n) in reverse order, in place. */
static void reverse_row(float *x, int32_t n)
{
    for (int32_t a = 0, z = n - 1; a < z; a++, z--) {
        const float t = x[a];
        x[a] = x[z];
        x[z] = t;
    }
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
    const float *Qb = op->Qb;
    float *store = io->logits != NULL ? io->logits : io->weights;
    float *store_rows = store ? store + ((size_t)h * p->Lq + i0) * p->Lk : NULL;
    int32_t qmin = INT32_MAX, qmax = INT32_MIN;
    const pa_shaw *shaw = p->scheme->type == PA_SCHEME_SHAW ? &p->scheme->shaw : NULL;
    const int32_t nrel = shaw ? 2 * shaw->max_relative_position + 1 : 0;
    bool grouped;
    const bool stats = pa__want_stats(io);
    /* Shaw's rel_v by distance (bias_row.h), when the positions allow. */
    float *bins = shaw && shaw->rel_v != NULL && b->pos_small ? b->bins : NULL;

    for (int32_t i = 0; i < nq; i++) {
        qmin = pa__min_i32(qmin, b->qpos[i0 + i]);
        qmax = pa__max_i32(qmax, b->qpos[i0 + i]);
        /* A sink is a key of its own with logit s_h and no value: the row
         * starts as if it had been folded in (max s_h, sum exp(0) = 1). */
        b->m[i] = p->a->sinks != NULL ? p->a->sinks[h] : -INFINITY;
        b->l[i] = p->a->sinks != NULL ? 1.0f : 0.0f;
        /* The statistics' sums run over the keys only. */
        b->sa[i] = b->sb[i] = b->sk[i] = b->sf[i] = 0.0f;
    }
    memset(b->O, 0, (size_t)nq * Dv * sizeof(float));
    if (p->scheme->type == PA_SCHEME_COPE)
        pa__cope_block(p, b, h, Qb, op->ldq, op->Kt, op->ldkt, i0, nq);
    if (bins != NULL)
        memset(bins, 0, (size_t)nq * nrel * sizeof(float));
    if (shaw) {
        /* qrel [nq, 2K+1] = scale * Q_block rel_k^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nrel, p->D, p->scale, Qb, op->ldq,
                    shaw->rel_k, p->D, 0.0f, b->qrel, nrel);
        /* Indexed by qpos - kpos, row idx is row 2K - idx by kpos - qpos:
         * reversed, the rows serve the lookups by kpos - qpos below. */
        if (shaw->direction == PA_SHAW_DIRECTION_QUERY_MINUS_KEY)
            for (int32_t i = 0; i < nq; i++)
                reverse_row(b->qrel + (size_t)i * nrel, nrel);
    }

    for (int32_t t0 = 0; t0 < p->Lk; t0 += p->bk) {
        const int32_t tn = pa__min_i32(p->bk, p->Lk - t0);
        int32_t j0, j1, nk;
        pa__visible_range(p, qmin, qmax, b->kpos, b->kpos_sorted, b->kpos_unit, t0, tn, &j0, &j1);
        if (p->a->mask != NULL && j0 < j1)
            pa__mask_range(p, h, i0, nq, &j0, &j1);
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
                block_qk(p, op, g, gn, j0, e - j0, b->S + (size_t)g * nk, nk);
                for (int32_t i = g; i < g + gn; i++)
                    pa__row_fill(b->S + (size_t)i * nk + (e - j0), nk - (e - j0), -INFINITY);
            }
            grouped = true;
        } else {
            block_qk(p, op, 0, nq, j0, nk, b->S, nk);
            grouped = false;
        }
        pa__bias_and_mask(p, b, b->S, h, i0, nq, j0, nk);
        if (store_rows) {
            for (int32_t i = 0; i < nq; i++)
                memcpy(store_rows + (size_t)i * p->Lk + j0, b->S + (size_t)i * nk,
                       (size_t)nk * sizeof(float));
        }
        /* Online softmax: fold this tile into the running max, denominator
         * and output of each row; with compute_dtype bf16, its
         * probabilities rounded in pairs of keys (2t, 2t+1) from the even
         * key at or before j0 into b->p2 (a key outside the tile as 0). */
        for (int32_t i = 0; i < nq; i++) {
            float *row = b->S + (size_t)i * nk;
            uint32_t *pairs = p->cbf16 ? b->p2 + (size_t)i * (size_t)p2_ld(p, op->way) : NULL;
            float tmax = pa__row_max(row, nk), mnew, alpha;
            if (tmax == -INFINITY) {
                memset(row, 0, (size_t)nk * sizeof(float));
                if (pairs != NULL)
                    pa__bf16_pack_probs(op->way, row, nk, j0 & 1, pairs);
                continue;
            }
            mnew = tmax > b->m[i] ? tmax : b->m[i];
            /* exp(0) is 1: no call when the max stays, as on most tiles
             * past a row's first few (inf - inf is NaN, as before). */
            alpha = b->m[i] == -INFINITY     ? 0.0f
                    : b->m[i] - mnew == 0.0f ? 1.0f
                                             : expf(b->m[i] - mnew);
            if (stats) {
                /* sum p (l - m) moves with m: each old term gains m_old - mnew. */
                float spl, spd, spf;
                const float s = pa__row_exp_sum_stats(row, nk, mnew, b->kpos + j0, b->qpos[i0 + i],
                                                      io->far, &spl, &spd, &spf);
                b->sa[i] =
                    (b->sk[i] > 0.0f ? alpha * (b->sa[i] + (b->m[i] - mnew) * b->sk[i]) : 0.0f) +
                    spl;
                b->sb[i] = b->sb[i] * alpha + spd;
                b->sf[i] = b->sf[i] * alpha + spf;
                b->sk[i] = b->sk[i] * alpha + s;
                b->l[i] = b->l[i] * alpha + s;
                if (pairs != NULL)
                    pa__bf16_pack_probs(op->way, row, nk, j0 & 1, pairs);
            } else if (pairs != NULL) {
                b->l[i] =
                    b->l[i] * alpha + pa__row_exp_sum_pairs(op->way, row, nk, mnew, j0 & 1, pairs);
            } else {
                b->l[i] = b->l[i] * alpha + pa__row_exp_sum(row, nk, mnew);
            }
            b->m[i] = mnew;
            if (alpha != 1.0f) {
                pa__row_scale(b->O + (size_t)i * Dv, b->O + (size_t)i * Dv, Dv, alpha);
                if (bins != NULL)
                    pa__row_scale(bins + (size_t)i * nrel, bins + (size_t)i * nrel, nrel, alpha);
            }
        }
        if (grouped) {
            /* Past a row's last visible key its weights are 0 (masked), and
             * every column up to its QK group's end was computed or -inf. */
            for (int32_t g = 0; g < nq; g += PV_ROWS) {
                const int32_t gn = pa__min_i32(PV_ROWS, nq - g);
                const int32_t e = group_end(p, b, i0 + g, gn, j0, j1);
                block_pv(p, b, op, g, gn, j0, e - j0, nk);
            }
        } else {
            block_pv(p, b, op, 0, nq, j0, nk, nk);
        }
        if (bins != NULL) {
            /* Shaw's values by distance: the probabilities summed per
             * rel_v row, multiplied out once the row is done. */
            for (int32_t i = 0; i < nq; i++)
                pa__row_bin_rel(b->S + (size_t)i * nk, b->kpos + j0, nk, b->qpos[i0 + i],
                                bins + (size_t)i * nrel, shaw->max_relative_position, b->kpos_unit);
        } else if (shaw && shaw->rel_v != NULL) {
            for (int32_t i = 0; i < nq; i++) {
                const float *prow = b->S + (size_t)i * nk;
                float *o = b->O + (size_t)i * Dv;
                int32_t qp = b->qpos[i0 + i];
                for (int32_t j = 0; j < nk; j++) {
                    const float *rv;
                    if (prow[j] == 0.0f)
                        continue;
                    rv = shaw->rel_v + (size_t)pa_shaw_pair_index(shaw, qp, b->kpos[j0 + j]) * Dv;
                    for (int32_t d = 0; d < Dv; d++)
                        o[d] += prow[j] * rv[d];
                }
            }
        }
    }

    if (bins != NULL) {
        /* The bins are by kpos - qpos; rel_v's rows by the direction. */
        if (shaw->direction == PA_SHAW_DIRECTION_QUERY_MINUS_KEY)
            for (int32_t i = 0; i < nq; i++)
                reverse_row(bins + (size_t)i * nrel, nrel);
        pa__tile_pv(nq, Dv, nrel, bins, nrel, shaw->rel_v, Dv, b->O, Dv);
    }
    for (int32_t i = 0; i < nq; i++) {
        float *dst = io->out + (size_t)(i0 + i) * p->H * Dv + (size_t)h * Dv;
        /* Finite inputs whose products overflow give +inf or NaN logits;
         * the running max or sum then stops being finite. */
        if (!isfinite(b->l[i]) || b->m[i] == INFINITY)
            *b->overflow = true;
        const float *o = b->O + (size_t)i * Dv;
        float inv = b->l[i] > 0.0f ? 1.0f / b->l[i] : 0.0f;
        if (!pa__row_scale_finite(dst, o, Dv, inv))
            *b->overflow_out = true;
        if (stats)
            pa__row_stats(b->l[i], b->sk[i], b->sa[i], b->sb[i], b->sf[i], io,
                          (size_t)h * p->Lq + (size_t)(i0 + i));
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

/* See attention_kernel.h. */
void pa__prep_rows(const pa__plan *p, const row_norm *nm, int32_t head, const float *cos_t,
                   const float *sin_t, const float *scale, const float *src, int ld, int32_t n,
                   float *dst, float *ret, int ret_ld)
{
    const int32_t D = p->D;
    for (int32_t i = 0; i < n; i++) {
        const float *x = src + (size_t)i * ld;
        float *y = dst + (size_t)i * D;
        /* Rows ld apart (H*D floats) are too far for the hardware's
         * prefetchers: ask for the row 8 ahead. */
        if (i + 8 < n)
            for (int32_t d = 0; d < D; d += 16)
                __builtin_prefetch(x + 8 * (size_t)ld + (size_t)d, 0, 3);
        if (nm->on) {
            const float *wh = nm->w == NULL || nm->len == D ? nm->w : nm->w + (size_t)head * D;
            float s;
            if (nm->len == D) {
                double ss = 0.0;
                for (int32_t d = 0; d < D; d++)
                    ss += (double)x[d] * x[d];
                s = (float)(1.0 / sqrt(ss / D + nm->eps));
            } else {
                s = nm->inv[i];
            }
            if (wh == NULL) /* Llama 4's L2Norm */
                for (int32_t d = 0; d < D; d++)
                    y[d] = x[d] * s;
            else if (nm->offset != 0.0f) /* the multiplier is weight + offset, in float */
                for (int32_t d = 0; d < D; d++)
                    y[d] = x[d] * s * (wh[d] + nm->offset);
            else
                for (int32_t d = 0; d < D; d++)
                    y[d] = x[d] * s * wh[d];
        } else {
            memcpy(y, x, (size_t)D * sizeof(float));
        }
    }
    /* The n rows turned in one call (their tables: r / 2 floats a row). */
    if (p->rope)
        pa_rope_apply(&p->rope_cfg, D, n, 1, cos_t, sin_t, dst, dst);
    for (int32_t i = 0; i < n; i++) {
        float *y = dst + (size_t)i * D;
        if (scale != NULL) /* after rope, as Hugging Face and Qwen scale q */
            for (int32_t d = 0; d < D; d++)
                y[d] *= scale[i];
        if (ret != NULL)
            memcpy(ret + (size_t)i * ret_ld, y, (size_t)D * sizeof(float));
    }
}

/* Work is split into units of (query head, block of BQ queries), numbered
 * head-major; a part runs units [u0, u1). Each unit's outputs are disjoint
 * from every other's, so parts may run concurrently. */
static int32_t blocks_per_head(const pa__plan *p)
{
    return (p->Lq + BQ - 1) / BQ;
}

int64_t pa__prefill_units(const pa__plan *p)
{
    return (int64_t)p->H * blocks_per_head(p);
}

void pa__prefill(const pa__plan *p, const buffers *b, const head_io *io, int64_t u0, int64_t u1)
{
    const pa_attention *a = p->a;
    const size_t half = (size_t)p->r / 2;
    const int64_t nb = blocks_per_head(p);
    const row_norm qn = pa__row_norm(p, b, false), kn = pa__row_norm(p, b, true);
    const bool prep_q = p->rope || qn.on || p->q_scale;
    const bool prep_k = (p->rope && !a->k_prerotated) || kn.on;
    for (int32_t g = 0; g < p->Hkv; g++) {
        /* Units of kv head g: [g*group*nb, (g+1)*group*nb). */
        const int64_t g0 = (int64_t)g * p->group * nb, g1 = g0 + (int64_t)p->group * nb;
        head_ops op;
        const float *Kh = io->kvt == PA_DTYPE_F32 ? io->K + (size_t)g * p->D : NULL;
        size_t ldk = (size_t)io->ldk; /* Kh's rows */
        const size_t es = pa__dtype_size(io->kvt);
        if (g1 <= u0 || g0 >= u1)
            continue;
        op.Vh = io->kvt == PA_DTYPE_F32 ? io->V + (size_t)g * p->Dv : NULL;
        op.way = pa__bf16_chosen();
        op.ldv = io->ldv;
        /* compute_dtype bf16 packs float values straight from their rows
         * into b->v2, which the tiles read: gathering them first was one
         * more pass over the head's values. */
        if (b->vhead != NULL && !(p->cbf16 && io->kvt == PA_DTYPE_F32 && io->vp == NULL)) {
            /* Value rows Hkv*Dv floats apart share few cache sets (a 2 KiB
             * stride maps a tile's rows onto 2 of L1's 64 sets): gather the
             * head's rows once so the tiles stream from contiguous memory.
             * Paged values come together here too, and 16-bit ones are
             * widened (layout() takes vhead for them). */
            for (int32_t j = 0; j < p->Lk; j++)
                pa__widen(io->kvt, (const char *)pa__vrow_raw(io, j) + (size_t)g * p->Dv * es,
                          (size_t)p->Dv, b->vhead + (size_t)j * p->Dv);
            op.Vh = b->vhead;
            op.ldv = p->Dv;
        }
        if (b->kgather != NULL) { /* paged or 16-bit keys: the head's rows, contiguous floats */
            for (int32_t j = 0; j < p->Lk; j++)
                pa__widen(io->kvt, (const char *)pa__krow_raw(io, j) + (size_t)g * p->D * es,
                          (size_t)p->D, b->kgather + (size_t)j * p->D);
            Kh = b->kgather;
            ldk = (size_t)p->D;
        }
        op.Kt = b->kt;
        op.ldkt = pa__tile_kt_ld(p->Lk);
        /* compute_dtype bf16 multiplies the bf16 K^T; the float one serves
         * CoPE's gates and Shaw's key term only. */
        const bool f32_kt = !p->cbf16 || p->scheme->type == PA_SCHEME_COPE || b->krel != NULL;
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
                pa__prep_rows(
                    p, &nm, g,
                    p->rope ? pa__rope_tab(p, b->cos_k, g, p->Lk) + (size_t)j0 * half : NULL,
                    p->rope ? pa__rope_tab(p, b->sin_k, g, p->Lk) + (size_t)j0 * half : NULL, NULL,
                    Kh + (size_t)j0 * ldk, (int)ldk, n, b->qblk,
                    ret ? ret + (size_t)j0 * io->ldk : NULL, io->ldk);
                if (f32_kt)
                    pa__tile_pack_kt(n, p->D, b->qblk, p->D, b->kt + j0, op.ldkt);
                if (p->cbf16)
                    pa__bf16_pack_kt(op.way, n, p->D, b->qblk, p->D, b->kt2 + j0, op.ldkt);
            }
        } else {
            if (f32_kt)
                pa__tile_pack_kt(p->Lk, p->D, Kh, (int)ldk, b->kt, op.ldkt);
            if (p->cbf16)
                pa__bf16_pack_kt(op.way, p->Lk, p->D, Kh, (int)ldk, b->kt2, op.ldkt);
        }
        op.Kt2 = b->kt2;
        op.V2 = b->v2;
        op.d2 = (p->D + 1) / 2;
        op.Q2 = b->q2;
        if (p->cbf16)
            pa__bf16_pack_v(op.way, p->Lk, p->Dv, op.Vh, op.ldv, b->v2, p->Dv);
        if (b->krel != NULL) {
            /* Shaw's key term of this kv head by table row: krel = scale *
             * rel_k[lo .. lo+n) K^T, the keys as attention sees them. */
            const pa_shaw *s = &p->scheme->shaw;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b->krel_n, p->Lk, p->D, p->scale,
                        s->rel_k + (size_t)b->krel_lo * p->D, p->D, b->kt, (int)op.ldkt, 0.0f,
                        b->krel, (int)b->krel_ld);
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
                pa__prep_rows(
                    p, &nm, h,
                    p->rope ? pa__rope_tab(p, b->cos_q, h, p->Lq) + (size_t)i0 * half : NULL,
                    p->rope ? pa__rope_tab(p, b->sin_q, h, p->Lq) + (size_t)i0 * half : NULL,
                    b->q_scale != NULL ? b->q_scale + i0 : NULL, op.Qb, io->ldq, nq, b->qblk,
                    io->q_rot ? io->q_rot + (size_t)i0 * io->ldq + (size_t)h * p->D : NULL,
                    io->ldq);
                op.Qb = b->qblk;
                op.ldq = p->D;
            }
            if (p->cbf16)
                pa__bf16_pack_rows(op.way, nq, p->D, op.Qb, op.ldq, b->q2,
                                   op.d2 * pa__bf16_units(op.way));
            attend_block(p, b, io, &op, h, i0, nq);
        }
    }
}
