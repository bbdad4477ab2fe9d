#!/usr/bin/python3
"""decode_service.py - decode through the service: q-only requests against
k and v loaded at start-up as named tensors, so that they stay resident
(issue #18), to a posattnd this script spawns on 127.0.0.1 with 2 workers.

One query row per head (H=32, Hkv=8, D=128) against a 32768-token cache
(268 MB of k and v), causal: scheme none, ALiBi, rope with the cache's keys
already rotated (k_prerotated) and rope rotating them per request; and a
batch of 8 such decodes over 4096 tokens each in one request. Per case the
best and median of REPEAT requests of the item's timing.compute_us (the
wall time from its first part's start to its last part's end), the GB/s of
k and v that makes, and the client's median wall time for the request.
The ceiling is bench/bench_decode's read bandwidth (make bench prints it).

    /usr/bin/python3 bench/decode_service.py --posattnd build/posattnd
    /usr/bin/python3 bench/decode_service.py --posattnd build/posattnd --smoke
"""

import argparse
import base64
import json
import os
import statistics
import struct
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import posattnd  # noqa: E402  (tests/posattnd.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--posattnd", default=os.path.join(os.environ.get("BUILD", "build"), "posattnd"))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes: that it runs")
    a = ap.parse_args()
    try:
        import numpy as np
    except ImportError:
        print("decode_service: needs python3-numpy (make deps)", file=sys.stderr)
        return 1
    L, H, Hkv, D, B = (512, 4, 2, 16, 2) if a.smoke else (32768, 32, 8, 128, 8)
    reps = 1 if a.smoke else a.repeat
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, shape in (("k", (L, Hkv, D)), ("v", (L, Hkv, D)),
                            ("kb", (B, L // B, Hkv, D)), ("vb", (B, L // B, Hkv, D))):
            files[name] = os.path.join(tmp, name + ".npy")
            np.save(files[name], rng.uniform(-1, 1, shape).astype("<f4"))
        args = ["--workers", "2"]
        for name, path in files.items():
            args += ["--tensor", "%s=%s" % (name, path)]
        try:
            srv = posattnd.start(a.posattnd, args, timeout=120)
        except posattnd.StartError as e:
            print("decode_service: posattnd did not start: %s" % e, file=sys.stderr)
            return 1
        try:
            def post(body):
                req = urllib.request.Request(srv.url + "/v1/attention", data=body,
                                             headers={"Content-Type": "application/json"})
                t0 = time.perf_counter()
                with urllib.request.urlopen(req, timeout=300) as r:
                    ans = json.loads(r.read())
                return ans, time.perf_counter() - t0

            def q(shape):
                vals = rng.uniform(-1, 1, shape).astype("<f4")
                return {"shape": list(shape), "b64": base64.b64encode(vals.tobytes()).decode()}

            one, batch = q((1, H, D)), q((B, 1, H, D))
            base = {"k": {"ref": "k"}, "v": {"ref": "v"}, "causal": True, "q": one}
            cases = [
                ("none", dict(base, scheme={"type": "none"})),
                ("alibi", dict(base, scheme={"type": "alibi"})),
                ("rope k_prerotated", dict(base, scheme={"type": "rope"}, k_prerotated=True)),
                ("rope (rotates k)", dict(base, scheme={"type": "rope"})),
                ("batch %d x %d" % (B, L // B), {"scheme": {"type": "none"}, "q": batch,
                                                  "k": {"ref": "kb"}, "v": {"ref": "vb"},
                                                  "causal": True}),
            ]
            gb = 2.0 * L * Hkv * D * 4 / 1e9
            print("decode through posattnd (2 workers): Lq=1, H=%d, Hkv=%d, D=%d, causal, k and v "
                  "named tensors (%.0f MB); compute = timing.compute_us" % (H, Hkv, D, gb * 1e3))
            print("%-20s %12s %12s %8s %16s" % ("case", "best ms", "median ms", "GB/s",
                                               "client median ms"))
            for name, item in cases:
                body = json.dumps({"inputs": [item], "output_encoding": "b64"}).encode()
                for _ in range(0 if a.smoke else 3):
                    post(body)
                comp, wall = [], []
                for _ in range(reps):
                    ans, t = post(body)
                    out = ans["outputs"][0]
                    if "error" in out:
                        print("decode_service: %s: %s" % (name, out["error"]), file=sys.stderr)
                        return 1
                    comp.append(out["timing"]["compute_us"] / 1e3)
                    wall.append(t * 1e3)
                best = min(comp)
                print("%-20s %12.2f %12.2f %8.1f %16.2f" % (
                    name, best, statistics.median(comp), gb / (best / 1e3) if best > 0 else 0,
                    statistics.median(wall)))
        finally:
            if srv.stop(30) != 0:  # reported, not a failure of the benchmark (as before)
                print("decode_service: " + srv.failure(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
