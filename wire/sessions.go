package wire

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// Session is a session as GET /v1/sessions lists it: the runs of one
// session id, read from them. Agent, LastRunID and LastStatus are its
// latest run's; Tokens sums its runs' prompt and completion tokens;
// CreatedAt is its first run's creation, UpdatedAt the latest change of
// any of its runs.
type Session struct {
	ID         string               `json:"id"`
	Agent      string               `json:"agent"`
	Runs       int                  `json:"runs"`
	LastRunID  string               `json:"last_run_id"`
	LastStatus agentfleet.RunStatus `json:"last_status"`
	Tokens     int64                `json:"tokens"`
	CreatedAt  time.Time            `json:"created_at"`
	UpdatedAt  time.Time            `json:"updated_at"`
}

// SessionList is a page of GET /v1/sessions, newest updated first.
type SessionList struct {
	Sessions   []Session `json:"sessions"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// SessionView is GET /v1/sessions/{id}: the session, its runs oldest
// first (the latest 1,000 of a longer one), and its latest checkpoint,
// the newest summary step among its runs (null when none).
type SessionView struct {
	Session    Session          `json:"session"`
	Runs       []agentfleet.Run `json:"runs"`
	Checkpoint *agentfleet.Step `json:"checkpoint"`
}

// SessionDeleted is the answer of DELETE /v1/sessions/{id}: how many
// runs went.
type SessionDeleted struct {
	ID      string `json:"id"`
	Deleted int    `json:"deleted"`
}
