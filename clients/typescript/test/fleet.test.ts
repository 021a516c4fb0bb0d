// The client against a real fleet: `agentctl dev` with the offline demo
// model (test/dev-fleet.ts), started once for this file.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer, request as httpRequest, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { ApiError, Client, isNotFound, type RunEvent } from "../src/index.js";
import { startDevFleet, type DevFleet } from "./dev-fleet.js";

let fleet: DevFleet;
let af: Client;

before(async () => {
  fleet = await startDevFleet();
  af = new Client({ baseUrl: fleet.url, token: fleet.tenantKey });
});

after(async () => {
  await fleet?.stop();
});

async function collect(it: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
  const out: RunEvent[] = [];
  for await (const ev of it) out.push(ev);
  return out;
}

/** The stored events of a stream: every event but the chunks. */
const storedOf = (evs: RunEvent[]) => evs.filter((e) => e.type !== "response_chunk");

/** A tenant whose budget of one token parks every run in waiting_budget. */
async function parkedTenant(): Promise<Client> {
  const admin = new Client({ baseUrl: fleet.url, token: fleet.adminToken });
  const res = await admin.raw("POST", "/v1/tenants", {
    body: { id: `parked-${randomUUID().slice(0, 8)}`, budget: { tokens: 1, window: "day" }, exhausted: "queue" },
  });
  const { api_key } = (await res.json()) as { api_key: string };
  return new Client({ baseUrl: fleet.url, token: api_key });
}

async function until<T>(what: string, f: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("runs", () => {
  test("create, follow the events to done, get, steps and list", async () => {
    const run = await af.runs.create({ message: "List the prime numbers below 50", metadata: { suite: "ts" } });
    assert.match(run.id, /^[0-9a-f-]{36}$/);
    assert.equal(run.tenant, "dev");

    const evs = await collect(af.runs.events(run.id));
    const stored = storedOf(evs);
    assert.deepEqual(stored.map((e) => e.seq), stored.map((_, i) => i + 1), "stored events once each, dense from 1");
    assert.equal(stored[0]!.type, "queued");
    assert.equal(stored.at(-1)!.type, "done");
    assert.equal(stored.at(-1)!.summary, "completed");
    assert.ok(stored.some((e) => e.type === "model_call"), "a model call among them");
    for (const e of evs) {
      assert.equal(e.run_id, run.id);
      if (e.type === "response_chunk") {
        assert.equal(e.seq, 0);
        assert.equal(typeof e.text, "string");
      }
    }
    const response = stored.find((e) => e.type === "response");
    assert.match(response?.content ?? "", /15 primes/);

    const view = await af.runs.get(run.id);
    assert.equal(view.status, "completed");
    assert.equal(view.turns, 3);
    assert.match(JSON.stringify(view.answer), /\[demo model\]/);

    const steps = await af.runs.steps(run.id);
    assert.equal(steps.run_id, run.id);
    assert.ok(steps.steps.length >= 4, `${steps.steps.length} steps`);
    const turn2 = await af.runs.steps(run.id, { turn: 2 });
    assert.ok(turn2.steps.length > 0);
    assert.ok(turn2.steps.every((s) => s.turn === 2));

    const page = await af.runs.list({ status: ["completed"], limit: 100 });
    assert.ok(page.runs.some((r) => r.id === run.id));
    const none = await af.runs.list({ status: "failed", limit: 100 });
    assert.ok(!none.runs.some((r) => r.id === run.id));
  });

  test("events resume after lastEventId with exactly the events after it", async () => {
    const run = await af.runs.create({ message: "Compute the first 15 Fibonacci numbers" });
    const all = storedOf(await collect(af.runs.events(run.id)));
    assert.ok(all.length > 6);
    const k = 5;
    const rest = storedOf(await collect(af.runs.events(run.id, { lastEventId: k })));
    assert.deepEqual(rest.map((e) => [e.seq, e.type]), all.slice(k).map((e) => [e.seq, e.type]));
    // Resumed at the done event of a finished run: nothing more (204).
    assert.deepEqual(await collect(af.runs.events(run.id, { lastEventId: all.at(-1)!.seq })), []);

    // Break off a live stream midway and resume from the last event seen.
    const again = await af.runs.create({ message: "Play fizzbuzz up to 15" });
    const first: RunEvent[] = [];
    for await (const ev of af.runs.events(again.id)) {
      if (ev.type !== "response_chunk") first.push(ev);
      if (first.length === 3) break;
    }
    const second = storedOf(await collect(af.runs.events(again.id, { lastEventId: first.at(-1)!.seq })));
    const seqs = [...first, ...second].map((e) => e.seq);
    assert.deepEqual(seqs, seqs.map((_, i) => i + 1));
    assert.equal(second.at(-1)!.type, "done");
  });

  test("a connection to the real fleet dropped midway is resumed with Last-Event-ID", async (t) => {
    // A proxy in front of the fleet passes the first event stream through
    // up to the middle of its fourth message, then drops the connection.
    const seen: IncomingHttpHeaders[] = [];
    const upstream = new URL(fleet.url);
    const proxy = createServer((req, res) => {
      const n = req.url?.endsWith("/events") ? seen.push(req.headers) : 0;
      const up = httpRequest({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode ?? 502, ur.headers);
        let sent = "";
        let cut = false;
        ur.setEncoding("utf8").on("data", (s: string) => {
          if (n !== 1) return void res.write(s);
          if (cut) return;
          sent += s;
          const end = sent.split("\n\n").slice(0, 3).join("\n\n").length + 2;
          if (sent.length > end + 20) {
            cut = true;
            res.write(sent.slice(0, end + 20));
            // Drop it a moment later, as a network does: a fetch body
            // that errors at once discards what it had not yet handed
            // to its reader.
            setTimeout(() => {
              res.socket?.destroy();
              up.destroy();
            }, 50);
          }
        });
        ur.on("end", () => res.end());
      });
      up.on("error", () => res.socket?.destroy());
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    t.after(() => new Promise<void>((r) => {
      proxy.closeAllConnections();
      proxy.close(() => r());
    }));
    const via = new Client({ baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, token: fleet.tenantKey });
    const run = await via.runs.create({ message: "List the prime numbers below 50" });
    const evs = storedOf(await collect(via.runs.events(run.id, { maxRetries: 3 })));
    assert.deepEqual(evs.map((e) => e.seq), evs.map((_, i) => i + 1), "every stored event once, in order");
    assert.equal(evs.at(-1)!.type, "done");
    assert.ok(seen.length >= 2, `${seen.length} connections`);
    assert.equal(seen[0]!["last-event-id"], undefined);
    assert.equal(seen[1]!["last-event-id"], "3", "resumed after the last whole event of the dropped stream");
  });

  test("cancel a parked run; delete an ended one", async () => {
    const parked = await parkedTenant();
    const run = await parked.runs.create({ message: "Play fizzbuzz up to 15" });
    await until("waiting_budget", async () => ((await parked.runs.get(run.id)).status === "waiting_budget" ? true : undefined));
    // A run not ended cannot be deleted.
    await assert.rejects(parked.runs.delete(run.id), (e: unknown) => e instanceof ApiError && e.status === 409 && e.code === "conflict");
    const cancelled = await parked.runs.cancel(run.id);
    assert.equal(cancelled.id, run.id);
    const evs = storedOf(await collect(parked.runs.events(run.id)));
    assert.equal(evs.at(-1)!.type, "done");
    assert.equal((await parked.runs.get(run.id)).status, "cancelled");
    await parked.runs.delete(run.id);
    await assert.rejects(parked.runs.get(run.id), isNotFound);
  });

  test("errors carry the HTTP status and the API's error body", async () => {
    await assert.rejects(af.runs.get("00000000-0000-0000-0000-000000000000"), (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.status, 404);
      assert.equal(err.code, "not_found");
      assert.equal(err.body?.error.code, "not_found");
      assert.ok(err.body?.error.message);
      return true;
    });
    await assert.rejects(af.runs.create({ message: "" }), (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.ok(err.status === 400 || err.status === 422, `status ${err.status}`);
      assert.match(err.message, /message/);
      return true;
    });
    const stranger = new Client({ baseUrl: fleet.url, token: "af_not_a_key" });
    await assert.rejects(stranger.runs.list(), (err: unknown) => err instanceof ApiError && err.status === 401 && err.code === "unauthorized");
    // Another tenant's run is 404, on its event stream too.
    const parked = await parkedTenant();
    const mine = await af.runs.create({ message: "Play fizzbuzz up to 15" });
    await assert.rejects(collect(parked.runs.events(mine.id)), (err: unknown) => err instanceof ApiError && err.status === 404);
    await collect(af.runs.events(mine.id));
  });
});

describe("batches", () => {
  test("submit, gather the results in input order, get", async () => {
    const inputs = [
      { custom_id: "primes", message: "List the prime numbers below 30" },
      { custom_id: "fib", message: "Compute the first 10 Fibonacci numbers", metadata: { k: "v" } },
      { custom_id: "words", message: "Count the words in: a b a c" },
    ];
    const key = `ts-${randomUUID()}`;
    const batch = await af.batches.submit({ inputs, max_concurrent: 2 }, { idempotencyKey: key });
    assert.equal(batch.total, 3);
    const repeat = await af.batches.submit({ inputs }, { idempotencyKey: key });
    assert.equal(repeat.id, batch.id, "the idempotency key answers the first batch");

    const results = [];
    for await (const r of af.batches.results(batch.id, { wait: true })) results.push(r);
    assert.deepEqual(results.map((r) => [r.index, r.custom_id, r.status]), [
      [0, "primes", "completed"], [1, "fib", "completed"], [2, "words", "completed"],
    ]);
    assert.deepEqual(results[1]!.metadata, { k: "v" });
    assert.match(JSON.stringify(results[0]!.answer), /primes/);
    for (const r of results) assert.ok(r.usage.prompt_tokens > 0);

    const after0 = [];
    for await (const r of af.batches.results(batch.id, { after: 0 })) after0.push(r.index);
    assert.deepEqual(after0, [1, 2]);

    const done = await until("batch completed", async () => {
      const b = await af.batches.get(batch.id);
      return b.status === "completed" ? b : undefined;
    });
    assert.equal(done.counts?.["completed"], 3);
    const list = await af.batches.list({ limit: 10 });
    assert.ok(list.batches.some((b) => b.id === batch.id));
  });

  test("an invalid batch is refused whole, naming the input", async () => {
    await assert.rejects(af.batches.submit({ inputs: [{ message: "ok" }, { message: "" }] }), (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.ok(err.status === 400 || err.status === 422, `status ${err.status}`);
      assert.match(err.message, /2/);
      return true;
    });
  });
});

describe("approvals", () => {
  test("list, and deciding an approval that does not exist", async () => {
    const all = await af.approvals.list();
    assert.ok(Array.isArray(all.approvals));
    const pending = await af.approvals.list({ status: "pending", limit: 5 });
    assert.ok(pending.approvals.every((a) => a.status === "pending"));
    await assert.rejects(af.approvals.list({ status: "maybe" as "pending" }), (e: unknown) => e instanceof ApiError && e.status === 400);
    await assert.rejects(af.approvals.approve("no-such-approval", { reason: "ok" }), isNotFound);
    await assert.rejects(af.approvals.deny("no-such-approval"), isNotFound);
    await assert.rejects(af.approvals.get("no-such-approval"), isNotFound);
  });
});

describe("sessions", () => {
  test("list, get and delete a session of two runs", async () => {
    const sid = `ts-${randomUUID().slice(0, 8)}`;
    const r1 = await af.runs.create({ message: "Play fizzbuzz up to 15", session_id: sid });
    const r2 = await af.runs.create({ message: "List the prime numbers below 20", session_id: sid });
    await collect(af.runs.events(r1.id));
    await collect(af.runs.events(r2.id));

    const list = await af.sessions.list({ limit: 50 });
    const s = list.sessions.find((x) => x.id === sid);
    assert.ok(s, `session ${sid} listed`);
    assert.equal(s.runs, 2);
    assert.equal(s.last_run_id, r2.id);

    const view = await af.sessions.get(sid);
    assert.deepEqual(view.runs.map((r) => r.id), [r1.id, r2.id], "oldest first");

    const del = await af.sessions.delete(sid);
    assert.deepEqual(del, { id: sid, deleted: 2 });
    await assert.rejects(af.sessions.get(sid), isNotFound);
    await assert.rejects(af.runs.get(r1.id), isNotFound);
  });

  test("a session with a run not ended is not deleted (409)", async () => {
    const parked = await parkedTenant();
    const sid = `ts-${randomUUID().slice(0, 8)}`;
    const run = await parked.runs.create({ message: "Play fizzbuzz up to 15", session_id: sid });
    await assert.rejects(parked.sessions.delete(sid), (e: unknown) => e instanceof ApiError && e.status === 409 && e.code === "conflict");
    await parked.runs.cancel(run.id);
    await collect(parked.runs.events(run.id));
    assert.deepEqual(await parked.sessions.delete(sid), { id: sid, deleted: 1 });
  });
});

describe("skills", () => {
  test("put, list, get, compile a completed run, delete", async () => {
    const name = `ts-${randomUUID().slice(0, 8)}`;
    const put = await af.skills.put(name, { description: "Play fizzbuzz to a number", body: "# Steps\n\n1. loop" });
    assert.equal(put.name, name);
    assert.equal(put.source, "imported");
    const list = await af.skills.list({ limit: 100 });
    const listed = list.skills.find((s) => s.name === name);
    assert.ok(listed, `skill ${name} listed`);
    assert.equal(listed.body, undefined, "a listing leaves bodies out");
    assert.equal((await af.skills.get(name)).body, "# Steps\n\n1. loop");

    const run = await af.runs.create({ message: "Play fizzbuzz up to 15" });
    await collect(af.runs.events(run.id));
    const compiled = await af.skills.compileRun(run.id, { name: `${name}-run` });
    assert.equal(compiled.source, "compiled");
    assert.equal(compiled.source_run, run.id);
    assert.ok(compiled.body && compiled.body.length > 0, "the recipe from its turns");

    await af.skills.delete(name);
    await af.skills.delete(`${name}-run`);
    await assert.rejects(af.skills.get(name), isNotFound);
    await assert.rejects(af.skills.put("fetch", { description: "shadows a primitive", body: "" }),
      (e: unknown) => e instanceof ApiError && e.status === 422);
  });
});
