/* item_positions.c - an attention item's positions and the masks they
 * make: causal, window and key_length (one, or one per sequence), scale,
 * q_positions and k_positions ([L], M-RoPE's or rope2d's rows, one row per
 * sequence of a batch) and query_length; read by api_item_parse (item.c)
 * once q, k and v (or layer mode) have set the sizes.
 */
#include "api/request.h"

#include "api/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Positions [L]; or, with rows (3: rope with mrope_section; 2: rope2d),
 * [rows, L]: the temporal, height and width rows, or the rows and columns,
 * into *mrope, [rows * L] flat; or, in a batch of B sequences, [B, L], one
 * row per sequence (*stride = L), or [B, rows, L]. */
static bool parse_positions(const cJSON *obj, const char *name, int32_t want, const char *what,
                            int rows, int32_t batch, const api_ctx *ctx, int32_t **out,
                            int32_t **mrope, size_t *stride, size_t *mrope_stride, api_err *e)
{
    const cJSON *v = api_member(obj, name);
    const bool mrope_ok = rows > 0;
    int32_t n = 0;
    if (v == NULL)
        return true;
    if (batch > 0 && mrope_ok && api_int_rank(v) == 3) {
        /* [B, 3, L]: each sequence its own M-RoPE rows */
        const cJSON *seq;
        int32_t b = 0;
        if (cJSON_GetArraySize(v) != batch)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s holds %d sequences' rows but the batch has %d", name,
                            cJSON_GetArraySize(v), (int)batch);
        if ((*mrope = malloc((size_t)batch * rows * (size_t)want * sizeof(int32_t))) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory");
        cJSON_ArrayForEach(seq, v)
        {
            char path[48];
            int32_t *seq_rows = NULL;
            snprintf(path, sizeof path, "%s[%d]", name, (int)b);
            if (!api_get_int_rows(seq, path, ctx, rows, &seq_rows, &n, e))
                return false;
            if (n != want) {
                free(seq_rows);
                return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, path,
                                "%s has rows of %d values but %s=%d", path, (int)n, what,
                                (int)want);
            }
            memcpy(*mrope + (size_t)b * rows * (size_t)want, seq_rows,
                   (size_t)rows * (size_t)want * sizeof *seq_rows);
            free(seq_rows);
            b++;
        }
        *mrope_stride = (size_t)rows * (size_t)want;
        return true;
    }
    if (batch > 0 && !mrope_ok && api_int_rank(v) == 2) {
        if (!api_get_int_rows(v, name, ctx, batch, out, &n, e))
            return false;
        if (n != want)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s has rows of %d values but %s=%d", name, (int)n, what, (int)want);
        *stride = (size_t)want;
        return true;
    }
    if (api_int_rank(v) == 2) {
        if (!mrope_ok)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                            "%s is [3, L] (M-RoPE rows) only for scheme rope with "
                            "mrope_section, [2, L] (rows, columns) only for scheme rope2d; "
                            "send [L] positions",
                            name);
        if (!api_get_int_rows(v, name, ctx, rows, mrope, &n, e))
            return false;
        if (n != want)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                            "%s has rows of %d values but %s=%d", name, (int)n, what, (int)want);
        return true;
    }
    if (!api_get_int_array(v, name, ctx, out, &n, e))
        return false;
    if (n != want)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name, "%s has %d values but %s=%d", name,
                        (int)n, what, (int)want);
    return true;
}

/* A per-sequence length: [B] values in lo .. hi (hi is shape[1] of the
 * tensor named by what), each named when wrong. */
static bool per_sequence(const cJSON *v, const char *name, int32_t lo, int32_t hi, const char *what,
                         const api_ctx *ctx, const api_item *it, int32_t **out, api_err *e)
{
    int32_t n = 0;
    if (!api_get_int_array(v, name, ctx, out, &n, e))
        return false;
    if (n != it->B)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, name,
                        "%s has %d values but the batch has %d sequences (%s.shape[0]); send "
                        "one per sequence, or one number for all",
                        name, (int)n, (int)it->B, what);
    for (int32_t b = 0; b < n; b++) {
        char f[32];
        snprintf(f, sizeof f, "%s[%d]", name, (int)b);
        if ((*out)[b] < lo || (*out)[b] > hi)
            return api_fail(
                e, ctx, SRV_ERR_OUT_OF_RANGE, f, "%s=%d %s %s.shape[%d]=%d", f, (int)(*out)[b],
                (*out)[b] < lo ? (lo ? "is below 1; 1 up to" : "is negative; 0 up to") : "exceeds",
                what, it->batched ? 1 : 0, (int)hi);
    }
    return true;
}

/* query_length: a number or [B], the real query rows of each sequence;
 * rows past it are not computed (output and weights 0, logits -inf, as a
 * fully masked row). The rows are a prefix of q, so the library runs on
 * q_len = query_length; what would change their layout is refused. */
static bool parse_query_length(const cJSON *v, const api_ctx *ctx, api_item *it, api_err *e)
{
    const int32_t *sec = it->scheme.s.rope.mrope_section;
    if (it->att.x != NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "query_length",
                        "query_length is for q, k, v items: in layer mode q and k are the same "
                        "tokens (use key_length or attention_mask)");
    if (((it->scheme.s.type == PA_SCHEME_ROPE && (sec[0] != 0 || sec[1] != 0 || sec[2] != 0)) ||
         it->scheme.s.type == PA_SCHEME_ROPE2D) &&
        it->q_mrope != NULL)
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "query_length",
                        "query_length with position rows [3, Lq] (M-RoPE) or [2, Lq] (rope2d) is "
                        "not supported: send the sequences as separate items");
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        if (!per_sequence(v, "query_length", 1, it->Lq, "q", ctx, it, &it->query_lengths, e))
            return false;
    } else {
        int32_t iv;
        if (!api_get_int(v, "query_length", ctx, &iv, e))
            return false;
        if (iv < 1 || iv > it->Lq)
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "query_length",
                            "query_length=%d must be 1 up to q.shape[%d]=%d", (int)iv,
                            it->batched ? 1 : 0, (int)it->Lq);
        if ((it->query_lengths = malloc((size_t)it->B * sizeof(int32_t))) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "query_length", "out of memory");
        for (int32_t b = 0; b < it->B; b++)
            it->query_lengths[b] = iv;
    }
    if (it->q_positions == NULL) { /* the default positions, kept for the real rows */
        if ((it->default_qpos = api_range_positions(it->Lk - it->Lq, it->Lq)) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "query_length", "out of memory");
        it->att.q_positions = it->default_qpos;
    }
    return true;
}

bool api_item_parse_positions(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *v;
    bool present;
    int32_t iv;

    if ((v = api_member(obj, "causal")) != NULL &&
        !api_get_bool(v, "causal", ctx, &it->att.causal, e))
        return false;
    if (!api_opt_int(obj, "window", ctx, &iv, &present, e))
        return false;
    if (present)
        it->att.window = iv;
    if ((v = api_member(obj, "key_length")) != NULL && (cJSON_IsArray(v) || cJSON_IsObject(v))) {
        if (!per_sequence(v, "key_length", 0, it->Lk, it->att.x != NULL ? "x" : "k", ctx, it,
                          &it->key_lengths, e))
            return false;
        it->att.key_length = it->key_lengths[0];
    } else {
        if (!api_opt_int(obj, "key_length", ctx, &iv, &present, e))
            return false;
        /* The library reads a negative key_length as "no padding"; on the
         * wire that is spelled by leaving the field out. */
        if (present && iv < 0) {
            api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "key_length",
                     "key_length=%d must be 0 or more: leave it out for no padding", (int)iv);
            return false;
        }
        if (present)
            it->att.key_length = iv;
    }
    if ((v = api_member(obj, "scale")) != NULL) {
        double d;
        if (!api_get_number(v, "scale", ctx, &d, e))
            return false;
        it->att.scale_set = true;
        it->att.scale = (float)d;
    }
    bool layer = it->att.x != NULL;
    const int32_t *sec = it->scheme.s.rope.mrope_section;
    bool mrope = it->scheme.s.type == PA_SCHEME_ROPE && (sec[0] != 0 || sec[1] != 0 || sec[2] != 0);
    bool rope2d = it->scheme.s.type == PA_SCHEME_ROPE2D;
    int rows = mrope ? 3 : rope2d ? 2 : 0;
    int32_t batch = it->batched ? it->B : 0;
    if (!parse_positions(obj, "q_positions", it->Lq,
                         layer ? (batch ? "x.shape[1]" : "x.shape[0]")
                               : (batch ? "q.shape[1]" : "q.shape[0]"),
                         rows, batch, ctx, &it->q_positions, &it->q_mrope, &it->q_pos_stride,
                         &it->q_mrope_stride, e) ||
        !parse_positions(obj, "k_positions", it->Lk,
                         layer ? (batch ? "x.shape[1]" : "x.shape[0]")
                               : (batch ? "k.shape[1]" : "k.shape[0]"),
                         rows, batch, ctx, &it->k_positions, &it->k_mrope, &it->k_pos_stride,
                         &it->k_mrope_stride, e))
        return false;
    it->att.q_positions = it->q_positions;
    it->att.k_positions = it->k_positions;
    if (rope2d) { /* (row, column) rows: they choose angles, the masks keep token order */
        it->att.q_positions_2d = it->q_mrope;
        it->att.k_positions_2d = it->k_mrope;
    } else {
        it->att.q_mrope_positions = it->q_mrope;
        it->att.k_mrope_positions = it->k_mrope;
    }
    if ((v = api_member(obj, "query_length")) != NULL && !parse_query_length(v, ctx, it, e))
        return false;
    return true;
}
