/* ref_encodings.h - plain double-precision references for the positional
 * encodings, written from the papers and the reference implementations
 * (tensor2tensor, fairseq, Press et al.'s ALiBi code, Hugging Face T5), not
 * from lib/. The unit tests of lib/ and of attention compare against these.
 * Outputs are caller-allocated; nothing here fails.
 */
#ifndef PA_REF_ENCODINGS_H
#define PA_REF_ENCODINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "posattn.h"

/* Vaswani et al. 2017: out [n, dim], out[p, 2i] = sin(pos / base^(2i/dim)),
 * out[p, 2i+1] = cos(same); with odd dim the last column is sin of i = dim/2. */
void ref_sinusoidal_interleaved(const int32_t *positions, int32_t n, int32_t dim, double base,
                                double *out);
/* tensor2tensor get_timing_signal_1d (min_timescale 1, max_timescale base):
 * out [n, dim] = [sin(pos * inv_ts) | cos(pos * inv_ts)], zero-padded to an
 * odd dim. */
void ref_sinusoidal_concat(const int32_t *positions, int32_t n, int32_t dim, double base,
                           double *out);
/* Dispatches on s->layout. out [n, dim]. */
void ref_sinusoidal(const pa_sinusoidal *s, const int32_t *positions, int32_t n, int32_t dim,
                    double *out);

/* Learned table lookup: out [n, cols] = table[positions[i] + offset, :].
 * Positions must be in range (the reference does not check). */
void ref_learned(const float *table, int32_t cols, int32_t offset, const int32_t *positions,
                 int32_t n, double *out);

/* Press et al. get_slopes(n) from the ALiBi repository, transliterated
 * literally (max_bias 8 built in): out [num_heads]. */
void ref_alibi_get_slopes(int32_t num_heads, double *out);
/* ggml's max_bias form: m0 = 2^(-max_bias/n), m1 = 2^(-max_bias/(2n)),
 * n = 2^floor(log2 H); slope h = m0^(h+1) for h < n, else m1^(2(h-n)+1).
 * out [num_heads]. */
void ref_alibi_slopes(int32_t num_heads, double max_bias, double *out);
/* ALiBi logit bias: -slope * (qpos - kpos), or -slope * |qpos - kpos|. */
double ref_alibi_bias(double slope, int32_t qpos, int32_t kpos, bool symmetric);

/* KERPLE as chijames/KERPLE megatron/mpu/layers.py computes one entry, with
 * the reference's names: ParallelKerpleLog  -bias_p * log(1 + bias_a * diff)
 * and ParallelKerplePower -bias_a * diff^bias_p, diff = |qpos - kpos| (the
 * reference's tril(qpos - kpos) on the pairs a causal mask keeps). In
 * posattn's terms r1 is the multiplier (log's bias_p, power's bias_a) and
 * r2 the inner parameter (log's bias_a, power's bias_p). */
double ref_kerple_log(double bias_p, double bias_a, double diff);
double ref_kerple_power(double bias_a, double bias_p, double diff);

/* NVIDIA NeMo SandwichRelativePositionEmbedding.forward for one entry
 * (head h of num_attention_heads, relative position |qpos - kpos|), in
 * double where NeMo uses float32:
 *   inv_freq = 1 / 10000^(2 arange(1, hidden_size/2 + 1) / hidden_size)
 *   bias     = sum cos(rel * inv_freq)
 *   scaled   = (bias - hidden_size/2) / ((h + 1) * 8 / num_attention_heads) */
double ref_sandwich(int32_t hidden_size, int32_t num_attention_heads, int32_t h, double rel);

/* FIRE as mcleish7/arithmetic's FIRE.forward computes one entry (head h of
 * num_heads, query position i, key position j), in double where the peer
 * uses float32, the MLP Linear(1, hidden) -> ReLU -> Linear(hidden, H)
 * evaluated unit by unit:
 *   threshold  = |L|                          (|L_multiplier * init_L|)
 *   rel        = log(|c (i - j)| + 1)
 *   normaliser = log(|c max(i, threshold)| + 1)
 *   x          = rel / (normaliser + eps)
 *   bias       = b2[h] + sum_k w2[k * H + h] relu(w1[k] x + b1[k])
 * w2 is [hidden, H] (posattn's layout: mlp.2.weight transposed). */
double ref_fire(double c, double L, double eps, const float *w1, const float *b1, int32_t hidden,
                const float *w2, const float *b2, int32_t num_heads, int32_t h, int64_t i,
                int64_t j);

/* Hugging Face T5Attention._relative_position_bucket for one relative
 * position (kpos - qpos), with torch's float32 arithmetic in the log branch.
 * Parameters must be valid (max_exact >= 1, max_distance > max_exact). */
int64_t ref_t5_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                      int64_t max_distance);

/* Shaw et al.: clip(rel, -K, K) + K, K >= 0. */
int64_t ref_shaw_index(int64_t relative_position, int64_t max_relative_position);

/* Gram matrix sim [n, n] = p p^T for p [n, dim], in double. */
void ref_gram(const double *p, int32_t n, int32_t dim, double *sim);

#endif
