#!/usr/bin/python3
"""check_layering.py - the arrows of posattn's source tree, checked.

The tree is its architecture (docs/architecture.md):

    server/main.c -> http/ -> runtime/, v2/ -> api/ -> model/, store/ -> codec/ -> common/ -> include/ <- lib/

(runtime/ and v2/ stand side by side: neither includes the other.) A folder
may include its own headers and those of the folders below it, never those
above it; every server file names the header it
includes by folder ("codec/tensor.h"), so the folder shows in the line.
Only include/ is public: nothing outside lib/ and tests/ reaches into lib/,
but for bench/ including a lib/ header that declares itself a test-only
interface ("test-only interface" in its opening comment). A server header
that opens with "private to X/" is included only from server/X/. bench/
includes include/, its own files, tests/' reference helpers and the
server's codec/ (the benchmarks of the wire formats); tools/ includes its
own files and include/. libmicrohttpd belongs to http/, libuv to runtime/;
lib/ and include/ use libc, libm and CBLAS only.

With --objects DIR (the build folder's server/, after a build), the
references between object files (nm: which file's symbol another file
uses) are checked by the same rule, and no files may form a circle of such
uses, in one folder or across folders: that catches a call that slips past
the headers (a local extern declaration) and circles inside a folder.

    tools/check_layering.py [--root DIR] [--objects DIR]
    tools/check_layering.py --self-test    plants upward includes in a copy
                                           and checks that each one fails

Exit status 0 when the tree keeps the rules, 1 with one line per broken
rule ("server/codec/tensor.c:12: includes "api/json.h": codec/ may not
include api/ ...").
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Each server folder, and the folders below it that it may include (besides
# itself and include/). The order is the one of the request path, top down.
LAYERS = [
    ("", ["http", "runtime", "v2", "api", "model", "store", "codec", "common"]),  # server/main.c
    ("http", ["runtime", "v2", "api", "model", "store", "codec", "common"]),
    ("runtime", ["api", "model", "store", "codec", "common"]),
    ("v2", ["api", "model", "store", "codec", "common"]),
    ("api", ["model", "store", "codec", "common"]),
    ("model", ["codec", "common"]),
    ("store", ["codec", "common"]),
    ("codec", ["common"]),
    ("common", []),
]
ALLOWED = dict(LAYERS)
# include/: posattn.h, the parts it includes, posattn_diff.h and posattn_mla.h.
PUBLIC = {"posattn.h", "posattn_schemes.h", "posattn_analysis.h", "posattn_diff.h",
          "posattn_mla.h"}

# System headers that belong to one part of the tree (prefix -> folders).
OWNED = {
    "microhttpd.h": {"http"},
    "gnutls/": {"http"},
    "uv.h": {"runtime"},
}
# Headers lib/ and include/ never include: the server's libraries.
SERVER_LIBS = re.compile(r"^(microhttpd|gnutls/|cjson/|cJSON|uv\b|uv\.h|curl/|pthread)")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


def sources(root, sub, exts=(".c", ".h")):
    base = os.path.join(root, sub)
    for d, dirs, files in os.walk(base):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(exts):
                yield os.path.join(d, f)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1), m.group(2)


def folder_of(root, path):
    """The server folder of a file ("" for server/ itself), or None."""
    rel = os.path.relpath(path, os.path.join(root, "server"))
    parts = rel.split(os.sep)
    if parts[0] == "..":
        return None
    return parts[0] if len(parts) > 1 else ""


def name(folder):
    return "server/" + (folder + "/" if folder else "")


def check_includes(root):
    errors = []
    for path in sources(root, "server"):
        rel = os.path.relpath(path, root)
        folder = folder_of(root, path)
        if folder not in ALLOWED:
            errors.append("%s: a folder the layering rules do not know: add it to %s" %
                          (rel, os.path.relpath(__file__, root)))
            continue
        for n, kind, inc in includes(path):
            where = "%s:%d: includes %s%s%s" % (rel, n, "<" if kind == "<" else '"', inc,
                                                ">" if kind == "<" else '"')
            if kind == "<":
                for lib, owners in OWNED.items():
                    if (inc == lib or (lib.endswith("/") and inc.startswith(lib))) and \
                            folder not in owners:
                        errors.append("%s: %s belongs to %s only" %
                                      (where, lib, ", ".join(name(o) for o in sorted(owners))))
                continue
            if inc.startswith("../") or "/../" in inc:
                errors.append("%s: name headers from server/ (\"codec/tensor.h\"), not by ../" % where)
                continue
            top = inc.split("/")[0] if "/" in inc else None
            if top is None:
                if inc not in PUBLIC:
                    errors.append("%s: server files name their headers by folder "
                                  "(\"%s/%s\"); only include/'s headers go bare" %
                                  (where, folder or "FOLDER", inc))
                continue
            if top == folder:
                continue
            if top not in ALLOWED or top == "":
                errors.append("%s: no such server folder %s/" % (where, top))
                continue
            if top not in ALLOWED[folder]:
                below = ", ".join(f + "/" for f in ALLOWED[folder]) or "nothing but include/"
                errors.append("%s: %s may not include %s/ (not below it); %s may include %s" %
                              (where, name(folder), top, name(folder), below))
    for sub in ("lib", "include"):
        for path in sources(root, sub):
            rel = os.path.relpath(path, root)
            for n, kind, inc in includes(path):
                if SERVER_LIBS.match(inc):
                    errors.append("%s:%d: includes %s: lib/ and include/ use libc, libm and CBLAS "
                                  "only" % (rel, n, inc))
                if kind == '"' and (inc.startswith("../") or
                                    (sub == "include" and inc not in PUBLIC)):
                    errors.append("%s:%d: includes \"%s\": include/ is the whole public API and "
                                  "names nothing outside itself" % (rel, n, inc))
    # Only include/ is public: the server never sees lib/'s private headers.
    private = {os.path.basename(p) for p in sources(root, "lib", (".h",))}
    for path in sources(root, "server"):
        rel = os.path.relpath(path, root)
        for n, kind, inc in includes(path):
            if kind == '"' and (inc.startswith("lib/") or inc in private):
                errors.append("%s:%d: includes \"%s\": only include/ is public" % (rel, n, inc))
    errors += check_private(root)
    errors += check_bench_tools(root)
    return errors


def opening(path, lines=16):
    """The first lines of a file (its opening comment), as one string."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return " ".join(f.readline() for _ in range(lines))


PRIVATE = re.compile(r"^/\* [\w.]+ - private to (\w+)/")


def check_private(root):
    """A header that says "private to X/" is included only from server/X/."""
    errors = []
    owner = {}
    for path in sources(root, "server", (".h",)):
        m = PRIVATE.search(opening(path, 1))
        if m:
            owner[os.path.relpath(path, os.path.join(root, "server"))] = m.group(1)
    for path in sources(root, "server"):
        rel = os.path.relpath(path, root)
        folder = folder_of(root, path)
        for n, kind, inc in includes(path):
            if kind == '"' and inc in owner and owner[inc] != folder:
                errors.append("%s:%d: includes \"%s\", which is private to %s/: use the header %s/ "
                              "offers to others (api/protocol.h, api/api.h, ...)" %
                              (rel, n, inc, owner[inc], owner[inc]))
    return errors


def test_only(root, inc):
    path = os.path.join(root, "lib", inc)
    return os.path.exists(path) and "test-only interface" in opening(path)


def check_bench_tools(root):
    """bench/ and tools/ keep to the public API (and their own files)."""
    errors = []
    for sub in ("bench", "tools"):
        for path in sources(root, sub):
            rel = os.path.relpath(path, root)
            here = os.path.dirname(path)
            for n, kind, inc in includes(path):
                if kind != '"' or inc in PUBLIC or os.path.exists(os.path.join(here, inc)):
                    continue
                where = "%s:%d: includes \"%s\"" % (rel, n, inc)
                if sub == "bench":
                    if os.path.exists(os.path.join(root, "tests", inc)) and "/" not in inc:
                        continue  # the double-precision references
                    if inc.startswith("codec/"):
                        continue  # the benchmarks of the wire formats
                    if os.path.exists(os.path.join(root, "lib", inc)):
                        if not test_only(root, inc):
                            errors.append("%s: lib/'s private headers are not for bench/ (only "
                                          "those that declare a test-only interface)" % where)
                        continue
                    errors.append("%s: bench/ includes include/, its own files, tests/' "
                                  "references and server/codec/ only" % where)
                else:
                    errors.append("%s: tools/ includes include/ and its own files only" % where)
    return errors


def nm(path):
    out = subprocess.run(["nm", "--defined-only", "-g", path], capture_output=True, text=True,
                         check=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if len(l.split()) == 3}
    out = subprocess.run(["nm", "-u", path], capture_output=True, text=True, check=True).stdout
    used = {l.split()[-1] for l in out.splitlines() if l.strip()}
    return defined, used


def check_objects(root, objdir):
    """Symbol references between the server's object files."""
    errors = []
    objs = {}
    for d, dirs, files in os.walk(objdir):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".o") and not f.startswith("embed_"):
                rel = os.path.relpath(os.path.join(d, f), objdir)
                objs[rel[:-2] + ".c"] = nm(os.path.join(d, f))
    if not objs:
        return ["%s: no object files (build first)" % objdir]
    owner = {}
    for src, (defined, _) in objs.items():
        for s in defined:
            owner[s] = src
    uses = {src: {owner[s] for s in used if s in owner and owner[s] != src}
            for src, (_, used) in objs.items()}
    for src, targets in sorted(uses.items()):
        f = src.split("/")[0] if "/" in src else ""
        for t in sorted(targets):
            g = t.split("/")[0] if "/" in t else ""
            if f in ALLOWED and g != f and g not in ALLOWED[f]:
                syms = sorted(s for s in objs[src][1] if owner.get(s) == t)
                errors.append("server/%s uses %s of server/%s: %s may not call into %s/" %
                              (src, ", ".join(syms[:3]), t, name(f), g))
    for circle in circles(uses):
        errors.append("a circle of files that use each other's symbols: %s" %
                      " -> ".join("server/" + c for c in circle + circle[:1]))
    return errors


def circles(graph):
    """The strongly connected components of more than one node (Tarjan), each
    as a path through its nodes in the order the search met them."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp, key=lambda n: index[n]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def self_test(root):
    """Each planted upward include must make the check fail, naming it."""
    plants = [
        ("server/codec/tensor.c", '#include "api/json.h"\n', "codec/ may not include api/"),
        ("server/api/json.c", '#include "v2/v2.h"\n', "api/ may not include v2/"),
        ("server/common/reply.c", '#include "codec/tensor.h"\n', "common/ may not include codec/"),
        ("server/store/tensor_store.c", '#include "http/http.h"\n', "store/ may not include http/"),
        ("server/api/job.c", '#include "json.h"\n', "name their headers by folder"),
        ("server/api/job.c", "#include <microhttpd.h>\n", "microhttpd.h belongs to"),
        ("server/http/http.c", '#include "internal.h"\n', "name their headers by folder"),
        ("lib/rope.c", "#include <cjson/cJSON.h>\n", "libc, libm and CBLAS only"),
        ("server/v2/model.c", '#include "api/json.h"\n', "private to api/"),
        ("server/runtime/metrics.c", '#include "api/job.h"\n', "private to api/"),
        ("server/main.c", '#include "http/request.h"\n', "private to http/"),
        ("bench/bench_decode.c", '#include "attention_kernel.h"\n', "lib/'s private headers"),
        ("bench/bench_decode.c", '#include "api/json.h"\n', "bench/ includes include/"),
        ("tools/load/hist.c", '#include "codec/tensor.h"\n', "tools/ includes include/"),
    ]
    if check_includes(root):
        print("self-test: the tree itself fails the check", file=sys.stderr)
        return 1
    for path, line, want in plants:
        with tempfile.TemporaryDirectory() as tmp:
            for sub in ("server", "lib", "include", "bench", "tools", "tests"):
                shutil.copytree(os.path.join(root, sub), os.path.join(tmp, sub),
                                ignore=shutil.ignore_patterns("node_modules", "corpus*"))
            with open(os.path.join(tmp, path), "a", encoding="utf-8") as f:
                f.write(line)
            errs = check_includes(tmp)
            if not any(want in e and path in e for e in errs):
                print("self-test: planting %s in %s was not caught (%s)" %
                      (line.strip(), path, errs or "no errors"), file=sys.stderr)
                return 1
    print("check-layering self-test: %d planted includes, each caught" % len(plants))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--objects", help="the build folder's server/ (checks symbol references too)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test(a.root)
    errors = check_includes(a.root)
    if a.objects:
        errors += check_objects(a.root, a.objects)
    for e in errors:
        print("layering: " + e)
    if errors:
        print("check-layering: %d broken rule%s (tools/check_layering.py)" %
              (len(errors), "" if len(errors) == 1 else "s"))
        return 1
    print("check-layering: ok (%s)" % ("includes and symbols" if a.objects else "includes"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
