/* v2.h - the Open Inference Protocol (KServe V2, as Triton implements
 * it) over the /v1 attention path: every scheme is a model named
 * "attention-<scheme>", an infer request is translated into one /v1 attention
 * item and runs as a one-item attention job (srv_job_task_count, run_task,
 * finish, free as for /v1), whose answer is rendered in the protocol's form.
 * The binary tensor data extension is supported both ways.
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

/* True when name is a model ("attention-rope", ...). */
bool srv_v2_model_known(const char *name);

/* True when name is a model and version is "" (none named) or its one. */
bool srv_v2_model_version_known(const char *name, const char *version);

/* GET /v2: {"name":"posattn","version":...,"extensions":[...]}. */
void srv_v2_server_metadata(srv_reply *reply);

/* GET /v2/models/{name}: the model's inputs and outputs; 404 when unknown. */
void srv_v2_model_metadata(const char *name, srv_reply *reply);

/* The message of the 404 for an unknown model name (it says which models
 * there are) or, for a known one, an unknown version (NULL or "" for
 * none), in buf[cap]; cap >= 160 holds it whole. */
void srv_v2_unknown_model(const char *name, const char *version, char *buf, size_t cap);

/* The scheme (a pa_scheme_type_name) of model name, NULL when unknown: the
 * key of its counters in runtime/metrics.h. */
const char *srv_v2_model_scheme(const char *name);

/* GET /v2/models[/{name}[/versions/{v}]]/stats (Triton's statistics
 * extension): name NULL for every model, counts[] by pa_scheme_type (the
 * counters /metrics shows, runtime/metrics.h). */
void srv_v2_model_stats(const char *name, const srv_model_counts counts[PA_SCHEME_COUNT],
                        srv_reply *reply);

/* POST /v2/models/{name}/infer. body holds len bytes: a JSON header of
 * header_len bytes followed by the binary inputs, or (header_len < 0, no
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
