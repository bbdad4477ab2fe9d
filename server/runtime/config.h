/* config.h - posattnd's configuration: command-line flags, each with a
 * POSATTN_* environment equivalent (a flag wins over the environment).
 */
#ifndef SRV_CONFIG_H
#define SRV_CONFIG_H

#include "api/api.h"
#include "model/model.h"
#include "store/tensor_spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum srv_log_format { SRV_LOG_JSON = 0, SRV_LOG_TEXT, SRV_LOG_OFF } srv_log_format;

/* --cors-origin: how many origins, and the longest one. */
#define SRV_MAX_CORS_ORIGINS 16
#define SRV_CORS_ORIGIN_MAX 256

typedef struct srv_config {
    char host[256];         /* --host, POSATTN_HOST; default 127.0.0.1 */
    int port;               /* --port, POSATTN_PORT; default 8080; 0 = any free port */
    int workers;            /* --workers, POSATTN_WORKERS; default: usable cores (online,
                             * affinity, cgroup CPU quota) */
    int queue_depth;        /* --queue-depth, POSATTN_QUEUE_DEPTH; default 64 tasks waiting */
    size_t max_body_bytes;  /* --max-body-mb, POSATTN_MAX_BODY_MB; default 64 MB */
    size_t max_batch_items; /* --max-batch-items, POSATTN_MAX_BATCH_ITEMS; default 64 */
    size_t
        max_tensor_elements;   /* --max-tensor-elements, POSATTN_MAX_TENSOR_ELEMENTS; default 16M */
    size_t max_request_memory; /* --max-request-mb, POSATTN_MAX_REQUEST_MB; default 1024 MB */
    size_t max_request_gflop;  /* --max-request-gflop, POSATTN_MAX_REQUEST_GFLOP; default 2000:
                                * a request's estimated compute (api_job_check_cost) */
    double request_timeout;    /* --request-timeout (s), POSATTN_REQUEST_TIMEOUT; default 30:
                                * bounds the headers, the body and the compute each */
    double drain_timeout;      /* --drain-timeout (s), POSATTN_DRAIN_TIMEOUT; default 20 */
    char api_key[256];         /* --api-key, POSATTN_API_KEY (development); empty = none */
    char api_key_file[4096];   /* --api-key-file, POSATTN_API_KEY_FILE: keys, one per line */
    char tls_cert[4096];       /* --tls-cert, POSATTN_TLS_CERT: PEM chain; with tls_key, HTTPS */
    char tls_key[4096];        /* --tls-key, POSATTN_TLS_KEY: its PEM private key */
    srv_log_format log_format; /* --log-format json|text|off, POSATTN_LOG_FORMAT; default json */
    /* --cors-origin ORIGIN (repeatable), POSATTN_CORS_ORIGINS (entries
     * separated by ';', ',' or blanks); any --cors-origin replaces the
     * variable's list. Each is "*" or SCHEME://HOST[:PORT] (http or https,
     * no path), as a browser sends Origin; "*" only without an API key
     * (api_key and api_key_file empty). None: no CORS headers at all
     * (http/cors.h). */
    char cors_origins[SRV_MAX_CORS_ORIGINS][SRV_CORS_ORIGIN_MAX];
    size_t n_cors_origins;
    int blas_threads; /* --blas-threads, POSATTN_BLAS_THREADS; default 1 per worker */
    /* Sessions (store/kv_cache.h, docs/sessions.md). */
    size_t cache_bytes;     /* --cache-mb, POSATTN_CACHE_MB; default a quarter of memory (the
                             * smaller of physical RAM and a cgroup v2 memory.max), at least
                             * 64 MB and at most 4096 MB (srv_config_default_cache_bytes) */
    int cache_block_tokens; /* --cache-block-tokens, POSATTN_CACHE_BLOCK_TOKENS; default 16: a
                             * positive multiple of 16 */
    double session_ttl;     /* --session-ttl (s), POSATTN_SESSION_TTL; default 600; 0 = never */
    char cache_dir[4096];   /* --cache-dir, POSATTN_CACHE_DIR: sessions saved on drain and loaded
                             * at start (store/kv_snapshot.h); empty = none. An existing,
                             * writable directory (checked when parsed) */
    int cache_snapshot_s;   /* --cache-snapshot-s, POSATTN_CACHE_SNAPSHOT_S; default 0: save
                             * only on drain; N > 0: every N seconds too (needs cache_dir) */
    bool no_probe;          /* --no-probe, POSATTN_NO_PROBE=1: skip the start-up probe of the
                             * machine's ceilings (runtime/probe.h) */
    int cache_shared;       /* --cache-shared, POSATTN_CACHE_SHARED; default 0. 1: replicas
                             * share cache_dir, each in its folder cache_dir/replica_id
                             * (store/kv_snapshot.h); needs cache_dir */
    char cache_root[4096];  /* with cache_shared, set by main.c: the shared folder, while
                             * cache_dir becomes this replica's own. Not a flag. */
    char replica_id[64];    /* --replica-id, POSATTN_REPLICA_ID; default the hostname: named
                             * by SESSION_NOT_FOUND messages and the X-Posattn-Replica header */
    /* --tensor NAME=PATH[:TENSOR] (repeatable), POSATTN_TENSORS (entries
     * separated by ';' or newlines); any --tensor replaces the variable's
     * list. Names are unique. Loaded by main.c before listening. */
    srv_tensor_spec tensors[SRV_MAX_TENSOR_SPECS];
    size_t n_tensors;
    /* The loaded store (tensor_store.h), set by main.c after loading and
     * read by the HTTP layer; NULL when no tensor is loaded. Not a flag. */
    const struct srv_tensor_store *tensor_store;
    /* --model NAME=PATH (repeatable), POSATTN_MODELS (entries separated by
     * ';' or newlines); any --model replaces the variable's list. */
    srv_model_spec models[SRV_MAX_MODEL_SPECS];
    size_t n_models;
    /* The loaded models (model/model.h), set by main.c. Not a flag. */
    const struct srv_model_set *model_set;
    /* The sessions' cache (store/kv_cache.h), made by main.c from
     * cache_bytes, cache_block_tokens and session_ttl. Not a flag. */
    struct srv_kv_cache *kv_cache;
    /* The keys of --api-key and --api-key-file (runtime/keys.h), set by
     * main.c before listening; NULL or none: no key is required. */
    struct srv_keyring *keys;
    /* The machine's ceilings (runtime/probe.h), measured by main.c unless
     * no_probe; read by the HTTP layer (srv_limits.machine). Not a flag. */
    const srv_machine *machine;
} srv_config;

/* Defaults, as documented above. */
void srv_config_defaults(srv_config *c);
/* The default of --cache-mb here, in bytes: a quarter of the smaller of
 * physical memory and the cgroup v2 memory limit, rounded down to whole MB,
 * clamped to [64 MB, 4096 MB]. */
size_t srv_config_default_cache_bytes(void);

/* Parses the environment (getenv) then argv into *c (which holds defaults).
 * Returns 0 to run, 1 when --help or --version was printed to out (exit 0),
 * -1 on a bad value, with a message naming the flag (or variable) and the
 * value printed to err (exit 2). */
int srv_config_parse(srv_config *c, int argc, char **argv, FILE *out, FILE *err);

/* Whether dir is an existing directory this process may write into;
 * false with a message naming --cache-dir and the reason printed to err. */
bool srv_config_check_dir(const char *dir, FILE *err, const char *prog);

/* The --help text. */
void srv_config_usage(FILE *out, const char *prog);

#endif
