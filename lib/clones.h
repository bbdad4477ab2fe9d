/* clones.h - PA__CLONES: a function compiled three times, for AVX-512, for
 * AVX2 and for the baseline, the copy picked once by the CPU when the
 * program starts (GCC's target_clones; one copy elsewhere, and under the
 * sanitizers, whose runtime starts after the pick). For plain loops that
 * GCC vectorizes at -O3 (Makefile). A loop whose products and sums the
 * vectorizer may fuse (vfmaddsub from a pair of rotations, say) gives other
 * bits in the AVX copies: check the object for FMA instructions.
 */
#ifndef PA_CLONES_H
#define PA_CLONES_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&       \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define PA__CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PA__CLONES
#endif

#endif
