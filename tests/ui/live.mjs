// live.mjs - the browser test of the Live service panel
// (tests/ui/ui-test.mjs): the load button's requests counted as /metrics
// counts them, rates over the labelled window, the p99 line over time,
// percentiles equal to histogram_quantile of /metrics, and the sessions'
// figures following sessions made, appended to, forked and deleted.

import path from 'node:path';
import { OUT, KEY, base, check, assert, close, api } from './harness.mjs';
import { page, settle, pixels, drawn } from './page.mjs';

export async function liveChecks() {
  const itemsOf = (text, s) => Number((new RegExp(`^posattn_items_total\\{scheme="${s}"\\} (\\S+)$`, 'm')
    .exec(text) || [0, 0])[1]);
  await check('live: load button sends 20 requests for every scheme of /v1/schemes; counts follow /metrics', async () => {
    const names = (await api('/v1/schemes')).schemes.map((s) => s.name);
    assert(names.includes('sinusoidal') && names.includes('learned'), `schemes ${names}`);
    const m0 = await api('/metrics');
    await page.click('#live-load');
    await page.waitForFunction(() => /^sent \d+ requests|error/.test(
      document.getElementById('live-load-result').textContent +
      (document.getElementById('live-load-result').classList.contains('error') ? ' error' : '')),
    null, { timeout: 60000 }).catch(() => {});
    const res = await page.textContent('#live-load-result');
    assert(res.startsWith(`sent ${20 * names.length} requests (20 per scheme`), `load result "${res}"`);
    const m1 = await api('/metrics');
    for (const s of names) {
      const got = itemsOf(m1, s) - itemsOf(m0, s);
      assert(got >= 20, `${s}: ${got} items computed during the load, not 20`);
      const shown = Number(await page.textContent(`#live-schemes tr[data-scheme="${s}"] td`));
      assert(shown >= itemsOf(m0, s) + 20 && shown <= itemsOf(m1, s),
        `${s} items shown ${shown}, /metrics ${itemsOf(m0, s)} -> ${itemsOf(m1, s)}`);
    }
    const p50 = await page.textContent('#live-schemes tr[data-scheme="shaw"] td:nth-child(4)');
    assert(/\d/.test(p50), `p50 "${p50}"`);
  });
  await check('live: each scheme\'s fraction of peak (posattn_fraction_of_peak) in the table and over time', async () => {
    // The load's items just counted: a mean fraction for rope (never a speed:
    // between 0 and 5), none for learned (layer mode has no roofline).
    const text = await api('/metrics');
    const count = Number((/^posattn_fraction_of_peak_count\{scheme="rope"\} (\S+)$/m.exec(text) || [0, 0])[1]);
    assert(count >= 1, `posattn_fraction_of_peak_count{scheme="rope"} ${count}`);   // items under 1 us have none
    const rope = Number(await page.getAttribute('#live-schemes tr[data-scheme="rope"]', 'data-peak'));
    assert(rope > 0 && rope < 5, `rope's mean fraction of peak ${rope}`);
    const cell = await page.textContent('#live-schemes tr[data-scheme="rope"] td:nth-child(7)');
    assert(/^[\d.e+-]+$/.test(cell), `rope's of-peak cell "${cell}"`);
    const learned = await page.textContent('#live-schemes tr[data-scheme="learned"] td:nth-child(7)');
    assert(learned === '-', `learned's of-peak cell "${learned}"`);
    const series = JSON.parse(await page.getAttribute('#live-peak-plot', 'data-series'));
    assert(series.rope && series.rope.some((p) => p[1] > 0), `rope's fraction over time ${JSON.stringify(series.rope)}`);
    const gauges = await page.textContent('#live-gauges');
    assert(/peaks measured at start-up: [\d.]+ GFLOP\/s and [\d.]+ GB\/s on 1 thread/.test(gauges), `gauges "${gauges}"`);
  });
  await check('live: items/s and req/s are over the labelled window, not the last refresh', async () => {
    // A refresh a second after the load (none in between): the last interval
    // holds no items, the 60 s window holds the load's 20 per scheme.
    await page.uncheck('#live-auto');
    await page.selectOption('#live-window', '60');
    await page.waitForTimeout(1200);
    await page.click('#live-refresh');
    await settle('live');
    const label = await page.textContent('#live-window-label');
    const m = /^\(last ([\d.]+) s\)$/.exec(label);
    assert(m, `window label "${label}"`);
    const rows = [['#live-schemes tr[data-scheme="shaw"]', 'shaw items', 20],
      ['#live-endpoints tr[data-endpoint="attention"]', 'attention requests', 100]];
    for (const [sel, what] of rows) {
      const r = Number(await page.textContent(`${sel} td:nth-child(3)`));
      assert(r > 0, `${what}/s shows ${r} beside p50 ${await page.textContent(`${sel} td:nth-child(4)`)} ${label}`);
    }
    // The rate is the window's count over the window's length, the label's.
    const span = Number(await page.getAttribute('#live', 'data-window-s'));
    close(Number(m[1]), span, 6e-3, 0, 'window length in the label (3 digits)');
    for (const [sel, what, min] of [...rows, ['#live-schemes tr[data-scheme="learned"]', 'learned items', 20]]) {
      const n = Number(await page.getAttribute(sel, 'data-window-count'));
      const r = Number(await page.textContent(`${sel} td:nth-child(3)`));
      assert(n >= min, `${what} in the window: ${n}`);
      close(r, n / span, 6e-3, 0, `${what}/s (shown to 3 digits)`);
    }
  });
  await check('live: the p99 line goes on over the window while no new items arrive', async () => {
    for (let i = 0; i < 2; i++) {
      await page.waitForTimeout(300);
      await page.click('#live-refresh');
      await settle('live');
    }
    const series = JSON.parse(await page.getAttribute('#live-p99-plot', 'data-series'));
    const shaw = series.shaw;
    assert(shaw && shaw.length >= 3, `shaw p99 points: ${JSON.stringify(shaw)}`);
    const lastTwo = shaw.slice(-2).map((p) => p[1]);
    assert(lastTwo.every((v) => v > 0), `shaw p99 at the last two refreshes: ${lastTwo}`);
    await drawn('#live-p99-plot', 0.01, 4);
  });
  await page.selectOption('#live-window', '10');
  await page.check('#live-auto');
  await check('live: the rate and p99 plots refresh by themselves', async () => {
    const before = await pixels('#live-rate-plot');
    await page.waitForTimeout(4500);
    const after = await drawn('#live-rate-plot', 0.01, 4);
    assert(after.hash !== before.hash, 'rate plot did not change in 4.5 s');
    await drawn('#live-p99-plot', 0.01, 4);
    const label = await page.textContent('#live-window-label');
    assert(/last [\d.]+ s/.test(label), `window label "${label}"`);
  });
  await check('live: since-start percentiles equal histogram_quantile of /metrics', async () => {
    await page.selectOption('#live-window', '0');
    await page.uncheck('#live-auto');
    await page.click('#live-refresh');
    await settle('live');
    const text = await api('/metrics');
    // p50 of shaw's compute time, as Prometheus computes it; the page's refresh
    // and this fetch see the same buckets (no shaw items since the load).
    const b = [...text.matchAll(/^posattn_compute_duration_seconds_bucket\{scheme="shaw",le="([^"]+)"\} (\S+)$/mg)]
      .map((m) => [Number(m[1]), Number(m[2])]);
    const n = b[b.length - 1][1], rank = 0.5 * n;
    let lo = 0, below = 0, want = null;
    for (const [le, c] of b) {
      if (c >= rank) { want = lo + (le - lo) * (rank - below) / (c - below); break; }
      lo = le; below = c;
    }
    const shown = await page.textContent('#live-schemes tr[data-scheme="shaw"] td:nth-child(4)');
    const m = /^([\d.e+-]+) (µs|ms|s)$/.exec(shown);
    assert(m, `p50 cell "${shown}"`);
    const secs = Number(m[1]) * { 'µs': 1e-6, ms: 1e-3, s: 1 }[m[2]];
    close(secs, want, 6e-3, 0, 'shaw p50 compute time (s), shown to 3 digits');
    await page.check('#live-auto');
  });
  await check('live: sessions made, appended to, forked and deleted through the API change the panel\'s figures', async () => {
    const values = async (f) => JSON.parse(await page.getAttribute(`#live-sessions tr[data-field="${f}"]`, 'data-values'));
    const refresh = async () => { await page.click('#live-refresh'); await settle('live'); };
    const del = async (id) => {
      const r = await fetch(`${base}/v1/sessions/${id}`, { method: 'DELETE', headers: { Authorization: 'Bearer ' + KEY } });
      assert(r.status === 200, `DELETE ${id}: ${r.status}`);
    };
    const t = (n, h, d, x = 0.5) => ({ shape: [n, h, d], data: Array.from({ length: n * h * d }, (_, i) => ((i * 7) % 11) / 11 - x) });
    await page.uncheck('#live-auto');
    await refresh();
    const [n0] = await values('sessions'), [b0, budget] = await values('bytes');
    const [app0, ev0] = await values('tokens'), [used0, shared0] = await values('blocks');
    assert(n0 !== null && budget > 0, `sessions ${n0}, budget ${budget}: the panel reads the session metrics`);
    // Three sessions of 2 kv heads of 8: a block of 16 tokens is 16 x 2 x 16 floats, 2 KiB.
    const ids = [];
    for (let i = 0; i < 3; i++)
      ids.push((await api('/v1/sessions', { scheme: { type: 'rope' }, num_kv_heads: 2, head_dim: 8, max_tokens: 64 })).id);
    await refresh();
    assert((await values('sessions'))[0] === n0 + 3, `sessions ${(await values('sessions'))[0]} after 3 made, was ${n0}`);
    for (const id of ids) await api(`/v1/sessions/${id}/append`, { k: t(20, 2, 8), v: t(20, 2, 8) });
    // One decode step as an attention item over a session: q [1, 4, 8] and one token appended.
    const step = await api('/v1/attention', { inputs: [{ session: ids[0], causal: true, q: t(1, 4, 8),
      append: { k: t(1, 2, 8), v: t(1, 2, 8) } }] });
    assert(step.errors === false, JSON.stringify(step).slice(0, 300));
    const fork = (await api(`/v1/sessions/${ids[1]}/fork`, {})).id;
    const win = (await api('/v1/sessions', { scheme: { type: 'alibi' }, num_kv_heads: 2, head_dim: 8,
      eviction: { type: 'window', window: 4, sinks: 1 } })).id;
    await api(`/v1/sessions/${win}/append`, { k: t(10, 2, 8), v: t(10, 2, 8) });
    await refresh();
    const [n1] = await values('sessions'), [b1] = await values('bytes');
    const [app1, ev1] = await values('tokens'), [used1, shared1] = await values('blocks');
    assert(n1 === n0 + 5, `sessions ${n1}, want ${n0 + 5} (3 made, a fork, a window)`);
    assert(app1 - app0 === 3 * 20 + 1 + 10, `tokens appended ${app0} -> ${app1}`);
    assert(ev1 - ev0 === 5, `tokens evicted ${ev0} -> ${ev1}: the window of 4 + 1 sink keeps 5 of 10`);
    // 21 + 20 + 20 tokens are 2 + 2 + 2 blocks, the window's 5 one; the fork shares its parent's 2.
    assert(used1 - used0 === 7 && shared1 - shared0 === 2, `blocks used ${used0} -> ${used1}, shared ${shared0} -> ${shared1}`);
    assert(b1 - b0 === 7 * 2048, `cache bytes ${b0} -> ${b1}`);
    const text = await page.textContent('#live-sessions tr[data-field="bytes"] td');
    assert(/ of 4 GiB \(/.test(text) || / of [\d.]+ [KMG]i?B \(/.test(text), `cache cell "${text}"`);
    const metrics = await api('/metrics');
    assert(new RegExp(`^posattn_cache_bytes\\{dtype="f32"\\} ${b1}$`, 'm').test(metrics), `posattn_cache_bytes{dtype="f32"} is not ${b1}`);
    for (const id of [...ids, fork, win]) await del(id);
    await refresh();
    assert((await values('sessions'))[0] === n0 && (await values('bytes'))[0] === b0,
      `after deleting: sessions ${(await values('sessions'))[0]}, bytes ${(await values('bytes'))[0]}`);
    await page.check('#live-auto');
  });
  await page.locator('#live').screenshot({ path: path.join(OUT, 'live.png') });
}
