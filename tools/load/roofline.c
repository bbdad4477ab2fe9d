/* roofline.c - how close each phase came to the target's ceilings: the
 * machine the server measured at start-up (GET /v1/schemes "machine"), the
 * work of each answer (its Server-Timing "roofline" entry: the items'
 * flops and bytes, and the fraction of peak the request's compute time
 * reached), and the HTML report's roofline chart: arithmetic intensity
 * (flops per byte) against achieved GFLOP/s, log axes, one point per
 * phase, the compute ceiling and the bandwidth slope as lines.
 */
#include "load.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void load_machine_fetch(load_config *c)
{
    long code = 0;
    char *text = load_http_get(c, "/v1/schemes", 1, &code);
    cJSON *root = text != NULL && code == 200 ? cJSON_Parse(text) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "machine");
    const cJSON *peaks = cJSON_GetObjectItemCaseSensitive(m, "peaks"), *p;
    memset(&c->machine, 0, sizeof c->machine);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "probed")) && cJSON_IsArray(peaks)) {
        cJSON_ArrayForEach(p, peaks)
        {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "threads");
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(p, "gflops_f32");
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(p, "read_gbps");
            if (!cJSON_IsNumber(t) || !cJSON_IsNumber(g) || !cJSON_IsNumber(b))
                continue;
            if (t->valueint == 1) {
                c->machine.gflops_1 = g->valuedouble;
                c->machine.gbps_1 = b->valuedouble;
            }
            if (t->valueint >= c->machine.threads) { /* the most threads: the workers */
                c->machine.threads = t->valueint;
                c->machine.gflops_n = g->valuedouble;
                c->machine.gbps_n = b->valuedouble;
            }
        }
        c->machine.probed = c->machine.gflops_n > 0 && c->machine.gbps_n > 0;
    }
    cJSON_Delete(root);
    free(text);
}

/* The value of param (";name=value") in the entry at e (up to its comma). */
static int param(const char *e, const char *end, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = e; p < end; p++) {
        if (*p != ';')
            continue;
        p++;
        while (p < end && *p == ' ')
            p++;
        if ((size_t)(end - p) > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            const char *v = p + nl + 1, *ve = v;
            while (ve < end && *ve != ';' && *ve != ',')
                ve++;
            if (*v == '"')
                v++;
            if (ve > v && ve[-1] == '"')
                ve--;
            snprintf(out, cap, "%.*s", (int)(ve - v), v);
            return 1;
        }
    }
    return 0;
}

void load_roofline_header(const char *line, size_t n, load_roof_sample *s)
{
    static const char NAME[] = "server-timing:";
    char text[1024], v[64];
    if (n < sizeof NAME - 1 || strncasecmp(line, NAME, sizeof NAME - 1) != 0)
        return;
    snprintf(text, sizeof text, "%.*s", (int)(n - (sizeof NAME - 1)), line + sizeof NAME - 1);
    text[strcspn(text, "\r\n")] = '\0';
    const char *end = text + strlen(text);
    const char *compute = strstr(text, "compute;dur=");
    if (compute != NULL)
        s->compute_ms = strtod(compute + 12, NULL);
    const char *roof = strstr(text, "roofline;");
    if (roof == NULL)
        return;
    /* param() scans from the entry's name to its first ';' and on. */
    const char *e = strchr(roof, ',');
    e = e != NULL ? e : end;
    if (!param(roof, e, "flops", v, sizeof v))
        return;
    s->flops = strtod(v, NULL);
    if (param(roof, e, "bytes", v, sizeof v))
        s->bytes = strtod(v, NULL);
    s->has_fraction = param(roof, e, "fraction", v, sizeof v);
    s->fraction = s->has_fraction ? strtod(v, NULL) : 0;
    s->compute_bound = param(roof, e, "bound", v, sizeof v) && strcmp(v, "compute") == 0;
    s->seen = 1;
}

void load_roofline_add(load_roofline *r, const load_roof_sample *s)
{
    if (!s->seen)
        return;
    r->n++;
    r->flops += s->flops;
    r->bytes += s->bytes;
    r->compute_s += s->compute_ms / 1000.0;
    if (s->has_fraction) {
        r->n_fraction++;
        r->fraction_sum += s->fraction;
        r->compute_bound += s->compute_bound;
    }
}

double load_roofline_gflops(const load_roofline *r)
{
    return r->compute_s > 0 ? r->flops / r->compute_s / 1e9 : 0;
}

double load_roofline_intensity(const load_roofline *r)
{
    return r->bytes > 0 ? r->flops / r->bytes : 0;
}

double load_roofline_fraction(const load_roofline *r)
{
    return r->n_fraction > 0 ? r->fraction_sum / (double)r->n_fraction : -1;
}

const char *load_roofline_bound(const load_roofline *r)
{
    if (r->n_fraction == 0)
        return "";
    return 2 * r->compute_bound >= r->n_fraction ? "compute" : "memory";
}

void load_roofline_json(void *obj, const load_roofline *r)
{
    cJSON *o;
    if (r->n == 0) {
        cJSON_AddNullToObject(obj, "roofline");
        return;
    }
    o = cJSON_AddObjectToObject(obj, "roofline");
    cJSON_AddNumberToObject(o, "requests", (double)r->n);
    cJSON_AddNumberToObject(o, "flops", r->flops);
    cJSON_AddNumberToObject(o, "bytes", r->bytes);
    cJSON_AddNumberToObject(o, "compute_s", r->compute_s);
    cJSON_AddNumberToObject(o, "gflops", load_roofline_gflops(r));
    cJSON_AddNumberToObject(o, "intensity", load_roofline_intensity(r));
    if (r->n_fraction > 0) {
        cJSON_AddNumberToObject(o, "fraction_of_peak", load_roofline_fraction(r));
        cJSON_AddStringToObject(o, "bound", load_roofline_bound(r));
    } else {
        cJSON_AddNullToObject(o, "fraction_of_peak");
    }
}

/* ------------------------------------------------------------------ chart */

static const char *const COLORS[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                     "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};

enum { LEFT = 70, TOP = 40, PLOT_W = 480, PLOT_H = 300, WIDTH = 760, HEIGHT = 400 };

typedef struct {
    double x0, x1, y0, y1; /* log10 bounds */
} axes;

static double px_x(const axes *a, double v)
{
    return LEFT + PLOT_W * (log10(v) - a->x0) / (a->x1 - a->x0);
}

static double px_y(const axes *a, double v)
{
    return TOP + PLOT_H - PLOT_H * (log10(v) - a->y0) / (a->y1 - a->y0);
}

/* The roof min(peak, bw x) from x = 10^x0 to 10^x1, clipped to the plot. */
static void roof_line(FILE *f, const axes *a, double peak, double bw, const char *dash,
                      const char *label)
{
    const double knee = peak / bw, lo = pow(10, a->y0) / bw; /* where the slope enters */
    double xs[3] = {lo > pow(10, a->x0) ? lo : pow(10, a->x0), knee, pow(10, a->x1)};
    fprintf(f, "<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\"%s points=\"", dash);
    for (int i = 0; i < 3; i++) {
        double x = xs[i], y;
        if (x < pow(10, a->x0) || x > pow(10, a->x1))
            continue;
        y = x < knee ? bw * x : peak;
        fprintf(f, "%.1f,%.1f ", px_x(a, x), px_y(a, y));
    }
    fprintf(f, "\"><title>%s: %.4g GFLOP/s, %.4g GB/s</title></polyline>\n", label, peak, bw);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#333\">%s %.0f GFLOP/s, %.0f GB/s</text>\n",
            LEFT + PLOT_W - 4, px_y(a, peak) - 4, label, peak, bw);
}

void load_roofline_svg(FILE *f, const load_config *c, const load_result *r, int n)
{
    const load_machine *m = &c->machine;
    double xmin = 0, xmax = 0, ymin = 0, ymax = 0;
    int points = 0;
    axes a;
    for (int i = 0; i < n; i++) {
        double x = load_roofline_intensity(&r[i].roof), y = load_roofline_gflops(&r[i].roof);
        if (!(x > 0) || !(y > 0))
            continue;
        xmin = points == 0 || x < xmin ? x : xmin;
        xmax = points == 0 || x > xmax ? x : xmax;
        ymin = points == 0 || y < ymin ? y : ymin;
        ymax = points == 0 || y > ymax ? y : ymax;
        points++;
    }
    if (points == 0)
        return;
    if (m->probed) {
        ymax = m->gflops_n > ymax ? m->gflops_n : ymax;
        /* The knee in view. */
        xmin = m->gflops_1 / m->gbps_1 < xmin ? m->gflops_1 / m->gbps_1 : xmin;
        xmax = m->gflops_n / m->gbps_n > xmax ? m->gflops_n / m->gbps_n : xmax;
    }
    a.x0 = floor(log10(xmin)) - (xmin == xmax ? 1 : 0);
    a.x1 = ceil(log10(xmax)) + (ceil(log10(xmax)) == log10(xmax) ? 1 : 0);
    a.y0 = floor(log10(ymin));
    a.y1 = ceil(log10(ymax * 1.05));
    if (a.x1 <= a.x0)
        a.x1 = a.x0 + 1;
    if (a.y1 <= a.y0)
        a.y1 = a.y0 + 1;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"11\" class=\"roofline\">\n"
            "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">Roofline: achieved "
            "GFLOP/s against arithmetic intensity (log axes)</text>\n",
            WIDTH, HEIGHT, LEFT);
    for (int e = (int)a.x0; e <= (int)a.x1; e++) {
        double x = px_x(&a, pow(10, e));
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                x, x, TOP, TOP + PLOT_H, x, TOP + PLOT_H + 16, pow(10, e));
    }
    for (int e = (int)a.y0; e <= (int)a.y1; e++) {
        double y = px_y(&a, pow(10, e));
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                LEFT, LEFT + PLOT_W, y, y, LEFT - 6, y + 4, pow(10, e));
    }
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">arithmetic intensity (flops per byte "
            "of q, k, v and results)</text>\n"
            "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">"
            "achieved GFLOP/s (flops / compute time)</text>\n",
            LEFT + PLOT_W / 2, TOP + PLOT_H + 34, TOP + PLOT_H / 2, TOP + PLOT_H / 2);
    if (m->probed) {
        char label[32];
        snprintf(label, sizeof label, "%d threads:", m->threads);
        roof_line(f, &a, m->gflops_n, m->gbps_n, "", label);
        if (m->threads > 1 && m->gflops_1 > 0 && m->gbps_1 > 0)
            roof_line(f, &a, m->gflops_1, m->gbps_1, " stroke-dasharray=\"5 4\"", "1 thread:");
    } else {
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#a00\">the server measured no ceilings "
                   "(--no-probe): points only</text>\n",
                LEFT + 10, TOP + 14);
    }
    for (int i = 0, k = 0; i < n; i++) {
        const load_roofline *x = &r[i].roof;
        double ix = load_roofline_intensity(x), gy = load_roofline_gflops(x), fr;
        if (!(ix > 0) || !(gy > 0))
            continue;
        fr = load_roofline_fraction(x);
        fprintf(f,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>",
                px_x(&a, ix), px_y(&a, gy), COLORS[k % 8]);
        load_html_escape(f, r[i].scheme);
        fprintf(f, " L=%d c=%d: %.3g flops/byte, %.4g GFLOP/s", r[i].length, r[i].concurrency, ix,
                gy);
        if (fr >= 0)
            fprintf(f, ", %.3f of peak (%s)", fr, load_roofline_bound(x));
        fprintf(f, "</title></circle>\n<text x=\"%d\" y=\"%d\" fill=\"%s\">",
                LEFT + PLOT_W + 10, TOP + 12 + 14 * k, COLORS[k % 8]);
        load_html_escape(f, r[i].scheme);
        fprintf(f, " L=%d c=%d</text>\n", r[i].length, r[i].concurrency);
        k++;
    }
    fprintf(f, "</svg>\n");
}
