// bias.mjs - the browser test of the ALiBi and T5 panel
// (tests/ui/ui-test.mjs): slopes, biases and buckets shown equal /v1/encode,
// for 8 heads and after the heads slider moved to 3.

import path from 'node:path';
import { OUT, check, assert, close, api } from './harness.mjs';
import { page, settle, drawn, heatCell, slider } from './page.mjs';

export async function biasChecks() {
  // -------------------------------------------------------- ALiBi and T5
  await check('alibi: slopes shown equal /v1/encode for 8 heads', async () => {
    const ref = await api('/v1/encode', { scheme: { type: 'alibi' }, num_heads: 8 });
    const shown = await page.$$eval('#alibi-slope-table tbody td.num', (t) => t.map((c) => Number(c.textContent)));
    assert(shown.length === 8, `${shown.length} slopes shown`);
    shown.forEach((s, h) => close(s, ref.slopes.data[h], 1e-5, 0, `slope of head ${h}`));
    await drawn('#alibi-slope-plot', 0.01, 3);
    await drawn('#alibi-head-0');
    await drawn('#t5-head-0');
    await drawn('#t5-bucket-map');
  });
  await check('alibi/t5: the heads slider redraws with 3 heads', async () => {
    await slider('bias-heads', 3);
    await settle('bias');
    const ref = await api('/v1/encode', { scheme: { type: 'alibi' }, num_heads: 3 });
    const shown = await page.$$eval('#alibi-slope-table tbody td.num', (t) => t.map((c) => Number(c.textContent)));
    assert(shown.length === 3, `${shown.length} slopes shown`);
    shown.forEach((s, h) => close(s, ref.slopes.data[h], 1e-5, 0, `slope of head ${h}`));
    assert(await page.$('#alibi-head-2') && !(await page.$('#alibi-head-3')), 'head maps not 3');
    const cell = await heatCell('alibi-head-1', 2, 9);
    const bias = await api('/v1/encode', { scheme: { type: 'alibi' }, num_heads: 3, q_length: 24, k_length: 24 });
    close(cell.value, bias.bias.data[1 * 24 * 24 + 2 * 24 + 9], 1e-5, 1e-6, 'alibi bias[1][2][9]');
  });
  await check('t5: bucket cell equals /v1/encode buckets', async () => {
    const ref = await api('/v1/encode', { scheme: { type: 't5' }, q_length: 24, k_length: 24 });
    const cell = await heatCell('t5-bucket-map', 1, 12);
    close(cell.value, ref.buckets.data[1 * 24 + 12], 0, 0, 'bucket[1][12]');
  });
  await page.locator('#bias').screenshot({ path: path.join(OUT, 'bias.png') });
}
