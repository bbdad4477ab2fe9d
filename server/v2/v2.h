/* v2.h - the Open Inference Protocol (KServe V2, as Triton implements
 * it) over the /v1 attention path: every scheme is a model named
 * "attention-<scheme>", and every model loaded with --model NAME is a model
 * NAME (model/model.h: its config decides each layer's options, a request
 * names the layer). An infer request is translated into one /v1 attention
 * item and runs as a one-item attention job (srv_job_task_count, run_task,
 * finish, free as for /v1), whose answer is rendered in the protocol's form.
 * The binary tensor data extension is supported both ways.
 *
 * Functions that take the loaded models (srv_limits.models; NULL when none
 * is loaded) only read them.
 *
 * Specifications followed (cited by section in v2/model.c and v2/infer.c):
 *   kserve/kserve docs/predict-api/v2/required_api.md (HTTP/REST)
 *   triton-inference-server/server docs/protocol/extension_binary_data.md
 * Errors are {"error":"<message>"} with the status of the /v1 error code
 * (400 bad request, 404 unknown model, 413, 503, 504, ...).
 */
#ifndef SRV_V2_H
#define SRV_V2_H

#include "api/api.h"
#include "common/reply.h"
#include "model/model.h"
#include "posattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The protocol as http/ serves it (v2/protocol.c): the record its route
 * rows name, with the operation of each row. */
extern const srv_protocol srv_v2_protocol;
typedef enum srv_v2_op {
    SRV_V2_OP_SERVER,      /* GET /v2: server metadata */
    SRV_V2_OP_LIVE,        /* GET /v2/health/live */
    SRV_V2_OP_READY,       /* GET /v2/health/ready */
    SRV_V2_OP_STATS,       /* GET /v2/models/stats: every model's */
    SRV_V2_OP_MODEL,       /* GET /v2/models/{name}[/versions/{version}] */
    SRV_V2_OP_MODEL_READY, /* GET .../ready */
    SRV_V2_OP_INFER,       /* POST .../infer */
    SRV_V2_OP_MODEL_STATS, /* GET .../stats */
} srv_v2_op;

/* Each model has one version: metadata lists it, answers carry it as
 * model_version, and the versioned paths take it and no other. */
#define SRV_V2_MODEL_VERSION "1"

/* True when name is a model: "attention-<scheme>", or one of models. */
bool srv_v2_model_known(const srv_model_set *models, const char *name);

/* True when name is a model and version is "" (none named) or its one. */
bool srv_v2_model_version_known(const srv_model_set *models, const char *name, const char *version);

/* Start-up: true when every model of models can be a /v2 model of its
 * name; else false with the reason in err[cap]: a name that is a scheme's
 * model ("attention-rope") or that a route takes ("stats": GET
 * /v2/models/stats is every model's statistics). */
bool srv_v2_check_models(const srv_model_set *models, char *err, size_t cap);

/* GET /v2: {"name":"posattn","version":...,"extensions":[...]}. */
void srv_v2_server_metadata(srv_reply *reply);

/* GET /v2/models/{name}: the model's inputs and outputs (for a --model
 * model the dims its config fixes, the parameters layer and stack, and what
 * its layers require); 404 when unknown. */
void srv_v2_model_metadata(const srv_model_set *models, const char *name, srv_reply *reply);

/* The message of the 404 for an unknown model name (it says which models
 * there are) or, for a known one, an unknown version (NULL or "" for
 * none), in buf[cap]; cap >= 256 holds it whole (the names of --model are
 * cut short with "..."). */
void srv_v2_unknown_model(const srv_model_set *models, const char *name, const char *version,
                          char *buf, size_t cap);

/* The key of model name's counters (api/api.h, SRV_MODEL_KEY_PREFIX): its
 * scheme's name (a constant), or "model:NAME" written into buf[cap]; NULL
 * when name is no model. */
const char *srv_v2_model_key(const srv_model_set *models, const char *name, char *buf, size_t cap);

/* GET /v2/models[/{name}[/versions/{v}]]/stats (Triton's statistics
 * extension): name NULL for every model (the schemes' in pa_scheme_type
 * order, then those of --model), each one's counters read through
 * counts(arg, its key, out) (runtime/metrics.h; counts NULL: zeros). */
void srv_v2_model_stats(const srv_model_set *models, const char *name,
                        void (*counts)(void *arg, const char *key, srv_model_counts *out),
                        void *arg, srv_reply *reply);

/* POST /v2/models/{name}/infer (name: a model of lim->models too; its
 * parameters layer, stack and override go to the item's "layer", "stack"
 * and "override"). On an attention-<scheme> model, parameters.sequence_id
 * makes the request a step of Triton's sequence extension over the session
 * "seq-<id>" of lim->sessions: sequence_start creates it here, and
 * sequence_end deletes it here, once the job holds its view of it. body holds len bytes: a JSON
 * header of header_len bytes followed by the binary inputs, or (header_len < 0, no
 * Inference-Header-Content-Length) JSON only. Binary inputs are borrowed from
 * body in place when they are 4-byte aligned: body must outlive *job. On
 * success *job is an attention job whose srv_job_finish renders the
 * protocol's answer (JSON, or JSON header + binary outputs with
 * reply->len_header "Inference-Header-Content-Length" and reply->len_value
 * set, Content-Type application/octet-stream).
 * On failure fills *reply with a protocol error and returns false. */
bool srv_v2_infer_prepare(const char *model, const char *body, size_t len, int64_t header_len,
                          const srv_limits *lim, srv_job **job, srv_reply *reply);

/* Rewrites an error reply of the /v1 form {"error":{"code","message",...}}
 * into the protocol's {"error":"<message>"}, keeping its status. Replies that
 * are not errors, or already of that form, are left alone. */
void srv_v2_reply_error(srv_reply *reply);

#endif
