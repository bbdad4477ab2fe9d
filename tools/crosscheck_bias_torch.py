#!/usr/bin/python3
"""crosscheck_bias_torch.py - posattnd's kerple and sandwich biases against
the peers' own formulas run in PyTorch (Debian's python3-torch). Optional:
make test does not need torch.

    /usr/bin/python3 tools/crosscheck_bias_torch.py [build/posattnd]

Starts posattnd on a free loopback port, asks /v1/encode for the bias of
each case, and compares it with:
  - KERPLE: chijames/KERPLE megatron/mpu/layers.py ParallelKerpleLog and
    ParallelKerplePower forward (diff = tril(i - j), the causal reference),
    on the pairs a causal mask keeps;
  - Sandwich: NVIDIA NeMo SandwichRelativePositionEmbedding.forward
    (position_embedding/sandwich_relative_position_embedding.py), bidirectional,
    in float32 as NeMo runs it (tolerance for that) and in float64.
The formulas are transliterated here (no NeMo or gpt-neox import).
"""


import torch

import peer_server


def encode(port, body):
    ans = peer_server.post(port, "/v1/encode", body)
    b = ans["bias"]
    return torch.tensor(b["data"], dtype=torch.float64).reshape(b["shape"])


def kerple_peer(form, r1, r2, L):
    """ParallelKerpleLog / ParallelKerplePower: [H, L, L], causal diff."""
    diff = torch.tril(torch.arange(L).view(L, 1).repeat(1, L) + torch.arange(0, -L, -1))
    diff = diff.to(torch.float64)
    a = torch.tensor(r1, dtype=torch.float64)[:, None, None]
    p = torch.tensor(r2, dtype=torch.float64)[:, None, None]
    if form == "log":
        # bias_p (the multiplier) = r1, bias_a = r2: -bias_p * log(1 + bias_a * diff)
        return -a * torch.log(1 + p * diff)
    # bias_a (the multiplier) = r1, bias_p (the exponent) = r2: -(diff^bias_p) * bias_a
    return -diff.pow(p) * a


def sandwich_peer(hidden_size, H, L, dtype):
    """SandwichRelativePositionEmbedding.forward, bidirectional, [H, L, L]."""
    rel = torch.arange(1 - L, 1)[None, :].mul(-1)
    mem = torch.arange(1 - L, 1)[:, None].mul(-1)
    rel = torch.abs(mem - rel)
    inv_freq = 1.0 / (10000 ** (2 * torch.arange(1, hidden_size / 2 + 1, dtype=dtype) / hidden_size))
    bias = torch.sum((rel[:, :, None].repeat(1, 1, len(inv_freq)) * inv_freq).cos(), axis=2)
    bias = bias.repeat(H, 1, 1)
    scales = torch.arange(1, H + 1, 1, dtype=dtype)[:, None, None]
    return ((bias - hidden_size / 2) / (scales * 8 / H)).to(torch.float64)


def main():
    srv = peer_server.start()
    port = srv.port
    worst = 0.0
    try:
        L = 48
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
        for form, r1, r2 in (("log", [0.5, 1.0, 2.0, 0.01], [0.1, 1.0, 3.0, 0.01]),
                             ("power", [0.5, 1.0, 2.0, 0.01], [0.01, 1.0, 1.5, 2.0])):
            got = encode(port, {"scheme": {"type": "kerple", "form": form, "r1": r1, "r2": r2},
                                "q_length": L})
            want = kerple_peer(form, r1, r2, L)
            err = ((got - want).abs() / (1 + want.abs()))[:, causal].max().item()
            print("kerple %-5s max rel err %.3g" % (form, err))
            assert err < 1e-6, err
            worst = max(worst, err)
        for hs, H in ((64, 8), (7, 3), (128, 12)):
            got = encode(port, {"scheme": {"type": "sandwich", "hidden_size": hs},
                                "num_heads": H, "q_length": L})
            for dtype, tol in ((torch.float64, 1e-6), (torch.float32, 1e-4)):
                want = sandwich_peer(hs, H, L, dtype)
                err = ((got - want).abs() / (1 + want.abs())).max().item()
                print("sandwich d=%-3d H=%-2d %s max rel err %.3g" % (hs, H, dtype, err))
                assert err < tol, err
    finally:
        srv.stop(check=True)
    print("ok")


if __name__ == "__main__":
    main()
