#!/usr/bin/python3
"""shared_cache.py - replicas sharing one --cache-dir (--cache-shared 1,
docs/sessions.md "A shared --cache-dir"), over HTTP.

Starts replicas a and b (tests/posattnd.py) on one temporary folder, and a
control posattnd without one; the same sessions and steps go to a and to
the control. Checks the ownership rule of store/kv_snapshot.h:
- each replica keeps its files in DIR/REPLICA-ID and answers with its name
  in X-Posattn-Replica;
- while a runs, b does not take a's sessions, even with their files on
  disk (--cache-snapshot-s): SESSION_NOT_FOUND naming a as their holder;
- a second process with a's --replica-id does not start (a's lock);
- once a drained (SIGTERM), b loads a's session on its first use (an
  attention step, a GET, an append, a delete), takes its file into
  DIR/b, and every step then equals the control's, bit for bit;
- a started again loads only what is still its own: a session b took
  over is b's (a answers SESSION_NOT_FOUND naming b), and b's file is not
  overwritten by a's drain;
- a session no replica holds is SESSION_NOT_FOUND naming the replica.
The binary is $POSATTND (default build/posattnd). Part of make test's
e2e-clients.
"""
import json
import os
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


def call(srv, method, path, body=None):
    """(status, JSON answer or None, X-Posattn-Replica)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(srv.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text, st, rep = r.read(), r.status, r.headers.get("X-Posattn-Replica")
    except urllib.error.HTTPError as e:
        text, st, rep = e.read(), e.code, e.headers.get("X-Posattn-Replica")
    return st, (json.loads(text) if text else None), rep


def ok(srv, method, path, body=None, want=200):
    st, obj, _ = call(srv, method, path, body)
    assert st == want, (method, path, st, obj)
    return obj


def tensor(shape, seed):
    n = 1
    for d in shape:
        n *= d
    return {"shape": shape, "data": [((seed * 7919 + i * 104729) % 1000) / 500.0 - 1.0
                                     for i in range(n)]}


def step(sid, t):
    """A decode step: q [1, 2, 4] and one appended token [1, 1, 4]."""
    return {"inputs": [{"session": sid, "causal": True, "q": tensor([1, 2, 4], 3 * t + 1),
                        "append": {"k": tensor([1, 1, 4], 3 * t + 2),
                                   "v": tensor([1, 1, 4], 3 * t + 3)}}]}


def figures(s):
    return {k: v for k, v in s.items() if k not in ("idle_s", "shared_blocks")}


class SharedCache(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="posattn-shared.")
        self.servers = []
        self.control = self.start([], None)

    def tearDown(self):
        for s in self.servers:
            s.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, args, name, **kw):
        extra = ["--cache-dir", self.dir, "--cache-shared", "1", "--replica-id", name] if name else []
        s = posattnd.start(BIN, ["--workers", "2", "--session-ttl", "0"] + extra + list(args), **kw)
        self.servers.append(s)
        return s

    def create(self, srv, sid, scheme):
        ok(srv, "POST", "/v1/sessions", {"id": sid, "scheme": scheme, "num_kv_heads": 1,
                                         "head_dim": 4, "max_tokens": 64}, want=201)

    def both(self, srv, sid, t):
        """Step t on srv and on the control: equal answers."""
        st, got, _ = call(srv, "POST", "/v1/attention", step(sid, t))
        self.assertEqual(st, 200, got)
        want = ok(self.control, "POST", "/v1/attention", step(sid, t))
        self.assertEqual(got["outputs"][0]["output"], want["outputs"][0]["output"], (sid, t))

    def test_takeover(self):
        a = self.start(["--cache-snapshot-s", "1"], "a")
        b = self.start([], "b")
        st, _, rep = call(a, "GET", "/healthz")
        self.assertEqual((st, rep), (200, "a"))
        sids = {"s-rope": {"type": "rope"}, "s-alibi": {"type": "alibi"}, "s-none": {"type": "none"},
                "s-get": {"type": "rope"}, "s-del": {"type": "none"}, "s-stay": {"type": "rope"}}
        for sid, scheme in sids.items():
            self.create(a, sid, scheme)
            self.create(self.control, sid, scheme)
            for t in range(3):
                self.both(a, sid, t)
        # The periodic save writes a's files into DIR/a.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(self.dir, "a", sid + ".safetensors")) for sid in sids):
            time.sleep(0.1)
        self.assertEqual(sorted(f for f in os.listdir(os.path.join(self.dir, "a"))
                                if f.endswith(".safetensors")),
                         sorted(sid + ".safetensors" for sid in sids))
        # a runs: b does not take its sessions.
        st, err, rep = call(b, "GET", "/v1/sessions/s-rope")
        self.assertEqual((st, err["error"]["code"], rep), (404, "SESSION_NOT_FOUND", "b"), err)
        self.assertIn("replica a holds it and is running", err["error"]["message"])
        st, err, _ = call(b, "POST", "/v1/attention", step("s-rope", 3))
        self.assertEqual(err["outputs"][0]["error"]["code"], "SESSION_NOT_FOUND", (st, err))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "a", "s-rope.safetensors")))
        # A second process as replica a does not start.
        with self.assertRaises(posattnd.StartError):
            self.start([], "a", timeout=30)
        # Nobody holds it: 404 naming the replica asked.
        st, err, _ = call(b, "GET", "/v1/sessions/never-made")
        self.assertEqual(st, 404)
        self.assertIn("on replica b", err["error"]["message"])

        self.assertEqual(a.stop(), 0)
        # b takes over on first use, by each kind of request.
        for t in range(3, 6):
            self.both(b, "s-rope", t)
        self.both(b, "s-alibi", 3)
        got = ok(b, "GET", "/v1/sessions/s-get")
        self.assertEqual(figures(got), figures(ok(self.control, "GET", "/v1/sessions/s-get")))
        ok(b, "POST", "/v1/sessions/s-none/append",
           {"k": tensor([1, 1, 4], 50), "v": tensor([1, 1, 4], 51)})
        ok(self.control, "POST", "/v1/sessions/s-none/append",
           {"k": tensor([1, 1, 4], 50), "v": tensor([1, 1, 4], 51)})
        self.both(b, "s-none", 4)
        ok(b, "DELETE", "/v1/sessions/s-del")
        for sid in ("s-rope", "s-alibi", "s-get", "s-none", "s-del"):
            self.assertFalse(os.path.exists(os.path.join(self.dir, "a", sid + ".safetensors")), sid)
        for sid in ("s-rope", "s-alibi", "s-get", "s-none"):
            self.assertTrue(os.path.exists(os.path.join(self.dir, "b", sid + ".safetensors")), sid)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "b", "s-del.safetensors")))

        # a again: it loads only s-stay, its own; the others are b's.
        a2 = self.start([], "a")
        sessions = ok(a2, "GET", "/v1/sessions")["sessions"]
        self.assertEqual([s["id"] for s in sessions], ["s-stay"])
        self.both(a2, "s-stay", 3)
        st, err, _ = call(a2, "GET", "/v1/sessions/s-rope")
        self.assertEqual(st, 404)
        self.assertIn("replica b holds it and is running", err["error"]["message"])
        self.both(b, "s-rope", 6)
        # b drains; a takes s-rope over, from b's drain file, and goes on.
        self.assertEqual(b.stop(), 0)
        for t in range(7, 9):
            self.both(a2, "s-rope", t)
        self.assertEqual(a2.stop(), 0)
        mine = sorted(f for f in os.listdir(os.path.join(self.dir, "a")) if f.endswith(".safetensors"))
        theirs = sorted(f for f in os.listdir(os.path.join(self.dir, "b")) if f.endswith(".safetensors"))
        self.assertEqual(mine, ["s-rope.safetensors", "s-stay.safetensors"])
        self.assertEqual(theirs, ["s-alibi.safetensors", "s-get.safetensors", "s-none.safetensors"])

    def test_flags(self):
        bad = posattnd.start
        with self.assertRaises(posattnd.StartError):
            bad(BIN, ["--cache-shared", "1"])
        with self.assertRaises(posattnd.StartError):
            bad(BIN, ["--cache-dir", self.dir, "--cache-shared", "1", "--replica-id", ".hidden"])


if __name__ == "__main__":
    unittest.main()
