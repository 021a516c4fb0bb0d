package rules

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// BatchAdmitting is the status of a batch being admitted, and on SQLite
// of its runs: no reader sees either until the admission commits.
const BatchAdmitting = "admitting"

// BatchAdmissionAbandonedAfter is how long a batch may stay admitting
// before BatchSweep takes it for abandoned (its process died) and deletes
// what it wrote.
const BatchAdmissionAbandonedAfter = time.Hour

// OpenBatchSQL repeats runs_open_batch's predicate (a batch's runs not
// ended) for the runs table under alias a ("" for none), so the index
// serves the queries.
func OpenBatchSQL(a string) string {
	return a + `batch_id <> '' AND ` + a + `status NOT IN ('completed','failed','cancelled','max_turns')`
}

// BatchAdmit validates p and fills its defaults.
func BatchAdmit(p store.BatchAdmitParams) (store.BatchAdmitParams, error) {
	if p.ID == "" {
		p.ID = NewID()
	} else if err := CheckID("batch id", p.ID); err != nil {
		return p, err
	}
	if err := CheckID("tenant id", p.Tenant); err != nil {
		return p, err
	}
	if p.Agent == "" {
		p.Agent = agentfleet.DefaultAgent
	}
	if p.MaxConcurrent < 0 || p.MaxTurns < 0 || p.MaxTokens < 0 {
		return p, Invalidf("batch %s: max concurrent, max turns and max tokens must not be negative (zero means none or the default)", p.ID)
	}
	if err := checkTexts("batch agent", p.Agent, "batch idempotency key", p.IdempotencyKey, "batch callback url", p.CallbackURL,
		"batch retry of", p.RetryOf); err != nil {
		return p, err
	}
	if err := CheckMetadata("batch metadata", p.Metadata); err != nil {
		return p, err
	}
	return p, nil
}

// BatchCommit validates p.
func BatchCommit(p store.BatchCommitParams) error {
	if p.MaxConcurrent < 0 {
		return Invalidf("batch max concurrent must not be negative (zero means no cap)")
	}
	if err := CheckText("batch callback url", p.CallbackURL); err != nil {
		return err
	}
	return CheckMetadata("batch metadata", p.Metadata)
}

// BatchRows validates a chunk of b's inputs, which must continue at index
// next, and makes them runs created at now (status queued; a backend that
// admits in chunks stores them as BatchAdmitting until the commit). An
// input refused is a *store.BatchInputError; so is an idempotency key
// repeated within the chunk (the backend checks it against other runs).
func BatchRows(b store.BatchAdmitParams, inputs []store.BatchInput, next int, now time.Time) ([]store.BatchRun, error) {
	if len(inputs) > store.BatchChunkMax {
		return nil, Invalidf("batch %s: %d inputs in one chunk; at most %d", b.ID, len(inputs), store.BatchChunkMax)
	}
	rows := make([]store.BatchRun, len(inputs))
	keys := map[string]int{}
	for i, in := range inputs {
		if in.Index != next+i {
			return nil, Invalidf("batch %s: input %d appended where input %d is due: append inputs in order", b.ID, in.Index, next+i)
		}
		p, err := RunCreate(store.RunCreateParams{
			Tenant: b.Tenant, Agent: b.Agent, SessionID: in.SessionID, Message: in.Message, Context: in.Context,
			Metadata: in.Metadata, IdempotencyKey: in.IdempotencyKey, MaxTurns: b.MaxTurns, MaxTokens: b.MaxTokens, BatchID: b.ID,
		})
		if err == nil {
			err = CheckText("custom id", in.CustomID)
		}
		if err != nil {
			return nil, &store.BatchInputError{Index: in.Index, Err: store.ErrInvalid, Msg: err.Error()}
		}
		if k := in.IdempotencyKey; k != "" {
			if first, dup := keys[k]; dup {
				return nil, BatchKeyRepeated(in.Index, first)
			}
			keys[k] = in.Index
		}
		run := NewRun(p, now)
		run.EventSeq = 1
		rows[i] = store.BatchRun{Run: run, Index: in.Index, CustomID: in.CustomID}
	}
	return rows, nil
}

// BatchKeyRepeated is the refusal of input index, whose idempotency key
// input first of the same batch has.
func BatchKeyRepeated(index, first int) error {
	return &store.BatchInputError{Index: index, Err: store.ErrConflict,
		Msg: fmt.Sprintf("idempotency_key repeats that of input %d of the same batch", first)}
}

// BatchKeyTaken is the refusal of input index, whose idempotency key is
// run's.
func BatchKeyTaken(index int, key, run string) error {
	return &store.BatchInputError{Index: index, Err: store.ErrConflict,
		Msg: fmt.Sprintf("idempotency_key %q is that of run %s, which exists already", key, run)}
}

// BatchReleasedAtCommit is how many of a batch's total runs are released
// when its admission commits.
func BatchReleasedAtCommit(total, maxConcurrent int) int {
	if maxConcurrent == 0 {
		return total
	}
	return min(total, maxConcurrent)
}

// ApplyBatchSweep is BatchSweep of batch id in tx at now: its held runs
// released while below max_concurrent, and the batch finished once none
// of its runs is unfinished.
func ApplyBatchSweep(ctx context.Context, tx driver.Executor, id string, now time.Time) (store.BatchSweepResult, error) {
	var res store.BatchSweepResult
	released, err := ApplyBatchRelease(ctx, tx, id)
	if err != nil {
		return res, err
	}
	res.Released = released
	b, err := tx.BatchLock(ctx, id)
	if err != nil || !b.FinishedAt.IsZero() {
		return res, err
	}
	open, err := tx.BatchHasOpen(ctx, id)
	if err != nil || open {
		return res, err
	}
	fin, err := tx.BatchFinish(ctx, id, BatchFinishedStatus(b.Status), now)
	if err != nil {
		return res, err
	}
	res.Finished = []store.Batch{fin}
	return res, nil
}

// BatchSweepLimit is BatchSweep's limit: n, or 100.
func BatchSweepLimit(n int) int {
	if n <= 0 {
		return 100
	}
	return n
}

// ApplyBatchRelease releases the next runs of batch id, in input order,
// while it has fewer than max_concurrent in flight, and returns those
// whose first turn is due now (a run of a session that is not its head
// starts when the head ends, as any session run).
func ApplyBatchRelease(ctx context.Context, tx driver.Executor, id string) ([]agentfleet.Run, error) {
	b, err := tx.BatchLock(ctx, id)
	if err != nil || b.Status != store.BatchRunning || b.MaxConcurrent == 0 || b.Released >= b.Total {
		return nil, err
	}
	inFlight, err := tx.BatchCountInFlight(ctx, id, b.Released)
	if err != nil || inFlight >= b.MaxConcurrent {
		return nil, err
	}
	next, err := tx.BatchListOpen(ctx, id, b.Released, b.MaxConcurrent-inFlight)
	if err != nil {
		return nil, err
	}
	released := b.Total // nothing left to release
	if len(next) > 0 {
		released = next[len(next)-1].Index + 1
	}
	if err := tx.BatchSetReleased(ctx, id, released); err != nil {
		return nil, err
	}
	var due []agentfleet.Run
	for _, br := range next {
		if br.Run.Status != agentfleet.StatusQueued || br.Run.Turn != 0 {
			continue
		}
		ok, err := tx.RunStartable(ctx, br.Run)
		if err != nil {
			return nil, err
		}
		if ok {
			due = append(due, br.Run)
		}
	}
	return due, nil
}

// BatchFinishedStatus is the status of a batch whose runs have all ended.
func BatchFinishedStatus(cur store.BatchStatus) store.BatchStatus {
	if cur == store.BatchCancelled {
		return cur
	}
	return store.BatchCompleted
}

// BatchRunsLimit is BatchRunList' page: n, or 1,000.
func BatchRunsLimit(n int) int {
	if n <= 0 || n > 10_000 {
		return 1000
	}
	return n
}

// BatchCancelLimit is BatchCancel's chunk: n, or 500.
func BatchCancelLimit(n int) int {
	if n <= 0 || n > store.BatchChunkMax {
		return 500
	}
	return n
}

// BatchCancelReason is the error of a run cancelled with its batch.
func BatchCancelReason(batch string) string { return "batch " + batch + " was cancelled" }

// BatchCancelEvents are the events of a batch run cancelled at once.
func BatchCancelEvents(cur agentfleet.Run, batch string, now time.Time) ([]agentfleet.Event, error) {
	return Events([]agentfleet.Event{
		{Type: agentfleet.EventCancelled, Turn: cur.Turn, Summary: BatchCancelReason(batch)},
		{Type: agentfleet.EventDone, Turn: cur.Turn, Summary: string(agentfleet.StatusCancelled)},
	}, 0, now)
}

// EncodeBatchCursor is the cursor that continues a batch listing after
// batch id (ids are time-ordered: newest first is id descending).
func EncodeBatchCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("b" + id))
}

// DecodeBatchCursor is the batch id a cursor continues after ("" for
// none).
func DecodeBatchCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) < 2 || raw[0] != 'b' || CheckID("batch cursor", string(raw[1:])) != nil {
		return "", Invalidf("batch cursor %q is malformed: pass the NextCursor of the previous page", cursor)
	}
	return string(raw[1:]), nil
}

// BatchListLimit is BatchList's page: n, or 50.
func BatchListLimit(n int) int {
	if n <= 0 {
		return 50
	}
	return n
}

// ApplyBatchCancel cancels batch's runs ids in tx at now, as RunCancel
// would, into res: at once when queued or waiting, at their next turn
// boundary when running. A run that ended meanwhile is skipped.
func ApplyBatchCancel(ctx context.Context, tx driver.Executor, batch string, ids []string, now time.Time, res *store.BatchCancelResult) error {
	reason := BatchCancelReason(batch)
	for _, id := range ids {
		cur, err := tx.RunLock(ctx, id)
		if err != nil {
			return err
		}
		evs, err := BatchCancelEvents(cur.Run, batch, now)
		if err != nil {
			return err
		}
		c, err := ApplyCancel(ctx, tx, store.RunCancelParams{ID: id, Reason: reason}, evs, now)
		switch {
		case errors.Is(err, store.ErrConflict):
			continue
		case err != nil:
			return err
		case c.Immediate:
			res.Cancelled = append(res.Cancelled, c)
		default:
			res.Stopping = append(res.Stopping, c.Run)
		}
	}
	return nil
}

// BatchKeys are the idempotency keys of rows, for a backend to look up.
func BatchKeys(rows []store.BatchRun) []string {
	var keys []string
	for _, r := range rows {
		if r.Run.IdempotencyKey != "" {
			keys = append(keys, r.Run.IdempotencyKey)
		}
	}
	return keys
}

// BatchKeysRefusal is the refusal of the first of rows (of batch) whose
// idempotency key a holder has, or nil.
func BatchKeysRefusal(batch string, rows []store.BatchRun, holders []driver.BatchKeyHolder) error {
	at := map[string]int{}
	for _, r := range rows {
		if r.Run.IdempotencyKey != "" {
			at[r.Run.IdempotencyKey] = r.Index
		}
	}
	var refusal error
	first := -1
	for _, h := range holders {
		i, ok := at[h.Key]
		if !ok || (first != -1 && i >= first) {
			continue
		}
		first = i
		refusal = BatchKeyTaken(i, h.Key, h.RunID)
		if h.BatchID == batch {
			refusal = BatchKeyRepeated(i, h.Index)
		}
	}
	return refusal
}

func (s *Store) BatchGetByID(ctx context.Context, p store.BatchGetByIDParams) (store.Batch, error) {
	b, err := s.d.BatchGet(ctx, p.ID, p.Tenant)
	if err != nil {
		return store.Batch{}, fmt.Errorf("get batch %s: %w", p.ID, err)
	}
	cs, err := s.d.BatchCountRuns(ctx, b.ID)
	if err != nil {
		return store.Batch{}, fmt.Errorf("count the runs of batch %s: %w", p.ID, err)
	}
	b.Counts = map[agentfleet.RunStatus]int{}
	for _, c := range cs {
		b.Counts[c.Status] = c.N
		b.Usage.PromptTokens += c.Usage.PromptTokens
		b.Usage.CompletionTokens += c.Usage.CompletionTokens
	}
	return b, nil
}

func (s *Store) BatchList(ctx context.Context, p store.BatchListParams) (store.BatchListResult, error) {
	after, err := DecodeBatchCursor(p.Cursor)
	if err != nil {
		return store.BatchListResult{}, err
	}
	limit := BatchListLimit(p.Limit)
	bs, err := s.d.BatchList(ctx, p.Tenant, after, limit+1)
	if err != nil {
		return store.BatchListResult{}, fmt.Errorf("list batches: %w", err)
	}
	var res store.BatchListResult
	if len(bs) > limit {
		bs = bs[:limit]
		res.NextCursor = EncodeBatchCursor(bs[limit-1].ID)
	}
	res.Batches = bs
	return res, nil
}

func (s *Store) BatchRunList(ctx context.Context, p store.BatchRunListParams) ([]store.BatchRun, error) {
	p.Limit = BatchRunsLimit(p.Limit)
	out, err := s.d.BatchRunList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read the runs of batch %s: %w", p.ID, err)
	}
	return out, nil
}

// BatchCancel cancels up to Limit of the batch's open runs in one
// transaction; More says a next call has more to cancel.
func (s *Store) BatchCancel(ctx context.Context, p store.BatchCancelParams) (store.BatchCancelResult, error) {
	limit := BatchCancelLimit(p.Limit)
	now := Now()
	var res store.BatchCancelResult
	err := s.d.Tx(ctx, func(x driver.Executor) error {
		res = store.BatchCancelResult{}
		b, err := x.BatchCancelMark(ctx, p.ID, p.Tenant)
		if err != nil {
			return err
		}
		res.Batch = b
		ids, err := x.BatchRunListCancellable(ctx, p.ID, limit+1)
		if err != nil {
			return err
		}
		if len(ids) > limit {
			ids, res.More = ids[:limit], true
		}
		return ApplyBatchCancel(ctx, x, b.ID, ids, now, &res)
	})
	if err != nil {
		return store.BatchCancelResult{}, fmt.Errorf("cancel batch %s: %w", p.ID, err)
	}
	return res, nil
}

// BatchRunIsHeld is false for a run of no batch.
func (s *Store) BatchRunIsHeld(ctx context.Context, runID string) (bool, error) {
	held, err := s.d.BatchRunIsHeld(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("is run %s held by its batch: %w", runID, err)
	}
	return held, nil
}

func (s *Store) BatchUnfinished(ctx context.Context, limit int) ([]store.Batch, error) {
	bs, err := s.d.BatchListUnfinished(ctx, BatchSweepLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list unfinished batches: %w", err)
	}
	return bs, nil
}

// BatchSweep drops abandoned admissions, then sweeps each unfinished
// batch in a transaction of its own.
func (s *Store) BatchSweep(ctx context.Context, p store.BatchSweepParams) (store.BatchSweepResult, error) {
	now := NowOr(p.Now)
	if err := s.d.BatchAdmissionDropAbandoned(ctx, now.Add(-BatchAdmissionAbandonedAfter)); err != nil {
		return store.BatchSweepResult{}, err
	}
	bs, err := s.BatchUnfinished(ctx, p.Limit)
	if err != nil {
		return store.BatchSweepResult{}, err
	}
	var res store.BatchSweepResult
	for _, b := range bs {
		var r store.BatchSweepResult
		err := s.d.Tx(ctx, func(x driver.Executor) (err error) {
			r, err = ApplyBatchSweep(ctx, x, b.ID, now)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("sweep batch %s: %w", b.ID, err)
		}
		res.Released = append(res.Released, r.Released...)
		res.Finished = append(res.Finished, r.Finished...)
	}
	return res, nil
}
