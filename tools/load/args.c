/* args.c - posattn-load's command line: the help, the flags parsed into a
 * load_config (--preset's defaults first, then the flags), the checks
 * between them (an explicit bound, a body under 512 MB, what --model
 * decides), and --url's check (http or https, loopback only).
 * posattn-load.c calls it and runs what it describes.
 */
#include "load.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char USAGE[] =
    "usage: posattn-load (--duration S | --requests N) [options]\n"
    "\n"
    "Drives posattnd's POST /v1/attention with a closed loop of --concurrency\n"
    "requests, one phase per (scheme, length, concurrency), and reports\n"
    "throughput, client latency percentiles and the server's queue/compute split.\n"
    "\n"
    "  --url URL            target (default http://127.0.0.1:8080); loopback only\n"
    "  --allow-remote       allow a non-loopback --url\n"
    "  --cacert FILE        an https --url's CA certificate (PEM), for a private CA\n"
    "  --spawn PATH         start PATH (posattnd) on a free 127.0.0.1 port, stop it at the end\n"
    "  --server-arg ARG     pass ARG to the spawned server (repeatable)\n"
    "  --api-key KEY        send Authorization: Bearer KEY\n"
    "  --schemes LIST       none, rope, rope:yarn, rope:linear, rope:ntk, rope:dynamic,\n"
    "                       rope:llama3, rope:mrope (multimodal sections t, h, w =\n"
    "                       D/8, 3D/16, the rest), alibi, t5, shaw, kerple, kerple:power,\n"
    "                       sandwich, xpos, rope2d, rope2d:pixtral, rope2d:dinov3 (the\n"
    "                       tokens as one image: a grid of rows x cols = length), fire\n"
    "                       (a fixed MLP of width 32; always causal), cope (pos_emb\n"
    "                       [L+1, head-dim]), and in layer mode (x and\n"
    "                       w_q/w_k/w_v, d_model = heads x head-dim) sinusoidal,\n"
    "                       learned (default rope)\n"
    "  --lengths LIST       sequence lengths Lq = Lk (default 128)\n"
    "  --heads N            query heads (default 8)\n"
    "  --kv-heads N         key/value heads, divides --heads (default --heads)\n"
    "  --head-dim N         head dimension (default 64)\n"
    "  --batch N            items per request (default 1)\n"
    "  --batch-seq B        every item a batch of B padded sequences, q [B, L, H, D]\n"
    "                       (layer mode x [B, L, d_model]); default 1, plain items\n"
    "  --lengths-spread S   with --batch-seq: each sequence's key_length drawn (seeded)\n"
    "                       from [(1-S) L, L], so padding costs show; S in 0..1\n"
    "  --concurrency LIST   requests in flight (default 4; a list runs each)\n"
    "  --duration S         seconds per phase (at most 3600)\n"
    "  --requests N         requests per phase (at most 10000000)\n"
    "                       (with both, a phase ends when both are reached)\n"
    "  --warmup S           unmeasured seconds before each phase (default 0)\n"
    "  --encoding json|b64  tensor encoding, both ways (default json)\n"
    "  --dtype f32|f16|bf16 the tensors' type on the wire (b64 bytes of it, or JSON\n"
    "                       numbers the server rounds to it; default f32)\n"
    "  --causal             causal mask\n"
    "  --softcap C          logit softcapping C * tanh(l / C) on every item (Gemma 2)\n"
    "  --sinks              one attention sink per query head on every item (gpt-oss)\n"
    "  --chunk C            chunked local attention, chunk_size C (Llama 4)\n"
    "  --packed S           each item packs S sequences of about L/S tokens (cu_seqlens;\n"
    "                       attention block-diagonal); not with --batch-seq or --model\n"
    "  --return LIST        the results each item asks for, comma separated (output,\n"
    "                       weights, logits, q_rot, k_rot, entropy, distance; default\n"
    "                       output): --return output,entropy,distance shows what the\n"
    "                       row statistics cost\n"
    "  --preset NAME        a model's shape and options as defaults (flags given as\n"
    "                       well win): gemma2 (rope, softcap 50, 8/4 heads of 256),\n"
    "                       gpt-oss (rope:yarn, sinks, 64/8 heads of 64),\n"
    "                       llama4-chunked (rope, chunk 8192, 40/8 heads of 128),\n"
    "                       qwen2-vl (rope:mrope [16,24,24], 28/4 heads of 128);\n"
    "                       each causal\n"
    "  --layer              every scheme in layer mode (x [L, heads x head-dim] and\n"
    "                       projections): the same work for all, projections included\n";

/* The help goes in four strings: a string literal past 4095 bytes is beyond
 * what C11 guarantees (-Woverlength-strings). */
static const char USAGE_DIFF[] =
    "  --differential       differential attention on every item (Ye et al. 2024,\n"
    "                       the item option \"differential\"): --heads are q's 2H\n"
    "                       paired query heads (even; the output has --heads/2 heads\n"
    "                       of 2 x head-dim), v follows the pairs' layout. Only the\n"
    "                       schemes it takes run (none, rope, rope:*, xpos, rope2d*);\n"
    "                       the others are skipped with a note. Not with --layer,\n"
    "                       --packed, --batch-seq, --sinks or --model; --return output\n"
    "                       and weights only\n"
    "  --diff-pairs P       interleaved (unilm: heads 2h, 2h+1, v [L, kv-heads/2,\n"
    "                       2 x head-dim], kv-heads even; default) or halves\n"
    "                       (DiffLlama: heads h, h+H, v [L, kv-heads, head-dim])\n"
    "  --diff-lambda X      lambda, the second map's weight (default 0.5)\n"
    "  --diff-depth N       the layer index lambda_init comes from: 0.8 - 0.6 exp(-0.3 N)\n"
    "                       (default 1)\n"
    "  --mla DR             DeepSeek's MLA on every item (the item option \"mla\"):\n"
    "                       --head-dim is D_nope + DR, q [L, H, head-dim], k_nope and\n"
    "                       v [L, H, D_nope], k_rope [L, DR] shared by the heads; DR\n"
    "                       even, below --head-dim. Only none and rope (any scaling\n"
    "                       but mrope) run, the others are skipped with a note. Not\n"
    "                       with --layer, --packed, --batch-seq, --differential,\n"
    "                       --softcap, --model or --kv-heads other than --heads\n"
    "  --mla-absorbed R     with --mla: the absorbed form, c_kv [L, R] with w_uk and\n"
    "                       w_uv [H, D_nope, R] instead of k_nope and v\n";

static const char USAGE_MODEL[] =
    "  --model NAME         load the layers of a model the target has loaded (posattnd\n"
    "                       --model NAME=config.json): GET /v1/models gives each\n"
    "                       layer's heads, kv heads, head dim and the tensors it\n"
    "                       requires (sinks, norm weights, tables; seeded), and every\n"
    "                       item carries \"model\" and \"layer\". Layers with learned\n"
    "                       positions go in layer mode (x as wide as the table). A\n"
    "                       phase per (length, concurrency) sends the chosen layers\n"
    "                       round-robin; the report gives each layer's latency beside\n"
    "                       its attention (sliding, full, chunked). The config decides\n"
    "                       what --schemes, --preset, --heads, --kv-heads, --head-dim,\n"
    "                       --softcap, --sinks and --chunk would set\n"
    "  --layer L            with --model: layer L only (as --layers L)\n"
    "  --layers all|LIST    with --model: the layers to load, e.g. 0,3 or 0-5 (default all)\n"
    "  --stack S            with --model: only its encoder or decoder stack (T5)\n";

static const char USAGE_OUTPUT[] =
    "  --seed N             input generator seed (default 1)\n"
    "  --json FILE          JSON report (- for stdout)\n"
    "  --csv FILE           CSV report (- for stdout)\n"
    "  --html FILE          HTML report with inline SVG charts\n"
    "  --svg FILE           the latency and throughput charts as one SVG image\n"
    "  --dump-body FILE     write the first phase's request body (its first seeded\n"
    "                       variant; a phase rotates four of the same shape) to FILE\n"
    "                       and exit without sending anything (for wrk, curl); with\n"
    "                       --model, the first chosen layer's, after GET /v1/models\n"
    "  --quiet              no terminal table\n"
    "  -h, --help           this help\n";

void load_args_usage(FILE *f)
{
    fputs(USAGE, f);
    fputs(USAGE_DIFF, f);
    fputs(USAGE_MODEL, f);
    fputs(load_sessions_usage, f);
    fputs(USAGE_OUTPUT, f);
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("posattn-load: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(posattn-load --help for usage)\n", stderr);
    return 2;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int parse_int_list(const char *s, long lo, long hi, int *out, int *n)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (*n == LOAD_MAX_LIST || parse_long(tok, lo, hi, &v) != 0)
            return -1;
        out[(*n)++] = (int)v;
    }
    return *n > 0 ? 0 : -1;
}

/* Only these hosts are ours to load without --allow-remote. */
static int is_loopback(const char *host)
{
    if (!strcasecmp(host, "localhost") || !strcmp(host, "::1") || !strcmp(host, "[::1]"))
        return 1;
    if (strncmp(host, "127.", 4) != 0)
        return 0;
    for (const char *p = host + 4; *p; p++)
        if ((*p < '0' || *p > '9') && *p != '.')
            return 0;
    return 1;
}

int load_args_check_url(const load_config *c)
{
    CURLU *u = curl_url();
    char *host = NULL, *scheme = NULL;
    int rc = 0;
    if (!u || curl_url_set(u, CURLUPART_URL, c->url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK) {
        rc = usage_error("--url '%s' is not a URL", c->url);
    } else if (strcmp(scheme, "http") && strcmp(scheme, "https")) {
        rc = usage_error("--url '%s': only http and https", c->url);
    } else if (!c->allow_remote && !is_loopback(host)) {
        fprintf(stderr,
                "posattn-load: refusing to load %s: '%s' is not a loopback address "
                "(pass --allow-remote if that server is yours to load)\n",
                c->url, host);
        rc = 2;
    }
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return rc;
}

/* A model's attention as defaults: its scheme, head shape and options. */
static const struct {
    const char *name, *schemes;
    int heads, kv_heads, head_dim, sinks, chunk;
    double softcap;
} PRESETS[] = {
    {"gemma2", "rope", 8, 4, 256, 0, 0, 50.0},          /* Gemma 2 2B: softcap 50 */
    {"gpt-oss", "rope:yarn", 64, 8, 64, 1, 0, 0},       /* gpt-oss-20b: sinks, yarn */
    {"llama4-chunked", "rope", 40, 8, 128, 0, 8192, 0}, /* Llama 4 Scout's chunked layers */
    {"qwen2-vl", "rope:mrope", 28, 4, 128, 0, 0, 0},    /* Qwen2-VL 7B: mrope [16,24,24] */
};

/* --preset NAME anywhere in argv: its defaults go in first, so that the
 * flags parsed after them win. 0, or 2 on an unknown name. */
static int apply_preset(load_config *c, int argc, char **argv, char *scheme_buf, size_t cap)
{
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--preset=", 9))
            name = argv[i] + 9;
        else if (!strcmp(argv[i], "--preset") && i + 1 < argc)
            name = argv[i + 1];
    }
    if (name == NULL)
        return 0;
    for (size_t k = 0; k < sizeof PRESETS / sizeof PRESETS[0]; k++) {
        if (strcmp(PRESETS[k].name, name) != 0)
            continue;
        snprintf(scheme_buf, cap, "%s", PRESETS[k].schemes);
        c->heads = PRESETS[k].heads;
        c->kv_heads = PRESETS[k].kv_heads;
        c->head_dim = PRESETS[k].head_dim;
        c->sinks = PRESETS[k].sinks;
        c->chunk = PRESETS[k].chunk;
        c->softcap = PRESETS[k].softcap;
        c->causal = 1;
        c->preset = PRESETS[k].name;
        return 0;
    }
    return usage_error("--preset: unknown '%s' (gemma2, gpt-oss, llama4-chunked, qwen2-vl)", name);
}

/* --layers all|LIST: "all", or layers and ranges "0,3,5-7" into c's ranges
 * (none: every layer). 0, or -1 on a malformed list. */
static int parse_layers(load_config *c, const char *s)
{
    char buf[512];
    c->n_layer_ranges = 0;
    if (!strcmp(s, "all"))
        return 0;
    if (strlen(s) >= sizeof buf)
        return -1;
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *dash = strchr(tok, '-');
        long lo, hi;
        if (dash)
            *dash = 0;
        if (c->n_layer_ranges == LOAD_MAX_RANGES || parse_long(tok, 0, 1 << 20, &lo) != 0)
            return -1;
        hi = lo;
        if (dash && (parse_long(dash + 1, 0, 1 << 20, &hi) != 0 || hi < lo))
            return -1;
        c->layer_lo[c->n_layer_ranges] = (int)lo;
        c->layer_hi[c->n_layer_ranges++] = (int)hi;
    }
    return c->n_layer_ranges > 0 ? 0 : -1;
}

/* Whether --model is anywhere in argv: --layer then takes a layer number. */
static int model_given(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--model") || !strncmp(argv[i], "--model=", 8))
            return 1;
    return 0;
}

/* Parses argv into c; returns 0, 1 for --help, or 2 on a usage error. */
int load_args_parse(load_config *c, int argc, char **argv, int *url_given)
{
    char scheme_buf[1024] = "rope";
    long v;
    int with_model = model_given(argc, argv);
    const char *decided = NULL;     /* a flag the model's config decides, when given */
    const char *needs_model = NULL; /* --layers or --stack, when given */
    const char *diff_flag = NULL;   /* a --diff-* flag, when given */
    int rc = apply_preset(c, argc, argv, scheme_buf, sizeof scheme_buf);
    if (rc != 0)
        return rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char name[64];
        const char *eq = strchr(a, '=');
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (strncmp(a, "--", 2) != 0)
            return usage_error("unexpected argument '%s'", a);
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        int is_bool = !strcmp(name, "--causal") || !strcmp(name, "--allow-remote") ||
                      !strcmp(name, "--quiet") || (!strcmp(name, "--layer") && !with_model) ||
                      !strcmp(name, "--sinks") || !strcmp(name, "--differential");
        static const char *const by_config[] = {"--schemes",  "--preset",  "--heads", "--kv-heads",
                                                "--head-dim", "--softcap", "--sinks", "--chunk"};
        for (size_t k = 0; k < sizeof by_config / sizeof *by_config && !decided; k++)
            if (!strcmp(name, by_config[k]))
                decided = by_config[k];
        if (is_bool) {
            if (eq)
                return usage_error("%s takes no value", name);
        } else if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            return usage_error("%s needs a value", name);
        }
#define BAD(what) return usage_error("%s: " what, a)
        char serr[160];
        int taken = load_sessions_flag(c, name, val, serr, sizeof serr);
        if (taken < 0)
            return usage_error("%s", serr);
        if (taken > 0)
            continue;
        if (!strcmp(name, "--causal"))
            c->causal = 1;
        else if (!strcmp(name, "--sinks"))
            c->sinks = 1;
        else if (!strcmp(name, "--differential"))
            c->differential = 1;
        else if (!strcmp(name, "--diff-pairs")) {
            if (strcmp(val, "interleaved") && strcmp(val, "halves"))
                BAD("interleaved or halves");
            c->diff_halves = !strcmp(val, "halves");
            diff_flag = "--diff-pairs";
        } else if (!strcmp(name, "--diff-lambda")) {
            if (parse_double(val, -1e6, 1e6, &c->diff_lambda))
                BAD("a number in -1e6..1e6");
            diff_flag = "--diff-lambda";
        } else if (!strcmp(name, "--diff-depth")) {
            if (parse_long(val, 0, 1 << 20, &v))
                BAD("0..1048576");
            c->diff_depth = (int)v;
            diff_flag = "--diff-depth";
        } else if (!strcmp(name, "--mla")) {
            if (parse_long(val, 1, 1 << 16, &v))
                BAD("D_rope, 2..65536 (even)");
            c->mla_rope_dim = (int)v;
        } else if (!strcmp(name, "--mla-absorbed")) {
            if (parse_long(val, 1, 1 << 16, &v))
                BAD("kv_lora_rank R, 1..65536");
            c->mla_rank = (int)v;
        } else if (!strcmp(name, "--preset"))
            ; /* applied first (apply_preset) */
        else if (!strcmp(name, "--softcap")) {
            if (parse_double(val, 1e-6, 1e30, &c->softcap))
                BAD("a positive number");
        } else if (!strcmp(name, "--packed")) {
            if (parse_long(val, 2, 1 << 20, &v))
                BAD("2..1048576 sequences");
            c->packed = (int)v;
        } else if (!strcmp(name, "--chunk")) {
            if (parse_long(val, 1, 1 << 30, &v))
                BAD("1..1073741824");
            c->chunk = (int)v;
        } else if (!strcmp(name, "--return")) {
            static const char *const known[] = {"output", "weights", "logits",  "q_rot",
                                                "k_rot",  "entropy", "distance"};
            char buf[128], *save;
            if (strlen(val) >= sizeof buf)
                BAD("too long");
            snprintf(buf, sizeof buf, "%s", val);
            for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                size_t k = 0;
                while (k < sizeof known / sizeof known[0] && strcmp(tok, known[k]) != 0)
                    k++;
                if (k == sizeof known / sizeof known[0])
                    return usage_error("--return: '%s' is not one of output, weights, logits, "
                                       "q_rot, k_rot, entropy, distance",
                                       tok);
            }
            snprintf(c->ret, sizeof c->ret, "%s", val);
        } else if (!strcmp(name, "--layer") && with_model) {
            if (parse_long(val, 0, 1 << 20, &v))
                BAD("with --model, a layer number");
            c->layer_lo[0] = c->layer_hi[0] = (int)v;
            c->n_layer_ranges = 1;
        } else if (!strcmp(name, "--layer"))
            c->layer = 1;
        else if (!strcmp(name, "--model")) {
            if (!*val || strlen(val) >= sizeof((load_model *)0)->name)
                BAD("a model name (as posattnd --model NAME=config.json named it)");
            c->model_name = val;
        } else if (!strcmp(name, "--layers")) {
            needs_model = "--layers";
            if (parse_layers(c, val))
                BAD("all, or a comma list of layers and ranges (0,3 or 0-5)");
        } else if (!strcmp(name, "--stack")) {
            needs_model = "--stack";
            if (strcmp(val, "encoder") && strcmp(val, "decoder"))
                BAD("encoder or decoder");
            c->stack = val;
        } else if (!strcmp(name, "--allow-remote"))
            c->allow_remote = 1;
        else if (!strcmp(name, "--quiet"))
            c->quiet = 1;
        else if (!strcmp(name, "--url"))
            c->url = val, *url_given = 1;
        else if (!strcmp(name, "--cacert"))
            c->cacert = val;
        else if (!strcmp(name, "--spawn"))
            c->spawn = val;
        else if (!strcmp(name, "--server-arg")) {
            if (c->n_server_args == LOAD_MAX_SERVER_ARGS)
                BAD("too many --server-arg");
            c->server_args[c->n_server_args++] = val;
        } else if (!strcmp(name, "--api-key"))
            c->api_key = val;
        else if (!strcmp(name, "--schemes"))
            snprintf(scheme_buf, sizeof scheme_buf, "%s", val);
        else if (!strcmp(name, "--lengths")) {
            if (parse_int_list(val, 1, 1 << 20, c->lengths, &c->n_lengths))
                BAD("a comma list of lengths 1..1048576");
        } else if (!strcmp(name, "--concurrency")) {
            if (parse_int_list(val, 1, LOAD_MAX_CONCURRENCY, c->concurrency, &c->n_concurrency))
                BAD("a comma list of 1..1024");
        } else if (!strcmp(name, "--heads")) {
            if (parse_long(val, 1, 4096, &v))
                BAD("1..4096");
            c->heads = (int)v;
        } else if (!strcmp(name, "--kv-heads")) {
            if (parse_long(val, 1, 4096, &v))
                BAD("1..4096");
            c->kv_heads = (int)v;
        } else if (!strcmp(name, "--head-dim")) {
            if (parse_long(val, 1, 65536, &v))
                BAD("1..65536");
            c->head_dim = (int)v;
        } else if (!strcmp(name, "--batch")) {
            if (parse_long(val, 1, 4096, &v))
                BAD("1..4096");
            c->batch = (int)v;
        } else if (!strcmp(name, "--batch-seq")) {
            if (parse_long(val, 1, 4096, &v))
                BAD("1..4096");
            c->batch_seq = (int)v;
        } else if (!strcmp(name, "--lengths-spread")) {
            if (parse_double(val, 0, 1, &c->lengths_spread))
                BAD("a fraction 0..1");
        } else if (!strcmp(name, "--duration")) {
            if (parse_double(val, 0.001, LOAD_MAX_DURATION_S, &c->duration_s))
                BAD("seconds, more than 0 and at most 3600");
        } else if (!strcmp(name, "--requests")) {
            if (parse_long(val, 1, LOAD_MAX_REQUESTS, &c->requests))
                BAD("1..10000000");
        } else if (!strcmp(name, "--warmup")) {
            if (parse_double(val, 0, 600, &c->warmup_s))
                BAD("seconds, 0..600");
        } else if (!strcmp(name, "--encoding")) {
            if (!strcmp(val, "json"))
                c->encoding = LOAD_ENC_JSON;
            else if (!strcmp(val, "b64"))
                c->encoding = LOAD_ENC_B64;
            else
                BAD("json or b64");
        } else if (!strcmp(name, "--dtype")) {
            if (!strcmp(val, "f32"))
                c->dtype = LOAD_DTYPE_F32;
            else if (!strcmp(val, "f16"))
                c->dtype = LOAD_DTYPE_F16;
            else if (!strcmp(val, "bf16"))
                c->dtype = LOAD_DTYPE_BF16;
            else
                BAD("f32, f16 or bf16");
        } else if (!strcmp(name, "--seed")) {
            char *end;
            errno = 0;
            c->seed = strtoull(val, &end, 10);
            if (errno || end == val || *end)
                BAD("a non-negative integer");
        } else if (!strcmp(name, "--json"))
            c->json_path = val;
        else if (!strcmp(name, "--csv"))
            c->csv_path = val;
        else if (!strcmp(name, "--html"))
            c->html_path = val;
        else if (!strcmp(name, "--svg"))
            c->svg_path = val;
        else if (!strcmp(name, "--dump-body"))
            c->dump_body_path = val;
        else
            return usage_error("unknown flag '%s'", name);
#undef BAD
    }

    c->n_schemes = 0;
    for (char *save, *tok = strtok_r(scheme_buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char err[256];
        if (c->n_schemes == LOAD_MAX_LIST)
            return usage_error("%s", "--schemes: at most 32");
        if (!load_scheme_known(tok, err, sizeof err))
            return usage_error("%s", err);
        c->schemes[c->n_schemes++] = strdup(tok);
    }
    if (c->n_schemes == 0)
        return usage_error("%s", "--schemes is empty");
    if (c->model_name && decided)
        return usage_error("%s: the model's config decides it (GET /v1/models lists each "
                           "layer's); leave it out with --model",
                           decided);
    if (!c->model_name && needs_model)
        return usage_error("%s needs --model", needs_model);
    if (c->duration_s <= 0 && c->requests <= 0 && !c->dump_body_path && !c->sessions)
        return usage_error("%s", "refusing to run unbounded: give --duration S or --requests N");
    if (c->kv_heads == 0)
        c->kv_heads = c->heads;
    if (c->heads % c->kv_heads != 0) {
        char m[64];
        snprintf(m, sizeof m, "--kv-heads %d does not divide --heads %d", c->kv_heads, c->heads);
        return usage_error("%s", m);
    }
    if (c->spawn && *url_given)
        return usage_error("%s", "--spawn and --url exclude each other");
    if (c->n_server_args && !c->spawn)
        return usage_error("%s", "--server-arg needs --spawn");
    if (c->packed > 1 && (c->batch_seq > 1 || c->model_name))
        return usage_error("%s", "--packed packs one item's rows: not with --batch-seq or --model");
    if (c->lengths_spread > 0 && c->batch_seq < 2)
        return usage_error("%s", "--lengths-spread needs --batch-seq 2 or more");
    if (c->differential || diff_flag) {
        char err[256];
        if (!c->differential)
            return usage_error("%s needs --differential", diff_flag);
        if (load_differential_check(c, err, sizeof err) != 0)
            return usage_error("%s", err);
    }
    if (c->mla_rope_dim > 0 || c->mla_rank > 0) {
        char err[256];
        if (load_mla_check(c, err, sizeof err) != 0)
            return usage_error("%s", err);
    }
    if (c->sessions) {
        char err[256];
        if (load_sessions_check(c, err, sizeof err) != 0)
            return usage_error("%s", err);
    }
    /* One request body must stay reasonable: q, k and v of every item
     * (a model's shapes are checked once its layers are known). */
    for (int l = 0; l < c->n_lengths && !c->model_name; l++) {
        double floats = (double)c->batch * (c->batch_seq > 1 ? c->batch_seq : 1) * c->lengths[l] *
                        c->head_dim * (double)(c->heads + 2 * c->kv_heads);
        if (floats * (c->encoding == LOAD_ENC_B64 ? 5.34 : 8.0) > 512.0 * 1024 * 1024)
            return usage_error("%s", "a request body would exceed 512 MB: lower --lengths, "
                                     "--batch, --batch-seq, --heads or --head-dim");
    }
    return 0;
}
