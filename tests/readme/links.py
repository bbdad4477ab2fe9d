#!/usr/bin/python3
"""links.py - every relative link of README.md, docs/*.md and the clients'
and deploy's READMEs resolves: the file (or folder) exists, and a #anchor
names a heading of the page it points at (GitHub's slugs: lower case,
punctuation dropped, spaces to dashes). README.md must link every page of
docs/, so none is orphaned.

Sections cited by name in prose are headings too: a quoted name next to a
page, as in the main README's "Quickstart", (README, "Quickstart"),
docs/api.md "Errors", "Errors" in docs/api.md or 'Errors' of
[the API](docs/api.md), must be a heading of that page ("README" is the
repository's; "its README", another project's, is not checked). And the
repository's files named in prose (`server/http/web/`, tests/e2e/tls.py),
there and in the web page's files (server/http/web/), must exist.

Prints each broken link; exit 1 if any.

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


# A page named in prose: the main README, a .md path, or a link to one.
PAGE = (r"(?P<its>\b(?:its|their)\s+)?(?:\bthe\s+)?(?:main\s+)?(?P<readme>\bREADME(?:\.md)?\b)(?![/.\w])"
        r"|`?(?P<path>(?<![\w./-])[\w./-]*\.md)\b`?"
        r"|\[[^\]]*\]\((?P<link>[^)\s#]+\.md)(?:#[^)\s]*)?\)")
QUOTED = (r"(?P<q>[\"'\u201c\u2018])(?P<name>[A-Z][^\"\u201c\u201d\n`]{0,80}?)"
          r"(?P<close>[\"'\u201d\u2019])")
CLOSE = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}
# PAGE's "NAME", PAGE "NAME", (PAGE, "NAME"); "NAME" in PAGE, 'NAME' section of PAGE.
SECTION_AFTER = re.compile(r"(?:%s)(?:['\u2019]s)?,?\s+(?:section\s+)?%s" % (PAGE, QUOTED))
SECTION_BEFORE = re.compile(r"%s\s+(?:section\s+)?(?:in|of)\s+(?:%s)" % (QUOTED, PAGE))
# A file of the repository named in prose (not in a URL, not a glob).
REPO_PATH = re.compile(r"(?<![\w./:-])((?:server|lib|include|tests|tools|docs|clients|deploy|bench)"
                       r"/[\w./-]*[\w/])(?![\w*{])")


def cited_page(m, page):
    """The file a PAGE match names, or None for another project's README."""
    if m.group("readme"):
        return None if m.group("its") else os.path.join(ROOT, "README.md")
    target = m.group("path") or m.group("link")
    here = os.path.normpath(os.path.join(os.path.dirname(page), target))
    if m.group("link") or os.path.exists(here):
        return here
    return os.path.normpath(os.path.join(ROOT, target))  # written from the root


def section_refs(page, text):
    """(quoted name, the page it is cited in) for each section cited by name."""
    flat = re.sub(r"\s+", " ", text)
    for rx in (SECTION_AFTER, SECTION_BEFORE):
        for m in rx.finditer(flat):
            if CLOSE[m.group("q")] != m.group("close"):
                continue
            dest = cited_page(m, page)
            if dest is not None:
                yield m.group("name").strip(), dest


def check_sections(page, text, bad):
    n = 0
    rel_page = os.path.relpath(page, ROOT)
    for name, dest in section_refs(page, text):
        n += 1
        rel = os.path.relpath(dest, ROOT)
        if not os.path.isfile(dest):
            bad.append(f'{rel_page}: section "{name}" of {rel}: no {rel}')
        elif slug(name) not in anchors(dest):
            bad.append(f'{rel_page}: section "{name}" of {rel}: {rel} has no such heading')
    return n


def check_paths(rel_page, text, bad):
    n = 0
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets are checked above
    for path in REPO_PATH.findall(text):
        n += 1
        if not os.path.exists(os.path.join(ROOT, path)):
            bad.append(f"{rel_page}: names {path}, which does not exist")
    return n


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
    sections = paths = 0
    for page in pages:
        text = prose(page)
        sections += check_sections(page, text, bad)
        paths += check_paths(os.path.relpath(page, ROOT), text, bad)
    for page in sorted(glob.glob(os.path.join(ROOT, "server", "http", "web", "*"))):
        if page.endswith((".html", ".js", ".css")):
            with open(page, encoding="utf-8") as f:
                paths += check_paths(os.path.relpath(page, ROOT), f.read(), bad)
    readme = prose(os.path.join(ROOT, "README.md"))
    for doc in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        name = "docs/" + os.path.basename(doc)
        if f"]({name}" not in readme:
            bad.append(f"README.md does not link {name}")
    for b in bad:
        print("FAIL " + b)
    print(f"links: {n} relative links, {sections} sections cited by name and {paths} files "
          f"named in {len(pages)} pages and the web page, {len(bad)} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
