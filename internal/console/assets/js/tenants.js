// The tenants page: each tenant's budget as a bar (used and reserved
// against the limit), its waiting and active runs. The admin token sees
// every tenant, a page at a time; a tenant's key sees its own. It reads
// the tenants again every few seconds, and soon after a model call.

import { api, follow, query } from './api.js';
import { h, replace, link, num, when, flash } from './dom.js';

const PAGE = 50;
const POLL_MS = 2000;

function pct(n, of) {
  return of > 0 ? Math.min(100, (100 * n) / of) : 0;
}

export function budgetBar(t) {
  const b = t.budget || {};
  if (!b.tokens) {
    return h('div', { class: 'budget unlimited' },
      h('p', null, 'Unlimited: ', h('span', { class: 'used-n' }, num(b.used)), ' tokens used this window'));
  }
  const used = h('span', { class: 'used' });
  const reserved = h('span', { class: 'reserved' });
  // Widths through the CSSOM: the policy forbids style attributes.
  used.style.width = pct(b.used, b.tokens) + '%';
  reserved.style.width = pct(Math.min(b.reserved, Math.max(0, b.tokens - b.used)), b.tokens) + '%';
  return h('div', { class: 'budget' },
    h('div', { class: 'meter', role: 'meter', 'aria-label': 'Token budget of ' + t.id,
      'aria-valuemin': 0, 'aria-valuemax': b.tokens, 'aria-valuenow': b.used,
      'aria-valuetext': num(b.used) + ' used and ' + num(b.reserved) + ' reserved of ' + num(b.tokens) + ' tokens',
      dataset: { used: b.used, reserved: b.reserved, limit: b.tokens } }, used, reserved),
    h('p', { class: 'legend' },
      h('span', { class: 'key used-key' }), 'used ', h('strong', { class: 'used-n' }, num(b.used)), ' · ',
      h('span', { class: 'key reserved-key' }), 'reserved ', h('strong', null, num(b.reserved)), ' · limit ',
      h('strong', null, num(b.tokens)), ' tokens per ', b.window,
      b.window_end ? ' (until ' + when(b.window_end) + ')' : ''));
}

function card(t) {
  const facts = [
    ['Waiting for budget', link('/runs' + query({ status: 'waiting_budget' }), num(t.waiting_runs))],
    ['Active runs', num(t.active_runs) + (t.max_concurrent_runs ? ' of at most ' + num(t.max_concurrent_runs) : '')],
    ['Per minute', t.tokens_per_minute ? num(t.tokens_per_minute) + ' tokens' : 'no limit'],
    ['When exhausted', t.exhausted === 'fail' ? 'runs fail' : 'runs wait'],
    ['Weight', String(t.weight)],
    ['Max queued runs', num(t.max_queued_runs)],
  ];
  return [
    h('h2', null, t.id),
    budgetBar(t),
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', { dataset: { fact: k.toLowerCase() } }, v)])),
  ];
}

export function tenantsPage(root) {
  const list = h('div', { class: 'tenant-list' });
  const cards = new Map();
  const more = h('button', { type: 'button', class: 'more', hidden: true, onclick: () => { pages++; load(); } }, 'More tenants');
  let pages = 1;
  let loading = false;

  function put(t) {
    let el = cards.get(t.id);
    if (!el) {
      el = h('article', { class: 'tenant', dataset: { tenant: t.id } });
      cards.set(t.id, el);
      list.append(el);
    }
    replace(el, card(t));
  }

  // load reads the pages shown so far again, from the first.
  async function load() {
    if (loading) return;
    loading = true;
    try {
      let cursor = null;
      for (let i = 0; i < pages; i++) {
        const page = await api('GET', '/v1/tenants' + query({ limit: PAGE, cursor }));
        page.tenants.forEach(put);
        cursor = page.next_cursor || null;
        if (!cursor) break;
      }
      more.hidden = !cursor;
    } catch (err) {
      flash(err.message, 'error');
    } finally {
      loading = false;
    }
  }

  replace(root, h('section', { class: 'page tenants' }, h('h1', null, 'Tenants and budgets'), list, more));
  load();
  const poll = setInterval(load, POLL_MS);
  let soon = null;
  const stop = follow('/v1/events', {
    onEvent: (ev) => {
      if (ev.type === 'model_call' || ev.type === 'done' || ev.type === 'budget_waiting') {
        soon ??= setTimeout(() => { soon = null; load(); }, 300);
      }
    },
  });
  return () => { clearInterval(poll); clearTimeout(soon); stop(); };
}
