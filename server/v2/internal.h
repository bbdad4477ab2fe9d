/* internal.h - private to v2/: model.c (the protocol's surface: models,
 * metadata, errors, the answer) and infer.c (an infer request translated
 * into a /v1 attention item). See v2/v2.h.
 */
#ifndef SRV_V2_INTERNAL_H
#define SRV_V2_INTERNAL_H

#include "api/api.h"
#include "api/protocol.h"
#include "v2/v2.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define V2_MODEL_PREFIX "attention-"

/* [BIN]: the header that says how long the JSON part of a body is, in a
 * request and in an answer. */
#define V2_FRAMING_HEADER "Inference-Header-Content-Length"

/* The member of a tensor node that marks a binary segment. It is a string
 * *reference* node (cJSON_IsReference) whose valuestring points into the
 * request body and whose valuedouble is the byte count; cJSON_Parse never
 * makes reference nodes, so a /v1 request cannot forge one (its member of
 * this name is an unknown tensor field there). */
#define V2_SEGMENT_KEY "binary segment"

/* The /v1 parser's source of binary-segment tensors (v2/segments.c). */
extern const api_tensor_source v2_segments;
/* Reads a protocol shape (1..SRV_MAX_DIMS integers in [1, INT32_MAX], their
 * product at most the element limit) into ndim, shape and *count. */
bool v2_read_shape(const cJSON *node, const char *name, const api_ctx *ctx, int *ndim,
                   int64_t *shape, size_t *count, api_err *e);

enum { V2_OUTPUTS = API_NRES, V2_MAX_INPUTS = 32 };

/* True when name is "attention-<scheme>"; *t is the scheme. */
bool v2_model_type(const char *name, pa_scheme_type *t);

/* Where an input goes in the /v1 item. */
typedef enum v2_role {
    V2_ROLE_TENSOR,        /* an item tensor: q, k, v, x, w_q, ... */
    V2_ROLE_POSITIONS,     /* an item int array: q_positions, k_positions */
    V2_ROLE_SCHEME_TENSOR, /* a scheme tensor: table, rel_k, rel_v */
    V2_ROLE_SCHEME_ARRAY,  /* a scheme number array: slopes, short_factor, ... */
    V2_ROLE_NORM_WEIGHT,   /* q_norm_weight, k_norm_weight: the item's q_norm.weight, ... */
} v2_role;

typedef struct v2_input {
    const char *name;
    v2_role role;
    int ndim;     /* 0: 2 or 3 (a mask or bias: [Lq, Lk] or [H, Lq, Lk]) */
    bool int32;   /* INT32, else FP32 */
    bool boolean; /* BOOL (a mask: one byte per element in binary) */
} v2_input;

/* The inputs of model type t into out[V2_MAX_INPUTS]: the item's, then
 * its scheme's tensors and arrays. Returns their count. */
size_t v2_model_inputs(pa_scheme_type t, v2_input *out);

/* The outputs, in the order model metadata lists them. */
typedef struct v2_output {
    const char *name;
    unsigned bit; /* API_RET_* */
} v2_output;
extern const v2_output v2_outputs[V2_OUTPUTS];

/* What the answer needs from the request: the job's view_ctx. */
typedef struct v2_answer {
    char model[64];
    char *id; /* the request's id (malloc'd), or NULL */
    size_t n_out;
    unsigned bits[V2_OUTPUTS]; /* API_RET_* in the order asked */
    bool binary[V2_OUTPUTS];
} v2_answer;
void v2_answer_free(void *ans);
/* The job's view: renders the protocol's answer (or error) into reply. */
void v2_view(srv_job *job, void *ans, srv_reply *reply);

/* Fills reply with {"error": e->message} and e's status. */
void v2_fail_reply(srv_reply *reply, const api_err *e);
/* The 404 for an unknown model. */
void v2_unknown_model_reply(const char *name, srv_reply *reply);
/* Appends s to buf (cap bytes) after a ", " when buf is not empty. */
void v2_list_add(char *buf, size_t cap, const char *s);

#endif
