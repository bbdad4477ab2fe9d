/* mla.c - posattn-load's --mla DR (and --mla-absorbed R): which schemes
 * DeepSeek's multi-head latent attention takes (include/posattn_mla.h, the
 * server's item option "mla") and the flags it cannot go with, checked
 * before anything is sent. The item's option and tensors are payload.c's.
 */
#include "load.h"

#include <stdlib.h>
#include <string.h>

int load_scheme_mla(const char *s)
{
    /* M-RoPE's sections are refused with mla; every other rope scaling is not. */
    return !strcmp(s, "none") || !strcmp(s, "rope") ||
           (!strncmp(s, "rope:", 5) && strcmp(s, "rope:mrope") != 0);
}

int load_mla_check(load_config *c, char *err, size_t errlen)
{
    const int dr = c->mla_rope_dim;
    int kept = 0;
    if (dr == 0) {
        snprintf(err, errlen, "%s", "--mla-absorbed needs --mla DR");
        return -1;
    }
    if (c->model_name || c->layer || c->packed > 1 || c->batch_seq > 1 || c->differential ||
        c->softcap > 0) {
        snprintf(err, errlen, "--mla: not with %s (the server refuses it)",
                 c->model_name      ? "--model"
                 : c->layer         ? "--layer (layer mode)"
                 : c->packed > 1    ? "--packed"
                 : c->batch_seq > 1 ? "--batch-seq"
                 : c->differential  ? "--differential"
                                    : "--softcap");
        return -1;
    }
    if (dr < 2 || dr % 2 != 0 || dr >= c->head_dim) {
        snprintf(err, errlen,
                 "--mla %d: D_rope must be even, >= 2 and below --head-dim %d (q's heads are "
                 "D_nope + D_rope = --head-dim wide)",
                 dr, c->head_dim);
        return -1;
    }
    if (c->kv_heads != c->heads) {
        snprintf(err, errlen,
                 "--mla: --kv-heads %d must equal --heads %d (k_nope and v have a head per query "
                 "head; the shared head is k_rope)",
                 c->kv_heads, c->heads);
        return -1;
    }
    /* The absorbed form's weights w_uk and w_uv, [H, D_nope, R] each, go
     * in every item: a bound of their own beside parse_args' for q, k, v. */
    if (c->mla_rank > 0 && (double)c->batch * c->heads * 2.0 * (c->head_dim - dr) * c->mla_rank *
                                   (c->encoding == LOAD_ENC_B64 ? 5.34 : 8.0) >
                               512.0 * 1024 * 1024) {
        snprintf(err, errlen, "%s",
                 "--mla-absorbed: w_uk and w_uv would pass 512 MB a request: lower "
                 "--mla-absorbed, --heads, --head-dim or --batch");
        return -1;
    }
    for (int i = 0; i < c->n_schemes; i++) {
        if (load_scheme_mla(c->schemes[i])) {
            c->schemes[kept++] = c->schemes[i];
            continue;
        }
        fprintf(stderr,
                "posattn-load: --mla: skipping scheme %s (MLA takes none and rope with any "
                "scaling but mrope: the others have per-head parameters, need layer mode or "
                "positions of their own)\n",
                c->schemes[i]);
        free(c->schemes[i]);
    }
    c->n_schemes = kept;
    if (kept == 0) {
        snprintf(err, errlen, "%s",
                 "--mla: none of --schemes is one MLA takes (none, rope, rope:linear, rope:ntk, "
                 "rope:dynamic, rope:yarn, rope:llama3)");
        return -1;
    }
    return 0;
}
