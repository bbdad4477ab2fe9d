/* config.c - reading a Hugging Face config's keys: spellings, nulls,
 * wrappers, types and ranges, each refusal naming the key and its value.
 */
#include "model/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cfg_fail(const cfg_ctx *d, const char *key, const char *fmt, ...)
{
    va_list ap;
    snprintf(d->e->key, sizeof d->e->key, "%s%s", d->prefix, key);
    va_start(ap, fmt);
    vsnprintf(d->e->message, sizeof d->e->message, fmt, ap);
    va_end(ap);
    return false;
}

const cJSON *cfg_member(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
    return v == NULL || cJSON_IsNull(v) ? NULL : v;
}

void cfg_value_text(const cJSON *node, char *buf, size_t cap)
{
    char *s = node != NULL ? cJSON_PrintUnformatted(node) : NULL;
    if (s == NULL) {
        snprintf(buf, cap, "%s", node == NULL ? "(absent)" : "?");
        return;
    }
    if (strlen(s) >= cap && cap > 4)
        snprintf(buf, cap, "%.*s...", (int)cap - 4, s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
}

void cfg_source(srv_model_source *s, const char *option, const char *key, const char *value)
{
    snprintf(s->option, sizeof s->option, "%s", option != NULL ? option : "");
    snprintf(s->key, sizeof s->key, "%s", key);
    snprintf(s->value, sizeof s->value, "%s", value);
}

const cJSON *cfg_find(const cfg_ctx *d, const char *keys, srv_model_source *src)
{
    char name[SRV_MODEL_KEY_MAX];
    const char *p = keys;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *obj = pass == 0 ? d->cfg : d->outer;
        if (obj == NULL)
            continue;
        p = keys;
        while (*p != '\0') {
            size_t n = strcspn(p, "|");
            const cJSON *v;
            snprintf(name, sizeof name, "%.*s", (int)n, p);
            if ((v = cfg_member(obj, name)) != NULL) {
                if (src != NULL) {
                    char path[SRV_MODEL_KEY_MAX];
                    snprintf(path, sizeof path, "%s%s", pass == 0 ? d->prefix : "", name);
                    snprintf(src->key, sizeof src->key, "%s", path);
                    cfg_value_text(v, src->value, sizeof src->value);
                }
                return v;
            }
            p += n + (p[n] == '|');
        }
    }
    if (src != NULL) {
        size_t n = strcspn(keys, "|");
        snprintf(src->key, sizeof src->key, "%s%.*s", d->prefix, (int)n, keys);
        snprintf(src->value, sizeof src->value, "(absent)");
    }
    return NULL;
}

/* The first spelling of keys, for messages about an absent key. */
static void first_key(const char *keys, char *buf, size_t cap)
{
    snprintf(buf, cap, "%.*s", (int)strcspn(keys, "|"), keys);
}

bool cfg_int(const cfg_ctx *d, const char *keys, int64_t lo, int64_t hi, bool required,
             int64_t dflt, int64_t *out, srv_model_source *src)
{
    srv_model_source s;
    const cJSON *v = cfg_find(d, keys, &s);
    char k[SRV_MODEL_KEY_MAX];
    first_key(keys, k, sizeof k);
    if (src != NULL)
        *src = s;
    if (v == NULL) {
        if (required)
            return cfg_fail(d, k, "config key \"%s%s\" is required (an integer)", d->prefix, k);
        *out = dflt;
        if (src != NULL)
            snprintf(src->value, sizeof src->value, "%lld (the default)", (long long)dflt);
        return true;
    }
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!cJSON_IsNumber(v) || x != floor(x) || x < (double)lo || x > (double)hi) {
        snprintf(d->e->key, sizeof d->e->key, "%s", s.key);
        snprintf(d->e->message, sizeof d->e->message,
                 "config \"%s\": %s must be an integer from %lld to %lld", s.key, s.value,
                 (long long)lo, (long long)hi);
        return false;
    }
    *out = (int64_t)x;
    return true;
}

bool cfg_num(const cfg_ctx *d, const char *keys, bool required, double dflt, double *out,
             srv_model_source *src)
{
    srv_model_source s;
    const cJSON *v = cfg_find(d, keys, &s);
    char k[SRV_MODEL_KEY_MAX];
    first_key(keys, k, sizeof k);
    if (src != NULL)
        *src = s;
    if (v == NULL) {
        if (required)
            return cfg_fail(d, k, "config key \"%s%s\" is required (a number)", d->prefix, k);
        *out = dflt;
        if (src != NULL)
            snprintf(src->value, sizeof src->value, "%.17g (the default)", dflt);
        return true;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        snprintf(d->e->key, sizeof d->e->key, "%s", s.key);
        snprintf(d->e->message, sizeof d->e->message, "config \"%s\": %s must be a number",
                 s.key, s.value);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

bool cfg_bool(const cfg_ctx *d, const char *keys, bool dflt, bool *out, srv_model_source *src)
{
    srv_model_source s;
    const cJSON *v = cfg_find(d, keys, &s);
    if (src != NULL)
        *src = s;
    if (v == NULL) {
        *out = dflt;
        if (src != NULL)
            snprintf(src->value, sizeof src->value, "%s (the default)", dflt ? "true" : "false");
        return true;
    }
    if (!cJSON_IsBool(v)) {
        snprintf(d->e->key, sizeof d->e->key, "%s", s.key);
        snprintf(d->e->message, sizeof d->e->message, "config \"%s\": %s must be true or false",
                 s.key, s.value);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}
