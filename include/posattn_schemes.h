/* posattn_schemes.h - the positional schemes: each scheme's parameters with its
 * formula, paper and peer, their defaults and names, and the encodings
 * (the positional signal by itself).
 *
 * Part of libposattn's public API: posattn.h includes this file inside
 * its extern "C" block, after the status codes and errors (and, for the
 * analyses, after attention); include posattn.h.
 */
#ifndef POSATTN_H
#error "include posattn.h, which includes this file"
#endif
#ifndef POSATTN_SCHEMES_H
#define POSATTN_SCHEMES_H

/* ------------------------------------------------------------------------- */
/* Positional schemes                                                        */
/* ------------------------------------------------------------------------- */

typedef enum pa_scheme_type {
    PA_SCHEME_NONE = 0,   /* NoPE: no positional information at all. */
    PA_SCHEME_SINUSOIDAL, /* Fixed sinusoids added to x (Vaswani et al. 2017). */
    PA_SCHEME_LEARNED,    /* A learned table added to x (GPT-2, OPT, BERT). */
    PA_SCHEME_SHAW,       /* Relative representations on keys and values (Shaw et al. 2018). */
    PA_SCHEME_T5,         /* Bucketed relative bias on the logits (Raffel et al. 2020). */
    PA_SCHEME_ROPE,       /* Rotary embedding of q and k (Su et al. 2021). */
    PA_SCHEME_ALIBI,      /* Linear distance bias on the logits (Press et al. 2022). */
    PA_SCHEME_KERPLE,     /* Kernelized distance bias, log or power (Chi et al. 2022). */
    PA_SCHEME_SANDWICH,   /* Sinusoid dot-product bias (Chi et al. 2023; NVIDIA NeMo). */
    PA_SCHEME_XPOS,       /* RoPE with a per-frequency exponential decay (Sun et al. 2022). */
    PA_SCHEME_ROPE2D,     /* 2-D rotary embedding of image patches (timm axial, Pixtral). */
    PA_SCHEME_FIRE,       /* Functional interpolation: an MLP of the normalised distance (Li et al.
                             2023). Causal only. */
    PA_SCHEME_COPE,       /* Contextual positions counted by gates (Golovneva et al. 2024). */
    PA_SCHEME_COUNT
} pa_scheme_type;

/* Where a scheme puts position into the computation. */
typedef enum pa_position_site {
    PA_POSITION_SITE_NONE = 0,     /* none */
    PA_POSITION_SITE_INPUT,        /* added to the token embeddings x (sinusoidal, learned) */
    PA_POSITION_SITE_QK_ROTATION,  /* rotates q and k after projection (rope) */
    PA_POSITION_SITE_LOGITS,       /* an additive bias on the attention logits (t5, alibi,
                                      kerple, sandwich, fire, cope) */
    PA_POSITION_SITE_LOGITS_VALUES /* terms on the logits and on the values (shaw) */
} pa_position_site;

typedef enum pa_sinusoidal_layout {
    /* Vaswani et al.: PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(same).
     * With odd d the last column holds the sine of the next frequency. */
    PA_SINUSOIDAL_LAYOUT_INTERLEAVED = 0,
    /* tensor2tensor / fairseq: PE[p, :] = [sin(p*w_k) | cos(p*w_k)], k = 0..d/2-1,
     * w_k = exp(-k * ln(base) / max(d/2 - 1, 1)). With odd d the last column is
     * zero (fairseq pads it). */
    PA_SINUSOIDAL_LAYOUT_CONCAT
} pa_sinusoidal_layout;

typedef struct pa_sinusoidal {
    double base;                 /* default 10000 */
    pa_sinusoidal_layout layout; /* default interleaved */
} pa_sinusoidal;

/* Learned absolute positions: row (position + offset) of table is added to x.
 * OPT uses offset 2. A row outside [0, rows) is PA_STATUS_OUT_OF_RANGE. */
typedef struct pa_learned {
    const float *table; /* [rows, cols]; borrowed, must outlive every call using it */
    int32_t rows;       /* max positions in the table */
    int32_t cols;       /* must equal d_model */
    int32_t offset;     /* default 0 */
} pa_learned;

/* Which relative position indexes Shaw's tables. */
typedef enum pa_shaw_direction {
    /* Shaw et al.: rel = kpos - qpos. */
    PA_SHAW_DIRECTION_KEY_MINUS_QUERY = 0,
    /* Hugging Face BERT's position_embedding_type "relative_key" and
     * "relative_key_query": rel = qpos - kpos ("distance = position_ids_l -
     * position_ids_r"). With K = max_position_embeddings - 1 the table is
     * BERT's distance_embedding weight [2 max_position_embeddings - 1,
     * head_dim] as stored, and positions inside it are never clipped. */
    PA_SHAW_DIRECTION_QUERY_MINUS_KEY
} pa_shaw_direction;

/* Shaw et al. 2018, "Self-Attention with Relative Position Representations",
 * and Hugging Face BERT's relative position embeddings (modeling_bert.py,
 * BertSelfAttention). One table row per pair, shared by all heads:
 *   idx(i, j) = clip(rel_ij, -K, K) + K, rel_ij = kpos_j - qpos_i
 *               (direction key_minus_query) or qpos_i - kpos_j (query_minus_key)
 *   logits_ij = scale * (q_i . k_j + q_i . rel_k[idx] + key_term * k_j . rel_k[idx])
 *   out_i     = sum_j a_ij (v_j + rel_v[idx])        (rel_v optional)
 * k_j is the kv head of the query head (GQA). BERT relative_key is
 * direction query_minus_key, K = max_position_embeddings - 1, rel_k =
 * distance_embedding.weight and scale 1/sqrt(head_dim) (the default);
 * relative_key_query adds key_term. The zeroed defaults are Shaw's. */
typedef struct pa_shaw {
    int32_t max_relative_position; /* K >= 0; tables have 2K+1 rows */
    const float *rel_k;            /* [rel_k_rows, rel_k_cols] = [2K+1, D]; required */
    int32_t rel_k_rows, rel_k_cols;
    const float *rel_v; /* [rel_v_rows, rel_v_cols] = [2K+1, Dv]; may be NULL */
    int32_t rel_v_rows, rel_v_cols;
    pa_shaw_direction direction; /* default key_minus_query */
    bool key_term;               /* default false; true adds scale * k_j . rel_k[idx] */
} pa_shaw;

/* T5 relative attention bias, bucketed exactly as Hugging Face
 * T5Attention._relative_position_bucket(kpos - qpos, bidirectional,
 * num_buckets, max_distance); logits_ij = scale * q.k + table[bucket, h].
 * T5 does not scale logits: the default scale for this scheme is 1.0. */
typedef struct pa_t5 {
    int32_t num_buckets;  /* default 32 */
    int32_t max_distance; /* default 128 */
    bool bidirectional;   /* default true; false gives causal (decoder) buckets */
    const float *table;   /* [num_buckets, H]; required for attention */
    int32_t table_rows, table_cols;
} pa_t5;

typedef enum pa_rope_layout {
    /* GPT-NeoX / Llama / HF rotate_half: pairs (i, i + r/2). */
    PA_ROPE_LAYOUT_NEOX = 0,
    /* GPT-J / original RoFormer / Meta's complex form: pairs (2i, 2i+1). */
    PA_ROPE_LAYOUT_GPTJ
} pa_rope_layout;

typedef enum pa_rope_scaling {
    PA_ROPE_SCALING_NONE = 0,
    PA_ROPE_SCALING_LINEAR,       /* position interpolation: inv_freq / factor */
    PA_ROPE_SCALING_NTK,          /* static NTK-aware: base' = base * factor^(r/(r-2)) */
    PA_ROPE_SCALING_DYNAMIC,      /* HF dynamic NTK from this call's largest position */
    PA_ROPE_SCALING_YARN,         /* YaRN (Peng et al. 2023), HF semantics */
    PA_ROPE_SCALING_LLAMA3,       /* Llama 3.1 wavelength-banded interpolation */
    PA_ROPE_SCALING_LONGROPE,     /* LongRoPE / Phi-3 per-frequency factors */
    PA_ROPE_SCALING_PROPORTIONAL, /* Gemma 4 global layers: a zero-frequency tail */
    PA_ROPE_SCALING_NTK_ALPHA,    /* Hunyuan: base' = base * alpha^(r/(r-2)) */
    PA_ROPE_SCALING_COUNT
} pa_rope_scaling;

/* Rotary position embedding, Su et al. 2021 ("RoFormer"), with the context
 * extensions of Hugging Face transformers' modeling_rope_utils.py.
 *
 * With r = rotary_dim and i = 0 .. r/2-1:
 *   inv_freq[i] = base^(-2i/r)                     (then changed by `scaling`)
 *   theta       = pos * inv_freq[i]                (computed in double)
 *   (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin) * attention_factor-scaled cos/sin
 * for the pair (x0, x1) chosen by `layout`. Dims r .. D-1 pass through.
 *
 * Scalings (0 in factor / original_max_position / attention_factor means the
 * scaling's default, and is an error where it has none):
 *   linear   inv_freq /= factor.                                 factor required
 *   ntk      base' = base * factor^(r/(r-2)).                    factor required
 *   dynamic  seq = max(max_pos + 1, original_max_position);
 *            base' = base * (factor*seq/orig - (factor-1))^(r/(r-2)). Stateless:
 *            max_pos is the largest position of this call.      factor, orig required
 *   yarn     ramp between interpolated (inv_freq/factor) and original
 *            frequencies over the dims found from beta_fast (32) and beta_slow (1)
 *            rotations at original_max_position; floor/ceil when `truncate`
 *            (default true). attention_factor default: 0.1 ln(factor) + 1, or
 *            mscale(factor, mscale)/mscale(factor, mscale_all_dim) when both are set.
 *                                                                factor, orig required
 *   llama3   wavelengths above orig/low_freq_factor are divided by factor, below
 *            orig/high_freq_factor kept, smoothly interpolated between.
 *            Defaults factor 8, low 1, high 4, orig 8192.
 *   longrope inv_freq[i] = 1 / (ext[i] * base^(2i/r)), ext = long_factor when
 *            max_pos + 1 > original_max_position, else short_factor (r/2 values
 *            each). attention_factor default sqrt(1 + ln(factor)/ln(orig)), 1 when
 *            factor <= 1 (factor default 1).                     orig required
 *   proportional  Gemma 4's global layers (HF _compute_proportional_rope_parameters):
 *            k = floor(partial_rotary_factor * r / 2) pairs keep base^(-2i/r), the
 *            other r/2 - k get frequency 0 (cos 1, sin 0: unrotated), then all are
 *            divided by factor (default 1). The denominator is r, which is the
 *            whole head by default (HF's head_dim): unlike partial rotary, the
 *            rotated pairs span the head. In neox layout pair i is (i, i + r/2),
 *            so dims [0, k) and [r/2, r/2 + k) rotate and [k, r/2), [r/2 + k, r)
 *            pass; in gptj dims [0, 2k) rotate.   partial_rotary_factor in (0, 1]
 *   ntk_alpha  Hunyuan (vLLM DynamicNTKAlphaRotaryEmbedding):
 *            base' = base * alpha^(r/(r-2)), independent of position.  alpha required
 * The attention factor multiplies cos and sin, as HF does. */
typedef struct pa_rope {
    double base;           /* default 10000 */
    int32_t rotary_dim;    /* 0 = head dim; even, <= head dim */
    pa_rope_layout layout; /* default neox */
    pa_rope_scaling scaling;
    double factor;
    int32_t original_max_position;
    double attention_factor;                  /* 0 = the scaling's default (1 for most) */
    double beta_fast, beta_slow;              /* yarn; defaults 32 and 1 */
    bool truncate;                            /* yarn; default true */
    double mscale, mscale_all_dim;            /* yarn; 0 = unset */
    double low_freq_factor, high_freq_factor; /* llama3; defaults 1 and 4 */
    const float *short_factor;                /* longrope [short_factor_len = r/2] */
    int32_t short_factor_len;
    const float *long_factor; /* longrope [long_factor_len = r/2] */
    int32_t long_factor_len;
    double partial_rotary_factor; /* proportional; default 1, in (0, 1] */
    double alpha;                 /* ntk_alpha; required (> 0) */
    /* Multimodal RoPE (Qwen2-VL, Qwen2.5-VL; Qwen3-VL interleaved): each of
     * the r/2 frequencies takes its angle from one of three position rows,
     * temporal, height and width (pa_rope_cos_sin_mrope; posattn.h
     * q_mrope_positions). All zero: plain rope. Else t + h + w = r/2 and
     *   sections:    frequency i reads row 0 for i < t, row 1 for i < t + h,
     *                row 2 after (Hugging Face apply_multimodal_rotary_pos_emb)
     *   interleaved: row 1 when i % 3 == 1 and i < 3h, row 2 when i % 3 == 2
     *                and i < 3w, row 0 otherwise (apply_interleaved_mrope). */
    int32_t mrope_section[3];
    bool mrope_interleaved;
} pa_rope;

/* ALiBi, Press et al. 2022. Slopes m_h for H heads, with n = 2^floor(log2 H):
 *   m_h = 2^(-max_bias (h+1) / n)                   for h < n
 *   m_h = 2^(-max_bias (2(h-n)+1) / (2n))           for h >= n
 * which is the paper's recipe for any H at max_bias 8 and ggml's max_bias form.
 * Bias: -m_h * (qpos - kpos); with `symmetric`, -m_h * |qpos - kpos|. */
typedef struct pa_alibi {
    double max_bias;     /* default 8 */
    bool symmetric;      /* default false */
    const float *slopes; /* [num_slopes = H] explicit slopes; NULL = computed */
    int32_t num_slopes;
} pa_alibi;

typedef enum pa_kerple_form {
    PA_KERPLE_FORM_LOG = 0, /* b = -r1 log(1 + r2 |m - n|) */
    PA_KERPLE_FORM_POWER    /* b = -r1 |m - n|^r2 */
} pa_kerple_form;

/* KERPLE, Chi et al. 2022, "KERPLE: Kernelized Relative Positional
 * Embedding for Length Extrapolation", as chijames/KERPLE computes it
 * (megatron/mpu/layers.py ParallelKerpleLog, ParallelKerplePower), with
 * m = qpos and n = kpos:
 *   log    b_h(m, n) = -r1[h] * log(1 + r2[h] * |m - n|)
 *   power  b_h(m, n) = -r1[h] * |m - n|^r2[h],  r2[h] <= 2
 * added to the scaled logits: logits = scale * q.k + b (the bias is not
 * scaled; scale defaults to 1/sqrt(D)). The reference clamps every
 * parameter to >= 1e-2 (and the power's exponent to <= 2) before use;
 * here a value outside that range is refused rather than clamped. The
 * reference is causal, its distance tril(m - n); |m - n| is the same on
 * every visible pair and the symmetric (NeMo bidirectional) form
 * otherwise. */
typedef struct pa_kerple {
    pa_kerple_form form; /* default log */
    const float *r1;     /* [num_r1 = H], each in [0.01, inf); required */
    int32_t num_r1;
    const float *r2; /* [num_r2 = H], each >= 0.01 (and <= 2 for power); required */
    int32_t num_r2;
} pa_kerple;

/* Sandwich, Chi et al. 2023, "Dissecting Transformer Length Extrapolation
 * via the Lens of Receptive Field Analysis", exactly as NVIDIA NeMo's
 * SandwichRelativePositionEmbedding computes it (no parameters are
 * learned). With d = hidden_size, H heads and head h = 0..H-1:
 *   s(m, n)   = sum_{i=1}^{ceil(d/2)} cos(|m - n| / 10000^(2i/d))
 *   b_h(m, n) = (s(m, n) - d/2) * H / (8 (h + 1))
 * NeMo sums from i = 1 (torch.arange(1, d/2 + 1)), not from i = 0 as the
 * sinusoidal p_m . p_n of the paper does, so b is 0 at distance 0 for even
 * d. The bias is added to the scaled logits, unscaled. */
typedef struct pa_sandwich {
    int32_t hidden_size; /* NeMo's hidden_size (its kv_channels, the head dim);
                            0 = head_dim */
} pa_sandwich;

/* xPos, Sun et al. 2022, "A Length-Extrapolatable Transformer", as
 * microsoft/torchscale computes it (torchscale/component/
 * xpos_relative_position.py, class XPOS). With D = head_dim, pair i in
 * [0, D/2) (dims 2i, 2i+1 in gptj layout; i, i + D/2 in neox),
 * theta_i = base^(-2i/D) and
 *   zeta_i = (2i + 0.4 D) / (1.4 D)                  (in (0, 1): a decay)
 * q at position m is rotated by m theta_i and both members of pair i are
 * multiplied by zeta_i^((m - c) / scale_base); k at position n is rotated by
 * n theta_i and multiplied by zeta_i^(-(n - c) / scale_base) (torchscale's
 * downscale=True, 1 / scale). So q.k carries zeta_i^((m - n) / scale_base)
 * and the centre c cancels exactly in arithmetic. Angles use the positions
 * as given. torchscale centres its scale positions on the middle of the
 * sequence (min_pos = -(length + offset) // 2); here c is 0 when every
 * factor zeta_i^(+-p / scale_base) of the call lies in [2^-96, 2^96] (so
 * a q_rot / k_rot is the same whatever the call), and otherwise the
 * midpoint floor((min + max) / 2) of the call's q and k positions
 * (pa_xpos_centre). k_prerotated keys are defined with c = 0. */
typedef struct pa_xpos {
    double base;           /* default 10000 (torchscale fixes 10000) */
    double scale_base;     /* default 512 */
    pa_rope_layout layout; /* default gptj (torchscale's interleaved pairs) */
} pa_xpos;

/* The largest |log2| of one xpos factor zeta_i^(+-(p - c) / scale_base): the
 * positions' spread from their centre is refused beyond it. */
#define PA_XPOS_MAX_LOG2_SCALE 96

/* 2-D RoPE for image patches: each token has a (row, column) coordinate
 * and each rotary pair takes its angle from one of them. With D = head_dim
 * (a multiple of 4), pair p in [0, D/2) (dims 2p, 2p+1 in the default gptj
 * layout; p, p + D/2 in neox):
 *   axial   (timm RotaryEmbeddingCat with in_pixels=False, as EVA-02 and
 *            timm's axial NaFlex ViTs use it; timm/layers/pos_embed_sincos.py
 *            build_rotary_pos_embed): nb = D/4 bands
 *            f_k = base^(-k / nb), k < nb; pair p < nb turns by row * f_p,
 *            pair p >= nb by col * f_(p-nb). The coordinate of an axis is
 *            (position + grid_offset), times ref / grid of that axis when
 *            ref_rows, ref_cols are set (timm's ref_feat_shape, EVA-02's
 *            resize rule).
 *            in_pixels (timm's RotaryEmbeddingCat default; its
 *            build_fourier_pos_embed pixel grid): the coordinate of an
 *            axis of n patches is -1 + 2 i / (n - 1) (torch.linspace(-1, 1,
 *            n); -1 when n is 1), then times ref / grid as above, with i
 *            the grid index (or the given coordinate); grid_offset does
 *            not apply. The bands are pi times linspace(1, max_res / 2,
 *            nb) with linear_bands, pi times 2^linspace(0, log2(max_res)
 *            - 1, nb) without (timm's pixel_freq_bands); it needs the grid.
 *   pixtral (mistral-inference rope.py precompute_freqs_cis_2d): with
 *            theta_j = base^(-2j / D), j < D/2, pair p < D/4 turns by
 *            row * theta_(2p) (the even frequencies), pair p >= D/4 by
 *            col * theta_(2(p - D/4) + 1) (the odd ones). mistral-inference
 *            pairs neighbours (gptj); Hugging Face's Pixtral pairs halves
 *            (neox, with its weights permuted to match).
 *   dinov3  (facebookresearch/dinov3 RopePositionEmbedding, base 100 in
 *            the models): axial's pairs with frequencies 2 pi base^(-k/nb)
 *            (2 pi / periods, periods = base^(2k / (D/2))) of coordinates
 *            normalised to [-1, 1]: 2 (i + 1/2) / n - 1, n the grid's rows
 *            (columns) with normalize "separate", max(rows, cols) with
 *            "max", min with "min"; it needs the grid. The model pairs
 *            halves (neox).
 *   mixed   (RoPE-Mixed, Heo et al. 2024; timm RotaryEmbeddingMixed,
 *            get_mixed_freqs): learned frequencies per head, freqs [2, H,
 *            D/2] (fx, then fy): pair p of head h turns by
 *            row * fx[h, p] + col * fy[h, p] (timm's t_x is the row index
 *            with grid_indexing 'ij'); neighbours paired (gptj, its
 *            repeat_interleave). Every head has its own angles, so keys
 *            need their query head's: num_kv_heads must equal num_heads.
 * merge_size m > 1 orders the grid's tokens as Qwen2-VL's vision tower
 * does: m x m blocks row-major, the patches of a block row-major inside it
 * (token t: block t / m^2, then (t % m^2) / m, t % m); rows and cols must
 * be multiples of m. Qwen2-VL's vision rotary is axial with layout neox.
 * Coordinates come from pa_attention's q_positions_2d / k_positions_2d
 * ([2, L]: the rows, then the columns) or, when those are NULL, from the
 * grid: token prefix_tokens + t sits at (t / grid_cols, t % grid_cols), the
 * row-major patch order both peers use. The first prefix_tokens tokens (a
 * class token) are not rotated, as timm leaves its prefix tokens. Masks
 * (causal, window) follow the 1-D q_positions / k_positions, token order by
 * default. */
typedef enum pa_rope2d_variant {
    PA_ROPE2D_AXIAL = 0, /* default */
    PA_ROPE2D_PIXTRAL,
    PA_ROPE2D_DINOV3,
    PA_ROPE2D_MIXED
} pa_rope2d_variant;

typedef enum pa_rope2d_normalize {
    PA_ROPE2D_NORMALIZE_SEPARATE = 0, /* dinov3's default: each axis by its own size */
    PA_ROPE2D_NORMALIZE_MAX,
    PA_ROPE2D_NORMALIZE_MIN
} pa_rope2d_normalize;

typedef struct pa_rope2d {
    pa_rope2d_variant variant;
    double base;                   /* default 10000: timm's temperature, Pixtral's rope_theta */
    pa_rope_layout layout;         /* default gptj (both peers' interleaved pairs) */
    int32_t grid_rows, grid_cols;  /* the patch grid; 0, 0: coordinates are given */
    int32_t ref_rows, ref_cols;    /* axial: timm's ref_feat_shape (0, 0: none); needs the grid */
    double grid_offset;            /* axial: timm's grid_offset, added to both coordinates */
    bool in_pixels;                /* axial: timm's pixel grid and bands (above) */
    double max_res;                /* in_pixels: timm's max_res; 0 = its default 224 */
    bool linear_bands;             /* in_pixels: linear band spacing (timm default false) */
    int32_t prefix_tokens;         /* leading tokens left unrotated (class tokens); >= 0 */
    int32_t merge_size;            /* grid order in m x m blocks (Qwen2-VL); 0 or 1: none */
    pa_rope2d_normalize normalize; /* dinov3's coordinate normalisation */
    const float *freqs;            /* mixed: [2, H, D/2] fx then fy, finite; borrowed */
    int32_t num_freqs;             /* mixed: its count, 2 * H * D/2 */
} pa_rope2d;
/* FIRE, Li et al. 2023, "Functional Interpolation for Relative Positions
 * Improves Long Context Transformers", as the peer implementation
 * mcleish7/arithmetic computes it (cramming/architectures/embeddings.py,
 * class FIRE). With query position i, key position j, H heads and
 * hidden = num_w1:
 *   psi(x)    = log(|c x| + 1)
 *   x(i, j)   = psi(|i - j|) / (psi(max(i, |L|)) + eps)
 *   b_h(i, j) = b2[h] + sum_k w2[k, h] relu(w1[k] x + b1[k])
 * i.e. Linear(1, hidden) -> ReLU -> Linear(hidden, H). The paper writes
 * psi(max(L, i)) with a learnable L and no eps; the code thresholds at
 * |L_multiplier * init_L| (here L, that product; |L| is used as the code
 * does), adds eps, and takes |c x| inside the log. w2 is [hidden, H]
 * row-major (w2[k * H + h]): the transpose of PyTorch's mlp.2.weight
 * [H, hidden]. The reference is a causal decoder (its normaliser assumes
 * keys at or before the query), so attention with fire requires causal;
 * a key after its query would take |i - j|. The bias is added to the
 * scaled logits, unscaled. */
typedef struct pa_fire {
    double c;        /* default 0.1; finite */
    double L;        /* default 512; finite (|L| is the threshold) */
    double eps;      /* default 1e-6; finite and > 0 */
    const float *w1; /* [num_w1 = hidden], 1 <= hidden <= PA_FIRE_MAX_HIDDEN; required */
    int32_t num_w1;
    const float *b1; /* [num_b1 = hidden]; required */
    int32_t num_b1;
    const float *w2; /* [num_w2 = hidden * H] row-major [hidden, H]; required */
    int32_t num_w2;
    const float *b2; /* [num_b2 = H]; required */
    int32_t num_b2;
} pa_fire;

/* The widest FIRE MLP accepted (hidden units). */
#define PA_FIRE_MAX_HIDDEN 65536
/* CoPE, Golovneva et al. 2024, "Contextual Position Encoding: Learning to
 * Count What's Important", as facebookresearch/RAM computes it
 * (projects/cope/src/cope/context_position.py, ContextPosSelfAttn with
 * key_cope = key and no value gates). With s = scale (default 1/sqrt(D),
 * the reference's 1/sqrt(head_dim)), query i, key j and E = pos_emb of the
 * query's head:
 *   l_ij  = q_i.k_j
 *   g_ij  = sigmoid(s l_ij), 0 for every key the masks hide (causal, window,
 *           chunk, key_length, mask, and a -inf entry of bias)
 *   p_ij  = min(sum_{t >= j} g_it, npos_max - 1)   (a suffix sum over keys)
 *   e_if  = q_i.E[f], f = 0 .. npos_max-1
 *   pos_ij = e_i,ceil(p) w + e_i,floor(p) (1 - w),   w = p - floor(p)
 *   logit_ij = s (l_ij + pos_ij)          (the reference's default)
 *            = s l_ij + pos_ij            (nodiv: its --cope-nodiv)
 * then the masks and the softmax. q is q as attention sees it (after q_norm
 * and the query scalings); positions (q_positions, k_positions) only decide
 * the masks. With softcap the content logit s l_ij is capped and the
 * position term added after it (as other bias schemes); the gates read the
 * uncapped s l_ij. Sinks join the softmax as usual: they are not keys and
 * gate nothing. The reference's table is [1, head_dim, npos]; pos_emb here
 * is its transpose [npos_max, D], shared by every head, or one per head,
 * [H, npos_max, D]. */
typedef struct pa_cope {
    int32_t npos_max;      /* positions 0 .. npos_max-1, >= 2; required */
    const float *pos_emb;  /* [pos_emb_heads, npos_max, D], finite; required */
    int32_t pos_emb_heads; /* 1 (shared by every head) or H */
    /* The table's rows per head and columns as the caller's tensor has
     * them, checked against npos_max and D when not 0 (0: not given). */
    int32_t pos_emb_rows, pos_emb_cols;
    bool nodiv; /* default false: the position term is scaled by s too */
} pa_cope;

/* The largest npos_max (2^24: every whole position below it is exact in
 * float32). */
#define PA_COPE_NPOS_MAX (1 << 24)

/* A scheme and its parameters. Only the member for `type` is read. Tables are
 * borrowed: the caller keeps them alive and unchanged during every call. */
typedef struct pa_scheme {
    pa_scheme_type type;
    pa_sinusoidal sinusoidal;
    pa_learned learned;
    pa_shaw shaw;
    pa_t5 t5;
    pa_rope rope;
    pa_alibi alibi;
    pa_kerple kerple;
    pa_sandwich sandwich;
    pa_xpos xpos;
    pa_rope2d rope2d;
    pa_fire fire;
    pa_cope cope;
} pa_scheme;

/* Fills *s with `type` and every default named above. */
void pa_scheme_init(pa_scheme *s, pa_scheme_type type);

/* "none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi", "kerple",
 * "sandwich", "xpos", "rope2d", "fire", "cope"; NULL if invalid. */
const char *pa_scheme_type_name(pa_scheme_type type);
/* Inverse of pa_scheme_type_name; returns false for an unknown name. */
bool pa_scheme_type_from_name(const char *name, pa_scheme_type *out);
pa_position_site pa_scheme_position_site(pa_scheme_type type);
/* "none", "input", "qk_rotation", "logits", "logits_values". */
const char *pa_position_site_name(pa_position_site site);
/* "neox", "gptj" / "interleaved", "concat" / "none", "linear", "ntk", "dynamic",
 * "yarn", "llama3", "longrope", "proportional", "ntk_alpha"; and the inverses (false when unknown).
 */
const char *pa_rope_layout_name(pa_rope_layout layout);
bool pa_rope_layout_from_name(const char *name, pa_rope_layout *out);
const char *pa_sinusoidal_layout_name(pa_sinusoidal_layout layout);
bool pa_sinusoidal_layout_from_name(const char *name, pa_sinusoidal_layout *out);
const char *pa_rope_scaling_name(pa_rope_scaling scaling);
bool pa_rope_scaling_from_name(const char *name, pa_rope_scaling *out);
/* "log", "power"; and the inverse (false when unknown). */
const char *pa_kerple_form_name(pa_kerple_form form);
bool pa_kerple_form_from_name(const char *name, pa_kerple_form *out);
/* "key_minus_query", "query_minus_key"; and the inverse (false when unknown). */
const char *pa_shaw_direction_name(pa_shaw_direction direction);
bool pa_shaw_direction_from_name(const char *name, pa_shaw_direction *out);

/* ------------------------------------------------------------------------- */
/* Encodings: the positional signal itself                                   */
/* ------------------------------------------------------------------------- */

/* Sinusoidal encodings of n positions: out [n, dim]. Errors: dim < 1, n < 0,
 * base <= 0 or not finite. */
pa_status pa_sinusoidal_encode(const pa_sinusoidal *s, const int32_t *positions, int32_t n,
                               int32_t dim, float *out, pa_error *err);

/* Rows of a learned table for n positions: out [n, table cols]. Errors: a
 * position whose row (position + offset) is outside the table. */
pa_status pa_learned_encode(const pa_learned *l, const int32_t *positions, int32_t n, float *out,
                            pa_error *err);

/* Checks a rope configuration for a head dimension (rotary_dim even and
 * <= head_dim, required scaling fields present, factor lengths). */
pa_status pa_rope_check(const pa_rope *r, int32_t head_dim, pa_error *err);

/* The rotary dimension r in effect for head_dim (rotary_dim or head_dim). */
int32_t pa_rope_rotary_dim(const pa_rope *r, int32_t head_dim);

/* The original_max_position in effect: the field, or its scaling's default
 * when it is 0 (llama3: 8192); 0 when the scaling has none. */
int32_t pa_rope_original_max_position(const pa_rope *r);

/* Inverse frequencies after scaling and the attention factor, for a call whose
 * largest position is max_position (used by dynamic and longrope only).
 * inv_freq [r/2] in double. */
pa_status pa_rope_inv_freq(const pa_rope *r, int32_t head_dim, int32_t max_position,
                           double *inv_freq, double *attention_factor, pa_error *err);

/* The frequency bands a scaling is built on, in the scaling's own terms
 * (Hugging Face's _compute_yarn_parameters and _compute_llama3_parameters):
 *   yarn    the ramp between pair yarn_low (and below: extrapolated, the
 *           original frequency) and pair yarn_high (and above: interpolated,
 *           divided by factor): find_correction_dim of beta_fast and
 *           beta_slow over original_max_position, floored and ceiled when
 *           truncate is set, clamped to [0, r - 1];
 *   llama3  wavelengths below original_max_position / high_freq_factor keep
 *           their frequency, those above original_max_position /
 *           low_freq_factor are divided by factor, those between blend.
 * Fields that do not belong to the scheme's scaling are -1. */
typedef struct pa_rope_bands {
    double yarn_low, yarn_high;
    double llama3_high_freq_wavelength, llama3_low_freq_wavelength;
} pa_rope_bands;

pa_status pa_rope_bands_of(const pa_rope *r, int32_t head_dim, pa_rope_bands *out, pa_error *err);

/* Cos and sin tables, already multiplied by the attention factor:
 * cos_out, sin_out [n, r/2], row p holding cos/sin(positions[p] * inv_freq[i]).
 * max_position as for pa_rope_inv_freq (pass the largest position of the whole
 * call so queries and keys agree). */
pa_status pa_rope_cos_sin(const pa_rope *r, int32_t head_dim, const int32_t *positions, int32_t n,
                          int32_t max_position, float *cos_out, float *sin_out, pa_error *err);

/* The position row (0 temporal, 1 height, 2 width) frequency i of an M-RoPE
 * configuration takes its angle from; 0 for plain rope. */
int pa_rope_mrope_row(const pa_rope *r, int32_t i);

/* Cos and sin tables of M-RoPE as pa_rope_cos_sin makes them, row p's
 * frequency i from position positions3[pa_rope_mrope_row(r, i) * n + p]:
 * positions3 [3, n] holds the temporal, height and width rows. For plain
 * rope (no sections) only row 0 is read. */
pa_status pa_rope_cos_sin_mrope(const pa_rope *r, int32_t head_dim, const int32_t *positions3,
                                int32_t n, int32_t max_position, float *cos_out, float *sin_out,
                                pa_error *err);

/* Rotates x [n, heads, head_dim] into out (same shape; out may equal x) with
 * tables from pa_rope_cos_sin for the same n positions. Each output is two
 * rounded products and their rounded sum, as PyTorch's float32
 * x * cos + rotate_half(x) * sin computes it, with no fused multiply-add:
 * the same bits on every CPU and kernel. Cannot fail once the
 * configuration has passed pa_rope_check. */
void pa_rope_apply(const pa_rope *r, int32_t head_dim, int32_t n, int32_t heads,
                   const float *cos_tab, const float *sin_tab, const float *x, float *out);

/* Checks an xpos configuration for a head dimension: head_dim even, base
 * and scale_base finite and > 0, a known layout. */
pa_status pa_xpos_check(const pa_xpos *x, int32_t head_dim, pa_error *err);

/* The rotation part of xpos as a plain rope configuration (base and layout,
 * no scaling), for pa_rope_apply and pa_rope_inv_freq. */
void pa_xpos_rope(const pa_xpos *x, pa_rope *out);

/* zeta [head_dim/2]: zeta_i = (2i + 0.4 head_dim) / (1.4 head_dim). */
void pa_xpos_zeta(int32_t head_dim, double *zeta);

/* The centre c of a call whose query positions are qpos [nq] and key
 * positions kpos [nk] (either may be NULL with n 0): 0 when
 * max |p| / scale_base * log2(3.5) <= PA_XPOS_MAX_LOG2_SCALE (3.5 = 1 /
 * zeta_0, the largest factor), else the midpoint floor((min + max) / 2)
 * when that brings every factor within the bound. Errors: with
 * centre_zero (k_prerotated) positions beyond the bound from 0; else a
 * spread max - min too wide for any centre ("q_positions"). */
pa_status pa_xpos_centre(const pa_xpos *x, const int32_t *qpos, int32_t nq, const int32_t *kpos,
                         int32_t nk, bool centre_zero, int64_t *centre, pa_error *err);

/* Scaled cos and sin tables for n positions: cos_out, sin_out [n, head_dim/2]
 * with row p, pair i = cos / sin(positions[p] theta_i) * s, s =
 * zeta_i^(e) for sign +1 (queries) and 1 / zeta_i^(e) for sign -1 (keys), e
 * = (positions[p] - centre) / scale_base; computed in double and rounded
 * once. Use with pa_rope_apply(pa_xpos_rope(x)). scale_out, when not NULL,
 * receives s alone [n, head_dim/2]. Errors: bad configuration, n < 0,
 * NULL tables. */
pa_status pa_xpos_cos_sin(const pa_xpos *x, int32_t head_dim, const int32_t *positions, int32_t n,
                          int64_t centre, int sign, float *cos_out, float *sin_out,
                          float *scale_out, pa_error *err);

/* "axial", "pixtral", "dinov3", "mixed"; "separate", "max", "min"; and the
 * inverses (false when unknown). */
const char *pa_rope2d_variant_name(pa_rope2d_variant variant);
bool pa_rope2d_variant_from_name(const char *name, pa_rope2d_variant *out);
const char *pa_rope2d_normalize_name(pa_rope2d_normalize n);
bool pa_rope2d_normalize_from_name(const char *name, pa_rope2d_normalize *out);
/* Checks a rope2d configuration for a head dimension: head_dim a multiple
 * of 4, base finite and > 0, a known variant and layout, grid and ref sizes
 * both set or both 0 (ref needs the grid; ref and grid_offset are axial's),
 * prefix_tokens >= 0. */
pa_status pa_rope2d_check(const pa_rope2d *r, int32_t head_dim, pa_error *err);
/* The rotation part as a plain rope configuration (base and layout), for
 * pa_rope_apply with the tables below. */
void pa_rope2d_rope(const pa_rope2d *r, pa_rope *out);
/* Pair p's frequency (before any ref / grid rescaling) and, in *axis, the
 * coordinate it turns by: 0 the row, 1 the column. head_dim as checked. */
double pa_rope2d_pair(const pa_rope2d *r, int32_t head_dim, int32_t p, int *axis);
/* cos_out, sin_out [n, head_dim/2] for n tokens: pair p of token t turns by
 * the angle above, from positions2 [2, n] (rows, then columns) or, when
 * positions2 is NULL, from the grid (then n must be prefix_tokens +
 * grid_rows * grid_cols, "positions"). Tokens t < prefix_tokens get cos 1,
 * sin 0. Angles in double, rounded once. */
pa_status pa_rope2d_cos_sin(const pa_rope2d *r, int32_t head_dim, const int32_t *positions2,
                            int32_t n, float *cos_out, float *sin_out, pa_error *err);
/* The same for variant mixed, whose angles differ by head: cos_out, sin_out
 * [num_heads, n, head_dim/2], head h from freqs[.., h, ..]; num_freqs must
 * be num_heads * head_dim ("scheme.freqs"). pa_rope2d_cos_sin refuses
 * mixed, and this function every other variant. */
pa_status pa_rope2d_cos_sin_mixed(const pa_rope2d *r, int32_t head_dim, int32_t num_heads,
                                  const int32_t *positions2, int32_t n, float *cos_out,
                                  float *sin_out, pa_error *err);

/* ALiBi slopes for num_heads heads: slopes [num_heads]. Errors: num_heads < 1,
 * max_bias not finite or <= 0. Explicit a->slopes are copied after a length check. */
pa_status pa_alibi_slopes(const pa_alibi *a, int32_t num_heads, float *slopes, pa_error *err);

/* Checks a KERPLE scheme for num_heads heads: r1 and r2 present with
 * num_heads values each, every value finite and >= 0.01, r2 <= 2 for the
 * power form. Errors name the head ("scheme.r2[3]"). */
pa_status pa_kerple_check(const pa_kerple *k, int32_t num_heads, pa_error *err);
/* KERPLE's bias of head h at distance |m - n| (pa_kerple), in double. The
 * scheme must have passed pa_kerple_check. */
double pa_kerple_bias(const pa_kerple *k, int32_t h, double distance);

/* Checks a Sandwich scheme: hidden_size >= 0 (0 takes head_dim, which must
 * then be >= 1). */
pa_status pa_sandwich_check(const pa_sandwich *s, int32_t head_dim, pa_error *err);
/* The hidden size d in effect for head_dim (hidden_size, or head_dim). */
int32_t pa_sandwich_hidden_size(const pa_sandwich *s, int32_t head_dim);
/* Sandwich's bias of head h of num_heads at distance |m - n| for hidden
 * size d (pa_sandwich), in double: O(d) cosines. */
double pa_sandwich_bias(int32_t hidden_size, int32_t num_heads, int32_t h, double distance);

/* Checks a FIRE scheme for num_heads heads: c and L finite, eps finite and
 * > 0, w1 and b1 present with the same length hidden in [1,
 * PA_FIRE_MAX_HIDDEN], w2 with hidden * num_heads values, b2 with
 * num_heads, every value finite. Errors name the field and both figures
 * ("scheme.w2 has 31 values but hidden * num_heads = 32 * 12 = 384") or
 * the element ("scheme.w1[3]"). Does not check causal (pa_attention_check
 * does). */
pa_status pa_fire_check(const pa_fire *f, int32_t num_heads, pa_error *err);
/* FIRE's bias of head h of H for a query at qpos and a key at kpos
 * (pa_fire), in double, the MLP evaluated term by term: O(hidden). The
 * scheme must have passed pa_fire_check. */
double pa_fire_bias(const pa_fire *f, int32_t H, int32_t h, double qpos, double kpos);
/* Checks a CoPE scheme for num_heads heads of head_dim: npos_max in [2,
 * PA_COPE_NPOS_MAX], pos_emb present, pos_emb_heads 1 or num_heads, the
 * rows and columns (when given) npos_max and head_dim, every value of
 * pos_emb finite. Errors name the field ("scheme.npos_max",
 * "scheme.pos_emb", "scheme.pos_emb[h][f][d]"). */
pa_status pa_cope_check(const pa_cope *c, int32_t num_heads, int32_t head_dim, pa_error *err);

/* T5 bucket of a relative position (kpos - qpos), as HF computes it. */
int32_t pa_t5_bucket(int32_t relative_position, bool bidirectional, int32_t num_buckets,
                     int32_t max_distance);
/* Checks num_buckets: even and >= 4 when bidirectional (each direction needs
 * at least one exact bucket), >= 2 when not; and max_distance > max_exact,
 * where max_exact = num_buckets/4 bidirectional, num_buckets/2 causal. */
pa_status pa_t5_check(const pa_t5 *t, pa_error *err);

/* Shaw table row for a relative position: clip(rel, -K, K) + K. */
int32_t pa_shaw_index(int32_t relative_position, int32_t max_relative_position);
/* The table row idx(i, j) of a query at q_position and a key at k_position
 * under s's direction and K (pa_shaw): clip(kpos - qpos, -K, K) + K, or
 * clip(qpos - kpos, -K, K) + K for query_minus_key. Any int32 positions. */
int32_t pa_shaw_pair_index(const pa_shaw *s, int32_t q_position, int32_t k_position);

#endif /* POSATTN_SCHEMES_H */
