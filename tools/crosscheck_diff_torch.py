#!/usr/bin/python3
"""crosscheck_diff_torch.py - posattnd's differential attention against the
peers' own forward passes run in PyTorch (Debian's python3-torch).
Optional: make test does not need torch.

    /usr/bin/python3 tools/crosscheck_diff_torch.py [build/posattnd]

Starts posattnd on a free loopback port, asks /v1/attention (item option
differential) for output and weights, and compares them with the peers'
attention cores transliterated here (their projections left out: q, k, v
are the inputs):
  - microsoft/unilm Diff-Transformer/multihead_diffattn.py,
    MultiheadDiffAttn.forward: q [2H heads], k [2 Hkv], v [Hkv of 2D];
    rotary embedding interleaved (flash_attn apply_rotary_emb,
    interleaved=True: neighbouring pairs, posattn's gptj layout),
    repeat_kv, the causal triu mask with offset, softmax, lambda from
    lambda_q1/k1/q2/k2 + lambda_init(depth), view(bsz, H, 2, ...) and the
    difference, RMSNorm(2D, eps 1e-5, affine weight), * (1 - lambda_init);
  - Hugging Face transformers models/diffllama/modeling_diffllama.py,
    DiffLlamaAttention.forward (eager): rotate_half rope (neox),
    repeat_kv, cat(chunk(v, 2, heads), -1), repeat(1, 2, 1, 1), the
    chunked difference, groupnorm RMSNorm(2D, rms_norm_eps, no weight),
    * (1 - lambda_init).
in float64 and in float32 as the peers run.
"""

import math

import torch

import peer_server


def rope_tables(L, D, base, dtype, offset=0):
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.outer(torch.arange(offset, offset + L, dtype=torch.float64), inv)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rotary_interleaved(x, cos, sin):
    """flash_attn apply_rotary_emb(interleaved=True): x [L, H, D]."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    """[B, Hkv, L, D] -> [B, Hkv * n_rep, L, D] (both peers' helper)."""
    b, h, L, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, L, d).reshape(b, h * n_rep, L, d)


def lambda_init_fn(depth):
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


# ---- microsoft/unilm MultiheadDiffAttn.forward core (transliterated) -----
def unilm(q, k, v, lq1, lk1, lq2, lk2, depth, subln_w, causal, rope, dtype):
    tgt_len, H2, D = q.shape
    src_len, Hk, _ = k.shape
    num_heads, num_kv_heads = H2 // 2, Hk // 2
    n_rep = num_heads // num_kv_heads
    q, k, v = q.to(dtype)[None], k.to(dtype)[None], v.to(dtype)[None]
    if rope:
        offset = src_len - tgt_len
        cos, sin = rope_tables(src_len, D, 10000.0, dtype)
        q = rotary_interleaved(q[0], cos[offset:], sin[offset:])[None]
        k = rotary_interleaved(k[0], cos, sin)[None]
    offset = src_len - tgt_len
    q = q.transpose(1, 2)
    k = repeat_kv(k.transpose(1, 2), n_rep)
    v = repeat_kv(v.transpose(1, 2), n_rep)
    q = q * D ** -0.5
    attn_weights = torch.matmul(q, k.transpose(-1, -2))
    attn_mask = torch.zeros([tgt_len, src_len], dtype=dtype)
    if causal:
        attn_mask = torch.triu(attn_mask.fill_(float("-inf")), 1 + offset)
    attn_weights = torch.nan_to_num(attn_weights)
    attn_weights += attn_mask
    attn_weights = torch.softmax(attn_weights, dim=-1, dtype=dtype)
    lambda_1 = torch.exp(torch.sum(lq1.to(dtype) * lk1.to(dtype), dim=-1))
    lambda_2 = torch.exp(torch.sum(lq2.to(dtype) * lk2.to(dtype), dim=-1))
    lambda_init = lambda_init_fn(depth)
    lambda_full = lambda_1 - lambda_2 + lambda_init
    attn_weights = attn_weights.view(1, num_heads, 2, tgt_len, src_len)
    attn_weights = attn_weights[:, :, 0] - lambda_full * attn_weights[:, :, 1]
    attn = torch.matmul(attn_weights, v)
    # RMSNorm(2 * head_dim, eps=1e-5, elementwise_affine=True)
    attn = attn * torch.rsqrt(attn.pow(2).mean(-1, keepdim=True) + 1e-5) * subln_w.to(dtype)
    attn = attn * (1 - lambda_init)
    return attn[0].transpose(0, 1), attn_weights[0]  # [Lq, H, 2D], [H, Lq, Lk]


# ---- Hugging Face DiffLlamaAttention.forward core (transliterated) -------
def diffllama(q, k, v, lq1, lk1, lq2, lk2, depth, eps, causal, rope, dtype):
    q_len, H2, D = q.shape
    kv_len, Hk, _ = k.shape
    groups = H2 // Hk
    query_states = q.to(dtype)[None].transpose(1, 2)
    key_states = k.to(dtype)[None].transpose(1, 2)
    value_states = v.to(dtype)[None].transpose(1, 2)
    if rope:
        cos, sin = rope_tables(kv_len, D, 10000.0, dtype)
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        off = kv_len - q_len
        query_states = query_states * cos[off:] + rotate_half(query_states) * sin[off:]
        key_states = key_states * cos + rotate_half(key_states) * sin
    key_states = repeat_kv(key_states, groups)
    value_states = repeat_kv(value_states, groups)
    value_states = torch.cat(torch.chunk(value_states, 2, dim=1), dim=-1)
    value_states = value_states.repeat(1, 2, 1, 1)
    attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(D)
    if causal:
        i = torch.arange(q_len)[:, None] + (kv_len - q_len)
        j = torch.arange(kv_len)[None, :]
        attn_weights = attn_weights + torch.where(j > i, float("-inf"), 0.0).to(dtype)
    attn_weights = torch.softmax(attn_weights, dim=-1, dtype=dtype)
    lambda_1 = torch.exp(torch.sum(lq1.to(dtype) * lk1.to(dtype), dim=-1))
    lambda_2 = torch.exp(torch.sum(lq2.to(dtype) * lk2.to(dtype), dim=-1))
    lambda_init = lambda_init_fn(depth)
    lambda_full = lambda_1 - lambda_2 + lambda_init
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output1, attn_output2 = torch.chunk(attn_output, 2, dim=1)
    attn_output = attn_output1 - lambda_full * attn_output2
    # groupnorm: DiffLlamaRMSNorm(2 * head_dim, eps=rms_norm_eps, elementwise_affine=False)
    var = attn_output.pow(2).mean(-1, keepdim=True)
    attn_output = (1 - lambda_init) * (attn_output * torch.rsqrt(var + eps))
    w1, w2 = torch.chunk(attn_weights, 2, dim=1)
    return attn_output[0].transpose(0, 1), (w1 - lambda_full * w2)[0]


def tensor(x):
    return {"shape": list(x.shape), "data": x.flatten().tolist()}


def main():
    srv = peer_server.start()
    port = srv.port
    worst = {}
    try:
        g = torch.Generator().manual_seed(7)
        # pairs, Lq, Lk, H (output heads), Hk (k's heads), D, causal, rope, depth
        cases = (
            ("interleaved", 8, 8, 4, 8, 16, True, True, 3),
            ("interleaved", 8, 8, 4, 2, 16, True, True, 0),
            ("interleaved", 2, 11, 2, 2, 8, True, True, 5),
            ("interleaved", 6, 9, 3, 6, 32, False, False, 1),
            ("halves", 8, 8, 4, 8, 16, True, True, 3),
            ("halves", 8, 8, 4, 2, 16, True, True, 0),
            ("halves", 2, 11, 2, 2, 8, True, True, 5),
            ("halves", 6, 9, 3, 6, 32, False, False, 1),
        )
        for pairs, Lq, Lk, H, Hk, D, causal, rope, depth in cases:
            def r(*shape, lo=-1.0, hi=1.0):
                return (torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).float()
            q, k = r(Lq, 2 * H, D), r(Lk, Hk, D)
            v = r(Lk, Hk // 2, 2 * D) if pairs == "interleaved" else r(Lk, Hk, D)
            lam = [r(D, lo=-0.3, hi=0.3) for _ in range(4)]
            sw = r(2 * D, lo=0.5, hi=1.5)
            eps = 1e-5 if pairs == "interleaved" else 1e-6
            dj = {"pairs": pairs, "lambda_q1": lam[0].tolist(), "lambda_k1": lam[1].tolist(),
                  "lambda_q2": lam[2].tolist(), "lambda_k2": lam[3].tolist(), "depth": depth,
                  "subln_eps": eps}
            if pairs == "interleaved":
                dj["subln_weight"] = sw.tolist()
            item = {"scheme": {"type": "rope", "layout": "gptj" if pairs == "interleaved"
                               else "neox"} if rope else {"type": "none"},
                    "q": tensor(q), "k": tensor(k), "v": tensor(v), "causal": causal,
                    "differential": dj, "return": ["output", "weights"]}
            ans = peer_server.post(port, "/v1/attention", {"inputs": [item]})["outputs"][0]
            out = torch.tensor(ans["output"]["data"], dtype=torch.float64).reshape(Lq, H, 2 * D)
            w = torch.tensor(ans["weights"]["data"], dtype=torch.float64).reshape(H, Lq, Lk)
            for dtype in (torch.float64, torch.float32):
                if pairs == "interleaved":
                    wo, ww = unilm(q, k, v, *lam, depth, sw, causal, rope, dtype)
                else:
                    wo, ww = diffllama(q, k, v, *lam, depth, eps, causal, rope, dtype)
                eo = (out - wo.double()).abs().max().item()
                ew = (w - ww.double()).abs().max().item()
                key = (pairs, str(dtype))
                worst[key] = max(worst.get(key, 0.0), eo, ew)
                print("%-11s Lq=%-2d Lk=%-2d H=%d Hk=%d D=%-2d causal=%-5s rope=%-5s depth=%d "
                      "%-13s output max abs err %.3g, weights %.3g"
                      % (pairs, Lq, Lk, H, Hk, D, causal, rope, depth, dtype, eo, ew))
                tol = 2e-6 if dtype == torch.float64 else 2e-5
                assert eo < tol and ew < tol, (eo, ew)
    finally:
        srv.stop(check=True)
    for (pairs, dtype), e in sorted(worst.items()):
        print("worst %-11s vs %-13s %.3g" % (pairs, dtype, e))
    print("ok")


if __name__ == "__main__":
    main()
