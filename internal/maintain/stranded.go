package maintain

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Runs stranded without a turn message.
//
// A run that is due a turn has a message for it in AF_RUNQ or AF_WORK:
// a work-queue message stays in its stream until it is acked, and every
// step that acks one (the scheduler forwarding, a worker finishing a turn)
// first publishes what comes next. Two things break that:
//
//   - POST /v1/runs records a run in the store and then publishes its
//     queued event and its first turn. When the dispatcher dies between
//     the two, or NATS refuses the publish and the client never submits
//     again with the same idempotency key (a client that sent none
//     cannot), the run stays queued with no message.
//   - A running run's message can vanish from NATS: a stream deleted and
//     recreated, or a server that lost its last writes in a host crash
//     (JetStream syncs its files every two minutes by default).
//
// Nothing would ever move such a run again. The dispatcher's sweep
// (Stranded) finds them and publishes what they are owed: a queued
// run's admission, a running run's next turn. Publishing twice is
// harmless: the messages carry ids the streams deduplicate, and a worker
// drops a turn message for a run that is no longer due it.
//
// A batch run held back by its batch's max_concurrent is queued without
// a message too, on purpose: it is not stranded, and the sweep leaves it
// (store.BatchRunIsHeld); the batch releases it as its runs end.

const (
	// StrandedAfterDefault is how long a run must have been queued for
	// its first turn, or running without a change, before the sweep
	// looks at it: well beyond the publishes that follow a change
	// (outbox.TimeoutDefault). A running run whose turn takes longer has its
	// message in AF_WORK, held by the worker, and is left alone.
	StrandedAfterDefault = time.Minute
	// StrandedIntervalDefault is how often the sweep runs.
	StrandedIntervalDefault = 30 * time.Second
	strandedPage            = 200
	// strandedPassMax bounds one pass in each status: a run whose turn
	// waits in a queue, as nearly all do, costs one or two NATS lookups,
	// and the next pass goes on where this one stopped.
	strandedPassMax = 2000
)

// StrandedConfig configures the stranded sweep. Interval and After are
// how often it runs and how long a run must have been unchanged (zero:
// StrandedIntervalDefault, StrandedAfterDefault); Registerer, when set,
// receives agentfleet_runs_requeued_total; Admitted, when set, traces a
// requeued admission as the API traces one and returns its traceparent
// (telemetry.Tracer.Admitted).
type StrandedConfig struct {
	Store           store.Store
	Bus             *bus.Bus
	Interval, After time.Duration
	Registerer      prometheus.Registerer
	Admitted        func(ctx context.Context, run agentfleet.Run) string
	Logger          *slog.Logger
}

// Stranded is the sweep of runs stranded without a turn message. It
// runs on every dispatcher: what it publishes is deduplicated by id.
type Stranded struct {
	sweep
	cfg StrandedConfig
	// cursors is where the sweep goes on in each status it looks at; one
	// pass at a time. requeued counts the runs it gave their turn again,
	// by the status they were in.
	cursors struct {
		sync.Mutex
		queued, running string
	}
	requeued *prometheus.CounterVec
	// within is how soon the running sweep queues a stranded run (its
	// interval plus its age threshold); zero while it does not run.
	within atomic.Int64
}

// NewStranded returns the stranded sweep.
func NewStranded(cfg StrandedConfig) (*Stranded, error) {
	if cfg.Interval < 0 || cfg.After < 0 {
		return nil, fmt.Errorf("maintain: the stranded sweep's interval (%s) and age (%s) must not be negative (zero: the defaults)", cfg.Interval, cfg.After)
	}
	cfg.Interval = cmp.Or(cfg.Interval, StrandedIntervalDefault)
	cfg.After = cmp.Or(cfg.After, StrandedAfterDefault)
	s := &Stranded{sweep: newSweep(cfg.Store, cfg.Bus, cfg.Logger), cfg: cfg}
	s.requeued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentfleet_runs_requeued_total",
		Help: "Runs due a turn that had no turn message in NATS and were given it again by the dispatcher's sweep, by the status they were in (queued, running).",
	}, []string{"status"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.requeued); err != nil {
			return nil, fmt.Errorf("maintain: register metrics: %w", err)
		}
	}
	return s, nil
}

// Within is how soon the running sweep queues a run stranded now (its
// interval plus its age threshold), for the 503 of a run recorded but not
// queued; zero while the sweep does not run.
func (s *Stranded) Within() time.Duration { return time.Duration(s.within.Load()) }

// Run calls Requeue every interval, for the runs unchanged for longer
// than the age threshold, until ctx ends.
func (s *Stranded) Run(ctx context.Context) error {
	s.within.Store(int64(s.cfg.Interval + s.cfg.After))
	defer s.within.Store(0)
	return every(ctx, s.cfg.Interval, s.log, "sweep of runs stranded without a turn message", func(ctx context.Context) error {
		n, err := s.Requeue(ctx, time.Now().Add(-s.cfg.After))
		if n > 0 {
			s.log.Warn("requeued runs that were due a turn and had no turn message in NATS", "runs", n)
		}
		return err
	})
}

// Requeue looks, from where the previous pass stopped, at up to
// strandedPassMax runs queued for their first turn since before cutoff
// and up to strandedPassMax running runs unchanged since before cutoff.
// For each with no turn message in either queue it publishes what the run
// is owed: a queued run that may start (no session, or the head of its
// session) its admission again (its queued event and its first turn), a
// running run its next turn. It returns how many runs it requeued.
func (s *Stranded) Requeue(ctx context.Context, cutoff time.Time) (int, error) {
	s.cursors.Lock()
	defer s.cursors.Unlock()
	queued, err := s.sweepStatus(ctx, agentfleet.StatusQueued, &s.cursors.queued, func(run agentfleet.Run) (bool, bool, error) {
		if !run.CreatedAt.Before(cutoff) {
			return true, false, nil // every later run is newer still
		}
		ok, err := s.requeueAdmission(ctx, run)
		if ok {
			s.requeued.WithLabelValues(string(agentfleet.StatusQueued)).Inc()
		}
		return false, ok, err
	})
	if err != nil {
		return queued, err
	}
	running, err := s.sweepStatus(ctx, agentfleet.StatusRunning, &s.cursors.running, func(run agentfleet.Run) (bool, bool, error) {
		if !run.UpdatedAt.Before(cutoff) {
			return false, false, nil
		}
		ok, err := s.requeueRunning(ctx, run)
		if ok {
			s.requeued.WithLabelValues(string(agentfleet.StatusRunning)).Inc()
		}
		return false, ok, err
	})
	return queued + running, err
}

// sweepStatus pages through the runs in status, oldest first from
// *cursor, and calls check on each, until check says stop or
// strandedPassMax runs were looked at. It leaves in *cursor where the
// next pass goes on: "" (start over) after the last run or a stop, the
// page it failed in after an error, so that page is looked at again.
func (s *Stranded) sweepStatus(ctx context.Context, status agentfleet.RunStatus, cursor *string,
	check func(agentfleet.Run) (stop, requeued bool, err error)) (int, error) {
	requeued, looked := 0, 0
	for looked < strandedPassMax {
		page, err := s.cfg.Store.RunList(ctx, store.RunListParams{
			Status: []agentfleet.RunStatus{status}, Oldest: true, Limit: strandedPage, Cursor: *cursor,
		})
		if err != nil {
			return requeued, fmt.Errorf("list %s runs: %w", status, err)
		}
		for _, run := range page.Runs {
			looked++
			stop, ok, err := check(run)
			if err != nil {
				return requeued, err
			}
			if ok {
				requeued++
			}
			if stop {
				*cursor = ""
				return requeued, nil
			}
		}
		*cursor = page.NextCursor
		if page.NextCursor == "" {
			return requeued, nil
		}
	}
	return requeued, nil
}

// requeueAdmission publishes run's admission again when it is still
// queued for its first turn, may start, and no turn message of it waits
// in a queue.
func (s *Stranded) requeueAdmission(ctx context.Context, run agentfleet.Run) (bool, error) {
	if run.Turn != 0 {
		// Nothing puts a run back in the queue after a turn today; if
		// something does, it owns the run's next message.
		return false, nil
	}
	// The NATS lookup first: nearly every queued run has its turn
	// waiting, and a session run's check costs two store queries.
	stranded, err := s.stillStranded(ctx, run)
	if err != nil || !stranded {
		return false, err
	}
	if run.BatchID != "" {
		// Held back by its batch's max_concurrent, it has no turn yet on
		// purpose: a batch run's end releases it.
		held, err := s.cfg.Store.BatchRunIsHeld(ctx, run.ID)
		if err != nil || held {
			return false, err
		}
	}
	if run.SessionID != "" {
		next, err := store.SessionNext(ctx, s.cfg.Store, run.Tenant, run.SessionID)
		if err != nil {
			return false, fmt.Errorf("run %s: %w", run.ID, err)
		}
		if next == nil || next.ID != run.ID {
			return false, nil // the end of an earlier run starts it
		}
	}
	evs, err := s.cfg.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: run.ID, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("events of run %s: %w", run.ID, err)
	}
	var traceparent string
	if s.cfg.Admitted != nil {
		traceparent = s.cfg.Admitted(ctx, run)
	}
	if err := s.outbox.Admitted(ctx, store.RunCreateResult{Run: run, Events: evs, Startable: true}, traceparent); err != nil {
		return false, fmt.Errorf("requeue run %s: %w", run.ID, err)
	}
	return true, nil
}

// requeueRunning publishes a running run's next turn when no turn message
// of it waits in a queue. The turn goes straight to AF_WORK: the run was
// admitted and started long ago, and the scheduler would drop a first
// turn whose run it can no longer start. It is marked Retried, because a
// worker may have recorded the turn's model reply before the message was
// lost.
func (s *Stranded) requeueRunning(ctx context.Context, run agentfleet.Run) (bool, error) {
	stranded, err := s.stillStranded(ctx, run)
	if err != nil || !stranded {
		return false, err
	}
	next := bus.NextTurn(run)
	next.Retried = true
	if err := s.cfg.Bus.ForwardTurn(ctx, next); err != nil {
		return false, fmt.Errorf("requeue run %s: %w", run.ID, err)
	}
	return true, nil
}

// stillStranded reports whether run has no turn message in either queue
// and, read again after looking, has not changed since it was listed: a
// message consumed between the listing and the lookup has moved it on.
func (s *Stranded) stillStranded(ctx context.Context, run agentfleet.Run) (bool, error) {
	waiting, err := s.cfg.Bus.TurnWaiting(ctx, run.Tenant, run.ID)
	if err != nil || waiting {
		return false, err
	}
	now, err := s.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: run.ID})
	if err != nil {
		return false, fmt.Errorf("run %s: %w", run.ID, err)
	}
	return now.Status == run.Status && now.Turn == run.Turn && now.Wake == run.Wake && now.UpdatedAt.Equal(run.UpdatedAt), nil
}
