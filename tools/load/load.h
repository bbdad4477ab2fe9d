/* load.h - posattn-load's private types: the scenario, the per-phase result,
 * the latency histogram, and the functions each file of tools/load provides.
 *
 * A run is a list of phases, one per (scheme, length, concurrency), run one
 * after another so that the server's /metrics deltas belong to one phase.
 * With --model a phase is one (length, concurrency) that sends the chosen
 * layers of a loaded model round-robin, and its result keeps each layer's
 * counts and latency apart.
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
/* Adds the counts of src to dst (the two bucket the same way). */
void load_hist_merge(load_hist *dst, const load_hist *src);
/* The value at percentile p (0..100] as the highest value equivalent to its
 * bucket (HdrHistogram's convention), clamped to the exact max; 0 if empty. */
uint64_t load_hist_percentile(const load_hist *h, double p);

/* ---------------------------------------------------------------- model */

#define LOAD_MAX_REQUIRES 8
#define LOAD_MAX_RANK 4
#define LOAD_MAX_RANGES 32

/* A tensor a model's layer needs in every item: its field path ("sinks",
 * "q_norm.weight", "scheme.table") and shape, as GET /v1/models lists it. */
typedef struct {
    char field[64];
    int shape[LOAD_MAX_RANK];
    int rank;
} load_require;

/* One layer of a loaded model, as its run in GET /v1/models describes it. */
typedef struct {
    int layer;          /* index in its stack */
    char stack[16];     /* "encoder" or "decoder" when the run names one, else "" */
    char attention[32]; /* the server's word: "sliding_attention", "full_attention", ... */
    int window, chunk;  /* > 0: the derived window or chunk_size */
    char scheme[24];    /* the derived scheme's type */
    int heads, kv_heads, head_dim;
    int causal;     /* the config's default (decoders causal) */
    int layer_mode; /* learned/sinusoidal positions: x and projections, not q/k/v */
    int d_model;    /* layer mode's x width */
    load_require req[LOAD_MAX_REQUIRES];
    int n_req;
    char kind[48];  /* "sliding 4096", "full", "chunked 8192" */
    char label[80]; /* "layer 0 sliding 4096", "decoder 1 full" */
} load_layer;

/* The chosen layers of the --model the target has loaded. */
typedef struct {
    char name[64], model_type[64];
    int num_layers; /* of the model (its first stack), not only the chosen ones */
    load_layer *layers;
    int n_layers;
} load_model;

/* ------------------------------------------------------------- roofline */
/* The target's ceilings, from GET /v1/schemes' "machine" (roofline.c). */
typedef struct {
    int probed; /* 0: --no-probe, an older server, or not asked */
    int threads;
    double gflops_1, gflops_n, gbps_1, gbps_n;
} load_machine;
/* A phase's work as the answers' Server-Timing "roofline" entries say it
 * (the items' timing summed per request): successful requests only. */
typedef struct {
    long n;           /* requests that carried the entry */
    double flops, bytes, compute_s; /* summed; compute: the request's compute wall time */
    long n_fraction;  /* of them, with a fraction of peak (the server probed) */
    double fraction_sum;
    long compute_bound;
} load_roofline;
/* One answer's Server-Timing entries (header line by line). */
typedef struct {
    int seen;
    double flops, bytes, compute_ms, fraction;
    int has_fraction, compute_bound;
} load_roof_sample;

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
    int packed;         /* > 1: every item packs this many sequences (cu_seqlens) */
    int differential;   /* every item carries "differential"; --heads: q's 2H heads */
    int diff_halves;    /* its pairs "halves" (DiffLlama); 0: "interleaved" (unilm) */
    double diff_lambda; /* its "lambda" (default 0.5) */
    int diff_depth;     /* its "depth", the layer lambda_init comes from (default 1) */
    int mla_rope_dim;   /* > 0: every item carries "mla" with this D_rope (--mla); --head-dim
                           is D_nope + D_rope, v [L, H, D_nope] */
    int mla_rank;       /* > 0: the absorbed form, c_kv [L, R] with this R (--mla-absorbed) */
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
    /* --model NAME [--layer L | --layers all|LIST] [--stack S] */
    const char *model_name; /* NULL: the schemes as flags set them */
    int layer_lo[LOAD_MAX_RANGES], layer_hi[LOAD_MAX_RANGES];
    int n_layer_ranges;      /* 0: every layer */
    const char *stack;       /* NULL: every stack */
    const load_model *model; /* set once GET /v1/models has answered */
    /* --sessions N --prompt L0 --steps T [--eviction window:W:S[:reposition]]
     * [--fork-share F] (sessions.c) */
    int sessions;       /* > 0: the sessions mode, N concurrent sequences */
    int sess_prompt;    /* L0, tokens prefilled */
    int sess_steps;     /* T, decode steps per sequence */
    int sess_window;    /* > 0: eviction window of W tokens */
    int sess_sinks;     /* S, its sinks */
    int sess_reposition;
    double fork_share;  /* 0..1: the fraction of sequences that fork a shared prefix */
    int sess_prefill_conc; /* > 0: at most this many sequences in the prefill stage at once */
    double sess_decode_s;  /* > 0: no step is sent past this many seconds of decode */
    load_machine machine;  /* the target's ceilings (load_machine_fetch) */
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

/* One layer's share of a --model phase. */
typedef struct {
    long sent, ok, errors;
    load_status_count status[LOAD_MAX_STATUS];
    int n_status;
    load_hist hist;    /* latency of successful requests */
    size_t body_bytes; /* size of one request body for this layer */
} load_layer_result;

typedef struct {
    const char *scheme; /* with --model, the model's name */
    int length, concurrency;
    double elapsed_s;
    long sent, ok, errors;
    load_status_count status[LOAD_MAX_STATUS];
    int n_status;
    load_hist hist;    /* latency of successful requests */
    size_t body_bytes; /* size of one request body */
    double bytes_sent, bytes_received;
    load_server_split server;
    load_layer_result *layers; /* with --model: c->model->n_layers of them, else NULL */
    int n_layers;
    load_roofline roof;
} load_result;

/* args.c: the command line. load_args_parse fills c (its defaults set by
 * the caller) from argv, --preset's first: 0, 1 for --help, or 2 on a
 * usage error (message on stderr); *url_given says whether --url was. The
 * schemes it strdup's into c->schemes are the caller's to free.
 * load_args_usage writes the help to f. load_args_check_url, once c->url
 * is final: 0, or 2 (message on stderr) unless it is an http or https URL
 * on a loopback host (any host with --allow-remote). */
int load_args_parse(load_config *c, int argc, char **argv, int *url_given);
void load_args_usage(FILE *f);
int load_args_check_url(const load_config *c);

/* payload.c: one request body for a phase; NULL with a message in err on
 * error (unknown scheme). The caller frees the result. variant selects the
 * seeded inputs. */
char *load_payload_build(const load_config *c, const char *scheme, int length, unsigned variant,
                         size_t *len, char *err, size_t errlen);
/* Whether the scheme name is one the payload builder knows. */
int load_scheme_known(const char *scheme, char *err, size_t errlen);
/* The same for one layer of c->model: "model", "layer" (and "stack"), q/k/v
 * (or layer mode's x and projections) at the layer's shape, and a seeded
 * tensor for each field the layer requires. */
char *load_payload_build_layer(const load_config *c, const load_layer *ly, int length,
                               unsigned variant, size_t *len, char *err, size_t errlen);

/* payload.c, sessions: POST /v1/sessions's body for scheme (--kv-heads,
 * --head-dim, max_tokens L0 + T or the --eviction window), and the end of a
 * /v1/attention body over a session from the session id's closing quote
 * on: causal, q [n, H, D] and an append of n tokens, k and v [n, Hkv, D]
 * (seeded by variant). The caller frees both. NULL on no memory. */
char *load_payload_session_create(const load_config *c, const char *scheme, size_t *len);
char *load_payload_session_tail(const load_config *c, const char *scheme, int n, unsigned variant,
                                size_t *len);

/* sessions.c: --sessions mode. load_sessions_flag takes one of its flags
 * (1), is not one of them (0), or a bad value (-1, message in err).
 * load_sessions_check, after parsing: 0, or -1 with a message for what the
 * mode cannot go with; drops (with a note) the schemes a session refuses.
 * load_sessions_run runs a phase per scheme against c->url and writes the
 * reports: 0 when every request succeeded, 3 when some failed (counted in
 * the report), 1 when the run could not go on. */
int load_sessions_flag(load_config *c, const char *name, const char *val, char *err,
                       size_t errlen);
int load_sessions_check(load_config *c, char *err, size_t errlen);
int load_sessions_run(const load_config *c);
extern const char load_sessions_usage[];

/* differential.c: whether differential attention takes the scheme (none,
 * rope and its scalings, xpos and rope2d apply to every head alike; the
 * others carry per-head parameters or need layer mode, and the server
 * refuses them). */
int load_scheme_differential(const char *scheme);
/* --differential against the other flags: 0, or -1 with a message in err
 * for what the server would refuse (odd heads, --packed, ...). Drops the
 * schemes it does not take from c->schemes (freeing them), with a note on
 * stderr each; none left is an error. */
int load_differential_check(load_config *c, char *err, size_t errlen);

/* mla.c: whether MLA takes the scheme (none, and rope with any scaling but
 * mrope: the server refuses the rest with mla). */
int load_scheme_mla(const char *scheme);
/* --mla (or --mla-absorbed) against the other flags: 0, or -1 with a
 * message in err for what the server would refuse (odd or too wide D_rope,
 * --kv-heads, --packed, ...) and for --mla-absorbed without --mla. Drops the schemes MLA does not take, as load_differential_check. */
int load_mla_check(load_config *c, char *err, size_t errlen);

/* model.c: GET /v1/models, the model c->model_name and the layers that
 * --layer/--layers/--stack choose, into out (freed by load_model_free).
 * 0 on success; 2 when the model or a layer is not there (a message that
 * lists what is); 1 when the target did not answer. */
int load_model_fetch(const load_config *c, load_model *out);
void load_model_free(load_model *m);

/* runner.c */
int load_run_phase(const load_config *c, const char *scheme, int length, int concurrency,
                   load_result *r);
/* Reads /metrics; the split for the compute series labelled label (NULL:
 * the sum of every compute series). Returns 0 on success. */
int load_metrics_read(const load_config *c, const char *label, load_server_split *out);

/* http.c: GET c->url + path (with --api-key's header if auth): the
 * answer's text (malloc'd, NUL-terminated) and its HTTP status in *code;
 * NULL when the request failed. */
char *load_http_get(const load_config *c, const char *path, int auth, long *code);

/* spawn.c: starts posattnd on a free loopback port; writes its base URL. */
int load_spawn_start(const load_config *c, char *url, size_t urllen);
/* SIGTERM, wait for the drain; returns the exit status or -1. */
int load_spawn_stop(void);

/* roofline.c: GET /v1/schemes' machine into c->machine (left 0 when the
 * target has none); a Server-Timing header line into *s (others ignored);
 * a successful answer's sample added to a phase; and the reports' parts:
 * a phase's achieved GFLOP/s, arithmetic intensity and mean fraction of
 * peak, its JSON object, and the HTML roofline chart (log axes, a point per
 * phase, the two ceilings as lines; nothing when no phase has work). */
void load_machine_fetch(load_config *c);
void load_roofline_header(const char *line, size_t n, load_roof_sample *s);
void load_roofline_add(load_roofline *r, const load_roof_sample *s);
double load_roofline_gflops(const load_roofline *r);
double load_roofline_intensity(const load_roofline *r);
double load_roofline_fraction(const load_roofline *r); /* -1: none */
const char *load_roofline_bound(const load_roofline *r);
void load_roofline_json(void *obj, const load_roofline *r); /* obj: the phase's cJSON object */
void load_roofline_svg(FILE *f, const load_config *c, const load_result *r, int n);
/* report.c */
void load_report_table(FILE *f, const load_config *c, const load_result *r, int n);
int load_report_json(const char *path, const load_config *c, const load_result *r, int n);
int load_report_csv(const char *path, const load_config *c, const load_result *r, int n);
int load_report_html(const char *path, const load_config *c, const load_result *r, int n);
/* One standalone SVG image: latency percentiles per phase (grouped bars;
 * with --model per layer of each phase), then throughput against
 * concurrency when the scenario has several concurrencies, else throughput
 * per phase. */
int load_report_svg(const char *path, const load_config *c, const load_result *r, int n);
/* s with <, >, & and " escaped, for HTML and SVG. */
void load_html_escape(FILE *f, const char *s);
/* The percentiles every report gives (report_fmt.c), and two units. */
#define LOAD_N_PCTS 4
extern const double load_pcts[LOAD_N_PCTS];
extern const char *const load_pct_names[LOAD_N_PCTS];
double load_ms(uint64_t us);              /* microseconds as milliseconds */
double load_rate(double n, double s);     /* n per s; 0 when s is 0 */

/* report_layers.c: the per-layer parts of the reports with --model. */
struct cJSON;
/* One row per (phase, layer), shaped as phases so that the charts take them:
 * scheme is the layer's label ("0 sliding 4096": without "layer "), elapsed
 * the phase's, no server split. The
 * caller frees the array; NULL when r has no layers or on no memory. */
load_result *load_layer_rows(const load_config *c, const load_result *r, int n, int *n_rows);
void load_report_layers_table(FILE *f, const load_config *c, const load_result *r, int n);
/* The model in the JSON config, and a phase's "layers" and "by_attention". */
void load_report_layers_config_json(struct cJSON *cfg, const load_config *c);
void load_report_layers_json(struct cJSON *o, const load_config *c, const load_result *x);
/* The CSV with --model: a header and one row per (phase, layer). */
void load_report_layers_csv(FILE *f, const load_config *c, const load_result *r, int n);
void load_report_layers_html(FILE *f, const load_config *c, const load_result *r, int n);

double load_now_s(void);

/* Set by SIGINT: phases stop starting requests and the run reports what it has. */
extern volatile sig_atomic_t load_interrupted;

/* http.c: the TLS settings of c (--cacert) on a curl handle. */
void load_curl_tls(void *curl, const load_config *c);

#endif
