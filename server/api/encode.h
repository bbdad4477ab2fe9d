/* encode.h - private to api/: POST /v1/encode's job, parsed by encode.c
 * and computed and rendered by encode_run.c.
 */
#ifndef SRV_API_ENCODE_H
#define SRV_API_ENCODE_H

#include "api/request.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct enc_job {
    api_scheme sch;
    srv_encoding enc; /* the answer's, for the memory bound before any work */
    /* absolute schemes and rope */
    int32_t n, dim;
    int32_t *positions;
    /* relative schemes */
    int32_t H, Lq, Lk;
    int32_t *q_positions, *k_positions;
    bool want_bias;
    float *slopes;    /* alibi, computed at prepare (O(H)) */
    pa_attention att; /* bias: zero q/k/v; pointers set by the task */
    /* results */
    float *encoding;
    double *inv_freq_d;
    float *inv_freq, *cos, *sin;
    double attention_factor;
    int32_t r;
    int32_t *ints; /* buckets or index [Lq, Lk] */
    float *bias;
    float *zeros;
    int32_t *positions3; /* rope with mrope_section: [3, n]; rope2d: [2, n] or NULL (grid) */
    int32_t *mrope_row;  /* [r/2]; rope2d: each pair's axis */
    float *scale, *zeta; /* xpos: [n, D/2] and [D/2] */
    int64_t centre;      /* xpos */
    /* chunk_size: the visibility grid, from an attention run of scheme none */
    int32_t chunk;
    bool causal;
    int32_t *vis_q, *vis_k; /* positions [Lq], [Lk] (the relative ones when the scheme has them) */
    pa_scheme none;
    pa_attention vis;
    int32_t *visible; /* [Lq, Lk] */
} enc_job;

/* The endpoint's task (one) and answer. */
void api_encode_run(srv_job *job, size_t i, void *ws, size_t ws_size);
bool api_encode_render(srv_job *job, cJSON *root);

#endif
