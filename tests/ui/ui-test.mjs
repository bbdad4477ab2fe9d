// ui-test.mjs - the web page of posattnd in a real browser (make ui-test).
//
// Starts build/posattnd on 127.0.0.1, port 0 (the port is read from its
// first stdout line) with --api-key and two models (--model, the fixtures
// gemma2.json and gpt_oss.json), opens GET / in headless Chromium
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
//   UI_WEB_DIR=DIR: the page's files from DIR (see routeWeb in harness.mjs)
//
// Exits 0 only when every check passed; the last line is
// "ui: N passed, M failed". Bounded by UI_TIMEOUT seconds (default 240); the
// servers and the browsers are stopped on every exit path.
//
// This file is the runner: it starts the server and the browser, runs the
// checks of each module in order (one per panel of the page: key.mjs,
// sinusoidal.mjs, rope.mjs, bias.mjs, attention.mjs, shapes.mjs (packed
// sequences and differential attention), mla.mjs, models.mjs, extrap.mjs, live.mjs;
// then second-tab.mjs, layout.mjs, load-report.mjs, https.mjs, cors.mjs) and reports.
// harness.mjs and page.mjs hold what the modules share.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import {
  OUT, TIMEOUT_S, CHROMIUM, FLAGS, servers, context, tmpDirs, tally, consoleErrors, base,
  log, cleanup, check, assert, startServer, routeWeb, setContext, setBase,
} from './harness.mjs';
import { page, posted, setPage } from './page.mjs';
import { keyChecks } from './key.mjs';
import { sinusoidalChecks } from './sinusoidal.mjs';
import { ropeChecks } from './rope.mjs';
import { biasChecks } from './bias.mjs';
import { attentionChecks } from './attention.mjs';
import { shapesChecks } from './shapes.mjs';
import { mlaChecks } from './mla.mjs';
import { modelsChecks, MODEL_FLAGS } from './models.mjs';
import { extrapChecks } from './extrap.mjs';
import { liveChecks } from './live.mjs';
import { secondTabChecks } from './second-tab.mjs';
import { layoutChecks } from './layout.mjs';
import { loadReportChecks } from './load-report.mjs';
import { httpsChecks } from './https.mjs';
import { corsChecks } from './cors.mjs';

const watchdog = setTimeout(async () => {
  log(`ui: FAIL - timed out after ${TIMEOUT_S} s`);
  tally.failed++;
  await cleanup();
  log(`ui: ${tally.passed} passed, ${tally.failed} failed`);
  process.exit(1);
}, TIMEOUT_S * 1000);

// ------------------------------------------------------------ the checks

async function run() {
  fs.mkdirSync(OUT, { recursive: true });
  setBase(await startServer('posattnd', MODEL_FLAGS));
  log(`ui: posattnd at ${base}`);
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'posattn-ui-'));
  tmpDirs.push(userDir);
  setContext(await chromium.launchPersistentContext(userDir, {
    executablePath: CHROMIUM, headless: true, args: FLAGS,
    viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1,
  }));
  await routeWeb(context);
  setPage(context.pages()[0] || await context.newPage());
  page.setDefaultTimeout(30000);
  page.on('console', (m) => { if (m.type() === 'error' && !/401/.test(m.text())) consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  page.on('request', (r) => { if (r.method() === 'POST') posted.push({ url: r.url(), body: r.postData() }); });

  await keyChecks();
  await sinusoidalChecks();
  await ropeChecks();
  await biasChecks();
  await attentionChecks();
  await shapesChecks();
  await mlaChecks();
  await modelsChecks();
  await extrapChecks();
  await liveChecks();
  await secondTabChecks();
  await layoutChecks();
  await loadReportChecks();
  await httpsChecks();
  await corsChecks();

  await check('no script errors in the console', async () => {
    assert(!consoleErrors.length, consoleErrors.slice(0, 3).join(' | '));
  });
}

try {
  await run();
} catch (e) {
  tally.failed++;
  log(`FAIL ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' ') : e}`);
} finally {
  clearTimeout(watchdog);
  await cleanup();
}
// posattnd drains and exits 0 on SIGTERM; anything else (a sanitizer report
// included, when POSATTND is an ASan build) is a failure.
for (const s of servers) {
  if (s.exit !== null && s.exit !== 0) {
    tally.failed++;
    log(`FAIL ${s.name} exited with ${s.exit} on SIGTERM: ${s.err.trim().split('\n').slice(-8).join(' | ')}`);
  } else if (s.exit === 0) {
    tally.passed++;
    log(`ok   ${s.name} exited 0 on SIGTERM`);
  }
}
log(`ui: screenshots in ${path.relative(process.cwd(), OUT) || '.'}`);
log(`ui: ${tally.passed} passed, ${tally.failed} failed`);
process.exit(tally.failed ? 1 : 0);
