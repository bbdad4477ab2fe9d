/* load.h - posattn-load's private types: the scenario, the per-phase result,
 * the latency histogram, and the functions each file of tools/load provides.
 *
 * A run is a list of phases, one per (scheme, length, concurrency), run one
 * after another so that the server's /metrics deltas belong to one phase.
 */
#ifndef POSATTN_LOAD_H
#define POSATTN_LOAD_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LOAD_MAX_LIST 32
#define LOAD_MAX_DURATION_S 3600.0
#define LOAD_MAX_REQUESTS 10000000L
#define LOAD_MAX_CONCURRENCY 1024
#define LOAD_MAX_SERVER_ARGS 32

/* ------------------------------------------------------------ histogram */

/* HdrHistogram-style log-linear buckets over microseconds: values below 128
 * are exact, above that each power of two is split into 64 sub-buckets, so a
 * reported value is within 1/64 (~1.6 %, two significant digits) of the
 * truth. Fixed size, no allocation. */
#define HIST_SUB_HALF 64
#define HIST_MAX_SHIFT 40
#define HIST_BUCKETS (2 * HIST_SUB_HALF + HIST_MAX_SHIFT * HIST_SUB_HALF)

typedef struct {
    uint64_t counts[HIST_BUCKETS];
    uint64_t total;
    uint64_t min_us, max_us;
    double sum_us;
} load_hist;

void load_hist_init(load_hist *h);
void load_hist_record(load_hist *h, uint64_t us);
/* The value at percentile p (0..100] as the highest value equivalent to its
 * bucket (HdrHistogram's convention), clamped to the exact max; 0 if empty. */
uint64_t load_hist_percentile(const load_hist *h, double p);

/* ------------------------------------------------------------- scenario */

typedef enum { LOAD_ENC_JSON, LOAD_ENC_B64 } load_encoding;
typedef enum { LOAD_DTYPE_F32, LOAD_DTYPE_F16, LOAD_DTYPE_BF16 } load_dtype;

typedef struct {
    const char *url;   /* base URL, no trailing slash */
    const char *spawn; /* posattnd path or NULL */
    const char *server_args[LOAD_MAX_SERVER_ARGS];
    int n_server_args;
    const char *api_key;
    char *schemes[LOAD_MAX_LIST];
    int n_schemes;
    int lengths[LOAD_MAX_LIST];
    int n_lengths;
    int concurrency[LOAD_MAX_LIST];
    int n_concurrency;
    int heads, kv_heads, head_dim, batch;
    int batch_seq;         /* > 1: every item a batch [B, L, ...] of this many sequences */
    double lengths_spread; /* 0..1: per-sequence key_length drawn from [(1-s)L, L] */
    double duration_s;     /* per phase; 0 = by count */
    long requests;         /* per phase; 0 = by time */
    double warmup_s;       /* per phase, not counted */
    load_encoding encoding;
    load_dtype dtype; /* the tensors' dtype on the wire */
    int causal;
    double softcap;     /* > 0: every item's softcap (Gemma 2) */
    int sinks;          /* every item carries sinks [H] (gpt-oss) */
    int chunk;          /* > 0: every item's chunk_size (Llama 4) */
    char ret[128];      /* --return: the item's "return" list, comma separated; "" = output */
    const char *cacert; /* --cacert: the CA that signed an https server's certificate */
    const char *preset; /* the --preset that set the defaults, or NULL */
    int layer;          /* every scheme in layer mode (x, w_q, w_k, w_v) */
    unsigned long long seed;
    int allow_remote;
    int progress; /* stderr is a terminal */
    const char *json_path, *csv_path, *html_path, *svg_path;
    const char *dump_body_path; /* write one body and exit */
    int quiet;                  /* no terminal table */
} load_config;

/* The server's own split for a phase: deltas of the /metrics _sum/_count. */
typedef struct {
    int valid;
    double queue_sum_s, compute_sum_s;
    double queue_count, compute_count;
    double request_sum_s, request_count; /* endpoint="attention", arrival to answer */
} load_server_split;

#define LOAD_MAX_STATUS 16

typedef struct {
    char key[16]; /* "503", "transport", "item_error" */
    long count;
    char sample[160]; /* first error message seen */
} load_status_count;

typedef struct {
    const char *scheme;
    int length, concurrency;
    double elapsed_s;
    long sent, ok, errors;
    load_status_count status[LOAD_MAX_STATUS];
    int n_status;
    load_hist hist;    /* latency of successful requests */
    size_t body_bytes; /* size of one request body */
    double bytes_sent, bytes_received;
    load_server_split server;
} load_result;

/* payload.c: one request body for a phase; NULL with a message in err on
 * error (unknown scheme). The caller frees the result. variant selects the
 * seeded inputs. */
char *load_payload_build(const load_config *c, const char *scheme, int length, unsigned variant,
                         size_t *len, char *err, size_t errlen);
/* Whether the scheme name is one the payload builder knows. */
int load_scheme_known(const char *scheme, char *err, size_t errlen);

/* runner.c */
int load_run_phase(const load_config *c, const char *scheme, int length, int concurrency,
                   load_result *r);
/* Reads /metrics; the split for the compute series labelled label.
 * Returns 0 on success. */
int load_metrics_read(const load_config *c, const char *label, load_server_split *out);

/* spawn.c: starts posattnd on a free loopback port; writes its base URL. */
int load_spawn_start(const load_config *c, char *url, size_t urllen);
/* SIGTERM, wait for the drain; returns the exit status or -1. */
int load_spawn_stop(void);

/* report.c */
void load_report_table(FILE *f, const load_config *c, const load_result *r, int n);
int load_report_json(const char *path, const load_config *c, const load_result *r, int n);
int load_report_csv(const char *path, const load_config *c, const load_result *r, int n);
int load_report_html(const char *path, const load_config *c, const load_result *r, int n);
/* One standalone SVG image: latency percentiles per phase (grouped bars),
 * then throughput against concurrency when the scenario has several
 * concurrencies, else throughput per phase. */
int load_report_svg(const char *path, const load_config *c, const load_result *r, int n);

double load_now_s(void);

/* Set by SIGINT: phases stop starting requests and the run reports what it has. */
extern volatile sig_atomic_t load_interrupted;

/* The TLS settings of c (--cacert) on a curl handle. */
void load_curl_tls(void *curl, const load_config *c);

#endif
