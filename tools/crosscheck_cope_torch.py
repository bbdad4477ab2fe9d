#!/usr/bin/python3
"""crosscheck_cope_torch.py - posattnd's cope against the forward of the
authors' code run in PyTorch (Debian's python3-torch). Optional: make test
does not need torch.

    /usr/bin/python3 tools/crosscheck_cope_torch.py [build/posattnd]

Starts posattnd on a free loopback port, sends the same q, k, v and
position table to /v1/attention (returning the output and the logits),
and compares them with facebookresearch/RAM
projects/cope/src/cope/context_position.py ContextPosSelfAttn.forward,
transliterated here in torch (key_cope = key, no value gates, no dropout):
there q, k, v are [B, L, head_dim] with one head per batch row and
pos_emb is [1, head_dim, npos], the transpose of posattn's [npos, D]. The
mask is the causal one (attn_mask multiplies the gates and adds log 0 =
-inf to the logits) or none. Run in float64 and in float32, as the
reference runs. Logits are compared where the mask keeps a key.
"""

import math

import torch

import peer_server


def attention(port, item):
    ans = peer_server.post(port, "/v1/attention", {"inputs": [item]})["outputs"][0]
    assert "error" not in ans, ans
    # Hidden keys' logits (-inf) are JSON null.
    return {n: torch.tensor([-math.inf if x is None else float(x) for x in ans[n]["data"]],
                            dtype=torch.float64).reshape(ans[n]["shape"])
            for n in ("output", "logits")}


def cope_forward(query, key, val, pos_emb, npos, nodiv, attn_mask):
    """ContextPosSelfAttn.forward: query, key, val [B, L, head_dim], pos_emb
    [B or 1, head_dim, npos], attn_mask [L, L] of 0/1 or None."""
    head_dim = query.size(-1)
    gate_logits = torch.bmm(query, key.transpose(-1, -2))
    gates = torch.sigmoid(gate_logits / math.sqrt(head_dim))
    if attn_mask is not None:
        gates = gates * attn_mask
    positions = gates.flip(-1).cumsum(dim=-1).flip(-1)
    positions = positions.clamp(max=npos - 1)
    pos_logits_fixed = torch.matmul(query, pos_emb)
    positions_ceil = positions.ceil().long()
    positions_floor = positions.floor().long()
    pos_logits_ceil = pos_logits_fixed.gather(-1, positions_ceil)
    pos_logits_floor = pos_logits_fixed.gather(-1, positions_floor)
    pos_ceil_weight = positions - positions_floor
    pos_logits = pos_logits_ceil * pos_ceil_weight + pos_logits_floor * (1 - pos_ceil_weight)
    attn_logits = gate_logits
    if nodiv:
        attn_logits = attn_logits / math.sqrt(head_dim) + pos_logits
    else:
        attn_logits = (attn_logits + pos_logits) / math.sqrt(head_dim)
    if attn_mask is not None:
        attn_logits = attn_logits + attn_mask.log()
    attn = torch.softmax(attn_logits, dim=-1)
    return torch.bmm(attn, val), attn_logits


def main():
    srv = peer_server.start()
    port = srv.port
    worst = {torch.float64: 0.0, torch.float32: 0.0}
    try:
        gen = torch.Generator().manual_seed(31)
        L, H, D = 96, 4, 16
        for npos, per_head, nodiv, causal in ((L + 1, False, False, True),
                                              (L + 1, True, True, True),
                                              (9, False, False, True),
                                              (9, True, False, False),
                                              (L + 1, False, True, False)):
            q = torch.randn(L, H, D, generator=gen, dtype=torch.float64).float()
            k = torch.randn(L, H, D, generator=gen, dtype=torch.float64).float()
            v = torch.randn(L, H, D, generator=gen, dtype=torch.float64).float()
            E = torch.randn(H if per_head else 1, npos, D, generator=gen,
                            dtype=torch.float64).float()
            table = E if per_head else E[0]
            scheme = {"type": "cope", "pos_emb": {"shape": list(table.shape),
                                                  "data": table.flatten().tolist()},
                      "nodiv": nodiv}
            got = attention(port, {"scheme": scheme, "causal": causal,
                                   "q": {"shape": [L, H, D], "data": q.flatten().tolist()},
                                   "k": {"shape": [L, H, D], "data": k.flatten().tolist()},
                                   "v": {"shape": [L, H, D], "data": v.flatten().tolist()},
                                   "return": ["output", "logits"]})
            keep = torch.tril(torch.ones(L, L, dtype=torch.bool)) if causal else \
                torch.ones(L, L, dtype=torch.bool)
            for dtype in (torch.float64, torch.float32):
                mask = keep.to(dtype) if causal else None
                out, logits = cope_forward(q.transpose(0, 1).to(dtype), k.transpose(0, 1).to(dtype),
                                           v.transpose(0, 1).to(dtype),
                                           E.transpose(-1, -2).to(dtype), npos, nodiv, mask)
                out = out.transpose(0, 1).to(torch.float64)  # [L, H, D]
                logits = logits.to(torch.float64)
                e_out = ((got["output"] - out).abs() / (1 + out.abs())).max().item()
                e_log = ((got["logits"] - logits).abs() / (1 + logits.abs()))[:, keep].max().item()
                err = max(e_out, e_log)
                print("npos %-3d %-8s nodiv=%-5s causal=%-5s %s: output %.3g, logits %.3g"
                      % (npos, "per-head" if per_head else "shared", nodiv, causal,
                         str(dtype).replace("torch.", ""), e_out, e_log))
                worst[dtype] = max(worst[dtype], err)
        print("max rel err (|got - want| / (1 + |want|)): float64 reference %.3g, float32 "
              "reference %.3g" % (worst[torch.float64], worst[torch.float32]))
        assert worst[torch.float64] < 1e-4 and worst[torch.float32] < 1e-3, worst
    finally:
        srv.stop(check=True)
    print("ok")


if __name__ == "__main__":
    main()
