package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// BatchExecutor reads and writes batches inside a transaction: what
// releasing a batch's held runs and finishing it need.
type BatchExecutor interface {
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
