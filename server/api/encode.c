/* encode.c - POST /v1/encode: the positional signal of a scheme by
 * itself, without attention. Absolute schemes and rope take n positions
 * (`length` or `positions`); relative schemes take query and key positions
 * (`q_length`/`k_length` or `q_positions`/`k_positions`).
 *
 *   sinusoidal, learned  encoding [n, dim]
 *   rope                 inv_freq [r/2], cos and sin [n, r/2] (times the
 *                        attention factor), attention_factor, rotary_dim
 *   rope2d               inv_freq [D/2] and axis [D/2] (INT32: 0 the pair
 *                        turns by the row, 1 by the column), cos and sin
 *                        [n, D/2]; positions [2, n] (rows, columns) or the
 *                        scheme's grid
 *   xpos                 inv_freq, zeta [D/2], cos and sin [n, D/2] (the
 *                        rotation alone), centre and scale [n, D/2] =
 *                        zeta^((p - centre)/scale_base), a query's factor
 *                        (a key's is 1/scale)
 *   alibi                slopes [H]; bias [H, Lq, Lk] when lengths are given
 *   kerple               bias [H, Lq, Lk] (H from scheme.r1)
 *   sandwich             bias [H, Lq, Lk] (num_heads and scheme.hidden_size)
 *   fire                 bias [H, Lq, Lk] (H from scheme.b2), causal as fire's
 *                        attention is: null where the key is after the query
 *   t5                   buckets [Lq, Lk] (INT32); bias [H, Lq, Lk] with a table
 *   shaw                 index [Lq, Lk] (INT32): the table row of each pair,
 *                        by the scheme's direction
 *   none                 a note only
 *
 * rope with mrope_section takes positions [3, n] (temporal, height, width)
 * and adds mrope_row [r/2] (INT32: the row each frequency reads). Any scheme
 * with chunk_size C (and causal, optionally) takes query and key positions
 * and adds chunk_visible [Lq, Lk] (INT32 1/0): what chunked attention lets
 * each query see.
 *
 * The biases and the visibility are the logits of an attention call with
 * zero q and k, so they are exactly what /v1/attention applies.
 */
#include "api/encode.h"
#include "api/job.h"
#include "api/json.h"
#include "api/request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void enc_destroy(void *impl)
{
    enc_job *ej = impl;
    if (ej == NULL)
        return;
    api_scheme_free(&ej->sch);
    free(ej->positions);
    free(ej->q_positions);
    free(ej->k_positions);
    free(ej->slopes);
    free(ej->encoding);
    free(ej->inv_freq_d);
    free(ej->inv_freq);
    free(ej->cos);
    free(ej->sin);
    free(ej->ints);
    free(ej->bias);
    free(ej->zeros);
    free(ej->positions3);
    free(ej->mrope_row);
    free(ej->scale);
    free(ej->zeta);
    if (ej->vis_q != ej->q_positions)
        free(ej->vis_q);
    if (ej->vis_k != ej->k_positions)
        free(ej->vis_k);
    free(ej->visible);
    free(ej);
}

/* Which request fields each scheme reads; anything else is an error. */
enum {
    F_LENGTH = 1u << 0,
    F_POSITIONS = 1u << 1,
    F_DIM = 1u << 2,
    F_NUM_HEADS = 1u << 3,
    F_Q_LENGTH = 1u << 4,
    F_K_LENGTH = 1u << 5,
    F_Q_POSITIONS = 1u << 6,
    F_K_POSITIONS = 1u << 7,
};

static const struct {
    const char *name;
    unsigned bit;
} enc_fields[] = {
    {"length", F_LENGTH},           {"positions", F_POSITIONS},     {"dim", F_DIM},
    {"num_heads", F_NUM_HEADS},     {"q_length", F_Q_LENGTH},       {"k_length", F_K_LENGTH},
    {"q_positions", F_Q_POSITIONS}, {"k_positions", F_K_POSITIONS},
};

#define F_ABS (F_LENGTH | F_POSITIONS | F_DIM)
#define F_REL (F_Q_LENGTH | F_K_LENGTH | F_Q_POSITIONS | F_K_POSITIONS)

static unsigned fields_of(pa_scheme_type t)
{
    switch (t) {
    case PA_SCHEME_SINUSOIDAL:
    case PA_SCHEME_LEARNED:
    case PA_SCHEME_ROPE:
    case PA_SCHEME_XPOS:
    case PA_SCHEME_ROPE2D:
        return F_ABS;
    case PA_SCHEME_ALIBI:
    case PA_SCHEME_T5:
    case PA_SCHEME_KERPLE:
    case PA_SCHEME_SANDWICH:
    case PA_SCHEME_FIRE:
        return F_REL | F_NUM_HEADS;
    case PA_SCHEME_SHAW:
        return F_REL;
    default:
        return 0;
    }
}

/* bytes of results about to be allocated, with their text and the
 * scheme's tables, against the request memory limit: checked before an
 * allocation proportional to a number of the request (num_heads, a length),
 * so that a refusal costs no work. The whole request is checked again once
 * its size is known. */
static bool fits(const enc_job *ej, size_t bytes, const api_ctx *ctx, api_err *e)
{
    return api_check_memory(
        api_add_sat(api_add_sat(bytes, api_rendered_bytes(bytes, ej->enc)), ej->sch.bytes),
        ctx->lim, e);
}

static bool opt_positive(const cJSON *root, const char *name, const api_ctx *ctx, int32_t *out,
                         bool *present, api_err *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    *present = v != NULL;
    if (v == NULL)
        return true;
    if (!api_get_int(v, name, ctx, out, e))
        return false;
    if (*out < 1)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name, "%s=%d must be at least 1", name,
                        (int)*out);
    return true;
}

/* sinusoidal, learned, rope: n positions and a dimension. */
static bool prepare_absolute(const cJSON *root, const api_ctx *ctx, enc_job *ej, size_t *need,
                             api_err *e)
{
    const pa_scheme *s = &ej->sch.s;
    bool has_dim;
    pa_error pe;

    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(root, "positions");
    const int32_t *sec = s->rope.mrope_section;
    if (s->type == PA_SCHEME_ROPE && (sec[0] != 0 || sec[1] != 0 || sec[2] != 0) &&
        cJSON_IsArray(pv) && cJSON_IsArray(pv->child)) {
        /* M-RoPE rows [3, n]: row 0 stands for the positions elsewhere. */
        int32_t len = 0;
        const cJSON *lv = cJSON_GetObjectItemCaseSensitive(root, "length");
        if (!api_get_int_rows(pv, "positions", ctx, 3, &ej->positions3, &ej->n, e))
            return false;
        if (lv != NULL) {
            if (!api_get_int(lv, "length", ctx, &len, e))
                return false;
            if (len != ej->n)
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "length",
                                "length=%d does not match positions' rows of %d", (int)len,
                                (int)ej->n);
        }
        ej->positions = malloc((size_t)ej->n * sizeof *ej->positions);
        if (ej->positions == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        memcpy(ej->positions, ej->positions3, (size_t)ej->n * sizeof *ej->positions);
    } else if (s->type == PA_SCHEME_ROPE2D) {
        /* (row, column) rows [2, n], or the scheme's grid. */
        const cJSON *lv = cJSON_GetObjectItemCaseSensitive(root, "length");
        int32_t len = 0;
        if (pv != NULL && !api_get_int_rows(pv, "positions", ctx, 2, &ej->positions3, &ej->n, e))
            return false;
        if (pv == NULL) {
            const int64_t cells = (int64_t)s->rope2d.grid_rows * s->rope2d.grid_cols;
            if (cells == 0 || cells + s->rope2d.prefix_tokens > INT32_MAX)
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "positions",
                                "rope2d needs positions [2, n] (rows, then columns) or "
                                "scheme.grid [rows, cols]");
            ej->n = (int32_t)(cells + (s->rope2d.prefix_tokens > 0 ? s->rope2d.prefix_tokens : 0));
        }
        if (lv != NULL) {
            if (!api_get_int(lv, "length", ctx, &len, e))
                return false;
            if (len != ej->n)
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "length",
                                "length=%d does not match the %d tokens of %s", (int)len,
                                (int)ej->n, pv != NULL ? "positions" : "scheme.grid");
        }
    } else if (!api_get_length(root, "length", "positions", ctx, &ej->n, &ej->positions, e)) {
        return false;
    }
    if (ej->n == 0)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "length",
                        "length (or positions) is required for scheme '%s'",
                        pa_scheme_type_name(s->type));
    if (!opt_positive(root, "dim", ctx, &ej->dim, &has_dim, e))
        return false;
    /* The positions and, when dim is given, the encoding: [n, dim], or
     * rope's cos and sin [n, r/2] each (never more than the final count). */
    {
        size_t enc_bytes = 0;
        if (has_dim && s->type == PA_SCHEME_SINUSOIDAL)
            enc_bytes = api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->dim), sizeof(float));
        else if (has_dim && s->type == PA_SCHEME_ROPE2D)
            enc_bytes =
                api_mul_sat(api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->dim), sizeof(float)),
                            s->rope2d.variant == PA_ROPE2D_MIXED && ej->dim > 0
                                ? (size_t)s->rope2d.num_freqs / (size_t)ej->dim + 1
                                : 1);
        else if (has_dim && s->type == PA_SCHEME_XPOS)
            enc_bytes =
                api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->dim), 3 * sizeof(float) / 2);
        else if (has_dim && s->type == PA_SCHEME_ROPE) {
            int32_t r = pa_rope_rotary_dim(&s->rope, ej->dim); /* checked later */
            r = r > 0 && r < ej->dim ? r : ej->dim;
            enc_bytes = api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)r), sizeof(float));
        }
        if (!fits(ej, api_add_sat(api_mul_sat((size_t)ej->n, sizeof(int32_t)), enc_bytes), ctx, e))
            return false;
    }
    if (ej->positions == NULL && (ej->positions = api_range_positions(0, ej->n)) == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");

    if (s->type == PA_SCHEME_LEARNED) {
        if (s->learned.table == NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.table",
                            "scheme.table is required: the learned scheme needs a table");
        if (has_dim && ej->dim != s->learned.cols)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "dim",
                            "dim=%d does not equal scheme.table.shape[1]=%d", (int)ej->dim,
                            (int)s->learned.cols);
        ej->dim = s->learned.cols;
        if (!api_check_learned_rows(&s->learned, ej->positions, ej->n, "positions", ctx, e))
            return false;
    } else if (!has_dim) {
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "dim",
                        "dim is required for scheme '%s' (%s)", pa_scheme_type_name(s->type),
                        s->type == PA_SCHEME_ROPE || s->type == PA_SCHEME_XPOS ||
                                s->type == PA_SCHEME_ROPE2D
                            ? "the head dimension"
                            : "d_model");
    }

    if (s->type == PA_SCHEME_SINUSOIDAL) {
        int64_t shape[2] = {ej->n, ej->dim};
        if (pa_sinusoidal_encode(&s->sinusoidal, NULL, 0, ej->dim, NULL, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
        if (!api_check_result_size("encoding", 2, shape, ctx, e))
            return false;
        *need = api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->dim), sizeof(float));
    } else if (s->type == PA_SCHEME_LEARNED) {
        int64_t shape[2] = {ej->n, ej->dim};
        if (!api_check_result_size("encoding", 2, shape, ctx, e))
            return false;
        *need = api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->dim), sizeof(float));
    } else if (s->type == PA_SCHEME_ROPE2D) {
        /* mixed: a table per head, H = the frequencies' count / dim. */
        const bool mixed = s->rope2d.variant == PA_ROPE2D_MIXED;
        int64_t shape[3] = {1, ej->n, ej->dim / 2};
        if (pa_rope2d_check(&s->rope2d, ej->dim, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
        if (mixed && s->rope2d.num_freqs % ej->dim != 0)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "scheme.freqs",
                            "scheme.freqs has %d values: [2, H, dim/2] with dim=%d needs a "
                            "multiple of %d",
                            (int)s->rope2d.num_freqs, (int)ej->dim, (int)ej->dim);
        ej->H = mixed ? s->rope2d.num_freqs / ej->dim : 1;
        shape[0] = ej->H;
        ej->r = ej->dim;
        if (!api_check_result_size("cos", mixed ? 3 : 2, mixed ? shape : shape + 1, ctx, e))
            return false;
        *need = api_add_sat(
            api_mul_sat(api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->r), sizeof(float)),
                        (size_t)ej->H),
            (size_t)ej->r * (sizeof(float) + sizeof(int32_t)));
    } else if (s->type == PA_SCHEME_XPOS) {
        int64_t shape[2] = {ej->n, ej->dim / 2};
        if (pa_xpos_check(&s->xpos, ej->dim, &pe) != PA_STATUS_OK ||
            pa_xpos_centre(&s->xpos, ej->positions, ej->n, NULL, 0, false, &ej->centre, &pe) !=
                PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
        ej->r = ej->dim;
        if (!api_check_result_size("cos", 2, shape, ctx, e))
            return false;
        *need = api_add_sat(
            api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->r), 3 * sizeof(float) / 2),
            (size_t)ej->r * (sizeof(double) + 2 * sizeof(float)));
    } else {
        int64_t shape[2];
        if (pa_rope_check(&s->rope, ej->dim, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
        ej->r = pa_rope_rotary_dim(&s->rope, ej->dim);
        shape[0] = ej->n;
        shape[1] = ej->r / 2;
        if (!api_check_result_size("cos", 2, shape, ctx, e))
            return false;
        *need = api_add_sat(api_mul_sat(api_mul_sat((size_t)ej->n, (size_t)ej->r), sizeof(float)),
                            (size_t)ej->r * (sizeof(double) + sizeof(float)));
    }
    *need = api_add_sat(*need, (size_t)ej->n * sizeof(int32_t));
    return true;
}

/* kerple, sandwich: the heads (and sandwich's hidden size) of the bias. */
static bool prepare_distance_bias(const api_ctx *ctx, enc_job *ej, bool has_h, api_err *e)
{
    const pa_scheme *s = &ej->sch.s;
    pa_error pe;
    if (s->type == PA_SCHEME_KERPLE) {
        if (s->kerple.r1 != NULL) {
            if (has_h && ej->H != s->kerple.num_r1)
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "num_heads",
                                "num_heads=%d does not equal the %d values of scheme.r1",
                                (int)ej->H, (int)s->kerple.num_r1);
            ej->H = s->kerple.num_r1;
        }
        if (pa_kerple_check(&s->kerple, ej->H > 0 ? ej->H : 1, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
    } else if (s->type == PA_SCHEME_FIRE) {
        if (s->fire.b2 != NULL) {
            if (has_h && ej->H != s->fire.num_b2)
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "num_heads",
                                "num_heads=%d does not equal the %d values of scheme.b2",
                                (int)ej->H, (int)s->fire.num_b2);
            ej->H = s->fire.num_b2;
        }
        if (pa_fire_check(&s->fire, ej->H > 0 ? ej->H : 1, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
    } else {
        if (!has_h)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "num_heads",
                            "num_heads is required for scheme 'sandwich' (its heads' scales "
                            "H / (8 (h+1)))");
        if (s->sandwich.hidden_size < 1)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.hidden_size",
                            "scheme.hidden_size=%d: /v1/encode has no head_dim to default "
                            "to, send NeMo's hidden_size (the head dim, >= 1)",
                            (int)s->sandwich.hidden_size);
    }
    if ((size_t)ej->H > ctx->lim->max_tensor_elements)
        return api_fail(
            e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "num_heads",
            "num_heads=%d is more than the %zu values allowed per tensor " SRV_LIMIT_TENSOR,
            (int)ej->H, ctx->lim->max_tensor_elements);
    ej->want_bias = true;
    return true;
}

/* alibi, t5, shaw, kerple, sandwich, fire: query and key positions, default as in
 * attention. */
static bool prepare_relative(const cJSON *root, const api_ctx *ctx, enc_job *ej, size_t *need,
                             api_err *e)
{
    const pa_scheme *s = &ej->sch.s;
    bool has_h = false;
    size_t cells;
    pa_error pe;

    if (!api_get_length(root, "q_length", "q_positions", ctx, &ej->Lq, &ej->q_positions, e) ||
        !api_get_length(root, "k_length", "k_positions", ctx, &ej->Lk, &ej->k_positions, e))
        return false;
    if (ej->Lq == 0)
        ej->Lq = ej->Lk;
    if (ej->Lk == 0)
        ej->Lk = ej->Lq;
    if (s->type != PA_SCHEME_SHAW && !opt_positive(root, "num_heads", ctx, &ej->H, &has_h, e))
        return false;

    switch (s->type) {
    case PA_SCHEME_ALIBI:
        if (!has_h)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "num_heads",
                            "num_heads is required for scheme 'alibi'");
        if ((size_t)ej->H > ctx->lim->max_tensor_elements)
            return api_fail(
                e, ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "num_heads",
                "num_heads=%d is more than the %zu values allowed per tensor " SRV_LIMIT_TENSOR,
                (int)ej->H, ctx->lim->max_tensor_elements);
        if (!fits(ej, (size_t)ej->H * sizeof(float), ctx, e))
            return false;
        if ((ej->slopes = malloc((size_t)ej->H * sizeof(float))) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        if (pa_alibi_slopes(&s->alibi, ej->H, ej->slopes, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
        ej->want_bias = ej->Lq > 0;
        break;
    case PA_SCHEME_T5:
        if (pa_t5_check(&s->t5, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
        if (s->t5.table != NULL) {
            if (s->t5.table_rows != s->t5.num_buckets)
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "scheme.table.shape",
                                "scheme.table.shape[0]=%d does not equal scheme.num_buckets=%d",
                                (int)s->t5.table_rows, (int)s->t5.num_buckets);
            if (has_h && ej->H != s->t5.table_cols)
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "num_heads",
                                "num_heads=%d does not equal scheme.table.shape[1]=%d", (int)ej->H,
                                (int)s->t5.table_cols);
            ej->H = s->t5.table_cols;
            ej->want_bias = true;
        } else if (has_h) {
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "num_heads",
                            "num_heads sizes the t5 bias, which needs scheme.table "
                            "[num_buckets, H]");
        }
        break;
    case PA_SCHEME_KERPLE:
    case PA_SCHEME_SANDWICH:
    case PA_SCHEME_FIRE:
        if (!prepare_distance_bias(ctx, ej, has_h, e))
            return false;
        break;
    default: /* shaw */
        if (s->shaw.max_relative_position < 0)
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "scheme.max_relative_position",
                            "scheme.max_relative_position=%d must be >= 0",
                            (int)s->shaw.max_relative_position);
        break;
    }
    if (ej->Lq == 0) {
        if (s->type == PA_SCHEME_ALIBI)
            return true; /* slopes only */
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q_length",
                        "q_length or k_length (or q_positions / k_positions) is required for "
                        "scheme '%s'",
                        pa_scheme_type_name(s->type));
    }
    if (!fits(ej, api_mul_sat(api_add_sat((size_t)ej->Lq, (size_t)ej->Lk), sizeof(int32_t)), ctx,
              e))
        return false;
    if (ej->k_positions == NULL && (ej->k_positions = api_range_positions(0, ej->Lk)) == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    if (ej->q_positions == NULL && (ej->q_positions = api_range_positions(
                                        (int32_t)((int64_t)ej->Lk - ej->Lq), ej->Lq)) == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");

    cells = api_mul_sat((size_t)ej->Lq, (size_t)ej->Lk);
    {
        int64_t grid[2] = {ej->Lq, ej->Lk};
        *need = api_mul_sat(api_add_sat((size_t)ej->Lq, (size_t)ej->Lk), sizeof(int32_t));
        if (s->type == PA_SCHEME_T5 || s->type == PA_SCHEME_SHAW) {
            if (!api_check_result_size(s->type == PA_SCHEME_T5 ? "buckets" : "index", 2, grid, ctx,
                                       e))
                return false;
            *need = api_add_sat(*need, api_mul_sat(cells, sizeof(int32_t)));
        }
    }
    if (ej->want_bias) {
        int64_t shape[3] = {ej->H, ej->Lq, ej->Lk};
        /* Zero q, k, v of head_dim 1 ([Lq + 2 Lk, H]), the output [Lq, H]
         * and the bias [H, Lq, Lk]. */
        size_t rows = api_add_sat(api_mul_sat(2, (size_t)ej->Lq), api_mul_sat(2, (size_t)ej->Lk));
        size_t floats =
            api_add_sat(api_mul_sat(rows, (size_t)ej->H), api_mul_sat((size_t)ej->H, cells));
        if (!api_check_result_size("bias", 3, shape, ctx, e))
            return false;
        pa_attention_init(&ej->att, &ej->sch.s);
        ej->att.num_heads = ej->H;
        ej->att.head_dim = 1;
        ej->att.q_len = ej->Lq;
        ej->att.k_len = ej->Lk;
        ej->att.q_positions = ej->q_positions;
        ej->att.k_positions = ej->k_positions;
        ej->att.scale_set = true;
        ej->att.scale = 1.0f;
        /* fire is defined on causal pairs; its attention requires causal. */
        ej->att.causal = ej->sch.s.type == PA_SCHEME_FIRE;
        *need = api_add_sat(*need, api_mul_sat(floats, sizeof(float)));
    }
    return true;
}

/* chunk_size: query and key positions (those of a relative scheme, parsed
 * already, or their own), and the attention call that finds what is
 * visible. */
static bool prepare_visibility(const cJSON *root, const api_ctx *ctx, enc_job *ej, size_t *need,
                               api_err *e)
{
    int32_t Lq = ej->Lq, Lk = ej->Lk;
    ej->vis_q = ej->q_positions;
    ej->vis_k = ej->k_positions;
    if (ej->vis_q == NULL || ej->vis_k == NULL) {
        Lq = Lk = 0;
        ej->vis_q = ej->vis_k = NULL;
        if (!api_get_length(root, "q_length", "q_positions", ctx, &Lq, &ej->vis_q, e) ||
            !api_get_length(root, "k_length", "k_positions", ctx, &Lk, &ej->vis_k, e))
            return false;
        if (Lq == 0)
            Lq = Lk;
        if (Lk == 0)
            Lk = Lq;
        if (Lq == 0)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "q_length",
                            "chunk_size needs q_length or k_length (or q_positions / "
                            "k_positions) for chunk_visible");
        if (ej->vis_k == NULL && (ej->vis_k = api_range_positions(0, Lk)) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        if (ej->vis_q == NULL &&
            (ej->vis_q = api_range_positions((int32_t)((int64_t)Lk - Lq), Lq)) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    }
    {
        int64_t grid[2] = {Lq, Lk};
        if (!api_check_result_size("chunk_visible", 2, grid, ctx, e))
            return false;
    }
    pa_scheme_init(&ej->none, PA_SCHEME_NONE);
    pa_attention_init(&ej->vis, &ej->none);
    ej->vis.num_heads = 1;
    ej->vis.head_dim = 1;
    ej->vis.q_len = Lq;
    ej->vis.k_len = Lk;
    ej->vis.q_positions = ej->vis_q;
    ej->vis.k_positions = ej->vis_k;
    ej->vis.chunk_size = ej->chunk;
    ej->vis.causal = ej->causal;
    /* zeros [Lq + 2 Lk], output [Lq], logits [Lq, Lk], the grid [Lq, Lk] */
    *need = api_add_sat(
        *need, api_mul_sat(api_add_sat(api_add_sat((size_t)Lq, (size_t)Lk) * 2,
                                       api_mul_sat(2, api_mul_sat((size_t)Lq, (size_t)Lk))),
                           sizeof(float)));
    return true;
}

static bool encode_prepare(const cJSON *root, const api_ctx *top_ctx, srv_job **job_out,
                           srv_reply *reply)
{
    static const char *const top[] = {"scheme",      "length",          "positions",  "dim",
                                      "num_heads",   "q_length",        "k_length",   "q_positions",
                                      "k_positions", "output_encoding", "chunk_size", "causal"};
    const srv_limits *lim = top_ctx->lim;
    api_ctx ctx = {lim, "", top_ctx->source, top_ctx->lift};
    api_err e;
    srv_job *job = NULL;
    enc_job *ej = NULL;
    const cJSON *v;
    size_t need = 0;
    unsigned allowed;

    if (!api_check_fields(root, top, sizeof top / sizeof top[0], "", "an encode request", &ctx, &e))
        goto fail;
    job = api_job_new(&srv_ep_encode, 1);
    ej = calloc(1, sizeof *ej);
    if (job == NULL || ej == NULL) {
        free(ej);
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    job->impl = ej;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "output_encoding")) != NULL &&
        !api_get_encoding(v, &ctx, &job->enc, &e))
        goto fail;
    ej->enc = job->enc;
    if (!api_scheme_parse(cJSON_GetObjectItemCaseSensitive(root, "scheme"), &ctx, &ej->sch, &e))
        goto fail;
    job->tasks[0].scheme_name = pa_scheme_type_name(ej->sch.s.type);
    if (ej->sch.s.type == PA_SCHEME_COPE) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                 "scheme 'cope' has no encoding of positions alone: its positions count the "
                 "gates sigmoid(scale q.k) of the keys, so they depend on q and k; use "
                 "/v1/attention with return: [\"logits\"] (the logits carry its position term)");
        goto fail;
    }

    allowed = fields_of(ej->sch.s.type);
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "chunk_size")) != NULL) {
        if (!api_get_int(v, "chunk_size", &ctx, &ej->chunk, &e))
            goto fail;
        if (ej->chunk < 1) {
            api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "chunk_size",
                     "chunk_size=%d must be positive", (int)ej->chunk);
            goto fail;
        }
        allowed |= F_REL; /* the visibility's query and key positions */
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "causal")) != NULL) {
        if (ej->chunk == 0) {
            api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "causal",
                     "causal shapes chunk_visible: it needs chunk_size");
            goto fail;
        }
        if (!api_get_bool(v, "causal", &ctx, &ej->causal, &e))
            goto fail;
    }
    for (size_t k = 0; k < sizeof enc_fields / sizeof enc_fields[0]; k++) {
        if (!(allowed & enc_fields[k].bit) &&
            cJSON_GetObjectItemCaseSensitive(root, enc_fields[k].name) != NULL) {
            api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, enc_fields[k].name,
                     "%s does not apply to scheme '%s'", enc_fields[k].name,
                     pa_scheme_type_name(ej->sch.s.type));
            goto fail;
        }
    }
    if (allowed & F_DIM) {
        if (!prepare_absolute(root, &ctx, ej, &need, &e))
            goto fail;
    } else if (allowed != 0) {
        if (!prepare_relative(root, &ctx, ej, &need, &e))
            goto fail;
        if (ej->want_bias) {
            job->tasks[0].workspace = pa_attention_workspace_size(&ej->att);
            if (job->tasks[0].workspace == 0) {
                api_fail(&e, &ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                         "the workspace for these sizes overflows the address space");
                goto fail;
            }
        }
    }
    if (ej->chunk > 0) {
        size_t ws;
        if (!prepare_visibility(root, &ctx, ej, &need, &e))
            goto fail;
        ws = pa_attention_workspace_size(&ej->vis);
        if (ws == 0) {
            api_fail(&e, &ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                     "the workspace for these sizes overflows the address space");
            goto fail;
        }
        if (ws > job->tasks[0].workspace)
            job->tasks[0].workspace = ws;
    }
    /* need is the results' bytes so far: their text too. */
    need = api_add_sat(need, api_rendered_bytes(need, job->enc));
    need = api_add_sat(api_add_sat(need, ej->sch.bytes), job->tasks[0].workspace);
    if (!api_check_memory(need, lim, &e))
        goto fail;
    *job_out = job;
    return true;

fail:
    srv_job_free(job);
    api_reply_err(reply, &e);
    return false;
}

const srv_endpoint srv_ep_encode = {
    .name = "encode",
    .prepare = encode_prepare,
    .run = api_encode_run,
    .render = api_encode_render,
    .destroy = enc_destroy,
};
