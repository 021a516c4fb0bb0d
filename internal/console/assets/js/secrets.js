// The secrets page: a tenant's named credentials, by name, with the
// hosts that get them, the header they go in, their version and when
// they changed. The API never answers a value, so none is shown. A
// tenant's key lists its own; the admin token names a tenant
// (#/secrets?tenant=ID), and is asked for one when it has not.

import { api, query } from './api.js';
import { h, replace, when, ago, flash } from './dom.js';
import { pager, table, tenantForm } from './triggers.js';

const POLL_MS = 10000;


export function secretsPage(root, params) {
  const tenant = params.get('tenant') || '';
  const path = '/v1/secrets' + query({ tenant });
  const tbody = h('tbody');
  const list = pager(path, 'secrets', tbody, (s) => s.name, (s) => [
    h('td', null, h('code', null, s.name)),
    h('td', null, s.hosts.join(', ')),
    h('td', null, s.header + ': ', h('code', null, s.format)),
    h('td', null, s.expose ? 'readable by scripts' : 'sent only'),
    h('td', null, String(s.version)),
    h('td', { class: 'id' }, s.key_id),
    h('td', { title: when(s.updated) }, ago(s.updated)),
  ], (s) => (s.expose ? 'exposed' : 'sealed'));
  let poll = null;
  let stopped = false;
  api('GET', path + (path.includes('?') ? '&' : '?') + 'limit=1').then(() => {
    if (stopped) return;
    replace(root, h('section', { class: 'page secrets' },
      h('h1', null, tenant ? 'Secrets of ' + tenant : 'Secrets'),
      h('p', { class: 'hint' }, 'Values are sealed at rest and never shown: set them with agentctl secrets set.'),
      table(['Name', 'Hosts', 'Header', 'Scripts', 'Version', 'Key', 'Updated'], tbody), list.more));
    list.load(null);
    poll = setInterval(list.refresh, POLL_MS);
  }).catch((err) => {
    if (stopped) return;
    if (err.status === 422 || err.status === 404) tenantForm(root, 'secrets', 'Secrets', err.message);
    else flash(err.message, 'error');
  });
  return () => { stopped = true; clearInterval(poll); };
}
