package sqlite

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// ReadRun reads a run; in SQLite's one write transaction that holds it.
func (t runTx) ReadRun(ctx context.Context, id string) (rules.RunRow, error) {
	return t.s.runByID(ctx, t.tx, id)
}

// Statuses reads the statuses of the runs ids names.
func (t runTx) Statuses(ctx context.Context, ids []string) (map[string]agentfleet.RunStatus, error) {
	out := make(map[string]agentfleet.RunStatus, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := t.tx.QueryContext(ctx, `SELECT id, status FROM runs WHERE id IN (SELECT value FROM json_each(?))`,
		string(rules.EncodeStrings(ids)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var st agentfleet.RunStatus
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// openChildren repeats runs_open_children's predicate for the runs table
// under alias a ("" for none), so the index serves it.
func openChildren(a string) string {
	return a + `parent_run_id <> '' AND ` + a + `status NOT IN ('completed','failed','cancelled','max_turns')`
}

// UnfinishedChildren lists parent's children that have not ended.
func (t runTx) UnfinishedChildren(ctx context.Context, parent string) ([]string, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT id FROM runs WHERE parent_run_id = ? AND `+openChildren("")+` ORDER BY seq`, parent)
	if err != nil {
		return nil, err
	}
	return collectStrings(rows)
}

func (s *Store) RunEnded(ctx context.Context, p store.RunEndedParams) (store.RunEndedResult, error) {
	now := rules.Now()
	var res store.RunEndedResult
	err := s.write(ctx, func(tx *wtx) (err error) {
		res, err = rules.ApplyRunEnded(ctx, runTx{s: s, tx: tx}, p.ID, now)
		return err
	})
	if err != nil {
		return store.RunEndedResult{}, fmt.Errorf("settle the end of run %s: %w", p.ID, err)
	}
	return res, nil
}

// waitersDueSQL finds runs waiting for children that may resume: their
// wait timed out, or none of the runs they wait for is unfinished.
var waitersDueSQL = `SELECT id FROM runs r WHERE status = 'waiting_children' AND (wait_until <= ? OR NOT EXISTS (
		SELECT 1 FROM json_each(r.wait_ids) w JOIN runs k ON k.id = w.value
		WHERE k.status NOT IN (` + terminalList + `)))
	ORDER BY seq LIMIT ?`

// orphanedSQL finds ended runs with children not yet ended.
var orphanedSQL = `SELECT DISTINCT p.id FROM runs c JOIN runs p ON p.id = c.parent_run_id
	WHERE ` + openChildren("c.") + ` AND NOT c.cancel_requested AND p.status IN (` + terminalList + `) LIMIT ?`

func (s *Store) RunChildrenDue(ctx context.Context, p store.RunChildrenDueParams) (store.RunEndedResult, error) {
	now := rules.NowOr(p.Now)
	limit := rules.ChildrenDueLimit(p.Limit)
	waiters, err := s.readStrings(ctx, waitersDueSQL, now.UnixMicro(), limit)
	if err != nil {
		return store.RunEndedResult{}, fmt.Errorf("find runs whose children are done: %w", err)
	}
	ended, err := s.readStrings(ctx, orphanedSQL, limit)
	if err != nil {
		return store.RunEndedResult{}, fmt.Errorf("find ended runs with children: %w", err)
	}
	wake := func(ctx context.Context, id string) (ch store.RunChangeResult, woken bool, err error) {
		err = s.write(ctx, func(tx *wtx) (err error) {
			ch, woken, err = rules.ApplyWake(ctx, runTx{s: s, tx: tx}, id, now)
			return err
		})
		return ch, woken, err
	}
	return rules.SettleChildrenDue(ctx, waiters, ended, wake, func(ctx context.Context, id string) (store.RunEndedResult, error) {
		return s.RunEnded(ctx, store.RunEndedParams{ID: id})
	})
}

// readStrings reads one string column of a query on the read pool.
func (s *Store) readStrings(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := s.rd.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := collectStrings(rows)
	return out, mapErr(err)
}

func (s *Store) RunChildrenUsage(ctx context.Context, id string) (agentfleet.Usage, error) {
	var u agentfleet.Usage
	err := s.rd.QueryRowContext(ctx, `WITH RECURSIVE d(id) AS (
			SELECT id FROM runs WHERE parent_run_id = ? AND parent_run_id <> ''
			UNION ALL
			SELECT r.id FROM runs r JOIN d ON r.parent_run_id = d.id WHERE r.parent_run_id <> ''
		)
		SELECT COALESCE(sum(prompt_tokens), 0), COALESCE(sum(completion_tokens), 0) FROM runs WHERE id IN (SELECT id FROM d)`,
		id).Scan(&u.PromptTokens, &u.CompletionTokens)
	if err != nil {
		return agentfleet.Usage{}, fmt.Errorf("sum the usage of run %s's children: %w", id, mapErr(err))
	}
	return u, nil
}

// collectStrings reads one string column of rows and closes them.
func collectStrings(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
