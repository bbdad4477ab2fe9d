/* metrics.h - Prometheus metrics of posattnd: latency histograms with queue
 * and compute time measured apart (as Triton does), counters and gauges.
 * Every function is thread-safe (HTTP threads and workers call them).
 *
 * Exposed (text format 0.0.4):
 *   posattn_request_duration_seconds{endpoint}   histogram
 *   posattn_queue_duration_seconds               histogram
 *   posattn_compute_duration_seconds{scheme}     histogram
 *   posattn_session_step_duration_seconds{scheme} histogram: a /v1/attention item
 *                                                that names a session (a decode
 *                                                step), first part's start to last
 *                                                part's end
 *   posattn_requests_total{endpoint,code}        counter
 *   posattn_items_total{scheme}                  counter: tasks computed without error
 *   posattn_item_errors_total{scheme}            counter: tasks that ended in an item error
 *   posattn_request_bytes_total / posattn_response_bytes_total   counters
 *   posattn_queue_depth                          gauge: tasks waiting for a worker
 *   posattn_in_flight                            gauge: requests accepted, not yet answered
 *   posattn_queue_limit                          gauge: --queue-depth
 *   posattn_draining                             gauge: 1 from SIGTERM/SIGINT until exit
 *   posattn_connections_cut_total{phase}         counter: connections shut past
 *                                                --request-timeout (headers, body, send)
 *   posattn_v2_inferences_total{scheme,outcome}  counter: Open Inference Protocol
 *                                                requests by model (its scheme), success or fail;
 *                                                {model,outcome} for a model of --model
 *   posattn_v2_inference_seconds_total{scheme,outcome}   counter: their durations
 *   posattn_v2_phase_seconds_total{scheme,phase} counter: successful ones' queue,
 *                                                compute_input, compute_infer, compute_output
 *   posattn_auth_refused_total{reason}           counter: requests refused 401: no
 *                                                Authorization header (missing), not
 *                                                Bearer (scheme), a key not accepted (key)
 *   posattn_tls_handshake_failures_total{reason} counter: TLS connections closed without a
 *                                                request: failed (the peer or a protocol
 *                                                error), timeout (not done in --request-timeout)
 *   posattn_sessions                             gauge: sessions held (store/kv_cache.h)
 *   posattn_cache_bytes                          gauge: bytes of their blocks
 *   posattn_cache_budget_bytes                   gauge: --cache-mb
 *   posattn_cache_blocks{state}                  gauge: used, shared
 *   posattn_cache_evictions_total{reason}        counter: sessions dropped: ttl, pool_full
 *   posattn_session_tokens_appended_total        counter
 *   posattn_session_tokens_evicted_total         counter: dropped by windows
 *   posattn_machine_gflops{dtype,threads}        gauge: float32 FMA peak measured at start-up
 *                                                (runtime/probe.h), 1 thread and the workers
 *   posattn_machine_read_gbps{threads}           gauge: read bandwidth measured with it
 *   posattn_fraction_of_peak{scheme}             summary (_sum, _count): items' fraction_of_peak
 *   posattn_build_info{version,kernel}           gauge 1
 * The v2 counters are what GET /v2/models/.../stats reports (v2/v2.h).
 */
#ifndef SRV_METRICS_H
#define SRV_METRICS_H

#include "api/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_metrics srv_metrics;

/* Models of --model with counters of their own (srv_metrics_add_model). */
enum { SRV_METRICS_MAX_MODELS = 64, SRV_METRICS_MODEL_NAME_MAX = 64 };

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* endpoint: one of "attention", "encode", "analyze", "schemes", "tensors",
 * "models", "models_resolve", "healthz", "readyz", "metrics", "openapi", "page", "v2_infer", "v2_metadata",
 * "v2_health", "v2_stats", "other" (anything else
 * counts as "other"); code: the HTTP status. */
void srv_metrics_request(srv_metrics *m, const char *endpoint, int code, double seconds,
                         size_t request_bytes, size_t response_bytes);
void srv_metrics_queue(srv_metrics *m, double seconds);
/* One task of scheme (a pa_scheme_type_name() or "analysis") computed
 * without error in seconds; counts one item too. */
void srv_metrics_compute(srv_metrics *m, const char *scheme, double seconds);
/* One task of scheme that ended in an item error (refused when parsed, or
 * failed while computed): counted apart, so that the compute histogram
 * holds successful computations only. */
void srv_metrics_item_error(srv_metrics *m, const char *scheme);
/* One session step (api/api.h's srv_job_session_step) of scheme (a
 * pa_scheme_type_name) that took seconds of wall time. */
void srv_metrics_session_step(srv_metrics *m, const char *scheme, double seconds);
void srv_metrics_queue_depth_add(srv_metrics *m, int64_t delta);
void srv_metrics_in_flight_add(srv_metrics *m, int64_t delta);
/* Gives the model called name (a --model NAME) counters of its own, keyed
 * SRV_MODEL_KEY_PREFIX NAME ("model:gemma2", api/api.h) and labelled
 * model="NAME". Called before serving (not thread-safe with the others).
 * False when name is empty, too long, holds a quote, backslash or newline,
 * is already added, or SRV_METRICS_MAX_MODELS are. */
bool srv_metrics_add_model(srv_metrics *m, const char *name);
/* One v2 inference request of the model keyed key (api/api.h: a
 * pa_scheme_type_name, or "model:NAME" of an added model; anything else is
 * not counted): its outcome, whole duration, and, for a success, its
 * phases (SRV_PHASE_*). */
void srv_metrics_model_infer(srv_metrics *m, const char *key, bool success, double seconds,
                             const double phase_seconds[SRV_PHASE_COUNT]);
/* The counters of the model keyed key (zeros for an unknown one). */
void srv_metrics_model_counts(srv_metrics *m, const char *key, srv_model_counts *out);
/* reason: "failed" or "timeout" (anything else is not counted). */
void srv_metrics_tls_failed(srv_metrics *m, const char *reason);
/* reason: "missing", "scheme" or "key" (anything else is not counted). */
void srv_metrics_auth_refused(srv_metrics *m, const char *reason);
/* phase: "headers", "body" or "send" (anything else is not counted). */
void srv_metrics_connections_cut(srv_metrics *m, const char *phase, size_t n);
/* --queue-depth, shown as posattn_queue_limit (set once at start). */
void srv_metrics_set_queue_limit(srv_metrics *m, int64_t tasks);
/* One attention item's fraction_of_peak (api/roofline.c), by its scheme. */
void srv_metrics_fraction_of_peak(srv_metrics *m, const char *scheme, double fraction);
/* The machine's ceilings (runtime/probe.h) /metrics shows as
 * posattn_machine_gflops and posattn_machine_read_gbps; set once before
 * serving; NULL or not probed: the series are left out. */
void srv_metrics_set_machine(srv_metrics *m, const srv_machine *machine);
/* The sessions' cache whose figures /metrics shows (posattn_sessions,
 * posattn_cache_*); set once before serving; NULL: the series are left
 * out. Each render also drops sessions idle past their ttl. */
void srv_metrics_set_sessions(srv_metrics *m, struct srv_kv_cache *c);
/* The drain has begun: posattn_draining is 1 from now on. */
void srv_metrics_set_draining(srv_metrics *m);
int64_t srv_metrics_queue_depth(const srv_metrics *m);
int64_t srv_metrics_in_flight(const srv_metrics *m);

/* The exposition text, malloc'd (caller frees); NULL on allocation failure. */
char *srv_metrics_render(srv_metrics *m, size_t *len);

#endif
