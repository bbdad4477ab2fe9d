#!/usr/bin/python3
"""options.py - the options of current models (softcap, sinks, chunk_size, mask,
bias) through posattnd over HTTP, against an independent NumPy reference in
float64 written from the definitions (posattn.h, README's conventions):

    l = scale * q.k ; l = c * tanh(l / c) (softcap) ; l += alibi + bias ;
    hidden (causal, chunk floor(pos / C), mask == 0, bias -inf) -> -inf ;
    w = exp(l - m) / (sum exp(l - m) + exp(s_h - m)), m = max(row, s_h) (sinks)

and the query scalings by position and norm variants (Llama 4, Qwen-1, Gemma),
applied to q and k before that, from the models' own formulas.

POST /v1/attention with JSON tensors (the mask as booleans) and with base64
ones (the mask one byte per element, the bias with -inf), and the KServe v2
infer route with binary inputs (BOOL mask) and softcap / chunk_size as
parameters. Tolerance 2e-5 + 1e-4 |want| (float32 kernels against float64).

    tests/e2e/harness.sh /usr/bin/python3 tests/e2e/options.py   # starts the servers
    POSATTN_URL=http://127.0.0.1:8080 /usr/bin/python3 tests/e2e/options.py
"""

import base64
import http.client
import json
import os
import struct
import sys
import unittest
import urllib.parse

import numpy as np

URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")
TIMEOUT = 30
ATOL, RTOL = 2e-5, 1e-4


def call(method, path, body=None, headers=None):
    u = urllib.parse.urlsplit(URL)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def alibi_slopes(H):
    """ALiBi's geometric slopes for a power-of-two H (Press et al.; HF's build_alibi_tensor)."""
    return np.array([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)])


def reference(q, k, v, alibi=False, causal=False, softcap=0.0, sinks=None, chunk=0, mask=None,
              bias=None):
    """Attention in float64: q [Lq,H,D], k/v [Lk,Hkv,*]; default positions (bottom-right)."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    Lq, H, D = q.shape
    Lk, Hkv, Dv = v.shape
    qpos = np.arange(Lk - Lq, Lk)[:, None]
    kpos = np.arange(Lk)[None, :]
    kk = np.repeat(k, H // Hkv, axis=1)
    vv = np.repeat(v, H // Hkv, axis=1)
    logits = np.einsum("ihd,jhd->hij", q, kk) / np.sqrt(D)
    if softcap:
        logits = softcap * np.tanh(logits / softcap)
    if alibi:
        logits = logits + alibi_slopes(H)[:, None, None] * (kpos - qpos)[None]
    if bias is not None:
        logits = logits + np.broadcast_to(np.asarray(bias, np.float64), logits.shape)
    hidden = np.zeros((Lq, Lk), bool)
    if causal:
        hidden |= kpos > qpos
    if chunk:
        hidden |= np.floor(qpos / chunk) != np.floor(kpos / chunk)
    hidden = np.broadcast_to(hidden[None], logits.shape).copy()
    if mask is not None:
        hidden |= ~np.broadcast_to(np.asarray(mask, bool), logits.shape)
    logits = np.where(hidden, -np.inf, logits)
    sink = np.full(H, -np.inf) if sinks is None else np.asarray(sinks, np.float64)
    m = np.maximum(logits.max(axis=2), sink[:, None])
    e = np.where(np.isneginf(logits), 0.0, np.exp(logits - np.where(np.isinf(m), 0, m)[..., None]))
    with np.errstate(invalid="ignore"):
        sink_term = np.where(np.isneginf(sink)[:, None], 0.0, np.exp(sink[:, None] - m))
    denom = e.sum(axis=2) + sink_term
    w = np.where(denom[..., None] > 0, e / np.where(denom > 0, denom, 1)[..., None], 0.0)
    out = np.einsum("hij,jhd->ihd", w, vv)
    return out, w


def f32(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def jtensor(a):
    a = np.asarray(a)
    return {"shape": list(a.shape), "data": a.reshape(-1).tolist()}


def btensor(a):
    a = np.ascontiguousarray(a, "<f4")
    return {"shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode()}


def decode(t):
    if "b64" in t:
        return np.frombuffer(base64.b64decode(t["b64"]), "<f4").reshape(t["shape"])
    return np.array([np.nan if x is None else x for x in t["data"]], np.float64).reshape(
        t["shape"])


class Options(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(4300)
        self.Lq, self.Lk, self.H, self.Hkv, self.D = 6, 10, 4, 2, 8
        self.q = f32(rng, (self.Lq, self.H, self.D), -2, 2)
        self.k = f32(rng, (self.Lk, self.Hkv, self.D))
        self.v = f32(rng, (self.Lk, self.Hkv, self.D))
        self.sinks = f32(rng, (self.H,))
        self.mask = rng.uniform(0, 1, (self.H, self.Lq, self.Lk)) < 0.7
        self.bias = f32(rng, (self.Lq, self.Lk), -2, 2)
        self.bias_inf = self.bias.copy()
        self.bias_inf[1, 3] = self.bias_inf[4, 0] = -np.inf

    def attention(self, item, encoding="json"):
        st, _, body = call("POST", "/v1/attention", json.dumps(
            {"inputs": [item], "output_encoding": encoding}).encode())
        self.assertEqual(st, 200, body)
        out = json.loads(body)["outputs"][0]
        self.assertNotIn("error", out, out)
        return decode(out["output"]), decode(out["weights"])

    def check(self, got, want):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)

    def test_json(self):
        item = {"scheme": {"type": "alibi"}, "q": jtensor(self.q), "k": jtensor(self.k),
                "v": jtensor(self.v), "causal": True, "softcap": 1.5,
                "sinks": jtensor(self.sinks), "chunk_size": 4,
                "mask": {"shape": list(self.mask.shape),
                         "data": [bool(x) for x in self.mask.reshape(-1)]},
                "bias": jtensor(self.bias), "return": ["output", "weights"]}
        out, w = self.attention(item)
        want_out, want_w = reference(self.q, self.k, self.v, alibi=True, causal=True,
                                     softcap=1.5, sinks=self.sinks, chunk=4, mask=self.mask,
                                     bias=self.bias)
        self.check(out, want_out)
        self.check(w, want_w)
        # The options are not ignored: without them the weights differ.
        _, plain_w = reference(self.q, self.k, self.v, alibi=True, causal=True)
        self.assertGreater(np.abs(plain_w - want_w).max(), 0.05)

    def test_b64(self):
        mask = self.mask.astype(np.uint8)
        item = {"scheme": {"type": "none"}, "q": btensor(self.q), "k": btensor(self.k),
                "v": btensor(self.v), "softcap": 2.0, "sinks": btensor(self.sinks),
                "mask": {"shape": list(mask.shape),
                         "b64": base64.b64encode(mask.tobytes()).decode()},
                "bias": btensor(self.bias_inf[None]), "return": ["output", "weights"]}
        out, w = self.attention(item, "b64")
        want_out, want_w = reference(self.q, self.k, self.v, softcap=2.0, sinks=self.sinks,
                                     mask=self.mask, bias=self.bias_inf)
        self.check(out, want_out)
        self.check(w, want_w)
        self.assertEqual(w[:, 1, 3].tolist(), [0.0] * self.H)  # bias -inf hides the key

    def test_fully_masked_row_with_sink(self):
        mask = np.ones((self.Lq, self.Lk), bool)
        mask[2] = False
        item = {"scheme": {"type": "none"}, "q": btensor(self.q), "k": btensor(self.k),
                "v": btensor(self.v), "sinks": btensor(self.sinks),
                "mask": {"shape": list(mask.shape), "data": mask.astype(int).reshape(-1).tolist()},
                "return": ["output", "weights"]}
        out, w = self.attention(item, "b64")
        self.assertEqual(np.abs(out[2]).max(), 0.0)
        self.assertEqual(np.abs(w[:, 2]).max(), 0.0)
        self.check(out, reference(self.q, self.k, self.v, sinks=self.sinks, mask=mask)[0])

    def test_v2_binary(self):
        mask = self.mask.astype(np.uint8)
        parts = [("q", self.q, "FP32"), ("k", self.k, "FP32"), ("v", self.v, "FP32"),
                 ("sinks", self.sinks, "FP32"), ("bias", self.bias_inf, "FP32"),
                 ("mask", mask, "BOOL")]
        inputs, blobs = [], []
        for name, a, dt in parts:
            raw = np.ascontiguousarray(a, "<f4" if dt == "FP32" else "u1").tobytes()
            inputs.append({"name": name, "shape": list(a.shape), "datatype": dt,
                           "parameters": {"binary_data_size": len(raw)}})
            blobs.append(raw)
        header = json.dumps({"parameters": {"causal": True, "softcap": 1.5, "chunk_size": 3,
                                            "binary_data_output": True},
                             "inputs": inputs, "outputs": [{"name": "output"}]}).encode()
        st, headers, body = call("POST", "/v2/models/attention-rope/infer",
                                 header + b"".join(blobs),
                                 {"Inference-Header-Content-Length": str(len(header)),
                                  "Content-Type": "application/octet-stream"})
        self.assertEqual(st, 200, body)
        n = int(headers["Inference-Header-Content-Length"])
        got = np.frombuffer(body[n:], "<f4").reshape(self.Lq, self.H, self.D)
        # The same item through /v1 (rope is the library's; checked against
        # its own reference in the unit tests): bit-identical.
        item = {"scheme": {"type": "rope"}, "q": btensor(self.q), "k": btensor(self.k),
                "v": btensor(self.v), "causal": True, "softcap": 1.5, "chunk_size": 3,
                "sinks": btensor(self.sinks), "bias": btensor(self.bias_inf),
                "mask": {"shape": list(mask.shape),
                         "b64": base64.b64encode(mask.tobytes()).decode()},
                "return": ["output", "weights"]}
        out, _ = self.attention(item, "b64")
        self.assertEqual(got.tobytes(), np.ascontiguousarray(out, "<f4").tobytes())

    def test_norms(self):
        """q_norm (per head) and k_norm (whole projection) through /v1 against NumPy, and the
        same through v2 (q_norm_weight, k_norm_weight inputs; k_norm_eps parameter)."""
        rng = np.random.default_rng(4310)
        wq = f32(rng, (self.D,), 0.5, 1.5)
        wk = f32(rng, (self.Hkv * self.D,), 0.5, 1.5)

        def rms(x, w, eps, whole):
            x = np.asarray(x, np.float64)
            if whole:
                flat = x.reshape(x.shape[0], -1)
                inv = 1 / np.sqrt((flat ** 2).mean(axis=1, keepdims=True) + eps)
                return (flat * inv * w).reshape(x.shape)
            inv = 1 / np.sqrt((x ** 2).mean(axis=2, keepdims=True) + eps)
            return x * inv * w

        item = {"scheme": {"type": "none"}, "q": btensor(self.q), "k": btensor(self.k),
                "v": btensor(self.v), "q_norm": {"weight": jtensor(wq)},
                "k_norm": {"weight": btensor(wk), "eps": 0.25}, "causal": True,
                "return": ["output", "weights"]}
        out, w = self.attention(item, "b64")
        want_out, want_w = reference(rms(self.q, wq, 1e-6, False), rms(self.k, wk, 0.25, True),
                                     self.v, causal=True)
        self.check(out, want_out)
        self.check(w, want_w)
        inputs = [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                   "data": np.asarray(a, np.float64).reshape(-1).tolist()}
                  for n, a in (("q", self.q), ("k", self.k), ("v", self.v),
                               ("q_norm_weight", wq), ("k_norm_weight", wk))]
        st, _, body = call("POST", "/v2/models/attention-none/infer", json.dumps(
            {"parameters": {"causal": True, "k_norm_eps": 0.25}, "inputs": inputs}).encode())
        self.assertEqual(st, 200, body)
        got = np.array(json.loads(body)["outputs"][0]["data"], np.float32)
        self.assertEqual(got.tobytes(), np.ascontiguousarray(out, "<f4").reshape(-1).tobytes())

    def test_query_scalings(self):
        """attn_temperature_tuning (Llama 4) and logn_scaling (Qwen-1) scale q by its position,
        and q_norm without a weight / k_norm with weight_offset (Llama 4, Gemma): /v1 against
        NumPy written from the models' code, unlike the plain answer; v2's scalar parameters
        give the same bits."""
        rng = np.random.default_rng(4320)
        wk = f32(rng, (self.D,), -0.5, 0.5)  # stored as weight - 1 (Gemma)
        qpos = np.array([8185, 8191, 8192, 16383, 16384, 30000])

        def llama4(p, floor_scale=8192.0, attn_scale=0.1):  # Llama4TextAttention's attn_scales
            return np.log(np.floor((p + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0

        def qwen_logn(p, T):  # QWenAttention's logn_list[p]: math.log(p + 1, T) past T
            return np.array([np.log(x + 1) / np.log(T) if x + 1 > T else 1.0 for x in p])

        def rms(x, eps, w=None):
            x = np.asarray(x, np.float64)
            y = x / np.sqrt((x ** 2).mean(axis=2, keepdims=True) + eps)
            return y if w is None else y * (1.0 + np.asarray(w, np.float64))

        base = {"scheme": {"type": "none"}, "q": btensor(self.q), "k": btensor(self.k),
                "v": btensor(self.v), "return": ["output", "weights"]}
        dflt = np.arange(self.Lk - self.Lq, self.Lk)  # the default q positions
        cases = [
            ({"attn_temperature_tuning": {}, "q_positions": qpos.tolist()},
             self.q * llama4(qpos)[:, None, None], self.k),
            ({"attn_temperature_tuning": {"floor_scale": 2, "attn_scale": 0.5}},
             self.q * llama4(dflt, 2.0, 0.5)[:, None, None], self.k),
            ({"logn_scaling": {"train_length": 6}}, self.q * qwen_logn(dflt, 6)[:, None, None],
             self.k),
            ({"q_norm": {}, "k_norm": {"weight": jtensor(wk), "weight_offset": 1, "eps": 1e-5}},
             rms(self.q, 1e-6), rms(self.k, 1e-5, wk)),
        ]
        plain_out, _ = self.attention(base, "b64")
        for extra, q, k in cases:
            out, w = self.attention(dict(base, **extra), "b64")
            want_out, want_w = reference(q, k, self.v)
            self.check(out, want_out)
            self.check(w, want_w)
            self.assertGreater(np.abs(out - plain_out).max(), 1e-3, extra)
        # v2: the same through scalar parameters, bit for bit.
        params = {"attn_temperature_tuning_floor_scale": 2,
                  "attn_temperature_tuning_attn_scale": 0.5, "logn_scaling_train_length": 6, "q_norm_eps": 1e-6, "k_norm_weight_offset": 1,
                  "k_norm_eps": 1e-5}
        inputs = [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                   "data": np.asarray(a, np.float64).reshape(-1).tolist()}
                  for n, a in (("q", self.q), ("k", self.k), ("v", self.v), ("k_norm_weight", wk))]
        st, _, body = call("POST", "/v2/models/attention-none/infer",
                           json.dumps({"parameters": params, "inputs": inputs}).encode())
        self.assertEqual(st, 200, body)
        got = np.array(json.loads(body)["outputs"][0]["data"], np.float32)
        out, _ = self.attention(dict(base, attn_temperature_tuning={"floor_scale": 2,
                                                                    "attn_scale": 0.5},
                                     logn_scaling={"train_length": 6}, q_norm={},
                                     k_norm={"weight": jtensor(wk), "weight_offset": 1,
                                             "eps": 1e-5}), "b64")
        self.assertEqual(got.tobytes(), np.ascontiguousarray(out, "<f4").reshape(-1).tobytes())
        want_out, _ = reference(rms(self.q, 1e-6) * (llama4(dflt, 2.0, 0.5) *
                                                     qwen_logn(dflt, 6))[:, None, None],
                                rms(self.k, 1e-5, wk), self.v)
        self.check(out, want_out)

    def test_v2_mrope(self):
        """M-RoPE through v2: mrope_section as an INT32 input, q_positions [3, Lq] as JSON
        (flat data) and k_positions [3, Lk] as binary INT32; bit-identical to /v1."""
        qm = np.array([[5] * self.Lq, [1, 1, 2, 2, 3, 3], [3, 4, 3, 4, 3, 4]], np.int32)
        km = np.array([list(range(self.Lk)), [0] * 4 + [1] * 6, list(range(10, 20))], np.int32)
        item = {"scheme": {"type": "rope", "mrope_section": [1, 1, 2]}, "q": btensor(self.q),
                "k": btensor(self.k), "v": btensor(self.v), "q_positions": qm.tolist(),
                "k_positions": km.tolist(), "causal": True, "return": ["output", "weights"]}
        out, _ = self.attention(item, "b64")
        raw = np.ascontiguousarray(km, "<i4").tobytes()
        inputs = [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                   "data": np.asarray(a, np.float64).reshape(-1).tolist()}
                  for n, a in (("q", self.q), ("k", self.k), ("v", self.v))]
        inputs += [{"name": "mrope_section", "shape": [3], "datatype": "INT32", "data": [1, 1, 2]},
                   {"name": "q_positions", "shape": [3, self.Lq], "datatype": "INT32",
                    "data": qm.reshape(-1).tolist()},
                   {"name": "k_positions", "shape": [3, self.Lk], "datatype": "INT32",
                    "parameters": {"binary_data_size": len(raw)}}]
        header = json.dumps({"parameters": {"causal": True, "binary_data_output": True},
                             "inputs": inputs, "outputs": [{"name": "output"}]}).encode()
        st, headers, body = call("POST", "/v2/models/attention-rope/infer", header + raw,
                                 {"Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(st, 200, body)
        n = int(headers["Inference-Header-Content-Length"])
        self.assertEqual(body[n:], np.ascontiguousarray(out, "<f4").tobytes())
        # Without the rows the answer is plain rope's, and differs.
        plain, _ = self.attention({k: v for k, v in item.items()
                                   if k not in ("q_positions", "k_positions")}, "b64")
        self.assertGreater(np.abs(plain - out).max(), 1e-3)

    def test_half_precision(self):
        """q, k, v in f16, bf16 and f64: /v1 b64 bytes of each, /v1 JSON numbers rounded to
        each, and v2 binary FP16 / BF16 / FP64 and JSON BF16, all bit-identical to the same
        item sent as float32 values the type can hold; computed in float32."""
        def f16_round(a):
            return np.asarray(a, np.float64).astype(np.float16).astype(np.float32)

        def bf16_bytes(a):
            # NumPy has no bfloat16: round float32 bits to nearest even, keep the top half.
            u = np.ascontiguousarray(a, "<f4").view("<u4").astype(np.uint64)
            return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")

        def bf16_round(a):
            return (bf16_bytes(a).astype(np.uint32) << 16).view("<f4")

        cases = {
            "f16": (f16_round, lambda a: np.ascontiguousarray(a, "<f2").tobytes(), "FP16"),
            "bf16": (bf16_round, lambda a: bf16_bytes(a).tobytes(), "BF16"),
            "f64": (lambda a: np.asarray(a, np.float32),
                    lambda a: np.ascontiguousarray(a, "<f8").tobytes(), "FP64"),
        }
        for dt, (rounded, raw, v2name) in cases.items():
            want_item = {"scheme": {"type": "alibi"}, "causal": True,
                         "return": ["output", "weights"]}
            for n, a in (("q", self.q), ("k", self.k), ("v", self.v)):
                want_item[n] = btensor(rounded(a))
            want, _ = self.attention(want_item, "b64")
            # /v1 b64 of the type's bytes, and JSON numbers rounded to it.
            for form in ("b64", "json"):
                item = dict(want_item)
                for n, a in (("q", self.q), ("k", self.k), ("v", self.v)):
                    if form == "b64":
                        item[n] = {"shape": list(a.shape), "dtype": dt,
                                   "b64": base64.b64encode(raw(a)).decode()}
                    else:
                        item[n] = {"shape": list(a.shape), "dtype": dt,
                                   "data": np.asarray(a, np.float64).reshape(-1).tolist()}
                got, _ = self.attention(item, "b64")
                self.assertEqual(got.tobytes(), want.tobytes(), (dt, form))
            # v2 binary
            inputs, blobs = [], []
            for n, a in (("q", self.q), ("k", self.k), ("v", self.v)):
                b = raw(a)
                inputs.append({"name": n, "shape": list(a.shape), "datatype": v2name,
                               "parameters": {"binary_data_size": len(b)}})
                blobs.append(b)
            header = json.dumps({"parameters": {"causal": True, "binary_data_output": True},
                                 "inputs": inputs, "outputs": [{"name": "output"}]}).encode()
            st, headers, body = call("POST", "/v2/models/attention-alibi/infer",
                                     header + b"".join(blobs),
                                     {"Inference-Header-Content-Length": str(len(header))})
            self.assertEqual(st, 200, body)
            n = int(headers["Inference-Header-Content-Length"])
            self.assertEqual(body[n:], np.ascontiguousarray(want, "<f4").tobytes(), dt)
        # v2 JSON data with BF16: the numbers rounded to bf16
        inputs = [{"name": n, "shape": list(a.shape), "datatype": "BF16",
                   "data": np.asarray(a, np.float64).reshape(-1).tolist()}
                  for n, a in (("q", self.q), ("k", self.k), ("v", self.v))]
        st, _, body = call("POST", "/v2/models/attention-alibi/infer", json.dumps(
            {"parameters": {"causal": True}, "inputs": inputs}).encode())
        self.assertEqual(st, 200, body)
        want_item = {"scheme": {"type": "alibi"}, "causal": True, "return": ["output"]}
        for n, a in (("q", self.q), ("k", self.k), ("v", self.v)):
            want_item[n] = btensor(bf16_round(a))
        want, _ = self.attention(dict(want_item, **{"return": ["output", "weights"]}), "b64")
        got = np.array(json.loads(body)["outputs"][0]["data"], np.float32)
        self.assertEqual(got.tobytes(), want.reshape(-1).tobytes())
        # past f16's range: an error naming the element
        st, _, body = call("POST", "/v1/attention", json.dumps({"inputs": [dict(
            want_item, q={"shape": [1, self.H, self.D], "dtype": "f16",
                          "data": [70000.0] * (self.H * self.D)},
            k=btensor(self.k[:1]), v=btensor(self.v[:1]))]}).encode())
        err = json.loads(body)["outputs"][0]["error"]
        self.assertEqual((err["code"], err["field"]), ("OUT_OF_RANGE", "inputs[0].q.data[0]"))

    def test_output_dtype(self):
        """output_dtype f16 and bf16: /v1 b64 bytes and v2 binary FP16 / BF16 outputs equal the
        float32 answer rounded by NumPy (f16) or by bits (bf16); an f16 overflow is an error."""
        item = {"scheme": {"type": "rope"}, "q": btensor(self.q), "k": btensor(self.k),
                "v": btensor(self.v), "causal": True, "return": ["output"]}
        out32, _ = self.attention(dict(item, **{"return": ["output", "weights"]}), "b64")
        u = np.ascontiguousarray(out32, "<f4").view("<u4").astype(np.uint64)
        want = {"f16": np.ascontiguousarray(out32, "<f2").tobytes(),
                "bf16": ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()}
        for dt, v2name in (("f16", "FP16"), ("bf16", "BF16")):
            st, _, body = call("POST", "/v1/attention", json.dumps(
                {"inputs": [item], "output_encoding": "b64", "output_dtype": dt}).encode())
            o = json.loads(body)["outputs"][0]["output"]
            self.assertEqual(o["datatype"], v2name)
            self.assertEqual(base64.b64decode(o["b64"]), want[dt], dt)
            inputs = [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                       "data": np.asarray(a, np.float64).reshape(-1).tolist()}
                      for n, a in (("q", self.q), ("k", self.k), ("v", self.v))]
            header = json.dumps({"parameters": {"causal": True, "output_dtype": dt,
                                                "binary_data_output": True},
                                 "inputs": inputs, "outputs": [{"name": "output"}]}).encode()
            st, headers, body = call("POST", "/v2/models/attention-rope/infer", header,
                                     {"Inference-Header-Content-Length": str(len(header))})
            self.assertEqual(st, 200, body)
            n = int(headers["Inference-Header-Content-Length"])
            self.assertEqual(json.loads(body[:n])["outputs"][0]["datatype"], v2name)
            self.assertEqual(body[n:], want[dt], dt)
        big = dict(item, v=btensor(np.full_like(self.v, 1e5)), output_dtype="f16")
        st, _, body = call("POST", "/v1/attention", json.dumps({"inputs": [big]}).encode())
        err = json.loads(body)["outputs"][0]["error"]
        self.assertEqual((err["code"], err["field"]), ("OUT_OF_RANGE", "inputs[0].output_dtype"))

    def test_packed_sequences(self):
        """cu_seqlens: each sequence against the float64 reference of that
        sequence alone, and bit for bit the separate items of the same
        request (b64). Sequence 1's weights (4 x 130 x 130) are written
        straight into the answer from within the packed buffer."""
        rng = np.random.default_rng(4390)
        lens, H, Hkv, D = [1, 130, 7], 4, 2, 8
        cu = [0, 1, 131, 138]
        q, k, v = (f32(rng, (cu[-1], h, D)) for h in (H, Hkv, Hkv))
        ret = {"return": ["output", "weights"]}
        items = [dict({"scheme": {"type": "alibi"}, "q": btensor(q), "k": btensor(k),
                       "v": btensor(v), "causal": True, "cu_seqlens": cu}, **ret)]
        for s in range(3):
            a, b = cu[s], cu[s + 1]
            items.append(dict({"scheme": {"type": "alibi"}, "q": btensor(q[a:b]),
                               "k": btensor(k[a:b]), "v": btensor(v[a:b]), "causal": True},
                              **ret))
        st, _, body = call("POST", "/v1/attention", json.dumps(
            {"inputs": items, "output_encoding": "b64"}).encode())
        self.assertEqual(st, 200, body)
        outs = json.loads(body)["outputs"]
        packed = outs[0]
        self.assertEqual(packed["output"]["shape"], [cu[-1], H, D])
        self.assertEqual(len(packed["weights"]), 3)
        out = decode(packed["output"])
        for s in range(3):
            a, b = cu[s], cu[s + 1]
            want_out, want_w = reference(q[a:b], k[a:b], v[a:b], alibi=True, causal=True)
            self.check(out[a:b], want_out)
            self.check(decode(packed["weights"][s]), want_w)
            self.assertEqual(packed["weights"][s]["b64"], outs[s + 1]["weights"]["b64"])
            self.assertEqual(out[a:b].tobytes(), decode(outs[s + 1]["output"]).tobytes())

    def test_compute_dtype_bf16(self):
        """compute_dtype bf16: the logits are exactly scale times the pairwise bf16 dot of the
        rounded q_rot and k_rot (dims 2p+1 then 2p, each sum rounded to float32: a bf16 product
        is exact), the output within bf16's error of float32's, KServe v2's parameter the same
        bytes, and /v1/schemes names the path."""
        rng = np.random.default_rng(4350)
        Lq, Lk, H, Hkv, D = 70, 300, 2, 1, 24
        q, k, v = f32(rng, (Lq, H, D)), f32(rng, (Lk, Hkv, D)), f32(rng, (Lk, Hkv, D))
        base = {"scheme": {"type": "rope"}, "q": btensor(q), "k": btensor(k), "v": btensor(v),
                "causal": True, "return": ["output", "logits", "q_rot", "k_rot"]}

        def run(extra):
            st, _, body = call("POST", "/v1/attention", json.dumps(
                {"inputs": [dict(base, **extra)], "output_encoding": "b64"}).encode())
            self.assertEqual(st, 200, body)
            o = json.loads(body)["outputs"][0]
            return {n: decode(o[n]) for n in ("output", "logits", "q_rot", "k_rot")}

        f, b = run({}), run({"compute_dtype": "bf16"})
        np.testing.assert_array_equal(b["q_rot"], f["q_rot"])  # q as attention sees it

        def bf16(a):
            u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
            tiny = (u & 0x7F800000) == 0
            u = np.where(tiny, u & 0x80000000, (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000)
            return u.astype(np.uint32).view(np.float32)

        qr, kr = bf16(b["q_rot"]), bf16(b["k_rot"])  # [Lq, H, D], [Lk, Hkv, D]
        acc = np.zeros((H, Lq, Lk), np.float32)
        for p in range(0, D, 2):
            for d in (p + 1, p):
                acc = acc + np.einsum("ih,jh->hij", qr[:, :, d],
                                      np.repeat(kr[:, :, d], H // Hkv, axis=1)).astype(np.float32)
        want = acc * np.float32(1 / np.sqrt(D))
        visible = np.isfinite(b["logits"])
        self.assertEqual(int(visible.sum()), H * sum(min(Lk, Lk - Lq + i + 1) for i in range(Lq)))
        self.assertEqual(b["logits"][visible].astype(np.float32).tobytes(),
                         want[visible].tobytes())
        # Against float32 rope (itself checked against float64 elsewhere): bf16's error.
        err_b = np.abs(b["output"] - f["output"]).max()
        self.assertGreater(err_b, 1e-4)  # rounded
        self.assertLess(err_b, 2e-2)
        # KServe v2: the parameter, the same bytes.
        header = json.dumps({"parameters": {"causal": True, "compute_dtype": "bf16",
                                            "binary_data_output": True},
                             "inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                                         "parameters": {"binary_data_size": a.nbytes}}
                                        for n, a in (("q", q), ("k", k), ("v", v))],
                             "outputs": [{"name": "output"}]}).encode()
        st, headers, body = call("POST", "/v2/models/attention-rope/infer",
                                 header + q.tobytes() + k.tobytes() + v.tobytes(),
                                 {"Inference-Header-Content-Length": str(len(header)),
                                  "Content-Type": "application/octet-stream"})
        self.assertEqual(st, 200, body)
        n = int(headers["Inference-Header-Content-Length"])
        self.assertEqual(body[n:], np.ascontiguousarray(b["output"], "<f4").tobytes())
        st, _, body = call("GET", "/v1/schemes")
        self.assertIn(json.loads(body)["machine"]["bf16_path"], ("avx512_bf16", "fma", "portable"))

    def test_errors(self):
        base = {"scheme": {"type": "none"}, "q": btensor(self.q), "k": btensor(self.k),
                "v": btensor(self.v)}
        for extra, code, field in [
                ({"softcap": 0}, "INVALID_ARGUMENT", "inputs[0].softcap"),
                ({"chunk_size": -1}, "INVALID_ARGUMENT", "inputs[0].chunk_size"),
                ({"sinks": jtensor(self.sinks[:3])}, "SHAPE_MISMATCH", "inputs[0].sinks.shape[0]"),
                ({"mask": {"shape": [self.Lq, self.Lk], "data": [2] * (self.Lq * self.Lk)}},
                 "INVALID_ARGUMENT", "inputs[0].mask.data[0]"),
                ({"bias": jtensor(self.bias.T)}, "SHAPE_MISMATCH", "inputs[0].bias.shape"),
                ({"attn_temperature_tuning": {"floor_scale": -1}}, "INVALID_ARGUMENT",
                 "inputs[0].attn_temperature_tuning.floor_scale"),
                ({"logn_scaling": {"train_length": 1}}, "INVALID_ARGUMENT",
                 "inputs[0].logn_scaling.train_length"),
                ({"q_norm": {"weight_offset": 1}}, "INVALID_ARGUMENT",
                 "inputs[0].q_norm.weight_offset"),
                ({"compute_dtype": "f16"}, "UNSUPPORTED", "inputs[0].compute_dtype"),
                ({"compute_dtype": "fp8"}, "INVALID_ARGUMENT", "inputs[0].compute_dtype"),
                ({"compute_dtype": 16}, "INVALID_ARGUMENT", "inputs[0].compute_dtype")]:
            st, _, body = call("POST", "/v1/attention",
                               json.dumps({"inputs": [dict(base, **extra)]}).encode())
            self.assertEqual(st, 400, body)  # the only item failed: its status
            err = json.loads(body)["outputs"][0]["error"]
            self.assertEqual((err["code"], err["field"]), (code, field), err)
        st, _, body = call("POST", "/v2/models/attention-none/infer", json.dumps(
            {"parameters": {"softcap": "x"},
             "inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                         "data": a.reshape(-1).tolist()}
                        for n, a in (("q", self.q), ("k", self.k), ("v", self.v))]}).encode())
        self.assertEqual(st, 400, body)
        self.assertIn("softcap", json.loads(body)["error"])


if __name__ == "__main__":
    argv = [a for a in sys.argv if a != "-q"]
    unittest.main(argv=argv, verbosity=1 if "-q" in sys.argv else 2)
