#!/usr/bin/env python3
"""Optional cross-check of the rope scalings 'proportional' and 'ntk_alpha'
against the peers' formulas run in PyTorch (Debian's python3-torch), through
a running posattnd's /v1/encode. Not part of `make test` (torch is optional).

  /usr/bin/python3 tools/crosscheck_rope_scalings.py [BINARY]   # default build/posattnd

The peers, restated (float32 like theirs):
  proportional  transformers _compute_proportional_rope_parameters: k =
                int(p * head_dim // 2) frequencies base^(-2i/head_dim) over
                the even i, zeros for the other head_dim//2 - k, / factor
  ntk_alpha     vLLM DynamicNTKAlphaRotaryEmbedding: the new base in Python
                float (float64), base * alpha ** (r / (r - 2)), then
                base ** (arange(0, r, 2, float32) / r) in float32
posattn computes in double and rounds once, so agreement is to float32's
precision (relative 1e-6), and zeros must be exact zeros.
"""

import torch

import peer_server


def peer_proportional(head_dim, base, p, factor):
    k = int(p * head_dim // 2)
    exps = torch.arange(0, 2 * k, 2, dtype=torch.int64).float() / head_dim
    rot = 1.0 / (base ** exps)
    inv = torch.cat((rot, torch.zeros(head_dim // 2 - k, dtype=torch.float32)))
    return inv / factor


def peer_ntk_alpha(rotary_dim, base, alpha):
    new_base = base * alpha ** (rotary_dim / (rotary_dim - 2))  # Python float64
    return 1.0 / (new_base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))


def encode(port, scheme, dim):
    return peer_server.post(port, "/v1/encode",
                            {"scheme": scheme, "positions": [0, 1, 1000], "dim": dim})


def close(got, want, what):
    want = want.tolist()
    assert len(got) == len(want), f"{what}: {len(got)} values, peer {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if w == 0.0:
            assert g == 0.0, f"{what}[{i}] = {g}, peer exactly 0"
        elif abs(g - w) > 1e-6 * abs(w):
            raise AssertionError(f"{what}[{i}] = {g!r}, peer {w!r}")


def main():
    srv = peer_server.start()
    port = srv.port
    try:
        n = 0
        for D, base, p, f in [(512, 1e6, 0.25, 1.0), (256, 1e6, 0.25, 1.0), (16, 1e4, 0.5, 2.0),
                              (10, 1e4, 0.3, 1.0), (10, 1e4, 0.7, 1.0), (64, 5e5, 1.0, 8.0)]:
            ans = encode(port, {"type": "rope", "scaling": "proportional", "base": base,
                                "partial_rotary_factor": p, "factor": f}, D)
            close(ans["inv_freq"]["data"], peer_proportional(D, base, p, f),
                  f"proportional D={D} p={p}")
            n += 1
        for D, r, base, alpha in [(128, 128, 1e4, 1000.0), (128, 64, 1e4, 1000.0),
                                  (64, 64, 1e4, 2.0), (16, 8, 1e4, 50.0)]:
            ans = encode(port, {"type": "rope", "scaling": "ntk_alpha", "base": base,
                                "alpha": alpha, "rotary_dim": r}, D)
            close(ans["inv_freq"]["data"], peer_ntk_alpha(r, base, alpha),
                  f"ntk_alpha r={r} alpha={alpha}")
            n += 1
        print(f"crosscheck_rope_scalings: {n} cases agree with the torch peers")
    finally:
        srv.stop(check=True)


if __name__ == "__main__":
    main()
