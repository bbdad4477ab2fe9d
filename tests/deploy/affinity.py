#!/usr/bin/env python3
"""affinity.py - deploy/nginx.conf's session affinity, seen from a client.

    affinity.py BASE_URL UPSTREAM_HEADER

nginx must run with `add_header UPSTREAM_HEADER $upstream_addr always;` (the
lb-test adds it to its rendered copy only: the real config does not tell
clients the replicas' addresses); the first address it lists is the replica
the hash chose (a 404 is retried on the next ones of the ring). Sends, through nginx:
  - 40 session keys, each 4 times in X-Posattn-Session (GET /v1/schemes);
  - 20 ids in a /v1/sessions/{id} path without the header, twice each;
  - 5 of the keys again with a /v1/sessions/{other} path: the header wins;
  - 60 stateless requests (no header, an empty header counts as none).
Prints one JSON object and exits 1 when a key or id reached more than one
replica, the header did not win over the path, keys did not spread over
every replica, or stateless requests were not spread round robin.
"""
import http.client
import json
import sys
import urllib.parse


def main():
    base, header = sys.argv[1], sys.argv[2]
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)

    def upstream(path, session=None):
        headers = {} if session is None else {"X-Posattn-Session": session}
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        r.read()
        addr = r.getheader(header)
        if not addr:
            raise SystemExit(f"affinity.py: no {header} header on {path} (status {r.status})")
        # The replica the hash chose first: nginx retries a 404 (a session
        # the replica does not hold) on the next ones of the ring, and
        # $upstream_addr then lists every replica tried.
        return addr.split(",")[0].strip()

    errors = []
    by_key = {}
    for rnd in range(4):
        for k in range(40):
            key = f"sess-{k:03d}-a7"
            by_key.setdefault(key, set()).add(upstream("/v1/schemes", key))
    by_path = {}
    for rnd in range(2):
        for k in range(20):
            sid = f"s{k:04d}x"
            by_path.setdefault(sid, set()).add(upstream(f"/v1/sessions/{sid}/append"
                                                         if rnd else f"/v1/sessions/{sid}"))
    header_wins = 0
    for k in range(5):
        key = f"sess-{k:03d}-a7"
        (want,) = by_key[key] if len(by_key[key]) == 1 else (None,)
        # A path id whose own hash lands elsewhere: the header must decide.
        other = next((s for s, a in by_path.items() if want not in a), None)
        if want is None or other is None:
            continue
        if upstream(f"/v1/sessions/{other}", key) == want:
            header_wins += 1
        else:
            errors.append(f"header {key} with path id {other} did not reach {want}")
    stateless = {}
    for i in range(60):
        a = upstream("/v1/schemes", "" if i % 2 else None)
        stateless[a] = stateless.get(a, 0) + 1

    split_keys = {k: sorted(v) for k, v in by_key.items() if len(v) > 1}
    split_ids = {k: sorted(v) for k, v in by_path.items() if len(v) > 1}
    if split_keys:
        errors.append(f"keys reached more than one replica: {split_keys}")
    if split_ids:
        errors.append(f"path ids reached more than one replica: {split_ids}")
    replicas = set(stateless)
    key_spread = {}
    for v in by_key.values():
        for a in v:
            key_spread[a] = key_spread.get(a, 0) + 1
    if len(replicas) < 3:
        errors.append(f"stateless requests reached only {sorted(replicas)}")
    elif max(stateless.values()) - min(stateless.values()) > 2:
        errors.append(f"stateless requests not round robin: {stateless}")
    if set(key_spread) != replicas:
        errors.append(f"session keys reached {sorted(key_spread)}, not every replica")
    if header_wins == 0:
        errors.append("no check of the header winning over the path could be made")
    print(json.dumps({"keys_per_replica": key_spread, "stateless_per_replica": stateless,
                      "header_over_path": header_wins, "errors": errors}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
