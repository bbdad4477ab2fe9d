#!/usr/bin/python3
"""v2_throughput.py - one large attention request through each wire format.

Sends the same q, k, v [L, H, D] (default 1024 x 8 x 64, causal rope) to a
running posattnd as: /v1 JSON numbers, /v1 base64, /v2 JSON and /v2 binary
tensors (binary output too), REPEAT times each, one at a time, and prints per
format the body sizes, the median client time and the server's own
Server-Timing total. Bodies are encoded once before timing, so the figures are
the server's parse/compute/render and the transfer, not Python's encoding.
Not part of make test; a measurement, so run it on a quiet machine.

    build/posattnd --port 8080 --workers 2 &
    /usr/bin/python3 bench/v2_throughput.py --url http://127.0.0.1:8080
"""

import argparse
import base64
import http.client
import json
import random
import statistics
import struct
import time
import urllib.parse


def post(url, path, body, headers):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    try:
        t0 = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        dt = time.perf_counter() - t0
        assert r.status == 200, data[:300]
        srv = float(r.headers["Server-Timing"].split("total;dur=")[1]) / 1e3
        return dt, srv, data
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--L", type=int, default=1024)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()

    rng = random.Random(1)
    shape = [a.L, a.H, a.D]
    n = a.L * a.H * a.D
    data = {k: [rng.uniform(-1, 1) for _ in range(n)] for k in "qkv"}
    raw = {k: struct.pack("<%df" % n, *v) for k, v in data.items()}
    data = {k: list(struct.unpack("<%df" % n, raw[k])) for k in "qkv"}  # float32 values
    jtype = {"Content-Type": "application/json"}

    def v1(enc):
        item = {"scheme": {"type": "rope"}, "causal": True}
        for k in "qkv":
            item[k] = ({"shape": shape, "b64": base64.b64encode(raw[k]).decode()}
                       if enc == "b64" else {"shape": shape, "data": data[k]})
        return json.dumps({"inputs": [item], "output_encoding": enc}).encode(), jtype

    def v2(binary):
        ins = []
        for k in "qkv":
            t = {"name": k, "shape": shape, "datatype": "FP32"}
            if binary:
                t["parameters"] = {"binary_data_size": 4 * n}
            else:
                t["data"] = data[k]
            ins.append(t)
        req = {"parameters": {"causal": True, "binary_data_output": binary}, "inputs": ins}
        head = json.dumps(req).encode()
        if not binary:
            return head, jtype
        return head + raw["q"] + raw["k"] + raw["v"], {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head))}

    cases = [("/v1 JSON", "/v1/attention", v1("json")), ("/v1 b64", "/v1/attention", v1("b64")),
             ("/v2 JSON", "/v2/models/attention-rope/infer", v2(False)),
             ("/v2 binary", "/v2/models/attention-rope/infer", v2(True))]
    print("q, k, v [%d, %d, %d] float32, causal rope; %d requests each, one at a time"
          % (a.L, a.H, a.D, a.repeat))
    print("%-11s %10s %10s %12s %12s %10s" % ("format", "req MB", "ans MB", "client ms",
                                             "server ms", "req/s"))
    for name, path, (body, headers) in cases:
        post(a.url, path, body, headers)  # warm-up
        runs = [post(a.url, path, body, headers) for _ in range(a.repeat)]
        cli = statistics.median(r[0] for r in runs)
        srv = statistics.median(r[1] for r in runs)
        print("%-11s %10.2f %10.2f %12.1f %12.1f %10.2f" % (
            name, len(body) / 1e6, len(runs[0][2]) / 1e6, cli * 1e3, srv * 1e3, 1 / cli))


if __name__ == "__main__":
    main()
