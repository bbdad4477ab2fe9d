#!/usr/bin/env bash
# harness.sh - runs one end-to-end client against real posattnd processes.
#
#   tests/e2e/harness.sh COMMAND [ARGS...]
#
# Starts two servers on 127.0.0.1 with --port 0 (any free port), reading each
# port from the server's first stdout line and waiting for /healthz:
#   POSATTN_URL        default flags (--workers 2) plus $E2E_FLAGS
#   POSATTN_AUTH_URL   --api-key $POSATTN_AUTH_KEY --max-body-mb 1
# exports those variables, runs COMMAND (killed after $E2E_TIMEOUT s, default
# 60), then stops both servers with SIGTERM and requires exit status 0 within
# 15 s. The exit status is COMMAND's, or 1 when a server misbehaved. Servers
# are killed and temporary files removed on every exit path (trap).
#
# The binary is $POSATTND (default build/posattnd). The servers see none of
# posattnd's own POSATTN_* settings from the caller's environment.
set -u

POSATTND=${POSATTND:-build/posattnd}
E2E_TIMEOUT=${E2E_TIMEOUT:-60}
export POSATTN_AUTH_KEY=${POSATTN_AUTH_KEY:-e2e-secret}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posattnd-e2e.XXXXXX") || exit 1
pids=()
names=()

log() { printf 'harness: %s\n' "$*" >&2; }

dump() { # dump NAME: the tail of a server's stderr
    log "---- stderr of the $1 server (tail) ----"
    tail -n 30 "$tmp/$1.err" >&2 2>/dev/null
    log "---- end ----"
}

# A child that exited stays a zombie until reaped: look at its state too.
alive() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

# shellcheck disable=SC2317 # runs from the trap
cleanup() {
    local i
    for i in "${!pids[@]}"; do
        if alive "${pids[$i]}"; then
            kill -KILL "${pids[$i]}" 2>/dev/null
            log "killed the ${names[$i]} server"
        fi
    done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME FLAGS...: starts a server, sets $url.
start() {
    local name=$1 pid line port deadline
    shift
    if [ ! -x "$POSATTND" ]; then
        log "$POSATTND is not an executable (build it, or set POSATTND)"
        exit 1
    fi
    (
        for v in $(compgen -e); do
            case $v in POSATTN_URL | POSATTN_AUTH_URL | POSATTN_AUTH_KEY) ;; POSATTN_*) unset "$v" ;; esac
        done
        exec "$POSATTND" --host 127.0.0.1 --port 0 "$@"
    ) >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pid=$!
    pids+=("$pid")
    names+=("$name")
    deadline=$((SECONDS + 10))
    line=""
    while [ -z "$line" ]; do
        line=$(grep -m1 'listening on http://' "$tmp/$name.out" 2>/dev/null)
        if [ -z "$line" ]; then
            if ! alive "$pid"; then
                log "the $name server exited before listening"
                dump "$name"
                exit 1
            fi
            if [ "$SECONDS" -ge "$deadline" ]; then
                log "the $name server printed no listening line within 10 s"
                dump "$name"
                exit 1
            fi
            sleep 0.02
        fi
    done
    port=${line##*http://127.0.0.1:}
    port=${port%% *}
    case $port in
    '' | *[!0-9]*)
        log "cannot read the port from: $line"
        exit 1
        ;;
    esac
    url="http://127.0.0.1:$port"
    until curl -fsS --max-time 2 -o /dev/null "$url/healthz" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "the $name server at $url did not answer /healthz within 10 s"
            dump "$name"
            exit 1
        fi
        sleep 0.02
    done
}

# stop INDEX: SIGTERM, then exit status 0 within 15 s. Returns 0 when clean.
stop() {
    local pid=${pids[$1]} name=${names[$1]} deadline rc
    kill -TERM "$pid" 2>/dev/null
    deadline=$((SECONDS + 15))
    while alive "$pid"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "the $name server did not exit within 15 s of SIGTERM"
            dump "$name"
            return 1
        fi
        sleep 0.02
    done
    wait "$pid"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        log "the $name server exited with status $rc after SIGTERM, expected 0"
        dump "$name"
        return 1
    fi
    return 0
}

if [ $# -eq 0 ]; then
    sed -n '2,16s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi

# shellcheck disable=SC2086 # E2E_FLAGS is a list of flags
start main --workers 2 ${E2E_FLAGS:-}
export POSATTN_URL=$url
start auth --workers 1 --api-key "$POSATTN_AUTH_KEY" --max-body-mb 1
export POSATTN_AUTH_URL=$url

t0=$(date +%s.%N)
timeout -k 5 "$E2E_TIMEOUT" "$@"
rc=$?
t1=$(date +%s.%N)
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    log "$* did not finish within $E2E_TIMEOUT s"
fi
if [ "$rc" -ne 0 ]; then
    dump main
fi

for i in "${!pids[@]}"; do
    stop "$i" || rc=1
done
log "$(basename "$1"): exit $rc in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s"
exit "$rc"
