/* ref_attention.c - double-precision reference attention for the tests. */
#include "ref_attention.h"
#include "ref_cope.h"
#include "ref_encodings.h"
#include "ref_rope.h"
#include "ref_rope2d.h"
#include "ref_xpos.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (p == NULL)
        abort();
    return p;
}

static void stats_of(const pa_attention *a, int far_distance, double *entropy, double *distance,
                     double *far);

void ref_attention_stats(const pa_attention *a, double *entropy, double *distance)
{
    stats_of(a, -1, entropy, distance, NULL);
}

void ref_attention_far_share(const pa_attention *a, int far_distance, double *far)
{
    stats_of(a, far_distance, NULL, NULL, far);
}

static void stats_of(const pa_attention *a, int far_distance, double *entropy, double *distance,
                     double *far)
{
    int H = a->num_heads, layer = a->x != NULL;
    int Lq = layer ? a->seq_len : a->q_len, Lk = layer ? a->seq_len : a->k_len;
    double *w = xcalloc((size_t)H * Lq * Lk, sizeof *w);
    const int32_t *qp = a->q_positions, *kp = a->k_positions;
    if (layer) {
        if (!qp)
            qp = kp;
        if (!kp)
            kp = qp;
    }
    ref_attention(a, NULL, w, NULL, NULL, NULL);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Lq; i++) {
            double e = 0.0, d = 0.0, f = 0.0;
            long qi = qp ? qp[i] : Lk - Lq + i;
            for (int j = 0; j < Lk; j++) {
                double x = w[((size_t)h * Lq + i) * Lk + j];
                long kj = kp ? kp[j] : j;
                if (x > 0.0) {
                    e -= x * log(x);
                    d += x * fabs((double)(qi - kj));
                    if (labs(qi - kj) > far_distance)
                        f += x;
                }
            }
            if (entropy)
                entropy[(size_t)h * Lq + i] = e;
            if (distance)
                distance[(size_t)h * Lq + i] = d;
            if (far)
                far[(size_t)h * Lq + i] = f;
        }
    free(w);
}

int ref_attention_out_len(const pa_attention *a)
{
    int H = a->num_heads, Dv = a->v_head_dim ? a->v_head_dim : a->head_dim;
    int L = a->x ? a->seq_len : a->q_len;
    return a->x && a->w_o ? L * a->d_out : L * H * Dv;
}

/* Whether query i (position qp) of head h may see key j (position kp): every
 * mask the descriptor sets, by its definition. */
static int visible(const pa_attention *a, int h, int i, int j, long qp, long kp, int key_len,
                   int Lq, int Lk)
{
    if (j >= key_len)
        return 0;
    if (a->causal && kp > qp)
        return 0;
    if (a->window > 0 && qp - kp >= a->window)
        return 0;
    if (a->window > 0 && !a->causal && kp - qp >= a->window)
        return 0;
    if (a->chunk_size > 0 && floor((double)qp / a->chunk_size) != floor((double)kp / a->chunk_size))
        return 0;
    if (a->mask != NULL) {
        int plane = a->mask_heads == 1 ? 0 : h;
        if (a->mask[((size_t)plane * Lq + i) * Lk + j] == 0)
            return 0;
    }
    return 1;
}

/* The row of Shaw's tables for rel = kpos - qpos: clip(rel, -K, K) + K,
 * or clip(-rel, -K, K) + K when the table is indexed by qpos - kpos
 * (direction query_minus_key). */
static long shaw_row(const pa_shaw *sh, long rel)
{
    long K = sh->max_relative_position;
    long r = sh->direction == PA_SHAW_DIRECTION_QUERY_MINUS_KEY ? -rel : rel;
    return (r < -K ? -K : r > K ? K : r) + K;
}

/* The multiplier of norm weight value w: w + offset, a float32 sum as
 * documented (Gemma's 1 + weight); 1 without a weight. */
static double norm_mult(const float *w, size_t c, float offset)
{
    if (w == NULL)
        return 1.0;
    return (double)(float)(w[c] + offset);
}

/* x [L, heads, D] in place: x * (w + offset) / sqrt(mean(x^2) + eps), the
 * mean over each head (wlen == D, or no weight) or over the whole row of
 * heads * D values. */
static void rms_norm(double *x, int L, int heads, int D, const float *w, int wlen, double eps,
                     float offset)
{
    for (int t = 0; t < L; t++) {
        double *row = x + (size_t)t * heads * D;
        if (w != NULL && wlen == heads * D && heads > 1) {
            double ss = 0;
            for (int c = 0; c < heads * D; c++)
                ss += row[c] * row[c];
            double inv = 1.0 / sqrt(ss / (heads * D) + eps);
            for (int c = 0; c < heads * D; c++)
                row[c] = row[c] * inv * norm_mult(w, (size_t)c, offset);
            continue;
        }
        for (int h = 0; h < heads; h++) {
            double *xh = row + (size_t)h * D, ss = 0;
            for (int d = 0; d < D; d++)
                ss += xh[d] * xh[d];
            double inv = 1.0 / sqrt(ss / D + eps);
            for (int d = 0; d < D; d++)
                xh[d] = xh[d] * inv * norm_mult(w, (size_t)d, offset);
        }
    }
}

/* The factor of the query at position p, from the models' own code:
 * Hugging Face Llama4TextAttention, attn_scales = log(floor((p + 1) /
 * floor_scale) + 1) * attn_scale + 1; Qwen-1's logn_list[p] =
 * math.log(p + 1, seq_length) when p + 1 > seq_length, else 1. */
static double query_factor(const pa_attention *a, long p)
{
    double f = 1.0;
    if (a->temperature_floor_scale > 0) {
        double steps = floor((double)(p + 1) / a->temperature_floor_scale);
        f = log(steps + 1.0) * a->temperature_attn_scale + 1.0;
    }
    if (a->logn_train_length > 0 && p + 1 > (long)a->logn_train_length)
        f *= log((double)(p + 1)) / log((double)a->logn_train_length);
    return f;
}

void ref_attention(const pa_attention *a, double *out, double *weights, double *logits,
                   double *q_rot, double *k_rot)
{
    const pa_scheme *s = a->scheme;
    int H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H;
    int D = a->head_dim, Dv = a->v_head_dim ? a->v_head_dim : D;
    int layer = a->x != NULL;
    int Lq = layer ? a->seq_len : a->q_len, Lk = layer ? a->seq_len : a->k_len;
    int key_len = a->key_length < 0 ? Lk : a->key_length;
    double scale = a->scale_set ? a->scale : s->type == PA_SCHEME_T5 ? 1.0 : 1.0 / sqrt((double)D);
    int *qpos = xcalloc((size_t)Lq, sizeof *qpos), *kpos = xcalloc((size_t)Lk, sizeof *kpos);
    double *q = xcalloc((size_t)Lq * H * D, sizeof *q);
    double *k = xcalloc((size_t)Lk * Hkv * D, sizeof *k);
    double *v = xcalloc((size_t)Lk * Hkv * Dv, sizeof *v);
    double *o = xcalloc((size_t)Lq * H * Dv, sizeof *o);
    double *row = xcalloc((size_t)Lk, sizeof *row);
    double *cope = xcalloc((size_t)Lk, sizeof *cope), *gl = xcalloc((size_t)Lk, sizeof *gl);
    bool *vis = xcalloc((size_t)Lk, sizeof *vis);

    const int32_t *qp_in = a->q_positions, *kp_in = a->k_positions;
    if (layer) {
        if (!qp_in)
            qp_in = kp_in;
        if (!kp_in)
            kp_in = qp_in;
    }
    for (int i = 0; i < Lq; i++)
        qpos[i] = qp_in ? qp_in[i] : Lk - Lq + i;
    for (int j = 0; j < Lk; j++)
        kpos[j] = kp_in ? kp_in[j] : j;

    if (layer) {
        int dm = a->d_model;
        double *xd = xcalloc((size_t)Lk * dm, sizeof *xd);
        double *pe = xcalloc((size_t)Lk * dm, sizeof *pe);
        if (s->type == PA_SCHEME_SINUSOIDAL)
            ref_sinusoidal(&s->sinusoidal, kpos, Lk, dm, pe);
        else if (s->type == PA_SCHEME_LEARNED)
            ref_learned(s->learned.table, dm, s->learned.offset, kpos, Lk, pe);
        for (size_t i = 0; i < (size_t)Lk * dm; i++)
            xd[i] = a->x[i] + pe[i];
        free(pe);
        for (int t = 0; t < Lk; t++) {
            for (int c = 0; c < H * D; c++) {
                double acc = 0;
                for (int e = 0; e < dm; e++)
                    acc += xd[(size_t)t * dm + e] * a->w_q[(size_t)e * H * D + c];
                q[(size_t)t * H * D + c] = acc + (a->b_q ? a->b_q[c] : 0.0);
            }
            for (int c = 0; c < Hkv * D; c++) {
                double acc = 0;
                for (int e = 0; e < dm; e++)
                    acc += xd[(size_t)t * dm + e] * a->w_k[(size_t)e * Hkv * D + c];
                k[(size_t)t * Hkv * D + c] = acc + (a->b_k ? a->b_k[c] : 0.0);
            }
            for (int c = 0; c < Hkv * Dv; c++) {
                double acc = 0;
                for (int e = 0; e < dm; e++)
                    acc += xd[(size_t)t * dm + e] * a->w_v[(size_t)e * Hkv * Dv + c];
                v[(size_t)t * Hkv * Dv + c] = acc + (a->b_v ? a->b_v[c] : 0.0);
            }
        }
        free(xd);
    } else {
        for (size_t i = 0; i < (size_t)Lq * H * D; i++)
            q[i] = a->q[i];
        for (size_t i = 0; i < (size_t)Lk * Hkv * D; i++)
            k[i] = a->k[i];
        for (size_t i = 0; i < (size_t)Lk * Hkv * Dv; i++)
            v[i] = a->v[i];
    }

    /* RMSNorm of q and k, before rope: over each head's D values for a
     * weight of D, over the token's whole projection for a longer one. */
    if (a->q_norm || a->q_norm_unweighted)
        rms_norm(q, Lq, H, D, a->q_norm, a->q_norm_len, a->q_norm_eps, a->q_norm_offset);
    if (a->k_norm || a->k_norm_unweighted)
        rms_norm(k, Lk, Hkv, D, a->k_norm, a->k_norm_len, a->k_norm_eps, a->k_norm_offset);

    if (s->type == PA_SCHEME_ROPE) {
        int maxpos = INT32_MIN;
        int r = s->rope.rotary_dim ? s->rope.rotary_dim : D;
        double *inv = xcalloc((size_t)r / 2, sizeof *inv), af;
        double *tmp = xcalloc((size_t)D, sizeof *tmp);
        /* M-RoPE: three position rows per token choose the angles (all of
         * them the 1-D position when none are given); masks keep qpos/kpos. */
        const int32_t *qm = a->q_mrope_positions, *km = a->k_mrope_positions;
        if (layer) {
            if (!qm)
                qm = km;
            if (!km)
                km = qm;
        }
        for (int i = 0; i < Lq; i++)
            for (int m = 0; m < 3; m++) {
                int pp = qm ? qm[(size_t)m * Lq + i] : qpos[i];
                maxpos = pp > maxpos ? pp : maxpos;
            }
        for (int j = 0; j < Lk; j++)
            for (int m = 0; m < 3; m++) {
                int pp = km ? km[(size_t)m * Lk + j] : kpos[j];
                maxpos = pp > maxpos ? pp : maxpos;
            }
        ref_rope_inv_freq(&s->rope, D, maxpos, inv, &af);
        for (int i = 0; i < Lq; i++)
            for (int h = 0; h < H; h++) {
                double *x = q + ((size_t)i * H + h) * D;
                int p3[3] = {qpos[i], qpos[i], qpos[i]};
                if (qm)
                    for (int m = 0; m < 3; m++)
                        p3[m] = qm[(size_t)m * Lq + i];
                ref_rope_rotate_mrope(&s->rope, D, inv, af, p3, x, tmp);
                memcpy(x, tmp, (size_t)D * sizeof *x);
            }
        /* k_prerotated: the keys are rotated already (a KV cache). */
        for (int j = 0; j < (a->k_prerotated ? 0 : Lk); j++)
            for (int h = 0; h < Hkv; h++) {
                double *x = k + ((size_t)j * Hkv + h) * D;
                int p3[3] = {kpos[j], kpos[j], kpos[j]};
                if (km)
                    for (int m = 0; m < 3; m++)
                        p3[m] = km[(size_t)m * Lk + j];
                ref_rope_rotate_mrope(&s->rope, D, inv, af, p3, x, tmp);
                memcpy(x, tmp, (size_t)D * sizeof *x);
            }
        free(inv);
        free(tmp);
    }
    if (s->type == PA_SCHEME_XPOS) {
        /* k_prerotated keys are scaled about 0, so the queries are too. */
        int64_t c = a->k_prerotated ? 0 : ref_xpos_centre(&s->xpos, qpos, Lq, kpos, Lk);
        for (int i = 0; i < Lq; i++)
            for (int h = 0; h < H; h++)
                ref_xpos_apply(&s->xpos, D, qpos[i], c, 0, q + ((size_t)i * H + h) * D);
        for (int j = 0; j < (a->k_prerotated ? 0 : Lk); j++)
            for (int h = 0; h < Hkv; h++)
                ref_xpos_apply(&s->xpos, D, kpos[j], c, 1, k + ((size_t)j * Hkv + h) * D);
    }
    if (s->type == PA_SCHEME_ROPE2D) {
        /* Coordinates: each side's own [2, L] rows, or the grid's; one
         * array for both in layer mode. */
        const int32_t *q2 = a->q_positions_2d, *k2 = a->k_positions_2d;
        double y, x;
        if (layer) {
            q2 = q2 ? q2 : k2;
            k2 = k2 ? k2 : q2;
        }
        for (int i = 0; i < Lq; i++)
            if (ref_rope2d_coord(&s->rope2d, q2, Lq, i, &y, &x))
                for (int h = 0; h < H; h++)
                    ref_rope2d_apply(&s->rope2d, D, h, H, y, x, q + ((size_t)i * H + h) * D);
        for (int j = 0; j < (a->k_prerotated ? 0 : Lk); j++)
            if (ref_rope2d_coord(&s->rope2d, k2, Lk, j, &y, &x))
                for (int h = 0; h < Hkv; h++)
                    ref_rope2d_apply(&s->rope2d, D, h, Hkv, y, x, k + ((size_t)j * Hkv + h) * D);
    }
    /* The query scalings by position, after rope (as the models apply them). */
    for (int i = 0; i < Lq; i++) {
        double f = query_factor(a, qpos[i]);
        for (int c = 0; c < H * D; c++)
            q[(size_t)i * H * D + c] *= f;
    }
    if (q_rot)
        memcpy(q_rot, q, (size_t)Lq * H * D * sizeof *q);
    if (k_rot)
        memcpy(k_rot, k, (size_t)Lk * Hkv * D * sizeof *k);

    double *slopes = xcalloc((size_t)H, sizeof *slopes);
    if (s->type == PA_SCHEME_ALIBI) {
        if (s->alibi.slopes)
            for (int h = 0; h < H; h++)
                slopes[h] = s->alibi.slopes[h];
        else
            ref_alibi_slopes(H, s->alibi.max_bias, slopes);
    }

    for (int h = 0; h < H; h++) {
        int g = h / (H / Hkv);
        for (int i = 0; i < Lq; i++) {
            /* A sink is one more logit in the row's softmax, with no value. */
            double sink = a->sinks ? a->sinks[h] : -INFINITY;
            double mx = sink, sum = 0;
            const double *qi = q + ((size_t)i * H + h) * D;
            if (s->type == PA_SCHEME_COPE) {
                /* CoPE's gates need the whole row first: every key's scale
                 * q.k, and whether a mask (or a -inf bias) hides it. */
                for (int j = 0; j < Lk; j++) {
                    const double *kj = k + ((size_t)j * Hkv + g) * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += qi[d] * kj[d];
                    gl[j] = scale * dot;
                    vis[j] = visible(a, h, i, j, qpos[i], kpos[j], key_len, Lq, Lk) &&
                             !(a->bias &&
                               a->bias[((size_t)(a->bias_heads == 1 ? 0 : h) * Lq + i) * Lk + j] ==
                                   -INFINITY);
                }
                ref_cope_row(&s->cope, D, h, scale, qi, gl, vis, Lk, NULL, cope);
            }
            for (int j = 0; j < Lk; j++) {
                const double *kj = k + ((size_t)j * Hkv + g) * D;
                long rel = (long)kpos[j] - qpos[i];
                double dot = 0, bias = 0, content;
                for (int d = 0; d < D; d++)
                    dot += qi[d] * kj[d];
                content = scale * dot;
                switch (s->type) {
                case PA_SCHEME_ALIBI:
                    bias = s->alibi.symmetric ? -slopes[h] * fabs((double)rel)
                                              : slopes[h] * (double)rel;
                    break;
                case PA_SCHEME_KERPLE: {
                    /* The reference is causal (tril(m - n)); NeMo's
                     * bidirectional form is |m - n|: one formula. */
                    double diff = fabs((double)rel);
                    bias = s->kerple.form == PA_KERPLE_FORM_POWER
                               ? ref_kerple_power(s->kerple.r1[h], s->kerple.r2[h], diff)
                               : ref_kerple_log(s->kerple.r1[h], s->kerple.r2[h], diff);
                    break;
                }
                case PA_SCHEME_COPE:
                    bias = cope[j]; /* after softcap, as the other biases */
                    break;
                case PA_SCHEME_SANDWICH:
                    bias = ref_sandwich(s->sandwich.hidden_size ? s->sandwich.hidden_size : D, H, h,
                                        fabs((double)rel));
                    break;
                case PA_SCHEME_FIRE: {
                    const pa_fire *fr = &s->fire;
                    bias = ref_fire(fr->c, fr->L, fr->eps, fr->w1, fr->b1, fr->num_w1, fr->w2,
                                    fr->b2, H, h, qpos[i], kpos[j]);
                    break;
                }
                case PA_SCHEME_T5:
                    bias =
                        /* A distance past int32 is past max_distance too:
                         * held to int32, its bucket is the same. */
                        s->t5.table[(size_t)ref_t5_bucket(rel > INT_MAX    ? INT_MAX
                                                          : rel < -INT_MAX ? -INT_MAX
                                                                           : (int)rel,
                                                          s->t5.bidirectional, s->t5.num_buckets,
                                                          s->t5.max_distance) *
                                        H +
                                    h];
                    break;
                case PA_SCHEME_SHAW: {
                    /* Shaw's terms are content: softcap applies to them.
                     * Hugging Face BERT (relative_key, relative_key_query):
                     *   distance = position_ids_l - position_ids_r
                     *   E = distance_embedding(distance + max_pos - 1)
                     *   scores = (q.k + q.E [+ k.E]) / sqrt(head_dim)
                     * which is the clipped table index of qpos - kpos with
                     * K = max_pos - 1, and scale * everything. */
                    const float *E = s->shaw.rel_k + (size_t)shaw_row(&s->shaw, rel) * D;
                    double qE = 0, kE = 0;
                    for (int d = 0; d < D; d++) {
                        qE += qi[d] * E[d];
                        kE += kj[d] * E[d];
                    }
                    content = scale * (dot + qE + (s->shaw.key_term ? kE : 0.0));
                    break;
                }
                default:
                    break;
                }
                if (a->softcap > 0)
                    content = a->softcap * tanh(content / a->softcap);
                if (a->bias) {
                    int plane = a->bias_heads == 1 ? 0 : h;
                    bias += a->bias[((size_t)plane * Lq + i) * Lk + j];
                }
                row[j] = visible(a, h, i, j, qpos[i], kpos[j], key_len, Lq, Lk) ? content + bias
                                                                                : -INFINITY;
                if (logits)
                    logits[((size_t)h * Lq + i) * Lk + j] = row[j];
                if (row[j] > mx)
                    mx = row[j];
            }
            for (int j = 0; j < Lk; j++) {
                row[j] = mx == -INFINITY ? 0.0 : exp(row[j] - mx);
                sum += row[j];
            }
            if (a->sinks)
                sum += exp(sink - mx);
            for (int j = 0; j < Lk; j++) {
                double w = sum > 0 ? row[j] / sum : 0.0;
                if (weights)
                    weights[((size_t)h * Lq + i) * Lk + j] = w;
                for (int d = 0; d < Dv; d++) {
                    double vv = v[((size_t)j * Hkv + g) * Dv + d];
                    if (s->type == PA_SCHEME_SHAW && s->shaw.rel_v) {
                        long rel = (long)kpos[j] - qpos[i];
                        vv += s->shaw.rel_v[(size_t)shaw_row(&s->shaw, rel) * Dv + d];
                    }
                    o[((size_t)i * H + h) * Dv + d] += w * vv;
                }
            }
        }
    }

    if (layer && a->w_o) {
        for (int i = 0; i < Lq; i++)
            for (int c = 0; c < a->d_out; c++) {
                double acc = 0;
                for (int e = 0; e < H * Dv; e++)
                    acc += o[(size_t)i * H * Dv + e] * a->w_o[(size_t)e * a->d_out + c];
                if (out)
                    out[(size_t)i * a->d_out + c] = acc + (a->b_o ? a->b_o[c] : 0.0);
            }
    } else if (out) {
        memcpy(out, o, (size_t)Lq * H * Dv * sizeof *o);
    }
    free(qpos);
    free(kpos);
    free(q);
    free(k);
    free(v);
    free(o);
    free(row);
    free(cope);
    free(gl);
    free(vis);
    free(slopes);
}
