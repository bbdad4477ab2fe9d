/* roofline.h - private to api/: the work an attention item's kernel does
 * (flops and bytes, api/roofline.c) and its place under the machine's
 * ceilings, rendered into the item's timing. docs/performance.md explains
 * the definitions and their limits.
 */
#ifndef SRV_API_ROOFLINE_H
#define SRV_API_ROOFLINE_H

#include "api/job.h"
#include "api/request.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* The work of one item, every sequence of it:
 *   flops = 2 (D + Dv) H x visible, visible the (query row, key) pairs the
 *           position masks leave (causal, window, chunk, key_length): the
 *           logits the kernels compute (they skip hidden tiles and trim
 *           the diagonal ones), q.k and P.v, 2 flops a multiply-add.
 *           An explicit mask or a -inf bias does not lower it (those
 *           logits are computed, then hidden).
 *   bytes = 4 x (q [Lq, H, D] read once, the keys some query row sees read
 *           once per kv head [U, Hkv, D + Dv], and every result the item
 *           computes written once [output Lq, H, Dv, ...]).
 * Lq counts the rows a sequence computes (query_length). False for the
 * items it has no formula for (layer mode, differential, mla): w is then
 * untouched. Allocates a little (sorting key positions that are not in
 * order); false also when that fails. */
typedef struct api_work {
    double flops, bytes;
    double visible; /* the (row, key) pairs of one head, every sequence */
    double keys;    /* the keys some row sees, every sequence */
} api_work;
bool api_roofline_work(const api_item *it, api_work *w);

/* Adds "flops" and "bytes" to obj's "timing" object and, when the job
 * knows the machine's peaks and t took time, "fraction_of_peak", "bound"
 * and "peak_threads"; sums the work into the job (srv_job_roofline). tasks
 * is how many tasks the item ran as (1: the one-thread peak, else the
 * workers'). True (and nothing added) for an item without a formula;
 * false on allocation failure. */
bool api_roofline_render(cJSON *obj, srv_job *job, const api_item *it, const api_task *t,
                         size_t tasks);
/* The same into the object timing itself (KServe v2's parameters). */
bool api_roofline_add(cJSON *timing, srv_job *job, const api_item *it, const api_task *t,
                      size_t tasks);

/* A rendered item's fraction of peak (srv_job_roofline_item). */
struct api_roof_frac {
    const char *scheme; /* pa_scheme_type_name */
    double fraction;
};

#endif
