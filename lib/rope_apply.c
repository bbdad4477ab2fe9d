/* rope_apply.c - the rotation of rotary position embedding: pa_rope_apply
 * turns rows of q or k by the cos/sin tables of pa_rope_cos_sin (rope.c),
 * and pa__rope_rotate_one turns one row in double, for the analyses.
 *
 * Built at -O2 and not cloned for AVX2 or AVX-512: GCC's vectorizer makes
 * vfmaddsub of a rotation's pairs where the CPU has FMA, which would round
 * each output once where this C rounds twice, so the bits would depend on
 * the CPU (rope.c's tables are cloned; see there).
 */
#include "internal.h"

#include <math.h>
#include <string.h>

/* The kernels work in blocks of BLOCK pairs with a constant-count inner loop,
 * which GCC and Clang vectorize even at -O2 (where GCC's very-cheap cost model
 * refuses loops that need a scalar epilogue), then finish with a scalar tail.
 * Each has an out-of-place form (x and out restrict) and an in-place form. */
#define BLOCK 8

/* NeoX: pairs (i, i+h); x0/x1 and o0/o1 are the two halves of a row. */
static inline void rot_neox(const float *restrict x0, const float *restrict x1, float *restrict o0,
                            float *restrict o1, const float *restrict c, const float *restrict s,
                            size_t h)
{
    size_t i = 0;
    for (; i + BLOCK <= h; i += BLOCK) {
        for (size_t k = 0; k < BLOCK; k++) {
            float a = x0[i + k], b = x1[i + k];
            o0[i + k] = a * c[i + k] - b * s[i + k];
            o1[i + k] = b * c[i + k] + a * s[i + k];
        }
    }
    for (; i < h; i++) {
        float a = x0[i], b = x1[i];
        o0[i] = a * c[i] - b * s[i];
        o1[i] = b * c[i] + a * s[i];
    }
}

/* In place: lo = row, hi = row + h are disjoint halves, so both may be restrict. */
static inline void rot_neox_inplace(float *restrict lo, float *restrict hi, const float *restrict c,
                                    const float *restrict s, size_t h)
{
    size_t i = 0;
    for (; i + BLOCK <= h; i += BLOCK) {
        for (size_t k = 0; k < BLOCK; k++) {
            float a = lo[i + k], b = hi[i + k];
            lo[i + k] = a * c[i + k] - b * s[i + k];
            hi[i + k] = b * c[i + k] + a * s[i + k];
        }
    }
    for (; i < h; i++) {
        float a = lo[i], b = hi[i];
        lo[i] = a * c[i] - b * s[i];
        hi[i] = b * c[i] + a * s[i];
    }
}

/* GPT-J: pairs (2i, 2i+1). */
static inline void rot_gptj(const float *restrict x, float *restrict o, const float *restrict c,
                            const float *restrict s, size_t h)
{
    size_t i = 0;
    for (; i + BLOCK <= h; i += BLOCK) {
        for (size_t k = 0; k < BLOCK; k++) {
            float a = x[2 * (i + k)], b = x[2 * (i + k) + 1];
            o[2 * (i + k)] = a * c[i + k] - b * s[i + k];
            o[2 * (i + k) + 1] = b * c[i + k] + a * s[i + k];
        }
    }
    for (; i < h; i++) {
        float a = x[2 * i], b = x[2 * i + 1];
        o[2 * i] = a * c[i] - b * s[i];
        o[2 * i + 1] = b * c[i] + a * s[i];
    }
}

/* In place: each pair is read before it is written and no two pairs overlap. */
static inline void rot_gptj_inplace(float *restrict p, const float *restrict c,
                                    const float *restrict s, size_t h)
{
    size_t i = 0;
    for (; i + BLOCK <= h; i += BLOCK) {
        for (size_t k = 0; k < BLOCK; k++) {
            float a = p[2 * (i + k)], b = p[2 * (i + k) + 1];
            p[2 * (i + k)] = a * c[i + k] - b * s[i + k];
            p[2 * (i + k) + 1] = b * c[i + k] + a * s[i + k];
        }
    }
    for (; i < h; i++) {
        float a = p[2 * i], b = p[2 * i + 1];
        p[2 * i] = a * c[i] - b * s[i];
        p[2 * i + 1] = b * c[i] + a * s[i];
    }
}

void pa_rope_apply(const pa_rope *r, int32_t head_dim, int32_t n, int32_t heads,
                   const float *cos_tab, const float *sin_tab, const float *x, float *out)
{
    if (n <= 0 || heads <= 0)
        return;
    size_t D = (size_t)head_dim;
    size_t rd = (size_t)pa_rope_rotary_dim(r, head_dim);
    size_t h = rd / 2;
    size_t rest = D - rd;
    bool gptj = r->layout == PA_ROPE_LAYOUT_GPTJ;

    for (size_t t = 0; t < (size_t)n; t++) {
        const float *c = cos_tab + t * h;
        const float *s = sin_tab + t * h;
        for (size_t hd = 0; hd < (size_t)heads; hd++) {
            size_t off = (t * (size_t)heads + hd) * D;
            if (out == x) {
                float *p = out + off;
                if (gptj)
                    rot_gptj_inplace(p, c, s, h);
                else
                    rot_neox_inplace(p, p + h, c, s, h);
            } else {
                if (gptj)
                    rot_gptj(x + off, out + off, c, s, h);
                else
                    rot_neox(x + off, x + off + h, out + off, out + off + h, c, s, h);
                if (rest > 0)
                    memcpy(out + off + rd, x + off + rd, rest * sizeof(float));
            }
        }
    }
}

void pa__rope_rotate_one(const pa_rope *r, int32_t head_dim, const double *inv_freq,
                         double attention_factor, int32_t position, const float *x, double *out)
{
    int32_t rd = pa_rope_rotary_dim(r, head_dim);
    int32_t h = rd / 2;
    for (int32_t i = 0; i < h; i++) {
        double theta = (double)position * inv_freq[i];
        double c = cos(theta) * attention_factor, s = sin(theta) * attention_factor;
        int32_t i0 = r->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i : i;
        int32_t i1 = r->layout == PA_ROPE_LAYOUT_GPTJ ? 2 * i + 1 : i + h;
        double a = x[i0], b = x[i1];
        out[i0] = a * c - b * s;
        out[i1] = b * c + a * s;
    }
    for (int32_t d = rd; d < head_dim; d++)
        out[d] = x[d];
}
