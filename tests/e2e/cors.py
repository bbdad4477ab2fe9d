#!/usr/bin/python3
"""cors.py - --cors-origin (CORS for web pages of other origins), over HTTP.

Starts posattnd (tests/posattnd.py) three ways: with two allowed origins and
an API key, without the flag, and with --cors-origin '*' and no key. Checks:
  - a preflight OPTIONS from an allowed origin is answered 204 on every
    route, without the key, with Access-Control-Allow-Origin echoing the
    origin, the route's methods, the request headers the clients send
    (Content-Type, Authorization, Inference-Header-Content-Length), a max
    age and Vary: Origin, on a connection that stays open;
  - real answers to an allowed origin (200, 401 without the key, a KServe v2
    infer) carry Access-Control-Allow-Origin, Vary: Origin and
    Access-Control-Expose-Headers naming Server-Timing;
  - another origin, or no Origin, gets no Access-Control-* header (its
    preflight is the 405 of any OPTIONS), and a server without the flag
    sends none to anyone;
  - '*' answers "*" to any origin; '*' with --api-key or --api-key-file, and
    an origin with a path, stop start-up with exit 2 and a message naming
    the flag.
The binary is $POSATTND (default build/posattnd). Part of make test's
e2e-clients; tests/ui/cors.mjs does the same from a real page in Chromium.
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import posattnd  # noqa: E402

BIN = os.environ.get("POSATTND", "build/posattnd")
KEY = "cors-e2e"
PAGE = "http://127.0.0.1:8765"
PAGE2 = "https://app.example:8443"
OTHER = "http://evil.example"
ITEM = {"inputs": [{"scheme": {"type": "rope"}, "q": {"shape": [1, 1, 2], "data": [1, 0]},
                    "k": {"shape": [1, 1, 2], "data": [1, 0]},
                    "v": {"shape": [1, 1, 2], "data": [1, 2]}}]}
V2 = {"inputs": [{"name": n, "shape": [1, 1, 2], "datatype": "FP32", "data": [1, 0]}
                 for n in ("q", "k", "v")]}
SRV = {}


def call(srv, method, path, headers=None, body=None, conn=None):
    """(status, headers as a dict of lower-case names, body); conn, when
    given, is used and left open."""
    c = conn or http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        if conn is None:
            c.close()


def preflight(srv, path, method="POST", origin=PAGE, conn=None):
    return call(srv, "OPTIONS", path, {
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization,content-type"}, conn=conn)


def cors_headers(h):
    return {k: v for k, v in h.items() if k.startswith("access-control-")}


def listed(value):
    return {x.strip().lower() for x in (value or "").split(",")}


class Cors(unittest.TestCase):
    def test_preflight_on_every_route_without_the_key(self):
        srv = SRV["on"]
        routes = [("/v1/attention", "POST"), ("/v1/encode", "POST"), ("/v1/schemes", "GET"),
                  ("/v1/sessions", "POST"), ("/v1/sessions/abc", "DELETE"),
                  ("/v1/sessions/abc/append", "POST"), ("/v2/models/attention-rope/infer", "POST"),
                  ("/v2/models/attention-rope", "GET"), ("/v2", "GET"), ("/healthz", "GET"),
                  ("/metrics", "GET"), ("/openapi.yaml", "GET")]
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        try:
            for path, method in routes:
                with self.subTest(path=path):
                    st, h, body = preflight(srv, path, method, conn=conn)
                    self.assertEqual(st, 204, body)
                    self.assertEqual(body, b"")
                    self.assertEqual(h.get("access-control-allow-origin"), PAGE)
                    self.assertIn(method.lower(), listed(h.get("access-control-allow-methods")))
                    self.assertLessEqual({"content-type", "authorization",
                                          "inference-header-content-length"},
                                         listed(h.get("access-control-allow-headers")))
                    self.assertGreater(int(h.get("access-control-max-age", "0")), 0)
                    self.assertIn("origin", listed(h.get("vary")))
                    # One connection for every preflight: none is closed.
                    self.assertNotEqual(h.get("connection"), "close")
        finally:
            conn.close()
        st, h, _ = preflight(srv, "/v1/sessions/abc", "DELETE", origin=PAGE2)
        self.assertEqual((st, h.get("access-control-allow-origin")), (204, PAGE2))

    def test_answers_to_an_allowed_origin(self):
        srv = SRV["on"]
        hdr = {"Origin": PAGE, "Authorization": "Bearer " + KEY,
               "Content-Type": "application/json"}
        st, h, body = call(srv, "POST", "/v1/attention", hdr, json.dumps(ITEM))
        self.assertEqual(st, 200, body)
        self.assertEqual(h.get("access-control-allow-origin"), PAGE)
        self.assertIn("origin", listed(h.get("vary")))
        exposed = listed(h.get("access-control-expose-headers"))
        self.assertLessEqual({"server-timing", "x-posattn-replica", "retry-after"}, exposed)
        self.assertNotIn("access-control-allow-methods", h)  # a preflight's only
        # Errors too, so that the page can read why.
        st, h, body = call(srv, "POST", "/v1/attention",
                           {"Origin": PAGE, "Content-Type": "application/json"}, json.dumps(ITEM))
        self.assertEqual(st, 401, body)
        self.assertEqual(h.get("access-control-allow-origin"), PAGE)
        self.assertIn("www-authenticate", listed(h.get("access-control-expose-headers")))
        st, h, body = call(srv, "POST", "/v2/models/attention-rope/infer", hdr, json.dumps(V2))
        self.assertEqual(st, 200, body)
        self.assertEqual(h.get("access-control-allow-origin"), PAGE)
        # The origin as configured, whatever the case of its letters.
        st, h, _ = call(srv, "GET", "/healthz", {"Origin": PAGE2.upper().replace("HTTPS", "https")})
        self.assertEqual((st, h.get("access-control-allow-origin")), (200, PAGE2))

    def test_other_origins_get_no_cors_headers(self):
        srv = SRV["on"]
        hdr = {"Origin": OTHER, "Authorization": "Bearer " + KEY,
               "Content-Type": "application/json"}
        st, h, body = call(srv, "POST", "/v1/attention", hdr, json.dumps(ITEM))
        self.assertEqual(st, 200, body)
        self.assertEqual(cors_headers(h), {})
        self.assertIn("origin", listed(h.get("vary")))  # caches keep the answers apart
        for origin in (OTHER, PAGE + ":1", PAGE + "/", "null"):
            with self.subTest(origin=origin):
                st, h, _ = preflight(srv, "/v1/attention", origin=origin)
                self.assertEqual(st, 405)
                self.assertEqual(cors_headers(h), {})
        st, h, _ = call(srv, "GET", "/healthz")  # no Origin: not a browser's cross-origin call
        self.assertEqual(cors_headers(h), {})
        # An OPTIONS that is not a preflight (no Access-Control-Request-Method).
        st, h, _ = call(srv, "OPTIONS", "/v1/attention", {"Origin": PAGE})
        self.assertEqual(st, 405)

    def test_off_by_default(self):
        srv = SRV["off"]
        st, h, _ = call(srv, "GET", "/v1/schemes", {"Origin": PAGE})
        self.assertEqual(st, 200)
        self.assertEqual(cors_headers(h), {})
        self.assertNotIn("vary", h)
        st, h, _ = preflight(srv, "/v1/attention")
        self.assertEqual(st, 405)
        self.assertEqual(cors_headers(h), {})

    def test_any_origin_without_a_key(self):
        srv = SRV["any"]
        for origin in (PAGE, OTHER):
            st, h, _ = call(srv, "GET", "/v1/schemes", {"Origin": origin})
            self.assertEqual((st, h.get("access-control-allow-origin")), (200, "*"))
            self.assertNotIn("origin", listed(h.get("vary")))
            st, h, _ = preflight(srv, "/v1/attention", origin=origin)
            self.assertEqual((st, h.get("access-control-allow-origin")), (204, "*"))

    def test_refused_at_start_up(self):
        with tempfile.NamedTemporaryFile("w", suffix=".keys") as kf:
            kf.write("a-key\n")
            kf.flush()
            os.chmod(kf.name, 0o600)
            cases = [(["--cors-origin", "*", "--api-key", "k"], "--cors-origin '*'", "--api-key"),
                     (["--cors-origin", PAGE, "--cors-origin", "*", "--api-key-file", kf.name],
                      "--cors-origin '*'", "--api-key-file"),
                     (["--cors-origin", PAGE + "/page"], "--cors-origin", PAGE + "/page"),
                     (["--cors-origin", "ftp://x"], "--cors-origin", "ftp://x")]
            for args, flag, named in cases:
                with self.subTest(args=args):
                    p = subprocess.run([BIN, "--port", "0", "--no-probe"] + args,
                                       capture_output=True, text=True, timeout=30,
                                       env=posattnd.clean_env())
                    self.assertEqual(p.returncode, 2, p.stderr)
                    self.assertEqual(p.stdout, "")
                    self.assertIn(flag, p.stderr)
                    self.assertIn(named, p.stderr)


def main():
    servers = []
    try:
        SRV["on"] = posattnd.start(BIN, ["--workers", "2", "--no-probe", "--api-key", KEY,
                                         "--cors-origin", PAGE, "--cors-origin", PAGE2])
        servers.append(SRV["on"])
        SRV["off"] = posattnd.start(BIN, ["--workers", "1", "--no-probe"])
        servers.append(SRV["off"])
        SRV["any"] = posattnd.start(BIN, ["--workers", "1", "--no-probe", "--cors-origin", "*"])
        servers.append(SRV["any"])
        quiet = "-q" in sys.argv
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(Cors)
        ok = unittest.TextTestRunner(verbosity=1 if quiet else 2).run(suite).wasSuccessful()
    finally:
        codes = [s.stop(15) for s in servers]
    for s, code in zip(servers, codes):
        if code != 0:
            print(s.failure())
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
