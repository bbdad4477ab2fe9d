/* report.c - posattn-load's outputs: the terminal table, --json, --csv,
 * --html (a self-contained page with inline SVG charts, no scripts; latency
 * axes log scale, a checkbox switches them to linear) and --svg (the main
 * charts as one standalone SVG image, latency on a log scale). With --model
 * report_layers.c adds each layer's figures, and the latency charts have a
 * group of bars per layer.
 */
#include "load.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


static double mean_ms(double sum_s, double count)
{
    return count > 0 ? sum_s / count * 1000.0 : 0.0;
}

static const char *enc_name(const load_config *c)
{
    return c->encoding == LOAD_ENC_B64 ? "b64" : "json";
}

static void describe(FILE *f, const load_config *c, const char *nl)
{
    if (c->model)
        fprintf(f, "target %s%s  model %s (%s, %d of its layers%s%s)  batch %d  %s%s  seed %llu  ",
                c->url, c->spawn ? " (spawned)" : "", c->model->name, c->model->model_type,
                c->model->n_layers, c->stack ? ", " : "", c->stack ? c->stack : "", c->batch,
                enc_name(c), c->causal ? "  causal" : "", c->seed);
    else
        fprintf(f, "target %s%s  heads %d  kv_heads %d  head_dim %d  batch %d  %s%s  seed %llu  ",
                c->url, c->spawn ? " (spawned)" : "", c->heads, c->kv_heads, c->head_dim, c->batch,
                enc_name(c), c->causal ? "  causal" : "", c->seed);
    if (c->layer)
        fprintf(f, "layer mode (d_model %d)  ", c->heads * c->head_dim);
    if (c->preset)
        fprintf(f, "preset %s  ", c->preset);
    if (c->packed > 1)
        fprintf(f, "packed %d  ", c->packed);
    if (c->differential)
        fprintf(f, "differential %s lambda %g depth %d  ",
                c->diff_halves ? "halves" : "interleaved", c->diff_lambda, c->diff_depth);
    if (c->mla_rope_dim > 0 && c->mla_rank > 0)
        fprintf(f, "mla rope_dim %d absorbed R %d  ", c->mla_rope_dim, c->mla_rank);
    else if (c->mla_rope_dim > 0)
        fprintf(f, "mla rope_dim %d  ", c->mla_rope_dim);
    if (c->dtype != LOAD_DTYPE_F32)
        fprintf(f, "dtype %s  ", c->dtype == LOAD_DTYPE_F16 ? "f16" : "bf16");
    if (c->batch_seq > 1)
        fprintf(f, "batch-seq %d  ", c->batch_seq);
    if (c->lengths_spread > 0)
        fprintf(f, "lengths-spread %g  ", c->lengths_spread);
    if (c->softcap > 0)
        fprintf(f, "softcap %g  ", c->softcap);
    if (c->sinks)
        fprintf(f, "sinks  ");
    if (c->chunk > 0)
        fprintf(f, "chunk %d  ", c->chunk);
    if (c->ret[0] != '\0')
        fprintf(f, "return %s  ", c->ret);
    if (c->requests > 0)
        fprintf(f, "%ld requests", c->requests);
    if (c->duration_s > 0)
        fprintf(f, "%s%.3g s", c->requests > 0 ? " or " : "", c->duration_s);
    fprintf(f, " per phase, warm-up %.3g s%s", c->warmup_s, nl);
}

void load_report_table(FILE *f, const load_config *c, const load_result *r, int n)
{
    describe(f, c, "\n\n");
    fprintf(f, "%-12s %6s %4s %9s %9s %8s %8s %8s %8s %8s %8s %8s %7s %9s %9s %9s %9s %9s\n",
            "scheme", "L", "conc", "req/s", "items/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms",
            "max ms", "sent", "ok", "errors", "queue ms", "comp ms", "srv ms", "GFLOP/s", "peak");
    for (int i = 0; i < n; i++) {
        const load_result *x = &r[i];
        fprintf(f, "%-12s %6d %4d %9.1f %9.1f", x->scheme, x->length, x->concurrency,
                load_rate((double)x->ok, x->elapsed_s), load_rate((double)x->ok * c->batch, x->elapsed_s));
        for (int p = 0; p < LOAD_N_PCTS; p++)
            fprintf(f, " %8.3f", load_ms(load_hist_percentile(&x->hist, load_pcts[p])));
        fprintf(f, " %8.3f %8ld %8ld %7ld", load_ms(x->hist.max_us), x->sent, x->ok, x->errors);
        if (x->server.valid)
            fprintf(f, " %9.3f %9.3f %9.3f",
                    mean_ms(x->server.queue_sum_s, x->server.queue_count),
                    mean_ms(x->server.compute_sum_s, x->server.compute_count),
                    mean_ms(x->server.request_sum_s, x->server.request_count));
        else
            fprintf(f, " %9s %9s %9s", "-", "-", "-");
        if (x->roof.n > 0)
            fprintf(f, " %9.2f", load_roofline_gflops(&x->roof));
        else
            fprintf(f, " %9s", "-");
        if (load_roofline_fraction(&x->roof) >= 0)
            fprintf(f, " %7.3f %c\n", load_roofline_fraction(&x->roof),
                    load_roofline_bound(&x->roof)[0]);
        else
            fprintf(f, " %9s\n", "-");
    }
    int any = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < r[i].n_status; s++) {
            if (!any++)
                fprintf(f, "\nerrors:\n");
            fprintf(f, "  %s L=%d c=%d: %s x %ld  (%s)\n", r[i].scheme, r[i].length,
                    r[i].concurrency, r[i].status[s].key, r[i].status[s].count,
                    r[i].status[s].sample);
        }
    if (c->model)
        load_report_layers_table(f, c, r, n);
    fprintf(f,
            "\nlatency: successful requests, client side, +-1.6 %% (log buckets); queue/comp ms: "
            "the server's mean per task,\nsrv ms: its mean per request (arrival to "
            "answer), both from /metrics before and after each phase;\nGFLOP/s: the items' "
            "flops over the requests' compute time, peak: the mean fraction of the server's "
            "peak (c compute, m memory bound), from each answer's Server-Timing roofline\n");
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

int load_report_json(const char *path, const load_config *c, const load_result *r, int n)
{
    cJSON *root = cJSON_CreateObject(), *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(root, "tool", "posattn-load");
    cJSON_AddStringToObject(cfg, "url", c->url);
    cJSON_AddBoolToObject(cfg, "spawned", c->spawn != NULL);
    cJSON *a;
    if (c->model) {
        load_report_layers_config_json(cfg, c);
    } else {
        a = cJSON_AddArrayToObject(cfg, "schemes");
        for (int i = 0; i < c->n_schemes; i++)
            cJSON_AddItemToArray(a, cJSON_CreateString(c->schemes[i]));
    }
    a = cJSON_AddArrayToObject(cfg, "lengths");
    for (int i = 0; i < c->n_lengths; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(c->lengths[i]));
    a = cJSON_AddArrayToObject(cfg, "concurrency");
    for (int i = 0; i < c->n_concurrency; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(c->concurrency[i]));
    /* A model's config decides the shapes and options: each layer lists them. */
    if (!c->model) {
        cJSON_AddNumberToObject(cfg, "heads", c->heads);
        cJSON_AddNumberToObject(cfg, "kv_heads", c->kv_heads);
        cJSON_AddNumberToObject(cfg, "head_dim", c->head_dim);
    }
    cJSON_AddNumberToObject(cfg, "batch", c->batch);
    cJSON_AddNumberToObject(cfg, "duration_s", c->duration_s);
    cJSON_AddNumberToObject(cfg, "requests", (double)c->requests);
    cJSON_AddNumberToObject(cfg, "warmup_s", c->warmup_s);
    cJSON_AddStringToObject(cfg, "encoding", enc_name(c));
    cJSON_AddBoolToObject(cfg, "causal", c->causal);
    cJSON_AddStringToObject(cfg, "dtype",
                            c->dtype == LOAD_DTYPE_F16    ? "f16"
                            : c->dtype == LOAD_DTYPE_BF16 ? "bf16"
                                                          : "f32");
    cJSON_AddNumberToObject(cfg, "batch_seq", c->batch_seq > 1 ? c->batch_seq : 1);
    cJSON_AddNumberToObject(cfg, "lengths_spread", c->lengths_spread);
    if (!c->model) {
        cJSON_AddNumberToObject(cfg, "softcap", c->softcap);
        cJSON_AddBoolToObject(cfg, "sinks", c->sinks);
        cJSON_AddNumberToObject(cfg, "chunk_size", c->chunk);
        if (c->differential) {
            cJSON *d = cJSON_AddObjectToObject(cfg, "differential");
            cJSON_AddStringToObject(d, "pairs", c->diff_halves ? "halves" : "interleaved");
            cJSON_AddNumberToObject(d, "lambda", c->diff_lambda);
            cJSON_AddNumberToObject(d, "depth", c->diff_depth);
        }
        if (c->mla_rope_dim > 0) {
            cJSON *m = cJSON_AddObjectToObject(cfg, "mla");
            cJSON_AddNumberToObject(m, "rope_dim", c->mla_rope_dim);
            cJSON_AddBoolToObject(m, "absorbed", c->mla_rank > 0);
            if (c->mla_rank > 0)
                cJSON_AddNumberToObject(m, "kv_lora_rank", c->mla_rank);
        }
    }
    cJSON_AddStringToObject(cfg, "return", c->ret[0] ? c->ret : "output");
    if (c->preset)
        cJSON_AddStringToObject(cfg, "preset", c->preset);
    if (!c->model)
        cJSON_AddBoolToObject(cfg, "layer", c->layer);
    cJSON_AddNumberToObject(cfg, "seed", (double)c->seed);
    if (c->machine.probed) { /* the target's ceilings, GET /v1/schemes */
        cJSON *m = cJSON_AddObjectToObject(root, "machine");
        cJSON_AddNumberToObject(m, "threads", c->machine.threads);
        cJSON_AddNumberToObject(m, "gflops_1", c->machine.gflops_1);
        cJSON_AddNumberToObject(m, "gflops_n", c->machine.gflops_n);
        cJSON_AddNumberToObject(m, "read_gbps_1", c->machine.gbps_1);
        cJSON_AddNumberToObject(m, "read_gbps_n", c->machine.gbps_n);
    } else {
        cJSON_AddNullToObject(root, "machine");
    }

    cJSON *res = cJSON_AddArrayToObject(root, "results");
    for (int i = 0; i < n; i++) {
        const load_result *x = &r[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(res, o);
        cJSON_AddStringToObject(o, "scheme", x->scheme);
        cJSON_AddNumberToObject(o, "length", x->length);
        cJSON_AddNumberToObject(o, "concurrency", x->concurrency);
        cJSON_AddNumberToObject(o, "elapsed_s", x->elapsed_s);
        cJSON_AddNumberToObject(o, "sent", (double)x->sent);
        cJSON_AddNumberToObject(o, "ok", (double)x->ok);
        cJSON_AddNumberToObject(o, "errors", (double)x->errors);
        cJSON *e = cJSON_AddObjectToObject(o, "errors_by_status");
        cJSON *samples = cJSON_AddObjectToObject(o, "error_samples");
        for (int s = 0; s < x->n_status; s++) {
            cJSON_AddNumberToObject(e, x->status[s].key, (double)x->status[s].count);
            cJSON_AddStringToObject(samples, x->status[s].key, x->status[s].sample);
        }
        cJSON_AddNumberToObject(o, "requests_per_s", load_rate((double)x->ok, x->elapsed_s));
        cJSON_AddNumberToObject(o, "items_per_s", load_rate((double)x->ok * c->batch, x->elapsed_s));
        cJSON_AddNumberToObject(o, "request_body_bytes", (double)x->body_bytes);
        cJSON_AddNumberToObject(o, "bytes_sent", x->bytes_sent);
        cJSON_AddNumberToObject(o, "bytes_received", x->bytes_received);
        cJSON *l = cJSON_AddObjectToObject(o, "latency_ms");
        cJSON_AddNumberToObject(l, "count", (double)x->hist.total);
        cJSON_AddNumberToObject(l, "min", load_ms(x->hist.min_us));
        cJSON_AddNumberToObject(
            l, "mean", x->hist.total ? x->hist.sum_us / 1000.0 / (double)x->hist.total : 0);
        for (int p = 0; p < LOAD_N_PCTS; p++)
            cJSON_AddNumberToObject(l, load_pct_names[p], load_ms(load_hist_percentile(&x->hist, load_pcts[p])));
        cJSON_AddNumberToObject(l, "max", load_ms(x->hist.max_us));
        if (x->server.valid) {
            cJSON *s = cJSON_AddObjectToObject(o, "server");
            cJSON_AddNumberToObject(s, "queue_count", x->server.queue_count);
            cJSON_AddNumberToObject(s, "queue_sum_s", x->server.queue_sum_s);
            cJSON_AddNumberToObject(s, "queue_mean_ms",
                                    mean_ms(x->server.queue_sum_s, x->server.queue_count));
            cJSON_AddNumberToObject(s, "compute_count", x->server.compute_count);
            cJSON_AddNumberToObject(s, "compute_sum_s", x->server.compute_sum_s);
            cJSON_AddNumberToObject(s, "compute_mean_ms",
                                    mean_ms(x->server.compute_sum_s, x->server.compute_count));
            double tot = x->server.queue_sum_s + x->server.compute_sum_s;
            cJSON_AddNumberToObject(s, "request_count", x->server.request_count);
            cJSON_AddNumberToObject(s, "request_mean_ms",
                                    mean_ms(x->server.request_sum_s, x->server.request_count));
            cJSON_AddNumberToObject(s, "queue_share", tot > 0 ? x->server.queue_sum_s / tot : 0);
        } else {
            cJSON_AddNullToObject(o, "server");
        }
        load_roofline_json(o, &x->roof);
        if (c->model)
            load_report_layers_json(o, c, x);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = text ? open_out(path) : NULL;
    int rc = -1;
    if (f) {
        fputs(text, f);
        fputc('\n', f);
        rc = close_out(f);
    }
    cJSON_free(text);
    return rc;
}

int load_report_csv(const char *path, const load_config *c, const load_result *r, int n)
{
    FILE *f = open_out(path);
    if (!f)
        return -1;
    if (c->model) {
        load_report_layers_csv(f, c, r, n);
        return close_out(f);
    }
    fprintf(f, "scheme,length,concurrency,heads,kv_heads,head_dim,batch,encoding,causal,"
               "elapsed_s,sent,ok,errors,errors_by_status,requests_per_s,items_per_s,"
               "p50_ms,p90_ms,p99_ms,p99_9_ms,max_ms,server_queue_mean_ms,server_compute_mean_ms,"
               "server_request_mean_ms,gflops,intensity,fraction_of_peak,bound\n");
    for (int i = 0; i < n; i++) {
        const load_result *x = &r[i];
        fprintf(f, "%s,%d,%d,%d,%d,%d,%d,%s,%d,%.3f,%ld,%ld,%ld,", x->scheme, x->length,
                x->concurrency, c->heads, c->kv_heads, c->head_dim, c->batch, enc_name(c),
                c->causal, x->elapsed_s, x->sent, x->ok, x->errors);
        for (int s = 0; s < x->n_status; s++)
            fprintf(f, "%s%s:%ld", s ? ";" : "", x->status[s].key, x->status[s].count);
        fprintf(f, ",%.3f,%.3f", load_rate((double)x->ok, x->elapsed_s),
                load_rate((double)x->ok * c->batch, x->elapsed_s));
        for (int p = 0; p < LOAD_N_PCTS; p++)
            fprintf(f, ",%.3f", load_ms(load_hist_percentile(&x->hist, load_pcts[p])));
        fprintf(f, ",%.3f", load_ms(x->hist.max_us));
        if (x->server.valid)
            fprintf(f, ",%.4f,%.4f,%.4f", mean_ms(x->server.queue_sum_s, x->server.queue_count),
                    mean_ms(x->server.compute_sum_s, x->server.compute_count),
                    mean_ms(x->server.request_sum_s, x->server.request_count));
        else
            fprintf(f, ",,,");
        if (x->roof.n > 0)
            fprintf(f, ",%.4f,%.4f", load_roofline_gflops(&x->roof),
                    load_roofline_intensity(&x->roof));
        else
            fprintf(f, ",,");
        if (load_roofline_fraction(&x->roof) >= 0)
            fprintf(f, ",%.4f,%s\n", load_roofline_fraction(&x->roof),
                    load_roofline_bound(&x->roof));
        else
            fprintf(f, ",,\n");
    }
    return close_out(f);
}

/* ------------------------------------------------------------------ html */

static const char *const COLORS[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                     "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};

/* The smallest 1, 2 or 5 times a power of ten at or above v. */
static double nice_ceil(double v)
{
    if (v <= 0)
        return 1;
    double p = pow(10, floor(log10(v)));
    for (int i = 0; i < 3; i++) {
        static const double m[] = {1, 2, 5};
        if (m[i] * p >= v)
            return m[i] * p;
    }
    return 10 * p;
}

static void phase_label(char *out, size_t len, const load_config *c, const load_result *x)
{
    if (c->n_concurrency > 1)
        snprintf(out, len, "%s L=%d c=%d", x->scheme, x->length, x->concurrency);
    else
        snprintf(out, len, "%s L=%d", x->scheme, x->length);
}

enum { BARS_HEIGHT = 390, CONC_WIDTH = 710, CONC_HEIGHT = 350 };

/* Bars narrow when there are many, so that a chart stays readable. */
static int bar_step(int n, int n_series)
{
    return n * n_series > 32 ? 14 : 24;
}

static int bars_width(int n, int n_series)
{
    int step = bar_step(n, n_series);
    int width = 70 + 20 + (step * n_series + step) * (n > 0 ? n : 1);
    return width < 480 ? 480 : width;
}

/* The y scales a bar chart can draw. A latency chart is log by default: a
 * p50 of 0.05 ms beside a p99.9 of 40 ms is a bar of 0.3 px on a linear
 * axis. The HTML report draws both, in <g class="scale-log"> and <g
 * class="scale-lin">, and a checkbox (CSS only, no script) shows one. */
enum { SCALE_LIN = 1, SCALE_LOG = 2 };

/* One y scale of a chart: linear from 0 to hi, or log10 from 10^lo to 10^hi. */
typedef struct {
    int log;
    double lo, hi;
} y_scale;

static y_scale scale_of(int log, double vmin_pos, double vmax)
{
    y_scale s = {log, 0, nice_ceil(vmax)};
    if (log) {
        if (!(vmin_pos > 0) || !(vmax > 0))
            vmin_pos = vmax = 1;
        /* The smallest bar stands at least a factor 2 above the axis. */
        s.lo = floor(log10(vmin_pos / 2));
        s.hi = ceil(log10(vmax));
        if (s.hi <= s.lo)
            s.hi = s.lo + 1;
    }
    return s;
}

/* The bar height of v in a plot plot_h high: 0 for v <= 0 on a log scale. */
static int scale_px(const y_scale *s, double v, int plot_h)
{
    double f;
    if (s->log)
        f = v > 0 ? (log10(v) - s->lo) / (s->hi - s->lo) : 0;
    else
        f = s->hi > 0 ? v / s->hi : 0;
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    return (int)(plot_h * f + 0.5);
}

/* Grid lines and their labels: fifths of a linear scale; whole decades of a
 * log one, with 2 and 5 between them when it spans three decades or less. */
static void scale_ticks(FILE *f, const y_scale *s, int left, int right_x, int top, int plot_h)
{
    double v[64];
    int n = 0;
    if (!s->log) {
        for (int t = 0; t <= 5; t++)
            v[n++] = s->hi * t / 5;
    } else {
        for (int e = (int)s->lo; e <= (int)s->hi && n < 60; e++)
            for (int k = 0; k < 3 && n < 60; k++) {
                static const double m[] = {1, 2, 5};
                if (k > 0 && (s->hi - s->lo > 3 || e == (int)s->hi))
                    break;
                v[n++] = m[k] * pow(10, e);
            }
    }
    for (int i = 0; i < n; i++) {
        int y = top + plot_h - scale_px(s, v[i], plot_h);
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%g</text>\n",
                left, right_x, y, y, left - 6, y + 4, v[i]);
    }
}

/* A grouped bar chart: one group per phase, n_series bars in each; an <svg>
 * element at vertical offset y (ignored when it is the outermost). scales
 * (SCALE_LIN, SCALE_LOG or both) says which y axes to draw. */
static void svg_bars(FILE *f, int y0, const char *title, const char *unit, const load_config *c,
                     const load_result *r, int n, const char *const *series, int n_series,
                     double (*value)(const load_config *, const load_result *, int), int scales)
{
    const int left = 70, right = 20, top = 40, bottom = 90, plot_h = 260;
    int step = bar_step(n, n_series);
    int group_w = step * n_series + step;
    int width = bars_width(n, n_series);
    int height = top + plot_h + bottom;
    double vmax = 0, vmin = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < n_series; s++) {
            double v = value(c, &r[i], s);
            vmax = v > vmax ? v : vmax;
            if (v > 0 && (vmin == 0 || v < vmin))
                vmin = v;
        }

    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n",
            y0, width, height);
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">", left);
    load_html_escape(f, title);
    fprintf(f, "</text>\n");
    for (int pass = 0; pass < 2; pass++) {
        int log = pass == 0;
        if (!(scales & (log ? SCALE_LOG : SCALE_LIN)))
            continue;
        y_scale ys = scale_of(log, vmin, vmax);
        int both = (scales & SCALE_LOG) && (scales & SCALE_LIN);
        if (both)
            fprintf(f, "<g class=\"%s\">\n", log ? "scale-log" : "scale-lin");
        scale_ticks(f, &ys, left, width - right, top, plot_h);
        fprintf(f,
                "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">",
                top + plot_h / 2, top + plot_h / 2);
        load_html_escape(f, unit);
        fprintf(f, "%s</text>\n", log ? " (log scale)" : "");
        for (int i = 0; i < n; i++) {
            int gx = left + i * group_w + step / 2;
            for (int s = 0; s < n_series; s++) {
                double v = value(c, &r[i], s);
                int h = scale_px(&ys, v, plot_h);
                fprintf(f,
                        "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">"
                        "<title>%s: %.4g %s</title></rect>\n",
                        gx + step * s, top + plot_h - h, step - 2, h, COLORS[s % 8], series[s], v,
                        unit);
            }
        }
        if (both)
            fprintf(f, "</g>\n");
    }
    for (int i = 0; i < n; i++) {
        int gx = left + i * group_w + step / 2;
        char label[96];
        phase_label(label, sizeof label, c, &r[i]);
        int lx = gx + step / 2 * n_series, ly = top + plot_h + 14;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" transform=\"rotate(-35 %d %d)\">",
                lx, ly, lx, ly);
        load_html_escape(f, label);
        fprintf(f, "</text>\n");
    }
    for (int s = 0; s < n_series; s++)
        fprintf(f,
                "<rect x=\"%d\" y=\"28\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"37\">%s</text>\n",
                width - right - 90 * (n_series - s), COLORS[s % 8],
                width - right - 90 * (n_series - s) + 14, series[s]);
    fprintf(f, "</svg>\n");
}

static double latency_value(const load_config *c, const load_result *x, int s)
{
    (void)c;
    return load_ms(load_hist_percentile(&x->hist, load_pcts[s]));
}

static double throughput_value(const load_config *c, const load_result *x, int s)
{
    return load_rate((double)x->ok * (s == 0 ? 1 : c->batch), x->elapsed_s);
}

static double split_value(const load_config *c, const load_result *x, int s)
{
    (void)c;
    if (!x->server.valid)
        return 0;
    if (s == 0)
        return mean_ms(x->server.queue_sum_s, x->server.queue_count);
    if (s == 1)
        return mean_ms(x->server.compute_sum_s, x->server.compute_count);
    return mean_ms(x->server.request_sum_s, x->server.request_count);
}

/* Throughput against concurrency: one line per (scheme, length); an <svg>
 * element at vertical offset y0. */
static void svg_concurrency(FILE *f, int y0, const load_config *c, const load_result *r, int n)
{
    /* CONC_WIDTH = left + plot_w + 160 (legend); CONC_HEIGHT = top + plot_h + 50 (axis). */
    const int left = 70, top = 40, plot_w = 480, plot_h = 260;
    int width = CONC_WIDTH, height = CONC_HEIGHT;
    double vmax = 0;
    int cmax = 1;
    for (int i = 0; i < n; i++) {
        double v = load_rate((double)r[i].ok, r[i].elapsed_s);
        vmax = v > vmax ? v : vmax;
        cmax = r[i].concurrency > cmax ? r[i].concurrency : cmax;
    }
    vmax = nice_ceil(vmax);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n"
            "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">"
            "Throughput vs concurrency (requests/s)</text>\n",
            y0, width, height, left);
    for (int t = 0; t <= 5; t++) {
        int y = top + plot_h - plot_h * t / 5;
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%g</text>\n",
                left, left + plot_w, y, y, left - 6, y + 4, vmax * t / 5);
    }
    for (int k = 0; k < c->n_concurrency; k++) {
        int x = left + (int)((double)plot_w * c->concurrency[k] / cmax);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x,
                top + plot_h + 16, c->concurrency[k]);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">concurrency</text>\n",
            left + plot_w / 2, top + plot_h + 36);
    int line = 0, n_schemes = c->model ? 1 : c->n_schemes;
    for (int s = 0; s < n_schemes; s++)
        for (int l = 0; l < c->n_lengths; l++, line++) {
            const char *col = COLORS[line % 8];
            const char *scheme = c->model ? c->model->name : c->schemes[s];
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
            for (int i = 0; i < n; i++)
                if (!strcmp(r[i].scheme, scheme) && r[i].length == c->lengths[l])
                    fprintf(f, "%d,%d ", left + (int)((double)plot_w * r[i].concurrency / cmax),
                            top + plot_h -
                                (int)(plot_h * load_rate((double)r[i].ok, r[i].elapsed_s) / vmax));
            fprintf(f, "\"/>\n");
            for (int i = 0; i < n; i++)
                if (!strcmp(r[i].scheme, scheme) && r[i].length == c->lengths[l])
                    fprintf(f,
                            "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"%s\"><title>%s L=%d "
                            "c=%d: %.1f requests/s</title></circle>\n",
                            left + (int)((double)plot_w * r[i].concurrency / cmax),
                            top + plot_h -
                                (int)(plot_h * load_rate((double)r[i].ok, r[i].elapsed_s) / vmax),
                            col, r[i].scheme, r[i].length, r[i].concurrency,
                            load_rate((double)r[i].ok, r[i].elapsed_s));
            fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s L=%d</text>\n", left + plot_w + 10,
                    top + 12 + 14 * line, col, scheme, c->lengths[l]);
        }
    fprintf(f, "</svg>\n");
}

int load_report_html(const char *path, const load_config *c, const load_result *r, int n)
{
    static const char *const lat_series[] = {"p50", "p90", "p99", "p99.9"};
    static const char *const thr_series[] = {"requests/s", "items/s"};
    static const char *const split_series[] = {"queue", "compute", "request"};
    FILE *f = open_out(path);
    if (!f)
        return -1;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>posattn-load report"
               "</title>\n<style>body{font-family:sans-serif;margin:2em;color:#222}"
               "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
               "padding:3px 8px;text-align:right}th{background:#f4f4f4}td:first-child{text-align:"
               "left}figure{margin:1.5em 0}#linear-axes{margin:1.2em .4em 0 0}"
               ".scale-lin{display:none}#linear-axes:checked~figure .scale-lin{display:inline}"
               "#linear-axes:checked~figure .scale-log{display:none}"
               "</style></head><body>\n<h1>posattn-load report</h1>\n<p>");
    describe(f, c, "");
    fprintf(f, "</p>\n<table><tr><th>scheme</th><th>L</th><th>conc</th><th>req/s</th>"
               "<th>items/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th>"
               "<th>max ms</th><th>sent</th><th>ok</th><th>errors</th><th>server queue ms</th>"
               "<th>server compute ms</th><th>server request ms</th><th>GFLOP/s</th>"
               "<th>fraction of peak</th></tr>\n");
    for (int i = 0; i < n; i++) {
        const load_result *x = &r[i];
        fprintf(f, "<tr><td>");
        load_html_escape(f, x->scheme);
        fprintf(f, "</td><td>%d</td><td>%d</td><td>%.1f</td><td>%.1f</td>", x->length,
                x->concurrency, load_rate((double)x->ok, x->elapsed_s),
                load_rate((double)x->ok * c->batch, x->elapsed_s));
        for (int p = 0; p < LOAD_N_PCTS; p++)
            fprintf(f, "<td>%.3f</td>", load_ms(load_hist_percentile(&x->hist, load_pcts[p])));
        fprintf(f, "<td>%.3f</td><td>%ld</td><td>%ld</td><td>%ld", load_ms(x->hist.max_us), x->sent,
                x->ok, x->errors);
        for (int s = 0; s < x->n_status; s++)
            fprintf(f, "%s%s&times;%ld", s ? ", " : " (", x->status[s].key, x->status[s].count);
        fprintf(f, "%s</td>", x->n_status ? ")" : "");
        if (x->server.valid)
            fprintf(f, "<td>%.3f</td><td>%.3f</td><td>%.3f</td>",
                    mean_ms(x->server.queue_sum_s, x->server.queue_count),
                    mean_ms(x->server.compute_sum_s, x->server.compute_count),
                    mean_ms(x->server.request_sum_s, x->server.request_count));
        else
            fprintf(f, "<td>-</td><td>-</td><td>-</td>");
        if (x->roof.n > 0)
            fprintf(f, "<td>%.2f</td>", load_roofline_gflops(&x->roof));
        else
            fprintf(f, "<td>-</td>");
        if (load_roofline_fraction(&x->roof) >= 0)
            fprintf(f, "<td>%.3f %s</td></tr>\n", load_roofline_fraction(&x->roof),
                    load_roofline_bound(&x->roof));
        else
            fprintf(f, "<td>-</td></tr>\n");
    }
    /* The switch of the latency axes: a checkbox the figures after it follow
     * in CSS (see svg_bars), so the page stays free of scripts. */
    fprintf(f, "</table>\n");
    if (c->model)
        load_report_layers_html(f, c, r, n);
    fprintf(f, "<input type=\"checkbox\" id=\"linear-axes\"> <label "
               "for=\"linear-axes\">linear latency axes (log scale by default, so that small "
               "latencies stay visible)</label>\n<figure>\n");
    /* With a model, a group of bars per layer of each phase. */
    int n_rows = 0;
    load_result *rows = load_layer_rows(c, r, n, &n_rows);
    if (rows)
        svg_bars(f, 0, "Client latency percentiles per layer (successful requests)", "ms", c, rows,
                 n_rows, lat_series, 4, latency_value, SCALE_LOG | SCALE_LIN);
    else
        svg_bars(f, 0, "Client latency percentiles (successful requests)", "ms", c, r, n,
                 lat_series, 4, latency_value, SCALE_LOG | SCALE_LIN);
    free(rows);
    fprintf(f, "</figure>\n<figure>\n");
    svg_bars(f, 0, "Throughput", "per second", c, r, n, thr_series, c->batch > 1 ? 2 : 1,
             throughput_value, SCALE_LIN);
    fprintf(f, "</figure>\n<figure>\n");
    svg_bars(f, 0, "Server time (mean per task; request total)", "ms", c, r, n, split_series, 3,
             split_value, SCALE_LOG | SCALE_LIN);
    fprintf(f, "</figure>\n");
    if (c->n_concurrency > 1) {
        fprintf(f, "<figure>\n");
        svg_concurrency(f, 0, c, r, n);
        fprintf(f, "</figure>\n");
    }
    fprintf(f, "<figure>\n");
    load_roofline_svg(f, c, r, n);
    fprintf(f, "</figure>\n</body></html>\n");
    return close_out(f);
}

int load_report_svg(const char *path, const load_config *c, const load_result *r, int n)
{
    static const char *const lat_series[] = {"p50", "p90", "p99", "p99.9"};
    static const char *const thr_series[] = {"requests/s"};
    const int caption = 28;
    int conc = c->n_concurrency > 1, n_rows = 0;
    load_result *rows = load_layer_rows(c, r, n, &n_rows);
    int w1 = bars_width(rows ? n_rows : n, 4), w2 = conc ? CONC_WIDTH : bars_width(n, 1);
    int width = w1 > w2 ? w1 : w2;
    int height = caption + BARS_HEIGHT + (conc ? CONC_HEIGHT : BARS_HEIGHT);
    char *text = NULL;
    size_t text_len = 0;
    FILE *m, *f = open_out(path);
    if (!f) {
        free(rows);
        return -1;
    }
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            width, height, width, height);
    /* The scenario, as the table states it, in a caption. */
    m = open_memstream(&text, &text_len);
    if (m != NULL) {
        describe(m, c, "");
        fclose(m);
        fprintf(f, "<text x=\"10\" y=\"18\" fill=\"#555\">posattn-load: ");
        load_html_escape(f, text ? text : "");
        fprintf(f, "</text>\n");
        free(text);
    }
    if (rows)
        svg_bars(f, caption, "Client latency percentiles per layer (successful requests)", "ms", c,
                 rows, n_rows, lat_series, 4, latency_value, SCALE_LOG);
    else
        svg_bars(f, caption, "Client latency percentiles (successful requests)", "ms", c, r, n,
                 lat_series, 4, latency_value, SCALE_LOG);
    free(rows);
    if (conc)
        svg_concurrency(f, caption + BARS_HEIGHT, c, r, n);
    else
        svg_bars(f, caption + BARS_HEIGHT, "Throughput", "requests/s", c, r, n, thr_series, 1,
                 throughput_value, SCALE_LIN);
    fprintf(f, "</svg>\n");
    return close_out(f);
}
