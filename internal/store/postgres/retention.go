package postgres

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// deleteEndedSQL deletes one batch of ended runs, oldest first, found
// through the runs_ended partial index. SKIP LOCKED lets sweeps that
// overlap (two dispatchers, one losing its lease) take different runs
// instead of queueing on each other's. The runs_delete_children trigger
// (0003) takes the steps, events and model replies of all of them in one
// statement each, and the approvals' foreign key cascades.
var deleteEndedSQL = rules.NumberParams(`DELETE FROM runs WHERE id IN (
	SELECT id FROM runs WHERE ` + rules.EndedBeforeSQL + ` ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED)`)

// RunDeleteEnded is one statement. Its locks are on the
// ended runs it deletes and their rows only, which nothing else writes,
// so turn commits never wait on it; the batch size bounds its length.
func (e exec) RunDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := e.run(ctx, deleteEndedSQL, before, before, limit)
	return int(n), err
}

// RunDelete deletes run id; the trigger and the foreign keys take what
// belongs to it.
func (t exec) RunDelete(ctx context.Context, id string) error {
	_, err := t.q().Exec(ctx, `DELETE FROM runs WHERE id = $1`, id)
	return err
}
