// The usage page: a tenant's tokens per hour over the last 7 days and
// its runs by outcome per hour (GET /v1/tenants/{id}/stats; the admin
// picks the tenant, a key sees its own), and for the admin the fleet's
// worker slots, slots in use and queue depth over the last hour, as the
// dispatcher sampled them (GET /v1/fleet/stats). Read again every 10 s.

import { api, query } from './api.js';
import { h, replace, num, flash } from './dom.js';
import { Chart, colors, fmt, stackedSeries, stackedData } from './charts.js';

const POLL_MS = 10000;
const OUTCOMES = ['completed', 'failed', 'cancelled', 'max_turns'];

const timeAxis = { space: 60 };

function tokensChart() {
  let raw = [[], []];
  const defs = [
    { label: 'prompt tokens', color: colors.prompt },
    { label: 'completion tokens', color: colors.completion },
  ];
  const c = new Chart('tokens', 'Tokens per hour, last 7 days', {
    scales: { y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
    axes: [timeAxis, { label: 'tokens', size: 64, values: (u, vals) => vals.map(fmt) }],
    series: [{}, ...stackedSeries(defs, () => raw)],
  });
  c.show = (st) => {
    const x = st.buckets.map((b) => Date.parse(b.start) / 1000);
    raw = [st.buckets.map((b) => b.prompt_tokens), st.buckets.map((b) => b.completion_tokens)];
    c.set(stackedData(x, raw));
  };
  return c;
}

function outcomesChart() {
  let raw = OUTCOMES.map(() => []);
  const defs = OUTCOMES.map((o) => ({ label: o.replace('_', ' '), color: colors[o] }));
  const c = new Chart('outcomes', 'Runs ended per hour, by outcome', {
    scales: { y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
    axes: [timeAxis, { label: 'runs', size: 56, values: (u, vals) => vals.map(fmt) }],
    series: [{}, ...stackedSeries(defs, () => raw)],
  });
  c.show = (st) => {
    const x = st.buckets.map((b) => Date.parse(b.start) / 1000);
    raw = OUTCOMES.map((o) => st.buckets.map((b) => b.ended[o] || 0));
    c.set(stackedData(x, raw));
  };
  return c;
}

function fleetChart() {
  const c = new Chart('fleet', 'The fleet, last hour', {
    scales: { y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] }, q: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
    axes: [timeAxis, { label: 'slots', size: 48 }, { label: 'queued turns', side: 1, scale: 'q', size: 56, grid: { show: false } }],
    series: [{},
      { label: 'slots', stroke: colors.slots, width: 1.5, dash: [4, 3] },
      { label: 'slots in use', stroke: colors.inUse, fill: colors.inUse + '33', width: 2 },
      { label: 'queue depth', stroke: colors.queue, width: 2, scale: 'q' }],
  }, 'Sampled by this dispatcher every few seconds: the slots the workers announce, the turns they run, and the turns waiting (AF_RUNQ, AF_SPILL and undelivered in AF_WORK).');
  c.show = (fs) => {
    const s = fs.samples;
    c.set([s.map((x) => Date.parse(x.at) / 1000), s.map((x) => x.slots), s.map((x) => x.slots_in_use), s.map((x) => x.queue_depth)]);
  };
  return c;
}

export function usagePage(root, params) {
  const select = h('select', { name: 'tenant', 'aria-label': 'Tenant' });
  const totals = h('p', { class: 'totals' });
  const tokens = tokensChart();
  const outcomes = outcomesChart();
  const fleet = fleetChart();
  const fleetSection = h('section', { class: 'fleet-stats', hidden: true }, fleet.el);
  let tenant = params.get('tenant') || '';

  async function loadTenants() {
    try {
      const page = await api('GET', '/v1/tenants' + query({ limit: 100 }));
      const ids = page.tenants.map((t) => t.id);
      if (tenant && !ids.includes(tenant)) ids.unshift(tenant);
      tenant ||= ids[0] || '';
      replace(select, ids.map((id) => h('option', { value: id, selected: id === tenant }, id)));
      select.hidden = ids.length < 2;
    } catch (err) {
      flash(err.message, 'error');
    }
  }

  async function loadTenant() {
    if (!tenant) return;
    try {
      const st = await api('GET', '/v1/tenants/' + encodeURIComponent(tenant) + '/stats');
      tokens.show(st);
      outcomes.show(st);
      const sum = (f) => st.buckets.reduce((n, b) => n + f(b), 0);
      const used = sum((b) => b.prompt_tokens + b.completion_tokens);
      const ended = sum((b) => OUTCOMES.reduce((n, o) => n + (b.ended[o] || 0), 0));
      replace(totals, h('strong', null, num(used)), ' tokens and ', h('strong', null, num(ended)), ' runs ended in the last 7 days (', tenant, ')');
    } catch (err) {
      flash(err.message, 'error');
    }
  }

  let fleetRefused = false;
  async function loadFleet() {
    if (fleetRefused) return;
    try {
      fleet.show(await api('GET', '/v1/fleet/stats'));
      fleetSection.hidden = false;
    } catch (err) {
      // A tenant's key may not see the fleet: the section stays hidden.
      if (err.status === 403) fleetRefused = true;
      else flash(err.message, 'error');
    }
  }

  select.addEventListener('change', () => {
    tenant = select.value;
    history.replaceState(null, '', '#/usage' + query({ tenant }));
    loadTenant();
  });
  replace(root, h('section', { class: 'page usage' },
    h('h1', null, 'Usage ', select),
    totals,
    h('div', { class: 'charts' }, tokens.el, outcomes.el),
    fleetSection));
  loadTenants().then(loadTenant);
  loadFleet();
  const poll = setInterval(() => { loadTenant(); loadFleet(); }, POLL_MS);
  return () => { clearInterval(poll); tokens.destroy(); outcomes.destroy(); fleet.destroy(); };
}
