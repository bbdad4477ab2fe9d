/* ref_cope.c - see ref_cope.h. Straight from the formula, in double:
 *   gates = sigmoid(logits / sqrt(D)) * mask
 *   positions = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos - 1)
 *   pos_logits_fixed = q . pos_emb
 *   pos_logits = fixed[ceil(p)] (p - floor(p)) + fixed[floor(p)] (1 - (p - floor(p)))
 *   logits = (q.k + pos_logits) / sqrt(D)   (nodiv: q.k / sqrt(D) + pos_logits)
 */
#include "ref_cope.h"

#include <math.h>
#include <stdlib.h>

void ref_cope_row(const pa_cope *c, int D, int h, double scale, const double *q,
                  const double *gate_logit, const bool *visible, int Lk, double *p, double *term)
{
    const int npos = c->npos_max;
    const float *E = c->pos_emb + (c->pos_emb_heads == 1 ? 0 : (size_t)h * npos * D);
    double *fixed = calloc((size_t)npos, sizeof *fixed);
    double *pos = calloc((size_t)Lk + 1, sizeof *pos);
    double sum = 0.0;
    if (fixed == NULL || pos == NULL)
        abort();
    for (int f = 0; f < npos; f++)
        for (int d = 0; d < D; d++)
            fixed[f] += q[d] * (double)E[(size_t)f * D + d];
    /* The reverse cumulative sum of the masked gates, then the clamp. */
    for (int j = Lk - 1; j >= 0; j--) {
        double g = visible[j] ? 1.0 / (1.0 + exp(-gate_logit[j])) : 0.0;
        sum += g;
        pos[j] = fmin(sum, (double)(npos - 1));
    }
    for (int j = 0; j < Lk; j++) {
        double fl = floor(pos[j]), ce = ceil(pos[j]), w = pos[j] - fl;
        double v = fixed[(int)ce] * w + fixed[(int)fl] * (1.0 - w);
        if (p != NULL)
            p[j] = pos[j];
        term[j] = c->nodiv ? v : scale * v;
    }
    free(fixed);
    free(pos);
}
