#!/usr/bin/env bash
# compose-test.sh - deploy/compose.yaml brought up with podman-compose: 3
# posattnd replicas (posattnd-1 .. posattnd-3) behind nginx, one port on
# 127.0.0.1, sessions in a shared named volume (make compose-test).
#
# Needs both images built (make image lb-image) and podman configured (make
# runs this under deploy/container-env.sh). Checks: 3 replicas
# running, the balancer published on 127.0.0.1 only, a bounded load through
# nginx with every answer right and all 3 replicas serving (nginx's access
# log against the replicas' own addresses), then a replica stopped with
# `podman stop` mid-load: no request fails and it exits 0 (drained). In
# between, Prometheus (deploy/prometheus/, on its own 127.0.0.1 port) must
# scrape all 3 replicas, evaluate every rule, and answer /api/v1/query with
# a p99 compute time (histogram_quantile, and the recording rule) for each
# scheme loaded (tests/monitor/promquery.py polls its API). Then sessions
# (tests/deploy/sessions_lb.py): 200 created and stepped through nginx land
# on all 3 replicas, every step of a session on the replica that holds it
# (X-Posattn-Replica) and equal to a stateless control; replica 3 is
# stopped mid-load (SIGTERM: it drains and saves its sessions to the shared
# volume), the others take its sessions over on first use, it is started
# again (and nginx reloaded, to find its new address) and serves the
# sessions nobody took meanwhile; the other replicas' sessions never
# notice. Then `podman-compose down -v` and the project network removed;
# the containers, the network and the volume are removed on every exit
# path, by the project's label.
#
# Environment: POSATTN_IMAGE, POSATTN_LB_IMAGE, POSATTN_PROM_IMAGE (the
# compose file's defaults otherwise), COMPOSE_REQUESTS (300),
# COMPOSE_CONCURRENCY (6), COMPOSE_SESSIONS (200).
set -u
TEST_NAME=compose-test
# shellcheck source=tests/deploy/common.sh
. "$(dirname "$0")/common.sh"

ROOT=$(cd "$DEPLOY_TESTS/../.." && pwd)
COMPOSE_FILE=$ROOT/deploy/compose.yaml
REQUESTS=${COMPOSE_REQUESTS:-300}
SESSIONS=${COMPOSE_SESSIONS:-200}
CONCURRENCY=${COMPOSE_CONCURRENCY:-6}
project=posattnct$$
network=${project}_default

compose() { podman-compose -f "$COMPOSE_FILE" -p "$project" "$@"; }

command -v podman-compose >/dev/null || die "podman-compose is missing (make compose-test sets it up)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posattn-compose.XXXXXX") || exit 1
# shellcheck disable=SC2317 # runs from the exit trap
cleanup() {
    local ids
    ids=$(podman ps -aq --filter "label=io.podman.compose.project=$project" 2>/dev/null)
    # shellcheck disable=SC2086 # a list of IDs
    [ -n "$ids" ] && pm rm -f -t 0 $ids >/dev/null 2>&1
    podman network exists "$network" 2>/dev/null && podman network rm -f "$network" >/dev/null 2>&1
    ids=$(podman volume ls -q --filter "label=io.podman.compose.project=$project" 2>/dev/null)
    # shellcheck disable=SC2086 # a list of names
    [ -n "$ids" ] && podman volume rm -f $ids >/dev/null 2>&1
    return 0
}
on_exit "rm -rf '$tmp'"
on_exit kill_stale_containers
on_exit cleanup

export POSATTN_LB_PORT POSATTN_PROM_PORT
POSATTN_LB_PORT=$(free_port)
POSATTN_PROM_PORT=$(free_port)
# Three replicas share this machine's cores.
export POSATTN_WORKERS=1
log "project $project, balancer on 127.0.0.1:$POSATTN_LB_PORT, prometheus on 127.0.0.1:$POSATTN_PROM_PORT"
compose up -d >"$tmp/up.log" 2>&1
up_rc=$?
# shellcheck disable=SC2046 # a list of IDs
remember_containers $(podman ps -aq --filter "label=io.podman.compose.project=$project")
if [ "$up_rc" -ne 0 ]; then
    cat "$tmp/up.log" >&2
    die "podman-compose up failed"
fi
lb="http://127.0.0.1:$POSATTN_LB_PORT"
lb_name=${project}_lb_1
if ! wait_http "$lb/lb-healthz" 60; then
    pm logs "$lb_name" >&2
    die "nginx did not answer on 127.0.0.1:$POSATTN_LB_PORT"
fi
check "GET /healthz through nginx answers 200" wait_http "$lb/healthz" 30

# The replicas: the services posattnd-1 .. posattnd-3, one container each.
replica() { printf '%s_posattnd-%s_1' "$project" "$1"; }
replicas=$(podman ps -q --filter "label=io.podman.compose.project=$project" \
    --filter "name=_posattnd-[0-9]+_1\$" --filter status=running | wc -l)
check "3 posattnd replicas running ($replicas)" test "$replicas" -eq 3
mapping=$(pm port "$lb_name")
check "one port published, on 127.0.0.1 only ($mapping)" test "$mapping" = "8080/tcp -> 127.0.0.1:$POSATTN_LB_PORT"
check "the replicas publish no port" \
    test -z "$(podman ps --filter "label=io.podman.compose.project=$project" \
        --filter "name=_posattnd-[0-9]+_1\$" --format '{{.Ports}}' | tr -d ' \n')"

# The replicas' own addresses, to compare with what nginx logged.
declare -A ip_of
for i in 1 2 3; do
    ip_of[$i]=$(pm inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(replica "$i")")
done
log "replicas at ${ip_of[1]}, ${ip_of[2]}, ${ip_of[3]}"

if "$PYTHON" "$DEPLOY_TESTS/load.py" "$lb" --requests "$REQUESTS" --concurrency "$CONCURRENCY" --timeout 120; then
    pass "all $REQUESTS requests through nginx answered 200 with the right outputs"
else
    fail "some requests through nginx failed (above)"
fi
pm logs "$lb_name" >"$tmp/lb.log" 2>/dev/null
stats=$("$PYTHON" "$DEPLOY_TESTS/upstreams.py" "$tmp/lb.log")
log "nginx access log: $stats"
field() { printf '%s' "$stats" | "$PYTHON" -c "import json,sys; s=json.load(sys.stdin); print($1)"; }
for i in 1 2 3; do
    n=$(field "s['served'].get('${ip_of[$i]}:8080', 0)")
    check "replica $i (${ip_of[$i]}) served requests ($n)" test "$n" -gt 0
done
n=$(field "len(s['served'])")
check "nginx sent requests to these 3 replicas only ($n addresses)" test "$n" -eq 3
n=$(field "sum(s['statuses'].values()) - s['statuses'].get('200', 0)")
check "nginx answered no request with an error ($n)" test "$n" -eq 0

# Prometheus: the replicas found by DNS and scraped, every rule evaluated,
# and a p99 per scheme. rate() needs each series to grow between scrapes
# (every 2 s), so after the first scrapes rope, alibi and none requests go
# through nginx in rounds a scrape apart.
prom="http://127.0.0.1:$POSATTN_PROM_PORT"
prom_name=${project}_prometheus_1
mapping=$(pm port "$prom_name")
check "prometheus published on 127.0.0.1 only ($mapping)" test "$mapping" = "9090/tcp -> 127.0.0.1:$POSATTN_PROM_PORT"
pq() { # pq MSG ARGS...: a tests/monitor/promquery.py check against $prom
    local msg=$1 out
    shift
    if out=$("$PYTHON" "$ROOT/tests/monitor/promquery.py" "$prom" "$@" --timeout 40); then
        pass "$msg: $out"
    else
        fail "$msg: $out"
    fi
}
if wait_http "$prom/-/ready" 60; then
    pq "prometheus scrapes the 3 replicas" 'count(up{job="posattnd"} == 1)' --equals 3
    bad=0
    for round in 1 2 3 4; do
        for scheme in rope alibi none; do
            for _ in 1 2 3 4 5 6; do
                code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$lb/v1/attention" \
                    -H 'Content-Type: application/json' -d '{"inputs":[{"scheme":{"type":"'"$scheme"'"},
                    "q":{"shape":[2,1,2],"data":[1,0,0,0]},"k":{"shape":[2,1,2],"data":[1,0,0,1]},
                    "v":{"shape":[2,1,2],"data":[1,2,3,4]}}]}')
                [ "$code" = 200 ] || bad=$((bad + 1))
            done
        done
        [ "$round" = 4 ] || sleep 2.2
    done
    check "72 rope, alibi and none requests through nginx answered 200 ($bad did not)" test "$bad" -eq 0
    pq "histogram_quantile gives a p99 compute time per scheme" \
        'histogram_quantile(0.99, sum by (scheme, le) (rate(posattn_compute_duration_seconds_bucket[1m])))' \
        --label scheme --want rope,alibi,none
    pq "the recording rule of rules.yml gives the same schemes" \
        'job_scheme:posattn_compute_duration_seconds:p99_5m{job="posattnd"}' --label scheme --want rope,alibi,none
    pq "each replica's rope tasks are in Prometheus" \
        'count(count by (instance) (posattn_compute_duration_seconds_count{scheme="rope"}))' --equals 3
    pq "prometheus evaluates every rule, no alert active" --rules-ok
else
    pm logs "$prom_name" 2>&1 | tail -20 >&2
    fail "prometheus did not answer /-/ready on 127.0.0.1:$POSATTN_PROM_PORT"
fi

# Sessions through nginx, replica 3 stopped and started again mid-load.
victim=$(replica 3)
cat >"$tmp/start-victim.sh" <<EOF
set -u
podman start $victim >/dev/null 2>&1 || exit 1
# Healthy (its HEALTHCHECK: GET /healthz), then nginx reloaded: it resolves
# the replicas' names again, and podman gave the container a new address.
for _ in \$(seq 100); do podman healthcheck run $victim >/dev/null 2>&1 && break; sleep 0.2; done
podman healthcheck run $victim >/dev/null 2>&1 || exit 1
podman kill --signal HUP ${project}_lb_1 >/dev/null || exit 1
sleep 1
EOF
if "$PYTHON" "$DEPLOY_TESTS/sessions_lb.py" "$lb" --victim posattnd-3 --sessions "$SESSIONS" \
    --json "$tmp/sessions.json" --stop "podman stop -t 25 $victim >/dev/null 2>&1" \
    --start "bash $tmp/start-victim.sh" >"$tmp/sessions.out"; then
    pass "sessions: $(cat "$tmp/sessions.out")"
else
    fail "sessions: $(cat "$tmp/sessions.out")"
fi
remember_containers "$victim"
pm logs "$victim" >"$tmp/victim-sessions.log" 2>&1
saved=$(grep -o '[0-9]* sessions\? saved to [^"]*' "$tmp/victim-sessions.log" | head -1)
loaded=$(grep -o '[0-9]* sessions\? loaded from [^"]*' "$tmp/victim-sessions.log" | tail -1)
check "replica 3 saved its sessions when it drained ($saved)" test -n "$saved"
check "replica 3 loaded the sessions still its own when it started again ($loaded)" \
    test "${loaded%% *}" -gt 0

# A replica stopped mid-load: SIGTERM, drain, exit 0; nginx fails over.
# Four times the first load: the stop now also saves the sessions the
# replica holds (one fsynced file each), which takes a moment more.
n2=$((REQUESTS * 4))
if "$PYTHON" "$DEPLOY_TESTS/load.py" "$lb" --requests "$n2" --concurrency "$CONCURRENCY" --timeout 120 \
    --json "$tmp/load2.json" --at 0.2 "podman stop -t 25 $victim >/dev/null 2>&1"; then
    pass "no request failed while replica 3 was stopped mid-load"
else
    fail "requests failed while replica 3 was stopped (above)"
fi
ended=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["events"][0]["ended_after_answers"])' "$tmp/load2.json")
check "replica 3 was down before the load ended (after $ended of $n2 answers)" test "$ended" -lt "$n2"
rc=$(pm inspect --format '{{.State.ExitCode}}' "$victim")
check "replica 3 exited 0 after SIGTERM (status $rc)" test "$rc" = 0
pm logs "$victim" >"$tmp/victim.log" 2>&1
check "replica 3 logged its drain" grep -q 'SIGTERM received, draining' "$tmp/victim.log"

# Down: containers and the sessions' volume gone; podman-compose 1.0
# leaves the network, remove it.
compose down -v >"$tmp/down.log" 2>&1 || { cat "$tmp/down.log" >&2; fail "podman-compose down failed"; }
podman network rm -f "$network" >/dev/null 2>&1
left=$(podman ps -aq --filter "label=io.podman.compose.project=$project" | wc -l)
check "down removed every container ($left left)" test "$left" -eq 0
check "the project network is removed" sh -c "! podman network exists $network"
left=$(podman volume ls -q --filter "label=io.podman.compose.project=$project" | wc -l)
check "down -v removed the sessions' volume ($left left)" test "$left" -eq 0
finish
