/* api_internal.h - private to the api*.c files: the job record every
 * endpoint shares, the error record a task keeps, the JSON field readers
 * (api_json.c) and the parsers of schemes and attention items
 * (api_request.c). Nothing here is seen by the HTTP layer.
 */
#ifndef SRV_API_INTERNAL_H
#define SRV_API_INTERNAL_H

#include "api.h"
#include "posattn.h"
#include "tensor.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define API_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define API_PRINTF(f, a)
#endif

/* Field paths and messages; the reply layer caps what it sends anyway. */
enum { API_FIELD_MAX = 192, API_MESSAGE_MAX = 512 };

/* An error as the API reports it: {"code","message","field"}. */
typedef struct api_err {
    srv_error code;
    char field[API_FIELD_MAX];
    char message[API_MESSAGE_MAX];
} api_err;

/* Where a parser is: the limits, and the path prefix of the object it reads
 * ("inputs[2]" for a batch item, "" for a top-level request). Error fields
 * are prefix + "." + name; messages use the name relative to the prefix,
 * as the core library's messages do ("k.shape[1]=3 does not divide ..."). */
typedef struct api_ctx {
    const srv_limits *lim;
    const char *prefix;
} api_ctx;

/* ------------------------------------------------------------------------- */
/* The job                                                                   */
/* ------------------------------------------------------------------------- */

/* One task's bookkeeping. Written only by the thread running the task (or
 * marking it timed out), read by srv_job_finish after every task is done. */
typedef struct api_task {
    bool failed;    /* err holds why */
    bool timed_out; /* never ran: its deadline passed */
    api_err err;
    uint64_t queue_us, compute_us;
    size_t workspace;        /* bytes srv_job_run_task reserves before running */
    double macs;             /* multiply-adds it computes; 0 when not estimated */
    const char *scheme_name; /* static: metrics label */
} api_task;

/* What an endpoint plugs into the job. */
typedef struct api_ops {
    /* Computes task i with ws (ws_size >= tasks[i].workspace bytes, NULL when
     * that is 0). Records failures in job->tasks[i]. */
    void (*run)(srv_job *job, size_t i, void *ws, size_t ws_size);
    /* Adds the answer of a single-task endpoint to root, or renders the
     * whole batch answer (attention). False on allocation failure. */
    bool (*render)(srv_job *job, cJSON *root);
    void (*destroy)(void *impl);
} api_ops;

struct srv_job {
    srv_endpoint ep;
    srv_encoding enc;
    size_t n_tasks;
    api_task *tasks;
    const api_ops *ops;
    void *impl; /* the endpoint's own state, freed by ops->destroy */
    /* Another protocol's answer to the same job (api_v2.c): when view is set,
     * srv_job_finish calls it instead of rendering the /v1 answer, and
     * srv_job_free frees view_ctx with view_free. */
    void (*view)(srv_job *job, void *view_ctx, srv_reply *reply);
    void (*view_free)(void *view_ctx);
    void *view_ctx;
};

/* Allocates a job with n zeroed tasks; NULL on allocation failure. */
srv_job *api_job_new(srv_endpoint ep, size_t n_tasks);

/* Records err as task i's failure. */
void api_task_fail(srv_job *job, size_t i, const api_err *err);

/* Endpoint preparers: parse and validate root (a JSON object) into *job.
 * On failure they fill *reply and return false, having freed everything. */
bool api_attention_prepare(const cJSON *root, const srv_limits *lim, srv_job **job,
                           srv_reply *reply);
bool api_encode_prepare(const cJSON *root, const srv_limits *lim, srv_job **job, srv_reply *reply);
bool api_analyze_prepare(const cJSON *root, const srv_limits *lim, srv_job **job, srv_reply *reply);

/* Adds {"queue_us":..,"compute_us":..} as "timing" to obj. */
bool api_render_timing(cJSON *obj, const api_task *t);
/* Adds {"code","message","field"} as "error" to obj. */
bool api_render_error(cJSON *obj, const api_err *e);

/* ------------------------------------------------------------------------- */
/* Errors and JSON field readers (api_json.c)                                */
/* ------------------------------------------------------------------------- */

/* Fills *e with code, field = ctx prefix + name, and the formatted message.
 * Returns false, so parsers write `return api_fail(...)`. */
bool api_fail(api_err *e, const api_ctx *ctx, srv_error code, const char *name, const char *fmt,
              ...) API_PRINTF(5, 6);
/* Same, from a core library error: its field gets the ctx prefix. */
bool api_fail_pa(api_err *e, const api_ctx *ctx, const pa_error *pe);
/* Copies the error of a failed srv_tensor_parse (whose reply holds it) into
 * *e and frees the reply. */
bool api_fail_reply(api_err *e, srv_reply *reply);
/* Fills *reply with *e. */
void api_reply_err(srv_reply *reply, const api_err *e);

/* Joins ctx prefix and name into buf: "inputs[2].k" or "k". */
const char *api_path(char *buf, size_t cap, const api_ctx *ctx, const char *name);
/* "inputs[i]" into buf (at least 32 bytes), without printf: it is on every
 * item's path. */
const char *api_item_prefix(char *buf, size_t i);
/* A copy of a request's "id" to echo in the answer (NULL on allocation
 * failure): integers from 0 up to 10^15 as raw digits, the text cJSON's
 * printer would give them after its sprintf("%1.15g") and sscanf. */
cJSON *api_id_node(const cJSON *id);

/* "string", "number", "array", ... for messages. */
const char *api_json_type(const cJSON *node);

/* Parses body (len bytes, need not be NUL-terminated) into a JSON object.
 * Rejects anything after the value but whitespace, and (413) a body whose
 * parse tree could need more than max_memory bytes. NULL with *e filled. */
cJSON *api_parse_body(const char *body, size_t len, size_t max_memory, api_err *e);

/* Checks that every member name of obj is in known[0..n) (n <= 64), and that
 * none repeats. On an unknown name: UNKNOWN_FIELD naming it and listing the
 * known ones. parent is obj's path relative to ctx ("scheme", or "" for the
 * ctx object itself); what describes obj in the message ("the request",
 * "an attention item", "scheme 'rope'"). */
bool api_check_fields(const cJSON *obj, const char *const *known, size_t n, const char *parent,
                      const char *what, const api_ctx *ctx, api_err *e);

/* Readers of one member value. name is the path relative to ctx (for the
 * error). Each fails with INVALID_ARGUMENT naming the type found. */
bool api_get_int(const cJSON *v, const char *name, const api_ctx *ctx, int32_t *out, api_err *e);
bool api_get_number(const cJSON *v, const char *name, const api_ctx *ctx, double *out, api_err *e);
bool api_get_bool(const cJSON *v, const char *name, const api_ctx *ctx, bool *out, api_err *e);
bool api_get_string(const cJSON *v, const char *name, const api_ctx *ctx, const char **out,
                    api_err *e);
/* Arrays of int32 / finite float values, 1 .. lim->max_tensor_elements long;
 * *out malloc'd (caller frees). */
bool api_get_int_array(const cJSON *v, const char *name, const api_ctx *ctx, int32_t **out,
                       int32_t *n, api_err *e);
/* Adds name: [v[0], ..., v[n-1]] to the object parent; false on allocation failure. */
bool api_add_int_array(cJSON *parent, const char *name, const int32_t *v, int32_t n);
bool api_get_float_array(const cJSON *v, const char *name, const api_ctx *ctx, float **out,
                         int32_t *n, api_err *e);
/* A length given as a count (len_name, >= 1) or as an explicit int array
 * (pos_name), or both when they agree. *n = 0 and *pos untouched when
 * neither is there; *pos is malloc'd when the array is given. */
bool api_get_length(const cJSON *obj, const char *len_name, const char *pos_name,
                    const api_ctx *ctx, int32_t *n, int32_t **pos, api_err *e);
/* first, first+1, ... (n values), malloc'd; NULL on allocation failure. */
int32_t *api_range_positions(int32_t first, int32_t n);
/* "json" or "b64". */
bool api_get_encoding(const cJSON *v, const api_ctx *ctx, srv_encoding *out, api_err *e);

/* Parses a tensor member with srv_tensor_parse; checks every dim fits int32. */
bool api_get_tensor(const cJSON *v, const char *name, const api_ctx *ctx, int want_ndim,
                    srv_tensor *out, api_err *e);

/* Element count of a result tensor against lim->max_tensor_elements:
 * PAYLOAD_TOO_LARGE naming the result when over. Shapes are non-negative. */
bool api_check_result_size(const char *name, int ndim, const int64_t *shape, const api_ctx *ctx,
                           api_err *e);

/* a * b and a + b in size_t, saturating at SIZE_MAX (memory estimates). */
size_t api_mul_sat(size_t a, size_t b);
size_t api_add_sat(size_t a, size_t b);

/* The 413 for a request that needs more than lim->max_request_memory. */
bool api_check_memory(size_t need, const srv_limits *lim, api_err *e);

/* ------------------------------------------------------------------------- */
/* Schemes and attention items (api_request.c)                               */
/* ------------------------------------------------------------------------- */

/* A scheme parsed from a request, owning the tables pa_scheme borrows. */
typedef struct api_scheme {
    pa_scheme s;
    srv_tensor table; /* learned or t5 table */
    srv_tensor rel_k, rel_v;
    float *short_factor, *long_factor, *slopes;
    size_t bytes; /* bytes of the tables and arrays */
} api_scheme;

/* Parses the scheme object at member "scheme" of the ctx object. Unknown
 * parameters and parameters of another scheme are UNKNOWN_FIELD; rope
 * parameters of another scaling are INVALID_ARGUMENT. The scheme is only
 * parsed here; the core library checks it against the shapes. */
bool api_scheme_parse(const cJSON *node, const api_ctx *ctx, api_scheme *out, api_err *e);
void api_scheme_free(api_scheme *s);

/* A scheme parameter as requests name it, for the parser and GET /v1/schemes. */
typedef enum api_param_kind {
    API_PARAM_NUMBER, /* double */
    API_PARAM_INT,    /* int32 */
    API_PARAM_BOOL,
    API_PARAM_ENUM,         /* a name: layout, scaling */
    API_PARAM_TENSOR,       /* 2-D tensor */
    API_PARAM_NUMBER_ARRAY, /* plain JSON array of numbers */
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

/* Return-field bits of an attention item. */
enum {
    API_RET_OUTPUT = 1u << 0,
    API_RET_WEIGHTS = 1u << 1,
    API_RET_LOGITS = 1u << 2,
    API_RET_Q_ROT = 1u << 3,
    API_RET_K_ROT = 1u << 4,
};

/* An attention item: the descriptor plus every buffer it borrows. */
typedef struct api_item {
    api_scheme scheme;
    pa_attention att; /* borrows the tensors below */
    srv_tensor q, k, v, x, w_q, w_k, w_v, w_o;
    int32_t *q_positions, *k_positions;
    unsigned ret; /* API_RET_* */
    /* Sizes after defaults. */
    int32_t H, Hkv, D, Dv, Lq, Lk;
    int out_ndim;
    int64_t out_shape[3];
    size_t input_bytes; /* every tensor and array above */
} api_item;

/* Parses and validates (pa_attention_check included) the attention fields
 * of obj into *out. extra[0..n_extra) are further member names the caller
 * reads itself (id, return, analysis, permutation, ...). On failure *out is
 * freed. */
bool api_item_parse(const cJSON *obj, const api_ctx *ctx, const char *const *extra, size_t n_extra,
                    api_item *out, api_err *e);
/* Parses "return" into out->ret (default output only). */
bool api_item_parse_return(const cJSON *v, const api_ctx *ctx, api_item *out, api_err *e);
void api_item_free(api_item *it);

/* Every position's row (position + offset) inside the learned table, with
 * the core library's wording; field names the array ("positions"). */
bool api_check_learned_rows(const pa_learned *l, const int32_t *pos, int32_t n, const char *field,
                            const api_ctx *ctx, api_err *e);

/* Largest position in an array (or the default 0..n-1), for rope tables. */
int32_t api_max_position(const int32_t *pos, int32_t n);

/* ------------------------------------------------------------------------- */
/* Attention results for other protocols (api.c) and the Open Inference      */
/* Protocol's binary segments (api_v2.c)                                     */
/* ------------------------------------------------------------------------- */

/* Item i of an attention job once every task is done: err (NULL when it
 * ran), timed_out, the merged timing, the parsed item and its results
 * (NULL when not requested). Pointers stay valid until srv_job_free, unless
 * the /v1 answer is rendered (it frees the results). False when i is out of
 * range or the job is not an attention job. */
typedef struct api_att_result {
    const api_err *err;
    bool timed_out;
    api_task timing;
    const api_item *it;
    const float *output, *weights, *logits, *q_rot, *k_rot;
} api_att_result;
bool api_attention_result(const srv_job *job, size_t i, api_att_result *out);
/* Why item i of a prepared attention job is invalid; NULL when it is valid. */
const api_err *api_attention_item_error(const srv_job *job, size_t i);

/* A tensor node whose data is a binary segment of an Open Inference Protocol
 * request: api_get_tensor hands it to api_v2_segment_tensor, which borrows
 * the bytes in place (or copies them when misaligned). Only api_v2.c builds
 * such nodes; parsed JSON can never be one (see api_v2.c). */
bool api_v2_is_segment(const cJSON *v);
bool api_v2_segment_tensor(const cJSON *v, const char *name, const api_ctx *ctx, int want_ndim,
                           srv_tensor *out, api_err *e);

#endif
