/* request.h - private to api/: the parts of a request that several
 * endpoints share. A scheme and the scheme parameter table (api/scheme.c),
 * read by /v1/attention, /v1/encode, /v1/analyze and GET /v1/schemes, and an
 * attention item (api/item.c), read by /v1/attention and /v1/analyze.
 */
#ifndef SRV_API_REQUEST_H
#define SRV_API_REQUEST_H

#include "api/json.h"
#include "api/protocol.h"
#include "codec/tensor.h"
#include "model/model.h"
#include "posattn.h"
#include "posattn_diff.h"
#include "posattn_mla.h"
#include "store/kv_cache.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A scheme parsed from a request, owning the tables pa_scheme borrows. */
typedef struct api_scheme {
    pa_scheme s;
    srv_tensor table; /* learned or t5 table, cope's pos_emb, rope2d mixed's freqs */
    srv_tensor rel_k, rel_v;
    float *short_factor, *long_factor, *slopes;
    float *r1, *r2;           /* kerple */
    float *w1, *b1, *w2, *b2; /* fire */
    size_t bytes;             /* bytes of the tables and arrays */
} api_scheme;

/* Parses the scheme object at member "scheme" of the ctx object. Unknown
 * parameters and parameters of another scheme are UNKNOWN_FIELD; rope
 * parameters of another scaling are INVALID_ARGUMENT. The scheme is only
 * parsed here; the core library checks it against the shapes. */
bool api_scheme_parse(const cJSON *node, const api_ctx *ctx, api_scheme *out, api_err *e);
void api_scheme_free(api_scheme *s);

/* Request memory of a tensor: a borrowed (loaded or in-place) tensor costs
 * none. */
size_t api_tensor_bytes(const srv_tensor *t);
/* Frees a parsed tensor (unless borrowed) and leaves it empty. */
void api_tensor_release(srv_tensor *t);

/* An attention item: the descriptor plus every buffer it borrows. */
typedef struct api_item {
    api_scheme scheme;
    pa_attention att; /* borrows the tensors below */
    srv_tensor q, k, v, x, w_q, w_k, w_v, w_o;
    srv_tensor sinks, bias;        /* [H]; [Lq, Lk] or [1 or H, Lq, Lk] */
    srv_tensor q_norm, k_norm;     /* RMSNorm weights: [D], or [H*D] / [Hkv*D]; or none */
    srv_tensor b_q, b_k, b_v, b_o; /* layer mode: projection biases */
    uint8_t *mask;                 /* [mask_heads, Lq, Lk] 0/1, malloc'd */
    int32_t *q_positions, *k_positions;
    int32_t *q_mrope, *k_mrope; /* [3, L] M-RoPE rows (with mrope_section), [2, L] rope2d's */
    unsigned ret;               /* API_RET_* */
    /* Sizes after defaults. */
    int32_t H, Hkv, D, Dv, Lq, Lk;
    int out_ndim;
    int64_t out_shape[4];
    /* A batch: q [B, Lq, H, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] (B is 1
     * and batched false for 3-D tensors). att describes sequence 0; the
     * strides (elements; 0 = shared by every sequence) say where the others
     * start (api_item_sequence). */
    int32_t B;
    bool batched;
    int32_t *key_lengths;   /* [B] per sequence, or NULL (att.key_length for all) */
    int32_t *query_lengths; /* [B] real query rows per sequence, or NULL (all Lq) */
    int32_t *default_qpos;  /* Lk-Lq .. Lk-1 when query_length is given without q_positions */
    size_t q_pos_stride, k_pos_stride, mask_stride, bias_stride;
    size_t q_mrope_stride, k_mrope_stride; /* [B, 3 or 2, L] position rows: 3 L or 2 L */
    size_t input_bytes;                    /* every tensor and array above */
    /* Packed sequences (api/item_packed.c): cu_seqlens [n_cu] and
     * cu_seqlens_k [n_cu] (or NULL), malloc'd; att borrows them. */
    int32_t *cu_seqlens, *cu_seqlens_k;
    int32_t n_cu;
    /* Differential attention (api/item_diff.c): att has q's 2H heads and H
     * the output heads; dif borrows the arrays below (lambda_q1, lambda_k1,
     * lambda_q2, lambda_k2, subln_weight), each a malloc'd number array or a
     * tensor. */
    bool diff;
    pa_differential dif;
    float *diff_array[5];
    srv_tensor diff_tensor[5];
    int32_t diff_len[5];
    /* MLA (api/item_mla.c): att's head_dim is q's D_nope + D_rope, its k
     * is k_nope [Lk, H, D_nope] (NULL in the absorbed form, as v); mla_opt
     * borrows k_rope, c_kv, w_uk and w_uv. */
    bool mla;
    pa_mla mla_opt;
    srv_tensor k_rope, c_kv, w_uk, w_uv;
    /* A session item (api/item_session.c): its sessions (one, or a list:
     * batched, B = n_sess), each with a hold on its scheme, its view from
     * api_item_session_commit on, its length, its default query positions;
     * the append's tensors (a leading [B] with a list). */
    bool session;
    struct srv_kv_cache *sess_cache;
    struct api_sess_seq *sess;
    int32_t n_sess;
    const float **sess_pages; /* stand-ins for the checks before the views */
    srv_tensor app_k, app_v;
    int32_t *app_pos; /* [n_sess, app_n] or NULL */
    int32_t app_n;
    /* With an append, the append waits for the item's first task
     * (api_item_session_start): sess_pending; API_SESS_ST_* of the parts'
     * one append. */
    bool sess_pending;
    atomic_int sess_state;
    const srv_limits *sess_lim;
    bool sess_end;     /* delete the session once the append landed (v2 sequence_end) */
    bool sess_created; /* the request made the session: deleted if the append never lands */
} api_item;

/* One session of a session item: its id, the hold on its scheme, the
 * appended count it was checked at, its retained length (as the append
 * will leave it, then its view's), its view, its default query positions
 * (next_position - Lq + i; NULL with q_positions). */
typedef struct api_sess_seq {
    char id[SRV_KV_ID_LEN];
    void *hold;
    int64_t expect;
    int32_t length;
    srv_kv_view view;
    bool viewed;
    int32_t *qpos;
} api_sess_seq;

/* The descriptor of sequence b of a valid item: att with the inputs of
 * sequence b (0 <= b < B). Its results go at b times the api_item_count of
 * each result. */
void api_item_sequence(const api_item *it, int32_t b, pa_attention *att);
/* A result's shape for one of API_RET_*: output [Lq, H, Dv] (or layer
 * mode's), weights and logits [H, Lq, Lk], q_rot [Lq, H, D], k_rot
 * [Lk, Hkv, D], entropy and distance [H, Lq]; with a leading B when
 * batched. Returns the rank. */
int api_item_result_shape(const api_item *it, unsigned which, int64_t shape[4]);
/* Elements of one sequence's result (saturating). */
size_t api_item_count(const api_item *it, unsigned which);
/* Prefixes e's message with the sequence it is about. */
void api_err_in_sequence(api_err *e, int32_t b);

/* An option of an attention item that current models add (softcap, sinks,
 * ...), as GET /v1/schemes documents it. The parser reads each by name. */
typedef struct api_option {
    const char *name;
    const char *type;    /* "number", "integer", "tensor" */
    const char *shape;   /* tensors: "[H]"; NULL for scalars */
    const char *formula; /* what it computes, one line */
    const char *models;  /* where it comes from */
    const char *kserve;  /* "input" or "parameter" in the v2 models */
    /* JSON of what a request that leaves it (or an object's member) out
     * gets: "false", {"eps": 1e-6, ...}; NULL when leaving it out is
     * having none (softcap, sinks, ...). GET /v1/schemes shows it. */
    const char *defaults;
} api_option;
/* The table, in documentation order. */
const api_option *api_options(size_t *n);

/* Parses and validates (pa_attention_check included) the attention fields
 * of obj into *out. extra[0..n_extra) are further member names the caller
 * reads itself (id, return, analysis, permutation, ...). On failure *out is
 * freed. */
bool api_item_parse(const cJSON *obj, const api_ctx *ctx, const char *const *extra, size_t n_extra,
                    api_item *out, api_err *e);
/* The options of current models (item_options.c), parsed into it once its
 * shapes are known (item.c). */
bool api_item_parse_options(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);
/* The positions and the masks they make (item_positions.c): causal,
 * window, key_length, scale, q_positions, k_positions and query_length,
 * parsed into it once its shapes are known (item.c), before the options. */
bool api_item_parse_positions(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);

/* Packed sequences (api/item_packed.c). Parses cu_seqlens and cu_seqlens_k
 * into it (called by api_item_parse before pa_attention_check, which
 * validates the rest). */
bool api_item_parse_packed(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);
bool api_item_is_packed(const api_item *it);
/* Whether a packed item returns result `which` (API_RET_*) as a list, one
 * tensor per sequence: weights and logits [H, Lq_s, Lk_s], entropy and
 * distance [H, Lq_s], held one after the other (the core library's
 * layout). Their api_item_result_shape is then flat, [the values]. */
bool api_item_packed_result(unsigned which);
int32_t api_item_packed_count(const api_item *it);
/* Sequence s's tensor of such a result: its shape (the rank is returned)
 * and where it starts (*offset, in values). */
int api_item_packed_shape(const api_item *it, unsigned which, int32_t s, int64_t shape[3],
                          size_t *offset);
/* Adds name: [tensor, ...] (one per sequence) to obj. */
bool api_item_render_packed(cJSON *obj, const char *name, const api_item *it, unsigned which,
                            const float *data, srv_encoding enc, srv_wire wire);

/* Differential attention (api/item_diff.c). api_item_parse_diff reads the
 * item's "differential" into it->diff and it->dif (before q, k and v;
 * layer mode is refused). api_item_diff_shapes, right after q, k and v,
 * checks v against the pairs' layout and the vectors against head_dim,
 * refuses batches and sets H (the output heads), Dv (2D) and the output
 * shape [Lq, H, 2D]. (api_item_parse_return refuses the results other
 * than output and weights.) */
bool api_item_parse_diff(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);
bool api_item_diff_shapes(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);
void api_item_diff_free(api_item *it);

/* Session items (api/item_session.c). api_item_parse_session reads
 * "session", q and "append" (refusing the fields the session provides)
 * and sizes the keys as the append will leave them; after every check,
 * api_item_session_commit takes the view the task reads, or leaves an
 * append to the item's first task (api_item_session_start below).
 * api_item_session_free releases them. */
bool api_item_parse_session(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);
bool api_item_session_commit(api_item *it, const api_ctx *ctx, api_err *e);
void api_item_session_free(api_item *it);
/* An item with an append (sess_pending) appends when its first task starts.
 * Every task of the item calls api_item_session_start before computing:
 * RUN: compute (the append landed, or there was none); FAILS: this task's
 * append failed, *e says why (its error is the item's); SKIP: another
 * part's append failed, do nothing; ABANDONED: a part timed out before the
 * append, so it never lands: this task times out too. */
typedef enum api_sess_start {
    API_SESS_RUN = 0,
    API_SESS_FAILS,
    API_SESS_SKIP,
    API_SESS_ABANDONED,
} api_sess_start;
/* sess_state */
enum {
    API_SESS_ST_OPEN = 0,
    API_SESS_ST_COMMITTING,
    API_SESS_ST_DONE,
    API_SESS_ST_FAILED,
    API_SESS_ST_ABANDONED,
};
api_sess_start api_item_session_start(api_item *it, const api_ctx *ctx, api_err *e);
/* A task of the item finds its deadline passed: true when it must run all
 * the same (the item's append landed or is landing), false when it times
 * out, and then the item's append never lands. */
bool api_item_session_keep(api_item *it);
/* A KServe v2 sequence step (v2/sequence.c): created, the request made the
 * session (deleted at the item's end if its append never landed); end,
 * delete the session once the step's append landed (at once when the step
 * appends nothing). False (and e) when that delete failed. */
bool api_item_session_own(api_item *it, bool created, bool end, api_err *e);
/* Sequence b of a session item (api_item_sequence's): its session's pages,
 * length, positions and query rows. */
void api_item_session_sequence(const api_item *it, int32_t b, pa_attention *att);
/* Whether some session of the item holds fewer keys than the item's Lk
 * (its results are padded after the run: api/attention.c). */
bool api_item_session_ragged(const api_item *it);
/* Whether the item names session id. */
bool api_item_session_names(const api_item *it, const char *id);
/* Load on first use (api/session_load.c): after the store answered ke =
 * SESSION_NOT_FOUND for id, and when replicas share --cache-dir
 * (lim->cache_root), takes the session over from another replica's folder
 * that holds its file and whose replica is not running (store/kv_snapshot.h,
 * srv_kv_adopt). True when the cache now holds it (try again); else false
 * with ke unchanged or saying why (the running replica that holds it). */
bool api_session_adopt(const srv_limits *lim, const char *id, srv_kv_err *ke);
/* Refuses t when t->shape[d] is not the session's figure `what` (want),
 * naming "name.shape[d]" and both values (api/sessions.c). */
bool api_session_dim(const srv_tensor *t, const char *name, int d, int64_t want, const char *what,
                     const api_ctx *ctx, api_err *e);

/* MLA with decoupled RoPE (api/item_mla.c). api_item_parse_mla reads the
 * item's "mla" into it->mla and it->mla_opt (before q, k and v; layer
 * mode, differential, and k_rope or c_kv without mla are refused).
 * api_item_mla_qkv then reads q, k_rope and k, v (expanded) or c_kv
 * (absorbed) in place of parse_qkv, checks every shape against q's and
 * mla.rope_dim, refuses batches and query_length, and sets the sizes and
 * the output shape [Lq, H, Dv]. k_rot is [Lk, D_rope]
 * (api_item_result_shape). */
bool api_item_parse_mla(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);
bool api_item_mla_qkv(const cJSON *obj, const api_ctx *ctx, api_item *it, api_err *e);
void api_item_mla_free(api_item *it);

/* Parses "return" into out->ret (default output only). */
bool api_item_parse_return(const cJSON *v, const api_ctx *ctx, api_item *out, api_err *e);
void api_item_free(api_item *it);

/* An item's "model" (api/model_item.c): the model, the layer, and the
 * merged item the parser reads instead of the item. */
typedef struct api_model_use {
    srv_model *owned; /* an inline config's model */
    const srv_model *model;
    const srv_model_layer *layer; /* NULL: the item names no model */
    cJSON *merged;
    bool override;
} api_model_use;
/* Resolves obj's "model", "layer", "stack" and "override" and merges the
 * layer's options into u->merged (nothing when obj has no "model"; then
 * "layer", "stack" and "override" are refused). On failure u is freed. */
bool api_model_merge(const cJSON *obj, const api_ctx *ctx, api_model_use *u, api_err *e);
/* The same for a model and layer already known (a session's, api/item.c):
 * "model", "layer" and "stack" of obj are passed through (the caller
 * refuses them), "override" is read, and the options named in
 * skip[0..n_skip) are neither merged nor refused (nor the tensors they
 * need): the item's own members of those names pass through as they are.
 * On failure u is freed. */
bool api_model_merge_layer(const cJSON *obj, const api_ctx *ctx, const srv_model *model,
                           const srv_model_layer *layer, const char *const *skip, size_t n_skip,
                           api_model_use *u, api_err *e);
/* The model loaded (--model) as name, or UNKNOWN_MODEL naming "model" and
 * the loaded ones (and, when inline_ok, that a config object may be sent
 * instead). */
bool api_model_find(const api_ctx *ctx, const char *name, bool inline_ok, const srv_model **m,
                    api_err *e);
/* "model \"g2\" (gemma2) layer 0" (an inline config: "gemma2 layer 0"),
 * for messages. */
void api_model_label(const srv_model *m, const srv_model_layer *l, char *buf, size_t cap);
/* The parsed item's heads, kv heads and head dim against the config's. */
bool api_model_check_shapes(const api_model_use *u, const api_item *it, const api_ctx *ctx,
                            api_err *e);
void api_model_use_free(api_model_use *u);

/* A session made from a served model's layer (api/session_model.c). */
typedef struct api_session_model {
    const srv_model *model;       /* NULL: the create request sent "scheme" */
    const srv_model_layer *layer; /* srv_model_layer_at(model, NULL, "layer") */
    char who[160];                /* api_model_label */
} api_session_model;
/* "model" and "layer" of a POST /v1/sessions body into *fm (fm->model NULL
 * when there is no "model"): the model loaded by that name (UNKNOWN_MODEL),
 * "layer" required and in range (OUT_OF_RANGE), "scheme" and "layer"
 * without "model" refused, and a layer a session cannot keep UNSUPPORTED
 * naming "model" (MLA, differential attention, a scheme that needs a table
 * no config holds). */
bool api_session_model_parse(const cJSON *root, const api_ctx *ctx, api_session_model *fm,
                             api_err *e);
/* Whether a saved session made from a model (spec->model, spec->layer)
 * still fits the models loaded now (ctx->lim->models): the model is
 * loaded, has the layer, and that layer derives the scheme (scheme, parsed
 * from the file) and the dims the session was saved with; else false with
 * why in err. */
bool api_session_model_still(const api_ctx *ctx, const cJSON *scheme, const srv_kv_spec *spec,
                             char *err, size_t cap);
/* An item that names a session (and no "model"): when the session was made
 * from a served model, its layer's options merged into *mu as an item with
 * that "model" and "layer" would have them, but the session's scheme and
 * k_norm ("layer" and "stack" refused, "override" read); otherwise what
 * api_model_merge does for an item without "model". *hold is a hold on the
 * session's scheme as found here (NULL when it was not found), for the
 * caller to check that the session it reads is this one, and to release
 * (srv_kv_scheme_release). */
bool api_session_model_merge(const cJSON *obj, const api_ctx *ctx, api_model_use *mu, void **hold,
                             api_err *e);

/* Every position's row (position + offset) inside the learned table, with
 * the core library's wording; field names the array ("positions"). */
bool api_check_learned_rows(const pa_learned *l, const int32_t *pos, int32_t n, const char *field,
                            const api_ctx *ctx, api_err *e);

/* Largest position in an array (or the default 0..n-1), for rope tables. */
int32_t api_max_position(const int32_t *pos, int32_t n);

#endif
