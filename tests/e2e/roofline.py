#!/usr/bin/python3
"""roofline.py - the roofline in every answer, over HTTP (issue #34):

  * GET /v1/schemes has "machine" with positive ceilings (float32 FMA GFLOP/s
    and read GB/s, on one thread and on the workers) measured at start-up;
  * a /v1/attention item's timing has flops and bytes equal to the counts of
    docs/api.md (visible logits, keys read once per kv head) and a
    fraction_of_peak with its bound, and Server-Timing a roofline entry;
  * /metrics has posattn_machine_gflops{dtype="f32"} and
    posattn_machine_read_gbps;
  * --no-probe (and POSATTN_NO_PROBE=1): machine.probed false, no gauges, and
    items keep flops and bytes without fraction_of_peak.

No speed is asserted: a fraction is only checked to be above 0 and below 5
(a busy machine's probe reads low, so fractions can pass 1).

    tests/e2e/harness.sh /usr/bin/python3 tests/e2e/roofline.py
$POSATTND (default build/posattnd) for the servers this file starts itself.
"""

import http.client
import json
import os
import random
import subprocess
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import posattnd  # noqa: E402

BIN = os.environ.get("POSATTND", "build/posattnd")
TIMEOUT = 30


def call(url, method, path, body=None):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=TIMEOUT)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def tensor(rng, *shape):
    n = 1
    for s in shape:
        n *= s
    return {"shape": list(shape), "data": [rng.uniform(-1, 1) for _ in range(n)]}


def item(Lq, Lk, H, Hkv, D, Dv, **extra):
    rng = random.Random(Lq * 1000 + Lk)
    out = {"scheme": {"type": "rope"}, "q": tensor(rng, Lq, H, D), "k": tensor(rng, Lk, Hkv, D),
           "v": tensor(rng, Lk, Hkv, Dv)}
    out.update(extra)
    return out


def server_timing(headers):
    """{metric: {param: value}} of a Server-Timing header."""
    out = {}
    for entry in headers.get("Server-Timing", "").split(","):
        parts = [p.strip() for p in entry.split(";")]
        params = {}
        for p in parts[1:]:
            k, _, v = p.partition("=")
            params[k] = v.strip('"')
        out[parts[0]] = params
    return out


# A causal prefill (128 rows, 4 heads of 2 kv heads, D 32, Dv 16) and a
# decode (1 row over 256 keys, window 64). Their counts, from docs/api.md:
# prefill visible 128*129/2 = 8256 a head; decode 64 keys a head and read.
PREFILL = item(128, 128, 4, 2, 32, 16, causal=True)
PREFILL_FLOPS = 2 * (32 + 16) * 4 * 8256
PREFILL_BYTES = 4 * (128 * 4 * 32 + 128 * 2 * 48 + 128 * 4 * 16)
DECODE = item(1, 256, 4, 2, 32, 32, causal=True, window=64)
DECODE_FLOPS = 2 * 64 * 4 * 64
DECODE_BYTES = 4 * (4 * 32 + 64 * 2 * 64 + 4 * 32)


class Probed(unittest.TestCase):
    url = os.environ.get("POSATTN_URL", "").rstrip("/")

    @classmethod
    def setUpClass(cls):
        cls.srv = None
        if not cls.url:
            cls.srv = posattnd.start(BIN, ["--workers", "2"])
            cls.url = cls.srv.url

    @classmethod
    def tearDownClass(cls):
        if cls.srv is not None:
            cls.srv.stop(check=True)

    def test_machine(self):
        st, _, body = call(self.url, "GET", "/v1/schemes")
        self.assertEqual(st, 200)
        m = json.loads(body)["machine"]
        self.assertTrue(m["probed"])
        self.assertIn(m["fma_width"], ("avx512", "avx2", "scalar"))
        self.assertGreaterEqual(len(m["peaks"]), 1)
        self.assertEqual(m["peaks"][0]["threads"], 1)
        for p in m["peaks"]:
            self.assertGreater(p["gflops_f32"], 0)
            self.assertGreater(p["read_gbps"], 0)
        self.assertGreater(m["read_buffer_bytes"], 0)
        self.assertGreater(m["probe_ms"], 0)

    def test_item_timing(self):
        st, headers, body = call(self.url, "POST", "/v1/attention",
                                 {"inputs": [PREFILL, DECODE]})
        self.assertEqual(st, 200, body[:300])
        outs = json.loads(body)["outputs"]
        for out, flops, nbytes in ((outs[0], PREFILL_FLOPS, PREFILL_BYTES),
                                   (outs[1], DECODE_FLOPS, DECODE_BYTES)):
            t = out["timing"]
            self.assertEqual(t["flops"], flops)
            self.assertEqual(t["bytes"], nbytes)
            if t["compute_us"] > 0:  # a run under a microsecond has no fraction
                self.assertGreater(t["fraction_of_peak"], 0)
                self.assertLess(t["fraction_of_peak"], 5)
                self.assertIn(t["bound"], ("compute", "memory"))
                self.assertIn(t["peak_threads"], (1, 2))
        roof = server_timing(headers).get("roofline")
        self.assertIsNotNone(roof, headers.get("Server-Timing"))
        self.assertEqual(float(roof["flops"]), PREFILL_FLOPS + DECODE_FLOPS)
        self.assertEqual(float(roof["bytes"]), PREFILL_BYTES + DECODE_BYTES)
        if "fraction" in roof:
            self.assertGreater(float(roof["fraction"]), 0)
            self.assertIn(roof["bound"], ("compute", "memory"))

    def test_fraction_arithmetic(self):
        """fraction_of_peak is the larger of flops / (compute_us x the peak of peak_threads and
        peak_dtype) and bytes / (compute_us x read bandwidth), to its four figures; bf16 items
        are measured against the bf16 peak where the CPU has one (vdpbf16ps), else f32's."""
        st, _, body = call(self.url, "GET", "/v1/schemes")
        m = json.loads(body)["machine"]
        peaks = {p["threads"]: p for p in m["peaks"]}
        has_bf16 = m["bf16_path"] == "avx512_bf16"
        for p in m["peaks"]:
            self.assertEqual("gflops_bf16" in p, has_bf16, p)
        st, _, body = call(self.url, "GET", "/metrics")
        self.assertEqual('posattn_machine_gflops{dtype="bf16"' in body.decode(), has_bf16)
        for extra, dtype in (({}, "f32"), ({"compute_dtype": "bf16"},
                                            "bf16" if has_bf16 else "f32")):
            st, _, body = call(self.url, "POST", "/v1/attention", {"inputs": [dict(PREFILL, **extra)]})
            self.assertEqual(st, 200, body[:300])
            t = json.loads(body)["outputs"][0]["timing"]
            self.assertEqual(t["flops"], PREFILL_FLOPS)  # the same work in either precision
            if t["compute_us"] == 0:
                continue
            self.assertEqual(t["peak_dtype"], dtype)
            p = peaks[t["peak_threads"]]
            gf = p["gflops_bf16"] if dtype == "bf16" else p["gflops_f32"]
            fc = t["flops"] / (t["compute_us"] * 1e3 * gf)
            fm = t["bytes"] / (t["compute_us"] * 1e3 * p["read_gbps"])
            # /v1/schemes rounds the peaks to 0.1: a relative 1e-3 of slack.
            self.assertAlmostEqual(t["fraction_of_peak"] / max(fc, fm), 1.0, delta=2e-3)
            self.assertEqual(t["bound"], "compute" if fc >= fm else "memory")

    def test_v2_parameters(self):
        """KServe v2's response parameters carry the item's roofline as /v1's timing does, and
        its Server-Timing the roofline entry."""
        inputs = [{"name": n, "shape": PREFILL[n]["shape"], "datatype": "FP32",
                   "data": PREFILL[n]["data"]} for n in ("q", "k", "v")]
        st, headers, body = call(self.url, "POST", "/v2/models/attention-rope/infer",
                                 {"parameters": {"causal": True}, "inputs": inputs})
        self.assertEqual(st, 200, body[:300])
        p = json.loads(body)["parameters"]
        self.assertEqual(p["flops"], PREFILL_FLOPS)
        self.assertEqual(p["bytes"], PREFILL_BYTES)
        if p["compute_us"] > 0:
            self.assertGreater(p["fraction_of_peak"], 0)
            self.assertIn(p["bound"], ("compute", "memory"))
            self.assertEqual(p["peak_dtype"], "f32")
        roof = server_timing(headers).get("roofline")
        self.assertIsNotNone(roof, headers.get("Server-Timing"))
        self.assertEqual(float(roof["flops"]), PREFILL_FLOPS)

    def test_metrics(self):
        st, _, body = call(self.url, "GET", "/metrics")
        self.assertEqual(st, 200)
        text = body.decode()
        gf = [ln for ln in text.splitlines()
              if ln.startswith('posattn_machine_gflops{dtype="f32"')]
        bw = [ln for ln in text.splitlines() if ln.startswith("posattn_machine_read_gbps{")]
        self.assertTrue(gf and bw, text[-2000:])
        for ln in gf + bw:
            self.assertGreater(float(ln.rsplit(" ", 1)[1]), 0)
        self.assertIn('threads="1"', gf[0])
        # test_item_timing's items (alphabetical order: it ran first).
        count = [ln for ln in text.splitlines()
                 if ln.startswith('posattn_fraction_of_peak_count{scheme="rope"}')]
        self.assertTrue(count and float(count[0].rsplit(" ", 1)[1]) >= 1, text[-2000:])


class NoProbe(unittest.TestCase):
    def check(self, srv):
        self.assertIn("not probed", srv.stdout_text())
        st, _, body = call(srv.url, "GET", "/v1/schemes")
        m = json.loads(body)["machine"]
        self.assertFalse(m["probed"])
        self.assertNotIn("peaks", m)
        st, headers, body = call(srv.url, "POST", "/v1/attention", {"inputs": [PREFILL]})
        self.assertEqual(st, 200)
        t = json.loads(body)["outputs"][0]["timing"]
        self.assertEqual(t["flops"], PREFILL_FLOPS)
        self.assertEqual(t["bytes"], PREFILL_BYTES)
        for k in ("fraction_of_peak", "bound", "peak_threads"):
            self.assertNotIn(k, t)
        roof = server_timing(headers)["roofline"]
        self.assertEqual(float(roof["flops"]), PREFILL_FLOPS)
        self.assertNotIn("fraction", roof)
        st, _, body = call(srv.url, "GET", "/metrics")
        self.assertNotIn("posattn_machine_", body.decode())

    def test_flag(self):
        with posattnd.start(BIN, ["--workers", "2", "--no-probe"]) as srv:
            self.check(srv)
        self.assertEqual(srv.returncode, 0)

    def test_environment(self):
        # posattnd.start keeps POSATTN_* out of the child: start it by hand.
        env = dict(posattnd.clean_env(), POSATTN_NO_PROBE="1")
        proc = subprocess.Popen([BIN, "--host", "127.0.0.1", "--port", "0", "--log-format",
                                 "off", "--workers", "1"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, text=True)
        try:
            first = proc.stdout.readline()
            port = int(first.split("127.0.0.1:")[1].split()[0])
            lines = [proc.stdout.readline() for _ in range(3)]
            self.assertTrue(any("not probed" in ln for ln in lines), lines)
            st, _, body = call("http://127.0.0.1:%d" % port, "GET", "/v1/schemes")
            self.assertFalse(json.loads(body)["machine"]["probed"])
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(15), 0)
            proc.stdout.close()

    def test_bad_value(self):
        env = dict(posattnd.clean_env(), POSATTN_NO_PROBE="maybe")
        r = subprocess.run([BIN, "--port", "0"], capture_output=True, text=True, env=env,
                           timeout=15)
        self.assertEqual(r.returncode, 2)
        self.assertIn("POSATTN_NO_PROBE", r.stderr)

if __name__ == "__main__":
    unittest.main()
