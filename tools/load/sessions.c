/* sessions.c - posattn-load's --sessions mode: N concurrent sequences, each
 * a server-side KV cache (docs/sessions.md) that is created (or forked from
 * a shared prefix), prefilled with L0 tokens, decoded T steps of one
 * /v1/attention request each, and deleted. Its flags and checks, the driver
 * (one libcurl multi handle, a request in flight per sequence) and the
 * /metrics and GET /v1/sessions readings; the reports are
 * sessions_report.c's.
 */
#include "sessions.h"

#include <curl/curl.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char load_sessions_usage[] =
    "  --sessions N         sessions mode (docs/sessions.md): N concurrent sequences\n"
    "                       (1..1024), each creates a session (--kv-heads, --head-dim),\n"
    "                       prefills --prompt tokens (one attention item with an append\n"
    "                       of L0 tokens, q of L0 rows, causal), decodes --steps steps\n"
    "                       (each one /v1/attention request: q [1, heads, head-dim] and\n"
    "                       an append of one token) and deletes it. Reports step\n"
    "                       latency by cache length (powers of two), decode tokens/s,\n"
    "                       session memory after prefill and at the end, evictions and\n"
    "                       errors by code; a phase per scheme (rope2d*, cope,\n"
    "                       sinusoidal and learned cannot keep a session: skipped).\n"
    "                       Exits 3 when a request failed (counted in the report).\n"
    "                       N is the concurrency; --lengths, --concurrency, --duration,\n"
    "                       --requests and --warmup do not apply\n"
    "  --prompt L0          tokens prefilled per sequence (default 64)\n"
    "  --steps T            decode steps per sequence (default 16)\n"
    "  --eviction E         none (default: max_tokens L0 + T) or window:W:S[:reposition]\n"
    "                       (StreamingLLM: S sinks and the last W tokens)\n"
    "  --fork-share F       0..1: that fraction of the sequences fork one shared prefix\n"
    "                       session (prefilled once) instead of prefilling their own\n"
    "  --prefill-concurrency P  at most P sequences create and prefill at a time\n"
    "                       (default all N): a server's queue holds --queue-depth\n"
    "                       tasks, and N long prefills at once may pass it (OVERLOADED)\n"
    "  --decode-seconds S   decode for S seconds: a sequence sends no step once S\n"
    "                       seconds of the decode stage have passed (its steps left\n"
    "                       are reported as cut); --steps stays the most per sequence\n";

static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int load_sessions_flag(load_config *c, const char *name, const char *val, char *err, size_t errlen)
{
    if (!strcmp(name, "--sessions")) {
        if (parse_int(val, 1, LOAD_MAX_CONCURRENCY, &c->sessions) == 0)
            return 1;
        snprintf(err, errlen, "--sessions %s: 1..%d sequences", val, LOAD_MAX_CONCURRENCY);
    } else if (!strcmp(name, "--prompt")) {
        if (parse_int(val, 0, 1 << 20, &c->sess_prompt) == 0)
            return 1;
        snprintf(err, errlen, "--prompt %s: 0..1048576 tokens", val);
    } else if (!strcmp(name, "--steps")) {
        if (parse_int(val, 0, 1 << 20, &c->sess_steps) == 0)
            return 1;
        snprintf(err, errlen, "--steps %s: 0..1048576 steps", val);
    } else if (!strcmp(name, "--eviction")) {
        char buf[96], *save, *w, *s, *r;
        snprintf(buf, sizeof buf, "%s", val);
        if (!strcmp(val, "none")) {
            c->sess_window = 0;
            return 1;
        }
        if (strncmp(buf, "window:", 7) == 0 && (w = strtok_r(buf + 7, ":", &save)) &&
            (s = strtok_r(NULL, ":", &save)) && parse_int(w, 1, 1 << 20, &c->sess_window) == 0 &&
            parse_int(s, 0, 1 << 20, &c->sess_sinks) == 0) {
            r = strtok_r(NULL, ":", &save);
            c->sess_reposition = r != NULL && !strcmp(r, "reposition");
            if ((r == NULL || c->sess_reposition) && strtok_r(NULL, ":", &save) == NULL)
                return 1;
        }
        snprintf(err, errlen, "--eviction %s: none or window:W:S[:reposition] (W >= 1, S >= 0)",
                 val);
    } else if (!strcmp(name, "--prefill-concurrency")) {
        if (parse_int(val, 1, LOAD_MAX_CONCURRENCY, &c->sess_prefill_conc) == 0)
            return 1;
        snprintf(err, errlen, "--prefill-concurrency %s: 1..%d", val, LOAD_MAX_CONCURRENCY);
    } else if (!strcmp(name, "--decode-seconds")) {
        char *end;
        double s = strtod(val, &end);
        if (end != val && !*end && s > 0 && s <= 86400) {
            c->sess_decode_s = s;
            return 1;
        }
        snprintf(err, errlen, "--decode-seconds %s: seconds, more than 0 (at most 86400)", val);
    } else if (!strcmp(name, "--fork-share")) {
        char *end;
        double f = strtod(val, &end);
        if (end != val && !*end && f >= 0 && f <= 1) {
            c->fork_share = f;
            return 1;
        }
        snprintf(err, errlen, "--fork-share %s: a fraction 0..1", val);
    } else {
        return 0;
    }
    return -1;
}

/* The schemes a session refuses (server/store/kv_cache.c, check_spec). */
static int scheme_keeps_session(const char *s)
{
    return strncmp(s, "rope2d", 6) != 0 && strcmp(s, "cope") != 0 && strcmp(s, "sinusoidal") != 0 &&
           strcmp(s, "learned") != 0;
}

int load_sessions_check(load_config *c, char *err, size_t errlen)
{
    int kept = 0;
    if (c->model_name || c->layer || c->packed > 1 || c->batch_seq > 1 || c->differential ||
        c->mla_rope_dim > 0 || c->dump_body_path || c->csv_path || c->svg_path) {
        snprintf(err, errlen, "--sessions: not with %s",
                 c->model_name       ? "--model"
                 : c->layer          ? "--layer"
                 : c->packed > 1     ? "--packed"
                 : c->batch_seq > 1  ? "--batch-seq"
                 : c->differential   ? "--differential"
                 : c->mla_rope_dim   ? "--mla"
                 : c->dump_body_path ? "--dump-body"
                 : c->csv_path       ? "--csv (the sessions report is --json and --html)"
                                     : "--svg (the sessions report is --json and --html)");
        return -1;
    }
    if (c->fork_share > 0 && c->sess_prompt == 0) {
        snprintf(err, errlen, "%s", "--fork-share needs a prefix to share: --prompt 1 or more");
        return -1;
    }
    if ((double)c->sess_prompt * c->head_dim * (double)(c->heads + 2 * c->kv_heads) *
            (c->encoding == LOAD_ENC_B64 ? 5.34 : 8.0) >
        512.0 * 1024 * 1024) {
        snprintf(err, errlen, "%s",
                 "--sessions: the prefill body would exceed 512 MB: lower --prompt, --heads or "
                 "--head-dim");
        return -1;
    }
    for (int i = 0; i < c->n_schemes; i++) {
        if (scheme_keeps_session(c->schemes[i])) {
            c->schemes[kept++] = c->schemes[i];
            continue;
        }
        fprintf(stderr,
                "posattn-load: --sessions: skipping scheme %s (a session cannot keep it: "
                "rope2d, cope, sinusoidal and learned are refused by POST /v1/sessions)\n",
                c->schemes[i]);
        free(c->schemes[i]);
    }
    c->n_schemes = kept;
    if (kept == 0) {
        snprintf(err, errlen, "%s",
                 "--sessions: none of --schemes can keep a session (rope2d, cope, sinusoidal, "
                 "learned cannot)");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- driver */

#define HEAD_MAX 4096
#define TAIL_MAX 32
#define N_STEP_VARIANTS 4

typedef enum {
    ST_IDLE,
    ST_CREATE,
    ST_FORK,
    ST_PREFILL,
    ST_STEP,
    ST_DELETE,
} seq_state;

/* One sequence: its session and the request it has in flight. */
typedef struct {
    CURL *h;
    seq_state st;
    int fork; /* forks the shared prefix instead of prefilling */
    char id[72];
    int prefilled; /* its cache holds the prompt */
    int step;      /* decode steps sent */
    int stop;      /* its decode is over (404 or transport error) */
    char *body;
    char head[HEAD_MAX + 1];
    size_t head_len;
    char tail[TAIL_MAX + 1];
    size_t tail_len;
    char errbuf[CURL_ERROR_SIZE];
} seq;

typedef struct {
    const load_config *c;
    const char *scheme;
    CURLM *m;
    seq *seqs;
    int n;
    struct curl_slist *headers;
    char *prefill_tail, *step_tail[N_STEP_VARIANTS];
    size_t prefill_len, step_len[N_STEP_VARIANTS];
    const char *prefix_id; /* the shared prefix's session, or NULL */
    double decode_end;     /* > 0: no step is sent after this time (load_now_s) */
    load_sess_result *r;
} driver;

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    seq *s = arg;
    size_t len = size * n;
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
    return len;
}

/* Counts an error under its code ("CACHE_FULL", "503", "transport"),
 * keeping the first message of each. */
static void count_error(load_sess_result *r, const char *key, const char *what, const char *msg)
{
    int i;
    for (i = 0; i < r->n_errors; i++)
        if (!strcmp(r->errors[i].key, key))
            break;
    if (i == r->n_errors) {
        if (r->n_errors == LOAD_MAX_STATUS)
            i = LOAD_MAX_STATUS - 1; /* fold the rest into the last key */
        else {
            r->n_errors++;
            snprintf(r->errors[i].key, sizeof r->errors[i].key, "%s", key);
            snprintf(r->errors[i].sample, sizeof r->errors[i].sample, "%s: %.180s", what, msg);
        }
    }
    r->errors[i].count++;
    r->n_failed++;
}

/* The error of an answer: {"error":{...}} or the first item's. */
static void error_of(const char *head, long code, char *key, size_t keylen, char *msg,
                     size_t msglen)
{
    cJSON *j = cJSON_Parse(head);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e == NULL) {
        const cJSON *outs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
        e = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(outs, 0), "error");
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "code");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    if (cJSON_IsString(k)) {
        snprintf(key, keylen, "%s", k->valuestring);
        snprintf(msg, msglen, "%s", cJSON_IsString(m) ? m->valuestring : "");
    } else {
        snprintf(key, keylen, "%ld", code);
        snprintf(msg, msglen, "%.150s", head);
    }
    cJSON_Delete(j);
}

/* The tokens a session keeps after `appended` tokens. */
static long kept_tokens(const load_config *c, long appended)
{
    long cap = (long)c->sess_window + c->sess_sinks;
    return c->sess_window > 0 && appended > cap ? cap : appended;
}

int load_sess_bucket(long tokens)
{
    int b = 0;
    while (b < LOAD_SESS_BUCKETS - 1 && (tokens >> (b + 1)) > 0)
        b++;
    return b;
}

/* Starts s's request for its state; 0, or -1 when it cannot (no memory). */
static int start(driver *d, seq *s)
{
    const load_config *c = d->c;
    char url[1200];
    const char *tail = NULL;
    size_t tail_len = 0, len = 0;
    free(s->body);
    s->body = NULL;
    s->head_len = s->tail_len = 0;
    s->head[0] = s->tail[0] = s->errbuf[0] = 0;
    curl_easy_reset(s->h);
    load_curl_tls(s->h, c);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_TIMEOUT, 300L);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, (char *)s);
    curl_easy_setopt(s->h, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, d->headers);
    switch (s->st) {
    case ST_CREATE:
        snprintf(url, sizeof url, "%s/v1/sessions", c->url);
        s->body = load_payload_session_create(c, d->scheme, &len);
        break;
    case ST_FORK:
        snprintf(url, sizeof url, "%s/v1/sessions/%s/fork", c->url, d->prefix_id);
        s->body = strdup("{}");
        len = 2;
        break;
    case ST_PREFILL:
    case ST_STEP:
        snprintf(url, sizeof url, "%s/v1/attention", c->url);
        tail = s->st == ST_PREFILL ? d->prefill_tail : d->step_tail[s->step % N_STEP_VARIANTS];
        tail_len = s->st == ST_PREFILL ? d->prefill_len : d->step_len[s->step % N_STEP_VARIANTS];
        {
            static const char PRE[] = "{\"inputs\":[{\"session\":\"";
            size_t idl = strlen(s->id);
            len = sizeof PRE - 1 + idl + tail_len;
            s->body = malloc(len + 1);
            if (s->body) {
                memcpy(s->body, PRE, sizeof PRE - 1);
                memcpy(s->body + sizeof PRE - 1, s->id, idl);
                memcpy(s->body + sizeof PRE - 1 + idl, tail, tail_len + 1);
            }
        }
        break;
    case ST_DELETE:
        snprintf(url, sizeof url, "%s/v1/sessions/%s", c->url, s->id);
        curl_easy_setopt(s->h, CURLOPT_CUSTOMREQUEST, "DELETE");
        break;
    case ST_IDLE:
        return -1;
    }
    if (s->st != ST_DELETE) {
        if (s->body == NULL)
            return -1;
        curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, s->body);
        curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(s->h, CURLOPT_URL, url);
    curl_multi_add_handle(d->m, s->h);
    return 0;
}

/* Sorts s's finished request into the result and sets its next state
 * (ST_IDLE: nothing more in this stage). */
static void finish(driver *d, seq *s, CURLcode rc)
{
    load_sess_result *r = d->r;
    long code = 0;
    curl_off_t us = 0;
    char key[32], msg[200];
    static const char *const WHAT[] = {"idle", "create", "fork", "prefill", "step", "delete"};
    const char *what = WHAT[s->st];
    int ok;
    if (rc != CURLE_OK) {
        count_error(r, "transport", what, s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
        if (s->st == ST_STEP)
            r->steps_failed++, s->stop = 1;
        else if (s->st == ST_PREFILL)
            r->prefills_failed++;
        s->st = ST_IDLE;
        return;
    }
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(s->h, CURLINFO_TOTAL_TIME_T, &us);
    if (s->st == ST_PREFILL || s->st == ST_STEP)
        ok = code == 200 && strstr(s->tail, "\"errors\":false") != NULL;
    else
        ok = code == (s->st == ST_DELETE ? 200 : 201);
    if (!ok) {
        error_of(s->head, code, key, sizeof key, msg, sizeof msg);
        /* A session the server dropped for room or age is already gone:
         * its DELETE has nothing to do (the evictions count it). */
        if (s->st == ST_DELETE && !strcmp(key, "SESSION_NOT_FOUND"))
            r->deletes_gone++;
        else
            count_error(r, key, what, msg);
    }
    switch (s->st) {
    case ST_CREATE:
    case ST_FORK:
        if (ok) {
            cJSON *j = cJSON_Parse(s->head);
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
            if (cJSON_IsString(id) && strlen(id->valuestring) < sizeof s->id)
                snprintf(s->id, sizeof s->id, "%s", id->valuestring);
            cJSON_Delete(j);
        }
        if (s->st == ST_FORK) {
            r->forks_ok += ok && s->id[0];
            s->prefilled = ok && s->id[0];
            s->st = ST_IDLE;
        } else {
            r->creates_ok += ok && s->id[0];
            s->st = ok && s->id[0] ? (d->c->sess_prompt > 0 ? ST_PREFILL : ST_IDLE) : ST_IDLE;
            s->prefilled = s->id[0] && d->c->sess_prompt == 0;
        }
        return;
    case ST_PREFILL:
        if (ok) {
            r->prefills_ok++;
            load_hist_record(&r->prefill_hist, (uint64_t)us);
            s->prefilled = 1;
        } else {
            r->prefills_failed++;
        }
        s->st = ST_IDLE;
        return;
    case ST_STEP: {
        long tokens = kept_tokens(d->c, (long)d->c->sess_prompt + s->step + 1);
        s->step++;
        if (ok) {
            r->steps_ok++;
            load_hist_record(&r->step_hist, (uint64_t)us);
            load_hist_record(&r->bucket[load_sess_bucket(tokens)], (uint64_t)us);
        } else {
            r->steps_failed++;
            /* The session is gone: the steps left would all say so. */
            if (!strcmp(key, "SESSION_NOT_FOUND"))
                s->stop = 1;
        }
        s->st = s->stop || s->step >= d->c->sess_steps ? ST_IDLE : ST_STEP;
        if (s->st == ST_STEP && d->decode_end > 0 && load_now_s() >= d->decode_end) {
            r->steps_cut += d->c->sess_steps - s->step;
            s->st = ST_IDLE;
        }
        return;
    }
    case ST_DELETE:
        /* Dropped by the server meanwhile (room, ttl): nothing left to delete. */
        r->deletes_ok += ok;
        s->id[0] = 0;
        s->st = ST_IDLE;
        return;
    case ST_IDLE:
        return;
    }
}

/* Runs every sequence whose state is not ST_IDLE until all are. */
static int run_stage(driver *d, int max_in_flight)
{
    int in_flight = 0, next = 0;
    /* Sequences start in order, at most max_in_flight of them at a time; a
     * sequence keeps its place until its work in the stage is done. */
    for (;;) {
        while (in_flight < max_in_flight && next < d->n) {
            seq *s = &d->seqs[next++];
            if (s->st == ST_IDLE)
                continue;
            if (load_interrupted && s->st != ST_DELETE) {
                s->st = ST_IDLE;
                continue;
            }
            if (start(d, s) != 0)
                return -1;
            in_flight++;
        }
        if (in_flight == 0)
            break;
        int running, left;
        CURLMsg *msg;
        curl_multi_perform(d->m, &running);
        while ((msg = curl_multi_info_read(d->m, &left)) != NULL) {
            seq *s = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            CURLcode rc = msg->data.result;
            curl_multi_remove_handle(d->m, msg->easy_handle);
            in_flight--;
            finish(d, s, rc);
            if (load_interrupted && s->st != ST_DELETE)
                s->st = ST_IDLE;
            if (s->st != ST_IDLE) {
                if (start(d, s) != 0)
                    return -1;
                in_flight++;
            }
        }
        if (in_flight > 0)
            curl_multi_poll(d->m, NULL, 0, 50, NULL);
    }
    return 0;
}

/* ----------------------------------------------------------- the server */

/* The value of the /metrics line that starts with prefix (labels and the
 * space included); 0 when there is none. */
static double metric(const char *body, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *line = body; line && *line;) {
        if (!strncmp(line, prefix, n))
            return strtod(line + n, NULL);
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    return 0;
}

static int read_counters(const load_config *c, load_sess_counters *out)
{
    long code = 0;
    char *body = load_http_get(c, "/metrics", 0, &code);
    memset(out, 0, sizeof *out);
    if (!body || code != 200) {
        free(body);
        return -1;
    }
    out->evicted_ttl = metric(body, "posattn_cache_evictions_total{reason=\"ttl\"} ");
    out->evicted_pool_full = metric(body, "posattn_cache_evictions_total{reason=\"pool_full\"} ");
    out->tokens_appended = metric(body, "posattn_session_tokens_appended_total ");
    out->tokens_evicted = metric(body, "posattn_session_tokens_evicted_total ");
    free(body);
    return 0;
}

/* GET /v1/sessions's "cache" totals. */
static int read_memory(const load_config *c, load_sess_memory *out)
{
    long code = 0;
    char *body = load_http_get(c, "/v1/sessions?limit=1", 1, &code);
    cJSON *j = body && code == 200 ? cJSON_Parse(body) : NULL;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "cache");
    memset(out, 0, sizeof *out);
    free(body);
    if (!cJSON_IsObject(k)) {
        cJSON_Delete(j);
        return -1;
    }
    out->valid = 1;
    out->sessions = cJSON_GetObjectItemCaseSensitive(k, "sessions")->valuedouble;
    out->bytes = cJSON_GetObjectItemCaseSensitive(k, "bytes")->valuedouble;
    out->budget_bytes = cJSON_GetObjectItemCaseSensitive(k, "budget_bytes")->valuedouble;
    out->blocks_used = cJSON_GetObjectItemCaseSensitive(k, "blocks_used")->valuedouble;
    out->blocks_shared = cJSON_GetObjectItemCaseSensitive(k, "blocks_shared")->valuedouble;
    cJSON_Delete(j);
    return 0;
}

/* ----------------------------------------------------------------- phase */

static int run_phase(const load_config *c, const char *scheme, load_sess_result *r)
{
    driver d = {0};
    seq prefix = {0};
    load_sess_counters before, after;
    int rc = -1, n_fork = (int)floor(c->fork_share * c->sessions + 0.5);
    double t0;

    r->scheme = scheme;
    r->n_fork = n_fork;
    load_hist_init(&r->step_hist);
    load_hist_init(&r->prefill_hist);
    for (int b = 0; b < LOAD_SESS_BUCKETS; b++)
        load_hist_init(&r->bucket[b]);
    r->have_counters = read_counters(c, &before) == 0;

    d.c = c;
    d.scheme = scheme;
    d.r = r;
    d.n = c->sessions;
    d.m = curl_multi_init();
    d.seqs = calloc((size_t)d.n + 1, sizeof *d.seqs);
    d.headers = curl_slist_append(NULL, "Content-Type: application/json");
    d.headers = curl_slist_append(d.headers, "Expect:");
    if (c->api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->api_key);
        d.headers = curl_slist_append(d.headers, auth);
    }
    if (!d.m || !d.seqs || !d.headers)
        goto out;
    curl_multi_setopt(d.m, CURLMOPT_MAXCONNECTS, (long)d.n + 4);
    if (c->sess_prompt > 0 &&
        !(d.prefill_tail = load_payload_session_tail(c, scheme, c->sess_prompt, 0, &d.prefill_len)))
        goto out;
    for (int v = 0; v < N_STEP_VARIANTS; v++)
        if (!(d.step_tail[v] =
                  load_payload_session_tail(c, scheme, 1, (unsigned)v + 1, &d.step_len[v])))
            goto out;
    for (int i = 0; i < d.n; i++)
        if (!(d.seqs[i].h = curl_easy_init()))
            goto out;

    /* The shared prefix, created and prefilled alone before the others. */
    if (n_fork > 0) {
        seq *keep = d.seqs;
        int keep_n = d.n;
        if (!(prefix.h = curl_easy_init()))
            goto out;
        prefix.st = ST_CREATE;
        d.seqs = &prefix;
        d.n = 1;
        int stage_rc = run_stage(&d, d.n);
        d.seqs = keep;
        d.n = keep_n;
        if (stage_rc != 0)
            goto out;
        if (prefix.prefilled)
            d.prefix_id = prefix.id;
        else
            fprintf(stderr,
                    "posattn-load: [%s] the shared prefix failed: its forks prefill "
                    "their own\n",
                    scheme);
    }

    /* Stage 1: create and prefill, or fork, every sequence at once. */
    for (int i = 0; i < d.n; i++) {
        seq *s = &d.seqs[i];
        s->fork = d.prefix_id && i < n_fork;
        s->st = s->fork ? ST_FORK : ST_CREATE;
    }
    t0 = load_now_s();
    if (run_stage(&d, c->sess_prefill_conc > 0 ? c->sess_prefill_conc : d.n) != 0)
        goto out;
    r->prefill_s = load_now_s() - t0;
    read_memory(c, &r->mem_prefill);

    /* Stage 2: T decode steps per prefilled sequence, one request each in
     * flight. */
    for (int i = 0; i < d.n; i++) {
        seq *s = &d.seqs[i];
        s->st = s->prefilled && c->sess_steps > 0 && !load_interrupted ? ST_STEP : ST_IDLE;
    }
    t0 = load_now_s();
    d.decode_end = c->sess_decode_s > 0 ? t0 + c->sess_decode_s : 0;
    if (run_stage(&d, d.n) != 0)
        goto out;
    r->decode_s = load_now_s() - t0;
    /* Steps of sequences that never prefilled, or stopped at a 404. */
    r->steps_skipped =
        (long)d.n * c->sess_steps - r->steps_ok - r->steps_failed - r->steps_cut;
    read_memory(c, &r->mem_end);

    /* Stage 3: delete every session, the prefix last. */
    for (int i = 0; i < d.n; i++)
        d.seqs[i].st = d.seqs[i].id[0] ? ST_DELETE : ST_IDLE;
    if (run_stage(&d, d.n) != 0)
        goto out;
    if (prefix.id[0]) {
        seq *keep = d.seqs;
        int keep_n = d.n;
        prefix.st = ST_DELETE;
        d.seqs = &prefix;
        d.n = 1;
        int stage_rc = run_stage(&d, d.n);
        d.seqs = keep;
        d.n = keep_n;
        if (stage_rc != 0)
            goto out;
    }
    read_memory(c, &r->mem_after);
    if (r->have_counters && read_counters(c, &after) == 0) {
        r->counters.evicted_ttl = after.evicted_ttl - before.evicted_ttl;
        r->counters.evicted_pool_full = after.evicted_pool_full - before.evicted_pool_full;
        r->counters.tokens_appended = after.tokens_appended - before.tokens_appended;
        r->counters.tokens_evicted = after.tokens_evicted - before.tokens_evicted;
    } else {
        r->have_counters = 0;
    }
    rc = 0;
out:
    for (int i = 0; d.seqs && i < d.n; i++) {
        if (d.seqs[i].h)
            curl_easy_cleanup(d.seqs[i].h);
        free(d.seqs[i].body);
    }
    if (prefix.h)
        curl_easy_cleanup(prefix.h);
    free(prefix.body);
    free(d.seqs);
    if (d.m)
        curl_multi_cleanup(d.m);
    curl_slist_free_all(d.headers);
    free(d.prefill_tail);
    for (int v = 0; v < N_STEP_VARIANTS; v++)
        free(d.step_tail[v]);
    return rc;
}

int load_sessions_run(const load_config *c)
{
    load_sess_result *r = calloc((size_t)c->n_schemes, sizeof *r);
    int done = 0, rc = 0;
    if (!r)
        return 1;
    for (int s = 0; s < c->n_schemes && !load_interrupted; s++) {
        if (c->progress)
            fprintf(stderr, "[%s] %d sessions, prompt %d, %d steps...\n", c->schemes[s],
                    c->sessions, c->sess_prompt, c->sess_steps);
        if (run_phase(c, c->schemes[s], &r[done]) != 0) {
            fprintf(stderr, "posattn-load: [%s] out of memory\n", c->schemes[s]);
            rc = 1;
            break;
        }
        done++;
    }
    if (load_interrupted)
        fprintf(stderr, "posattn-load: interrupted; reporting the %d finished scheme(s)\n", done);
    int to_stdout = (c->json_path && !strcmp(c->json_path, "-")) ||
                    (c->html_path && !strcmp(c->html_path, "-"));
    if (!c->quiet)
        load_sess_report_table(to_stdout ? stderr : stdout, c, r, done);
    if (c->json_path && load_sess_report_json(c->json_path, c, r, done) != 0)
        rc = 1;
    if (c->html_path && load_sess_report_html(c->html_path, c, r, done) != 0)
        rc = 1;
    for (int i = 0; i < done && rc == 0; i++)
        if (r[i].n_failed > 0)
            rc = 3;
    free(r);
    return rc;
}
