"""posattn_build - the Python client's PEP 517 build backend, standard library only.

pyproject.toml names it (build-backend, backend-path = ["_backend"]) and
requires nothing, so `pip install ./clients/python` works on a machine that
reaches no package index: pip's isolated build environment needs no
setuptools or wheel. It builds a pure-Python wheel of the `posattn` package
(py3-none-any), an sdist, and an editable wheel (a .pth file naming the
source folder) from the [project] table of pyproject.toml.
"""

import ast
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"
# Fixed times, so that two builds of the same files are the same bytes.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
SDIST_MTIME = 315532800  # 1980-01-01


# ------------------------------------------------------------ pyproject.toml
def read_toml(text):
    """The subset of TOML that pyproject.toml uses: [tables], comments, and
    keys whose values are strings or arrays of strings (which read as Python
    literals). For Pythons before 3.11, which have no tomllib; the client's
    tests check that both readers agree on the real file."""
    out, table, pending = {}, None, None
    for line in text.splitlines():
        if pending is not None:
            pending[1].append(line)
            value = "\n".join(pending[1])
            if value.count("[") == value.count("]"):
                table[pending[0]] = ast.literal_eval(_strip_comments(value))
                pending = None
            continue
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"\[([A-Za-z0-9_.-]+)\]$", s)
        if m:
            table = out
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        key, eq, value = s.partition("=")
        key = key.strip().strip('"')
        if not eq or table is None or not re.match(r"[A-Za-z0-9_-]+$", key):
            raise ValueError("pyproject.toml: cannot read the line %r" % line)
        value = value.strip()
        if value.startswith("[") and value.count("[") != value.count("]"):
            pending = (key, [value])
        else:
            table[key] = ast.literal_eval(_strip_comments(value))
    if pending is not None:
        raise ValueError("pyproject.toml: the array %r does not end" % pending[0])
    return out


def _strip_comments(value):
    """value without its # comments (outside strings)."""
    out, quote = [], None
    for line in value.split("\n"):
        kept = ""
        for ch in line:
            if quote:
                quote = None if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch == "#":
                break
            kept += ch
        out.append(kept)
    return "\n".join(out)


def project():
    """The [project] table of pyproject.toml."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        return read_toml(text)["project"]
    return tomllib.loads(text)["project"]


def metadata(p):
    """The METADATA (PKG-INFO) text of the [project] table p."""
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if "description" in p:
        lines.append("Summary: " + p["description"])
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    lines += ["Classifier: " + c for c in p.get("classifiers", [])]
    lines += ["Requires-Dist: " + d for d in p.get("dependencies", [])]
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s ; extra == "%s"' % (d, extra) for d in deps]
    body = ""
    if "readme" in p:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, p["readme"]), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _names(p):
    """(distribution file name, version) as wheel and sdist names spell them."""
    return re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"]


def _dist_info_files(p):
    """The dist-info files but RECORD: {name: bytes}."""
    return {
        "METADATA": metadata(p).encode("utf-8"),
        "WHEEL": ("Wheel-Version: 1.0\nGenerator: posattn_build\nRoot-Is-Purelib: true\n"
                  "Tag: %s\n" % TAG).encode("ascii"),
        "top_level.txt": (p["name"] + "\n").encode("ascii"),
    }


def _package_files(p):
    """The package's files as (path in the wheel, path on disk), sorted."""
    pkg = os.path.join(ROOT, p["name"])
    if not os.path.isfile(os.path.join(pkg, "__init__.py")):
        raise FileNotFoundError("no package folder %s with an __init__.py" % pkg)
    out = []
    for d, dirs, files in os.walk(pkg):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if not f.endswith((".pyc", ".pyo")):
                full = os.path.join(d, f)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


# ------------------------------------------------------------ the wheel
def _write_wheel(wheel_directory, p, files):
    """A wheel of files ({path in the wheel: bytes}) plus the dist-info;
    returns its file name."""
    name, version = _names(p)
    info = "%s-%s.dist-info" % (name, version)
    files = dict(files)
    for f, data in _dist_info_files(p).items():
        files[info + "/" + f] = data
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append("%s,sha256=%s,%d" % (path, digest.decode("ascii"), len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode("utf-8")
    wheel = "%s-%s-%s.whl" % (name, version, TAG)
    tmp = os.path.join(wheel_directory, wheel + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            zi = zipfile.ZipInfo(path, ZIP_TIME)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, os.path.join(wheel_directory, wheel))
    return wheel


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = project()
    return _write_wheel(wheel_directory, p, {arc: _read(full) for arc, full in _package_files(p)})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this folder on sys.path: the installed
    package is the source tree, edits take effect without reinstalling."""
    p = project()
    name, version = _names(p)
    pth = "__editable__.%s-%s.pth" % (name, version)
    return _write_wheel(wheel_directory, p, {pth: (ROOT + "\n").encode("utf-8")})


def _prepare_metadata(metadata_directory):
    p = project()
    name, version = _names(p)
    info = "%s-%s.dist-info" % (name, version)
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for f, data in _dist_info_files(p).items():
        with open(os.path.join(metadata_directory, info, f), "wb") as out:
            out.write(data)
    return info


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


# ------------------------------------------------------------ the sdist
def build_sdist(sdist_directory, config_settings=None):
    """name-version.tar.gz: pyproject.toml, the readme, the package, this
    backend and PKG-INFO, all under name-version/."""
    p = project()
    name, version = _names(p)
    base = "%s-%s" % (name, version)
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml"))]
    if "readme" in p:
        files.append((p["readme"], os.path.join(ROOT, p["readme"])))
    files += _package_files(p)
    here = os.path.abspath(__file__)
    files.append((os.path.relpath(here, ROOT).replace(os.sep, "/"), here))
    members = [(arc, _read(full)) for arc, full in files]
    members.append(("PKG-INFO", metadata(p).encode("utf-8")))
    sdist = base + ".tar.gz"
    tmp = os.path.join(sdist_directory, sdist + ".part")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc, data in sorted(members):
            ti = tarfile.TarInfo(base + "/" + arc)
            ti.size, ti.mtime, ti.mode = len(data), SDIST_MTIME, 0o644
            t.addfile(ti, io.BytesIO(data))
    os.replace(tmp, os.path.join(sdist_directory, sdist))
    return sdist
