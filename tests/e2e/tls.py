#!/usr/bin/python3
"""tls.py - posattnd over HTTPS (--tls-cert, --tls-key), end to end.

    /usr/bin/python3 tests/e2e/tls.py --bin build/posattnd

Makes a private CA and a server certificate for 127.0.0.1 with openssl (a
fresh pair each run, in a temporary folder), starts posattnd with them on
127.0.0.1 (--port 0) and checks:
  - HTTPS answers with the CA trusted: /healthz, an attention request whose
    output equals the same request over plain HTTP bit for bit, the API key
    (401 without it) over TLS;
  - a client that does not trust the CA fails the handshake; TLS 1.1 is
    refused; plain HTTP to the TLS port gets no HTTP answer at all;
  - a client that opens TCP and never finishes the handshake is cut within
    --request-timeout;
  - an expired certificate, a key of another certificate, a missing file
    and a key given as the certificate each stop start-up with exit 1 and a
    message naming the file; SIGTERM still drains to exit 0;
  - with --log-format json, every line posattnd writes on stderr is a JSON
    object, through failed handshakes (plain HTTP, an untrusted client,
    TLS 1.1), a key file others can read, SIGHUP, a drain, and a second
    posattnd refused the same port (libmicrohttpd's and GnuTLS's messages
    included: they are event lines "libmicrohttpd").
"""

import argparse
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import posattnd  # noqa: E402  (tests/posattnd.py)

ARGS = None
TMP = None
SRV = {}


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d):
    """ca.crt, srv.crt/srv.key (CN and IP SAN 127.0.0.1), expired.crt, other.key."""
    p = lambda n: os.path.join(d, n)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.crt"), "-days", "2",
            "-subj", "/CN=posattn test CA")
    openssl("req", *ec, "-keyout", p("srv.key"), "-out", p("srv.csr"), "-subj", "/CN=127.0.0.1")
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    for name, days in (("srv.crt", "1"), ("expired.crt", "-1")):
        openssl("x509", "-req", "-in", p("srv.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
                "-CAcreateserial", "-out", p(name), "-days", days, "-extfile", p("ext.cnf"))
    openssl("req", *ec, "-keyout", p("other.key"), "-out", p("other.csr"), "-subj", "/CN=x")


def start(extra, tls=True, log_format="off"):
    args = ["--workers", "2", "--request-timeout", "2"] + extra
    if tls:
        args += ["--tls-cert", os.path.join(TMP, "srv.crt"), "--tls-key", os.path.join(TMP, "srv.key")]
    return posattnd.start(ARGS.bin, args, log_format=log_format)


def trusted():
    ctx = ssl.create_default_context(cafile=os.path.join(TMP, "ca.crt"))
    return ctx


def call(port, method, path, body=None, headers=None, ctx=None, tls=True):
    if tls:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx or trusted())
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


ITEM = {"inputs": [{"scheme": {"type": "rope"}, "causal": True,
                    "q": {"shape": [2, 1, 2], "data": [1, 0, 0, 1]},
                    "k": {"shape": [2, 1, 2], "data": [1, 0, 0, 1]},
                    "v": {"shape": [2, 1, 2], "data": [1, 2, 3, 4]}}],
        "output_encoding": "b64"}


def tls_failures():
    """posattn_tls_handshake_failures_total by reason, from /metrics over TLS."""
    st, body = call(SRV["port"], "GET", "/metrics")
    assert st == 200
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("posattn_tls_handshake_failures_total{reason=\""):
            reason = line.split('"')[1]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


class Tls(unittest.TestCase):
    def test_answers_over_https(self):
        port = SRV["port"]
        st, body = call(port, "GET", "/healthz")
        self.assertEqual((st, json.loads(body)), (200, {"status": "ok"}))
        self.assertTrue(SRV["url"].startswith("https://127.0.0.1:"), SRV["url"])
        key = {"Authorization": "Bearer tls-e2e", "Content-Type": "application/json"}
        st, body = call(port, "POST", "/v1/attention", json.dumps(ITEM), key)
        self.assertEqual(st, 200, body)
        st2, plain = call(SRV["plain_port"], "POST", "/v1/attention", json.dumps(ITEM), key,
                          tls=False)
        self.assertEqual(st2, 200, plain)
        a, b = json.loads(body), json.loads(plain)
        self.assertEqual(a["outputs"][0]["output"], b["outputs"][0]["output"])
        st, body = call(port, "POST", "/v1/attention", json.dumps(ITEM),
                        {"Content-Type": "application/json"})
        self.assertEqual(st, 401, body)

    def test_untrusted_client_fails(self):
        before = tls_failures()
        ctx = ssl.create_default_context()  # the system's CAs, not ours
        with self.assertRaises(ssl.SSLCertVerificationError):
            call(SRV["port"], "GET", "/healthz", ctx=ctx)
        time.sleep(0.2)
        after = tls_failures()  # counted by reason; this metrics call itself is not
        self.assertEqual(after["failed"] - before["failed"], 1)
        self.assertEqual(after["timeout"], before["timeout"])

    def test_old_tls_refused(self):
        ctx = trusted()
        with warnings.catch_warnings():  # the old versions are deprecated: that is the point
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.TLSv1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        ctx.set_ciphers("ALL:@SECLEVEL=0")
        before = tls_failures()
        # The client offers 1.1 and the server ends the handshake: an EOF, a
        # reset or the server's protocol_version alert. A refusal of the
        # client's own (no protocols available) would not show the server
        # refusing, so it fails the test, and the server must count it.
        with self.assertRaises((ssl.SSLZeroReturnError, ssl.SSLEOFError, ssl.SSLError,
                                ConnectionResetError)) as cm:
            call(SRV["port"], "GET", "/healthz", ctx=ctx)
        reason = getattr(cm.exception, "reason", None) or ""
        self.assertNotIn(reason, ("NO_PROTOCOLS_AVAILABLE", "UNSUPPORTED_PROTOCOL",
                                  "NO_CIPHERS_AVAILABLE"), cm.exception)
        time.sleep(0.2)
        self.assertEqual(tls_failures()["failed"] - before["failed"], 1)
        ctx = trusted()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        st, _ = call(SRV["port"], "GET", "/healthz", ctx=ctx)  # 1.2 is fine
        self.assertEqual(st, 200)

    def test_plain_http_gets_no_answer(self):
        with socket.create_connection(("127.0.0.1", SRV["port"]), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            try:
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except (ConnectionResetError, socket.timeout):
                pass
        self.assertNotIn(b"HTTP/", got)
        self.assertNotIn(b"status", got)

    def test_stalled_handshake_is_cut(self):
        before = tls_failures()
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", SRV["port"]), timeout=15) as s:
            s.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
            try:
                while s.recv(4096):
                    pass
            except ConnectionResetError:
                pass
        took = time.monotonic() - t0
        self.assertLess(took, 2.0 + 2.5, "cut after %.1f s (--request-timeout 2)" % took)
        time.sleep(0.2)
        self.assertEqual(tls_failures()["timeout"] - before["timeout"], 1)

    def test_load_tool_over_https(self):
        """posattn-load --cacert against the TLS port: every request 200."""
        load = os.path.join(os.path.dirname(ARGS.bin), "posattn-load")
        out = os.path.join(TMP, "load.json")
        p = subprocess.run([load, "--url", SRV["url"], "--cacert", os.path.join(TMP, "ca.crt"),
                            "--api-key", "tls-e2e", "--schemes", "rope", "--lengths", "16",
                            "--heads", "2", "--head-dim", "8", "--requests", "5", "--quiet",
                            "--json", out], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        with open(out) as f:
            r = json.load(f)
        self.assertEqual([(x["ok"], x["errors"]) for x in r["results"]], [(5, 0)], r["results"])
        # Without the CA the handshake fails and the tool says so.
        p = subprocess.run([load, "--url", SRV["url"], "--api-key", "tls-e2e", "--schemes", "rope",
                            "--lengths", "16", "--requests", "1", "--quiet"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)

    def test_bad_pairs_stop_start_up(self):
        d = TMP
        cases = [("expired.crt", "srv.key", "expired.crt", "expired on"),
                 ("srv.crt", "other.key", "other.key", "does not belong to the certificate"),
                 ("missing.crt", "srv.key", "missing.crt", "cannot open the TLS certificate"),
                 ("srv.key", "srv.key", "srv.key", "not a PEM certificate")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("POSATTN_")}
        for cert, key, named, phrase in cases:
            with self.subTest(cert=cert, key=key):
                p = subprocess.run([ARGS.bin, "--port", "0", "--tls-cert", os.path.join(d, cert),
                                    "--tls-key", os.path.join(d, key)],
                                   capture_output=True, text=True, timeout=20, env=env)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertIn(os.path.join(d, named), p.stderr)
                self.assertIn(phrase, p.stderr)


def json_lines(text):
    """Each non-empty line of text parsed as a JSON object; AssertionError
    naming the first that is not one."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise AssertionError("stderr line %d is not JSON: %r" % (n, line)) from None
        if not isinstance(obj, dict):
            raise AssertionError("stderr line %d is not a JSON object: %r" % (n, line))
        out.append(obj)
    return out


class JsonLog(unittest.TestCase):
    def test_every_stderr_line_is_json(self):
        keys = os.path.join(TMP, "keys.txt")
        with open(keys, "w") as f:
            f.write("json-log-key\n")
        os.chmod(keys, 0o644)  # others can read it: a warning at start-up
        srv = start(["--api-key-file", keys], log_format="json")
        port = srv.port
        try:
            auth = {"Authorization": "Bearer json-log-key"}
            self.assertEqual(call(port, "GET", "/v1/schemes", headers=auth)[0], 200)
            # Plain HTTP to the TLS port.
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                try:
                    while s.recv(4096):
                        pass
                except (ConnectionResetError, socket.timeout):
                    pass
            # A client that does not trust the certificate.
            with self.assertRaises(ssl.SSLCertVerificationError):
                call(port, "GET", "/healthz", ctx=ssl.create_default_context())
            # TLS 1.1, where this OpenSSL still offers it.
            ctx = trusted()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                ctx.minimum_version = ssl.TLSVersion.TLSv1
                ctx.maximum_version = ssl.TLSVersion.TLSv1_1
            ctx.set_ciphers("ALL:@SECLEVEL=0")
            with self.assertRaises((ssl.SSLError, ConnectionResetError)):
                call(port, "GET", "/healthz", ctx=ctx)
            srv.proc.send_signal(signal.SIGHUP)  # the key file again
            deadline = time.monotonic() + 10
            while "now accepted" not in srv.stderr_tail(200) and time.monotonic() < deadline:
                time.sleep(0.05)
            # A second server on the same port: libmicrohttpd's "Failed to
            # bind", then posattnd's own refusal.
            env = {k: v for k, v in os.environ.items() if not k.startswith("POSATTN_")}
            clash = subprocess.run([ARGS.bin, "--host", "127.0.0.1", "--port", str(port),
                                    "--log-format", "json", "--no-probe",
                                    "--tls-cert", os.path.join(TMP, "srv.crt"),
                                    "--tls-key", os.path.join(TMP, "srv.key")],
                                   capture_output=True, text=True, timeout=30, env=env)
            self.assertEqual(clash.returncode, 1, clash.stderr)
            lines = json_lines(clash.stderr)
            self.assertTrue(any(o.get("event") == "libmicrohttpd" and "bind" in o["message"]
                                for o in lines), clash.stderr)
            self.assertTrue(any(o.get("event") == "start" and o.get("level") == "error" and
                                "cannot listen on 127.0.0.1:%d" % port in o["message"]
                                for o in lines), clash.stderr)
            time.sleep(0.3)  # the handshakes' messages are written as their connections close
        finally:
            self.assertEqual(srv.stop(15), 0, srv.failure())
        lines = json_lines(srv.stderr)
        events = [o.get("event") for o in lines]
        # Three failed handshakes, each logged by libmicrohttpd (GnuTLS's
        # reason); the key file's warning, the reload, the drain and the
        # stop; the access log's lines (no "event").
        mhd = [o for o in lines if o.get("event") == "libmicrohttpd"]
        self.assertGreaterEqual(len(mhd), 3, srv.stderr)
        self.assertTrue(all(o["level"] == "warn" and o["message"] for o in mhd), mhd)
        for e in ("api_keys", "drain", "stopped"):
            self.assertIn(e, events, srv.stderr)
        self.assertTrue(any("can be read by others" in o.get("message", "") for o in lines),
                        srv.stderr)
        self.assertTrue(any(o.get("path") == "/v1/schemes" and o.get("status") == 200
                            for o in lines), srv.stderr)


def main():
    global ARGS, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/posattnd")
    ap.add_argument("-q", action="store_true")
    ARGS = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        TMP = d
        make_pki(d)
        p = start(["--api-key", "tls-e2e"])
        SRV["port"], SRV["url"] = p.port, p.url
        q = start(["--api-key", "tls-e2e"], tls=False)
        SRV["plain_port"] = q.port
        try:
            suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c)
                                       for c in (Tls, JsonLog))
            ok = unittest.TextTestRunner(verbosity=1 if ARGS.q else 2).run(suite).wasSuccessful()
        finally:
            codes = [srv.stop(15) for srv in (p, q)]
        if codes[0] != 0:
            print("posattnd over TLS exited %d on SIGTERM, expected 0" % codes[0])
            print(p.failure())
            ok = False
    print("e2e-tls: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
