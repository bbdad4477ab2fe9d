#!/usr/bin/python3
"""quickstart.py - README.md's quickstart, run as written.

Reads the blocks marked <!-- quickstart: LANG NAME --> from README.md and:
  sh run     runs it (`make run`) with POSATTN_PORT set to a free port, as
             README says one may, in its own process group; waits for the
             server to print the web page's URL on that port;
  sh curl    runs it against that server (the URL's port replaced) and
             checks the answer against the comment under the command: the
             text before "..." starts the answer, the text after ends it;
  python     runs it with /usr/bin/python3 and the client from clients/python
             on PYTHONPATH (README says `pip install ./clients/python`; the
             install itself is tested by tests/clients/test_python_client.py)
             and checks what it prints against the comment on its print line;
  sh test    is `make test` itself: checked to exist, not run from within.
Then SIGTERM to the group: posattnd drains and must exit 0.

    /usr/bin/python3 tests/readme/quickstart.py [--build DIR] [--timeout S]

BUILD (or --build) is passed to make so that the run reuses the build folder
of the caller (make test's); nothing is installed when nothing is missing.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
README_URL = "http://127.0.0.1:8080"


def blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"<!-- quickstart: (\w+)(?: (\w+))? -->\s*```\w*\n(.*?)\n```", text, re.S)
    return {(lang, name or ""): code for lang, name, code in found}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(msg):
    print(f"quickstart: FAIL {msg}")
    sys.exit(1)


def expected_comment(code, marker):
    """The '# ...' comment line after the line holding marker."""
    lines = code.split("\n")
    for i, line in enumerate(lines):
        if marker in line:
            m = re.search(r"#\s*(.*)$", line) if marker == "print(" else None
            if m:
                return m.group(1).strip()
            for nxt in lines[i + 1:]:
                if nxt.startswith("# "):
                    return nxt[2:].strip()
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    b = blocks()
    for key in [("sh", "run"), ("sh", "curl"), ("python", ""), ("sh", "test")]:
        if key not in b:
            fail(f"README.md has no <!-- quickstart: {' '.join(key).strip()} --> block")
    if not re.match(r"make test\b", b[("sh", "test")]):
        fail("the test block is not `make test`")
    run = b[("sh", "run")].split("#")[0].strip()
    if run != "make run":
        fail(f"the run block is {run!r}, expected `make run`")

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES") and
           not k.startswith("POSATTN_")}
    env.update(POSATTN_PORT=str(port), BUILD=a.build)
    t0 = time.monotonic()
    srv = subprocess.Popen(["bash", "-c", run], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out_lines = []
    ready = threading.Event()

    def reader():
        for line in srv.stdout:
            out_lines.append(line)
            if f"web page  {url}/" in line:
                ready.set()
    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    try:
        if not ready.wait(a.timeout):
            fail(f"`make run` printed no web page URL for port {port} within {a.timeout:.0f} s:\n"
                 + "".join(out_lines[-30:]))
        started = time.monotonic() - t0
        if not any(f"API       {url}/v1/schemes" in l for l in out_lines):
            fail("the server did not print the API's URL")
        # Not silent while it builds (issue #36): it says so before building.
        if not any(l.startswith("make run: building") for l in out_lines):
            fail("`make run` did not say it was building:\n" + "".join(out_lines[:10]))

        code = b[("sh", "curl")].replace(README_URL, url)
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True,
                           text=True, timeout=30)
        if p.returncode != 0:
            fail(f"curl block: exit {p.returncode}: {p.stderr}")
        want = expected_comment(b[("sh", "curl")], "curl ")
        head, _, tail = want.partition("...")
        got = p.stdout.strip()
        if not (got.startswith(head) and got.endswith(tail)):
            fail(f"curl block answered {got!r}, README says {want!r}")
        print(f"ok   curl block: {got[:70]}...")

        code = b[("python", "")].replace(README_URL, url)
        penv = dict(env, PYTHONPATH=os.path.join(ROOT, "clients", "python"))
        p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                           timeout=30, env=penv)
        if p.returncode != 0:
            fail(f"python block: exit {p.returncode}: {p.stderr}")
        want = expected_comment(b[("python", "")], "print(")
        if p.stdout.strip() != want:
            fail(f"python block printed {p.stdout.strip()!r}, README says {want!r}")
        print(f"ok   python block: {want}")
    finally:
        try:
            os.killpg(srv.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
            fail("`make run` did not stop within 30 s of SIGTERM")
        rt.join(30)  # posattnd holds the pipe until it has drained
    # make exits with the signal, posattnd (exec'd by make's shell) said so.
    if not any("posattnd: stopped" in l or '"event":"stopped"' in l for l in out_lines):
        fail("posattnd did not report a clean stop:\n" + "".join(out_lines[-10:]))
    print(f"quickstart: ok (make run answered after {started:.1f} s; "
          f"the curl and python blocks as written)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
