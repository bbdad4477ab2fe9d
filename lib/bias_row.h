/* bias_row.h - the row kernels of the logit biases (lib/bias_row.c): what
 * ALiBi, T5, Shaw (its query and key terms) and a caller's bias add to a
 * row of logits, and Shaw's value term, written to vectorize.
 *
 * Rows are nk logits of one query at position qp against keys at positions
 * kpos[0..nk). `unit` says the positions are consecutive (kpos[j] ==
 * kpos[0] + j, the default), when a lookup by relative position is three
 * runs: the clipped left end, a contiguous slice, the clipped right end.
 */
#ifndef PA_BIAS_ROW_H
#define PA_BIAS_ROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* row[j] -= m * (qp - kpos[j]), or m * |qp - kpos[j]| when symmetric. The
 * differences must fit int32 (the caller checks the positions). */
void pa__row_alibi(float *row, const int32_t *kpos, int32_t n, int32_t qp, float m, bool symmetric);

/* row[j] += tab[|qp - kpos[j]|]: KERPLE's or Sandwich's bias by distance;
 * every distance must index tab. Any int32 positions; with unit ones the
 * table is read as two contiguous runs. */
void pa__row_add_dist(float *row, const int32_t *kpos, int32_t n, int32_t qp, const float *tab,
                      bool unit);

/* row[j] += (float)(slope * psi[qp - kpos[j]] * inv + icpt): FIRE on one
 * of its MLP's linear segments (lib/fire.c); every qp - kpos[j] must index
 * psi (so fit int32). */
void pa__row_fire(float *row, const int32_t *kpos, int32_t n, int32_t qp, const double *psi,
                  double inv, double slope, double icpt);

/* row[j] += (float)(slope * psi[-j] + icpt): the same for consecutive keys,
 * psi pointing at the first key's distance (distances fall along the row)
 * and slope already divided by the row's normaliser. */
void pa__row_fire_unit(float *row, int32_t n, const double *psi, double slope, double icpt);

/* row[j] += src[j]. */
void pa__row_add(float *row, const float *src, int32_t n);

/* row[j] += tab[clamp(kpos[j] - qp, -md, md) + md], tab [2*md + 1]: a T5
 * bias or Shaw's q.rel_k by relative position. Positions within 2^30. */
void pa__row_add_rel(float *row, const int32_t *kpos, int32_t n, int32_t qp, const float *tab,
                     int32_t md, bool unit);

/* row[j] += kr[(idx_j - lo) * ld + j], idx_j = clamp(kpos[j] - qp, -md, md)
 * + md, or clamp(qp - kpos[j], -md, md) + md when reverse: Shaw's key term
 * scale * k_j . rel_k[idx], held by table row (kr's rows lo .. of the
 * table, its columns the keys from this row's first). Any int32 positions;
 * every idx_j - lo must be a row of kr. */
void pa__row_add_rel_key(float *row, const int32_t *kpos, int32_t n, int32_t qp, const float *kr,
                         size_t ld, int32_t lo, int32_t md, bool reverse, bool unit);

/* bins[clamp(kpos[j] - qp, -md, md) + md] += p[j]: a row's probabilities
 * summed by relative position (Shaw's values are then bins . rel_v). */
void pa__row_bin_rel(const float *p, const int32_t *kpos, int32_t n, int32_t qp, float *bins,
                     int32_t md, bool unit);

#endif
