/* attention_entry.c - the public entry points of attention that tell a
 * packed descriptor (cu_seqlens: lib/attention_packed.c, which runs each
 * sequence as a call of its own) from one sequence (lib/attention.c,
 * lib/attention_check.c). Here so that the packed layer sits above the
 * one-sequence path and nothing below calls back up.
 */
#include "attention_plan.h"

#include "cpu.h"

static bool packed(const pa_attention *a)
{
    return a != NULL && (a->cu_seqlens_q != NULL || a->cu_seqlens_k != NULL);
}

pa_status pa_attention_check(const pa_attention *a, pa_error *err)
{
    return packed(a) ? pa__packed_check(a, err) : pa__check_one(a, err);
}

size_t pa_attention_workspace_size(const pa_attention *a)
{
    return packed(a) ? pa__packed_workspace_size(a) : pa__workspace_one(a);
}

pa_status pa_attention_run_part(const pa_attention *a, const pa_attention_out *out, int32_t part,
                                int32_t nparts, void *ws, size_t ws_size, pa_error *err)
{
    const unsigned fp = pa__fp_enter();
    const pa_status st = packed(a) ? pa__packed_run_part(a, out, part, nparts, ws, ws_size, err)
                                   : pa__run_part_one(a, out, part, nparts, ws, ws_size, err);
    pa__fp_leave(fp);
    return st;
}

pa_status pa_attention_run(const pa_attention *a, const pa_attention_out *out, void *ws,
                           size_t ws_size, pa_error *err)
{
    return pa_attention_run_part(a, out, 0, 1, ws, ws_size, err);
}
