#!/usr/bin/python3
"""v2_models.py - the models of --model as KServe v2 models, end to end.

    tests/e2e/harness.sh /usr/bin/python3 tests/e2e/v2_models.py   # as make test runs it
    /usr/bin/python3 tests/e2e/v2_models.py --bin build/posattnd

Starts its own posattnd (the binary of --bin, else $POSATTND, else
build/posattnd) with three fixture configs loaded by --model (gemma2 as g2,
gpt_oss as oss, t5 as t5: a --model t5 beside the scheme model attention-t5)
and checks over HTTP, with v2_common.py's helpers (http.client, the OpenAPI
document's own schemas):
  - GET /v2/models/NAME: the config's counts in the shapes (q [-1, H, D],
    k [-1, Hkv, D], sinks [H], T5's table [buckets, H]), the parameters
    layer (and stack), and which inputs the layers require; ready and the
    versioned paths; every model in /v2/models/stats; the 404 lists them;
  - POST /v2/models/NAME/infer with parameters.layer (and stack) answers
    bit for bit what /v1/attention answers for {"model": NAME, "layer": L}:
    binary inputs and outputs against /v1's base64, JSON tensors against
    /v1's JSON numbers (the same formatter), every layer of oss, T5's
    decoder with its table as an input;
  - refusals are 400 {"error": "..."} naming the parameter or input: a
    layer out of range, missing sinks, a stack on a one-stack model, an
    option the config decides;
  - statistics and /metrics count each --model model apart (model="oss");
  - a --model named like a scheme's model stops start-up.
"""

import argparse
import base64
import json
import os
import random
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "openapi"))
import posattnd  # noqa: E402  (tests/posattnd.py)
import v2_common as v2  # noqa: E402  (tests/e2e/v2_common.py: call, conform, binary_request, ...)
import conformance  # noqa: E402  (tests/openapi/conformance.py: openapi.yaml's schemas)

FIXTURES = os.path.join(HERE, "..", "fixtures", "models")
BIN = os.environ.get("POSATTND", "build/posattnd")
SERVER = {}


def setUpModule():
    args = ["--workers", "2"]
    for name, fixture in (("g2", "gemma2"), ("oss", "gpt_oss"), ("t5", "t5")):
        args += ["--model", "%s=%s" % (name, os.path.join(FIXTURES, fixture + ".json"))]
    SERVER["srv"] = posattnd.start(BIN, args)
    SERVER["url"] = SERVER["srv"].url


def tearDownModule():
    SERVER["srv"].stop(check=True)


def call(method, path, body=None, headers=None):
    return v2.call(method, path, body, headers, base=SERVER["url"])


def post_json(path, obj):
    return call("POST", path, json.dumps(obj).encode())


def get_json(path, status=200):
    st, h, body = call("GET", path)
    assert st == status, (path, st, body)
    return json.loads(body)


def rand(rng, n):
    return [v2.f32(rng.uniform(-1, 1)) for _ in range(n)]


class Problem:
    """q [L, H, D], k and v [L, Hkv, D], sinks [H], a T5 table [32, H]."""

    def __init__(self, seed, L=5, H=4, Hkv=2, D=16):
        rng = random.Random(seed)
        self.shapes = {"q": [L, H, D], "k": [L, Hkv, D], "v": [L, Hkv, D], "sinks": [H],
                       "table": [32, H]}
        self.data = {n: rand(rng, _count(s)) for n, s in self.shapes.items()}

    def v1_item(self, names, **opts):
        item = dict(opts)
        for n in names:
            t = {"shape": self.shapes[n], "b64": v2.b64(self.data[n])}
            if n == "table":
                item.setdefault("scheme", {})["table"] = t
            else:
                item[n] = t
        return item

    def v2_inputs(self, names, binary=False):
        ins = []
        for n in names:
            t = {"name": n, "shape": self.shapes[n], "datatype": "FP32"}
            if binary:
                t["parameters"] = {"binary_data_size": 4 * len(self.data[n])}
            else:
                t["data"] = self.data[n]
            ins.append(t)
        return ins

    def binary_part(self, names):
        return b"".join(v2.le_bytes(self.data[n]) for n in names)


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def documented(obj, schema):
    """obj is valid as openapi.yaml's components.schemas[schema], closed (no
    member the document does not name), as tests/openapi/conformance.py
    checks the answers of the schemes' models."""
    conformance.validate(obj, conformance.component(schema), closed=True)
    return obj


def v1_answer(item, encoding="b64"):
    """The output of one /v1/attention item: bytes (b64) or the JSON numbers."""
    st, _, body = post_json("/v1/attention", {"inputs": [item], "output_encoding": encoding})
    assert st == 200, body
    out = json.loads(body)["outputs"][0]
    assert "error" not in out, out
    if encoding == "b64":
        return base64.b64decode(out["output"]["b64"]), out["output"]["shape"]
    return out["output"]["data"], out["output"]["shape"]


def v2_error(model, obj):
    st, h, body = post_json("/v2/models/%s/infer" % model, obj)
    err = json.loads(body)
    v2.conform(err, "inference_error_response")
    documented(err, "V2Error")
    return st, err["error"]


class Metadata(unittest.TestCase):
    def shapes(self, meta, which="inputs"):
        return {t["name"]: t["shape"] for t in meta[which]}

    def test_config_counts_in_the_shapes(self):
        meta = v2.conform(get_json("/v2/models/oss"), "metadata_model_response")
        documented(meta, "V2ModelMetadata")
        self.assertEqual((meta["name"], meta["versions"], meta["platform"]),
                         ("oss", ["1"], "posattn"))
        s = self.shapes(meta)
        self.assertEqual(s["q"], [-1, 4, 16])
        self.assertEqual(s["k"], [-1, 2, 16])
        self.assertEqual(s["v"], [-1, 2, -1])
        self.assertEqual(s["sinks"], [4])
        self.assertEqual((s["x"], s["w_q"], s["w_k"]), ([-1, 64], [64, 64], [64, 32]))
        self.assertEqual(self.shapes(meta, "outputs"), {"output": [-1, 4, -1]})
        self.assertEqual(meta["parameters"], {"layer": 0})
        p = meta["properties"]
        self.assertEqual(p["model_type"], "gpt_oss")
        self.assertEqual(p["num_layers"], "4")
        self.assertEqual(p["required_inputs"], "q, k and v (or x, w_q, w_k and w_v), sinks")
        self.assertIn("required by every layer", p["sinks"])
        self.assertIn("0 to 3", p["layer"])
        self.assertIn("parameters.override", p["decided_by_config"])
        self.assertTrue(all(isinstance(v, str) for v in p.values()))  # a string map

    def test_t5_stack_and_table(self):
        meta = v2.conform(get_json("/v2/models/t5/versions/1"), "metadata_model_response")
        documented(meta, "V2ModelMetadata")
        documented(get_json("/v2/models/g2"), "V2ModelMetadata")
        s = self.shapes(meta)
        self.assertEqual((s["q"], s["k"], s["table"]), ([-1, 4, 16], [-1, 4, 16], [32, 4]))
        self.assertEqual(meta["parameters"], {"layer": 0, "stack": "encoder"})
        self.assertIn(", table", meta["properties"]["required_inputs"])
        self.assertEqual(meta["properties"]["num_decoder_layers"], "2")
        # The scheme model of the same name stays what it was.
        meta = get_json("/v2/models/attention-t5")
        self.assertEqual(self.shapes(meta)["q"], [-1, -1, -1])
        self.assertNotIn("parameters", meta)

    def test_listed_ready_and_versions(self):
        names = [m["name"] for m in documented(get_json("/v2/models/stats"),
                                                 "V2Stats")["model_stats"]]
        self.assertEqual(names[-3:], ["g2", "oss", "t5"])
        self.assertIn("attention-t5", names)
        for path in ("/v2/models/g2/ready", "/v2/models/g2/versions/1/ready"):
            st, _, body = call("GET", path)
            self.assertEqual((st, body), (200, b""), path)
        for path in ("/v2/models/g3/ready", "/v2/models/g2/versions/2/ready"):
            st, _, body = call("GET", path)
            self.assertEqual((st, body), (404, b""), path)
        st, _, body = call("GET", "/v2/models/g3")
        self.assertEqual(st, 404)
        self.assertIn("those of --model: g2, oss, t5", json.loads(body)["error"])
        st, _, body = call("GET", "/v2/models/g2/versions/2")
        self.assertEqual(st, 404)
        self.assertIn("model 'g2' has no version '2'", json.loads(body)["error"])


class Infer(unittest.TestCase):
    def test_every_layer_binary_bit_for_bit(self):
        p = Problem(1)
        names = ["q", "k", "v", "sinks"]
        for layer in range(4):
            want, shape = v1_answer(p.v1_item(names, model="oss", layer=layer))
            header = {"parameters": {"layer": layer, "binary_data_output": True},
                      "inputs": p.v2_inputs(names, binary=True)}
            body, headers = v2.binary_request(header, p.binary_part(names))
            st, h, ans = call("POST", "/v2/models/oss/infer", body, headers)
            self.assertEqual(st, 200, ans)
            head, data = v2.split_binary(h, ans)
            self.assertEqual(head["model_name"], "oss")
            self.assertEqual(head["outputs"][0]["shape"], shape)
            self.assertEqual(data, want, "layer %d" % layer)

    def test_json_tensors_and_options(self):
        p = Problem(2)
        names = ["q", "k", "v"]
        opts = {"causal": False, "q_positions": [9, 10, 11, 12, 13]}
        want, shape = v1_answer(p.v1_item(names, model="g2", layer=1, **opts), encoding="json")
        st, _, body = post_json("/v2/models/g2/versions/1/infer", {
            "id": "g2-1", "parameters": {"layer": 1, "causal": False},
            "inputs": p.v2_inputs(names) + [
                {"name": "q_positions", "shape": [5], "datatype": "INT64",
                 "data": opts["q_positions"]}]})
        self.assertEqual(st, 200, body)
        ans = documented(v2.conform(json.loads(body), "inference_response"), "V2InferResponse")
        self.assertEqual((ans["id"], ans["model_version"]), ("g2-1", "1"))
        self.assertEqual(ans["outputs"][0]["shape"], shape)
        self.assertEqual(ans["outputs"][0]["data"], want)  # the same numbers, the same text

    def test_t5_decoder_table_input(self):
        p = Problem(3, Hkv=4)
        names = ["q", "k", "v", "table"]
        want, _ = v1_answer(p.v1_item(names, model="t5", stack="decoder", layer=1))
        header = {"parameters": {"stack": "decoder", "layer": 1},
                  "inputs": p.v2_inputs(names, binary=True),
                  "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
        body, headers = v2.binary_request(header, p.binary_part(names))
        st, h, ans = call("POST", "/v2/models/t5/infer", body, headers)
        self.assertEqual(st, 200, ans)
        self.assertEqual(v2.split_binary(h, ans)[1], want)
        # The scheme model attention-t5 is another model: the T5 table alone.
        st, _, _ = post_json("/v2/models/attention-t5/infer", {
            "parameters": {"layer": 1}, "inputs": p.v2_inputs(names)})
        self.assertEqual(st, 400)


class Errors(unittest.TestCase):
    def test_refusals_name_the_parameter(self):
        p = Problem(4)
        qkv = p.v2_inputs(["q", "k", "v"])
        cases = [
            ("oss", {"parameters": {"layer": 4}, "inputs": qkv},
             "parameters.layer=4 is outside the model's 4 layers (0 to 3)"),
            ("oss", {"parameters": {"layer": 2}, "inputs": qkv},
             'model "oss" (gpt_oss) layer 2 has attention sinks (config "model_type": '
             '"gpt_oss"): give "sinks" [4]'),
            ("g2", {"parameters": {"stack": "decoder"}, "inputs": qkv},
             "parameters.stack is for encoder-decoder models (T5); gemma2 has one stack"),
            ("t5", {"parameters": {"stack": "decoder", "layer": 2}, "inputs": qkv},
             "parameters.layer=2 is outside the decoder's 2 layers (0 to 1)"),
            ("g2", {"parameters": {"scale": 0.5}, "inputs": qkv},
             "parameters.scale is decided by the model's config "
             '("query_pre_attn_scalar": 256 gives 0.0625'),
            ("g2", {"parameters": {"layer": "0"}, "inputs": qkv}, "parameters.layer"),
            ("attention-rope", {"parameters": {"layer": 0}, "inputs": qkv},
             "parameters.layer is not a parameter of model attention-rope"),
        ]
        for model, req, needle in cases:
            st, err = v2_error(model, req)
            self.assertEqual(st, 400, (model, req["parameters"], err))
            self.assertIn(needle, err)
        # With override, the item's option wins, as on /v1.
        st, _, body = post_json("/v2/models/g2/infer", {
            "parameters": {"scale": 0.5, "override": True}, "inputs": qkv})
        self.assertEqual(st, 200, body)

    def test_a_scheme_name_stops_start_up(self):
        with self.assertRaises(posattnd.StartError) as cm:
            posattnd.start(BIN, ["--model", "attention-rope=" +
                                 os.path.join(FIXTURES, "gemma2.json")], timeout=10)
        self.assertIn("--model attention-rope: the name is the /v2 model of the scheme rope",
                      str(cm.exception))


class Stats(unittest.TestCase):
    def test_counted_apart(self):
        def count(name):
            s = get_json("/v2/models/%s/stats" % name)["model_stats"]
            self.assertEqual(len(s), 1)
            return s[0]["inference_count"], s[0]["inference_stats"]["fail"]["count"]

        p = Problem(5, Hkv=4)
        names = ["q", "k", "v", "table"]
        before = {n: count(n) for n in ("t5", "attention-t5", "oss")}
        for _ in range(2):
            st, _, body = post_json("/v2/models/t5/infer", {"inputs": p.v2_inputs(names)})
            self.assertEqual(st, 200, body)
        st, _, _ = post_json("/v2/models/t5/infer", {"inputs": p.v2_inputs(names[:3])})
        self.assertEqual(st, 400)
        after = {n: count(n) for n in before}
        self.assertEqual(after["t5"][0] - before["t5"][0], 2)
        self.assertEqual(after["t5"][1] - before["t5"][1], 1)
        self.assertEqual(after["attention-t5"], before["attention-t5"])
        self.assertEqual(after["oss"], before["oss"])
        every = {m["name"]: m["inference_count"]
                 for m in get_json("/v2/models/stats")["model_stats"]}
        self.assertEqual(every["t5"], after["t5"][0])
        _, _, text = call("GET", "/metrics")
        m = re.search(r'posattn_v2_inferences_total\{model="t5",outcome="success"\} (\d+)',
                      text.decode())
        self.assertIsNotNone(m, "no model=\"t5\" series")
        self.assertEqual(int(m.group(1)), after["t5"][0])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("-q", action="store_true")
    args, rest = ap.parse_known_args()
    BIN = args.bin
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=1 if args.q else 2)
