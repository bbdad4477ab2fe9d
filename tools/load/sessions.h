/* sessions.h - posattn-load's --sessions mode, private to tools/load: one
 * scheme's result (sessions.c runs it) and the reports over the results
 * (sessions_report.c).
 */
#ifndef POSATTN_LOAD_SESSIONS_H
#define POSATTN_LOAD_SESSIONS_H

#include "load.h"

/* Step latency by cache length: bucket b holds the steps whose session kept
 * [2^b, 2^(b+1)) tokens after the step's append (bucket 0: 1 token). */
#define LOAD_SESS_BUCKETS 24

/* GET /v1/sessions's cache totals at one moment. */
typedef struct {
    int valid;
    double sessions, bytes, budget_bytes, blocks_used, blocks_shared;
} load_sess_memory;

/* /metrics counters (deltas over a phase once subtracted). */
typedef struct {
    double evicted_ttl, evicted_pool_full, tokens_appended, tokens_evicted;
} load_sess_counters;

/* Failed requests under one code: "CACHE_FULL", "503", "transport". */
typedef struct {
    char key[32];
    long count;
    char sample[200]; /* the first: "step: message" */
} load_sess_error;

typedef struct {
    const char *scheme;
    int n_fork;                 /* sequences that forked the shared prefix */
    double prefill_s, decode_s; /* wall time of the create/prefill and the decode stages */
    long creates_ok, forks_ok, prefills_ok, prefills_failed, deletes_ok;
    long deletes_gone; /* DELETE answered 404: the server had dropped it (evictions count it) */
    long steps_ok, steps_failed, steps_skipped; /* with steps_cut, sum: sessions x steps */
    long steps_cut; /* not sent: --decode-seconds had passed */
    long n_failed;                              /* every failed request */
    load_sess_error errors[LOAD_MAX_STATUS];
    int n_errors;
    load_hist step_hist, prefill_hist;
    load_hist bucket[LOAD_SESS_BUCKETS];
    load_sess_memory mem_prefill, mem_end,
        mem_after; /* after prefill, after decode, after delete */
    int have_counters;
    load_sess_counters counters;
} load_sess_result;

/* The bucket of a cache of `tokens` tokens (>= 1). */
int load_sess_bucket(long tokens);

void load_sess_report_table(FILE *f, const load_config *c, const load_sess_result *r, int n);
int load_sess_report_json(const char *path, const load_config *c, const load_sess_result *r, int n);
int load_sess_report_html(const char *path, const load_config *c, const load_sess_result *r, int n);

#endif
