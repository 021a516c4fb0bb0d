// Server-Sent Events: the parser of one stream, and a run's event stream
// followed across dropped connections with Last-Event-ID.
import { ApiError } from "./errors.js";
import type { RunEvent } from "./types.js";

/** One message of an event stream. `id` is undefined when it had no id: line. */
export interface SSEMessage {
  id: string | undefined;
  event: string;
  data: string;
}

/**
 * Reads an event stream as the HTML standard parses one: lines end with
 * LF, CRLF or CR; `:` lines are comments (keep-alives); a blank line ends
 * a message. A message cut off by the end of the stream is dropped, as
 * its end never came. The reader is released (and the stream cancelled)
 * when the caller stops early.
 */
export async function* readSSE(body: ReadableStream<Uint8Array>): AsyncGenerator<SSEMessage, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  let seen = false;
  const line = (l: string): SSEMessage | undefined => {
    if (l === "") {
      if (!seen) return undefined;
      const msg: SSEMessage = { id, event: event || "message", data: data.join("\n") };
      id = undefined;
      event = "";
      data = [];
      seen = false;
      return msg;
    }
    if (l.startsWith(":")) return undefined;
    const colon = l.indexOf(":");
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? "" : l.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "data":
        data.push(value);
        seen = true;
        break;
      case "id":
        if (!value.includes("\0")) id = value;
        seen = true;
        break;
      case "event":
        event = value;
        seen = true;
        break;
    }
    return undefined;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buf += done ? decoder.decode() : decoder.decode(value, { stream: true });
      // Split off every complete line; a CR at the very end may be the
      // first half of a CRLF, so it waits for the next read.
      let start = 0;
      for (let i = 0; i < buf.length; i++) {
        const c = buf.charCodeAt(i);
        if (c !== 10 && c !== 13) continue;
        if (c === 13 && i === buf.length - 1 && !done) break;
        const msg = line(buf.slice(start, i));
        if (c === 13 && buf.charCodeAt(i + 1) === 10) i++;
        start = i + 1;
        if (msg) yield msg;
      }
      buf = buf.slice(start);
      if (done) return;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** How runs.events() follows a run. */
export interface EventsOptions {
  /**
   * Resume after this event: the seq (the SSE id) of the last event
   * already seen; 0 or absent starts from the run's first event.
   */
  lastEventId?: number | string;
  /** Stops the stream; the iterator then throws the signal's reason. */
  signal?: AbortSignal;
  /**
   * How many connections in a row may fail (a network error, a 5xx, a
   * stream that ends before the run's done event) without bringing a new
   * stored event before the iterator gives up and throws the last error.
   * Default: no limit, as the Go client; stop it with `signal`.
   */
  maxRetries?: number;
}

/** Opens one connection of a run's event stream, resuming after lastId ("" from the start). */
export type OpenStream = (lastId: string, signal: AbortSignal) => Promise<Response>;

/** An event whose data is not JSON: the server's fault, not the connection's, so it is not retried. */
export class EventDecodeError extends Error {
  override readonly name = "EventDecodeError";
}

const backoffMin = 100;
const backoffMax = 5000;

/**
 * Follows a run's event stream to its done event, yielding every event:
 * stored events (with an id:, their seq) once each and in order, and
 * response_chunk events (no id:) as they come. A connection that drops is
 * opened again with Last-Event-ID set to the last stored event's id, so
 * nothing stored is lost or repeated; a chunk never moves that point,
 * since chunks are not stored and a resumed stream replays none. It ends
 * after done, or at once on 204 (resumed at or past a finished run's
 * done); an API refusal (4xx) is thrown as an ApiError, a 5xx or network
 * failure is retried with backoff (100 ms doubling to 5 s).
 */
export async function* followRunEvents(open: OpenStream, opts: EventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
  let last = opts.lastEventId !== undefined && opts.lastEventId !== 0 ? String(opts.lastEventId) : "";
  let lastSeq = last === "" ? 0 : Number(last);
  if (!Number.isSafeInteger(lastSeq) || lastSeq < 0) {
    throw new TypeError(`lastEventId ${JSON.stringify(opts.lastEventId)} is not an event seq: give the seq of the last event received (0 for all)`);
  }
  const maxRetries = opts.maxRetries ?? Infinity;
  const signal = opts.signal;
  let failures = 0;
  let backoff = backoffMin;
  for (;;) {
    signal?.throwIfAborted();
    const conn = new AbortController();
    const onAbort = () => conn.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    let progress = false;
    let failure: unknown;
    try {
      const res = await open(last, conn.signal);
      if (res.status === 204) {
        await res.body?.cancel();
        return;
      }
      if (res.status >= 400) {
        const err = await ApiError.fromResponse(res);
        if (err.status < 500) throw err;
        failure = err;
      } else if (!res.body) {
        failure = new Error(`GET events: ${res.status} answer without a body`);
      } else {
        for await (const msg of readSSE(res.body)) {
          if (msg.data === "") continue; // an id: alone marks a position, no event
          let ev: RunEvent;
          try {
            ev = JSON.parse(msg.data) as RunEvent;
          } catch (err) {
            throw new EventDecodeError(`decode event ${JSON.stringify(msg.data.slice(0, 200))}: ${(err as Error).message}`);
          }
          if (msg.id !== undefined && msg.id !== "") {
            const seq = Number(msg.id);
            if (Number.isFinite(seq) && seq <= lastSeq) continue; // a repeat after a resume
            last = msg.id;
            lastSeq = seq;
            progress = true;
          }
          yield ev;
          if (ev.type === "done" && msg.id !== undefined) return;
        }
        failure = new Error(`the event stream ended before the run's done event (after event ${last || 0})`);
      }
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      if (err instanceof ApiError && err.status < 500) throw err;
      if (err instanceof EventDecodeError) throw err;
      failure = err;
    } finally {
      signal?.removeEventListener("abort", onAbort);
      conn.abort();
    }
    if (progress) {
      failures = 0;
      backoff = backoffMin;
    }
    if (++failures > maxRetries) throw failure;
    await sleep(backoff, signal);
    backoff = Math.min(2 * backoff, backoffMax);
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
