package rules

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// BatchAdmit validates p, returns the batch of its idempotency key when
// one was admitted before, and else starts the driver's admission.
func (s *Store) BatchAdmit(ctx context.Context, p store.BatchAdmitParams) (store.BatchAdmitResult, error) {
	p, err := BatchAdmit(p)
	if err != nil {
		return store.BatchAdmitResult{}, err
	}
	if p.IdempotencyKey != "" {
		b, err := s.d.BatchGetByKey(ctx, p.Tenant, p.IdempotencyKey)
		if err == nil {
			return store.BatchAdmitResult{Existing: &b}, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return store.BatchAdmitResult{}, fmt.Errorf("look up batch by idempotency key: %w", err)
		}
	}
	d, err := s.d.BatchAdmissionBegin(ctx, p, Now())
	if errors.Is(err, store.ErrUnknownAgent) {
		err = fmt.Errorf("agent %q: %w", p.Agent, err)
	}
	if err != nil {
		return store.BatchAdmitResult{}, fmt.Errorf("admit batch %s: %w", p.ID, err)
	}
	return store.BatchAdmitResult{Admission: &admission{s: s, p: p, d: d}}, nil
}

// admission is store.BatchAdmission over the driver's: inputs in order
// through the queue gate, the idempotency keys checked, a chunk at a
// time.
type admission struct {
	s     *Store
	p     store.BatchAdmitParams
	d     driver.Admission
	next  int // the index of the next input; how many runs were appended
	ended bool
}

func (a *admission) Append(ctx context.Context, inputs []store.BatchInput) error {
	if a.ended {
		return Invalidf("batch %s: admission ended", a.p.ID)
	}
	rows, err := BatchRows(a.p, inputs, a.next, Now())
	if err != nil || len(rows) == 0 {
		return err
	}
	done, err := a.s.Queue.Admit(ctx, a.p.Tenant, len(rows), a.s.queueCount)
	if err != nil {
		return fmt.Errorf("admit batch %s: %w", a.p.ID, err)
	}
	created := 0
	defer func() { done(created) }()
	c := driver.BatchChunk{Runs: rows, Steps: make([]agentfleet.Step, len(rows)), Events: make([]agentfleet.Event, len(rows)), Keys: BatchKeys(rows)}
	for i, r := range rows {
		c.Steps[i], c.Events[i] = UserStep(r.Run), store.BatchQueuedEvent(r.Run)
	}
	err = a.d.Append(ctx, c, func(holders []driver.BatchKeyHolder) error { return BatchKeysRefusal(a.p.ID, rows, holders) })
	if err != nil {
		var refused *store.BatchInputError
		if errors.As(err, &refused) {
			return refused
		}
		return fmt.Errorf("admit inputs %d to %d of batch %s: %w", a.next, a.next+len(rows)-1, a.p.ID, err)
	}
	created = len(rows)
	a.next += len(rows)
	return nil
}

func (a *admission) Commit(ctx context.Context, p store.BatchCommitParams) (store.Batch, error) {
	if a.ended {
		return store.Batch{}, Invalidf("batch %s: admission ended", a.p.ID)
	}
	if err := BatchCommit(p); err != nil {
		return store.Batch{}, err
	}
	c := driver.BatchCommit{BatchCommitParams: p, Status: store.BatchRunning, Total: a.next,
		Released: BatchReleasedAtCommit(a.next, p.MaxConcurrent)}
	if a.next == 0 {
		c.Status, c.FinishedAt = store.BatchCompleted, Now()
	}
	b, err := a.d.Commit(ctx, c)
	if err != nil {
		return store.Batch{}, fmt.Errorf("commit batch %s: %w", a.p.ID, err)
	}
	a.ended = true
	return b, nil
}

func (a *admission) Abort(ctx context.Context) error {
	if a.ended {
		return nil
	}
	if err := a.d.Abort(ctx, a.next); err != nil {
		return fmt.Errorf("abort batch %s: %w", a.p.ID, err)
	}
	a.ended = true
	return nil
}
