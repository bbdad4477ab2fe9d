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
 * checked against double tanh on every float. Those two are in
 * attention_options.c; the timing and threads all three files use are in
 * attention_harness.c.
 */
#include "posattn.h"
#include "attention_harness.h"
#include "attention_options.h"
#include "ceiling.h"
#include "tile.h" /* lib/'s test-only interface to its tile kernels */

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemm_ctx {
    int L, H, D;
    const float *q, *k, *v;
    float *s[MAX_THREADS], *o;
} gemm_ctx;

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

static void gemms_fn(void *ctx, int part, int nparts)
{
    gemms_part(ctx, part, nparts);
}

static void tiles_fn(void *ctx, int part, int nparts)
{
    tiles_part(ctx, part, nparts);
}

typedef struct bench_case {
    const char *name;
    pa_scheme_type scheme;
    int L, H, Hkv, D;
    bool causal;
} bench_case;

/* compute_dtype bf16 against float32, the same call: the speed ratio
 * (target 1.6x where the bf16 products run vdpbf16ps; the median of
 * BF16_PAIRS pairs of calls timed in turn) and the fraction of
 * the bf16 dot-product peak measured here (target 0.5; elsewhere bf16
 * products are float32 FMAs and the fraction is of the FMA peak, with no
 * target). Counts its targets into *met and *missed. */
enum { BF16_PAIRS = 9 };
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
    printf("speed: the median of %d pairs of calls (float32, bf16) timed in turn; ms and GFLOP/s: "
           "each dtype's best\n",
           BF16_PAIRS);
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
        ac.a.q = bench_randn((size_t)L * H * D, 1);
        ac.a.k = bench_randn((size_t)L * bc->Hkv * D, 2);
        ac.a.v = bench_randn((size_t)L * bc->Hkv * D, 5);
        ac.a.causal = bc->causal;
        memset(&ac.out, 0, sizeof ac.out);
        ac.out.output = malloc((size_t)L * H * D * sizeof(float));
        ac.a.compute_dtype = PA_DTYPE_BF16; /* the larger workspace */
        ac.ws_size = pa_attention_workspace_size(&ac.a);
        for (int t = 0; t < tmax; t++)
            ac.ws[t] = malloc(ac.ws_size);
        {
            /* Timed in turn, a float32 call then a bf16 one, so that a
             * burst of the host's other work slows one pair rather than
             * all of one dtype's calls: the speed is the median of the
             * pairs' ratios, the times and the fraction each dtype's
             * best. */
            par_ctx pa = {bench_attention_fn, &ac, tmax};
            double ratio[BF16_PAIRS];
            const int pairs = reps > 1 ? BF16_PAIRS : 1;
            t32 = t16 = 1e30;
            for (int r = -1; r < pairs; r++) { /* r = -1: warm-up */
                double t0, a, b;
                ac.a.compute_dtype = PA_DTYPE_F32;
                t0 = bench_now();
                bench_run_parallel(&pa);
                a = bench_now() - t0;
                ac.a.compute_dtype = PA_DTYPE_BF16;
                t0 = bench_now();
                bench_run_parallel(&pa);
                b = bench_now() - t0;
                if (r < 0)
                    continue;
                ratio[r] = a / b;
                t32 = a < t32 ? a : t32;
                t16 = b < t16 ? b : t16;
            }
            qsort(ratio, (size_t)pairs, sizeof ratio[0], bench_cmp_double);
            speed = ratio[pairs / 2];
        }
        gf = work / t16 * 1e-9;
        of = gf / peak;
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
    ac.a.q = bench_randn((size_t)L * H * D, 1);
    ac.a.k = bench_randn((size_t)L * H * D, 2);
    ac.a.v = bench_randn((size_t)L * H * D, 5);
    memset(&ac.out, 0, sizeof ac.out);
    ac.out.output = malloc((size_t)L * H * D * sizeof(float));
    ac.ws_size = pa_attention_workspace_size(&ac.a);
    for (int i = 0; i < T; i++)
        ac.ws[i] = malloc(ac.ws_size);
    openblas_set_num_threads(1);
    peak = ceiling_fma_gflops(T, &width);
    {
        par_ctx pa = {bench_attention_fn, &ac, T};
        t = bench_best_time(bench_run_parallel, &pa, 5);
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
        float *kfull = bench_randn((size_t)L * H * D, 3),
              *vfull = bench_randn((size_t)L * H * D, 4);

        pa_scheme_init(&s, bc->scheme);
        pa_attention_init(&ac.a, &s);
        ac.a.num_heads = H;
        ac.a.num_kv_heads = Hkv;
        ac.a.head_dim = D;
        ac.a.q_len = ac.a.k_len = L;
        ac.a.q = bench_randn((size_t)L * H * D, 1);
        ac.a.k = bench_randn((size_t)L * Hkv * D, 2);
        ac.a.v = bench_randn((size_t)L * Hkv * D, 5);
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
            par_ctx pg = {gemms_fn, &gc, T}, pt = {tiles_fn, &tc, T},
                    pa = {bench_attention_fn, &ac, T};
            double t_ceiling = bench_best_time(bench_run_parallel, &pg, reps);
            double t_tiles = bench_best_time(bench_run_parallel, &pt, reps);
            double t_attn = bench_best_time(bench_run_parallel, &pa, reps);
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
    if (!smoke)
        bench_options(tmax, only, &met, &missed);

    if (!smoke && (only == NULL || strncmp("softcap tanh", only, strlen(only)) == 0))
        bench_softcap_tanh(tmax) ? met++ : missed++;

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
