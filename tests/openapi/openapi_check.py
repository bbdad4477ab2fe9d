"""openapi_check.py - openapi.yaml, and one HTTP exchange checked against it
(tests/openapi/conformance.py's machinery): the document loaded, its schemas
as JSON Schema, and exchange(), which sends a request to posattnd and checks
both sides:

- the request body must be valid against the operation's requestBody schema
  (a request the server accepts that the spec forbids is a disagreement);
- the answer must be valid against the response schema for its status code
  and Content-Type (an undocumented status is a failure). Answers are checked
  *closed*: an object schema of a response that lists `properties` accepts no
  other member here, so a field the server sends and the spec does not name
  fails too.

OpenAPI 3.0 schema objects become JSON Schema draft 4 (`nullable` adds null,
`exclusiveMinimum` is draft 4's boolean, `discriminator` and `example` are
dropped, format int32 and byte are checked); `$ref`s resolve in the spec.

POSATTN_URL names the server (default http://127.0.0.1:8080), OPENAPI_SPEC
another copy of the document (default: the repository's openapi.yaml).
Stats counts what was checked.
"""

import base64
import http.client
import json
import os
import re
import urllib.parse

import jsonschema
import yaml

URL = os.environ.get("POSATTN_URL", "http://127.0.0.1:8080").rstrip("/")
HERE = os.path.dirname(os.path.abspath(__file__))
SPEC_PATH = os.environ.get("OPENAPI_SPEC", os.path.join(HERE, "..", "..", "openapi.yaml"))
TIMEOUT = 30

with open(SPEC_PATH, "rb") as _f:
    SPEC_BYTES = _f.read()
SPEC = yaml.safe_load(SPEC_BYTES)

# ------------------------------------------------------------ OpenAPI -> JSON Schema
_DROP = {"discriminator", "example", "xml", "externalDocs", "deprecated", "readOnly",
         "writeOnly", "nullable"}


def to_json_schema(s, closed=False, in_allof=False):
    """An OpenAPI 3.0 schema object as JSON Schema draft 4. closed: objects
    that list properties (and are not a branch of an allOf) accept no other."""
    if not isinstance(s, dict):
        return s
    if "$ref" in s:  # OpenAPI 3.0 ignores a $ref's siblings, as draft 4 does
        return {"$ref": s["$ref"]}
    out = {}
    for k, v in s.items():
        if k in _DROP:
            continue
        if k == "properties":
            out[k] = {n: to_json_schema(p, closed) for n, p in v.items()}
        elif k in ("items", "not") or (k == "additionalProperties" and isinstance(v, dict)):
            out[k] = to_json_schema(v, closed)
        elif k in ("allOf", "oneOf", "anyOf"):
            out[k] = [to_json_schema(b, closed, in_allof=k == "allOf") for b in v]
        else:
            out[k] = v
    if closed and not in_allof and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if s.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = list(out["enum"]) + [None]
        elif any(k in out for k in ("allOf", "oneOf", "anyOf")):
            out = {"anyOf": [{"type": "null"}, out]}
    return out


def _converted(closed):
    comps = {n: to_json_schema(s, closed) for n, s in SPEC["components"]["schemas"].items()}
    return {"components": {"schemas": comps}}


_ROOTS = {False: _converted(False), True: _converted(True)}
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("int32")
def _int32(v):
    return not isinstance(v, int) or -2**31 <= v < 2**31


@FORMATS.checks("byte", raises=ValueError)
def _byte(v):
    if isinstance(v, str):
        base64.b64decode(v, validate=True)
    return True


def validate(obj, schema, closed=False):
    """Raises jsonschema.ValidationError unless obj is valid as the spec's schema."""
    root = _ROOTS[closed]
    resolver = jsonschema.RefResolver.from_schema(root)
    jsonschema.Draft4Validator(to_json_schema(schema, closed), resolver=resolver,
                               format_checker=FORMATS).validate(obj)


def component(name):
    return {"$ref": "#/components/schemas/" + name}


def deref(node):
    while isinstance(node, dict) and "$ref" in node:
        cur = SPEC
        for part in node["$ref"].lstrip("#/").split("/"):
            cur = cur[part]
        node = cur
    return node


def property_names(schema):
    """The member names an object schema declares (allOf branches merged)."""
    s = deref(schema)
    names = set(s.get("properties", {}))
    for b in s.get("allOf", []):
        names |= property_names(b)
    return names


def operation(path, method):
    """(spec path, operation) for a request path: exact, else a template."""
    paths = SPEC["paths"]
    path = path.split("?")[0]
    if path in paths:
        return path, paths[path].get(method.lower())
    for tmpl in paths:
        rx = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(tmpl)) + "$"
        if re.match(rx, path):
            return tmpl, paths[tmpl].get(method.lower())
    return None, None


# ------------------------------------------------------------------------- HTTP
class Stats:
    requests = 0     # request bodies validated against their requestBody
    answers = 0      # answers validated against their response
    statuses = set() # (spec path, method, status) seen


def call(method, path, body=None, headers=None, base=URL, raw=None):
    """One exchange; returns (status, headers, body bytes)."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=TIMEOUT)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        h = {"Content-Type": "application/json"} if data is not None else {}
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


def check_request(path, method, body):
    """The JSON body is valid as the operation's requestBody (raises if not)."""
    tmpl, op = operation(path, method)
    assert op is not None and "requestBody" in op, "%s %s takes no body in the spec" % (method,
                                                                                       path)
    validate(body, op["requestBody"]["content"]["application/json"]["schema"])
    Stats.requests += 1


def check_answer(method, path, status, headers, data):
    """The answer is what the spec documents for this status; returns its JSON
    (or its text for a non-JSON answer)."""
    tmpl, op = operation(path, method)
    if op is None:  # a documented path with another method: the path's 405
        ops = SPEC["paths"].get(tmpl, {}) if tmpl else {}
        assert ops, "%s is not a path of the spec" % path
        op = next(iter(ops.values()))
        assert status == 405, "%s %s: %d for a method the spec does not name" % (method, path,
                                                                                status)
    resp = op["responses"].get(str(status), op["responses"].get("default"))
    assert resp is not None, "%s %s answered %d, which the spec does not list (%s): %r" % (
        method, tmpl, status, ", ".join(op["responses"]), data[:300])
    resp = deref(resp)
    Stats.statuses.add((tmpl, method, status))
    Stats.answers += 1
    content = resp.get("content")
    if not content:
        assert data == b"", "%s %s %d: the spec says no body, got %r" % (method, tmpl, status,
                                                                        data[:200])
        return None
    ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
    assert ctype in content, "%s %s %d: Content-Type %r, the spec has %s" % (
        method, tmpl, status, ctype, ", ".join(content))
    schema = content[ctype].get("schema", {})
    if ctype == "application/json":
        obj = json.loads(data)
        try:
            validate(obj, schema, closed=True)
        except jsonschema.ValidationError as e:
            raise AssertionError("%s %s %d: the answer is not valid against the spec: %s at "
                                 "%s\n  answer: %.600s" % (method, tmpl, status, e.message,
                                                           "/".join(map(str, e.absolute_path)),
                                                           data.decode(errors="replace")))
        return obj
    if ctype == "application/octet-stream":
        return data
    return data.decode()


def exchange(method, path, body=None, base=URL, headers=None, valid=True, raw=None):
    """Sends a request and checks both sides; valid=True requires the spec to
    accept the request body, valid=False requires it to reject it, None
    checks nothing (a body that is not JSON, say). Returns (status, answer)."""
    if body is not None and valid is not None:
        if valid:
            check_request(path, method, body)
        else:
            try:
                check_request(path, method, body)
            except jsonschema.ValidationError:
                pass
            else:
                raise AssertionError("the spec accepts a request it should refuse: %.300s"
                                     % json.dumps(body))
    st, h, data = call(method, path, body, headers=headers, base=base, raw=raw)
    return st, check_answer(method, path, st, h, data)
