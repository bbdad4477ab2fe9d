/* test_mla.c - lib/mla.c: DeepSeek's MLA with decoupled RoPE against the
 * double reference of Hugging Face's DeepseekV3Attention (tests/ref_mla.c):
 * the expanded form and the absorbed one, rope in both layouts and yarn
 * with mscale_all_dim (HF's scale), no rope, prefill (the tiled kernel)
 * and decode (the decode kernel), positions, masks per head, a bias,
 * sinks, key_length, q_rot and k_rot, the row statistics; query rows in
 * blocks (past PA_MLA_LOGITS_MAX); k_prerotated; and the refusals.
 */
#include "attention_fixture.h"
#include "posattn_mla.h"
#include "ref_mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct mcase {
    int Lq, Lk, H, Dn, Dr, Dv, R; /* R > 0: the absorbed form */
    pa_scheme_type type;
    pa_rope_layout layout;
    bool yarn, causal, positions, mask, bias, sinks, key_length;
    bool dynamic; /* dynamic scaling, queries at 0.. before most keys */
} mcase;

/* One call's inputs. */
typedef struct mfix {
    pa_scheme s;
    pa_attention a;
    pa_mla m;
    float *q, *k, *v, *kr, *c, *wuk, *wuv, *bias, *sinks;
    int32_t *qpos, *kpos;
    uint8_t *mask;
} mfix;

static void mfix_setup(mfix *f, const mcase *c, uint64_t seed)
{
    tu_rng r;
    const int Dq = c->Dn + c->Dr;
    memset(f, 0, sizeof *f);
    tu_rng_seed(&r, seed);
    pa_scheme_init(&f->s, c->type);
    f->s.rope.layout = c->layout;
    if (c->yarn) { /* DeepSeek-V3's: factor 40, mscale = mscale_all_dim = 1 */
        f->s.rope.scaling = PA_ROPE_SCALING_YARN;
        f->s.rope.factor = 40.0;
        f->s.rope.original_max_position = 64;
        f->s.rope.mscale = 1.0;
        f->s.rope.mscale_all_dim = 1.0;
    }
    if (c->dynamic) { /* the keys' largest position picks the base */
        f->s.rope.scaling = PA_ROPE_SCALING_DYNAMIC;
        f->s.rope.factor = 2.0;
        f->s.rope.original_max_position = 16;
    }
    pa_attention_init(&f->a, &f->s);
    f->a.num_heads = c->H;
    f->a.head_dim = Dq;
    f->a.v_head_dim = c->Dv;
    f->a.q_len = c->Lq;
    f->a.k_len = c->Lk;
    f->a.causal = c->causal;
    f->q = rand_tensor(&r, (size_t)c->Lq * c->H * Dq, -1, 1);
    f->a.q = f->q;
    f->kr = rand_tensor(&r, (size_t)c->Lk * c->Dr, -1, 1);
    f->m.rope_dim = c->Dr;
    f->m.k_rope = f->kr;
    if (c->R > 0) {
        const double w = 1.0 / sqrt((double)c->R);
        f->c = rand_tensor(&r, (size_t)c->Lk * c->R, -1, 1);
        f->wuk = rand_tensor(&r, (size_t)c->H * c->Dn * c->R, -w, w);
        f->wuv = rand_tensor(&r, (size_t)c->H * c->Dv * c->R, -w, w);
        f->m.absorbed = true;
        f->m.kv_lora_rank = c->R;
        f->m.c_kv = f->c;
        f->m.w_uk = f->wuk;
        f->m.w_uv = f->wuv;
    } else {
        f->k = rand_tensor(&r, (size_t)c->Lk * c->H * c->Dn, -1, 1);
        f->v = rand_tensor(&r, (size_t)c->Lk * c->H * c->Dv, -1, 1);
        f->a.k = f->k;
        f->a.v = f->v;
    }
    if (c->positions) { /* a cache that skipped positions: sorted, gapped */
        f->qpos = tu_alloc((size_t)c->Lq, sizeof(int32_t));
        f->kpos = tu_alloc((size_t)c->Lk, sizeof(int32_t));
        for (int j = 0; j < c->Lk; j++)
            f->kpos[j] = 3 * j + (j > c->Lk / 2 ? 40 : 0);
        for (int i = 0; i < c->Lq; i++)
            f->qpos[i] = f->kpos[c->Lk - c->Lq + i] + 1;
        f->a.q_positions = f->qpos;
        f->a.k_positions = f->kpos;
    }
    if (c->dynamic) {
        f->qpos = tu_alloc((size_t)c->Lq, sizeof(int32_t));
        for (int i = 0; i < c->Lq; i++)
            f->qpos[i] = i;
        f->a.q_positions = f->qpos;
    }
    if (c->mask) {
        f->mask = rand_mask(&r, (size_t)c->H * c->Lq * c->Lk, 0.8);
        f->a.mask = f->mask;
        f->a.mask_heads = c->H;
    }
    if (c->bias) {
        f->bias = rand_tensor(&r, (size_t)c->Lq * c->Lk, -0.5, 0.5);
        f->a.bias = f->bias;
        f->a.bias_heads = 1;
    }
    if (c->sinks) {
        f->sinks = rand_tensor(&r, (size_t)c->H, -1, 1);
        f->a.sinks = f->sinks;
    }
    if (c->key_length)
        f->a.key_length = c->Lk - 3;
}

static void mfix_free(mfix *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->kr);
    free(f->c);
    free(f->wuk);
    free(f->wuv);
    free(f->bias);
    free(f->sinks);
    free(f->qpos);
    free(f->kpos);
    free(f->mask);
}

/* Every output of pa_mla_run, allocated for f's shapes. */
typedef struct mout {
    pa_attention_out o;
    size_t nout, nw, nq, nk, ns;
} mout;

static void mout_alloc(mout *o, const mcase *c, bool weights)
{
    memset(o, 0, sizeof *o);
    o->nout = (size_t)c->Lq * c->H * c->Dv;
    o->nw = (size_t)c->H * c->Lq * c->Lk;
    o->nq = (size_t)c->Lq * c->H * (c->Dn + c->Dr);
    o->nk = (size_t)c->Lk * c->Dr;
    o->ns = (size_t)c->H * c->Lq;
    o->o.output = tu_alloc(o->nout, sizeof(float));
    if (weights) {
        o->o.weights = tu_alloc(o->nw, sizeof(float));
        o->o.logits = tu_alloc(o->nw, sizeof(float));
    }
    o->o.q_rot = tu_alloc(o->nq, sizeof(float));
    o->o.k_rot = tu_alloc(o->nk, sizeof(float));
    o->o.entropy = tu_alloc(o->ns, sizeof(float));
    o->o.distance = tu_alloc(o->ns, sizeof(float));
    o->o.far_share = tu_alloc(o->ns, sizeof(float));
    o->o.far_distance = c->Lk / 3;
}

static void mout_free(mout *o)
{
    free(o->o.output);
    free(o->o.weights);
    free(o->o.logits);
    free(o->o.q_rot);
    free(o->o.k_rot);
    free(o->o.entropy);
    free(o->o.distance);
    free(o->o.far_share);
}

static void run(const mfix *f, mout *o)
{
    pa_error err;
    const size_t wsz = pa_mla_workspace_size(&f->a, &f->m);
    void *ws;
    assert_true(wsz > 0);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_mla_run(&f->a, &f->m, &o->o, ws, wsz, &err), PA_STATUS_OK, &err);
    free(ws);
}

/* The statistics from the reference's weights [H, Lq, Lk], at f's
 * positions: entropy, distance, far share. */
static void ref_stats(const mfix *f, const mcase *c, const double *w, double *st)
{
    const size_t ns = (size_t)c->H * c->Lq;
    for (int h = 0; h < c->H; h++)
        for (int i = 0; i < c->Lq; i++) {
            const double qp = f->qpos ? f->qpos[i] : c->Lk - c->Lq + i;
            double e = 0.0, dist = 0.0, far = 0.0;
            for (int j = 0; j < c->Lk; j++) {
                const double x = w[((size_t)h * c->Lq + i) * c->Lk + j];
                const double dd = fabs(qp - (f->kpos ? f->kpos[j] : j));
                if (x > 0.0)
                    e -= x * log(x);
                dist += x * dd;
                if (dd > c->Lk / 3)
                    far += x;
            }
            st[(size_t)h * c->Lq + i] = e;
            st[ns + (size_t)h * c->Lq + i] = dist;
            st[2 * ns + (size_t)h * c->Lq + i] = far;
        }
}

static void check_case(const mcase *c, uint64_t seed)
{
    mfix f;
    mout o;
    const bool weights = (size_t)c->H * c->Lq * c->Lk <= PA_MLA_LOGITS_MAX;
    double *rout, *rw, *rq, *rk, *rst;
    mfix_setup(&f, c, seed);
    mout_alloc(&o, c, weights);
    rout = tu_alloc(o.nout, sizeof(double));
    rw = tu_alloc(o.nw, sizeof(double));
    rq = tu_alloc(o.nq, sizeof(double));
    rk = tu_alloc(o.nk, sizeof(double));
    rst = tu_alloc(3 * o.ns, sizeof(double));
    run(&f, &o);
    ref_mla(&f.a, &f.m, rout, rw, rq, rk);
    ref_stats(&f, c, rw, rst);
    TU_ASSERT_CLOSE(o.o.output, rout, o.nout, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.o.q_rot, rq, o.nq, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.o.k_rot, rk, o.nk, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.o.entropy, rst, o.ns, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.o.distance, rst + o.ns, o.ns, ATOL, RTOL);
    TU_ASSERT_CLOSE(o.o.far_share, rst + 2 * o.ns, o.ns, ATOL, RTOL);
    if (weights)
        TU_ASSERT_CLOSE(o.o.weights, rw, o.nw, ATOL, RTOL);
    free(rout);
    free(rw);
    free(rq);
    free(rk);
    free(rst);
    mout_free(&o);
    mfix_free(&f);
}

static void test_expanded(void **state)
{
    (void)state;
    static const mcase cases[] = {
        /* prefill, DeepSeek's interleaved rope with its yarn, causal */
        {70, 70, 4, 16, 8, 12, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = true,
         .causal = true},
        /* neox layout, Dv wider than the query heads, masks per head, bias, sinks */
        {40, 40, 3, 8, 8, 24, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_NEOX, .causal = true, .mask = true,
         .bias = true, .sinks = true},
        /* decode (the decode kernel): one row, gapped positions, key_length */
        {1, 300, 8, 16, 8, 16, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = true, .causal = true,
         .positions = true, .key_length = true},
        /* a few rows of decode, yarn, masks per head */
        {3, 129, 4, 8, 4, 8, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = true, .causal = true,
         .positions = true, .mask = true},
        /* dynamic ntk: the keys, past the queries, choose the base */
        {2, 40, 2, 8, 4, 8, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_NEOX, .dynamic = true},
        /* no rope: the decoupled part unrotated */
        {20, 33, 2, 8, 4, 8, 0, PA_SCHEME_NONE, PA_ROPE_LAYOUT_NEOX, .yarn = false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], 9300 + i);
}

static void test_absorbed(void **state)
{
    (void)state;
    static const mcase cases[] = {
        /* prefill, yarn, causal: R wider than the heads */
        {50, 50, 4, 16, 8, 12, 40, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = true,
         .causal = true},
        /* decode over a longer cache, masks per head and a bias */
        {1, 200, 6, 8, 8, 16, 24, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = true, .causal = true,
         .mask = true, .bias = true, .sinks = true},
        /* R narrower than the heads, positions, neox */
        {4, 90, 3, 16, 4, 8, 6, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_NEOX, .causal = true,
         .positions = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], 9400 + i);
}

/* The absorbed form equals the expanded one on k_nope = w_uk c_kv and v =
 * w_uv c_kv, as a serving engine relies on. */
static void test_absorbed_equals_expanded(void **state)
{
    (void)state;
    const mcase c = {
        5, 77, 4, 8, 8, 8, 16, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = true, .causal = true};
    mfix f;
    mout o1, o2;
    pa_mla m2;
    pa_attention a2;
    float *k, *v;
    mfix_setup(&f, &c, 9500);
    k = tu_alloc((size_t)c.Lk * c.H * c.Dn, sizeof(float));
    v = tu_alloc((size_t)c.Lk * c.H * c.Dv, sizeof(float));
    for (int j = 0; j < c.Lk; j++)
        for (int h = 0; h < c.H; h++) {
            for (int d = 0; d < c.Dn; d++) {
                double x = 0.0;
                for (int t = 0; t < c.R; t++)
                    x += (double)f.wuk[((size_t)h * c.Dn + d) * c.R + t] * f.c[(size_t)j * c.R + t];
                k[((size_t)j * c.H + h) * c.Dn + d] = (float)x;
            }
            for (int d = 0; d < c.Dv; d++) {
                double x = 0.0;
                for (int t = 0; t < c.R; t++)
                    x += (double)f.wuv[((size_t)h * c.Dv + d) * c.R + t] * f.c[(size_t)j * c.R + t];
                v[((size_t)j * c.H + h) * c.Dv + d] = (float)x;
            }
        }
    mout_alloc(&o1, &c, true);
    mout_alloc(&o2, &c, true);
    run(&f, &o1);
    a2 = f.a;
    a2.k = k;
    a2.v = v;
    m2 = f.m;
    m2.absorbed = false;
    m2.c_kv = m2.w_uk = m2.w_uv = NULL;
    {
        mfix g = f;
        g.a = a2;
        g.m = m2;
        run(&g, &o2);
    }
    for (size_t e = 0; e < o1.nout; e++)
        if (fabsf(o1.o.output[e] - o2.o.output[e]) > 1e-5f + 1e-4f * fabsf(o2.o.output[e]))
            fail_msg("output[%zu]: absorbed %g, expanded %g", e, (double)o1.o.output[e],
                     (double)o2.o.output[e]);
    for (size_t e = 0; e < o1.nw; e++)
        if (fabsf(o1.o.weights[e] - o2.o.weights[e]) > 1e-6f + 1e-4f * o2.o.weights[e])
            fail_msg("weights[%zu]: absorbed %g, expanded %g", e, (double)o1.o.weights[e],
                     (double)o2.o.weights[e]);
    free(k);
    free(v);
    mout_free(&o1);
    mout_free(&o2);
    mfix_free(&f);
}

/* More rotated-part logits than one block holds: the rows come in blocks
 * (the per-head mask and the statistics by block); weights are refused. */
static void test_blocks(void **state)
{
    (void)state;
    /* 16 * 1100 * 1000 = 17.6M > 2^24 rotated-part logits */
    const mcase c = {
        1100,           1000,        16, 4, 4, 4, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ,
        .causal = true, .mask = true};
    mfix f;
    mout o;
    pa_error err;
    size_t wsz;
    void *ws;
    check_case(&c, 9600);
    mfix_setup(&f, &c, 9601);
    mout_alloc(&o, &c, true);
    wsz = pa_mla_workspace_size(&f.a, &f.m);
    ws = tu_alloc(wsz, 1);
    assert_int_equal(pa_mla_run(&f.a, &f.m, &o.o, ws, wsz, &err), PA_STATUS_TOO_LARGE);
    assert_string_equal(err.field, "weights");
    free(ws);
    mout_free(&o);
    mfix_free(&f);
}

/* Keys stored rotated (as a cache keeps them) give the bits of keys
 * rotated by the call. */
static void test_prerotated(void **state)
{
    (void)state;
    const mcase c = {2,
                     64,
                     4,
                     8,
                     8,
                     8,
                     0,
                     PA_SCHEME_ROPE,
                     PA_ROPE_LAYOUT_GPTJ,
                     .yarn = true,
                     .causal = true,
                     .positions = true};
    mfix f;
    mout o1, o2;
    pa_error err;
    float *cs, *sn, *kr;
    int32_t mx = 0;
    mfix_setup(&f, &c, 9700);
    mout_alloc(&o1, &c, true);
    mout_alloc(&o2, &c, true);
    run(&f, &o1);
    for (int j = 0; j < c.Lk; j++)
        mx = f.kpos[j] > mx ? f.kpos[j] : mx;
    for (int i = 0; i < c.Lq; i++)
        mx = f.qpos[i] > mx ? f.qpos[i] : mx;
    cs = tu_alloc((size_t)c.Lk * c.Dr / 2, sizeof(float));
    sn = tu_alloc((size_t)c.Lk * c.Dr / 2, sizeof(float));
    kr = tu_alloc((size_t)c.Lk * c.Dr, sizeof(float));
    TU_ASSERT_STATUS(pa_rope_cos_sin(&f.s.rope, c.Dr, f.kpos, c.Lk, mx, cs, sn, &err), PA_STATUS_OK,
                     &err);
    pa_rope_apply(&f.s.rope, c.Dr, c.Lk, 1, cs, sn, f.kr, kr);
    memcpy(f.kr, kr, (size_t)c.Lk * c.Dr * sizeof(float));
    f.a.k_prerotated = true;
    run(&f, &o2);
    assert_memory_equal(o1.o.output, o2.o.output, o1.nout * sizeof(float));
    assert_memory_equal(o1.o.weights, o2.o.weights, o1.nw * sizeof(float));
    assert_memory_equal(o1.o.k_rot, o2.o.k_rot, o1.nk * sizeof(float));
    free(cs);
    free(sn);
    free(kr);
    mout_free(&o1);
    mout_free(&o2);
    mfix_free(&f);
}

static void test_scale(void **state)
{
    (void)state;
    mfix f;
    const mcase c = {2, 8, 2, 16, 8, 8, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = true};
    const double m = 0.1 * log(40.0) + 1.0;
    mfix_setup(&f, &c, 9800);
    /* HF: qk_head_dim^-0.5 * mscale(40, 1)^2 */
    assert_true(fabs(pa_mla_default_scale(&f.a) - m * m / sqrt(24.0)) < 1e-6);
    f.s.rope.mscale_all_dim = 0.0;
    assert_true(fabs(pa_mla_default_scale(&f.a) - 1.0 / sqrt(24.0)) < 1e-7);
    mfix_free(&f);
}

static void expect(const pa_attention *a, const pa_mla *m, pa_status st, const char *field)
{
    pa_error err = {0};
    assert_int_equal(pa_mla_check(a, m, &err), st);
    if (strcmp(err.field, field) != 0)
        fail_msg("field %s, want %s (%s)", err.field, field, err.message);
}

static void test_errors(void **state)
{
    (void)state;
    mfix f;
    const mcase c = {4, 6, 2, 8, 4, 8, 0, PA_SCHEME_ROPE, PA_ROPE_LAYOUT_GPTJ, .yarn = false};
    float one = 1.0f;
    mfix_setup(&f, &c, 9900);
    assert_int_equal(pa_mla_check(&f.a, &f.m, NULL), PA_STATUS_OK);
    f.m.rope_dim = 5;
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "mla.rope_dim");
    f.m.rope_dim = 12; /* the whole head: nothing left without position */
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "mla.rope_dim");
    f.m.rope_dim = 4;
    f.a.softcap = 30.0f;
    expect(&f.a, &f.m, PA_STATUS_UNSUPPORTED, "softcap");
    f.a.softcap = 0.0f;
    f.a.num_kv_heads = 1;
    expect(&f.a, &f.m, PA_STATUS_SHAPE_MISMATCH, "num_kv_heads");
    f.a.num_kv_heads = 0;
    f.m.k_rope = NULL;
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "k_rope");
    f.m.k_rope = f.kr;
    f.s.rope.rotary_dim = 8;
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "scheme.rotary_dim");
    f.s.rope.rotary_dim = 0;
    f.s.type = PA_SCHEME_ALIBI;
    expect(&f.a, &f.m, PA_STATUS_UNSUPPORTED, "scheme.type");
    f.s.type = PA_SCHEME_ROPE;
    f.m.absorbed = true;
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "k");
    f.a.k = f.a.v = NULL;
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "mla.kv_lora_rank");
    f.m.kv_lora_rank = 3;
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "c_kv");
    f.m.c_kv = &one;
    f.m.w_uk = &one;
    expect(&f.a, &f.m, PA_STATUS_INVALID_ARGUMENT, "mla.w_uv");
    f.m.absorbed = false;
    f.m.c_kv = f.m.w_uk = NULL;
    f.a.k = f.k;
    f.a.v = f.v;
    f.a.key_length = 9; /* past Lk: the inner call's own check */
    expect(&f.a, &f.m, PA_STATUS_OUT_OF_RANGE, "key_length");
    mfix_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expanded),
        cmocka_unit_test(test_absorbed),
        cmocka_unit_test(test_absorbed_equals_expanded),
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_prerotated),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("mla", tests, NULL, NULL);
}
