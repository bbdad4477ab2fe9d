#!/usr/bin/python3
"""one_answer.py PORT - a request with a malformed Content-Length, sent on
a raw socket to 127.0.0.1:PORT, gets exactly one well-formed 400 answer.

libmicrohttpd 0.9.75 (Debian bookworm's) refuses such a request itself,
before posattnd sees it, and writes the header block of its answer twice;
nginx in front (deploy/nginx.conf) refuses it first with one answer. Exits
0 when every case gets a single status line, 400, and 1 otherwise (saying
what came back).
"""
import socket
import sys

port = int(sys.argv[1])
bad = 0
for cl in ("-1", "1, 2", "99999999999999999999999"):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(("POST /v1/encode HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %s\r\n\r\n"
               % cl).encode())
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except socket.timeout:
        pass
    s.close()
    if data.count(b"HTTP/1.") != 1 or not data.startswith(b"HTTP/1.1 400"):
        print("Content-Length: %s -> %r" % (cl, data[:300]), file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
