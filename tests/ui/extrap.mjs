// extrap.mjs - the browser test of the extrapolation panel
// (tests/ui/ui-test.mjs): its plots drawn, the bands shown equal
// /v1/analyze extrapolation, and a longer training length redraws.

import path from 'node:path';
import { OUT, check, assert, close, api } from './harness.mjs';
import { page, settle, pixels, drawn } from './page.mjs';

export async function extrapChecks() {
  // ------------------------------------------------------- extrapolation
  await check('extrapolation: entropy, distance and spectrum plots are drawn', async () => {
    await settle('extrap');
    await drawn('#extrap-entropy-plot', 0.01, 4);
    await drawn('#extrap-distance-plot', 0.01, 4);
    await drawn('#extrap-spectrum-plot', 0.01, 4);
    assert(/NoPE .* \u2192 .*ALiBi/.test(await page.textContent('#extrap-status')), 'status');
  });
  await check('extrapolation: the bands shown equal /v1/analyze extrapolation; NoPE spreads, ALiBi stays', async () => {
    const shown = JSON.parse(await page.getAttribute('#extrap', 'data-bands'));
    const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
    const ref = await api('/v1/analyze', { analysis: 'extrapolation', scheme: { type: 'alibi' },
      train_length: 128, band: 32, lengths: [512], inputs: 'gaussian', num_heads: 4, head_dim: 32, seed: 1 });
    const bands = ref.lengths[0].bands;
    assert(shown[1].length === bands.length, `alibi: ${shown[1].length} bands shown, ${bands.length} in the answer`);
    bands.forEach((b, i) => {
      close(shown[1][i][1], mean(b.entropy), 1e-9, 0, `alibi entropy band ${i}`);
      close(shown[1][i][2], mean(b.distance), 1e-9, 0, `alibi distance band ${i}`);
    });
    const nope = shown[0];
    assert(nope[nope.length - 1][1] > nope[0][1] + 1, 'NoPE entropy does not grow with position');
    // ALiBi's slowest of 4 heads (slope 1/256) still reaches far at 512: on
    // average its last band attends about a quarter as far as NoPE's (64 to 247 here).
    assert(shown[1][shown[1].length - 1][2] < 0.5 * nope[nope.length - 1][2], 'ALiBi is not local');
    // Seven schemes, xPos and KERPLE last: both of them decay with distance.
    assert(shown.length === 7, `${shown.length} schemes shown`);
    for (const j of [5, 6])
      assert(shown[j][shown[j].length - 1][2] < nope[nope.length - 1][2], `scheme ${j} attends as far as NoPE`);
  });
  await check('extrapolation: a longer training length redraws', async () => {
    const before = await pixels('#extrap-entropy-plot');
    await page.selectOption('#extrap-train', '64');
    await settle('extrap');
    assert((await pixels('#extrap-entropy-plot')).hash !== before.hash, 'entropy plot did not change');
    const shown = JSON.parse(await page.getAttribute('#extrap', 'data-bands'));
    assert(shown[0].length === 16, `64 x 4 in bands of 16: ${shown[0].length} bands`);
  });
  await page.locator('#extrap').screenshot({ path: path.join(OUT, 'extrapolation.png') });
}
