package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"

	"github.com/agentfleet/agentfleet/internal/store"
)

// BatchExecutor reads and writes batches. BatchLock to BatchFinish are
// what releasing a batch's held runs and finishing it need, inside a
// transaction. A batch being admitted is invisible to every read.
type BatchExecutor interface {
	// BatchGet reads a batch, of tenant when tenant is not empty.
	BatchGet(ctx context.Context, id, tenant string) (store.Batch, error)
	// BatchGetByKey reads the tenant's batch of idempotency key key (not
	// empty); none is store.ErrNotFound.
	BatchGetByKey(ctx context.Context, tenant, key string) (store.Batch, error)
	// BatchCountRuns counts the batch's runs and sums their usage by
	// status.
	BatchCountRuns(ctx context.Context, id string) ([]BatchStatusCount, error)
	// BatchList reads up to limit of a tenant's batches by id
	// descending, below afterID when it is not empty.
	BatchList(ctx context.Context, tenant, afterID string, limit int) ([]store.Batch, error)
	// BatchRunList reads up to p.Limit of the batch's runs after index
	// p.AfterIndex in input order, of p.Status when it names any.
	BatchRunList(ctx context.Context, p store.BatchRunListParams) ([]store.BatchRun, error)
	// BatchRunIsHeld reports whether a run of a batch is queued and not
	// released yet; a run of no batch is store.ErrNotFound.
	BatchRunIsHeld(ctx context.Context, runID string) (bool, error)
	// BatchListUnfinished reads up to limit batches not finished, by id.
	BatchListUnfinished(ctx context.Context, limit int) ([]store.Batch, error)
	// BatchCancelMark moves a running batch (of tenant when set) to
	// cancelled and returns it as it is now (a finished one unchanged).
	BatchCancelMark(ctx context.Context, id, tenant string) (store.Batch, error)
	// BatchRunListCancellable lists the ids of up to limit of the
	// batch's runs not ended and not asked to cancel, in input order.
	BatchRunListCancellable(ctx context.Context, id string, limit int) ([]string, error)
	// BatchAdmissionDropAbandoned deletes what admissions started before
	// before left that neither committed nor aborted (their process
	// died). A backend whose admission is one transaction has none.
	BatchAdmissionDropAbandoned(ctx context.Context, before time.Time) error

	// BatchLock reads batch id and holds it for the rest of the
	// transaction; a missing batch is store.ErrNotFound.
	BatchLock(ctx context.Context, id string) (store.Batch, error)
	// BatchCountInFlight counts the batch's released runs (index below
	// released) not ended.
	BatchCountInFlight(ctx context.Context, id string, released int) (int, error)
	// BatchListOpen lists up to limit of the batch's runs not ended from
	// index from on, in input order.
	BatchListOpen(ctx context.Context, id string, from, limit int) ([]store.BatchRun, error)
	// BatchSetReleased stores the batch's released count.
	BatchSetReleased(ctx context.Context, id string, released int) error
	// BatchHasOpen reports whether any run of the batch has not ended.
	BatchHasOpen(ctx context.Context, id string) (bool, error)
	// BatchFinish sets the batch's status and finished_at.
	BatchFinish(ctx context.Context, id string, status store.BatchStatus, at time.Time) (store.Batch, error)
}

// BatchStatusCount is how many of a batch's runs have a status, and
// their usage.
type BatchStatusCount struct {
	Status agentfleet.RunStatus
	N      int
	Usage  agentfleet.Usage
}
