// test_js_client.mjs - the JavaScript client (clients/js/posattn.js) against
// live posattnd servers, with node:test and nothing installed. Checks
// attention for several schemes against a tiny double-precision reference
// written here (softmax(q k^T / sqrt(D)) v with causal masks, GQA, ALiBi
// slopes, RoPE in both layouts), base64 round trips (odd sizes, the Buffer
// and the btoa paths), every error class (400 with its field, unknown
// scheme, missing v, unknown ref, 413 and 401 on the auth server, connection
// refused, client timeout, a non-JSON answer), a partial-failure batch and an
// all-failed one answered 400 (from a stand-in server, as the server now
// answers them), encode/analyze/schemes, that the module imports nothing at
// top level, and HTTPS with a private CA made by openssl at test time
// (caFile, POSATTN_CACERT and NODE_EXTRA_CA_CERTS work; no CA or another CA
// fails verification), where a tensor loaded with --tensor is used by ref().
// Also clients/js/README.md's install command as written, in a fresh npm
// project in a temporary folder with no registry to reach, and its example
// run there, importing "posattn".
//
//   tests/e2e/harness.sh node --test tests/clients/test_js_client.mjs   # make client-js
//
// harness.sh sets POSATTN_URL, POSATTN_AUTH_URL (--api-key POSATTN_AUTH_KEY,
// --max-body-mb 1); the HTTPS server is started here from $POSATTND
// (default build/posattnd). Tolerance: |got - want| <= 1e-5 + 1e-4 |want|.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import {
  mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync,
} from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import {
  Client, PosattnError, base64ToBytes, bytesToBase64, decodeFloat32, encodeFloat32, ref, tensor,
} from "../../clients/js/posattn.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const MODULE = join(HERE, "..", "..", "clients", "js", "posattn.js");
const URL_BASE = process.env.POSATTN_URL || "http://127.0.0.1:8080";
const AUTH_URL = process.env.POSATTN_AUTH_URL || "";
const AUTH_KEY = process.env.POSATTN_AUTH_KEY || "";
const POSATTND = resolve(process.env.POSATTND || "build/posattnd");
const ATOL = 1e-5;
const RTOL = 1e-4;
const needAuth = { skip: !AUTH_URL && "POSATTN_AUTH_URL not set (run under tests/e2e/harness.sh)" };

const client = new Client(URL_BASE, { apiKey: "" });

// ------------------------------------------------------------ reference

// A deterministic generator (mulberry32), values rounded to float32.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.fround((((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1);
  };
}
const randoms = (seed, n) => Float32Array.from({ length: n }, rng(seed));

// ALiBi slopes for H a power of two: 2^(-8 (h+1) / H).
const alibiSlopes = (H) => Array.from({ length: H }, (_, h) => 2 ** ((-8 * (h + 1)) / H));

// RoPE of one head vector x [D] at position p, base 10000: neox rotates the
// pairs (i, i + D/2), gptj the pairs (2i, 2i + 1); angle p * base^(-2i/D).
function rotate(x, p, layout = "neox", base = 10000) {
  const D = x.length;
  const out = Array.from(x);
  for (let i = 0; i < D / 2; i++) {
    const a = p * base ** ((-2 * i) / D);
    const [u, w] = layout === "neox" ? [i, i + D / 2] : [2 * i, 2 * i + 1];
    out[u] = x[u] * Math.cos(a) - x[w] * Math.sin(a);
    out[w] = x[u] * Math.sin(a) + x[w] * Math.cos(a);
  }
  return out;
}

// One sequence: q [Lq, H, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] -> output
// [Lq, H, Dv] and weights [H, Lq, Lk]; positions qpos = Lk - Lq + i, kpos = j.
function refAttention(q, k, v, { Lq, Lk, H, Hkv = H, D, Dv = D, causal = false, scheme = "none", layout = "neox" }) {
  const out = new Float64Array(Lq * H * Dv);
  const weights = new Float64Array(H * Lq * Lk);
  const slopes = scheme === "alibi" ? alibiSlopes(H) : null;
  const head = (t, row, heads, h, d) => {
    const x = Array.from(t.subarray((row * heads + h) * d, (row * heads + h + 1) * d));
    return x;
  };
  for (let h = 0; h < H; h++) {
    const kh = Math.floor(h / (H / Hkv));
    for (let i = 0; i < Lq; i++) {
      const qpos = Lk - Lq + i;
      let qi = head(q, i, H, h, D);
      if (scheme === "rope") qi = rotate(qi, qpos, layout);
      const logits = [];
      for (let j = 0; j < Lk; j++) {
        if (causal && j > qpos) {
          logits.push(-Infinity);
          continue;
        }
        let kj = head(k, j, Hkv, kh, D);
        if (scheme === "rope") kj = rotate(kj, j, layout);
        let s = 0;
        for (let d = 0; d < D; d++) s += qi[d] * kj[d];
        s /= Math.sqrt(D);
        if (slopes) s -= slopes[h] * (qpos - j);
        logits.push(s);
      }
      const m = Math.max(...logits);
      const e = logits.map((x) => Math.exp(x - m));
      const z = e.reduce((a, b) => a + b, 0);
      for (let j = 0; j < Lk; j++) {
        const w = e[j] / z;
        weights[(h * Lq + i) * Lk + j] = w;
        for (let dv = 0; dv < Dv; dv++) out[(i * H + h) * Dv + dv] += w * v[(j * Hkv + kh) * Dv + dv];
      }
    }
  }
  return { output: out, weights };
}

function assertClose(got, want, what) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    if (!(Math.abs(got[i] - want[i]) <= ATOL + RTOL * Math.abs(want[i]))) {
      assert.fail(`${what}[${i}] = ${got[i]}, reference ${want[i]}`);
    }
  }
}

const bits = (f) => Array.from(new Uint32Array(Float32Array.from(f).buffer));

// Runs fn and returns the PosattnError it must throw.
async function rejects(fn) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof PosattnError, `expected a PosattnError, got ${e?.stack ?? e}`);
    assert.ok(e.message.length > 0);
    return e;
  }
  assert.fail("expected a PosattnError, nothing was thrown");
}

// A small valid item and its inputs: q, k, v [2, 1, 2].
const Q = new Float32Array([1, 0, 0, 1]);
const K = new Float32Array([1, 0, 0, 1]);
const V = new Float32Array([1, 2, 3, 4]);
const SMALL = { shape: [2, 1, 2] };

// ------------------------------------------------------------ success

const CASES = [
  { name: "none", dims: { Lq: 5, Lk: 5, H: 2, D: 8 } },
  { name: "none causal GQA, Lq < Lk, Dv != D", dims: { Lq: 3, Lk: 6, H: 4, Hkv: 2, D: 4, Dv: 6, causal: true } },
  { name: "alibi causal", dims: { Lq: 6, Lk: 6, H: 4, D: 8, causal: true, scheme: "alibi" } },
  { name: "alibi bidirectional", dims: { Lq: 4, Lk: 4, H: 2, D: 4, scheme: "alibi" } },
  { name: "rope neox causal", dims: { Lq: 5, Lk: 5, H: 2, D: 8, causal: true, scheme: "rope" } },
  { name: "rope gptj", dims: { Lq: 4, Lk: 7, H: 1, D: 6, scheme: "rope", layout: "gptj" } },
];

for (const [n, c] of CASES.entries()) {
  test(`attention ${c.name} equals the reference`, async () => {
    const { Lq, Lk, H, Hkv = H, D, Dv = D, causal = false, scheme = "none", layout } = c.dims;
    const q = randoms(10 * n + 1, Lq * H * D);
    const k = randoms(10 * n + 2, Lk * Hkv * D);
    const v = randoms(10 * n + 3, Lk * Hkv * Dv);
    const want = refAttention(q, k, v, c.dims);
    const r = await client.attention(q, k, v, {
      scheme: layout ? { type: scheme, layout } : scheme, causal, id: c.name,
      qShape: [Lq, H, D], kShape: [Lk, Hkv, D], vShape: [Lk, Hkv, Dv], return: ["output", "weights"],
    });
    assert.ok(r.output instanceof Float32Array);
    assert.deepEqual(r.shape, [Lq, H, Dv]);
    assert.deepEqual(r.shapes.weights, [H, Lq, Lk]);
    assert.equal(r.id, c.name);
    assert.equal(typeof r.timing.compute_us, "number");
    assertClose(r.output, want.output, `${c.name} output`);
    assertClose(r.weights, want.weights, `${c.name} weights`);
  });
}

test("attention on a batch [B, L, H, D] with tensor(): each sequence as alone", async () => {
  const [B, L, H, D] = [2, 3, 2, 4];
  const q = randoms(71, B * L * H * D);
  const k = randoms(72, B * L * H * D);
  const v = randoms(73, B * L * H * D);
  const shape = [B, L, H, D];
  const r = await client.attention(tensor(q, shape), tensor(k, shape), tensor(v, shape), {
    scheme: "rope", causal: true,
  });
  assert.deepEqual(r.shape, shape);
  const n = L * H * D;
  for (let b = 0; b < B; b++) {
    const part = (t) => t.subarray(b * n, (b + 1) * n);
    const want = refAttention(part(q), part(k), part(v), { Lq: L, Lk: L, H, D, causal: true, scheme: "rope" });
    assertClose(r.output.subarray(b * n, (b + 1) * n), want.output, `sequence ${b}`);
  }
});

test("outputDtype bf16 and f16 decode to Float32Array near the f32 answer", async () => {
  const [L, H, D] = [4, 2, 8];
  const args = [randoms(81, L * H * D), randoms(82, L * H * D), randoms(83, L * H * D)];
  const f32 = await client.attention(...args, { shape: [L, H, D], scheme: "alibi" });
  for (const [dtype, datatype, rel] of [["bf16", "BF16", 2 ** -8], ["f16", "FP16", 2 ** -11]]) {
    const r = await client.attention(...args, { shape: [L, H, D], scheme: "alibi", outputDtype: dtype });
    assert.ok(r.output instanceof Float32Array);
    assert.equal(r.output.length, f32.output.length);
    r.output.forEach((x, i) => {
      const w = f32.output[i];
      assert.ok(Math.abs(x - w) <= rel * Math.abs(w) + 1e-7, `${datatype}[${i}] = ${x}, f32 ${w}`);
    });
    assert.ok(r.output.some((x, i) => x !== f32.output[i]), `${datatype}: rounded, so not all equal`);
  }
});

test("plain number arrays and wire tensors work as inputs", async () => {
  const r = await client.attention([1, 0, 0, 0], { shape: [2, 1, 2], data: [1, 0, 0, 1] },
    { shape: [2, 1, 2], b64: encodeFloat32([1, 2, 3, 4]) }, { shape: [2, 1, 2], scheme: { type: "rope", base: 10000 }, causal: true });
  // README's example: token 0 sees key 0 only; token 1's query is zero -> mean of v.
  assertClose(r.output, [1, 2, 2, 3], "output");
});

// ------------------------------------------------------------ base64

test("b64 round trips: odd sizes, special values, Buffer and btoa paths agree", () => {
  const special = [0, -0, 1, -1, 1e-45, -1e-45, 1.17549435e-38, 3.4028234e38, -3.4028234e38, 0.1, 65504, 1 / 3];
  assert.equal(encodeFloat32([1, 2]), "AACAPwAAAEA=");
  for (const n of [0, 1, 2, 3, 5, 7, 13, 1001]) {
    const r = rng(n + 100);
    const x = Float32Array.from({ length: n }, (_, i) => (i < special.length ? special[i] : r() * 10 ** ((i % 9) - 4)));
    const text = encodeFloat32(x);
    assert.equal(text.length, 4 * Math.ceil((4 * n) / 3), `n=${n}: length`);
    const back = decodeFloat32(text);
    assert.ok(back instanceof Float32Array);
    assert.deepEqual(bits(back), bits(x), `n=${n}: Buffer path`);
    assert.ok(!back.some(Number.isNaN));
    // The browser path (btoa/atob): the module looks for Buffer at each call.
    const saved = globalThis.Buffer;
    let textB, backB;
    try {
      globalThis.Buffer = undefined;
      textB = encodeFloat32(x);
      backB = decodeFloat32(text);
    } finally {
      globalThis.Buffer = saved;
    }
    assert.equal(textB, text, `n=${n}: btoa gives Buffer's text`);
    assert.deepEqual(bits(backB), bits(x), `n=${n}: atob path`);
  }
  for (let n = 0; n <= 10; n++) { // bytes of every length mod 3
    const b = Uint8Array.from({ length: n }, (_, i) => (i * 37 + 250) & 255);
    assert.deepEqual(Array.from(base64ToBytes(bytesToBase64(b))), Array.from(b), `${n} bytes`);
  }
  // A view at an odd offset is encoded from its own bytes only.
  const big = new Uint8Array([9, 0, 0, 128, 63, 9]);
  assert.equal(bytesToBase64(big.subarray(1, 5)), encodeFloat32([1]));
});

test("b64 through the server: one key gives v back bit for bit (odd sizes)", async () => {
  for (const [H, D] of [[1, 7], [3, 5], [1, 1]]) {
    const v = randoms(H * 10 + D, H * D).map((x, i) => x * 10 ** ((i % 7) - 3));
    const r = await client.attention(randoms(1, H * D), randoms(2, H * D), v, { shape: [1, H, D] });
    assert.deepEqual(r.shape, [1, H, D]);
    assert.deepEqual(bits(r.output), bits(v), `[1, ${H}, ${D}]`);
  }
});

// ------------------------------------------------------------ errors

test("400: a bad shape names the field, thrown with item 0", async () => {
  const e = await rejects(() => client.attention(Q, new Float32Array(6), V, {
    qShape: [2, 1, 2], kShape: [2, 1, 3], vShape: [2, 1, 2],
  }));
  assert.equal(e.code, "SHAPE_MISMATCH");
  assert.equal(e.field, "inputs[0].k.shape");
  assert.equal(e.status, 400);
  assert.equal(e.item, 0);
  assert.match(e.message, /k\.shape\[2\]=3/);
  // Data that does not fill the shape: the b64 field is named.
  const e2 = await rejects(() => client.attention(Q.subarray(0, 3), K, V, SMALL));
  assert.equal(e2.code, "SHAPE_MISMATCH");
  assert.equal(e2.field, "inputs[0].q.b64");
});

test("400: an unknown scheme", async () => {
  const e = await rejects(() => client.attention(Q, K, V, { ...SMALL, scheme: "nope" }));
  assert.equal(e.code, "INVALID_ARGUMENT");
  assert.equal(e.field, "inputs[0].scheme.type");
  assert.equal(e.status, 400);
  assert.match(e.message, /'nope' is not a scheme/);
});

test("400: v missing", async () => {
  const e = await rejects(() => client.attention(Q, K, undefined, SMALL));
  assert.equal(e.code, "INVALID_ARGUMENT");
  assert.equal(e.field, "inputs[0].v");
  assert.equal(e.status, 400);
});

test("400: an unknown field of the item is rejected, not ignored", async () => {
  const e = await rejects(() => client.attention(Q, K, V, { ...SMALL, casual: true }));
  assert.equal(e.code, "UNKNOWN_FIELD");
  assert.match(e.field, /^inputs\[0\]\.casual/);
});

test("400: an unknown ref names the field", async () => {
  const e = await rejects(() => client.attention(Q, K, ref("no_such_tensor"), SMALL));
  assert.equal(e.code, "UNKNOWN_TENSOR");
  assert.equal(e.field, "inputs[0].v.ref");
  assert.equal(e.status, 400);
  assert.match(e.message, /no_such_tensor/);
  assert.throws(() => ref(""), TypeError);
});

test("400 for the whole request: an empty batch, item null", async () => {
  const e = await rejects(() => client.attentionBatch([]));
  assert.equal(e.code, "INVALID_ARGUMENT");
  assert.equal(e.field, "inputs");
  assert.equal(e.status, 400);
  assert.equal(e.item, null);
});

test("a typed array without a shape is the caller's TypeError", async () => {
  await assert.rejects(() => client.attention(Q, K, V), TypeError);
});

test("partial failure: good items answer, bad ones are PosattnErrors with their index", async () => {
  const [L, H, D] = [3, 2, 4];
  const q = randoms(91, L * H * D), k = randoms(92, L * H * D), v = randoms(93, L * H * D);
  const shape = [L, H, D];
  const out = await client.attentionBatch([
    { q, k, v, shape, scheme: "none", id: "a" },
    { q, k, shape, scheme: "none" },
    { q, k, v, shape, scheme: "alibi", causal: true, id: "c" },
    { q, k, v: ref("missing"), shape, scheme: "none" },
  ]);
  assert.equal(out.length, 4);
  assert.equal(out[0].id, "a");
  assertClose(out[0].output, refAttention(q, k, v, { Lq: L, Lk: L, H, D }).output, "item 0");
  assertClose(out[2].output, refAttention(q, k, v, { Lq: L, Lk: L, H, D, causal: true, scheme: "alibi" }).output, "item 2");
  for (const [i, code, field] of [[1, "INVALID_ARGUMENT", "inputs[1].v"], [3, "UNKNOWN_TENSOR", "inputs[3].v.ref"]]) {
    assert.ok(out[i] instanceof PosattnError, `item ${i}`);
    assert.equal(out[i].item, i);
    assert.equal(out[i].code, code);
    assert.equal(out[i].field, field);
    assert.equal(out[i].status, 400);
  }
});

test("every item failing: still one PosattnError per item, not thrown (HTTP 200 or 400)", async () => {
  const out = await client.attentionBatch([
    { q: Q, k: K, v: V, shape: [2, 1, 2], scheme: "nope" },
    { q: Q, k: K, shape: [2, 1, 2] },
  ]);
  assert.deepEqual(out.map((e) => [e instanceof PosattnError, e.item, e.code, e.field]), [
    [true, 0, "INVALID_ARGUMENT", "inputs[0].scheme.type"],
    [true, 1, "INVALID_ARGUMENT", "inputs[1].v"],
  ]);
  // attention() of one bad item throws it, whichever status the server chose.
  const e = await rejects(() => client.attention(Q, K, V, { ...SMALL, scheme: "nope" }));
  assert.equal(e.item, 0);
});

test("413: a body over --max-body-mb on the auth server", needAuth, async () => {
  const c = new Client(AUTH_URL, { apiKey: AUTH_KEY });
  const big = new Float32Array(256 * 4 * 128); // 3 x 0.7 MB of base64 > 1 MB
  const e = await rejects(() => c.attention(big, big, big, { shape: [256, 4, 128] }));
  assert.equal(e.code, "PAYLOAD_TOO_LARGE");
  assert.equal(e.status, 413);
  assert.equal(e.item, null);
  // The same client still works for a small request.
  const r = await c.attention(Q, K, V, SMALL);
  assert.deepEqual(r.shape, [2, 1, 2]);
});

test("401: no key, a wrong key; the key from POSATTN_API_KEY works", needAuth, async () => {
  for (const apiKey of ["", "wrong-key"]) {
    const c = new Client(AUTH_URL, { apiKey });
    const e = await rejects(() => c.attention(Q, K, V, SMALL));
    assert.equal(e.code, "UNAUTHORIZED", `apiKey '${apiKey}'`);
    assert.equal(e.status, 401);
    assert.equal(e.item, null);
    assert.equal((await rejects(() => c.schemes())).status, 401);
    assert.deepEqual(await c.health(), { status: "ok" }); // /healthz is open
  }
  const saved = process.env.POSATTN_API_KEY;
  process.env.POSATTN_API_KEY = AUTH_KEY;
  try {
    const c = new Client(AUTH_URL);
    assert.ok((await c.schemes()).schemes.length > 0);
    assert.deepEqual((await c.attention(Q, K, V, SMALL)).shape, [2, 1, 2]);
  } finally {
    if (saved === undefined) delete process.env.POSATTN_API_KEY;
    else process.env.POSATTN_API_KEY = saved;
  }
});

// A port that nothing listens on: bind one, then close it.
async function freePort() {
  const s = net.createServer();
  await new Promise((ok) => s.listen(0, "127.0.0.1", ok));
  const { port } = s.address();
  await new Promise((ok) => s.close(ok));
  return port;
}

// A TCP server that accepts and never says anything.
async function silentServer() {
  const socks = [];
  const s = net.createServer((c) => socks.push(c));
  await new Promise((ok) => s.listen(0, "127.0.0.1", ok));
  return { port: s.address().port, close: () => { socks.forEach((c) => c.destroy()); s.close(); } };
}

test("connection refused is a TRANSPORT error naming the reason", async () => {
  const port = await freePort();
  const e = await rejects(() => new Client(`http://127.0.0.1:${port}`).health());
  assert.equal(e.code, "TRANSPORT");
  assert.equal(e.status, 0);
  assert.equal(e.cause?.code, "ECONNREFUSED");
  assert.match(e.message, new RegExp(`ECONNREFUSED.*127\\.0\\.0\\.1:${port}`));
});

test("a server that never answers is CLIENT_TIMEOUT after timeoutMs", async () => {
  const s = await silentServer();
  try {
    const t0 = Date.now();
    const e = await rejects(() => new Client(`http://127.0.0.1:${s.port}`, { timeoutMs: 300 }).health());
    assert.equal(e.code, "CLIENT_TIMEOUT");
    assert.equal(e.status, 0);
    assert.ok(Date.now() - t0 < 5000);
  } finally {
    s.close();
  }
});

// A local HTTP server answering every request with status and text, as a
// proxy or a server of another version might.
async function fakeServer(status, text, type = "application/json") {
  const s = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(status, { "Content-Type": type }).end(text));
  });
  await new Promise((ok) => s.listen(0, "127.0.0.1", ok));
  return { url: `http://127.0.0.1:${s.address().port}`, close: () => s.close() };
}

test("a batch whose every item failed answered 400 (the batch body) is still read per item", async () => {
  const body = JSON.stringify({
    outputs: [{ id: null, error: { code: "SHAPE_MISMATCH", message: "k.shape[2]=3 does not equal q.shape[2]=2 (head_dim)", field: "inputs[0].k.shape" } }],
    errors: true,
  });
  const s = await fakeServer(400, body);
  try {
    const c = new Client(s.url);
    const [e] = await c.attentionBatch([{ q: Q, k: K, v: V, shape: [2, 1, 2] }]);
    assert.ok(e instanceof PosattnError);
    assert.deepEqual([e.code, e.field, e.status, e.item], ["SHAPE_MISMATCH", "inputs[0].k.shape", 400, 0]);
    const e2 = await rejects(() => c.attention(Q, K, V, SMALL));
    assert.deepEqual([e2.code, e2.item], ["SHAPE_MISMATCH", 0]);
  } finally {
    s.close();
  }
});

test("an answer that is not posattnd's JSON is BAD_RESPONSE with its status", async () => {
  const s = await fakeServer(502, "<html>Bad Gateway</html>", "text/html");
  try {
    const e = await rejects(() => new Client(s.url).health());
    assert.deepEqual([e.code, e.status, e.item], ["BAD_RESPONSE", 502, null]);
    assert.match(e.message, /502.*Bad Gateway/);
  } finally {
    s.close();
  }
});

// ------------------------------------------------------------ other routes

test("encode: alibi slopes and bias, t5 buckets as Int32Array, sinusoidal", async () => {
  const a = await client.encode("alibi", { num_heads: 4, q_length: 3 });
  assert.deepEqual(Array.from(a.slopes), alibiSlopes(4)); // powers of two: exact
  assert.deepEqual(a.shapes.bias, [4, 3, 3]);
  const want = [];
  for (let h = 0; h < 4; h++) for (let i = 0; i < 3; i++) for (let j = 0; j < 3; j++) want.push(-alibiSlopes(4)[h] * (i - j));
  assertClose(a.bias, want, "alibi bias");
  const t = await client.encode({ type: "t5" }, { q_length: 2, k_length: 2 });
  assert.ok(t.buckets instanceof Int32Array);
  assert.deepEqual(Array.from(t.buckets), [0, 17, 1, 0]);
  const s = await client.encode("sinusoidal", { length: 4, dim: 8 });
  assert.deepEqual(s.shapes.encoding, [4, 8]);
  const pe = [];
  for (let p = 0; p < 4; p++) {
    for (let i = 0; i < 4; i++) pe.push(Math.sin(p / 10000 ** ((2 * i) / 8)), Math.cos(p / 10000 ** ((2 * i) / 8)));
  }
  assertClose(s.encoding, pe, "sinusoidal");
});

test("analyze: rope_offset scores equal the reference; permutation", async () => {
  const q = [0.5, -1, 0.25, 2], k = [1, 0.5, -0.75, 0.125];
  const offsets = [0, 1, 2, 3];
  const r = await client.analyze("rope_offset", { scheme: { type: "rope" }, q, k, offsets });
  assert.ok(r.score instanceof Float32Array);
  const want = offsets.map((o) => rotate(q, o).reduce((s, x, d) => s + x * rotate(k, 0)[d], 0));
  assertClose(r.score, want, "score");
  assert.ok(r.spread.every((x) => Math.abs(x) < 1e-4), `spread ${r.spread}`);
  const [L, H, D] = [5, 2, 4];
  const item = { q: randoms(5, L * H * D), k: randoms(6, L * H * D), v: randoms(7, L * H * D), shape: [L, H, D] };
  assert.ok((await client.analyze("permutation", { ...item, scheme: "none" })).max_abs_diff < 1e-5);
  assert.ok((await client.analyze("permutation", { ...item, scheme: "rope" })).max_abs_diff > 1e-3);
});

test("schemes, tensors and health", async () => {
  const names = (await client.schemes()).schemes.map((s) => s.name);
  for (const n of ["none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"]) assert.ok(names.includes(n), n);
  assert.deepEqual(await client.tensors(), { tensors: [] });
  assert.deepEqual(await client.health(), { status: "ok" });
});

// ------------------------------------------------------------ the module itself

test("the module imports nothing at top level: node:https and node:fs only dynamically", () => {
  const code = readFileSync(MODULE, "utf8").replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
  assert.doesNotMatch(code, /^\s*import\s[^(]/m, "a static import");
  assert.doesNotMatch(code, /\brequire\s*\(/, "require()");
  const nodeRefs = code.match(/.{0,8}["']node:[a-z/]+["']/g) ?? [];
  assert.ok(nodeRefs.length >= 2, "the dynamic imports are where this test looks");
  for (const s of nodeRefs) assert.match(s, /import\(["']node:/, s);
  // process and Buffer are reached only through globalThis (absent in browsers).
  assert.doesNotMatch(code, /(?<!globalThis\.|\.)\b(process|Buffer)\b/);
});

test("posattn.d.ts declares every export and Client method; package.json points at both", () => {
  const dir = dirname(MODULE);
  const src = readFileSync(MODULE, "utf8");
  const dts = readFileSync(join(dir, "posattn.d.ts"), "utf8");
  const exported = [...src.matchAll(/^export (?:class|function|const) (\w+)/gm)].map((m) => m[1]);
  assert.ok(exported.length >= 8);
  for (const n of exported) assert.match(dts, new RegExp(`^export (class|function|const) ${n}\\b`, "m"), n);
  const body = src.slice(src.indexOf("export class Client"));
  const methods = [...body.matchAll(/^ {2}(?:async )?([a-z]\w*)\(/gm)].map((m) => m[1]).filter((n) => n !== "constructor");
  for (const m of methods) assert.match(dts, new RegExp(`^ {2}${m}\\(`, "m"), `Client.${m}`);
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  assert.equal(pkg.name, "posattn");
  assert.equal(pkg.type, "module");
  assert.deepEqual(pkg.exports["."], { types: "./posattn.d.ts", default: "./posattn.js" });
  assert.equal(pkg.dependencies, undefined);
});

// ------------------------------------------------------------ the README's install

test("README's install, as written, in a fresh npm project offline; its example imports \"posattn\"", () => {
  const readme = readFileSync(join(dirname(MODULE), "README.md"), "utf8");
  const block = readme.match(/<!-- install test: npm -->\s*```sh\n([\s\S]*?)```/)?.[1];
  assert.ok(block, "clients/js/README.md has no <!-- install test: npm --> block");
  assert.match(block, /npm install \.\.\/posattn\/clients\/js\b/, "the layout made here");
  const example = readme.match(/## Example\s*```js\n([\s\S]*?)```/)?.[1];
  assert.match(example ?? "", /from "posattn"/);
  const d = mkdtempSync(join(tmpdir(), "posattn-npm-"));
  try {
    // d/posattn is the clone, d/my-project the user's new project (npm init -y).
    symlinkSync(resolve(HERE, "..", ".."), join(d, "posattn"));
    const project = join(d, "my-project");
    mkdirSync(project);
    // No registry: one it would ask refuses the connection, and no retries.
    const env = {
      PATH: process.env.PATH, HOME: d, npm_config_registry: "http://127.0.0.1:9/",
      npm_config_fetch_retries: "0", npm_config_update_notifier: "false",
    };
    const run = (cmd, args) => execFileSync(cmd, args, { cwd: project, env, encoding: "utf8", stdio: "pipe" });
    run("npm", ["init", "-y"]);
    run("bash", ["-euc", block]);
    const pkg = JSON.parse(readFileSync(join(project, "package.json"), "utf8"));
    assert.match(pkg.dependencies?.posattn ?? "", /^file:.*clients\/js$/);
    // README's example, as written but for the server's URL, then what it made.
    writeFileSync(join(project, "example.mjs"), example.replace("http://127.0.0.1:8080", URL_BASE) +
      'console.log(JSON.stringify({ resolved: import.meta.resolve("posattn"), shape: r.shape, ' +
      "n: r.output.length, weights: w.shapes.weights, finite: r.output.every(Number.isFinite) }));\n");
    const got = JSON.parse(run(process.execPath, ["example.mjs"]));
    assert.equal(fileURLToPath(got.resolved), realpathSync(MODULE));
    assert.deepEqual(got, { resolved: got.resolved, shape: [4, 2, 8], n: 64, weights: [2, 4, 4], finite: true });
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

// ------------------------------------------------------------ HTTPS

const openssl = (...args) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });

// ca.crt, srv.crt/srv.key for 127.0.0.1 (as tests/e2e/tls.py makes them), and
// other-ca.crt, a CA that did not sign it.
function makePki(d) {
  const p = (n) => join(d, n);
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  for (const ca of ["ca", "other-ca"]) {
    openssl("req", "-x509", ...ec, "-keyout", p(`${ca}.key`), "-out", p(`${ca}.crt`), "-days", "2", "-subj", `/CN=posattn ${ca}`);
  }
  openssl("req", ...ec, "-keyout", p("srv.key"), "-out", p("srv.csr"), "-subj", "/CN=127.0.0.1");
  writeFileSync(p("ext.cnf"), "subjectAltName=IP:127.0.0.1\n");
  openssl("x509", "-req", "-in", p("srv.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"), "-CAcreateserial",
    "-out", p("srv.crt"), "-days", "1", "-extfile", p("ext.cnf"));
}

// A float32 .npy (version 1.0) of values with shape: magic, header length,
// a dict padded with spaces to a 64-byte boundary, then the data.
function writeNpy(path, values, shape) {
  let dict = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(", ")}${shape.length === 1 ? "," : ""}), }`;
  dict += " ".repeat(64 - ((10 + dict.length + 1) % 64)) + "\n";
  const head = Buffer.alloc(10);
  head.write("\x93NUMPY", 0, "latin1");
  head[6] = 1;
  head.writeUInt16LE(dict.length, 8);
  writeFileSync(path, Buffer.concat([head, Buffer.from(dict, "latin1"), Buffer.from(Float32Array.from(values).buffer)]));
}

describe("https with a private CA", () => {
  const [L, H, D] = [4, 2, 8];
  const kv = randoms(200, L * H * D);
  let dir, srv, url, exited;
  let stderr = "";

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "posattn-js-tls."));
    makePki(dir);
    writeNpy(join(dir, "kv.npy"), kv, [L, H, D]);
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("POSATTN_")));
    srv = spawn(POSATTND, ["--host", "127.0.0.1", "--port", "0", "--workers", "1", "--log-format", "off",
      "--tls-cert", join(dir, "srv.crt"), "--tls-key", join(dir, "srv.key"), "--tensor", `kv=${join(dir, "kv.npy")}`],
    { env, stdio: ["ignore", "pipe", "pipe"] });
    srv.stderr.on("data", (c) => { stderr += c; });
    exited = new Promise((ok) => srv.on("exit", (code, signal) => ok({ code, signal })));
    const line = await new Promise((ok, fail) => {
      const rl = createInterface({ input: srv.stdout });
      const timer = setTimeout(() => fail(new Error("posattnd printed no listening line within 10 s")), 10000);
      rl.once("line", (l) => { clearTimeout(timer); ok(l); });
      srv.once("exit", (code) => fail(new Error(`posattnd exited with ${code} before listening: ${stderr}`)));
    });
    const m = line.match(/listening on (https:\/\/127\.0\.0\.1:\d+)/);
    assert.ok(m, `listening line: ${line}`);
    url = m[1];
  });

  after(async () => {
    try {
      if (srv && srv.exitCode === null && srv.signalCode === null) {
        srv.kill("SIGTERM");
        const timer = setTimeout(() => srv.kill("SIGKILL"), 15000);
        const { code } = await exited;
        clearTimeout(timer);
        assert.equal(code, 0, `posattnd over TLS exits 0 on SIGTERM; its stderr:\n${stderr}`);
      }
    } finally {
      if (dir) rmSync(dir, { recursive: true, force: true });
    }
  });

  test("caFile: attention equals the reference; a ref() is the inline tensor bit for bit", async () => {
    const c = new Client(url, { caFile: join(dir, "ca.crt") });
    try {
      assert.deepEqual(await c.health(), { status: "ok" });
      const q = randoms(201, L * H * D);
      const r = await c.attention(q, kv, kv, { shape: [L, H, D], scheme: "rope", causal: true });
      assertClose(r.output, refAttention(q, kv, kv, { Lq: L, Lk: L, H, D, causal: true, scheme: "rope" }).output, "over https");
      const byRef = await c.attention(q, ref("kv"), ref("kv"), { shape: [L, H, D], scheme: "rope", causal: true });
      assert.deepEqual(bits(byRef.output), bits(r.output));
      assert.deepEqual((await c.tensors()).tensors.map((t) => [t.name, t.shape]), [["kv", [L, H, D]]]);
      // Errors come through the node:https path the same way.
      const e = await rejects(() => c.attention(q, kv, ref("nope"), { shape: [L, H, D] }));
      assert.deepEqual([e.code, e.field, e.status, e.item], ["UNKNOWN_TENSOR", "inputs[0].v.ref", 400, 0]);
      const e2 = await rejects(() => c.attentionBatch([]));
      assert.deepEqual([e2.code, e2.status, e2.item], ["INVALID_ARGUMENT", 400, null]);
    } finally {
      c.close();
    }
  });

  test("POSATTN_CACERT is the default caFile", async () => {
    const saved = process.env.POSATTN_CACERT;
    process.env.POSATTN_CACERT = join(dir, "ca.crt");
    let c;
    try {
      c = new Client(url);
    } finally {
      if (saved === undefined) delete process.env.POSATTN_CACERT;
      else process.env.POSATTN_CACERT = saved;
    }
    assert.deepEqual(await c.health(), { status: "ok" });
    c.close();
  });

  test("NODE_EXTRA_CA_CERTS works too, with plain fetch (as clients/js/README.md says)", () => {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("POSATTN_")));
    const script = `import { Client } from ${JSON.stringify(pathToFileURL(MODULE).href)};
      const c = new Client(${JSON.stringify(url)});
      if (c.caFile !== "") throw new Error("caFile set");
      console.log(JSON.stringify(await c.health()));`;
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", script],
      { env: { ...env, NODE_EXTRA_CA_CERTS: join(dir, "ca.crt") }, encoding: "utf8", timeout: 20000 });
    assert.deepEqual(JSON.parse(out), { status: "ok" });
  });

  test("without the CA, or with another CA, verification fails: TRANSPORT", async () => {
    for (const opts of [{ caFile: "" }, { caFile: join(dir, "other-ca.crt") }]) {
      const e = await rejects(() => new Client(url, opts).health());
      assert.equal(e.code, "TRANSPORT", JSON.stringify(opts));
      assert.equal(e.status, 0);
      assert.match(e.message, /certificate|verify|self.signed|issuer/i, e.message);
      assert.match(String(e.cause?.code), /CERT|VERIFY|ISSUER/, String(e.cause?.code));
    }
  });

  test("an unreadable caFile is CONFIG; a silent TLS port is CLIENT_TIMEOUT", async () => {
    const e = await rejects(() => new Client(url, { caFile: join(dir, "missing.crt") }).health());
    assert.equal(e.code, "CONFIG");
    assert.match(e.message, /missing\.crt/);
    const s = await silentServer();
    try {
      const c = new Client(`https://127.0.0.1:${s.port}`, { caFile: join(dir, "ca.crt"), timeoutMs: 300 });
      assert.equal((await rejects(() => c.health())).code, "CLIENT_TIMEOUT");
      c.close();
    } finally {
      s.close();
    }
  });
});
