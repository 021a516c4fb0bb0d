package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// A batch is admitted in one transaction, held from BatchAdmit to the
// commit: its runs, their first steps and queued events go in with COPY,
// a chunk at a time, and no other transaction sees any of them until the
// commit (an abort rolls them all back).

// BatchAdmissionBegin opens the admission's transaction.
func (d pgDriver) BatchAdmissionBegin(ctx context.Context, p store.BatchAdmitParams, now time.Time) (driver.Admission, error) {
	tx, err := d.s.pool.Begin(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	a := &admission{tx: tx, tenant: p.Tenant, id: p.ID}
	err = tx.QueryRow(ctx, `SELECT version FROM agents WHERE tenant = $1 AND name = $2`, p.Tenant, p.Agent).Scan(&a.agentVersion)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrUnknownAgent
	}
	if err == nil {
		_, err = tx.Exec(ctx, rules.BatchInsertSQL, p.ID, p.Tenant, p.Agent, rules.BatchAdmitting, p.MaxConcurrent, p.MaxTurns, p.MaxTokens,
			rules.EncodeMetadata(p.Metadata), p.IdempotencyKey, p.CallbackURL, p.RetryOf, now)
	}
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, mapErr(err)
	}
	return a, nil
}

// admission is one batch's admission: one transaction.
type admission struct {
	tx         pgx.Tx
	tenant, id string
	// agentVersion is the version of the batch's agent its runs use.
	agentVersion int
}

var (
	batchRunCopyCols = []string{"id", "tenant", "agent", "session_id", "status", "message", "context", "metadata", "idempotency_key",
		"batch_id", "max_turns", "max_tokens", "event_seq", "created_at", "updated_at", "batch_index", "custom_id", "agent_version"}
	stepCopyCols  = []string{"run_id", "turn", "idx", "kind", "content", "created_at"}
	eventCopyCols = []string{"run_id", "seq", "v", "turn", "type", "ts", "content", "summary"}
)

// Append reads the keys' holders in the admission's transaction, then
// writes the chunk by COPY, a table at a time.
func (a *admission) Append(ctx context.Context, c driver.BatchChunk, refuse func([]driver.BatchKeyHolder) error) error {
	if len(c.Keys) > 0 {
		holders, err := collect(ctx, a.tx, `SELECT idempotency_key, id, batch_id, batch_index FROM runs
			WHERE tenant = $1 AND idempotency_key <> '' AND idempotency_key = ANY($2)`, rules.ScanBatchKeyHolder, a.tenant, c.Keys)
		if err != nil {
			return fmt.Errorf("check the idempotency keys: %w", mapErr(err))
		}
		if err := refuse(holders); err != nil {
			return err
		}
	}
	runRows := make([][]any, len(c.Runs))
	for i, br := range c.Runs {
		r := br.Run
		runRows[i] = []any{r.ID, r.Tenant, r.Agent, r.SessionID, string(r.Status), r.Message, bytesArg(r.Context),
			rules.EncodeMetadata(r.Metadata), r.IdempotencyKey, r.BatchID, r.MaxTurns, r.MaxTokens, r.EventSeq,
			r.CreatedAt, r.CreatedAt, br.Index, br.CustomID, a.agentVersion}
	}
	stepRows := make([][]any, len(c.Steps))
	for i, st := range c.Steps {
		stepRows[i] = []any{st.RunID, st.Turn, st.Index, string(st.Kind), st.Content, st.CreatedAt}
	}
	eventRows := make([][]any, len(c.Events))
	for i, ev := range c.Events {
		eventRows[i] = []any{ev.RunID, ev.Seq, int16(ev.V), ev.Turn, string(ev.Type), ev.TS, ev.Content, ev.Summary}
	}
	for _, c := range []struct {
		table string
		cols  []string
		rows  [][]any
	}{{"runs", batchRunCopyCols, runRows}, {"steps", stepCopyCols, stepRows}, {"events", eventCopyCols, eventRows}} {
		if _, err := a.tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			return fmt.Errorf("copy %s: %w", c.table, mapErr(err))
		}
	}
	return nil
}

func (a *admission) Commit(ctx context.Context, c driver.BatchCommit) (store.Batch, error) {
	b, err := scans.Batch(a.tx.QueryRow(ctx, rules.BatchCommitSQL,
		a.id, string(c.Status), c.Total, c.Released, c.MaxConcurrent, rules.EncodeMetadata(c.Metadata), c.CallbackURL, tsArg(c.FinishedAt)))
	if err == nil {
		err = a.tx.Commit(ctx)
	}
	return b, mapErr(err)
}

// Abort rolls the transaction back; after a failed Commit it is closed
// already.
func (a *admission) Abort(ctx context.Context, _ int) error {
	if err := a.tx.Rollback(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
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
	var statuses []string
	for _, st := range p.Status {
		statuses = append(statuses, string(st))
	}
	return all(ctx, e, `SELECT batch_index, custom_id, `+rules.RunCols+` FROM runs WHERE batch_id = $1 AND batch_id <> ''
		AND batch_index > $2 AND (coalesce(cardinality($3::text[]), 0) = 0 OR status = ANY($3)) ORDER BY batch_index LIMIT $4`,
		scans.BatchRun, p.ID, p.AfterIndex, statuses, p.Limit)
}

func (e exec) BatchCancelMark(ctx context.Context, id, tenant string) (store.Batch, error) {
	return one(ctx, e, rules.BatchCancelMarkSQL, scans.Batch, id, tenant)
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

// BatchAdmissionDropAbandoned has nothing to do: an admission here is one
// transaction, which a dead process's connection rolls back.
func (e exec) BatchAdmissionDropAbandoned(context.Context, time.Time) error { return nil }

// The BatchTx methods of runTx.

func (t exec) BatchLock(ctx context.Context, id string) (store.Batch, error) {
	return one(ctx, t, `SELECT `+rules.BatchCols+` FROM batches WHERE id = $1 FOR UPDATE`, scans.Batch, id)
}

func (t exec) BatchCountInFlight(ctx context.Context, id string, released int) (int, error) {
	return one(ctx, t, rules.BatchCountInFlightSQL, rules.ScanInt, id, released)
}

func (t exec) BatchListOpen(ctx context.Context, id string, from, limit int) ([]store.BatchRun, error) {
	return all(ctx, t, rules.BatchListOpenSQL, scans.BatchRun, id, from, limit)
}

func (t exec) BatchSetReleased(ctx context.Context, id string, released int) error {
	_, err := t.q().Exec(ctx, `UPDATE batches SET released = $2 WHERE id = $1`, id, released)
	return err
}

func (t exec) RunStartable(ctx context.Context, r agentfleet.Run) (bool, error) {
	if r.SessionID == "" {
		return true, nil
	}
	var ok bool
	err := t.q().QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM runs o WHERE o.tenant = $1 AND o.session_id = $2 AND o.session_id <> ''
		AND o.status NOT IN (`+rules.TerminalSQL+`) AND o.seq < (SELECT seq FROM runs WHERE id = $3))`, r.Tenant, r.SessionID, r.ID).Scan(&ok)
	return ok, err
}

func (t exec) BatchHasOpen(ctx context.Context, id string) (bool, error) {
	return one(ctx, t, rules.BatchHasOpenSQL, rules.ScanBool, id)
}

func (t exec) BatchFinish(ctx context.Context, id string, status store.BatchStatus, at time.Time) (store.Batch, error) {
	return one(ctx, t, rules.BatchFinishSQL, scans.Batch, id, string(status), at)
}
