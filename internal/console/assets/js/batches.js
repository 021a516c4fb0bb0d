// The batches pages: a tenant's batches, and a batch with its progress
// (its runs by status as a bar, usage, cancel) and its first results in
// input order. A running batch is read again every two seconds; the API's
// batch events are on NATS, not on the SSE streams the console reads.

import { api, query } from './api.js';
import { h, replace, link, num, when, ago, flash } from './dom.js';
import { batchChart } from './batchchart.js';

const PAGE = 50;
const POLL_MS = 2000;
const RESULTS = 100;
const ENDED = ['completed', 'failed', 'cancelled', 'max_turns'];

function counts(b) {
  const c = b.counts || {};
  const done = ENDED.reduce((n, s) => n + (c[s] || 0), 0);
  return { c, done, failed: (c.failed || 0) + (c.cancelled || 0) + (c.max_turns || 0), running: c.running || 0 };
}

function progressBar(b) {
  const { c, done } = counts(b);
  const bar = h('div', { class: 'meter batch-progress', role: 'progressbar', 'aria-label': 'Progress of batch ' + b.id,
    'aria-valuemin': 0, 'aria-valuemax': b.total, 'aria-valuenow': done,
    'aria-valuetext': num(done) + ' of ' + num(b.total) + ' runs ended', dataset: { done, total: b.total } });
  for (const [status, cls] of [['completed', 'used'], ['failed', 'failed'], ['cancelled', 'failed'], ['max_turns', 'failed'], ['running', 'reserved']]) {
    const part = h('span', { class: cls });
    // Widths through the CSSOM: the policy forbids style attributes.
    part.style.width = (b.total > 0 ? (100 * (c[status] || 0)) / b.total : 0) + '%';
    bar.append(part);
  }
  return bar;
}

export function batchesPage(root) {
  const tbody = h('tbody');
  let cursor = null;
  const more = h('button', { type: 'button', class: 'more', hidden: true, onclick: () => load(cursor, false) }, 'More');
  const rows = new Map();
  const draw = (b) => {
    const { done } = counts(b);
    let tr = rows.get(b.id);
    if (!tr) {
      tr = h('tr', { dataset: { key: b.id } });
      rows.set(b.id, tr);
      tbody.append(tr);
    }
    tr.dataset.state = b.status;
    replace(tr, [
      h('td', { class: 'id' }, link('/batches/' + encodeURIComponent(b.id), b.id)),
      h('td', null, b.agent),
      h('td', null, h('span', { class: 'status status-' + b.status }, b.status)),
      h('td', { class: 'num' }, num(b.total)),
      h('td', { class: 'num' }, b.counts ? num(done) : '—'),
      h('td', { title: when(b.created_at) }, ago(b.created_at)),
    ]);
  };
  async function load(after, reset) {
    try {
      const page = await api('GET', '/v1/batches' + query({ limit: PAGE, cursor: after }));
      if (reset) { rows.clear(); replace(tbody); }
      page.batches.forEach(draw);
      cursor = page.next_cursor || null;
      more.hidden = !cursor;
    } catch (err) {
      flash(err.message, 'error');
    }
  }
  replace(root, h('section', { class: 'page batches' },
    h('h1', null, 'Batches'),
    h('table', { class: 'runs' },
      h('thead', null, h('tr', null, ['Batch', 'Agent', 'Status', 'Inputs', 'Ended', 'Created'].map((c) => h('th', { scope: 'col' }, c)))),
      tbody),
    more));
  load(null, true);
  const poll = setInterval(() => { if (!cursor) load(null, true); }, POLL_MS * 2);
  return () => clearInterval(poll);
}

// firstLines reads up to n lines of a JSONL body and lets go of the
// rest: a batch of 100,000 inputs answers with as many lines.
async function firstLines(body, n) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let lines = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (!done) buf += value;
    const parts = buf.split('\n');
    buf = done ? '' : parts.pop();
    lines = lines.concat(parts.filter(Boolean));
    if (done || lines.length >= n) break;
  }
  reader.cancel().catch(() => {});
  return lines.slice(0, n);
}

export function batchPage(root, id) {
  const path = '/v1/batches/' + encodeURIComponent(id);
  const head = h('div', { class: 'run-head' }, h('h1', null, 'Batch ', h('code', null, id)));
  const results = h('tbody');
  const chart = batchChart(id);
  let poll = null;

  async function loadResults() {
    // Results are JSONL in input order; the first RESULTS lines are enough
    // here (agentctl batch results has them all).
    try {
      const res = await fetch(path + '/results', { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('agentfleet.token') }, cache: 'no-store' });
      if (!res.ok) return;
      const lines = await firstLines(res.body, RESULTS);
      replace(results, lines.map((l) => JSON.parse(l)).map((r) => h('tr', { dataset: { index: r.index, status: r.status } },
        h('td', { class: 'num' }, String(r.index)),
        h('td', null, r.custom_id || ''),
        h('td', { class: 'id' }, link('/runs/' + encodeURIComponent(r.run_id), r.run_id)),
        h('td', null, h('span', { class: 'status status-' + r.status }, r.status)),
        h('td', { class: 'message' }, r.error ? r.error : (r.answer === undefined ? '' : JSON.stringify(r.answer))))));
    } catch (err) {
      flash(err.message, 'error');
    }
  }

  async function loadHead() {
    let b;
    try {
      b = await api('GET', path);
    } catch (err) {
      flash(err.message, 'error');
      return;
    }
    const { done, failed, running } = counts(b);
    const u = b.usage || {};
    const cancel = h('button', { type: 'button', class: 'cancel', 'aria-label': 'Cancel batch ' + b.id,
      hidden: b.status !== 'running', onclick: async () => {
        try {
          await api('POST', path + '/cancel');
          flash('Batch ' + b.id + ' cancelled');
          refresh();
        } catch (err) {
          flash(err.message, 'error');
        }
      } }, 'Cancel batch');
    const facts = [
      ['Status', h('span', { class: 'status status-' + b.status }, b.status)], ['Agent', b.agent],
      ['Inputs', num(b.total)], ['Ended', num(done)], ['Failed', num(failed)], ['Running', num(running)],
      ['Max concurrent', b.max_concurrent ? num(b.max_concurrent) : '—'],
      ['Tokens', num((u.prompt_tokens || 0) + (u.completion_tokens || 0))],
      ['Created', when(b.created_at)], ['Finished', b.finished_at ? when(b.finished_at) : '—'],
    ];
    if (b.retry_of) facts.push(['Retry of', link('/batches/' + encodeURIComponent(b.retry_of), b.retry_of)]);
    head.dataset.status = b.status;
    replace(head,
      h('h1', null, 'Batch ', h('code', null, b.id)),
      cancel,
      progressBar(b),
      h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', { dataset: { fact: k.toLowerCase().replace(/ /g, '-') } }, v)])));
    return b;
  }

  async function refresh() {
    const [b] = await Promise.all([loadHead(), loadResults(), chart.load()]);
    if (b && b.status !== 'running' && b.status !== 'admitting') {
      clearInterval(poll);
      poll = null;
    }
  }

  replace(root, h('section', { class: 'page batch' }, head, chart.el,
    h('h2', null, 'Results (the first ' + RESULTS + ', in input order)'),
    h('table', { class: 'runs results' },
      h('thead', null, h('tr', null, ['#', 'Custom id', 'Run', 'Status', 'Answer or error'].map((c) => h('th', { scope: 'col' }, c)))),
      results)));
  refresh();
  poll = setInterval(refresh, POLL_MS);
  return () => { clearInterval(poll); chart.stop(); };
}
