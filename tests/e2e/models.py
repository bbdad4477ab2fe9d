#!/usr/bin/python3
"""models.py - end-to-end test of models (posattnd --model NAME=config.json).

    /usr/bin/python3 tests/e2e/models.py --bin build/posattnd

Starts posattnd on 127.0.0.1 with every fixture config of
tests/fixtures/models/ loaded by --model, and checks, for every model type
and for the first and last layer of each run of identical layers (a sliding
and a global layer where the model has both):
  - GET /v1/models lists exactly the options written by hand in
    tests/fixtures/models_expected.json (from Hugging Face's modelling code),
    and POST /v1/models/resolve answers the same for the config sent inline;
  - an item {"model": NAME, "layer": L, q, k, v, the tensors the layer needs}
    answers bit for bit (b64: output, weights, logits) what the same item
    with those options written out by hand answers, and so does the config
    sent inline as "model": {...};
  - the answer equals a float64 reference of Hugging Face's attention for
    that config (tests/e2e/hf_reference.py, NumPy) within 2e-5;
  - every refusal is a 400 that names the field and the config key: an
    option the config decides, a tensor the layer needs, heads that disagree
    with the config, an unknown model, an inline config posattn cannot read,
    a layer out of range, "layer" without "model".
Needs NumPy: run it with /usr/bin/python3.
"""

import argparse
import base64
import copy
import glob
import json
import os
import sys
import unittest
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import posattnd  # noqa: E402  (tests/posattnd.py)
import hf_reference  # noqa: E402  (tests/e2e/hf_reference.py)

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "models")
EXPECTED = os.path.join(ROOT, "tests", "fixtures", "models_expected.json")
ARGS = None
SERVER = {}
L = 6  # tokens


def setUpModule():
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(FIXTURES, "*.json")))
    args = ["--workers", "2"]
    for n in names:
        args += ["--model", f"{n}={os.path.join(FIXTURES, n + '.json')}"]
    SERVER["srv"] = posattnd.start(ARGS.bin, args)
    SERVER["names"] = names


def tearDownModule():
    srv = SERVER.pop("srv", None)
    if srv is not None:
        srv.stop(check=True)


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(SERVER["srv"].url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def b64(a):
    return {"shape": list(a.shape), "b64": base64.b64encode(np.ascontiguousarray(a, "<f4").tobytes()).decode()}


def unb64(t):
    return np.frombuffer(base64.b64decode(t["b64"]), "<f4").reshape(t["shape"])


def config(name):
    with open(os.path.join(FIXTURES, name + ".json")) as f:
        return json.load(f)


def expected():
    with open(EXPECTED) as f:
        return json.load(f)


def set_field(item, field, value):
    """item["scheme"]["table"] = value for field "scheme.table"."""
    parts = field.split(".")
    for p in parts[:-1]:
        item = item.setdefault(p, {})
    item[parts[-1]] = value


def inputs(name, run, layer, rng):
    """The tensors of one layer's item: q/k/v (or layer mode's x and weights
    for learned positions), positions and the tensors the layer needs."""
    H, Hkv, D = run["num_heads"], run["num_kv_heads"], run["head_dim"]
    opts = run["options"]
    scheme = opts["scheme"]["type"]
    t = {"arrays": {}, "item": {}}
    if scheme == "learned":
        d_model = run["requires"]["scheme.table"][1]
        x = rng.standard_normal((L, d_model)).astype(np.float32)
        w = {k: (rng.standard_normal((d_model, n)) / np.sqrt(d_model)).astype(np.float32)
             for k, n in (("w_q", H * D), ("w_k", Hkv * D), ("w_v", Hkv * D))}
        t["arrays"].update(x=x, **w)
        for k, v in (("x", x), *w.items()):
            t["item"][k] = b64(v)
    elif "mla" in opts:
        # DeepSeek's MLA: k is k_nope [L, H, D - D_rope], one k_rope [L, D_rope]
        # for every head, v as wide as the config's v_head_dim.
        Dr = opts["mla"]["rope_dim"]
        Dv = config(name).get("v_head_dim", 128)
        q = rng.standard_normal((L, H, D)).astype(np.float32)
        k = rng.standard_normal((L, H, D - Dr)).astype(np.float32)
        v = rng.standard_normal((L, H, Dv)).astype(np.float32)
        kr = rng.standard_normal((L, Dr)).astype(np.float32)
        t["arrays"].update(q=q, k=k, v=v, k_rope=kr)
        t["item"].update(q=b64(q), k=b64(k), v=b64(v), k_rope=b64(kr))
    else:
        # a vision tower's item is one frame of grid rows x cols patches
        grid = (2, 4) if scheme == "rope2d" else None
        n = grid[0] * grid[1] if grid else L
        q = rng.standard_normal((n, H, D)).astype(np.float32)
        k = rng.standard_normal((n, Hkv, D)).astype(np.float32)
        v = rng.standard_normal((n, Hkv, D)).astype(np.float32)
        t["arrays"].update(q=q, k=k, v=v)
        t["item"].update(q=b64(q), k=b64(k), v=b64(v))
        if grid:
            t["arrays"]["grid"] = grid
            t["item"]["scheme"] = {"grid": list(grid)}
        elif "mrope_section" in opts["scheme"]:
            # M-RoPE rows (temporal, height, width) that differ, so that
            # every section matters; masks follow token order.
            rows = [[0, 10, 20, 30, 40, 50], [0, 3, 1, 4, 1, 5], [0, 2, 7, 1, 8, 2]]
            t["arrays"]["positions"] = np.array(rows)
            t["item"]["q_positions"] = rows
            t["item"]["k_positions"] = rows
        elif scheme in ("rope", "none"):
            # Positions far apart, so that windows, chunks, long factors and
            # temperature tuning change the answer.
            step = {"phi3": 3000, "llama4": 3000, "llama_dynamic": 3000, "gpt_oss": 50}.get(name, 1000)
            pos = [i * step for i in range(L)]
            t["arrays"]["positions"] = np.array(pos)
            t["item"]["q_positions"] = pos
            t["item"]["k_positions"] = pos
    for field, shape in run["requires"].items():
        scale = 0.5 if field.endswith("weight") else 0.1 if ".lambda_" in field else 1.0
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        if field == "sinks":
            a = a + 1.0
        t["arrays"][field] = a
        set_field(t["item"], field, b64(a))
    return t


def numbers_as_floats(v):
    """JSON values with every number a float (1 and 1.0 are the same value)."""
    if isinstance(v, dict):
        return {k: numbers_as_floats(x) for k, x in v.items()}
    if isinstance(v, list):
        return [numbers_as_floats(x) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return v


def layers_to_try(run):
    return sorted({run["first_layer"], run["last_layer"]})


class ModelsListed(unittest.TestCase):
    def test_v1_models_lists_what_was_derived(self):
        st, body = call("GET", "/v1/models")
        self.assertEqual(st, 200)
        got = {m["name"]: m for m in body["models"]}
        self.assertEqual(sorted(got), SERVER["names"])
        for name, runs in expected().items():
            with self.subTest(model=name):
                self.assertEqual(len(got[name]["layers"]), len(runs))
                for g, w in zip(got[name]["layers"], runs):
                    for key in ("first_layer", "last_layer", "attention", "num_heads",
                                "num_kv_heads", "head_dim", "causal"):
                        self.assertEqual(g[key], w[key], key)
                    opts = {k: v for k, v in g.items() if k not in (
                        "first_layer", "last_layer", "attention", "num_heads", "num_kv_heads",
                        "head_dim", "causal", "requires", "config", "stack")}
                    self.assertEqual(numbers_as_floats(opts), numbers_as_floats(w["options"]))
                    self.assertEqual({r["field"]: r["shape"] for r in g["requires"]}, w["requires"])
                    for r in g["requires"]:
                        self.assertTrue(r["config"], r)
                    self.assertIn("scheme", g["config"])

    def test_resolve_answers_the_same_for_a_config(self):
        st, body = call("GET", "/v1/models")
        listed = {m["name"]: m for m in body["models"]}
        for name in ("gemma2", "gemma3", "llama4", "t5", "phi3"):
            with self.subTest(model=name):
                st, got = call("POST", "/v1/models/resolve", config(name))
                self.assertEqual(st, 200, got)
                want = dict(listed[name])
                want.pop("name")
                self.assertEqual(got["layers"], want["layers"])
                self.assertEqual(got["model_type"], want["model_type"])

    def test_resolve_refuses_naming_the_key(self):
        cfg = config("llama")
        cfg["rope_scaling"]["rope_type"] = "longrope2"
        st, body = call("POST", "/v1/models/resolve", cfg)
        self.assertEqual(st, 400)
        self.assertEqual(body["error"]["field"], "rope_scaling")
        self.assertIn("longrope2", body["error"]["message"])


class ModelAnswers(unittest.TestCase):
    def compute(self, item):
        # differential attention returns output and weights (its two maps' A)
        res = ["output", "weights"] if "differential" in item else ["output", "weights", "logits"]
        item = dict(item, **{"return": res})
        st, body = call("POST", "/v1/attention", {"inputs": [item], "output_encoding": "b64"})
        self.assertEqual(st, 200, body)
        out = body["outputs"][0]
        self.assertNotIn("error", out)
        return {k: unb64(out[k]) for k in res}

    def test_model_items_equal_handwritten_options_and_the_reference(self):
        rng = np.random.default_rng(30)
        checked = 0
        for name, runs in expected().items():
            cfg = config(name)
            for run in runs:
                for layer in layers_to_try(run):
                    with self.subTest(model=name, layer=layer, stack=run.get("stack")):
                        t = inputs(name, run, layer, rng)
                        model_item = dict(copy.deepcopy(t["item"]), model=name, layer=layer)
                        inline_item = dict(copy.deepcopy(t["item"]), model=cfg, layer=layer)
                        hand = copy.deepcopy(t["item"])
                        if "stack" in run:
                            model_item["stack"] = inline_item["stack"] = run["stack"]
                        for k, v in copy.deepcopy(run["options"]).items():
                            if isinstance(v, dict) and isinstance(hand.get(k), dict):
                                hand[k].update(v)
                            else:
                                hand[k] = v
                        hand["causal"] = run["causal"]
                        if "x" in hand:  # layer mode: the counts a config gives
                            hand.update(num_heads=run["num_heads"], num_kv_heads=run["num_kv_heads"],
                                        head_dim=run["head_dim"])
                        a = self.compute(model_item)
                        b = self.compute(hand)
                        c = self.compute(inline_item)
                        for k in a:
                            self.assertEqual(a[k].tobytes(), b[k].tobytes(), k)
                            self.assertEqual(a[k].tobytes(), c[k].tobytes(), k)
                        ref = hf_reference.attention(cfg, layer, run.get("stack"), t["arrays"])
                        err = np.max(np.abs(a["output"].astype(np.float64) - ref["output"]))
                        self.assertLess(err, 2e-5, f"{name} layer {layer}: |output - HF| = {err}")
                        werr = np.max(np.abs(a["weights"].astype(np.float64) - ref["weights"]))
                        self.assertLess(werr, 2e-5, f"{name} layer {layer}: |weights - HF| = {werr}")
                        checked += 1
        self.assertGreaterEqual(checked, 45)


class ModelRefusals(unittest.TestCase):
    def refused(self, item, field, *texts, code="INVALID_ARGUMENT", status=400):
        st, body = call("POST", "/v1/attention", {"inputs": [item]})
        self.assertEqual(st, status, body)
        err = body["outputs"][0]["error"]
        self.assertEqual(err["code"], code, err)
        self.assertEqual(err["field"], "inputs[0]." + field, err)
        for t in texts:
            self.assertIn(t, err["message"])
        return err

    def qkv(self, H=4, Hkv=2, D=16):
        rng = np.random.default_rng(1)
        return {"q": b64(rng.standard_normal((3, H, D))), "k": b64(rng.standard_normal((3, Hkv, D))),
                "v": b64(rng.standard_normal((3, Hkv, D)))}

    def test_an_option_the_config_decides(self):
        self.refused(dict(self.qkv(), model="gemma2", layer=0, scale=0.125), "scale",
                     '"query_pre_attn_scalar": 256', "0.0625", '"override": true')
        self.refused(dict(self.qkv(), model="gemma2", layer=0, window=64), "window",
                     '"sliding_window": 4096')
        self.refused(dict(self.qkv(), model="llama", scheme={"base": 10000}), "scheme.base",
                     '"rope_scaling"')
        # override replaces it, and the answer is that of the option given
        st, body = call("POST", "/v1/attention", {"inputs": [
            dict(self.qkv(), model="gemma2", layer=0, scale=0.125, override=True),
            dict(self.qkv(), model="gemma2", layer=0)]})
        self.assertEqual(st, 200, body)
        self.assertNotEqual(body["outputs"][0]["output"], body["outputs"][1]["output"])

    def test_a_tensor_the_layer_needs(self):
        self.refused(dict(self.qkv(), model="gpt_oss", layer=3), "sinks",
                     'model "gpt_oss" (gpt_oss) layer 3 has attention sinks', '"model_type"',
                     'give "sinks" [4]')
        self.refused(dict(self.qkv(4, 4), model="t5", stack="decoder", layer=1), "scheme.table",
                     "t5) decoder layer 1", "relative_attention_num_buckets", "[32, 4]")
        self.refused(dict(self.qkv(4, 2, 32), model="qwen3"), "q_norm.weight", "rms_norm_eps",
                     "[32]")

    def test_heads_that_disagree_with_the_config(self):
        self.refused(dict(self.qkv(8, 2), model="llama"), "q.shape", "q.shape[1]=8",
                     '"num_attention_heads": 4', code="SHAPE_MISMATCH")
        self.refused(dict(self.qkv(4, 1), model="llama"), "k.shape", "k.shape[1]=1",
                     '"num_key_value_heads": 2', code="SHAPE_MISMATCH")
        self.refused(dict(self.qkv(4, 2, 8), model="llama"), "q.shape", "q.shape[2]=8",
                     "head dim 16", code="SHAPE_MISMATCH")

    def test_unknown_model_and_bad_configs(self):
        self.refused(dict(self.qkv(), model="llama-9"), "model", '"llama-9" is not loaded',
                     "llama", code="UNKNOWN_MODEL")
        cfg = config("gemma2")
        cfg["layer_types"] = ["sliding_attention", "chunky", "sliding_attention", "full_attention"]
        self.refused(dict(self.qkv(), model=cfg), "model.layer_types[1]", '"chunky"')
        self.refused(dict(self.qkv(), model=7), "model", "found number")
        self.refused(dict(self.qkv(), model="llama", layer=2), "layer", "layer=2", "0 to 1",
                     code="OUT_OF_RANGE")
        self.refused(dict(self.qkv(), layer=1), "layer", 'send "model"')
        self.refused(dict(self.qkv(), model="llama", stack="decoder"), "stack", "one stack")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/posattnd")
    ap.add_argument("-q", action="store_true")
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=1 if ARGS.q else 2)


if __name__ == "__main__":
    main()
