#!/usr/bin/python3
"""test_python_client.py - the Python client (clients/python, module posattn)
against real posattnd servers.

    POSATTND=build/posattnd tests/e2e/harness.sh \
        /usr/bin/python3 tests/clients/test_python_client.py
    make client-python                                   # the same, via clients/python.mk

harness.sh starts the servers and exports POSATTN_URL (default flags) and
POSATTN_AUTH_URL with key POSATTN_AUTH_KEY (--max-body-mb 1). This file also
starts its own posattnd ($POSATTND, default build/posattnd) twice on
127.0.0.1 --port 0: over HTTPS with a private CA and server certificate made
with openssl in a temporary folder (as tests/e2e/tls.py does), and with
named tensors (--tensor, from .npy files written here) on one worker with a
queue of one, for {"ref"} inputs and a 503 OVERLOADED with Retry-After.

Checks: outputs of several schemes (none, causal, GQA, ALiBi, RoPE with its
parameters) against a float64 NumPy reference, softmax(q k^T / sqrt(D)) v,
tolerance |got - want| <= 1e-5 + 1e-4 |want|; returned weights, logits and
entropy; base64 round trips bit for bit (odd sizes, subnormals, -0); f16 and
bf16 answers; the same with nested lists and no NumPy; every error class
(400 with its field, unknown scheme, missing v, unknown field, unknown ref,
404, 413 over the body limit, 401 without or with a wrong key, 503, a batch
with some or all items failed, connection refused, a client timeout, TLS
verification; a stand-in HTTP server gives the answers hard to reach on
demand: every item of a batch failed with their status, 503 DRAINING, a
proxy's 502), wire dicts ({"shape", "dtype": "bf16", "b64"}) as inputs,
and the examples of clients/python/README.md as written (its install
commands: tests/clients/test_python_install.py). NumPy is needed here (the
reference), not by the client.
"""

import base64
import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CLIENT_SRC = os.path.join(ROOT, "clients", "python")
sys.path.insert(0, CLIENT_SRC)  # the source tree; test_python_install.py checks installed copies
sys.path.insert(0, os.path.join(ROOT, "tests"))  # tests/posattnd.py starts the private servers

import posattn  # noqa: E402
import posattnd  # noqa: E402

URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")
AUTH_URL = os.environ.get("POSATTN_AUTH_URL", "").rstrip("/")
AUTH_KEY = os.environ.get("POSATTN_AUTH_KEY", "")
POSATTND = os.environ.get("POSATTND", os.path.join(ROOT, "build", "posattnd"))
ATOL, RTOL = 1e-5, 1e-4


# ------------------------------------------------------------ the reference
def alibi_slopes(H, max_bias=8.0):
    """Press et al.'s slopes for any head count (the library's formula)."""
    n = 2 ** int(np.floor(np.log2(H)))
    return np.array([2.0 ** (-max_bias * (h + 1) / n) if h < n
                     else 2.0 ** (-max_bias * (2 * (h - n) + 1) / (2 * n)) for h in range(H)])


def rope_neox(x, pos, base=10000.0, rotary_dim=0):
    """Hugging Face's apply_rotary_pos_emb (rotate_half) on x [L, H, D] at
    positions pos [L], on the first rotary_dim dims (0 = all)."""
    x = x.astype(np.float64)
    r = rotary_dim or x.shape[-1]
    half = r // 2
    inv_freq = 1.0 / base ** (np.arange(0, r, 2, dtype=np.float64) / r)
    ang = np.asarray(pos, np.float64)[:, None] * inv_freq[None, :]        # [L, r/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    x1, x2 = x[..., :half], x[..., half:r]
    out[..., :half] = x1 * cos - x2 * sin
    out[..., half:r] = x2 * cos + x1 * sin
    return out


def reference(q, k, v, causal=False, slopes=None, window=0, scale=None):
    """softmax(q k^T * scale + alibi, masked) v in float64. q [Lq, H, D],
    k [Lk, Hkv, D], v [Lk, Hkv, Dv]; positions q: Lk-Lq+i, k: j (causal
    masking bottom-right aligned). Returns out [Lq, H, Dv], weights and
    logits [H, Lq, Lk] (masked logits -inf)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    Lq, H, D = q.shape
    Lk, Hkv, _ = k.shape
    group = H // Hkv
    kh = np.repeat(np.arange(Hkv), group)                  # query head -> kv head
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    logits = np.einsum("ihd,jhd->hij", q, k[:, kh, :]) * scale
    qpos = (Lk - Lq + np.arange(Lq))[:, None]
    kpos = np.arange(Lk)[None, :]
    if slopes is not None:
        logits -= slopes[:, None, None] * (qpos - kpos)[None]
    visible = np.ones((Lq, Lk), bool)
    if causal:
        visible &= kpos <= qpos
    if window:
        visible &= (qpos - kpos < window) & (causal | (kpos - qpos < window))
    logits = np.where(visible[None], logits, -np.inf)
    m = logits.max(axis=-1, keepdims=True)
    w = np.exp(logits - m)
    w /= w.sum(axis=-1, keepdims=True)
    out = np.einsum("hij,jhd->ihd", w, v[:, kh, :])
    return out, w, logits


def rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Case(unittest.TestCase):
    def setUp(self):
        self.c = posattn.Client(URL)

    def assertClose(self, got, want, what="output"):
        self.assertIsInstance(got, np.ndarray)
        self.assertEqual(got.dtype, np.float32, what)
        self.assertEqual(got.shape, want.shape, what)
        err = np.abs(got.astype(np.float64) - want)
        bound = ATOL + RTOL * np.abs(want)
        self.assertTrue(np.all(err <= bound), "%s: max |error| %.3g" % (what, err.max()))

    def assertError(self, e, code, status, field=None, item=None):
        self.assertIsInstance(e, posattn.Error)
        self.assertEqual((e.code, e.status, e.item), (code, status, item), repr(e))
        if field is not None:
            self.assertEqual(e.field, field, repr(e))
        self.assertTrue(e.message, repr(e))


# ------------------------------------------------------------ numerics
class Numerics(Case):
    def test_schemes_against_reference(self):
        rng = np.random.default_rng(1)
        cases = [  # (name, Lq, Lk, H, Hkv, D, Dv, scheme, options, reference kwargs)
            ("none", 5, 5, 2, 2, 8, 8, "none", {}, {}),
            ("none causal Lq<Lk", 3, 7, 2, 2, 4, 6, "none", {"causal": True}, {"causal": True}),
            ("gqa 4/2 causal", 6, 6, 4, 2, 8, 8, "none", {"causal": True}, {"causal": True}),
            ("window 2", 6, 6, 2, 1, 4, 4, "none", {"window": 2, "causal": True},
             {"window": 2, "causal": True}),
            ("scale", 4, 4, 1, 1, 4, 4, "none", {"scale": 0.25}, {"scale": 0.25}),
            ("alibi causal", 6, 6, 4, 4, 8, 8, "alibi", {"causal": True},
             {"causal": True, "slopes": alibi_slopes(4)}),
            ("alibi 3 heads", 5, 5, 3, 3, 4, 4, "alibi", {"causal": True},
             {"causal": True, "slopes": alibi_slopes(3)}),
        ]
        for name, Lq, Lk, H, Hkv, D, Dv, scheme, opts, ref in cases:
            with self.subTest(name):
                q, k, v = rand(rng, Lq, H, D), rand(rng, Lk, Hkv, D), rand(rng, Lk, Hkv, Dv)
                got = self.c.attention(q, k, v, scheme=scheme, **opts)
                self.assertClose(got, reference(q, k, v, **ref)[0], name)

    def test_rope_against_reference(self):
        rng = np.random.default_rng(2)
        for name, scheme, base, rdim in [("rope", "rope", 10000.0, 0),
                                         ("rope base 500", {"type": "rope", "base": 500}, 500.0, 0),
                                         ("partial rotary", {"type": "rope", "rotary_dim": 4},
                                          10000.0, 4)]:
            with self.subTest(name):
                Lq, Lk, H, D = 4, 6, 2, 8
                q, k, v = rand(rng, Lq, H, D), rand(rng, Lk, H, D), rand(rng, Lk, H, D)
                qr = rope_neox(q, np.arange(Lk - Lq, Lk), base, rdim)
                kr = rope_neox(k, np.arange(Lk), base, rdim)
                got = self.c.attention(q, k, v, scheme=scheme, causal=True,
                                       returns=["output", "q_rot"])
                self.assertClose(got["q_rot"], qr, name + " q_rot")
                self.assertClose(got["output"], reference(qr, kr, v, causal=True)[0], name)
                # A rotation changes the answer: not the same as none.
                plain = self.c.attention(q, k, v, causal=True)
                self.assertGreater(np.abs(plain - got["output"]).max(), 1e-3)

    def test_diagnostics(self):
        rng = np.random.default_rng(3)
        q, k, v = rand(rng, 5, 2, 4), rand(rng, 5, 2, 4), rand(rng, 5, 2, 4)
        got = self.c.attention(q, k, v, scheme="none", causal=True, num_heads=2, num_kv_heads=2,
                               returns=("output", "weights", "logits", "entropy"))
        self.assertEqual(set(got), {"output", "weights", "logits", "entropy", "timing"})
        out, w, logits = reference(q, k, v, causal=True)
        self.assertClose(got["output"], out)
        self.assertClose(got["weights"], w, "weights")
        self.assertTrue(np.array_equal(np.isinf(got["logits"]), np.isinf(logits)))  # masked
        self.assertTrue(np.all(got["logits"][np.isinf(logits)] == -np.inf))
        finite = np.isfinite(logits)
        self.assertClose(np.where(finite, got["logits"], 0), np.where(finite, logits, 0), "logits")
        ent = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0), axis=-1)
        self.assertClose(got["entropy"], ent, "entropy")
        self.assertIn("compute_us", got["timing"])
        # Row 0 sees only key 0: its entropy is 0 and its output v[0].
        self.assertTrue(np.all(got["entropy"][:, 0] == 0))

    def test_mask_as_bool_array(self):
        rng = np.random.default_rng(4)
        q, k, v = rand(rng, 4, 1, 4), rand(rng, 4, 1, 4), rand(rng, 4, 1, 4)
        mask = np.tril(np.ones((4, 4), bool))
        self.assertClose(self.c.attention(q, k, v, mask=mask),
                         reference(q, k, v, causal=True)[0], "mask")

    def test_b64_round_trip_odd_sizes(self):
        """q_rot of scheme none is q as sent: base64 there and back, bit for bit,
        for every padding length (1, 2, 3, 5, 7, 15 floats) and odd values."""
        odd = np.array([-0.0, 1e-40, 3.4e38, -1.4e-45, 1.17549435e-38, 0.1, -7.25, 1 / 3,
                        -65504.0, 2.0 ** -126, 123456.789, -1e-7, 1.0, np.pi, -np.e], np.float32)
        lists = posattn.Client(URL, numpy=False)
        for shape in [(1, 1, 1), (2, 1, 1), (1, 1, 3), (5, 1, 1), (1, 7, 1), (3, 1, 5)]:
            with self.subTest(shape=shape):
                n = int(np.prod(shape))
                q = odd[:n].reshape(shape)
                z = np.zeros((shape[0], shape[1], shape[2]), np.float32)
                got = self.c.attention(q, z, z, returns=["q_rot", "output"])
                self.assertEqual(got["q_rot"].shape, shape)
                self.assertEqual(got["q_rot"].tobytes(), q.tobytes())
                self.assertEqual(got["output"].tobytes(), z.tobytes())
                # The same without NumPy: a posattn.Tensor in and out.
                t = posattn.Tensor(q.ravel().tolist(), shape)
                zt = posattn.Tensor([0.0] * n, shape)
                back = lists.attention(t, zt, zt, returns=["q_rot"])["q_rot"]
                self.assertIsInstance(back, posattn.Tensor)
                self.assertEqual(back.shape, shape)
                self.assertEqual(struct.pack("<%df" % n, *back.data), q.tobytes())

    def test_lists_without_numpy(self):
        """numpy=False: nested lists in, posattn.Tensor out, the same numbers."""
        rng = np.random.default_rng(5)
        q, k, v = rand(rng, 3, 2, 4), rand(rng, 3, 2, 4), rand(rng, 3, 2, 4)
        lists = posattn.Client(URL, numpy=False)
        got = lists.attention(q.tolist(), k.tolist(), v.tolist(), scheme="alibi", causal=True)
        self.assertIsInstance(got, posattn.Tensor)
        self.assertEqual(got.shape, (3, 2, 4))
        self.assertEqual(len(got.data), 24)
        want = self.c.attention(q, k, v, scheme="alibi", causal=True)
        self.assertEqual(np.array(got.tolist(), np.float32).tobytes(), want.tobytes())
        # The README's curl example: [[1, 0]], [[0, 0]] -> [1, 2], [2, 3].
        out = lists.attention([[[1, 0]], [[0, 0]]], [[[1, 0]], [[0, 1]]], [[[1, 2]], [[3, 4]]],
                              scheme={"type": "rope", "base": 10000}, causal=True)
        self.assertEqual(out.tolist(), [[[1, 2]], [[2, 3]]])
        with self.assertRaises(ValueError):
            lists.attention([[[1, 0]], [[0]]], [[[1, 0]]], [[[1, 0]]])  # ragged

    def test_half_precision_answers(self):
        rng = np.random.default_rng(6)
        q, k, v = rand(rng, 4, 2, 8), rand(rng, 4, 2, 8), rand(rng, 4, 2, 8)
        full = self.c.attention(q, k, v, causal=True)
        f16 = self.c.attention(q, k, v, causal=True, output_dtype="f16")
        self.assertEqual(f16.dtype, np.float32)
        self.assertEqual(f16.tobytes(), full.astype(np.float16).astype(np.float32).tobytes())
        # bf16: the top half of the float32, rounded to nearest even.
        u = full.view(np.uint32).astype(np.uint64)
        bf = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
        got = self.c.attention_batch([dict(q=q, k=k, v=v, causal=True)], output_dtype="bf16")[0]
        self.assertEqual(got.tobytes(), bf.tobytes())
        lists = posattn.Client(URL, numpy=False)
        t = lists.attention(q, k, v, causal=True, output_dtype="bf16")
        self.assertEqual(np.array(t.data, np.float32).tobytes(), bf.ravel().tobytes())
        t = lists.attention(q, k, v, causal=True, output_dtype="f16")
        self.assertEqual(np.array(t.data, np.float32).tobytes(), f16.ravel().tobytes())

    def test_wire_dicts_as_inputs(self):
        """{"shape", "dtype": "bf16"|"f16", "b64"} and {"shape", "data"} dicts
        are sent unchanged: the answer is attention over the values rounded
        to that type (the bf16 bits are made with struct, as without NumPy)."""
        rng = np.random.default_rng(8)
        q, k, v = rand(rng, 3, 2, 4), rand(rng, 3, 1, 4), rand(rng, 3, 1, 4)

        def bf16(a):
            bits = [struct.unpack("<I", struct.pack("<f", x))[0] for x in a.ravel().tolist()]
            half = [(u + 0x7FFF + ((u >> 16) & 1)) >> 16 for u in bits]
            wire = {"shape": list(a.shape), "dtype": "bf16",
                    "b64": base64.b64encode(struct.pack("<%dH" % len(half), *half)).decode()}
            return wire, (np.array(half, np.uint32) << 16).view(np.float32).reshape(a.shape)

        def f16(a):
            h = a.astype("<f2")
            return {"shape": list(a.shape), "dtype": "f16",
                    "b64": base64.b64encode(h.tobytes()).decode()}, h.astype(np.float32)

        for name, conv in (("bf16", bf16), ("f16", f16)):
            (qw, qr), (kw, kr), (vw, vr) = conv(q), conv(k), conv(v)
            self.assertFalse(np.array_equal(qr, q), name)  # the rounding is visible
            for c in (self.c, posattn.Client(URL, numpy=False)):
                got = c.attention(qw, kw, vw, causal=True)
                got = got if isinstance(got, np.ndarray) else np.array(got.tolist(), np.float32)
                self.assertClose(got, reference(qr, kr, vr, causal=True)[0], name)
        data = {"shape": [3, 1, 4], "data": v.ravel().tolist()}
        self.assertClose(self.c.attention(q, k, data), reference(q, k, v)[0], "data dict")

    def test_batch_of_sequences(self):
        """q [B, L, H, D] with key_length per sequence: sequence b equals its own call."""
        rng = np.random.default_rng(7)
        q, k, v = rand(rng, 2, 4, 2, 4), rand(rng, 2, 4, 2, 4), rand(rng, 2, 4, 2, 4)
        got = self.c.attention(q, k, v, key_length=[4, 2])
        self.assertEqual(got.shape, (2, 4, 2, 4))
        self.assertClose(got[0], reference(q[0], k[0], v[0])[0])
        # Padding keys 2, 3 hidden: every query of sequence 1 sees keys 0, 1 only.
        want1 = reference(q[1], k[1, :2], v[1, :2])[0]
        self.assertClose(got[1], want1)


# ------------------------------------------------------------ other endpoints
class Endpoints(Case):
    def test_health_schemes_tensors(self):
        self.assertEqual(self.c.health(), {"status": "ok"})
        names = [s["name"] for s in self.c.schemes()["schemes"]]
        for name in ("none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"):
            self.assertIn(name, names)
        self.assertEqual(self.c.tensors(), [])

    def test_encode(self):
        ans = self.c.encode("alibi", num_heads=8, q_length=3, k_length=3)
        self.assertEqual(ans["scheme"], "alibi")
        self.assertEqual(ans["slopes"].tolist(), [2.0 ** -i for i in range(1, 9)])
        self.assertEqual(ans["bias"].shape, (8, 3, 3))
        self.assertClose(ans["bias"][:, 2, 0], -2 * alibi_slopes(8), "bias")
        grid = self.c.encode({"type": "t5"}, q_length=3, k_length=3)["buckets"]
        self.assertEqual((grid.dtype, grid.shape), (np.int32, (3, 3)))
        self.assertEqual(np.diag(grid).tolist(), [0, 0, 0])
        sin = self.c.encode("sinusoidal", length=4, dim=6)["encoding"]
        pos, i = np.arange(4)[:, None], np.arange(3)[None, :]
        ang = pos / 10000.0 ** (2 * i / 6)
        want = np.stack([np.sin(ang), np.cos(ang)], axis=-1).reshape(4, 6)  # interleaved
        self.assertClose(sin, want, "sinusoidal")

    def test_analyze(self):
        ans = self.c.analyze("rope_offset", {"type": "rope"}, q=np.array([1, 0, 0, 1], np.float32),
                             k=[0.0, 1.0, 1.0, 0.0])
        self.assertEqual(ans["score"].shape, (33,))
        self.assertLess(float(ans["spread"].max()), 1e-5)
        rng = np.random.default_rng(8)
        x = rand(rng, 5, 1, 4)
        perm = self.c.analyze("permutation", "none", q=x, k=x, v=x)
        self.assertLess(perm["max_abs_diff"], 1e-5)  # NoPE without a mask is order-blind
        perm = self.c.analyze("permutation", "rope", q=x, k=x, v=x)
        self.assertGreater(perm["max_abs_diff"], 1e-4)


# ------------------------------------------------------------ errors
class Errors(Case):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(9)
        self.q, self.k, self.v = rand(rng, 3, 2, 4), rand(rng, 3, 2, 4), rand(rng, 3, 2, 4)

    def test_bad_shape(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.attention(self.q, self.k[:, :, :3], self.v)
        self.assertError(cm.exception, "SHAPE_MISMATCH", 400, "inputs[0].k.shape")
        self.assertIn("inputs[0].k.shape", str(cm.exception))
        self.assertNotIsInstance(cm.exception, posattn.TransportError)

    def test_unknown_scheme(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.attention(self.q, self.k, self.v, scheme="bogus")
        self.assertError(cm.exception, "INVALID_ARGUMENT", 400, "inputs[0].scheme.type")

    def test_missing_v(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.attention(self.q, self.k, None)
        self.assertError(cm.exception, "INVALID_ARGUMENT", 400, "inputs[0].v")

    def test_unknown_field_and_route(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.attention(self.q, self.k, self.v, bogus=1)
        self.assertError(cm.exception, "UNKNOWN_FIELD", 400)
        with self.assertRaises(posattn.Error) as cm:
            self.c.call("GET", "/v1/nope")
        self.assertError(cm.exception, "NOT_FOUND", 404)
        with self.assertRaises(posattn.Error) as cm:
            self.c.encode("alibi")
        self.assertError(cm.exception, "INVALID_ARGUMENT", 400, "num_heads")

    def test_unknown_ref(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.attention(self.q, posattn.Ref("no_such_tensor"), self.v)
        self.assertError(cm.exception, "UNKNOWN_TENSOR", 400, "inputs[0].k.ref")
        self.assertIn("no_such_tensor", cm.exception.message)
        with self.assertRaises(posattn.Error) as cm:
            self.c.encode({"type": "learned", "table": posattn.Ref("gpt2_wpe")}, length=2)
        self.assertError(cm.exception, "UNKNOWN_TENSOR", 400, "scheme.table.ref")

    def test_batch_partial_failure(self):
        q, k, v = self.q, self.k, self.v
        res = self.c.attention_batch([
            dict(q=q, k=k, v=v, causal=True),
            dict(q=q, k=k[:, :1, :3], v=v),                 # bad shape
            dict(q=q, k=k, v=v, scheme="bogus"),
            dict(q=q, k=k),                                  # no v
            dict(q=q, k=k, v=v, scheme="alibi", returns=["output", "entropy"]),
        ])
        self.assertEqual(len(res), 5)
        self.assertClose(res[0], reference(q, k, v, causal=True)[0])
        self.assertError(res[1], "SHAPE_MISMATCH", 400, "inputs[1].k.shape", item=1)
        self.assertError(res[2], "INVALID_ARGUMENT", 400, "inputs[2].scheme.type", item=2)
        self.assertError(res[3], "INVALID_ARGUMENT", 400, "inputs[3].v", item=3)
        self.assertClose(res[4]["output"], reference(q, k, v, slopes=alibi_slopes(2))[0])
        self.assertEqual(res[4]["entropy"].shape, (2, 3))

    def test_batch_all_failed(self):
        """Every item failed (HTTP 200 with errors:true before, the items'
        status now): a list of errors either way, not an exception."""
        res = self.c.attention_batch([dict(q=self.q, k=self.k),
                                      dict(q=self.q, k=posattn.Ref("nope"), v=self.v)])
        self.assertError(res[0], "INVALID_ARGUMENT", 400, "inputs[0].v", item=0)
        self.assertError(res[1], "UNKNOWN_TENSOR", 400, "inputs[1].k.ref", item=1)
        self.assertEqual(str(res[1]).split(":")[0], "item 1")

    def test_whole_request_error_is_raised(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.attention_batch([])  # inputs must not be empty
        self.assertError(cm.exception, "INVALID_ARGUMENT", 400, "inputs")

    @unittest.skipUnless(AUTH_URL, "POSATTN_AUTH_URL not set (run under harness.sh)")
    def test_401(self):
        for key in (None, "wrong-" + AUTH_KEY):
            with self.subTest(key=key), mock.patch.dict(os.environ, {}, clear=False):
                os.environ.pop("POSATTN_API_KEY", None)
                with self.assertRaises(posattn.Error) as cm:
                    posattn.Client(AUTH_URL, api_key=key).attention(self.q, self.k, self.v)
                self.assertError(cm.exception, "UNAUTHORIZED", 401)
        with mock.patch.dict(os.environ, {"POSATTN_API_KEY": AUTH_KEY}):  # the key from the env
            out = posattn.Client(AUTH_URL).attention(self.q, self.k, self.v)
        self.assertClose(out, reference(self.q, self.k, self.v)[0])
        # A large body without a key: 401 too (answered before the body is read).
        big = np.zeros((512, 8, 64), np.float32)
        with self.assertRaises(posattn.Error) as cm:
            posattn.Client(AUTH_URL, api_key="").attention(big, big, big)
        self.assertError(cm.exception, "UNAUTHORIZED", 401)

    @unittest.skipUnless(AUTH_URL, "POSATTN_AUTH_URL not set (run under harness.sh)")
    def test_413_over_body_limit(self):
        """The AUTH server takes 1 MB: just over it, and 33.6 MB (the server
        answers before the body is in and closes; the answer is still read)."""
        c = posattn.Client(AUTH_URL, api_key=AUTH_KEY)
        for L in (200, 4096):  # 1.6 MB and 33.6 MB of base64
            with self.subTest(L=L):
                big = np.ones((L, 8, 64), np.float32)
                with self.assertRaises(posattn.Error) as cm:
                    c.attention(big, big, big)
                self.assertError(cm.exception, "PAYLOAD_TOO_LARGE", 413)
                self.assertIn("1048576", cm.exception.message)
        small = c.attention(self.q, self.k, self.v)  # the connection state is per call
        self.assertEqual(small.shape, (3, 2, 4))

    def test_connection_refused(self):
        c = posattn.Client("http://127.0.0.1:%d" % free_port(), timeout=5)
        with self.assertRaises(posattn.TransportError) as cm:
            c.health()
        e = cm.exception
        self.assertIsInstance(e, posattn.Error)
        self.assertEqual((e.code, e.status), ("CONNECTION_REFUSED", None))
        self.assertIsInstance(e.__cause__, ConnectionRefusedError)
        self.assertIn("refused", str(e))

    def test_client_timeout(self):
        with socket.socket() as s:  # listens, never answers
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            c = posattn.Client("http://127.0.0.1:%d" % s.getsockname()[1], timeout=0.5)
            t0 = time.monotonic()
            with self.assertRaises(posattn.TransportError) as cm:
                c.health()
            self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(cm.exception.code, "CLIENT_TIMEOUT")

    def test_local_argument_errors(self):
        with self.assertRaises(TypeError):
            self.c.attention(self.q, self.k, "not a tensor")
        with self.assertRaises(ValueError):
            posattn.Client("ftp://127.0.0.1")
        with self.assertRaises(ValueError):
            posattn.Tensor([1.0, 2.0], (3,))


# ------------------------------------------------------------ private servers
def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d):
    """ca.crt, srv.crt/srv.key for 127.0.0.1 (CN and IP SAN), as tests/e2e/tls.py."""
    p = lambda n: os.path.join(d, n)  # noqa: E731
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.crt"), "-days", "2",
            "-subj", "/CN=posattn client test CA")
    openssl("req", *ec, "-keyout", p("srv.key"), "-out", p("srv.csr"), "-subj", "/CN=127.0.0.1")
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", p("srv.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
            "-CAcreateserial", "-out", p("srv.crt"), "-days", "1", "-extfile", p("ext.cnf"))


@unittest.skipUnless(shutil.which("openssl"), "openssl is not installed")
class Https(Case):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        make_pki(cls.tmp.name)
        cls.ca = os.path.join(cls.tmp.name, "ca.crt")
        cls.srv = posattnd.start(POSATTND, [
            "--workers", "1", "--api-key", "tls-key",
            "--tls-cert", os.path.join(cls.tmp.name, "srv.crt"),
            "--tls-key", os.path.join(cls.tmp.name, "srv.key")])
        cls.url = cls.srv.url

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.stop(check=True)
        finally:
            cls.tmp.cleanup()

    def test_with_cafile(self):
        self.assertTrue(self.url.startswith("https://127.0.0.1:"), self.url)
        c = posattn.Client(self.url, api_key="tls-key", cafile=self.ca)
        self.assertEqual(c.health(), {"status": "ok"})
        rng = np.random.default_rng(10)
        q, k, v = rand(rng, 4, 2, 8), rand(rng, 4, 2, 8), rand(rng, 4, 2, 8)
        self.assertClose(c.attention(q, k, v, causal=True), reference(q, k, v, causal=True)[0])
        with self.assertRaises(posattn.Error) as cm:  # TLS, then the key
            posattn.Client(self.url, api_key="wrong", cafile=self.ca).schemes()
        self.assertError(cm.exception, "UNAUTHORIZED", 401)

    def test_cafile_from_env(self):
        with mock.patch.dict(os.environ, {"POSATTN_CACERT": self.ca, "POSATTN_API_KEY": "tls-key"}):
            c = posattn.Client(self.url)
        self.assertEqual(c.cafile, self.ca)
        self.assertIn("schemes", c.schemes())

    def test_verification_fails_without_cafile(self):
        with mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("POSATTN_CACERT", None)
            c = posattn.Client(self.url, api_key="tls-key")
        with self.assertRaises(posattn.TransportError) as cm:
            c.health()
        e = cm.exception
        self.assertEqual((e.code, e.status), ("TLS_VERIFICATION_FAILED", None))
        self.assertIsInstance(e.__cause__, __import__("ssl").SSLCertVerificationError)
        self.assertIn("cafile", str(e))

    def test_plain_http_to_tls_port(self):
        c = posattn.Client(self.url.replace("https://", "http://"), timeout=5)
        with self.assertRaises(posattn.TransportError):
            c.health()


class NamedTensorsAndOverload(Case):
    """A server with --tensor (.npy written here) on one worker, queue of one."""
    L, H, D = 1024, 8, 64

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(11)
        cls.arrays = {name: rand(rng, cls.L, cls.H, cls.D) for name in ("q", "k", "v")}
        args = ["--workers", "1", "--queue-depth", "1"]
        for name, a in cls.arrays.items():
            path = os.path.join(cls.tmp.name, name + ".npy")
            np.save(path, a)
            args += ["--tensor", "big_%s=%s" % (name, path)]
        cls.srv = posattnd.start(POSATTND, args)
        cls.url = cls.srv.url

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.stop(check=True)
        finally:
            cls.tmp.cleanup()

    def test_refs(self):
        c = posattn.Client(self.url)
        self.assertEqual([t["name"] for t in c.tensors()], ["big_q", "big_k", "big_v"])
        a = self.arrays
        sl = slice(0, 8)  # a small inline q against the loaded k and v
        by_ref = c.attention(a["q"][sl], posattn.Ref("big_k"), posattn.Ref("big_v"))
        inline = c.attention(a["q"][sl], a["k"], a["v"])
        self.assertEqual(by_ref.tobytes(), inline.tobytes())  # bit for bit, as the README says
        self.assertClose(by_ref, reference(a["q"][sl], a["k"], a["v"])[0])
        with self.assertRaises(posattn.Error) as cm:
            c.attention(a["q"][sl], posattn.Ref("big_x"), posattn.Ref("big_v"))
        self.assertError(cm.exception, "UNKNOWN_TENSOR", 400, "inputs[0].k.ref")
        self.assertIn("big_k", cm.exception.message)  # lists the loaded names

    def queue_depth(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("posattn_queue_depth "):
                    return float(line.split()[1])
        return 0.0

    def test_503_with_retry_after(self):
        """One worker busy with a batch of 8 large items (by ref: a tiny
        body), a queue of one: a second batch is refused at once."""
        c = posattn.Client(self.url, timeout=120)
        ref = {n: posattn.Ref("big_" + n) for n in ("q", "k", "v")}
        busy = {}

        def occupy():
            try:
                busy["result"] = c.attention_batch([dict(ref, causal=True)] * 8)
            except Exception as e:  # noqa: BLE001 - reported below
                busy["result"] = e
        t = threading.Thread(target=occupy)
        t.start()
        try:
            deadline = time.monotonic() + 20
            while self.queue_depth() < 4 and time.monotonic() < deadline:
                time.sleep(0.005)
            self.assertGreaterEqual(self.queue_depth(), 2, "the batch never queued (or ran out)")
            small = rand(np.random.default_rng(12), 2, 1, 4)
            with self.assertRaises(posattn.Error) as cm:
                c.attention_batch([dict(q=small, k=small, v=small)] * 2)
        finally:
            t.join(120)
        self.assertError(cm.exception, "OVERLOADED", 503)
        self.assertEqual(cm.exception.retry_after, 1.0)
        res = busy["result"]
        self.assertIsInstance(res, list, res)
        self.assertEqual(len(res), 8)
        self.assertTrue(all(isinstance(r, np.ndarray) and r.shape == (self.L, self.H, self.D)
                            for r in res))


class StandIn(unittest.TestCase):
    """Answers posattnd gives only in states hard to reach on demand, from a
    stand-in HTTP server on 127.0.0.1: a batch whose items all failed with
    the items' status (400, body with outputs), a 503 DRAINING with
    Retry-After, and a proxy's non-JSON 502."""

    @classmethod
    def setUpClass(cls):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body, ctype="application/json", extra=()):
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outs = [{"id": None, "error": {"code": "INVALID_ARGUMENT",
                                               "message": "v is required", "field": "inputs[0].v"}},
                        {"id": None, "error": {"code": "PAYLOAD_TOO_LARGE",
                                               "message": "q has 20000000 elements"}}]
                self.answer(400, {"outputs": outs[:len(body["inputs"])], "errors": True})

            def do_GET(self):
                if self.path == "/v1/schemes":
                    self.answer(503, {"error": {"code": "DRAINING", "message": "shutting down"}},
                                extra=[("Retry-After", "2")])
                else:
                    self.answer(502, "<html>bad gateway</html>", "text/html")

        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        cls.thread = threading.Thread(target=cls.httpd.serve_forever, daemon=True)
        cls.thread.start()
        cls.c = posattn.Client("http://127.0.0.1:%d" % cls.httpd.server_address[1], timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()
        cls.thread.join(10)

    def test_all_items_failed_with_their_status(self):
        x = np.zeros((1, 1, 2), np.float32)
        res = self.c.attention_batch([dict(q=x, k=x), dict(q=x, k=x, v=x)])
        self.assertEqual([(e.code, e.status, e.item, e.field) for e in res],
                         [("INVALID_ARGUMENT", 400, 0, "inputs[0].v"),
                          ("PAYLOAD_TOO_LARGE", 413, 1, None)])
        with self.assertRaises(posattn.Error) as cm:  # one item: its error, raised
            self.c.attention(x, x, None)
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.item),
                         ("INVALID_ARGUMENT", 400, None))

    def test_503_draining(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.schemes()
        e = cm.exception
        self.assertEqual((e.code, e.status, e.retry_after), ("DRAINING", 503, 2.0))

    def test_non_json_error(self):
        with self.assertRaises(posattn.Error) as cm:
            self.c.health()
        e = cm.exception
        self.assertNotIsInstance(e, posattn.TransportError)
        self.assertEqual((e.code, e.status), ("HTTP_502", 502))
        self.assertIn("bad gateway", e.message)


def readme_text():
    with open(os.path.join(CLIENT_SRC, "README.md")) as f:
        return f.read()


class Readme(unittest.TestCase):
    def test_readme_examples(self):
        """clients/python/README.md's Example, Tensors and Errors blocks, run
        as written (against POSATTN_URL), with the results their comments state."""
        import io
        import re
        blocks = re.findall(r"```python\n(.*?)```", readme_text(), re.S)
        example = next(b for b in blocks if "np.random.rand(16, 8, 64)" in b)
        wire = next(b for b in blocks if '"dtype": "bf16"' in b)
        errors = next(b for b in blocks if "except posattn.Error as e:" in b)
        ns = {}
        out = io.StringIO()
        with contextlib.redirect_stdout(out), mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("POSATTN_API_KEY", None)
            exec(compile(example.replace("http://127.0.0.1:8080", URL), "README", "exec"), ns)
            exec(compile(errors, "README errors", "exec"), ns)
            exec(compile(wire.replace("http://127.0.0.1:8080", URL), "README tensors", "exec"), {})
        self.assertEqual(ns["out"].shape, (16, 8, 64))
        self.assertEqual(ns["res"]["entropy"].shape, (8, 16))
        self.assertEqual(ns["t"].tolist(), [[[1.0, 2.0]], [[2.0, 3.0]]])
        self.assertEqual(out.getvalue(), "400 SHAPE_MISMATCH inputs[0].k.shape\n"
                                         "[[[1.0, 2.0]], [[2.0, 3.0]]]\n")
        self.assertIn("# [[[1.0, 2.0]], [[2.0, 3.0]]]", wire)


def main():
    quiet = "-q" in sys.argv[1:]
    argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != "-q"]
    prog = unittest.main(argv=argv, verbosity=1 if quiet else 2, exit=False)
    ok = prog.result.wasSuccessful()
    print("client-python: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
