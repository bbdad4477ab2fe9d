/* report_layers.c - the per-layer parts of posattn-load's reports with
 * --model: each layer's counts and latency in every phase, and the layers
 * grouped by their attention (all sliding layers of one window, all full
 * ones), so that the cost of global against sliding layers shows. report.c
 * calls these; the charts take the rows of load_layer_rows as phases.
 */
#include "load.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>


load_result *load_layer_rows(const load_config *c, const load_result *r, int n, int *n_rows)
{
    int total = 0, k = 0;
    *n_rows = 0;
    for (int i = 0; i < n; i++)
        total += r[i].n_layers;
    if (c->model == NULL || total == 0)
        return NULL;
    load_result *rows = calloc((size_t)total, sizeof *rows);
    if (rows == NULL)
        return NULL;
    for (int i = 0; i < n; i++)
        for (int l = 0; l < r[i].n_layers; l++, k++) {
            const load_layer_result *y = &r[i].layers[l];
            load_result *x = &rows[k];
            /* "0 sliding 4096", "decoder 1 full": short, for the charts' axes. */
            x->scheme = c->model->layers[l].label;
            if (!strncmp(x->scheme, "layer ", 6))
                x->scheme += 6;
            x->length = r[i].length;
            x->concurrency = r[i].concurrency;
            x->elapsed_s = r[i].elapsed_s;
            x->sent = y->sent;
            x->ok = y->ok;
            x->errors = y->errors;
            memcpy(x->status, y->status, sizeof x->status);
            x->n_status = y->n_status;
            x->hist = y->hist;
            x->body_bytes = y->body_bytes;
        }
    *n_rows = total;
    return rows;
}

/* Layers a and b are of one group: the same stack and attention. */
static int same_group(const load_layer *a, const load_layer *b)
{
    return !strcmp(a->stack, b->stack) && !strcmp(a->kind, b->kind);
}

/* Whether layer k leads its group (no earlier layer is of it). */
static int leads(const load_model *m, int k)
{
    for (int j = 0; j < k; j++)
        if (same_group(&m->layers[j], &m->layers[k]))
            return 0;
    return 1;
}

/* The group of layer k in phase x: counts and the merged histogram. */
static void group_sum(const load_model *m, const load_result *x, int k, load_layer_result *out)
{
    memset(out, 0, sizeof *out);
    load_hist_init(&out->hist);
    for (int j = k; j < x->n_layers; j++)
        if (same_group(&m->layers[j], &m->layers[k])) {
            out->sent += x->layers[j].sent;
            out->ok += x->layers[j].ok;
            out->errors += x->layers[j].errors;
            load_hist_merge(&out->hist, &x->layers[j].hist);
        }
}

static int n_groups(const load_model *m)
{
    int g = 0;
    for (int k = 0; k < m->n_layers; k++)
        g += leads(m, k);
    return g;
}

/* printf to out + *used, never past len; *used stays within out. */
static void append(char *out, size_t len, size_t *used, const char *fmt, ...)
{
    va_list ap;
    if (*used + 1 >= len)
        return;
    va_start(ap, fmt);
    int w = vsnprintf(out + *used, len - *used, fmt, ap);
    va_end(ap);
    if (w > 0)
        *used = (size_t)w < len - *used ? *used + (size_t)w : len - 1;
}

/* "sliding 4096 (layers 0,2)", "decoder full (layers 0-5)": layer k's group. */
static void group_name(const load_model *m, int k, char *out, size_t len)
{
    const load_layer *a = &m->layers[k];
    size_t used = 0;
    int count = 0, first = 1;
    for (int j = k; j < m->n_layers; j++)
        count += same_group(&m->layers[j], a);
    out[0] = '\0';
    append(out, len, &used, "%s%s%s (layer%s ", a->stack, a->stack[0] ? " " : "", a->kind,
           count > 1 ? "s" : "");
    for (int j = k; j < m->n_layers; j++) {
        if (!same_group(&m->layers[j], a))
            continue;
        int lo = m->layers[j].layer, hi = lo;
        while (j + 1 < m->n_layers && same_group(&m->layers[j + 1], a) &&
               m->layers[j + 1].layer == hi + 1)
            j++, hi++;
        append(out, len, &used, hi > lo ? "%s%d-%d" : "%s%d", first ? "" : ",", lo, hi);
        first = 0;
    }
    append(out, len, &used, ")");
}

static void row(FILE *f, int width, const char *label, const load_result *x, long sent, long ok,
                long errors, const load_hist *h, const char *scheme)
{
    fprintf(f, "%-*s %-10s %6d %4d %9.1f", width, label, scheme, x->length, x->concurrency,
            load_rate((double)ok, x->elapsed_s));
    for (int p = 0; p < LOAD_N_PCTS; p++)
        fprintf(f, " %8.3f", load_ms(load_hist_percentile(h, load_pcts[p])));
    fprintf(f, " %8.3f %8ld %8ld %7ld\n", load_ms(h->max_us), sent, ok, errors);
}

void load_report_layers_table(FILE *f, const load_config *c, const load_result *r, int n)
{
    const load_model *m = c->model;
    int width = 20, grouped;
    char name[160];
    if (m == NULL || n == 0)
        return;
    /* The groups add to the rows only when some kind has several layers
     * and there is more than one kind to set them against. */
    grouped = n_groups(m) > 1 && n_groups(m) < m->n_layers;
    for (int k = 0; k < m->n_layers; k++)
        width = (int)strlen(m->layers[k].label) > width ? (int)strlen(m->layers[k].label) : width;
    fprintf(f, "\nper layer (%s, %d layer%s, round-robin in each phase):\n", m->name, m->n_layers,
            m->n_layers == 1 ? "" : "s");
    fprintf(f, "%-*s %-10s %6s %4s %9s %8s %8s %8s %8s %8s %8s %8s %7s\n", width, "layer", "scheme",
            "L", "conc", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "sent", "ok",
            "errors");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r[i].n_layers; k++) {
            const load_layer_result *y = &r[i].layers[k];
            row(f, width, m->layers[k].label, &r[i], y->sent, y->ok, y->errors, &y->hist,
                m->layers[k].layer_mode ? "learned*" : m->layers[k].scheme);
        }
    if (grouped) {
        int gw = 20;
        for (int k = 0; k < m->n_layers; k++)
            if (leads(m, k)) {
                group_name(m, k, name, sizeof name);
                gw = (int)strlen(name) > gw ? (int)strlen(name) : gw;
            }
        fprintf(f, "\nby attention (the layers of a kind together):\n");
        fprintf(f, "%-*s %-10s %6s %4s %9s %8s %8s %8s %8s %8s %8s %8s %7s\n", gw, "attention", "",
                "L", "conc", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "sent",
                "ok", "errors");
        for (int i = 0; i < n; i++)
            for (int k = 0; k < r[i].n_layers; k++) {
                load_layer_result g;
                if (!leads(m, k))
                    continue;
                group_sum(m, &r[i], k, &g);
                group_name(m, k, name, sizeof name);
                row(f, gw, name, &r[i], g.sent, g.ok, g.errors, &g.hist, "");
            }
    }
    for (int k = 0; k < m->n_layers; k++)
        if (m->layers[k].layer_mode) {
            fprintf(f, "\nlearned*: learned positions enter at the embedding, so the layer is "
                       "sent in layer mode (x [L, d_model] and w_q/w_k/w_v): projections "
                       "included\n");
            break;
        }
    int any = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r[i].n_layers; k++)
            for (int s = 0; s < r[i].layers[k].n_status; s++) {
                const load_status_count *e = &r[i].layers[k].status[s];
                if (!any++)
                    fprintf(f, "\nerrors by layer:\n");
                fprintf(f, "  %s L=%d c=%d: %s x %ld  (%s)\n", m->layers[k].label, r[i].length,
                        r[i].concurrency, e->key, e->count, e->sample);
            }
}

static void latency_json(cJSON *o, const load_hist *h)
{
    cJSON *l = cJSON_AddObjectToObject(o, "latency_ms");
    cJSON_AddNumberToObject(l, "count", (double)h->total);
    cJSON_AddNumberToObject(l, "min", load_ms(h->min_us));
    cJSON_AddNumberToObject(l, "mean", h->total ? h->sum_us / 1000.0 / (double)h->total : 0);
    for (int p = 0; p < LOAD_N_PCTS; p++)
        cJSON_AddNumberToObject(l, load_pct_names[p], load_ms(load_hist_percentile(h, load_pcts[p])));
    cJSON_AddNumberToObject(l, "max", load_ms(h->max_us));
}

static void positive_or_null(cJSON *o, const char *key, int v)
{
    if (v > 0)
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

void load_report_layers_config_json(cJSON *cfg, const load_config *c)
{
    const load_model *m = c->model;
    cJSON *o = cJSON_AddObjectToObject(cfg, "model");
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddStringToObject(o, "model_type", m->model_type);
    cJSON_AddNumberToObject(o, "num_layers", m->num_layers);
    if (c->stack)
        cJSON_AddStringToObject(o, "stack", c->stack);
    else
        cJSON_AddNullToObject(o, "stack");
    cJSON *a = cJSON_AddArrayToObject(o, "layers");
    for (int k = 0; k < m->n_layers; k++)
        cJSON_AddItemToArray(a, cJSON_CreateString(m->layers[k].label));
    cJSON_AddStringToObject(o, "order", "round-robin");
}

void load_report_layers_json(cJSON *o, const load_config *c, const load_result *x)
{
    const load_model *m = c->model;
    cJSON *a = cJSON_AddArrayToObject(o, "layers");
    for (int k = 0; k < x->n_layers; k++) {
        const load_layer *ly = &m->layers[k];
        const load_layer_result *y = &x->layers[k];
        cJSON *e = cJSON_CreateObject(), *st, *samples, *req;
        cJSON_AddItemToArray(a, e);
        cJSON_AddNumberToObject(e, "layer", ly->layer);
        if (ly->stack[0])
            cJSON_AddStringToObject(e, "stack", ly->stack);
        cJSON_AddStringToObject(e, "label", ly->label);
        cJSON_AddStringToObject(e, "attention", ly->attention);
        positive_or_null(e, "window", ly->window);
        positive_or_null(e, "chunk_size", ly->chunk);
        cJSON_AddStringToObject(e, "scheme", ly->scheme);
        cJSON_AddNumberToObject(e, "num_heads", ly->heads);
        cJSON_AddNumberToObject(e, "num_kv_heads", ly->kv_heads);
        cJSON_AddNumberToObject(e, "head_dim", ly->head_dim);
        cJSON_AddBoolToObject(e, "causal", ly->causal || c->causal); /* --causal forces it */
        cJSON_AddBoolToObject(e, "layer_mode", ly->layer_mode);
        if (ly->layer_mode)
            cJSON_AddNumberToObject(e, "d_model", ly->d_model);
        req = cJSON_AddArrayToObject(e, "requires");
        for (int q = 0; q < ly->n_req; q++)
            cJSON_AddItemToArray(req, cJSON_CreateString(ly->req[q].field));
        cJSON_AddNumberToObject(e, "sent", (double)y->sent);
        cJSON_AddNumberToObject(e, "ok", (double)y->ok);
        cJSON_AddNumberToObject(e, "errors", (double)y->errors);
        st = cJSON_AddObjectToObject(e, "errors_by_status");
        samples = cJSON_AddObjectToObject(e, "error_samples");
        for (int s = 0; s < y->n_status; s++) {
            cJSON_AddNumberToObject(st, y->status[s].key, (double)y->status[s].count);
            cJSON_AddStringToObject(samples, y->status[s].key, y->status[s].sample);
        }
        cJSON_AddNumberToObject(e, "requests_per_s", load_rate((double)y->ok, x->elapsed_s));
        cJSON_AddNumberToObject(e, "request_body_bytes", (double)y->body_bytes);
        latency_json(e, &y->hist);
    }
    a = cJSON_AddArrayToObject(o, "by_attention");
    for (int k = 0; k < x->n_layers; k++) {
        const load_layer *ly = &m->layers[k];
        load_layer_result g;
        cJSON *e, *ls;
        if (!leads(m, k))
            continue;
        group_sum(m, x, k, &g);
        e = cJSON_CreateObject();
        cJSON_AddItemToArray(a, e);
        cJSON_AddStringToObject(e, "attention", ly->attention);
        if (ly->stack[0])
            cJSON_AddStringToObject(e, "stack", ly->stack);
        positive_or_null(e, "window", ly->window);
        positive_or_null(e, "chunk_size", ly->chunk);
        ls = cJSON_AddArrayToObject(e, "layers");
        for (int j = k; j < x->n_layers; j++)
            if (same_group(&m->layers[j], ly))
                cJSON_AddItemToArray(ls, cJSON_CreateNumber(m->layers[j].layer));
        cJSON_AddNumberToObject(e, "sent", (double)g.sent);
        cJSON_AddNumberToObject(e, "ok", (double)g.ok);
        cJSON_AddNumberToObject(e, "errors", (double)g.errors);
        latency_json(e, &g.hist);
    }
}

void load_report_layers_csv(FILE *f, const load_config *c, const load_result *r, int n)
{
    const load_model *m = c->model;
    fprintf(f, "model,layer,stack,attention,window,chunk_size,scheme,length,concurrency,heads,"
               "kv_heads,head_dim,batch,encoding,causal,elapsed_s,sent,ok,errors,errors_by_status,"
               "requests_per_s,items_per_s,p50_ms,p90_ms,p99_ms,p99_9_ms,max_ms\n");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r[i].n_layers; k++) {
            const load_layer *ly = &m->layers[k];
            const load_layer_result *y = &r[i].layers[k];
            fprintf(f, "%s,%d,%s,%s,%d,%d,%s,%d,%d,%d,%d,%d,%d,%s,%d,%.3f,%ld,%ld,%ld,", m->name,
                    ly->layer, ly->stack, ly->attention, ly->window, ly->chunk, ly->scheme,
                    r[i].length, r[i].concurrency, ly->heads, ly->kv_heads, ly->head_dim, c->batch,
                    c->encoding == LOAD_ENC_B64 ? "b64" : "json", c->causal, r[i].elapsed_s,
                    y->sent, y->ok, y->errors);
            for (int s = 0; s < y->n_status; s++)
                fprintf(f, "%s%s:%ld", s ? ";" : "", y->status[s].key, y->status[s].count);
            fprintf(f, ",%.3f,%.3f", load_rate((double)y->ok, r[i].elapsed_s),
                    load_rate((double)y->ok * c->batch, r[i].elapsed_s));
            for (int p = 0; p < LOAD_N_PCTS; p++)
                fprintf(f, ",%.3f", load_ms(load_hist_percentile(&y->hist, load_pcts[p])));
            fprintf(f, ",%.3f\n", load_ms(y->hist.max_us));
        }
}

static void html_row(FILE *f, const char *name, const char *attention, const load_result *x,
                     long sent, long ok, long errors, const load_hist *h)
{
    fprintf(f, "<tr><td>");
    load_html_escape(f, name);
    fprintf(f, "</td><td>");
    load_html_escape(f, attention);
    fprintf(f, "</td><td>%d</td><td>%d</td><td>%.1f</td>", x->length, x->concurrency,
            load_rate((double)ok, x->elapsed_s));
    for (int p = 0; p < LOAD_N_PCTS; p++)
        fprintf(f, "<td>%.3f</td>", load_ms(load_hist_percentile(h, load_pcts[p])));
    fprintf(f, "<td>%.3f</td><td>%ld</td><td>%ld</td><td>%ld</td></tr>\n", load_ms(h->max_us), sent, ok,
            errors);
}

void load_report_layers_html(FILE *f, const load_config *c, const load_result *r, int n)
{
    const load_model *m = c->model;
    char name[160];
    static const char HEAD[] = "<th>L</th><th>conc</th><th>req/s</th><th>p50 ms</th>"
                               "<th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th>"
                               "<th>sent</th><th>ok</th><th>errors</th></tr>\n";
    fprintf(f, "<h2>Per layer</h2>\n<p>Model ");
    load_html_escape(f, m->name);
    fprintf(f, " (");
    load_html_escape(f, m->model_type);
    fprintf(f,
            "): the chosen layers round-robin in each phase; client latency of successful "
            "requests.</p>\n<table><tr><th>layer</th><th>attention</th>%s",
            HEAD);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r[i].n_layers; k++) {
            const load_layer_result *y = &r[i].layers[k];
            html_row(f, m->layers[k].label, m->layers[k].attention, &r[i], y->sent, y->ok,
                     y->errors, &y->hist);
        }
    fprintf(f, "</table>\n");
    if (n_groups(m) < 2)
        return;
    fprintf(f, "<h2>By attention</h2>\n<table><tr><th>layers</th><th>attention</th>%s", HEAD);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r[i].n_layers; k++) {
            load_layer_result g;
            if (!leads(m, k))
                continue;
            group_sum(m, &r[i], k, &g);
            group_name(m, k, name, sizeof name);
            html_row(f, name, m->layers[k].attention, &r[i], g.sent, g.ok, g.errors, &g.hist);
        }
    fprintf(f, "</table>\n");
}
