// The SSE iterator against a small local HTTP server that speaks the
// dispatcher's event stream: response_chunk events without ids, and a
// connection dropped midway through a message.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { ApiError, Client, readSSE, type RunEvent } from "../src/index.js";

type Handler = (req: IncomingMessage, res: ServerResponse, n: number) => void;

async function serve(handler: Handler): Promise<{ url: string; requests: IncomingMessage[]; close: () => Promise<void> }> {
  const requests: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    requests.push(req);
    handler(req, res, requests.length);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

const base = { v: 1, run_id: "r1", tenant: "t1", turn: 1, ts: "2026-12-04T18:00:00Z" };

function stored(seq: number, type: string, extra: object = {}): string {
  return `id: ${seq}\nevent: ${type}\ndata: ${JSON.stringify({ ...base, seq, type, ...extra })}\n\n`;
}

function chunk(index: number, text: string): string {
  return `event: response_chunk\ndata: ${JSON.stringify({ ...base, seq: 0, type: "response_chunk", index, text })}\n\n`;
}

function startSSE(res: ServerResponse): void {
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
}

test("events yields chunks and resumes after a dropped connection with the last stored id", async (t) => {
  const srv = await serve((req, res, n) => {
    startSSE(res);
    if (n === 1) {
      res.write(stored(1, "queued") + stored(2, "started"));
      res.write(": keep-alive\n\n");
      res.write(chunk(0, "Let me ") + chunk(1, "count"));
      // A chunk after the last stored event, then half a message, then
      // the connection drops: the resume point must stay at 2.
      res.write(chunk(2, " the primes."));
      res.write(`id: 3\nevent: response\ndata: {"v":1,`);
      setTimeout(() => res.socket?.destroy(), 20);
      return;
    }
    // The resumed stream replays stored events only; a repeat of 2
    // (which a server may send) must be dropped.
    res.write(stored(2, "started") + stored(3, "response", { content: "Let me count the primes." }));
    res.write(chunk(0, "Done"));
    res.end(stored(4, "done", { summary: "completed" }));
  });
  t.after(srv.close);
  const c = new Client({ baseUrl: srv.url, token: "af_test" });
  const got: RunEvent[] = [];
  for await (const ev of c.runs.events("r1", { maxRetries: 3 })) got.push(ev);

  assert.deepEqual(got.map((e) => [e.type, e.seq]), [
    ["queued", 1], ["started", 2],
    ["response_chunk", 0], ["response_chunk", 0], ["response_chunk", 0],
    ["response", 3], ["response_chunk", 0], ["done", 4],
  ]);
  assert.equal(got.filter((e) => e.type === "response_chunk").slice(0, 3).map((e) => e.text).join(""), "Let me count the primes.");
  assert.deepEqual(got.filter((e) => e.type === "response_chunk").map((e) => e.index), [0, 1, 2, 0]);
  assert.equal(srv.requests.length, 2);
  assert.equal(srv.requests[0]!.headers["last-event-id"], undefined);
  assert.equal(srv.requests[1]!.headers["last-event-id"], "2", "resumed after the last stored event, not a chunk");
  for (const r of srv.requests) {
    assert.equal(r.url, "/v1/runs/r1/events");
    assert.equal(r.headers.authorization, "Bearer af_test");
    assert.equal(r.headers.accept, "text/event-stream");
  }
});

test("events starts after lastEventId and ends on 204", async (t) => {
  const srv = await serve((req, res) => {
    if (req.headers["last-event-id"] === "4") {
      res.writeHead(204).end();
      return;
    }
    startSSE(res);
    res.end(stored(3, "response") + stored(4, "done"));
  });
  t.after(srv.close);
  const c = new Client({ baseUrl: srv.url });
  const got: RunEvent[] = [];
  for await (const ev of c.runs.events("r1", { lastEventId: 2 })) got.push(ev);
  assert.deepEqual(got.map((e) => e.seq), [3, 4]);
  assert.equal(srv.requests[0]!.headers["last-event-id"], "2");

  const none: RunEvent[] = [];
  for await (const ev of c.runs.events("r1", { lastEventId: "4" })) none.push(ev);
  assert.deepEqual(none, []);
});

test("events retries a 5xx and throws a 4xx as an ApiError with the API's body", async (t) => {
  const srv = await serve((req, res, n) => {
    if (req.url?.startsWith("/v1/runs/gone/")) {
      res.writeHead(404, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ error: { code: "not_found", message: "run gone not found" } }));
      return;
    }
    if (n === 1) {
      res.writeHead(503, { "Content-Type": "application/json", "Retry-After": "1" });
      res.end(JSON.stringify({ error: { code: "unavailable", message: "NATS cannot be reached" } }));
      return;
    }
    startSSE(res);
    res.end(stored(1, "done"));
  });
  t.after(srv.close);
  const c = new Client({ baseUrl: srv.url });
  const got: RunEvent[] = [];
  for await (const ev of c.runs.events("r1")) got.push(ev);
  assert.deepEqual(got.map((e) => e.type), ["done"]);
  assert.equal(srv.requests.length, 2);

  await assert.rejects(async () => {
    for await (const _ of c.runs.events("gone")) assert.fail("no event expected");
  }, (err: unknown) => {
    assert.ok(err instanceof ApiError);
    assert.equal(err.status, 404);
    assert.equal(err.code, "not_found");
    assert.deepEqual(err.body, { error: { code: "not_found", message: "run gone not found" } });
    return true;
  });
});

test("events gives up after maxRetries connections that bring nothing", async (t) => {
  const srv = await serve((_req, res) => {
    startSSE(res);
    res.end(stored(1, "queued"));
  });
  t.after(srv.close);
  const c = new Client({ baseUrl: srv.url });
  const got: RunEvent[] = [];
  await assert.rejects(async () => {
    for await (const ev of c.runs.events("r1", { maxRetries: 2 })) got.push(ev);
  }, /ended before the run's done event \(after event 1\)/);
  assert.deepEqual(got.map((e) => e.seq), [1], "the repeats of event 1 are dropped");
  assert.equal(srv.requests.length, 3);
  assert.deepEqual(srv.requests.map((r) => r.headers["last-event-id"]), [undefined, "1", "1"]);
});

test("breaking out of events closes the stream and an abort stops it", async (t) => {
  let closed = 0;
  const srv = await serve((_req, res) => {
    startSSE(res);
    res.write(stored(1, "queued"));
    res.on("close", () => closed++);
    // never ends
  });
  t.after(srv.close);
  const c = new Client({ baseUrl: srv.url });
  for await (const ev of c.runs.events("r1")) {
    assert.equal(ev.seq, 1);
    break;
  }
  const ac = new AbortController();
  const it = c.runs.events("r1", { signal: ac.signal });
  assert.equal((await it.next()).value?.seq, 1);
  ac.abort(new Error("stop"));
  await assert.rejects(it.next(), /stop/);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(closed, 2, "both connections closed");
});

test("readSSE parses CRLF and CR line ends, multi-line data and lines split across reads", async () => {
  const parts = ["id: 7\r", "\nevent: log\r\ndata: a\r\ndata: b\r\n\r\n:", " comment\r\rdata:x\n", "\nid: 8\ndata: {\"cut", ""];
  const body = new ReadableStream<Uint8Array>({
    start(ctrl) {
      const enc = new TextEncoder();
      for (const p of parts) ctrl.enqueue(enc.encode(p));
      ctrl.close();
    },
  });
  const got = [];
  for await (const m of readSSE(body)) got.push(m);
  assert.deepEqual(got, [
    { id: "7", event: "log", data: "a\nb" },
    { id: undefined, event: "message", data: "x" },
  ], "the message cut off by the end of the stream is dropped");
});

test("a dispatcher that cannot be reached is an error naming the call and the cause", async () => {
  const srv = await serve(() => {});
  const url = srv.url;
  await srv.close(); // nothing listens there now
  const c = new Client({ baseUrl: url });
  await assert.rejects(c.runs.get("r1"), (err: unknown) => {
    assert.ok(!(err instanceof ApiError));
    assert.match((err as Error).message, new RegExp(`^GET ${url}/v1/runs/r1: fetch failed: .*ECONNREFUSED`));
    return true;
  });
  await assert.rejects(async () => {
    for await (const _ of c.runs.events("r1", { maxRetries: 1 })) assert.fail("no event expected");
  }, /ECONNREFUSED/);
});
