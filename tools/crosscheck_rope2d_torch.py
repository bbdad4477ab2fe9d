#!/usr/bin/python3
"""crosscheck_rope2d_torch.py - posattnd's rope2d against the peers' own
formulas run in PyTorch (Debian's python3-torch). Optional: make test does
not need torch.

    /usr/bin/python3 tools/crosscheck_rope2d_torch.py [build/posattnd]

Starts posattnd on a free loopback port, asks /v1/attention for q_rot and
k_rot of each case, and compares them with the peers' code transliterated
here (no timm or mistral-inference import):
  - axial: timm timm/layers/pos_embed_sincos.py freq_bands (step=1),
    build_fourier_pos_embed (in_pixels=False, grid_offset, ref_feat_shape,
    grid_indexing 'ij'), build_rotary_pos_embed (repeat_interleave(2)) and
    apply_rot_embed_cat (rot(): neighbours), as EVA-02 calls them, with a
    class token left unrotated as timm's Eva attention does; and with
    in_pixels=True (timm's default): pixel_freq_bands (max_res, both band
    spacings) over the linspace(-1, 1) grid, ref_feat_shape applied;
  - pixtral: mistral-inference src/mistral_inference/rope.py
    precompute_freqs_cis_2d and apply_rotary_emb (complex products of
    neighbouring pairs), indexed by the patches' (row, column);
  - dinov3: facebookresearch/dinov3 RopePositionEmbedding.forward
    (normalize_coords separate / max / min, base periods) and rope_apply
    (rope_rotate_half), prefix tokens left out as its SelfAttention does;
  - mixed: timm RotaryEmbeddingMixed's get_mixed_freqs (per-head learned
    frequencies [2, H, D/2], t_x the row, repeat_interleave(2), rot());
  - Qwen2-VL's vision tower: Hugging Face modeling_qwen2_vl
    VisionRotaryEmbedding, rot_pos_emb's merge-block position ids and
    apply_rotary_pos_emb_vision (rotate_half), one frame.
in float64 and in float32 as the peers run.
"""


import math

import torch

import peer_server


# ---- timm (transliterated) ------------------------------------------------
def freq_bands(num_bands, temperature, dtype):
    exp = torch.arange(0, num_bands, 1, dtype=torch.int64).to(dtype) / num_bands
    return 1.0 / (temperature ** exp)


def build_rotary_pos_embed(feat_shape, dim, temperature, grid_offset, ref_feat_shape, dtype):
    bands = freq_bands(dim // 4, temperature, dtype)
    t = [torch.arange(s, dtype=torch.int64).to(dtype) + grid_offset for s in feat_shape]
    if ref_feat_shape is not None:
        t = [x / f * r for x, f, r in zip(t, feat_shape, ref_feat_shape)]
    grid = torch.stack(torch.meshgrid(t, indexing="ij"), dim=-1).unsqueeze(-1)
    pos = grid * bands
    n = feat_shape[0] * feat_shape[1]
    sin_emb = pos.sin().reshape(n, -1).repeat_interleave(2, -1)
    cos_emb = pos.cos().reshape(n, -1).repeat_interleave(2, -1)
    return sin_emb, cos_emb


def pixel_freq_bands(num_bands, max_freq, linear_bands, dtype):
    if linear_bands:
        bands = torch.linspace(1.0, max_freq / 2, num_bands, dtype=dtype)
    else:
        bands = 2 ** torch.linspace(0, math.log(max_freq, 2) - 1, num_bands, dtype=dtype)
    return bands * torch.pi


def timm_pixels(x, feat_shape, max_res, linear_bands, ref, prefix, dtype):
    """timm build_fourier_pos_embed with in_pixels=True: the 'pixel' grid."""
    L, H, D = x.shape
    bands = pixel_freq_bands(D // 4, float(max_res), linear_bands, dtype)
    t = [torch.linspace(-1.0, 1.0, steps=s, dtype=dtype) for s in feat_shape]
    if ref is not None:
        t = [v / f * r for v, f, r in zip(t, feat_shape, ref)]
    grid = torch.stack(torch.meshgrid(t, indexing="ij"), dim=-1).unsqueeze(-1)
    pos = grid * bands
    n = feat_shape[0] * feat_shape[1]
    sin_emb = pos.sin().reshape(n, -1).repeat_interleave(2, -1)
    cos_emb = pos.cos().reshape(n, -1).repeat_interleave(2, -1)
    body = x[prefix:]
    out = body * cos_emb[:, None, :] + rot(body) * sin_emb[:, None, :]
    return torch.cat([x[:prefix], out], 0)


def rot(x):
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def timm_axial(x, feat_shape, temperature, grid_offset, ref, prefix, dtype):
    """x [L, H, D]: the first `prefix` tokens untouched, as timm's Eva."""
    L, H, D = x.shape
    sin_emb, cos_emb = build_rotary_pos_embed(feat_shape, D, temperature, grid_offset, ref, dtype)
    body = x[prefix:]
    out = body * cos_emb[:, None, :] + rot(body) * sin_emb[:, None, :]
    return torch.cat([x[:prefix], out], 0)


# ---- mistral-inference (transliterated) -----------------------------------
def precompute_freqs_cis_2d(dim, height, width, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2).double() / dim))
    h = torch.arange(height)
    w = torch.arange(width)
    freqs_h = torch.outer(h, freqs[::2]).double()
    freqs_w = torch.outer(w, freqs[1::2]).double()
    freqs_2d = torch.cat([freqs_h[:, None, :].repeat(1, width, 1),
                          freqs_w[None, :, :].repeat(height, 1, 1)], dim=-1)
    return torch.polar(torch.ones_like(freqs_2d), freqs_2d)


def pixtral(x, rows, cols, grid, theta, dtype):
    L, H, D = x.shape
    fc = precompute_freqs_cis_2d(D, grid[0], grid[1], theta)[rows, cols]  # [L, D/2]
    cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
    xc = torch.view_as_complex(x.to(dtype).reshape(L, H, -1, 2).contiguous())
    return torch.view_as_real(xc * fc.to(cdt)[:, None, :]).flatten(2)


# ---- dinov3 (transliterated) ---------------------------------------------
def dinov3(x, H, W, base, normalize, prefix, dtype):
    L, nh, D = x.shape
    periods = base ** (2 * torch.arange(D // 4, dtype=dtype) / (D // 2))
    if normalize == "max":
        dh = dw = max(H, W)
    elif normalize == "min":
        dh = dw = min(H, W)
    else:
        dh, dw = H, W
    coords_h = torch.arange(0.5, H, dtype=dtype) / dh
    coords_w = torch.arange(0.5, W, dtype=dtype) / dw
    coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1).flatten(0, 1)
    coords = 2.0 * coords - 1.0
    angles = (2 * torch.pi * coords[:, :, None] / periods[None, None, :]).flatten(1, 2).tile(2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    body = x[prefix:]
    x1, x2 = body.chunk(2, dim=-1)
    out = body * cos[:, None, :] + torch.cat([-x2, x1], dim=-1) * sin[:, None, :]
    return torch.cat([x[:prefix], out], 0)


# ---- Hugging Face Qwen2-VL vision (transliterated) ------------------------
def qwen2vl_vision(x, h, w, m, theta, dtype):
    L, nh, D = x.shape
    dim = D // 2  # VisionRotaryEmbedding(head_dim // 2)
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=dtype) / dim))
    hpos = torch.arange(h).unsqueeze(1).expand(-1, w)
    hpos = hpos.reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
    wpos = torch.arange(w).unsqueeze(0).expand(h, -1)
    wpos = wpos.reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
    pos_ids = torch.stack([hpos, wpos], dim=-1)
    full = torch.outer(torch.arange(max(h, w), dtype=dtype), inv_freq)
    freqs = full[pos_ids].flatten(1)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos[:, None, :] + torch.cat((-x2, x1), dim=-1) * sin[:, None, :]


# ---- timm RoPE-Mixed (transliterated) ------------------------------------
def timm_mixed(x, H_grid, W_grid, freqs, dtype):
    """x [L, H, D]; freqs [2, H, D/2] (one depth of init_random_2d_freqs)."""
    x_pos, y_pos = torch.meshgrid(torch.arange(H_grid, dtype=torch.float32),
                                  torch.arange(W_grid, dtype=torch.float32), indexing="ij")
    t_x, t_y = x_pos.to(dtype).flatten(), y_pos.to(dtype).flatten()
    f = freqs.to(dtype)
    freqs_x = t_x.unsqueeze(-1) @ f[0].unsqueeze(-2)  # [H, N, D/2]
    freqs_y = t_y.unsqueeze(-1) @ f[1].unsqueeze(-2)
    combined = freqs_x + freqs_y
    sin_emb = torch.sin(combined).repeat_interleave(2, -1)  # [H, N, D]
    cos_emb = torch.cos(combined).repeat_interleave(2, -1)
    xh = x.permute(1, 0, 2)  # [H, N, D]
    out = xh * cos_emb + rot(xh) * sin_emb
    return out.permute(1, 0, 2)


def main():
    srv = peer_server.start()
    port = srv.port
    try:
        g = torch.Generator().manual_seed(5)
        cases = (
            ("axial", (4, 6), 64, 10000.0, 0.0, None, 1),
            ("axial", (3, 5), 32, 100.0, 0.5, (8, 8), 0),
            ("axial", (7, 7), 16, 10000.0, 0.0, (16, 16), 1),
            ("pixels", (4, 6), 32, 224.0, False, None, 1),
            ("pixels", (5, 3), 16, 64.0, True, (10, 6), 0),
            ("pixtral", (5, 4), 64, 10000.0, 0.0, None, 0),
            ("pixtral", (3, 9), 16, 100.0, 0.0, None, 0),
            ("dinov3", (4, 6), 64, 100.0, "separate", None, 1),
            ("dinov3", (3, 5), 32, 100.0, "max", None, 5),
            ("dinov3", (6, 2), 16, 100.0, "min", None, 0),
            ("qwen2vl", (4, 6), 64, 10000.0, 2, None, 0),
            ("qwen2vl", (6, 6), 32, 10000.0, 3, None, 0),
            ("mixed", (4, 5), 32, 10000.0, 0, None, 0),
            ("mixed", (3, 3), 16, 10000.0, 0, None, 0),
        )
        for variant, grid, D, base, off, ref, prefix in cases:
            L, H = grid[0] * grid[1] + prefix, 2
            q = torch.rand(L, H, D, generator=g, dtype=torch.float64) * 2 - 1
            q32 = q.float()
            scheme = {"type": "rope2d", "variant": variant, "base": base, "grid": list(grid),
                      "prefix_tokens": prefix}
            if variant == "dinov3":
                scheme["normalize"] = off
            if variant == "mixed":  # timm init_random_2d_freqs's scale: 10^(-4k/D), rotated
                mfreqs = torch.rand(2, H, D // 2, generator=g, dtype=torch.float64) - 0.5
                scheme["freqs"] = {"shape": [2, H, D // 2],
                                   "data": mfreqs.float().flatten().tolist()}
            if variant == "qwen2vl":  # axial's frequencies, halves paired, merge order
                scheme.update(variant="axial", layout="neox", merge_size=off)
            elif variant == "pixels":  # timm in_pixels: max_res in base's column
                scheme.update(variant="axial", in_pixels=True, max_res=base, linear_bands=off)
                del scheme["base"]
                if ref is not None:
                    scheme["ref_grid"] = list(ref)
            elif variant == "axial":
                scheme["grid_offset"] = off
                if ref is not None:
                    scheme["ref_grid"] = list(ref)
            v = torch.zeros(L, H, 1)
            item = {"scheme": scheme,
                    "q": {"shape": [L, H, D], "data": q32.flatten().tolist()},
                    "k": {"shape": [L, H, D], "data": q32.flatten().tolist()},
                    "v": {"shape": [L, H, 1], "data": v.flatten().tolist()},
                    "return": ["q_rot"]}
            ans = peer_server.post(port, "/v1/attention", {"inputs": [item]})["outputs"][0]
            got = torch.tensor(ans["q_rot"]["data"], dtype=torch.float64).reshape(L, H, D)
            # float32 angles of the pixel bands reach pi * max_res / 2 (352 rad
            # at 224), where float32's spacing is 3e-5: the peer's own rounding.
            f32_tol = 2e-4 if variant == "pixels" else 2e-5
            for dtype, tol in ((torch.float64, 2e-6), (torch.float32, f32_tol)):
                x = q32.to(dtype)
                if variant == "mixed":
                    want = timm_mixed(x, grid[0], grid[1], mfreqs.float(), dtype)
                elif variant == "dinov3":
                    want = dinov3(x, grid[0], grid[1], base, off, prefix, dtype)
                elif variant == "qwen2vl":
                    want = qwen2vl_vision(x, grid[0], grid[1], off, base, dtype)
                elif variant == "pixels":
                    want = timm_pixels(x, grid, base, off, ref, prefix, dtype)
                elif variant == "axial":
                    want = timm_axial(x, grid, base, off, ref, prefix, dtype)
                else:
                    t = torch.arange(L)
                    want = pixtral(x, t // grid[1], t % grid[1], grid, base, dtype)
                err = (got - want.double()).abs().max().item()
                print("rope2d %-7s grid %-7s D=%-2d base %-6g option %-8s ref %-8s prefix %d "
                      "%s max abs err %.3g" % (variant, "%dx%d" % grid, D, base, off, ref, prefix,
                                               dtype, err))
                assert err < tol, err
    finally:
        srv.stop(check=True)
    print("ok")


if __name__ == "__main__":
    main()
