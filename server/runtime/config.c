/* config.c - see config.h. One table lists every option with its flag, its
 * environment variable, its range and its help line; parsing, validation and
 * --help are all driven from it.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "runtime/config.h"

#include <sched.h>

#include "posattn.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define MB ((size_t)1 << 20)

typedef enum opt_kind {
    OPT_STRING,      /* char[256] */
    OPT_INT,         /* int in [min, max] */
    OPT_SIZE,        /* size_t in [min, max] */
    OPT_SIZE_MB,     /* size_t bytes, given as whole MB in [min, max] */
    OPT_SECONDS,     /* double in (0, max] */
    OPT_SECONDS_OFF, /* double in [0, max]: 0 turns it off */
    OPT_LOG_FORMAT,
    OPT_TENSORS, /* appends to tensors[]; the variable holds a list */
    OPT_MODELS,  /* appends to models[]; the variable holds a list */
    OPT_CORS,    /* appends to cors_origins[]; the variable holds a list */
    OPT_SWITCH,  /* bool: a flag without a value (--no-probe); the variable 1/0, true/false, yes/no */
} opt_kind;

typedef struct opt {
    const char *flag; /* without the leading "--" */
    const char *env;
    opt_kind kind;
    size_t offset;
    double min, max;
    bool secret; /* never echo the value */
    const char *metavar;
    const char *help;
} opt;

#define FIELD(name) offsetof(srv_config, name)

static const opt options[] = {
    {"host", "POSATTN_HOST", OPT_STRING, FIELD(host), 1, 255, false, "ADDR",
     "address to listen on (default 127.0.0.1)"},
    {"port", "POSATTN_PORT", OPT_INT, FIELD(port), 0, 65535, false, "N",
     "TCP port, 0 for any free port (default 8080)"},
    {"workers", "POSATTN_WORKERS", OPT_INT, FIELD(workers), 1, 256, false, "N",
     "compute threads (default: usable cores)"},
    {"queue-depth", "POSATTN_QUEUE_DEPTH", OPT_INT, FIELD(queue_depth), 1, 100000, false, "N",
     "tasks that may wait for a worker before 503 (default 64)"},
    {"max-body-mb", "POSATTN_MAX_BODY_MB", OPT_SIZE_MB, FIELD(max_body_bytes), 1, 1048576, false,
     "MB", "largest request body (default 64)"},
    {"max-batch-items", "POSATTN_MAX_BATCH_ITEMS", OPT_SIZE, FIELD(max_batch_items), 1, 1000000,
     false, "N", "items in one /v1/attention batch (default 64)"},
    {"max-tensor-elements", "POSATTN_MAX_TENSOR_ELEMENTS", OPT_SIZE, FIELD(max_tensor_elements), 1,
     1099511627776.0, false, "N", "floats in any one tensor (default 16777216)"},
    {"max-request-mb", "POSATTN_MAX_REQUEST_MB", OPT_SIZE_MB, FIELD(max_request_memory), 1, 1048576,
     false, "MB", "memory one request may use, workspaces included (default 1024)"},
    {"max-request-gflop", "POSATTN_MAX_REQUEST_GFLOP", OPT_SIZE, FIELD(max_request_gflop), 1, 1e9,
     false, "N",
     "estimated compute one request may ask for, in GFLOP (default 2000: seconds, not minutes)"},
    {"request-timeout", "POSATTN_REQUEST_TIMEOUT", OPT_SECONDS, FIELD(request_timeout), 0, 86400,
     false, "S",
     "seconds for a request's headers, then its body, then its answer (504) (default 30)"},
    {"drain-timeout", "POSATTN_DRAIN_TIMEOUT", OPT_SECONDS, FIELD(drain_timeout), 0, 86400, false,
     "S", "seconds to finish accepted requests on SIGTERM (default 20)"},
    {"api-key", "POSATTN_API_KEY", OPT_STRING, FIELD(api_key), 0, 255, true, "KEY",
     "require \"Authorization: Bearer KEY\" on /v1/* and /v2 (development: ps shows it)"},
    {"api-key-file", "POSATTN_API_KEY_FILE", OPT_STRING, FIELD(api_key_file), 0, 4095, false,
     "FILE", "accept any key of FILE, one per line (# comments; chmod 600)"},
    {"tls-cert", "POSATTN_TLS_CERT", OPT_STRING, FIELD(tls_cert), 0, 4095, false, "FILE",
     "serve HTTPS with this PEM certificate chain (with --tls-key)"},
    {"tls-key", "POSATTN_TLS_KEY", OPT_STRING, FIELD(tls_key), 0, 4095, false, "FILE",
     "the certificate's PEM private key (no passphrase)"},
    {"log-format", "POSATTN_LOG_FORMAT", OPT_LOG_FORMAT, FIELD(log_format), 0, 0, false, "FMT",
     "access log and events on stderr: json, text or off (default json)"},
    {"cors-origin", "POSATTN_CORS_ORIGINS", OPT_CORS, FIELD(cors_origins), 0, 0, false, "ORIGIN",
     "let web pages of ORIGIN (https://app.example:8443, or * without an API key) call the API "
     "from a browser (repeatable; default: none)"},
    {"blas-threads", "POSATTN_BLAS_THREADS", OPT_INT, FIELD(blas_threads), 1, 256, false, "N",
     "OpenBLAS threads inside each worker (default 1)"},
    {"cache-mb", "POSATTN_CACHE_MB", OPT_SIZE_MB, FIELD(cache_bytes), 1, 1048576, false, "MB",
     "memory for every session's keys and values (default: a quarter of memory, 64 to 4096)"},
    {"cache-block-tokens", "POSATTN_CACHE_BLOCK_TOKENS", OPT_INT, FIELD(cache_block_tokens), 16,
     65536, false, "N", "tokens per block of a session's cache, a multiple of 16 (default 16)"},
    {"session-ttl", "POSATTN_SESSION_TTL", OPT_SECONDS_OFF, FIELD(session_ttl), 0, 31536000, false,
     "S", "seconds an idle session lives, 0 for ever (default 600)"},
    {"cache-dir", "POSATTN_CACHE_DIR", OPT_STRING, FIELD(cache_dir), 0, 4095, false, "DIR",
     "save sessions here on drain and load them at start (default: none, sessions die)"},
    {"cache-snapshot-s", "POSATTN_CACHE_SNAPSHOT_S", OPT_INT, FIELD(cache_snapshot_s), 0, 86400,
     false, "N", "also save sessions every N seconds, 0 only on drain (default 0)"},
    {"cache-shared", "POSATTN_CACHE_SHARED", OPT_INT, FIELD(cache_shared), 0, 1, false, "0|1",
     "1: replicas share --cache-dir, each in DIR/REPLICA-ID (default 0)"},
    {"replica-id", "POSATTN_REPLICA_ID", OPT_STRING, FIELD(replica_id), 1, 63, false, "NAME",
     "this replica's name: X-Posattn-Replica header, errors (default: the hostname)"},
    {"no-probe", "POSATTN_NO_PROBE", OPT_SWITCH, FIELD(no_probe), 0, 0, false, "",
     "skip measuring the machine's ceilings at start-up (no fraction_of_peak)"},
    {"tensor", "POSATTN_TENSORS", OPT_TENSORS, FIELD(tensors), 0, 0, false, "NAME=PATH[:TENSOR]",
     "load a named tensor at start-up (repeatable; see below)"},
    {"model", "POSATTN_MODELS", OPT_MODELS, FIELD(models), 0, 0, false, "NAME=PATH",
     "load a model's attention from its config.json (repeatable; see below)"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

/* The CPUs this process may use: the online cores, narrowed by its affinity
 * mask and by a cgroup v2 CPU quota (a container's --cpus or a Kubernetes
 * CPU limit), rounded up. */
static int usable_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 && CPU_COUNT(&set) < n)
        n = CPU_COUNT(&set);
#endif
    f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f != NULL) {
        char quota[32];
        long period = 0;
        if (fscanf(f, "%31s %ld", quota, &period) == 2 && strcmp(quota, "max") != 0 && period > 0) {
            long q = strtol(quota, NULL, 10);
            long cpus = (q + period - 1) / period;
            if (q > 0 && cpus < n)
                n = cpus;
        }
        fclose(f);
    }
    if (n < 1)
        return 1;
    return n > 256 ? 256 : (int)n;
}

void srv_config_defaults(srv_config *c)
{
    memset(c, 0, sizeof *c);
    strcpy(c->host, "127.0.0.1");
    c->port = 8080;
    c->workers = usable_cores();
    c->queue_depth = 64;
    c->max_body_bytes = 64 * MB;
    c->max_batch_items = 64;
    c->max_tensor_elements = (size_t)16 << 20;
    c->max_request_memory = 1024 * MB;
    c->max_request_gflop = 2000;
    c->request_timeout = 30;
    c->drain_timeout = 20;
    c->api_key[0] = '\0';
    c->log_format = SRV_LOG_JSON;
    c->blas_threads = 1;
    c->cache_bytes = srv_config_default_cache_bytes();
    c->cache_block_tokens = 16;
    c->session_ttl = 600;
    if (gethostname(c->replica_id, sizeof c->replica_id - 1) != 0 || c->replica_id[0] == '\0')
        strcpy(c->replica_id, "posattnd");
    c->replica_id[sizeof c->replica_id - 1] = '\0';
}

size_t srv_config_default_cache_bytes(void)
{
    const size_t lo = 64 * MB, hi = 4096 * MB;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f != NULL) {
        char limit[32];
        if (fscanf(f, "%31s", limit) == 1 && strcmp(limit, "max") != 0) {
            double l = strtod(limit, NULL);
            if (l > 0 && (mem <= 0 || l < mem))
                mem = l;
        }
        fclose(f);
    }
    if (mem <= 0)
        return 1024 * MB; /* unknown: a fixed figure */
    mem /= 4;
    if (mem < (double)lo)
        return lo;
    if (mem > (double)hi)
        return hi;
    return (size_t)(mem / (double)MB) * MB;
}

static const char *prog_name(int argc, char **argv)
{
    if (argc < 1 || !argv[0] || !argv[0][0])
        return "posattnd";
    const char *slash = strrchr(argv[0], '/');
    return slash ? slash + 1 : argv[0];
}

void srv_config_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s [options]\n"
            "\n"
            "posattnd serves positional encodings and attention over HTTP: a JSON API under\n"
            "/v1/, /healthz, /readyz and Prometheus metrics at /metrics.\n"
            "Each option may also come from the environment variable beside it; the\n"
            "command line wins. Options take a value as --name VALUE or --name=VALUE.\n"
            "\n",
            prog ? prog : "posattnd");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", options[i].flag, options[i].metavar[0] ? " " : "",
                 options[i].metavar);
        fprintf(out, "  %-26s %-29s %s\n", left, options[i].env, options[i].help);
    }
    fprintf(out, "  %-26s %-29s %s\n", "-h, --help", "", "print this help and exit");
    fprintf(out, "  %-26s %-29s %s\n", "--version", "", "print the version and exit");
    fprintf(out,
            "\n--tensor NAME=PATH[:TENSOR] loads a tensor from a .safetensors or .npy file\n"
            "before listening (F32 used in place; F16, BF16, F64 converted to float32, and\n"
            "F16, BF16 also read in 16 bits as an attention item's k and v); a bad\n"
            "file stops start-up. TENSOR picks one tensor of a safetensors file (needed when\n"
            "it holds several); PATH:TENSOR splits at the last ':' right after .safetensors or\n"
            ".npy, so paths may hold ':'. NAME is [A-Za-z0-9_.-]+. POSATTN_TENSORS holds\n"
            "entries separated by ';' or newlines; any --tensor replaces its list. Requests\n"
            "use a loaded tensor as {\"ref\":\"NAME\"}; GET /v1/tensors lists them.\n"
            "\n--model NAME=PATH reads a Hugging Face config.json before listening and derives\n"
            "each layer's attention from it (heads, scheme, scale, windows, norms, ...); a\n"
            "config posattn cannot read stops start-up. Items name it as \"model\": \"NAME\"\n"
            "with \"layer\": L; GET /v1/models lists what was derived. It is also the KServe\n"
            "v2 model NAME (parameters.layer), so NAME may not be attention-<scheme> or\n"
            "stats. POSATTN_MODELS holds entries separated by ';' or newlines; any --model\n"
            "replaces its list.\n");
    fprintf(out, "\nUsable cores here (online, affinity, cgroup CPU quota): %d.\n", usable_cores());
}

/* Parses a whole decimal integer (no blanks, no trailing text). */
static bool parse_integer(const char *s, long long *out)
{
    if (!s[0] || !(s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9')))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

static bool tensor_name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= SRV_TENSOR_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

/* Adds one NAME=PATH[:TENSOR] (len bytes at value) to c->tensors. */
static bool add_tensor_spec(srv_config *c, const char *name, const char *value, size_t len,
                            FILE *err, const char *prog)
{
    const char *eq = memchr(value, '=', len), *rest, *split = NULL;
    size_t rest_len, path_len;
    srv_tensor_spec *t;

    if (eq == NULL || !tensor_name_ok(value, (size_t)(eq - value))) {
        fprintf(err,
                "%s: invalid value \"%.*s\" for %s: expected NAME=PATH[:TENSOR] with NAME of 1 "
                "to %d characters from A-Z a-z 0-9 _ . -\n",
                prog, (int)(len > 300 ? 300 : len), value, name, SRV_TENSOR_NAME_MAX - 1);
        return false;
    }
    rest = eq + 1;
    rest_len = len - (size_t)(rest - value);
    /* PATH:TENSOR splits at the last ':' right after a file extension, so a
     * path may itself hold ':' and a tensor name may hold anything. */
    for (size_t i = rest_len; i-- > 0;) {
        if (rest[i] != ':')
            continue;
        if ((i >= 12 && memcmp(rest + i - 12, ".safetensors", 12) == 0) ||
            (i >= 4 && memcmp(rest + i - 4, ".npy", 4) == 0)) {
            split = rest + i;
            break;
        }
    }
    path_len = split != NULL ? (size_t)(split - rest) : rest_len;
    if (path_len == 0 || path_len >= SRV_TENSOR_PATH_MAX ||
        (split != NULL && (rest_len - path_len - 1 == 0 || rest_len - path_len - 1 >= 256))) {
        fprintf(err,
                "%s: invalid value \"%.*s\" for %s: PATH must be 1 to %d characters and TENSOR, "
                "when given, 1 to 255\n",
                prog, (int)(len > 300 ? 300 : len), value, name, SRV_TENSOR_PATH_MAX - 1);
        return false;
    }
    if (!(path_len >= 12 && memcmp(rest + path_len - 12, ".safetensors", 12) == 0) &&
        !(path_len >= 4 && memcmp(rest + path_len - 4, ".npy", 4) == 0)) {
        fprintf(err, "%s: invalid value \"%.*s\" for %s: PATH must end in .safetensors or .npy\n",
                prog, (int)(len > 300 ? 300 : len), value, name);
        return false;
    }
    for (size_t i = 0; i < c->n_tensors; i++) {
        if (strlen(c->tensors[i].name) == (size_t)(eq - value) &&
            memcmp(c->tensors[i].name, value, (size_t)(eq - value)) == 0) {
            fprintf(err, "%s: invalid value \"%.*s\" for %s: tensor name '%s' is given twice\n",
                    prog, (int)(len > 300 ? 300 : len), value, name, c->tensors[i].name);
            return false;
        }
    }
    if (c->n_tensors == SRV_MAX_TENSOR_SPECS) {
        fprintf(err, "%s: too many tensors for %s: at most %d\n", prog, name, SRV_MAX_TENSOR_SPECS);
        return false;
    }
    t = &c->tensors[c->n_tensors++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, value, (size_t)(eq - value));
    memcpy(t->path, rest, path_len);
    if (split != NULL)
        memcpy(t->tensor, split + 1, rest_len - path_len - 1);
    return true;
}

/* Adds one NAME=PATH (len bytes at value) to c->models. */
static bool add_model_spec(srv_config *c, const char *name, const char *value, size_t len,
                           FILE *err, const char *prog)
{
    const char *eq = memchr(value, '=', len);
    size_t n, path_len;
    srv_model_spec *m;

    if (eq == NULL || (n = (size_t)(eq - value)) >= SRV_MODEL_NAME_MAX ||
        !tensor_name_ok(value, n)) {
        fprintf(err,
                "%s: invalid value \"%.*s\" for %s: expected NAME=PATH with NAME of 1 to %d "
                "characters from A-Z a-z 0-9 _ . -\n",
                prog, (int)(len > 300 ? 300 : len), value, name, SRV_MODEL_NAME_MAX - 1);
        return false;
    }
    path_len = len - n - 1;
    if (path_len == 0 || path_len >= SRV_MODEL_PATH_MAX) {
        fprintf(err, "%s: invalid value \"%.*s\" for %s: PATH must be 1 to %d characters\n",
                prog, (int)(len > 300 ? 300 : len), value, name, SRV_MODEL_PATH_MAX - 1);
        return false;
    }
    for (size_t i = 0; i < c->n_models; i++)
        if (strlen(c->models[i].name) == n && memcmp(c->models[i].name, value, n) == 0) {
            fprintf(err, "%s: invalid value \"%.*s\" for %s: model name '%s' is given twice\n",
                    prog, (int)(len > 300 ? 300 : len), value, name, c->models[i].name);
            return false;
        }
    if (c->n_models == SRV_MAX_MODEL_SPECS) {
        fprintf(err, "%s: too many models for %s: at most %d\n", prog, name, SRV_MAX_MODEL_SPECS);
        return false;
    }
    m = &c->models[c->n_models++];
    memset(m, 0, sizeof *m);
    memcpy(m->name, value, n);
    memcpy(m->path, eq + 1, path_len);
    return true;
}

/* Whether s[0..n) is "*" or an origin as a browser serializes it
 * (RFC 6454): http or https, "://", a host of letters, digits, '.', '-'
 * (or an IPv6 address in brackets), an optional :PORT, and nothing after. */
static bool origin_ok(const char *s, size_t n)
{
    size_t i, host;
    if (n == 1 && s[0] == '*')
        return true;
    if (n > 7 && strncasecmp(s, "http://", 7) == 0)
        host = 7;
    else if (n > 8 && strncasecmp(s, "https://", 8) == 0)
        host = 8;
    else
        return false;
    i = host;
    if (s[i] == '[') {
        while (i < n && s[i] != ']' &&
               (isxdigit((unsigned char)s[i]) || s[i] == ':' || s[i] == '['))
            i++;
        if (i >= n || s[i] != ']')
            return false;
        i++;
    } else {
        while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '-'))
            i++;
    }
    if (i == host)
        return false;
    if (i < n && s[i] == ':') {
        size_t digits = ++i;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
        if (i == digits || i - digits > 5)
            return false;
    }
    return i == n;
}

/* Adds one ORIGIN (len bytes at value) to c->cors_origins. */
static bool add_cors_origin(srv_config *c, const char *name, const char *value, size_t len,
                            FILE *err, const char *prog)
{
    if (len >= SRV_CORS_ORIGIN_MAX || !origin_ok(value, len)) {
        fprintf(err,
                "%s: invalid value \"%.*s\" for %s: expected * or an origin as a browser sends "
                "it in Origin: http:// or https://, the host, an optional :PORT, no path and "
                "no trailing / (https://app.example:8443)\n",
                prog, (int)(len > 300 ? 300 : len), value, name);
        return false;
    }
    for (size_t i = 0; i < c->n_cors_origins; i++)
        if (strlen(c->cors_origins[i]) == len && strncasecmp(c->cors_origins[i], value, len) == 0)
            return true; /* given twice: once is enough */
    if (c->n_cors_origins == SRV_MAX_CORS_ORIGINS) {
        fprintf(err, "%s: too many origins for %s: at most %d\n", prog, name, SRV_MAX_CORS_ORIGINS);
        return false;
    }
    memcpy(c->cors_origins[c->n_cors_origins], value, len);
    c->cors_origins[c->n_cors_origins++][len] = '\0';
    return true;
}

/* Applies one value to *c; on error prints to err naming `name` (the flag or
 * the variable) and returns false. */
static bool apply(srv_config *c, const opt *o, const char *name, const char *value, FILE *err,
                  const char *prog)
{
    char *base = (char *)c + o->offset;
    long long iv;
    switch (o->kind) {
    case OPT_STRING: {
        size_t len = strlen(value);
        if (len < (size_t)o->min || len > (size_t)o->max) {
            if (o->secret)
                fprintf(err, "%s: invalid value for %s: %zu bytes long, at most %.0f allowed\n",
                        prog, name, len, o->max);
            else
                fprintf(err,
                        "%s: invalid value \"%.300s\" for %s: expected %.0f to %.0f characters\n",
                        prog, value, name, o->min, o->max);
            return false;
        }
        memcpy(base, value, len + 1);
        return true;
    }
    case OPT_INT:
    case OPT_SIZE:
    case OPT_SIZE_MB:
        if (!parse_integer(value, &iv) || (double)iv < o->min || (double)iv > o->max) {
            fprintf(err,
                    "%s: invalid value \"%.300s\" for %s: expected an integer from %.0f to %.0f\n",
                    prog, value, name, o->min, o->max);
            return false;
        }
        if (o->kind == OPT_INT)
            *(int *)(void *)base = (int)iv;
        else if (o->kind == OPT_SIZE)
            *(size_t *)(void *)base = (size_t)iv;
        else
            *(size_t *)(void *)base = (size_t)iv * MB;
        return true;
    case OPT_SECONDS:
    case OPT_SECONDS_OFF: {
        char *end;
        const bool off = o->kind == OPT_SECONDS_OFF;
        errno = 0;
        double v = value[0] ? strtod(value, &end) : NAN;
        if (!value[0] || isspace((unsigned char)value[0]) || errno || *end || !isfinite(v) ||
            !(off ? v >= o->min : v > o->min) || v > o->max) {
            fprintf(err,
                    "%s: invalid value \"%.300s\" for %s: expected seconds, %s and at most "
                    "%.0f\n",
                    prog, value, name, off ? "0 (never) or more" : "more than 0", o->max);
            return false;
        }
        *(double *)(void *)base = v;
        return true;
    }
    case OPT_LOG_FORMAT: {
        srv_log_format f;
        if (strcmp(value, "json") == 0)
            f = SRV_LOG_JSON;
        else if (strcmp(value, "text") == 0)
            f = SRV_LOG_TEXT;
        else if (strcmp(value, "off") == 0)
            f = SRV_LOG_OFF;
        else {
            fprintf(err, "%s: invalid value \"%.300s\" for %s: expected json, text or off\n", prog,
                    value, name);
            return false;
        }
        *(srv_log_format *)(void *)base = f;
        return true;
    }
    case OPT_SWITCH:
        if (strcmp(value, "1") == 0 || strcmp(value, "true") == 0 || strcmp(value, "yes") == 0)
            *(bool *)(void *)base = true;
        else if (strcmp(value, "0") == 0 || strcmp(value, "false") == 0 ||
                 strcmp(value, "no") == 0)
            *(bool *)(void *)base = false;
        else {
            fprintf(err, "%s: invalid value \"%.300s\" for %s: expected 1 or 0 (true/false, yes/no)\n",
                    prog, value, name);
            return false;
        }
        return true;
    case OPT_CORS:
        if (name[0] == '-')
            return add_cors_origin(c, name, value, strlen(value), err, prog);
        /* The variable: origins separated by ';', ',' or blanks. */
        while (*value) {
            size_t n = strcspn(value, "; ,\t\n");
            if (n > 0 && !add_cors_origin(c, name, value, n, err, prog))
                return false;
            value += n + (value[n] != '\0');
        }
        return true;
    case OPT_TENSORS:
    case OPT_MODELS:
        if (name[0] == '-')
            return o->kind == OPT_TENSORS ? add_tensor_spec(c, name, value, strlen(value), err, prog)
                                          : add_model_spec(c, name, value, strlen(value), err, prog);
        /* The variable: entries separated by ';' or newlines, blanks ignored. */
        while (*value) {
            size_t n = strcspn(value, ";\n");
            size_t a = 0, b = n;
            while (a < b && isspace((unsigned char)value[a]))
                a++;
            while (b > a && isspace((unsigned char)value[b - 1]))
                b--;
            if (b > a && !(o->kind == OPT_TENSORS
                               ? add_tensor_spec(c, name, value + a, b - a, err, prog)
                               : add_model_spec(c, name, value + a, b - a, err, prog)))
                return false;
            value += n + (value[n] != '\0');
        }
        return true;
    }
    return false;
}

static const opt *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strlen(options[i].flag) == len && memcmp(options[i].flag, name, len) == 0)
            return &options[i];
    return NULL;
}

typedef enum arg_kind { ARG_OPTION, ARG_HELP, ARG_VERSION, ARG_ERROR } arg_kind;

/* Reads the argument at argv[*i] (advancing *i past a separate value) into
 * *o and *value. Prints the reason to err for ARG_ERROR when err is set. */
static arg_kind next_arg(int argc, char **argv, int *i, const opt **o, const char **value,
                         FILE *err, const char *prog)
{
    const char *a = argv[*i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
        return ARG_HELP;
    if (strcmp(a, "--version") == 0)
        return ARG_VERSION;
    if (strncmp(a, "--", 2) != 0 || !a[2]) {
        if (err)
            fprintf(err, "%s: unexpected argument \"%.300s\"; see --help\n", prog, a);
        return ARG_ERROR;
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    *o = find_flag(name, len);
    if (!*o) {
        if (err) {
            if ((len == 4 && memcmp(name, "help", 4) == 0) ||
                (len == 7 && memcmp(name, "version", 7) == 0))
                fprintf(err, "%s: option --%.*s takes no value\n", prog, (int)len, name);
            else
                fprintf(err, "%s: unknown option \"--%.*s\"; see --help\n", prog,
                        (int)(len > 300 ? 300 : len), name);
        }
        return ARG_ERROR;
    }
    if (eq) {
        *value = eq + 1;
    } else if ((*o)->kind == OPT_SWITCH) {
        *value = "1"; /* a switch takes no separate value */
    } else if (*i + 1 < argc) {
        *value = argv[++*i];
    } else {
        if (err)
            fprintf(err, "%s: option --%s needs a value (%s)\n", prog, (*o)->flag, (*o)->metavar);
        return ARG_ERROR;
    }
    return ARG_OPTION;
}

/* A misspelt POSATTN_* variable would otherwise be ignored without a word,
 * and containers are configured by the environment alone. A warning, not an
 * error: other tools may share the prefix. */
static void warn_unknown_env(FILE *err, const char *prog)
{
    extern char **environ;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        size_t len = strcspn(*e, "=");
        bool known = false;
        if (strncmp(*e, "POSATTN_", 8) != 0)
            continue;
        for (size_t j = 0; j < N_OPTIONS && !known; j++)
            known = strlen(options[j].env) == len && strncmp(options[j].env, *e, len) == 0;
        if (!known)
            fprintf(err, "%s: warning: ignoring unknown environment variable %.*s\n", prog,
                    (int)(len > 64 ? 64 : len), *e);
    }
}

int srv_config_parse(srv_config *c, int argc, char **argv, FILE *out, FILE *err)
{
    const char *prog = prog_name(argc, argv);
    const opt *o = NULL;
    const char *value = NULL;

    /* --help and --version win over anything else, a broken environment
     * included, so that a user can always read the help. */
    for (int i = 1; i < argc; i++) {
        arg_kind k = next_arg(argc, argv, &i, &o, &value, NULL, prog);
        if (k == ARG_HELP) {
            srv_config_usage(out, prog);
            return 1;
        }
        if (k == ARG_VERSION) {
            fprintf(out, "%s %s\n", prog, PA_VERSION_STRING);
            return 1;
        }
    }

    warn_unknown_env(err, prog);

    /* Work on a copy so that *c is untouched on error. Empty variables count
     * as unset. */
    srv_config next = *c;
    for (size_t j = 0; j < N_OPTIONS; j++) {
        const char *env = getenv(options[j].env);
        if (env && env[0] && !apply(&next, &options[j], options[j].env, env, err, prog))
            return -1;
    }
    bool tensor_flag = false, model_flag = false, cors_flag = false;
    for (int i = 1; i < argc; i++) {
        if (next_arg(argc, argv, &i, &o, &value, err, prog) != ARG_OPTION)
            return -1;
        char name[64];
        snprintf(name, sizeof name, "--%s", o->flag);
        if (o->kind == OPT_TENSORS && !tensor_flag) {
            next.n_tensors = 0; /* flags replace the variable's list */
            tensor_flag = true;
        }
        if (o->kind == OPT_MODELS && !model_flag) {
            next.n_models = 0;
            model_flag = true;
        }
        if (o->kind == OPT_CORS && !cors_flag) {
            next.n_cors_origins = 0;
            cors_flag = true;
        }
        if (!apply(&next, o, name, value, err, prog))
            return -1;
    }
    if (next.cache_block_tokens % 16 != 0) {
        fprintf(err,
                "%s: invalid value %d for --cache-block-tokens (POSATTN_CACHE_BLOCK_TOKENS): "
                "expected a multiple of 16 (the library's runs of keys)\n",
                prog, next.cache_block_tokens);
        return -1;
    }
    if ((next.tls_cert[0] == '\0') != (next.tls_key[0] == '\0')) {
        fprintf(err, "%s: --tls-cert and --tls-key go together: %s is missing\n", prog,
                next.tls_cert[0] ? "--tls-key (POSATTN_TLS_KEY)" : "--tls-cert (POSATTN_TLS_CERT)");
        return -1;
    }
    for (size_t i = 0; i < next.n_cors_origins; i++)
        if (strcmp(next.cors_origins[i], "*") == 0 &&
            (next.api_key[0] != '\0' || next.api_key_file[0] != '\0')) {
            fprintf(err,
                    "%s: --cors-origin '*' (POSATTN_CORS_ORIGINS) is refused with an API key "
                    "(%s): '*' lets a page of any web site call posattnd with the key; name "
                    "the origins of your own pages instead (--cors-origin https://app.example)\n",
                    prog, next.api_key[0] != '\0' ? "--api-key" : "--api-key-file");
            return -1;
        }
    if (next.cache_shared && next.cache_dir[0] == '\0') {
        fprintf(err, "%s: --cache-shared needs --cache-dir (POSATTN_CACHE_DIR)\n", prog);
        return -1;
    }
    if (next.cache_snapshot_s > 0 && next.cache_dir[0] == '\0') {
        fprintf(err, "%s: --cache-snapshot-s needs --cache-dir (POSATTN_CACHE_DIR)\n", prog);
        return -1;
    }
    if (next.cache_dir[0] != '\0' && !srv_config_check_dir(next.cache_dir, err, prog))
        return -1;
    *c = next;
    return 0;
}

bool srv_config_check_dir(const char *dir, FILE *err, const char *prog)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(err, "%s: --cache-dir \"%.300s\": %s\n", prog, dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(err, "%s: --cache-dir \"%.300s\" is not a directory\n", prog, dir);
        return false;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(err, "%s: --cache-dir \"%.300s\" is not writable: %s\n", prog, dir,
                strerror(errno));
        return false;
    }
    return true;
}
