/* sessions_report.c - the reports of posattn-load's --sessions mode: a
 * terminal table (a column per scheme, side by side), --json and --html
 * (the table and a chart of step latency against cache length, both axes
 * log scale as the other reports' latency charts). The runs are
 * sessions.c's.
 */
#include "sessions.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const COLORS[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                     "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};

static double steps_per_s(const load_sess_result *x)
{
    return load_rate((double)x->steps_ok, x->decode_s);
}

static void eviction_name(char *out, size_t len, const load_config *c)
{
    if (c->sess_window > 0)
        snprintf(out, len, "window:%d:%d%s", c->sess_window, c->sess_sinks,
                 c->sess_reposition ? ":reposition" : "");
    else
        snprintf(out, len, "none");
}

static void describe(FILE *f, const load_config *c)
{
    char ev[64];
    eviction_name(ev, sizeof ev, c);
    fprintf(f,
            "sessions %d (%d forking a shared prefix, --fork-share %g), prompt %d, steps %d, "
            "eviction %s, heads %d, kv heads %d, head dim %d, %s",
            c->sessions, (int)floor(c->fork_share * c->sessions + 0.5), c->fork_share,
            c->sess_prompt, c->sess_steps, ev, c->heads, c->kv_heads, c->head_dim,
            c->encoding == LOAD_ENC_B64 ? "b64" : "json");
}

/* The buckets any result has steps in: [lo, hi], or lo > hi when none. */
static void bucket_range(const load_sess_result *r, int n, int *lo, int *hi)
{
    *lo = LOAD_SESS_BUCKETS;
    *hi = -1;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < LOAD_SESS_BUCKETS; b++)
            if (r[i].bucket[b].total > 0) {
                *lo = b < *lo ? b : *lo;
                *hi = b > *hi ? b : *hi;
            }
}

static void mem_cell(FILE *f, const load_sess_memory *m)
{
    if (m->valid)
        fprintf(f, " %9.2f MB/%-4.0f", m->bytes / 1048576.0, m->sessions);
    else
        fprintf(f, " %17s", "-");
}

void load_sess_report_table(FILE *f, const load_config *c, const load_sess_result *r, int n)
{
    int lo, hi;
    fprintf(f, "\n");
    describe(f, c);
    fprintf(f, "\n\n%-20s", "");
    for (int i = 0; i < n; i++)
        fprintf(f, " %17.17s", r[i].scheme);
#define ROW(label, fmt, expr)                                                                      \
    do {                                                                                           \
        fprintf(f, "\n%-20s", label);                                                              \
        for (int i = 0; i < n; i++)                                                                \
            fprintf(f, " %17" fmt, expr);                                                          \
    } while (0)
    ROW("decode steps/s", ".1f", steps_per_s(&r[i]));
    ROW("steps ok", "ld", r[i].steps_ok);
    ROW("steps failed", "ld", r[i].steps_failed);
    ROW("steps not run", "ld", r[i].steps_skipped);
    if (c->sess_decode_s > 0)
        ROW("steps cut (time)", "ld", r[i].steps_cut);
    ROW("step p50 ms", ".3f", load_ms(load_hist_percentile(&r[i].step_hist, 50)));
    ROW("step p99 ms", ".3f", load_ms(load_hist_percentile(&r[i].step_hist, 99)));
    ROW("prefill p50 ms", ".3f", load_ms(load_hist_percentile(&r[i].prefill_hist, 50)));
    ROW("prefill s (wall)", ".3f", r[i].prefill_s);
    ROW("decode s (wall)", ".3f", r[i].decode_s);
    ROW("forks", "ld", r[i].forks_ok);
    ROW("deletes (gone)", "ld", r[i].deletes_gone);
    fprintf(f, "\n%-20s", "mem after prefill");
    for (int i = 0; i < n; i++)
        mem_cell(f, &r[i].mem_prefill);
    fprintf(f, "\n%-20s", "mem after decode");
    for (int i = 0; i < n; i++)
        mem_cell(f, &r[i].mem_end);
    fprintf(f, "\n%-20s", "mem after delete");
    for (int i = 0; i < n; i++)
        mem_cell(f, &r[i].mem_after);
    ROW("shared blocks", ".0f", r[i].mem_prefill.blocks_shared);
    ROW("evictions pool_full", ".0f", r[i].counters.evicted_pool_full);
    ROW("evictions ttl", ".0f", r[i].counters.evicted_ttl);
    ROW("tokens evicted", ".0f", r[i].counters.tokens_evicted);
    ROW("failed requests", "ld", r[i].n_failed);
#undef ROW
    for (int i = 0; i < n; i++)
        for (int e = 0; e < r[i].n_errors; e++)
            fprintf(f, "\n  %s: %s x%ld (%s)", r[i].scheme, r[i].errors[e].key,
                    r[i].errors[e].count, r[i].errors[e].sample);
    bucket_range(r, n, &lo, &hi);
    fprintf(f, "\n\nstep latency by cache length (tokens kept after the step), p50 / p99 ms:\n");
    fprintf(f, "%-20s", "cache tokens");
    for (int i = 0; i < n; i++)
        fprintf(f, " %17.17s", r[i].scheme);
    for (int b = lo; b <= hi; b++) {
        char label[40];
        snprintf(label, sizeof label, "%ld-%ld", 1L << b, (2L << b) - 1);
        fprintf(f, "\n%-20s", label);
        for (int i = 0; i < n; i++) {
            const load_hist *h = &r[i].bucket[b];
            if (h->total == 0)
                fprintf(f, " %17s", "-");
            else
                fprintf(f, "   %6.3f / %6.3f", load_ms(load_hist_percentile(h, 50)),
                        load_ms(load_hist_percentile(h, 99)));
        }
    }
    fprintf(f, "\n\nlatency: successful requests, client side, +-1.6 %% (log buckets); memory: "
               "GET /v1/sessions (MB/sessions); evictions: /metrics deltas over each scheme\n");
}

static FILE *open_out(const char *path)
{
    if (!strcmp(path, "-"))
        return stdout;
    FILE *f = fopen(path, "w");
    if (!f)
        perror(path);
    return f;
}

static int close_out(FILE *f)
{
    if (f == stdout)
        return fflush(f) ? -1 : 0;
    return fclose(f) ? -1 : 0;
}

static cJSON *hist_json(const load_hist *h)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)h->total);
    cJSON_AddNumberToObject(o, "min", h->total ? load_ms(h->min_us) : 0);
    for (int p = 0; p < LOAD_N_PCTS; p++)
        cJSON_AddNumberToObject(o, load_pct_names[p],
                                load_ms(load_hist_percentile(h, load_pcts[p])));
    cJSON_AddNumberToObject(o, "max", load_ms(h->max_us));
    cJSON_AddNumberToObject(o, "mean", h->total ? h->sum_us / 1000.0 / (double)h->total : 0);
    return o;
}

static cJSON *mem_json(const load_sess_memory *m)
{
    if (!m->valid)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "sessions", m->sessions);
    cJSON_AddNumberToObject(o, "bytes", m->bytes);
    cJSON_AddNumberToObject(o, "budget_bytes", m->budget_bytes);
    cJSON_AddNumberToObject(o, "blocks_used", m->blocks_used);
    cJSON_AddNumberToObject(o, "blocks_shared", m->blocks_shared);
    return o;
}

int load_sess_report_json(const char *path, const load_config *c, const load_sess_result *r, int n)
{
    cJSON *root = cJSON_CreateObject(), *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON *res = cJSON_AddArrayToObject(root, "results");
    char ev[64];
    eviction_name(ev, sizeof ev, c);
    cJSON_AddStringToObject(root, "tool", "posattn-load");
    cJSON_AddStringToObject(root, "mode", "sessions");
    cJSON_AddStringToObject(cfg, "url", c->url);
    cJSON_AddBoolToObject(cfg, "spawned", c->spawn != NULL);
    cJSON_AddNumberToObject(cfg, "sessions", c->sessions);
    cJSON_AddNumberToObject(cfg, "prompt", c->sess_prompt);
    cJSON_AddNumberToObject(cfg, "steps", c->sess_steps);
    cJSON_AddStringToObject(cfg, "eviction", ev);
    cJSON_AddNumberToObject(cfg, "fork_share", c->fork_share);
    cJSON_AddNumberToObject(cfg, "decode_seconds", c->sess_decode_s);
    cJSON_AddNumberToObject(cfg, "heads", c->heads);
    cJSON_AddNumberToObject(cfg, "kv_heads", c->kv_heads);
    cJSON_AddNumberToObject(cfg, "head_dim", c->head_dim);
    cJSON_AddStringToObject(cfg, "encoding", c->encoding == LOAD_ENC_B64 ? "b64" : "json");
    cJSON *sch = cJSON_AddArrayToObject(cfg, "schemes");
    for (int i = 0; i < c->n_schemes; i++)
        cJSON_AddItemToArray(sch, cJSON_CreateString(c->schemes[i]));
    for (int i = 0; i < n; i++) {
        const load_sess_result *x = &r[i];
        cJSON *o = cJSON_CreateObject(), *e, *b;
        cJSON_AddItemToArray(res, o);
        cJSON_AddStringToObject(o, "scheme", x->scheme);
        cJSON_AddNumberToObject(o, "forked", x->n_fork);
        cJSON_AddNumberToObject(o, "creates_ok", (double)x->creates_ok);
        cJSON_AddNumberToObject(o, "forks_ok", (double)x->forks_ok);
        cJSON_AddNumberToObject(o, "prefills_ok", (double)x->prefills_ok);
        cJSON_AddNumberToObject(o, "prefills_failed", (double)x->prefills_failed);
        cJSON_AddNumberToObject(o, "deletes_ok", (double)x->deletes_ok);
        cJSON_AddNumberToObject(o, "deletes_gone", (double)x->deletes_gone);
        cJSON_AddNumberToObject(o, "steps_ok", (double)x->steps_ok);
        cJSON_AddNumberToObject(o, "steps_failed", (double)x->steps_failed);
        cJSON_AddNumberToObject(o, "steps_not_run", (double)x->steps_skipped);
        cJSON_AddNumberToObject(o, "steps_cut", (double)x->steps_cut);
        cJSON_AddNumberToObject(o, "failed_requests", (double)x->n_failed);
        cJSON_AddNumberToObject(o, "prefill_s", x->prefill_s);
        cJSON_AddNumberToObject(o, "decode_s", x->decode_s);
        cJSON_AddNumberToObject(o, "steps_per_s", steps_per_s(x));
        e = cJSON_AddObjectToObject(o, "errors_by_code");
        for (int k = 0; k < x->n_errors; k++)
            cJSON_AddNumberToObject(e, x->errors[k].key, (double)x->errors[k].count);
        e = cJSON_AddObjectToObject(o, "error_samples");
        for (int k = 0; k < x->n_errors; k++)
            cJSON_AddStringToObject(e, x->errors[k].key, x->errors[k].sample);
        cJSON_AddItemToObject(o, "step_latency_ms", hist_json(&x->step_hist));
        cJSON_AddItemToObject(o, "prefill_latency_ms", hist_json(&x->prefill_hist));
        b = cJSON_AddArrayToObject(o, "by_cache_length");
        for (int k = 0; k < LOAD_SESS_BUCKETS; k++) {
            if (x->bucket[k].total == 0)
                continue;
            cJSON *h = hist_json(&x->bucket[k]);
            cJSON_AddNumberToObject(h, "tokens_from", (double)(1L << k));
            cJSON_AddNumberToObject(h, "tokens_to", (double)((2L << k) - 1));
            cJSON_AddItemToArray(b, h);
        }
        cJSON *m = cJSON_AddObjectToObject(o, "memory");
        cJSON_AddItemToObject(m, "after_prefill", mem_json(&x->mem_prefill));
        cJSON_AddItemToObject(m, "after_decode", mem_json(&x->mem_end));
        cJSON_AddItemToObject(m, "after_delete", mem_json(&x->mem_after));
        if (x->have_counters) {
            cJSON *k = cJSON_AddObjectToObject(o, "metrics");
            cJSON_AddNumberToObject(k, "evictions_ttl", x->counters.evicted_ttl);
            cJSON_AddNumberToObject(k, "evictions_pool_full", x->counters.evicted_pool_full);
            cJSON_AddNumberToObject(k, "tokens_appended", x->counters.tokens_appended);
            cJSON_AddNumberToObject(k, "tokens_evicted", x->counters.tokens_evicted);
        } else {
            cJSON_AddNullToObject(o, "metrics");
        }
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = s ? open_out(path) : NULL;
    int rc = -1;
    if (f) {
        fputs(s, f);
        fputc('\n', f);
        rc = close_out(f);
    }
    free(s);
    return rc;
}

/* Step latency against cache length: x the bucket's lower bound (log2),
 * y milliseconds (log10), a p50 line (solid) and a p99 line (dashed) per
 * scheme. */
static void svg_by_length(FILE *f, const load_sess_result *r, int n)
{
    const int left = 70, top = 40, plot_w = 480, plot_h = 260, width = 720, height = 360;
    int lo, hi;
    double vmin = 0, vmax = 0;
    bucket_range(r, n, &lo, &hi);
    if (hi < lo)
        lo = hi = 0;
    for (int i = 0; i < n; i++)
        for (int b = lo; b <= hi; b++)
            for (int p = 0; p < 2 && r[i].bucket[b].total; p++) {
                double v = load_ms(load_hist_percentile(&r[i].bucket[b], p ? 99 : 50));
                vmax = v > vmax ? v : vmax;
                if (v > 0 && (vmin == 0 || v < vmin))
                    vmin = v;
            }
    if (!(vmin > 0))
        vmin = vmax = 1;
    double ylo = floor(log10(vmin / 2)), yhi = ceil(log10(vmax));
    if (yhi <= ylo)
        yhi = ylo + 1;
    int span = hi > lo ? hi - lo : 1;
#define XPX(b) (left + (int)((double)plot_w * ((b)-lo) / span))
#define YPX(v) (top + plot_h - (int)(plot_h * (log10(v) - ylo) / (yhi - ylo) + 0.5))
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"11\" class=\"by-length\">\n"
            "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">Decode step latency "
            "against cache length (p50 solid, p99 dashed)</text>\n",
            width, height, left);
    for (int e = (int)ylo; e <= (int)yhi; e++)
        for (int k = 0; k < 3; k++) {
            static const double m[] = {1, 2, 5};
            double v = m[k] * pow(10, e);
            if (k > 0 && (yhi - ylo > 3 || e == (int)yhi))
                break;
            fprintf(f,
                    "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                    "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%g</text>\n",
                    left, left + plot_w, YPX(v), YPX(v), left - 6, YPX(v) + 4, v);
        }
    fprintf(f,
            "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">ms "
            "(log scale)</text>\n",
            top + plot_h / 2, top + plot_h / 2);
    for (int b = lo; b <= hi; b++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%ld</text>\n", XPX(b),
                top + plot_h + 16, 1L << b);
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">tokens in the cache (log scale, "
            "bucket [2^k, 2^(k+1)))</text>\n",
            left + plot_w / 2, top + plot_h + 36);
    for (int i = 0; i < n; i++) {
        const char *col = COLORS[i % 8];
        for (int p = 0; p < 2; p++) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col,
                    p ? " stroke-dasharray=\"5,3\"" : "");
            for (int b = lo; b <= hi; b++)
                if (r[i].bucket[b].total)
                    fprintf(f, "%d,%d ", XPX(b),
                            YPX(load_ms(load_hist_percentile(&r[i].bucket[b], p ? 99 : 50))));
            fprintf(f, "\"/>\n");
            for (int b = lo; b <= hi; b++)
                if (r[i].bucket[b].total) {
                    double v = load_ms(load_hist_percentile(&r[i].bucket[b], p ? 99 : 50));
                    fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"%s\"><title>", XPX(b),
                            YPX(v), col);
                    load_html_escape(f, r[i].scheme);
                    fprintf(f, " %ld-%ld tokens: %s %.3f ms (%llu steps)</title></circle>\n",
                            1L << b, (2L << b) - 1, p ? "p99" : "p50", v,
                            (unsigned long long)r[i].bucket[b].total);
                }
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">", left + plot_w + 10, top + 12 + 14 * i,
                col);
        load_html_escape(f, r[i].scheme);
        fprintf(f, "</text>\n");
    }
#undef XPX
#undef YPX
    fprintf(f, "</svg>\n");
}

int load_sess_report_html(const char *path, const load_config *c, const load_sess_result *r, int n)
{
    FILE *f = open_out(path);
    if (!f)
        return -1;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>posattn-load "
               "sessions report</title>\n<style>body{font-family:sans-serif;margin:2em;color:#222}"
               "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
               "padding:3px 8px;text-align:right}th{background:#f4f4f4}td:first-child{text-align:"
               "left}figure{margin:1.5em 0}</style></head><body>\n"
               "<h1>posattn-load sessions report</h1>\n<p>");
    describe(f, c);
    fprintf(f, "</p>\n<table class=\"sessions\"><tr><th>scheme</th><th>steps/s</th>"
               "<th>steps ok</th><th>failed</th><th>not run</th><th>step p50 ms</th>"
               "<th>step p99 ms</th><th>prefill p50 ms</th><th>MB after prefill</th>"
               "<th>MB after decode</th><th>shared blocks</th><th>evictions pool_full / ttl</th>"
               "<th>tokens evicted</th><th>errors</th></tr>\n");
    for (int i = 0; i < n; i++) {
        const load_sess_result *x = &r[i];
        fprintf(f, "<tr><td>");
        load_html_escape(f, x->scheme);
        fprintf(f,
                "</td><td>%.1f</td><td>%ld</td><td>%ld</td><td>%ld</td><td>%.3f</td><td>%.3f</td>"
                "<td>%.3f</td><td>%.2f</td><td>%.2f</td><td>%.0f</td><td>%.0f / %.0f</td>"
                "<td>%.0f</td><td>%ld",
                steps_per_s(x), x->steps_ok, x->steps_failed, x->steps_skipped,
                load_ms(load_hist_percentile(&x->step_hist, 50)),
                load_ms(load_hist_percentile(&x->step_hist, 99)),
                load_ms(load_hist_percentile(&x->prefill_hist, 50)),
                x->mem_prefill.bytes / 1048576.0, x->mem_end.bytes / 1048576.0,
                x->mem_prefill.blocks_shared, x->counters.evicted_pool_full,
                x->counters.evicted_ttl, x->counters.tokens_evicted, x->n_failed);
        for (int e = 0; e < x->n_errors; e++) {
            fprintf(f, "%s", e ? ", " : " (");
            load_html_escape(f, x->errors[e].key);
            fprintf(f, "&times;%ld", x->errors[e].count);
        }
        fprintf(f, "%s</td></tr>\n", x->n_errors ? ")" : "");
    }
    fprintf(f, "</table>\n<figure>\n");
    svg_by_length(f, r, n);
    fprintf(f, "</figure>\n</body></html>\n");
    return close_out(f);
}
