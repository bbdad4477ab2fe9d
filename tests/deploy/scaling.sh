#!/usr/bin/env bash
# scaling.sh - the scaling simulation of docs/deploy.md (make scaling-sim):
# the same posattn-load against the compose stack (deploy/compose.yaml)
# with 1, 2 and 3 replicas behind nginx, and the Prometheus series an
# autoscaler reads, rising with the load and falling after.
#
# The stack runs its 3 replicas throughout (POSATTN_WORKERS each, default
# 1); nginx's config (deploy/nginx.conf, mounted from a rendered copy via
# POSATTN_NGINX_CONF) keeps the first N `server` lines and is reloaded
# (SIGHUP) for each N, so the load reaches N replicas and the others idle.
# Before each phase, 30 requests through nginx must be answered by exactly
# N replicas (X-Posattn-Replica). Each phase is `posattn-load --url LB
# --schemes rope --lengths L --encoding b64 --concurrency C --duration D
# --warmup 2`; after the last, SCALING_COOL seconds without load, then
# Prometheus' query_range of
#   sum(posattn_in_flight{job="posattnd"})                      (raw)
#   sum(instance:posattn_in_flight:avg1m{job="posattnd"})        (KEDA's query, deploy/k8s/overlays/keda)
# every 5 s over the whole run. Prints a table per N (requests/s, its
# ratio to N=1, latency p50 and p99, the replicas that served) and the
# series; writes them as JSON to SCALING_JSON when set.
#
# The same machine runs every replica, so the figures show the routing and
# the signal, not a cluster's speed: with C cores, throughput grows until N
# workers cover them. Talks only to 127.0.0.1, stops by itself (about
# 3 x (D + 10) + SCALING_COOL + 30 s), and removes its containers, network
# and volume on every exit path.
#
# Environment: POSATTN_IMAGE, POSATTN_LB_IMAGE, POSATTN_PROM_IMAGE (built
# by make scaling-sim), LOAD (default build/posattn-load), SCALING_DURATION
# (D, 20), SCALING_CONCURRENCY (C, 8), SCALING_LENGTH (L, 1024),
# SCALING_COOL (70), SCALING_JSON, POSATTN_WORKERS (1).
set -u
TEST_NAME=scaling
# shellcheck source=tests/deploy/common.sh
. "$(dirname "$0")/common.sh"

ROOT=$(cd "$DEPLOY_TESTS/../.." && pwd)
COMPOSE_FILE=$ROOT/deploy/compose.yaml
LOAD=${LOAD:-$ROOT/build/posattn-load}
DURATION=${SCALING_DURATION:-20}
CONCURRENCY=${SCALING_CONCURRENCY:-8}
LENGTH=${SCALING_LENGTH:-1024}
COOL=${SCALING_COOL:-70}
project=posattnsc$$
network=${project}_default

compose() { podman-compose -f "$COMPOSE_FILE" -p "$project" "$@"; }
[ -x "$LOAD" ] || die "$LOAD is not built (make $LOAD)"
command -v podman-compose >/dev/null || die "podman-compose is missing (make scaling-sim sets it up)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posattn-scaling.XXXXXX") || exit 1
chmod 755 "$tmp"
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

# render N: deploy/nginx.conf with its first N server lines, written in
# place (the container sees the bind-mounted file's inode).
render() {
    awk -v keep="$1" '/^[ \t]*server posattnd-[0-9]+:8080[ ;]/ { if (++n > keep) next } { print }' \
        "$ROOT/deploy/nginx.conf" >"$tmp/nginx.next" && cat "$tmp/nginx.next" >"$tmp/nginx.conf"
}
render 3
chmod 644 "$tmp/nginx.conf"

export POSATTN_LB_PORT POSATTN_PROM_PORT POSATTN_NGINX_CONF=$tmp/nginx.conf
POSATTN_LB_PORT=$(free_port)
POSATTN_PROM_PORT=$(free_port)
export POSATTN_WORKERS=${POSATTN_WORKERS:-1}
log "project $project, balancer on 127.0.0.1:$POSATTN_LB_PORT, prometheus on 127.0.0.1:$POSATTN_PROM_PORT"
if ! compose up -d >"$tmp/up.log" 2>&1; then
    cat "$tmp/up.log" >&2
    die "podman-compose up failed"
fi
# shellcheck disable=SC2046 # a list of IDs
remember_containers $(podman ps -aq --filter "label=io.podman.compose.project=$project")
lb="http://127.0.0.1:$POSATTN_LB_PORT"
prom="http://127.0.0.1:$POSATTN_PROM_PORT"
wait_http "$lb/healthz" 60 || die "nginx did not answer on 127.0.0.1:$POSATTN_LB_PORT"
wait_http "$prom/-/ready" 60 || die "prometheus did not answer on 127.0.0.1:$POSATTN_PROM_PORT"

# The replicas that answer 30 stateless requests through nginx.
answering() {
    local i
    for i in $(seq 30); do
        curl -s -o /dev/null -D - --max-time 10 "$lb/v1/schemes" | tr -d '\r' |
            awk -F': ' 'tolower($1) == "x-posattn-replica" { print $2 }'
    done | sort -u | tr '\n' ' '
}

t0=$(date +%s)
phases=()
for n in 1 2 3; do
    render "$n"
    pm kill --signal HUP "${project}_lb_1" >/dev/null
    sleep 2
    who=$(answering)
    check "nginx reaches $n replica(s): $who" test "$(wc -w <<<"$who")" -eq "$n"
    start=$(date +%s)
    if "$LOAD" --url "$lb" --schemes rope --lengths "$LENGTH" --encoding b64 --concurrency "$CONCURRENCY" \
        --duration "$DURATION" --warmup 2 --json "$tmp/load-$n.json" >"$tmp/load-$n.out" 2>&1; then
        pass "posattn-load with $n replica(s) ($(($(date +%s) - start)) s)"
    else
        tail -5 "$tmp/load-$n.out" >&2
        fail "posattn-load with $n replica(s) failed"
    fi
    phases+=("$n:$start:$(date +%s)")
    sleep 5
done
log "no load for $COOL s, for the 1-minute averages to fall"
sleep "$COOL"
t1=$(date +%s)

if "$PYTHON" - "$prom" "$t0" "$t1" "$tmp" "${SCALING_JSON:-}" "${phases[@]}" <<'PYEOF'; then
import json, sys, urllib.parse, urllib.request
prom, t0, t1, tmp, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
phases = [tuple(int(x) for x in p.split(":")) for p in sys.argv[6:]]

def query_range(q):
    url = prom + "/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": q, "start": t0, "end": t1, "step": 5})
    with urllib.request.urlopen(url, timeout=30) as r:
        res = json.load(r)["data"]["result"]
    return {int(float(t)): float(v) for t, v in res[0]["values"]} if res else {}

rows, base = [], None
for n, start, end in phases:
    r = json.load(open(f"{tmp}/load-{n}.json"))["results"][0]
    rps = r["requests_per_s"]
    base = base or rps
    rows.append({"replicas": n, "requests_per_s": round(rps, 1), "ratio": round(rps / base, 2),
                 "p50_ms": round(r["latency_ms"]["p50"], 1), "p99_ms": round(r["latency_ms"]["p99"], 1),
                 "ok": r["ok"], "errors": r["errors"], "elapsed_s": round(r["elapsed_s"], 1)})
print("replicas  requests/s  vs 1   p50 ms   p99 ms   ok      errors")
for x in rows:
    print(f"{x['replicas']:>8}  {x['requests_per_s']:>10}  {x['ratio']:>4}  {x['p50_ms']:>7}  {x['p99_ms']:>7}  "
          f"{x['ok']:<7} {x['errors']}")
raw = query_range('sum(posattn_in_flight{job="posattnd"})')
avg = query_range('sum(instance:posattn_in_flight:avg1m{job="posattnd"})')
series = []
print("\nt (s)  phase      sum(posattn_in_flight)  sum(instance:posattn_in_flight:avg1m)")
for t in sorted(set(raw) | set(avg)):
    ph = next((f"{n} replica" + ("s" if n > 1 else "") for n, s, e in phases if s <= t <= e), "-")
    series.append({"t": t - t0, "phase": ph, "in_flight": raw.get(t), "in_flight_avg1m": avg.get(t)})
    print(f"{t - t0:>5}  {ph:<10} {raw.get(t, float('nan')):>22.1f}  {avg.get(t, float('nan')):>37.2f}")
peak = max((v for v in avg.values()), default=0)
last = avg[max(avg)] if avg else 0
print(f"\navg1m: peak {peak:.2f}, at the end {last:.2f}")
if out:
    json.dump({"phases": rows, "series": series}, open(out, "w"), indent=1)
ok = len(rows) == 3 and all(x["errors"] == 0 for x in rows) and peak > 1 and last < peak / 4
sys.exit(0 if ok else 1)
PYEOF
    pass "the autoscaler's signal rose with the load and fell after it"
else
    fail "the figures or the signal are not as expected (above)"
fi

compose down -v >"$tmp/down.log" 2>&1 || { cat "$tmp/down.log" >&2; fail "podman-compose down failed"; }
podman network rm -f "$network" >/dev/null 2>&1
finish
