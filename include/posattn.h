/* posattn.h - public API of libposattn, the positional-encoding and attention core.
 *
 * libposattn computes positional encodings, multi-head attention under every
 * common positional scheme, and the analyses that explain those schemes. It
 * uses only libc, libm and CBLAS, keeps no global mutable state and starts no
 * threads: every function here is safe to call from many threads at once as
 * long as the buffers they write do not overlap.
 *
 * Conventions used throughout:
 *   - Tensors are dense, row-major float32. Shapes are written [dim0, dim1, ...]
 *     beside every tensor argument.
 *   - Positions are int32 token positions (not indices): q_positions [Lq],
 *     k_positions [Lk].
 *   - Functions that can fail return a pa_status (0 ok, negative error) and
 *     fill an optional pa_error with the field and a message naming the values.
 *     On error, output buffers are left untouched.
 *   - Compute functions never allocate: they take a workspace whose size the
 *     matching *_workspace_size() function reports, so a caller can bound
 *     memory before any work starts. The caller owns every buffer.
 *
 * This file holds the status codes, errors and attention; it includes
 * posattn_schemes.h (each scheme's parameters and formula, the encodings)
 * and posattn_analysis.h (the analyses). posattn_diff.h, included on its
 * own, adds differential attention.
 */
#ifndef POSATTN_H
#define POSATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PA_VERSION_MAJOR 0
#define PA_VERSION_MINOR 1
#define PA_VERSION_PATCH 0
#define PA_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------- */
/* Status codes and errors                                                   */
/* ------------------------------------------------------------------------- */

/* X(name, value, description). The name is the stable machine-readable code
 * (the server sends it as error.code); the description is for people. */
#define PA_STATUS_MAP(X)                                                                           \
    X(OK, 0, "success")                                                                            \
    X(INVALID_ARGUMENT, -1, "an argument is missing or has an invalid value")                      \
    X(SHAPE_MISMATCH, -2, "tensor shapes do not agree")                                            \
    X(OUT_OF_RANGE, -3, "a value or position is outside the allowed range")                        \
    X(UNSUPPORTED, -4, "the combination of options is not supported")                              \
    X(WORKSPACE_TOO_SMALL, -5, "the workspace is smaller than the reported size")                  \
    X(TOO_LARGE, -6, "the sizes overflow the addressable range")

typedef enum pa_status {
#define PA__STATUS_ENUM(name, value, desc) PA_STATUS_##name = (value),
    PA_STATUS_MAP(PA__STATUS_ENUM)
#undef PA__STATUS_ENUM
} pa_status;

/* "OK", "SHAPE_MISMATCH", ...; "UNKNOWN" for a value not in the map. Static. */
const char *pa_status_name(pa_status status);
/* A one-line description of the status. Static storage. */
const char *pa_strerror(pa_status status);

/* Error details filled by fallible functions. `field` names the offending
 * argument the way a request names it ("k.shape[1]", "scheme.rotary_dim",
 * "q_positions[3]"); `message` states the values ("k.shape[1]=3 does not
 * divide num_heads=8"). Both are NUL-terminated and truncated to fit. */
typedef struct pa_error {
    pa_status status;
    char field[64];
    char message[256];
} pa_error;

#include "posattn_schemes.h" /* the schemes and the encodings */

/* ------------------------------------------------------------------------- */
/* Attention                                                                 */
/* ------------------------------------------------------------------------- */

/* Element types of the key and value tensors (pa_attention.kv_dtype). The
 * 16-bit ones are uint16_t bit patterns: bf16 is the top half of an IEEE
 * float32 (widened by a 16-bit shift), f16 is IEEE binary16. Both widen to
 * float32 exactly. */
typedef enum pa_dtype {
    PA_DTYPE_F32 = 0, /* float, the default */
    PA_DTYPE_BF16 = 1,
    PA_DTYPE_F16 = 2,
} pa_dtype;

/* "f32", "bf16", "f16"; "unknown" for a value not in the enum. Static. */
const char *pa_dtype_name(pa_dtype t);

/* Multi-head scaled dot-product attention with a positional scheme.
 *
 * Two input modes:
 *   q/k/v mode (x == NULL):
 *     q [Lq, H, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv]. Absolute schemes
 *     (sinusoidal, learned) need token embeddings and are rejected here.
 *   layer mode (x != NULL), self-attention over L = seq_len tokens:
 *     x [L, d_model]; absolute schemes add their encoding to x; then
 *     q = x w_q + b_q, k = x w_k + b_k, v = x w_v + b_v with w_q [d_model, H*D],
 *     w_k [d_model, Hkv*D], w_v [d_model, Hkv*Dv] and the biases optional
 *     (GPT-2, BERT, Qwen2); then q/k norms; then rope; then attention; then,
 *     if w_o [H*Dv, d_out] is given, output = attn w_o + b_o.
 *
 * q/k RMSNorm (Qwen3, Gemma 3, OLMo 2, Llama 4), in both modes, before rope:
 *   x -> x * (weight + offset) / sqrt(mean(x^2) + eps), the mean over each
 *   head's D values when the weight is [D] (Qwen3, Gemma 3), over the
 *   token's whole projection, H*D (Hkv*D for k), when the weight is that
 *   long (OLMo 2). The multiplier weight + offset is formed in float32;
 *   offset is 0 by default (the weight is the multiplier), and Gemma, which
 *   stores weight - 1 and multiplies by 1 + weight, passes its tensor as
 *   stored with offset 1. Without a weight (q_norm_unweighted):
 *   x / sqrt(mean(x^2) + eps) over each head, Llama 4's L2Norm.
 *
 * Query scaling by position, after the norm and rope (q_rot includes it),
 * with p the query's position (q_positions, or the default):
 *   attn_temperature_tuning (temperature_floor_scale, _attn_scale; Llama
 *   4's NoPE layers, Hugging Face Llama4TextAttention):
 *       q *= log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1;
 *   logn_scaling (logn_train_length = T; Qwen-1's use_logn_attn):
 *       q *= log(p + 1) / log(T) when p + 1 > T, else 1.
 *   Errors name them as a request does ("attn_temperature_tuning.floor_scale",
 *   "logn_scaling.train_length").
 *   The factor of a row is computed in double and rounded to float once
 *   (Hugging Face computes the temperature in float32 op by op, so the two
 *   may differ in the last bit of the factor); with both options, their
 *   product. It is one number per query row, so the keys (k_prerotated
 *   ones too) are untouched. Not with M-RoPE position rows (no one row of
 *   them is the token's position); temperature tuning needs every query
 *   position >= 0.
 *
 * Grouped-query attention: H % Hkv == 0, query head h reads kv head
 * h / (H / Hkv), as torch.repeat_interleave does; nothing is copied.
 *
 * Logits, in this order:
 *   l = scale * q_i.k_j (+ scale * q_i.rel_k, and with key_term + scale *
 *       k_j.rel_k, for shaw), scale default 1/sqrt(D) (1.0 for t5), q and k
 *       after rope;
 *   softcap c > 0: l = c * tanh(l / c) (Gemma 2; as Hugging Face, FlashAttention
 *       and ggml apply it: before position biases and masks. ONNX's Attention
 *       op adds its mask first);
 *   + the scheme's bias (alibi, t5, kerple, sandwich, fire; cope's
 *       position term, pa_cope) + bias[h, i, j] (a -inf entry hides the key);
 *   masks: hidden keys are -inf.
 * Masks, with positions qpos = q_positions[i], kpos = k_positions[j], all
 * combined by AND:
 *   causal      key visible iff kpos <= qpos
 *   window W>0  visible iff qpos - kpos < W, and when not causal also
 *               kpos - qpos < W (a symmetric band)
 *   chunk C>0   visible iff floor(qpos / C) == floor(kpos / C) (Llama 4's
 *               chunked local attention; ggml's chunked SWA)
 *   key_length  keys with index j >= key_length are padding (masked)
 *   mask        mask[h, i, j] == 0 hides key j from query i (by index, not
 *               position; 1 = may attend, as SDPA's and ONNX's bool masks)
 * Sinks (gpt-oss): s_h joins every row's softmax as a logit of its own and
 * is dropped afterwards, w_ij = exp(l_ij - m) / (sum_j exp(l_ij - m) +
 * exp(s_h - m)) with m the row's max over its logits and s_h; s_h is raw
 * (not scaled, softcapped or biased). A row with every key hidden then puts
 * all its weight on the sink: zero output and weights, as without sinks.
 * Defaults: q_positions = Lk-Lq .. Lk-1 and k_positions = 0 .. Lk-1, so the
 * causal mask is bottom-right aligned as in HF with a KV cache and PyTorch
 * SDPA's CausalBias lower-right. In layer mode q and k are the same tokens: one
 * positions array may be given for both, or two equal ones.
 * A query row with every key masked gives a zero output row and zero weights. */
typedef struct pa_attention {
    const pa_scheme *scheme; /* required; borrowed */

    int32_t num_heads;    /* H */
    int32_t num_kv_heads; /* Hkv; 0 = H */
    int32_t head_dim;     /* D */
    int32_t v_head_dim;   /* Dv; 0 = D */

    /* q/k/v mode */
    int32_t q_len, k_len; /* Lq, Lk */
    const float *q;       /* [Lq, H, D] */
    const float *k;       /* [Lk, Hkv, D] */
    const float *v;       /* [Lk, Hkv, Dv] */

    /* layer mode */
    const float *x;  /* [L, d_model]; non-NULL selects layer mode */
    int32_t seq_len; /* L */
    int32_t d_model;
    const float *w_q; /* [d_model, H*D] */
    const float *w_k; /* [d_model, Hkv*D] */
    const float *w_v; /* [d_model, Hkv*Dv] */
    const float *w_o; /* [H*Dv, d_out] or NULL */
    int32_t d_out;

    bool causal;
    int32_t window;             /* 0 = none */
    int32_t key_length;         /* -1 = none; else 0 <= key_length <= Lk */
    const int32_t *q_positions; /* [Lq] or NULL for the default */
    const int32_t *k_positions; /* [Lk] or NULL for the default */
    bool scale_set;             /* false: the scheme's default scale */
    float scale;

    /* Options of current models (see Logits, Masks and Sinks above). Zero
     * and NULL are off, and a descriptor without them computes exactly what
     * it did before they existed. */
    float softcap;       /* 0 = none; else > 0 */
    int32_t chunk_size;  /* 0 = none; else > 0 */
    const float *sinks;  /* [H] finite logits, or NULL */
    const uint8_t *mask; /* [mask_heads, Lq, Lk] 0 or 1, or NULL */
    int32_t mask_heads;  /* 1 (one mask for every head) or H */
    const float *bias;   /* [bias_heads, Lq, Lk] finite or -inf, or NULL */
    int32_t bias_heads;  /* 1 or H */
    const float *q_norm; /* RMSNorm weight [q_norm_len], or NULL */
    int32_t q_norm_len;  /* D (per head) or H*D (the whole projection) */
    float q_norm_eps;    /* > 0 */
    const float *k_norm; /* RMSNorm weight [k_norm_len], or NULL */
    int32_t k_norm_len;  /* D or Hkv*D */
    float k_norm_eps;    /* > 0 */
    /* layer mode: projection biases, each NULL for none */
    const float *b_q; /* [H*D] */
    const float *b_k; /* [Hkv*D] */
    const float *b_v; /* [Hkv*Dv] */
    const float *b_o; /* [d_out] (with w_o) */
    /* rope with mrope_section: the temporal, height and width rows of each
     * token's M-RoPE position, [3, Lq] and [3, Lk] (one array for both in
     * layer mode). They only choose angles: masks follow q_positions and
     * k_positions (token order by default), as Hugging Face's cache
     * positions do. NULL: all three rows are the 1-D positions. */
    const int32_t *q_mrope_positions;
    const int32_t *k_mrope_positions;
    /* rope2d: each token's (row, column) coordinate, [2, Lq] and [2, Lk]
     * (rows first; one array for both in layer mode); NULL: from the
     * scheme's grid (pa_rope2d). Masks follow q_positions / k_positions. */
    const int32_t *q_positions_2d;
    const int32_t *k_positions_2d;
    /* rope, q/k/v mode: k holds keys already rotated at their positions
     * (k_positions, or M-RoPE rows), as a KV cache stores them; only q is
     * rotated, and the keys are read as they are (no k tables are built).
     * Not with k_norm: a cache holds the keys after their norm too. */
    bool k_prerotated;
    /* RMSNorm variants (q/k RMSNorm above). Unweighted: q_norm (k_norm)
     * stays NULL and each head is normalised without a weight. The offsets
     * are added to every value of q_norm (k_norm), in float32; they need
     * that weight. */
    bool q_norm_unweighted;
    bool k_norm_unweighted;
    float q_norm_offset; /* 0 = the weight is the multiplier; finite */
    float k_norm_offset;
    /* Query scaling by position (above). Zero is off. */
    double temperature_floor_scale; /* > 0, finite: attn_temperature_tuning on (Llama 4: 8192) */
    double temperature_attn_scale;  /* > 0, finite, with floor_scale (Llama 4: 0.1) */
    int32_t logn_train_length;      /* >= 2: logn_scaling on (Qwen-1: seq_length) */
    /* Packed sequences (FlashAttention's flash_attn_varlen_func, xFormers'
     * BlockDiagonalMask.from_seqlens): q [Lq, H, D] (x [L, d_model] in
     * layer mode) holds S = num_seqs sequences back to back, sequence s the
     * rows cu_seqlens_q[s] .. cu_seqlens_q[s+1]-1, and k/v theirs by
     * cu_seqlens_k (NULL: the same as cu_seqlens_q, as self-attention
     * has). Both hold S+1 values, 0 = c[0] < c[1] < ... < c[S] = Lq (Lk).
     * Attention is block-diagonal: sequence s's queries see only its keys,
     * and each sequence is computed exactly as the call of that sequence
     * alone would be (bit for bit): default positions restart at 0 in each
     * (q's at Lk_s - Lq_s), causal is bottom-right within each pair, and
     * no off-diagonal pair is ever computed. Given q_positions/k_positions
     * are per packed row and used as they are; M-RoPE rows [3, Lq] are per
     * packed row too. mask and bias keep their full shape [heads, Lq, Lk]
     * and only the diagonal blocks are read. Outputs by row (output,
     * q_rot, k_rot) are packed as the inputs; weights and logits are the
     * sequences' [H, Lq_s, Lk_s] one after the other (sum_s H*Lq_s*Lk_s
     * values), entropy, distance and far_share their [H, Lq_s] one after
     * the other (H*Lq values). The workspace is the largest sequence's plus
     * room for its slices of mask, bias and M-RoPE rows; the parts of
     * pa_attention_run_part each run their share of every sequence (the
     * same bits as one part). Refused with it:
     * key_length (packed rows have no padding), cu_seqlens_k differing from
     * cu_seqlens_q in layer mode, the split by keys
     * (pa_attention_partials_size is 0) and the analyses. Errors name them
     * as a request does: "cu_seqlens", "cu_seqlens_k". NULL: one sequence,
     * exactly as before they existed. */
    const int32_t *cu_seqlens_q; /* [num_seqs + 1], or NULL */
    const int32_t *cu_seqlens_k; /* [num_seqs + 1], or NULL; needs cu_seqlens_q */
    int32_t num_seqs;            /* S >= 1 with cu_seqlens_q */
    /* Paged keys and values, q/k/v mode: a KV cache kept in fixed-size
     * pages, as vLLM's PagedAttention and llama.cpp keep theirs. k and v
     * are NULL; key j is row j % page_tokens of page j / page_tokens:
     * k_pages[p] [page_tokens, Hkv, D] and v_pages[p] [page_tokens, Hkv,
     * Dv], ceil(Lk / page_tokens) pages of each (the last one may be partly
     * used). Pages may sit anywhere and be shared between calls and
     * threads (they are only read). Every result equals the call that
     * sends the same rows in one k and v, bit for bit: the kernels read a
     * page's rows where a contiguous call reads them, and sum values in
     * runs of 8 keys at multiples of 8, which no page splits (page_tokens
     * is a multiple of 16, which leaves room to lengthen the runs). Refused with them: k_norm (a cache
     * keeps its keys normalised, and rotated: k_prerotated), layer mode
     * and packed sequences. Errors name "k_pages", "v_pages",
     * "page_tokens". */
    const float *const *k_pages; /* [ceil(Lk / page_tokens)], or NULL */
    const float *const *v_pages; /* [ceil(Lk / page_tokens)], with k_pages */
    int32_t page_tokens;         /* > 0, a multiple of 16, with k_pages */
    /* Keys and values in 16 bits, q/k/v mode: with PA_DTYPE_BF16 or
     * PA_DTYPE_F16, k, v, k_pages[p] and v_pages[p] point at uint16_t
     * elements of that type (cast to const float *; the shapes, in
     * elements, are as above, and each pointer is aligned as a float's).
     * Each element is widened to float32 exactly where it is read, and
     * everything else is computed in float32 as before: every result
     * equals, bit for bit, the float32 call on the widened arrays, in
     * every kernel and way of splitting a call. The decode kernel reads
     * the 16-bit rows directly (half the bytes of a float cache); the
     * tiled kernel widens one kv head's rows into its workspace. Returned
     * k_rot rows are float32. q and every other tensor stay float32.
     * Refused with it: layer mode (the projections make float32 keys) and
     * the callers that build their own keys (pa_diff_run, pa_mla_run, the
     * analyses). Errors name "kv_dtype". PA_DTYPE_F32 (zero): float32,
     * exactly as before it existed. */
    pa_dtype kv_dtype;
    /* The precision of the two products, as PyTorch's SDPA, FlashAttention
     * and llama.cpp compute bf16 models. PA_DTYPE_F32 (zero): float32
     * throughout, exactly as before it existed. PA_DTYPE_BF16: q (as
     * attention sees it: normalised, rotated, scaled by position) and k
     * are rounded to bf16 (to nearest even; below float's smallest normal,
     * to zero) and q.k is summed in float32 over bf16 pairs, dimensions
     * (2p+1, 2p) in that order, each step rounded once (AVX-512 BF16's
     * vdpbf16ps, which runs it where the CPU has it; the float32 FMA
     * kernels and plain C give the same bits elsewhere: pa_bf16_path());
     * the scale
     * multiplies each sum. Softcap, biases, masks and the softmax's max
     * and sum stay float32; the probabilities are rounded to bf16 before
     * P.v (as FlashAttention rounds them), v is rounded too, and P.v sums
     * in float32 over pairs of keys (2t+1, 2t), a tile of keys at a time
     * as the kernel folds them. Shaw's tables, CoPE's gates and the
     * returned weights and logits are float32 of those logits. Every
     * query count runs the tiled kernel (the decode kernel is float32's),
     * and results do not depend on the path or the split into parts.
     * Error against exact attention: about bf16's 2^-8 relative, growing
     * like sqrt(head_dim) (docs/performance.md). PA_DTYPE_F16: refused
     * (UNSUPPORTED). Errors name "compute_dtype". */
    pa_dtype compute_dtype;
} pa_attention;

/* Optional and required outputs. All caller-owned. Zero the struct before
 * setting what you want ({0} or memset): NULL is "not wanted", and fields
 * are added here over time. */
typedef struct pa_attention_out {
    float *output;  /* required: [Lq, H, Dv]; in layer mode with w_o, [L, d_out] */
    float *weights; /* optional: [H, Lq, Lk] softmax weights (packed: per sequence, above) */
    float *logits;  /* optional: [H, Lq, Lk] pre-softmax logits, masked = -INFINITY */
    float *q_rot;   /* optional: [Lq, H, D] q as attention sees it (rotated for rope) */
    float *k_rot;   /* optional: [Lk, Hkv, D] */
    /* Per-row statistics of the softmax weights w_ij, computed inside the
     * kernels from the running softmax state (no weights matrix is formed):
     * entropy [H, Lq] = -sum_j w_ij ln w_ij over the visible keys (in nats),
     * distance [H, Lq] = sum_j w_ij |qpos_i - kpos_j| (the mean attended
     * distance, in positions). With sinks the w_ij are the returned weights,
     * which sum to 1 minus the sink's share: the sink is not a key, so it
     * adds no term to either sum (its share only scales the keys' weights
     * down). A fully masked row has 0 for both. */
    float *entropy;  /* optional: [H, Lq] */
    float *distance; /* optional: [H, Lq] */
    /* far_share [H, Lq] = sum_j w_ij over the keys with |qpos_i - kpos_j| >
     * far_distance: the weight a row puts past a distance (say, the
     * training length), from the same state. */
    float *far_share;     /* optional: [H, Lq] */
    int32_t far_distance; /* >= 0; read only with far_share */
} pa_attention_out;

/* Zeroes *a and sets num_kv_heads 0 (= H), key_length -1, window 0. */
void pa_attention_init(pa_attention *a, const pa_scheme *scheme);

/* Validates everything: shapes, scheme parameters against the shapes, table
 * sizes, positions (learned rows in range), masks. O(Lq + Lk). */
pa_status pa_attention_check(const pa_attention *a, pa_error *err);

/* Bytes of workspace pa_attention_run needs for *a (which must have passed
 * pa_attention_check). Independent of which optional outputs are requested,
 * and O(L * (H*D + d_model)) at most but for Shaw's key term: without layer
 * mode it holds one kv head's keys (transposed) and values (gathered, when
 * num_kv_heads > 1), and with rope the cos and sin tables, so it grows with
 * the length by about k_len * (head_dim + v_head_dim) floats (plus q_len *
 * rotary_dim with rope), whatever the head count. Shaw with key_term adds
 * one kv head's key term by table row, k_len * n floats, n <= 2K+1 the rows
 * the call's positions reach (at most the span of qpos - kpos plus one): it
 * depends on the positions, so size each descriptor that has positions of
 * its own. cope adds one block row of its position terms and q.E: 64 *
 * (k_len rounded up to 16, + 16, + npos_max) floats (a block is 64
 * queries). 16-bit keys and values (kv_dtype) add, for the tiled kernel,
 * one kv head's rows widened (k_len * (head_dim + v_head_dim) floats, which
 * paged and GQA calls hold already), and for the decode kernel 4 * head_dim
 * + 16 * v_head_dim floats. compute_dtype bf16 adds one kv head's keys
 * and values rounded for its products (about k_len * (head_dim +
 * v_head_dim) floats, rounded up to even sizes) and a block's queries and
 * probabilities (64 * (head_dim + 1026) floats). Beside these, the tiled
 * kernel's logits for a block of queries and a tile of keys: 64 * min(k_len,
 * 1024) floats (1024 keys a tile, or POSATTN_TILE_KEYS from the
 * environment; docs/api.md). Returns 0 if the size overflows. */
size_t pa_attention_workspace_size(const pa_attention *a);

/* Effective sizes after defaults: useful for sizing outputs. With packed
 * sequences the lengths are the totals. */
int32_t pa_attention_q_len(const pa_attention *a);
int32_t pa_attention_k_len(const pa_attention *a);
float pa_attention_scale(const pa_attention *a);
/* Values of out->weights (and logits) for a checked descriptor: H*Lq*Lk,
 * or with packed sequences sum_s H*Lq_s*Lk_s. */
size_t pa_attention_weights_len(const pa_attention *a);

/* Runs attention. Validates *a again (cheaply), so a bad descriptor is a
 * status, never a crash. Finite inputs whose products overflow float32 make
 * it return PA_STATUS_OUT_OF_RANGE after the fact (field "q", or "x" in layer
 * mode); the outputs are then unspecified, never silently NaN-free garbage. ws is at least
 * pa_attention_workspace_size(a) bytes, aligned to 64 bytes ideally (16 at least). Single-threaded
 * apart from what the CBLAS library does inside sgemm.
 *
 * Subnormals: on x86-64 the call sets flush-to-zero (FTZ, not DAZ) on the
 * calling thread for its duration and restores the caller's MXCSR after.
 * Inputs that are subnormal are read as they are; a result, or an
 * intermediate product, below float32's smallest normal (about 1.2e-38)
 * becomes 0, so an output, weight or logit that small reads as 0 (the
 * reference's value differs from it by less than 1.2e-38). The same holds
 * for every pa_attention_* call that runs the kernels. */
pa_status pa_attention_run(const pa_attention *a, const pa_attention_out *out, void *ws,
                           size_t ws_size, pa_error *err);

/* One share of pa_attention_run, for callers that spread one call over
 * threads: the work (query heads x blocks of queries) is cut into nparts
 * contiguous shares, and running parts 0 .. nparts-1 (in any order, on any
 * threads, concurrently, each with its own workspace of
 * pa_attention_workspace_size(a) bytes) writes exactly what pa_attention_run
 * writes. Parts write disjoint parts of every output. q/k/v mode only: in
 * layer mode nparts must be 1 (PA_STATUS_UNSUPPORTED otherwise). */
pa_status pa_attention_run_part(const pa_attention *a, const pa_attention_out *out, int32_t part,
                                int32_t nparts, void *ws, size_t ws_size, pa_error *err);

/* Split by keys, as flash-decoding does. Decode (a few query rows against a
 * long cache) is bound by reading k and v; parts that split the query heads
 * would each read their heads' share, but one kv head cannot be split so,
 * and q_len <= 8 rows per head leave nothing else to split. These parts
 * split the visible keys instead: part p (any order, any thread,
 * concurrently, each with its own workspace of pa_attention_workspace_size
 * bytes) leaves the partial softmax state of every query row (running max,
 * sum, unnormalised output) in its slice of `partials`, a buffer of
 * pa_attention_partials_size(a, out, nparts) bytes shared by the nparts
 * parts; once every part has returned, pa_attention_merge writes
 * out->output (and weights, from the logits the parts left). Each part
 * writes its keys' logits and k_rot rows; part 0 writes q_rot. The result
 * agrees with pa_attention_run to float rounding, not bit for bit: the
 * shares' sums are added in another order.
 *
 * pa_attention_partials_size is 0 when a call cannot be split so: layer
 * mode, more than 8 query rows, or Shaw tables; use pa_attention_run_part
 * then. (Calls of at most 8 query rows without Shaw run this decode kernel
 * in pa_attention_run and pa_attention_run_part too, whatever they return;
 * longer ones the tiled kernel.) An overflow (PA_STATUS_OUT_OF_RANGE, as
 * from pa_attention_run) is reported by pa_attention_merge. */
size_t pa_attention_partials_size(const pa_attention *a, const pa_attention_out *out,
                                  int32_t nparts);
pa_status pa_attention_run_keys(const pa_attention *a, const pa_attention_out *out, int32_t part,
                                int32_t nparts, void *partials, void *ws, size_t ws_size,
                                pa_error *err);
pa_status pa_attention_merge(const pa_attention *a, const pa_attention_out *out, int32_t nparts,
                             const void *partials, pa_error *err);

/* The kernels this process runs, chosen at run time: "avx512" (FMA
 * micro-kernels where the CPU has AVX-512F), "avx2" (where it has AVX2, FMA
 * and F16C but not AVX-512: the tile products as AVX2 FMA micro-kernels,
 * the softmax's max and exp passes and the decode kernel's row loops as
 * AVX2 code that computes the plain C's bits, the same fused multiply-adds
 * in the same order, widening 16-bit keys and values (kv_dtype) in
 * registers) or "portable" (plain C and OpenBLAS). The environment
 * variable POSATTN_KERNEL, read at the first call, forces "portable" or,
 * on a CPU with AVX-512, "avx2". */
const char *pa_kernel_name(void);

/* What computes compute_dtype bf16's products: "avx512_bf16" (vdpbf16ps,
 * on CPUs with AVX-512 BF16), "fma" (the float32 FMA tile kernels of
 * "avx512" or "avx2", fed the rounded values with each pair's elements
 * swapped, at float32's speed) or "portable" (plain C, also under
 * POSATTN_KERNEL=portable). All three give the same bits. */
const char *pa_bf16_path(void);

#include "posattn_analysis.h" /* the analyses */

#ifdef __cplusplus
}
#endif
#endif /* POSATTN_H */
