"""hf_reference.py - Hugging Face's attention for one layer of a config.json,
in float64 NumPy, written from transformers' modelling code (the model files
and modeling_rope_utils.py) and sharing nothing with posattn: it reads the
config itself, as each model's attention module does.

    attention(config, layer, stack, arrays) -> {"output": [L, H, Dv], "weights": [H, L, L]}

arrays: "q", "k", "v" ([L, H, D], [L, Hkv, D]) or layer mode's "x", "w_q",
"w_k", "w_v" (learned positions), "positions" ([L], or [3, L] rows for
M-RoPE), DeepSeek's "k_rope" [L, qk_rope_head_dim] (its "k" is k_nope), and the tensors a layer needs by their item field ("sinks",
"q_norm.weight", "k_norm.weight", "scheme.table", "scheme.rel_k").
Masks follow the positions (causal kpos <= qpos; sliding qpos - kpos < W;
chunks floor(pos / C)), or token order with M-RoPE rows, as Hugging Face's
cache positions do.
"""

import math

import numpy as np

WRAPPERS = ("gemma3", "llama4", "qwen2_vl", "qwen2_5_vl", "qwen3_vl")


class Cfg:
    """A config with a wrapper's text_config first, then the wrapper."""

    def __init__(self, cfg):
        self.outer = cfg
        self.c = cfg.get("text_config") if cfg.get("model_type") in WRAPPERS and \
            isinstance(cfg.get("text_config"), dict) else cfg
        t = self.c.get("model_type", cfg["model_type"])
        self.type = {"qwen2_vl_text": "qwen2_vl", "qwen2_5_vl_text": "qwen2_5_vl",
                     "qwen3_vl_text": "qwen3_vl", "gemma3": "gemma3_text",
                     "llama4": "llama4_text"}.get(t, t)

    def get(self, *keys, default=None):
        for d in (self.c, self.outer):
            for k in keys:
                if d.get(k) is not None:
                    return d[k]
        return default


# ---------------------------------------------------------------------------
# RoPE (modeling_rope_utils.py)
# ---------------------------------------------------------------------------

def rope_dict(c, layer_type):
    rp = c.get("rope_parameters", "rope_scaling", default={}) or {}
    if any(isinstance(rp.get(k), dict) for k in ("full_attention", "sliding_attention")):
        rp = rp[layer_type]
    return rp


def inv_freq(c, rp, base, dim, seq_len):
    """(inv_freq [dim/2], attention_factor) for the dict rp."""
    t = rp.get("rope_type", rp.get("type", "default"))
    idx = np.arange(0, dim, 2, dtype=np.float64) / dim
    inv = 1.0 / base ** idx
    mp = c.get("max_position_embeddings")
    if t in ("default", "mrope"):
        return inv, 1.0
    if t == "linear":
        return inv / rp["factor"], 1.0
    if t == "dynamic":
        orig = rp.get("original_max_position_embeddings") or mp
        if seq_len > orig:
            f = rp["factor"]
            b = base * ((f * seq_len / orig) - (f - 1)) ** (dim / (dim - 2))
            inv = 1.0 / b ** idx
        return inv, 1.0
    if t == "llama3":
        f, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        inv_l = np.where(wl > low_wl, inv / f, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / f + smooth * inv_l
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        return np.where(medium, smoothed, inv_l), 1.0
    if t == "yarn":
        f = rp["factor"]
        if "original_max_position_embeddings" in rp:
            orig = rp["original_max_position_embeddings"]
            f = mp / orig
        else:
            orig = mp

        def mscale(s, m=1):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
        af = rp.get("attention_factor")
        if af is None:
            ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
            af = mscale(f, ms) / mscale(f, msa) if ms and msa else mscale(f)
        bf, bs = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

        def corr(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = corr(bf), corr(bs)
        if rp.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        pos = base ** idx
        return (1 / (f * pos)) * (1 - extra) + (1 / pos) * extra, af
    if t == "longrope":
        f = rp.get("factor")
        orig = c.get("original_max_position_embeddings")
        if orig:
            f = mp / orig
        else:
            orig = mp
        af = rp.get("attention_factor")
        if af is None:
            af = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig))
        # torch.tensor(long_factor, dtype=torch.float32): the factors are float32
        ext = np.array(rp["long_factor"] if seq_len > orig else rp["short_factor"],
                       np.float32).astype(np.float64)
        return 1.0 / (ext * base ** idx), af
    raise ValueError(t)


def rotate(x, pos, inv, att, dim, layout, sections=None, interleaved=False):
    """x [L, H, D] rotated at pos ([L], or [3, L] with sections)."""
    x = x.astype(np.float64).copy()
    n = dim // 2
    if sections is None:
        ang = np.asarray(pos, np.float64)[:, None] * inv[None, :]  # [L, n]
    else:
        rows = np.asarray(pos, np.float64)
        which = np.zeros(n, int)
        for i in range(n):
            if interleaved:
                which[i] = 1 if i % 3 == 1 and i < 3 * sections[1] else \
                    2 if i % 3 == 2 and i < 3 * sections[2] else 0
            else:
                which[i] = 0 if i < sections[0] else 1 if i < sections[0] + sections[1] else 2
        ang = rows[which, :].T * inv[None, :]
    cos, sin = np.cos(ang) * att, np.sin(ang) * att
    if layout == "neox":
        x1, x2 = x[:, :, :n].copy(), x[:, :, n:dim].copy()
        c, s = cos[:, None, :], sin[:, None, :]
        x[:, :, :n] = x1 * c - x2 * s
        x[:, :, n:dim] = x2 * c + x1 * s
    else:  # pairs (2i, 2i+1): GPT-J, Cohere, Llama 4's complex product
        a, b = x[:, :, 0:dim:2].copy(), x[:, :, 1:dim:2].copy()
        c, s = cos[:, None, :], sin[:, None, :]
        x[:, :, 0:dim:2] = a * c - b * s
        x[:, :, 1:dim:2] = b * c + a * s
    return x


# ---------------------------------------------------------------------------
# Position biases
# ---------------------------------------------------------------------------

def press_slopes(H):
    """BLOOM's build_alibi_tensor slopes."""
    cp = 2 ** math.floor(math.log2(H))
    base = 2 ** (-(2 ** -(math.log2(cp) - 3)))
    s = [base ** p for p in range(1, cp + 1)]
    if cp != H:
        eb = 2 ** (-(2 ** -(math.log2(2 * cp) - 3)))
        s += [eb ** p for p in range(1, 1 + 2 * (H - cp), 2)]
    return np.array(s)


def mpt_slopes(H, max_bias):
    h2 = 2 ** math.ceil(math.log2(H))
    m = np.arange(1, h2 + 1, dtype=np.float64) * (max_bias / h2)
    s = 1.0 / np.power(2, m)
    if h2 != H:
        s = np.concatenate([s[1::2], s[::2]])[:H]
    return s


def t5_bucket(rel, bidirectional, nb, md):
    out = np.zeros_like(rel)
    if bidirectional:
        nb //= 2
        out += (rel > 0).astype(rel.dtype) * nb
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    exact = nb // 2
    small = rel < exact
    with np.errstate(divide="ignore"):
        large = exact + (np.log(rel.astype(np.float32) / exact) / math.log(md / exact) *
                         (nb - exact)).astype(np.int64)
    large = np.minimum(large, nb - 1)
    return out + np.where(small, rel, large)


# ---------------------------------------------------------------------------
# One layer
# ---------------------------------------------------------------------------

def rms(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def qwen2_vl_vision(config, arrays):
    """Qwen2-VL's VisionAttention (modeling_qwen2_vl.py) over one frame of
    arrays["grid"] = (rows, cols) patches: rot_pos_emb's (row, col) per
    patch in spatial_merge_size blocks, VisionRotaryEmbedding(head_dim // 2)
    (theta 10000), rotate_half over the whole head, no mask."""
    vc = config["vision_config"]
    H = vc.get("num_heads", 16)
    D = vc.get("embed_dim", 1280) // H
    m = vc.get("spatial_merge_size", 2)
    h, w = arrays["grid"]
    hpos = np.repeat(np.arange(h)[:, None], w, axis=1)
    wpos = np.repeat(np.arange(w)[None, :], h, axis=0)
    blocks = lambda a: a.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
    pos = np.stack([blocks(hpos), blocks(wpos)], axis=-1)  # [L, 2]
    inv = 1.0 / 10000.0 ** (np.arange(0, D // 2, 2, dtype=np.float64) / (D // 2))
    ang = (pos[:, :, None] * inv[None, None, :]).reshape(len(pos), -1)  # [L, D/2]: rows, then cols
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rot(x):
        x = x.astype(np.float64)
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    q, k, v = rot(arrays["q"]), rot(arrays["k"]), arrays["v"].astype(np.float64)
    s = np.einsum("qhd,khd->hqk", q, k) * D ** -0.5
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    wts = e / e.sum(axis=-1, keepdims=True)
    return {"output": np.einsum("hqk,khd->qhd", wts, v), "weights": wts}


def attention(config, layer, stack, arrays):
    if stack == "vision":
        return qwen2_vl_vision(config, arrays)
    c = Cfg(config)
    t = c.type
    heads_key = {"gpt2": "n_head", "gptj": "n_head", "bloom": "n_head", "mpt": "n_heads",
                 "t5": "num_heads"}.get(t, "num_attention_heads")
    hidden_key = {"gpt2": "n_embd", "gptj": "n_embd", "mpt": "d_model", "t5": "d_model"}.get(t, "hidden_size")
    H = c.get(heads_key, "num_attention_heads", "n_head")
    hidden = c.get(hidden_key, "hidden_size")
    D = c.get("d_kv") if t == "t5" else c.get("head_dim") or hidden // H
    if t == "falcon":
        Hkv = c.get("num_kv_heads", default=H) if c.get("new_decoder_architecture") else \
            (1 if c.get("multi_query", default=True) else H)
    else:
        Hkv = c.get("num_key_value_heads", default=H)
    n_layers = c.get("num_hidden_layers", "n_layer", "n_layers", "num_layers")
    # DeepSeek's MLA (DeepseekV2Attention, DeepseekV3Attention): q [L, H,
    # qk_nope + qk_rope], k is k_nope with one k_rope for every head, H kv heads.
    mla = t in ("deepseek_v2", "deepseek_v3")
    if mla:
        Dn = c.get("qk_nope_head_dim", default=128)
        Dr = c.get("qk_rope_head_dim", default=64)
        D, Hkv = Dn + Dr, H

    # Layer type
    lt = c.get("layer_types")
    use_rope = True
    if t == "llama4_text":
        nr = c.get("no_rope_layers") or [int((i + 1) % c.get("no_rope_layer_interval", default=4) != 0)
                                         for i in range(n_layers)]
        use_rope = bool(nr[layer])
    if lt is not None:
        kind = lt[layer]
    elif t in ("mistral", "mixtral", "phi3", "starcoder2"):
        kind = "sliding_attention" if c.get("sliding_window") else "full_attention"
    elif t in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl"):
        sw = c.get("sliding_window") if c.get("use_sliding_window", default=False) else None
        kind = "sliding_attention" if sw is not None and layer >= c.get("max_window_layers", default=28) \
            else "full_attention"
    elif t in ("gemma2", "gpt_oss"):
        kind = "sliding_attention" if (layer + 1) % 2 else "full_attention"
    elif t == "gemma3_text":
        kind = "sliding_attention" if (layer + 1) % c.get("sliding_window_pattern", default=6) else "full_attention"
    elif t == "llama4_text":
        kind = "chunked_attention" if use_rope else "full_attention"
    else:
        kind = "full_attention"

    # Scale
    scale = D ** -0.5
    rs = c.get("rope_scaling") or {}
    if t == "deepseek_v3" and rs.get("mscale_all_dim"):  # V2's HF port has no such factor
        f, msa = rs["factor"], rs["mscale_all_dim"]
        m = 1.0 if f <= 1 else 0.1 * msa * math.log(f) + 1.0
        scale = scale * m * m
    if t in ("gemma2", "gemma3_text"):
        scale = c.get("query_pre_attn_scalar", default=256) ** -0.5
    elif t == "granite":
        scale = c.get("attention_multiplier", default=1.0)
    elif t == "t5":
        scale = 1.0
    elif t == "gpt2":
        scale = D ** -0.5 if c.get("scale_attn_weights", default=True) else 1.0
        if c.get("scale_attn_by_inverse_layer_idx", default=False):
            scale /= layer + 1
    elif t == "mpt":
        scale = (c.get("attn_config", default={}) or {}).get("softmax_scale") or (hidden / H) ** -0.5

    # q, k, v
    pos = arrays.get("positions")
    if "x" in arrays:
        L = arrays["x"].shape[0]
        p = np.arange(L) if pos is None else pos
        x = arrays["x"].astype(np.float64)
        if layer == 0 and "scheme.table" in arrays:
            off = 2 if t == "opt" else 0
            x = x + arrays["scheme.table"].astype(np.float64)[p + off]
        q = (x @ arrays["w_q"]).reshape(L, H, D)
        k = (x @ arrays["w_k"]).reshape(L, Hkv, D)
        v = (x @ arrays["w_v"]).reshape(L, Hkv, -1)
    else:
        q = arrays["q"].astype(np.float64)
        k = arrays["k"].astype(np.float64)
        v = arrays["v"].astype(np.float64)
        L = q.shape[0]
    rows = pos is not None and np.ndim(pos) == 2
    p1 = np.arange(L) if pos is None else (np.arange(L) if rows else np.asarray(pos))

    # q/k norms before RoPE (Qwen3, Gemma 3, OLMo 2)
    eps = c.get("rms_norm_eps", default=1e-6)
    if t in ("qwen3", "qwen3_moe", "qwen3_vl"):
        q = rms(q, eps) * arrays["q_norm.weight"]
        k = rms(k, eps) * arrays["k_norm.weight"]
    elif t == "gemma3_text":
        q = rms(q, eps) * (1.0 + arrays["q_norm.weight"].astype(np.float64))
        k = rms(k, eps) * (1.0 + arrays["k_norm.weight"].astype(np.float64))
    elif t == "olmo2":
        q = (rms(q.reshape(L, H * D), eps) * arrays["q_norm.weight"]).reshape(L, H, D)
        k = (rms(k.reshape(L, Hkv * D), eps) * arrays["k_norm.weight"]).reshape(L, Hkv, D)

    # MLA: rope over the qk_rope dims of q and over k_rope ([L, 1, Dr], as
    # HF views it), pairs neighbouring (V2's complex product; V3's
    # rope_interleave, else rotate_half), then k_rot expanded to every head.
    if mla:
        rp = rope_dict(c, kind)
        base = rp.get("rope_theta") or c.get("rope_theta", default=10000.0)
        inv, att = inv_freq(c, rp, float(base), Dr, int(np.max(p1)) + 1)
        layout = "gptj" if t == "deepseek_v2" or c.get("rope_interleave", default=True) else "neox"
        qr = rotate(q[:, :, Dn:], p1, inv, att, Dr, layout)
        kr = rotate(arrays["k_rope"][:, None, :], p1, inv, att, Dr, layout)
        q = np.concatenate([q[:, :, :Dn], qr], axis=-1)
        k = np.concatenate([k, np.broadcast_to(kr, (L, H, Dr))], axis=-1)

    # RoPE
    rope_models = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                   "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma", "gemma2", "gemma3_text",
                   "gpt_oss", "llama4_text", "phi3", "gptj", "gpt_neox", "olmo2", "cohere",
                   "starcoder2", "granite", "diffllama")
    if (t in rope_models and use_rope) or (t == "falcon" and not c.get("alibi")):
        rp = rope_dict(c, kind)
        layout = "gptj" if t in ("gptj", "cohere", "llama4_text") else "neox"
        if t == "gemma3_text" and kind == "sliding_attention" and "rope_theta" not in rp:
            base, rp = c.get("rope_local_base_freq", default=10000.0), {}
        elif t == "gptj":
            base = 10000.0
        elif t == "gpt_neox":
            base = rp.get("rope_theta") or c.get("rotary_emb_base", "rope_theta", default=10000)
        else:
            base = rp.get("rope_theta") or c.get("rope_theta", default=10000.0)
        if t == "gptj":
            dim = c.get("rotary_dim") or D
        elif t == "gpt_neox":
            dim = int(D * c.get("rotary_pct", "partial_rotary_factor", default=0.25))
        else:
            dim = int(D * (rp.get("partial_rotary_factor") or c.get("partial_rotary_factor", default=1.0)))
        seq_len = int(np.max(p1)) + 1 if not rows else int(np.max(pos)) + 1
        inv, att = inv_freq(c, rp, float(base), dim, seq_len)
        sections = rp.get("mrope_section") if t in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") else None
        if t == "qwen3_vl" and sections is None:
            sections = [24, 20, 20]
        inter = t == "qwen3_vl"
        if rows:
            q = rotate(q, pos, inv, att, dim, layout, sections, inter)
            k = rotate(k, pos, inv, att, dim, layout, sections, inter)
        else:
            q = rotate(q, p1, inv, att, dim, layout)
            k = rotate(k, p1, inv, att, dim, layout)

    # Llama 4: L2Norm after RoPE on RoPE layers, temperature on the others
    if t == "llama4_text":
        e4 = c.get("rms_norm_eps", default=1e-5)
        if use_rope and c.get("use_qk_norm", default=True):
            q, k = rms(q, e4), rms(k, e4)
        if not use_rope and c.get("attn_temperature_tuning", default=True):
            fs, a = c.get("floor_scale", default=8192), c.get("attn_scale", default=0.1)
            q = q * (np.log(np.floor((p1.astype(np.float64) + 1.0) / fs) + 1.0) * a + 1.0)[:, None, None]

    # Scores
    g = H // Hkv
    kk = np.repeat(k, g, axis=1)
    vv = np.repeat(v, g, axis=1)
    raw = np.einsum("qhd,khd->hqk", q, kk)
    if t == "bert" and "scheme.rel_k" in arrays:
        P = c.get("max_position_embeddings", default=512)
        E = arrays["scheme.rel_k"].astype(np.float64)
        dist = p1[:, None] - p1[None, :]
        pe = E[dist + P - 1]  # [Lq, Lk, D]
        raw = raw + np.einsum("qhd,qkd->hqk", q, pe)
        if c.get("position_embedding_type") == "relative_key_query":
            raw = raw + np.einsum("khd,qkd->hqk", kk, pe)
    s = raw * scale
    if t in ("gemma2", "gemma3_text") and c.get("attn_logit_softcapping"):
        cap = c.get("attn_logit_softcapping")
        s = cap * np.tanh(s / cap)

    # Position biases
    kpos = p1.astype(np.float64)
    if t == "bloom":
        s = s + press_slopes(H)[:, None, None] * kpos[None, None, :]
    elif t == "mpt" and (c.get("attn_config", default={}) or {}).get("alibi"):
        ac = c.get("attn_config")
        s = s + mpt_slopes(H, ac.get("alibi_bias_max", 8))[:, None, None] * kpos[None, None, :]
    elif t == "falcon" and c.get("alibi"):  # (q.k + alibi) * inv_norm_factor
        s = (raw + press_slopes(H)[:, None, None] * kpos[None, None, :]) * scale
    elif t == "t5":
        rel = p1[None, :] - p1[:, None]
        enc = stack != "decoder"
        b = t5_bucket(rel.astype(np.int64), enc, c.get("relative_attention_num_buckets", default=32),
                      c.get("relative_attention_max_distance", default=128))
        s = s + arrays["scheme.table"].astype(np.float64)[b].transpose(2, 0, 1)

    # Masks
    causal = not (t == "bert" and not c.get("is_decoder", default=False)) and \
        not (t == "t5" and stack != "decoder")
    qi = np.arange(L) if rows else p1
    ki = qi
    vis = np.ones((L, L), bool)
    if causal:
        vis &= ki[None, :] <= qi[:, None]
    if kind == "sliding_attention" and c.get("sliding_window") and \
            (c.get("use_sliding_window", default=True) or t not in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")):
        vis &= (qi[:, None] - ki[None, :]) < c.get("sliding_window")
    if kind == "chunked_attention" and c.get("attention_chunk_size"):
        C = c.get("attention_chunk_size")
        vis &= (qi[:, None] // C) == (ki[None, :] // C)
    s = np.where(vis[None, :, :], s, -np.inf)

    # Softmax (gpt-oss: a sink logit per head joins and is dropped)
    if t == "gpt_oss":
        sinks = arrays["sinks"].astype(np.float64)[:, None, None] * np.ones((1, L, 1))
        comb = np.concatenate([s, sinks], axis=-1)
        comb = comb - comb.max(axis=-1, keepdims=True)
        e = np.exp(comb)
        w = (e / e.sum(axis=-1, keepdims=True))[..., :-1]
    else:
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        w = e / e.sum(axis=-1, keepdims=True)
    if t == "diffllama":
        return diffllama(c, layer, w, vv, arrays)
    out = np.einsum("hqk,khd->qhd", w, vv)
    return {"output": out, "weights": w}


def diffllama(c, layer, w, vv, arrays):
    """DiffLlamaAttention after the softmax of its H query heads (w [H, L, L],
    vv = repeat_kv(v) [L, H, D]): v's halves of heads side by side, the two
    halves of the maps subtracted with lambda, the weightless group norm."""
    h = w.shape[0] // 2
    v2 = np.concatenate([vv[:, :h], vv[:, h:]], axis=-1)  # cat(chunk(v, 2, heads), -1)
    o = np.einsum("hqk,khd->qhd", w, np.concatenate([v2, v2], axis=1))  # .repeat(1, 2, 1, 1)
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * layer)  # lambda_init_fn(layer_idx)
    dot = {n: float(np.sum(arrays["differential." + n].astype(np.float64) *
                           arrays["differential." + m].astype(np.float64)))
           for n, m in (("lambda_q1", "lambda_k1"), ("lambda_q2", "lambda_k2"))}
    lam = math.exp(dot["lambda_q1"]) - math.exp(dot["lambda_q2"]) + lam_init
    o = o[:, :h] - lam * o[:, h:]
    o = (1 - lam_init) * rms(o, c.get("rms_norm_eps", default=1e-5))
    return {"output": o, "weights": w[:h] - lam * w[h:]}
