/* cpu.h - which kernels run (lib/cpu.c).
 *
 * The AVX-512 kernels (tile, softmax, decode) run where the CPU has
 * AVX-512F, the AVX2 ones where it has AVX2 and FMA, the portable ones
 * (plain C, OpenBLAS) everywhere else. The environment variable
 * POSATTN_KERNEL, read at the first call, forces the portable ones
 * ("portable") or the AVX2 ones on a CPU with AVX-512 ("avx2"), so that
 * tests and benchmarks can run each path on one machine.
 */
#ifndef PA_CPU_H
#define PA_CPU_H

#include <stdbool.h>

bool pa__cpu_avx512(void);

/* AVX2 with F16C, under the same switch (POSATTN_KERNEL=portable turns it
 * off): the 16-bit keys and values (kv_dtype) are widened with it in
 * registers. */
bool pa__cpu_avx2(void);

/* AVX-512 BF16 (vdpbf16ps, CPUID leaf 7 subleaf 1, EAX bit 5) with
 * AVX-512F, BW and VL (the packings' 16-bit masked stores), under the same
 * switch: the bf16 products of compute_dtype (lib/tile_bf16.c). */
bool pa__cpu_avx512_bf16(void);

/* AVX2 with FMA (and F16C), under the same switch: compute_dtype bf16's
 * products elsewhere, with the bits vdpbf16ps gives, the tile products
 * (lib/tile.c) and the decode kernel's row kernels, whose AVX2 variants
 * compute exactly what the portable C ones do (the same fused
 * multiply-adds in the same order), so the bits of a decode do not depend
 * on it. */
bool pa__cpu_avx2_fma(void);

/* The kernels run with flush-to-zero: a result below float's smallest
 * normal (1.2e-38) becomes 0 instead of a subnormal, which x86 cores
 * compute in microcode at ~100 times the cost (ALiBi's far keys, whose
 * probabilities times small values land there, hit it row after row).
 * pa__fp_enter sets it on this thread and returns the state to restore
 * with pa__fp_leave; elsewhere both do nothing. */
unsigned pa__fp_enter(void);
void pa__fp_leave(unsigned saved);

#endif
