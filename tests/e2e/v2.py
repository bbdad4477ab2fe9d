#!/usr/bin/python3
"""v2.py - the Open Inference Protocol (KServe V2) routes of posattnd, end to end.

Speaks the protocol byte for byte with http.client (Python's standard library):
health, server and model metadata, JSON infer requests shaped as the published
example of kserve docs/predict-api/v2/required_api.md, and binary requests and
answers built and parsed byte by byte as triton-inference-server
docs/protocol/extension_binary_data.md specifies (JSON header, then raw
little-endian float32 data; Inference-Header-Content-Length). Every error path
is checked for its status and its {"error": "..."} body.

Numbers are compared with POST /v1/attention on the same inputs: binary and
base64 answers must be bit-identical (same compute path), and JSON answers
equal as text-decoded floats (same shortest round-trip formatter).

    tests/e2e/harness.sh /usr/bin/python3 tests/e2e/v2.py   # starts the servers
    POSATTN_URL=http://127.0.0.1:8080 python3 tests/e2e/v2.py
"""

import base64
import json
import os
import random
import re
import struct
import sys
import unittest

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v2_common import (  # noqa: E402  (tests/e2e/v2_common.py: the protocol's helpers)
    API_KEY, AUTH_URL, Case, b64, binary_request, call, conform, le_bytes, post_json, rand_f32,
    split_binary, v1_attention)


class Health(unittest.TestCase):
    def test_live_ready(self):
        for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/attention-rope/ready"):
            st, _, body = call("GET", path)
            self.assertEqual((st, body), (200, b""), path)

    def test_model_ready_unknown(self):
        # required_api.md, "Model Ready": a 4xx and an empty body.
        for path in ("/v2/models/attention-nope/ready",
                     "/v2/models/attention-rope/versions/2/ready"):
            st, _, body = call("GET", path)
            self.assertEqual((st, body), (404, b""), path)


class Metadata(unittest.TestCase):
    def test_server(self):
        st, h, body = call("GET", "/v2")
        self.assertEqual(st, 200)
        self.assertEqual(h["Content-Type"], "application/json")
        meta = conform(json.loads(body), "metadata_server_response")
        self.assertEqual(sorted(meta), ["extensions", "name", "version"])
        self.assertEqual(meta["name"], "posattn")
        self.assertEqual(meta["extensions"], ["binary_tensor_data", "statistics",
                                             "sequence", "sequence(string_id)"])
        # The OpenAPI document's spelling, with the slash.
        st, _, slash = call("GET", "/v2/")
        self.assertEqual((st, json.loads(slash)), (200, meta))
        _, _, metrics = call("GET", "/metrics")
        self.assertRegex(metrics.decode(),
                         r'posattn_build_info\{version="%s",kernel="(avx512|avx2|portable)"\} 1'
                         % re.escape(meta["version"]))

    def test_models(self):
        def t(name, dt, ndim):
            return {"name": name, "datatype": dt, "shape": [-1] * ndim}

        common = [t("q", "FP32", 3), t("k", "FP32", 3), t("v", "FP32", 3), t("x", "FP32", 2),
                  t("w_q", "FP32", 2), t("w_k", "FP32", 2), t("w_v", "FP32", 2),
                  t("w_o", "FP32", 2), t("q_positions", "INT32", 1), t("k_positions", "INT32", 1),
                  t("cu_seqlens", "INT32", 1), t("cu_seqlens_k", "INT32", 1),
                                    t("sinks", "FP32", 1), t("mask", "BOOL", 3), t("bias", "FP32", 3),
                  t("q_norm_weight", "FP32", 1), t("k_norm_weight", "FP32", 1),
                  t("b_q", "FP32", 1), t("b_k", "FP32", 1), t("b_v", "FP32", 1),
                  t("b_o", "FP32", 1)]
        outputs = [t("output", "FP32", 3)]  # the diagnostics are named in "properties"
        # MLA's inputs, on the models of its schemes (none, rope).
        mla = [t("k_rope", "FP32", 2), t("c_kv", "FP32", 2), t("w_uk", "FP32", 3),
               t("w_uv", "FP32", 3)]
        extra = {
            "none": mla, "sinusoidal": [], "rope": mla + [t("short_factor", "FP32", 1),
                                                         t("long_factor", "FP32", 1),
                                                         t("mrope_section", "INT32", 1)],
            "learned": [t("table", "FP32", 2)], "t5": [t("table", "FP32", 2)],
            "shaw": [t("rel_k", "FP32", 2), t("rel_v", "FP32", 2)],
            "alibi": [t("slopes", "FP32", 1)],
        }
        # A metadata tensor has one datatype; the others an input takes are
        # in properties.input_datatypes.
        float_only = {"rope": "short_factor, long_factor", "alibi": "slopes"}
        for scheme, more in extra.items():
            name = "attention-" + scheme
            datatypes = "FP32 inputs also take FP16, BF16 and FP64 (converted to float32)"
            if scheme in float_only:
                datatypes += ", but for %s (FP32 only)" % float_only[scheme]
            datatypes += "; INT32 inputs also take INT64 (each value within int32)"
            st, _, body = call("GET", "/v2/models/" + name)
            self.assertEqual(st, 200, body)
            conform(json.loads(body), "metadata_model_response")
            self.assertEqual(json.loads(body), {
                "name": name, "versions": ["1"], "platform": "posattn",
                "inputs": common + more, "outputs": outputs,
                "properties": {"diagnostic_outputs":
                               "weights, logits, q_rot, k_rot, entropy, distance",
                               "input_datatypes": datatypes}})

    def test_unknown_model(self):
        for path in ("/v2/models/rope", "/v2/models/attention-", "/v2/models/attention-ropes"):
            st, _, body = call("GET", path)
            self.assertEqual(st, 404, path)
            self.assertEqual(list(conform(json.loads(body), "metadata_model_error_response")),
                             ["error"])

    def test_bias_scheme_models(self):
        """attention-kerple takes r1/r2 as input tensors and form as a parameter,
        attention-sandwich hidden_size: both answer as /v1/attention does."""
        c = Case(31)
        r1, r2 = [0.5, 1.0, 0.25, 2.0], [1.5, 0.5, 0.01, 2.0]
        ins = c.v2_inputs() + [{"name": "r1", "shape": [4], "datatype": "FP32", "data": r1},
                               {"name": "r2", "shape": [4], "datatype": "FP32", "data": r2}]
        cases = [("attention-kerple", ins, {"form": "power", "causal": True},
                  {"type": "kerple", "form": "power", "r1": r1, "r2": r2}),
                 ("attention-sandwich", c.v2_inputs(), {"hidden_size": 6},
                  {"type": "sandwich", "hidden_size": 6})]
        for model, inputs, params, scheme in cases:
            st, _, body = post_json("/v2/models/%s/infer" % model,
                                    {"inputs": inputs, "parameters": params})
            self.assertEqual(st, 200, body)
            got = json.loads(body)["outputs"][0]["data"]
            want, _ = v1_attention(c.v1_item(scheme, causal=params.get("causal", False)))
            want = struct.unpack("<%df" % (len(want["output"]) // 4), want["output"])
            self.assertEqual(len(got), len(want))
            for g, w in zip(got, want):
                self.assertAlmostEqual(g, w, delta=1e-6 + 1e-6 * abs(w))
        bad = c.v2_inputs() + [{"name": "r1", "shape": [4], "datatype": "FP32", "data": r1},
                               {"name": "r2", "shape": [4], "datatype": "FP32",
                                "data": [1, 1, 1, 0.001]}]
        st, _, body = post_json("/v2/models/attention-kerple/infer", {"inputs": bad})
        self.assertEqual(st, 400, body)
        self.assertIn("r2[3]=0.001 is below 0.01", json.loads(body)["error"])

    def test_fire_model(self):
        """attention-fire takes w1, b1, w2, b2 as input tensors and c, L, eps,
        causal as parameters: it answers as /v1/attention does; without
        causal it is a 400 naming causal."""
        c = Case(37)
        w1, b1 = [1.5, -2.0, 0.75], [-0.5, 1.0, 0.25]
        w2 = [0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 1.0, 0.5, -0.25, 2.0, 0.75, -1.5]  # [3, 4]
        b2 = [0.1, -0.2, 0.3, 0.0]
        ins = c.v2_inputs() + [{"name": "w1", "shape": [3], "datatype": "FP32", "data": w1},
                               {"name": "b1", "shape": [3], "datatype": "FP32", "data": b1},
                               {"name": "w2", "shape": [12], "datatype": "FP32", "data": w2},
                               {"name": "b2", "shape": [4], "datatype": "FP32", "data": b2}]
        params = {"c": 0.3, "L": 4, "causal": True}
        st, _, body = post_json("/v2/models/attention-fire/infer",
                                {"inputs": ins, "parameters": params})
        self.assertEqual(st, 200, body)
        got = json.loads(body)["outputs"][0]["data"]
        scheme = {"type": "fire", "c": 0.3, "L": 4, "w1": w1, "b1": b1, "w2": w2, "b2": b2}
        want, _ = v1_attention(c.v1_item(scheme, causal=True))
        want = struct.unpack("<%df" % (len(want["output"]) // 4), want["output"])
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertAlmostEqual(g, w, delta=1e-6 + 1e-6 * abs(w))
        st, _, body = post_json("/v2/models/attention-fire/infer",
                                {"inputs": ins, "parameters": {"c": 0.3}})
        self.assertEqual(st, 400, body)
        self.assertIn("fire needs causal=true", json.loads(body)["error"])

    def test_cope_model(self):
        """attention-cope takes pos_emb as an FP32 input ([npos, D] or
        [H, npos, D]) and npos_max, nodiv as parameters: it answers as
        /v1/attention does, and a table of the wrong width is a 400."""
        c = Case(33)
        rng = random.Random(34)
        for shape, params in (([6, 8], {"causal": True}),
                              ([4, 6, 8], {"npos_max": 6, "nodiv": True})):
            n = 1
            for d in shape:
                n *= d
            E = rand_f32(rng, n)
            ins = c.v2_inputs() + [{"name": "pos_emb", "shape": shape, "datatype": "FP32",
                                    "data": E}]
            st, _, body = post_json("/v2/models/attention-cope/infer",
                                    {"inputs": ins, "parameters": params})
            self.assertEqual(st, 200, body)
            got = json.loads(body)["outputs"][0]["data"]
            scheme = {"type": "cope", "pos_emb": {"shape": shape, "b64": b64(E)}}
            for k in ("npos_max", "nodiv"):
                if k in params:
                    scheme[k] = params[k]
            want, _ = v1_attention(c.v1_item(scheme, causal=params.get("causal", False)))
            want = struct.unpack("<%df" % (len(want["output"]) // 4), want["output"])
            self.assertEqual(len(got), len(want))
            for g, w in zip(got, want):
                self.assertAlmostEqual(g, w, delta=1e-6 + 1e-6 * abs(w))
        bad = c.v2_inputs() + [{"name": "pos_emb", "shape": [6, 5], "datatype": "FP32",
                                "data": [0.0] * 30}]
        st, _, body = post_json("/v2/models/attention-cope/infer", {"inputs": bad})
        self.assertEqual(st, 400, body)
        self.assertIn("rows of 5 values but head_dim=8", json.loads(body)["error"])

    def test_versions(self):
        """The OpenAPI document's versioned paths: version 1 is the model."""
        _, _, plain = call("GET", "/v2/models/attention-alibi")
        st, _, body = call("GET", "/v2/models/attention-alibi/versions/1")
        self.assertEqual((st, body), (200, plain))
        st, _, body = call("GET", "/v2/models/attention-alibi/versions/1/ready")
        self.assertEqual((st, body), (200, b""))
        c = Case(15)
        st, _, a = post_json("/v2/models/attention-alibi/infer", {"inputs": c.v2_inputs()})
        self.assertEqual(st, 200, a)
        st, _, b = post_json("/v2/models/attention-alibi/versions/1/infer",
                             {"inputs": c.v2_inputs()})
        self.assertEqual(st, 200, b)
        a, b = json.loads(a), json.loads(b)
        self.assertEqual(a["model_version"], "1")
        self.assertEqual(a["outputs"], b["outputs"])
        for path in ("/v2/models/attention-alibi/versions/2",
                     "/v2/models/attention-alibi/versions/01/stats"):
            st, _, body = call("GET", path)
            self.assertEqual(st, 404, path)
            self.assertEqual(json.loads(body),
                             {"error": "model 'attention-alibi' has no version '%s': its one "
                                       "version is 1" % path.split("/")[5]})
        st, _, body = post_json("/v2/models/attention-alibi/versions/7/infer",
                                {"inputs": c.v2_inputs()})
        self.assertEqual(st, 404)
        self.assertIn("no version '7'", json.loads(body)["error"])


class InferJson(unittest.TestCase):
    def test_published_example_shape(self):
        """required_api.md "Inference Request Examples": id, inputs, outputs by name."""
        c = Case(1)
        text = ('{\n  "id" : "42",\n  "inputs" : %s,\n  "outputs" : [\n    {\n'
                '      "name" : "output"\n    }\n  ]\n}' % json.dumps(c.v2_inputs(), indent=2))
        st, h, body = call("POST", "/v2/models/attention-rope/infer", text.encode(),
                           {"Content-Type": "application/json"})
        self.assertEqual(st, 200, body)
        self.assertEqual(h["Content-Type"], "application/json")
        self.assertIsNone(h.get("Inference-Header-Content-Length"))
        ans = conform(json.loads(body), "inference_response")
        self.assertEqual(sorted(ans), ["id", "model_name", "model_version", "outputs",
                                       "parameters"])
        self.assertEqual((ans["id"], ans["model_name"]), ("42", "attention-rope"))
        # The timing, then the roofline as /v1's (its fraction only when the server probed).
        params = set(ans["parameters"])
        self.assertTrue({"compute_us", "cpu_us", "queue_us", "flops", "bytes"} <= params, params)
        self.assertTrue(params <= {"compute_us", "cpu_us", "queue_us", "flops", "bytes",
                                   "fraction_of_peak", "bound", "peak_threads", "peak_dtype"},
                        params)
        self.assertEqual(len(ans["outputs"]), 1)
        out = ans["outputs"][0]
        self.assertEqual(sorted(out), ["data", "datatype", "name", "shape"])
        self.assertEqual((out["name"], out["datatype"], out["shape"]), ("output", "FP32", [5, 4, 6]))
        want, _ = v1_attention(c.v1_item({"type": "rope"}))
        self.assertEqual(le_bytes(out["data"]), want["output"])

    def test_nested_flat_and_options(self):
        c = Case(2, Lq=6, Lk=6)
        params = {"causal": True, "window": 3, "base": 500.0, "scaling": "linear", "factor": 2.0}
        req = {"parameters": params, "inputs": c.v2_inputs()}
        st, _, flat = post_json("/v2/models/attention-rope/infer", req)
        self.assertEqual(st, 200, flat)
        req["inputs"] = c.v2_inputs(nested=True)
        st, _, nested = post_json("/v2/models/attention-rope/infer", req)
        self.assertEqual(st, 200, nested)
        a, b = json.loads(flat), json.loads(nested)
        self.assertNotIn("id", a)
        self.assertEqual(a["outputs"], b["outputs"])
        scheme = {"type": "rope", "base": 500.0, "scaling": "linear", "factor": 2.0}
        want, _ = v1_attention(c.v1_item(scheme, causal=True, window=3))
        self.assertEqual(le_bytes(a["outputs"][0]["data"]), want["output"])

    def test_new_rope_scalings_as_parameters(self):
        # Scheme scalars of issue #31's scalings flow through $parameters too.
        c = Case(2, Lq=6, Lk=6)
        for extra in ({"scaling": "proportional", "partial_rotary_factor": 0.25},
                      {"scaling": "ntk_alpha", "alpha": 1000.0}):
            req = {"parameters": dict(extra, causal=True), "inputs": c.v2_inputs()}
            st, _, body = post_json("/v2/models/attention-rope/infer", req)
            self.assertEqual(st, 200, body)
            want, _ = v1_attention(c.v1_item(dict(extra, type="rope"), causal=True))
            self.assertEqual(le_bytes(json.loads(body)["outputs"][0]["data"]), want["output"])

    def test_outputs_selection_and_order(self):
        c = Case(3)
        names = ["logits", "output", "weights", "q_rot", "k_rot"]
        # Masked logits are -inf: JSON cannot carry them (tensor_data has no
        # null), so they are refused as JSON and come back as binary data.
        req = {"inputs": c.v2_inputs(), "outputs": [{"name": n} for n in names],
               "parameters": {"causal": True}}
        st, _, body = post_json("/v2/models/attention-rope/infer", req)
        self.assertEqual(st, 400, body)
        self.assertIn('logits holds -inf (masked keys), which JSON cannot carry: ask for it as '
                      'binary data, {"name":"logits","parameters":{"binary_data":true}}',
                      json.loads(body)["error"])
        req["outputs"][0]["parameters"] = {"binary_data": True}
        st, h, body = post_json("/v2/models/attention-rope/infer", req)
        self.assertEqual(st, 200, body)
        ans, raw = split_binary(h, body)
        outs = ans["outputs"]
        self.assertEqual([o["name"] for o in outs], names)
        want, shapes = v1_attention(c.v1_item({"type": "rope"}, causal=True), names)
        for o in outs:
            self.assertEqual(o["shape"], shapes[o["name"]])
            if o["name"] == "logits":
                got = raw[:o["parameters"]["binary_data_size"]]
                self.assertIn(float("-inf"), struct.unpack("<%df" % (len(got) // 4), got))
                self.assertEqual(got, want["logits"])
            else:
                self.assertEqual(le_bytes(o["data"]), want[o["name"]], o["name"])
        # Unmasked logits are finite and come back as JSON numbers.
        st, _, body = post_json("/v2/models/attention-rope/infer",
                                {"inputs": c.v2_inputs(), "outputs": [{"name": "logits"}]})
        self.assertEqual(st, 200, body)
        want, _ = v1_attention(c.v1_item({"type": "rope"}), ["logits"])
        ans = conform(json.loads(body), "inference_response")
        self.assertEqual(le_bytes(ans["outputs"][0]["data"]), want["logits"])

    def test_row_statistics(self):
        """entropy and distance [H, Lq] as outputs, the bytes /v1 returns."""
        c = Case(18)
        names = ["entropy", "distance"]
        st, _, body = post_json("/v2/models/attention-alibi/infer",
                                {"inputs": c.v2_inputs(), "parameters": {"causal": True},
                                 "outputs": [{"name": n} for n in names]})
        self.assertEqual(st, 200, body)
        outs = conform(json.loads(body), "inference_response")["outputs"]
        want, shapes = v1_attention(c.v1_item({"type": "alibi"}, causal=True), names)
        for o in outs:
            self.assertEqual(o["shape"], shapes[o["name"]])
            self.assertEqual(len(o["shape"]), 2)
            self.assertEqual(le_bytes(o["data"]), want[o["name"]], o["name"])

    def test_layer_mode_alibi_positions(self):
        rng = random.Random(4)
        L, dm, H = 5, 8, 2
        x, wq, wk, wv = (rand_f32(rng, n) for n in (L * dm, dm * dm, dm * dm, dm * dm))
        pos = [3, 5, 8, 9, 12]
        slopes = [0.5, 0.25]
        ins = [{"name": "x", "shape": [L, dm], "datatype": "FP32", "data": x},
               {"name": "w_q", "shape": [dm, dm], "datatype": "FP32", "data": wq},
               {"name": "w_k", "shape": [dm, dm], "datatype": "FP32", "data": wk},
               {"name": "w_v", "shape": [dm, dm], "datatype": "FP32", "data": wv},
               {"name": "q_positions", "shape": [L], "datatype": "INT32", "data": pos},
               {"name": "k_positions", "shape": [L], "datatype": "INT32",
                "parameters": {"binary_data_size": 4 * L}},
               {"name": "slopes", "shape": [H], "datatype": "FP32",
                "parameters": {"binary_data_size": 4 * H}}]
        header = {"parameters": {"num_heads": H, "causal": True}, "inputs": ins,
                  "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
        body, hdrs = binary_request(header, le_bytes(pos, "i") + le_bytes(slopes))
        st, h, data = call("POST", "/v2/models/attention-alibi/infer", body, hdrs)
        self.assertEqual(st, 200, data)
        head, raw = split_binary(h, data)
        self.assertEqual(head["outputs"][0]["shape"], [L, H, dm // H])
        item = {"scheme": {"type": "alibi", "slopes": slopes}, "num_heads": H, "causal": True,
                "q_positions": pos, "k_positions": pos}
        for n, v, s in (("x", x, [L, dm]), ("w_q", wq, [dm, dm]), ("w_k", wk, [dm, dm]),
                        ("w_v", wv, [dm, dm])):
            item[n] = {"shape": s, "b64": b64(v)}
        want, _ = v1_attention(item)
        self.assertEqual(raw, want["output"])

    def test_k_prerotated_parameter(self):
        """parameters.k_prerotated: keys rotated already (a cache) give the
        answer of the unrotated keys, bit for bit."""
        c = Case(43)
        want, _ = v1_attention(c.v1_item({"type": "rope"}, causal=True), ("output", "k_rot"))
        ins = c.v2_inputs()
        for t in ins:
            if t["name"] == "k":
                t["data"] = list(struct.unpack("<%df" % (len(want["k_rot"]) // 4), want["k_rot"]))
        req = {"parameters": {"causal": True, "k_prerotated": True, "binary_data_output": True},
               "inputs": ins}
        st, h, data = post_json("/v2/models/attention-rope/infer", req)
        self.assertEqual(st, 200, data)
        self.assertEqual(split_binary(h, data)[1], want["output"])

    def test_int64_positions(self):
        """Positions as INT64, in binary and JSON, give the INT32 answer bit
        for bit; an INT64 position past int32 is an error naming it."""
        rng = random.Random(41)
        L, dm, H = 5, 8, 2
        x, wq, wk, wv = (rand_f32(rng, n) for n in (L * dm, dm * dm, dm * dm, dm * dm))
        pos = [3, 5, 8, 9, 12]

        def infer(dtype, binary, p):
            ins = [{"name": n, "shape": s, "datatype": "FP32", "data": d}
                   for n, s, d in (("x", [L, dm], x), ("w_q", [dm, dm], wq),
                                   ("w_k", [dm, dm], wk), ("w_v", [dm, dm], wv))]
            w = 8 if dtype == "INT64" else 4
            q = {"name": "q_positions", "shape": [L], "datatype": dtype}
            if binary:
                q["parameters"] = {"binary_data_size": w * L}
            else:
                q["data"] = p
            ins.append(q)
            header = {"parameters": {"num_heads": H, "causal": True}, "inputs": ins,
                      "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
            raw = struct.pack("<%d%s" % (L, "q" if w == 8 else "i"), *p) if binary else b""
            body, hdrs = binary_request(header, raw)
            return call("POST", "/v2/models/attention-rope/infer", body, hdrs)

        st, h, data = infer("INT32", True, pos)
        self.assertEqual(st, 200, data)
        want = split_binary(h, data)[1]
        for binary in (True, False):
            st, h, data = infer("INT64", binary, pos)
            self.assertEqual(st, 200, data)
            self.assertEqual(split_binary(h, data)[1], want, "binary" if binary else "JSON")
        st, h, data = infer("INT64", True, pos[:4] + [1 << 40])
        self.assertEqual(st, 400, data)
        err = json.loads(data)["error"]
        self.assertIn("q_positions[4]", err)
        self.assertIn("1099511627776", err)
        st, h, data = infer("INT16", True, pos)
        self.assertEqual(st, 400, data)
        self.assertIn("INT32 or INT64", json.loads(data)["error"])

    def test_packed_sequences(self):
        """cu_seqlens (INT64, binary) and cu_seqlens_k (INT32, JSON): the
        /v1 packed item's output bit for bit, and weights flat, each
        sequence's [H, Lq_s, Lk_s] after the other (/v1 lists them)."""
        c = Case(47, Lq=9, Lk=12)
        cq, ck = [0, 4, 9], [0, 5, 12]
        item = c.v1_item({"type": "rope"}, causal=True, cu_seqlens=cq, cu_seqlens_k=ck,
                         **{"return": ["output", "weights"]})
        st, _, data = post_json("/v1/attention", {"inputs": [item], "output_encoding": "b64"})
        self.assertEqual(st, 200, data)
        v1 = json.loads(data)["outputs"][0]
        self.assertEqual([w["shape"] for w in v1["weights"]], [[4, 4, 5], [4, 5, 7]])
        flat = b"".join(base64.b64decode(w["b64"]) for w in v1["weights"])
        ins = c.v2_inputs(binary=True)
        ins.append({"name": "cu_seqlens", "shape": [3], "datatype": "INT64",
                    "parameters": {"binary_data_size": 24}})
        ins.append({"name": "cu_seqlens_k", "shape": [3], "datatype": "INT32", "data": ck})
        header = {"parameters": {"causal": True, "binary_data_output": True}, "inputs": ins,
                  "outputs": [{"name": "output"}, {"name": "weights"}]}
        body, hdrs = binary_request(header, c.binary_part() + struct.pack("<3q", *cq))
        st, h, data = call("POST", "/v2/models/attention-rope/infer", body, hdrs)
        self.assertEqual(st, 200, data)
        head, raw = split_binary(h, data)
        self.assertEqual(head["outputs"][1]["shape"], [4 * (4 * 5 + 5 * 7)])
        n_out = head["outputs"][0]["parameters"]["binary_data_size"]
        self.assertEqual(raw[:n_out], base64.b64decode(v1["output"]["b64"]))
        self.assertEqual(raw[n_out:], flat)
        ins[-1]["data"] = [0, 5, 11]
        body, hdrs = binary_request(header, c.binary_part() + struct.pack("<3q", *cq))
        st, h, data = call("POST", "/v2/models/attention-rope/infer", body, hdrs)
        self.assertEqual(st, 400, data)
        self.assertIn("cu_seqlens_k", json.loads(data)["error"])

    def test_t5_table_input(self):
        c = Case(5, H=2, Hkv=2)
        rng = random.Random(6)
        table = rand_f32(rng, 32 * 2)
        ins = c.v2_inputs() + [{"name": "table", "shape": [32, 2], "datatype": "FP32",
                                "data": table}]
        req = {"parameters": {"num_buckets": 32, "max_distance": 64}, "inputs": ins}
        st, _, body = post_json("/v2/models/attention-t5/infer", req)
        self.assertEqual(st, 200, body)
        scheme = {"type": "t5", "num_buckets": 32, "max_distance": 64,
                  "table": {"shape": [32, 2], "b64": b64(table)}}
        want, _ = v1_attention(c.v1_item(scheme))
        self.assertEqual(le_bytes(json.loads(body)["outputs"][0]["data"]), want["output"])


class InferBinary(unittest.TestCase):
    def test_published_binary_example(self):
        """extension_binary_data.md "Examples": binary inputs, binary output."""
        c = Case(7)
        inputs = ",\n".join(
            '    {\n      "name" : "%s",\n      "shape" : %s,\n      "datatype" : "FP32",\n'
            '      "parameters" : {\n        "binary_data_size" : %d\n      }\n    }'
            % (n, json.dumps(s), 4 * len(c.data[n])) for n, s in c.shapes.items())
        head = ('{\n  "model_name" : "attention-rope",\n  "inputs" : [\n%s\n  ],\n'
                '  "outputs" : [\n    {\n      "name" : "output",\n      "parameters" : {\n'
                '        "binary_data" : true\n      }\n    }\n  ]\n}' % inputs)
        for pad in (0, 1, 2, 3):  # every alignment of the binary part in the body
            body, hdrs = binary_request(None, c.binary_part(), head + " " * pad)
            self.assertEqual(len(body), len(head) + pad + 4 * (5 * 4 * 8 + 7 * 2 * 8 + 7 * 2 * 6))
            st, h, data = call("POST", "/v2/models/attention-rope/infer", body, hdrs)
            self.assertEqual(st, 200, data)
            self.assertEqual(h["Content-Type"], "application/octet-stream")
            n = int(h["Inference-Header-Content-Length"])
            self.assertEqual(int(h["Content-Length"]), n + 5 * 4 * 6 * 4)
            ans = json.loads(data[:n])
            self.assertEqual(ans["outputs"], [{"name": "output", "datatype": "FP32",
                                               "shape": [5, 4, 6],
                                               "parameters": {"binary_data_size": 480}}])
            want, _ = v1_attention(c.v1_item({"type": "rope"}))
            self.assertEqual(data[n:], want["output"])

    def test_binary_data_output_and_override(self):
        c = Case(8)
        body, hdrs = binary_request(
            {"id": "b", "parameters": {"binary_data_output": True}, "inputs": c.v2_inputs(True),
             "outputs": [{"name": "weights"}, {"name": "output",
                                               "parameters": {"binary_data": False}},
                         {"name": "q_rot"}]}, c.binary_part())
        st, h, data = call("POST", "/v2/models/attention-rope/infer", body, hdrs)
        self.assertEqual(st, 200, data)
        head, raw = split_binary(h, data)
        self.assertEqual(head["id"], "b")
        w, o, qr = head["outputs"]
        want, _ = v1_attention(c.v1_item({"type": "rope"}), ("weights", "output", "q_rot"))
        self.assertNotIn("data", w)
        self.assertEqual(w["parameters"]["binary_data_size"], len(want["weights"]))
        self.assertNotIn("parameters", o)
        self.assertEqual(le_bytes(o["data"]), want["output"])
        self.assertEqual(raw, want["weights"] + want["q_rot"])

    def test_default_json_when_all_binary_in(self):
        """Binary inputs, no outputs list: output only, as JSON."""
        c = Case(9)
        body, hdrs = binary_request({"inputs": c.v2_inputs(True)}, c.binary_part())
        st, h, data = call("POST", "/v2/models/attention-rope/infer", body, hdrs)
        self.assertEqual(st, 200, data)
        self.assertEqual(h["Content-Type"], "application/json")
        self.assertIsNone(h.get("Inference-Header-Content-Length"))
        outs = json.loads(data)["outputs"]
        self.assertEqual([o["name"] for o in outs], ["output"])

    def test_mixed_json_and_binary_inputs(self):
        c = Case(10)
        ins = c.v2_inputs(True)
        ins[1] = c.v2_inputs()[1]  # k as JSON, q and v binary
        binary = le_bytes(c.data["q"]) + le_bytes(c.data["v"])
        body, hdrs = binary_request({"inputs": ins, "parameters": {"binary_data_output": True}},
                                    binary)
        st, h, data = call("POST", "/v2/models/attention-rope/infer", body, hdrs)
        self.assertEqual(st, 200, data)
        _, raw = split_binary(h, data)
        want, _ = v1_attention(c.v1_item({"type": "rope"}))
        self.assertEqual(raw, want["output"])


class Errors(unittest.TestCase):
    def err(self, status, path, body, headers=None, *want):
        st, h, data = call("POST", path, body, headers)
        self.assertEqual(st, status, data)
        self.assertTrue(h["Content-Type"].startswith("application/json"))
        obj = conform(json.loads(data), "inference_error_response")
        self.assertEqual(list(obj), ["error"], obj)
        self.assertIsInstance(obj["error"], str)
        for w in want:
            self.assertIn(w, obj["error"])
        return obj["error"]

    def json_err(self, status, obj, *want, model="attention-rope"):
        return self.err(status, "/v2/models/%s/infer" % model, json.dumps(obj).encode(), None,
                        *want)

    def test_unknown_model(self):
        self.json_err(404, {"inputs": []}, "unknown model 'attention-nope'", model="attention-nope")

    def test_bad_requests(self):
        c = Case(11)
        ins = c.v2_inputs()
        int8 = [dict(ins[0], datatype="INT8")] + ins[1:]
        self.json_err(400, {"inputs": int8}, "q.datatype='INT8'", "FP32, FP16, BF16 or FP64")
        short = [dict(ins[0], data=ins[0]["data"][:-1])] + ins[1:]
        self.json_err(400, {"inputs": short}, "q", "159", "160")
        self.json_err(400, {"inputs": ins[:2]}, "v is required")
        self.json_err(400, {"inputs": ins + [ins[0]]}, "input 'q' appears more than once")
        self.json_err(400, {"inputs": ins + [dict(ins[0], name="z")]}, "'z'", "inputs:")
        self.json_err(400, {"inputs": ins, "parameters": {"bogus": 1}},
                      "parameters.bogus is not a parameter", "causal", "high_freq_factor")
        self.json_err(400, {"inputs": ins, "parameters": {"base": "x"}},
                      "parameters.base must be a number")
        self.json_err(400, {"inputs": ins, "outputs": [{"name": "nope"}]}, "'nope'", "weights")
        self.json_err(400, {"inputs": ins, "outputs": [{"name": "output"}, {"name": "output"}]},
                      "more than once")
        self.json_err(400, {"inputs": ins, "model_name": "attention-alibi"}, "model_name")
        self.json_err(400, {"inputs": ins, "id": 42}, "id must be a string")
        bad_shape = [dict(ins[0], shape=[5, 4])] + ins[1:]
        self.json_err(400, {"inputs": bad_shape}, "q.shape has 2 dimensions, expected 3")
        # As properties.input_datatypes says: q takes FP64, alibi's slopes FP32 alone.
        slopes = {"name": "slopes", "shape": [4], "datatype": "FP32", "data": [0.5, 0.25, 0.1, 0.05]}
        st, _, data = call("POST", "/v2/models/attention-alibi/infer", json.dumps(
            {"inputs": [dict(ins[0], datatype="FP64")] + ins[1:] + [slopes]}).encode())
        self.assertEqual(st, 200, data)
        self.json_err(400, {"inputs": ins + [dict(slopes, datatype="FP16")]},
                      "slopes.datatype='FP16' is not supported", "is FP32", model="attention-alibi")
        # A /v1 batch (4-D q) is not an infer request: the answer says so.
        batch = [dict(ins[0], shape=[1] + ins[0]["shape"])] + ins[1:]
        self.json_err(400, {"inputs": batch},
                      "q.shape has 4 dimensions, expected 3 ([Lq, H, D]): KServe v2 takes one "
                      "sequence per request; send a batch to /v1/attention")
        gqa = [ins[0], dict(ins[1], shape=[7, 3, 8], data=[0.0] * 168)] + ins[2:]
        self.json_err(400, {"inputs": gqa}, "k.shape[1]=3 does not divide num_heads=4")
        st, _, data = call("POST", "/v2/models/attention-rope/infer", b"{not json")
        self.assertEqual(st, 400)
        self.assertIn("not valid JSON", json.loads(data)["error"])

    def test_binary_errors(self):
        c = Case(12)
        path = "/v2/models/attention-rope/infer"
        ins = c.v2_inputs(True)
        good, hdrs = binary_request({"inputs": ins}, c.binary_part())
        n = int(hdrs["Inference-Header-Content-Length"])
        # binary_data_size not matching the shape
        wrong = [dict(ins[0], parameters={"binary_data_size": 4})] + ins[1:]
        body, h = binary_request({"inputs": wrong}, c.binary_part())
        self.err(400, path, body, h, "q.parameters.binary_data_size=4", "[5,4,8]", "640 bytes")
        # header length past the body
        self.err(400, path, good, dict(hdrs, **{"Inference-Header-Content-Length":
                                                str(len(good) + 1)}), "past the end")
        # binary data missing at the end, or left over
        self.err(400, path, good[:-4], hdrs, "v.parameters.binary_data_size", "past the end")
        self.err(400, path, good + b"\0\0\0\0", hdrs, "add up to")
        # a raw binary request (header length 0) needs a single-input model
        self.err(400, path, c.binary_part(), dict(hdrs, **{"Inference-Header-Content-Length": "0"}),
                 "raw binary request")
        self.err(400, path, good, dict(hdrs, **{"Inference-Header-Content-Length": "12x"}),
                 "is not a byte count")
        # binary_data_size without the header
        self.err(400, path, good[:n], {"Content-Type": "application/json"},
                 "no Inference-Header-Content-Length")
        # data and binary_data_size both
        both = [dict(ins[0], data=c.data["q"])] + ins[1:]
        body, h = binary_request({"inputs": both}, c.binary_part())
        self.err(400, path, body, h, "both data and parameters.binary_data_size")
        # a non-finite float in a binary input
        nan = bytearray(c.binary_part())
        nan[8:12] = struct.pack("<f", float("nan"))
        self.err(400, path, bytes(good[:n]) + bytes(nan), hdrs, "non-finite", "NaN", "element 2")

    def test_method_and_route(self):
        st, h, data = call("GET", "/v2/models/attention-rope/infer")
        self.assertEqual(st, 405)
        self.assertEqual(h["Allow"], "POST")
        self.assertEqual(list(json.loads(data)), ["error"])
        # The router's own 404s and 405s under /v2 take the protocol's shape.
        for method, path, status in (("GET", "/v2/nothing", 404), ("GET", "/v2/models", 404),
                                     ("GET", "/v2/models/attention-rope/infer/x", 404),
                                     ("DELETE", "/v2/models/attention-rope", 405),
                                     ("POST", "/v2/health/live", 405)):
            st, h, data = call(method, path, b"{}" if method == "POST" else None)
            self.assertEqual(st, status, path)
            obj = json.loads(data)
            self.assertEqual(list(obj), ["error"], path)
            self.assertIsInstance(obj["error"], str)
        # Outside /v2 the /v1 shape stays.
        st, _, data = call("GET", "/v2x")
        self.assertEqual(json.loads(data)["error"]["code"], "NOT_FOUND")


@unittest.skipUnless(AUTH_URL, "needs POSATTN_AUTH_URL (harness.sh)")
class Auth(unittest.TestCase):
    def test_infer_and_metadata_need_the_key(self):
        c = Case(13)
        body = json.dumps({"inputs": c.v2_inputs()}).encode()
        for method, path, b in (("POST", "/v2/models/attention-rope/infer", body),
                                ("GET", "/v2/models/attention-rope", None), ("GET", "/v2", None)):
            st, _, data = call(method, path, b, base=AUTH_URL)
            self.assertEqual(st, 401, path)
            self.assertEqual(list(json.loads(data)), ["error"])
            st, _, data = call(method, path, b, {"Authorization": "Bearer " + API_KEY},
                               base=AUTH_URL)
            self.assertEqual(st, 200, data)
        for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/attention-rope/ready"):
            st, _, data = call("GET", path, base=AUTH_URL)
            self.assertEqual((st, data), (200, b""), path)


HERE = os.path.dirname(os.path.abspath(__file__))
class Conformance(unittest.TestCase):
    """Answers against the OpenAPI document's schemas (tests/fixtures/oip)."""

    def test_the_check_can_fail(self):
        # What posattnd sent before: masked logits as null, and /v1's error object.
        with self.assertRaises(jsonschema.ValidationError):
            conform({"model_name": "m", "outputs": [
                {"name": "logits", "shape": [1], "datatype": "FP32", "data": [None]}]},
                "inference_response")
        with self.assertRaises(jsonschema.ValidationError):
            conform({"error": {"code": "NOT_FOUND", "message": "x"}}, "inference_error_response")
        with self.assertRaises(jsonschema.ValidationError):
            conform({"name": "m", "platform": "p", "properties": {"n": 1}},
                    "metadata_model_response")

    def test_every_model_and_error(self):
        c = Case(17)
        for scheme in ("none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"):
            model = "/v2/models/attention-" + scheme
            _, _, body = call("GET", model + "/versions/1")
            conform(json.loads(body), "metadata_model_response")
            st, _, body = post_json(model + "/infer", {"inputs": c.v2_inputs(),
                                                       "outputs": [{"name": "output"},
                                                                   {"name": "weights"}]})
            # Absolute schemes want x; the relative ones' tables are required.
            conform(json.loads(body), "inference_response" if st == 200
                    else "inference_error_response")
        for method, path in (("GET", "/v2/nowhere"), ("DELETE", "/v2"),
                             ("GET", "/v2/models/attention-rope/versions/3")):
            st, _, body = call(method, path)
            self.assertGreaterEqual(st, 400)
            conform(json.loads(body), "metadata_server_error_response")


class Stats(unittest.TestCase):
    """Triton's statistics extension (extension_statistics.md)."""

    def stat(self, path):
        st, h, body = call("GET", path)
        self.assertEqual(st, 200, body)
        self.assertEqual(h["Content-Type"], "application/json")
        return json.loads(body)["model_stats"]

    def test_counts_move(self):
        path = "/v2/models/attention-shaw/stats"
        before = self.stat(path)
        self.assertEqual(len(before), 1)
        b = before[0]
        self.assertEqual((b["name"], b["version"], b["batch_stats"]), ("attention-shaw", "1", []))
        self.assertEqual(sorted(b["inference_stats"]),
                         ["cache_hit", "cache_miss", "compute_infer", "compute_input",
                          "compute_output", "fail", "queue", "success"])
        c = Case(16)
        ins = c.v2_inputs() + [
            {"name": "rel_k", "shape": [5, 8], "datatype": "FP32", "data": [0.5] * 40}]
        params = {"max_relative_position": 2}
        for _ in range(2):
            st, _, body = post_json("/v2/models/attention-shaw/infer",
                                    {"inputs": ins, "parameters": params})
            self.assertEqual(st, 200, body)
        st, _, _ = post_json("/v2/models/attention-shaw/versions/1/infer", {"inputs": ins[:1]})
        self.assertEqual(st, 400)
        after = self.stat("/v2/models/attention-shaw/versions/1/stats")[0]
        ib, ia = b["inference_stats"], after["inference_stats"]
        self.assertEqual(after["inference_count"] - b["inference_count"], 2)
        self.assertEqual(after["execution_count"], after["inference_count"])
        self.assertEqual(ia["success"]["count"] - ib["success"]["count"], 2)
        self.assertEqual(ia["fail"]["count"] - ib["fail"]["count"], 1)
        for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
            self.assertEqual(ia[phase]["count"], ia["success"]["count"], phase)
        self.assertGreater(ia["compute_infer"]["ns"], ib["compute_infer"]["ns"])
        self.assertGreater(ia["success"]["ns"] - ib["success"]["ns"],
                           ia["compute_infer"]["ns"] - ib["compute_infer"]["ns"])
        self.assertGreater(after["last_inference"], 1.7e12)  # ms since the epoch
        # Every model's, from the same counters; and /metrics agrees.
        every = self.stat("/v2/models/stats")
        self.assertEqual([m["name"] for m in every],
                         ["attention-" + s for s in ("none", "sinusoidal", "learned", "shaw",
                                                     "t5", "rope", "alibi", "kerple", "sandwich",
                                                     "xpos", "rope2d", "fire", "cope")])
        self.assertEqual([m for m in every if m["name"] == "attention-shaw"][0]["inference_count"],
                         after["inference_count"])
        _, _, text = call("GET", "/metrics")
        m = re.search(r'posattn_v2_inferences_total\{scheme="shaw",outcome="success"\} (\d+)',
                      text.decode())
        self.assertIsNotNone(m)
        self.assertEqual(int(m.group(1)), after["inference_count"])
        st, _, body = call("GET", "/v2/models/attention-nope/stats")
        self.assertEqual(st, 404)
        self.assertIn("unknown model", json.loads(body)["error"])


class Metrics(unittest.TestCase):
    def test_labels(self):
        call("GET", "/v2/health/live")
        call("GET", "/v2")
        post_json("/v2/models/attention-rope/infer", {"inputs": Case(14).v2_inputs()})
        _, _, text = call("GET", "/metrics")
        text = text.decode()
        for label in ("v2_health", "v2_metadata", "v2_infer"):
            self.assertRegex(text, r'posattn_requests_total\{endpoint="%s",code="200"\} [1-9]'
                             % label)
        self.assertRegex(text, r'posattn_items_total\{scheme="rope"\} [1-9]')


if __name__ == "__main__":
    argv = [a for a in sys.argv if a != "-q"]
    unittest.main(argv=argv, verbosity=1 if "-q" in sys.argv else 2)
