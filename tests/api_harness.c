/* api_harness.c - see api_harness.h. */
#include "api_harness.h"
#include "batch_status.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

srv_limits limits(void)
{
    srv_limits l;
    l.max_batch_items = 64;
    l.max_tensor_elements = (size_t)16 << 20;
    l.max_request_memory = (size_t)1024 << 20;
    l.parallel_parts = 1;
    return l;
}

float *rnd(tu_rng *r, size_t n, double lo, double hi)
{
    float *t = tu_alloc(n ? n : 1, sizeof(float));
    tu_fill(r, t, n, lo, hi);
    return t;
}

/* {"shape":[...], "data":[...]} */
cJSON *jtensor(const float *d, int ndim, ...)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON *shape = cJSON_AddArrayToObject(obj, "shape");
    size_t n = 1;
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) {
        int s = va_arg(ap, int);
        n *= (size_t)s;
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(s));
    }
    va_end(ap);
    cJSON_AddItemToObject(obj, "data", cJSON_CreateFloatArray(d, (int)n));
    return obj;
}

/* {"shape":[...], "b64":"..."} */
cJSON *jtensor_b64(const float *d, int ndim, const int *shape)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON *sh = cJSON_AddArrayToObject(obj, "shape");
    size_t n = 1;
    char *text;
    for (int i = 0; i < ndim; i++) {
        n *= (size_t)shape[i];
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(shape[i]));
    }
    text = tu_alloc(srv_b64_encoded_len(n * 4) + 1, 1);
    srv_b64_encode((const unsigned char *)d, n * 4, text); /* the test host is little-endian */
    cJSON_AddStringToObject(obj, "b64", text);
    free(text);
    return obj;
}

cJSON *jints(const int32_t *v, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[i]));
    return arr;
}

/* One request through prepare, every task, finish. Returns the parsed body
 * and the HTTP status. */
cJSON *call(const srv_endpoint *ep, const char *body, const srv_limits *lim, int *status)
{
    srv_job *job = NULL;
    srv_reply reply;
    srv_workspace ws = {NULL, 0};
    cJSON *out;

    memset(&reply, 0, sizeof reply);
    if (srv_job_prepare(ep, body, strlen(body), lim, &job, &reply)) {
        assert_non_null(job);
        for (size_t i = 0; i < srv_job_task_count(job); i++)
            srv_job_run_task(job, i, &ws);
        srv_job_finish(job, &reply);
        srv_job_free(job);
    } else {
        assert_null(job);
    }
    srv_workspace_free(&ws);
    *status = reply.http_status;
    assert_non_null(reply.body);
    out = cJSON_ParseWithLength(reply.body, reply.body_len);
    if (out == NULL)
        fail_msg("answer is not JSON: %.*s", (int)reply.body_len, reply.body);
    srv_reply_free(&reply);
    return out;
}

cJSON *call_json(const srv_endpoint *ep, cJSON *req, const srv_limits *lim, int *status)
{
    char *body = cJSON_PrintUnformatted(req);
    cJSON *out = call(ep, body, lim, status);
    free(body);
    cJSON_Delete(req);
    return out;
}

/* A result tensor's values (json data with null = -inf, or b64). */
static float *result(const cJSON *obj, const char *name, size_t want_n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, name);
    const cJSON *data, *b64, *shape, *d;
    size_t n = 1, i = 0;
    float *out;

    if (t == NULL)
        fail_msg("no '%s' in the answer", name);
    shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
    cJSON_ArrayForEach(d, shape)
    {
        n *= (size_t)d->valuedouble;
    }
    assert_int_equal(n, want_n);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "datatype")),
                        "FP32");
    out = tu_alloc(n ? n : 1, sizeof(float));
    data = cJSON_GetObjectItemCaseSensitive(t, "data");
    b64 = cJSON_GetObjectItemCaseSensitive(t, "b64");
    if (data != NULL) {
        cJSON_ArrayForEach(d, data)
        {
            assert_true(i < n);
            out[i++] = cJSON_IsNull(d) ? -INFINITY : (float)d->valuedouble;
        }
        assert_int_equal(i, n);
    } else {
        size_t len = 0;
        assert_non_null(b64);
        assert_true(srv_b64_decode(b64->valuestring, strlen(b64->valuestring), (unsigned char *)out,
                                   n * 4, &len));
        assert_int_equal(len, n * 4);
    }
    return out;
}

void shape_is(const cJSON *obj, const char *name, int ndim, ...)
{
    const cJSON *shape =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, name), "shape");
    va_list ap;
    assert_int_equal(cJSON_GetArraySize(shape), ndim);
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++)
        assert_int_equal((int)cJSON_GetArrayItem(shape, i)->valuedouble, va_arg(ap, int));
    va_end(ap);
}

static void close_to(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (isinf(want[i]) && got[i] == want[i])
            continue;
        if (!(fabs((double)got[i] - want[i]) <= 1e-6 + 1e-6 * fabs(want[i])))
            fail_msg("value %zu: got %.9g, want %.9g", i, (double)got[i], (double)want[i]);
    }
}

/* Checks a result tensor against want [n] and frees it. */
void result_is(const cJSON *obj, const char *name, const float *want, size_t n)
{
    float *got = result(obj, name, n);
    close_to(got, want, n);
    free(got);
}

const char *str_at(const cJSON *obj, const char *a, const char *b)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(obj, a);
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, b));
}

double num(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsNumber(v))
        fail_msg("'%s' is not a number", name);
    return v->valuedouble;
}

const cJSON *output_at(const cJSON *ans, int i)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "outputs"), i);
}

/* Fails with the error message unless the answer is a 200. */
void expect_ok(const cJSON *ans, int status)
{
    if (status != 200)
        fail_msg("status %d: %s (%s)", status, str_at(ans, "error", "message"),
                 str_at(ans, "error", "field") ? str_at(ans, "error", "field") : "-");
}

/* Checks a whole-request error answer. */
void expect_error(const cJSON *ans, int status, int want_status, const char *code,
                  const char *field)
{
    const char *f = str_at(ans, "error", "field");
    if (status != want_status || strcmp(str_at(ans, "error", "code"), code) != 0)
        fail_msg("got %d %s (%s: %s), want %d %s", status, str_at(ans, "error", "code"),
                 f ? f : "-", str_at(ans, "error", "message"), want_status, code);
    if (field != NULL) {
        assert_non_null(f);
        assert_string_equal(f, field);
    }
}

void expect_batch_status(const cJSON *ans, int status)
{
    if (status != batch_status_of(ans))
        fail_msg("batch answer with status %d, want %d", status, batch_status_of(ans));
}

/* Checks item i of a batch answer is an error. */
void expect_item_error(const cJSON *ans, int i, const char *code, const char *field)
{
    const cJSON *o = output_at(ans, i);
    const char *got = str_at(o, "error", "code");
    const char *f = str_at(o, "error", "field");
    if (got == NULL || strcmp(got, code) != 0)
        fail_msg("item %d: got %s (%s: %s), want %s", i, got ? got : "no error", f ? f : "-",
                 got ? str_at(o, "error", "message") : "", code);
    if (field != NULL) {
        assert_non_null(f);
        assert_string_equal(f, field);
    }
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "errors")));
}

/* ------------------------------------------------------------------------- */
/* A q/k/v fixture and the library's answer for it                           */
/* ------------------------------------------------------------------------- */

void qkv_make(qkv *f, int Lq, int Lk, int H, int Hkv, int D, int Dv, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    f->Lq = Lq;
    f->Lk = Lk;
    f->H = H;
    f->Hkv = Hkv;
    f->D = D;
    f->Dv = Dv;
    f->q = rnd(&r, (size_t)Lq * H * D, -1, 1);
    f->k = rnd(&r, (size_t)Lk * Hkv * D, -1, 1);
    f->v = rnd(&r, (size_t)Lk * Hkv * Dv, -1, 1);
}

void qkv_free(qkv *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
}

cJSON *qkv_item(const qkv *f, cJSON *scheme)
{
    cJSON *it = cJSON_CreateObject();
    cJSON_AddItemToObject(it, "scheme", scheme);
    cJSON_AddItemToObject(it, "q", jtensor(f->q, 3, f->Lq, f->H, f->D));
    cJSON_AddItemToObject(it, "k", jtensor(f->k, 3, f->Lk, f->Hkv, f->D));
    cJSON_AddItemToObject(it, "v", jtensor(f->v, 3, f->Lk, f->Hkv, f->Dv));
    return it;
}

void qkv_desc(const qkv *f, const pa_scheme *s, pa_attention *a)
{
    pa_attention_init(a, s);
    a->num_heads = f->H;
    a->num_kv_heads = f->Hkv;
    a->head_dim = f->D;
    a->v_head_dim = f->Dv;
    a->q_len = f->Lq;
    a->k_len = f->Lk;
    a->q = f->q;
    a->k = f->k;
    a->v = f->v;
}

void lib_run(const pa_attention *a, size_t n_out, lib_out *o)
{
    pa_attention_out out = {0};
    pa_error err;
    size_t ws_size = pa_attention_workspace_size(a);
    void *ws = tu_alloc(ws_size, 1);
    int Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    int Hkv = a->num_kv_heads ? a->num_kv_heads : a->num_heads;

    o->n_out = n_out;
    o->n_scores = (size_t)a->num_heads * Lq * Lk;
    o->n_q = (size_t)Lq * a->num_heads * a->head_dim;
    o->n_k = (size_t)Lk * Hkv * a->head_dim;
    o->out = tu_alloc(n_out, sizeof(float));
    o->weights = tu_alloc(o->n_scores, sizeof(float));
    o->logits = tu_alloc(o->n_scores, sizeof(float));
    o->q_rot = tu_alloc(o->n_q, sizeof(float));
    o->k_rot = tu_alloc(o->n_k, sizeof(float));
    out.output = o->out;
    out.weights = o->weights;
    out.logits = o->logits;
    out.q_rot = o->q_rot;
    out.k_rot = o->k_rot;
    TU_ASSERT_STATUS(pa_attention_run(a, &out, ws, ws_size, &err), PA_STATUS_OK, &err);
    free(ws);
}

void lib_free(lib_out *o)
{
    free(o->out);
    free(o->weights);
    free(o->logits);
    free(o->q_rot);
    free(o->k_rot);
}

cJSON *batch(cJSON *items[], int n)
{
    cJSON *req = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(req, "inputs");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, items[i]);
    return req;
}

cJSON *scheme_of(const char *json)
{
    cJSON *s = cJSON_Parse(json);
    assert_non_null(s);
    return s;
}

void api_err_is(const api_err *e, srv_error code, const char *field, ...)
{
    va_list ap;
    const char *w, *missing = NULL;
    if (e->code != code)
        fail_msg("code %s, wanted %s (%s: %s)", srv_error_code(e->code), srv_error_code(code),
                 e->field, e->message);
    if (strcmp(e->field, field) != 0)
        fail_msg("field '%s', wanted '%s' (%s)", e->field, field, e->message);
    va_start(ap, field);
    while (missing == NULL && (w = va_arg(ap, const char *)) != NULL)
        if (strstr(e->message, w) == NULL)
            missing = w;
    va_end(ap);
    if (missing != NULL)
        fail_msg("message '%s' lacks '%s'", e->message, missing);
}

srv_limits json_limits(size_t max_elements)
{
    srv_limits lim = {.max_batch_items = 4,
                      .max_tensor_elements = max_elements,
                      .max_request_memory = (size_t)64 << 20,
                      .parallel_parts = 1};
    return lim;
}

cJSON *json_of(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    if (j == NULL)
        fail_msg("the test's JSON does not parse: %s", text);
    return j;
}
