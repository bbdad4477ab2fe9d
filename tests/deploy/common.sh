# shellcheck shell=bash disable=SC2034,SC2317
# common.sh - shared by the deploy tests (sourced, bash). Counts checks and
# prints the closing line "NAME: N passed, M failed".
#
# A test sets TEST_NAME, sources this file, registers its cleanup with
# `on_exit CMD` (run in reverse order on every exit path), and calls
# `pass MSG`, `fail MSG` or `check MSG COMMAND...`; `finish` prints the
# summary and exits 0 only if nothing failed.

PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3
DEPLOY_TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
N_PASSED=0
N_FAILED=0
EXIT_CMDS=()

log() { printf '%s: %s\n' "$TEST_NAME" "$*" >&2; }
pass() { N_PASSED=$((N_PASSED + 1)); printf '%s: ok   %s\n' "$TEST_NAME" "$*"; }
fail() { N_FAILED=$((N_FAILED + 1)); printf '%s: FAIL %s\n' "$TEST_NAME" "$*"; }

# check MSG COMMAND...: passes when COMMAND exits 0.
check() {
    local msg=$1
    shift
    if "$@"; then pass "$msg"; else fail "$msg"; fi
}

# Fatal: count a failure, print the summary, exit (the cleanups run).
die() {
    fail "$*"
    finish
}

on_exit() { EXIT_CMDS+=("$*"); }

run_exit_cmds() {
    local i
    for ((i = ${#EXIT_CMDS[@]} - 1; i >= 0; i--)); do
        eval "${EXIT_CMDS[$i]}" || true
    done
    EXIT_CMDS=()
}
# shellcheck disable=SC2154 # rc is set inside the trap
trap 'rc=$?; run_exit_cmds; exit "$rc"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

finish() {
    trap - ERR
    printf '%s: %d passed, %d failed\n' "$TEST_NAME" "$N_PASSED" "$N_FAILED"
    if [ "$N_FAILED" -eq 0 ] && [ "$N_PASSED" -gt 0 ]; then exit 0; fi
    exit 1
}

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_http URL SECONDS [EXPECTED_STATUS]: polls until URL answers that status (default 200).
wait_http() {
    local url=$1 limit=$2 want=${3:-200} deadline code
    deadline=$((SECONDS + limit))
    while [ "$SECONDS" -lt "$deadline" ]; do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" 2>/dev/null)
        [ "$code" = "$want" ] && return 0
        sleep 0.1
    done
    log "$url did not answer $want within $limit s (last: $code)"
    return 1
}

# The README's RoPE example; its output is [1, 2, 2, 3].
README_BODY='{"inputs":[{"id":"first","scheme":{"type":"rope","base":10000},"causal":true,
 "q":{"shape":[2,1,2],"data":[[[1,0]],[[0,0]]]},"k":{"shape":[2,1,2],"data":[1,0,0,1]},
 "v":{"shape":[2,1,2],"data":[1,2,3,4]}}]}'

# readme_output_ok JSON: the answer carries [1, 2, 2, 3].
readme_output_ok() {
    printf '%s' "$1" | "$PYTHON" -c '
import json, sys
a = json.load(sys.stdin)
d = a["outputs"][0]["output"]["data"]
sys.exit(0 if a["errors"] is False and [round(x, 6) for x in d] == [1, 2, 2, 3] else 1)'
}

# Containers: podman without systemd reports its healthcheck timers as
# errors; they are noise here (tests run `podman healthcheck run` themselves).
pm() { podman "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }

# A `podman stop` cut short (the test interrupted) can leave the container's
# process running after `podman rm -f` has dropped its record. So the tests
# note the host PID (and start time, against PID reuse) of each container
# they start, and kill_stale_containers kills any that outlived the cleanup.
CONTAINER_PIDS=()
remember_containers() {
    local n p start
    for n in "$@"; do
        p=$(podman inspect --format '{{.State.Pid}}' "$n" 2>/dev/null)
        if [ -z "$p" ] || [ "$p" = 0 ]; then continue; fi
        start=$(awk '{print $22}' "/proc/$p/stat" 2>/dev/null) || continue
        CONTAINER_PIDS+=("$p:$start")
    done
}
kill_stale_containers() {
    local e p
    for e in "${CONTAINER_PIDS[@]}"; do
        p=${e%%:*}
        if [ "$(awk '{print $22}' "/proc/$p/stat" 2>/dev/null)" = "${e#*:}" ]; then
            log "killing container process $p that podman left behind"
            kill -KILL "$p" 2>/dev/null
        fi
    done
    return 0
}
