// key.mjs - the browser test's first look at the page (tests/ui/ui-test.mjs):
// GET / with its headers, the banner asking for the API key, and the key
// typed in, sent and kept; then the screenshot docs/web.png is taken from.

import path from 'node:path';
import { OUT, KEY, base, check, assert } from './harness.mjs';
import { page, PANELS, settle } from './page.mjs';

export async function keyChecks() {
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
}
