// api.js - how posattnd's web page calls this server's API: the API key
// (kept in sessionStorage) as a Bearer token, 503 answers retried as
// Retry-After says, errors turned into ApiError with the server's code and
// message, and the banner that asks for a key on 401.

import { $ } from '/web/util.js';

const KEY = 'posattn-api-key';
let apiKey = sessionStorage.getItem(KEY) || '';

export class ApiError extends Error {}

async function call(path, body) {
  const headers = {};
  if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
  const init = { method: body === undefined ? 'GET' : 'POST', headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let r;
  for (let attempt = 0; ; attempt++) {   // 503 (queue full): retry as Retry-After says
    r = await fetch(path, init);
    if (r.status !== 503 || attempt === 3) break;
    const wait = Number(r.headers.get('Retry-After')) || 1;
    await new Promise((res) => setTimeout(res, wait * 1000));
  }
  const text = await r.text();
  if (r.status === 401) {
    banner(apiKey ? 'The API key was refused (401). Enter the key posattnd was started with.'
                  : 'This posattnd requires an API key (it runs with --api-key): enter it above.');
    $('api-key').focus();
  }
  if (!r.ok) {
    let msg = `HTTP ${r.status}`;
    try {
      // A batch whose every item failed answers with the items' status and
      // the batch's own body: the first item's error says why.
      const j = JSON.parse(text), items = Array.isArray(j.outputs) ? j.outputs : [];
      const e = j.error || (items.find((o) => o && o.error) || {}).error;
      if (e) msg = `${e.code}: ${e.message}` + (e.field ? ` (${e.field})` : '');
    } catch (e) { /* not JSON */ }
    throw new ApiError(`${path}: ${msg}`);
  }
  return path === '/metrics' ? text : JSON.parse(text);
}
export const api = (path, body) => call(path, body);

export function banner(text) {
  const b = $('banner');
  b.textContent = text;
  b.hidden = !text;
}

// The key in use; a new one (or '' for none) is kept for the tab's life.
export const getApiKey = () => apiKey;
export function setApiKey(key) {
  apiKey = key;
  if (apiKey) sessionStorage.setItem(KEY, apiKey); else sessionStorage.removeItem(KEY);
}
