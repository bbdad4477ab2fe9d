/* attention_harness.c - what bench_attention.c and attention_options.c
 * share (attention_harness.h): the clock, random inputs, best-of timing,
 * and an attention call's parts run on threads.
 */
#include "attention_harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

float *bench_randn(size_t n, unsigned seed)
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

int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_best_time(bench_fn fn, void *ctx, int reps)
{
    double best = 1e30;
    fn(ctx);
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        fn(ctx);
        double t = bench_now() - t0;
        if (t < best)
            best = t;
    }
    return best;
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

void bench_run_parallel(void *arg)
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

void bench_attention_fn(void *ctx, int part, int nparts)
{
    attention_part(ctx, part, nparts);
}
