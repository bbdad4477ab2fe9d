// plot.js - small canvas plots for posattnd's web page: a heatmap with a
// colour legend, axis labels and a readout of the hovered (or keyboard-
// selected) cell, and a line plot with a legend. No dependencies.

const DPR = () => window.devicePixelRatio || 1;

// Colour maps: t in [0, 1] -> [r, g, b]. Stops are interpolated linearly.
const STOPS = {
  // viridis, sampled at 9 points
  viridis: [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
            [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]],
  // blue - white - red (ColorBrewer RdBu, reversed so negative is blue)
  diverging: [[33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
              [253, 219, 199], [239, 138, 98], [178, 24, 43]],
};

export function colour(name, t) {
  const s = STOPS[name] || STOPS.viridis;
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  const x = t * (s.length - 1), i = Math.min(Math.floor(x), s.length - 2), f = x - i;
  return [0, 1, 2].map((c) => Math.round(s[i][c] + f * (s[i + 1][c] - s[i][c])));
}

export const SERIES = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf',
                       '#8c564b', '#e377c2'];

// A number for people: 4 significant digits, exponent when tiny or huge.
export function fmt(v, digits = 4) {
  if (v === null || v === undefined || Number.isNaN(v)) return '-';
  if (!Number.isFinite(v)) return v > 0 ? '+inf' : '-inf';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e5) return v.toExponential(digits - 1);
  return String(Number(v.toPrecision(digits)));
}

// Nice tick values between lo and hi (about n of them).
function ticks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const step0 = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0) || step0;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

// Ticks of a log axis (lo, hi are log10 values): whole decades, or 1-2-5
// steps when the range is short.
function logTicks(lo, hi) {
  const out = [], mult = hi - lo < 2.5 ? [1, 2, 5] : [1];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++)
    for (const k of mult) {
      const v = e + Math.log10(k);
      if (v >= lo && v <= hi) out.push(v);
    }
  const step = Math.ceil(out.length / 8);
  return out.filter((_, i) => i % step === 0);
}

function sizeCanvas(canvas, aspect, minH, maxH) {
  const w = Math.max(120, canvas.parentElement.clientWidth);
  const h = Math.round(Math.max(minH, Math.min(maxH, w * aspect)));
  canvas.style.width = w + 'px';
  canvas.style.height = h + 'px';
  canvas.width = Math.round(w * DPR());
  canvas.height = Math.round(h * DPR());
  const ctx = canvas.getContext('2d');
  ctx.setTransform(DPR(), 0, 0, DPR(), 0, 0);
  return { ctx, w, h };
}

function makeFigure(container, title, kind) {
  const fig = document.createElement('figure');
  fig.className = 'plot ' + kind;
  const cap = document.createElement('figcaption');
  cap.textContent = title;
  const wrap = document.createElement('div');
  wrap.className = 'canvas-wrap';
  const canvas = document.createElement('canvas');
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', title);
  wrap.appendChild(canvas);
  const out = document.createElement('output');
  out.className = 'readout';
  out.setAttribute('aria-live', 'polite');
  out.textContent = '\u00a0';
  fig.append(cap, wrap, out);
  container.appendChild(fig);
  return { fig, cap, canvas, out };
}

const SIDE_GAP = 8;   // between a heatmap and its side column
const FONT = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
const INK = '#1b1f24', MUTED = '#57606a', GRID = '#d8dee4';

// Heatmap of a rows x cols matrix (row-major data). Hover or arrow keys
// select a cell; the readout names it and its value. extra.side = {label,
// values} adds one more column of per-row values (column index cols), drawn
// apart on the same colour scale, e.g. the share of each row that went to an
// attention sink;
// extra.blocks = [0, c1, ..., n] outlines square blocks on the diagonal.
export class Heatmap {
  constructor(container, opts) {
    this.o = Object.assign({ cmap: 'viridis', symmetric: false, xLabel: 'column',
                             yLabel: 'row', aspect: null, maxH: 420 }, opts);
    Object.assign(this, makeFigure(container, this.o.title, 'heatmap'));
    if (this.o.id) {
      this.canvas.id = this.o.id;
      this.out.id = this.o.id + '-readout';
    }
    this.data = null;
    this.cursor = null;
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => { this.cursor = null; this.draw(); });
    this.canvas.addEventListener('keydown', (e) => this.key(e));
    this.canvas.addEventListener('focus', () => {
      if (!this.cursor && this.data) this.select(0, 0);
    });
    new ResizeObserver(() => this.draw()).observe(this.fig);
  }

  set(data, rows, cols, extra = {}) {
    this.data = data; this.rows = rows; this.cols = cols;
    this.extra = extra;
    let lo = Infinity, hi = -Infinity;
    for (const v of data) if (v !== null && Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (extra.min !== undefined) lo = extra.min;
    if (extra.max !== undefined) hi = extra.max;
    if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
    if (this.o.symmetric) { const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1; lo = -m; hi = m; }
    if (hi === lo) hi = lo + 1;
    this.lo = lo; this.hi = hi;
    if (this.cursor && (this.cursor.r >= rows || this.cursor.c >= cols + (this.side() ? 1 : 0))) this.cursor = null;
    this.draw();
    if (this.cursor) this.showCell(this.cursor.r, this.cursor.c);
  }

  layout(w) {
    // Room on the left for the longest row label (positions run to 5 digits
    // and more), about 8 px a character at FONT's size.
    const yt = this.extra && this.extra.yValues;
    const m = { l: yt ? Math.max(46, 24 + 8 * Math.max(...yt.map((v) => String(v).length))) : 46, r: 76, t: 6, b: 36 };
    let sw = 0;   // the side column's width, and a gap before it
    if (this.side()) {
      sw = Math.max(12, Math.min(26, (w - m.l - m.r) / ((this.cols || 1) + 1)));
      m.r += sw + SIDE_GAP;
    }
    const pw = w - m.l - m.r;
    const aspect = this.o.aspect || Math.max(0.4, Math.min(1.25, (this.rows || 1) / (this.cols || 1)));
    const ph = Math.max(60, Math.min(this.o.maxH, pw * aspect));
    return { m, pw, ph, sw, h: ph + m.t + m.b };
  }

  side() {
    const s = this.extra && this.extra.side;
    return s && s.values && s.values.length === this.rows ? s : null;
  }

  draw() {
    if (!this.data) return;
    const w0 = Math.max(120, this.canvas.parentElement.clientWidth);
    const L = this.layout(w0);
    const { ctx, w } = sizeCanvas(this.canvas, L.h / w0, L.h, L.h);
    const { m, pw, ph, sw } = L;
    this.geom = { m, pw, ph, sw };
    ctx.clearRect(0, 0, w, L.h);
    // Cells: one pixel each in an offscreen image, scaled without smoothing.
    const img = new ImageData(this.cols, this.rows);
    for (let i = 0; i < this.rows * this.cols; i++) {
      const v = this.data[i];
      const rgb = v === null || !Number.isFinite(v) ? [225, 228, 232]
                : colour(this.o.cmap, (v - this.lo) / (this.hi - this.lo));
      img.data.set([rgb[0], rgb[1], rgb[2], 255], i * 4);
    }
    const off = document.createElement('canvas');
    off.width = this.cols; off.height = this.rows;
    off.getContext('2d').putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, m.l, m.t, pw, ph);
    ctx.strokeStyle = GRID;
    ctx.strokeRect(m.l - 0.5, m.t - 0.5, pw + 1, ph + 1);
    if (this.extra.blocks) {   // [0, c1, ..., n]: outline the diagonal blocks (packed sequences)
      const b = this.extra.blocks, cw = pw / this.cols, ch = ph / this.rows;
      ctx.strokeStyle = '#fff'; ctx.lineWidth = 1.5;
      for (let s = 0; s + 1 < b.length; s++)
        ctx.strokeRect(m.l + b[s] * cw, m.t + b[s] * ch, (b[s + 1] - b[s]) * cw, (b[s + 1] - b[s]) * ch);
      ctx.lineWidth = 1;
    }
    const side = this.side(), sx = m.l + pw + SIDE_GAP;
    if (side) {
      const ch = ph / this.rows;
      side.values.forEach((v, r) => {
        const rgb = v === null || !Number.isFinite(v) ? [225, 228, 232]
                  : colour(this.o.cmap, (v - this.lo) / (this.hi - this.lo));
        ctx.fillStyle = `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
        ctx.fillRect(sx, m.t + r * ch, sw, Math.ceil(ch));
      });
      ctx.strokeStyle = GRID;
      ctx.strokeRect(sx - 0.5, m.t - 0.5, sw + 1, ph + 1);
    }
    // Axes: ticks at cell centres.
    ctx.font = FONT; ctx.fillStyle = MUTED;
    const xt = this.extra.xValues, yt = this.extra.yValues;
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    for (const c of ticks(0, this.cols - 1, Math.max(2, Math.floor(pw / 60)))) {
      if (c !== Math.round(c)) continue;
      ctx.fillText(String(xt ? xt[c] : c), m.l + (c + 0.5) * pw / this.cols, m.t + ph + 3);
    }
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    for (const r of ticks(0, this.rows - 1, Math.max(2, Math.floor(ph / 40)))) {
      if (r !== Math.round(r)) continue;
      ctx.fillText(String(yt ? yt[r] : r), m.l - 4, m.t + (r + 0.5) * ph / this.rows);
    }
    if (side) {
      ctx.textAlign = 'center'; ctx.textBaseline = 'top';
      ctx.fillText(side.label, sx + sw / 2, m.t + ph + 3);
    }
    ctx.fillStyle = INK; ctx.textAlign = 'center'; ctx.textBaseline = 'bottom';
    ctx.fillText(this.o.xLabel, m.l + pw / 2, m.t + ph + m.b);
    ctx.save();
    ctx.translate(11, m.t + ph / 2); ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = 'middle'; ctx.fillText(this.o.yLabel, 0, 0);
    ctx.restore();
    // Legend: a vertical colour bar with its range.
    const lx = m.l + pw + (side ? sw + SIDE_GAP : 0) + 12, lh = Math.min(ph, 160);
    for (let y = 0; y < lh; y++) {
      const rgb = colour(this.o.cmap, 1 - y / (lh - 1));
      ctx.fillStyle = `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
      ctx.fillRect(lx, m.t + y, 10, 1);
    }
    ctx.strokeStyle = GRID; ctx.strokeRect(lx - 0.5, m.t - 0.5, 11, lh + 1);
    ctx.fillStyle = MUTED; ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
    ctx.fillText(fmt(this.hi, 3), lx + 14, m.t + 5);
    ctx.fillText(fmt((this.hi + this.lo) / 2, 3), lx + 14, m.t + lh / 2);
    ctx.fillText(fmt(this.lo, 3), lx + 14, m.t + lh - 5);
    if (this.cursor) {
      const cw = pw / this.cols, ch = ph / this.rows, inSide = this.cursor.c === this.cols;
      ctx.strokeStyle = '#000'; ctx.lineWidth = 2;
      ctx.strokeRect(inSide ? sx : m.l + this.cursor.c * cw, m.t + this.cursor.r * ch, inSide ? sw : cw, ch);
      ctx.lineWidth = 1;
    }
  }

  hover(e) {
    if (!this.data || !this.geom) return;
    const rect = this.canvas.getBoundingClientRect();
    const { m, pw, ph, sw } = this.geom;
    const px = e.clientX - rect.left - m.l;
    let c = Math.floor(px / pw * this.cols);
    const r = Math.floor((e.clientY - rect.top - m.t) / ph * this.rows);
    if (this.side() && px >= pw + SIDE_GAP && px < pw + SIDE_GAP + sw) c = this.cols;
    else if (c >= this.cols) return;
    if (r < 0 || c < 0 || r >= this.rows) return;
    this.select(r, c);
  }

  key(e) {
    if (!this.data) return;
    const d = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    let { r, c } = this.cursor || { r: 0, c: 0 };
    if (d) { r += d[0]; c += d[1]; } else if (e.key === 'Home') { r = 0; c = 0; } else return;
    e.preventDefault();
    const lastC = this.side() ? this.cols : this.cols - 1;
    this.select(Math.max(0, Math.min(this.rows - 1, r)), Math.max(0, Math.min(lastC, c)));
  }

  select(r, c) {
    this.cursor = { r, c };
    this.draw();
    this.showCell(r, c);
  }

  showCell(r, c) {
    const side = this.side();
    if (c >= this.cols && !side) { this.cursor = null; this.out.textContent = '\u00a0'; return; }
    if (c === this.cols) {
      const v = side.values[r];
      const ys = this.extra.yValues ? this.extra.yValues[r] : r;
      this.out.textContent = `${this.o.yLabel} ${ys}, ${side.label}: ` + (v === null ? '-' : fmt(v, 6));
      this.out.dataset.row = r; this.out.dataset.col = 'side';
      this.out.dataset.value = v === null ? 'null' : String(v);
      return;
    }
    const v = this.data[r * this.cols + c];
    const xs = this.extra.xValues ? this.extra.xValues[c] : c;
    const ys = this.extra.yValues ? this.extra.yValues[r] : r;
    this.out.textContent = `${this.o.yLabel} ${ys}, ${this.o.xLabel} ${xs}: ` +
      (v === null ? 'masked' : fmt(v, 6));
    this.out.dataset.row = r; this.out.dataset.col = c;
    this.out.dataset.value = v === null ? 'null' : String(v);
  }
}

// Line plot of one or more series [{name, x: [], y: []}], optional log y.
export class LinePlot {
  constructor(container, opts) {
    this.o = Object.assign({ xLabel: 'x', yLabel: 'y', logY: false, markers: false,
                             aspect: 0.55, minH: 200, maxH: 340 }, opts);
    Object.assign(this, makeFigure(container, this.o.title, 'line'));
    if (this.o.id) { this.canvas.id = this.o.id; this.out.id = this.o.id + '-readout'; }
    this.series = null;
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('keydown', (e) => this.key(e));
    new ResizeObserver(() => this.draw()).observe(this.fig);
  }

  set(series, extra = {}) {
    this.series = series; this.extra = extra;
    this.draw();
  }

  ty(v) { return this.o.logY ? Math.log10(Math.max(v, 1e-300)) : v; }

  draw() {
    if (!this.series) return;
    const { ctx, w, h } = sizeCanvas(this.canvas, this.o.aspect, this.o.minH, this.o.maxH);
    const m = { l: 56, r: 12, t: 8 + 18 * Math.ceil(this.series.length / 3), b: 36 };
    const pw = w - m.l - m.r, ph = h - m.t - m.b;
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of this.series) {
      s.x.forEach((x, i) => {
        const y = s.y[i];
        if (y === null || !Number.isFinite(y) || (this.o.logY && y <= 0)) return;
        x0 = Math.min(x0, x); x1 = Math.max(x1, x);
        y0 = Math.min(y0, this.ty(y)); y1 = Math.max(y1, this.ty(y));
      });
    }
    if (!Number.isFinite(x0)) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }
    if (this.extra.yMin !== undefined) y0 = Math.min(y0, this.extra.yMin);
    if (this.extra.xMin !== undefined) x0 = Math.min(x0, this.extra.xMin);
    if (this.extra.xMax !== undefined) x1 = Math.max(x1, this.extra.xMax);
    if (x1 === x0) x1 = x0 + 1;
    if (y1 - y0 < 1e-9) { y0 -= 1; y1 += 1; }
    const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
    this.geom = { m, pw, ph, x0, x1, y0, y1 };
    const X = (x) => m.l + (x - x0) / (x1 - x0) * pw, Y = (y) => m.t + (1 - (y - y0) / (y1 - y0)) * ph;
    ctx.clearRect(0, 0, w, h);
    ctx.font = FONT; ctx.lineWidth = 1;
    ctx.strokeStyle = GRID; ctx.fillStyle = MUTED;
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    for (const v of this.o.logY ? logTicks(y0, y1) : ticks(y0, y1, Math.max(2, Math.floor(ph / 45)))) {
      ctx.beginPath(); ctx.moveTo(m.l, Y(v) + 0.5); ctx.lineTo(m.l + pw, Y(v) + 0.5); ctx.stroke();
      ctx.fillText(this.o.logY ? fmt(Math.pow(10, v), 1) : fmt(v, 3), m.l - 4, Y(v));
    }
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    for (const v of ticks(x0, x1, Math.max(2, Math.floor(pw / 70))))
      ctx.fillText(fmt(v, 4), X(v), m.t + ph + 3);
    ctx.strokeStyle = '#8c959f';
    ctx.strokeRect(m.l - 0.5, m.t - 0.5, pw + 1, ph + 1);
    ctx.fillStyle = INK; ctx.textBaseline = 'bottom';
    ctx.fillText(this.o.xLabel, m.l + pw / 2, h);
    ctx.save(); ctx.translate(11, m.t + ph / 2); ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = 'middle'; ctx.fillText(this.o.yLabel, 0, 0); ctx.restore();
    this.series.forEach((s, k) => {
      const col = s.color || SERIES[k % SERIES.length];
      ctx.strokeStyle = col; ctx.fillStyle = col; ctx.lineWidth = s.width || 2;
      if (s.dash) ctx.setLineDash(s.dash);
      ctx.beginPath();
      let pen = false;
      if (s.line === false) pen = null;   // markers only
      s.x.forEach((x, i) => {
        const y = s.y[i];
        if (pen === null) return;
        if (y === null || !Number.isFinite(y) || (this.o.logY && y <= 0)) { pen = false; return; }
        if (pen) ctx.lineTo(X(x), Y(this.ty(y))); else ctx.moveTo(X(x), Y(this.ty(y)));
        pen = true;
      });
      ctx.stroke(); ctx.setLineDash([]);
      if (this.o.markers || s.markers)
        s.x.forEach((x, i) => {
          const y = s.y[i];
          if (y === null || !Number.isFinite(y)) return;
          ctx.beginPath(); ctx.arc(X(x), Y(this.ty(y)), s.line === false ? 5 : 3, 0, 2 * Math.PI); ctx.fill();
        });
      // Legend along the top, three to a row.
      const lx = m.l + (k % 3) * (pw / 3), ly = 4 + 18 * Math.floor(k / 3);
      ctx.fillRect(lx, ly + 6, 14, 3);
      ctx.fillStyle = INK; ctx.textAlign = 'left'; ctx.textBaseline = 'top';
      ctx.fillText(s.name, lx + 18, ly);
    });
    ctx.lineWidth = 1;
    if (this.cursorX !== undefined && this.cursorX !== null) {
      ctx.strokeStyle = '#000'; ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(X(this.cursorX) + 0.5, m.t); ctx.lineTo(X(this.cursorX) + 0.5, m.t + ph);
      ctx.stroke(); ctx.setLineDash([]);
    }
  }

  xs() { return this.series && this.series.length ? this.series[0].x : []; }

  hover(e) {
    if (!this.geom) return;
    const rect = this.canvas.getBoundingClientRect();
    const { m, pw, x0, x1 } = this.geom;
    const x = x0 + (e.clientX - rect.left - m.l) / pw * (x1 - x0);
    const xs = this.xs();
    if (!xs.length) return;
    let best = 0;
    xs.forEach((v, i) => { if (Math.abs(v - x) < Math.abs(xs[best] - x)) best = i; });
    this.pick(best);
  }

  key(e) {
    const xs = this.xs();
    if (!xs.length) return;
    let i = this.cursorI === undefined ? 0 : this.cursorI;
    if (e.key === 'ArrowRight') i++; else if (e.key === 'ArrowLeft') i--;
    else if (e.key === 'Home') i = 0; else return;
    e.preventDefault();
    this.pick(Math.max(0, Math.min(xs.length - 1, i)));
  }

  pick(i) {
    this.cursorI = i; this.cursorX = this.xs()[i];
    this.draw();
    this.out.textContent = `${this.o.xLabel} ${fmt(this.cursorX, 6)}: ` +
      this.series.map((s) => `${s.name} ${fmt(s.y[i], 6)}`).join(', ');
    this.out.dataset.index = i;
  }
}
