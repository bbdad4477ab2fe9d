// extrap.js - the extrapolation panel of posattnd's web page: entropy and
// attended distance by query position past the training length, per scheme
// (/v1/analyze extrapolation), and the RoPE wavelength of each frequency
// pair under each scaling (/v1/analyze rope_spectrum).

import { LinePlot, fmt, SERIES } from '/web/plot.js';
import { $, num } from '/web/util.js';
import { api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';
import { SCALINGS } from '/web/rope.js';

// Each scheme as the panel sends it for H heads. KERPLE's r1, r2 are
// learned; here every head takes r1 = 1 and r2 from 1/2 down by halves (a
// spread of reaches, as ALiBi's slopes), in its log form.
const EX_SCHEMES = [
  ['none', () => ({ type: 'none' })],
  ['alibi', () => ({ type: 'alibi' })],
  ['rope', () => ({ type: 'rope' })],
  ['sinusoidal', () => ({ type: 'sinusoidal' })],
  ['sandwich', () => ({ type: 'sandwich' })],
  ['xpos', () => ({ type: 'xpos' })],
  ['kerple', (H) => ({ type: 'kerple', form: 'log', r1: Array(H).fill(1),
    r2: Array.from({ length: H }, (_, h) => 2 ** -(h + 1)) })],
];
const exEntropy = new LinePlot($('extrap-entropy'), { title: 'entropy (nats) against query position',
  id: 'extrap-entropy-plot', xLabel: 'query position (band start)', yLabel: 'entropy', markers: true });
const exDistance = new LinePlot($('extrap-distance'), { title: 'mean attended distance (positions)',
  id: 'extrap-distance-plot', xLabel: 'query position (band start)', yLabel: 'distance', markers: true });
const exSpectrum = new LinePlot($('extrap-spectrum'), { title: 'RoPE wavelength of each frequency pair',
  id: 'extrap-spectrum-plot', xLabel: 'pair i (head dim 64, base 10000, factor 4)',
  yLabel: 'wavelength (positions)', logY: true, aspect: 0.35 });

function exRope(scaling, T) {
  const s = { type: 'rope', base: 10000, scaling };
  if (scaling !== 'none') s.factor = 4;
  if (scaling === 'yarn' || scaling === 'llama3') s.original_max_position = T;
  return s;
}

export const extrapPanel = panel('extrap', 'extrap-status', async (current) => {
  const T = num('extrap-train'), L = T * num('extrap-mult'), H = num('extrap-heads');
  const band = T / 4;
  const [runs, spec] = await Promise.all([
    Promise.all(EX_SCHEMES.map(([, scheme]) => api('/v1/analyze', { analysis: 'extrapolation',
      scheme: scheme(H), train_length: T, band, lengths: [L], inputs: 'gaussian', num_heads: H,
      head_dim: 32, seed: 1 }))),
    Promise.all(SCALINGS.map((s) => api('/v1/analyze', { analysis: 'rope_spectrum',
      scheme: exRope(s, T), head_dim: 64, train_length: T, length: L })))]);
  if (!current()) return;
  const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  const lines = (key) => runs.map((r, j) => ({ name: EX_SCHEMES[j][0], color: SERIES[j],
    x: r.lengths[0].bands.map((b) => b.from), y: r.lengths[0].bands.map((b) => mean(b[key])) }));
  const marker = (ls) => {
    const ys = ls.flatMap((s) => s.y);
    return { name: `train length ${T}`, x: [T, T], y: [Math.min(...ys), Math.max(...ys)],
      color: '#888', dash: [4, 4] };
  };
  const ent = lines('entropy'), dist = lines('distance');
  exEntropy.set([...ent, marker(ent)]);
  exDistance.set([...dist, marker(dist)]);
  const pairs = spec[0].wavelength.data.map((_, i) => i);
  exSpectrum.set([...spec.map((r, j) => ({ name: SCALINGS[j], x: pairs, y: r.wavelength.data,
    color: SERIES[j] })), { name: `train length ${T}`, x: [0, pairs.length - 1], y: [T, T],
    color: '#888', dash: [4, 4] }]);
  // For the tests: the first and last band of each scheme, as the page has them.
  $('extrap').dataset.bands = JSON.stringify(runs.map((r) => r.lengths[0].bands.map((b) =>
    [b.from, mean(b.entropy), mean(b.distance)])));
  const first = (j) => ent[j].y[0], last = (j) => ent[j].y[ent[j].y.length - 1];
  const full = spec.map((r) => r.full_period_in_training.data.reduce((a, b) => a + b, 0));
  return `entropy from the first band to the last: NoPE ${fmt(first(0), 3)} \u2192 ${fmt(last(0), 3)}, ` +
    `ALiBi ${fmt(first(1), 3)} \u2192 ${fmt(last(1), 3)}; RoPE pairs with a full turn in ${T}: ` +
    SCALINGS.map((s, j) => `${s} ${full[j]}`).join(', ') + ' of 32';
});
wire('extrap-controls', extrapPanel);
