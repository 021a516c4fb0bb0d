// A small JavaScript highlighter: it splits code into tokens and returns
// them as text in classed spans (tok-kw, tok-str, tok-num, tok-com,
// tok-fn, tok-prim). The code is never parsed as HTML.

import { h } from './dom.js';

const KEYWORDS = new Set(('break case catch class const continue debugger default delete do else export extends ' +
  'false finally for function if import in instanceof let new null of return static super switch this throw true ' +
  'try typeof undefined var void while with yield async await').split(' '));

// The primitives the sandbox gives scripts (internal/sandbox).
const PRIMITIVES = new Set(['answer', 'log', 'fetch', 'http', 'ai', 'spawn', 'wait']);

const TOKEN = new RegExp([
  /(?<com>\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$))/.source,
  /(?<str>"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?|`(?:[^`\\]|\\[\s\S])*`?)/.source,
  /(?<num>\b(?:0[xob][\da-f_]+|\d[\d_]*(?:\.\d*)?(?:e[+-]?\d+)?n?)\b)/.source,
  /(?<word>[A-Za-z_$][\w$]*)/.source,
].join('|'), 'gi');

// highlight returns the nodes of code, highlighted.
export function highlight(code) {
  const out = document.createDocumentFragment();
  let at = 0;
  for (const m of code.matchAll(TOKEN)) {
    if (m.index > at) out.append(code.slice(at, m.index));
    const g = m.groups;
    let cls = null;
    if (g.com !== undefined) cls = 'tok-com';
    else if (g.str !== undefined) cls = 'tok-str';
    else if (g.num !== undefined) cls = 'tok-num';
    else if (KEYWORDS.has(g.word)) cls = 'tok-kw';
    else if (/^\s*\(/.test(code.slice(m.index + m[0].length))) cls = PRIMITIVES.has(g.word) ? 'tok-prim' : 'tok-fn';
    out.append(cls ? h('span', { class: cls }, m[0]) : m[0]);
    at = m.index + m[0].length;
  }
  if (at < code.length) out.append(code.slice(at));
  return out;
}

// reply renders a model's reply: its prose as text, its fenced code
// blocks highlighted (JavaScript; other languages as plain text).
export function reply(content) {
  const out = h('div', { class: 'reply' });
  const fence = /```([\w+-]*)[^\n]*\n([\s\S]*?)(?:\n?```|$)/g;
  let at = 0;
  for (const m of content.matchAll(fence)) {
    prose(out, content.slice(at, m.index));
    const lang = (m[1] || 'javascript').toLowerCase();
    const js = ['javascript', 'js', 'ts', 'typescript'].includes(lang);
    out.append(h('pre', { class: 'code', dataset: { lang } }, h('code', null, js ? highlight(m[2]) : m[2])));
    at = m.index + m[0].length;
  }
  prose(out, content.slice(at));
  return out;
}

function prose(out, text) {
  text = text.trim();
  if (text) out.append(h('p', { class: 'prose' }, text));
}
