/* attention_kernel.h - what the attention kernels share inside lib/: the
 * workspace buffers, the operands, the bias and mask pass (attention_mask.c),
 * the tiled kernel for blocks of queries (attention_prefill.c) and the one
 * for a few queries against many keys (attention_decode.c).
 */
#ifndef PA_ATTENTION_KERNEL_H
#define PA_ATTENTION_KERNEL_H

#include "attention_plan.h"

#include <math.h>

/* Queries per block of the tiled kernel (its keys per tile: pa__plan's
 * bk). Longer tiles amortise each row's per-tile work (its max, the
 * rescale of its output, the output's loads and stores in P.v): 1024
 * against 256 keys, 0.73 -> 0.78 of the FMA peak at L=2048 D=64 on a
 * Zen 5 (bench_attention). */
enum { BQ = 64 };

/* Keys per block of the decode kernel: its logits [H*Lq, DEC_BK] and the
 * keys and values it reads stay in L1 and L2. */
enum { DEC_BK = 64 };

/* Keys per run of the decode kernel's logits (lib/attention_decode.c). */
enum { DEC_KG = 8 };

/* T5 buckets come from a table over relative positions [-max_distance,
 * max_distance] (farther ones share the outermost bucket) when it has at
 * most T5_TABLE_MAX entries; from pa_t5_bucket per logit otherwise. With at
 * most T5_BIAS_MAX entries over all heads, the biases themselves are
 * tabled by relative position, head by head. */
enum { T5_TABLE_MAX = 1 << 17, T5_BIAS_MAX = 1 << 20 };

/* KERPLE's and Sandwich's biases are functions of (|qpos - kpos|, head):
 * tabled [H, dmax + 1] by distance when that has at most DIST_BIAS_MAX
 * entries (dmax the largest distance of the call), evaluated per logit
 * otherwise (pa_kerple_bias, pa_sandwich_bias). */
enum { DIST_BIAS_MAX = 1 << 21 };

/* FIRE's psi(|qpos - kpos|) is tabled by distance (doubles, one table for
 * every head) when the call's distances have at most FIRE_PSI_MAX entries;
 * computed per logit otherwise. */
enum { FIRE_PSI_MAX = 1 << 20 };
/* With the psi table, each query row's distance thresholds of the MLP's
 * breakpoints ([Lq, hidden] int32) when they have at most FIRE_THR_MAX
 * entries: a segment's run of keys then costs O(1) to find. */
enum { FIRE_THR_MAX = 1 << 22 };

/* A row's online-softmax state: running max and denominator, the sums of
 * the row statistics (PA__STATE_A, _B, _K: buffers.sa, sb, sk), then from
 * float PA__STATE_O (one cache line in, so that rows stay aligned) the Dv
 * floats of its unnormalised output, padded to whole cache lines. */
#define PA__STATE_A 2
#define PA__STATE_B 3
#define PA__STATE_K 4
#define PA__STATE_F 5
#define PA__STATE_O ((size_t)16)
#define PA__STATE(Dv) (PA__STATE_O + (((size_t)(Dv) + 15) & ~(size_t)15))

/* Everything the kernels read besides the caller's tensors, carved from the
 * workspace by layout() (lib/attention.c). */
typedef struct buffers {
    float *xp;            /* [L, d_model]: x plus the absolute encoding */
    float *q, *k, *v;     /* layer-mode projections [L, H*D], [L, Hkv*D], [L, Hkv*Dv] */
    float *kt;            /* [D, pa__tile_kt_ld(Lk)] one kv head's keys, transposed */
    float *kgather;       /* [Lk, D] paged, tiled kernel: one kv head's keys gathered */
    float *vhead;         /* [Lk, Dv] one kv head's values, contiguous (Hkv > 1, paged) */
    float *qblk;          /* [BQ, D] rope, norms or q scales: one block of queries (or
                             keys) as attention sees them */
    float *q_scale;       /* [Lq] query scalings by position: each row's factor */
    float *q_inv, *k_inv; /* [Lq], [Lk] inverse RMS of each token's whole projection
                             (q/k norms with a weight of H*D, Hkv*D) */
    float *attn;          /* [Lq, H*Dv] before w_o */
    float *cos_q, *sin_q; /* [Lq, r/2] */
    float *cos_k, *sin_k; /* [Lk, r/2]; may alias the q tables */
    int32_t *qpos, *kpos; /* [Lq], [Lk] effective positions */
    float *slopes;        /* [H] alibi */
    int32_t *t5_bucket;   /* [2*max_distance+1] t5: bucket of each relative position */
    /* compute_dtype bf16, packed by the way that multiplies them (tile.h;
     * u = 1 or 2 units a pair): one kv head's keys [ceil(D/2) u,
     * pa__tile_kt_ld(Lk)] and values [ceil(Lk/2) u, Dv], a block's queries
     * [BQ, ceil(D/2) u] and a tile's probabilities [BQ, (bk/2 + 1) u]. */
    uint32_t *kt2, *v2, *q2, *p2;
    float *S;                 /* [BQ, bk] logits, then probabilities */
    float *O;                 /* [BQ, Dv] running output */
    float *m, *l;             /* [BQ] running max and denominator */
    float *sa, *sb, *sk, *sf; /* [BQ] entropy, distance, far sums; the keys' denominator */
    float *qrel;              /* [BQ, 2K+1] shaw q . rel_k */
    /* The decode kernel (pa__decode_fits): */
    float *dq;            /* [H*Lq, D] queries as attention sees them, row h*Lq + i */
    float *dk;            /* [4, D] four keys of one kv head, normalised or rotated */
    float *dkw;           /* [4, D] kv_dtype 16-bit: those keys widened, before that */
    float *dS;            /* [H*Lq, DEC_BK] one block's logits, then probabilities */
    float *state;         /* [H*Lq, PA__STATE(Dv)] running state of pa_attention_run */
    bool *overflow;       /* set when a row's logits were not finite */
    bool *overflow_out;   /* set when a row's output was not (inputs finite, a mean past 3.4e38) */
    bool kpos_sorted;     /* kpos non-decreasing: each row's visible keys are one run */
    bool kpos_unit;       /* kpos[j] == kpos[0] + j (the default): lookups by distance are runs */
    bool pos_small;       /* every position within 2^30: differences fit int32 (lib/bias_row.c) */
    float *t5_bias;       /* [H, 2*max_distance+1] t5: each head's bias by relative position */
    float *dist_bias;     /* [H, dist_n] kerple, sandwich: each head's bias by |qpos - kpos| */
    int32_t dist_n;       /* dmax + 1 of the call */
    pa__fire_tables fire; /* fire: segments, row normalisers, psi by distance */
    float *bins;          /* [BQ, 2K+1] shaw with rel_v: probabilities summed by distance */
    float *cope;          /* [BQ, cope_ld] cope: the block's gates, positions, then terms */
    size_t cope_ld;       /* >= Lk */
    float *cope_qe;       /* [BQ, npos_max] cope: the block's q . pos_emb */
    /* Shaw's key term (key_term): krel [krel_n, krel_ld] = scale * rel_k[krel_lo
     * + r] . k_j, one kv head's keys by table row, of the rows any pair of
     * the call reaches (pa__shaw_key_rows). */
    float *krel;
    int32_t krel_lo, krel_n;
    size_t krel_ld;
} buffers;

/* Head h's rope table of L rows (rope2d mixed keeps one per head). */
static inline const float *pa__rope_tab(const pa__plan *p, const float *tab, int32_t h, int32_t L)
{
    if (tab == NULL || p->rope_heads <= 1) /* no rope: the NULL table as it is */
        return tab;
    return tab + (size_t)h * (size_t)L * (size_t)(p->r / 2);
}

typedef struct head_io {
    const float *Q; /* [Lq, ldq] rows; head h at column h*D */
    const float *K; /* [Lk, ldk]; kv head g at column g*D */
    const float *V; /* [Lk, ldv]; kv head g at column g*Dv */
    int ldq, ldk, ldv;
    /* Paged keys and values (posattn.h): K and V are NULL, and row j is
     * row j % pt of page j / pt (pa__krow, pa__vrow). */
    const float *const *kp, *const *vp;
    int32_t pt;
    /* kv_dtype (posattn.h): with a 16-bit type, K, V and the pages hold
     * uint16_t elements (ldk, ldv still count elements), read through
     * pa__krow_raw and pa__vrow_raw; pa__krow and pa__vrow are for float
     * rows only. */
    pa_dtype kvt;
    float *out;                            /* [Lq, H*Dv] */
    float *weights, *logits;               /* [H, Lq, Lk] or NULL */
    float *q_rot, *k_rot;                  /* rope: rotated q and k to return, or NULL */
    float *entropy, *distance, *far_share; /* [H, Lq] row statistics, or NULL */
    float far;                             /* pa_attention_out.far_distance */
} head_io;

/* Key (value) row j, every kv head of it, paged or not. */
static inline const float *pa__krow(const head_io *io, int32_t j)
{
    if (io->kp != NULL)
        return io->kp[j / io->pt] + (size_t)(j % io->pt) * (size_t)io->ldk;
    return io->K + (size_t)j * (size_t)io->ldk;
}

static inline const float *pa__vrow(const head_io *io, int32_t j)
{
    if (io->vp != NULL)
        return io->vp[j / io->pt] + (size_t)(j % io->pt) * (size_t)io->ldv;
    return io->V + (size_t)j * (size_t)io->ldv;
}

/* Key (value) row j of any kv_dtype: its first element. */
static inline const void *pa__krow_raw(const head_io *io, int32_t j)
{
    const size_t es = io->kvt == PA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t off = (io->kp != NULL ? (size_t)(j % io->pt) : (size_t)j) * (size_t)io->ldk * es;
    return (const char *)(io->kp != NULL ? (const void *)io->kp[j / io->pt] : (const void *)io->K) +
           off;
}

static inline const void *pa__vrow_raw(const head_io *io, int32_t j)
{
    const size_t es = io->kvt == PA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t off = (io->vp != NULL ? (size_t)(j % io->pt) : (size_t)j) * (size_t)io->ldv * es;
    return (const char *)(io->vp != NULL ? (const void *)io->vp[j / io->pt] : (const void *)io->V) +
           off;
}

/* Of n rows from j, those before j's page ends (all n when not paged). */
static inline int32_t pa__krun(const head_io *io, int32_t j, int32_t n)
{
    if (io->kp == NULL)
        return n;
    return n < io->pt - j % io->pt ? n : io->pt - j % io->pt;
}

/* Values are summed in runs of PA__VRUN keys at multiples of PA__VRUN
 * (the decode kernel's pv): a page holds whole runs, so paged and
 * contiguous calls add the same terms in the same order. */
#define PA__VRUN 8
_Static_assert(16 % PA__VRUN == 0, "page_tokens, a multiple of 16, must hold whole runs");

static inline bool pa__want_stats(const head_io *io)
{
    return io->entropy != NULL || io->distance != NULL || io->far_share != NULL;
}

/* A row's entropy and mean attended distance from its softmax state: l
 * the whole sum (with the sink's term), lk the keys' share of it, a =
 * sum_j p_j (l_j - m) and bd = sum_j p_j |dpos_j| over the keys, with
 * p_j = exp(l_j - m), and bf the far keys' sum (pa_attention_out.far_share).
 * H = -sum w ln w = (lk ln l - a) / l, w_j = p_j / l. */
static inline void pa__row_stats(float l, float lk, float a, float bd, float bf, const head_io *io,
                                 size_t r)
{
    float e = 0.0f, d = 0.0f, f = 0.0f;
    if (l > 0.0f && lk > 0.0f) {
        e = (lk * logf(l) - a) / l;
        e = e > 0.0f ? e : 0.0f; /* >= 0 exactly; rounding may dip below */
        d = bd / l;
        f = bf / l;
    }
    if (io->entropy != NULL)
        io->entropy[r] = e;
    if (io->distance != NULL)
        io->distance[r] = d;
    if (io->far_share != NULL)
        io->far_share[r] = f;
}

/* An RMSNorm (posattn.h): whether it applies, its weight (NULL: none),
 * length (D per head, or the whole projection), eps and weight offset, and
 * the whole-row inverse RMS of each token. */
typedef struct row_norm {
    bool on;
    const float *w;
    int32_t len;
    float eps;
    float offset;
    const float *inv;
} row_norm;

/* The q (k == false) or k norm of a call. */
static inline row_norm pa__row_norm(const pa__plan *p, const buffers *b, bool k)
{
    const pa_attention *a = p->a;
    row_norm n;
    n.on = k ? p->k_norm : p->q_norm;
    n.w = k ? a->k_norm : a->q_norm;
    n.len = n.w != NULL ? (k ? a->k_norm_len : a->q_norm_len) : p->D; /* unweighted: per head */
    n.eps = k ? a->k_norm_eps : a->q_norm_eps;
    n.offset = k ? a->k_norm_offset : a->q_norm_offset;
    n.inv = k ? b->k_inv : b->q_inv;
    return n;
}

/* kpos - qpos clamped into int32: T5 buckets and Shaw indices saturate long
 * before the clamp matters. */
static inline int32_t pa__rel_pos(int32_t kp, int32_t qp)
{
    int64_t d = (int64_t)kp - (int64_t)qp;
    if (d > INT32_MAX)
        return INT32_MAX;
    if (d < INT32_MIN)
        return INT32_MIN;
    return (int32_t)d;
}

/* The rows [*lo, *lo + *n) of Shaw's tables that the pairs of query and key
 * positions of p reach under its direction (attention.c). */
void pa__shaw_key_rows(const pa__plan *p, int32_t *lo, int32_t *n);

/* attention_mask.c */

/* Whether any mask (position, padding or the caller's) applies. */
bool pa__needs_mask(const pa__plan *p);

/* Narrows [*lo, *hi) of sorted key positions kpos to the keys visible from
 * query position qp: by binary search, or with unit (kpos[j] == kpos[0] +
 * j, buffers' kpos_unit) by arithmetic on the interval of visible
 * positions. */
void pa__visible_span(const pa__plan *p, int32_t qp, const int32_t *kpos, bool unit, int32_t *lo,
                      int32_t *hi);

/* Narrows the tile [j0, j0 + nk) to [*lo, *hi), outside which every key is
 * hidden from every query whose position lies in [qmin, qmax]; lo == hi
 * when the whole tile is hidden. */
void pa__visible_range(const pa__plan *p, int32_t qmin, int32_t qmax, const int32_t *kpos,
                       bool sorted, bool unit, int32_t j0, int32_t nk, int32_t *lo, int32_t *hi);

/* Narrows [*lo, *hi) to the columns where the caller's mask lets some query
 * of rows [i0, i0 + nq) of head h attend. */
void pa__mask_range(const pa__plan *p, int32_t h, int32_t i0, int32_t nq, int32_t *lo, int32_t *hi);

/* Sets to -inf the entries of row [nk] (query row qi of head h, keys j0..)
 * that the masks hide: causal, window, chunk, key_length, the caller's
 * mask. */
void pa__mask_row(const pa__plan *p, const buffers *b, int32_t h, int32_t qi, float *row,
                  int32_t j0, int32_t nk);

/* The logits S [nq, nk] (row stride nk) of head h, query rows i0.., keys
 * j0..: Shaw's terms, softcap, the scheme's bias, the caller's bias, masks.
 * With Shaw's key term, b->krel holds the kv head of h. */
void pa__bias_and_mask(const pa__plan *p, const buffers *b, float *S, int32_t h, int32_t i0,
                       int32_t nq, int32_t j0, int32_t nk);

/* cope.c */

/* CoPE's position term (pa_cope) of query rows [i0, i0 + nq) of head h
 * into b->cope [nq, Lk], for pa__bias_and_mask to add: the rows' gates
 * over every key they see (Qb [nq, D] the queries as attention sees them,
 * row stride ldq; Kt the kv head's packed K^T), the suffix sums, q.E and
 * the interpolation. Entries of hidden keys are finite and masked later.
 * Sets *b->overflow when a term is not finite. */
void pa__cope_block(const pa__plan *p, const buffers *b, int32_t h, const float *Qb, int ldq,
                    const float *Kt, size_t ldkt, int32_t i0, int32_t nq);

/* attention_prefill.c */

/* Rows [n] of head `head` (src: row stride ld) as attention sees them, into
 * dst [n, D]: RMS-normalised when nm->on, then rotated with the table rows
 * of those positions (rope), then multiplied by scale[i] (the query
 * scalings; NULL for none); copied to ret (row stride ret_ld) when the
 * caller asked for the tensor. */
void pa__prep_rows(const pa__plan *p, const row_norm *nm, int32_t head, const float *cos_t,
                   const float *sin_t, const float *scale, const float *src, int ld, int32_t n,
                   float *dst, float *ret, int ret_ld);

/* Work units of the tiled kernel: (query head, block of BQ queries),
 * head-major. */
int64_t pa__prefill_units(const pa__plan *p);

/* Runs units [u0, u1): each writes its rows of io->out (and weights,
 * logits, q_rot, k_rot). */
void pa__prefill(const pa__plan *p, const buffers *b, const head_io *io, int64_t u0, int64_t u1);

/* attention_decode.c */

/* Whether the decode kernel runs a descriptor: few query rows (Lq <= 8),
 * no Shaw tables, not cope (its rows need their gates over every key
 * first: the tiled kernel does that per block). Whatever results are
 * returned. */
bool pa__decode_fits(const pa__plan *p);

/* The state [H*Lq, PA__STATE(Dv)] of the rows of query heads [h0, h1) over
 * keys [j0, j1): rows of other heads are left alone. A sink is folded in
 * when sink is set (by exactly one of the parts that share a row). Of the
 * returned logits (or weights) and k_rot, the call writes keys [f0, f1):
 * the parts that share a row own disjoint ranges covering [0, Lk). */
void pa__decode(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0, int32_t h1,
                int32_t j0, int32_t j1, int32_t f0, int32_t f1, bool sink, float *state);

/* The visible keys [*j0, *j1) of the whole call (every query row). */
void pa__decode_keys(const pa__plan *p, const buffers *b, int32_t *j0, int32_t *j1);

/* Rows [h0*Lq, h1*Lq) of io->out from nparts states (stride between parts:
 * H*Lq*PA__STATE(Dv) floats), and of io->weights from the logits the parts
 * left there (or in io->logits); *b->overflow set when a row is not
 * finite. */
void pa__decode_finish(const pa__plan *p, const buffers *b, const head_io *io, int32_t h0,
                       int32_t h1, const float *states, int32_t nparts);

#endif
