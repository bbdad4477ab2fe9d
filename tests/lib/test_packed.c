/* test_packed.c - packed sequences (cu_seqlens, lib/attention_packed.c).
 *
 * Two checks of every case: the packed call equals the sequences sent as
 * separate calls bit for bit (memcmp of every output: output, weights,
 * logits, q_rot, k_rot, entropy, distance, far_share), the separate calls'
 * tensors sliced here, not by the library; and the packed call agrees with
 * the double-precision reference (tests/ref_attention.c) of the full call
 * with an explicit block-diagonal mask and per-sequence positions, which
 * does not go through the per-sequence loop at all (tolerance as
 * attention_fixture.h: 2e-5 + 1e-4 |want|). Prefill and decode shapes,
 * causal and not, cross attention, GQA, every q/k/v scheme, layer mode,
 * mask, bias, sinks, M-RoPE rows, caller positions, split parts; then the
 * errors.
 */
#include "attention_fixture.h"
#include "ref_attention.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every output of a call, in the packed layout (posattn.h). */
typedef struct res {
    float *out, *w, *lg, *qr, *kr, *ent, *dist, *far;
    size_t n_out, n_w, n_q, n_k, n_st;
} res;

static void res_alloc(const pa_attention *a, res *r)
{
    const size_t H = (size_t)a->num_heads;
    const size_t Hkv = (size_t)(a->num_kv_heads ? a->num_kv_heads : a->num_heads);
    const size_t D = (size_t)a->head_dim,
                 Dv = (size_t)(a->v_head_dim ? a->v_head_dim : a->head_dim);
    const size_t Lq = (size_t)pa_attention_q_len(a), Lk = (size_t)pa_attention_k_len(a);
    r->n_out = Lq * (a->w_o != NULL ? (size_t)a->d_out : H * Dv);
    r->n_w = pa_attention_weights_len(a);
    r->n_q = Lq * H * D;
    r->n_k = Lk * Hkv * D;
    r->n_st = H * Lq;
    r->out = tu_alloc(r->n_out, 4);
    r->w = tu_alloc(r->n_w, 4);
    r->lg = tu_alloc(r->n_w, 4);
    r->qr = tu_alloc(r->n_q, 4);
    r->kr = tu_alloc(r->n_k, 4);
    r->ent = tu_alloc(r->n_st, 4);
    r->dist = tu_alloc(r->n_st, 4);
    r->far = tu_alloc(r->n_st, 4);
}

static void res_free(res *r)
{
    free(r->out);
    free(r->w);
    free(r->lg);
    free(r->qr);
    free(r->kr);
    free(r->ent);
    free(r->dist);
    free(r->far);
}

static pa_attention_out outs(res *r, size_t o_out, size_t o_w, size_t o_q, size_t o_k, size_t o_st)
{
    pa_attention_out o = {0};
    o.output = r->out + o_out;
    o.weights = r->w + o_w;
    o.logits = r->lg + o_w;
    o.q_rot = r->qr + o_q;
    o.k_rot = r->kr + o_k;
    o.entropy = r->ent + o_st;
    o.distance = r->dist + o_st;
    o.far_share = r->far + o_st;
    o.far_distance = 3;
    return o;
}

/* Runs a as nparts parts (each with its own workspace) into r. */
static void run_into(const pa_attention *a, const pa_attention_out *o, int nparts)
{
    pa_error err;
    size_t wsz = pa_attention_workspace_size(a);
    assert_true(wsz > 0);
    for (int p = 0; p < nparts; p++) {
        void *ws = tu_alloc(wsz, 1);
        TU_ASSERT_STATUS(pa_attention_run_part(a, o, p, nparts, ws, wsz, &err), PA_STATUS_OK, &err);
        free(ws);
    }
}

static void run_packed(const pa_attention *a, int nparts, res *r)
{
    pa_attention_out o;
    pa_error err;
    TU_ASSERT_STATUS(pa_attention_check(a, &err), PA_STATUS_OK, &err);
    res_alloc(a, r);
    o = outs(r, 0, 0, 0, 0, 0);
    run_into(a, &o, nparts);
}

/* [heads, n, m] at (r0, c0) of [heads, Lq, Lk], sliced by hand. */
static void *block(const void *src, size_t elem, int heads, int Lq, int Lk, int r0, int c0, int n,
                   int m)
{
    char *dst = tu_alloc((size_t)heads * n * m, elem);
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < n; i++)
            memcpy(dst + ((size_t)h * n + i) * m * elem,
                   (const char *)src + (((size_t)h * Lq + r0 + i) * Lk + c0) * elem,
                   (size_t)m * elem);
    return dst;
}

/* rows [R, n] from r0 of position rows [R, L] (M-RoPE's 3, rope2d's 2) */
static int32_t *pos_rows(const int32_t *src, int R, int L, int r0, int n)
{
    int32_t *dst = tu_alloc((size_t)R * (size_t)n, sizeof(int32_t));
    for (int r = 0; r < R; r++)
        memcpy(dst + (size_t)r * n, src + (size_t)r * L + r0, (size_t)n * sizeof(int32_t));
    return dst;
}

/* Each sequence as its own call, written where the packed call writes it. */
static void run_separate(const pa_attention *a, res *r)
{
    const int H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H;
    const int D = a->head_dim, Dv = a->v_head_dim ? a->v_head_dim : D;
    const int Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    const int32_t *cq = a->cu_seqlens_q, *ck = a->cu_seqlens_k ? a->cu_seqlens_k : cq;
    size_t w0 = 0;
    res_alloc(a, r);
    for (int s = 0; s < a->num_seqs; s++) {
        pa_attention b = *a;
        pa_attention_out o;
        const int q0 = cq[s], n = cq[s + 1] - q0, k0 = ck[s], m = ck[s + 1] - k0;
        void *mask = NULL, *bias = NULL;
        int32_t *qm = NULL, *km = NULL, *q2 = NULL, *k2 = NULL;
        b.cu_seqlens_q = b.cu_seqlens_k = NULL;
        b.num_seqs = 0;
        if (a->x != NULL) {
            b.x = a->x + (size_t)q0 * a->d_model;
            b.seq_len = n;
        } else {
            b.q = a->q + (size_t)q0 * H * D;
            b.k = a->k + (size_t)k0 * Hkv * D;
            b.v = a->v + (size_t)k0 * Hkv * Dv;
            b.q_len = n;
            b.k_len = m;
        }
        if (a->q_positions)
            b.q_positions = a->q_positions + q0;
        if (a->k_positions)
            b.k_positions = a->k_positions + k0;
        if (a->mask)
            b.mask = mask = block(a->mask, 1, a->mask_heads, Lq, Lk, q0, k0, n, m);
        if (a->bias)
            b.bias = bias = block(a->bias, 4, a->bias_heads, Lq, Lk, q0, k0, n, m);
        if (a->q_mrope_positions)
            b.q_mrope_positions = qm = pos_rows(a->q_mrope_positions, 3, Lq, q0, n);
        if (a->k_mrope_positions)
            b.k_mrope_positions = km = pos_rows(a->k_mrope_positions, 3, Lk, k0, m);
        if (a->q_positions_2d)
            b.q_positions_2d = q2 = pos_rows(a->q_positions_2d, 2, Lq, q0, n);
        if (a->k_positions_2d)
            b.k_positions_2d = k2 = pos_rows(a->k_positions_2d, 2, Lk, k0, m);
        o = outs(r, (size_t)q0 * (a->w_o ? (size_t)a->d_out : (size_t)H * Dv), w0,
                 (size_t)q0 * H * D, (size_t)k0 * Hkv * D, (size_t)q0 * H);
        run_into(&b, &o, 1);
        w0 += (size_t)H * n * m;
        free(mask);
        free(bias);
        free(qm);
        free(km);
        free(q2);
        free(k2);
    }
    assert_int_equal(w0, r->n_w);
}

static void assert_same(const res *x, const res *y)
{
    assert_int_equal(x->n_w, y->n_w);
    assert_memory_equal(x->out, y->out, x->n_out * 4);
    assert_memory_equal(x->w, y->w, x->n_w * 4);
    assert_memory_equal(x->lg, y->lg, x->n_w * 4);
    assert_memory_equal(x->qr, y->qr, x->n_q * 4);
    assert_memory_equal(x->kr, y->kr, x->n_k * 4);
    assert_memory_equal(x->ent, y->ent, x->n_st * 4);
    assert_memory_equal(x->dist, y->dist, x->n_st * 4);
    assert_memory_equal(x->far, y->far, x->n_st * 4);
}

/* The full call with a block-diagonal mask and each sequence's positions,
 * through the reference: the packed output and each sequence's weights. */
static void check_reference(const pa_attention *a, const res *r)
{
    const int H = a->num_heads, Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    const int32_t *cq = a->cu_seqlens_q, *ck = a->cu_seqlens_k ? a->cu_seqlens_k : cq;
    const int mh = a->mask ? a->mask_heads : 1;
    pa_attention f = *a;
    int32_t *qp = tu_alloc((size_t)Lq, 4), *kp = tu_alloc((size_t)Lk, 4);
    uint8_t *mask = tu_alloc((size_t)mh * Lq * Lk, 1);
    double *out = tu_alloc((size_t)ref_attention_out_len(a), 8);
    double *w = tu_alloc((size_t)H * Lq * Lk, 8), *wd = tu_alloc(r->n_w, 8);
    size_t w0 = 0;
    for (int s = 0; s < a->num_seqs; s++) {
        const int n = cq[s + 1] - cq[s], m = ck[s + 1] - ck[s];
        for (int i = 0; i < n; i++)
            qp[cq[s] + i] = a->q_positions ? a->q_positions[cq[s] + i] : m - n + i;
        for (int j = 0; j < m; j++)
            kp[ck[s] + j] = a->k_positions ? a->k_positions[ck[s] + j] : j;
    }
    for (int h = 0; h < mh; h++)
        for (int s = 0; s < a->num_seqs; s++)
            for (int i = cq[s]; i < cq[s + 1]; i++)
                for (int j = ck[s]; j < ck[s + 1]; j++) {
                    size_t e = ((size_t)h * Lq + i) * Lk + j;
                    mask[e] = a->mask ? a->mask[e] : 1;
                }
    f.cu_seqlens_q = f.cu_seqlens_k = NULL;
    f.num_seqs = 0;
    f.q_positions = qp;
    f.k_positions = kp;
    f.mask = mask;
    f.mask_heads = mh;
    ref_attention(&f, out, w, NULL, NULL, NULL);
    TU_ASSERT_CLOSE(r->out, out, r->n_out, ATOL, RTOL);
    for (int s = 0; s < a->num_seqs; s++)
        for (int h = 0; h < H; h++)
            for (int i = cq[s]; i < cq[s + 1]; i++)
                for (int j = ck[s]; j < ck[s + 1]; j++)
                    wd[w0++] = w[((size_t)h * Lq + i) * Lk + j];
    assert_int_equal(w0, r->n_w);
    TU_ASSERT_CLOSE(r->w, wd, r->n_w, ATOL, RTOL);
    free(qp);
    free(kp);
    free(mask);
    free(out);
    free(w);
    free(wd);
}

/* Packed == separate (bit for bit) == the block-diagonal reference, and
 * split parts == one part. */
static void check_packed(const pa_attention *a, bool reference)
{
    res p, s;
    run_packed(a, 1, &p);
    run_separate(a, &s);
    assert_same(&p, &s);
    if (reference)
        check_reference(a, &p);
    for (int np = 2; np <= 3 && a->x == NULL; np++) {
        res q;
        run_packed(a, np, &q);
        assert_same(&p, &q);
        res_free(&q);
    }
    res_free(&p);
    res_free(&s);
}

/* Lengths across a tile (BQ, BK) and below the decode kernel's 8 rows. */
static const int32_t prefill_cu[] = {0, 5, 22, 92, 95};

static void test_prefill_schemes(void **state)
{
    (void)state;
    for (size_t t = 0; t < 5; t++) {
        for (int causal = 0; causal < 2; causal++) {
            fixture f;
            setup_qkv(&f, qkv_schemes[t], 95, 95, 4, 2, 16, 8, 7100 + t * 2 + (size_t)causal);
            add_tables(&f, 4, 16, 8, 7200 + t);
            f.a.causal = causal;
            f.a.cu_seqlens_q = prefill_cu;
            f.a.num_seqs = 4;
            check_packed(&f.a, true);
            fixture_free(&f);
        }
    }
}

/* Decode: one query per sequence against caches of different lengths,
 * causal (the query is each cache's last position), GQA. */
static void test_decode(void **state)
{
    (void)state;
    static const int32_t cq[] = {0, 1, 2, 3, 4}, ck[] = {0, 7, 37, 49, 120};
    for (size_t t = 0; t < 5; t++) {
        fixture f;
        setup_qkv(&f, qkv_schemes[t], 4, 120, 8, 2, 16, 0, 7300 + t);
        add_tables(&f, 8, 16, 16, 7310 + t);
        f.a.causal = true;
        f.a.cu_seqlens_q = cq;
        f.a.cu_seqlens_k = ck;
        f.a.num_seqs = 4;
        check_packed(&f.a, true);
        fixture_free(&f);
    }
}

/* Cross attention: keys packed by cu_seqlens_k, Lq_s > Lk_s and <, causal
 * bottom-right within each pair (rows with no key are zeros). */
static void test_cross(void **state)
{
    (void)state;
    static const int32_t cq[] = {0, 4, 14, 50}, ck[] = {0, 9, 12, 80};
    for (int causal = 0; causal < 2; causal++) {
        fixture f;
        setup_qkv(&f, PA_SCHEME_ROPE, 50, 80, 2, 1, 8, 0, 7400 + (uint64_t)causal);
        f.a.causal = causal;
        f.a.window = causal ? 20 : 0;
        f.a.cu_seqlens_q = cq;
        f.a.cu_seqlens_k = ck;
        f.a.num_seqs = 3;
        check_packed(&f.a, true);
        fixture_free(&f);
    }
}

/* mask and bias (full [heads, Lq, Lk]; only the diagonal blocks read),
 * sinks, softcap, caller positions per packed row, alibi. */
static void test_options(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 9, 40, 47};
    tu_rng r;
    fixture f;
    const int L = 47, H = 2;
    float sinks[2] = {0.5f, -1.0f};
    int32_t pos[47];
    uint8_t *mask;
    float *bias;
    tu_rng_seed(&r, 7500);
    setup_qkv(&f, PA_SCHEME_ALIBI, L, L, H, H, 8, 0, 7501);
    mask = rand_mask(&r, (size_t)H * L * L, 0.7);
    bias = rand_tensor(&r, (size_t)L * L, -1, 1);
    for (int i = 0; i < L; i++)
        pos[i] = 100 + 3 * i;
    f.a.cu_seqlens_q = cu;
    f.a.num_seqs = 3;
    f.a.causal = true;
    f.a.mask = mask;
    f.a.mask_heads = H;
    f.a.bias = bias;
    f.a.bias_heads = 1;
    f.a.sinks = sinks;
    f.a.softcap = 5.0f;
    check_packed(&f.a, false);
    f.a.q_positions = pos;
    f.a.k_positions = pos;
    check_packed(&f.a, false);
    f.a.sinks = NULL;
    f.a.bias = NULL;
    f.a.softcap = 0.0f;
    check_packed(&f.a, true);
    free(mask);
    free(bias);
    fixture_free(&f);
}

/* M-RoPE rows [3, L] per packed row (a vision tower's images). */
static void test_mrope(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 6, 15};
    int32_t rows[3 * 15];
    fixture f;
    for (int i = 0; i < 15; i++) {
        const int t = i < 6 ? i : i - 6;
        rows[i] = 0;
        rows[15 + i] = t / 3;
        rows[30 + i] = t % 3;
    }
    setup_qkv(&f, PA_SCHEME_ROPE, 15, 15, 2, 2, 16, 0, 7600);
    f.scheme.rope.mrope_section[0] = 2;
    f.scheme.rope.mrope_section[1] = 3;
    f.scheme.rope.mrope_section[2] = 3;
    f.a.q_mrope_positions = rows;
    f.a.k_mrope_positions = rows;
    f.a.cu_seqlens_q = cu;
    f.a.num_seqs = 2;
    check_packed(&f.a, false);
    {
        /* One array for both, the keys packed otherwise: separate tables
         * (and workspace for them) in each sequence. */
        static const int32_t cq[] = {0, 3, 9, 15}, ck[] = {0, 5, 11, 15};
        f.a.cu_seqlens_q = cq;
        f.a.cu_seqlens_k = ck; /* sequence 1: 6 and 6 rows from 3 and 5 */
        f.a.num_seqs = 3;
        check_packed(&f.a, false);
    }
    fixture_free(&f);
}

/* rope2d: images of their own sizes packed, each with its (row, column)
 * rows [2, L] per packed row; and images of one grid size (the scheme's
 * grid, each sequence one image after a class token). */
static void test_rope2d(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 6, 18}, cg[] = {0, 7, 14, 21};
    int32_t rows[2 * 18];
    fixture f;
    for (int i = 0; i < 18; i++) {
        const int t = i < 6 ? i : i - 6, cols = i < 6 ? 3 : 4; /* 2 x 3, then 3 x 4 */
        rows[i] = t / cols;
        rows[18 + i] = t % cols;
    }
    setup_qkv(&f, PA_SCHEME_ROPE2D, 18, 18, 2, 1, 16, 0, 7700);
    f.scheme.rope2d.variant = PA_ROPE2D_PIXTRAL;
    f.a.q_positions_2d = rows;
    f.a.k_positions_2d = rows;
    f.a.cu_seqlens_q = cu;
    f.a.num_seqs = 2;
    check_packed(&f.a, false);
    fixture_free(&f);
    setup_qkv(&f, PA_SCHEME_ROPE2D, 21, 21, 2, 2, 8, 0, 7701);
    f.scheme.rope2d.grid_rows = 2;
    f.scheme.rope2d.grid_cols = 3;
    f.scheme.rope2d.prefix_tokens = 1;
    f.a.cu_seqlens_q = cg;
    f.a.num_seqs = 3;
    check_packed(&f.a, false);
    fixture_free(&f);
}

/* Layer mode: x packed, projections and w_o per sequence, rope and the
 * absolute schemes (whose positions restart too). */
static void test_layer(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 3, 20, 41};
    static const pa_scheme_type types[] = {PA_SCHEME_ROPE, PA_SCHEME_SINUSOIDAL, PA_SCHEME_NONE};
    for (size_t t = 0; t < 3; t++) {
        fixture f;
        setup_layer(&f, types[t], 41, 16, 4, 2, 4, 0, t == 2 ? 0 : 12, 7700 + t);
        f.a.causal = t != 1;
        f.a.cu_seqlens_q = cu;
        f.a.cu_seqlens_k = t == 2 ? cu : NULL;
        f.a.num_seqs = 3;
        check_packed(&f.a, true);
        fixture_free(&f);
    }
}

/* One sequence is the unpacked call. */
static void test_one_sequence(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 30};
    fixture f;
    res p, u;
    setup_qkv(&f, PA_SCHEME_ROPE, 30, 30, 2, 2, 8, 0, 7800);
    f.a.causal = true;
    run_packed(&f.a, 1, &u);
    f.a.cu_seqlens_q = cu;
    f.a.num_seqs = 1;
    run_packed(&f.a, 1, &p);
    assert_same(&p, &u);
    res_free(&p);
    res_free(&u);
    fixture_free(&f);
}

static void expect_error(const pa_attention *a, pa_status want, const char *field, const char *says)
{
    pa_error err;
    memset(&err, 0, sizeof err);
    TU_ASSERT_STATUS(pa_attention_check(a, &err), want, &err);
    assert_string_equal(err.field, field);
    if (strstr(err.message, says) == NULL)
        fail_msg("message '%s' does not say '%s'", err.message, says);
}

static void test_errors(void **state)
{
    (void)state;
    int32_t cu[4] = {0, 3, 5, 10}, ck[4] = {0, 2, 6, 12};
    fixture f;
    setup_qkv(&f, PA_SCHEME_NONE, 10, 12, 2, 2, 4, 0, 7900);
    f.a.cu_seqlens_k = ck;
    f.a.num_seqs = 3;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens_k", "send cu_seqlens too");
    f.a.cu_seqlens_q = cu;
    f.a.num_seqs = 0;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens", "has 1 values");
    f.a.num_seqs = 3;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    cu[0] = 1;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens", "cu_seqlens[0]=1 must be 0");
    cu[0] = 0;
    cu[2] = 3;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens[2]", "cu_seqlens[2]=3 after");
    cu[2] = 5;
    cu[3] = 11;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "cu_seqlens", "L=10 (q.shape[0])");
    cu[3] = 10;
    ck[3] = 13;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "cu_seqlens_k", "L=12 (k.shape[0]");
    ck[3] = 12;
    f.a.key_length = 4;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "key_length", "no padding");
    f.a.key_length = -1;
    f.a.causal = true;
    f.scheme.type = PA_SCHEME_ALIBI;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    {
        /* What a sequence gets wrong names the sequence. */
        f.a.temperature_floor_scale = 4;
        f.a.temperature_attn_scale = 0.1;
        pa_error err;
        ck[1] = 1; /* sequence 0: 3 queries, 1 key: default positions -2, -1, 0 */
        assert_int_not_equal(pa_attention_check(&f.a, &err), PA_STATUS_OK);
        assert_non_null(strstr(err.message, "sequence 0 of cu_seqlens"));
        ck[1] = 2;
        f.a.temperature_floor_scale = 0;
        f.a.temperature_attn_scale = 0;
    }
    {
        /* the split by keys and the analyses take one sequence */
        pa_attention_out o = {0};
        float out[10 * 2 * 4];
        o.output = out;
        assert_int_equal(pa_attention_partials_size(&f.a, &o, 2), 0);
    }
    fixture_free(&f);

    setup_layer(&f, PA_SCHEME_NONE, 10, 4, 2, 2, 2, 0, 0, 7901);
    f.a.cu_seqlens_q = cu;
    f.a.cu_seqlens_k = ck;
    f.a.num_seqs = 3;
    expect_error(&f.a, PA_STATUS_SHAPE_MISMATCH, "cu_seqlens_k", "L=10 (x.shape[0])");
    ck[1] = 3;
    ck[2] = 5;
    ck[3] = 10;
    TU_ASSERT_STATUS(pa_attention_check(&f.a, NULL), PA_STATUS_OK, NULL);
    ck[2] = 6;
    expect_error(&f.a, PA_STATUS_INVALID_ARGUMENT, "cu_seqlens_k", "must equal cu_seqlens");
    f.a.cu_seqlens_k = NULL;
    {
        int32_t perm[10] = {1, 0, 2, 3, 4, 5, 6, 7, 8, 9};
        pa_error err;
        size_t wsz = pa_permutation_workspace_size(&f.a);
        void *ws = tu_alloc(wsz, 1);
        double d;
        TU_ASSERT_STATUS(pa_analyze_permutation(&f.a, perm, ws, wsz, &d, &err),
                         PA_STATUS_UNSUPPORTED, &err);
        assert_string_equal(err.field, "cu_seqlens");
        free(ws);
    }
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_schemes), cmocka_unit_test(test_decode),
        cmocka_unit_test(test_cross),           cmocka_unit_test(test_options),
        cmocka_unit_test(test_mrope),           cmocka_unit_test(test_rope2d),
        cmocka_unit_test(test_layer),           cmocka_unit_test(test_one_sequence),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
