#!/usr/bin/python3
"""crosscheck_xpos_torch.py - posattnd's xpos scheme against torchscale's
XPOS formula run in PyTorch (Debian's python3-torch). Optional: make test
does not need torch.

    /usr/bin/python3 tools/crosscheck_xpos_torch.py [build/posattnd]

Starts posattnd on a free loopback port and compares /v1/attention's logits
with those of microsoft/torchscale torchscale/component/xpos_relative_position.py
(fixed_pos_embedding, rotate_every_two, duplicate_interleave,
apply_rotary_pos_emb, XPOS.forward; transliterated here, no torchscale
import), applied as torchscale's MultiheadAttention applies it:
k = xpos(k, offset=0, downscale=True), q = xpos(q, offset, downscale=False),
logits = q k^T / sqrt(D). torchscale centres the scale's positions
(min_pos = -(length + offset) // 2), posattn at 0 or the midpoint; the
centre cancels in q.k, so the logits agree. Prefill (offset 0) and one
decode step (q of length 1 at offset L - 1), in float64 and in float32 as
torchscale runs it.
"""


import torch

import peer_server


def fixed_pos_embedding(x):
    seq_len, dim = x.shape
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, dtype=x.dtype) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(0, seq_len, dtype=x.dtype), inv_freq)
    return torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)


def rotate_every_two(x):
    x1 = x[:, :, ::2]
    x2 = x[:, :, 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def duplicate_interleave(m):
    dim0 = m.shape[0]
    return m.view(-1, 1).repeat(1, 2).view(dim0, -1)


def apply_rotary_pos_emb(x, sin, cos, scale):
    sin, cos = map(lambda t: duplicate_interleave(t * scale), (sin, cos))
    return (x * cos) + (rotate_every_two(x) * sin)


def xpos(x, head_dim, scale_base, offset=0, downscale=False):
    """XPOS.forward; x [B*H, length, head_dim]."""
    base = (torch.arange(0, head_dim, 2, dtype=x.dtype) + 0.4 * head_dim) / (1.4 * head_dim)
    length = x.shape[1]
    min_pos = -(length + offset) // 2
    max_pos = length + offset + min_pos
    scale = base ** torch.arange(min_pos, max_pos, 1).to(base).div(scale_base)[:, None]
    sin, cos = fixed_pos_embedding(scale)
    if scale.shape[0] > length:
        scale, sin, cos = scale[-length:], sin[-length:], cos[-length:]
    if downscale:
        scale = 1 / scale
    return apply_rotary_pos_emb(x, sin, cos, scale)


def main():
    srv = peer_server.start()
    port = srv.port
    try:
        g = torch.Generator().manual_seed(31)
        for L, H, D, sb in ((40, 2, 16, 512.0), (300, 1, 8, 64.0), (17, 3, 32, 512.0)):
            q = torch.rand(L, H, D, generator=g, dtype=torch.float64) * 2 - 1
            k = torch.rand(L, H, D, generator=g, dtype=torch.float64) * 2 - 1
            v = torch.zeros(L, H, 1, dtype=torch.float64)
            q32, k32 = q.float(), k.float()
            for step in ("prefill", "decode"):
                qq = q if step == "prefill" else q[-1:]
                item = {"scheme": {"type": "xpos", "scale_base": sb},
                        "q": {"shape": list(qq.shape), "data": qq.float().flatten().tolist()},
                        "k": {"shape": list(k.shape), "data": k32.flatten().tolist()},
                        "v": {"shape": list(v.shape), "data": v.flatten().tolist()},
                        "causal": True, "return": ["logits"]}
                ans = peer_server.post(port, "/v1/attention", {"inputs": [item]})["outputs"][0]
                lg = ans["logits"]
                got = torch.tensor([x if x is not None else float("-inf") for x in lg["data"]],
                                   dtype=torch.float64).reshape(lg["shape"])
                offset = 0 if step == "prefill" else L - 1
                for dtype, tol in ((torch.float64, 2e-5), (torch.float32, 2e-4)):
                    qd = q32.to(dtype) if step == "prefill" else q32[-1:].to(dtype)
                    kd = k32.to(dtype)
                    qx = xpos(qd.permute(1, 0, 2), D, sb, offset=offset)
                    kx = xpos(kd.permute(1, 0, 2), D, sb, offset=0, downscale=True)
                    want = (qx @ kx.transpose(1, 2)).to(torch.float64) / D ** 0.5
                    Lq = want.shape[1]
                    vis = torch.tril(torch.ones(Lq, L, dtype=torch.bool), diagonal=L - Lq)
                    err = ((got - want).abs() / (1 + want.abs()))[:, vis].max().item()
                    print("xpos L=%-3d H=%d D=%-2d scale_base=%-4g %-7s %s max rel err %.3g"
                          % (L, H, D, sb, step, dtype, err))
                    assert err < tol, err
    finally:
        srv.stop(check=True)
    print("ok")


if __name__ == "__main__":
    main()
