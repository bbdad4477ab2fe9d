/* runner.c - posattn-load's driver: a closed loop of `concurrency` requests
 * in flight on one libcurl multi handle, a warm-up, then the measured phase,
 * with the server's /metrics read before and after it. With --model the
 * bodies cycle through the chosen layers, and each answer is counted for
 * its layer as well as for the phase.
 */
#include "load.h"

#include <curl/curl.h>
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t load_interrupted = 0;

double load_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define HEAD_MAX 512
#define TAIL_MAX 32
#define ITEM_ERR_MAX 200
#define N_VARIANTS 4
/* Bodies above this size are built once: memory, not variety, matters then. */
#define VARIANT_LIMIT (16u << 20)

static const char ITEM_ERR_PAT[] = "\"error\":{";

/* One request in flight. The answer is not kept: only its first bytes (for
 * an error message), its last bytes (for "errors":false) and the text after
 * the first item "error":{ (for a sample of an item's error). */
typedef struct {
    CURL *h;
    char head[HEAD_MAX + 1];
    size_t head_len;
    char tail[TAIL_MAX + 1];
    size_t tail_len;
    size_t pat_state;
    char item_err[ITEM_ERR_MAX + 1];
    size_t item_err_len;
    double bytes_rx;
    char errbuf[CURL_ERROR_SIZE];
    int layer; /* with --model: the index of the layer the body in flight is for */
    load_roof_sample roof; /* from the answer's Server-Timing (roofline.c) */
} slot;

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    slot *s = arg;
    size_t len = size * n;
    s->bytes_rx += (double)len;
    if (s->head_len < HEAD_MAX) {
        size_t take = len < HEAD_MAX - s->head_len ? len : HEAD_MAX - s->head_len;
        memcpy(s->head + s->head_len, data, take);
        s->head_len += take;
        s->head[s->head_len] = 0;
    }
    if (len >= TAIL_MAX) {
        memcpy(s->tail, data + len - TAIL_MAX, TAIL_MAX);
        s->tail_len = TAIL_MAX;
    } else {
        size_t keep = s->tail_len + len > TAIL_MAX ? TAIL_MAX - len : s->tail_len;
        memmove(s->tail, s->tail + s->tail_len - keep, keep);
        memcpy(s->tail + keep, data, len);
        s->tail_len = keep + len;
    }
    s->tail[s->tail_len] = 0;
    for (size_t i = 0; i < len && s->item_err_len < ITEM_ERR_MAX; i++) {
        if (s->pat_state == 0) {
            /* The pattern starts with a quote: skip to the next one at
             * memchr's speed (a base64 answer is mostly a long string). */
            const char *q = memchr(data + i, ITEM_ERR_PAT[0], len - i);
            if (q == NULL)
                break;
            i = (size_t)(q - data);
        }
        if (s->pat_state == sizeof ITEM_ERR_PAT - 1) {
            s->item_err[s->item_err_len++] = data[i];
            s->item_err[s->item_err_len] = 0;
        } else if (data[i] == ITEM_ERR_PAT[s->pat_state]) {
            s->pat_state++;
        } else {
            s->pat_state = data[i] == ITEM_ERR_PAT[0];
        }
    }
    return len;
}

/* The answer's headers: Server-Timing's compute time and roofline entry. */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    load_roofline_header(data, size * n, &((slot *)arg)->roof);
    return size * n;
}

static void slot_reset(slot *s)
{
    memset(&s->roof, 0, sizeof s->roof);
    s->head_len = s->tail_len = s->pat_state = s->item_err_len = 0;
    s->head[0] = s->tail[0] = s->item_err[0] = 0;
    s->errbuf[0] = 0;
}

static void count_status_in(load_status_count *st, int *n, const char *key, const char *sample)
{
    int i;
    for (i = 0; i < *n; i++)
        if (!strcmp(st[i].key, key))
            break;
    if (i == *n) {
        if (*n == LOAD_MAX_STATUS)
            i = LOAD_MAX_STATUS - 1; /* fold the rest into the last key */
        else {
            (*n)++;
            snprintf(st[i].key, sizeof st[i].key, "%s", key);
            snprintf(st[i].sample, sizeof st[i].sample, "%.150s", sample);
        }
    }
    st[i].count++;
}

/* An error of the phase, and of the layer ly when there is one. */
static void count_status(load_result *r, load_layer_result *ly, const char *key, const char *sample)
{
    count_status_in(r->status, &r->n_status, key, sample);
    if (ly) {
        ly->errors++;
        count_status_in(ly->status, &ly->n_status, key, sample);
    }
}

/* "CODE: message" from an error answer, or its first bytes. */
static void error_sample(const char *body, char *out, size_t outlen)
{
    cJSON *j = cJSON_Parse(body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    if (cJSON_IsString(code) && cJSON_IsString(msg))
        snprintf(out, outlen, "%s: %s", code->valuestring, msg->valuestring);
    else
        snprintf(out, outlen, "%.*s", (int)(outlen - 1), body);
    cJSON_Delete(j);
}

/* Sorts one finished request into r (NULL during warm-up). */
static void classify(slot *s, CURLcode rc, load_result *r)
{
    long code = 0;
    char key[16], sample[160];
    curl_off_t total_us = 0;
    if (!r)
        return;
    load_layer_result *ly = r->layers ? &r->layers[s->layer] : NULL;
    r->sent++;
    r->bytes_received += s->bytes_rx;
    if (ly) {
        ly->sent++;
        r->bytes_sent += (double)ly->body_bytes;
    }
    if (rc != CURLE_OK) {
        r->errors++;
        count_status(r, ly, "transport", s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
        return;
    }
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(s->h, CURLINFO_TOTAL_TIME_T, &total_us);
    if (code == 200 && strstr(s->tail, "\"errors\":false")) {
        r->ok++;
        load_hist_record(&r->hist, (uint64_t)total_us);
        load_roofline_add(&r->roof, &s->roof);
        if (ly) {
            ly->ok++;
            load_hist_record(&ly->hist, (uint64_t)total_us);
        }
        return;
    }
    r->errors++;
    if (code == 200) {
        snprintf(sample, sizeof sample, "{%.150s", s->item_err);
        count_status(r, ly, "item_error", sample);
        return;
    }
    snprintf(key, sizeof key, "%ld", code);
    error_sample(s->head, sample, sizeof sample);
    count_status(r, ly, key, sample);
}

typedef struct {
    const load_config *c;
    CURLM *m;
    slot *slots;
    int n;
    struct curl_slist *headers;
    char url[1024];
    /* Body b is for layer b % n_layers (with --model; else n_layers is 1),
     * so consecutive requests take the layers in turn. */
    char **bodies;
    size_t *body_len;
    int n_bodies, n_layers;
    unsigned long next_body;
} driver;

static void start(driver *d, slot *s)
{
    int b = (int)(d->next_body++ % (unsigned long)d->n_bodies);
    slot_reset(s);
    s->layer = b % d->n_layers;
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, d->bodies[b]);
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->body_len[b]);
    curl_multi_add_handle(d->m, s->h);
}

static void progress(const char *label, double elapsed, long sent, double rate, long errors)
{
    fprintf(stderr, "\r\033[K%s  %.1f s  %ld requests  %.0f req/s  %ld errors", label, elapsed,
            sent, rate, errors);
    fflush(stderr);
}

/* Keeps d->n requests in flight until `seconds` have passed (if > 0) and
 * `count` requests were started (if > 0), then waits for the ones in flight.
 * Results go to r (NULL: warm-up). */
static void run_loop(driver *d, double seconds, long count, load_result *r, const char *label)
{
    double t0 = load_now_s(), last_print = t0, next_print = t0 + 0.5;
    long started = 0, last_sent = 0, in_flight = 0;
    int stop = 0;

    for (int i = 0; i < d->n && (count <= 0 || started < count); i++) {
        start(d, &d->slots[i]);
        started++;
        in_flight++;
    }
    while (in_flight > 0) {
        int running;
        curl_multi_perform(d->m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(d->m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            slot *s = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            CURLcode rc = msg->data.result;
            curl_multi_remove_handle(d->m, msg->easy_handle);
            in_flight--;
            classify(s, rc, r);
            double now = load_now_s();
            if (load_interrupted || (seconds > 0 && now - t0 >= seconds) ||
                (count > 0 && started >= count) || (seconds <= 0 && count <= 0))
                stop = 1;
            if (!stop) {
                start(d, s);
                started++;
                in_flight++;
            }
        }
        if (in_flight == 0)
            break;
        curl_multi_poll(d->m, NULL, 0, 50, NULL);
        double now = load_now_s();
        if (r && d->c->progress && now >= next_print) {
            progress(label, now - t0, r->sent, (double)(r->sent - last_sent) / (now - last_print),
                     r->errors);
            last_print = now;
            last_sent = r->sent;
            next_print = now + 0.5;
        }
    }
    if (r) {
        r->elapsed_s = load_now_s() - t0;
        if (d->c->progress)
            fprintf(stderr, "\r\033[K");
    }
}

/* The value of a series line whose first n bytes matched: right after them
 * when they end in the labels' "} ", else after the labels that follow. */
static double series_value(const char *line, size_t n)
{
    const char *v = line + n;
    if (n < 2 || line[n - 2] != '}') {
        v = strstr(v, "} ");
        if (v == NULL)
            return 0;
        v += 2;
    }
    return strtod(v, NULL);
}

int load_metrics_read(const load_config *c, const char *label, load_server_split *out)
{
    char want_sum[160], want_count[160];
    long code = 0;
    char *body = load_http_get(c, "/metrics", 0, &code);
    if (!body || code != 200) {
        free(body);
        return -1;
    }
    memset(out, 0, sizeof *out);
    /* Without a label every compute series counts: the prefix ends at "{". */
    if (label) {
        snprintf(want_sum, sizeof want_sum, "posattn_compute_duration_seconds_sum{scheme=\"%s\"} ",
                 label);
        snprintf(want_count, sizeof want_count,
                 "posattn_compute_duration_seconds_count{scheme=\"%s\"} ", label);
    } else {
        snprintf(want_sum, sizeof want_sum, "posattn_compute_duration_seconds_sum{");
        snprintf(want_count, sizeof want_count, "posattn_compute_duration_seconds_count{");
    }
    static const char QS[] = "posattn_queue_duration_seconds_sum ";
    static const char QC[] = "posattn_queue_duration_seconds_count ";
    static const char RS[] = "posattn_request_duration_seconds_sum{endpoint=\"attention\"} ";
    static const char RC[] = "posattn_request_duration_seconds_count{endpoint=\"attention\"} ";
    int found = 0;
    for (char *line = body; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (!strncmp(line, QS, sizeof QS - 1))
            out->queue_sum_s = strtod(line + sizeof QS - 1, NULL), found |= 1;
        else if (!strncmp(line, QC, sizeof QC - 1))
            out->queue_count = strtod(line + sizeof QC - 1, NULL), found |= 2;
        else if (!strncmp(line, RS, sizeof RS - 1))
            out->request_sum_s = strtod(line + sizeof RS - 1, NULL);
        else if (!strncmp(line, RC, sizeof RC - 1))
            out->request_count = strtod(line + sizeof RC - 1, NULL);
        else if (!strncmp(line, want_sum, strlen(want_sum)))
            out->compute_sum_s += series_value(line, strlen(want_sum));
        else if (!strncmp(line, want_count, strlen(want_count)))
            out->compute_count += series_value(line, strlen(want_count));
        line = nl ? nl + 1 : NULL;
    }
    free(body);
    /* A scheme that has not run yet has no compute series: zeros are right. */
    out->valid = found == 3;
    return out->valid ? 0 : -1;
}

/* One body for layer k (or the scheme when there is no model). */
static char *build_body(const load_config *c, const char *scheme, int k, int length, unsigned v,
                        size_t *len, char *err, size_t errlen)
{
    if (c->model)
        return load_payload_build_layer(c, &c->model->layers[k], length, v, len, err, errlen);
    return load_payload_build(c, scheme, length, v, len, err, errlen);
}

int load_run_phase(const load_config *c, const char *scheme, int length, int concurrency,
                   load_result *r)
{
    driver d = {0};
    char err[256], label[96], metric_label[32];
    int rc = -1, n_layers = c->model ? c->model->n_layers : 1;
    size_t first_bytes = 0;

    memset(r, 0, sizeof *r);
    r->scheme = c->model ? c->model->name : scheme;
    r->length = length;
    r->concurrency = concurrency;
    load_hist_init(&r->hist);
    if (c->model) {
        r->layers = calloc((size_t)n_layers, sizeof *r->layers);
        if (!r->layers)
            return -1;
        r->n_layers = n_layers;
        for (int k = 0; k < n_layers; k++)
            load_hist_init(&r->layers[k].hist);
    }

    d.c = c;
    d.n = concurrency;
    d.n_layers = n_layers;
    d.bodies = calloc((size_t)N_VARIANTS * (size_t)n_layers, sizeof *d.bodies);
    d.body_len = calloc((size_t)N_VARIANTS * (size_t)n_layers, sizeof *d.body_len);
    if (!d.bodies || !d.body_len)
        goto out;
    /* Variant 0 of every layer, then the other variants while the first
     * ones stay small: memory, not variety, matters for large bodies. */
    d.n_bodies = n_layers;
    for (int b = 0; b < d.n_bodies; b++) {
        int k = b % n_layers;
        d.bodies[b] = build_body(c, scheme, k, length, (unsigned)(b / n_layers), &d.body_len[b],
                                 err, sizeof err);
        if (!d.bodies[b]) {
            fprintf(stderr, "posattn-load: %s\n", err);
            goto out;
        }
        if (b < n_layers) {
            first_bytes += d.body_len[b];
            if (r->layers)
                r->layers[k].body_bytes = d.body_len[b];
        }
        if (b == n_layers - 1 && first_bytes <= VARIANT_LIMIT)
            d.n_bodies = N_VARIANTS * n_layers;
    }
    r->body_bytes = first_bytes / (size_t)n_layers;

    d.m = curl_multi_init();
    d.slots = calloc((size_t)concurrency, sizeof *d.slots);
    if (!d.m || !d.slots)
        goto out;
    curl_multi_setopt(d.m, CURLMOPT_MAXCONNECTS, (long)concurrency + 4);
    d.headers = curl_slist_append(NULL, "Content-Type: application/json");
    /* Without this curl waits for 100-continue on large bodies. */
    d.headers = curl_slist_append(d.headers, "Expect:");
    if (c->api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->api_key);
        d.headers = curl_slist_append(d.headers, auth);
    }
    snprintf(d.url, sizeof d.url, "%s/v1/attention", c->url);
    for (int i = 0; i < concurrency; i++) {
        slot *s = &d.slots[i];
        s->h = curl_easy_init();
        if (!s->h)
            goto out;
        load_curl_tls(s->h, c);
        curl_easy_setopt(s->h, CURLOPT_URL, d.url);
        curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, d.headers);
        curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(s->h, CURLOPT_TIMEOUT, 300L);
        curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(s->h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(s->h, CURLOPT_HEADERDATA, s);
        curl_easy_setopt(s->h, CURLOPT_PRIVATE, (char *)s);
        curl_easy_setopt(s->h, CURLOPT_ERRORBUFFER, s->errbuf);
    }

    snprintf(label, sizeof label, "[%s L=%d c=%d]", r->scheme, length, concurrency);
    if (c->warmup_s > 0)
        run_loop(&d, c->warmup_s, 0, NULL, label);

    /* A model's layers may have schemes of several types: all series count. */
    const char *ml = NULL;
    if (!c->model) {
        snprintf(metric_label, sizeof metric_label, "%.*s", (int)strcspn(scheme, ":"), scheme);
        ml = metric_label;
    }
    load_server_split before = {0}, after = {0};
    int have_before = load_metrics_read(c, ml, &before) == 0;
    run_loop(&d, c->duration_s, c->requests, r, label);
    if (!c->model) /* with a model, classify adds each layer's body */
        r->bytes_sent = (double)r->sent * (double)r->body_bytes;
    if (have_before && load_metrics_read(c, ml, &after) == 0) {
        r->server.valid = 1;
        r->server.queue_sum_s = after.queue_sum_s - before.queue_sum_s;
        r->server.queue_count = after.queue_count - before.queue_count;
        r->server.compute_sum_s = after.compute_sum_s - before.compute_sum_s;
        r->server.compute_count = after.compute_count - before.compute_count;
        r->server.request_sum_s = after.request_sum_s - before.request_sum_s;
        r->server.request_count = after.request_count - before.request_count;
    }
    rc = 0;
out:
    for (int i = 0; d.slots && i < concurrency; i++)
        if (d.slots[i].h)
            curl_easy_cleanup(d.slots[i].h);
    free(d.slots);
    if (d.m)
        curl_multi_cleanup(d.m);
    curl_slist_free_all(d.headers);
    for (int b = 0; d.bodies && b < N_VARIANTS * n_layers; b++)
        free(d.bodies[b]);
    free(d.bodies);
    free(d.body_len);
    if (rc != 0) {
        free(r->layers);
        r->layers = NULL;
        r->n_layers = 0;
    }
    return rc;
}
