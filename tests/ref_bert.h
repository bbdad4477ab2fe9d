/* ref_bert.h - Hugging Face BERT's relative position attention, written
 * from transformers' modeling_bert.py (BertSelfAttention.forward, v4.40,
 * position_embedding_type "relative_key" and "relative_key_query") in
 * double, for the tests of the shaw scheme. It shares nothing with lib/ or
 * with ref_attention.c: no clipping, HF's own positions and its additive
 * padding mask, as the model computes them.
 */
#ifndef PA_REF_BERT_H
#define PA_REF_BERT_H

#include <stdbool.h>
#include <stdint.h>

/* One sequence after the projections, every head its own keys (BERT has no
 * grouped-query attention): q [Lq, H, D], k [Lk, H, D], v [Lk, H, D], the
 * layout of posattn (HF's [B, H, L, D] transposed).
 *   position_ids_l = key_length - 1 for every query when use_cache (HF's
 *                    step with a cache), else arange(Lq)
 *   position_ids_r = arange(Lk)
 *   distance       = position_ids_l - position_ids_r
 *   E              = distance_embedding[distance + max_position_embeddings - 1]
 *                    (the table is [2 max_position_embeddings - 1, D]; every
 *                    index must lie inside it, as nn.Embedding demands)
 *   scores         = q.k + einsum("bhld,lrd->bhlr", q, E)
 *                    [+ einsum("bhrd,lrd->bhlr", k, E) when key_query]
 *   scores         = scores / sqrt(D) + (1 - attention_mask) * finfo(float32).min
 *   probs          = softmax(scores); out = probs v
 * attention_mask [Lk] of 1 (token) / 0 (padding), or NULL for none. out
 * [Lq, H, D] and probs [H, Lq, Lk] may each be NULL. */
void ref_bert_relative(const float *q, const float *k, const float *v, int Lq, int Lk, int H, int D,
                       const float *distance_embedding, int max_position_embeddings, bool key_query,
                       bool use_cache, const uint8_t *attention_mask, double *out, double *probs);

#endif
