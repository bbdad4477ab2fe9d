// load-report.mjs - the browser test of posattn-load's HTML report
// (tests/ui/ui-test.mjs): its latency charts on a log axis by default, with
// every bar and tick on the axis drawn, and the switch to linear axes; the
// --sessions report's step latency against cache length, on log axes.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT, POSATTND, OUT, LOAD, context, tmpDirs, check, assert, runProgram } from './harness.mjs';

export async function loadReportChecks() {
  // ------------------------------------------- posattn-load's HTML report
  await check('posattn-load --html: latency charts on a log axis by default, a checkbox for linear', async () => {
    assert(fs.existsSync(LOAD), `${LOAD} is missing: build it first (make ${path.relative(ROOT, LOAD)})`);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'posattn-ui-load-'));
    tmpDirs.push(dir);
    const out = path.join(dir, 'report.html');
    // Two lengths whose latencies differ some 30-fold: on a linear axis the
    // short one's bars are a few pixels.
    await runProgram(LOAD, ['--spawn', POSATTND, '--schemes', 'none', '--lengths', '8,768', '--heads', '4',
      '--head-dim', '32', '--requests', '30', '--concurrency', '1', '--encoding', 'b64', '--html', out, '--quiet'], 90000);
    const html = fs.readFileSync(out, 'utf8');
    assert(!/<script|\b(src|href)=/i.test(html), 'the report has scripts or external resources');
    const p3 = await context.newPage();
    await p3.setContent(html);
    const chart = () => p3.evaluate(() => [...document.querySelectorAll('figure svg')].slice(0, 3).map((svg) => {
      const g = [...svg.querySelectorAll('g')].find((e) => getComputedStyle(e).display !== 'none');
      const root = g || svg;
      return {
        scale: g ? g.getAttribute('class') : null,
        unit: [...root.querySelectorAll('text[transform^="rotate(-90"]')].map((t) => t.textContent).join(),
        ticks: [...root.querySelectorAll('line')].map((l, i) => [Number(root.querySelectorAll('line + text')[i].textContent),
          Number(l.getAttribute('y1'))]),
        bars: [...root.querySelectorAll('rect')].filter((r) => r.querySelector('title')).map((r) =>
          [Number(/: (\S+) /.exec(r.querySelector('title').textContent)[1]), Number(r.getAttribute('y')),
            Number(r.getAttribute('height'))]),
      };
    }));
    // Every bar's top on the axis its ticks draw: y linear in log10(v) (log)
    // or in v (linear), within rounding to pixels.
    const onAxis = (c, f, what) => {
      assert(c.ticks.length >= 2 && c.bars.length >= 8, `${what}: ${c.ticks.length} ticks, ${c.bars.length} bars`);
      const [a, b] = [c.ticks[0], c.ticks[c.ticks.length - 1]];
      const Y = (v) => a[1] + (f(v) - f(a[0])) / (f(b[0]) - f(a[0])) * (b[1] - a[1]);
      for (const [v, y] of c.ticks) assert(Math.abs(Y(v) - y) <= 1.01, `${what}: tick ${v} at y ${y}, not ${Y(v)}`);
      for (const [v, y] of c.bars) if (v > 0) assert(Math.abs(Y(v) - y) <= 1.51, `${what}: bar ${v} at y ${y}, not ${Y(v)}`);
      return Math.min(...c.bars.filter(([v]) => v > 0).map(([, , h]) => h));
    };
    const [lat, thr, srv] = await chart();
    assert(lat.scale === 'scale-log' && /log scale/.test(lat.unit), `latency chart shows ${lat.scale} (${lat.unit})`);
    assert(srv.scale === 'scale-log', `server time chart shows ${srv.scale}`);
    assert(thr.scale === null, 'the throughput chart should keep its one linear axis');
    for (const [v] of lat.ticks)
      assert([1, 2, 5].some((m) => Math.abs(v / 10 ** Math.floor(Math.log10(v) + 1e-9) - m) < 1e-6), `log tick ${v}`);
    const vs = lat.bars.map(([v]) => v);
    assert(Math.max(...vs) / Math.min(...vs) > 5, `latencies ${Math.min(...vs)}..${Math.max(...vs)} ms: too close to show`);
    const logMin = onAxis(lat, Math.log10, 'log latency');
    assert(logMin >= 15, `the smallest latency bar is ${logMin} px high on the log axis`);
    await p3.screenshot({ path: path.join(OUT, 'load-report-log.png'), fullPage: true });
    await p3.click('label[for="linear-axes"]');
    const [lin, , srvLin] = await chart();
    assert(lin.scale === 'scale-lin' && !/log/.test(lin.unit) && srvLin.scale === 'scale-lin',
      `after the switch: ${lin.scale}, ${srvLin.scale} (${lin.unit})`);
    assert(lin.ticks[0][0] === 0, `linear axis starts at ${lin.ticks[0][0]}`);
    const linMin = onAxis(lin, (v) => v, 'linear latency');
    assert(linMin < logMin, `smallest bar ${linMin} px linear, ${logMin} px log`);
    await p3.screenshot({ path: path.join(OUT, 'load-report-linear.png'), fullPage: true });
    await p3.close();
  });
  await check('posattn-load --sessions --html: step latency against cache length, both axes log', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'posattn-ui-sess-'));
    tmpDirs.push(dir);
    const out = path.join(dir, 'sessions.html');
    // Caches of 9 to 208 tokens: the buckets 8, 16, 32, 64 and 128.
    await runProgram(LOAD, ['--spawn', POSATTND, '--sessions', '4', '--prompt', '8', '--steps', '200',
      '--schemes', 'rope,alibi', '--heads', '4', '--kv-heads', '2', '--head-dim', '16', '--html', out, '--quiet'], 90000);
    const html = fs.readFileSync(out, 'utf8');
    assert(!/<script|\b(src|href)=/i.test(html), 'the report has scripts or external resources');
    const p4 = await context.newPage();
    await p4.setContent(html);
    const c = await p4.evaluate(() => {
      const svg = document.querySelector('svg.by-length');
      const texts = [...svg.querySelectorAll('text')];
      return {
        units: texts.filter((t) => /log scale/.test(t.textContent)).map((t) => t.textContent),
        ticks: [...svg.querySelectorAll('line')].map((l) => [Number(l.nextElementSibling.textContent), Number(l.getAttribute('y1'))]),
        xs: texts.filter((t) => t.getAttribute('text-anchor') === 'middle' && /^\d+$/.test(t.textContent))
          .map((t) => [Number(t.textContent), Number(t.getAttribute('x'))]),
        points: [...svg.querySelectorAll('circle')].map((e) => {
          const m = /^(\S+) (\d+)-\d+ tokens: (p50|p99) (\S+) ms/.exec(e.querySelector('title').textContent);
          return [m[1], Number(m[2]), m[3], Number(m[4]), Number(e.getAttribute('cx')), Number(e.getAttribute('cy'))];
        }),
        rows: [...document.querySelectorAll('table.sessions tr')].slice(1).map((tr) => tr.cells[0].textContent),
      };
    });
    assert(c.units.length === 2, `axis titles ${JSON.stringify(c.units)}: both should say log scale`);
    assert(JSON.stringify(c.rows) === '["rope","alibi"]', `rows ${c.rows}`);
    assert(JSON.stringify(c.xs.map(([v]) => v)) === '[8,16,32,64,128]', `x labels ${JSON.stringify(c.xs)}`);
    // x: evenly spaced powers of two (log2); y: linear in log10(ms) between the ticks.
    const dx = c.xs[1][1] - c.xs[0][1];
    c.xs.forEach(([, x], i) => assert(Math.abs(x - c.xs[0][1] - i * dx) <= 1, `x label ${i} at ${x}`));
    const [a, b] = [c.ticks[0], c.ticks[c.ticks.length - 1]];
    const Y = (v) => a[1] + (Math.log10(v) - Math.log10(a[0])) / (Math.log10(b[0]) - Math.log10(a[0])) * (b[1] - a[1]);
    assert(c.points.length === 2 * 2 * 5, `${c.points.length} points, want 2 schemes x p50, p99 x 5 buckets`);
    for (const [s, from, p, v, x, y] of c.points) {
      assert(Math.abs(x - c.xs.find(([t]) => t === from)[1]) <= 1, `${s} ${from} ${p} at x ${x}`);
      assert(Math.abs(Y(v) - y) <= 1.01, `${s} ${from} ${p} ${v} ms at y ${y}, not ${Y(v)}`);
    }
    await p4.screenshot({ path: path.join(OUT, 'load-report-sessions.png'), fullPage: true });
    await p4.close();
  });
}
