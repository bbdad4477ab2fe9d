/* badinput_table.c - the runner of tests/e2e/test_badinput.c's table (see
 * badinput_table.h): libcurl and raw-socket requests, and the checks of one
 * row's answer (status, time, error.code, error.field, message).
 */
#include "badinput_table.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------- */
/* A growable string                                                         */
/* ------------------------------------------------------------------------- */

void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void sb_puts(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

void sb_repeat(sbuf *b, const char *s, size_t times)
{
    for (size_t i = 0; i < times; i++)
        sb_puts(b, s);
}

void sb_free(sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------------------- */
/* The server process                                                        */
/* ------------------------------------------------------------------------- */

server servers[2];

long rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    fclose(f);
    assert_true(kb > 0);
    return kb;
}

/* ------------------------------------------------------------------------- */
/* HTTP                                                                      */
/* ------------------------------------------------------------------------- */

typedef struct resp {
    long status;
    sbuf body;
    double seconds;
} resp;

static size_t write_cb(char *p, size_t size, size_t n, void *ud)
{
    sb_put(ud, p, size * n);
    return size * n;
}

/* One request with libcurl. body NULL: no body. hdr: one extra header or NULL. */
static void http_do(resp *r, const char *method, const char *url, const sbuf *body, const char *hdr)
{
    CURL *e = curl_easy_init();
    struct curl_slist *hl = NULL;
    double t0 = now_s();
    CURLcode rc;
    memset(r, 0, sizeof *r);
    assert_non_null(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &r->body);
    if (body != NULL) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body->p ? body->p : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
        hl = curl_slist_append(hl, "Content-Type: application/json");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (hdr != NULL)
        hl = curl_slist_append(hl, hdr);
    hl = curl_slist_append(hl, "Expect:");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    rc = curl_easy_perform(e);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method, url, curl_easy_strerror(rc));
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
    r->seconds = now_s() - t0;
    curl_slist_free_all(hl);
    curl_easy_cleanup(e);
}

static const char *find_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay != '\0'; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return hay;
    return NULL;
}

/* Sends raw bytes on a fresh connection and reads one answer (the server
 * sends Content-Length, or closes). */
static void raw_do(resp *r, int port, const char *req, size_t len)
{
    struct sockaddr_in a = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    double t0 = now_s(), deadline = t0 + 10.0;
    sbuf in = {0};
    size_t want = (size_t)-1;
    memset(r, 0, sizeof *r);
    assert_true(fd >= 0);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    /* The server may answer and close before all is sent: that is fine. */
    (void)!send(fd, req, len, MSG_NOSIGNAL);
    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        char buf[4096];
        int left_ms = (int)((deadline - now_s()) * 1000);
        if (left_ms <= 0)
            break;
        if (poll(&pf, 1, left_ms) <= 0)
            continue;
        ssize_t got = recv(fd, buf, sizeof buf, 0);
        if (got <= 0)
            break;
        sb_put(&in, buf, (size_t)got);
        const char *eoh = strstr(in.p, "\r\n\r\n");
        if (eoh != NULL && want == (size_t)-1) {
            const char *cl = find_nocase(in.p, "\r\nContent-Length:");
            if (cl != NULL && cl < eoh)
                want = (size_t)(eoh + 4 - in.p) + strtoul(cl + 17, NULL, 10);
        }
        if (in.len >= want)
            break;
    }
    close(fd);
    r->seconds = now_s() - t0;
    if (in.p == NULL || sscanf(in.p, "HTTP/1.%*d %ld", &r->status) != 1)
        fail_msg("no HTTP answer to a raw request (%zu bytes read)", in.len);
    const char *eoh = strstr(in.p, "\r\n\r\n");
    if (eoh != NULL) {
        size_t blen = in.len - (size_t)(eoh + 4 - in.p);
        if (want != (size_t)-1 && want < in.len)
            blen = want - (size_t)(eoh + 4 - in.p);
        sb_put(&r->body, eoh + 4, blen);
    }
    sb_free(&in);
}

/* ------------------------------------------------------------------------- */
/* One row                                                                   */
/* ------------------------------------------------------------------------- */

/* Runs one row; returns true, or prints why not and returns false. */
bool run_case(const bcase *c, bool verbose, bool verbose_once)
{
    const server *s = &servers[c->srv];
    sbuf body = {0};
    resp r;
    bool ok = true;
    cJSON *ans = NULL;
    const cJSON *err = NULL;
    char url[512];

    if (c->gen != NULL)
        c->gen(&body);
    else if (c->body != NULL)
        sb_puts(&body, c->body);
    if (c->raw) {
        raw_do(&r, s->port, body.p, body.len);
    } else {
        snprintf(url, sizeof url, "%s%s", s->url, c->path);
        http_do(&r, c->method, url, (c->body != NULL || c->gen != NULL) ? &body : NULL, c->hdr);
    }
    double max_s = c->max_s > 0 ? c->max_s : 10.0;
    if (c->max_s > 0 && verbose_once)
        print_message("badinput: %s: %ld in %.3f s (limit %.1f s)\n", c->name, r.status, r.seconds,
                      c->max_s);
    if (r.seconds > max_s) {
        print_message("  %s: answered in %.3f s, want < %.1f s\n", c->name, r.seconds, max_s);
        ok = false;
    }
    if (r.status != c->status) {
        print_message("  %s: status %ld, want %d: %.300s\n", c->name, r.status, c->status,
                      r.body.p ? r.body.p : "");
        ok = false;
        goto done;
    }
    if ((strcmp(c->path ? c->path : "", "/v1/schemes") == 0 && c->code == NULL) ||
        (c->code != NULL && strcmp(c->code, "-") == 0))
        goto done; /* only the status is checked */
    ans = r.body.p != NULL ? cJSON_ParseWithLength(r.body.p, r.body.len) : NULL;
    if (ans == NULL) {
        print_message("  %s: the answer is not JSON: %.200s\n", c->name, r.body.p ? r.body.p : "");
        ok = false;
        goto done;
    }
    if (c->item) {
        const cJSON *outs = cJSON_GetObjectItemCaseSensitive(ans, "outputs");
        err = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(outs, 0), "error");
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "errors"))) {
            print_message("  %s: \"errors\" is not true\n", c->name);
            ok = false;
        }
    } else {
        err = cJSON_GetObjectItemCaseSensitive(ans, "error");
    }
    if (c->code == NULL) {
        if (err != NULL) {
            print_message("  %s: unexpected error %.200s\n", c->name, r.body.p);
            ok = false;
        }
        goto done;
    }
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(err, "field");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    if (!cJSON_IsString(code) || !cJSON_IsString(msg) || msg->valuestring[0] == '\0') {
        print_message("  %s: no error code and message in %.300s\n", c->name, r.body.p);
        ok = false;
        goto done;
    }
    if (strcmp(c->code, "*") != 0 && strcmp(code->valuestring, c->code) != 0) {
        print_message("  %s: code %s, want %s (%s)\n", c->name, code->valuestring, c->code,
                      msg->valuestring);
        ok = false;
    }
    if (c->field == NULL
            ? (field != NULL && !cJSON_IsNull(field))
            : strcmp(c->field, "*") != 0 &&
                  (!cJSON_IsString(field) || strcmp(field->valuestring, c->field) != 0)) {
        print_message("  %s: field %s, want %s (%s)\n", c->name,
                      cJSON_IsString(field) ? field->valuestring : "(none)",
                      c->field ? c->field : "(none)", msg->valuestring);
        ok = false;
    }
    if (verbose)
        print_message("  %-34s %ld %-18s %-28s %s\n", c->name, r.status, code->valuestring,
                      cJSON_IsString(field) ? field->valuestring : "-", msg->valuestring);
done:
    cJSON_Delete(ans);
    sb_free(&r.body);
    sb_free(&body);
    return ok;
}

long healthz_status(const server *s)
{
    char url[96];
    resp r;
    snprintf(url, sizeof url, "%s/healthz", s->url);
    http_do(&r, "GET", url, NULL, NULL);
    sb_free(&r.body);
    return r.status;
}
