package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// A batch is admitted in chunks, each its own short write transaction
// (SQLite has one writer: one transaction of 100,000 runs would stall
// every turn commit meanwhile). Its runs are stored with status
// 'admitting', which no reader lists, and become queued at the commit,
// again chunk by chunk; an abort deletes them the same way.

const insertBatchRunHead = `INSERT INTO runs (id, tenant, agent, session_id, status, message, context, metadata, idempotency_key,
	batch_id, max_turns, max_tokens, event_seq, created_at, updated_at, batch_index, custom_id, agent_version) VALUES `

var insertBatchRunSQL = multiRowSQL(insertBatchRunHead, 18)

// BatchAdmissionBegin inserts the batch as one write.
func (d liteDriver) BatchAdmissionBegin(ctx context.Context, p store.BatchAdmitParams, now time.Time) (driver.Admission, error) {
	a := &admission{s: d.s, tenant: p.Tenant, id: p.ID}
	err := d.s.write(ctx, func(tx *wtx) error {
		err := tx.QueryRowContext(ctx, `SELECT version FROM agents WHERE tenant = ? AND name = ?`, p.Tenant, p.Agent).Scan(&a.agentVersion)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrUnknownAgent
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, rules.BatchInsertSQL, p.ID, p.Tenant, p.Agent, rules.BatchAdmitting, p.MaxConcurrent, p.MaxTurns, p.MaxTokens,
			textArg(rules.EncodeMetadata(p.Metadata)), p.IdempotencyKey, p.CallbackURL, p.RetryOf, now.UnixMicro())
		return err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return a, nil
}

// admission is one batch's admission in chunks.
type admission struct {
	s          *Store
	tenant, id string
	// agentVersion is the version of the batch's agent its runs use.
	agentVersion int
}

// Append checks the keys and writes the chunk in one write transaction,
// its runs admitting.
func (a *admission) Append(ctx context.Context, c driver.BatchChunk, refuse func([]driver.BatchKeyHolder) error) error {
	err := a.s.write(ctx, func(tx *wtx) error {
		if len(c.Keys) > 0 {
			holders, err := all(ctx, exec{s: a.s}.inWrite(tx), `SELECT idempotency_key, id, batch_id, batch_index FROM runs
				WHERE tenant = ? AND idempotency_key <> '' AND idempotency_key IN (SELECT value FROM json_each(?))`,
				rules.ScanBatchKeyHolder, a.tenant, string(rules.EncodeStrings(c.Keys)))
			if err != nil {
				return err
			}
			if err := refuse(holders); err != nil {
				return err
			}
		}
		err := insertRows(ctx, tx, insertBatchRunSQL, 18, len(c.Runs), func(args []any, i int) []any {
			br := c.Runs[i]
			r := br.Run
			return append(args, r.ID, r.Tenant, r.Agent, r.SessionID, rules.BatchAdmitting, r.Message, blobArg(r.Context),
				textArg(rules.EncodeMetadata(r.Metadata)), r.IdempotencyKey, r.BatchID, r.MaxTurns, r.MaxTokens, r.EventSeq,
				r.CreatedAt.UnixMicro(), r.CreatedAt.UnixMicro(), br.Index, br.CustomID, a.agentVersion)
		})
		if err != nil {
			return fmt.Errorf("insert %d runs: %w", len(c.Runs), err)
		}
		if err := a.s.insertSteps(ctx, tx, c.Steps); err != nil {
			return err
		}
		return a.s.insertEvents(ctx, tx, c.Events)
	})
	var ie *store.BatchInputError
	if errors.As(err, &ie) {
		return ie
	}
	return mapErr(err)
}

// inChunks runs fn over the batch's input indexes in ranges of
// BatchChunkMax, each in a write transaction of its own; last runs in the
// last one.
func (a *admission) inChunks(ctx context.Context, total int, fn func(tx *wtx, from, to int) error, last func(tx *wtx) error) error {
	for from := 0; from < total || from == 0; from += store.BatchChunkMax {
		to := from + store.BatchChunkMax
		err := a.s.write(ctx, func(tx *wtx) error {
			if err := fn(tx, from, to); err != nil {
				return err
			}
			if to >= total {
				return last(tx)
			}
			return nil
		})
		if err != nil {
			return mapErr(err)
		}
	}
	return nil
}

// Commit makes the runs queued a chunk per write, the batch in the last.
func (a *admission) Commit(ctx context.Context, c driver.BatchCommit) (store.Batch, error) {
	var b store.Batch
	err := a.inChunks(ctx, c.Total, func(tx *wtx, from, to int) error {
		_, err := tx.ExecContext(ctx, `UPDATE runs SET status = 'queued' WHERE batch_id = ? AND batch_id <> ''
			AND batch_index >= ? AND batch_index < ? AND status = '`+rules.BatchAdmitting+`'`, a.id, from, to)
		return err
	}, func(tx *wtx) error {
		var err error
		b, err = scans.Batch(tx.QueryRowContext(ctx, rules.BatchCommitSQL, a.id,
			string(c.Status), c.Total, c.Released, c.MaxConcurrent, textArg(rules.EncodeMetadata(c.Metadata)), c.CallbackURL, tsArg(c.FinishedAt)))
		return err
	})
	return b, err
}

// Abort deletes the runs a chunk per write, the batch in the last.
func (a *admission) Abort(ctx context.Context, appended int) error {
	return a.inChunks(ctx, appended, func(tx *wtx, from, to int) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE batch_id = ? AND batch_id <> '' AND batch_index >= ? AND batch_index < ?`,
			a.id, from, to)
		return err
	}, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM batches WHERE id = ?`, a.id)
		return err
	})
}

func (e exec) BatchGetByKey(ctx context.Context, tenant, key string) (store.Batch, error) {
	return one(ctx, e, rules.BatchGetByKeySQL, scans.Batch, tenant, key)
}

func (e exec) BatchGet(ctx context.Context, id, tenant string) (store.Batch, error) {
	return one(ctx, e, rules.BatchGetSQL, scans.Batch, id, tenant)
}

func (e exec) BatchCountRuns(ctx context.Context, id string) ([]driver.BatchStatusCount, error) {
	return all(ctx, e, rules.BatchCountRunsSQL, rules.ScanBatchStatusCount, id)
}

func (e exec) BatchList(ctx context.Context, tenant, afterID string, limit int) ([]store.Batch, error) {
	return all(ctx, e, rules.BatchListSQL, scans.Batch, tenant, afterID, limit)
}

func (e exec) BatchRunList(ctx context.Context, p store.BatchRunListParams) ([]store.BatchRun, error) {
	query := `SELECT batch_index, custom_id, ` + rules.RunCols + ` FROM runs WHERE batch_id = ? AND batch_id <> '' AND batch_index > ?
		AND status <> '` + rules.BatchAdmitting + `'`
	args := []any{p.ID, p.AfterIndex}
	if len(p.Status) > 0 {
		query += ` AND status IN (?` + strings.Repeat(", ?", len(p.Status)-1) + `)`
		for _, st := range p.Status {
			args = append(args, string(st))
		}
	}
	return all(ctx, e, query+` ORDER BY batch_index LIMIT ?`, scans.BatchRun, append(args, p.Limit)...)
}

func (e exec) BatchCancelMark(ctx context.Context, id, tenant string) (store.Batch, error) {
	return row(ctx, e, rules.BatchCancelMarkSQL, scans.Batch, id, tenant)
}

func (e exec) BatchRunListCancellable(ctx context.Context, id string, limit int) ([]string, error) {
	return all(ctx, e, rules.BatchRunListCancellableSQL, rules.ScanString, id, limit)
}

func (e exec) BatchRunIsHeld(ctx context.Context, runID string) (bool, error) {
	return one(ctx, e, rules.BatchRunIsHeldSQL, rules.ScanBool, runID)
}

func (e exec) BatchListUnfinished(ctx context.Context, limit int) ([]store.Batch, error) {
	return all(ctx, e, rules.BatchListUnfinishedSQL, scans.Batch, limit)
}

// The BatchTx methods of runTx.

func (t exec) BatchLock(ctx context.Context, id string) (store.Batch, error) {
	return one(ctx, t, `SELECT `+rules.BatchCols+` FROM batches WHERE id = ?`, scans.Batch, id)
}

func (t exec) BatchCountInFlight(ctx context.Context, id string, released int) (int, error) {
	return one(ctx, t, rules.BatchCountInFlightSQL, rules.ScanInt, id, released)
}

func (t exec) BatchListOpen(ctx context.Context, id string, from, limit int) ([]store.BatchRun, error) {
	return all(ctx, t, rules.BatchListOpenSQL, scans.BatchRun, id, from, limit)
}

func (t exec) BatchSetReleased(ctx context.Context, id string, released int) error {
	_, err := t.run(ctx, `UPDATE batches SET released = ? WHERE id = ?`, released, id)
	return err
}

func (t exec) RunStartable(ctx context.Context, r agentfleet.Run) (bool, error) {
	row, err := t.s.runByID(ctx, t.q, r.ID)
	if err != nil {
		return false, err
	}
	return startable(ctx, t.q, row)
}

func (t exec) BatchHasOpen(ctx context.Context, id string) (bool, error) {
	return one(ctx, t, rules.BatchHasOpenSQL, rules.ScanBool, id)
}

func (t exec) BatchFinish(ctx context.Context, id string, status store.BatchStatus, at time.Time) (store.Batch, error) {
	return row(ctx, t, rules.BatchFinishSQL, scans.Batch, id, string(status), at.UnixMicro())
}

// BatchAdmissionDropAbandoned drops an admission a chunk per
// transaction, so the writer is never held long.
func (e exec) BatchAdmissionDropAbandoned(ctx context.Context, before time.Time) error {
	ids, err := all(ctx, e, `SELECT id FROM batches WHERE status = '`+rules.BatchAdmitting+`' AND created_at < ? LIMIT 10`,
		rules.ScanString, before.UnixMicro())
	if err != nil {
		return fmt.Errorf("find abandoned batch admissions: %w", err)
	}
	for _, id := range ids {
		for deleted := int64(-1); deleted != 0; {
			err := e.write(ctx, func(tx *wtx) error {
				res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE seq IN (SELECT seq FROM runs WHERE batch_id = ? AND batch_id <> ''
					AND status = '`+rules.BatchAdmitting+`' LIMIT ?)`, id, store.BatchChunkMax)
				if err != nil {
					return err
				}
				if deleted, err = res.RowsAffected(); err != nil || deleted > 0 {
					return err
				}
				_, err = tx.ExecContext(ctx, `DELETE FROM batches WHERE id = ? AND status = '`+rules.BatchAdmitting+`'`, id)
				return err
			})
			if err != nil {
				return fmt.Errorf("drop abandoned admission of batch %s: %w", id, err)
			}
		}
	}
	return nil
}
