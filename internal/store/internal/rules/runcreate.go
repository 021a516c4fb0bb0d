package rules

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// RunCreate validates p, admits the run through the queue gate and
// inserts it with its first step and events. A repeated idempotency key
// returns the run created first, which a full queue does not refuse.
func (s *Store) RunCreate(ctx context.Context, p store.RunCreateParams) (store.RunCreateResult, error) {
	p, err := RunCreate(p)
	if err != nil {
		return store.RunCreateResult{}, err
	}
	done, err := s.Queue.Admit(ctx, p.Tenant, 1, s.queueCount)
	var full *store.QueueFullError
	if errors.As(err, &full) && p.IdempotencyKey != "" {
		// A repeat of a run already admitted is never refused.
		if res, err := s.runByIdempotency(ctx, p); !errors.Is(err, store.ErrNotFound) {
			return res, err
		}
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run for tenant %s: %w", p.Tenant, err)
	}
	created := 0 // of the one admitted
	defer func() { done(created) }()
	now := Now()
	evs, err := Events(p.Events, 0, now)
	if err != nil {
		return store.RunCreateResult{}, err
	}
	run := NewRun(p, now)
	run.EventSeq = int64(len(evs))
	Number(evs, run, 0)
	row, free, inserted, err := s.d.RunInsert(ctx, run, evs)
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run %s for tenant %s: %w", p.ID, p.Tenant, err)
	}
	if inserted {
		created = 1
		return store.RunCreateResult{Run: row, Created: true, Startable: free, Events: evs}, nil
	}
	// Nothing inserted: the idempotency key was seen before, or the
	// agent is not the tenant's.
	unknownAgent := fmt.Errorf("create run for tenant %s: agent %q: %w", p.Tenant, p.Agent, store.ErrUnknownAgent)
	if p.IdempotencyKey == "" {
		return store.RunCreateResult{}, unknownAgent
	}
	res, err := s.runByIdempotency(ctx, p)
	if errors.Is(err, store.ErrNotFound) {
		return store.RunCreateResult{}, unknownAgent
	}
	return res, err
}

// runByIdempotency is RunCreate's answer when the idempotency key was
// seen before: that run, and whether it may start now.
func (s *Store) runByIdempotency(ctx context.Context, p store.RunCreateParams) (store.RunCreateResult, error) {
	prev, err := s.d.RunGetByIdempotency(ctx, p.Tenant, p.IdempotencyKey)
	res := store.RunCreateResult{Run: prev.Run}
	if err == nil {
		res.Startable, err = startable(ctx, s.d, prev.Run)
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run for tenant %s with idempotency key %q: %w", p.Tenant, p.IdempotencyKey, err)
	}
	return res, nil
}

// startable reports whether run r may start now: it is queued and no
// earlier run of its session is unfinished.
func startable(ctx context.Context, x driver.Executor, r agentfleet.Run) (bool, error) {
	if r.Status != agentfleet.StatusQueued {
		return false, nil
	}
	if r.SessionID == "" {
		return true, nil
	}
	return x.RunStartable(ctx, r)
}

// queueCount is the driver's QueueCount, its error saying what it
// counted.
func (s *Store) queueCount(ctx context.Context, tenant string) (limit, unfinished int, err error) {
	if limit, unfinished, err = s.d.QueueCount(ctx, tenant); err != nil {
		return 0, 0, fmt.Errorf("count unfinished runs of tenant %s: %w", tenant, err)
	}
	return limit, unfinished, nil
}
