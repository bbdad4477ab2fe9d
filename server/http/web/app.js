// app.js - posattnd's web page: every plot is drawn from a live call to this
// server's API (/v1/encode, /v1/analyze, /v1/attention, /v1/models,
// /metrics). Each section is a panel that re-runs when its controls change;
// its element carries data-state (pending, loading, ready, error) for people
// and tests.

// Each panel is a module of its own (sinusoidal.js, rope.js, bias.js,
// attention.js, packed.js, diff.js, mla.js, models.js, extrap.js, live.js, on
// util.js, api.js and panel.js); this one loads them, keeps a deep link in
// view (follow.js), and runs them all when the page opens and when an API
// key is given.

import '/web/follow.js';
import { $ } from '/web/util.js';
import { banner, getApiKey, setApiKey } from '/web/api.js';
import { sinPanel } from '/web/sinusoidal.js';
import { ropePanel } from '/web/rope.js';
import { biasPanel } from '/web/bias.js';
import { attPanel } from '/web/attention.js';
import { packedPanel } from '/web/packed.js';
import { diffPanel } from '/web/diff.js';
import { mlaPanel } from '/web/mla.js';
import { modelsPanel } from '/web/models.js';
import { livePanel } from '/web/live.js';
import { extrapPanel } from '/web/extrap.js';

// ------------------------------------------------------------- the key

const ALL = [sinPanel, ropePanel, biasPanel, attPanel, packedPanel, diffPanel, mlaPanel, modelsPanel, extrapPanel, livePanel];
$('api-key').value = getApiKey();
$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  setApiKey($('api-key').value.trim());
  banner('');
  ALL.forEach((p) => p.run());
});
ALL.forEach((p) => p.run());
