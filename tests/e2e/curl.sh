#!/usr/bin/env bash
# curl.sh - posattnd end-to-end tests with plain curl: runs the curl examples
# of README.md exactly as written there (with the server's real URL
# in place of http://127.0.0.1:8080) and checks what they print, then a few
# more requests for status codes and headers. Checks use python3 (no jq).
#
#   POSATTN_URL=http://127.0.0.1:8080 tests/e2e/curl.sh
#   tests/e2e/harness.sh tests/e2e/curl.sh      # starts the servers
#
# POSATTN_AUTH_URL / POSATTN_AUTH_KEY (set by harness.sh) enable 401 and 413.
set -u

URL=${POSATTN_URL:-http://127.0.0.1:8080}
URL=${URL%/}
AUTH_URL=${POSATTN_AUTH_URL:-}
API_KEY=${POSATTN_AUTH_KEY:-}
HERE=$(cd "$(dirname "$0")" && pwd)
# The pages whose marked examples are run (a list with ":").
EXAMPLES=${E2E_EXAMPLES:-$(printf '%s:' "$HERE/../../README.md" "$HERE"/../../docs/*.md)}
README_URL=http://127.0.0.1:8080
# Debian's python3 (a version manager's shim on PATH can take 100 ms a call).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

passed=0
failed=0
ok() { passed=$((passed + 1)); printf 'ok   %s\n' "$1"; }
bad() { failed=$((failed + 1)); printf 'FAIL %s: %s\n' "$1" "$2"; }

# example NAME: the sh block after <!-- e2e: curl NAME --> in $EXAMPLES.
example() {
    "$PY" - "$EXAMPLES" "$1" <<'EOF'
import re, sys
text = "\n".join(open(p, encoding="utf-8").read() for p in sys.argv[1].split(":") if p)
m = re.search(r"<!-- e2e: curl %s -->\s*```\w*\n(.*?)\n```" % re.escape(sys.argv[2]), text, re.S)
if not m:
    sys.exit("no curl example named %s in %s" % (sys.argv[2], sys.argv[1]))
print(m.group(1))
EOF
}

# run_example NAME: runs the example against $URL; its stdout in $out.
run_example() {
    local code
    code=$(example "$1") || { bad "$1" "example missing"; return 1; }
    code=${code//"$README_URL"/"$URL"}
    out=$(timeout 30 bash -euo pipefail -c "$code" 2>&1)
    local rc=$?
    if [ $rc -ne 0 ]; then
        bad "example $1" "exit $rc: $out"
        return 1
    fi
    return 0
}

# check NAME PYTHON-EXPR: evaluates EXPR with s = stdin text, j = its JSON
# (None if not JSON); passes when true.
check() {
    local name=$1 expr=$2 msg
    if msg=$(printf '%s' "$out" | "$PY" -c '
import json, sys
s = sys.stdin.read()
try:
    j = json.loads(s)
except ValueError:
    j = None
ok = eval("(" + sys.argv[1] + ")")
if not ok:
    print("check failed: %s\n  on: %.600s" % (sys.argv[1], s))
    sys.exit(1)
' "$expr" 2>&1); then
        ok "$name"
    else
        bad "$name" "$msg"
    fi
}

# status NAME WANT CURL-ARGS...: the HTTP status of a request.
status() {
    local name=$1 want=$2 got
    shift 2
    got=$(curl -sS --max-time 30 -o /dev/null -w '%{http_code}' "$@")
    if [ "$got" = "$want" ]; then ok "$name"; else bad "$name" "HTTP $got, expected $want"; fi
}

# --- the README examples --------------------------------------------------

if run_example healthz; then
    check "example healthz" 'j == {"status": "ok"}'
fi
if run_example attention; then
    check "example attention" 'j["errors"] is False and j["outputs"][0]["id"] == "first" and
        j["outputs"][0]["output"]["shape"] == [2, 1, 2] and
        all(abs(a - b) < 1e-6 for a, b in zip(j["outputs"][0]["output"]["data"], [1, 2, 2, 3]))'
fi
if run_example schemes; then
    check "example schemes" 'all(("\"%s\"" % n) in s for n in
        ["none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"])'
fi
if run_example error; then
    check "example error" 's.rstrip().endswith("HTTP 400") and
        json.loads(s.rstrip().rsplit("\n", 1)[0])["error"]["code"] == "MALFORMED_JSON"'
fi
if run_example metrics; then
    check "example metrics" 's.startswith("posattn_request_duration_seconds_count{") and
        float(s.split()[-1]) >= 1'
fi

# --- status codes and headers -----------------------------------------------

status "404 unknown path" 404 "$URL/v1/nothing"
status "405 GET on a POST route" 405 "$URL/v1/attention"
status "400 malformed JSON" 400 -H 'Content-Type: application/json' -d '{' "$URL/v1/attention"
status "readyz 200" 200 "$URL/readyz"
status "openapi.yaml 200" 200 "$URL/openapi.yaml"

out=$(curl -fsS --max-time 30 "$URL/openapi.yaml")
check "openapi.yaml names the routes" 's.lstrip().startswith("openapi:") and "/v1/attention:" in s'

out=$(curl -sS --max-time 30 -D - -o /dev/null -H 'Content-Type: application/json' \
    -d '{"inputs":[{"scheme":{"type":"none"},"q":{"shape":[1,1,1],"data":[1]},"k":{"shape":[1,1,1],"data":[1]},"v":{"shape":[1,1,1],"data":[5]}}]}' \
    "$URL/v1/attention")
check "Server-Timing header" '"server-timing: upload;dur=" in s.lower() and all(p + ";dur=" in s for p in ("parse", "queue", "compute", "render", "total"))'

out=$(curl -sS --max-time 30 -D - -o /dev/null "$URL/v1/attention")
check "405 names the allowed method" '"\nallow: post" in s.lower()'

if [ -n "$AUTH_URL" ]; then
    status "401 without a key" 401 -H 'Content-Type: application/json' -d '{"inputs":[]}' \
        "$AUTH_URL/v1/attention"
    status "401 with a wrong key" 401 -H 'Authorization: Bearer wrong' "$AUTH_URL/v1/schemes"
    status "200 with the key" 200 -H "Authorization: Bearer $API_KEY" "$AUTH_URL/v1/schemes"
    status "probes need no key" 200 "$AUTH_URL/healthz"
    # 1.5 MB against --max-body-mb 1.
    big=$(mktemp)
    trap 'rm -f "$big"' EXIT
    "$PY" -c 'import sys; sys.stdout.write("{\"inputs\":[],\"pad\":\"" + "x" * (3 << 19) + "\"}")' >"$big"
    status "413 body over --max-body-mb" 413 -H "Authorization: Bearer $API_KEY" \
        -H 'Content-Type: application/json' --data-binary "@$big" "$AUTH_URL/v1/attention"
else
    echo "skip 401/413 (POSATTN_AUTH_URL not set)"
fi

echo "curl: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
