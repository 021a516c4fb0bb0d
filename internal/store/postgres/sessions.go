package postgres

import (
	"context"
	"errors"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// sessionListSQL compares session ids as "C": bytewise, as SQLite does.
var sessionListSQL = rules.SessionListSQL(` COLLATE "C"`)

// sessionCheckpointSQL leaves the choice of index to the planner, whose
// statistics know how few steps are summaries.
var sessionCheckpointSQL = rules.SessionCheckpointSQL("")

func (e exec) SessionList(ctx context.Context, tenant, agent string, after driver.SessionPos, limit int) ([]store.Session, error) {
	return all(ctx, e, sessionListSQL, scans.Session, tenant, agent, after.UpdatedAt, after.ID, limit)
}

func (e exec) SessionGet(ctx context.Context, tenant, id string) (store.Session, error) {
	return one(ctx, e, rules.SessionGetSQL, scans.Session, tenant, id)
}

func (e exec) SessionRuns(ctx context.Context, tenant, id string, limit int) ([]driver.RunRow, error) {
	return all(ctx, e, rules.SessionRunsSQL, scans.RunRow, tenant, id, limit)
}

func (e exec) SessionCheckpoint(ctx context.Context, tenant, id string) (*agentfleet.Step, error) {
	x, err := one(ctx, e, sessionCheckpointSQL, scans.Step, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &x, nil
}

// SessionLock takes the lock a session's run creations and ends take
// (lockSessionSQL), so no run joins the session while it is deleted.
func (e exec) SessionLock(ctx context.Context, tenant, id string) ([]driver.RunStatus, error) {
	if _, err := e.run(ctx, lockSessionSQL, lockSession, tenant, id); err != nil {
		return nil, err
	}
	return all(ctx, e, rules.SessionStatusesSQL, rules.ScanRunStatus, tenant, id)
}

// SessionDeleteEnded is one statement; the runs_delete_children trigger
// (0003) and the foreign keys take what belongs to the runs.
func (e exec) SessionDeleteEnded(ctx context.Context, tenant, id string) (int, error) {
	n, err := e.run(ctx, rules.SessionDeleteEndedSQL, tenant, id)
	return int(n), err
}
