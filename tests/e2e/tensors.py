#!/usr/bin/python3
"""tensors.py - end-to-end test of named tensors (posattnd --tensor).

    /usr/bin/python3 tests/e2e/tensors.py --bin build/posattnd --dir build/fixtures/tensors

Writes the fixtures with tests/fixtures/make_tensors.py into --dir, starts
posattnd on 127.0.0.1 (--port 0) with a learned position table, a T5
relative_attention_bias (BF16), Shaw rel_k (F16) / rel_v and layer-mode
weights (F32 and F64 .npy, safetensors) loaded by --tensor, and checks:
  - each request by {"ref": NAME} answers exactly (bit for bit, b64) what the
    same request with the tensor inline (the converted float32 values)
    answers; k and v named in BF16 are read in 16 bits (their timing's
    bytes);
  - GET /v1/tensors lists every tensor with shape, dtype, file, tensor and
    bytes;
  - a ref to an unknown name, or of the wrong rank, is a 400 naming the field;
  - each malformed file makes posattnd exit 1 at start-up, naming the file
    and the failure on stderr.
Needs NumPy (the fixture script), so run it with /usr/bin/python3.
"""

import argparse
import base64
import copy
import json
import os
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import posattnd  # noqa: E402  (tests/posattnd.py)

TIMEOUT = 30
ARGS = None
SERVER = {}


def request(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        SERVER["url"] + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


def inline(name):
    t = SERVER["manifest"]["good"][name]
    return {"shape": t["shape"], "b64": t["b64"]}


def rnd(shape, seed):
    """Deterministic float32 tensor as b64, without NumPy in the request path."""
    import numpy as np

    a = np.random.default_rng(seed).standard_normal(shape).astype("<f4")
    return {"shape": list(shape), "b64": base64.b64encode(a.tobytes()).decode()}


def start_server(bin_path, flags):
    return posattnd.start(bin_path, ["--workers", "2"] + flags)


class NamedTensors(unittest.TestCase):
    def same(self, path, body_inline, body_ref):
        """Both forms answer 200 with identical results; returns the answer."""
        s1, a1 = request("POST", path, body_inline)
        s2, a2 = request("POST", path, body_ref)
        self.assertEqual(s1, 200, a1)
        self.assertEqual(s2, 200, a2)
        if "outputs" in a1:
            for o in a1["outputs"] + a2["outputs"]:
                o.pop("timing", None)
        a1.pop("timing", None)
        a2.pop("timing", None)
        self.assertEqual(a1, a2)
        return a1

    def item(self, scheme, **kw):
        it = {"scheme": scheme, "return": ["output", "logits"]}
        it.update(kw)
        return it

    def attention(self, item):
        return {"inputs": [item], "output_encoding": "b64"}

    def test_learned_table_layer_mode(self):
        # Learned absolute table and all three projection weights by ref.
        x = rnd((10, 16), 1)
        item_inline = self.item(
            {"type": "learned", "table": inline("wpe")},
            x=x,
            w_q=inline("w_q"),
            w_k=inline("w_k"),
            w_v=inline("w_v"),
            num_heads=2,
            causal=True,
        )
        item_ref = copy.deepcopy(item_inline)
        item_ref["scheme"]["table"] = {"ref": "wpe"}
        for w in ("w_q", "w_k", "w_v"):
            item_ref[w] = {"ref": w}
        a = self.same("/v1/attention", self.attention(item_inline), self.attention(item_ref))
        out = base64.b64decode(a["outputs"][0]["output"]["b64"])
        self.assertGreater(len(out), 0)
        self.assertTrue(any(out), "all-zero output")

    def test_t5_bias(self):
        q, k, v = rnd((9, 4, 8), 2), rnd((9, 4, 8), 3), rnd((9, 4, 8), 4)
        sch = {"type": "t5", "num_buckets": 32, "max_distance": 128, "bidirectional": True}
        item_inline = self.item(dict(sch, table=inline("t5_bias")), q=q, k=k, v=v)
        item_ref = self.item(dict(sch, table={"ref": "t5_bias"}), q=q, k=k, v=v)
        self.same("/v1/attention", self.attention(item_inline), self.attention(item_ref))

    def test_checkpoints(self):
        """wpe.weight of a GPT-2-shaped model.safetensors (among BOOL mask
        buffers, 0-rank, I64 and empty tensors) and the encoder's
        relative_attention_bias.weight of a T5-shaped one, by ref, answer as
        their values inline do."""
        x = rnd((12, 16), 21)
        eye = {"shape": [16, 16], "data": [float(i == j) for i in range(16) for j in range(16)]}
        item = self.item({"type": "learned", "table": inline("gpt2_wpe")}, x=x, w_q=eye, w_k=eye,
                         w_v=eye, num_heads=2, causal=True)
        ref = copy.deepcopy(item)
        ref["scheme"]["table"] = {"ref": "gpt2_wpe"}
        self.same("/v1/attention", self.attention(item), self.attention(ref))
        q, k, v = rnd((7, 4, 8), 22), rnd((7, 4, 8), 23), rnd((7, 4, 8), 24)
        sch = {"type": "t5", "num_buckets": 32, "max_distance": 128, "bidirectional": True}
        self.same("/v1/attention",
                  self.attention(self.item(dict(sch, table=inline("t5_rab")), q=q, k=k, v=v)),
                  self.attention(self.item(dict(sch, table={"ref": "t5_rab"}), q=q, k=k, v=v)))

    def test_npy_orders(self):
        """Fortran-order and big-endian .npy files serve the array np.save
        was given (make_tensors.py records its C-order float32 values)."""
        for name in ("fortran", "big_f4"):  # [rows, cols]: a learned table
            rows = SERVER["manifest"]["good"][name]["shape"][0]
            body = {"scheme": {"type": "learned", "table": inline(name)}, "length": rows,
                    "output_encoding": "b64"}
            ref = copy.deepcopy(body)
            ref["scheme"]["table"] = {"ref": name}
            self.same("/v1/encode", body, ref)
        inl = self.item({"type": "none"}, q=inline("big_f8_fortran"), k=inline("big_f8_fortran"),
                        v=inline("big_f8_fortran"))
        ref = self.item({"type": "none"}, q={"ref": "big_f8_fortran"}, k={"ref": "big_f8_fortran"},
                        v={"ref": "big_f8_fortran"})
        self.same("/v1/attention", self.attention(inl), self.attention(ref))

    def test_shaw_rel_k_rel_v(self):
        q, k, v = rnd((6, 2, 8), 5), rnd((6, 2, 8), 6), rnd((6, 2, 8), 7)
        sch = {"type": "shaw", "max_relative_position": 3}
        item_inline = self.item(dict(sch, rel_k=inline("rel_k"), rel_v=inline("rel_v")), q=q, k=k, v=v)
        item_ref = self.item(dict(sch, rel_k={"ref": "rel_k"}, rel_v={"ref": "rel_v"}), q=q, k=k, v=v)
        self.same("/v1/attention", self.attention(item_inline), self.attention(item_ref))

    def test_mla_absorbed(self):
        # MLA's tensors by name: c_kv and k_rope (item tensors), mla.w_uk and
        # mla.w_uv, in F16, BF16 and F32 files.
        q = rnd((3, 2, 6), 12)
        base = {"scheme": {"type": "rope", "layout": "gptj"}, "q": q, "causal": True,
                "return": ["output", "weights", "k_rot"]}
        names = ("mla_c_kv", "mla_k_rope", "mla_w_uk", "mla_w_uv")
        items = []
        for form in (inline, lambda n: {"ref": n}):
            c, kr, wuk, wuv = (form(n) for n in names)
            items.append(dict(base, c_kv=c, k_rope=kr,
                              mla={"rope_dim": 2, "absorbed": True, "w_uk": wuk, "w_uv": wuv}))
        a = self.same("/v1/attention", self.attention(items[0]), self.attention(items[1]))
        self.assertEqual(a["outputs"][0]["output"]["shape"], [3, 2, 3])
        self.assertEqual(a["outputs"][0]["k_rot"]["shape"], [6, 2])

    def test_kv_in_16_bits(self):
        """k and v named in BF16 are read in 16 bits: the inline item's
        output bit for bit, for a prefill and a decode, and 2 bytes a key
        and value element in the timing's bytes (the inline item's 4)."""
        for lq in (7, 1):
            q = rnd((lq, 4, 8), 30 + lq)
            item = self.item({"type": "rope"}, q=q, causal=True)
            inl = dict(item, k=inline("k16"), v=inline("v16"))
            ref = dict(item, k={"ref": "k16"}, v={"ref": "v16"})
            s1, a1 = request("POST", "/v1/attention", self.attention(inl))
            s2, a2 = request("POST", "/v1/attention", self.attention(ref))
            self.assertEqual((s1, s2), (200, 200), (a1, a2))
            o1, o2 = a1["outputs"][0], a2["outputs"][0]
            kv_bytes = 40 * 2 * (8 + 8)  # keys x Hkv x (D + Dv)
            self.assertEqual(o1["timing"]["bytes"] - o2["timing"]["bytes"], 2 * kv_bytes,
                             (lq, o1["timing"], o2["timing"]))
            o1.pop("timing")
            o2.pop("timing")
            self.assertEqual(o1, o2, lq)

    def test_batch_shares_one_table(self):
        # Many items borrowing one table: all answer as inline would.
        q, k, v = rnd((5, 4, 8), 8), rnd((5, 4, 8), 9), rnd((5, 4, 8), 10)
        sch = {"type": "t5", "num_buckets": 32, "max_distance": 128, "bidirectional": True}
        inl = {"inputs": [self.item(dict(sch, table=inline("t5_bias")), q=q, k=k, v=v)] * 6,
               "output_encoding": "b64"}
        ref = {"inputs": [self.item(dict(sch, table={"ref": "t5_bias"}), q=q, k=k, v=v)] * 6,
               "output_encoding": "b64"}
        self.same("/v1/attention", inl, ref)

    def test_encode_learned(self):
        body = {"scheme": {"type": "learned", "table": inline("wpe")}, "length": 12,
                "output_encoding": "b64"}
        ref = copy.deepcopy(body)
        ref["scheme"]["table"] = {"ref": "wpe"}
        self.same("/v1/encode", body, ref)

    def test_analyze_rope_offset(self):
        # q and k of rope_offset by ref (the job keeps a copy of such vectors).
        body = {"analysis": "rope_offset", "scheme": {"type": "rope"}, "q": inline("qv"),
                "k": inline("kv"), "offsets": [1, 2, 3, 7], "output_encoding": "b64"}
        ref = dict(body, q={"ref": "qv"}, k={"ref": "kv"})
        self.same("/v1/analyze", body, ref)

    def test_list(self):
        status, body = request("GET", "/v1/tensors")
        self.assertEqual(status, 200, body)
        got = {t["name"]: t for t in body["tensors"]}
        m = SERVER["manifest"]["good"]
        self.assertEqual(sorted(got), sorted(m))
        sizes = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}
        for name, want in m.items():
            t = got[name]
            path, _, tensor = want["spec"].partition(".safetensors:")
            if tensor:
                path += ".safetensors"
            self.assertEqual(t["shape"], want["shape"], name)
            self.assertEqual(t["dtype"], want["dtype"], name)
            self.assertEqual(t["file"], path, name)
            n = 1
            for d in want["shape"]:
                n *= d
            self.assertEqual(t["bytes"], n * sizes[want["dtype"]], name)
            if tensor:
                self.assertEqual(t["tensor"], tensor, name)
        self.assertEqual(got["w_v"]["tensor"], "w_v")  # the only tensor of its file
        self.assertEqual(got["wpe"]["tensor"], "")  # .npy

    def item_error(self, item):
        """The error of a one-item batch: every item failed, so the answer
        has the item's status (400 for these) and "errors": true, as for
        inline tensors."""
        status, body = request("POST", "/v1/attention", self.attention(item))
        self.assertEqual(status, 400, body)
        self.assertTrue(body.get("errors"), body)
        return body["outputs"][0]["error"]

    def test_unknown_name_and_wrong_rank(self):
        q = rnd((4, 4, 8), 11)
        sch = {"type": "t5", "num_buckets": 32, "max_distance": 128, "bidirectional": True}
        err = self.item_error(self.item(dict(sch, table={"ref": "nope"}), q=q, k=q, v=q))
        self.assertEqual(err["code"], "UNKNOWN_TENSOR")
        self.assertEqual(err["field"], "inputs[0].scheme.table.ref")
        self.assertIn("'nope'", err["message"])
        self.assertIn("wpe", err["message"])
        # /v1/encode has no batch: the same error is a 400.
        status, body = request("POST", "/v1/encode",
                               {"scheme": {"type": "learned", "table": {"ref": "nope"}}, "length": 4})
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["code"], "UNKNOWN_TENSOR")
        self.assertEqual(body["error"]["field"], "scheme.table.ref")
        # A 2-D table where q must be 3-D: the same check as inline.
        err = self.item_error(self.item(dict(sch, table={"ref": "t5_bias"}), q={"ref": "wpe"}, k=q, v=q))
        self.assertEqual(err["code"], "SHAPE_MISMATCH")
        self.assertEqual(err["field"], "inputs[0].q.ref")
        # A table whose shape does not fit the model: the library's check,
        # word for word as with the tensor inline.
        item = self.item(dict(sch, table={"ref": "wpe"}), q=q, k=q, v=q)
        e_ref = self.item_error(item)
        item["scheme"]["table"] = inline("wpe")
        self.assertEqual(e_ref, self.item_error(item))
        # Extra members beside "ref".
        err = self.item_error(self.item(dict(sch, table={"ref": "t5_bias", "shape": [32, 4]}), q=q, k=q, v=q))
        self.assertEqual(err["code"], "UNKNOWN_FIELD")
        self.assertEqual(err["field"], "inputs[0].scheme.table.shape")

    def test_list_needs_the_api_key(self):
        srv = start_server(ARGS.bin, ["--api-key", "k-e2e", "--tensor",
                                      "wpe=" + SERVER["manifest"]["good"]["wpe"]["spec"]])
        url = srv.url
        try:
            def get(headers):
                req = urllib.request.Request(url + "/v1/tensors", headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
                        return r.status, json.loads(r.read())
                except urllib.error.HTTPError as e:
                    with e:
                        return e.code, json.loads(e.read())
            status, body = get({})
            self.assertEqual(status, 401, body)
            status, body = get({"Authorization": "Bearer k-e2e"})
            self.assertEqual(status, 200, body)
            self.assertEqual([t["name"] for t in body["tensors"]], ["wpe"])
        finally:
            self.assertEqual(srv.stop(15), 0, srv.failure())

    def test_bad_files_stop_start_up(self):
        for case in SERVER["manifest"]["bad"]:
            with self.subTest(file=case["file"]):
                p = subprocess.run(
                    [ARGS.bin, "--port", "0", "--tensor", "bad=" + case.get("spec", case["file"])],
                    capture_output=True, text=True, timeout=20,
                    env={k: v for k, v in os.environ.items() if not k.startswith("POSATTN_")},
                )
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(p.stdout, "", "it must not start listening")
                self.assertIn(case["file"], p.stderr)
                self.assertIn(case["phrase"], p.stderr)
        # One bad file among good ones: no partial start.
        good = SERVER["manifest"]["good"]["wpe"]["spec"]
        p = subprocess.run(
            [ARGS.bin, "--port", "0", "--tensor", "wpe=" + good, "--tensor",
             "bad=" + SERVER["manifest"]["bad"][0]["file"]],
            capture_output=True, text=True, timeout=20,
        )
        self.assertEqual(p.returncode, 1, p.stderr)
        # A file that does not exist.
        missing = os.path.join(ARGS.dir, "missing.npy")
        p = subprocess.run([ARGS.bin, "--port", "0", "--tensor", "m=" + missing],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(missing, p.stderr)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/posattnd")
    ap.add_argument("--dir", default="build/fixtures/tensors")
    ap.add_argument("-q", action="store_true")
    ARGS = ap.parse_args()
    subprocess.run(
        [sys.executable, os.path.join(HERE, "..", "fixtures", "make_tensors.py"), ARGS.dir], check=True
    )
    with open(os.path.join(ARGS.dir, "manifest.json"), encoding="utf-8") as f:
        SERVER["manifest"] = json.load(f)
    flags = []
    for name, t in SERVER["manifest"]["good"].items():
        flags += ["--tensor", "%s=%s" % (name, t["spec"])]
    srv = start_server(ARGS.bin, flags)
    SERVER["url"] = srv.url
    try:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(NamedTensors)
        ok = unittest.TextTestRunner(verbosity=1 if ARGS.q else 2).run(suite).wasSuccessful()
    finally:
        rc = srv.stop(15)
    if rc != 0:
        print(srv.failure(), file=sys.stderr)
        ok = False
    print("e2e-tensors: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
