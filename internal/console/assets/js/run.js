// The run page: the run, its turns as its events arrive (the model's
// reply with its code highlighted, tokens per call, logs, the digest of
// what was carried, errors), a timeline of every event, and its child
// runs. Events come from GET /v1/runs/{id}/events: the history, then live.

import { api, follow, query } from './api.js';
import { h, replace, link, num, when, statusBadge, isTerminal, flash } from './dom.js';
import { reply } from './highlight.js';
import { cancelRun } from './runs.js';
import { approvalActions } from './approvals.js';
import { sessionRoute } from './sessions.js';
import { runTimeline } from './timeline.js';

const CHILDREN_PAGE = 50;

function answerText(answer) {
  return typeof answer === 'string' ? answer : JSON.stringify(answer, null, 2);
}

function tokens(t) {
  return t ? num(t.prompt) + ' prompt + ' + num(t.completion) + ' completion tokens' : '';
}

export function runPage(root, id) {
  const path = '/v1/runs/' + encodeURIComponent(id);
  const head = h('div', { class: 'run-head' }, h('h1', null, 'Run ', h('code', null, id)));
  const turns = h('div', { class: 'turns' });
  const timeline = h('ol', { class: 'timeline', 'aria-label': 'Events' });
  const children = h('section', { class: 'children', hidden: true });
  const live = h('span', { class: 'live', dataset: { state: 'connecting' } }, 'connecting');
  const sections = new Map(); // turn -> body element
  const tl = runTimeline();
  let run = null;
  let lastSeq = 0;

  function renderHead() {
    const u = run.usage || {};
    const facts = [
      ['Status', statusBadge(run.status)],
      ['Tenant', run.tenant],
      ['Agent', run.agent],
      ['Session', run.session_id ? link(sessionRoute(run.session_id, run.tenant), run.session_id) : '—'],
      ['Parent', run.parent_run_id ? link('/runs/' + encodeURIComponent(run.parent_run_id), run.parent_run_id) : '—'],
      ['Turns', String(run.turns) + (run.max_turns ? ' of at most ' + run.max_turns : '')],
      ['Tokens', num(u.prompt_tokens) + ' prompt + ' + num(u.completion_tokens) + ' completion' +
        (u.children ? ' (children: ' + num(u.children.prompt_tokens + u.children.completion_tokens) + ')' : '')],
      ['Carried, kept out of prompts', num(run.data_bytes_carried) + ' bytes'],
      ['Created', when(run.created_at)],
      ['Updated', when(run.updated_at)],
    ];
    replace(head,
      h('h1', null, 'Run ', h('code', null, run.id), ' ', live),
      h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', { dataset: { fact: k.toLowerCase() } }, v)])),
      h('div', { class: 'block task' }, h('h2', null, 'Task'), h('pre', { class: 'text' }, run.message)),
      run.answer !== undefined && h('div', { class: 'block answer' }, h('h2', null, 'Answer'), h('pre', { class: 'text' }, answerText(run.answer))),
      run.error && h('div', { class: 'block error' }, h('h2', null, 'Error'), h('pre', { class: 'text' }, run.error)),
      !isTerminal(run.status) && h('button', { type: 'button', class: 'cancel', onclick: async () => {
        const r = await cancelRun(run.id);
        if (r) { run = r; renderHead(); }
      } }, 'Cancel run'));
  }

  // asked numbers the reads so a slow answer never overwrites a newer
  // one; ended is set by the done event, which can reach the page before
  // a read of the run shows it ended, so the page reads again until it does.
  let asked = 0;
  let ended = false;
  let rereads = 0;

  async function refresh() {
    const n = ++asked;
    try {
      const r = await api('GET', path);
      if (n !== asked) return;
      run = r;
      tl.update(run);
      renderHead();
      if (run.children > 0) loadChildren();
      if (ended && !isTerminal(run.status) && rereads++ < 25) refreshSoon();
    } catch (err) {
      if (n !== asked) return;
      flash(err.message, 'error');
      if (err.status === 404) replace(head, h('h1', null, 'No run ', h('code', null, id)));
    }
  }

  async function loadChildren(after = null) {
    const page = await api('GET', '/v1/runs' + query({ parent_run_id: id, limit: CHILDREN_PAGE, cursor: after })).catch(() => null);
    if (!page) return;
    children.hidden = false;
    const list = after ? children.querySelector('ul') : h('ul');
    for (const c of page.runs) list.append(h('li', null, link('/runs/' + encodeURIComponent(c.id), c.id), ' ', statusBadge(c.status), ' ', c.message));
    const more = page.next_cursor && h('button', { type: 'button', class: 'more', onclick: (e) => { e.target.remove(); loadChildren(page.next_cursor); } }, 'More children');
    if (after) { if (more) children.append(more); } else replace(children, h('h2', null, 'Child runs'), list, more);
  }

  function turnBody(n) {
    let body = sections.get(n);
    if (body) return body;
    body = h('div', { class: 'turn-body' });
    const section = h('section', { class: 'turn', dataset: { turn: n } }, h('h2', null, 'Turn ' + n), body);
    sections.set(n, body);
    const later = [...turns.children].find((s) => Number(s.dataset.turn) > n);
    turns.insertBefore(section, later || null);
    return body;
  }

  // block is how an event shows in its turn, or null.
  function block(ev) {
    switch (ev.type) {
      case 'model_call':
        if (ev.content) {
          return h('div', { class: 'block call' },
            h('h3', null, 'Model reply ', h('span', { class: 'meta' }, [ev.summary, tokens(ev.tokens)].filter(Boolean).join(' · '))),
            reply(ev.content));
        }
        return h('div', { class: 'block call sub' }, h('h3', null, (ev.summary || 'model call') + ' ', h('span', { class: 'meta' }, tokens(ev.tokens))));
      case 'log':
        return h('div', { class: 'block log' }, h('h3', null, 'Logs'), h('pre', { class: 'text' }, ev.content));
      case 'execute_js_result':
        if ((ev.summary || '').startsWith('failed')) {
          return h('div', { class: 'block error' }, h('h3', null, 'Script ' + ev.summary), h('pre', { class: 'text' }, ev.content || ''));
        }
        return ev.summary === 'answered' ? h('div', { class: 'block notice' }, 'The script answered.') : null;
      case 'data_update':
        return h('div', { class: 'block digest' }, h('h3', null, 'Carried to the next turn'),
          h('p', { class: 'digest-text' }, ev.summary || ''),
          ev.args !== undefined && h('details', null, h('summary', null, 'Value'), h('pre', { class: 'text' }, JSON.stringify(ev.args, null, 2))));
      case 'response':
        return h('div', { class: 'block answer' }, h('h3', null, 'Answer'), h('pre', { class: 'text' }, ev.content || ''));
      case 'error':
        return h('div', { class: 'block error' }, h('h3', null, 'Error'), h('pre', { class: 'text' }, ev.content || ''));
      case 'warning':
        return h('div', { class: 'block warning' }, h('h3', null, 'Warning'), h('pre', { class: 'text' }, ev.content || ev.summary || ''));
      case 'tool_call':
        return h('div', { class: 'block tool' },
          h('h3', null, 'Tool call ', h('span', { class: 'meta' }, ev.summary || '')),
          ev.args && ev.args.body && h('details', null, h('summary', null, 'Body sent'), h('pre', { class: 'text' }, ev.args.body)));
      case 'tool_result': {
        const a = ev.args || {};
        const failed = !!a.error || a.status >= 400;
        return h('div', { class: 'block tool result' + (failed ? ' error' : '') },
          h('h3', null, 'Tool result ', h('span', { class: 'meta' }, ev.summary || '')),
          (a.error || a.body) && h('details', null, h('summary', null, a.error ? 'Error' : 'Body' + (a.truncated ? ' (cut)' : '')),
            h('pre', { class: 'text' }, a.error || a.body)));
      }
      case 'child_spawned':
        return h('div', { class: 'block child' }, 'Spawned ', link('/runs/' + encodeURIComponent(ev.summary), ev.summary), ev.content ? ': ' + ev.content : '');
      case 'budget_waiting': case 'compacted': case 'cancelled':
        return h('div', { class: 'block notice' }, ev.type.replace('_', ' ') + (ev.summary ? ': ' + ev.summary : ''));
      case 'approval_requested': case 'approved': case 'denied':
        return h('div', { class: 'block notice approval' }, ev.type.replace('_', ' ') + (ev.summary ? ': ' + ev.summary : ''), approvalActions(ev, run));
      case 'done':
        return h('div', { class: 'block notice done' }, 'The run ended: ' + (ev.summary || ''));
    }
    return null;
  }

  // typing is each turn's model reply as it streams (response_chunk
  // events, not stored), shown until the turn's model_call replaces it.
  const typing = new Map();
  function typeChunk(ev) {
    let t = typing.get(ev.turn);
    if (!t || ev.index === 1) {
      t?.block.remove(); // index 1 again: the reply starts over
      const pre = h('pre', { class: 'text' });
      t = { pre, block: h('div', { class: 'block call streaming' }, h('h3', null, 'Model reply ', h('span', { class: 'meta' }, 'streaming…')), pre) };
      typing.set(ev.turn, t);
      turnBody(ev.turn).append(t.block);
    }
    t.pre.append(ev.text || '');
  }

  function onEvent(ev) {
    if (ev.type === 'response_chunk') { typeChunk(ev); return false; }
    if (ev.seq <= lastSeq) return false;
    lastSeq = ev.seq;
    tl.add(ev);
    if (ev.type === 'model_call' && typing.has(ev.turn)) { typing.get(ev.turn).block.remove(); typing.delete(ev.turn); }
    const text = ev.content || ev.summary || '';
    timeline.append(h('li', { dataset: { type: ev.type, seq: ev.seq } },
      h('span', { class: 'seq' }, '#' + ev.seq), ' ',
      h('span', { class: 'turn-no' }, 'turn ' + ev.turn), ' ',
      h('span', { class: 'type' }, ev.type), ' ',
      h('time', { datetime: ev.ts }, new Date(ev.ts).toLocaleTimeString()), ' ',
      h('span', { class: 'what' }, text.length > 160 ? text.slice(0, 160) + '…' : text),
      ev.tokens && h('span', { class: 'meta' }, ' ' + tokens(ev.tokens))));
    const b = ev.turn > 0 && block(ev);
    if (b) turnBody(ev.turn).append(b);
    if (['started', 'done', 'budget_waiting', 'child_spawned', 'approval_requested', 'cancelled'].includes(ev.type) || ev.type === 'model_call') {
      refreshSoon();
    }
    if (ev.type === 'done') ended = true;
    return ev.type === 'done';
  }

  let timer = null;
  function refreshSoon() {
    timer ??= setTimeout(() => { timer = null; refresh(); }, 200);
  }

  replace(root, h('section', { class: 'page run' }, head,
    h('div', { class: 'run-body' },
      h('div', { class: 'main-col' }, tl.el, turns, children),
      h('aside', { class: 'side-col' }, h('h2', null, 'Events'), timeline))));

  refresh();
  const stop = follow(path + '/events', {
    onEvent,
    onState: (s) => { live.dataset.state = s; live.textContent = s; },
    onEnd: (err) => {
      live.dataset.state = 'ended'; live.textContent = 'ended';
      if (err) flash(err.message, 'error');
      refreshSoon();
    },
  });
  return () => { stop(); clearTimeout(timer); tl.stop(); };
}
