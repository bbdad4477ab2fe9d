// attention.js - the Attention panel of posattnd's web page: the weights of
// every scheme on one layer-mode input (/v1/attention) with each scheme's
// permutation verdict (/v1/analyze), the options of current models
// (softcap, sinks, chunk_size) and a mask drawn by hand on a grid of buttons.

import { Heatmap, fmt } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { ApiError, api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';

export const DM = 8, NH = 2, HD = 4;  // d_model, heads, head dim (layer mode)
const ATT_SCHEMES = ['none', 'sinusoidal', 'learned', 'shaw', 't5', 'rope', 'alibi', 'kerple', 'sandwich', 'xpos', 'rope2d', 'fire', 'cope'];
// Schemes defined for causal attention only: their items are always causal.
const CAUSAL_ONLY = ['fire'];
let attMaps = null, userX = null;

function attScheme(type, g, L) {
  switch (type) {
  case 'learned': return { type, table: { shape: [L, DM], data: round(g(L * DM, 0.8)) } };
  case 'shaw': return { type, max_relative_position: 4, rel_k: { shape: [9, HD], data: round(g(9 * HD)) } };
  case 't5': return { type, table: { shape: [32, NH], data: round(g(32 * NH)) } };
  // KERPLE's log form with ALiBi-like multipliers, one per head.
  case 'kerple': return { type, r1: Array.from({ length: NH }, (_, h) => 2 ** -(h + 1)),
    r2: new Array(NH).fill(1) };
  // FIRE: a small seeded MLP (hidden 8) of the normalised distance, L 8 so
  // that the page's short inputs reach past the threshold.
  case 'fire': return { type, L: 8, w1: round(g(8, 3)), b1: round(g(8, 1)),
    w2: round(g(8 * NH, 1)), b2: round(g(NH, 0.5)) };
  // rope2d: the L tokens as one image, rows the largest divisor of L up to
  // its square root (posattn-load's rule).
  case 'rope2d': {
    let rows = 1;
    for (let d = 1; d * d <= L; d++) if (L % d === 0) rows = d;
    return { type, grid: [rows, L / rows] };
  }
  // CoPE with the reference's npos (every count a row can reach: L + 1),
  // one table shared by the heads.
  case 'cope': return { type, pos_emb: { shape: [L + 1, HD], data: round(g((L + 1) * HD)) } };
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

export const attPanel = panel('attention', 'att-status', async (current) => {
  const L = userX ? userX.length : num('att-length'), causal = $('att-causal').checked;
  const head = Math.min(num('att-head'), NH - 1);
  maskResize(L);
  const g = rng(num('att-seed'));
  const x = { shape: [L, DM], data: userX ? userX.flat() : round(g(L * DM)) };
  const w = () => ({ shape: [DM, NH * HD], data: round(g(DM * NH * HD, 1.5 / Math.sqrt(DM))) });
  const opts = attOptions();
  const common = Object.assign({ x, w_q: w(), w_k: w(), w_v: w(), num_heads: NH, causal }, opts);
  const items = ATT_SCHEMES.map((t) => Object.assign({ scheme: attScheme(t, g, L) }, common,
    CAUSAL_ONLY.includes(t) ? { causal: true } : {}));
  if (!attMaps) {
    const box = $('att-grid');
    attMaps = ATT_SCHEMES.map((t) => {
      const card = document.createElement('div');
      card.className = 'card';
      card.id = `card-${t}`;
      box.appendChild(card);
      const map = new Heatmap(card, { title: CAUSAL_ONLY.includes(t) ? `${t} (always causal)` : `${t}`, id: `att-${t}`, xLabel: 'key',
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
