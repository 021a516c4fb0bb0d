package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// SessionExecutor reads sessions, which are nothing but their runs (the
// runs of one tenant and session id, a batch's runs being admitted
// left out), and deletes them.
type SessionExecutor interface {
	// SessionList reads up to limit sessions of tenant updated before
	// after, newest updated first (then by id, bytewise, descending);
	// with agent set only those whose latest run is of that agent.
	SessionList(ctx context.Context, tenant, agent string, after SessionPos, limit int) ([]store.Session, error)
	// SessionGet reads one session; one without runs is
	// store.ErrNotFound.
	SessionGet(ctx context.Context, tenant, id string) (store.Session, error)
	// SessionRuns reads the session's latest limit runs, newest first.
	SessionRuns(ctx context.Context, tenant, id string, limit int) ([]RunRow, error)
	// SessionCheckpoint reads the newest step of kind summary among the
	// session's runs (by run, then turn and index); nil when none.
	SessionCheckpoint(ctx context.Context, tenant, id string) (*agentfleet.Step, error)
	// SessionLock reads the id and status of each of the session's runs,
	// oldest first, taking the session's lock first where the backend
	// has one (as RunSessionHead does), so that no run joins the session
	// before the transaction ends.
	SessionLock(ctx context.Context, tenant, id string) ([]RunStatus, error)
	// SessionDeleteEnded deletes the session's ended runs with what
	// belongs to them, as RunDeleteEnded does, and counts them.
	SessionDeleteEnded(ctx context.Context, tenant, id string) (int, error)
}

// SessionPos is where a session listing continues: after the session
// updated at UpdatedAt with ID.
type SessionPos struct {
	UpdatedAt time.Time
	ID        string
}
