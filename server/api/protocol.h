/* protocol.h - what api/ offers to the wire protocols above it (v2/ today;
 * a sessions API or a model repository next): the parser's context and
 * error record, the one body reader every protocol uses, the typed readers
 * of request JSON, the scheme parameter table, and the attention job as a
 * protocol prepares it and renders its results in its own form.
 *
 * A protocol includes this header and api/api.h, never another header of
 * api/ (those say "private to api/" and tools/check_layering.py refuses an
 * include of them from outside api/). Everything here is api/'s: the
 * protocol hands api/ its bytes through api_tensor_source and its answer
 * through a job's view, and api/ never knows which protocol it serves.
 */
#ifndef SRV_API_PROTOCOL_H
#define SRV_API_PROTOCOL_H

#include "api/api.h"
#include "codec/json_lift.h"
#include "codec/tensor.h"
#include "common/errors.h"
#include "common/reply.h"
#include "posattn.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define API_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define API_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------------- */
/* Errors and the parser's context                                           */
/* ------------------------------------------------------------------------- */

/* Field paths and messages; the reply layer caps what it sends anyway. */
enum { API_FIELD_MAX = 192, API_MESSAGE_MAX = 1024 };

/* An error as the API reports it: {"code","message","field"}. */
typedef struct api_err {
    srv_error code;
    char field[API_FIELD_MAX];
    char message[API_MESSAGE_MAX];
} api_err;

/* Where a parser is: the limits, the path prefix of the object it reads
 * ("inputs[2]" for a batch item, "" for a top-level request), and where
 * the request's tensors are besides its JSON. Error fields are prefix +
 * "." + name; messages use the name relative to the prefix, as the core
 * library's messages do ("k.shape[1]=3 does not divide ..."). A context
 * derived for a part of the request keeps source and lift. */
typedef struct api_tensor_source api_tensor_source;
typedef struct api_ctx {
    const srv_limits *lim;
    const char *prefix;
    const api_tensor_source *source; /* NULL: tensors are in the JSON (or named) */
    const srv_lift *lift;            /* the body's arrays parsed before cJSON, or NULL */
} api_ctx;

/* Tensors that are not in the JSON text: the protocol layer that owns some
 * bytes (v2/: the binary part of an infer request) puts nodes of its own in
 * the tree it hands to a preparer, and api_get_tensor asks the ctx's source
 * about each tensor node before reading it as JSON. The api layer never
 * knows who the source is; arrows point down. */
struct api_tensor_source {
    /* True when node is one of the source's tensor nodes. */
    bool (*owns)(const api_tensor_source *src, const cJSON *node);
    /* Reads such a node as api_get_tensor_as does (same contract). Also
     * what api_get_float_array reads of such a node (a 1-D float tensor). */
    bool (*get)(const api_tensor_source *src, const cJSON *node, const char *name,
                const api_ctx *ctx, int want_ndim, srv_elem kind, srv_tensor *out, api_err *e);
    /* The raw little-endian bytes of such a node and their count: what the
     * integer readers (api_get_int_array, api_get_int_rows) decode when the
     * node also has "shape" ([n], or [rows, n]) and "dtype" ("i32", the
     * default, or "i64"), as a tensor of integers in base64 would. */
    const unsigned char *(*bytes)(const api_tensor_source *src, const cJSON *node, size_t *len);
};

/* Fills *e with code, field = ctx prefix + name, and the formatted message.
 * Returns false, so parsers write `return api_fail(...)`. */
bool api_fail(api_err *e, const api_ctx *ctx, srv_error code, const char *name, const char *fmt,
              ...) API_PRINTF(5, 6);
/* Fills *reply with *e in the /v1 form (a protocol of another error shape
 * rewrites it, as every reply it sends). */
void api_reply_err(srv_reply *reply, const api_err *e);

/* ------------------------------------------------------------------------- */
/* The body                                                                  */
/* ------------------------------------------------------------------------- */

/* A request body read as JSON: the parse tree, and the tensor arrays lifted
 * out of the text before cJSON parsed the rest (codec/json_lift.h), which
 * the parsers take through ctx->lift. */
typedef struct api_body {
    cJSON *root; /* a JSON object */
    srv_lift lift;
    bool lifted; /* lift holds arrays: point ctx->lift at it */
} api_body;

/* Reads body (len bytes; need not be NUL-terminated; it must outlive *out
 * when lift is true) as one JSON object, in three passes over the bytes:
 * the lift of tensor arrays (only when lift is true), the RFC 8259 check
 * (codec/json_check.h, which also counts the values, so the parse tree is
 * bounded by lim->max_request_memory before it is built), and cJSON's
 * parse. An error costs at most one more pass, to name its byte in the
 * body as sent. False with *e filled (MALFORMED_JSON naming the byte,
 * PAYLOAD_TOO_LARGE naming the flag, INVALID_ARGUMENT for a value that is
 * not an object) and *out empty. */
bool api_body_read(const char *body, size_t len, const srv_limits *lim, bool lift, api_body *out,
                   api_err *e);
/* Frees the tree and the lift's floats not taken; *b is left empty. */
void api_body_free(api_body *b);

/* ------------------------------------------------------------------------- */
/* Readers of request JSON                                                   */
/* ------------------------------------------------------------------------- */

/* "string", "number", "array", ... for messages. */
const char *api_json_type(const cJSON *node);

/* Checks that every member name of obj is in known[0..n) (n <= 64), and that
 * none repeats. On an unknown name: UNKNOWN_FIELD naming it and listing the
 * known ones. parent is obj's path relative to ctx ("scheme", or "" for the
 * ctx object itself); what describes obj in the message ("the request",
 * "an attention item", "scheme 'rope'"). */
bool api_check_fields(const cJSON *obj, const char *const *known, size_t n, const char *parent,
                      const char *what, const api_ctx *ctx, api_err *e);
/* obj's member name, or NULL; an optional int member (*present says
 * whether it was there). */
const cJSON *api_member(const cJSON *obj, const char *name);
bool api_opt_int(const cJSON *obj, const char *name, const api_ctx *ctx, int32_t *out,
                 bool *present, api_err *e);

/* Readers of one member value. name is the path relative to ctx (for the
 * error). Each fails with INVALID_ARGUMENT naming the type found. */
bool api_get_int(const cJSON *v, const char *name, const api_ctx *ctx, int32_t *out, api_err *e);
bool api_get_number(const cJSON *v, const char *name, const api_ctx *ctx, double *out, api_err *e);
bool api_get_bool(const cJSON *v, const char *name, const api_ctx *ctx, bool *out, api_err *e);
bool api_get_string(const cJSON *v, const char *name, const api_ctx *ctx, const char **out,
                    api_err *e);

/* a * b and a + b in size_t, saturating at SIZE_MAX (memory estimates). */
size_t api_mul_sat(size_t a, size_t b);
size_t api_add_sat(size_t a, size_t b);

/* ------------------------------------------------------------------------- */
/* Schemes' parameters                                                       */
/* ------------------------------------------------------------------------- */

/* A scheme parameter as requests name it, for the parser, GET /v1/schemes
 * and a protocol's own spelling of them (v2/: "parameters" and inputs). */
typedef enum api_param_kind {
    API_PARAM_NUMBER, /* double */
    API_PARAM_INT,    /* int32 */
    API_PARAM_BOOL,
    API_PARAM_ENUM,         /* a name: layout, scaling, direction */
    API_PARAM_TENSOR,       /* 2-D tensor */
    API_PARAM_NUMBER_ARRAY, /* plain JSON array of numbers */
    API_PARAM_INT_ARRAY,    /* plain JSON array of integers (mrope_section) */
} api_param_kind;

typedef struct api_param {
    pa_scheme_type type;
    const char *name;
    api_param_kind kind;
    size_t offset;     /* of the value in pa_scheme (number, int, bool, enum) */
    unsigned scalings; /* rope: bit mask of scalings it applies to; 0 = all */
    const char *shape; /* tensors and arrays: "[num_buckets, H]" */
    const char *need;  /* "required", "optional", "required for attention" */
    const char *doc;   /* one line */
} api_param;

/* The parameter table, in documentation order. */
const api_param *api_params(size_t *n);
/* "json" type names for a kind: "number", "integer", ... */
const char *api_param_kind_name(api_param_kind k);
/* The name of value v of an API_PARAM_ENUM parameter ("neox", "concat",
 * "query_minus_key", ...); NULL past its last value. */
const char *api_param_enum_name(const api_param *p, int v);

/* ------------------------------------------------------------------------- */
/* The attention job                                                         */
/* ------------------------------------------------------------------------- */

/* Return-field bits of an attention item: result r is bit 1 << r. */
enum {
    API_RET_OUTPUT = 1u << 0,
    API_RET_WEIGHTS = 1u << 1,
    API_RET_LOGITS = 1u << 2,
    API_RET_Q_ROT = 1u << 3,
    API_RET_K_ROT = 1u << 4,
    API_RET_ENTROPY = 1u << 5,
    API_RET_DISTANCE = 1u << 6,
};
enum { API_NRES = 7 };
/* The results' names in that order: output, weights, logits, q_rot, k_rot,
 * entropy, distance. */
extern const char *const api_result_names[API_NRES];

/* Sessions (api/session_create.c, api/sessions.c) for a protocol that keeps state in them (v2/:
 * Triton's sequences), as /v1/sessions keeps them. api_session_create
 * creates the session spec describes (a POST /v1/sessions body, its "id"
 * optional) and writes its id into id; errors are those of POST
 * /v1/sessions (SESSION_EXISTS 409 for a live id, a field of spec named).
 * api_session_scheme_type gives a live session's scheme, else
 * SESSION_NOT_FOUND (404). api_session_delete deletes one as DELETE
 * /v1/sessions/{id} does (its file under --cache-dir too): SESSION_NOT_FOUND,
 * or SESSION_BUSY while it is being appended to. Each drops the sessions
 * idle past --session-ttl first, and answers NOT_IMPLEMENTED when lim has
 * no session cache. Thread safety: the cache's (store/kv_cache.h). */
enum { API_SESSION_ID_MAX = 65 };
bool api_session_create(const cJSON *spec, const api_ctx *ctx, char id[API_SESSION_ID_MAX],
                        api_err *e);
bool api_session_scheme_type(const srv_limits *lim, const char *id, pa_scheme_type *type,
                             api_err *e);
bool api_session_delete(const srv_limits *lim, const char *id, api_err *e);

/* The preparer of POST /v1/attention (srv_ep_attention.prepare): root is a
 * /v1 attention request; ctx->source, when set, supplies tensor nodes that
 * are not JSON, and ctx->lift the arrays lifted from the body. */
bool api_attention_prepare(const cJSON *root, const api_ctx *ctx, srv_job **job, srv_reply *reply);

/* Why item i of a prepared attention job is invalid; NULL when it is valid. */
const api_err *api_attention_item_error(const srv_job *job, size_t i);

/* Item i of a prepared attention job is a step of a sequence kept in a
 * session (v2/sequence.c): created, the request made the session, which
 * goes at the item's end if the step's append never lands; end, delete the
 * session once the step appended (its answer is the step's). False (and
 * e) when a delete due now failed. Nothing for an item without a session. */
bool api_attention_session_own(srv_job *job, size_t i, bool created, bool end, api_err *e);

/* Item i of an attention job once every task is done: err (NULL when it
 * ran), timed_out, its timing (queue_us the longest wait of its tasks,
 * compute_us the wall time from the first start to the last end, cpu_us
 * the run times summed), and each result with its shape (NULL when not
 * requested). Pointers stay valid until srv_job_free, unless the /v1
 * answer is rendered (it frees the results). False when i is out of range
 * or the job is not an attention job. */
typedef struct api_att_result {
    const api_err *err;
    bool timed_out;
    uint64_t queue_us, compute_us, cpu_us;
    srv_wire out_wire;          /* the item's output_dtype */
    const float *res[API_NRES]; /* by result (api_result_names); NULL when not computed */
    /* Each result's shape, as api/request.h's api_item_result_shape gives
     * it: output [Lq, H, Dv] (or layer mode's), weights and logits
     * [H, Lq, Lk], q_rot [Lq, H, D], k_rot [Lk, Hkv, D], entropy and
     * distance [H, Lq]; with a leading B when batched. */
    int ndim[API_NRES];
    int64_t shape[API_NRES][4];
} api_att_result;
bool api_attention_result(const srv_job *job, size_t i, api_att_result *out);
/* Adds item i's roofline (flops, bytes and, with the machine's peaks,
 * fraction_of_peak, bound, peak_threads, peak_dtype: as /v1's timing) to
 * params, and sums it into the job for Server-Timing. True (nothing added)
 * for an item that failed or has no formula; false on allocation failure. */
bool api_attention_roofline(srv_job *job, size_t i, cJSON *params);

/* The request's compute bound: the job's estimated multiply-adds (each
 * task's cost, or its macs), doubled, against lim->max_request_gflop.
 * False with a 413 PAYLOAD_TOO_LARGE naming the estimate, the limit and
 * the flag that sets it. srv_job_prepare checks every /v1 job; a protocol
 * that prepares an attention job itself checks it with this. */
bool api_job_check_cost(const srv_job *job, const srv_limits *lim, api_err *e);

/* A protocol's own answer to a job: srv_job_finish calls view instead of
 * rendering the /v1 answer, and srv_job_free frees view_ctx with view_free
 * (which may be NULL). Set once, after a successful prepare. */
typedef void (*api_job_view)(srv_job *job, void *view_ctx, srv_reply *reply);
void api_job_set_view(srv_job *job, api_job_view view, void (*view_free)(void *view_ctx),
                      void *view_ctx);

#endif
