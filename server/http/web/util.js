// util.js - small helpers of posattnd's web page: an element by id, the
// number a control holds, and the deterministic random inputs the panels
// send (the same seed gives the same request every time).

export const $ = (id) => document.getElementById(id);

// Deterministic pseudo-random numbers (mulberry32), normal by Box-Muller.
export function rng(seed) {
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
export const round = (a) => a.map((v) => Math.round(v * 1e4) / 1e4);
export const num = (id) => Number($(id).value);
