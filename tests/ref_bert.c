/* ref_bert.c - see ref_bert.h. Each step is one line of HF's forward. */
#include "ref_bert.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

void ref_bert_relative(const float *q, const float *k, const float *v, int Lq, int Lk, int H, int D,
                       const float *distance_embedding, int max_position_embeddings, bool key_query,
                       bool use_cache, const uint8_t *attention_mask, double *out, double *probs)
{
    const int rows = 2 * max_position_embeddings - 1;
    double *scores = calloc((size_t)Lk, sizeof *scores);
    if (scores == NULL)
        abort();
    for (int h = 0; h < H; h++) {
        for (int l = 0; l < Lq; l++) {
            const float *ql = q + ((size_t)l * H + h) * D;
            const long position_ids_l = use_cache ? Lk - 1 : l;
            double mx = -INFINITY, sum = 0.0;
            for (int r = 0; r < Lk; r++) {
                const float *kr = k + ((size_t)r * H + h) * D;
                const long position_ids_r = r;
                const long distance = position_ids_l - position_ids_r;
                const long index = distance + max_position_embeddings - 1;
                const float *E;
                double s = 0.0;
                if (index < 0 || index >= rows)
                    abort(); /* nn.Embedding raises on an index outside the table */
                E = distance_embedding + (size_t)index * D;
                for (int d = 0; d < D; d++) {
                    s += (double)ql[d] * kr[d];                  /* q.k */
                    s += (double)ql[d] * E[d];                   /* bhld,lrd->bhlr */
                    s += key_query ? (double)kr[d] * E[d] : 0.0; /* bhrd,lrd->bhlr */
                }
                s = s / sqrt((double)D);
                if (attention_mask != NULL)
                    s += (1.0 - attention_mask[r]) * -FLT_MAX; /* torch.finfo(float32).min */
                scores[r] = s;
                mx = s > mx ? s : mx;
            }
            for (int r = 0; r < Lk; r++) {
                scores[r] = exp(scores[r] - mx);
                sum += scores[r];
            }
            for (int r = 0; r < Lk; r++)
                scores[r] /= sum;
            if (probs != NULL)
                for (int r = 0; r < Lk; r++)
                    probs[((size_t)h * Lq + l) * Lk + r] = scores[r];
            if (out != NULL)
                for (int d = 0; d < D; d++) {
                    double acc = 0.0;
                    for (int r = 0; r < Lk; r++)
                        acc += scores[r] * v[((size_t)r * H + h) * D + d];
                    out[((size_t)l * H + h) * D + d] = acc;
                }
        }
    }
    free(scores);
}
