#!/usr/bin/python3
"""slowloris.py - slow clients must not block others (issue 5).

Starts posattnd on 127.0.0.1 (port 0, --request-timeout T) unless --url names
a running one, then for --seconds (default 20):
  * --slow connections (default 200) trickle a request one byte per second:
    half in the headers, half in the body (headers complete, body slow);
  * --idle connections (default 20) send half a request line and go silent;
  * one client sends normal requests (GET /healthz, a small POST
    /v1/attention) back to back and times them;
  * one keep-alive client sends a request, waits 0.8 T, sends another on the
    same connection, then stays idle.
Prints the figures and exits 1 unless: normal requests were all answered
with p99 < 1 s, every idle connection was closed by the server within
T + 2 s, every slow connection was closed within its limit (headers and
body each within T; T + 2 s after it started, by default), and the
keep-alive connection got both answers (its clock restarts at each answer)
and was closed T (+-0.7 s) after the second.
Standard library only; 127.0.0.1 only; bounded in time and count.

  tests/slowloris.py [--posattnd build/posattnd] [--timeout 3] [--slow 200]
"""
import argparse
import json
import os
import select
import socket
import sys
import threading
import time
import urllib.request

import posattnd

SMALL = json.dumps({"inputs": [{"scheme": {"type": "rope"}, "causal": True,
                                "q": {"shape": [2, 1, 2], "data": [1, 0, 0, 0]},
                                "k": {"shape": [2, 1, 2], "data": [1, 0, 0, 1]},
                                "v": {"shape": [2, 1, 2], "data": [1, 2, 3, 4]}}]}).encode()


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class Slow:
    """One connection that sends `payload` one byte per `interval` seconds."""

    def __init__(self, port, payload, kind):
        self.kind = kind
        self.payload = payload
        self.sent = 0
        self.opened = time.monotonic()
        self.closed_at = None
        self.answer = b""
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.s.setblocking(False)

    def send_byte(self):
        if self.closed_at is not None or self.sent >= len(self.payload):
            return
        try:
            self.s.send(self.payload[self.sent:self.sent + 1])
            self.sent += 1
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.mark_closed()

    def poll_read(self):
        try:
            data = self.s.recv(4096)
            if data:
                self.answer += data
            else:
                self.mark_closed()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.mark_closed()

    def mark_closed(self):
        if self.closed_at is None:
            self.closed_at = time.monotonic()
            self.s.close()


def normal_client(url, stop, lat, failures):
    i = 0
    while not stop.is_set():
        i += 1
        t0 = time.monotonic()
        try:
            if i % 2:
                with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
                    ok = r.status == 200
            else:
                req = urllib.request.Request(url + "/v1/attention", data=SMALL,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    ok = r.status == 200 and json.load(r)["errors"] is False
        except Exception as e:  # noqa: BLE001 - every failure is a figure
            ok = False
            failures.append(repr(e))
        lat.append(time.monotonic() - t0)
        if not ok and not failures:
            failures.append("unexpected answer")
        time.sleep(0.01)


def keepalive_probe(port, timeout, out):
    """Two requests on one connection 0.8 T apart, then idle until closed."""
    req = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    answers, last = 0, None
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout + 5)
        for i in range(2):
            if i:
                time.sleep(0.8 * timeout)
            s.sendall(req)
            buf = b""
            while b"\r\n\r\n" not in buf or not buf.rstrip().endswith(b"}"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
            if buf.startswith(b"HTTP/1.1 200"):
                answers += 1
                last = time.monotonic()
        while s.recv(4096):
            pass
        out["closed_after"] = time.monotonic() - last if last else None
        s.close()
    except OSError as e:
        out["error"] = repr(e)
    out["answers"] = answers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--posattnd", default=os.environ.get("POSATTND") or
                    os.path.join(here, "..", "build", "posattnd"))
    ap.add_argument("--url", help="use a running server (then --timeout must match its own)")
    ap.add_argument("--timeout", type=int, default=3, help="--request-timeout given to posattnd")
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--idle", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    if not 1 <= a.slow + a.idle <= 1000 or not 1 <= a.seconds <= 120:
        sys.exit("slowloris: --slow + --idle in 1..1000 and --seconds in 1..120")
    if a.seconds < 1.8 * a.timeout + 2:
        sys.exit("slowloris: --seconds must be at least 1.8 * --timeout + 2 (the keep-alive probe)")

    srv = None
    if a.url:
        url = a.url.rstrip("/")
        if not url.startswith("http://127.0.0.1:"):
            sys.exit("slowloris: 127.0.0.1 only")
        port = int(url.rsplit(":", 1)[1])
    else:
        try:
            srv = posattnd.start(a.posattnd, ["--workers", "2", "--request-timeout", str(a.timeout)])
        except posattnd.StartError as e:
            sys.exit(f"slowloris: {e}")
        port, url = srv.port, srv.url
    rss0 = rss_kb(srv)

    body = b'{"inputs":[]}' + b" " * 4000
    head_slow = (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                 b"\r\nX-Padding: " + b"a" * 200 + b"\r\nContent-Length: 10\r\n\r\n{}")
    body_slow = (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                 b"\r\nContent-Length: %d\r\n\r\n" % len(body))
    conns = []
    t_start = time.monotonic()
    for i in range(a.slow):
        if i % 2 == 0:
            conns.append(Slow(port, head_slow, "slow-headers"))
        else:
            c = Slow(port, body_slow + body, "slow-body")
            # The headers go at once; the body trickles.
            c.s.setblocking(True)
            c.s.sendall(body_slow)
            c.s.setblocking(False)
            c.sent = len(body_slow)
            conns.append(c)
    for _ in range(a.idle):
        c = Slow(port, b"POST /v1/attention HT", "idle")
        c.s.setblocking(True)
        c.s.sendall(c.payload)
        c.s.setblocking(False)
        c.sent = len(c.payload)
        conns.append(c)

    stop = threading.Event()
    lat, failures = [], []
    th = threading.Thread(target=normal_client, args=(url, stop, lat, failures), daemon=True)
    th.start()
    ka = {}
    ka_th = threading.Thread(target=keepalive_probe, args=(port, a.timeout, ka), daemon=True)
    ka_th.start()
    next_tick = time.monotonic()
    while time.monotonic() - t_start < a.seconds:
        now = time.monotonic()
        if now >= next_tick:
            for c in conns:
                c.send_byte()
            next_tick += 1.0
        live = [c for c in conns if c.closed_at is None]
        if not live:
            time.sleep(max(0.0, min(0.1, next_tick - time.monotonic())))
            continue
        r, _, _ = select.select([c.s for c in live], [], [],
                                max(0.0, min(0.1, next_tick - time.monotonic())))
        rs = set(r)
        for c in live:
            if c.s in rs:
                c.poll_read()
    stop.set()
    th.join(10)
    ka_th.join(max(0.0, a.timeout * 2.8 + 2 - (time.monotonic() - t_start)))
    rss1 = rss_kb(srv)

    limit = a.timeout + 2.0
    ok = True
    print(f"slowloris: {a.seconds:.0f} s against {url} (request/connection timeout {a.timeout} s)")
    for kind in ("idle", "slow-headers", "slow-body"):
        cs = [c for c in conns if c.kind == kind]
        if not cs:
            continue
        closed = [c.closed_at - c.opened for c in cs if c.closed_at is not None]
        late = [c for c in cs if c.closed_at is None or c.closed_at - c.opened > limit]
        answered = sum(1 for c in cs if c.answer.startswith(b"HTTP/1.1 "))
        print(f"  {kind:12s}: {len(cs)} connections, {len(closed)} closed by the server "
              f"(median after {percentile(closed, 0.5):.1f} s, max {max(closed, default=float('nan')):.1f} s), "
              f"{answered} answered with a status line, {len(late)} still open after {limit:.0f} s")
        if late:
            ok = False
    p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
    print(f"  normal      : {len(lat)} requests, {len(failures)} failed, "
          f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {max(lat, default=0) * 1000:.1f} ms")
    if failures:
        print(f"  first failure: {failures[0]}")
    ka_after = ka.get("closed_after")
    print(f"  keep-alive  : {ka.get('answers', 0)} of 2 answered on one connection 0.8 T apart, "
          f"closed {'%.1f s' % ka_after if ka_after is not None else 'never'} after the second "
          f"answer (want {a.timeout} +- 0.7 s){' ' + ka['error'] if 'error' in ka else ''}")
    if ka.get("answers") != 2 or ka_after is None or abs(ka_after - a.timeout) > 0.7:
        ok = False
    if rss0 is not None:
        print(f"  posattnd RSS: {rss0} kB before, {rss1} kB after")
    if not lat or failures or p99 >= 1.0:
        ok = False
    for c in conns:
        if c.closed_at is None:
            c.s.close()
    if srv is not None:
        rc = srv.stop(15)
        print(f"  posattnd exit status after SIGTERM: {'killed' if srv.killed else rc}")
        if rc != 0:
            print(srv.failure())
        ok = ok and rc == 0
    print("slowloris: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def rss_kb(srv):
    if srv is None:
        return None
    with open(f"/proc/{srv.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


if __name__ == "__main__":
    sys.exit(main())
