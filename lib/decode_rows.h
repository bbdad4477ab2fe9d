/* decode_rows.h - the row kernels of the decode kernel (lib/decode_rows.c):
 * the logits of a few query rows against up to four keys, and a run of
 * keys' probabilities times their values added into the rows' outputs.
 * Chosen once per call for the CPU (lib/cpu.h) and the keys' and values'
 * element type.
 *
 * Private to lib/, and a test-only interface: bench/bench_decode.c times
 * the kernels alone (the arithmetic a decode cannot go below);
 * tests/lib/test_decode_rows.c checks that a key's logit does not depend
 * on its grouping, and the other tests reach them through the decode
 * (tests/lib/test_attention_decode.c, test_kv16.c).
 */
#ifndef PA_DECODE_ROWS_H
#define PA_DECODE_ROWS_H

#include "posattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pa__row_ops {
    /* s[r * lds + t] = scale * q_r . k_t, q_r = q + r * d (n rows), k_t = k +
     * t * ldk (nk = 1 to 4 keys of d floats). */
    void (*dot)(const float *q, int32_t n, int32_t d, const float *k, size_t ldk, int32_t nk,
                float scale, float *s, size_t lds);
    /* o_r += sum_j P[r * ldp + j] V[j * ldv + c] over d columns c, for the
     * n rows o_r = o + r * ldo and nk keys j (in order; zero weights
     * skipped). */
    void (*pv)(float *o, size_t ldo, const float *P, size_t ldp, int32_t n, const float *V,
               size_t ldv, int32_t nk, int32_t d);
    /* The same over keys and values of the 16-bit type the ops were
     * picked for, with the float bits of the widened rows. */
    void (*dot16)(const float *q, int32_t n, int32_t d, const uint16_t *k, size_t ldk, int32_t nk,
                  float scale, float *s, size_t lds);
    void (*pv16)(float *o, size_t ldo, const float *P, size_t ldp, int32_t n, const uint16_t *V,
                 size_t ldv, int32_t nk, int32_t d);
    /* Key-major logits (the AVX-512 and AVX2 ops): the decode takes a
     * run's keys one at a time, every kv head's row of a key in turn (dot
     * with nk = 1, whose logits are those dot gives that key among four),
     * so k is read front to back, a key's rows of every head being one
     * contiguous row of k. Four rows 4 KiB apart read side by side, head
     * after head, left an AMD EPYC at 21 GB/s on one thread against 41 in
     * memory order (a decode of 32768 keys: 16.2 ms, key-major 11.0, with
     * AVX-512; 16.4-18.0 and 12.2-12.8 with AVX2). */
    bool key_major;
    /* Key-major over 16-bit keys (NULL where the ops have none): one
     * key's rows of `heads` kv heads in one call, for kv head i dot16 of
     * its n query rows q + i n d against the key row k + i d (nk = 1) into
     * s + i n lds: the same logits as dot16 head by head, without a call
     * and its checks per key and kv head. Before each head, the same
     * head's rows of a key further on are asked for, as the decode does
     * head by head: d elements from ka + i d and dv from va + i dv (either
     * NULL: none; the decode asks for key rows only where k is paged,
     * attention_decode.c).
     * For 16-bit keys the arithmetic is near the memory's time and this
     * call takes 15-20% off a decode; float32 keys, bound by the memory,
     * measured no better, and keep dot. */
    void (*dot_heads16)(const float *q, int32_t n, int32_t heads, int32_t d, const uint16_t *k,
                        const void *ka, const void *va, int32_t dv, float scale, float *s,
                        size_t lds);
} pa__row_ops;

/* Asks for the cache lines of [p, p + bytes) into L2 (p NULL: none): the
 * decode's look-ahead over key and value rows. */
static inline void pa__prefetch_span(const void *p, size_t bytes)
{
#if defined(__GNUC__)
    if (p != NULL)
        for (size_t i = 0; i < bytes; i += 64)
            __builtin_prefetch((const char *)p + i, 0, 2);
#else
    (void)p;
    (void)bytes;
#endif
}

/* The row kernels of this process for keys and values of type t (dot16
 * and pv16 are bf16's for PA_DTYPE_F32). */
pa__row_ops pa__row_ops_pick(pa_dtype t);

#endif
