/* attention_harness.h - what bench_attention.c and attention_options.c
 * share (attention_harness.c): the clock, random inputs, best-of timing,
 * and an attention call's parts run on threads.
 */
#ifndef BENCH_ATTENTION_HARNESS_H
#define BENCH_ATTENTION_HARNESS_H

#include "posattn.h"

#include <stddef.h>

enum { MAX_THREADS = 8 };

/* One attention call (a, out) and a workspace per thread. */
typedef struct attn_ctx {
    pa_attention a;
    pa_attention_out out;
    void *ws[MAX_THREADS];
    size_t ws_size;
} attn_ctx;

/* fn's parts 0..nparts-1, for bench_run_parallel. */
typedef struct par_ctx {
    void (*fn)(void *ctx, int part, int nparts);
    void *ctx;
    int nparts;
} par_ctx;

/* Seconds of CLOCK_MONOTONIC. */
double bench_now(void);
/* n uniform values in [-1, 1) from seed (exits when out of memory). */
float *bench_randn(size_t n, unsigned seed);
/* qsort's order of doubles. */
int bench_cmp_double(const void *a, const void *b);
/* Best-of-reps seconds for fn(ctx), after one warm-up call. */
typedef void (*bench_fn)(void *ctx);
double bench_best_time(bench_fn fn, void *ctx, int reps);
/* Runs a par_ctx's parts on nparts threads (part 0 on this one). */
void bench_run_parallel(void *par);
/* Part part of nparts of an attn_ctx's call (pa_attention_run_part). */
void bench_attention_fn(void *ctx, int part, int nparts);

#endif
