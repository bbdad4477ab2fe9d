/* bench_json.c - the cost of carrying float32 tensors as JSON numbers versus
 * base64, on the same data in the same run (issue 4, "JSON numbers"): our
 * shortest round-trip formatter against snprintf("%.9g"), cJSON parsing
 * against a plain strtof loop, and base64 decode/encode as the fast path;
 * then base64 alone at the size of issue 4's large request, vector and
 * scalar code against a memcpy of the same text.
 *
 *   build/bench/bench_json           full table (1M floats, best of 5)
 *   build/bench/bench_json --fmt     the formatter rows only (a few seconds)
 *   build/bench/bench_json --smoke   tiny sizes, one repetition (make test)
 *
 * Single-threaded; every buffer is touched before timing, because a first
 * touch of fresh pages costs more than the work measured here. Every path is
 * also checked (the floats come back bit-exact), so the smoke run catches a
 * broken formatter or parser, not just a broken build.
 */
#include "codec/base64.h"
#include "codec/fmt_float.h"
#include "codec/json_lift.h"
#include "ref_fmt_float.h"
#include "codec/tensor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "bench_json: out of memory\n");
        exit(1);
    }
    memset(p, 0, n); /* first touch outside the timed region */
    return p;
}

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "bench_json: %s\n", what);
        exit(1);
    }
}

/* Layer-like activations: normal, with a per-row scale spread over two
 * decades (rows of 64), seeded. */
static void fill_layer_like(float *x, size_t n)
{
    uint64_t s = 0x9E3779B97F4A7C15u;
    double scale = 1;
    for (size_t i = 0; i < n; i++) {
        double u[3];
        for (int k = 0; k < 3; k++) {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            u[k] = (double)((s * 0x2545F4914F6CDD1Du) >> 11) * 0x1p-53;
        }
        if (i % 64 == 0)
            scale = pow(10.0, u[2] * 2 - 1.5); /* 0.03 to 3 */
        x[i] = (float)(sqrt(-2 * log(u[0] + 0x1p-60)) * cos(6.283185307179586 * u[1]) * scale);
    }
}

typedef struct ctx {
    size_t n;
    const float *x;
    float *back;
    char *text; /* our JSON array text */
    size_t text_len;
    char *text_ref; /* the same with the previous formatter */
    size_t text_ref_len;
    char *text9; /* the same with %.9g */
    size_t text9_len;
    char *b64;
    size_t b64_len;
    char *copy; /* b64_len bytes: the memcpy ceiling's destination */
    char *body; /* {"t":{"data":ARRAY}} for srv_lift_scan, ARRAY the text above */
    size_t body_len;
} ctx;

typedef void (*bench_fn)(ctx *c);

/* Best-of-reps seconds for fn(c), after one warm-up call. */
static double best_time(bench_fn fn, ctx *c, int reps)
{
    double best = 1e30;
    fn(c);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        fn(c);
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

/* Best-of-reps seconds for each of fns[0..k) into best[], after one warm-up
 * call each, the functions taking turns in every round: on a shared machine
 * whose speed drifts over seconds, their ratios are then taken under the
 * same conditions. */
static void best_times_interleaved(const bench_fn *fns, int k, ctx *c, int reps, double *best)
{
    for (int i = 0; i < k; i++) {
        fns[i](c);
        best[i] = 1e30;
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < k; i++) {
            double t0 = now();
            fns[i](c);
            double t = now() - t0;
            if (t < best[i])
                best[i] = t;
        }
}

/* "[v,v,...]" with one srv_fmt_float call per value. */
static void print_ours(ctx *c)
{
    char *p = c->text;
    *p++ = '[';
    for (size_t i = 0; i < c->n; i++) {
        if (i)
            *p++ = ',';
        p += srv_fmt_float(c->x[i], p);
    }
    *p++ = ']';
    *p = '\0';
    c->text_len = (size_t)(p - c->text);
}

/* The same with srv_fmt_float_array, the loop tensor.c renders with: the
 * formatter inlined into it, eight values at a time with AVX-512. */
static void print_array(ctx *c)
{
    c->text_len = srv_fmt_float_array(c->x, c->n, c->text);
}

/* srv_fmt_float_array without AVX-512: two values at a time. */
static void print_array_scalar(ctx *c)
{
    srv_fmt_float_force_scalar(true);
    c->text_len = srv_fmt_float_array(c->x, c->n, c->text);
    srv_fmt_float_force_scalar(false);
}

/* The same with the formatter as it was before the fast printer
 * (tests/ref_fmt_float.c), which must write the same bytes. */
static void print_ref(ctx *c)
{
    char *p = c->text_ref;
    *p++ = '[';
    for (size_t i = 0; i < c->n; i++) {
        if (i)
            *p++ = ',';
        p += ref_fmt_float(c->x[i], p);
    }
    *p++ = ']';
    *p = '\0';
    c->text_ref_len = (size_t)(p - c->text_ref);
}

static void print_snprintf(ctx *c)
{
    char *p = c->text9;
    *p++ = '[';
    for (size_t i = 0; i < c->n; i++) {
        if (i)
            *p++ = ',';
        p += snprintf(p, SRV_FMT_FLOAT_MAX + 1, "%.9g", (double)c->x[i]);
    }
    *p++ = ']';
    *p = '\0';
    c->text9_len = (size_t)(p - c->text9);
}

/* The whole response path: tensor.c renders a raw node, cJSON prints the
 * document (copying the raw text once more). */
static void render_and_print(ctx *c)
{
    cJSON *root = cJSON_CreateObject();
    int64_t shape[1] = {(int64_t)c->n};
    check(root && srv_tensor_render(root, "t", c->x, 1, shape, SRV_ENCODING_JSON),
          "srv_tensor_render failed");
    char *s = cJSON_PrintUnformatted(root);
    check(s != NULL, "cJSON_PrintUnformatted failed");
    free(s);
    cJSON_Delete(root);
}

/* The reference for render_and_print: cJSON's own numbers, one node per
 * float, printed with its "%1.15g" then "%1.17g" when that does not read
 * back. */
static void cjson_print_numbers(ctx *c)
{
    cJSON *arr = cJSON_CreateFloatArray(c->x, (int)c->n);
    check(arr != NULL, "cJSON_CreateFloatArray failed");
    char *s = cJSON_PrintUnformatted(arr);
    check(s != NULL, "cJSON_PrintUnformatted failed");
    free(s);
    cJSON_Delete(arr);
}

/* What a JSON request costs: cJSON builds a node per number, then the values
 * are copied out as floats (tensor.c's to_float, without its checks). */
static void parse_cjson(ctx *c)
{
    cJSON *arr = cJSON_ParseWithLength(c->text, c->text_len);
    check(arr != NULL, "cJSON_Parse failed");
    size_t i = 0;
    for (const cJSON *e = arr->child; e && i < c->n; e = e->next)
        c->back[i++] = (float)e->valuedouble;
    check(i == c->n, "cJSON array has the wrong length");
    cJSON_Delete(arr);
}

/* The floor for reading decimal text: strtof over the same array. */
static void parse_strtof(ctx *c)
{
    const char *p = c->text + 1;
    for (size_t i = 0; i < c->n; i++) {
        char *end;
        c->back[i] = strtof(p, &end);
        p = end + 1; /* the comma */
    }
}

static void b64_encode(ctx *c)
{
    srv_b64_encode((const unsigned char *)c->x, c->n * sizeof(float), c->b64);
}

static void b64_decode(ctx *c)
{
    size_t got = 0;
    check(
        srv_b64_decode(c->b64, c->b64_len, (unsigned char *)c->back, c->n * sizeof(float), &got) &&
            got == c->n * sizeof(float),
        "srv_b64_decode failed");
}

/* The same with the scalar code forced (base64.h). */
static void b64_encode_scalar(ctx *c)
{
    srv_b64_force_scalar(true);
    b64_encode(c);
    srv_b64_force_scalar(false);
}

static void b64_decode_scalar(ctx *c)
{
    srv_b64_force_scalar(true);
    b64_decode(c);
    srv_b64_force_scalar(false);
}

/* The ceiling for both: reading and writing the base64 text once. */
static void copy_b64(ctx *c)
{
    memcpy(c->copy, c->b64, c->b64_len);
}

static void expect_same(const ctx *c, const char *what)
{
    if (memcmp(c->back, c->x, c->n * sizeof(float)) != 0) {
        fprintf(stderr, "bench_json: %s did not give back the same floats\n", what);
        exit(1);
    }
    memset(c->back, 0, c->n * sizeof(float));
}

static void row(const char *name, double ours, const char *ref_name, double ref, const char *target,
                double target_mps)
{
    printf("%-34s %8.1f   %-26s %8.1f %7.1fx", name, ours / 1e6, ref_name, ref / 1e6, ours / ref);
    if (target_mps > 0)
        printf("   %-12s %s\n", target, ours >= target_mps ? "met" : "NOT MET");
    else
        printf("   %-12s %s\n", "-", "-");
}

/* posattnd's own parse of a request's number arrays (json_lift.h): the
 * floats straight from the body, then freed (each request's cost). */
static void parse_lift(ctx *c)
{
    srv_lift lift;
    check(srv_lift_scan(c->body, c->body_len, &lift) && lift.count == 1 && lift.items[0].n == c->n,
          "srv_lift_scan did not lift the array");
    memcpy(c->back, lift.items[0].data, c->n * sizeof(float));
    srv_lift_free(&lift);
}

/* The body for parse_lift around text [len]; the strtof loop's text too. */
static void set_body(ctx *c, const char *text, size_t len)
{
    free(c->body);
    c->body = xmalloc(len + 32);
    c->body_len = (size_t)sprintf(c->body, "{\"t\":{\"data\":%s}}", text);
}

/* parse_lift against the strtof loop over text (vector: eight numbers at a
 * time where the CPU has it), c->back checked against want. */
static void lift_rows(ctx *c, const char *label, const char *text, size_t len, const float *want,
                      int reps)
{
    char name[2][64];
    double t[3];
    char *keep = c->text;
    set_body(c, text, len);
    c->text = c->body + 13; /* the array, for the strtof loop */
    t[2] = best_time(parse_strtof, c, reps);
    srv_lift_force_scalar(true);
    t[1] = best_time(parse_lift, c, reps);
    check(memcmp(c->back, want, c->n * sizeof(float)) == 0, "srv_lift_scan (scalar) misread");
    srv_lift_force_scalar(false);
    t[0] = best_time(parse_lift, c, reps);
    check(memcmp(c->back, want, c->n * sizeof(float)) == 0, "srv_lift_scan misread");
    c->text = keep;
    snprintf(name[0], sizeof name[0], "parse: lift, %s", label);
    snprintf(name[1], sizeof name[1], "parse: lift scalar, %s", label);
    row(name[0], (double)c->n / t[0], "strtof loop", (double)c->n / t[2], "", 0);
    row(name[1], (double)c->n / t[1], "strtof loop", (double)c->n / t[2], "", 0);
}

/* Base64 alone at the size of issue 4's large request: q, k, v of
 * [2048, 8, 64] float32 are 16.8 MB of text in (the output, a third of
 * that, goes out). GB/s of base64 text, against memcpy of the same text. */
static void bench_b64_large(bool smoke)
{
    const size_t L = smoke ? 16 : 2048, n = 3 * L * 8 * 64;
    const int reps = smoke ? 1 : 7;
    ctx c = {0};
    float *x = xmalloc(n * sizeof *x);
    fill_layer_like(x, n);
    c.n = n;
    c.x = x;
    c.back = xmalloc(n * sizeof(float));
    c.b64_len = srv_b64_encoded_len(n * sizeof(float));
    c.b64 = xmalloc(c.b64_len + 1);
    c.copy = xmalloc(c.b64_len);

    const bool vector = srv_b64_vector();
    double t_enc = best_time(b64_encode, &c, reps);
    double t_dec = best_time(b64_decode, &c, reps);
    expect_same(&c, "base64 encode + decode");
    double t_enc_s = best_time(b64_encode_scalar, &c, reps);
    double t_dec_s = best_time(b64_decode_scalar, &c, reps);
    expect_same(&c, "scalar base64 encode + decode");
    double t_copy = best_time(copy_b64, &c, reps);
    check(memcmp(c.copy, c.b64, c.b64_len) == 0, "memcpy did not copy");

    const double gb = (double)c.b64_len / 1e9, ceil = gb / t_copy;
    printf("\nbase64 at issue 4's large request (q, k, v [%zu, 8, 64] float32): %.1f MB of\n"
           "text, 1 thread, best of %d; GB/s of base64 text, ratio = codec / memcpy of the text\n",
           L, (double)c.b64_len / 1e6, reps);
    if (!vector)
        printf("(no AVX-512 VBMI on this CPU: the vector rows run the scalar code)\n");
    printf("%-22s %8s %8s\n", "case", "GB/s", "ratio");
    printf("%-22s %8.2f %8.2f\n", "memcpy (ceiling)", ceil, 1.0);
    printf("%-22s %8.2f %8.2f\n", "decode, vector", gb / t_dec, t_copy / t_dec);
    printf("%-22s %8.2f %8.2f\n", "decode, scalar", gb / t_dec_s, t_copy / t_dec_s);
    printf("%-22s %8.2f %8.2f\n", "encode, vector", gb / t_enc, t_copy / t_enc);
    printf("%-22s %8.2f %8.2f\n", "encode, scalar", gb / t_enc_s, t_copy / t_enc_s);
    printf("the request's base64 (all of it in, a third of it out): %.2f ms vector, %.2f ms "
           "scalar\n",
           1e3 * (t_dec + t_enc / 3), 1e3 * (t_dec_s + t_enc_s / 3));

    free(x);
    free(c.back);
    free(c.b64);
    free(c.copy);
}

int main(int argc, char **argv)
{
    bool smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    bool fmt_only = argc > 1 && strcmp(argv[1], "--fmt") == 0;
    const size_t n = smoke ? 1000 : 1000000;
    const int reps = smoke ? 1 : 5;

    ctx c = {0};
    c.n = n;
    float *x = xmalloc(n * sizeof *x);
    fill_layer_like(x, n);
    c.x = x;
    c.back = xmalloc(n * sizeof(float));
    c.text = xmalloc(n * (SRV_FMT_FLOAT_MAX + 1) + 2 + SRV_FMT_FLOAT_BUF);
    c.text_ref = xmalloc(n * (SRV_FMT_FLOAT_MAX + 1) + 2 + SRV_FMT_FLOAT_BUF);
    c.text9 = xmalloc(n * (SRV_FMT_FLOAT_MAX + 1) + 3);
    c.b64_len = srv_b64_encoded_len(n * sizeof(float));
    c.b64 = xmalloc(c.b64_len + 1);

    /* The formatter now and before, in turns (--fmt: more rounds). */
    const int fmt_reps = fmt_only ? 21 : reps;
    const bench_fn fmt_fns[4] = {print_ref, print_ours, print_array, print_array_scalar};
    double fmt_best[4];
    best_times_interleaved(fmt_fns, 4, &c, fmt_reps, fmt_best);
    double t_ref = fmt_best[0], t_ours = fmt_best[1], t_array = fmt_best[2];
    double t_array1 = fmt_best[3];
    print_ours(&c);
    check(c.text_len == c.text_ref_len && memcmp(c.text, c.text_ref, c.text_len) == 0,
          "srv_fmt_float and the previous formatter wrote different text");
    print_array(&c);
    check(c.text_len == c.text_ref_len && memcmp(c.text, c.text_ref, c.text_len) == 0,
          "srv_fmt_float_array and the previous formatter wrote different text");
    print_array_scalar(&c);
    check(c.text_len == c.text_ref_len && memcmp(c.text, c.text_ref, c.text_len) == 0,
          "srv_fmt_float_array (one at a time) and the previous formatter wrote different text");
    if (fmt_only) {
        printf("srv_fmt_float: %zu layer-like floats, 1 thread, best of %d rounds taken in turns; "
               "M floats/s\n",
               n, fmt_reps);
        row("print: srv_fmt_float", n / t_ours, "before (ref_fmt_float)", n / t_ref, "", 0);
        row("print: srv_fmt_float_array", n / t_array, "before (ref_fmt_float)", n / t_ref, "", 0);
        row("print: srv_fmt_float_array", n / t_array, "the same, no AVX-512", n / t_array1, "", 0);
        free(x);
        free(c.back);
        free(c.text);
        free(c.text_ref);
        free(c.text9);
        free(c.b64);
        return 0;
    }
    double t_snprintf = best_time(print_snprintf, &c, reps);
    double t_render = best_time(render_and_print, &c, reps);
    double t_cjson_print = best_time(cjson_print_numbers, &c, smoke ? 1 : 2); /* ~1 s each */
    double t_cjson = best_time(parse_cjson, &c, reps);
    expect_same(&c, "srv_fmt_float + cJSON parse");
    double t_strtof = best_time(parse_strtof, &c, reps);
    expect_same(&c, "srv_fmt_float + strtof");
    double t_enc = best_time(b64_encode, &c, reps);
    double t_dec = best_time(b64_decode, &c, reps);
    expect_same(&c, "base64 encode + decode");

    double r_ours = n / t_ours, r_snprintf = n / t_snprintf, r_render = n / t_render;
    double r_cjson_print = n / t_cjson_print;
    double r_cjson = n / t_cjson, r_strtof = n / t_strtof, r_enc = n / t_enc, r_dec = n / t_dec;

    printf("JSON numbers vs base64 for float32 tensors: %zu layer-like floats (normal, row\n"
           "scales 0.03-3), 1 thread, best of %d; M floats/s, ratio = ours / reference\n",
           n, reps);
    printf("%-34s %8s   %-26s %8s %8s   %-12s %s\n", "case", "M/s", "reference", "M/s", "ratio",
           "target", "met");
    row("print: srv_fmt_float", r_ours, "snprintf(\"%.9g\")", r_snprintf, ">= 20 M/s", 20e6);
    row("print: srv_fmt_float", r_ours, "before (ref_fmt_float)", n / t_ref, "", 0);
    row("print: srv_fmt_float_array", n / t_array, "before (ref_fmt_float)", n / t_ref, "", 0);
    row("print: srv_fmt_float_array", n / t_array, "the same, no AVX-512", n / t_array1, "", 0);
    row("print: tensor render + cJSON print", r_render, "cJSON number array print", r_cjson_print,
        "", 0);
    row("parse: cJSON + copy out", r_cjson, "strtof loop", r_strtof, "", 0);
    /* posattnd's parse, of the shortest text and of "%.4f" (as posattn-load
     * and clients that round write it: eight at a time), against strtof. */
    {
        char *fixed = xmalloc(n * 28 + 3), *p = fixed;
        float *want = xmalloc(n * sizeof(float));
        *p++ = '[';
        for (size_t i = 0; i < n; i++)
            p += sprintf(p, "%s%.4f", i ? "," : "", (double)x[i]);
        *p++ = ']';
        *p = '\0';
        for (size_t i = 0, at = 1; i < n; i++) {
            char *end;
            want[i] = (float)strtod(fixed + at, &end); /* JSON's double, then float */
            at = (size_t)(end - fixed) + 1;
        }
        lift_rows(&c, "shortest", c.text, c.text_len, x, reps);
        lift_rows(&c, "%.4f", fixed, (size_t)(p - fixed), want, reps);
        /* As Python's json writes a float32 tensor's tolist(): each value
         * widened to double, in the fewest digits (15 to 17) that read
         * back as that double; mostly 16 or 17 digits. */
        p = fixed;
        *p++ = '[';
        for (size_t i = 0; i < n; i++) {
            int d = 15;
            char one[320];
            do
                snprintf(one, sizeof one, "%.*g", d++, (double)x[i]);
            while (strtod(one, NULL) != (double)x[i]);
            p += sprintf(p, "%s%s", i ? ", " : "", one);
        }
        *p++ = ']';
        *p = '\0';
        lift_rows(&c, "Python's repr", fixed, (size_t)(p - fixed), x, reps);
        free(fixed);
        free(want);
    }
    row("b64 decode", r_dec, "cJSON parse + copy out", r_cjson, "", 0);
    row("b64 encode", r_enc, "tensor render + print", r_render, "", 0);
    printf("text per float: shortest %.2f bytes, %%.9g %.2f bytes, base64 %.2f bytes;\n"
           "cJSON parse %.0f MB/s of JSON text, strtof %.0f MB/s, b64 decode %.0f MB/s\n",
           (double)c.text_len / n, (double)c.text9_len / n, (double)c.b64_len / n,
           (double)c.text_len / t_cjson / 1e6, (double)c.text_len / t_strtof / 1e6,
           (double)c.b64_len / t_dec / 1e6);

    free(x);
    free(c.back);
    free(c.text);
    free(c.text_ref);
    free(c.text9);
    free(c.b64);
    free(c.body);

    bench_b64_large(smoke);
    return 0;
}
