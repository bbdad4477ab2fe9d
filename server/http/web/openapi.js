// openapi.js - a readable view of this server's /openapi.yaml (openapi.html):
// the file as preformatted text, with an anchor on each path (id = the
// path: /web/openapi.html#/v1/attention) and each component (id = its
// JSON pointer, /components/schemas/AttentionRequest), every $ref a link
// to the component it names, and a list of the paths at the top. The YAML
// is not parsed: the file's own indentation (two spaces a level) says what
// a line is. The section carries data-state (loading, ready, error).

const $ = (id) => document.getElementById(id);

// A line that is only a key ("  /v1/attention:", "    AttentionRequest:"):
// [line, indent, quote, key], or null.
const KEY = /^( *)('?)([^\s#'][^:']*)\2:\s*(?:#.*)?$/;

function render(text) {
  const pre = $('spec-text'), toc = $('spec-toc'), frag = document.createDocumentFragment();
  const paths = [];
  let top = '', kind = '';
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();   // the file's last newline
  for (const line of lines) {
    const k = KEY.exec(line);
    let id = null;
    if (k && k[1].length === 0) { top = k[3]; kind = ''; }
    else if (k && top === 'paths' && k[1].length === 2 && k[3].startsWith('/')) id = k[3];
    else if (k && top === 'components' && k[1].length === 2) id = `/components/${kind = k[3]}`;
    else if (k && top === 'components' && kind && k[1].length === 4) id = `/components/${kind}/${k[3]}`;
    const row = document.createElement('span');
    row.className = 'line';
    if (/^\s*#/.test(line)) row.classList.add('comment');
    if (id) {
      row.id = id;
      row.classList.add('anchor');
      const a = document.createElement('a');
      a.href = '#' + id;
      a.textContent = line;
      row.appendChild(a);
      if (top === 'paths') paths.push(id);
    } else {
      // $ref targets become links; the rest of the line stays text.
      let at = 0;
      for (const r of line.matchAll(/#\/components\/[\w-]+\/[\w.-]+/g)) {
        row.append(line.slice(at, r.index));
        const a = document.createElement('a');
        a.href = r[0];
        a.className = 'ref';
        a.textContent = r[0];
        row.appendChild(a);
        at = r.index + r[0].length;
      }
      row.append(line.slice(at));
    }
    frag.append(row, '\n');
  }
  pre.replaceChildren(frag);
  toc.replaceChildren(...paths.map((p) => {
    const a = document.createElement('a');
    a.href = '#' + p;
    a.textContent = p;
    return a;
  }), Object.assign(document.createElement('a'), { href: '#/components/schemas', textContent: 'schemas' }));
  return { paths: paths.length, lines: lines.length };
}

// The line the URL's fragment names, marked (:target misses lines made
// after the navigation); returns it, or null.
function mark() {
  for (const el of document.querySelectorAll('#spec-text .here')) el.classList.remove('here');
  const el = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (el) el.classList.add('here');
  return el || null;
}
window.addEventListener('hashchange', mark);

async function main() {
  const sec = $('spec'), st = $('spec-status');
  sec.dataset.state = 'loading';
  try {
    const r = await fetch('/openapi.yaml');
    if (!r.ok) throw new Error(`/openapi.yaml: HTTP ${r.status}`);
    const text = await r.text();
    const n = render(text);
    const title = /^  title: (.*)$/m.exec(text), version = /^  version: (.*)$/m.exec(text);
    st.textContent = (title && version ? `${title[1]} ${version[1]}: ` : '') + `${n.paths} paths, ${n.lines} lines`;
    sec.dataset.state = 'ready';
    // The text arrived after the browser looked for the fragment: look again.
    const target = mark();
    if (target) target.scrollIntoView({ block: 'start' });
  } catch (e) {
    st.textContent = e.message;
    st.classList.add('error');
    sec.dataset.state = 'error';
  }
}
main();
