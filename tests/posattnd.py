"""posattnd.py - a posattnd child process for the Python test suites.

    import posattnd                      # tests/ on sys.path (see below)
    srv = posattnd.start("build/posattnd", ["--workers", "2"])
    ... srv.url ("http://127.0.0.1:PORT"), srv.port, srv.pid, srv.proc
    rc = srv.stop()                      # SIGTERM; the exit status (0 is clean)

start() runs BINARY --host 127.0.0.1 --port 0 [--log-format off] ARGS...
without the caller's POSATTN_* environment (the flags say everything), and
returns once posattnd's first stdout line names the port it bound:

    posattnd VERSION listening on http(s)://127.0.0.1:PORT (workers N, ...)

posattnd prints that line once it listens, so no request is sent to check
readiness (a probe would show up in the counters some tests read). Its stdout
and stderr go to files in a temporary folder; when it exits before that line,
or prints none within `timeout` seconds, start() kills it and raises
StartError with the tail of its stderr.

stop() sends SIGTERM and waits `timeout` seconds (then SIGKILL: srv.killed),
and returns the exit status; stop(check=True) raises AssertionError, with the
tail of stderr, unless that status is 0. srv.failure() is that message, or
None. After stop() the files are removed and srv.stderr holds their last
64 kB. A server still running when Python exits is killed.

Used by tests/overload.py, slowloris.py, soak.py, e2e/client.py,
e2e/tensors.py, e2e/tls.py, clients/test_python_client.py and
bench/decode_service.py. Scripts in tests/ import it as they are; those in
a folder below put tests/ on the path first (bench/ uses "..", "tests"):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
Standard library only.
"""

import atexit
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["Server", "StartError", "start", "clean_env"]

FIRST_LINE = re.compile(r"^posattnd \S+ listening on (https?)://127\.0\.0\.1:(\d+) ")
KEEP = 64 * 1024  # bytes of stderr kept after stop()

_live = set()


class StartError(RuntimeError):
    """posattnd exited, or printed no listening line, at start-up."""


def clean_env(env=None):
    """env (default os.environ) without posattnd's own POSATTN_* settings."""
    return {k: v for k, v in (os.environ if env is None else env).items()
            if not k.startswith("POSATTN_")}


def _tail(path, limit=KEEP):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class Server:
    """One running posattnd (see the module's docstring)."""

    def __init__(self, proc, folder, first_line, scheme, port):
        self.proc = proc
        self.pid = proc.pid
        self.folder = folder
        self.stdout_path = os.path.join(folder, "stdout")
        self.stderr_path = os.path.join(folder, "stderr")
        self.first_line = first_line
        self.scheme = scheme
        self.host = "127.0.0.1"
        self.port = port
        self.url = "%s://127.0.0.1:%d" % (scheme, port)
        self.returncode = None
        self.killed = False
        self.stderr = None  # its text after stop()

    def stdout_text(self):
        """Everything posattnd printed on stdout so far."""
        return _tail(self.stdout_path, 1 << 20)

    def stderr_tail(self, lines=30):
        """The last lines of its stderr (kept after stop())."""
        text = self.stderr if self.stderr is not None else _tail(self.stderr_path)
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout=15, check=False):
        """SIGTERM, then the exit status within timeout seconds (else SIGKILL,
        srv.killed, and the status of that). Once only: later calls return the
        same status. check=True raises AssertionError unless it is 0."""
        if self.returncode is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.returncode = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.killed = True
                self.returncode = self.proc.wait()
            _live.discard(self)
            self.stderr = _tail(self.stderr_path)
            shutil.rmtree(self.folder, ignore_errors=True)
        if check and self.returncode != 0:
            raise AssertionError(self.failure())
        return self.returncode

    def failure(self):
        """None after a clean stop; else what went wrong, with stderr's tail."""
        if self.returncode == 0:
            return None
        if self.returncode is None:
            what = "posattnd is still running"
        elif self.killed:
            what = "posattnd did not exit in time after SIGTERM (killed)"
        elif self.returncode < 0:
            what = "posattnd died of signal %d after SIGTERM, expected exit status 0" % (
                -self.returncode)
        else:
            what = "posattnd exited with status %d after SIGTERM, expected 0" % self.returncode
        return "%s\n---- posattnd stderr (tail) ----\n%s\n---- end ----" % (what, self.stderr_tail())

    def kill(self):
        """SIGKILL, for a server a failed test leaves behind."""
        if self.returncode is None:
            self.proc.kill()
            self.killed = True
            self.returncode = self.proc.wait()
            _live.discard(self)
            self.stderr = _tail(self.stderr_path)
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def start(binary, args=(), *, log_format="off", env=None, timeout=30.0):
    """Starts binary --host 127.0.0.1 --port 0 [--log-format LOG_FORMAT] ARGS
    (log_format None: no such flag) with clean_env(env), and returns its
    Server once the first line names the port. Raises StartError."""
    cmd = [binary, "--host", "127.0.0.1", "--port", "0"]
    if log_format is not None:
        cmd += ["--log-format", log_format]
    cmd += list(args)
    folder = tempfile.mkdtemp(prefix="posattnd-py-")
    out_path, err_path = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=clean_env(env))
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise StartError("cannot run %s: %s" % (binary, e)) from None

    def give_up(why):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        text = "%s\n%s\n---- posattnd stderr (tail) ----\n%s\n---- end ----" % (
            why, " ".join(cmd), "\n".join(_tail(err_path).splitlines()[-30:]))
        shutil.rmtree(folder, ignore_errors=True)
        raise StartError(text)

    deadline = time.monotonic() + timeout
    while True:
        with open(out_path, "rb") as f:
            first = f.readline()
        if first.endswith(b"\n"):
            break
        if proc.poll() is not None:
            give_up("posattnd exited with status %d before listening" % proc.returncode)
        if time.monotonic() > deadline:
            give_up("posattnd printed no listening line within %g s" % timeout)
        time.sleep(0.01)
    line = first.decode("utf-8", "replace").rstrip("\n")
    m = FIRST_LINE.match(line)
    if m is None:
        give_up("unexpected first line from posattnd: %r" % line)
    srv = Server(proc, folder, line, m.group(1), int(m.group(2)))
    _live.add(srv)
    return srv


@atexit.register
def _kill_leftovers():
    for srv in list(_live):
        srv.kill()
