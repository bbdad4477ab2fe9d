// sinusoidal.mjs - the browser test of the Sinusoidal panel
// (tests/ui/ui-test.mjs): its heatmaps and circle drawn, redrawn by the
// controls, and cells equal to /v1/encode and /v1/analyze similarity.

import path from 'node:path';
import { OUT, check, assert, close, api } from './harness.mjs';
import { page, settle, pixels, drawn, heatCell, slider } from './page.mjs';

export async function sinusoidalChecks() {
  // ---------------------------------------------------------- sinusoidal
  await check('sinusoidal: heatmaps and circle are drawn', async () => {
    await drawn('#sin-enc-map');
    await drawn('#sin-sim-map');
    await drawn('#circle', 0.02, 4);
  });
  await check('sinusoidal: length slider and dim select redraw the plots', async () => {
    const before = await pixels('#sin-sim-map');
    await slider('sin-length', 20);
    await page.selectOption('#sin-dim', '16');
    await settle('sinusoidal');
    const after = await drawn('#sin-sim-map');
    assert(after.hash !== before.hash, 'similarity plot did not change');
    assert((await page.textContent('#sin-length-out')) === '20', 'length readout');
  });
  await check('sinusoidal: similarity cell (3, 7) equals /v1/analyze similarity', async () => {
    const ref = await api('/v1/analyze', { analysis: 'similarity', scheme: { type: 'sinusoidal', base: 10000,
      layout: 'interleaved' }, length: 20, dim: 16 });
    assert(ref.similarity.shape[0] === 20, 'reference shape');
    const cell = await heatCell('sin-sim-map', 3, 7);
    close(cell.value, ref.similarity.data[3 * 20 + 7], 1e-5, 1e-6, 'P·P^T[3][7]');
    const enc = await api('/v1/encode', { scheme: { type: 'sinusoidal', base: 10000, layout: 'interleaved' },
      length: 20, dim: 16 });
    const e = await heatCell('sin-enc-map', 5, 2);
    close(e.value, enc.encoding.data[5 * 16 + 2], 1e-5, 1e-6, 'PE[5][2]');
  });
  await check('sinusoidal: base and layout change the encoding (concat layout)', async () => {
    const before = await pixels('#sin-enc-map');
    await page.fill('#sin-base', '100');
    await page.selectOption('#sin-layout', 'concat');
    await settle('sinusoidal');
    const after = await drawn('#sin-enc-map');
    assert(after.hash !== before.hash, 'encoding plot did not change');
    const enc = await api('/v1/encode', { scheme: { type: 'sinusoidal', base: 100, layout: 'concat' },
      length: 20, dim: 16 });
    const e = await heatCell('sin-enc-map', 4, 9);
    close(e.value, enc.encoding.data[4 * 16 + 9], 1e-5, 1e-6, 'concat PE[4][9]');
  });
  await check('sinusoidal: the position slider moves the point on the circle', async () => {
    await page.selectOption('#circle-pair', '1');
    const before = await pixels('#circle');
    await slider('circle-pos', 6);
    const after = await pixels('#circle');
    assert(after.hash !== before.hash, 'circle did not change');
    const enc = await api('/v1/encode', { scheme: { type: 'sinusoidal', base: 100, layout: 'concat' },
      length: 20, dim: 16 });
    const text = await page.textContent('#circle-readout');
    const m = /sin = (\S+), cos = (\S+)/.exec(text);
    assert(m, `circle readout: ${text}`);
    close(Number(m[1]), enc.encoding.data[6 * 16 + 1], 1e-5, 1e-6, 'sin of pair 1 at 6');
    close(Number(m[2]), enc.encoding.data[6 * 16 + 1 + 8], 1e-5, 1e-6, 'cos of pair 1 at 6');
  });
  await page.locator('#sinusoidal').screenshot({ path: path.join(OUT, 'sinusoidal.png') });
}
