/* item_packed.c - packed sequences in an attention item: the options
 * cu_seqlens and cu_seqlens_k (q/k/v [L_total, H, D] holding S sequences
 * back to back, attention block-diagonal; the core library's cu_seqlens_q,
 * cu_seqlens_k), read by api_item_parse (item.c), and the per-sequence
 * lists the answer returns weights, logits and row statistics as.
 */
#include "api/request.h"

#include "api/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool api_item_parse_packed(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e)
{
    const cJSON *cq = api_member(obj, "cu_seqlens"), *ck = api_member(obj, "cu_seqlens_k");
    int32_t nk = 0;
    if (cq == NULL && ck == NULL)
        return true;
    if (cq == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "cu_seqlens_k",
                        "cu_seqlens_k packs the keys of sequences that cu_seqlens packs the "
                        "queries of: send cu_seqlens too");
    if (it->batched)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "cu_seqlens",
                        "cu_seqlens packs sequences into one 3-D q [L_total, H, D]; q has 4 "
                        "dimensions (a padded batch): send one or the other");
    if (it->query_lengths != NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "query_length",
                        "query_length pads a batch; packed sequences (cu_seqlens) have no "
                        "padding: leave query_length out");
    if (!api_get_int_array(cq, "cu_seqlens", ctx, &it->cu_seqlens, &it->n_cu, e))
        return false;
    if (it->n_cu < 2)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "cu_seqlens",
                        "cu_seqlens has %d values; it needs at least 2 (0, then the end of each "
                        "sequence)",
                        (int)it->n_cu);
    if (ck != NULL) {
        if (!api_get_int_array(ck, "cu_seqlens_k", ctx, &it->cu_seqlens_k, &nk, e))
            return false;
        if (nk != it->n_cu)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "cu_seqlens_k",
                            "cu_seqlens_k has %d values but cu_seqlens has %d: both hold S+1 "
                            "boundaries of the same S sequences",
                            (int)nk, (int)it->n_cu);
    }
    /* The rest (starts at 0, strictly increasing, ends at L) is
     * pa_attention_check's, which names the same fields. */
    it->att.cu_seqlens_q = it->cu_seqlens;
    it->att.cu_seqlens_k = it->cu_seqlens_k;
    it->att.num_seqs = it->n_cu - 1;
    it->input_bytes = api_add_sat(it->input_bytes, 2 * (size_t)it->n_cu * sizeof(int32_t));
    return true;
}

bool api_item_is_packed(const api_item *it)
{
    return it->cu_seqlens != NULL;
}

bool api_item_packed_result(unsigned which)
{
    return which == API_RET_WEIGHTS || which == API_RET_LOGITS || which == API_RET_ENTROPY ||
           which == API_RET_DISTANCE;
}

/* Sequence s's rows of q (k with keys). */
static int32_t rows(const api_item *it, int32_t s, bool keys)
{
    const int32_t *c = keys && it->cu_seqlens_k != NULL ? it->cu_seqlens_k : it->cu_seqlens;
    return c[s + 1] - c[s];
}

int32_t api_item_packed_count(const api_item *it)
{
    return it->n_cu - 1;
}

int api_item_packed_shape(const api_item *it, unsigned which, int32_t s, int64_t shape[3],
                          size_t *offset)
{
    size_t at = 0;
    for (int32_t t = 0; t < s; t++)
        at += (size_t)it->H * (size_t)rows(it, t, false) *
              (which == API_RET_WEIGHTS || which == API_RET_LOGITS ? (size_t)rows(it, t, true) : 1);
    *offset = at;
    shape[0] = it->H;
    shape[1] = rows(it, s, false);
    shape[2] = rows(it, s, true);
    return which == API_RET_WEIGHTS || which == API_RET_LOGITS ? 3 : 2;
}

bool api_item_render_packed(cJSON *obj, const char *name, const api_item *it, unsigned which,
                            const float *data, srv_encoding enc, srv_wire wire)
{
    cJSON *list = cJSON_AddArrayToObject(obj, name);
    if (list == NULL)
        return false;
    for (int32_t s = 0; s < api_item_packed_count(it); s++) {
        int64_t shape[3];
        size_t at;
        int nd = api_item_packed_shape(it, which, s, shape, &at);
        /* Rendered as a member of a holder, then moved into the list. */
        cJSON *holder = cJSON_CreateObject(), *t;
        if (holder == NULL || !srv_tensor_render_as(holder, "t", data + at, nd, shape, enc, wire)) {
            cJSON_Delete(holder);
            return false;
        }
        t = cJSON_DetachItemFromObjectCaseSensitive(holder, "t");
        cJSON_Delete(holder);
        if (t == NULL || !cJSON_AddItemToArray(list, t)) {
            cJSON_Delete(t);
            return false;
        }
    }
    return true;
}
