/* metrics.c - see metrics.h. Lock-free counters and fixed-bucket histograms
 * over bounded label sets, rendered in the Prometheus text format 0.0.4.
 *
 * Every update is a few relaxed atomic adds: no lock sits on the request path.
 * A histogram keeps one counter per bucket (not cumulative) and the sum in
 * integer nanoseconds (an atomic double add would need a CAS loop; 2^64 ns is
 * 584 years). _count is derived from the buckets while rendering, so
 * _count always equals the +Inf bucket even while updates race the render;
 * _sum may lag the buckets by the in-flight updates, which Prometheus
 * tolerates.
 */
#include "runtime/metrics.h"
#include "runtime/probe.h"
#include "store/kv_cache.h"

#include "posattn.h"

#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Latency bucket upper bounds, 1 us to 30 s in steps of 1, 2.5, 5; +Inf is
 * implicit. The first ones are for what posattnd measures of tiny requests:
 * an item of a few tokens computes in 3 to 20 us, and its request is
 * answered in 30 to 100 us. The text is what `le` shows. */
static const struct {
    double seconds;
    const char *text;
} bucket_bounds[] = {
    {0.000001, "1e-06"},
    {0.0000025, "2.5e-06"},
    {0.000005, "5e-06"},
    {0.00001, "1e-05"},
    {0.000025, "2.5e-05"},
    {0.00005, "5e-05"},
    {0.0001, "0.0001"},
    {0.00025, "0.00025"},
    {0.0005, "0.0005"},
    {0.001, "0.001"},
    {0.0025, "0.0025"},
    {0.005, "0.005"},
    {0.01, "0.01"},
    {0.025, "0.025"},
    {0.05, "0.05"},
    {0.1, "0.1"},
    {0.25, "0.25"},
    {0.5, "0.5"},
    {1, "1"},
    {2.5, "2.5"},
    {5, "5"},
    {10, "10"},
    {30, "30"},
};
#define N_BOUNDS (sizeof bucket_bounds / sizeof bucket_bounds[0])
#define N_BUCKETS (N_BOUNDS + 1) /* + the +Inf bucket */

static const char *const endpoint_names[] = {
    "attention",      "encode",         "analyze",      "schemes",         "tensors",
    "models",         "models_resolve", "sessions",     "sessions_create", "session",
    "session_delete", "session_append", "session_fork", "healthz",         "readyz",
    "metrics",        "openapi",        "page",         "v2_infer",        "v2_metadata",
    "v2_health",      "v2_stats",       "other",
};
#define N_ENDPOINTS (sizeof endpoint_names / sizeof endpoint_names[0])
#define ENDPOINT_OTHER (N_ENDPOINTS - 1)

/* Status codes the service answers, then a class per hundred, then "other". */
static const int known_codes[] = {200, 201, 400, 401, 404, 405, 409, 413, 500, 501, 503, 504, 507};
#define N_KNOWN_CODES (sizeof known_codes / sizeof known_codes[0])
static const char *const code_classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
#define N_CODE_CLASSES (sizeof code_classes / sizeof code_classes[0])
#define N_CODES (N_KNOWN_CODES + N_CODE_CLASSES + 1)
#define CODE_OTHER (N_CODES - 1)

/* Scheme labels: every pa_scheme_type_name, then "analysis", then "other". */
#define SCHEME_ANALYSIS ((size_t)PA_SCHEME_COUNT)
#define SCHEME_OTHER ((size_t)PA_SCHEME_COUNT + 1)
#define N_SCHEMES ((size_t)PA_SCHEME_COUNT + 2)

/* Model counter slots: the schemes', then the named models'. */
#define N_MODEL_SLOTS ((size_t)PA_SCHEME_COUNT + SRV_METRICS_MAX_MODELS)

/* Sums above this are clamped (about 31 years), so the ns sum cannot wrap. */
#define MAX_OBSERVATION_SECONDS 1e9

typedef struct histogram {
    atomic_uint_fast64_t buckets[N_BUCKETS];
    atomic_uint_fast64_t sum_ns;
} histogram;

struct srv_metrics {
    histogram request[N_ENDPOINTS];
    histogram queue;
    histogram compute[N_SCHEMES];
    histogram session_step[N_SCHEMES];
    atomic_uint_fast64_t item_errors[N_SCHEMES];
    atomic_uint_fast64_t requests[N_ENDPOINTS][N_CODES];
    atomic_uint_fast64_t items[N_SCHEMES];
    atomic_uint_fast64_t request_bytes;
    atomic_uint_fast64_t response_bytes;
    atomic_int_fast64_t queue_depth;
    atomic_int_fast64_t in_flight;
    atomic_int_fast64_t queue_limit; /* --queue-depth */
    atomic_bool draining;
    atomic_uint_fast64_t cut[3];          /* headers, body, send */
    atomic_uint_fast64_t auth_refused[3]; /* missing, scheme, key */
    atomic_uint_fast64_t tls_failed[2];   /* failed, timeout */
    /* The models' counters: one per scheme (keyed by its name), then one
     * per model added with srv_metrics_add_model (keyed "model:NAME"). */
    struct {
        atomic_uint_fast64_t n[2], ns[2]; /* fail, success */
        atomic_uint_fast64_t phase_ns[SRV_PHASE_COUNT];
        atomic_uint_fast64_t last_ms;
    } model[N_MODEL_SLOTS];
    char model_names[SRV_METRICS_MAX_MODELS][SRV_METRICS_MODEL_NAME_MAX];
    size_t n_models;        /* set before serving, read-only after */
    srv_kv_cache *sessions; /* set before serving; its figures are read at each render */
    const srv_machine *machine; /* the probe's ceilings (runtime/probe.h), or NULL */
    /* Items' fraction_of_peak by scheme: summed (in millionths) and counted. */
    atomic_uint_fast64_t peak_sum[N_SCHEMES], peak_count[N_SCHEMES];
};

static const char *const phase_names[SRV_PHASE_COUNT] = {"queue", "compute_input", "compute_infer",
                                                         "compute_output"};

static void histogram_init(histogram *h)
{
    for (size_t i = 0; i < N_BUCKETS; i++)
        atomic_init(&h->buckets[i], 0);
    atomic_init(&h->sum_ns, 0);
}

static void histogram_observe(histogram *h, double seconds)
{
    if (!(seconds > 0)) /* negative and NaN count as zero */
        seconds = 0;
    if (seconds > MAX_OBSERVATION_SECONDS)
        seconds = MAX_OBSERVATION_SECONDS;
    size_t b = 0;
    while (b < N_BOUNDS && seconds > bucket_bounds[b].seconds)
        b++;
    atomic_fetch_add_explicit(&h->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (uint_fast64_t)llround(seconds * 1e9),
                              memory_order_relaxed);
}

static size_t endpoint_index(const char *endpoint)
{
    for (size_t i = 0; endpoint && i < ENDPOINT_OTHER; i++)
        if (strcmp(endpoint, endpoint_names[i]) == 0)
            return i;
    return ENDPOINT_OTHER;
}

static size_t code_index(int code)
{
    for (size_t i = 0; i < N_KNOWN_CODES; i++)
        if (code == known_codes[i])
            return i;
    if (code >= 100 && code < 600)
        return N_KNOWN_CODES + (size_t)(code / 100 - 1);
    return CODE_OTHER;
}

/* Writes the label value of code slot i into buf. */
static const char *code_label(size_t i, char *buf, size_t cap)
{
    if (i < N_KNOWN_CODES) {
        snprintf(buf, cap, "%d", known_codes[i]);
        return buf;
    }
    if (i < N_KNOWN_CODES + N_CODE_CLASSES)
        return code_classes[i - N_KNOWN_CODES];
    return "other";
}

static size_t scheme_index(const char *scheme)
{
    if (!scheme)
        return SCHEME_OTHER;
    for (int t = 0; t < PA_SCHEME_COUNT; t++) {
        const char *name = pa_scheme_type_name((pa_scheme_type)t);
        if (name && strcmp(scheme, name) == 0)
            return (size_t)t;
    }
    if (strcmp(scheme, "analysis") == 0)
        return SCHEME_ANALYSIS;
    return SCHEME_OTHER;
}

static const char *scheme_label(size_t i)
{
    if (i < (size_t)PA_SCHEME_COUNT) {
        const char *name = pa_scheme_type_name((pa_scheme_type)i);
        return name ? name : "other";
    }
    return i == SCHEME_ANALYSIS ? "analysis" : "other";
}

static uint64_t load(atomic_uint_fast64_t *a)
{
    return (uint64_t)atomic_load_explicit(a, memory_order_relaxed);
}

srv_metrics *srv_metrics_new(void)
{
    srv_metrics *m = malloc(sizeof *m);
    if (!m)
        return NULL;
    for (size_t e = 0; e < N_ENDPOINTS; e++) {
        histogram_init(&m->request[e]);
        for (size_t c = 0; c < N_CODES; c++)
            atomic_init(&m->requests[e][c], 0);
    }
    histogram_init(&m->queue);
    for (size_t s = 0; s < N_SCHEMES; s++) {
        histogram_init(&m->compute[s]);
        histogram_init(&m->session_step[s]);
        atomic_init(&m->items[s], 0);
        atomic_init(&m->item_errors[s], 0);
    }
    atomic_init(&m->request_bytes, 0);
    atomic_init(&m->response_bytes, 0);
    atomic_init(&m->queue_depth, 0);
    atomic_init(&m->in_flight, 0);
    atomic_init(&m->queue_limit, 0);
    atomic_init(&m->draining, false);
    for (size_t k = 0; k < 3; k++) {
        atomic_init(&m->cut[k], 0);
        atomic_init(&m->auth_refused[k], 0);
    }
    atomic_init(&m->tls_failed[0], 0);
    atomic_init(&m->tls_failed[1], 0);
    m->n_models = 0;
    m->sessions = NULL;
    m->machine = NULL;
    for (size_t s = 0; s < N_SCHEMES; s++) {
        atomic_init(&m->peak_sum[s], 0);
        atomic_init(&m->peak_count[s], 0);
    }
    for (size_t s = 0; s < N_MODEL_SLOTS; s++) {
        for (int k = 0; k < 2; k++) {
            atomic_init(&m->model[s].n[k], 0);
            atomic_init(&m->model[s].ns[k], 0);
        }
        for (int p = 0; p < SRV_PHASE_COUNT; p++)
            atomic_init(&m->model[s].phase_ns[p], 0);
        atomic_init(&m->model[s].last_ms, 0);
    }
    return m;
}

void srv_metrics_free(srv_metrics *m)
{
    free(m);
}

void srv_metrics_request(srv_metrics *m, const char *endpoint, int code, double seconds,
                         size_t request_bytes, size_t response_bytes)
{
    if (!m)
        return;
    size_t e = endpoint_index(endpoint);
    histogram_observe(&m->request[e], seconds);
    atomic_fetch_add_explicit(&m->requests[e][code_index(code)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->request_bytes, request_bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->response_bytes, response_bytes, memory_order_relaxed);
}

void srv_metrics_queue(srv_metrics *m, double seconds)
{
    if (m)
        histogram_observe(&m->queue, seconds);
}

void srv_metrics_compute(srv_metrics *m, const char *scheme, double seconds)
{
    if (!m)
        return;
    size_t s = scheme_index(scheme);
    histogram_observe(&m->compute[s], seconds);
    atomic_fetch_add_explicit(&m->items[s], 1, memory_order_relaxed);
}

void srv_metrics_item_error(srv_metrics *m, const char *scheme)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&m->item_errors[scheme_index(scheme)], 1, memory_order_relaxed);
}

void srv_metrics_session_step(srv_metrics *m, const char *scheme, double seconds)
{
    if (m != NULL)
        histogram_observe(&m->session_step[scheme_index(scheme)], seconds);
}

void srv_metrics_queue_depth_add(srv_metrics *m, int64_t delta)
{
    if (m)
        atomic_fetch_add_explicit(&m->queue_depth, delta, memory_order_relaxed);
}

void srv_metrics_in_flight_add(srv_metrics *m, int64_t delta)
{
    if (m)
        atomic_fetch_add_explicit(&m->in_flight, delta, memory_order_relaxed);
}

/* Seconds as integer nanoseconds, clamped as histograms clamp them. */
static uint_fast64_t ns_of(double seconds)
{
    if (!(seconds > 0))
        return 0;
    if (seconds > MAX_OBSERVATION_SECONDS)
        seconds = MAX_OBSERVATION_SECONDS;
    return (uint_fast64_t)llround(seconds * 1e9);
}

bool srv_metrics_add_model(srv_metrics *m, const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (m == NULL || n == 0 || n >= SRV_METRICS_MODEL_NAME_MAX ||
        m->n_models == SRV_METRICS_MAX_MODELS || strpbrk(name, "\"\\\n") != NULL)
        return false;
    for (size_t i = 0; i < m->n_models; i++)
        if (strcmp(m->model_names[i], name) == 0)
            return false;
    memcpy(m->model_names[m->n_models++], name, n + 1);
    return true;
}

/* The counter slot of a model key (api/api.h, SRV_MODEL_KEY_PREFIX), or
 * N_MODEL_SLOTS when it has none. */
static size_t model_slot(const srv_metrics *m, const char *key)
{
    static const char prefix[] = SRV_MODEL_KEY_PREFIX;
    size_t s;
    if (key == NULL)
        return N_MODEL_SLOTS;
    if (strncmp(key, prefix, sizeof prefix - 1) == 0) {
        for (size_t i = 0; i < m->n_models; i++)
            if (strcmp(m->model_names[i], key + sizeof prefix - 1) == 0)
                return (size_t)PA_SCHEME_COUNT + i;
        return N_MODEL_SLOTS;
    }
    s = scheme_index(key);
    return s < (size_t)PA_SCHEME_COUNT ? s : N_MODEL_SLOTS;
}

/* The label of a model slot: scheme="rope" or model="gemma2". */
static void model_label(const srv_metrics *m, size_t s, char *buf, size_t cap)
{
    if (s < (size_t)PA_SCHEME_COUNT)
        snprintf(buf, cap, "scheme=\"%s\"", scheme_label(s));
    else
        snprintf(buf, cap, "model=\"%s\"", m->model_names[s - (size_t)PA_SCHEME_COUNT]);
}

void srv_metrics_model_infer(srv_metrics *m, const char *key, bool success, double seconds,
                             const double phase_seconds[SRV_PHASE_COUNT])
{
    size_t s;
    struct timespec now;
    if (m == NULL || (s = model_slot(m, key)) == N_MODEL_SLOTS)
        return;
    atomic_fetch_add_explicit(&m->model[s].n[success], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->model[s].ns[success], ns_of(seconds), memory_order_relaxed);
    for (int p = 0; success && phase_seconds != NULL && p < SRV_PHASE_COUNT; p++)
        atomic_fetch_add_explicit(&m->model[s].phase_ns[p], ns_of(phase_seconds[p]),
                                  memory_order_relaxed);
    clock_gettime(CLOCK_REALTIME, &now);
    atomic_store_explicit(&m->model[s].last_ms,
                          (uint_fast64_t)now.tv_sec * 1000u + (uint_fast64_t)now.tv_nsec / 1000000u,
                          memory_order_relaxed);
}

void srv_metrics_model_counts(srv_metrics *m, const char *key, srv_model_counts *out)
{
    size_t s;
    memset(out, 0, sizeof *out);
    if (m == NULL || (s = model_slot(m, key)) == N_MODEL_SLOTS)
        return;
    out->fail = load(&m->model[s].n[0]);
    out->success = load(&m->model[s].n[1]);
    out->fail_ns = load(&m->model[s].ns[0]);
    out->success_ns = load(&m->model[s].ns[1]);
    for (int p = 0; p < SRV_PHASE_COUNT; p++)
        out->phase_ns[p] = load(&m->model[s].phase_ns[p]);
    out->last_ms = load(&m->model[s].last_ms);
}

/* The counters with one label of a fixed set of values: cuts by phase,
 * refused keys and failed TLS connections by reason. */
static const char *const cut_phases[] = {"headers", "body", "send", NULL};
static const char *const auth_reasons[] = {"missing", "scheme", "key", NULL};
static const char *const tls_reasons[] = {"failed", "timeout", NULL};

/* Adds n to counts[k] where values[k] is value (a NULL-ended list); a
 * value not in it is not counted. */
static void bump(atomic_uint_fast64_t *counts, const char *const *values, const char *value,
                 uint64_t n)
{
    for (size_t k = 0; value != NULL && values[k] != NULL; k++)
        if (strcmp(value, values[k]) == 0)
            atomic_fetch_add_explicit(&counts[k], n, memory_order_relaxed);
}

void srv_metrics_auth_refused(srv_metrics *m, const char *reason)
{
    if (m != NULL)
        bump(m->auth_refused, auth_reasons, reason, 1);
}

void srv_metrics_tls_failed(srv_metrics *m, const char *reason)
{
    if (m != NULL)
        bump(m->tls_failed, tls_reasons, reason, 1);
}

void srv_metrics_connections_cut(srv_metrics *m, const char *phase, size_t n)
{
    if (m != NULL)
        bump(m->cut, cut_phases, phase, n);
}

int64_t srv_metrics_queue_depth(const srv_metrics *m)
{
    /* atomic_load takes a pointer to non-const in C11; reading is harmless. */
    return m ? (int64_t)atomic_load_explicit((atomic_int_fast64_t *)&m->queue_depth,
                                             memory_order_relaxed)
             : 0;
}

void srv_metrics_set_queue_limit(srv_metrics *m, int64_t tasks)
{
    if (m != NULL)
        atomic_store(&m->queue_limit, tasks);
}

void srv_metrics_set_draining(srv_metrics *m)
{
    if (m != NULL)
        atomic_store(&m->draining, true);
}

int64_t srv_metrics_in_flight(const srv_metrics *m)
{
    return m ? (int64_t)atomic_load_explicit((atomic_int_fast64_t *)&m->in_flight,
                                             memory_order_relaxed)
             : 0;
}

static bool histogram_seen(histogram *h)
{
    for (size_t i = 0; i < N_BUCKETS; i++)
        if (load(&h->buckets[i]))
            return true;
    return false;
}

/* Writes one histogram series; label is `name="value"` or NULL. */
static void histogram_write(FILE *f, const char *family, const char *label, histogram *h)
{
    const char *sep = label ? "," : "";
    const char *lab = label ? label : "";
    uint64_t cum = 0;
    for (size_t i = 0; i < N_BUCKETS; i++) {
        cum += load(&h->buckets[i]);
        fprintf(f, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", family, lab, sep,
                i < N_BOUNDS ? bucket_bounds[i].text : "+Inf", cum);
    }
    uint64_t ns = load(&h->sum_ns);
    const char *braces_open = label ? "{" : "";
    const char *braces_close = label ? "}" : "";
    fprintf(f, "%s_sum%s%s%s %" PRIu64 ".%09" PRIu64 "\n", family, braces_open, lab, braces_close,
            ns / 1000000000u, ns % 1000000000u);
    fprintf(f, "%s_count%s%s%s %" PRIu64 "\n", family, braces_open, lab, braces_close, cum);
}

static void header(FILE *f, const char *family, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", family, help, family, type);
}

/* Series with labels appear once they have been observed, so the page stays
 * short; unlabelled series are always there. */
/* A counter family with one label, every value written (0 included). */
static void labelled(FILE *f, const char *name, const char *help, const char *label,
                     const char *const *values, atomic_uint_fast64_t *counts)
{
    header(f, name, "counter", help);
    for (size_t k = 0; values[k] != NULL; k++)
        fprintf(f, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, values[k], load(&counts[k]));
}

void srv_metrics_fraction_of_peak(srv_metrics *m, const char *scheme, double fraction)
{
    size_t s;
    if (m == NULL || !(fraction >= 0) || fraction > 1e6)
        return;
    s = scheme_index(scheme);
    atomic_fetch_add(&m->peak_sum[s], (uint_fast64_t)(fraction * 1e6 + 0.5));
    atomic_fetch_add(&m->peak_count[s], 1);
}

void srv_metrics_set_machine(srv_metrics *m, const srv_machine *machine)
{
    if (m != NULL)
        m->machine = machine;
}

void srv_metrics_set_sessions(srv_metrics *m, srv_kv_cache *c)
{
    if (m != NULL)
        m->sessions = c;
}

/* The sessions' figures (store/kv_cache.h), read at once; idle sessions
 * past --session-ttl are dropped first, so the gauges never count them. */
static void sessions_write(FILE *f, srv_kv_cache *c)
{
    srv_kv_stats st;
    srv_kv_expire(c);
    srv_kv_stats_get(c, &st);
    header(f, "posattn_sessions", "gauge", "Sessions (KV caches) the server holds.");
    fprintf(f, "posattn_sessions %zu\n", st.sessions);
    header(f, "posattn_cache_bytes", "gauge",
           "Bytes of the sessions' blocks by storage type (a block shared by forks counted "
           "once).");
    for (int t = 0; t < 3; t++)
        fprintf(f, "posattn_cache_bytes{dtype=\"%s\"} %zu\n", pa_dtype_name((pa_dtype)t),
                st.bytes_by_dtype[t]);
    header(f, "posattn_cache_budget_bytes", "gauge", "The sessions' budget (--cache-mb).");
    fprintf(f, "posattn_cache_budget_bytes %zu\n", st.budget);
    header(f, "posattn_cache_blocks", "gauge",
           "The sessions' blocks: used (every one held), shared (held by more than one fork).");
    fprintf(f, "posattn_cache_blocks{state=\"used\"} %zu\n", st.blocks_used);
    fprintf(f, "posattn_cache_blocks{state=\"shared\"} %zu\n", st.blocks_shared);
    header(f, "posattn_cache_evictions_total", "counter",
           "Sessions dropped: idle past --session-ttl (ttl), or idle while the budget was full "
           "(pool_full, least recently used first).");
    fprintf(f, "posattn_cache_evictions_total{reason=\"ttl\"} %" PRIu64 "\n", st.evicted_ttl);
    fprintf(f, "posattn_cache_evictions_total{reason=\"pool_full\"} %" PRIu64 "\n",
            st.evicted_full);
    header(f, "posattn_session_tokens_appended_total", "counter", "Tokens appended to sessions.");
    fprintf(f, "posattn_session_tokens_appended_total %" PRIu64 "\n", st.tokens_appended);
    header(f, "posattn_session_tokens_evicted_total", "counter",
           "Tokens dropped by sessions' windows (eviction window).");
    fprintf(f, "posattn_session_tokens_evicted_total %" PRIu64 "\n", st.tokens_evicted);
}

char *srv_metrics_render(srv_metrics *m, size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    if (!m)
        return NULL;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    char label[96];

    header(f, "posattn_request_duration_seconds", "histogram",
           "Time from a request's arrival to its answer, by endpoint.");
    for (size_t e = 0; e < N_ENDPOINTS; e++) {
        if (!histogram_seen(&m->request[e]))
            continue;
        snprintf(label, sizeof label, "endpoint=\"%s\"", endpoint_names[e]);
        histogram_write(f, "posattn_request_duration_seconds", label, &m->request[e]);
    }

    header(f, "posattn_queue_duration_seconds", "histogram", "Time a task waited for a worker.");
    histogram_write(f, "posattn_queue_duration_seconds", NULL, &m->queue);

    header(f, "posattn_compute_duration_seconds", "histogram",
           "Time a worker spent computing one task (an item, or one sequence or head group "
           "of a batched or split one) that succeeded, by scheme; failed ones are counted in "
           "posattn_item_errors_total.");
    for (size_t s = 0; s < N_SCHEMES; s++) {
        if (!histogram_seen(&m->compute[s]))
            continue;
        snprintf(label, sizeof label, "scheme=\"%s\"", scheme_label(s));
        histogram_write(f, "posattn_compute_duration_seconds", label, &m->compute[s]);
    }

    header(f, "posattn_session_step_duration_seconds", "histogram",
           "Wall time of a session step, a /v1/attention item that names a session (or a "
           "KServe v2 sequence step), from its first part's start to its last part's end, by "
           "scheme.");
    for (size_t s = 0; s < N_SCHEMES; s++) {
        if (!histogram_seen(&m->session_step[s]))
            continue;
        snprintf(label, sizeof label, "scheme=\"%s\"", scheme_label(s));
        histogram_write(f, "posattn_session_step_duration_seconds", label, &m->session_step[s]);
    }

    header(f, "posattn_requests_total", "counter", "Requests answered, by endpoint and status.");
    for (size_t e = 0; e < N_ENDPOINTS; e++) {
        for (size_t c = 0; c < N_CODES; c++) {
            uint64_t v = load(&m->requests[e][c]);
            char code[16];
            if (v)
                fprintf(f, "posattn_requests_total{endpoint=\"%s\",code=\"%s\"} %" PRIu64 "\n",
                        endpoint_names[e], code_label(c, code, sizeof code), v);
        }
    }

    header(f, "posattn_items_total", "counter",
           "Tasks computed without error (batch items), by scheme: "
           "posattn_compute_duration_seconds_count.");
    for (size_t s = 0; s < N_SCHEMES; s++) {
        uint64_t v = load(&m->items[s]);
        if (v)
            fprintf(f, "posattn_items_total{scheme=\"%s\"} %" PRIu64 "\n", scheme_label(s), v);
    }
    header(f, "posattn_item_errors_total", "counter",
           "Tasks that ended in an item error (refused when parsed, or failed while "
           "computed), by scheme; not in posattn_compute_duration_seconds.");
    for (size_t s = 0; s < N_SCHEMES; s++) {
        uint64_t v = load(&m->item_errors[s]);
        if (v)
            fprintf(f, "posattn_item_errors_total{scheme=\"%s\"} %" PRIu64 "\n", scheme_label(s),
                    v);
    }

    header(f, "posattn_request_bytes_total", "counter", "Request body bytes received.");
    fprintf(f, "posattn_request_bytes_total %" PRIu64 "\n", load(&m->request_bytes));
    header(f, "posattn_response_bytes_total", "counter", "Response body bytes sent.");
    fprintf(f, "posattn_response_bytes_total %" PRIu64 "\n", load(&m->response_bytes));

    header(f, "posattn_queue_depth", "gauge", "Tasks waiting for a worker.");
    fprintf(f, "posattn_queue_depth %" PRId64 "\n", srv_metrics_queue_depth(m));
    header(f, "posattn_in_flight", "gauge", "Requests accepted and not yet answered.");
    fprintf(f, "posattn_in_flight %" PRId64 "\n", srv_metrics_in_flight(m));
    header(f, "posattn_queue_limit", "gauge",
           "Tasks that may wait for a worker before new work is refused with 503 (--queue-depth).");
    fprintf(f, "posattn_queue_limit %" PRId64 "\n", (int64_t)atomic_load(&m->queue_limit));
    header(f, "posattn_draining", "gauge",
           "1 from SIGTERM or SIGINT until exit (readyz and new work answer 503), else 0.");
    fprintf(f, "posattn_draining %d\n", atomic_load(&m->draining) ? 1 : 0);

    labelled(f, "posattn_connections_cut_total",
             "Connections shut because the client had not sent its request's headers or body, "
             "or read its answer, within --request-timeout.",
             "phase", cut_phases, m->cut);
    labelled(f, "posattn_auth_refused_total",
             "Requests refused for their API key: no Authorization header (missing), not a Bearer "
             "token (scheme), a key not accepted (key).",
             "reason", auth_reasons, m->auth_refused);
    labelled(f, "posattn_tls_handshake_failures_total",
             "TLS connections closed without carrying a request: the handshake failed (failed: "
             "the peer or a protocol error) or did not finish within --request-timeout (timeout).",
             "reason", tls_reasons, m->tls_failed);

    /* The Open Inference Protocol's statistics, by model: only models that
     * have been asked for (a bounded set either way). */
    static const char *const outcomes[2] = {"fail", "success"};
    header(f, "posattn_v2_inferences_total", "counter",
           "Open Inference Protocol inference requests, by model (its scheme, or the --model "
           "name) and outcome.");
    for (size_t s = 0; s < N_MODEL_SLOTS; s++)
        for (int k = 0; k < 2; k++)
            if (load(&m->model[s].n[0]) + load(&m->model[s].n[1]) > 0) {
                model_label(m, s, label, sizeof label);
                fprintf(f, "posattn_v2_inferences_total{%s,outcome=\"%s\"} %" PRIu64 "\n", label,
                        outcomes[k], load(&m->model[s].n[k]));
            }
    header(f, "posattn_v2_inference_seconds_total", "counter",
           "Their durations, first byte to answer, summed.");
    for (size_t s = 0; s < N_MODEL_SLOTS; s++)
        for (int k = 0; k < 2; k++)
            if (load(&m->model[s].n[0]) + load(&m->model[s].n[1]) > 0) {
                model_label(m, s, label, sizeof label);
                fprintf(f, "posattn_v2_inference_seconds_total{%s,outcome=\"%s\"} %.9f\n", label,
                        outcomes[k], (double)load(&m->model[s].ns[k]) / 1e9);
            }
    header(f, "posattn_v2_phase_seconds_total", "counter",
           "Successful inferences' time by phase (queue, compute_input, compute_infer, "
           "compute_output), summed.");
    for (size_t s = 0; s < N_MODEL_SLOTS; s++)
        for (int p = 0; p < SRV_PHASE_COUNT; p++)
            if (load(&m->model[s].n[1]) > 0) {
                model_label(m, s, label, sizeof label);
                fprintf(f, "posattn_v2_phase_seconds_total{%s,phase=\"%s\"} %.9f\n", label,
                        phase_names[p], (double)load(&m->model[s].phase_ns[p]) / 1e9);
            }

    if (m->sessions != NULL)
        sessions_write(f, m->sessions);

    srv_probe_write_metrics(f, m->machine);
    header(f, "posattn_fraction_of_peak", "summary",
           "Attention items' timing.fraction_of_peak (of the ceilings measured at start-up), "
           "summed and counted, by scheme.");
    for (size_t s = 0; s < N_SCHEMES; s++)
        if (load(&m->peak_count[s]) > 0)
            fprintf(f,
                    "posattn_fraction_of_peak_sum{scheme=\"%s\"} %.6f\n"
                    "posattn_fraction_of_peak_count{scheme=\"%s\"} %" PRIu64 "\n",
                    scheme_label(s), (double)load(&m->peak_sum[s]) / 1e6, scheme_label(s),
                    load(&m->peak_count[s]));

    header(f, "posattn_build_info", "gauge",
           "The posattn version and the kernels this CPU runs (avx512, avx2 or portable); always 1.");
    fprintf(f, "posattn_build_info{version=\"%s\",kernel=\"%s\"} 1\n", PA_VERSION_STRING,
            pa_kernel_name());

    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        free(buf);
        return NULL;
    }
    if (len)
        *len = size;
    return buf;
}
