/* ref_cope.h - plain double-precision reference of CoPE (Golovneva et al.
 * 2024) for the unit tests, written from the formula of
 * facebookresearch/RAM projects/cope/src/cope/context_position.py
 * (ContextPosSelfAttn.forward, key_cope = key, no value gates). It shares
 * no code with lib/cope.c.
 */
#ifndef PA_REF_COPE_H
#define PA_REF_COPE_H

#include "posattn.h"

#include <stdbool.h>

/* One query row's CoPE terms for head h over Lk keys: gate_logit[j] =
 * scale q.k_j (before softcap), visible[j] whether any mask leaves key j
 * to the query, q [D] the query as attention sees it. Writes the gated
 * positions p[j] (may be NULL) and the position term term[j] as the logit
 * gains it: scale * interp (default) or interp (nodiv). */
void ref_cope_row(const pa_cope *c, int D, int h, double scale, const double *q,
                  const double *gate_logit, const bool *visible, int Lk, double *p, double *term);

#endif
