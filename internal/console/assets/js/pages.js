// The console's pages. A page has a title, the route its tab in the
// navigation opens (none for pages reached by a link), match(path), which
// returns its arguments or null, and render(root, args, params), which
// draws it and returns what stops it (its streams and timers).
//

import { runsPage } from './runs.js';
import { runPage } from './run.js';
import { tenantsPage } from './tenants.js';
import { triggersPage, triggerPage } from './triggers.js';
import { batchesPage, batchPage } from './batches.js';
import { approvalsPage } from './approvals.js';
import { secretsPage } from './secrets.js';
import { sessionsPage, sessionPage } from './sessions.js';
import { usagePage } from './usage.js';

export const pages = [
  { title: 'Runs', nav: '/runs', match: (p) => (p === '/runs' ? [] : null), render: (root, _, params) => runsPage(root, params) },
  {
    title: 'Run', nav: null,
    match: (p) => { const m = /^\/runs\/([^/]+)$/.exec(p); return m ? [decodeURIComponent(m[1])] : null; },
    render: (root, [id]) => runPage(root, id),
  },
  { title: 'Sessions', nav: '/sessions', match: (p) => (p === '/sessions' ? [] : null), render: (root, _, params) => sessionsPage(root, params) },
  {
    title: 'Session', nav: null,
    match: (p) => { const m = /^\/sessions\/([^/]+)$/.exec(p); return m ? [decodeURIComponent(m[1])] : null; },
    render: (root, [id], params) => sessionPage(root, id, params),
  },
  { title: 'Triggers', nav: '/triggers', match: (p) => (p === '/triggers' ? [] : null), render: (root) => triggersPage(root) },
  {
    title: 'Trigger', nav: null,
    match: (p) => { const m = /^\/triggers\/([^/]+)$/.exec(p); return m ? [decodeURIComponent(m[1])] : null; },
    render: (root, [id]) => triggerPage(root, id),
  },
  { title: 'Batches', nav: '/batches', match: (p) => (p === '/batches' ? [] : null), render: (root) => batchesPage(root) },
  {
    title: 'Batch', nav: null,
    match: (p) => { const m = /^\/batches\/([^/]+)$/.exec(p); return m ? [decodeURIComponent(m[1])] : null; },
    render: (root, [id]) => batchPage(root, id),
  },
  { title: 'Approvals', nav: '/approvals', match: (p) => (p === '/approvals' ? [] : null), render: (root) => approvalsPage(root) },
  { title: 'Secrets', nav: '/secrets', match: (p) => (p === '/secrets' ? [] : null), render: (root, _, params) => secretsPage(root, params) },
  { title: 'Usage', nav: '/usage', match: (p) => (p === '/usage' ? [] : null), render: (root, _, params) => usagePage(root, params) },
  { title: 'Tenants', nav: '/tenants', match: (p) => (p === '/tenants' ? [] : null), render: (root) => tenantsPage(root) },
];
