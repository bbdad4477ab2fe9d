// models.js - the Models panel of posattnd's web page: the models loaded with
// --model (GET /v1/models), each run of layers' derived attention as a table
// with the config key behind every option, and the chosen layer's weights for
// a seeded random q, k, v of the config's shapes (POST /v1/attention with
// "model" and "layer", and random tensors for what the layer requires).

import { Heatmap, fmt } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { ApiError, api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';

let models = null;      // GET /v1/models' list: fetched on the first run and when the key changes
let tableOf = null;     // the model whose layers the table shows
let map = null;

// The options a run of layers may carry that the table has a column for;
// anything else the server derives (a newer option) goes to "also" as JSON.
const KNOWN = new Set(['first_layer', 'last_layer', 'stack', 'attention', 'num_heads', 'num_kv_heads',
  'head_dim', 'scheme', 'scale', 'softcap', 'window', 'chunk_size', 'q_norm', 'k_norm',
  'attn_temperature_tuning', 'causal', 'requires', 'config']);
const KIND = { sliding_attention: 'sliding', full_attention: 'full', chunked_attention: 'chunked' };

// A number of the config as it would be written there: 500000, 0.0625, 1e-06.
const n2s = (v) => String(Number(v.toPrecision(6)));

// Every layer of a model as {stack, layer, run}, in the listing's order.
function layersOf(m) {
  const out = [];
  for (const run of m.layers)
    for (let l = run.first_layer; l <= run.last_layer; l++) out.push({ stack: run.stack || '', layer: l, run });
  return out;
}
const layerKey = (stack, layer) => `${stack}:${layer}`;
const layerName = (e) => (e.stack ? `${e.stack} ` : '') + String(e.layer);

function schemeText(s, D) {
  if (!s) return '-';
  switch (s.type) {
  case 'rope': {
    let t = `rope ${s.layout || 'neox'}, base ${n2s(s.base)}`;
    if (s.rotary_dim && s.rotary_dim !== D) t += `, ${s.rotary_dim} of ${D} dims`;
    if (s.scaling && s.scaling !== 'none')
      t += `, ${s.scaling}` + (s.factor !== undefined ? ` \u00d7${n2s(s.factor)}` : '') +
        (s.original_max_position ? ` of ${s.original_max_position}` : '');
    if (s.mrope_section) t += `, M-RoPE [${s.mrope_section.join(', ')}]` + (s.mrope_interleaved ? ' interleaved' : '');
    return t;
  }
  case 't5': return `t5, ${s.num_buckets} buckets to ${s.max_distance}, ` +
    (s.bidirectional ? 'bidirectional' : 'one-way');
  case 'alibi': return 'alibi' + (s.max_bias !== undefined ? `, max_bias ${n2s(s.max_bias)}` : '') +
    (s.slopes ? ', the model\u2019s slopes' : '');
  case 'learned': return 'learned absolute' + (s.offset ? `, offset ${s.offset}` : '');
  case 'shaw': return `shaw relative, \u00b1${s.max_relative_position}` + (s.key_term ? ', key term' : '');
  case 'none': return 'none (NoPE)';
  default: return s.type;
  }
}

function normText(run, which) {
  const n = run[which];
  if (!n) return null;
  const weighted = run.requires.some((r) => r.field === `${which}.weight`);
  return `RMSNorm eps ${n2s(n.eps)}` + (n.weight_offset ? `, ${n.weight_offset} + weight` : '') +
    (weighted ? '' : ', no weight');
}

// One cell: the value, and under it the config keys that decided it (the
// key and its value in the config on hover).
function cell(tr, text, run, options, title) {
  const td = tr.insertCell();
  td.append(text);
  const seen = new Set(), tips = [];
  for (const o of options) {
    const c = run.config && run.config[o];
    if (!c || seen.has(c.key)) continue;
    seen.add(c.key);
    tips.push(`config "${c.key}": ${c.value}`);
  }
  if (seen.size) {
    const s = document.createElement('span');
    s.className = 'cfg';
    s.textContent = [...seen].join(', ');
    td.append(s);
  }
  const t = [title, ...tips].filter(Boolean).join('\n');
  if (t) td.title = t;
  return td;
}

function fillTable(m) {
  const tb = $('models-layers').tBodies[0];
  tb.replaceChildren(...m.layers.map((run) => {
    const tr = document.createElement('tr');
    tr.dataset.stack = run.stack || '';
    tr.dataset.first = String(run.first_layer);
    tr.dataset.last = String(run.last_layer);
    tr.dataset.attention = run.attention;
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'layer';
    b.textContent = (run.stack ? `${run.stack} ` : '') + (run.first_layer === run.last_layer
      ? String(run.first_layer) : `${run.first_layer}\u2013${run.last_layer}`);
    b.setAttribute('aria-label', `show layer ${layerName({ stack: run.stack, layer: run.first_layer })}`);
    b.dataset.layer = layerKey(run.stack || '', run.first_layer);
    tr.insertCell().append(b);
    const kind = (KIND[run.attention] || run.attention) + (run.causal === false ? ', bidirectional' : ', causal');
    cell(tr, kind, run, ['causal'], run.attention).className = 'kind';
    cell(tr, `${run.num_heads} / ${run.num_kv_heads} \u00d7 ${run.head_dim}`, run,
      ['num_heads', 'num_kv_heads', 'head_dim'], 'query heads / kv heads \u00d7 head dim');
    cell(tr, schemeText(run.scheme, run.head_dim), run, ['scheme'], JSON.stringify(run.scheme));
    cell(tr, run.scale === undefined ? '-' : n2s(run.scale), run, ['scale'], run.scale === undefined ? '' : String(run.scale));
    const wc = run.window ? `window ${run.window}` : run.chunk_size ? `chunk ${run.chunk_size}` : '-';
    cell(tr, wc, run, ['window', 'chunk_size']).className = 'wc';
    cell(tr, run.softcap ? n2s(run.softcap) : '-', run, ['softcap']);
    const qn = normText(run, 'q_norm'), kn = normText(run, 'k_norm');
    const norms = !qn && !kn ? '-' : qn === kn ? `q, k: ${qn}` : [qn && `q: ${qn}`, kn && `k: ${kn}`].filter(Boolean).join('; ');
    cell(tr, norms, run, ['q_norm', 'k_norm'],
      run.requires.filter((r) => /_norm\.weight$/.test(r.field)).map((r) => r.what).join('; '));
    const also = [];
    if (run.attn_temperature_tuning) {
      const a = run.attn_temperature_tuning;
      also.push(`temperature tuning (floor ${n2s(a.floor_scale)}, scale ${n2s(a.attn_scale)})`);
    }
    for (const [k, v] of Object.entries(run)) if (!KNOWN.has(k)) also.push(`${k}: ${JSON.stringify(v)}`);
    cell(tr, also.length ? also.join('; ') : '-', run, ['attn_temperature_tuning',
      ...Object.keys(run).filter((k) => !KNOWN.has(k))]);
    const td = tr.insertCell();
    td.className = 'needs';
    td.textContent = run.requires.length ? run.requires.map((r) => `${r.field} [${r.shape.join(', ')}]`).join(', ') : '-';
    if (run.requires.length) {
      const s = document.createElement('span');
      s.className = 'cfg';
      s.textContent = [...new Set(run.requires.map((r) => r.config))].join(', ');
      td.append(s);
      td.title = run.requires.map((r) => `${r.field}: ${r.what} (config "${r.config}")`).join('\n');
    }
    return tr;
  }));
  tableOf = m.name;
}

function fillSelect(sel, options, fallback) {   // [[value, text]]; keeps the value when it is still offered
  const had = sel.value;
  sel.replaceChildren(...options.map(([v, t]) => new Option(t, v)));
  sel.value = options.some(([v]) => v === had) ? had : fallback;
}

// A random tensor (seeded) of a shape.
const tensor = (g, shape, scale = 1, plus = 0) => ({ shape,
  data: round(g(shape.reduce((a, b) => a * b, 1), scale).map((v) => v + plus)) });

function setField(item, field, value) {   // "q_norm.weight" -> item.q_norm.weight (merged by the server)
  const parts = field.split('.');
  let o = item;
  for (const p of parts.slice(0, -1)) o = (o[p] = o[p] || {});
  o[parts[parts.length - 1]] = value;
}

// The item for a layer: q, k, v of its shapes (x and projections when its
// scheme is learned, which enters at the embedding), the positions, and each
// tensor the layer requires, random; everything else comes from the config.
function layerItem(m, e, L, pos, g) {
  const run = e.run, H = run.num_heads, Hkv = run.num_kv_heads, D = run.head_dim;
  const item = { id: `${m.name}:${layerName(e)}`, model: m.name, layer: e.layer };
  if (e.stack) item.stack = e.stack;
  const sent = [];
  const learned = run.scheme && run.scheme.type === 'learned';
  if (learned) {
    const need = run.requires.find((r) => r.field === 'scheme.table');
    const dm = need ? need.shape[1] : H * D;
    item.x = tensor(g, [L, dm]);
    item.w_q = tensor(g, [dm, H * D], 1 / Math.sqrt(dm));
    item.w_k = tensor(g, [dm, Hkv * D], 1 / Math.sqrt(dm));
    item.w_v = tensor(g, [dm, Hkv * D], 1 / Math.sqrt(dm));
    sent.push(`x [${L}, ${dm}], w_q [${dm}, ${H * D}], w_k and w_v [${dm}, ${Hkv * D}] (layer mode: a learned ` +
      'table enters at the embedding)');
  } else {
    item.q = tensor(g, [L, H, D]);
    item.k = tensor(g, [L, Hkv, D]);
    item.v = tensor(g, [L, Hkv, D]);
    sent.push(`q [${L}, ${H}, ${D}], k and v [${L}, ${Hkv}, ${D}]`);
  }
  // A vision tower's patches sit on a grid (merge_size rows of blocks), not
  // at 1-D positions.
  const m2 = run.scheme && run.scheme.type === 'rope2d' ? (run.scheme.merge_size || 1) : 0;
  if (m2 && L % (m2 * m2) === 0) {
    item.scheme = { grid: [m2, L / m2] };
    sent.push(`scheme.grid = [${m2}, ${L / m2}] (one frame of patches)`);
  } else {
    item.q_positions = pos;
    item.k_positions = pos.slice();
    sent.push('q_positions = k_positions = ' + (L > 4 ? `${pos[0]}, ${pos[1]}, \u2026, ${pos[L - 1]}` : pos.join(', ')));
  }
  for (const r of run.requires) {
    const shape = r.shape.slice();
    let note = '';
    // A learned table of the config's whole length would be megabytes; the
    // rows the positions reach are enough (past its end the server says so).
    if (learned && r.field === 'scheme.table') {
      const rows = (run.scheme.offset || 0) + Math.max(...pos) + 1;
      if (rows < shape[0]) { note = ` (its first ${rows} of ${shape[0]} rows)`; shape[0] = rows; }
    }
    const norm = /_norm\.weight$/.test(r.field);
    const base = r.field.split('.')[0], offset = norm && run[base] && run[base].weight_offset;
    // Norm weights near the identity, as trained ones are (stored as weight - 1 with an offset).
    setField(item, r.field, norm ? tensor(g, shape, 0.1, offset ? 0 : 1) : tensor(g, shape, 0.5));
    sent.push(`${r.field} [${shape.join(', ')}]${note}: ${r.what}, random (config "${r.config}")`);
  }
  item.return = ['weights'];
  return { item, sent };
}

// Which cells the layer's own masks hide: causal, window (both sides when
// not causal) and chunk, by position (by token order under M-RoPE, whose
// rows only choose angles).
function hider(run, pos) {
  const P = run.scheme && run.scheme.mrope_section ? pos.map((_, i) => i) : pos;
  const W = run.window || 0, C = run.chunk_size || 0;
  return (q, k) => {
    const d = P[q] - P[k];
    if (run.causal && d < 0) return 'causal';
    if (W && (d >= W || (!run.causal && -d >= W))) return 'window';
    if (C && Math.floor(P[q] / C) !== Math.floor(P[k] / C)) return 'chunk';
    return null;
  };
}

const inner = panel('models', 'models-status', async (current) => {
  if (!models) {
    const r = await api('/v1/models');
    models = Array.isArray(r.models) ? r.models : [];
    tableOf = null;
    fillSelect($('models-model'), models.map((m) => [m.name,
      `${m.name} (${m.model_type}, ${m.num_layers} layers)`]), models.length ? models[0].name : '');
  }
  if (!current()) return;
  $('models-none').hidden = models.length > 0;
  $('models-body').hidden = models.length === 0;
  if (!models.length) return 'no model is loaded: start posattnd with --model NAME=config.json';
  const m = models.find((x) => x.name === $('models-model').value) || models[0];
  const all = layersOf(m);
  if (tableOf !== m.name) {
    fillTable(m);
    fillSelect($('models-layer'), all.map((e) => [layerKey(e.stack, e.layer),
      `${layerName(e)} (${KIND[e.run.attention] || e.run.attention})`]), layerKey(all[0].stack, all[0].layer));
  }
  const e = all.find((x) => layerKey(x.stack, x.layer) === $('models-layer').value) || all[0];
  const run = e.run;
  for (const tr of $('models-layers').tBodies[0].rows) {
    const on = tr.dataset.stack === e.stack && Number(tr.dataset.first) <= e.layer && e.layer <= Number(tr.dataset.last);
    tr.classList.toggle('current', on);
    if (on) tr.setAttribute('aria-current', 'true'); else tr.removeAttribute('aria-current');
  }
  fillSelect($('models-head'), Array.from({ length: run.num_heads }, (_, h) => [String(h), String(h)]), '0');
  const reach = run.window || run.chunk_size || 0, spread = $('models-spread');
  spread.disabled = !reach;
  spread.textContent = run.chunk_size && !run.window ? 'spread over the chunks' : 'spread over the window';
  spread.dataset.reach = String(reach);

  const L = num('models-length'), head = Number($('models-head').value) || 0;
  const start = Math.trunc(Number($('models-start').value) || 0);
  const step = Math.trunc(Number($('models-step').value) || 1);
  const pos = Array.from({ length: L }, (_, i) => start + i * step);
  const { item, sent } = layerItem(m, e, L, pos, rng(num('models-seed')));
  const list = $('models-sent');
  const li = (t) => { const x = document.createElement('li'); x.textContent = t; return x; };
  list.replaceChildren(li(`"model": "${m.name}", "layer": ${e.layer}` + (e.stack ? `, "stack": "${e.stack}"` : '')),
    ...sent.map(li), li('"return": ["weights"]; the scheme, scale, softcap, window, chunk and norms come from the config'));
  if (!map) map = new Heatmap($('models-map'), { title: 'attention weights of the chosen layer and head',
    id: 'models-weights', xLabel: 'key', yLabel: 'query', maxH: 380 });
  const res = await api('/v1/attention', { inputs: [item] });
  if (!current()) return;
  const o = res.outputs[0];
  if (o.error) throw new ApiError(`/v1/attention: ${o.error.code}: ${o.error.message}` + (o.error.field ? ` (${o.error.field})` : ''));
  const w = o.weights.data.slice(head * L * L, (head + 1) * L * L);
  // A cell the layer's masks hide, and whose weight is 0, shows as masked.
  const hides = hider(run, pos), count = { window: 0, chunk: 0 };
  const cells = w.map((v, i) => {
    const why = hides(Math.floor(i / L), i % L);
    if (why && v === 0) { if (why in count) count[why]++; return null; }
    return v;
  });
  const sink = item.sinks ? Array.from({ length: L }, (_, r) =>
    Math.max(0, 1 - w.slice(r * L, (r + 1) * L).reduce((a, b) => a + b, 0))) : null;
  map.set(cells, L, L, { min: 0, max: 1, xValues: pos, yValues: pos,
    side: sink ? { label: 'sink', values: sink } : undefined });
  $('models').dataset.hidden = JSON.stringify(count);
  const kind = KIND[run.attention] || run.attention;
  return `${m.name} layer ${layerName(e)} (${kind}), head ${head} of ${run.num_heads}: ${L} tokens at positions ` +
    `${pos[0]} to ${pos[L - 1]} (step ${step})` +
    (run.window ? `; window ${run.window} hides ${count.window} cells` : '') +
    (run.chunk_size ? `; chunk ${run.chunk_size} hides ${count.chunk} cells` : '') +
    (sink ? `; the sink takes ${fmt(100 * Math.min(...sink), 3)}\u2013${fmt(100 * Math.max(...sink), 3)}% of a row` : '');
});

// The list is fetched again when the page runs every panel (a new key).
export const modelsPanel = { run: () => { models = null; inner.run(); }, later: inner.later };
wire('models-controls', inner);
wire('models-positions', inner);
$('models-layers').addEventListener('click', (ev) => {
  const b = ev.target.closest('button.layer');
  if (!b) return;
  $('models-layer').value = b.dataset.layer;
  inner.run();
});
$('models-spread').addEventListener('click', (ev) => {
  // About three windows or chunks over the tokens.
  const reach = Number(ev.currentTarget.dataset.reach), L = num('models-length');
  if (!reach) return;
  $('models-step').value = String(Math.max(1, Math.ceil(reach / Math.max(1, Math.floor(L / 3)))));
  inner.run();
});
