#!/usr/bin/python3
"""overload.py - a burst at many times capacity (issue 5).

Starts posattnd on 127.0.0.1 (port 0) with a small pool and queue
(--workers 2 --queue-depth 4) and a memory cap (--max-request-mb 16,
--max-body-mb 2), then fires --requests (default 240) POST /v1/attention
from --concurrency (default 48) client threads at once: 8 times what the
server holds (2 computing + 4 waiting). Each request is one causal item,
L=512 tokens, H=2, D=32, base64 in and out, one of three seeded inputs.

Checks, and exits 1 unless all hold:
  * every answer is 200 or 503; each 503 is OVERLOADED with Retry-After, and
    refusals are quick (p99 under 1 s from the first byte sent);
  * some were refused and some accepted (the burst really overloaded it);
  * every 200 is correct: each of the three inputs recomputed in double
    precision with NumPy (max |error| < 1e-4), and every answer to the same
    input bit-identical;
  * posattnd's peak RSS (VmHWM) stays under the stated bound: RSS before +
    (workers + queue depth) x --max-request-mb + concurrency x 2 x body size
    (a connection's body and its parsed copy) + 64 MB (threads, allocator);
  * nothing is left in flight afterwards (posattn_in_flight and
    posattn_queue_depth 0) and SIGTERM ends it with status 0.
Prints the figures: sent, accepted, completed, refused, refusal latency,
RSS before / peak / after.

SIGTERM *during* load (accepted requests complete, new ones get 503
DRAINING, exit 0) is tests/e2e/test_e2e_drain.c: test_drain_under_load.

Standard library and NumPy; 127.0.0.1 only; bounded in count and time.
  tests/overload.py [--posattnd build/posattnd] [--requests 240] [--concurrency 48]
"""
import argparse
import base64
import http.client
import json
import os
import sys
import threading
import time

import numpy as np

import posattnd

WORKERS, QUEUE, REQUEST_MB, BODY_MB = 2, 4, 16, 2
L, H, D = 512, 2, 32


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def make_input(seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.uniform(-1, 1, (L, H, D)).astype(np.float32) for _ in range(3))
    enc = lambda a: {"shape": [L, H, D], "b64": base64.b64encode(a.astype("<f4").tobytes()).decode()}
    body = json.dumps({"inputs": [{"scheme": {"type": "none"}, "causal": True,
                                   "q": enc(q), "k": enc(k), "v": enc(v)}],
                       "output_encoding": "b64"}).encode()
    return body, (q, k, v)


def reference(q, k, v):
    """Causal softmax(q k^T / sqrt(D)) v per head, in double precision."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    out = np.empty((L, H, D))
    mask = np.triu(np.ones((L, L), bool), 1)
    for h in range(H):
        s = q[:, h, :] @ k[:, h, :].T / np.sqrt(D)
        s[mask] = -np.inf
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h, :] = p @ v[:, h, :]
    return out


def worker(port, bodies, jobs, results, go):
    conn = None
    go.wait()
    while True:
        try:
            i = jobs.pop()
        except IndexError:
            break
        which = i % len(bodies)
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/attention", bodies[which],
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            results.append((which, r.status, r.getheader("Retry-After"), data,
                            time.monotonic() - t0))
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            results.append((which, -1, None, repr(e).encode(), time.monotonic() - t0))
            if conn is not None:
                conn.close()
            conn = None
    if conn is not None:
        conn.close()


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--posattnd", default=os.environ.get("POSATTND") or
                    os.path.join(here, "..", "build", "posattnd"))
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--concurrency", type=int, default=48)
    a = ap.parse_args()
    if not 1 <= a.requests <= 5000 or not 1 <= a.concurrency <= 256:
        sys.exit("overload: --requests in 1..5000, --concurrency in 1..256")

    inputs = [make_input(seed) for seed in (1, 2, 3)]
    bodies = [b for b, _ in inputs]
    try:
        srv = posattnd.start(a.posattnd, ["--workers", str(WORKERS), "--queue-depth", str(QUEUE),
                                          "--max-request-mb", str(REQUEST_MB),
                                          "--max-body-mb", str(BODY_MB)])
    except posattnd.StartError as e:
        sys.exit(f"overload: {e}")
    port = srv.port
    ok = True
    try:
        # One request of each input first, so "before" includes the workers'
        # workspaces and the allocator's steady state.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for b in bodies:
            c.request("POST", "/v1/attention", b, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            if r.status != 200:
                sys.exit(f"overload: warm-up request answered {r.status}")
        c.close()
        rss_before = status_kb(srv.pid, "VmRSS")

        jobs = list(range(a.requests))
        results, go = [], threading.Event()
        threads = [threading.Thread(target=worker, args=(port, bodies, jobs, results, go))
                   for _ in range(a.concurrency)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        go.set()
        for t in threads:
            t.join(120)
        wall = time.monotonic() - t0
        time.sleep(0.2)
        in_flight = metric(port, "posattn_in_flight")
        queue_depth = metric(port, "posattn_queue_depth")
        rss_peak = status_kb(srv.pid, "VmHWM")
        rss_after = status_kb(srv.pid, "VmRSS")

        refs = [reference(*x) for _, x in inputs]
        accepted = [r for r in results if r[1] == 200]
        refused = [r for r in results if r[1] == 503]
        other = [r for r in results if r[1] not in (200, 503)]
        completed, wrong, first_b64 = 0, [], {}
        worst = 0.0
        for which, _, _, data, _ in accepted:
            out = json.loads(data)["outputs"][0]
            if "output" not in out:
                wrong.append(f"input {which}: {json.dumps(out)[:200]}")
                continue
            b64 = out["output"]["b64"]
            if first_b64.setdefault(which, b64) != b64:
                wrong.append(f"input {which}: answer differs from the first answer to it")
                continue
            got = np.frombuffer(base64.b64decode(b64), "<f4").reshape(L, H, D)
            err = float(np.max(np.abs(got - refs[which])))
            worst = max(worst, err)
            if err >= 1e-4:
                wrong.append(f"input {which}: max |error| {err:.3g} vs NumPy")
                continue
            completed += 1
        bad_refusals = [r for r in refused
                        if r[2] is None or b'"OVERLOADED"' not in r[3]]
        refuse_lat = [r[4] for r in refused]
        bound_kb = rss_before + 1024 * ((WORKERS + QUEUE) * REQUEST_MB + 64) + \
            a.concurrency * 2 * max(len(b) for b in bodies) // 1024

        print(f"overload: {a.requests} requests from {a.concurrency} clients at once against "
              f"--workers {WORKERS} --queue-depth {QUEUE} --max-request-mb {REQUEST_MB} "
              f"(body {len(bodies[0]) // 1024} kB, L={L} H={H} D={D}), {wall:.1f} s")
        print(f"  sent {len(results)}, accepted {len(accepted)}, completed correctly {completed} "
              f"(worst |error| vs NumPy {worst:.2g}), refused {len(refused)} (503), other {len(other)}")
        print(f"  refusals: p50 {pct(refuse_lat, 0.5) * 1e3:.1f} ms, p99 "
              f"{pct(refuse_lat, 0.99) * 1e3:.1f} ms, max {max(refuse_lat, default=0) * 1e3:.1f} ms; "
              f"{len(bad_refusals)} without Retry-After or OVERLOADED")
        acc_lat = [r[4] for r in accepted]
        print(f"  accepted: p50 {pct(acc_lat, 0.5) * 1e3:.1f} ms, p99 {pct(acc_lat, 0.99) * 1e3:.1f} ms")
        print(f"  RSS: before {rss_before} kB, peak (VmHWM) {rss_peak} kB, after {rss_after} kB; "
              f"bound {bound_kb} kB")
        print(f"  afterwards: in flight {in_flight:g}, queue depth {queue_depth:g}")
        for w in wrong[:3]:
            print(f"  wrong: {w}")
        for r in other[:3]:
            print(f"  other: HTTP {r[1]}: {r[3][:200]!r}")
        if (len(results) != a.requests or other or wrong or bad_refusals or not refused or
                not accepted or completed != len(accepted) or pct(refuse_lat, 0.99) >= 1.0 or
                rss_peak > bound_kb or in_flight != 0 or queue_depth != 0):
            ok = False
    finally:
        rc = srv.stop(20)
    print(f"  posattnd exit status after SIGTERM: {'killed' if srv.killed else rc}")
    if rc != 0:
        print(srv.failure())
    ok = ok and rc == 0
    print("overload: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
