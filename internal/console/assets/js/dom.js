// Building the page. Everything a tenant or a model wrote enters the
// document as a text node: h() turns strings into text nodes and sets no
// HTML, ever: no script of the console parses a string as markup.

// h creates an element. attrs are attributes, except: class, dataset (an
// object), and on<event> (a function, added as a listener; the page's
// Content-Security-Policy forbids inline handlers). children are nodes,
// strings (as text), arrays of them, or null/false/undefined (skipped).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// replace empties el and appends children.
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// link is an in-console link to a route (#/...).
export function link(route, ...children) {
  return h('a', { href: '#' + route }, ...children);
}

const numberFormat = new Intl.NumberFormat('en');
export const num = (n) => numberFormat.format(n || 0);

export function when(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  return isNaN(d) ? String(ts) : d.toLocaleString();
}

// ago says how long ago ts was, briefly.
export function ago(ts) {
  const s = Math.max(0, Math.round((Date.now() - new Date(ts)) / 1000));
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.round(s / 60) + 'm ago';
  if (s < 86400) return Math.round(s / 3600) + 'h ago';
  return Math.round(s / 86400) + 'd ago';
}

const terminal = new Set(['completed', 'failed', 'cancelled', 'max_turns']);
export const isTerminal = (status) => terminal.has(status);

export function statusBadge(status) {
  return h('span', { class: 'status status-' + status, dataset: { status } }, status.replace('_', ' '));
}

// flash shows a short message in the page's live region.
export function flash(message, kind = 'info') {
  const el = document.getElementById('flash');
  replace(el, h('span', { class: 'flash flash-' + kind }, message));
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => el.replaceChildren(), 6000);
}
