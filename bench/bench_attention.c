/* bench_attention.c - attention throughput as a ratio of the machine's own
 * ceiling, measured in the same run: the two GEMMs of attention (QK^T and PV
 * per head) through OpenBLAS sgemm alone, with no softmax or masking.
 *
 *   build/bench/bench_attention           full table
 *   build/bench/bench_attention --smoke   tiny sizes, one repetition (make test)
 *   build/bench/bench_attention --options [NAME]
 *                                         the options section alone (the rows
 *                                         whose name starts with NAME)
 *   build/bench/bench_attention --bf16    the compute_dtype bf16 section alone
 *                                         (with the CPU, its kernels and the
 *                                         FMA peak; .ci/run prints it, so CI's
 *                                         log says what its CPU ran)
 *
 * GFLOP/s counts 4*Lq*Lk*D per head (two GEMMs) for every case, causal too,
 * so a causal case that skips hidden tiles shows as a higher figure.
 *
 * Each case runs on 1 thread and on T threads (the online cores, at most 2
 * here): attention as T parts (pa_attention_run_part), the ceiling as the
 * heads split over T threads; OpenBLAS single-threaded inside each, the way
 * posattnd runs it.
 *
 * A second ceiling is the library's own tile kernels (lib/tile.c) running
 * the same two products tile by tile, with no softmax, bias or mask: the
 * "of kernels" column is what the fusion keeps of them. Where the CPU has
 * AVX-512 those kernels outrun OpenBLAS's fallback kernels, so the sgemm
 * ratio can pass 1.
 *
 * Every figure is also a fraction of the machine's fp32 FMA peak on T
 * threads, measured in the same run (bench/ceiling.c). Targets (issue #18),
 * T = all cores: non-causal H=8 at L=2048 (D=64 and D=128) and L=8192 at
 * least 0.75 of the peak, L=512 at least 0.6; causal at least 0.65 counting
 * the visible FLOPs only (4*D*H*L*(L+1)/2).
 *
 * Then the options of current models (issue #16), each against the same
 * call without it, timed in turn (the median of 7 adjacent pairs), on T
 * threads: what softcap, sinks, a bias or q/k norms cost, and what chunked
 * attention or a document mask saves by skipping the tiles they hide; and
 * the bias schemes (ALiBi, T5, Shaw, FIRE with hidden 32) against rope. Target (issue #18): the
 * options that add work (softcap, sinks, bias, the schemes) at least 0.90
 * of the plain speed; the same for issue #31's schemes and scalings (xPos,
 * KERPLE, Sandwich, RoPE proportional and NTK-alpha, the query scalings by
 * position). Last, packed sequences (cu_seqlens, 4 x 512) against the same
 * L=2048 call with the block-diagonal mask of those 4 documents, and against
 * the full call without it: the packed call never computes an off-diagonal
 * block, S = 4 times less work than the full causal call (target about 4,
 * reported, not counted). The masked call narrows each block of queries to
 * the keys its mask rows reach, so it skips those blocks too: against it
 * the figure is what reading and applying the [L, L] mask costs. Softcap
 * once more with the queries scaled so that most logits pass the cap (the
 * tanh's costlier piece; reported, no target), and the softcap's tanh
 * checked against double tanh on every float.
 */
#include "posattn.h"
#include "ceiling.h"
#include "softmax.h" /* lib/'s row kernels: the softcap's tanh on every float */
#include "tile.h"    /* lib/'s test-only interface to its tile kernels */

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>
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

static float *randn(size_t n, unsigned seed)
{
    float *x = malloc(n * sizeof *x);
    if (x == NULL) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return x;
}

/* Best-of-reps seconds for fn(ctx), after one warm-up call. */
typedef void (*bench_fn)(void *ctx);
static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double best_time(bench_fn fn, void *ctx, int reps)
{
    double best = 1e30;
    fn(ctx);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        fn(ctx);
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

enum { MAX_THREADS = 8 };

typedef struct gemm_ctx {
    int L, H, D;
    const float *q, *k, *v;
    float *s[MAX_THREADS], *o;
} gemm_ctx;

typedef struct attn_ctx {
    pa_attention a;
    pa_attention_out out;
    void *ws[MAX_THREADS];
    size_t ws_size;
} attn_ctx;

/* The ceiling: per head, S = Q K^T and O = S V, strided like attention's. */
static void gemms_part(gemm_ctx *c, int part, int nparts)
{
    int ld = c->H * c->D;
    for (int h = c->H * part / nparts; h < c->H * (part + 1) / nparts; h++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->L, c->L, c->D, 1.0f,
                    c->q + h * c->D, ld, c->k + h * c->D, ld, 0.0f, c->s[part], c->L);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->L, c->D, c->L, 1.0f, c->s[part],
                    c->L, c->v + h * c->D, ld, 0.0f, c->o + h * c->D, ld);
    }
}

/* The second ceiling: the same products through lib/tile.c, tiled the way
 * attention tiles them (64 queries x 256 keys), K^T packed per head. */
typedef struct tile_ctx {
    int L, H, D;
    const float *q, *k, *v;
    float *kt[MAX_THREADS], *s[MAX_THREADS], *o;
} tile_ctx;

static void tiles_part(tile_ctx *c, int part, int nparts)
{
    const int ld = c->H * c->D, bq = 64, bk = 256;
    const size_t ldkt = pa__tile_kt_ld(c->L);
    for (int h = c->H * part / nparts; h < c->H * (part + 1) / nparts; h++) {
        pa__tile_pack_kt(c->L, c->D, c->k + h * c->D, ld, c->kt[part], ldkt);
        for (int i0 = 0; i0 < c->L; i0 += bq) {
            const int nq = c->L - i0 < bq ? c->L - i0 : bq;
            float *o = c->o + (size_t)i0 * ld + h * c->D;
            for (int j0 = 0; j0 < c->L; j0 += bk) {
                const int nk = c->L - j0 < bk ? c->L - j0 : bk;
                pa__tile_qk(nq, nk, c->D, 1.0f, c->q + (size_t)i0 * ld + h * c->D, ld,
                            c->kt[part] + j0, ldkt, c->s[part], nk);
                pa__tile_pv(nq, c->D, nk, c->s[part], nk, c->v + (size_t)j0 * ld + h * c->D, ld, o,
                            ld);
            }
        }
    }
}

static void attention_part(attn_ctx *c, int part, int nparts)
{
    pa_error err;
    if (pa_attention_run_part(&c->a, &c->out, part, nparts, c->ws[part], c->ws_size, &err) !=
        PA_STATUS_OK) {
        fprintf(stderr, "bench: %s: %s\n", err.field, err.message);
        exit(1);
    }
}

/* Runs fn's parts 0..nparts-1 on nparts threads (part 0 on this one). */
typedef struct par_job {
    void (*fn)(void *ctx, int part, int nparts);
    void *ctx;
    int part, nparts;
} par_job;

static void *par_main(void *arg)
{
    par_job *j = arg;
    j->fn(j->ctx, j->part, j->nparts);
    return NULL;
}

typedef struct par_ctx {
    void (*fn)(void *ctx, int part, int nparts);
    void *ctx;
    int nparts;
} par_ctx;

static void run_parallel(void *arg)
{
    par_ctx *pc = arg;
    pthread_t t[MAX_THREADS];
    par_job jobs[MAX_THREADS];
    for (int i = 0; i < pc->nparts; i++)
        jobs[i] = (par_job){pc->fn, pc->ctx, i, pc->nparts};
    for (int i = 1; i < pc->nparts; i++)
        if (pthread_create(&t[i], NULL, par_main, &jobs[i]) != 0) {
            fprintf(stderr, "bench: pthread_create failed\n");
            exit(1);
        }
    par_main(&jobs[0]);
    for (int i = 1; i < pc->nparts; i++)
        pthread_join(t[i], NULL);
}

static void gemms_fn(void *ctx, int part, int nparts)
{
    gemms_part(ctx, part, nparts);
}

static void tiles_fn(void *ctx, int part, int nparts)
{
    tiles_part(ctx, part, nparts);
}

static void attention_fn(void *ctx, int part, int nparts)
{
    attention_part(ctx, part, nparts);
}

typedef struct bench_case {
    const char *name;
    pa_scheme_type scheme;
    int L, H, Hkv, D;
    bool causal;
} bench_case;

/* compute_dtype bf16 against float32, the same call: the speed ratio
 * (target 1.6x where the bf16 products run vdpbf16ps) and the fraction of
 * the bf16 dot-product peak measured here (target 0.5; elsewhere bf16
 * products are float32 FMAs and the fraction is of the FMA peak, with no
 * target). Counts its targets into *met and *missed. */
static void bench_bf16(int tmax, int reps, double fma_peak, int *met, int *missed)
{
    static const bench_case cases[] = {
        {"none", PA_SCHEME_NONE, 512, 8, 8, 64, false},
        {"none", PA_SCHEME_NONE, 2048, 8, 8, 64, false},
        {"none", PA_SCHEME_NONE, 2048, 8, 8, 128, false},
        {"none causal", PA_SCHEME_NONE, 2048, 8, 8, 64, true},
        {"none causal", PA_SCHEME_NONE, 2048, 8, 8, 128, true},
        {"rope causal", PA_SCHEME_ROPE, 2048, 8, 8, 64, true},
    };
    const bool native = strcmp(pa_bf16_path(), "avx512_bf16") == 0;
    const double bf16_peak = ceiling_bf16_gflops(tmax);
    const double peak = native && bf16_peak > 0 ? bf16_peak : fma_peak;
    if (bf16_peak > 0)
        printf("\ncompute_dtype bf16 (path %s): bf16 dot-product peak (vdpbf16ps) %.1f GFLOP/s on "
               "%d threads\n",
               pa_bf16_path(), bf16_peak, tmax);
    else
        printf("\ncompute_dtype bf16 (path %s): no AVX-512 BF16 on this CPU, so bf16 products run "
               "as float32 FMAs: fractions are of the FMA peak (%.1f GFLOP/s), no targets\n",
               pa_bf16_path(), fma_peak);
    printf("%-16s %6s %4s %4s %3s %9s %9s %8s %7s %9s %8s %7s %5s\n", "case", "L", "H", "D", "T",
           "f32 ms", "bf16 ms", "speed", "target", "GFLOP/s", "of peak", "target", "met");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bench_case *bc = &cases[i];
        const int L = bc->L, H = bc->H, D = bc->D;
        const double work =
            bc->causal ? 4.0 * D * H * (double)L * (L + 1) / 2 : 4.0 * L * (double)L * D * H;
        pa_scheme s;
        attn_ctx ac;
        double t32, t16, gf, of, speed;
        bool ok_speed, ok_peak;
        pa_scheme_init(&s, bc->scheme);
        pa_attention_init(&ac.a, &s);
        ac.a.num_heads = H;
        ac.a.num_kv_heads = bc->Hkv;
        ac.a.head_dim = D;
        ac.a.q_len = ac.a.k_len = L;
        ac.a.q = randn((size_t)L * H * D, 1);
        ac.a.k = randn((size_t)L * bc->Hkv * D, 2);
        ac.a.v = randn((size_t)L * bc->Hkv * D, 5);
        ac.a.causal = bc->causal;
        memset(&ac.out, 0, sizeof ac.out);
        ac.out.output = malloc((size_t)L * H * D * sizeof(float));
        ac.a.compute_dtype = PA_DTYPE_BF16; /* the larger workspace */
        ac.ws_size = pa_attention_workspace_size(&ac.a);
        for (int t = 0; t < tmax; t++)
            ac.ws[t] = malloc(ac.ws_size);
        {
            par_ctx pa = {attention_fn, &ac, tmax};
            ac.a.compute_dtype = PA_DTYPE_F32;
            t32 = best_time(run_parallel, &pa, reps);
            ac.a.compute_dtype = PA_DTYPE_BF16;
            t16 = best_time(run_parallel, &pa, reps);
        }
        gf = work / t16 * 1e-9;
        of = gf / peak;
        speed = t32 / t16;
        ok_speed = speed >= 1.6;
        ok_peak = of >= 0.5;
        printf("%-16s %6d %4d %4d %3d %9.2f %9.2f %7.2fx %7s %9.1f %8.2f %7s %5s\n", bc->name, L, H,
               D, tmax, t32 * 1e3, t16 * 1e3, speed, native ? ">=1.6x" : "-", gf, of,
               native ? ">=0.50" : "-", native ? (ok_speed && ok_peak ? "met" : "NO") : "-");
        if (native && bc->L == 2048)
            ok_speed &&ok_peak ? (*met)++ : (*missed)++;
        free((void *)ac.a.q);
        free((void *)ac.a.k);
        free((void *)ac.a.v);
        free(ac.out.output);
        for (int t = 0; t < tmax; t++)
            free(ac.ws[t]);
    }
}

/* The softcap's tanh (lib/softmax.c) on every float: pa__row_softcap with
 * cap 1 (where x * (1 / cap) and the product by cap are exact), against
 * double tanh from 2^-12 to 9.1; below it must give x (tanh(x) rounds to x
 * there), from 9.1 exactly 1, for -x exactly -tanh(x) (-inf, a masked
 * logit, stays -inf), for NaN NaN. Each part takes a share of the
 * positive floats and their negations. */
typedef struct tanh_part {
    double ulp, abs; /* the largest error in ulps of tanh(x), and in absolute */
    float at;        /* where the error in ulps is largest */
    uint64_t misses; /* exactness, symmetry or NaN broken */
} tanh_part;

static double ulp_at(double r)
{
    int e;
    if (fabs(r) < 0x1p-126)
        return 0x1p-149;
    frexp(fabs(r), &e);
    return ldexp(1.0, e - 24);
}

static void tanh_fn(void *ctx, int part, int nparts)
{
    enum { C = 4096 };
    tanh_part *r = (tanh_part *)ctx + part;
    const uint64_t stop = (uint64_t)0x80000000u * (part + 1) / nparts;
    uint64_t b = (uint64_t)0x80000000u * part / nparts;
    float in[C], out[C], neg[C];
    *r = (tanh_part){0};
    while (b < stop) {
        int n = 0;
        for (; n < C && b < stop; n++, b++) {
            const uint32_t u = (uint32_t)b;
            memcpy(&in[n], &u, sizeof u);
            out[n] = in[n];
            neg[n] = -in[n];
        }
        pa__row_softcap(out, n, 1.0f);
        pa__row_softcap(neg, n, 1.0f);
        for (int j = 0; j < n; j++) {
            const float x = in[j], y = out[j];
            double want, err;
            if (isnan(x)) {
                r->misses += !isnan(y) || !isnan(neg[j]);
                continue;
            }
            r->misses += neg[j] != (isinf(x) ? -INFINITY : -y); /* -inf is a mask's */
            if (x < 0x1p-12f || x >= 9.1f) {
                r->misses += y != (x < 1.0f ? x : 1.0f);
                continue;
            }
            want = tanh((double)x);
            err = fabs(y - want);
            r->abs = err > r->abs ? err : r->abs;
            if (err / ulp_at(want) > r->ulp) {
                r->ulp = err / ulp_at(want);
                r->at = x;
            }
        }
    }
}

/* Prints the check's line; returns whether it met softmax.h's bound. */
static bool check_softcap_tanh(int threads)
{
    tanh_part parts[MAX_THREADS], all = {0};
    par_ctx pc = {tanh_fn, parts, threads};
    const double t0 = now();
    run_parallel(&pc);
    for (int i = 0; i < threads; i++) {
        if (parts[i].ulp > all.ulp) {
            all.ulp = parts[i].ulp;
            all.at = parts[i].at;
        }
        all.abs = fmax(all.abs, parts[i].abs);
        all.misses += parts[i].misses;
    }
    const bool ok = all.ulp <= 1.32 && all.misses == 0;
    printf("softcap's tanh on all 2^32 floats (%.1f s): within %.3f ulp of tanh (at %.9g), "
           "%.2g absolute; exact below 2^-12 and past 9.1, odd, NaN kept: %llu misses "
           "(target <= 1.32 ulp, none: %s)\n",
           now() - t0, all.ulp, (double)all.at, all.abs, (unsigned long long)all.misses,
           ok ? "met" : "NO");
    return ok;
}

/* --one SCHEME L H D T [causal]: one case's fraction of the FMA peak of T
 * threads (rope or none, Hkv = H, causal counting the visible half), best
 * of 5, on one line: what bench/service.sh compares the service's own
 * roofline fraction with. */
static int bench_one(int argc, char **argv)
{
    pa_scheme s;
    attn_ctx ac;
    const char *width;
    int L, H, D, T;
    double peak, t, of;
    const bool causal = argc == 8 && strcmp(argv[7], "causal") == 0;
    if ((argc != 7 && !causal) || (strcmp(argv[2], "rope") != 0 && strcmp(argv[2], "none") != 0) ||
        (L = atoi(argv[3])) < 1 || (H = atoi(argv[4])) < 1 || (D = atoi(argv[5])) < 1 ||
        (T = atoi(argv[6])) < 1 || T > MAX_THREADS) {
        fprintf(stderr, "usage: bench_attention --one rope|none L H D T [causal]\n");
        return 2;
    }
    pa_scheme_init(&s, strcmp(argv[2], "rope") == 0 ? PA_SCHEME_ROPE : PA_SCHEME_NONE);
    pa_attention_init(&ac.a, &s);
    ac.a.num_heads = ac.a.num_kv_heads = H;
    ac.a.head_dim = D;
    ac.a.q_len = ac.a.k_len = L;
    ac.a.causal = causal;
    ac.a.q = randn((size_t)L * H * D, 1);
    ac.a.k = randn((size_t)L * H * D, 2);
    ac.a.v = randn((size_t)L * H * D, 5);
    memset(&ac.out, 0, sizeof ac.out);
    ac.out.output = malloc((size_t)L * H * D * sizeof(float));
    ac.ws_size = pa_attention_workspace_size(&ac.a);
    for (int i = 0; i < T; i++)
        ac.ws[i] = malloc(ac.ws_size);
    openblas_set_num_threads(1);
    peak = ceiling_fma_gflops(T, &width);
    {
        par_ctx pa = {attention_fn, &ac, T};
        t = best_time(run_parallel, &pa, 5);
    }
    of = (causal ? 2.0 * L * (L + 1.0) : 4.0 * L * (double)L) * D * H / t * 1e-9 / peak;
    printf("%s%s L=%d H=%d D=%d T=%d: %.2f ms, %.4f of the FMA peak (%.1f GFLOP/s, %s)\n", argv[2],
           causal ? " causal" : "", L, H, D, T, t * 1e3, of, peak, width);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--one") == 0)
        return bench_one(argc, argv);
    bool smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    /* --options [NAME]: only the options section (rows named NAME...). */
    const char *only =
        argc > 1 && strcmp(argv[1], "--options") == 0 ? (argc > 2 ? argv[2] : "") : NULL;
    const bool bf16_only = argc > 1 && strcmp(argv[1], "--bf16") == 0;
    const int reps = smoke ? 1 : 3;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int tmax = cores < 2 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores;
    const bench_case full[] = {
        {"none", PA_SCHEME_NONE, 512, 8, 8, 64, false},
        {"none", PA_SCHEME_NONE, 2048, 8, 8, 64, false},
        {"none", PA_SCHEME_NONE, 2048, 8, 8, 128, false},
        {"none causal", PA_SCHEME_NONE, 2048, 8, 8, 64, true},
        {"rope", PA_SCHEME_ROPE, 2048, 8, 8, 64, false},
        {"rope causal", PA_SCHEME_ROPE, 2048, 8, 8, 64, true},
        {"alibi causal", PA_SCHEME_ALIBI, 2048, 8, 8, 64, true},
        {"rope gqa 32/8", PA_SCHEME_ROPE, 2048, 32, 8, 64, false},
        {"none", PA_SCHEME_NONE, 8192, 8, 8, 64, false},
    };
    const bench_case tiny[] = {
        {"none", PA_SCHEME_NONE, 40, 2, 2, 8, false},
        {"rope causal", PA_SCHEME_ROPE, 40, 4, 2, 8, true},
    };
    const bench_case *cases = smoke ? tiny : full;
    size_t ncases = only || bf16_only ? 0
                    : smoke           ? sizeof tiny / sizeof tiny[0]
                                      : sizeof full / sizeof full[0];

    int met = 0, missed = 0;

    double peak[MAX_THREADS + 1];
    const char *width = "-";
    openblas_set_num_threads(1);
    for (int T = 1; T <= tmax; T = T == tmax ? tmax + 1 : tmax)
        peak[T] = smoke || only ? 1.0 : ceiling_fma_gflops(T, &width);
    printf("attention on %s: %s kernels", ceiling_cpu_model(), pa_kernel_name());
    if (bf16_only) {
        printf("; fp32 FMA peak (%s) %.1f GFLOP/s on 1 thread, %.1f on %d\n", width, peak[1],
               peak[tmax], tmax);
        bench_bf16(tmax, reps, peak[tmax], &met, &missed);
        printf("compute_dtype bf16 targets: %d met, %d not met\n", met, missed);
        return 0;
    }
    if (only == NULL) {
        printf("; fp32 FMA peak (%s) %.1f GFLOP/s on 1 thread, %.1f on %d\n", width, peak[1],
               peak[tmax], tmax);
        printf("GFLOP/s counts 4*L*L*D*H (causal: the visible half, 4*D*H*L*(L+1)/2); beside it\n"
               "the same two GEMMs per head through OpenBLAS sgemm (1 thread inside each of T)\n"
               "and through the library's own tile kernels (%s), with no softmax or masks\n",
               pa__tile_native()                       ? "AVX-512"
               : strcmp(pa_kernel_name(), "avx2") == 0 ? "AVX2"
                                                       : "OpenBLAS");
        printf("%-16s %6s %4s %4s %4s %3s %9s %9s %8s %7s %5s %10s %10s %8s\n", "case", "L", "H",
               "Hkv", "D", "T", "ms", "GFLOP/s", "of peak", "target", "met", "sgemm GF/s",
               "tiles GF/s", "of tiles");
    } else {
        printf("\n");
    }
    for (size_t i = 0; i < ncases; i++) {
        const bench_case *bc = &cases[i];
        const int L = bc->L, H = bc->H, Hkv = bc->Hkv, D = bc->D;
        const double flops = 4.0 * L * (double)L * D * H;
        pa_scheme s;
        attn_ctx ac;
        gemm_ctx gc;
        tile_ctx tc;
        float *kfull = randn((size_t)L * H * D, 3), *vfull = randn((size_t)L * H * D, 4);

        pa_scheme_init(&s, bc->scheme);
        pa_attention_init(&ac.a, &s);
        ac.a.num_heads = H;
        ac.a.num_kv_heads = Hkv;
        ac.a.head_dim = D;
        ac.a.q_len = ac.a.k_len = L;
        ac.a.q = randn((size_t)L * H * D, 1);
        ac.a.k = randn((size_t)L * Hkv * D, 2);
        ac.a.v = randn((size_t)L * Hkv * D, 5);
        ac.a.causal = bc->causal;
        memset(&ac.out, 0, sizeof ac.out);
        ac.out.output = malloc((size_t)L * H * D * sizeof(float));
        ac.ws_size = pa_attention_workspace_size(&ac.a);
        gc.L = L;
        gc.H = H;
        gc.D = D;
        gc.q = ac.a.q;
        gc.k = kfull;
        gc.v = vfull;
        gc.o = malloc((size_t)L * H * D * sizeof(float));
        tc.L = L;
        tc.H = H;
        tc.D = D;
        tc.q = ac.a.q;
        tc.k = kfull;
        tc.v = vfull;
        tc.o = gc.o;
        if (ac.out.output == NULL || gc.o == NULL) {
            fprintf(stderr, "bench: out of memory\n");
            return 1;
        }
        for (int t = 0; t < tmax; t++) {
            ac.ws[t] = malloc(ac.ws_size);
            gc.s[t] = malloc((size_t)L * L * sizeof(float));
            tc.s[t] = malloc((size_t)64 * 256 * sizeof(float));
            tc.kt[t] = malloc((size_t)D * pa__tile_kt_ld(L) * sizeof(float));
            if (ac.ws[t] == NULL || gc.s[t] == NULL || tc.s[t] == NULL || tc.kt[t] == NULL) {
                fprintf(stderr, "bench: out of memory\n");
                return 1;
            }
        }

        for (int T = 1; T <= tmax; T = T == tmax ? tmax + 1 : tmax) { /* 1, then tmax */
            par_ctx pg = {gemms_fn, &gc, T}, pt = {tiles_fn, &tc, T}, pa = {attention_fn, &ac, T};
            double t_ceiling = best_time(run_parallel, &pg, reps);
            double t_tiles = best_time(run_parallel, &pt, reps);
            double t_attn = best_time(run_parallel, &pa, reps);
            /* Causal: the FLOPs of the visible keys only. */
            double work = bc->causal ? 4.0 * D * H * (double)L * (L + 1) / 2 : flops;
            double gf = work / t_attn * 1e-9, of = gf / peak[T];
            double target = bc->causal ? 0.65 : L < 2048 ? 0.60 : 0.75;
            bool counted = T == tmax && bc->scheme == PA_SCHEME_NONE && H == 8;
            char tg[16];
            snprintf(tg, sizeof tg, counted ? ">=%.2f" : "-", target);
            printf("%-16s %6d %4d %4d %4d %3d %9.2f %9.1f %8.2f %7s %5s %10.1f %10.1f %8.2f\n",
                   bc->name, L, H, Hkv, D, T, t_attn * 1e3, gf, of, tg,
                   counted ? (of >= target ? "met" : "NO") : "-", flops / t_ceiling * 1e-9,
                   flops / t_tiles * 1e-9,
                   flops / t_tiles * 1e-9 > 0 ? (flops / t_attn) / (flops / t_tiles) : 0);
            if (counted)
                of >= target ? met++ : missed++;
        }

        free((void *)ac.a.q);
        free((void *)ac.a.k);
        free((void *)ac.a.v);
        free(ac.out.output);
        for (int t = 0; t < tmax; t++) {
            free(ac.ws[t]);
            free(gc.s[t]);
            free(tc.s[t]);
            free(tc.kt[t]);
        }
        free(kfull);
        free(vfull);
        free(gc.o);
    }

    if (!smoke && !only)
        bench_bf16(tmax, reps, peak[tmax], &met, &missed);

    if (!smoke && !only) {
        /* The peak again: on a shared host a neighbour can take the cores
         * for a while, and a ratio is only as good as its ceiling. */
        double again = ceiling_fma_gflops(tmax, &width);
        printf("FMA peak on %d threads again after the rows: %.1f GFLOP/s (%.2f of the first)%s\n",
               tmax, again, again / peak[tmax],
               fabs(again / peak[tmax] - 1.0) > 0.1 ? ": the machine's speed changed, the ratios "
                                                      "above are uncertain"
                                                    : "");
    }

    /* The options of current models against the same call without them. */
    if (!smoke) {
        enum { L = 2048, H = 8, D = 64, ROUNDS = 7 };
        pa_scheme s;
        attn_ctx ac;
        float sinks[H], *bias = randn((size_t)L * L, 7), *norm = randn(D, 8);
        float *qwide = randn((size_t)L * H * D, 1);
        float *ent = malloc((size_t)H * L * sizeof(float)),
              *dist = malloc((size_t)H * L * sizeof(float));
        uint8_t *docs = malloc((size_t)L * L);
        if (docs == NULL) {
            fprintf(stderr, "bench: out of memory\n");
            return 1;
        }
        for (int i = 0; i < L; i++)
            for (int j = 0; j < L; j++)
                docs[(size_t)i * L + j] = i / 512 == j / 512; /* 4 documents */
        const int32_t cu[] = {0, 512, 1024, 1536, 2048};      /* the same 4 documents, packed */
        for (int h = 0; h < H; h++)
            sinks[h] = 0.5f;
        for (int d = 0; d < D; d++)
            norm[d] = 1.0f + 0.1f * norm[d];
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        pa_attention_init(&ac.a, &s);
        ac.a.num_heads = ac.a.num_kv_heads = H;
        ac.a.head_dim = D;
        ac.a.q_len = ac.a.k_len = L;
        ac.a.q = randn((size_t)L * H * D, 1);
        ac.a.k = randn((size_t)L * H * D, 2);
        ac.a.v = randn((size_t)L * H * D, 5);
        ac.a.causal = true;
        memset(&ac.out, 0, sizeof ac.out);
        ac.out.output = malloc((size_t)L * H * D * sizeof(float));
        /* The bias schemes, the same call under another scheme. */
        pa_scheme alibi, t5, shaw, xpos, kerple, sandwich, prop, ntka, fire, cope64, cope_full;
        float r1[H], r2[H];
        float *t5_table = randn((size_t)32 * H, 11), *rel_k = randn((size_t)33 * D, 12);
        /* CoPE's tables: 64 positions, and the reference's default of the
         * block size + 1 (every count a row can reach). */
        float *pos_emb = randn((size_t)(L + 1) * D, 14);
        float *rel_v = randn((size_t)33 * D, 13);
        /* FIRE with the peer's default width, 32: breakpoints -b1/w1 spread
         * over the normalised distances [0, 1]. */
        float *fire_w1 = randn(32, 14), *fire_b1 = randn(32, 15),
              *fire_w2 = randn((size_t)32 * H, 16), *fire_b2 = randn(H, 17);
        pa_scheme_init(&alibi, PA_SCHEME_ALIBI);
        pa_scheme_init(&t5, PA_SCHEME_T5);
        t5.t5.bidirectional = false;
        t5.t5.table = t5_table;
        t5.t5.table_rows = 32;
        t5.t5.table_cols = H;
        pa_scheme_init(&shaw, PA_SCHEME_SHAW);
        shaw.shaw.max_relative_position = 16;
        shaw.shaw.rel_k = rel_k;
        shaw.shaw.rel_k_rows = 33;
        shaw.shaw.rel_k_cols = D;
        shaw.shaw.rel_v = rel_v;
        shaw.shaw.rel_v_rows = 33;
        shaw.shaw.rel_v_cols = D;
        /* Issue #31's schemes and scalings: xPos; KERPLE (log, r1 1, r2 by
         * head as ALiBi's slopes spread); Sandwich; RoPE proportional
         * (Gemma 4's 0.25) and NTK-alpha (4); FIRE (hidden 32); CoPE. */
        pa_scheme_init(&xpos, PA_SCHEME_XPOS);
        pa_scheme_init(&kerple, PA_SCHEME_KERPLE);
        for (int h = 0; h < H; h++) {
            r1[h] = 1.0f;
            r2[h] = 0.5f / (float)(1 << h % 5);
        }
        kerple.kerple.r1 = r1;
        kerple.kerple.r2 = r2;
        kerple.kerple.num_r1 = kerple.kerple.num_r2 = H;
        pa_scheme_init(&sandwich, PA_SCHEME_SANDWICH);
        prop = s;
        prop.rope.scaling = PA_ROPE_SCALING_PROPORTIONAL;
        prop.rope.partial_rotary_factor = 0.25;
        ntka = s;
        ntka.rope.scaling = PA_ROPE_SCALING_NTK_ALPHA;
        ntka.rope.alpha = 4.0;
        pa_scheme_init(&fire, PA_SCHEME_FIRE);
        fire.fire.w1 = fire_w1;
        fire.fire.b1 = fire_b1;
        fire.fire.w2 = fire_w2;
        fire.fire.b2 = fire_b2;
        fire.fire.num_w1 = fire.fire.num_b1 = 32;
        fire.fire.num_w2 = 32 * H;
        fire.fire.num_b2 = H;
        pa_scheme_init(&cope64, PA_SCHEME_COPE);
        cope64.cope.npos_max = 64;
        cope64.cope.pos_emb = pos_emb;
        cope64.cope.pos_emb_heads = 1;
        cope_full = cope64;
        cope_full.cope.npos_max = L + 1;
        ac.ws_size = 0;
        {
            const pa_scheme *all[] = {&s,      &alibi,    &t5,   &shaw,   &xpos,
                                      &kerple, &sandwich, &fire, &cope64, &cope_full};
            for (int i = 0; i < 10; i++) {
                pa_attention b = ac.a;
                size_t n;
                b.scheme = all[i < 7 ? i : 0];
                if (i == 7) {
                    b.cu_seqlens_q = cu;
                    b.num_seqs = 4;
                }
                n = pa_attention_workspace_size(&b);
                ac.ws_size = n > ac.ws_size ? n : ac.ws_size;
            }
        }
        for (int t = 0; t < tmax; t++)
            ac.ws[t] = malloc(ac.ws_size);
        printf("\noptions of current models and the bias schemes: rope causal L=%d H=%d D=%d, "
               "T=%d;\nspeed against the same call without the option (or with rope); median "
               "of %d pairs timed in turn, > 1 is faster\n",
               L, H, D, tmax, ROUNDS);
        printf("%-28s %9s %10s %7s %5s\n", "option", "GFLOP/s", "speed", "target", "met");
        const pa_attention base = ac.a; /* each option's pair starts from it */
        for (int i = 0; i < L * H * D; i++)
            qwide[i] *= 600.0f; /* logits with a standard deviation of 200 */
        for (int o = 0; o < 23; o++) {
            static const char *const names[] = {"softcap 50",
                                                "sinks",
                                                "bias [1, L, L]",
                                                "q_norm, k_norm [D]",
                                                "chunk_size 512",
                                                "mask: 4 documents",
                                                "alibi (scheme)",
                                                "t5 (scheme)",
                                                "shaw K=16 (scheme)",
                                                "return entropy+distance",
                                                "xpos (scheme)",
                                                "kerple log (scheme)",
                                                "sandwich (scheme)",
                                                "rope proportional 0.25",
                                                "rope ntk_alpha 4",
                                                "logn_scaling T=512",
                                                "attn_temperature floor 256",
                                                "fire hidden=32 (scheme)",
                                                "cope npos 64",
                                                "cope npos L+1",
                                                "packed 4 x 512 vs mask",
                                                "packed 4 x 512 vs full L",
                                                "softcap 50, logits sd 4 cap"};
            if (only != NULL && strncmp(names[o], only, strlen(only)) != 0)
                continue;
            /* Those that add work to every logit; q/k norms add O(L*D).
             * CoPE computes q.k twice by design (its gates need the whole
             * row first): reported, no target. */
            const bool counted = o <= 2 || (o >= 6 && o <= 17);
            /* Packed sequences (cu_seqlens) skip the off-diagonal blocks:
             * against the full call without a mask, target about S = 4. */
            const bool packed = o == 21;
            /* The row statistics (#21): computed in the kernel, no weights. */
            const bool stats = o == 9;
            par_ctx pa = {attention_fn, &ac, tmax};
            double ratio[ROUNDS], best = 1e30;
            pa_attention plain = base, with = base;
            switch (o) {
            case 0:
                with.softcap = 50.0f;
                break;
            case 1:
                with.sinks = sinks;
                break;
            case 2:
                with.bias = bias;
                with.bias_heads = 1;
                break;
            case 3:
                with.q_norm = with.k_norm = norm;
                with.q_norm_len = with.k_norm_len = D;
                with.q_norm_eps = with.k_norm_eps = 1e-6f;
                break;
            case 4:
                with.chunk_size = 512;
                break;
            case 5:
                with.mask = docs;
                with.mask_heads = 1;
                break;
            case 6:
                with.scheme = &alibi;
                break;
            case 7:
                with.scheme = &t5;
                break;
            case 8:
                with.scheme = &shaw;
                break;
            case 10:
                with.scheme = &xpos;
                break;
            case 11:
                with.scheme = &kerple;
                break;
            case 12:
                with.scheme = &sandwich;
                break;
            case 13:
                with.scheme = &prop;
                break;
            case 14:
                with.scheme = &ntka;
                break;
            case 15:
                with.logn_train_length = 512;
                break;
            case 16:
                with.temperature_floor_scale = 256.0;
                with.temperature_attn_scale = 0.1;
                break;
            case 17:
                with.scheme = &fire;
                break;
            case 18:
                with.scheme = &cope64;
                break;
            case 19:
                with.scheme = &cope_full;
                break;
            case 22:
                /* The bench's logits lie within 2 of 0, far inside the cap:
                 * here most reach it, and the tanh takes both pieces. */
                plain.q = with.q = qwide;
                with.softcap = 50.0f;
                break;
            case 20:
            case 21:
                if (o == 20) {
                    plain.mask = docs;
                    plain.mask_heads = 1;
                }
                with.cu_seqlens_q = cu;
                with.num_seqs = 4;
                break;
            default:
                break; /* the same call, with the statistics asked for */
            }
            run_parallel(&pa); /* warm */
            for (int r = 0; r < ROUNDS; r++) {
                double t0, t_plain;
                ac.a = plain;
                ac.out.entropy = ac.out.distance = NULL;
                t0 = now();
                run_parallel(&pa);
                t_plain = now() - t0;
                ac.a = with;
                ac.out.entropy = stats ? ent : NULL;
                ac.out.distance = stats ? dist : NULL;
                t0 = now();
                run_parallel(&pa);
                ratio[r] = t_plain / (now() - t0);
                best = fmin(best, now() - t0);
            }
            ac.a = base;
            ac.out.entropy = ac.out.distance = NULL;
            qsort(ratio, ROUNDS, sizeof *ratio, cmp_double);
            printf("%-28s %9.1f %9.2fx %7s %5s\n", names[o],
                   4.0 * L * (double)L * D * H / best * 1e-9, ratio[ROUNDS / 2],
                   counted  ? ">=0.90"
                   : packed ? "~4"
                            : "-",
                   counted ? (ratio[ROUNDS / 2] >= 0.90 ? "met" : "NO") : "-");
            if (counted)
                ratio[ROUNDS / 2] >= 0.90 ? met++ : missed++;
            if (o >= 10 && o <= 21)
                printf("%-28s %9s %9.2fx the time of rope causal\n", "", "",
                       1.0 / ratio[ROUNDS / 2]);
        }
        free(t5_table);
        free(fire_w1);
        free(fire_b1);
        free(fire_w2);
        free(fire_b2);
        free(pos_emb);
        free(rel_k);
        free(rel_v);
        for (int t = 0; t < tmax; t++)
            free(ac.ws[t]);
        free((void *)ac.a.q);
        free((void *)ac.a.k);
        free((void *)ac.a.v);
        free(ac.out.output);
        free(bias);
        free(ent);
        free(dist);
        free(norm);
        free(docs);
        free(qwide);
    }

    if (!smoke && (only == NULL || strncmp("softcap tanh", only, strlen(only)) == 0))
        check_softcap_tanh(tmax) ? met++ : missed++;

    /* Working memory of the long-context case, from the library's own query. */
    {
        pa_scheme s;
        pa_attention a;
        float dummy = 0;
        pa_scheme_init(&s, PA_SCHEME_ROPE);
        pa_attention_init(&a, &s);
        a.num_heads = 8;
        a.head_dim = 64;
        a.q_len = a.k_len = 32768;
        a.q = a.k = a.v = &dummy;
        size_t ws = pa_attention_workspace_size(&a);
        printf("workspace rope L=32768 H=8 D=64: %.1f MB (target < 64 MB: %s)\n", ws / 1048576.0,
               ws < 64u << 20 ? "met" : "NO");
    }
    printf("attention targets: %d met, %d not met\n", met, missed);
    return 0;
}
