package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// RunLoad reads on the read pool and goes through the writer only to
// start the run. The update is fenced again, and a run changed meanwhile
// is re-read as it is.
func (d liteDriver) RunLoad(ctx context.Context, p store.TurnLoadParams, now time.Time) (store.TurnLoadResult, error) {
	var res store.TurnLoadResult
	var unlimited sql.NullBool
	row, err := scans.Run(d.s.rd.QueryRowContext(ctx, `SELECT
		(SELECT t.token_limit = 0 AND t.tokens_per_minute = 0 FROM tenants t WHERE t.id = runs.tenant),
		COALESCE((SELECT v.revision FROM skill_revisions v WHERE v.tenant = runs.tenant), 0), `+rules.RunCols+`
		FROM runs WHERE id = ?`, p.RunID), &unlimited, &res.SkillsRevision)
	if err != nil {
		return res, mapErr(err)
	}
	res.TenantUnlimited = unlimited.Valid && unlimited.Bool
	if rules.TurnStarts(row.Run, p.Turn) {
		err = d.s.write(ctx, func(tx *wtx) error {
			started, err := scans.Run(tx.QueryRowContext(ctx, `UPDATE runs SET status = ?, updated_at = ?
				WHERE id = ? AND status = ? AND turn = ? AND cancel_requested = 0 RETURNING `+rules.RunCols,
				string(agentfleet.StatusRunning), now.UnixMicro(), p.RunID, string(agentfleet.StatusQueued), p.Turn-1))
			if errors.Is(err, sql.ErrNoRows) {
				res.Started = false
				row, err = d.s.runByID(ctx, tx, p.RunID)
				return err
			}
			row, res.Started = started, err == nil
			return err
		})
		if err != nil {
			return store.TurnLoadResult{}, mapErr(err)
		}
	}
	res.Run = row.Run
	if p.Turn > 1 && row.Turn == p.Turn-1 {
		if res.Steps, err = d.StepList(ctx, p.RunID, p.HistoryFrom, p.Turn); err != nil {
			return store.TurnLoadResult{}, err
		}
		res.HistoryLoaded = true
	}
	return res, nil
}
