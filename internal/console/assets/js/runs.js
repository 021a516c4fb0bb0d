// The runs page: a page of runs at a time (cursor paging, so 10,000 runs
// cost what 50 do), filtered by status, agent and session, kept live by
// the tenant's event stream (GET /v1/events), with submit and cancel.

import { api, follow, query } from './api.js';
import { h, replace, link, num, ago, when, statusBadge, isTerminal, flash } from './dom.js';

const PAGE = 50;
export const STATUSES = ['queued', 'running', 'waiting_budget', 'waiting_approval', 'waiting_children',
  'completed', 'failed', 'cancelled', 'max_turns'];
// Runs fetched one by one per refresh; beyond it the first page is read again.
const FETCH_MAX = 10;

// eventStatus is the status an event shows its run in, when it says one.
export function eventStatus(ev) {
  switch (ev.type) {
    case 'queued': return 'queued';
    case 'budget_waiting': return 'waiting_budget';
    case 'approval_requested': return 'waiting_approval';
    case 'done': return ev.summary || null;
    case 'cancelled': return null;
    default: return ev.turn > 0 ? 'running' : null;
  }
}

export async function cancelRun(id) {
  try {
    const run = await api('POST', '/v1/runs/' + encodeURIComponent(id) + '/cancel');
    flash('Cancelling run ' + id + (isTerminal(run.status) ? ': ' + run.status : ': it stops at its next turn boundary'));
    return run;
  } catch (err) {
    flash(err.message, 'error');
    return null;
  }
}

export function runsPage(root, params) {
  const filters = { status: params.get('status') || '', agent: params.get('agent') || '', session_id: params.get('session_id') || '' };
  const rows = new Map(); // run id -> {run, tr}
  let cursor = null;

  const tbody = h('tbody');
  const more = h('button', { type: 'button', class: 'more', onclick: () => loadPage(cursor) }, 'Load older runs');
  const empty = h('p', { class: 'empty', hidden: true }, 'No runs match.');
  const live = h('span', { class: 'live', dataset: { state: 'connecting' } }, 'connecting');

  function matches(run) {
    return (!filters.status || filters.status.split(',').includes(run.status)) &&
      (!filters.agent || run.agent === filters.agent) &&
      (!filters.session_id || run.session_id === filters.session_id);
  }

  function cells(run) {
    const tokens = (run.usage?.prompt_tokens || 0) + (run.usage?.completion_tokens || 0);
    return [
      h('td', { class: 'id' }, link('/runs/' + encodeURIComponent(run.id), run.id)),
      h('td', null, statusBadge(run.status)),
      h('td', null, run.agent),
      h('td', null, run.session_id || ''),
      h('td', null, run.tenant),
      h('td', { class: 'n turns' }, String(run.turns)),
      h('td', { class: 'n tokens' }, num(tokens)),
      h('td', { title: when(run.created_at) }, ago(run.created_at)),
      h('td', { class: 'message' }, run.message.length > 120 ? run.message.slice(0, 120) + '…' : run.message),
      h('td', null, isTerminal(run.status) ? null :
        h('button', { type: 'button', class: 'cancel', 'aria-label': 'Cancel run ' + run.id, onclick: async () => { const r = await cancelRun(run.id); if (r) update(r); } }, 'Cancel')),
    ];
  }

  function row(run) {
    const tr = h('tr', { dataset: { run: run.id, status: run.status } }, cells(run));
    rows.set(run.id, { run, tr });
    return tr;
  }

  function update(run) {
    const r = rows.get(run.id);
    if (!r) return;
    r.run = run;
    r.tr.dataset.status = run.status;
    replace(r.tr, cells(run));
  }

  // addNewest puts runs (newest first) above the rows there are.
  function addNewest(runs) {
    const fresh = runs.filter((r) => !rows.has(r.id) && matches(r));
    runs.forEach(update);
    tbody.prepend(...fresh.map(row));
    empty.hidden = rows.size > 0;
  }

  async function loadPage(after) {
    more.disabled = true;
    try {
      const page = await api('GET', '/v1/runs' + query({ ...filters, limit: PAGE, cursor: after }));
      for (const run of page.runs) {
        if (rows.has(run.id)) update(run); else tbody.append(row(run));
      }
      cursor = page.next_cursor || null;
    } catch (err) {
      flash(err.message, 'error');
    }
    more.hidden = !cursor;
    more.disabled = false;
    empty.hidden = rows.size > 0;
  }

  // Live: an event updates its run's row at once from what it says, and
  // the run is read again shortly after (a few at a time).
  const due = new Set();
  let timer = null;
  function refreshSoon(id) {
    due.add(id);
    timer ??= setTimeout(refresh, 300);
  }
  async function refresh() {
    timer = null;
    const ids = [...due];
    due.clear();
    const fresh = ids.filter((id) => !rows.has(id));
    const known = ids.filter((id) => rows.has(id)).slice(0, FETCH_MAX);
    const get = (id) => api('GET', '/v1/runs/' + encodeURIComponent(id)).catch(() => null);
    if (fresh.length > FETCH_MAX) {
      const page = await api('GET', '/v1/runs' + query({ ...filters, limit: PAGE })).catch(() => null);
      if (page) addNewest(page.runs);
    } else if (fresh.length) {
      const runs = (await Promise.all(fresh.map(get))).filter(Boolean);
      runs.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
      addNewest(runs);
    }
    (await Promise.all(known.map(get))).filter(Boolean).forEach(update);
  }

  function onEvent(ev) {
    const r = rows.get(ev.run_id);
    if (r) {
      const status = eventStatus(ev);
      const run = { ...r.run, turns: Math.max(r.run.turns, ev.turn) };
      if (status && !isTerminal(r.run.status)) run.status = status;
      if (ev.type === 'model_call' && ev.tokens) {
        run.usage = { prompt_tokens: (run.usage?.prompt_tokens || 0) + (ev.tokens.prompt || 0),
          completion_tokens: (run.usage?.completion_tokens || 0) + (ev.tokens.completion || 0) };
      }
      update(run);
      refreshSoon(ev.run_id);
    } else if (ev.type === 'queued') {
      refreshSoon(ev.run_id);
    }
  }

  const filterForm = h('form', { class: 'filters', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    location.hash = '#/runs' + query({ status: f.get('status'), agent: f.get('agent').trim(), session_id: f.get('session_id').trim() });
  } },
  h('label', null, 'Status ', h('select', { name: 'status' },
    h('option', { value: '' }, 'any'),
    STATUSES.map((s) => h('option', { value: s, selected: filters.status === s }, s.replace('_', ' '))))),
  h('label', null, 'Agent ', h('input', { name: 'agent', value: filters.agent, size: 12 })),
  h('label', null, 'Session ', h('input', { name: 'session_id', value: filters.session_id, size: 12 })),
  h('button', { type: 'submit' }, 'Filter'));

  const submitForm = h('form', { class: 'submit', onsubmit: async (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const body = { message: f.get('message') };
    if (f.get('agent').trim()) body.agent = f.get('agent').trim();
    if (f.get('session_id').trim()) body.session_id = f.get('session_id').trim();
    try {
      const run = await api('POST', '/v1/runs', body);
      flash('Submitted run ' + run.id);
      e.target.reset();
      addNewest([run]);
    } catch (err) {
      flash(err.message, 'error');
    }
  } },
  h('label', { class: 'wide' }, 'Message ', h('textarea', { name: 'message', rows: 2, required: true, placeholder: 'What should the agent do?' })),
  h('label', null, 'Agent ', h('input', { name: 'agent', placeholder: 'default', size: 12 })),
  h('label', null, 'Session ', h('input', { name: 'session_id', size: 12 })),
  h('button', { type: 'submit' }, 'Submit run'));

  replace(root, h('section', { class: 'page runs' },
    h('h1', null, 'Runs ', live),
    h('details', { class: 'new-run' }, h('summary', null, 'New run'), submitForm),
    filterForm,
    h('table', { class: 'runs' },
      h('thead', null, h('tr', null, ['Run', 'Status', 'Agent', 'Session', 'Tenant', 'Turns', 'Tokens', 'Created', 'Message', ''].map((c) => h('th', { scope: 'col' }, c)))),
      tbody),
    empty, more));

  loadPage(null);
  const stop = follow('/v1/events', {
    onEvent,
    onState: (s) => { live.dataset.state = s; live.textContent = s; },
    onEnd: (err) => { live.dataset.state = 'off'; live.textContent = 'not live'; if (err) flash(err.message, 'error'); },
  });
  return () => { stop(); clearTimeout(timer); };
}
