/* test_api_mla.c - MLA with decoupled RoPE through the JSON API (server/
 * api/item_mla.c, attention.c's pa_mla_run): /v1/attention against the
 * library's pa_mla_run bit for bit in the JSON numbers, every result
 * (output, weights, logits, q_rot, k_rot [Lk, D_rope], entropy,
 * distance), both forms (expanded: k_nope and v; absorbed: c_kv with
 * mla.w_uk and mla.w_uv), k_rope as [Lk, D_rope] and as [Lk, 1, D_rope],
 * rope in both layouts and yarn with mscale_all_dim (HF's scale), decode
 * rows, no rope, sinks and k_prerotated; f16 on the wire; the refusals,
 * each naming its field; the weights past PA_MLA_LOGITS_MAX and a request
 * over --max-request-mb (413s).
 */
#include "api_harness.h"
#include "posattn_mla.h"
#include "ref_half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mcase {
    int Lq, Lk, H, Dn, Dr, Dv, R; /* R > 0: absorbed */
    const char *scheme;           /* JSON; the same set on s by set_scheme */
    int scheme_kind;              /* 0 none, 1 rope neox, 2 rope gptj yarn */
    bool causal, k_rope_3d, sinks, prerotated, f16;
} mcase;

static const char *const scheme_json[3] = {
    "{\"type\":\"none\"}",
    "{\"type\":\"rope\"}",
    "{\"type\":\"rope\",\"layout\":\"gptj\",\"scaling\":\"yarn\",\"factor\":40,"
    "\"original_max_position\":64,\"mscale\":1,\"mscale_all_dim\":1}",
};

static void set_scheme(pa_scheme *s, int kind)
{
    pa_scheme_init(s, kind == 0 ? PA_SCHEME_NONE : PA_SCHEME_ROPE);
    if (kind == 2) { /* DeepSeek-V3's rope_scaling */
        s->rope.layout = PA_ROPE_LAYOUT_GPTJ;
        s->rope.scaling = PA_ROPE_SCALING_YARN;
        s->rope.factor = 40.0;
        s->rope.original_max_position = 64;
        s->rope.mscale = 1.0;
        s->rope.mscale_all_dim = 1.0;
    }
}

/* The inputs of one case. */
typedef struct mfix {
    mcase c;
    float *q, *k, *v, *kr, *ckv, *wuk, *wuv, *sinks;
} mfix;

static float *values(tu_rng *r, size_t n, double lo, double hi, bool half)
{
    float *t = rnd(r, n, lo, hi);
    if (half) /* values f16 holds exactly: the wire's dtype loses nothing */
        for (size_t i = 0; i < n; i++)
            t[i] = (float)ref_f16_value(ref_f16_round(t[i]));
    return t;
}

static void mfix_make(mfix *f, const mcase *c, uint64_t seed)
{
    tu_rng r;
    const double w = c->R > 0 ? 1.0 / sqrt((double)c->R) : 1.0;
    memset(f, 0, sizeof *f);
    f->c = *c;
    tu_rng_seed(&r, seed);
    f->q = values(&r, (size_t)c->Lq * c->H * (c->Dn + c->Dr), -1, 1, c->f16);
    f->kr = values(&r, (size_t)c->Lk * c->Dr, -1, 1, c->f16);
    if (c->R > 0) {
        f->ckv = values(&r, (size_t)c->Lk * c->R, -1, 1, c->f16);
        f->wuk = values(&r, (size_t)c->H * c->Dn * c->R, -w, w, c->f16);
        f->wuv = values(&r, (size_t)c->H * c->Dv * c->R, -w, w, c->f16);
    } else {
        f->k = values(&r, (size_t)c->Lk * c->H * c->Dn, -1, 1, c->f16);
        f->v = values(&r, (size_t)c->Lk * c->H * c->Dv, -1, 1, c->f16);
    }
    if (c->sinks)
        f->sinks = values(&r, (size_t)c->H, -1, 1, false);
}

static void mfix_free(mfix *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->kr);
    free(f->ckv);
    free(f->wuk);
    free(f->wuv);
    free(f->sinks);
}

static void mfix_desc(const mfix *f, const pa_scheme *s, pa_attention *a, pa_mla *m)
{
    const mcase *c = &f->c;
    pa_attention_init(a, s);
    a->num_heads = c->H;
    a->head_dim = c->Dn + c->Dr;
    a->v_head_dim = c->Dv;
    a->q_len = c->Lq;
    a->k_len = c->Lk;
    a->q = f->q;
    a->k = f->k;
    a->v = f->v;
    a->causal = c->causal;
    a->sinks = f->sinks;
    a->k_prerotated = c->prerotated;
    memset(m, 0, sizeof *m);
    m->rope_dim = c->Dr;
    m->k_rope = f->kr;
    if (c->R > 0) {
        m->absorbed = true;
        m->kv_lora_rank = c->R;
        m->c_kv = f->ckv;
        m->w_uk = f->wuk;
        m->w_uv = f->wuv;
    }
}

/* Every result of pa_mla_run, malloc'd, in api_result_names' order. */
typedef struct mres {
    float *r[7];
    size_t n[7];
} mres;

static void lib_mla(const mfix *f, mres *o)
{
    const mcase *c = &f->c;
    pa_scheme s;
    pa_attention a;
    pa_mla m;
    pa_error err;
    set_scheme(&s, c->scheme_kind);
    mfix_desc(f, &s, &a, &m);
    o->n[0] = (size_t)c->Lq * c->H * c->Dv;
    o->n[1] = o->n[2] = (size_t)c->H * c->Lq * c->Lk;
    o->n[3] = (size_t)c->Lq * c->H * (c->Dn + c->Dr);
    o->n[4] = (size_t)c->Lk * c->Dr;
    o->n[5] = o->n[6] = (size_t)c->H * c->Lq;
    for (int i = 0; i < 7; i++)
        o->r[i] = tu_alloc(o->n[i], sizeof(float));
    pa_attention_out out = {.output = o->r[0],
                            .weights = o->r[1],
                            .logits = o->r[2],
                            .q_rot = o->r[3],
                            .k_rot = o->r[4],
                            .entropy = o->r[5],
                            .distance = o->r[6]};
    size_t ws_size = pa_mla_workspace_size(&a, &m);
    void *ws = tu_alloc(ws_size, 1);
    assert_true(ws_size > 0);
    if (pa_mla_run(&a, &m, &out, ws, ws_size, &err) != PA_STATUS_OK)
        fail_msg("pa_mla_run: %s: %s", err.field, err.message);
    free(ws);
}

static void mres_free(mres *o)
{
    for (int i = 0; i < 7; i++)
        free(o->r[i]);
}

static cJSON *wire(cJSON *t, bool f16)
{
    if (f16)
        cJSON_AddStringToObject(t, "dtype", "f16");
    return t;
}

/* The item for f: scheme, q, k_rope, k and v or c_kv, mla, options. */
static cJSON *mfix_item(const mfix *f)
{
    const mcase *c = &f->c;
    cJSON *it = cJSON_CreateObject(), *mla = cJSON_CreateObject();
    cJSON_AddItemToObject(it, "scheme", scheme_of(scheme_json[c->scheme_kind]));
    cJSON_AddItemToObject(it, "q", wire(jtensor(f->q, 3, c->Lq, c->H, c->Dn + c->Dr), c->f16));
    cJSON_AddItemToObject(
        it, "k_rope",
        wire(c->k_rope_3d ? jtensor(f->kr, 3, c->Lk, 1, c->Dr) : jtensor(f->kr, 2, c->Lk, c->Dr),
             c->f16));
    cJSON_AddNumberToObject(mla, "rope_dim", c->Dr);
    if (c->R > 0) {
        cJSON_AddTrueToObject(mla, "absorbed");
        cJSON_AddItemToObject(it, "c_kv", wire(jtensor(f->ckv, 2, c->Lk, c->R), c->f16));
        cJSON_AddItemToObject(mla, "w_uk", wire(jtensor(f->wuk, 3, c->H, c->Dn, c->R), c->f16));
        cJSON_AddItemToObject(mla, "w_uv", wire(jtensor(f->wuv, 3, c->H, c->Dv, c->R), c->f16));
    } else {
        cJSON_AddItemToObject(it, "k", wire(jtensor(f->k, 3, c->Lk, c->H, c->Dn), c->f16));
        cJSON_AddItemToObject(it, "v", wire(jtensor(f->v, 3, c->Lk, c->H, c->Dv), c->f16));
    }
    cJSON_AddItemToObject(it, "mla", mla);
    if (c->causal)
        cJSON_AddTrueToObject(it, "causal");
    if (c->sinks)
        cJSON_AddItemToObject(it, "sinks", jtensor(f->sinks, 1, c->H));
    if (c->prerotated)
        cJSON_AddTrueToObject(it, "k_prerotated");
    return it;
}

/* obj.name's JSON numbers equal want bit for bit, flat data of n values
 * (null is a masked logit's -inf). */
static void exact_is(const cJSON *obj, const char *name, const float *want, size_t n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, name);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(t, "data"), *d;
    size_t i = 0;
    if (data == NULL)
        fail_msg("no %s in the answer", name);
    cJSON_ArrayForEach(d, data)
    {
        assert_true(i < n);
        if (cJSON_IsNull(d) ? !(isinf(want[i]) && want[i] < 0)
                            : !cJSON_IsNumber(d) || (float)d->valuedouble != want[i])
            fail_msg("%s[%zu]: got %.9g, want %.9g", name, i, d->valuedouble, (double)want[i]);
        i++;
    }
    assert_int_equal(i, n);
}

static void fail_unless_ok(cJSON *ans, int status)
{
    if (status != 200) {
        char *txt = cJSON_PrintUnformatted(ans);
        fail_msg("status %d: %.600s", status, txt);
    }
    const char *code = str_at(output_at(ans, 0), "error", "code");
    if (code != NULL)
        fail_msg("item error %s: %s", code, str_at(output_at(ans, 0), "error", "message"));
}

static void run_case(const mcase *c, uint64_t seed)
{
    static const char *const all[7] = {"output", "weights", "logits",  "q_rot",
                                       "k_rot",  "entropy", "distance"};
    srv_limits lim = limits();
    mfix f;
    mres want;
    int status;
    mfix_make(&f, c, seed);
    lib_mla(&f, &want);
    cJSON *item = mfix_item(&f);
    cJSON_AddItemToObject(item, "return", cJSON_CreateStringArray(all, 7));
    cJSON *items[1] = {item};
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    fail_unless_ok(ans, status);
    const cJSON *o = output_at(ans, 0);
    shape_is(o, "output", 3, c->Lq, c->H, c->Dv);
    shape_is(o, "weights", 3, c->H, c->Lq, c->Lk);
    shape_is(o, "logits", 3, c->H, c->Lq, c->Lk);
    shape_is(o, "q_rot", 3, c->Lq, c->H, c->Dn + c->Dr);
    shape_is(o, "k_rot", 2, c->Lk, c->Dr);
    shape_is(o, "entropy", 2, c->H, c->Lq);
    shape_is(o, "distance", 2, c->H, c->Lq);
    for (int i = 0; i < 7; i++)
        exact_is(o, all[i], want.r[i], want.n[i]);
    cJSON_Delete(ans);
    mres_free(&want);
    mfix_free(&f);
}

static void test_matches_library(void **state)
{
    (void)state;
    const mcase cases[] = {
        /* expanded, rope (neox), causal prefill; Dv differs from D. */
        {.Lq = 6, .Lk = 6, .H = 3, .Dn = 8, .Dr = 4, .Dv = 6, .scheme_kind = 1, .causal = true},
        /* DeepSeek-V3's rope: gptj pairs, yarn with mscale_all_dim (HF's
         * scale); k_rope as [Lk, 1, D_rope]. */
        {.Lq = 5,
         .Lk = 7,
         .H = 2,
         .Dn = 6,
         .Dr = 4,
         .Dv = 5,
         .scheme_kind = 2,
         .causal = true,
         .k_rope_3d = true},
        /* absorbed, the same two. */
        {.Lq = 6,
         .Lk = 6,
         .H = 3,
         .Dn = 8,
         .Dr = 4,
         .Dv = 6,
         .R = 10,
         .scheme_kind = 1,
         .causal = true},
        {.Lq = 5,
         .Lk = 7,
         .H = 2,
         .Dn = 6,
         .Dr = 4,
         .Dv = 5,
         .R = 12,
         .scheme_kind = 2,
         .causal = true,
         .k_rope_3d = true},
        /* decode rows (the decode kernel), both forms, sinks. */
        {.Lq = 1, .Lk = 9, .H = 4, .Dn = 4, .Dr = 2, .Dv = 4, .scheme_kind = 2, .sinks = true},
        {.Lq = 2,
         .Lk = 9,
         .H = 4,
         .Dn = 4,
         .Dr = 2,
         .Dv = 4,
         .R = 6,
         .scheme_kind = 1,
         .causal = true,
         .sinks = true},
        /* no rope; prerotated keys. */
        {.Lq = 3, .Lk = 4, .H = 1, .Dn = 5, .Dr = 2, .Dv = 3, .scheme_kind = 0},
        {.Lq = 3, .Lk = 5, .H = 2, .Dn = 4, .Dr = 4, .Dv = 3, .scheme_kind = 1, .prerotated = true},
        {.Lq = 3,
         .Lk = 5,
         .H = 2,
         .Dn = 4,
         .Dr = 4,
         .Dv = 3,
         .R = 5,
         .scheme_kind = 2,
         .prerotated = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], 60 + i);
}

/* The absorbed form's answer equals the expanded one's within float
 * rounding when k_nope and v are c_kv's up-projections. */
static void test_absorbed_equals_expanded(void **state)
{
    (void)state;
    const mcase ca = {.Lq = 4,
                      .Lk = 6,
                      .H = 2,
                      .Dn = 6,
                      .Dr = 4,
                      .Dv = 5,
                      .R = 8,
                      .scheme_kind = 2,
                      .causal = true};
    mcase ce = ca;
    mfix fa, fe;
    mres ra, re;
    ce.R = 0;
    mfix_make(&fa, &ca, 5);
    mfix_make(&fe, &ce, 5);
    memcpy(fe.q, fa.q, (size_t)ca.Lq * ca.H * (ca.Dn + ca.Dr) * sizeof(float));
    memcpy(fe.kr, fa.kr, (size_t)ca.Lk * ca.Dr * sizeof(float));
    for (int j = 0; j < ca.Lk; j++)
        for (int h = 0; h < ca.H; h++) {
            for (int d = 0; d < ca.Dn; d++) {
                double s = 0;
                for (int r = 0; r < ca.R; r++)
                    s += (double)fa.wuk[((size_t)h * ca.Dn + d) * ca.R + r] *
                         fa.ckv[(size_t)j * ca.R + r];
                fe.k[((size_t)j * ca.H + h) * ca.Dn + d] = (float)s;
            }
            for (int d = 0; d < ca.Dv; d++) {
                double s = 0;
                for (int r = 0; r < ca.R; r++)
                    s += (double)fa.wuv[((size_t)h * ca.Dv + d) * ca.R + r] *
                         fa.ckv[(size_t)j * ca.R + r];
                fe.v[((size_t)j * ca.H + h) * ca.Dv + d] = (float)s;
            }
        }
    srv_limits lim = limits();
    int status;
    cJSON *items[2] = {mfix_item(&fa), mfix_item(&fe)};
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 2), &lim, &status);
    fail_unless_ok(ans, status);
    lib_mla(&fa, &ra);
    lib_mla(&fe, &re);
    exact_is(output_at(ans, 0), "output", ra.r[0], ra.n[0]);
    exact_is(output_at(ans, 1), "output", re.r[0], re.n[0]);
    for (size_t i = 0; i < ra.n[0]; i++)
        if (fabsf(ra.r[0][i] - re.r[0][i]) > 1e-5f + 1e-5f * fabsf(re.r[0][i]))
            fail_msg("output[%zu]: absorbed %.9g, expanded %.9g", i, (double)ra.r[0][i],
                     (double)re.r[0][i]);
    cJSON_Delete(ans);
    mres_free(&ra);
    mres_free(&re);
    mfix_free(&fa);
    mfix_free(&fe);
}

/* Tensors sent as f16 (values f16 holds) with output_dtype f16. */
static void test_f16_wire(void **state)
{
    (void)state;
    srv_limits lim = limits();
    for (int absorbed = 0; absorbed < 2; absorbed++) {
        const mcase c = {.Lq = 4,
                         .Lk = 4,
                         .H = 2,
                         .Dn = 4,
                         .Dr = 2,
                         .Dv = 4,
                         .R = absorbed ? 6 : 0,
                         .scheme_kind = 2,
                         .causal = true,
                         .f16 = true};
        mfix f;
        mres want;
        int status;
        mfix_make(&f, &c, 90 + (uint64_t)absorbed);
        lib_mla(&f, &want);
        for (size_t i = 0; i < want.n[0]; i++)
            want.r[0][i] = (float)ref_f16_value(ref_f16_round(want.r[0][i]));
        cJSON *item = mfix_item(&f);
        cJSON_AddStringToObject(item, "output_dtype", "f16");
        cJSON *items[1] = {item};
        cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        fail_unless_ok(ans, status);
        shape_is(output_at(ans, 0), "output", 3, 4, 2, 4);
        exact_is(output_at(ans, 0), "output", want.r[0], want.n[0]);
        cJSON_Delete(ans);
        mres_free(&want);
        mfix_free(&f);
    }
}

/* One item (an expanded or absorbed fixture, Lq 3, Lk 4, H 2, D_nope 4,
 * D_rope 2, Dv 3, R 5) with mla replaced by `mla` when given and
 * `extra`'s members set (null removes one); fails with code at field, and
 * the message holds `word` when given. */
static void refused(bool absorbed, const char *mla, const char *extra, const char *code,
                    const char *field, const char *word)
{
    srv_limits lim = limits();
    const mcase c = {.Lq = 3,
                     .Lk = 4,
                     .H = 2,
                     .Dn = 4,
                     .Dr = 2,
                     .Dv = 3,
                     .R = absorbed ? 5 : 0,
                     .scheme_kind = 1};
    mfix f;
    int status;
    char path[64];
    mfix_make(&f, &c, 7);
    cJSON *item = mfix_item(&f);
    if (mla != NULL)
        cJSON_ReplaceItemInObject(item, "mla", json_of(mla));
    if (extra != NULL) {
        cJSON *x = json_of(extra), *m;
        cJSON_ArrayForEach(m, x)
        {
            cJSON_DeleteItemFromObject(item, m->string);
            if (!cJSON_IsNull(m))
                cJSON_AddItemToObject(item, m->string, cJSON_Duplicate(m, true));
        }
        cJSON_Delete(x);
    }
    cJSON *items[1] = {item};
    cJSON *ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
    snprintf(path, sizeof path, "inputs[0].%s", field);
    expect_item_error(ans, 0, code, path);
    if (word != NULL) {
        const char *msg = str_at(output_at(ans, 0), "error", "message");
        if (msg == NULL || strstr(msg, word) == NULL)
            fail_msg("%s: message '%s' lacks '%s'", field, msg ? msg : "", word);
    }
    cJSON_Delete(ans);
    mfix_free(&f);
}

#define T(shape, data) "{\"shape\":" shape ",\"data\":" data "}"
static void test_refusals(void **state)
{
    (void)state;
    /* The object. */
    refused(false, "[2]", NULL, "INVALID_ARGUMENT", "mla", "object");
    refused(false, "{\"rope_dim\":2,\"ropedim\":2}", NULL, "UNKNOWN_FIELD", "mla.ropedim", NULL);
    refused(false, "{}", NULL, "INVALID_ARGUMENT", "mla.rope_dim", "required");
    refused(false, "{\"rope_dim\":\"2\"}", NULL, "INVALID_ARGUMENT", "mla.rope_dim", NULL);
    refused(false, "{\"rope_dim\":3}", NULL, "INVALID_ARGUMENT", "mla.rope_dim", "even");
    refused(false, "{\"rope_dim\":6}", NULL, "INVALID_ARGUMENT", "mla.rope_dim", "q.shape[2]=6");
    refused(false, "{\"rope_dim\":2,\"absorbed\":1}", NULL, "INVALID_ARGUMENT", "mla.absorbed",
            NULL);
    refused(false, "{\"rope_dim\":2,\"w_uk\":" T("[2,4,5]", "[0]") "}", NULL, "INVALID_ARGUMENT",
            "mla.w_uk", "absorbed");
    /* k_rope and c_kv without mla. */
    refused(false, NULL, "{\"mla\":null}", "INVALID_ARGUMENT", "k_rope", "mla");
    refused(false, NULL,
            "{\"mla\":null,\"k_rope\":null,\"c_kv\":" T("[4,2]", "[1,2,3,4,5,6,7,8]") "}",
            "INVALID_ARGUMENT", "c_kv", "mla");
    /* Expanded shapes. */
    refused(false, NULL, "{\"k_rope\":null}", "INVALID_ARGUMENT", "k_rope", "required");
    refused(false, NULL, "{\"k\":null}", "INVALID_ARGUMENT", "k", "required");
    refused(false, NULL, "{\"v\":null}", "INVALID_ARGUMENT", "v", "required");
    refused(false, NULL,
            "{\"k\":" T("[4,2,6]", "["
                                   "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                                   "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]") "}",
            "SHAPE_MISMATCH", "k.shape",
            "k.shape[2]=6 does not equal q.shape[2] - mla.rope_dim = 6 - 2");
    refused(false, NULL, "{\"k\":" T("[4,1,4]", "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]") "}",
            "SHAPE_MISMATCH", "k.shape", "k.shape[1]=1");
    refused(false, NULL, "{\"v\":" T("[4,1,3]", "[0,0,0,0,0,0,0,0,0,0,0,0]") "}", "SHAPE_MISMATCH",
            "v.shape", "v.shape[1]=1");
    refused(false, NULL, "{\"v\":" T("[3,2,1]", "[0,0,0,0,0,0]") "}", "SHAPE_MISMATCH", "v.shape",
            "v.shape[0]=3");
    refused(false, NULL, "{\"k_rope\":" T("[4,4]", "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]") "}",
            "SHAPE_MISMATCH", "k_rope.shape", "k_rope.shape[1]=4 does not equal mla.rope_dim=2");
    refused(false, NULL, "{\"k_rope\":" T("[3,2]", "[0,0,0,0,0,0]") "}", "SHAPE_MISMATCH",
            "k_rope.shape", "k.shape[0]=4");
    refused(false, NULL, "{\"k_rope\":" T("[4,2,1]", "[0,0,0,0,0,0,0,0]") "}", "SHAPE_MISMATCH",
            "k_rope.shape", "k_rope.shape[1]=2 must be 1");
    refused(false, NULL, "{\"k_rope\":" T("[8]", "[0,0,0,0,0,0,0,0]") "}", "SHAPE_MISMATCH",
            "k_rope.shape", "dimensions");
    refused(false, NULL, "{\"c_kv\":" T("[4,5]", "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]") "}",
            "INVALID_ARGUMENT", "c_kv", "absorbed");
    refused(false, NULL, "{\"num_kv_heads\":1}", "SHAPE_MISMATCH", "num_kv_heads", NULL);
    /* Absorbed shapes. */
    refused(true, NULL, "{\"c_kv\":null}", "INVALID_ARGUMENT", "c_kv", "required");
    refused(true, NULL,
            "{\"k\":" T("[4,2,4]", "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                                   "0,0,0,0,0,0,0,0]") "}",
            "INVALID_ARGUMENT", "k", "c_kv");
    refused(true, "{\"rope_dim\":2,\"absorbed\":true}", NULL, "INVALID_ARGUMENT", "mla.w_uk",
            "required");
    refused(true,
            "{\"rope_dim\":2,\"absorbed\":true,\"w_uk\":" T(
                "[2,4,5]", "["
                           "0,0,0,0,0,0,0,0,"
                           "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]") "}",
            NULL, "INVALID_ARGUMENT", "mla.w_uv", "required");
    refused(true,
            "{\"rope_dim\":2,\"absorbed\":true,\"w_uk\":" T(
                "[2,3,5]",
                "["
                "0,0,0,0,0,0,0,0,"
                "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]") ",\"w_uv\":" T("[2,3,5]",
                                                                               "["
                                                                               "0,0,0,0,0,0,0,0,"
                                                                               "0,0,0,0,0,0,0,0,0,"
                                                                               "0,0,0,0,0,0,0,0,0,"
                                                                               "0,0,0,0]") "}",
            NULL, "SHAPE_MISMATCH", "mla.w_uk.shape", "[2, 4, 5]");
    refused(true,
            "{\"rope_dim\":2,\"absorbed\":true,\"w_uk\":" T(
                "[2,4,5]", "["
                           "0,0,0,0,0,0,0,0,"
                           "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                           "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                           "0,0]") ",\"w_uv\":" T("[2,3,4]", "["
                                                             "0,0,0,0,"
                                                             "0,0,0,0,"
                                                             "0,0,0,0,"
                                                             "0,0,0,0,"
                                                             "0,0,0,0,"
                                                             "0,0,0,"
                                                             "0]") "}",
            NULL, "SHAPE_MISMATCH", "mla.w_uv.shape", "R=5");
    refused(true, NULL, "{\"k_rope\":" T("[3,2]", "[0,0,0,0,0,0]") "}", "SHAPE_MISMATCH",
            "k_rope.shape", "c_kv.shape[0]=4");
    /* Not with: layer mode, differential, batches, query_length, packed,
     * the library's refusals through pa_error (schemes, softcap, q norms,
     * GQA). */
    refused(false, NULL, "{\"x\":" T("[2,4]", "[0,0,0,0,0,0,0,0]") "}", "UNSUPPORTED", "x",
            "layer mode");
    refused(false, NULL, "{\"differential\":{\"lambda\":0.5}}", "INVALID_ARGUMENT", "mla",
            "differential");
    refused(false, NULL,
            "{\"q\":" T("[1,3,2,6]", "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                                     "0,0,0,0,0,0,0,0,0,0,0,0]") "}",
            "UNSUPPORTED", "q.shape", "batch");
    refused(false, NULL, "{\"query_length\":2}", "UNSUPPORTED", "query_length", NULL);
    refused(false, NULL, "{\"cu_seqlens\":[0,1,3]}", "UNSUPPORTED", "cu_seqlens", NULL);
    refused(false, NULL, "{\"scheme\":{\"type\":\"alibi\"}}", "UNSUPPORTED", "scheme.type", NULL);
    refused(false, NULL, "{\"softcap\":30}", "UNSUPPORTED", "softcap", NULL);
    refused(false, NULL, "{\"q_norm\":{}}", "UNSUPPORTED", "q_norm", NULL);
    refused(true, NULL, "{\"scheme\":{\"type\":\"rope\",\"rotary_dim\":4}}", "INVALID_ARGUMENT",
            "scheme.rotary_dim", NULL);
}
#undef T

/* An item of zeros (z), 1024 query rows and keys, 2 heads, in a form. */
static cJSON *big_item(const float *z, bool absorbed)
{
    const int L = 1024, H = 2, Dn = 2, Dr = 2, Dv = 1, R = 2;
    const int qs[3] = {L, H, Dn + Dr}, ks[3] = {L, H, Dn}, vs[3] = {L, H, Dv}, rs[2] = {L, Dr},
              cs[2] = {L, R}, wk[3] = {H, Dn, R}, wv[3] = {H, Dv, R};
    cJSON *item = cJSON_CreateObject(), *mla = json_of("{\"rope_dim\":2}");
    cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
    cJSON_AddItemToObject(item, "q", jtensor_b64(z, 3, qs));
    cJSON_AddItemToObject(item, "k_rope", jtensor_b64(z, 2, rs));
    if (absorbed) {
        cJSON_AddTrueToObject(mla, "absorbed");
        cJSON_AddItemToObject(item, "c_kv", jtensor_b64(z, 2, cs));
        cJSON_AddItemToObject(mla, "w_uk", jtensor_b64(z, 3, wk));
        cJSON_AddItemToObject(mla, "w_uv", jtensor_b64(z, 3, wv));
    } else {
        cJSON_AddItemToObject(item, "k", jtensor_b64(z, 3, ks));
        cJSON_AddItemToObject(item, "v", jtensor_b64(z, 3, vs));
    }
    cJSON_AddItemToObject(item, "mla", mla);
    return item;
}

/* The weights past PA_MLA_LOGITS_MAX (the output alone is fine), and a
 * request whose workspace and tensors pass --max-request-mb: 413s. */
static void test_sizes(void **state)
{
    (void)state;
    srv_limits lim = limits();
    int status;
    cJSON *ans;
    {
        /* H * Lq * Lk = 2 * 2048 * 4097 > 2^24. Zeros b64: small to send. */
        const int Lq = 2048, Lk = 4097, H = 2, Dn = 2, Dr = 2, Dv = 1;
        const int qs[3] = {Lq, H, Dn + Dr}, ks[3] = {Lk, H, Dn}, vs[3] = {Lk, H, Dv},
                  rs[2] = {Lk, Dr};
        float *z = tu_alloc((size_t)Lk * H * Dn, sizeof(float));
        cJSON *item = cJSON_CreateObject();
        cJSON_AddItemToObject(item, "scheme", scheme_of("{\"type\":\"rope\"}"));
        cJSON_AddItemToObject(item, "q", jtensor_b64(z, 3, qs));
        cJSON_AddItemToObject(item, "k", jtensor_b64(z, 3, ks));
        cJSON_AddItemToObject(item, "v", jtensor_b64(z, 3, vs));
        cJSON_AddItemToObject(item, "k_rope", jtensor_b64(z, 2, rs));
        cJSON_AddItemToObject(item, "mla", json_of("{\"rope_dim\":2}"));
        cJSON_AddItemToObject(item, "return", json_of("[\"output\",\"weights\"]"));
        lim.max_tensor_elements = (size_t)1 << 26;
        cJSON *items[1] = {item};
        ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        assert_int_equal(status, 413);
        expect_item_error(ans, 0, "PAYLOAD_TOO_LARGE", "inputs[0].weights");
        assert_non_null(strstr(str_at(output_at(ans, 0), "error", "message"), "mla"));
        cJSON_Delete(ans);
        free(z);
    }
    /* Both forms, 1024 query rows and keys, 2 heads: the rotated part's
     * logits [H, Lq, Lk] in the workspace are 8 MB, the tensors 80 KB: over
     * a 4 MB limit by the workspace alone; under 16 MB they run. */
    float *z = tu_alloc((size_t)1024 * 2 * 4, sizeof(float));
    for (int absorbed = 0; absorbed < 2; absorbed++) {
        cJSON *items[1] = {big_item(z, absorbed)};
        lim = limits();
        lim.max_request_memory = (size_t)4 << 20;
        ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        expect_error(ans, status, 413, "PAYLOAD_TOO_LARGE", NULL);
        assert_non_null(strstr(str_at(ans, "error", "message"), "workspaces"));
        cJSON_Delete(ans);
        items[0] = big_item(z, absorbed);
        lim.max_request_memory = (size_t)16 << 20;
        ans = call_json(&srv_ep_attention, batch(items, 1), &lim, &status);
        fail_unless_ok(ans, status);
        cJSON_Delete(ans);
    }
    free(z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_library), cmocka_unit_test(test_absorbed_equals_expanded),
        cmocka_unit_test(test_f16_wire),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
