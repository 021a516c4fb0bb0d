// The triggers pages: a tenant's webhook triggers, and a trigger with its
// delivery log (what came, what became of it, the run it started). The
// log is read again when a run the trigger started is queued (its queued
// event names the trigger) and every few seconds for the deliveries that
// start none. Triggers belong to a tenant: the admin token gets the
// API's answer saying so.

import { api, follow, query } from './api.js';
import { h, replace, link, when, ago, flash } from './dom.js';

const PAGE = 50;
const POLL_MS = 5000;

// pager shows pages of a list endpoint in tbody, a "more" button
// reading the next; refresh reads the first page again and puts what
// is new on top; put draws one item again. key names a row, draw makes
// its cells, state (when given) its data-state.
// tenantForm asks the admin token which tenant's page (route: "secrets",
// "sessions") to show, after the API said it must name one.
export function tenantForm(root, route, title, message) {
  const id = route + '-tenant';
  const input = h('input', { id, name: 'tenant', type: 'text', required: true, spellcheck: 'false', autocomplete: 'off' });
  replace(root, h('section', { class: 'page ' + route },
    h('h1', null, title),
    h('p', { class: 'hint' }, message),
    h('form', { class: 'tenant-pick', onsubmit: (e) => {
      e.preventDefault();
      location.hash = '#/' + route + query({ tenant: input.value.trim() });
    } }, h('label', { for: id }, 'Tenant'), input, h('button', { type: 'submit' }, 'Show ' + route))));
  input.focus();
}

export function pager(path, plural, tbody, key, draw, state) {
  const rows = new Map();
  let cursor = null;
  const more = h('button', { type: 'button', class: 'more', hidden: true, onclick: () => load(cursor) }, 'More');
  const put = (item, top) => {
    let tr = rows.get(key(item));
    if (!tr) {
      tr = h('tr', { dataset: { key: key(item) } });
      rows.set(key(item), tr);
      if (top) tbody.prepend(tr); else tbody.append(tr);
    }
    tr.dataset.state = state ? state(item) : item.outcome || (item.enabled === false ? 'disabled' : 'enabled');
    replace(tr, draw(item));
  };
  const sep = path.includes('?') ? '&' : '?';
  const at = (params) => path + (query(params) ? sep + query(params).slice(1) : '');
  async function load(after) {
    try {
      const page = await api('GET', at({ limit: PAGE, cursor: after }));
      page[plural].forEach((item) => put(item, false));
      cursor = page.next_cursor || null;
      more.hidden = !cursor;
    } catch (err) {
      flash(err.message, 'error');
    }
  }
  async function refresh() {
    const first = await api('GET', at({ limit: PAGE })).catch(() => null);
    if (first) [...first[plural]].reverse().forEach((item) => put(item, true));
  }
  return { more, load, refresh, put: (item) => put(item, true) };
}

export function table(columns, tbody) {
  return h('table', { class: 'runs' }, h('thead', null, h('tr', null, columns.map((c) => h('th', { scope: 'col' }, c)))), tbody);
}

export function triggersPage(root) {
  const tbody = h('tbody');
  const list = pager('/v1/triggers', 'triggers', tbody, (t) => t.id, (t) => [
    h('td', null, link('/triggers/' + encodeURIComponent(t.id), t.name)),
    h('td', null, t.scheme),
    h('td', null, t.agent),
    h('td', null, t.events.length ? t.events.join(', ') : 'every event'),
    h('td', null, t.enabled ? 'enabled' : 'disabled'),
    h('td', { class: 'id' }, t.url),
    h('td', { title: when(t.created_at) }, ago(t.created_at)),
  ]);
  replace(root, h('section', { class: 'page triggers' },
    h('h1', null, 'Webhook triggers'),
    table(['Name', 'Scheme', 'Agent', 'Events', 'State', 'Hook URL', 'Created'], tbody), list.more));
  list.load(null);
  const poll = setInterval(list.refresh, POLL_MS);
  return () => clearInterval(poll);
}

export function triggerPage(root, id) {
  const path = '/v1/triggers/' + encodeURIComponent(id);
  const head = h('div', { class: 'run-head' }, h('h1', null, 'Trigger ', h('code', null, id)));
  const tbody = h('tbody');
  const deliveries = pager(path + '/deliveries', 'deliveries', tbody, (d) => d.id, (d) => [
    h('td', { title: when(d.received_at) }, ago(d.received_at)),
    h('td', { class: 'id' }, d.delivery),
    h('td', null, d.event || ''),
    h('td', null, h('span', { class: 'status outcome-' + d.outcome }, d.outcome)),
    h('td', { class: 'message' }, d.reason || ''),
    h('td', { class: 'id' }, d.run_id ? link('/runs/' + encodeURIComponent(d.run_id), d.run_id) : ''),
    h('td', null, (d.outcome === 'accepted' || d.outcome === 'duplicate' || d.outcome === 'rejected') &&
      h('button', { type: 'button', class: 'redeliver', 'aria-label': 'Redeliver ' + d.delivery, onclick: async () => {
        try {
          const res = await api('POST', path + '/deliveries/' + encodeURIComponent(d.delivery) + '/redeliver');
          flash('Delivery ' + d.delivery + ' started run ' + res.run_id);
          deliveries.refresh();
        } catch (err) {
          flash(err.message, 'error');
        }
      } }, 'Redeliver')),
  ]);

  async function loadHead() {
    try {
      const t = await api('GET', path);
      const facts = [
        ['Name', t.name], ['Scheme', t.scheme], ['Agent', t.agent], ['State', t.enabled ? 'enabled' : 'disabled'],
        ['Events', t.events.length ? t.events.join(', ') : 'every event'], ['Session', t.session_id || '—'],
        ['Hook URL', h('code', null, t.url)], ['Callback', t.callback_url || '—'],
        ['Created', when(t.created_at)], ['Updated', when(t.updated_at)],
      ];
      replace(head,
        h('h1', null, 'Trigger ', h('code', null, t.name)),
        h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', { dataset: { fact: k.toLowerCase() } }, v)])),
        h('div', { class: 'block task' }, h('h2', null, 'Message template'), h('pre', { class: 'text' }, t.message)));
    } catch (err) {
      flash(err.message, 'error');
    }
  }

  replace(root, h('section', { class: 'page trigger' }, head,
    h('h2', null, 'Deliveries'),
    table(['Received', 'Delivery', 'Event', 'Outcome', 'Reason', 'Run', ''], tbody), deliveries.more));
  loadHead();
  deliveries.load(null);
  const poll = setInterval(deliveries.refresh, POLL_MS);
  let soon = null;
  const stop = follow('/v1/events', {
    onEvent: (ev) => {
      if (ev.type === 'queued' && ev.args && ev.args.trigger === id) soon ??= setTimeout(() => { soon = null; deliveries.refresh(); }, 100);
    },
  });
  return () => { clearInterval(poll); clearTimeout(soon); stop(); };
}
