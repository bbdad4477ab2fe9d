// rope.js - the RoPE panel of posattnd's web page: the q·k score against
// the offset from several absolute positions (/v1/analyze rope_offset), and
// each scaling's per-pair frequencies and attention factor (/v1/encode).

import { LinePlot, fmt, SERIES } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';

const ropeScore = new LinePlot($('rope-score'), { title: 'q\u00b7k score against offset m\u2212n',
  id: 'rope-score-plot', xLabel: 'offset (q position \u2212 k position)', yLabel: 'score' });
const ropeScale = new LinePlot($('rope-scale'), { title: 'Per-pair frequency inv_freq under each scaling',
  id: 'rope-scale-plot', xLabel: 'pair i', yLabel: 'inv_freq (log)', logY: true, markers: true });
export const SCALINGS = ['none', 'linear', 'ntk', 'yarn', 'llama3'];

function ropeScheme(scaling) {
  const s = { type: 'rope', base: num('rope-base'), scaling };
  if (scaling !== 'none') s.factor = num('scale-factor');
  if (scaling === 'yarn' || scaling === 'llama3') s.original_max_position = num('scale-omp');
  return s;
}

export const ropePanel = panel('rope', 'rope-status', async (current) => {
  const D = num('rope-dim'), maxOff = num('rope-offsets');
  const positions = $('rope-positions').value.split(/[\s,]+/).filter(Boolean).map(Number);
  if (!positions.length || positions.some((p) => !Number.isInteger(p) || p < 0) || positions.length > 6)
    throw new Error('positions: give 1 to 6 whole numbers >= 0, comma separated');
  const scaled = await Promise.all(SCALINGS.map((s) =>
    api('/v1/encode', { scheme: ropeScheme(s), length: 1, dim: D })));
  if (!current()) return;
  const invFreq = scaled[0].inv_freq.data;
  // Frequency choices come from the API's own inv_freq.
  const sel = $('rope-pair'), had = sel.value || 'all';
  sel.replaceChildren(new Option('all pairs (random q, k)', 'all'),
    ...invFreq.map((f, i) => new Option(`pair ${i}: \u03b8 = ${fmt(f, 3)} rad/pos`, String(i))));
  sel.value = [...sel.options].some((o) => o.value === had) ? had : 'all';
  let q, k;
  if (sel.value === 'all') {
    const g = rng(3);
    q = round(g(D)); k = round(g(D));
  } else {
    const i = Number(sel.value);
    q = new Array(D).fill(0); k = new Array(D).fill(0);
    q[i] = 1; q[i + D / 2] = 0.5; k[i] = 0.8; k[i + D / 2] = -0.6;   // neox pairs (i, i + D/2)
  }
  const offsets = Array.from({ length: 2 * maxOff + 1 }, (_, j) => j - maxOff);
  const runs = await Promise.all(positions.map((p) => api('/v1/analyze', {
    analysis: 'rope_offset', scheme: { type: 'rope', base: num('rope-base') }, q, k, offsets,
    base_position: Math.max(p, maxOff) })));
  if (!current()) return;
  const dashes = [null, [8, 5], [2, 4], [12, 4, 2, 4], [4, 4], [1, 3]];
  ropeScore.set(runs.map((r, j) => ({ name: `k at ${r.base_position}`, x: r.offsets, y: r.score.data,
    width: j === 0 ? 5 : 2, dash: dashes[j % dashes.length],
    color: j === 0 ? 'rgba(31,119,180,0.45)' : SERIES[j % SERIES.length] })));
  let diff = 0;
  for (const r of runs) r.score.data.forEach((v, j) => { diff = Math.max(diff, Math.abs(v - runs[0].score.data[j])); });
  ropeScale.set(scaled.map((r, j) => ({ name: SCALINGS[j], x: r.inv_freq.data.map((_, i) => i),
    y: r.inv_freq.data, color: SERIES[j] })));
  const tb = $('scale-table').tBodies[0];
  tb.replaceChildren(...scaled.map((r, j) => {
    const tr = document.createElement('tr');
    tr.innerHTML = '<td></td><td class="num"></td><td class="num"></td>';
    tr.cells[0].textContent = SCALINGS[j];
    tr.cells[1].textContent = fmt(r.attention_factor, 5);
    tr.cells[2].textContent = fmt(Math.min(...r.inv_freq.data), 4);
    return tr;
  }));
  $('rope-score-plot-readout').dataset.maxDiff = String(diff);
  return `largest difference between the lines: ${fmt(diff)}; spread over 64 start positions: ` +
    `${fmt(Math.max(...runs.map((r) => r.max_spread)))} \u2014 the score depends on the offset only`;
});
wire('rope-controls', ropePanel);
wire('scale-controls', ropePanel);
