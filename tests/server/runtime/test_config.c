/* test_config.c - posattnd's flags and environment (server/runtime/config.c):
 * defaults, both flag forms, POSATTN_* variables, precedence, --help and
 * --version, and every kind of bad value. */
#include "testutil.h"

#include "common/errors.h"
#include "runtime/config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MB ((size_t)1 << 20)

static const char *const env_names[] = {
    "POSATTN_HOST",
    "POSATTN_PORT",
    "POSATTN_WORKERS",
    "POSATTN_QUEUE_DEPTH",
    "POSATTN_MAX_BODY_MB",
    "POSATTN_MAX_BATCH_ITEMS",
    "POSATTN_MAX_TENSOR_ELEMENTS",
    "POSATTN_MAX_REQUEST_MB",
    "POSATTN_REQUEST_TIMEOUT",
    "POSATTN_DRAIN_TIMEOUT",
    "POSATTN_API_KEY",
    "POSATTN_LOG_FORMAT",
    "POSATTN_BLAS_THREADS",
    "POSATTN_TENSORS",
    "POSATTN_CACHE_MB",
    "POSATTN_CACHE_BLOCK_TOKENS",
    "POSATTN_SESSION_TTL",
    "POSATTN_CACHE_DIR",
    "POSATTN_CACHE_SNAPSHOT_S",
    "POSATTN_REPLICA_ID",
    "POSATTN_NO_PROBE",
    "POSATTN_CORS_ORIGINS",
    "POSATTN_API_KEY_FILE",
};

/* Every test starts from a clean environment, whatever the runner has set. */
static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        unsetenv(env_names[i]);
    return 0;
}

typedef struct run {
    int rc;
    char *out, *err;
    srv_config c;
} run;

/* Parses argv (NULL-terminated, without argv[0]) over the defaults. */
static run parse(const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"/usr/local/bin/posattnd";
    for (; args && *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;

    run r;
    size_t on = 0, en = 0;
    FILE *out = open_memstream(&r.out, &on);
    FILE *err = open_memstream(&r.err, &en);
    assert_non_null(out);
    assert_non_null(err);
    srv_config_defaults(&r.c);
    r.rc = srv_config_parse(&r.c, argc, argv, out, err);
    fclose(out);
    fclose(err);
    return r;
}

static void run_free(run *r)
{
    free(r->out);
    free(r->err);
}

static void test_defaults(void **state)
{
    (void)state;
    srv_config c;
    srv_config_defaults(&c);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(c.workers, cores < 1 ? 1 : (cores > 256 ? 256 : cores));
    assert_true(c.workers >= 1);
    assert_int_equal(c.queue_depth, 64);
    assert_int_equal(c.max_body_bytes, 64 * MB);
    assert_int_equal(c.max_batch_items, 64);
    assert_int_equal(c.max_tensor_elements, 16 * MB);
    assert_int_equal(c.max_request_memory, 1024 * MB);
    assert_true(c.request_timeout == 30);
    assert_true(c.drain_timeout == 20);
    assert_string_equal(c.api_key, "");
    assert_int_equal(c.log_format, SRV_LOG_JSON);
    assert_int_equal(c.blas_threads, 1);

    /* No arguments: defaults stand, nothing printed. */
    run r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_memory_equal(&r.c, &c, sizeof c);
    assert_string_equal(r.out, "");
    assert_string_equal(r.err, "");
    run_free(&r);
}

static void test_flags_both_forms(void **state)
{
    (void)state;
    const char *args[] = {"--host",
                          "0.0.0.0",
                          "--port=9090",
                          "--workers",
                          "3",
                          "--queue-depth=100000",
                          "--max-body-mb",
                          "2",
                          "--max-batch-items=5",
                          "--max-tensor-elements",
                          "1000",
                          "--max-request-mb=3",
                          "--request-timeout",
                          "1.5",
                          "--drain-timeout=0.25",
                          "--api-key=s3cret=x",
                          "--log-format",
                          "text",
                          "--blas-threads=2",
                          NULL};
    run r = parse(args);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.err, "");
    assert_string_equal(r.c.host, "0.0.0.0");
    assert_int_equal(r.c.port, 9090);
    assert_int_equal(r.c.workers, 3);
    assert_int_equal(r.c.queue_depth, 100000);
    assert_int_equal(r.c.max_body_bytes, 2 * MB);
    assert_int_equal(r.c.max_batch_items, 5);
    assert_int_equal(r.c.max_tensor_elements, 1000);
    assert_int_equal(r.c.max_request_memory, 3 * MB);
    assert_true(r.c.request_timeout == 1.5);
    assert_true(r.c.drain_timeout == 0.25);
    assert_string_equal(r.c.api_key, "s3cret=x"); /* only the first '=' splits */
    assert_int_equal(r.c.log_format, SRV_LOG_TEXT);
    assert_int_equal(r.c.blas_threads, 2);
    run_free(&r);

    const char *edge[] = {"--port", "0", "--log-format=off", "--api-key=", "--port=65535", NULL};
    r = parse(edge);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.port, 65535); /* the last one wins */
    assert_int_equal(r.c.log_format, SRV_LOG_OFF);
    assert_string_equal(r.c.api_key, "");
    run_free(&r);
}

static void test_env_and_precedence(void **state)
{
    (void)state;
    setenv("POSATTN_PORT", "7000", 1);
    setenv("POSATTN_WORKERS", "2", 1);
    setenv("POSATTN_API_KEY", "from-env", 1);
    setenv("POSATTN_LOG_FORMAT", "text", 1);
    setenv("POSATTN_MAX_BODY_MB", "8", 1);
    setenv("POSATTN_REQUEST_TIMEOUT", "2.5", 1);
    setenv("POSATTN_HOST", "", 1); /* empty counts as unset */
    run r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.port, 7000);
    assert_int_equal(r.c.workers, 2);
    assert_string_equal(r.c.api_key, "from-env");
    assert_int_equal(r.c.log_format, SRV_LOG_TEXT);
    assert_int_equal(r.c.max_body_bytes, 8 * MB);
    assert_true(r.c.request_timeout == 2.5);
    assert_string_equal(r.c.host, "127.0.0.1");
    run_free(&r);

    /* Flags win over the environment. */
    const char *args[] = {"--port", "7001", "--api-key=from-flag", "--log-format=json", NULL};
    r = parse(args);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.port, 7001);
    assert_int_equal(r.c.workers, 2);
    assert_string_equal(r.c.api_key, "from-flag");
    assert_int_equal(r.c.log_format, SRV_LOG_JSON);
    run_free(&r);

    /* A bad variable is an error naming the variable, even when a flag would
     * override it. */
    setenv("POSATTN_PORT", "http", 1);
    r = parse(args);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "POSATTN_PORT"));
    assert_non_null(strstr(r.err, "\"http\""));
    run_free(&r);
}

static void tensor_is(const srv_config *c, size_t i, const char *name, const char *path,
                      const char *tensor)
{
    assert_true(i < c->n_tensors);
    assert_string_equal(c->tensors[i].name, name);
    assert_string_equal(c->tensors[i].path, path);
    assert_string_equal(c->tensors[i].tensor, tensor);
}

/* --no-probe is a switch: no value of its own, the next argument untouched;
 * POSATTN_NO_PROBE takes 1/0, true/false, yes/no. */
static void test_no_probe(void **state)
{
    (void)state;
    run r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_false(r.c.no_probe);
    run_free(&r);

    const char *flag[] = {"--no-probe", "--port", "7002", NULL};
    r = parse(flag);
    assert_int_equal(r.rc, 0);
    assert_true(r.c.no_probe);
    assert_int_equal(r.c.port, 7002);
    run_free(&r);

    setenv("POSATTN_NO_PROBE", "yes", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_true(r.c.no_probe);
    run_free(&r);

    const char *off[] = {"--no-probe=0", NULL};
    r = parse(off);
    assert_int_equal(r.rc, 0);
    assert_false(r.c.no_probe);
    run_free(&r);

    setenv("POSATTN_NO_PROBE", "maybe", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "POSATTN_NO_PROBE"));
    run_free(&r);
    unsetenv("POSATTN_NO_PROBE");

    const char *help[] = {"--help", NULL};
    r = parse(help);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "--no-probe "));
    assert_non_null(strstr(r.out, "POSATTN_NO_PROBE"));
    run_free(&r);
}

static void test_tensors(void **state)
{
    (void)state;
    run r = parse(NULL);
    assert_int_equal(r.c.n_tensors, 0);
    assert_null(r.c.tensor_store);
    run_free(&r);

    /* Both flag forms; ':' inside a path; the TENSOR part after the last
     * ':' that follows the extension, itself holding ':' and '.'. */
    const char *args[] = {"--tensor",
                          "wpe=/m/gpt2.npy",
                          "--tensor=t5.bias-0=/m/t5:v1/model.safetensors:encoder.block.0.bias",
                          "--tensor",
                          "odd=/a:b.safetensors:x.safetensors:y",
                          "--tensor",
                          "whole=/data/c:d.safetensors",
                          NULL};
    r = parse(args);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.n_tensors, 4);
    tensor_is(&r.c, 0, "wpe", "/m/gpt2.npy", "");
    tensor_is(&r.c, 1, "t5.bias-0", "/m/t5:v1/model.safetensors", "encoder.block.0.bias");
    tensor_is(&r.c, 2, "odd", "/a:b.safetensors:x.safetensors", "y");
    tensor_is(&r.c, 3, "whole", "/data/c:d.safetensors", "");
    run_free(&r);

    /* The variable: ';' or newlines, blanks around entries ignored. */
    setenv("POSATTN_TENSORS", " a=/x.npy ;b=/y.safetensors:w\n\n c=/z.npy;", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.n_tensors, 3);
    tensor_is(&r.c, 0, "a", "/x.npy", "");
    tensor_is(&r.c, 1, "b", "/y.safetensors", "w");
    tensor_is(&r.c, 2, "c", "/z.npy", "");
    run_free(&r);
    /* Any --tensor replaces the variable's list. */
    const char *one[] = {"--tensor", "a=/other.npy", NULL};
    r = parse(one);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.n_tensors, 1);
    tensor_is(&r.c, 0, "a", "/other.npy", "");
    run_free(&r);
    setenv("POSATTN_TENSORS", "a=/x.npy;a=/y.npy", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "POSATTN_TENSORS"));
    assert_non_null(strstr(r.err, "'a' is given twice"));
    run_free(&r);
    unsetenv("POSATTN_TENSORS");

    /* Too many. */
    char vals[SRV_MAX_TENSOR_SPECS + 1][32];
    const char *many[2 * (SRV_MAX_TENSOR_SPECS + 1) + 1];
    for (int i = 0; i <= SRV_MAX_TENSOR_SPECS; i++) {
        snprintf(vals[i], sizeof vals[i], "t%d=/t.npy", i);
        many[2 * i] = "--tensor";
        many[2 * i + 1] = vals[i];
    }
    many[2 * (SRV_MAX_TENSOR_SPECS + 1)] = NULL;
    char *argv[2 * (SRV_MAX_TENSOR_SPECS + 1) + 2];
    argv[0] = (char *)"posattnd";
    for (int i = 0; i < 2 * (SRV_MAX_TENSOR_SPECS + 1); i++)
        argv[i + 1] = (char *)many[i];
    srv_config c;
    srv_config_defaults(&c);
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(srv_config_parse(&c, 2 * (SRV_MAX_TENSOR_SPECS + 1) + 1, argv, devnull, devnull),
                     -1);
    assert_int_equal(srv_config_parse(&c, 2 * SRV_MAX_TENSOR_SPECS + 1, argv, devnull, devnull), 0);
    assert_int_equal(c.n_tensors, SRV_MAX_TENSOR_SPECS);
    fclose(devnull);
}

static void test_cors_origins(void **state)
{
    (void)state;
    run r = parse(NULL);
    assert_int_equal(r.c.n_cors_origins, 0); /* off by default */
    run_free(&r);

    /* Repeatable, both forms; an origin given twice is kept once. */
    const char *args[] = {"--cors-origin",
                          "http://127.0.0.1:8765",
                          "--cors-origin=https://app.example",
                          "--cors-origin",
                          "HTTPS://app.example",
                          "--cors-origin",
                          "http://[::1]:80",
                          NULL};
    r = parse(args);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.n_cors_origins, 3);
    assert_string_equal(r.c.cors_origins[0], "http://127.0.0.1:8765");
    assert_string_equal(r.c.cors_origins[1], "https://app.example");
    assert_string_equal(r.c.cors_origins[2], "http://[::1]:80");
    run_free(&r);

    /* The variable: ';', ',' or blanks; any flag replaces its list. */
    setenv("POSATTN_CORS_ORIGINS", " https://a.example, http://b.example:81;\nhttp://c", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.n_cors_origins, 3);
    assert_string_equal(r.c.cors_origins[2], "http://c");
    run_free(&r);
    const char *one[] = {"--cors-origin", "https://d.example", NULL};
    r = parse(one);
    assert_int_equal(r.c.n_cors_origins, 1);
    assert_string_equal(r.c.cors_origins[0], "https://d.example");
    run_free(&r);
    unsetenv("POSATTN_CORS_ORIGINS");

    /* Not an origin: a path, a trailing '/', another scheme, no host, a
     * bad port. Each names the flag and the value. */
    static const char *const bad[] = {
        "https://a.example/", "https://a.example/x", "ftp://a",    "https://", "a.example",
        "http://a:",          "http://a:123456",     "http://a b", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *a[] = {"--cors-origin", bad[i], NULL};
        r = parse(a);
        if (r.rc != -1 || strstr(r.err, "--cors-origin") == NULL)
            fail_msg("--cors-origin \"%s\": rc %d, %s", bad[i], r.rc, r.err);
        run_free(&r);
    }

    /* '*' alone is fine; with a key it is refused, naming both. */
    const char *star[] = {"--cors-origin", "*", NULL};
    r = parse(star);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.c.cors_origins[0], "*");
    run_free(&r);
    const char *star_key[] = {"--cors-origin", "*", "--api-key", "k", NULL};
    r = parse(star_key);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "--cors-origin '*'"));
    assert_non_null(strstr(r.err, "--api-key"));
    run_free(&r);
    setenv("POSATTN_API_KEY_FILE", "/run/keys", 1);
    setenv("POSATTN_CORS_ORIGINS", "https://a.example *", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "--api-key-file"));
    run_free(&r);
}

/* The flag and variable a 413 names (SRV_LIMIT_*) set the limit it names:
 * "(set by --max-body-mb or POSATTN_MAX_BODY_MB)" with 3 sets 3 MB both ways. */
static void test_limit_names(void **state)
{
    static const struct {
        const char *text;
        size_t off; /* the srv_config field the limit is */
        size_t scale;
    } t[] = {
        {SRV_LIMIT_BODY, offsetof(srv_config, max_body_bytes), MB},
        {SRV_LIMIT_BATCH, offsetof(srv_config, max_batch_items), 1},
        {SRV_LIMIT_TENSOR, offsetof(srv_config, max_tensor_elements), 1},
        {SRV_LIMIT_MEMORY, offsetof(srv_config, max_request_memory), MB},
        {SRV_LIMIT_COMPUTE, offsetof(srv_config, max_request_gflop), 1},
    };
    (void)state;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char flag[64], env[64];
        assert_int_equal(sscanf(t[i].text, "(set by %63s or %63[A-Z_])", flag, env), 2);
        const char *args[] = {flag, "3", NULL};
        run r = parse(args);
        assert_int_equal(r.rc, 0);
        assert_int_equal(*(size_t *)((char *)&r.c + t[i].off), 3 * t[i].scale);
        run_free(&r);
        setenv(env, "5", 1);
        r = parse(NULL);
        unsetenv(env);
        assert_int_equal(r.rc, 0);
        assert_int_equal(*(size_t *)((char *)&r.c + t[i].off), 5 * t[i].scale);
        run_free(&r);
    }
}

static void test_help_and_version(void **state)
{
    (void)state;
    const char *help[] = {"--port", "1", "--help", NULL};
    run r = parse(help);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "Usage: posattnd"));
    assert_string_equal(r.err, "");
    /* Every flag and variable is documented. */
    static const char *const flags[] = {
        "--host",
        "--port",
        "--workers",
        "--queue-depth",
        "--max-body-mb",
        "--max-batch-items",
        "--max-tensor-elements",
        "--max-request-mb",
        "--request-timeout",
        "--drain-timeout",
        "--api-key",
        "--log-format",
        "--blas-threads",
        "--help",
        "--version",
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strstr(r.out, flags[i]))
            fail_msg("--help does not mention %s", flags[i]);
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        assert_non_null(strstr(r.out, env_names[i]));
    run_free(&r);

    const char *h[] = {"-h", NULL};
    r = parse(h);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "Usage:"));
    run_free(&r);

    const char *v[] = {"--version", NULL};
    r = parse(v);
    assert_int_equal(r.rc, 1);
    assert_string_equal(r.out, "posattnd " PA_VERSION_STRING "\n");
    run_free(&r);

    /* Help wins over a broken environment and a bad flag... */
    setenv("POSATTN_WORKERS", "many", 1);
    const char *bad_then_help[] = {"--bogus", "--help", NULL};
    r = parse(bad_then_help);
    assert_int_equal(r.rc, 1);
    run_free(&r);
    unsetenv("POSATTN_WORKERS");

    /* ...but "--help" as the value of another flag is that value. */
    const char *key_help[] = {"--api-key", "--help", NULL};
    r = parse(key_help);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.c.api_key, "--help");
    run_free(&r);

    FILE *f = tmpfile();
    srv_config_usage(f, NULL);
    assert_true(ftell(f) > 200);
    fclose(f);
}

/* Expects -1 with every `want` substring in the error output and the config
 * untouched. */
static void expect_bad(const char *const *args, const char *want1, const char *want2)
{
    run r = parse(args);
    srv_config d;
    srv_config_defaults(&d);
    if (r.rc != -1)
        fail_msg("%s %s: rc %d, want -1", args[0] ? args[0] : "(env)",
                 args[0] && args[1] ? args[1] : "", r.rc);
    assert_memory_equal(&r.c, &d, sizeof d);
    assert_string_equal(r.out, "");
    if (!strstr(r.err, want1) || (want2 && !strstr(r.err, want2)))
        fail_msg("error output \"%s\" lacks \"%s\" / \"%s\"", r.err, want1, want2 ? want2 : "");
    run_free(&r);
}

#define BAD(flag, value, w1, w2)                                                                   \
    do {                                                                                           \
        const char *a_[] = {flag, value, NULL};                                                    \
        expect_bad(a_, w1, w2);                                                                    \
    } while (0)

static void test_bad_values(void **state)
{
    (void)state;
    BAD("--port", "abc", "--port", "\"abc\"");
    BAD("--port", "70000", "--port", "70000");
    BAD("--port", "-1", "--port", "0 to 65535");
    BAD("--port", "8080 ", "--port", "\"8080 \"");
    BAD("--port", " 8080", "--port", NULL);
    BAD("--port", "", "--port", NULL);
    BAD("--port", "99999999999999999999999", "--port", NULL);
    BAD("--port", "80.5", "--port", NULL);
    BAD("--workers", "0", "--workers", "1 to 256");
    BAD("--workers", "257", "--workers", "257");
    BAD("--queue-depth", "0", "--queue-depth", NULL);
    BAD("--queue-depth", "100001", "--queue-depth", NULL);
    BAD("--max-body-mb", "0", "--max-body-mb", NULL);
    BAD("--max-body-mb", "1e3", "--max-body-mb", NULL);
    BAD("--max-batch-items", "0", "--max-batch-items", NULL);
    BAD("--max-tensor-elements", "-5", "--max-tensor-elements", NULL);
    BAD("--max-request-mb", "0", "--max-request-mb", NULL);
    BAD("--request-timeout", "0", "--request-timeout", "\"0\"");
    BAD("--request-timeout", "-1", "--request-timeout", NULL);
    BAD("--request-timeout", "nan", "--request-timeout", NULL);
    BAD("--request-timeout", "inf", "--request-timeout", NULL);
    BAD("--request-timeout", "5s", "--request-timeout", "\"5s\"");
    BAD("--drain-timeout", "abc", "--drain-timeout", NULL);
    BAD("--drain-timeout", "1e9", "--drain-timeout", NULL);
    BAD("--log-format", "xml", "--log-format", "\"xml\"");
    BAD("--log-format", "JSON", "--log-format", NULL);
    BAD("--blas-threads", "0", "--blas-threads", NULL);
    BAD("--host", "", "--host", NULL);
    BAD("--bogus", "1", "unknown option", "--bogus");
    BAD("--help=yes", NULL, "--help", "takes no value");
    BAD("--port", NULL, "--port", "needs a value");
    BAD("serve", NULL, "unexpected argument", "\"serve\"");
    BAD("-p", "80", "unexpected argument", "\"-p\"");
    BAD("--", NULL, "unexpected argument", NULL);
    BAD("--tensor", "/m/wpe.npy", "--tensor", "NAME=PATH[:TENSOR]");
    BAD("--tensor", "=/m/wpe.npy", "--tensor", "NAME=PATH");
    BAD("--tensor", "a b=/m/wpe.npy", "--tensor", "A-Z a-z 0-9 _ . -");
    BAD("--tensor", "a=/m/wpe.pt", "--tensor", "must end in .safetensors or .npy");
    BAD("--tensor", "a=/m/model.safetensors:", "--tensor", "TENSOR");
    BAD("--tensor", "a=", "--tensor", "PATH");
    BAD("--tensor", NULL, "--tensor", "needs a value");

    /* A key that is too long is refused without echoing it. */
    char key[400];
    memset(key, 'Z', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    const char *a[] = {"--api-key", key, NULL};
    run r = parse(a);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "--api-key"));
    assert_null(strstr(r.err, "ZZZZ"));
    run_free(&r);

    char host[300];
    memset(host, 'h', sizeof host - 1);
    host[sizeof host - 1] = '\0';
    BAD("--host", host, "--host", "255");

    /* Environment errors name the variable. */
    static const char *const env_bad[][2] = {
        {"POSATTN_WORKERS", "0"},       {"POSATTN_QUEUE_DEPTH", "x"},
        {"POSATTN_LOG_FORMAT", "yaml"}, {"POSATTN_DRAIN_TIMEOUT", "-3"},
        {"POSATTN_MAX_BODY_MB", "1.5"}, {"POSATTN_BLAS_THREADS", "999"},
    };
    for (size_t i = 0; i < sizeof env_bad / sizeof env_bad[0]; i++) {
        setenv(env_bad[i][0], env_bad[i][1], 1);
        const char *none[] = {NULL};
        expect_bad(none, env_bad[i][0], env_bad[i][1]);
        unsetenv(env_bad[i][0]);
    }
}

/* The sessions' flags: --cache-mb (default a quarter of memory, 64 to
 * 4096 MB), --cache-block-tokens (a positive multiple of 16), --session-ttl
 * (0 = never). */
static void test_session_flags(void **state)
{
    (void)state;
    srv_config c;
    srv_config_defaults(&c);
    assert_int_equal(c.cache_bytes, srv_config_default_cache_bytes());
    assert_true(c.cache_bytes >= 64 * MB && c.cache_bytes <= 4096 * MB);
    assert_int_equal(c.cache_bytes % MB, 0);
    assert_int_equal(c.cache_block_tokens, 16);
    assert_true(c.session_ttl == 600);

    const char *args[] = {"--cache-mb",    "12", "--cache-block-tokens=32",
                          "--session-ttl", "0",  NULL};
    run r = parse(args);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.err, "");
    assert_int_equal(r.c.cache_bytes, 12 * MB);
    assert_int_equal(r.c.cache_block_tokens, 32);
    assert_true(r.c.session_ttl == 0);
    run_free(&r);

    setenv("POSATTN_CACHE_MB", "7", 1);
    setenv("POSATTN_CACHE_BLOCK_TOKENS", "64", 1);
    setenv("POSATTN_SESSION_TTL", "1.5", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.c.cache_bytes, 7 * MB);
    assert_int_equal(r.c.cache_block_tokens, 64);
    assert_true(r.c.session_ttl == 1.5);
    run_free(&r);
    setenv("POSATTN_CACHE_BLOCK_TOKENS", "24", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "POSATTN_CACHE_BLOCK_TOKENS"));
    assert_non_null(strstr(r.err, "multiple of 16"));
    run_free(&r);
    unsetenv("POSATTN_CACHE_MB");
    unsetenv("POSATTN_CACHE_BLOCK_TOKENS");
    unsetenv("POSATTN_SESSION_TTL");

    BAD("--cache-mb", "0", "--cache-mb", NULL);
    BAD("--cache-block-tokens", "0", "--cache-block-tokens", "16 to 65536");
    BAD("--cache-block-tokens", "8", "--cache-block-tokens", NULL);
    BAD("--cache-block-tokens", "40", "--cache-block-tokens", "multiple of 16");
    BAD("--session-ttl", "-1", "--session-ttl", "0 (never) or more");
    BAD("--session-ttl", "x", "--session-ttl", NULL);
    /* --request-timeout still refuses 0. */
    BAD("--request-timeout", "0", "--request-timeout", "more than 0");
}

/* --cache-dir (an existing, writable directory, checked when parsed),
 * --cache-snapshot-s (0 by default: on drain only; needs --cache-dir) and
 * --replica-id (the hostname by default). */
static void test_cache_dir_flags(void **state)
{
    (void)state;
    char dir[] = "/tmp/posattn-test-config-XXXXXX", file[64], missing[64];
    srv_config c;
    run r;
    FILE *f;

    srv_config_defaults(&c);
    assert_string_equal(c.cache_dir, "");
    assert_int_equal(c.cache_snapshot_s, 0);
    assert_true(c.replica_id[0] != '\0');

    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/f", dir);
    snprintf(missing, sizeof missing, "%s/none", dir);
    f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);

    const char *args[] = {"--cache-dir", dir, "--cache-snapshot-s", "5", "--replica-id",
                          "r-2",         NULL};
    r = parse(args);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.err, "");
    assert_string_equal(r.c.cache_dir, dir);
    assert_int_equal(r.c.cache_snapshot_s, 5);
    assert_string_equal(r.c.replica_id, "r-2");
    run_free(&r);

    setenv("POSATTN_CACHE_DIR", dir, 1);
    setenv("POSATTN_CACHE_SNAPSHOT_S", "1", 1);
    setenv("POSATTN_REPLICA_ID", "pod-7", 1);
    r = parse(NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.c.cache_dir, dir);
    assert_int_equal(r.c.cache_snapshot_s, 1);
    assert_string_equal(r.c.replica_id, "pod-7");
    run_free(&r);
    unsetenv("POSATTN_CACHE_DIR");
    unsetenv("POSATTN_CACHE_SNAPSHOT_S");
    unsetenv("POSATTN_REPLICA_ID");

    BAD("--cache-dir", missing, "--cache-dir", "No such file or directory");
    BAD("--cache-dir", file, "--cache-dir", "is not a directory");
    BAD("--cache-snapshot-s", "-1", "--cache-snapshot-s", "0 to 86400");
    BAD("--cache-snapshot-s", "3", "--cache-snapshot-s", "needs --cache-dir");
    BAD("--replica-id", "", "--replica-id", NULL);
    /* A directory this process may not write into (root writes anywhere). */
    if (geteuid() != 0) {
        assert_int_equal(chmod(dir, 0500), 0);
        BAD("--cache-dir", dir, "--cache-dir", "is not writable");
        assert_int_equal(chmod(dir, 0700), 0);
    }
    assert_int_equal(unlink(file), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_flags_both_forms, clear_env),
        cmocka_unit_test_setup(test_env_and_precedence, clear_env),
        cmocka_unit_test_setup(test_tensors, clear_env),
        cmocka_unit_test_setup(test_limit_names, clear_env),
        cmocka_unit_test_setup(test_help_and_version, clear_env),
        cmocka_unit_test_setup(test_bad_values, clear_env),
        cmocka_unit_test_setup(test_session_flags, clear_env),
        cmocka_unit_test_setup(test_no_probe, clear_env),
        cmocka_unit_test_setup(test_cache_dir_flags, clear_env),
        cmocka_unit_test_setup(test_cors_origins, clear_env),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
