// The client of the dispatcher's HTTP API over fetch: runs, batches,
// approvals and sessions. Request and answer types are the OpenAPI
// document's (src/types.ts).
import { ApiError } from "./errors.js";
import { followRunEvents, type EventsOptions } from "./sse.js";
import type {
  ApprovalDecision, ApprovalList, ApprovalView, BatchCreateRequest, BatchList, BatchResult, BatchResultsParams,
  BatchView, ListApprovalsParams, ListBatchesParams, ListRunsParams, ListSessionsParams, Run, RunCreateRequest,
  RunEvent, RunList, RunSteps, RunStepsParams, RunView, SessionDeleted, SessionList, SessionParams, SessionView,
  ListSkillsParams, Skill, SkillCompileRequest, SkillList, SkillParams, SkillRequest,
} from "./types.js";

export interface ClientOptions {
  /** The dispatcher's base URL, e.g. http://127.0.0.1:8080. */
  baseUrl: string;
  /** A tenant's API key (af_...) or the admin token, sent as a Bearer token. */
  token?: string;
  /** The fetch to use (default: the global fetch of Node 20 and browsers). */
  fetch?: typeof fetch;
}

/** Options every call takes. */
export interface CallOptions {
  signal?: AbortSignal;
}

type Query = Record<string, string | number | boolean | undefined | null>;

interface Request {
  query?: Query | undefined;
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
}

/**
 * A client of one dispatcher. Every method throws an ApiError for an
 * error answer (status >= 400) and fetch's own error when the dispatcher
 * cannot be reached.
 *
 *     const af = new Client({ baseUrl: "http://127.0.0.1:8080", token: process.env.AGENTFLEET_TOKEN });
 *     const run = await af.runs.create({ message: "List the prime numbers below 50" });
 *     for await (const ev of af.runs.events(run.id)) console.log(ev.seq, ev.type, ev.text ?? ev.summary ?? "");
 */
export class Client {
  readonly baseUrl: string;
  readonly runs: Runs;
  readonly batches: Batches;
  readonly approvals: Approvals;
  readonly sessions: Sessions;
  readonly skills: Skills;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(opts: ClientOptions) {
    if (!opts.baseUrl) throw new TypeError("Client: baseUrl is required, e.g. http://127.0.0.1:8080");
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.#token = opts.token;
    this.#fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.runs = new Runs(this);
    this.batches = new Batches(this);
    this.approvals = new Approvals(this);
    this.sessions = new Sessions(this);
    this.skills = new Skills(this);
  }

  /** The answer to one request, an ApiError when its status is 400 or more. */
  async raw(method: string, path: string, req: Request = {}): Promise<Response> {
    const headers: Record<string, string> = { ...req.headers };
    if (this.#token) headers["Authorization"] = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (req.body !== undefined) {
      body = JSON.stringify(req.body);
      headers["Content-Type"] = "application/json";
    }
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = body;
    if (req.signal) init.signal = req.signal;
    let res: Response;
    try {
      res = await this.#fetch(this.baseUrl + path + queryString(req.query), init);
    } catch (err) {
      if (req.signal?.aborted) throw err;
      // fetch says only "fetch failed"; the cause says why (ECONNREFUSED, ...).
      const cause = (err as { cause?: { message?: string } }).cause?.message;
      throw new Error(`${method} ${this.baseUrl}${path}: ${(err as Error).message}${cause ? `: ${cause}` : ""}`, { cause: err });
    }
    if (res.status >= 400) throw await ApiError.fromResponse(res);
    return res;
  }

  /** One JSON request; undefined for an answer without a body (204). */
  async json<T>(method: string, path: string, req: Request = {}): Promise<T> {
    const res = await this.raw(method, path, req);
    if (res.status === 204) return undefined as T;
    const text = await res.text();
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new Error(`decode ${method} ${path} answer (HTTP ${res.status}): ${(err as Error).message}`);
    }
  }
}

/** Runs: POST/GET /v1/runs, /v1/runs/{id}, its steps, events and cancel. */
export class Runs {
  constructor(private readonly c: Client) {}

  /** Submits a run: the run as queued (or, for a repeated idempotency_key, the earlier run). */
  create(req: RunCreateRequest, opts: CallOptions = {}): Promise<Run> {
    return this.c.json("POST", "/v1/runs", { body: req, signal: opts.signal });
  }

  get(id: string, opts: CallOptions = {}): Promise<RunView> {
    return this.c.json("GET", `/v1/runs/${enc(id)}`, { signal: opts.signal });
  }

  /** A page of runs, newest first; pass its next_cursor as `cursor` for the next. */
  list(params: ListRunsParams = {}, opts: CallOptions = {}): Promise<RunList> {
    const { status, ...rest } = params;
    return this.c.json("GET", "/v1/runs", {
      query: { ...rest, status: Array.isArray(status) ? status.join(",") : status },
      signal: opts.signal,
    });
  }

  /** Cancels a run: at once if queued or parked, else at its next turn boundary. */
  cancel(id: string, opts: CallOptions = {}): Promise<Run> {
    return this.c.json("POST", `/v1/runs/${enc(id)}/cancel`, { signal: opts.signal });
  }

  /** Deletes an ended run with its trace (409 for a run not ended). */
  async delete(id: string, opts: CallOptions = {}): Promise<void> {
    await this.c.json("DELETE", `/v1/runs/${enc(id)}`, { signal: opts.signal });
  }

  /** The run's trace in turn order and its side-effect journal. */
  steps(id: string, params: RunStepsParams = {}, opts: CallOptions = {}): Promise<RunSteps> {
    return this.c.json("GET", `/v1/runs/${enc(id)}/steps`, { query: params, signal: opts.signal });
  }

  /**
   * The run's events (GET /v1/runs/{id}/events), history then live, to
   * its done event: stored events once each in seq order, and
   * response_chunk events (seq 0) as the model streams its reply. A
   * dropped connection is resumed with Last-Event-ID; see
   * followRunEvents. Breaking out of the loop closes the stream.
   */
  events(id: string, opts: EventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    const path = `/v1/runs/${enc(id)}/events`;
    return followRunEvents(async (lastId, signal) => {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (lastId !== "") headers["Last-Event-ID"] = lastId;
      // An error answer is thrown as an ApiError; followRunEvents
      // retries a 5xx and hands a 4xx to the caller.
      return this.c.raw("GET", path, { headers, signal });
    }, opts);
  }
}

/** Batches: many inputs, one run each, results in input order. */
export class Batches {
  constructor(private readonly c: Client) {}

  /** Submits a batch as JSON; it is admitted whole (every run stored and queued) or not at all. */
  submit(req: BatchCreateRequest, opts: CallOptions & { idempotencyKey?: string } = {}): Promise<BatchView> {
    const headers: Record<string, string> = {};
    if (opts.idempotencyKey) headers["Idempotency-Key"] = opts.idempotencyKey;
    return this.c.json("POST", "/v1/batches", { body: req, headers, signal: opts.signal });
  }

  get(id: string, opts: CallOptions = {}): Promise<BatchView> {
    return this.c.json("GET", `/v1/batches/${enc(id)}`, { signal: opts.signal });
  }

  list(params: ListBatchesParams = {}, opts: CallOptions = {}): Promise<BatchList> {
    return this.c.json("GET", "/v1/batches", { query: params, signal: opts.signal });
  }

  cancel(id: string, opts: CallOptions = {}): Promise<BatchView> {
    return this.c.json("POST", `/v1/batches/${enc(id)}/cancel`, { signal: opts.signal });
  }

  /**
   * The results (JSONL), one per input in input order, read as they
   * arrive. With `wait: true` each comes once its run has ended, until
   * the last; without, only the inputs whose runs have ended so far.
   * `after` resumes after that index.
   */
  async *results(id: string, params: BatchResultsParams = {}, opts: CallOptions = {}): AsyncGenerator<BatchResult, void, undefined> {
    const res = await this.c.raw("GET", `/v1/batches/${enc(id)}/results`, {
      query: params, headers: { Accept: "application/x-ndjson" }, signal: opts.signal,
    });
    if (!res.body) return;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for (;;) {
        const { done, value } = await reader.read();
        buf += done ? decoder.decode() : decoder.decode(value, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line !== "") yield parseLine(line);
        }
        if (done) {
          if (buf.trim() !== "") yield parseLine(buf.trim());
          return;
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }
}

function parseLine(line: string): BatchResult {
  try {
    return JSON.parse(line) as BatchResult;
  } catch (err) {
    throw new Error(`decode batch result ${JSON.stringify(line.slice(0, 200))}: ${(err as Error).message}`);
  }
}

/** Approvals: calls an agent's rules hold for a person's yes or no. */
export class Approvals {
  constructor(private readonly c: Client) {}

  list(params: ListApprovalsParams = {}, opts: CallOptions = {}): Promise<ApprovalList> {
    return this.c.json("GET", "/v1/approvals", { query: params, signal: opts.signal });
  }

  get(id: string, opts: CallOptions = {}): Promise<ApprovalView> {
    return this.c.json("GET", `/v1/approvals/${enc(id)}`, { signal: opts.signal });
  }

  /** Approves a pending call (409 when decided already or its run ended). */
  approve(id: string, decision: ApprovalDecision = {}, opts: CallOptions = {}): Promise<ApprovalView> {
    return this.c.json("POST", `/v1/approvals/${enc(id)}/approve`, { body: decision, signal: opts.signal });
  }

  /** Denies a pending call: the script sees the call refused. */
  deny(id: string, decision: ApprovalDecision = {}, opts: CallOptions = {}): Promise<ApprovalView> {
    return this.c.json("POST", `/v1/approvals/${enc(id)}/deny`, { body: decision, signal: opts.signal });
  }
}

/** Sessions: the runs sharing a session_id, a conversation. */
export class Sessions {
  constructor(private readonly c: Client) {}

  /** A page of sessions, newest updated first. */
  list(params: ListSessionsParams = {}, opts: CallOptions = {}): Promise<SessionList> {
    return this.c.json("GET", "/v1/sessions", { query: params, signal: opts.signal });
  }

  /** A session with its runs oldest first and its latest checkpoint. */
  get(id: string, params: SessionParams = {}, opts: CallOptions = {}): Promise<SessionView> {
    return this.c.json("GET", `/v1/sessions/${enc(id)}`, { query: params, signal: opts.signal });
  }

  /** Deletes every run of the session (409, and nothing deleted, while one has not ended). */
  delete(id: string, params: SessionParams = {}, opts: CallOptions = {}): Promise<SessionDeleted> {
    return this.c.json("DELETE", `/v1/sessions/${enc(id)}`, { query: params, signal: opts.signal });
  }
}

/** Skills: a tenant's recipes, found by relevance to a run's task and read by its scripts with skillGet(). */
export class Skills {
  constructor(private readonly c: Client) {}

  /** Creates or replaces a skill: its description, markdown body (at most 64 KiB) and the agents that see it (empty: all). */
  put(name: string, skill: SkillRequest, params: SkillParams = {}, opts: CallOptions = {}): Promise<Skill> {
    return this.c.json("PUT", `/v1/skills/${enc(name)}`, { body: skill, query: params, signal: opts.signal });
  }

  /** A skill with its body. */
  get(name: string, params: SkillParams = {}, opts: CallOptions = {}): Promise<Skill> {
    return this.c.json("GET", `/v1/skills/${enc(name)}`, { query: params, signal: opts.signal });
  }

  /** A page of skills by name, without their bodies. */
  list(params: ListSkillsParams = {}, opts: CallOptions = {}): Promise<SkillList> {
    return this.c.json("GET", "/v1/skills", { query: params, signal: opts.signal });
  }

  /** Deletes a skill. */
  async delete(name: string, params: SkillParams = {}, opts: CallOptions = {}): Promise<void> {
    await this.c.raw("DELETE", `/v1/skills/${enc(name)}`, { query: params, signal: opts.signal });
  }

  /** Compiles a completed run into a skill: its task the description, its scripts the recipe (409 for a run not completed). */
  compileRun(runId: string, req: SkillCompileRequest = {}, opts: CallOptions = {}): Promise<Skill> {
    return this.c.json("POST", `/v1/runs/${enc(runId)}/skill`, { body: req, signal: opts.signal });
  }
}

function enc(id: string): string {
  if (!id) throw new TypeError("an id is required");
  return encodeURIComponent(id);
}

function queryString(q: Query | undefined): string {
  if (!q) return "";
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === null || v === "") continue;
    p.set(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : "";
}
