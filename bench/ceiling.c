/* ceiling.c - see ceiling.h. */
#include "ceiling.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CEIL_X86 1
#endif

enum { MAX_T = 16 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs fn(arg_i) on T threads started together; returns the wall time from
 * the start of the first to the end of the last. */
typedef struct task {
    void *(*fn)(void *);
    void *arg;
    pthread_barrier_t *go;
} task;

static void *trampoline(void *p)
{
    task *t = p;
    pthread_barrier_wait(t->go);
    return t->fn(t->arg);
}

static double run_threads(int T, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t th[MAX_T];
    task tk[MAX_T];
    pthread_barrier_t go;
    double t0;
    /* This thread runs the first share itself: with as many threads as
     * cores, a timer thread of its own could be descheduled while the
     * others run, and time only their end. */
    pthread_barrier_init(&go, NULL, (unsigned)T);
    for (int i = 1; i < T; i++) {
        tk[i] = (task){fn, (char *)args + (size_t)i * arg_size, &go};
        if (pthread_create(&th[i], NULL, trampoline, &tk[i]) != 0) {
            fprintf(stderr, "ceiling: pthread_create failed\n");
            exit(1);
        }
    }
    pthread_barrier_wait(&go);
    t0 = now();
    fn(args);
    for (int i = 1; i < T; i++)
        pthread_join(th[i], NULL);
    t0 = now() - t0;
    pthread_barrier_destroy(&go);
    return t0;
}

/* ------------------------------------------------------------------------- */
/* FMA peak                                                                  */
/* ------------------------------------------------------------------------- */

enum { CHAINS = 16 }; /* independent accumulators: past latency x ports */

typedef struct fma_arg {
    long iters;
    float sink;
} fma_arg;

#if CEIL_X86
__attribute__((target("avx512f"))) static void *fma_avx512(void *p)
{
    fma_arg *a = p;
    __m512 acc[CHAINS];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < a->iters; i++) {
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    }
    for (int c = 1; c < CHAINS; c++)
        acc[0] = _mm512_add_ps(acc[0], acc[c]);
    a->sink = _mm512_reduce_add_ps(acc[0]);
    return NULL;
}

/* 12 chains: with x and y, 14 of the 16 ymm registers. 16 chains would
 * spill two accumulators to the stack every trip, and the loop would then
 * measure the loads and stores (about half the FMA rate). */
enum { CHAINS_AVX2 = 12 };

__attribute__((target("avx2,fma"))) static void *fma_avx2(void *p)
{
    fma_arg *a = p;
    __m256 acc[CHAINS_AVX2];
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    float out[8];
    for (int c = 0; c < CHAINS_AVX2; c++)
        acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < a->iters; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS_AVX2; c++)
            acc[c] = _mm256_fmadd_ps(acc[c], x, y);
    }
    for (int c = 1; c < CHAINS_AVX2; c++)
        acc[0] = _mm256_add_ps(acc[0], acc[c]);
    _mm256_storeu_ps(out, acc[0]);
    a->sink = out[0];
    return NULL;
}
#endif

static void *fma_scalar(void *p)
{
    fma_arg *a = p;
    float acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = (float)c;
    for (long i = 0; i < a->iters; i++) {
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; c++)
            acc[c] = acc[c] * 0.999999f + 1e-7f;
    }
    a->sink = acc[0] + acc[CHAINS - 1];
    return NULL;
}

double ceiling_fma_gflops(int T, const char **width)
{
    void *(*fn)(void *) = fma_scalar;
    int lanes = 1, chains = CHAINS;
    fma_arg args[MAX_T];
    double best = 0;
    T = T < 1 ? 1 : T > MAX_T ? MAX_T : T;
#if CEIL_X86
    if (__builtin_cpu_supports("avx512f")) {
        fn = fma_avx512;
        lanes = 16;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        fn = fma_avx2;
        lanes = 8;
        chains = CHAINS_AVX2;
    }
#endif
    *width = lanes == 16 ? "avx512" : lanes == 8 ? "avx2" : "scalar";
    for (int rep = 0; rep < 7; rep++) { /* ~40 ms each: a moment's dip is not the peak */
        const long iters = 80000000 / lanes * 4;
        double t, gf;
        for (int i = 0; i < T; i++)
            args[i].iters = iters;
        t = run_threads(T, fn, args, sizeof *args);
        gf = 2.0 * lanes * chains * (double)iters * T / t * 1e-9;
        best = gf > best ? gf : best;
    }
    return best;
}

#if CEIL_X86
/* vdpbf16ps chains: 16 lanes x 2 products, a multiply and an add each. */
__attribute__((target("avx512f,avx512bf16"))) static void *dp_bf16(void *p)
{
    fma_arg *a = p;
    __m512 acc[CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80), /* (1.0, 1.0) */
        y = (__m512bh)_mm512_set1_epi32(0x33D633D6);            /* (1e-7, 1e-7) */
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < a->iters; i++) {
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
    }
    for (int c = 1; c < CHAINS; c++)
        acc[0] = _mm512_add_ps(acc[0], acc[c]);
    a->sink = _mm512_reduce_add_ps(acc[0]);
    return NULL;
}
#endif

bool ceiling_has_bf16(void)
{
#if CEIL_X86
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
           (a & (1u << 5)) != 0;
#else
    return false;
#endif
}

double ceiling_bf16_gflops(int T)
{
    fma_arg args[MAX_T];
    double best = 0;
    if (!ceiling_has_bf16())
        return 0;
    T = T < 1 ? 1 : T > MAX_T ? MAX_T : T;
#if CEIL_X86
    for (int rep = 0; rep < 7; rep++) {
        const long iters = 80000000 / 16 * 4 / 2; /* twice float32's work a trip */
        double t;
        for (int i = 0; i < T; i++)
            args[i].iters = iters;
        t = run_threads(T, dp_bf16, args, sizeof *args);
        const double gf = 64.0 * CHAINS * (double)iters * T / t * 1e-9;
        best = gf > best ? gf : best;
    }
#endif
    return best;
}

/* ------------------------------------------------------------------------- */
/* Read bandwidth                                                            */
/* ------------------------------------------------------------------------- */

typedef struct read_arg {
    const float *p;
    size_t n;
    float sink;
} read_arg;

#if CEIL_X86
__attribute__((target("avx512f"))) static void *read_avx512(void *p)
{
    read_arg *a = p;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 64 <= a->n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(a->p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(a->p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(a->p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(a->p + i + 48));
    }
    a->sink = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    return NULL;
}
#endif

#if CEIL_X86
/* AVX2: four independent sums of 8 floats. The plain loop below is not
 * vectorized at -O2 (its sums are float: no reassociation), and on an AVX2
 * EPYC read 14.5 GB/s a thread where the memory gives 35-40. */
__attribute__((target("avx2"))) static void *read_avx2(void *p)
{
    read_arg *a = p;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    float out[8];
    for (size_t i = 0; i + 32 <= a->n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(a->p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(a->p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(a->p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(a->p + i + 24));
    }
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    a->sink = out[0];
    return NULL;
}
#endif

static void *read_plain(void *p)
{
    read_arg *a = p;
    float s[16] = {0};
    for (size_t i = 0; i + 16 <= a->n; i += 16)
        for (int u = 0; u < 16; u++)
            s[u] += a->p[i + u];
    a->sink = s[0] + s[15];
    return NULL;
}

struct ceiling_reader {
    void *(*fn)(void *);
    float *buf;
    size_t n; /* floats, a multiple of 64 */
    int T;
    read_arg args[MAX_T];
};

ceiling_reader *ceiling_reader_new(int T, size_t bytes)
{
    const size_t n = bytes / sizeof(float) / 64 * 64;
    ceiling_reader *r = calloc(1, sizeof *r);
    if (r == NULL || posix_memalign((void **)&r->buf, 64, n * sizeof(float)) != 0) {
        fprintf(stderr, "ceiling: out of memory for %zu bytes\n", bytes);
        exit(1);
    }
    r->fn = read_plain;
    r->n = n;
    r->T = T < 1 ? 1 : T > MAX_T ? MAX_T : T;
    for (size_t i = 0; i < r->n; i++)
        r->buf[i] = (float)(i & 7);
#if CEIL_X86
    if (__builtin_cpu_supports("avx512f"))
        r->fn = read_avx512;
    else if (__builtin_cpu_supports("avx2"))
        r->fn = read_avx2;
#endif
    for (int i = 0; i < r->T; i++) { /* slices of whole 64-float blocks */
        const size_t b0 = r->n / 64 * (size_t)i / (size_t)r->T;
        const size_t b1 = r->n / 64 * (size_t)(i + 1) / (size_t)r->T;
        r->args[i].p = r->buf + b0 * 64;
        r->args[i].n = (b1 - b0) * 64;
    }
    return r;
}

double ceiling_reader_pass(ceiling_reader *r)
{
    const double t = run_threads(r->T, r->fn, r->args, sizeof r->args[0]);
    return (double)r->n * sizeof(float) / t * 1e-9;
}

void ceiling_reader_free(ceiling_reader *r)
{
    if (r != NULL)
        free(r->buf);
    free(r);
}

double ceiling_read_gbs(int T, size_t bytes, int reps)
{
    ceiling_reader *r = ceiling_reader_new(T, bytes);
    double best = 0;
    for (int i = 0; i < reps; i++) {
        const double gbs = ceiling_reader_pass(r);
        best = gbs > best ? gbs : best;
    }
    ceiling_reader_free(r);
    return best;
}

size_t ceiling_past_llc(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t want = l3 > 0 ? 4 * (size_t)l3 : 0;
    return want > ((size_t)1 << 30) ? want : (size_t)1 << 30;
}

const char *ceiling_cpu_model(void)
{
    static char model[128] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    if (f == NULL)
        return model;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c != NULL) {
                snprintf(model, sizeof model, "%s", c + 2);
                model[strcspn(model, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
    return model;
}
