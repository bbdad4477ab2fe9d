#!/usr/bin/python3
"""client.py - posattnd end-to-end tests from Python's standard library.

Talks HTTP to a running posattnd with urllib and checks its numbers against a
tiny pure-Python reference attention (softmax(q k^T / sqrt(D)) v, with the
ALiBi bias -m_h (qpos - kpos) and slopes 2^(-8 (h+1) / H)). Also runs the
Python example of README.md exactly as written there.

    POSATTN_URL=http://127.0.0.1:8080 python3 tests/e2e/client.py
    tests/e2e/harness.sh python3 tests/e2e/client.py      # starts the servers

POSATTN_AUTH_URL / POSATTN_AUTH_KEY (set by harness.sh: a server started with
--api-key and --max-body-mb 1) enable the 401 and 413 tests.
Tolerance: |got - want| <= 1e-5 + 1e-4 |want| (float32 server, double here).
"""

import base64
import contextlib
import io
import json
import math
import os
import random
import re
import struct
import sys
import unittest
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")
AUTH_URL = os.environ.get("POSATTN_AUTH_URL", "").rstrip("/")
API_KEY = os.environ.get("POSATTN_AUTH_KEY", "")
HERE = os.path.dirname(os.path.abspath(__file__))
from examples import examples  # noqa: E402  (tests/e2e/examples.py)
sys.path.insert(0, os.path.join(HERE, ".."))
import posattnd  # noqa: E402  (tests/posattnd.py)
README_URL = "http://127.0.0.1:8080"
ATOL, RTOL = 1e-5, 1e-4
TIMEOUT = 30


def request(method, path, body=None, headers=None, base=URL, raw=None):
    """Returns (status, headers, body bytes); HTTP errors are answers too."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json"} if data is not None else {}
    h.update(headers or {})
    req = urllib.request.Request(base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def post_json(path, body, **kw):
    status, headers, data = request("POST", path, body, **kw)
    return status, headers, json.loads(data)


def f32(x):
    """x rounded to the nearest float32, as the server will hold it."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def rand_f32(rng, n):
    return [f32(rng.uniform(-1, 1)) for _ in range(n)]


def b64(values):
    return base64.b64encode(struct.pack("<%df" % len(values), *values)).decode()


def unb64(s):
    raw = base64.b64decode(s)
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def nest(flat, shape):
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0]
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def alibi_slopes(H, max_bias=8.0):
    """Press et al. slopes for any head count (the library's formula)."""
    n = 2 ** int(math.floor(math.log2(H)))
    return [2.0 ** (-max_bias * (h + 1) / n) if h < n
            else 2.0 ** (-max_bias * (2 * (h - n) + 1) / (2 * n)) for h in range(H)]


def ref_attention(q, k, v, Lq, Lk, H, Hkv, D, Dv, causal=False, slopes=None, stats=None):
    """out [Lq, H, Dv] in double; positions qpos = Lk-Lq+i, kpos = j. With
    stats a dict, also its "entropy" and "distance" [H, Lq]: -sum w ln w and
    sum w |qpos - kpos| of each row's weights."""
    out = [0.0] * (Lq * H * Dv)
    if stats is not None:
        stats["entropy"] = [0.0] * (H * Lq)
        stats["distance"] = [0.0] * (H * Lq)
    scale = 1.0 / math.sqrt(D)
    group = H // Hkv
    for h in range(H):
        kh = h // group
        for i in range(Lq):
            qpos = Lk - Lq + i
            logits = []
            for j in range(Lk):
                if causal and j > qpos:
                    logits.append(None)
                    continue
                s = scale * sum(q[(i * H + h) * D + d] * k[(j * Hkv + kh) * D + d]
                                for d in range(D))
                if slopes is not None:
                    s -= slopes[h] * (qpos - j)
                logits.append(s)
            live = [x for x in logits if x is not None]
            if not live:
                continue
            m = max(live)
            w = [0.0 if x is None else math.exp(x - m) for x in logits]
            z = sum(w)
            if stats is not None:
                p = [x / z for x in w]
                stats["entropy"][h * Lq + i] = -sum(x * math.log(x) for x in p if x > 0)
                stats["distance"][h * Lq + i] = sum(x * abs(qpos - j) for j, x in enumerate(p))
            for dv in range(Dv):
                out[(i * H + h) * Dv + dv] = sum(
                    w[j] / z * v[(j * Hkv + kh) * Dv + dv] for j in range(Lk))
    return out


def tensor_values(t):
    if "b64" in t:
        return unb64(t["b64"])
    flat = []

    def walk(x):
        for e in x:
            if isinstance(e, list):
                walk(e)
            else:
                flat.append(float("-inf") if e is None else e)
    walk(t["data"])
    return flat


class Case:
    """One attention item: random float32 inputs and the reference answer."""

    def __init__(self, seed, Lq, Lk, H, Hkv, D, Dv=None, scheme="none", causal=False):
        rng = random.Random(seed)
        Dv = Dv or D
        self.dims = (Lq, Lk, H, Hkv, D, Dv)
        self.scheme, self.causal = scheme, causal
        self.q = rand_f32(rng, Lq * H * D)
        self.k = rand_f32(rng, Lk * Hkv * D)
        self.v = rand_f32(rng, Lk * Hkv * Dv)
        slopes = alibi_slopes(H) if scheme == "alibi" else None
        self.want = (ref_attention(self.q, self.k, self.v, Lq, Lk, H, Hkv, D, Dv, causal, slopes)
                     if H % Hkv == 0 else None)  # None: an invalid case

    def item(self, ident, enc="json"):
        Lq, Lk, H, Hkv, D, Dv = self.dims

        def tensor(values, shape):
            if enc == "b64":
                return {"shape": shape, "b64": b64(values)}
            if enc == "nested":
                return {"shape": shape, "data": nest(values, shape)}
            return {"shape": shape, "data": values}
        return {"id": ident, "scheme": {"type": self.scheme}, "causal": self.causal,
                "q": tensor(self.q, [Lq, H, D]), "k": tensor(self.k, [Lk, Hkv, D]),
                "v": tensor(self.v, [Lk, Hkv, Dv])}


class Checks:
    """Assertions shared by the test classes (mixed into unittest.TestCase)."""

    def assertClose(self, got, want, what="output"):
        self.assertEqual(len(got), len(want), what)
        for i, (g, w) in enumerate(zip(got, want)):
            if not abs(g - w) <= ATOL + RTOL * abs(w):
                self.fail("%s[%d] = %.9g, reference %.9g" % (what, i, g, w))

    def assertError(self, status, body, want_status, code, field=None):
        self.assertEqual(status, want_status, body)
        err = body["error"]
        self.assertEqual(err["code"], code, err)
        self.assertTrue(err["message"], err)
        if field is not None:
            self.assertIn(field, err.get("field", ""), err)

    def check_output(self, out, case, ident):
        Lq, Lk, H, Hkv, D, Dv = case.dims
        self.assertNotIn("error", out)
        self.assertEqual(out["id"], ident)
        self.assertEqual(out["output"]["shape"], [Lq, H, Dv])
        self.assertIn("queue_us", out["timing"])
        self.assertIn("compute_us", out["timing"])
        self.assertIn("cpu_us", out["timing"])
        self.assertClose(tensor_values(out["output"]), case.want, ident)


class Api(Checks, unittest.TestCase):
    def attention(self, cases, enc="json", output_encoding="json"):
        body = {"inputs": [c.item("c%d" % i, enc) for i, c in enumerate(cases)],
                "output_encoding": output_encoding}
        status, headers, ans = post_json("/v1/attention", body)
        self.assertEqual(status, 200, ans)
        self.assertIs(ans["errors"], False)
        self.assertEqual(len(ans["outputs"]), len(cases))
        for i, (out, c) in enumerate(zip(ans["outputs"], cases)):
            if output_encoding == "b64":
                self.assertIn("b64", out["output"])
            self.check_output(out, c, "c%d" % i)
        return headers

    # -- probes --------------------------------------------------------------

    def test_health_ready_schemes(self):
        status, _, body = request("GET", "/healthz")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        status, _, body = request("GET", "/readyz")
        self.assertEqual(status, 200, body)
        status, _, body = request("GET", "/v1/schemes")
        self.assertEqual(status, 200)
        text = body.decode()
        json.loads(text)
        for name in ("none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"):
            self.assertIn('"%s"' % name, text)

    # -- numbers against the reference ----------------------------------------

    def test_nope_against_reference(self):
        headers = self.attention([Case(1, 5, 5, 2, 2, 8), Case(2, 3, 7, 4, 2, 8, 6)])
        timing = headers["Server-Timing"]
        # compute is the wall time of the tasks, cpu their summed run time
        self.assertRegex(timing, r"compute;dur=[0-9.]+, cpu;dur=[0-9.]+")

    def test_alibi_against_reference(self):
        self.attention([Case(3, 6, 6, 4, 4, 8, scheme="alibi", causal=True),
                        Case(4, 3, 9, 8, 8, 4, scheme="alibi", causal=True),
                        Case(5, 5, 5, 3, 3, 4, scheme="alibi", causal=True)])

    def test_row_statistics_against_reference(self):
        """return entropy, distance through HTTP: [H, Lq], the reference's
        -sum w ln w and mean distance (ALiBi causal, NoPE with Lq < Lk)."""
        for c in (Case(8, 6, 6, 4, 4, 8, scheme="alibi", causal=True), Case(9, 3, 9, 2, 1, 8)):
            Lq, Lk, H, Hkv, D, Dv = c.dims
            want = {}
            ref_attention(c.q, c.k, c.v, Lq, Lk, H, Hkv, D, Dv, c.causal,
                          alibi_slopes(H) if c.scheme == "alibi" else None, want)
            item = dict(c.item("s"), **{"return": ["entropy", "distance"]})
            status, _, ans = post_json("/v1/attention", {"inputs": [item]})
            self.assertEqual(status, 200, ans)
            out = ans["outputs"][0]
            self.assertNotIn("output", out)
            for name in ("entropy", "distance"):
                self.assertEqual(out[name]["shape"], [H, Lq])
                self.assertClose(tensor_values(out[name]), want[name], name)

    def test_alibi_slopes_8_heads(self):
        self.assertEqual(alibi_slopes(8), [2.0 ** -i for i in range(1, 9)])

    def test_b64_in_and_out(self):
        cases = [Case(6, 4, 4, 2, 1, 8, scheme="alibi", causal=True), Case(7, 4, 6, 2, 2, 4)]
        self.attention(cases, enc="b64", output_encoding="b64")
        self.attention(cases, enc="json", output_encoding="b64")
        self.attention(cases, enc="b64", output_encoding="json")

    def test_nested_json(self):
        self.attention([Case(8, 3, 5, 2, 2, 4, causal=True)], enc="nested")

    def test_item_error_in_batch(self):
        good = Case(9, 3, 3, 2, 2, 4)
        bad = Case(10, 3, 3, 4, 3, 4).item("bad")  # num_kv_heads 3 does not divide 4
        body = {"inputs": [good.item("good"), bad]}
        status, _, ans = post_json("/v1/attention", body)
        self.assertEqual(status, 200, ans)
        self.assertIs(ans["errors"], True)
        self.check_output(ans["outputs"][0], good, "good")
        err = ans["outputs"][1]
        self.assertEqual(err["id"], "bad")
        self.assertNotIn("output", err)
        self.assertEqual(err["error"]["code"], "SHAPE_MISMATCH")
        self.assertTrue(err["error"]["field"].startswith("inputs[1]"), err)

    # -- errors --------------------------------------------------------------

    def test_400_malformed_json(self):
        status, _, data = request("POST", "/v1/attention", raw=b'{"inputs": [')
        self.assertError(status, json.loads(data), 400, "MALFORMED_JSON")

    def test_400_unknown_field(self):
        status, _, ans = post_json("/v1/attention", {"inputs": [], "colour": "blue"})
        self.assertError(status, ans, 400, "UNKNOWN_FIELD", "colour")

    def test_404_405(self):
        status, _, data = request("GET", "/v3/attention")
        self.assertError(status, json.loads(data), 404, "NOT_FOUND")
        status, headers, data = request("GET", "/v1/attention")
        self.assertError(status, json.loads(data), 405, "METHOD_NOT_ALLOWED")
        self.assertEqual(headers["Allow"], "POST")

    @unittest.skipUnless(AUTH_URL, "POSATTN_AUTH_URL not set")
    def test_401(self):
        body = {"inputs": [Case(11, 2, 2, 1, 1, 2).item("a")]}
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            status, h, ans = post_json("/v1/attention", body, base=AUTH_URL, headers=headers)
            self.assertError(status, ans, 401, "UNAUTHORIZED")
            self.assertIn("Bearer", h["WWW-Authenticate"])
        status, _, ans = post_json("/v1/attention", body, base=AUTH_URL,
                                   headers={"Authorization": "Bearer " + API_KEY})
        self.assertEqual(status, 200, ans)

    @unittest.skipUnless(AUTH_URL, "POSATTN_AUTH_URL not set")
    def test_401_big_body(self):
        # A real request carries tensors: the 401 must reach a client that
        # sends its whole body (urllib does not use Expect: 100-continue).
        rng = random.Random(12)
        t = {"shape": [64, 8, 64], "b64": b64(rand_f32(rng, 64 * 8 * 64))}
        body = {"inputs": [{"id": "big", "scheme": {"type": "none"}, "q": t, "k": t, "v": t}]}
        self.assertGreater(len(json.dumps(body)), 500000)  # under --max-body-mb 1
        status, _, ans = post_json("/v1/attention", body, base=AUTH_URL)
        self.assertError(status, ans, 401, "UNAUTHORIZED")

    @unittest.skipUnless(AUTH_URL, "POSATTN_AUTH_URL not set")
    def test_413(self):
        raw = b'{"inputs": [], "pad": "' + b"x" * (3 << 19) + b'"}'  # 1.5 MB > --max-body-mb 1
        status, _, data = request("POST", "/v1/attention", raw=raw, base=AUTH_URL,
                                  headers={"Authorization": "Bearer " + API_KEY})
        self.assertError(status, json.loads(data), 413, "PAYLOAD_TOO_LARGE")

    # -- metrics, openapi ----------------------------------------------------

    def test_metrics(self):
        def count():
            status, headers, body = request("GET", "/metrics")
            self.assertEqual(status, 200)
            self.assertIn("text/plain", headers["Content-Type"])
            text = body.decode()
            self.assertIn("posattn_request_duration_seconds_bucket", text)
            return sum(float(m.group(1)) for m in re.finditer(
                r'^posattn_requests_total\{[^}]*endpoint="schemes"[^}]*\} (\S+)$', text, re.M))
        before = count()
        for _ in range(3):
            self.assertEqual(request("GET", "/v1/schemes")[0], 200)
        self.assertEqual(count() - before, 3)

    def test_openapi(self):
        status, headers, body = request("GET", "/openapi.yaml")
        self.assertEqual(status, 200)
        self.assertIn("yaml", headers["Content-Type"])
        self.assertRegex(body.decode(), r"(?m)^openapi: ")
        self.assertIn("/v1/attention:", body.decode())


class StartUp(unittest.TestCase):
    """What posattnd says when it starts: where the API and the web page are,
    and, when the port is taken, which flag and variable choose another."""

    BIN = os.environ.get("POSATTND", "build/posattnd")

    def test_prints_the_urls(self):
        srv = posattnd.start(self.BIN, ["--workers", "1"], log_format=None,
                             env={"PATH": os.environ.get("PATH", "")})
        try:
            # posattnd writes the three lines at once (one fflush).
            first, api, web = (srv.stdout_text().splitlines() + ["", "", ""])[:3]
            port = int(re.search(r"listening on http://127\.0\.0\.1:(\d+) ", first).group(1))
            self.assertIn(f"http://127.0.0.1:{port}/v1/schemes", api)
            self.assertIn(f"web page  http://127.0.0.1:{port}/", web)
        finally:
            self.assertEqual(srv.stop(15), 0, srv.failure())

    def test_port_in_use_names_the_flag(self):
        import subprocess
        port = urllib.parse.urlsplit(URL).port
        r = subprocess.run([self.BIN, "--host", "127.0.0.1", "--port", str(port)],
                           capture_output=True, text=True, timeout=15,
                           env={"PATH": os.environ.get("PATH", "")})
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"cannot listen on 127.0.0.1:{port}", r.stderr)
        self.assertIn("--port N or POSATTN_PORT=N", r.stderr)


class ReadmeExamples(Checks, unittest.TestCase):
    def test_python_client_example(self):
        """docs/api.md's example of the Python client, as written: what it
        prints is what the comments on its print lines say."""
        import subprocess
        [(_, code)] = [(n, c) for n, c in examples("pyclient") if n == "attention"]
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "clients", "python"))
        p = subprocess.run(["/usr/bin/python3", "-c", code.replace(README_URL, URL)],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        want = [re.search(r"#\s*(.*)$", l).group(1).strip() for l in code.split("\n")
                if l.strip().startswith("print(")]
        self.assertEqual(p.stdout.strip().split("\n"), want)

    def test_python_examples(self):
        blocks = dict(examples("python"))
        self.assertIn("attention", blocks)
        code = blocks["attention"].replace(README_URL, URL)
        ns = {"__name__": "readme_example"}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md:python", "exec"), ns)  # noqa: S102
        ans, q, k, v = ns["ans"], ns["q"], ns["k"], ns["v"]
        self.assertIs(ans["errors"], False)
        q, k, v = [f32(x) for x in q], [f32(x) for x in k], [f32(x) for x in v]
        for out_item, slopes in zip(ans["outputs"], (None, alibi_slopes(2))):
            want = ref_attention(q, k, v, 3, 3, 2, 2, 4, 4, True, slopes)
            self.assertClose(tensor_values(out_item["output"]), want, out_item["id"])
        # What it prints is what README.md says it prints (numbers to
        # the 4 decimals printed, give or take one in the last).
        printed = out.getvalue().splitlines()
        shown = blocks["attention-output"].splitlines()
        self.assertEqual(len(printed), len(shown), printed)
        for got, want in zip(printed, shown):
            self.assertEqual(got.split()[0], want.split()[0])
            g = [float(x) for x in re.findall(r"-?\d+\.?\d*", got)]
            w = [float(x) for x in re.findall(r"-?\d+\.?\d*", want)]
            self.assertEqual(len(g), len(w), (got, want))
            for a, b in zip(g, w):
                self.assertLessEqual(abs(a - b), 1.5e-4, (got, want))

    def test_python_batch_example(self):
        """The batched bf16 example: it prints what README.md shows, and each
        sequence of its answer is, bit for bit, that sequence sent alone."""
        blocks = dict(examples("python"))
        code = blocks["batch"].replace(README_URL, URL)
        ns = {"__name__": "readme_example"}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md:python batch", "exec"), ns)  # noqa: S102
        self.assertEqual(out.getvalue().strip().splitlines(),
                         blocks["batch-output"].strip().splitlines())
        B, L, H, D = ns["B"], ns["L"], ns["H"], ns["D"]
        o = ns["o"]
        self.assertEqual(len(o), B * L * H * D)
        per = L * H * D
        for b, kl in enumerate((4, 2)):
            part = lambda x: {"shape": [L, H, D], "dtype": "bf16",
                              "b64": ns["bf16_b64"](x[b * per:(b + 1) * per])}
            alone = ns["post"]("/v1/attention", {
                "output_encoding": "b64", "output_dtype": "bf16", "inputs": [
                    {"scheme": {"type": "rope"}, "causal": True, "key_length": kl,
                     "q": part(ns["q"]), "k": part(ns["k"]), "v": part(ns["v"])}]})
            got = ns["bf16_values"](alone["outputs"][0]["output"]["b64"])
            self.assertEqual(list(got), list(o[b * per:(b + 1) * per]), "sequence %d" % b)


if __name__ == "__main__":
    unittest.main(verbosity=1 if "-q" in sys.argv else 2, argv=[a for a in sys.argv if a != "-q"])
