package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// TurnLoader holds the coarse primitive under the rules' TurnLoad: on
// PostgreSQL one round trip through the pipeline, where the loads that
// meet share one statement for the runs and one for their histories.
type TurnLoader interface {
	// RunLoad reads run p.RunID (p checked by rules.TurnLoad) for the
	// execution of turn p.Turn, and whether its tenant has no token limit
	// and no per-minute limit. When the run is queued for that turn (turn
	// p.Turn-1 committed) with no cancel requested, it starts it (running,
	// updated at now) in a write fenced on exactly that, and Started says
	// it did. For p.Turn > 1 it reads the steps of turns [p.HistoryFrom,
	// p.Turn) too (HistoryLoaded); a backend may skip them when the run
	// does not stand at turn p.Turn-1, and the rules drop them then. A
	// missing run is store.ErrNotFound.
	RunLoad(ctx context.Context, p store.TurnLoadParams, now time.Time) (store.TurnLoadResult, error)
}
