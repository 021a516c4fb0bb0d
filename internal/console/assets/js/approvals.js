// Approvals: the calls that wait for a person's yes. The approvals page
// lists the pending ones (a tenant key its tenant's, the admin token
// every tenant's) with Approve and Deny, and keeps itself current from
// the event stream (a new request appears, a decision made elsewhere
// shows); the run page shows the same buttons on a pending
// approval_requested event (approvalActions).

import { api, follow, query } from './api.js';
import { h, replace, link, when, ago, flash } from './dom.js';
import { pager, table } from './triggers.js';

const POLL_MS = 5000;

// decisionButtons are a reason field and Approve and Deny for approval
// id; done(approval) is called with the approval once decided.
function decisionButtons(id, done) {
  const reason = h('input', { type: 'text', name: 'reason', placeholder: 'reason (optional)', 'aria-label': 'Reason for approval ' + id });
  const decide = (verdict) => async () => {
    try {
      const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
      const got = await api('POST', '/v1/approvals/' + encodeURIComponent(id) + '/' + verdict, body);
      flash('Approval ' + got.id + ' ' + got.status + '; run ' + got.run_id + ' goes on');
      done(got);
    } catch (err) {
      flash(err.message, 'error');
    }
  };
  return h('span', { class: 'decide', dataset: { approval: id } }, reason,
    h('button', { type: 'button', class: 'approve', 'aria-label': 'Approve ' + id, onclick: decide('approve') }, 'Approve'),
    h('button', { type: 'button', class: 'deny', 'aria-label': 'Deny ' + id, onclick: decide('deny') }, 'Deny'));
}

function describe(a) {
  return a.url ? a.primitive + ' ' + a.method + ' ' + a.url : a.primitive;
}

export function approvalsPage(root) {
  const tbody = h('tbody');
  const list = pager('/v1/approvals' + query({ status: 'pending' }), 'approvals', tbody, (a) => a.id, (a) => [
    h('td', null, a.tenant),
    h('td', { class: 'id' }, link('/runs/' + encodeURIComponent(a.run_id), a.run_id)),
    h('td', null, String(a.turn)),
    h('td', { class: 'message' }, h('code', null, describe(a))),
    h('td', { class: 'message' }, h('pre', { class: 'text preview' }, a.preview || '')),
    h('td', { title: when(a.created_at) }, ago(a.created_at)),
    a.status === 'pending'
      ? h('td', { title: 'expires ' + when(a.expires_at) }, decisionButtons(a.id, (got) => list.put(got)))
      : h('td', null, h('span', { class: 'status approval-' + a.status }, a.status + (a.decided_by ? ' by ' + a.decided_by : ''))),
  ], (a) => a.status);
  replace(root, h('section', { class: 'page approvals' },
    h('h1', null, 'Pending approvals'),
    h('p', { class: 'hint' }, 'Each run below waits, holding no worker, at a call its agent says needs a yes. Approved, the turn runs again and the call goes out; denied, the call throws the reason to the script.'),
    table(['Tenant', 'Run', 'Turn', 'Call', 'Preview', 'Asked', ''], tbody), list.more));
  list.load(null);
  const poll = setInterval(list.refresh, POLL_MS);
  const stop = follow('/v1/events', {
    onEvent: (ev) => {
      if (ev.type === 'approval_requested') list.refresh();
      if ((ev.type === 'approved' || ev.type === 'denied') && ev.args && ev.args.approval_id) {
        api('GET', '/v1/approvals/' + encodeURIComponent(ev.args.approval_id)).then((a) => list.put(a), () => {});
      }
      return false;
    },
  });
  return () => { clearInterval(poll); stop(); };
}

// approvalActions is the run page's part of an approval's events: the
// buttons on a request, which its decision takes away again.
export function approvalActions(ev, run) {
  const id = ev.args && ev.args.approval_id;
  if (!id) return null;
  if (ev.type !== 'approval_requested') {
    document.querySelectorAll(`.decide[data-approval="${CSS.escape(id)}"]`).forEach((el) => el.remove());
    return null;
  }
  if (run && run.status && run.status !== 'waiting_approval' && run.status !== 'running') return null;
  const buttons = decisionButtons(id, () => buttons.remove());
  return buttons;
}
