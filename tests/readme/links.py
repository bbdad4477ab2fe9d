#!/usr/bin/python3
"""links.py - every relative link of README.md, docs/*.md and the clients'
and deploy's READMEs resolves: the file (or folder) exists, and a #anchor
names a heading of the page it points at (GitHub's slugs: lower case,
punctuation dropped, spaces to dashes). README.md must link every page of
docs/, so none is orphaned. Prints each broken link; exit 1 if any.

    /usr/bin/python3 tests/readme/links.py
"""

import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")


def slug(heading):
    t = heading.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(path):
    out, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence and re.match(r"#{1,6} ", line):
                out.add(slug(line.lstrip("#")))
    return out


def prose(path):
    """The text of a page outside its code blocks (a link in code is code)."""
    with open(path, encoding="utf-8") as f:
        return re.sub(r"```.*?```", "", f.read(), flags=re.S)


def main():
    pages = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    pages += sorted(glob.glob(os.path.join(ROOT, "clients", "*", "README.md")))
    pages += sorted(glob.glob(os.path.join(ROOT, "deploy", "*", "README.md")))
    bad, n = [], 0
    for page in pages:
        rel_page = os.path.relpath(page, ROOT)
        for label, target in LINK.findall(prose(page)):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            n += 1
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not dest.startswith(ROOT + os.sep) and dest != ROOT:
                bad.append(f"{rel_page}: [{label}]({target}) leaves the repository")
            elif not os.path.exists(dest):
                bad.append(f"{rel_page}: [{label}]({target}): no {os.path.relpath(dest, ROOT)}")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append(f"{rel_page}: [{label}]({target}): {os.path.relpath(dest, ROOT)} "
                           f"has no heading #{anchor}")
    readme = prose(os.path.join(ROOT, "README.md"))
    for doc in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        name = "docs/" + os.path.basename(doc)
        if f"]({name}" not in readme:
            bad.append(f"README.md does not link {name}")
    for b in bad:
        print("FAIL " + b)
    print(f"links: {n} relative links in {len(pages)} pages, {len(bad)} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
