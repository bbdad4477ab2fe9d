// mla.js - the MLA panel of posattnd's web page: DeepSeek's multi-head
// latent attention with decoupled RoPE (include/posattn_mla.h), one
// /v1/attention request with the same weights twice, expanded (k_nope and v
// made here as w_uk c_kv and w_uv c_kv) and absorbed (c_kv with w_uk, w_uv).
// It draws one head's weights, the two logit terms they come from (q_nope .
// k_nope and rot(q_rope) . rot(k_rope), from the server's q_rot and k_rot),
// and the largest |difference| between the two forms' weights.

import { Heatmap, fmt } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { ApiError, api } from '/web/api.js';
import { panel, wire } from '/web/panel.js';

const MAX_DIM = 64;   // what the page sends per dimension (D_nope, D_rope, Dv, R)
let maps = null;

function itemError(o) {
  return new ApiError(`/v1/attention: ${o.error.code}: ${o.error.message}` + (o.error.field ? ` (${o.error.field})` : ''));
}

// A whole number from a control; sent as typed (an odd D_rope too), for the
// server to refuse with the field named. Only sizes the page cannot draw are
// stopped here.
function dim(id, name) {
  const v = num(id);
  if (!Number.isInteger(v) || v < 0) throw new ApiError(`${name}: '${$(id).value}' is not a whole number`);
  if (v > MAX_DIM) throw new ApiError(`${name}: ${v}; at most ${MAX_DIM} here`);
  return v;
}

// out[j, h, e] = sum_r w[h, e, r] c[j, r]: the up-projection of the latent
// rows, in double (the server rounds what it is sent to float32).
function upProject(c, w, L, H, E, R) {
  const out = new Array(L * H * E);
  for (let j = 0; j < L; j++)
    for (let h = 0; h < H; h++)
      for (let e = 0; e < E; e++) {
        let s = 0;
        for (let r = 0; r < R; r++) s += w[(h * E + e) * R + r] * c[j * R + r];
        out[(j * H + h) * E + e] = s;
      }
  return out;
}

// The head choices follow the heads control.
function syncHeads(H) {
  const sel = $('mla-head');
  if (sel.options.length === H) return;
  const keep = Math.min(Number(sel.value) || 0, H - 1);
  sel.replaceChildren(...Array.from({ length: H }, (_, h) => new Option(String(h), String(h), false, h === keep)));
}

export const mlaPanel = panel('mla', 'mla-status', async (current) => {
  const L = num('mla-length'), H = num('mla-heads'), causal = $('mla-causal').checked;
  const Dn = dim('mla-dnope', 'D_nope'), Dr = dim('mla-drope', 'D_rope'), Dv = dim('mla-dv', 'Dv');
  const R = dim('mla-rank', 'kv_lora_rank R'), layout = $('mla-layout').value, form = $('mla-form').value;
  syncHeads(H);
  const head = Math.min(num('mla-head'), H - 1), D = Dn + Dr;
  const g = rng(num('mla-seed'));
  const q = { shape: [L, H, D], data: round(g(L * H * D)) };
  const kRope = { shape: [L, Dr], data: round(g(L * Dr)) };
  const cKv = { shape: [L, R], data: round(g(L * R)) };
  const wUk = { shape: [H, Dn, R], data: round(g(H * Dn * R, 1 / Math.sqrt(R))) };
  const wUv = { shape: [H, Dv, R], data: round(g(H * Dv * R, 1 / Math.sqrt(R))) };
  const kNope = { shape: [L, H, Dn], data: upProject(cKv.data, wUk.data, L, H, Dn, R) };
  const v = { shape: [L, H, Dv], data: upProject(cKv.data, wUv.data, L, H, Dv, R) };
  const common = { scheme: { type: 'rope', layout }, causal, q, k_rope: kRope };
  const res = await api('/v1/attention', { inputs: [
    Object.assign({ id: 'mla-expanded', mla: { rope_dim: Dr }, k: kNope, v,
      return: ['weights', 'logits', 'q_rot', 'k_rot'] }, common),
    Object.assign({ id: 'mla-absorbed', mla: { rope_dim: Dr, absorbed: true, w_uk: wUk, w_uv: wUv }, c_kv: cKv,
      return: ['weights'] }, common),
  ] });
  if (!current()) return;
  const [oe, oa] = res.outputs;
  if (oe.error) throw itemError(oe);
  if (oa.error) throw itemError(oa);
  if (!maps) {
    const box = $('mla-maps'), card = (id) => {
      const c = document.createElement('div');
      c.className = 'card';
      c.id = id;
      box.appendChild(c);
      return c;
    };
    maps = {
      w: new Heatmap(card('mla-card-w'), { title: 'weights', id: 'mla-w', xLabel: 'key', yLabel: 'query', maxH: 280 }),
      nope: new Heatmap(card('mla-card-nope'), { title: 'nope term', id: 'mla-nope', cmap: 'diverging', symmetric: true,
        xLabel: 'key', yLabel: 'query', maxH: 280 }),
      rope: new Heatmap(card('mla-card-rope'), { title: 'rope term', id: 'mla-rope', cmap: 'diverging', symmetric: true,
        xLabel: 'key', yLabel: 'query', maxH: 280 }),
    };
  }
  // Weights and logits [H, L, L]: at a masked cell a weight is 0, a logit null.
  const n = L * L, we = oe.weights.data, wa = oa.weights.data, lg = oe.logits.data;
  let diff = 0, rowErr = 0, splitErr = 0;
  for (let i = 0; i < H * n; i++)
    if (we[i] !== null || wa[i] !== null) diff = Math.max(diff, Math.abs((we[i] || 0) - (wa[i] || 0)));
  for (let r = 0; r < H * L; r++) {
    let s = 0;
    for (let c = 0; c < L; c++) s += we[r * L + c] || 0;
    rowErr = Math.max(rowErr, Math.abs(s - 1));
  }
  // The two terms of head `head`, scaled as the logits are (HF's
  // (D_nope + D_rope)^-0.5): q_nope . k_nope from the inputs sent, and
  // rot(q_rope) . rot(k_rope) from the server's q_rot [L, H, D] and k_rot
  // [L, Dr]. Their sum is the server's logit.
  const s = 1 / Math.sqrt(D), qr = oe.q_rot.data, kr = oe.k_rot.data;
  const nope = new Array(n), rope = new Array(n);
  for (let i = 0; i < L; i++)
    for (let j = 0; j < L; j++) {
      const x = (i * L + j), l = lg[head * n + x];
      if (l === null) { nope[x] = rope[x] = null; continue; }
      let a = 0, b = 0;
      for (let d = 0; d < Dn; d++) a += q.data[(i * H + head) * D + d] * kNope.data[(j * H + head) * Dn + d];
      for (let d = 0; d < Dr; d++) b += qr[(i * H + head) * D + Dn + d] * kr[j * Dr + d];
      nope[x] = s * a;
      rope[x] = s * b;
      splitErr = Math.max(splitErr, Math.abs(nope[x] + rope[x] - l));
    }
  const shown = form === 'absorbed' ? wa : we;
  maps.w.cap.textContent = `weights of head ${head} (${form})`;
  maps.w.set(shown.slice(head * n, (head + 1) * n), L, L, { min: 0, max: 1 });
  maps.nope.cap.textContent = `s q_nope\u00b7k_nope (head ${head}, no position)`;
  maps.rope.cap.textContent = `s rot(q_rope)\u00b7rot(k_rope) (head ${head}, k_rope shared)`;
  maps.nope.set(nope, L, L);
  maps.rope.set(rope, L, L);
  const sum = $('mla-summary');
  sum.innerHTML = 'expanded and absorbed weights differ by at most <span class="val"></span> (every head); ' +
    'logit = nope term + rope term within <span class="val"></span>; rows sum to 1 within <span class="val"></span>';
  [fmt(diff, 2), fmt(splitErr, 2), fmt(rowErr, 2)].forEach((t, i) => { sum.children[i].textContent = t; });
  Object.assign(sum.dataset, { maxDiff: String(diff), splitErr: String(splitErr), rowErr: String(rowErr) });
  return `q [${L}, ${H}, ${Dn} + ${Dr}], k_nope [${L}, ${H}, ${Dn}], k_rope [${L}, ${Dr}], v [${L}, ${H}, ${Dv}]; ` +
    `absorbed: c_kv [${L}, ${R}], w_uk [${H}, ${Dn}, ${R}], w_uv [${H}, ${Dv}, ${R}]; rope ${layout}` +
    (causal ? ', causal' : '') + `; showing head ${head} (${form}), seed ${num('mla-seed')}`;
});
wire('mla-controls', mlaPanel);
