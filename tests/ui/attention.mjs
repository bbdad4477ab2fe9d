// attention.mjs - the browser test of the Attention panel
// (tests/ui/ui-test.mjs): weights and permutation verdicts equal the API's,
// causal and a user-given x, then the options of current models (softcap,
// sinks, chunk_size, the mask grid by mouse and keyboard, its presets) as
// sent and as drawn, and bad values showing the server's error.

import path from 'node:path';
import { OUT, consoleErrors, check, assert, close, api } from './harness.mjs';
import { page, posted, settle, pixels, drawn, heatCell } from './page.mjs';

export async function attentionChecks() {
  // ----------------------------------------------------------- attention
  const SCHEMES = ['none', 'sinusoidal', 'learned', 'shaw', 't5', 'rope', 'alibi', 'kerple', 'sandwich', 'xpos',
    'rope2d', 'fire', 'cope'];
  // This panel's weights request: one item per scheme, with the scheme as id
  // (the Models panel's requests return weights too).
  const attReq = (p) => p.url.endsWith('/v1/attention') && /"return"/.test(p.body) &&
    JSON.parse(p.body).inputs[0].id === SCHEMES[0];
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
      // NoPE, and the biases of |qpos - kpos| without a causal mask (KERPLE,
      // Sandwich), cannot tell a sequence from its reverse: the permutation
      // the panel tries. fire's items are always causal: order-aware.
      if (['none', 'kerple', 'sandwich'].includes(t)) {
        assert(/order-blind/.test(verdict) && ref.max_abs_diff < 1e-5, `${t}: ${verdict}`);
      }
      else assert(/order-aware/.test(verdict) && ref.max_abs_diff > 1e-3, `${t}: ${verdict}`);
    }
  });
  await check('attention: a rope weight equals /v1/attention on the same input', async () => {
    const req = [...posted].reverse().find(attReq);
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
    const req = [...posted].reverse().find(attReq);
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
  await check('attention options: an answer that lands after a newer change is dropped; ready waits for the new one', async () => {
    // The first request's answer is held in the test until the next change
    // was made, then handed over at once: well inside the 120 ms of quiet
    // before the page's next run. The panel must not show it, nor say ready.
    const was = await page.inputValue('#att-softcap');
    let held = null, first = true;
    const got = new Promise((resolve) => {
      page.route('**/v1/attention', async (route) => {
        if (!first) return route.continue();
        first = false;
        held = { route, response: await route.fetch() };
        resolve();
      });
    });
    try {
      await page.fill('#att-softcap', '0.5');
      await got;
      await page.fill('#att-softcap', '0.25');
      await held.route.fulfill({ response: held.response });
      await settle('attention');
      const st = await page.textContent('#att-status');
      assert(/softcap 0\.25/.test(st), `ready with the stale answer: status "${st}"`);
      assert(lastAtt().inputs.every((it) => it.softcap === 0.25), 'the last request is not softcap 0.25');
    } finally {
      await page.unroute('**/v1/attention');
    }
    await page.fill('#att-softcap', was);
    await settle('attention');
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
}
