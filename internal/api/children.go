package api

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Child runs end on their workers, which settle the family at once
// (store.RunEnded): the waiting parent woken, the ended run's children
// cancelled. What that misses, the dispatcher's children sweep settles:
// a wait that timed out, a process that died between a run's end and
// its family's settling, a run the API cancelled at once.

// ChildrenSweepIntervalDefault is how often the sweep runs: a wait's
// timeout is honoured within it.
const ChildrenSweepIntervalDefault = time.Second

// SweepChildren settles due families every interval until ctx ends,
// while leading says this process schedules (nil: always).
func (s *Server) SweepChildren(ctx context.Context, interval time.Duration, leading func() bool) {
	whileLeading(ctx, interval, leading, func() {
		res, err := s.cfg.Store.RunChildrenDue(ctx, store.RunChildrenDueParams{Now: time.Now()})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sweep of child runs", "err", err)
		}
		s.publishFamily(ctx, res)
	})
}

// whileLeading calls pass every interval until ctx ends, while leading
// says this process schedules (nil: always).
func whileLeading(ctx context.Context, interval time.Duration, leading func() bool, pass func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if leading == nil || leading() {
			pass()
		}
	}
}

// endedRun traces a run the API ended and settles its family.
func (s *Server) endedRun(ctx context.Context, run agentfleet.Run) {
	s.cfg.Tracer.EndRun(ctx, run)
	if run.ParentRunID == "" && run.Children == 0 {
		return
	}
	res, err := s.cfg.Store.RunEnded(ctx, store.RunEndedParams{ID: run.ID})
	if err != nil {
		// The children sweep settles it.
		s.log.Warn("settle the family of an ended run", "run", run.ID, "err", err)
		return
	}
	s.publishFamily(ctx, res)
}

// publishFamily publishes what settling a family changed: the changed
// runs' events, a woken parent's next turn, a cancel for the running
// children asked to stop. A publish that fails is repeated by the sweeps
// (a running run without a turn message is the stranded sweep's).
func (s *Server) publishFamily(ctx context.Context, res store.RunEndedResult) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	for _, ch := range res.Changes {
		if err := s.cfg.Bus.PublishEvents(ctx, ch.Events); err != nil {
			s.log.Warn("publish events of a child run's family", "run", ch.Run.ID, "err", err)
		}
	}
	// A woken parent's next turn, and a batch run's first (a released
	// one is queued at turn 0).
	for _, p := range append(res.Woken, res.Released...) {
		if err := s.cfg.Bus.EnqueueTurn(ctx, bus.Turn{RunID: p.ID, Tenant: p.Tenant, Batch: p.BatchID != "", Turn: p.Turn + 1, Wake: p.Wake}); err != nil {
			s.log.Warn("enqueue the turn of a run whose children ended", "run", p.ID, "err", err)
		}
	}
	for _, c := range res.Stopping {
		if err := s.cfg.Bus.PublishControl(ctx, c.Tenant, c.ID, "cancel"); err != nil {
			s.log.Warn("publish cancel control", "run", c.ID, "err", err)
		}
	}
}

// runView is GET /v1/runs/{id}: the run, its usage with its children's
// rolled up.
type runView struct {
	agentfleet.Run
	Usage runUsage `json:"usage"`
	// Callback is the run's completion callback (callbacks.go).
	Callback *wire.CallbackView `json:"callback,omitempty"`
}

type runUsage struct {
	agentfleet.Usage
	// Children sums the usage of every run below this one.
	Children *agentfleet.Usage `json:"children,omitempty"`
}

func (s *Server) viewRun(ctx context.Context, run agentfleet.Run) (runView, error) {
	v := runView{Run: run, Usage: runUsage{Usage: run.Usage}}
	var err error
	if v.Callback, err = s.callbackView(ctx, run); err != nil {
		return v, err
	}
	if run.Children > 0 {
		u, err := s.cfg.Store.RunChildrenUsage(ctx, run.ID)
		if err != nil {
			return v, err
		}
		v.Usage.Children = &u
	}
	return v, nil
}
