#!/usr/bin/python3
"""session_models.py - sessions made from a served model's layer
(POST /v1/sessions with "model" and "layer", docs/sessions.md), and the
decode-step histogram posattn_session_step_duration_seconds, over HTTP.

Starts posattnd (tests/posattnd.py) with --model configs (the fixtures of
tests/fixtures/models/, gemma2's and gpt_oss's with a sliding window of 3
tokens so that it matters within a few steps) and --cache-dir on a
temporary folder, then:
  - a session of each layer tried (Gemma 2's sliding and global layers,
    softcap and query_pre_attn_scalar; Llama 4's NoPE layer with attention
    temperature tuning; gpt-oss's sliding and full layers with sinks) takes
    its scheme and dims from the config, shows "model" and "layer", and
    every step (a prefill of 5 tokens with 2 queries, then decode steps,
    one request each: {"session", "append", "q"}) answers bit for bit what
    the stateless item {"model", "layer"} with the session's retained
    tokens, at their positions, answers (output and weights); a window
    eviction without a window takes the layer's sliding window;
  - refusals name their field with the right status: a layer out of range
    or missing, dims that disagree with the config, "scheme" with "model",
    an unknown model, "layer" without "model", an inline config, layers a
    session cannot keep (MLA, T5's table); on an item over such a session,
    "model", "layer", an option the config decides (unless "override"), a
    tensor the layer needs;
  - the step histogram counts each step of a session by its scheme (and
    nothing for stateless items or failed steps);
  - after SIGTERM and a start on the same folder, the sessions are back
    with their model and layer and go on equal to the stateless item; a
    start without the model skips the file (stderr names why) and leaves it.
The binary is $POSATTND (default build/posattnd). Part of make test's
e2e-clients.
"""
import copy
import json
import os
import random
import re
import shutil
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import posattnd  # noqa: E402

BIN = os.environ.get("POSATTND", "build/posattnd")
FIXTURES = os.path.join(HERE, "..", "fixtures", "models")
H, HKV, D = 4, 2, 16  # every fixture used here
STATE = {}


def fixture(name):
    with open(os.path.join(FIXTURES, name + ".json")) as f:
        return json.load(f)


def setUpModule():
    tmp = tempfile.mkdtemp(prefix="posattn-session-models.")
    STATE["tmp"] = tmp
    STATE["dir"] = os.path.join(tmp, "cache")
    os.mkdir(STATE["dir"])
    configs = {"g2": fixture("gemma2"), "l4": fixture("llama4"), "oss": fixture("gpt_oss"),
               "ds": fixture("deepseek_v3"), "t5": fixture("t5")}
    configs["g3"] = fixture("gemma3")
    configs["g2"]["sliding_window"] = 3
    configs["oss"]["sliding_window"] = 3
    configs["g3"]["text_config"]["sliding_window"] = 3
    models = []
    for name, cfg in configs.items():
        path = os.path.join(tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        models += ["--model", "%s=%s" % (name, path)]
    STATE["models"] = models
    STATE["srv"] = start(models)


def start(models):
    return posattnd.start(BIN, ["--workers", "2", "--session-ttl", "0", "--cache-mb", "64",
                                "--cache-dir", STATE["dir"]] + models)


def tearDownModule():
    srv = STATE.pop("srv", None)
    if srv is not None:
        srv.stop(check=True)
    shutil.rmtree(STATE["tmp"], ignore_errors=True)


def call(method, path, body=None, srv=None):
    srv = srv or STATE["srv"]
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(srv.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text, st = r.read(), r.status
    except urllib.error.HTTPError as e:
        text, st = e.read(), e.code
    if path == "/metrics":
        return st, text.decode()
    return st, json.loads(text)


def tensor(shape, data):
    return {"shape": list(shape), "data": data}


def rnd(rng, n):
    # three decimals: the same text reaches the server in both requests
    return [round(rng.uniform(-1, 1), 3) for _ in range(n)]


class Kept:
    """The tokens a session retains, slot by slot (as session_attention.py's
    Model): eviction none, or a window of `window` tokens without sinks."""

    def __init__(self, window=0):
        self.window = window
        self.k, self.v, self.slots = [], [], []

    def append(self, k, v):
        t = len(self.k)
        self.k.append(k)
        self.v.append(v)
        if not self.window or len(self.slots) < self.window:
            self.slots.append(t)
        else:  # the ring: the oldest slot takes the new token
            self.slots[min(range(len(self.slots)), key=lambda j: self.slots[j])] = t


def stateless(model, layer, kept, q, lq, extra, srv=None):
    n = len(kept.slots)
    item = {"model": model, "layer": layer, "q": tensor([lq, H, D], q),
            "k": tensor([n, HKV, D], [x for t in kept.slots for x in kept.k[t]]),
            "v": tensor([n, HKV, D], [x for t in kept.slots for x in kept.v[t]]),
            "k_positions": list(kept.slots),
            "q_positions": [len(kept.k) - lq + i for i in range(lq)],
            "return": ["output", "weights"], **extra}
    st, ans = call("POST", "/v1/attention", {"inputs": [item]}, srv)
    assert st == 200, ans
    return ans["outputs"][0]


def sinks_of(model):
    # gpt-oss's layers need their attention sinks ([H]); the others none
    return {"sinks": tensor([H], [0.5, -1.0, 0.25, 2.0])} if model == "oss" else {}


def metric(text, series):
    m = re.search("^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def steps_count(scheme):
    st, text = call("GET", "/metrics")
    assert st == 200
    return metric(text, 'posattn_session_step_duration_seconds_count{scheme="%s"}' % scheme)


class SessionModels(unittest.TestCase):
    def step(self, sid, model, layer, kept, rng, n=1, lq=1, srv=None):
        ks = [rnd(rng, HKV * D) for _ in range(n)]
        vs = [rnd(rng, HKV * D) for _ in range(n)]
        q = rnd(rng, lq * H * D)
        item = {"session": sid, "q": tensor([lq, H, D], q),
                "append": {"k": tensor([n, HKV, D], sum(ks, [])),
                           "v": tensor([n, HKV, D], sum(vs, []))},
                "return": ["output", "weights"], **sinks_of(model)}
        st, ans = call("POST", "/v1/attention", {"inputs": [item]}, srv)
        self.assertEqual(st, 200, ans)
        got = ans["outputs"][0]
        self.assertNotIn("error", got, got)
        for k, v in zip(ks, vs):
            kept.append(k, v)
        want = stateless(model, layer, kept, q, lq, sinks_of(model), srv)
        self.assertEqual(got["output"]["data"], want["output"]["data"])
        self.assertEqual(got["weights"]["data"], want["weights"]["data"])

    def create(self, body, srv=None):
        st, s = call("POST", "/v1/sessions", body, srv)
        self.assertEqual(st, 201, s)
        return s

    def test_every_layer_equals_the_stateless_model_item(self):
        cases = [("g2", 0, "rope"), ("g2", 1, "rope"), ("l4", 3, "none"), ("oss", 0, "rope"),
                 ("oss", 1, "rope")]
        for model, layer, scheme in cases:
            with self.subTest(model=model, layer=layer):
                rng = random.Random(layer * 31 + len(model))
                before = steps_count(scheme)
                s = self.create({"model": model, "layer": layer, "max_tokens": 64})
                self.assertEqual((s["model"], s["layer"], s["scheme"]), (model, layer, scheme))
                self.assertEqual((s["num_kv_heads"], s["head_dim"], s["v_head_dim"]),
                                 (HKV, D, D))
                st, got = call("GET", "/v1/sessions/" + s["id"])
                self.assertEqual((got["model"], got["layer"]), (model, layer))
                kept = Kept()
                self.step(s["id"], model, layer, kept, rng, n=5, lq=2)
                for _ in range(6):
                    self.step(s["id"], model, layer, kept, rng)
                self.assertEqual(steps_count(scheme) - before, 7)
                call("DELETE", "/v1/sessions/" + s["id"])

    def test_gemma3_local_and_global_rope(self):
        # Gemma 3's sliding layers rotate with rope_local_base_freq, its
        # global layer with rope_theta and linear scaling: each session keeps
        # its layer's. Its keys are appended after k_norm (a cache holds
        # them so): the session's items take the layer's options but k_norm,
        # so they equal the item with the layer's options written out (GET
        # /v1/models) without k_norm.
        st, models = call("GET", "/v1/models")
        runs = next(m for m in models["models"] if m["name"] == "g3")["layers"]
        qw = tensor([D], [0.5 + 0.05 * i for i in range(D)])
        for layer in (0, 5):
            with self.subTest(layer=layer):
                run = next(r for r in runs if r["first_layer"] <= layer <= r["last_layer"])
                opts = {k: run[k] for k in ("scheme", "scale", "window", "causal") if k in run}
                opts["q_norm"] = dict(run["q_norm"], weight=qw)
                self.assertIn("k_norm", run)
                s = self.create({"model": "g3", "layer": layer, "max_tokens": 32})
                rng, kept = random.Random(layer), Kept()
                for n, lq in ((4, 2), (1, 1), (1, 1), (1, 1)):
                    ks = [rnd(rng, HKV * D) for _ in range(n)]
                    vs = [rnd(rng, HKV * D) for _ in range(n)]
                    q = rnd(rng, lq * H * D)
                    item = {"session": s["id"], "q": tensor([lq, H, D], q),
                            "append": {"k": tensor([n, HKV, D], sum(ks, [])),
                                       "v": tensor([n, HKV, D], sum(vs, []))},
                            "q_norm": {"weight": qw}, "return": ["output", "weights"]}
                    st, ans = call("POST", "/v1/attention", {"inputs": [item]})
                    self.assertNotIn("error", ans["outputs"][0], ans)
                    for k, v in zip(ks, vs):
                        kept.append(k, v)
                    m = len(kept.slots)
                    hand = {**opts, "q": tensor([lq, H, D], q),
                            "k": tensor([m, HKV, D], sum(kept.k, [])),
                            "v": tensor([m, HKV, D], sum(kept.v, [])),
                            "k_positions": list(range(m)),
                            "q_positions": [m - lq + i for i in range(lq)],
                            "return": ["output", "weights"]}
                    st, want = call("POST", "/v1/attention", {"inputs": [hand]})
                    self.assertEqual(st, 200, want)
                    self.assertEqual(ans["outputs"][0]["output"]["data"],
                                     want["outputs"][0]["output"]["data"])
                    self.assertEqual(ans["outputs"][0]["weights"]["data"],
                                     want["outputs"][0]["weights"]["data"])
                call("DELETE", "/v1/sessions/" + s["id"])

    def test_sliding_layer_window_eviction(self):
        # A window eviction without a window keeps the layer's sliding
        # window (3): each decode step equals the stateless model item.
        s = self.create({"model": "g2", "layer": 0, "eviction": {"type": "window"}})
        self.assertEqual((s["eviction"]["window"], s["eviction"]["sinks"], s["max_tokens"]),
                         (3, 0, 3))
        rng, kept = random.Random(5), Kept(window=3)
        for _ in range(8):
            self.step(s["id"], "g2", 0, kept, rng)
        st, got = call("GET", "/v1/sessions/" + s["id"])
        self.assertEqual((got["length"], got["eviction"]["evicted"]), (3, 5))
        # A global layer has no window to default to.
        st, ans = call("POST", "/v1/sessions", {"model": "g2", "layer": 1,
                                                "eviction": {"type": "window"}})
        self.assertEqual((st, ans["error"]["field"]), (400, "eviction.window"), ans)
        call("DELETE", "/v1/sessions/" + s["id"])

    def test_dims_given_agree(self):
        s = self.create({"model": "g2", "layer": 1, "num_kv_heads": HKV, "head_dim": D,
                         "v_head_dim": D, "max_tokens": 8, "id": "agree.g2"})
        self.assertEqual(s["id"], "agree.g2")
        call("DELETE", "/v1/sessions/agree.g2")

    def test_create_refusals(self):
        base = {"model": "g2", "layer": 0, "max_tokens": 8}
        cases = [
            ({**base, "layer": 4}, 400, "OUT_OF_RANGE", "layer", ["layer=4", "0 to 3"]),
            ({"model": "g2", "max_tokens": 8}, 400, "INVALID_ARGUMENT", "layer", ["required"]),
            ({**base, "num_kv_heads": 4}, 400, "SHAPE_MISMATCH", "num_kv_heads",
             ["num_kv_heads=4", "the 2 of", "num_key_value_heads"]),
            ({**base, "head_dim": 8}, 400, "SHAPE_MISMATCH", "head_dim",
             ["head_dim=8", "the 16 of"]),
            ({**base, "v_head_dim": 32}, 400, "SHAPE_MISMATCH", "v_head_dim",
             ["v_head_dim=32", "the 16 of"]),
            ({**base, "scheme": {"type": "rope"}}, 400, "INVALID_ARGUMENT", "scheme",
             ["not both"]),
            ({**base, "model": "nope"}, 400, "UNKNOWN_MODEL", "model", ['"nope"', "loaded: g2"]),
            ({"scheme": {"type": "alibi"}, "layer": 0, "num_kv_heads": 1, "head_dim": 2,
              "max_tokens": 4}, 400, "INVALID_ARGUMENT", "layer", ["applies to a model"]),
            ({**base, "model": fixture("gemma2")}, 400, "INVALID_ARGUMENT", "model",
             ["loaded with --model"]),
            ({**base, "model": "ds"}, 400, "UNSUPPORTED", "model", ["MLA"]),
            ({**base, "model": "t5"}, 400, "UNSUPPORTED", "model", ["scheme.table"]),
            ({**base, "stack": "text"}, 400, "UNKNOWN_FIELD", "stack", []),
        ]
        for body, status, code, field, texts in cases:
            with self.subTest(field=field, code=code):
                st, ans = call("POST", "/v1/sessions", body)
                self.assertEqual((st, ans["error"]["code"], ans["error"]["field"]),
                                 (status, code, field), ans)
                for t in texts:
                    self.assertIn(t, ans["error"]["message"])

    def test_item_refusals_and_override(self):
        s = self.create({"model": "g2", "layer": 0, "max_tokens": 8})
        o = self.create({"model": "oss", "layer": 1, "max_tokens": 8})
        q = tensor([1, H, D], [0.1] * (H * D))
        kv = {"k": tensor([1, HKV, D], [0.2] * (HKV * D)),
              "v": tensor([1, HKV, D], [0.3] * (HKV * D))}
        cases = [
            ({"session": s["id"], "q": q, "model": "g2"}, "INVALID_ARGUMENT", "model",
             "leave \"model\" out"),
            ({"session": s["id"], "q": q, "layer": 1}, "INVALID_ARGUMENT", "layer",
             "is the session's"),
            ({"session": s["id"], "q": q, "append": kv, "softcap": 5.0}, "INVALID_ARGUMENT",
             "softcap", "attn_logit_softcapping"),
            ({"session": o["id"], "q": q, "append": kv}, "INVALID_ARGUMENT", "sinks",
             "give \"sinks\" [4]"),
            ({"session": s["id"], "q": tensor([1, 2, D], [0.1] * (2 * D)), "append": kv},
             "SHAPE_MISMATCH", "q.shape", "4 heads"),
        ]
        before = steps_count("rope")
        for item, code, field, text in cases:
            with self.subTest(field=field):
                st, ans = call("POST", "/v1/attention", {"inputs": [item]})
                err = ans["outputs"][0]["error"]
                self.assertEqual((err["code"], err["field"]), (code, "inputs[0]." + field), ans)
                self.assertIn(text, err["message"])
        # Nothing was appended by the refused items, and no step counted.
        st, got = call("GET", "/v1/sessions/" + s["id"])
        self.assertEqual(got["length"], 0)
        self.assertEqual(steps_count("rope"), before)
        # "override" replaces an option the config decides: as the
        # stateless item with the same override.
        item = {"session": s["id"], "q": q, "append": kv, "softcap": 5.0, "override": True}
        st, ans = call("POST", "/v1/attention", {"inputs": [item]})
        self.assertNotIn("error", ans["outputs"][0], ans)
        kept = Kept()
        kept.append(kv["k"]["data"], kv["v"]["data"])
        want = stateless("g2", 0, kept, q["data"], 1, {"softcap": 5.0, "override": True})
        self.assertEqual(ans["outputs"][0]["output"]["data"], want["output"]["data"])
        self.assertEqual(steps_count("rope"), before + 1)
        for x in (s, o):
            call("DELETE", "/v1/sessions/" + x["id"])

    def test_stateless_items_are_not_steps(self):
        before = steps_count("rope")
        kept, rng = Kept(), random.Random(3)
        kept.append(rnd(rng, HKV * D), rnd(rng, HKV * D))
        stateless("g2", 1, kept, rnd(rng, H * D), 1, {})
        self.assertEqual(steps_count("rope"), before)
        st, text = call("GET", "/metrics")
        self.assertIn("# TYPE posattn_session_step_duration_seconds histogram", text)

    def test_restart(self):
        rng = random.Random(11)
        runs = []
        for model, layer in (("g2", 0), ("l4", 3), ("oss", 0)):
            s = self.create({"model": model, "layer": layer, "max_tokens": 64,
                             "id": "restart-%s-%d" % (model, layer)})
            kept = Kept()
            self.step(s["id"], model, layer, kept, rng, n=4, lq=2)
            self.step(s["id"], model, layer, kept, rng)
            runs.append((s["id"], model, layer, kept))
        st, fork = call("POST", "/v1/sessions/restart-g2-0/fork")
        self.assertEqual(st, 201, fork)
        self.assertEqual((fork["model"], fork["layer"]), ("g2", 0))
        fkept = copy.deepcopy(runs[0][3])
        runs.append((fork["id"], "g2", 0, fkept))
        before = {sid: call("GET", "/v1/sessions/" + sid)[1] for sid, *_ in runs}

        STATE["srv"].stop(check=True)
        STATE["srv"] = start(STATE["models"])
        for sid, model, layer, kept in runs:
            with self.subTest(session=sid):
                st, got = call("GET", "/v1/sessions/" + sid)
                self.assertEqual(st, 200, got)
                for k in ("model", "layer", "scheme", "length", "appended", "next_position",
                          "positions", "num_kv_heads", "head_dim", "keys_prerotated"):
                    self.assertEqual(got[k], before[sid][k], k)
                for _ in range(3):
                    self.step(sid, model, layer, kept, rng)

        # Without the model, its sessions' files are skipped and kept.
        STATE["srv"].stop(check=True)
        ms = STATE["models"]
        others = sum((["--model", a] for a in ms[1::2] if not a.startswith("g2=")), [])
        srv = start(others)
        try:
            st, got = call("GET", "/v1/sessions/restart-g2-0", srv=srv)
            self.assertEqual((st, got["error"]["code"]), (404, "SESSION_NOT_FOUND"), got)
            st, got = call("GET", "/v1/sessions/restart-l4-3", srv=srv)
            self.assertEqual(st, 200, got)
        finally:
            srv.stop(check=True)
        self.assertIn('model "g2", which is not loaded', srv.stderr)
        self.assertTrue(os.path.exists(os.path.join(STATE["dir"], "restart-g2-0.safetensors")))
        STATE["srv"] = start(STATE["models"])
        st, got = call("GET", "/v1/sessions/restart-g2-0")
        self.assertEqual((st, got["model"]), (200, "g2"), got)
        for sid, *_ in runs:
            call("DELETE", "/v1/sessions/" + sid)


if __name__ == "__main__":
    unittest.main()
