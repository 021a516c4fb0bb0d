package rules

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// TurnLoad validates p and loads the run for turn p.Turn, starting it
// when TurnStarts says so. The history is kept only when the run stands
// at turn p.Turn-1: otherwise the turn is not the run's next one and is
// not run.
func (s *Store) TurnLoad(ctx context.Context, p store.TurnLoadParams) (store.TurnLoadResult, error) {
	if err := TurnLoad(p); err != nil {
		return store.TurnLoadResult{}, err
	}
	res, err := s.d.RunLoad(ctx, p, Now())
	if err != nil {
		return store.TurnLoadResult{}, fmt.Errorf("load run %s for turn %d: %w", p.RunID, p.Turn, err)
	}
	if p.Turn == 1 || res.Run.Turn != p.Turn-1 {
		res.Steps, res.HistoryLoaded = nil, false
	}
	return res, nil
}

// TurnStarts reports whether the load of turn starts run r: it is queued
// for that turn (turn-1 committed) and no cancel is requested.
func TurnStarts(r agentfleet.Run, turn int) bool {
	return r.Status == agentfleet.StatusQueued && r.Turn == turn-1 && !r.CancelRequested
}
