package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (s *Store) TurnLoad(ctx context.Context, p store.TurnLoadParams) (store.TurnLoadResult, error) {
	if err := rules.TurnLoad(p); err != nil {
		return store.TurnLoadResult{}, err
	}
	var res store.TurnLoadResult
	var unlimited sql.NullBool
	row, err := scanRun(s.rd.QueryRowContext(ctx, `SELECT
		(SELECT t.token_limit = 0 AND t.tokens_per_minute = 0 FROM tenants t WHERE t.id = runs.tenant), `+runCols+`
		FROM runs WHERE id = ?`, p.RunID), &unlimited)
	if err != nil {
		return res, fmt.Errorf("load run %s for turn %d: %w", p.RunID, p.Turn, mapErr(err))
	}
	res.TenantUnlimited = unlimited.Valid && unlimited.Bool
	if row.Status == agentfleet.StatusQueued && row.Turn == p.Turn-1 && !row.CancelRequested {
		// The read above is outside the writer; the update is fenced
		// again, and a run changed meanwhile is re-read as it is.
		err = s.write(ctx, func(tx *wtx) error {
			started, err := scanRun(tx.QueryRowContext(ctx, `UPDATE runs SET status = ?, updated_at = ?
				WHERE id = ? AND status = ? AND turn = ? AND cancel_requested = 0 RETURNING `+runCols,
				string(agentfleet.StatusRunning), rules.Now().UnixMicro(), p.RunID, string(agentfleet.StatusQueued), p.Turn-1))
			if errors.Is(err, sql.ErrNoRows) {
				row, err = s.runByID(ctx, tx, p.RunID)
				return err
			}
			row, res.Started = started, err == nil
			return err
		})
		if err != nil {
			return store.TurnLoadResult{}, fmt.Errorf("start run %s: %w", p.RunID, err)
		}
	}
	res.Run = row.Run
	if p.Turn > 1 && row.Turn == p.Turn-1 {
		rows, err := s.rd.QueryContext(ctx, stepsSQL, p.RunID, p.HistoryFrom, p.Turn)
		if err != nil {
			return store.TurnLoadResult{}, fmt.Errorf("load history of run %s: %w", p.RunID, mapErr(err))
		}
		if res.Steps, err = collect(rows, scanStep); err != nil {
			return store.TurnLoadResult{}, fmt.Errorf("load history of run %s: %w", p.RunID, mapErr(err))
		}
		res.HistoryLoaded = true
	}
	return res, nil
}
