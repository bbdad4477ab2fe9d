// page.mjs - the browser test's hold on the page (tests/ui/ui-test.mjs):
// the tab under test and every POST it makes, and the helpers that wait for
// a panel to be ready, read a canvas back, read a heatmap cell through its
// keyboard cursor, and move a slider by keyboard.

import { assert } from './harness.mjs';

export let page;
export const posted = [];   // every POST the page makes: {url, body}
export function setPage(p) { page = p; }

export const PANELS = ['sinusoidal', 'rope', 'bias', 'attention', 'packed', 'diff', 'mla', 'models', 'extrap', 'live'];
export async function settle(id, timeout = 30000, pg = page) {
  await pg.waitForFunction((s) => document.getElementById(s).dataset.state === 'ready', id, { timeout })
    .catch(async () => {
      const st = await pg.evaluate((s) => [document.getElementById(s).dataset.state,
        document.querySelector(`#${s} .status`).textContent], id);
      throw new Error(`panel #${id} not ready: state ${st[0]}, status "${st[1]}"`);
    });
}

// Reads a canvas back: the share of painted (not white, not transparent)
// pixels, how many colours, and a hash to see it change.
export async function pixels(sel) {
  return page.$eval(sel, (c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let painted = 0, hash = 0;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 0 && !(d[i] > 245 && d[i + 1] > 245 && d[i + 2] > 245)) painted++;
      colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      hash = (Math.imul(hash, 31) + d[i] * 65599 + d[i + 1] * 257 + d[i + 2] + d[i + 3]) >>> 0;
    }
    return { painted: painted / (d.length / 4), colours: colours.size, hash, w: c.width, h: c.height };
  });
}
export async function drawn(sel, minPainted = 0.05, minColours = 8) {
  const p = await pixels(sel);
  assert(p.w > 0 && p.h > 0, `${sel}: canvas has no size`);
  assert(p.painted >= minPainted && p.colours >= minColours,
    `${sel}: looks blank (${(p.painted * 100).toFixed(1)}% painted, ${p.colours} colours)`);
  return p;
}

// Puts the keyboard cursor of a heatmap on (row, col) and returns the
// readout: its text and the value parsed from the text.
export async function heatCell(id, row, col) {
  await page.focus('#' + id);
  await page.keyboard.press('Home');
  for (let i = 0; i < row; i++) await page.keyboard.press('ArrowDown');
  for (let i = 0; i < col; i++) await page.keyboard.press('ArrowRight');
  const text = await page.textContent(`#${id}-readout`);
  const m = /: (\S+)$/.exec(text.trim());
  assert(m, `#${id}-readout: no value in "${text}"`);
  return { text, value: m[1] === 'masked' ? null : Number(m[1]) };
}

export async function slider(id, value) {   // by keyboard, as a person would
  const min = Number(await page.getAttribute('#' + id, 'min'));
  await page.focus('#' + id);
  await page.keyboard.press('Home');
  for (let v = min; v < value; v++) await page.keyboard.press('ArrowRight');
  const now = Number(await page.inputValue('#' + id));
  assert(now === value, `#${id}: slider at ${now}, wanted ${value}`);
}
