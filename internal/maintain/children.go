package maintain

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Child runs end on their workers, which settle the family at once
// (store.RunFamilySettle): the waiting parent woken, the ended run's children
// cancelled. What that misses, the children sweep settles: a wait that
// timed out, a process that died between a run's end and its family's
// settling, a run the API cancelled at once.

// ChildrenSweepIntervalDefault is how often the children sweep runs: a wait's
// timeout is honoured within it.
const ChildrenSweepIntervalDefault = time.Second

// ChildrenConfig configures the children sweep (zero Interval:
// ChildrenSweepIntervalDefault).
type ChildrenConfig struct {
	Store    store.Store
	Bus      *bus.Bus
	Interval time.Duration
	Leading  Leading
	Logger   *slog.Logger
}

// Children settles due families, on the leader.
type Children struct {
	sweep
	cfg ChildrenConfig
}

// NewChildren returns the children sweep.
func NewChildren(cfg ChildrenConfig) *Children {
	cfg.Interval = cmp.Or(cfg.Interval, ChildrenSweepIntervalDefault)
	return &Children{sweep: newSweep(cfg.Store, cfg.Bus, cfg.Logger), cfg: cfg}
}

// Run settles due families every interval until ctx ends, while this
// process leads.
func (c *Children) Run(ctx context.Context) error {
	return every(ctx, c.cfg.Interval, c.log, "sweep of child runs", leader(c.cfg.Leading, c.Pass))
}

// Pass settles the families due now and publishes what that changed.
func (c *Children) Pass(ctx context.Context) error {
	res, err := c.cfg.Store.RunFamilySettleDue(ctx, store.RunFamilySettleDueParams{Now: time.Now()})
	if perr := c.outbox.Family(ctx, res); err == nil {
		err = perr
	}
	return err
}
