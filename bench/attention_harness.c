/* attention_harness.c - what bench_attention.c and attention_options.c
 * share (attention_harness.h): the clock, random inputs, best-of timing,
 * and an attention call's parts run on threads.
 */
#include "attention_harness.h"

#include <pthread.h>
#include <stdint.h>
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

/* Parts 1..nparts-1 of each call run on threads started once and kept,
 * as posattnd's worker pool keeps its threads: a thread started per call
 * (17-42 us on a 2-vCPU VM) would be timed with the call, a few percent
 * of a millisecond's prefill that the service never pays. The threads
 * wait on a condition variable between calls, as libuv's pool does. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long calls; /* calls handed out */
    int threads;         /* threads started: parts 1..threads */
    int pending;         /* this call's parts not yet finished */
    par_ctx job;         /* this call (a copy: the caller's may be gone when
                            a thread with no part in it wakes) */
} pool = {PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          0,
          0,
          0,
          {NULL, NULL, 0}};

static void *pool_main(void *arg)
{
    const int part = (int)(intptr_t)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.calls == seen)
            pthread_cond_wait(&pool.go, &pool.mu);
        seen = pool.calls;
        const par_ctx job = pool.job;
        if (part >= job.nparts)
            continue;
        pthread_mutex_unlock(&pool.mu);
        job.fn(job.ctx, part, job.nparts);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

void bench_run_parallel(void *arg)
{
    const par_ctx *pc = arg;
    pthread_mutex_lock(&pool.mu);
    while (pool.threads < pc->nparts - 1) {
        pthread_t t;
        if (pthread_create(&t, NULL, pool_main, (void *)(intptr_t)(pool.threads + 1)) != 0) {
            fprintf(stderr, "bench: pthread_create failed\n");
            exit(1);
        }
        pthread_detach(t);
        pool.threads++;
    }
    pool.job = *pc;
    pool.pending = pc->nparts - 1;
    pool.calls++;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    pc->fn(pc->ctx, 0, pc->nparts);
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

void bench_attention_fn(void *ctx, int part, int nparts)
{
    attention_part(ctx, part, nparts);
}
