/* test_kv_cache.c - store/kv_cache.c: sessions as a paged KV cache.
 *
 * The property: attention over a session (its pages in place, its keys
 * as kept, its virtual positions) equals, bit for bit, the stateless call
 * that sends the session's retained tokens as they were appended (raw
 * keys, contiguous) at those positions; and with reposition, within float
 * rounding, the call at positions 0 .. n-1 with the query at n, as
 * StreamingLLM computes it. The test keeps its own model of which tokens a
 * window retains (the first sinks, then the last window ones), for rope
 * (keys kept rotated), rope with dynamic scaling (kept as sent) and alibi,
 * with GQA, through prefill and decode appends, forks (copy on write), a
 * full session, a full cache, a delete under a view and expiry.
 */
#include "store/kv_cache.h"
#include "ref_attention.h"
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { H = 4, HKV = 2, D = 16, DV = 8, MAXT = 4096 };

/* The test's own record of a session: every appended token's raw k, v and
 * position, and which token each slot holds. */
typedef struct model {
    float k[MAXT][HKV * D], v[MAXT][HKV * DV];
    int32_t pos[MAXT];
    int32_t ntok;
    int32_t slot_tok[MAXT]; /* slot -> token */
    int32_t len;
    int32_t sinks, window; /* window 0: no eviction */
} model;

static void model_append(model *m, tu_rng *r, int32_t n, float *k, float *v)
{
    for (int32_t i = 0; i < n; i++) {
        const int32_t t = m->ntok++;
        tu_fill(r, m->k[t], HKV * D, -1, 1);
        tu_fill(r, m->v[t], HKV * DV, -1, 1);
        m->pos[t] = t; /* positions continue from 0 */
        memcpy(k + (size_t)i * HKV * D, m->k[t], sizeof m->k[t]);
        memcpy(v + (size_t)i * HKV * DV, m->v[t], sizeof m->v[t]);
        if (m->window == 0 || m->len < m->sinks + m->window) {
            m->slot_tok[m->len++] = t;
        } else { /* the oldest window token's slot */
            int32_t oldest = m->sinks;
            for (int32_t j = m->sinks; j < m->len; j++)
                if (m->slot_tok[j] < m->slot_tok[oldest])
                    oldest = j;
            m->slot_tok[oldest] = t;
        }
    }
}

static void append(srv_kv_cache *c, const char *id, model *m, tu_rng *r, int32_t n)
{
    float *k = tu_alloc((size_t)n * HKV * D, sizeof(float));
    float *v = tu_alloc((size_t)n * HKV * DV, sizeof(float));
    srv_kv_err e;
    model_append(m, r, n, k, v);
    if (!srv_kv_append(c, id, k, v, n, NULL, &e))
        fail_msg("append: %s: %s", e.field, e.message);
    free(k);
    free(v);
}

/* Runs the session's attention (q [Lq, H, D] at the next positions) and
 * returns output and weights, tu_alloc'd. */
static void attend_session(srv_kv_cache *c, const char *id, const float *q, int32_t Lq, float **out,
                           float **w, srv_kv_view *keep)
{
    srv_kv_view v;
    srv_kv_err e;
    pa_attention a;
    pa_attention_out o = {0};
    pa_error pe;
    int32_t qpos[8];
    size_t wsz;
    void *ws;
    if (!srv_kv_view_take(c, id, &v, &e))
        fail_msg("view: %s", e.message);
    pa_attention_init(&a, v.spec.scheme);
    a.num_heads = H;
    a.num_kv_heads = HKV;
    a.head_dim = D;
    a.v_head_dim = DV;
    a.q_len = Lq;
    a.k_len = v.length;
    a.q = q;
    a.k_pages = v.k_pages;
    a.v_pages = v.v_pages;
    a.page_tokens = v.page_tokens;
    a.k_positions = v.positions;
    for (int32_t i = 0; i < Lq; i++)
        qpos[i] = v.next_position + i;
    a.q_positions = qpos;
    a.k_prerotated = v.prerotated;
    a.causal = true;
    *out = tu_alloc((size_t)Lq * H * DV, sizeof(float));
    *w = tu_alloc((size_t)H * Lq * v.length, sizeof(float));
    o.output = *out;
    o.weights = *w;
    wsz = pa_attention_workspace_size(&a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_attention_run(&a, &o, ws, wsz, &pe), PA_STATUS_OK, &pe);
    free(ws);
    *keep = v; /* the caller releases it */
}

/* The stateless call: the retained tokens' raw keys and values, in slot
 * order, at kpos [len], the queries at qpos; its output and weights. */
static void attend_stateless(const model *m, const pa_scheme *s, const float *q, int32_t Lq,
                             const int32_t *kpos, const int32_t *qpos, float **out, float **w)
{
    pa_attention a;
    pa_attention_out o = {0};
    pa_error pe;
    float *k = tu_alloc((size_t)m->len * HKV * D, sizeof(float));
    float *v = tu_alloc((size_t)m->len * HKV * DV, sizeof(float));
    size_t wsz;
    void *ws;
    for (int32_t j = 0; j < m->len; j++) {
        memcpy(k + (size_t)j * HKV * D, m->k[m->slot_tok[j]], sizeof m->k[0]);
        memcpy(v + (size_t)j * HKV * DV, m->v[m->slot_tok[j]], sizeof m->v[0]);
    }
    pa_attention_init(&a, s);
    a.num_heads = H;
    a.num_kv_heads = HKV;
    a.head_dim = D;
    a.v_head_dim = DV;
    a.q_len = Lq;
    a.k_len = m->len;
    a.q = q;
    a.k = k;
    a.v = v;
    a.k_positions = kpos;
    a.q_positions = qpos;
    a.causal = true;
    *out = tu_alloc((size_t)Lq * H * DV, sizeof(float));
    *w = tu_alloc((size_t)H * Lq * m->len, sizeof(float));
    o.output = *out;
    o.weights = *w;
    wsz = pa_attention_workspace_size(&a);
    ws = tu_alloc(wsz, 1);
    TU_ASSERT_STATUS(pa_attention_run(&a, &o, ws, wsz, &pe), PA_STATUS_OK, &pe);
    free(ws);
    free(k);
    free(v);
}

/* The session against the stateless call at the session's virtual
 * positions (bit for bit) and, with reposition, at 0 .. n-1 (within
 * rounding); the positions themselves against the model's. */
static void check(srv_kv_cache *c, const char *id, const model *m, const pa_scheme *s,
                  bool reposition, tu_rng *r)
{
    const int32_t Lq = 1 + (int32_t)tu_uniform(r, 0, 3);
    float q[3 * H * D], *o1, *w1, *o2, *w2;
    int32_t qpos[3], rpos[MAXT], rq[3];
    srv_kv_view v;
    tu_fill(r, q, (size_t)Lq * H * D, -1, 1);
    attend_session(c, id, q, Lq, &o1, &w1, &v);
    assert_int_equal(v.length, m->len);
    for (int32_t j = 0; j < m->len; j++) {
        /* virtual positions: a token's own, and with reposition the sinks'
         * plus the window's shift (its oldest position minus sinks) */
        int32_t oldest = INT32_MAX, want = m->pos[m->slot_tok[j]];
        for (int32_t t = m->sinks; t < m->len && m->window > 0; t++)
            oldest = m->pos[m->slot_tok[t]] < oldest ? m->pos[m->slot_tok[t]] : oldest;
        if (reposition && j < m->sinks && m->len == m->sinks + m->window)
            want += oldest - m->sinks;
        if (v.positions[j] != want)
            fail_msg("slot %d: virtual position %d, want %d", (int)j, (int)v.positions[j],
                     (int)want);
    }
    for (int32_t i = 0; i < Lq; i++)
        qpos[i] = m->ntok + i;
    attend_stateless(m, s, q, Lq, v.positions, qpos, &o2, &w2);
    assert_memory_equal(o1, o2, (size_t)Lq * H * DV * sizeof(float));
    assert_memory_equal(w1, w2, (size_t)H * Lq * m->len * sizeof(float));
    free(o2);
    free(w2);
    if (reposition) {
        /* StreamingLLM: the sinks at 0 .. S-1, the window by age after
         * them, the query at n. */
        double *want = tu_alloc((size_t)Lq * H * DV, sizeof(double));
        for (int32_t j = 0; j < m->len; j++) {
            int32_t rank = 0;
            for (int32_t t = 0; t < m->len; t++)
                rank += m->slot_tok[t] < m->slot_tok[j];
            rpos[j] = rank;
        }
        for (int32_t i = 0; i < Lq; i++)
            rq[i] = m->len + i;
        attend_stateless(m, s, q, Lq, rpos, rq, &o2, &w2);
        for (size_t e = 0; e < (size_t)Lq * H * DV; e++)
            want[e] = o2[e];
        TU_ASSERT_CLOSE(o1, want, (size_t)Lq * H * DV, 1e-5, 1e-4);
        free(want);
        free(o2);
        free(w2);
    }
    srv_kv_view_release(c, &v);
    free(o1);
    free(w1);
}

static srv_kv_cache *cache(size_t budget, double ttl)
{
    srv_kv_config cfg = {budget, 16, ttl};
    srv_kv_cache *c = srv_kv_cache_new(&cfg);
    assert_non_null(c);
    return c;
}

static srv_kv_spec spec_of(const pa_scheme *s, int32_t max_tokens, srv_kv_evict ev, int32_t window,
                           int32_t sinks, bool reposition)
{
    srv_kv_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.scheme = s;
    sp.num_kv_heads = HKV;
    sp.head_dim = D;
    sp.v_head_dim = DV;
    sp.max_tokens = max_tokens;
    sp.eviction = ev;
    sp.window = window;
    sp.sinks = sinks;
    sp.reposition = reposition;
    return sp;
}

static pa_scheme scheme_of(int which)
{
    pa_scheme s;
    pa_scheme_init(&s, which == 2 ? PA_SCHEME_ALIBI : PA_SCHEME_ROPE);
    s.rope.layout = PA_ROPE_LAYOUT_GPTJ;
    if (which == 1) { /* kept as sent: the kernel rotates per call */
        s.rope.scaling = PA_ROPE_SCALING_DYNAMIC;
        s.rope.factor = 2.0;
        s.rope.original_max_position = 32;
    }
    return s;
}

static void expect_err(bool ok, const srv_kv_err *e, srv_error code, const char *field,
                       const char *words)
{
    assert_false(ok);
    assert_string_equal(srv_error_code(e->code), srv_error_code(code));
    assert_string_equal(e->field, field);
    if (strstr(e->message, words) == NULL)
        fail_msg("message '%s' lacks '%s'", e->message, words);
}

/* Prefill and decode, every scheme, with and without a window. */
static void test_stateless_equality(void **state)
{
    (void)state;
    static model m;
    for (int which = 0; which < 3; which++)
        for (int mode = 0; mode < 3; mode++) { /* none, window, window + reposition */
            const pa_scheme s = scheme_of(which);
            srv_kv_cache *c = cache((size_t)64 << 20, 0);
            srv_kv_spec sp = spec_of(&s, 200, mode ? SRV_KV_EVICT_WINDOW : SRV_KV_EVICT_NONE,
                                     mode ? 21 : 0, mode ? 4 : 0, mode == 2);
            char id[SRV_KV_ID_LEN];
            srv_kv_err e;
            srv_kv_info info;
            tu_rng r;
            tu_rng_seed(&r, 500 + (uint64_t)(3 * which + mode));
            memset(&m, 0, sizeof m);
            m.sinks = sp.sinks;
            m.window = sp.window;
            if (mode == 2 && which == 1) { /* its frequencies follow the largest position */
                expect_err(srv_kv_create(c, &sp, id, &e), &e, SRV_ERR_UNSUPPORTED,
                           "eviction.reposition", "dynamic");
                srv_kv_cache_free(c);
                continue;
            }
            assert_true(srv_kv_create(c, &sp, id, &e));
            append(c, id, &m, &r, 10);
            check(c, id, &m, &s, mode == 2, &r);
            append(c, id, &m, &r, 27); /* past the window: prefill evicts */
            check(c, id, &m, &s, mode == 2, &r);
            for (int step = 0; step < 30; step++) { /* decode: one token each */
                append(c, id, &m, &r, 1);
                check(c, id, &m, &s, mode == 2, &r);
            }
            assert_true(srv_kv_info_get(c, id, &info, &e));
            assert_int_equal(info.length, m.len);
            assert_int_equal(info.appended, m.ntok);
            assert_int_equal(info.next_position, m.ntok);
            assert_int_equal(info.evicted, mode ? m.ntok - 25 : 0);
            assert_int_equal(info.prerotated, which == 0);
            srv_kv_cache_free(c);
        }
}

/* A fork shares the parent's blocks until either side writes one; each
 * then equals its own stateless call, and the parent is unchanged by the
 * child's appends. */
static void test_fork(void **state)
{
    (void)state;
    static model pm, cm;
    const pa_scheme s = scheme_of(0);
    srv_kv_cache *c = cache((size_t)64 << 20, 0);
    srv_kv_spec sp = spec_of(&s, 500, SRV_KV_EVICT_NONE, 0, 0, false);
    char id[SRV_KV_ID_LEN], kid[SRV_KV_ID_LEN];
    srv_kv_err e;
    srv_kv_stats st;
    srv_kv_info info;
    tu_rng r;
    tu_rng_seed(&r, 600);
    memset(&pm, 0, sizeof pm);
    assert_true(srv_kv_create(c, &sp, id, &e));
    append(c, id, &pm, &r, 40); /* 3 blocks, the last partly used */
    assert_true(srv_kv_fork(c, id, kid, &e));
    cm = pm;
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.blocks_used, 3);
    assert_int_equal(st.blocks_shared, 3);
    assert_int_equal(st.sessions, 2);
    check(c, kid, &cm, &s, false, &r);
    append(c, kid, &cm, &r, 5); /* copies the third block only */
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.blocks_used, 4);
    assert_int_equal(st.blocks_shared, 2);
    append(c, id, &pm, &r, 30);
    check(c, id, &pm, &s, false, &r);
    check(c, kid, &cm, &s, false, &r);
    assert_true(srv_kv_info_get(c, kid, &info, &e));
    assert_int_equal(info.length, 45);
    assert_int_equal(info.shared_blocks, 2);
    /* The scheme's type is copied out: a reader racing a delete never
     * follows info.spec.scheme. */
    assert_int_equal(info.scheme_type, info.spec.scheme->type);
    assert_true(srv_kv_delete(c, id, &e));
    check(c, kid, &cm, &s, false, &r);
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.blocks_shared, 0);
    assert_int_equal(st.bytes, 3 * (size_t)16 * (HKV * D + HKV * DV) * sizeof(float));
    srv_kv_cache_free(c);
}

/* SESSION_FULL, CACHE_FULL after dropping the least recently used idle
 * session, and the session left as it was. */
static void test_full(void **state)
{
    (void)state;
    static model m, m2;
    const pa_scheme s = scheme_of(2);
    const size_t block = (size_t)16 * (HKV * D + HKV * DV) * sizeof(float);
    srv_kv_cache *c = cache(2 * block, 0);
    srv_kv_spec sp = spec_of(&s, 20, SRV_KV_EVICT_NONE, 0, 0, false);
    char a[SRV_KV_ID_LEN], b[SRV_KV_ID_LEN];
    static float k[33 * HKV * D], v[33 * HKV * DV];
    srv_kv_err e;
    srv_kv_info info;
    srv_kv_stats st;
    tu_rng r;
    tu_rng_seed(&r, 700);
    memset(&m, 0, sizeof m);
    memset(&m2, 0, sizeof m2);
    assert_true(srv_kv_create(c, &sp, a, &e));
    append(c, a, &m, &r, 18); /* two blocks: the budget */
    expect_err(srv_kv_append(c, a, k, v, 3, NULL, &e), &e, SRV_ERR_SESSION_FULL, "k",
               "18 of its max_tokens=20");
    assert_true(srv_kv_info_get(c, a, &info, &e));
    assert_int_equal(info.length, 18);
    assert_true(srv_kv_create(c, &sp, b, &e));
    append(c, b, &m2, &r, 16); /* drops a, idle and least recently used */
    expect_err(srv_kv_info_get(c, a, &info, &e), &e, SRV_ERR_SESSION_NOT_FOUND, "session",
               "no session");
    append(c, b, &m2, &r, 4);
    /* three blocks do not fit a budget of two, even without b: refused,
     * and b (idle) is left alone */
    sp.max_tokens = 100;
    assert_true(srv_kv_create(c, &sp, a, &e));
    expect_err(srv_kv_append(c, a, k, v, 33, NULL, &e), &e, SRV_ERR_CACHE_FULL, "k",
               "(2 sessions)");
    assert_true(srv_kv_info_get(c, a, &info, &e));
    assert_int_equal(info.length, 0);
    assert_true(srv_kv_info_get(c, b, &info, &e));
    assert_int_equal(info.length, 20);
    /* one block does, by dropping b */
    assert_true(srv_kv_append(c, a, k, v, 16, NULL, &e));
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.evicted_full, 2);
    expect_err(srv_kv_info_get(c, b, &info, &e), &e, SRV_ERR_SESSION_NOT_FOUND, "session",
               "no session");
    srv_kv_cache_free(c);
}

/* A view outlives a delete; expiry drops idle sessions. */
static void test_view_and_expiry(void **state)
{
    (void)state;
    static model m;
    const pa_scheme s = scheme_of(0);
    srv_kv_cache *c = cache((size_t)16 << 20, 0.02);
    srv_kv_spec sp = spec_of(&s, 100, SRV_KV_EVICT_NONE, 0, 0, false);
    char id[SRV_KV_ID_LEN];
    srv_kv_err e;
    srv_kv_view v;
    srv_kv_stats st;
    float q[H * D] = {0}, *o, *w;
    struct timespec ts = {0, 40 * 1000 * 1000};
    tu_rng r;
    tu_rng_seed(&r, 800);
    memset(&m, 0, sizeof m);
    assert_true(srv_kv_create(c, &sp, id, &e));
    append(c, id, &m, &r, 33);
    attend_session(c, id, q, 1, &o, &w, &v);
    assert_true(srv_kv_delete(c, id, &e));
    free(o);
    free(w);
    { /* the view's pages still read (ASan would see a freed one) */
        double sum = 0.0;
        for (int32_t j = 0; j < v.length; j++)
            sum += v.k_pages[j / v.page_tokens][(size_t)(j % v.page_tokens) * HKV * D];
        assert_true(isfinite(sum));
    }
    srv_kv_view_release(c, &v);
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.sessions, 0);
    assert_true(srv_kv_create(c, &sp, id, &e));
    nanosleep(&ts, NULL);
    assert_int_equal(srv_kv_expire(c), 1);
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.evicted_ttl, 1);
    srv_kv_cache_free(c);
}

/* A session used while srv_kv_expire runs is not expired. The expiry had
 * read the clock before waiting for the cache's lock: a session touched in
 * the meantime, in a later millisecond, was then "used in the future", its
 * idle time a wrapped unsigned difference past any TTL, and it was dropped
 * in use (posattn-load's sessions run got SESSION_NOT_FOUND mid-decode).
 * Here one thread takes and releases views of the session (each touches
 * it) for 300 ms while this one expires with a TTL of 600 s: nothing may
 * expire. */
typedef struct toucher {
    srv_kv_cache *c;
    const char *id;
    atomic_int stop;
    long touches;
} toucher;

static void *touch_loop(void *arg)
{
    toucher *t = arg;
    srv_kv_err e;
    while (!atomic_load(&t->stop)) {
        srv_kv_view v;
        if (!srv_kv_view_take(t->c, t->id, &v, &e))
            break;
        srv_kv_view_release(t->c, &v);
        t->touches++;
    }
    return NULL;
}

static void test_expire_while_touched(void **state)
{
    (void)state;
    static model m;
    const pa_scheme s = scheme_of(0);
    srv_kv_cache *c = cache((size_t)16 << 20, 600.0);
    srv_kv_spec sp = spec_of(&s, 100, SRV_KV_EVICT_NONE, 0, 0, false);
    char id[SRV_KV_ID_LEN];
    srv_kv_err e;
    srv_kv_stats st;
    toucher t;
    pthread_t th;
    size_t expired = 0;
    long calls = 0;
    struct timespec t0, t1;
    tu_rng r;
    tu_rng_seed(&r, 900);
    memset(&m, 0, sizeof m);
    assert_true(srv_kv_create(c, &sp, id, &e));
    append(c, id, &m, &r, 8);
    t.c = c;
    t.id = id;
    atomic_init(&t.stop, 0);
    t.touches = 0;
    assert_int_equal(pthread_create(&th, NULL, touch_loop, &t), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        expired += srv_kv_expire(c);
        calls++;
        clock_gettime(CLOCK_MONOTONIC, &t1);
    } while ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) < 0.3);
    atomic_store(&t.stop, 1);
    pthread_join(th, NULL);
    assert_true(calls > 1000 && t.touches > 1000);
    assert_int_equal(expired, 0);
    srv_kv_stats_get(c, &st);
    assert_int_equal(st.evicted_ttl, 0);
    assert_int_equal(st.sessions, 1);
    srv_kv_cache_free(c);
}

static void test_spec_errors(void **state)
{
    (void)state;
    const pa_scheme s = scheme_of(0);
    pa_scheme cope;
    srv_kv_cache *c = cache(1 << 20, 0);
    char id[SRV_KV_ID_LEN];
    srv_kv_err e;
    srv_kv_spec sp = spec_of(&s, 10, SRV_KV_EVICT_WINDOW, 8, 4, false);
    expect_err(srv_kv_create(c, &sp, id, &e), &e, SRV_ERR_INVALID_ARGUMENT, "eviction.window",
               "sinks + window <= max_tokens=10");
    sp = spec_of(&s, 0, SRV_KV_EVICT_NONE, 0, 0, false);
    expect_err(srv_kv_create(c, &sp, id, &e), &e, SRV_ERR_INVALID_ARGUMENT, "max_tokens",
               "max_tokens=0");
    sp = spec_of(&s, 10, SRV_KV_EVICT_NONE, 0, 0, true);
    expect_err(srv_kv_create(c, &sp, id, &e), &e, SRV_ERR_INVALID_ARGUMENT, "eviction.reposition",
               "window");
    pa_scheme_init(&cope, PA_SCHEME_COPE);
    sp = spec_of(&cope, 10, SRV_KV_EVICT_NONE, 0, 0, false);
    expect_err(srv_kv_create(c, &sp, id, &e), &e, SRV_ERR_UNSUPPORTED, "scheme.type", "cope");
    sp = spec_of(&s, 10, SRV_KV_EVICT_WINDOW, 4, 2, true);
    assert_true(srv_kv_create(c, &sp, id, &e));
    {
        float k[HKV * D] = {0}, v[HKV * DV] = {0};
        const int32_t p = 5;
        expect_err(srv_kv_append(c, id, k, v, 1, &p, &e), &e, SRV_ERR_INVALID_ARGUMENT,
                   "k_positions", "reposition");
    }
    expect_err(srv_kv_delete(c, "nope", &e), &e, SRV_ERR_SESSION_NOT_FOUND, "session", "nope");
    srv_kv_cache_free(c);
}

/* Ids the caller chooses (srv_kv_create_as): the charset, the length, a
 * taken id (SESSION_EXISTS), and that a fork's id is still the cache's. */
static void test_chosen_ids(void **state)
{
    (void)state;
    const pa_scheme s = scheme_of(0);
    srv_kv_cache *c = cache(1 << 20, 0);
    char id[SRV_KV_ID_LEN], fork_id[SRV_KV_ID_LEN], longest[SRV_KV_ID_LEN + 1];
    srv_kv_info info;
    srv_kv_err e;
    srv_kv_spec sp = spec_of(&s, 10, SRV_KV_EVICT_NONE, 0, 0, false);
    static const char *const bad[] = {"", ".", "..", ".hidden", "a/b", "a b", "../x", "é", "a\n"};

    assert_true(srv_kv_create_as(c, &sp, "chat-7.turn_2", id, &e));
    assert_string_equal(id, "chat-7.turn_2");
    assert_true(srv_kv_info_get(c, "chat-7.turn_2", &info, &e));
    assert_string_equal(info.id, "chat-7.turn_2");
    expect_err(srv_kv_create_as(c, &sp, "chat-7.turn_2", id, &e), &e, SRV_ERR_SESSION_EXISTS, "id",
               "chat-7.turn_2");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_false(srv_kv_id_valid(bad[i]));
        expect_err(srv_kv_create_as(c, &sp, bad[i], id, &e), &e, SRV_ERR_INVALID_ARGUMENT, "id",
                   "not a session id");
    }
    memset(longest, 'x', SRV_KV_ID_LEN - 1);
    longest[SRV_KV_ID_LEN - 1] = '\0';
    assert_true(srv_kv_id_valid(longest));
    assert_true(srv_kv_create_as(c, &sp, longest, id, &e));
    assert_string_equal(id, longest);
    longest[SRV_KV_ID_LEN - 1] = 'x';
    longest[SRV_KV_ID_LEN] = '\0';
    assert_false(srv_kv_id_valid(longest));
    assert_true(srv_kv_id_valid("a.b-c_D9"));
    /* Random ids still come when none is chosen; a fork's too. */
    assert_true(srv_kv_create_as(c, &sp, NULL, id, &e));
    assert_int_equal(strlen(id), 32);
    assert_true(srv_kv_fork(c, "chat-7.turn_2", fork_id, &e));
    assert_int_equal(strlen(fork_id), 32);
    assert_true(srv_kv_id_valid(fork_id));
    /* A deleted id may be chosen again. */
    assert_true(srv_kv_delete(c, "chat-7.turn_2", &e));
    assert_true(srv_kv_create_as(c, &sp, "chat-7.turn_2", id, &e));
    srv_kv_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stateless_equality),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_view_and_expiry),
        cmocka_unit_test(test_expire_while_touched),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_chosen_ids),
    };
    return cmocka_run_group_tests_name("kv_cache", tests, NULL, NULL);
}
