#!/usr/bin/python3
"""https_recipe.py - docs/running.md's HTTPS recipe, run as written.

    /usr/bin/python3 tests/e2e/https_recipe.py --bin build/posattnd

Reads the blocks marked <!-- https: LANG NAME --> from docs/running.md and
runs them in a fresh temporary folder, port 8443 replaced by a free one and
build/ by the binaries' folder (nothing else changed):
  sh key      with bash -e: the openssl command must leave posattn.key (mode
              600) and posattn.crt naming IP:127.0.0.1 and DNS:localhost;
  sh serve    posattnd with that key, in its own process group; its first
              line must be the comment's (up to the worker count);
  sh clients  each command with bash, its output checked against the
              comment lines under it (curl, the Python client with
              POSATTN_CACERT, Node fetch with NODE_EXTRA_CA_CERTS,
              posattn-load --cacert); python3 is /usr/bin/python3, the
              Python client is clients/python on PYTHONPATH;
  python      with /usr/bin/python3, checked against its '# ' comment;
  js          as an ES module in a folder whose node_modules/posattn is
              clients/js (what npm install ./clients/js makes), checked
              against its '// ' comment.
Then what the page says happens without the certificate (curl's and the
Python client's refusals), and SIGTERM: posattnd must exit 0.
Prints "https_recipe: N passed, M failed".
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOC = os.path.join(ROOT, "docs", "running.md")
DOC_PORT = "8443"

passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("https_recipe: FAIL %s%s" % (what, ("\n  " + detail.replace("\n", "\n  ")) if detail else ""))
    return ok


def blocks():
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"<!-- https: (\w+)(?: (\w+))? -->\s*```\w*\n(.*?)\n```", text, re.S)
    return {(lang, name or ""): code for lang, name, code in found}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(code, comment="#"):
    """[(command, expected output lines)]: each line that is not a comment,
    with backslash continuations joined, and the comment lines under it."""
    out, cmd = [], None
    for line in code.split("\n"):
        if line.startswith(comment + " ") and out:
            out[-1][1].append(line[len(comment) + 1:])
        elif line.startswith(comment) or not line.strip():
            continue
        elif cmd is not None:
            cmd += "\n" + line
            if not line.endswith("\\"):
                out.append((cmd, []))
                cmd = None
        elif line.endswith("\\"):
            cmd = line
        else:
            out.append((line, []))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "posattnd"))
    ap.add_argument("--timeout", type=float, default=30)
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    build = os.path.dirname(binary)
    b = blocks()
    for key in (("sh", "key"), ("sh", "serve"), ("sh", "clients"), ("python", ""), ("js", "")):
        if key not in b:
            print("https_recipe: FAIL docs/running.md has no <!-- https: %s --> block" % " ".join(key).strip())
            print("https_recipe: 0 passed, 1 failed")
            return 1
    port = str(free_port())

    def adapt(cmd):
        return cmd.replace(DOC_PORT, port).replace("build/", build + "/")

    tmp = tempfile.mkdtemp(prefix="posattn-https-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSATTN_", "NODE_EXTRA_CA"))}
    # The page's python3 is Debian's (the first on PATH may lack NumPy).
    os.mkdir(os.path.join(tmp, "bin"))
    os.symlink("/usr/bin/python3", os.path.join(tmp, "bin", "python3"))
    env["PATH"] = os.path.join(tmp, "bin") + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.path.join(ROOT, "clients", "python")
    srv = None
    try:
        # The key and the certificate.
        r = subprocess.run(["bash", "-e", "-c", b[("sh", "key")]], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=a.timeout)
        check(r.returncode == 0, "the openssl block exits 0", r.stderr[-2000:])
        key, crt = os.path.join(tmp, "posattn.key"), os.path.join(tmp, "posattn.crt")
        check(os.path.exists(key) and os.stat(key).st_mode & 0o777 == 0o600,
              "posattn.key exists with mode 600")
        san = subprocess.run(["openssl", "x509", "-in", crt, "-noout", "-ext", "subjectAltName"],
                             capture_output=True, text=True).stdout
        check("IP Address:127.0.0.1" in san and "DNS:localhost" in san,
              "posattn.crt names IP:127.0.0.1 and DNS:localhost", san)

        # The server, as the page starts it.
        serve = commands(b[("sh", "serve")])
        check(len(serve) == 1, "the serve block is one command", repr(serve))
        cmd, want = serve[0]
        srv = subprocess.Popen(["bash", "-c", "exec " + adapt(cmd)], cwd=tmp, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
        line = srv.stdout.readline().rstrip("\n")
        head = adapt(want[0]).split(" (")[0] if want else "?"
        if not check(line.startswith(head + " ("), "posattnd prints the page's first line",
                     "got %r, want %r..." % (line, head)):
            return 1

        # The clients.
        for cmd, want in commands(b[("sh", "clients")]):
            r = subprocess.run(["bash", "-o", "pipefail", "-c", adapt(cmd)], cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=a.timeout)
            check(r.returncode == 0 and r.stdout.strip().split("\n") == want,
                  "%s answers as the page says" % cmd.split()[0] if "=" not in cmd.split()[0]
                  else "%s answers as the page says" % cmd.split()[1],
                  "%s\nexit %d, stdout %r, want %r\nstderr %s"
                  % (adapt(cmd), r.returncode, r.stdout, want, r.stderr[-1500:]))

        code = b[("python", "")]
        want = [l[2:] for l in code.split("\n") if l.startswith("# ")]
        r = subprocess.run(["/usr/bin/python3", "-c", adapt(code)], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=a.timeout)
        check(r.returncode == 0 and r.stdout.strip().split("\n") == want,
              "the Python block prints what the page says",
              "exit %d, stdout %r, want %r\nstderr %s" % (r.returncode, r.stdout, want, r.stderr[-1500:]))

        code = b[("js", "")]
        want = [l[3:] for l in code.split("\n") if l.startswith("// ")]
        os.mkdir(os.path.join(tmp, "node_modules"))
        os.symlink(os.path.join(ROOT, "clients", "js"), os.path.join(tmp, "node_modules", "posattn"))
        with open(os.path.join(tmp, "recipe.mjs"), "w") as f:
            f.write(adapt(code) + "\n")
        r = subprocess.run(["node", "recipe.mjs"], cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=a.timeout)
        check(r.returncode == 0 and r.stdout.strip().split("\n") == want,
              "the JavaScript block prints what the page says",
              "exit %d, stdout %r, want %r\nstderr %s" % (r.returncode, r.stdout, want, r.stderr[-1500:]))

        # Without the certificate, the refusals the page quotes.
        r = subprocess.run(["curl", "-sS", "https://127.0.0.1:%s/healthz" % port], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=a.timeout)
        check(r.returncode == 60 and "SSL certificate problem: self-signed certificate" in r.stderr,
              "curl without --cacert refuses the server", r.stderr)
        r = subprocess.run(["/usr/bin/python3", "-c", "import posattn; posattn.Client("
                            "'https://127.0.0.1:%s').health()" % port], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=a.timeout)
        check(r.returncode != 0 and "TLS_VERIFICATION_FAILED" in r.stderr
              and "(a private CA? pass cafile= or set POSATTN_CACERT)" in r.stderr,
              "the Python client without cafile refuses the server", r.stderr[-800:])

        srv.send_signal(signal.SIGTERM)
        rc = srv.wait(timeout=20)
        check(rc == 0, "posattnd exits 0 on SIGTERM", "exit %d" % rc)
        srv = None
    finally:
        if srv is not None:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("https_recipe: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
