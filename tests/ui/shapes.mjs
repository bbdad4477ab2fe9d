// shapes.mjs - the browser test of the Packed sequences and Differential
// attention panels (tests/ui/ui-test.mjs): the packed map is zero off its
// diagonal blocks and each block equals the sequence sent alone; the
// differential map is a - lambda b of the plain maps, negative somewhere
// when lambda > 0 and nowhere when lambda = 0; both layouts send their v
// shape; bad inputs show a message naming the field.

import path from 'node:path';
import { OUT, consoleErrors, check, assert, close, api } from './harness.mjs';
import { page, posted, settle, drawn, heatCell } from './page.mjs';

// The request a panel sent last: the item whose id is id (mla.mjs too).
export function lastItem(id) {
  const req = [...posted].reverse().find((p) => p.url.endsWith('/v1/attention') &&
    JSON.parse(p.body).inputs.some((it) => it.id === id));
  assert(req, `the page sent no item "${id}"`);
  return JSON.parse(req.body).inputs.find((it) => it.id === id);
}

// Types value into the control and waits for the panel to fail; returns
// its status text. The browser logs the 400 of a refused request: expected
// here, so it is taken off the console errors the run checks at the end.
export async function failWith(panelId, sel, value) {
  const seen = consoleErrors.length;
  await page.fill(sel, value);
  await page.waitForFunction((s) => document.getElementById(s).dataset.state === 'error', panelId, { timeout: 15000 })
    .catch(() => { throw new Error(`#${panelId} did not fail on ${sel} = ${value}`); });
  assert(await page.$eval(`#${panelId} .status`, (e) => e.classList.contains('error')), 'status not marked as error');
  consoleErrors.push(...consoleErrors.splice(seen).filter((t) => !/status of 400/.test(t)));
  return page.textContent(`#${panelId} .status`);
}

export async function shapesChecks() {
  // ----------------------------------------------------- packed sequences
  await check('packed: 3 sequences (5, 7, 4) sent as cu_seqlens, a map each and the block-diagonal map drawn', async () => {
    await settle('packed');
    const it = lastItem('packed');
    assert(JSON.stringify(it.cu_seqlens) === '[0,5,12,16]', `cu_seqlens ${JSON.stringify(it.cu_seqlens)}`);
    assert(it.causal === true && JSON.stringify(it.q.shape) === '[16,2,4]', `item ${it.causal} ${it.q.shape}`);
    await drawn('#packed-full', 0.05, 4);
    for (let s = 0; s < 3; s++) await drawn(`#packed-seq-${s}`, 0.05, 4);
    assert(!(await page.$('#packed-seq-3')), 'a fourth sequence map');
  });
  await check('packed: zero off the diagonal blocks; a block equals its sequence sent alone', async () => {
    for (const [r, c] of [[0, 5], [4, 12], [6, 0], [11, 15], [15, 11], [13, 2]]) {
      const cell = await heatCell('packed-full', r, c);
      assert(cell.value === 0, `off-block cell (${r}, ${c}): ${cell.text}`);
    }
    // Sequence 1 is rows 5-11: its own item of those rows, positions from 0.
    const it = lastItem('packed'), rows = (t) => ({ shape: [7, 2, 4], data: t.data.slice(5 * 8, 12 * 8) });
    const ref = await api('/v1/attention', { inputs: [{ scheme: it.scheme, causal: true, q: rows(it.q), k: rows(it.k),
      v: rows(it.v), return: ['weights'] }] });
    const w = ref.outputs[0].weights.data;   // [2, 7, 7], head 0 first
    for (const [r, c] of [[0, 0], [3, 1], [6, 6], [6, 2]]) {
      const cell = await heatCell('packed-full', 5 + r, 5 + c);
      close(cell.value, w[r * 7 + c], 1e-5, 1e-7, `packed (${5 + r}, ${5 + c})`);
      const own = await heatCell('packed-seq-1', r, c);
      close(own.value, w[r * 7 + c], 1e-5, 1e-7, `sequence 1 (${r}, ${c})`);
    }
    const future = await heatCell('packed-full', 5, 8);
    assert(future.value === 0, `causal: a future key in its own sequence has ${future.text}`);
  });
  await check('packed: a zero length is refused naming cu_seqlens; a typo names lengths; 2, 3 redraws', async () => {
    let st = await failWith('packed', '#packed-lengths', '4, 0, 3');
    assert(/cu_seqlens/.test(st), `status "${st}"`);
    st = await failWith('packed', '#packed-lengths', '4, x');
    assert(/lengths: 'x' is not a whole number/.test(st), `status "${st}"`);
    await page.fill('#packed-lengths', '2, 3');
    await settle('packed');
    assert(JSON.stringify(lastItem('packed').cu_seqlens) === '[0,2,5]', 'cu_seqlens of 2, 3');
    assert(await page.$('#packed-seq-1') && !(await page.$('#packed-seq-2')), 'sequence maps not 2');
    assert((await heatCell('packed-full', 0, 4)).value === 0, 'off-block cell (0, 4) not 0');
  });
  await page.locator('#packed').screenshot({ path: path.join(OUT, 'packed.png') });

  // -------------------------------------------------- differential attention
  // A cell of A equals a - lambda b of the two plain maps shown beside it.
  const checkCells = async (lambda) => {
    for (const [r, c] of [[2, 1], [5, 5], [7, 0]]) {
      const A = await heatCell('diff-A', r, c), a = await heatCell('diff-a', r, c), b = await heatCell('diff-b', r, c);
      close(A.value, a.value - lambda * b.value, 1e-4, 2e-6, `A (${r}, ${c})`);
    }
  };
  await check('differential: lambda 0.5 sends the option, A = a - 0.5 b, and A has negative cells', async () => {
    await settle('diff');
    const it = lastItem('differential');
    const d = it.differential;
    assert(d.pairs === 'interleaved' && d.lambda === 0.5 && d.depth === 1 && !('lambda_init' in d),
      `differential ${JSON.stringify(d)}`);
    assert(JSON.stringify(it.q.shape) === '[8,4,4]' && JSON.stringify(it.v.shape) === '[8,2,8]',
      `q ${it.q.shape}, v ${it.v.shape}`);
    for (const id of ['diff-a', 'diff-b', 'diff-A']) await drawn('#' + id, 0.05, 4);
    const neg = Number(await page.getAttribute('#diff-summary', 'data-negative'));
    const min = Number(await page.getAttribute('#diff-summary', 'data-min'));
    assert(neg > 0 && min < 0, `no negative weight: ${await page.textContent('#diff-summary')}`);
    const ref = await api('/v1/attention', { inputs: [it] });
    close(min, Math.min(...ref.outputs[0].weights.data.slice(0, 64)), 1e-6, 1e-7, 'min of A, head 0');
    await checkCells(0.5);
  });
  await check('differential: halves sends v [L, 2H, D]; lambda 0 leaves no negative weight', async () => {
    await page.selectOption('#diff-pairs', 'halves');
    await settle('diff');
    const it = lastItem('differential');
    assert(it.differential.pairs === 'halves' && JSON.stringify(it.v.shape) === '[8,4,4]', `v ${it.v.shape}`);
    await checkCells(0.5);
    await page.fill('#diff-lambda', '0');
    await settle('diff');
    const min = Number(await page.getAttribute('#diff-summary', 'data-min'));
    assert(min >= 0 && (await page.getAttribute('#diff-summary', 'data-negative')) === '0', `lambda 0: min ${min}`);
  });
  await check('differential: an empty lambda sends lambda_q1..k2; the lambda shown is the one used', async () => {
    await page.fill('#diff-lambda', '');
    await settle('diff');
    const d = lastItem('differential').differential;
    assert(!('lambda' in d) && d.lambda_q1.length === 4 && d.lambda_k2.length === 4, `differential ${JSON.stringify(d)}`);
    const dot = (a, b) => a.reduce((s, v, i) => s + v * b[i], 0);
    const want = Math.exp(dot(d.lambda_q1, d.lambda_k1)) - Math.exp(dot(d.lambda_q2, d.lambda_k2)) +
      0.8 - 0.6 * Math.exp(-0.3);
    close(Number(await page.getAttribute('#diff-summary', 'data-lambda')), want, 1e-9, 1e-12, 'lambda');
    await checkCells(want);
  });
  await check('differential: lambda_init 1.5 is refused naming differential.lambda_init; depth with it too', async () => {
    await page.fill('#diff-lambda', '0.5');
    await page.fill('#diff-depth', '');
    let st = await failWith('diff', '#diff-lambda-init', '1.5');
    assert(/differential\.lambda_init/.test(st), `status "${st}"`);
    st = await failWith('diff', '#diff-depth', '2');
    assert(/depth|lambda_init/.test(st), `status "${st}"`);
    await page.fill('#diff-lambda-init', '');
    await settle('diff');
    assert(!(await page.$eval('#diff-status', (e) => e.classList.contains('error'))), 'error stays after the fix');
  });
  await page.locator('#diff').screenshot({ path: path.join(OUT, 'differential.png') });
}
