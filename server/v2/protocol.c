/* protocol.c - see v2/v2.h: the Open Inference Protocol as the record
 * (srv_protocol, api/api.h) that http/'s route rows name. Each operation is
 * one of the protocol's routes; the answers are model.c's, the infer job
 * infer.c's.
 */
#include "v2/internal.h"

#include <stdio.h>
#include <string.h>

/* The loaded models (srv_limits.models), NULL when none is. */
static const srv_model_set *models_of(const srv_protocol_ctx *pc)
{
    return pc->lim != NULL ? pc->lim->models : NULL;
}

/* [V2] model ready: "4xx" and an empty body for a model that is not. */
static bool check(int op, const srv_protocol_ctx *pc, char *msg, size_t cap)
{
    const srv_route_params *p = pc->params;
    if (srv_v2_model_version_known(models_of(pc), p->name, p->version))
        return true;
    if (op == SRV_V2_OP_MODEL_READY)
        msg[0] = '\0';
    else
        srv_v2_unknown_model(models_of(pc), p->name, p->version, msg, cap);
    return false;
}

static void set_text(srv_reply *r, int status)
{
    r->http_status = status;
    r->content_type = "text/plain";
    r->body = NULL;
    r->body_len = 0;
}

static void answer(int op, const srv_protocol_ctx *pc, srv_reply *reply)
{
    switch ((srv_v2_op)op) {
    /* [V2] health: 200 is true, 4xx false, the body empty; ready as /readyz. */
    case SRV_V2_OP_LIVE:
        set_text(reply, 200);
        return;
    case SRV_V2_OP_READY:
    case SRV_V2_OP_MODEL_READY:
        set_text(reply, pc->ready ? 200 : 400);
        return;
    case SRV_V2_OP_SERVER:
        srv_v2_server_metadata(reply);
        return;
    case SRV_V2_OP_MODEL:
        srv_v2_model_metadata(models_of(pc), pc->params->name, reply);
        return;
    case SRV_V2_OP_STATS:
    case SRV_V2_OP_MODEL_STATS:
        srv_v2_model_stats(models_of(pc), op == SRV_V2_OP_STATS ? NULL : pc->params->name,
                           pc->counts, pc->counts_arg, reply);
        return;
    case SRV_V2_OP_INFER:
        break;
    }
    srv_reply_error(reply, SRV_ERR_NOT_FOUND, NULL, "no such route");
}

static bool prepare(int op, const srv_protocol_ctx *pc, const char *body, size_t len,
                    int64_t framing, srv_job **job, srv_reply *reply)
{
    if (op != SRV_V2_OP_INFER) {
        *job = NULL;
        srv_reply_error(reply, SRV_ERR_NOT_FOUND, NULL, "no such route");
        return false;
    }
    return srv_v2_infer_prepare(pc->params->name, body, len, framing, pc->lim, job, reply);
}

static const char *model_key(int op, const srv_protocol_ctx *pc, char *buf, size_t cap)
{
    return op == SRV_V2_OP_INFER ? srv_v2_model_key(models_of(pc), pc->params->name, buf, cap)
                                 : NULL;
}

const srv_protocol srv_v2_protocol = {
    .name = "v2",
    .prefix = "/v2",
    .framing_header = V2_FRAMING_HEADER,
    .check = check,
    .answer = answer,
    .prepare = prepare,
    .error_shape = srv_v2_reply_error,
    .model_key = model_key,
};
