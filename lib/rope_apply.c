/* rope_apply.c - the rotation of rotary position embedding: pa_rope_apply
 * turns rows of q or k by the cos/sin tables of pa_rope_cos_sin (rope.c),
 * and pa__rope_rotate_one turns one row in double, for the analyses.
 *
 * Every path computes each output as the C below does: two products, each
 * rounded, then their difference or sum, rounded (a * c - b * s; ISO C,
 * no contraction). The AVX-512 and AVX2 kernels do it in explicit
 * multiplies and adds, never a fused multiply-add, so a row's bits do not
 * depend on the CPU (tests/lib/test_rope_apply.c checks every path against
 * the two roundings). Plain C is left at -O2 and not cloned: GCC's
 * vectorizer makes vfmaddsub of a rotation's pairs where the CPU has FMA,
 * which would round each output once.
 */
#include "internal.h"

#include "cpu.h"
#include "lanes16.h"

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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PA_ROT_X86 1
#define PA_AVX512 __attribute__((target("avx512f")))
#define PA_AVX2 __attribute__((target("avx2")))

/* NeoX: o0 = x0 c - x1 s, o1 = x1 c + x0 s over h lanes. Each block is
 * loaded whole before it is stored, so out may be x (in place). Whole
 * blocks load without a mask: with every load masked, a rotation out of
 * place over memory ran at 15 GB/s against 36 (bench_rope, one thread, an
 * AMD EPYC Zen 5), though a plain copy loop reads as fast either way. */
PA_AVX512 static void rot_neox_avx512(const float *x0, const float *x1, float *o0, float *o1,
                                      const float *c, const float *s, size_t h)
{
    size_t i = 0;
    for (; i + 16 <= h; i += 16) {
        const __m512 a = _mm512_loadu_ps(x0 + i), b = _mm512_loadu_ps(x1 + i);
        const __m512 vc = _mm512_loadu_ps(c + i), vs = _mm512_loadu_ps(s + i);
        _mm512_storeu_ps(o0 + i, _mm512_sub_ps(_mm512_mul_ps(a, vc), _mm512_mul_ps(b, vs)));
        _mm512_storeu_ps(o1 + i, _mm512_add_ps(_mm512_mul_ps(b, vc), _mm512_mul_ps(a, vs)));
    }
    if (i < h) {
        const __mmask16 k = pa__lanes16((int32_t)(h - i));
        const __m512 a = _mm512_maskz_loadu_ps(k, x0 + i), b = _mm512_maskz_loadu_ps(k, x1 + i);
        const __m512 vc = _mm512_maskz_loadu_ps(k, c + i), vs = _mm512_maskz_loadu_ps(k, s + i);
        _mm512_mask_storeu_ps(o0 + i, k, _mm512_sub_ps(_mm512_mul_ps(a, vc), _mm512_mul_ps(b, vs)));
        _mm512_mask_storeu_ps(o1 + i, k, _mm512_add_ps(_mm512_mul_ps(b, vc), _mm512_mul_ps(a, vs)));
    }
}

/* GPT-J: pairs (2i, 2i + 1) of x, 8 in a register: each value times its
 * pair's cos, plus its partner (the pair swapped) times the pair's sin,
 * negated in the even lanes: a c + b (-s) rounds as a c - b s does. */
PA_AVX512 static void rot_gptj_avx512(const float *x, float *o, const float *c, const float *s,
                                      size_t h)
{
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    /* The sign bit of the even lanes (xor of floats needs AVX-512 DQ). */
    const __m512i neg_even =
        _mm512_set_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0,
                         INT32_MIN, 0, INT32_MIN, 0, INT32_MIN);
    for (size_t i = 0; i < h; i += 8) {
        const size_t n = h - i < 8 ? h - i : 8;
        const __mmask16 k = pa__lanes16((int32_t)(2 * n));
        const __m512 v = n == 8 ? _mm512_loadu_ps(x + 2 * i) : _mm512_maskz_loadu_ps(k, x + 2 * i);
        const __m512 c8 = n == 8 ? _mm512_castps256_ps512(_mm256_loadu_ps(c + i))
                                 : _mm512_maskz_loadu_ps(pa__lanes16((int32_t)n), c + i);
        const __m512 s8 = n == 8 ? _mm512_castps256_ps512(_mm256_loadu_ps(s + i))
                                 : _mm512_maskz_loadu_ps(pa__lanes16((int32_t)n), s + i);
        const __m512 vc = _mm512_permutexvar_ps(dup, c8);
        const __m512 vs = _mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(_mm512_permutexvar_ps(dup, s8)), neg_even));
        const __m512 y =
            _mm512_add_ps(_mm512_mul_ps(v, vc), _mm512_mul_ps(_mm512_permute_ps(v, 0xB1), vs));
        if (n == 8)
            _mm512_storeu_ps(o + 2 * i, y);
        else
            _mm512_mask_storeu_ps(o + 2 * i, k, y);
    }
}

/* rot_neox_avx512 in 8 lanes, the last h % 8 pairs in C. */
PA_AVX2 static void rot_neox_avx2(const float *x0, const float *x1, float *o0, float *o1,
                                  const float *c, const float *s, size_t h)
{
    size_t i = 0;
    for (; i + 8 <= h; i += 8) {
        const __m256 a = _mm256_loadu_ps(x0 + i), b = _mm256_loadu_ps(x1 + i);
        const __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
        _mm256_storeu_ps(o0 + i, _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs)));
        _mm256_storeu_ps(o1 + i, _mm256_add_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, vs)));
    }
    for (; i < h; i++) {
        const float a = x0[i], b = x1[i];
        o0[i] = a * c[i] - b * s[i];
        o1[i] = b * c[i] + a * s[i];
    }
}

/* rot_gptj_avx512 in 8 lanes (4 pairs), the last h % 4 pairs in C. */
PA_AVX2 static void rot_gptj_avx2(const float *x, float *o, const float *c, const float *s,
                                  size_t h)
{
    const __m256i dup = _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0);
    const __m256 neg_even = _mm256_castsi256_ps(
        _mm256_set_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN));
    size_t i = 0;
    for (; i + 4 <= h; i += 4) {
        const __m256 v = _mm256_loadu_ps(x + 2 * i);
        const __m256 vc =
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(c + i)), dup);
        const __m256 vs = _mm256_xor_ps(
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + i)), dup), neg_even);
        _mm256_storeu_ps(o + 2 * i, _mm256_add_ps(_mm256_mul_ps(v, vc),
                                                  _mm256_mul_ps(_mm256_permute_ps(v, 0xB1), vs)));
    }
    for (; i < h; i++) {
        const float a = x[2 * i], b = x[2 * i + 1];
        o[2 * i] = a * c[i] - b * s[i];
        o[2 * i + 1] = b * c[i] + a * s[i];
    }
}
#endif

/* One row's rotated dimensions, by the widest kernel the CPU runs (isa:
 * 2 AVX-512, 1 AVX2, 0 plain C); out may be x. */
static void rotate_row(int isa, bool gptj, const float *x, float *out, const float *c,
                       const float *s, size_t h)
{
#if PA_ROT_X86
    if (isa == 2) {
        if (gptj)
            rot_gptj_avx512(x, out, c, s, h);
        else
            rot_neox_avx512(x, x + h, out, out + h, c, s, h);
        return;
    }
    if (isa == 1) {
        if (gptj)
            rot_gptj_avx2(x, out, c, s, h);
        else
            rot_neox_avx2(x, x + h, out, out + h, c, s, h);
        return;
    }
#else
    (void)isa;
#endif
    if (out == x) {
        if (gptj)
            rot_gptj_inplace(out, c, s, h);
        else
            rot_neox_inplace(out, out + h, c, s, h);
    } else if (gptj) {
        rot_gptj(x, out, c, s, h);
    } else {
        rot_neox(x, x + h, out, out + h, c, s, h);
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
    const int isa = pa__cpu_avx512() ? 2 : pa__cpu_avx2() ? 1 : 0;

    for (size_t t = 0; t < (size_t)n; t++) {
        const float *c = cos_tab + t * h;
        const float *s = sin_tab + t * h;
        for (size_t hd = 0; hd < (size_t)heads; hd++) {
            size_t off = (t * (size_t)heads + hd) * D;
            rotate_row(isa, gptj, x + off, out + off, c, s, h);
            if (out != x && rest > 0)
                memcpy(out + off + rd, x + off + rd, rest * sizeof(float));
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
