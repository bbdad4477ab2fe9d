/* payload.c - posattn-load's request bodies: a /v1/attention batch for one
 * (scheme, length), or for one layer of a loaded model, with q/k/v (or, for
 * the absolute schemes, layer mode's x and projections; with --mla, MLA's
 * q, k_rope and k_nope, v or c_kv with its weights) and any scheme
 * tables or required tensors drawn from a seeded generator, so the same
 * flags always send the same bytes.
 */
#include "load.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A growing byte buffer; on allocation failure it sets oom and stops. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t more)
{
    if (b->oom || b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void sb_put(sbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* splitmix64: small, fast and good enough for test inputs. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Values k/10000 with |k| <= amp (at most 10000, so in [-1, 1]): short in
 * JSON and exact to print. */
static int rng_tenthousandths(uint64_t *s, int amp)
{
    return (int)(rng_next(s) % (uint64_t)(2 * amp + 1)) - amp;
}

static void put_json_value(sbuf *b, int k)
{
    char tmp[16];
    int neg = k < 0;
    unsigned a = (unsigned)(neg ? -k : k);
    int n = snprintf(tmp, sizeof tmp, "%s%u.%04u", neg ? "-" : "", a / 10000, a % 10000);
    sb_put(b, tmp, (size_t)n);
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* float32 bits to a 16-bit wire type, to nearest even (the server widens
 * them exactly): bf16 keeps the top half; f16 rebiases the exponent, with
 * subnormals below 2^-14 and infinity past 65504 (not reached: the values
 * here are at most 1). A client of its own: no server code. */
static uint16_t narrow16(float f, int bf16)
{
    uint32_t u, sign, e, m, r;
    memcpy(&u, &f, 4);
    if (bf16)
        return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    sign = (u >> 16) & 0x8000u;
    e = (u >> 23) & 0xffu;
    m = u & 0x7fffffu;
    if (e >= 143) /* >= 65536 */
        return (uint16_t)(sign | 0x7c00u);
    if (e < 113) { /* below 2^-14: a subnormal multiple of 2^-24 */
        uint32_t shift, sig = m | 0x800000u, q, rem, half;
        if (e < 102)
            return (uint16_t)sign;
        shift = 126 - e;
        q = sig >> shift;
        rem = sig & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    r = ((e - 112) << 10) | (m >> 13);
    if ((m & 0x1fffu) > 0x1000u || ((m & 0x1fffu) == 0x1000u && (r & 1)))
        r++; /* a carry into the exponent is right, and 0x7c00 is infinity */
    return (uint16_t)(sign | r);
}

/* A tensor {"shape":[...],"data"|"b64":...} of count seeded values in
 * [-amp, amp] / 10000 (in --dtype: b64 of that type's bytes, or JSON
 * numbers the server rounds to it). */
static void put_tensor_amp(sbuf *b, const load_config *c, const int *shape, int rank, uint64_t *rng,
                           int amp)
{
    size_t count = 1;
    sb_str(b, "{\"shape\":[");
    for (int i = 0; i < rank; i++) {
        sb_printf(b, i ? ",%d" : "%d", shape[i]);
        count *= (size_t)shape[i];
    }
    if (c->dtype != LOAD_DTYPE_F32)
        sb_str(b, c->dtype == LOAD_DTYPE_F16 ? "],\"dtype\":\"f16" : "],\"dtype\":\"bf16");
    if (c->encoding == LOAD_ENC_JSON) {
        sb_str(b, c->dtype == LOAD_DTYPE_F32 ? "],\"data\":[" : "\",\"data\":[");
        sb_reserve(b, count * 8);
        for (size_t i = 0; i < count && !b->oom; i++) {
            if (i)
                sb_put(b, ",", 1);
            put_json_value(b, rng_tenthousandths(rng, amp));
        }
        sb_str(b, "]}");
        return;
    }
    sb_str(b, c->dtype == LOAD_DTYPE_F32 ? "],\"b64\":\"" : "\",\"b64\":\"");
    sb_reserve(b, (count * 4 + 2) / 3 * 4 + 4);
    unsigned char q[3];
    int nq = 0;
    char out[4];
    for (size_t i = 0; i < count && !b->oom; i++) {
        float f = (float)rng_tenthousandths(rng, amp) / 10000.0f;
        uint32_t u;
        int nb = c->dtype == LOAD_DTYPE_F32 ? 4 : 2;
        if (nb == 2)
            u = narrow16(f, c->dtype == LOAD_DTYPE_BF16);
        else
            memcpy(&u, &f, 4);
        for (int j = 0; j < nb; j++) { /* little-endian bytes */
            q[nq++] = (unsigned char)(u >> (8 * j));
            if (nq == 3) {
                out[0] = B64[q[0] >> 2];
                out[1] = B64[((q[0] & 3) << 4) | (q[1] >> 4)];
                out[2] = B64[((q[1] & 15) << 2) | (q[2] >> 6)];
                out[3] = B64[q[2] & 63];
                sb_put(b, out, 4);
                nq = 0;
            }
        }
    }
    if (nq) {
        if (nq == 1)
            q[1] = 0;
        q[2] = 0;
        out[0] = B64[q[0] >> 2];
        out[1] = B64[((q[0] & 3) << 4) | (q[1] >> 4)];
        out[2] = nq == 2 ? B64[((q[1] & 15) << 2) | (q[2] >> 6)] : '=';
        out[3] = '=';
        sb_put(b, out, 4);
    }
    sb_str(b, "\"}");
}

static void put_tensor(sbuf *b, const load_config *c, const int *shape, int rank, uint64_t *rng)
{
    put_tensor_amp(b, c, shape, rank, rng, 10000);
}

/* ,"return":[...] when --return names the results. */
static void put_return(sbuf *b, const load_config *c)
{
    if (c->ret[0] == '\0')
        return;
    /* "a,b" as ["a","b"]: names were checked at parse time. */
    sb_str(b, ",\"return\":[\"");
    for (const char *p = c->ret; *p; p++)
        sb_str(b, *p == ',' ? "\",\"" : (char[]){*p, '\0'});
    sb_str(b, "\"]");
}

/* ,"key_length":[...] for a batch of nb sequences with --lengths-spread. */
static void put_key_length(sbuf *b, const load_config *c, int length, int nb, uint64_t *rng)
{
    if (!nb || c->lengths_spread <= 0)
        return;
    /* Right padding: sequence b is key_length[b] tokens long. */
    int lo = length - (int)(c->lengths_spread * length);
    sb_str(b, ",\"key_length\":[");
    for (int s = 0; s < nb; s++)
        sb_printf(b, s ? ",%d" : "%d", lo + (int)(rng_next(rng) % (uint64_t)(length - lo + 1)));
    sb_str(b, "]");
}

/* ,"q":...,"k":...,"v":... of [L, H, D] (and [B, L, H, D] for nb > 0).
 * Differential attention with pairs interleaved (unilm) takes v
 * [L, Hkv/2, 2D]: the same floats as k, in half as many heads. */
static void put_qkv(sbuf *b, const load_config *c, int heads, int kv_heads, int head_dim,
                    int length, int nb, uint64_t *rng)
{
    int o = nb ? 1 : 0;
    int qs[4] = {nb, length, heads, head_dim};
    int ks[4] = {nb, length, kv_heads, head_dim};
    int vs[4] = {nb, length, kv_heads, head_dim};
    if (c->differential && !c->diff_halves) {
        vs[2] = kv_heads / 2;
        vs[3] = 2 * head_dim;
    }
    sb_str(b, ",\"q\":");
    put_tensor(b, c, qs + 1 - o, 3 + o, rng);
    sb_str(b, ",\"k\":");
    put_tensor(b, c, ks + 1 - o, 3 + o, rng);
    sb_str(b, ",\"v\":");
    put_tensor(b, c, vs + 1 - o, 3 + o, rng);
}

/* --mla: ,"mla":{...} and the item's tensors. q [L, H, D] (D = --head-dim
 * = D_nope + D_rope), k_rope [L, D_rope]; expanded k (k_nope) and v
 * [L, H, D_nope]; absorbed ("absorbed":true) c_kv [L, R] with w_uk and w_uv
 * [H, D_nope, R] in the option, scaled by ~1/sqrt(R) so that the keys they
 * make stay of order one. */
static void put_mla(sbuf *b, const load_config *c, int length, uint64_t *rng)
{
    const int H = c->heads, D = c->head_dim, dr = c->mla_rope_dim, dn = D - dr, R = c->mla_rank;
    int qs[3] = {length, H, D}, ks[3] = {length, H, dn}, kr[2] = {length, dr};
    sb_printf(b, ",\"mla\":{\"rope_dim\":%d", dr);
    if (R > 0) {
        int ws[3] = {H, dn, R}, amp = 1;
        while ((amp + 1) * (amp + 1) * R <= 100000000)
            amp++;
        sb_str(b, ",\"absorbed\":true,\"w_uk\":");
        put_tensor_amp(b, c, ws, 3, rng, amp);
        sb_str(b, ",\"w_uv\":");
        put_tensor_amp(b, c, ws, 3, rng, amp);
    }
    sb_str(b, "},\"q\":");
    put_tensor(b, c, qs, 3, rng);
    if (R > 0) {
        int cs[2] = {length, R};
        sb_str(b, ",\"c_kv\":");
        put_tensor(b, c, cs, 2, rng);
    } else {
        sb_str(b, ",\"k\":");
        put_tensor(b, c, ks, 3, rng);
        sb_str(b, ",\"v\":");
        put_tensor(b, c, ks, 3, rng);
    }
    sb_str(b, ",\"k_rope\":");
    put_tensor(b, c, kr, 2, rng);
}

/* Layer mode: x [L, d_model] (or [B, L, d_model]), w_q [d_model, H*D], w_k
 * and w_v [d_model, Hkv*D], scaled by ~1/sqrt(d_model) so that q and k stay
 * of order one, as in a trained layer; with_heads names the heads too (a
 * model's config decides them, so its items leave them out). */
static void put_layer_inputs(sbuf *b, const load_config *c, int heads, int kv_heads, int head_dim,
                             int d_model, int length, int nb, int with_heads, uint64_t *rng)
{
    int o = nb ? 1 : 0;
    int amp = 1;
    while ((amp + 1) * (amp + 1) * d_model <= 100000000)
        amp++;
    int xs[3] = {nb, length, d_model}, wq[2] = {d_model, heads * head_dim},
        wkv[2] = {d_model, kv_heads * head_dim};
    if (with_heads)
        sb_printf(b, ",\"num_heads\":%d,\"num_kv_heads\":%d", heads, kv_heads);
    sb_str(b, ",\"x\":");
    put_tensor(b, c, xs + 1 - o, 2 + o, rng);
    sb_str(b, ",\"w_q\":");
    put_tensor_amp(b, c, wq, 2, rng, amp);
    sb_str(b, ",\"w_k\":");
    put_tensor_amp(b, c, wkv, 2, rng, amp);
    sb_str(b, ",\"w_v\":");
    put_tensor_amp(b, c, wkv, 2, rng, amp);
}

/* The absolute schemes are added to x before the projections: layer mode. */
static int layer_only(const char *s)
{
    return !strcmp(s, "sinusoidal") || !strcmp(s, "learned");
}

static const char *const ROPE_SCALINGS[] = {"linear", "ntk", "dynamic", "yarn", "llama3", "mrope"};

int load_scheme_known(const char *s, char *err, size_t errlen)
{
    if (!strcmp(s, "none") || !strcmp(s, "rope") || !strcmp(s, "alibi") || !strcmp(s, "t5") ||
        !strcmp(s, "shaw") || !strcmp(s, "kerple") || !strcmp(s, "kerple:power") ||
        !strcmp(s, "sandwich") || !strcmp(s, "xpos") || !strcmp(s, "rope2d") ||
        !strcmp(s, "rope2d:pixtral") || !strcmp(s, "rope2d:dinov3") || !strcmp(s, "fire") ||
        !strcmp(s, "cope") || layer_only(s))
        return 1;
    if (!strncmp(s, "rope:", 5)) {
        for (size_t i = 0; i < sizeof ROPE_SCALINGS / sizeof *ROPE_SCALINGS; i++)
            if (!strcmp(s + 5, ROPE_SCALINGS[i]))
                return 1;
        snprintf(err, errlen,
                 "scheme '%s': rope variants are rope:linear, rope:ntk, rope:dynamic, rope:yarn, "
                 "rope:llama3, rope:mrope",
                 s);
        return 0;
    }
    snprintf(err, errlen,
             "unknown scheme '%s' (none, rope, rope:yarn, alibi, t5, shaw, kerple, sandwich, xpos, "
             "rope2d, fire, cope, sinusoidal, learned, ...)",
             s);
    return 0;
}

/* FIRE's MLP width in the payloads (the peer's default mlp_width). */
#define FIRE_HIDDEN 32

/* n values of a fixed MLP weight array, the same in every payload: w1 in
 * [-3, 3), b1 in [-2, 2) (breakpoints -b1/w1 where x in [0, 1] lives), w2 and
 * b2 in [-1, 1). */
static void put_fire_array(sbuf *b, const char *name, int n, int which, double amp)
{
    sb_printf(b, ",\"%s\":[", name);
    for (int i = 0; i < n; i++) {
        unsigned k = (unsigned)(i * 2654435761u + (unsigned)which * 40503u) % 1000u;
        sb_printf(b, "%s%g", i ? "," : "", amp * ((double)k / 500.0 - 1.0));
    }
    sb_str(b, "]");
}

/* Relative distances shaw keeps apart; rel_k then has 2K+1 rows. */
#define SHAW_K 16
#define T5_BUCKETS 32

static void put_scheme(sbuf *b, const load_config *c, const char *s, int length, uint64_t *rng)
{
    int orig = length / 4 > 0 ? length / 4 : 1;
    if (!strcmp(s, "t5")) {
        int shape[2] = {T5_BUCKETS, c->heads};
        sb_printf(b, "{\"type\":\"t5\",\"num_buckets\":%d,\"table\":", T5_BUCKETS);
        put_tensor(b, c, shape, 2, rng);
        sb_str(b, "}");
    } else if (!strncmp(s, "kerple", 6)) {
        /* r1 ALiBi-like per head (2^-(h+1), held to >= 2^-6 = 0.0156 >=
         * 0.01, the smallest value KERPLE accepts), r2 1 (power: 1.5). */
        const int power = !strcmp(s, "kerple:power");
        sb_printf(b, "{\"type\":\"kerple\",\"form\":\"%s\",\"r1\":[", power ? "power" : "log");
        for (int h = 0; h < c->heads; h++)
            sb_printf(b, "%s%g", h ? "," : "", 1.0 / (double)(2u << (h < 5 ? h : 5)));
        sb_str(b, "],\"r2\":[");
        for (int h = 0; h < c->heads; h++)
            sb_printf(b, "%s%s", h ? "," : "", power ? "1.5" : "1");
        sb_str(b, "]}");
    } else if (!strcmp(s, "fire")) {
        /* A fixed MLP of width FIRE_HIDDEN, defaults c 0.1, L 512; always
         * causal (load_payload_build adds it). */
        sb_str(b, "{\"type\":\"fire\"");
        put_fire_array(b, "w1", FIRE_HIDDEN, 1, 3.0);
        put_fire_array(b, "b1", FIRE_HIDDEN, 2, 2.0);
        put_fire_array(b, "w2", FIRE_HIDDEN * c->heads, 3, 1.0);
        put_fire_array(b, "b2", c->heads, 4, 1.0);
        sb_str(b, "}");
    } else if (!strcmp(s, "cope")) {
        /* The reference's npos: every count a row can reach (length + 1),
         * one table shared by the heads, from the same seeded generator. */
        int shape[2] = {length + 1, c->head_dim};
        sb_str(b, "{\"type\":\"cope\",\"pos_emb\":");
        put_tensor(b, c, shape, 2, rng);
        sb_str(b, "}");
    } else if (!strcmp(s, "learned")) {
        /* One row per position, d_model = heads * head_dim columns. */
        int shape[2] = {length, c->heads * c->head_dim};
        sb_str(b, "{\"type\":\"learned\",\"table\":");
        put_tensor(b, c, shape, 2, rng);
        sb_str(b, "}");
    } else if (!strcmp(s, "shaw")) {
        int shape[2] = {2 * SHAW_K + 1, c->head_dim};
        sb_printf(b, "{\"type\":\"shaw\",\"max_relative_position\":%d,\"rel_k\":", SHAW_K);
        put_tensor(b, c, shape, 2, rng);
        sb_str(b, "}");
    } else if (!strcmp(s, "rope:linear") || !strcmp(s, "rope:ntk")) {
        sb_printf(b, "{\"type\":\"rope\",\"scaling\":\"%s\",\"factor\":4}", s + 5);
    } else if (!strcmp(s, "rope:dynamic") || !strcmp(s, "rope:yarn")) {
        sb_printf(
            b, "{\"type\":\"rope\",\"scaling\":\"%s\",\"factor\":4,\"original_max_position\":%d}",
            s + 5, orig);
    } else if (!strcmp(s, "rope:mrope")) {
        /* Qwen2-VL's split for head_dim 128, [16, 24, 24], in proportion. */
        int half = c->head_dim / 2, t = c->head_dim / 8, h = (half - t) / 2;
        sb_printf(b, "{\"type\":\"rope\",\"mrope_section\":[%d,%d,%d]}", half - 2 * h, h, h);
    } else if (!strncmp(s, "rope2d", 6)) {
        /* The tokens as one image: rows the largest divisor of the length
         * up to its square root (a 2048-token item is a 32 x 64 grid). */
        int rows = 1;
        for (int d = 1; (long)d * d <= length; d++)
            if (length % d == 0)
                rows = d;
        sb_printf(b, "{\"type\":\"rope2d\",\"variant\":\"%s\",%s\"grid\":[%d,%d]}",
                  s[6] == ':' ? s + 7 : "axial", !strcmp(s, "rope2d:dinov3") ? "\"base\":100," : "",
                  rows, length / rows);
    } else if (!strcmp(s, "rope:llama3")) {
        sb_printf(
            b,
            "{\"type\":\"rope\",\"scaling\":\"llama3\",\"factor\":8,\"original_max_position\":%d}",
            orig);
    } else {
        sb_printf(b, "{\"type\":\"%s\"}", s); /* none, rope, alibi, sandwich, xpos, sinusoidal */
    }
}

static uint64_t hash_str(uint64_t h, const char *s)
{
    while (*s)
        h = (h ^ (unsigned char)*s++) * 0x100000001B3ULL;
    return h;
}

char *load_payload_build(const load_config *c, const char *scheme, int length, unsigned variant,
                         size_t *len, char *err, size_t errlen)
{
    sbuf b = {0};
    if (!load_scheme_known(scheme, err, errlen))
        return NULL;
    uint64_t rng = hash_str(0xCBF29CE484222325ULL ^ c->seed, scheme);
    rng ^= ((uint64_t)length << 32) ^ ((uint64_t)variant * 0x9E3779B97F4A7C15ULL);
    /* A batch of sequences leads each shape with B. */
    int nb = c->batch_seq > 1 ? c->batch_seq : 0;

    sb_str(&b, "{\"inputs\":[");
    for (int i = 0; i < c->batch && !b.oom; i++) {
        sb_printf(&b, "%s{\"id\":%d,\"scheme\":", i ? "," : "", i);
        put_scheme(&b, c, scheme, length, &rng);
        if (c->causal || !strcmp(scheme, "fire")) /* fire is causal only */
            sb_str(&b, ",\"causal\":true");
        if (c->softcap > 0)
            sb_printf(&b, ",\"softcap\":%.17g", c->softcap);
        if (c->chunk > 0)
            sb_printf(&b, ",\"chunk_size\":%d", c->chunk);
        if (c->differential)
            sb_printf(&b, ",\"differential\":{\"pairs\":\"%s\",\"lambda\":%.17g,\"depth\":%d}",
                      c->diff_halves ? "halves" : "interleaved", c->diff_lambda, c->diff_depth);
        put_return(&b, c);
        put_key_length(&b, c, length, nb, &rng);
        if (c->packed > 1) { /* S sequences of about L/S rows (at most L of them) */
            int s = c->packed < length ? c->packed : length;
            sb_str(&b, ",\"cu_seqlens\":[0");
            for (int k = 1; k <= s; k++)
                sb_printf(&b, ",%d", (int)((long long)length * k / s));
            sb_str(&b, "]");
        }
        if (c->sinks) {
            int hs[1] = {c->heads};
            sb_str(&b, ",\"sinks\":");
            put_tensor(&b, c, hs, 1, &rng);
        }
        if (c->layer || layer_only(scheme))
            put_layer_inputs(&b, c, c->heads, c->kv_heads, c->head_dim, c->heads * c->head_dim,
                             length, nb, 1, &rng);
        else if (c->mla_rope_dim > 0)
            put_mla(&b, c, length, &rng);
        else
            put_qkv(&b, c, c->heads, c->kv_heads, c->head_dim, length, nb, &rng);
        sb_str(&b, "}");
    }
    sb_str(&b, "]");
    /* A client that sends base64 wants base64 back: it is the fast path. */
    if (c->encoding == LOAD_ENC_B64)
        sb_str(&b, ",\"output_encoding\":\"b64\"");
    sb_str(&b, "}");
    if (b.oom) {
        free(b.p);
        snprintf(err, errlen, "out of memory building a %s request of length %d", scheme, length);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* "s" as a JSON string: a model's name is the server's, so quote it right. */
static void put_json_string(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            sb_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            sb_printf(b, "\\u%04x", ch);
        else
            sb_put(b, s, 1);
    }
    sb_put(b, "\"", 1);
}

/* The layer's required tensors whose field paths start with prefix (plen
 * bytes, "" at the top), as members: a path with a dot becomes an object,
 * so "q_norm.weight" goes in as "q_norm":{"weight":T} and the fields under
 * one name share its object. At the top every member follows the item's
 * earlier ones; inside an object the first takes no comma. */
static void put_requires(sbuf *b, const load_config *c, const load_layer *ly, const char *prefix,
                         size_t plen, int top, uint64_t *rng)
{
    int first = 1;
    for (int i = 0; i < ly->n_req; i++) {
        const char *f = ly->req[i].field;
        if (strncmp(f, prefix, plen) != 0)
            continue;
        const char *name = f + plen, *dot = strchr(name, '.');
        size_t nlen = dot ? (size_t)(dot - name) : strlen(name);
        int seen = 0; /* an earlier field already wrote this name's member */
        for (int j = 0; j < i && !seen; j++)
            seen = !strncmp(ly->req[j].field, prefix, plen) &&
                   !strncmp(ly->req[j].field + plen, name, nlen) &&
                   (ly->req[j].field[plen + nlen] == '.' || ly->req[j].field[plen + nlen] == 0);
        if (seen)
            continue;
        sb_printf(b, "%s\"%.*s\":", top || !first ? "," : "", (int)nlen, name);
        first = 0;
        if (dot == NULL) {
            put_tensor(b, c, ly->req[i].shape, ly->req[i].rank, rng);
        } else {
            char sub[sizeof ly->req[i].field];
            snprintf(sub, sizeof sub, "%.*s", (int)(plen + nlen + 1), f);
            sb_str(b, "{");
            put_requires(b, c, ly, sub, plen + nlen + 1, 0, rng);
            sb_str(b, "}");
        }
    }
}

char *load_payload_build_layer(const load_config *c, const load_layer *ly, int length,
                               unsigned variant, size_t *len, char *err, size_t errlen)
{
    sbuf b = {0};
    uint64_t rng = hash_str(hash_str(0xCBF29CE484222325ULL ^ c->seed, c->model->name), ly->stack);
    rng ^= ((uint64_t)ly->layer << 48) ^ ((uint64_t)length << 32) ^
           ((uint64_t)variant * 0x9E3779B97F4A7C15ULL);
    int nb = c->batch_seq > 1 ? c->batch_seq : 0;

    sb_str(&b, "{\"inputs\":[");
    for (int i = 0; i < c->batch && !b.oom; i++) {
        sb_printf(&b, "%s{\"id\":%d,\"model\":", i ? "," : "", i);
        put_json_string(&b, c->model->name);
        sb_printf(&b, ",\"layer\":%d", ly->layer);
        if (ly->stack[0] != '\0') {
            sb_str(&b, ",\"stack\":");
            put_json_string(&b, ly->stack);
        }
        if (c->causal)
            sb_str(&b, ",\"causal\":true");
        put_return(&b, c);
        put_key_length(&b, c, length, nb, &rng);
        put_requires(&b, c, ly, "", 0, 1, &rng);
        if (ly->layer_mode)
            put_layer_inputs(&b, c, ly->heads, ly->kv_heads, ly->head_dim, ly->d_model, length, nb,
                             0, &rng);
        else
            put_qkv(&b, c, ly->heads, ly->kv_heads, ly->head_dim, length, nb, &rng);
        sb_str(&b, "}");
    }
    sb_str(&b, "]");
    if (c->encoding == LOAD_ENC_B64)
        sb_str(&b, ",\"output_encoding\":\"b64\"");
    sb_str(&b, "}");
    if (b.oom) {
        free(b.p);
        snprintf(err, errlen, "out of memory building a request for %s's %s of length %d",
                 c->model->name, ly->label, length);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* ------------------------------------------------------------- sessions */

char *load_payload_session_create(const load_config *c, const char *scheme, size_t *len)
{
    sbuf b = {0};
    uint64_t rng = hash_str(0xCBF29CE484222325ULL ^ c->seed, scheme);
    int total = c->sess_prompt + c->sess_steps;
    sb_str(&b, "{\"scheme\":");
    put_scheme(&b, c, scheme, total, &rng);
    sb_printf(&b, ",\"num_kv_heads\":%d,\"head_dim\":%d,\"dtype\":\"f32\"", c->kv_heads,
              c->head_dim);
    if (c->sess_window > 0)
        sb_printf(&b,
                  ",\"eviction\":{\"type\":\"window\",\"window\":%d,\"sinks\":%d,"
                  "\"reposition\":%s}}",
                  c->sess_window, c->sess_sinks, c->sess_reposition ? "true" : "false");
    else
        sb_printf(&b, ",\"max_tokens\":%d}", total > 0 ? total : 1);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

char *load_payload_session_tail(const load_config *c, const char *scheme, int n, unsigned variant,
                                size_t *len)
{
    sbuf b = {0};
    uint64_t rng = hash_str(0xCBF29CE484222325ULL ^ c->seed, scheme);
    int qs[3] = {n, c->heads, c->head_dim}, ks[3] = {n, c->kv_heads, c->head_dim};
    rng ^= ((uint64_t)n << 32) ^ ((uint64_t)variant * 0x9E3779B97F4A7C15ULL);
    sb_str(&b, "\",\"causal\":true");
    put_return(&b, c);
    sb_str(&b, ",\"q\":");
    put_tensor(&b, c, qs, 3, &rng);
    sb_str(&b, ",\"append\":{\"k\":");
    put_tensor(&b, c, ks, 3, &rng);
    sb_str(&b, ",\"v\":");
    put_tensor(&b, c, ks, 3, &rng);
    sb_str(&b, "}}]}");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
