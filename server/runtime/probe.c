/* probe.c - see probe.h. bench/ceiling.c's method (which server code may
 * not link: bench/ is not part of the daemon), with short runs under a
 * time budget: the best of a few runs of about 2 ms each.
 */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "runtime/probe.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PROBE_X86 1
#endif

enum { MAX_T = 64 };

/* The measuring loops run uninstrumented under the sanitizers (make asan,
 * make tsan), which would otherwise make every start of a sanitized server
 * slower by most of a second and measure only themselves. They touch no
 * memory but their own share. */
#if defined(__GNUC__)
#define PROBE_RAW __attribute__((no_sanitize("address", "thread", "undefined")))
#else
#define PROBE_RAW
#endif

/* The budget of each phase (ms); the read buffer: up to 64 MiB, touched by
 * 4 MiB chunks while the touch budget lasts (at least 16 MiB), and flushed
 * from the caches before each pass (flush()), so that it reads memory
 * though it may be smaller than the last-level cache. */
#define FMA_MS 8.0
#define READ_MS 8.0
#define TOUCH_MS 20.0
#define RUN_MS 2.0
#define READ_BYTES ((size_t)64 << 20)
#define TOUCH_CHUNK ((size_t)4 << 20)
#define TOUCH_MIN ((size_t)16 << 20)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------- */
/* Threads started together                                                  */
/* ------------------------------------------------------------------------- */

typedef struct share {
    void (*fn)(struct share *);
    pthread_mutex_t *gate;
    pthread_barrier_t *go;
    long iters;          /* FMA: loop trips */
    const float *p;      /* read: the slice */
    size_t n;            /* its floats */
    volatile float sink; /* keeps the result alive */
} share;

static void *trampoline(void *p)
{
    share *s = p;
    /* The gate opens once every thread is started and the barrier is set
     * for as many as were. */
    pthread_mutex_lock(s->gate);
    pthread_mutex_unlock(s->gate);
    pthread_barrier_wait(s->go);
    s->fn(s);
    return NULL;
}

/* Share i's thread on the i-th of this process's CPUs after the one this
 * thread runs on. A new thread starts on its parent's CPU, and the
 * scheduler takes a few milliseconds to move it: longer than a run here, so
 * unpinned the shares of a run often took turns on one CPU and the
 * workers' figure read as one thread's (92 against 183 GFLOP/s on 2 CPUs,
 * one start in four). Unpinned when the CPUs cannot be read. */
static void pin(pthread_attr_t *attr, int i)
{
    cpu_set_t allowed, one;
    int cpus[CPU_SETSIZE], n = 0, cur = sched_getcpu(), at = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed)) {
            if (c == cur)
                at = n;
            cpus[n++] = c;
        }
    if (n < 2)
        return;
    CPU_ZERO(&one);
    CPU_SET(cpus[(at + i) % n], &one);
    pthread_attr_setaffinity_np(attr, sizeof one, &one);
}

/* Runs fn on T shares at once; returns the wall time (ms) from the start to
 * the last share's end. This thread runs share 0 itself, so that a timer
 * thread of its own cannot be descheduled while the others run. -1 when a
 * thread could not start (those that did run their share, untimed). */
static double run_shares(int T, void (*fn)(share *), share *sh)
{
    pthread_t th[MAX_T];
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    pthread_barrier_t go;
    double t0;
    int started = 1;
    pthread_mutex_lock(&gate);
    for (int i = 0; i < T; i++) {
        sh[i].fn = fn;
        sh[i].gate = &gate;
        sh[i].go = &go;
    }
    for (int i = 1; i < T; i++, started++) {
        pthread_attr_t attr;
        int rc;
        pthread_attr_init(&attr);
        pin(&attr, i);
        rc = pthread_create(&th[i], &attr, trampoline, &sh[i]);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
    }
    pthread_barrier_init(&go, NULL, (unsigned)started);
    pthread_mutex_unlock(&gate);
    pthread_barrier_wait(&go);
    t0 = now_ms();
    fn(&sh[0]);
    for (int i = 1; i < started; i++)
        pthread_join(th[i], NULL);
    t0 = now_ms() - t0;
    pthread_barrier_destroy(&go);
    pthread_mutex_destroy(&gate);
    return started < T ? -1 : t0;
}

/* ------------------------------------------------------------------------- */
/* FMA peak                                                                  */
/* ------------------------------------------------------------------------- */

/* Independent accumulators: past the FMA latency times its ports, within
 * the registers (16 of 32 zmm; 12 of 16 ymm, leaving room for x and y). */
enum { CH512 = 16, CH256 = 12, CHSCALAR = 12 };

#if PROBE_X86
PROBE_RAW __attribute__((target("avx512f"))) static void fma_avx512(share *s)
{
    __m512 acc[CH512];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < CH512; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < s->iters; i++) {
#pragma GCC unroll 16
        for (int c = 0; c < CH512; c++)
            acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    }
    for (int c = 1; c < CH512; c++)
        acc[0] = _mm512_add_ps(acc[0], acc[c]);
    s->sink = _mm512_reduce_add_ps(acc[0]);
}

PROBE_RAW __attribute__((target("avx2,fma"))) static void fma_avx2(share *s)
{
    __m256 acc[CH256];
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    float out[8];
    for (int c = 0; c < CH256; c++)
        acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < s->iters; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CH256; c++)
            acc[c] = _mm256_fmadd_ps(acc[c], x, y);
    }
    for (int c = 1; c < CH256; c++)
        acc[0] = _mm256_add_ps(acc[0], acc[c]);
    _mm256_storeu_ps(out, acc[0]);
    s->sink = out[0];
}

/* AVX-512 BF16: vdpbf16ps chains, 64 FLOPs an instruction (16 lanes x 2
 * products x multiply and add), compute_dtype bf16's ceiling. */
PROBE_RAW __attribute__((target("avx512f,avx512bf16"))) static void dp_bf16(share *s)
{
    __m512 acc[CH512];
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80), /* (1.0, 1.0) */
        y = (__m512bh)_mm512_set1_epi32(0x33D633D6);            /* (1e-7, 1e-7) */
    for (int c = 0; c < CH512; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < s->iters; i++) {
#pragma GCC unroll 16
        for (int c = 0; c < CH512; c++)
            acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
    }
    for (int c = 1; c < CH512; c++)
        acc[0] = _mm512_add_ps(acc[0], acc[c]);
    s->sink = _mm512_reduce_add_ps(acc[0]);
}
#endif

PROBE_RAW static void fma_scalar(share *s)
{
    float acc[CHSCALAR];
    for (int c = 0; c < CHSCALAR; c++)
        acc[c] = (float)c;
    for (long i = 0; i < s->iters; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHSCALAR; c++)
            acc[c] = acc[c] * 0.999999f + 1e-7f;
    }
    s->sink = acc[0] + acc[CHSCALAR - 1];
}

/* GFLOP/s of T threads running fn (flops_per_iter a trip): a short run
 * sizes the runs to about RUN_MS, then the best of as many as fit in
 * budget_ms (at least two). */
static double loop_gflops(int T, double budget_ms, void (*fn)(share *), double flops_per_iter)
{
    double best = 0, t, end;
    long iters = 20000;
    share sh[MAX_T];
    memset(sh, 0, sizeof sh);
    end = now_ms() + budget_ms;
    for (int i = 0; i < T; i++)
        sh[i].iters = iters;
    t = run_shares(T, fn, sh);
    if (t < 0)
        return 0;
    if (t > 0) { /* size the runs: RUN_MS each, within [1e4, 1e8] trips */
        double want = (double)iters * RUN_MS / t;
        iters = want < 1e4 ? 10000 : want > 1e8 ? 100000000 : (long)want;
    }
    for (int rep = 0; rep < 2 || (rep < 12 && now_ms() < end); rep++) {
        double gf;
        for (int i = 0; i < T; i++)
            sh[i].iters = iters;
        t = run_shares(T, fn, sh);
        if (t <= 0)
            break;
        gf = flops_per_iter * (double)iters * T / (t * 1e6);
        best = gf > best ? gf : best;
    }
    return best;
}

/* The float32 FMA peak at the widest vector width the CPU has. */
static double fma_gflops(int T, double budget_ms, const char **width)
{
    void (*fn)(share *) = fma_scalar;
    double flops_per_iter = 2.0 * CHSCALAR;
#if PROBE_X86
    if (__builtin_cpu_supports("avx512f")) {
        fn = fma_avx512;
        flops_per_iter = 2.0 * 16 * CH512;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        fn = fma_avx2;
        flops_per_iter = 2.0 * 8 * CH256;
    }
#endif
    *width = fn == fma_scalar ? "scalar" : flops_per_iter > 2.0 * 8 * CH256 ? "avx512" : "avx2";
    return loop_gflops(T, budget_ms, fn, flops_per_iter);
}

/* The bf16 dot-product peak where the library's bf16 products run
 * vdpbf16ps (pa_bf16_path), else 0: elsewhere they run as float32 FMAs,
 * whose peak is fma_gflops's. */
static double bf16_gflops(int T, double budget_ms)
{
#if PROBE_X86
    if (strcmp(pa_bf16_path(), "avx512_bf16") == 0)
        return loop_gflops(T, budget_ms, dp_bf16, 64.0 * CH512);
#else
    (void)T;
    (void)budget_ms;
#endif
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Read bandwidth                                                            */
/* ------------------------------------------------------------------------- */

#if PROBE_X86
PROBE_RAW __attribute__((target("avx512f"))) static void read_avx512(share *s)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 64 <= s->n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(s->p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(s->p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(s->p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(s->p + i + 48));
    }
    s->sink = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

PROBE_RAW __attribute__((target("avx2"))) static void read_avx2(share *s)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    float out[8];
    for (size_t i = 0; i + 32 <= s->n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(s->p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(s->p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(s->p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(s->p + i + 24));
    }
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    s->sink = out[0];
}
#endif

PROBE_RAW static void read_plain(share *s)
{
    float acc[16] = {0};
    for (size_t i = 0; i + 16 <= s->n; i += 16)
        for (int u = 0; u < 16; u++)
            acc[u] += s->p[i + u];
    s->sink = acc[0] + acc[15];
}

/* Writes the share's slice: its pages are touched by the thread that will
 * read them, in parallel. */
PROBE_RAW static void touch(share *s)
{
    float *p = (float *)(uintptr_t)s->p;
    for (size_t i = 0; i < s->n; i++)
        p[i] = (float)(i & 7);
}

static void slices(share *sh, int T, const float *buf, size_t n)
{
    for (int i = 0; i < T; i++) { /* whole 64-float blocks each */
        const size_t b0 = n / 64 * (size_t)i / (size_t)T, b1 = n / 64 * (size_t)(i + 1) / (size_t)T;
        sh[i].p = buf + b0 * 64;
        sh[i].n = (b1 - b0) * 64;
    }
}

/* Evicts buf (n floats) from every cache level, so that the next pass
 * reads memory however small the buffer is: a buffer past the last-level
 * cache would need first touches that cost far more than the probe's
 * budget (12-20 us a 4 KiB page on these machines). */
PROBE_RAW static void flush(const float *buf, size_t n)
{
#if PROBE_X86
    for (size_t i = 0; i < n; i += 16)
        _mm_clflush(buf + i);
    _mm_mfence();
#else
    (void)buf, (void)n; /* elsewhere the buffer's size alone: it may read caches */
#endif
}

/* GB/s of T threads each reading its slice of buf (n floats), flushed from
 * the caches before each pass: the best of at least two passes and as many
 * as fit in budget_ms. */
static double read_gbps(int T, const float *buf, size_t n, double budget_ms)
{
    void (*fn)(share *) = read_plain;
    share sh[MAX_T];
    double best = 0, end = now_ms() + budget_ms;
#if PROBE_X86
    if (__builtin_cpu_supports("avx512f"))
        fn = read_avx512;
    else if (__builtin_cpu_supports("avx2"))
        fn = read_avx2;
#endif
    memset(sh, 0, sizeof sh);
    slices(sh, T, buf, n);
    for (int rep = 0; rep < 2 || (rep < 12 && now_ms() < end); rep++) {
        double t, gbs;
        flush(buf, n);
        t = run_shares(T, fn, sh);
        if (t <= 0)
            break;
        gbs = (double)(n / 64 * 64) * sizeof(float) / (t * 1e6);
        best = gbs > best ? gbs : best;
    }
    return best;
}

/* ------------------------------------------------------------------------- */
/* The machine                                                               */
/* ------------------------------------------------------------------------- */

static void cpu_model(char *out, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(out, cap, "unknown");
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c != NULL && c[1] != '\0') {
                snprintf(out, cap, "%s", c + 2);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

/* The 1-minute load average, or -1: a probe on a busy machine reads low. */
static double load_average(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL)
        return -1;
    if (fscanf(f, "%lf", &l) != 1)
        l = -1;
    fclose(f);
    return l;
}

void srv_probe_none(srv_machine *m, int workers)
{
    memset(m, 0, sizeof *m);
    m->workers = workers < 1 ? 1 : workers;
    m->threads = 1;
    m->width = "";
    m->load_1m = load_average();
    cpu_model(m->cpu, sizeof m->cpu);
}

void srv_probe_run(srv_machine *m, int workers)
{
    const double t0 = now_ms();
    const int T = workers < 1 ? 1 : workers > MAX_T ? MAX_T : workers;
    float *buf;
    size_t touched = 0;
    share sh[MAX_T];

    srv_probe_none(m, workers);
    m->threads = T;
    m->gflops_1 = fma_gflops(1, FMA_MS, &m->width);
    m->gflops_n = T > 1 ? fma_gflops(T, FMA_MS, &m->width) : m->gflops_1;
    m->bf16_gflops_1 = bf16_gflops(1, FMA_MS);
    m->bf16_gflops_n = T > 1 ? bf16_gflops(T, FMA_MS) : m->bf16_gflops_1;
    if (m->bf16_gflops_n < m->bf16_gflops_1)
        m->bf16_gflops_n = m->bf16_gflops_1;
    buf = mmap(NULL, READ_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf != MAP_FAILED) {
        const double touch_end = now_ms() + TOUCH_MS;
#ifdef MADV_HUGEPAGE
        /* Fewer, larger first touches where the kernel has huge pages. */
        madvise(buf, READ_BYTES, MADV_HUGEPAGE);
#endif
        /* First touches cost 12-20 us a 4 KiB page on these machines: the
         * buffer grows by chunks until its size or the touch budget is
         * reached, and the passes read what was touched. */
        while (touched < READ_BYTES && (touched < TOUCH_MIN || now_ms() < touch_end)) {
            memset(sh, 0, sizeof sh);
            slices(sh, T, buf + touched / sizeof(float), TOUCH_CHUNK / sizeof(float));
            if (run_shares(T, touch, sh) < 0)
                break;
            touched += TOUCH_CHUNK;
        }
        m->read_bytes = touched;
        if (touched >= TOUCH_MIN) {
            m->read_gbps_n = read_gbps(T, buf, touched / sizeof(float), READ_MS);
            m->read_gbps_1 =
                T > 1 ? read_gbps(1, buf, touched / sizeof(float), READ_MS) : m->read_gbps_n;
        }
        munmap(buf, READ_BYTES);
    }
    /* More threads never do less: a lower figure is a neighbour's doing. */
    m->gflops_n = m->gflops_n > m->gflops_1 ? m->gflops_n : m->gflops_1;
    m->read_gbps_n = m->read_gbps_n > m->read_gbps_1 ? m->read_gbps_n : m->read_gbps_1;
    m->probe_ms = now_ms() - t0;
    m->probed = m->gflops_1 > 0 && m->gflops_n > 0 && m->read_gbps_1 > 0 && m->read_gbps_n > 0;
}

void srv_probe_write_metrics(FILE *f, const srv_machine *m)
{
    if (m == NULL || !m->probed)
        return;
    fprintf(f, "# HELP posattn_machine_gflops The machine's peak in GFLOP/s, measured at "
               "start-up, by thread count: float32 FMAs (dtype f32) and, where the CPU has "
               "AVX-512 BF16, bf16 dot products (dtype bf16).\n"
               "# TYPE posattn_machine_gflops gauge\n");
    fprintf(f, "posattn_machine_gflops{dtype=\"f32\",threads=\"1\"} %.3f\n", m->gflops_1);
    if (m->threads > 1)
        fprintf(f, "posattn_machine_gflops{dtype=\"f32\",threads=\"%d\"} %.3f\n", m->threads,
                m->gflops_n);
    if (m->bf16_gflops_1 > 0) {
        fprintf(f, "posattn_machine_gflops{dtype=\"bf16\",threads=\"1\"} %.3f\n", m->bf16_gflops_1);
        if (m->threads > 1)
            fprintf(f, "posattn_machine_gflops{dtype=\"bf16\",threads=\"%d\"} %.3f\n", m->threads,
                    m->bf16_gflops_n);
    }
    fprintf(f, "# HELP posattn_machine_read_gbps The machine's read bandwidth past the caches in "
               "GB/s, measured at start-up, by thread count.\n"
               "# TYPE posattn_machine_read_gbps gauge\n");
    fprintf(f, "posattn_machine_read_gbps{threads=\"1\"} %.3f\n", m->read_gbps_1);
    if (m->threads > 1)
        fprintf(f, "posattn_machine_read_gbps{threads=\"%d\"} %.3f\n", m->threads, m->read_gbps_n);
}
