// packed.js - the Packed sequences panel of posattnd's web page: S
// sequences of lengths chosen by hand, back to back in one /v1/attention
// item (cu_seqlens), drawn as one block-diagonal map of the packed rows (a
// query never sees another sequence's keys: zero off the blocks) and as the
// list of per-sequence weights the server returns.

import { Heatmap } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { ApiError, api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';

const NH = 2, HD = 4;                 // heads, head dim (q, k, v [L_total, NH, HD])
const MAX_SEQS = 8, MAX_TOTAL = 64;   // what a page's map can show
let full = null, seqMaps = [];

// "5, 7, 4" -> [5, 7, 4]. Whole numbers only; a 0 is sent as typed, for the
// server to refuse (cu_seqlens must increase strictly) with the field named.
function parseLengths(text) {
  const parts = text.split(',').map((p) => p.trim()).filter((p) => p !== '');
  if (!parts.length) throw new ApiError('lengths: give the sequence lengths, comma separated (e.g. 5, 7, 4)');
  if (parts.length > MAX_SEQS) throw new ApiError(`lengths: ${parts.length} sequences; at most ${MAX_SEQS} here`);
  const lens = parts.map((p) => {
    if (!/^\d+$/.test(p)) throw new ApiError(`lengths: '${p}' is not a whole number`);
    return Number(p);
  });
  const total = lens.reduce((a, b) => a + b, 0);
  if (total > MAX_TOTAL) throw new ApiError(`lengths: ${total} rows in all; at most ${MAX_TOTAL} here`);
  return lens;
}

// One map per sequence, rebuilt when the count changes.
function seqGrid(S) {
  if (seqMaps.length === S) return seqMaps;
  const box = $('packed-seqs');
  box.replaceChildren();
  seqMaps = Array.from({ length: S }, (_, s) => new Heatmap(box, { title: `sequence ${s}`, id: `packed-seq-${s}`,
    xLabel: 'key', yLabel: 'query', maxH: 220 }));
  return seqMaps;
}

export const packedPanel = panel('packed', 'packed-status', async (current) => {
  const lens = parseLengths($('packed-lengths').value);
  const S = lens.length, cu = [0];
  lens.forEach((n) => cu.push(cu[cu.length - 1] + n));
  const L = cu[S], causal = $('packed-causal').checked, type = $('packed-scheme').value;
  const head = Math.min(num('packed-head'), NH - 1);
  const g = rng(num('packed-seed'));
  const t = () => ({ shape: [L, NH, HD], data: round(g(L * NH * HD)) });
  const item = { id: 'packed', scheme: { type }, causal, cu_seqlens: cu, q: t(), k: t(), v: t(), return: ['weights'] };
  const res = await api('/v1/attention', { inputs: [item] });
  if (!current()) return;
  const o = res.outputs[0];
  if (o.error)
    throw new ApiError(`/v1/attention: ${o.error.code}: ${o.error.message}` + (o.error.field ? ` (${o.error.field})` : ''));
  // weights: a list of S tensors [NH, Ls, Ls]; the packed map is zero off
  // the diagonal blocks, which the server never computes.
  const packedW = new Array(L * L).fill(0), maps = seqGrid(S);
  o.weights.forEach((w, s) => {
    const n = lens[s], wh = w.data.slice(head * n * n, (head + 1) * n * n);
    for (let r = 0; r < n; r++)
      for (let c = 0; c < n; c++) packedW[(cu[s] + r) * L + cu[s] + c] = wh[r * n + c];
    maps[s].cap.textContent = `sequence ${s}: rows ${cu[s]}\u2013${cu[s + 1] - 1} (${n} tokens)`;
    maps[s].set(wh, n, n, { min: 0, max: 1 });
  });
  if (!full) full = new Heatmap($('packed-map'), { title: 'weights of the packed rows (block-diagonal)', id: 'packed-full',
    xLabel: 'key', yLabel: 'query', maxH: 420 });
  full.set(packedW, L, L, { min: 0, max: 1, blocks: cu });
  $('packed-map').dataset.cuSeqlens = JSON.stringify(cu);
  return `${S} sequences of ${lens.join(', ')} tokens: q, k, v [${L}, ${NH}, ${HD}], cu_seqlens [${cu.join(', ')}], ` +
    `${type}` + (causal ? ', causal' : '') + `, showing head ${head}, seed ${num('packed-seed')}`;
});
wire('packed-controls', packedPanel);
