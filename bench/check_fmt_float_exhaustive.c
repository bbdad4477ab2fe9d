/* check_fmt_float_exhaustive.c - checks srv_fmt_float (server/fmt_float.c)
 * for every one of the 2^32 float32 bit patterns. Not a benchmark and not
 * part of make test (about 17 minutes on 2 cores); run it after touching
 * fmt_float.c:
 *
 *   make check-fmt-float      (or by hand:)
 *   cc -std=c11 -O2 -pthread -Iserver bench/check_fmt_float_exhaustive.c \
 *      server/fmt_float.c -o check_fmt_float && ./check_fmt_float [--threads N]
 *      [--from 0xHEX --to 0xHEX]
 *
 * For each finite positive float v (negative ones must print as "-" followed
 * by the text of -v) it checks that the text
 *   - is a JSON number of at most 15 characters, NUL-terminated, with the
 *     returned length, and nothing written past SRV_FMT_FLOAT_BUF bytes;
 *   - reads back as exactly v through glibc's strtof (correctly rounded)
 *     and through strtod followed by a cast to float (what cJSON and most
 *     JSON readers do; it rounds twice);
 *   - is shortest: with D 10^K the text's value, D having n >= 2 digits and
 *     no trailing zero, neither floor(D/10) 10^(K+1) nor (floor(D/10) + 1)
 *     10^(K+1) reads back as v both ways. That suffices: the decimals that
 *     read back as v one way form an interval (both readings are monotonic),
 *     so do those that do both ways, and that interval holds v and D 10^K;
 *     any decimal of fewer than n digits inside it forces one of those two
 *     neighbours of D 10^K on the grid of n-1 digit numbers to be inside too.
 * Infinities and NaN must print as "inf", "-inf", "nan".
 *
 * With --diff it checks instead that srv_fmt_float writes, byte for byte,
 * the same text as the formatter before the fast printer
 * (tests/ref_fmt_float.c, which passed the checks above for all 2^32 inputs)
 * for every bit pattern, and that srv_fmt_float_array writes the same as
 * concatenating those texts (null for non-finite values), in blocks of 1024
 * patterns with mixed signs. About 8 minutes on one thread:
 *
 *   make check-fmt-float-diff   (or: ... --diff --threads 1)
 */
#define _POSIX_C_SOURCE 200809L
#include "codec/fmt_float.h"
#include "json_number.h"
#include "ref_fmt_float.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SLACK = 16, MAX_REPORTS = 20, DIFF_BLOCK = 1024 };

typedef struct job {
    uint64_t from, to; /* positive bit patterns [from, to) */
    uint64_t checked, failures, shorter_checks;
    int reports;
    bool first; /* prints progress */
    bool diff;  /* compare with ref_fmt_float instead */
} job;

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Prints one case, at most MAX_REPORTS per thread. */
static void print_case(job *j, const char *label, uint32_t bits, const char *text, const char *why)
{
    if (j->reports++ >= MAX_REPORTS)
        return;
    pthread_mutex_lock(&report_lock);
    printf("%s 0x%08" PRIx32 " (%.9g): \"%s\": %s\n", label, bits, (double)from_bits(bits), text,
           why);
    fflush(stdout);
    pthread_mutex_unlock(&report_lock);
}

static void report(job *j, uint32_t bits, const char *text, const char *why)
{
    j->failures++;
    print_case(j, "FAIL", bits, text, why);
}

/* Formats into a buffer with a guard zone; checks length, NUL and guard. */
static bool format_checked(job *j, uint32_t bits, char *text)
{
    char buf[SRV_FMT_FLOAT_BUF + SLACK];
    memset(buf, 0x5A, sizeof buf);
    int n = srv_fmt_float(from_bits(bits), buf);
    for (int i = SRV_FMT_FLOAT_BUF; i < (int)sizeof buf; i++) {
        if (buf[i] != 0x5A) {
            memcpy(text, buf, SRV_FMT_FLOAT_BUF);
            text[SRV_FMT_FLOAT_BUF - 1] = '\0';
            report(j, bits, text, "wrote past SRV_FMT_FLOAT_BUF bytes");
            return false;
        }
    }
    if (n < 1 || n > SRV_FMT_FLOAT_BUF - 1 || buf[n] != '\0' || (int)strlen(buf) != n) {
        buf[SRV_FMT_FLOAT_BUF - 1] = '\0';
        strcpy(text, buf);
        report(j, bits, text, "returned length does not match the NUL-terminated text");
        return false;
    }
    memcpy(text, buf, (size_t)n + 1);
    return true;
}

/* Whether "<d>e<k>" reads back as v through strtof and through strtod plus
 * a cast (built by hand: snprintf would double the run time). */
static bool reads_back_as(uint64_t d, int k, float v)
{
    char s[48], *p = s + 24, *q = p;
    do {
        *--q = (char)('0' + d % 10);
        d /= 10;
    } while (d);
    *p++ = 'e';
    if (k < 0) {
        *p++ = '-';
        k = -k;
    }
    char *e = p;
    do {
        *p++ = (char)('0' + k % 10);
        k /= 10;
    } while (k);
    for (char *a = e, *b = p - 1; a < b; a++, b--) {
        char c = *a;
        *a = *b;
        *b = c;
    }
    *p = '\0';
    return to_bits(strtof(q, NULL)) == to_bits(v) && to_bits((float)strtod(q, NULL)) == to_bits(v);
}

static void check_one(job *j, uint32_t bits)
{
    char text[SRV_FMT_FLOAT_BUF + SLACK], neg[SRV_FMT_FLOAT_BUF + SLACK];
    float v = from_bits(bits);
    uint32_t nbits = bits | 0x80000000u;
    if (!format_checked(j, bits, text) || !format_checked(j, nbits, neg))
        return;
    j->checked += 2;

    if (!isfinite(v)) {
        const char *want = isnan(v) ? "nan" : "inf";
        const char *want_neg = isnan(v) ? "nan" : "-inf";
        if (strcmp(text, want) != 0)
            report(j, bits, text, "non-finite text");
        if (strcmp(neg, want_neg) != 0)
            report(j, nbits, neg, "non-finite text");
        return;
    }
    if (neg[0] != '-' || strcmp(neg + 1, text) != 0)
        report(j, nbits, neg, "is not \"-\" followed by the text of its absolute value");
    if (!is_json_number(text)) {
        report(j, bits, text, "not a JSON number");
        return;
    }
    char *end = NULL;
    float back = strtof(text, &end);
    if (*end != '\0' || to_bits(back) != bits) {
        report(j, bits, text, "does not read back as the same float");
        return;
    }
    /* The server (cJSON) and most JSON libraries read a double and narrow
     * it: a decimal within 2^-54 of a midpoint between two floats would
     * round twice. */
    if (to_bits((float)strtod(text, NULL)) != bits) {
        report(j, bits, text, "strtod then (float) reads another float (double rounding)");
        return;
    }
    uint64_t d;
    int k;
    int n = decompose(text, &d, &k);
    if (n >= 2) {
        j->shorter_checks++;
        uint64_t a = d / 10;
        if (reads_back_as(a, k + 1, v) || reads_back_as(a + 1, k + 1, v))
            report(j, bits, text, "not shortest: a decimal with fewer digits reads back too");
    }
}

/* --diff: the patterns [from, from + count) (count <= DIFF_BLOCK), each
 * positive and negative, against the reference; then all of them, signs
 * mixed, through srv_fmt_float_array. */
static void diff_block(job *j, uint32_t from, uint32_t count)
{
    static _Thread_local float vals[DIFF_BLOCK];
    static _Thread_local char want[DIFF_BLOCK * (SRV_FMT_FLOAT_MAX + 1) + 2 + SRV_FMT_FLOAT_BUF];
    static _Thread_local char got[DIFF_BLOCK * (SRV_FMT_FLOAT_MAX + 1) + 2 + SRV_FMT_FLOAT_BUF];
    char *w = want;
    *w++ = '[';
    for (uint32_t i = 0; i < count; i++) {
        uint32_t b = from + i;
        for (int sign = 0; sign < 2; sign++) {
            uint32_t bits = b | (uint32_t)sign << 31;
            char text[SRV_FMT_FLOAT_BUF + SLACK], ref[SRV_FMT_FLOAT_BUF + SLACK];
            if (!format_checked(j, bits, text))
                continue;
            int nr = ref_fmt_float(from_bits(bits), ref);
            j->checked++;
            if ((int)strlen(text) != nr || memcmp(text, ref, (size_t)nr + 1) != 0)
                print_case(j, "DIFF", bits, text, ref), j->failures++;
        }
        /* The sign pattern repeats every 7 values, so pairs meet all four
         * sign combinations. */
        uint32_t bits = b | (uint32_t)((0x5Au >> (i % 7)) & 1) << 31;
        vals[i] = from_bits(bits);
        if (i)
            *w++ = ',';
        if (isfinite(vals[i])) {
            w += ref_fmt_float(vals[i], w);
        } else {
            memcpy(w, "null", 4);
            w += 4;
        }
    }
    *w++ = ']';
    *w = '\0';
    size_t len = srv_fmt_float_array(vals, count, got);
    if (len != (size_t)(w - want) || memcmp(got, want, len + 1) != 0) {
        j->failures++;
        print_case(j, "ARRAY", from, "", "srv_fmt_float_array differs from the reference texts");
    }
}

static double now_seconds(void);

static void *run(void *arg)
{
    job *j = arg;
    if (j->diff) {
        double t0 = now_seconds();
        uint64_t total = j->to - j->from, done = 0, next = total / 16;
        for (uint64_t b = j->from; b < j->to; b += DIFF_BLOCK) {
            uint64_t n = j->to - b < DIFF_BLOCK ? j->to - b : DIFF_BLOCK;
            diff_block(j, (uint32_t)b, (uint32_t)n);
            done += n;
            if (j->first && done >= next) {
                pthread_mutex_lock(&report_lock);
                printf("  thread 0: %2.0f%% after %.0f s\n", 100.0 * (double)done / (double)total,
                       now_seconds() - t0);
                fflush(stdout);
                pthread_mutex_unlock(&report_lock);
                next += total / 16;
            }
        }
        return NULL;
    }
    double t0 = now_seconds();
    uint64_t step = (j->to - j->from) / 16 + 1;
    for (uint64_t b = j->from; b < j->to; b++) {
        check_one(j, (uint32_t)b);
        if ((b - j->from) % step == step - 1 && j->first) {
            pthread_mutex_lock(&report_lock);
            printf("  thread 0: %2.0f%% after %.0f s\n",
                   100.0 * (double)(b - j->from + 1) / (double)(j->to - j->from),
                   now_seconds() - t0);
            fflush(stdout);
            pthread_mutex_unlock(&report_lock);
        }
    }
    return NULL;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = 2;
    bool diff = false;
    uint64_t from = 0, to = 0x80000000u; /* positive patterns; each brings its negative */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--diff") == 0)
            diff = true;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc)
            from = strtoull(argv[++i], NULL, 0) & 0x7FFFFFFFu;
        else if (strcmp(argv[i], "--to") == 0 && i + 1 < argc)
            to = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: %s [--diff] [--threads N] [--from 0xHEX] [--to 0xHEX]\n",
                    argv[0]);
            return 2;
        }
    }
    if (to > 0x80000000u)
        to = 0x80000000u;
    if (threads < 1 || threads > 256 || from >= to) {
        fprintf(stderr, "bad --threads or empty range\n");
        return 2;
    }

    /* Interleaved blocks would balance better, but the cost per value hardly
     * depends on the exponent, so contiguous slices are fine. */
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    if (!jobs || !tids)
        return 2;
    double t0 = now_seconds();
    uint64_t span = to - from;
    for (int t = 0; t < threads; t++) {
        jobs[t].from = from + span * (uint64_t)t / (uint64_t)threads;
        jobs[t].to = from + span * (uint64_t)(t + 1) / (uint64_t)threads;
        jobs[t].first = t == 0;
        jobs[t].diff = diff;
        if (pthread_create(&tids[t], NULL, run, &jobs[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 2;
        }
    }
    uint64_t checked = 0, failures = 0, shorter = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        checked += jobs[t].checked;
        failures += jobs[t].failures;
        shorter += jobs[t].shorter_checks;
    }
    double secs = now_seconds() - t0;
    if (diff)
        printf("check_fmt_float_exhaustive --diff: bit patterns 0x%08" PRIx64 "..0x%08" PRIx64
               " and their negatives: %" PRIu64 " compared with ref_fmt_float, and all through"
               " srv_fmt_float_array, %" PRIu64 " failures, %.1f s on %d threads\n",
               from, to - 1, checked, failures, secs, threads);
    else
        printf("check_fmt_float_exhaustive: bit patterns 0x%08" PRIx64 "..0x%08" PRIx64
               " and their negatives: %" PRIu64 " formatted, %" PRIu64
               " shortest-length proofs, %" PRIu64 " failures, %.1f s on %d threads\n",
               from, to - 1, checked, shorter, failures, secs, threads);
    free(jobs);
    free(tids);
    return failures ? 1 : 0;
}
