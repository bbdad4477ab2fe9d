#!/usr/bin/env bash
# check-metrics.sh - posattnd's live /metrics against the real Prometheus
# tools (make monitor-test). Under tests/e2e/harness.sh (two servers, one
# with --api-key) it sends attention requests of three schemes, a malformed
# body, a v2 infer and two refused keys, then:
#  1. pipes each server's /metrics to `promtool check metrics`: any lint
#     complaint (a counter without _total, no HELP, units) fails;
#  2. checks that the requests show in the metrics, and that every posattn_
#     metric deploy/prometheus/rules.yml reads is exposed (a rename would
#     silence its alerts);
#  3. runs Prometheus itself (127.0.0.1, a free port, 1 s scrapes of both
#     servers, rules.yml) and asks its HTTP API for the per-scheme p99
#     recording rule and the health of every rule.
#
#   POSATTND=build/posattnd tests/monitor/check-metrics.sh
#
# Prints "check-metrics: N passed, M failed"; exit status 0 only if none
# failed. Needs promtool and prometheus (Debian's prometheus: make
# monitor-deps), curl, /usr/bin/python3. Stops by itself (harness timeout).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ -z "${POSATTN_URL:-}" ]; then
    export POSATTND=${POSATTND:-$ROOT/build/posattnd}
    exec "$ROOT/tests/e2e/harness.sh" "$0" "$@"
fi

RULES=$ROOT/deploy/prometheus/rules.yml
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
passed=0
failed=0
pass() { passed=$((passed + 1)); printf 'check-metrics: ok   %s\n' "$1"; }
fail() { failed=$((failed + 1)); printf 'check-metrics: FAIL %s\n' "$1"; }
check() { # check MSG COMMAND...
    local msg=$1
    shift
    if "$@"; then pass "$msg"; else fail "$msg"; fi
}
finish() {
    printf 'check-metrics: %d passed, %d failed\n' "$passed" "$failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
    exit $?
}
for tool in promtool prometheus curl; do
    command -v "$tool" >/dev/null || { fail "$tool is missing (make monitor-deps)"; finish; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posattn-monitor.XXXXXX") || exit 1
prom_pid=
# shellcheck disable=SC2317 # runs from the trap
cleanup() {
    if [ -n "$prom_pid" ]; then
        kill -TERM "$prom_pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$prom_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$prom_pid" 2>/dev/null
        wait "$prom_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

URL=${POSATTN_URL%/}
AUTH_URL=${POSATTN_AUTH_URL%/}

# status URL [CURL ARGS...]: the HTTP status only.
status() {
    local url=$1
    shift
    curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@" "$url"
}
# attention SCHEME: a [2, 1, 2] item of that scheme.
attention() {
    status "$URL/v1/attention" -H 'Content-Type: application/json' -d '{"inputs":[{"scheme":{"type":"'"$1"'"},
      "causal":true,"q":{"shape":[2,1,2],"data":[1,0,0,0]},"k":{"shape":[2,1,2],"data":[1,0,0,1]},
      "v":{"shape":[2,1,2],"data":[1,2,3,4]}}]}'
}
V2_BODY='{"parameters":{"causal":true},"inputs":[
  {"name":"q","shape":[2,1,2],"datatype":"FP32","data":[1,0,0,0]},
  {"name":"k","shape":[2,1,2],"datatype":"FP32","data":[1,0,0,1]},
  {"name":"v","shape":[2,1,2],"datatype":"FP32","data":[1,2,3,4]}]}'
SCHEMES="rope alibi none"
# A batch of two alibi items, the second one's k too short: one item
# computed, one item error.
MIXED_BODY='{"inputs":[
  {"scheme":{"type":"alibi"},"q":{"shape":[2,1,2],"data":[1,0,0,0]},"k":{"shape":[2,1,2],"data":[1,0,0,1]},
   "v":{"shape":[2,1,2],"data":[1,2,3,4]}},
  {"scheme":{"type":"alibi"},"q":{"shape":[2,1,2],"data":[1,0,0,0]},"k":{"shape":[3,1,2],"data":[1,0,0,1]},
   "v":{"shape":[2,1,2],"data":[1,2,3,4]}}]}'

# traffic: one round of every kind of request; prints what did not answer
# as expected.
traffic() {
    local s c
    for s in $SCHEMES; do
        c=$(attention "$s")
        [ "$c" = 200 ] || echo "attention $s: HTTP $c, expected 200"
    done
    c=$(status "$URL/v1/attention" -d '{"inputs": [')
    [ "$c" = 400 ] || echo "malformed body: HTTP $c, expected 400"
    c=$(status "$URL/v1/attention" -H 'Content-Type: application/json' -d "$MIXED_BODY")
    [ "$c" = 200 ] || echo "a batch with a bad item: HTTP $c, expected 200"
    c=$(status "$URL/v2/models/attention-rope/infer" -H 'Content-Type: application/json' -d "$V2_BODY")
    [ "$c" = 200 ] || echo "v2 infer: HTTP $c, expected 200"
    c=$(status "$AUTH_URL/v1/schemes")
    [ "$c" = 401 ] || echo "no API key: HTTP $c, expected 401"
    c=$(status "$AUTH_URL/v1/schemes" -H 'Authorization: Bearer not-the-key')
    [ "$c" = 401 ] || echo "wrong API key: HTTP $c, expected 401"
    c=$(status "$AUTH_URL/v1/schemes" -H "Authorization: Bearer $POSATTN_AUTH_KEY")
    [ "$c" = 200 ] || echo "the API key: HTTP $c, expected 200"
}

out=$(traffic)
check "requests answered as expected${out:+: $out}" test -z "$out"

# 1. promtool's lint on each server's exposition.
for name in main auth; do
    u=$URL
    [ "$name" = auth ] && u=$AUTH_URL
    c=$(curl -s -o "$tmp/$name.prom" -w '%{http_code}' --max-time 10 "$u/metrics")
    check "GET /metrics of the $name server answers 200 without an API key ($c)" test "$c" = 200
    lint=$(promtool check metrics <"$tmp/$name.prom" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ] && [ -z "$lint" ]; then
        pass "promtool check metrics: the $name server's $(grep -c '^# TYPE' "$tmp/$name.prom") families are clean"
    else
        fail "promtool check metrics on the $name server (exit $rc):"
        printf '%s\n' "$lint" | sed 's/^/    /'
    fi
done

# 2. What the requests must have left in the metrics, and the names the
# rules read. value FILE SERIES: the sample's value, empty when absent.
value() { awk -v s="$2" '$1 == s { print $2; exit }' "$1"; }
# shellcheck disable=SC2317 # called through check
positive() { [ -n "$1" ] && awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'; }
for s in $SCHEMES; do
    v=$(value "$tmp/main.prom" "posattn_compute_duration_seconds_count{scheme=\"$s\"}")
    check "posattn_compute_duration_seconds counted scheme $s (${v:-absent})" positive "$v"
done
# One round of traffic computed two alibi items without error (the
# attention request's and the mixed batch's first); the bad item is an item
# error, outside the histogram.
v=$(value "$tmp/main.prom" 'posattn_compute_duration_seconds_count{scheme="alibi"}')
check "posattn_compute_duration_seconds holds the 2 successful alibi items only (${v:-absent})" test "$v" = 2
v=$(value "$tmp/main.prom" 'posattn_item_errors_total{scheme="alibi"}')
check "posattn_item_errors_total counted the bad alibi item (${v:-absent})" test "$v" = 1
# A [2, 1, 2] item computes in a few microseconds: the buckets below
# 50 us exist, and the cumulative counts climb to _count at +Inf. Where
# the items landed is a matter of the machine's load, so not checked.
bk=$(awk '$1 ~ /^posattn_compute_duration_seconds_bucket\{scheme="none",le="/ { printf "%s ", $2 }' "$tmp/main.prom")
v=$(value "$tmp/main.prom" 'posattn_compute_duration_seconds_count{scheme="none"}')
# shellcheck disable=SC2317 # called through check
climbs() { # climbs COUNT V1 V2 ... : V non-decreasing, the last one COUNT
    local want=$1 prev=0 x
    shift
    [ $# -gt 0 ] || return 1
    for x in "$@"; do
        awk -v a="$prev" -v b="$x" 'BEGIN { exit !(b + 0 >= a + 0) }' || return 1
        prev=$x
    done
    [ "$prev" = "$want" ]
}
for le in 1e-06 2.5e-06 5e-06 1e-05 2.5e-05; do
    c=$(value "$tmp/main.prom" "posattn_compute_duration_seconds_bucket{scheme=\"none\",le=\"$le\"}")
    check "the microsecond bucket le=$le exists for scheme none (${c:-absent})" test -n "$c"
done
# shellcheck disable=SC2086 # the counts, one word each
check "scheme none's buckets climb to its count ${v:-absent} at +Inf ($bk)" climbs "$v" $bk
v=$(value "$tmp/main.prom" 'posattn_requests_total{endpoint="attention",code="400"}')
check "posattn_requests_total counted the malformed body as a 400 (${v:-absent})" positive "$v"
v=$(value "$tmp/main.prom" 'posattn_v2_inferences_total{scheme="rope",outcome="success"}')
check "posattn_v2_inferences_total counted the v2 infer (${v:-absent})" positive "$v"
for r in missing key; do
    v=$(value "$tmp/auth.prom" "posattn_auth_refused_total{reason=\"$r\"}")
    check "posattn_auth_refused_total{reason=\"$r\"} counted the refusal (${v:-absent})" positive "$v"
done
missing=$("$PY" - "$RULES" "$tmp/main.prom" <<'EOF'
import re, sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
exposed = set(re.findall(r"^# TYPE (\S+)", open(sys.argv[2]).read(), re.M))
used = set()
for g in rules["groups"]:
    for r in g["rules"]:
        used |= set(re.findall(r"(?<![:\w])posattn_[a-z0-9_]+(?![:\w])", r["expr"]))
def family(name):
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix) and name[: -len(suffix)] in exposed:
            return name[: -len(suffix)]
    return name
# Recording rules' own names (level:metric:op) are skipped by the lookarounds.
print(" ".join(sorted(n for n in used if family(n) not in exposed)))
EOF
)
check "every posattn_ metric rules.yml reads is on /metrics${missing:+ (missing: $missing)}" test -z "$missing"

# 3. The real Prometheus, scraping both servers with rules.yml.
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cp "$RULES" "$tmp/rules.yml"
cat >"$tmp/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [rules.yml]
scrape_configs:
  - job_name: posattnd
    static_configs:
      - targets: ["${URL#http://}", "${AUTH_URL#http://}"]
EOF
check "promtool check config accepts the test's Prometheus config" \
    sh -c "promtool check config '$tmp/prometheus.yml' >'$tmp/check-config.log' 2>&1"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
    --web.listen-address="127.0.0.1:$port" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
api="http://127.0.0.1:$port"
ready=no
for _ in $(seq 100); do
    if [ "$(status "$api/-/ready")" = 200 ]; then ready=yes; break; fi
    kill -0 "$prom_pid" 2>/dev/null || break
    sleep 0.1
done
if [ "$ready" != yes ]; then
    fail "prometheus did not become ready on 127.0.0.1:$port"
    sed 's/^/    /' "$tmp/prometheus.log" | tail -20
    finish
fi
pass "prometheus $(prometheus --version 2>&1 | awk 'NR == 1 { print $3 }') ready on 127.0.0.1:$port"

pq() { # pq MSG ARGS...: a promquery.py check
    local msg=$1 out
    shift
    if out=$("$PY" "$HERE/promquery.py" "$api" "$@" --timeout 20); then pass "$msg: $out"; else fail "$msg: $out"; fi
}
# Discovery hands targets to the scrapers about 5 s after start: wait for
# the first scrapes, then traffic across several, so that rate() sees each
# series grow; promquery.py polls until the answer is as expected.
pq "prometheus scrapes both servers" 'count(up{job="posattnd"} == 1)' --equals 2
for _ in 1 2 3 4; do
    traffic >/dev/null
    sleep 1.1
done
schemes=$(printf '%s' "$SCHEMES" | tr ' ' ,)
pq "the p99 recording rule has a value for each scheme sent" \
    'job_scheme:posattn_compute_duration_seconds:p99_5m{job="posattnd"}' --label scheme --want "$schemes"
# The queue ratio joins two gauges on job and instance: one value per server.
pq "the queue-ratio recording rule has an idle value for each server" \
    'count(instance:posattn_queue_depth:ratio{job="posattnd"} == 0)' --equals 2
pq "prometheus evaluates every rule of rules.yml, no alert active on a quiet server" --rules-ok
finish
