// cors.mjs - a web page of another origin calls posattnd in Chromium, with
// the JS client (clients/js/posattn.js), as docs/running.md's "Calling from
// a web page elsewhere (CORS)" says it can.
//
// A small Node HTTP server on its own 127.0.0.1 port (another origin than
// posattnd's) serves a page that imports the client and calls two posattnd
// with the API key: one started with --cors-origin naming the page's
// origin, whose answers the page must get (an attention output equal to the
// same call made from Node, /v1/schemes, and Server-Timing readable from a
// script), and one started without the flag, whose answers the browser must
// keep from the page (the client's TRANSPORT error). Part of make ui-test
// (tests/ui/ui-test.mjs), and runs alone:
//
//   POSATTND=build/posattnd node tests/ui/cors.mjs     (make ui-cors)
//
// which prints "ui-cors: N passed, M failed" and exits 0 only when all passed.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import {
  ROOT, KEY, CHROMIUM, FLAGS, context, setContext, servers, tally, log, check, assert, startServer, cleanup,
} from './harness.mjs';
import { Client } from '../../clients/js/posattn.js';

const CLIENT_JS = path.join(ROOT, 'clients/js/posattn.js');

// The page: calls the posattnd of ?api= through the client, and leaves what
// happened in window.corsResult.
const PAGE = `<!doctype html>
<meta charset="utf-8"><title>posattn from another origin</title>
<script type="module">
import { Client } from '/posattn.js';
const p = new URLSearchParams(location.search);
const api = p.get('api');
const out = { origin: location.origin };
try {
  const c = new Client(api, { apiKey: p.get('key') });
  const q = new Float32Array([1, 0, 0, 1]), v = new Float32Array([1, 2, 3, 4]);
  const r = await c.attention(q, q, v, { shape: [2, 1, 2], scheme: 'rope', causal: true });
  out.output = Array.from(r.output);
  out.schemes = (await c.schemes()).schemes.map((s) => s.type || s.name);
  const raw = await fetch(api + '/v1/schemes', { headers: { Authorization: 'Bearer ' + p.get('key') } });
  out.serverTiming = raw.headers.get('server-timing');
} catch (e) {
  out.error = (e.code || e.name) + ': ' + e.message;
}
window.corsResult = out;
</script>
`;

// Serves the page and the client on 127.0.0.1, any free port; resolves to
// {base, close}.
function pageServer() {
  const srv = http.createServer((req, res) => {
    const u = new URL(req.url, 'http://x');
    if (u.pathname === '/cors.html') {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(PAGE);
    } else if (u.pathname === '/posattn.js') {
      res.writeHead(200, { 'Content-Type': 'text/javascript; charset=utf-8' });
      res.end(fs.readFileSync(CLIENT_JS));
    } else {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('not here\n');
    }
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({
    base: `http://127.0.0.1:${srv.address().port}`,
    close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }),
  })));
}

// Opens the page in a new tab against api; resolves to window.corsResult and
// the tab's failed requests and console errors.
async function openPage(pageBase, api) {
  const tab = await context.newPage();
  const failed = [], errors = [];
  tab.on('requestfailed', (r) => failed.push(`${r.method()} ${r.url()}: ${r.failure() && r.failure().errorText}`));
  tab.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  tab.on('pageerror', (e) => errors.push(String(e)));
  try {
    await tab.goto(`${pageBase}/cors.html?api=${encodeURIComponent(api)}&key=${encodeURIComponent(KEY)}`);
    await tab.waitForFunction(() => window.corsResult !== undefined, null, { timeout: 30000 });
    return { result: await tab.evaluate(() => window.corsResult), failed, errors };
  } finally {
    await tab.close();
  }
}

export async function corsChecks() {
  const page = await pageServer();
  try {
    const allowed = await startServer('posattnd (--cors-origin)', ['--cors-origin', page.base, '--no-probe']);
    const plain = await startServer('posattnd (no --cors-origin)', ['--no-probe']);
    log(`ui: page at ${page.base}; posattnd with --cors-origin at ${allowed}, without at ${plain}`);

    await check('a page of another origin calls posattnd --cors-origin with the JS client', async () => {
      assert(new URL(page.base).origin !== new URL(allowed).origin, 'the page is not of another origin');
      const { result, failed, errors } = await openPage(page.base, allowed);
      assert(result.origin === page.base, `the page runs at ${result.origin}`);
      assert(!result.error, `the page's calls failed: ${result.error} | ${failed.join(' | ')} | ${errors.join(' | ')}`);
      // The same call from Node (no CORS there): the browser got the real answer.
      const q = new Float32Array([1, 0, 0, 1]), v = new Float32Array([1, 2, 3, 4]);
      const want = await new Client(allowed, { apiKey: KEY }).attention(q, q, v, { shape: [2, 1, 2], scheme: 'rope', causal: true });
      assert(JSON.stringify(result.output) === JSON.stringify(Array.from(want.output)),
        `output ${JSON.stringify(result.output)}, from Node ${JSON.stringify(Array.from(want.output))}`);
      assert(Array.isArray(result.schemes) && result.schemes.includes('rope'), `schemes ${JSON.stringify(result.schemes)}`);
      assert(/total;dur=/.test(result.serverTiming || ''), `Server-Timing read by the page: ${result.serverTiming}`);
      assert(!failed.length, `failed requests: ${failed.join(' | ')}`);
    });

    await check('the same page cannot read posattnd without --cors-origin (the browser blocks it)', async () => {
      const { result, failed, errors } = await openPage(page.base, plain);
      assert(result.error && /^TRANSPORT: /.test(result.error), `the page's calls: ${JSON.stringify(result)}`);
      assert(result.output === undefined, 'the page got an output');
      assert(errors.some((e) => /CORS|Access-Control-Allow-Origin/.test(e)),
        `Chromium did not name CORS: ${errors.join(' | ') || failed.join(' | ')}`);
    });
  } finally {
    await page.close();
  }
}

// Alone: a browser of its own, the checks, the servers stopped and counted.
if (process.argv[1] && pathToFileURL(path.resolve(process.argv[1])).href === import.meta.url) {
  const watchdog = setTimeout(async () => {
    log('ui-cors: FAIL - timed out after 120 s');
    await cleanup();
    process.exit(1);
  }, 120000);
  try {
    const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
    setContext(await browser.newContext());
    await corsChecks();
  } catch (e) {
    tally.failed++;
    log(`FAIL ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' ') : e}`);
  } finally {
    clearTimeout(watchdog);
    const browser = context && context.browser();
    await cleanup();
    if (browser) await browser.close().catch(() => {});
  }
  for (const s of servers) {
    if (s.exit === 0) tally.passed++;
    else { tally.failed++; log(`FAIL ${s.name} exited with ${s.exit} on SIGTERM: ${s.err.trim().split('\n').slice(-4).join(' | ')}`); }
  }
  log(`ui-cors: ${tally.passed} passed, ${tally.failed} failed`);
  process.exit(tally.failed ? 1 : 0);
}
