/* bench_peer_case.c - the posattn side of bench/peer_ort.py: one attention
 * call (no positional scheme, B=1, float32, q [Lq, H, D], k and v
 * [Lk, Hkv, D]) spread over T threads as posattnd spreads a request over its
 * workers, timed wall-clock: the best of REPS calls after a warm-up.
 *
 *   bench_peer_case Lq Lk H Hkv D CAUSAL T REPS   prints one line: seconds
 *   bench_peer_case --smoke                       tiny run (make test)
 *   bench_peer_case                               a pointer to peer_ort.py
 *
 * Up to 8 query rows the T parts split the keys (pa_attention_run_keys, then
 * pa_attention_merge, timed together); past that, the query heads
 * (pa_attention_run_part). Causal is bottom-right aligned (posattn's
 * convention), which for one query row sees every key.
 */
#include "posattn.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_T = 16 };

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
        fprintf(stderr, "bench_peer_case: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    memset(p, 0, n); /* touched: no first-touch faults in the timing */
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

typedef struct call {
    pa_attention a;
    pa_attention_out out;
    int T;
    bool keys; /* split by keys */
    void *ws[MAX_T];
    size_t ws_size;
    void *partials;
} call;

typedef struct part {
    call *c;
    int p;
} part;

static void *run_part(void *arg)
{
    part *pt = arg;
    call *c = pt->c;
    pa_error err;
    pa_status st = c->keys ? pa_attention_run_keys(&c->a, &c->out, pt->p, c->T, c->partials,
                                                   c->ws[pt->p], c->ws_size, &err)
                           : pa_attention_run_part(&c->a, &c->out, pt->p, c->T, c->ws[pt->p],
                                                   c->ws_size, &err);
    if (st != PA_STATUS_OK) {
        fprintf(stderr, "bench_peer_case: %s: %s\n", err.field, err.message);
        exit(1);
    }
    return NULL;
}

static double run_once(call *c)
{
    pthread_t tid[MAX_T];
    part parts[MAX_T];
    pa_error err;
    double t0 = now();
    for (int i = 0; i < c->T; i++)
        parts[i] = (part){c, i};
    for (int i = 1; i < c->T; i++)
        if (pthread_create(&tid[i], NULL, run_part, &parts[i]) != 0) {
            fprintf(stderr, "bench_peer_case: pthread_create failed\n");
            exit(1);
        }
    run_part(&parts[0]);
    for (int i = 1; i < c->T; i++)
        pthread_join(tid[i], NULL);
    if (c->keys && pa_attention_merge(&c->a, &c->out, c->T, c->partials, &err) != PA_STATUS_OK) {
        fprintf(stderr, "bench_peer_case: %s: %s\n", err.field, err.message);
        exit(1);
    }
    return now() - t0;
}

int main(int argc, char **argv)
{
    int Lq = 3, Lk = 40, H = 4, Hkv = 2, D = 16, causal = 1, T = 2, reps = 1;
    if (argc == 1) {
        printf("bench_peer_case: the posattn side of bench/peer_ort.py; run `make bench-peers`\n");
        return 0;
    }
    if (strcmp(argv[1], "--smoke") != 0) {
        if (argc != 9) {
            fprintf(stderr, "usage: bench_peer_case Lq Lk H Hkv D CAUSAL T REPS | --smoke\n");
            return 2;
        }
        Lq = atoi(argv[1]);
        Lk = atoi(argv[2]);
        H = atoi(argv[3]);
        Hkv = atoi(argv[4]);
        D = atoi(argv[5]);
        causal = atoi(argv[6]);
        T = atoi(argv[7]);
        reps = atoi(argv[8]);
        if (Lq < 1 || Lk < 1 || H < 1 || Hkv < 1 || D < 1 || T < 1 || T > MAX_T || reps < 1) {
            fprintf(stderr, "bench_peer_case: every size must be positive, T at most %d\n", MAX_T);
            return 2;
        }
    }
    openblas_set_num_threads(1);

    pa_scheme s;
    call c;
    memset(&c, 0, sizeof c);
    pa_scheme_init(&s, PA_SCHEME_NONE);
    pa_attention_init(&c.a, &s);
    c.a.num_heads = H;
    c.a.num_kv_heads = Hkv;
    c.a.head_dim = D;
    c.a.q_len = Lq;
    c.a.k_len = Lk;
    c.a.q = randu((size_t)Lq * H * D, 1);
    c.a.k = randu((size_t)Lk * Hkv * D, 2);
    c.a.v = randu((size_t)Lk * Hkv * D, 3);
    c.a.causal = causal != 0;
    c.out.output = xmalloc((size_t)Lq * H * D * sizeof(float));
    c.T = T;
    {
        pa_error err;
        if (pa_attention_check(&c.a, &err) != PA_STATUS_OK) {
            fprintf(stderr, "bench_peer_case: %s: %s\n", err.field, err.message);
            return 1;
        }
    }
    c.ws_size = pa_attention_workspace_size(&c.a);
    for (int i = 0; i < T; i++)
        c.ws[i] = xmalloc(c.ws_size);
    {
        size_t psz = T > 1 ? pa_attention_partials_size(&c.a, &c.out, T) : 0;
        c.keys = psz > 0;
        c.partials = c.keys ? xmalloc(psz) : NULL;
    }

    double best = 1e30;
    run_once(&c); /* warm-up */
    for (int r = 0; r < reps; r++)
        best = fmin(best, run_once(&c));
    for (size_t i = 0; i < (size_t)Lq * H * D; i++)
        if (!(fabsf(c.out.output[i]) <= 1.0f)) {
            fprintf(stderr, "bench_peer_case: output[%zu]=%g is not a convex combination\n", i,
                    (double)c.out.output[i]);
            return 1;
        }
    printf("%.9f\n", best);
    for (int i = 0; i < T; i++)
        free(c.ws[i]);
    free(c.partials);
    free((void *)c.a.q);
    free((void *)c.a.k);
    free((void *)c.a.v);
    free(c.out.output);
    return 0;
}
