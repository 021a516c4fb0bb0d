// The run page's timeline: each turn as a stacked bar of seconds spent
// waiting in the queue, in the model call, in the script and in the
// commit, from the timestamps of the run's stored events.
//
// What the events mark, and so what the bars can say:
//   turn 1: queued (the submission) -> started (picked up) -> model_call
//     (the reply) -> execute_js ... execute_js_result (the script) -> the
//     turn's last event; its commit follows, unmarked.
//   later turns: the turn's model_call says when the worker began the
//     turn (args.turn_started): the queue wait is from the previous
//     turn's last event (so it holds that turn's commit too, and any wait
//     for budget, approval or children) to then. Runs recorded before
//     model_call carried it show one bar, "queue + model call".
//   the last turn of an ended run: its commit is the run's last update
//     (updated_at) less the turn's last event.

import { Chart, colors, fmt, stackedSeries, stackedData } from './charts.js';

const PHASES = [
  { key: 'wait', label: 'queue wait', color: colors.wait, unit: ' s' },
  { key: 'model', label: 'model call', color: colors.model, unit: ' s' },
  { key: 'waitModel', label: 'queue + model call', color: colors.waitModel, unit: ' s' },
  { key: 'script', label: 'script', color: colors.script, unit: ' s' },
  { key: 'commit', label: 'commit', color: colors.commit, unit: ' s' },
];

const secs = (a, b) => (a == null || b == null ? null : Math.max(0, (b - a) / 1000));

// phases turns the events (any order) into one row of PHASES per turn.
export function phases(events, run) {
  const turns = new Map();
  let queued = null;
  for (const ev of events) {
    const ts = Date.parse(ev.ts);
    if (isNaN(ts)) continue;
    if (ev.type === 'queued' && queued == null) queued = ts;
    if (ev.turn < 1) continue;
    let t = turns.get(ev.turn);
    if (!t) turns.set(ev.turn, (t = { first: ts, last: ts }));
    t.first = Math.min(t.first, ts);
    t.last = Math.max(t.last, ts);
    if (ev.type === 'started') t.started ??= ts;
    // The turn's own call: a model_call with the reply, before the
    // script (ai() calls from the script come after execute_js).
    if (ev.type === 'model_call' && ev.content && t.scriptStart == null) {
      t.reply ??= ts;
      const began = ev.args && Date.parse(ev.args.turn_started);
      if (began && !isNaN(began)) t.began ??= began;
    }
    if (ev.type === 'execute_js') t.scriptStart ??= ts;
    if (ev.type === 'execute_js_result') t.scriptEnd = ts;
  }
  const ns = [...turns.keys()].sort((a, b) => a - b);
  const ended = run && ['completed', 'failed', 'cancelled', 'max_turns'].includes(run.status);
  return ns.map((n, i) => {
    const t = turns.get(n);
    const prev = i > 0 && ns[i - 1] === n - 1 ? turns.get(n - 1) : null;
    const ready = n === 1 ? (queued ?? (run ? Date.parse(run.created_at) : null)) : (prev ? prev.last : null);
    const reply = t.reply ?? t.scriptStart ?? t.last;
    const row = { turn: n, wait: null, model: null, waitModel: null, script: null, commit: null };
    const began = t.started ?? t.began;
    if (began != null) {
      row.wait = secs(ready, began);
      row.model = secs(began, reply);
    } else {
      row.waitModel = secs(ready ?? t.first, reply);
    }
    if (t.scriptStart != null) row.script = secs(t.scriptStart, t.scriptEnd ?? t.last);
    if (ended && i === ns.length - 1 && run.updated_at) row.commit = secs(t.last, Date.parse(run.updated_at));
    return row;
  });
}

export function runTimeline() {
  const events = [];
  let run = null;
  let rows = [];
  let timer = null;
  const chart = new Chart('timeline', 'Where each turn spent its time', {
    scales: { x: { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] }, y: { range: (u, min, max) => [0, Math.max(0.001, max * 1.1)] } },
    axes: [
      { label: 'turn', incrs: [1, 2, 5, 10, 20, 50, 100], values: (u, vals) => vals.map((v) => (Number.isInteger(v) ? String(v) : '')) },
      { label: 'seconds', size: 56, values: (u, vals) => vals.map(fmt) },
    ],
    legend: { live: true },
    series: [{ label: 'turn', value: (u, v) => (v == null ? '—' : 'turn ' + v) }, ...stackedSeries(PHASES, () => rawValues())],
  }, "Each turn: its queue wait (from the previous turn's last event, so with that turn's commit), its model call, its script; the last turn's commit.");

  const rawValues = () => PHASES.map((p) => rows.map((r) => r[p.key]));

  function draw() {
    timer = null;
    rows = phases(events, run);
    if (rows.length === 0) return;
    chart.set(stackedData(rows.map((r) => r.turn), rawValues()));
    chart.el.dataset.turns = rows.length;
  }
  const soon = () => { timer ??= setTimeout(draw, 100); };

  return {
    el: chart.el,
    add(ev) { events.push(ev); soon(); },
    update(r) { run = r; soon(); },
    stop() { clearTimeout(timer); chart.destroy(); },
  };
}
