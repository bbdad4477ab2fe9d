#!/usr/bin/env bash
# test_load.sh - posattn-load against a spawned posattnd: the JSON report's
# structure and that its counts add up, 503s counted by status with a tiny
# queue, the refusals (no bound, non-loopback URL, unknown scheme), the
# layer-mode schemes, the structure of the SVG and HTML charts, --model
# (a loaded config's layers, reported per layer), --differential, --mla and
# --sessions (server-side KV caches: counts, memory, eviction, forks,
# CACHE_FULL).
#
# usage: tools/load/test_load.sh [BUILD]   (BUILD holds posattn-load and posattnd; default build)
set -u
BUILD=${1:-${BUILD:-build}}
LOAD=$BUILD/posattn-load
SRV=$BUILD/posattnd
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/       /' "$2" | tail -20; }

for f in "$LOAD" "$SRV"; do
    [ -x "$f" ] || { echo "test_load.sh: $f is missing (build it first)"; echo "load: 0 passed, 1 failed"; exit 1; }
done

# 1. Two schemes, ~3 s in all: the report's structure and its arithmetic.
if "$LOAD" --spawn "$SRV" --schemes rope,alibi --lengths 32 --heads 2 --head-dim 16 \
        --concurrency 4 --duration 1.2 --warmup 0.2 --batch 2 --seed 7 \
        --json "$TMP/run.json" --csv "$TMP/run.csv" --html "$TMP/run.html" \
        >"$TMP/run.out" 2>"$TMP/run.err"; then
    ok "two-scheme run exits 0"
else
    bad "two-scheme run exits 0" "$TMP/run.err"
fi
if $PY - "$TMP/run.json" >"$TMP/check1.out" 2>&1 <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["tool"] == "posattn-load"
cfg = r["config"]
assert cfg["schemes"] == ["rope", "alibi"], cfg["schemes"]
assert cfg["spawned"] is True and cfg["batch"] == 2
res = r["results"]
assert [x["scheme"] for x in res] == ["rope", "alibi"], [x["scheme"] for x in res]
for x in res:
    for k in ("length", "concurrency", "elapsed_s", "sent", "ok", "errors", "errors_by_status",
              "requests_per_s", "items_per_s", "latency_ms", "server"):
        assert k in x, k
    assert x["sent"] == x["ok"] + x["errors"], x
    assert x["errors"] == sum(x["errors_by_status"].values()), x
    assert x["ok"] > 10 and x["errors"] == 0, x
    lat = x["latency_ms"]
    assert lat["count"] == x["ok"]
    seq = [lat[k] for k in ("min", "p50", "p90", "p99", "p99_9", "max")]
    assert seq == sorted(seq) and seq[0] > 0, seq
    assert abs(x["items_per_s"] - 2 * x["requests_per_s"]) < 1e-6 * max(1, x["items_per_s"])
    assert abs(x["requests_per_s"] - x["ok"] / x["elapsed_s"]) < 1e-6 * x["requests_per_s"]
    s = x["server"]
    # The server computed exactly our items in this phase (warm-up excluded):
    # a task's compute is counted before its answer is sent.
    assert s["compute_count"] == 2 * x["ok"], (s, x["ok"])
    # The server counts a request after its answer is on the wire, so a
    # snapshot may miss the last few: within the concurrency, not exact.
    assert abs(s["request_count"] - x["sent"]) <= x["concurrency"], (s, x["sent"])
    assert s["queue_mean_ms"] >= 0 and s["compute_mean_ms"] > 0, s
print("ok")
PYEOF
then ok "JSON report: structure, sent = ok + errors, server counts match"
else bad "JSON report: structure, sent = ok + errors, server counts match" "$TMP/check1.out"; fi

if [ "$(wc -l <"$TMP/run.csv")" -eq 3 ] && head -1 "$TMP/run.csv" | grep -q '^scheme,length,concurrency,'; then
    ok "CSV: header and one row per phase"
else bad "CSV: header and one row per phase" "$TMP/run.csv"; fi

if grep -q '<svg' "$TMP/run.html" && [ "$(grep -c '<svg' "$TMP/run.html")" -ge 2 ] &&
        ! grep -qi '<script' "$TMP/run.html" && ! grep -Eq '(src|href)=' "$TMP/run.html"; then
    ok "HTML: inline SVG charts, no scripts or external resources"
else bad "HTML: inline SVG charts, no scripts or external resources" "$TMP/run.html"; fi

if grep -q '^rope ' "$TMP/run.out" && grep -q '^alibi ' "$TMP/run.out" && grep -q 'p99.9 ms' "$TMP/run.out"; then
    ok "terminal table has a row per scheme"
else bad "terminal table has a row per scheme" "$TMP/run.out"; fi

# 2. One worker, a queue of one, many clients: 503s, counted by status. The
#    items are big enough (~25 ms each) and b64 parses fast enough that tasks
#    pile up behind the one worker, rather than behind the HTTP threads.
if "$LOAD" --spawn "$SRV" --server-arg --queue-depth --server-arg 1 --server-arg --workers=1 \
        --schemes none --lengths 512 --heads 8 --head-dim 64 --concurrency 32 --requests 100 \
        --encoding b64 \
        --json "$TMP/busy.json" --quiet >"$TMP/busy.out" 2>"$TMP/busy.err"; then
    ok "saturated run exits 0"
else bad "saturated run exits 0" "$TMP/busy.err"; fi
if $PY - "$TMP/busy.json" >"$TMP/check2.out" 2>&1 <<'PYEOF'
import json, sys
x = json.load(open(sys.argv[1]))["results"][0]
assert x["sent"] == 100, x["sent"]
assert x["sent"] == x["ok"] + x["errors"], x
by = x["errors_by_status"]
assert by.get("503", 0) > 0, by
assert x["errors"] == sum(by.values()), x
assert "OVERLOADED" in x["error_samples"]["503"], x["error_samples"]
assert x["ok"] > 0, x
print("ok", x["ok"], by)
PYEOF
then ok "tiny queue: 503s counted as errors by status ($(tail -1 "$TMP/check2.out"))"
else bad "tiny queue: 503s counted as errors by status" "$TMP/check2.out"; fi

# 3. Refusals: no bound, a remote host; neither may send anything.
"$LOAD" --spawn "$SRV" --schemes rope >"$TMP/nobound.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'unbounded' "$TMP/nobound.out"; then
    ok "refuses to run without --duration/--requests (exit 2)"
else bad "refuses to run without --duration/--requests (exit $rc)" "$TMP/nobound.out"; fi

"$LOAD" --url http://192.0.2.1:8080 --requests 1 >"$TMP/remote.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'not a loopback' "$TMP/remote.out"; then
    ok "refuses a non-loopback --url (exit 2)"
else bad "refuses a non-loopback --url (exit $rc)" "$TMP/remote.out"; fi

"$LOAD" --url http://example.com --duration 1 >"$TMP/remote2.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'not a loopback' "$TMP/remote2.out"; then
    ok "refuses a host name that is not localhost (exit 2)"
else bad "refuses a host name that is not localhost (exit $rc)" "$TMP/remote2.out"; fi

"$LOAD" --spawn "$SRV" --schemes bogus --requests 1 >"$TMP/bogus.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "unknown scheme 'bogus'" "$TMP/bogus.out"; then
    ok "refuses an unknown scheme, naming it (exit 2)"
else bad "refuses an unknown scheme, naming it (exit $rc)" "$TMP/bogus.out"; fi

# 3b. The absolute schemes in layer mode (x, w_q, w_k, w_v), two
#     concurrencies: every phase counted and answered without item errors;
#     the SVG image and the HTML page carry the charts they should.
if "$LOAD" --spawn "$SRV" --schemes sinusoidal,learned --lengths 24 --heads 4 --kv-heads 2 \
        --head-dim 8 --concurrency 1,2 --requests 6 --causal --json "$TMP/layer.json" \
        --svg "$TMP/layer.svg" --html "$TMP/layer.html" --quiet >"$TMP/layer.out" 2>&1; then
    ok "layer-mode run (sinusoidal, learned) exits 0"
else bad "layer-mode run (sinusoidal, learned) exits 0" "$TMP/layer.out"; fi
if $PY - "$TMP/layer.json" "$TMP/layer.svg" "$TMP/layer.html" >"$TMP/check3b.out" 2>&1 <<'PYEOF'
import json, sys
import xml.etree.ElementTree as ET
r = json.load(open(sys.argv[1]))["results"]
got = [(x["scheme"], x["concurrency"]) for x in r]
assert got == [("sinusoidal", 1), ("sinusoidal", 2), ("learned", 1), ("learned", 2)], got
for x in r:
    assert x["sent"] == 6 and x["ok"] == 6 and x["errors"] == 0, x
    assert x["server"]["compute_count"] == 6, x["server"]
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[2]).getroot()
assert root.tag == NS + "svg" and "viewBox" in root.attrib, root.attrib
charts = root.findall(NS + "svg")
assert len(charts) == 2, len(charts)
# Latency: one bar per (phase, percentile), each titled with its value.
bars = [b for b in charts[0].iter(NS + "rect") if b.find(NS + "title") is not None]
assert len(bars) == 4 * 4, len(bars)
titles = [b.find(NS + "title").text for b in bars]
assert sum(t.startswith("p50:") for t in titles) == 4, titles
for b in bars:
    assert int(b.get("height")) >= 0
labels = "".join(t.text or "" for t in charts[0].iter(NS + "text"))
assert "sinusoidal L=24 c=2" in labels and "learned L=24 c=1" in labels, labels
# Throughput vs concurrency: one line per scheme, one point per phase.
assert len(list(charts[1].iter(NS + "polyline"))) == 2
assert len(list(charts[1].iter(NS + "circle"))) == 4
assert "concurrency" in "".join(t.text or "" for t in charts[1].iter(NS + "text"))
html = open(sys.argv[3]).read()
assert html.count("<svg") == 4 and "Throughput vs concurrency" in html, html.count("<svg")
print("ok")
PYEOF
then ok "layer mode counted per phase; SVG: latency bars per phase and percentile, throughput vs concurrency"
else bad "layer mode counted per phase; SVG: latency bars per phase and percentile, throughput vs concurrency" "$TMP/check3b.out"; fi

"$LOAD" --spawn "$SRV" --schemes rope,t5,shaw --layer --lengths 16 --heads 2 --head-dim 8 \
    --requests 4 --causal --json "$TMP/layer2.json" --quiet >"$TMP/layer2.out" 2>&1
if $PY -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["config"]["layer"] is True, r["config"]
assert [(x["scheme"], x["ok"], x["errors"]) for x in r["results"]] == \
    [("rope", 4, 0), ("t5", 4, 0), ("shaw", 4, 0)], r["results"]
' "$TMP/layer2.json" >"$TMP/check3c.out" 2>&1; then
    ok "--layer sends the q/k/v schemes in layer mode too: all 200 without item errors"
else bad "--layer sends the q/k/v schemes in layer mode too: all 200 without item errors" "$TMP/check3c.out"; fi

# 4. Same seed, same bytes: two --requests runs send identical bodies.
"$LOAD" --spawn "$SRV" --schemes t5,shaw --lengths 16 --heads 2 --head-dim 8 --requests 5 \
    --encoding b64 --causal --json "$TMP/b64.json" --quiet >"$TMP/b64.out" 2>&1
if $PY -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert [x["ok"] for x in r] == [5, 5], r
' "$TMP/b64.json" >"$TMP/check4.out" 2>&1; then
    ok "t5 and shaw (tables), b64 both ways, causal: all 200 without item errors"
else bad "t5 and shaw (tables), b64 both ways, causal: all 200 without item errors" "$TMP/check4.out"; fi

# 5. --dump-body writes the first request and sends nothing (no server given).
if "$LOAD" --url http://127.0.0.1:9 --schemes alibi,rope --lengths 8,16 --heads 2 --head-dim 4 \
        --encoding b64 --dump-body "$TMP/body.json" >"$TMP/dump.out" 2>&1 &&
    $PY -c '
import json, sys
b = json.load(open(sys.argv[1]))
assert b["output_encoding"] == "b64" and len(b["inputs"]) == 1, b
it = b["inputs"][0]
assert it["scheme"] == {"type": "alibi"} and it["q"]["shape"] == [8, 2, 4], it
' "$TMP/body.json" >>"$TMP/dump.out" 2>&1; then
    ok "--dump-body writes the first phase's request and exits"
else bad "--dump-body writes the first phase's request and exits" "$TMP/dump.out"; fi

# 5b. --return puts the result names in every item; the server answers
# them (entropy and distance [H, L] beside no output); a bad name is refused.
if "$LOAD" --url http://127.0.0.1:9 --schemes rope --lengths 8 --heads 2 --head-dim 4 \
        --return entropy,distance --dump-body "$TMP/body_ret.json" >"$TMP/ret.out" 2>&1 &&
    $PY -c '
import json, sys
it = json.load(open(sys.argv[1]))["inputs"][0]
assert it["return"] == ["entropy", "distance"], it["return"]
' "$TMP/body_ret.json" >>"$TMP/ret.out" 2>&1 &&
    "$LOAD" --spawn "$SRV" --schemes rope --lengths 32 --heads 2 --head-dim 16 --requests 3 \
        --causal --return output,entropy,distance --json "$TMP/ret.json" --quiet >>"$TMP/ret.out" 2>&1 &&
    $PY -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["config"]["return"] == "output,entropy,distance", r["config"]
assert [(x["ok"], x["errors"]) for x in r["results"]] == [(3, 0)], r["results"]
' "$TMP/ret.json" >>"$TMP/ret.out" 2>&1 &&
    ! "$LOAD" --url http://127.0.0.1:9 --return output,bogus --requests 1 >>"$TMP/ret.out" 2>&1; then
    ok "--return entropy,distance: in every item, answered, bad names refused"
else bad "--return entropy,distance: in every item, answered, bad names refused" "$TMP/ret.out"; fi

# 6. The options of current models: --softcap, --sinks, --chunk go into every
# item and the server answers them all; the presets set a model's defaults
# (flags given as well win), rope:mrope sends M-RoPE sections.
"$LOAD" --spawn "$SRV" --schemes rope,rope:mrope --lengths 32 --heads 4 --kv-heads 2 \
    --head-dim 16 --requests 4 --causal --softcap 20 --sinks --chunk 8 --batch 2 \
    --json "$TMP/opts.json" --quiet >"$TMP/opts.out" 2>&1
if $PY -c '
import json, sys
r = json.load(open(sys.argv[1]))
c = r["config"]
assert (c["softcap"], c["sinks"], c["chunk_size"]) == (20, True, 8), c
assert [(x["scheme"], x["ok"], x["errors"]) for x in r["results"]] == \
    [("rope", 4, 0), ("rope:mrope", 4, 0)], r["results"]
' "$TMP/opts.json" >"$TMP/check6.out" 2>&1; then
    ok "--softcap, --sinks, --chunk and rope:mrope: all 200 without item errors"
else bad "--softcap, --sinks, --chunk and rope:mrope: all 200 without item errors" "$TMP/check6.out"; fi
for preset in gemma2 gpt-oss llama4-chunked qwen2-vl; do
    "$LOAD" --preset $preset --lengths 8 --heads 8 --dump-body "$TMP/p-$preset.json" \
        >"$TMP/p-$preset.out" 2>&1 || echo "exit $?" >>"$TMP/p-$preset.out"
done
if $PY - "$TMP" >"$TMP/check6b.out" 2>&1 <<'PYEOF'
import json, sys
it = {p: json.load(open("%s/p-%s.json" % (sys.argv[1], p)))["inputs"][0]
      for p in ("gemma2", "gpt-oss", "llama4-chunked", "qwen2-vl")}
assert it["gemma2"]["softcap"] == 50 and it["gemma2"]["causal"] is True
assert it["gemma2"]["q"]["shape"] == [8, 8, 256] and it["gemma2"]["k"]["shape"] == [8, 4, 256]
assert it["gpt-oss"]["sinks"]["shape"] == [8] and it["gpt-oss"]["scheme"]["scaling"] == "yarn"
assert it["llama4-chunked"]["chunk_size"] == 8192
assert it["qwen2-vl"]["scheme"]["mrope_section"] == [16, 24, 24]
for p, x in it.items():
    assert x["q"]["shape"][1] == 8, (p, x["q"]["shape"])  # --heads 8 wins
PYEOF
then ok "--preset gemma2, gpt-oss, llama4-chunked, qwen2-vl set their shapes and options"
else bad "--preset gemma2, gpt-oss, llama4-chunked, qwen2-vl set their shapes and options" "$TMP/check6b.out"; fi
if "$LOAD" --preset llama5 --requests 1 >"$TMP/p-bad.out" 2>&1; then
    bad "an unknown preset is refused" "$TMP/p-bad.out"
elif grep -q "unknown 'llama5'" "$TMP/p-bad.out"; then ok "an unknown preset is refused, naming it"
else bad "an unknown preset is refused, naming it" "$TMP/p-bad.out"; fi

# 6c. rope2d: the tokens as one image, a grid of rows x cols = length (24:
# 4 x 6), each variant answered.
"$LOAD" --spawn "$SRV" --schemes rope2d,rope2d:pixtral,rope2d:dinov3 --lengths 24 --heads 2 \
    --head-dim 8 --requests 3 --json "$TMP/r2d.json" --quiet >"$TMP/r2d.out" 2>&1
"$LOAD" --schemes rope2d:dinov3 --lengths 24 --heads 2 --head-dim 8 \
    --dump-body "$TMP/r2d-body.json" >>"$TMP/r2d.out" 2>&1
if $PY -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert [(x["scheme"], x["ok"], x["errors"]) for x in r["results"]] == \
    [("rope2d", 3, 0), ("rope2d:pixtral", 3, 0), ("rope2d:dinov3", 3, 0)], r["results"]
s = json.load(open(sys.argv[2]))["inputs"][0]["scheme"]
assert s == {"type": "rope2d", "variant": "dinov3", "base": 100, "grid": [4, 6]}, s
' "$TMP/r2d.json" "$TMP/r2d-body.json" >"$TMP/check6c.out" 2>&1; then
    ok "rope2d, rope2d:pixtral, rope2d:dinov3: a 4 x 6 grid for 24 tokens, all 200"
else bad "rope2d, rope2d:pixtral, rope2d:dinov3: a 4 x 6 grid for 24 tokens, all 200" "$TMP/check6c.out"; fi

# 7. --dtype f16 / bf16: the same seeded values as f32, narrowed to nearest
# even (against NumPy's float16 and a bit-level bfloat16), b64 of two bytes
# each and JSON with the dtype named; the server answers them all.
for dt in f32 f16 bf16; do
    "$LOAD" --dtype $dt --encoding b64 --schemes alibi --lengths 16 --heads 2 --head-dim 8 \
        --dump-body "$TMP/dt-$dt.json" >"$TMP/dt-$dt.out" 2>&1 || echo "exit $?" >>"$TMP/dt-$dt.out"
done
if $PY - "$TMP" >"$TMP/check7.out" 2>&1 <<'PYEOF'
import base64, json, sys
import numpy as np
d = sys.argv[1]
it = {dt: json.load(open("%s/dt-%s.json" % (d, dt)))["inputs"][0] for dt in ("f32", "f16", "bf16")}
for name in ("q", "k", "v"):
    f32 = np.frombuffer(base64.b64decode(it["f32"][name]["b64"]), "<f4")
    assert "dtype" not in it["f32"][name]
    assert it["f16"][name]["dtype"] == "f16" and it["bf16"][name]["dtype"] == "bf16"
    h = np.frombuffer(base64.b64decode(it["f16"][name]["b64"]), "<u2")
    assert (h == f32.astype("<f2").view("<u2")).all(), name
    u = f32.view("<u4").astype(np.uint64)
    bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    assert (np.frombuffer(base64.b64decode(it["bf16"][name]["b64"]), "<u2") == bf).all(), name
PYEOF
then ok "--dtype f16 and bf16 narrow the f32 values to nearest even (NumPy's float16, bit-level bf16)"
else bad "--dtype f16 and bf16 narrow the f32 values to nearest even (NumPy's float16, bit-level bf16)" "$TMP/check7.out"; fi
"$LOAD" --spawn "$SRV" --schemes rope --lengths 32 --heads 2 --head-dim 16 --requests 3 \
    --dtype bf16 --json "$TMP/dt.json" --quiet >"$TMP/dt.out" 2>&1
"$LOAD" --spawn "$SRV" --schemes rope --lengths 32 --heads 2 --head-dim 16 --requests 3 \
    --dtype f16 --encoding b64 --json "$TMP/dt2.json" --quiet >>"$TMP/dt.out" 2>&1
if $PY -c '
import json, sys
for f, dt in ((sys.argv[1], "bf16"), (sys.argv[2], "f16")):
    r = json.load(open(f))
    assert r["config"]["dtype"] == dt, r["config"]
    assert [(x["ok"], x["errors"]) for x in r["results"]] == [(3, 0)], r["results"]
' "$TMP/dt.json" "$TMP/dt2.json" >"$TMP/check7b.out" 2>&1; then
    ok "--dtype bf16 (JSON) and f16 (b64) against a spawned server: all 200"
else bad "--dtype bf16 (JSON) and f16 (b64) against a spawned server: all 200" "$TMP/check7b.out"; fi

# 8. --batch-seq B: every item a batch [B, L, ...] (q/k/v and layer mode),
# --lengths-spread S: a seeded key_length per sequence within [(1-S) L, L];
# the server answers [B, ...] outputs.
"$LOAD" --batch-seq 3 --lengths-spread 0.5 --schemes rope --lengths 16 --heads 4 --kv-heads 2 \
    --head-dim 8 --dump-body "$TMP/bs.json" >"$TMP/bs.out" 2>&1 || echo "exit $?" >>"$TMP/bs.out"
"$LOAD" --batch-seq 2 --schemes sinusoidal --lengths 8 --heads 2 --head-dim 4 \
    --dump-body "$TMP/bs-layer.json" >>"$TMP/bs.out" 2>&1 || echo "exit $?" >>"$TMP/bs.out"
if $PY - "$TMP" >"$TMP/check8.out" 2>&1 <<'PYEOF'
import json, sys
d = sys.argv[1]
it = json.load(open(d + "/bs.json"))["inputs"][0]
assert it["q"]["shape"] == [3, 16, 4, 8], it["q"]["shape"]
assert it["k"]["shape"] == it["v"]["shape"] == [3, 16, 2, 8], it["k"]["shape"]
kl = it["key_length"]
assert len(kl) == 3 and all(8 <= x <= 16 for x in kl), kl
lay = json.load(open(d + "/bs-layer.json"))["inputs"][0]
assert lay["x"]["shape"] == [2, 8, 8] and "key_length" not in lay, lay["x"]["shape"]
PYEOF
then ok "--batch-seq shapes [B, L, H, D] and x [B, L, d], --lengths-spread key_length [B] in [(1-S) L, L]"
else bad "--batch-seq shapes [B, L, H, D] and x [B, L, d], --lengths-spread key_length [B] in [(1-S) L, L]" "$TMP/check8.out"; fi
"$LOAD" --spawn "$SRV" --batch-seq 4 --lengths-spread 0.75 --schemes rope,alibi,learned \
    --lengths 32 --heads 2 --head-dim 16 --requests 3 --encoding b64 --json "$TMP/bs-run.json" \
    --quiet >"$TMP/bs-run.out" 2>&1
if $PY -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["config"]["batch_seq"] == 4 and r["config"]["lengths_spread"] == 0.75, r["config"]
assert [(x["ok"], x["errors"]) for x in r["results"]] == [(3, 0)] * 3, r["results"]
' "$TMP/bs-run.json" >"$TMP/check8b.out" 2>&1; then
    ok "--batch-seq 4 --lengths-spread 0.75 against a spawned server: all 200, in the report"
else bad "--batch-seq 4 --lengths-spread 0.75 against a spawned server: all 200, in the report" "$TMP/check8b.out"; fi
if "$LOAD" --lengths-spread 0.5 --requests 1 >"$TMP/bs-bad.out" 2>&1; then
    bad "--lengths-spread without --batch-seq is refused" "$TMP/bs-bad.out"
elif grep -q "needs --batch-seq" "$TMP/bs-bad.out"; then ok "--lengths-spread without --batch-seq is refused"
else bad "--lengths-spread without --batch-seq is refused" "$TMP/bs-bad.out"; fi

# 9. --model: a spawned posattnd loads Gemma 2's and gpt-oss's configs; the
# tool reads GET /v1/models and sends every chosen layer round-robin, with
# the tensors each layer requires, and reports each layer's latency beside
# its attention (sliding layers with their window).
FIX=$(cd "$(dirname "$0")/../.." && pwd)/tests/fixtures/models
MODELS=(--server-arg --model --server-arg "g2=$FIX/gemma2.json"
        --server-arg --model --server-arg "oss=$FIX/gpt_oss.json")
if "$LOAD" --spawn "$SRV" "${MODELS[@]}" --model g2 --layers all --lengths 32 --concurrency 2 \
        --requests 24 --json "$TMP/m.json" --csv "$TMP/m.csv" --html "$TMP/m.html" \
        --svg "$TMP/m.svg" >"$TMP/m.out" 2>"$TMP/m.err"; then
    ok "--model g2 --layers all exits 0"
else bad "--model g2 --layers all exits 0" "$TMP/m.err"; fi
if $PY - "$TMP" >"$TMP/check9.out" 2>&1 <<'PYEOF'
import json, re, sys
import xml.etree.ElementTree as ET
d = sys.argv[1]
r = json.load(open(d + "/m.json"))
m = r["config"]["model"]
assert (m["name"], m["model_type"], m["num_layers"]) == ("g2", "gemma2", 4), m
assert "heads" not in r["config"] and "schemes" not in r["config"], r["config"]
[x] = r["results"]
assert (x["scheme"], x["sent"], x["ok"], x["errors"]) == ("g2", 24, 24, 0), x
assert x["server"]["compute_count"] == 24, x["server"]
ls = x["layers"]
assert [y["layer"] for y in ls] == [0, 1, 2, 3], ls
for y in ls:
    sliding = y["layer"] % 2 == 0  # Gemma 2: the even layers slide
    assert y["attention"] == ("sliding_attention" if sliding else "full_attention"), y
    assert y["window"] == (4096 if sliding else None), y
    assert y["label"] == "layer %d %s" % (y["layer"], "sliding 4096" if sliding else "full"), y
    assert (y["num_heads"], y["num_kv_heads"], y["head_dim"]) == (4, 2, 16), y
    assert (y["sent"], y["ok"], y["errors"]) == (6, 6, 0), y  # round-robin: 24 / 4
    lat = y["latency_ms"]
    assert lat["count"] == 6 and 0 < lat["p50"] <= lat["p99"] <= lat["max"], lat
    assert y["causal"] is True and y["requires"] == [], y
g = {(a["attention"], tuple(a["layers"])): a for a in x["by_attention"]}
assert set(g) == {("sliding_attention", (0, 2)), ("full_attention", (1, 3))}, g
assert all(a["ok"] == 12 and a["latency_ms"]["count"] == 12 for a in g.values()), g
out = open(d + "/m.out").read()
for l, kind in ((0, "sliding 4096"), (1, "full"), (2, "sliding 4096"), (3, "full")):
    assert re.search(r"^layer %d %s +rope +32 +2 " % (l, kind), out, re.M), (l, out)
assert "sliding 4096 (layers 0,2)" in out and "full (layers 1,3)" in out, out
csv = open(d + "/m.csv").read().splitlines()
assert csv[0].startswith("model,layer,stack,attention,window,") and len(csv) == 5, csv
assert csv[1].startswith("g2,0,,sliding_attention,4096,") and csv[2].startswith("g2,1,,full_attention,0,"), csv
html = open(d + "/m.html").read()
assert "Per layer" in html and "layer 3 full" in html and "By attention" in html, "html"
NS = "{http://www.w3.org/2000/svg}"
chart = ET.parse(d + "/m.svg").getroot().findall(NS + "svg")[0]
bars = [b for b in chart.iter(NS + "rect") if b.find(NS + "title") is not None]
assert len(bars) == 4 * 4, len(bars)  # a group of four percentiles per layer
labels = "".join(t.text or "" for t in chart.iter(NS + "text"))
assert "0 sliding 4096 L=32" in labels and "3 full L=32" in labels, labels
print("ok")
PYEOF
then ok "--model g2: 4 layers reported (JSON, table, CSV, HTML, SVG), the sliding ones with their window"
else bad "--model g2: 4 layers reported (JSON, table, CSV, HTML, SVG), the sliding ones with their window" "$TMP/check9.out"; fi

# gpt-oss layer 1 needs its sinks [H]: the body carries them, the server answers.
"$LOAD" --spawn "$SRV" "${MODELS[@]}" --model oss --layer 1 --lengths 16 --batch-seq 2 \
    --dump-body "$TMP/oss-body.json" >"$TMP/oss.out" 2>&1 || echo "exit $?" >>"$TMP/oss.out"
"$LOAD" --spawn "$SRV" "${MODELS[@]}" --model oss --layer 1 --lengths 48 --concurrency 2 \
    --requests 8 --encoding b64 --json "$TMP/oss.json" --quiet >>"$TMP/oss.out" 2>&1 ||
    echo "exit $?" >>"$TMP/oss.out"
if $PY - "$TMP" >"$TMP/check9b.out" 2>&1 <<'PYEOF'
import json, sys
d = sys.argv[1]
it = json.load(open(d + "/oss-body.json"))["inputs"][0]
assert (it["model"], it["layer"]) == ("oss", 1) and "scheme" not in it, it.keys()
assert it["sinks"]["shape"] == [4], it["sinks"]
assert it["q"]["shape"] == [2, 16, 4, 16] and it["k"]["shape"] == [2, 16, 2, 16], it["q"]["shape"]
r = json.load(open(d + "/oss.json"))
[x] = r["results"]
assert (x["sent"], x["ok"], x["errors"]) == (8, 8, 0), x
[y] = x["layers"]
assert (y["layer"], y["attention"], y["window"], y["requires"]) == (1, "full_attention", None, ["sinks"]), y
assert y["ok"] == 8, y
print("ok")
PYEOF
then ok "--model oss --layer 1: sinks [4] in every item, all 200 without item errors"
else bad "--model oss --layer 1: sinks [4] in every item, all 200 without item errors" "$TMP/check9b.out"; fi

# Learned positions (GPT-2's layer 0) go in layer mode, x as wide as the
# table; T5's stacks are named in every item and --stack picks one.
"$LOAD" --spawn "$SRV" --server-arg --model --server-arg "gpt2=$FIX/gpt2.json" \
    --server-arg --model --server-arg "t5=$FIX/t5.json" --model gpt2 --lengths 16 \
    --requests 4 --json "$TMP/gpt2.json" --quiet >"$TMP/gpt2.out" 2>&1 || echo "exit $?" >>"$TMP/gpt2.out"
"$LOAD" --spawn "$SRV" --server-arg --model --server-arg "t5=$FIX/t5.json" --model t5 \
    --stack decoder --layers 0-1 --lengths 16 --requests 4 --json "$TMP/t5.json" --quiet \
    >>"$TMP/gpt2.out" 2>&1 || echo "exit $?" >>"$TMP/gpt2.out"
if $PY - "$TMP" >"$TMP/check9c.out" 2>&1 <<'PYEOF'
import json, sys
d = sys.argv[1]
[x] = json.load(open(d + "/gpt2.json"))["results"]
assert [(y["layer"], y["scheme"], y["layer_mode"], y["ok"], y["errors"]) for y in x["layers"]] == \
    [(0, "learned", True, 2, 0), (1, "none", False, 2, 0)], x["layers"]
assert x["layers"][0]["d_model"] == 64 and x["layers"][0]["requires"] == ["scheme.table"]
[x] = json.load(open(d + "/t5.json"))["results"]
assert [(y["stack"], y["layer"], y["ok"]) for y in x["layers"]] == [("decoder", 0, 2), ("decoder", 1, 2)], x["layers"]
print("ok")
PYEOF
then ok "--model gpt2: layer 0 (learned) in layer mode; --model t5 --stack decoder: both answered"
else bad "--model gpt2: layer 0 (learned) in layer mode; --model t5 --stack decoder: both answered" "$TMP/check9c.out"; fi

# Refusals: a name the server has not loaded (listing the loaded ones), a
# layer past the model's, a flag the config decides, --layers without --model.
"$LOAD" --spawn "$SRV" "${MODELS[@]}" --model nope --requests 1 >"$TMP/nope.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "'nope'.*no model of that name (loaded: g2, oss)" "$TMP/nope.out"; then
    ok "an unknown --model fails (exit $rc), listing the loaded models"
else bad "an unknown --model fails, listing the loaded models (exit $rc)" "$TMP/nope.out"; fi
"$LOAD" --spawn "$SRV" "${MODELS[@]}" --model g2 --layer 4 --requests 1 >"$TMP/nolayer.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "layer 4: model 'g2' (gemma2) has layers 0 to 3" "$TMP/nolayer.out"; then
    ok "a --layer past the model's fails (exit $rc), naming its layers"
else bad "a --layer past the model's fails, naming its layers (exit $rc)" "$TMP/nolayer.out"; fi
if "$LOAD" --model g2 --heads 8 --requests 1 >"$TMP/decided.out" 2>&1 ||
        ! grep -q "the model's config decides it" "$TMP/decided.out" ||
        "$LOAD" --layers all --requests 1 >>"$TMP/decided.out" 2>&1 ||
        ! grep -q -- "--layers needs --model" "$TMP/decided.out"; then
    bad "--heads with --model and --layers without it are refused" "$TMP/decided.out"
else ok "--heads with --model and --layers without it are refused"; fi

# 10. --differential: every item carries "differential" and v in the
# pairs' layout; alibi (per-head slopes) is skipped with a note, the
# schemes kept are answered without an error, in both layouts (halves with
# GQA); what the server would refuse is a usage error here.
"$LOAD" --spawn "$SRV" --differential --schemes rope,alibi,xpos,none --lengths 24 --heads 4 \
    --kv-heads 2 --head-dim 8 --requests 8 --concurrency 2 --return output,weights \
    --json "$TMP/diff.json" --quiet >"$TMP/diff.out" 2>&1 || echo "exit $?" >>"$TMP/diff.out"
"$LOAD" --spawn "$SRV" --differential --diff-pairs halves --diff-lambda 0.8 --diff-depth 3 \
    --schemes rope2d,rope:yarn --lengths 16 --heads 8 --kv-heads 2 --head-dim 4 --causal \
    --requests 6 --encoding b64 --json "$TMP/diff2.json" --quiet >>"$TMP/diff.out" 2>&1 ||
    echo "exit $?" >>"$TMP/diff.out"
"$LOAD" --differential --lengths 6 --heads 4 --kv-heads 2 --head-dim 4 --requests 1 \
    --dump-body "$TMP/diff-body.json" >>"$TMP/diff.out" 2>&1 || echo "exit $?" >>"$TMP/diff.out"
if grep -q "skipping scheme alibi (differential attention takes none, rope, xpos and rope2d" "$TMP/diff.out" &&
        $PY - "$TMP" >"$TMP/check10.out" 2>&1 <<'PYEOF'
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/diff.json"))
assert r["config"]["schemes"] == ["rope", "xpos", "none"], r["config"]["schemes"]
assert r["config"]["differential"] == {"pairs": "interleaved", "lambda": 0.5, "depth": 1}, r["config"]
for x in r["results"]:
    assert x["ok"] == 8 and x["errors"] == 0, x
    assert x["server"]["compute_count"] == 8, (x["scheme"], x["server"])
r = json.load(open(d + "/diff2.json"))
assert r["config"]["differential"] == {"pairs": "halves", "lambda": 0.8, "depth": 3}, r["config"]
assert [(x["scheme"], x["ok"], x["errors"]) for x in r["results"]] == [("rope2d", 6, 0), ("rope:yarn", 6, 0)], \
    r["results"]
[it] = json.load(open(d + "/diff-body.json"))["inputs"]
assert it["differential"] == {"pairs": "interleaved", "lambda": 0.5, "depth": 1}, it
assert (it["q"]["shape"], it["k"]["shape"], it["v"]["shape"]) == ([6, 4, 4], [6, 2, 4], [6, 1, 8]), it
print("ok")
PYEOF
then ok "--differential: rope, xpos, none answered with 0 errors (alibi skipped); halves with GQA; v [L, Hkv/2, 2D]"
else bad "--differential: rope, xpos, none answered with 0 errors (alibi skipped); halves with GQA; v [L, Hkv/2, 2D]" "$TMP/check10.out"; cat "$TMP/diff.out" | tail -5; fi
refused=""
for args in "--heads 3 --kv-heads 1" "--packed 2" "--layer" "--return entropy" "--schemes alibi,t5"; do
    # shellcheck disable=SC2086
    "$LOAD" --differential --requests 1 $args >"$TMP/diffbad.out" 2>&1
    [ $? -eq 2 ] || refused="$refused [$args]"
done
"$LOAD" --diff-lambda 2 --requests 1 >"$TMP/diffbad.out" 2>&1
[ $? -eq 2 ] && grep -q -- "--diff-lambda needs --differential" "$TMP/diffbad.out" || refused="$refused [--diff-lambda alone]"
if [ -z "$refused" ]; then ok "--differential: odd heads, --packed, --layer, --return entropy, no scheme it takes, --diff-* alone are usage errors"
else bad "--differential: not refused:$refused"; fi

# 11. --mla: every item carries "mla", q [L, H, head-dim] with k_nope, v
# [L, H, head-dim - DR] and k_rope [L, DR] (expanded), or c_kv [L, R] with
# w_uk, w_uv (absorbed); alibi and rope:mrope are skipped with a note, the
# rope scalings and none answered without an error in both forms; what the
# server would refuse is a usage error here.
"$LOAD" --spawn "$SRV" --mla 8 --schemes rope,alibi,rope:yarn,rope:mrope,none --lengths 20 --heads 4 \
    --head-dim 24 --requests 6 --concurrency 2 --causal --return output,weights,entropy \
    --json "$TMP/mla.json" --quiet >"$TMP/mla.out" 2>&1 || echo "exit $?" >>"$TMP/mla.out"
"$LOAD" --spawn "$SRV" --mla 4 --mla-absorbed 16 --schemes rope,rope:llama3,none --lengths 18 --heads 2 \
    --head-dim 12 --requests 6 --encoding b64 --dtype bf16 --sinks --batch 2 \
    --json "$TMP/mla2.json" --quiet >>"$TMP/mla.out" 2>&1 || echo "exit $?" >>"$TMP/mla.out"
"$LOAD" --mla 4 --lengths 6 --heads 2 --head-dim 12 --requests 1 \
    --dump-body "$TMP/mla-body.json" >>"$TMP/mla.out" 2>&1 || echo "exit $?" >>"$TMP/mla.out"
"$LOAD" --mla 4 --mla-absorbed 3 --lengths 6 --heads 2 --head-dim 12 --requests 1 \
    --dump-body "$TMP/mla-body2.json" >>"$TMP/mla.out" 2>&1 || echo "exit $?" >>"$TMP/mla.out"
if grep -q "skipping scheme alibi (MLA takes none and rope" "$TMP/mla.out" &&
        grep -q "skipping scheme rope:mrope" "$TMP/mla.out" && ! grep -q "^exit" "$TMP/mla.out" &&
        $PY - "$TMP" >"$TMP/check11.out" 2>&1 <<'PYEOF'
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/mla.json"))
assert r["config"]["schemes"] == ["rope", "rope:yarn", "none"], r["config"]["schemes"]
assert r["config"]["mla"] == {"rope_dim": 8, "absorbed": False}, r["config"]
for x in r["results"]:
    assert x["ok"] == 6 and x["errors"] == 0, x
r = json.load(open(d + "/mla2.json"))
assert r["config"]["mla"] == {"rope_dim": 4, "absorbed": True, "kv_lora_rank": 16}, r["config"]
assert [(x["scheme"], x["ok"], x["errors"]) for x in r["results"]] == \
    [("rope", 6, 0), ("rope:llama3", 6, 0), ("none", 6, 0)], r["results"]
[it] = json.load(open(d + "/mla-body.json"))["inputs"]
assert it["mla"] == {"rope_dim": 4}, it["mla"]
assert (it["q"]["shape"], it["k"]["shape"], it["v"]["shape"], it["k_rope"]["shape"]) == \
    ([6, 2, 12], [6, 2, 8], [6, 2, 8], [6, 4]), it
[it] = json.load(open(d + "/mla-body2.json"))["inputs"]
m = it["mla"]
assert m["rope_dim"] == 4 and m["absorbed"] is True and "k" not in it and "v" not in it, it
assert (it["q"]["shape"], it["c_kv"]["shape"], m["w_uk"]["shape"], m["w_uv"]["shape"]) == \
    ([6, 2, 12], [6, 3], [2, 8, 3], [2, 8, 3]), it
print("ok")
PYEOF
then ok "--mla: rope, rope:yarn, none answered with 0 errors (alibi, rope:mrope skipped); absorbed with bf16 b64 and sinks"
else bad "--mla: rope, rope:yarn, none answered with 0 errors (alibi, rope:mrope skipped); absorbed with bf16 b64 and sinks" "$TMP/check11.out"; tail -5 "$TMP/mla.out"; fi
refused=""
for args in "--mla 3" "--mla 64" "--mla 4 --kv-heads 2" "--mla 4 --packed 2" "--mla 4 --layer" \
        "--mla 4 --batch-seq 2" "--mla 4 --differential" "--mla 4 --softcap 5" "--mla 4 --schemes alibi,xpos"; do
    # shellcheck disable=SC2086
    "$LOAD" --requests 1 $args >"$TMP/mlabad.out" 2>&1
    [ $? -eq 2 ] || refused="$refused [$args]"
done
"$LOAD" --mla-absorbed 8 --requests 1 >"$TMP/mlabad.out" 2>&1
[ $? -eq 2 ] && grep -q -- "--mla-absorbed needs --mla" "$TMP/mlabad.out" || refused="$refused [--mla-absorbed alone]"
"$LOAD" --mla 5 --requests 1 >"$TMP/mlabad.out" 2>&1
grep -q -- "--mla 5: D_rope must be even" "$TMP/mlabad.out" || refused="$refused [--mla 5 message]"
if [ -z "$refused" ]; then ok "--mla: odd or too wide D_rope, --kv-heads, --packed, --layer, --batch-seq, --differential, --softcap, no scheme it takes, --mla-absorbed alone are usage errors"
else bad "--mla: not refused:$refused"; fi

# 12. --sessions against a server of our own: N x T decode steps and nothing
#     failed, the window's evictions, the shared prefix's forks, and every
#     session deleted at the end (the server's GET /v1/sessions, read after
#     the tool has gone, agrees); a tiny --cache-mb gives CACHE_FULL, counted,
#     and exit 3.
"$SRV" --host 127.0.0.1 --port 0 --log-format off >"$TMP/sess-srv.out" 2>&1 &
SESS_PID=$!
SESS_URL=""
for _ in $(seq 1 100); do
    SESS_URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$TMP/sess-srv.out" | head -1)
    [ -n "$SESS_URL" ] && break
    sleep 0.1
done
sess_rc=""
"$LOAD" --url "$SESS_URL" --sessions 8 --prompt 64 --steps 20 --schemes rope,alibi,cope \
    --heads 4 --kv-heads 2 --head-dim 32 --json "$TMP/sess.json" --html "$TMP/sess.html" \
    >"$TMP/sess.out" 2>"$TMP/sess.err" || sess_rc="$sess_rc plain=$?"
"$LOAD" --url "$SESS_URL" --sessions 8 --prompt 64 --steps 20 --eviction window:32:4:reposition \
    --prefill-concurrency 3 --schemes rope --heads 4 --kv-heads 2 --head-dim 32 --json "$TMP/sess-win.json" --quiet \
    >"$TMP/sess-win.out" 2>&1 || sess_rc="$sess_rc window=$?"
"$LOAD" --url "$SESS_URL" --sessions 8 --prompt 64 --steps 20 --fork-share 0.5 --schemes alibi \
    --heads 4 --kv-heads 2 --head-dim 32 --json "$TMP/sess-fork.json" --quiet \
    >"$TMP/sess-fork.out" 2>&1 || sess_rc="$sess_rc fork=$?"
"$LOAD" --url "$SESS_URL" --sessions 4 --prompt 16 --steps 1000000 --decode-seconds 1 --schemes none \
    --heads 4 --kv-heads 2 --head-dim 32 --json "$TMP/sess-time.json" --quiet \
    >"$TMP/sess-time.out" 2>&1 || sess_rc="$sess_rc decode-seconds=$?"
curl -s "$SESS_URL/v1/sessions" >"$TMP/sess-left.json"
kill "$SESS_PID" 2>/dev/null
wait "$SESS_PID" 2>/dev/null
if [ -z "$sess_rc" ]; then ok "--sessions: plain, window and fork runs exit 0"
else bad "--sessions: plain, window and fork runs exit 0 ($sess_rc)" "$TMP/sess.err"; fi
if $PY - "$TMP" >"$TMP/check12.out" 2>&1 <<'PYEOF'
import json, sys
d = sys.argv[1]
def load(name):
    r = json.load(open(d + "/" + name))
    assert r["mode"] == "sessions", r
    return r
def common(x, n=8, t=20, prompt=64):
    assert x["steps_ok"] == n * t, x
    assert x["steps_failed"] == 0 and x["steps_not_run"] == 0, x
    assert x["failed_requests"] == 0 and x["errors_by_code"] == {}, x
    assert x["step_latency_ms"]["count"] == n * t, x["step_latency_ms"]
    assert sum(b["count"] for b in x["by_cache_length"]) == n * t, x["by_cache_length"]
    assert x["steps_per_s"] > 0 and x["deletes_gone"] == 0, x
    m = x["memory"]
    assert m["after_delete"]["sessions"] == 0 and m["after_delete"]["bytes"] == 0, m
    assert m["after_delete"]["blocks_used"] == 0, m
    assert x["metrics"]["evictions_pool_full"] == 0, x["metrics"]
r = load("sess.json")
assert r["config"]["schemes"] == ["rope", "alibi"], r["config"]  # cope skipped
# 4 heads of 32 kept 2 x (32 + 32) floats a token: 64 tokens = 4 blocks of 16, 64 KiB
for x in r["results"]:
    common(x)
    assert x["creates_ok"] == 8 and x["prefills_ok"] == 8 and x["deletes_ok"] == 8, x
    assert x["prefill_latency_ms"]["count"] == 8, x
    m = x["memory"]
    assert m["after_prefill"]["sessions"] == 8 and m["after_prefill"]["bytes"] == 8 * 4 * 16 * 512, m
    assert m["after_decode"]["bytes"] == 8 * 6 * 16 * 512, m  # 84 tokens: 6 blocks
    # 65..84 tokens kept after the steps: one bucket, 64..127
    assert [(b["tokens_from"], b["tokens_to"]) for b in x["by_cache_length"]] == [(64, 127)]
    assert x["metrics"]["tokens_appended"] == 8 * 84 and x["metrics"]["tokens_evicted"] == 0
r = load("sess-win.json")
[x] = r["results"]
common(x)
assert r["config"]["eviction"] == "window:32:4:reposition", r["config"]
# 84 tokens appended, 36 kept: 48 evicted a sequence; every step sees 36 tokens (bucket 32..63)
assert x["metrics"]["tokens_evicted"] == 8 * 48, x["metrics"]
assert [(b["tokens_from"], b["count"]) for b in x["by_cache_length"]] == [(32, 160)], x
r = load("sess-fork.json")
[x] = r["results"]
common(x)
# the prefix (created, prefilled once), 4 own sequences, 4 forks of the prefix
assert x["forked"] == 4 and x["forks_ok"] == 4 and x["creates_ok"] == 5, x
assert x["prefills_ok"] == 5 and x["deletes_ok"] == 9, x
m = x["memory"]["after_prefill"]
# the prefix's 4 blocks are stored once for 5 sessions
assert m["sessions"] == 9 and m["bytes"] == 5 * 4 * 16 * 512, m
assert m["blocks_shared"] >= 4, m
r = load("sess-time.json")
[x] = r["results"]
# --decode-seconds 1 cuts a million steps a sequence short: no step is
# sent after 1 s, the in-flight ones finish, the rest are cut, none fail.
assert r["config"]["decode_seconds"] == 1, r["config"]
assert x["steps_ok"] > 0 and x["steps_failed"] == 0 and x["steps_not_run"] == 0, x
assert x["steps_ok"] + x["steps_cut"] == 4 * 1000000, x
assert 1.0 <= x["decode_s"] < 5.0, x["decode_s"]
assert x["metrics"]["tokens_appended"] == 4 * 16 + x["steps_ok"], x["metrics"]
left = json.load(open(d + "/sess-left.json"))
assert left["total"] == 0 and left["cache"]["bytes"] == 0, left
print("ok")
PYEOF
then ok "--sessions: N x T steps, 0 errors, memory after prefill/decode, window evictions, forks share the prefix, --decode-seconds cuts the steps, cache empty at the end"
else bad "--sessions: N x T steps, 0 errors, memory after prefill/decode, window evictions, forks share the prefix, --decode-seconds cuts the steps, cache empty at the end" "$TMP/check12.out"; fi
if grep -q 'class="by-length"' "$TMP/sess.html" && grep -q 'log scale' "$TMP/sess.html" &&
        ! grep -qi '<script' "$TMP/sess.html" && grep -q '^decode steps/s' "$TMP/sess.out" &&
        grep -q 'skipping scheme cope' "$TMP/sess.err"; then
    ok "--sessions: HTML chart by cache length (log axes), terminal table, cope skipped with a note"
else bad "--sessions: HTML chart by cache length (log axes), terminal table, cope skipped with a note" "$TMP/sess.out"; fi

# A prefill of 300 tokens (1.2 MB) over a 1 MB cache: CACHE_FULL for each.
"$LOAD" --spawn "$SRV" --server-arg=--cache-mb=1 --sessions 4 --prompt 300 --steps 5 \
    --schemes rope --json "$TMP/sess-full.json" --quiet >"$TMP/sess-full.out" 2>&1
rc=$?
if [ $rc -eq 3 ] && $PY - "$TMP/sess-full.json" >"$TMP/check12b.out" 2>&1 <<'PYEOF'
import json, sys
[x] = json.load(open(sys.argv[1]))["results"]
assert x["errors_by_code"] == {"CACHE_FULL": 4}, x["errors_by_code"]
assert "--cache-mb" in x["error_samples"]["CACHE_FULL"], x["error_samples"]
assert x["prefills_failed"] == 4 and x["steps_not_run"] == 20 and x["failed_requests"] == 4, x
assert x["memory"]["after_delete"]["sessions"] == 0, x["memory"]
print("ok")
PYEOF
then ok "--sessions over a tiny --cache-mb: CACHE_FULL counted by code, exit 3"
else bad "--sessions over a tiny --cache-mb: CACHE_FULL counted by code, exit 3 (exit $rc)" "$TMP/check12b.out"; fi
refused=""
for args in "--sessions 0" "--sessions 2 --eviction window:0:4" "--sessions 2 --eviction lru" \
        "--sessions 2 --fork-share 1.5" "--sessions 2 --prompt 0 --fork-share 0.5" \
        "--sessions 2 --csv x.csv" "--sessions 2 --schemes cope,rope2d" \
        "--sessions 2 --prefill-concurrency 0" "--sessions 2 --decode-seconds 0"; do
    # shellcheck disable=SC2086
    "$LOAD" $args >"$TMP/sessbad.out" 2>&1
    [ $? -eq 2 ] || refused="$refused [$args]"
done
if [ -z "$refused" ]; then ok "--sessions: bad counts, evictions, fork shares, --csv and no scheme a session keeps are usage errors"
else bad "--sessions: not refused:$refused"; fi

echo "load: $pass passed, $fail failed"
[ $fail -eq 0 ]
