#!/usr/bin/env python3
"""load.py - a bounded load of POST /v1/attention requests, for the deploy tests.

    load.py URL --requests N --concurrency C [--at FRACTION COMMAND]... [--json FILE]

Sends exactly N requests from C threads (each with its own keep-alive
connection) and checks every answer: HTTP 200, the README's RoPE example
exactly ([1, 2, 2, 3]) and a larger causal item equal to the first answer
(all replicas run the same binary, so they must agree). `--at 0.3 'kill -KILL
1234'` runs a shell command once 30% of the requests have been answered,
without pausing the load; its exit status must be 0. Stops by itself: every
request has a 30 s timeout and the whole run --timeout seconds (default 120).

Prints one summary line; exit status 0 only when every request succeeded and
every --at command exited 0. Standard library only.
"""
import argparse
import base64
import http.client
import json
import math
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

README_ITEM = {
    "id": "readme",
    "scheme": {"type": "rope", "base": 10000},
    "causal": True,
    "q": {"shape": [2, 1, 2], "data": [[[1, 0]], [[0, 0]]]},
    "k": {"shape": [2, 1, 2], "data": [1, 0, 0, 1]},
    "v": {"shape": [2, 1, 2], "data": [1, 2, 3, 4]},
}
README_OUTPUT = [1.0, 2.0, 2.0, 3.0]


def b64_floats(values):
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def floats_b64(text):
    raw = base64.b64decode(text)
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def body(L=128, H=4, D=64):
    """Two items: the README's example and a causal RoPE item [L, H, D]."""
    n = L * H * D
    tensors = {
        name: {"shape": [L, H, D], "b64": b64_floats([math.sin(seed * (i + 1)) for i in range(n)])}
        for name, seed in (("q", 0.37), ("k", 0.71), ("v", 1.13))
    }
    big = {"id": "big", "scheme": {"type": "rope"}, "causal": True, **tensors}
    readme = dict(README_ITEM)
    return json.dumps({"output_encoding": "b64", "inputs": [readme, big]}).encode()


class Run:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.next = 0
        self.done = 0
        self.ok = 0
        self.failures = {}  # reason -> count
        self.examples = []
        self.reference = None
        self.events = [(f, cmd) for f, cmd in args.at]
        self.fired = []  # (fraction, cmd, Popen, watcher thread)
        self.deadline = time.monotonic() + args.timeout
        self.latencies = []
        self.ended_at = {}  # --at command -> answers received when it ended

    def fail(self, reason, detail):
        with self.lock:
            self.failures[reason] = self.failures.get(reason, 0) + 1
            if len(self.examples) < 5:
                self.examples.append(f"{reason}: {detail}"[:300])

    def check(self, status, data):
        if status != 200:
            return f"HTTP {status}", data[:200]
        try:
            ans = json.loads(data)
            outs = {o["id"]: o for o in ans["outputs"]}
            readme = list(floats_b64(outs["readme"]["output"]["b64"]))
            big = outs["big"]["output"]["b64"]
        except (ValueError, KeyError, TypeError) as e:
            return "bad answer", f"{e!r}: {data[:200]!r}"
        if ans.get("errors") is not False:
            return "item error", data[:200]
        if any(abs(a - b) > 1e-6 for a, b in zip(readme, README_OUTPUT)) or len(readme) != 4:
            return "wrong readme output", readme
        with self.lock:
            if self.reference is None:
                self.reference = big
        ref = self.reference
        if big != ref:  # the same bytes almost always; else compare the values
            a, b = floats_b64(big), floats_b64(ref)
            if len(a) != len(b) or any(abs(x - y) > 1e-5 * (1 + abs(y)) for x, y in zip(a, b)):
                return "answers differ between requests", "big item output"
        return None, None

    def after_answer(self):
        with self.lock:
            self.done += 1
            due = [e for e in self.events if self.done >= e[0] * self.args.requests]
            for e in due:
                self.events.remove(e)
        for fraction, cmd in due:
            print(f"load: {self.done}/{self.args.requests} answered, running: {cmd}", file=sys.stderr)
            proc = subprocess.Popen(["bash", "-c", cmd])
            watcher = threading.Thread(target=self.watch, args=(cmd, proc), daemon=True)
            watcher.start()
            self.fired.append((fraction, cmd, proc, watcher))

    def watch(self, cmd, proc):
        """Records how many answers had arrived when an --at command ended."""
        proc.wait()
        with self.lock:
            self.ended_at[cmd] = self.done

    def worker(self, payload):
        u = urllib.parse.urlsplit(self.args.url)
        conn = None
        while True:
            with self.lock:
                if self.next >= self.args.requests:
                    break
                self.next += 1
            if time.monotonic() > self.deadline:
                self.fail("run timeout", f"--timeout {self.args.timeout} s")
                self.after_answer()
                continue
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
                conn.request("POST", "/v1/attention", body=payload,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                reason, detail = self.check(resp.status, data)
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                reason, detail = f"connection: {type(e).__name__}", str(e)
                if conn is not None:
                    conn.close()
                conn = None
            if reason is None:
                with self.lock:
                    self.ok += 1
                    self.latencies.append(time.monotonic() - t0)
            else:
                self.fail(reason, detail)
            self.after_answer()
        if conn is not None:
            conn.close()


def heavy_body(path, L, H, D):
    """One causal item in layer mode: x [L, 64] and projections to H heads of
    D, so the body is small (parsed in milliseconds) but the work is the
    attention of [L, H, D]: a request that keeps a worker busy."""
    d_model = 64
    block = struct.pack("<8f", 0.5, -0.25, 0.125, 1.0, -0.75, 0.0625, 0.3, -0.9)

    def tensor(shape):
        n = 1
        for x in shape:
            n *= x
        return {"shape": shape, "b64": base64.b64encode((block * (n // 8 + 1))[: 4 * n]).decode()}

    w = tensor([d_model, H * D])
    item = {"id": "heavy", "scheme": {"type": "rope"}, "causal": True, "num_heads": H,
            "num_kv_heads": H, "x": tensor([L, d_model]), "w_q": w, "w_k": w, "w_v": w}
    with open(path, "w") as f:
        json.dump({"output_encoding": "b64", "inputs": [item]}, f)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--heavy-body":
        L, H, D = (int(x) for x in sys.argv[3].split(","))
        heavy_body(sys.argv[2], L, H, D)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="load.py --heavy-body FILE L,H,D writes one large request body and exits.")
    p.add_argument("url")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=6)
    p.add_argument("--at", nargs=2, action="append", default=[], metavar=("FRACTION", "COMMAND"),
                   type=str)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--json", help="write the summary here as JSON")
    args = p.parse_args()
    args.at = [(float(f), cmd) for f, cmd in args.at]

    run = Run(args)
    payload = body()
    t0 = time.monotonic()
    threads = [threading.Thread(target=run.worker, args=(payload,)) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    events = []
    for fraction, cmd, proc, watcher in run.fired:
        watcher.join(timeout=max(1.0, run.deadline - time.monotonic()))
        if watcher.is_alive():
            proc.kill()
            watcher.join()
            rc = "timeout"
        else:
            rc = proc.returncode
        ended = run.ended_at.get(cmd)
        events.append({"at": fraction, "command": cmd, "rc": rc, "ended_after_answers": ended})
        print(f"load: '{cmd}' ended after {ended} answers, status {rc}", file=sys.stderr)
    unfired = [{"at": f, "command": c, "rc": "never ran"} for f, c in run.events]
    lat = sorted(run.latencies)
    summary = {
        "requests": args.requests, "ok": run.ok, "failed": args.requests - run.ok,
        "failures": run.failures, "examples": run.examples, "events": events + unfired,
        "seconds": round(elapsed, 3),
        "p50_ms": round(1e3 * lat[len(lat) // 2], 2) if lat else None,
        "p99_ms": round(1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2) if lat else None,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(f"load: {run.ok}/{args.requests} ok in {elapsed:.2f} s "
          f"(p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms)"
          + (f"; failures {run.failures}" if run.failures else ""), file=sys.stderr)
    for e in run.examples:
        print(f"load:   e.g. {e}", file=sys.stderr)
    bad_events = [e for e in summary["events"] if e["rc"] != 0]
    for e in bad_events:
        print(f"load: command at {e['at']} exited {e['rc']}: {e['command']}", file=sys.stderr)
    return 0 if run.ok == args.requests and not bad_events else 1


if __name__ == "__main__":
    sys.exit(main())
