/* roofline.c - see roofline.h: an attention item's flops and bytes, counted
 * from its shapes and position masks as the kernels skip work (lib/'s
 * tiles hidden by causal, window, chunk and padding are not computed), and
 * the fraction of the machine's peak (runtime/probe.c) its compute time
 * reached. Runs when the answer is rendered: O(Lq log Lk + Lk) a sequence.
 */
#include "api/roofline.h"

#include "api/json.h"
#include "codec/fmt_float.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One pair of query rows and keys and their positions (a sequence, or one
 * sequence of a packed item): qpos NULL is qbase + i; kpos NULL is j, and
 * otherwise sorted (ascending). */
typedef struct span_set {
    const pa_attention *a;
    int32_t nq, nk;
    const int32_t *qpos, *kpos;
    int64_t qbase;
} span_set;

static int64_t kp_at(const span_set *s, int32_t j)
{
    return s->kpos != NULL ? s->kpos[j] : j;
}

/* lib/attention_mask.c's rules, in 64 bits: the first position of qp's
 * chunk, and a key hidden below qp (window, chunk) or above it (causal,
 * window, chunk). With sorted keys each holds for a prefix or a suffix. */
static int64_t chunk_start(int64_t qp, int64_t C)
{
    int64_t q = qp / C;
    if (qp % C < 0)
        q--;
    return q * C;
}

static bool hidden_left(const pa_attention *a, int64_t qp, int64_t kp)
{
    if (a->chunk_size > 0 && kp < chunk_start(qp, a->chunk_size))
        return true;
    return a->window > 0 && qp - kp >= a->window;
}

static bool hidden_right(const pa_attention *a, int64_t qp, int64_t kp)
{
    if (a->chunk_size > 0 && kp >= chunk_start(qp, a->chunk_size) + a->chunk_size)
        return true;
    if (a->causal)
        return kp > qp;
    return a->window > 0 && kp - qp >= a->window;
}

/* [lo, hi) of the keys qp sees, by binary search. */
static void visible_span(const span_set *s, int64_t qp, int32_t *lo, int32_t *hi)
{
    int32_t a = 0, b = s->nk;
    while (a < b) {
        const int32_t m = a + (b - a) / 2;
        if (hidden_left(s->a, qp, kp_at(s, m)))
            a = m + 1;
        else
            b = m;
    }
    *lo = a;
    b = s->nk;
    while (a < b) {
        const int32_t m = a + (b - a) / 2;
        if (hidden_right(s->a, qp, kp_at(s, m)))
            b = m;
        else
            a = m + 1;
    }
    *hi = a;
}

/* Adds the pairs each row sees and the keys some row sees to *visible and
 * *keys. False when out of memory. */
static bool count_set(const span_set *s, double *visible, double *keys)
{
    const pa_attention *a = s->a;
    int32_t *edge;
    double v = 0, u = 0;
    int64_t run = 0;

    if (s->nq <= 0 || s->nk <= 0)
        return true;
    if (!a->causal && a->window <= 0 && a->chunk_size <= 0) {
        *visible += (double)s->nq * s->nk;
        *keys += s->nk;
        return true;
    }
    /* Each row's span marks its keys: +1 where it starts, -1 past its end. */
    edge = calloc((size_t)s->nk + 1, sizeof *edge);
    if (edge == NULL)
        return false;
    for (int32_t i = 0; i < s->nq; i++) {
        int32_t lo, hi;
        visible_span(s, s->qpos != NULL ? s->qpos[i] : s->qbase + i, &lo, &hi);
        if (hi > lo) {
            v += hi - lo;
            edge[lo]++;
            edge[hi]--;
        }
    }
    for (int32_t j = 0; j < s->nk; j++) {
        run += edge[j];
        u += run > 0;
    }
    free(edge);
    *visible += v;
    *keys += u;
    return true;
}

static int cmp_i32(const void *x, const void *y)
{
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Counts one pair whose key positions kpos (NULL: 0 .. nk-1) may be in any
 * order: visibility depends on a key's position alone, so a sorted copy
 * counts the same. */
static bool count_pair(span_set s, double *visible, double *keys)
{
    int32_t *sorted = NULL;
    bool ok;
    if (s.kpos != NULL && s.nk > 1 && (s.a->causal || s.a->window > 0 || s.a->chunk_size > 0)) {
        bool in_order = true;
        for (int32_t j = 1; j < s.nk && in_order; j++)
            in_order = s.kpos[j - 1] <= s.kpos[j];
        if (!in_order) {
            sorted = malloc((size_t)s.nk * sizeof *sorted);
            if (sorted == NULL)
                return false;
            memcpy(sorted, s.kpos, (size_t)s.nk * sizeof *sorted);
            qsort(sorted, (size_t)s.nk, sizeof *sorted, cmp_i32);
            s.kpos = sorted;
        }
    }
    ok = count_set(&s, visible, keys);
    free(sorted);
    return ok;
}

/* The visible pairs and seen keys of one sequence's descriptor. */
static bool count_sequence(const pa_attention *a, double *visible, double *keys)
{
    const int32_t Lq = a->q_len, Lk = a->k_len;
    if (a->cu_seqlens_q != NULL) { /* packed: the diagonal blocks, positions per sequence */
        const int32_t *cq = a->cu_seqlens_q, *ck = a->cu_seqlens_k ? a->cu_seqlens_k : cq;
        for (int32_t s = 0; s < a->num_seqs; s++) {
            const int32_t nq = cq[s + 1] - cq[s], nk = ck[s + 1] - ck[s];
            span_set set = {a,
                            nq,
                            nk,
                            a->q_positions ? a->q_positions + cq[s] : NULL,
                            a->k_positions ? a->k_positions + ck[s] : NULL,
                            (int64_t)nk - nq};
            if (!count_pair(set, visible, keys))
                return false;
        }
        return true;
    }
    /* key_length: the keys from it on are padding, never computed. */
    span_set set = {a,
                    Lq,
                    a->key_length >= 0 && a->key_length < Lk ? a->key_length : Lk,
                    a->q_positions,
                    a->k_positions,
                    (int64_t)Lk - Lq};
    return count_pair(set, visible, keys);
}

bool api_roofline_work(const api_item *it, api_work *w)
{
    api_work r = {0, 0, 0, 0};
    double qrows = 0, results = 0;
    if (it->att.x != NULL || it->diff || it->mla)
        return false;
    const double H = it->H, Hkv = it->Hkv, D = it->D, Dv = it->Dv;
    for (int32_t b = 0; b < it->B; b++) {
        pa_attention a;
        api_item_sequence(it, b, &a);
        if (!count_sequence(&a, &r.visible, &r.keys))
            return false;
        qrows += a.q_len;
    }
    for (int res = 0; res < API_NRES; res++)
        if (res == 0 || (it->ret & (1u << res)))
            results += (double)api_item_count(it, 1u << res) * it->B;
    r.flops = 2.0 * (D + Dv) * H * r.visible;
    /* keys and values in their stored type (a bf16 or f16 session: 2 bytes) */
    const double kvb = it->att.kv_dtype == PA_DTYPE_F32 ? 4.0 : 2.0;
    r.bytes = 4.0 * (qrows * H * D + results) + kvb * r.keys * Hkv * (D + Dv);
    *w = r;
    return true;
}

bool srv_roofline_bf16_peak(const srv_machine *m)
{
    return m != NULL && m->bf16_gflops_1 > 0 && m->bf16_gflops_n > 0;
}

const char *srv_roofline_count(double v, char *buf)
{
    if (v >= 0 && v < 9007199254740992.0 && v == floor(v)) {
        char *p = buf + SRV_ROOFLINE_TEXT;
        uint64_t u = (uint64_t)v;
        *--p = '\0';
        do {
            *--p = (char)('0' + u % 10);
            u /= 10;
        } while (u != 0);
        return p;
    }
    snprintf(buf, SRV_ROOFLINE_TEXT, "%.17g", v); /* fits: at most 24 characters */
    return buf;
}

/* A count of work as a JSON number, without printf (srv_roofline_count). */
static bool add_count(cJSON *obj, const char *name, double v)
{
    char buf[SRV_ROOFLINE_TEXT];
    return cJSON_AddItemToObject(obj, name, cJSON_CreateRaw(srv_roofline_count(v, buf)));
}

int srv_roofline_text(double fraction, char *buf)
{
    if (fraction > 0 && isfinite(fraction)) {
        const double scale = pow(10.0, 3.0 - floor(log10(fraction)));
        fraction = round(fraction * scale) / scale;
    }
    return srv_fmt_float((float)fraction, buf);
}

bool srv_roofline_fraction(const srv_machine *m, double flops, double bytes, uint64_t us,
                           int threads, bool bf16, double *fraction, bool *compute_bound)
{
    double gflops, gbps, fc, fm;
    if (m == NULL || !m->probed || us == 0 || (flops <= 0 && bytes <= 0))
        return false;
    if (bf16 && srv_roofline_bf16_peak(m))
        gflops = threads > 1 ? m->bf16_gflops_n : m->bf16_gflops_1;
    else
        gflops = threads > 1 ? m->gflops_n : m->gflops_1;
    gbps = threads > 1 ? m->read_gbps_n : m->read_gbps_1;
    if (!(gflops > 0) || !(gbps > 0))
        return false;
    fc = flops / ((double)us * 1e3 * gflops); /* flops / (us 1e-6 s x gflops 1e9) */
    fm = bytes / ((double)us * 1e3 * gbps);
    *compute_bound = fc >= fm;
    *fraction = fc >= fm ? fc : fm;
    return true;
}

bool api_roofline_render(cJSON *obj, srv_job *job, const api_item *it, const api_task *t,
                         size_t tasks)
{
    cJSON *timing = cJSON_GetObjectItemCaseSensitive(obj, "timing");
    return timing == NULL || api_roofline_add(timing, job, it, t, tasks);
}

bool api_roofline_add(cJSON *timing, srv_job *job, const api_item *it, const api_task *t,
                      size_t tasks)
{
    api_work w;
    double fraction;
    bool compute;
    const int threads = tasks > 1 && job->machine != NULL ? job->machine->threads : 1;

    if (!api_roofline_work(it, &w))
        return true;
    job->roof_flops += w.flops;
    job->roof_bytes += w.bytes;
    job->roof_items++;
    if (it->att.compute_dtype == PA_DTYPE_BF16)
        job->roof_bf16_items++;
    if (!add_count(timing, "flops", w.flops) || !add_count(timing, "bytes", w.bytes))
        return false;
    const bool bf16 = it->att.compute_dtype == PA_DTYPE_BF16;
    if (!srv_roofline_fraction(job->machine, w.flops, w.bytes, t->compute_us, threads, bf16,
                               &fraction, &compute))
        return true;
    {
        struct api_roof_frac *more =
            realloc(job->roof_frac, (job->n_roof_frac + 1) * sizeof *job->roof_frac);
        if (more == NULL)
            return false;
        job->roof_frac = more;
        job->roof_frac[job->n_roof_frac].scheme = pa_scheme_type_name(it->scheme.s.type);
        job->roof_frac[job->n_roof_frac++].fraction = fraction;
    }
    char text[SRV_ROOFLINE_TEXT];
    srv_roofline_text(fraction, text);
    return cJSON_AddItemToObject(timing, "fraction_of_peak", cJSON_CreateRaw(text)) &&
           cJSON_AddStringToObject(timing, "bound", compute ? "compute" : "memory") != NULL &&
           cJSON_AddStringToObject(timing, "peak_dtype",
                                   bf16 && srv_roofline_bf16_peak(job->machine) ? "bf16" : "f32") !=
               NULL &&
           cJSON_AddItemToObject(timing, "peak_threads", srv_json_int(threads));
}

bool srv_job_roofline_item(const srv_job *job, size_t k, const char **scheme, double *fraction)
{
    if (job == NULL || k >= job->n_roof_frac)
        return false;
    *scheme = job->roof_frac[k].scheme;
    *fraction = job->roof_frac[k].fraction;
    return true;
}

bool srv_job_roofline(const srv_job *job, double *flops, double *bytes, int *threads, bool *bf16)
{
    if (job == NULL || job->roof_items == 0)
        return false;
    *bf16 = job->roof_bf16_items == job->roof_items;
    *flops = job->roof_flops;
    *bytes = job->roof_bytes;
    *threads = job->n_tasks > 1 && job->machine != NULL ? job->machine->threads : 1;
    return true;
}
