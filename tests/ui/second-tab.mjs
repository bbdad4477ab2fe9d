// second-tab.mjs - the browser test's second tab (tests/ui/ui-test.mjs),
// opened at /#live as from a bookmark: the live panel's first look, the deep
// link landing on its section, and the openapi.yaml viewer (/web/openapi.html)
// reached from the header, with its own deep link.

import path from 'node:path';
import { OUT, KEY, context, base, consoleErrors, check, assert, close, api } from './harness.mjs';
import { page, PANELS, settle, drawn } from './page.mjs';

export async function secondTabChecks() {
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
}
