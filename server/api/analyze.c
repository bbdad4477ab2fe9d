/* analyze.c - POST /v1/analyze: the core library's analyses of
 * positional schemes, one task per request.
 *
 *   permutation    an attention item + `permutation` (default reversed)
 *                  -> max_abs_diff = max |f(Px) - P f(x)|
 *   rope_offset    rope or xpos `scheme`, `q`, `k` [head_dim], `offsets`,
 *                  `base_position`, `positions` -> score, spread per offset
 *   similarity     sinusoidal/learned `scheme`, `length`|`positions`, `dim`,
 *                  `shift` -> similarity [n, n], shift_residual
 *   decomposition  an attention item -> content, position (and the four
 *                  QK terms for absolute schemes) [H, Lq, Lk]
 *   extrapolation  api/extrapolation.c: entropy, distance and far share by
 *                  position band at each of several lengths
 *   rope_spectrum  rope `scheme`, `head_dim`, `train_length`, `length` ->
 *                  per frequency pair: inv_freq (scaled and not),
 *                  wavelength, rotations within train_length and length,
 *                  whether training saw a full period; the scaling's
 *                  bands; the attention factor
 */
#include "api/extrapolation.h"
#include "api/job.h"
#include "api/json.h"
#include "api/request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum an_kind {
    AN_PERMUTATION,
    AN_ROPE_OFFSET,
    AN_SIMILARITY,
    AN_DECOMPOSITION,
    AN_ROPE_SPECTRUM,
    AN_KINDS
} an_kind;

static const char *const an_names[AN_KINDS] = {"permutation", "rope_offset", "similarity",
                                               "decomposition", "rope_spectrum"};

/* The columns of the RoPE spectrum, [r/2] each. */
enum { SP_INV, SP_INV_BASE, SP_WAVE, SP_ROT_TRAIN, SP_ROT_LEN, SP_COLS };
static const char *const sp_names[SP_COLS] = {"inv_freq", "inv_freq_unscaled", "wavelength",
                                              "rotations_train", "rotations_length"};

typedef struct an_job {
    an_kind kind;
    cJSON *id; /* permutation, decomposition: echoed */
    /* permutation, decomposition */
    api_item it;
    int32_t *perm;
    double max_abs_diff;
    float *terms[6]; /* content, position, cc, cp, pc, pp */
    bool absolute;
    /* rope_offset, similarity */
    api_scheme sch;
    float *q, *k;
    int32_t head_dim;
    int32_t *offsets, n_offsets, base_position;
    int32_t *positions, n_positions;
    float *score, *spread;
    int32_t dim, shift;
    float *sim;
    double shift_residual;
    /* rope_spectrum */
    int32_t train_length, length, r;
    double attention_factor;
    float *spectrum[SP_COLS];
    int32_t *full_period;
    pa_rope_bands bands;
} an_job;

static const char *const term_names[6] = {"content",          "position",
                                          "content_content",  "content_position",
                                          "position_content", "position_position"};

static void an_destroy(void *impl)
{
    an_job *aj = impl;
    if (aj == NULL)
        return;
    cJSON_Delete(aj->id);
    api_item_free(&aj->it);
    free(aj->perm);
    for (int t = 0; t < 6; t++)
        free(aj->terms[t]);
    api_scheme_free(&aj->sch);
    free(aj->q);
    free(aj->k);
    free(aj->offsets);
    free(aj->positions);
    free(aj->score);
    free(aj->spread);
    free(aj->sim);
    for (int c = 0; c < SP_COLS; c++)
        free(aj->spectrum[c]);
    free(aj->full_period);
    free(aj);
}

static const cJSON *member(const cJSON *obj, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(obj, name);
}

/* ------------------------------------------------------------------------- */
/* Preparation                                                               */
/* ------------------------------------------------------------------------- */

/* The analyses explain one sequence: a batch is refused, naming it. */
static bool one_sequence(const api_item *it, const api_ctx *ctx, api_err *e)
{
    if (api_item_is_packed(it))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "cu_seqlens",
                        "an analysis explains one sequence: send each packed sequence as its own "
                        "request (POST /v1/attention takes cu_seqlens)");
    if (it->batched)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "q.shape",
                        "q.shape is [B, L, H, D]=[%d, %d, %d, %d], a batch: an analysis explains "
                        "one sequence, so send q [L, H, D] (POST /v1/attention takes batches)",
                        (int)it->B, (int)it->Lq, (int)it->H, (int)it->D);
    return true;
}

static bool prepare_permutation(const cJSON *root, const api_ctx *ctx, an_job *aj, size_t *ws,
                                size_t *need, api_err *e)
{
    static const char *const extra[] = {"analysis", "id", "permutation"};
    const cJSON *pv;
    int32_t L, n = 0;
    unsigned char *seen;

    if (!api_item_parse(root, ctx, extra, 3, &aj->it, e) || !one_sequence(&aj->it, ctx, e))
        return false;
    if (aj->it.Lq != aj->it.Lk)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "q.shape[0]",
                        "the permutation test needs self-attention, but q has %d rows and k "
                        "has %d",
                        (int)aj->it.Lq, (int)aj->it.Lk);
    L = aj->it.Lq;
    if ((pv = member(root, "permutation")) != NULL) {
        if (!api_get_int_array(pv, "permutation", ctx, &aj->perm, &n, e))
            return false;
        if (n != L)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "permutation",
                            "permutation has %d values but there are %d tokens", (int)n, (int)L);
        if ((seen = calloc((size_t)L, 1)) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        for (int32_t i = 0; i < L; i++) {
            char f[48];
            int32_t p = aj->perm[i];
            snprintf(f, sizeof f, "permutation[%d]", (int)i);
            if (p < 0 || p >= L || seen[p]) {
                free(seen);
                if (p < 0 || p >= L)
                    return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, f,
                                    "permutation[%d]=%d is not a row index below %d", (int)i,
                                    (int)p, (int)L);
                return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                                "permutation[%d]=%d repeats an earlier entry", (int)i, (int)p);
            }
            seen[p] = 1;
        }
        free(seen);
    } else {
        if ((aj->perm = malloc((size_t)L * sizeof *aj->perm)) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
        for (int32_t i = 0; i < L; i++)
            aj->perm[i] = L - 1 - i;
    }
    *ws = pa_permutation_workspace_size(&aj->it.att);
    *need = api_add_sat(aj->it.input_bytes, (size_t)L * sizeof(int32_t));
    return true;
}

static bool prepare_decomposition(const cJSON *root, const api_ctx *ctx, an_job *aj, size_t *ws,
                                  size_t *need, api_err *e)
{
    static const char *const extra[] = {"analysis", "id", "output_encoding"};
    int64_t shape[3];
    size_t cells;
    pa_scheme_type t;

    if (!api_item_parse(root, ctx, extra, 3, &aj->it, e) || !one_sequence(&aj->it, ctx, e))
        return false;
    t = aj->it.scheme.s.type;
    aj->absolute = t == PA_SCHEME_SINUSOIDAL || t == PA_SCHEME_LEARNED;
    shape[0] = aj->it.H;
    shape[1] = aj->it.Lq;
    shape[2] = aj->it.Lk;
    if (!api_check_result_size("content", 3, shape, ctx, e))
        return false;
    cells = (size_t)shape[0] * (size_t)shape[1] * (size_t)shape[2];
    *ws = pa_decompose_workspace_size(&aj->it.att);
    *need = api_add_sat(aj->it.input_bytes,
                        api_mul_sat(api_mul_sat(cells, aj->absolute ? 6 : 2), sizeof(float)));
    return true;
}

/* q or k of rope_offset: a 1-D tensor or a plain array of numbers. */
static bool get_vector(const cJSON *root, const char *name, const api_ctx *ctx, float **out,
                       int32_t *n, api_err *e)
{
    const cJSON *v = member(root, name);
    srv_tensor t;
    if (v == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, name,
                        "%s is required: head_dim numbers (an array or a 1-D tensor)", name);
    if (cJSON_IsArray(v))
        return api_get_float_array(v, name, ctx, out, n, e);
    if (!api_get_tensor(v, name, ctx, 1, &t, e))
        return false;
    /* The vector outlives the tensor record: take its data (a copy of a
     * loaded tensor's, which the job must not free). */
    if (t.borrowed) {
        float *copy = malloc(t.count * sizeof *copy);
        if (copy == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, name, "out of memory copying %s", name);
        memcpy(copy, t.data, t.count * sizeof *copy);
        t.data = copy;
    }
    *out = t.data;
    *n = (int32_t)t.count;
    return true;
}

static bool prepare_rope_offset(const cJSON *root, const api_ctx *ctx, an_job *aj, size_t *need,
                                api_err *e)
{
    const cJSON *v;
    int32_t nk = 0, lo = 0, shift;
    pa_error pe;

    if (!api_scheme_parse(member(root, "scheme"), ctx, &aj->sch, e))
        return false;
    if (aj->sch.s.type != PA_SCHEME_ROPE && aj->sch.s.type != PA_SCHEME_XPOS)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                        "the rope_offset analysis needs scheme.type 'rope' or 'xpos', not '%s'",
                        pa_scheme_type_name(aj->sch.s.type));
    if (!get_vector(root, "q", ctx, &aj->q, &aj->head_dim, e) ||
        !get_vector(root, "k", ctx, &aj->k, &nk, e))
        return false;
    if (nk != aj->head_dim)
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k",
                        "k has %d values but q has %d (head_dim)", (int)nk, (int)aj->head_dim);
    if ((aj->sch.s.type == PA_SCHEME_XPOS
             ? pa_xpos_check(&aj->sch.s.xpos, aj->head_dim, &pe)
             : pa_rope_check(&aj->sch.s.rope, aj->head_dim, &pe)) != PA_STATUS_OK)
        return api_fail_pa(e, ctx, &pe);

    if ((v = member(root, "offsets")) != NULL) {
        if (!api_get_int_array(v, "offsets", ctx, &aj->offsets, &aj->n_offsets, e))
            return false;
    } else if ((aj->offsets = api_range_positions(-16, 33)) == NULL) {
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    } else {
        aj->n_offsets = 33;
    }
    for (int32_t i = 0; i < aj->n_offsets; i++)
        if (aj->offsets[i] < lo)
            lo = aj->offsets[i];
    /* Defaults start where every offset keeps positions >= 0. */
    shift = lo == INT32_MIN ? INT32_MAX : -lo;
    aj->base_position = shift;
    if ((v = member(root, "base_position")) != NULL &&
        !api_get_int(v, "base_position", ctx, &aj->base_position, e))
        return false;
    if ((v = member(root, "positions")) != NULL) {
        if (!api_get_int_array(v, "positions", ctx, &aj->positions, &aj->n_positions, e))
            return false;
    } else {
        aj->n_positions = 64;
        if ((int64_t)shift + 63 > INT32_MAX)
            return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "offsets",
                            "offsets reach too far below 0 for the default positions; send "
                            "positions");
        if ((aj->positions = api_range_positions(shift, 64)) == NULL)
            return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");
    }
    *need = api_mul_sat((size_t)aj->n_offsets, 2 * sizeof(float) + sizeof(int32_t));
    *need = api_add_sat(*need, api_mul_sat((size_t)aj->n_positions, sizeof(int32_t)));
    *need = api_add_sat(*need, (size_t)aj->head_dim * 2 * sizeof(float));
    return true;
}

/* bytes of results about to be allocated, with their text and the
 * scheme's tables, against the request memory limit: checked before an
 * allocation proportional to a number of the request, so that a refusal
 * costs no work; the whole request is checked again once its size is
 * known. */
static bool fits(const an_job *aj, size_t bytes, srv_encoding enc, const api_ctx *ctx, api_err *e)
{
    return api_check_memory(
        api_add_sat(api_add_sat(bytes, api_rendered_bytes(bytes, enc)), aj->sch.bytes), ctx->lim,
        e);
}

static bool prepare_similarity(const cJSON *root, const api_ctx *ctx, srv_encoding enc, an_job *aj,
                               size_t *ws, size_t *need, api_err *e)
{
    const pa_scheme *s;
    const cJSON *v;
    int64_t shape[2];
    bool sinusoidal;
    pa_error pe;

    if (!api_scheme_parse(member(root, "scheme"), ctx, &aj->sch, e))
        return false;
    s = &aj->sch.s;
    sinusoidal = s->type == PA_SCHEME_SINUSOIDAL;
    if (!sinusoidal && s->type != PA_SCHEME_LEARNED)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                        "the similarity analysis needs an absolute scheme (sinusoidal or "
                        "learned), not '%s'",
                        pa_scheme_type_name(s->type));
    if (!api_get_length(root, "length", "positions", ctx, &aj->n_positions, &aj->positions, e))
        return false;
    if (aj->n_positions == 0)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "length",
                        "length (or positions) is required");
    /* The answer [n, n], bounded before the positions are made. */
    shape[0] = shape[1] = aj->n_positions;
    if (!api_check_result_size("similarity", 2, shape, ctx, e) ||
        !fits(aj,
              api_add_sat(api_mul_sat(api_mul_sat((size_t)aj->n_positions, (size_t)aj->n_positions),
                                      sizeof(float)),
                          (size_t)aj->n_positions * sizeof(int32_t)),
              enc, ctx, e))
        return false;
    if (aj->positions == NULL && (aj->positions = api_range_positions(0, aj->n_positions)) == NULL)
        return api_fail(e, ctx, SRV_ERR_INTERNAL, "", "out of memory");

    if ((v = member(root, "dim")) != NULL) {
        if (!api_get_int(v, "dim", ctx, &aj->dim, e))
            return false;
        if (aj->dim < 1)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "dim", "dim=%d must be at least 1",
                            (int)aj->dim);
    }
    aj->shift = 1;
    if (sinusoidal) {
        if (v == NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "dim",
                            "dim is required for scheme 'sinusoidal'");
        if (pa_sinusoidal_encode(&s->sinusoidal, NULL, 0, aj->dim, NULL, &pe) != PA_STATUS_OK)
            return api_fail_pa(e, ctx, &pe);
        if ((v = member(root, "shift")) != NULL && !api_get_int(v, "shift", ctx, &aj->shift, e))
            return false;
        for (int32_t i = 0; i < aj->n_positions; i++) {
            int64_t p = (int64_t)aj->positions[i] + aj->shift;
            if (p < INT32_MIN || p > INT32_MAX)
                return api_fail(e, ctx, SRV_ERR_OUT_OF_RANGE, "shift",
                                "positions[%d]=%d + shift=%d overflows int32", (int)i,
                                (int)aj->positions[i], (int)aj->shift);
        }
    } else {
        if (member(root, "shift") != NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "shift",
                            "shift applies to scheme 'sinusoidal' only (the shift residual of "
                            "learned encodings has no meaning)");
        if (s->learned.table == NULL)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.table",
                            "scheme.table is required: the learned scheme needs a table");
        if (v != NULL && aj->dim != s->learned.cols)
            return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "dim",
                            "dim=%d does not equal scheme.table.shape[1]=%d", (int)aj->dim,
                            (int)s->learned.cols);
        aj->dim = s->learned.cols;
        if (!api_check_learned_rows(&s->learned, aj->positions, aj->n_positions, "positions", ctx,
                                    e))
            return false;
    }
    *ws = pa_similarity_workspace_size(aj->n_positions, aj->dim);
    *need =
        api_mul_sat(api_mul_sat((size_t)aj->n_positions, (size_t)aj->n_positions), sizeof(float));
    *need = api_add_sat(*need, (size_t)aj->n_positions * sizeof(int32_t));
    return true;
}

/* train_length: the context the model was trained at (default the scheme's
 * original_max_position); length: the one to look at (default
 * train_length). Sized and bounded from head_dim before anything is
 * allocated or computed (an analysis of head_dim 2^30 would otherwise take
 * minutes and gigabytes before its 413); spectrum_fill computes it in the
 * task. */
static bool prepare_rope_spectrum(const cJSON *root, const api_ctx *ctx, srv_encoding enc,
                                  an_job *aj, size_t *need, api_err *e)
{
    const cJSON *v;
    const pa_rope *rope;
    pa_error pe;

    if (!api_scheme_parse(member(root, "scheme"), ctx, &aj->sch, e))
        return false;
    if (aj->sch.s.type != PA_SCHEME_ROPE)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "scheme.type",
                        "the rope_spectrum analysis needs scheme.type 'rope', not '%s'",
                        pa_scheme_type_name(aj->sch.s.type));
    rope = &aj->sch.s.rope;
    if ((v = member(root, "head_dim")) == NULL)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "head_dim",
                        "head_dim is required (the rotary dimension defaults to it)");
    if (!api_get_int(v, "head_dim", ctx, &aj->head_dim, e))
        return false;
    if (aj->head_dim > 0) {
        /* The arrays of the answer: [r/2] each, counted before any work. */
        int32_t r = pa_rope_rotary_dim(rope, aj->head_dim); /* checked below */
        int64_t shape[1] = {(r > 0 && r < aj->head_dim ? r : aj->head_dim) / 2};
        size_t bytes = api_mul_sat((size_t)(shape[0] > 0 ? shape[0] : 0),
                                   SP_COLS * sizeof(float) + sizeof(int32_t));
        if (!api_check_result_size("inv_freq", 1, shape, ctx, e) || !fits(aj, bytes, enc, ctx, e))
            return false;
    }
    if (pa_rope_check(rope, aj->head_dim, &pe) != PA_STATUS_OK ||
        pa_rope_bands_of(rope, aj->head_dim, &aj->bands, &pe) != PA_STATUS_OK)
        return api_fail_pa(e, ctx, &pe);
    aj->train_length = pa_rope_original_max_position(rope); /* its scaling's default too */
    if ((v = member(root, "train_length")) != NULL &&
        !api_get_int(v, "train_length", ctx, &aj->train_length, e))
        return false;
    if (aj->train_length < 1)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "train_length",
                        v != NULL ? "train_length=%d must be at least 1"
                                  : "train_length is required: the scheme has no "
                                    "original_max_position (%d)",
                        (int)aj->train_length);
    aj->length = aj->train_length;
    if ((v = member(root, "length")) != NULL && !api_get_int(v, "length", ctx, &aj->length, e))
        return false;
    if (aj->length < 1)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "length", "length=%d must be at least 1",
                        (int)aj->length);
    aj->r = pa_rope_rotary_dim(rope, aj->head_dim);
    *need = api_mul_sat((size_t)(aj->r / 2), SP_COLS * sizeof(float) + sizeof(int32_t));
    return true;
}

/* The spectrum of a prepared rope_spectrum analysis (O(r)), in the task;
 * *oom set when memory ran out. */
static pa_status spectrum_fill(an_job *aj, bool *oom, pa_error *pe)
{
    const pa_rope *rope = &aj->sch.s.rope;
    int32_t half = aj->r / 2;
    pa_rope base;
    pa_status st;
    double *inv, *inv0;
    bool ok;

    /* The unscaled spectrum: the same base and rotary_dim, no scaling. */
    base = *rope;
    base.scaling = PA_ROPE_SCALING_NONE;
    base.attention_factor = 0.0;
    inv = malloc((size_t)(half ? half : 1) * sizeof *inv);
    inv0 = malloc((size_t)(half ? half : 1) * sizeof *inv0);
    for (int c = 0; c < SP_COLS; c++)
        aj->spectrum[c] = malloc((size_t)(half ? half : 1) * sizeof(float));
    aj->full_period = malloc((size_t)(half ? half : 1) * sizeof(int32_t));
    ok = inv != NULL && inv0 != NULL && aj->full_period != NULL;
    for (int c = 0; c < SP_COLS; c++)
        ok = ok && aj->spectrum[c] != NULL;
    if (!ok) {
        free(inv);
        free(inv0);
        *oom = true;
        return PA_STATUS_OK;
    }
    /* max_position: the longest context looked at (dynamic and longrope). */
    st = pa_rope_inv_freq(rope, aj->head_dim, aj->length - 1, inv, &aj->attention_factor, pe);
    if (st == PA_STATUS_OK)
        st = pa_rope_inv_freq(&base, aj->head_dim, aj->length - 1, inv0, NULL, pe);
    for (int32_t i = 0; st == PA_STATUS_OK && i < half; i++) {
        const double wave = 6.28318530717958647692 / inv[i]; /* 2 pi / inv_freq */
        aj->spectrum[SP_INV][i] = (float)inv[i];
        aj->spectrum[SP_INV_BASE][i] = (float)inv0[i];
        aj->spectrum[SP_WAVE][i] = (float)wave;
        aj->spectrum[SP_ROT_TRAIN][i] = (float)(aj->train_length / wave);
        aj->spectrum[SP_ROT_LEN][i] = (float)(aj->length / wave);
        aj->full_period[i] = wave <= (double)aj->train_length;
    }
    free(inv);
    free(inv0);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Running and rendering                                                     */
/* ------------------------------------------------------------------------- */

static void an_run(srv_job *job, size_t i, void *ws, size_t ws_size)
{
    an_job *aj = job->impl;
    api_ctx ctx = {NULL, "", NULL, NULL};
    pa_error pe;
    pa_status st = PA_STATUS_OK;
    api_err e;

    switch (aj->kind) {
    case AN_PERMUTATION:
        st = pa_analyze_permutation(&aj->it.att, aj->perm, ws, ws_size, &aj->max_abs_diff, &pe);
        break;
    case AN_DECOMPOSITION: {
        size_t cells = (size_t)aj->it.H * (size_t)aj->it.Lq * (size_t)aj->it.Lk;
        int nterms = aj->absolute ? 6 : 2;
        pa_decomposition d;
        for (int t = 0; t < nterms; t++)
            if ((aj->terms[t] = malloc(cells * sizeof(float))) == NULL)
                goto oom;
        d.content = aj->terms[0];
        d.position = aj->terms[1];
        d.content_content = aj->terms[2];
        d.content_position = aj->terms[3];
        d.position_content = aj->terms[4];
        d.position_position = aj->terms[5];
        st = pa_analyze_decompose(&aj->it.att, &d, ws, ws_size, &pe);
        break;
    }
    case AN_ROPE_OFFSET: {
        size_t n = aj->n_offsets > 0 ? (size_t)aj->n_offsets : 1;
        aj->score = malloc(n * sizeof(float));
        aj->spread = malloc(n * sizeof(float));
        if (aj->score == NULL || aj->spread == NULL)
            goto oom;
        if (aj->sch.s.type == PA_SCHEME_XPOS)
            st = pa_analyze_xpos_offset(&aj->sch.s.xpos, aj->head_dim, aj->q, aj->k, aj->offsets,
                                        aj->n_offsets, aj->base_position, aj->positions,
                                        aj->n_positions, aj->score, aj->spread, &pe);
        else
            st = pa_analyze_rope_offset(&aj->sch.s.rope, aj->head_dim, aj->q, aj->k, aj->offsets,
                                        aj->n_offsets, aj->base_position, aj->positions,
                                        aj->n_positions, aj->score, aj->spread, &pe);
        break;
    }
    case AN_ROPE_SPECTRUM: {
        bool oom = false;
        st = spectrum_fill(aj, &oom, &pe);
        if (oom)
            goto oom;
        break;
    }
    case AN_KINDS:
        break;
    case AN_SIMILARITY: {
        bool sinusoidal = aj->sch.s.type == PA_SCHEME_SINUSOIDAL;
        size_t n = (size_t)aj->n_positions;
        if ((aj->sim = malloc(n * n * sizeof(float))) == NULL)
            goto oom;
        st = pa_analyze_similarity(&aj->sch.s, aj->positions, aj->n_positions, aj->dim, aj->shift,
                                   ws, ws_size, aj->sim, sinusoidal ? &aj->shift_residual : NULL,
                                   &pe);
        break;
    }
    }
    if (st != PA_STATUS_OK) {
        api_fail_pa(&e, &ctx, &pe);
        api_task_fail(job, i, &e);
    }
    return;
oom:
    api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory running the analysis");
    api_task_fail(job, i, &e);
}

static bool an_render(srv_job *job, cJSON *root)
{
    an_job *aj = job->impl;
    srv_encoding enc = job->enc;

    if (!cJSON_AddStringToObject(root, "analysis", an_names[aj->kind]))
        return false;
    if (aj->id != NULL) {
        cJSON *id = api_id_node(aj->id);
        if (id == NULL || !cJSON_AddItemToObject(root, "id", id)) {
            cJSON_Delete(id);
            return false;
        }
    }
    switch (aj->kind) {
    case AN_PERMUTATION:
        return cJSON_AddStringToObject(root, "scheme", pa_scheme_type_name(aj->it.scheme.s.type)) &&
               cJSON_AddNumberToObject(root, "max_abs_diff", aj->max_abs_diff);
    case AN_DECOMPOSITION: {
        int64_t shape[3] = {aj->it.H, aj->it.Lq, aj->it.Lk};
        int nterms = aj->absolute ? 6 : 2;
        if (!cJSON_AddStringToObject(root, "scheme", pa_scheme_type_name(aj->it.scheme.s.type)))
            return false;
        for (int t = 0; t < nterms; t++)
            if (!srv_tensor_render(root, term_names[t], aj->terms[t], 3, shape, enc))
                return false;
        return true;
    }
    case AN_ROPE_OFFSET: {
        int64_t n[1] = {aj->n_offsets};
        double worst = 0.0;
        for (int32_t i = 0; i < aj->n_offsets; i++)
            worst = fmax(worst, (double)aj->spread[i]);
        return cJSON_AddNumberToObject(root, "head_dim", aj->head_dim) &&
               cJSON_AddNumberToObject(root, "base_position", aj->base_position) &&
               api_add_int_array(root, "offsets", aj->offsets, aj->n_offsets) &&
               srv_tensor_render(root, "score", aj->score, 1, n, enc) &&
               srv_tensor_render(root, "spread", aj->spread, 1, n, enc) &&
               cJSON_AddNumberToObject(root, "max_spread", worst);
    }
    case AN_SIMILARITY: {
        int64_t shape[2] = {aj->n_positions, aj->n_positions};
        if (!cJSON_AddStringToObject(root, "scheme", pa_scheme_type_name(aj->sch.s.type)) ||
            !srv_tensor_render(root, "similarity", aj->sim, 2, shape, enc))
            return false;
        if (aj->sch.s.type == PA_SCHEME_SINUSOIDAL)
            return cJSON_AddNumberToObject(root, "shift", aj->shift) &&
                   cJSON_AddNumberToObject(root, "shift_residual", aj->shift_residual);
        return true;
    }
    case AN_ROPE_SPECTRUM: {
        int64_t n[1] = {aj->r / 2};
        const pa_rope_bands *b = &aj->bands;
        cJSON *bands, *o, *shape;
        bool ok = cJSON_AddStringToObject(root, "scheme", "rope") &&
                  cJSON_AddStringToObject(root, "scaling",
                                          pa_rope_scaling_name(aj->sch.s.rope.scaling)) &&
                  cJSON_AddNumberToObject(root, "head_dim", aj->head_dim) &&
                  cJSON_AddNumberToObject(root, "rotary_dim", aj->r) &&
                  cJSON_AddNumberToObject(root, "train_length", aj->train_length) &&
                  cJSON_AddNumberToObject(root, "length", aj->length) &&
                  cJSON_AddNumberToObject(root, "attention_factor", aj->attention_factor);
        for (int c = 0; ok && c < SP_COLS; c++)
            ok = srv_tensor_render(root, sp_names[c], aj->spectrum[c], 1, n, enc);
        o = ok ? cJSON_AddObjectToObject(root, "full_period_in_training") : NULL;
        shape = o != NULL ? cJSON_AddArrayToObject(o, "shape") : NULL;
        ok = shape != NULL && cJSON_AddItemToArray(shape, cJSON_CreateNumber(aj->r / 2)) &&
             cJSON_AddStringToObject(o, "datatype", "INT32") &&
             api_add_int_array(o, "data", aj->full_period, aj->r / 2) &&
             (bands = cJSON_AddObjectToObject(root, "bands")) != NULL;
        if (ok && b->yarn_low >= 0.0)
            ok = cJSON_AddNumberToObject(bands, "yarn_low", b->yarn_low) &&
                 cJSON_AddNumberToObject(bands, "yarn_high", b->yarn_high);
        if (ok && b->llama3_low_freq_wavelength >= 0.0)
            ok = cJSON_AddNumberToObject(bands, "llama3_high_freq_wavelength",
                                         b->llama3_high_freq_wavelength) &&
                 cJSON_AddNumberToObject(bands, "llama3_low_freq_wavelength",
                                         b->llama3_low_freq_wavelength);
        return ok;
    }
    case AN_KINDS:
        break;
    }
    return false;
}

/* The fields each analysis reads, besides the attention item's for
 * permutation and decomposition (checked by api_item_parse). */
static const char *const rope_offset_fields[] = {
    "analysis", "scheme", "q", "k", "offsets", "base_position", "positions", "output_encoding"};
static const char *const similarity_fields[] = {"analysis", "scheme", "length",         "positions",
                                                "dim",      "shift",  "output_encoding"};
static const char *const spectrum_fields[] = {"analysis",     "scheme", "head_dim",
                                              "train_length", "length", "output_encoding"};

static bool analyze_prepare(const cJSON *root, const api_ctx *top, srv_job **job_out,
                            srv_reply *reply)
{
    const srv_limits *lim = top->lim;
    api_ctx ctx = {lim, "", top->source, top->lift};
    api_err e;
    srv_job *job = NULL;
    an_job *aj = NULL;
    const cJSON *v;
    const char *name;
    size_t ws = 0, need = 0;
    int kind = -1;
    bool ok;

    v = member(root, "analysis");
    if (v == NULL) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "analysis",
                 "analysis is required: permutation, rope_offset, similarity, decomposition, "
                 "rope_spectrum or extrapolation");
        goto fail;
    }
    if (!api_get_string(v, "analysis", &ctx, &name, &e))
        goto fail;
    if (strcmp(name, "extrapolation") == 0)
        return api_extrapolation_prepare(root, top, job_out, reply);
    for (int k = 0; k < AN_KINDS; k++)
        if (strcmp(name, an_names[k]) == 0)
            kind = k;
    if (kind < 0) {
        api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "analysis",
                 "analysis='%.32s' is not permutation, rope_offset, similarity, decomposition, "
                 "rope_spectrum or extrapolation",
                 name);
        goto fail;
    }
    job = api_job_new(&srv_ep_analyze, 1);
    aj = calloc(1, sizeof *aj);
    if (job == NULL || aj == NULL) {
        free(aj);
        api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
        goto fail;
    }
    job->impl = aj;
    job->tasks[0].scheme_name = "analysis";
    aj->kind = (an_kind)kind;
    if ((v = member(root, "output_encoding")) != NULL && !api_get_encoding(v, &ctx, &job->enc, &e))
        goto fail;

    switch (aj->kind) {
    case AN_PERMUTATION:
        if (member(root, "output_encoding") != NULL) {
            api_fail(&e, &ctx, SRV_ERR_INVALID_ARGUMENT, "output_encoding",
                     "the permutation analysis returns no tensors; drop output_encoding");
            goto fail;
        }
        ok = prepare_permutation(root, &ctx, aj, &ws, &need, &e);
        break;
    case AN_DECOMPOSITION:
        ok = prepare_decomposition(root, &ctx, aj, &ws, &need, &e);
        break;
    case AN_ROPE_OFFSET:
        ok = api_check_fields(root, rope_offset_fields,
                              sizeof rope_offset_fields / sizeof rope_offset_fields[0], "",
                              "a rope_offset analysis", &ctx, &e) &&
             prepare_rope_offset(root, &ctx, aj, &need, &e);
        break;
    case AN_ROPE_SPECTRUM:
        ok = api_check_fields(root, spectrum_fields,
                              sizeof spectrum_fields / sizeof spectrum_fields[0], "",
                              "a rope_spectrum analysis", &ctx, &e) &&
             prepare_rope_spectrum(root, &ctx, job->enc, aj, &need, &e);
        break;
    default:
        ok = api_check_fields(root, similarity_fields,
                              sizeof similarity_fields / sizeof similarity_fields[0], "",
                              "a similarity analysis", &ctx, &e) &&
             prepare_similarity(root, &ctx, job->enc, aj, &ws, &need, &e);
        break;
    }
    if (!ok)
        goto fail;
    if (aj->kind == AN_PERMUTATION || aj->kind == AN_DECOMPOSITION) {
        const cJSON *id = member(root, "id");
        if (ws == 0) {
            api_fail(&e, &ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                     "the analysis workspace for these sizes overflows the address space");
            goto fail;
        }
        if (id != NULL && (aj->id = cJSON_Duplicate(id, true)) == NULL) {
            api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
            goto fail;
        }
    } else if (aj->kind == AN_SIMILARITY && ws == 0) {
        api_fail(&e, &ctx, SRV_ERR_PAYLOAD_TOO_LARGE, "",
                 "the similarity workspace for these sizes overflows the address space");
        goto fail;
    }
    job->tasks[0].workspace = ws;
    need = api_add_sat(need, api_rendered_bytes(need, job->enc)); /* the answer's text */
    need = api_add_sat(api_add_sat(need, ws), aj->sch.bytes);
    if (!api_check_memory(need, lim, &e))
        goto fail;
    *job_out = job;
    return true;

fail:
    srv_job_free(job);
    api_reply_err(reply, &e);
    return false;
}

const srv_endpoint srv_ep_analyze = {
    .name = "analyze",
    .prepare = analyze_prepare,
    .run = an_run,
    .render = an_render,
    .destroy = an_destroy,
};
