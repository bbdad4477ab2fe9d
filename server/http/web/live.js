// live.js - the Live service panel of posattnd's web page: /metrics sampled
// every 0.5 to 2 s, rates and percentiles per scheme and endpoint over a
// chosen window (as Prometheus' histogram_quantile computes them), their
// plots over time, each scheme's mean fraction of the machine's peak (the
// items' timing.fraction_of_peak, posattn_fraction_of_peak on /metrics) in
// the table and over time, the sessions' cache (count, bytes of the budget,
// blocks, evictions, tokens), and a button that sends a load of every scheme.

import { LinePlot, fmt, SERIES } from '/web/plot.js';
import { $, num, rng, round } from '/web/util.js';
import { api } from '/web/api.js';
import { panel } from '/web/panel.js';
import { NH } from '/web/attention.js';

const ratePlot = new LinePlot($('live-rate'), { title: 'Requests per second, by endpoint', id: 'live-rate-plot',
  xLabel: 'seconds ago', yLabel: 'requests/s' });
const p99Plot = new LinePlot($('live-p99'), { title: 'p99 compute time per scheme over the window (\u00b5s)',
  id: 'live-p99-plot', xLabel: 'seconds ago', yLabel: 'p99 (\u00b5s, log)', markers: true, logY: true });
const peakPlot = new LinePlot($('live-peak'), { title: 'Fraction of the machine\u2019s peak per scheme over the window',
  id: 'live-peak-plot', xLabel: 'seconds ago', yLabel: 'fraction of peak', markers: true });
const snaps = [];   // {t, m}: the parsed /metrics of each refresh, newest last (90 s of them)

function parseMetrics(text) {
  const m = { req: {}, items: {}, compute: {}, duration: {}, gauges: {}, sess: {}, peak: {}, peakN: {}, machine: {} };
  // Session series: a labelled one (cache bytes by dtype, blocks by state,
  // evictions by reason) summed over the labels not named here.
  const SESS = { posattn_sessions: 'sessions', posattn_cache_bytes: 'bytes',
    posattn_cache_budget_bytes: 'budget', posattn_session_tokens_appended_total: 'appended',
    posattn_session_tokens_evicted_total: 'evicted' };
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
    else if (name === 'posattn_fraction_of_peak_sum') m.peak[labels.scheme] = v;
    else if (name === 'posattn_fraction_of_peak_count') m.peakN[labels.scheme] = v;
    else if (name === 'posattn_machine_gflops') m.machine[`gflops_${labels.threads}`] = v;
    else if (name === 'posattn_machine_read_gbps') m.machine[`gbps_${labels.threads}`] = v;
    else if (name === 'posattn_queue_depth' || name === 'posattn_in_flight') m.gauges[name] = v;
    else if (SESS[name]) m.sess[SESS[name]] = (m.sess[SESS[name]] || 0) + v;
    else if (name === 'posattn_cache_blocks') m.sess[`blocks_${labels.state}`] = v;
    else if (name === 'posattn_cache_evictions_total') m.sess[`evictions_${labels.reason}`] = v;
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

// The mean fraction of peak of a scheme's items in the window from snapshot
// b (null: since start) to m; null when none had one.
function peakMean(m, b, s) {
  const n = (m.peakN[s] || 0) - ((b && b.m.peakN[s]) || 0);
  return n > 0 ? ((m.peak[s] || 0) - ((b && b.m.peak[s]) || 0)) / n : null;
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
    const pk = peakMean(m, W ? base : null, s);
    return [s, String(m.items[s]), r === null ? '-' : fmt(r, 3), dur(q(m.compute[s], b, 0.5)),
      dur(q(m.compute[s], b, 0.9)), dur(q(m.compute[s], b, 0.99)), pk === null ? '-' : fmt(pk, 3)];
  }));
  [...$('live-schemes').tBodies[0].rows].forEach((tr, j) => {
    tr.dataset.scheme = schemes[j];
    tr.dataset.peak = String(peakMean(m, W ? base : null, schemes[j]));
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
  // Fraction of peak over time: the window's mean as of each refresh.
  const withPeak = schemes.filter((s) => (m.peakN[s] || 0) > 0);
  const pk = withPeak.map((s) => snaps.map((snap, i) => {
    if (i === 0 && W && !snap.first) return null;
    return peakMean(snap.m, W ? windowStart(i, W) : null, s);
  }));
  peakPlot.set(withPeak.map((s, j) => ({ name: s, color: SERIES[j % SERIES.length],
    x: snaps.map((snap) => -(t - snap.t)), y: pk[j] })), Object.assign({ yMin: 0 }, xSpan));
  $('live-peak-plot').dataset.series = JSON.stringify(Object.fromEntries(withPeak.map((s, j) =>
    [s, snaps.map((snap, i) => [-(t - snap.t), pk[j][i]])])));
  drawSessions(m.sess);
  const mc = m.machine, thr = Object.keys(mc).filter((k) => k.startsWith('gflops_')).map((k) => k.slice(7));
  const peaks = thr.length ? `; peaks measured at start-up: ${thr.map((n) => `${fmt(mc[`gflops_${n}`], 3)} GFLOP/s ` +
    `and ${fmt(mc[`gbps_${n}`], 3)} GB/s on ${n} thread${n === '1' ? '' : 's'}`).join(', ')}` : '; no peaks measured (--no-probe)';
  $('live-gauges').textContent = `posattnd ${m.gauges.version || '?'}: ${m.gauges.posattn_queue_depth} tasks queued, ` +
    `${m.gauges.posattn_in_flight} requests in flight${peaks}`;
}

function bytes(n) {
  if (n === undefined) return '-';
  if (n < 1024) return `${n} B`;
  if (n < 1048576) return `${fmt(n / 1024, 3)} KiB`;
  if (n < 1073741824) return `${fmt(n / 1048576, 3)} MiB`;
  return `${fmt(n / 1073741824, 3)} GiB`;
}

// The sessions' figures as of the last refresh (not windowed: they are
// gauges and totals since start). A server without sessions shows '-'.
function drawSessions(s) {
  const n = (v) => (v === undefined ? '-' : String(v));
  const cells = {
    sessions: [n(s.sessions), [s.sessions]],
    bytes: [s.bytes === undefined ? '-' : `${bytes(s.bytes)} of ${bytes(s.budget)}` +
      (s.budget > 0 ? ` (${fmt(100 * s.bytes / s.budget, 3)} %)` : ''), [s.bytes, s.budget]],
    blocks: [`${n(s.blocks_used)} / ${n(s.blocks_shared)}`, [s.blocks_used, s.blocks_shared]],
    evictions: [`${n(s.evictions_ttl)} / ${n(s.evictions_pool_full)}`, [s.evictions_ttl, s.evictions_pool_full]],
    tokens: [`${n(s.appended)} / ${n(s.evicted)}`, [s.appended, s.evicted]],
  };
  for (const tr of $('live-sessions').tBodies[0].rows) {
    const [text, values] = cells[tr.dataset.field];
    tr.cells[1].textContent = text;
    tr.dataset.values = JSON.stringify(values.map((v) => (v === undefined ? null : v)));
  }
}

let liveAt = 0;   // when the last refresh started (performance.now)
export const livePanel = panel('live', 'live-status', async (current) => {
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
  case 'kerple': return Object.assign({ scheme: { type, r1: Array.from({ length: NH }, (_, h) => 2 ** -(h + 1)),
    r2: new Array(NH).fill(1) } }, qkv());
  // FIRE: a seeded MLP of width 8 (every load item is causal, as fire needs).
  case 'fire': return Object.assign({ scheme: { type, w1: round(g(8, 3)), b1: round(g(8, 1)),
    w2: round(g(8 * NH, 1)), b2: round(g(NH, 0.5)) } }, qkv());
  // rope2d: the 32 tokens as one 4 x 8 image.
  case 'rope2d': return Object.assign({ scheme: { type, grid: [4, 8] } }, qkv());
  // CoPE's table: the reference's npos (L + 1), shared by the heads.
  case 'cope': return Object.assign({ scheme: { type, pos_emb: t(L + 1, D) } }, qkv());
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
