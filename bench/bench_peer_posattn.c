/* bench_peer_posattn.c - the posattn side of bench/peers.py: times
 * pa_attention_run (no positional scheme, non-causal, B=1, float32) on random
 * q, k, v [L, H, D] and prints the best-of-reps seconds, so the Python script
 * can put it beside NumPy and PyTorch on the same shapes in the same run.
 *
 *   bench_peer_posattn L H D REPS [--split N]   prints one line: seconds
 *   bench_peer_posattn --smoke                  tiny run (make test)
 *   bench_peer_posattn                          a pointer to peers.py (make bench)
 *
 * Threads: by default one pa_attention_run call, using whatever threads
 * OpenBLAS is given (OPENBLAS_NUM_THREADS), as a caller with one request does.
 * --split N runs N pthreads here, each a pa_attention_run over a contiguous
 * block of query rows with OpenBLAS set to 1 thread: how the server's worker
 * pool would use N cores. The library itself starts no threads.
 */
#include "posattn.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SPLIT 16

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n == 0 ? 64 : n) != 0 || p == NULL) {
        fprintf(stderr, "bench_peer_posattn: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static float *randu(size_t n, unsigned seed)
{
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return x;
}

/* One caller: a descriptor over query rows [r0, r1) and its own workspace,
 * allocated and touched once, before timing, as a server worker keeps its own. */
typedef struct worker {
    pa_attention a;
    pa_attention_out out;
    void *ws;
    size_t ws_size;
} worker;

static void *worker_run(void *arg)
{
    worker *w = arg;
    pa_error err;
    if (pa_attention_run(&w->a, &w->out, w->ws, w->ws_size, &err) != PA_STATUS_OK) {
        fprintf(stderr, "bench_peer_posattn: %s: %s\n", err.field, err.message);
        exit(1);
    }
    return NULL;
}

static double run_once(worker *w, int nw)
{
    pthread_t tid[MAX_SPLIT];
    double t0 = now();
    for (int i = 1; i < nw; i++) {
        if (pthread_create(&tid[i], NULL, worker_run, &w[i]) != 0) {
            fprintf(stderr, "bench_peer_posattn: pthread_create failed\n");
            exit(1);
        }
    }
    worker_run(&w[0]);
    for (int i = 1; i < nw; i++)
        pthread_join(tid[i], NULL);
    return now() - t0;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_peer_posattn L H D REPS [--split N] | --smoke\n");
    return 2;
}

int main(int argc, char **argv)
{
    /* `make bench` runs every bench binary without arguments: this one only
     * makes sense beside its peers, so it points there and succeeds. */
    if (argc == 1) {
        printf("bench_peer_posattn: the posattn side of bench/peers.py; run `make bench-peers`\n");
        return 0;
    }
    bool smoke = strcmp(argv[1], "--smoke") == 0;
    int L = 16, H = 2, D = 8, reps = 1, split = 0;
    if (smoke) {
        split = 2; /* exercise the threaded path too */
    } else {
        if (argc != 5 && argc != 7)
            return usage();
        L = atoi(argv[1]);
        H = atoi(argv[2]);
        D = atoi(argv[3]);
        reps = atoi(argv[4]);
        if (argc == 7) {
            if (strcmp(argv[5], "--split") != 0)
                return usage();
            split = atoi(argv[6]);
            if (split < 1 || split > MAX_SPLIT)
                return usage();
        }
        if (L < 1 || H < 1 || D < 1 || reps < 1)
            return usage();
    }
    const int nw = split > 0 ? split : 1;
    if (split > 0)
        openblas_set_num_threads(1);

    const size_t row = (size_t)H * (size_t)D, n = (size_t)L * row;
    float *q = randu(n, 1), *k = randu(n, 2), *v = randu(n, 3);
    float *o = randu(n, 4); /* touched: no first-touch faults in the timing */
    int32_t *pos = xmalloc((size_t)L * sizeof *pos);
    for (int i = 0; i < L; i++)
        pos[i] = i;

    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_NONE);
    worker w[MAX_SPLIT];
    for (int i = 0; i < nw; i++) {
        int r0 = (int)((long long)L * i / nw), r1 = (int)((long long)L * (i + 1) / nw);
        pa_attention_init(&w[i].a, &s);
        w[i].a.num_heads = H;
        w[i].a.head_dim = D;
        w[i].a.q_len = r1 - r0;
        w[i].a.k_len = L;
        w[i].a.q = q + (size_t)r0 * row;
        w[i].a.k = k;
        w[i].a.v = v;
        w[i].a.q_positions = pos + r0; /* the rows' own positions, as one call sees them */
        memset(&w[i].out, 0, sizeof w[i].out);
        w[i].out.output = o + (size_t)r0 * row;
        pa_error err;
        if (pa_attention_check(&w[i].a, &err) != PA_STATUS_OK) {
            fprintf(stderr, "bench_peer_posattn: %s: %s\n", err.field, err.message);
            return 1;
        }
        w[i].ws_size = pa_attention_workspace_size(&w[i].a);
        w[i].ws = xmalloc(w[i].ws_size);
        memset(w[i].ws, 0, w[i].ws_size);
    }

    double best = 1e30;
    run_once(w, nw); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t = run_once(w, nw);
        if (t < best)
            best = t;
    }
    /* Each output row is a convex combination of v rows in [-1, 1). */
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(o[i]) <= 1.0f)) {
            fprintf(stderr, "bench_peer_posattn: output[%zu]=%g is not a convex combination\n", i,
                    (double)o[i]);
            return 1;
        }
    }
    printf("%.9f\n", best);

    for (int i = 0; i < nw; i++)
        free(w[i].ws);
    free(q);
    free(k);
    free(v);
    free(o);
    free(pos);
    return 0;
}
