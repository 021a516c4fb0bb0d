package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentfleet/agentfleet"
)

// SessionHistoryParams names the run whose session's history is read.
type SessionHistoryParams struct {
	Tenant    string
	SessionID string
	// RunID is the run being executed; Before is when it was created:
	// only runs of the session created before it are read.
	RunID  string
	Before time.Time
	// Limit bounds the earlier runs read (zero: SessionHistoryLimitDefault).
	Limit int
}

// SessionHistoryLimitDefault bounds the earlier runs a session run's
// history reads when no summary checkpoint comes sooner: older ones
// would be trimmed from any prompt a model serves.
const SessionHistoryLimitDefault = 100

// SessionRun is an earlier run of a session with its trace.
type SessionRun struct {
	Run   agentfleet.Run
	Steps []agentfleet.Step
}

// sessionEnded are the statuses a run of the session has ended in.
var sessionEnded = []agentfleet.RunStatus{agentfleet.StatusCompleted, agentfleet.StatusFailed,
	agentfleet.StatusCancelled, agentfleet.StatusMaxTurns}

// SessionHistory reads what a session run's prompt recalls: the session's
// ended runs before it that ran a turn, oldest first, each with its
// steps, back to the newest one that holds a summary step (which covers
// everything before it) or Limit runs. A run without a session has none.
func SessionHistory(ctx context.Context, s Store, p SessionHistoryParams) ([]SessionRun, error) {
	if p.SessionID == "" {
		return nil, nil
	}
	limit := p.Limit
	if limit <= 0 {
		limit = SessionHistoryLimitDefault
	}
	var out []SessionRun
	cursor := ""
	for len(out) < limit {
		page, err := s.RunList(ctx, RunListParams{
			Tenant: p.Tenant, SessionID: p.SessionID, Status: sessionEnded, Limit: min(limit, 100), Cursor: cursor,
		})
		if err != nil {
			return nil, fmt.Errorf("list the ended runs of session %s: %w", p.SessionID, err)
		}
		for _, r := range page.Runs {
			// A run cancelled before it started said nothing; a run
			// admitted after this one is not its past.
			if r.ID == p.RunID || r.Turn == 0 || (!p.Before.IsZero() && r.CreatedAt.After(p.Before)) {
				continue
			}
			steps, err := s.StepListByRun(ctx, StepListByRunParams{RunID: r.ID})
			if err != nil {
				return nil, fmt.Errorf("load the steps of run %s of session %s: %w", r.ID, p.SessionID, err)
			}
			out = append(out, SessionRun{Run: r, Steps: steps})
			if len(out) == limit || slices.ContainsFunc(steps, func(s agentfleet.Step) bool { return s.Kind == agentfleet.StepSummary }) {
				slices.Reverse(out)
				return out, nil
			}
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	slices.Reverse(out)
	return out, nil
}
