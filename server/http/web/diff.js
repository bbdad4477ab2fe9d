// diff.js - the Differential attention panel of posattnd's web page (Ye et
// al. 2024): one /v1/attention item with the differential option, and in
// the same request the plain item of the same q and k, whose 2H heads are
// the two softmax maps a and b of each output head. The returned weights
// A_h = a - lambda b can be negative: a diverging colour scale, 0 white.

import { Heatmap, fmt } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { ApiError, api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';

const H = 2, HD = 4, QH = 2 * H;   // output heads, head dim, query heads (q [L, 2H, HD])
let maps = null;

// The query heads a, b of output head h in each peer's layout
// (include/posattn_diff.h): unilm's interleaved 2h, 2h+1; DiffLlama's
// halves h, h+H.
const pairOf = (pairs, h) => (pairs === 'halves' ? [h, h + H] : [2 * h, 2 * h + 1]);

const field = (id) => $(id).value.trim();
const dot = (a, b) => a.reduce((s, v, i) => s + v * b[i], 0);

// The differential object as the controls say; lambda empty sends seeded
// lambda_q1..k2 vectors instead (lambda = exp(q1.k1) - exp(q2.k2) +
// lambda_init). lambda_init and depth go as typed: both at once is the
// server's to refuse. Returns the object and the lambda it means.
function diffOption(g) {
  const d = { pairs: $('diff-pairs').value }, lam = field('diff-lambda'), init = field('diff-lambda-init'),
    depth = field('diff-depth');
  if (init !== '') d.lambda_init = Number(init);
  if (depth !== '') d.depth = Number(depth);
  const l0 = init !== '' ? Number(init) : depth !== '' ? 0.8 - 0.6 * Math.exp(-0.3 * Number(depth)) : 0;
  if (lam !== '') {
    d.lambda = Number(lam);
    return { d, lambda: d.lambda, l0 };
  }
  for (const n of ['lambda_q1', 'lambda_k1', 'lambda_q2', 'lambda_k2']) d[n] = round(g(HD, 0.3));
  const lambda = Math.exp(dot(d.lambda_q1, d.lambda_k1)) - Math.exp(dot(d.lambda_q2, d.lambda_k2)) + l0;
  return { d, lambda, l0 };
}

function itemError(o) {
  return new ApiError(`/v1/attention: ${o.error.code}: ${o.error.message}` + (o.error.field ? ` (${o.error.field})` : ''));
}

export const diffPanel = panel('diff', 'diff-status', async (current) => {
  const L = num('diff-length'), causal = $('diff-causal').checked, type = $('diff-scheme').value;
  const pairs = $('diff-pairs').value, head = Math.min(num('diff-head'), H - 1);
  const g = rng(num('diff-seed'));
  const q = { shape: [L, QH, HD], data: round(g(L * QH * HD, 1.5)) };
  const k = { shape: [L, QH, HD], data: round(g(L * QH * HD, 1.5)) };
  // v: interleaved [L, Hk/2, 2D], halves [L, Hk, D] (Hk = 2H here).
  const v = { shape: pairs === 'halves' ? [L, QH, HD] : [L, QH / 2, 2 * HD], data: round(g(L * QH * HD)) };
  const { d, lambda, l0 } = diffOption(g);
  const common = { scheme: { type }, causal, q, k, return: ['weights'] };
  const res = await api('/v1/attention', { inputs: [
    Object.assign({ id: 'differential', differential: d, v }, common),
    // The same q and k as a plain item of 2H heads: its maps a and b.
    Object.assign({ id: 'maps', v: { shape: [L, QH, HD], data: v.data } }, common),
  ] });
  if (!current()) return;
  const [od, op] = res.outputs;
  if (od.error) throw itemError(od);
  if (op.error) throw itemError(op);
  if (!maps) {
    const box = $('diff-maps'), card = (id) => {
      const c = document.createElement('div');
      c.className = 'card';
      c.id = id;
      box.appendChild(c);
      return c;
    };
    maps = {
      a: new Heatmap(card('diff-card-a'), { title: 'softmax a', id: 'diff-a', xLabel: 'key', yLabel: 'query', maxH: 280 }),
      b: new Heatmap(card('diff-card-b'), { title: 'softmax b', id: 'diff-b', xLabel: 'key', yLabel: 'query', maxH: 280 }),
      A: new Heatmap(card('diff-card-A'), { title: 'A = a \u2212 \u03bb b', id: 'diff-A', cmap: 'diverging', symmetric: true,
        xLabel: 'key', yLabel: 'query', maxH: 280 }),
    };
  }
  const [ha, hb] = pairOf(pairs, head), n = L * L;
  const wa = op.weights.data.slice(ha * n, (ha + 1) * n), wb = op.weights.data.slice(hb * n, (hb + 1) * n);
  const A = od.weights.data.slice(head * n, (head + 1) * n);
  maps.a.cap.textContent = `softmax a (query head ${ha})`;
  maps.b.cap.textContent = `softmax b (query head ${hb})`;
  maps.a.set(wa, L, L, { min: 0, max: 1 });
  maps.b.set(wb, L, L, { min: 0, max: 1 });
  maps.A.set(A, L, L);
  const lo = Math.min(...A), hi = Math.max(...A), neg = A.filter((x) => x < 0).length;
  const s = $('diff-summary');
  s.innerHTML = '\u03bb = <span class="val"></span>; A of head <span></span> runs from <span class="val"></span> to ' +
    '<span class="val"></span>, <span></span> of <span></span> cells negative';
  [fmt(lambda, 4), String(head), fmt(lo, 4), fmt(hi, 4), String(neg), String(n)]
    .forEach((t, i) => { s.children[i].textContent = t; });
  Object.assign(s.dataset, { lambda: String(lambda), min: String(lo), max: String(hi), negative: String(neg) });
  return `q [${L}, ${QH}, ${HD}], k [${L}, ${QH}, ${HD}], v [${v.shape.join(', ')}] (pairs ${pairs}), ${type}` +
    (causal ? ', causal' : '') + `, \u03bb ${'lambda' in d ? d.lambda : `${fmt(lambda, 4)} (from lambda_q1..k2)`}` +
    (l0 ? `, lambda_init ${fmt(l0, 4)}` : '') + `; output [${L}, ${H}, ${2 * HD}], showing head ${head}`;
});
wire('diff-controls', diffPanel);
