#!/usr/bin/python3
"""crosscheck_fire_torch.py - posattnd's fire bias and logits against the
peer's FIRE module run in PyTorch (Debian's python3-torch). Optional: make
test does not need torch.

    /usr/bin/python3 tools/crosscheck_fire_torch.py [build/posattnd]

Starts posattnd on a free loopback port and compares, for several MLP
widths, head counts, c and L:
  - /v1/encode's bias [H, L, L] on the causal pairs, and
  - /v1/attention's logits (scale q.k + bias, causal), prefill and one
    decode step (the last query against every key),
with FIRE.forward of mcleish7/arithmetic cramming/architectures/
embeddings.py transliterated here (no import of that repository): in eval
mode its positions are arange(L), the threshold |L_multiplier * init_L|,
psi(x) = log(|c x| + 1), normaliser psi(max(i, threshold)) + eps, then
mlp = Linear(1, hidden) -> ReLU -> Linear(hidden, H), permuted to
[H, L, L]. The same weights go to posattnd as w1 = mlp.0.weight[:, 0],
b1 = mlp.0.bias, w2 = mlp.2.weight transposed ([hidden, H] row-major),
b2 = mlp.2.bias, L = L_multiplier * init_L. The peer runs in float64 here
and in float32 as trained (tolerance for that).
"""


import torch

import peer_server


def tensor_of(t):
    return torch.tensor([x if x is not None else float("-inf") for x in t["data"]],
                        dtype=torch.float64).reshape(t["shape"])


class PeerFIRE(torch.nn.Module):
    """FIRE.forward in eval mode (positions = arange(seq_length))."""

    def __init__(self, num_heads, mlp_width, init_c, init_L, L_multiplier, eps):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(1, mlp_width), torch.nn.ReLU(),
                                       torch.nn.Linear(mlp_width, num_heads))
        self.c = torch.nn.Parameter(torch.tensor(init_c))
        self.init_L = torch.nn.Parameter(torch.tensor(init_L), requires_grad=False)
        self.L_multiplier = torch.nn.Parameter(torch.tensor(L_multiplier))
        self.eps = eps

    def forward(self, seq_length):
        positions = torch.arange(seq_length, dtype=self.c.dtype)
        relative_distances = positions[:, None] - positions[None, :]
        threshold = torch.abs(self.L_multiplier * self.init_L)
        position_normalizer = torch.max(positions, threshold)[:, None]
        relative_distances = torch.log(torch.abs(self.c * relative_distances) + 1)
        position_normalizer = torch.log(torch.abs(self.c * position_normalizer) + 1)
        normalized_distances = relative_distances / (position_normalizer + self.eps)
        fire_bias = self.mlp(normalized_distances.unsqueeze(-1)).unsqueeze(0)
        return fire_bias.permute(0, 3, 1, 2)[0]


def main():
    srv = peer_server.start()
    port = srv.port
    worst = {torch.float64: 0.0, torch.float32: 0.0}
    try:
        torch.manual_seed(31)
        cases = ((48, 12, 32, 0.1, 1.0, 1e-6), (300, 4, 7, 0.3, 0.05, 1e-6),
                 (70, 3, 64, -0.2, -0.01, 1e-3), (20, 1, 1, 2.0, 0.0, 0.5))
        for L, H, hidden, c, mult, eps in cases:
            peer = PeerFIRE(H, hidden, c, 512.0, mult, eps).double()
            with torch.no_grad():  # weights that put breakpoints where x lives
                peer.mlp[0].weight.uniform_(-3, 3)
                peer.mlp[0].bias.uniform_(-2, 2)
            w1 = peer.mlp[0].weight[:, 0].float()
            b1 = peer.mlp[0].bias.float()
            w2 = peer.mlp[2].weight.t().contiguous().float()  # [hidden, H]
            b2 = peer.mlp[2].bias.float()
            with torch.no_grad():  # the float32 values posattnd receives
                peer.mlp[0].weight.copy_(w1[:, None].double())
                peer.mlp[0].bias.copy_(b1.double())
                peer.mlp[2].weight.copy_(w2.t().double())
                peer.mlp[2].bias.copy_(b2.double())
            scheme = {"type": "fire", "c": c, "L": 512.0 * mult, "eps": eps,
                      "w1": w1.tolist(), "b1": b1.tolist(), "w2": w2.flatten().tolist(),
                      "b2": b2.tolist()}
            vis = torch.tril(torch.ones(L, L, dtype=torch.bool))
            wants = {}
            with torch.no_grad():
                wants[torch.float64] = peer(L)
                wants[torch.float32] = peer.float()(L).double()
                peer.double()
            got = tensor_of(peer_server.post(port, "/v1/encode", {"scheme": scheme, "q_length": L})["bias"])
            assert torch.isinf(got[:, ~vis]).all()
            for dtype, tol in ((torch.float64, 1e-6), (torch.float32, 1e-4)):
                want = wants[dtype]
                err = ((got - want).abs() / (1 + want.abs()))[:, vis].max().item()
                print("fire encode    L=%-3d H=%-2d hidden=%-2d c=%-4g L=%-6g %s max rel err %.3g"
                      % (L, H, hidden, c, 512.0 * mult, dtype, err))
                assert err < tol, err
                worst[dtype] = max(worst[dtype], err)
            D = 16
            q = (torch.rand(L, H, D) * 2 - 1).float()
            k = (torch.rand(L, H, D) * 2 - 1).float()
            v = torch.zeros(L, H, 1)
            for step in ("prefill", "decode"):
                qq = q if step == "prefill" else q[-1:]
                item = {"scheme": scheme,
                        "q": {"shape": list(qq.shape), "data": qq.flatten().tolist()},
                        "k": {"shape": list(k.shape), "data": k.flatten().tolist()},
                        "v": {"shape": list(v.shape), "data": v.flatten().tolist()},
                        "causal": True, "return": ["logits"]}
                got = tensor_of(peer_server.post(port, "/v1/attention", {"inputs": [item]})["outputs"][0]
                                ["logits"])
                for dtype, tol in ((torch.float64, 2e-5), (torch.float32, 2e-4)):
                    qd = qq.to(dtype).permute(1, 0, 2)
                    kd = k.to(dtype).permute(1, 0, 2)
                    bias = wants[dtype] if step == "prefill" else wants[dtype][:, -1:, :]
                    want = (qd @ kd.transpose(1, 2)).double() / D ** 0.5 + bias
                    Lq = want.shape[1]
                    vv = torch.tril(torch.ones(Lq, L, dtype=torch.bool), diagonal=L - Lq)
                    err = ((got - want).abs() / (1 + want.abs()))[:, vv].max().item()
                    print("fire attention L=%-3d H=%-2d hidden=%-2d %-7s %s max rel err %.3g"
                          % (L, H, hidden, step, dtype, err))
                    assert err < tol, err
                    worst[dtype] = max(worst[dtype], err)
    finally:
        srv.stop(check=True)
    print("worst: float64 peer %.3g, float32 peer %.3g" % (worst[torch.float64],
                                                          worst[torch.float32]))
    print("ok")


if __name__ == "__main__":
    main()
