package rules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// BudgetReserve validates p and reserves through the driver's one
// LedgerReserve. An unlimited tenant's reservation has an empty id: the
// driver wrote nothing (see BudgetSettle).
func (s *Store) BudgetReserve(ctx context.Context, p store.BudgetReserveParams) (agentfleet.Reservation, error) {
	p, err := BudgetReserve(p)
	if err != nil {
		return agentfleet.Reservation{}, err
	}
	r := agentfleet.Reservation{ID: NewID(), Tenant: p.Tenant, RunID: p.RunID, Tokens: p.Tokens, LeaseUntil: p.Now.Add(p.Lease)}
	reserved, row, err := s.d.LedgerReserve(ctx, r, p.Now)
	var l Ledger
	if err == nil {
		l, err = LedgerFrom(row)
	}
	if errors.Is(err, store.ErrNotFound) {
		err = fmt.Errorf("tenant %s: %w", p.Tenant, err)
	}
	switch {
	case err != nil:
	case reserved:
		return r, nil
	case l.Unlimited():
		r.ID = ""
		return r, nil
	default:
		err = l.Refusal(p.Tokens, p.Now)
	}
	return agentfleet.Reservation{}, fmt.Errorf("reserve %d tokens for %s: %w", p.Tokens, p.Tenant, err)
}

// Refusal is why a reserve of n tokens at now was refused by a write
// that read l: Reserve's *agentfleet.BudgetExhaustedError. Should l have
// had room (on PostgreSQL it is the statement's snapshot, older than the
// writer its UPDATE waited for), the window limit.
func (l Ledger) Refusal(n int64, now time.Time) error {
	if _, why := l.Reserve(n, now); why != nil {
		return why
	}
	l = l.Roll(now)
	return &agentfleet.BudgetExhaustedError{Tenant: l.Tenant, Need: n, Limit: l.Limit, Used: l.Used, Reserved: l.Reserved, WindowEnd: l.WindowEnd}
}
