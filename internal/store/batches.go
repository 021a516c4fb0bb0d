package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
)

// BatchStatus is where a batch stands. A batch being admitted is
// invisible; it runs until every run has ended (completed), or was
// cancelled.
type BatchStatus string

const (
	BatchRunning   BatchStatus = "running"
	BatchCompleted BatchStatus = "completed"
	BatchCancelled BatchStatus = "cancelled"
)

// Batch is many runs admitted at once, one per input, their results
// gathered in input order.
type Batch struct {
	ID     string
	Tenant string
	Agent  string
	Status BatchStatus
	Total  int
	// MaxConcurrent caps the batch's runs in flight (0: no cap);
	// Released is how many of its runs, in input order, may have started.
	MaxConcurrent  int
	Released       int
	MaxTurns       int
	MaxTokens      int64
	Metadata       map[string]string
	IdempotencyKey string
	CallbackURL    string
	// RetryOf is the batch whose failed inputs this one submits again.
	RetryOf    string
	CreatedAt  time.Time
	FinishedAt time.Time // zero until every run has ended
	// Counts and Usage are filled by BatchGetByID: the runs by status
	// and their summed usage.
	Counts map[agentfleet.RunStatus]int
	Usage  agentfleet.Usage
}

// BatchAdmitParams starts a batch's admission. ID is generated (UUIDv7)
// when empty. Agent, MaxTurns and MaxTokens apply to every input.
type BatchAdmitParams struct {
	ID             string
	Tenant         string
	Agent          string
	MaxConcurrent  int
	MaxTurns       int
	MaxTokens      int64
	Metadata       map[string]string
	IdempotencyKey string
	CallbackURL    string
	RetryOf        string
}

type BatchAdmitResult struct {
	// Admission is the batch being admitted; nil with Existing.
	Admission BatchAdmission
	// Existing is the batch admitted before with the same idempotency
	// key.
	Existing *Batch
}

// BatchInput is one input of a batch: one run. Index is its 0-based
// position; inputs are appended in order.
type BatchInput struct {
	Index          int
	CustomID       string
	Message        string
	Context        json.RawMessage
	Metadata       map[string]string
	SessionID      string
	IdempotencyKey string
}

// BatchInputError is an input the store refused: Err is ErrInvalid, or
// ErrConflict for an idempotency key of another run (or of an earlier
// input of the batch).
type BatchInputError struct {
	Index int
	Err   error
	Msg   string
}

func (e *BatchInputError) Error() string { return fmt.Sprintf("input %d: %s", e.Index, e.Msg) }
func (e *BatchInputError) Unwrap() error { return e.Err }

// BatchAdmission is one batch's admission in progress. It is not safe
// for concurrent use; Commit or Abort ends it.
type BatchAdmission interface {
	// Append stores inputs (at most BatchChunkMax) as runs of the batch.
	// A refused input is a *BatchInputError; the caller then aborts.
	Append(ctx context.Context, inputs []BatchInput) error
	// Commit makes the batch and its runs visible, all queued, the first
	// min(total, MaxConcurrent) released (all without a cap), with each
	// run's queued event (seq 1) stored. The batch-wide settings known
	// only after the inputs are given here.
	Commit(ctx context.Context, p BatchCommitParams) (Batch, error)
	// Abort removes what was written. It is safe after a failed Commit
	// and a no-op after a successful one.
	Abort(ctx context.Context) error
}

// BatchQueuedEvent is a batch run's queued event (seq 1): what
// BatchAdmission stores for each run, and what the caller publishes after
// the commit, built again from the run rather than read back.
func BatchQueuedEvent(r agentfleet.Run) agentfleet.Event {
	return agentfleet.Event{V: agentfleet.EventVersion, RunID: r.ID, Tenant: r.Tenant, SessionID: r.SessionID, Seq: 1,
		Type: agentfleet.EventQueued, TS: r.CreatedAt, Content: r.Message, Summary: "agent " + r.Agent + ", batch " + r.BatchID}
}

// BatchChunkMax bounds one Append: on SQLite one chunk is one write
// transaction, so the one writer is never held for long.
const BatchChunkMax = 2000

type BatchCommitParams struct {
	MaxConcurrent int
	Metadata      map[string]string
	CallbackURL   string
}

type BatchGetByIDParams struct {
	ID     string
	Tenant string
}

type BatchListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type BatchListResult struct {
	Batches    []Batch
	NextCursor string // empty on the last page
}

type BatchRunListParams struct {
	ID         string
	AfterIndex int // -1: from the first input
	Limit      int // zero: 1,000
	// Status, when set, reads only runs in these statuses.
	Status []agentfleet.RunStatus
}

// BatchRun is one input's run, with its position.
type BatchRun struct {
	Index    int
	CustomID string
	Run      agentfleet.Run
}

type BatchCancelParams struct {
	ID     string
	Tenant string
	Limit  int // zero: 500
}

type BatchCancelResult struct {
	Batch Batch
	// Cancelled are the runs cancelled at once, with their events;
	// Stopping the running ones asked to stop at their next turn.
	Cancelled []RunCancelResult
	Stopping  []agentfleet.Run
	More      bool
}

type BatchSweepParams struct {
	Now   time.Time
	Limit int // zero: 100 batches
}

type BatchSweepResult struct {
	// Released are queued runs released now: their first turn is due.
	Released []agentfleet.Run
	// Finished are the batches that finished now.
	Finished []Batch
}
