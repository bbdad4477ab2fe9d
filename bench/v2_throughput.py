#!/usr/bin/python3
"""v2_throughput.py - one large attention request through each wire format.

Sends the same q, k, v [L, H, D] (default 1024 x 8 x 64, causal rope) to a
running posattnd as: /v1 JSON numbers, /v1 base64, /v2 JSON and /v2 binary
tensors (binary output too), in float32 and in bfloat16 on the wire (dtype
bf16, output_dtype bf16: half the bytes of b64 and binary), REPEAT times
each, one at a time, and prints per format the body sizes, the median
client time and the server's own Server-Timing total, and the bf16 time as
a ratio of the f32 one. Bodies are encoded once before timing, so the figures are
the server's parse/compute/render and the transfer, not Python's encoding.
Not part of make test; a measurement, so run it on a quiet machine.

    build/posattnd --port 8080 --workers 2 &
    /usr/bin/python3 bench/v2_throughput.py --url http://127.0.0.1:8080
    tests/e2e/harness.sh /usr/bin/python3 bench/v2_throughput.py   # spawns one (make bench)
"""

import argparse
import base64
import http.client
import json
import os
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
    ap.add_argument("--url", default=os.environ.get("POSATTN_URL", "http://127.0.0.1:8080"))
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
    # bfloat16: float32 bits rounded to nearest even, the top half kept
    raw16 = {}
    for k in "qkv":
        u = struct.unpack("<%dI" % n, raw[k])
        raw16[k] = struct.pack("<%dH" % n, *(((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF
                                             for x in u))
    jtype = {"Content-Type": "application/json"}

    def v1(enc, bf16):
        item = {"scheme": {"type": "rope"}, "causal": True}
        for k in "qkv":
            t = {"shape": shape}
            if bf16:
                t["dtype"] = "bf16"
            if enc == "b64":
                t["b64"] = base64.b64encode(raw16[k] if bf16 else raw[k]).decode()
            else:
                t["data"] = data[k]
            item[k] = t
        req = {"inputs": [item], "output_encoding": enc}
        if bf16:
            req["output_dtype"] = "bf16"
        return json.dumps(req).encode(), jtype

    def v2(binary, bf16):
        ins = []
        for k in "qkv":
            t = {"name": k, "shape": shape, "datatype": "BF16" if bf16 else "FP32"}
            if binary:
                t["parameters"] = {"binary_data_size": (2 if bf16 else 4) * n}
            else:
                t["data"] = data[k]
            ins.append(t)
        params = {"causal": True, "binary_data_output": binary}
        if bf16:
            params["output_dtype"] = "bf16"
        head = json.dumps({"parameters": params, "inputs": ins}).encode()
        if not binary:
            return head, jtype
        r = raw16 if bf16 else raw
        return head + r["q"] + r["k"] + r["v"], {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head))}

    cases = []
    for bf16 in (False, True):
        dt = " bf16" if bf16 else ""
        cases += [("/v1 JSON" + dt, "/v1/attention", v1("json", bf16)),
                  ("/v1 b64" + dt, "/v1/attention", v1("b64", bf16)),
                  ("/v2 JSON" + dt, "/v2/models/attention-rope/infer", v2(False, bf16)),
                  ("/v2 binary" + dt, "/v2/models/attention-rope/infer", v2(True, bf16))]
    print("q, k, v [%d, %d, %d], causal rope, float32 and bf16 on the wire (computed in "
          "float32); %d requests each, one at a time" % (a.L, a.H, a.D, a.repeat))
    print("%-16s %10s %10s %12s %12s %10s %12s" % ("format", "req MB", "ans MB", "client ms",
                                                  "server ms", "req/s", "bf16 / f32"))
    f32_time = {}
    for name, path, (body, headers) in cases:
        post(a.url, path, body, headers)  # warm-up
        runs = [post(a.url, path, body, headers) for _ in range(a.repeat)]
        cli = statistics.median(r[0] for r in runs)
        srv = statistics.median(r[1] for r in runs)
        base = name.replace(" bf16", "")
        ratio = "%.2f" % (cli / f32_time[base]) if base != name else "-"
        f32_time.setdefault(base, cli)
        print("%-16s %10.2f %10.2f %12.1f %12.1f %10.2f %12s" % (
            name, len(body) / 1e6, len(runs[0][2]) / 1e6, cli * 1e3, srv * 1e3, 1 / cli, ratio))


if __name__ == "__main__":
    main()
