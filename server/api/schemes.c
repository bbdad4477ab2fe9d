/* schemes.c - GET /v1/schemes: every positional scheme with where
 * position enters, its parameters (type, default, one line each) and the
 * rope scalings. Rendered from the same parameter table the request parser
 * reads (api/scheme.c) and from pa_scheme_init's defaults, so it cannot
 * drift from what requests accept.
 */
#include "api/job.h"
#include "api/request.h"

#include <math.h>
#include <string.h>

static const char *scheme_doc(pa_scheme_type t)
{
    switch (t) {
    case PA_SCHEME_NONE:
        return "NoPE: no positional information; attention is permutation-equivariant";
    case PA_SCHEME_SINUSOIDAL:
        return "fixed sinusoids added to the token embeddings x (Vaswani et al. 2017); "
               "attention needs layer mode (x and weights)";
    case PA_SCHEME_LEARNED:
        return "a learned table added to x (GPT-2, BERT, OPT); attention needs layer mode";
    case PA_SCHEME_SHAW:
        return "relative key and value embeddings by clipped distance (Shaw et al. 2018), and "
               "Hugging Face BERT's relative_key / relative_key_query (direction "
               "query_minus_key, key_term)";
    case PA_SCHEME_T5:
        return "bucketed relative logit bias per head, as Hugging Face T5 (Raffel et al. 2020); "
               "default scale 1.0";
    case PA_SCHEME_ROPE:
        return "rotary embedding of q and k after projection (Su et al. 2021), with HF's "
               "context-extension scalings";
    case PA_SCHEME_ALIBI:
        return "linear distance bias on the logits (Press et al. 2022)";
    case PA_SCHEME_KERPLE:
        return "kernelized distance bias per head, log or power (Chi et al. 2022), as "
               "chijames/KERPLE computes it; parameters below 0.01 are refused where the "
               "reference clamps them";
    case PA_SCHEME_SANDWICH:
        return "parameter-free bias from the sinusoids' dot product, scaled per head (Chi et al. "
               "2023), exactly as NVIDIA NeMo's SandwichRelativePositionEmbedding";
    case PA_SCHEME_XPOS:
        return "rope whose pairs also decay as zeta_i^((qpos - kpos)/scale_base) (Sun et al. "
               "2022), as microsoft/torchscale's XPOS: q scaled up, k down, about a common "
               "centre";
    case PA_SCHEME_ROPE2D:
        return "2-D rotary embedding of image patches: half the pairs turn by the row, half "
               "by the column (timm's axial RotaryEmbeddingCat as EVA-02; Pixtral's "
               "precompute_freqs_cis_2d); positions [2, L] or a grid, masks by token order";
    case PA_SCHEME_FIRE:
        return "functional interpolation (Li et al. 2023): an MLP Linear(1, hidden) -> ReLU -> "
               "Linear(hidden, H) of psi(|qpos - kpos|) / (psi(max(qpos, |L|)) + eps), psi(x) = "
               "log(|c x| + 1), as mcleish7/arithmetic's FIRE; causal attention only";
    case PA_SCHEME_COPE:
        return "contextual positions (Golovneva et al. 2024), as facebookresearch/RAM's "
               "ContextPosSelfAttn: each key's position is the sum of the gates sigmoid(scale "
               "q.k) of the keys from it to the query, and the logit gains q.pos_emb "
               "interpolated at it; positions and masks only decide which keys count";
    default:
        return "";
    }
}

static const char *scaling_doc(pa_rope_scaling s)
{
    switch (s) {
    case PA_ROPE_SCALING_NONE:
        return "plain rope";
    case PA_ROPE_SCALING_LINEAR:
        return "position interpolation: inv_freq / factor";
    case PA_ROPE_SCALING_NTK:
        return "static NTK-aware: base * factor^(r/(r-2))";
    case PA_ROPE_SCALING_DYNAMIC:
        return "HF dynamic NTK, from this request's largest position (stateless)";
    case PA_ROPE_SCALING_YARN:
        return "YaRN (Peng et al. 2023): ramp between interpolated and original frequencies; "
               "attention factor 0.1 ln(factor) + 1";
    case PA_ROPE_SCALING_LLAMA3:
        return "Llama 3.1 wavelength-banded interpolation";
    case PA_ROPE_SCALING_LONGROPE:
        return "LongRoPE / Phi-3 per-frequency factors, long ones beyond "
               "original_max_position";
    case PA_ROPE_SCALING_PROPORTIONAL:
        return "Gemma 4 global layers (HF proportional): the first partial_rotary_factor of the "
               "frequencies base^(-2i/r), the rest 0, all divided by factor";
    case PA_ROPE_SCALING_NTK_ALPHA:
        return "Hunyuan NTK alpha (vLLM DynamicNTKAlphaRotaryEmbedding): base * alpha^(r/(r-2))";
    default:
        return "";
    }
}

/* The default of p as pa_scheme_init sets it; NULL for tables. */
static cJSON *default_of(const api_param *p)
{
    pa_scheme s;
    const char *at;
    pa_scheme_init(&s, p->type);
    at = (const char *)&s + p->offset;
    switch (p->kind) {
    case API_PARAM_NUMBER: {
        double d;
        memcpy(&d, at, sizeof d);
        return cJSON_CreateNumber(d);
    }
    case API_PARAM_INT: {
        int32_t i;
        memcpy(&i, at, sizeof i);
        return cJSON_CreateNumber(i);
    }
    case API_PARAM_BOOL: {
        bool b;
        memcpy(&b, at, sizeof b);
        return cJSON_CreateBool(b);
    }
    case API_PARAM_ENUM: {
        int v;
        memcpy(&v, at, sizeof v);
        return cJSON_CreateString(api_param_enum_name(p, v));
    }
    default:
        return cJSON_CreateNull();
    }
}

static bool add_values(cJSON *obj, const api_param *p)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, "values");
    if (arr == NULL)
        return false;
    for (int v = 0;; v++) {
        const char *name = api_param_enum_name(p, v);
        if (name == NULL)
            return true;
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString(name)))
            return false;
    }
}

static bool add_param(cJSON *arr, const api_param *p)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON *def;
    if (obj == NULL || !cJSON_AddItemToArray(arr, obj))
        return cJSON_Delete(obj), false;
    if (!cJSON_AddStringToObject(obj, "name", p->name) ||
        !cJSON_AddStringToObject(obj, "type", api_param_kind_name(p->kind)))
        return false;
    if (p->shape != NULL && !cJSON_AddStringToObject(obj, "shape", p->shape))
        return false;
    def = default_of(p);
    if (def == NULL || !cJSON_AddItemToObject(obj, "default", def))
        return cJSON_Delete(def), false;
    if (p->kind == API_PARAM_ENUM && !add_values(obj, p))
        return false;
    if (p->scalings != 0) {
        cJSON *sc = cJSON_AddArrayToObject(obj, "scalings");
        if (sc == NULL)
            return false;
        for (int s = 0; s < PA_ROPE_SCALING_COUNT; s++)
            if ((p->scalings & (1u << s)) &&
                !cJSON_AddItemToArray(sc,
                                      cJSON_CreateString(pa_rope_scaling_name((pa_rope_scaling)s))))
                return false;
    }
    return cJSON_AddStringToObject(obj, "required", p->need) &&
           cJSON_AddStringToObject(obj, "description", p->doc);
}

static bool add_scalings(cJSON *scheme, const api_param *params, size_t n)
{
    cJSON *arr = cJSON_AddArrayToObject(scheme, "scalings");
    if (arr == NULL)
        return false;
    for (int s = 0; s < PA_ROPE_SCALING_COUNT; s++) {
        cJSON *obj = cJSON_CreateObject(), *names;
        if (obj == NULL || !cJSON_AddItemToArray(arr, obj))
            return cJSON_Delete(obj), false;
        if (!cJSON_AddStringToObject(obj, "name", pa_rope_scaling_name((pa_rope_scaling)s)) ||
            !cJSON_AddStringToObject(obj, "description", scaling_doc((pa_rope_scaling)s)) ||
            (names = cJSON_AddArrayToObject(obj, "parameters")) == NULL)
            return false;
        for (size_t i = 0; i < n; i++) {
            const api_param *p = &params[i];
            if (p->type == PA_SCHEME_ROPE && (p->scalings & (1u << s)) &&
                !cJSON_AddItemToArray(names, cJSON_CreateString(p->name)))
                return false;
        }
    }
    return true;
}

/* "options": the item options of current models, with formula and source. */
static bool add_options(cJSON *root)
{
    size_t n;
    const api_option *o = api_options(&n);
    cJSON *arr = cJSON_AddArrayToObject(root, "options");
    if (arr == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        cJSON *obj = cJSON_CreateObject(), *def;
        if (obj == NULL || !cJSON_AddItemToArray(arr, obj))
            return cJSON_Delete(obj), false;
        if (!cJSON_AddStringToObject(obj, "name", o[i].name) ||
            !cJSON_AddStringToObject(obj, "type", o[i].type) ||
            (o[i].shape != NULL && !cJSON_AddStringToObject(obj, "shape", o[i].shape)) ||
            !cJSON_AddStringToObject(obj, "description", o[i].formula) ||
            !cJSON_AddStringToObject(obj, "models", o[i].models) ||
            !cJSON_AddStringToObject(obj, "kserve", o[i].kserve))
            return false;
        /* The table's JSON text; NULL (no default) shows as no member. */
        if (o[i].defaults != NULL && ((def = cJSON_Parse(o[i].defaults)) == NULL ||
                                      !cJSON_AddItemToObject(obj, "default", def)))
            return cJSON_Delete(def), false;
    }
    return true;
}

/* "dtypes": the wire types of tensors in requests and of results. */
static bool add_dtypes(cJSON *root)
{
    static const char *const in[] = {"f32", "f16", "bf16", "f64"}, *const out[] = {"f32", "f16",
                                                                                   "bf16"};
    cJSON *d = cJSON_AddObjectToObject(root, "dtypes");
    return d != NULL && cJSON_AddItemToObject(d, "input", cJSON_CreateStringArray(in, 4)) &&
           cJSON_AddItemToObject(d, "output", cJSON_CreateStringArray(out, 3)) &&
           cJSON_AddStringToObject(d, "description",
                                   "a tensor's dtype (b64 bytes of that type, JSON numbers rounded "
                                   "to it; computed in float32) and output_dtype (results "
                                   "rounded to it, to nearest even)") != NULL;
}

/* "shapes": the layouts of an attention item's tensors and results, one
 * sequence and a batch. */
static bool add_shapes(cJSON *root)
{
    static const char *const rows[][3] = {
        {"q", "[Lq, H, D]", "[B, Lq, H, D]"},
        {"k", "[Lk, Hkv, D]", "[B, Lk, Hkv, D]"},
        {"v", "[Lk, Hkv, Dv]", "[B, Lk, Hkv, Dv]"},
        {"x", "[L, d_model]", "[B, L, d_model]"},
        {"key_length", "number", "number or [B]"},
        {"query_length", "number", "number or [B]"},
        {"q_positions", "[Lq] (M-RoPE [3, Lq])", "[Lq] or [B, Lq] (M-RoPE [3, Lq] or [B, 3, Lq])"},
        {"k_positions", "[Lk] (M-RoPE [3, Lk])", "[Lk] or [B, Lk] (M-RoPE [3, Lk] or [B, 3, Lk])"},
        {"attention_mask", "[1, Lk]", "[B, Lk]"},
        {"mask", "[Lq, Lk] or [1 or H, Lq, Lk]", "also [1 or B, 1 or H, Lq, Lk]"},
        {"bias", "[Lq, Lk] or [1 or H, Lq, Lk]", "also [1 or B, 1 or H, Lq, Lk]"},
        {"output", "[Lq, H, Dv] (layer mode with w_o: [L, d_out])", "[B, ...]"},
        {"weights", "[H, Lq, Lk]", "[B, H, Lq, Lk]"},
        {"logits", "[H, Lq, Lk]", "[B, H, Lq, Lk]"},
        {"q_rot", "[Lq, H, D]", "[B, Lq, H, D]"},
        {"k_rot", "[Lk, Hkv, D] (mla: [Lk, D_rope])", "[B, Lk, Hkv, D]"},
        {"entropy", "[H, Lq]", "[B, H, Lq]"},
        {"distance", "[H, Lq]", "[B, H, Lq]"},
        {"cu_seqlens", "[S+1]: q [L_total, H, D]; weights, logits, entropy, distance a list",
         "not with a batch"},
        {"cu_seqlens_k", "[S+1]: k, v [Lk_total, Hkv, D]", "not with a batch"},
        {"k_rope", "mla: [Lk, D_rope] or [Lk, 1, D_rope] (k is then k_nope [Lk, H, D_nope])",
         "not with a batch"},
        {"c_kv", "mla absorbed: [Lk, R] (no k, v)", "not with a batch"},
    };
    cJSON *sh = cJSON_AddObjectToObject(root, "shapes");
    if (sh == NULL)
        return false;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cJSON *o = cJSON_AddObjectToObject(sh, rows[i][0]);
        if (o == NULL || !cJSON_AddStringToObject(o, "one", rows[i][1]) ||
            !cJSON_AddStringToObject(o, "batch", rows[i][2]))
            return false;
    }
    return cJSON_AddStringToObject(sh, "description",
                                   "row-major; a 4-D q (3-D x) makes the item a batch of B "
                                   "sequences, each equal to the sequence sent alone; "
                                   "integer arrays may also be {shape, dtype i32|i64, b64}") !=
           NULL;
}

static bool add_peak(cJSON *arr, int threads, double gflops, double bf16, double gbps)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || !cJSON_AddItemToArray(arr, o))
        return cJSON_Delete(o), false;
    return cJSON_AddItemToObject(o, "threads", srv_json_int(threads)) &&
           cJSON_AddNumberToObject(o, "gflops_f32", round(gflops * 10) / 10) &&
           (!(bf16 > 0) || cJSON_AddNumberToObject(o, "gflops_bf16", round(bf16 * 10) / 10)) &&
           cJSON_AddNumberToObject(o, "read_gbps", round(gbps * 10) / 10);
}

/* "machine": the ceilings posattnd measured at start-up (runtime/probe.h),
 * what each attention item's fraction_of_peak is a fraction of. */
static bool add_machine(cJSON *root, const srv_machine *m)
{
    cJSON *o = cJSON_AddObjectToObject(root, "machine"), *peaks;
    if (o == NULL || !cJSON_AddBoolToObject(o, "probed", m != NULL && m->probed) ||
        !cJSON_AddStringToObject(o, "kernel", pa_kernel_name()) ||
        !cJSON_AddStringToObject(o, "bf16_path", pa_bf16_path()))
        return false;
    if (m == NULL)
        return true;
    if (!cJSON_AddStringToObject(o, "cpu", m->cpu) ||
        !cJSON_AddItemToObject(o, "workers", srv_json_int(m->workers)))
        return false;
    if (!m->probed)
        return cJSON_AddStringToObject(o, "description",
                                       "--no-probe: the ceilings were not measured, and items' "
                                       "timing has no fraction_of_peak") != NULL;
    if (!cJSON_AddStringToObject(o, "fma_width", m->width) ||
        (peaks = cJSON_AddArrayToObject(o, "peaks")) == NULL ||
        !add_peak(peaks, 1, m->gflops_1, m->bf16_gflops_1, m->read_gbps_1) ||
        (m->threads > 1 &&
         !add_peak(peaks, m->threads, m->gflops_n, m->bf16_gflops_n, m->read_gbps_n)) ||
        !cJSON_AddItemToObject(o, "read_buffer_bytes", srv_json_int((int64_t)m->read_bytes)) ||
        !cJSON_AddNumberToObject(o, "probe_ms", round(m->probe_ms * 10) / 10) ||
        !cJSON_AddNumberToObject(o, "load_average", m->load_1m))
        return false;
    return cJSON_AddStringToObject(
               o, "description",
               "measured once at start-up: float32 FMA GFLOP/s (independent fused multiply-add "
               "chains in registers at fma_width) and read GB/s (threads summing slices of a "
               "buffer of read_buffer_bytes), on one thread and on the workers; an item's "
               "timing.fraction_of_peak divides its flops and bytes per compute_us by the "
               "peaks of peak_threads. A busy machine at start-up (see load_average) reads "
               "low: restart on a quiet one") != NULL;
}

static bool render(cJSON *root)
{
    size_t n;
    const api_param *params = api_params(&n);
    cJSON *arr = cJSON_AddArrayToObject(root, "schemes");
    if (arr == NULL)
        return false;
    for (int t = 0; t < PA_SCHEME_COUNT; t++) {
        pa_scheme_type type = (pa_scheme_type)t;
        cJSON *obj = cJSON_CreateObject(), *ps;
        if (obj == NULL || !cJSON_AddItemToArray(arr, obj))
            return cJSON_Delete(obj), false;
        if (!cJSON_AddStringToObject(obj, "name", pa_scheme_type_name(type)) ||
            !cJSON_AddStringToObject(obj, "position_site",
                                     pa_position_site_name(pa_scheme_position_site(type))) ||
            !cJSON_AddStringToObject(obj, "default_scale",
                                     type == PA_SCHEME_T5 ? "1.0" : "1/sqrt(head_dim)") ||
            !cJSON_AddStringToObject(obj, "description", scheme_doc(type)) ||
            (ps = cJSON_AddArrayToObject(obj, "parameters")) == NULL)
            return false;
        for (size_t i = 0; i < n; i++)
            if (params[i].type == type && !add_param(ps, &params[i]))
                return false;
        if (type == PA_SCHEME_ROPE && !add_scalings(obj, params, n))
            return false;
    }
    return true;
}

static void schemes_answer(const srv_limits *lim, srv_reply *reply)
{
    cJSON *root = cJSON_CreateObject();
    char *body = NULL;
    if (root != NULL && render(root) && add_options(root) && add_dtypes(root) && add_shapes(root) &&
        add_machine(root, lim != NULL ? lim->machine : NULL))
        body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (body == NULL) {
        srv_reply_error(reply, SRV_ERR_INTERNAL, NULL, "out of memory rendering the schemes");
        return;
    }
    srv_reply_json(reply, 200, body, strlen(body));
}

const srv_endpoint srv_ep_schemes = {
    .name = "schemes",
    .answer = schemes_answer,
};
