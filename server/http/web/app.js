// app.js - posattnd's web page: every plot is drawn from a live call to this
// server's API (/v1/encode, /v1/analyze, /v1/attention, /metrics). Each
// section is a panel that re-runs when its controls change; its element
// carries data-state (pending, loading, ready, error) for people and tests.

import { Heatmap, LinePlot, fmt, SERIES } from '/web/plot.js';

const $ = (id) => document.getElementById(id);
const KEY = 'posattn-api-key';
let apiKey = sessionStorage.getItem(KEY) || '';

// ------------------------------------------------------------------ the API

class ApiError extends Error {}

async function call(path, body) {
  const headers = {};
  if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
  const init = { method: body === undefined ? 'GET' : 'POST', headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let r;
  for (let attempt = 0; ; attempt++) {   // 503 (queue full): retry as Retry-After says
    r = await fetch(path, init);
    if (r.status !== 503 || attempt === 3) break;
    const wait = Number(r.headers.get('Retry-After')) || 1;
    await new Promise((res) => setTimeout(res, wait * 1000));
  }
  const text = await r.text();
  if (r.status === 401) {
    banner(apiKey ? 'The API key was refused (401). Enter the key posattnd was started with.'
                  : 'This posattnd requires an API key (it runs with --api-key): enter it above.');
    $('api-key').focus();
  }
  if (!r.ok) {
    let msg = `HTTP ${r.status}`;
    try {
      // A batch whose every item failed answers with the items' status and
      // the batch's own body: the first item's error says why.
      const j = JSON.parse(text), items = Array.isArray(j.outputs) ? j.outputs : [];
      const e = j.error || (items.find((o) => o && o.error) || {}).error;
      if (e) msg = `${e.code}: ${e.message}` + (e.field ? ` (${e.field})` : '');
    } catch (e) { /* not JSON */ }
    throw new ApiError(`${path}: ${msg}`);
  }
  return path === '/metrics' ? text : JSON.parse(text);
}
const api = (path, body) => call(path, body);

function banner(text) {
  const b = $('banner');
  b.textContent = text;
  b.hidden = !text;
}

// A deep link (/#live) is scrolled to before the plots above its section
// have arrived, and each plot that arrives pushes the section down. So until
// the person scrolls, clicks or types (or 30 s have passed; 3 s after a
// link within the page, when the plots are there), the target is scrolled
// back into place whenever the page's height changes.
const follow = { el: null, until: 0 };
function followHash(ms) {
  const id = decodeURIComponent(location.hash.slice(1));
  follow.el = id ? document.getElementById(id) : null;
  follow.until = performance.now() + ms;
}
followHash(30000);
window.addEventListener('hashchange', () => followHash(3000));
for (const ev of ['wheel', 'touchstart', 'keydown', 'mousedown'])
  window.addEventListener(ev, () => { follow.el = null; }, { passive: true, capture: true });
new ResizeObserver(() => {
  if (follow.el && performance.now() < follow.until) follow.el.scrollIntoView({ block: 'start' });
}).observe(document.body);

// A section that re-runs fn when asked; stale answers are dropped.
function panel(sectionId, statusId, fn) {
  const sec = $(sectionId), st = $(statusId);
  let gen = 0, timer = null;
  const run = async () => {
    const my = ++gen;
    sec.dataset.state = 'loading';
    st.classList.remove('error');
    try {
      const msg = await fn(() => my === gen);
      if (my !== gen) return;
      st.textContent = msg || '';
      sec.dataset.state = 'ready';
    } catch (e) {
      if (my !== gen) return;
      st.textContent = e.message;
      st.classList.add('error');
      sec.dataset.state = 'error';
      if (!(e instanceof ApiError)) console.error(e);
    }
  };
  const later = () => {
    sec.dataset.state = 'pending';
    clearTimeout(timer);
    timer = setTimeout(run, 120);
  };
  return { run, later };
}

// Re-runs p when any control of the form changes.
function wire(formId, p, extra) {
  const f = $(formId);
  f.addEventListener('input', (e) => { syncOutputs(f); if (!extra || !extra(e)) p.later(); });
  f.addEventListener('submit', (e) => e.preventDefault());
  syncOutputs(f);
}
function syncOutputs(f) {
  for (const o of f.querySelectorAll('output[for]')) {
    const src = $(o.htmlFor.value || o.getAttribute('for'));
    if (src) o.textContent = src.value;
  }
}

// Deterministic pseudo-random numbers (mulberry32), normal by Box-Muller.
function rng(seed) {
  let a = (seed >>> 0) || 1;
  const u = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return (n, scale = 1) => Array.from({ length: n }, () =>
    scale * Math.sqrt(-2 * Math.log(1 - u())) * Math.cos(2 * Math.PI * u()));
}
const round = (a) => a.map((v) => Math.round(v * 1e4) / 1e4);
const num = (id) => Number($(id).value);

// ------------------------------------------------------------ sinusoidal

const sinEnc = new Heatmap($('sin-enc'), { title: 'Encoding PE [position \u00d7 dimension]', id: 'sin-enc-map',
  cmap: 'diverging', symmetric: true, xLabel: 'dim', yLabel: 'pos' });
const sinSim = new Heatmap($('sin-sim'), { title: 'Similarity P\u00b7P\u1d40 [position \u00d7 position]',
  id: 'sin-sim-map', xLabel: 'pos', yLabel: 'pos' });
let sinData = null;

const sinPanel = panel('sinusoidal', 'sin-status', async (current) => {
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

// ------------------------------------------------------------------ RoPE

const ropeScore = new LinePlot($('rope-score'), { title: 'q\u00b7k score against offset m\u2212n',
  id: 'rope-score-plot', xLabel: 'offset (q position \u2212 k position)', yLabel: 'score' });
const ropeScale = new LinePlot($('rope-scale'), { title: 'Per-pair frequency inv_freq under each scaling',
  id: 'rope-scale-plot', xLabel: 'pair i', yLabel: 'inv_freq (log)', logY: true, markers: true });
const SCALINGS = ['none', 'linear', 'ntk', 'yarn', 'llama3'];

function ropeScheme(scaling) {
  const s = { type: 'rope', base: num('rope-base'), scaling };
  if (scaling !== 'none') s.factor = num('scale-factor');
  if (scaling === 'yarn' || scaling === 'llama3') s.original_max_position = num('scale-omp');
  return s;
}

const ropePanel = panel('rope', 'rope-status', async (current) => {
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

// ---------------------------------------------------------- ALiBi and T5

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

const biasPanel = panel('bias', 'bias-status', async (current) => {
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

// ------------------------------------------------------------- attention

const DM = 8, NH = 2, HD = 4;  // d_model, heads, head dim (layer mode)
const ATT_SCHEMES = ['none', 'sinusoidal', 'learned', 'shaw', 't5', 'rope', 'alibi'];
let attMaps = null, userX = null;

function attScheme(type, g, L) {
  switch (type) {
  case 'learned': return { type, table: { shape: [L, DM], data: round(g(L * DM, 0.8)) } };
  case 'shaw': return { type, max_relative_position: 4, rel_k: { shape: [9, HD], data: round(g(9 * HD)) } };
  case 't5': return { type, table: { shape: [32, NH], data: round(g(32 * NH)) } };
  default: return { type };
  }
}

// The options of current models (softcap, sinks, chunk_size) and a mask
// drawn by hand: added to every item when set, as the user typed them (the
// server judges them; its error shows in the status line).
function attOptions() {
  const o = {}, sc = $('att-softcap').value.trim(), ch = $('att-chunk').value.trim();
  if (sc !== '') o.softcap = Number(sc);
  if ($('att-sinks').checked) {
    const s = $('att-sink-value').value.trim();
    o.sinks = { shape: [NH], data: new Array(NH).fill(s === '' ? 0 : Number(s)) };
  }
  if (ch !== '') o.chunk_size = Number(ch);
  if (mask.ok.some((ok) => !ok)) o.mask = { shape: [mask.L, mask.L], data: mask.ok.slice() };
  return o;
}

// The drawn mask: ok[q * L + k], true = query q may attend to key k. Its
// grid is a group of buttons, one tab stop (arrow keys move), pressed =
// blocked; a press or a drag sets every cell it crosses to the new value.
const mask = { L: 0, ok: [], at: 0 };
const maskGrid = $('att-mask');

function maskResize(L) {
  if (mask.L === L) return;
  const old = mask.L, had = mask.ok;
  mask.ok = Array.from({ length: L * L }, (_, i) => {
    const q = Math.floor(i / L), k = i % L;
    return q < old && k < old ? had[q * old + k] : true;
  });
  mask.L = L;
  mask.at = Math.min(mask.at, L * L - 1);
  maskGrid.style.setProperty('--n', String(L));
  maskGrid.replaceChildren(...mask.ok.map((_, i) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.q = String(Math.floor(i / L));
    b.dataset.k = String(i % L);
    b.tabIndex = i === mask.at ? 0 : -1;
    return b;
  }));
  maskPaint();
}

// Shows each cell: blocked by the mask, hidden by causal or chunk, or open.
function maskPaint() {
  const L = mask.L, causal = $('att-causal').checked, C = Number($('att-chunk').value.trim() || 0);
  const chunk = Number.isInteger(C) && C > 0 ? C : 0;
  let blocked = 0;
  [...maskGrid.children].forEach((b, i) => {
    const q = Math.floor(i / L), k = i % L, ok = mask.ok[i];
    const hidden = (causal && k > q) || (chunk && Math.floor(q / chunk) !== Math.floor(k / chunk));
    if (!ok) blocked++;
    b.setAttribute('aria-pressed', ok ? 'false' : 'true');
    b.classList.toggle('hidden', ok && !!hidden);
    b.setAttribute('aria-label', `query ${q}, key ${k}`);
    b.title = `query ${q}, key ${k}: ` + (!ok ? 'blocked by the mask' : hidden ? 'hidden by ' +
      (causal && k > q ? 'causal' : 'chunk size') : 'may attend');
  });
  $('att-mask-summary').textContent = blocked
    ? `(${blocked} of ${L * L} cells blocked: the mask is sent)` : '(every cell true: no mask is sent)';
}

function maskSet(i, ok) {
  if (mask.ok[i] === ok) return;
  mask.ok[i] = ok;
  maskPaint();
  attPanel.later();
}

function maskPreset(f) {   // f(q, k, L) -> may attend
  const L = mask.L;
  mask.ok = mask.ok.map((_, i) => f(Math.floor(i / L), i % L, L));
  maskPaint();
  attPanel.later();
}

let maskDrag = null;   // the value a press is painting, while the button is down
const maskCell = (el) => (el && el.parentElement === maskGrid ? [...maskGrid.children].indexOf(el) : -1);
maskGrid.addEventListener('pointerdown', (e) => {
  const i = maskCell(e.target);
  if (i < 0 || e.button !== 0) return;
  e.preventDefault();   // no text selection, no focus ring from the mouse
  maskDrag = !mask.ok[i];
  maskSet(i, maskDrag);
});
maskGrid.addEventListener('pointermove', (e) => {
  if (maskDrag === null) return;
  const i = maskCell(document.elementFromPoint(e.clientX, e.clientY));
  if (i >= 0) maskSet(i, maskDrag);
});
window.addEventListener('pointerup', () => { maskDrag = null; });
window.addEventListener('pointercancel', () => { maskDrag = null; });
maskGrid.addEventListener('click', (e) => {   // Enter or Space (a mouse press was handled above)
  const i = maskCell(e.target);
  if (i >= 0 && e.detail === 0) maskSet(i, !mask.ok[i]);
});
maskGrid.addEventListener('keydown', (e) => {
  const i = maskCell(e.target), L = mask.L;
  if (i < 0) return;
  const d = { ArrowUp: -L, ArrowDown: L, ArrowLeft: -1, ArrowRight: 1 }[e.key];
  let j;
  if (e.key === 'Home') j = 0;
  else if (e.key === 'End') j = L * L - 1;
  else if (d === undefined) return;
  else if ((e.key === 'ArrowLeft' && i % L === 0) || (e.key === 'ArrowRight' && i % L === L - 1)) j = i;
  else j = i + d;
  e.preventDefault();
  if (j < 0 || j >= L * L) return;
  maskGrid.children[mask.at].tabIndex = -1;
  mask.at = j;
  maskGrid.children[j].tabIndex = 0;
  maskGrid.children[j].focus();
});
$('att-mask-clear').addEventListener('click', () => maskPreset(() => true));
$('att-mask-prefix').addEventListener('click', () => {
  // Prefix-LM (T5, UniLM, PaliGemma): the first half sees itself both ways,
  // the rest causally; causal would hide the prefix's future, so it goes off.
  $('att-causal').checked = false;
  maskPreset((q, k, L) => k < Math.ceil(L / 2) || k <= q);
});
$('att-mask-docs').addEventListener('click', () =>   // two packed documents: each sees only itself
  maskPreset((q, k, L) => (q < Math.ceil(L / 2)) === (k < Math.ceil(L / 2))));

function pct(v) { return `${fmt(100 * v, 3)}%`; }

const attPanel = panel('attention', 'att-status', async (current) => {
  const L = userX ? userX.length : num('att-length'), causal = $('att-causal').checked;
  const head = Math.min(num('att-head'), NH - 1);
  maskResize(L);
  const g = rng(num('att-seed'));
  const x = { shape: [L, DM], data: userX ? userX.flat() : round(g(L * DM)) };
  const w = () => ({ shape: [DM, NH * HD], data: round(g(DM * NH * HD, 1.5 / Math.sqrt(DM))) });
  const opts = attOptions();
  const common = Object.assign({ x, w_q: w(), w_k: w(), w_v: w(), num_heads: NH, causal }, opts);
  const items = ATT_SCHEMES.map((t) => Object.assign({ scheme: attScheme(t, g, L) }, common));
  if (!attMaps) {
    const box = $('att-grid');
    attMaps = ATT_SCHEMES.map((t) => {
      const card = document.createElement('div');
      card.className = 'card';
      card.id = `card-${t}`;
      box.appendChild(card);
      const map = new Heatmap(card, { title: `${t}`, id: `att-${t}`, xLabel: 'key',
        yLabel: 'query', maxH: 300 });
      const v = document.createElement('p');
      v.className = 'verdict';
      v.id = `perm-${t}`;
      const s = document.createElement('p');
      s.className = 'sinkline';
      s.id = `sink-${t}`;
      s.hidden = true;
      card.append(v, s);
      return map;
    });
  }
  // A permutation that fails is kept as its error: the attention call's own
  // error (the same bad option, with its item) is the one to show first.
  const [att, ...perms] = await Promise.all([
    api('/v1/attention', { inputs: items.map((it, i) => Object.assign({ id: ATT_SCHEMES[i], return: ['weights'] }, it)) }),
    ...items.map((it) => api('/v1/analyze', Object.assign({ analysis: 'permutation' }, it)).catch((e) => e)),
  ]);
  if (!current()) return;
  let failed = null;
  att.outputs.forEach((o, i) => {
    const t = ATT_SCHEMES[i], v = $(`perm-${t}`), sl = $(`sink-${t}`);
    if (o.error) {
      v.textContent = o.error.message;
      sl.hidden = true;
      failed = failed || new ApiError(`/v1/attention: ${o.error.code}: ${o.error.message}` +
        (o.error.field ? ` (${o.error.field})` : ''));
      return;
    }
    const wts = o.weights.data.slice(head * L * L, (head + 1) * L * L);
    // With sinks a row sums to less than 1: the rest went to the sink.
    const sink = opts.sinks ? Array.from({ length: L }, (_, r) =>
      Math.max(0, 1 - wts.slice(r * L, (r + 1) * L).reduce((a, b) => a + b, 0))) : null;
    attMaps[i].set(wts, L, L, { min: 0, max: 1, side: sink ? { label: 'sink', values: sink } : undefined });
    sl.hidden = !sink;
    if (sink) {
      const lo = Math.min(...sink), hi = Math.max(...sink), r = sink.indexOf(hi);
      sl.innerHTML = 'sink takes <span class="val"></span> of a row (most in row <span></span>)';
      sl.children[0].textContent = lo === hi ? pct(lo) : `${fmt(100 * lo, 3)}\u2013${pct(hi)}`;
      sl.children[1].textContent = String(r);
      sl.dataset.values = JSON.stringify(sink);
    }
    const p = perms[i];
    if (p instanceof Error) { failed = failed || p; v.textContent = p.message; return; }
    const d = p.max_abs_diff, blind = d < 1e-5;
    v.innerHTML = 'reversed order: max |f(Px) \u2212 P f(x)| = <span class="val"></span> \u2192 <span></span>';
    v.children[0].textContent = fmt(d, 3);
    v.children[1].textContent = blind ? 'order-blind' : 'order-aware';
    v.children[1].className = blind ? 'blind' : 'aware';
    v.dataset.value = String(d);
  });
  if (failed) throw failed;
  const blocked = opts.mask ? opts.mask.data.filter((ok) => !ok).length : 0;
  return `${L} tokens \u00d7 ${DM}, ${NH} heads of ${HD}, showing head ${head}` + (causal ? ', causal' : '') +
    ('softcap' in opts ? `, softcap ${opts.softcap}` : '') + (opts.sinks ? `, sinks ${opts.sinks.data[0]}` : '') +
    ('chunk_size' in opts ? `, chunk size ${opts.chunk_size}` : '') +
    (blocked ? `, mask (${blocked} cells blocked)` : '') + (userX ? ', your x' : `, seed ${num('att-seed')}`);
});
wire('att-controls', attPanel, () => {   // the grid follows tokens and causal at once
  maskResize(userX ? userX.length : num('att-length'));
  maskPaint();
  return false;
});
wire('att-options', attPanel, (e) => {
  if (e.target.id === 'att-sinks') $('att-sink-value').disabled = !e.target.checked;
  maskPaint();
  return false;
});
$('att-sink-value').disabled = !$('att-sinks').checked;   // as the browser restored the form
$('att-random').addEventListener('click', () => {
  $('att-seed').value = String((num('att-seed') + 1) % 100000);
  userX = null;
  attPanel.run();
});
$('att-x-apply').addEventListener('click', () => {
  const text = $('att-x').value.trim(), st = $('att-status');
  if (!text) { userX = null; attPanel.run(); return; }
  try {
    const v = JSON.parse(text);
    if (!Array.isArray(v) || v.length < 2 || v.length > 32 ||
        v.some((r) => !Array.isArray(r) || r.length !== DM || r.some((n) => typeof n !== 'number')))
      throw new Error(`x must be 2 to 32 rows of ${DM} numbers`);
    userX = v;
    attPanel.run();
  } catch (e) {
    st.textContent = 'x: ' + e.message;
    st.classList.add('error');
  }
});

// ---------------------------------------------------------- live service

const ratePlot = new LinePlot($('live-rate'), { title: 'Requests per second, by endpoint', id: 'live-rate-plot',
  xLabel: 'seconds ago', yLabel: 'requests/s' });
const p99Plot = new LinePlot($('live-p99'), { title: 'p99 compute time per scheme over the window (\u00b5s)',
  id: 'live-p99-plot', xLabel: 'seconds ago', yLabel: 'p99 (\u00b5s, log)', markers: true, logY: true });
const snaps = [];   // {t, m}: the parsed /metrics of each refresh, newest last (90 s of them)

function parseMetrics(text) {
  const m = { req: {}, items: {}, compute: {}, duration: {}, gauges: {} };
  for (const line of text.split('\n')) {
    const r = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!r) continue;
    const labels = {};
    for (const l of (r[2] || '').matchAll(/(\w+)="([^"]*)"/g)) labels[l[1]] = l[2];
    const v = Number(r[3]), name = r[1];
    if (name === 'posattn_requests_total') m.req[labels.endpoint] = (m.req[labels.endpoint] || 0) + v;
    else if (name === 'posattn_items_total') m.items[labels.scheme] = v;
    else if (name === 'posattn_compute_duration_seconds_bucket')
      (m.compute[labels.scheme] = m.compute[labels.scheme] || []).push([Number(labels.le), v]);
    else if (name === 'posattn_request_duration_seconds_bucket')
      (m.duration[labels.endpoint] = m.duration[labels.endpoint] || []).push([Number(labels.le), v]);
    else if (name === 'posattn_build_info') m.gauges.version = labels.version;
    else if (name === 'posattn_queue_depth' || name === 'posattn_in_flight') m.gauges[name] = v;
  }
  return m;
}

// Cumulative buckets now minus those of an earlier snapshot: the window.
function minus(now, before) {
  if (!before) return now;
  const old = new Map(before);
  return now.map(([le, c]) => [le, c - (old.get(le) || 0)]);
}

// As Prometheus' histogram_quantile: linear inside the bucket.
function quantile(buckets, q) {
  const n = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!(n > 0)) return null;
  const rank = q * n;
  let lo = 0, below = 0;
  for (const [le, c] of buckets) {
    if (c >= rank) {
      if (!Number.isFinite(le)) return lo;
      return lo + (le - lo) * (c > below ? (rank - below) / (c - below) : 0);
    }
    lo = le; below = c;
  }
  return lo;
}

function dur(s) {
  if (s === null) return '-';
  if (s < 1e-3) return `${fmt(s * 1e6, 3)} \u00b5s`;
  if (s < 1) return `${fmt(s * 1e3, 3)} ms`;
  return `${fmt(s, 3)} s`;
}

function rows(tbody, list) {
  tbody.replaceChildren(...list.map((cells) => {
    const tr = document.createElement('tr');
    cells.forEach((c, i) => {
      const td = document.createElement(i ? 'td' : 'th');
      if (!i) td.scope = 'row';
      if (i) td.className = 'num';
      td.textContent = c;
      tr.appendChild(td);
    });
    return tr;
  }));
}

// The snapshot that starts the window of snaps[i]: the oldest one not older
// than W seconds before it (W = 0: the oldest kept), or null when snaps[i]
// is the first. A gap longer than the window (the tab was hidden) falls
// back to the snapshot just before.
function windowStart(i, W) {
  if (i === 0) return null;
  const t = snaps[i].t;
  if (!W) return snaps[0];
  return snaps.slice(0, i).find((s) => s.t >= t - W - 0.5) || snaps[i - 1];
}

function drawLive() {
  if (!snaps.length) return;
  const last = snaps.length - 1, { t, m } = snaps[last];
  const W = num('live-window');
  const base = windowStart(last, W), span = base ? t - base.t : 0;
  // Percentiles over the window (W > 0) or since the server started; rates
  // over the same window (since start: over the snapshots this page kept).
  // The first refresh has nothing to subtract: it shows since-start values.
  const label = !base ? '(since start: the first refresh)'
    : W ? `(last ${fmt(span, 3)} s)` : `(since start; rates over the last ${fmt(span, 3)} s)`;
  $('live-window-label').textContent = label;
  $('live-window-label2').textContent = label;
  const inWindow = (now, before) => (base ? Math.max(0, now - (before || 0)) : null);
  const rate = (n) => (n === null || !(span > 0) ? null : n / span);
  const q = (h, before, p) => quantile(W && base ? minus(h || [], before) : h || [], p);
  const schemes = Object.keys(m.items).filter((s) => m.items[s] > 0);
  const sn = schemes.map((s) => inWindow(m.items[s], base && base.m.items[s]));
  rows($('live-schemes').tBodies[0], schemes.map((s, j) => {
    const b = base && base.m.compute[s], r = rate(sn[j]);
    return [s, String(m.items[s]), r === null ? '-' : fmt(r, 3), dur(q(m.compute[s], b, 0.5)),
      dur(q(m.compute[s], b, 0.9)), dur(q(m.compute[s], b, 0.99))];
  }));
  [...$('live-schemes').tBodies[0].rows].forEach((tr, j) => {
    tr.dataset.scheme = schemes[j];
    tr.dataset.windowCount = String(sn[j]);   // for the tests: the rate is this over data-window-s
  });
  const eps = Object.keys(m.req).filter((e) => m.req[e] > 0);
  const en = eps.map((e) => inWindow(m.req[e], base && base.m.req[e]));
  rows($('live-endpoints').tBodies[0], eps.map((e, j) => {
    const b = base && base.m.duration[e], r = rate(en[j]);
    return [e, String(m.req[e]), r === null ? '-' : fmt(r, 3), dur(q(m.duration[e], b, 0.5)),
      dur(q(m.duration[e], b, 0.99))];
  }));
  [...$('live-endpoints').tBodies[0].rows].forEach((tr, j) => {
    tr.dataset.endpoint = eps[j];
    tr.dataset.windowCount = String(en[j]);
  });
  $('live').dataset.windowS = String(span);
  // Requests/s over time: each refresh against the one before it.
  const pairs = snaps.slice(1).map((s, i) => [snaps[i], s]);
  const xSpan = { xMin: -Math.max(t - snaps[0].t, 10), xMax: 0 };   // at least 10 s wide
  const shown = ['attention', 'analyze', 'encode', 'metrics', 'page'].filter((e) => eps.includes(e));
  ratePlot.set(shown.map((e, j) => ({ name: e, color: SERIES[j], x: pairs.map(([, b]) => -(t - b.t)),
    y: pairs.map(([a, b]) => Math.max(0, ((b.m.req[e] || 0) - (a.m.req[e] || 0)) / (b.t - a.t))) })),
  Object.assign({ yMin: 0 }, xSpan));
  // p99 over time: at each refresh, over the window chosen above as of that
  // refresh, so a line goes on while its items are in the window; the first
  // point is the since-start value, so the chart has a history at once.
  const busy = schemes.filter((s) => s !== 'analysis');
  const p99 = busy.map((s) => snaps.map((snap, i) => {
    const b = windowStart(i, W), h = snap.m.compute[s] || [];
    if (i === 0 && W && !snap.first) return null;   // the oldest kept, no longer the first
    const v = quantile(W && b ? minus(h, b.m.compute[s]) : h, 0.99);
    return v === null ? null : v * 1e6;
  }));
  p99Plot.set(busy.map((s, j) => ({ name: s, color: SERIES[j % SERIES.length],
    x: snaps.map((snap) => -(t - snap.t)), y: p99[j] })), Object.assign({ yMin: 0 }, xSpan));
  $('live-p99-plot').dataset.series = JSON.stringify(Object.fromEntries(busy.map((s, j) =>
    [s, snaps.map((snap, i) => [-(t - snap.t), p99[j][i]])])));
  $('live-gauges').textContent = `posattnd ${m.gauges.version || '?'}: ${m.gauges.posattn_queue_depth} tasks queued, ` +
    `${m.gauges.posattn_in_flight} requests in flight`;
}

let liveAt = 0;   // when the last refresh started (performance.now)
const livePanel = panel('live', 'live-status', async (current) => {
  liveAt = performance.now();
  const text = await api('/metrics');
  if (!current()) return;
  const now = performance.now() / 1000;
  snaps.push({ t: now, m: parseMetrics(text), first: !snaps.length });
  // Enough for the longest window (60 s) and the plots' minute and a half.
  while (snaps.length > 2 && snaps[1].t < now - 90) snaps.shift();
  drawLive();
  return `updated ${new Date().toLocaleTimeString()}`;
});
$('live-window').addEventListener('change', drawLive);
$('live-refresh').addEventListener('click', () => livePanel.run());
$('live-controls').addEventListener('submit', (e) => e.preventDefault());
// Sampling starts with the page (the first refresh is with the other
// panels below): every 0.5 s from the first answer to the tenth, so the
// plots have points soon after a first look, then every 2 s (and every
// 2 s while there is no answer yet, e.g. before the API key is given).
setInterval(() => {
  const fast = snaps.length > 0 && snaps.length < 10;
  if (performance.now() - liveAt < (fast ? 450 : 1950)) return;
  if ($('live-auto').checked && !document.hidden) livePanel.run();
}, 500);

// One request body per scheme of GET /v1/schemes. Relative schemes take q,
// k, v; the absolute ones (sinusoidal, learned: added to the embeddings)
// need layer mode, x and the projections, and learned its table of rows.
function loadItem(type, g) {
  const L = 32, D = 16, DL = NH * D;   // length, head dim; d_model of layer mode
  const t = (...shape) => ({ shape, data: round(g(shape.reduce((a, b) => a * b, 1))) });
  const w = () => ({ shape: [DL, NH * D], data: round(g(DL * NH * D, 1 / Math.sqrt(DL))) });
  const qkv = () => ({ q: t(L, NH, D), k: t(L, NH, D), v: t(L, NH, D) });
  const layer = () => ({ x: t(L, DL), w_q: w(), w_k: w(), w_v: w(), num_heads: NH });
  switch (type) {
  case 't5': return Object.assign({ scheme: { type, table: t(32, NH) } }, qkv());
  case 'shaw': return Object.assign({ scheme: { type, max_relative_position: 8, rel_k: t(17, D) } }, qkv());
  case 'sinusoidal': return Object.assign({ scheme: { type } }, layer());
  case 'learned': return Object.assign({ scheme: { type, table: t(L, DL) } }, layer());
  default: return Object.assign({ scheme: { type } }, qkv());
  }
}

$('live-load').addEventListener('click', async () => {
  const res = $('live-load-result'), g = rng(11), N = 20;
  res.textContent = 'sending\u2026';
  res.classList.remove('error');
  try {
    const names = (await api('/v1/schemes')).schemes.map((s) => s.name);
    const bodies = names.map((type) => ({ inputs: [Object.assign(loadItem(type, g), { causal: true })],
      output_encoding: 'b64' }));
    res.textContent = `sending ${N * names.length} requests\u2026`;
    await Promise.all(bodies.flatMap((body) => Array.from({ length: N }, () =>
      api('/v1/attention', body))));
    await livePanel.run();
    res.textContent = `sent ${N * names.length} requests (${N} per scheme: ${names.join(', ')}) at ` +
      new Date().toLocaleTimeString();
    res.dataset.schemes = names.join(',');
  } catch (e) {
    res.textContent = e.message;
    res.classList.add('error');
  }
});

// --------------------------------------------------------- extrapolation

const EX_SCHEMES = ['none', 'alibi', 'rope', 'sinusoidal'];
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

const extrapPanel = panel('extrap', 'extrap-status', async (current) => {
  const T = num('extrap-train'), L = T * num('extrap-mult'), H = num('extrap-heads');
  const band = T / 4;
  const [runs, spec] = await Promise.all([
    Promise.all(EX_SCHEMES.map((type) => api('/v1/analyze', { analysis: 'extrapolation',
      scheme: { type }, train_length: T, band, lengths: [L], inputs: 'gaussian', num_heads: H,
      head_dim: 32, seed: 1 }))),
    Promise.all(SCALINGS.map((s) => api('/v1/analyze', { analysis: 'rope_spectrum',
      scheme: exRope(s, T), head_dim: 64, train_length: T, length: L })))]);
  if (!current()) return;
  const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  const lines = (key) => runs.map((r, j) => ({ name: EX_SCHEMES[j], color: SERIES[j],
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

// ------------------------------------------------------------- the key

const ALL = [sinPanel, ropePanel, biasPanel, attPanel, extrapPanel, livePanel];
$('api-key').value = apiKey;
$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  apiKey = $('api-key').value.trim();
  if (apiKey) sessionStorage.setItem(KEY, apiKey); else sessionStorage.removeItem(KEY);
  banner('');
  ALL.forEach((p) => p.run());
});
ALL.forEach((p) => p.run());
