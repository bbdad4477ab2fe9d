/* main.c - posattnd: configuration, start-up, and the drain on SIGTERM.
 *
 * Signals are blocked in every thread and taken by sigwait here, so the drain
 * runs as ordinary code: stop taking new work (readyz 503, API 503), wait for
 * every accepted request to be answered, then stop.
 */
#include "runtime/config.h"
#include "runtime/keys.h"
#include "http/http.h"
#include "runtime/metrics.h"
#include "store/kv_cache.h"
#include "runtime/pool.h"
#include "runtime/probe.h"
#include "runtime/log.h"
#include "runtime/snapshot.h"
#include "api/api.h"
#include "store/kv_snapshot.h"
#include "model/model.h"
#include "store/tensor_store.h"
#include "v2/v2.h"

#include "posattn.h"

#include <cblas.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* SIGTERM, SIGINT and SIGHUP reach the main thread through a pipe. The
 * threads posattnd starts block them, but OpenBLAS starts its own threads
 * before main runs, with nothing blocked: a signal the kernel hands to one
 * of those would take its default action (the whole process dies, requests
 * in flight lost) unless a handler is installed. The handler runs on
 * whichever thread takes the signal and only writes its number here. */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    const int saved = errno;
    const unsigned char b = (unsigned char)sig;
    if (write(signal_pipe[1], &b, 1) < 0) {
        /* full pipe: a signal is already waiting to be read */
    }
    errno = saved;
}

/* The next signal from the pipe, or 0 when none came within timeout_ms. */
static int next_signal(int timeout_ms)
{
    unsigned char b;
    for (;;) {
        struct pollfd p = {signal_pipe[0], POLLIN, 0};
        int r = poll(&p, 1, timeout_ms);
        if (r == 0)
            return 0;
        if (r < 0 && errno == EINTR)
            continue;
        ssize_t n = r > 0 ? read(signal_pipe[0], &b, 1) : -1;
        if (n == 1)
            return b;
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            return SIGTERM; /* the pipe failed: stop as if told to */
    }
}

/* What identifies a version of the key file: a write in place changes its
 * mtime or size, a rename over it its inode. */
typedef struct file_stamp {
    bool ok;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_stamp;

static file_stamp stamp_of(const char *path)
{
    struct stat st;
    file_stamp s = {false, 0, 0, 0, {0, 0}};
    if (path[0] != '\0' && stat(path, &st) == 0)
        s = (file_stamp){true, st.st_dev, st.st_ino, st.st_size, st.st_mtim};
    return s;
}

static bool stamp_equal(const file_stamp *a, const file_stamp *b)
{
    return a->ok == b->ok && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* srv_keys_load, its warning (a key file others can read) logged as an
 * event line rather than written to stderr as text. */
static bool load_keys(const srv_config *cfg, srv_keys *keys, char *msg, size_t cap)
{
    char *warn = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&warn, &len);
    bool ok = srv_keys_load(keys, cfg->api_key, cfg->api_key_file, f, msg, cap);
    if (f != NULL)
        fclose(f);
    for (char *line = warn, *end; line != NULL && *line != '\0'; line = end) {
        end = strchr(line, '\n');
        if (end != NULL)
            *end++ = '\0';
        if (strncmp(line, "posattnd: ", 10) == 0)
            line += 10;
        if (*line != '\0')
            srv_log_event(cfg->log_format, "warn", "api_keys", "%s", line);
    }
    free(warn);
    return ok;
}

/* Reads the keys again (SIGHUP, or the file changed) and puts them in force
 * at once; a file that does not load keeps the old set, and says why. */
static void reload_keys(const srv_config *cfg, srv_keyring *ring, const char *why)
{
    static srv_keys keys; /* main thread only */
    char msg[1024];
    if (!load_keys(cfg, &keys, msg, sizeof msg)) {
        srv_log_event(cfg->log_format, "error", "api_keys",
                      "%s, but the API keys did not load; the old ones stay: %s", why, msg);
        return;
    }
    if (!srv_keyring_swap(ring, &keys)) {
        srv_log_event(cfg->log_format, "error", "api_keys",
                      "%s, but out of memory; the old API keys stay", why);
        return;
    }
    srv_log_event(cfg->log_format, "info", "api_keys", "%s: %zu API key%s now accepted", why,
                  keys.n, keys.n == 1 ? "" : "s");
}

static bool signals_install(void)
{
    struct sigaction sa;
    if (pipe(signal_pipe) != 0)
        return false;
    for (int i = 0; i < 2; i++)
        (void)fcntl(signal_pipe[i], F_SETFD, FD_CLOEXEC);
    (void)fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a read of the pipe interrupted by the signal returns
     * (EINTR) and is read again. ThreadSanitizer runs handlers only when an
     * intercepted call returns, so a restarted read would never see one. */
    sa.sa_flags = 0;
    return sigaction(SIGTERM, &sa, NULL) == 0 && sigaction(SIGINT, &sa, NULL) == 0 &&
           sigaction(SIGHUP, &sa, NULL) == 0;
}

/* A session file --cache-dir holds that did not load: one line naming the
 * file and why; the file stays where it is. */
typedef struct load_log {
    const srv_config *cfg;
    const srv_limits *lim;
} load_log;

static void session_skipped(void *arg, const char *path, const char *why)
{
    const load_log *l = arg;
    srv_log_event(l->cfg->log_format, "warn", "session_skipped", "session file %s skipped: %s",
                  path, why);
}

static bool scheme_of_json(void *arg, const char *json, srv_kv_spec *spec, char *err, size_t cap)
{
    const load_log *l = arg;
    return srv_api_session_scheme((void *)l->lim, json, spec, err, cap);
}

/* The last save, at drain: stops the periodic saves, then writes every
 * session to --cache-dir (and removes the files of deleted ones). */
static void save_sessions(const srv_config *cfg, srv_kv_cache *sessions, srv_snapshotter *snap)
{
    char msg[512] = "";
    size_t failed = 0, n;
    srv_snapshotter_stop(snap);
    if (cfg->cache_dir[0] == '\0' || sessions == NULL)
        return;
    n = srv_kv_save_all(sessions, cfg->cache_dir, &failed, msg, sizeof msg);
    if (failed > 0)
        srv_log_event(cfg->log_format, "error", "session_save",
                      "%zu session%s saved to %s, %zu not: %s", n, n == 1 ? "" : "s",
                      cfg->cache_dir, failed, msg);
    else
        srv_log_event(cfg->log_format, "info", "session_save", "%zu session%s saved to %s", n,
                      n == 1 ? "" : "s", cfg->cache_dir);
}

static double seconds_since(uint64_t t0)
{
    return (double)(srv_now_ns() - t0) / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    srv_config cfg;
    sigset_t sigs;
    srv_metrics *metrics;
    /* Read by every thread once the server serves; written before. */
    static srv_machine machine;
    srv_pool *pool;
    srv_http *http;
    srv_tensor_store *tensors = NULL;
    srv_model_set *models = NULL;
    srv_kv_cache *sessions = NULL;
    srv_snapshotter *snapshotter = NULL;
    char msg[1024];
    int port = 0, sig = 0, rc;
    uint64_t t0;

#if defined(__GLIBC__)
    /* A large request allocates tens of MB (its body, decoded tensors,
     * outputs). glibc maps each such block fresh and unmaps it on free
     * unless its adaptive threshold has risen past it, which with several
     * threads allocating may never settle: every large request then
     * faults in and zeroes some 8000 fresh pages (about 10 ms here).
     * Blocks up to 32 MB come from the heap instead, and up to 64 MB of
     * free space at a heap's top is kept for the next request. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
    srv_config_defaults(&cfg);
    rc = srv_config_parse(&cfg, argc, argv, stdout, stderr);
    if (rc != 0)
        return rc > 0 ? 0 : 2;

    /* The API keys: a bad key file stops start-up; the keys never reach a
     * log, only how many there are. */
    static srv_keys keys;
    if (!load_keys(&cfg, &keys, msg, sizeof msg)) {
        srv_log_event(cfg.log_format, "error", "start", "cannot load the API keys: %s", msg);
        return 1;
    }
    file_stamp key_file = stamp_of(cfg.api_key_file);
    srv_keyring *keyring = NULL;
    if (keys.n > 0)
        srv_log_event(cfg.log_format, "info", "api_keys", "%zu API key%s accepted on /v1 and /v2%s",
                      keys.n, keys.n == 1 ? "" : "s",
                      cfg.api_key[0] ? " (one from --api-key)" : "");

    /* Named tensors before anything starts: a bad file stops start-up. */
    if (!srv_tensor_store_load(cfg.tensors, cfg.n_tensors, &tensors, msg, sizeof msg)) {
        srv_log_event(cfg.log_format, "error", "start", "cannot load tensors: %s", msg);
        return 1;
    }
    cfg.tensor_store = tensors;
    for (size_t i = 0; i < srv_tensor_store_count(tensors); i++) {
        const srv_named_tensor *t = srv_tensor_store_at(tensors, i);
        srv_log_event(cfg.log_format, "info", "tensor", "tensor %s: %s%s%s %s, %zu values%s",
                      t->name, t->file, t->tensor[0] ? ":" : "", t->tensor,
                      srv_dtype_name(t->dtype), t->count,
                      t->mapped           ? " (mapped)"
                      : t->data16 != NULL ? " (converted; read in 16 bits as k and v)"
                                          : " (converted)");
    }
    /* Models: a config posattn cannot read stops start-up, as a tensor. */
    if (!srv_model_set_load(cfg.models, cfg.n_models, &models, msg, sizeof msg)) {
        srv_log_event(cfg.log_format, "error", "start", "cannot load models: %s", msg);
        srv_tensor_store_free(tensors);
        return 1;
    }
    /* Each is a KServe v2 model of its name too: one that would be a
     * scheme's model, or that a route takes, stops start-up. */
    if (!srv_v2_check_models(models, msg, sizeof msg)) {
        srv_log_event(cfg.log_format, "error", "start", "cannot load models: %s", msg);
        srv_tensor_store_free(tensors);
        srv_model_set_free(models);
        return 1;
    }
    cfg.model_set = models;
    for (size_t i = 0; i < srv_model_set_count(models); i++) {
        const srv_model *m = srv_model_set_at(models, i);
        srv_log_event(cfg.log_format, "info", "model", "model %s: %s, %d layers%s%s", m->name,
                      m->model_type, (int)m->n_layers, m->encoder_decoder ? " + a decoder" : "",
                      m->n_vision > 0 ? " + a vision tower" : "");
    }

    /* Before any thread of ours exists, so that all of them inherit the
     * mask; the handler covers the threads that OpenBLAS started earlier. */
    signal(SIGPIPE, SIG_IGN);
    if (!signals_install()) {
        srv_log_event(cfg.log_format, "error", "start", "cannot install the signal handlers");
        srv_tensor_store_free(tensors);
        srv_model_set_free(models);
        return 1;
    }
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    /* Parallelism comes from the workers; OpenBLAS threads inside each
     * worker would oversubscribe the cores. */
    openblas_set_num_threads(cfg.blas_threads);

    /* The sessions' cache: its budget is a ceiling, not an allocation
     * (blocks are taken as sessions grow). With --cache-dir the sessions
     * saved there come back before the server listens, and are saved
     * again on drain (and every --cache-snapshot-s seconds); without it
     * they die with the process (docs/sessions.md). */
    sessions = srv_kv_cache_new(&(srv_kv_config){.budget_bytes = cfg.cache_bytes,
                                                 .block_tokens = cfg.cache_block_tokens,
                                                 .ttl_s = cfg.session_ttl});
    cfg.kv_cache = sessions;
    if (sessions != NULL && cfg.cache_shared) {
        /* A --cache-dir shared by replicas: this one's files go to its own
         * folder, whose lock it holds until it exits (the fd stays open);
         * another replica's sessions are loaded on first use. */
        char own[sizeof cfg.cache_dir], why[512];
        int lock_fd = -1;
        if (!srv_kv_dir_own(cfg.cache_dir, cfg.replica_id, 5.0, own, sizeof own, &lock_fd, why,
                            sizeof why)) {
            srv_log_event(cfg.log_format, "error", "start", "%s", why);
            srv_kv_cache_free(sessions);
            srv_tensor_store_free(tensors);
            srv_model_set_free(models);
            return 1;
        }
        memcpy(cfg.cache_root, cfg.cache_dir, sizeof cfg.cache_root);
        memcpy(cfg.cache_dir, own, sizeof cfg.cache_dir);
    }
    if (sessions != NULL && cfg.cache_dir[0] != '\0') {
        /* Schemes may name --tensor tensors; nothing else of the limits is
         * read by a scheme's parser. */
        srv_limits lim = {.max_tensor_elements = cfg.max_tensor_elements,
                          .max_request_memory = cfg.max_request_memory,
                          .tensors = tensors,
                          .models = models};
        load_log l = {&cfg, &lim};
        size_t n = srv_kv_load_dir(sessions, cfg.cache_dir, scheme_of_json, &l, session_skipped);
        srv_log_event(cfg.log_format, "info", "session_load", "%zu session%s loaded from %s", n,
                      n == 1 ? "" : "s", cfg.cache_dir);
    }
    keyring = sessions ? srv_keyring_new(&keys) : NULL;
    cfg.keys = keyring;
    metrics = keyring ? srv_metrics_new() : NULL;
    srv_metrics_set_queue_limit(metrics, cfg.queue_depth);
    srv_metrics_set_sessions(metrics, sessions);
    /* The --model models' own /v2 counters (each name once). */
    _Static_assert((int)SRV_MAX_MODEL_SPECS <= (int)SRV_METRICS_MAX_MODELS &&
                       (int)SRV_MODEL_NAME_MAX <= (int)SRV_METRICS_MODEL_NAME_MAX,
                   "every --model model has counters");
    for (size_t i = 0; metrics != NULL && i < srv_model_set_count(models); i++)
        srv_metrics_add_model(metrics, srv_model_set_at(models, i)->name);
    /* The machine's ceilings, before the workers and the listener exist, so
     * that nothing of ours competes with the probe (runtime/probe.h). */
    if (cfg.no_probe)
        srv_probe_none(&machine, cfg.workers);
    else
        srv_probe_run(&machine, cfg.workers);
    cfg.machine = &machine;
    srv_metrics_set_machine(metrics, &machine);
    pool = metrics ? srv_pool_start(cfg.workers, cfg.queue_depth) : NULL;
    http = pool ? srv_http_start(&cfg, pool, metrics, &port) : NULL;
    if (http == NULL) {
        srv_log_event(cfg.log_format, "error", "start", "start-up failed");
        srv_pool_stop(pool);
        srv_metrics_free(metrics);
        srv_tensor_store_free(tensors);
        srv_model_set_free(models);
        srv_keyring_free(keyring);
        srv_kv_cache_free(sessions);
        return 1;
    }
    if (cfg.cache_snapshot_s > 0) {
        snapshotter =
            srv_snapshotter_start(sessions, cfg.cache_dir, cfg.cache_snapshot_s, cfg.log_format);
        if (snapshotter == NULL)
            srv_log_event(cfg.log_format, "error", "session_snapshot",
                          "cannot start the snapshot thread: sessions are saved on drain only");
    }
    printf("posattnd %s listening on %s://%s:%d (workers %d, queue depth %d)\n", PA_VERSION_STRING,
           cfg.tls_cert[0] ? "https" : "http", cfg.host, port, cfg.workers, cfg.queue_depth);
    /* Where to go next (the first line stays the one scripts read the port
     * from). A wildcard host is reached through the loopback address. */
    {
        const char *scheme = cfg.tls_cert[0] ? "https" : "http";
        const char *h = strcmp(cfg.host, "0.0.0.0") == 0 ? "127.0.0.1"
                        : strcmp(cfg.host, "::") == 0    ? "[::1]"
                                                         : cfg.host;
        const char *l = strchr(h, ':') != NULL && h[0] != '[' ? "[" : "";
        const char *r = l[0] ? "]" : "";
        printf("  API       %s://%s%s%s:%d/v1/schemes (and /v2, /metrics, /openapi.yaml)\n"
               "  web page  %s://%s%s%s:%d/\n",
               scheme, l, h, r, port, scheme, l, h, r, port);
    }
    if (machine.probed)
        printf("  machine   %s: float32 FMA %.0f GFLOP/s on 1 thread, %.0f on %d (%s); read %.0f "
               "GB/s, %.0f on %d (probe %.0f ms, load average %.2f)\n",
               machine.cpu, machine.gflops_1, machine.gflops_n, machine.threads, machine.width,
               machine.read_gbps_1, machine.read_gbps_n, machine.threads, machine.probe_ms,
               machine.load_1m);
    else
        printf("  machine   %s: not probed (--no-probe): no fraction_of_peak\n", machine.cpu);
    fflush(stdout);

    /* SIGHUP reloads the API key file, as does a change to it (checked
     * every second): keys rotate without a restart. With no key file,
     * SIGHUP (a closed terminal) is logged and ignored: dying at once would
     * lose the requests in flight. SIGTERM and SIGINT drain. */
    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL); /* this thread takes them now */
    for (;;) {
        sig = next_signal(cfg.api_key_file[0] != '\0' ? 1000 : -1);
        if (sig == 0) {
            file_stamp now = stamp_of(cfg.api_key_file);
            if (!stamp_equal(&now, &key_file)) {
                key_file = now;
                reload_keys(&cfg, keyring, "the API key file changed");
            }
            continue;
        }
        if (sig != SIGHUP)
            break;
        if (cfg.api_key_file[0] != '\0') {
            key_file = stamp_of(cfg.api_key_file);
            reload_keys(&cfg, keyring, "SIGHUP received");
            continue;
        }
        srv_log_event(cfg.log_format, "warn", "signal",
                      "SIGHUP received and ignored (no --api-key-file to reload; SIGTERM drains "
                      "and stops)");
    }
    srv_log_event(cfg.log_format, "info", "drain", "%s received, draining (timeout %.0f s)",
                  sig == SIGTERM ? "SIGTERM" : "SIGINT", cfg.drain_timeout);
    /* Refuse new work (503, Connection: close) but keep listening, so
     * /readyz can say 503 to the load balancer, until the accepted jobs are
     * done. Waiting here for every open request would never end under load:
     * a balancer keeps sending requests that are refused, each open for a
     * moment. Then stop accepting connections and let the open requests
     * (bodies still arriving, refusals being sent) finish; answers now close
     * their connections, so this ends. */
    srv_metrics_set_draining(metrics);
    srv_http_drain(http);
    /* Replicas sharing --cache-dir learn that this one's sessions are
     * coming to the folder: until it exits, they answer a session they
     * find nowhere as perhaps this one's (retry), not as unknown. */
    if (cfg.cache_shared)
        srv_kv_dir_draining(cfg.cache_dir);
    t0 = srv_now_ns();
    while (srv_http_in_flight(http) > 0 && seconds_since(t0) < cfg.drain_timeout)
        sleep_ms(5);
    srv_http_quiesce(http);
    while (srv_http_open_requests(http) > 0 && seconds_since(t0) < cfg.drain_timeout)
        sleep_ms(5);
    if (srv_http_open_requests(http) > 0) {
        /* Stopping now would abort on suspended connections: leave the rest
         * to the exit. */
        srv_log_event(cfg.log_format, "error", "drain", "drain timeout with %lld requests open",
                      (long long)srv_http_open_requests(http));
        /* Still save: an append in flight is waited for (the cache's
         * locks), and one that has not started is lost as its request. */
        save_sessions(&cfg, sessions, snapshotter);
        return 1;
    }
    srv_http_stop(http);
    srv_pool_stop(pool);
    /* Every request is answered: the sessions are as they will stay. */
    save_sessions(&cfg, sessions, snapshotter);
    srv_metrics_free(metrics);
    srv_tensor_store_free(tensors);
    srv_model_set_free(models);
    srv_keyring_free(keyring);
    srv_kv_cache_free(sessions);
    srv_log_event(cfg.log_format, "info", "stopped", "stopped");
    return 0;
}
