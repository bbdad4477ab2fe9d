#!/usr/bin/python3
"""conformance.py - openapi.yaml against a live posattnd, request by request.

Sends real requests to every route (every scheme and rope scaling, the
diagnostics, batches, base64 and f16 answers, every analysis, the Open
Inference Protocol routes, and errors of every status the spec names) and
checks each exchange against openapi.yaml through exchange() of
openapi_check.py beside it (the document as JSON Schema, and the checks):

- the request body must be valid against the operation's requestBody schema,
  and the answer against the response schema for its status code and
  Content-Type, checked closed (a member the spec does not name fails);
- every object the spec marks `additionalProperties: false` must be so in the
  server: a request with an unknown member there is rejected by the spec and
  by the server (UNKNOWN_FIELD naming it), and the server's list of known
  fields in that error must equal the spec's `properties` for the object.

    tests/e2e/harness.sh /usr/bin/python3 tests/openapi/conformance.py   # starts the servers
    POSATTN_URL=http://127.0.0.1:8080 /usr/bin/python3 tests/openapi/conformance.py

POSATTN_AUTH_URL / POSATTN_AUTH_KEY (set by harness.sh: --api-key and
--max-body-mb 1) add the 401 and body-size 413 cases. OPENAPI_SPEC names
another copy of the document (default: the repository's openapi.yaml).
"""

import base64
import copy
import json
import os
import re
import struct
import sys
import unittest

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openapi_check import (  # noqa: E402  (tests/openapi/openapi_check.py)
    SPEC_BYTES, SPEC_PATH, Stats, call, check_answer, check_request, component, deref, exchange,
    property_names, validate)

AUTH_URL = os.environ.get("POSATTN_AUTH_URL", "").rstrip("/")
API_KEY = os.environ.get("POSATTN_AUTH_KEY", "")


# ------------------------------------------------------------------- requests
def vals(n, seed=0):
    """n small deterministic floats."""
    return [((i * 7 + seed * 13) % 17 - 8) / 8.0 for i in range(n)]


def T(*shape, seed=0, b64=False):
    n = 1
    for d in shape:
        n *= d
    if b64:
        return {"shape": list(shape),
                "b64": base64.b64encode(struct.pack("<%df" % n, *vals(n, seed))).decode()}
    return {"shape": list(shape), "data": vals(n, seed)}


def qkv(scheme, L=3, H=2, D=4, **extra):
    item = {"scheme": scheme, "q": T(L, H, D, seed=1), "k": T(L, H, D, seed=2),
            "v": T(L, H, D, seed=3)}
    item.update(extra)
    return item


def layer(scheme, L=3, d=8, H=2, D=4, **extra):
    item = {"scheme": scheme, "x": T(L, d, seed=4), "w_q": T(d, H * D, seed=5),
            "w_k": T(d, H * D, seed=6), "w_v": T(d, H * D, seed=7), "num_heads": H}
    item.update(extra)
    return item


ALL_RETURNS = ["output", "weights", "logits", "q_rot", "k_rot", "entropy", "distance"]

# One valid attention item per scheme, as the unknown-field cases' bases too.
GOOD_ITEMS = {
    "none": qkv({"type": "none"}),
    "sinusoidal": layer({"type": "sinusoidal", "layout": "concat"}),
    "learned": layer({"type": "learned", "table": T(4, 8, seed=8), "offset": 1}),
    "shaw": qkv({"type": "shaw", "max_relative_position": 2, "rel_k": T(5, 4, seed=9),
                 "rel_v": T(5, 4, seed=10)}),
    "t5": qkv({"type": "t5", "num_buckets": 8, "max_distance": 16, "table": T(8, 2, seed=11)}),
    "rope": qkv({"type": "rope", "base": 10000, "layout": "gptj"}, causal=True),
    "alibi": qkv({"type": "alibi", "max_bias": 8}, causal=True),
    "kerple": qkv({"type": "kerple", "form": "power", "r1": [0.5, 1.0], "r2": [1.5, 0.25]},
                  causal=True),
    "sandwich": qkv({"type": "sandwich", "hidden_size": 8}),
    "fire": qkv({"type": "fire", "c": 0.2, "L": 2, "w1": [1.5, -2.0, 0.75], "b1": [-0.5, 1.0, 0.25],
                 "w2": [0.5, -1.0, 2.0, 0.25, -0.75, 1.5], "b2": [0.1, -0.2]}, causal=True),
    "cope": qkv({"type": "cope", "pos_emb": T(5, 4, seed=12), "nodiv": True}, causal=True),
}

ROPE_SCALINGS = [
    {"scaling": "none"},
    {"scaling": "linear", "factor": 2},
    {"scaling": "ntk", "factor": 2},
    {"scaling": "dynamic", "factor": 2, "original_max_position": 2},
    {"scaling": "yarn", "factor": 4, "original_max_position": 2, "beta_fast": 32,
     "beta_slow": 1, "mscale": 1, "mscale_all_dim": 0, "truncate": False},
    {"scaling": "llama3", "factor": 8, "original_max_position": 2, "low_freq_factor": 1,
     "high_freq_factor": 4},
    {"scaling": "longrope", "original_max_position": 2, "short_factor": [1, 1.5],
     "long_factor": [2, 4], "attention_factor": 1.2},
]

ANALYSES = {
    "permutation": {"analysis": "permutation", "id": "p", "permutation": [2, 0, 1],
                    **{k: v for k, v in GOOD_ITEMS["rope"].items() if k != "causal"}},
    "decomposition": {"analysis": "decomposition", "id": 7, **layer({"type": "sinusoidal"})},
    "rope_offset": {"analysis": "rope_offset", "scheme": {"type": "rope"}, "q": [1, 0, 0, 1],
                    "k": {"shape": [4], "data": [0, 1, 1, 0]}, "offsets": [-2, 0, 2],
                    "base_position": 4, "positions": [4, 5, 6]},
    "rope_offset_xpos": {"analysis": "rope_offset", "scheme": {"type": "xpos", "scale_base": 64},
                         "q": [1, 0, 0, 1], "k": [0, 1, 1, 0], "offsets": [-2, 0, 2]},
    "similarity": {"analysis": "similarity", "scheme": {"type": "sinusoidal"}, "length": 4,
                   "dim": 8, "shift": 2},
    "rope_spectrum": {"analysis": "rope_spectrum", "head_dim": 8, "train_length": 16,
                      "length": 64, "scheme": {"type": "rope", "scaling": "yarn", "factor": 4,
                                               "original_max_position": 16}},
    "extrapolation": {"analysis": "extrapolation", "id": "g", "scheme": {"type": "alibi"},
                      "train_length": 4, "lengths": [4, 8], "band": 2, "inputs": "gaussian",
                      "num_heads": 2, "num_kv_heads": 1, "head_dim": 4, "seed": 3,
                      "causal": True},
    "extrapolation_tensors": {"analysis": "extrapolation", "scheme": {"type": "rope"},
                              "train_length": 2, "lengths": [2, 3],
                              **{k: v for k, v in GOOD_ITEMS["rope"].items()
                                 if k != "scheme"}},
}

ENCODES = [
    {"scheme": {"type": "none"}},
    {"scheme": {"type": "sinusoidal"}, "length": 4, "dim": 8},
    {"scheme": {"type": "sinusoidal", "base": 100}, "positions": [0, 5, 9], "dim": 4,
     "output_encoding": "b64"},
    {"scheme": {"type": "learned", "table": T(6, 4)}, "positions": [1, 2]},
    {"scheme": {"type": "rope", "scaling": "yarn", "factor": 4, "original_max_position": 8},
     "length": 3, "dim": 8},
    {"scheme": {"type": "rope", "mrope_section": [1, 1, 0]}, "dim": 4,
     "positions": [[0, 1, 2], [0, 0, 1], [0, 1, 0]]},
    {"scheme": {"type": "alibi"}, "num_heads": 4},
    {"scheme": {"type": "alibi", "symmetric": True}, "num_heads": 2, "q_length": 2,
     "k_length": 3},
    {"scheme": {"type": "t5", "num_buckets": 8}, "q_length": 3, "k_length": 3},
    {"scheme": {"type": "t5", "num_buckets": 8, "table": T(8, 2)}, "q_positions": [0, 1],
     "k_positions": [0, 1, 2]},
    {"scheme": {"type": "shaw", "max_relative_position": 1}, "q_length": 2},
    {"scheme": {"type": "kerple", "r1": [0.5, 1.0], "r2": [0.1, 2.0]}, "q_length": 2,
     "k_length": 3},
    {"scheme": {"type": "sandwich", "hidden_size": 8}, "num_heads": 2, "q_positions": [4, 1],
     "k_positions": [0, 1, 2]},
    {"scheme": {"type": "fire", "w1": [1.0, -1.0], "b1": [0.0, 0.5], "w2": [1.0, 0.5],
                "b2": [0.0]}, "q_positions": [600, 3], "k_positions": [0, 2, 700]},
    {"scheme": {"type": "none"}, "chunk_size": 2, "causal": True, "q_length": 4},
]


def with_field(obj, path, name="no_such_field", value=1):
    """A deep copy of obj with obj[path...][name] = value."""
    out = copy.deepcopy(obj)
    cur = out
    for p in path:
        cur = cur[p]
    cur[name] = value
    return out


def server_error(answer):
    """The one error of an answer: the whole request's or its one item's."""
    if "error" in answer:
        return answer["error"]
    errs = [o["error"] for o in answer.get("outputs", []) if "error" in o]
    assert len(errs) == 1, answer
    return errs[0]


def known_fields(message):
    """The server's list of the fields it knows, '(known: a, b, c)' or a
    tensor's '(shape, data, ...)'; returns (names, complete): a long list is
    cut short in the message, ending in ','."""
    m = re.search(r"\((?:known: )?([^()]*)\)$", message)
    assert m, message
    names = {n for n in m.group(1).split(", ") if n and not n.endswith(",")}
    if m.group(1) == "none":
        names = set()
    return names, not m.group(1).endswith(",")


# ---------------------------------------------------------------------- tests
class Spec(unittest.TestCase):
    def test_served_document_is_this_file(self):
        st, text = exchange("GET", "/openapi.yaml")
        self.assertEqual(st, 200)
        self.assertEqual(text.encode(), SPEC_BYTES,
                         "the server embeds another openapi.yaml: rebuild posattnd")

    def test_the_check_can_fail(self):
        ok = {"outputs": [{"id": None, "output": {"shape": [1], "datatype": "FP32",
                                                  "data": [None]}}], "errors": False}
        validate(ok, component("AttentionResponse"), closed=True)
        bad = [
            {"outputs": [{"id": None, "output": {"shape": [1], "datatype": "FP32",
                                                 "data": ["x"]}}], "errors": False},
            {"outputs": [{"id": None, "surprise": 1}], "errors": False},  # closed
            {"outputs": [{"error": {"code": "NOPE", "message": "m"}}], "errors": True},
            {"outputs": [{"output": {"shape": [1], "datatype": "FP32", "b64": "!!"}}],
             "errors": False},
        ]
        for obj in bad:
            with self.assertRaises(jsonschema.ValidationError, msg=obj):
                validate(obj, component("AttentionResponse"), closed=True)
        with self.assertRaises(jsonschema.ValidationError):  # int32
            validate({"scheme": {"type": "none"}, "length": 2**31}, component("EncodeRequest"))
        with self.assertRaises(AssertionError):  # an undocumented status
            check_answer("GET", "/healthz", 418, {}, b"")


class Routes(unittest.TestCase):
    def test_get_routes(self):
        for path in ("/v1/schemes", "/v1/tensors", "/v1/models", "/healthz", "/readyz", "/metrics", "/",
                     "/web/app.js", "/v2", "/v2/health/live", "/v2/health/ready",
                     "/v2/models/attention-rope", "/v2/models/attention-alibi/ready",
                     "/v2/models/stats", "/v2/models/attention-t5/stats"):
            st, _ = exchange("GET", path)
            self.assertEqual(st, 200, path)

    def test_models(self):
        """A config resolved, an item with an inline config, and a refusal,
        each checked against the document by exchange()."""
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "fixtures", "models", "gemma2.json")) as f:
            cfg = json.load(f)
        st, obj = exchange("POST", "/v1/models/resolve", cfg)
        self.assertEqual(st, 200, obj)
        self.assertEqual(len(obj["layers"]), 4)
        item = dict(qkv({"type": "none"}, L=3, H=4, D=16), model=cfg, layer=1)
        item.pop("scheme")
        item["k"] = qkv({"type": "none"}, L=3, H=2, D=16)["k"]
        item["v"] = qkv({"type": "none"}, L=3, H=2, D=16)["v"]
        st, obj = exchange("POST", "/v1/attention", {"inputs": [item]})
        self.assertEqual(st, 200, obj)
        st, obj = exchange("POST", "/v1/models/resolve", {"model_type": "resnet"})
        self.assertEqual((st, obj["error"]["code"]), (400, "INVALID_ARGUMENT"))

    def test_schemes_documents_every_scheme(self):
        _, obj = exchange("GET", "/v1/schemes")
        names = {s["name"] for s in obj["schemes"]}
        self.assertEqual(names, set(deref(component("Scheme"))["discriminator"]["mapping"]))
        for s in obj["schemes"]:  # each parameter the server lists is in the spec's scheme
            spec = property_names(component("Scheme" + {"t5": "T5"}.get(
                s["name"], s["name"].capitalize())))
            self.assertLessEqual({p["name"] for p in s["parameters"]}, spec, s["name"])

    def test_errors(self):
        for method, path, want in (("GET", "/web/nope.js", 404), ("DELETE", "/v1/attention", 405),
                                   ("POST", "/healthz", 405), ("GET", "/v2/models/nope", 404),
                                   ("GET", "/v2/models/nope/ready", 404),
                                   ("PUT", "/v2", 405), ("GET", "/v2/models/attention-x/stats",
                                                        404)):
            st, _ = exchange(method, path, raw=b"" if method in ("POST", "PUT") else None)
            self.assertEqual(st, want, (method, path))

    @unittest.skipUnless(AUTH_URL, "POSATTN_AUTH_URL is not set")
    def test_auth(self):
        body = {"inputs": [GOOD_ITEMS["none"]]}
        for path in ("/v1/attention", "/v1/encode", "/v1/analyze"):
            st, _ = exchange("POST", path, body if path == "/v1/attention" else
                             ENCODES[0] if path == "/v1/encode" else ANALYSES["similarity"],
                             base=AUTH_URL)
            self.assertEqual(st, 401)
        for path in ("/v1/schemes", "/v1/tensors", "/v2", "/v2/models/attention-none",
                     "/v2/models/stats"):
            self.assertEqual(exchange("GET", path, base=AUTH_URL)[0], 401, path)
        st, _ = exchange("POST", "/v1/attention", body, base=AUTH_URL,
                         headers={"Authorization": "Bearer " + API_KEY})
        self.assertEqual(st, 200)
        # Over --max-body-mb 1: refused before parsing.
        big = {"inputs": [qkv({"type": "none"}, L=256, H=4, D=128)]}
        st, obj = exchange("POST", "/v1/attention", big, base=AUTH_URL,
                           headers={"Authorization": "Bearer " + API_KEY})
        self.assertEqual((st, obj["error"]["code"]), (413, "PAYLOAD_TOO_LARGE"))


class Attention(unittest.TestCase):
    def ok(self, body):
        st, obj = exchange("POST", "/v1/attention", body)
        self.assertEqual(st, 200, obj)
        self.assertFalse(obj["errors"], obj)
        return obj

    def test_every_scheme_with_every_diagnostic(self):
        items = [dict(it, id=name, **{"return": ALL_RETURNS}) for name, it in GOOD_ITEMS.items()]
        obj = self.ok({"inputs": items})
        self.assertEqual([o["id"] for o in obj["outputs"]], list(GOOD_ITEMS))
        for o in obj["outputs"]:
            self.assertLessEqual(set(ALL_RETURNS), set(o))
        # causal rope: masked logits are null in JSON
        self.assertIn(None, obj["outputs"][5]["logits"]["data"])

    def test_rope_scalings(self):
        items = [qkv(dict({"type": "rope"}, **s), L=4, D=4, causal=True) for s in ROPE_SCALINGS]
        items.append(qkv({"type": "rope", "mrope_section": [1, 1, 0]}, L=3, D=4,
                         q_positions=[[0, 1, 2], [0, 0, 1], [0, 1, 0]],
                         k_positions=[[0, 1, 2], [0, 0, 1], [0, 1, 0]]))
        self.ok({"inputs": items})

    def test_encodings_dtypes_and_options(self):
        b64 = {"inputs": [qkv({"type": "alibi"}, causal=True, **{"return": ["output",
                                                                         "logits"]}),
                          dict(qkv({"type": "rope"}), q=T(3, 2, 4, b64=True),
                               output_dtype="bf16")],
               "output_encoding": "b64", "output_dtype": "f16"}
        obj = self.ok(b64)
        self.assertEqual(obj["outputs"][0]["output"]["datatype"], "FP16")
        self.assertIn("b64", obj["outputs"][1]["output"])
        opts = qkv({"type": "rope"}, L=4, H=2, D=4, causal=True, window=3, chunk_size=2,
                   softcap=30.0, scale=0.5, sinks=T(2), q_norm={"weight": T(4), "eps": 1e-5},
                   k_norm={"weight": T(4)}, mask={"shape": [4, 4], "data": [1] * 16},
                   bias=T(2, 4, 4), q_positions=[0, 1, 2, 3], k_positions={
                       "shape": [4], "dtype": "i64",
                       "b64": base64.b64encode(struct.pack("<4q", 0, 1, 2, 3)).decode()})
        batch = {"scheme": {"type": "alibi"}, "q": T(2, 3, 2, 4), "k": T(2, 3, 1, 4),
                 "v": T(2, 3, 1, 4), "key_length": [3, 2], "query_length": [3, 1],
                 "attention_mask": {"shape": [2, 3], "data": [1, 1, 1, 1, 1, 0]},
                 "num_heads": 2, "num_kv_heads": 1, "head_dim": 4}
        lay = layer({"type": "rope"}, w_o=T(8, 5), b_q=T(8), b_k=T(8), b_v=T(8), b_o=T(5))
        pre = qkv({"type": "rope"}, k_prerotated=True)
        scaled = qkv({"type": "none"}, attn_temperature_tuning={"floor_scale": 2},
                     logn_scaling={"train_length": 2}, q_norm={},
                     k_norm={"weight": T(4), "weight_offset": 1})
        # Packed sequences: weights, logits, entropy, distance a list per sequence.
        packed = qkv({"type": "rope"}, L=4, causal=True, cu_seqlens=[0, 1, 4],
                     cu_seqlens_k={"shape": [3], "data": [0, 1, 4]},
                     **{"return": ["output", "weights", "logits", "entropy", "distance"]})
        # Differential attention: q 2H heads, v [Lk, Hk/2, 2D] (interleaved)
        # or [Lk, Hk, D] (halves); output [Lq, H, 2D].
        diff = {"scheme": {"type": "rope"}, "q": T(3, 4, 4, seed=1), "k": T(3, 2, 4, seed=2),
                "v": T(3, 1, 8, seed=3), "causal": True, "return": ["output", "weights"],
                "differential": {"lambda_q1": T(4), "lambda_k1": [0.1] * 4,
                                 "lambda_q2": [0.2] * 4, "lambda_k2": [0.1] * 4, "depth": 2,
                                 "subln_weight": [1.0] * 8}}
        halves = dict(qkv({"type": "none"}, H=4), differential={
            "pairs": "halves", "lambda": 0.5, "lambda_init": 0.2, "subln_eps": 1e-6})
        # MLA: k is k_nope [Lk, H, D_nope], k_rope [Lk, D_rope] (or [Lk, 1,
        # D_rope]); absorbed: c_kv [Lk, R] with mla.w_uk and mla.w_uv.
        mla = {"scheme": {"type": "rope", "layout": "gptj"}, "q": T(3, 2, 6, seed=4),
               "k": T(3, 2, 4, seed=5), "v": T(3, 2, 3, seed=6), "k_rope": T(3, 2, seed=7),
               "mla": {"rope_dim": 2}, "causal": True, "return": ["output", "k_rot"]}
        absorbed = {"scheme": {"type": "rope"}, "q": T(2, 2, 6, seed=4), "c_kv": T(3, 5, seed=5),
                    "k_rope": T(3, 1, 2, seed=7),
                    "mla": {"rope_dim": 2, "absorbed": True, "w_uk": T(2, 4, 5, seed=8),
                            "w_uv": T(2, 3, 5, seed=9)}}
        obj = self.ok({"inputs": [opts, batch, lay, pre, scaled, packed, diff, halves, mla,
                                  absorbed]})
        self.assertEqual([w["shape"] for w in obj["outputs"][5]["weights"]],
                         [[2, 1, 1], [2, 3, 3]])
        self.assertEqual(obj["outputs"][6]["output"]["shape"], [3, 2, 8])
        self.assertEqual(obj["outputs"][6]["weights"]["shape"], [2, 3, 3])
        self.assertEqual(obj["outputs"][7]["output"]["shape"], [3, 2, 8])
        self.assertEqual(obj["outputs"][8]["output"]["shape"], [3, 2, 3])
        self.assertEqual(obj["outputs"][8]["k_rot"]["shape"], [3, 2])
        self.assertEqual(obj["outputs"][9]["output"]["shape"], [2, 2, 3])

    def test_int_tensor_positions(self):
        # IntTensor: positions as {"shape", "data"} as well as {"shape", "b64"}.
        for pos in ({"shape": [3], "data": [0, 1, 2]},
                    {"shape": [3], "b64": base64.b64encode(struct.pack("<3i", 0, 1, 2)).decode()},
                    {"shape": [3, 3], "data": [[0, 1, 2], [0, 0, 1], [0, 1, 0]]}):
            scheme = {"type": "rope", "mrope_section": [1, 1, 0]} if len(pos["shape"]) == 2 \
                else {"type": "rope"}
            self.ok({"inputs": [qkv(scheme, D=4, q_positions=pos, k_positions=pos)]})

    def test_partial_failure_is_200(self):
        st, obj = exchange("POST", "/v1/attention", {"inputs": [
            GOOD_ITEMS["none"], dict(GOOD_ITEMS["none"], num_heads=3)]})
        self.assertEqual(st, 200)
        self.assertTrue(obj["errors"])
        self.assertNotIn("error", obj["outputs"][0])
        self.assertEqual(obj["outputs"][1]["error"]["code"], "SHAPE_MISMATCH")

    def test_all_failed_takes_the_items_status(self):
        bad = dict(GOOD_ITEMS["none"], k=T(3, 3, 4))  # 3 kv heads for 2 query heads
        st, obj = exchange("POST", "/v1/attention", {"inputs": [bad, bad]})
        self.assertEqual(st, 400)
        self.assertTrue(obj["errors"])
        self.assertEqual(len(obj["outputs"]), 2)
        # A result over --max-tensor-elements (16 M) is the item's 413.
        huge = {"scheme": {"type": "none"}, "q": T(4100, 1, 1), "k": T(4100, 1, 1),
                "v": T(4100, 1, 1), "return": ["weights"]}
        st, obj = exchange("POST", "/v1/attention", {"inputs": [huge]})
        self.assertEqual((st, obj["outputs"][0]["error"]["code"]), (413, "PAYLOAD_TOO_LARGE"))
        st, obj = exchange("POST", "/v1/attention", {"inputs": [huge, bad]})  # they differ
        self.assertEqual(st, 400)
        self.assertEqual([o["error"]["code"] for o in obj["outputs"]],
                         ["PAYLOAD_TOO_LARGE", "SHAPE_MISMATCH"])

    def test_whole_request_errors(self):
        st, obj = exchange("POST", "/v1/attention", raw=b'{"inputs": [', valid=None)
        self.assertEqual((st, obj["error"]["code"]), (400, "MALFORMED_JSON"))
        st, obj = exchange("POST", "/v1/attention", {"inputs": []}, valid=False)
        self.assertEqual((st, obj["error"]["code"]), (400, "INVALID_ARGUMENT"))
        st, obj = exchange("POST", "/v1/attention", {"inputs": [GOOD_ITEMS["none"]] * 65})
        self.assertEqual((st, obj["error"]["code"]), (413, "PAYLOAD_TOO_LARGE"))
        st, obj = exchange("POST", "/v1/attention", {"inputs": [dict(
            GOOD_ITEMS["none"], q={"ref": "no_such_tensor"})]})
        self.assertEqual((st, obj["outputs"][0]["error"]["code"]), (400, "UNKNOWN_TENSOR"))


class EncodeAnalyze(unittest.TestCase):
    def test_encode(self):
        for body in ENCODES:
            st, obj = exchange("POST", "/v1/encode", body)
            self.assertEqual(st, 200, (body, obj))
        self.assertIn("chunk_visible", obj)

    def test_analyze(self):
        for name, body in ANALYSES.items():
            st, obj = exchange("POST", "/v1/analyze", body)
            self.assertEqual(st, 200, (name, obj))
            self.assertEqual(obj["analysis"], body["analysis"])
        for scaling in ROPE_SCALINGS:
            body = {"analysis": "rope_spectrum", "head_dim": 4, "train_length": 8,
                    "scheme": dict({"type": "rope"}, **scaling)}
            st, obj = exchange("POST", "/v1/analyze", body)
            self.assertEqual(st, 200, (body, obj))

    def test_errors(self):
        # One request, not a batch: an error is the whole answer.
        for path, body, code in (
                ("/v1/encode", {"scheme": {"type": "rope"}, "length": 2}, "INVALID_ARGUMENT"),
                ("/v1/encode", {"scheme": {"type": "sinusoidal"}, "length": 5000,
                                "dim": 5000}, "PAYLOAD_TOO_LARGE"),
                ("/v1/analyze", {"analysis": "similarity", "scheme": {"type": "sinusoidal"},
                                 "length": 4}, "INVALID_ARGUMENT"),
                ("/v1/analyze", {"analysis": "rope_offset", "scheme": {"type": "rope"},
                                 "q": [1, 0], "k": [1, 0, 0]}, "SHAPE_MISMATCH")):
            st, obj = exchange("POST", path, body)
            self.assertEqual(obj["error"]["code"], code, obj)
            self.assertEqual(st, 413 if code == "PAYLOAD_TOO_LARGE" else 400)
        st, obj = exchange("POST", "/v1/analyze", {"analysis": "nope"}, valid=False)
        self.assertEqual(st, 400)


class V2(unittest.TestCase):
    def test_infer(self):
        body = {"id": "1", "parameters": {"causal": True, "base": 10000},
                "inputs": [{"name": n, "shape": [2, 1, 2], "datatype": "FP32",
                            "data": vals(4, i)} for i, n in enumerate("qkv")],
                "outputs": [{"name": "output"}, {"name": "weights"}, {"name": "entropy"}]}
        st, obj = exchange("POST", "/v2/models/attention-rope/infer", body)
        self.assertEqual(st, 200, obj)
        st, data = exchange("POST", "/v2/models/attention-rope/infer", dict(
            body, outputs=[{"name": "output", "parameters": {"binary_data": True}}]))
        self.assertEqual(st, 200)
        self.assertIsInstance(data, bytes)
        st, obj = exchange("POST", "/v2/models/attention-rope/infer", dict(body, inputs=[]))
        self.assertEqual(st, 400)
        st, obj = exchange("POST", "/v2/models/attention-nope/infer", body)
        self.assertEqual(st, 404)


SESSION = {"scheme": {"type": "rope"}, "num_kv_heads": 2, "head_dim": 4, "max_tokens": 8}


def new_session(body=None):
    st, obj = exchange("POST", "/v1/sessions", body or SESSION)
    assert st == 201, (st, obj)
    return obj["id"]


class Sessions(unittest.TestCase):
    """/v1/sessions: every route, its statuses and its errors."""

    def test_lifecycle(self):
        sid = new_session()
        path = "/v1/sessions/" + sid
        st, obj = exchange("GET", path)
        self.assertEqual((st, obj["length"], obj["positions"]), (200, 0, None))
        st, obj = exchange("POST", path + "/append", {"k": T(3, 2, 4, seed=1),
                                                      "v": T(3, 2, 4, seed=2, b64=True)})
        self.assertEqual((st, obj["length"]), (200, 3))
        self.assertIn("timing", obj)
        st, obj = exchange("POST", path + "/append", {"k": T(1, 2, 4), "v": T(1, 2, 4),
                                                      "k_positions": [9]})
        self.assertEqual((st, obj["positions"]), (200, {"first": 0, "last": 9}))
        st, fork = exchange("POST", path + "/fork")
        self.assertEqual((st, fork["length"], fork["shared_blocks"]), (201, 4, 1))
        st, obj = exchange("POST", "/v1/sessions/%s/fork" % fork["id"], {})
        self.assertEqual(st, 201)
        st, obj = exchange("GET", "/v1/sessions?offset=0&limit=2")
        self.assertEqual((st, len(obj["sessions"])), (200, 2))
        st, obj = exchange("GET", "/v1/sessions")
        self.assertEqual(st, 200)
        self.assertGreaterEqual(obj["total"], 3)
        st, obj = exchange("GET", "/v1/sessions?limit=x")
        self.assertEqual((st, obj["error"]["field"]), (400, "limit"))
        st, obj = exchange("DELETE", path)
        self.assertEqual((st, obj), (200, {"id": sid, "deleted": True}))
        for method, p, body in (("GET", path, None), ("DELETE", path, None),
                                ("POST", path + "/append", {"k": T(1, 2, 4), "v": T(1, 2, 4)}),
                                ("POST", path + "/fork", None)):
            st, obj = exchange(method, p, body)
            self.assertEqual((st, obj["error"]["code"]), (404, "SESSION_NOT_FOUND"))
        exchange("DELETE", "/v1/sessions/" + fork["id"])
        for method, p in (("PUT", "/v1/sessions"), ("POST", path), ("GET", path + "/append"),
                          ("DELETE", path + "/fork")):
            st, obj = exchange(method, p)
            self.assertEqual(st, 405)

    def test_window(self):
        sid = new_session(dict(SESSION, scheme={"type": "alibi"}, eviction={
            "type": "window", "window": 4, "sinks": 1, "reposition": True}))
        st, obj = exchange("POST", "/v1/sessions/%s/append" % sid,
                           {"k": T(10, 2, 4), "v": T(10, 2, 4)})
        self.assertEqual((st, obj["length"], obj["eviction"]["evicted"]), (200, 5, 5))
        exchange("DELETE", "/v1/sessions/" + sid)

    def test_errors(self):
        sid = new_session()
        path = "/v1/sessions/%s/append" % sid
        st, obj = exchange("POST", path, {"k": T(9, 2, 4), "v": T(9, 2, 4)})
        self.assertEqual((st, obj["error"]["code"]), (409, "SESSION_FULL"))
        st, obj = exchange("POST", path, {"k": T(1, 3, 4), "v": T(1, 2, 4)})
        self.assertEqual((st, obj["error"]["field"]), (400, "k.shape[1]"))
        st, obj = exchange("POST", "/v1/sessions", dict(SESSION, dtype="i8"), valid=False)
        self.assertEqual((st, obj["error"]["code"], obj["error"]["field"]),
                         (400, "INVALID_ARGUMENT", "dtype"))
        st, obj = exchange("POST", "/v1/sessions", dict(SESSION, dtype="bf16"))
        self.assertEqual((st, obj["dtype"]), (201, "bf16"))
        exchange("DELETE", "/v1/sessions/" + obj["id"])
        st, obj = exchange("POST", "/v1/sessions", dict(SESSION, max_tokens=0), valid=False)
        self.assertEqual((st, obj["error"]["field"]), (400, "max_tokens"))
        exchange("DELETE", "/v1/sessions/" + sid)


class UnknownFields(unittest.TestCase):
    """Every strict object of the spec is strict in the server, with the same fields."""

    def refuse(self, path, body, at, field, schema, server_prefix="", server_only=()):
        """body with an unknown member at [at...]: the spec and the server refuse it,
        and the server's known fields there are the spec's properties of schema
        (besides server_only: names the server knows there but refuses anyway)."""
        check_request(path, "POST", body)  # the base is valid
        st, obj = exchange("POST", path, with_field(body, at), valid=False)
        self.assertEqual(st, 400, obj)
        spec = property_names(schema)
        if path.startswith("/v2"):
            self.assertIn("no_such_field", obj["error"])
            names, complete = known_fields(obj["error"])
        else:
            err = server_error(obj)
            self.assertEqual((err["code"], err.get("field")),
                             ("UNKNOWN_FIELD", server_prefix + field), err)
            names, complete = known_fields(err["message"])
        names -= set(server_only)
        if complete:
            self.assertEqual(names, spec, "%s: server (known) vs spec properties" % field)
        else:  # a long list is cut short in the message: what it shows is in the spec
            self.assertLessEqual(names, spec, field)
        return spec

    def probe_item(self, base, spec, wrap, extra_ok=()):
        """Each spec property of an item sent alone as junk: never UNKNOWN_FIELD."""
        for name in sorted(spec - set(extra_ok)):
            path, raw = wrap(dict(base, **{name: "?"}))
            obj = json.loads(call("POST", path, raw=raw)[2])
            errs = [obj["error"]] if "error" in obj else [
                o["error"] for o in obj.get("outputs", []) if "error" in o]
            for e in errs:
                self.assertNotEqual(e["code"], "UNKNOWN_FIELD", (name, e))

    def test_attention(self):
        base = {"inputs": [GOOD_ITEMS["none"]]}
        self.refuse("/v1/attention", base, [], "no_such_field", component("AttentionRequest"))
        spec = self.refuse("/v1/attention", base, ["inputs", 0], "no_such_field",
                           component("AttentionItem"), "inputs[0].")
        self.probe_item(GOOD_ITEMS["none"], spec,
                        lambda it: ("/v1/attention", json.dumps({"inputs": [it]}).encode()))
        for name, item in GOOD_ITEMS.items():
            sname = "Scheme" + {"t5": "T5"}.get(name, name.capitalize())
            self.refuse("/v1/attention", {"inputs": [item]}, ["inputs", 0, "scheme"],
                        "scheme.no_such_field", component(sname), "inputs[0].")
        self.refuse("/v1/attention", base, ["inputs", 0, "q"], "q.no_such_field",
                    component("InlineTensor"), "inputs[0].")
        self.refuse("/v1/attention", {"inputs": [dict(GOOD_ITEMS["none"],
                                                      q_norm={"weight": T(4)})]},
                    ["inputs", 0, "q_norm"], "q_norm.no_such_field", component("Norm"),
                    "inputs[0].")
        for name, value, schema in (
                ("attn_temperature_tuning", {"floor_scale": 8192}, "AttnTemperatureTuning"),
                ("logn_scaling", {"train_length": 4}, "LognScaling"),
                ("differential", {"lambda": 0.5}, "Differential"),
                ("mla", {"rope_dim": 2}, "Mla")):
            self.refuse("/v1/attention", {"inputs": [dict(GOOD_ITEMS["none"], **{name: value})]},
                        ["inputs", 0, name], name + ".no_such_field", component(schema),
                        "inputs[0].")
        self.refuse("/v1/attention", {"inputs": [dict(GOOD_ITEMS["none"], q_positions={
            "shape": [3], "data": [0, 1, 2]})]}, ["inputs", 0, "q_positions"],
            "q_positions.no_such_field", component("IntTensor"), "inputs[0].")
        # {"ref"} with another member (the spec's TensorRef; the server says so too).
        st, obj = exchange("POST", "/v1/attention", {"inputs": [dict(
            GOOD_ITEMS["none"], q={"ref": "x", "no_such_field": 1})]}, valid=False)
        self.assertEqual(server_error(obj)["code"], "UNKNOWN_FIELD")

    def test_encode(self):
        spec = self.refuse("/v1/encode", ENCODES[1], [], "no_such_field",
                           component("EncodeRequest"))
        self.assertIn("chunk_size", spec)

    def test_analyses(self):
        schemas = {"permutation": "AnalyzePermutation", "decomposition": "AnalyzeDecomposition",
                   "rope_offset": "AnalyzeRopeOffset", "rope_offset_xpos": "AnalyzeRopeOffset",
                   "similarity": "AnalyzeSimilarity",
                   "rope_spectrum": "AnalyzeRopeSpectrum",
                   "extrapolation": "AnalyzeExtrapolationGaussian",
                   "extrapolation_tensors": "AnalyzeExtrapolationTensors"}
        for name, body in ANALYSES.items():
            # An extrapolation with tensors knows "inputs" only to refuse it
            # (INVALID_ARGUMENT): "inputs" is the gaussian form's field.
            spec = self.refuse("/v1/analyze", body, [], "no_such_field",
                               component(schemas[name]),
                               server_only=("inputs",) if name == "extrapolation_tensors"
                               else ())
            if name in ("permutation", "decomposition", "extrapolation_tensors"):
                self.probe_item(body, spec, lambda b: ("/v1/analyze", json.dumps(b).encode()),
                                extra_ok=("analysis", "inputs"))

    def test_sessions(self):
        self.refuse("/v1/sessions", SESSION, [], "no_such_field",
                    component("SessionCreateRequest"))
        self.refuse("/v1/sessions", dict(SESSION, eviction={"type": "window", "window": 4}),
                    ["eviction"], "eviction.no_such_field", component("SessionEviction"))
        sid = new_session()
        self.refuse("/v1/sessions/%s/append" % sid, {"k": T(1, 2, 4), "v": T(1, 2, 4)}, [],
                    "no_such_field", component("SessionAppendRequest"))
        self.refuse("/v1/sessions/%s/fork" % sid, {}, [], "no_such_field",
                    component("SessionForkRequest"))
        exchange("DELETE", "/v1/sessions/" + sid)

    def test_v2_infer(self):
        body = {"inputs": [{"name": n, "shape": [1, 1, 2], "datatype": "FP32",
                            "data": [1, 0]} for n in "qkv"],
                "outputs": [{"name": "output", "parameters": {"binary_data": False}}]}
        path = "/v2/models/attention-none/infer"
        self.refuse(path, body, [], "", component("V2InferRequest"))
        self.refuse(path, body, ["inputs", 0], "", component("V2RequestInput"))
        self.refuse(path, body, ["outputs", 0], "", component("V2RequestOutput"))


def tearDownModule():
    print("conformance: %d request bodies and %d answers checked against %s (%d operation "
          "statuses)" % (Stats.requests, Stats.answers, os.path.relpath(SPEC_PATH),
                         len(Stats.statuses)), file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
