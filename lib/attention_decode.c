/* attention_decode.c - a few queries against many keys: decode.
 *
 * One new token (or a few: speculative drafts) against a long KV cache is
 * bound by reading K and V, not by arithmetic. The tiled kernel would pack
 * each kv head's keys (a copy of the cache) and read them once per query
 * head. Here the keys are visited once, in blocks of DEC_BK in memory order
 * (key j of every kv head is one row of k, so the cache streams front to
 * back), and each key serves every query row of its kv head's group while it
 * is in L1: the logits are dot products, then the bias and mask pass and the
 * online softmax of the tiled kernel, then the values are added row by row.
 * Neither K nor V is copied; keys that need a norm or a rotation are
 * prepared one row at a time.
 *
 * Keys and values in 16 bits (kv_dtype) are read where they lie, half the
 * bytes, and widened on the way by the row kernels (lib/decode_rows.c),
 * each of which sums exactly as its float twin does.
 *
 * The state of a row (running max, sum and unnormalised output) can be
 * computed over a share of the keys and the shares merged afterwards
 * (pa__decode_finish): split-K, as flash-decoding does (Dao, Haziza, Massa
 * and Sizov 2023), so one decode runs on every core.
 */
#include "attention_kernel.h"

#include "decode_rows.h"
#include "dtype.h"
#include "softmax.h"

#include <math.h>
#include <string.h>

bool pa__decode_fits(const pa__plan *p)
{
    return p->Lq <= 8 && p->scheme->type != PA_SCHEME_SHAW && p->scheme->type != PA_SCHEME_COPE &&
           !p->cbf16;
}

/* ------------------------------------------------------------------------- */
/* The kernel                                                                */
/* ------------------------------------------------------------------------- */

void pa__decode_keys(const pa__plan *p, const buffers *b, int32_t *j0, int32_t *j1)
{
    int32_t qmin = INT32_MAX, qmax = INT32_MIN;
    for (int32_t i = 0; i < p->Lq; i++) {
        qmin = pa__min_i32(qmin, b->qpos[i]);
        qmax = pa__max_i32(qmax, b->qpos[i]);
    }
    pa__visible_range(p, qmin, qmax, b->kpos, b->kpos_sorted, b->kpos_unit, 0, p->Lk, j0, j1);
}

/* Queries of heads [h0, h1) as attention sees them, into b->dq. */
static void prep_queries(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0,
                         int32_t h1)
{
    const row_norm qn = pa__row_norm(p, b, false);
    for (int32_t h = h0; h < h1; h++) {
        float *dst = b->dq + (size_t)h * p->Lq * p->D;
        const float *src = io->Q + (size_t)h * p->D;
        if (p->rope || qn.on || p->q_scale)
            pa__prep_rows(p, &qn, h, pa__rope_tab(p, b->cos_q, h, p->Lq),
                          pa__rope_tab(p, b->sin_q, h, p->Lq), b->q_scale, src, io->ldq, p->Lq, dst,
                          io->q_rot ? io->q_rot + (size_t)h * p->D : NULL, io->ldq);
        else
            for (int32_t i = 0; i < p->Lq; i++)
                memcpy(dst + (size_t)i * p->D, src + (size_t)i * io->ldq,
                       (size_t)p->D * sizeof(float));
    }
}

/* Keys [j, j + n) of kv head g (n <= 4, within a page) as float rows:
 * *src with row stride *ld, in place, or widened into b->dkw when 16-bit. */
static void key_rows(const pa__plan *p, const buffers *b, const head_io *io, int32_t g, int32_t j,
                     int32_t n, const float **src, int *ld)
{
    if (io->kvt == PA_DTYPE_F32) {
        *src = pa__krow(io, j) + (size_t)g * p->D;
        *ld = io->ldk;
        return;
    }
    for (int32_t t = 0; t < n; t++)
        pa__widen(io->kvt, (const uint16_t *)pa__krow_raw(io, j + t) + (size_t)g * p->D,
                  (size_t)p->D, b->dkw + (size_t)t * p->D);
    *src = b->dkw;
    *ld = p->D;
}

/* The returned results of keys [f0, f1) that rows of heads [h0, h1) own:
 * their logits start at -inf (weights hold logits until the finish), so
 * that keys the kernel skips read as masked; and with k rotated or
 * normalised here, the k_rot rows of the kv heads whose first query head is
 * in [h0, h1). */
static void own_results(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0,
                        int32_t h1, int32_t f0, int32_t f1, bool prep_k)
{
    float *store = io->logits != NULL ? io->logits : io->weights;
    const size_t half = (size_t)p->r / 2;
    if (store != NULL)
        for (int32_t r = h0 * p->Lq; r < h1 * p->Lq; r++)
            pa__row_fill(store + (size_t)r * p->Lk + f0, f1 - f0, -INFINITY);
    if (io->k_rot == NULL || !prep_k)
        return;
    for (int32_t g = (h0 + p->group - 1) / p->group; g * p->group < h1; g++) {
        const row_norm kn = pa__row_norm(p, b, true);
        for (int32_t j = f0; j < f1;) {
            const int32_t n = pa__krun(io, j, pa__min_i32(4, f1 - j));
            row_norm nm = kn;
            if (nm.inv != NULL)
                nm.inv += j;
            const float *src;
            int ld;
            key_rows(p, b, io, g, j, n, &src, &ld);
            pa__prep_rows(
                p, &nm, g, p->rope ? pa__rope_tab(p, b->cos_k, g, p->Lk) + (size_t)j * half : NULL,
                p->rope ? pa__rope_tab(p, b->sin_k, g, p->Lk) + (size_t)j * half : NULL, NULL, src,
                ld, n, b->dk, io->k_rot + (size_t)j * io->ldk + (size_t)g * p->D, io->ldk);
            j += n;
        }
    }
}

/* Keys ahead of the one being read whose rows of a kv head the decode
 * kernel asks for: a few cache lines per row, spread over the work, for
 * the keys and for the values. */
enum { DEC_AHEAD = 16 };

/* Asks for row j's n bytes from byte off into L2, a cache line at a time. */
static inline void prefetch_row(const void *row, size_t off, size_t n)
{
    pa__prefetch_span((const char *)row + off, n);
}

/* Logits of query heads [hs, he) (all in kv head g) against keys [j, j +
 * nj) (nj <= 4, within a page) into their columns of b->dS (nk wide from
 * key lo): 16-bit keys read in place and widened in the row kernel, keys
 * that need a norm or a rotation prepared into b->dk first. The same kv
 * head's key and value rows DEC_AHEAD keys on (below jend) are asked for
 * on the way: the hardware prefetchers start late on rows 4 KiB apart
 * (1.15x on an AMD EPYC; all of a run's value rows at once, 0.9x). */
static void key_logits(const pa__plan *p, const buffers *b, const head_io *io,
                       const pa__row_ops *ops, int32_t g, int32_t hs, int32_t he, int32_t j,
                       int32_t nj, int32_t lo, int32_t nk, int32_t jend, bool prep_k)
{
    const int32_t Lq = p->Lq, D = p->D;
    const size_t half = (size_t)p->r / 2, es = pa__dtype_size(io->kvt);
    float *S = b->dS + (size_t)hs * Lq * nk + (j - lo);
    const float *kr;
    size_t ldk;
    for (int32_t t = j + DEC_AHEAD; t < j + DEC_AHEAD + nj && t < jend; t++) {
        prefetch_row(pa__krow_raw(io, t), (size_t)g * D * es, (size_t)D * es);
        prefetch_row(pa__vrow_raw(io, t), (size_t)g * p->Dv * es, (size_t)p->Dv * es);
    }
    if (!prep_k && io->kvt != PA_DTYPE_F32) {
        ops->dot16(b->dq + (size_t)hs * Lq * D, (he - hs) * Lq, D,
                   (const uint16_t *)pa__krow_raw(io, j) + (size_t)g * D, (size_t)io->ldk, nj,
                   p->scale, S, (size_t)nk);
        return;
    }
    if (prep_k) {
        const row_norm kn = pa__row_norm(p, b, true);
        int ld;
        key_rows(p, b, io, g, j, nj, &kr, &ld);
        for (int32_t t = 0; t < nj; t++) {
            row_norm nm = kn;
            if (nm.inv != NULL)
                nm.inv += j + t;
            pa__prep_rows(
                p, &nm, g,
                p->rope ? pa__rope_tab(p, b->cos_k, g, p->Lk) + (size_t)(j + t) * half : NULL,
                p->rope ? pa__rope_tab(p, b->sin_k, g, p->Lk) + (size_t)(j + t) * half : NULL, NULL,
                kr + (size_t)t * (size_t)ld, ld, 1, b->dk + (size_t)t * D, NULL, 0);
        }
        kr = b->dk;
        ldk = (size_t)D;
    } else {
        kr = pa__krow(io, j) + (size_t)g * D;
        ldk = (size_t)io->ldk;
    }
    ops->dot(b->dq + (size_t)hs * Lq * D, (he - hs) * Lq, D, kr, ldk, nj, p->scale, S, (size_t)nk);
}

void pa__decode(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0, int32_t h1,
                int32_t j0, int32_t j1, int32_t f0, int32_t f1, bool sink, float *state)
{
    float *store = io->logits != NULL ? io->logits : io->weights;
    const pa_attention *a = p->a;
    const pa__row_ops ops = pa__row_ops_pick(io->kvt);
    const bool kv16 = io->kvt != PA_DTYPE_F32;
    const int32_t Lq = p->Lq, Dv = p->Dv, G = p->group;
    const size_t st = PA__STATE(Dv);
    const int32_t g0 = h0 / G, g1 = (h1 + G - 1) / G; /* kv heads of [h0, h1) */
    const row_norm kn = pa__row_norm(p, b, true);
    const bool prep_k = (p->rope && !a->k_prerotated) || kn.on;
    const int32_t r0 = h0 * Lq, r1 = h1 * Lq;
    const bool stats = pa__want_stats(io);
    /* 16-bit keys read as they are, whole kv heads: a key's logits in one
     * call of dot_heads16 (decode_rows.h). */
    const bool heads_whole =
        ops.key_major && kv16 && !prep_k && h0 % G == 0 && h1 % G == 0 && ops.dot_heads16 != NULL;
    int32_t qmin = INT32_MAX, qmax = INT32_MIN;

    for (int32_t i = 0; i < Lq; i++) {
        qmin = pa__min_i32(qmin, b->qpos[i]);
        qmax = pa__max_i32(qmax, b->qpos[i]);
    }
    prep_queries(p, b, io, h0, h1);
    own_results(p, b, io, h0, h1, f0, f1, prep_k);
    for (int32_t r = r0; r < r1; r++) {
        float *s = state + (size_t)r * st;
        /* A sink is a key with logit s_h and no value (attention_prefill.c). */
        s[0] = sink && a->sinks != NULL ? a->sinks[r / Lq] : -INFINITY;
        s[1] = sink && a->sinks != NULL ? 1.0f : 0.0f;
        /* over the keys only */
        s[PA__STATE_A] = s[PA__STATE_B] = s[PA__STATE_K] = s[PA__STATE_F] = 0.0f;
        memset(s + PA__STATE_O, 0, (size_t)Dv * sizeof(float));
    }

    for (int32_t t0 = j0; t0 < j1; t0 += DEC_BK) {
        int32_t lo, hi, nk;
        pa__visible_range(p, qmin, qmax, b->kpos, b->kpos_sorted, b->kpos_unit, t0,
                          pa__min_i32(DEC_BK, j1 - t0), &lo, &hi);
        nk = hi - lo;
        if (nk == 0)
            continue;
        /* Logits [H*Lq, nk]: runs of DEC_KG keys in memory order (within a
         * page), each run's kv heads one after another, four keys at a
         * time: eight rows a few KiB apart read side by side, which the
         * hardware prefetchers follow (the next four keys only, 0.66x of
         * the speed on an AMD EPYC with AVX2); with the key-major ops a
         * key at a time, its kv heads in turn (decode_rows.h). Each key's
         * logit is its own sum whichever way the keys are grouped. */
        for (int32_t k0 = lo, kc; k0 < hi; k0 += kc) {
            kc = pa__krun(io, k0, pa__min_i32(prep_k ? 4 : DEC_KG, hi - k0));
            if (heads_whole) {
                /* Each key's rows of every kv head in one call, which asks
                 * for key j + DEC_AHEAD's rows head by head as key_logits
                 * does (all at once, before the heads, ran at 0.7x): its
                 * value rows, and its key rows where k is paged. A key's
                 * rows of every head are one row of k, so a contiguous k is
                 * read front to back, which the hardware prefetchers
                 * follow: asking for its key rows too took 7-10% longer
                 * (bf16 on an AMD EPYC, each call paired with a read of the
                 * memory, as bench_decode measures). Pages placed anywhere
                 * break that stream every page_tokens keys: without the
                 * key rows asked for, a paged bf16 decode took 20% longer
                 * on one thread. */
                const size_t es = pa__dtype_size(io->kvt);
                for (int32_t j = k0; j < k0 + kc; j++) {
                    float *S = b->dS + (size_t)h0 * Lq * nk + (j - lo);
                    const bool ahead = j + DEC_AHEAD < j1;
                    const void *ka =
                        ahead && io->kp != NULL
                            ? (const char *)pa__krow_raw(io, j + DEC_AHEAD) + (size_t)g0 * p->D * es
                            : NULL;
                    const void *va =
                        ahead ? (const char *)pa__vrow_raw(io, j + DEC_AHEAD) + (size_t)g0 * Dv * es
                              : NULL;
                    ops.dot_heads16(b->dq + (size_t)h0 * Lq * p->D, G * Lq, g1 - g0, p->D,
                                    (const uint16_t *)pa__krow_raw(io, j) + (size_t)g0 * p->D, ka,
                                    va, Dv, p->scale, S, (size_t)nk);
                }
                continue;
            }
            if (ops.key_major) {
                for (int32_t j = k0; j < k0 + kc; j++)
                    for (int32_t g = g0; g < g1; g++)
                        key_logits(p, b, io, &ops, g, pa__max_i32(h0, g * G),
                                   pa__min_i32(h1, (g + 1) * G), j, 1, lo, nk, j1, prep_k);
                continue;
            }
            for (int32_t g = g0; g < g1; g++)
                for (int32_t j = k0; j < k0 + kc; j += 4)
                    key_logits(p, b, io, &ops, g, pa__max_i32(h0, g * G),
                               pa__min_i32(h1, (g + 1) * G), j, pa__min_i32(4, k0 + kc - j), lo, nk,
                               j1, prep_k);
        }
        /* Biases, masks and the online softmax, row by row. */
        for (int32_t h = h0; h < h1; h++) {
            float *Sh = b->dS + (size_t)h * Lq * nk;
            pa__bias_and_mask(p, b, Sh, h, 0, Lq, lo, nk);
            if (store != NULL)
                for (int32_t i = 0; i < Lq; i++)
                    memcpy(store + (size_t)(h * Lq + i) * p->Lk + lo, Sh + (size_t)i * nk,
                           (size_t)nk * sizeof(float));
            for (int32_t i = 0; i < Lq; i++) {
                float *row = Sh + (size_t)i * nk, *s = state + (size_t)(h * Lq + i) * st;
                const float tmax = pa__row_max(row, nk);
                float mnew, alpha;
                if (tmax == -INFINITY) {
                    memset(row, 0, (size_t)nk * sizeof(float));
                    continue;
                }
                mnew = tmax > s[0] ? tmax : s[0];
                alpha = s[0] == -INFINITY ? 0.0f : expf(s[0] - mnew);
                if (stats) { /* as in attention_prefill.c */
                    float spl, spd, spf;
                    const float e = pa__row_exp_sum_stats(row, nk, mnew, b->kpos + lo, b->qpos[i],
                                                          io->far, &spl, &spd, &spf);
                    float *sa = s + PA__STATE_A, *sb = s + PA__STATE_B, *sk = s + PA__STATE_K;
                    *sa = (*sk > 0.0f ? alpha * (*sa + (s[0] - mnew) * *sk) : 0.0f) + spl;
                    *sb = *sb * alpha + spd;
                    s[PA__STATE_F] = s[PA__STATE_F] * alpha + spf;
                    *sk = *sk * alpha + e;
                    s[1] = s[1] * alpha + e;
                } else {
                    s[1] = s[1] * alpha + pa__row_exp_sum(row, nk, mnew);
                }
                s[0] = mnew;
                if (alpha != 1.0f)
                    pa__row_scale(s + PA__STATE_O, s + PA__STATE_O, Dv, alpha);
            }
        }
        /* Values into the rows, in runs of PA__VRUN keys at multiples of
         * it, which a page never splits (paged and contiguous calls sum
         * alike), each run's kv heads one after another: as the keys
         * above, a few rows side by side (each kv head's 64 rows in turn,
         * with the hardware prefetchers mostly idle, had run at 0.65x). */
        for (int32_t s0 = lo, s1; s0 < hi; s0 = s1) {
            s1 = pa__min_i32(hi, (s0 / PA__VRUN + 1) * PA__VRUN);
            for (int32_t g = g0; g < g1; g++) {
                const int32_t hs = pa__max_i32(h0, g * G), he = pa__min_i32(h1, (g + 1) * G);
                if (kv16)
                    ops.pv16(state + (size_t)hs * Lq * st + PA__STATE_O, st,
                             b->dS + (size_t)hs * Lq * nk + (s0 - lo), (size_t)nk, (he - hs) * Lq,
                             (const uint16_t *)pa__vrow_raw(io, s0) + (size_t)g * Dv,
                             (size_t)io->ldv, s1 - s0, Dv);
                else
                    ops.pv(state + (size_t)hs * Lq * st + PA__STATE_O, st,
                           b->dS + (size_t)hs * Lq * nk + (s0 - lo), (size_t)nk, (he - hs) * Lq,
                           pa__vrow(io, s0) + (size_t)g * Dv, (size_t)io->ldv, s1 - s0, Dv);
            }
        }
    }
}

void pa__decode_finish(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0,
                       int32_t h1, const float *states, int32_t nparts)
{
    const int32_t Lq = p->Lq, Dv = p->Dv;
    const size_t st = PA__STATE(Dv), stride = (size_t)p->H * Lq * st;
    for (int32_t r = h0 * Lq; r < h1 * Lq; r++) {
        const int32_t h = r / Lq, i = r % Lq;
        float *dst = io->out + (size_t)i * p->H * Dv + (size_t)h * Dv;
        float m = -INFINITY, l = 0.0f, sa = 0.0f, sb = 0.0f, sk = 0.0f, sf = 0.0f;
        for (int32_t k = 0; k < nparts; k++) {
            const float mk = states[k * stride + (size_t)r * st];
            m = mk > m ? mk : m;
        }
        /* Finite inputs whose products overflow give +inf or NaN logits;
         * the running max or sum then stops being finite. The parts'
         * statistics merge as their sums do, each rebased to the common max. */
        for (int32_t k = 0; k < nparts; k++) {
            const float *s = states + k * stride + (size_t)r * st;
            float w;
            if (s[0] == -INFINITY)
                continue;
            w = m == INFINITY ? 1.0f : expf(s[0] - m);
            l += s[1] * w;
            if (s[PA__STATE_K] > 0.0f) {
                sa += w * (s[PA__STATE_A] + (s[0] - m) * s[PA__STATE_K]);
                sb += w * s[PA__STATE_B];
                sf += w * s[PA__STATE_F];
                sk += w * s[PA__STATE_K];
            }
        }
        if (!isfinite(l) || m == INFINITY)
            *b->overflow = true;
        if (pa__want_stats(io))
            pa__row_stats(l, sk, sa, sb, sf, io, (size_t)r);
        memset(dst, 0, (size_t)Dv * sizeof(float));
        if (io->weights != NULL) {
            /* The row's logits (in weights, or copied from logits) into
             * its softmax, as the tiled kernel finishes a row. */
            float *w = io->weights + (size_t)r * p->Lk;
            if (l > 0.0f) {
                if (io->logits != NULL)
                    memcpy(w, io->logits + (size_t)r * p->Lk, (size_t)p->Lk * sizeof(float));
                pa__row_exp_scale(w, p->Lk, m, 1.0f / l);
            } else {
                memset(w, 0, (size_t)p->Lk * sizeof(float));
            }
        }
        if (!(l > 0.0f))
            continue; /* every key hidden: a zero row, as the tiled kernel gives */
        for (int32_t k = 0; k < nparts; k++) {
            const float *s = states + k * stride + (size_t)r * st;
            float w;
            if (s[0] == -INFINITY)
                continue;
            w = (m == INFINITY ? 1.0f : expf(s[0] - m)) / l;
            for (int32_t d = 0; d < Dv; d++)
                dst[d] += w * s[PA__STATE_O + d];
        }
        if (!pa__row_finite(dst, (size_t)Dv))
            *b->overflow_out = true;
    }
}
