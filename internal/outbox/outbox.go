// Package outbox publishes what a committed run change owes the bus: the
// change's events, the next turn of a run it resumed, the first turn of a
// session's next run and of the batch runs it released, the settling of
// an ended run's family (store.RunFamilySettle), and a cancel for the running
// runs asked to stop. The store commits first, the outbox publishes
// after; every message carries an id the streams deduplicate, so what a
// crash left unpublished is published again by whoever finds it (a
// redelivered turn, the dispatcher's sweeps) at no harm.
//
// It decides nothing about runs: what is owed is in the store's results.
// The worker, the API, the dispatcher's maintenance services and the
// budget keeper all publish through it.
package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Bus is what the outbox publishes through (*bus.Bus, or a worker's
// per-message view of it).
type Bus interface {
	PublishEvents(ctx context.Context, evs []agentfleet.Event) error
	// PublishEventsBulk publishes many events at once (a batch's).
	PublishEventsBulk(ctx context.Context, evs []agentfleet.Event) error
	EnqueueTurn(ctx context.Context, t bus.Turn) error
	PublishControl(ctx context.Context, tenant, runID, verb string) error
}

// Store settles an ended run's family.
type Store interface {
	RunFamilySettle(ctx context.Context, p store.RunFamilySettleParams) (store.RunFamilySettleResult, error)
}

// TimeoutDefault bounds one publication, whatever the caller's context:
// a change committed is owed its messages even when the request or turn
// that made it has ended.
const TimeoutDefault = 10 * time.Second

// Outbox publishes through Bus. Each publish outlives the caller's
// context, bounded by Timeout (zero: TimeoutDefault); the store call of
// Settle runs in the caller's. A nil Log discards the warnings of
// best-effort publishes (cancel controls).
type Outbox struct {
	Bus     Bus
	Store   Store
	Log     *slog.Logger
	Timeout time.Duration
}

func (o Outbox) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(o.Timeout, TimeoutDefault))
}

// HasFamily reports whether the end of run owes its family a settling:
// a parent that may wait for it, children to cancel, a batch to release
// the next of.
func HasFamily(run agentfleet.Run) bool {
	return run.Status.Terminal() && (run.ParentRunID != "" || run.Children > 0 || run.BatchID != "")
}

// Admitted publishes a run's admission: its events and, when it may start
// (res.Startable, and still queued for its first turn), its first turn,
// carrying traceparent.
func (o Outbox) Admitted(ctx context.Context, res store.RunCreateResult, traceparent string) error {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	if err := o.Bus.PublishEvents(ctx, res.Events); err != nil {
		return fmt.Errorf("publish events: %w", err)
	}
	run := res.Run
	if !res.Startable || run.Status != agentfleet.StatusQueued || run.Turn != 0 {
		return nil
	}
	t := bus.FirstTurn(run)
	t.Traceparent = traceparent
	if err := o.Bus.EnqueueTurn(ctx, t); err != nil {
		return fmt.Errorf("enqueue first turn: %w", err)
	}
	return nil
}

// Changed publishes what a committed change of one run owes: its events,
// then the first turn of its session's next run and, when it ended a run
// with a family, the family's settling (Settle).
func (o Outbox) Changed(ctx context.Context, ch store.RunChangeResult) error {
	if err := o.events(ctx, ch.Events); err != nil {
		return fmt.Errorf("publish the events of run %s: %w", ch.Run.ID, err)
	}
	var errs []error
	if next := ch.SessionNext; next != nil {
		errs = append(errs, o.Start(ctx, *next))
	}
	if HasFamily(ch.Run) {
		errs = append(errs, o.Settle(ctx, ch.Run))
	}
	return errors.Join(errs...)
}

// Start enqueues the first turn of a run that may start now: a session's
// next run, a child just spawned.
func (o Outbox) Start(ctx context.Context, run agentfleet.Run) error {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	if err := o.Bus.EnqueueTurn(ctx, bus.FirstTurn(run)); err != nil {
		return fmt.Errorf("enqueue the first turn of run %s: %w", run.ID, err)
	}
	return nil
}

// Resumed enqueues the next turn of a run that resumes from a wait (its
// budget back, its children ended).
func (o Outbox) Resumed(ctx context.Context, run agentfleet.Run) error {
	return o.enqueue(ctx, bus.NextTurn(run))
}

// DecidedTurn is the message of run's turn once an approval it stopped
// at is decided: the same turn again, marked Retried so that it reuses
// its recorded model reply, in the run's class (a batch run's turn stays
// a batch turn).
func DecidedTurn(run agentfleet.Run) bus.Turn {
	t := bus.NextTurn(run)
	t.Retried = true
	return t
}

// Decided publishes what an approval's decision owes: its event and,
// when the run resumed, its turn again (DecidedTurn).
func (o Outbox) Decided(ctx context.Context, res store.ApprovalDecideResult) error {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	if err := o.Bus.PublishEvents(ctx, res.Change.Events); err != nil {
		return fmt.Errorf("publish the decision of approval %s: %w", res.Approval.ID, err)
	}
	if !res.Woken {
		return nil
	}
	return o.Repeat(ctx, res.Change.Run)
}

// Repeat enqueues run's turn again once an approval it stopped at is
// decided (DecidedTurn).
func (o Outbox) Repeat(ctx context.Context, run agentfleet.Run) error {
	return o.enqueue(ctx, DecidedTurn(run))
}

func (o Outbox) enqueue(ctx context.Context, t bus.Turn) error {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	if err := o.Bus.EnqueueTurn(ctx, t); err != nil {
		return fmt.Errorf("enqueue turn %d of run %s: %w", t.Turn, t.RunID, err)
	}
	return nil
}

// Settle settles the family of run, which ended (store.RunFamilySettle), and
// publishes what that changed (Family).
func (o Outbox) Settle(ctx context.Context, run agentfleet.Run) error {
	res, err := o.Store.RunFamilySettle(ctx, store.RunFamilySettleParams{ID: run.ID})
	if err != nil {
		return fmt.Errorf("settle the family of run %s: %w", run.ID, err)
	}
	return o.Family(ctx, res)
}

// Family publishes what settling families changed (store.RunFamilySettle,
// RunFamilySettleDue, BatchSweep): the changed runs' events, the next turn of
// each woken parent and the first of each released batch run (queued at
// turn 0), and a cancel for the running children asked to stop.
func (o Outbox) Family(ctx context.Context, res store.RunFamilySettleResult) error {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	var evs []agentfleet.Event
	for _, ch := range res.Changes {
		evs = append(evs, ch.Events...)
	}
	if err := o.Bus.PublishEvents(ctx, evs); err != nil {
		return fmt.Errorf("publish the events of a family: %w", err)
	}
	var errs []error
	for _, r := range res.Woken {
		errs = append(errs, o.enqueue(ctx, bus.NextTurn(r)))
	}
	for _, r := range res.Released {
		errs = append(errs, o.enqueue(ctx, bus.FirstTurn(r)))
	}
	o.stop(ctx, res.Stopping)
	return errors.Join(errs...)
}

// Cancelled publishes what a run's cancel owes: when it ended the run at
// once, what that change owes (Changed); otherwise a cancel to the
// worker running it, which stops at its next turn boundary anyway (the
// store holds the cancel) but interrupts a script running now.
func (o Outbox) Cancelled(ctx context.Context, res store.RunCancelResult) error {
	if res.Immediate {
		return o.Changed(ctx, res.RunChangeResult)
	}
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	o.stop(ctx, []agentfleet.Run{res.Run})
	return nil
}

// BatchCancelled publishes what one chunk of a batch's cancel owes: the
// cancelled runs' events, their sessions' next runs, the families of
// those with children, and a cancel for the running ones.
func (o Outbox) BatchCancelled(ctx context.Context, res store.BatchCancelResult) error {
	pctx, cancel := o.ctx(ctx)
	defer cancel()
	var evs []agentfleet.Event
	for _, c := range res.Cancelled {
		evs = append(evs, c.Events...)
	}
	var errs []error
	if err := o.Bus.PublishEventsBulk(pctx, evs); err != nil {
		errs = append(errs, fmt.Errorf("publish the events of cancelled batch %s: %w", res.Batch.ID, err))
	}
	for _, c := range res.Cancelled {
		if next := c.SessionNext; next != nil {
			errs = append(errs, o.Start(ctx, *next))
		}
		// Not every batch run's RunFamilySettle: the batch releases none now.
		if c.Run.Children > 0 {
			errs = append(errs, o.Settle(ctx, c.Run))
		}
	}
	o.stop(pctx, res.Stopping)
	return errors.Join(errs...)
}

// events publishes evs within the outbox's timeout.
func (o Outbox) events(ctx context.Context, evs []agentfleet.Event) error {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	return o.Bus.PublishEvents(ctx, evs)
}

// stop tells the workers of runs to cancel them, best effort: the store
// holds the cancel, which their next turn boundary honours.
func (o Outbox) stop(ctx context.Context, runs []agentfleet.Run) {
	for _, r := range runs {
		if err := o.Bus.PublishControl(ctx, r.Tenant, r.ID, "cancel"); err != nil && o.Log != nil {
			o.Log.Warn("publish cancel control", "run", r.ID, "err", err)
		}
	}
}
