// Charts: a thin layer over uPlot (vendor/uPlot.iife.min.js, loaded by
// index.html as a classic script before the modules: it defines
// window.uPlot). uPlot draws on a canvas and sets styles through the
// CSSOM only, so it lives within the page's Content-Security-Policy.
//
// A Chart is made at once (its element can go into the page before any
// data is read) and drawn by set(data); set again redraws it. The uPlot
// instance is the element's `uplot` property and the element's
// data-points says how many x values it holds, for the tests and for a
// curious reader of the page.

import { h } from './dom.js';

export const colors = {
  wait: '#9aa5b1', model: '#1f6fb2', waitModel: '#7fa8cf', script: '#f0a830', commit: '#6941c6',
  prompt: '#1f6fb2', completion: '#f0a830',
  completed: '#1c7c3c', failed: '#b42318', cancelled: '#6b7785', max_turns: '#a15c00',
  slots: '#5b6673', inUse: '#1f6fb2', queue: '#b42318', done: '#1c7c3c', rate: '#7fa8cf',
};

const numberFormat = new Intl.NumberFormat('en', { maximumFractionDigits: 2 });
export const fmt = (v) => (v == null ? '—' : numberFormat.format(v));

// stack turns series values into running sums, bottom first, for bars
// drawn over each other: the last series drawn is the bottom one.
export function stack(values) {
  const sums = [];
  let below = values[0].map(() => 0);
  for (const v of values) {
    below = v.map((x, i) => below[i] + (x || 0));
    sums.push(below);
  }
  return sums;
}

export class Chart {
  // kind names the chart (data-chart); opts are uPlot's options less
  // width (the element's) and data; height defaults to 220.
  constructor(kind, title, opts, note) {
    this.opts = { height: 220, ...opts };
    this.plot = h('div', { class: 'plot' });
    // Hidden until it has data: a run not started yet shows no empty box.
    this.el = h('figure', { class: 'chart', hidden: true, dataset: { chart: kind, points: 0 } },
      h('figcaption', null, title), this.plot, note && h('p', { class: 'hint' }, note));
    this.u = null;
  }

  set(data) {
    const points = data[0].length;
    this.el.hidden = false;
    if (this.u) {
      this.u.setData(data);
    } else {
      const width = Math.max(320, this.plot.clientWidth || this.el.clientWidth || 640);
      this.u = new window.uPlot({ ...this.opts, width }, data, this.plot);
      this.el.uplot = this.u;
      // Follow the page's width; a chart gone from the page lets go.
      this.resize = new ResizeObserver(() => {
        if (!this.el.isConnected) return this.destroy();
        const w = Math.max(320, this.plot.clientWidth);
        if (w !== this.u.width) this.u.setSize({ width: w, height: this.opts.height });
      });
      this.resize.observe(this.plot);
    }
    this.el.dataset.points = points;
  }

  destroy() {
    if (this.resize) this.resize.disconnect();
    if (this.u) this.u.destroy();
    this.u = null;
    this.resize = null;
  }
}

// bars is uPlot's bar path builder, made once.
let barPaths = null;
export function bars() {
  barPaths ??= window.uPlot.paths.bars({ size: [0.8, 60], gap: 0 });
  return barPaths;
}

// stackedSeries are the uPlot series of stacked bars, top first (drawn
// first, under the rest), each showing its own value in the legend.
export function stackedSeries(defs, raw) {
  return defs.map((d, i) => ({ i, d })).reverse().map(({ i, d }) => ({
    label: d.label, fill: d.color, stroke: d.color, width: 0, paths: bars(), points: { show: false },
    value: (u, v, si, idx) => (idx == null ? '—' : fmt(raw()[i][idx]) + (d.unit || '')),
  }));
}

// stackedData is x then the sums of defs' values, top first.
export function stackedData(x, values) {
  return [x, ...stack(values).reverse()];
}
