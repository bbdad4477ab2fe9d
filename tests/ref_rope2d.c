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
    } else if (r->merge_size > 1) {
        /* Hugging Face Qwen2-VL rot_pos_emb: arange(h) expanded over w,
         * reshape(h/m, m, w/m, m).permute(0, 2, 1, 3).flatten(): tokens
         * come block row, block column, then row and column in the block. */
        const int m = r->merge_size, want = t - r->prefix_tokens;
        int idx = 0;
        y = x = -1;
        for (int bh = 0; bh < r->grid_rows / m; bh++)
            for (int bw = 0; bw < r->grid_cols / m; bw++)
                for (int ih = 0; ih < m; ih++)
                    for (int iw = 0; iw < m; iw++, idx++)
                        if (idx == want) {
                            y = bh * m + ih;
                            x = bw * m + iw;
                        }
    } else {
        y = (t - r->prefix_tokens) / r->grid_cols;
        x = (t - r->prefix_tokens) % r->grid_cols;
    }
    if (r->variant == PA_ROPE2D_DINOV3) {
        /* dinov3 RopePositionEmbedding.forward: arange(0.5, H) / H
         * ("separate"; max(H, W) or min(H, W) otherwise), then 2c - 1. */
        double nh = r->grid_rows, nw = r->grid_cols;
        if (r->normalize == PA_ROPE2D_NORMALIZE_MAX)
            nh = nw = r->grid_rows > r->grid_cols ? r->grid_rows : r->grid_cols;
        else if (r->normalize == PA_ROPE2D_NORMALIZE_MIN)
            nh = nw = r->grid_rows < r->grid_cols ? r->grid_rows : r->grid_cols;
        *row = 2.0 * ((y + 0.5) / nh) - 1.0;
        *col = 2.0 * ((x + 0.5) / nw) - 1.0;
        return true;
    }
    if (r->in_pixels) { /* timm: t = linspace(-1, 1, steps=s); then / feat_shape * ref */
        y = r->grid_rows == 1 ? -1.0 : -1.0 + 2.0 * y / (r->grid_rows - 1);
        x = r->grid_cols == 1 ? -1.0 : -1.0 + 2.0 * x / (r->grid_cols - 1);
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

void ref_rope2d_apply(const pa_rope2d *r, int head_dim, int head, int num_heads, double row,
                      double col, double *v)
{
    const int half = head_dim / 2, nb = head_dim / 4;
    double *ang = malloc((size_t)half * sizeof *ang), *out = malloc((size_t)head_dim * sizeof *out);
    if (ang == NULL || out == NULL)
        abort();
    if (r->variant == PA_ROPE2D_MIXED) {
        for (int p = 0; p < half; p++)
            ang[p] = row * r->freqs[(size_t)head * half + p] +
                     col * r->freqs[((size_t)num_heads + head) * half + p];
    } else if (r->variant == PA_ROPE2D_PIXTRAL) {
        /* freqs = 1 / theta^(arange(0, dim, 2) / dim); freqs_h = freqs[::2],
         * freqs_w = freqs[1::2]; cat([h * freqs_h, w * freqs_w]). */
        for (int j = 0; j < half; j++) {
            double f = 1.0 / pow(r->base, (2.0 * j) / head_dim);
            if (j % 2 == 0)
                ang[j / 2] = row * f;
            else
                ang[nb + j / 2] = col * f;
        }
    } else if (r->variant == PA_ROPE2D_DINOV3) {
        /* periods = base^(2 arange(D/4) / (D/2)); angles = 2 pi coords /
         * periods, [HW, 2, D/4] flattened: the row's, then the column's. */
        for (int k = 0; k < nb; k++) {
            double period = pow(r->base, 2.0 * k / (head_dim / 2));
            ang[k] = 2.0 * 3.14159265358979323846 * row / period;
            ang[nb + k] = 2.0 * 3.14159265358979323846 * col / period;
        }
    } else if (r->in_pixels) {
        /* pixel_freq_bands: linspace(1, max_res / 2, nb) or 2 **
         * linspace(0, log2(max_res) - 1, nb), times pi */
        const double mx = r->max_res != 0.0 ? r->max_res : 224.0;
        for (int k = 0; k < nb; k++) {
            const double lo = r->linear_bands ? 1.0 : 0.0;
            const double hi = r->linear_bands ? mx / 2.0 : log(mx) / log(2.0) - 1.0;
            const double t = nb == 1 ? lo : lo + (hi - lo) * k / (nb - 1);
            const double band = 3.14159265358979323846 * (r->linear_bands ? t : pow(2.0, t));
            ang[k] = row * band;
            ang[nb + k] = col * band;
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
