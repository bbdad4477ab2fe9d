/* attention_check.c - validation of a pa_attention descriptor and the
 * defaults every later step relies on (lengths, kv heads, scale).
 *
 * Everything a request can get wrong is caught here and reported with the
 * field and the values; the kernels in attention.c then only assert.
 */
#include "attention_plan.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pa_attention_init(pa_attention *a, const pa_scheme *scheme)
{
    memset(a, 0, sizeof *a);
    a->scheme = scheme;
    a->key_length = -1;
}

int32_t pa_attention_q_len(const pa_attention *a)
{
    return a->x != NULL ? a->seq_len : a->q_len;
}

int32_t pa_attention_k_len(const pa_attention *a)
{
    return a->x != NULL ? a->seq_len : a->k_len;
}

float pa_attention_scale(const pa_attention *a)
{
    if (a->scale_set)
        return a->scale;
    if (a->scheme != NULL && a->scheme->type == PA_SCHEME_T5)
        return 1.0f;
    return a->head_dim > 0 ? (float)(1.0 / sqrt((double)a->head_dim)) : 1.0f;
}

/* Rejects sizes whose element counts overflow, or whose leading dimensions
 * do not fit the int that CBLAS takes. */
static pa_status check_extent(pa_error *err, const char *field, int64_t rows, int64_t cols)
{
    if (cols > INT32_MAX)
        return pa__fail(err, PA_STATUS_TOO_LARGE, field,
                        "%s has %lld values per row; at most %d are supported", field,
                        (long long)cols, INT32_MAX);
    if (rows > 0 && (uint64_t)cols > (uint64_t)SIZE_MAX / sizeof(float) / (uint64_t)rows)
        return pa__fail(err, PA_STATUS_TOO_LARGE, field,
                        "%s with %lld x %lld values overflows the address space", field,
                        (long long)rows, (long long)cols);
    return PA_STATUS_OK;
}

static pa_status check_positive(pa_error *err, const char *field, int32_t value)
{
    if (value < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field, "%s=%d must be at least 1", field,
                        (int)value);
    return PA_STATUS_OK;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        pa_status st_ = (expr);                                                                    \
        if (st_ != PA_STATUS_OK)                                                                   \
            return st_;                                                                            \
    } while (0)

static pa_status check_layer_inputs(const pa_attention *a, int32_t H, int32_t Hkv, int32_t D,
                                    int32_t Dv, pa_error *err)
{
    if (a->q != NULL || a->k != NULL || a->v != NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "x",
                        "send either q, k and v, or x with w_q, w_k and w_v, not both");
    if (a->k_pages != NULL || a->v_pages != NULL || a->page_tokens != 0)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "k_pages",
                        "paged keys and values are q/k/v mode's: in layer mode the keys are "
                        "projected from x");
    if (a->kv_dtype != PA_DTYPE_F32)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "kv_dtype",
                        "kv_dtype=%s is q/k/v mode's: in layer mode the keys and values are "
                        "projected from x, in float32",
                        pa_dtype_name(a->kv_dtype));
    TRY(check_positive(err, "x.shape[0]", a->seq_len));
    TRY(check_positive(err, "x.shape[1]", a->d_model));
    if (a->w_q == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "w_q", "layer mode needs w_q");
    if (a->w_k == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "w_k", "layer mode needs w_k");
    if (a->w_v == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "w_v", "layer mode needs w_v");
    TRY(check_extent(err, "x", a->seq_len, a->d_model));
    TRY(check_extent(err, "w_q", a->d_model, (int64_t)H * D));
    TRY(check_extent(err, "w_k", a->d_model, (int64_t)Hkv * D));
    TRY(check_extent(err, "w_v", a->d_model, (int64_t)Hkv * Dv));
    if (a->w_o != NULL) {
        TRY(check_positive(err, "w_o.shape[1]", a->d_out));
        TRY(check_extent(err, "w_o", (int64_t)H * Dv, a->d_out));
        TRY(check_extent(err, "output", a->seq_len, a->d_out));
    }
    return PA_STATUS_OK;
}

/* Paged keys and values (posattn.h): both page tables, a page size that
 * keeps the decode kernel's runs of keys (PA__VRUN) whole, every page there, no k or v beside them.
 */
static pa_status check_pages(const pa_attention *a, pa_error *err)
{
    int64_t n;
    if (a->k != NULL || a->v != NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, a->k != NULL ? "k" : "v",
                        "send k and v, or k_pages and v_pages, not both");
    if (a->k_pages == NULL || a->v_pages == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, a->k_pages == NULL ? "k_pages" : "v_pages",
                        "paged keys and values need k_pages, v_pages and page_tokens together");
    if (a->page_tokens <= 0 || a->page_tokens % 16 != 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "page_tokens",
                        "page_tokens=%d must be a positive multiple of 16 (the kernels sum "
                        "values in runs of keys, which a page must not split)",
                        (int)a->page_tokens);
    if (a->k_norm != NULL || a->k_norm_unweighted)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "k_norm",
                        "k_norm with paged keys: a cache keeps its keys normalised already");
    if (a->cu_seqlens_q != NULL || a->cu_seqlens_k != NULL)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "cu_seqlens",
                        "packed sequences and paged keys do not go together");
    TRY(check_positive(err, "k.shape[0]", a->k_len));
    n = ((int64_t)a->k_len + a->page_tokens - 1) / a->page_tokens;
    for (int64_t i = 0; i < n; i++)
        if (a->k_pages[i] == NULL || a->v_pages[i] == NULL)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT,
                            a->k_pages[i] == NULL ? "k_pages" : "v_pages",
                            "%s[%lld] is NULL: %d keys of %d per page fill %lld pages",
                            a->k_pages[i] == NULL ? "k_pages" : "v_pages", (long long)i,
                            (int)a->k_len, (int)a->page_tokens, (long long)n);
    return PA_STATUS_OK;
}

static pa_status check_qkv_inputs(const pa_attention *a, int32_t H, int32_t Hkv, int32_t D,
                                  int32_t Dv, pa_error *err)
{
    pa_scheme_type t = a->scheme->type;
    if (t == PA_SCHEME_SINUSOIDAL || t == PA_SCHEME_LEARNED)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "scheme.type",
                        "scheme '%s' adds positions to the token embeddings before the "
                        "projections: send x with w_q, w_k and w_v (layer mode) instead of "
                        "q, k and v",
                        pa_scheme_type_name(t));
    if (a->q == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "q",
                        "q is required (or x for layer mode)");
    if (a->k_pages != NULL || a->v_pages != NULL || a->page_tokens != 0)
        TRY(check_pages(a, err));
    else if (a->k == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "k", "k is required");
    else if (a->v == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "v", "v is required");
    TRY(check_positive(err, "q.shape[0]", a->q_len));
    TRY(check_positive(err, "k.shape[0]", a->k_len));
    TRY(check_extent(err, "q", a->q_len, (int64_t)H * D));
    TRY(check_extent(err, "k", a->k_len, (int64_t)Hkv * D));
    TRY(check_extent(err, "v", a->k_len, (int64_t)Hkv * Dv));
    return PA_STATUS_OK;
}

static pa_status check_positions(const pa_attention *a, int32_t Lq, int32_t Lk, pa_error *err)
{
    if (a->q_mrope_positions != NULL || a->k_mrope_positions != NULL) {
        const pa_rope *r = &a->scheme->rope;
        const char *field =
            a->q_mrope_positions != NULL ? "q_mrope_positions" : "k_mrope_positions";
        if (a->scheme->type != PA_SCHEME_ROPE ||
            (r->mrope_section[0] == 0 && r->mrope_section[1] == 0 && r->mrope_section[2] == 0))
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                            "%s are M-RoPE positions [3, L]: they need scheme rope with "
                            "mrope_section",
                            field);
        if (a->x != NULL && a->q_mrope_positions != NULL && a->k_mrope_positions != NULL &&
            memcmp(a->q_mrope_positions, a->k_mrope_positions, 3 * (size_t)Lq * sizeof(int32_t)))
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "q_mrope_positions",
                            "in layer mode q and k are the same tokens, but q_mrope_positions "
                            "differs from k_mrope_positions");
    }
    if (a->q_positions_2d != NULL || a->k_positions_2d != NULL) {
        const char *field = a->q_positions_2d != NULL ? "q_positions_2d" : "k_positions_2d";
        if (a->scheme->type != PA_SCHEME_ROPE2D)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                            "%s are (row, column) coordinates [2, L]: they need scheme rope2d, "
                            "not '%s'",
                            field, pa_scheme_type_name(a->scheme->type));
        if (a->x != NULL && a->q_positions_2d != NULL && a->k_positions_2d != NULL &&
            memcmp(a->q_positions_2d, a->k_positions_2d, 2 * (size_t)Lq * sizeof(int32_t)))
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "q_positions_2d",
                            "in layer mode q and k are the same tokens, but q_positions_2d "
                            "differs from k_positions_2d");
    }
    if (a->scheme->type == PA_SCHEME_ROPE2D) {
        /* Each side needs coordinates: its own, or the grid's. */
        const pa_rope2d *r = &a->scheme->rope2d;
        const int64_t cells = (int64_t)r->grid_rows * r->grid_cols;
        const bool q2 = a->q_positions_2d != NULL || (a->x != NULL && a->k_positions_2d != NULL);
        const bool k2 = a->k_positions_2d != NULL || (a->x != NULL && a->q_positions_2d != NULL);
        const int32_t lens[2] = {Lq, Lk};
        const bool given[2] = {q2, k2 || a->k_prerotated};
        for (int side = 0; side < 2; side++) {
            const char *field = side == 0 ? "q_positions_2d" : "k_positions_2d";
            if (given[side])
                continue;
            if (cells == 0)
                return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                                "rope2d needs each %s's (row, column): send the %s positions "
                                "[2, %d] or the scheme's grid (rows, cols)",
                                side == 0 ? "query" : "key", side == 0 ? "q" : "k",
                                (int)lens[side]);
            if ((int64_t)lens[side] != r->prefix_tokens + cells)
                return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, field,
                                "%s has %d tokens, but a grid of %d x %d patches after %d "
                                "prefix tokens is %lld: send its positions [2, %d]",
                                side == 0 ? "q" : "k", (int)lens[side], (int)r->grid_rows,
                                (int)r->grid_cols, (int)r->prefix_tokens,
                                (long long)(r->prefix_tokens + cells), (int)lens[side]);
        }
    }
    /* In layer mode the queries and keys are the same tokens. */
    if (a->x != NULL && a->q_positions != NULL && a->k_positions != NULL) {
        for (int32_t i = 0; i < Lq; i++) {
            if (a->q_positions[i] != a->k_positions[i]) {
                char field[32];
                snprintf(field, sizeof field, "q_positions[%d]", (int)i);
                return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                                "in layer mode q and k are the same tokens, but "
                                "q_positions[%d]=%d differs from k_positions[%d]=%d",
                                (int)i, (int)a->q_positions[i], (int)i, (int)a->k_positions[i]);
            }
        }
    }
    if (a->scheme->type == PA_SCHEME_LEARNED) {
        const pa_learned *l = &a->scheme->learned;
        const int32_t *pos = a->k_positions != NULL ? a->k_positions : a->q_positions;
        const char *field = pos == a->q_positions && pos != NULL ? "q_positions" : "k_positions";
        /* NULL: the default positions 0 .. L-1. */
        return pa__learned_check(l, a->d_model, pos, Lk, field, err);
    }
    (void)Lq;
    return PA_STATUS_OK;
}

static pa_status check_scheme(const pa_attention *a, int32_t H, int32_t D, int32_t Dv,
                              pa_error *err)
{
    const pa_scheme *s = a->scheme;
    switch (s->type) {
    case PA_SCHEME_NONE:
        return PA_STATUS_OK;
    case PA_SCHEME_SINUSOIDAL:
        /* Zero positions: checks the parameters against d_model only. */
        return pa_sinusoidal_encode(&s->sinusoidal, NULL, 0, a->d_model, NULL, err);
    case PA_SCHEME_LEARNED:
        return PA_STATUS_OK; /* checked with the positions */
    case PA_SCHEME_SHAW:
        return pa__shaw_check(&s->shaw, D, Dv, err);
    case PA_SCHEME_T5:
        return pa__t5_check_table(&s->t5, H, err);
    case PA_SCHEME_ROPE:
        return pa_rope_check(&s->rope, D, err);
    case PA_SCHEME_ALIBI:
        return pa__alibi_check(&s->alibi, H, err);
    case PA_SCHEME_KERPLE:
        return pa_kerple_check(&s->kerple, H, err);
    case PA_SCHEME_SANDWICH:
        return pa_sandwich_check(&s->sandwich, D, err);
    case PA_SCHEME_XPOS:
        return pa_xpos_check(&s->xpos, D, err);
    case PA_SCHEME_ROPE2D: {
        const pa_status st = pa_rope2d_check(&s->rope2d, D, err);
        if (st != PA_STATUS_OK || s->rope2d.variant != PA_ROPE2D_MIXED)
            return st;
        if ((a->num_kv_heads ? a->num_kv_heads : H) != H)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "num_kv_heads",
                            "rope2d mixed turns every head by its own frequencies, so a key "
                            "head serves one query head: num_kv_heads=%d must equal "
                            "num_heads=%d",
                            (int)a->num_kv_heads, (int)H);
        if ((int64_t)s->rope2d.num_freqs != (int64_t)H * D)
            return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.freqs",
                            "scheme.freqs has %d values but [2, H, D/2] is 2 x %d x %d = %lld",
                            (int)s->rope2d.num_freqs, (int)H, (int)(D / 2), (long long)H * D);
        return PA_STATUS_OK;
    }
    case PA_SCHEME_FIRE:
        if (!a->causal)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "causal",
                            "fire needs causal=true: its normaliser psi(max(i, |L|)) is over "
                            "the keys at or before query position i, as in the causal decoder "
                            "that defines it (mcleish7/arithmetic FIRE)");
        return pa_fire_check(&s->fire, H, err);
    case PA_SCHEME_COPE:
        return pa_cope_check(&s->cope, H, D, err);
    case PA_SCHEME_COUNT:
        break;
    }
    return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.type", "unknown scheme type %d",
                    (int)s->type);
}

static pa_status check_norm(pa_error *err, const char *name, const float *w, int32_t len, float eps,
                            bool unweighted, float offset, int32_t D, int32_t heads)
{
    char field[40]; /* the field's name, written only for an error: every call is checked */
    if ((offset != 0.0f && w == NULL) || !isfinite(offset))
        snprintf(field, sizeof field, "%s.weight_offset", name);
    if (offset != 0.0f && w == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                        "%s.weight_offset=%g is added to %s.weight, but there is no weight", name,
                        (double)offset, name);
    if (!isfinite(offset))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field, "%s.weight_offset must be finite",
                        name);
    if (w != NULL && unweighted) {
        snprintf(field, sizeof field, "%s.weight", name);
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                        "%s has a weight and is marked unweighted: one or the other", name);
    }
    if (w == NULL && !unweighted)
        return PA_STATUS_OK;
    if (w != NULL && len != D && len != heads * D) {
        snprintf(field, sizeof field, "%s.weight", name);
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, field,
                        "%s.weight has %d values; it needs head_dim=%d (per head) or %d*%d=%d "
                        "(the whole projection)",
                        name, (int)len, (int)D, (int)heads, (int)D, (int)(heads * D));
    }
    if (!(eps > 0.0f) || !isfinite(eps)) {
        snprintf(field, sizeof field, "%s.eps", name);
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, field,
                        "%s.eps=%g must be a positive number (a zero row would divide by zero)",
                        name, (double)eps);
    }
    return PA_STATUS_OK;
}

/* softcap, chunk_size, sinks, mask, bias, norms and projection biases (the
 * options of current models). */
static pa_status check_options(const pa_attention *a, int32_t H, int32_t Hkv, int32_t D,
                               pa_error *err)
{
    static const char *const layer_only[] = {"b_q", "b_k", "b_v", "b_o"};
    const float *const biases[] = {a->b_q, a->b_k, a->b_v, a->b_o};
    for (int i = 0; i < 4; i++) {
        if (biases[i] != NULL && a->x == NULL)
            return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, layer_only[i],
                            "%s is a projection bias: it needs layer mode (x with w_q, w_k, "
                            "w_v)",
                            layer_only[i]);
    }
    if (a->b_o != NULL && a->w_o == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "b_o", "b_o needs w_o");
    if (a->k_prerotated && a->scheme->type != PA_SCHEME_ROPE && a->scheme->type != PA_SCHEME_XPOS &&
        a->scheme->type != PA_SCHEME_ROPE2D)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "k_prerotated",
                        "k_prerotated says k is already rotated by rope, xpos or rope2d, but the "
                        "scheme is '%s'",
                        pa_scheme_type_name(a->scheme->type));
    if (a->k_prerotated && a->x != NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "k_prerotated",
                        "k_prerotated needs q, k, v: in layer mode the keys are projected from x "
                        "here, and rotated here");
    if (a->k_prerotated && (a->k_norm != NULL || a->k_norm_unweighted))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "k_norm",
                        "k_norm with k_prerotated: keys rotated already were normalised before "
                        "(a KV cache holds them after both); leave k_norm out");
    TRY(check_norm(err, "q_norm", a->q_norm, a->q_norm_len, a->q_norm_eps, a->q_norm_unweighted,
                   a->q_norm_offset, D, H));
    TRY(check_norm(err, "k_norm", a->k_norm, a->k_norm_len, a->k_norm_eps, a->k_norm_unweighted,
                   a->k_norm_offset, D, Hkv));
    if (!(a->softcap >= 0.0f) || !isfinite(a->softcap))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "softcap",
                        "softcap=%g must be a positive number (or 0 for none)", (double)a->softcap);
    if (a->chunk_size < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "chunk_size",
                        "chunk_size=%d must be 0 (none) or positive", (int)a->chunk_size);
    if (a->sinks != NULL) {
        for (int32_t h = 0; h < H; h++) {
            if (!isfinite(a->sinks[h])) {
                char field[32];
                snprintf(field, sizeof field, "sinks[%d]", (int)h);
                return pa__fail(err, PA_STATUS_OUT_OF_RANGE, field, "%s must be finite", field);
            }
        }
    }
    if (a->mask != NULL && a->mask_heads != 1 && a->mask_heads != H)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "mask.shape[0]",
                        "mask has %d heads; it needs 1 (shared) or num_heads=%d",
                        (int)a->mask_heads, (int)H);
    if (a->bias != NULL && a->bias_heads != 1 && a->bias_heads != H)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "bias.shape[0]",
                        "bias has %d heads; it needs 1 (shared) or num_heads=%d",
                        (int)a->bias_heads, (int)H);
    return PA_STATUS_OK;
}

pa_status pa__check_one(const pa_attention *a, pa_error *err)
{
    int32_t H, Hkv, D, Dv, Lq, Lk;

    if (a == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "", "no attention descriptor");
    if (a->scheme == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "scheme is required");
    if ((unsigned)a->scheme->type >= (unsigned)PA_SCHEME_COUNT)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.type", "unknown scheme type %d",
                        (int)a->scheme->type);

    TRY(check_positive(err, "num_heads", a->num_heads));
    TRY(check_positive(err, "head_dim", a->head_dim));
    if (a->num_kv_heads < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "num_kv_heads",
                        "num_kv_heads=%d must be at least 1 (or 0 for num_heads)",
                        (int)a->num_kv_heads);
    if (a->v_head_dim < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "v_head_dim",
                        "v_head_dim=%d must be at least 1 (or 0 for head_dim)", (int)a->v_head_dim);
    H = a->num_heads;
    Hkv = a->num_kv_heads ? a->num_kv_heads : H;
    D = a->head_dim;
    Dv = a->v_head_dim ? a->v_head_dim : D;
    if (H % Hkv != 0)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "num_kv_heads",
                        "num_kv_heads=%d does not divide num_heads=%d", (int)Hkv, (int)H);
    if (a->kv_dtype != PA_DTYPE_F32 && a->kv_dtype != PA_DTYPE_BF16 && a->kv_dtype != PA_DTYPE_F16)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "kv_dtype",
                        "kv_dtype=%d is not one of f32 (%d), bf16 (%d), f16 (%d)", (int)a->kv_dtype,
                        (int)PA_DTYPE_F32, (int)PA_DTYPE_BF16, (int)PA_DTYPE_F16);
    if (a->compute_dtype == PA_DTYPE_F16)
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "compute_dtype",
                        "compute_dtype=f16 is not built: f16 products need AVX-512 FP16 for "
                        "speed, and posattn computes in f32 or bf16 (compute_dtype=bf16 takes f16 "
                        "inputs' 8 significant bits, compute_dtype=f32 all of them)");
    if (a->compute_dtype != PA_DTYPE_F32 && a->compute_dtype != PA_DTYPE_BF16)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "compute_dtype",
                        "compute_dtype=%d is not one of f32 (%d), bf16 (%d)", (int)a->compute_dtype,
                        (int)PA_DTYPE_F32, (int)PA_DTYPE_BF16);

    if (a->x != NULL)
        TRY(check_layer_inputs(a, H, Hkv, D, Dv, err));
    else
        TRY(check_qkv_inputs(a, H, Hkv, D, Dv, err));
    Lq = pa_attention_q_len(a);
    Lk = pa_attention_k_len(a);
    TRY(check_extent(err, "output", Lq, (int64_t)H * Dv));
    /* Weights and logits are [H, Lq, Lk]; their sizes must be representable
     * even when not requested, so a caller can always size them. */
    TRY(check_extent(err, "weights", (int64_t)H * Lq, Lk));

    if (a->window < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "window",
                        "window=%d must be 0 (none) or positive", (int)a->window);
    if (a->key_length < -1 || a->key_length > Lk)
        return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "key_length",
                        "key_length=%d must be between 0 and the %d keys (or -1 for none)",
                        (int)a->key_length, (int)Lk);
    if (a->scale_set && !isfinite(a->scale))
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scale", "scale must be finite");
    TRY(check_options(a, H, Hkv, D, err));

    TRY(check_scheme(a, H, D, Dv, err));
    TRY(check_positions(a, Lq, Lk, err));
    TRY(pa__qscale_check(a, Lq, Lk, err));
    return PA_STATUS_OK;
}

static int32_t tile_keys_from_env(void)
{
    const char *s = getenv("POSATTN_TILE_KEYS");
    char *end;
    long v;
    if (s == NULL)
        return PA__TILE_KEYS;
    v = strtol(s, &end, 10);
    return end != s && *end == '\0' && v >= 16 && v <= 8192 && v % 16 == 0 ? (int32_t)v
                                                                           : PA__TILE_KEYS;
}

int32_t pa__tile_keys(void)
{
    /* 0 until the first call; racing first calls store the same answer. */
    static _Atomic int32_t cached = 0;
    int32_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v == 0) {
        v = tile_keys_from_env();
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

void pa__plan_init(pa__plan *p, const pa_attention *a)
{
    memset(p, 0, sizeof *p);
    p->a = a;
    p->scheme = a->scheme;
    p->layer = a->x != NULL;
    p->H = a->num_heads;
    p->Hkv = a->num_kv_heads ? a->num_kv_heads : a->num_heads;
    p->group = p->H / p->Hkv;
    p->D = a->head_dim;
    p->Dv = a->v_head_dim ? a->v_head_dim : a->head_dim;
    p->Lq = pa_attention_q_len(a);
    p->Lk = pa_attention_k_len(a);
    p->scale = pa_attention_scale(a);
    p->key_len = a->key_length < 0 ? p->Lk : a->key_length;
    p->xpos = a->scheme->type == PA_SCHEME_XPOS;
    p->rope2d = a->scheme->type == PA_SCHEME_ROPE2D;
    p->rope = a->scheme->type == PA_SCHEME_ROPE || p->xpos || p->rope2d;
    p->rope_heads = p->rope2d && a->scheme->rope2d.variant == PA_ROPE2D_MIXED ? a->num_heads : 1;
    if (p->xpos)
        pa_xpos_rope(&a->scheme->xpos, &p->rope_cfg);
    else if (p->rope2d)
        pa_rope2d_rope(&a->scheme->rope2d, &p->rope_cfg);
    else
        p->rope_cfg = a->scheme->rope;
    p->r = p->rope ? pa_rope_rotary_dim(&p->rope_cfg, p->D) : 0;
    p->absolute = a->scheme->type == PA_SCHEME_SINUSOIDAL || a->scheme->type == PA_SCHEME_LEARNED;
    p->q_norm = a->q_norm != NULL || a->q_norm_unweighted;
    p->k_norm = a->k_norm != NULL || a->k_norm_unweighted;
    p->q_scale = pa__qscale_on(a);
    p->cbf16 = a->compute_dtype == PA_DTYPE_BF16;
    p->bk = pa__tile_keys();
    if (p->layer) {
        /* One sequence: either positions array names both. */
        p->q_positions = a->q_positions != NULL ? a->q_positions : a->k_positions;
        p->k_positions = a->k_positions != NULL ? a->k_positions : a->q_positions;
        p->q_mrope = a->q_mrope_positions != NULL ? a->q_mrope_positions : a->k_mrope_positions;
        p->k_mrope = a->k_mrope_positions != NULL ? a->k_mrope_positions : a->q_mrope_positions;
        p->q_pos2 = a->q_positions_2d != NULL ? a->q_positions_2d : a->k_positions_2d;
        p->k_pos2 = a->k_positions_2d != NULL ? a->k_positions_2d : a->q_positions_2d;
    } else {
        p->q_positions = a->q_positions;
        p->k_positions = a->k_positions;
        p->q_mrope = a->q_mrope_positions;
        p->k_mrope = a->k_mrope_positions;
        p->q_pos2 = a->q_positions_2d;
        p->k_pos2 = a->k_positions_2d;
    }
}
