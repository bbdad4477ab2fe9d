// bias.js - the ALiBi and T5 panel of posattnd's web page: ALiBi's slopes
// and per-head biases, T5's buckets and per-head biases from a random table
// (/v1/encode), for the number of heads and positions chosen.

import { Heatmap, LinePlot, fmt } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';

const slopePlot = new LinePlot($('alibi-slopes'), { title: 'slope m_h (log scale)', id: 'alibi-slope-plot',
  xLabel: 'head', yLabel: 'slope', logY: true, markers: true, aspect: 0.45, minH: 180 });
const bucketMap = new Heatmap($('t5-buckets-map'), { title: 'bucket of (query, key)', id: 't5-bucket-map',
  xLabel: 'key', yLabel: 'query', maxH: 300 });
let alibiMaps = [], t5Maps = [];

function heads(containerId, maps, H, prefix, label) {
  const box = $(containerId);
  if (maps.length !== H) {
    box.replaceChildren();
    maps = Array.from({ length: H }, (_, h) => new Heatmap(box, { title: `${label} head ${h}`,
      id: `${prefix}-${h}`, cmap: 'diverging', symmetric: true, xLabel: 'key', yLabel: 'query', maxH: 260 }));
  }
  return maps;
}

export const biasPanel = panel('bias', 'bias-status', async (current) => {
  const H = num('bias-heads'), L = num('bias-length'), nb = num('t5-buckets');
  const table = { shape: [nb, H], data: round(rng(1)(nb * H)) };
  const [al, t5] = await Promise.all([
    api('/v1/encode', { scheme: { type: 'alibi', max_bias: num('alibi-maxbias'), symmetric: $('alibi-symmetric').checked },
      num_heads: H, q_length: L, k_length: L }),
    api('/v1/encode', { scheme: { type: 't5', num_buckets: nb, max_distance: num('t5-maxdist'),
      bidirectional: $('t5-bidir').checked, table }, q_length: L, k_length: L }),
  ]);
  if (!current()) return;
  const slopes = al.slopes.data;
  slopePlot.set([{ name: 'ALiBi slope', x: slopes.map((_, h) => h), y: slopes, line: false }]);
  const tb = $('alibi-slope-table').tBodies[0];
  tb.replaceChildren(...slopes.map((s, h) => {
    const tr = document.createElement('tr');
    tr.innerHTML = '<td></td><td class="num"></td>';
    tr.cells[0].textContent = String(h);
    tr.cells[1].textContent = fmt(s, 6);
    tr.cells[1].dataset.value = String(s);
    return tr;
  }));
  alibiMaps = heads('alibi-heads', alibiMaps, H, 'alibi-head', 'ALiBi');
  t5Maps = heads('t5-heads', t5Maps, H, 't5-head', 'T5');
  for (let h = 0; h < H; h++) {
    alibiMaps[h].set(al.bias.data.slice(h * L * L, (h + 1) * L * L), L, L);
    t5Maps[h].set(t5.bias.data.slice(h * L * L, (h + 1) * L * L), L, L);
  }
  bucketMap.set(t5.buckets.data, L, L);
  return `${H} heads, ${L} positions`;
});
wire('bias-controls', biasPanel);
