#!/usr/bin/python3
"""run-suites.py - runs test suites (make targets) one after another, each
with its whole output in a log, and prints one line per suite and one
overall line at the end: what `make test` and `.ci/run` show.

    tests/run-suites.py --logs DIR [--verbose] [--title NAME] [--carry FILE]
                        [--jobs N] [--alone SUITE,...] -- MAKE ARGS... :: SUITE...

Each SUITE runs as `MAKE ARGS... SUITE`, its output in DIR/SUITE.log (and on
the terminal too with --verbose, as `make test V=1` asks). The tests a suite
ran are counted from the lines the runners print themselves:
  cmocka (tests/run-unit.sh), shell checks  "NAME: N passed, M failed"
  Python unittest             "Ran N tests" and "FAILED (failures=F, errors=E)"
  node --test                 "# pass N", "# fail M"
A suite that prints none of these (a shell check, a load run) counts as one
test, passed when its exit status is 0. A suite whose exit status is not 0
always counts at least one failure, whatever its lines said.

--jobs N runs up to N suites at once (each in its own log; the lines are
printed in the suites' order all the same), but the first suite (the
build the others use) and the --alone ones (timing checks a neighbour
would disturb) run with nothing beside them. --verbose runs one at a time.

--carry FILE adds the totals of an earlier run (its DIR/summary.json) to the
overall line, so that .ci/run ends with one line for everything it ran.
The exit status is 1 when any suite failed (every suite still runs, so one
failure does not hide another), else 0.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

SUMMARY = re.compile(r"^[\w ,=-]+: (\d+) passed, (\d+) failed$", re.M)
PY_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
PY_FAILED = re.compile(r"^FAILED \(([^)]*)\)$", re.M)
NODE_PASS = re.compile(r"^# pass (\d+)$", re.M)
NODE_FAIL = re.compile(r"^# fail (\d+)$", re.M)
# cmocka's ERROR lines, unittest's FAIL:/ERROR: headers and assertion lines,
# node's "not ok", shell checks' "FAIL ...".
FAILURE_LINE = re.compile(r"^(ERROR|FAIL|\[  ERROR|\[  FAILED|AssertionError|not ok|.*error:)")


def count(text):
    """(passed, failed, found) from the runners' own summary lines."""
    passed = failed = 0
    found = False
    for m in SUMMARY.finditer(text):
        passed += int(m.group(1))
        failed += int(m.group(2))
        found = True
    ran = [int(m.group(1)) for m in PY_RAN.finditer(text)]
    if ran:
        found = True
        bad = 0
        for m in PY_FAILED.finditer(text):
            for part in m.group(1).split(","):
                k, _, v = part.strip().partition("=")
                if k in ("failures", "errors") and v.isdigit():
                    bad += int(v)
        passed += sum(ran) - bad
        failed += bad
    for m in NODE_PASS.finditer(text):
        passed += int(m.group(1))
        found = True
    for m in NODE_FAIL.finditer(text):
        failed += int(m.group(1))
        found = True
    return passed, failed, found


def run(cmd, log_path, verbose):
    start = time.monotonic()
    with open(log_path, "wb") as log:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for chunk in iter(lambda: p.stdout.read1(65536), b""):
            log.write(chunk)
            if verbose:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        rc = p.wait()
    return rc, time.monotonic() - start


class Results:
    """Each suite's (exit status, seconds) as it ends; get waits for one."""

    def __init__(self):
        self.done = {}
        self.cv = threading.Condition()

    def put(self, suite, value):
        with self.cv:
            self.done[suite] = value
            self.cv.notify_all()

    def get(self, suite):
        with self.cv:
            while suite not in self.done:
                self.cv.wait()
            return self.done[suite]


def schedule(suites, make, a):
    """Starts the suites in a thread: one at a time, or up to --jobs at once
    with the first and the --alone ones by themselves. Returns the Results
    the caller reads in order while the rest still run."""
    results = Results()
    jobs = 1 if a.verbose else max(1, a.jobs)
    alone = {x for x in a.alone.split(",") if x}

    def one(s):
        results.put(s, run(make + [s], os.path.join(a.logs, s + ".log"), a.verbose))

    def driver():
        running = []
        for i, s in enumerate(suites):
            solo = jobs == 1 or i == 0 or s in alone
            while running and (solo or len(running) >= jobs):
                running = [t for t in running if t.is_alive()]
                if running and (solo or len(running) >= jobs):
                    time.sleep(0.05)
            t = threading.Thread(target=one, args=(s,))
            t.start()
            running.append(t)
            if solo:
                t.join()
                running = []
        for t in running:
            t.join()

    threading.Thread(target=driver, daemon=True).start()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", required=True)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--title", default="make test")
    ap.add_argument("--carry", help="summary.json of an earlier run to add in")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--alone", default="", help="suites that run with no other beside them")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    if "::" not in rest:
        ap.error("expected MAKE ARGS... :: SUITE...")
    k = rest.index("::")
    make, suites = rest[:k], rest[k + 1:]
    os.makedirs(a.logs, exist_ok=True)

    total_p = total_f = 0
    failed_suites = []
    width = max(len(s) for s in suites) if suites else 0
    t0 = time.monotonic()
    results = schedule(suites, make, a)
    for s in suites:
        log_path = os.path.join(a.logs, s + ".log")
        rc, secs = results.get(s)
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        p, f_, found = count(text)
        if not found:
            p, f_ = (1, 0) if rc == 0 else (0, 1)
        elif rc != 0 and f_ == 0:
            f_ = 1  # it failed where no runner counted (a crash, a build error)
        total_p += p
        total_f += f_
        status = "ok" if rc == 0 else "FAILED"
        print(f"{s:<{width}}  {status:<6} {p:5d} passed, {f_} failed  {secs:6.1f} s", flush=True)
        if rc != 0:
            failed_suites.append(s)
            if not a.verbose:
                lines = text.rstrip("\n").split("\n")
                # The lines that say what failed, wherever they are, then the end.
                said = [l for l in lines if FAILURE_LINE.search(l)][:30]
                if said:
                    print(f"---- {s}: failure lines of {log_path} ----")
                    print("\n".join(said))
                print(f"---- {s}: the last {min(25, len(lines))} lines ----")
                print("\n".join(lines[-25:]))
                print("----", flush=True)

    summary = {"passed": total_p, "failed": total_f, "suites": len(suites),
               "failed_suites": failed_suites, "seconds": round(time.monotonic() - t0, 1)}
    with open(os.path.join(a.logs, "summary.json"), "w") as f:
        json.dump(summary, f)
    extra = ""
    if a.carry:
        try:
            with open(a.carry) as f:
                c = json.load(f)
            total_p += c["passed"]
            total_f += c["failed"]
            failed_suites = c["failed_suites"] + failed_suites
            extra = f" (with the {c['suites']} suites of make test)"
        except (OSError, ValueError, KeyError) as e:
            print(f"run-suites: cannot read {a.carry}: {e}", file=sys.stderr)
            total_f += 1
    wall = time.monotonic() - t0
    tail = f"; failed: {' '.join(failed_suites)}" if failed_suites else ""
    print(f"{a.title}: {total_p} passed, {total_f} failed{extra} in {wall:.0f} s{tail}"
          f" (logs in {a.logs})")
    return 1 if total_f or failed_suites else 0


if __name__ == "__main__":
    sys.exit(main())
