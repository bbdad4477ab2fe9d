/* mla.c - multi-head latent attention with decoupled RoPE (posattn_mla.h).
 *
 * The logit of head h is s (q_nope . k_nope + rot(q_rope) . rot(k_rope)).
 * The second term is the same key for every head, so for a block of query
 * rows it is one matrix product, [H * rows, D_rope] x [D_rope, Lk], which
 * reads k_rope once; it enters pa_attention_run as the additive bias of a
 * call over the first term alone (scheme none: the scheme's rotation is
 * done here, on the D_rope dims). In the expanded form that call is
 * multi-head over k_nope and v; in the absorbed form the queries are first
 * taken into the latent space (q_nope w_uk[h]) and the call is multi-query
 * over c_kv, as keys and as values, whose per-head output w_uv[h] takes
 * back to Dv. Masks, positions, sinks and the caller's bias are the inner
 * call's, so they mean what posattn.h says.
 */
#include "posattn_mla.h"

#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The shapes of a call. */
typedef struct mla_dims {
    int32_t H, Dn, Dr, Dv, R, Lq, Lk;
    int32_t rows; /* query rows per block */
} mla_dims;

static void dims_of(const pa_attention *a, const pa_mla *m, mla_dims *d)
{
    size_t per_row;
    d->H = a->num_heads;
    d->Dr = m->rope_dim;
    d->Dn = a->head_dim - m->rope_dim;
    d->Dv = a->v_head_dim != 0 ? a->v_head_dim : a->head_dim;
    d->R = m->absorbed ? m->kv_lora_rank : 0;
    d->Lq = a->q_len;
    d->Lk = a->k_len;
    /* Blocks of query rows whose rotated-part logits fit PA_MLA_LOGITS_MAX;
     * past 64 rows, whole tiles of the tiled kernel. */
    per_row = (size_t)(d->H > 0 ? d->H : 1) * (size_t)(d->Lk > 0 ? d->Lk : 1);
    if ((size_t)d->Lq * per_row <= PA_MLA_LOGITS_MAX) {
        d->rows = d->Lq;
    } else {
        size_t r = PA_MLA_LOGITS_MAX / per_row;
        r = r >= 64 ? r & ~(size_t)63 : r;
        d->rows = r < 1 ? 1 : (int32_t)r;
    }
}

static bool rope_on(const pa_attention *a)
{
    return a->scheme->type == PA_SCHEME_ROPE;
}

/* HF yarn_get_mscale. */
static double yarn_mscale(double factor, double m)
{
    return factor <= 1.0 ? 1.0 : 0.1 * m * log(factor) + 1.0;
}

float pa_mla_default_scale(const pa_attention *a)
{
    double s = 1.0 / sqrt((double)a->head_dim);
    if (a->scheme != NULL && rope_on(a)) {
        const pa_rope *r = &a->scheme->rope;
        if (r->scaling == PA_ROPE_SCALING_YARN && r->mscale_all_dim != 0.0) {
            const double m = yarn_mscale(r->factor, r->mscale_all_dim);
            s *= m * m;
        }
    }
    return (float)s;
}

/* The inner call: the first term of one block of query rows [i0, i0 + n)
 * against the bias `rb` [H, n, Lk]. q and mask are the block's. */
static void inner_desc(const pa_attention *a, const pa_mla *m, const mla_dims *d,
                       const pa_scheme *none, int32_t n, const float *q, const int32_t *qpos,
                       const uint8_t *mask, const float *rb, float scale, pa_attention *o)
{
    *o = *a;
    o->scheme = none;
    o->q_len = n;
    o->q = q;
    o->q_positions = qpos;
    o->mask = mask;
    o->bias = rb;
    o->bias_heads = d->H;
    o->scale_set = true;
    o->scale = scale;
    o->k_prerotated = false;
    if (m->absorbed) {
        o->num_kv_heads = 1;
        o->head_dim = d->R;
        o->v_head_dim = d->R;
        o->k = m->c_kv;
        o->v = m->c_kv;
    } else {
        o->num_kv_heads = d->H;
        o->head_dim = d->Dn;
        o->v_head_dim = d->Dv;
    }
}

static bool finite_all(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

pa_status pa_mla_check(const pa_attention *a, const pa_mla *m, pa_error *err)
{
    mla_dims d;
    pa_scheme none;
    pa_attention in;
    pa_status st;
    if (a == NULL || m == NULL || a->scheme == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "mla",
                        "the descriptor, its scheme and the mla options are required");
    if (a->x != NULL)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "x",
                        "mla takes q, k_nope, k_rope and v (layer mode is not supported)");
    if (a->kv_dtype != PA_DTYPE_F32)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "kv_dtype",
                        "kv_dtype=%s with mla: mla reads k_nope, k_rope, v and c_kv as float32 "
                        "(and builds its own keys); send them as float32",
                        pa_dtype_name(a->kv_dtype));
    if (a->compute_dtype != PA_DTYPE_F32)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "compute_dtype",
                        "compute_dtype=%s with mla: mla computes in float32 (leave "
                        "compute_dtype out)",
                        pa_dtype_name(a->compute_dtype));
    if (a->scheme->type != PA_SCHEME_ROPE && a->scheme->type != PA_SCHEME_NONE)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "scheme.type",
                        "mla with scheme '%s': its decoupled keys are rotated by rope (or not "
                        "at all, with none)",
                        pa_scheme_type_name(a->scheme->type));
    {
        const char *what =
            a->softcap != 0.0f                                               ? "softcap"
            : a->q_norm != NULL || a->q_norm_unweighted                      ? "q_norm"
            : a->k_norm != NULL || a->k_norm_unweighted                      ? "k_norm"
            : a->temperature_floor_scale != 0.0 || a->logn_train_length != 0 ? "q_scale"
            : a->q_mrope_positions != NULL || a->k_mrope_positions != NULL   ? "mrope_positions"
            : a->q_positions_2d != NULL || a->k_positions_2d != NULL         ? "positions_2d"
            : a->cu_seqlens_q != NULL || a->cu_seqlens_k != NULL             ? "cu_seqlens"
                                                                             : NULL;
        if (what != NULL)
            return pa__fail(err, PA_STATUS_UNSUPPORTED, what,
                            "%s is not supported with mla (DeepSeek's attention has none of "
                            "softcap, q/k norms on heads, query scalings, M-RoPE or 2-D "
                            "positions, packed sequences)",
                            what);
    }
    if (rope_on(a)) {
        const pa_rope *r = &a->scheme->rope;
        if (r->mrope_section[0] != 0 || r->mrope_section[1] != 0 || r->mrope_section[2] != 0)
            return pa__fail(err, PA_STATUS_UNSUPPORTED, "scheme.mrope_section",
                            "mla rotates one position per token: M-RoPE sections are not "
                            "supported");
        if (r->rotary_dim != 0 && r->rotary_dim != m->rope_dim)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim",
                            "scheme.rotary_dim=%d: with mla the rope covers mla.rope_dim=%d "
                            "dims (leave rotary_dim 0)",
                            (int)r->rotary_dim, (int)m->rope_dim);
    }
    if (m->rope_dim < 2 || m->rope_dim % 2 != 0 || m->rope_dim >= a->head_dim)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "mla.rope_dim",
                        "mla.rope_dim=%d must be even, >= 2 and below head_dim=%d (q's heads "
                        "are D_nope + D_rope wide)",
                        (int)m->rope_dim, (int)a->head_dim);
    if (rope_on(a) && (st = pa_rope_check(&a->scheme->rope, m->rope_dim, err)) != PA_STATUS_OK)
        return st;
    if (a->num_heads < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "num_heads", "num_heads=%d must be >= 1",
                        (int)a->num_heads);
    if (a->num_kv_heads != 0 && a->num_kv_heads != a->num_heads)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "num_kv_heads",
                        "num_kv_heads=%d: mla's k_nope and v have a head per query head "
                        "(num_heads=%d); the shared head is k_rope",
                        (int)a->num_kv_heads, (int)a->num_heads);
    if (a->q == NULL || m->k_rope == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, a->q == NULL ? "q" : "k_rope",
                        "q and k_rope are required");
    if (m->absorbed) {
        if (a->k != NULL || a->v != NULL)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, a->k != NULL ? "k" : "v",
                            "the absorbed form takes c_kv, w_uk and w_uv instead of k and v");
        if (m->kv_lora_rank < 1)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "mla.kv_lora_rank",
                            "mla.kv_lora_rank=%d must be >= 1", (int)m->kv_lora_rank);
        if (m->c_kv == NULL || m->w_uk == NULL || m->w_uv == NULL)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT,
                            m->c_kv == NULL   ? "c_kv"
                            : m->w_uk == NULL ? "mla.w_uk"
                                              : "mla.w_uv",
                            "the absorbed form needs c_kv, mla.w_uk and mla.w_uv");
    } else if (m->c_kv != NULL || m->w_uk != NULL || m->w_uv != NULL) {
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, m->c_kv != NULL ? "c_kv" : "mla.w_uk",
                        "c_kv, w_uk and w_uv belong to the absorbed form (mla.absorbed)");
    }
    dims_of(a, m, &d);
    if (d.Lq < 1 || d.Lk < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, d.Lq < 1 ? "q_len" : "k_len",
                        "q_len=%d and k_len=%d must be >= 1", (int)d.Lq, (int)d.Lk);
    if (a->scale_set && !isfinite(a->scale))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scale", "scale must be finite");
    /* The rest (k_nope and v or c_kv, lengths, positions, masks, bias,
     * sinks) as the inner call sees it; the check reads shapes, not
     * values (an overflow is found after the fact, as pa_attention_run's). */
    pa_scheme_init(&none, PA_SCHEME_NONE);
    inner_desc(a, m, &d, &none, d.Lq, a->q, a->q_positions, a->mask, a->bias,
               pa_mla_default_scale(a), &in);
    in.bias_heads = a->bias_heads;
    return pa_attention_check(&in, err);
}

/* Workspace: resolved query positions; the rope tables and the rotated
 * k_rope (rope, unless prerotated); one block's rotated q_rope ([rows, H,
 * D_rope], then head-major), rotated-part logits [H, rows, Lk], the inner
 * call's queries (q_nope, or absorbed [rows, H, R]) and, absorbed, its
 * latent output; the block's mask planes when they are per head and the
 * rows come in blocks, the block's row statistics then; the inner call's
 * own workspace, for a whole block or the last one. */
typedef struct mla_bufs {
    int32_t *qpos, *kpos;
    float *cos_q, *sin_q, *cos_k, *sin_k, *kr;
    float *qg, *qr, *rb, *qin, *olat;
    uint8_t *mask;
    float *stats;
    void *ws;
    size_t ws_size;
} mla_bufs;

static bool rotates_k(const pa_attention *a)
{
    return rope_on(a) && !a->k_prerotated;
}

static size_t inner_ws(const pa_attention *a, const pa_mla *m, const mla_dims *d, int32_t n)
{
    pa_scheme none;
    pa_attention in;
    pa_scheme_init(&none, PA_SCHEME_NONE);
    inner_desc(a, m, d, &none, n, a->q, a->q_positions, a->mask, a->bias, 1.0f, &in);
    return pa_attention_workspace_size(&in);
}

static void mla_layout(const pa_attention *a, const pa_mla *m, const mla_dims *d, pa__ws *w,
                       mla_bufs *b)
{
    const size_t H = (size_t)d->H, n = (size_t)d->rows, Lk = (size_t)d->Lk;
    const size_t half = (size_t)d->Dr / 2;
    const int32_t last = d->Lq % d->rows;
    size_t s1, s2;
    memset(b, 0, sizeof *b);
    b->qpos = pa__ws_take(w, (size_t)d->Lq, sizeof(int32_t));
    b->kpos = pa__ws_take(w, Lk, sizeof(int32_t));
    if (rope_on(a)) {
        b->cos_q = pa__ws_take(w, (size_t)d->Lq * half, sizeof(float));
        b->sin_q = pa__ws_take(w, (size_t)d->Lq * half, sizeof(float));
        if (rotates_k(a)) {
            b->cos_k = pa__ws_take(w, Lk * half, sizeof(float));
            b->sin_k = pa__ws_take(w, Lk * half, sizeof(float));
            b->kr = pa__ws_take(w, Lk * (size_t)d->Dr, sizeof(float));
        }
    }
    b->qg = pa__ws_take(w, n * H * (size_t)d->Dr, sizeof(float));
    b->qr = pa__ws_take(w, n * H * (size_t)d->Dr, sizeof(float));
    b->rb = pa__ws_take(w, H * n * Lk, sizeof(float));
    b->qin = pa__ws_take(w, n * H * (size_t)(m->absorbed ? d->R : d->Dn), sizeof(float));
    if (m->absorbed)
        b->olat = pa__ws_take(w, n * H * (size_t)d->R, sizeof(float));
    if (d->rows < d->Lq) {
        if (a->mask != NULL && a->mask_heads > 1)
            b->mask = pa__ws_take(w, (size_t)a->mask_heads * n * Lk, sizeof(uint8_t));
        b->stats = pa__ws_take(w, 3 * H * n, sizeof(float));
    }
    s1 = inner_ws(a, m, d, d->rows);
    s2 = last > 0 ? inner_ws(a, m, d, last) : s1;
    if (s1 == 0 || s2 == 0)
        w->overflow = true;
    b->ws_size = s1 > s2 ? s1 : s2;
    b->ws = pa__ws_take(w, b->ws_size, 1);
}

size_t pa_mla_workspace_size(const pa_attention *a, const pa_mla *m)
{
    mla_dims d;
    mla_bufs b;
    pa__ws w;
    if (pa_mla_check(a, m, NULL) != PA_STATUS_OK)
        return 0;
    dims_of(a, m, &d);
    pa__ws_init(&w, NULL, 0);
    mla_layout(a, m, &d, &w, &b);
    return pa__ws_size(&w);
}

/* Positions and the rotated k_rope (or k_rope as it is). */
static pa_status prepare(const pa_attention *a, const pa_mla *m, const mla_dims *d,
                         const mla_bufs *b, const float **kr, pa_error *err)
{
    int32_t mx = INT32_MIN;
    pa_status st;
    for (int32_t i = 0; i < d->Lq; i++) {
        b->qpos[i] = a->q_positions != NULL ? a->q_positions[i] : d->Lk - d->Lq + i;
        mx = b->qpos[i] > mx ? b->qpos[i] : mx;
    }
    for (int32_t j = 0; j < d->Lk; j++) {
        b->kpos[j] = a->k_positions != NULL ? a->k_positions[j] : j;
        mx = b->kpos[j] > mx ? b->kpos[j] : mx;
    }
    *kr = m->k_rope;
    if (!rope_on(a))
        return PA_STATUS_OK;
    /* dynamic and longrope scale by the call's largest position, keys'
     * too (prerotated keys were rotated with theirs: the caller keeps the
     * scaling's choice the same, as for pa_attention). */
    st = pa_rope_cos_sin(&a->scheme->rope, d->Dr, b->qpos, d->Lq, mx, b->cos_q, b->sin_q, err);
    if (st == PA_STATUS_OK && rotates_k(a)) {
        st = pa_rope_cos_sin(&a->scheme->rope, d->Dr, b->kpos, d->Lk, mx, b->cos_k, b->sin_k, err);
        if (st == PA_STATUS_OK) {
            pa_rope_apply(&a->scheme->rope, d->Dr, d->Lk, 1, b->cos_k, b->sin_k, m->k_rope, b->kr);
            *kr = b->kr;
        }
    }
    return st;
}

/* The rotated-part logits of query rows [i0, i0 + n) into b->rb [H, n, Lk]
 * (scaled, plus the caller's bias); q_rot's rows when asked. */
static pa_status rope_logits(const pa_attention *a, const mla_dims *d, const mla_bufs *b,
                             const float *kr, float scale, int32_t i0, int32_t n, float *q_rot,
                             pa_error *err)
{
    const int32_t H = d->H, Dr = d->Dr, Dq = d->Dn + d->Dr;
    const size_t half = (size_t)Dr / 2, plane = (size_t)n * d->Lk;
    for (int32_t i = 0; i < n; i++)
        for (int32_t h = 0; h < H; h++)
            memcpy(b->qg + ((size_t)i * H + h) * Dr, a->q + ((size_t)(i0 + i) * H + h) * Dq + d->Dn,
                   (size_t)Dr * sizeof(float));
    if (rope_on(a))
        pa_rope_apply(&a->scheme->rope, Dr, n, H, b->cos_q + (size_t)i0 * half,
                      b->sin_q + (size_t)i0 * half, b->qg, b->qg);
    for (int32_t i = 0; i < n; i++)
        for (int32_t h = 0; h < H; h++) {
            const float *src = b->qg + ((size_t)i * H + h) * Dr;
            memcpy(b->qr + ((size_t)h * n + i) * Dr, src, (size_t)Dr * sizeof(float));
            if (q_rot != NULL) {
                float *dst = q_rot + ((size_t)(i0 + i) * H + h) * Dq;
                memcpy(dst, a->q + ((size_t)(i0 + i) * H + h) * Dq, (size_t)d->Dn * sizeof(float));
                memcpy(dst + d->Dn, src, (size_t)Dr * sizeof(float));
            }
        }
    /* Every head's rows against the shared keys: k_rope is read once. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, H * n, d->Lk, Dr, scale, b->qr, Dr, kr, Dr,
                0.0f, b->rb, d->Lk);
    if (!finite_all(b->rb, (size_t)H * plane))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "q",
                        "the rotated part's logits overflow float32 (scale * q_rope . k_rope "
                        "is beyond 3.4e38 or not a number): scale the inputs down");
    if (a->bias != NULL)
        for (int32_t h = 0; h < H; h++) {
            const float *src = a->bias + ((size_t)(a->bias_heads > 1 ? h : 0) * d->Lq + i0) * d->Lk;
            float *dst = b->rb + (size_t)h * plane;
            for (size_t e = 0; e < plane; e++)
                dst[e] += src[e];
        }
    return PA_STATUS_OK;
}

/* The inner call's queries of rows [i0, i0 + n): q_nope, or absorbed
 * q_nope w_uk[h] [R]. */
static pa_status inner_queries(const pa_attention *a, const pa_mla *m, const mla_dims *d,
                               const mla_bufs *b, int32_t i0, int32_t n, pa_error *err)
{
    const int32_t H = d->H, Dq = d->Dn + d->Dr;
    const float *q0 = a->q + (size_t)i0 * H * Dq;
    if (!m->absorbed) {
        for (int32_t i = 0; i < n; i++)
            for (int32_t h = 0; h < H; h++)
                memcpy(b->qin + ((size_t)i * H + h) * d->Dn, q0 + ((size_t)i * H + h) * Dq,
                       (size_t)d->Dn * sizeof(float));
        return PA_STATUS_OK;
    }
    for (int32_t h = 0; h < H; h++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d->R, d->Dn, 1.0f,
                    q0 + (size_t)h * Dq, H * Dq, m->w_uk + (size_t)h * d->Dn * d->R, d->R, 0.0f,
                    b->qin + (size_t)h * d->R, H * d->R);
    if (!finite_all(b->qin, (size_t)n * H * d->R))
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "mla.w_uk",
                        "the absorbed queries q_nope w_uk overflow float32: scale q or "
                        "mla.w_uk down");
    return PA_STATUS_OK;
}

/* The block's planes of a per-head mask. */
static const uint8_t *block_mask(const pa_attention *a, const mla_dims *d, const mla_bufs *b,
                                 int32_t i0, int32_t n)
{
    const size_t row = (size_t)d->Lk;
    if (a->mask == NULL)
        return NULL;
    if (a->mask_heads <= 1)
        return a->mask + (size_t)i0 * row;
    if (b->mask == NULL) /* one block: the whole mask */
        return a->mask;
    for (int32_t h = 0; h < a->mask_heads; h++)
        memcpy(b->mask + (size_t)h * n * row, a->mask + ((size_t)h * d->Lq + i0) * row,
               (size_t)n * row);
    return b->mask;
}

pa_status pa_mla_run(const pa_attention *a, const pa_mla *m, const pa_attention_out *out, void *ws,
                     size_t ws_size, pa_error *err)
{
    mla_dims d;
    mla_bufs b;
    pa__ws w;
    pa_scheme none;
    const float *kr;
    float scale;
    size_t need;
    pa_status st;
    if ((st = pa_mla_check(a, m, err)) != PA_STATUS_OK)
        return st;
    if (out == NULL || out->output == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "output", "an output buffer is required");
    dims_of(a, m, &d);
    if ((out->weights != NULL || out->logits != NULL) && d.rows < d.Lq)
        return pa__fail(err, PA_STATUS_TOO_LARGE, out->weights != NULL ? "weights" : "logits",
                        "mla returns weights and logits up to %zu values: H*Lq*Lk = %d*%d*%d "
                        "is more",
                        PA_MLA_LOGITS_MAX, (int)d.H, (int)d.Lq, (int)d.Lk);
    need = pa_mla_workspace_size(a, m);
    if (need == 0)
        return pa__fail(err, PA_STATUS_TOO_LARGE, "", "the workspace size overflows");
    if (ws == NULL || ws_size < need)
        return pa__fail(err, PA_STATUS_WORKSPACE_TOO_SMALL, "",
                        "workspace of %zu bytes is smaller than the %zu bytes needed", ws_size,
                        need);
    pa__ws_init_aligned(&w, ws, ws_size);
    mla_layout(a, m, &d, &w, &b);
    if ((st = prepare(a, m, &d, &b, &kr, err)) != PA_STATUS_OK)
        return st;
    if (out->k_rot != NULL)
        memcpy(out->k_rot, kr, (size_t)d.Lk * d.Dr * sizeof(float));
    scale = a->scale_set ? a->scale : pa_mla_default_scale(a);
    pa_scheme_init(&none, PA_SCHEME_NONE);

    for (int32_t i0 = 0; i0 < d.Lq; i0 += d.rows) {
        const int32_t n = pa__min_i32(d.rows, d.Lq - i0);
        const bool blocks = d.rows < d.Lq;
        float *st3 = b.stats;
        pa_attention in;
        pa_attention_out io;
        if ((st = rope_logits(a, &d, &b, kr, scale, i0, n, out->q_rot, err)) != PA_STATUS_OK ||
            (st = inner_queries(a, m, &d, &b, i0, n, err)) != PA_STATUS_OK)
            return st;
        inner_desc(a, m, &d, &none, n, b.qin, b.qpos + i0, block_mask(a, &d, &b, i0, n), b.rb,
                   scale, &in);
        memset(&io, 0, sizeof io);
        io.output = m->absorbed ? b.olat : out->output + (size_t)i0 * d.H * d.Dv;
        io.weights = out->weights;
        io.logits = out->logits;
        io.entropy = blocks && out->entropy != NULL ? st3 : out->entropy;
        io.distance = blocks && out->distance != NULL ? st3 + (size_t)d.H * n : out->distance;
        io.far_share =
            blocks && out->far_share != NULL ? st3 + 2 * (size_t)d.H * n : out->far_share;
        io.far_distance = out->far_distance;
        if ((st = pa_attention_run(&in, &io, b.ws, b.ws_size, err)) != PA_STATUS_OK)
            return st;
        if (blocks) {
            float *const dst[3] = {out->entropy, out->distance, out->far_share};
            for (int s = 0; s < 3; s++)
                for (int32_t h = 0; dst[s] != NULL && h < d.H; h++)
                    memcpy(dst[s] + (size_t)h * d.Lq + i0, st3 + ((size_t)s * d.H + h) * n,
                           (size_t)n * sizeof(float));
        }
        if (m->absorbed) {
            float *o = out->output + (size_t)i0 * d.H * d.Dv;
            for (int32_t h = 0; h < d.H; h++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, d.Dv, d.R, 1.0f,
                            b.olat + (size_t)h * d.R, d.H * d.R, m->w_uv + (size_t)h * d.Dv * d.R,
                            d.R, 0.0f, o + (size_t)h * d.Dv, d.H * d.Dv);
            if (!finite_all(o, (size_t)n * d.H * d.Dv))
                return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "mla.w_uv",
                                "the output w_uv o overflows float32: scale c_kv or mla.w_uv "
                                "down");
        }
    }
    return PA_STATUS_OK;
}
