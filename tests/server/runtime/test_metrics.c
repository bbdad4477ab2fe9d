/* test_metrics.c - Prometheus metrics (server/runtime/metrics.c): the exposition
 * text, label mapping, histogram buckets and concurrent updates. */
#include "testutil.h"

#include "runtime/metrics.h"
#include "store/kv_cache.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of the sample whose name-and-labels part is exactly `series`;
 * -1 when absent. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        if (line[0] != '#' && strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = eol ? eol + 1 : NULL;
    }
    return -1;
}

static bool has_line(const char *text, const char *want)
{
    size_t n = strlen(want);
    for (const char *p = strstr(text, want); p; p = strstr(p + 1, want))
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

/* Checks the whole text: every line is a comment or "name{labels} value",
 * every sample's family has HELP and TYPE before it, and every histogram's
 * buckets are cumulative and end with +Inf == _count. Returns the number of
 * samples. */
static int check_exposition(const char *text)
{
    char family[128] = "";
    char type[32] = "";
    char last_series[256] = "";
    double last_bucket = -1;
    int samples = 0;
    bool help_seen = false;
    const char *line = text;
    assert_true(text[strlen(text) - 1] == '\n');
    while (*line) {
        const char *eol = strchr(line, '\n');
        assert_non_null(eol);
        char buf[512];
        size_t len = (size_t)(eol - line);
        assert_true(len < sizeof buf);
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = eol + 1;

        if (strncmp(buf, "# HELP ", 7) == 0) {
            sscanf(buf + 7, "%127s", family);
            help_seen = true;
            continue;
        }
        if (strncmp(buf, "# TYPE ", 7) == 0) {
            char fam[128];
            assert_int_equal(sscanf(buf + 7, "%127s %31s", fam, type), 2);
            assert_string_equal(fam, family);
            assert_true(help_seen);
            assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                        strcmp(type, "histogram") == 0 || strcmp(type, "summary") == 0);
            help_seen = false;
            continue;
        }
        assert_true(buf[0] != '#');
        /* name{labels} value */
        char *sp = strrchr(buf, ' ');
        assert_non_null(sp);
        *sp = '\0';
        char *end;
        double v = strtod(sp + 1, &end);
        assert_true(*end == '\0' && v >= 0);
        size_t flen = strlen(family);
        if (strncmp(buf, family, flen) != 0)
            fail_msg("sample %s outside its family %s", buf, family);
        const char *suffix = buf + flen;
        if (strcmp(type, "histogram") == 0) {
            assert_true(strncmp(suffix, "_bucket{", 8) == 0 || strncmp(suffix, "_sum", 4) == 0 ||
                        strncmp(suffix, "_count", 6) == 0);
            if (strncmp(suffix, "_bucket{", 8) == 0) {
                /* The series without its le label. */
                char series[256];
                const char *le = strstr(buf, "le=\"");
                assert_non_null(le);
                snprintf(series, sizeof series, "%.*s", (int)(le - buf), buf);
                if (strcmp(series, last_series) != 0) {
                    snprintf(last_series, sizeof last_series, "%s", series);
                    last_bucket = -1;
                }
                assert_true(v >= last_bucket);
                last_bucket = v;
            } else if (strncmp(suffix, "_count", 6) == 0) {
                /* _count equals the +Inf bucket just before it. */
                assert_true(v == last_bucket);
            }
        } else if (strcmp(type, "summary") == 0) { /* no quantiles: _sum and _count */
            assert_true(strncmp(suffix, "_sum", 4) == 0 || strncmp(suffix, "_count", 6) == 0);
        } else {
            assert_true(suffix[0] == '\0' || suffix[0] == '{');
        }
        samples++;
    }
    return samples;
}

static void test_fresh_render(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    assert_non_null(m);
    size_t len = 0;
    char *text = srv_metrics_render(m, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    check_exposition(text);
    static const char *const families[][2] = {
        {"posattn_request_duration_seconds", "histogram"},
        {"posattn_queue_duration_seconds", "histogram"},
        {"posattn_compute_duration_seconds", "histogram"},
        {"posattn_session_step_duration_seconds", "histogram"},
        {"posattn_requests_total", "counter"},
        {"posattn_items_total", "counter"},
        {"posattn_item_errors_total", "counter"},
        {"posattn_request_bytes_total", "counter"},
        {"posattn_response_bytes_total", "counter"},
        {"posattn_queue_depth", "gauge"},
        {"posattn_in_flight", "gauge"},
        {"posattn_queue_limit", "gauge"},
        {"posattn_draining", "gauge"},
        {"posattn_build_info", "gauge"},
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        char want[160];
        snprintf(want, sizeof want, "# TYPE %s %s", families[i][0], families[i][1]);
        if (!has_line(text, want))
            fail_msg("missing \"%s\"", want);
        snprintf(want, sizeof want, "# HELP %s ", families[i][0]);
        assert_non_null(strstr(text, want));
    }
    assert_true(has_line(text, "posattn_queue_duration_seconds_bucket{le=\"+Inf\"} 0"));
    assert_true(has_line(text, "posattn_queue_duration_seconds_sum 0.000000000"));
    assert_true(has_line(text, "posattn_queue_duration_seconds_count 0"));
    assert_true(has_line(text, "posattn_queue_depth 0"));
    assert_true(has_line(text, "posattn_in_flight 0"));
    assert_true(has_line(text, "posattn_queue_limit 0"));
    assert_true(has_line(text, "posattn_draining 0"));
    assert_true(has_line(text, "posattn_request_bytes_total 0"));
    for (int k = 0; k < 3; k++) {
        static const char *const phases[] = {"headers", "body", "send"};
        char line[96];
        snprintf(line, sizeof line, "posattn_connections_cut_total{phase=\"%s\"} 0", phases[k]);
        assert_true(has_line(text, line));
    }
    {
        char line[128];
        snprintf(line, sizeof line, "posattn_build_info{version=\"%s\",kernel=\"%s\"} 1",
                 PA_VERSION_STRING, pa_kernel_name());
        assert_true(has_line(text, line));
    }
    /* Labelled series appear once observed. */
    assert_null(strstr(text, "endpoint=\""));
    free(text);
    srv_metrics_free(m);
    srv_metrics_free(NULL);
}

static void test_requests_and_labels(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    srv_metrics_request(m, "attention", 200, 0.003, 1000, 200);
    srv_metrics_request(m, "attention", 200, 0.0001, 10, 20);
    srv_metrics_request(m, "attention", 413, 0.5, 5, 7);
    srv_metrics_request(m, "healthz", 418, 0.00001, 0, 2); /* class */
    srv_metrics_request(m, "/etc/passwd", 302, 1, 0, 0);   /* other endpoint, class */
    srv_metrics_request(m, NULL, 999, 100, 0, 0);          /* other, other */
    srv_metrics_request(m, "metrics", -5, -1, 0, 0);       /* negative time counts as 0 */
    char *text = srv_metrics_render(m, NULL);
    assert_non_null(text);
    check_exposition(text);

    assert_true(sample(text, "posattn_requests_total{endpoint=\"attention\",code=\"200\"}") == 2);
    assert_true(sample(text, "posattn_requests_total{endpoint=\"attention\",code=\"413\"}") == 1);
    assert_true(sample(text, "posattn_requests_total{endpoint=\"healthz\",code=\"4xx\"}") == 1);
    assert_true(sample(text, "posattn_requests_total{endpoint=\"other\",code=\"3xx\"}") == 1);
    assert_true(sample(text, "posattn_requests_total{endpoint=\"other\",code=\"other\"}") == 1);
    assert_true(sample(text, "posattn_requests_total{endpoint=\"metrics\",code=\"other\"}") == 1);
    assert_true(sample(text, "posattn_requests_total{endpoint=\"attention\",code=\"500\"}") == -1);
    assert_true(sample(text, "posattn_request_bytes_total") == 1015);
    assert_true(sample(text, "posattn_response_bytes_total") == 229);

    /* 0.003 s lies in (0.0025, 0.005]; 0.0001 is on a bound, which is
     * inclusive. */
    const char *h = "posattn_request_duration_seconds_bucket{endpoint=\"attention\",le=";
    char series[160];
    static const struct {
        const char *le;
        double want;
    } buckets[] = {{"5e-05", 0}, {"0.0001", 1}, {"0.0025", 1}, {"0.005", 2},
                   {"0.25", 2},  {"0.5", 3},    {"30", 3},     {"+Inf", 3}};
    for (size_t i = 0; i < sizeof buckets / sizeof buckets[0]; i++) {
        snprintf(series, sizeof series, "%s\"%s\"}", h, buckets[i].le);
        if (sample(text, series) != buckets[i].want)
            fail_msg("%s = %g, want %g", series, sample(text, series), buckets[i].want);
    }
    assert_true(sample(text, "posattn_request_duration_seconds_count{endpoint=\"attention\"}") ==
                3);
    assert_true(has_line(text, "posattn_request_duration_seconds_sum{endpoint=\"attention\"} "
                               "0.503100000"));
    /* 100 s lands in +Inf only. */
    assert_true(sample(text, "posattn_request_duration_seconds_bucket{endpoint=\"other\","
                             "le=\"30\"}") == 1);
    assert_true(sample(text, "posattn_request_duration_seconds_bucket{endpoint=\"other\","
                             "le=\"+Inf\"}") == 2);
    assert_true(sample(text, "posattn_request_duration_seconds_bucket{endpoint=\"metrics\","
                             "le=\"5e-05\"}") == 1);
    /* Endpoints never seen have no series. */
    assert_null(strstr(text, "endpoint=\"encode\""));
    free(text);
    srv_metrics_free(m);
}

static void test_compute_queue_and_gauges(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    for (int t = 0; t < PA_SCHEME_COUNT; t++)
        srv_metrics_compute(m, pa_scheme_type_name((pa_scheme_type)t), 0.001 * (t + 1));
    srv_metrics_compute(m, "rope", 0.002);
    srv_metrics_compute(m, "analysis", 2);
    srv_metrics_compute(m, "nope_v2", 0.1);
    srv_metrics_compute(m, NULL, 0.1);
    /* Item errors are counted apart: not in the histogram, not items. */
    srv_metrics_item_error(m, "alibi");
    srv_metrics_item_error(m, "alibi");
    srv_metrics_item_error(m, "nope_v2");
    /* A tiny task's few microseconds get buckets of their own. */
    srv_metrics_compute(m, "analysis", 3e-6);
    srv_metrics_queue(m, 0.25);
    srv_metrics_queue(m, 0.5);
    /* A clock that went backwards, or NaN, counts as zero: in the first
     * bucket, nothing added to the sum. */
    srv_metrics_queue(m, -3.0);
    srv_metrics_queue(m, NAN);
    srv_metrics_queue_depth_add(m, 5);
    srv_metrics_queue_depth_add(m, -2);
    srv_metrics_in_flight_add(m, 7);
    srv_metrics_set_queue_limit(m, 64);
    srv_metrics_set_draining(m);
    srv_metrics_in_flight_add(m, -1);
    assert_int_equal(srv_metrics_queue_depth(m), 3);
    assert_int_equal(srv_metrics_in_flight(m), 6);

    char *text = srv_metrics_render(m, NULL);
    check_exposition(text);
    for (int t = 0; t < PA_SCHEME_COUNT; t++) {
        char series[128];
        const char *name = pa_scheme_type_name((pa_scheme_type)t);
        snprintf(series, sizeof series, "posattn_items_total{scheme=\"%s\"}", name);
        assert_true(sample(text, series) == (t == PA_SCHEME_ROPE ? 2 : 1));
        snprintf(series, sizeof series, "posattn_compute_duration_seconds_count{scheme=\"%s\"}",
                 name);
        assert_true(sample(text, series) == (t == PA_SCHEME_ROPE ? 2 : 1));
    }
    assert_true(sample(text, "posattn_item_errors_total{scheme=\"alibi\"}") == 2);
    assert_true(sample(text, "posattn_item_errors_total{scheme=\"other\"}") == 1);
    assert_null(strstr(text, "posattn_item_errors_total{scheme=\"rope\"}"));
    assert_true(sample(text, "posattn_items_total{scheme=\"analysis\"}") == 2);
    assert_true(sample(text, "posattn_items_total{scheme=\"other\"}") == 2);
    assert_true(sample(text, "posattn_compute_duration_seconds_bucket{scheme=\"analysis\","
                             "le=\"2.5e-06\"}") == 0);
    assert_true(sample(text, "posattn_compute_duration_seconds_bucket{scheme=\"analysis\","
                             "le=\"5e-06\"}") == 1);
    assert_true(sample(text, "posattn_compute_duration_seconds_bucket{scheme=\"analysis\","
                             "le=\"1\"}") == 1);
    assert_true(sample(text, "posattn_compute_duration_seconds_bucket{scheme=\"analysis\","
                             "le=\"2.5\"}") == 2);
    assert_true(sample(text, "posattn_queue_duration_seconds_count") == 4);
    assert_true(has_line(text, "posattn_queue_duration_seconds_sum 0.750000000"));
    assert_true(sample(text, "posattn_queue_duration_seconds_bucket{le=\"0.25\"}") == 3);
    assert_true(sample(text, "posattn_queue_duration_seconds_bucket{le=\"5e-05\"}") == 2);
    assert_true(has_line(text, "posattn_queue_depth 3"));
    assert_true(has_line(text, "posattn_in_flight 6"));
    assert_true(has_line(text, "posattn_queue_limit 64"));
    assert_true(has_line(text, "posattn_draining 1"));
    free(text);

    /* NULL metrics are ignored everywhere. */
    srv_metrics_request(NULL, "attention", 200, 1, 1, 1);
    srv_metrics_queue(NULL, 1);
    srv_metrics_compute(NULL, "rope", 1);
    srv_metrics_queue_depth_add(NULL, 1);
    srv_metrics_in_flight_add(NULL, 1);
    srv_metrics_set_queue_limit(NULL, 1);
    srv_metrics_set_draining(NULL);
    assert_int_equal(srv_metrics_queue_depth(NULL), 0);
    assert_null(srv_metrics_render(NULL, NULL));
    srv_metrics_free(m);
}

enum { THREADS = 4, ROUNDS = 20000 };

static void *hammer(void *arg)
{
    srv_metrics *m = arg;
    for (int i = 0; i < ROUNDS; i++) {
        srv_metrics_request(m, i % 2 ? "attention" : "encode", i % 3 ? 200 : 400, 1e-5 * (i % 1000),
                            3, 5);
        srv_metrics_queue(m, 0.001);
        srv_metrics_compute(m, "alibi", 0.002);
        srv_metrics_queue_depth_add(m, 1);
        srv_metrics_in_flight_add(m, 1);
        srv_metrics_queue_depth_add(m, -1);
        if (i % 4000 == 0) {
            /* Rendering while others update must work; cmocka's asserts
             * are for the main thread only, so report through the result. */
            char *text = srv_metrics_render(m, NULL);
            if (!text)
                return m;
            free(text);
        }
    }
    return NULL;
}

/* The Open Inference Protocol's per-model counters: what the statistics
 * extension reads back, and the same figures in the exposition. */
static void test_model_counters(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    srv_model_counts c;
    const double phases[SRV_PHASE_COUNT] = {0.001, 0.002, 0.003, 0.004};
    char *text = srv_metrics_render(m, NULL);
    assert_null(strstr(text, "posattn_v2_inferences_total{")); /* none before any */
    free(text);
    srv_metrics_model_infer(m, "t5", true, 0.5, phases);
    srv_metrics_model_infer(m, "t5", true, 0.25, phases);
    srv_metrics_model_infer(m, "t5", false, 0.125, phases); /* phases of a failure: not counted */
    srv_metrics_model_infer(m, "rope", false, -1.0, NULL);  /* clamped to 0 */
    srv_metrics_model_infer(m, "bogus", true, 1.0, phases); /* not a model: dropped */
    srv_metrics_model_infer(m, NULL, true, 1.0, phases);
    srv_metrics_model_counts(m, "t5", &c);
    assert_int_equal(c.success, 2);
    assert_int_equal(c.fail, 1);
    assert_int_equal(c.success_ns, 750000000);
    assert_int_equal(c.fail_ns, 125000000);
    for (int p = 0; p < SRV_PHASE_COUNT; p++)
        assert_int_equal(c.phase_ns[p], 2000000 * (p + 1));
    assert_true(c.last_ms > 1700000000000u); /* wall clock, ms */
    srv_metrics_model_counts(m, "rope", &c);
    assert_int_equal(c.success + c.fail * 10 + c.fail_ns, 10);
    srv_metrics_model_counts(m, "alibi", &c);
    assert_int_equal(c.success + c.fail + c.last_ms, 0);
    srv_metrics_model_counts(m, "bogus", &c);
    assert_int_equal(c.success, 0);

    text = srv_metrics_render(m, NULL);
    check_exposition(text);
    assert_true(has_line(text, "posattn_v2_inferences_total{scheme=\"t5\",outcome=\"success\"} 2"));
    assert_true(has_line(text, "posattn_v2_inferences_total{scheme=\"t5\",outcome=\"fail\"} 1"));
    assert_true(has_line(text, "posattn_v2_inferences_total{scheme=\"rope\",outcome=\"fail\"} 1"));
    assert_true(has_line(text,
                         "posattn_v2_inference_seconds_total{scheme=\"t5\",outcome=\"success\"} "
                         "0.750000000"));
    assert_true(has_line(
        text,
        "posattn_v2_phase_seconds_total{scheme=\"t5\",phase=\"compute_output\"} 0.008000000"));
    assert_null(strstr(text, "scheme=\"alibi\",outcome"));
    assert_null(strstr(text, "posattn_v2_phase_seconds_total{scheme=\"rope\""));
    free(text);
    srv_metrics_free(m);
}

/* The models of --model count apart from the schemes' under
 * "model:NAME" once added (a model called t5 is not the scheme t5), and
 * show as model="NAME". */
static void test_named_model_counters(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    srv_model_counts c;
    const double phases[SRV_PHASE_COUNT] = {0.001, 0.002, 0.003, 0.004};
    char name[SRV_METRICS_MODEL_NAME_MAX + 1];
    assert_true(srv_metrics_add_model(m, "t5"));
    assert_true(srv_metrics_add_model(m, "gemma-2.b"));
    assert_false(srv_metrics_add_model(m, "t5")); /* once */
    assert_false(srv_metrics_add_model(m, ""));
    assert_false(srv_metrics_add_model(m, NULL));
    assert_false(srv_metrics_add_model(m, "a\"b")); /* no escaping needed in labels */
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    assert_false(srv_metrics_add_model(m, name)); /* too long */
    assert_false(srv_metrics_add_model(NULL, "x"));

    srv_metrics_model_infer(m, "model:t5", true, 0.5, phases);
    srv_metrics_model_infer(m, "model:t5", false, 0.25, NULL);
    srv_metrics_model_infer(m, "t5", true, 1.0, phases);
    srv_metrics_model_infer(m, "model:nope", true, 1.0, phases); /* not added: dropped */
    srv_metrics_model_infer(m, "model:", true, 1.0, phases);
    srv_metrics_model_counts(m, "model:t5", &c);
    assert_int_equal(c.success, 1);
    assert_int_equal(c.fail, 1);
    assert_int_equal(c.success_ns, 500000000);
    assert_int_equal(c.phase_ns[3], 4000000);
    srv_metrics_model_counts(m, "t5", &c);
    assert_int_equal(c.success, 1);
    assert_int_equal(c.success_ns, 1000000000);
    srv_metrics_model_counts(m, "model:gemma-2.b", &c);
    assert_int_equal(c.success + c.fail + c.last_ms, 0);
    srv_metrics_model_counts(m, "model:nope", &c);
    assert_int_equal(c.success, 0);

    char *text = srv_metrics_render(m, NULL);
    check_exposition(text);
    assert_true(has_line(text, "posattn_v2_inferences_total{model=\"t5\",outcome=\"success\"} 1"));
    assert_true(has_line(text, "posattn_v2_inferences_total{model=\"t5\",outcome=\"fail\"} 1"));
    assert_true(has_line(text, "posattn_v2_inferences_total{scheme=\"t5\",outcome=\"success\"} 1"));
    assert_true(has_line(text,
                         "posattn_v2_inference_seconds_total{model=\"t5\",outcome=\"success\"} "
                         "0.500000000"));
    assert_true(has_line(
        text, "posattn_v2_phase_seconds_total{model=\"t5\",phase=\"compute_output\"} 0.004000000"));
    assert_null(strstr(text, "gemma-2.b")); /* none asked for yet */
    free(text);
    srv_metrics_free(m);
}

static void test_concurrent_updates(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, hammer, m), 0);
    for (int t = 0; t < THREADS; t++) {
        void *failed = NULL;
        pthread_join(th[t], &failed);
        assert_null(failed);
    }

    char *text = srv_metrics_render(m, NULL);
    check_exposition(text);
    double total = 0;
    const char *eps[2] = {"attention", "encode"};
    const char *codes[2] = {"200", "400"};
    for (int e = 0; e < 2; e++)
        for (int c = 0; c < 2; c++) {
            char series[128];
            snprintf(series, sizeof series, "posattn_requests_total{endpoint=\"%s\",code=\"%s\"}",
                     eps[e], codes[c]);
            total += sample(text, series);
        }
    assert_true(total == THREADS * ROUNDS);
    assert_true(sample(text, "posattn_request_duration_seconds_count{endpoint=\"attention\"}") +
                    sample(text, "posattn_request_duration_seconds_count{endpoint=\"encode\"}") ==
                THREADS * ROUNDS);
    assert_true(sample(text, "posattn_queue_duration_seconds_count") == THREADS * ROUNDS);
    assert_true(sample(text, "posattn_items_total{scheme=\"alibi\"}") == THREADS * ROUNDS);
    assert_true(sample(text, "posattn_request_bytes_total") == 3.0 * THREADS * ROUNDS);
    assert_true(sample(text, "posattn_response_bytes_total") == 5.0 * THREADS * ROUNDS);
    /* 0.001 s exactly, THREADS*ROUNDS times. */
    assert_true(
        fabs(sample(text, "posattn_queue_duration_seconds_sum") - 0.001 * THREADS * ROUNDS) < 1e-6);
    assert_int_equal(srv_metrics_queue_depth(m), 0);
    assert_int_equal(srv_metrics_in_flight(m), THREADS * ROUNDS);
    free(text);
    srv_metrics_free(m);
}

/* Session steps: a histogram by scheme, each observed once; none shown
 * before the first. */
static void test_session_steps(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    char *text = srv_metrics_render(m, NULL);
    assert_true(has_line(text, "# TYPE posattn_session_step_duration_seconds histogram"));
    assert_null(strstr(text, "posattn_session_step_duration_seconds_count"));
    free(text);
    srv_metrics_session_step(m, "rope", 0.002);
    srv_metrics_session_step(m, "rope", 0.0004);
    srv_metrics_session_step(m, "alibi", 0.3);
    srv_metrics_session_step(m, NULL, 0.1); /* "other" */
    text = srv_metrics_render(m, NULL);
    check_exposition(text);
    assert_true(sample(text, "posattn_session_step_duration_seconds_count{scheme=\"rope\"}") == 2);
    assert_true(sample(text, "posattn_session_step_duration_seconds_bucket{scheme=\"rope\","
                             "le=\"0.0005\"}") == 1);
    assert_true(sample(text, "posattn_session_step_duration_seconds_bucket{scheme=\"rope\","
                             "le=\"0.0025\"}") == 2);
    assert_true(has_line(text, "posattn_session_step_duration_seconds_sum{scheme=\"rope\"} "
                               "0.002400000"));
    assert_true(sample(text, "posattn_session_step_duration_seconds_count{scheme=\"alibi\"}") == 1);
    assert_true(sample(text, "posattn_session_step_duration_seconds_count{scheme=\"other\"}") == 1);
    /* A step is not a compute task: the item counters are the workers'. */
    assert_null(strstr(text, "posattn_items_total{"));
    free(text);
    srv_metrics_free(m);
}

/* The sessions' series (store/kv_cache.h), read from the cache at each
 * render; absent without a cache. */
/* The probe's ceilings as gauges (none without a probe) and the items'
 * fractions of peak as a summary by scheme. */
static void test_machine_and_fraction_of_peak(void **state)
{
    srv_metrics *m = srv_metrics_new();
    srv_machine mc;
    char *text;
    (void)state;
    memset(&mc, 0, sizeof mc);
    mc.workers = mc.threads = 2;
    srv_metrics_set_machine(m, &mc); /* not probed: no gauges */
    text = srv_metrics_render(m, NULL);
    check_exposition(text);
    assert_null(strstr(text, "posattn_machine_"));
    assert_null(strstr(text, "posattn_fraction_of_peak_count"));
    free(text);
    mc.probed = true;
    mc.gflops_1 = 91.5, mc.gflops_n = 183.25, mc.read_gbps_1 = 40, mc.read_gbps_n = 52.5;
    srv_metrics_fraction_of_peak(m, "rope", 0.25);
    srv_metrics_fraction_of_peak(m, "rope", 0.5);
    srv_metrics_fraction_of_peak(m, "alibi", 0.125);
    srv_metrics_fraction_of_peak(m, "rope", -1); /* not a fraction: ignored */
    text = srv_metrics_render(m, NULL);
    check_exposition(text);
    assert_true(has_line(text, "posattn_machine_gflops{dtype=\"f32\",threads=\"1\"} 91.500"));
    assert_true(has_line(text, "posattn_machine_gflops{dtype=\"f32\",threads=\"2\"} 183.250"));
    assert_true(has_line(text, "posattn_machine_read_gbps{threads=\"1\"} 40.000"));
    assert_true(has_line(text, "posattn_machine_read_gbps{threads=\"2\"} 52.500"));
    assert_true(has_line(text, "posattn_fraction_of_peak_sum{scheme=\"rope\"} 0.750000"));
    assert_true(has_line(text, "posattn_fraction_of_peak_count{scheme=\"rope\"} 2"));
    assert_true(has_line(text, "posattn_fraction_of_peak_sum{scheme=\"alibi\"} 0.125000"));
    assert_true(has_line(text, "posattn_fraction_of_peak_count{scheme=\"alibi\"} 1"));
    free(text);
    srv_metrics_free(m);
}

static void test_sessions(void **state)
{
    (void)state;
    srv_metrics *m = srv_metrics_new();
    srv_kv_cache *c =
        srv_kv_cache_new(&(srv_kv_config){.budget_bytes = 4096, .block_tokens = 16, .ttl_s = 0});
    pa_scheme none;
    char id[SRV_KV_ID_LEN], fork_id[SRV_KV_ID_LEN];
    srv_kv_err e;
    float k[20 * 2], v[20 * 2];
    char *text = srv_metrics_render(m, NULL);
    assert_null(strstr(text, "posattn_sessions"));
    free(text);

    pa_scheme_init(&none, PA_SCHEME_NONE);
    for (int i = 0; i < 40; i++)
        k[i] = v[i] = (float)i;
    srv_kv_spec spec = {.scheme = &none,
                        .num_kv_heads = 1,
                        .head_dim = 2,
                        .v_head_dim = 2,
                        .max_tokens = 16,
                        .eviction = SRV_KV_EVICT_WINDOW,
                        .window = 12,
                        .sinks = 4};
    assert_true(srv_kv_create(c, &spec, id, &e));
    assert_true(srv_kv_append(c, id, k, v, 20, NULL, &e));
    assert_true(srv_kv_fork(c, id, fork_id, &e));
    srv_metrics_set_sessions(m, c);
    text = srv_metrics_render(m, NULL);
    assert_non_null(text);
    check_exposition(text);
    assert_true(sample(text, "posattn_sessions") == 2);
    assert_true(sample(text, "posattn_cache_bytes{dtype=\"f32\"}") == 256);
    assert_true(sample(text, "posattn_cache_bytes{dtype=\"bf16\"}") == 0);
    assert_true(sample(text, "posattn_cache_budget_bytes") == 4096);
    assert_true(sample(text, "posattn_cache_blocks{state=\"used\"}") == 1);
    assert_true(sample(text, "posattn_cache_blocks{state=\"shared\"}") == 1);
    assert_true(sample(text, "posattn_cache_evictions_total{reason=\"ttl\"}") == 0);
    assert_true(sample(text, "posattn_cache_evictions_total{reason=\"pool_full\"}") == 0);
    assert_true(sample(text, "posattn_session_tokens_appended_total") == 20);
    assert_true(sample(text, "posattn_session_tokens_evicted_total") == 4);
    free(text);
    srv_metrics_free(m);
    srv_kv_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_render),
        cmocka_unit_test(test_requests_and_labels),
        cmocka_unit_test(test_compute_queue_and_gauges),
        cmocka_unit_test(test_model_counters),
        cmocka_unit_test(test_named_model_counters),
        cmocka_unit_test(test_concurrent_updates),
        cmocka_unit_test(test_sessions),
        cmocka_unit_test(test_session_steps),
        cmocka_unit_test(test_machine_and_fraction_of_peak),
    };
    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
