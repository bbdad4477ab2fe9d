/* tensor_spec.h - what one --tensor NAME=PATH[:TENSOR] names: the record
 * runtime/config.c fills from the command line and store/tensor_store.c
 * loads. Plain data, so the configuration needs nothing else of store/.
 */
#ifndef SRV_TENSOR_SPEC_H
#define SRV_TENSOR_SPEC_H

enum { SRV_TENSOR_NAME_MAX = 64, SRV_TENSOR_PATH_MAX = 1024, SRV_MAX_TENSOR_SPECS = 64 };

/* One --tensor NAME=PATH[:TENSOR]: NAME is [A-Za-z0-9_.-]+ (up to 63
 * characters), PATH ends in .safetensors or .npy, TENSOR (a safetensors
 * key, "" when not given) follows the last ':' that comes right after
 * ".safetensors" or ".npy", so paths may hold ':' themselves. */
typedef struct srv_tensor_spec {
    char name[SRV_TENSOR_NAME_MAX];
    char path[SRV_TENSOR_PATH_MAX];
    char tensor[256];
} srv_tensor_spec;

#endif
