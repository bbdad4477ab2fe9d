/* analysis.c - the permutation test and the logit decomposition.
 *
 * Both are built on pa_attention_run with derived descriptors, so they
 * measure exactly what the attention kernel computes. (The RoPE offset and
 * similarity analyses live beside their schemes: rope_offset.c, similarity.c.)
 */
#include "attention_plan.h"
#include "softmax.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static size_t out_len(const pa__plan *p)
{
    if (p->layer && p->a->w_o != NULL)
        return (size_t)p->Lq * (size_t)p->a->d_out;
    return (size_t)p->Lq * (size_t)p->H * (size_t)p->Dv;
}

/* ------------------------------------------------------------------------- */
/* Permutation test                                                          */
/* ------------------------------------------------------------------------- */

typedef struct perm_bufs {
    float *x, *q, *k, *v; /* permuted inputs */
    float *out0, *out1;   /* f(x), f(Px) */
    unsigned char *seen;  /* [L] */
    void *inner;          /* attention workspace */
    size_t inner_size;
} perm_bufs;

static void perm_layout(const pa__plan *p, pa__ws *w, perm_bufs *b)
{
    const pa_attention *a = p->a;
    size_t L = (size_t)p->Lk;
    memset(b, 0, sizeof *b);
    if (p->layer) {
        b->x = pa__ws_take(w, L * (size_t)a->d_model, sizeof(float));
    } else {
        b->q = pa__ws_take(w, L * (size_t)p->H * (size_t)p->D, sizeof(float));
        b->k = pa__ws_take(w, L * (size_t)p->Hkv * (size_t)p->D, sizeof(float));
        b->v = pa__ws_take(w, L * (size_t)p->Hkv * (size_t)p->Dv, sizeof(float));
    }
    b->out0 = pa__ws_take(w, out_len(p), sizeof(float));
    b->out1 = pa__ws_take(w, out_len(p), sizeof(float));
    b->seen = pa__ws_take(w, L, 1);
    b->inner_size = pa_attention_workspace_size(a);
    b->inner = pa__ws_take(w, b->inner_size, 1);
}

/* The analyses take one sequence: a packed call is its sequences' calls. */
static pa_status packed_refused(pa_error *err)
{
    return pa__fail(err, PA_STATUS_UNSUPPORTED, "cu_seqlens",
                    "the analyses take one sequence: send each packed sequence as its own item");
}

size_t pa_permutation_workspace_size(const pa_attention *a)
{
    pa__plan p;
    pa__ws w;
    perm_bufs b;
    pa__plan_init(&p, a);
    pa__ws_init(&w, NULL, 0);
    perm_layout(&p, &w, &b);
    return pa__ws_size(&w);
}

static void permute_rows(const float *src, float *dst, const int32_t *perm, size_t L, size_t row)
{
    for (size_t i = 0; i < L; i++)
        memcpy(dst + i * row, src + (size_t)perm[i] * row, row * sizeof(float));
}

static pa_status check_workspace(const void *ws, size_t ws_size, size_t need, pa_error *err)
{
    if (need == 0)
        return pa__fail(err, PA_STATUS_TOO_LARGE, "", "the workspace size overflows");
    if (ws == NULL || ws_size < need)
        return pa__fail(err, PA_STATUS_WORKSPACE_TOO_SMALL, "",
                        "workspace of %zu bytes is smaller than the %zu bytes needed", ws_size,
                        need);
    return PA_STATUS_OK;
}

pa_status pa_analyze_permutation(const pa_attention *a, const int32_t *perm, void *ws,
                                 size_t ws_size, double *max_abs_diff, pa_error *err)
{
    pa__plan p;
    pa__ws w;
    perm_bufs b;
    pa_attention pa;
    pa_attention_out out;
    pa_status st;
    size_t L, row;
    double worst = 0.0;

    if ((st = pa_attention_check(a, err)) != PA_STATUS_OK)
        return st;
    if (a->k_pages != NULL)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "k_pages",
                        "the analyses read k and v whole: send them contiguous, not paged");
    if (a->kv_dtype != PA_DTYPE_F32)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "kv_dtype",
                        "kv_dtype=%s: the analyses read k and v as float32 (they permute and "
                        "project them); send them as float32",
                        pa_dtype_name(a->kv_dtype));
    if (a->cu_seqlens_q != NULL)
        return packed_refused(err);
    pa__plan_init(&p, a);
    if (p.Lq != p.Lk)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "q.shape[0]",
                        "the permutation test needs self-attention, but q has %d rows and k "
                        "has %d",
                        (int)p.Lq, (int)p.Lk);
    if (perm == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "permutation",
                        "a permutation is required");
    st = check_workspace(ws, ws_size, pa_permutation_workspace_size(a), err);
    if (st != PA_STATUS_OK)
        return st;
    L = (size_t)p.Lk;
    pa__ws_init_aligned(&w, ws, ws_size);
    perm_layout(&p, &w, &b);
    memset(b.seen, 0, L);
    for (size_t i = 0; i < L; i++) {
        char field[48];
        snprintf(field, sizeof field, "permutation[%zu]", i);
        if (perm[i] < 0 || (size_t)perm[i] >= L)
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, field,
                            "permutation[%zu]=%d is not a row index below %zu", i, (int)perm[i], L);
        if (b.seen[perm[i]])
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                            "permutation[%zu]=%d repeats an earlier entry", i, (int)perm[i]);
        b.seen[perm[i]] = 1;
    }

    memset(&out, 0, sizeof out);
    out.output = b.out0;
    if ((st = pa_attention_run(a, &out, b.inner, b.inner_size, err)) != PA_STATUS_OK)
        return st;

    pa = *a;
    if (p.layer) {
        permute_rows(a->x, b.x, perm, L, (size_t)a->d_model);
        pa.x = b.x;
    } else {
        permute_rows(a->q, b.q, perm, L, (size_t)p.H * p.D);
        permute_rows(a->k, b.k, perm, L, (size_t)p.Hkv * p.D);
        permute_rows(a->v, b.v, perm, L, (size_t)p.Hkv * p.Dv);
        pa.q = b.q;
        pa.k = b.k;
        pa.v = b.v;
    }
    out.output = b.out1;
    if ((st = pa_attention_run(&pa, &out, b.inner, b.inner_size, err)) != PA_STATUS_OK)
        return st;

    row = out_len(&p) / L;
    for (size_t i = 0; i < L; i++) {
        const float *f_px = b.out1 + i * row, *pf_x = b.out0 + (size_t)perm[i] * row;
        for (size_t c = 0; c < row; c++) {
            double d = fabs((double)f_px[c] - (double)pf_x[c]);
            if (d > worst || isnan(d))
                worst = d;
        }
    }
    *max_abs_diff = worst;
    return PA_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Decomposition                                                             */
/* ------------------------------------------------------------------------- */

typedef struct dec_bufs {
    float *pe;                /* [L, d_model] encodings (absolute) */
    float *qe, *qp, *ke, *kp; /* projections of e and p (absolute) */
    float *vz;                /* [L, Hkv*Dv] zeros: values are not needed */
    float *scratch;           /* [H, L, L] for terms the caller did not ask for */
    float *out;               /* attention output, discarded */
    void *inner;
    size_t inner_size;
} dec_bufs;

/* The descriptor of the inner runs: same shapes and scale, no masks (a
 * sink changes weights, not logits). */
static void unmasked(const pa_attention *a, const pa__plan *p, pa_attention *d)
{
    *d = *a;
    d->causal = false;
    d->window = 0;
    d->key_length = -1;
    d->chunk_size = 0;
    d->mask = NULL;
    d->mask_heads = 0;
    d->scale_set = true;
    d->scale = p->scale;
}

/* q/k/v-mode descriptor over projected tensors with scheme none. */
static void content_desc(const pa__plan *p, const pa_scheme *none, const float *q, const float *k,
                         const float *v, pa_attention *d)
{
    pa_attention_init(d, none);
    d->num_heads = p->H;
    d->num_kv_heads = p->Hkv;
    d->head_dim = p->D;
    d->v_head_dim = p->Dv;
    d->q_len = p->Lq;
    d->k_len = p->Lk;
    d->q = q;
    d->k = k;
    d->v = v;
    d->scale_set = true;
    d->scale = p->scale;
}

static void dec_layout(const pa__plan *p, pa__ws *w, dec_bufs *b)
{
    const pa_attention *a = p->a;
    size_t L = (size_t)p->Lk;
    pa_scheme none;
    pa_attention d;
    memset(b, 0, sizeof *b);
    pa_scheme_init(&none, PA_SCHEME_NONE);
    if (p->absolute) {
        b->pe = pa__ws_take(w, L * (size_t)a->d_model, sizeof(float));
        b->qe = pa__ws_take(w, L * (size_t)p->H * p->D, sizeof(float));
        b->qp = pa__ws_take(w, L * (size_t)p->H * p->D, sizeof(float));
        b->ke = pa__ws_take(w, L * (size_t)p->Hkv * p->D, sizeof(float));
        b->kp = pa__ws_take(w, L * (size_t)p->Hkv * p->D, sizeof(float));
        b->vz = pa__ws_take(w, L * (size_t)p->Hkv * p->Dv, sizeof(float));
        b->scratch = pa__ws_take(w, (size_t)p->H * L * L, sizeof(float));
        b->out = pa__ws_take(w, (size_t)p->Lq * p->H * p->Dv, sizeof(float));
        content_desc(p, &none, b->qe, b->ke, b->vz, &d);
        b->inner_size = pa_attention_workspace_size(&d);
    } else {
        size_t s1, s2;
        b->out = pa__ws_take(w, out_len(p), sizeof(float));
        unmasked(a, p, &d);
        s1 = pa_attention_workspace_size(&d);
        d.scheme = &none;
        s2 = pa_attention_workspace_size(&d);
        b->inner_size = s1 > s2 ? s1 : s2;
    }
    b->inner = pa__ws_take(w, b->inner_size, 1);
}

size_t pa_decompose_workspace_size(const pa_attention *a)
{
    pa__plan p;
    pa__ws w;
    dec_bufs b;
    pa__plan_init(&p, a);
    pa__ws_init(&w, NULL, 0);
    dec_layout(&p, &w, &b);
    return pa__ws_size(&w);
}

static pa_status logits_of(const pa_attention *d, float *logits, const dec_bufs *b, pa_error *err)
{
    pa_attention_out out;
    memset(&out, 0, sizeof out);
    out.output = b->out;
    out.logits = logits;
    return pa_attention_run(d, &out, b->inner, b->inner_size, err);
}

static void add_into(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* Each term is a checked run's logits; their sum (absolute schemes) or
 * difference (relative ones) can still leave float32. */
static pa_status position_finite(const float *position, size_t n, pa_error *err)
{
    if (pa__row_finite(position, n))
        return PA_STATUS_OK;
    return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "position",
                    "the position term of the logits overflows float32 (its parts are finite, "
                    "their sum is not): scale the inputs down");
}

static pa_status decompose_absolute(const pa__plan *p, const pa_decomposition *o, const dec_bufs *b,
                                    pa_error *err)
{
    const pa_attention *a = p->a;
    const int32_t L = p->Lk, dm = a->d_model;
    const size_t n = (size_t)p->H * L * L;
    const int32_t *pos = p->k_positions;
    pa_scheme none;
    pa_attention d;
    pa_status st;
    int32_t *defpos = NULL;

    /* Positions for the encodings: given, or 0..L-1 written into scratch. */
    if (pos == NULL) {
        defpos = (int32_t *)b->scratch;
        for (int32_t i = 0; i < L; i++)
            defpos[i] = i;
        pos = defpos;
    }
    if (p->scheme->type == PA_SCHEME_SINUSOIDAL)
        st = pa_sinusoidal_encode(&p->scheme->sinusoidal, pos, L, dm, b->pe, err);
    else
        st = pa_learned_encode(&p->scheme->learned, pos, L, b->pe, err);
    if (st != PA_STATUS_OK)
        return st;

#define PROJECT(src, w, n_out, dst)                                                                \
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, (n_out), dm, 1.0f, (src), dm, (w),   \
                (n_out), 0.0f, (dst), (n_out))
    PROJECT(a->x, a->w_q, p->H * p->D, b->qe);
    PROJECT(b->pe, a->w_q, p->H * p->D, b->qp);
    PROJECT(a->x, a->w_k, p->Hkv * p->D, b->ke);
    PROJECT(b->pe, a->w_k, p->Hkv * p->D, b->kp);
#undef PROJECT
    memset(b->vz, 0, (size_t)L * p->Hkv * p->Dv * sizeof(float));

    pa_scheme_init(&none, PA_SCHEME_NONE);
    content_desc(p, &none, b->qe, b->ke, b->vz, &d);
    if ((st = logits_of(&d, o->content, b, err)) != PA_STATUS_OK)
        return st;
    if (o->content_content != NULL)
        memcpy(o->content_content, o->content, n * sizeof(float));

    /* position = cp + pc + pp, each also returned when asked for. */
    d.q = b->qe;
    d.k = b->kp;
    if ((st = logits_of(&d, o->position, b, err)) != PA_STATUS_OK)
        return st;
    if (o->content_position != NULL)
        memcpy(o->content_position, o->position, n * sizeof(float));
    d.q = b->qp;
    d.k = b->ke;
    if ((st = logits_of(&d, b->scratch, b, err)) != PA_STATUS_OK)
        return st;
    if (o->position_content != NULL)
        memcpy(o->position_content, b->scratch, n * sizeof(float));
    add_into(o->position, b->scratch, n);
    d.k = b->kp;
    if ((st = logits_of(&d, b->scratch, b, err)) != PA_STATUS_OK)
        return st;
    if (o->position_position != NULL)
        memcpy(o->position_position, b->scratch, n * sizeof(float));
    add_into(o->position, b->scratch, n);
    return position_finite(o->position, n, err);
}

pa_status pa_analyze_decompose(const pa_attention *a, const pa_decomposition *o, void *ws,
                               size_t ws_size, pa_error *err)
{
    pa__plan p;
    pa__ws w;
    dec_bufs b;
    pa_status st;

    if ((st = pa_attention_check(a, err)) != PA_STATUS_OK)
        return st;
    if (a->k_pages != NULL)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "k_pages",
                        "the analyses read k and v whole: send them contiguous, not paged");
    if (a->kv_dtype != PA_DTYPE_F32)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "kv_dtype",
                        "kv_dtype=%s: the analyses read k and v as float32 (they permute and "
                        "project them); send them as float32",
                        pa_dtype_name(a->kv_dtype));
    if (a->cu_seqlens_q != NULL)
        return packed_refused(err);
    if (o == NULL || o->content == NULL || o->position == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "content",
                        "content and position buffers are required");
    st = check_workspace(ws, ws_size, pa_decompose_workspace_size(a), err);
    if (st != PA_STATUS_OK)
        return st;
    pa__plan_init(&p, a);
    pa__ws_init_aligned(&w, ws, ws_size);
    dec_layout(&p, &w, &b);

    if (p.scheme->type == PA_SCHEME_COPE)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "scheme.type",
                        "the content/position split is of logits before masks, and cope's "
                        "positions count the keys the masks leave visible: run the attention "
                        "and return its logits instead");
    if (a->k_prerotated)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "k_prerotated",
                        "the content/position split needs the keys before rotation; with "
                        "k_prerotated they are not here");
    if (a->scheme->type == PA_SCHEME_FIRE)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "scheme.type",
                        "the content/position split computes the logits without masks, over "
                        "every pair; fire is defined for keys at or before their query only "
                        "(it requires causal), so it has no such split here");
    if (p.absolute) {
        /* cc + cp + pc + pp = logits holds for (e + p) Wq Wk^T (e + p)^T
         * only: what is not bilinear in e and p has no such split. */
        const char *what = a->softcap > 0.0f                ? "softcap"
                           : a->bias != NULL                ? "bias"
                           : p.q_norm                       ? "q_norm"
                           : p.k_norm                       ? "k_norm"
                           : a->b_q != NULL                 ? "b_q"
                           : a->b_k != NULL                 ? "b_k"
                           : a->temperature_floor_scale > 0 ? "attn_temperature_tuning"
                           : a->logn_train_length > 0       ? "logn_scaling"
                                                            : NULL;
        if (what != NULL)
            return pa__fail(err, PA_STATUS_UNSUPPORTED, what,
                            "the content/position split of scheme '%s' is bilinear in e and p; "
                            "with %s the logits are not a sum of those four terms",
                            pa_scheme_type_name(p.scheme->type), what);
    }
    if (p.absolute)
        return decompose_absolute(&p, o, &b, err);

    {
        const size_t n = (size_t)p.H * p.Lq * p.Lk;
        pa_scheme none;
        pa_attention d;
        pa_scheme_init(&none, PA_SCHEME_NONE);
        unmasked(a, &p, &d);
        if ((st = logits_of(&d, o->position, &b, err)) != PA_STATUS_OK)
            return st;
        /* Content: the logits without the scheme, the caller's bias and
         * the query scalings by position (softcapped as the model caps
         * them); position: the rest. */
        d.scheme = &none;
        d.bias = NULL;
        d.bias_heads = 0;
        d.temperature_floor_scale = d.temperature_attn_scale = 0.0;
        d.logn_train_length = 0;
        if ((st = logits_of(&d, o->content, &b, err)) != PA_STATUS_OK)
            return st;
        for (size_t i = 0; i < n; i++)
            o->position[i] -= o->content[i];
        return position_finite(o->position, n, err);
    }
}
