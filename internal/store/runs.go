package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
)

// RunCreateParams creates a run. ID is generated (time-ordered UUIDv7)
// when empty.
type RunCreateParams struct {
	ID             string
	Tenant         string
	Agent          string
	SessionID      string
	Message        string
	Context        json.RawMessage
	Metadata       map[string]string
	IdempotencyKey string
	MaxTurns       int
	MaxTokens      int64
	Deadline       time.Time
	BatchID        string
	// ParentRunID and Depth make the run a child of another (spawn()).
	ParentRunID string
	Depth       int
	// Events are appended in the same transaction (seq from 1), only
	// when the run is created.
	Events []agentfleet.Event
}

type RunCreateResult struct {
	Run agentfleet.Run
	// Created is false when an earlier run with the same idempotency
	// key was returned instead.
	Created bool
	// Startable is true when the run may start now: it has no session,
	// or every earlier run of its session has ended. A run that is not
	// startable is handed out later as SessionNext.
	Startable bool
	Events    []agentfleet.Event
}

// RunGetByIDParams reads a run; a non-empty Tenant scopes the lookup, so
// another tenant's run is ErrNotFound.
type RunGetByIDParams struct {
	ID     string
	Tenant string
}

// RunListParams filters and pages runs, newest first. An empty Tenant
// lists all tenants (internal use). Cursor is the NextCursor of the
// previous page.
type RunListParams struct {
	Tenant    string
	Status    []agentfleet.RunStatus
	Agent     string
	SessionID string
	BatchID   string
	// ParentRunID lists that run's children.
	ParentRunID string
	Limit       int // zero: 50
	Cursor      string
	// Oldest lists oldest first instead (for resuming parked runs in
	// order).
	Oldest bool
}

type RunListResult struct {
	Runs       []agentfleet.Run
	NextCursor string // empty on the last page
}

type RunTransitionParams struct {
	ID string
	// From lists the statuses the run must be in; empty means any
	// non-terminal status.
	From   []agentfleet.RunStatus
	To     agentfleet.RunStatus
	Error  string
	Answer json.RawMessage
	// IncrementWake bumps Run.Wake (when a parked run resumes).
	IncrementWake bool
	Events        []agentfleet.Event
}

// RunChangeResult is the run after a change, the events appended with
// their seq, and, when the change ended the run and its session has a
// queued run waiting, that run (now the session's head).
type RunChangeResult struct {
	Run    agentfleet.Run
	Events []agentfleet.Event
	// Steps are the steps a TurnCommit stored, as StepListByRun would
	// read them back (numbered, timestamped); nil for other changes. A
	// worker that runs the run's next turn at once builds that turn's
	// history from them instead of loading it.
	Steps       []agentfleet.Step
	SessionNext *agentfleet.Run
}

type RunFamilySettleParams struct {
	ID string
}

// RunFamilySettleResult is what a run's end changed in its family.
type RunFamilySettleResult struct {
	// Changes are the runs changed, with their events to publish: woken
	// parents, and children cancelled at once.
	Changes []RunChangeResult
	// Woken are the parents that resume: their next turn is due.
	Woken []agentfleet.Run
	// Stopping are running children asked to stop at their next turn
	// boundary (a worker running one stops it sooner when told).
	Stopping []agentfleet.Run
	// Released are queued runs of the ended run's batch released now
	// (its max_concurrent has room): their first turn is due.
	Released []agentfleet.Run
}

// Add appends o to r.
func (r *RunFamilySettleResult) Add(o RunFamilySettleResult) {
	r.Changes = append(r.Changes, o.Changes...)
	r.Woken = append(r.Woken, o.Woken...)
	r.Stopping = append(r.Stopping, o.Stopping...)
	r.Released = append(r.Released, o.Released...)
}

type RunFamilySettleDueParams struct {
	Now   time.Time
	Limit int // zero: 100
}

type RunCancelParams struct {
	ID     string
	Tenant string // scopes the lookup when set
	Reason string
	// Events are appended when the run is cancelled at once.
	Events []agentfleet.Event
}

type RunCancelResult struct {
	RunChangeResult
	// Immediate is true when the run is now cancelled; false when a
	// worker will stop it at the next turn boundary.
	Immediate bool
}

// SessionNext finds the run of a session that may start next: its oldest
// queued run, when no other run of it is active (running or waiting).
// Nil when there is none. A worker asks it when a session run ends; the
// dispatcher, of a queued session run that may have been stranded.
func SessionNext(ctx context.Context, s Store, tenant, sessionID string) (*agentfleet.Run, error) {
	active, err := s.RunList(ctx, RunListParams{
		Tenant: tenant, SessionID: sessionID, Limit: 1,
		Status: []agentfleet.RunStatus{agentfleet.StatusRunning, agentfleet.StatusWaitingBudget,
			agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren},
	})
	if err != nil {
		return nil, fmt.Errorf("list active runs of session: %w", err)
	}
	if len(active.Runs) > 0 {
		return nil, nil
	}
	queued, err := s.RunList(ctx, RunListParams{
		Tenant: tenant, SessionID: sessionID, Limit: 1, Oldest: true,
		Status: []agentfleet.RunStatus{agentfleet.StatusQueued},
	})
	if err != nil {
		return nil, fmt.Errorf("list queued runs of session: %w", err)
	}
	if len(queued.Runs) == 0 {
		return nil, nil
	}
	return &queued.Runs[0], nil
}

// RunDeleteEndedParams selects ended runs to delete. EndedBefore is
// required; Limit (1 to RunDeleteEndedLimitMax) bounds one transaction.
type RunDeleteEndedParams struct {
	EndedBefore time.Time
	Limit       int
}

// RunDeleteEndedLimitMax bounds RunDeleteEndedParams.Limit: a delete
// holds its transaction (on SQLite, the one writer) for its whole
// length.
const RunDeleteEndedLimitMax = 10_000

// RunDeleteParams names a run to delete; a non-empty Tenant scopes the
// lookup, so another tenant's run is ErrNotFound.
type RunDeleteParams struct {
	ID     string
	Tenant string
}
