/* attention_packed.c - packed sequences (cu_seqlens): S sequences back to
 * back in one q/k/v (or x), attention block-diagonal.
 *
 * Each sequence runs as the call of that sequence alone: a sub-descriptor
 * whose tensors point into the packed ones (and whose mask, bias and M-RoPE
 * rows, not contiguous per sequence, are copied into the workspace). So a
 * packed call equals the separate calls bit for bit, positions restart and
 * causal aligns per sequence by construction, and no off-diagonal tile is
 * ever computed. Sits between the entry points in attention.c and the
 * one-sequence path there.
 */
#include "attention_plan.h"

#include <stdio.h>
#include <string.h>

static bool packed(const pa_attention *a)
{
    return a->cu_seqlens_q != NULL || a->cu_seqlens_k != NULL;
}

static const int32_t *cu_k(const pa_attention *a)
{
    return a->cu_seqlens_k != NULL ? a->cu_seqlens_k : a->cu_seqlens_q;
}

/* The per-sequence copies a run needs (NULL when only measuring or
 * checking: the sub-descriptor then points at the packed arrays, which
 * keeps which pointers are NULL or equal, all the layout looks at). */
typedef struct slices {
    int32_t *q_mrope, *k_mrope; /* [3, Lq_s], [3, Lk_s] */
    int32_t *q_pos2, *k_pos2;   /* rope2d: [2, Lq_s], [2, Lk_s] */
    uint8_t *mask;              /* [mask_heads, Lq_s, Lk_s] */
    float *bias;                /* [bias_heads, Lq_s, Lk_s] */
} slices;

/* One M-RoPE array's rows [rows, n] (3; rope2d's 2) of the packed
 * [rows, total] from row r0. */
static void copy_rows(int32_t *dst, const int32_t *src, int rows, int32_t total, int32_t r0,
                      int32_t n)
{
    for (int r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * n, src + (size_t)r * total + r0, (size_t)n * sizeof(int32_t));
}

/* The diagonal block [heads, n, m] at (r0, c0) of a [heads, Lq, Lk] array. */
static void copy_block(void *dst, const void *src, size_t elem, int32_t heads, int32_t Lq,
                       int32_t Lk, int32_t r0, int32_t c0, int32_t n, int32_t m)
{
    for (int32_t h = 0; h < heads; h++)
        for (int32_t i = 0; i < n; i++)
            memcpy((char *)dst + (((size_t)h * n + i) * m) * elem,
                   (const char *)src + (((size_t)h * Lq + r0 + i) * Lk + c0) * elem,
                   (size_t)m * elem);
}

/* The descriptor of sequence s alone; with sl, its slices are copied there. */
static void sub_desc(const pa_attention *a, int32_t s, const slices *sl, pa_attention *o)
{
    const int32_t H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H;
    const int32_t D = a->head_dim, Dv = a->v_head_dim ? a->v_head_dim : D;
    const int32_t q0 = a->cu_seqlens_q[s], n = a->cu_seqlens_q[s + 1] - q0;
    const int32_t k0 = cu_k(a)[s], m = cu_k(a)[s + 1] - k0;
    const int32_t Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    /* One array for both (self-attention, layer mode): one copy for both. */
    const bool one_mrope = a->q_mrope_positions == a->k_mrope_positions && q0 == k0 && n == m;
    const bool one_pos2 = a->q_positions_2d == a->k_positions_2d && q0 == k0 && n == m;

    *o = *a;
    o->cu_seqlens_q = o->cu_seqlens_k = NULL;
    o->num_seqs = 0;
    if (a->x != NULL) {
        o->x = a->x + (size_t)q0 * a->d_model;
        o->seq_len = n;
    } else {
        o->q = a->q != NULL ? a->q + (size_t)q0 * H * D : NULL;
        /* k and v hold elements of kv_dtype: the offset is in its bytes. */
        const size_t es = a->kv_dtype == PA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
        o->k = a->k != NULL
                   ? (const float *)(const void *)((const char *)a->k + (size_t)k0 * Hkv * D * es)
                   : NULL;
        o->v = a->v != NULL
                   ? (const float *)(const void *)((const char *)a->v + (size_t)k0 * Hkv * Dv * es)
                   : NULL;
        o->q_len = n;
        o->k_len = m;
    }
    /* Layer mode: q and k are the same rows, so q0 == k0 there. */
    if (a->q_positions != NULL)
        o->q_positions = a->q_positions + q0;
    if (a->k_positions != NULL)
        o->k_positions = a->k_positions + k0;
    if (sl == NULL) {
        /* Measuring: the M-RoPE pointers are equal exactly when the run's
         * copies will be (the layout shares rope tables then), never read. */
        if (a->k_mrope_positions != NULL && !one_mrope &&
            a->k_mrope_positions == a->q_mrope_positions)
            o->k_mrope_positions = a->k_mrope_positions + 1;
        if (a->k_positions_2d != NULL && !one_pos2 && a->k_positions_2d == a->q_positions_2d)
            o->k_positions_2d = a->k_positions_2d + 1;
        return;
    }
    if (a->q_mrope_positions != NULL) {
        copy_rows(sl->q_mrope, a->q_mrope_positions, 3, Lq, q0, n);
        o->q_mrope_positions = sl->q_mrope;
    }
    if (a->k_mrope_positions != NULL) {
        if (one_mrope) {
            o->k_mrope_positions = sl->q_mrope;
        } else {
            copy_rows(sl->k_mrope, a->k_mrope_positions, 3, Lk, k0, m);
            o->k_mrope_positions = sl->k_mrope;
        }
    }
    if (a->q_positions_2d != NULL) {
        copy_rows(sl->q_pos2, a->q_positions_2d, 2, Lq, q0, n);
        o->q_positions_2d = sl->q_pos2;
    }
    if (a->k_positions_2d != NULL) {
        if (one_pos2) {
            o->k_positions_2d = sl->q_pos2;
        } else {
            copy_rows(sl->k_pos2, a->k_positions_2d, 2, Lk, k0, m);
            o->k_positions_2d = sl->k_pos2;
        }
    }
    if (a->mask != NULL) {
        copy_block(sl->mask, a->mask, 1, a->mask_heads, Lq, Lk, q0, k0, n, m);
        o->mask = sl->mask;
    }
    if (a->bias != NULL) {
        copy_block(sl->bias, a->bias, sizeof(float), a->bias_heads, Lq, Lk, q0, k0, n, m);
        o->bias = sl->bias;
    }
}

/* The packing itself: both arrays start at 0, rise strictly and end at
 * the lengths of q and k. */
static pa_status check_cu(const pa_attention *a, const int32_t *c, const char *name, int32_t end,
                          const char *end_src, pa_error *err)
{
    const int32_t S = a->num_seqs;
    if (c[0] != 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, name, "%s[0]=%d must be 0", name,
                        (int)c[0]);
    for (int32_t s = 1; s <= S; s++) {
        if (c[s] <= c[s - 1]) {
            char field[48];
            snprintf(field, sizeof field, "%s[%d]", name, (int)s);
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                            "%s must be strictly increasing (no empty sequence): %s[%d]=%d "
                            "after %s[%d]=%d",
                            name, name, (int)s, (int)c[s], name, (int)(s - 1), (int)c[s - 1]);
        }
    }
    if (c[S] != end)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, name,
                        "%s ends at %d, but the packed length L=%d (%s) differs", name, (int)c[S],
                        (int)end, end_src);
    return PA_STATUS_OK;
}

/* Says which sequence an error is about, ahead of its message. */
static void name_sequence(pa_error *err, int32_t s)
{
    char pre[48];
    const size_t cap = sizeof err->message - 1;
    size_t n, len;
    if (err == NULL)
        return;
    n = (size_t)snprintf(pre, sizeof pre, "sequence %d of cu_seqlens: ", (int)s);
    len = strlen(err->message);
    if (len > cap - n)
        len = cap - n;
    memmove(err->message + n, err->message, len);
    memcpy(err->message, pre, n);
    err->message[n + len] = '\0';
}

pa_status pa__packed_check(const pa_attention *a, pa_error *err)
{
    const bool layer = a->x != NULL;
    size_t total = 0;
    pa_status st;
    if (a->cu_seqlens_q == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens_k",
                        "cu_seqlens_k packs the keys of sequences that cu_seqlens packs the "
                        "queries of: send cu_seqlens too");
    if (a->k_pages != NULL || a->v_pages != NULL || a->page_tokens != 0)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "cu_seqlens",
                        "packed sequences and paged keys do not go together");
    if (a->num_seqs < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens",
                        "cu_seqlens has %d values; it needs at least 2 (0, then the end of each "
                        "sequence)",
                        a->num_seqs < 0 ? 0 : (int)a->num_seqs + 1);
    st = check_cu(a, a->cu_seqlens_q, "cu_seqlens", pa_attention_q_len(a),
                  layer ? "x.shape[0]" : "q.shape[0]", err);
    if (st == PA_STATUS_OK && a->cu_seqlens_k != NULL)
        st = check_cu(a, a->cu_seqlens_k, "cu_seqlens_k", pa_attention_k_len(a),
                      layer ? "x.shape[0]" : "k.shape[0] and v.shape[0]", err);
    if (st != PA_STATUS_OK)
        return st;
    if (layer && a->cu_seqlens_k != NULL &&
        memcmp(a->cu_seqlens_q, a->cu_seqlens_k, ((size_t)a->num_seqs + 1) * sizeof(int32_t)))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens_k",
                        "in layer mode q and k are the same tokens: cu_seqlens_k must equal "
                        "cu_seqlens (or be left out)");
    if (a->key_length != -1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "key_length",
                        "key_length=%d pads one sequence; packed sequences (cu_seqlens) have no "
                        "padding: leave key_length out",
                        (int)a->key_length);
    if (layer && a->q_mrope_positions != NULL && a->k_mrope_positions != NULL &&
        memcmp(a->q_mrope_positions, a->k_mrope_positions,
               3 * (size_t)a->seq_len * sizeof(int32_t)))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "q_mrope_positions",
                        "in layer mode q and k are the same tokens, but q_mrope_positions "
                        "differs from k_mrope_positions");
    if (layer && a->q_positions_2d != NULL && a->k_positions_2d != NULL &&
        memcmp(a->q_positions_2d, a->k_positions_2d, 2 * (size_t)a->seq_len * sizeof(int32_t)))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "q_positions_2d",
                        "in layer mode q and k are the same tokens, but q_positions_2d "
                        "differs from k_positions_2d");
    for (int32_t s = 0; s < a->num_seqs; s++) {
        pa_attention sub;
        size_t n;
        sub_desc(a, s, NULL, &sub);
        st = pa__check_one(&sub, err);
        if (st != PA_STATUS_OK) {
            name_sequence(err, s);
            return st;
        }
        n = (size_t)a->num_heads * (size_t)sub.q_len * (size_t)sub.k_len;
        if (a->x != NULL)
            n = (size_t)a->num_heads * (size_t)sub.seq_len * (size_t)sub.seq_len;
        if (total > SIZE_MAX / sizeof(float) - n)
            return pa__fail(err, PA_STATUS_TOO_LARGE, "weights",
                            "the packed weights overflow the address space");
        total += n;
    }
    return PA_STATUS_OK;
}

size_t pa_attention_weights_len(const pa_attention *a)
{
    size_t total = 0;
    if (!packed(a))
        return (size_t)a->num_heads * (size_t)pa_attention_q_len(a) * (size_t)pa_attention_k_len(a);
    for (int32_t s = 0; s < a->num_seqs; s++)
        total += (size_t)a->num_heads * (size_t)(a->cu_seqlens_q[s + 1] - a->cu_seqlens_q[s]) *
                 (size_t)(cu_k(a)[s + 1] - cu_k(a)[s]);
    return total;
}

/* The slices' room for the largest sequence, carved from w. */
static void slices_layout(const pa_attention *a, pa__ws *w, slices *sl)
{
    size_t qmax = 0, kmax = 0, blk = 0;
    for (int32_t s = 0; s < a->num_seqs; s++) {
        const size_t n = (size_t)(a->cu_seqlens_q[s + 1] - a->cu_seqlens_q[s]);
        const size_t m = (size_t)(cu_k(a)[s + 1] - cu_k(a)[s]);
        qmax = n > qmax ? n : qmax;
        kmax = m > kmax ? m : kmax;
        blk = n * m > blk ? n * m : blk;
    }
    memset(sl, 0, sizeof *sl);
    if (a->bias != NULL)
        sl->bias = pa__ws_take(w, blk * (size_t)a->bias_heads, sizeof(float));
    if (a->q_mrope_positions != NULL)
        sl->q_mrope = pa__ws_take(w, 3 * qmax, sizeof(int32_t));
    if (a->k_mrope_positions != NULL)
        sl->k_mrope = pa__ws_take(w, 3 * kmax, sizeof(int32_t));
    if (a->q_positions_2d != NULL)
        sl->q_pos2 = pa__ws_take(w, 2 * qmax, sizeof(int32_t));
    if (a->k_positions_2d != NULL)
        sl->k_pos2 = pa__ws_take(w, 2 * kmax, sizeof(int32_t));
    if (a->mask != NULL)
        sl->mask = pa__ws_take(w, blk * (size_t)a->mask_heads, 1);
}

static size_t slices_size(const pa_attention *a)
{
    pa__ws w;
    slices sl;
    pa__ws_init(&w, NULL, 0);
    slices_layout(a, &w, &sl);
    return pa__ws_size(&w);
}

size_t pa__packed_workspace_size(const pa_attention *a)
{
    size_t most = 0, head = slices_size(a);
    if (head == 0)
        return 0;
    for (int32_t s = 0; s < a->num_seqs; s++) {
        pa_attention sub;
        size_t n;
        sub_desc(a, s, NULL, &sub);
        n = pa__workspace_one(&sub);
        if (n == 0)
            return 0;
        most = n > most ? n : most;
    }
    return most > SIZE_MAX - head ? 0 : head + most;
}

/* The outputs of sequence s within the packed ones (posattn.h). */
static void sub_out(const pa_attention *a, const pa_attention_out *out, int32_t s, size_t w0,
                    pa_attention_out *o)
{
    const size_t H = (size_t)a->num_heads;
    const size_t Hkv = (size_t)(a->num_kv_heads ? a->num_kv_heads : a->num_heads);
    const size_t D = (size_t)a->head_dim;
    const size_t Dv = a->v_head_dim ? (size_t)a->v_head_dim : D;
    const size_t q0 = (size_t)a->cu_seqlens_q[s], k0 = (size_t)cu_k(a)[s];
    *o = *out;
    o->output = out->output + q0 * (a->w_o != NULL ? (size_t)a->d_out : H * Dv);
    if (out->weights != NULL)
        o->weights = out->weights + w0;
    if (out->logits != NULL)
        o->logits = out->logits + w0;
    if (out->q_rot != NULL)
        o->q_rot = out->q_rot + q0 * H * D;
    if (out->k_rot != NULL)
        o->k_rot = out->k_rot + k0 * Hkv * D;
    if (out->entropy != NULL)
        o->entropy = out->entropy + q0 * H;
    if (out->distance != NULL)
        o->distance = out->distance + q0 * H;
    if (out->far_share != NULL)
        o->far_share = out->far_share + q0 * H;
}

pa_status pa__packed_run_part(const pa_attention *a, const pa_attention_out *out, int32_t part,
                              int32_t nparts, void *ws, size_t ws_size, pa_error *err)
{
    size_t need, head, w0 = 0;
    slices sl;
    pa__ws w;
    pa_status st = pa__packed_check(a, err);
    if (st != PA_STATUS_OK)
        return st;
    if (out == NULL || out->output == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "output", "an output buffer is required");
    need = pa__packed_workspace_size(a);
    if (need == 0)
        return pa__fail(err, PA_STATUS_TOO_LARGE, "", "the workspace size overflows");
    if (ws == NULL || ws_size < need)
        return pa__fail(err, PA_STATUS_WORKSPACE_TOO_SMALL, "",
                        "workspace of %zu bytes is smaller than the %zu bytes needed", ws_size,
                        need);
    /* The slices first, then the sequence's own workspace (which realigns). */
    head = slices_size(a);
    pa__ws_init_aligned(&w, ws, head);
    slices_layout(a, &w, &sl);
    for (int32_t s = 0; s < a->num_seqs; s++) {
        pa_attention sub;
        pa_attention_out o;
        sub_desc(a, s, &sl, &sub);
        sub_out(a, out, s, w0, &o);
        st = pa__run_part_one(&sub, &o, part, nparts, (char *)ws + head, ws_size - head, err);
        if (st != PA_STATUS_OK) {
            name_sequence(err, s);
            return st;
        }
        w0 += pa_attention_weights_len(&sub);
    }
    return PA_STATUS_OK;
}
