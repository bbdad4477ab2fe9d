/* ceiling.h - the machine's own limits, measured in the run that uses them
 * (bench/ceiling.c): every attention figure in make bench is a fraction of
 * the FMA peak, every decode figure a fraction of the read bandwidth.
 */
#ifndef PA_BENCH_CEILING_H
#define PA_BENCH_CEILING_H

#include <stdbool.h>
#include <stddef.h>

/* fp32 GFLOP/s of T threads running independent fused multiply-add chains
 * in registers, at the widest vector width the CPU has (AVX-512, else
 * AVX2+FMA, else scalar): the arithmetic ceiling, the best of 7 runs of
 * ~40 ms. *width gets "avx512", "avx2" or "scalar". On a shared host a
 * caller measures it before and after its rows and keeps the larger. */
double ceiling_fma_gflops(int T, const char **width);

/* Whether the CPU has AVX-512 BF16 (vdpbf16ps). */
bool ceiling_has_bf16(void);

/* GFLOP/s of T threads running independent vdpbf16ps chains (each
 * instruction 32 bf16 products summed into 16 float32 lanes: 64 FLOPs),
 * the ceiling of compute_dtype bf16; 0 without AVX-512 BF16, where the
 * library's bf16 products run as float32 FMAs (ceiling_fma_gflops). */
double ceiling_bf16_gflops(int T);

/* GB/s (1e9 bytes) of T threads summing disjoint slices of one buffer of
 * `bytes` bytes (touched first, so no page faults are timed): the best of
 * reps passes. Past the last-level cache it is the memory's read
 * bandwidth. */
double ceiling_read_gbs(int T, size_t bytes, int reps);

/* The same read, one pass at a time over a buffer kept between passes: for
 * a caller that times its own work between passes, so that each of its
 * calls has a ceiling from the same moment (a shared host's bandwidth moves
 * by 2x within seconds). ceiling_reader_new exits on out of memory. */
typedef struct ceiling_reader ceiling_reader;
ceiling_reader *ceiling_reader_new(int T, size_t bytes);
double ceiling_reader_pass(ceiling_reader *r); /* GB/s of one pass */
void ceiling_reader_free(ceiling_reader *r);

/* A buffer size well past the last-level cache: 4x its size as the C
 * library reports it, at least 1 GiB. */
size_t ceiling_past_llc(void);

/* The CPU's model name from /proc/cpuinfo (or "unknown"). */
const char *ceiling_cpu_model(void);

#endif
