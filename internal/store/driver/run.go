package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// RunExecutor reads and writes runs and their events inside a
// transaction: what a transition, a cancel, a run's end, a wake and a
// delete read and write, and in what order, is written once in the rules
// over these. A backend that locks rows (PostgreSQL) locks what RunLock
// reads; one with a single writer (SQLite) holds everything it reads.
// They are called inside Driver.Tx.
type RunExecutor interface {
	// RunLock reads run id and holds it for the rest of the transaction;
	// a missing run is store.ErrNotFound.
	RunLock(ctx context.Context, id string) (RunRow, error)
	// RunGet reads run id without locking it; a missing run is
	// store.ErrNotFound.
	RunGet(ctx context.Context, id string) (RunRow, error)
	// RunUpdate writes the columns a transition or a cancel changes
	// (status, error, answer, wake, event seq, cancel requested and its
	// reason, updated at) and returns the run as stored.
	RunUpdate(ctx context.Context, r RunRow) (RunRow, error)
	// EventInsert stores numbered events of run runID that follow its
	// event seq lastSeq.
	EventInsert(ctx context.Context, runID string, lastSeq int64, evs []agentfleet.Event) error
	// RunSessionHead reads the oldest unfinished run of tenant's
	// session (nil: none), taking the session's lock first where the
	// backend has one: what a run's end hands out (rules.SessionHead).
	RunSessionHead(ctx context.Context, tenant, session string) (*RunRow, error)
	// RunStartable reports whether a queued run may start now: no earlier
	// run of its session is unfinished.
	RunStartable(ctx context.Context, r agentfleet.Run) (bool, error)
	// RunStatuses reads the statuses of the runs ids names that exist.
	RunStatuses(ctx context.Context, ids []string) ([]RunStatus, error)
	// RunChildrenUnfinished lists the ids of parent's children that have
	// not ended, oldest first.
	RunChildrenUnfinished(ctx context.Context, parent string) ([]string, error)
	// RunListWaitersDue lists up to limit runs waiting for children that
	// may resume: their wait ended by now, or none of the runs they wait
	// for is unfinished; oldest first. Outside a transaction.
	RunListWaitersDue(ctx context.Context, now time.Time, limit int) ([]string, error)
	// RunListOrphaning lists up to limit ended runs with children not
	// ended and not asked to cancel. Outside a transaction.
	RunListOrphaning(ctx context.Context, limit int) ([]string, error)
	// RunChildrenUsage sums the usage of every run below id.
	RunChildrenUsage(ctx context.Context, id string) (agentfleet.Usage, error)
	// RunList reads the page of runs p asks for (rules.RunListQuery),
	// after list position after.
	RunList(ctx context.Context, p store.RunListParams, after int64) ([]RunRow, error)
	// RunCountActive counts a tenant's running runs.
	RunCountActive(ctx context.Context, tenant string) (int, error)
	// RunCountByStatus counts a tenant's runs by status (Key).
	RunCountByStatus(ctx context.Context, tenant string) ([]Count, error)
	// RunDeleteEnded deletes up to limit runs ended before before, oldest
	// first, with what belongs to them, and counts them. Sweeps that
	// overlap take different runs.
	RunDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error)
	// StepList reads a run's steps of turns [from, to) in order.
	StepList(ctx context.Context, runID string, from, to int) ([]agentfleet.Step, error)
	// EventList reads a run's events after p.AfterSeq in order, at most
	// p.Limit when it is positive; an unknown run has none.
	EventList(ctx context.Context, p store.EventListByRunParams) ([]agentfleet.Event, error)
	// EventAppend numbers evs after the run's last event (as
	// rules.Number does) and stores them with the run's event seq moved
	// on, in one write; it returns the run's id, tenant and session and
	// the seq the events follow. An unknown run is store.ErrNotFound.
	EventAppend(ctx context.Context, runID string, evs []agentfleet.Event) (agentfleet.Run, int64, error)
	// ModelReplyGet reads the recorded reply of a turn.
	ModelReplyGet(ctx context.Context, runID string, turn int) (store.ModelReply, error)
	// RunDelete deletes run id and what belongs to it (steps, events,
	// replies, journal, approvals).
	RunDelete(ctx context.Context, id string) error
}

// RunRow is a run as a backend reads it: the domain run plus the columns
// callers never see.
type RunRow struct {
	agentfleet.Run
	// Seq is the run's insertion position: list order and cursors, and
	// the order of runs within a session.
	Seq int64
	// CancelReason is the reason of a cancel requested while a turn ran.
	CancelReason string
}

// RunStatus is a run's status.
type RunStatus struct {
	ID     string
	Status agentfleet.RunStatus
}
