"""posattn - a small Python client for posattnd (README.md beside this package).

    import posattn
    c = posattn.Client("http://127.0.0.1:8080")      # api_key: $POSATTN_API_KEY
    out = c.attention(q, k, v, scheme="rope", causal=True)

Standard library only (http.client under urllib's URL parsing, ssl, json,
base64). When NumPy is importable, tensors come back as float32 ndarrays and
ndarrays are accepted; without it they come back as posattn.Tensor (a flat
list and a shape) and nested lists or Tensor objects are accepted. Tensors go
out as base64 of little-endian float32 and come back the same way
("output_encoding": "b64"). Every failure is a posattn.Error: the server's
errors carry .code, .field, .message, .status (and .item in a batch), and
transport failures are posattn.TransportError, a subclass.
"""

import base64
import http.client
import json
import math
import os
import socket
import ssl
import struct
import urllib.parse

try:  # optional: only the types of inputs and results depend on it
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the machine
    _np = None

__all__ = ["Client", "Error", "TransportError", "Ref", "Tensor", "__version__"]
__version__ = "0.1.0"

# The HTTP status posattnd gives each error code (server/common/errors.h).
# Item errors inside a batch carry the status of their code.
CODE_STATUS = {
    "MALFORMED_JSON": 400, "INVALID_ARGUMENT": 400, "SHAPE_MISMATCH": 400,
    "OUT_OF_RANGE": 400, "UNSUPPORTED": 400, "UNKNOWN_FIELD": 400, "UNKNOWN_TENSOR": 400,
    "UNKNOWN_MODEL": 400,
    "UNAUTHORIZED": 401, "NOT_FOUND": 404, "SESSION_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405, "SESSION_FULL": 409, "SESSION_BUSY": 409,
    "SESSION_EXISTS": 409, "PAYLOAD_TOO_LARGE": 413, "INTERNAL": 500, "NOT_IMPLEMENTED": 501,
    "OVERLOADED": 503, "DRAINING": 503, "TIMEOUT": 504, "CACHE_FULL": 507,
}

# Item fields that hold tensors (openapi.yaml, AttentionFields), and the
# scheme parameters that do. Lists given there are tensors (shape from their
# nesting); elsewhere lists are sent as they are (positions, key_length, ...).
TENSOR_FIELDS = frozenset(("q", "k", "v", "x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k",
                           "b_v", "b_o", "sinks", "mask", "bias", "attention_mask"))
SCHEME_TENSORS = frozenset(("table", "rel_k", "rel_v"))
# Analyses whose answers hold tensors (the others refuse output_encoding).
ANALYSES_WITH_TENSORS = frozenset(("rope_offset", "similarity", "decomposition",
                                   "rope_spectrum"))


class Error(Exception):
    """An error answered by posattnd, or (TransportError) no answer at all.

    code     the server's error code (SHAPE_MISMATCH, UNAUTHORIZED, ...)
    message  what went wrong, naming the values
    field    the offending field's path (inputs[0].k.shape) or None
    status   the HTTP status (for an item error, the status of its code)
    item     the index of the failed item in a batch, else None
    retry_after  seconds from Retry-After (503), else None
    """

    def __init__(self, code, message, field=None, status=None, item=None, retry_after=None):
        super().__init__(code, message)
        self.code, self.message, self.field = code, message, field
        self.status, self.item, self.retry_after = status, item, retry_after

    def __str__(self):
        where = " at %s" % self.field if self.field else ""
        status = " (HTTP %s)" % self.status if self.status is not None else ""
        item = "item %d: " % self.item if self.item is not None else ""
        return "%s%s%s%s: %s" % (item, self.code, status, where, self.message)

    def __repr__(self):
        return "posattn.Error(%r, %r, field=%r, status=%r, item=%r)" % (
            self.code, self.message, self.field, self.status, self.item)


class TransportError(Error):
    """No HTTP answer: CONNECTION_REFUSED, CONNECTION_FAILED,
    TLS_VERIFICATION_FAILED, TLS_ERROR or CLIENT_TIMEOUT (status None). The
    underlying exception is __cause__ (and .reason). An answer that came but
    cannot be read is an Error with code BAD_ANSWER."""

    def __init__(self, code, message, reason=None):
        super().__init__(code, message)
        self.reason = reason


class Ref:
    """A tensor loaded by the server at start-up (posattnd --tensor NAME=PATH),
    usable wherever a tensor goes: c.attention(q, posattn.Ref("k_cache"), v)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = str(name)

    def __repr__(self):
        return "posattn.Ref(%r)" % self.name

    def __eq__(self, other):
        return isinstance(other, Ref) and other.name == self.name

    def __hash__(self):
        return hash(("posattn.Ref", self.name))


class Tensor:
    """A row-major tensor without NumPy: .data (flat list), .shape (tuple),
    .dtype ("FP32" or "INT32"). Accepted as input, returned without NumPy."""

    __slots__ = ("data", "shape", "dtype")

    def __init__(self, data, shape, dtype="FP32"):
        self.data, self.shape, self.dtype = list(data), tuple(int(n) for n in shape), dtype
        if _prod(self.shape) != len(self.data):
            raise ValueError("shape %s needs %d values, got %d"
                             % (list(self.shape), _prod(self.shape), len(self.data)))

    def tolist(self):
        """The values nested by shape, as NumPy's tolist() gives them."""
        def nest(flat, shape):
            if len(shape) <= 1:
                return list(flat)
            step = len(flat) // shape[0] if shape[0] else 0
            return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
        return nest(self.data, self.shape)

    def __len__(self):
        return self.shape[0] if self.shape else 0

    def __eq__(self, other):
        return (isinstance(other, Tensor) and other.shape == self.shape
                and other.data == self.data)

    def __repr__(self):
        return "posattn.Tensor(shape=%s, dtype=%s)" % (list(self.shape), self.dtype)


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _flatten(x):
    """(shape, flat values) of a nested list; ragged lists are a ValueError."""
    shape, level = [], x
    while isinstance(level, (list, tuple)):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    flat = []

    def walk(node, depth):
        if depth == len(shape):
            if isinstance(node, (list, tuple)):
                raise ValueError("ragged nested list: deeper than shape %s" % shape)
            flat.append(node)
            return
        if not isinstance(node, (list, tuple)) or len(node) != shape[depth]:
            raise ValueError("ragged nested list: not of shape %s" % shape)
        for child in node:
            walk(child, depth + 1)
    walk(x, 0)
    return shape, flat


def _json_default(o):
    if hasattr(o, "tolist"):  # NumPy scalars and arrays in plain fields
        return o.tolist()
    if isinstance(o, Tensor):
        return o.tolist()
    raise TypeError("%r cannot be sent as JSON" % (o,))


class Client:
    """A posattnd client. Thread-safe: each call opens its own connection.

    url      http://HOST:PORT or https://HOST:PORT (a path prefix is kept)
    api_key  sent as Authorization: Bearer; default $POSATTN_API_KEY
    cafile   PEM CA bundle to verify an https:// server (a private CA);
             default $POSATTN_CACERT, else the system's CAs
    timeout  seconds for connecting and for each read or write
    numpy    None: NumPy results when NumPy is importable; False: always
             posattn.Tensor; True: require NumPy
    """

    def __init__(self, url, api_key=None, cafile=None, timeout=60, *, numpy=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url must be http://HOST[:PORT] or https://HOST[:PORT], got %r" % url)
        self.url = url.rstrip("/")
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname, u.port
        self._prefix = u.path.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("POSATTN_API_KEY")
        self.cafile = cafile if cafile is not None else os.environ.get("POSATTN_CACERT")
        self.timeout = timeout
        if numpy and _np is None:
            raise ImportError("numpy=True, but NumPy is not importable")
        self._np = _np if numpy is None or numpy else None
        self._ctx = ssl.create_default_context(cafile=self.cafile or None) if self._https else None

    # ------------------------------------------------------------ the API
    def health(self):
        """GET /healthz: {"status": "ok"}."""
        return self.call("GET", "/healthz")

    def schemes(self):
        """GET /v1/schemes: every scheme, its parameters and defaults."""
        return self.call("GET", "/v1/schemes")

    def tensors(self):
        """GET /v1/tensors: the named tensors the server loaded (for Ref)."""
        return self.call("GET", "/v1/tensors")["tensors"]

    def attention(self, q, k, v, scheme="none", causal=False, **options):
        """Attention of one item; returns the output [Lq, H, Dv] (or [B, ...]).

        scheme   a name ("rope") or a dict ({"type": "rope", "scaling": "yarn",
                 "factor": 4, ...}; tables may be arrays or Refs)
        options  any field of an attention item (openapi.yaml AttentionFields):
                 num_heads, num_kv_heads, window, key_length, q_positions,
                 scale, softcap, sinks, mask, bias, x, w_q, ... and
                 returns=["output", "entropy", ...] (the item's "return"):
                 then the result is a dict of those names to arrays.
        q, k, v  arrays, nested lists, Tensor, Ref, or None (layer mode).
        Raises Error (item errors have item None here).
        """
        result = self.attention_batch([dict(options, q=q, k=k, v=v, scheme=scheme,
                                            causal=causal)])[0]
        if isinstance(result, Error):
            result.item = None
            raise result
        return result

    def attention_batch(self, items, output_dtype=None):
        """One request of several items (dicts of attention()'s arguments:
        q, k, v, scheme, causal, returns, options). Returns a list in item
        order: each the item's result, or an Error (with .item) if it
        failed. A whole-request failure (401, 413, 503, ...) is raised."""
        body = {"inputs": [self._item(it) for it in items], "output_encoding": "b64"}
        if output_dtype is not None:
            body["output_dtype"] = output_dtype
        status, doc = self._request("POST", "/v1/attention", body, batch=True)
        outs = doc.get("outputs")
        if not isinstance(outs, list) or len(outs) != len(items):
            raise Error("BAD_ANSWER", "answer has no outputs list of %d entries" % len(items),
                        status=status)
        results = []
        for i, (it, out) in enumerate(zip(items, outs)):
            err = out.get("error")
            if err is not None:
                results.append(self._error(err, status, item=i))
                continue
            decoded = {key: self._decode(val) for key, val in out.items() if key != "id"}
            if it.get("returns") is not None or "return" in it:
                results.append(decoded)
            else:
                results.append(decoded["output"])
        return results

    def encode(self, scheme, **fields):
        """POST /v1/encode: the positional signal of a scheme (length, dim,
        num_heads, q_length, ... as in openapi.yaml). Returns the answer with
        its tensors decoded (encoding, inv_freq, cos, sin, slopes, bias,
        buckets, index)."""
        body = self._fields(fields)
        body["scheme"] = self._scheme(scheme)
        body.setdefault("output_encoding", "b64")
        return self._decode(self._request("POST", "/v1/encode", body)[1])

    def analyze(self, analysis, scheme=None, **fields):
        """POST /v1/analyze: permutation, rope_offset, similarity,
        decomposition, rope_spectrum or extrapolation, with its fields.
        Returns the answer with its tensors decoded."""
        body = self._fields(fields)
        body["analysis"] = analysis
        if scheme is not None:
            body["scheme"] = self._scheme(scheme)
        if analysis in ANALYSES_WITH_TENSORS:
            body.setdefault("output_encoding", "b64")
        return self._decode(self._request("POST", "/v1/analyze", body)[1])

    def call(self, method, path, body=None):
        """Any route: the answer's JSON (body: a dict sent as JSON). Errors
        are raised as for the other methods."""
        return self._request(method, path, body)[1]

    # ------------------------------------------------------------ requests
    def _item(self, it):
        it = dict(it)
        item = {"scheme": self._scheme(it.pop("scheme", "none"))}
        returns = it.pop("returns", None)
        if returns is not None:
            item["return"] = [returns] if isinstance(returns, str) else list(returns)
        if it.get("causal") is False:
            it.pop("causal")  # the default; keeps bodies minimal
        item.update(self._fields(it))
        return item

    def _fields(self, fields):
        out = {}
        for name, val in fields.items():
            if val is None:
                continue
            out[name] = self._tensor(val, name) if name in TENSOR_FIELDS else self._plain(val)
        return out

    @staticmethod
    def _plain(val):
        # Arrays in plain fields (positions, key_length, slopes) go as JSON
        # numbers through _json_default; only a Ref needs translating.
        return {"ref": val.name} if isinstance(val, Ref) else val

    def _scheme(self, scheme):
        if isinstance(scheme, str):
            return {"type": scheme}
        if not isinstance(scheme, dict):
            raise TypeError("scheme must be a name or a dict, got %r" % (scheme,))
        return {key: self._tensor(val, key) if key in SCHEME_TENSORS else self._plain(val)
                for key, val in scheme.items()}

    def _tensor(self, x, field):
        """An input tensor as JSON: {"ref"}, or {"shape", "b64"} of float32
        (mask: one byte per element, datatype BOOL). A dict is sent as is."""
        if isinstance(x, Ref):
            return {"ref": x.name}
        if isinstance(x, dict):
            return x
        if _np is not None and isinstance(x, _np.ndarray):
            if field == "mask":
                a = _np.ascontiguousarray(x).astype(bool).astype(_np.uint8)
                return {"shape": list(a.shape), "datatype": "BOOL", "b64": _b64(a.tobytes())}
            a = _np.ascontiguousarray(x, dtype="<f4")
            return {"shape": list(a.shape), "b64": _b64(a.tobytes())}
        if isinstance(x, Tensor):
            shape, flat = list(x.shape), x.data
        elif isinstance(x, (list, tuple)):
            shape, flat = _flatten(x)
        else:
            raise TypeError("%s: expected an array, nested list, posattn.Tensor or posattn.Ref, "
                            "got %s" % (field or "tensor", type(x).__name__))
        if field == "mask":
            return {"shape": shape, "datatype": "BOOL",
                    "b64": _b64(bytes(1 if e else 0 for e in flat))}
        try:
            return {"shape": shape, "b64": _b64(struct.pack("<%df" % len(flat), *flat))}
        except (OverflowError, struct.error):
            # Past float32's range: let the server name the element (OUT_OF_RANGE).
            return {"shape": shape, "data": [float(e) for e in flat]}

    def _decode(self, obj):
        """The answer with every result tensor turned into an array."""
        if isinstance(obj, dict):
            if "shape" in obj and "datatype" in obj and ("b64" in obj or "data" in obj):
                return self._tensor_out(obj)
            return {key: self._decode(val) for key, val in obj.items()}
        if isinstance(obj, list):
            return [self._decode(val) for val in obj]
        return obj

    def _tensor_out(self, t):
        shape, dt = tuple(t["shape"]), t["datatype"]
        np = self._np
        if "b64" in t:
            raw = base64.b64decode(t["b64"])
            if np is not None:
                if dt == "FP16":
                    a = _np.frombuffer(raw, "<f2").astype(_np.float32)
                elif dt == "BF16":
                    a = (_np.frombuffer(raw, "<u2").astype(_np.uint32) << 16).view(_np.float32)
                elif dt == "INT32":
                    a = _np.frombuffer(raw, "<i4").astype(_np.int32)
                else:
                    a = _np.frombuffer(raw, "<f4").astype(_np.float32)
                return a.reshape(shape)
            if dt == "FP16":
                vals = struct.unpack("<%de" % (len(raw) // 2), raw)
            elif dt == "BF16":
                h = struct.unpack("<%dH" % (len(raw) // 2), raw)
                vals = struct.unpack("<%df" % len(h), struct.pack("<%dI" % len(h),
                                                                  *(x << 16 for x in h)))
            elif dt == "INT32":
                vals = struct.unpack("<%di" % (len(raw) // 4), raw)
            else:
                vals = struct.unpack("<%df" % (len(raw) // 4), raw)
            return Tensor(vals, shape, "INT32" if dt == "INT32" else "FP32")
        data = t["data"]
        if dt == "INT32":
            return (_np.array(data, dtype=_np.int32).reshape(shape) if np is not None
                    else Tensor(data, shape, "INT32"))
        # In JSON, non-finite results are null: masked logits, i.e. -inf.
        vals = [-math.inf if x is None else x for x in data]
        return (_np.array(vals, dtype=_np.float32).reshape(shape) if np is not None
                else Tensor([struct.unpack("<f", struct.pack("<f", x))[0] for x in vals], shape))

    def _error(self, err, status, item=None, retry_after=None):
        if not isinstance(err, dict):  # the /v2 form, {"error": "..."}
            return Error("HTTP_%d" % status, str(err), status=status, item=item)
        code = err.get("code", "HTTP_%d" % status)
        st = CODE_STATUS.get(code, status if status != 200 else 400) if item is not None else status
        return Error(code, err.get("message", ""), err.get("field"), st, item, retry_after)

    def _connect(self):
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout,
                                               context=self._ctx)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def _request(self, method, path, body=None, batch=False):
        """(status, answer JSON) of one request; raises Error for an error
        answer (except a batch's all-items-failed answer, which has outputs)."""
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), allow_nan=False,
                              default=_json_default).encode()
        headers = {"Accept": "application/json", "User-Agent": "posattn-python/" + __version__}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        conn = self._connect()
        try:
            try:
                conn.connect()
            except OSError as e:
                raise self._transport(e) from e
            conn.putrequest(method, (self._prefix or "") + path, skip_accept_encoding=True)
            for name, val in headers.items():
                conn.putheader(name, val)
            conn.putheader("Content-Length", str(len(data) if data is not None else 0))
            sent_err = None
            try:
                conn.endheaders(data)
            except OSError as e:
                # posattnd answers a body over its limit (413) or a request
                # without a key (401) before reading it all, then closes: the
                # answer is still there to read.
                sent_err = e
            try:
                r = conn.getresponse()
                raw = r.read()
            except (OSError, http.client.HTTPException) as e:
                cause = sent_err or e
                raise self._transport(cause) from cause
            status, ctype = r.status, r.getheader("Content-Type", "")
            retry_after = r.getheader("Retry-After")
        finally:
            conn.close()
        doc = None
        if raw and ("json" in ctype or raw[:1] in (b"{", b"[")):
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
        if 200 <= status < 300:
            if doc is None and raw:
                raise Error("BAD_ANSWER", "the answer is not JSON: %r" % raw[:200], status=status)
            return status, doc if doc is not None else {}
        if batch and isinstance(doc, dict) and isinstance(doc.get("outputs"), list):
            return status, doc  # every item failed: the status is theirs
        try:
            ra = float(retry_after) if retry_after is not None else None
        except ValueError:
            ra = None
        if isinstance(doc, dict) and "error" in doc:
            raise self._error(doc["error"], status, retry_after=ra)
        raise Error("HTTP_%d" % status, raw[:200].decode("utf-8", "replace") or r.reason,
                    status=status, retry_after=ra)

    def _transport(self, e):
        where = "%s://%s:%s" % ("https" if self._https else "http", self._host,
                                self._port or (443 if self._https else 80))
        if isinstance(e, ssl.SSLCertVerificationError):
            hint = "" if self.cafile else " (a private CA? pass cafile= or set POSATTN_CACERT)"
            return TransportError("TLS_VERIFICATION_FAILED", "cannot verify %s: %s%s"
                                  % (where, e.verify_message or e, hint), e)
        if isinstance(e, ssl.SSLError):
            return TransportError("TLS_ERROR", "TLS with %s failed: %s" % (where, e), e)
        if isinstance(e, ConnectionRefusedError):
            return TransportError("CONNECTION_REFUSED", "connection to %s refused "
                                  "(is posattnd running there?)" % where, e)
        if isinstance(e, (socket.timeout, TimeoutError)):
            return TransportError("CLIENT_TIMEOUT", "no answer from %s within %s s"
                                  % (where, self.timeout), e)
        return TransportError("CONNECTION_FAILED", "%s: %s" % (where, e), e)


def _b64(raw):
    return base64.b64encode(raw).decode("ascii")
