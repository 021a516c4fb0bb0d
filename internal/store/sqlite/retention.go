package sqlite

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
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
func (s *Store) RunDeleteEnded(ctx context.Context, p store.RunDeleteEndedParams) (int, error) {
	p, err := rules.RunDeleteEnded(p)
	if err != nil {
		return 0, err
	}
	cut := p.EndedBefore.UnixMicro()
	var n int64
	err = s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE seq IN (`+endedRunsSQL+`)`, cut, cut, p.Limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete runs ended before %s: %w", p.EndedBefore.Format("2006-01-02T15:04:05Z07:00"), err)
	}
	return int(n), nil
}

// RunDelete deletes run id; the foreign keys take what belongs to it.
func (t exec) RunDelete(ctx context.Context, id string) error {
	_, err := t.tx.ExecContext(ctx, `DELETE FROM runs WHERE id = ?`, id)
	return err
}
