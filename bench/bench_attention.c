/* bench_attention.c - attention throughput as a ratio of the machine's own
 * ceiling, measured in the same run: the two GEMMs of attention (QK^T and PV
 * per head) through OpenBLAS sgemm alone, with no softmax or masking.
 *
 *   build/bench/bench_attention           full table
 *   build/bench/bench_attention --smoke   tiny sizes, one repetition (make test)
 *
 * GFLOP/s counts 4*Lq*Lk*D per head (two GEMMs) for every case, causal too,
 * so a causal case that skips hidden tiles shows as a higher figure.
 */
#include "posattn.h"

#include <cblas.h>
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

typedef struct gemm_ctx {
    int L, H, D;
    const float *q, *k, *v;
    float *s, *o;
} gemm_ctx;

/* The ceiling: per head, S = Q K^T and O = S V, strided like attention's. */
static void run_gemms(void *p)
{
    gemm_ctx *c = p;
    int ld = c->H * c->D;
    for (int h = 0; h < c->H; h++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->L, c->L, c->D, 1.0f,
                    c->q + h * c->D, ld, c->k + h * c->D, ld, 0.0f, c->s, c->L);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->L, c->D, c->L, 1.0f, c->s,
                    c->L, c->v + h * c->D, ld, 0.0f, c->o + h * c->D, ld);
    }
}

typedef struct attn_ctx {
    pa_attention a;
    pa_attention_out out;
    void *ws;
    size_t ws_size;
} attn_ctx;

static void run_attention(void *p)
{
    attn_ctx *c = p;
    pa_error err;
    if (pa_attention_run(&c->a, &c->out, c->ws, c->ws_size, &err) != PA_STATUS_OK) {
        fprintf(stderr, "bench: %s: %s\n", err.field, err.message);
        exit(1);
    }
}

typedef struct bench_case {
    const char *name;
    pa_scheme_type scheme;
    int L, H, Hkv, D;
    bool causal;
} bench_case;

int main(int argc, char **argv)
{
    bool smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    const int reps = smoke ? 1 : 3;
    const bench_case full[] = {
        {"none", PA_SCHEME_NONE, 512, 8, 8, 64, false},
        {"none", PA_SCHEME_NONE, 2048, 8, 8, 64, false},
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
    size_t ncases = smoke ? sizeof tiny / sizeof tiny[0] : sizeof full / sizeof full[0];

    printf("attention vs OpenBLAS sgemm ceiling (same two GEMMs per head, same process)\n");
    printf("%-16s %6s %4s %4s %4s %12s %12s %7s\n", "case", "L", "H", "Hkv", "D",
           "GFLOP/s", "sgemm GF/s", "ratio");
    for (size_t i = 0; i < ncases; i++) {
        const bench_case *bc = &cases[i];
        const int L = bc->L, H = bc->H, Hkv = bc->Hkv, D = bc->D;
        const double flops = 4.0 * L * (double)L * D * H;
        pa_scheme s;
        attn_ctx ac;
        gemm_ctx gc;
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
        ac.ws = malloc(ac.ws_size);

        gc.L = L;
        gc.H = H;
        gc.D = D;
        gc.q = ac.a.q;
        gc.k = kfull;
        gc.v = vfull;
        gc.s = malloc((size_t)L * L * sizeof(float));
        gc.o = malloc((size_t)L * H * D * sizeof(float));
        if (ac.out.output == NULL || ac.ws == NULL || gc.s == NULL || gc.o == NULL) {
            fprintf(stderr, "bench: out of memory\n");
            return 1;
        }

        double t_ceiling = best_time(run_gemms, &gc, reps);
        double t_attn = best_time(run_attention, &ac, reps);
        double gf = flops / t_attn * 1e-9, gc_gf = flops / t_ceiling * 1e-9;
        printf("%-16s %6d %4d %4d %4d %12.1f %12.1f %7.2f\n", bc->name, L, H, Hkv, D, gf, gc_gf,
               gf / gc_gf);

        free((void *)ac.a.q);
        free((void *)ac.a.k);
        free((void *)ac.a.v);
        free(ac.out.output);
        free(ac.ws);
        free(kfull);
        free(vfull);
        free(gc.s);
        free(gc.o);
    }

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
        printf("workspace rope L=32768 H=8 D=64: %.1f MB (limit 64 MB)\n",
               pa_attention_workspace_size(&a) / 1048576.0);
    }
    return 0;
}
