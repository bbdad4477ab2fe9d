// https.mjs - the browser test over HTTPS (tests/ui/ui-test.mjs): a second
// posattnd with --tls-cert/--tls-key from a CA made by openssl for this run
// serves the page, and every API call it makes is answered, same-origin.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import {
  OUT, KEY, CHROMIUM, FLAGS, tlsBrowser, setTlsBrowser, tmpDirs, log, check, assert, startServer, runProgram, routeWeb,
} from './harness.mjs';
import { PANELS, settle } from './page.mjs';

export async function httpsChecks() {
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
    setTlsBrowser(await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS }));
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
}
