/* softmax.h - the row kernels of the online softmax: a vectorizable exp, the
 * max / exp-and-sum passes over a row of logits, and the row scale and fill
 * around them (lib/softmax.c).
 *
 * Private to lib/, and a test-only interface: bench/bench_attention.c checks
 * pa__row_softcap's tanh on every float.
 */
#ifndef PA_SOFTMAX_H
#define PA_SOFTMAX_H

#include "tile.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest value of row [n] (-inf for an empty or fully masked row). */
float pa__row_max(const float *row, int32_t n);

/* row[j] = exp(row[j] - m) in place, returns the sum. -inf entries give
 * exactly 0; NaN entries stay NaN (and make the sum NaN). Accuracy: within
 * 2 ulp of the exact exp (lib/softmax.c). */
float pa__row_exp_sum(float *row, int32_t n, float m);

/* pa__row_exp_sum, then the probabilities as pa__bf16_pack_probs(w, row,
 * n, lead, dst) packs them (compute_dtype bf16), in one pass where w is
 * PA__BF16_DPBF16: the same sum, row and dst either way. */
float pa__row_exp_sum_pairs(pa__bf16_way w, float *row, int32_t n, float m, int32_t lead,
                            uint32_t *dst);

/* pa__row_exp_sum, and over the same pass the sums the row statistics
 * need: *spl = sum_j p_j (row[j] - m) (entropy), *spd = sum_j p_j
 * |qpos - kpos[j]| (mean distance) and *spf = sum_j p_j [|qpos - kpos[j]| >
 * far] (far share), p_j = exp(row[j] - m); -inf entries add 0 to all.
 * The distance is |qpos - kpos[j]| exact in uint32, rounded once to float. */
float pa__row_exp_sum_stats(float *row, int32_t n, float m, const int32_t *kpos, int32_t qpos,
                            float far, float *spl, float *spd, float *spf);

/* row[j] = exp(row[j] - m) * scale, in place (for returned weights). */
void pa__row_exp_scale(float *row, int32_t n, float m, float scale);

/* dst[j] = src[j] * s (dst may be src): the rescale of a row's running
 * output when its max moves, and the final division by its sum. */
void pa__row_scale(float *dst, const float *src, int32_t n, float s);
/* pa__row_scale, true when every dst[j] is finite. */
bool pa__row_scale_finite(float *dst, const float *src, int32_t n, float s);

/* Whether every x[j] is finite (no inf, no NaN). */
bool pa__row_finite(const float *x, size_t n);

/* row[j] = v: masked ends of a row of logits. */
void pa__row_fill(float *row, int32_t n, float v);

/* row[j] = cap * tanh(row[j] / cap) (logit softcapping, cap > 0), in place;
 * -inf entries (already masked) stay -inf, NaN stays NaN, +-inf give +-cap.
 * Accuracy: within 3.2 ulp and 1.5e-7 cap of cap * tanh(row[j] / cap) (the
 * tanh within 1.32 ulp; row[j] * (1 / cap) and the product by cap round
 * too). The AVX-512 and portable code give the same bits. */
void pa__row_softcap(float *row, int32_t n, float cap);

/* row[j] = 1 / (1 + exp(-row[j])) in place (CoPE's gates); -inf entries
 * (hidden keys) give exactly 0, NaN stays NaN. */
void pa__row_sigmoid(float *row, int32_t n);

/* pa__row_max, pa__row_exp_sum, pa__row_exp_scale and pa__row_exp_sum_stats
 * written out for AVX2
 * and FMA (lib/softmax_avx2.c), with the bits of the C passes; the three
 * above call them where the CPU has both and not AVX-512 (lib/cpu.h), and
 * nothing else needs to. */
float pa__row_max_avx2(const float *row, int32_t n);
float pa__row_exp_sum_avx2(float *row, int32_t n, float m);
void pa__row_exp_scale_avx2(float *row, int32_t n, float m, float scale);
float pa__row_exp_sum_stats_avx2(float *row, int32_t n, float m, const int32_t *kpos, int32_t qpos,
                                 float far, float *spl, float *spd, float *spf);

#endif
