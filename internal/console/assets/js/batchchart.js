// The batch page's picture: its runs ended over time (a line rising to
// its inputs) and the rate they ended at (runs a minute, as bars), from
// GET /v1/batches/{id}/stats.

import { api } from './api.js';
import { Chart, colors, fmt, bars } from './charts.js';

export function batchChart(id) {
  const c = new Chart('batch', 'Progress and rate', {
    scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] }, rate: { range: (u, min, max) => [0, Math.max(1, max * 1.2)] } },
    axes: [{ space: 60 }, { label: 'runs ended', size: 64, values: (u, vals) => vals.map(fmt) },
      { label: 'runs a minute', side: 1, scale: 'rate', size: 56, grid: { show: false }, values: (u, vals) => vals.map(fmt) }],
    series: [{},
      { label: 'runs a minute', scale: 'rate', fill: colors.rate, stroke: colors.rate, width: 0, paths: bars(), points: { show: false } },
      { label: 'ended', stroke: colors.done, width: 2, points: { show: false } },
      { label: 'inputs', stroke: colors.slots, width: 1, dash: [4, 3], points: { show: false } }],
  });
  return {
    el: c.el,
    async load() {
      let st;
      try {
        st = await api('GET', '/v1/batches/' + encodeURIComponent(id) + '/stats');
      } catch {
        return; // the page's facts say what is wrong
      }
      const x = [], rate = [], done = [], total = [];
      let sum = st.done - st.buckets.reduce((n, b) => n + Object.values(b.ended).reduce((a, v) => a + v, 0), 0);
      const perMinute = 60 / st.bucket_seconds;
      for (const b of st.buckets) {
        const n = Object.values(b.ended).reduce((a, v) => a + v, 0);
        sum += n;
        x.push(Date.parse(b.start) / 1000);
        rate.push(n * perMinute);
        done.push(sum);
        total.push(st.total);
      }
      c.set([x, rate, done, total]);
      c.el.dataset.done = st.done;
    },
    stop() { c.destroy(); },
  };
}
