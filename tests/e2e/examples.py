"""examples.py - the marked examples of the documentation, for the e2e
clients written in Python (client.py, v2_readme.py) to run as written.

A block follows a marker <!-- e2e: LANG NAME --> in README.md or a page of
docs/; E2E_EXAMPLES (paths joined with ":") reads other pages instead.
"""

import glob
import os
import re

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLES = os.environ.get("E2E_EXAMPLES") or ":".join(
    [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))


def read_examples():
    """The text of every page, one after another."""
    text = ""
    for path in EXAMPLES.split(":"):
        with open(path, encoding="utf-8") as f:
            text += f.read() + "\n"
    return text


def examples(lang):
    """The (name, code) blocks marked <!-- e2e: LANG NAME -->."""
    pat = r"<!-- e2e: %s (\S+) -->\s*```\w*\n(.*?)\n```" % re.escape(lang)
    return re.findall(pat, read_examples(), re.S)
