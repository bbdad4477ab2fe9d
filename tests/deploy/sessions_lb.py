#!/usr/bin/python3
"""sessions_lb.py - sessions through the load balancer, with a replica
stopped and started again mid-load (make compose-test).

    sessions_lb.py LB_URL --victim NAME --stop CMD --start CMD
                   [--sessions 200] [--concurrency 8] [--json FILE]

Creates --sessions sessions through nginx (client-chosen ids, the
X-Posattn-Session header on every request, rope and alibi in turn) and
steps them in rounds: each step is one /v1/attention item naming the
session with q [1, 2, 8] and an "append" of one token. Each step's answer
must equal, bit for bit, a stateless /v1/attention item that sends every
token appended so far as k and v with their positions (docs/sessions.md,
"Attention over a session"): a step that answered with another session's
data, or lost an append, fails there. X-Posattn-Replica names the replica
that answered each request.

  round 0, 1  every session steps; every step of a session reaches the
              replica that created it, and the sessions spread over all 3.
  round 2     --stop runs (in the background: `podman stop` of the replica
              --victim, which drains and saves its sessions to the shared
              --cache-dir) as the round starts; every session steps but
              half of the victim's ("resting").
  round 3     once the victim is down, the same. The victim's sessions are
              now answered by other replicas, which loaded them on first
              use.
  then        --start runs (the victim started again, nginx reloaded).
  round 4, 5  every session steps: the resting ones are answered by the
              victim again (it loaded them from its folder at start), the
              others that moved stay where they moved (nginx retries the
              victim's 404 on the next replica of the ring).

The other replicas' sessions must never notice: every one of their steps is
answered at the first try by the replica that created them. While the
victim drains, a step of its sessions may be refused (503, or 404 "replica
NAME holds it and is running" from another replica, or 502): such a step
did nothing, and the client holds and sends it again (at most 60 s). A
session no replica holds is 404 SESSION_NOT_FOUND naming a replica.

Prints one JSON summary line; exit status 0 only when every check passed.
Talks only to LB_URL (127.0.0.1); stops by itself (every request has a 30 s
timeout, a step at most 60 s of retries). Standard library only.
"""
import argparse
import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

H, HKV, D = 2, 1, 8


def vec(n, seed):
    return [round(((seed * 7919 + i * 104729) % 2000) / 1000.0 - 1.0, 3) for i in range(n)]


class Client:
    """One keep-alive connection per thread to the balancer."""

    def __init__(self, base):
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname, u.port
        self.local = threading.local()

    def call(self, method, path, body=None, session=None):
        """(status, JSON or None, X-Posattn-Replica); status 0 on a broken connection."""
        headers = {"Content-Type": "application/json"}
        if session is not None:
            headers["X-Posattn-Session"] = session
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                conn.request(method, path, body=data, headers=headers)
                r = conn.getresponse()
                text = r.read()
                obj = json.loads(text) if text else None
                return r.status, obj, r.getheader("X-Posattn-Replica")
            except (OSError, http.client.HTTPException, ValueError):
                # A kept-alive connection that nginx closed (its reload
                # ends idle connections): once more on a new one.
                conn.close()
                self.local.conn = None
                if attempt == 1:
                    return 0, None, None
        return 0, None, None


class Session:
    def __init__(self, i):
        self.id = f"lb-{i:04d}"
        self.scheme = {"type": "rope"} if i % 2 == 0 else {"type": "alibi"}
        self.k, self.v = [], []  # every appended token's row, flat [D]
        self.owner = None  # the replica that created it
        self.seen = []  # (round, replica, retries) of each step


class Run:
    def __init__(self, args):
        self.args = args
        self.c = Client(args.url)
        self.lock = threading.Lock()
        self.errors = []
        self.sessions = [Session(i) for i in range(args.sessions)]

    def error(self, msg):
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append(msg)

    def create(self, s):
        st, obj, rep = self.c.call("POST", "/v1/sessions",
                                   {"id": s.id, "scheme": s.scheme, "num_kv_heads": HKV,
                                    "head_dim": D, "max_tokens": 64}, session=s.id)
        if st != 201 or rep is None:
            self.error(f"create {s.id}: {st} {obj}")
        s.owner = rep

    def step(self, s, rnd):
        t = len(s.k)
        seed = 100 * int(s.id[3:]) + 3 * t
        k, v, q = vec(D, seed + 1), vec(D, seed + 2), vec(H * D, seed + 3)
        item = {"session": s.id, "causal": True, "q": {"shape": [1, H, D], "data": q},
                "append": {"k": {"shape": [1, HKV, D], "data": k},
                           "v": {"shape": [1, HKV, D], "data": v}}}
        deadline = time.monotonic() + 60
        retries = 0
        while True:
            st, obj, rep = self.c.call("POST", "/v1/attention", {"inputs": [item]}, session=s.id)
            if st == 200:
                break
            msg = json.dumps(obj)[:300] if obj is not None else ""
            held = st == 404 and ("holds it and is running" in msg or "is draining and may hold it" in msg)
            # A replica taking the session over loads it from the victim's
            # snapshot while this step was read: refused before anything
            # was appended, with "send it again" (server/api/item.c).
            again = st == 409 and "SESSION_BUSY" in msg and "send it again" in msg
            if (st in (0, 502, 503, 504) or held or again) and time.monotonic() < deadline:
                retries += 1
                time.sleep(0.2)
                continue
            self.error(f"step {t} of {s.id} (round {rnd}): HTTP {st} {msg}")
            return
        s.k.append(k)
        s.v.append(v)
        s.seen.append((rnd, rep, retries))
        n = len(s.k)
        control = {"scheme": s.scheme, "causal": True, "q": {"shape": [1, H, D], "data": q},
                   "k": {"shape": [n, HKV, D], "data": [x for row in s.k for x in row]},
                   "v": {"shape": [n, HKV, D], "data": [x for row in s.v for x in row]},
                   "k_positions": list(range(n)), "q_positions": [n - 1]}
        for _ in range(100):
            cst, cobj, _ = self.c.call("POST", "/v1/attention", {"inputs": [control]})
            if cst == 200:
                break
            time.sleep(0.2)
        if cst != 200:
            self.error(f"control of step {t} of {s.id}: HTTP {cst} {cobj}")
        elif obj["outputs"][0]["output"] != cobj["outputs"][0]["output"]:
            self.error(f"step {t} of {s.id} (round {rnd}, replica {rep}) differs from the control: "
                       f"{obj['outputs'][0]['output']['data'][:4]} vs "
                       f"{cobj['outputs'][0]['output']['data'][:4]}")

    def round(self, rnd, sessions):
        with ThreadPoolExecutor(self.args.concurrency) as ex:
            list(ex.map(lambda s: self.step(s, rnd), sessions))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--victim", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--start", required=True)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    run = Run(args)
    t0 = time.monotonic()
    checks = {}

    with ThreadPoolExecutor(args.concurrency) as ex:
        list(ex.map(run.create, run.sessions))
    owners = {}
    for s in run.sessions:
        owners[s.owner] = owners.get(s.owner, 0) + 1
    checks["sessions per replica"] = owners
    if len(owners) != 3 or args.victim not in owners:
        run.error(f"the sessions did not land on 3 replicas, the victim among them: {owners}")
    victims = [s for s in run.sessions if s.owner == args.victim]
    resting = set(s.id for s in victims[::2])

    run.round(0, run.sessions)
    run.round(1, run.sessions)
    active = [s for s in run.sessions if s.id not in resting]
    stop = subprocess.Popen(args.stop, shell=True)
    run.round(2, active)
    stop_rc = stop.wait(timeout=60)
    if stop_rc != 0:
        run.error(f"--stop exited {stop_rc}")
    run.round(3, active)
    start_rc = subprocess.run(args.start, shell=True, timeout=120).returncode
    if start_rc != 0:
        run.error(f"--start exited {start_rc}")
    run.round(4, run.sessions)
    run.round(5, run.sessions)

    # Where each session was answered, round by round.
    for s in run.sessions:
        before = [rep for rnd, rep, _ in s.seen if rnd < 2]
        if any(rep != s.owner for rep in before):
            run.error(f"{s.id} created on {s.owner} was answered by {before} before the stop")
        if s.owner != args.victim:
            if any(rep != s.owner or tries for _, rep, tries in s.seen):
                run.error(f"{s.id} of {s.owner} noticed the stop: {s.seen}")
        elif s.id in resting:
            after = [rep for rnd, rep, _ in s.seen if rnd >= 4]
            if after != [args.victim, args.victim]:
                run.error(f"resting {s.id} was not answered by {args.victim} after its start: {s.seen}")
        else:
            moved = [rep for rnd, rep, _ in s.seen if rnd >= 3]
            if not moved or any(rep == args.victim for rep in moved) or len(set(moved)) != 1:
                run.error(f"{s.id} of the victim was not taken over by one other replica: {s.seen}")
        if len(s.seen) != (4 if s.id in resting else 6):
            run.error(f"{s.id} made {len(s.seen)} steps")
    moved_to = {}
    for s in victims:
        if s.id not in resting and s.seen:
            moved_to[s.seen[-1][1]] = moved_to.get(s.seen[-1][1], 0) + 1
    checks["victim's sessions taken over by"] = moved_to
    checks["victim's resting sessions back on it"] = sum(
        1 for s in victims if s.id in resting and s.seen and s.seen[-1][1] == args.victim)
    checks["steps retried while the victim drained"] = sum(
        tries for s in victims for _, _, tries in s.seen)

    st, obj, rep = run.c.call("GET", "/v1/sessions/lb-never-made", session="lb-never-made")
    msg = (obj or {}).get("error", {}).get("message", "")
    if st != 404 or (obj or {}).get("error", {}).get("code") != "SESSION_NOT_FOUND" or "on replica posattnd-" not in msg:
        run.error(f"a session no replica holds: HTTP {st} {obj}")
    checks["a session no replica holds"] = msg

    steps = sum(len(s.seen) for s in run.sessions)
    summary = {"sessions": len(run.sessions), "steps": steps, "equal_to_control": steps if not run.errors else None,
               "seconds": round(time.monotonic() - t0, 1), "checks": checks, "errors": run.errors}
    line = json.dumps(summary)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main())
