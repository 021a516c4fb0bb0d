package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// CallbackExecutor stores tenants' callback secrets and runs' end
// callbacks.
type CallbackExecutor interface {
	// CallbackSecretUpsert sets a tenant's secret (at now).
	CallbackSecretUpsert(ctx context.Context, tenant, secret string, now time.Time) error
	CallbackSecretGet(ctx context.Context, tenant string) (string, error)

	// RunCallbackInsert stores a pending callback of a run, due at now.
	// A second one for the run is store.ErrConflict.
	RunCallbackInsert(ctx context.Context, runID, tenant, url string, now time.Time) (store.RunCallback, error)
	RunCallbackGet(ctx context.Context, runID string) (store.RunCallback, error)
	// RunCallbackClaim moves up to limit pending callbacks due by now,
	// of runs that ended, soonest due first, to be due again at until;
	// rows another claim holds are skipped, so claims at once take
	// different callbacks.
	RunCallbackClaim(ctx context.Context, now, until time.Time, limit int) ([]store.RunCallback, error)
	// RunCallbackLogLock reads a callback's attempt log (stored JSON),
	// locking the row until the transaction ends.
	RunCallbackLogLock(ctx context.Context, runID string) ([]byte, error)
	// RunCallbackUpdate records an attempt: the state, the new log, the
	// next due time, the first attempt's time (kept once set), one more
	// attempt, updated at Now.
	RunCallbackUpdate(ctx context.Context, p RunCallbackUpdateParams) (store.RunCallback, error)
	// RunCallbackDeleteOrphans deletes the callbacks created before
	// before whose run is gone, and counts them.
	RunCallbackDeleteOrphans(ctx context.Context, before time.Time) (int, error)
}

// RunCallbackUpdateParams are RunCallbackUpdate's.
type RunCallbackUpdateParams struct {
	RunID                string
	State                store.CallbackState
	Log                  []byte
	NextAt, FirstAt, Now time.Time
}
