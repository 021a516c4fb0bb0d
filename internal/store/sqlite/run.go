package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
