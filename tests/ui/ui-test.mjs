// ui-test.mjs - the web page of posattnd in a real browser (make ui-test).
//
// Starts build/posattnd on 127.0.0.1, port 0 (the port is read from its
// first stdout line) with --api-key, opens GET / in headless Chromium
// (/usr/bin/chromium through playwright-core, a fresh empty user-data-dir),
// enters the key, then exercises every panel: canvases must be drawn (pixels
// read back from each canvas), values the page shows must equal the same
// values fetched by this test straight from the API, moving a control must
// change the plot, the keyboard must reach the controls, and a 390 px wide
// viewport must not overflow. A second tab opened at /#live must land on
// its section and show a p99 history at once; the openapi.yaml viewer
// (/web/openapi.html) must show the file with an anchor per path. Then
// posattn-load (beside posattnd, or POSATTN_LOAD) writes an HTML report
// whose latency charts must be on a log axis with a switch to linear, and
// a second posattnd with --tls-cert/--tls-key (a CA made by openssl for this
// run) must serve the page over HTTPS with every API call answered.
// Screenshots go to build/ui/ (UI_OUT).
//
//   POSATTND=build/posattnd node tests/ui/ui-test.mjs   (or make ui-test)
//   UI_WEB_DIR=DIR: the page's files from DIR (see routeWeb below)
//
// Exits 0 only when every check passed; the last line is
// "ui: N passed, M failed". Bounded by UI_TIMEOUT seconds (default 240); the
// servers and the browsers are stopped on every exit path.

import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const POSATTND = path.resolve(ROOT, process.env.POSATTND || 'build/posattnd');
const OUT = path.resolve(ROOT, process.env.UI_OUT || 'build/ui');
const TIMEOUT_S = Number(process.env.UI_TIMEOUT || 240);
const KEY = 'ui-test-key';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
// posattn-load, for its HTML report's charts: beside posattnd unless POSATTN_LOAD says.
const LOAD = path.resolve(ROOT, process.env.POSATTN_LOAD || path.join(path.dirname(POSATTND), 'posattn-load'));
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// Each posattnd started: {name, proc, err (its last stderr), exit}.
const servers = [];
let context = null, tlsBrowser = null, base = '';
const tmpDirs = [];
let passed = 0, failed = 0;
const consoleErrors = [];

function log(msg) { process.stdout.write(msg + '\n'); }

async function cleanup() {
  if (context) { await context.close().catch(() => {}); context = null; }
  if (tlsBrowser) { await tlsBrowser.close().catch(() => {}); tlsBrowser = null; }
  for (const s of servers) {
    if (s.proc.exitCode !== null || s.proc.signalCode !== null) {
      if (s.exit === null) s.exit = s.proc.signalCode || s.proc.exitCode;
      continue;
    }
    const gone = new Promise((res) => s.proc.once('exit', (code, sig) => res(sig || code)));
    s.proc.kill('SIGTERM');
    const t = setTimeout(() => s.proc.kill('SIGKILL'), 15000);
    s.exit = await gone;
    clearTimeout(t);
  }
  for (const d of tmpDirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
}

const watchdog = setTimeout(async () => {
  log(`ui: FAIL - timed out after ${TIMEOUT_S} s`);
  failed++;
  await cleanup();
  log(`ui: ${passed} passed, ${failed} failed`);
  process.exit(1);
}, TIMEOUT_S * 1000);

// One named check: a failure is reported and counted, and the run goes on.
async function check(name, fn) {
  try {
    await fn();
    passed++;
    log(`ok   ${name}`);
  } catch (e) {
    failed++;
    log(`FAIL ${name}: ${e && e.message ? e.message.split('\n')[0] : e}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
function close(a, b, rel = 1e-5, abs = 1e-6, what = 'value') {
  assert(Number.isFinite(a) && Number.isFinite(b) && Math.abs(a - b) <= abs + rel * Math.abs(b),
    `${what}: page shows ${a}, API says ${b}`);
}

// ------------------------------------------------------------ the server

// Starts posattnd (with --api-key; extra flags after) and resolves to its
// base URL, http:// or https:// as its first stdout line says.
function startServer(name, extra = []) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('POSATTN_')) env[k] = v;
  env.OPENBLAS_NUM_THREADS = '1';
  const proc = spawn(POSATTND, ['--host', '127.0.0.1', '--port', '0', '--api-key', KEY, '--workers', '2',
    '--log-format', 'off', ...extra], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const s = { name, proc, err: '', exit: null };
  servers.push(s);
  proc.stderr.on('data', (d) => { s.err = (s.err + d).slice(-4000); });
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${name} printed no port within 10 s: ${s.err}`)), 10000);
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /(https?):\/\/([\d.]+):(\d+)/.exec(out);
      if (m) { clearTimeout(t); resolve(`${m[1]}://127.0.0.1:${m[3]}`); }
    });
    proc.once('exit', (code) => { clearTimeout(t); reject(new Error(`${name} exited (${code}): ${s.err}`)); });
  });
}

// Runs a program to its end (bounded); rejects with its stderr on failure.
function runProgram(file, args, timeout = 30000) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('POSATTN_')) env[k] = v;
  env.OPENBLAS_NUM_THREADS = '1';
  return new Promise((resolve, reject) => execFile(file, args, { env, timeout }, (e, out, err) =>
    (e ? reject(new Error(`${path.basename(file)} ${args[0]}: ${e.message.split('\n')[0]} ${String(err).slice(-400)}`))
      : resolve(out))));
}

async function api(p, body) {
  const r = await fetch(base + p, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${p}: HTTP ${r.status} ${text}`);
  return p === '/metrics' ? text : JSON.parse(text);
}

// UI_WEB_DIR=DIR: the page's files (GET /, GET /web/NAME) come from DIR
// where it has them, with the server's own status and headers, instead of
// the copies compiled into posattnd: to try page changes without a rebuild,
// or to see the checks fail on older files (git show HEAD:server/http/web/app.js).
async function routeWeb(ctx) {
  const dir = process.env.UI_WEB_DIR;
  if (!dir) return;
  await ctx.route((u) => /^\/(web\/[\w.-]+)?$/.test(u.pathname), async (route) => {
    const u = new URL(route.request().url());
    const file = path.join(dir, u.pathname === '/' ? 'index.html' : u.pathname.slice(5));
    if (!fs.existsSync(file)) return route.continue();
    await route.fulfill({ response: await route.fetch(), body: fs.readFileSync(file) });
  });
}

// ------------------------------------------------------------ page helpers

let page;
const posted = [];   // every POST the page makes: {url, body}

const PANELS = ['sinusoidal', 'rope', 'bias', 'attention', 'extrap', 'live'];
async function settle(id, timeout = 30000, pg = page) {
  await pg.waitForFunction((s) => document.getElementById(s).dataset.state === 'ready', id, { timeout })
    .catch(async () => {
      const st = await pg.evaluate((s) => [document.getElementById(s).dataset.state,
        document.querySelector(`#${s} .status`).textContent], id);
      throw new Error(`panel #${id} not ready: state ${st[0]}, status "${st[1]}"`);
    });
}

// Reads a canvas back: the share of painted (not white, not transparent)
// pixels, how many colours, and a hash to see it change.
async function pixels(sel) {
  return page.$eval(sel, (c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let painted = 0, hash = 0;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 0 && !(d[i] > 245 && d[i + 1] > 245 && d[i + 2] > 245)) painted++;
      colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      hash = (Math.imul(hash, 31) + d[i] * 65599 + d[i + 1] * 257 + d[i + 2] + d[i + 3]) >>> 0;
    }
    return { painted: painted / (d.length / 4), colours: colours.size, hash, w: c.width, h: c.height };
  });
}
async function drawn(sel, minPainted = 0.05, minColours = 8) {
  const p = await pixels(sel);
  assert(p.w > 0 && p.h > 0, `${sel}: canvas has no size`);
  assert(p.painted >= minPainted && p.colours >= minColours,
    `${sel}: looks blank (${(p.painted * 100).toFixed(1)}% painted, ${p.colours} colours)`);
  return p;
}

// Puts the keyboard cursor of a heatmap on (row, col) and returns the
// readout: its text and the value parsed from the text.
async function heatCell(id, row, col) {
  await page.focus('#' + id);
  await page.keyboard.press('Home');
  for (let i = 0; i < row; i++) await page.keyboard.press('ArrowDown');
  for (let i = 0; i < col; i++) await page.keyboard.press('ArrowRight');
  const text = await page.textContent(`#${id}-readout`);
  const m = /: (\S+)$/.exec(text.trim());
  assert(m, `#${id}-readout: no value in "${text}"`);
  return { text, value: m[1] === 'masked' ? null : Number(m[1]) };
}

async function slider(id, value) {   // by keyboard, as a person would
  const min = Number(await page.getAttribute('#' + id, 'min'));
  await page.focus('#' + id);
  await page.keyboard.press('Home');
  for (let v = min; v < value; v++) await page.keyboard.press('ArrowRight');
  const now = Number(await page.inputValue('#' + id));
  assert(now === value, `#${id}: slider at ${now}, wanted ${value}`);
}

// ------------------------------------------------------------ the checks

async function run() {
  fs.mkdirSync(OUT, { recursive: true });
  base = await startServer('posattnd');
  log(`ui: posattnd at ${base}`);
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'posattn-ui-'));
  tmpDirs.push(userDir);
  context = await chromium.launchPersistentContext(userDir, {
    executablePath: CHROMIUM, headless: true, args: FLAGS,
    viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1,
  });
  await routeWeb(context);
  page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(30000);
  page.on('console', (m) => { if (m.type() === 'error' && !/401/.test(m.text())) consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  page.on('request', (r) => { if (r.method() === 'POST') posted.push({ url: r.url(), body: r.postData() }); });

  let resp;
  await check('GET / serves the page with its headers', async () => {
    resp = await page.goto(base + '/');
    const h = resp.headers();
    assert(resp.status() === 200, `status ${resp.status()}`);
    assert(h['content-type'] === 'text/html; charset=utf-8', `content-type ${h['content-type']}`);
    assert(/default-src 'self'/.test(h['content-security-policy'] || ''), 'no CSP');
    assert(h['cache-control'], 'no Cache-Control');
    assert((await page.title()).includes('posattn'), 'title');
  });

  await check('without the key the page says it needs one', async () => {
    await page.waitForSelector('#banner:not([hidden])', { timeout: 15000 });
    const text = await page.textContent('#banner');
    assert(/API key/.test(text), `banner: ${text}`);
  });

  await check('the key typed in (Enter) is sent and kept in sessionStorage', async () => {
    await page.focus('#api-key');
    await page.keyboard.type(KEY);
    await page.keyboard.press('Enter');
    for (const s of PANELS) await settle(s);
    assert(await page.isHidden('#banner'), 'banner still shown');
    const stored = await page.evaluate(() => sessionStorage.getItem('posattn-api-key'));
    assert(stored === KEY, `sessionStorage has ${stored}`);
  });
  await page.setViewportSize({ width: 1280, height: 1268 });
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  await page.waitForTimeout(300);
  await page.screenshot({ path: path.join(OUT, 'page.png') });   // docs/web.png is taken from this
  await page.setViewportSize({ width: 1280, height: 900 });

  // ---------------------------------------------------------- sinusoidal
  await check('sinusoidal: heatmaps and circle are drawn', async () => {
    await drawn('#sin-enc-map');
    await drawn('#sin-sim-map');
    await drawn('#circle', 0.02, 4);
  });
  await check('sinusoidal: length slider and dim select redraw the plots', async () => {
    const before = await pixels('#sin-sim-map');
    await slider('sin-length', 20);
    await page.selectOption('#sin-dim', '16');
    await settle('sinusoidal');
    const after = await drawn('#sin-sim-map');
    assert(after.hash !== before.hash, 'similarity plot did not change');
    assert((await page.textContent('#sin-length-out')) === '20', 'length readout');
  });
  await check('sinusoidal: similarity cell (3, 7) equals /v1/analyze similarity', async () => {
    const ref = await api('/v1/analyze', { analysis: 'similarity', scheme: { type: 'sinusoidal', base: 10000,
      layout: 'interleaved' }, length: 20, dim: 16 });
    assert(ref.similarity.shape[0] === 20, 'reference shape');
    const cell = await heatCell('sin-sim-map', 3, 7);
    close(cell.value, ref.similarity.data[3 * 20 + 7], 1e-5, 1e-6, 'P·P^T[3][7]');
    const enc = await api('/v1/encode', { scheme: { type: 'sinusoidal', base: 10000, layout: 'interleaved' },
      length: 20, dim: 16 });
    const e = await heatCell('sin-enc-map', 5, 2);
    close(e.value, enc.encoding.data[5 * 16 + 2], 1e-5, 1e-6, 'PE[5][2]');
  });
  await check('sinusoidal: base and layout change the encoding (concat layout)', async () => {
    const before = await pixels('#sin-enc-map');
    await page.fill('#sin-base', '100');
    await page.selectOption('#sin-layout', 'concat');
    await settle('sinusoidal');
    const after = await drawn('#sin-enc-map');
    assert(after.hash !== before.hash, 'encoding plot did not change');
    const enc = await api('/v1/encode', { scheme: { type: 'sinusoidal', base: 100, layout: 'concat' },
      length: 20, dim: 16 });
    const e = await heatCell('sin-enc-map', 4, 9);
    close(e.value, enc.encoding.data[4 * 16 + 9], 1e-5, 1e-6, 'concat PE[4][9]');
  });
  await check('sinusoidal: the position slider moves the point on the circle', async () => {
    await page.selectOption('#circle-pair', '1');
    const before = await pixels('#circle');
    await slider('circle-pos', 6);
    const after = await pixels('#circle');
    assert(after.hash !== before.hash, 'circle did not change');
    const enc = await api('/v1/encode', { scheme: { type: 'sinusoidal', base: 100, layout: 'concat' },
      length: 20, dim: 16 });
    const text = await page.textContent('#circle-readout');
    const m = /sin = (\S+), cos = (\S+)/.exec(text);
    assert(m, `circle readout: ${text}`);
    close(Number(m[1]), enc.encoding.data[6 * 16 + 1], 1e-5, 1e-6, 'sin of pair 1 at 6');
    close(Number(m[2]), enc.encoding.data[6 * 16 + 1 + 8], 1e-5, 1e-6, 'cos of pair 1 at 6');
  });
  await page.locator('#sinusoidal').screenshot({ path: path.join(OUT, 'sinusoidal.png') });

  // ---------------------------------------------------------------- RoPE
  await check('rope: score and inv_freq plots are drawn', async () => {
    await drawn('#rope-score-plot', 0.01, 4);
    await drawn('#rope-scale-plot', 0.01, 4);
  });
  await check('rope: the score depends only on the offset (lines coincide)', async () => {
    const d = Number(await page.getAttribute('#rope-score-plot-readout', 'data-max-diff'));
    assert(d < 1e-4, `lines differ by ${d}`);
    assert(/depends on the offset only/.test(await page.textContent('#rope-status')), 'status');
  });
  await check('rope: one frequency; score at offset -32 equals /v1/analyze rope_offset', async () => {
    const before = await pixels('#rope-score-plot');
    await page.selectOption('#rope-pair', '2');
    await settle('rope');
    assert((await pixels('#rope-score-plot')).hash !== before.hash, 'score plot did not change');
    const D = 64, q = new Array(D).fill(0), k = new Array(D).fill(0);
    q[2] = 1; q[2 + D / 2] = 0.5; k[2] = 0.8; k[2 + D / 2] = -0.6;
    const offsets = Array.from({ length: 65 }, (_, i) => i - 32);
    const ref = await api('/v1/analyze', { analysis: 'rope_offset', scheme: { type: 'rope', base: 10000 }, q, k,
      offsets, base_position: 100 });
    await page.focus('#rope-score-plot');
    await page.keyboard.press('Home');
    const text = await page.textContent('#rope-score-plot-readout');
    const m = /k at 100 ([^,\s]+)/.exec(text);
    assert(m, `readout: ${text}`);
    close(Number(m[1]), ref.score.data[0], 1e-5, 1e-6, 'score at offset -32, k at 100');
  });
  await check('rope: scaling factor changes inv_freq; yarn attention factor equals /v1/encode', async () => {
    const before = await pixels('#rope-scale-plot');
    await page.fill('#scale-factor', '4');
    await settle('rope');
    assert((await pixels('#rope-scale-plot')).hash !== before.hash, 'inv_freq plot did not change');
    const ref = await api('/v1/encode', { scheme: { type: 'rope', scaling: 'yarn', factor: 4,
      original_max_position: 2048 }, length: 1, dim: 64 });
    const row = await page.$$eval('#scale-table tbody tr', (rs) => rs.map((r) => [...r.cells].map((c) => c.textContent)));
    const yarn = row.find((r) => r[0] === 'yarn');
    assert(yarn, 'no yarn row');
    close(Number(yarn[1]), ref.attention_factor, 1e-4, 0, 'yarn attention factor');
    close(Number(yarn[2]), Math.min(...ref.inv_freq.data), 1e-3, 0, 'yarn lowest inv_freq');
  });
  await page.locator('#rope').screenshot({ path: path.join(OUT, 'rope.png') });

  // -------------------------------------------------------- ALiBi and T5
  await check('alibi: slopes shown equal /v1/encode for 8 heads', async () => {
    const ref = await api('/v1/encode', { scheme: { type: 'alibi' }, num_heads: 8 });
    const shown = await page.$$eval('#alibi-slope-table tbody td.num', (t) => t.map((c) => Number(c.textContent)));
    assert(shown.length === 8, `${shown.length} slopes shown`);
    shown.forEach((s, h) => close(s, ref.slopes.data[h], 1e-5, 0, `slope of head ${h}`));
    await drawn('#alibi-slope-plot', 0.01, 3);
    await drawn('#alibi-head-0');
    await drawn('#t5-head-0');
    await drawn('#t5-bucket-map');
  });
  await check('alibi/t5: the heads slider redraws with 3 heads', async () => {
    await slider('bias-heads', 3);
    await settle('bias');
    const ref = await api('/v1/encode', { scheme: { type: 'alibi' }, num_heads: 3 });
    const shown = await page.$$eval('#alibi-slope-table tbody td.num', (t) => t.map((c) => Number(c.textContent)));
    assert(shown.length === 3, `${shown.length} slopes shown`);
    shown.forEach((s, h) => close(s, ref.slopes.data[h], 1e-5, 0, `slope of head ${h}`));
    assert(await page.$('#alibi-head-2') && !(await page.$('#alibi-head-3')), 'head maps not 3');
    const cell = await heatCell('alibi-head-1', 2, 9);
    const bias = await api('/v1/encode', { scheme: { type: 'alibi' }, num_heads: 3, q_length: 24, k_length: 24 });
    close(cell.value, bias.bias.data[1 * 24 * 24 + 2 * 24 + 9], 1e-5, 1e-6, 'alibi bias[1][2][9]');
  });
  await check('t5: bucket cell equals /v1/encode buckets', async () => {
    const ref = await api('/v1/encode', { scheme: { type: 't5' }, q_length: 24, k_length: 24 });
    const cell = await heatCell('t5-bucket-map', 1, 12);
    close(cell.value, ref.buckets.data[1 * 24 + 12], 0, 0, 'bucket[1][12]');
  });
  await page.locator('#bias').screenshot({ path: path.join(OUT, 'bias.png') });

  // ----------------------------------------------------------- attention
  const SCHEMES = ['none', 'sinusoidal', 'learned', 'shaw', 't5', 'rope', 'alibi'];
  const lastPerm = (t) => [...posted].reverse().find((p) => p.url.endsWith('/v1/analyze') &&
    JSON.parse(p.body).analysis === 'permutation' && JSON.parse(p.body).scheme.type === t);
  await check('attention: a weight heatmap per scheme, drawn', async () => {
    for (const t of SCHEMES) await drawn('#att-' + t);
  });
  await check('attention: permutation results equal /v1/analyze; none is order-blind', async () => {
    for (const t of SCHEMES) {
      const req = lastPerm(t);
      assert(req, `the page sent no permutation request for ${t}`);
      const ref = await api('/v1/analyze', req.body);
      const shown = await page.textContent(`#perm-${t} .val`);
      close(Number(shown), ref.max_abs_diff, 1e-2, 1e-7, `${t} max_abs_diff`);
      const verdict = await page.textContent(`#perm-${t}`);
      if (t === 'none') assert(/order-blind/.test(verdict) && ref.max_abs_diff < 1e-5, `none: ${verdict}`);
      else assert(/order-aware/.test(verdict) && ref.max_abs_diff > 1e-3, `${t}: ${verdict}`);
    }
  });
  await check('attention: a rope weight equals /v1/attention on the same input', async () => {
    const req = [...posted].reverse().find((p) => p.url.endsWith('/v1/attention') && /"return"/.test(p.body));
    assert(req, 'the page sent no attention request');
    const ref = await api('/v1/attention', req.body);
    const i = SCHEMES.indexOf('rope'), L = ref.outputs[i].weights.shape[1];
    const cell = await heatCell('att-rope', 3, 1);
    close(cell.value, ref.outputs[i].weights.data[3 * L + 1], 1e-5, 1e-6, 'rope weight[0][3][1]');
  });
  await check('attention: causal on (keyboard) masks the future and makes none order-aware', async () => {
    const before = await pixels('#att-none');
    await page.focus('#att-causal');
    await page.keyboard.press('Space');
    await settle('attention');
    assert((await pixels('#att-none')).hash !== before.hash, 'none heatmap did not change');
    const cell = await heatCell('att-none', 1, 4);
    assert(cell.value === 0, `future key weight ${cell.text}`);
    assert(/order-aware/.test(await page.textContent('#perm-none')), 'none with causal should be order-aware');
  });
  await check('attention: a user-given x is used (3 tokens)', async () => {
    await page.click('.userx summary');
    const x = [[1, 0, 0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 1, 0, 0, 0], [0.5, 0, 1, 0, 0, 0, -1, 0]];
    await page.fill('#att-x', JSON.stringify(x));
    await page.click('#att-x-apply');
    await settle('attention');
    assert(/your x/.test(await page.textContent('#att-status')), 'status does not say "your x"');
    const req = lastPerm('alibi');
    assert(JSON.stringify(JSON.parse(req.body).x.data) === JSON.stringify(x.flat()), 'x not sent as given');
    const ref = await api('/v1/analyze', req.body);
    close(Number(await page.textContent('#perm-alibi .val')), ref.max_abs_diff, 1e-2, 1e-7, 'alibi max_abs_diff');
  });
  await page.locator('#attention').screenshot({ path: path.join(OUT, 'attention.png') });

  // ------------------------------- attention: options of current models
  // The request the page sent last (its items carry the options), and the
  // weights of one scheme and head from it.
  const lastAtt = () => {
    const req = [...posted].reverse().find((p) => p.url.endsWith('/v1/attention') && /"return"/.test(p.body));
    assert(req, 'the page sent no attention request');
    return JSON.parse(req.body);
  };
  const headW = (res, t, h = 0) => {
    const o = res.outputs[SCHEMES.indexOf(t)];
    assert(o.weights, `${t}: ${JSON.stringify(o.error || o)}`);
    const L = o.weights.shape[1];
    return { L, w: o.weights.data.slice(h * L * L, (h + 1) * L * L) };
  };
  const cellSel = (q, k) => `#att-mask button[data-q="${q}"][data-k="${k}"]`;
  await check('attention options: back to the seeded x (8 tokens), causal off', async () => {
    await page.fill('#att-x', '');
    await page.click('#att-x-apply');
    await settle('attention');
    await page.uncheck('#att-causal');
    await settle('attention');
    const body = lastAtt();
    assert(body.inputs[0].x.shape[0] === 8 && body.inputs[0].causal === false, 'not 8 tokens without causal');
    for (const f of ['softcap', 'sinks', 'chunk_size', 'mask'])
      assert(!(f in body.inputs[0]), `${f} sent while off`);
  });
  await check('attention options: softcap is sent and changes the weights', async () => {
    const before = await pixels('#att-none');
    await page.fill('#att-softcap', '0.3');
    await settle('attention');
    const body = lastAtt();
    assert(body.inputs.every((it) => it.softcap === 0.3), 'softcap 0.3 not in every item');
    const capped = await api('/v1/attention', body);
    for (const it of body.inputs) delete it.softcap;
    const plain = await api('/v1/attention', body);
    const a = headW(capped, 'none'), b = headW(plain, 'none');
    const diff = Math.max(...a.w.map((v, j) => Math.abs(v - b.w[j])));
    assert(diff > 1e-3, `softcap 0.3 moved the weights by ${diff} only`);
    assert((await pixels('#att-none')).hash !== before.hash, 'none heatmap did not change');
    const cell = await heatCell('att-none', 2, 5);
    close(cell.value, a.w[2 * a.L + 5], 1e-5, 1e-6, 'softcapped weight[0][2][5]');
    assert(/softcap 0\.3/.test(await page.textContent('#att-status')), 'status does not name the softcap');
  });
  await check('attention options: sinks send one logit per head; the sink share is shown', async () => {
    assert(await page.isDisabled('#att-sink-value'), 'sink logit editable while sinks are off');
    assert(await page.isHidden('#sink-none'), 'sink line shown while sinks are off');
    await page.check('#att-sinks');
    await page.fill('#att-sink-value', '1');
    await settle('attention');
    const body = lastAtt();
    for (const it of body.inputs)
      assert(it.sinks && it.sinks.shape.length === 1 && it.sinks.shape[0] === it.num_heads &&
        it.sinks.data.length === it.num_heads && it.sinks.data.every((v) => v === 1),
      `sinks sent: ${JSON.stringify(it.sinks)} for num_heads ${it.num_heads}`);
    const { L, w } = headW(await api('/v1/attention', body), 'none');
    const share = Array.from({ length: L }, (_, r) => 1 - w.slice(r * L, (r + 1) * L).reduce((x, y) => x + y, 0));
    assert(share.every((v) => v > 0.01 && v < 1), `sink shares ${share}`);
    const line = await page.textContent('#sink-none');
    const m = /^sink takes ([\d.]+)\u2013([\d.]+)% of a row \(most in row (\d+)\)$/.exec(line.trim());
    assert(await page.isVisible('#sink-none') && m, `sink line "${line}"`);
    const lo = Math.min(...share), hi = Math.max(...share);
    close(Number(m[1]) / 100, lo, 5e-3, 0, 'smallest sink share');
    close(Number(m[2]) / 100, hi, 5e-3, 0, 'largest sink share');
    assert(Number(m[3]) === share.indexOf(hi), `row of the largest share: ${m[3]}`);
    const cell = await heatCell('att-none', 3, L);   // the column right of the keys
    assert(/query 3, sink: /.test(cell.text), `readout "${cell.text}"`);
    close(cell.value, share[3], 1e-4, 1e-6, 'sink share of row 3');
    await drawn('#att-none');
  });
  await check('attention options: chunk_size is sent; keys of other chunks get weight 0', async () => {
    await page.fill('#att-chunk', '3');
    await settle('attention');
    const body = lastAtt();
    assert(body.inputs.every((it) => it.chunk_size === 3), 'chunk_size 3 not in every item');
    const { L, w } = headW(await api('/v1/attention', body), 'none');
    assert(w[1 * L + 4] === 0 && w[4 * L + 3] > 0, 'reference: chunks not applied');
    const off = await heatCell('att-none', 1, 4), on = await heatCell('att-none', 4, 3);
    assert(off.value === 0, `query 1, key 4 (other chunk): ${off.text}`);
    close(on.value, w[4 * L + 3], 1e-5, 1e-6, 'query 4, key 3 (same chunk)');
    assert(await page.$eval(cellSel(1, 4), (b) => b.classList.contains('hidden')), 'mask grid does not show the chunk');
    await page.fill('#att-chunk', '');
    await settle('attention');
    assert(!('chunk_size' in lastAtt().inputs[0]), 'chunk_size still sent when emptied');
  });
  await check('attention options: a mask cell clicked, dragged and typed is sent; clear sends none', async () => {
    await page.click('#att-mask-box summary');
    assert(await page.$$eval('#att-mask button', (b) => b.length) === 64, 'mask grid is not 8 x 8');
    await page.click(cellSel(5, 2));
    await settle('attention');
    let it = lastAtt().inputs[0];
    assert(it.mask && JSON.stringify(it.mask.shape) === '[8,8]', `mask shape ${it.mask && it.mask.shape}`);
    assert(it.mask.data[5 * 8 + 2] === false && it.mask.data.filter((v) => !v).length === 1, 'mask is not (5, 2) only');
    assert((await heatCell('att-none', 5, 2)).value === 0, 'blocked cell has weight');
    assert(await page.getAttribute(cellSel(5, 2), 'aria-pressed') === 'true', 'cell not shown pressed');
    // Drag along row 6 from key 0 to key 3: four cells blocked.
    const box = async (q, k) => { const b = await page.locator(cellSel(q, k)).boundingBox(); return [b.x + b.width / 2, b.y + b.height / 2]; };
    const [x0, y0] = await box(6, 0), [x1, y1] = await box(6, 3);
    await page.mouse.move(x0, y0);
    await page.mouse.down();
    await page.mouse.move(x1, y1, { steps: 8 });
    await page.mouse.up();
    // And by keyboard: from (5, 2), Up then Left, Space: (4, 1).
    await page.focus(cellSel(5, 2));
    await page.keyboard.press('ArrowUp');
    await page.keyboard.press('ArrowLeft');
    await page.keyboard.press('Space');
    await settle('attention');
    it = lastAtt().inputs[0];
    const off = it.mask.data.map((v, i) => (v ? null : `${Math.floor(i / 8)},${i % 8}`)).filter(Boolean);
    assert(JSON.stringify(off) === '["4,1","5,2","6,0","6,1","6,2","6,3"]', `blocked cells ${off.join(' ')}`);
    assert(/6 of 64 cells blocked/.test(await page.textContent('#att-mask-summary')), 'mask summary');
    await page.click('#att-mask-clear');
    await settle('attention');
    assert(!('mask' in lastAtt().inputs[0]), 'mask still sent after clear');
    assert(/no mask is sent/.test(await page.textContent('#att-mask-summary')), 'mask summary after clear');
  });
  await check('attention options: presets documents and prefix-LM send their masks', async () => {
    await page.click('#att-mask-docs');
    await settle('attention');
    let m = lastAtt().inputs[0].mask.data;
    assert(m[1 * 8 + 6] === false && m[6 * 8 + 1] === false && m[6 * 8 + 7] === true && m[2 * 8 + 3] === true,
      'documents: not two blocks of 4');
    await page.check('#att-causal');
    await page.click('#att-mask-prefix');
    await settle('attention');
    const it = lastAtt().inputs[0];
    m = it.mask.data;
    assert(it.causal === false && !(await page.isChecked('#att-causal')), 'prefix-LM left causal on');
    assert(m[1 * 8 + 3] === true && m[1 * 8 + 4] === false && m[6 * 8 + 5] === true && m[5 * 8 + 6] === false,
      'prefix-LM: not a bidirectional prefix of 4 and causal after it');
    const { L, w } = headW(await api('/v1/attention', lastAtt()), 'none');
    close((await heatCell('att-none', 1, 3)).value, w[1 * L + 3], 1e-5, 1e-6, 'prefix-LM weight[0][1][3]');
  });
  await check('attention options: bad values (softcap -1, chunk 0) show the server error', async () => {
    const seen = consoleErrors.length;
    const bad = async (id, value, re) => {
      await page.fill(id, value);
      await page.waitForFunction(() => document.getElementById('attention').dataset.state === 'error', null,
        { timeout: 15000 }).catch(() => {});
      const st = await page.textContent('#att-status');
      assert(await page.$eval('#att-status', (e) => e.classList.contains('error')) && re.test(st),
        `${id}=${value}: status "${st}"`);
      await page.fill(id, '');
      await settle('attention');
      assert(!(await page.$eval('#att-status', (e) => e.classList.contains('error'))), 'error stays after the fix');
    };
    await bad('#att-softcap', '-1', /INVALID_ARGUMENT: softcap=-1 must be a positive number.*softcap/);
    await bad('#att-chunk', '0', /INVALID_ARGUMENT: chunk_size=0 must be positive.*chunk_size/);
    // The browser logs each 400 of the bad values: expected here, nothing else is.
    const extra = consoleErrors.splice(seen).filter((t) => !/status of 400/.test(t));
    consoleErrors.push(...extra);
    await drawn('#att-none');
  });
  await page.fill('#att-softcap', '0.3');
  await page.fill('#att-chunk', '');
  await page.click('#att-mask-docs');
  await settle('attention');
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  await page.locator('#attention').screenshot({ path: path.join(OUT, 'attention-options.png') });

  // -------------------------------------------------------- live service
  // ------------------------------------------------------- extrapolation
  await check('extrapolation: entropy, distance and spectrum plots are drawn', async () => {
    await settle('extrap');
    await drawn('#extrap-entropy-plot', 0.01, 4);
    await drawn('#extrap-distance-plot', 0.01, 4);
    await drawn('#extrap-spectrum-plot', 0.01, 4);
    assert(/NoPE .* \u2192 .*ALiBi/.test(await page.textContent('#extrap-status')), 'status');
  });
  await check('extrapolation: the bands shown equal /v1/analyze extrapolation; NoPE spreads, ALiBi stays', async () => {
    const shown = JSON.parse(await page.getAttribute('#extrap', 'data-bands'));
    const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
    const ref = await api('/v1/analyze', { analysis: 'extrapolation', scheme: { type: 'alibi' },
      train_length: 128, band: 32, lengths: [512], inputs: 'gaussian', num_heads: 4, head_dim: 32, seed: 1 });
    const bands = ref.lengths[0].bands;
    assert(shown[1].length === bands.length, `alibi: ${shown[1].length} bands shown, ${bands.length} in the answer`);
    bands.forEach((b, i) => {
      close(shown[1][i][1], mean(b.entropy), 1e-9, 0, `alibi entropy band ${i}`);
      close(shown[1][i][2], mean(b.distance), 1e-9, 0, `alibi distance band ${i}`);
    });
    const nope = shown[0];
    assert(nope[nope.length - 1][1] > nope[0][1] + 1, 'NoPE entropy does not grow with position');
    // ALiBi's slowest of 4 heads (slope 1/256) still reaches far at 512: on
    // average its last band attends about a quarter as far as NoPE's (64 to 247 here).
    assert(shown[1][shown[1].length - 1][2] < 0.5 * nope[nope.length - 1][2], 'ALiBi is not local');
  });
  await check('extrapolation: a longer training length redraws', async () => {
    const before = await pixels('#extrap-entropy-plot');
    await page.selectOption('#extrap-train', '64');
    await settle('extrap');
    assert((await pixels('#extrap-entropy-plot')).hash !== before.hash, 'entropy plot did not change');
    const shown = JSON.parse(await page.getAttribute('#extrap', 'data-bands'));
    assert(shown[0].length === 16, `64 x 4 in bands of 16: ${shown[0].length} bands`);
  });
  await page.locator('#extrap').screenshot({ path: path.join(OUT, 'extrapolation.png') });

  const itemsOf = (text, s) => Number((new RegExp(`^posattn_items_total\\{scheme="${s}"\\} (\\S+)$`, 'm')
    .exec(text) || [0, 0])[1]);
  await check('live: load button sends 20 requests for every scheme of /v1/schemes; counts follow /metrics', async () => {
    const names = (await api('/v1/schemes')).schemes.map((s) => s.name);
    assert(names.includes('sinusoidal') && names.includes('learned'), `schemes ${names}`);
    const m0 = await api('/metrics');
    await page.click('#live-load');
    await page.waitForFunction(() => /^sent \d+ requests|error/.test(
      document.getElementById('live-load-result').textContent +
      (document.getElementById('live-load-result').classList.contains('error') ? ' error' : '')),
    null, { timeout: 60000 }).catch(() => {});
    const res = await page.textContent('#live-load-result');
    assert(res.startsWith(`sent ${20 * names.length} requests (20 per scheme`), `load result "${res}"`);
    const m1 = await api('/metrics');
    for (const s of names) {
      const got = itemsOf(m1, s) - itemsOf(m0, s);
      assert(got >= 20, `${s}: ${got} items computed during the load, not 20`);
      const shown = Number(await page.textContent(`#live-schemes tr[data-scheme="${s}"] td`));
      assert(shown >= itemsOf(m0, s) + 20 && shown <= itemsOf(m1, s),
        `${s} items shown ${shown}, /metrics ${itemsOf(m0, s)} -> ${itemsOf(m1, s)}`);
    }
    const p50 = await page.textContent('#live-schemes tr[data-scheme="shaw"] td:nth-child(4)');
    assert(/\d/.test(p50), `p50 "${p50}"`);
  });
  await check('live: items/s and req/s are over the labelled window, not the last refresh', async () => {
    // A refresh a second after the load (none in between): the last interval
    // holds no items, the 60 s window holds the load's 20 per scheme.
    await page.uncheck('#live-auto');
    await page.selectOption('#live-window', '60');
    await page.waitForTimeout(1200);
    await page.click('#live-refresh');
    await settle('live');
    const label = await page.textContent('#live-window-label');
    const m = /^\(last ([\d.]+) s\)$/.exec(label);
    assert(m, `window label "${label}"`);
    const rows = [['#live-schemes tr[data-scheme="shaw"]', 'shaw items', 20],
      ['#live-endpoints tr[data-endpoint="attention"]', 'attention requests', 100]];
    for (const [sel, what] of rows) {
      const r = Number(await page.textContent(`${sel} td:nth-child(3)`));
      assert(r > 0, `${what}/s shows ${r} beside p50 ${await page.textContent(`${sel} td:nth-child(4)`)} ${label}`);
    }
    // The rate is the window's count over the window's length, the label's.
    const span = Number(await page.getAttribute('#live', 'data-window-s'));
    close(Number(m[1]), span, 6e-3, 0, 'window length in the label (3 digits)');
    for (const [sel, what, min] of [...rows, ['#live-schemes tr[data-scheme="learned"]', 'learned items', 20]]) {
      const n = Number(await page.getAttribute(sel, 'data-window-count'));
      const r = Number(await page.textContent(`${sel} td:nth-child(3)`));
      assert(n >= min, `${what} in the window: ${n}`);
      close(r, n / span, 6e-3, 0, `${what}/s (shown to 3 digits)`);
    }
  });
  await check('live: the p99 line goes on over the window while no new items arrive', async () => {
    for (let i = 0; i < 2; i++) {
      await page.waitForTimeout(300);
      await page.click('#live-refresh');
      await settle('live');
    }
    const series = JSON.parse(await page.getAttribute('#live-p99-plot', 'data-series'));
    const shaw = series.shaw;
    assert(shaw && shaw.length >= 3, `shaw p99 points: ${JSON.stringify(shaw)}`);
    const lastTwo = shaw.slice(-2).map((p) => p[1]);
    assert(lastTwo.every((v) => v > 0), `shaw p99 at the last two refreshes: ${lastTwo}`);
    await drawn('#live-p99-plot', 0.01, 4);
  });
  await page.selectOption('#live-window', '10');
  await page.check('#live-auto');
  await check('live: the rate and p99 plots refresh by themselves', async () => {
    const before = await pixels('#live-rate-plot');
    await page.waitForTimeout(4500);
    const after = await drawn('#live-rate-plot', 0.01, 4);
    assert(after.hash !== before.hash, 'rate plot did not change in 4.5 s');
    await drawn('#live-p99-plot', 0.01, 4);
    const label = await page.textContent('#live-window-label');
    assert(/last [\d.]+ s/.test(label), `window label "${label}"`);
  });
  await check('live: since-start percentiles equal histogram_quantile of /metrics', async () => {
    await page.selectOption('#live-window', '0');
    await page.uncheck('#live-auto');
    await page.click('#live-refresh');
    await settle('live');
    const text = await api('/metrics');
    // p50 of shaw's compute time, as Prometheus computes it; the page's refresh
    // and this fetch see the same buckets (no shaw items since the load).
    const b = [...text.matchAll(/^posattn_compute_duration_seconds_bucket\{scheme="shaw",le="([^"]+)"\} (\S+)$/mg)]
      .map((m) => [Number(m[1]), Number(m[2])]);
    const n = b[b.length - 1][1], rank = 0.5 * n;
    let lo = 0, below = 0, want = null;
    for (const [le, c] of b) {
      if (c >= rank) { want = lo + (le - lo) * (rank - below) / (c - below); break; }
      lo = le; below = c;
    }
    const shown = await page.textContent('#live-schemes tr[data-scheme="shaw"] td:nth-child(4)');
    const m = /^([\d.e+-]+) (µs|ms|s)$/.exec(shown);
    assert(m, `p50 cell "${shown}"`);
    const secs = Number(m[1]) * { 'µs': 1e-6, ms: 1e-3, s: 1 }[m[2]];
    close(secs, want, 6e-3, 0, 'shaw p50 compute time (s), shown to 3 digits');
    await page.check('#live-auto');
  });
  await page.locator('#live').screenshot({ path: path.join(OUT, 'live.png') });

  // ------------------------------------------- a fresh page, at /#live
  // A second tab opened straight at the live section, the key already in
  // its sessionStorage, as a person coming back with a bookmark.
  const p2 = await context.newPage();
  p2.setDefaultTimeout(30000);
  p2.on('pageerror', (e) => consoleErrors.push(String(e)));
  await p2.addInitScript((k) => { if (location.origin !== 'null') sessionStorage.setItem('posattn-api-key', k); }, KEY);
  await p2.goto(base + '/#live');
  await check('live, first look: the p99 chart starts at the since-start values and fills at once', async () => {
    await settle('live', 30000, p2);
    const t0 = Date.now();
    const first = JSON.parse(await p2.getAttribute('#live-p99-plot', 'data-series'));
    assert(first && first.shaw && first.shaw.length >= 1, `p99 series at the first refresh: ${JSON.stringify(first)}`);
    // histogram_quantile(0.99) of shaw since start, as the page's first point.
    const text = await api('/metrics');
    const b = [...text.matchAll(/^posattn_compute_duration_seconds_bucket\{scheme="shaw",le="([^"]+)"\} (\S+)$/mg)]
      .map((m) => [Number(m[1]), Number(m[2])]);
    const n = b[b.length - 1][1], rank = 0.99 * n;
    let lo = 0, below = 0, want = null;
    for (const [le, c] of b) {
      if (c >= rank) { want = lo + (le - lo) * (rank - below) / (c - below); break; }
      lo = le; below = c;
    }
    close(first.shaw[0][1], want * 1e6, 1e-6, 1e-9, 'first shaw p99 point (\u00b5s)');
    // The first seconds are sampled every 0.5 s: points, not one lonely refresh.
    await p2.waitForFunction(() => JSON.parse(document.getElementById('live-p99-plot').dataset.series).shaw.length >= 3,
      null, { timeout: 1800 }).catch(() => {});
    const pts = JSON.parse(await p2.getAttribute('#live-p99-plot', 'data-series')).shaw.length;
    assert(pts >= 3, `${pts} refreshes ${((Date.now() - t0) / 1000).toFixed(1)} s after the first`);
    const label = await p2.textContent('#live-window-label');
    assert(/^\((last [\d.]+ s|since start: the first refresh)\)$/.test(label), `window label "${label}"`);
    await drawn('#live-p99-plot', 0.01, 4);
  });
  await check('a deep link (/#live) lands on its section after the plots above it arrived', async () => {
    for (const s of PANELS) await settle(s, 30000, p2);
    await p2.waitForTimeout(700);
    const [top, y] = await p2.evaluate(() => [document.getElementById('live').getBoundingClientRect().top, scrollY]);
    assert(top >= -1 && top <= 40, `#live is ${Math.round(top)} px from the top of the viewport (scrollY ${y})`);
    // Scrolling by hand is left alone: the page does not pull back.
    await p2.mouse.move(600, 400);
    await p2.mouse.wheel(0, -300);
    await p2.waitForTimeout(300);
    await p2.evaluate(() => window.dispatchEvent(new Event('resize')));
    await p2.waitForTimeout(300);
    const after = await p2.evaluate(() => document.getElementById('live').getBoundingClientRect().top);
    assert(after > top + 200, `after a wheel up #live is at ${Math.round(after)} px`);
  });
  await page.bringToFront();

  // ------------------------------------------------- the openapi viewer
  await check('the header link shows openapi.yaml readably: the text, an anchor per path, $ref links', async () => {
    const yaml = await (await fetch(base + '/openapi.yaml')).text();
    const href = await p2.$$eval('header a', (as) => as.filter((a) => a.textContent.trim() === 'openapi.yaml')
      .map((a) => a.getAttribute('href')).join());
    assert(href === '/web/openapi.html', `header link goes to ${href}`);
    await p2.bringToFront();
    await p2.click('header a[href="/web/openapi.html"]');
    await p2.waitForURL(base + '/web/openapi.html', { timeout: 10000 });
    await settle('spec', 15000, p2);
    const shown = await p2.textContent('#spec-text');
    assert(shown === yaml, `the text shown differs from /openapi.yaml (${shown.length} and ${yaml.length} chars)`);
    const paths = [...yaml.matchAll(/^ {2}(\/\S*):\s*$/mg)].map((m) => m[1]);
    assert(paths.length >= 10 && paths.includes('/v1/attention'), `paths in the YAML: ${paths}`);
    const anchors = await p2.evaluate((ps) => ps.map((p) => {
      const el = document.getElementById(p), a = el && el.querySelector('a');
      const toc = [...document.querySelectorAll('#spec-toc a')].some((t) => t.getAttribute('href') === '#' + p);
      return [p, !!el, a ? a.getAttribute('href') : null, el ? el.textContent.trim() : '', toc];
    }), paths);
    for (const [p, has, h, text, toc] of anchors)
      assert(has && h === '#' + p && text === p + ':' && toc, `path ${p}: anchor ${has}, link ${h}, "${text}", toc ${toc}`);
    const refs = await p2.$$eval('#spec-text a.ref', (as) => as.map((a) => [a.getAttribute('href'),
      !!document.getElementById(a.getAttribute('href').slice(1))]));
    const want = (yaml.match(/#\/components\/[\w-]+\/[\w.-]+/g) || []).length;
    assert(refs.length === want && want > 50, `${refs.length} $ref links for ${want} refs in the YAML`);
    const dangling = refs.filter(([, ok]) => !ok).map(([h]) => h);
    assert(!dangling.length, `$ref links to nothing: ${dangling.slice(0, 5)}`);
    // A $ref link moves to its component.
    await p2.click('#spec-text a.ref[href="#/components/schemas/AttentionRequest"] >> nth=0');
    const top = await p2.evaluate(() => document.getElementById('/components/schemas/AttentionRequest')
      .getBoundingClientRect().top);
    assert(top >= -1 && top <= 40, `AttentionRequest is ${Math.round(top)} px from the top`);
    const ext = await p2.evaluate((o) => performance.getEntriesByType('resource').map((r) => r.name)
      .filter((u) => !u.startsWith(o + '/')), base);
    assert(!ext.length, `resources from elsewhere: ${ext}`);
    const h = (await fetch(base + '/web/openapi.html')).headers;
    assert(h.get('content-type') === 'text/html; charset=utf-8' && /default-src 'self'/.test(h.get('content-security-policy')),
      `headers ${h.get('content-type')}, ${h.get('content-security-policy')}`);
  });
  await check('a deep link into openapi.html (#/v1/analyze) lands on that path once the text arrived', async () => {
    await p2.goto('about:blank');
    await p2.goto(base + '/web/openapi.html#/v1/analyze');
    await settle('spec', 15000, p2);
    await p2.waitForTimeout(200);
    const top = await p2.evaluate(() => document.getElementById('/v1/analyze').getBoundingClientRect().top);
    assert(top >= -1 && top <= 40, `/v1/analyze is ${Math.round(top)} px from the top`);
    await p2.screenshot({ path: path.join(OUT, 'openapi.png') });
  });
  await p2.close();
  await page.bringToFront();

  // ---------------------------------------------------- keyboard and phone
  await check('keyboard: Tab reaches the key field, sliders, selects, plots and buttons', async () => {
    await page.evaluate(() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); });
    const want = ['api-key', 'sin-length', 'sin-dim', 'sin-enc-map', 'circle-pos', 'rope-pair', 'rope-score-plot',
      'bias-heads', 'alibi-head-0', 'att-causal', 'att-none', 'live-auto', 'live-load'];
    const seen = new Set();
    for (let i = 0; i < 120 && want.some((w) => !seen.has(w)); i++) {
      await page.keyboard.press('Tab');
      seen.add(await page.evaluate(() => document.activeElement && document.activeElement.id));
    }
    const missing = want.filter((w) => !seen.has(w));
    assert(!missing.length, `never focused: ${missing.join(', ')}`);
    const labelled = await page.$$eval('input, select, textarea', (els) =>
      els.filter((e) => !e.labels || !e.labels.length).map((e) => e.id));
    assert(!labelled.length, `controls without a label: ${labelled.join(', ')}`);
  });

  await page.screenshot({ path: path.join(OUT, 'desktop-full.png'), fullPage: true });

  await check('phone: at 390 px nothing overflows and the plots still draw', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForFunction(() => document.documentElement.scrollWidth <= 390, null, { timeout: 5000 })
      .catch(() => {});
    await page.waitForTimeout(300);
    const over = await page.evaluate(() => document.documentElement.scrollWidth);
    assert(over <= 390, `page is ${over} px wide at a 390 px viewport`);
    const wide = await page.$$eval('canvas', (cs) => cs.filter((c) => c.getBoundingClientRect().right > 390.5)
      .map((c) => c.id));
    assert(!wide.length, `canvases past the edge: ${wide.join(', ')}`);
    for (const id of ['sin-sim-map', 'rope-score-plot', 'alibi-head-0', 'att-rope'])
      await drawn('#' + id, 0.01, 4);
    await page.screenshot({ path: path.join(OUT, 'phone.png'), fullPage: true });
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(OUT, 'phone-top.png') });
    await page.locator('#rope').screenshot({ path: path.join(OUT, 'phone-rope.png') });
    await page.locator('#card-rope').screenshot({ path: path.join(OUT, 'phone-attention.png') });
    await page.locator('#attention').screenshot({ path: path.join(OUT, 'phone-attention-options.png') });
  });

  await check('a plot whose box has no width yet draws nothing and no error, then draws', async () => {
    // The sinusoidal circle is sized from its box: hidden (width 0) it once
    // drew a circle of radius -28, an IndexSizeError seen in CI.
    const before = consoleErrors.length;
    await page.evaluate(() => { document.getElementById('circle').parentElement.style.display = 'none'; });
    await page.waitForTimeout(200);
    await page.evaluate(() => {
      const c = document.getElementById('circle-controls');
      c.dispatchEvent(new Event('input', { bubbles: true }));
    });
    await page.waitForTimeout(100);
    assert(consoleErrors.length === before, consoleErrors.slice(before).join(' | '));
    await page.evaluate(() => { document.getElementById('circle').parentElement.style.display = ''; });
    await drawn('#circle', 0.01, 4);
  });

  // ------------------------------------------- posattn-load's HTML report
  await check('posattn-load --html: latency charts on a log axis by default, a checkbox for linear', async () => {
    assert(fs.existsSync(LOAD), `${LOAD} is missing: build it first (make ${path.relative(ROOT, LOAD)})`);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'posattn-ui-load-'));
    tmpDirs.push(dir);
    const out = path.join(dir, 'report.html');
    // Two lengths whose latencies differ some 30-fold: on a linear axis the
    // short one's bars are a few pixels.
    await runProgram(LOAD, ['--spawn', POSATTND, '--schemes', 'none', '--lengths', '8,768', '--heads', '4',
      '--head-dim', '32', '--requests', '30', '--concurrency', '1', '--encoding', 'b64', '--html', out, '--quiet'], 90000);
    const html = fs.readFileSync(out, 'utf8');
    assert(!/<script|\b(src|href)=/i.test(html), 'the report has scripts or external resources');
    const p3 = await context.newPage();
    await p3.setContent(html);
    const chart = () => p3.evaluate(() => [...document.querySelectorAll('figure svg')].slice(0, 3).map((svg) => {
      const g = [...svg.querySelectorAll('g')].find((e) => getComputedStyle(e).display !== 'none');
      const root = g || svg;
      return {
        scale: g ? g.getAttribute('class') : null,
        unit: [...root.querySelectorAll('text[transform^="rotate(-90"]')].map((t) => t.textContent).join(),
        ticks: [...root.querySelectorAll('line')].map((l, i) => [Number(root.querySelectorAll('line + text')[i].textContent),
          Number(l.getAttribute('y1'))]),
        bars: [...root.querySelectorAll('rect')].filter((r) => r.querySelector('title')).map((r) =>
          [Number(/: (\S+) /.exec(r.querySelector('title').textContent)[1]), Number(r.getAttribute('y')),
            Number(r.getAttribute('height'))]),
      };
    }));
    // Every bar's top on the axis its ticks draw: y linear in log10(v) (log)
    // or in v (linear), within rounding to pixels.
    const onAxis = (c, f, what) => {
      assert(c.ticks.length >= 2 && c.bars.length >= 8, `${what}: ${c.ticks.length} ticks, ${c.bars.length} bars`);
      const [a, b] = [c.ticks[0], c.ticks[c.ticks.length - 1]];
      const Y = (v) => a[1] + (f(v) - f(a[0])) / (f(b[0]) - f(a[0])) * (b[1] - a[1]);
      for (const [v, y] of c.ticks) assert(Math.abs(Y(v) - y) <= 1.01, `${what}: tick ${v} at y ${y}, not ${Y(v)}`);
      for (const [v, y] of c.bars) if (v > 0) assert(Math.abs(Y(v) - y) <= 1.51, `${what}: bar ${v} at y ${y}, not ${Y(v)}`);
      return Math.min(...c.bars.filter(([v]) => v > 0).map(([, , h]) => h));
    };
    const [lat, thr, srv] = await chart();
    assert(lat.scale === 'scale-log' && /log scale/.test(lat.unit), `latency chart shows ${lat.scale} (${lat.unit})`);
    assert(srv.scale === 'scale-log', `server time chart shows ${srv.scale}`);
    assert(thr.scale === null, 'the throughput chart should keep its one linear axis');
    for (const [v] of lat.ticks)
      assert([1, 2, 5].some((m) => Math.abs(v / 10 ** Math.floor(Math.log10(v) + 1e-9) - m) < 1e-6), `log tick ${v}`);
    const vs = lat.bars.map(([v]) => v);
    assert(Math.max(...vs) / Math.min(...vs) > 5, `latencies ${Math.min(...vs)}..${Math.max(...vs)} ms: too close to show`);
    const logMin = onAxis(lat, Math.log10, 'log latency');
    assert(logMin >= 15, `the smallest latency bar is ${logMin} px high on the log axis`);
    await p3.screenshot({ path: path.join(OUT, 'load-report-log.png'), fullPage: true });
    await p3.click('label[for="linear-axes"]');
    const [lin, , srvLin] = await chart();
    assert(lin.scale === 'scale-lin' && !/log/.test(lin.unit) && srvLin.scale === 'scale-lin',
      `after the switch: ${lin.scale}, ${srvLin.scale} (${lin.unit})`);
    assert(lin.ticks[0][0] === 0, `linear axis starts at ${lin.ticks[0][0]}`);
    const linMin = onAxis(lin, (v) => v, 'linear latency');
    assert(linMin < logMin, `smallest bar ${linMin} px linear, ${logMin} px log`);
    await p3.screenshot({ path: path.join(OUT, 'load-report-linear.png'), fullPage: true });
    await p3.close();
  });

  // --------------------------------------------------------------- HTTPS
  await check('over HTTPS (--tls-cert/--tls-key, a private CA): the page works, same-origin API calls succeed', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'posattn-ui-tls-'));
    tmpDirs.push(dir);
    const p = (n) => path.join(dir, n), ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
    await runProgram('openssl', ['req', '-x509', ...ec, '-keyout', p('ca.key'), '-out', p('ca.crt'), '-days', '2',
      '-subj', '/CN=posattn ui test CA']);
    await runProgram('openssl', ['req', ...ec, '-keyout', p('srv.key'), '-out', p('srv.csr'), '-subj', '/CN=127.0.0.1']);
    fs.writeFileSync(p('ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
    await runProgram('openssl', ['x509', '-req', '-in', p('srv.csr'), '-CA', p('ca.crt'), '-CAkey', p('ca.key'),
      '-CAcreateserial', '-out', p('srv.crt'), '-days', '1', '-extfile', p('ext.cnf')]);
    const tbase = await startServer('posattnd (TLS)', ['--tls-cert', p('srv.crt'), '--tls-key', p('srv.key')]);
    assert(tbase.startsWith('https://127.0.0.1:'), `TLS posattnd says ${tbase}`);
    log(`ui: posattnd (TLS) at ${tbase}`);
    // The CA is this run's own: Chromium is told to take the certificate
    // (the handshake, the certificate's issuer and the origin are checked below).
    tlsBrowser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
    const ctx = await tlsBrowser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    await routeWeb(ctx);
    const tp = await ctx.newPage();
    tp.setDefaultTimeout(30000);
    const answers = [], failures = [], errors = [];
    let tls = null;   // the TLS details of the first API answer
    tp.on('response', (r) => {
      answers.push([r.url(), r.status(), r.request().method()]);
      if (!tls && /\/v1\//.test(r.url())) tls = r.securityDetails();
    });
    tp.on('requestfailed', (r) => failures.push(`${r.url()}: ${r.failure() && r.failure().errorText}`));
    tp.on('pageerror', (e) => errors.push(String(e)));
    tp.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    await tp.addInitScript((k) => { if (location.origin !== 'null') sessionStorage.setItem('posattn-api-key', k); }, KEY);
    const resp = await tp.goto(tbase + '/');
    assert(resp.status() === 200, `GET / over HTTPS: ${resp.status()}`);
    for (const s of PANELS) await settle(s, 30000, tp);
    const sec = await tls;
    assert(sec && /^TLS 1\.[23]$/.test(sec.protocol) && sec.issuer === 'posattn ui test CA' && sec.subjectName === '127.0.0.1',
      `TLS details ${JSON.stringify(sec)}`);
    assert(await tp.evaluate(() => location.protocol === 'https:' && window.isSecureContext), 'not a secure context');
    await tp.click('#live-load');
    await tp.waitForFunction(() => /^sent \d+ requests|error/.test(document.getElementById('live-load-result').textContent +
      (document.getElementById('live-load-result').classList.contains('error') ? ' error' : '')), null, { timeout: 60000 })
      .catch(() => {});
    const res = await tp.textContent('#live-load-result');
    assert(/^sent \d+ requests/.test(res), `load over HTTPS: "${res}"`);
    await settle('live', 30000, tp);
    for (const id of ['sin-sim-map', 'rope-score-plot', 'att-rope', 'live-rate-plot']) {
      const px = await tp.$eval('#' + id, (c) => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && !(d[i] > 245 && d[i + 1] > 245 && d[i + 2] > 245)) n++;
        return n / (d.length / 4);
      });
      assert(px > 0.01, `#${id} blank over HTTPS`);
    }
    await tp.goto(tbase + '/web/openapi.html');
    await settle('spec', 15000, tp);
    const api_ = answers.filter(([u]) => /\/(v1\/|metrics|openapi\.yaml)/.test(u));
    for (const want of ['/v1/encode', '/v1/analyze', '/v1/attention', '/v1/schemes', '/metrics', '/openapi.yaml'])
      assert(api_.some(([u]) => u.startsWith(tbase + want)), `no ${want} over HTTPS`);
    const bad = answers.filter(([u, st]) => !u.startsWith(tbase + '/') || st !== 200);
    assert(!bad.length, `answers not 200 from ${tbase}: ${JSON.stringify(bad.slice(0, 3))}`);
    assert(!failures.length && !errors.length, `failed: ${failures.slice(0, 3)} ${errors.slice(0, 3)}`);
    await tp.goto(tbase + '/#live');
    await settle('live', 30000, tp);
    await tp.screenshot({ path: path.join(OUT, 'https.png') });
    await ctx.close();
  });

  await check('no script errors in the console', async () => {
    assert(!consoleErrors.length, consoleErrors.slice(0, 3).join(' | '));
  });
}

try {
  await run();
} catch (e) {
  failed++;
  log(`FAIL ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' ') : e}`);
} finally {
  clearTimeout(watchdog);
  await cleanup();
}
// posattnd drains and exits 0 on SIGTERM; anything else (a sanitizer report
// included, when POSATTND is an ASan build) is a failure.
for (const s of servers) {
  if (s.exit !== null && s.exit !== 0) {
    failed++;
    log(`FAIL ${s.name} exited with ${s.exit} on SIGTERM: ${s.err.trim().split('\n').slice(-8).join(' | ')}`);
  } else if (s.exit === 0) {
    passed++;
    log(`ok   ${s.name} exited 0 on SIGTERM`);
  }
}
log(`ui: screenshots in ${path.relative(process.cwd(), OUT) || '.'}`);
log(`ui: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
