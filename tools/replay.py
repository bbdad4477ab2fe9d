#!/usr/bin/python3
"""replay.py - two builds of posattnd answer the same requests alike.

    tools/replay.py --a OLD_POSATTND --b NEW_POSATTND [--flags "..."] -- COMMAND [ARGS...]

Starts both binaries on 127.0.0.1 (port 0) with the same flags, and a proxy
on 127.0.0.1 that sends each request it gets to A, then the same bytes to B,
and answers with A's answer. COMMAND runs with POSATTN_URL pointing at the
proxy (the e2e clients, tests/e2e/v2.py and client.py, read it; so does
tools/load), and POSATTN_AUTH_URL at a third server (B with an API key, not
compared). At the end it prints how many requests were compared and every
one whose answers differ, and exits 1 when any did (or COMMAND failed).

Compared byte for byte: the status, the body, and the headers a client
acts on (Content-Type, Allow, WWW-Authenticate, Retry-After, Connection,
Inference-Header-Content-Length's presence). What is measured rather than
computed is set to 0 in both first: timing members ("queue_us",
"compute_us", "cpu_us", "*_ns", "last_inference"), the start-up probe's
figures and the fractions of them ("fraction_of_peak", "bound", /v1/schemes'
machine) and, in a binary /v2
answer, the JSON header's length; Server-Timing is not compared, nor
/metrics. A refactoring that changes no behaviour passes this with the
e2e clients as COMMAND (the closing note of issue #28 shows the run).
"""
import argparse
import http.client
import http.server
import os
import re
import subprocess
import sys
import threading

HEADERS = ("content-type", "allow", "www-authenticate", "retry-after", "connection")
TIMING = re.compile(rb'"(queue_us|compute_us|cpu_us|\w*_ns|ns|last_inference)":\s*\d+')
# The start-up probe's figures (runtime/probe.h), measured too; and an item's
# fraction of them, left out when it ran under a microsecond: removed whole.
MEASURED = re.compile(rb'"(gflops_f32|read_gbps|read_buffer_bytes|probe_ms|load_average)":'
                      rb'\s*-?[0-9.eE+-]+')
FRACTION = re.compile(rb',"fraction_of_peak":[0-9.eE+-]+,"bound":"\w+","peak_threads":\d+')


def unmeasured(body):
    """body with its measured members set to 0 (fractions of peak removed)."""
    body = TIMING.sub(rb'"\1":0', body)
    return FRACTION.sub(b"", MEASURED.sub(rb'"\1":0', body))


FRAMING = "inference-header-content-length"


def start(binary, flags):
    p = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", "0"] + flags,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    m = re.search(r":(\d+)", line)
    if not m:
        p.kill()
        sys.exit("replay: %s printed no port: %r" % (binary, line))
    return p, int(m.group(1))


def call(port, method, path, headers, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


def normal(status, raw_headers, body):
    headers = {k.lower(): v for k, v in raw_headers}
    n = headers.get(FRAMING)
    if n is not None:  # a JSON header, then binary tensors
        n = int(n)
        body = unmeasured(body[:n]) + b"\0FRAMED\0" + body[n:]
    else:
        body = unmeasured(body)
    return (status, tuple((h, headers.get(h)) for h in HEADERS), FRAMING in headers, body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the reference binary")
    ap.add_argument("--b", required=True, help="the binary under test")
    ap.add_argument("--flags", default="--workers 2", help="flags of both servers")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("a COMMAND to run against the proxy is required")
    flags = a.flags.split()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSATTN_")}
    procs = []
    pa, port_a = start(a.a, flags)
    pb, port_b = start(a.b, flags)
    key = "replay-secret"
    pk, port_k = start(a.b, flags + ["--api-key", key, "--max-body-mb", "1"])
    procs = [pa, pb, pk]
    lock = threading.Lock()
    seen = {"n": 0, "diff": []}

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def handle_one(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            hdrs = {k: v for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "content-length")}
            ra = call(port_a, self.command, self.path, hdrs, body)
            if self.path != "/metrics":
                rb = call(port_b, self.command, self.path, hdrs, body)
                na, nb = normal(*ra), normal(*rb)
                with lock:
                    seen["n"] += 1
                    if na != nb:
                        seen["diff"].append((self.command, self.path, body, na, nb))
            status, headers, out = ra
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "date"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(out)

        do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = handle_one

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env["POSATTN_URL"] = "http://127.0.0.1:%d" % server.server_address[1]
    env["POSATTN_AUTH_URL"] = "http://127.0.0.1:%d" % port_k
    env["POSATTN_AUTH_KEY"] = key
    try:
        rc = subprocess.run(cmd, env=env, timeout=600).returncode
    finally:
        server.shutdown()
        for p in procs:
            p.terminate()
            p.wait(timeout=15)
    for method, path, body, na, nb in seen["diff"]:
        print("replay: %s %s (%d body bytes) answers differ:\n  a: %r\n  b: %r" %
              (method, path, len(body or b""), na[:3] + (na[3][:300],), nb[:3] + (nb[3][:300],)))
    print("replay: %d requests compared, %d differ; the command exited %d" %
          (seen["n"], len(seen["diff"]), rc))
    return 1 if seen["diff"] or rc != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
