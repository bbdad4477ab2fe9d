#!/usr/bin/env python3
"""upstreams.py - what deploy/nginx.conf's access log says about the replicas.

    upstreams.py [LOG]        (standard input without LOG)

Reads lines in nginx.conf's `posattn` log format and prints one JSON object:
  served     {address: requests whose final answer came from it}
  tried      {address: attempts sent to it, retried ones included}
  statuses   {nginx status to the client: count}
  retried    requests that nginx sent to more than one replica
  attempts   {upstream status: count} over every attempt ("502" = refused or reset)
Only proxied requests count (the balancer's own /lb-healthz is not logged).
"""
import json
import re
import sys

LINE = re.compile(r'"(?P<request>[^"]*)" (?P<status>\d{3}) .* upstream="(?P<addr>[^"]*)" '
                  r'ustatus="(?P<ustatus>[^"]*)"')


def split(field):
    # ", " separates attempts within one upstream group; " : " an internal redirect.
    return [x.strip() for x in re.split(r", | : ", field) if x.strip() and x.strip() != "-"]


def main():
    f = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    served, tried, statuses, attempts = {}, {}, {}, {}
    retried = 0
    for line in f:
        m = LINE.search(line)
        if not m or m["addr"] in ("", "-"):
            continue
        addrs, ustatus = split(m["addr"]), split(m["ustatus"])
        statuses[m["status"]] = statuses.get(m["status"], 0) + 1
        for a in addrs:
            tried[a] = tried.get(a, 0) + 1
        for s in ustatus:
            attempts[s] = attempts.get(s, 0) + 1
        if addrs:
            served[addrs[-1]] = served.get(addrs[-1], 0) + 1
        if len(addrs) > 1:
            retried += 1
    print(json.dumps({"served": served, "tried": tried, "statuses": statuses,
                      "retried": retried, "attempts": attempts}, sort_keys=True))


if __name__ == "__main__":
    main()
