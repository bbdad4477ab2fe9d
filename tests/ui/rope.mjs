// rope.mjs - the browser test of the RoPE panel (tests/ui/ui-test.mjs): the
// score depends on the offset only, equals /v1/analyze rope_offset for one
// frequency, and the scalings' inv_freq and attention factor equal /v1/encode.

import path from 'node:path';
import { OUT, check, assert, close, api } from './harness.mjs';
import { page, settle, pixels, drawn } from './page.mjs';

export async function ropeChecks() {
  // ---------------------------------------------------------------- RoPE
  await check('rope: score and inv_freq plots are drawn', async () => {
    await drawn('#rope-score-plot', 0.01, 4);
    await drawn('#rope-scale-plot', 0.01, 4);
  });
  await check('rope: the score depends only on the offset (lines coincide)', async () => {
    const d = Number(await page.getAttribute('#rope-score-plot-readout', 'data-max-diff'));
    assert(d < 1e-4, `lines differ by ${d}`);
    assert(/depends on the offset only/.test(await page.textContent('#rope-status')), 'status');
  });
  await check('rope: one frequency; score at offset -32 equals /v1/analyze rope_offset', async () => {
    const before = await pixels('#rope-score-plot');
    await page.selectOption('#rope-pair', '2');
    await settle('rope');
    assert((await pixels('#rope-score-plot')).hash !== before.hash, 'score plot did not change');
    const D = 64, q = new Array(D).fill(0), k = new Array(D).fill(0);
    q[2] = 1; q[2 + D / 2] = 0.5; k[2] = 0.8; k[2 + D / 2] = -0.6;
    const offsets = Array.from({ length: 65 }, (_, i) => i - 32);
    const ref = await api('/v1/analyze', { analysis: 'rope_offset', scheme: { type: 'rope', base: 10000 }, q, k,
      offsets, base_position: 100 });
    await page.focus('#rope-score-plot');
    await page.keyboard.press('Home');
    const text = await page.textContent('#rope-score-plot-readout');
    const m = /k at 100 ([^,\s]+)/.exec(text);
    assert(m, `readout: ${text}`);
    close(Number(m[1]), ref.score.data[0], 1e-5, 1e-6, 'score at offset -32, k at 100');
  });
  await check('rope: scaling factor changes inv_freq; yarn attention factor equals /v1/encode', async () => {
    const before = await pixels('#rope-scale-plot');
    await page.fill('#scale-factor', '4');
    await settle('rope');
    assert((await pixels('#rope-scale-plot')).hash !== before.hash, 'inv_freq plot did not change');
    const ref = await api('/v1/encode', { scheme: { type: 'rope', scaling: 'yarn', factor: 4,
      original_max_position: 2048 }, length: 1, dim: 64 });
    const row = await page.$$eval('#scale-table tbody tr', (rs) => rs.map((r) => [...r.cells].map((c) => c.textContent)));
    const yarn = row.find((r) => r[0] === 'yarn');
    assert(yarn, 'no yarn row');
    close(Number(yarn[1]), ref.attention_factor, 1e-4, 0, 'yarn attention factor');
    close(Number(yarn[2]), Math.min(...ref.inv_freq.data), 1e-3, 0, 'yarn lowest inv_freq');
  });
  await page.locator('#rope').screenshot({ path: path.join(OUT, 'rope.png') });
}
