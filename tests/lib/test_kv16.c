/* test_kv16.c - keys and values in 16 bits (pa_attention.kv_dtype bf16 and
 * f16): every result of a 16-bit call equals, bit for bit, the float32
 * call on the widened arrays (widened here, apart from lib/dtype.h), in
 * the decode kernel (few query rows) and the tiled one, contiguous and
 * paged, whole, in parts by heads and split by keys; for every scheme of
 * q/k/v mode, GQA, masks, sinks, softcap, rope with keys rotated by the
 * call or already rotated, k norms, packed sequences and every returned
 * result. Random 16-bit patterns include zeros of both signs and
 * subnormals. Then a double reference check, and the refusals. make test
 * runs it with the kernels this CPU picks and with POSATTN_KERNEL=portable,
 * so both the widening row kernels (AVX2 or AVX-512) and the portable ones
 * are compared against their float twins.
 */
#include "attention_fixture.h"
#include "posattn_diff.h"
#include "posattn_mla.h"
#include "ref_attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pa_dtype dtypes[2] = {PA_DTYPE_BF16, PA_DTYPE_F16};

/* Element h of type t as a float, computed apart from the library's. */
static float widen(pa_dtype t, uint16_t h)
{
    int e, m;
    double v;
    if (t == PA_DTYPE_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    e = (h >> 10) & 31;
    m = h & 1023;
    if (e == 31)
        return m != 0 ? NAN : (h & 0x8000) ? -INFINITY : INFINITY;
    v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}

/* A random finite pattern of magnitude up to 2: mostly normals from 2^-12,
 * a few subnormals and zeros (both signs). */
static uint16_t rand16(pa_dtype t, tu_rng *r)
{
    const uint32_t sign = tu_uniform(r, 0, 1) < 0.5 ? 0x8000u : 0u;
    const double u = tu_uniform(r, 0, 1);
    const bool tiny = u < 0.03, zero = u < 0.01;
    if (t == PA_DTYPE_BF16) {
        const uint32_t e = tiny ? 0u : 115u + (uint32_t)tu_uniform(r, 0, 13);
        const uint32_t m = zero ? 0u : (uint32_t)tu_uniform(r, 0, 128);
        return (uint16_t)(sign | e << 7 | m);
    } else {
        const uint32_t e = tiny ? 0u : 3u + (uint32_t)tu_uniform(r, 0, 13);
        const uint32_t m = zero ? 0u : (uint32_t)tu_uniform(r, 0, 1024);
        return (uint16_t)(sign | e << 10 | m);
    }
}

/* n random patterns of t and their widened floats (both tu_alloc'd). */
static uint16_t *rand_kv(pa_dtype t, tu_rng *r, size_t n, float **wide)
{
    uint16_t *x = tu_alloc(n, sizeof(uint16_t));
    *wide = tu_alloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = rand16(t, r);
        (*wide)[i] = widen(t, x[i]);
    }
    return x;
}

/* The rows of x [Lk, row] (elements of es bytes) in pages of pt rows,
 * placed in a pool in shuffled order; the pool's unused bytes are 0xFF
 * (NaN as float, bf16 and f16), so a kernel reading past a page shows it.
 * The shuffle depends on the seed only, so a float and a 16-bit copy are
 * paged alike. */
typedef struct paged {
    unsigned char *pool;
    const float **pages;
} paged;

static void page_out(paged *pg, const void *x, int32_t Lk, size_t row, size_t es, int32_t pt,
                     uint64_t seed)
{
    const int32_t n = (Lk + pt - 1) / pt, slots = n + 3;
    int32_t *slot = tu_alloc((size_t)slots, sizeof(int32_t));
    const size_t page = (size_t)pt * row * es;
    tu_rng r;
    tu_rng_seed(&r, seed);
    pg->pool = tu_alloc((size_t)slots * page, 1);
    pg->pages = tu_alloc((size_t)n, sizeof(*pg->pages));
    memset(pg->pool, 0xFF, (size_t)slots * page);
    for (int32_t i = 0; i < slots; i++)
        slot[i] = i;
    for (int32_t i = slots - 1; i > 0; i--) {
        const int32_t j = (int32_t)tu_uniform(&r, 0, i + 1), t = slot[i];
        slot[i] = slot[j];
        slot[j] = t;
    }
    for (int32_t i = 0; i < n; i++) {
        const int32_t rows = Lk - i * pt < pt ? Lk - i * pt : pt;
        unsigned char *dst = pg->pool + (size_t)slot[i] * page;
        memcpy(dst, (const unsigned char *)x + (size_t)i * page, (size_t)rows * row * es);
        pg->pages[i] = (const float *)(const void *)dst;
    }
    free(slot);
}

static void paged_free(paged *pg)
{
    free(pg->pool);
    free(pg->pages);
}

/* Every output of a call, allocated for a's sizes. */
typedef struct outs {
    pa_attention_out o;
    size_t n[8];
} outs;

static void outs_alloc(outs *x, const pa_attention *a, bool weights)
{
    const int H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H, D = a->head_dim;
    const int Dv = a->v_head_dim ? a->v_head_dim : D, Lq = a->q_len, Lk = a->k_len;
    memset(x, 0, sizeof *x);
    x->n[0] = (size_t)Lq * H * Dv;
    x->n[1] = x->n[2] = weights ? pa_attention_weights_len(a) : 0;
    x->n[3] = (size_t)Lq * H * D;
    x->n[4] = (size_t)Lk * Hkv * D;
    x->n[5] = x->n[6] = x->n[7] = (size_t)H * Lq;
    x->o.output = tu_alloc(x->n[0], sizeof(float));
    if (weights) {
        x->o.weights = tu_alloc(x->n[1], sizeof(float));
        x->o.logits = tu_alloc(x->n[2], sizeof(float));
    }
    x->o.q_rot = tu_alloc(x->n[3], sizeof(float));
    x->o.k_rot = tu_alloc(x->n[4], sizeof(float));
    x->o.entropy = tu_alloc(x->n[5], sizeof(float));
    x->o.distance = tu_alloc(x->n[6], sizeof(float));
    x->o.far_share = tu_alloc(x->n[7], sizeof(float));
    x->o.far_distance = Lk / 4;
}

static void outs_ptrs(outs *x, float **p)
{
    p[0] = x->o.output;
    p[1] = x->o.weights;
    p[2] = x->o.logits;
    p[3] = x->o.q_rot;
    p[4] = x->o.k_rot;
    p[5] = x->o.entropy;
    p[6] = x->o.distance;
    p[7] = x->o.far_share;
}

static void outs_free(outs *x)
{
    float *p[8];
    outs_ptrs(x, p);
    for (int i = 0; i < 8; i++)
        free(p[i]);
}

static const char *const out_names[8] = {"output", "weights", "logits",   "q_rot",
                                         "k_rot",  "entropy", "distance", "far_share"};

static void same_bits(outs *x, outs *y, const char *what, const char *name)
{
    float *p[8], *q[8];
    outs_ptrs(x, p);
    outs_ptrs(y, q);
    for (int i = 0; i < 8; i++)
        if (p[i] != NULL && memcmp(p[i], q[i], x->n[i] * sizeof(float)) != 0) {
            size_t e = 0;
            while (memcmp(p[i] + e, q[i] + e, sizeof(float)) == 0)
                e++;
            fail_msg("%s, %s: %s[%zu] float32 %.9g, 16-bit %.9g", name, what, out_names[i], e,
                     (double)p[i][e], (double)q[i][e]);
        }
}

/* How a call is run: whole, in two parts by heads, or by keys. */
enum { WHOLE, PARTS, KEYS };

static void run(const pa_attention *a, outs *x, int how)
{
    pa_error err;
    const size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    assert_true(wsz > 0);
    if (how == WHOLE) {
        TU_ASSERT_STATUS(pa_attention_run(a, &x->o, ws, wsz, &err), PA_STATUS_OK, &err);
    } else if (how == PARTS) {
        for (int p = 1; p >= 0; p--)
            TU_ASSERT_STATUS(pa_attention_run_part(a, &x->o, p, 2, ws, wsz, &err), PA_STATUS_OK,
                             &err);
    } else {
        const size_t psz = pa_attention_partials_size(a, &x->o, 3);
        void *parts = tu_alloc(psz, 1);
        assert_true(psz > 0);
        for (int p = 2; p >= 0; p--)
            TU_ASSERT_STATUS(pa_attention_run_keys(a, &x->o, p, 3, parts, ws, wsz, &err),
                             PA_STATUS_OK, &err);
        TU_ASSERT_STATUS(pa_attention_merge(a, &x->o, 3, parts, &err), PA_STATUS_OK, &err);
        free(parts);
    }
    free(ws);
}

typedef struct kcase {
    const char *name;
    pa_scheme_type type;
    int Lq, Lk, H, Hkv, D, Dv;
    int pt; /* > 0: paged */
    bool prerotated, causal, masks;
    int knorm;   /* 0 none, 1 weight [D], 2 weight [Hkv*D] (whole rows), 3 unweighted */
    bool packed; /* two sequences (cu_seqlens) */
} kcase;

/* The scheme parameters a case's type needs, owned by the caller's
 * buffer `own` (16 floats per head at least). */
static void scheme_params(fixture *f, const kcase *c, float *own, int32_t *pos2, tu_rng *r)
{
    pa_scheme *s = &f->scheme;
    const int H = c->H, Dv = c->Dv ? c->Dv : c->D;
    add_tables(f, H, c->D, Dv, 9100);
    switch (c->type) {
    case PA_SCHEME_KERPLE:
        for (int h = 0; h < 2 * H; h++)
            own[h] = (float)tu_uniform(r, 0.1, 1.5);
        s->kerple.r1 = own;
        s->kerple.r2 = own + H;
        s->kerple.num_r1 = s->kerple.num_r2 = H;
        break;
    case PA_SCHEME_SANDWICH:
        s->sandwich.hidden_size = c->D;
        break;
    case PA_SCHEME_FIRE: /* hidden 2: w1 [2], b1 [2], w2 [2, H], b2 [H] */
        for (int i = 0; i < 4 + 3 * H; i++)
            own[i] = (float)tu_uniform(r, -1, 1);
        s->fire.w1 = own;
        s->fire.b1 = own + 2;
        s->fire.w2 = own + 4;
        s->fire.b2 = own + 4 + 2 * H;
        s->fire.num_w1 = s->fire.num_b1 = 2;
        s->fire.num_w2 = 2 * H;
        s->fire.num_b2 = H;
        break;
    case PA_SCHEME_COPE: /* pos_emb [1, 6, D] */
        for (int i = 0; i < 6 * c->D; i++)
            own[i] = (float)tu_uniform(r, -1, 1);
        s->cope.npos_max = 6;
        s->cope.pos_emb = own;
        s->cope.pos_emb_heads = 1;
        s->cope.pos_emb_rows = 6;
        s->cope.pos_emb_cols = c->D;
        break;
    case PA_SCHEME_ROPE2D: /* (row, column) of every token given */
        for (int i = 0; i < 2 * (c->Lq + c->Lk); i++)
            pos2[i] = (int32_t)tu_uniform(r, 0, 12);
        f->a.q_positions_2d = pos2;
        f->a.k_positions_2d = pos2 + 2 * c->Lq;
        break;
    default:
        break;
    }
}

static void check_case(const kcase *c, pa_dtype t, uint64_t seed)
{
    fixture f;
    tu_rng r;
    pa_attention a32, a16;
    const int Dv = c->Dv ? c->Dv : c->D;
    const size_t nk = (size_t)c->Lk * c->Hkv * c->D, nv = (size_t)c->Lk * c->Hkv * Dv;
    float *kw, *vw, *sinks = NULL, *bias = NULL, *knw = NULL;
    float *own = tu_alloc(16 * (size_t)c->H + 8 * (size_t)c->D, sizeof(float));
    int32_t *pos2 = tu_alloc(2 * (size_t)(c->Lq + c->Lk), sizeof(int32_t));
    int32_t cu_q[3], cu_k[3];
    uint16_t *k16, *v16;
    uint8_t *mask = NULL;
    paged kp32 = {0}, vp32 = {0}, kp16 = {0}, vp16 = {0};
    char name[96];
    snprintf(name, sizeof name, "%s %s", c->name, pa_dtype_name(t));
    tu_rng_seed(&r, seed);
    setup_qkv(&f, c->type, c->Lq, c->Lk, c->H, c->Hkv, c->D, c->Dv, seed);
    scheme_params(&f, c, own, pos2, &r);
    k16 = rand_kv(t, &r, nk, &kw);
    v16 = rand_kv(t, &r, nv, &vw);
    f.a.causal = c->causal;
    f.a.k_prerotated = c->prerotated;
    if (c->masks) {
        sinks = rand_tensor(&r, (size_t)c->H, -1, 1);
        bias = rand_tensor(&r, (size_t)c->Lq * c->Lk, -0.5, 0.5);
        mask = rand_mask(&r, (size_t)c->H * c->Lq * c->Lk, 0.85);
        f.a.sinks = sinks;
        f.a.bias = bias;
        f.a.bias_heads = 1;
        f.a.mask = mask;
        f.a.mask_heads = c->H;
        f.a.softcap = 20.0f;
        if (!c->packed) {
            f.a.window = c->Lk / 2;
            f.a.key_length = c->Lk - 5;
        }
    }
    if (c->knorm == 1 || c->knorm == 2) {
        f.a.k_norm_len = c->knorm == 1 ? c->D : c->Hkv * c->D;
        knw = rand_tensor(&r, (size_t)f.a.k_norm_len, 0.5, 1.5);
        f.a.k_norm = knw;
        f.a.k_norm_eps = 1e-6f;
    } else if (c->knorm == 3) {
        f.a.k_norm_unweighted = true;
        f.a.k_norm_eps = 1e-6f;
    }
    if (c->packed) { /* two sequences, queries and keys split unevenly */
        cu_q[0] = cu_k[0] = 0;
        cu_q[1] = c->Lq / 3;
        cu_k[1] = c->Lk / 3 + 1; /* odd offset: 16-bit rows 2 bytes off a float's */
        cu_q[2] = c->Lq;
        cu_k[2] = c->Lk;
        f.a.cu_seqlens_q = cu_q;
        f.a.cu_seqlens_k = cu_k;
        f.a.num_seqs = 2;
    }
    a32 = f.a;
    a32.k = kw;
    a32.v = vw;
    a16 = f.a;
    a16.kv_dtype = t;
    a16.k = (const float *)(const void *)k16;
    a16.v = (const float *)(const void *)v16;
    if (c->pt > 0) {
        page_out(&kp32, kw, c->Lk, (size_t)c->Hkv * c->D, sizeof(float), c->pt, seed + 1);
        page_out(&vp32, vw, c->Lk, (size_t)c->Hkv * Dv, sizeof(float), c->pt, seed + 2);
        page_out(&kp16, k16, c->Lk, (size_t)c->Hkv * c->D, 2, c->pt, seed + 1);
        page_out(&vp16, v16, c->Lk, (size_t)c->Hkv * Dv, 2, c->pt, seed + 2);
        a32.k = a32.v = a16.k = a16.v = NULL;
        a32.k_pages = kp32.pages;
        a32.v_pages = vp32.pages;
        a16.k_pages = kp16.pages;
        a16.v_pages = vp16.pages;
        a32.page_tokens = a16.page_tokens = c->pt;
    }
    for (int how = WHOLE; how <= KEYS; how++) {
        outs x, y;
        const bool keys = how == KEYS;
        if (keys && pa_attention_partials_size(&a32, &(pa_attention_out){0}, 3) == 0) {
            assert_int_equal(pa_attention_partials_size(&a16, &(pa_attention_out){0}, 3), 0);
            continue; /* this call does not split by keys */
        }
        outs_alloc(&x, &a32, !keys || c->Lq <= 8);
        outs_alloc(&y, &a32, !keys || c->Lq <= 8);
        run(&a32, &x, how);
        run(&a16, &y, how);
        same_bits(&x, &y, how == WHOLE ? "run" : how == PARTS ? "run_part" : "run_keys", name);
        outs_free(&x);
        outs_free(&y);
    }
    paged_free(&kp32);
    paged_free(&vp32);
    paged_free(&kp16);
    paged_free(&vp16);
    free(k16);
    free(v16);
    free(kw);
    free(vw);
    free(sinks);
    free(bias);
    free(mask);
    free(knw);
    free(own);
    free(pos2);
    fixture_free(&f);
}

static void check_all(const kcase *cases, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < 2; t++)
            check_case(&cases[i], dtypes[t], seed + 10 * i + (uint64_t)t);
}

/* At most 8 query rows without Shaw or CoPE: the decode kernel. */
static void test_decode(void **state)
{
    (void)state;
    static const kcase cases[] = {
        {"none", PA_SCHEME_NONE, 1, 300, 4, 2, 16, 0, 0, .causal = false},
        {"none odd D", PA_SCHEME_NONE, 2, 70, 3, 1, 13, 7, 0, .causal = true},
        {"none D 40 Dv 24 masks", PA_SCHEME_NONE, 5, 150, 4, 2, 40, 24, 0, .causal = true,
         .masks = true},
        {"rope prerotated", PA_SCHEME_ROPE, 1, 257, 8, 2, 32, 0, 0, .prerotated = true,
         .causal = true},
        {"rope rotates k", PA_SCHEME_ROPE, 3, 200, 4, 4, 16, 8, 0, .causal = true, .masks = true},
        {"rope k_norm [D]", PA_SCHEME_ROPE, 2, 90, 4, 2, 16, 0, 0, .causal = true, .knorm = 1},
        {"rope k_norm [Hkv*D]", PA_SCHEME_ROPE, 1, 90, 4, 2, 16, 0, 0, .causal = true, .knorm = 2},
        {"none k_norm unweighted", PA_SCHEME_NONE, 4, 60, 2, 1, 8, 0, 0, .knorm = 3},
        {"alibi", PA_SCHEME_ALIBI, 8, 130, 4, 1, 16, 24, 0, .causal = true, .masks = true},
        {"t5", PA_SCHEME_T5, 2, 95, 2, 2, 8, 0, 0, .causal = true},
        {"xpos", PA_SCHEME_XPOS, 1, 77, 2, 1, 16, 0, 0, .causal = false},
        {"xpos prerotated", PA_SCHEME_XPOS, 2, 77, 2, 1, 16, 0, 0, .prerotated = true,
         .causal = true},
        {"kerple", PA_SCHEME_KERPLE, 2, 120, 4, 2, 16, 0, 0, .causal = true},
        {"sandwich", PA_SCHEME_SANDWICH, 1, 100, 2, 1, 16, 0, 0, .causal = true},
        {"fire", PA_SCHEME_FIRE, 3, 100, 2, 2, 8, 0, 0, .causal = true},
        {"rope2d", PA_SCHEME_ROPE2D, 2, 80, 2, 1, 16, 0, 0, .causal = false},
        {"none packed", PA_SCHEME_NONE, 6, 90, 2, 1, 8, 0, 0, .causal = true, .packed = true},
    };
    check_all(cases, sizeof cases / sizeof cases[0], 9000);
}

/* More rows, Shaw or CoPE: the tiled kernel. */
static void test_prefill(void **state)
{
    (void)state;
    static const kcase cases[] = {
        {"rope", PA_SCHEME_ROPE, 70, 70, 4, 2, 16, 0, 0, .causal = true},
        {"rope prerotated masks", PA_SCHEME_ROPE, 20, 150, 2, 2, 16, 8, 0, .prerotated = true,
         .masks = true},
        {"rope k_norm [Hkv*D]", PA_SCHEME_ROPE, 12, 40, 4, 2, 8, 0, 0, .causal = true, .knorm = 2},
        {"shaw", PA_SCHEME_SHAW, 40, 50, 2, 1, 8, 0, 0, .causal = true},
        {"shaw decode rows", PA_SCHEME_SHAW, 3, 50, 2, 1, 8, 0, 0, .causal = true},
        {"cope", PA_SCHEME_COPE, 4, 40, 2, 1, 8, 0, 0, .causal = true},
        {"alibi", PA_SCHEME_ALIBI, 65, 300, 4, 4, 8, 16, 0, .masks = true},
        {"t5", PA_SCHEME_T5, 10, 33, 2, 1, 8, 0, 0, .causal = false},
        {"kerple", PA_SCHEME_KERPLE, 17, 40, 2, 2, 8, 0, 0, .causal = true},
        {"fire", PA_SCHEME_FIRE, 12, 30, 2, 1, 8, 0, 0, .causal = true},
        {"xpos", PA_SCHEME_XPOS, 20, 20, 2, 1, 16, 0, 0, .causal = true},
        {"rope2d", PA_SCHEME_ROPE2D, 9, 30, 2, 2, 16, 0, 0, .causal = false},
        {"rope packed", PA_SCHEME_ROPE, 30, 61, 2, 1, 16, 0, 0, .causal = true, .packed = true},
    };
    check_all(cases, sizeof cases / sizeof cases[0], 9300);
}

/* Paged 16-bit pages against paged float ones, both kernels. */
static void test_paged(void **state)
{
    (void)state;
    static const kcase cases[] = {
        {"paged none", PA_SCHEME_NONE, 1, 300, 4, 2, 16, 0, 16, .causal = false},
        {"paged rope prerotated", PA_SCHEME_ROPE, 1, 257, 8, 2, 32, 0, 32, .prerotated = true,
         .causal = true},
        {"paged rope rotates k", PA_SCHEME_ROPE, 3, 200, 4, 4, 16, 8, 16, .causal = true,
         .masks = true},
        {"paged alibi", PA_SCHEME_ALIBI, 8, 130, 4, 1, 16, 24, 64, .causal = true, .masks = true},
        {"paged t5 odd D", PA_SCHEME_T5, 2, 95, 2, 2, 9, 5, 48, .causal = true},
        {"paged prefill rope", PA_SCHEME_ROPE, 70, 70, 4, 2, 16, 0, 16, .causal = true},
        {"paged prefill shaw", PA_SCHEME_SHAW, 40, 50, 2, 1, 8, 0, 16, .causal = true},
        {"paged prefill alibi", PA_SCHEME_ALIBI, 20, 150, 2, 2, 16, 8, 32, .masks = true},
    };
    check_all(cases, sizeof cases / sizeof cases[0], 9600);
}

/* The library's widening against this file's for every pattern but NaNs,
 * through k_rot (returned as read when nothing rotates k). */
static void test_every_pattern(void **state)
{
    (void)state;
    for (int ti = 0; ti < 2; ti++) {
        const pa_dtype t = dtypes[ti];
        const int Lk = 4096, D = 16; /* 65536 patterns, one per element */
        uint16_t *k16 = tu_alloc((size_t)Lk * D, sizeof(uint16_t));
        uint16_t *v16 = tu_alloc((size_t)Lk * D, sizeof(uint16_t));
        float q[16] = {0}, out[16], *krot = tu_alloc((size_t)Lk * D, sizeof(float));
        pa_scheme s;
        pa_attention a;
        pa_attention_out o = {0};
        pa_error err;
        size_t wsz;
        void *ws;
        for (size_t i = 0; i < (size_t)Lk * D; i++)
            k16[i] = (uint16_t)i;
        pa_scheme_init(&s, PA_SCHEME_NONE);
        pa_attention_init(&a, &s);
        a.num_heads = 1;
        a.head_dim = D;
        a.q_len = 1;
        a.k_len = Lk;
        a.q = q;
        a.k = (const float *)(const void *)k16;
        a.v = (const float *)(const void *)v16;
        a.kv_dtype = t;
        a.key_length = 0; /* every key padding: nothing multiplies the NaNs and infinities */
        o.output = out;
        o.k_rot = krot;
        wsz = pa_attention_workspace_size(&a);
        ws = tu_alloc(wsz, 1);
        /* k is only returned. */
        TU_ASSERT_STATUS(pa_attention_run(&a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
        for (size_t i = 0; i < (size_t)Lk * D; i++) {
            const float want = widen(t, (uint16_t)i);
            if (isnan(want) ? !isnan(krot[i]) : memcmp(&want, &krot[i], sizeof want) != 0)
                fail_msg("%s pattern 0x%04zx: k_rot %.9g, want %.9g", pa_dtype_name(t), i,
                         (double)krot[i], (double)want);
        }
        free(ws);
        free(k16);
        free(v16);
        free(krot);
    }
}

/* A 16-bit call against the double reference on the widened arrays. */
static void test_reference(void **state)
{
    (void)state;
    for (int ti = 0; ti < 2; ti++) {
        const pa_dtype t = dtypes[ti];
        for (int Lq = 1; Lq <= 20; Lq += 19) { /* decode and tiled kernels */
            fixture f;
            tu_rng r;
            float *kw, *vw;
            uint16_t *k16, *v16;
            outs y;
            double *want;
            pa_attention a;
            tu_rng_seed(&r, 9900 + (uint64_t)Lq);
            setup_qkv(&f, PA_SCHEME_ROPE, Lq, 100, 4, 2, 16, 0, 9900 + (uint64_t)Lq);
            f.a.causal = true;
            k16 = rand_kv(t, &r, (size_t)100 * 2 * 16, &kw);
            v16 = rand_kv(t, &r, (size_t)100 * 2 * 16, &vw);
            a = f.a;
            a.k = kw;
            a.v = vw;
            want = tu_alloc((size_t)Lq * 4 * 16, sizeof(double));
            ref_attention(&a, want, NULL, NULL, NULL, NULL);
            a.k = (const float *)(const void *)k16;
            a.v = (const float *)(const void *)v16;
            a.kv_dtype = t;
            outs_alloc(&y, &a, false);
            run(&a, &y, WHOLE);
            TU_ASSERT_CLOSE(y.o.output, want, y.n[0], ATOL, RTOL);
            outs_free(&y);
            free(want);
            free(k16);
            free(v16);
            free(kw);
            free(vw);
            fixture_free(&f);
        }
    }
}

static void expect(pa_status got, const pa_error *err, pa_status st, const char *field)
{
    assert_int_equal(got, st);
    if (strcmp(err->field, field) != 0)
        fail_msg("field %s, want %s (%s)", err->field, field, err->message);
}

static void test_errors(void **state)
{
    (void)state;
    fixture f, l;
    pa_error err = {0};
    pa_attention a;
    pa_differential d;
    pa_mla m;
    double diff;
    uint16_t k16[40 * 2 * 8] = {0};
    void *ws = tu_alloc(1 << 20, 1);
    setup_qkv(&f, PA_SCHEME_NONE, 2, 40, 2, 2, 8, 0, 9950);
    a = f.a;
    a.k = a.v = (const float *)(const void *)k16;
    a.kv_dtype = (pa_dtype)3;
    expect(pa_attention_check(&a, &err), &err, PA_STATUS_INVALID_ARGUMENT, "kv_dtype");
    a.kv_dtype = (pa_dtype)-1;
    expect(pa_attention_check(&a, &err), &err, PA_STATUS_INVALID_ARGUMENT, "kv_dtype");
    a.kv_dtype = PA_DTYPE_F16;
    memset(&err, 0, sizeof err);
    expect(pa_attention_check(&a, &err), &err, PA_STATUS_OK, "");
    memset(&d, 0, sizeof d);
    expect(pa_diff_check(&a, &d, &err), &err, PA_STATUS_UNSUPPORTED, "kv_dtype");
    memset(&m, 0, sizeof m);
    expect(pa_mla_check(&a, &m, &err), &err, PA_STATUS_UNSUPPORTED, "kv_dtype");
    a.q_len = 40; /* self-attention for the analyses */
    a.q = tu_alloc((size_t)40 * 2 * 8, sizeof(float));
    expect(pa_analyze_permutation(&a, NULL, ws, 1 << 20, &diff, &err), &err, PA_STATUS_UNSUPPORTED,
           "kv_dtype");
    free((void *)a.q);
    setup_layer(&l, PA_SCHEME_ROPE, 6, 16, 2, 2, 8, 0, 0, 9951);
    l.a.kv_dtype = PA_DTYPE_BF16;
    expect(pa_attention_check(&l.a, &err), &err, PA_STATUS_UNSUPPORTED, "kv_dtype");
    assert_string_equal(pa_dtype_name(PA_DTYPE_F32), "f32");
    assert_string_equal(pa_dtype_name(PA_DTYPE_BF16), "bf16");
    assert_string_equal(pa_dtype_name(PA_DTYPE_F16), "f16");
    assert_string_equal(pa_dtype_name((pa_dtype)9), "unknown");
    free(ws);
    fixture_free(&l);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),    cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_paged),     cmocka_unit_test(test_every_pattern),
        cmocka_unit_test(test_reference), cmocka_unit_test(test_errors),
    };
    print_message("kernels: %s\n", pa_kernel_name());
    return cmocka_run_group_tests_name("kv16", tests, NULL, NULL);
}
