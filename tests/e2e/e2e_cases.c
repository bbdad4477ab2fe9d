/* e2e_cases.c - see e2e_cases.h. */
#include "e2e_cases.h"
#include "batch_status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Standard base64 with padding; written here so the test does not share the
 * server's codec. */
static void sb_b64(sbuf *b, const void *data, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = data;
    sb_reserve(b, (n + 2) / 3 * 4);
    char *o = b->p + b->len;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = tab[(v >> 6) & 63];
        *o++ = tab[v & 63];
    }
    if (i < n) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0u);
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
}

static int b64_value(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes little-endian float32 base64 into a malloc'd array; NULL if invalid. */
static float *b64_floats(const char *s, size_t *count)
{
    size_t len = strlen(s), n = 0;
    unsigned char *out;
    if (len % 4 != 0)
        return NULL;
    out = malloc(len / 4 * 3 + 4);
    assert_non_null(out);
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++)
            v[j] = s[i + j] == '=' ? 0 : b64_value(s[i + j]);
        if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) {
            free(out);
            return NULL;
        }
        unsigned w =
            (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        out[n++] = (unsigned char)(w >> 16);
        if (s[i + 2] != '=')
            out[n++] = (unsigned char)(w >> 8);
        if (s[i + 3] != '=')
            out[n++] = (unsigned char)w;
    }
    if (n % 4 != 0) {
        free(out);
        return NULL;
    }
    /* The machine is little-endian, as the wire format (checked in main). */
    *count = n / 4;
    return (float *)out;
}

/* Flattens nested JSON arrays of numbers (null = -inf, as logits render). */
static void flatten(const cJSON *a, float *out, size_t cap, size_t *n)
{
    const cJSON *el;
    cJSON_ArrayForEach(el, a)
    {
        if (cJSON_IsArray(el)) {
            flatten(el, out, cap, n);
            continue;
        }
        if (*n >= cap)
            fail_msg("tensor data holds more values than its shape");
        out[(*n)++] = cJSON_IsNull(el) ? -INFINITY : (float)el->valuedouble;
        if (!cJSON_IsNumber(el) && !cJSON_IsNull(el))
            fail_msg("tensor data holds a non-number");
    }
}

/* Checks an answer tensor {"shape","data"|"b64"} against want: its values
 * from index skip on (want holds product(shape) - skip values). */
static void check_tensor_tail(const cJSON *t, const char *what, int ndim, const int64_t *shape,
                              const float *want, size_t skip)
{
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(t, "data");
    const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(t, "b64");
    size_t count = 1, n = 0;
    float *got;
    double *wantd;

    if (t == NULL)
        fail_msg("%s: missing from the answer", what);
    assert_true(cJSON_IsArray(sh));
    if (cJSON_GetArraySize(sh) != ndim)
        fail_msg("%s: rank %d, expected %d", what, cJSON_GetArraySize(sh), ndim);
    for (int i = 0; i < ndim; i++) {
        double d = cJSON_GetArrayItem(sh, i)->valuedouble;
        if ((int64_t)d != shape[i])
            fail_msg("%s: shape[%d]=%g, expected %lld", what, i, d, (long long)shape[i]);
        count *= (size_t)shape[i];
    }
    if (b64 != NULL) {
        assert_true(cJSON_IsString(b64));
        got = b64_floats(b64->valuestring, &n);
        if (got == NULL)
            fail_msg("%s: invalid base64", what);
    } else {
        assert_true(cJSON_IsArray(data));
        got = tu_alloc(count, sizeof *got);
        flatten(data, got, count, &n);
    }
    if (n != count)
        fail_msg("%s: %zu values, expected %zu", what, n, count);
    assert_true(skip <= count);
    wantd = tu_alloc(count - skip, sizeof *wantd);
    for (size_t i = 0; i < count - skip; i++)
        wantd[i] = want[i];
    tu_assert_close(got + skip, wantd, count - skip, E2E_ATOL, E2E_RTOL, what, __FILE__, __LINE__);
    free(wantd);
    free(got);
}

void check_tensor(const cJSON *t, const char *what, int ndim, const int64_t *shape,
                  const float *want)
{
    check_tensor_tail(t, what, ndim, shape, want, 0);
}

tensor tensor_rand(tu_rng *r, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    tensor t = {ndim, {d0, d1, d2}, 1, NULL};
    for (int i = 0; i < ndim; i++)
        t.n *= (size_t)t.shape[i];
    t.data = tu_alloc(t.n, sizeof(float));
    tu_fill(r, t.data, t.n, -1.0, 1.0);
    return t;
}

/* "%.9g" round-trips every float32 (how the test writes its requests). */
static void sb_float(sbuf *b, float v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%.9g", (double)v);
    sb_put(b, tmp, (size_t)n);
}

static void nested(sbuf *b, const tensor *t, int dim, size_t *off)
{
    sb_puts(b, "[");
    for (int64_t i = 0; i < t->shape[dim]; i++) {
        if (i)
            sb_puts(b, ",");
        if (dim + 1 < t->ndim)
            nested(b, t, dim + 1, off);
        else
            sb_float(b, t->data[(*off)++]);
    }
    sb_puts(b, "]");
}

/* Writes "name":{"shape":[..],"data":[..]} (or "b64"). */
static void sb_tensor(sbuf *b, const char *name, const tensor *t, enc e)
{
    sb_printf(b, "\"%s\":{\"shape\":[", name);
    for (int i = 0; i < t->ndim; i++)
        sb_printf(b, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    sb_puts(b, "],");
    if (e == ENC_B64) {
        sb_puts(b, "\"b64\":\"");
        sb_b64(b, t->data, t->n * sizeof(float));
        sb_puts(b, "\"}");
    } else if (e == ENC_NESTED) {
        size_t off = 0;
        sb_puts(b, "\"data\":");
        nested(b, t, 0, &off);
        sb_puts(b, "}");
    } else {
        sb_puts(b, "\"data\":[");
        for (size_t i = 0; i < t->n; i++) {
            if (i)
                sb_puts(b, ",");
            sb_float(b, t->data[i]);
        }
        sb_puts(b, "]}");
    }
}

void acase_init(acase *c, const char *id, pa_scheme_type type, int Lq, int Lk, int H, int Hkv,
                int D, int Dv, uint64_t seed)
{
    tu_rng r;
    memset(c, 0, sizeof *c);
    snprintf(c->id, sizeof c->id, "%s", id);
    pa_scheme_init(&c->scheme, type);
    c->Lq = Lq;
    c->Lk = Lk;
    c->H = H;
    c->Hkv = Hkv;
    c->D = D;
    c->Dv = Dv;
    tu_rng_seed(&r, seed);
    c->q = tensor_rand(&r, 3, Lq, H, D);
    c->k = tensor_rand(&r, 3, Lk, Hkv, D);
    c->v = tensor_rand(&r, 3, Lk, Hkv, Dv);
}

void acase_free(acase *c)
{
    free(c->q.data);
    free(c->k.data);
    free(c->v.data);
    free(c->table.data);
    free(c->rel_k.data);
    free(c->rel_v.data);
    free(c->out);
    free(c->weights);
    memset(c, 0, sizeof *c);
}

/* Runs the case through the library in this process. With c->ref_rows > 0,
 * only for the last ref_rows queries: same keys, same positions (the default
 * q_positions are the last Lq key positions), a fraction of the work. */
void acase_reference(acase *c)
{
    int rows = c->ref_rows > 0 && c->ref_rows < c->Lq ? c->ref_rows : c->Lq;
    size_t q_skip = (size_t)(c->Lq - rows) * (size_t)c->H * (size_t)c->D;
    pa_attention a;
    pa_error err;
    pa_attention_out o;
    size_t ws_size;
    void *ws;
    pa_status st;

    pa_attention_init(&a, &c->scheme);
    a.num_heads = c->H;
    a.num_kv_heads = c->Hkv;
    a.head_dim = c->D;
    a.v_head_dim = c->Dv;
    a.q_len = rows;
    a.k_len = c->Lk;
    a.q = c->q.data + q_skip;
    a.k = c->k.data;
    a.v = c->v.data;
    a.causal = c->causal;
    st = pa_attention_check(&a, &err);
    TU_ASSERT_STATUS(st, PA_STATUS_OK, &err);
    ws_size = pa_attention_workspace_size(&a);
    ws = aligned_alloc(64, (ws_size + 63) / 64 * 64 + 64);
    assert_non_null(ws);
    free(c->out);
    free(c->weights);
    c->out = tu_alloc((size_t)rows * (size_t)c->H * (size_t)c->Dv, sizeof(float));
    c->weights = NULL;
    assert_true(rows == c->Lq || !c->want_weights);
    if (c->want_weights)
        c->weights = tu_alloc((size_t)c->H * (size_t)c->Lq * (size_t)c->Lk, sizeof(float));
    memset(&o, 0, sizeof o);
    o.output = c->out;
    o.weights = c->weights;
    st = pa_attention_run(&a, &o, ws, ws_size, &err);
    free(ws);
    TU_ASSERT_STATUS(st, PA_STATUS_OK, &err);
}

/* Writes the members of the item's JSON object, without the braces. */
static void sb_item_members(sbuf *b, const acase *c, enc e)
{
    sb_printf(b, "\"id\":\"%s\",\"scheme\":{\"type\":\"%s\"%s", c->id,
              pa_scheme_type_name(c->scheme.type), c->scheme_json);
    if (c->table.data != NULL) {
        sb_puts(b, ",");
        sb_tensor(b, "table", &c->table, e);
    }
    if (c->rel_k.data != NULL) {
        sb_puts(b, ",");
        sb_tensor(b, "rel_k", &c->rel_k, e);
    }
    if (c->rel_v.data != NULL) {
        sb_puts(b, ",");
        sb_tensor(b, "rel_v", &c->rel_v, e);
    }
    sb_puts(b, "},");
    sb_tensor(b, "q", &c->q, e);
    sb_puts(b, ",");
    sb_tensor(b, "k", &c->k, e);
    sb_puts(b, ",");
    sb_tensor(b, "v", &c->v, e);
    sb_printf(b, ",\"causal\":%s", c->causal ? "true" : "false");
    if (c->want_weights)
        sb_puts(b, ",\"return\":[\"output\",\"weights\"]");
}

/* Writes the item's JSON object. */
static void sb_item(sbuf *b, const acase *c, enc e)
{
    sb_puts(b, "{");
    sb_item_members(b, c, e);
    sb_puts(b, "}");
}

/* {"analysis":"<kind>", <the item's members>} for /v1/analyze. */
void sb_analysis(sbuf *b, const char *kind, const acase *c, enc e)
{
    sb_printf(b, "{\"analysis\":\"%s\",", kind);
    sb_item_members(b, c, e);
    sb_puts(b, "}");
}

/* {"inputs":[items...],"output_encoding":...} */
void sb_request(sbuf *b, acase *cs, int n, enc in, bool b64_out)
{
    sb_puts(b, "{\"inputs\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            sb_puts(b, ",");
        sb_item(b, &cs[i], in);
    }
    sb_printf(b, "],\"output_encoding\":\"%s\"}", b64_out ? "b64" : "json");
}

/* Checks outputs[i] of a batch answer against case c. */
void check_output(const cJSON *o, const acase *c)
{
    char what[96];
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "id"));
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    const cJSON *timing = cJSON_GetObjectItemCaseSensitive(o, "timing");
    int64_t oshape[3] = {c->Lq, c->H, c->Dv}, wshape[3] = {c->H, c->Lq, c->Lk};

    if (err != NULL) {
        char *s = cJSON_PrintUnformatted(err);
        fail_msg("item %s failed: %s", c->id, s);
    }
    if (id == NULL || strcmp(id, c->id) != 0)
        fail_msg("item id %s, expected %s", id ? id : "(none)", c->id);
    assert_non_null(timing);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(timing, "queue_us")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(timing, "compute_us")));
    snprintf(what, sizeof what, "%s.output", c->id);
    check_tensor_tail(cJSON_GetObjectItemCaseSensitive(o, "output"), what, 3, oshape, c->out,
                      c->ref_rows > 0 && c->ref_rows < c->Lq
                          ? (size_t)(c->Lq - c->ref_rows) * (size_t)c->H * (size_t)c->Dv
                          : 0);
    if (c->want_weights) {
        snprintf(what, sizeof what, "%s.weights", c->id);
        check_tensor(cJSON_GetObjectItemCaseSensitive(o, "weights"), what, 3, wshape, c->weights);
    } else if (cJSON_GetObjectItemCaseSensitive(o, "weights") != NULL) {
        fail_msg("item %s: weights returned without being asked for", c->id);
    }
}

/* POSTs the cases as one batch and checks every output; returns the answer. */
void run_batch(const server *s, acase *cs, int n, enc in, bool b64_out, resp *r)
{
    sbuf body = {0};
    cJSON *j, *outs;
    sb_request(&body, cs, n, in, b64_out);
    post(r, s, "/v1/attention", body.p, body.len, NULL);
    sb_free(&body);
    if (r->status != 200)
        fail_msg("HTTP %ld: %.500s", r->status, r->body.p ? r->body.p : "");
    j = parse_json(r);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "errors")));
    outs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
    assert_true(cJSON_IsArray(outs));
    assert_int_equal(cJSON_GetArraySize(outs), n);
    for (int i = 0; i < n; i++) {
        if (b64_out) {
            const cJSON *t =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(outs, i), "output");
            assert_non_null(cJSON_GetObjectItemCaseSensitive(t, "b64"));
            assert_null(cJSON_GetObjectItemCaseSensitive(t, "data"));
        }
        check_output(cJSON_GetArrayItem(outs, i), &cs[i]);
    }
    cJSON_Delete(j);
}

/* Asserts that outputs[i] of a batch answer is an error with code and a
 * field starting with field, and that the answer's status follows the rule. */
void check_item_error(const resp *r, int i, const char *code, const char *field)
{
    cJSON *j, *e;
    const char *got_code, *got_field;
    j = parse_json(r);
    if (r->status != batch_status_of(j))
        fail_msg("HTTP %ld, expected %d with item errors: %.400s", r->status, batch_status_of(j),
                 r->body.p ? r->body.p : "");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "errors")));
    e = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), i), "error");
    if (e == NULL)
        fail_msg("outputs[%d] has no error: %.400s", i, r->body.p);
    got_code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
    got_field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "field"));
    if (got_code == NULL || strcmp(got_code, code) != 0)
        fail_msg("outputs[%d].error.code %s, expected %s: %.400s", i, got_code ? got_code : "-",
                 code, r->body.p);
    if (field != NULL && (got_field == NULL || strncmp(got_field, field, strlen(field)) != 0))
        fail_msg("outputs[%d].error.field '%s' does not start with '%s'", i,
                 got_field ? got_field : "-", field);
    assert_true(strlen(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"))) > 0);
    cJSON_Delete(j);
}
