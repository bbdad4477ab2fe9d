#!/usr/bin/python3
"""sessions.py - /v1/sessions end to end (docs/sessions.md), over HTTP.

Starts its own posattnd (tests/posattnd.py) with a small --cache-mb (and
one with --session-ttl 1 for expiry), then: creates sessions, appends (JSON and base64, at
given positions), forks (copy on write), lists (paged), deletes, and checks
each status (201, 200, 404 after a delete, 405 for another method, 409
SESSION_FULL, 507 CACHE_FULL, 400 naming the field), the answers, the
StreamingLLM example of docs/sessions.md, ttl expiry, and that /metrics
moves (posattn_sessions, posattn_cache_bytes, posattn_cache_blocks,
posattn_cache_evictions_total, posattn_session_tokens_*). The binary is
$POSATTND (default build/posattnd). Part of make test's e2e-clients.
"""
import base64
import json
import os
import re
import struct
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import posattnd  # noqa: E402

BIN = os.environ.get("POSATTND", "build/posattnd")
SRV = None


def setUpModule():
    global SRV
    # 1 MB of blocks: a block of 16 tokens, Hkv 8, D = Dv = 64 is 64 KiB.
    SRV = posattnd.start(BIN, ["--workers", "2", "--cache-mb", "1", "--session-ttl", "0"])


def tearDownModule():
    SRV.stop(check=True)


def call(method, path, body=None, raw=None):
    """(status, JSON answer or None, headers)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(SRV.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text, st, h = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        text, st, h = e.read(), e.code, e.headers
    return st, (json.loads(text) if text else None), h


def metrics():
    with urllib.request.urlopen(SRV.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(posattn_(?:sessions|cache_\w+|session_\w+))(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def tensor(n, hkv, d, seed=0, b64=False):
    vals = [((i * 7 + seed * 13) % 17 - 8) / 8.0 for i in range(n * hkv * d)]
    if b64:
        return {"shape": [n, hkv, d],
                "b64": base64.b64encode(struct.pack("<%df" % len(vals), *vals)).decode()}
    return {"shape": [n, hkv, d], "data": vals}


def create(**kw):
    body = {"scheme": {"type": "rope"}, "num_kv_heads": 2, "head_dim": 4, "max_tokens": 64}
    body.update(kw)
    body = {k: v for k, v in body.items() if v is not None}
    st, obj, _ = call("POST", "/v1/sessions", body)
    assert st == 201, (st, obj)
    return obj


class Sessions(unittest.TestCase):
    def test_lifecycle_and_metrics(self):
        m0 = metrics()
        s = create()
        sid = s["id"]
        self.assertEqual((s["length"], s["positions"], s["keys_prerotated"]), (0, None, True))
        self.assertEqual(metrics()["posattn_sessions"], m0["posattn_sessions"] + 1)

        st, a, _ = call("POST", "/v1/sessions/%s/append" % sid,
                        {"k": tensor(3, 2, 4), "v": tensor(3, 2, 4, 1, b64=True)})
        self.assertEqual((st, a["length"], a["next_position"]), (200, 3, 3))
        self.assertEqual(a["positions"], {"first": 0, "last": 2})
        self.assertEqual(a["bytes"], 16 * 2 * 8 * 4)
        st, a, _ = call("POST", "/v1/sessions/%s/append" % sid,
                        {"k": tensor(2, 2, 4, 2), "v": tensor(2, 2, 4, 3), "k_positions": [7, 8]})
        self.assertEqual((st, a["length"], a["positions"]["last"]), (200, 5, 8))
        m1 = metrics()
        self.assertEqual(m1["posattn_session_tokens_appended_total"],
                         m0["posattn_session_tokens_appended_total"] + 5)
        self.assertEqual(m1['posattn_cache_bytes{dtype="f32"}'], m0['posattn_cache_bytes{dtype="f32"}'] + 1024)
        self.assertEqual(m1['posattn_cache_blocks{state="used"}'],
                         m0['posattn_cache_blocks{state="used"}'] + 1)
        self.assertEqual(m1["posattn_cache_budget_bytes"], 1 << 20)

        # Fork: a new id, the block shared, no bytes more until a write.
        st, f, _ = call("POST", "/v1/sessions/%s/fork" % sid)
        self.assertEqual((st, f["length"], f["shared_blocks"]), (201, 5, 1))
        self.assertNotEqual(f["id"], sid)
        m2 = metrics()
        self.assertEqual(m2['posattn_cache_bytes{dtype="f32"}'], m1['posattn_cache_bytes{dtype="f32"}'])
        self.assertEqual(m2['posattn_cache_blocks{state="shared"}'],
                         m1['posattn_cache_blocks{state="shared"}'] + 1)
        st, a, _ = call("POST", "/v1/sessions/%s/append" % f["id"],
                        {"k": tensor(1, 2, 4), "v": tensor(1, 2, 4)})
        self.assertEqual((st, a["length"], a["shared_blocks"]), (200, 6, 0))
        self.assertEqual(metrics()['posattn_cache_bytes{dtype="f32"}'], m1['posattn_cache_bytes{dtype="f32"}'] + 1024)

        # List: paged, oldest first, with the cache's totals.
        st, page, _ = call("GET", "/v1/sessions?limit=1")
        self.assertEqual((st, len(page["sessions"]), page["limit"]), (200, 1, 1))
        self.assertGreaterEqual(page["total"], 2)
        st, everything, _ = call("GET", "/v1/sessions")
        ids = [x["id"] for x in everything["sessions"]]
        self.assertLess(ids.index(sid), ids.index(f["id"]))
        self.assertEqual(everything["cache"]["sessions"], everything["total"])
        st, obj, _ = call("GET", "/v1/sessions?offset=-2")
        self.assertEqual((st, obj["error"]["field"]), (400, "offset"))

        # Delete: 200, then 404 everywhere; the fork lives on.
        st, obj, _ = call("DELETE", "/v1/sessions/" + sid)
        self.assertEqual((st, obj), (200, {"id": sid, "deleted": True}))
        for method, path, body in (("GET", "", None), ("DELETE", "", None),
                                   ("POST", "/append", {"k": tensor(1, 2, 4),
                                                        "v": tensor(1, 2, 4)}),
                                   ("POST", "/fork", None)):
            st, obj, _ = call(method, "/v1/sessions/" + sid + path, body)
            self.assertEqual((st, obj["error"]["code"]), (404, "SESSION_NOT_FOUND"),
                             (method, path))
        st, obj, _ = call("GET", "/v1/sessions/" + f["id"])
        self.assertEqual((st, obj["length"]), (200, 6))
        st, obj, _ = call("DELETE", "/v1/sessions/" + f["id"])
        self.assertEqual(st, 200)
        m3 = metrics()
        self.assertEqual(m3["posattn_sessions"], m0["posattn_sessions"])
        self.assertEqual(m3['posattn_cache_bytes{dtype="f32"}'], m0['posattn_cache_bytes{dtype="f32"}'])

    def test_methods(self):
        for method, path, allow in (("PUT", "/v1/sessions", "GET, POST"),
                                    ("POST", "/v1/sessions/x", "GET, DELETE"),
                                    ("GET", "/v1/sessions/x/append", "POST"),
                                    ("DELETE", "/v1/sessions/x/fork", "POST")):
            st, obj, h = call(method, path)
            self.assertEqual((st, obj["error"]["code"], h["Allow"]),
                             (405, "METHOD_NOT_ALLOWED", allow), (method, path))
        st, obj, _ = call("GET", "/v1/sessions/")
        self.assertEqual(st, 404)

    def test_refusals(self):
        st, obj, _ = call("POST", "/v1/sessions", {"scheme": {"type": "rope"}, "num_kv_heads": 2,
                                                   "head_dim": 4, "max_tokens": 8,
                                                   "dtype": "f8"})
        self.assertEqual((st, obj["error"]["code"], obj["error"]["field"]),
                         (400, "INVALID_ARGUMENT", "dtype"))
        st, obj, _ = call("POST", "/v1/sessions", {"num_kv_heads": 2, "head_dim": 4,
                                                   "max_tokens": 8, "bogus": 1,
                                                   "scheme": {"type": "none"}})
        self.assertEqual((st, obj["error"]["code"], obj["error"]["field"]),
                         (400, "UNKNOWN_FIELD", "bogus"))
        sid = create(max_tokens=4)["id"]
        st, obj, _ = call("POST", "/v1/sessions/%s/append" % sid,
                          {"k": tensor(1, 3, 4), "v": tensor(1, 2, 4)})
        self.assertEqual((st, obj["error"]["field"]), (400, "k.shape[1]"))
        self.assertIn("k.shape[1]=3 does not equal the session's num_kv_heads=2",
                      obj["error"]["message"])
        st, obj, _ = call("POST", "/v1/sessions/%s/append" % sid,
                          {"k": tensor(5, 2, 4), "v": tensor(5, 2, 4)})
        self.assertEqual((st, obj["error"]["code"]), (409, "SESSION_FULL"))
        st, obj, _ = call("GET", "/v1/sessions/" + sid)
        self.assertEqual(obj["length"], 0)  # left as it was
        call("DELETE", "/v1/sessions/" + sid)

    def test_cache_full(self):
        # Blocks of 64 KiB in a 1 MB budget: 16 blocks. 17 never fit (507);
        # a full pool drops the idle sessions first, least recently used.
        m0 = metrics()
        big = dict(num_kv_heads=8, head_dim=64, max_tokens=1024, scheme={"type": "none"})
        a = create(**big)["id"]
        st, obj, _ = call("POST", "/v1/sessions/%s/append" % a,
                          {"k": tensor(17 * 16, 8, 64, b64=True),
                           "v": tensor(17 * 16, 8, 64, 1, b64=True)})
        self.assertEqual((st, obj["error"]["code"]), (507, "CACHE_FULL"))
        self.assertIn("--cache-mb", obj["error"]["message"])
        st, obj, _ = call("POST", "/v1/sessions/%s/append" % a,
                          {"k": tensor(12 * 16, 8, 64, b64=True),
                           "v": tensor(12 * 16, 8, 64, 1, b64=True)})
        self.assertEqual((st, obj["length"]), (200, 192))
        b = create(**big)["id"]
        st, obj, _ = call("POST", "/v1/sessions/%s/append" % b,
                          {"k": tensor(8 * 16, 8, 64, b64=True),
                           "v": tensor(8 * 16, 8, 64, 1, b64=True)})
        self.assertEqual(st, 200)
        st, obj, _ = call("GET", "/v1/sessions/" + a)
        self.assertEqual(st, 404)  # dropped for room
        m1 = metrics()
        self.assertEqual(m1['posattn_cache_evictions_total{reason="pool_full"}'],
                         m0['posattn_cache_evictions_total{reason="pool_full"}'] + 1)
        call("DELETE", "/v1/sessions/" + b)

    def test_streaming_llm_example(self):
        # docs/sessions.md's example: window 4, sinks 1, ten tokens.
        for reposition, first in ((True, 5), (False, 0)):
            s = create(scheme={"type": "alibi"}, max_tokens=None,
                       eviction={"type": "window", "window": 4, "sinks": 1,
                                 "reposition": reposition})
            self.assertEqual(s["max_tokens"], 5)
            m0 = metrics()
            st, obj, _ = call("POST", "/v1/sessions/%s/append" % s["id"],
                              {"k": tensor(10, 2, 4), "v": tensor(10, 2, 4)})
            self.assertEqual(st, 200, obj)
            self.assertEqual((obj["length"], obj["appended"], obj["eviction"]["evicted"]),
                             (5, 10, 5))
            self.assertEqual(obj["positions"], {"first": first, "last": 9})
            self.assertEqual(obj["next_position"], 10)
            self.assertEqual(obj["bytes"], 1024)
            self.assertEqual(metrics()["posattn_session_tokens_evicted_total"],
                             m0["posattn_session_tokens_evicted_total"] + 5)
            call("DELETE", "/v1/sessions/" + s["id"])

    def test_concurrent_appends(self):
        # Four clients append to one session at once: each append is all or
        # nothing, answered 200 or 409 SESSION_BUSY (another one ran), and
        # the session counts exactly the tokens of the 200s.
        import threading
        sid = create(scheme={"type": "rope"}, max_tokens=None,
                     eviction={"type": "window", "window": 48, "sinks": 4})["id"]
        body = json.dumps({"k": tensor(8, 2, 4, b64=True),
                           "v": tensor(8, 2, 4, 1, b64=True)}).encode()
        seen = []
        lock = threading.Lock()

        def client():
            for _ in range(15):
                st, obj, _ = call("POST", "/v1/sessions/%s/append" % sid, raw=body)
                with lock:
                    seen.append((st, obj.get("error", {}).get("code") if st != 200 else None))

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(seen), 60)
        for st, code in seen:
            self.assertIn((st, code), ((200, None), (409, "SESSION_BUSY")))
        ok = sum(1 for st, _ in seen if st == 200)
        st, obj, _ = call("GET", "/v1/sessions/" + sid)
        self.assertEqual(obj["appended"], 8 * ok)
        self.assertEqual(obj["length"], min(52, 8 * ok))
        call("DELETE", "/v1/sessions/" + sid)

    def test_ttl(self):
        # A server of its own with --session-ttl 1: an idle session is gone
        # after it (dropped by the next sessions request), and counted.
        global SRV
        main, SRV = SRV, posattnd.start(BIN, ["--workers", "1", "--session-ttl", "1"])
        try:
            sid = create()["id"]
            kept = create()["id"]
            time.sleep(0.6)
            # An append keeps a session alive (a GET does not: it only looks).
            self.assertEqual(call("POST", "/v1/sessions/%s/append" % kept,
                                  {"k": tensor(1, 2, 4), "v": tensor(1, 2, 4)})[0], 200)
            self.assertEqual(call("GET", "/v1/sessions/" + sid)[0], 200)
            time.sleep(0.6)
            st, obj, _ = call("GET", "/v1/sessions/" + sid)
            self.assertEqual((st, obj["error"]["code"]), (404, "SESSION_NOT_FOUND"))
            self.assertEqual(call("GET", "/v1/sessions/" + kept)[0], 200)
            m = metrics()
            self.assertEqual(m['posattn_cache_evictions_total{reason="ttl"}'], 1)
            self.assertEqual(m["posattn_sessions"], 1)
        finally:
            SRV.stop(check=True)
            SRV = main

if __name__ == "__main__":
    unittest.main(argv=[a for a in sys.argv if a != "-q"],
                  verbosity=0 if "-q" in sys.argv else 2)
