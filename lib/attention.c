/* attention.c - multi-head attention with every positional scheme: the
 * entry points, the workspace, and what is prepared before the kernels run
 * (positions, projections, rope tables, slopes, buckets).
 *
 * Two kernels do the work: the tiled one for blocks of queries
 * (attention_prefill.c) and, when there are few query rows and no weights or
 * logits to return, the decode one (attention_decode.c), whose parts can
 * also share the keys of one call (pa_attention_run_keys).
 */
#include "attention_kernel.h"
#include "cpu.h"
#include "dtype.h"
#include "softmax.h"
#include "tile.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* True when the q and k position arrays are the same sequence, so one set
 * of rope tables serves both. */
static bool same_positions(const pa__plan *p)
{
    if (p->Lq != p->Lk)
        return false;
    if (p->layer)
        return true;
    if (p->rope2d) /* the angles' coordinates */
        return p->q_pos2 == p->k_pos2;
    if (p->q_mrope != NULL || p->k_mrope != NULL) /* the angles' positions */
        return p->q_mrope == p->k_mrope;
    return p->q_positions == NULL && p->k_positions == NULL;
}

void pa__shaw_key_rows(const pa__plan *p, int32_t *lo, int32_t *n)
{
    const int64_t K = p->scheme->shaw.max_relative_position;
    int64_t qmin = INT64_MAX, qmax = INT64_MIN, kmin = INT64_MAX, kmax = INT64_MIN, a, b;
    for (int32_t i = 0; i < p->Lq; i++) {
        const int64_t q = p->q_positions ? p->q_positions[i] : (int64_t)p->Lk - p->Lq + i;
        qmin = q < qmin ? q : qmin;
        qmax = q > qmax ? q : qmax;
    }
    for (int32_t j = 0; j < p->Lk; j++) {
        const int64_t k = p->k_positions ? p->k_positions[j] : j;
        kmin = k < kmin ? k : kmin;
        kmax = k > kmax ? k : kmax;
    }
    if (p->scheme->shaw.direction == PA_SHAW_DIRECTION_QUERY_MINUS_KEY) {
        a = qmin - kmax;
        b = qmax - kmin;
    } else {
        a = kmin - qmax;
        b = kmax - qmin;
    }
    a = a < -K ? -K : a > K ? K : a;
    b = b < -K ? -K : b > K ? K : b;
    *lo = (int32_t)(a + K);
    *n = (int32_t)(b - a + 1);
}

/* The largest |qpos - kpos| over every pair of the call (KERPLE, Sandwich). */
static int64_t dist_max(const pa__plan *p)
{
    int64_t qmin = INT64_MAX, qmax = INT64_MIN, kmin = INT64_MAX, kmax = INT64_MIN, d;
    for (int32_t i = 0; i < p->Lq; i++) {
        const int64_t q = p->q_positions ? p->q_positions[i] : (int64_t)p->Lk - p->Lq + i;
        qmin = q < qmin ? q : qmin;
        qmax = q > qmax ? q : qmax;
    }
    for (int32_t j = 0; j < p->Lk; j++) {
        const int64_t k = p->k_positions ? p->k_positions[j] : j;
        kmin = k < kmin ? k : kmin;
        kmax = k > kmax ? k : kmax;
    }
    if (p->Lq < 1 || p->Lk < 1)
        return 0;
    d = qmax - kmin > kmax - qmin ? qmax - kmin : kmax - qmin;
    return d > 0 ? d : 0;
}

static bool dist_scheme(const pa__plan *p)
{
    return p->scheme->type == PA_SCHEME_KERPLE || p->scheme->type == PA_SCHEME_SANDWICH;
}

static void layout(const pa__plan *p, pa__ws *w, buffers *b)
{
    const pa_attention *a = p->a;
    size_t Lq = (size_t)p->Lq, Lk = (size_t)p->Lk;
    size_t tq = Lq < BQ ? Lq : BQ;
    size_t tk = Lk < (size_t)p->bk ? Lk : (size_t)p->bk;
    const bool kv16 = !p->layer && a->kv_dtype != PA_DTYPE_F32;

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
    if (p->rope || p->q_norm || p->k_norm || p->q_scale)
        b->qblk = pa__ws_take(w, BQ * (size_t)p->D, sizeof(float));
    if (p->q_scale)
        b->q_scale = pa__ws_take(w, Lq, sizeof(float));
    if (a->q_norm != NULL && a->q_norm_len != p->D)
        b->q_inv = pa__ws_take(w, Lq, sizeof(float));
    if (a->k_norm != NULL && a->k_norm_len != p->D)
        b->k_inv = pa__ws_take(w, Lk, sizeof(float));
    if (p->rope) {
        /* Rotated keys one kv head at a time and queries one block at a
         * time: O(Lk*D), not O(L*H*D), whatever the head count. */
        /* rope2d mixed: one table per head ([H, L, r/2]). */
        size_t half = (size_t)p->r / 2, nh = (size_t)p->rope_heads;
        b->cos_q = pa__ws_take(w, Lq * half * nh, sizeof(float));
        b->sin_q = pa__ws_take(w, Lq * half * nh, sizeof(float));
        /* xpos scales q and k by opposite powers: its tables differ even
         * at the same positions. */
        if ((same_positions(p) && !p->xpos) || a->k_prerotated) { /* prerotated: never read */
            b->cos_k = b->cos_q;
            b->sin_k = b->sin_q;
        } else {
            b->cos_k = pa__ws_take(w, Lk * half * nh, sizeof(float));
            b->sin_k = pa__ws_take(w, Lk * half * nh, sizeof(float));
        }
    }
    b->kt = pa__ws_take(w, (size_t)p->D * pa__tile_kt_ld(p->Lk), sizeof(float));
    /* 16-bit keys and values: the tiled kernel widens one kv head's rows
     * into these as it gathers them. */
    if (p->Hkv > 1 || a->k_pages != NULL || (kv16 && !pa__decode_fits(p)))
        b->vhead = pa__ws_take(w, Lk * (size_t)p->Dv, sizeof(float));
    if ((a->k_pages != NULL || kv16) && !pa__decode_fits(p))
        b->kgather = pa__ws_take(w, Lk * (size_t)p->D, sizeof(float));
    if (p->cbf16) {
        /* Sized for the way with two units a pair (tile.h), whichever runs. */
        const size_t d2 = ((size_t)p->D + 1) / 2;
        b->kt2 = pa__ws_take(w, 2 * d2 * pa__tile_kt_ld(p->Lk), sizeof(uint32_t));
        b->v2 = pa__ws_take(w, 2 * ((Lk + 1) / 2) * (size_t)p->Dv, sizeof(uint32_t));
        b->q2 = pa__ws_take(w, 2 * BQ * d2, sizeof(uint32_t));
        b->p2 = pa__ws_take(w, 2 * tq * ((size_t)p->bk / 2 + 1), sizeof(uint32_t));
    }
    b->qpos = pa__ws_take(w, Lq, sizeof(int32_t));
    b->kpos = pa__ws_take(w, Lk, sizeof(int32_t));
    if (p->scheme->type == PA_SCHEME_ALIBI)
        b->slopes = pa__ws_take(w, (size_t)p->H, sizeof(float));
    if (p->scheme->type == PA_SCHEME_T5 && p->scheme->t5.max_distance <= T5_TABLE_MAX / 2) {
        const size_t n = 2 * (size_t)p->scheme->t5.max_distance + 1;
        b->t5_bucket = pa__ws_take(w, n, sizeof(int32_t));
        if (n * (size_t)p->H <= T5_BIAS_MAX)
            b->t5_bias = pa__ws_take(w, n * (size_t)p->H, sizeof(float));
    }
    if (dist_scheme(p)) {
        const int64_t n = dist_max(p) + 1;
        if (n <= DIST_BIAS_MAX / p->H) {
            b->dist_n = (int32_t)n;
            b->dist_bias = pa__ws_take(w, (size_t)n * (size_t)p->H, sizeof(float));
        }
    }
    if (p->scheme->type == PA_SCHEME_FIRE) {
        const size_t hidden = (size_t)p->scheme->fire.num_w1;
        const int64_t n = dist_max(p) + 1;
        b->fire.units = pa__ws_take(w, hidden, sizeof(pa__fire_unit));
        b->fire.bp = pa__ws_take(w, hidden, sizeof(double));
        b->fire.seg = pa__ws_take(w, (hidden + 1) * 2 * (size_t)p->H, sizeof(double));
        b->fire.norm = pa__ws_take(w, Lq, sizeof(double));
        if (n <= FIRE_PSI_MAX) {
            b->fire.psi_n = (int32_t)n;
            b->fire.psi = pa__ws_take(w, (size_t)n, sizeof(double));
            if (Lq * hidden <= FIRE_THR_MAX)
                b->fire.dthr = pa__ws_take(w, Lq * hidden, sizeof(int32_t));
        }
    }
    b->S = pa__ws_take(w, tq * tk, sizeof(float));
    b->O = pa__ws_take(w, tq * (size_t)p->Dv, sizeof(float));
    b->m = pa__ws_take(w, tq, sizeof(float));
    b->l = pa__ws_take(w, tq, sizeof(float));
    b->sa = pa__ws_take(w, tq, sizeof(float));
    b->sb = pa__ws_take(w, tq, sizeof(float));
    b->sk = pa__ws_take(w, tq, sizeof(float));
    b->sf = pa__ws_take(w, tq, sizeof(float));
    if (p->scheme->type == PA_SCHEME_SHAW) {
        const size_t nrel = 2 * (size_t)p->scheme->shaw.max_relative_position + 1;
        b->qrel = pa__ws_take(w, tq * nrel, sizeof(float));
        if (p->scheme->shaw.rel_v != NULL)
            b->bins = pa__ws_take(w, tq * nrel, sizeof(float));
        if (p->scheme->shaw.key_term) {
            size_t n;
            pa__shaw_key_rows(p, &b->krel_lo, &b->krel_n);
            b->krel_ld = pa__tile_kt_ld(p->Lk);
            if (pa__mul_size((size_t)b->krel_n, b->krel_ld, &n))
                b->krel = pa__ws_take(w, n, sizeof(float));
            else
                w->overflow = true;
        }
    }
    if (p->scheme->type == PA_SCHEME_COPE) {
        /* One block row of gates, positions and position terms at a time.
         * Rows a cache line more than a multiple of 16 floats apart: the
         * scan walks down the block's columns, and rows 2^k bytes apart
         * would share one L1 set. */
        b->cope_ld = pa__tile_kt_ld(p->Lk) + 16;
        b->cope = pa__ws_take(w, tq * b->cope_ld, sizeof(float));
        b->cope_qe = pa__ws_take(w, tq * (size_t)p->scheme->cope.npos_max, sizeof(float));
    }
    if (pa__decode_fits(p)) {
        const size_t rows = (size_t)p->H * Lq;
        b->dq = pa__ws_take(w, rows * (size_t)p->D, sizeof(float));
        b->dk = pa__ws_take(w, 4 * (size_t)p->D, sizeof(float));
        if (kv16) {
            b->dkw = pa__ws_take(w, 4 * (size_t)p->D, sizeof(float));
        }
        b->dS = pa__ws_take(w, rows * DEC_BK, sizeof(float));
        b->state = pa__ws_take(w, rows * PA__STATE(p->Dv), sizeof(float));
    }
}

size_t pa__workspace_one(const pa_attention *a)
{
    pa__plan p;
    pa__ws w;
    buffers b;
    pa__plan_init(&p, a);
    pa__ws_init(&w, NULL, 0);
    layout(&p, &w, &b);
    return pa__ws_size(&w);
}

/* inv[i] = 1 / sqrt(mean(x[i]^2) + eps) over rows x [n, cols] of type t. */
static void inverse_rms(pa_dtype t, const void *x, int32_t n, int32_t cols, float eps, float *inv)
{
    for (int32_t i = 0; i < n; i++) {
        double ss = 0.0;
        for (int32_t c = 0; c < cols; c++) {
            const double e = pa__dtype_get(t, x, (size_t)i * cols + (size_t)c);
            ss += e * e;
        }
        inv[i] = (float)(1.0 / sqrt(ss / cols + eps));
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
    b->kpos_unit = true;
    b->pos_small = true;
    for (int32_t j = 0; j < p->Lk; j++) {
        b->kpos[j] = p->k_positions ? p->k_positions[j] : j;
        if (j > 0 && b->kpos[j] < b->kpos[j - 1])
            b->kpos_sorted = false;
        if (j > 0 && (int64_t)b->kpos[j] != (int64_t)b->kpos[j - 1] + 1)
            b->kpos_unit = false;
        if (b->kpos[j] > (1 << 30) || b->kpos[j] < -(1 << 30))
            b->pos_small = false;
    }
    for (int32_t i = 0; i < p->Lq; i++)
        if (b->qpos[i] > (1 << 30) || b->qpos[i] < -(1 << 30))
            b->pos_small = false;
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
    if (!pa__row_finite(b->xp, n))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "x",
                        "x + position encoding overflows float32 (x is within 1 of 3.4e38): "
                        "scale x down");
    return PA_STATUS_OK;
}

/* A projection's result, finite or the error that names its weight. */
static pa_status projected(const float *y, size_t n, const char *weight, pa_error *err)
{
    if (pa__row_finite(y, n))
        return PA_STATUS_OK;
    return pa__fail(err, PA_STATUS_OUT_OF_RANGE, weight,
                    "the %s projection overflows float32 (finite inputs, a product past "
                    "3.4e38): scale x or %s down",
                    weight, weight);
}

/* ALiBi's bias at the farthest pair of positions must be finite: a slope
 * that makes it -inf would hide keys as a mask does, silently. */
static pa_status alibi_span(const pa__plan *p, const buffers *b, pa_error *err)
{
    int64_t qmin = INT64_MAX, qmax = INT64_MIN, kmin = INT64_MAX, kmax = INT64_MIN, span;
    float top = 0.0f;
    for (int32_t i = 0; i < p->Lq; i++) {
        qmin = b->qpos[i] < qmin ? b->qpos[i] : qmin;
        qmax = b->qpos[i] > qmax ? b->qpos[i] : qmax;
    }
    for (int32_t j = 0; j < p->Lk; j++) {
        kmin = b->kpos[j] < kmin ? b->kpos[j] : kmin;
        kmax = b->kpos[j] > kmax ? b->kpos[j] : kmax;
    }
    span = qmax - kmin > kmax - qmin ? qmax - kmin : kmax - qmin;
    for (int32_t h = 0; h < p->H; h++)
        top = fabsf(b->slopes[h]) > top ? fabsf(b->slopes[h]) : top;
    if (span > 0 && !isfinite(top * (float)span))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.slopes",
                        "the alibi bias overflows float32: slope %g times distance %lld is "
                        "past 3.4e38",
                        (double)top, (long long)span);
    return PA_STATUS_OK;
}

/* KERPLE's bias grows with distance: at the farthest pair it must be finite
 * (a -inf would hide keys as a mask does, silently). */
static pa_status kerple_span(const pa__plan *p, pa_error *err)
{
    const double dmax = (double)dist_max(p);
    for (int32_t h = 0; h < p->H; h++) {
        const double v = pa_kerple_bias(&p->scheme->kerple, h, dmax);
        if (!isfinite((float)v)) {
            char field[64];
            snprintf(field, sizeof field, "scheme.r1[%d]", (int)h);
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, field,
                            "the kerple bias of head %d overflows float32 at distance %.0f "
                            "(%g): scale scheme.r1[%d] or scheme.r2[%d] down",
                            (int)h, dmax, v, (int)h, (int)h);
        }
    }
    return PA_STATUS_OK;
}

/* FIRE's tables for the call: the MLP's segments, each row's normaliser,
 * psi by distance; and a refusal when the bias could pass float32. */
static pa_status fire_tables(const pa__plan *p, buffers *b, pa_error *err)
{
    const pa_fire *f = &p->scheme->fire;
    pa__fire_tables *t = &b->fire;
    const double dmax = (double)dist_max(p);
    double nmin = INFINITY;
    t->nbp = pa__fire_segments(f, p->H, t->units, t->bp, t->seg);
    for (int32_t i = 0; i < p->Lq; i++) {
        t->norm[i] = pa__fire_norm(f, (double)b->qpos[i]);
        nmin = t->norm[i] < nmin ? t->norm[i] : nmin;
    }
    for (int32_t d = 0; d < t->psi_n; d++)
        t->psi[d] = pa__fire_psi(f, (double)d);
    for (int32_t i = 0; t->dthr != NULL && i < p->Lq; i++)
        pa__fire_thresholds(t, i);
    /* psi grows with distance and every normaliser is >= nmin > 0. */
    return pa__fire_span(p->H, t->bp, t->nbp, t->seg,
                         p->Lq > 0 ? pa__fire_psi(f, dmax) / nmin : 0.0, err);
}

/* The distance table of KERPLE or Sandwich: dist_bias[h, d], d < dist_n. */
static void dist_table(const pa__plan *p, const buffers *b)
{
    const pa_scheme *s = p->scheme;
    const size_t n = (size_t)b->dist_n;
    if (s->type == PA_SCHEME_KERPLE) {
        for (int32_t h = 0; h < p->H; h++)
            for (size_t d = 0; d < n; d++)
                b->dist_bias[(size_t)h * n + d] = (float)pa_kerple_bias(&s->kerple, h, (double)d);
        return;
    }
    {
        /* The sum of cosines is the same for every head: once per distance,
         * a run of distances at a time. */
        const int32_t hs = pa_sandwich_hidden_size(&s->sandwich, p->D);
        double g[PA__SANDWICH_RUN];
        for (size_t d0 = 0; d0 < n; d0 += PA__SANDWICH_RUN) {
            const int32_t k1 = n - d0 < PA__SANDWICH_RUN ? (int32_t)(n - d0) : PA__SANDWICH_RUN;
            pa__sandwich_sums(hs, (int64_t)d0, k1, g);
            for (int32_t k = 0; k < k1; k++)
                for (int32_t h = 0; h < p->H; h++)
                    b->dist_bias[(size_t)h * n + d0 + (size_t)k] =
                        (float)pa__sandwich_head(g[k], p->H, h);
        }
    }
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

/* What a call prepares before a kernel runs: the plan, the buffers carved
 * from ws, positions, projections (layer mode), rope tables, norms, slopes
 * and buckets, and the operands (io). part decides who copies q and k when
 * they are returned unchanged. */
typedef struct call {
    pa__plan p;
    buffers b;
    head_io io;
    bool overflow, overflow_out;
} call;

static pa_status check_call(const pa_attention *a, const pa_attention_out *out, int32_t part,
                            int32_t nparts, void *ws, size_t ws_size, pa_error *err)
{
    pa_status st = pa__check_one(a, err);
    size_t need;
    if (st != PA_STATUS_OK)
        return st;
    if (out == NULL || out->output == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "output", "an output buffer is required");
    need = pa__workspace_one(a);
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
    return PA_STATUS_OK;
}

static pa_status prepare(call *c, const pa_attention *a, const pa_attention_out *out, int32_t part,
                         void *ws, size_t ws_size, pa_error *err)
{
    pa__plan *p = &c->p;
    buffers *b = &c->b;
    head_io *io = &c->io;
    pa__ws w;
    pa_status st;

    pa__plan_init(p, a);
    pa__ws_init_aligned(&w, ws, ws_size);
    layout(p, &w, b);
    fill_positions(p, b);
    if (b->q_scale != NULL)
        pa__qscale_fill(a, b->qpos, p->Lq, b->q_scale);
    c->overflow = c->overflow_out = false;
    b->overflow = &c->overflow;
    b->overflow_out = &c->overflow_out;

    memset(io, 0, sizeof *io);
    io->ldq = p->H * p->D;
    io->ldk = p->Hkv * p->D;
    io->ldv = p->Hkv * p->Dv;
    io->weights = out->weights;
    io->logits = out->logits;
    io->entropy = out->entropy;
    io->distance = out->distance;
    io->far_share = out->far_share;
    io->far = (float)out->far_distance;
    io->out = a->w_o != NULL ? b->attn : out->output;

    if (p->layer) {
        const float *xin = a->x;
        if (p->absolute) {
            st = add_absolute(p, b, err);
            if (st != PA_STATUS_OK)
                return st;
            xin = b->xp;
        }
        project(xin, p->Lq, a->d_model, a->w_q, a->b_q, io->ldq, b->q);
        project(xin, p->Lk, a->d_model, a->w_k, a->b_k, io->ldk, b->k);
        project(xin, p->Lk, a->d_model, a->w_v, a->b_v, io->ldv, b->v);
        if ((st = projected(b->q, (size_t)p->Lq * io->ldq, "w_q", err)) != PA_STATUS_OK ||
            (st = projected(b->k, (size_t)p->Lk * io->ldk, "w_k", err)) != PA_STATUS_OK ||
            (st = projected(b->v, (size_t)p->Lk * io->ldv, "w_v", err)) != PA_STATUS_OK)
            return st;
        io->Q = b->q;
        io->K = b->k;
        io->V = b->v;
    } else {
        io->Q = a->q;
        io->K = a->k;
        io->V = a->v;
        io->kp = a->k_pages;
        io->vp = a->v_pages;
        io->pt = a->page_tokens;
        io->kvt = a->kv_dtype;
    }

    if (p->xpos) {
        const pa_xpos *x = &p->scheme->xpos;
        int64_t centre;
        st = pa_xpos_centre(x, b->qpos, p->Lq, b->kpos, p->Lk, a->k_prerotated, &centre, err);
        if (st == PA_STATUS_OK)
            st = pa_xpos_cos_sin(x, p->D, b->qpos, p->Lq, centre, 1, b->cos_q, b->sin_q, NULL, err);
        if (st == PA_STATUS_OK && !a->k_prerotated)
            st =
                pa_xpos_cos_sin(x, p->D, b->kpos, p->Lk, centre, -1, b->cos_k, b->sin_k, NULL, err);
        if (st != PA_STATUS_OK)
            return st;
    } else if (p->rope2d && p->rope_heads > 1) {
        const pa_rope2d *r = &p->scheme->rope2d;
        st = pa_rope2d_cos_sin_mixed(r, p->D, p->H, p->q_pos2, p->Lq, b->cos_q, b->sin_q, err);
        if (st == PA_STATUS_OK && b->cos_k != b->cos_q)
            st = pa_rope2d_cos_sin_mixed(r, p->D, p->H, p->k_pos2, p->Lk, b->cos_k, b->sin_k, err);
        if (st != PA_STATUS_OK)
            return st;
    } else if (p->rope2d) {
        const pa_rope2d *r = &p->scheme->rope2d;
        st = pa_rope2d_cos_sin(r, p->D, p->q_pos2, p->Lq, b->cos_q, b->sin_q, err);
        if (st == PA_STATUS_OK && b->cos_k != b->cos_q)
            st = pa_rope2d_cos_sin(r, p->D, p->k_pos2, p->Lk, b->cos_k, b->sin_k, err);
        if (st != PA_STATUS_OK)
            return st;
    } else if (p->rope) {
        const pa_rope *r = &p->scheme->rope;
        int32_t maxpos = max_position(p, b);
        st =
            p->q_mrope != NULL
                ? pa_rope_cos_sin_mrope(r, p->D, p->q_mrope, p->Lq, maxpos, b->cos_q, b->sin_q, err)
                : pa_rope_cos_sin(r, p->D, b->qpos, p->Lq, maxpos, b->cos_q, b->sin_q, err);
        if (st == PA_STATUS_OK && b->cos_k != b->cos_q)
            st = p->k_mrope != NULL
                     ? pa_rope_cos_sin_mrope(r, p->D, p->k_mrope, p->Lk, maxpos, b->cos_k, b->sin_k,
                                             err)
                     : pa_rope_cos_sin(r, p->D, b->kpos, p->Lk, maxpos, b->cos_k, b->sin_k, err);
        if (st != PA_STATUS_OK)
            return st;
    }
    if (b->q_inv != NULL)
        inverse_rms(PA_DTYPE_F32, io->Q, p->Lq, io->ldq, a->q_norm_eps, b->q_inv);
    if (b->k_inv != NULL) /* k_norm: never paged */
        inverse_rms(io->kvt, io->K, p->Lk, io->ldk, a->k_norm_eps, b->k_inv);
    /* q and k as attention sees them: written on the way by the kernel when
     * it normalises or rotates them, copied here otherwise. */
    if (p->rope || p->q_norm || p->q_scale)
        io->q_rot = out->q_rot;
    else if (part == 0 && out->q_rot != NULL)
        memcpy(out->q_rot, io->Q, (size_t)p->Lq * io->ldq * sizeof(float));
    if ((p->rope && !a->k_prerotated) || p->k_norm)
        io->k_rot = out->k_rot;
    else if (part == 0 && out->k_rot != NULL)
        for (int32_t j = 0; j < p->Lk; j += pa__krun(io, j, p->Lk - j)) /* page by page */
            pa__widen(io->kvt, pa__krow_raw(io, j), (size_t)pa__krun(io, j, p->Lk - j) * io->ldk,
                      out->k_rot + (size_t)j * io->ldk);
    if (p->scheme->type == PA_SCHEME_ALIBI) {
        st = pa_alibi_slopes(&p->scheme->alibi, p->H, b->slopes, err);
        if (st == PA_STATUS_OK)
            st = alibi_span(p, b, err);
        if (st != PA_STATUS_OK)
            return st;
    }
    if (p->scheme->type == PA_SCHEME_KERPLE && (st = kerple_span(p, err)) != PA_STATUS_OK)
        return st;
    if (b->dist_bias != NULL)
        dist_table(p, b);
    if (p->scheme->type == PA_SCHEME_FIRE && (st = fire_tables(p, b, err)) != PA_STATUS_OK)
        return st;
    if (b->t5_bucket != NULL) {
        const pa_t5 *t = &p->scheme->t5;
        for (int32_t d = -t->max_distance; d <= t->max_distance; d++)
            b->t5_bucket[d + t->max_distance] =
                pa_t5_bucket(d, t->bidirectional, t->num_buckets, t->max_distance);
        if (b->t5_bias != NULL) {
            const size_t n = 2 * (size_t)t->max_distance + 1;
            for (int32_t h = 0; h < p->H; h++)
                for (size_t d = 0; d < n; d++)
                    b->t5_bias[(size_t)h * n + d] = t->table[(size_t)b->t5_bucket[d] * p->H + h];
        }
    }
    return PA_STATUS_OK;
}

static pa_status output_overflowed(pa_error *err)
{
    return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "v",
                    "the attention output overflows float32 (v's weighted sum passes "
                    "3.4e38 on the way): scale v down");
}

static pa_status overflowed(const pa__plan *p, pa_error *err)
{
    return pa__fail(err, PA_STATUS_OUT_OF_RANGE, p->layer ? "x" : "q",
                    "the attention logits overflow float32 (some scale * q.k is beyond "
                    "3.4e38 or not a number): scale the inputs down");
}

pa_status pa__run_part_one(const pa_attention *a, const pa_attention_out *out, int32_t part,
                           int32_t nparts, void *ws, size_t ws_size, pa_error *err)
{
    call c;
    const pa__plan *p = &c.p;
    pa_status st = check_call(a, out, part, nparts, ws, ws_size, err);
    if (st != PA_STATUS_OK)
        return st;
    st = prepare(&c, a, out, part, ws, ws_size, err);
    if (st != PA_STATUS_OK)
        return st;
    if (pa__decode_fits(p)) { /* by shape only: what is returned never changes the answer */
        /* Units are the query heads, as in the tiled kernel (one block each). */
        const int32_t h0 = (int32_t)((int64_t)p->H * part / nparts);
        const int32_t h1 = (int32_t)((int64_t)p->H * (part + 1) / nparts);
        int32_t j0, j1;
        pa__decode_keys(p, &c.b, &j0, &j1);
        pa__decode(p, &c.b, &c.io, h0, h1, j0, j1, 0, p->Lk, true, c.b.state);
        pa__decode_finish(p, &c.b, &c.io, h0, h1, c.b.state, 1);
    } else {
        const int64_t units = pa__prefill_units(p);
        pa__prefill(p, &c.b, &c.io, units * part / nparts, units * (part + 1) / nparts);
    }
    if (c.overflow)
        return overflowed(p, err);
    if (c.overflow_out)
        return output_overflowed(err);
    if (a->w_o != NULL) {
        project(c.b.attn, p->Lq, p->H * p->Dv, a->w_o, a->b_o, a->d_out, out->output);
        return projected(out->output, (size_t)p->Lq * a->d_out, "w_o", err);
    }
    return PA_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Split by keys                                                             */
/* ------------------------------------------------------------------------- */

/* Floats of one part's states: every query row's max, sum and output. */
static size_t part_floats(const pa__plan *p)
{
    return (size_t)p->H * (size_t)p->Lq * PA__STATE(p->Dv);
}

size_t pa_attention_partials_size(const pa_attention *a, const pa_attention_out *out,
                                  int32_t nparts)
{
    pa__plan p;
    if (a == NULL || out == NULL || nparts < 1 || a->x != NULL || a->cu_seqlens_q != NULL ||
        a->cu_seqlens_k != NULL || pa__check_one(a, NULL) != PA_STATUS_OK)
        return 0;
    pa__plan_init(&p, a);
    if (!pa__decode_fits(&p) || part_floats(&p) > SIZE_MAX / sizeof(float) / (size_t)nparts)
        return 0;
    return part_floats(&p) * (size_t)nparts * sizeof(float) + PA__WS_ALIGN; /* + alignment */
}

/* The states within a caller's partials buffer: from its first cache line. */
static float *partial_states(void *partials)
{
    const uintptr_t u = ((uintptr_t)partials + PA__WS_ALIGN - 1) & ~(uintptr_t)(PA__WS_ALIGN - 1);
    return (float *)u;
}

static pa_status run_keys(const pa_attention *a, const pa_attention_out *out, int32_t part,
                          int32_t nparts, void *partials, void *ws, size_t ws_size, pa_error *err)
{
    call c;
    const pa__plan *p = &c.p;
    int32_t j0, j1;
    int64_t n;
    pa_status st;
    if (a != NULL && (a->cu_seqlens_q != NULL || a->cu_seqlens_k != NULL))
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "cu_seqlens",
                        "packed sequences do not split by keys (pa_attention_partials_size is "
                        "0): use pa_attention_run_part");
    st = check_call(a, out, part, nparts, ws, ws_size, err);
    if (st != PA_STATUS_OK)
        return st;
    if (partials == NULL || pa_attention_partials_size(a, out, nparts) == 0)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "part",
                        "this call does not split by keys (pa_attention_partials_size is 0): "
                        "use pa_attention_run_part");
    st = prepare(&c, a, out, part, ws, ws_size, err);
    if (st != PA_STATUS_OK)
        return st;
    if (part != 0)
        c.io.q_rot = NULL; /* every part rotates q; part 0 returns it */
    pa__decode_keys(p, &c.b, &j0, &j1);
    n = j1 - j0;
    {
        /* The share of the visible keys; of the returned results, the
         * first part also owns the keys before them, the last those after. */
        const int32_t s0 = j0 + (int32_t)(n * part / nparts);
        const int32_t s1 = j0 + (int32_t)(n * (part + 1) / nparts);
        /* The sink is one key of its own: part 0 folds it in. */
        pa__decode(p, &c.b, &c.io, 0, p->H, s0, s1, part == 0 ? 0 : s0,
                   part == nparts - 1 ? p->Lk : s1, part == 0,
                   partial_states(partials) + part_floats(p) * (size_t)part);
    }
    return PA_STATUS_OK;
}

pa_status pa_attention_run_keys(const pa_attention *a, const pa_attention_out *out, int32_t part,
                                int32_t nparts, void *partials, void *ws, size_t ws_size,
                                pa_error *err)
{
    const unsigned fp = pa__fp_enter();
    const pa_status st = run_keys(a, out, part, nparts, partials, ws, ws_size, err);
    pa__fp_leave(fp);
    return st;
}

pa_status pa_attention_merge(const pa_attention *a, const pa_attention_out *out, int32_t nparts,
                             const void *partials, pa_error *err)
{
    pa__plan p;
    buffers b;
    head_io io;
    bool overflow = false, overflow_out = false;
    pa_status st;
    if (a != NULL && (a->cu_seqlens_q != NULL || a->cu_seqlens_k != NULL))
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "cu_seqlens",
                        "packed sequences do not split by keys: nothing to merge");
    if ((st = pa__check_one(a, err)) != PA_STATUS_OK)
        return st;
    if (out == NULL || out->output == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "output", "an output buffer is required");
    if (partials == NULL || nparts < 1 || pa_attention_partials_size(a, out, nparts) == 0)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "part",
                        "nparts=%d: this call does not split by keys", (int)nparts);
    pa__plan_init(&p, a);
    memset(&b, 0, sizeof b);
    memset(&io, 0, sizeof io);
    b.overflow = &overflow;
    b.overflow_out = &overflow_out;
    io.out = out->output;
    io.weights = out->weights;
    io.logits = out->logits;
    io.entropy = out->entropy;
    io.distance = out->distance;
    io.far_share = out->far_share;
    io.far = (float)out->far_distance;
    pa__decode_finish(&p, &b, &io, 0, p.H, partial_states((void *)(uintptr_t)partials), nparts);
    if (overflow)
        return overflowed(&p, err);
    return overflow_out ? output_overflowed(err) : PA_STATUS_OK;
}
