#!/usr/bin/python3
"""test_python_install.py - the Python client installs as its README says,
offline: clients/python/README.md's install commands run as written in fresh
venvs with no package index (then the installed client calls a posattnd
once), the build backend's sdist and editable install, and its TOML reader.

    POSATTND=build/posattnd tests/e2e/harness.sh \
        /usr/bin/python3 tests/clients/test_python_install.py
    make client-python                  # with test_python_client.py

harness.sh starts the server and exports POSATTN_URL.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CLIENT_SRC = os.path.join(ROOT, "clients", "python")
URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")


def readme_text():
    with open(os.path.join(CLIENT_SRC, "README.md")) as f:
        return f.read()


# ------------------------------------------------------------ packaging
# A script run by an installed client: where posattn was imported from,
# whether NumPy is there, and one call to the server (argv[1]).
CALL_ONCE = """
import json, sys
import posattn
try:
    import numpy
except ImportError:
    numpy = None
c = posattn.Client(sys.argv[1])
out = c.attention([[[1, 0]], [[0, 0]]], [[[1, 0]], [[0, 1]]], [[[1, 2]], [[3, 4]]],
                  scheme="rope", causal=True)
print(json.dumps({"file": posattn.__file__, "numpy": numpy is not None,
                  "type": type(out).__module__ + "." + type(out).__name__,
                  "dtype": str(getattr(out, "dtype", "")), "out": out.tolist()}))
"""

# No package index and no network for pip: an index it would ask is refused,
# and no configuration (no find-links folder of wheels).
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
           "PIP_CONFIG_FILE": os.devnull,
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}


def tree_files():
    """Every file under clients/python, with its size and time, but Python's
    bytecode caches (any import of the backend may refresh them): what a
    build could leave there (build/, *.egg-info, dist/) shows."""
    out = set()
    for d, dirs, files in os.walk(CLIENT_SRC):
        dirs[:] = [n for n in dirs if n != "__pycache__"]
        for f in files:
            st = os.stat(os.path.join(d, f))
            out.add((os.path.relpath(os.path.join(d, f), CLIENT_SRC), st.st_size, st.st_mtime_ns))
    return out


class PipInstall(unittest.TestCase):
    def test_readme_install_in_fresh_venvs(self):
        """clients/python/README.md's install blocks (<!-- install test: NAME -->),
        run as written by bash from the repository root, with HOME a fresh
        temporary folder (the venvs go under ~), /usr/bin's python3 first on
        PATH, and pip offline. Both run at once. Then the venv's python
        imports the installed client and calls the server once: the plain
        venv has no NumPy (a posattn.Tensor back), the --system-site-packages
        one has Debian's (a float32 ndarray back)."""
        import re
        found = dict(re.findall(r"<!-- install test: ([\w-]+) -->\s*```sh\n(.*?)```",
                                readme_text(), re.S))
        self.assertEqual(sorted(found), ["venv", "venv-numpy"])
        before = tree_files()
        with tempfile.TemporaryDirectory() as home:
            env = {"HOME": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **OFFLINE}
            runs = {}
            for name, block in found.items():
                self.assertIn("pip install ./clients/python", block, name)
                runs[name] = subprocess.Popen(["bash", "-euc", block], cwd=ROOT, env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True)
            for name, p in runs.items():
                out = p.communicate(timeout=300)[0]
                self.assertEqual(p.returncode, 0, "%s:\n%s\n%s" % (name, found[name], out))
            self.assertEqual(tree_files(), before, "the build wrote into clients/python")
            for name, block in found.items():
                venv = re.search(r"python3 -m venv (?:--\S+ )*(\S+)", block).group(1)
                python = os.path.join(venv.replace("~", home, 1), "bin", "python")
                p = subprocess.run([python, "-c", CALL_ONCE, URL], cwd=home, env=env,
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, name + ": " + p.stderr)
                got = json.loads(p.stdout)
                self.assertTrue(got["file"].startswith(os.path.dirname(python).rsplit("/", 1)[0]
                                                       + "/lib/"), got)
                self.assertEqual(got["out"], [[[1.0, 2.0]], [[2.0, 3.0]]], name)
                if name == "venv":
                    self.assertEqual((got["numpy"], got["type"]), (False, "posattn.Tensor"))
                else:
                    self.assertEqual((got["numpy"], got["type"], got["dtype"]),
                                     (True, "numpy.ndarray", "float32"))

    def test_sdist_and_target(self):
        """The backend's sdist, installed with pip install --target (which
        builds a wheel from it, offline): the sdist holds what a build needs."""
        sys.path.insert(0, os.path.join(CLIENT_SRC, "_backend"))
        try:
            import posattn_build
        finally:
            sys.path.pop(0)
        with tempfile.TemporaryDirectory() as d:
            sdist = os.path.join(d, posattn_build.build_sdist(d))
            target = os.path.join(d, "target")
            p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                                "--target", target, sdist], capture_output=True, text=True,
                               env=dict({k: v for k, v in os.environ.items()
                                         if not k.startswith("PIP_")}, **OFFLINE), timeout=180)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(sorted(os.listdir(target)),
                             ["posattn", "posattn-0.1.0.dist-info"])
            with open(os.path.join(target, "posattn-0.1.0.dist-info", "METADATA")) as f:
                meta = f.read()
            self.assertIn('Requires-Dist: numpy ; extra == "numpy"', meta)
            self.assertIn("Requires-Python: >=3.8", meta)
            code = "import sys; sys.modules['numpy'] = None\n" + CALL_ONCE  # as if NumPy were absent
            p = subprocess.run([sys.executable, "-c", code, URL], capture_output=True, text=True,
                               timeout=60, cwd=d,
                               env=dict(os.environ, PYTHONPATH=target, PYTHONNOUSERSITE="1"))
            self.assertEqual(p.returncode, 0, p.stderr)
            got = json.loads(p.stdout)
            self.assertEqual((got["file"], got["type"], got["out"]),
                             (os.path.join(target, "posattn", "__init__.py"), "posattn.Tensor",
                              [[[1.0, 2.0]], [[2.0, 3.0]]]))

    def test_editable(self):
        """pip install -e (into a --prefix, offline): the installed .pth puts
        clients/python itself on the path, and nothing is written there."""
        before = tree_files()
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--prefix", d,
                                "-e", CLIENT_SRC], capture_output=True, text=True, timeout=180,
                               env=dict({k: v for k, v in os.environ.items()
                                         if not k.startswith("PIP_")}, **OFFLINE))
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            site = [os.path.join(r, n) for r, dirs, _ in os.walk(d) for n in dirs
                    if n in ("site-packages", "dist-packages")]  # Debian: dist-packages
            self.assertEqual(len(site), 1, site)
            code = "import site, sys; site.addsitedir(sys.argv.pop()); " + CALL_ONCE
            p = subprocess.run([sys.executable, "-S", "-c", code, URL, site[0]], cwd=d,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = json.loads(p.stdout)
            self.assertEqual((got["file"], got["out"]),
                             (os.path.join(CLIENT_SRC, "posattn", "__init__.py"),
                              [[[1.0, 2.0]], [[2.0, 3.0]]]))
        self.assertEqual(tree_files(), before, "the build wrote into clients/python")

    def test_backend_reads_pyproject_as_tomllib_does(self):
        """The backend's own TOML reader (for Pythons without tomllib) and
        tomllib agree on pyproject.toml."""
        try:
            import tomllib
        except ImportError:
            self.skipTest("no tomllib in Python %s" % sys.version.split()[0])
        sys.path.insert(0, os.path.join(CLIENT_SRC, "_backend"))
        try:
            import posattn_build
        finally:
            sys.path.pop(0)
        with open(os.path.join(CLIENT_SRC, "pyproject.toml")) as f:
            text = f.read()
        self.assertEqual(posattn_build.read_toml(text), tomllib.loads(text))


def main():
    quiet = "-q" in sys.argv[1:]
    argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != "-q"]
    prog = unittest.main(argv=argv, verbosity=1 if quiet else 2, exit=False)
    ok = prog.result.wasSuccessful()
    print("client-python install: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
