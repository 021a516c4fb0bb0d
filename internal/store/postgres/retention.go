package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// deleteEndedSQL deletes one batch of ended runs, oldest first, found
// through the runs_ended partial index. SKIP LOCKED lets sweeps that
// overlap (two dispatchers, one losing its lease) take different runs
// instead of queueing on each other's. The runs_delete_children trigger
// (0003) takes the steps, events and model replies of all of them in one
// statement each, and the approvals' foreign key cascades.
var deleteEndedSQL = numberParams(`DELETE FROM runs WHERE id IN (
	SELECT id FROM runs WHERE ` + rules.EndedBeforeSQL + ` ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED)`)

// RunDeleteEnded deletes one batch in one statement. Its locks are on the
// ended runs it deletes and their rows only, which nothing else writes,
// so turn commits never wait on it; the batch size bounds its length.
func (s *Store) RunDeleteEnded(ctx context.Context, p store.RunDeleteEndedParams) (int, error) {
	p, err := rules.RunDeleteEnded(p)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.withConn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, deleteEndedSQL, p.EndedBefore, p.EndedBefore, p.Limit)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete runs ended before %s: %w", p.EndedBefore.Format(time.RFC3339), mapErr(err))
	}
	return int(n), nil
}

// RunDelete deletes run id; the trigger and the foreign keys take what
// belongs to it.
func (t exec) RunDelete(ctx context.Context, id string) error {
	_, err := t.tx.Exec(ctx, `DELETE FROM runs WHERE id = $1`, id)
	return err
}
