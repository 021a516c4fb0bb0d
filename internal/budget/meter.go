// Package budget owns the per-tenant token budgets and the fairness policy
// of the fleet (docs/ARCHITECTURE.md §7).
//
// Budgets. Before every model call — a turn's and a script's ai() alike —
// the turn engine reserves "estimated prompt tokens + max completion
// tokens" through a Meter (for a tenant its worker found unlimited, a
// turn's call takes ReserveUnlimited's hold-free reservation, which asks
// no one); after the call it settles the reservation to
// the usage the provider reported (or a conservative estimate). The ledger
// itself lives in the store, whose BudgetReserve is one atomic statement,
// so the limit is a hard ceiling under any number of workers and slots:
// used never exceeds it. A reservation carries a lease; the Keeper releases
// expired ones, so a dead worker cannot hold budget for ever, and wakes
// runs parked in waiting_budget once budget is back (limit raised, window
// rolled, reservations settled or released).
//
// Fairness. FairQueue orders work across tenants by weighted fair share
// (start-time fair queuing on virtual time), at turn granularity; the
// scheduler package feeds the workers' shallow ready queue from it.
package budget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// LeaseDefault is how long a reservation lives without being settled,
// unless MeterConfig.MaxHold needs longer; a dead worker's budget comes
// back after it.
const LeaseDefault = 10 * time.Minute

// leaseMargin is what a lease keeps beyond MeterConfig.MaxHold: clocks
// and store round trips.
const leaseMargin = time.Minute

// Meter reserves and settles tokens against the store's ledger. It
// implements the turn engine's loop.Meter.
type Meter struct {
	store   store.Store
	lease   time.Duration
	now     func() time.Time
	metrics *Metrics
}

// MeterConfig configures a Meter.
type MeterConfig struct {
	Store store.Store
	// Lease is the reservation lease; zero means LeaseDefault. It is
	// raised to MaxHold plus a margin when that is longer.
	Lease time.Duration
	// MaxHold is the longest a reservation is held before it is settled:
	// the longest model call, its retries included, and the time its
	// reply's record may be retried. A lease that ran out mid-call would
	// hand the tokens out again while the call still spends them.
	MaxHold time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Metrics, when set, counts reservations, rejections and tokens.
	Metrics *Metrics
}

// NewMeter returns a Meter.
func NewMeter(cfg MeterConfig) (*Meter, error) {
	if cfg.Store == nil {
		return nil, errors.New("budget: MeterConfig.Store is nil")
	}
	if cfg.Lease < 0 || cfg.MaxHold < 0 {
		return nil, errors.New("budget: MeterConfig.Lease and MaxHold must not be negative (zero selects the default)")
	}
	if cfg.Lease == 0 {
		cfg.Lease = LeaseDefault
	}
	if cfg.MaxHold > 0 {
		cfg.Lease = max(cfg.Lease, cfg.MaxHold+leaseMargin)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Meter{store: cfg.Store, lease: cfg.Lease, now: cfg.Now, metrics: cfg.Metrics}, nil
}

// Lease is how long a reservation lives without being settled.
func (m *Meter) Lease() time.Duration { return m.lease }

// Reserve holds tokens for one model call. When the tenant's budget cannot
// take it, the error is a *agentfleet.BudgetExhaustedError.
func (m *Meter) Reserve(ctx context.Context, tenant, runID string, tokens int64) (agentfleet.Reservation, error) {
	res, err := m.store.BudgetReserve(ctx, store.BudgetReserveParams{
		Tenant: tenant, RunID: runID, Tokens: tokens, Now: m.now().UTC(), Lease: m.lease,
	})
	var be *agentfleet.BudgetExhaustedError
	switch {
	case errors.As(err, &be):
		m.metrics.rejected(tenant)
		return agentfleet.Reservation{}, err
	case err != nil:
		return agentfleet.Reservation{}, fmt.Errorf("reserve %d tokens for tenant %s: %w", tokens, tenant, err)
	}
	m.metrics.reserved(tenant, tokens)
	return res, nil
}

// ReserveUnlimited is the reservation of a tenant the caller knows to be
// unlimited (store.TurnLoad read it with the run): what BudgetReserve
// would return for it, made without asking the store. It holds nothing
// (an empty ID); settling it charges the usage ledger, or the tenant's
// new limit, capped, when one was set since.
func (m *Meter) ReserveUnlimited(tenant, runID string, tokens int64) agentfleet.Reservation {
	m.metrics.reserved(tenant, tokens)
	return agentfleet.Reservation{Tenant: tenant, RunID: runID, Tokens: tokens, LeaseUntil: m.now().UTC().Add(m.lease)}
}

// SettleParams are the store parameters that charge usage to res. A
// recorder that settles in its own transaction (store.ModelReplyRecord's
// Charge) uses them and then reports the outcome with Settled.
func (m *Meter) SettleParams(res agentfleet.Reservation, usage agentfleet.Usage, model string) store.BudgetSettleParams {
	return store.BudgetSettleParams{
		ReservationID: res.ID, Tenant: res.Tenant, RunID: res.RunID, Usage: usage, Model: model, Now: m.now().UTC(),
	}
}

// Settled records a settlement made through SettleParams in the metrics.
func (m *Meter) Settled(res agentfleet.Reservation, usage agentfleet.Usage, model string, out store.BudgetSettleResult) {
	m.metrics.settled(res.Tenant, model, usage, out.Overage)
}

// Settle charges a reservation with the call's real usage. An unlimited
// tenant's reservation (empty ID) charges the usage ledger only.
func (m *Meter) Settle(ctx context.Context, res agentfleet.Reservation, usage agentfleet.Usage, model string) error {
	out, err := m.store.BudgetSettle(ctx, m.SettleParams(res, usage, model))
	if errors.Is(err, store.ErrNotFound) && res.ID != "" {
		// The lease expired before the call returned (a very slow
		// model). The tokens were still spent: charge them without a
		// reservation, as far as the limit allows.
		out, err = m.chargeExpired(ctx, res, usage, model)
	}
	if err != nil {
		return fmt.Errorf("settle reservation %s of tenant %s: %w", res.ID, res.Tenant, err)
	}
	m.metrics.settled(res.Tenant, model, usage, out.Overage)
	return nil
}

// chargeExpired charges usage whose reservation already expired by taking
// a fresh reservation of that size and settling it at once. If the budget
// cannot take it, the usage is counted as overage (in the metrics) only:
// the limit holds.
func (m *Meter) chargeExpired(ctx context.Context, res agentfleet.Reservation, usage agentfleet.Usage, model string) (store.BudgetSettleResult, error) {
	fresh, err := m.store.BudgetReserve(ctx, store.BudgetReserveParams{
		Tenant: res.Tenant, RunID: res.RunID, Tokens: usage.Total(), Now: m.now().UTC(), Lease: m.lease,
	})
	var be *agentfleet.BudgetExhaustedError
	if errors.As(err, &be) {
		return store.BudgetSettleResult{Overage: usage.Total()}, nil
	}
	if err != nil {
		return store.BudgetSettleResult{}, err
	}
	return m.store.BudgetSettle(ctx, m.SettleParams(fresh, usage, model))
}

// Release drops a reservation whose call did not happen or failed.
func (m *Meter) Release(ctx context.Context, res agentfleet.Reservation) error {
	if res.ID == "" {
		return nil // an unlimited tenant's: nothing was held
	}
	err := m.store.BudgetRelease(ctx, res.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("release reservation %s of tenant %s: %w", res.ID, res.Tenant, err)
	}
	return nil
}
