/* ref_rope2d.c - see ref_rope2d.h. */
#include "ref_rope2d.h"

#include <math.h>
#include <stdlib.h>

bool ref_rope2d_coord(const pa_rope2d *r, const int32_t *pos2, int n, int t, double *row,
                      double *col)
{
    double y, x;
    if (t < r->prefix_tokens)
        return false;
    if (pos2 != NULL) {
        y = pos2[t];
        x = pos2[n + t];
    } else {
        y = (t - r->prefix_tokens) / r->grid_cols;
        x = (t - r->prefix_tokens) % r->grid_cols;
    }
    /* timm: t = arange(s) + grid_offset; then t / feat_shape * ref_feat_shape */
    y += r->grid_offset;
    x += r->grid_offset;
    if (r->ref_rows > 0) {
        y = y / r->grid_rows * r->ref_rows;
        x = x / r->grid_cols * r->ref_cols;
    }
    *row = y;
    *col = x;
    return true;
}

void ref_rope2d_apply(const pa_rope2d *r, int head_dim, double row, double col, double *v)
{
    const int half = head_dim / 2, nb = head_dim / 4;
    double *ang = malloc((size_t)half * sizeof *ang), *out = malloc((size_t)head_dim * sizeof *out);
    if (ang == NULL || out == NULL)
        abort();
    if (r->variant == PA_ROPE2D_PIXTRAL) {
        /* freqs = 1 / theta^(arange(0, dim, 2) / dim); freqs_h = freqs[::2],
         * freqs_w = freqs[1::2]; cat([h * freqs_h, w * freqs_w]). */
        for (int j = 0; j < half; j++) {
            double f = 1.0 / pow(r->base, (2.0 * j) / head_dim);
            if (j % 2 == 0)
                ang[j / 2] = row * f;
            else
                ang[nb + j / 2] = col * f;
        }
    } else {
        /* bands = 1 / temperature^(arange(0, nb) / nb); the grid [.., 2]
         * times bands [nb], flattened axis-major: row bands, then columns. */
        for (int k = 0; k < nb; k++) {
            double band = 1.0 / pow(r->base, (double)k / nb);
            ang[k] = row * band;
            ang[nb + k] = col * band;
        }
    }
    for (int p = 0; p < half; p++) {
        /* timm rot() / view_as_complex: neighbours (2p, 2p+1); neox: halves. */
        int i0 = r->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * p : p;
        int i1 = r->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * p + 1 : p + half;
        double c = cos(ang[p]), s = sin(ang[p]);
        out[i0] = v[i0] * c - v[i1] * s;
        out[i1] = v[i1] * c + v[i0] * s;
    }
    for (int d = 0; d < head_dim; d++)
        v[d] = out[d];
    free(ang);
    free(out);
}
