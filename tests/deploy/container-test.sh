#!/usr/bin/env bash
# container-test.sh - the posattnd image, run as a container (make container-test).
#
# Needs the image built (make image) and podman configured (make runs this
# under deploy/container-env.sh). Checks the image's metadata (non-
# root numeric user, exec-form entrypoint, port, POSATTN_HOST, healthcheck,
# size), then runs it read-only with every capability dropped on a free
# 127.0.0.1 port, configured by POSATTN_* variables only, and checks
# /healthz, /readyz, a real /v1/attention answer, the API key from the
# environment, the healthcheck (and that it can fail), the JSON access log,
# then SIGTERM via `podman stop` while a request is in flight: that request
# must be answered and the container must exit 0 by itself. The container is
# removed on every exit path.
#
# Environment: POSATTN_IMAGE (default localhost/posattnd:dev),
# IMAGE_MAX_MB (default 160: fails when the image grows past it).
set -u
TEST_NAME=container-test
# shellcheck source=tests/deploy/common.sh
. "$(dirname "$0")/common.sh"

IMAGE=${POSATTN_IMAGE:-localhost/posattnd:dev}
IMAGE_MAX_MB=${IMAGE_MAX_MB:-160}
name=posattn-ct-$$
key=ct-secret-$$

command -v podman >/dev/null || die "podman is missing (make container-test sets it up)"
pm image exists "$IMAGE" || die "no image $IMAGE (make image)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posattn-ct.XXXXXX") || exit 1
on_exit "rm -rf '$tmp'"
on_exit kill_stale_containers
on_exit "pm rm -f -t 0 $name >/dev/null 2>&1"

# ---- the image ----
inspect() { pm image inspect --format "$1" "$IMAGE"; }
user=$(inspect '{{.Config.User}}')
check "image runs as a numeric non-root user ($user)" test "$user" = "10001:10001"
entry=$(inspect '{{json .Config.Entrypoint}}')
check "entrypoint is exec form, posattnd itself ($entry)" test "$entry" = '["/usr/local/bin/posattnd"]'
ports=$(inspect '{{json .Config.ExposedPorts}}')
check "exposes 8080/tcp ($ports)" grep -q '"8080/tcp"' <<<"$ports"
env=$(inspect '{{json .Config.Env}}')
check "POSATTN_HOST=0.0.0.0 in the image's environment" grep -q '"POSATTN_HOST=0.0.0.0"' <<<"$env"
hc=$(inspect '{{json .Config.Healthcheck}}')
check "has a HEALTHCHECK on /healthz (docker format)" grep -q '/healthz' <<<"$hc"
size=$(inspect '{{.Size}}')
size_mb=$((size / 1000000))
log "image $IMAGE: $size_mb MB"
check "image is $size_mb MB (at most $IMAGE_MAX_MB)" test "$size_mb" -le "$IMAGE_MAX_MB"

# ---- running, read-only, no capabilities, configured by the environment ----
port=$(free_port)
pm run -d --name "$name" -p "127.0.0.1:$port:8080" \
    --read-only --cap-drop ALL --security-opt no-new-privileges \
    -e POSATTN_WORKERS=2 -e POSATTN_API_KEY="$key" -e POSATTN_DRAIN_TIMEOUT=15 \
    "$IMAGE" >/dev/null || die "podman run failed"
remember_containers "$name"
url="http://127.0.0.1:$port"
if ! wait_http "$url/healthz" 30; then
    pm logs "$name" >&2
    die "the container did not answer /healthz on 127.0.0.1:$port"
fi
check "GET /healthz answers {\"status\":\"ok\"}" test "$(curl -fsS "$url/healthz")" = '{"status":"ok"}'
check "GET /readyz answers 200" curl -fsS -o /dev/null "$url/readyz"
mapping=$(pm port "$name")
check "published on 127.0.0.1 only ($mapping)" test "$mapping" = "8080/tcp -> 127.0.0.1:$port"
check "PID 1 is posattnd, as uid 10001" test "$(pm exec "$name" sh -c 'cat /proc/1/comm; id -u' | tr '\n' ' ')" = "posattnd 10001 "

answer=$(curl -sS --max-time 10 "$url/v1/attention" -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' -d "$README_BODY")
check "POST /v1/attention answers the README example [1, 2, 2, 3]" readme_output_ok "$answer"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url/v1/attention" -d "$README_BODY")
check "POSATTN_API_KEY from the environment is enforced (no key: $code)" test "$code" = 401
check "GET /metrics counts the request" \
    sh -c "curl -fsS '$url/metrics' | grep -q '^posattn_requests_total{endpoint=\"attention\",code=\"200\"} 1'"

# ---- healthcheck ----
check "podman healthcheck run: healthy" pm healthcheck run "$name"
hc_cmd=$(pm image inspect --format '{{index .Config.Healthcheck.Test 3}}' "$IMAGE")
if pm exec -e POSATTN_PORT=1 "$name" bash -c "$hc_cmd" >/dev/null 2>&1; then
    fail "the healthcheck command passes with nothing listening (POSATTN_PORT=1)"
else
    pass "the healthcheck command fails with nothing listening (POSATTN_PORT=1)"
fi

# ---- SIGTERM with a request in flight ----
"$PYTHON" "$DEPLOY_TESTS/load.py" --heavy-body "$tmp/heavy.json" 4096,8,64
curl -s -o /dev/null -w '%{http_code}' --max-time 60 "$url/v1/attention" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    --data-binary @"$tmp/heavy.json" >"$tmp/heavy.code" &
curl_pid=$!
on_exit "kill $curl_pid 2>/dev/null"
sleep 0.3
t0=$SECONDS
pm stop -t 30 "$name" >/dev/null
wait "$curl_pid"
stop_s=$((SECONDS - t0))
code=$(cat "$tmp/heavy.code")
check "the request in flight at SIGTERM was answered (HTTP $code)" test "$code" = 200
rc=$(pm inspect --format '{{.State.ExitCode}}' "$name")
check "the container exited 0 by itself after SIGTERM (status $rc, ${stop_s} s)" \
    sh -c "test '$rc' = 0 && test $stop_s -lt 30"
pm logs "$name" >"$tmp/logs" 2>&1
check "posattnd logged the drain" grep -q 'SIGTERM received, draining' "$tmp/logs"
check "posattnd logged JSON access lines" grep -q '^{"ts":.*"path":"/v1/attention","status":200' "$tmp/logs"

pm rm -f -t 0 "$name" >/dev/null 2>&1
check "the container is removed" sh -c "! podman container exists $name"
finish
