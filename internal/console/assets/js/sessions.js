// The sessions pages: a tenant's sessions (the runs of one session id),
// newest updated first, and a session as a conversation: each run's
// message, then its answer or error, with a link to the run, and the
// session's latest checkpoint (the summary later runs replay). A
// tenant's key reads its own; the admin token names a tenant
// (#/sessions?tenant=ID), and is asked for one when it has not.

import { api, query } from './api.js';
import { h, replace, link, num, when, ago, statusBadge, isTerminal, flash } from './dom.js';
import { pager, table, tenantForm } from './triggers.js';

const POLL_MS = 5000;

function answerText(answer) {
  return typeof answer === 'string' ? answer : JSON.stringify(answer, null, 2);
}

// sessionRoute is the route of session id (of tenant, when named).
export function sessionRoute(id, tenant) {
  return '/sessions/' + encodeURIComponent(id) + query({ tenant });
}


export function sessionsPage(root, params) {
  const tenant = params.get('tenant') || '';
  const path = '/v1/sessions' + query({ tenant });
  const tbody = h('tbody');
  const list = pager(path, 'sessions', tbody, (s) => s.id, (s) => [
    h('td', null, link(sessionRoute(s.id, tenant), s.id)),
    h('td', null, s.agent),
    h('td', null, String(s.runs)),
    h('td', null, link('/runs/' + encodeURIComponent(s.last_run_id), statusBadge(s.last_status))),
    h('td', null, num(s.tokens)),
    h('td', { title: when(s.updated_at) }, ago(s.updated_at)),
  ], (s) => s.last_status);
  let poll = null;
  let stopped = false;
  api('GET', path + (path.includes('?') ? '&' : '?') + 'limit=1').then(() => {
    if (stopped) return;
    replace(root, h('section', { class: 'page sessions' },
      h('h1', null, tenant ? 'Sessions of ' + tenant : 'Sessions'),
      h('p', { class: 'hint' }, 'A session is the runs submitted with one session_id; each run continues its conversation.'),
      table(['Session', 'Agent', 'Runs', 'Last run', 'Tokens', 'Updated'], tbody), list.more));
    list.load(null);
    poll = setInterval(list.refresh, POLL_MS);
  }).catch((err) => {
    if (stopped) return;
    if (err.status === 422 || err.status === 404) tenantForm(root, 'sessions', 'Sessions', err.message);
    else flash(err.message, 'error');
  });
  return () => { stopped = true; clearInterval(poll); };
}

// exchange is one run of the conversation: what was asked, then what
// came of it.
function exchange(r) {
  let outcome;
  if (r.status === 'completed' && r.answer !== undefined) {
    outcome = h('div', { class: 'block answer' }, h('pre', { class: 'text' }, answerText(r.answer)));
  } else if (r.error) {
    outcome = h('div', { class: 'block error' }, h('pre', { class: 'text' }, r.error));
  } else if (!isTerminal(r.status)) {
    outcome = h('div', { class: 'block notice' }, 'No answer yet: the run is ' + r.status.replace('_', ' ') + '.');
  } else {
    outcome = h('div', { class: 'block notice' }, 'The run ended ' + r.status.replace('_', ' ') + ' without an answer.');
  }
  return h('article', { class: 'exchange', dataset: { run: r.id, status: r.status } },
    h('h2', null, link('/runs/' + encodeURIComponent(r.id), 'Run ', h('code', null, r.id)), ' ', statusBadge(r.status),
      ' ', h('span', { class: 'meta', title: when(r.created_at) }, ago(r.created_at))),
    h('div', { class: 'block task' }, h('pre', { class: 'text' }, r.message)),
    outcome);
}

export function sessionPage(root, id, params) {
  const tenant = params.get('tenant') || '';
  const path = '/v1/sessions/' + encodeURIComponent(id) + query({ tenant });
  let poll = null;
  let stopped = false;
  async function load() {
    let v;
    try {
      v = await api('GET', path);
    } catch (err) {
      if (stopped) return;
      flash(err.message, 'error');
      if (err.status === 404) replace(root, h('section', { class: 'page session' }, h('h1', null, 'No session ', h('code', null, id))));
      clearInterval(poll);
      return;
    }
    if (stopped) return;
    const s = v.session;
    const facts = [
      ['Agent', s.agent],
      ['Runs', String(s.runs) + (v.runs.length < s.runs ? ' (the latest ' + v.runs.length + ' shown)' : '')],
      ['Last run', link('/runs/' + encodeURIComponent(s.last_run_id), statusBadge(s.last_status))],
      ['Tokens', num(s.tokens)],
      ['Created', when(s.created_at)],
      ['Updated', when(s.updated_at)],
      ['Every run', link('/runs' + query({ session_id: s.id }), 'in the runs list')],
    ];
    const cp = v.checkpoint;
    replace(root, h('section', { class: 'page session' },
      h('div', { class: 'run-head' },
        h('h1', null, 'Session ', h('code', null, s.id)),
        h('dl', { class: 'facts' }, facts.map(([k, val]) => [h('dt', null, k), h('dd', { dataset: { fact: k.toLowerCase() } }, val)]))),
      h('div', { class: 'conversation' }, v.runs.map(exchange)),
      cp && h('details', { class: 'block checkpoint' },
        h('summary', null, 'Latest checkpoint: run ', h('code', null, cp.run_id), ', turn ' + cp.turn),
        h('pre', { class: 'text' }, cp.content))));
    if (v.runs.every((r) => isTerminal(r.status))) clearInterval(poll);
  }
  load();
  poll = setInterval(load, POLL_MS);
  return () => { stopped = true; clearInterval(poll); };
}
