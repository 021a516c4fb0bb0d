package sqlite

import (
	"context"
	"errors"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// sessionListSQL compares ids in the columns' BINARY collation: bytewise.
var sessionListSQL = rules.SessionListSQL("")

// sessionCheckpointSQL pins steps_summary: without statistics SQLite
// walks each run's every step by the primary key instead.
var sessionCheckpointSQL = rules.SessionCheckpointSQL(" INDEXED BY steps_summary")

func (e exec) SessionList(ctx context.Context, tenant, agent string, after driver.SessionPos, limit int) ([]store.Session, error) {
	return all(ctx, e, sessionListSQL, scans.Session, tenant, agent, after.UpdatedAt.UnixMicro(), after.ID, limit)
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

// SessionLock reads the statuses; inside the write transaction, the one
// writer holds the session as it holds everything.
func (e exec) SessionLock(ctx context.Context, tenant, id string) ([]driver.RunStatus, error) {
	return all(ctx, e, rules.SessionStatusesSQL, rules.ScanRunStatus, tenant, id)
}

// SessionDeleteEnded deletes in one write; the foreign keys cascade to
// what belongs to the runs.
func (e exec) SessionDeleteEnded(ctx context.Context, tenant, id string) (int, error) {
	n, err := e.run(ctx, rules.SessionDeleteEndedSQL, tenant, id)
	return int(n), err
}
