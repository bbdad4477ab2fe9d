// client.mjs - posattnd end-to-end tests from Node 20: built-in fetch and
// node:test, nothing installed. Checks numbers against a tiny reference
// attention written here (softmax(q k^T / sqrt(D)) v, ALiBi bias
// -m_h (qpos - kpos) with slopes 2^(-8 (h+1) / H)), b64 through
// Buffer/Float32Array, the error codes, and runs the JS example of
// README.md exactly as written there.
//
//   POSATTN_URL=http://127.0.0.1:8080 node --test tests/e2e/client.mjs
//   tests/e2e/harness.sh node --test tests/e2e/client.mjs    # starts the servers
//
// POSATTN_AUTH_URL / POSATTN_AUTH_KEY (set by harness.sh) enable 401 and 413.
// Tolerance: |got - want| <= 1e-5 + 1e-4 |want|.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { format } from "node:util";

const URL_BASE = (process.env.POSATTN_URL || "http://127.0.0.1:8080").replace(/\/$/, "");
const AUTH_URL = (process.env.POSATTN_AUTH_URL || "").replace(/\/$/, "");
const API_KEY = process.env.POSATTN_AUTH_KEY || "";
const HERE = dirname(fileURLToPath(import.meta.url));
// The pages whose marked examples are run (E2E_EXAMPLES: a list with ":").
const EXAMPLES = process.env.E2E_EXAMPLES ||
  [join(HERE, "..", "..", "README.md"),
   ...readdirSync(join(HERE, "..", "..", "docs")).filter((f) => f.endsWith(".md")).sort()
     .map((f) => join(HERE, "..", "..", "docs", f))].join(":");
const README_URL = "http://127.0.0.1:8080";
const ATOL = 1e-5;
const RTOL = 1e-4;
const TIMEOUT_MS = 30000;

async function request(method, path, { body, raw, headers = {}, base = URL_BASE } = {}) {
  const init = { method, headers: { ...headers }, signal: AbortSignal.timeout(TIMEOUT_MS) };
  if (body !== undefined || raw !== undefined) {
    init.body = raw !== undefined ? raw : JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const res = await fetch(base + path, init);
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON (metrics, openapi.yaml)
  }
  return { status: res.status, headers: res.headers, text, json };
}

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

const toB64 = (values) => Buffer.from(new Float32Array(values).buffer).toString("base64");
const fromB64 = (text) => Array.from(new Float32Array(Uint8Array.from(Buffer.from(text, "base64")).buffer));

function nest(flat, shape) {
  if (shape.length === 1) return flat.slice();
  const step = flat.length / shape[0];
  return Array.from({ length: shape[0] }, (_, i) => nest(flat.slice(i * step, (i + 1) * step), shape.slice(1)));
}

function alibiSlopes(H, maxBias = 8) {
  const n = 2 ** Math.floor(Math.log2(H));
  return Array.from({ length: H }, (_, h) =>
    h < n ? 2 ** ((-maxBias * (h + 1)) / n) : 2 ** ((-maxBias * (2 * (h - n) + 1)) / (2 * n)));
}

// out [Lq, H, Dv]; positions qpos = Lk-Lq+i, kpos = j.
function refAttention(q, k, v, { Lq, Lk, H, Hkv, D, Dv, causal = false, slopes = null }) {
  const out = new Array(Lq * H * Dv).fill(0);
  const scale = 1 / Math.sqrt(D);
  const group = H / Hkv;
  for (let h = 0; h < H; h++) {
    const kh = Math.floor(h / group);
    for (let i = 0; i < Lq; i++) {
      const qpos = Lk - Lq + i;
      const logits = [];
      for (let j = 0; j < Lk; j++) {
        if (causal && j > qpos) {
          logits.push(-Infinity);
          continue;
        }
        let s = 0;
        for (let d = 0; d < D; d++) s += q[(i * H + h) * D + d] * k[(j * Hkv + kh) * D + d];
        s *= scale;
        if (slopes) s -= slopes[h] * (qpos - j);
        logits.push(s);
      }
      const m = Math.max(...logits);
      if (m === -Infinity) continue;
      const w = logits.map((x) => Math.exp(x - m));
      const z = w.reduce((a, b) => a + b, 0);
      for (let dv = 0; dv < Dv; dv++) {
        let acc = 0;
        for (let j = 0; j < Lk; j++) acc += (w[j] / z) * v[(j * Hkv + kh) * Dv + dv];
        out[(i * H + h) * Dv + dv] = acc;
      }
    }
  }
  return out;
}

function tensorValues(t) {
  if (t.b64 !== undefined) return fromB64(t.b64);
  return t.data.flat(Infinity).map((x) => (x === null ? -Infinity : x));
}

function assertClose(got, want, what) {
  assert.equal(got.length, want.length, `${what}: length`);
  got.forEach((g, i) => {
    const w = want[i];
    if (!(Math.abs(g - w) <= ATOL + RTOL * Math.abs(w))) {
      assert.fail(`${what}[${i}] = ${g}, reference ${w}`);
    }
  });
}

function assertError(r, status, code, field) {
  assert.equal(r.status, status, r.text);
  assert.equal(r.json.error.code, code, r.text);
  assert.ok(r.json.error.message, r.text);
  if (field) assert.ok((r.json.error.field || "").includes(field), r.text);
}

class Case {
  constructor(seed, { Lq, Lk, H, Hkv, D, Dv = D, scheme = "none", causal = false }) {
    const r = rng(seed);
    this.dims = { Lq, Lk, H, Hkv, D, Dv, causal };
    this.scheme = scheme;
    this.q = Array.from({ length: Lq * H * D }, r);
    this.k = Array.from({ length: Lk * Hkv * D }, r);
    this.v = Array.from({ length: Lk * Hkv * Dv }, r);
    this.want = H % Hkv === 0 // null: an invalid case
      ? refAttention(this.q, this.k, this.v, { ...this.dims, slopes: scheme === "alibi" ? alibiSlopes(H) : null })
      : null;
  }

  item(id, enc = "json") {
    const { Lq, Lk, H, Hkv, D, Dv, causal } = this.dims;
    const tensor = (values, shape) =>
      enc === "b64" ? { shape, b64: toB64(values) }
        : enc === "nested" ? { shape, data: nest(values, shape) }
          : { shape, data: values };
    return {
      id, scheme: { type: this.scheme }, causal,
      q: tensor(this.q, [Lq, H, D]), k: tensor(this.k, [Lk, Hkv, D]), v: tensor(this.v, [Lk, Hkv, Dv]),
    };
  }
}

function checkOutput(out, c, id) {
  const { Lq, H, Dv } = c.dims;
  assert.equal(out.error, undefined, JSON.stringify(out.error));
  assert.equal(out.id, id);
  assert.deepEqual(out.output.shape, [Lq, H, Dv]);
  assert.equal(typeof out.timing.queue_us, "number");
  assert.equal(typeof out.timing.compute_us, "number");
  assertClose(tensorValues(out.output), c.want, id);
}

async function attention(cases, enc = "json", outputEncoding = "json") {
  const body = { inputs: cases.map((c, i) => c.item(`c${i}`, enc)), output_encoding: outputEncoding };
  const r = await request("POST", "/v1/attention", { body });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.errors, false);
  assert.equal(r.json.outputs.length, cases.length);
  r.json.outputs.forEach((out, i) => {
    if (outputEncoding === "b64") assert.equal(typeof out.output.b64, "string");
    checkOutput(out, cases[i], `c${i}`);
  });
  return r;
}

// --- probes ------------------------------------------------------------------

test("healthz, readyz, schemes", async () => {
  const h = await request("GET", "/healthz");
  assert.equal(h.status, 200);
  assert.deepEqual(h.json, { status: "ok" });
  assert.equal((await request("GET", "/readyz")).status, 200);
  const s = await request("GET", "/v1/schemes");
  assert.equal(s.status, 200);
  assert.ok(s.json);
  for (const name of ["none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"]) {
    assert.ok(s.text.includes(`"${name}"`), name);
  }
});

// --- numbers -------------------------------------------------------------------

test("NoPE against the reference (MHA and GQA)", async () => {
  const r = await attention([
    new Case(1, { Lq: 5, Lk: 5, H: 2, Hkv: 2, D: 8 }),
    new Case(2, { Lq: 3, Lk: 7, H: 4, Hkv: 2, D: 8, Dv: 6 }),
  ]);
  assert.match(r.headers.get("server-timing"), /compute;dur=[0-9.]+/);
});

test("ALiBi causal against the reference", async () => {
  await attention([
    new Case(3, { Lq: 6, Lk: 6, H: 4, Hkv: 4, D: 8, scheme: "alibi", causal: true }),
    new Case(4, { Lq: 3, Lk: 9, H: 8, Hkv: 8, D: 4, scheme: "alibi", causal: true }),
    new Case(5, { Lq: 5, Lk: 5, H: 3, Hkv: 3, D: 4, scheme: "alibi", causal: true }),
  ]);
});

test("ALiBi slopes for 8 heads are 2^-1 .. 2^-8", () => {
  assert.deepEqual(alibiSlopes(8), [1, 2, 3, 4, 5, 6, 7, 8].map((i) => 2 ** -i));
});

test("b64 in and out", async () => {
  const cases = [
    new Case(6, { Lq: 4, Lk: 4, H: 2, Hkv: 1, D: 8, scheme: "alibi", causal: true }),
    new Case(7, { Lq: 4, Lk: 6, H: 2, Hkv: 2, D: 4 }),
  ];
  await attention(cases, "b64", "b64");
  await attention(cases, "json", "b64");
  await attention(cases, "b64", "json");
});

test("nested JSON data", async () => {
  await attention([new Case(8, { Lq: 3, Lk: 5, H: 2, Hkv: 2, D: 4, causal: true })], "nested");
});

test("an invalid item inside a valid batch", async () => {
  const good = new Case(9, { Lq: 3, Lk: 3, H: 2, Hkv: 2, D: 4 });
  const bad = new Case(10, { Lq: 3, Lk: 3, H: 4, Hkv: 3, D: 4 }); // 3 does not divide 4
  const r = await request("POST", "/v1/attention", { body: { inputs: [good.item("good"), bad.item("bad")] } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.errors, true);
  checkOutput(r.json.outputs[0], good, "good");
  const e = r.json.outputs[1];
  assert.equal(e.id, "bad");
  assert.equal(e.output, undefined);
  assert.equal(e.error.code, "SHAPE_MISMATCH");
  assert.ok(e.error.field.startsWith("inputs[1]"), e.error.field);
});

// --- errors ----------------------------------------------------------------------

test("400 malformed JSON", async () => {
  assertError(await request("POST", "/v1/attention", { raw: '{"inputs": [' }), 400, "MALFORMED_JSON");
});

test("400 unknown field", async () => {
  const r = await request("POST", "/v1/attention", { body: { inputs: [], colour: "blue" } });
  assertError(r, 400, "UNKNOWN_FIELD", "colour");
});

test("404 and 405", async () => {
  assertError(await request("GET", "/v3/attention"), 404, "NOT_FOUND");
  const r = await request("GET", "/v1/attention");
  assertError(r, 405, "METHOD_NOT_ALLOWED");
  assert.equal(r.headers.get("allow"), "POST");
});

test("401 without or with a wrong key", { skip: !AUTH_URL && "POSATTN_AUTH_URL not set" }, async () => {
  const body = { inputs: [new Case(11, { Lq: 2, Lk: 2, H: 1, Hkv: 1, D: 2 }).item("a")] };
  for (const headers of [{}, { Authorization: "Bearer wrong" }]) {
    const r = await request("POST", "/v1/attention", { body, headers, base: AUTH_URL });
    assertError(r, 401, "UNAUTHORIZED");
    assert.match(r.headers.get("www-authenticate"), /Bearer/);
  }
  const r = await request("POST", "/v1/attention", {
    body, headers: { Authorization: `Bearer ${API_KEY}` }, base: AUTH_URL,
  });
  assert.equal(r.status, 200, r.text);
});

test("401 reaches a client that sends a big body", { skip: !AUTH_URL && "POSATTN_AUTH_URL not set" }, async () => {
  // A real request carries tensors; fetch sends the whole body (no Expect: 100-continue).
  const t = { shape: [64, 8, 64], b64: toB64(Array.from({ length: 64 * 8 * 64 }, rng(12))) };
  const body = { inputs: [{ id: "big", scheme: { type: "none" }, q: t, k: t, v: t }] };
  assert.ok(JSON.stringify(body).length > 500000); // under --max-body-mb 1
  assertError(await request("POST", "/v1/attention", { body, base: AUTH_URL }), 401, "UNAUTHORIZED");
});

test("413 body over --max-body-mb", { skip: !AUTH_URL && "POSATTN_AUTH_URL not set" }, async () => {
  const raw = `{"inputs": [], "pad": "${"x".repeat(3 << 19)}"}`; // 1.5 MB > 1 MB
  const r = await request("POST", "/v1/attention", {
    raw, headers: { Authorization: `Bearer ${API_KEY}` }, base: AUTH_URL,
  });
  assertError(r, 413, "PAYLOAD_TOO_LARGE");
});

// --- metrics, openapi ----------------------------------------------------------------

test("metrics count requests", async () => {
  const count = async () => {
    const r = await request("GET", "/metrics");
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type"), /text\/plain/);
    assert.ok(r.text.includes("posattn_request_duration_seconds_bucket"));
    let n = 0;
    for (const m of r.text.matchAll(/^posattn_requests_total\{[^}]*endpoint="schemes"[^}]*\} (\S+)$/gm)) {
      n += Number(m[1]);
    }
    return n;
  };
  const before = await count();
  for (let i = 0; i < 3; i++) assert.equal((await request("GET", "/v1/schemes")).status, 200);
  assert.equal((await count()) - before, 3);
});

test("openapi.yaml", async () => {
  const r = await request("GET", "/openapi.yaml");
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /yaml/);
  assert.match(r.text, /^openapi: /m);
  assert.ok(r.text.includes("/v1/attention:"));
});

// --- the README example ---------------------------------------------------------------

function example(lang, name) {
  const text = EXAMPLES.split(":").map((p) => readFileSync(p, "utf8")).join("\n");
  const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const m = text.match(new RegExp(`<!-- e2e: ${esc(lang)} ${esc(name)} -->\\s*\`\`\`\\w*\\n([\\s\\S]*?)\\n\`\`\``));
  assert.ok(m, `no ${lang} example named ${name} in ${EXAMPLES}`);
  return m[1];
}

test("docs/api.md's example of the JS client runs as written", () => {
  const root = join(HERE, "..", "..");
  const code = example("jsclient", "attention").replaceAll(README_URL, URL_BASE)
    .replace('"./clients/js/posattn.js"', JSON.stringify(pathToFileURL(join(root, "clients", "js", "posattn.js")).href));
  const dir = mkdtempSync(join(tmpdir(), "posattn-jsclient-"));
  try {
    const file = join(dir, "example.mjs");
    writeFileSync(file, code);
    const out = execFileSync("node", [file], { encoding: "utf8", timeout: 30000 });
    const want = code.split("\n").filter((l) => l.includes("console.log("))
      .map((l) => l.slice(l.lastIndexOf("//") + 2).trim());
    assert.deepEqual(out.trim().split("\n"), want);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("README JS example runs as written", async () => {
  const code = example("js", "attention").replaceAll(README_URL, URL_BASE);
  const AsyncFunction = (async () => {}).constructor;
  const printed = [];
  const log = console.log;
  console.log = (...args) => printed.push(args);
  let got;
  try {
    got = await new AsyncFunction(`${code}\nreturn { res, ans, out, L, H, D, values };`)();
  } finally {
    console.log = log;
  }
  const { res, ans, out, L, H, D, values } = got;
  assert.equal(res.status, 200);
  assert.equal(ans.errors, false);
  assert.deepEqual(ans.outputs[0].output.shape, [L, H, D]);
  assert.equal(out.length, L * H * D);
  // Causal: token 0 sees only key 0, so its output is v[0] whatever RoPE does.
  const v0 = values(3).slice(0, H * D).map(Math.fround);
  assertClose(Array.from(out.slice(0, H * D)), v0, "yarn.output[0]");
  // What it prints is what README.md says it prints (numbers to the
  // 4 decimals printed, give or take one in the last).
  const shown = example("js", "attention-output").split("\n");
  assert.equal(printed.length, shown.length);
  printed.forEach((args, i) => {
    const got = format(...args);
    const nums = (s) => (s.match(/-?\d+(\.\d+)?/g) || []).map(Number);
    const [g, w] = [nums(got), nums(shown[i])];
    assert.equal(g.length, w.length, `${got} vs ${shown[i]}`);
    g.forEach((x, j) => assert.ok(Math.abs(x - w[j]) <= 1.5e-4, `${got} vs ${shown[i]}`));
  });
});

test("README JS batch example: bf16 batch, each sequence as if sent alone", async () => {
  const code = example("js", "batch").replaceAll(README_URL, URL_BASE);
  const AsyncFunction = (async () => {}).constructor;
  const printed = [];
  const log = console.log;
  console.log = (...args) => printed.push(args);
  let got;
  try {
    got = await new AsyncFunction(
      `${code}\nreturn { res, ans, out, B, L, H, D, values, toBf16B64, fromBf16B64 };`)();
  } finally {
    console.log = log;
  }
  const { res, ans, out, B, L, H, D, values, toBf16B64, fromBf16B64 } = got;
  assert.equal(res.status, 200);
  assert.equal(ans.errors, false);
  assert.deepEqual(ans.outputs[0].output.shape, [B, L, H, D]);
  assert.deepEqual(printed.map((a) => format(...a)), example("js", "batch-output").split("\n"));
  const per = L * H * D, masks = [[1, 1, 1], [1, 0, 0]];
  for (let b = 0; b < B; b++) {
    const part = (seed) => ({ shape: [L, H, D], dtype: "bf16",
      b64: toBf16B64(values(seed).slice(b * per, (b + 1) * per)) });
    const mask = Array.from({ length: L * L }, (_, i) => masks[b][i % L]);
    const alone = await (await fetch(`${URL_BASE}/v1/attention`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ output_encoding: "b64", output_dtype: "bf16", inputs: [{
        scheme: { type: "alibi" }, mask: { shape: [L, L], data: mask },
        q: part(1), k: part(2), v: part(3) }] }),
    })).json();
    assert.equal(alone.errors, false);
    assert.deepEqual(Array.from(fromBf16B64(alone.outputs[0].output.b64)),
      Array.from(out.slice(b * per, (b + 1) * per)), `sequence ${b}`);
  }
});
