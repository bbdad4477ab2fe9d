#!/usr/bin/python3
"""crosscheck_mla_torch.py - posattnd's MLA items (the item option mla)
against Hugging Face's DeepseekV3Attention run in PyTorch (Debian's
python3-torch). Optional: make test does not need torch.

    /usr/bin/python3 tools/crosscheck_mla_torch.py [build/posattnd]

Starts posattnd on a free loopback port, asks /v1/attention for output and
weights, and compares them with the attention core of Hugging Face
transformers models/deepseek_v3/modeling_deepseek_v3.py transliterated
here (its projections and norms left out: q, the compressed kv c_kv after
kv_a_layernorm, k_rope before rope, and kv_b_proj's weight are the inputs):
  - DeepseekV3Attention.forward: q split [qk_nope_head_dim,
    qk_rope_head_dim]; kv_b_proj(c_kv) viewed [.., H, qk_nope + v_head_dim]
    and split into k_pass and value_states; k_rot viewed as one head; rope
    by apply_rotary_pos_emb_interleave (rope_interleave: the pairs 2i, 2i+1
    permuted to halves, then rotate_half) or apply_rotary_pos_emb;
    k_rot.expand to every head, cat((pass, rot)); scaling =
    qk_head_dim^-0.5 * yarn_get_mscale(factor, mscale_all_dim)^2;
  - eager_attention_forward: matmul * scaling, the causal mask (bottom-right,
    as a cache's), softmax in float32 (here: the run's dtype), matmul v;
  - DeepseekV3RotaryEmbedding with _compute_yarn_parameters
    (modeling_rope_utils.py: the ramp between beta_fast and beta_slow,
    truncate, attention_factor mscale(factor, mscale) / mscale(factor,
    mscale_all_dim) multiplying cos and sin), inv_freq over
    qk_rope_head_dim dims.
The server's item is sent in both forms: expanded (k = k_nope and v from
kv_b_proj(c_kv), as HF computes them) and absorbed (c_kv with mla.w_uk,
mla.w_uv: kv_b_proj.weight viewed [H, qk_nope + v_head_dim, R] and split),
and a torch absorbed core (vLLM's: q_nope w_uk into the latent space,
scores against c_kv, the latent output through w_uv) is checked as well.
The reference runs in float64 and in float32 as the peer does; the
errors printed are max |server - peer| / max |peer| per result.
"""

import math

import torch

import peer_server


def yarn_get_mscale(scale=1, mscale=1):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(dim, base, factor, orig_max, beta_fast, beta_slow, mscale, mscale_all_dim,
                  dtype):
    """_compute_yarn_parameters: inv_freq [dim/2] and attention_factor."""
    attention_factor = (yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
                        if mscale and mscale_all_dim else yarn_get_mscale(factor))

    def find_correction_dim(num_rotations):
        return (dim * math.log(orig_max / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(find_correction_dim(beta_fast)), 0)
    high = min(math.ceil(find_correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=dtype) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype) / dim)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ext_factor = 1 - ramp
    return inter * (1 - ext_factor) + extra * ext_factor, attention_factor


def rope_cos_sin(inv_freq, attention_factor, positions, dtype):
    """DeepseekV3RotaryEmbedding.forward: cat((freqs, freqs)) cos and sin, scaled."""
    freqs = torch.outer(positions.to(dtype), inv_freq.to(dtype))
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_factor, emb.sin() * attention_factor


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(x, cos, sin, interleave):
    """apply_rotary_pos_emb(_interleave) on one tensor [b, h, s, d]."""
    if interleave:
        b, h, s, d = x.shape
        x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return x * cos[None, None] + rotate_half(x) * sin[None, None]


def hf_mla(q, c_kv, k_rope, w_kvb, cfg, causal, dtype):
    """DeepseekV3Attention.forward's core: q [Lq, H, Dn + Dr], c_kv [Lk, R],
    k_rope [Lk, Dr], w_kvb = kv_b_proj.weight [H (Dn + Dv), R]. Returns
    output [Lq, H, Dv] and weights [H, Lq, Lk]."""
    Lq, H, _ = q.shape
    Lk = c_kv.shape[0]
    Dn, Dr, Dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    q_states = q.to(dtype)[None].transpose(1, 2)
    q_pass, q_rot = torch.split(q_states, [Dn, Dr], dim=-1)
    k_pass = (c_kv.to(dtype) @ w_kvb.to(dtype).T).view(1, Lk, -1, Dn + Dv).transpose(1, 2)
    k_pass, value_states = torch.split(k_pass, [Dn, Dv], dim=-1)
    k_rot = k_rope.to(dtype).view(1, 1, Lk, Dr)
    inv_freq, att = yarn_inv_freq(Dr, cfg["rope_theta"], cfg["factor"], cfg["orig_max"], 32, 1,
                                  cfg["mscale"], cfg["mscale_all_dim"], dtype)
    cq, sq = rope_cos_sin(inv_freq, att, torch.arange(Lk - Lq, Lk), dtype)
    ck, sk = rope_cos_sin(inv_freq, att, torch.arange(Lk), dtype)
    q_rot = rotary(q_rot, cq, sq, cfg["rope_interleave"])
    k_rot = rotary(k_rot, ck, sk, cfg["rope_interleave"])
    k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
    query_states = torch.cat((q_pass, q_rot), dim=-1)
    key_states = torch.cat((k_pass, k_rot), dim=-1)
    scaling = (Dn + Dr) ** -0.5
    if cfg["mscale_all_dim"]:
        m = yarn_get_mscale(cfg["factor"], cfg["mscale_all_dim"])
        scaling = scaling * m * m
    attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * scaling
    if causal:
        i = torch.arange(Lq)[:, None] + (Lk - Lq)
        j = torch.arange(Lk)[None, :]
        attn_weights = attn_weights + torch.where(j > i, float("-inf"), 0.0).to(dtype)
    attn_weights = torch.softmax(attn_weights, dim=-1, dtype=dtype)
    attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2)
    return attn_output[0], attn_weights[0], k_pass[0].transpose(0, 1), value_states[0].transpose(0, 1)


def absorbed_mla(q, c_kv, k_rope, w_kvb, cfg, causal, dtype):
    """The absorbed core (vLLM's MLA): the same answer over the latent rows."""
    Lq, H, _ = q.shape
    Lk, R = c_kv.shape
    Dn, Dr, Dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    w = w_kvb.to(dtype).view(H, Dn + Dv, R)
    w_uk, w_uv = w[:, :Dn], w[:, Dn:]
    q = q.to(dtype).transpose(0, 1)  # [H, Lq, Dq]
    q_nope, q_pe = q[..., :Dn], q[..., Dn:]
    q_lat = torch.matmul(q_nope, w_uk)  # [H, Lq, R]
    inv_freq, att = yarn_inv_freq(Dr, cfg["rope_theta"], cfg["factor"], cfg["orig_max"], 32, 1,
                                  cfg["mscale"], cfg["mscale_all_dim"], dtype)
    cq, sq = rope_cos_sin(inv_freq, att, torch.arange(Lk - Lq, Lk), dtype)
    ck, sk = rope_cos_sin(inv_freq, att, torch.arange(Lk), dtype)
    q_pe = rotary(q_pe[None], cq, sq, cfg["rope_interleave"])[0]
    k_pe = rotary(k_rope.to(dtype).view(1, 1, Lk, Dr), ck, sk, cfg["rope_interleave"])[0, 0]
    scaling = (Dn + Dr) ** -0.5
    if cfg["mscale_all_dim"]:
        m = yarn_get_mscale(cfg["factor"], cfg["mscale_all_dim"])
        scaling = scaling * m * m
    s = (torch.matmul(q_lat, c_kv.to(dtype).T) + torch.matmul(q_pe, k_pe.T)) * scaling
    if causal:
        i = torch.arange(Lq)[:, None] + (Lk - Lq)
        j = torch.arange(Lk)[None, :]
        s = s + torch.where(j > i, float("-inf"), 0.0).to(dtype)
    p = torch.softmax(s, dim=-1, dtype=dtype)
    o_lat = torch.matmul(p, c_kv.to(dtype))  # [H, Lq, R]
    out = torch.matmul(o_lat, w_uv.transpose(1, 2))  # [H, Lq, Dv]
    return out.transpose(0, 1), p


def tensor(x):
    return {"shape": list(x.shape), "data": x.flatten().tolist()}


def rel(got, want):
    return ((got - want).abs().max() / want.abs().max()).item()


def main():
    srv = peer_server.start()
    port = srv.port
    worst = {}
    try:
        g = torch.Generator().manual_seed(32)

        def r(*shape, lo=-1.0, hi=1.0):
            return (torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).float()

        # Lq, Lk, H, qk_nope, qk_rope, v_head_dim, kv_lora_rank, causal, rope_interleave, yarn
        cases = (
            (8, 8, 4, 16, 8, 16, 32, True, True, True),     # DeepSeek-V3's layout, prefill
            (1, 13, 4, 16, 8, 12, 24, True, True, True),    # decode
            (3, 11, 2, 32, 16, 24, 64, True, False, True),  # rope_interleave false (neox)
            (6, 6, 3, 8, 4, 8, 16, False, True, False),     # no yarn: plain rope
            (2, 40, 8, 128, 64, 128, 512, True, True, True),  # V3's head sizes, 8 heads
        )
        for Lq, Lk, H, Dn, Dr, Dv, R, causal, interleave, yarn in cases:
            cfg = {"qk_nope_head_dim": Dn, "qk_rope_head_dim": Dr, "v_head_dim": Dv,
                   "rope_theta": 10000.0, "rope_interleave": interleave,
                   "factor": 40.0 if yarn else 1.0, "orig_max": 16 if yarn else 4096,
                   "mscale": 1.0 if yarn else 0, "mscale_all_dim": 1.0 if yarn else 0}
            q, c_kv, k_rope = r(Lq, H, Dn + Dr), r(Lk, R), r(Lk, Dr)
            w_kvb = r(H * (Dn + Dv), R, lo=-R ** -0.5, hi=R ** -0.5)
            scheme = {"type": "rope", "layout": "gptj" if interleave else "neox"}
            if yarn:
                scheme.update(scaling="yarn", factor=cfg["factor"],
                              original_max_position=cfg["orig_max"], mscale=cfg["mscale"],
                              mscale_all_dim=cfg["mscale_all_dim"])
            # HF's k_nope and v in float64, rounded once: the expanded item's inputs.
            _, _, k_nope, v = hf_mla(q, c_kv, k_rope, w_kvb, cfg, causal, torch.float64)
            wv = w_kvb.view(H, Dn + Dv, R)
            items = [
                {"scheme": scheme, "q": tensor(q), "k": tensor(k_nope.float()),
                 "v": tensor(v.float()), "k_rope": tensor(k_rope), "mla": {"rope_dim": Dr},
                 "causal": causal, "return": ["output", "weights"]},
                {"scheme": scheme, "q": tensor(q), "c_kv": tensor(c_kv),
                 "k_rope": tensor(k_rope.view(Lk, 1, Dr)),
                 "mla": {"rope_dim": Dr, "absorbed": True, "w_uk": tensor(wv[:, :Dn]),
                         "w_uv": tensor(wv[:, Dn:])},
                 "causal": causal, "return": ["output", "weights"]},
            ]
            ans = peer_server.post(port, "/v1/attention", {"inputs": items})["outputs"]
            for form, a in zip(("expanded", "absorbed"), ans):
                out = torch.tensor(a["output"]["data"], dtype=torch.float64).reshape(Lq, H, Dv)
                w = torch.tensor([x if x is not None else 0.0 for x in a["weights"]["data"]],
                                 dtype=torch.float64).reshape(H, Lq, Lk)
                for peer, fn in (("HF", hf_mla), ("absorbed-torch", absorbed_mla)):
                    for dtype in (torch.float64, torch.float32):
                        wo, ww = fn(q, c_kv, k_rope, w_kvb, cfg, causal, dtype)[:2]
                        eo, ew = rel(out, wo.double()), rel(w, ww.double())
                        key = (form, peer, str(dtype))
                        worst[key] = max(worst.get(key, 0.0), eo, ew)
                        print("%-8s vs %-14s %-13s Lq=%-2d Lk=%-2d H=%d Dn=%-3d Dr=%-2d Dv=%-3d "
                              "R=%-3d causal=%-5s interleave=%-5s yarn=%-5s output max rel err "
                              "%.3g, weights %.3g"
                              % (form, peer, dtype, Lq, Lk, H, Dn, Dr, Dv, R, causal, interleave,
                                 yarn, eo, ew))
                        tol = 1e-5 if dtype == torch.float64 else 2e-5
                        assert eo < tol and ew < tol, (form, peer, dtype, eo, ew)
    finally:
        srv.stop(check=True)
    for (form, peer, dtype), e in sorted(worst.items()):
        print("worst %-8s vs %-14s %-13s max rel err %.3g" % (form, peer, dtype, e))
    print("ok")


if __name__ == "__main__":
    main()
