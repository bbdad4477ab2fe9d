/* attention_fixture.c - see attention_fixture.h. */
#include "attention_fixture.h"

#include "ref_attention.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fixture_free(fixture *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->x);
    free(f->wq);
    free(f->wk);
    free(f->wv);
    free(f->wo);
    free(f->table);
    free(f->rel_k);
    free(f->rel_v);
    free(f->qpos);
    free(f->kpos);
    memset(f, 0, sizeof *f);
}

float *rand_tensor(tu_rng *r, size_t n, double lo, double hi)
{
    float *t = tu_alloc(n, sizeof(float));
    tu_fill(r, t, n, lo, hi);
    return t;
}

/* Sets up q/k/v mode with random inputs. */
void setup_qkv(fixture *f, pa_scheme_type type, int Lq, int Lk, int H, int Hkv, int D, int Dv,
               uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    memset(f, 0, sizeof *f);
    pa_scheme_init(&f->scheme, type);
    pa_attention_init(&f->a, &f->scheme);
    f->a.num_heads = H;
    f->a.num_kv_heads = Hkv;
    f->a.head_dim = D;
    f->a.v_head_dim = Dv;
    f->a.q_len = Lq;
    f->a.k_len = Lk;
    f->q = rand_tensor(&r, (size_t)Lq * H * D, -1, 1);
    f->k = rand_tensor(&r, (size_t)Lk * Hkv * D, -1, 1);
    f->v = rand_tensor(&r, (size_t)Lk * Hkv * (Dv ? Dv : D), -1, 1);
    f->a.q = f->q;
    f->a.k = f->k;
    f->a.v = f->v;
}

/* Sets up layer mode with random x and weights scaled to keep logits O(1). */
void setup_layer(fixture *f, pa_scheme_type type, int L, int dm, int H, int Hkv, int D, int Dv,
                 int dout, uint64_t seed)
{
    tu_rng r;
    int dv = Dv ? Dv : D;
    double ws = 1.0 / sqrt((double)dm);
    tu_rng_seed(&r, seed);
    memset(f, 0, sizeof *f);
    pa_scheme_init(&f->scheme, type);
    pa_attention_init(&f->a, &f->scheme);
    f->a.num_heads = H;
    f->a.num_kv_heads = Hkv;
    f->a.head_dim = D;
    f->a.v_head_dim = Dv;
    f->a.seq_len = L;
    f->a.d_model = dm;
    f->x = rand_tensor(&r, (size_t)L * dm, -1, 1);
    f->wq = rand_tensor(&r, (size_t)dm * H * D, -ws, ws);
    f->wk = rand_tensor(&r, (size_t)dm * Hkv * D, -ws, ws);
    f->wv = rand_tensor(&r, (size_t)dm * Hkv * dv, -ws, ws);
    f->a.x = f->x;
    f->a.w_q = f->wq;
    f->a.w_k = f->wk;
    f->a.w_v = f->wv;
    if (dout > 0) {
        f->wo = rand_tensor(&r, (size_t)H * dv * dout, -ws, ws);
        f->a.w_o = f->wo;
        f->a.d_out = dout;
    }
}

/* Runs the library and the reference on f->a and compares every output. */
void check_against_reference(const pa_attention *a, int want)
{
    pa_error err;
    int H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H, D = a->head_dim;
    int Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    size_t nout = (size_t)ref_attention_out_len(a), nw = (size_t)H * Lq * Lk;
    size_t nq = (size_t)Lq * H * D, nk = (size_t)Lk * Hkv * D;
    pa_attention_out out = {0};
    double *rout = tu_alloc(nout, sizeof(double)), *rw = tu_alloc(nw, sizeof(double));
    double *rl = tu_alloc(nw, sizeof(double)), *rq = tu_alloc(nq, sizeof(double));
    double *rk = tu_alloc(nk, sizeof(double));
    double *re = tu_alloc((size_t)H * Lq, sizeof(double)),
           *rd = tu_alloc((size_t)H * Lq, sizeof(double)),
           *rf = tu_alloc((size_t)H * Lq, sizeof(double));
    size_t wsz;
    void *ws;

    TU_ASSERT_STATUS(pa_attention_check(a, &err), PA_STATUS_OK, &err);
    wsz = pa_attention_workspace_size(a);
    assert_true(wsz > 0);
    ws = tu_alloc(wsz, 1);
    out.output = tu_alloc(nout, sizeof(float));
    if (want & WANT_WEIGHTS)
        out.weights = tu_alloc(nw, sizeof(float));
    if (want & WANT_LOGITS)
        out.logits = tu_alloc(nw, sizeof(float));
    if (want & WANT_ROT) {
        out.q_rot = tu_alloc(nq, sizeof(float));
        out.k_rot = tu_alloc(nk, sizeof(float));
    }
    if (want & WANT_STATS) {
        out.entropy = tu_alloc((size_t)H * Lq, sizeof(float));
        out.distance = tu_alloc((size_t)H * Lq, sizeof(float));
        out.far_share = tu_alloc((size_t)H * Lq, sizeof(float));
        out.far_distance = Lk / 3; /* some keys near, some far */
    }
    TU_ASSERT_STATUS(pa_attention_run(a, &out, ws, wsz, &err), PA_STATUS_OK, &err);
    ref_attention(a, rout, rw, rl, rq, rk);
    if (want & WANT_STATS) {
        ref_attention_stats(a, re, rd);
        TU_ASSERT_CLOSE(out.entropy, re, (size_t)H * Lq, ATOL, RTOL);
        TU_ASSERT_CLOSE(out.distance, rd, (size_t)H * Lq, ATOL, RTOL);
        ref_attention_far_share(a, out.far_distance, rf);
        TU_ASSERT_CLOSE(out.far_share, rf, (size_t)H * Lq, ATOL, RTOL);
    }

    TU_ASSERT_CLOSE(out.output, rout, nout, ATOL, RTOL);
    if (out.weights)
        TU_ASSERT_CLOSE(out.weights, rw, nw, ATOL, RTOL);
    if (out.logits)
        TU_ASSERT_CLOSE(out.logits, rl, nw, ATOL, RTOL);
    if (out.q_rot) {
        TU_ASSERT_CLOSE(out.q_rot, rq, nq, ATOL, RTOL);
        TU_ASSERT_CLOSE(out.k_rot, rk, nk, ATOL, RTOL);
    }
    free(ws);
    free(out.output);
    free(out.weights);
    free(out.logits);
    free(out.q_rot);
    free(out.k_rot);
    free(out.entropy);
    free(out.distance);
    free(out.far_share);
    free(re);
    free(rd);
    free(rf);
    free(rout);
    free(rw);
    free(rl);
    free(rq);
    free(rk);
}

/* Fills the scheme tables a fixture needs for its type. */
void add_tables(fixture *f, int H, int D, int Dv, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed ^ 0xabcdef);
    switch (f->scheme.type) {
    case PA_SCHEME_T5:
        f->table = rand_tensor(&r, (size_t)f->scheme.t5.num_buckets * H, -2, 2);
        f->scheme.t5.table = f->table;
        f->scheme.t5.table_rows = f->scheme.t5.num_buckets;
        f->scheme.t5.table_cols = H;
        break;
    case PA_SCHEME_SHAW: {
        int K = f->scheme.shaw.max_relative_position ? f->scheme.shaw.max_relative_position : 4;
        f->scheme.shaw.max_relative_position = K;
        f->rel_k = rand_tensor(&r, (size_t)(2 * K + 1) * D, -1, 1);
        f->rel_v = rand_tensor(&r, (size_t)(2 * K + 1) * Dv, -1, 1);
        f->scheme.shaw.rel_k = f->rel_k;
        f->scheme.shaw.rel_k_rows = 2 * K + 1;
        f->scheme.shaw.rel_k_cols = D;
        f->scheme.shaw.rel_v = f->rel_v;
        f->scheme.shaw.rel_v_rows = 2 * K + 1;
        f->scheme.shaw.rel_v_cols = Dv;
        break;
    }
    default:
        break;
    }
}

const pa_scheme_type qkv_schemes[] = {PA_SCHEME_NONE, PA_SCHEME_ROPE, PA_SCHEME_ALIBI, PA_SCHEME_T5,
                                      PA_SCHEME_SHAW};

/* Runs a and returns its weights [H, Lq, Lk] (tu_alloc'd) and, in *out,
 * its output (tu_alloc'd). */
float *run_weights(const pa_attention *a, float **out)
{
    pa_error err;
    int H = a->num_heads, Dv = a->v_head_dim ? a->v_head_dim : a->head_dim;
    int Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    pa_attention_out o = {0};
    size_t wsz = pa_attention_workspace_size(a);
    void *ws = tu_alloc(wsz, 1);
    o.output = tu_alloc((size_t)Lq * H * Dv, sizeof(float));
    o.weights = tu_alloc((size_t)H * Lq * Lk, sizeof(float));
    TU_ASSERT_STATUS(pa_attention_run(a, &o, ws, wsz, &err), PA_STATUS_OK, &err);
    free(ws);
    *out = o.output;
    return o.weights;
}

/* A random 0/1 mask [planes, Lq, Lk] with about `keep` of the entries 1. */
uint8_t *rand_mask(tu_rng *r, size_t n, double keep)
{
    uint8_t *m = tu_alloc(n, 1);
    for (size_t i = 0; i < n; i++)
        m[i] = tu_uniform(r, 0, 1) < keep;
    return m;
}

float *bias_probe(const pa_scheme *s, int32_t H, int32_t D, const int32_t *qpos, int32_t Lq,
                  const int32_t *kpos, int32_t Lk, bool causal)
{
    pa_attention a;
    pa_attention_out out = {0};
    pa_error err;
    size_t wsz;
    void *ws;
    pa_status st;
    pa_attention_init(&a, s);
    a.num_heads = H;
    a.head_dim = D;
    a.q_len = Lq;
    a.k_len = Lk;
    a.q_positions = qpos;
    a.k_positions = kpos;
    a.causal = causal;
    a.scale_set = true;
    a.scale = 1.0f;
    float *q = tu_alloc((size_t)Lq * H * D, sizeof(float));
    float *kv = tu_alloc((size_t)Lk * H * D, sizeof(float));
    a.q = q;
    a.k = kv;
    a.v = kv;
    out.output = tu_alloc((size_t)Lq * H * D, sizeof(float));
    out.logits = tu_alloc((size_t)H * Lq * Lk, sizeof(float));
    wsz = pa_attention_workspace_size(&a);
    ws = tu_alloc(wsz, 1);
    st = pa_attention_run(&a, &out, ws, wsz, &err);
    free(ws);
    free(q);
    free(kv);
    free(out.output);
    TU_ASSERT_STATUS(st, PA_STATUS_OK, &err);
    return out.logits;
}
