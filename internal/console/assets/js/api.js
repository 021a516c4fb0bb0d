// The API on this origin. The token lives in sessionStorage (this tab,
// until it closes) and goes out only as an Authorization header: never
// in a URL, never in a cookie.

const TOKEN = 'agentfleet.token';

export const session = {
  get token() { return sessionStorage.getItem(TOKEN); },
  keep(token) { sessionStorage.setItem(TOKEN, token); },
  signOut() { sessionStorage.removeItem(TOKEN); },
};

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// signedOut is called when the API refuses the token (401).
let onSignedOut = () => {};
export function whenSignedOut(fn) { onSignedOut = fn; }

function headers(extra, token = session.token) {
  return { Authorization: 'Bearer ' + token, ...extra };
}

async function toError(res, signedIn = true) {
  let body = null;
  try { body = await res.json(); } catch { /* not JSON */ }
  const e = body && body.error;
  const err = new APIError(res.status, e ? e.code : 'http_error', e ? e.message : res.status + ' ' + res.statusText);
  if (res.status === 401 && signedIn) onSignedOut(err);
  return err;
}

// signIn keeps token for this tab once the API accepts it; a token it
// refuses throws and is not kept.
export async function signIn(token) {
  const res = await fetch('/v1/tenants?limit=1', { headers: headers({ Accept: 'application/json' }, token), cache: 'no-store' });
  if (!res.ok) throw await toError(res, false);
  session.keep(token);
}

// api calls method path with body (sent as JSON) and returns the JSON
// answer (null for 204); an error answer throws an APIError.
export async function api(method, path, body) {
  const init = { method, headers: headers({ Accept: 'application/json' }), cache: 'no-store' };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(path, init);
  if (!res.ok) throw await toError(res);
  return res.status === 204 ? null : res.json();
}

// query builds ?a=b&... from the set values of params.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

// follow reads the Server-Sent Events at path through fetch (EventSource
// sends no Authorization header) and calls onEvent(event, id) with each
// event's parsed data. A broken stream is opened again with Last-Event-ID,
// so nothing is missed. It stops when onEvent returns true, when the
// server answers 204 or a 4xx (onEnd(error)), or when the returned
// function is called. onState('live' | 'reconnecting') reports the link.
export function follow(path, { lastId = null, onEvent, onEnd = () => {}, onState = () => {} }) {
  const ctrl = new AbortController();
  const { signal } = ctrl;
  (async () => {
    let backoff = 250;
    while (!signal.aborted) {
      try {
        const h = headers({ Accept: 'text/event-stream' });
        if (lastId !== null) h['Last-Event-ID'] = lastId;
        const res = await fetch(path, { headers: h, signal, cache: 'no-store' });
        if (res.status === 204) return onEnd(null);
        if (!res.ok) {
          const err = await toError(res);
          if (res.status < 500) return onEnd(err);
          throw err;
        }
        onState('live');
        backoff = 250;
        const stopped = await readSSE(res.body, signal, (id, type, data) => {
          if (id !== null) lastId = id;
          if (data === '') return false;
          return onEvent(JSON.parse(data), id, type) === true;
        });
        if (stopped) return onEnd(null);
      } catch (err) {
        if (signal.aborted) return;
      }
      onState('reconnecting');
      await sleep(backoff, signal);
      backoff = Math.min(2 * backoff, 5000);
    }
  })();
  return () => ctrl.abort();
}

// readSSE parses an event stream, calling block(id, type, data) for each
// block (data '' for a block with an id alone); it resolves true when
// block returned true, false when the stream ended.
async function readSSE(body, signal, block) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  signal.addEventListener('abort', () => reader.cancel().catch(() => {}), { once: true });
  let buf = '';
  let id = null, type = '', data = [], seen = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (seen && block(id, type, data.join('\n'))) {
          reader.cancel().catch(() => {});
          return true;
        }
        id = null; type = ''; data = []; seen = false;
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? '' : line.slice(colon + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'id') { id = v; seen = true; }
      else if (field === 'event') { type = v; seen = true; }
      else if (field === 'data') { data.push(v); seen = true; }
    }
  }
}
