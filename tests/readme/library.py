#!/usr/bin/python3
"""library.py - docs/library.md's program, built and run as the page says.

Reads the blocks marked <!-- library test: x.c --> (the program) and
<!-- library test: link --> (the commands) from docs/library.md. In a
temporary folder that stands for the repository root (include/ and build/
are links to the real ones, build/ to --build's folder), writes x.c and runs
the commands with sh -e as written. What ./x prints must be, line by line,
the comments on the program's printf lines (/* ... */ at their end).

    /usr/bin/python3 tests/readme/library.py [--build DIR]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PAGE = os.path.join(ROOT, "docs", "library.md")


def block(text, name, lang):
    m = re.search(r"<!-- library test: %s -->\s*```%s\n(.*?)```" % (re.escape(name), lang),
                  text, re.S)
    if not m:
        raise SystemExit("FAIL docs/library.md has no <!-- library test: %s --> "
                         "```%s block" % (name, lang))
    return m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build", help="the folder holding libposattn.a")
    a = ap.parse_args()
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    program, commands = block(text, "x.c", "c"), block(text, "link", "sh")
    # What each printf prints, in order: the comment closing its line.
    want = [m.group(1) for m in re.finditer(r"printf\(.*;\s*/\* (.*?) \*/\s*$", program, re.M)]
    failed, passed = [], 0
    if not want:
        failed.append("the program's printf lines have no /* expected output */ comments")
    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.join(ROOT, "include"), os.path.join(d, "include"))
        os.symlink(os.path.abspath(os.path.join(ROOT, a.build)), os.path.join(d, "build"))
        with open(os.path.join(d, "x.c"), "w") as f:
            f.write(program)
        p = subprocess.run(["sh", "-ec", commands], cwd=d, capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            failed.append("the commands failed (exit %d):\n%s\n%s%s"
                          % (p.returncode, commands, p.stdout, p.stderr))
        else:
            passed += 1
            got = p.stdout.splitlines()
            for i, line in enumerate(want):
                if i < len(got) and got[i] == line:
                    passed += 1
                else:
                    failed.append("line %d of ./x's output: %r, its comment says %r"
                                  % (i + 1, got[i] if i < len(got) else None, line))
            if len(got) > len(want):
                failed.append("./x printed more lines than the comments say: %r" % got[len(want):])
    for f in failed:
        print("FAIL " + f)
    print("docs/library.md's program, compiled, linked and run as the page says")
    print("library: %d passed, %d failed" % (passed, len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
