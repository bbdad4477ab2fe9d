#!/usr/bin/python3
"""session_attention.py - /v1/attention items that name a session
(docs/sessions.md, "Attention over a session"), over HTTP.

Starts its own posattnd (tests/posattnd.py), then for each scheme (rope
kept rotated, rope with dynamic scaling kept as sent, alibi, none) and
each eviction (none; a window with sinks; the window with reposition),
runs decode steps, each one request: {"session", "append": one token's k
and v, "q"}. Every step's output and weights must equal, bit for bit, the
stateless request that sends the session's retained tokens as they were
appended, in the session's slot order, at its positions (the test keeps
its own model of what a window retains: the first `sinks` tokens, then
the newest `window` ones in a ring of slots, and with reposition the
sinks' positions shifted by the window's oldest position minus sinks).
Also: a fork answers as its parent did and then diverges; a prefill
append of many tokens in one item; a query without an append (the
default position follows the last token); and refusals naming the field
(k with a session, a q of the wrong head_dim, an unknown session, the
append of a full session). The binary is $POSATTND (default
build/posattnd). Part of make test's e2e-clients.
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
H, HKV, D, DV = 4, 2, 8, 8


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


def tensor(shape, data):
    return {"shape": list(shape), "data": data}


def rnd(rng, n):
    # three decimals: the same text reaches the server in both requests
    return [round(rng.uniform(-1, 1), 3) for _ in range(n)]


SCHEMES = {
    "rope": {"type": "rope", "layout": "gptj"},
    "rope_dynamic": {"type": "rope", "scaling": "dynamic", "factor": 2.0,
                     "original_max_position": 16},
    "alibi": {"type": "alibi"},
    "none": {"type": "none"},
}


class Model:
    """The tokens a session retains, slot by slot (kv_cache.h)."""

    def __init__(self, sinks=0, window=0, reposition=False):
        self.sinks, self.window, self.reposition = sinks, window, reposition
        self.k, self.v, self.pos = [], [], []  # every appended token
        self.slots = []  # slot -> token index

    def append(self, k, v):
        t = len(self.k)
        self.k.append(k)
        self.v.append(v)
        self.pos.append(t)
        if not self.window or len(self.slots) < self.sinks + self.window:
            self.slots.append(t)
        else:
            oldest = min(range(self.sinks, len(self.slots)), key=lambda j: self.slots[j])
            self.slots[oldest] = t

    def positions(self):
        full = self.window and len(self.slots) == self.sinks + self.window
        shift = 0
        if self.reposition and full:
            shift = min(self.pos[self.slots[j]] for j in range(self.sinks, len(self.slots))) \
                - self.sinks
        return [self.pos[t] + (shift if j < self.sinks else 0) for j, t in enumerate(self.slots)]


def stateless(scheme, m, q, lq):
    n = len(m.slots)
    item = {"scheme": scheme, "q": tensor([lq, H, D], q),
            "k": tensor([n, HKV, D], [x for t in m.slots for x in m.k[t]]),
            "v": tensor([n, HKV, DV], [x for t in m.slots for x in m.v[t]]),
            "k_positions": m.positions(),
            "q_positions": [len(m.k) - lq + i for i in range(lq)],
            "causal": True, "return": ["output", "weights"]}
    st, ans = call("POST", "/v1/attention", {"inputs": [item]})
    assert st == 200, ans
    return ans["outputs"][0]


def create(scheme, eviction, max_tokens=400, dtype="f32"):
    st, ans = call("POST", "/v1/sessions", {"scheme": scheme, "num_kv_heads": HKV, "head_dim": D,
                                            "v_head_dim": DV, "max_tokens": max_tokens,
                                            "eviction": eviction, "dtype": dtype})
    assert st == 201, ans
    return ans["id"]


class SessionAttention(unittest.TestCase):
    def step(self, sid, scheme, m, rng, n=1, lq=1):
        ks = [rnd(rng, HKV * D) for _ in range(n)]
        vs = [rnd(rng, HKV * DV) for _ in range(n)]
        q = rnd(rng, lq * H * D)
        item = {"session": sid, "q": tensor([lq, H, D], q),
                "append": {"k": tensor([n, HKV, D], sum(ks, [])),
                           "v": tensor([n, HKV, DV], sum(vs, []))},
                "causal": True, "return": ["output", "weights"]}
        st, ans = call("POST", "/v1/attention", {"inputs": [item]})
        self.assertEqual(st, 200, ans)
        got = ans["outputs"][0]
        self.assertNotIn("error", got, got)
        for k, v in zip(ks, vs):
            m.append(k, v)
        want = stateless(scheme, m, q, lq)
        self.assertEqual(got["output"]["data"], want["output"]["data"])
        self.assertEqual(got["weights"]["data"], want["weights"]["data"])

    def test_every_scheme_and_eviction(self):
        evictions = [({"type": "none"}, Model()),
                     ({"type": "window", "window": 6, "sinks": 2}, Model(2, 6)),
                     ({"type": "window", "window": 6, "sinks": 2, "reposition": True},
                      Model(2, 6, True))]
        for name, scheme in SCHEMES.items():
            for ev, proto in evictions:
                if name == "rope_dynamic" and ev.get("reposition"):
                    continue  # refused: its frequencies follow the largest position
                with self.subTest(scheme=name, eviction=ev):
                    rng = random.Random(hash((name, json.dumps(ev))) & 0xffff)
                    m = Model(proto.sinks, proto.window, proto.reposition)
                    sid = create(scheme, ev)
                    self.step(sid, scheme, m, rng, n=5, lq=2)  # a short prefill
                    for _ in range(12):  # decode, past the window
                        self.step(sid, scheme, m, rng)
                    call("DELETE", "/v1/sessions/" + sid)

    def test_fork_and_default_position(self):
        scheme = SCHEMES["rope"]
        rng = random.Random(7)
        m = Model()
        sid = create(scheme, {"type": "none"})
        self.step(sid, scheme, m, rng, n=20, lq=3)
        st, ans = call("POST", "/v1/sessions/%s/fork" % sid)
        self.assertEqual(st, 201, ans)
        kid = ans["id"]
        # No append: the query sits at the last token's position.
        q = rnd(rng, H * D)
        outs = []
        for s in (sid, kid):
            st, ans = call("POST", "/v1/attention", {"inputs": [
                {"session": s, "q": tensor([1, H, D], q), "causal": True}]})
            self.assertEqual(st, 200, ans)
            outs.append(ans["outputs"][0]["output"]["data"])
        self.assertEqual(outs[0], outs[1])
        self.assertEqual(outs[0], stateless(scheme, m, q, 1)["output"]["data"])
        # The fork diverges; the parent is unchanged by it.
        mk = Model()
        mk.k, mk.v, mk.pos, mk.slots = list(m.k), list(m.v), list(m.pos), list(m.slots)
        self.step(kid, scheme, mk, rng)
        self.step(sid, scheme, m, rng)
        st, a = call("GET", "/v1/sessions/" + sid)
        st, b = call("GET", "/v1/sessions/" + kid)
        self.assertEqual((a["length"], b["length"]), (21, 21))

    def test_list_of_sessions(self):
        """One item over three sessions of one scheme and other lengths and
        evictions: each sequence equals the stateless request over its own
        session; the keys past a shorter session's are padding (weight 0,
        logit -inf, k_rot 0)."""
        scheme = SCHEMES["rope"]
        rng = random.Random(11)
        evs = [({"type": "none"}, Model()),
               ({"type": "window", "window": 6, "sinks": 2}, Model(2, 6)),
               ({"type": "window", "window": 6, "sinks": 2, "reposition": True},
                Model(2, 6, True))]
        sids, models = [], []
        for (ev, proto), n in zip(evs, (9, 3, 12)):
            m = Model(proto.sinks, proto.window, proto.reposition)
            sid = create(scheme, ev)
            self.step(sid, scheme, m, rng, n=n, lq=1)
            sids.append(sid)
            models.append(m)
        for _ in range(3):
            ks = [rnd(rng, HKV * D) for _ in sids]
            vs = [rnd(rng, HKV * DV) for _ in sids]
            qs = [rnd(rng, H * D) for _ in sids]
            item = {"session": sids, "q": tensor([3, 1, H, D], sum(qs, [])),
                    "append": {"k": tensor([3, 1, HKV, D], sum(ks, [])),
                               "v": tensor([3, 1, HKV, DV], sum(vs, []))},
                    "causal": True, "return": ["output", "weights", "logits", "k_rot"]}
            st, ans = call("POST", "/v1/attention", {"inputs": [item]})
            self.assertEqual(st, 200, ans)
            got = ans["outputs"][0]
            self.assertNotIn("error", got, got)
            for m, k, v in zip(models, ks, vs):
                m.append(k, v)
            lk = max(len(m.slots) for m in models)
            self.assertEqual(got["weights"]["shape"], [3, H, 1, lk])
            self.assertEqual(got["k_rot"]["shape"], [3, lk, HKV, D])
            for b, m in enumerate(models):
                n = len(m.slots)
                want = stateless(scheme, m, qs[b], 1)
                self.assertEqual(got["output"]["data"][b * H * DV:(b + 1) * H * DV],
                                 want["output"]["data"])
                w = got["weights"]["data"][b * H * lk:(b + 1) * H * lk]
                lg = got["logits"]["data"][b * H * lk:(b + 1) * H * lk]
                for h in range(H):
                    self.assertEqual(w[h * lk:h * lk + n], want["weights"]["data"][h * n:(h + 1) * n])
                    self.assertEqual(w[h * lk + n:(h + 1) * lk], [0] * (lk - n))
                    self.assertTrue(all(x is None or x == "-inf" or x < -1e30
                                        for x in lg[h * lk + n:(h + 1) * lk]), lg)
                kr = got["k_rot"]["data"][b * lk * HKV * D:(b + 1) * lk * HKV * D]
                self.assertEqual(kr[n * HKV * D:], [0] * ((lk - n) * HKV * D))
        # Refusals: a 3-D q, a session twice, another scheme, a mask.
        other = create(SCHEMES["alibi"], {"type": "none"})
        q3 = tensor([1, H, D], [0.0] * (H * D))
        q4 = tensor([2, 1, H, D], [0.0] * (2 * H * D))
        cases = [({"session": sids[:2], "q": q3}, "SHAPE_MISMATCH", "inputs[0].q.shape"),
                 ({"session": [sids[0], sids[0]], "q": q4}, "INVALID_ARGUMENT",
                  "inputs[0].session[1]"),
                 ({"session": [sids[0], other], "q": q4}, "INVALID_ARGUMENT",
                  "inputs[0].session[1]"),
                 ({"session": [sids[0], "nope"], "q": q4}, "SESSION_NOT_FOUND",
                  "inputs[0].session[1]"),
                 ({"session": sids[:2], "q": q4, "mask": tensor([1, 1], [1])}, "UNSUPPORTED",
                  "inputs[0].mask"),
                 ({"session": sids[:3], "q": q4}, "SHAPE_MISMATCH", "inputs[0].q.shape[0]")]
        for item, code, field in cases:
            with self.subTest(field=field, code=code):
                st, ans = call("POST", "/v1/attention", {"inputs": [item]})
                err = ans["outputs"][0]["error"] if "outputs" in ans else ans["error"]
                self.assertEqual((err["code"], err["field"]), (code, field), ans)
        for sid in sids + [other]:
            call("DELETE", "/v1/sessions/" + sid)

    def test_storage_types(self):
        """Sessions stored in bf16 and f16: each step equals the stateless
        request over the stored keys and values widened, the keys as the
        session keeps them (k_rot, rotated in float32 and then rounded:
        checked against the float32 session's k_rot rounded here), values
        rounded to nearest even."""
        def f32(x):
            return struct.unpack("<f", struct.pack("<f", x))[0]

        def bf16(x):
            u = struct.unpack("<I", struct.pack("<f", x))[0]
            u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
            return struct.unpack("<f", struct.pack("<I", u))[0]

        def f16(x):
            return struct.unpack("<e", struct.pack("<e", f32(x)))[0]

        for dtype, rnd16 in (("bf16", bf16), ("f16", f16)):
            for name in ("rope", "alibi"):
                with self.subTest(dtype=dtype, scheme=name):
                    scheme = SCHEMES[name]
                    rng = random.Random(5)
                    sid, ref = create(scheme, {"type": "none"}, dtype=dtype), \
                        create(scheme, {"type": "none"})
                    st, info = call("GET", "/v1/sessions/" + sid)
                    self.assertEqual(info["dtype"], dtype)
                    vs = []
                    for step in range(4):
                        n = 6 if step == 0 else 1
                        k = rnd(rng, n * HKV * D)
                        v = rnd(rng, n * HKV * DV)
                        q = rnd(rng, H * D)
                        vs += v
                        got = []
                        for s_ in (sid, ref):
                            item = {"session": s_, "q": tensor([1, H, D], q),
                                    "append": {"k": tensor([n, HKV, D], k),
                                               "v": tensor([n, HKV, DV], v)},
                                    "causal": True, "return": ["output", "weights", "k_rot"]}
                            st, ans = call("POST", "/v1/attention", {"inputs": [item]})
                            self.assertEqual(st, 200, ans)
                            self.assertNotIn("error", ans["outputs"][0], ans)
                            got.append(ans["outputs"][0])
                        kr16, kr32 = got[0]["k_rot"]["data"], got[1]["k_rot"]["data"]
                        self.assertEqual([f32(x) for x in kr16], [rnd16(f32(x)) for x in kr32])
                        lk = len(kr16) // (HKV * D)
                        want = {"scheme": scheme, "q": tensor([1, H, D], q),
                                "k": tensor([lk, HKV, D], kr16), "k_prerotated": True,
                                "v": tensor([lk, HKV, DV], [rnd16(f32(x)) for x in vs]),
                                "q_positions": [lk - 1], "causal": True,
                                "return": ["output", "weights"]}
                        if name != "rope":
                            del want["k_prerotated"]
                        st, ans = call("POST", "/v1/attention", {"inputs": [want]})
                        self.assertEqual(st, 200, ans)
                        self.assertEqual(got[0]["output"]["data"],
                                         ans["outputs"][0]["output"]["data"])
                        self.assertEqual(got[0]["weights"]["data"],
                                         ans["outputs"][0]["weights"]["data"])
                    call("DELETE", "/v1/sessions/" + sid)
                    call("DELETE", "/v1/sessions/" + ref)

    def test_refusals(self):
        sid = create(SCHEMES["alibi"], {"type": "none"}, max_tokens=2)
        q = tensor([1, H, D], [0.0] * (H * D))
        kv = {"k": tensor([1, HKV, D], [0.0] * (HKV * D)),
              "v": tensor([1, HKV, DV], [0.0] * (HKV * DV))}
        cases = [
            ({"session": sid, "q": q, **kv}, 400, "INVALID_ARGUMENT", "inputs[0].k"),
            ({"session": sid, "q": tensor([1, H, 4], [0.0] * (H * 4)), "append": kv}, 400,
             "SHAPE_MISMATCH", "inputs[0].q.shape[2]"),
            ({"session": "nope", "q": q}, 404, "SESSION_NOT_FOUND", "inputs[0].session"),
            ({"session": sid, "q": q}, 400, "INVALID_ARGUMENT", "inputs[0].session"),  # empty
            ({"session": sid, "q": q, "scheme": {"type": "rope"}}, 400, "INVALID_ARGUMENT",
             "inputs[0].scheme"),
        ]
        for item, status, code, field in cases:
            with self.subTest(field=field):
                st, ans = call("POST", "/v1/attention", {"inputs": [item]})
                err = ans["outputs"][0]["error"] if "outputs" in ans else ans["error"]
                self.assertEqual((err["code"], err["field"]), (code, field), ans)
        # Full: two tokens fit, a third is SESSION_FULL and leaves it at two.
        item = {"session": sid, "q": q,
                "append": {"k": tensor([2, HKV, D], [0.1] * (2 * HKV * D)),
                           "v": tensor([2, HKV, DV], [0.1] * (2 * HKV * DV))}}
        st, ans = call("POST", "/v1/attention", {"inputs": [item]})
        self.assertNotIn("error", ans["outputs"][0], ans)
        item["append"] = kv
        st, ans = call("POST", "/v1/attention", {"inputs": [item]})
        self.assertEqual(ans["outputs"][0]["error"]["code"], "SESSION_FULL", ans)
        st, info = call("GET", "/v1/sessions/" + sid)
        self.assertEqual(info["length"], 2)


if __name__ == "__main__":
    unittest.main()
