package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const runCols = `seq, id, tenant, agent, session_id, status, message, context, metadata, idempotency_key, batch_id,
	max_turns, max_tokens, deadline, turn, args, answer, error, prompt_tokens, completion_tokens, data_bytes_carried,
	event_seq, cancel_requested, cancel_reason, wake, created_at, updated_at, parent_run_id, depth, children, wait_ids, wait_until, agent_version`

var (
	terminalList   = rules.SQLList(rules.Terminal)
	unfinishedList = rules.SQLList(rules.Unfinished)
)

// scanRun scans runCols, after any extra leading columns.
func scanRun(sc scanner, extra ...any) (rules.RunRow, error) {
	var r rules.RunRow
	var ctxJSON, meta, args, answer, waitIDs []byte
	var deadline, waitUntil *time.Time
	dest := append(extra, &r.Seq, &r.ID, &r.Tenant, &r.Agent, &r.SessionID, &r.Status, &r.Message, &ctxJSON, &meta,
		&r.IdempotencyKey, &r.BatchID, &r.MaxTurns, &r.MaxTokens, &deadline, &r.Turn, &args, &answer, &r.Error,
		&r.Usage.PromptTokens, &r.Usage.CompletionTokens, &r.DataBytesCarried, &r.EventSeq, &r.CancelRequested,
		&r.CancelReason, &r.Wake, &r.CreatedAt, &r.UpdatedAt, &r.ParentRunID, &r.Depth, &r.Children, &waitIDs, &waitUntil, &r.AgentVersion)
	if err := sc.Scan(dest...); err != nil {
		return r, err
	}
	r.Context, r.Args, r.Answer = rules.RawOrNil(ctxJSON), rules.RawOrNil(args), rules.RawOrNil(answer)
	r.Deadline, r.WaitUntil = tsVal(deadline), tsVal(waitUntil)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	var err error
	if r.WaitIDs, err = rules.DecodeStrings(waitIDs); err != nil {
		return r, err
	}
	r.Metadata, err = rules.DecodeMetadata(meta)
	return r, err
}

func scanRunRow(sc scanner) (rules.RunRow, error) { return scanRun(sc) }

// evUnnest turns the nine event arrays of evArgs, from parameter $first
// on, into rows x(v, turn, type, ts, content, args, tp, tc, summary, k)
// with k the 1-based position.
func evUnnest(first int) string {
	types := []string{"smallint", "integer", "text", "timestamptz", "text", "bytea", "bigint", "bigint", "text"}
	ps := make([]string, len(types))
	for i, t := range types {
		ps[i] = "$" + strconv.Itoa(first+i) + "::" + t + "[]"
	}
	return `unnest(` + strings.Join(ps, ", ") + `) WITH ORDINALITY AS x(v, turn, type, ts, content, args, tp, tc, summary, k)`
}

const insertEventsInto = `INSERT INTO events (run_id, seq, v, turn, type, ts, content, args, tokens_prompt, tokens_completion, summary)`

// evArgs is the column arrays of events for evUnnest.
func evArgs(evs []agentfleet.Event) []any {
	var a eventArrays
	for _, e := range evs {
		a.add(e)
	}
	return []any{a.v, a.turn, a.typ, a.ts, a.content, a.args, a.tp, a.tc, a.summary}
}

type eventArrays struct {
	v       []int16
	turn    []int32
	typ     []string
	ts      []time.Time
	content []string
	args    [][]byte
	tp, tc  []*int64
	summary []string
}

func (a *eventArrays) add(e agentfleet.Event) {
	a.v = append(a.v, int16(e.V))
	a.turn = append(a.turn, int32(e.Turn))
	a.typ = append(a.typ, string(e.Type))
	a.ts = append(a.ts, e.TS)
	a.content = append(a.content, e.Content)
	a.args = append(a.args, bytesArg(e.Args))
	if e.Tokens != nil {
		p, c := e.Tokens.Prompt, e.Tokens.Completion
		a.tp, a.tc = append(a.tp, &p), append(a.tc, &c)
	} else {
		a.tp, a.tc = append(a.tp, nil), append(a.tc, nil)
	}
	a.summary = append(a.summary, e.Summary)
}

// lockSessionSQL serialises a session's run creations and run ends, so
// "is any earlier run unfinished?" and "which run is next?" never race.
// The key includes the schema so stores sharing a database do not
// contend.
const lockSessionSQL = `SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '/' || $2 || '/' || $3))`

// queueCountSQL is rules.QueueGate's count: a tenant's max_queued_runs
// and its unfinished runs, counted no further than one past it (an index
// scan of runs_tenant_status).
var queueCountSQL = `SELECT t.max_queued_runs, (SELECT count(*) FROM (
		SELECT 1 FROM runs r WHERE r.tenant = t.id AND r.status IN (` + unfinishedList + `) LIMIT t.max_queued_runs + 1) x)
	FROM tenants t WHERE t.id = $1`

func (s *Store) countQueued(ctx context.Context, tenant string) (limit, unfinished int, err error) {
	type counted struct{ limit, unfinished int }
	c, err := queryOne(ctx, s, queueCountSQL, func(sc scanner) (counted, error) {
		var c counted
		err := sc.Scan(&c.limit, &c.unfinished)
		return c, err
	}, tenant)
	if err != nil {
		return 0, 0, fmt.Errorf("count unfinished runs of tenant %s: %w", tenant, err)
	}
	return c.limit, c.unfinished, nil
}

func (s *Store) RunCreate(ctx context.Context, p store.RunCreateParams) (store.RunCreateResult, error) {
	p, err := rules.RunCreate(p)
	if err != nil {
		return store.RunCreateResult{}, err
	}
	done, err := s.Store.Queue.Admit(ctx, p.Tenant, 1, s.countQueued)
	var full *store.QueueFullError
	if errors.As(err, &full) && p.IdempotencyKey != "" {
		// A repeat of a run already admitted is never refused.
		if res, err := s.runByIdempotency(ctx, p); !isNotFound(err) {
			return res, err
		}
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run for tenant %s: %w", p.Tenant, err)
	}
	admitted := 0 // of the one admitted, what was created
	defer func() { done(admitted) }()
	now := rules.Now()
	evs, err := rules.Events(p.Events, 0, now)
	if err != nil {
		return store.RunCreateResult{}, err
	}
	run := rules.NewRun(p, now)
	insertArgs := append([]any{run.ID, run.Tenant, run.Agent, run.SessionID, string(run.Status), run.Message,
		bytesArg(run.Context), rules.EncodeMetadata(run.Metadata), run.IdempotencyKey, run.BatchID, run.MaxTurns,
		run.MaxTokens, tsArg(run.Deadline), int64(len(evs)), now, run.ParentRunID, run.Depth, string(agentfleet.StepUser)}, evArgs(evs)...)
	var res store.RunCreateResult
	created := false
	// One round trip, one transaction: the session lock, the run (under
	// its agent's current version) with its first step and events, and (under the lock) whether an earlier
	// run of the session is unfinished.
	queue := func(b *pgx.Batch) {
		if run.SessionID != "" {
			b.Queue(lockSessionSQL, lockSession, run.Tenant, run.SessionID)
		}
		b.Queue(`WITH r AS (
				INSERT INTO runs (id, tenant, agent, session_id, status, message, context, metadata, idempotency_key,
					batch_id, max_turns, max_tokens, deadline, event_seq, created_at, updated_at, parent_run_id, depth, agent_version)
				SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bytea, $8::jsonb, $9::text,
					$10::text, $11::integer, $12::bigint, $13::timestamptz, $14::bigint, $15::timestamptz, $15::timestamptz, $16::text, $17::integer, a.version
				FROM agents a WHERE a.tenant = $2::text AND a.name = $3::text
				ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key <> '' DO NOTHING
				RETURNING `+runCols+`
			), s AS (
				INSERT INTO steps (run_id, turn, idx, kind, content, created_at) SELECT id, 0, 0, $18, message, created_at FROM r
			), e AS (
				`+insertEventsInto+` SELECT r.id, x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary
				FROM r, `+evUnnest(19)+`
			)
			SELECT `+runCols+` FROM r`, insertArgs...)
		if run.SessionID != "" {
			b.Queue(`SELECT NOT EXISTS (SELECT 1 FROM runs o WHERE o.tenant = $1 AND o.session_id = $2 AND o.session_id <> ''
				AND o.status NOT IN (`+terminalList+`) AND o.seq < (SELECT seq FROM runs WHERE id = $3))`,
				run.Tenant, run.SessionID, run.ID)
		}
	}
	read := func(br pgx.BatchResults) error {
		res, created = store.RunCreateResult{}, false
		if run.SessionID != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		row, err := scanRun(br.QueryRow())
		switch {
		case err == nil:
			created = true
			rules.Number(evs, row.Run, 0)
			res = store.RunCreateResult{Run: row.Run, Created: true, Startable: true, Events: evs}
		case errors.Is(err, pgx.ErrNoRows):
			created = false
		default:
			return err
		}
		if run.SessionID != "" {
			var free bool
			if err := br.QueryRow().Scan(&free); err != nil {
				return err
			}
			res.Startable = free
		}
		return nil
	}
	if run.SessionID == "" {
		// Shared with other calls in flight (a busy API submits many
		// runs at once); it locks no existing row.
		err = s.pipelined(ctx, pipeOrderNew, queue, read)
	} else {
		// Alone: a pipeline cannot order its session locks the way
		// turn commits take them (by the server's hash of the key).
		err = s.withBatch(ctx, func() *pgx.Batch {
			b := &pgx.Batch{}
			queue(b)
			return b
		}, read)
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run %s for tenant %s: %w", p.ID, p.Tenant, err)
	}
	if created {
		admitted = 1
		return res, nil
	}
	// No row: the idempotency key was seen before, or the agent is
	// not the tenant's (the insert selects its version).
	unknownAgent := fmt.Errorf("create run for tenant %s: agent %q: %w", p.Tenant, p.Agent, store.ErrUnknownAgent)
	if p.IdempotencyKey == "" {
		return store.RunCreateResult{}, unknownAgent
	}
	res, err = s.runByIdempotency(ctx, p)
	if isNotFound(err) {
		return res, unknownAgent
	}
	return res, err
}

// runByIdempotency is RunCreate's answer when the idempotency key was seen
// before: that run. The non-empty condition is the partial unique index's
// predicate, so a generic plan can use the index too.
func (s *Store) runByIdempotency(ctx context.Context, p store.RunCreateParams) (store.RunCreateResult, error) {
	prev, err := queryOne(ctx, s, `SELECT `+runCols+` FROM runs WHERE tenant = $1 AND idempotency_key = $2 AND idempotency_key <> ''`,
		scanRunRow, p.Tenant, p.IdempotencyKey)
	res := store.RunCreateResult{Run: prev.Run}
	if err == nil {
		res.Startable, err = s.startable(ctx, prev)
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run for tenant %s with idempotency key %q: %w", p.Tenant, p.IdempotencyKey, err)
	}
	return res, nil
}

// startable reports whether a run may start now: it is queued and no
// earlier run of its session is unfinished.
func (s *Store) startable(ctx context.Context, r rules.RunRow) (bool, error) {
	if r.Status != agentfleet.StatusQueued {
		return false, nil
	}
	if r.SessionID == "" {
		return true, nil
	}
	return queryOne(ctx, s, `SELECT NOT EXISTS (SELECT 1 FROM runs WHERE tenant = $1 AND session_id = $2 AND session_id <> '' AND seq < $3
		AND status NOT IN (`+terminalList+`))`, func(sc scanner) (bool, error) {
		var free bool
		err := sc.Scan(&free)
		return free, err
	}, r.Tenant, r.SessionID, r.Seq)
}

// turnLoadSQL reads a run for the execution of turn $2 and starts it when
// it is queued for that turn (turn $2-1 committed), no cancel requested. The
// status is concatenated with an empty string so that no index can serve
// the test: the row is found by its key, and a plan made while runs was
// nearly empty chose the status index instead, then walked every queued
// run to start one.
var turnLoadSQL = `WITH s AS (
		UPDATE runs SET status = 'running', updated_at = $3
		WHERE id = $1 AND status || '' = 'queued' AND turn = $2 - 1 AND NOT cancel_requested
		RETURNING ` + runCols + `
	), r AS (
		SELECT true AS started, ` + runCols + ` FROM s
		UNION ALL
		SELECT false, ` + runCols + ` FROM runs WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM s)
	)
	` + turnLoadResultSQL

// turnLoadManySQL is turnLoadSQL for the runs $1 at the turns $2 (the
// same order): one row per run found, in no particular order.
var turnLoadManySQL = `WITH p AS (
		SELECT * FROM unnest($1::text[], $2::int[]) AS p(p_id, p_turn)
	), s AS (
		UPDATE runs SET status = 'running', updated_at = $3
		FROM p
		WHERE runs.id = p.p_id AND runs.status || '' = 'queued' AND runs.turn = p.p_turn - 1 AND NOT runs.cancel_requested
		RETURNING ` + qualified("runs", runCols) + `
	), r AS (
		SELECT true AS started, ` + runCols + ` FROM s
		UNION ALL
		SELECT false, ` + qualified("runs", runCols) + ` FROM runs JOIN p ON runs.id = p.p_id
		WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = runs.id)
	)
	` + turnLoadResultSQL

// turnLoadResultSQL ends both turn load statements: from r (each run,
// and whether this statement started it), the columns scanRun reads after
// started and whether the run's tenant is unlimited.
const turnLoadResultSQL = `SELECT r.started,
		COALESCE((SELECT t.token_limit = 0 AND t.tokens_per_minute = 0 FROM tenants t WHERE t.id = r.tenant), false),
		` + runCols + ` FROM r`

// stepsManySQL is stepsSQL for several runs: the steps of run $1[i] of
// turns [$2[i], $3[i]), by run, turn and index.
const stepsManySQL = `SELECT ` + stepCols + ` FROM steps
	JOIN unnest($1::text[], $2::int[], $3::int[]) AS p(p_id, p_from, p_to)
		ON steps.run_id = p.p_id AND steps.turn >= p.p_from AND steps.turn < p.p_to
	ORDER BY run_id, turn, idx`

// qualified prefixes every column of the list cols with table.
func qualified(table, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

func (s *Store) TurnLoad(ctx context.Context, p store.TurnLoadParams) (store.TurnLoadResult, error) {
	if err := rules.TurnLoad(p); err != nil {
		return store.TurnLoadResult{}, err
	}
	// One round trip, shared with other calls in flight, and with other
	// turn loads one statement for the runs and one for their histories:
	// the run (started if due) and the history the turn will need if the
	// run stands where the message says. Steps of the turn itself or
	// later are never read, so a commit landing between the two
	// statements cannot add to the history.
	c := &turnLoadCall{p: p, now: rules.Now()}
	err := s.pipelinedMerge(ctx, pipeOrderRun+p.RunID, c.queue, c.read, &turnLoadMerger, c)
	if err != nil {
		return store.TurnLoadResult{}, fmt.Errorf("load run %s for turn %d: %w", p.RunID, p.Turn, err)
	}
	return c.res, nil
}

// turnLoadCall is one TurnLoad in a pipeline.
type turnLoadCall struct {
	p   store.TurnLoadParams
	now time.Time
	res store.TurnLoadResult
}

func (c *turnLoadCall) queue(b *pgx.Batch) {
	b.Queue(turnLoadSQL, c.p.RunID, c.p.Turn, c.now)
	if c.p.Turn > 1 {
		b.Queue(stepsSQL, c.p.RunID, c.p.HistoryFrom, c.p.Turn)
	}
}

func (c *turnLoadCall) read(br pgx.BatchResults) error {
	c.res = store.TurnLoadResult{}
	row, err := scanRun(br.QueryRow(), &c.res.Started, &c.res.TenantUnlimited)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("run %s: %w", c.p.RunID, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	c.res.Run = row.Run
	if c.p.Turn == 1 {
		return nil
	}
	steps, err := collectBatch(br, scanStep)
	if err != nil {
		return err
	}
	c.setHistory(steps)
	return nil
}

// setHistory keeps the steps read if the run stands where the message
// says: otherwise the turn is not run, and the history is not needed.
func (c *turnLoadCall) setHistory(steps []agentfleet.Step) {
	if c.res.Run.Turn == c.p.Turn-1 {
		c.res.Steps, c.res.HistoryLoaded = steps, true
	}
}

// turnLoadMerger runs the turn loads of a pipeline as two statements: the
// runs (turnLoadManySQL) and the histories of the runs past turn 1
// (stepsManySQL). Of two loads of one run only the first is merged: only
// one of them may start it.
var turnLoadMerger = pipeMerger{
	key: func(c *pipeCall) string { return c.arg.(*turnLoadCall).p.RunID },
	queue: func(b *pgx.Batch, calls []*pipeCall) {
		ids, turns := make([]string, len(calls)), make([]int32, len(calls))
		var hIDs []string
		var hFrom, hTo []int32
		for i, pc := range calls {
			c := pc.arg.(*turnLoadCall)
			ids[i], turns[i] = c.p.RunID, int32(c.p.Turn)
			if c.p.Turn > 1 {
				hIDs = append(hIDs, c.p.RunID)
				hFrom = append(hFrom, int32(c.p.HistoryFrom))
				hTo = append(hTo, int32(c.p.Turn))
			}
		}
		// Key lookups, planned once per connection (see keyPlansSQL).
		b.Queue(keyPlansSQL)
		b.Queue(turnLoadManySQL, ids, turns, calls[0].arg.(*turnLoadCall).now)
		if len(hIDs) > 0 {
			b.Queue(stepsManySQL, hIDs, hFrom, hTo)
		}
	},
	read: func(br pgx.BatchResults, calls []*pipeCall) error {
		byID := make(map[string]*turnLoadCall, len(calls))
		history := false
		for _, pc := range calls {
			c := pc.arg.(*turnLoadCall)
			c.res = store.TurnLoadResult{}
			byID[c.p.RunID] = c
			history = history || c.p.Turn > 1
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		found := 0
		for rows.Next() {
			var res store.TurnLoadResult
			row, err := scanRun(rows, &res.Started, &res.TenantUnlimited)
			if err != nil {
				rows.Close()
				return err
			}
			c := byID[row.ID]
			if c == nil {
				rows.Close()
				return fmt.Errorf("turn loads: run %s was not asked for", row.ID)
			}
			res.Run = row.Run
			c.res = res
			found++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if found != len(calls) {
			// A run is missing: each load runs alone and reports its own.
			return fmt.Errorf("turn loads: %d of %d runs: %w", found, len(calls), store.ErrNotFound)
		}
		if !history {
			return nil
		}
		steps, err := collectBatch(br, scanStep)
		if err != nil {
			return err
		}
		// Sorted by run, then turn and index: each run's steps are one
		// stretch.
		for i := 0; i < len(steps); {
			j := i + 1
			for j < len(steps) && steps[j].RunID == steps[i].RunID {
				j++
			}
			if c := byID[steps[i].RunID]; c != nil && c.p.Turn > 1 {
				c.setHistory(steps[i:j:j])
			}
			i = j
		}
		for _, c := range byID {
			if c.p.Turn > 1 && !c.res.HistoryLoaded {
				c.setHistory(nil)
			}
		}
		return nil
	},
}

func (e exec) RunList(ctx context.Context, p store.RunListParams, after int64) ([]rules.RunRow, error) {
	q, args := rules.RunListQuery(runCols, p, after, true)
	return all(ctx, e, numberParams(q), scanRunRow, args...)
}

// numberParams turns the "?" parameters of q into Postgres's $1, $2, ...
// q must hold no other "?".
func numberParams(q string) string {
	var b strings.Builder
	n := 0
	for {
		i := strings.IndexByte(q, '?')
		if i < 0 {
			b.WriteString(q)
			return b.String()
		}
		n++
		b.WriteString(q[:i])
		b.WriteString("$" + strconv.Itoa(n))
		q = q[i+1:]
	}
}

// RunLock reads a run and locks its row for the transaction.
func (t exec) RunLock(ctx context.Context, id string) (rules.RunRow, error) {
	r, err := scanRun(t.q().QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = $1 FOR NO KEY UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return r, err
}

// RunUpdate writes the mutable columns a transition or cancel changes.
func (t exec) RunUpdate(ctx context.Context, r rules.RunRow) (rules.RunRow, error) {
	return scanRun(t.q().QueryRow(ctx, `UPDATE runs SET status = $2, error = $3, answer = $4, wake = $5, event_seq = $6,
			cancel_requested = $7, cancel_reason = $8, updated_at = $9
		WHERE id = $1 RETURNING `+runCols,
		r.ID, string(r.Status), r.Error, bytesArg(r.Answer), r.Wake, r.EventSeq, r.CancelRequested, r.CancelReason, r.UpdatedAt))
}

// EventInsert appends events numbered after lastSeq, inside tx.
func (t exec) EventInsert(ctx context.Context, runID string, lastSeq int64, evs []agentfleet.Event) error {
	if len(evs) == 0 {
		return nil
	}
	args := append([]any{runID, lastSeq}, evArgs(evs)...)
	_, err := t.q().Exec(ctx, insertEventsInto+`
		SELECT $1, $2 + x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary FROM `+evUnnest(3), args...)
	return err
}

// RunSessionNext returns what ended's end hands out, inside the ending
// transaction and under the session lock: the session's next queued run,
// when ended was the session's head.
func (t exec) RunSessionNext(ctx context.Context, ended rules.RunRow) (*agentfleet.Run, error) {
	if ended.SessionID == "" || !ended.Status.Terminal() {
		return nil, nil
	}
	if _, err := t.q().Exec(ctx, lockSessionSQL, lockSession, ended.Tenant, ended.SessionID); err != nil {
		return nil, err
	}
	head, err := scanRun(t.q().QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE tenant = $1 AND session_id = $2 AND session_id <> ''
		AND status NOT IN (`+terminalList+`) ORDER BY seq LIMIT 1`, ended.Tenant, ended.SessionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return rules.SessionHead(ended.Seq, &head.Run, head.Seq), nil
}

func (e exec) RunCountActive(ctx context.Context, tenant string) (int, error) {
	return one(ctx, e, `SELECT count(*) FROM runs WHERE tenant = $1 AND status = 'running'`, scanInt, tenant)
}

func scanInt(sc scanner) (int, error) {
	var n int
	return n, sc.Scan(&n)
}

func (e exec) RunCountByStatus(ctx context.Context, tenant string) ([]driver.Count, error) {
	return all(ctx, e, `SELECT status, count(*) FROM runs WHERE tenant = $1 GROUP BY status`, scanCount, tenant)
}

const replyCols = `run_id, turn, content, model, prompt_tokens, completion_tokens, usage_reported, created_at`

// scanReply scans replyCols, then any extra trailing columns.
func scanReply(sc scanner, extra ...any) (store.ModelReply, error) {
	var m store.ModelReply
	dest := append([]any{&m.RunID, &m.Turn, &m.Content, &m.Model, &m.Usage.PromptTokens, &m.Usage.CompletionTokens, &m.UsageReported, &m.CreatedAt}, extra...)
	err := sc.Scan(dest...)
	m.CreatedAt = m.CreatedAt.UTC()
	return m, err
}

// insertReplyCTE inserts the reply of 8 parameters from $first (run,
// turn, content, model, prompt, completion, reported, created), fenced:
// only for a run that has committed exactly turn-1 turns and not ended,
// once per turn.
func insertReplyCTE(first int) string {
	ps := make([]string, 8)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(first+i)
	}
	return `m AS (
		INSERT INTO model_replies (` + replyCols + `)
		SELECT id, ` + strings.Join(ps[1:], ", ") + ` FROM runs
		WHERE id = ` + ps[0] + ` AND turn = ` + ps[1] + ` - 1 AND status NOT IN (` + terminalList + `)
		ON CONFLICT (run_id, turn) DO NOTHING RETURNING ` + replyCols + `
	)`
}

// recordChargeSQL records a reply (or a journal entry: insert is its
// CTE m, cols its columns) and, only if it did, settles its charge, in
// one statement (one round trip, one transaction). It returns the record
// and the charge (NULL when there was nothing to charge), or no row when
// the record was not inserted. The record's parameters follow the
// charge's.
func recordChargeSQL(p store.BudgetSettleParams, insert func(first int) string, cols string) string {
	return `WITH ` + insert(len(settleArgs(p))+1) + `, ` + settleCTEs(p, `EXISTS (SELECT 1 FROM m)`) + `
		SELECT ` + cols + `, (SELECT charged FROM c) FROM m`
}

var (
	recordSQL                 = `WITH ` + insertReplyCTE(1) + ` SELECT ` + replyCols + `, NULL::bigint FROM m`
	recordChargeReservedSQL   = recordChargeSQL(store.BudgetSettleParams{ReservationID: "x"}, insertReplyCTE, replyCols)
	recordChargeUnreservedSQL = recordChargeSQL(store.BudgetSettleParams{}, insertReplyCTE, replyCols)
)

// ModelReplyInsert is one statement in the common case: the fenced insert
// and, with a Charge, the settle (gated on the insert). Anything else (a
// reply already there, a lost fence) is sorted out by the rules after,
// and charges nothing.
func (d pgDriver) ModelReplyInsert(ctx context.Context, p store.ModelReplyRecordParams) (store.ModelReplyRecordResult, bool, error) {
	r := p.ModelReply
	q, args := recordSQL, []any(nil)
	if p.Charge != nil {
		q = recordChargeReservedSQL
		if p.Charge.ReservationID == "" {
			q = recordChargeUnreservedSQL
		}
		args = settleArgs(*p.Charge)
	}
	args = append(args, r.RunID, r.Turn, r.Content, r.Model, r.Usage.PromptTokens, r.Usage.CompletionTokens, r.UsageReported, r.CreatedAt)
	// A charge locks its tenant's row; the insert only reads the run's
	// (model_replies has no foreign key to runs, see migration 0003).
	order := pipeOrderRun + r.RunID
	if p.Charge != nil {
		order = pipeOrderTenant + p.Charge.Tenant
	}
	// Through the shared pipeline: concurrent turns' records share one
	// round trip and one commit, and those of unlimited tenants one
	// statement (unlimitedRecordMerger).
	var m recordedReply
	queue := func(b *pgx.Batch) { b.Queue(q, args...) }
	read := func(br pgx.BatchResults) error {
		m = recordedReply{}
		var err error
		m.reply, err = scanReply(br.QueryRow(), &m.charged)
		if errors.Is(err, pgx.ErrNoRows) {
			m.notInserted = true
			return nil
		}
		return err
	}
	var err error
	if p.Charge != nil && p.Charge.ReservationID == "" {
		c := &unlimitedRecordCall{reply: r, charge: *p.Charge, out: &m}
		err = d.s.pipelinedMerge(ctx, order, queue, read, &unlimitedRecordMerger, c)
	} else {
		err = d.s.pipelined(ctx, order, queue, read)
	}
	if isNotFound(err) || err == nil && m.notInserted {
		return store.ModelReplyRecordResult{}, false, nil
	}
	if err != nil {
		return store.ModelReplyRecordResult{}, false, err
	}
	res := store.ModelReplyRecordResult{Reply: m.reply}
	res.Settled, res.ChargeErr = recordCharged(p.Charge, m.charged)
	return res, true, nil
}

// recordCharged is the charge of a record just inserted by a statement
// of recordChargeSQL: charged NULL means its reservation was gone.
func recordCharged(charge *store.BudgetSettleParams, charged *int64) (store.BudgetSettleResult, error) {
	switch {
	case charge == nil:
		return store.BudgetSettleResult{}, nil
	case charged == nil:
		return store.BudgetSettleResult{}, fmt.Errorf("charge %s: %w", rules.SettleName(*charge), settleNotFound(*charge))
	}
	return store.BudgetSettleResult{Charged: *charged, Overage: charge.Usage.Total() - *charged}, nil
}

// recordedReply is what one ModelReplyRecord statement returned.
type recordedReply struct {
	reply       store.ModelReply
	charged     *int64
	notInserted bool
}

// unlimitedRecordCall is one ModelReplyRecord with an unreserved charge
// (the tenant had no limits when its turn was loaded) in a pipeline.
type unlimitedRecordCall struct {
	reply  store.ModelReply
	charge store.BudgetSettleParams
	out    *recordedReply
}

// replyKey names the turn a reply belongs to.
func replyKey(runID string, turn int) string { return runID + "/" + strconv.Itoa(turn) }

// recordUnlimitedManySQL records replies and charges them to tenants
// without limits, for calls of distinct turns in one statement: the
// merged form of recordChargeUnreservedSQL's common case. A reply is
// inserted only where the single statement would insert it (fenced by
// the run's turn and status, once per turn) and only for a tenant that
// still has no limits (locked FOR KEY SHARE, in id order, as the single
// statement does); each inserted reply gets its ledger row, charged in
// full. Whatever is not inserted is left to the single statement: the
// merger's read fails the pipeline then.
//
// p: $1 tenant, $2 run_id, $3 turn, $4 content, $5 model, $6 prompt,
// $7 completion, $8 usage_reported, $9 created_at; the charge's
// $10 model, $11 prompt, $12 completion, $13 total, $14 now, $15 run.
var recordUnlimitedManySQL = `WITH p AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::text[], $5::text[], $6::bigint[],
			$7::bigint[], $8::boolean[], $9::timestamptz[], $10::text[], $11::bigint[], $12::bigint[], $13::bigint[], $14::timestamptz[], $15::text[])
			AS p(tenant, run_id, turn, content, model, prompt, completion, reported, created_at,
				c_model, c_prompt, c_completion, c_total, c_now, c_run)
	), k AS MATERIALIZED (
		SELECT t.id FROM tenants t
		WHERE t.id = ANY($1::text[]) AND t.token_limit = 0 AND t.tokens_per_minute = 0
		ORDER BY t.id FOR KEY SHARE
	), m AS (
		INSERT INTO model_replies (` + replyCols + `)
		SELECT r.id, p.turn, p.content, p.model, p.prompt, p.completion, p.reported, p.created_at
		FROM p JOIN k ON k.id = p.tenant
			JOIN runs r ON r.id = p.run_id AND r.turn = p.turn - 1 AND r.status NOT IN (` + terminalList + `)
		ON CONFLICT (run_id, turn) DO NOTHING RETURNING ` + replyCols + `
	), l AS (
		INSERT INTO usage_ledger (tenant, run_id, model, prompt_tokens, completion_tokens, charged, overage, created_at)
		SELECT p.tenant, p.c_run, p.c_model, p.c_prompt, p.c_completion, p.c_total, 0, p.c_now
		FROM m JOIN p ON p.run_id = m.run_id AND p.turn = m.turn
	)
	SELECT ` + prefixCols("m.", replyCols) + `, p.c_total FROM m JOIN p ON p.run_id = m.run_id AND p.turn = m.turn`

// unlimitedRecordMerger runs the reply records of unlimited tenants in a
// pipeline as one statement. Production bench: the single statements
// were a fifth of PostgreSQL's time per turn (pg_stat_statements).
var unlimitedRecordMerger = pipeMerger{
	key: func(c *pipeCall) string {
		r := c.arg.(*unlimitedRecordCall).reply
		return replyKey(r.RunID, r.Turn)
	},
	queue: func(b *pgx.Batch, calls []*pipeCall) {
		n := len(calls)
		tenants, runs, contents, models, cModels := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		turns := make([]int32, n)
		prompts, completions, cPrompts, cCompletions, cTotals := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		reported := make([]bool, n)
		created, cNow, cRuns := make([]time.Time, n), make([]time.Time, n), make([]string, n)
		for i, pc := range calls {
			c := pc.arg.(*unlimitedRecordCall)
			r, ch := c.reply, c.charge
			tenants[i], runs[i], turns[i], contents[i], models[i] = ch.Tenant, r.RunID, int32(r.Turn), r.Content, r.Model
			prompts[i], completions[i], reported[i], created[i] = r.Usage.PromptTokens, r.Usage.CompletionTokens, r.UsageReported, r.CreatedAt
			cModels[i], cPrompts[i], cCompletions[i], cTotals[i], cNow[i], cRuns[i] = ch.Model, ch.Usage.PromptTokens, ch.Usage.CompletionTokens, ch.Usage.Total(), ch.Now, ch.RunID
		}
		// Key lookups, planned once per connection (see keyPlansSQL).
		b.Queue(keyPlansSQL)
		b.Queue(recordUnlimitedManySQL, tenants, runs, turns, contents, models, prompts, completions, reported, created,
			cModels, cPrompts, cCompletions, cTotals, cNow, cRuns)
	},
	read: func(br pgx.BatchResults, calls []*pipeCall) error {
		byTurn := make(map[string]*unlimitedRecordCall, len(calls))
		for _, pc := range calls {
			c := pc.arg.(*unlimitedRecordCall)
			*c.out = recordedReply{}
			byTurn[replyKey(c.reply.RunID, c.reply.Turn)] = c
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		found := 0
		for rows.Next() {
			var charged int64
			reply, err := scanReply(rows, &charged)
			if err != nil {
				return err
			}
			c := byTurn[replyKey(reply.RunID, reply.Turn)]
			if c == nil {
				return fmt.Errorf("reply records: run %s turn %d was not asked for", reply.RunID, reply.Turn)
			}
			c.out.reply, c.out.charged = reply, &charged
			found++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if found != len(calls) {
			// A reply was not inserted (a lost fence, a reply already
			// there, a tenant given limits): each call runs alone and
			// sorts out its own.
			return fmt.Errorf("reply records: %d of %d inserted: %w", found, len(calls), store.ErrNotFound)
		}
		return nil
	},
}

func (e exec) ModelReplyGet(ctx context.Context, runID string, turn int) (store.ModelReply, error) {
	return one(ctx, e, `SELECT `+replyCols+` FROM model_replies WHERE run_id = $1 AND turn = $2`,
		func(sc scanner) (store.ModelReply, error) { return scanReply(sc) }, runID, turn)
}

const stepCols = `run_id, turn, idx, kind, content, model, prompt_tokens, completion_tokens, created_at`

// stepsSQL lists a run's steps of turns [$2, $3) in order.
const stepsSQL = `SELECT ` + stepCols + ` FROM steps WHERE run_id = $1 AND turn >= $2 AND turn < $3 ORDER BY turn, idx`

func scanStep(sc scanner) (agentfleet.Step, error) {
	var x agentfleet.Step
	err := sc.Scan(&x.RunID, &x.Turn, &x.Index, &x.Kind, &x.Content, &x.Model, &x.Usage.PromptTokens, &x.Usage.CompletionTokens, &x.CreatedAt)
	x.CreatedAt = x.CreatedAt.UTC()
	return x, err
}

func (e exec) StepList(ctx context.Context, runID string, from, to int) ([]agentfleet.Step, error) {
	return all(ctx, e, stepsSQL, scanStep, runID, from, to)
}

// EventAppend is one statement: the run's seq moves on and the events
// go in numbered after it.
func (e exec) EventAppend(ctx context.Context, runID string, evs []agentfleet.Event) (agentfleet.Run, int64, error) {
	type head struct {
		last int64
		run  agentfleet.Run
	}
	args := append([]any{runID, int64(len(evs))}, evArgs(evs)...)
	h, err := one(ctx, e, `WITH r AS (
			UPDATE runs SET event_seq = event_seq + $2 WHERE id = $1 RETURNING event_seq - $2 AS last, tenant, session_id
		), e AS (
			`+insertEventsInto+` SELECT $1, r.last + x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary
			FROM r, `+evUnnest(3)+`
		)
		SELECT last, tenant, session_id FROM r`, func(sc scanner) (head, error) {
		h := head{run: agentfleet.Run{ID: runID}}
		return h, sc.Scan(&h.last, &h.run.Tenant, &h.run.SessionID)
	}, args...)
	return h.run, h.last, err
}

func (e exec) EventList(ctx context.Context, p store.EventListByRunParams) ([]agentfleet.Event, error) {
	var limit *int
	if p.Limit > 0 {
		limit = &p.Limit
	}
	return all(ctx, e, `SELECT e.run_id, r.tenant, r.session_id, e.seq, e.v, e.turn, e.type, e.ts, e.content, e.args,
			e.tokens_prompt, e.tokens_completion, e.summary
		FROM events e JOIN runs r ON r.id = e.run_id
		WHERE e.run_id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3`, scanEvent, p.RunID, p.AfterSeq, limit)
}

func scanEvent(sc scanner) (agentfleet.Event, error) {
	var e agentfleet.Event
	var args []byte
	var tp, tc *int64
	var v int16
	if err := sc.Scan(&e.RunID, &e.Tenant, &e.SessionID, &e.Seq, &v, &e.Turn, &e.Type, &e.TS, &e.Content, &args, &tp, &tc, &e.Summary); err != nil {
		return e, err
	}
	e.V = int(v)
	e.TS = e.TS.UTC()
	e.Args = rules.RawOrNil(args)
	if tp != nil || tc != nil {
		e.Tokens = &agentfleet.Tokens{}
		if tp != nil {
			e.Tokens.Prompt = *tp
		}
		if tc != nil {
			e.Tokens.Completion = *tc
		}
	}
	return e, nil
}
