// follow.js - keeps a deep link's section (/#live) in view while the plots
// above it arrive: loaded first by app.js, it has no exports.

// A deep link (/#live) is scrolled to before the plots above its section
// have arrived, and each plot that arrives pushes the section down. So until
// the person scrolls, clicks or types (or 30 s have passed; 3 s after a
// link within the page, when the plots are there), the target is scrolled
// back into place whenever the page's height changes.
const follow = { el: null, until: 0 };
function followHash(ms) {
  const id = decodeURIComponent(location.hash.slice(1));
  follow.el = id ? document.getElementById(id) : null;
  follow.until = performance.now() + ms;
}
followHash(30000);
window.addEventListener('hashchange', () => followHash(3000));
for (const ev of ['wheel', 'touchstart', 'keydown', 'mousedown'])
  window.addEventListener(ev, () => { follow.el = null; }, { passive: true, capture: true });
new ResizeObserver(() => {
  if (follow.el && performance.now() < follow.until) follow.el.scrollIntoView({ block: 'start' });
}).observe(document.body);
