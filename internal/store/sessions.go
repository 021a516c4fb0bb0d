package store

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// Session is a session as its runs make it: the runs of one (tenant,
// session id). Agent, LastRunID and LastStatus are its latest run's;
// Usage sums its runs' own usage; CreatedAt is its first run's creation,
// UpdatedAt the latest change of any of its runs.
type Session struct {
	ID, Tenant string
	Agent      string
	Runs       int
	LastRunID  string
	LastStatus agentfleet.RunStatus
	Usage      agentfleet.Usage
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// SessionListParams page a tenant's sessions, newest updated first
// (sessions updated in the same microsecond by id, descending). Agent
// keeps those whose latest run is of that agent. Limit zero is 50, at
// most 1000; Cursor is the NextCursor of the previous page.
type SessionListParams struct {
	Tenant string
	Agent  string
	Limit  int
	Cursor string
}

type SessionListResult struct {
	Sessions   []Session
	NextCursor string // empty on the last page
}

// SessionRunsMax bounds the runs SessionGet returns: a longer session
// shows its latest SessionRunsMax (Session.Runs counts them all).
const SessionRunsMax = 1000

// SessionGetParams name one session of a tenant.
type SessionGetParams struct {
	Tenant, ID string
}

// SessionDetail is a session with its runs in order (oldest first) and
// its latest checkpoint: the newest step of kind agentfleet.StepSummary
// among its runs (nil when none).
type SessionDetail struct {
	Session
	RunList    []agentfleet.Run
	Checkpoint *agentfleet.Step
}

// SessionDeleteParams name the session whose runs SessionDelete deletes.
type SessionDeleteParams struct {
	Tenant, ID string
}
