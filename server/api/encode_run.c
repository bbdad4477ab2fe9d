/* encode_run.c - POST /v1/encode's task and answer (encode.c parses the
 * request into an enc_job; api/encode.h): the signal computed by the core
 * library, then rendered.
 */
#include "api/encode.h"
#include "api/job.h"
#include "api/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_encode_run(srv_job *job, size_t i, void *ws, size_t ws_size)
{
    enc_job *ej = job->impl;
    const pa_scheme *s = &ej->sch.s;
    api_ctx ctx = {NULL, "", NULL, NULL};
    pa_error pe;
    pa_status st = PA_STATUS_OK;
    api_err e;
    size_t cells = (size_t)ej->Lq * (size_t)ej->Lk;

    switch (s->type) {
    case PA_SCHEME_SINUSOIDAL:
    case PA_SCHEME_LEARNED:
        ej->encoding = malloc((size_t)ej->n * (size_t)ej->dim * sizeof(float));
        if (ej->encoding == NULL)
            goto oom;
        if (s->type == PA_SCHEME_SINUSOIDAL)
            st = pa_sinusoidal_encode(&s->sinusoidal, ej->positions, ej->n, ej->dim, ej->encoding,
                                      &pe);
        else
            st = pa_learned_encode(&s->learned, ej->positions, ej->n, ej->encoding, &pe);
        break;
    case PA_SCHEME_ROPE: {
        size_t half = (size_t)ej->r / 2;
        int32_t maxpos = ej->positions3 != NULL ? api_max_position(ej->positions3, 3 * ej->n)
                                                : api_max_position(ej->positions, ej->n);
        ej->inv_freq_d = malloc((half ? half : 1) * sizeof(double));
        ej->inv_freq = malloc((half ? half : 1) * sizeof(float));
        ej->cos = malloc((half ? half : 1) * (size_t)ej->n * sizeof(float));
        ej->sin = malloc((half ? half : 1) * (size_t)ej->n * sizeof(float));
        if (ej->inv_freq_d == NULL || ej->inv_freq == NULL || ej->cos == NULL || ej->sin == NULL)
            goto oom;
        st =
            pa_rope_inv_freq(&s->rope, ej->dim, maxpos, ej->inv_freq_d, &ej->attention_factor, &pe);
        if (st == PA_STATUS_OK)
            st = ej->positions3 != NULL
                     ? pa_rope_cos_sin_mrope(&s->rope, ej->dim, ej->positions3, ej->n, maxpos,
                                             ej->cos, ej->sin, &pe)
                     : pa_rope_cos_sin(&s->rope, ej->dim, ej->positions, ej->n, maxpos, ej->cos,
                                       ej->sin, &pe);
        for (size_t k = 0; st == PA_STATUS_OK && k < half; k++)
            ej->inv_freq[k] = (float)ej->inv_freq_d[k];
        if (st == PA_STATUS_OK && (s->rope.mrope_section[0] != 0 || s->rope.mrope_section[1] != 0 ||
                                   s->rope.mrope_section[2] != 0)) {
            if ((ej->mrope_row = malloc((half ? half : 1) * sizeof(int32_t))) == NULL)
                goto oom;
            for (size_t k = 0; k < half; k++)
                ej->mrope_row[k] = pa_rope_mrope_row(&s->rope, (int32_t)k);
        }
        break;
    }
    case PA_SCHEME_XPOS: {
        /* The scaled tables first (for the factors), then the rotation's
         * own cos and sin over them. */
        size_t half = (size_t)ej->dim / 2, ncell = half * (size_t)ej->n;
        pa_rope rot;
        pa_xpos_rope(&s->xpos, &rot);
        ej->inv_freq_d = malloc(half * sizeof(double));
        ej->inv_freq = malloc(half * sizeof(float));
        ej->zeta = malloc(half * sizeof(float));
        ej->cos = malloc(ncell * sizeof(float));
        ej->sin = malloc(ncell * sizeof(float));
        ej->scale = malloc(ncell * sizeof(float));
        if (ej->inv_freq_d == NULL || ej->inv_freq == NULL || ej->zeta == NULL || ej->cos == NULL ||
            ej->sin == NULL || ej->scale == NULL)
            goto oom;
        st = pa_xpos_cos_sin(&s->xpos, ej->dim, ej->positions, ej->n, ej->centre, 1, ej->cos,
                             ej->sin, ej->scale, &pe);
        if (st == PA_STATUS_OK)
            st = pa_rope_cos_sin(&rot, ej->dim, ej->positions, ej->n, 0, ej->cos, ej->sin, &pe);
        pa_xpos_zeta(ej->dim, ej->inv_freq_d); /* zeta first, then inv_freq over it */
        for (size_t k = 0; st == PA_STATUS_OK && k < half; k++)
            ej->zeta[k] = (float)ej->inv_freq_d[k];
        if (st == PA_STATUS_OK)
            st = pa_rope_inv_freq(&rot, ej->dim, 0, ej->inv_freq_d, &ej->attention_factor, &pe);
        for (size_t k = 0; st == PA_STATUS_OK && k < half; k++)
            ej->inv_freq[k] = (float)ej->inv_freq_d[k];
        break;
    }
    case PA_SCHEME_ROPE2D: {
        const size_t half = (size_t)ej->dim / 2, heads = ej->H > 0 ? (size_t)ej->H : 1;
        ej->cos = malloc(half * (size_t)ej->n * heads * sizeof(float));
        ej->sin = malloc(half * (size_t)ej->n * heads * sizeof(float));
        if (ej->cos == NULL || ej->sin == NULL)
            goto oom;
        if (s->rope2d.variant == PA_ROPE2D_MIXED) { /* per head, no shared frequencies */
            st = pa_rope2d_cos_sin_mixed(&s->rope2d, ej->dim, ej->H, ej->positions3, ej->n, ej->cos,
                                         ej->sin, &pe);
            break;
        }
        ej->inv_freq = malloc(half * sizeof(float));
        ej->mrope_row = malloc(half * sizeof(int32_t));
        if (ej->inv_freq == NULL || ej->mrope_row == NULL)
            goto oom;
        for (size_t k = 0; k < half; k++) {
            int axis;
            ej->inv_freq[k] = (float)pa_rope2d_pair(&s->rope2d, ej->dim, (int32_t)k, &axis);
            ej->mrope_row[k] = axis;
        }
        st = pa_rope2d_cos_sin(&s->rope2d, ej->dim, ej->positions3, ej->n, ej->cos, ej->sin, &pe);
        break;
    }
    case PA_SCHEME_T5:
    case PA_SCHEME_SHAW:
        if (ej->Lq == 0)
            break;
        if ((ej->ints = malloc(cells * sizeof(int32_t))) == NULL)
            goto oom;
        for (int32_t a = 0; a < ej->Lq; a++) {
            for (int32_t b = 0; b < ej->Lk; b++) {
                /* kpos - qpos, clamped into int32 as the attention kernel does. */
                int64_t d = (int64_t)ej->k_positions[b] - ej->q_positions[a];
                int32_t rel = d > INT32_MAX ? INT32_MAX : d < INT32_MIN ? INT32_MIN : (int32_t)d;
                ej->ints[(size_t)a * ej->Lk + b] =
                    s->type == PA_SCHEME_T5
                        ? pa_t5_bucket(rel, s->t5.bidirectional, s->t5.num_buckets,
                                       s->t5.max_distance)
                        : pa_shaw_pair_index(&s->shaw, ej->q_positions[a], ej->k_positions[b]);
            }
        }
        break;
    default:
        break;
    }
    if (st == PA_STATUS_OK && ej->want_bias) {
        pa_attention_out out = {0};
        size_t nq = (size_t)ej->Lq * ej->H, nk = (size_t)ej->Lk * ej->H;
        float *output;
        ej->zeros = calloc(nq + 2 * nk, sizeof(float));
        ej->bias = malloc((size_t)ej->H * cells * sizeof(float));
        output = malloc((nq ? nq : 1) * sizeof(float));
        if (ej->zeros == NULL || ej->bias == NULL || output == NULL) {
            free(output);
            goto oom;
        }
        ej->att.q = ej->zeros;
        ej->att.k = ej->zeros + nq;
        ej->att.v = ej->zeros + nq + nk;
        memset(&out, 0, sizeof out);
        out.output = output;
        out.logits = ej->bias;
        st = pa_attention_run(&ej->att, &out, ws, ws_size, &pe);
        free(output);
    }
    if (st == PA_STATUS_OK && ej->chunk > 0) {
        /* Visible where a zero-input attention call of scheme none leaves a
         * finite logit: the masks exactly as /v1/attention applies them. */
        pa_attention_out out = {0};
        size_t vq = (size_t)ej->vis.q_len, vk = (size_t)ej->vis.k_len;
        float *zeros = calloc(vq + 2 * vk, sizeof(float)), *output = malloc(vq * sizeof(float));
        float *logits = malloc(vq * vk * sizeof(float));
        ej->visible = malloc(vq * vk * sizeof(int32_t));
        if (zeros == NULL || output == NULL || logits == NULL || ej->visible == NULL) {
            free(zeros);
            free(output);
            free(logits);
            goto oom;
        }
        ej->vis.q = zeros;
        ej->vis.k = zeros + vq;
        ej->vis.v = zeros + vq + vk;
        memset(&out, 0, sizeof out);
        out.output = output;
        out.logits = logits;
        st = pa_attention_run(&ej->vis, &out, ws, ws_size, &pe);
        for (size_t c = 0; st == PA_STATUS_OK && c < vq * vk; c++)
            ej->visible[c] = logits[c] > -INFINITY;
        free(zeros);
        free(output);
        free(logits);
    }
    if (st != PA_STATUS_OK) {
        api_fail_pa(&e, &ctx, &pe);
        api_task_fail(job, i, &e);
    }
    return;
oom:
    api_fail(&e, NULL, SRV_ERR_INTERNAL, "", "out of memory computing the encoding");
    api_task_fail(job, i, &e);
}

static bool add_int_grid(cJSON *root, const char *name, const int32_t *v, int32_t rows,
                         int32_t cols)
{
    cJSON *obj = cJSON_AddObjectToObject(root, name);
    cJSON *shape = obj != NULL ? cJSON_AddArrayToObject(obj, "shape") : NULL;
    return shape != NULL && cJSON_AddItemToArray(shape, cJSON_CreateNumber(rows)) &&
           cJSON_AddItemToArray(shape, cJSON_CreateNumber(cols)) &&
           cJSON_AddStringToObject(obj, "datatype", "INT32") &&
           api_add_int_array(obj, "data", v, rows * cols);
}

bool api_encode_render(srv_job *job, cJSON *root)
{
    enc_job *ej = job->impl;
    const pa_scheme *s = &ej->sch.s;
    srv_encoding enc = job->enc;

    if (!cJSON_AddStringToObject(root, "scheme", pa_scheme_type_name(s->type)))
        return false;
    switch (s->type) {
    case PA_SCHEME_SINUSOIDAL:
    case PA_SCHEME_LEARNED: {
        int64_t shape[2] = {ej->n, ej->dim};
        if (!srv_tensor_render(root, "encoding", ej->encoding, 2, shape, enc))
            return false;
        break;
    }
    case PA_SCHEME_ROPE: {
        int64_t half[1] = {ej->r / 2};
        int64_t grid[2] = {ej->n, ej->r / 2};
        if (!cJSON_AddNumberToObject(root, "rotary_dim", ej->r) ||
            !cJSON_AddNumberToObject(root, "attention_factor", ej->attention_factor) ||
            !srv_tensor_render(root, "inv_freq", ej->inv_freq, 1, half, enc) ||
            !srv_tensor_render(root, "cos", ej->cos, 2, grid, enc) ||
            !srv_tensor_render(root, "sin", ej->sin, 2, grid, enc))
            return false;
        if (ej->mrope_row != NULL) {
            cJSON *o = cJSON_AddObjectToObject(root, "mrope_row");
            cJSON *shape = o != NULL ? cJSON_AddArrayToObject(o, "shape") : NULL;
            if (shape == NULL || !cJSON_AddItemToArray(shape, cJSON_CreateNumber(ej->r / 2)) ||
                !cJSON_AddStringToObject(o, "datatype", "INT32") ||
                !api_add_int_array(o, "data", ej->mrope_row, ej->r / 2))
                return false;
        }
        break;
    }
    case PA_SCHEME_ROPE2D: {
        int64_t half[1] = {ej->r / 2};
        int64_t grid[2] = {ej->n, ej->r / 2}, heads[3] = {ej->H, ej->n, ej->r / 2};
        cJSON *o;
        if (s->rope2d.variant == PA_ROPE2D_MIXED) { /* cos, sin [H, n, dim/2] */
            if (!cJSON_AddNumberToObject(root, "rotary_dim", ej->r) ||
                !srv_tensor_render(root, "cos", ej->cos, 3, heads, enc) ||
                !srv_tensor_render(root, "sin", ej->sin, 3, heads, enc))
                return false;
            break;
        }
        o = cJSON_AddObjectToObject(root, "axis");
        cJSON *shape = o != NULL ? cJSON_AddArrayToObject(o, "shape") : NULL;
        if (!cJSON_AddNumberToObject(root, "rotary_dim", ej->r) ||
            !srv_tensor_render(root, "inv_freq", ej->inv_freq, 1, half, enc) || shape == NULL ||
            !cJSON_AddItemToArray(shape, cJSON_CreateNumber(ej->r / 2)) ||
            !cJSON_AddStringToObject(o, "datatype", "INT32") ||
            !api_add_int_array(o, "data", ej->mrope_row, ej->r / 2) ||
            !srv_tensor_render(root, "cos", ej->cos, 2, grid, enc) ||
            !srv_tensor_render(root, "sin", ej->sin, 2, grid, enc))
            return false;
        break;
    }
    case PA_SCHEME_XPOS: {
        int64_t half[1] = {ej->r / 2};
        int64_t grid[2] = {ej->n, ej->r / 2};
        if (!cJSON_AddNumberToObject(root, "rotary_dim", ej->r) ||
            !cJSON_AddNumberToObject(root, "centre", (double)ej->centre) ||
            !srv_tensor_render(root, "inv_freq", ej->inv_freq, 1, half, enc) ||
            !srv_tensor_render(root, "zeta", ej->zeta, 1, half, enc) ||
            !srv_tensor_render(root, "cos", ej->cos, 2, grid, enc) ||
            !srv_tensor_render(root, "sin", ej->sin, 2, grid, enc) ||
            !srv_tensor_render(root, "scale", ej->scale, 2, grid, enc))
            return false;
        break;
    }
    case PA_SCHEME_ALIBI: {
        int64_t h[1] = {ej->H};
        if (!srv_tensor_render(root, "slopes", ej->slopes, 1, h, enc))
            return false;
        break;
    }
    case PA_SCHEME_T5:
    case PA_SCHEME_SHAW:
        if (!add_int_grid(root, s->type == PA_SCHEME_T5 ? "buckets" : "index", ej->ints, ej->Lq,
                          ej->Lk))
            return false;
        break;
    case PA_SCHEME_KERPLE:
    case PA_SCHEME_SANDWICH:
    case PA_SCHEME_FIRE:
        break; /* the bias below */
    default:
        if (!cJSON_AddStringToObject(root, "note", "scheme 'none' (NoPE) has no positional signal"))
            return false;
        break;
    }
    if (ej->want_bias) {
        int64_t shape[3] = {ej->H, ej->Lq, ej->Lk};
        if (!srv_tensor_render(root, "bias", ej->bias, 3, shape, enc))
            return false;
    }
    if (ej->visible != NULL &&
        !add_int_grid(root, "chunk_visible", ej->visible, ej->vis.q_len, ej->vis.k_len))
        return false;
    return true;
}
