package rules

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// EndedBeforeSQL selects the runs RunDeleteEnded may delete: ended, with
// the end (updated_at: nothing changes a run once it ended) before the
// cutoff, given twice as "?" (the backend converts it). created_at bounds
// the walk of the runs_ended index, on (created_at) for ended runs only
// (migration 0005): the index holds no column a turn commit changes, so
// on Postgres it costs running runs' updates nothing (they stay HOT). A
// run created before the cutoff but ended after it is walked over until
// it too is due; such runs are few.
var EndedBeforeSQL = `status IN (` + SQLList(Terminal) + `) AND created_at < ? AND updated_at < ?`

// RunDeleteEnded validates p.
func RunDeleteEnded(p store.RunDeleteEndedParams) (store.RunDeleteEndedParams, error) {
	switch {
	case p.EndedBefore.IsZero():
		return p, Invalidf("delete ended runs: EndedBefore is required")
	case p.Limit < 1 || p.Limit > store.RunDeleteEndedLimitMax:
		return p, Invalidf("delete ended runs: limit %d is not between 1 and %d (one transaction deletes at most that many)",
			p.Limit, store.RunDeleteEndedLimitMax)
	}
	p.EndedBefore = Time(p.EndedBefore)
	return p, nil
}

// RunDelete validates p.
func RunDelete(p store.RunDeleteParams) error {
	if p.ID == "" {
		return Invalidf("delete run: id is empty")
	}
	return nil
}

// ApplyRunDelete is RunDelete p, checked by RunDelete, applied in tx:
// only an ended run goes, and a tenant's delete of another tenant's run
// is store.ErrNotFound.
func ApplyRunDelete(ctx context.Context, tx driver.Executor, p store.RunDeleteParams) error {
	r, err := tx.RunLock(ctx, p.ID)
	if err != nil {
		return err
	}
	if p.Tenant != "" && r.Tenant != p.Tenant {
		return fmt.Errorf("run %s: %w", p.ID, store.ErrNotFound)
	}
	if !r.Status.Terminal() {
		return fmt.Errorf("%w: run %s is %s: only an ended run can be deleted; cancel it first", store.ErrConflict, r.ID, r.Status)
	}
	return tx.RunDelete(ctx, r.ID)
}

func (s *Store) RunDelete(ctx context.Context, p store.RunDeleteParams) error {
	if err := RunDelete(p); err != nil {
		return err
	}
	if err := s.d.Tx(ctx, func(x driver.Executor) error { return ApplyRunDelete(ctx, x, p) }); err != nil {
		return fmt.Errorf("delete run %s: %w", p.ID, err)
	}
	return nil
}
