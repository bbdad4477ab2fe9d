/* shaw.c - Shaw et al. 2018 relative position representations (and Hugging
 * Face BERT's relative_key / relative_key_query, the other direction): the
 * clipped table index and the validation of the scheme and its tables.
 *
 * K is bounded by (INT32_MAX - 1) / 2 so that 2K+1 rows fit an int32 and the
 * index never overflows. pa__shaw_check takes v_head_dim 0 to mean head_dim.
 */
#include "internal.h"

/* Largest K whose 2K+1 table rows still fit an int32 row count. */
#define SHAW_MAX_K ((INT32_MAX - 1) / 2)

int32_t pa_shaw_index(int32_t relative_position, int32_t max_relative_position)
{
    int64_t k = max_relative_position;
    int64_t rel = relative_position;
    if (k <= 0)
        return 0; /* K == 0 has one row; K < 0 is rejected by the check. */
    if (rel < -k)
        rel = -k;
    else if (rel > k)
        rel = k;
    return (int32_t)(rel + k);
}

int32_t pa_shaw_pair_index(const pa_shaw *s, int32_t q_position, int32_t k_position)
{
    int64_t rel = (int64_t)k_position - (int64_t)q_position;
    int64_t k = s->max_relative_position;
    if (s->direction == PA_SHAW_DIRECTION_QUERY_MINUS_KEY)
        rel = -rel;
    if (k <= 0)
        return 0;
    rel = rel < -k ? -k : rel > k ? k : rel;
    return (int32_t)(rel + k);
}

pa_status pa__shaw_check(const pa_shaw *s, int32_t head_dim, int32_t v_head_dim, pa_error *err)
{
    if (s == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "shaw scheme is NULL");
    int32_t k = s->max_relative_position;
    if (k < 0 || k > SHAW_MAX_K)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.max_relative_position",
                        "scheme.max_relative_position=%d must be in [0, %d]", (int)k,
                        (int)SHAW_MAX_K);
    int32_t rows = 2 * k + 1;
    if (s->direction != PA_SHAW_DIRECTION_KEY_MINUS_QUERY &&
        s->direction != PA_SHAW_DIRECTION_QUERY_MINUS_KEY)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.direction",
                        "scheme.direction=%d is not a direction (0 key_minus_query, 1 "
                        "query_minus_key)",
                        (int)s->direction);
    if (v_head_dim == 0)
        v_head_dim = head_dim;
    if (s->rel_k == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme.rel_k",
                        "scheme.rel_k is NULL: shaw needs a [2K+1, head_dim] key table");
    if (s->rel_k_rows != rows)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_k.shape[0]",
                        "scheme.rel_k.shape[0]=%d does not equal 2*max_relative_position+1=%d",
                        (int)s->rel_k_rows, (int)rows);
    if (s->rel_k_cols != head_dim)
        return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_k.shape[1]",
                        "scheme.rel_k.shape[1]=%d does not equal head_dim=%d", (int)s->rel_k_cols,
                        (int)head_dim);
    if (s->rel_v != NULL) {
        if (s->rel_v_rows != rows)
            return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[0]",
                            "scheme.rel_v.shape[0]=%d does not equal "
                            "2*max_relative_position+1=%d",
                            (int)s->rel_v_rows, (int)rows);
        if (s->rel_v_cols != v_head_dim)
            return pa__fail(err, PA_STATUS_SHAPE_MISMATCH, "scheme.rel_v.shape[1]",
                            "scheme.rel_v.shape[1]=%d does not equal v_head_dim=%d",
                            (int)s->rel_v_cols, (int)v_head_dim);
    }
    return PA_STATUS_OK;
}
