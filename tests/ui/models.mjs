// models.mjs - the browser test of the Models panel (tests/ui/ui-test.mjs):
// posattnd runs with --model g2=gemma2.json --model oss=gpt_oss.json (see
// MODEL_FLAGS); the picker lists both, the layer table shows Gemma 2's
// sliding and full layers with their config keys, a chosen layer's weights
// are fetched (200) and drawn and equal the API's, a position step makes the
// window hide keys, gpt-oss gets its sinks, a server error shows its
// message, and a posattnd without --model says how to load one.

import path from 'node:path';
import { ROOT, OUT, KEY, context, consoleErrors, log, check, assert, close, api, startServer } from './harness.mjs';
import { page, posted, settle, pixels, drawn, heatCell } from './page.mjs';

const fixture = (f) => path.join(ROOT, 'tests/fixtures/models', f);
export const MODEL_FLAGS = ['--model', `g2=${fixture('gemma2.json')}`, '--model', `oss=${fixture('gpt_oss.json')}`];

// The last /v1/attention request the Models panel sent (its items name a model).
function lastModelReq() {
  const req = [...posted].reverse().find((p) => p.url.endsWith('/v1/attention') && /"model"/.test(p.body));
  assert(req, 'the Models panel sent no attention request');
  return JSON.parse(req.body);
}
// Waits for the panel's /v1/attention answer for (model, layer) while act() runs.
async function fetched(model, layer, act) {
  const resp = page.waitForResponse((r) => {
    if (!r.url().endsWith('/v1/attention') || r.request().method() !== 'POST') return false;
    const it = JSON.parse(r.request().postData() || '{}').inputs;
    return Array.isArray(it) && it[0] && it[0].model === model && it[0].layer === layer;
  }, { timeout: 30000 });
  await act();
  const r = await resp;
  await settle('models');
  return r;
}
const weightsOf = (res, L, h = 0) => res.outputs[0].weights.data.slice(h * L * L, (h + 1) * L * L);

export async function modelsChecks() {
  await page.evaluate(() => document.getElementById('models').scrollIntoView());
  await settle('models');
  await check('models: the picker lists the models GET /v1/models lists (g2, oss)', async () => {
    const listed = (await api('/v1/models')).models;
    const opts = await page.$$eval('#models-model option', (os) => os.map((o) => [o.value, o.textContent]));
    assert(JSON.stringify(opts.map((o) => o[0])) === JSON.stringify(listed.map((m) => m.name)) &&
      opts.length === 2 && opts[0][0] === 'g2' && opts[1][0] === 'oss', `options ${JSON.stringify(opts)}`);
    assert(/gemma2, 4 layers/.test(opts[0][1]) && /gpt_oss, 4 layers/.test(opts[1][1]), `option texts ${opts}`);
    assert(await page.isHidden('#models-none'), 'the no-model note is shown with models loaded');
  });
  await check('models: gemma2\'s table has sliding layers 0 and 2 (window 4096) and full 1 and 3, with config keys', async () => {
    const rows = await page.$$eval('#models-layers tbody tr', (trs) => trs.map((tr) => ({
      first: tr.dataset.first, last: tr.dataset.last, attention: tr.dataset.attention,
      kind: tr.querySelector('.kind').firstChild.textContent, wc: tr.querySelector('.wc').firstChild.textContent,
      wcKey: (tr.querySelector('.wc .cfg') || {}).textContent, wcTitle: tr.querySelector('.wc').title,
      text: tr.textContent })));
    assert(rows.length === 4, `${rows.length} rows`);
    rows.forEach((r, l) => {
      const sliding = l % 2 === 0;
      assert(r.first === String(l) && r.last === String(l), `row ${l}: layers ${r.first}-${r.last}`);
      assert(r.attention === (sliding ? 'sliding_attention' : 'full_attention') &&
        r.kind.startsWith(sliding ? 'sliding' : 'full'), `row ${l}: ${r.attention}, "${r.kind}"`);
      if (sliding) {
        assert(r.wc === 'window 4096' && r.wcKey === 'sliding_window' && /config "sliding_window": 4096/.test(r.wcTitle),
          `row ${l}: window cell "${r.wc}" key "${r.wcKey}" title "${r.wcTitle}"`);
      } else assert(r.wc === '-', `row ${l}: window cell "${r.wc}"`);
      assert(/0\.0625\s*query_pre_attn_scalar/.test(r.text) && /50\s*attn_logit_softcapping/.test(r.text) &&
        /rope neox, base 10000/.test(r.text) && /4 \/ 2 \u00d7 16/.test(r.text), `row ${l}: "${r.text}"`);
    });
  });
  await check('models: choosing layer 2 fetches its weights (200) and draws them; they equal the API\'s', async () => {
    const r = await fetched('g2', 2, () => page.click('#models-layers button.layer[data-layer=":2"]'));
    assert(r.status() === 200, `/v1/attention answered ${r.status()}`);
    assert(await page.inputValue('#models-layer') === ':2', 'the layer list does not follow the table');
    assert(await page.$eval('#models-layers tbody tr:nth-child(3)', (tr) => tr.classList.contains('current')),
      'row of layer 2 not marked current');
    const body = lastModelReq(), it = body.inputs[0];
    assert(it.model === 'g2' && it.layer === 2 && JSON.stringify(it.return) === '["weights"]', `item ${JSON.stringify(it).slice(0, 200)}`);
    assert(JSON.stringify(it.q.shape) === '[12,4,16]' && JSON.stringify(it.k.shape) === '[12,2,16]' &&
      JSON.stringify(it.v.shape) === '[12,2,16]', `shapes ${it.q.shape} ${it.k.shape} ${it.v.shape}`);
    for (const f of ['scheme', 'scale', 'softcap', 'window', 'sinks']) assert(!(f in it), `${f} sent: the config decides it`);
    // Gemma 2's layers differ only by the window, which hides nothing among
    // tokens one position apart: the same seed draws the same map.
    await drawn('#models-weights');
    const w = weightsOf(await api('/v1/attention', body), 12);
    close((await heatCell('models-weights', 3, 1)).value, w[3 * 12 + 1], 1e-5, 1e-6, 'g2 layer 2 weight[0][3][1]');
    const head0 = await pixels('#models-weights');
    await page.selectOption('#models-head', '1');
    await settle('models');
    assert((await pixels('#models-weights')).hash !== head0.hash, 'the map did not change with the head');
    const w1 = weightsOf(await api('/v1/attention', lastModelReq()), 12, 1);
    close((await heatCell('models-weights', 5, 2)).value, w1[5 * 12 + 2], 1e-5, 1e-6, 'head 1 weight[1][5][2]');
    await page.selectOption('#models-head', '0');
    await settle('models');
  });
  await check('models: a position step spreads the tokens; layer 2\'s window 4096 then hides keys, layer 1 does not', async () => {
    assert(await page.inputValue('#models-step') === '1', 'the step does not start at 1');
    assert(!/hides [1-9]/.test(await page.textContent('#models-status')), 'the window hides keys one position apart');
    const before = await pixels('#models-weights');
    await page.click('#models-spread');   // about three windows over 12 tokens: ceil(4096 / 4)
    await settle('models');
    assert(await page.inputValue('#models-step') === '1024', `step ${await page.inputValue('#models-step')}`);
    const body = lastModelReq(), it = body.inputs[0];
    assert(it.layer === 2 && JSON.stringify(it.q_positions) === JSON.stringify(Array.from({ length: 12 }, (_, i) => i * 1024)) &&
      JSON.stringify(it.k_positions) === JSON.stringify(it.q_positions), `positions ${it.q_positions}`);
    const w = weightsOf(await api('/v1/attention', body), 12);
    assert(w[5 * 12 + 1] === 0 && w[5 * 12 + 2] > 0, 'reference: the window does not hide 4096 back');
    const off = await heatCell('models-weights', 5, 1), on = await heatCell('models-weights', 5, 2);
    assert(off.value === null && /query 5120, key 1024: masked/.test(off.text), `query 5, key 1: "${off.text}"`);
    close(on.value, w[5 * 12 + 2], 1e-5, 1e-6, 'query 5, key 2 (3072 back)');
    assert((await pixels('#models-weights')).hash !== before.hash, 'the map did not change with the step');
    const st = await page.textContent('#models-status');
    assert(/window 4096 hides 36 cells/.test(st), `status "${st}"`);   // 1 + 2 + ... + 8 pairs 4 or more tokens apart
    await page.evaluate(() => document.activeElement && document.activeElement.blur());
    await page.locator('#models').screenshot({ path: path.join(OUT, 'models.png') });
    await fetched('g2', 1, () => page.selectOption('#models-layer', ':1'));
    const full = weightsOf(await api('/v1/attention', lastModelReq()), 12);
    assert(full[5 * 12 + 1] > 0, 'layer 1 (full) hides keys 4096 back');
    const cell = await heatCell('models-weights', 5, 1);
    close(cell.value, full[5 * 12 + 1], 1e-5, 1e-6, 'layer 1 query 5, key 1');
    assert(!/window/.test(await page.textContent('#models-status')), 'layer 1 status names a window');
    assert(await page.isDisabled('#models-spread'), 'spread enabled on a layer without window or chunk');
  });
  await check('models: gpt_oss sends the sinks [4] it requires and shows the sink share', async () => {
    // A new model keeps the layer number (1 here) when it has that layer.
    await fetched('oss', 1, () => page.selectOption('#models-model', 'oss'));
    assert(await page.inputValue('#models-layer') === ':1', 'the layer did not stay 1');
    await fetched('oss', 0, () => page.click('#models-layers button.layer[data-layer=":0"]'));
    const tensors = await page.$eval('#models-layers tbody tr .needs', (td) => [td.firstChild.textContent,
      td.querySelector('.cfg').textContent, td.title]);
    assert(tensors[0] === 'sinks [4]' && tensors[1] === 'model_type' && /attention sinks/.test(tensors[2]),
      `tensors cell ${JSON.stringify(tensors)}`);
    const body = lastModelReq(), it = body.inputs[0];
    assert(it.model === 'oss' && it.layer === 0 && it.sinks && JSON.stringify(it.sinks.shape) === '[4]' &&
      it.sinks.data.length === 4 && it.sinks.data.every(Number.isFinite), `sinks ${JSON.stringify(it.sinks)}`);
    const w = weightsOf(await api('/v1/attention', body), 12);
    const share = 1 - w.slice(2 * 12, 3 * 12).reduce((a, b) => a + b, 0);
    assert(share > 1e-4, `reference: sink share of row 2 is ${share}`);
    const cell = await heatCell('models-weights', 2, 12);   // the column right of the keys
    assert(/, sink: /.test(cell.text), `readout "${cell.text}"`);
    close(cell.value, share, 1e-4, 1e-6, 'sink share of row 2');
    assert(/sinks \[4\]: attention sinks, random/.test(await page.textContent('#models-sent')), 'what was sent omits the sinks');
    await drawn('#models-weights');
    // gpt-oss' window is 128: at step 1024 only the diagonal is left.
    assert(/window 128 hides 66 cells/.test(await page.textContent('#models-status')), 'window 128 at step 1024');
    await page.evaluate(() => document.activeElement && document.activeElement.blur());
    await page.locator('#models').screenshot({ path: path.join(OUT, 'models-oss.png') });
  });
  await check('models: a server error shows its code and message, and goes when fixed', async () => {
    const seen = consoleErrors.length;
    await page.fill('#models-step', '400000000');
    await page.waitForFunction(() => document.getElementById('models').dataset.state === 'error', null,
      { timeout: 15000 }).catch(() => {});
    const st = await page.textContent('#models-status');
    assert(await page.$eval('#models-status', (e) => e.classList.contains('error')) &&
      /OUT_OF_RANGE: q_positions\[6\]=2400000000 is outside the int32 range.*q_positions/.test(st), `status "${st}"`);
    await page.fill('#models-step', '1');
    await settle('models');
    assert(!(await page.$eval('#models-status', (e) => e.classList.contains('error'))), 'error stays after the fix');
    // The browser logs the 400: expected here, nothing else is.
    const extra = consoleErrors.splice(seen).filter((t) => !/status of 400/.test(t));
    consoleErrors.push(...extra);
  });
  await check('models: a posattnd without --model says how to load one', async () => {
    const bare = await startServer('posattnd (no models)');
    log(`ui: posattnd (no models) at ${bare}`);
    const p = await context.newPage();
    p.setDefaultTimeout(30000);
    p.on('pageerror', (e) => consoleErrors.push(String(e)));
    await p.addInitScript((k) => { if (location.origin !== 'null') sessionStorage.setItem('posattn-api-key', k); }, KEY);
    await p.goto(bare + '/#models');
    await settle('models', 30000, p);
    assert(await p.isVisible('#models-none') && await p.isHidden('#models-body'), 'the note is not shown alone');
    const note = await p.textContent('#models-none');
    assert(/No model is loaded/.test(note) && /--model NAME=config\.json/.test(note), `note "${note}"`);
    assert(/--model NAME=config\.json/.test(await p.textContent('#models-status')), 'status');
    await p.locator('#models').screenshot({ path: path.join(OUT, 'models-none.png') });
    await p.close();
  });
  await page.selectOption('#models-model', 'g2');
  await settle('models');
}
