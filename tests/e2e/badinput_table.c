/* badinput_table.c - the runner of tests/e2e/test_badinput.c's table (see
 * badinput_table.h): a row's request, sent through tests/e2e/e2e_http.c
 * (libcurl, or raw bytes on a socket), and the checks of its answer (status,
 * time, error.code, error.field, message).
 */
#include "badinput_table.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One request with libcurl (20 s at most). body NULL: no body. hdr: one extra
 * header or NULL. No answer fails the test. */
static void http_row(resp *r, const char *method, const char *url, const sbuf *body,
                     const char *hdr)
{
    const char *const hdrs[] = {hdr, NULL};
    http_request(r, method, url, body != NULL ? (body->p ? body->p : "") : NULL,
                 body != NULL ? body->len : 0, hdrs, 20000L);
    if (r->rc != CURLE_OK)
        fail_msg("%s %s: %s", method, url, curl_easy_strerror(r->rc));
}

/* Sends raw bytes on a fresh connection and reads one answer (the server
 * sends Content-Length, or closes) within 10 s. */
static void raw_row(resp *r, int port, const char *req, size_t len)
{
    stream st;
    const char *body;
    size_t blen;
    memset(r, 0, sizeof *r);
    raw_exchange(&st, port, req, len, 10.0, true);
    r->seconds = st.seconds;
    r->status = raw_answer(&st, &body, &blen);
    if (r->status == 0)
        fail_msg("no HTTP answer to a raw request (%zu bytes read)", st.in.len);
    if (body != NULL)
        sb_put(&r->body, body, blen);
    sb_free(&st.in);
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
        raw_row(&r, s->port, body.p, body.len);
    } else {
        snprintf(url, sizeof url, "%s%s", s->url, c->path);
        http_row(&r, c->method, url, (c->body != NULL || c->gen != NULL) ? &body : NULL, c->hdr);
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
    resp_free(&r);
    sb_free(&body);
    return ok;
}

long healthz_status(const server *s)
{
    char url[96];
    resp r;
    snprintf(url, sizeof url, "%s/healthz", s->url);
    http_row(&r, "GET", url, NULL, NULL);
    long status = r.status;
    resp_free(&r);
    return status;
}
