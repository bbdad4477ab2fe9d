// mla.mjs - the browser test of the MLA panel (tests/ui/ui-test.mjs): both
// forms of the same weights are sent (expanded: k_nope and v made on the
// page from c_kv; absorbed: c_kv with mla.w_uk and mla.w_uv) and answered;
// the weights the page draws are the server's, each row sums to 1 (causal
// rows too, their future keys at 0); the two forms agree within 1e-5; the
// two logit terms add up to the server's logits; the rope layout and the
// form shown follow the controls; an odd D_rope, and a D_rope as wide as
// the head, show the server's error naming mla.rope_dim.

import path from 'node:path';
import { OUT, check, assert, close, api } from './harness.mjs';
import { page, settle, drawn, heatCell } from './page.mjs';
import { lastItem, failWith } from './shapes.mjs';

// The two items the page sent last, sent again by this test: weights of
// both forms [H, L, L], a masked cell 0.
async function resend() {
  const ex = lastItem('mla-expanded'), ab = lastItem('mla-absorbed');
  const res = await api('/v1/attention', { inputs: [ex, ab] });
  const [oe, oa] = res.outputs;
  assert(!oe.error && !oa.error, `an item failed: ${JSON.stringify(oe.error || oa.error)}`);
  return { ex, ab, we: oe.weights.data, wa: oa.weights.data };
}

// Every row of both forms sums to 1; the forms agree within 1e-5 (as the
// page says too); causal rows see no later key.
async function checkWeights(causal) {
  const { ex, we, wa } = await resend();
  const [L, H] = ex.q.shape;
  assert(we.length === H * L * L && wa.length === H * L * L, `weights of ${we.length}, ${wa.length} values`);
  let diff = 0;
  for (let r = 0; r < H * L; r++) {
    let se = 0, sa = 0;
    for (let c = 0; c < L; c++) {
      const e = we[r * L + c], a = wa[r * L + c];
      if (causal && c > r % L) assert(e === 0 && a === 0, `causal: row ${r} key ${c} not masked (${e}, ${a})`);
      se += e || 0;
      sa += a || 0;
      diff = Math.max(diff, Math.abs((e || 0) - (a || 0)));
    }
    close(se, 1, 1e-5, 1e-6, `expanded row ${r} sum`);
    close(sa, 1, 1e-5, 1e-6, `absorbed row ${r} sum`);
  }
  assert(diff <= 1e-5, `expanded and absorbed weights differ by ${diff}`);
  const shown = Number(await page.getAttribute('#mla-summary', 'data-max-diff'));
  assert(shown <= 1e-5 && Math.abs(shown - diff) <= 1e-6, `the page says ${shown}, the test finds ${diff}`);
  const rowErr = Number(await page.getAttribute('#mla-summary', 'data-row-err'));
  const splitErr = Number(await page.getAttribute('#mla-summary', 'data-split-err'));
  assert(rowErr <= 1e-5 && splitErr <= 1e-4, `row error ${rowErr}, nope + rope - logits ${splitErr}`);
  return { L, we, wa };
}

export async function mlaChecks() {
  await check('mla: the expanded and absorbed items of the same weights answered; the map and both terms drawn', async () => {
    await settle('mla');
    const ex = lastItem('mla-expanded'), ab = lastItem('mla-absorbed');
    assert(ex.mla.rope_dim === 4 && !ex.mla.absorbed && ex.scheme.layout === 'gptj', `expanded ${JSON.stringify(ex.mla)}`);
    assert(JSON.stringify([ex.q.shape, ex.k.shape, ex.v.shape, ex.k_rope.shape]) === '[[8,2,12],[8,2,8],[8,2,6],[8,4]]',
      `expanded shapes ${JSON.stringify([ex.q.shape, ex.k.shape, ex.v.shape, ex.k_rope.shape])}`);
    assert(ab.mla.absorbed === true && !ab.k && !ab.v, 'absorbed item carries k or v');
    assert(JSON.stringify([ab.c_kv.shape, ab.mla.w_uk.shape, ab.mla.w_uv.shape]) === '[[8,8],[2,8,8],[2,6,8]]',
      `absorbed shapes ${JSON.stringify([ab.c_kv.shape, ab.mla.w_uk.shape, ab.mla.w_uv.shape])}`);
    assert(JSON.stringify(ab.q) === JSON.stringify(ex.q) && JSON.stringify(ab.k_rope) === JSON.stringify(ex.k_rope),
      'the two forms were sent different q or k_rope');
    // k_nope = w_uk[h] c_kv, as the page made it.
    const [L, H] = ex.q.shape, Dn = 8, R = 8;
    for (const [j, h, d] of [[0, 0, 0], [5, 1, 7], [7, 1, 3]]) {
      let s = 0;
      for (let r = 0; r < R; r++) s += ab.mla.w_uk.data[(h * Dn + d) * R + r] * ab.c_kv.data[j * R + r];
      close(ex.k.data[(j * H + h) * Dn + d], s, 1e-9, 1e-12, `k_nope[${j}, ${h}, ${d}]`);
    }
    assert(L === 8, `L ${L}`);
    for (const id of ['mla-w', 'mla-nope', 'mla-rope']) await drawn('#' + id, 0.05, 4);
  });
  await check('mla: rows sum to 1 and the forms agree within 1e-5; the map is the server\'s head 0', async () => {
    const { L, we } = await checkWeights(false);
    for (const [r, c] of [[0, 0], [3, 6], [7, 2]]) {
      const cell = await heatCell('mla-w', r, c);
      close(cell.value, we[r * L + c], 1e-4, 1e-6, `weights (${r}, ${c})`);
    }
  });
  await check('mla: causal rows sum to 1 over the keys they see; neox and the absorbed form shown', async () => {
    await page.check('#mla-causal');
    await settle('mla');
    assert(lastItem('mla-expanded').causal === true && lastItem('mla-absorbed').causal === true, 'causal not sent');
    await checkWeights(true);
    assert((await heatCell('mla-w', 1, 5)).value === 0, 'causal: cell (1, 5) not 0');
    assert((await heatCell('mla-nope', 1, 5)).value === null, 'causal: the nope term of cell (1, 5) not masked');
    await page.selectOption('#mla-layout', 'neox');
    await page.selectOption('#mla-form', 'absorbed');
    await page.selectOption('#mla-head', '1');
    await settle('mla');
    assert(lastItem('mla-absorbed').scheme.layout === 'neox', 'neox not sent');
    const { L, wa } = await checkWeights(true);
    for (const [r, c] of [[2, 1], [7, 7]]) {
      const cell = await heatCell('mla-w', r, c);
      close(cell.value, wa[L * L + r * L + c], 1e-4, 1e-6, `absorbed head 1 (${r}, ${c})`);
    }
    assert(/head 1 \(absorbed\)/.test(await page.textContent('#mla-status')), 'status does not name head 1 absorbed');
  });
  await check('mla: an odd D_rope, and D_rope as wide as the head (D_nope 0), are refused naming mla.rope_dim', async () => {
    let st = await failWith('mla', '#mla-drope', '3');
    assert(/mla\.rope_dim/.test(st), `status "${st}"`);
    await page.fill('#mla-drope', '4');
    await settle('mla');
    st = await failWith('mla', '#mla-dnope', '0');
    assert(/mla\.rope_dim/.test(st) && /below q\.shape\[2\]=4/.test(st), `status "${st}"`);
    await page.fill('#mla-dnope', '8');
    await settle('mla');
    assert(!(await page.$eval('#mla-status', (e) => e.classList.contains('error'))), 'error stays after the fix');
  });
  await page.locator('#mla').screenshot({ path: path.join(OUT, 'mla.png') });
}
