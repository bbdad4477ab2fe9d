#!/usr/bin/python3
"""extrapolation_compare.py - the schemes side by side past the training
length: docs/extrapolation.md's table and docs/extrapolation.svg's plot.

    /usr/bin/python3 tools/extrapolation_compare.py [--posattnd build/posattnd]
        [--train 512] [--mult 8] [--heads 8] [--head-dim 64]
        [--md docs/extrapolation.md] [--svg docs/extrapolation.svg]
    /usr/bin/python3 tools/extrapolation_compare.py --quick --md OUT.md --svg OUT.svg

Starts posattnd on a free loopback port (tests/posattnd.py), sends one
/v1/analyze "extrapolation" per scheme below, all on the same inputs
("inputs": "gaussian", seed 1: q, k, v standard normal, causal), at one
length `mult` times the training length, in bands of half the training
length, and writes:
  - into the Markdown file, between the lines "<!-- table:begin -->" and
    "<!-- table:end -->" (the rest of the page is prose, left alone), a table:
    per scheme, the entropy and mean attended distance averaged over heads in
    the trained context and in the last band, and the last band's share of
    weight on keys farther than the training length;
  - an SVG with two panels, entropy and distance against query position,
    one line per scheme, the training length marked.

The inputs are random, not a trained model's: what the table shows is each
scheme's own pull (its bias, decay or scaling) on content that has none.
The learned schemes' parameters are chosen here, not trained (SCHEMES says
which). --quick runs a short length and a few schemes (a smoke test of the
script: make test runs it). Standard library only.
"""

import argparse
import json
import os
import random
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import posattnd  # noqa: E402


def rope(T, scaling=None, **kw):
    s = {"type": "rope"}
    if scaling:
        s["scaling"] = scaling
        s.update(kw)
    return s


def schemes(T, H, D):
    """(name, scheme, note) in table order; T the training length."""
    rng = random.Random(7)
    npos = T
    # CoPE's pos_emb [npos, D]: seeded N(0, 1/2), untrained (the reference
    # starts from zeros, which is NoPE): what shows is the clamp at npos - 1.
    pos_emb = [round(rng.gauss(0.0, 0.5), 6) for _ in range(npos * D)]
    yield "none (NoPE)", {"type": "none"}, ""
    yield "sinusoidal", {"type": "sinusoidal"}, "layer mode, x and weights gaussian"
    yield "rope", rope(T), "base 10000"
    yield "rope linear x4", rope(T, "linear", factor=4), ""
    yield "rope dynamic x4", rope(T, "dynamic", factor=4, original_max_position=T), ""
    yield "rope yarn x4", rope(T, "yarn", factor=4, original_max_position=T), ""
    yield "rope llama3 x4", rope(T, "llama3", factor=4, original_max_position=T), ""
    yield "rope ntk_alpha 4", rope(T, "ntk_alpha", alpha=4), ""
    yield "xpos", {"type": "xpos"}, "scale_base 512"
    yield "alibi", {"type": "alibi"}, "slopes 2^(-8h/H)"
    yield ("kerple log", {"type": "kerple", "form": "log", "r1": [1.0] * H,
                          "r2": [0.5 / 32.0 ** (h / max(H - 1, 1)) for h in range(H)]},
           "r1 1, r2 1/2 .. 1/64 geometric (chosen)")
    yield ("kerple power", {"type": "kerple", "form": "power", "r1": [0.5] * H,
                            "r2": [0.25 + 0.75 * h / max(H - 1, 1) for h in range(H)]},
           "r1 0.5, r2 0.25 .. 1 (chosen)")
    yield "sandwich", {"type": "sandwich"}, "parameter-free"
    yield ("fire", {"type": "fire", "w1": [1.0], "b1": [0.0],
                    "w2": [-(2.0 ** (h + 1)) for h in range(H)], "b2": [0.0] * H},
           "hidden 1: b = -2^(h+1) x (chosen)")
    yield ("cope", {"type": "cope", "npos_max": npos, "pos_emb": {"shape": [npos, D],
                                                                  "data": pos_emb}},
           "npos_max = T, pos_emb N(0, 1/4) (chosen)")


def post(url, body):
    req = urllib.request.Request(url + "/v1/analyze", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise SystemExit("%s: %s" % (body["scheme"]["type"], e.read().decode()[:400]))


def mean(xs):
    return sum(xs) / len(xs)


def run(url, T, mult, H, D, only):
    rows = []
    for name, scheme, note in schemes(T, H, D):
        if only and scheme["type"] not in only:
            continue
        ans = post(url, {"analysis": "extrapolation", "scheme": scheme, "train_length": T,
                         "band": T // 2, "lengths": [T * mult], "inputs": "gaussian",
                         "num_heads": H, "head_dim": D, "seed": 1})
        bands = ans["lengths"][0]["bands"]
        inside = [b for b in bands if b["to"] <= T]
        rows.append({
            "name": name, "note": note, "from": [b["from"] for b in bands],
            "entropy": [mean(b["entropy"]) for b in bands],
            "distance": [mean(b["distance"]) for b in bands],
            "in_entropy": mean([mean(b["entropy"]) for b in inside]),
            "in_distance": mean([mean(b["distance"]) for b in inside]),
            "far": mean(bands[-1]["far_share"]),
        })
    return rows


def table(rows, T, mult):
    out = ["| scheme | entropy within %d | entropy at %d | distance within %d | "
           "distance at %d | far share at %d | parameters |" % (T, T * mult, T, T * mult,
                                                                 T * mult),
           "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append("| %s | %.2f | %.2f | %.0f | %.0f | %.3f | %s |" % (
            r["name"], r["in_entropy"], r["entropy"][-1], r["in_distance"], r["distance"][-1],
            r["far"], r["note"]))
    return "\n".join(out)


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
           "#e377c2", "#7f7f7f", "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39",
           "#7b4173", "#3182bd"]


def svg(rows, T, mult):
    """Two panels (entropy, distance against query position) and a legend."""
    PH, PW, M = 300, 400, 50
    W = 2 * (PW + M + 10) + M + 190
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
             'font-family="sans-serif" font-size="11">' % (W, PH + 2 * M),
             '<rect width="100%" height="100%" fill="white"/>']
    xmax = T * mult
    for p, (key, title) in enumerate((("entropy", "entropy (nats)"),
                                      ("distance", "mean attended distance (positions)"))):
        x0, y0 = M + p * (PW + M + 10), M
        ys = [y for r in rows for y in r[key]]
        ylo, yhi = min(0.0, min(ys)), max(ys) * 1.05 or 1.0

        def X(v):
            return x0 + PW * v / xmax

        def Y(v):
            return y0 + PH - PH * (v - ylo) / (yhi - ylo)
        parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>'
                     % (x0, y0, PW, PH))
        parts.append('<text x="%d" y="%d" text-anchor="middle">%s against query position'
                     ' (band start)</text>' % (x0 + PW / 2, y0 - 8, title))
        for t in range(0, mult + 1, max(1, mult // 4)):
            parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>'
                         % (X(t * T), y0 + PH + 14, t * T))
        for f in (0.0, 0.5, 1.0):
            v = ylo + f * (yhi - ylo)
            parts.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                         % (x0 - 4, Y(v) + 4, "%.0f" % v if yhi > 100 else "%.3g" % v))
        parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#888" '
                     'stroke-dasharray="4 4"/>' % (X(T), X(T), y0, y0 + PH))
        for i, r in enumerate(rows):
            pts = " ".join("%.1f,%.1f" % (X(a + T / 4), Y(b)) for a, b in zip(r["from"], r[key]))
            parts.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                         % (COLOURS[i % len(COLOURS)], pts))
    lx = 2 * (PW + M + 10) + M - 10
    parts.append('<text x="%d" y="%d">training length %d (dashed)</text>' % (lx, M - 8, T))
    for i, r in enumerate(rows):
        y = M + 8 + 17 * i
        parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>'
                     % (lx, lx + 18, y, y, COLOURS[i % len(COLOURS)]))
        parts.append('<text x="%d" y="%d">%s</text>' % (lx + 24, y + 4, r["name"]))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_table(path, text):
    begin, end = "<!-- table:begin -->", "<!-- table:end -->"
    page = open(path).read() if os.path.exists(path) else "%s\n%s\n" % (begin, end)
    a, b = page.find(begin), page.find(end)
    if a < 0 or b < a:
        raise SystemExit("%s: no %s ... %s lines to write between" % (path, begin, end))
    page = page[:a + len(begin)] + "\n" + text + "\n" + page[b:]
    with open(path, "w") as f:
        f.write(page)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--posattnd", default="build/posattnd")
    ap.add_argument("--train", type=int, default=512)
    ap.add_argument("--mult", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--md", default="docs/extrapolation.md")
    ap.add_argument("--svg", default="docs/extrapolation.svg")
    ap.add_argument("--only", default="", help="comma-separated scheme types")
    ap.add_argument("--quick", action="store_true",
                    help="train 32, mult 4, 4 heads of 16, five schemes: a smoke run")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    if a.quick:
        a.train, a.mult, a.heads, a.head_dim = 32, 4, 4, 16
        only = only or {"none", "rope", "xpos", "fire", "cope"}
    srv = posattnd.start(a.posattnd, ["--workers", "1"])
    try:
        rows = run(srv.url, a.train, a.mult, a.heads, a.head_dim, only)
    finally:
        srv.stop(check=True)
    text = table(rows, a.train, a.mult)
    write_table(a.md, text)
    with open(a.svg, "w") as f:
        f.write(svg(rows, a.train, a.mult))
    print(text)
    # What the page claims, checked on every run: NoPE spreads past the
    # training length; every scheme's numbers are finite.
    nope = rows[0]
    assert nope["name"].startswith("none"), nope["name"]
    assert nope["entropy"][-1] > nope["in_entropy"] + 0.5, "NoPE's entropy does not grow"
    for r in rows:
        assert all(v == v and abs(v) != float("inf") for v in r["entropy"] + r["distance"]), r
    return 0


if __name__ == "__main__":
    sys.exit(main())
