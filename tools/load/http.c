/* http.c - posattn-load's plain HTTP calls beside the measured load: the
 * TLS options every handle takes (--cacert) and a GET of a whole small
 * answer (/v1/schemes, /metrics, a model's config). Below the runner, the
 * sessions mode and the roofline, which all use them.
 */
#include "load.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void load_curl_tls(void *curl, const load_config *c)
{
    if (c->cacert != NULL)
        curl_easy_setopt((CURL *)curl, CURLOPT_CAINFO, c->cacert);
}

/* The text of a GET, growing as it arrives. */
typedef struct {
    char *p;
    size_t len, cap;
} text;

static size_t on_text(char *data, size_t size, size_t n, void *arg)
{
    text *t = arg;
    size_t len = size * n;
    if (t->len + len + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 65536;
        while (cap < t->len + len + 1)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p)
            return 0;
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, data, len);
    t->len += len;
    t->p[t->len] = 0;
    return len;
}

char *load_http_get(const load_config *c, const char *path, int auth, long *code)
{
    char url[1100];
    text t = {0};
    struct curl_slist *headers = NULL;
    CURL *h = curl_easy_init();
    *code = 0;
    if (!h)
        return NULL;
    snprintf(url, sizeof url, "%s%s", c->url, path);
    load_curl_tls(h, c);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_text);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    if (auth && c->api_key) {
        char line[512];
        snprintf(line, sizeof line, "Authorization: Bearer %s", c->api_key);
        headers = curl_slist_append(NULL, line);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK || !t.p) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
