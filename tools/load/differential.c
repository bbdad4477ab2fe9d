/* differential.c - posattn-load's --differential: which schemes
 * differential attention takes (include/posattn_diff.h, the server's item
 * option "differential") and the flags it cannot go with, checked before
 * anything is sent. The item's option and v's layout are payload.c's.
 */
#include "load.h"

#include <stdlib.h>
#include <string.h>

int load_scheme_differential(const char *s)
{
    return !strcmp(s, "none") || !strcmp(s, "rope") || !strncmp(s, "rope:", 5) ||
           !strcmp(s, "xpos") || !strncmp(s, "rope2d", 6);
}

int load_differential_check(load_config *c, char *err, size_t errlen)
{
    char ret[sizeof c->ret];
    int kept = 0;
    if (c->model_name || c->layer || c->packed > 1 || c->batch_seq > 1 || c->sinks) {
        snprintf(err, errlen, "--differential: not with %s (the server refuses it)",
                 c->model_name      ? "--model"
                 : c->layer         ? "--layer (layer mode)"
                 : c->packed > 1    ? "--packed"
                 : c->batch_seq > 1 ? "--batch-seq"
                                    : "--sinks");
        return -1;
    }
    if (c->heads % 2 != 0) {
        snprintf(err, errlen, "--differential pairs q's heads: --heads %d must be even", c->heads);
        return -1;
    }
    if (!c->diff_halves && c->kv_heads % 2 != 0) {
        snprintf(err, errlen,
                 "--differential with pairs interleaved: --kv-heads %d must be even (v has "
                 "kv-heads/2 heads of 2 x head-dim)",
                 c->kv_heads);
        return -1;
    }
    snprintf(ret, sizeof ret, "%s", c->ret);
    for (char *save, *tok = strtok_r(ret, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (strcmp(tok, "output") && strcmp(tok, "weights")) {
            snprintf(err, errlen,
                     "--differential returns output and weights only: not '%s' (--return)", tok);
            return -1;
        }
    for (int i = 0; i < c->n_schemes; i++) {
        if (load_scheme_differential(c->schemes[i])) {
            c->schemes[kept++] = c->schemes[i];
            continue;
        }
        fprintf(stderr,
                "posattn-load: --differential: skipping scheme %s (differential attention takes "
                "none, rope, xpos and rope2d: the others have per-head parameters or need layer "
                "mode)\n",
                c->schemes[i]);
        free(c->schemes[i]);
    }
    c->n_schemes = kept;
    if (kept == 0) {
        snprintf(err, errlen, "%s",
                 "--differential: none of --schemes is one differential attention takes (none, "
                 "rope, rope:*, xpos, rope2d*)");
        return -1;
    }
    return 0;
}
