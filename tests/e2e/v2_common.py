"""v2_common.py - what the KServe v2 end-to-end tests share (tests/e2e/v2.py,
tests/e2e/v2_models.py): the protocol spoken byte for byte with http.client,
the Open Inference Protocol's own schemas to check answers against, float32
and base64 helpers, a random q/k/v case, a binary request, and the same item
through /v1/attention for comparison.

POSATTN_URL, POSATTN_AUTH_URL and POSATTN_AUTH_KEY name the servers
(tests/e2e/harness.sh sets them).
"""

import base64
import http.client
import json
import os
import random
import struct
import urllib.parse

import jsonschema
import yaml

URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")
AUTH_URL = os.environ.get("POSATTN_AUTH_URL", "").rstrip("/")
API_KEY = os.environ.get("POSATTN_AUTH_KEY", "")
TIMEOUT = 30


# The protocol's own schemas (tests/fixtures/oip/SOURCE): every JSON answer
# below is checked against the one the OpenAPI document gives it.
_OIP = yaml.safe_load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "fixtures", "oip", "open_inference_rest.yaml")))
_RESOLVER = jsonschema.RefResolver.from_schema(_OIP)


def conform(obj, schema):
    """obj is valid as the OpenAPI document's components.schemas[schema]."""
    jsonschema.Draft4Validator({"$ref": "#/components/schemas/" + schema},
                               resolver=_RESOLVER).validate(obj)
    return obj


def call(method, path, body=None, headers=None, base=URL):
    """One request with exactly these bytes and headers; returns (status, headers, body)."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=TIMEOUT)
    try:
        h = dict(headers or {})
        if body is not None and "Content-Type" not in h:
            h["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


def post_json(path, obj, **kw):
    return call("POST", path, json.dumps(obj).encode(), **kw)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def rand_f32(rng, n):
    return [f32(rng.uniform(-1, 1)) for _ in range(n)]


def le_bytes(values, fmt="f"):
    return struct.pack("<%d%s" % (len(values), fmt), *values)


def b64(values):
    return base64.b64encode(le_bytes(values)).decode()


def nest(flat, shape):
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0]
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def split_binary(headers, body):
    """The JSON header and binary part of an answer, per Inference-Header-Content-Length."""
    n = int(headers["Inference-Header-Content-Length"])
    return json.loads(body[:n]), body[n:]


def v1_attention(item, ret=("output",)):
    """The same item through /v1/attention with base64 answers: {name: bytes}."""
    item = dict(item, **{"return": list(ret)})
    st, _, data = post_json("/v1/attention", {"inputs": [item], "output_encoding": "b64"})
    assert st == 200, data
    out = json.loads(data)["outputs"][0]
    assert "error" not in out, out
    return {k: base64.b64decode(out[k]["b64"]) for k in ret}, {k: out[k]["shape"] for k in ret}


class Case:
    """A q/k/v attention problem with random float32 inputs."""

    def __init__(self, seed, Lq=5, Lk=7, H=4, Hkv=2, D=8, Dv=6):
        rng = random.Random(seed)
        self.shapes = {"q": [Lq, H, D], "k": [Lk, Hkv, D], "v": [Lk, Hkv, Dv]}
        self.data = {n: rand_f32(rng, s[0] * s[1] * s[2]) for n, s in self.shapes.items()}

    def v1_item(self, scheme, **opts):
        item = {"scheme": scheme}
        for n, s in self.shapes.items():
            item[n] = {"shape": s, "b64": b64(self.data[n])}
        item.update(opts)
        return item

    def v2_inputs(self, binary=False, nested=False):
        ins = []
        for n, s in self.shapes.items():
            t = {"name": n, "shape": s, "datatype": "FP32"}
            if binary:
                t["parameters"] = {"binary_data_size": 4 * len(self.data[n])}
            else:
                t["data"] = nest(self.data[n], s) if nested else self.data[n]
            ins.append(t)
        return ins

    def binary_part(self):
        return b"".join(le_bytes(self.data[n]) for n in self.shapes)


def binary_request(header_obj, binary, header_text=None):
    """A body and headers per the binary tensor data extension."""
    head = header_text if header_text is not None else json.dumps(header_obj)
    head = head.encode()
    return head + binary, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
