#!/usr/bin/env python3
"""promquery.py - polls a Prometheus HTTP API (/api/v1/query) until a PromQL
query answers as expected, for tests/monitor/check-metrics.sh and
tests/deploy/compose-test.sh.

    promquery.py URL QUERY --label scheme --want rope,alibi,none [--timeout S]
        every listed value of LABEL has a finite sample above 0
    promquery.py URL QUERY --equals 3 [--timeout S]
        the query answers exactly one sample, equal to that number
    promquery.py URL --rules-ok [--timeout S]
        /api/v1/rules lists rules, none unhealthy and no alert active

Polls every 0.5 s up to --timeout seconds (default 30). Prints one line,
what it found; exit status 0 when the expectation held, 1 when it did not
by the deadline. Only talks to URL (127.0.0.1 in the tests). Standard
library only.
"""
import argparse
import json
import math
import sys
import time
import urllib.parse
import urllib.request


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        answer = json.load(r)
    if answer.get("status") != "success":
        raise RuntimeError(f"{url}: {answer}")
    return answer["data"]


def query(base, promql):
    return get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["result"]


def check_labels(base, args):
    """(ok, description): every wanted LABEL value has a finite value > 0."""
    found = {}
    for sample in query(base, args.query):
        v = float(sample["value"][1])
        found[sample["metric"].get(args.label, "")] = v
    want = args.want.split(",")
    good = sorted(k for k, v in found.items() if math.isfinite(v) and v > 0)
    shown = ", ".join(f"{k}={found[k]:.6g}" for k in sorted(found))
    return all(w in good for w in want), f"{args.label}: {shown or 'no samples'} (want {args.want})"


def check_equals(base, args):
    result = query(base, args.query)
    values = [float(s["value"][1]) for s in result]
    return values == [args.equals], f"{args.query} = {values or 'no samples'} (want {args.equals:g})"


def check_rules(base, _args):
    rules = [r for g in get(base + "/api/v1/rules")["groups"] for r in g["rules"]]
    bad = [f"{r['name']}: {r.get('lastError') or r['health']}" for r in rules if r["health"] != "ok"]
    active = [r["name"] for r in rules if r["type"] == "alerting" and r["state"] != "inactive"]
    # A rule not yet evaluated is "unknown": wait for its first evaluation.
    ok = bool(rules) and not bad and not active
    return ok, f"{len(rules)} rules, unhealthy: {bad or 'none'}, active alerts: {active or 'none'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("query", nargs="?")
    ap.add_argument("--label")
    ap.add_argument("--want")
    ap.add_argument("--equals", type=float)
    ap.add_argument("--rules-ok", action="store_true")
    ap.add_argument("--timeout", type=float, default=30)
    args = ap.parse_args()
    if args.rules_ok:
        check = check_rules
    elif args.query and args.label and args.want:
        check = check_labels
    elif args.query and args.equals is not None:
        check = check_equals
    else:
        ap.error("give QUERY with --label and --want, or with --equals, or --rules-ok")
    base = args.url.rstrip("/")
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            ok, what = check(base, args)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            ok, what = False, f"error: {e}"
        if ok or time.monotonic() >= deadline:
            print(what)
            return 0 if ok else 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
