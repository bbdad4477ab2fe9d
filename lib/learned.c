/* learned.c - learned absolute position tables (GPT-2, BERT, OPT).
 *
 * Row (position + offset) of a caller-owned table is the encoding of a
 * position. This file copies rows out and validates positions against the
 * table for pa_attention_check. In pa__learned_check, positions == NULL
 * stands for the default positions 0 .. n-1.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The table itself: present, with at least one row and one column. */
static pa_status check_table(const pa_learned *l, pa_error *err)
{
    if (l == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "learned scheme is NULL");
    if (l->table == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.table",
                        "scheme.table is NULL: the learned scheme needs a table");
    if (l->rows < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.table.shape[0]",
                        "scheme.table.shape[0]=%d must be at least 1", (int)l->rows);
    if (l->cols < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.table.shape[1]",
                        "scheme.table.shape[1]=%d must be at least 1", (int)l->cols);
    return PA_STATUS_OK;
}

/* Every position's row in [0, rows). positions NULL stands for 0 .. n-1:
 * then the caller sent no positions, so the error names what it did send
 * (the table, or its offset) and where the positions came from. The sum is
 * formed in 64 bits so a huge offset cannot wrap into range. */
static pa_status check_rows(const pa_learned *l, const int32_t *positions, int32_t n,
                            const char *positions_field, pa_error *err)
{
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = positions != NULL ? positions[i] : i;
        int64_t row = (int64_t)pos + (int64_t)l->offset;
        if (positions == NULL && row >= (int64_t)l->rows)
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.table.shape[0]",
                            "scheme.table has %d rows, too few for the default %s 0..%d (one per "
                            "token, offset %d): send a table of at least %" PRId64
                            " rows, or %s within it",
                            (int)l->rows, positions_field, (int)n - 1, (int)l->offset,
                            (int64_t)n + l->offset, positions_field);
        if (positions == NULL && row < 0)
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "scheme.offset",
                            "scheme.offset=%d puts the default %s 0..%d at rows %" PRId64
                            "..%" PRId64 ", before the table's first row",
                            (int)l->offset, positions_field, (int)n - 1, (int64_t)l->offset,
                            (int64_t)n - 1 + l->offset);
        if (row < 0 || row >= (int64_t)l->rows) {
            char field[64];
            snprintf(field, sizeof field, "%s[%d]", positions_field, (int)i);
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, field,
                            "position %d + offset %d = row %" PRId64
                            " is outside the learned table of %d rows",
                            (int)pos, (int)l->offset, row, (int)l->rows);
        }
    }
    return PA_STATUS_OK;
}

pa_status pa__learned_check(const pa_learned *l, int32_t d_model, const int32_t *positions,
                            int32_t n, const char *positions_field, pa_error *err)
{
    pa_status st = check_table(l, err);
    if (st != PA_STATUS_OK)
        return st;
    if (l->cols != d_model)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.table.shape[1]",
                        "scheme.table.shape[1]=%d does not equal d_model=%d", (int)l->cols,
                        (int)d_model);
    if (positions_field == NULL)
        positions_field = "positions";
    if (n < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, positions_field,
                        "%s has negative length %d", positions_field, (int)n);
    return check_rows(l, positions, n, positions_field, err);
}

pa_status pa_learned_encode(const pa_learned *l, const int32_t *positions, int32_t n, float *out,
                            pa_error *err)
{
    pa_status st = check_table(l, err);
    if (st != PA_STATUS_OK)
        return st;
    if (n < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "length", "length=%d must not be negative",
                        (int)n);
    if (n > 0 && positions == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions",
                        "positions is NULL but length=%d", (int)n);
    if (n > 0 && out == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "out", "out is NULL but length=%d",
                        (int)n);
    /* Validate every row before writing any, so out stays untouched on error. */
    st = check_rows(l, positions, n, "positions", err);
    if (st != PA_STATUS_OK)
        return st;

    size_t cols = (size_t)l->cols;
    for (int32_t i = 0; i < n; i++) {
        size_t row = (size_t)((int64_t)positions[i] + (int64_t)l->offset);
        memcpy(out + (size_t)i * cols, l->table + row * cols, cols * sizeof *out);
    }
    return PA_STATUS_OK;
}
