// posattn.js - a small client for posattnd (docs/api.md,
// openapi.yaml), one ES module for Node 20 and browsers with no dependencies.
// Tensors go out as base64 little-endian float32 and come back as
// Float32Array; errors are thrown as PosattnError. Requests use the global
// fetch, except HTTPS with a private CA in Node (caFile or POSATTN_CACERT):
// Node 20's fetch cannot take a CA without the undici package, so those go
// through node:https with {ca}. node:https and node:fs are imported
// dynamically, only then: the module itself imports nothing.
//
//   import { Client, ref } from "./clients/js/posattn.js";
//   const c = new Client("http://127.0.0.1:8080");
//   const r = await c.attention(q, k, v, { shape: [L, H, D], scheme: "rope", causal: true });
//   r.output; // Float32Array [L, H, D] (r.shape)
//
// Tests: tests/clients/test_js_client.mjs (make client-js).

// The server's code -> HTTP status table (server/common/errors.h), so that an
// item's error inside a 200 batch carries the status it would have alone.
const STATUS_OF_CODE = {
  MALFORMED_JSON: 400, INVALID_ARGUMENT: 400, SHAPE_MISMATCH: 400, OUT_OF_RANGE: 400,
  UNSUPPORTED: 400, UNKNOWN_FIELD: 400, UNKNOWN_TENSOR: 400, UNKNOWN_MODEL: 400, UNAUTHORIZED: 401,
  NOT_FOUND: 404, SESSION_NOT_FOUND: 404, METHOD_NOT_ALLOWED: 405, SESSION_FULL: 409,
  SESSION_BUSY: 409, SESSION_EXISTS: 409, PAYLOAD_TOO_LARGE: 413, INTERNAL: 500, NOT_IMPLEMENTED: 501, OVERLOADED: 503,
  DRAINING: 503, TIMEOUT: 504, CACHE_FULL: 507,
};

const IS_NODE = typeof globalThis.process?.versions?.node === "string";
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
// /v1/analyze analyses that return tensors (the others reject output_encoding).
const ANALYSES_WITH_TENSORS = new Set(["rope_offset", "similarity", "decomposition", "rope_spectrum"]);

/**
 * An error from posattnd or on the way to it. code is the server's code
 * (SHAPE_MISMATCH, UNAUTHORIZED, ...) or the client's own: TRANSPORT (no HTTP
 * answer: refused, reset, TLS verification), CLIENT_TIMEOUT (timeoutMs passed),
 * CONFIG (caFile unreadable), BAD_RESPONSE (an answer that is not posattnd's
 * JSON). status is the HTTP status (0 without an answer); field the path the
 * server named (null when none); item the batch index (null for request-level
 * errors).
 */
export class PosattnError extends Error {
  constructor(message, { code, field = null, status = 0, item = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "PosattnError";
    this.code = code;
    this.field = field;
    this.status = status;
    this.item = item;
  }
}

/** A tensor loaded at start-up (posattnd --tensor NAME=PATH), usable wherever a tensor goes. */
export function ref(name) {
  if (typeof name !== "string" || name === "") throw new TypeError("ref(name): name must be a non-empty string");
  return Object.freeze({ ref: name });
}

/** A tensor with its shape: data is a Float32Array (or any numbers, sent as float32). */
export function tensor(data, shape) {
  return { shape: Array.from(shape), data };
}

// ---------------------------------------------------------------- base64

/** Standard base64 of bytes: Buffer in Node, btoa in browsers. */
export function bytesToBase64(bytes) {
  const B = globalThis.Buffer;
  if (typeof B === "function") return B.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/** The bytes of standard base64 text, in a fresh (aligned) Uint8Array. */
export function base64ToBytes(text) {
  const B = globalThis.Buffer;
  if (typeof B === "function") {
    const b = B.from(text, "base64");
    const out = new Uint8Array(b.length); // Buffer's pool offset may not be 4-aligned
    out.set(b);
    return out;
  }
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/** Numbers as base64 little-endian float32 (the wire's "b64"). */
export function encodeFloat32(values) {
  const f = values instanceof Float32Array ? values : Float32Array.from(values);
  if (LITTLE_ENDIAN) return bytesToBase64(new Uint8Array(f.buffer, f.byteOffset, f.byteLength));
  const dv = new DataView(new ArrayBuffer(f.length * 4));
  f.forEach((x, i) => dv.setFloat32(i * 4, x, true));
  return bytesToBase64(new Uint8Array(dv.buffer));
}

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return sign * f * 2 ** -24;
  if (e === 31) return f ? NaN : sign * Infinity;
  return sign * (1 + f / 1024) * 2 ** (e - 15);
}

/** base64 of a result tensor's datatype (FP32, FP16 or BF16) -> Float32Array. */
export function decodeFloat32(text, datatype = "FP32") {
  const bytes = base64ToBytes(text);
  const dv = new DataView(bytes.buffer);
  if (datatype === "FP32") {
    if (bytes.length % 4) throw new PosattnError(`b64 of ${bytes.length} bytes is not float32`, { code: "BAD_RESPONSE" });
    if (LITTLE_ENDIAN) return new Float32Array(bytes.buffer);
    return Float32Array.from({ length: bytes.length / 4 }, (_, i) => dv.getFloat32(i * 4, true));
  }
  if ((datatype === "BF16" || datatype === "FP16") && bytes.length % 2 === 0) {
    const n = bytes.length / 2;
    const out = new Float32Array(n);
    if (datatype === "BF16") {
      const u = new Uint32Array(out.buffer); // bf16 is the top half of a float32
      for (let i = 0; i < n; i++) u[i] = dv.getUint16(i * 2, true) << 16;
    } else {
      for (let i = 0; i < n; i++) out[i] = halfToFloat(dv.getUint16(i * 2, true));
    }
    return out;
  }
  throw new PosattnError(`cannot decode b64 of datatype ${datatype} (${bytes.length} bytes)`, { code: "BAD_RESPONSE" });
}

// ------------------------------------------------------- request building

const isTyped = (x) => ArrayBuffer.isView(x) && !(x instanceof DataView);

// One tensor argument (q, k, v) in its wire form. A bare Float32Array (or
// number array) takes shape from the options; a ref or an object passes on.
function wireTensor(x, shape, name) {
  if (x === undefined || x === null) return undefined;
  if (isTyped(x) || (Array.isArray(x) && shape)) {
    if (!shape) throw new TypeError(`${name}: a typed array needs a shape (options.shape or options.${name}Shape)`);
    return { shape: Array.from(shape), b64: encodeFloat32(x) };
  }
  return wireValue(x);
}

// Any option value: {shape, data: TypedArray} becomes {shape, b64}; other
// typed arrays (positions, key_length) become plain arrays; objects and
// arrays of objects are walked (a scheme's table, rel_k, ...).
function wireValue(x) {
  if (isTyped(x)) return Array.from(x);
  if (Array.isArray(x)) return x.length && typeof x[0] === "number" ? x : x.map(wireValue);
  if (x === null || typeof x !== "object") return x;
  if (Array.isArray(x.shape) && isTyped(x.data)) {
    const { data, ...rest } = x;
    if (rest.dtype !== undefined && rest.dtype !== "f32") {
      throw new TypeError(`a typed-array tensor is sent as f32, not dtype '${rest.dtype}'`);
    }
    return { ...rest, b64: encodeFloat32(data) };
  }
  const out = {};
  for (const [key, val] of Object.entries(x)) if (val !== undefined) out[key] = wireValue(val);
  return out;
}

const wireScheme = (s) => (typeof s === "string" ? { type: s } : wireValue(s ?? { type: "none" }));

// An attention item: q, k, v may be bare typed arrays sized by shape /
// qShape / kShape / vShape; every other field is the wire's, as is.
function wireItem(item) {
  const { q, k, v, shape, qShape, kShape, vShape, scheme, ...rest } = item;
  const out = wireValue(rest);
  out.scheme = wireScheme(scheme);
  for (const [name, x, s] of [["q", q, qShape], ["k", k, kShape], ["v", v, vShape]]) {
    const t = wireTensor(x, s ?? shape, name);
    if (t !== undefined) out[name] = t;
  }
  return out;
}

// ------------------------------------------------------- answer reading

// Result tensors become typed arrays (FP32/FP16/BF16 -> Float32Array, INT32
// -> Int32Array), their shapes gathered in .shapes; other fields stay.
function readTensors(obj) {
  const out = { shapes: {} };
  for (const [key, val] of Object.entries(obj)) {
    if (val && typeof val === "object" && Array.isArray(val.shape) && typeof val.datatype === "string" &&
        (typeof val.b64 === "string" || Array.isArray(val.data))) {
      out.shapes[key] = val.shape;
      if (typeof val.b64 === "string") out[key] = decodeFloat32(val.b64, val.datatype);
      else if (val.datatype === "INT32") out[key] = Int32Array.from(val.data);
      else out[key] = Float32Array.from(val.data, (x) => (x === null ? -Infinity : x)); // null: masked logit
    } else {
      out[key] = val;
    }
  }
  return out;
}

function itemError(entry, index) {
  const e = entry.error;
  return new PosattnError(e.message || e.code, {
    code: e.code, field: e.field ?? null, status: STATUS_OF_CODE[e.code] ?? 400, item: index,
  });
}

function readItem(entry, index) {
  if (entry && entry.error) return itemError(entry, index);
  const r = readTensors(entry);
  r.shape = r.shapes.output;
  return r;
}

// ---------------------------------------------------------------- client

export class Client {
  /**
   * url: the server's base URL. apiKey: sent as "Authorization: Bearer";
   * default process.env.POSATTN_API_KEY in Node ("" or null sends none).
   * caFile: PEM CA bundle that signs the server's certificate (Node only;
   * default process.env.POSATTN_CACERT); it replaces the system CAs, as
   * curl --cacert does. timeoutMs: per request, connect to answer (30000).
   */
  constructor(url, { apiKey, caFile, timeoutMs = 30000 } = {}) {
    if (typeof url !== "string" || !/^https?:\/\//.test(url)) throw new TypeError(`url must be http(s)://..., got ${url}`);
    const env = IS_NODE ? globalThis.process.env : {};
    this.url = url.replace(/\/+$/, "");
    this.apiKey = apiKey === undefined ? env.POSATTN_API_KEY || "" : apiKey || "";
    this.caFile = caFile === undefined ? env.POSATTN_CACERT || "" : caFile || "";
    this.timeoutMs = timeoutMs;
    if (this.caFile && !IS_NODE) throw new TypeError("caFile needs Node: a browser trusts the system's CAs only");
    this._node = null; // {https, agent} once a caFile request was made
  }

  /**
   * One attention item: q [Lq, H, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] (or
   * batched [B, ...]) as Float32Array with options.shape (or qShape, kShape,
   * vShape), tensor(data, shape), ref("name") or wire objects. options: scheme
   * (a name or {type, ...}), outputDtype, and any item field of the API
   * (causal, window, key_length, return, scale, id, ...). Returns {output:
   * Float32Array, shape, shapes, timing, id, and any other returned tensor
   * (weights, logits, ...)}; throws PosattnError (item 0 for the item's own).
   */
  async attention(q, k, v, options = {}) {
    const { outputDtype, ...item } = options;
    const [r] = await this.attentionBatch([{ ...item, q, k, v }], { outputDtype });
    if (r instanceof PosattnError) throw r;
    return r;
  }

  /**
   * A batch: items as for attention() ({q, k, v, shape, scheme, ...}).
   * Returns one entry per item, in order: a result, or a PosattnError (not
   * thrown) with .item its index. Throws only for request-level errors.
   */
  async attentionBatch(items, { outputDtype } = {}) {
    const body = { inputs: items.map(wireItem), output_encoding: "b64" };
    if (outputDtype) body.output_dtype = outputDtype;
    const ans = await this._call("POST", "/v1/attention", body, { batch: true });
    if (!Array.isArray(ans.outputs) || ans.outputs.length !== items.length) {
      throw new PosattnError(`/v1/attention answered ${ans.outputs?.length} outputs for ${items.length} items`, {
        code: "BAD_RESPONSE", status: 200,
      });
    }
    return ans.outputs.map(readItem);
  }

  /** /v1/encode: scheme (name or object) and its fields (length, dim, ...). */
  async encode(scheme, fields = {}) {
    const body = { output_encoding: "b64", ...wireValue(fields), scheme: wireScheme(scheme) };
    return readTensors(await this._call("POST", "/v1/encode", body));
  }

  /** /v1/analyze: analysis name and its fields (scheme, q, k, ...). */
  async analyze(analysis, fields = {}) {
    const body = { ...wireItem(fields), analysis };
    if (ANALYSES_WITH_TENSORS.has(analysis) && fields.output_encoding === undefined) body.output_encoding = "b64";
    return readTensors(await this._call("POST", "/v1/analyze", body));
  }

  /** GET /v1/schemes: every scheme with its parameters and defaults. */
  schemes() {
    return this._call("GET", "/v1/schemes");
  }

  /** GET /v1/tensors: the named tensors loaded at start-up. */
  tensors() {
    return this._call("GET", "/v1/tensors");
  }

  /** GET /healthz: {status: "ok"}. */
  health() {
    return this._call("GET", "/healthz");
  }

  /** Closes the kept-alive HTTPS connections of a caFile client (Node). */
  close() {
    this._node?.then((n) => n.agent.destroy(), () => {});
    this._node = null;
  }

  // One request: the parsed JSON of a 2xx answer, else a thrown PosattnError.
  // A batch answer (outputs) comes back whatever its status, since a batch
  // whose every item failed carries the items' status.
  async _call(method, path, body, { batch = false } = {}) {
    const { status, text } = await this._send(method, path, body === undefined ? undefined : JSON.stringify(body));
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      throw new PosattnError(`HTTP ${status} from ${method} ${path} is not JSON: ${text.slice(0, 200)}`, {
        code: "BAD_RESPONSE", status,
      });
    }
    if (batch && json && Array.isArray(json.outputs)) return json;
    if (status >= 200 && status < 300) return json;
    const e = json?.error;
    if (e && typeof e.code === "string") {
      throw new PosattnError(e.message || e.code, { code: e.code, field: e.field ?? null, status });
    }
    throw new PosattnError(`HTTP ${status} from ${method} ${path}: ${text.slice(0, 200)}`, { code: "BAD_RESPONSE", status });
  }

  async _send(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    const url = this.url + path;
    if (this.caFile && url.startsWith("https:")) return this._sendNode(method, url, headers, body);
    try {
      const res = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(this.timeoutMs) });
      return { status: res.status, text: await res.text() };
    } catch (err) {
      throw this._transportError(method, url, err);
    }
  }

  _transportError(method, url, err) {
    if (err?.name === "TimeoutError" || err?.name === "AbortError") {
      return new PosattnError(`${method} ${url}: no answer within ${this.timeoutMs} ms`, { code: "CLIENT_TIMEOUT", cause: err });
    }
    // fetch says only "fetch failed"; the reason (ECONNREFUSED, a TLS
    // verification code) is in its cause.
    const why = err?.cause ?? err;
    const detail = [why?.code, why?.message].filter(Boolean).join(": ");
    return new PosattnError(`${method} ${url} failed: ${detail || String(err)}`, { code: "TRANSPORT", cause: why });
  }

  _nodeAgent() {
    this._node ??= (async () => {
      const [https, fs] = await Promise.all([import("node:https"), import("node:fs/promises")]);
      let ca;
      try {
        ca = await fs.readFile(this.caFile);
      } catch (err) {
        throw new PosattnError(`cannot read caFile ${this.caFile}: ${err.message}`, { code: "CONFIG", cause: err });
      }
      return { https, agent: new https.Agent({ ca, keepAlive: true }) };
    })();
    return this._node;
  }

  async _sendNode(method, url, headers, body) {
    const { https, agent } = await this._nodeAgent();
    return new Promise((resolve, reject) => {
      const req = https.request(url, { method, headers, agent }, (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          clearTimeout(timer);
          resolve({ status: res.statusCode, text: globalThis.Buffer.concat(chunks).toString("utf8") });
        });
        res.on("error", fail);
      });
      // One deadline for the whole exchange, like AbortSignal.timeout.
      const timer = setTimeout(() => {
        const e = new Error("timed out");
        e.name = "TimeoutError";
        req.destroy(e);
      }, this.timeoutMs);
      function fail(err) {
        clearTimeout(timer);
        reject(err);
      }
      req.on("error", fail);
      req.end(body);
    }).catch((err) => {
      throw this._transportError(method, url, err);
    });
  }
}
