// panel.js - a section of posattnd's web page as a panel: it re-runs its
// function when its controls change (after 120 ms of quiet), drops stale
// answers, shows the outcome in its status line, and carries data-state
// (pending, loading, ready, error) for people and tests.

import { $ } from '/web/util.js';
import { ApiError } from '/web/api.js';

// A section that re-runs fn when asked; stale answers are dropped.
export function panel(sectionId, statusId, fn) {
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
    // The controls changed: an answer still on its way is stale now, and must
    // not mark the panel ready before the run that this change schedules.
    gen++;
    sec.dataset.state = 'pending';
    clearTimeout(timer);
    timer = setTimeout(run, 120);
  };
  return { run, later };
}

// Re-runs p when any control of the form changes.
export function wire(formId, p, extra) {
  const f = $(formId);
  f.addEventListener('input', (e) => { syncOutputs(f); if (!extra || !extra(e)) p.later(); });
  f.addEventListener('submit', (e) => e.preventDefault());
  syncOutputs(f);
}
export function syncOutputs(f) {
  for (const o of f.querySelectorAll('output[for]')) {
    const src = $(o.htmlFor.value || o.getAttribute('for'));
    if (src) o.textContent = src.value;
  }
}
