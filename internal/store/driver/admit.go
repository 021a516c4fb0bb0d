package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Admitter holds the coarse primitives under the rules' BatchAdmit.
type Admitter interface {
	// BatchAdmissionBegin starts p's admission at now: it inserts the
	// batch (total 0, rules.BatchAdmitting, which no read sees) and reads
	// the current version of its agent, which every run of the admission
	// gets. An agent the tenant lacks is store.ErrUnknownAgent, a batch id
	// or idempotency key taken store.ErrConflict; nothing is left behind.
	BatchAdmissionBegin(ctx context.Context, p store.BatchAdmitParams, now time.Time) (Admission, error)
}

// Admission is one batch's admission as a backend keeps it: on PostgreSQL
// one transaction from BatchAdmissionBegin to Commit, on SQLite a write
// transaction per call and chunk, its runs stored admitting (invisible)
// until the commit. Nothing it writes is visible before Commit returns.
type Admission interface {
	// Append reads the runs holding any of c.Keys (nothing when it has
	// none) and calls refuse with them: when refuse returns an error,
	// Append writes nothing and returns it; else it writes c's runs (with
	// the admission's agent version), steps and events.
	Append(ctx context.Context, c BatchChunk, refuse func([]BatchKeyHolder) error) error
	// Commit makes the admission's c.Total runs queued and visible and
	// writes c to the batch, which it returns as stored.
	Commit(ctx context.Context, c BatchCommit) (store.Batch, error)
	// Abort removes what the admission wrote (appended: how many runs).
	// It is safe after a failed Commit.
	Abort(ctx context.Context, appended int) error
}

// BatchChunk is one Append: runs (status queued, in input order), each
// run's first step and queued event, and the runs' idempotency keys.
type BatchChunk struct {
	Runs   []store.BatchRun
	Steps  []agentfleet.Step
	Events []agentfleet.Event
	Keys   []string
}

// BatchKeyHolder is a run found holding one of a chunk's keys.
type BatchKeyHolder struct {
	Key, RunID, BatchID string
	Index               int
}

// BatchCommit is what an admission's commit writes to its batch.
type BatchCommit struct {
	store.BatchCommitParams
	Status   store.BatchStatus
	Total    int
	Released int
	// FinishedAt is set for a batch finished at its commit (no runs).
	FinishedAt time.Time
}
