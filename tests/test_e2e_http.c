/* test_e2e_http.c - end-to-end tests of posattnd: starts the real binary on a
 * free loopback port, talks HTTP to it with libcurl (easy and multi
 * interfaces) and checks the numbers against pa_attention_run called in this
 * process on the same inputs.
 *
 * The binary is $POSATTND, else posattnd beside this test's build folder
 * (<BUILD>/tests/test_e2e_http -> <BUILD>/posattnd), else build/posattnd.
 * Every wait and every request has a timeout; every server started is killed
 * in the test's teardown if the test failed before stopping it.
 *
 * Tolerance: JSON floats round-trip (requests %.9g, answers shortest text), the server and the library run
 * the same kernels: |got - want| <= 1e-5 + 1e-4 |want|.
 */
#include "e2e_server.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ATOL 1e-5
#define RTOL 1e-4


static char posattnd_path[4096];

/* ------------------------------------------------------------------------- */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A growable string. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL)
        fail_msg("out of memory (%zu bytes)", cap);
    b->p = p;
    b->cap = cap;
}

static void sb_put(sbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    sb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void sb_free(sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

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

/* ------------------------------------------------------------------------- */
/* The server process                                                        */
/* ------------------------------------------------------------------------- */

typedef e2e_server server; /* tests/e2e_server.c */

static void server_dump_log(const server *s)
{
    e2e_server_dump_log(s);
}

typedef struct resp {
    long status;
    CURLcode rc;
    sbuf body;
    sbuf headers;
    double seconds;
    double done_at; /* now_s() when the transfer finished */
} resp;

static void resp_free(resp *r)
{
    sb_free(&r->body);
    sb_free(&r->headers);
    memset(r, 0, sizeof *r);
}

static size_t write_cb(char *p, size_t size, size_t n, void *ud)
{
    sb_put(ud, p, size * n);
    return size * n;
}

/* Headers are kept as "\nname: value\r" lines so a lookup can anchor on '\n'. */
static size_t header_cb(char *p, size_t size, size_t n, void *ud)
{
    sbuf *b = ud;
    if (b->len == 0)
        sb_puts(b, "\n");
    sb_put(b, p, size * n);
    return size * n;
}

/* Copies the value of header `name` (case-insensitive; the last one) into out. */
static bool resp_header(const resp *r, const char *name, char *out, size_t cap)
{
    const char *p = r->headers.p, *found = NULL;
    size_t nl = strlen(name);
    if (p == NULL)
        return false;
    for (const char *q = p; (q = strchr(q, '\n')) != NULL; q++)
        if (strncasecmp(q + 1, name, nl) == 0 && q[1 + nl] == ':')
            found = q + 1 + nl + 1;
    if (found == NULL)
        return false;
    while (*found == ' ')
        found++;
    size_t len = strcspn(found, "\r\n");
    if (len >= cap)
        len = cap - 1;
    memcpy(out, found, len);
    out[len] = '\0';
    return true;
}

typedef struct xfer {
    CURL *e;
    struct curl_slist *hdrs;
    resp r;
    double t0;
} xfer;

/* Sets up one request. body may be NULL (GET) or a body to POST (not copied:
 * it must outlive the transfer). hdrs: NULL-terminated extra headers. */
static void xfer_init(xfer *x, const char *method, const char *url, const char *body, size_t len,
                      const char *const *hdrs, long timeout_ms)
{
    memset(x, 0, sizeof *x);
    x->e = curl_easy_init();
    assert_non_null(x->e);
    curl_easy_setopt(x->e, CURLOPT_URL, url);
    curl_easy_setopt(x->e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(x->e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(x->e, CURLOPT_WRITEDATA, &x->r.body);
    curl_easy_setopt(x->e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(x->e, CURLOPT_HEADERDATA, &x->r.headers);
    curl_easy_setopt(x->e, CURLOPT_FORBID_REUSE, 1L);
    if (body != NULL) {
        curl_easy_setopt(x->e, CURLOPT_POST, 1L);
        curl_easy_setopt(x->e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(x->e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        x->hdrs = curl_slist_append(x->hdrs, "Content-Type: application/json");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(x->e, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(x->e, CURLOPT_NOBODY, 1L);
    /* No "Expect: 100-continue" unless a test asks for it. */
    bool expect = false;
    for (size_t i = 0; hdrs != NULL && hdrs[i] != NULL; i++) {
        x->hdrs = curl_slist_append(x->hdrs, hdrs[i]);
        if (strncasecmp(hdrs[i], "Expect:", 7) == 0)
            expect = true;
    }
    if (!expect)
        x->hdrs = curl_slist_append(x->hdrs, "Expect:");
    curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, x->hdrs);
    x->t0 = now_s();
}

static void xfer_finish(xfer *x, CURLcode rc)
{
    x->r.rc = rc;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &x->r.status);
    x->r.done_at = now_s();
    x->r.seconds = x->r.done_at - x->t0;
}

static void xfer_cleanup(xfer *x)
{
    if (x->e != NULL)
        curl_easy_cleanup(x->e);
    curl_slist_free_all(x->hdrs);
    x->e = NULL;
    x->hdrs = NULL;
}

/* One blocking request; *r receives the answer (free with resp_free). */
static void http_do(resp *r, const char *method, const char *url, const char *body, size_t len,
                    const char *const *hdrs)
{
    xfer x;
    xfer_init(&x, method, url, body, len, hdrs, 30000L);
    xfer_finish(&x, curl_easy_perform(x.e));
    *r = x.r;
    xfer_cleanup(&x);
}

/* Runs n transfers concurrently until all are done or timeout_s passes.
 * tick (may be NULL) is called about every 10 ms with the elapsed time. */
static void multi_run(xfer *xs, int n, double timeout_s, void (*tick)(void *ctx, double t),
                      void *ctx)
{
    CURLM *m = curl_multi_init();
    int running = 0;
    double t0 = now_s();
    assert_non_null(m);
    for (int i = 0; i < n; i++)
        curl_multi_add_handle(m, xs[i].e);
    do {
        CURLMsg *msg;
        int left;
        curl_multi_perform(m, &running);
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            for (int i = 0; i < n; i++)
                if (xs[i].e == msg->easy_handle)
                    xfer_finish(&xs[i], msg->data.result);
        }
        if (tick != NULL)
            tick(ctx, now_s() - t0);
        if (running > 0)
            curl_multi_poll(m, NULL, 0, 10, NULL);
    } while (running > 0 && now_s() - t0 < timeout_s);
    for (int i = 0; i < n; i++)
        curl_multi_remove_handle(m, xs[i].e);
    curl_multi_cleanup(m);
    assert_int_equal(running, 0); /* else the overall timeout passed */
}

/* Starts posattnd on 127.0.0.1, port 0, with extra flags (NULL-terminated),
 * and waits for /healthz. */
static void server_start(server *s, const char *const *flags)
{
    char health[96];
    double deadline;
    e2e_server_start(s, posattnd_path, flags);
    snprintf(health, sizeof health, "%s/healthz", s->url);
    deadline = now_s() + 10.0;
    for (;;) {
        resp r;
        http_do(&r, "GET", health, NULL, 0, NULL);
        long st = r.status;
        resp_free(&r);
        if (st == 200)
            break;
        if (now_s() > deadline) {
            server_dump_log(s);
            fail_msg("posattnd /healthz did not answer 200 within 10 s");
        }
        sleep_s(0.02);
    }
}

static void server_stop_ok(server *s, bool already_signalled)
{
    e2e_server_stop_ok(s, already_signalled);
}

static void server_kill(server *s)
{
    e2e_server_kill(s);
}

/* ------------------------------------------------------------------------- */
/* Requests and checks                                                       */
/* ------------------------------------------------------------------------- */

static void url_of(char *out, size_t cap, const server *s, const char *path)
{
    snprintf(out, cap, "%s%s", s->url, path);
}

static void get(resp *r, const server *s, const char *path, const char *const *hdrs)
{
    char url[256];
    url_of(url, sizeof url, s, path);
    http_do(r, "GET", url, NULL, 0, hdrs);
    if (r->rc != CURLE_OK)
        fail_msg("GET %s: %s", path, curl_easy_strerror(r->rc));
}

static void post(resp *r, const server *s, const char *path, const char *body, size_t len,
                 const char *const *hdrs)
{
    char url[256];
    url_of(url, sizeof url, s, path);
    http_do(r, "POST", url, body, len, hdrs);
    if (r->rc != CURLE_OK)
        fail_msg("POST %s: %s", path, curl_easy_strerror(r->rc));
}

static cJSON *parse_json(const resp *r)
{
    cJSON *j = cJSON_ParseWithLength(r->body.p ? r->body.p : "", r->body.len);
    if (j == NULL)
        fail_msg("answer (HTTP %ld) is not JSON: %.300s", r->status, r->body.p ? r->body.p : "");
    return j;
}

/* Asserts an error answer: HTTP status, error.code, and (if want_field) that
 * error.field contains want_field. Returns nothing; frees nothing. */
static void check_error(const resp *r, long status, const char *code, const char *want_field)
{
    cJSON *j, *e;
    const char *got_code, *field, *msg;
    if (r->status != status)
        fail_msg("HTTP %ld, expected %ld: %.400s", r->status, status, r->body.p ? r->body.p : "");
    j = parse_json(r);
    e = cJSON_GetObjectItemCaseSensitive(j, "error");
    assert_non_null(e);
    got_code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
    msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
    field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "field"));
    assert_non_null(got_code);
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);
    if (strcmp(got_code, code) != 0)
        fail_msg("error.code %s, expected %s (%s)", got_code, code, msg);
    if (want_field != NULL && (field == NULL || strstr(field, want_field) == NULL))
        fail_msg("error.field '%s' does not name '%s' (%s)", field ? field : "(none)", want_field,
                 msg);
    cJSON_Delete(j);
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
    tu_assert_close(got + skip, wantd, count - skip, ATOL, RTOL, what, __FILE__, __LINE__);
    free(wantd);
    free(got);
}

static void check_tensor(const cJSON *t, const char *what, int ndim, const int64_t *shape,
                         const float *want)
{
    check_tensor_tail(t, what, ndim, shape, want, 0);
}

/* ------------------------------------------------------------------------- */
/* Attention cases: inputs, their JSON, and the library's answer             */
/* ------------------------------------------------------------------------- */

typedef enum enc { ENC_FLAT, ENC_NESTED, ENC_B64 } enc;

typedef struct tensor {
    int ndim;
    int64_t shape[3];
    size_t n;
    float *data;
} tensor;

static tensor tensor_rand(tu_rng *r, int ndim, int64_t d0, int64_t d1, int64_t d2)
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

typedef struct acase {
    char id[32];
    pa_scheme scheme;
    char scheme_json[256]; /* scalar scheme members after "type", e.g. ,"scaling":"yarn" */
    int Lq, Lk, H, Hkv, D, Dv;
    bool causal;
    bool want_weights;
    int ref_rows; /* 0: out holds every query row; else only the last ref_rows */
    tensor q, k, v, table, rel_k, rel_v;
    /* The library's answers. */
    float *out;     /* [Lq, H, Dv] */
    float *weights; /* [H, Lq, Lk] */
} acase;

static void acase_init(acase *c, const char *id, pa_scheme_type type, int Lq, int Lk, int H,
                       int Hkv, int D, int Dv, uint64_t seed)
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

static void acase_free(acase *c)
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
static void acase_reference(acase *c)
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
static void sb_analysis(sbuf *b, const char *kind, const acase *c, enc e)
{
    sb_printf(b, "{\"analysis\":\"%s\",", kind);
    sb_item_members(b, c, e);
    sb_puts(b, "}");
}

/* {"inputs":[items...],"output_encoding":...} */
static void sb_request(sbuf *b, acase *cs, int n, enc in, bool b64_out)
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
static void check_output(const cJSON *o, const acase *c)
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
static void run_batch(const server *s, acase *cs, int n, enc in, bool b64_out, resp *r)
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

/* The cases of the mixed batch: none, rope+yarn, alibi, t5 with a table, shaw. */
static void mixed_cases(acase cs[5])
{
    tu_rng r;
    tu_rng_seed(&r, 99);

    acase_init(&cs[0], "none", PA_SCHEME_NONE, 6, 6, 2, 2, 8, 8, 1);

    acase_init(&cs[1], "rope-yarn", PA_SCHEME_ROPE, 5, 9, 4, 2, 16, 16, 2);
    cs[1].scheme.rope.scaling = PA_ROPE_SCALING_YARN;
    cs[1].scheme.rope.factor = 4;
    cs[1].scheme.rope.original_max_position = 4;
    cs[1].scheme.rope.layout = PA_ROPE_LAYOUT_GPTJ;
    snprintf(cs[1].scheme_json, sizeof cs[1].scheme_json,
             ",\"scaling\":\"yarn\",\"factor\":4,\"original_max_position\":4,\"layout\":\"gptj\"");
    cs[1].causal = true;

    acase_init(&cs[2], "alibi", PA_SCHEME_ALIBI, 7, 7, 3, 3, 8, 8, 3);
    cs[2].causal = true;
    cs[2].want_weights = true;

    acase_init(&cs[3], "t5", PA_SCHEME_T5, 5, 5, 2, 1, 8, 4, 4);
    cs[3].scheme.t5.num_buckets = 8;
    cs[3].scheme.t5.max_distance = 16;
    cs[3].table = tensor_rand(&r, 2, 8, 2, 0);
    cs[3].scheme.t5.table = cs[3].table.data;
    cs[3].scheme.t5.table_rows = 8;
    cs[3].scheme.t5.table_cols = 2;
    snprintf(cs[3].scheme_json, sizeof cs[3].scheme_json, ",\"num_buckets\":8,\"max_distance\":16");

    acase_init(&cs[4], "shaw", PA_SCHEME_SHAW, 6, 6, 2, 2, 8, 8, 5);
    cs[4].scheme.shaw.max_relative_position = 2;
    cs[4].rel_k = tensor_rand(&r, 2, 5, 8, 0);
    cs[4].rel_v = tensor_rand(&r, 2, 5, 8, 0);
    cs[4].scheme.shaw.rel_k = cs[4].rel_k.data;
    cs[4].scheme.shaw.rel_k_rows = 5;
    cs[4].scheme.shaw.rel_k_cols = 8;
    cs[4].scheme.shaw.rel_v = cs[4].rel_v.data;
    cs[4].scheme.shaw.rel_v_rows = 5;
    cs[4].scheme.shaw.rel_v_cols = 8;
    snprintf(cs[4].scheme_json, sizeof cs[4].scheme_json, ",\"max_relative_position\":2");

    for (int i = 0; i < 5; i++)
        acase_reference(&cs[i]);
}

/* The slow request of the load tests: one item with a long sequence, in b64
 * so that the HTTP threads spend little time on it. */
#define SLOW_L 4096
#define SLOW_H 4
#define SLOW_D 32

static void slow_case(acase *c)
{
    acase_init(c, "slow", PA_SCHEME_ROPE, SLOW_L, SLOW_L, SLOW_H, SLOW_H, SLOW_D, SLOW_D, 77);
    /* The last rows only: the whole would cost this process what it costs
     * the server (a minute under valgrind). */
    c->ref_rows = 16;
    acase_reference(c);
}

/* ------------------------------------------------------------------------- */
/* Metrics                                                                   */
/* ------------------------------------------------------------------------- */

/* Sums the samples of `name` whose labels contain every "k=\"v\"" in labels. */
static double metric_sum(const char *text, const char *name, const char *const *labels)
{
    double sum = 0;
    size_t nl = strlen(name);
    for (const char *line = text; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, name, nl) != 0 || (line[nl] != '{' && line[nl] != ' '))
            continue;
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        if (len >= sizeof buf)
            continue;
        memcpy(buf, line, len);
        buf[len] = '\0';
        bool ok = true;
        for (size_t i = 0; labels != NULL && labels[i] != NULL; i++)
            if (strstr(buf, labels[i]) == NULL)
                ok = false;
        if (!ok)
            continue;
        const char *val = strrchr(buf, ' ');
        if (val != NULL)
            sum += strtod(val + 1, NULL);
    }
    return sum;
}

/* Checks the text exposition format: every sample belongs to the family of
 * the last "# TYPE" line (histograms: _bucket, _sum, _count), values parse,
 * and each histogram's buckets are cumulative up to le="+Inf" == _count. */
static void check_exposition(const char *text)
{
    char family[128] = "", type[32] = "", prev_labels[512] = "";
    double prev_bucket = -1;
    const char *line = text;
    while (line != NULL && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        assert_true(len < sizeof buf);
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = end ? end + 1 : NULL;
        if (len == 0)
            continue;
        if (strncmp(buf, "# TYPE ", 7) == 0) {
            assert_int_equal(sscanf(buf + 7, "%127s %31s", family, type), 2);
            prev_bucket = -1;
            continue;
        }
        if (buf[0] == '#')
            continue;
        size_t fl = strlen(family);
        if (fl == 0 || strncmp(buf, family, fl) != 0)
            fail_msg("/metrics sample outside its family (last TYPE %s): %s", family, buf);
        const char *rest = buf + fl;
        if (strcmp(type, "histogram") == 0 && strncmp(rest, "_bucket", 7) != 0 &&
            strncmp(rest, "_sum", 4) != 0 && strncmp(rest, "_count", 6) != 0)
            fail_msg("/metrics histogram sample %s", buf);
        const char *val = strrchr(buf, ' ');
        char *vend;
        assert_non_null(val);
        double v = strtod(val + 1, &vend);
        if (vend == val + 1 || *vend != '\0' || !(v >= 0))
            fail_msg("/metrics sample value: %s", buf);
        if (strncmp(rest, "_bucket{", 8) == 0) {
            /* Labels without le, to see where one series ends. */
            char labels[512];
            const char *le = strstr(rest, "le=\"");
            assert_non_null(le);
            snprintf(labels, sizeof labels, "%.*s", (int)(le - rest), rest);
            if (strcmp(labels, prev_labels) != 0)
                prev_bucket = -1;
            snprintf(prev_labels, sizeof prev_labels, "%s", labels);
            if (v < prev_bucket)
                fail_msg("/metrics buckets are not cumulative: %s", buf);
            prev_bucket = v;
        }
    }
}

static char *get_metrics(const server *s)
{
    resp r;
    char type[128];
    get(&r, s, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", type, sizeof type));
    assert_non_null(strstr(type, "text/plain"));
    char *text = r.body.p;
    r.body.p = NULL;
    resp_free(&r);
    return text;
}

/* ------------------------------------------------------------------------- */
/* Tests on the shared server (default flags, 2 workers)                     */
/* ------------------------------------------------------------------------- */

static server main_srv;

static int group_setup(void **state)
{
    static const char *const flags[] = {"--workers", "2", NULL};
    (void)state;
    server_start(&main_srv, flags);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    server_kill(&main_srv);
    return 0;
}

static void test_health_ready_schemes(void **state)
{
    resp r;
    cJSON *j;
    char st[64];
    (void)state;

    get(&r, &main_srv, "/healthz", NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "status")), "ok");
    cJSON_Delete(j);
    assert_true(resp_header(&r, "Server-Timing", st, sizeof st));
    resp_free(&r);

    get(&r, &main_srv, "/readyz", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    get(&r, &main_srv, "/v1/schemes", NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    cJSON_Delete(j);
    for (int t = 0; t < PA_SCHEME_COUNT; t++) {
        char quoted[32];
        snprintf(quoted, sizeof quoted, "\"%s\"", pa_scheme_type_name((pa_scheme_type)t));
        if (strstr(r.body.p, quoted) == NULL)
            fail_msg("/v1/schemes does not name %s", quoted);
    }
    resp_free(&r);
}

/* RoPE, causal, GQA (H=4 over Hkv=2), Lq < Lk as with a KV cache. */
static void test_attention_rope_causal_gqa(void **state)
{
    acase c;
    resp r;
    char st[256], type[128];
    (void)state;

    acase_init(&c, "rope-gqa", PA_SCHEME_ROPE, 7, 13, 4, 2, 16, 16, 42);
    c.causal = true;
    acase_reference(&c);
    run_batch(&main_srv, &c, 1, ENC_FLAT, false, &r);
    assert_true(resp_header(&r, "Content-Type", type, sizeof type));
    assert_non_null(strstr(type, "application/json"));
    assert_true(resp_header(&r, "Server-Timing", st, sizeof st));
    {
        /* One task: the phases follow one another within the total. */
        static const char *const phase[] = {"upload", "parse", "queue", "compute", "render"};
        double sum = 0, total = -1;
        for (size_t i = 0; i < 5; i++) {
            char key[24];
            const char *at;
            snprintf(key, sizeof key, "%s;dur=", phase[i]);
            if ((at = strstr(st, key)) == NULL)
                fail_msg("Server-Timing '%s' lacks %s", st, key);
            sum += strtod(at + strlen(key), NULL);
        }
        if (strstr(st, "total;dur=") != NULL)
            total = strtod(strstr(st, "total;dur=") + 10, NULL);
        if (!(total > 0 && sum <= total + 0.005))
            fail_msg("Server-Timing '%s': phases add to %.3f ms, total %.3f ms", st, sum, total);
    }
    resp_free(&r);
    acase_free(&c);
}

static void test_attention_mixed_batch(void **state)
{
    acase cs[5];
    resp r;
    (void)state;
    mixed_cases(cs);
    run_batch(&main_srv, cs, 5, ENC_FLAT, false, &r);
    resp_free(&r);
    for (int i = 0; i < 5; i++)
        acase_free(&cs[i]);
}

/* b64 in (tensors and scheme tables), b64 out. */
static void test_attention_b64(void **state)
{
    acase cs[5];
    resp r;
    (void)state;
    mixed_cases(cs);
    run_batch(&main_srv, cs, 5, ENC_B64, true, &r);
    resp_free(&r);
    /* JSON in, b64 out; and b64 in, JSON out. */
    run_batch(&main_srv, cs, 2, ENC_FLAT, true, &r);
    resp_free(&r);
    run_batch(&main_srv, cs + 2, 3, ENC_B64, false, &r);
    resp_free(&r);
    for (int i = 0; i < 5; i++)
        acase_free(&cs[i]);
}

static void test_attention_nested_json(void **state)
{
    acase cs[5];
    resp r;
    (void)state;
    mixed_cases(cs);
    run_batch(&main_srv, cs, 5, ENC_NESTED, false, &r);
    resp_free(&r);
    for (int i = 0; i < 5; i++)
        acase_free(&cs[i]);
}

/* An invalid item inside a valid batch: its own error, the others run. */
static void test_attention_item_error(void **state)
{
    acase cs[3];
    sbuf body = {0};
    resp r;
    cJSON *j, *outs, *bad, *e;
    const char *code, *field;
    (void)state;

    acase_init(&cs[0], "ok-0", PA_SCHEME_NONE, 4, 4, 2, 2, 8, 8, 7);
    acase_init(&cs[1], "bad", PA_SCHEME_NONE, 4, 4, 4, 3, 8, 8, 8); /* Hkv=3 does not divide H=4 */
    acase_init(&cs[2], "ok-2", PA_SCHEME_ALIBI, 4, 4, 2, 2, 8, 8, 9);
    cs[2].causal = true;
    acase_reference(&cs[0]);
    acase_reference(&cs[2]);
    sb_request(&body, cs, 3, ENC_FLAT, false);
    post(&r, &main_srv, "/v1/attention", body.p, body.len, NULL);
    sb_free(&body);
    if (r.status != 200)
        fail_msg("HTTP %ld: %.500s", r.status, r.body.p);
    j = parse_json(&r);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "errors")));
    outs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
    assert_int_equal(cJSON_GetArraySize(outs), 3);
    check_output(cJSON_GetArrayItem(outs, 0), &cs[0]);
    check_output(cJSON_GetArrayItem(outs, 2), &cs[2]);
    bad = cJSON_GetArrayItem(outs, 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(bad, "id")), "bad");
    assert_null(cJSON_GetObjectItemCaseSensitive(bad, "output"));
    e = cJSON_GetObjectItemCaseSensitive(bad, "error");
    assert_non_null(e);
    code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
    field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "field"));
    assert_non_null(code);
    assert_string_equal(code, "SHAPE_MISMATCH");
    assert_non_null(field);
    if (strncmp(field, "inputs[1]", 9) != 0)
        fail_msg("item error field '%s' does not start with inputs[1]", field);
    cJSON_Delete(j);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        acase_free(&cs[i]);
}

/* Requests that are invalid as a whole: 400 with the code and the field. */
static void test_error_400(void **state)
{
    static const struct {
        const char *body, *code, *field;
    } cases[] = {
        {"{\"inputs\":[{\"id\":\"x\",", "MALFORMED_JSON", NULL},
        {"", "MALFORMED_JSON", NULL},
        {"[1,2,3]", "INVALID_ARGUMENT", NULL},
        {"{\"inputs\":[]} trailing", "MALFORMED_JSON", NULL},
        {"{\"inputs\":[],\"colour\":\"blue\"}", "UNKNOWN_FIELD", "colour"},
        {"{\"output_encoding\":\"json\"}", "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":{}}", "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[]}", "INVALID_ARGUMENT", "inputs"},
        {"{\"inputs\":[{}],\"output_encoding\":\"xml\"}", "INVALID_ARGUMENT", "output_encoding"},
    };
    resp r;
    (void)state;

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        post(&r, &main_srv, "/v1/attention", cases[i].body, strlen(cases[i].body), NULL);
        if (r.status != 400)
            fail_msg("body %s: HTTP %ld, expected 400: %.300s", cases[i].body, r.status,
                     r.body.p ? r.body.p : "");
        check_error(&r, 400, cases[i].code, cases[i].field);
        resp_free(&r);
    }
}

/* Asserts that outputs[i] of a 200 batch answer is an error with code and
 * a field starting with field. */
static void check_item_error(const resp *r, int i, const char *code, const char *field)
{
    cJSON *j, *e;
    const char *got_code, *got_field;
    if (r->status != 200)
        fail_msg("HTTP %ld, expected 200 with item errors: %.400s", r->status,
                 r->body.p ? r->body.p : "");
    j = parse_json(r);
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

/* SHAPE_MISMATCH names the field: a 400 for a single-task endpoint
 * (/v1/analyze), the item's own error inside an attention batch. */
static void test_error_400_shape_mismatch(void **state)
{
    static const char data_count[] = "{\"inputs\":[{\"id\":\"m\",\"scheme\":{\"type\":\"none\"},"
                                     "\"q\":{\"shape\":[2,1,2],\"data\":[1,2,3]},"
                                     "\"k\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]},"
                                     "\"v\":{\"shape\":[2,1,2],\"data\":[1,2,3,4]}}]}";
    acase c;
    sbuf body = {0};
    resp r;
    (void)state;

    /* k.shape[1]=3 does not divide num_heads=8. */
    acase_init(&c, "gqa-bad", PA_SCHEME_ROPE, 3, 3, 8, 3, 8, 8, 11);
    sb_analysis(&body, "permutation", &c, ENC_FLAT);
    post(&r, &main_srv, "/v1/analyze", body.p, body.len, NULL);
    check_error(&r, 400, "SHAPE_MISMATCH", "k.shape");
    resp_free(&r);
    sb_free(&body);

    sb_request(&body, &c, 1, ENC_FLAT, false);
    post(&r, &main_srv, "/v1/attention", body.p, body.len, NULL);
    check_item_error(&r, 0, "SHAPE_MISMATCH", "inputs[0].k.shape");
    resp_free(&r);
    sb_free(&body);

    /* q holds 3 values for a shape of 4. */
    post(&r, &main_srv, "/v1/attention", data_count, strlen(data_count), NULL);
    check_item_error(&r, 0, "SHAPE_MISMATCH", "inputs[0].q");
    resp_free(&r);
    acase_free(&c);
}

/* /v1/encode and /v1/analyze against the library in this process. */
static void test_encode_analyze(void **state)
{
    static const char alibi[] = "{\"scheme\":{\"type\":\"alibi\"},\"num_heads\":8}";
    static const char sinus[] =
        "{\"scheme\":{\"type\":\"sinusoidal\",\"layout\":\"concat\"},\"length\":7,\"dim\":6}";
    float slopes[8], pe[7 * 6];
    int32_t pos[7];
    int64_t sshape[1] = {8}, eshape[2] = {7, 6};
    pa_scheme s;
    pa_error err;
    resp r;
    cJSON *j;
    (void)state;

    for (int h = 0; h < 8; h++)
        slopes[h] = ldexpf(1.0f, -(h + 1)); /* 2^-1 .. 2^-8 */
    post(&r, &main_srv, "/v1/encode", alibi, strlen(alibi), NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    check_tensor(cJSON_GetObjectItemCaseSensitive(j, "slopes"), "alibi.slopes", 1, sshape, slopes);
    cJSON_Delete(j);
    resp_free(&r);

    pa_scheme_init(&s, PA_SCHEME_SINUSOIDAL);
    s.sinusoidal.layout = PA_SINUSOIDAL_LAYOUT_CONCAT;
    for (int i = 0; i < 7; i++)
        pos[i] = i;
    TU_ASSERT_STATUS(pa_sinusoidal_encode(&s.sinusoidal, pos, 7, 6, pe, &err), PA_STATUS_OK, &err);
    post(&r, &main_srv, "/v1/encode", sinus, strlen(sinus), NULL);
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    check_tensor(cJSON_GetObjectItemCaseSensitive(j, "encoding"), "sinusoidal.encoding", 2, eshape,
                 pe);
    cJSON_Delete(j);
    resp_free(&r);

    /* Permutation: ~0 for NoPE, clearly non-zero for RoPE. */
    for (int t = 0; t < 2; t++) {
        acase c;
        sbuf body = {0};
        double d;
        acase_init(&c, "perm", t == 0 ? PA_SCHEME_NONE : PA_SCHEME_ROPE, 6, 6, 2, 2, 8, 8, 21);
        sb_analysis(&body, "permutation", &c, ENC_B64);
        post(&r, &main_srv, "/v1/analyze", body.p, body.len, NULL);
        if (r.status != 200)
            fail_msg("analyze: HTTP %ld: %.300s", r.status, r.body.p);
        j = parse_json(&r);
        d = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "max_abs_diff"));
        if (t == 0 ? !(d < 1e-5) : !(d > 1e-2))
            fail_msg("permutation max_abs_diff %g for %s", d, t == 0 ? "none" : "rope");
        cJSON_Delete(j);
        resp_free(&r);
        sb_free(&body);
        acase_free(&c);
    }
}

static void test_error_404_405(void **state)
{
    resp r;
    char allow[64], st[64];
    char url[256];
    (void)state;

    get(&r, &main_srv, "/v1/nope", NULL);
    check_error(&r, 404, "NOT_FOUND", NULL);
    assert_true(resp_header(&r, "Server-Timing", st, sizeof st));
    resp_free(&r);

    get(&r, &main_srv, "/v1/attention", NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    assert_true(resp_header(&r, "Allow", allow, sizeof allow));
    assert_string_equal(allow, "POST");
    resp_free(&r);

    post(&r, &main_srv, "/healthz", "{}", 2, NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    resp_free(&r);

    url_of(url, sizeof url, &main_srv, "/v1/schemes");
    http_do(&r, "DELETE", url, NULL, 0, NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    resp_free(&r);
}

static void test_openapi(void **state)
{
    resp r;
    char type[128];
    (void)state;
    get(&r, &main_srv, "/openapi.yaml", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", type, sizeof type));
    assert_non_null(strstr(type, "yaml"));
    assert_non_null(r.body.p);
    assert_true(strncmp(r.body.p, "openapi:", 8) == 0 || strstr(r.body.p, "\nopenapi:") != NULL);
    static const char *const paths[] = {
        "/v1/attention:", "/v1/encode:", "/v1/analyze:",   "/v1/schemes:", "/healthz:",
        "/readyz:",       "/metrics:",   "/openapi.yaml:", "\n  /:\n",     "/web/{name}:",
        "/v1/tensors:",   "/v2:",        "/v2/health/live:", "/v2/models/{model}/infer:"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        if (strstr(r.body.p, paths[i]) == NULL)
            fail_msg("openapi.yaml does not document %s", paths[i]);
    resp_free(&r);
}

/* The web page: GET / and GET /web/NAME serve the embedded files of
 * server/web/ with their headers; any other name is a 404, and so is a path
 * that tries to leave the folder. */
static void test_web_page(void **state)
{
    resp r;
    char h[512];
    (void)state;
    get(&r, &main_srv, "/", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/html; charset=utf-8");
    assert_true(resp_header(&r, "Content-Security-Policy", h, sizeof h));
    assert_non_null(strstr(h, "default-src 'self'"));
    assert_true(resp_header(&r, "Cache-Control", h, sizeof h));
    assert_non_null(r.body.p);
    assert_non_null(strstr(r.body.p, "<!doctype html>"));
    assert_non_null(strstr(r.body.p, "/web/app.js"));
    resp_free(&r);

    get(&r, &main_srv, "/web/index.html", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, &main_srv, "/web/app.js", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/javascript; charset=utf-8");
    resp_free(&r);
    get(&r, &main_srv, "/web/style.css", NULL);
    assert_int_equal(r.status, 200);
    assert_true(resp_header(&r, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/css; charset=utf-8");
    resp_free(&r);

    static const char *const missing[] = {
        "/web/",       "/web/nope.js", "/web/%2e%2e/Makefile", "/web/../openapi.yaml",
        "/index.html", "/web"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        char url[256];
        xfer x;
        url_of(url, sizeof url, &main_srv, missing[i]);
        xfer_init(&x, "GET", url, NULL, 0, NULL, 30000L);
        curl_easy_setopt(x.e, CURLOPT_PATH_AS_IS, 1L); /* send the dots as they are */
        xfer_finish(&x, curl_easy_perform(x.e));
        r = x.r;
        xfer_cleanup(&x);
        if (r.status != 404)
            fail_msg("GET %s: %ld, want 404", missing[i], (long)r.status);
        check_error(&r, 404, "NOT_FOUND", NULL);
        resp_free(&r);
    }
    post(&r, &main_srv, "/", "{}", 2, NULL);
    check_error(&r, 405, "METHOD_NOT_ALLOWED", NULL);
    resp_free(&r);
}

/* /metrics exposes the histograms and counts the requests this test makes. */
static void test_metrics(void **state)
{
    static const char *const ok_attention[] = {"endpoint=\"attention\"", "code=\"200\"", NULL};
    static const char *const nf[] = {"code=\"404\"", NULL};
    static const char *const inf_attention[] = {"endpoint=\"attention\"", "le=\"+Inf\"", NULL};
    static const char *const alibi[] = {"scheme=\"alibi\"", NULL};
    char *before, *after;
    acase c;
    resp r;
    (void)state;

    acase_init(&c, "m", PA_SCHEME_ALIBI, 4, 4, 2, 2, 8, 8, 12);
    acase_reference(&c);
    before = get_metrics(&main_srv);
    for (int i = 0; i < 3; i++) {
        run_batch(&main_srv, &c, 1, ENC_FLAT, false, &r);
        resp_free(&r);
    }
    get(&r, &main_srv, "/no/such/path", NULL);
    resp_free(&r);
    after = get_metrics(&main_srv);

    static const char *const names[] = {"posattn_request_duration_seconds_bucket",
                                        "posattn_request_duration_seconds_sum",
                                        "posattn_request_duration_seconds_count",
                                        "posattn_queue_duration_seconds_bucket",
                                        "posattn_compute_duration_seconds_bucket",
                                        "posattn_requests_total",
                                        "posattn_items_total",
                                        "posattn_request_bytes_total",
                                        "posattn_response_bytes_total",
                                        "posattn_queue_depth",
                                        "posattn_in_flight",
                                        "posattn_build_info"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strstr(after, names[i]) == NULL)
            fail_msg("/metrics lacks %s", names[i]);
    assert_non_null(strstr(after, "# TYPE posattn_request_duration_seconds histogram"));
    check_exposition(after);
    {
        static const char *const none[] = {NULL};
        if (metric_sum(after, "posattn_queue_depth", none) != 0 ||
            metric_sum(after, "posattn_in_flight", none) != 0)
            fail_msg("idle server: posattn_queue_depth %g, posattn_in_flight %g, expected 0",
                     metric_sum(after, "posattn_queue_depth", none),
                     metric_sum(after, "posattn_in_flight", none));
    }

    double d_ok = metric_sum(after, "posattn_requests_total", ok_attention) -
                  metric_sum(before, "posattn_requests_total", ok_attention);
    double d_nf = metric_sum(after, "posattn_requests_total", nf) -
                  metric_sum(before, "posattn_requests_total", nf);
    double d_hist = metric_sum(after, "posattn_request_duration_seconds_bucket", inf_attention) -
                    metric_sum(before, "posattn_request_duration_seconds_bucket", inf_attention);
    double d_items = metric_sum(after, "posattn_items_total", alibi) -
                     metric_sum(before, "posattn_items_total", alibi);
    if (d_ok != 3 || d_nf != 1 || d_hist != 3 || d_items != 3)
        fail_msg("metrics moved by attention 200: %g, 404: %g, histogram +Inf: %g, alibi items: "
                 "%g; expected 3, 1, 3, 3",
                 d_ok, d_nf, d_hist, d_items);
    free(before);
    free(after);
    acase_free(&c);
}

/* One JSON access-log line per request on stderr. */
static void test_access_log(void **state)
{
    FILE *f;
    char line[2048];
    bool found = false;
    (void)state;
    f = fopen(main_srv.log, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strstr(line, "\"path\":\"/v1/attention\"") != NULL &&
            strstr(line, "\"status\":200") != NULL && line[0] == '{') {
            cJSON *j = cJSON_Parse(line);
            assert_non_null(j);
            cJSON_Delete(j);
            found = true;
        }
    }
    fclose(f);
    assert_true(found);
}

/* Last on the shared server: SIGTERM, exit 0. */
static void test_main_server_stops_cleanly(void **state)
{
    (void)state;
    server_stop_ok(&main_srv, false);
}

/* ------------------------------------------------------------------------- */
/* Tests with their own server                                               */
/* ------------------------------------------------------------------------- */

static int own_setup(void **state)
{
    server *s = calloc(1, sizeof *s);
    s->pid = -1;
    s->out_fd = -1;
    *state = s;
    return 0;
}

static int own_teardown(void **state)
{
    server_kill(*state);
    free(*state);
    return 0;
}

/* 401 with --api-key; 413 by body size, tensor size and request memory. */
static void test_auth_and_limits(void **state)
{
    static const char *const flags[] = {"--api-key",
                                        "e2e-secret",
                                        "--max-body-mb",
                                        "1",
                                        "--max-request-mb",
                                        "1",
                                        "--max-tensor-elements",
                                        "5000",
                                        "--max-batch-items",
                                        "4",
                                        NULL};
    static const char *const good[] = {"Authorization: Bearer e2e-secret", NULL};
    static const char *const wrong[] = {"Authorization: Bearer nope", NULL};
    static const char *const basic[] = {"Authorization: Basic ZTJlLXNlY3JldA==", NULL};
    static const char *const good_expect[] = {"Authorization: Bearer e2e-secret",
                                              "Expect: 100-continue", NULL};
    static const char *const good_chunked[] = {"Authorization: Bearer e2e-secret",
                                               "Transfer-Encoding: chunked", NULL};
    server *s = *state;
    acase c;
    sbuf body = {0}, big = {0};
    resp r;
    char www[64];

    server_start(s, flags);
    acase_init(&c, "auth", PA_SCHEME_ROPE, 3, 3, 2, 2, 8, 8, 13);
    c.causal = true;
    acase_reference(&c);
    sb_request(&body, &c, 1, ENC_FLAT, false);

    post(&r, s, "/v1/attention", body.p, body.len, NULL);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    assert_true(resp_header(&r, "WWW-Authenticate", www, sizeof www));
    assert_non_null(strstr(www, "Bearer"));
    resp_free(&r);
    post(&r, s, "/v1/attention", body.p, body.len, wrong);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    post(&r, s, "/v1/attention", body.p, body.len, basic);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);
    get(&r, s, "/v1/schemes", NULL);
    check_error(&r, 401, "UNAUTHORIZED", NULL);
    resp_free(&r);

    /* Probes, metrics and the web page stay open. */
    get(&r, s, "/healthz", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, s, "/", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(&r, s, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    /* The right key works. */
    post(&r, s, "/v1/attention", body.p, body.len, good);
    assert_int_equal(r.status, 200);
    {
        cJSON *j = parse_json(&r);
        check_output(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), &c);
        cJSON_Delete(j);
    }
    resp_free(&r);
    get(&r, s, "/v1/schemes", good);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    /* 413: a 2 MB body against --max-body-mb 1, announced by Content-Length
     * (with and without Expect: 100-continue) and streamed in chunks. */
    sb_puts(&big, "{\"inputs\":[],\"pad\":\"");
    while (big.len < 2u << 20)
        sb_puts(&big, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    sb_puts(&big, "\"}");
    post(&r, s, "/v1/attention", big.p, big.len, good_expect);
    check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
    resp_free(&r);
    post(&r, s, "/v1/attention", big.p, big.len, good);
    check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
    resp_free(&r);
    post(&r, s, "/v1/attention", big.p, big.len, good_chunked);
    check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
    resp_free(&r);
    sb_free(&big);

    /* 413: five items against --max-batch-items 4. */
    {
        acase t[5];
        sbuf b = {0};
        for (int i = 0; i < 5; i++)
            acase_init(&t[i], "batch", PA_SCHEME_NONE, 2, 2, 1, 1, 2, 2, 30 + (uint64_t)i);
        sb_request(&b, t, 5, ENC_FLAT, false);
        post(&r, s, "/v1/attention", b.p, b.len, good);
        check_error(&r, 413, "PAYLOAD_TOO_LARGE", "inputs");
        resp_free(&r);
        sb_free(&b);
        for (int i = 0; i < 5; i++)
            acase_free(&t[i]);
    }

    /* 413: a tensor over --max-tensor-elements 5000 (q [40,16,8] = 5120). */
    {
        acase t;
        sbuf b = {0};
        acase_init(&t, "elements", PA_SCHEME_NONE, 40, 4, 16, 1, 8, 8, 14);
        sb_request(&b, &t, 1, ENC_B64, false);
        post(&r, s, "/v1/attention", b.p, b.len, good);
        if (r.status == 200) {
            cJSON *j = parse_json(&r);
            cJSON *e = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), "error");
            assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code")),
                                "PAYLOAD_TOO_LARGE");
            cJSON_Delete(j);
        } else {
            check_error(&r, 413, "PAYLOAD_TOO_LARGE", "inputs[0].q");
        }
        resp_free(&r);
        sb_free(&b);
        acase_free(&t);
    }

    /* 413: weights [1, 1024, 1024] need 4 MB against --max-request-mb 1;
     * the message states the figure. */
    {
        acase t;
        sbuf b = {0};
        cJSON *j, *e;
        const char *msg;
        acase_init(&t, "memory", PA_SCHEME_NONE, 1024, 1024, 1, 1, 1, 1, 15);
        t.want_weights = true;
        sb_request(&b, &t, 1, ENC_B64, false);
        post(&r, s, "/v1/attention", b.p, b.len, good);
        if (r.status == 200) {
            j = parse_json(&r);
            e = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), "error");
        } else {
            check_error(&r, 413, "PAYLOAD_TOO_LARGE", NULL);
            j = parse_json(&r);
            e = cJSON_GetObjectItemCaseSensitive(j, "error");
        }
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code")),
                            "PAYLOAD_TOO_LARGE");
        msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
        assert_non_null(msg);
        if (strpbrk(msg, "0123456789") == NULL)
            fail_msg("413 message '%s' states no figure", msg);
        cJSON_Delete(j);
        resp_free(&r);
        sb_free(&b);
        acase_free(&t);
    }

    sb_free(&body);
    acase_free(&c);
    server_stop_ok(s, false);
}

/* Many concurrent slow requests on 1 worker and a queue of 1: some are
 * refused at once with 503 and Retry-After, the rest answer 200 correctly. */
#define QUEUE_N 10

static void test_queue_full_503(void **state)
{
    static const char *const flags[] = {"--workers", "1", "--queue-depth", "1", NULL};
    server *s = *state;
    acase c;
    sbuf body = {0};
    xfer xs[QUEUE_N];
    char url[256], retry[32];
    int n200 = 0, n503 = 0;

    server_start(s, flags);
    slow_case(&c);
    sb_request(&body, &c, 1, ENC_B64, true);
    url_of(url, sizeof url, s, "/v1/attention");
    for (int i = 0; i < QUEUE_N; i++)
        xfer_init(&xs[i], "POST", url, body.p, body.len, NULL, 30000L);
    multi_run(xs, QUEUE_N, 40.0, NULL, NULL);
    for (int i = 0; i < QUEUE_N; i++) {
        resp *r = &xs[i].r;
        if (r->rc != CURLE_OK)
            fail_msg("request %d: %s", i, curl_easy_strerror(r->rc));
        if (r->status == 503) {
            check_error(r, 503, "OVERLOADED", NULL);
            if (!resp_header(r, "Retry-After", retry, sizeof retry))
                fail_msg("503 without Retry-After");
            assert_true(atoi(retry) >= 1);
            n503++;
        } else if (r->status == 200) {
            cJSON *j = parse_json(r);
            check_output(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), &c);
            cJSON_Delete(j);
            n200++;
        } else {
            fail_msg("request %d: HTTP %ld, expected 200 or 503: %.300s", i, r->status,
                     r->body.p ? r->body.p : "");
        }
    }
    print_message("queue full: %d x 200, %d x 503\n", n200, n503);
    assert_true(n200 >= 1);
    assert_true(n503 >= 1);
    for (int i = 0; i < QUEUE_N; i++) {
        resp_free(&xs[i].r);
        xfer_cleanup(&xs[i]);
    }

    /* Idle again: served at once. */
    {
        resp r;
        get(&r, s, "/readyz", NULL);
        assert_int_equal(r.status, 200);
        resp_free(&r);
    }
    sb_free(&body);
    acase_free(&c);
    server_stop_ok(s, false);
}

/* --request-timeout 0.001: parsing a big body alone takes longer, so no
 * task starts before its deadline. A single-task endpoint answers 504; in an
 * attention batch each item reports TIMEOUT. */
static void test_timeout_504(void **state)
{
    static const char *const flags[] = {"--request-timeout", "0.001", NULL};
    server *s = *state;
    acase cs[2];
    sbuf body = {0};
    resp r;
    char st[128];

    server_start(s, flags);
    acase_init(&cs[0], "late-0", PA_SCHEME_ROPE, 256, 256, 4, 4, 32, 32, 16);
    acase_init(&cs[1], "late-1", PA_SCHEME_ALIBI, 256, 256, 4, 4, 32, 32, 17);

    sb_analysis(&body, "decomposition", &cs[0], ENC_FLAT); /* ~100k floats of JSON */
    post(&r, s, "/v1/analyze", body.p, body.len, NULL);
    check_error(&r, 504, "TIMEOUT", NULL);
    assert_true(resp_header(&r, "Server-Timing", st, sizeof st));
    resp_free(&r);
    sb_free(&body);

    sb_request(&body, cs, 2, ENC_FLAT, false);
    post(&r, s, "/v1/attention", body.p, body.len, NULL);
    check_item_error(&r, 0, "TIMEOUT", "inputs[0]");
    check_item_error(&r, 1, "TIMEOUT", "inputs[1]");
    resp_free(&r);
    sb_free(&body);

    acase_free(&cs[0]);
    acase_free(&cs[1]);
    server_stop_ok(s, false);
}

/* Drain under load: SIGTERM while requests are in flight. /readyz turns 503,
 * new requests get 503, every accepted request completes with the right
 * numbers, and the process exits 0. */
#define DRAIN_N 8

typedef struct drain_ctx {
    server *s;
    xfer *xs;
    size_t body_len;
    double uploaded_at; /* when every body was sent */
    double term_at;     /* when SIGTERM was sent */
    long readyz_status, new_status;
    char new_code[32];
    double metrics_in_flight;
    int accepted_polls;
} drain_ctx;

static void drain_tick(void *arg, double t)
{
    drain_ctx *d = arg;
    (void)t;
    if (d->term_at > 0)
        return;
    if (d->uploaded_at == 0) {
        for (int i = 0; i < DRAIN_N; i++) {
            curl_off_t up = 0;
            curl_easy_getinfo(d->xs[i].e, CURLINFO_SIZE_UPLOAD_T, &up);
            if ((size_t)up < d->body_len)
                return;
        }
        d->uploaded_at = now_s();
        return;
    }
    /* Wait until the server has accepted every request: requests accepted =
     * in flight (posattn_in_flight) + answered (requests_total of the
     * attention endpoint), on this fresh server. (Counting tasks would not
     * do: a large item may run as several.) Twice in a row, as the two
     * figures are not read atomically. */
    {
        static const char *const none[] = {NULL};
        static const char *const att[] = {"endpoint=\"attention\"", NULL};
        char *m = get_metrics(d->s);
        double accepted = metric_sum(m, "posattn_in_flight", none) +
                          metric_sum(m, "posattn_requests_total", att);
        d->metrics_in_flight = metric_sum(m, "posattn_in_flight", none);
        free(m);
        d->accepted_polls = accepted >= DRAIN_N ? d->accepted_polls + 1 : 0;
        if (d->accepted_polls < 2 && now_s() - d->uploaded_at < 10.0)
            return;
    }
    kill(d->s->pid, SIGTERM);
    d->term_at = now_s();
    /* Still listening while it drains. */
    sleep_s(0.05);
    {
        resp r;
        char url[256];
        url_of(url, sizeof url, d->s, "/readyz");
        http_do(&r, "GET", url, NULL, 0, NULL);
        d->readyz_status = r.status;
        resp_free(&r);
        url_of(url, sizeof url, d->s, "/v1/attention");
        http_do(&r, "POST", url, "{\"inputs\":[]}", 13, NULL);
        d->new_status = r.status;
        if (r.status == 503) {
            cJSON *j = cJSON_ParseWithLength(r.body.p, r.body.len);
            const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(j, "error"), "code"));
            snprintf(d->new_code, sizeof d->new_code, "%s", code ? code : "");
            cJSON_Delete(j);
        }
        resp_free(&r);
    }
}

/* SIGTERM while a request body is still arriving: the request is answered
 * (200 if it was accepted, 503 DRAINING if not), never dropped, and the
 * server still exits 0. (It used to stop with the connection suspended and
 * abort inside libmicrohttpd.) */
typedef struct upload_ctx {
    server *s;
    xfer *x;
    size_t len;
    double term_at;
} upload_ctx;

static void upload_tick(void *arg, double t)
{
    upload_ctx *u = arg;
    curl_off_t up = 0;
    (void)t;
    if (u->term_at > 0)
        return;
    curl_easy_getinfo(u->x->e, CURLINFO_SIZE_UPLOAD_T, &up);
    if (up > 0 && (size_t)up < u->len / 2)
        return;
    if (up > 0) {
        kill(u->s->pid, SIGTERM);
        u->term_at = now_s();
    }
}

static void test_sigterm_mid_upload(void **state)
{
    static const char *const flags[] = {"--workers", "1", NULL};
    server *s = *state;
    acase c;
    sbuf body = {0};
    xfer x;
    char url[256];
    upload_ctx u;

    server_start(s, flags);
    slow_case(&c);
    sb_request(&body, &c, 1, ENC_FLAT, false); /* JSON text: several MB */
    url_of(url, sizeof url, s, "/v1/attention");
    xfer_init(&x, "POST", url, body.p, body.len, NULL, 40000L);
    /* About two seconds of upload, so the signal lands mid-body. */
    curl_easy_setopt(x.e, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)(body.len / 2 + 1));
    memset(&u, 0, sizeof u);
    u.s = s;
    u.x = &x;
    u.len = body.len;
    multi_run(&x, 1, 60.0, upload_tick, &u);
    assert_true(u.term_at > 0);
    if (x.r.rc != CURLE_OK)
        fail_msg("the request was dropped: %s", curl_easy_strerror(x.r.rc));
    print_message("SIGTERM mid-upload: HTTP %ld\n", x.r.status);
    if (x.r.status == 503)
        check_error(&x.r, 503, "DRAINING", NULL);
    else if (x.r.status == 200) {
        cJSON *j = parse_json(&x.r);
        check_output(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), &c);
        cJSON_Delete(j);
    } else
        fail_msg("HTTP %ld: %.300s", x.r.status, x.r.body.p ? x.r.body.p : "");
    resp_free(&x.r);
    xfer_cleanup(&x);
    server_stop_ok(s, true);
    sb_free(&body);
    acase_free(&c);
}

static void test_drain_under_load(void **state)
{
    static const char *const flags[] = {"--workers", "2", "--queue-depth", "64", "--drain-timeout",
                                        "30",        NULL};
    server *s = *state;
    acase c;
    sbuf body = {0};
    xfer xs[DRAIN_N];
    char url[256];
    drain_ctx d;
    int n200 = 0, after_term = 0;

    server_start(s, flags);
    slow_case(&c);
    sb_request(&body, &c, 1, ENC_B64, true);
    url_of(url, sizeof url, s, "/v1/attention");
    for (int i = 0; i < DRAIN_N; i++)
        xfer_init(&xs[i], "POST", url, body.p, body.len, NULL, 40000L);
    memset(&d, 0, sizeof d);
    d.s = s;
    d.xs = xs;
    d.body_len = body.len;
    multi_run(xs, DRAIN_N, 45.0, drain_tick, &d);
    assert_true(d.term_at > 0);

    for (int i = 0; i < DRAIN_N; i++) {
        resp *r = &xs[i].r;
        if (r->rc != CURLE_OK)
            fail_msg("request %d: %s (an accepted request was lost)", i, curl_easy_strerror(r->rc));
        if (r->status == 503) {
            check_error(r, 503, "DRAINING", NULL);
            continue;
        }
        if (r->status != 200)
            fail_msg("request %d: HTTP %ld: %.300s", i, r->status, r->body.p ? r->body.p : "");
        cJSON *j = parse_json(r);
        check_output(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "outputs"), 0), &c);
        cJSON_Delete(j);
        n200++;
        if (r->done_at > d.term_at)
            after_term++;
    }
    print_message("drain: %d x 200 (%d finished after SIGTERM), in-flight gauge %g\n", n200,
                  after_term, d.metrics_in_flight);
    assert_int_equal(n200, DRAIN_N); /* all were accepted before SIGTERM */
    assert_true(after_term >= 1);
    assert_int_equal(d.readyz_status, 503);
    assert_int_equal(d.new_status, 503);
    assert_string_equal(d.new_code, "DRAINING");
    if (d.metrics_in_flight < 1)
        fail_msg("posattn_in_flight was %g with %d requests in flight", d.metrics_in_flight,
                 DRAIN_N);
    for (int i = 0; i < DRAIN_N; i++) {
        resp_free(&xs[i].r);
        xfer_cleanup(&xs[i]);
    }
    sb_free(&body);
    acase_free(&c);
    server_stop_ok(s, true);
}

/* ------------------------------------------------------------------------- */

/* $POSATTND, else posattnd in this binary's build folder (<BUILD>/tests/..),
 * else build/posattnd. */
static void find_binary(const char *argv0)
{
    const char *env = getenv("POSATTND");
    const char *slash = strrchr(argv0, '/');
    if (env != NULL && env[0] != '\0')
        snprintf(posattnd_path, sizeof posattnd_path, "%s", env);
    else if (slash != NULL)
        snprintf(posattnd_path, sizeof posattnd_path, "%.*s/../posattnd", (int)(slash - argv0),
                 argv0);
    else
        snprintf(posattnd_path, sizeof posattnd_path, "build/posattnd");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_ready_schemes),
        cmocka_unit_test(test_attention_rope_causal_gqa),
        cmocka_unit_test(test_attention_mixed_batch),
        cmocka_unit_test(test_attention_b64),
        cmocka_unit_test(test_attention_nested_json),
        cmocka_unit_test(test_attention_item_error),
        cmocka_unit_test(test_error_400),
        cmocka_unit_test(test_error_400_shape_mismatch),
        cmocka_unit_test(test_encode_analyze),
        cmocka_unit_test(test_error_404_405),
        cmocka_unit_test(test_openapi),
        cmocka_unit_test(test_web_page),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_access_log),
        cmocka_unit_test(test_main_server_stops_cleanly),
        cmocka_unit_test_setup_teardown(test_auth_and_limits, own_setup, own_teardown),
        cmocka_unit_test_setup_teardown(test_queue_full_503, own_setup, own_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_504, own_setup, own_teardown),
        cmocka_unit_test_setup_teardown(test_drain_under_load, own_setup, own_teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_mid_upload, own_setup, own_teardown),
    };
    const uint32_t one = 1;
    int rc;

    (void)argc;
    if (*(const unsigned char *)&one != 1) {
        fprintf(stderr, "test_e2e_http: the b64 checks assume a little-endian machine\n");
        return 1;
    }
    find_binary(argv[0]);
    if (access(posattnd_path, X_OK) != 0) {
        fprintf(stderr, "test_e2e_http: %s is not an executable (build it, or set POSATTND)\n",
                posattnd_path);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("e2e_http", tests, group_setup, group_teardown);
    curl_global_cleanup();
    return rc;
}
