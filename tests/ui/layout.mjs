// layout.mjs - the browser test of the page's layout (tests/ui/ui-test.mjs):
// Tab reaches every kind of control, every control has a label, a 390 px
// wide phone screen does not overflow, and a plot with no width yet draws
// nothing and throws nothing.

import path from 'node:path';
import { OUT, consoleErrors, check, assert } from './harness.mjs';
import { page, drawn } from './page.mjs';

export async function layoutChecks() {
  await check('navigation: the top bar links every panel', async () => {
    const missing = await page.$$eval('main > section[id]', (ss) => ss.map((s) => s.id)
      .filter((id) => !document.querySelector(`header nav a[href="#${id}"]`)));
    assert(!missing.length, `panels without a link in the navigation: ${missing.join(', ')}`);
  });

  // ---------------------------------------------------- keyboard and phone
  await check('keyboard: Tab reaches the key field, sliders, selects, plots and buttons', async () => {
    await page.evaluate(() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); });
    const want = ['api-key', 'sin-length', 'sin-dim', 'sin-enc-map', 'circle-pos', 'rope-pair', 'rope-score-plot',
      'bias-heads', 'alibi-head-0', 'att-causal', 'att-none', 'packed-lengths', 'packed-full',
      'diff-lambda', 'diff-A', 'models-model', 'models-weights', 'live-auto', 'live-load'];
    const seen = new Set();
    for (let i = 0; i < 200 && want.some((w) => !seen.has(w)); i++) {
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
    for (const id of ['sin-sim-map', 'rope-score-plot', 'alibi-head-0', 'att-rope', 'models-weights'])
      await drawn('#' + id, 0.01, 4);
    await page.screenshot({ path: path.join(OUT, 'phone.png'), fullPage: true });
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(OUT, 'phone-top.png') });
    await page.locator('#rope').screenshot({ path: path.join(OUT, 'phone-rope.png') });
    await page.locator('#card-rope').screenshot({ path: path.join(OUT, 'phone-attention.png') });
    await page.locator('#attention').screenshot({ path: path.join(OUT, 'phone-attention-options.png') });
    await page.locator('#models').screenshot({ path: path.join(OUT, 'phone-models.png') });
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
}
