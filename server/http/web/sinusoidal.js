// sinusoidal.js - the Sinusoidal panel of posattnd's web page: the encoding
// PE and its similarity P·Pᵀ (/v1/encode, /v1/analyze similarity) as heatmaps,
// and one coordinate pair of PE[p] on the unit circle.

import { Heatmap, fmt } from '/web/plot.js';
import { $, num } from '/web/util.js';
import { api } from '/web/api.js';
import { panel, wire, syncOutputs } from '/web/panel.js';

const sinEnc = new Heatmap($('sin-enc'), { title: 'Encoding PE [position \u00d7 dimension]', id: 'sin-enc-map',
  cmap: 'diverging', symmetric: true, xLabel: 'dim', yLabel: 'pos' });
const sinSim = new Heatmap($('sin-sim'), { title: 'Similarity P\u00b7P\u1d40 [position \u00d7 position]',
  id: 'sin-sim-map', xLabel: 'pos', yLabel: 'pos' });
let sinData = null;

export const sinPanel = panel('sinusoidal', 'sin-status', async (current) => {
  const L = num('sin-length'), d = num('sin-dim');
  const scheme = { type: 'sinusoidal', base: num('sin-base'), layout: $('sin-layout').value };
  const [enc, sim] = await Promise.all([
    api('/v1/encode', { scheme, length: L, dim: d }),
    api('/v1/analyze', { analysis: 'similarity', scheme, length: L, dim: d }),
  ]);
  if (!current()) return;
  sinEnc.set(enc.encoding.data, L, d);
  sinSim.set(sim.similarity.data, L, L);
  sinData = { data: enc.encoding.data, L, d, layout: scheme.layout, base: scheme.base };
  const pos = $('circle-pos');
  pos.max = String(L - 1);
  if (Number(pos.value) > L - 1) pos.value = String(L - 1);
  const pair = $('circle-pair'), keep = Math.min(Number(pair.value) || 0, d / 2 - 1);
  pair.replaceChildren(...Array.from({ length: d / 2 }, (_, i) => new Option(String(i), String(i))));
  pair.value = String(keep);
  syncOutputs($('circle-controls'));
  drawCircle();
  $('sin-residual').textContent = `shift residual max |PE(p+${sim.shift}) \u2212 M\u00b7PE(p)| = ${fmt(sim.shift_residual)}`;
  return `length ${L}, dim ${d}, base ${scheme.base}, ${scheme.layout}`;
});
wire('sin-controls', sinPanel);

const circle = $('circle');
function drawCircle() {
  if (!sinData) return;
  const { data, L, d, layout } = sinData;
  const p = num('circle-pos'), i = num('circle-pair');
  const si = layout === 'concat' ? i : 2 * i, ci = layout === 'concat' ? i + d / 2 : 2 * i + 1;
  const w = Math.min(340, circle.parentElement.clientWidth), dpr = window.devicePixelRatio || 1;
  // Not laid out yet (hidden, or mid-resize): nothing to draw into; the
  // resize and input handlers draw again once it has a width.
  if (w < 64) return;
  circle.style.width = w + 'px'; circle.style.height = w + 'px';
  circle.width = w * dpr; circle.height = w * dpr;
  const ctx = circle.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const c = w / 2, R = w / 2 - 28;
  ctx.clearRect(0, 0, w, w);
  ctx.strokeStyle = '#d0d7de'; ctx.lineWidth = 1;
  ctx.beginPath(); ctx.moveTo(c - R - 10, c); ctx.lineTo(c + R + 10, c);
  ctx.moveTo(c, c - R - 10); ctx.lineTo(c, c + R + 10); ctx.stroke();
  ctx.strokeStyle = '#8c959f'; ctx.beginPath(); ctx.arc(c, c, R, 0, 2 * Math.PI); ctx.stroke();
  ctx.font = '12px system-ui, sans-serif'; ctx.fillStyle = '#57606a';
  ctx.textAlign = 'left'; ctx.fillText('cos', c + R + 2, c - 6);
  ctx.textAlign = 'center'; ctx.fillText('sin', c + 14, c - R - 14);
  for (let q = 0; q < L; q++) {   // every position of the pair, faint
    ctx.fillStyle = q < p ? 'rgba(9,105,218,0.35)' : 'rgba(140,149,159,0.35)';
    ctx.beginPath();
    ctx.arc(c + R * data[q * d + ci], c - R * data[q * d + si], 3, 0, 2 * Math.PI); ctx.fill();
  }
  const x = data[p * d + ci], y = data[p * d + si];
  ctx.strokeStyle = '#0969da'; ctx.lineWidth = 2;
  ctx.beginPath(); ctx.moveTo(c, c); ctx.lineTo(c + R * x, c - R * y); ctx.stroke();
  ctx.fillStyle = '#cf222e'; ctx.beginPath(); ctx.arc(c + R * x, c - R * y, 6, 0, 2 * Math.PI); ctx.fill();
  const out = $('circle-readout');
  out.textContent = `pos ${p}, pair ${i} (dims ${si}, ${ci}): sin = ${fmt(y, 6)}, cos = ${fmt(x, 6)}`;
  out.dataset.sin = String(y); out.dataset.cos = String(x);
}
$('circle-controls').addEventListener('input', () => { syncOutputs($('circle-controls')); drawCircle(); });
new ResizeObserver(() => drawCircle()).observe(circle.parentElement);
