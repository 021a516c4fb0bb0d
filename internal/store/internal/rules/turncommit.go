package rules

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
)

// TurnCommit is TurnCommitMany of one commit.
func (s *Store) TurnCommit(ctx context.Context, p store.TurnCommitParams) (store.RunChangeResult, error) {
	res, errs, err := s.TurnCommitMany(ctx, []store.TurnCommitParams{p})
	if err != nil {
		return store.RunChangeResult{}, err
	}
	return res[0], errs[0]
}

// TurnCommitMany validates every commit, applies the valid ones in one
// write (driver.TurnCommitter) and says why each one that lost its fence
// did nothing. errs[i] is ps[i]'s (it committed nothing); the error is
// the call's: none committed. A run's end hands out its session's next
// run once, to the first commit of the batch that may.
func (s *Store) TurnCommitMany(ctx context.Context, ps []store.TurnCommitParams) ([]store.RunChangeResult, []error, error) {
	now := Now()
	results := make([]store.RunChangeResult, len(ps))
	errs := make([]error, len(ps))
	prepared := make([]store.TurnCommitParams, len(ps))
	var live []int
	var apply []store.TurnCommitParams
	for i, p := range ps {
		if prepared[i], errs[i] = TurnCommit(p, now); errs[i] == nil {
			live = append(live, i)
			apply = append(apply, prepared[i])
		}
	}
	if len(live) > 0 {
		applied, err := s.d.TurnCommitApply(ctx, apply, now)
		if err != nil {
			return nil, nil, fmt.Errorf("commit %d turns: %w", len(ps), err)
		}
		var lost []int
		handedOut := map[string]bool{}
		for k, i := range live {
			a := applied[k]
			if !a.Applied {
				lost = append(lost, i)
				continue
			}
			evs := prepared[i].Events
			Number(evs, a.Run.Run, a.LastSeq)
			results[i] = store.RunChangeResult{Run: a.Run.Run, Events: evs, Steps: prepared[i].Steps}
			if a.Head == nil || !a.Run.Status.Terminal() || a.Run.SessionID == "" {
				continue
			}
			if next := SessionHead(a.Run.Seq, &a.Head.Run, a.Head.Seq); next != nil && !handedOut[next.ID] {
				handedOut[next.ID] = true
				run := *next
				results[i].SessionNext = &run
			}
		}
		s.explainLost(ctx, prepared, lost, errs)
	}
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("commit turn %d of run %s: %w", prepared[i].Turn, prepared[i].RunID, err)
		}
	}
	return results, errs, nil
}

// explainLost sets errs for the commits that lost their fence, from their
// runs as they are now: ErrNotFound, ErrConflict (ended, or another
// number of turns) or ErrInvalid (an illegal status change). Nothing of
// them landed either way.
func (s *Store) explainLost(ctx context.Context, prepared []store.TurnCommitParams, lost []int, errs []error) {
	if len(lost) == 0 {
		return
	}
	ids := make([]string, len(lost))
	for k, i := range lost {
		ids[k] = prepared[i].RunID
	}
	rows, err := s.d.TurnCommitRunsGet(ctx, ids)
	byID := make(map[string]RunRow, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	for _, i := range lost {
		p := prepared[i]
		r, ok := byID[p.RunID]
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("%w: the commit did not land (reading why failed: %v)", store.ErrConflict, err)
		case !ok:
			errs[i] = fmt.Errorf("run %s: %w", p.RunID, store.ErrNotFound)
		default:
			if errs[i] = CheckCommitFence(r.Run, p.Turn, p.Status); errs[i] == nil {
				errs[i] = fmt.Errorf("%w: a concurrent change to run %s won", store.ErrConflict, p.RunID)
			}
		}
	}
}
