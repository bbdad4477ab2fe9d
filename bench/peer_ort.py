#!/usr/bin/python3
"""peer_ort.py - posattn beside ONNX Runtime (npm onnxruntime-node, the ai.onnx
Attention operator of opset 23) on the same shapes, threads and machine, in
the same run (issue #18's targets: >= 1.25x non-causal prefill, >= 3x causal,
>= 2x decode).

    /usr/bin/python3 bench/peer_ort.py [--threads 2] [--rounds 3]
                                       [--bin build/bench/bench_peer_case]
    /usr/bin/python3 bench/peer_ort.py --smoke     tiny shapes, checks the plumbing

Every case is B=1, float32, no positional scheme.
  posattn  bench/bench_peer_case: one call over T threads as posattnd runs a
           request (prefill by query heads, decode by keys), q [L, H, D].
  ort      bench/ort/run.mjs: InferenceSession.run of one Attention node with
           intra-op threads = T, inputs in its own [1, H, L, D] layout (no
           transposes timed on its side). Decode is one query row against the
           whole cache, non-causal there (ONNX's is_causal is top-left
           aligned), which is what posattn's bottom-right causal row sees.
Each runs in its own process, one at a time, alternating: the best of reps
after a warm-up call, then the best over --rounds repetitions.
"""

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ORT = os.path.join(HERE, "ort")
TIMEOUT = 900

# name, Lq, Lk, H, Hkv, D, causal, reps, target (posattn speed-up over ORT)
CASES = [
    ("prefill", 2048, 2048, 8, 8, 64, 0, 5, 1.25),
    ("prefill", 2048, 2048, 8, 8, 128, 0, 5, 1.25),
    ("prefill", 8192, 8192, 8, 8, 64, 0, 2, 1.25),
    ("causal", 2048, 2048, 8, 8, 64, 1, 5, 3.0),
    ("decode", 1, 32768, 32, 8, 128, 1, 10, 2.0),
]
SMOKE = [("prefill", 64, 64, 2, 2, 16, 0, 1, 0), ("decode", 1, 300, 4, 2, 16, 1, 1, 0)]


def run(cmd):
    """Seconds printed by a child, or (None, reason)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, "timed out after %ds" % TIMEOUT
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    try:
        return float(p.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, "unreadable output %r" % p.stdout[-200:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(os.environ.get("BUILD", "build"), "bench",
                                                  "bench_peer_case"))
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()

    if not os.access(a.bin, os.X_OK):
        print("peer_ort: %s not found; build it with `make %s`" % (a.bin, a.bin), file=sys.stderr)
        return 1
    have_ort = os.path.isdir(os.path.join(ORT, "node_modules", "onnxruntime-node"))
    try:
        import onnx  # noqa: F401  (the model writer's dependency)
        have_onnx = True
    except ImportError:
        have_onnx = False
    if not (have_ort and have_onnx):
        print("peer_ort: ONNX Runtime skipped: %s (make deps-peers installs them)" % ", ".join(
            w for w, ok in (("npm onnxruntime-node in bench/ort", have_ort),
                            ("python3-onnx", have_onnx)) if not ok))
    cases = SMOKE if a.smoke else CASES
    rounds = 1 if a.smoke else max(a.rounds, 1)
    print("attention vs ONNX Runtime: B=1, float32, no scheme, %d threads each; "
          "wall-clock, best of reps and of %d rounds" % (a.threads, rounds))
    print("%-8s %6s %6s %4s %4s %4s %10s %10s %8s %7s %5s" % (
        "case", "Lq", "Lk", "H", "Hkv", "D", "posattn ms", "ort ms", "speed-up", "target",
        "met"))
    failed = False
    met = missed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, Lq, Lk, H, Hkv, D, causal, reps, target in cases:
            reps = 1 if a.smoke else reps
            ours = [a.bin] + [str(x) for x in (Lq, Lk, H, Hkv, D, causal, a.threads, reps)]
            theirs = None
            if have_ort and have_onnx:
                model = os.path.join(tmp, "%s_%d_%d_%d_%d.onnx" % (name, Lq, Lk, H, D))
                ort_causal = causal if Lq == Lk else 0
                gen = subprocess.run([sys.executable, os.path.join(ORT, "attention_model.py"),
                                      model] + [str(x) for x in (Lq, Lk, H, Hkv, D, ort_causal)],
                                     capture_output=True, text=True)
                if gen.returncode != 0:
                    print("peer_ort: model: %s" % gen.stderr.strip(), file=sys.stderr)
                    return 1
                theirs = ["node", os.path.join(ORT, "run.mjs"), model] + [
                    str(x) for x in (Lq, Lk, H, Hkv, D, a.threads, reps)]
            t = {"posattn": None, "ort": None}
            for _ in range(rounds):
                for who, cmd in (("posattn", ours), ("ort", theirs)):
                    if cmd is None:
                        continue
                    s, err = run(cmd)
                    if s is None:
                        print("peer_ort: %s %s: %s" % (who, name, err), file=sys.stderr)
                        failed = True
                        continue
                    t[who] = s if t[who] is None else min(t[who], s)
            sp = t["ort"] / t["posattn"] if t["ort"] and t["posattn"] else None
            ok = sp is not None and sp >= target
            counted = sp is not None and not a.smoke
            if counted:
                met, missed = (met + 1, missed) if ok else (met, missed + 1)
            print("%-8s %6d %6d %4d %4d %4d %10s %10s %8s %7s %5s" % (
                name, Lq, Lk, H, Hkv, D,
                "%.2f" % (t["posattn"] * 1e3) if t["posattn"] else "-",
                "%.2f" % (t["ort"] * 1e3) if t["ort"] else "-",
                "%.2fx" % sp if sp else "-", ">=%.2fx" % target if target else "-",
                ("met" if ok else "NO") if counted else "-"))
    print("ort targets: %d met, %d not met" % (met, missed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
