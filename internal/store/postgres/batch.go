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

const batchCols = `id, tenant, agent, status, total, max_concurrent, released, max_turns, max_tokens, metadata,
	idempotency_key, callback_url, retry_of, created_at, finished_at`

func scanBatch(sc scanner) (store.Batch, error) {
	var b store.Batch
	var meta []byte
	var finished *time.Time
	if err := sc.Scan(&b.ID, &b.Tenant, &b.Agent, &b.Status, &b.Total, &b.MaxConcurrent, &b.Released, &b.MaxTurns, &b.MaxTokens,
		&meta, &b.IdempotencyKey, &b.CallbackURL, &b.RetryOf, &b.CreatedAt, &finished); err != nil {
		return b, err
	}
	b.CreatedAt, b.FinishedAt = b.CreatedAt.UTC(), tsVal(finished)
	var err error
	b.Metadata, err = rules.DecodeMetadata(meta)
	return b, err
}

const visibleBatch = `status <> '` + rules.BatchAdmitting + `'`

func (s *Store) BatchAdmit(ctx context.Context, p store.BatchAdmitParams) (store.BatchAdmitResult, error) {
	p, err := rules.BatchAdmit(p)
	if err != nil {
		return store.BatchAdmitResult{}, err
	}
	if p.IdempotencyKey != "" {
		b, err := queryOne(ctx, s, `SELECT `+batchCols+` FROM batches WHERE tenant = $1 AND idempotency_key = $2
			AND idempotency_key <> '' AND `+visibleBatch, scanBatch, p.Tenant, p.IdempotencyKey)
		if err == nil {
			return store.BatchAdmitResult{Existing: &b}, nil
		}
		if !isNotFound(err) {
			return store.BatchAdmitResult{}, fmt.Errorf("look up batch by idempotency key: %w", err)
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.BatchAdmitResult{}, fmt.Errorf("admit batch %s: %w", p.ID, mapErr(err))
	}
	// Every run of the batch is admitted under its agent's version of
	// now (kept, whatever becomes of the agent meanwhile).
	var version int
	err = tx.QueryRow(ctx, `SELECT version FROM agents WHERE tenant = $1 AND name = $2`, p.Tenant, p.Agent).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("agent %q: %w", p.Agent, store.ErrUnknownAgent)
	}
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return store.BatchAdmitResult{}, fmt.Errorf("admit batch %s: %w", p.ID, mapErr(err))
	}
	_, err = tx.Exec(ctx, `INSERT INTO batches (id, tenant, agent, status, total, max_concurrent, max_turns, max_tokens,
			metadata, idempotency_key, callback_url, retry_of, created_at) VALUES ($1, $2, $3, $4, 0, $5, $6, $7, $8, $9, $10, $11, $12)`,
		p.ID, p.Tenant, p.Agent, rules.BatchAdmitting, p.MaxConcurrent, p.MaxTurns, p.MaxTokens,
		rules.EncodeMetadata(p.Metadata), p.IdempotencyKey, p.CallbackURL, p.RetryOf, rules.Now())
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return store.BatchAdmitResult{}, fmt.Errorf("admit batch %s: %w", p.ID, mapErr(err))
	}
	return store.BatchAdmitResult{Admission: &admission{s: s, p: p, tx: tx, agentVersion: version}}, nil
}

// admission is one batch's admission: one transaction.
type admission struct {
	s     *Store
	p     store.BatchAdmitParams
	tx    pgx.Tx
	next  int
	ended bool
	// agentVersion is the version of the batch's agent its runs use.
	agentVersion int
}

var (
	batchRunCopyCols = []string{"id", "tenant", "agent", "session_id", "status", "message", "context", "metadata", "idempotency_key",
		"batch_id", "max_turns", "max_tokens", "event_seq", "created_at", "updated_at", "batch_index", "custom_id", "agent_version"}
	stepCopyCols  = []string{"run_id", "turn", "idx", "kind", "content", "created_at"}
	eventCopyCols = []string{"run_id", "seq", "v", "turn", "type", "ts", "content", "summary"}
)

func (a *admission) Append(ctx context.Context, inputs []store.BatchInput) error {
	s := a.s
	rows, done, err := s.BatchChunk(ctx, a.p, a.ended, inputs, a.next, s.countQueued)
	if err != nil || len(rows) == 0 {
		return err
	}
	created := 0
	defer func() { done(created) }()
	if err := a.checkKeys(ctx, rows); err != nil {
		return err
	}
	runRows := make([][]any, len(rows))
	stepRows := make([][]any, len(rows))
	eventRows := make([][]any, len(rows))
	for i, r := range rows {
		runRows[i] = []any{r.ID, r.Tenant, r.Agent, r.SessionID, string(r.Status), r.Message, bytesArg(r.Context),
			rules.EncodeMetadata(r.Metadata), r.IdempotencyKey, r.BatchID, r.MaxTurns, r.MaxTokens, r.EventSeq,
			r.CreatedAt, r.CreatedAt, r.Index, r.CustomID, a.agentVersion}
		st := rules.UserStep(r.Run)
		stepRows[i] = []any{st.RunID, st.Turn, st.Index, string(st.Kind), st.Content, st.CreatedAt}
		ev := store.BatchQueuedEvent(r.Run)
		eventRows[i] = []any{ev.RunID, ev.Seq, int16(ev.V), ev.Turn, string(ev.Type), ev.TS, ev.Content, ev.Summary}
	}
	for _, c := range []struct {
		table string
		cols  []string
		rows  [][]any
	}{{"runs", batchRunCopyCols, runRows}, {"steps", stepCopyCols, stepRows}, {"events", eventCopyCols, eventRows}} {
		if _, err := a.tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			return fmt.Errorf("admit inputs %d to %d of batch %s: copy %s: %w", a.next, a.next+len(rows)-1, a.p.ID, c.table, mapErr(err))
		}
	}
	created = len(rows)
	a.next += len(rows)
	return nil
}

// checkKeys refuses an input whose idempotency key another run has (an
// earlier input of this batch included).
func (a *admission) checkKeys(ctx context.Context, rows []rules.BatchRunRow) error {
	keys := rules.BatchKeys(rows)
	if len(keys) == 0 {
		return nil
	}
	holders, err := collect(ctx, a.tx, `SELECT idempotency_key, id, batch_id, batch_index FROM runs
		WHERE tenant = $1 AND idempotency_key <> '' AND idempotency_key = ANY($2)`, func(sc scanner) (rules.BatchKeyHolder, error) {
		var h rules.BatchKeyHolder
		err := sc.Scan(&h.Key, &h.RunID, &h.BatchID, &h.Index)
		return h, err
	}, a.p.Tenant, keys)
	if err != nil {
		return fmt.Errorf("check the idempotency keys of batch %s: %w", a.p.ID, mapErr(err))
	}
	return rules.BatchKeysRefusal(a.p.ID, rows, holders)
}

func (a *admission) Commit(ctx context.Context, p store.BatchCommitParams) (store.Batch, error) {
	if a.ended {
		return store.Batch{}, rules.Invalidf("batch %s: admission ended", a.p.ID)
	}
	if err := rules.BatchCommit(p); err != nil {
		return store.Batch{}, err
	}
	total, now := a.next, rules.Now()
	var finished *time.Time
	status := store.BatchRunning
	if total == 0 {
		finished, status = &now, store.BatchCompleted
	}
	b, err := scanBatch(a.tx.QueryRow(ctx, `UPDATE batches SET status = $2, total = $3, released = $4, max_concurrent = $5,
			metadata = $6, callback_url = $7, finished_at = $8 WHERE id = $1 RETURNING `+batchCols,
		a.p.ID, string(status), total, rules.BatchReleasedAtCommit(total, p.MaxConcurrent), p.MaxConcurrent,
		rules.EncodeMetadata(p.Metadata), p.CallbackURL, finished))
	if err == nil {
		err = a.tx.Commit(ctx)
	}
	if err != nil {
		return store.Batch{}, fmt.Errorf("commit batch %s: %w", a.p.ID, mapErr(err))
	}
	a.ended = true
	return b, nil
}

func (a *admission) Abort(ctx context.Context) error {
	if a.ended {
		return nil
	}
	a.ended = true
	if err := a.tx.Rollback(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("abort batch %s: %w", a.p.ID, err)
	}
	return nil
}

func (e exec) BatchGet(ctx context.Context, id, tenant string) (store.Batch, error) {
	return one(ctx, e, `SELECT `+batchCols+` FROM batches WHERE id = $1 AND ($2 = '' OR tenant = $2) AND `+visibleBatch,
		scanBatch, id, tenant)
}

func (e exec) BatchCountRuns(ctx context.Context, id string) ([]driver.BatchStatusCount, error) {
	return all(ctx, e, `SELECT status, count(*), COALESCE(sum(prompt_tokens), 0), COALESCE(sum(completion_tokens), 0)
		FROM runs WHERE batch_id = $1 AND batch_id <> '' GROUP BY status`, func(sc scanner) (driver.BatchStatusCount, error) {
		var c driver.BatchStatusCount
		return c, sc.Scan(&c.Status, &c.N, &c.Usage.PromptTokens, &c.Usage.CompletionTokens)
	}, id)
}

func (e exec) BatchList(ctx context.Context, tenant, afterID string, limit int) ([]store.Batch, error) {
	return all(ctx, e, `SELECT `+batchCols+` FROM batches WHERE tenant = $1 AND `+visibleBatch+`
		AND ($2 = '' OR id < $2) ORDER BY id DESC LIMIT $3`, scanBatch, tenant, afterID, limit)
}

func scanBatchRun(sc scanner) (store.BatchRun, error) {
	var br store.BatchRun
	row, err := scanRun(sc, &br.Index, &br.CustomID)
	br.Run = row.Run
	return br, err
}

func (e exec) BatchRunList(ctx context.Context, p store.BatchRunListParams) ([]store.BatchRun, error) {
	var statuses []string
	for _, st := range p.Status {
		statuses = append(statuses, string(st))
	}
	return all(ctx, e, `SELECT batch_index, custom_id, `+runCols+` FROM runs WHERE batch_id = $1 AND batch_id <> ''
		AND batch_index > $2 AND (coalesce(cardinality($3::text[]), 0) = 0 OR status = ANY($3)) ORDER BY batch_index LIMIT $4`,
		scanBatchRun, p.ID, p.AfterIndex, statuses, p.Limit)
}

func (e exec) BatchCancelMark(ctx context.Context, id, tenant string) (store.Batch, error) {
	return one(ctx, e, `UPDATE batches SET status = CASE WHEN status = 'running' THEN 'cancelled' ELSE status END
		WHERE id = $1 AND ($2 = '' OR tenant = $2) AND `+visibleBatch+` RETURNING `+batchCols, scanBatch, id, tenant)
}

func (e exec) BatchRunListCancellable(ctx context.Context, id string, limit int) ([]string, error) {
	return all(ctx, e, `SELECT id FROM runs WHERE batch_id = $1 AND `+rules.OpenBatchSQL("")+`
		AND NOT cancel_requested ORDER BY batch_index LIMIT $2`, scanString, id, limit)
}

func scanString(sc scanner) (string, error) {
	var v string
	err := sc.Scan(&v)
	return v, err
}

func (e exec) BatchRunIsHeld(ctx context.Context, runID string) (bool, error) {
	return one(ctx, e, `SELECT r.status = 'queued' AND r.batch_index >= b.released FROM runs r JOIN batches b ON b.id = r.batch_id
		WHERE r.id = $1 AND r.batch_id <> ''`, func(sc scanner) (bool, error) {
		var v bool
		return v, sc.Scan(&v)
	}, runID)
}

func (e exec) BatchListUnfinished(ctx context.Context, limit int) ([]store.Batch, error) {
	return all(ctx, e, `SELECT `+batchCols+` FROM batches WHERE finished_at IS NULL AND `+visibleBatch+` ORDER BY id LIMIT $1`,
		scanBatch, limit)
}

// BatchAdmissionDropAbandoned has nothing to do: an admission here is one
// transaction, which a dead process's connection rolls back.
func (e exec) BatchAdmissionDropAbandoned(context.Context, time.Time) error { return nil }

// The BatchTx methods of runTx.

func (t exec) BatchLock(ctx context.Context, id string) (store.Batch, error) {
	b, err := scanBatch(t.q().QueryRow(ctx, `SELECT `+batchCols+` FROM batches WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("batch %s: %w", id, store.ErrNotFound)
	}
	return b, err
}

func (t exec) BatchCountInFlight(ctx context.Context, id string, released int) (int, error) {
	var n int
	err := t.q().QueryRow(ctx, `SELECT count(*) FROM runs WHERE batch_id = $1 AND `+rules.OpenBatchSQL("")+` AND batch_index < $2`,
		id, released).Scan(&n)
	return n, err
}

func (t exec) BatchListOpen(ctx context.Context, id string, from, limit int) ([]store.BatchRun, error) {
	return collect(ctx, t.tx, `SELECT batch_index, custom_id, `+runCols+` FROM runs WHERE batch_id = $1 AND `+rules.OpenBatchSQL("")+`
		AND batch_index >= $2 ORDER BY batch_index LIMIT $3`, scanBatchRun, id, from, limit)
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
		AND o.status NOT IN (`+terminalList+`) AND o.seq < (SELECT seq FROM runs WHERE id = $3))`, r.Tenant, r.SessionID, r.ID).Scan(&ok)
	return ok, err
}

func (t exec) BatchHasOpen(ctx context.Context, id string) (bool, error) {
	var open bool
	err := t.q().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE batch_id = $1 AND `+rules.OpenBatchSQL("")+`)`, id).Scan(&open)
	return open, err
}

func (t exec) BatchFinish(ctx context.Context, id string, status store.BatchStatus, at time.Time) (store.Batch, error) {
	return scanBatch(t.q().QueryRow(ctx, `UPDATE batches SET status = $2, finished_at = $3 WHERE id = $1 RETURNING `+batchCols,
		id, string(status), at))
}
