#!/usr/bin/python3
"""soak.py - a bounded steady load for --seconds, watching posattnd's RSS (issue 5).

Starts posattnd on 127.0.0.1 (port 0), then for --seconds (default 180) keeps
a fixed rate of --rate requests/s (default 40, spread over 4 keep-alive
clients) going: POST /v1/attention with one of rope, alibi, t5, shaw or none
(JSON and base64 tensors, L=128 H=4 D=64, causal), and every tenth request
a bad one that must get its 400: malformed JSON, or a one-item batch whose
item fails (unknown scheme, bad base64: errors true, and the item's 400 as
the answer's status), so the error paths are soaked too, plus a
GET /metrics now and then. Samples VmRSS every --sample seconds.

Fails (exit 1) on any unexpected answer or transport error, on falling
behind the rate by more than 20 %, or when RSS after the warm-up (the first
quarter of the run, at least 10 s) grows beyond the margin: the largest
sample after warm-up must not exceed the first one after warm-up by more
than max(8 MB, 10 %). SIGTERM at the end must give exit status 0.
Prints the figures: requests by kind, rate, latency, RSS samples.

Standard library only; 127.0.0.1 only; bounded in time (--seconds <= 3600).
  tests/soak.py [--posattnd build/posattnd] [--seconds 180] [--rate 40]
"""
import argparse
import base64
import http.client
import json
import os
import random
import struct
import sys
import threading
import time

import posattnd

L, H, D = 128, 4, 64
SCHEMES = [{"type": "rope"}, {"type": "alibi"},
           {"type": "t5", "num_buckets": 32,
            "table": {"shape": [32, H], "data": [((i * 37) % 101) / 100 - 0.5 for i in range(32 * H)]}},
           {"type": "shaw", "max_relative_position": 16,
            "rel_k": {"shape": [33, D], "data": [((i * 53) % 97) / 97 - 0.5 for i in range(33 * D)]}},
           {"type": "none"}]
CLIENTS = 4
MARGIN_KB, MARGIN_FRAC = 8 * 1024, 0.10


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def bodies(seed):
    """(body, expected status) pairs: one per scheme and encoding, and bad ones."""
    rng = random.Random(seed)
    n = L * H * D
    vals = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(3)]
    good = []
    for scheme in SCHEMES:
        for enc in ("json", "b64"):
            def t(x):
                if enc == "b64":
                    return {"shape": [L, H, D],
                            "b64": base64.b64encode(struct.pack(f"<{n}f", *x)).decode()}
                return {"shape": [L, H, D], "data": [round(v, 4) for v in x]}
            good.append((json.dumps({"inputs": [{"scheme": scheme, "causal": True,
                                                 "q": t(vals[0]), "k": t(vals[1]),
                                                 "v": t(vals[2])}],
                                     "output_encoding": enc}).encode(), 200))
    # (body, status, whether it is a batch whose items carry the errors)
    bad = [(b'{"inputs":[{"scheme":{"type":"rope"},"q":{"shape":[2,1,2],"data":[1,2,3]}', 400, False),
           (b'{"inputs":[{"scheme":{"type":"nope"},"q":{"shape":[1,1,2],"data":[1,2]},'
            b'"k":{"shape":[1,1,2],"data":[1,2]},"v":{"shape":[1,1,2],"data":[1,2]}}]}', 400, True),
           (b'{"inputs":[{"scheme":{"type":"rope"},"q":{"shape":[1,1,2],"b64":"!!"},'
            b'"k":{"shape":[1,1,2],"data":[1,2]},"v":{"shape":[1,1,2],"data":[1,2]}}]}', 400, True)]
    return good, bad


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.lat = []

    def add(self, kind, ok, lat, what=""):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if ok:
                self.lat.append(lat)
            elif len(self.failures) < 20:
                self.failures.append(f"{kind}: {what}")


def client(idx, port, good, bad, interval, deadline, stats):
    conn = None
    rng = random.Random(idx)
    start = time.monotonic() + idx * interval / CLIENTS
    i = 0
    while True:
        due = start + i * interval
        if due >= deadline:
            break
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        i += 1
        if i % 50 == 0:
            kind, method, path, body, want = "metrics", "GET", "/metrics", None, 200
        elif i % 10 == 0:
            body, want, item_errors = rng.choice(bad)
            kind, method, path = "bad", "POST", "/v1/attention"
        else:
            body, want = good[rng.randrange(len(good))]
            kind, method, path = "attention", "POST", "/v1/attention"
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request(method, path, body, {"Content-Type": "application/json"} if body else {})
            r = conn.getresponse()
            data = r.read()
            ok = r.status == want
            if ok and kind == "attention":
                ok = json.loads(data).get("errors") is False
            elif ok and kind == "bad" and item_errors:  # every item failed: their 400
                ok = json.loads(data).get("errors") is True
            stats.add(kind, ok, time.monotonic() - t0, f"HTTP {r.status}: {data[:160]!r}")
        except (OSError, http.client.HTTPException, ValueError) as e:
            stats.add(kind, False, 0, repr(e))
            if conn is not None:
                conn.close()
            conn = None
    if conn is not None:
        conn.close()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--posattnd", default=os.environ.get("POSATTND") or
                    os.path.join(here, "..", "build", "posattnd"))
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--sample", type=float, default=3.0)
    a = ap.parse_args()
    if not 20 <= a.seconds <= 3600 or not 1 <= a.rate <= 1000 or not 0.5 <= a.sample <= 60:
        sys.exit("soak: --seconds in 20..3600, --rate in 1..1000, --sample in 0.5..60")

    good, bad = bodies(7)
    try:
        srv = posattnd.start(a.posattnd, ["--workers", "2"])
    except posattnd.StartError as e:
        sys.exit(f"soak: {e}")
    port = srv.port
    ok = True
    samples = []
    try:
        rss0 = rss_kb(srv.pid)
        stats = Stats()
        t0 = time.monotonic()
        deadline = t0 + a.seconds
        threads = [threading.Thread(target=client,
                                    args=(i, port, good, bad, CLIENTS / a.rate, deadline, stats))
                   for i in range(CLIENTS)]
        for t in threads:
            t.start()
        next_sample = t0
        while any(t.is_alive() for t in threads):
            now = time.monotonic()
            if now >= next_sample:
                samples.append((now - t0, rss_kb(srv.pid)))
                next_sample += a.sample
            time.sleep(min(0.2, max(0.0, next_sample - time.monotonic())))
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - t0
        samples.append((elapsed, rss_kb(srv.pid)))

        warm = max(10.0, a.seconds / 4)
        after = [kb for t, kb in samples if t >= warm]
        base = after[0] if after else samples[-1][1]
        peak = max(after) if after else base
        allowed = max(MARGIN_KB, int(base * MARGIN_FRAC))
        done = sum(stats.counts.values())
        rate = done / elapsed
        print(f"soak: {a.seconds:.0f} s at {a.rate:g} requests/s from {CLIENTS} keep-alive "
              f"clients (L={L} H={H} D={D}; rope, alibi, t5, shaw, none; JSON and b64)")
        print(f"  requests: {done} ({', '.join(f'{k} {v}' for k, v in sorted(stats.counts.items()))}), "
              f"{len(stats.failures)} failed, {rate:.1f}/s achieved")
        print(f"  latency: p50 {pct(stats.lat, 0.5) * 1e3:.1f} ms, p99 {pct(stats.lat, 0.99) * 1e3:.1f} ms, "
              f"max {max(stats.lat, default=0) * 1e3:.1f} ms")
        step = max(1, len(samples) // 12)
        print("  RSS kB: " + ", ".join(f"{t:.0f}s {kb}" for t, kb in samples[::step]) +
              f", end {samples[-1][1]}")
        print(f"  RSS: {rss0} kB at start, {base} kB after the {warm:.0f} s warm-up, peak after "
              f"warm-up {peak} kB (+{peak - base} kB; allowed +{allowed} kB), {samples[-1][1]} kB at the end")
        for f in stats.failures[:5]:
            print(f"  failure: {f}")
        if stats.failures or rate < 0.8 * a.rate or peak - base > allowed:
            ok = False
    finally:
        rc = srv.stop(30)
    print(f"  posattnd exit status after SIGTERM: {'killed' if srv.killed else rc}")
    if rc != 0:
        print(srv.failure())
    ok = ok and rc == 0
    print("soak: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
