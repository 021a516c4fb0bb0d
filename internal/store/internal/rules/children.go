package rules

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

func (s *Store) RunFamilySettle(ctx context.Context, p store.RunFamilySettleParams) (store.RunFamilySettleResult, error) {
	now := Now()
	var res store.RunFamilySettleResult
	err := s.d.Tx(ctx, func(x driver.Executor) (err error) {
		res, err = ApplyRunFamilySettle(ctx, x, p.ID, now)
		return err
	})
	if err != nil {
		return store.RunFamilySettleResult{}, fmt.Errorf("settle the end of run %s: %w", p.ID, err)
	}
	return res, nil
}

func (s *Store) RunFamilySettleDue(ctx context.Context, p store.RunFamilySettleDueParams) (store.RunFamilySettleResult, error) {
	now := NowOr(p.Now)
	limit := ChildrenDueLimit(p.Limit)
	waiters, err := s.d.RunListWaitersDue(ctx, now, limit)
	if err != nil {
		return store.RunFamilySettleResult{}, fmt.Errorf("find runs whose children are done: %w", err)
	}
	ended, err := s.d.RunListOrphaning(ctx, limit)
	if err != nil {
		return store.RunFamilySettleResult{}, fmt.Errorf("find ended runs with children: %w", err)
	}
	wake := func(ctx context.Context, id string) (ch store.RunChangeResult, woken bool, err error) {
		err = s.d.Tx(ctx, func(x driver.Executor) (err error) {
			ch, woken, err = ApplyWake(ctx, x, id, now)
			return err
		})
		return ch, woken, err
	}
	return SettleChildrenDue(ctx, waiters, ended, wake, func(ctx context.Context, id string) (store.RunFamilySettleResult, error) {
		return s.RunFamilySettle(ctx, store.RunFamilySettleParams{ID: id})
	})
}

func (s *Store) RunChildrenUsage(ctx context.Context, id string) (agentfleet.Usage, error) {
	u, err := s.d.RunChildrenUsage(ctx, id)
	if err != nil {
		return agentfleet.Usage{}, fmt.Errorf("sum the usage of run %s's children: %w", id, err)
	}
	return u, nil
}
