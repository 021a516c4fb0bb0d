// The console's entry: sign-in, navigation and the hash router
// (#/runs, #/runs/<id>, #/tenants).

import { session, signIn, whenSignedOut } from './api.js';
import { h, replace, link } from './dom.js';
import { pages } from './pages.js';

const app = document.getElementById('app');
const nav = document.getElementById('nav');
let stop = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/runs';
  const [path, q = ''] = raw.split('?');
  return { path, params: new URLSearchParams(q) };
}

function renderNav(current) {
  replace(nav, session.token && [
    pages.filter((p) => p.nav).map((p) => link(p.nav, p.title)),
    h('button', { type: 'button', class: 'signout', onclick: signOut }, 'Sign out'),
  ]);
  for (const a of nav.querySelectorAll('a')) {
    if (a.getAttribute('href') === '#' + current) a.setAttribute('aria-current', 'page');
  }
}

function route() {
  if (stop) stop();
  stop = null;
  if (!session.token) return signInPage();
  const { path, params } = parseHash();
  for (const p of pages) {
    const args = p.match(path);
    if (!args) continue;
    renderNav(p.nav || '');
    document.title = p.title + ' · agentfleet';
    stop = p.render(app, args, params) || null;
    app.focus({ preventScroll: true });
    return;
  }
  go('#/runs');
}

// go opens route, rendering it now when the hash already names it.
function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function signOut() {
  session.signOut();
  route();
}

function signInPage(message) {
  renderNav('');
  document.title = 'Sign in · agentfleet';
  const error = h('p', { class: 'error', role: 'alert' }, message || '');
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true, spellcheck: 'false' });
  replace(app, h('section', { class: 'page signin' },
    h('h1', null, 'Sign in'),
    h('form', { id: 'signin', onsubmit: async (e) => {
      e.preventDefault();
      try {
        await signIn(input.value.trim());
      } catch (err) {
        replace(error, err.status === 401 ? 'The API does not know this token.' : err.message);
        return;
      }
      go(location.hash.length > 2 ? location.hash : '#/runs');
    } },
    h('label', { for: 'token' }, 'Tenant API key or admin token'),
    input,
    h('button', { type: 'submit' }, 'Sign in'),
    error,
    h('p', { class: 'hint' }, 'The token stays in this browser tab (sessionStorage) and is sent only in the Authorization header of requests to this dispatcher.'))));
  input.focus();
}

whenSignedOut(() => {
  session.signOut();
  if (stop) stop();
  stop = null;
  signInPage('The API refused the token: sign in again.');
});

window.addEventListener('hashchange', route);
route();
