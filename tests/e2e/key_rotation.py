#!/usr/bin/python3
"""key_rotation.py - API keys rotate without a restart (#29 item 6).

posattnd runs with --api-key-file. Under load from four client threads
(two with the old key, two with the new one, each request after the
last), the file is replaced (written beside it, then renamed over it) and
SIGHUP sent: each old-key thread sees 200s then only 401s, each new-key
thread 401s then only 200s, and no request fails otherwise (no 5xx, no
connection error): no request ever sees neither set. Then the file changes
with no signal, and within a few seconds its keys are the ones in force
(posattnd checks the file every second). A file that does not load keeps
the set in force, and the log says so.

Starts its own server (tests/posattnd.py); the binary is $POSATTND
(default build/posattnd). Part of make test's e2e-clients.
"""
import os
import signal
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import posattnd  # noqa: E402

BIN = os.environ.get("POSATTND", "build/posattnd")


def status_with(url, key, path="/v1/schemes"):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


def write_keys(path, *keys):
    """Replaces the file as an operator would: a new file renamed over it."""
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write("# posattnd keys\n" + "".join(k + "\n" for k in keys))
    os.chmod(tmp, 0o600)
    os.rename(tmp, path)


def one_switch(statuses, before, after):
    """statuses is before...before after...after, with both parts present."""
    seen_after = False
    for s in statuses:
        if s == after:
            seen_after = True
        elif s != before or seen_after:
            return False
    return seen_after and statuses[0] == before


class Rotation(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="posattn-keys-")
        self.path = os.path.join(self.dir, "keys")
        write_keys(self.path, "old-key-1")
        self.srv = posattnd.start(BIN, ["--workers", "2", "--api-key-file", self.path],
                                  log_format="off")

    def tearDown(self):
        rc = self.srv.stop()
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)
        self.assertEqual(rc, 0, self.srv.failure())

    def wait_for(self, key, want, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if status_with(self.srv.url, key) == want:
                return True
            time.sleep(0.05)
        return False

    def test_sighup_swaps_under_load(self):
        stop = threading.Event()
        results = {}

        def client(name, key, path):
            got = []
            while not stop.is_set():
                try:
                    got.append(status_with(self.srv.url, key, path))
                except Exception as e:  # a connection error is a failure too
                    got.append(repr(e))
            results[name] = got

        threads = [threading.Thread(target=client, args=a) for a in (
            ("old-1", "old-key-1", "/v1/schemes"), ("old-2", "old-key-1", "/v2"),
            ("new-1", "new-key-2", "/v1/schemes"), ("new-2", "new-key-2", "/v2"))]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            write_keys(self.path, "new-key-2")
            os.kill(self.srv.pid, signal.SIGHUP)
            self.assertTrue(self.wait_for("new-key-2", 200, 10), "the new key never took")
            time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join()
        for name, got in results.items():
            self.assertGreater(len(got), 5, name)
            before, after = (200, 401) if name.startswith("old") else (401, 200)
            self.assertTrue(one_switch(got, before, after),
                            "%s: %d requests, not %d then %d: %s" %
                            (name, len(got), before, after, sorted(set(map(str, got)))))

    def test_file_change_and_bad_file(self):
        self.assertEqual(status_with(self.srv.url, "old-key-1"), 200)
        # No signal: the change is noticed within about a second.
        write_keys(self.path, "third-key-3")
        self.assertTrue(self.wait_for("third-key-3", 200, 10), "the changed file never took")
        self.assertEqual(status_with(self.srv.url, "old-key-1"), 401)
        # A file that does not load (a key with a space) keeps the set in force.
        write_keys(self.path, "not a key")
        os.kill(self.srv.pid, signal.SIGHUP)
        time.sleep(2.5)  # the signal and a file check have both come and gone
        self.assertEqual(status_with(self.srv.url, "third-key-3"), 200)
        self.assertIn("did not load; the old ones stay", self.srv.stderr_tail(50))
        self.assertIn("the API key file changed: 1 API key now accepted",
                      self.srv.stderr_tail(50))


if __name__ == "__main__":
    unittest.main()
