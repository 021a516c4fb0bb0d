package sqlite

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// endedRunsSQL finds the runs RunDeleteEnded deletes, oldest first,
// through the runs_ended partial index (its predicate is repeated here
// word for word, which is what lets SQLite use it). Left to itself,
// SQLite prefers runs_status for the status list and then sorts every
// ended run; INDEXED BY pins the plan, and a statement that could not use
// the index would fail to prepare rather than scan.
var endedRunsSQL = `SELECT seq FROM runs INDEXED BY runs_ended WHERE ` + rules.EndedBeforeSQL + ` ORDER BY created_at LIMIT ?`

// RunDeleteEnded deletes one batch in one write. The foreign keys
// (enforced on the writer's connection) cascade the delete to steps,
// events, model replies and approvals, each found by its run_id key. The
// write holds the one writer for its length, so callers keep Limit small.
func (e exec) RunDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	cut := before.UnixMicro()
	n, err := e.run(ctx, `DELETE FROM runs WHERE seq IN (`+endedRunsSQL+`)`, cut, cut, limit)
	return int(n), err
}

// RunDelete deletes run id; the foreign keys take what belongs to it.
func (t exec) RunDelete(ctx context.Context, id string) error {
	_, err := t.run(ctx, `DELETE FROM runs WHERE id = ?`, id)
	return err
}
