// harness.mjs - what every module of the browser test (tests/ui/ui-test.mjs)
// shares: its settings from the environment, the posattnd servers and other
// programs it starts, the named checks and their tally, the API called
// straight (to compare with the page), and cleanup on every exit path.

import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const POSATTND = path.resolve(ROOT, process.env.POSATTND || 'build/posattnd');
export const OUT = path.resolve(ROOT, process.env.UI_OUT || 'build/ui');
export const TIMEOUT_S = Number(process.env.UI_TIMEOUT || 240);
export const KEY = 'ui-test-key';
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
// posattn-load, for its HTML report's charts: beside posattnd unless POSATTN_LOAD says.
export const LOAD = path.resolve(ROOT, process.env.POSATTN_LOAD || path.join(path.dirname(POSATTND), 'posattn-load'));
export const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// Each posattnd started: {name, proc, err (its last stderr), exit}.
export const servers = [];
export let context = null, tlsBrowser = null, base = '';
export const tmpDirs = [];
export const tally = { passed: 0, failed: 0 };   // the checks so far
export const consoleErrors = [];

export function log(msg) { process.stdout.write(msg + '\n'); }

export async function cleanup() {
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

// One named check: a failure is reported and counted, and the run goes on.
export async function check(name, fn) {
  try {
    await fn();
    tally.passed++;
    log(`ok   ${name}`);
  } catch (e) {
    tally.failed++;
    log(`FAIL ${name}: ${e && e.message ? e.message.split('\n')[0] : e}`);
  }
}
export function assert(cond, msg) { if (!cond) throw new Error(msg); }
export function close(a, b, rel = 1e-5, abs = 1e-6, what = 'value') {
  assert(Number.isFinite(a) && Number.isFinite(b) && Math.abs(a - b) <= abs + rel * Math.abs(b),
    `${what}: page shows ${a}, API says ${b}`);
}

// ------------------------------------------------------------ the server

// Starts posattnd (with --api-key; extra flags after) and resolves to its
// base URL, http:// or https:// as its first stdout line says.
export function startServer(name, extra = []) {
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
export function runProgram(file, args, timeout = 30000) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('POSATTN_')) env[k] = v;
  env.OPENBLAS_NUM_THREADS = '1';
  return new Promise((resolve, reject) => execFile(file, args, { env, timeout }, (e, out, err) =>
    (e ? reject(new Error(`${path.basename(file)} ${args[0]}: ${e.message.split('\n')[0]} ${String(err).slice(-400)}`))
      : resolve(out))));
}

export async function api(p, body) {
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
export async function routeWeb(ctx) {
  const dir = process.env.UI_WEB_DIR;
  if (!dir) return;
  await ctx.route((u) => /^\/(web\/[\w.-]+)?$/.test(u.pathname), async (route) => {
    const u = new URL(route.request().url());
    const file = path.join(dir, u.pathname === '/' ? 'index.html' : u.pathname.slice(5));
    if (!fs.existsSync(file)) return route.continue();
    await route.fulfill({ response: await route.fetch(), body: fs.readFileSync(file) });
  });
}


// The browser context, the HTTPS test's browser and the first server's URL,
// once run() or the HTTPS check has them.
export function setContext(c) { context = c; }
export function setTlsBrowser(b) { tlsBrowser = b; }
export function setBase(b) { base = b; }
