#!/usr/bin/env bash
# lb-test.sh - deploy/nginx.conf in front of 3 local posattnd processes, no
# containers (make lb-test; runs in CI).
#
# Renders deploy/nginx.conf for loopback (only its `listen 8080;` line and its
# `server posattnd-N:8080 ...;` lines change: each names a local replica's
# address instead, same parameters), starts 3 replicas on free 127.0.0.1 ports and nginx on another,
# then sends a bounded load through nginx (tests/deploy/load.py) during which
#   at 20% of the answers replica A is killed with SIGKILL (connections reset,
#          kept-alive upstream connections dead, later connects refused), and
#   at 35% replica B, busy with a large request, gets SIGTERM: it finishes
#          that request while answering 503 to new ones, then exits 0.
# Before the load, session affinity (tests/deploy/affinity.py): requests with
# one X-Posattn-Session key, or one /v1/sessions/{id} path, all reach one
# replica, the header wins over the path, and stateless requests stay round
# robin over all three. The rendered copy adds one line for it, an
# `add_header X-Posattn-Upstream $upstream_addr` (the real config does not
# show clients the replicas' addresses).
# Checks: no request fails and every answer is right, every replica served,
# nginx retried requests on another replica (after the kill, and the 503s of
# the drain), B answered its large request and exited 0, and the survivor
# still serves. Everything started is killed and the temporary
# folder removed on every exit path.
#
# Environment: POSATTND (default build/posattnd), NGINX (default: nginx on
# PATH or /usr/sbin/nginx), LB_REQUESTS (1500), LB_CONCURRENCY (8), LB_KEEP=1
# keeps the temporary folder (logs, rendered config) for a look afterwards.
set -u
TEST_NAME="lb-test"
# shellcheck source=tests/deploy/common.sh
. "$(dirname "$0")/common.sh"

POSATTND=${POSATTND:-build/posattnd}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
CONF=${NGINX_CONF:-deploy/nginx.conf}
REQUESTS=${LB_REQUESTS:-1500}
CONCURRENCY=${LB_CONCURRENCY:-8}

[ -x "$POSATTND" ] || die "$POSATTND is not an executable (make $POSATTND)"
[ -x "$NGINX" ] || die "no nginx at $NGINX (make deploy-deps installs it)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posattn-lb.XXXXXX") || exit 1
# nginx started as root runs its workers as nobody: they must reach the prefix.
chmod 755 "$tmp"
pids=()
pid_nginx=""
# shellcheck disable=SC2317 # runs from the exit trap
stop_all() {
    local p
    # nginx runs in its own process group (setsid). SIGTERM first, so the
    # master stops and reaps its workers; then the group takes any left.
    if [ -n "$pid_nginx" ] && pgrep -g "$pid_nginx" >/dev/null; then
        kill -TERM "$pid_nginx" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do pgrep -g "$pid_nginx" >/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pid_nginx" 2>/dev/null
    fi
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
}
if [ -n "${LB_KEEP:-}" ]; then on_exit "log 'kept $tmp'"; else on_exit "rm -rf '$tmp'"; fi
on_exit stop_all

dump() {
    local f
    for f in "$@"; do
        [ -s "$tmp/$f" ] || continue
        log "---- $f (tail) ----"
        tail -n 20 "$tmp/$f" >&2
    done
}

# start_replica NAME WORKERS: starts posattnd on a free port; sets PID and PORT.
start_replica() {
    local name=$1 workers=$2 line deadline
    (
        for v in $(compgen -e); do case $v in POSATTN_*) unset "$v" ;; esac; done
        exec "$POSATTND" --host 127.0.0.1 --port 0 --workers "$workers" --drain-timeout 10 --log-format off
    ) >"$tmp/$name.out" 2>"$tmp/$name.err" &
    PID=$!
    pids+=("$PID")
    deadline=$((SECONDS + 10))
    line=""
    until [ -n "$line" ]; do
        line=$(grep -m1 -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/$name.out" 2>/dev/null)
        if [ -z "$line" ]; then
            if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$PID" 2>/dev/null; then
                dump "$name.err"
                die "replica $name did not start"
            fi
            sleep 0.02
        fi
    done
    PORT=${line##*:}
}

# B has a second worker, so that while one computes the large request of
# its drain (below) the other still answers the load quickly: the load keeps
# reaching B during the drain instead of queueing there.
start_replica A 1; pid_a=$PID; port_a=$PORT
# A will die of SIGKILL: out of the job table, so bash prints no "Killed".
disown "$pid_a"
start_replica B 2; pid_b=$PID; port_b=$PORT
start_replica C 1; pid_c=$PID; port_c=$PORT
log "replicas A 127.0.0.1:$port_a (pid $pid_a), B :$port_b (pid $pid_b), C :$port_c (pid $pid_c)"

# Render the config: exactly one listen line and three server lines must
# change; the `location / {` line gets the upstream's address as a response
# header.
lb_port=$(free_port)
awk -v listen="127.0.0.1:$lb_port" -v servers="127.0.0.1:$port_a 127.0.0.1:$port_b 127.0.0.1:$port_c" '
    BEGIN { split(servers, s, " ") }
    /^[ \t]*listen 8080;/ { sub(/listen 8080;/, "listen " listen ";"); nl++ }
    /^[ \t]*server posattnd-[0-9]+:8080[ ;]/ {
        nu++; sub(/posattnd-[0-9]+:8080/, s[nu]); print; next
    }
    /^[ \t]*location \/ \{/ {
        print; indent = $0; sub(/[^ \t].*$/, "", indent)
        print indent "    add_header X-Posattn-Upstream $upstream_addr always;"
        nloc++; next
    }
    { print }
    END { if (nl != 1 || nu != 3 || nloc != 1) exit 3 }' "$CONF" >"$tmp/nginx.conf" ||
    die "$CONF no longer has exactly one 'listen 8080;', three 'server posattnd-N:8080 ...;' and one 'location / {' line"
pass "rendered $CONF for 3 loopback replicas (listen 127.0.0.1:$lb_port)"

if "$NGINX" -t -q -e stderr -p "$tmp/" -c "$tmp/nginx.conf" 2>"$tmp/nginx-t.err"; then
    pass "nginx -t accepts the rendered config"
else
    dump nginx-t.err
    die "nginx -t rejects the rendered config"
fi

setsid "$NGINX" -e stderr -p "$tmp/" -c "$tmp/nginx.conf" -g 'daemon off;' >"$tmp/access.log" 2>"$tmp/nginx.err" &
pid_nginx=$!
lb="http://127.0.0.1:$lb_port"
wait_http "$lb/lb-healthz" 10 || { dump nginx.err; die "nginx did not start"; }
check "GET /healthz through nginx answers 200" wait_http "$lb/healthz" 10
# A malformed Content-Length: libmicrohttpd 0.9.75 answers it with its
# header block written twice (docs/running.md); nginx refuses it first.
check "nginx answers a malformed Content-Length with one 400" \
    "$PYTHON" "$(dirname "$0")/one_answer.py" "$lb_port"
check "(posattnd alone writes that answer's header block twice)" \
    sh -c "! '$PYTHON' '$(dirname "$0")/one_answer.py' '$port_c' 2>/dev/null"

# Session affinity, while all three replicas are up.
if aff=$("$PYTHON" "$DEPLOY_TESTS/affinity.py" "$lb" X-Posattn-Upstream); then
    pass "session affinity: one replica per X-Posattn-Session key and per /v1/sessions/{id}, the header over the path, stateless round robin ($aff)"
else
    fail "session affinity: $aff"
fi

# B's drain: a request sent to B directly keeps one of its workers busy for
# about half a second here (a 2.7 MB body in layer mode, parsed in
# milliseconds and never split over workers, then attention over
# [4096, 8, 64]); 0.1 s after it starts, when it is computing, SIGTERM.
# (At [3072, 8, 64] and 0.3 s, a fast CPU had finished the request before
# SIGTERM: B had nothing to drain and no 503 reached nginx.) While B
# finishes it, B answers new requests 503 and nginx must send them to C.
"$PYTHON" "$DEPLOY_TESTS/load.py" --heavy-body "$tmp/heavy.json" 4096,8,64
cat >"$tmp/drain-b.sh" <<SCRIPT
curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 60 -H 'Content-Type: application/json' \\
    --data-binary @$tmp/heavy.json http://127.0.0.1:$port_b/v1/attention >$tmp/heavy.code &
sleep 0.1
kill -TERM $pid_b
wait
SCRIPT

log "load: $REQUESTS requests, $CONCURRENCY at a time; SIGKILL A at 20%, drain B at 35%"
if "$PYTHON" "$DEPLOY_TESTS/load.py" "$lb" --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
    --timeout 120 --json "$tmp/load.json" \
    --at 0.2 "kill -KILL $pid_a" --at 0.35 "bash $tmp/drain-b.sh"; then
    pass "all $REQUESTS requests answered 200 with the right outputs, through a SIGKILL and a drain"
else
    dump nginx.err
    fail "some requests failed (above)"
fi

# B drains and exits 0 by itself.
deadline=$((SECONDS + 15))
while kill -0 "$pid_b" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
wait "$pid_b" 2>/dev/null
rc_b=$?
check "replica B exited 0 after SIGTERM (drained), got $rc_b" test "$rc_b" -eq 0
read -r code took <"$tmp/heavy.code" 2>/dev/null
check "B answered the request in flight at SIGTERM (HTTP $code)" test "$code" = 200
# It must have outlasted the 0.1 s before SIGTERM, or there was nothing to drain.
check "that request was still computing at SIGTERM (it took ${took:-?} s)" \
    "$PYTHON" -c 'import sys; sys.exit(not float(sys.argv[1]) > 0.12)' "${took:-0}"
ended=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["events"][1]["ended_after_answers"])' "$tmp/load.json")
check "B's drain was over before the load (after $ended of $REQUESTS answers)" test "$ended" -lt "$REQUESTS"
check "replica A is gone (SIGKILL)" sh -c "! kill -0 $pid_a 2>/dev/null"
# A is gone and reaped, so its PID may be reused: the cleanup must not touch it.
pids=("$pid_b" "$pid_c")

# The affinity check's GET /v1/sessions/{id} answer 404 (no such session):
# left out of the counts below.
stats=$(grep -v '"GET /v1/sessions/' "$tmp/access.log" | "$PYTHON" "$DEPLOY_TESTS/upstreams.py")
log "nginx access log: $stats"
field() { printf '%s' "$stats" | "$PYTHON" -c "import json,sys; s=json.load(sys.stdin); print($1)"; }
for r in A:$port_a B:$port_b C:$port_c; do
    n=$(field "s['served'].get('127.0.0.1:${r#*:}', 0)")
    check "replica ${r%%:*} served requests ($n)" test "$n" -gt 0
done
n=$(field "sum(s['statuses'].values()) - s['statuses'].get('200', 0)")
check "nginx answered no request with an error ($n)" test "$n" -eq 0
n=$(field "s['retried']")
check "nginx retried requests on another replica ($n)" test "$n" -gt 0
n=$(field "s['attempts'].get('503', 0)")
check "nginx sent the draining replica's 503s to another replica ($n)" test "$n" -gt 0
check "replica C alone still serves the README example" \
    readme_output_ok "$(curl -fsS --max-time 10 "$lb/v1/attention" -H 'Content-Type: application/json' -d "$README_BODY")"
log "nginx error log: $(grep -c 'connect() failed' "$tmp/nginx.err") refused connects," \
    "$(grep -c -E 'prematurely closed|reset by peer' "$tmp/nginx.err") resets," \
    "$(grep -c 'upstream server temporarily disabled' "$tmp/nginx.err") replica disablings"

# A graceful stop (SIGQUIT) must end the whole group.
kill -QUIT "$pid_nginx" 2>/dev/null
deadline=$((SECONDS + 10))
while pgrep -g "$pid_nginx" >/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
check "nginx stopped gracefully on SIGQUIT" sh -c "! pgrep -g $pid_nginx >/dev/null"
finish
