#!/usr/bin/python3
"""v2_sequences.py - Triton's sequence extension on the attention-<scheme>
models (docs/kserve-v2.md, "Sequences"), over HTTP.

Starts its own posattnd (tests/posattnd.py) and runs v2 sequences: a start
with a prefill (q of L rows, k and v of L tokens), decode steps of one
token each, and an end. Every step's output and weights must equal, bit
for bit, the stateless /v1/attention item over the same tokens at the same
positions (as tests/e2e/session_attention.py checks /v1 sessions), for
rope with an integer sequence_id and alibi with a string one and a window
(sequence_window, sequence_sinks). Also: the sequence is the session
"seq-<id>" (GET /v1/sessions shows it, with the default max_tokens 4096),
end deletes it (GET 404), a step on an unknown id without a start is
SESSION_NOT_FOUND naming parameters.sequence_id, a second start on a live
id is refused (409) and leaves it as it was, a refused start leaves no
session behind, a step sent to another scheme's model is refused, and a
step with binary tensors (in and out) answers as the JSON ones, and each
step counts in posattn_session_step_duration_seconds{scheme}.
The binary is $POSATTND (default build/posattnd). Part of make test's
e2e-clients.
"""
import json
import os
import random
import struct
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import posattnd  # noqa: E402

BIN = os.environ.get("POSATTND", "build/posattnd")
SRV = None
H, HKV, D, DV = 4, 2, 8, 6


def setUpModule():
    global SRV
    SRV = posattnd.start(BIN, ["--workers", "2", "--cache-mb", "64", "--session-ttl", "0"])


def tearDownModule():
    SRV.stop(check=True)


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(SRV.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def alibi_steps():
    """posattn_session_step_duration_seconds_count{scheme="alibi"} (0 when absent)."""
    with urllib.request.urlopen(SRV.url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith('posattn_session_step_duration_seconds_count{scheme="alibi"} '):
            return int(line.split()[1])
    return 0


def rnd(rng, n):
    # three decimals: the same text reaches the server in both requests
    return [round(rng.uniform(-1, 1), 3) for _ in range(n)]


class Model:
    """The tokens a session retains, slot by slot (store/kv_cache.h)."""

    def __init__(self, sinks=0, window=0):
        self.sinks, self.window = sinks, window
        self.k, self.v, self.slots = [], [], []

    def append(self, k, v):
        t = len(self.k)
        self.k.append(k)
        self.v.append(v)
        if not self.window or len(self.slots) < self.sinks + self.window:
            self.slots.append(t)
        else:
            oldest = min(range(self.sinks, len(self.slots)), key=lambda j: self.slots[j])
            self.slots[oldest] = t


def stateless(scheme, m, q, lq):
    n = len(m.slots)
    item = {"scheme": scheme, "q": {"shape": [lq, H, D], "data": q},
            "k": {"shape": [n, HKV, D], "data": [x for t in m.slots for x in m.k[t]]},
            "v": {"shape": [n, HKV, DV], "data": [x for t in m.slots for x in m.v[t]]},
            "k_positions": list(m.slots),  # a token's position is its index
            "q_positions": [len(m.k) - lq + i for i in range(lq)],
            "causal": True, "return": ["output", "weights"]}
    st, ans = call("POST", "/v1/attention", {"inputs": [item]})
    assert st == 200, ans
    return ans["outputs"][0]


def infer(model, params, q, lq, ks=None, vs=None, outputs=("output", "weights")):
    inputs = [{"name": "q", "datatype": "FP32", "shape": [lq, H, D], "data": q}]
    if ks is not None:
        inputs += [{"name": "k", "datatype": "FP32", "shape": [len(ks), HKV, D],
                    "data": sum(ks, [])},
                   {"name": "v", "datatype": "FP32", "shape": [len(vs), HKV, DV],
                    "data": sum(vs, [])}]
    return call("POST", "/v2/models/%s/infer" % model,
                {"parameters": params, "inputs": inputs,
                 "outputs": [{"name": o} for o in outputs]})


class Sequences(unittest.TestCase):
    def step(self, model, scheme, m, rng, params, n=1, lq=1):
        ks = [rnd(rng, HKV * D) for _ in range(n)]
        vs = [rnd(rng, HKV * DV) for _ in range(n)]
        q = rnd(rng, lq * H * D)
        st, ans = infer(model, dict(params, causal=True), q, lq, ks, vs)
        self.assertEqual(st, 200, ans)
        for k, v in zip(ks, vs):
            m.append(k, v)
        want = stateless(scheme, m, q, lq)
        got = {o["name"]: o for o in ans["outputs"]}
        self.assertEqual(got["output"]["shape"], [lq, H, DV])
        self.assertEqual(got["output"]["data"], want["output"]["data"])
        self.assertEqual(got["weights"]["data"], want["weights"]["data"])

    def run_sequence(self, model, scheme, sid, session, start, rng, m, steps):
        self.step(model, scheme, m, rng, dict(start, sequence_id=sid, sequence_start=True),
                  n=5, lq=5)  # the prefill
        st, info = call("GET", "/v1/sessions/" + session)
        self.assertEqual(st, 200, info)
        self.assertEqual((info["length"], info["scheme"]), (len(m.slots), scheme["type"]))
        for _ in range(steps):
            self.step(model, scheme, m, rng, {"sequence_id": sid})
        self.step(model, scheme, m, rng, {"sequence_id": sid, "sequence_end": True})
        st, info = call("GET", "/v1/sessions/" + session)
        self.assertEqual(st, 404, info)
        return info

    def test_rope_integer_id(self):
        rng = random.Random(1)
        m = Model()
        self.run_sequence("attention-rope", {"type": "rope", "base": 500}, 42, "seq-42",
                          {"base": 500}, rng, m, 6)
        self.assertEqual(len(m.k), 12)

    def test_alibi_string_id_window(self):
        rng = random.Random(2)
        m = Model(sinks=1, window=4)
        before = alibi_steps()
        self.run_sequence("attention-alibi", {"type": "alibi"}, "chat-7.turn_1", "seq-chat-7.turn_1",
                          {"sequence_window": 4, "sequence_sinks": 1}, rng, m, 7)
        # Each step (the start's prefill, 7, the end's) is a session step.
        self.assertEqual(alibi_steps() - before, 9)

    def test_binary_tensors(self):
        # A start and a step whose q, k and v are binary (Triton's clients
        # send them so), the answer binary too; equal to the JSON steps'.
        rng = random.Random(4)
        m = Model()
        self.step("attention-none", {"type": "none"}, m, rng,
                  {"sequence_id": "bin", "sequence_start": True}, n=3, lq=3)
        q, k, v = rnd(rng, H * D), rnd(rng, HKV * D), rnd(rng, HKV * DV)
        m.append(k, v)
        want = stateless({"type": "none"}, m, q, 1)["output"]["data"]
        header = json.dumps({
            "parameters": {"sequence_id": "bin", "sequence_end": True, "causal": True,
                           "binary_data_output": True},
            "inputs": [{"name": n, "datatype": "FP32", "shape": s,
                        "parameters": {"binary_data_size": 4 * len(x)}}
                       for n, s, x in (("q", [1, H, D], q), ("k", [1, HKV, D], k),
                                       ("v", [1, HKV, DV], v))]}).encode()
        body = header + struct.pack("<%df" % (len(q) + len(k) + len(v)), *(q + k + v))
        req = urllib.request.Request(
            SRV.url + "/v2/models/attention-none/infer", data=body, method="POST",
            headers={"Content-Type": "application/octet-stream",
                     "Inference-Header-Content-Length": str(len(header))})
        with urllib.request.urlopen(req, timeout=60) as r:
            n = int(r.headers["Inference-Header-Content-Length"])
            raw = r.read()
        got = struct.unpack("<%df" % (H * DV), raw[n:])
        self.assertEqual(list(got), [struct.unpack("<f", struct.pack("<f", x))[0] for x in want])
        self.assertEqual(call("GET", "/v1/sessions/seq-bin")[0], 404)

    def test_server_metadata(self):
        st, meta = call("GET", "/v2")
        self.assertEqual(st, 200)
        self.assertIn("sequence", meta["extensions"])
        self.assertIn("sequence(string_id)", meta["extensions"])

    def test_defaults_and_refusals(self):
        rng = random.Random(3)
        q1 = rnd(rng, H * D)
        k1, v1 = [rnd(rng, HKV * D)], [rnd(rng, HKV * DV)]
        # Unknown id without a start: 404 naming sequence_id.
        st, ans = infer("attention-rope", {"sequence_id": 999}, q1, 1, k1, v1)
        self.assertEqual(st, 404, ans)
        self.assertIn("sequence_id", ans["error"])
        self.assertIn("sequence_start", ans["error"])
        # A start; the session has the default max_tokens.
        st, ans = infer("attention-rope", {"sequence_id": 7, "sequence_start": True}, q1, 1, k1, v1)
        self.assertEqual(st, 200, ans)
        st, info = call("GET", "/v1/sessions/seq-7")
        self.assertEqual((st, info["max_tokens"], info["length"]), (200, 4096, 1), info)
        self.assertEqual((info["num_kv_heads"], info["head_dim"], info["v_head_dim"]), (HKV, D, DV))
        # A second start on the live id: 409, the sequence as it was.
        st, ans = infer("attention-rope", {"sequence_id": 7, "sequence_start": True}, q1, 1, k1, v1)
        self.assertEqual(st, 409, ans)
        self.assertIn("sequence_id=7", ans["error"])
        st, info = call("GET", "/v1/sessions/seq-7")
        self.assertEqual(info["length"], 1)
        # A step sent to another scheme's model.
        st, ans = infer("attention-alibi", {"sequence_id": 7}, q1, 1, k1, v1)
        self.assertEqual(st, 400, ans)
        self.assertIn("attention-rope", ans["error"])
        # A scheme parameter after the start.
        st, ans = infer("attention-rope", {"sequence_id": 7, "base": 10}, q1, 1, k1, v1)
        self.assertEqual(st, 400, ans)
        self.assertIn("parameters.base", ans["error"])
        # A step without new tokens reads the sequence; then end it.
        st, ans = infer("attention-rope", {"sequence_id": 7, "sequence_end": True}, q1, 1)
        self.assertEqual(st, 200, ans)
        self.assertEqual(call("GET", "/v1/sessions/seq-7")[0], 404)
        # A refused start (q's head_dim) leaves no session behind.
        st, ans = call("POST", "/v2/models/attention-rope/infer", {
            "parameters": {"sequence_id": "x", "sequence_start": True},
            "inputs": [{"name": "q", "datatype": "FP32", "shape": [1, H, 4], "data": [0.0] * (H * 4)},
                       {"name": "k", "datatype": "FP32", "shape": [1, HKV, D], "data": k1[0]},
                       {"name": "v", "datatype": "FP32", "shape": [1, HKV, DV], "data": v1[0]}]})
        self.assertEqual(st, 400, ans)
        self.assertEqual(call("GET", "/v1/sessions/seq-x")[0], 404)
        # Bad ids and parameters without an id.
        # 0 and "" are no sequence (Triton): a stateless request.
        st, ans = infer("attention-rope", {"sequence_id": 0}, q1, 1, k1, v1)
        self.assertEqual(st, 200, ans)
        for params, word in [({"sequence_id": 0, "sequence_start": True}, "not 0"),
                             ({"sequence_id": -3}, "sequence_id"),
                             ({"sequence_id": "a/b"}, "sequence_id"),
                             ({"sequence_id": 1.5}, "sequence_id"),
                             ({"sequence_start": True}, "sequence_id too"),
                             ({"sequence_id": 8, "sequence_window": 4}, "sequence_start"),
                             ({"sequence_id": 8, "sequence_start": True, "sequence_sinks": 1},
                              "sequence_window")]:
            with self.subTest(params=params):
                st, ans = infer("attention-rope", params, q1, 1, k1, v1)
                self.assertEqual(st, 400, ans)
                self.assertIn(word, ans["error"])
        self.assertEqual(call("GET", "/v1/sessions/seq-8")[0], 404)


if __name__ == "__main__":
    unittest.main()
