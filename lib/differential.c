/* differential.c - differential attention (posattn_diff.h).
 *
 * A_h V_h = softmax(q_a k_a) V_h - lambda softmax(q_b k_b) V_h is linear in
 * the two maps, so it is two ordinary attention calls of H heads that share
 * V_h: the a heads of q (with their key heads) and the b heads, each
 * gathered into a contiguous [L, H, D] copy, against V [Lk, H, 2D] built
 * per output head as the peer's repeat_kv (and, for DiffLlama's halves, its
 * concatenation) builds it. The outputs are combined and normalised here;
 * the kernels, masks, positions and schemes are pa_attention_run's.
 */
#include "posattn_diff.h"

#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void pa_diff_init(pa_differential *d)
{
    memset(d, 0, sizeof *d);
    d->pairs = PA_DIFF_PAIRS_INTERLEAVED;
    d->subln = true;
    d->subln_eps = 1e-5;
}

double pa_diff_lambda_init(int32_t depth)
{
    return 0.8 - 0.6 * exp(-0.3 * depth);
}

static double dot(const float *a, const float *b, int32_t n)
{
    double s = 0.0;
    for (int32_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

double pa_diff_lambda(const pa_differential *d, int32_t head_dim)
{
    if (d->lambda_q1 == NULL)
        return d->lambda;
    return exp(dot(d->lambda_q1, d->lambda_k1, head_dim)) -
           exp(dot(d->lambda_q2, d->lambda_k2, head_dim)) + d->lambda_init;
}

/* The shapes of a differential call: 2H query heads, Hk key heads, n query
 * heads per key head; v's heads and width by the layout. */
typedef struct diff_dims {
    int32_t H, Hk, n, D, Lq, Lk, Hv, Dv;
} diff_dims;

static void dims_of(const pa_attention *a, const pa_differential *d, diff_dims *m)
{
    m->H = a->num_heads / 2;
    m->Hk = a->num_kv_heads ? a->num_kv_heads : a->num_heads;
    m->n = m->Hk > 0 ? a->num_heads / m->Hk : 1;
    m->D = a->head_dim;
    m->Lq = pa_attention_q_len(a);
    m->Lk = pa_attention_k_len(a);
    m->Hv = d->pairs == PA_DIFF_PAIRS_INTERLEAVED ? m->Hk / 2 : m->Hk;
    m->Dv = d->pairs == PA_DIFF_PAIRS_INTERLEAVED ? 2 * m->D : m->D;
}

/* One of the two calls: H heads of D against V [Lk, H, 2D]. */
static void half_desc(const pa_attention *a, const diff_dims *m, const float *q, const float *k,
                      const float *v, pa_attention *o)
{
    *o = *a;
    o->num_heads = o->num_kv_heads = m->H;
    o->v_head_dim = 2 * m->D;
    o->q = q;
    o->k = k;
    o->v = v;
}

static bool finite_all(const float *x, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

pa_status pa_diff_check(const pa_attention *a, const pa_differential *d, pa_error *err)
{
    diff_dims m;
    pa_status st;
    pa_attention half;
    pa_scheme_type t;
    if (a == NULL || d == NULL || a->scheme == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "differential",
                        "the descriptor, its scheme and the differential options are required");
    if (a->x != NULL)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "x",
                        "differential attention takes q, k, v (layer mode is not supported)");
    if (a->kv_dtype != PA_DTYPE_F32)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "kv_dtype",
                        "kv_dtype=%s with differential attention: it splits k and v into its "
                        "two calls' float32 halves; send them as float32",
                        pa_dtype_name(a->kv_dtype));
    if (a->compute_dtype != PA_DTYPE_F32)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "compute_dtype",
                        "compute_dtype=%s with differential attention: it computes in float32 "
                        "(leave compute_dtype out)",
                        pa_dtype_name(a->compute_dtype));
    if (d->pairs != PA_DIFF_PAIRS_INTERLEAVED && d->pairs != PA_DIFF_PAIRS_HALVES)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "differential.pairs",
                        "differential.pairs=%d is not interleaved or halves", (int)d->pairs);
    dims_of(a, d, &m);
    if (a->num_heads < 2 || a->num_heads % 2 != 0)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "num_heads",
                        "differential attention pairs its query heads: num_heads=%d (q's heads) "
                        "must be even",
                        (int)a->num_heads);
    if (m.Hk < 1 || a->num_heads % m.Hk != 0)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "num_kv_heads",
                        "num_kv_heads=%d must divide num_heads=%d", (int)m.Hk, (int)a->num_heads);
    if (d->pairs == PA_DIFF_PAIRS_INTERLEAVED && m.Hk % 2 != 0)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "num_kv_heads",
                        "with pairs interleaved k has 2 Hkv heads and v Hkv heads of 2D: "
                        "num_kv_heads=%d (k's heads) must be even",
                        (int)m.Hk);
    if (a->v_head_dim != 0 && a->v_head_dim != m.Dv)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "v_head_dim",
                        "v_head_dim=%d: with pairs %s v's heads are %d wide", (int)a->v_head_dim,
                        d->pairs == PA_DIFF_PAIRS_INTERLEAVED ? "interleaved" : "halves",
                        (int)m.Dv);
    t = a->scheme->type;
    if (t != PA_SCHEME_NONE && t != PA_SCHEME_ROPE && t != PA_SCHEME_XPOS && t != PA_SCHEME_ROPE2D)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "scheme.type",
                        "differential attention with scheme '%s': its per-head parameters "
                        "would have to follow the head pairing; none, rope, xpos and rope2d "
                        "apply to every head alike",
                        pa_scheme_type_name(t));
    {
        const char *what = a->sinks != NULL                            ? "sinks"
                           : a->mask != NULL && a->mask_heads > 1      ? "mask"
                           : a->bias != NULL && a->bias_heads > 1      ? "bias"
                           : a->cu_seqlens_q != NULL                   ? "cu_seqlens"
                           : a->q_norm != NULL || a->q_norm_unweighted ? "q_norm"
                           : a->k_norm != NULL || a->k_norm_unweighted ? "k_norm"
                                                                       : NULL;
        if (what != NULL)
            return pa__fail(err, PA_STATUS_UNSUPPORTED, what,
                            "%s is not supported with differential attention (a mask or bias "
                            "may have one plane, shared by every head)",
                            what);
    }
    if ((d->lambda_q1 == NULL) != (d->lambda_k1 == NULL) ||
        (d->lambda_q1 == NULL) != (d->lambda_q2 == NULL) ||
        (d->lambda_q1 == NULL) != (d->lambda_k2 == NULL))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "differential.lambda_q1",
                        "differential.lambda_q1, lambda_k1, lambda_q2 and lambda_k2 go "
                        "together: all four [head_dim] or none (then lambda)");
    if (d->lambda_q1 != NULL) {
        const float *const v[4] = {d->lambda_q1, d->lambda_k1, d->lambda_q2, d->lambda_k2};
        static const char *const names[4] = {"differential.lambda_q1", "differential.lambda_k1",
                                             "differential.lambda_q2", "differential.lambda_k2"};
        for (int i = 0; i < 4; i++)
            if (!finite_all(v[i], m.D))
                return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, names[i],
                                "%s holds a value that is not finite", names[i]);
    }
    if (!isfinite(d->lambda_init) || (d->subln && d->lambda_init >= 1.0))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "differential.lambda_init",
                        "differential.lambda_init=%g must be finite (and below 1 with subln, "
                        "whose output is scaled by 1 - lambda_init)",
                        d->lambda_init);
    if (!isfinite(pa_diff_lambda(d, m.D)))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE,
                        d->lambda_q1 != NULL ? "differential.lambda_q1" : "differential.lambda",
                        "lambda=%g is not finite", pa_diff_lambda(d, m.D));
    if (d->subln && (!isfinite(d->subln_eps) || !(d->subln_eps > 0.0)))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "differential.subln_eps",
                        "differential.subln_eps=%g must be finite and > 0", d->subln_eps);
    if (d->subln && d->subln_weight != NULL && !finite_all(d->subln_weight, 2 * m.D))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "differential.subln_weight",
                        "differential.subln_weight holds a value that is not finite");
    if (a->q == NULL || a->k == NULL || a->v == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, a->q == NULL ? "q" : "k",
                        "q, k and v are required");
    /* The rest (lengths, positions, masks, the scheme's own parameters) as
     * one of the two calls sees it. */
    half_desc(a, &m, a->q, a->k, a->v, &half);
    st = pa_attention_check(&half, err);
    return st;
}

/* Workspace: q_a, q_b [Lq, H, D], k_a, k_b [Lk, H, D], V [Lk, H, 2D], two
 * outputs [Lq, H, 2D], the weights of the b map [H, Lq, Lk] when asked,
 * then the calls' own workspace. */
typedef struct diff_bufs {
    float *qa, *qb, *ka, *kb, *v, *oa, *ob, *wb;
    void *ws;
    size_t ws_size;
} diff_bufs;

static void diff_layout(const pa_attention *a, const diff_dims *m, bool weights, pa__ws *w,
                        diff_bufs *b)
{
    pa_attention half;
    const size_t qn = (size_t)m->Lq * m->H * m->D, kn = (size_t)m->Lk * m->H * m->D;
    const size_t on = (size_t)m->Lq * m->H * 2 * m->D;
    b->qa = pa__ws_take(w, qn, sizeof(float));
    b->qb = pa__ws_take(w, qn, sizeof(float));
    b->ka = pa__ws_take(w, kn, sizeof(float));
    b->kb = pa__ws_take(w, kn, sizeof(float));
    b->v = pa__ws_take(w, (size_t)m->Lk * m->H * 2 * m->D, sizeof(float));
    b->oa = pa__ws_take(w, on, sizeof(float));
    b->ob = pa__ws_take(w, on, sizeof(float));
    b->wb = weights ? pa__ws_take(w, (size_t)m->H * m->Lq * m->Lk, sizeof(float)) : NULL;
    half_desc(a, m, a->q, a->k, a->v, &half);
    b->ws_size = pa_attention_workspace_size(&half);
    b->ws = pa__ws_take(w, b->ws_size, 1);
}

size_t pa_diff_workspace_size(const pa_attention *a, const pa_differential *d)
{
    diff_dims m;
    diff_bufs b;
    pa__ws w;
    dims_of(a, d, &m);
    pa__ws_init(&w, NULL, 0);
    diff_layout(a, &m, true, &w, &b);
    return pa__ws_size(&w);
}

/* The query heads a (which 0) or b (1) of output head h. */
static int32_t pair_head(const pa_differential *d, const diff_dims *m, int32_t h, int which)
{
    return d->pairs == PA_DIFF_PAIRS_INTERLEAVED ? 2 * h + which : h + which * m->H;
}

static void gather(const pa_attention *a, const pa_differential *d, const diff_dims *m,
                   const diff_bufs *b)
{
    const int32_t D = m->D, H2 = 2 * m->H;
    for (int32_t i = 0; i < m->Lq; i++)
        for (int32_t h = 0; h < m->H; h++) {
            const float *row = a->q + (size_t)i * H2 * D;
            memcpy(b->qa + ((size_t)i * m->H + h) * D, row + (size_t)pair_head(d, m, h, 0) * D,
                   (size_t)D * sizeof(float));
            memcpy(b->qb + ((size_t)i * m->H + h) * D, row + (size_t)pair_head(d, m, h, 1) * D,
                   (size_t)D * sizeof(float));
        }
    for (int32_t j = 0; j < m->Lk; j++)
        for (int32_t h = 0; h < m->H; h++) {
            const float *krow = a->k + (size_t)j * m->Hk * D;
            const float *vrow = a->v + (size_t)j * m->Hv * m->Dv;
            const int32_t ga = pair_head(d, m, h, 0) / m->n, gb = pair_head(d, m, h, 1) / m->n;
            float *vo = b->v + ((size_t)j * m->H + h) * 2 * D;
            memcpy(b->ka + ((size_t)j * m->H + h) * D, krow + (size_t)ga * D,
                   (size_t)D * sizeof(float));
            memcpy(b->kb + ((size_t)j * m->H + h) * D, krow + (size_t)gb * D,
                   (size_t)D * sizeof(float));
            if (d->pairs == PA_DIFF_PAIRS_INTERLEAVED) { /* v[h / n], 2D wide */
                memcpy(vo, vrow + (size_t)(h / m->n) * 2 * D, 2 * (size_t)D * sizeof(float));
            } else { /* cat(v[a / n], v[b / n]) */
                memcpy(vo, vrow + (size_t)ga * D, (size_t)D * sizeof(float));
                memcpy(vo + D, vrow + (size_t)gb * D, (size_t)D * sizeof(float));
            }
        }
}

pa_status pa_diff_run(const pa_attention *a, const pa_differential *d, float *output,
                      float *weights, void *ws, size_t ws_size, pa_error *err)
{
    diff_dims m;
    diff_bufs b;
    pa__ws w;
    pa_attention half;
    pa_attention_out out;
    pa_status st;
    double lambda, post;
    if ((st = pa_diff_check(a, d, err)) != PA_STATUS_OK)
        return st;
    if (output == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "output", "output must not be NULL");
    dims_of(a, d, &m);
    if (ws == NULL || ws_size < pa_diff_workspace_size(a, d))
        return pa__fail(err, PA_STATUS_WORKSPACE_TOO_SMALL, "ws",
                        "workspace of %zu bytes; pa_diff_workspace_size gives %zu", ws_size,
                        pa_diff_workspace_size(a, d));
    pa__ws_init_aligned(&w, ws, ws_size);
    diff_layout(a, &m, weights != NULL, &w, &b);
    if (b.ws == NULL)
        return pa__fail(err, PA_STATUS_WORKSPACE_TOO_SMALL, "ws",
                        "workspace of %zu bytes is too small", ws_size);
    gather(a, d, &m, &b);

    memset(&out, 0, sizeof out);
    half_desc(a, &m, b.qa, b.ka, b.v, &half);
    out.output = b.oa;
    out.weights = weights;
    if ((st = pa_attention_run(&half, &out, b.ws, b.ws_size, err)) != PA_STATUS_OK)
        return st;
    half_desc(a, &m, b.qb, b.kb, b.v, &half);
    out.output = b.ob;
    out.weights = b.wb;
    if ((st = pa_attention_run(&half, &out, b.ws, b.ws_size, err)) != PA_STATUS_OK)
        return st;

    lambda = pa_diff_lambda(d, m.D);
    post = d->subln ? 1.0 - d->lambda_init : 1.0;
    for (size_t r = 0; r < (size_t)m.Lq * m.H; r++) {
        const float *x1 = b.oa + r * 2 * m.D, *x2 = b.ob + r * 2 * m.D;
        float *o = output + r * 2 * m.D;
        double ss = 0.0, f;
        for (int32_t c = 0; c < 2 * m.D; c++) {
            const double x = (double)x1[c] - lambda * x2[c];
            ss += x * x;
        }
        f = d->subln ? post / sqrt(ss / (2 * m.D) + d->subln_eps) : 1.0;
        for (int32_t c = 0; c < 2 * m.D; c++) {
            const double wgt = d->subln && d->subln_weight != NULL ? d->subln_weight[c] : 1.0;
            o[c] = (float)(((double)x1[c] - lambda * x2[c]) * f * wgt);
            if (!isfinite(o[c]))
                return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "q",
                                "the differential output overflows float32 (lambda=%g)", lambda);
        }
    }
    if (weights != NULL)
        for (size_t e = 0; e < (size_t)m.H * m.Lq * m.Lk; e++)
            weights[e] = (float)((double)weights[e] - lambda * b.wb[e]);
    return PA_STATUS_OK;
}
