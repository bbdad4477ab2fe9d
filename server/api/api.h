/* api.h - the JSON API of posattnd, independent of HTTP: what the layers
 * above api/ (http/, v2/, runtime/) see of it.
 *
 * The HTTP layer hands a request body to srv_job_prepare with the endpoint
 * its route names (on an HTTP thread: parse and validate only, no compute),
 * runs each of the job's tasks on the worker pool (srv_job_run_task, one per
 * batch item, concurrently), then renders the answer with srv_job_finish.
 * Endpoints without a body answer at once (srv_endpoint_answer). Every
 * error becomes a srv_reply.
 */
#ifndef SRV_API_H
#define SRV_API_H

#include "common/reply.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An endpoint of the API: one file of api/ each, which defines its record
 * (api/job.h). Routes name them (http/routes.c). */
typedef struct srv_endpoint srv_endpoint;
/* The route's path parameters and query an endpoint may take (below). */
typedef struct srv_endpoint_args srv_endpoint_args;
extern const srv_endpoint srv_ep_attention;      /* POST /v1/attention (api/attention.c) */
extern const srv_endpoint srv_ep_encode;         /* POST /v1/encode (api/encode.c) */
extern const srv_endpoint srv_ep_analyze;        /* POST /v1/analyze (api/analyze.c) */
extern const srv_endpoint srv_ep_schemes;        /* GET /v1/schemes (api/schemes.c) */
extern const srv_endpoint srv_ep_tensors;        /* GET /v1/tensors (api/tensors.c) */
extern const srv_endpoint srv_ep_models;         /* GET /v1/models (api/models.c) */
extern const srv_endpoint srv_ep_models_resolve; /* POST /v1/models/resolve (api/models.c) */
/* Sessions (api/sessions.c; creating and forking, api/session_create.c):
 * POST and GET /v1/sessions, GET and DELETE /v1/sessions/{id}, POST
 * /v1/sessions/{id}/append and .../fork. */
extern const srv_endpoint srv_ep_sessions_create;
extern const srv_endpoint srv_ep_sessions_list;
extern const srv_endpoint srv_ep_session_get;
extern const srv_endpoint srv_ep_session_delete;
extern const srv_endpoint srv_ep_session_append;
extern const srv_endpoint srv_ep_session_fork;

/* The machine's own ceilings, measured once at start-up (runtime/probe.c,
 * unless --no-probe): what each /v1/attention item's fraction_of_peak is a
 * fraction of (api/roofline.c). Read-only once the server serves. */
typedef struct srv_machine {
    bool probed;     /* false: --no-probe, the figures below are 0 */
    int workers;     /* --workers: the threads an item split into parts runs on */
    int threads;     /* the threads the second figures were measured with (workers) */
    double gflops_1; /* float32 FMA GFLOP/s (1e9 multiply-adds x 2 per s), one thread */
    double gflops_n; /* the same, `threads` threads together */
    /* bf16 dot products (vdpbf16ps) GFLOP/s, one thread and `threads`
     * together: 0 where the library's bf16 products are not vdpbf16ps (they
     * run as float32 FMAs there, whose peak is gflops_*) */
    double bf16_gflops_1, bf16_gflops_n;
    double read_gbps_1; /* read bandwidth past the caches, GB/s (1e9 bytes/s), one thread */
    double read_gbps_n; /* the same, `threads` threads together */
    size_t read_bytes;  /* the buffer the bandwidth was read from */
    double probe_ms;    /* how long the probe took */
    double load_1m;     /* the 1-minute load average when it ran (/proc/loadavg; -1 unknown) */
    const char *width;  /* static: "avx512", "avx2" or "scalar": the FMA width measured */
    char cpu[96];       /* /proc/cpuinfo's model name, or "unknown" */
} srv_machine;

/* The fraction of the machine's peak that flops and bytes of work done in
 * us microseconds reach: the larger of flops / (us * peak GFLOP/s) and
 * bytes / (us * read GB/s), with *compute_bound saying which; the peaks of
 * one thread when threads <= 1, else of the workers; with bf16 (work of
 * compute_dtype bf16) the bf16 peak where it was measured, else float32's.
 * False (outputs untouched) without a probe, without time (us == 0) or
 * without work. */
bool srv_roofline_fraction(const srv_machine *m, double flops, double bytes, uint64_t us,
                           int threads, bool bf16, double *fraction, bool *compute_bound);

/* A fraction of the peak as the answers show it, four significant figures
 * (the timing itself is not better), at buf as its shortest text ("0.4125",
 * "1.317e-5"; srv_fmt_float of the rounded value), NUL-terminated; returns
 * the length. buf: SRV_ROOFLINE_TEXT bytes. No printf: the small requests'
 * answers and Server-Timing carry one each. */
#define SRV_ROOFLINE_TEXT 32
int srv_roofline_text(double fraction, char *buf);
/* A count of work (flops, bytes) as text in buf (SRV_ROOFLINE_TEXT bytes):
 * the digits of a whole number below 2^53 (every call's), else printf's
 * %.17g. Returns where the text starts, somewhere in buf. */
const char *srv_roofline_count(double v, char *buf);

/* Whether bf16 work is measured against a bf16 peak of its own on m. */
bool srv_roofline_bf16_peak(const srv_machine *m);

typedef struct srv_limits {
    size_t max_batch_items;     /* items in one /v1/attention batch */
    size_t max_tensor_elements; /* floats in any one tensor */
    size_t max_request_memory;  /* bytes: inputs + outputs + workspaces of a request */
    int parallel_parts;         /* split a large q/k/v item into this many tasks (workers) */
    /* Named tensors loaded at start-up, for {"ref":"NAME"} (store/tensor_store.h);
     * NULL when none are loaded. Read-only, shared by every thread. */
    const struct srv_tensor_store *tensors;
    double max_request_gflop; /* estimated compute of a request (2 x its multiply-adds); 0: none */
    /* Models loaded at start-up (--model, model/model.h), for items'
     * "model": "NAME"; NULL when none is loaded. Read-only, shared. */
    const struct srv_model_set *models;
    /* The sessions' KV cache (store/kv_cache.h), for /v1/sessions; NULL
     * when the server keeps none (the endpoints answer NOT_IMPLEMENTED).
     * Shared by every thread (the cache locks itself). */
    struct srv_kv_cache *sessions;
    /* --cache-dir: where a deleted session's file is removed from
     * (store/kv_snapshot.h); NULL or "" when sessions are not saved. */
    const char *cache_dir;
    /* --replica-id: named by SESSION_NOT_FOUND messages; NULL or "": not named. */
    const char *replica;
    /* The start-up probe's ceilings (runtime/probe.h), for the items'
     * fraction_of_peak and GET /v1/schemes' "machine"; NULL: not known. */
    const srv_machine *machine;
    /* --cache-shared: the folder the replicas share (cache_dir is then this
     * replica's own under it), where a session this replica does not hold
     * is looked for on first use (srv_kv_adopt); NULL or "": not shared. */
    const char *cache_root;
} srv_limits;

/* Rebuilds a saved session's scheme from the JSON its create request sent
 * (store/kv_snapshot.h's srv_kv_scheme_fn; arg a const srv_limits *, for
 * named tensors, or NULL): parses it as POST /v1/sessions does into a
 * malloc'd scheme that spec->scheme_owner owns (freed by spec->scheme_free).
 * False with the reason in err (cap bytes) when it does not parse, or, for
 * a session made from a model (spec->model), when that model is not
 * loaded, lacks spec->layer, or its layer now derives another scheme or
 * other dims. */
struct srv_kv_spec;
bool srv_api_session_scheme(void *arg, const char *scheme_json, struct srv_kv_spec *spec, char *err,
                            size_t cap);

/* A growable per-worker scratch buffer, reused across tasks so that pages
 * are touched once per worker, not once per request. */
typedef struct srv_workspace {
    void *p;
    size_t cap;
} srv_workspace;
/* Returns a buffer of at least n bytes (64-byte aligned), or NULL. */
void *srv_workspace_reserve(srv_workspace *ws, size_t n);
void srv_workspace_free(srv_workspace *ws);

typedef struct srv_job srv_job;

/* Parses and validates body for endpoint ep (one that takes a body: a 404
 * NOT_FOUND otherwise). On success sets *job (free with
 * srv_job_free) and returns true. On failure fills *reply (4xx, or 413 with
 * the figure when the request would need more than lim->max_request_memory)
 * and returns false. */
bool srv_job_prepare(const srv_endpoint *ep, const char *body, size_t len, const srv_limits *lim,
                     srv_job **job, srv_reply *reply);
/* The same for a route that hands the endpoint its path parameters and
 * query (args, which may be NULL; srv_job_prepare passes NULL). An
 * endpoint whose body is optional (POST /v1/sessions/{id}/fork) reads an
 * empty body as {}. */
bool srv_job_prepare_args(const srv_endpoint *ep, const srv_endpoint_args *args, const char *body,
                          size_t len, const srv_limits *lim, srv_job **job, srv_reply *reply);

/* Tasks of a job: for /v1/attention one per batch item, or up to
 * lim->parallel_parts for an item large enough to spread over the workers;
 * one otherwise. */
size_t srv_job_task_count(const srv_job *job);
/* Scheme name of task i ("rope", ...; "none"), for metrics labels. */
const char *srv_job_task_scheme(const srv_job *job, size_t i);
/* Multiply-adds task i computes (an estimate for scheduling; 0 when the
 * endpoint does not estimate it). */
double srv_job_task_macs(const srv_job *job, size_t i);
/* Bytes of workspace task i needs (known before it runs). */
size_t srv_job_task_workspace(const srv_job *job, size_t i);
/* Runs task i on the calling thread. Distinct i may run concurrently. A
 * task that fails records its own error, which srv_job_finish reports. */
void srv_job_run_task(srv_job *job, size_t i, srv_workspace *ws);
/* Whether task i ended in an error (refused when the job was prepared, or
 * failed while it ran): an item error of its answer. For metrics, which
 * time successful tasks only. */
bool srv_job_task_failed(const srv_job *job, size_t i);
/* Timing of task i, reported in the answer and to metrics: its wait, and
 * its run from start_us to end_us (microseconds of one monotonic clock,
 * so that an item's parts give its wall time). */
void srv_job_set_timing(srv_job *job, size_t i, uint64_t queue_us, uint64_t start_us,
                        uint64_t end_us);
/* Task i finds its request's deadline passed before it started: true when
 * it must run all the same, because its item has started to change state
 * that its answer must report (a session's append: api/item_session.c);
 * false when it times out, and then nothing of its item will change.
 * From any thread; asked again, it answers the same. */
bool srv_job_task_keep(srv_job *job, size_t i);
/* Marks task i as not run because its deadline passed: a 504 answer for
 * /v1/encode and /v1/analyze, an item error TIMEOUT in a /v1/attention batch
 * (whose answer stays 200 with "errors":true). */
void srv_job_set_timed_out(srv_job *job, size_t i);
/* The next session step (a /v1/attention item that names a session, #33,
 * and so a KServe v2 sequence step) among tasks [*at, n) that ran and
 * succeeded: its scheme (for metrics labels) and wall time, from its first
 * task's start to its last one's end (srv_job_set_timing), in seconds;
 * *at moves past it. False when there is none. Call once every task is
 * done (api/sessions.c). */
bool srv_job_session_step(const srv_job *job, size_t *at, const char **scheme, double *seconds);
/* The work of a rendered /v1/attention job's items that have a roofline
 * (api/roofline.c): their flops and bytes summed, the threads its peak is
 * of (1 for a job of one task, else the workers) and whether every item
 * computed in bf16 (its peak then the bf16 one), for Server-Timing. False
 * when no item has one (another endpoint, every item failed, or not
 * rendered yet). */
bool srv_job_roofline(const srv_job *job, double *flops, double *bytes, int *threads, bool *bf16);
/* Item k of the rendered job's items that have a fraction of peak: its
 * scheme (static) and fraction; false past the last. For /metrics'
 * posattn_fraction_of_peak summary. */
bool srv_job_roofline_item(const srv_job *job, size_t k, const char **scheme, double *fraction);
/* Renders the answer after every task has run (or timed out). */
void srv_job_finish(srv_job *job, srv_reply *reply);
void srv_job_free(srv_job *job);

/* ------------------------------------------------------------------------- */
/* Wire protocols                                                            */
/* ------------------------------------------------------------------------- */

/* One model's inference counters, as a protocol's statistics report them
 * (the Open Inference Protocol's statistics extension, Triton's
 * extension_statistics.md) and /metrics exposes them: runtime/metrics.c
 * keeps them, the protocol renders them, http/ carries them between. The
 * phases of a successful inference, summed in nanoseconds, by Triton's
 * names: queue (tasks waiting for a worker, the longest of a request's),
 * compute_input (the body parsed into tensors), compute_infer (the
 * computation, first task's start to last one's end), compute_output (the
 * answer rendered). */
typedef enum srv_model_phase {
    SRV_PHASE_QUEUE,
    SRV_PHASE_INPUT,
    SRV_PHASE_INFER,
    SRV_PHASE_OUTPUT,
    SRV_PHASE_COUNT
} srv_model_phase;

/* The key of a model's counters (srv_protocol_ctx.counts, and
 * runtime/metrics.h): a scheme's name (pa_scheme_type_name, the models per
 * scheme, labelled scheme="rope" on /metrics), or SRV_MODEL_KEY_PREFIX and
 * the name of a model loaded with --model ("model:gemma2", labelled
 * model="gemma2"). The prefix keeps the two apart: a --model model may be
 * called "t5". */
#define SRV_MODEL_KEY_PREFIX "model:"

typedef struct srv_model_counts {
    uint64_t success, fail;       /* inference requests answered 200, and otherwise */
    uint64_t success_ns, fail_ns; /* their whole durations, summed */
    uint64_t phase_ns[SRV_PHASE_COUNT];
    uint64_t last_ms; /* the last inference, ms since the epoch; 0 before any */
} srv_model_counts;

/* The {name}, {version} and {id} segments of a route's path ("" when the
 * path has none), cut to fit. */
typedef struct srv_route_params {
    char name[128];
    char version[32];
    char id[80]; /* a session id is at most 64 characters: a longer one, cut, still
                    matches none */
} srv_route_params;

/* What a route hands an endpoint besides its body: the path's parameters
 * (GET /v1/sessions/{id}) and the query string's values (?offset=&limit=).
 * Either may be NULL: none. Valid for the call it is passed to. */
struct srv_endpoint_args {
    const srv_route_params *params;
    /* The value of the query parameter key (percent-decoded), or NULL
     * when the query has no such key or gives it no value. */
    const char *(*query)(void *query_arg, const char *key);
    void *query_arg;
};

/* What a protocol's route sees of the server and the request. */
typedef struct srv_protocol_ctx {
    const srv_limits *lim;
    const srv_route_params *params;
    bool ready; /* the server takes work: not draining, queue not full (/readyz) */
    /* The counters of the models keyed key (NULL: every model's in turn is
     * not offered; ask per key). */
    void (*counts)(void *arg, const char *key, srv_model_counts *out);
    void *counts_arg;
} srv_protocol_ctx;

/* A wire protocol that answers routes of its own (v2/: the Open Inference
 * Protocol, srv_v2_protocol). The HTTP layer's route table names the
 * protocol and the operation (the protocol's own number) of each of its
 * rows, and http/ does the rest through this record without knowing which
 * protocol it is: adding one is a folder that defines its record, and
 * table rows. */
typedef struct srv_protocol {
    const char *name;   /* "v2" */
    const char *prefix; /* every path under it ("/v2", "/v2/...") answers errors
                           in the protocol's shape, a route or not */
    /* A request header whose value is a byte count that frames the body
     * (NULL: none): the body's first that many bytes are one part (a JSON
     * header) and the rest another (binary tensors), which http/ places at
     * a 16-byte aligned address. An answer sets reply->len_header to say
     * the same of itself. */
    const char *framing_header;
    /* Whether the route's path parameters (pc->params) name something the
     * protocol has (called only for rows whose path has a {name}): true, or
     * false with the 404 message in msg[cap], or msg "" for a 404 with no
     * body. */
    bool (*check)(int op, const srv_protocol_ctx *pc, char *msg, size_t cap);
    /* The answer of a route without a body (GET). */
    void (*answer)(int op, const srv_protocol_ctx *pc, srv_reply *reply);
    /* A route with a body (POST): the job, as srv_job_prepare makes one.
     * framing is the framing header's value, -1 when it is absent. The
     * body must outlive the job (binary tensors are read in place). */
    bool (*prepare)(int op, const srv_protocol_ctx *pc, const char *body, size_t len,
                    int64_t framing, srv_job **job, srv_reply *reply);
    /* Rewrites an error reply of the /v1 form into the protocol's own,
     * keeping its status; other replies are left alone. */
    void (*error_shape)(srv_reply *reply);
    /* The model counters a request of the route counts in (a key of
     * srv_protocol_ctx.counts, SRV_MODEL_KEY_PREFIX above), or NULL when it
     * counts in none. The key is a constant or written into buf[cap]. */
    const char *(*model_key)(int op, const srv_protocol_ctx *pc, char *buf, size_t cap);
} srv_protocol;

/* Whether ep takes a request body (POST: srv_job_prepare) or answers at
 * once (GET: srv_endpoint_answer). */
bool srv_endpoint_takes_body(const srv_endpoint *ep);
/* The answer of an endpoint without a body (GET /v1/schemes: every scheme
 * with its parameters, defaults and where position enters; GET /v1/tensors:
 * the loaded named tensors). A 404 NOT_FOUND for an endpoint that takes a
 * body. */
void srv_endpoint_answer(const srv_endpoint *ep, const srv_limits *lim, srv_reply *reply);
/* The same with the route's path parameters and query (args may be NULL):
 * GET /v1/sessions?offset=&limit=, GET and DELETE /v1/sessions/{id}. */
void srv_endpoint_answer_args(const srv_endpoint *ep, const srv_limits *lim,
                              const srv_endpoint_args *args, srv_reply *reply);

#endif
