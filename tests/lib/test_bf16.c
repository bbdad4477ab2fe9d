/* test_bf16.c - compute_dtype bf16 (posattn.h): q.k and P.v as bf16 dot
 * products accumulated in float32.
 *
 * Bits first, against tests/ref_bf16_dot.c (the definition, apart from lib/):
 * the rounding; the tiles' products on every way this CPU runs (plain C,
 * the float32 FMA kernels on swapped pairs, AVX-512 BF16's vdpbf16ps),
 * each equal to the others and to the reference, and the online softmax's
 * one pass to its two steps; the logits a call returns, which are exactly scale
 * times the pairwise dot of the rounded q and k as attention sees them (rope included), on the
 * causal diagonal too; and the output of a call whose probabilities are all 1, which is exactly the
 * pairwise sum of the rounded values, tile by tile. Then accuracy against the double reference for
 * every scheme with masks, sinks, softcap and GQA; that the probabilities are rounded (the error
 * against exact attention on rounded q, k and v is above float32's); 16-bit keys and values;
 * splits; and the refusals. make test runs it with the kernels this CPU picks and with
 * POSATTN_KERNEL=portable.
 */
#include "attention_fixture.h"
#include "attention_plan.h"
#include "ref_attention.h"
#include "ref_bf16_dot.h"
#include "softmax.h"
#include "tile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float from_bf16(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------------------- */
/* Rounding                                                                  */
/* ------------------------------------------------------------------------- */

static void check_round(float x)
{
    const float want = ref_bf16dp_round(x), got = from_bf16(pa__bf16_round(x));
    if (bits_of(want) != bits_of(got)) {
        fprintf(stderr, "bf16 round %a (0x%08x): got %a, want %a\n", (double)x, bits_of(x),
                (double)got, (double)want);
        fail();
    }
}

static void test_round(void **state)
{
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 11);
    /* Ties both ways, just above and below them, subnormals, the largest. */
    const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F807FFFu,
                                0x3F818001u, 0x00000001u, 0x80400000u, 0x007FFFFFu,
                                0x00800000u, 0x80800000u, 0x7F7FFFFFu, 0x7F7F7FFFu,
                                0x7F7F8000u, 0xFF7F8000u, 0x00000000u, 0x80000000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        float x;
        memcpy(&x, &special[i], sizeof x);
        check_round(x);
    }
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)tu_uniform(&r, 0, 4294967296.0);
        float x;
        if ((u & 0x7F800000u) == 0x7F800000u)
            continue; /* inputs are finite */
        memcpy(&x, &u, sizeof x);
        check_round(x);
    }
    assert_true(from_bf16(pa__bf16_round(1.0f + 0x1p-8f)) == 1.0f); /* tie to even (down) */
    assert_true(from_bf16(pa__bf16_round(1.0f + 0x3p-8f)) == 1.0f + 0x1p-6f); /* tie to even (up) */
}

/* ------------------------------------------------------------------------- */
/* The tiles' products on every path                                         */
/* ------------------------------------------------------------------------- */

static const pa__bf16_way ways[] = {PA__BF16_PORTABLE, PA__BF16_FMA, PA__BF16_DPBF16};

/* Every way this CPU runs packs random operands itself (rows, K^T, values
 * by pairs of keys, probabilities by pa__bf16_put_pair) and multiplies them;
 * each element must be the reference's pairwise sum of the rounded values,
 * bit for bit, so the ways agree with each other too. Odd inner sizes pad
 * the last pair with 0; a K^T window starting at an odd key and the
 * columns past n untouched are checked as well. */
static void test_tiles_every_way(void **state)
{
    (void)state;
    tu_rng r;
    int ran = 0;
    char names[64] = "";
    tu_rng_seed(&r, 12);
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        if (!pa__bf16_can(ways[w])) {
            assert_true(ways[w] != PA__BF16_PORTABLE); /* plain C runs everywhere */
            continue;
        }
        strcat(names, names[0] ? ", " : "");
        strcat(names, pa__bf16_way_name(ways[w]));
    }
    for (int trial = 0; trial < 40; trial++) {
        const int m = 1 + (int)tu_uniform(&r, 0, 13), n = 1 + (int)tu_uniform(&r, 0, 90);
        const int kdim = 1 + (int)tu_uniform(&r, 0, 80), np = (kdim + 1) / 2, off = trial % 2;
        const int lds = n + 2;
        float *a = tu_alloc((size_t)m * kdim, sizeof(float));         /* q rows, P rows */
        float *k = tu_alloc((size_t)(n + off) * kdim, sizeof(float)); /* keys [n + off, kdim] */
        float *v = tu_alloc((size_t)kdim * n, sizeof(float));         /* values [kdim keys, n] */
        float *O0 = tu_alloc((size_t)m * lds, sizeof(float));
        float *S = tu_alloc((size_t)m * lds, sizeof(float)),
              *O = tu_alloc((size_t)m * lds, sizeof(float));
        float *ar = tu_alloc((size_t)kdim, sizeof(float)),
              *br = tu_alloc((size_t)kdim, sizeof(float));
        const size_t ld = pa__tile_kt_ld(n + off);
        uint32_t *A = tu_alloc((size_t)m * 2 * np, sizeof(uint32_t));
        uint32_t *Kt = tu_alloc(2 * (size_t)np * ld, sizeof(uint32_t));
        uint32_t *V = tu_alloc(2 * (size_t)np * n, sizeof(uint32_t));
        uint32_t *P = tu_alloc((size_t)m * 2 * np, sizeof(uint32_t));
        tu_fill(&r, a, (size_t)m * kdim, -2, 2);
        tu_fill(&r, k, (size_t)(n + off) * kdim, -2, 2);
        tu_fill(&r, v, (size_t)kdim * n, -2, 2);
        tu_fill(&r, O0, (size_t)m * lds, -4, 4);
        for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
            const pa__bf16_way way = ways[w];
            const int u = pa__bf16_units(way);
            if (!pa__bf16_can(way))
                continue;
            pa__bf16_pack_rows(way, m, kdim, a, kdim, A, np * u);
            for (int i = 0; i < m; i++) /* the probabilities: the same rows, by pairs */
                for (int t = 0; t < np; t++)
                    pa__bf16_put_pair(way, a[(size_t)i * kdim + 2 * t],
                                      2 * t + 1 < kdim ? a[(size_t)i * kdim + 2 * t + 1] : 0.0f,
                                      P + (size_t)i * np * u + (size_t)t * u);
            memset(Kt, 0xA5, 2 * (size_t)np * ld * sizeof(uint32_t));
            pa__bf16_pack_kt(way, n + off, kdim, k, kdim, Kt, ld);
            for (size_t row = 0; row < (size_t)np * u; row++) /* padding untouched */
                for (size_t j = (size_t)(n + off); j < ld; j++)
                    assert_true(Kt[row * ld + j] == 0xA5A5A5A5u);
            pa__bf16_pack_v(way, kdim, n, v, n, V, n);
            memset(S, 0xFF, (size_t)m * lds * sizeof(float));
            memcpy(O, O0, (size_t)m * lds * sizeof(float));
            pa__tile_qk_bf16(way, m, n, np, 0.125f, A, np * u, Kt + off, ld, S, lds);
            pa__tile_pv_bf16(way, m, n, np, P, np * u, V, n, O, lds);
            ran++;
            for (int i = 0; i < m; i++) {
                for (int d = 0; d < kdim; d++)
                    ar[d] = ref_bf16dp_round(a[(size_t)i * kdim + d]);
                for (int j = 0; j < n; j++) {
                    for (int d = 0; d < kdim; d++)
                        br[d] = ref_bf16dp_round(k[(size_t)(j + off) * kdim + d]);
                    const float want_s = ref_bf16dp_dot(0.0f, ar, br, 1, (size_t)kdim) * 0.125f;
                    for (int d = 0; d < kdim; d++)
                        br[d] = ref_bf16dp_round(v[(size_t)d * n + j]);
                    const float want_o =
                        ref_bf16dp_dot(O0[(size_t)i * lds + j], ar, br, 1, (size_t)kdim);
                    if (bits_of(S[(size_t)i * lds + j]) != bits_of(want_s) ||
                        bits_of(O[(size_t)i * lds + j]) != bits_of(want_o)) {
                        fprintf(stderr,
                                "%s m=%d n=%d kdim=%d (%d,%d): qk %a want %a, pv %a want %a\n",
                                pa__bf16_way_name(way), m, n, kdim, i, j,
                                (double)S[(size_t)i * lds + j], (double)want_s,
                                (double)O[(size_t)i * lds + j], (double)want_o);
                        fail();
                    }
                }
                for (int j = n; j < lds; j++) /* columns past n are left alone */
                    assert_true(bits_of(O[(size_t)i * lds + j]) ==
                                bits_of(O0[(size_t)i * lds + j]));
            }
        }
        free(a);
        free(k);
        free(v);
        free(O0);
        free(S);
        free(O);
        free(ar);
        free(br);
        free(A);
        free(Kt);
        free(V);
        free(P);
    }
    printf("# bf16 ways run here: %s (%d tile pairs checked; chosen: %s)\n", names, ran,
           pa_bf16_path());
}

/* A tile's probabilities packed a row at a time (pa__bf16_pack_probs: vector
 * code for the FMA way) equal pa__bf16_put_pair pair by pair: every row
 * length, both leads, and values at ties, below float's smallest normal
 * and at zero of both signs. */
static void test_pack_probs(void **state)
{
    (void)state;
    tu_rng r;
    float x[80];
    uint32_t got[2 * 41 + 2], want[2 * 41 + 2];
    tu_rng_seed(&r, 13);
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        const pa__bf16_way way = ways[w];
        const int u = pa__bf16_units(way);
        if (!pa__bf16_can(way))
            continue;
        for (int trial = 0; trial < 400; trial++) {
            const int n = 1 + trial % 79, lead = trial / 79 % 2, np = (lead + n + 1) / 2;
            for (int i = 0; i < n; i++) {
                const double c = tu_uniform(&r, 0, 1);
                uint32_t bits;
                float f = (float)tu_uniform(&r, 0, 1);
                if (c < 0.1) { /* a tie: 8 significant bits and a half */
                    bits = 0x3F000000u | ((uint32_t)tu_uniform(&r, 0, 128) << 16) | 0x8000u;
                    memcpy(&f, &bits, sizeof f);
                } else if (c < 0.2) {
                    f = (float)tu_uniform(&r, 0, 1) * 1e-38f; /* subnormal */
                } else if (c < 0.25) {
                    f = c < 0.225 ? 0.0f : -0.0f;
                }
                x[i] = f;
            }
            memset(got, 0xAB, sizeof got);
            memset(want, 0xAB, sizeof want);
            pa__bf16_pack_probs(way, x, n, lead, got);
            for (int t = 0; t < np; t++) {
                const int c0 = 2 * t - lead, c1 = c0 + 1;
                pa__bf16_put_pair(way, c0 >= 0 && c0 < n ? x[c0] : 0.0f, c1 < n ? x[c1] : 0.0f,
                                  want + (size_t)t * u);
            }
            if (memcmp(got, want, sizeof got) != 0) {
                fprintf(stderr, "%s n=%d lead=%d: packed probabilities differ\n",
                        pa__bf16_way_name(way), n, lead);
                fail();
            }
        }
    }
}

/* The online softmax's one pass (pa__row_exp_sum_pairs: vcvtneps2bf16 on
 * the exp's registers with AVX-512 BF16) leaves the sum, the row and the
 * pairs that its two steps (pa__row_exp_sum, pa__bf16_pack_probs) leave,
 * bit for bit, on rows with hidden keys and ends of either parity. */
static void test_exp_pairs(void **state)
{
    (void)state;
    tu_rng r;
    float x[300], row1[300], row2[300];
    uint32_t got[2 * 152], want[2 * 152]; /* 151 pairs at most, two units each (fma) */
    tu_rng_seed(&r, 14);
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        const pa__bf16_way way = ways[w];
        if (!pa__bf16_can(way))
            continue;
        for (int trial = 0; trial < 200; trial++) {
            const int n = 1 + (int)tu_uniform(&r, 0, 300), lead = trial % 2;
            float m = -INFINITY, s1, s2;
            for (int j = 0; j < n; j++) {
                x[j] = tu_uniform(&r, 0, 1) < 0.1 ? -INFINITY : (float)tu_uniform(&r, -30, 30);
                m = x[j] > m ? x[j] : m;
            }
            if (m == -INFINITY)
                continue;
            memcpy(row1, x, (size_t)n * sizeof(float));
            memcpy(row2, x, (size_t)n * sizeof(float));
            memset(got, 0xAB, sizeof got);
            memset(want, 0xAB, sizeof want);
            s1 = pa__row_exp_sum_pairs(way, row1, n, m, lead, got);
            s2 = pa__row_exp_sum(row2, n, m);
            pa__bf16_pack_probs(way, row2, n, lead, want);
            if (bits_of(s1) != bits_of(s2) || memcmp(row1, row2, (size_t)n * sizeof(float)) != 0 ||
                memcmp(got, want, sizeof got) != 0) {
                fprintf(stderr, "%s n=%d lead=%d: one pass differs from two (sum %a, %a)\n",
                        pa__bf16_way_name(way), n, lead, (double)s1, (double)s2);
                fail();
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Whole calls                                                               */
/* ------------------------------------------------------------------------- */

static float *run(const pa_attention *a, pa_attention_out *o, float **logits, float **q_rot,
                  float **k_rot)
{
    const int32_t Lq = pa_attention_q_len(a), Lk = pa_attention_k_len(a);
    const int32_t H = a->num_heads, Hkv = a->num_kv_heads ? a->num_kv_heads : H;
    const int32_t D = a->head_dim, Dv = a->v_head_dim ? a->v_head_dim : D;
    const size_t ws_size = pa_attention_workspace_size(a);
    void *ws = tu_alloc(ws_size, 1);
    pa_error err;
    pa_status st;
    memset(o, 0, sizeof *o);
    o->output = tu_alloc((size_t)Lq * H * Dv, sizeof(float));
    if (logits)
        *logits = o->logits = tu_alloc((size_t)H * Lq * Lk, sizeof(float));
    if (q_rot)
        *q_rot = o->q_rot = tu_alloc((size_t)Lq * H * D, sizeof(float));
    if (k_rot)
        *k_rot = o->k_rot = tu_alloc((size_t)Lk * Hkv * D, sizeof(float));
    st = pa_attention_run(a, o, ws, ws_size, &err);
    tu_assert_status(st, PA_STATUS_OK, &err, __FILE__, __LINE__);
    free(ws);
    return o->output;
}

/* The logits of a bf16 call are exactly scale * dot(round(q'), round(k'))
 * with q', k' as attention sees them (q_rot, k_rot), wherever visible. */
static void check_logits_exact(pa_scheme_type type, int Lq, int Lk, int H, int Hkv, int D,
                               bool causal, uint64_t seed)
{
    fixture f;
    pa_attention_out o;
    float *lg, *qr, *kr;
    size_t checked = 0;
    setup_qkv(&f, type, Lq, Lk, H, Hkv, D, D, seed);
    f.a.causal = causal;
    f.a.compute_dtype = PA_DTYPE_BF16;
    run(&f.a, &o, &lg, &qr, &kr);
    {
        float *a = tu_alloc((size_t)D, sizeof(float)), *b = tu_alloc((size_t)D, sizeof(float));
        const float scale = pa_attention_scale(&f.a);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Lq; i++) {
                const int g = h / (H / Hkv);
                for (int d = 0; d < D; d++)
                    a[d] = ref_bf16dp_round(qr[((size_t)i * H + h) * D + d]);
                for (int j = 0; j < Lk; j++) {
                    const float got = lg[((size_t)h * Lq + i) * Lk + j];
                    float want;
                    if (got == -INFINITY)
                        continue;
                    for (int d = 0; d < D; d++)
                        b[d] = ref_bf16dp_round(kr[((size_t)j * Hkv + g) * D + d]);
                    want = ref_bf16dp_dot(0.0f, a, b, 1, (size_t)D) * scale;
                    if (type == PA_SCHEME_ALIBI || type == PA_SCHEME_T5)
                        continue; /* a bias is added: checked by the accuracy test */
                    if (bits_of(got) != bits_of(want)) {
                        fprintf(stderr, "logit h=%d i=%d j=%d D=%d: got %a, want %a\n", h, i, j, D,
                                (double)got, (double)want);
                        fail();
                    }
                    checked++;
                }
            }
        free(a);
        free(b);
    }
    if (type != PA_SCHEME_ALIBI && type != PA_SCHEME_T5)
        assert_true(checked > 0);
    free(o.output);
    free(lg);
    free(qr);
    free(kr);
    fixture_free(&f);
}

static void test_logits_exact(void **state)
{
    (void)state;
    check_logits_exact(PA_SCHEME_NONE, 5, 40, 2, 2, 64, false, 21);
    check_logits_exact(PA_SCHEME_NONE, 70, 300, 4, 2, 37, false, 22); /* odd D, two tiles */
    check_logits_exact(PA_SCHEME_ROPE, 90, 90, 4, 1, 32, true, 23);   /* diagonal groups */
    check_logits_exact(PA_SCHEME_ROPE, 3, 520, 2, 2, 16, false, 24);  /* few queries: tiled */
}

/* q = 0: every logit 0, every probability exactly 1, so each output is
 * (the pairwise sum of the rounded values, key tile by key tile) / Lk. */
static void check_values_exact(int Lk, int Dv, int Hkv, uint64_t seed)
{
    fixture f;
    pa_attention_out o;
    const int H = 2 * Hkv, D = 8, Lq = 3;
    float *col;
    setup_qkv(&f, PA_SCHEME_NONE, Lq, Lk, H, Hkv, D, Dv, seed);
    memset(f.q, 0, (size_t)Lq * H * D * sizeof(float));
    f.a.compute_dtype = PA_DTYPE_BF16;
    run(&f.a, &o, NULL, NULL, NULL);
    col = tu_alloc((size_t)Lk, sizeof(float));
    for (int h = 0; h < H; h++) {
        const int g = h / 2;
        for (int c = 0; c < Dv; c++) {
            float acc = 0.0f, want;
            for (int j = 0; j < Lk; j++)
                col[j] = ref_bf16dp_round(f.v[((size_t)j * Hkv + g) * Dv + c]);
            const int bk = pa__tile_keys();
            for (int t0 = 0; t0 < Lk; t0 += bk) { /* the kernel's key tiles */
                float ones[8192];
                for (int j = 0; j < bk; j++)
                    ones[j] = 1.0f;
                const int n = Lk - t0 < bk ? Lk - t0 : bk;
                acc = ref_bf16dp_dot(acc, ones, col + t0, 1, (size_t)n);
            }
            want = acc * (1.0f / (float)Lk);
            for (int i = 0; i < Lq; i++) {
                const float got = o.output[((size_t)i * H + h) * Dv + c];
                if (bits_of(got) != bits_of(want)) {
                    fprintf(stderr, "value sum Lk=%d h=%d c=%d: got %a, want %a\n", Lk, h, c,
                            (double)got, (double)want);
                    fail();
                }
            }
        }
    }
    free(col);
    free(o.output);
    fixture_free(&f);
}

static void test_values_exact(void **state)
{
    (void)state;
    check_values_exact(40, 16, 1, 31);
    check_values_exact(301, 33, 2, 32); /* odd keys in the last tile, odd Dv */
    check_values_exact(600, 64, 1, 33);
}

/* Largest |got - want| over n. */
static double max_err(const float *got, const double *want, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        e = d > e ? d : e;
    }
    return e;
}

/* The probabilities are rounded: against exact attention over the rounded
 * q, k and v, the error is that of bf16 probabilities, well above
 * float32's, and within their bound. */
static void test_probs_rounded(void **state)
{
    (void)state;
    fixture f;
    pa_attention_out o;
    const int Lq = 24, Lk = 64, H = 2, D = 32;
    double *want;
    double e;
    setup_qkv(&f, PA_SCHEME_NONE, Lq, Lk, H, H, D, D, 41);
    for (size_t i = 0; i < (size_t)Lq * H * D; i++)
        f.q[i] = ref_bf16dp_round(f.q[i] * 4.0f); /* spread the weights */
    for (size_t i = 0; i < (size_t)Lk * H * D; i++) {
        f.k[i] = ref_bf16dp_round(f.k[i]);
        f.v[i] = ref_bf16dp_round(f.v[i]);
    }
    want = tu_alloc((size_t)Lq * H * D, sizeof(double));
    ref_attention(&f.a, want, NULL, NULL, NULL, NULL);
    run(&f.a, &o, NULL, NULL, NULL);
    e = max_err(o.output, want, (size_t)Lq * H * D);
    assert_true(e < 1e-5); /* float32 over the same (already bf16) inputs */
    free(o.output);
    f.a.compute_dtype = PA_DTYPE_BF16;
    run(&f.a, &o, NULL, NULL, NULL);
    e = max_err(o.output, want, (size_t)Lq * H * D);
    printf("# bf16 probabilities: max error %.3g against exact attention on bf16 q, k, v\n", e);
    assert_true(e > 5e-5); /* rounded */
    assert_true(e < 4e-3); /* 2^-9 relative per weight */
    free(o.output);
    free(want);
    fixture_free(&f);
}

/* Every q/k/v scheme, with masks, sinks and softcap: within bf16's error
 * of the double reference, and fully hidden rows as float32's. */
static void test_accuracy_schemes(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof qkv_schemes / sizeof qkv_schemes[0]; s++)
        for (int variant = 0; variant < 3; variant++) {
            fixture f;
            pa_attention_out o;
            const int Lq = variant == 2 ? 4 : 80, Lk = 130, H = 4, Hkv = 2, D = 48;
            const size_t n = (size_t)Lq * H * D;
            double *want = tu_alloc(n, sizeof(double));
            float *f32;
            float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
            double e, e32;
            setup_qkv(&f, qkv_schemes[s], Lq, Lk, H, Hkv, D, D, 50 + s * 3 + (uint64_t)variant);
            add_tables(&f, H, D, D, 60 + s);
            if (variant == 0) {
                f.a.causal = true;
                f.a.window = 40;
            } else if (variant == 1) {
                f.a.sinks = sinks;
                f.a.softcap = 2.0f;
                f.a.key_length = 100;
            }
            ref_attention(&f.a, want, NULL, NULL, NULL, NULL);
            run(&f.a, &o, NULL, NULL, NULL);
            f32 = o.output;
            e32 = max_err(f32, want, n);
            f.a.compute_dtype = PA_DTYPE_BF16;
            run(&f.a, &o, NULL, NULL, NULL);
            e = max_err(o.output, want, n);
            if (!(e < 2e-2) || !(e > e32)) {
                fprintf(stderr, "scheme %d variant %d: bf16 error %.3g, f32 %.3g\n",
                        (int)qkv_schemes[s], variant, e, e32);
                fail();
            }
            free(o.output);
            free(f32);
            free(want);
            fixture_free(&f);
        }
}

/* A row whose keys are all hidden is 0, as in float32. */
static void test_hidden_rows(void **state)
{
    (void)state;
    fixture f;
    pa_attention_out o;
    const int Lq = 6, Lk = 20, H = 2, D = 16;
    uint8_t *mask = tu_alloc((size_t)Lq * Lk, 1);
    memset(mask, 1, (size_t)Lq * Lk);
    memset(mask + 2 * Lk, 0, Lk); /* row 2 sees nothing */
    setup_qkv(&f, PA_SCHEME_NONE, Lq, Lk, H, H, D, D, 71);
    f.a.mask = mask;
    f.a.mask_heads = 1;
    f.a.compute_dtype = PA_DTYPE_BF16;
    run(&f.a, &o, NULL, NULL, NULL);
    for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++)
            assert_true(o.output[((size_t)2 * H + h) * D + d] == 0.0f);
    for (size_t i = 0; i < (size_t)Lq * H * D; i++)
        assert_true(isfinite(o.output[i]));
    free(o.output);
    free(mask);
    fixture_free(&f);
}

/* Parts by heads give the whole call's bits; 16-bit keys and values give
 * the bits of their widened float32 twins. */
static void test_parts_and_kv16(void **state)
{
    (void)state;
    fixture f;
    pa_attention_out o;
    const int Lq = 70, Lk = 200, H = 4, Hkv = 2, D = 32;
    const size_t n = (size_t)Lq * H * D, nk = (size_t)Lk * Hkv * D;
    float *whole, *out = tu_alloc(n, sizeof(float));
    uint16_t *k16 = tu_alloc(nk, sizeof(uint16_t)), *v16 = tu_alloc(nk, sizeof(uint16_t));
    pa_error err;
    setup_qkv(&f, PA_SCHEME_ROPE, Lq, Lk, H, Hkv, D, D, 81);
    f.a.causal = true;
    f.a.compute_dtype = PA_DTYPE_BF16;
    whole = run(&f.a, &o, NULL, NULL, NULL);
    {
        const size_t ws = pa_attention_workspace_size(&f.a);
        void *w = tu_alloc(ws, 1);
        pa_attention_out po;
        memset(&po, 0, sizeof po);
        po.output = out;
        for (int part = 0; part < 3; part++)
            tu_assert_status(pa_attention_run_part(&f.a, &po, part, 3, w, ws, &err), PA_STATUS_OK,
                             &err, __FILE__, __LINE__);
        assert_memory_equal(out, whole, n * sizeof(float));
        free(w);
    }
    /* bf16 keys and values: their widened twins in float32, same bits. */
    for (size_t i = 0; i < nk; i++) {
        k16[i] = pa__bf16_round(f.k[i]);
        v16[i] = pa__bf16_round(f.v[i]);
        f.k[i] = from_bf16(k16[i]);
        f.v[i] = from_bf16(v16[i]);
    }
    free(whole);
    whole = run(&f.a, &o, NULL, NULL, NULL);
    {
        const float *k = f.a.k, *v = f.a.v;
        f.a.k = (const float *)(const void *)k16;
        f.a.v = (const float *)(const void *)v16;
        f.a.kv_dtype = PA_DTYPE_BF16;
        run(&f.a, &o, NULL, NULL, NULL);
        assert_memory_equal(o.output, whole, n * sizeof(float));
        free(o.output);
        f.a.k = k;
        f.a.v = v;
        f.a.kv_dtype = PA_DTYPE_F32;
    }
    free(whole);
    free(out);
    free(k16);
    free(v16);
    fixture_free(&f);
}

static void test_refusals(void **state)
{
    (void)state;
    fixture f;
    pa_error err;
    setup_qkv(&f, PA_SCHEME_NONE, 4, 4, 1, 1, 8, 8, 91);
    f.a.compute_dtype = PA_DTYPE_F16;
    tu_assert_status(pa_attention_check(&f.a, &err), PA_STATUS_UNSUPPORTED, &err, __FILE__,
                     __LINE__);
    assert_string_equal(err.field, "compute_dtype");
    assert_non_null(strstr(err.message, "AVX-512 FP16"));
    f.a.compute_dtype = (pa_dtype)7;
    tu_assert_status(pa_attention_check(&f.a, &err), PA_STATUS_INVALID_ARGUMENT, &err, __FILE__,
                     __LINE__);
    assert_string_equal(err.field, "compute_dtype");
    assert_non_null(strstr(err.message, "compute_dtype=7"));
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round),         cmocka_unit_test(test_tiles_every_way),
        cmocka_unit_test(test_pack_probs),    cmocka_unit_test(test_exp_pairs),
        cmocka_unit_test(test_logits_exact),  cmocka_unit_test(test_values_exact),
        cmocka_unit_test(test_probs_rounded), cmocka_unit_test(test_accuracy_schemes),
        cmocka_unit_test(test_hidden_rows),   cmocka_unit_test(test_parts_and_kv16),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
