#!/usr/bin/python3
"""soak_sessions.py - a bounded sessions soak (issue 33), meant for a posattnd
built with AddressSanitizer + UBSan (make soak-sessions-asan) or
ThreadSanitizer (make soak-sessions-tsan); it runs on a plain build too.

Starts posattnd on 127.0.0.1 (port 0) with 2 workers, a cache too small for
the load (--cache-mb, default 2), --session-ttl 3, --cache-snapshot-s 1 and
--cache-dir in a temporary folder, the sanitizer's reports sent to files of
their own (log_path). For --seconds (default 30) it keeps, side by side:

- posattn-load --sessions runs against it, one after another, rotating
  through shapes: StreamingLLM windows (with and without reposition)
  forking a shared prefix (--fork-share), eviction none, several schemes at
  once; their sessions outgrow the pool, so the server drops idle sessions
  for room (posattn_cache_evictions_total{reason="pool_full"}) and refuses
  appends it cannot fit (CACHE_FULL);
- a client of its own that creates sessions, appends to them, forks them
  (and the load tool's, while those append), reads them through
  /v1/attention, lists them, deletes them (and now and then one of the load
  tool's), and scrapes /metrics, so that forks, deletes, readers, the TTL
  sweep and the snapshot thread race with the appends.

Then SIGTERM: the drain writes every session left to --cache-dir, and the
server must exit 0 (ASan's leak check runs at that exit). posattnd is then
started again on the same folder, must load what was saved (as many
sessions as files), answer a step over one of them, and stop cleanly.

Fails (exit 1) when a sanitizer wrote a report (any file under log_path, or
a report line on stderr), when posattnd crashed or exited non-zero, when a
load run failed other than by the codes this load provokes on purpose
(CACHE_FULL, SESSION_FULL; SESSION_NOT_FOUND for sessions the server
dropped for room or age or this soak deleted; SESSION_BUSY for an append
that met this soak's delete), or exited other than 0 or 3, when this soak's
own requests got an answer other than those, when the pool never filled
(no CACHE_FULL and no pool_full eviction), or when the restart did not
load the saved sessions. Prints the figures: load runs, steps, codes,
evictions, snapshots, wall-clock time.

Standard library only; 127.0.0.1 only; bounded in time (--seconds <= 3600).
  tests/soak_sessions.py --posattnd build-asan/posattnd --load build/posattn-load \\
      --sanitizer asan [--seconds 30] [--cache-mb 4]
"""
import argparse
import base64
import glob
import http.client
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

import posattnd

HKV, D = 2, 32  # the soak's own sessions
# The codes the load provokes on purpose (see the docstring).
EXPECTED = {"CACHE_FULL", "SESSION_FULL", "SESSION_NOT_FOUND", "SESSION_BUSY"}
SAN_REPORT = re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer|WARNING: ThreadSanitizer|"
                        r"runtime error:|SUMMARY: (Address|Undefined|Thread|Leak)")

# posattn-load runs, in turn: (flags, ...); every one uses the soak's server.
LOAD_RUNS = [
    ["--sessions", "24", "--prompt", "96", "--steps", "24", "--eviction", "window:64:4",
     "--fork-share", "0.5", "--schemes", "rope,alibi"],
    # A prompt past the whole budget (set in main): CACHE_FULL whatever is
    # dropped. Second, so that even a slow (TSan) run reaches it.
    ["--sessions", "2", "--prompt", "BIG", "--steps", "2", "--schemes", "none"],
    ["--sessions", "16", "--prompt", "64", "--steps", "32", "--eviction", "window:48:2:reposition",
     "--fork-share", "0.25", "--schemes", "rope"],
    ["--sessions", "48", "--prompt", "256", "--steps", "16", "--schemes", "none,t5"],
    ["--sessions", "8", "--prompt", "200", "--steps", "40", "--eviction", "window:32:4:reposition",
     "--fork-share", "1", "--schemes", "alibi"],
    ["--sessions", "6", "--prompt", "1536", "--steps", "8", "--schemes", "rope"],
]
TOKEN_BYTES = 2 * 2 * 32 * 4  # k and v of a token at LOAD_COMMON's shape
LOAD_COMMON = ["--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--encoding", "b64",
               "--prefill-concurrency", "8", "--quiet"]


def san_env(sanitizer, logdir):
    """The environment posattnd runs in: its sanitizer's options, reports to
    files under logdir."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    log = os.path.join(logdir, "report")
    if sanitizer == "asan":
        env["ASAN_OPTIONS"] = "detect_leaks=1:log_path=%s:abort_on_error=0" % log
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:log_path=%s" % log
    elif sanitizer == "tsan":
        # Every report, not only the first; exit status 66 when there was one.
        env["TSAN_OPTIONS"] = "halt_on_error=0:second_deadlock_stack=1:exitcode=66:log_path=%s" % log
    return env


def san_reports(logdir, stderr_text):
    """The sanitizer reports: (file name, its first lines) for every report
    file, and the report lines found on stderr."""
    out = []
    for path in sorted(glob.glob(os.path.join(logdir, "report*"))):
        with open(path, errors="replace") as f:
            text = f.read()
        if text.strip():
            # The first report whole, then every distinct summary line.
            first = text.split("\n==================\n==================\n")[0]
            sums = sorted(set(re.findall(r"^SUMMARY: .*$", text, re.M)))
            out.append((os.path.basename(path), "\n".join(first.splitlines()[:60]) +
                        "\n  every distinct summary (%d):\n  " % len(sums) + "\n  ".join(sums)))
    hits = [line for line in (stderr_text or "").splitlines() if SAN_REPORT.search(line)]
    if hits:
        out.append(("stderr", "\n".join(hits[:20])))
    return out


class Client:
    """One keep-alive connection; request() gives (status, parsed body)."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def request(self, method, path, obj=None):
        body = None if obj is None else json.dumps(obj).encode()
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                self.conn.request(method, path, body=body,
                                  headers={"Content-Type": "application/json"} if body else {})
                r = self.conn.getresponse()
                data = r.read()
                try:
                    parsed = json.loads(data) if data and data[:1] in b"{[" else data
                except ValueError:
                    parsed = data
                return r.status, parsed
            except (http.client.HTTPException, ConnectionError, OSError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def code_of(status, body):
    """An answer's error code: the request's, else its first item's."""
    if isinstance(body, dict):
        e = body.get("error")
        if e is None and body.get("outputs"):
            e = body["outputs"][0].get("error")
        if isinstance(e, dict):
            return e.get("code", str(status))
    return str(status)


def b64(rng, shape):
    n = 1
    for s in shape:
        n *= s
    return {"shape": list(shape),
            "b64": base64.b64encode(struct.pack("<%df" % n, *(rng.uniform(-1, 1)
                                                             for _ in range(n)))).decode()}


class Chaos(threading.Thread):
    """The soak's own client: creates, appends, forks, reads, lists and
    deletes sessions (and forks and deletes the load tool's) until stop."""

    def __init__(self, port, seed, stop):
        super().__init__(daemon=True)
        self.c = Client(port)
        self.rng = random.Random(seed)
        self.stop = stop
        self.mine = []
        self.counts = {}
        self.unexpected = []
        self.toks = [(b64(self.rng, (4, HKV, D)), b64(self.rng, (4, HKV, D))) for _ in range(4)]
        self.q = b64(self.rng, (1, 4, D))

    def note(self, what, status, body, ok_codes):
        failed = not 200 <= status < 300 or (isinstance(body, dict) and body.get("errors") is True)
        code = code_of(status, body) if failed else "ok"
        self.counts[(what, code)] = self.counts.get((what, code), 0) + 1
        if code != "ok" and code not in ok_codes and len(self.unexpected) < 20:
            self.unexpected.append("%s: %d %s" % (what, status, str(body)[:300]))
        return code == "ok"

    def run(self):
        try:
            while not self.stop.is_set():
                self.one()
        except Exception as e:  # a transport failure: the server is gone
            self.unexpected.append("transport: %r" % e)

    def one(self):
        r = self.rng.random()
        c = self.c
        if r < 0.12 or not self.mine:
            scheme = self.rng.choice([{"type": "rope"}, {"type": "alibi"}, {"type": "none"}])
            ev = self.rng.choice([{"type": "none"},
                                  {"type": "window", "window": 32, "sinks": 2},
                                  {"type": "window", "window": 24, "sinks": 1,
                                   "reposition": True}])
            spec = {"scheme": scheme, "num_kv_heads": HKV, "head_dim": D, "eviction": ev}
            if ev["type"] == "none":
                spec["max_tokens"] = 64
            st, b = c.request("POST", "/v1/sessions", spec)
            if self.note("create", st, b, EXPECTED) and isinstance(b, dict):
                self.mine.append(b["id"])
        elif r < 0.45:
            sid = self.rng.choice(self.mine)
            k, v = self.rng.choice(self.toks)
            if self.rng.random() < 0.5:
                st, b = c.request("POST", "/v1/sessions/%s/append" % sid, {"k": k, "v": v})
                self.note("append", st, b, EXPECTED)
            else:
                st, b = c.request("POST", "/v1/attention", {"inputs": [
                    {"session": sid, "causal": True, "q": self.q, "append": {"k": k, "v": v}}],
                    "output_encoding": "b64"})
                self.note("step", st, b, EXPECTED)
        elif r < 0.60:
            sid = self.rng.choice(self.mine)
            st, b = c.request("POST", "/v1/sessions/%s/fork" % sid, {})
            if self.note("fork", st, b, EXPECTED) and isinstance(b, dict):
                self.mine.append(b["id"])
        elif r < 0.75:
            sid = self.mine.pop(self.rng.randrange(len(self.mine)))
            st, b = c.request("DELETE", "/v1/sessions/" + sid)
            ok = self.note("delete", st, b, EXPECTED)
            if not ok and code_of(st, b) == "SESSION_BUSY":
                self.mine.append(sid)
        elif r < 0.92:
            # The load tool's sessions: fork one (it may be appending), and
            # now and then delete one.
            st, b = c.request("GET", "/v1/sessions?offset=%d&limit=20" % self.rng.randrange(50))
            if not self.note("list", st, b, ()) or not isinstance(b, dict):
                return
            theirs = [s["id"] for s in b.get("sessions", []) if s["id"] not in self.mine]
            if not theirs:
                return
            sid = self.rng.choice(theirs)
            if self.rng.random() < 0.8:
                st, b = c.request("POST", "/v1/sessions/%s/fork" % sid, {})
                if self.note("fork theirs", st, b, EXPECTED) and isinstance(b, dict):
                    self.mine.append(b["id"])
            else:
                st, b = c.request("DELETE", "/v1/sessions/" + sid)
                self.note("delete theirs", st, b, EXPECTED)
        else:
            st, b = c.request("GET", "/metrics")
            self.note("metrics", st, {}, ())
        if len(self.mine) > 40:  # keep the soak's own sessions few
            sid = self.mine.pop(0)
            st, b = c.request("DELETE", "/v1/sessions/" + sid)
            self.note("delete", st, b, EXPECTED)


def metric(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--posattnd", default="build/posattnd")
    ap.add_argument("--load", default="build/posattn-load")
    ap.add_argument("--sanitizer", choices=("asan", "tsan", "none"), default="none")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--cache-mb", type=int, default=2)
    ap.add_argument("--seed", type=int, default=33)
    a = ap.parse_args()
    if not 1 <= a.seconds <= 3600:
        ap.error("--seconds: 1..3600")
    t_start = time.monotonic()
    work = tempfile.mkdtemp(prefix="soak-sessions-")
    cache_dir, logdir = os.path.join(work, "cache"), os.path.join(work, "san")
    os.makedirs(cache_dir)
    os.makedirs(logdir)
    env = san_env(a.sanitizer, logdir)
    failures = []
    srv_args = ["--workers", "2", "--cache-mb", str(a.cache_mb), "--session-ttl", "3",
                "--cache-snapshot-s", "1", "--cache-dir", cache_dir, "--request-timeout", "120",
                "--drain-timeout", "120"]
    try:
        srv = posattnd.start(a.posattnd, srv_args, env=env, timeout=120)
    except posattnd.StartError as e:
        print("soak_sessions: posattnd did not start: %s" % e, file=sys.stderr)
        return 1
    stop = threading.Event()
    chaos = Chaos(srv.port, a.seed, stop)
    chaos.start()
    runs, codes, steps_ok, steps_failed, load_rcs = 0, {}, 0, 0, {}
    deadline = time.monotonic() + a.seconds
    try:
        while time.monotonic() < deadline and srv.proc.poll() is None:
            flags = [str(a.cache_mb * 2**20 // TOKEN_BYTES + 64) if f == "BIG" else f
                     for f in LOAD_RUNS[runs % len(LOAD_RUNS)]]
            report = os.path.join(work, "load.json")
            try:
                p = subprocess.run([a.load, "--url", srv.url] + flags + LOAD_COMMON +
                                   ["--json", report], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True,
                                   timeout=max(60, a.seconds * 4))
            except subprocess.TimeoutExpired:
                failures.append("posattn-load %s did not finish in time" % " ".join(flags))
                break
            runs += 1
            load_rcs[p.returncode] = load_rcs.get(p.returncode, 0) + 1
            if p.returncode not in (0, 3):
                failures.append("posattn-load %s exited %d: %s" % (" ".join(flags), p.returncode,
                                                                   p.stderr[-500:]))
                break
            with open(report) as f:
                rep = json.load(f)
            for res in rep["results"]:
                steps_ok += res["steps_ok"]
                steps_failed += res["steps_failed"]
                for k, n in res["errors_by_code"].items():
                    codes[k] = codes.get(k, 0) + n
                    if k not in EXPECTED:
                        failures.append("posattn-load %s [%s]: %d x %s (%s)" % (
                            " ".join(flags), res["scheme"], n, k,
                            res["error_samples"].get(k, "")))
        stop.set()
        chaos.join(180)
        c = Client(srv.port)
        st, body = c.request("GET", "/metrics")
        text = body.decode() if isinstance(body, bytes) else str(body)
        # Every session deleted, the cache must be empty: no block or byte
        # of the budget left behind by the races above.
        while srv.proc.poll() is None:
            st, b = c.request("GET", "/v1/sessions?limit=1000")
            if st != 200 or not b["sessions"]:
                break
            for x in b["sessions"]:
                c.request("DELETE", "/v1/sessions/" + x["id"])
        st, b = c.request("GET", "/v1/sessions?limit=1")
        empty = b.get("cache") if isinstance(b, dict) else b
        if not isinstance(empty, dict) or (empty["sessions"], empty["bytes"],
                                           empty["blocks_used"]) != (0, 0, 0):
            failures.append("the cache after deleting every session: %s (want no sessions, "
                            "bytes or blocks)" % empty)
        # A few sessions for the drain to save (one forked, sharing blocks).
        rng = random.Random(a.seed)
        for i, scheme in enumerate(("rope", "alibi", "none")):
            st, b = c.request("POST", "/v1/sessions", {"scheme": {"type": scheme},
                                                       "num_kv_heads": HKV, "head_dim": D,
                                                       "max_tokens": 256})
            if st != 201:
                failures.append("create after the soak: %d %s" % (st, str(b)[:300]))
                continue
            st, b2 = c.request("POST", "/v1/sessions/%s/append" % b["id"],
                               {"k": b64(rng, (20 + i, HKV, D)), "v": b64(rng, (20 + i, HKV, D))})
            if st != 200:
                failures.append("append after the soak: %d %s" % (st, str(b2)[:300]))
            st, b2 = c.request("POST", "/v1/sessions/%s/fork" % b["id"], {})
            if st != 201:
                failures.append("fork after the soak: %d %s" % (st, str(b2)[:300]))
    finally:
        stop.set()
        t_drain = time.monotonic()
        rc = srv.stop(180)
        drain_s = time.monotonic() - t_drain
    evicted_full = metric(text, 'posattn_cache_evictions_total{reason="pool_full"}')
    evicted_ttl = metric(text, 'posattn_cache_evictions_total{reason="ttl"}')
    cache_full = codes.get("CACHE_FULL", 0) + sum(
        n for (what, code), n in chaos.counts.items() if code == "CACHE_FULL")
    if rc != 0:
        failures.append(srv.failure())
    failures += ["soak client: " + u for u in chaos.unexpected]
    if chaos.is_alive():
        failures.append("the soak's own client did not stop")
    if cache_full == 0 and evicted_full == 0:
        failures.append("the pool never filled (no CACHE_FULL, no pool_full eviction): "
                        "lower --cache-mb")
    saved = sorted(glob.glob(os.path.join(cache_dir, "*.safetensors")))
    leftovers = [f for f in os.listdir(cache_dir) if not f.endswith(".safetensors")]
    if leftovers:
        failures.append("temporary files left in --cache-dir after the drain: %s" % leftovers[:5])
    reports = san_reports(logdir, srv.stderr)

    # Again on the same folder: what the drain saved comes back.
    loaded = None
    if rc == 0 and not reports:
        try:
            srv2 = posattnd.start(a.posattnd, ["--workers", "2", "--cache-mb", str(a.cache_mb),
                                               "--session-ttl", "0", "--cache-dir", cache_dir],
                                  env=env, timeout=120)
        except posattnd.StartError as e:
            failures.append("the restart on the saved sessions: %s" % e)
            srv2 = None
        if srv2 is not None:
            try:
                c = Client(srv2.port)
                st, b = c.request("GET", "/v1/sessions?limit=1")
                loaded = b["total"] if st == 200 else None
                if loaded != len(saved):
                    failures.append("the restart loaded %s sessions of the %d saved" % (
                        loaded, len(saved)))
                for path in saved:  # a step over the first that holds tokens
                    sid = os.path.basename(path)[:-len(".safetensors")]
                    st, b = c.request("GET", "/v1/sessions/" + sid)
                    if st == 200 and b["length"] == 0:
                        continue
                    if st == 200:
                        st, b = c.request("POST", "/v1/attention", {"inputs": [
                            {"session": sid, "causal": True,
                             "q": b64(random.Random(1), (1, 2 * b["num_kv_heads"],
                                                         b["head_dim"]))}]})
                        if st != 200:
                            failures.append("a step over a reloaded session: %d %s" % (
                                st, str(b)[:300]))
                    else:
                        failures.append("a saved session %s: %d %s" % (sid, st, str(b)[:300]))
                    break
            finally:
                if srv2.stop(180) != 0:
                    failures.append("after the restart: " + srv2.failure())
                reports += san_reports(logdir, srv2.stderr)

    wall = time.monotonic() - t_start
    print("soak_sessions (%s): %.1f s wall-clock (load %.0f s, drain %.1f s), --cache-mb %d" % (
        a.sanitizer, wall, a.seconds, drain_s, a.cache_mb))
    print("  posattn-load runs %d (exit statuses %s): steps ok %d, failed %d; codes %s" % (
        runs, load_rcs, steps_ok, steps_failed, json.dumps(codes, sort_keys=True)))
    own = {}
    for (what, code), n in chaos.counts.items():
        own.setdefault(what, {})[code] = n
    print("  soak client: %s" % json.dumps(own, sort_keys=True))
    print("  server: evictions pool_full %d, ttl %d; tokens appended %d; CACHE_FULL answers %d"
          % (evicted_full, evicted_ttl, metric(text, "posattn_session_tokens_appended_total"),
             cache_full))
    print("  drain saved %d sessions; the restart loaded %s" % (len(saved), loaded))
    for name, text in reports:
        failures.append("sanitizer report (%s):\n%s" % (name, text))
    shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("soak_sessions: FAILED", file=sys.stderr)
        for f in failures:
            print("  " + str(f), file=sys.stderr)
        return 1
    print("soak_sessions: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
