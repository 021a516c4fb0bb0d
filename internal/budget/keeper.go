package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Defaults of KeeperConfig.
const (
	KeeperIntervalDefault = time.Second
	// WakeEstimateDefault is the tokens one woken run is assumed to need
	// for its next call, to decide how many parked runs the returned
	// budget can take. Waking too many is harmless (they park again);
	// the limit is enforced by the reservation, never by this guess.
	WakeEstimateDefault = 4096
	wakeBatchMax        = 500
)

// Resume publishes the next turn of a run woken from waiting_budget.
type Resume func(ctx context.Context, run agentfleet.Run) error

// KeeperConfig configures a Keeper.
type KeeperConfig struct {
	Store store.Store
	// Resume publishes a woken run's next turn. Required.
	Resume Resume
	// Interval is how often expired reservations are released and
	// parked runs considered; Kick makes it sooner.
	Interval     time.Duration
	WakeEstimate int64
	Now          func() time.Time
	Metrics      *Metrics
	Logger       *slog.Logger
}

// Keeper releases expired reservations and wakes runs parked in
// waiting_budget when their tenant's budget has room again: after a limit
// raise (Kick), a window roll, or reservations settling. One keeper per
// fleet is enough; two are safe (a wake is a fenced status transition).
type Keeper struct {
	cfg  KeeperConfig
	kick chan struct{}
}

// NewKeeper returns a Keeper; start it with Run.
func NewKeeper(cfg KeeperConfig) (*Keeper, error) {
	if cfg.Store == nil || cfg.Resume == nil {
		return nil, errors.New("budget: KeeperConfig needs Store and Resume")
	}
	if cfg.Interval < 0 || cfg.WakeEstimate < 0 {
		return nil, errors.New("budget: KeeperConfig Interval and WakeEstimate must not be negative (zero selects the default)")
	}
	if cfg.Interval == 0 {
		cfg.Interval = KeeperIntervalDefault
	}
	if cfg.WakeEstimate == 0 {
		cfg.WakeEstimate = WakeEstimateDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Keeper{cfg: cfg, kick: make(chan struct{}, 1)}, nil
}

// Kick asks for a pass now (a tenant's budget changed).
func (k *Keeper) Kick() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// Run works until ctx ends.
func (k *Keeper) Run(ctx context.Context) error {
	t := time.NewTicker(k.cfg.Interval)
	defer t.Stop()
	for {
		if err := k.Pass(ctx); err != nil && ctx.Err() == nil {
			k.cfg.Logger.Warn("budget keeper pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-k.kick:
		}
	}
}

// Pass releases expired reservations and wakes what parked runs the
// budget can take.
func (k *Keeper) Pass(ctx context.Context) error {
	now := k.cfg.Now().UTC()
	if _, err := k.cfg.Store.BudgetExpire(ctx, now); err != nil {
		return fmt.Errorf("expire reservations: %w", err)
	}
	parked, err := k.cfg.Store.RunList(ctx, store.RunListParams{
		Status: []agentfleet.RunStatus{agentfleet.StatusWaitingBudget}, Oldest: true, Limit: wakeBatchMax,
	})
	if err != nil {
		return fmt.Errorf("list parked runs: %w", err)
	}
	byTenant := map[string][]agentfleet.Run{}
	var order []string
	for _, r := range parked.Runs {
		if _, ok := byTenant[r.Tenant]; !ok {
			order = append(order, r.Tenant)
		}
		byTenant[r.Tenant] = append(byTenant[r.Tenant], r)
	}
	for _, tenant := range order {
		runs := byTenant[tenant]
		k.cfg.Metrics.waiting(tenant, len(runs))
		b, err := k.cfg.Store.BudgetGet(ctx, tenant, now)
		if err != nil {
			return fmt.Errorf("budget of tenant %s: %w", tenant, err)
		}
		n := len(runs)
		if b.Limit > 0 {
			left := b.Limit - b.Used - b.Reserved
			if left <= 0 {
				continue
			}
			n = min(n, int(max(1, left/k.cfg.WakeEstimate)))
		}
		woke := 0
		for _, r := range runs[:n] {
			ok, err := k.wake(ctx, r)
			if err != nil {
				return err
			}
			if ok {
				woke++
			}
		}
		k.cfg.Metrics.woke(tenant, woke)
		k.cfg.Metrics.waiting(tenant, len(runs)-woke)
	}
	return nil
}

// wake moves one parked run back to running and publishes its next turn.
func (k *Keeper) wake(ctx context.Context, r agentfleet.Run) (bool, error) {
	ch, err := k.cfg.Store.RunTransition(ctx, store.RunTransitionParams{
		ID: r.ID, From: []agentfleet.RunStatus{agentfleet.StatusWaitingBudget}, To: agentfleet.StatusRunning, IncrementWake: true,
	})
	if errors.Is(err, store.ErrConflict) {
		return false, nil // woken, cancelled or ended meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("wake run %s: %w", r.ID, err)
	}
	if err := k.cfg.Resume(ctx, ch.Run); err != nil {
		// Park it again so a later pass retries; a turn message that
		// got out anyway finds the run parked and is dropped.
		if _, perr := k.cfg.Store.RunTransition(ctx, store.RunTransitionParams{
			ID: r.ID, From: []agentfleet.RunStatus{agentfleet.StatusRunning}, To: agentfleet.StatusWaitingBudget,
		}); perr != nil && !errors.Is(perr, store.ErrConflict) {
			return false, fmt.Errorf("resume run %s: %w (and re-parking it: %v)", r.ID, err, perr)
		}
		return false, fmt.Errorf("resume run %s: %w", r.ID, err)
	}
	return true, nil
}
