/* tensors.c - GET /v1/tensors: the named tensors loaded at start-up
 * (store/tensor_store.h), as {"tensors":[{"name","shape","dtype","file",
 * "tensor","bytes"}]} (bytes: as stored in the file); an empty list when
 * none is loaded.
 */
#include "api/job.h"
#include "store/tensor_store.h"

#include <cjson/cJSON.h>
#include <string.h>

static void tensors_answer(const srv_limits *lim, srv_reply *reply)
{
    const srv_tensor_store *s = lim != NULL ? lim->tensors : NULL;
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "tensors");
    char *body = NULL;
    bool ok = list != NULL;

    for (size_t i = 0; ok && i < srv_tensor_store_count(s); i++) {
        const srv_named_tensor *t = srv_tensor_store_at(s, i);
        cJSON *o = cJSON_CreateObject(), *shape = NULL;
        ok = o != NULL && cJSON_AddItemToArray(list, o);
        if (!ok) {
            cJSON_Delete(o);
            break;
        }
        ok = cJSON_AddStringToObject(o, "name", t->name) &&
             (shape = cJSON_AddArrayToObject(o, "shape")) != NULL;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        ok = ok && cJSON_AddStringToObject(o, "dtype", srv_dtype_name(t->dtype)) &&
             cJSON_AddStringToObject(o, "file", t->file) &&
             cJSON_AddStringToObject(o, "tensor", t->tensor) &&
             cJSON_AddNumberToObject(o, "bytes", (double)t->file_bytes);
    }
    if (ok)
        body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (body == NULL) {
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory rendering the tensors");
        return;
    }
    srv_reply_json(reply, 200, body, strlen(body));
}

const srv_endpoint srv_ep_tensors = {
    .name = "tensors",
    .answer = tensors_answer,
};
