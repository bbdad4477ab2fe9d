/* attention_options.c - bench_attention's options section (see the top
 * of bench_attention.c): each option of current models and each bias
 * scheme against the same rope causal call without it, timed in turn; and
 * the softcap's tanh checked on every float.
 */
#include "attention_options.h"

#include "attention_harness.h"
#include "softmax.h" /* lib/'s row kernels: the softcap's tanh on every float */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The softcap's tanh (lib/softmax.c) on every float: pa__row_softcap with
 * cap 1 (where x * (1 / cap) and the product by cap are exact), against
 * double tanh from 2^-12 to 9.1; below it must give x (tanh(x) rounds to x
 * there), from 9.1 exactly 1, for -x exactly -tanh(x) (-inf, a masked
 * logit, stays -inf), for NaN NaN. Each part takes a share of the
 * positive floats and their negations. */
typedef struct tanh_part {
    double ulp, abs; /* the largest error in ulps of tanh(x), and in absolute */
    float at;        /* where the error in ulps is largest */
    uint64_t misses; /* exactness, symmetry or NaN broken */
} tanh_part;

static double ulp_at(double r)
{
    int e;
    if (fabs(r) < 0x1p-126)
        return 0x1p-149;
    frexp(fabs(r), &e);
    return ldexp(1.0, e - 24);
}

static void tanh_fn(void *ctx, int part, int nparts)
{
    enum { C = 4096 };
    tanh_part *r = (tanh_part *)ctx + part;
    const uint64_t stop = (uint64_t)0x80000000u * (part + 1) / nparts;
    uint64_t b = (uint64_t)0x80000000u * part / nparts;
    float in[C], out[C], neg[C];
    *r = (tanh_part){0};
    while (b < stop) {
        int n = 0;
        for (; n < C && b < stop; n++, b++) {
            const uint32_t u = (uint32_t)b;
            memcpy(&in[n], &u, sizeof u);
            out[n] = in[n];
            neg[n] = -in[n];
        }
        pa__row_softcap(out, n, 1.0f);
        pa__row_softcap(neg, n, 1.0f);
        for (int j = 0; j < n; j++) {
            const float x = in[j], y = out[j];
            double want, err;
            if (isnan(x)) {
                r->misses += !isnan(y) || !isnan(neg[j]);
                continue;
            }
            r->misses += neg[j] != (isinf(x) ? -INFINITY : -y); /* -inf is a mask's */
            if (x < 0x1p-12f || x >= 9.1f) {
                r->misses += y != (x < 1.0f ? x : 1.0f);
                continue;
            }
            want = tanh((double)x);
            err = fabs(y - want);
            r->abs = err > r->abs ? err : r->abs;
            if (err / ulp_at(want) > r->ulp) {
                r->ulp = err / ulp_at(want);
                r->at = x;
            }
        }
    }
}

bool bench_softcap_tanh(int threads)
{
    tanh_part parts[MAX_THREADS], all = {0};
    par_ctx pc = {tanh_fn, parts, threads};
    const double t0 = bench_now();
    bench_run_parallel(&pc);
    for (int i = 0; i < threads; i++) {
        if (parts[i].ulp > all.ulp) {
            all.ulp = parts[i].ulp;
            all.at = parts[i].at;
        }
        all.abs = fmax(all.abs, parts[i].abs);
        all.misses += parts[i].misses;
    }
    const bool ok = all.ulp <= 1.32 && all.misses == 0;
    printf("softcap's tanh on all 2^32 floats (%.1f s): within %.3f ulp of tanh (at %.9g), "
           "%.2g absolute; exact below 2^-12 and past 9.1, odd, NaN kept: %llu misses "
           "(target <= 1.32 ulp, none: %s)\n",
           bench_now() - t0, all.ulp, (double)all.at, all.abs, (unsigned long long)all.misses,
           ok ? "met" : "NO");
    return ok;
}

void bench_options(int tmax, const char *only, int *met, int *missed)
{
    enum { L = 2048, H = 8, D = 64, ROUNDS = 7 };
    pa_scheme s;
    attn_ctx ac;
    float sinks[H], *bias = bench_randn((size_t)L * L, 7), *norm = bench_randn(D, 8);
    float *qwide = bench_randn((size_t)L * H * D, 1);
    float *ent = malloc((size_t)H * L * sizeof(float)),
          *dist = malloc((size_t)H * L * sizeof(float));
    uint8_t *docs = malloc((size_t)L * L);
    if (ent == NULL || dist == NULL || docs == NULL) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++)
            docs[(size_t)i * L + j] = i / 512 == j / 512; /* 4 documents */
    const int32_t cu[] = {0, 512, 1024, 1536, 2048};      /* the same 4 documents, packed */
    for (int h = 0; h < H; h++)
        sinks[h] = 0.5f;
    for (int d = 0; d < D; d++)
        norm[d] = 1.0f + 0.1f * norm[d];
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    pa_attention_init(&ac.a, &s);
    ac.a.num_heads = ac.a.num_kv_heads = H;
    ac.a.head_dim = D;
    ac.a.q_len = ac.a.k_len = L;
    ac.a.q = bench_randn((size_t)L * H * D, 1);
    ac.a.k = bench_randn((size_t)L * H * D, 2);
    ac.a.v = bench_randn((size_t)L * H * D, 5);
    ac.a.causal = true;
    memset(&ac.out, 0, sizeof ac.out);
    ac.out.output = malloc((size_t)L * H * D * sizeof(float));
    /* The bias schemes, the same call under another scheme. */
    pa_scheme alibi, t5, shaw, xpos, kerple, sandwich, prop, ntka, fire, cope64, cope_full;
    float r1[H], r2[H];
    float *t5_table = bench_randn((size_t)32 * H, 11), *rel_k = bench_randn((size_t)33 * D, 12);
    /* CoPE's tables: 64 positions, and the reference's default of the
     * block size + 1 (every count a row can reach). */
    float *pos_emb = bench_randn((size_t)(L + 1) * D, 14);
    float *rel_v = bench_randn((size_t)33 * D, 13);
    /* FIRE with the peer's default width, 32: breakpoints -b1/w1 spread
     * over the normalised distances [0, 1]. */
    float *fire_w1 = bench_randn(32, 14), *fire_b1 = bench_randn(32, 15),
          *fire_w2 = bench_randn((size_t)32 * H, 16), *fire_b2 = bench_randn(H, 17);
    pa_scheme_init(&alibi, PA_SCHEME_ALIBI);
    pa_scheme_init(&t5, PA_SCHEME_T5);
    t5.t5.bidirectional = false;
    t5.t5.table = t5_table;
    t5.t5.table_rows = 32;
    t5.t5.table_cols = H;
    pa_scheme_init(&shaw, PA_SCHEME_SHAW);
    shaw.shaw.max_relative_position = 16;
    shaw.shaw.rel_k = rel_k;
    shaw.shaw.rel_k_rows = 33;
    shaw.shaw.rel_k_cols = D;
    shaw.shaw.rel_v = rel_v;
    shaw.shaw.rel_v_rows = 33;
    shaw.shaw.rel_v_cols = D;
    /* Issue #31's schemes and scalings: xPos; KERPLE (log, r1 1, r2 by
     * head as ALiBi's slopes spread); Sandwich; RoPE proportional
     * (Gemma 4's 0.25) and NTK-alpha (4); FIRE (hidden 32); CoPE. */
    pa_scheme_init(&xpos, PA_SCHEME_XPOS);
    pa_scheme_init(&kerple, PA_SCHEME_KERPLE);
    for (int h = 0; h < H; h++) {
        r1[h] = 1.0f;
        r2[h] = 0.5f / (float)(1 << h % 5);
    }
    kerple.kerple.r1 = r1;
    kerple.kerple.r2 = r2;
    kerple.kerple.num_r1 = kerple.kerple.num_r2 = H;
    pa_scheme_init(&sandwich, PA_SCHEME_SANDWICH);
    prop = s;
    prop.rope.scaling = PA_ROPE_SCALING_PROPORTIONAL;
    prop.rope.partial_rotary_factor = 0.25;
    ntka = s;
    ntka.rope.scaling = PA_ROPE_SCALING_NTK_ALPHA;
    ntka.rope.alpha = 4.0;
    pa_scheme_init(&fire, PA_SCHEME_FIRE);
    fire.fire.w1 = fire_w1;
    fire.fire.b1 = fire_b1;
    fire.fire.w2 = fire_w2;
    fire.fire.b2 = fire_b2;
    fire.fire.num_w1 = fire.fire.num_b1 = 32;
    fire.fire.num_w2 = 32 * H;
    fire.fire.num_b2 = H;
    pa_scheme_init(&cope64, PA_SCHEME_COPE);
    cope64.cope.npos_max = 64;
    cope64.cope.pos_emb = pos_emb;
    cope64.cope.pos_emb_heads = 1;
    cope_full = cope64;
    cope_full.cope.npos_max = L + 1;
    ac.ws_size = 0;
    {
        const pa_scheme *all[] = {&s,      &alibi,    &t5,   &shaw,   &xpos,
                                  &kerple, &sandwich, &fire, &cope64, &cope_full};
        for (int i = 0; i < 10; i++) {
            pa_attention b = ac.a;
            size_t n;
            b.scheme = all[i < 7 ? i : 0];
            if (i == 7) {
                b.cu_seqlens_q = cu;
                b.num_seqs = 4;
            }
            n = pa_attention_workspace_size(&b);
            ac.ws_size = n > ac.ws_size ? n : ac.ws_size;
        }
    }
    for (int t = 0; t < tmax; t++)
        ac.ws[t] = malloc(ac.ws_size);
    printf("\noptions of current models and the bias schemes: rope causal L=%d H=%d D=%d, "
           "T=%d;\nspeed against the same call without the option (or with rope); median "
           "of %d pairs timed in turn, > 1 is faster\n",
           L, H, D, tmax, ROUNDS);
    printf("%-28s %9s %10s %7s %5s\n", "option", "GFLOP/s", "speed", "target", "met");
    const pa_attention base = ac.a; /* each option's pair starts from it */
    for (int i = 0; i < L * H * D; i++)
        qwide[i] *= 600.0f; /* logits with a standard deviation of 200 */
    for (int o = 0; o < 23; o++) {
        static const char *const names[] = {"softcap 50",
                                            "sinks",
                                            "bias [1, L, L]",
                                            "q_norm, k_norm [D]",
                                            "chunk_size 512",
                                            "mask: 4 documents",
                                            "alibi (scheme)",
                                            "t5 (scheme)",
                                            "shaw K=16 (scheme)",
                                            "return entropy+distance",
                                            "xpos (scheme)",
                                            "kerple log (scheme)",
                                            "sandwich (scheme)",
                                            "rope proportional 0.25",
                                            "rope ntk_alpha 4",
                                            "logn_scaling T=512",
                                            "attn_temperature floor 256",
                                            "fire hidden=32 (scheme)",
                                            "cope npos 64",
                                            "cope npos L+1",
                                            "packed 4 x 512 vs mask",
                                            "packed 4 x 512 vs full L",
                                            "softcap 50, logits sd 4 cap"};
        if (only != NULL && strncmp(names[o], only, strlen(only)) != 0)
            continue;
        /* Those that add work to every logit; q/k norms add O(L*D).
         * CoPE computes q.k twice by design (its gates need the whole
         * row first): reported, no target. */
        const bool counted = o <= 2 || (o >= 6 && o <= 17);
        /* Packed sequences (cu_seqlens) skip the off-diagonal blocks:
         * against the full call without a mask, target about S = 4. */
        const bool packed = o == 21;
        /* The row statistics (#21): computed in the kernel, no weights. */
        const bool stats = o == 9;
        par_ctx pa = {bench_attention_fn, &ac, tmax};
        double ratio[ROUNDS], best = 1e30;
        pa_attention plain = base, with = base;
        switch (o) {
        case 0:
            with.softcap = 50.0f;
            break;
        case 1:
            with.sinks = sinks;
            break;
        case 2:
            with.bias = bias;
            with.bias_heads = 1;
            break;
        case 3:
            with.q_norm = with.k_norm = norm;
            with.q_norm_len = with.k_norm_len = D;
            with.q_norm_eps = with.k_norm_eps = 1e-6f;
            break;
        case 4:
            with.chunk_size = 512;
            break;
        case 5:
            with.mask = docs;
            with.mask_heads = 1;
            break;
        case 6:
            with.scheme = &alibi;
            break;
        case 7:
            with.scheme = &t5;
            break;
        case 8:
            with.scheme = &shaw;
            break;
        case 10:
            with.scheme = &xpos;
            break;
        case 11:
            with.scheme = &kerple;
            break;
        case 12:
            with.scheme = &sandwich;
            break;
        case 13:
            with.scheme = &prop;
            break;
        case 14:
            with.scheme = &ntka;
            break;
        case 15:
            with.logn_train_length = 512;
            break;
        case 16:
            with.temperature_floor_scale = 256.0;
            with.temperature_attn_scale = 0.1;
            break;
        case 17:
            with.scheme = &fire;
            break;
        case 18:
            with.scheme = &cope64;
            break;
        case 19:
            with.scheme = &cope_full;
            break;
        case 22:
            /* The bench's logits lie within 2 of 0, far inside the cap:
             * here most reach it, and the tanh takes both pieces. */
            plain.q = with.q = qwide;
            with.softcap = 50.0f;
            break;
        case 20:
        case 21:
            if (o == 20) {
                plain.mask = docs;
                plain.mask_heads = 1;
            }
            with.cu_seqlens_q = cu;
            with.num_seqs = 4;
            break;
        default:
            break; /* the same call, with the statistics asked for */
        }
        bench_run_parallel(&pa); /* warm */
        for (int r = 0; r < ROUNDS; r++) {
            double t0, t_plain;
            ac.a = plain;
            ac.out.entropy = ac.out.distance = NULL;
            t0 = bench_now();
            bench_run_parallel(&pa);
            t_plain = bench_now() - t0;
            ac.a = with;
            ac.out.entropy = stats ? ent : NULL;
            ac.out.distance = stats ? dist : NULL;
            t0 = bench_now();
            bench_run_parallel(&pa);
            ratio[r] = t_plain / (bench_now() - t0);
            best = fmin(best, bench_now() - t0);
        }
        ac.a = base;
        ac.out.entropy = ac.out.distance = NULL;
        qsort(ratio, ROUNDS, sizeof *ratio, bench_cmp_double);
        printf("%-28s %9.1f %9.2fx %7s %5s\n", names[o], 4.0 * L * (double)L * D * H / best * 1e-9,
               ratio[ROUNDS / 2],
               counted  ? ">=0.90"
               : packed ? "~4"
                        : "-",
               counted ? (ratio[ROUNDS / 2] >= 0.90 ? "met" : "NO") : "-");
        if (counted)
            ratio[ROUNDS / 2] >= 0.90 ? (*met)++ : (*missed)++;
        if (o >= 10 && o <= 21)
            printf("%-28s %9s %9.2fx the time of rope causal\n", "", "", 1.0 / ratio[ROUNDS / 2]);
    }
    free(t5_table);
    free(fire_w1);
    free(fire_b1);
    free(fire_w2);
    free(fire_b2);
    free(pos_emb);
    free(rel_k);
    free(rel_v);
    for (int t = 0; t < tmax; t++)
        free(ac.ws[t]);
    free((void *)ac.a.q);
    free((void *)ac.a.k);
    free((void *)ac.a.v);
    free(ac.out.output);
    free(bias);
    free(ent);
    free(dist);
    free(norm);
    free(docs);
    free(qwide);
}
