/* cpu.h - which kernels run (lib/cpu.c).
 *
 * The AVX-512 kernels (tile, softmax, decode) run where the CPU has
 * AVX-512F; the portable ones (plain C, OpenBLAS) everywhere else, or when
 * the environment variable POSATTN_KERNEL is "portable" at the first call,
 * so that tests and benchmarks can run each path on one machine.
 */
#ifndef PA_CPU_H
#define PA_CPU_H

#include <stdbool.h>

bool pa__cpu_avx512(void);

#endif
