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

func (s *Store) runByID(ctx context.Context, tx queryer, id string) (rules.RunRow, error) {
	r, err := scans.Run(tx.QueryRowContext(ctx, `SELECT `+rules.RunCols+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return r, err
}

func (e exec) RunList(ctx context.Context, p store.RunListParams, after int64) ([]rules.RunRow, error) {
	q, args := rules.RunListQuery(rules.RunCols, p, after, false)
	return all(ctx, e, q, scans.RunRow, args...)
}

func (t exec) RunLock(ctx context.Context, id string) (rules.RunRow, error) {
	return t.s.runByID(ctx, t.q, id)
}

// RunUpdate writes the mutable columns a transition or cancel changes.
func (t exec) RunUpdate(ctx context.Context, r rules.RunRow) (rules.RunRow, error) {
	return row(ctx, t, rules.RunUpdateSQL, scans.RunRow, r.ID,
		string(r.Status), r.Error, blobArg(r.Answer), r.Wake, r.EventSeq, r.CancelRequested, r.CancelReason, r.UpdatedAt.UnixMicro())
}

// EventInsert stores evs as numbered: they carry their run and seq.
func (t exec) EventInsert(ctx context.Context, _ string, _ int64, evs []agentfleet.Event) error {
	return t.write(ctx, func(tx *wtx) error { return t.s.insertEvents(ctx, tx, evs) })
}

func (t exec) RunSessionHead(ctx context.Context, tenant, session string) (*rules.RunRow, error) {
	return sessionHead(ctx, t.q, tenant, session)
}

func (e exec) RunCountActive(ctx context.Context, tenant string) (int, error) {
	return one(ctx, e, `SELECT count(*) FROM runs WHERE tenant = ? AND status = 'running'`, rules.ScanInt, tenant)
}

func (e exec) RunCountByStatus(ctx context.Context, tenant string) ([]driver.Count, error) {
	return all(ctx, e, `SELECT status, count(*) FROM runs WHERE tenant = ? GROUP BY status`, rules.ScanCount, tenant)
}

// insertReplySQL records a reply, fenced: only for a run that has
// committed exactly turn-1 turns and not ended, and only once per turn.
var insertReplySQL = `INSERT INTO model_replies (` + rules.ReplyCols + `)
	SELECT id, ?2, ?3, ?4, ?5, ?6, ?7, ?8 FROM runs WHERE id = ?1 AND turn = ?2 - 1 AND status NOT IN (` + rules.TerminalSQL + `)
	ON CONFLICT (run_id, turn) DO NOTHING RETURNING ` + rules.ReplyCols

// ModelReplyInsert records the reply with one fenced insert and, with a
// Charge, settles in the same write transaction.
func (d liteDriver) ModelReplyInsert(ctx context.Context, p store.ModelReplyRecordParams) (store.ModelReplyRecordResult, bool, error) {
	r := p.ModelReply
	c, err := record(ctx, d.s, p.Charge, insertReplySQL, scans.ReplyRow,
		r.RunID, r.Turn, r.Content, r.Model, r.Usage.PromptTokens, r.Usage.CompletionTokens, r.UsageReported, r.CreatedAt.UnixMicro())
	if !c.inserted || err != nil {
		return store.ModelReplyRecordResult{}, false, err
	}
	return store.ModelReplyRecordResult{Reply: c.row, Settled: c.settled, ChargeErr: c.chargeErr}, true, nil
}

// recorded is what record did.
type recorded[T any] struct {
	row       T
	inserted  bool
	settled   store.BudgetSettleResult
	chargeErr error
}

// record runs a record's fenced insert q (which returns the row it
// inserted, read by scan) in the group commit and, if it inserted,
// settles charge in the same transaction. A reservation gone
// (ErrNotFound) is reported as the charge's error and keeps the record:
// settle wrote nothing.
func record[T any](ctx context.Context, s *Store, charge *store.BudgetSettleParams, q string, scan func(scanner) (T, error), args ...any) (recorded[T], error) {
	var c recorded[T]
	err := s.write(ctx, func(tx *wtx) error {
		c = recorded[T]{}
		var err error
		c.row, err = scan(tx.QueryRowContext(ctx, q, args...))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		c.inserted = true
		if charge == nil {
			return nil
		}
		c.settled, err = settle(ctx, tx, *charge)
		if errors.Is(err, store.ErrNotFound) {
			c.settled, c.chargeErr, err = store.BudgetSettleResult{}, fmt.Errorf("charge %s: %w", rules.SettleName(*charge), err), nil
		}
		return err
	})
	return c, err
}

func (e exec) ModelReplyGet(ctx context.Context, runID string, turn int) (store.ModelReply, error) {
	return one(ctx, e, `SELECT `+rules.ReplyCols+` FROM model_replies WHERE run_id = ? AND turn = ?`,
		scans.ReplyRow, runID, turn)
}

func (e exec) StepList(ctx context.Context, runID string, from, to int) ([]agentfleet.Step, error) {
	return all(ctx, e, rules.StepsSQL, scans.Step, runID, from, to)
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
	return all(ctx, e, rules.EventListSQL, scans.Event, p.RunID, p.AfterSeq, limit)
}
