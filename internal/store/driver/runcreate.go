package driver

import (
	"context"

	"github.com/agentfleet/agentfleet"
)

// RunCreator holds the coarse primitives under the rules' RunCreate: the
// queue gate's count, the run's insert (on PostgreSQL one round trip,
// shared through the pipeline when the run has no session; on SQLite one
// write of the group commit) and the lookup of a repeated idempotency key.
type RunCreator interface {
	// QueueCount is rules.QueueCount: tenant's max_queued_runs and its
	// unfinished runs, counted no further than one past it. An unknown
	// tenant is store.ErrNotFound.
	QueueCount(ctx context.Context, tenant string) (limit, unfinished int, err error)
	// RunInsert inserts r (rules.NewRun, its event seq set) under the
	// current version of its agent, with its first step (rules.UserStep)
	// and its events evs (numbered by rules.Number), and returns it as
	// stored with whether it may start now: no earlier run of its session
	// is unfinished, read under the session's lock where the backend has
	// one, so that of two runs created at once only the first is.
	// inserted false means nothing was written: the tenant has a run with
	// r's idempotency key already, or has no agent r.Agent.
	RunInsert(ctx context.Context, r agentfleet.Run, evs []agentfleet.Event) (run agentfleet.Run, startable, inserted bool, err error)
	// RunGetByIdempotency reads tenant's run with idempotency key key
	// (not empty); none is store.ErrNotFound.
	RunGetByIdempotency(ctx context.Context, tenant, key string) (RunRow, error)
}
