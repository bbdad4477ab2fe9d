/* posattn-load.c - a load generator that compares positional schemes through
 * posattnd's real HTTP path: main(), which starts or finds the server
 * (--spawn, /healthz), checks a --model's shapes, writes --dump-body, runs
 * the phase loop and the reports.
 *
 * Files: args.c (the help, the flags and their safety checks: an explicit
 * bound, loopback only), hist.c (latency histogram), payload.c (seeded
 * request bodies), differential.c (--differential's schemes and checks),
 * mla.c (--mla's), runner.c (libcurl multi driver, /metrics), spawn.c,
 * report.c, and sessions.c with sessions_report.c (--sessions: server-side
 * KV caches).
 */
#include "load.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int healthz(const load_config *c)
{
    char url[1100];
    long code = 0;
    CURL *h = curl_easy_init();
    if (!h)
        return -1;
    snprintf(url, sizeof url, "%s/healthz", c->url);
    load_curl_tls(h, c);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
    curl_easy_setopt(h, CURLOPT_NOBODY, 0L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fwrite);
    FILE *null = fopen("/dev/null", "w");
    curl_easy_setopt(h, CURLOPT_WRITEDATA, null);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    if (null)
        fclose(null);
    if (rc != CURLE_OK || code != 200) {
        fprintf(stderr, "posattn-load: %s/healthz: %s\n", c->url,
                rc != CURLE_OK ? curl_easy_strerror(rc) : "not 200");
        return -1;
    }
    return 0;
}

static void on_sigint(int sig)
{
    (void)sig;
    load_interrupted = 1;
}

/* --dump-body: the body posattn-load would send first, nothing sent. */
static int dump_body(const load_config *c)
{
    char err[256];
    size_t len = 0;
    int rc = 0;
    char *body =
        c->model ? load_payload_build_layer(c, &c->model->layers[0], c->lengths[0], 0, &len, err,
                                            sizeof err)
                 : load_payload_build(c, c->schemes[0], c->lengths[0], 0, &len, err, sizeof err);
    FILE *f;
    if (body == NULL) {
        fprintf(stderr, "posattn-load: %s\n", err);
        rc = 2;
        goto out;
    }
    f = fopen(c->dump_body_path, "wb");
    if (f != NULL) {
        int short_write = fwrite(body, 1, len, f) != len;
        if (fclose(f) != 0 || short_write)
            f = NULL;
    }
    if (f == NULL) {
        fprintf(stderr, "posattn-load: cannot write %s\n", c->dump_body_path);
        rc = 1;
    }
out:
    free(body);
    return rc;
}

/* The floats of one request for layer ly at length L: a model's check of
 * the 512 MB bound that load_args_parse keeps for the flags' shapes. */
static double layer_floats(const load_config *c, const load_layer *ly, int length)
{
    double seqs = c->batch_seq > 1 ? c->batch_seq : 1, per = 0;
    for (int i = 0; i < ly->n_req; i++) {
        double n = 1;
        for (int d = 0; d < ly->req[i].rank; d++)
            n *= ly->req[i].shape[d];
        per += n;
    }
    if (ly->layer_mode)
        per += seqs * length * ly->d_model +
               (double)ly->d_model * ly->head_dim * (ly->heads + 2 * ly->kv_heads);
    else
        per += seqs * length * ly->head_dim * (double)(ly->heads + 2 * ly->kv_heads);
    return per * c->batch;
}

/* After GET /v1/models: the first layer's shape stands for the run in the
 * reports' header, and no body may pass 512 MB. 0 or 2. */
static int model_check(load_config *c)
{
    const load_model *m = c->model;
    c->heads = m->layers[0].heads;
    c->kv_heads = m->layers[0].kv_heads;
    c->head_dim = m->layers[0].head_dim;
    for (int k = 0; k < m->n_layers; k++)
        for (int l = 0; l < c->n_lengths; l++)
            if (layer_floats(c, &m->layers[k], c->lengths[l]) *
                    (c->encoding == LOAD_ENC_B64 ? 5.34 : 8.0) >
                512.0 * 1024 * 1024) {
                fprintf(stderr,
                        "posattn-load: a request body for %s's %s at L=%d would exceed 512 MB: "
                        "lower --lengths, --batch or --batch-seq\n",
                        m->name, m->layers[k].label, c->lengths[l]);
                return 2;
            }
    return 0;
}

int main(int argc, char **argv)
{
    load_config c = {0};
    load_model model = {0};
    char spawned_url[256];
    int url_given = 0, rc;

    c.url = "http://127.0.0.1:8080";
    c.lengths[0] = 128;
    c.n_lengths = 1;
    c.concurrency[0] = 4;
    c.n_concurrency = 1;
    c.heads = 8;
    c.head_dim = 64;
    c.batch = 1;
    c.seed = 1;
    c.diff_lambda = 0.5;
    c.diff_depth = 1;
    c.sess_prompt = 64;
    c.sess_steps = 16;
    rc = load_args_parse(&c, argc, argv, &url_given);
    if (rc == 1) {
        load_args_usage(stdout);
        return 0;
    }
    if (rc != 0)
        return rc;
    c.progress = isatty(STDERR_FILENO);
    if (c.dump_body_path && !c.model_name) {
        rc = dump_body(&c);
        for (int i = 0; i < c.n_schemes; i++)
            free(c.schemes[i]);
        return rc;
    }

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "posattn-load: curl_global_init failed\n");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (c.spawn) {
        if (load_spawn_start(&c, spawned_url, sizeof spawned_url) != 0)
            return 1;
        c.url = spawned_url;
    } else {
        /* "http://host:port/" and "http://host:port" name the same base. */
        static char base[1024];
        snprintf(base, sizeof base, "%s", c.url);
        size_t n = strlen(base);
        while (n > 0 && base[n - 1] == '/')
            base[--n] = 0;
        c.url = base;
    }
    if ((rc = load_args_check_url(&c)) != 0 || healthz(&c) != 0) {
        rc = rc ? rc : 1;
        goto out;
    }
    load_machine_fetch(&c); /* the ceilings the answers' fractions are of */
    if (c.model_name) {
        if ((rc = load_model_fetch(&c, &model)) != 0)
            goto out;
        c.model = &model;
        if ((rc = model_check(&c)) != 0)
            goto out;
        if (c.dump_body_path) {
            rc = dump_body(&c);
            goto out;
        }
    }

    if (c.sessions) {
        rc = load_sessions_run(&c);
        goto out;
    }
    /* With a model, one phase per (length, concurrency) loads all its layers. */
    int n_sch = c.model ? 1 : c.n_schemes;
    int n_phases = n_sch * c.n_lengths * c.n_concurrency, done = 0;
    load_result *results = calloc((size_t)n_phases, sizeof *results);
    if (!results) {
        rc = 1;
        goto out;
    }
    for (int s = 0; s < n_sch && !load_interrupted; s++)
        for (int l = 0; l < c.n_lengths && !load_interrupted; l++)
            for (int k = 0; k < c.n_concurrency && !load_interrupted; k++) {
                if (load_run_phase(&c, c.model ? c.model->name : c.schemes[s], c.lengths[l],
                                   c.concurrency[k], &results[done]) != 0) {
                    rc = 1;
                    goto report;
                }
                done++;
            }
report:
    if (load_interrupted)
        fprintf(stderr, "posattn-load: interrupted; reporting the %d finished phase(s)\n", done);
    {
        int to_stdout = (c.json_path && !strcmp(c.json_path, "-")) ||
                        (c.csv_path && !strcmp(c.csv_path, "-")) ||
                        (c.html_path && !strcmp(c.html_path, "-")) ||
                        (c.svg_path && !strcmp(c.svg_path, "-"));
        if (!c.quiet)
            load_report_table(to_stdout ? stderr : stdout, &c, results, done);
        if (c.json_path && load_report_json(c.json_path, &c, results, done) != 0)
            rc = 1;
        if (c.csv_path && load_report_csv(c.csv_path, &c, results, done) != 0)
            rc = 1;
        if (c.html_path && load_report_html(c.html_path, &c, results, done) != 0)
            rc = 1;
        if (c.svg_path && load_report_svg(c.svg_path, &c, results, done) != 0)
            rc = 1;
    }
    for (int i = 0; i < done; i++)
        free(results[i].layers);
    free(results);
out:
    fflush(stdout);
    if (c.spawn) {
        int st = load_spawn_stop();
        if (st != 0)
            fprintf(stderr, "posattn-load: the spawned server exited with status %d\n", st);
    }
    for (int i = 0; i < c.n_schemes; i++)
        free(c.schemes[i]);
    load_model_free(&model);
    curl_global_cleanup();
    return rc;
}
