"""peer_server.py - what the tools/crosscheck_*.py scripts share: a posattnd
on a free loopback port (tests/posattnd.py starts it, waits for its first
line and stops it), and a JSON POST to it.

    import peer_server                       # tools/ is the script's folder
    srv = peer_server.start()                # sys.argv[1] or build/posattnd
    answer = peer_server.post(srv.port, "/v1/encode", body)
    srv.stop(check=True)

Standard library only.
"""

import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import posattnd  # noqa: E402


def start(binary=None):
    """posattnd (the script's first argument, else build/posattnd), one worker."""
    if binary is None:
        binary = sys.argv[1] if len(sys.argv) > 1 else "build/posattnd"
    return posattnd.start(binary, ["--workers", "1"])


def post(port, path, body):
    """The JSON answer of POST path with body; an HTTP error raises with its body."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError("%s: %d %s" % (path, e.code, e.read().decode()[:500])) from None
