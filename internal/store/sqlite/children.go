package sqlite

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// RunGet reads a run; in SQLite's one write transaction that holds it.
func (t exec) RunGet(ctx context.Context, id string) (rules.RunRow, error) {
	return t.s.runByID(ctx, t.q, id)
}

// RunStatuses reads the statuses of the runs ids names.
func (t exec) RunStatuses(ctx context.Context, ids []string) ([]driver.RunStatus, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return all(ctx, t, `SELECT id, status FROM runs WHERE id IN (SELECT value FROM json_each(?))`, rules.ScanRunStatus,
		string(rules.EncodeStrings(ids)))
}

// RunChildrenUnfinished lists parent's children that have not ended.
func (t exec) RunChildrenUnfinished(ctx context.Context, parent string) ([]string, error) {
	return all(ctx, t, `SELECT id FROM runs WHERE parent_run_id = ? AND `+rules.OpenChildren("")+` ORDER BY seq`, rules.ScanString, parent)
}

// waitersDueSQL finds runs waiting for children that may resume: their
// wait timed out, or none of the runs they wait for is unfinished.
var waitersDueSQL = `SELECT id FROM runs r WHERE status = 'waiting_children' AND (wait_until <= ? OR NOT EXISTS (
		SELECT 1 FROM json_each(r.wait_ids) w JOIN runs k ON k.id = w.value
		WHERE k.status NOT IN (` + rules.TerminalSQL + `)))
	ORDER BY seq LIMIT ?`

func (e exec) RunListWaitersDue(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return all(ctx, e, waitersDueSQL, rules.ScanString, now.UnixMicro(), limit)
}

func (e exec) RunListOrphaning(ctx context.Context, limit int) ([]string, error) {
	return all(ctx, e, rules.OrphanedSQL, rules.ScanString, limit)
}

func (e exec) RunChildrenUsage(ctx context.Context, id string) (agentfleet.Usage, error) {
	return one(ctx, e, rules.RunChildrenUsageSQL, rules.ScanUsage, id)
}
