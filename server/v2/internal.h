/* internal.h - private to v2/: models.c (the models, their inputs and
 * metadata), model.c (errors, server metadata, statistics, the answer) and
 * infer.c (an infer request translated into a /v1 attention item). See
 * v2/v2.h.
 */
#ifndef SRV_V2_INTERNAL_H
#define SRV_V2_INTERNAL_H

#include "api/api.h"
#include "api/protocol.h"
#include "model/model.h"
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
/* Element at of inputs or outputs (at is "inputs[i]" or "outputs[i]"): an
 * object of the known fields (kinds says them in the error) with a string
 * "name", which *name then points at; path[cap] gets "<at>.name", for the
 * caller's errors about the name (v2/segments.c, beside v2_read_shape). */
bool v2_read_named(const cJSON *o, const char *at, const char *kinds, const char *const *known,
                   size_t n_known, char *path, size_t cap, const char **name, const api_ctx *ctx,
                   api_err *e);

enum { V2_OUTPUTS = API_NRES, V2_MAX_INPUTS = 32 };

/* A model of the protocol: a scheme's ("attention-rope") or one loaded
 * with --model, whose layers' options its config decides. */
typedef struct v2_model {
    char name[SRV_MODEL_NAME_MAX + 16];
    pa_scheme_type type;     /* a scheme's model: the scheme */
    const srv_model *config; /* a --model model (owned by the set), else NULL */
} v2_model;

/* Finds the model called name: "attention-<scheme>", or a model of set
 * (NULL: none loaded). */
bool v2_model_find(const srv_model_set *set, const char *name, v2_model *m);
/* Every model in order: the schemes' (PA_SCHEME_COUNT), then the set's. */
size_t v2_model_count(const srv_model_set *set);
void v2_model_at(const srv_model_set *set, size_t i, v2_model *m);
/* The key of m's counters (api/api.h): its scheme's name, or
 * "model:NAME" written into buf. */
const char *v2_model_key(const v2_model *m, char *buf, size_t cap);
/* The schemes m's scheme inputs and parameters belong to, a bit per
 * pa_scheme_type: its one scheme, or those of the config's layers. */
unsigned v2_model_schemes(const v2_model *m);
/* The scalar scheme parameter name of a scheme in schemes (a bit per
 * pa_scheme_type), or NULL. */
const api_param *v2_scheme_scalar(unsigned schemes, const char *name);

/* Where an input goes in the /v1 item. */
typedef enum v2_role {
    V2_ROLE_TENSOR,        /* an item tensor: q, k, v, x, w_q, ... */
    V2_ROLE_POSITIONS,     /* an item int array: q_positions, k_positions */
    V2_ROLE_SCHEME_TENSOR, /* a scheme tensor: table, rel_k, rel_v */
    V2_ROLE_SCHEME_ARRAY,  /* a scheme number array: slopes, short_factor, ... */
    V2_ROLE_NORM_WEIGHT,   /* q_norm_weight, k_norm_weight: the item's q_norm.weight, ... */
    V2_ROLE_MLA_TENSOR,    /* w_uk, w_uv: the item's mla.w_uk, mla.w_uv */
    V2_ROLE_DIFF_VECTOR,   /* lambda_q1 .. lambda_k2: the item's differential.lambda_q1, ...
                            * (a --model model whose layers need them: DiffLlama) */
} v2_role;

typedef struct v2_input {
    const char *name;
    v2_role role;
    int ndim;     /* 0: 2 or 3 (a mask or bias: [Lq, Lk] or [H, Lq, Lk]) */
    bool int32;   /* INT32, else FP32 */
    bool boolean; /* BOOL (a mask: one byte per element in binary) */
    /* The dims model metadata shows (0: -1, variable), and the dims a
     * metadata of M-RoPE positions shows instead of ndim's ([3, -1]). */
    int64_t shape[3];
    int meta_ndim; /* 0: ndim (3 for a mask or bias) */
} v2_input;

/* Whether spec, listed as FP32, also takes FP16, BF16 and FP64 (converted
 * to float32): every FP32 input but the scheme's number arrays. */
bool v2_input_floating(const v2_input *spec);

/* The input that carries an item field a layer needs (srv_model_need):
 * "scheme.table" is table, "q_norm.weight" q_norm_weight, "sinks" sinks,
 * "differential.lambda_q1" lambda_q1. */
const char *v2_need_input(const char *field);

/* The inputs of m into out[V2_MAX_INPUTS]: the item's, then its schemes'
 * tensors and arrays; for a --model model, differential's vectors when its
 * layers need them, and the dims its config fixes.
 * Returns their count. */
size_t v2_model_inputs(const v2_model *m, v2_input *out);

/* The outputs, in the order model metadata lists them. */
typedef struct v2_output {
    const char *name;
    unsigned bit; /* API_RET_* */
} v2_output;
extern const v2_output v2_outputs[V2_OUTPUTS];

/* [SEQ] Triton's sequence extension on the attention-<scheme> models
 * (v2/sequence.c): the request parameters sequence_id, sequence_start,
 * sequence_end and the sizes of a start, sequence_max_tokens,
 * sequence_window, sequence_sinks and sequence_reposition. */
typedef struct v2_seq {
    bool on;                           /* sequence_id names a sequence */
    bool start, end;                   /* sequence_start, sequence_end */
    char text[API_SESSION_ID_MAX - 4]; /* sequence_id as text: "42", "chat-7" */
    char id[API_SESSION_ID_MAX];       /* its session: "seq-<text>" */
    /* The sizes' nodes in the request (borrowed), or NULL. */
    const cJSON *max_tokens, *window, *sinks, *reposition;
} v2_seq;
/* Reads the request parameter m (its path "parameters.<name>") into s when
 * it is a sequence parameter: 1 when read, 0 when m is not one, -1 when
 * refused (e set, naming it). */
int v2_seq_parameter(v2_seq *s, const cJSON *m, const char *path, const api_ctx *ctx, api_err *e);
/* Appends the sequence parameters' names to list[cap] (v2_list_add). */
void v2_seq_list(char *list, size_t cap);
/* Once the request is read into item (the /v1 item of model m, whose
 * scheme inputs and parameters belong to schemes): without a sequence,
 * checks that no sequence parameter was given and leaves item alone. With
 * one, makes item a step of it: its k, v and k_positions become its
 * "append", it names the session s->id, and its "scheme" is detached into
 * *scheme (the caller's to delete; NULL without one). With s->start the
 * session is created from that scheme, k and v's dims and s's sizes, and
 * *created is set: the caller deletes it if the request fails later.
 * Without, the session must be live (SESSION_NOT_FOUND naming
 * parameters.sequence_id) and of m's scheme, and the scheme may carry no
 * parameter. False with e set on a refusal. */
bool v2_seq_item(v2_seq *s, const v2_model *m, unsigned schemes, cJSON *item, cJSON **scheme,
                 bool *created, const api_ctx *ctx, api_err *e);

/* What the answer needs from the request: the job's view_ctx. */
typedef struct v2_answer {
    char model[SRV_MODEL_NAME_MAX + 16]; /* v2_model.name */
    char *id;                            /* the request's id (malloc'd), or NULL */
    size_t n_out;
    unsigned bits[V2_OUTPUTS]; /* API_RET_* in the order asked */
    bool binary[V2_OUTPUTS];
} v2_answer;
void v2_answer_free(void *ans);
/* [V2] $request_output list outs (NULL: the default) -> the /v1 item's
 * "return" and the answer's order and encodings ([BIN] "binary_data",
 * default binary_all, the request's "binary_data_output"); model names
 * the model in messages. False with e set on a refusal. */
bool v2_read_outputs(cJSON *item, const char *model, const cJSON *outs, bool binary_all,
                     v2_answer *ans, const api_ctx *ctx, api_err *e);
/* The job's view: renders the protocol's answer (or error) into reply. */
void v2_view(srv_job *job, void *ans, srv_reply *reply);

/* Renders root (deleted) into a 200 reply when ok, else a 500. */
void v2_reply_tree(srv_reply *reply, cJSON *root, bool ok);

/* Fills reply with {"error": e->message} and e's status. */
void v2_fail_reply(srv_reply *reply, const api_err *e);
/* The 404 for an unknown model. */
void v2_unknown_model_reply(const srv_model_set *set, const char *name, srv_reply *reply);
/* Appends s to buf (cap bytes) after a ", " when buf is not empty. */
void v2_list_add(char *buf, size_t cap, const char *s);

#endif
