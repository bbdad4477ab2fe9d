/* bench_decode.c - decode (one query row per head against a long resident
 * cache) as a fraction of the machine's read bandwidth, measured in the
 * same run (bench/ceiling.c), and the FMA peak that bench_attention's
 * figures are fractions of.
 *
 *   build/bench/bench_decode           full table
 *   build/bench/bench_decode --smoke   tiny sizes, one repetition (make test)
 *   build/bench/bench_decode --16bit   the ceilings, then the float32 row "rope
 *                                      k_prerotated" and its bf16 and f16 twins
 *                                      alone (make machine-report)
 *   build/bench/bench_decode --ceiling [--smoke]
 *       the read bandwidth ceiling alone, one line per thread count
 *       ("read T=2 51.3 GB/s over 1074 MB"): for bench/decode_service.py,
 *       whose figures are fractions of it
 *
 * The shape of issue #18: Lq = 1, Lk = 32768, H = 32, Hkv = 8, D = 128,
 * causal, float32: 268 MB of k and v read per call. GB/s counts the k and
 * v bytes of the visible keys once per call (what must be read at least).
 * T = 1 runs pa_attention_run; T = 2 splits the keys over two threads
 * (pa_attention_run_keys, then pa_attention_merge, timed together). Each
 * figure is the best of 5 calls after a warm-up, wall-clock.
 *
 * Ceilings: reading a buffer well past the last-level cache (4x its size,
 * at least 1 GiB) on T threads, and a buffer the size of the cache the
 * decode reads (268 MB, which a large L3 may partly hold between calls):
 * "of read" and "of 268MB" are the best call's GB/s over each. "paired"
 * is the fraction the targets are judged by: 7 more calls, each
 * right after a read pass over the first buffer on the same threads, each
 * call's GB/s over its own pass's, the median of the 7. A shared host's
 * bandwidth moves by 2x from one second to the next (38 to 78 GB/s in one
 * minute on an AMD EPYC VM), so a ceiling measured once at the start can
 * be from another moment than the calls. "pages 16" reads the same cache
 * as a session keeps it (issue #33): pages of 16 tokens (k_pages,
 * v_pages) placed in shuffled order.
 *
 * bf16 and f16 rows keep k and v in 16 bits (pa_attention.kv_dtype): half
 * the bytes, widened by the kernel as it reads them. Their GB/s counts
 * 2-byte elements, and "x f32" is the calls per second (tokens per second
 * of a decode) against the float32 row of the same layout in this run
 * ("rope k_prerotated" or "rope prerot, pages 16"); the memory-bound ideal
 * is 2.
 *
 * Then the arithmetic alone: the row kernels (lib/decode_rows.c) as the
 * decode calls them, on a run of keys that stays in L1, in ns per key and
 * kv head and as ms for the shape on 1 and on T threads: the least a call
 * of the table can take, whatever the memory does.
 *
 * MLA (include/posattn_mla.h), DeepSeek-V3's decode shape: Lq = 1 over
 * Lk = 32768 with H = 128 heads, on one thread (pa_mla_run has no parts).
 * The expanded form with small head dims (D_nope = Dv = 32, D_rope = 16)
 * reads k_nope and v of every head and the one shared k_rope: its GB/s
 * counts those bytes once. The absorbed form with DeepSeek's own latent
 * (R = 512, D_rope = 64) reads 75 MB but does H * Lk * (4 R + 2 D_rope)
 * flops: its figure is a fraction of the FMA peak.
 */
#include "posattn.h"
#include "posattn_mla.h"

#include "attention_harness.h" /* bench_run_parallel: threads kept between calls */
#include "ceiling.h"
#include "decode_rows.h" /* lib/'s row kernels, timed alone on rows in L1 */

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_T = 8, PAIRS = 7 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 64-byte aligned, as the library's workspace blocks are: the row
 * kernels' timings read query rows from the workspace, and a 64-byte row
 * load split over two cache lines took a third longer (10.2 ns a key and
 * kv head against 13.5 at D = 128, bf16, on an AMD EPYC). */
static void *xmalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n > 0 ? n : 1) != 0 || p == NULL) {
        fprintf(stderr, "bench_decode: out of memory for %zu bytes\n", n);
        exit(1);
    }
    return p;
}

static float *randf(size_t n, unsigned seed)
{
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return x;
}

static void fail(const pa_error *e)
{
    fprintf(stderr, "bench_decode: %s: %s\n", e->field, e->message);
    exit(1);
}

/* One decode call: B sequences (each its own descriptor), on T threads. */
typedef struct dec_ctx {
    int B, T;
    pa_attention a[8];
    pa_attention_out out[8];
    void *ws[MAX_T];
    size_t ws_size;
    void *partials[8];
} dec_ctx;

typedef struct dec_job {
    dec_ctx *c;
    int part;
} dec_job;

static void *dec_part(void *p)
{
    dec_job *j = p;
    dec_ctx *c = j->c;
    pa_error err;
    for (int b = 0; b < c->B; b++) {
        pa_status st =
            c->T == 1 ? pa_attention_run(&c->a[b], &c->out[b], c->ws[0], c->ws_size, &err)
                      : pa_attention_run_keys(&c->a[b], &c->out[b], j->part, c->T, c->partials[b],
                                              c->ws[j->part], c->ws_size, &err);
        if (st != PA_STATUS_OK)
            fail(&err);
    }
    return NULL;
}

static void dec_part_of(void *ctx, int part, int nparts)
{
    dec_job j = {ctx, part};
    (void)nparts;
    dec_part(&j);
}

/* The parts on threads kept between calls (bench_attention's, as the
 * service's pool keeps its own), then the merge. */
static void dec_call(dec_ctx *c)
{
    par_ctx pc = {dec_part_of, c, c->T};
    pa_error err;
    bench_run_parallel(&pc);
    if (c->T > 1)
        for (int b = 0; b < c->B; b++)
            if (pa_attention_merge(&c->a[b], &c->out[b], c->T, c->partials[b], &err) !=
                PA_STATUS_OK)
                fail(&err);
}

typedef struct dec_case {
    const char *name;
    pa_scheme_type scheme;
    bool prerotated;
    int B, Lk, window;
    bool target;    /* counted against the 0.6 target */
    int pages;      /* > 0: k and v in pages of this many tokens, shuffled (a session's cache) */
    pa_dtype dtype; /* of k and v */
    int vs;         /* 16-bit rows: the index of the float32 row they are compared with */
} dec_case;

/* n random bf16 or f16 patterns of magnitude below 2 (the kernel's speed
 * does not depend on the values). */
static uint16_t *rand16(size_t n, pa_dtype t, unsigned seed)
{
    uint16_t *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        unsigned e, m;
        seed = seed * 1664525u + 1013904223u;
        m = seed >> 9;
        e = (seed >> 2) % 13u;
        x[i] = (uint16_t)((seed & 0x80000000u ? 0x8000u : 0u) |
                          (t == PA_DTYPE_BF16 ? (115u + e) << 7 | (m & 0x7Fu)
                                              : (3u + e) << 10 | (m & 0x3FFu)));
    }
    return x;
}

/* The rows of x [L, row] (elements of es bytes) as pages of pt rows placed
 * in shuffled order in a pool: pages[i] is page i (the pool is returned
 * for freeing). */
static void *paginate(const void *x, int L, size_t row, size_t es, int pt, const float **pages)
{
    const int n = (L + pt - 1) / pt;
    const size_t page = (size_t)pt * row * es;
    char *pool = xmalloc((size_t)n * page);
    int *slot = xmalloc((size_t)n * sizeof(int));
    unsigned r = 12345u;
    for (int i = 0; i < n; i++)
        slot[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j, t;
        r = r * 1103515245u + 12345u;
        j = (int)((r >> 8) % (unsigned)(i + 1));
        t = slot[i];
        slot[i] = slot[j];
        slot[j] = t;
    }
    for (int i = 0; i < n; i++) {
        const size_t rows = (size_t)(L - i * pt < pt ? L - i * pt : pt);
        memcpy(pool + (size_t)slot[i] * page, (const char *)x + (size_t)i * page, rows * row * es);
        pages[i] = (const float *)(const void *)(pool + (size_t)slot[i] * page);
    }
    free(slot);
    return pool;
}

/* MLA decode, both forms (above), T = 1. */
static void mla_rows(bool smoke, double bw, int reps)
{
    const int H = smoke ? 8 : 128, Lk = smoke ? 300 : 32768;
    const char *width;
    const double fma = ceiling_fma_gflops(1, &width);
    printf("\nMLA decode, Lq=1, H=%d, Lk=%d, rope gptj, causal; T=1\n", H, Lk);
    printf("%-26s %9s %8s %9s %9s %9s\n", "case", "ms", "GB/s", "of read", "GFLOP/s", "of FMA");
    for (int absorbed = 0; absorbed <= 1; absorbed++) {
        const int Dn = smoke ? 8 : absorbed ? 128 : 32, Dr = smoke ? 8 : absorbed ? 64 : 16;
        const int Dv = smoke ? 8 : absorbed ? 128 : 32, R = smoke ? 32 : 512;
        pa_scheme s;
        pa_attention a;
        pa_mla m;
        pa_attention_out out;
        pa_error err;
        float *q = randf((size_t)H * (Dn + Dr), 11), *kr = randf((size_t)Lk * Dr, 12);
        float *k = NULL, *v = NULL, *c = NULL, *wuk = NULL, *wuv = NULL;
        double bytes, flops, best = 1e30;
        size_t wsz;
        void *ws;
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        s.rope.layout = PA_ROPE_LAYOUT_GPTJ;
        pa_attention_init(&a, &s);
        memset(&m, 0, sizeof m);
        memset(&out, 0, sizeof out);
        a.num_heads = H;
        a.head_dim = Dn + Dr;
        a.v_head_dim = Dv;
        a.q_len = 1;
        a.k_len = Lk;
        a.q = q;
        a.causal = true;
        a.k_prerotated = true; /* a cache keeps k_rope rotated */
        m.rope_dim = Dr;
        m.k_rope = kr;
        if (absorbed) {
            c = randf((size_t)Lk * R, 13);
            wuk = randf((size_t)H * Dn * R, 14);
            wuv = randf((size_t)H * Dv * R, 15);
            m.absorbed = true;
            m.kv_lora_rank = R;
            m.c_kv = c;
            m.w_uk = wuk;
            m.w_uv = wuv;
            bytes = (double)Lk * (R + Dr) * sizeof(float);
            flops = 2.0 * H * Lk * (2.0 * R + Dr) + 2.0 * H * R * (Dn + Dv);
        } else {
            k = randf((size_t)Lk * H * Dn, 13);
            v = randf((size_t)Lk * H * Dv, 14);
            a.k = k;
            a.v = v;
            bytes = (double)Lk * ((double)H * (Dn + Dv) + Dr) * sizeof(float);
            flops = 2.0 * H * Lk * (Dn + Dr + Dv);
        }
        out.output = xmalloc((size_t)H * Dv * sizeof(float));
        wsz = pa_mla_workspace_size(&a, &m);
        if (wsz == 0) {
            fprintf(stderr, "bench_decode: mla workspace\n");
            exit(1);
        }
        ws = xmalloc(wsz);
        for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
            double t0 = now();
            if (pa_mla_run(&a, &m, &out, ws, wsz, &err) != PA_STATUS_OK)
                fail(&err);
            if (r >= 0)
                best = fmin(best, now() - t0);
        }
        {
            char name[64];
            const double gbs = bytes / best * 1e-9, gfs = flops / best * 1e-9;
            snprintf(name, sizeof name, "%s Dn=%d Dr=%d R=%d", absorbed ? "absorbed" : "expanded",
                     Dn, Dr, absorbed ? R : 0);
            printf("%-26s %9.2f %8.1f %9.2f %9.1f %9.2f\n", name, best * 1e3, gbs, gbs / bw, gfs,
                   gfs / fma);
        }
        free(ws);
        free(out.output);
        free(q);
        free(kr);
        free(k);
        free(v);
        free(c);
        free(wuk);
        free(wuv);
    }
}

/* The arithmetic alone: the decode's row kernels (lib/decode_rows.c) as
 * the kernel calls them for this shape, on a run of 8 keys of all Hkv kv
 * heads that stays in L1: per kv head, the logits of its G query rows
 * against four keys at a time, then their probabilities times the run's
 * values. No memory traffic, so a call of the table cannot be faster than
 * this time per key and kv head times Lk * Hkv (over T threads); how far
 * the table's ms are above it is what the memory costs beyond it. Best of
 * 5 rounds, wall-clock. */
static void arith_rows(int H, int Hkv, int D, int Lk, int tmax, bool smoke)
{
    enum { RUN = 8 };
    const int G = H / Hkv, rounds = smoke ? 10 : 20000;
    const size_t row = (size_t)Hkv * D;
    const pa_dtype types[3] = {PA_DTYPE_F32, PA_DTYPE_BF16, PA_DTYPE_F16};
    float *q = randf((size_t)G * D, 21), *k = randf(RUN * row, 22), *v = randf(RUN * row, 23);
    float *o = randf((size_t)G * D, 24), *P = randf((size_t)G * RUN, 25);
    float *s = xmalloc((size_t)G * RUN * sizeof(float));
    float *qh = randf((size_t)Hkv * G * D, 28),
          *sh = xmalloc((size_t)Hkv * G * RUN * sizeof(float));
    uint16_t *k16 = rand16(RUN * row, PA_DTYPE_BF16, 26),
             *v16 = rand16(RUN * row, PA_DTYPE_BF16, 27);
    for (int i = 0; i < G * RUN; i++)
        P[i] = 0.01f * (float)(i + 1); /* no zero weight to skip */
    printf("\nthe arithmetic alone (the row kernels on a run of %d keys in L1, %d query rows a kv "
           "head)\n",
           RUN, G);
    printf("%-6s %12s %9s %6s%d\n", "kv", "ns/key,head", "ms T=1", "ms T=", tmax);
    for (int ti = 0; ti < 3; ti++) {
        const pa_dtype t = types[ti];
        const pa__row_ops ops = pa__row_ops_pick(t);
        double best = 1e30, ns;
        if (t == PA_DTYPE_F16) /* f16 values in [0.5, 1) from the same random bits */
            for (size_t i = 0; i < RUN * row; i++)
                k16[i] = v16[i] = (uint16_t)(0x3800u | (k16[i] & 0x3FFu));
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            for (int it = 0; it < rounds; it++) {
                /* The logits as the decode takes them (decode_rows.h):
                 * four keys of a kv head at a time, or key-major, a key
                 * at a time with its kv heads in turn. */
                const int per = ops.key_major ? 1 : 4;
                if (t != PA_DTYPE_F32 && ops.dot_heads16 != NULL) {
                    /* 16-bit keys: a key's kv heads in one call, each
                     * with its own rows of q and of the logits. */
                    for (int j = 0; j < RUN; j++)
                        ops.dot_heads16(qh, G, Hkv, D, k16 + (size_t)j * row, NULL, NULL, D, 0.1f,
                                        sh + j, RUN);
                } else {
                    for (int j0 = 0; j0 < RUN; j0 += per)
                        for (int g = 0; g < Hkv; g++)
                            for (int j = j0; j < j0 + per; j += 4) {
                                const size_t at = (size_t)j * row + (size_t)g * D;
                                if (t == PA_DTYPE_F32)
                                    ops.dot(q, G, D, k + at, row, per, 0.1f, s + j, RUN);
                                else
                                    ops.dot16(q, G, D, k16 + at, row, per, 0.1f, s + j, RUN);
                            }
                }
                for (int g = 0; g < Hkv; g++) {
                    if (t == PA_DTYPE_F32)
                        ops.pv(o, (size_t)D, P, RUN, G, v + (size_t)g * D, row, RUN, D);
                    else
                        ops.pv16(o, (size_t)D, P, RUN, G, v16 + (size_t)g * D, row, RUN, D);
                }
            }
            best = fmin(best, now() - t0);
        }
        ns = best / ((double)rounds * RUN * Hkv) * 1e9;
        printf("%-6s %12.2f %9.2f %7.2f\n", pa_dtype_name(t), ns, ns * Lk * Hkv * 1e-6,
               ns * Lk * Hkv * 1e-6 / tmax);
    }
    if (!isfinite(s[0] + o[0]))
        printf("(the row kernels gave a non-finite result)\n");
    free(q);
    free(k);
    free(v);
    free(o);
    free(P);
    free(s);
    free(qh);
    free(sh);
    free(k16);
    free(v16);
}

/* --ceiling: the read bandwidth past the last-level cache on 1 and on all
 * cores, as main() measures it. */
static int ceiling_only(bool smoke, int tmax)
{
    const size_t far = smoke ? (size_t)16 << 20 : ceiling_past_llc();
    printf("cpu %s\n", ceiling_cpu_model());
    for (int T = 1; T <= tmax; T = T == tmax ? tmax + 1 : tmax)
        printf("read T=%d %.2f GB/s over %.0f MB\n", T, ceiling_read_gbs(T, far, smoke ? 1 : 5),
               far / 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    bool smoke = false, ceiling = false, only16 = false;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int tmax = cores < 2 ? 1 : cores > MAX_T ? MAX_T : (int)cores;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0)
            smoke = true;
        else if (strcmp(argv[i], "--ceiling") == 0)
            ceiling = true;
        else if (strcmp(argv[i], "--16bit") == 0)
            only16 = true;
        else {
            fprintf(stderr, "usage: bench_decode [--smoke] [--ceiling] [--16bit]\n");
            return 2;
        }
    }
    if (ceiling)
        return ceiling_only(smoke, tmax);
    const int H = smoke ? 4 : 32, Hkv = smoke ? 2 : 8, D = smoke ? 16 : 128, reps = smoke ? 1 : 5;
    const int L = smoke ? 300 : 32768;
    const dec_case cases[] = {
        {"none", PA_SCHEME_NONE, false, 1, L, 0, true, 0, PA_DTYPE_F32, 0},
        {"alibi", PA_SCHEME_ALIBI, false, 1, L, 0, true, 0, PA_DTYPE_F32, 0},
        {"t5", PA_SCHEME_T5, false, 1, L, 0, true, 0, PA_DTYPE_F32, 0},
        {"rope k_prerotated", PA_SCHEME_ROPE, true, 1, L, 0, true, 0, PA_DTYPE_F32, 0},
        {"rope (rotates k)", PA_SCHEME_ROPE, false, 1, L, 0, false, 0, PA_DTYPE_F32, 0},
        {"none, 8 x L/8", PA_SCHEME_NONE, false, 8, L / 8, 0, true, 0, PA_DTYPE_F32, 0},
        {"rope window 4096", PA_SCHEME_ROPE, true, 1, L, smoke ? 64 : 4096, false, 0, PA_DTYPE_F32,
         0},
        {"rope prerot, pages 16", PA_SCHEME_ROPE, true, 1, L, 0, true, 16, PA_DTYPE_F32, 0},
        {"rope prerot, bf16", PA_SCHEME_ROPE, true, 1, L, 0, true, 0, PA_DTYPE_BF16, 3},
        {"rope prerot, f16", PA_SCHEME_ROPE, true, 1, L, 0, true, 0, PA_DTYPE_F16, 3},
        {"bf16, pages 16", PA_SCHEME_ROPE, true, 1, L, 0, true, 16, PA_DTYPE_BF16, 7},
        {"f16, pages 16", PA_SCHEME_ROPE, true, 1, L, 0, true, 16, PA_DTYPE_F16, 7},
    };
    enum { NCASES = sizeof cases / sizeof *cases };
    double best_of[NCASES][MAX_T + 1];
    const size_t far = smoke ? (size_t)16 << 20 : ceiling_past_llc();
    const size_t kv_bytes = 2 * (size_t)L * Hkv * D * sizeof(float);
    double bw_far[MAX_T + 1], bw_kv[MAX_T + 1];
    const char *width;
    int met = 0, missed = 0;
    float *t5_table = randf((size_t)32 * H, 9);
    ceiling_reader *reader;

    printf("decode vs the machine: %s, %ld cores online, kernels %s\n", ceiling_cpu_model(), cores,
           pa_kernel_name());
    for (int T = 1; T <= tmax; T = T == tmax ? tmax + 1 : tmax) {
        double fma = ceiling_fma_gflops(T, &width);
        bw_far[T] = ceiling_read_gbs(T, far, smoke ? 1 : 5);
        bw_kv[T] = ceiling_read_gbs(T, kv_bytes, smoke ? 1 : 5);
        printf("ceilings T=%d: FMA peak %.1f GFLOP/s (%s); read %.1f GB/s over %.0f MB, "
               "%.1f GB/s over %.0f MB\n",
               T, fma, width, bw_far[T], far / 1e6, bw_kv[T], kv_bytes / 1e6);
    }
    reader = ceiling_reader_new(tmax, far);
    printf("\nLq=1, H=%d, Hkv=%d, D=%d, causal; k and v resident (%.0f MB per call)\n", H, Hkv, D,
           kv_bytes / 1e6);
    printf("%-22s %2s %6s %3s %9s %8s %9s %9s %7s %7s %5s %6s\n", "case", "B", "Lk", "T", "ms",
           "GB/s", "of read", "of 268MB", "paired", "target", "met", "x f32");
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const dec_case *dc = &cases[ci];
        pa_scheme s;
        dec_ctx c;
        float *k[8], *v[8], *q[8];
        uint16_t *k16[8] = {0}, *v16[8] = {0};
        void *kpool = NULL, *vpool = NULL;
        const float **kpages = NULL, **vpages = NULL;
        double visible = dc->window > 0 ? dc->window : dc->Lk;
        const size_t es = dc->dtype == PA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
        const double bytes = 2.0 * visible * Hkv * D * (double)es * dc->B;
        if (only16 && dc->vs != 3 && ci != 3) /* --16bit: rope k_prerotated and its twins */
            continue;
        memset(&c, 0, sizeof c);
        pa_scheme_init(&s, dc->scheme);
        if (dc->scheme == PA_SCHEME_T5) {
            s.t5.num_buckets = 32;
            s.t5.max_distance = 128;
            s.t5.bidirectional = false;
            s.t5.table = t5_table;
            s.t5.table_rows = 32;
            s.t5.table_cols = H;
        }
        c.B = dc->B;
        for (int b = 0; b < dc->B; b++) {
            pa_attention *a = &c.a[b];
            q[b] = randf((size_t)H * D, 1 + (unsigned)b);
            k[b] = randf((size_t)dc->Lk * Hkv * D, 2 + (unsigned)b);
            v[b] = randf((size_t)dc->Lk * Hkv * D, 3 + (unsigned)b);
            pa_attention_init(a, &s);
            a->num_heads = H;
            a->num_kv_heads = Hkv;
            a->head_dim = D;
            a->q_len = 1;
            a->k_len = dc->Lk;
            a->q = q[b];
            a->k = k[b];
            a->v = v[b];
            a->causal = true;
            a->window = dc->window;
            a->k_prerotated = dc->prerotated;
            if (dc->dtype != PA_DTYPE_F32) {
                k16[b] = rand16((size_t)dc->Lk * Hkv * D, dc->dtype, 2 + (unsigned)b);
                v16[b] = rand16((size_t)dc->Lk * Hkv * D, dc->dtype, 3 + (unsigned)b);
                a->kv_dtype = dc->dtype;
                a->k = (const float *)(const void *)k16[b];
                a->v = (const float *)(const void *)v16[b];
            }
            if (dc->pages > 0) { /* B is 1 */
                const int np = (dc->Lk + dc->pages - 1) / dc->pages;
                kpages = xmalloc((size_t)np * sizeof *kpages);
                vpages = xmalloc((size_t)np * sizeof *vpages);
                kpool = paginate(a->k, dc->Lk, (size_t)Hkv * D, es, dc->pages, kpages);
                vpool = paginate(a->v, dc->Lk, (size_t)Hkv * D, es, dc->pages, vpages);
                a->k = a->v = NULL;
                a->k_pages = kpages;
                a->v_pages = vpages;
                a->page_tokens = dc->pages;
            }
            c.out[b].output = xmalloc((size_t)H * D * sizeof(float));
        }
        c.ws_size = pa_attention_workspace_size(&c.a[0]);
        for (int t = 0; t < tmax; t++)
            c.ws[t] = xmalloc(c.ws_size);
        for (int b = 0; b < dc->B; b++)
            c.partials[b] = xmalloc(pa_attention_partials_size(&c.a[b], &c.out[b], tmax));
        for (int T = 1; T <= tmax; T = T == tmax ? tmax + 1 : tmax) {
            double best = 1e30, gbs, paired;
            bool ok;
            char vs[16], ps[16];
            c.T = T;
            dec_call(&c); /* warm-up: pages, tables */
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                dec_call(&c);
                best = fmin(best, now() - t0);
            }
            gbs = bytes / best * 1e-9;
            paired = NAN;
            if (dc->target && T == tmax) {
                /* Each call right after a read pass over the far buffer:
                 * the call's GB/s over the pass's, the median of PAIRS. */
                double r[PAIRS];
                const int n = smoke ? 1 : PAIRS;
                for (int i = 0; i < n; i++) {
                    const double ceil = ceiling_reader_pass(reader);
                    const double t0 = now();
                    dec_call(&c);
                    r[i] = bytes / (now() - t0) * 1e-9 / ceil;
                }
                qsort(r, (size_t)n, sizeof r[0], bench_cmp_double);
                paired = r[n / 2];
            }
            ok = paired >= 0.6;
            best_of[ci][T] = best;
            if (dc->dtype != PA_DTYPE_F32)
                snprintf(vs, sizeof vs, "%.2f", best_of[dc->vs][T] / best);
            else
                snprintf(vs, sizeof vs, "-");
            if (isnan(paired))
                snprintf(ps, sizeof ps, "-");
            else
                snprintf(ps, sizeof ps, "%.2f", paired);
            printf("%-22s %2d %6d %3d %9.2f %8.1f %9.2f %9.2f %7s %7s %5s %6s\n", dc->name, dc->B,
                   dc->Lk, T, best * 1e3, gbs, gbs / bw_far[T], gbs / bw_kv[T], ps,
                   dc->target && T == tmax ? ">=0.60" : "-",
                   dc->target && T == tmax ? (ok ? "met" : "NO") : "-", vs);
            if (dc->target && T == tmax)
                ok ? met++ : missed++;
        }
        for (int t = 0; t < tmax; t++)
            free(c.ws[t]);
        for (int b = 0; b < dc->B; b++) {
            free(c.partials[b]);
            free(c.out[b].output);
            free(q[b]);
            free(k[b]);
            free(v[b]);
            free(k16[b]);
            free(v16[b]);
        }
        free(kpool);
        free(vpool);
        free(kpages);
        free(vpages);
    }
    free(t5_table);
    ceiling_reader_free(reader);
    arith_rows(H, Hkv, D, L, tmax, smoke);
    if (!only16)
        mla_rows(smoke, bw_far[1], reps);
    printf("decode targets: %d met, %d not met\n", met, missed);
    return 0;
}
