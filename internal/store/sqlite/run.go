package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

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
func scanRun(sc interface{ Scan(...any) error }, extra ...any) (rules.RunRow, error) {
	var r rules.RunRow
	var ctxJSON, meta, args, answer, waitIDs []byte
	var deadline, waitUntil sql.NullInt64
	var created, updated int64
	err := sc.Scan(append(extra, &r.Seq, &r.ID, &r.Tenant, &r.Agent, &r.SessionID, &r.Status, &r.Message, &ctxJSON, &meta,
		&r.IdempotencyKey, &r.BatchID, &r.MaxTurns, &r.MaxTokens, &deadline, &r.Turn, &args, &answer, &r.Error,
		&r.Usage.PromptTokens, &r.Usage.CompletionTokens, &r.DataBytesCarried, &r.EventSeq, &r.CancelRequested,
		&r.CancelReason, &r.Wake, &created, &updated, &r.ParentRunID, &r.Depth, &r.Children, &waitIDs, &waitUntil, &r.AgentVersion)...)
	if err != nil {
		return r, err
	}
	r.Context, r.Args, r.Answer = rules.RawOrNil(ctxJSON), rules.RawOrNil(args), rules.RawOrNil(answer)
	r.Deadline, r.WaitUntil = tsVal(deadline), tsVal(waitUntil)
	r.CreatedAt, r.UpdatedAt = fromMicros(created), fromMicros(updated)
	if r.WaitIDs, err = rules.DecodeStrings(waitIDs); err != nil {
		return r, err
	}
	r.Metadata, err = rules.DecodeMetadata(meta)
	return r, err
}

func scanRunRow(sc interface{ Scan(...any) error }) (rules.RunRow, error) { return scanRun(sc) }

func (s *Store) runByID(ctx context.Context, tx queryer, id string) (rules.RunRow, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return r, err
}

// runByIdempotencySQL finds a tenant's run by idempotency key. Repeating
// the partial unique index's predicate (a non-empty key) lets SQLite use
// the index: it cannot prove a bound parameter non-empty, and without it
// every submission with a key scanned the tenant's runs.
const runByIdempotencySQL = `SELECT ` + runCols + ` FROM runs
	WHERE tenant = ? AND idempotency_key = ? AND idempotency_key <> ''`

// queueCountSQL is rules.QueueGate's count: a tenant's max_queued_runs
// and its unfinished runs, counted no further than one past it.
// (SQLite's LIMIT cannot name an outer column, hence the second read of
// the tenant.)
var queueCountSQL = `SELECT t.max_queued_runs, (SELECT count(*) FROM (
		SELECT 1 FROM runs r WHERE r.tenant = ?1 AND r.status IN (` + unfinishedList + `)
		LIMIT (SELECT max_queued_runs + 1 FROM tenants WHERE id = ?1)))
	FROM tenants t WHERE t.id = ?1`

// countQueued reads on the read pool: the gate's own accounting covers
// what the writer has queued and not committed.
func (s *Store) countQueued(ctx context.Context, tenant string) (limit, unfinished int, err error) {
	if err := s.rd.QueryRowContext(ctx, queueCountSQL, tenant).Scan(&limit, &unfinished); err != nil {
		return 0, 0, fmt.Errorf("count unfinished runs of tenant %s: %w", tenant, mapErr(err))
	}
	return limit, unfinished, nil
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
		row, rerr := scanRun(s.rd.QueryRowContext(ctx, runByIdempotencySQL, p.Tenant, p.IdempotencyKey))
		if rerr == nil {
			res := store.RunCreateResult{Run: row.Run}
			res.Startable, rerr = startable(ctx, s.rd, row)
			return res, rerr
		}
		if !errors.Is(rerr, sql.ErrNoRows) {
			return store.RunCreateResult{}, fmt.Errorf("create run for tenant %s with idempotency key %q: %w", p.Tenant, p.IdempotencyKey, rerr)
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
	var res store.RunCreateResult
	err = s.write(ctx, func(tx *wtx) error {
		if p.IdempotencyKey != "" {
			row, err := scanRun(tx.QueryRowContext(ctx, runByIdempotencySQL, p.Tenant, p.IdempotencyKey))
			if err == nil {
				res.Run = row.Run
				res.Startable, err = startable(ctx, tx, row)
				return err
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		run := rules.NewRun(p, now)
		run.EventSeq = int64(len(evs))
		if err := tx.QueryRowContext(ctx, `SELECT version FROM agents WHERE tenant = ? AND name = ?`, run.Tenant, run.Agent).Scan(&run.AgentVersion); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("agent %q: %w", run.Agent, store.ErrUnknownAgent)
		} else if err != nil {
			return err
		}
		row, err := scanRun(tx.QueryRowContext(ctx, `INSERT INTO runs (id, tenant, agent, session_id, status, message, context, metadata,
				idempotency_key, batch_id, max_turns, max_tokens, deadline, event_seq, created_at, updated_at, parent_run_id, depth, agent_version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+runCols,
			run.ID, run.Tenant, run.Agent, run.SessionID, string(run.Status), run.Message, blobArg(run.Context),
			textArg(rules.EncodeMetadata(run.Metadata)), run.IdempotencyKey, run.BatchID, run.MaxTurns, run.MaxTokens,
			tsArg(run.Deadline), run.EventSeq, now.UnixMicro(), now.UnixMicro(), run.ParentRunID, run.Depth, run.AgentVersion))
		if err != nil {
			return err
		}
		if err := s.insertSteps(ctx, tx, []agentfleet.Step{rules.UserStep(row.Run)}); err != nil {
			return err
		}
		rules.Number(evs, row.Run, 0)
		if err := s.insertEvents(ctx, tx, evs); err != nil {
			return err
		}
		res = store.RunCreateResult{Run: row.Run, Created: true, Events: evs}
		res.Startable, err = startable(ctx, tx, row)
		return err
	})
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run %s for tenant %s: %w", p.ID, p.Tenant, err)
	}
	if res.Created {
		admitted = 1
	}
	return res, nil
}

// The session lookups repeat the session index's predicate (a non-empty
// session), which is what lets SQLite use that partial index; without it
// they walked all of the tenant's runs.
var (
	// sessionBlockedSQL: does the session have an unfinished run older
	// than seq?
	sessionBlockedSQL = `SELECT EXISTS (SELECT 1 FROM runs WHERE tenant = ? AND session_id = ? AND session_id <> '' AND seq < ?
		AND status NOT IN (` + terminalList + `))`
	// sessionHeadSQL: the session's oldest unfinished run.
	sessionHeadSQL = `SELECT ` + runCols + ` FROM runs WHERE tenant = ? AND session_id = ? AND session_id <> ''
		AND status NOT IN (` + terminalList + `) ORDER BY seq LIMIT 1`
)

// startable reports whether a run may start now: it is queued and no
// earlier run of its session is unfinished.
func startable(ctx context.Context, q queryer, r rules.RunRow) (bool, error) {
	if r.Status != agentfleet.StatusQueued {
		return false, nil
	}
	if r.SessionID == "" {
		return true, nil
	}
	var blocked bool
	err := q.QueryRowContext(ctx, sessionBlockedSQL, r.Tenant, r.SessionID, r.Seq).Scan(&blocked)
	return !blocked, err
}

// sessionNext returns the run that ended's end hands out: the session's
// next queued run, when ended was the session's head.
func sessionNext(ctx context.Context, q queryer, ended rules.RunRow) (*agentfleet.Run, error) {
	if ended.SessionID == "" || !ended.Status.Terminal() {
		return nil, nil
	}
	head, err := scanRun(q.QueryRowContext(ctx, sessionHeadSQL, ended.Tenant, ended.SessionID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return rules.SessionHead(ended.Seq, &head.Run, head.Seq), nil
}

func (s *Store) TurnLoad(ctx context.Context, p store.TurnLoadParams) (store.TurnLoadResult, error) {
	if err := rules.TurnLoad(p); err != nil {
		return store.TurnLoadResult{}, err
	}
	var res store.TurnLoadResult
	var unlimited sql.NullBool
	row, err := scanRun(s.rd.QueryRowContext(ctx, `SELECT
		(SELECT t.token_limit = 0 AND t.tokens_per_minute = 0 FROM tenants t WHERE t.id = runs.tenant), `+runCols+`
		FROM runs WHERE id = ?`, p.RunID), &unlimited)
	if err != nil {
		return res, fmt.Errorf("load run %s for turn %d: %w", p.RunID, p.Turn, mapErr(err))
	}
	res.TenantUnlimited = unlimited.Valid && unlimited.Bool
	if row.Status == agentfleet.StatusQueued && row.Turn == p.Turn-1 && !row.CancelRequested {
		// The read above is outside the writer; the update is fenced
		// again, and a run changed meanwhile is re-read as it is.
		err = s.write(ctx, func(tx *wtx) error {
			started, err := scanRun(tx.QueryRowContext(ctx, `UPDATE runs SET status = ?, updated_at = ?
				WHERE id = ? AND status = ? AND turn = ? AND cancel_requested = 0 RETURNING `+runCols,
				string(agentfleet.StatusRunning), rules.Now().UnixMicro(), p.RunID, string(agentfleet.StatusQueued), p.Turn-1))
			if errors.Is(err, sql.ErrNoRows) {
				row, err = s.runByID(ctx, tx, p.RunID)
				return err
			}
			row, res.Started = started, err == nil
			return err
		})
		if err != nil {
			return store.TurnLoadResult{}, fmt.Errorf("start run %s: %w", p.RunID, err)
		}
	}
	res.Run = row.Run
	if p.Turn > 1 && row.Turn == p.Turn-1 {
		rows, err := s.rd.QueryContext(ctx, stepsSQL, p.RunID, p.HistoryFrom, p.Turn)
		if err != nil {
			return store.TurnLoadResult{}, fmt.Errorf("load history of run %s: %w", p.RunID, mapErr(err))
		}
		if res.Steps, err = collect(rows, scanStep); err != nil {
			return store.TurnLoadResult{}, fmt.Errorf("load history of run %s: %w", p.RunID, mapErr(err))
		}
		res.HistoryLoaded = true
	}
	return res, nil
}

func (e exec) RunList(ctx context.Context, p store.RunListParams, after int64) ([]rules.RunRow, error) {
	q, args := rules.RunListQuery(runCols, p, after, false)
	return all(ctx, e, q, scanRunRow, args...)
}

func (t exec) RunLock(ctx context.Context, id string) (rules.RunRow, error) {
	return t.s.runByID(ctx, t.q, id)
}

// RunUpdate writes the mutable columns a transition or cancel changes.
func (t exec) RunUpdate(ctx context.Context, r rules.RunRow) (rules.RunRow, error) {
	return row(ctx, t, `UPDATE runs SET status = ?, error = ?, answer = ?, wake = ?, event_seq = ?,
			cancel_requested = ?, cancel_reason = ?, updated_at = ?
		WHERE id = ? RETURNING `+runCols, scanRunRow,
		string(r.Status), r.Error, blobArg(r.Answer), r.Wake, r.EventSeq, r.CancelRequested, r.CancelReason,
		r.UpdatedAt.UnixMicro(), r.ID)
}

// EventInsert stores evs as numbered: they carry their run and seq.
func (t exec) EventInsert(ctx context.Context, _ string, _ int64, evs []agentfleet.Event) error {
	return t.write(ctx, func(tx *wtx) error { return t.s.insertEvents(ctx, tx, evs) })
}

func (t exec) RunSessionNext(ctx context.Context, ended rules.RunRow) (*agentfleet.Run, error) {
	return sessionNext(ctx, t.q, ended)
}

func (e exec) RunCountActive(ctx context.Context, tenant string) (int, error) {
	return one(ctx, e, `SELECT count(*) FROM runs WHERE tenant = ? AND status = 'running'`, func(sc interface{ Scan(...any) error }) (int, error) {
		var n int
		return n, sc.Scan(&n)
	}, tenant)
}

func (e exec) RunCountByStatus(ctx context.Context, tenant string) ([]driver.Count, error) {
	return all(ctx, e, `SELECT status, count(*) FROM runs WHERE tenant = ? GROUP BY status`, scanCount, tenant)
}

const replyCols = `run_id, turn, content, model, prompt_tokens, completion_tokens, usage_reported, created_at`

func scanReply(sc interface{ Scan(...any) error }) (store.ModelReply, error) {
	var m store.ModelReply
	var created int64
	err := sc.Scan(&m.RunID, &m.Turn, &m.Content, &m.Model, &m.Usage.PromptTokens, &m.Usage.CompletionTokens, &m.UsageReported, &created)
	m.CreatedAt = fromMicros(created)
	return m, err
}

// insertReplySQL records a reply, fenced: only for a run that has
// committed exactly turn-1 turns and not ended, and only once per turn.
var insertReplySQL = `INSERT INTO model_replies (` + replyCols + `)
	SELECT id, ?2, ?3, ?4, ?5, ?6, ?7, ?8 FROM runs WHERE id = ?1 AND turn = ?2 - 1 AND status NOT IN (` + terminalList + `)
	ON CONFLICT (run_id, turn) DO NOTHING RETURNING ` + replyCols

// ModelReplyInsert records the reply with one fenced insert and, with a
// Charge, settles in the same write transaction.
func (d liteDriver) ModelReplyInsert(ctx context.Context, p store.ModelReplyRecordParams) (store.ModelReplyRecordResult, bool, error) {
	r := p.ModelReply
	var res store.ModelReplyRecordResult
	inserted := false
	err := d.s.write(ctx, func(tx *wtx) error {
		res, inserted = store.ModelReplyRecordResult{}, false
		m, err := scanReply(tx.QueryRowContext(ctx, insertReplySQL,
			r.RunID, r.Turn, r.Content, r.Model, r.Usage.PromptTokens, r.Usage.CompletionTokens, r.UsageReported, r.CreatedAt.UnixMicro()))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.Reply, inserted = m, true
		res.Settled, res.ChargeErr, err = chargeRecorded(ctx, tx, p.Charge)
		return err
	})
	return res, inserted, err
}

// chargeRecorded settles the charge of a record just inserted in tx, if
// it has one. A reservation gone (ErrNotFound) is reported as the charge's
// error and keeps the record: settle wrote nothing.
func chargeRecorded(ctx context.Context, tx *wtx, charge *store.BudgetSettleParams) (_ store.BudgetSettleResult, chargeErr, err error) {
	if charge == nil {
		return store.BudgetSettleResult{}, nil, nil
	}
	settled, err := settle(ctx, tx, *charge)
	if errors.Is(err, store.ErrNotFound) {
		return store.BudgetSettleResult{}, fmt.Errorf("charge %s: %w", rules.SettleName(*charge), err), nil
	}
	return settled, nil, err
}

func (e exec) ModelReplyGet(ctx context.Context, runID string, turn int) (store.ModelReply, error) {
	return one(ctx, e, `SELECT `+replyCols+` FROM model_replies WHERE run_id = ? AND turn = ?`,
		func(sc interface{ Scan(...any) error }) (store.ModelReply, error) { return scanReply(sc) }, runID, turn)
}

// commitRunSQL advances a run past a turn, fenced in its WHERE: the run
// must have committed exactly turn-1 turns and be in one of the statuses
// ?12 lists (",a,b,": those that may move to the new status). A commit
// without Args or Answer keeps the stored ones: a failed turn carries the
// previous args on. A cancellation without an error takes the requested
// cancel's reason.
// A commit that parks its run for its children (waiting_children) leaves
// it running instead when every child it waits for (?14) has ended.
var commitRunSQL = `UPDATE runs SET turn = ?1,
		status = CASE WHEN ?2 = 'waiting_children' AND NOT EXISTS (
				SELECT 1 FROM json_each(?14) w JOIN runs k ON k.id = w.value WHERE k.status NOT IN (` + terminalList + `))
			THEN 'running' ELSE ?2 END,
		args = COALESCE(?3, args), answer = COALESCE(?4, answer),
		error = CASE WHEN ?5 <> '' THEN ?5 WHEN ?2 = 'cancelled' AND error = '' THEN cancel_reason ELSE error END,
		prompt_tokens = prompt_tokens + ?6, completion_tokens = completion_tokens + ?7,
		data_bytes_carried = data_bytes_carried + ?8, event_seq = event_seq + ?9, updated_at = ?10,
		children = children + ?13, wait_ids = ?14, wait_until = ?15
	WHERE id = ?11 AND turn = ?1 - 1 AND instr(?12, ',' || status || ',') > 0 RETURNING ` + runCols

// commitFrom lists, per status a commit moves a run to, the statuses the
// run may be in: not ended, and allowed to make that move.
var commitFrom = func() map[agentfleet.RunStatus]string {
	m := map[agentfleet.RunStatus]string{}
	for _, to := range rules.Statuses {
		list := ","
		for _, from := range rules.Statuses {
			if !from.Terminal() && from.CanTransition(to) {
				list += string(from) + ","
			}
		}
		m[to] = list
	}
	return m
}()

// Steps and events go in with multi-row INSERTs of at most insertChunk
// rows (11 parameters a row at most: far below SQLite's variable limit).
// Each row count has its own statement text, so the writer's statement
// cache holds at most insertChunk of each.
const insertChunk = 64

const (
	insertStepHead  = `INSERT INTO steps (run_id, turn, idx, kind, content, model, prompt_tokens, completion_tokens, created_at) VALUES `
	insertEventHead = `INSERT INTO events (run_id, seq, v, turn, type, ts, content, args, tokens_prompt, tokens_completion, summary) VALUES `
)

var (
	insertStepSQL  = multiRowSQL(insertStepHead, 9)
	insertEventSQL = multiRowSQL(insertEventHead, 11)
)

// multiRowSQL returns the INSERT statements of 1 to insertChunk rows of
// cols columns, indexed by row count.
func multiRowSQL(head string, cols int) []string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	out := make([]string, insertChunk+1)
	for n := 1; n <= insertChunk; n++ {
		out[n] = head + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
	}
	return out
}

// insertRows inserts n rows in chunks; add appends row i's values.
func insertRows(ctx context.Context, tx *wtx, sqls []string, cols, n int, add func(args []any, i int) []any) error {
	args := make([]any, 0, cols*min(n, insertChunk))
	for from := 0; from < n; from += insertChunk {
		k := min(n-from, insertChunk)
		args = args[:0]
		for i := from; i < from+k; i++ {
			args = add(args, i)
		}
		if _, err := tx.ExecContext(ctx, sqls[k], args...); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) insertSteps(ctx context.Context, tx *wtx, steps []agentfleet.Step) error {
	err := insertRows(ctx, tx, insertStepSQL, 9, len(steps), func(args []any, i int) []any {
		x := steps[i]
		return append(args, x.RunID, x.Turn, x.Index, string(x.Kind), x.Content, x.Model,
			x.Usage.PromptTokens, x.Usage.CompletionTokens, x.CreatedAt.UnixMicro())
	})
	if err != nil {
		return fmt.Errorf("insert %d steps: %w", len(steps), err)
	}
	return nil
}

func (s *Store) insertEvents(ctx context.Context, tx *wtx, evs []agentfleet.Event) error {
	err := insertRows(ctx, tx, insertEventSQL, 11, len(evs), func(args []any, i int) []any {
		e := evs[i]
		var tp, tc any
		if e.Tokens != nil {
			tp, tc = e.Tokens.Prompt, e.Tokens.Completion
		}
		return append(args, e.RunID, e.Seq, e.V, e.Turn, string(e.Type), e.TS.UnixMicro(), e.Content,
			blobArg(e.Args), tp, tc, e.Summary)
	})
	if err != nil {
		return fmt.Errorf("insert %d events: %w", len(evs), err)
	}
	return nil
}

func (s *Store) TurnCommit(ctx context.Context, p store.TurnCommitParams) (store.RunChangeResult, error) {
	res, errs, err := s.TurnCommitMany(ctx, []store.TurnCommitParams{p})
	if err != nil {
		return store.RunChangeResult{}, err
	}
	return res[0], errs[0]
}

// TurnCommitMany commits in one write transaction. Each commit is one
// fenced UPDATE of its run (a loser changes nothing, and only then is its
// run read, to say why); the winners' steps and events are inserted after
// all the updates, as few multi-row INSERTs as the batch allows.
func (s *Store) TurnCommitMany(ctx context.Context, ps []store.TurnCommitParams) ([]store.RunChangeResult, []error, error) {
	now := rules.Now()
	results := make([]store.RunChangeResult, len(ps))
	errs := make([]error, len(ps))
	prepared := make([]store.TurnCommitParams, len(ps))
	pending, nSteps, nEvents := 0, 0, 0
	for i, p := range ps {
		prepared[i], errs[i] = rules.TurnCommit(p, now)
		if errs[i] == nil {
			pending++
			nSteps += len(prepared[i].Steps)
			nEvents += len(prepared[i].Events)
		}
	}
	if pending == 0 {
		return results, errs, nil
	}
	commitErrs := make([]error, len(ps))
	steps := make([]agentfleet.Step, 0, nSteps)
	evs := make([]agentfleet.Event, 0, nEvents)
	err := s.write(ctx, func(tx *wtx) error {
		steps, evs = steps[:0], evs[:0]
		commitStmt, err := tx.stmt(ctx, commitRunSQL)
		if err != nil {
			return err
		}
		for i, p := range prepared {
			commitErrs[i] = nil
			if errs[i] != nil {
				continue
			}
			n := len(p.Events)
			row, err := scanRun(commitStmt.QueryRowContext(ctx, p.Turn, string(p.Status), blobArg(p.Args), blobArg(p.Answer), p.Error,
				p.Usage.PromptTokens, p.Usage.CompletionTokens, p.DataBytesCarried, n, now.UnixMicro(), p.RunID, commitFrom[p.Status],
				p.Spawned, textArg(rules.EncodeStrings(p.WaitIDs)), tsArg(p.WaitUntil)))
			if errors.Is(err, sql.ErrNoRows) {
				if commitErrs[i], err = s.commitLost(ctx, tx, p); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("commit turn %d of run %s: %w", p.Turn, p.RunID, err)
			}
			steps = append(steps, p.Steps...)
			rules.Number(p.Events, row.Run, row.EventSeq-int64(n))
			evs = append(evs, p.Events...)
			results[i] = store.RunChangeResult{Run: row.Run, Events: p.Events, Steps: p.Steps}
			if results[i].SessionNext, err = sessionNext(ctx, tx, row); err != nil {
				return err
			}
		}
		if err := s.insertSteps(ctx, tx, steps); err != nil {
			return err
		}
		return s.insertEvents(ctx, tx, evs)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("commit %d turns: %w", len(ps), err)
	}
	for i, p := range prepared {
		if errs[i] == nil && commitErrs[i] != nil {
			errs[i] = commitErrs[i]
		}
		if errs[i] != nil {
			errs[i] = fmt.Errorf("commit turn %d of run %s: %w", p.Turn, p.RunID, errs[i])
			results[i] = store.RunChangeResult{}
		}
	}
	return results, errs, nil
}

// commitLost says why the fenced update of commit p changed nothing
// (ErrNotFound, ErrConflict or ErrInvalid, from the run as it is); err is
// for reading the run failing.
func (s *Store) commitLost(ctx context.Context, tx *wtx, p store.TurnCommitParams) (commitErr, err error) {
	cur, err := s.runByID(ctx, tx, p.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return err, nil
	}
	if err != nil {
		return nil, err
	}
	if err := rules.CheckCommitFence(cur.Run, p.Turn, p.Status); err != nil {
		return err, nil
	}
	return fmt.Errorf("%w: run %s did not take the commit", store.ErrConflict, p.RunID), nil // cannot happen under the one writer
}

const stepCols = `run_id, turn, idx, kind, content, model, prompt_tokens, completion_tokens, created_at`

// stepsSQL lists a run's steps of turns [?2, ?3) in order.
const stepsSQL = `SELECT ` + stepCols + ` FROM steps WHERE run_id = ? AND turn >= ? AND turn < ? ORDER BY turn, idx`

func scanStep(sc interface{ Scan(...any) error }) (agentfleet.Step, error) {
	var x agentfleet.Step
	var created int64
	err := sc.Scan(&x.RunID, &x.Turn, &x.Index, &x.Kind, &x.Content, &x.Model, &x.Usage.PromptTokens, &x.Usage.CompletionTokens, &created)
	x.CreatedAt = fromMicros(created)
	return x, err
}

func (e exec) StepList(ctx context.Context, runID string, from, to int) ([]agentfleet.Step, error) {
	return all(ctx, e, stepsSQL, scanStep, runID, from, to)
}

func (e exec) EventAppend(ctx context.Context, runID string, evs []agentfleet.Event) (agentfleet.Run, int64, error) {
	r := agentfleet.Run{ID: runID}
	var last int64
	err := e.write(ctx, func(tx *wtx) error {
		err := tx.QueryRowContext(ctx, `UPDATE runs SET event_seq = event_seq + ? WHERE id = ? RETURNING event_seq, tenant, session_id`,
			len(evs), runID).Scan(&last, &r.Tenant, &r.SessionID)
		if err != nil {
			return err
		}
		last -= int64(len(evs))
		rules.Number(evs, r, last)
		return e.s.insertEvents(ctx, tx, evs)
	})
	return r, last, err
}

func (e exec) EventList(ctx context.Context, p store.EventListByRunParams) ([]agentfleet.Event, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	return all(ctx, e, `SELECT e.run_id, r.tenant, r.session_id, e.seq, e.v, e.turn, e.type, e.ts, e.content, e.args,
			e.tokens_prompt, e.tokens_completion, e.summary
		FROM events e JOIN runs r ON r.id = e.run_id
		WHERE e.run_id = ? AND e.seq > ? ORDER BY e.seq LIMIT ?`, scanEvent, p.RunID, p.AfterSeq, limit)
}

func scanEvent(sc interface{ Scan(...any) error }) (agentfleet.Event, error) {
	var e agentfleet.Event
	var ts int64
	var args []byte
	var tp, tc sql.NullInt64
	if err := sc.Scan(&e.RunID, &e.Tenant, &e.SessionID, &e.Seq, &e.V, &e.Turn, &e.Type, &ts, &e.Content, &args, &tp, &tc, &e.Summary); err != nil {
		return e, err
	}
	e.TS = fromMicros(ts)
	e.Args = rules.RawOrNil(args)
	if tp.Valid || tc.Valid {
		e.Tokens = &agentfleet.Tokens{Prompt: tp.Int64, Completion: tc.Int64}
	}
	return e, nil
}
