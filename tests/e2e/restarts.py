#!/usr/bin/python3
"""restarts.py - sessions survive a restart (--cache-dir, docs/sessions.md), over HTTP.

Starts posattnd (tests/posattnd.py) with --cache-dir on a temporary folder
and a control posattnd without one. The same requests go to both: sessions
of several schemes and eviction modes (none, a window with and without
reposition, rope with re-rotated sinks, a t5 table, a client-chosen id) and
a fork, with appends. The first is stopped with SIGTERM (it saves every
session on drain) and started again on the folder: every session is back
with the same figures (GET: length, appended, positions, evicted, ...), and
appends then go on exactly as on the control, which was never restarted. A
delete removes the session's file. Also: a truncated and a corrupt file in
the folder are reported on stderr (one line each, JSON with --log-format
json), skipped and left in place, and the server starts and serves; with
--cache-snapshot-s 1, sessions appended more than a second before a kill -9
come back. The binary is $POSATTND (default build/posattnd). Part of make
test's e2e-clients.
"""
import json
import os
import random
import shutil
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import posattnd  # noqa: E402

BIN = os.environ.get("POSATTND", "build/posattnd")
SUFFIX = ".safetensors"


def call(srv, method, path, body=None):
    """(status, JSON answer or None)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(srv.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text, st = r.read(), r.status
    except urllib.error.HTTPError as e:
        text, st = e.read(), e.code
    return st, (json.loads(text) if text else None)


def ok(srv, method, path, body=None, want=200):
    st, obj = call(srv, method, path, body)
    assert st == want, (method, path, st, obj)
    return obj


def figures(s):
    """A session's answer without what depends on the clock, or on whether
    its blocks are shared with a fork: a fork comes back from its file as a
    copy (docs/sessions.md, Restarts)."""
    return {k: v for k, v in s.items() if k not in ("idle_s", "shared_blocks")}


HKV, D = 2, 4

SPECS = [
    ("none", {"scheme": {"type": "rope", "base": 10000}, "num_kv_heads": HKV, "head_dim": D,
              "max_tokens": 64}),
    ("alibi_repos", {"scheme": {"type": "alibi"}, "num_kv_heads": HKV, "head_dim": D,
                     "eviction": {"type": "window", "window": 4, "sinks": 1,
                                  "reposition": True}}),
    ("rope_repos", {"scheme": {"type": "rope"}, "num_kv_heads": HKV, "head_dim": D,
                    "v_head_dim": 2,
                    "eviction": {"type": "window", "window": 6, "sinks": 2,
                                 "reposition": True}}),
    ("t5_window", {"scheme": {"type": "t5", "num_buckets": 8, "max_distance": 16,
                              "table": {"shape": [8, HKV],
                                        "data": [0.5 * i for i in range(8 * HKV)]}},
                   "num_kv_heads": HKV, "head_dim": D,
                   "eviction": {"type": "window", "window": 5, "sinks": 0}}),
    # Stored in 16 bits: the file keeps the values widened, the restart rounds them back.
    ("rope_bf16", {"scheme": {"type": "rope"}, "num_kv_heads": HKV, "head_dim": D,
                   "dtype": "bf16",
                   "eviction": {"type": "window", "window": 6, "sinks": 2, "reposition": True}}),
    ("alibi_f16", {"scheme": {"type": "alibi"}, "num_kv_heads": HKV, "head_dim": D,
                   "dtype": "f16", "max_tokens": 64}),
    ("chosen", {"id": "user-42.chat_A", "scheme": {"type": "alibi"}, "num_kv_heads": HKV,
                "head_dim": D, "max_tokens": 40}),
]


def tensors(rng, n, dv=D):
    k = [round(rng.uniform(-1, 1), 4) for _ in range(n * HKV * D)]
    v = [round(rng.uniform(-1, 1), 4) for _ in range(n * HKV * dv)]
    return {"k": {"shape": [n, HKV, D], "data": k}, "v": {"shape": [n, HKV, dv], "data": v}}


class Pair:
    """The same sessions on two servers: a (restarted) and ctrl (never)."""

    def __init__(self, a, ctrl):
        self.a, self.ctrl = a, ctrl
        self.ids = {}  # name -> (id on a, id on ctrl)
        self.dv = {}

    def create(self, name, spec):
        sa = ok(self.a, "POST", "/v1/sessions", spec, 201)
        sc = ok(self.ctrl, "POST", "/v1/sessions", spec, 201)
        self.ids[name] = (sa["id"], sc["id"])
        self.dv[name] = spec.get("v_head_dim", D)

    def fork(self, name, parent):
        ia, ic = self.ids[parent]
        sa = ok(self.a, "POST", "/v1/sessions/%s/fork" % ia, None, 201)
        sc = ok(self.ctrl, "POST", "/v1/sessions/%s/fork" % ic, None, 201)
        self.ids[name] = (sa["id"], sc["id"])
        self.dv[name] = self.dv[parent]

    def append(self, name, n, seed):
        body = tensors(random.Random(seed), n, self.dv[name])
        ia, ic = self.ids[name]
        ra = ok(self.a, "POST", "/v1/sessions/%s/append" % ia, body)
        rc = ok(self.ctrl, "POST", "/v1/sessions/%s/append" % ic, body)
        return ra, rc

    def get(self, srv, name):
        i = self.ids[name][0 if srv is self.a else 1]
        return ok(srv, "GET", "/v1/sessions/" + i)

    def attend(self, srv, name):
        """A query over the session (docs/sessions.md): output and weights."""
        i = self.ids[name][0 if srv is self.a else 1]
        q = {"shape": [1, HKV, D],  # t5's table has a column per kv head
             "data": [round(((j * 7) % 13) / 13 - 0.5, 3) for j in range(HKV * D)]}
        item = {"session": i, "q": q, "causal": True, "return": ["output", "weights"]}
        out = ok(srv, "POST", "/v1/attention", {"inputs": [item]})["outputs"][0]
        assert "error" in out or "output" in out, out
        return out.get("error", {}).get("code"), out.get("output"), out.get("weights")

    def same(self, test, name):
        ga, gc = figures(self.get(self.a, name)), figures(self.get(self.ctrl, name))
        ga.pop("id")
        gc.pop("id")
        test.assertEqual(ga, gc, name)
        if ga["length"] > 0:  # attention over it answers alike, bit for bit
            test.assertEqual(self.attend(self.a, name), self.attend(self.ctrl, name), name)


class Restarts(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="posattn-restarts-")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, args=(), **kw):
        s = posattnd.start(BIN, ["--workers", "2", "--session-ttl", "0"] + list(args), **kw)
        self.servers.append(s)
        return s

    def stop(self, s):
        rc = s.stop()
        self.assertEqual(rc, 0, s.failure())
        return s.stderr

    def test_sigterm_and_start_again(self):
        a = self.start(["--cache-dir", self.dir])
        ctrl = self.start()
        p = Pair(a, ctrl)
        for name, spec in SPECS:
            p.create(name, spec)
        seed = 1
        for step in range(4):
            for name, _ in SPECS:
                p.append(name, 3 if step % 2 else 2, seed)
                seed += 1
        p.append("none", 20, 99)  # past a block (16 tokens): a whole block to share
        p.fork("fork", "none")
        p.append("fork", 3, 100)
        p.append("none", 1, 101)  # the parent writes after the fork: copy on write
        self.assertEqual(p.ids["chosen"][0], "user-42.chat_A")
        before = {name: figures(p.get(a, name)) for name in p.ids}
        for name in p.ids:
            p.same(self, name)
        self.assertGreater(before["alibi_repos"]["eviction"]["evicted"], 0)
        self.assertGreater(p.get(a, "fork")["shared_blocks"], 0)

        err = self.stop(a)
        self.assertIn("%d sessions saved to %s" % (len(p.ids), self.dir), err)
        files = sorted(os.listdir(self.dir))
        self.assertEqual(files, sorted(i + SUFFIX for i, _ in p.ids.values()))

        a2 = self.start(["--cache-dir", self.dir])
        p.a = a2
        self.assertIn("%d sessions loaded from %s" % (len(p.ids), self.dir), a2.stderr_tail(50))
        for name in p.ids:
            g = p.get(a2, name)
            self.assertEqual(figures(g), before[name], name)
            self.assertEqual(g["shared_blocks"], 0, name)  # forks come back as copies
        lst = ok(a2, "GET", "/v1/sessions")
        self.assertEqual(lst["total"], len(p.ids))
        # Appends go on as on the control, which never stopped.
        for step in range(3):
            for name in p.ids:
                ra, rc = p.append(name, 1 + step, 200 + seed)
                seed += 1
                for r in (ra, rc):
                    r.pop("timing", None)
                    r.pop("id")
                self.assertEqual(figures(ra), figures(rc), name)
        for name in p.ids:
            p.same(self, name)
        # A fork after the restart shares blocks with its parent as before.
        p.fork("fork2", "rope_repos")
        p.append("fork2", 2, 999)
        p.same(self, "fork2")
        p.same(self, "rope_repos")

        # A delete removes the session's file at once.
        gone = p.ids["t5_window"][0]
        self.assertTrue(os.path.exists(os.path.join(self.dir, gone + SUFFIX)))
        ok(a2, "DELETE", "/v1/sessions/" + gone)
        self.assertFalse(os.path.exists(os.path.join(self.dir, gone + SUFFIX)))
        st, obj = call(a2, "GET", "/v1/sessions/" + gone)
        self.assertEqual((st, obj["error"]["code"]), (404, "SESSION_NOT_FOUND"))
        # ... and names the replica (--replica-id, the hostname by default).
        self.assertIn("(replica ", obj["error"]["message"])
        # A taken id is refused.
        st, obj = call(a2, "POST", "/v1/sessions", SPECS[-1][1])  # "chosen"
        self.assertEqual((st, obj["error"]["code"]), (409, "SESSION_EXISTS"))
        err = self.stop(a2)
        self.assertIn("%d sessions saved" % (len(p.ids) - 1), err)
        self.assertEqual(len(os.listdir(self.dir)), len(p.ids) - 1)

    def test_damaged_files_skipped(self):
        a = self.start(["--cache-dir", self.dir])
        good = ok(a, "POST", "/v1/sessions", SPECS[0][1], 201)["id"]
        ok(a, "POST", "/v1/sessions/%s/append" % good, tensors(random.Random(5), 3))
        want = figures(ok(a, "GET", "/v1/sessions/" + good))
        self.stop(a)
        with open(os.path.join(self.dir, good + SUFFIX), "rb") as f:
            blob = f.read()
        truncated = os.path.join(self.dir, "truncated-1" + SUFFIX)
        corrupt = os.path.join(self.dir, "0123456789abcdef0123456789abcdef" + SUFFIX)
        with open(truncated, "wb") as f:
            f.write(blob[:len(blob) // 2])
        with open(corrupt, "wb") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")

        b = self.start(["--cache-dir", self.dir], log_format="json")
        self.assertEqual(figures(ok(b, "GET", "/v1/sessions/" + good)), want)
        ok(b, "POST", "/v1/sessions", SPECS[1][1], 201)  # and it serves
        lines = [json.loads(l) for l in b.stderr_tail(100).splitlines() if l.startswith("{")]
        skipped = [l for l in lines if l.get("event") == "session_skipped"]
        self.assertEqual(len(skipped), 2, lines)
        for path in (truncated, corrupt):
            self.assertEqual(sum(path in l["message"] for l in skipped), 1, (path, skipped))
        loaded = [l for l in lines if l.get("event") == "session_load"]
        self.assertEqual(len(loaded), 1)
        self.assertIn("1 session loaded", loaded[0]["message"])
        self.stop(b)
        # Left in place, even by the save on drain.
        self.assertTrue(os.path.exists(truncated))
        self.assertTrue(os.path.exists(corrupt))
        self.assertEqual(len(os.listdir(self.dir)), 4)

    def test_kill_9_with_periodic_snapshots(self):
        a = self.start(["--cache-dir", self.dir, "--cache-snapshot-s", "1"])
        ids = []
        for name, spec in SPECS[:3]:
            i = ok(a, "POST", "/v1/sessions", spec, 201)["id"]
            ok(a, "POST", "/v1/sessions/%s/append" % i,
               tensors(random.Random(len(ids)), 3, spec.get("v_head_dim", D)))
            ids.append(i)
        want = {i: figures(ok(a, "GET", "/v1/sessions/" + i)) for i in ids}
        time.sleep(2.5)  # at least one snapshot after the appends
        a.proc.kill()
        a.proc.wait()
        a.stop()
        b = self.start(["--cache-dir", self.dir])
        for i in ids:
            self.assertEqual(figures(ok(b, "GET", "/v1/sessions/" + i)), want[i], i)
        self.stop(b)


if __name__ == "__main__":
    unittest.main()
