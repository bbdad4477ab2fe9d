/* sequence.c - see v2/internal.h: Triton's sequence extension on the
 * attention-<scheme> models. A sequence is the session "seq-<id>"
 * (api/protocol.h's api_session_*); a step is the /v1 item that names it,
 * with the request's k and v as its "append". infer.c reads the request
 * and calls in here for the sequence_* parameters and the item.
 *
 *   [SEQ] triton-inference-server/server docs/protocol/extension_sequence.md
 *         ("sequence_id", a uint64 or a string, 0 and "" meaning no
 *         sequence; "sequence_start", "sequence_end") and
 *         docs/user_guide/architecture.md, "Stateful Models" (the sequence
 *         batcher: a request without START on an unknown id is an error).
 */
#include "v2/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool oom(api_err *e)
{
    return api_fail(e, NULL, SRV_ERR_INTERNAL, "", "out of memory");
}

static bool ref(cJSON *parent, const char *name, const cJSON *node)
{
    /* A reference: the request's node is not copied. */
    return cJSON_AddItemReferenceToObject(parent, name, (cJSON *)node);
}

static bool check(const cJSON *v, api_param_kind kind, const char *path, const api_ctx *ctx,
                  api_err *e)
{
    int32_t i;
    bool b;
    return kind == API_PARAM_INT ? api_get_int(v, path, ctx, &i, e)
                                 : api_get_bool(v, path, ctx, &b, e);
}

/* The sequence parameters of an attention-<scheme> model. */
static const struct {
    const char *name;
    api_param_kind kind; /* API_PARAM_ENUM: sequence_id, a number or a string */
} seq_params[] = {
    {"sequence_id", API_PARAM_ENUM},         {"sequence_start", API_PARAM_BOOL},
    {"sequence_end", API_PARAM_BOOL},        {"sequence_max_tokens", API_PARAM_INT},
    {"sequence_window", API_PARAM_INT},      {"sequence_sinks", API_PARAM_INT},
    {"sequence_reposition", API_PARAM_BOOL},
};

/* The max_tokens of a sequence's session without sequence_max_tokens (and
 * without sequence_window, which bounds it by itself). */
enum { V2_SEQ_MAX_TOKENS = 4096 };

/* [SEQ] "sequence_id": an unsigned integer (Triton's uint64) or a string;
 * 0 and "" are no sequence (a stateless request). Its session is
 * "seq-<id>", so the id's text must fit a session id: 1 to 60 characters
 * of A-Z a-z 0-9 _ . -. A JSON number past 2^53 is not kept exactly by the
 * parser: such ids are sent as strings. */
static bool read_id(v2_seq *s, const cJSON *v, const api_ctx *ctx, api_err *e)
{
    static const char p[] = "parameters.sequence_id";
    if (cJSON_IsNumber(v)) {
        const double d = v->valuedouble;
        if (d != floor(d) || d < 0 || d > 9007199254740992.0)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, p,
                            "%s=%.17g is not a sequence id: an integer from 1 to 2^53 (send "
                            "larger ids as strings)",
                            p, d);
        if (d == 0)
            return true; /* [SEQ] "0 or \"\" indicates ... not part of a sequence" */
        snprintf(s->text, sizeof s->text, "%.0f", d);
    } else if (cJSON_IsString(v)) {
        const char *str = v->valuestring;
        const size_t n = strlen(str), max = API_SESSION_ID_MAX - 1 - 4;
        if (n == 0)
            return true;
        if (n > max ||
            strspn(str, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != n)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, p,
                            "%s='%.80s' is not a sequence id: 1 to %zu characters of A-Z a-z "
                            "0-9 _ . - (its session is \"seq-<id>\")",
                            p, str, max);
        snprintf(s->text, sizeof s->text, "%s", str);
    } else {
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, p,
                        "%s must be an unsigned integer or a string, found %s", p,
                        api_json_type(v));
    }
    snprintf(s->id, sizeof s->id, "seq-%s", s->text);
    s->on = true;
    return true;
}

int v2_seq_parameter(v2_seq *s, const cJSON *m, const char *path, const api_ctx *ctx, api_err *e)
{
    size_t k = 0;
    while (k < sizeof seq_params / sizeof *seq_params && strcmp(seq_params[k].name, m->string) != 0)
        k++;
    if (k == sizeof seq_params / sizeof *seq_params)
        return 0;
    if (k == 0)
        return read_id(s, m, ctx, e) ? 1 : -1;
    if (!check(m, seq_params[k].kind, path, ctx, e))
        return -1;
    switch (k) {
    case 1:
        s->start = cJSON_IsTrue(m);
        break;
    case 2:
        s->end = cJSON_IsTrue(m);
        break;
    case 3:
        s->max_tokens = m;
        break;
    case 4:
        s->window = m;
        break;
    case 5:
        s->sinks = m;
        break;
    default:
        s->reposition = m;
        break;
    }
    return 1;
}

/* Whether node holds a binary segment (v2/segments.c) anywhere. */
static bool has_segment(const cJSON *node)
{
    for (const cJSON *ch = node != NULL ? node->child : NULL; ch != NULL; ch = ch->next)
        if ((ch->string != NULL && strcmp(ch->string, V2_SEGMENT_KEY) == 0) || has_segment(ch))
            return true;
    return false;
}

/* dims[d] of the tensor node t (an input's {shape, ...}) into *out. */
static bool node_dim(const cJSON *t, int d, int32_t *out)
{
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *x = cJSON_GetArrayItem(sh, d);
    if (cJSON_GetArraySize(sh) != 3 || !cJSON_IsNumber(x))
        return false;
    *out = (int32_t)x->valuedouble;
    return true;
}

/* [SEQ] sequence_start: creates the session of the sequence with the
 * model's scheme (and the request's scheme parameters and tensors), the
 * dims of k and v, and the sequence_* sizes. Triton ends a live sequence
 * that a new start names, with a warning in its log; here the session may
 * be a /v1 client's, so the start is refused (SESSION_EXISTS, 409). */
static bool create(v2_seq *s, const cJSON *scheme, const cJSON *k, const cJSON *v,
                   const api_ctx *ctx, api_err *e)
{
    cJSON *spec = cJSON_CreateObject(), *ev = NULL;
    int32_t hkv, d, hv, dv;
    char id[API_SESSION_ID_MAX];
    bool ok;

    if (k == NULL || v == NULL) {
        cJSON_Delete(spec);
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, k == NULL ? "k" : "v",
                        "parameters.sequence_start needs inputs k [n, num_kv_heads, head_dim] "
                        "and v [n, num_kv_heads, v_head_dim]: their shapes make the sequence's "
                        "cache");
    }
    if (!node_dim(k, 1, &hkv) || !node_dim(k, 2, &d) || !node_dim(v, 1, &hv) ||
        !node_dim(v, 2, &dv)) {
        cJSON_Delete(spec);
        return api_fail(e, ctx, SRV_ERR_SHAPE_MISMATCH, "k.shape",
                        "a sequence's k and v are [n, num_kv_heads, head_dim] and [n, "
                        "num_kv_heads, v_head_dim]");
    }
    if (has_segment(scheme)) {
        cJSON_Delete(spec);
        return api_fail(e, ctx, SRV_ERR_UNSUPPORTED, "parameters.sequence_start",
                        "parameters.sequence_start keeps the scheme's tensors with the "
                        "sequence: send them as JSON data, not binary");
    }
    /* v's heads (hv) are checked against the session's by the item. */
    ok = spec != NULL && cJSON_AddStringToObject(spec, "id", s->id) &&
         ref(spec, "scheme", scheme) && cJSON_AddNumberToObject(spec, "num_kv_heads", hkv) &&
         cJSON_AddNumberToObject(spec, "head_dim", d) &&
         cJSON_AddNumberToObject(spec, "v_head_dim", dv);
    if (ok && s->max_tokens != NULL)
        ok = ref(spec, "max_tokens", s->max_tokens);
    else if (ok && s->window == NULL)
        ok = cJSON_AddNumberToObject(spec, "max_tokens", V2_SEQ_MAX_TOKENS) != NULL;
    if (ok && s->window != NULL) {
        ok = (ev = cJSON_AddObjectToObject(spec, "eviction")) != NULL &&
             cJSON_AddStringToObject(ev, "type", "window") && ref(ev, "window", s->window) &&
             (s->sinks == NULL || ref(ev, "sinks", s->sinks)) &&
             (s->reposition == NULL || ref(ev, "reposition", s->reposition));
    }
    if (!ok) {
        cJSON_Delete(spec);
        return oom(e);
    }
    ok = api_session_create(spec, ctx, id, e);
    cJSON_Delete(spec);
    if (ok)
        return true;
    if (e->code == SRV_ERR_SESSION_EXISTS)
        return api_fail(e, ctx, SRV_ERR_SESSION_EXISTS, "parameters.sequence_id",
                        "parameters.sequence_id=%s: sequence_start names a live sequence "
                        "(session %s): end it first (sequence_end true on its last step, or "
                        "DELETE /v1/sessions/%s)",
                        s->text, s->id, s->id);
    /* The spec's fields as the request named them. */
    {
        api_err in = *e;
        static const struct {
            const char *from, *to;
        } names[] = {{"max_tokens", "parameters.sequence_max_tokens"},
                     {"eviction.window", "parameters.sequence_window"},
                     {"eviction.sinks", "parameters.sequence_sinks"},
                     {"eviction.reposition", "parameters.sequence_reposition"}};
        const char *field = in.field, *msg = in.message;
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            if (strcmp(in.field, names[i].from) == 0) {
                const size_t n = strlen(names[i].from);
                field = names[i].to;
                /* "max_tokens=-1 must be ..." names the parameter too */
                if (strncmp(msg, names[i].from, n) == 0 && (msg[n] == '=' || msg[n] == ' '))
                    return api_fail(e, ctx, in.code, field, "%s%s", field, msg + n);
            }
        return api_fail(e, ctx, in.code, field,
                        "parameters.sequence_start: the sequence's session could not be "
                        "made: %s",
                        msg);
    }
}

bool v2_seq_item(v2_seq *s, const v2_model *m, unsigned schemes, cJSON *item, cJSON **scheme,
                 bool *created, const api_ctx *ctx, api_err *e)
{
    cJSON *k, *v, *kp, *app;
    const cJSON *extra = NULL;

    *scheme = NULL;
    *created = false;
    if (!s->on) {
        const cJSON *given = s->max_tokens   ? s->max_tokens
                             : s->window     ? s->window
                             : s->sinks      ? s->sinks
                             : s->reposition ? s->reposition
                                             : NULL;
        if (s->start || s->end || given != NULL) {
            char f[64];
            snprintf(f, sizeof f, "parameters.%s",
                     given != NULL ? given->string
                     : s->start    ? "sequence_start"
                                   : "sequence_end");
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                            "%s belongs to a sequence: give parameters.sequence_id too (not 0 "
                            "or \"\", which are no sequence)",
                            f);
        }
        return true;
    }
    if (!s->start && (s->max_tokens || s->window || s->sinks || s->reposition)) {
        const cJSON *g = s->max_tokens ? s->max_tokens
                         : s->window   ? s->window
                         : s->sinks    ? s->sinks
                                       : s->reposition;
        char f[64];
        snprintf(f, sizeof f, "parameters.%s", g->string);
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                        "%s sizes a sequence's cache: it goes with sequence_start true", f);
    }
    if (s->window == NULL && (s->sinks != NULL || s->reposition != NULL))
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT,
                        s->sinks ? "parameters.sequence_sinks" : "parameters.sequence_reposition",
                        "%s goes with parameters.sequence_window (the kept recent tokens)",
                        s->sinks ? "parameters.sequence_sinks" : "parameters.sequence_reposition");
    if (s->window != NULL && s->window->valuedouble < 1)
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "parameters.sequence_window",
                        "parameters.sequence_window=%.0f must be >= 1: the recent tokens the "
                        "sequence keeps",
                        s->window->valuedouble);
    *scheme = cJSON_DetachItemFromObjectCaseSensitive(item, "scheme");
    k = cJSON_DetachItemFromObjectCaseSensitive(item, "k");
    v = cJSON_DetachItemFromObjectCaseSensitive(item, "v");
    kp = cJSON_DetachItemFromObjectCaseSensitive(item, "k_positions");
    if (k != NULL || v != NULL || kp != NULL) {
        app = cJSON_AddObjectToObject(item, "append");
        if (app == NULL) {
            cJSON_Delete(k), cJSON_Delete(v), cJSON_Delete(kp);
            return oom(e);
        }
        if (k != NULL)
            cJSON_AddItemToObject(app, "k", k);
        if (v != NULL)
            cJSON_AddItemToObject(app, "v", v);
        if (kp != NULL)
            cJSON_AddItemToObject(app, "k_positions", kp);
    }
    if (!cJSON_AddStringToObject(item, "session", s->id))
        return oom(e);
    if (s->start) {
        if (!create(s, *scheme, k, v, ctx, e))
            return false;
        *created = true;
        return true;
    }
    /* A later step: the session keeps the scheme it was started with. */
    for (const cJSON *ch = *scheme != NULL ? (*scheme)->child : NULL; ch != NULL; ch = ch->next)
        if (strcmp(ch->string, "type") != 0)
            extra = ch;
    if (extra != NULL) {
        const api_param *p = v2_scheme_scalar(schemes, extra->string);
        char f[80];
        snprintf(f, sizeof f, "%s%s", p != NULL ? "parameters." : "", extra->string);
        return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, f,
                        "%s is the sequence's: it was set by sequence_start, and sequence %s "
                        "keeps it (send it on the start only)",
                        f, s->text);
    }
    {
        pa_scheme_type t;
        if (!api_session_scheme_type(ctx->lim, s->id, &t, e)) {
            if (e->code == SRV_ERR_SESSION_NOT_FOUND) {
                api_err in = *e;
                return api_fail(e, ctx, SRV_ERR_SESSION_NOT_FOUND, "parameters.sequence_id",
                                "parameters.sequence_id=%s is not a live sequence: its first "
                                "request sends parameters.sequence_start true; %s",
                                s->text, in.message);
            }
            return false;
        }
        if (t != m->type)
            return api_fail(e, ctx, SRV_ERR_INVALID_ARGUMENT, "parameters.sequence_id",
                            "parameters.sequence_id=%s is a sequence of model attention-%s: "
                            "send its steps there, not to %s",
                            s->text, pa_scheme_type_name(t), m->name);
    }
    return true;
}

void v2_seq_list(char *list, size_t cap)
{
    for (size_t i = 0; i < sizeof seq_params / sizeof *seq_params; i++)
        v2_list_add(list, cap, seq_params[i].name);
}
