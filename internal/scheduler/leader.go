// The leader: the scheduling loop of the lease holder, its pullers from
// the turn queue and the pacing of its looks at the workers' queue.

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
)

// lead opens the leader's queues, starts its pullers and runs a leader
// until ctx ends.
func (s *Scheduler) lead(ctx context.Context) error {
	var applying sync.WaitGroup
	defer applying.Wait()
	applying.Go(func() { s.applyReplicas(ctx) })
	src, err := s.cfg.Bus.TurnSource(ctx, bus.QueueRunQ, s.cfg.Durable, bus.HoldFor(s.cfg.HoldAckWait), bus.MaxHeld(s.cfg.HoldMax), bus.ResetOnReconnect())
	if err != nil {
		return fmt.Errorf("scheduler: open turn queue: %w", err)
	}
	// Reclaim what a previous leader held un-acked.
	if err := src.Reset(ctx); err != nil {
		return fmt.Errorf("scheduler: reset turn queue consumer: %w", err)
	}
	work, err := s.cfg.Bus.TurnSource(ctx, bus.QueueWork, s.cfg.WorkersDurable)
	if err != nil {
		return fmt.Errorf("scheduler: open work queue: %w", err)
	}
	slots, err := s.cfg.Bus.TallySlots(ctx, s.cfg.WorkersDurable)
	if err != nil {
		return fmt.Errorf("scheduler: listen to the workers' slots: %w", err)
	}
	defer slots.Close()

	intake := make(chan *bus.Delivery, 256)
	pctx, stopPullers := context.WithCancel(ctx)
	var pullers sync.WaitGroup
	for range s.cfg.Pullers {
		pullers.Add(1)
		go func() {
			defer pullers.Done()
			s.pull(pctx, src, intake)
		}()
	}
	defer func() {
		stopPullers()
		pullers.Wait()
	}()

	l := &leader{s: s, st: newState(), work: work, slots: slots, intake: intake,
		refills: make(chan refill, 16), lookEvery: pollFull}
	defer l.refillers.Wait()
	if err := s.reclaimSpills(ctx, l.st); err != nil {
		return err
	}
	return l.run(ctx)
}

// leader is the scheduling loop of one term of leadership: the turns it
// holds, the queues it reads, and the pacing of its looks at the
// workers' queue. Its methods run on lead's goroutine only.
type leader struct {
	s     *Scheduler
	st    *state
	work  *bus.TurnSource
	slots *bus.SlotTally
	// intake brings the pullers' deliveries, refills the spilled turns
	// fetched back by the refillers.
	intake    <-chan *bus.Delivery
	refills   chan refill
	refillers sync.WaitGroup
	// credit is how many more turns the workers' queue can take by its
	// last reported backlog. When that backlog left no room, the next
	// look waits until nextLook, however many turns arrive meanwhile.
	credit       int
	lookEvery    time.Duration
	nextLook     time.Time
	lookFailures failStreak
	// retry, when set, brings the loop round again at retryAt.
	retry   *time.Timer
	retryAt time.Time
}

// run handles one event at a time until ctx ends (turns arrived, turns
// refilled, the retry timer fired) and after each forwards what the
// workers' queue has room for.
func (l *leader) run(ctx context.Context) error {
	for {
		// After the last round's forwards: a spilling tenant holding few
		// turns takes some back.
		l.s.startRefills(ctx, l.st, l.refills, &l.refillers)
		select {
		case <-ctx.Done():
			return nil
		case d := <-l.intake:
			l.arrived(ctx, d)
		case r := <-l.refills:
			l.s.refilled(ctx, l.st, r)
		case <-l.retryC():
			l.retry = nil
		}
		l.forward(ctx)
	}
}

// arrived takes in a delivery and whatever else the pullers have queued.
func (l *leader) arrived(ctx context.Context, d *bus.Delivery) {
	l.s.take(ctx, l.st, d)
	for {
		select {
		case d := <-l.intake:
			l.s.take(ctx, l.st, d)
		default:
			return
		}
	}
}

// forward relieves the hold, forwards what the workers' queue has room
// for and, while turns are left, sets the loop to come round again.
func (l *leader) forward(ctx context.Context) {
	s, st := l.s, l.st
	s.relieve(ctx, st)
	if st.q.Len() == 0 {
		return
	}
	if l.credit <= 0 && !l.look(ctx) {
		return
	}
	room := l.credit
	n := s.dispatch(ctx, st, room)
	l.credit -= n
	if st.q.Len() == 0 {
		return
	}
	// Turns are left: the ready queue is full (look again soon), or
	// what is left is held back (a tenant at its max concurrent
	// runs, a failed forward): look again later.
	if n == room {
		l.retryIn(l.lookEvery)
	} else {
		l.retryIn(pollBlocked)
	}
}

// look reads the workers' backlog into credit. Asking the server for it
// is a JetStream API call; forward asks only when the room it last
// reported is used up, and after a look that found no room, not before
// nextLook: turns arriving meanwhile would otherwise each cost a look.
// It returns false when it may not look yet or the read failed; the
// retry timer is then set for the next look.
func (l *leader) look(ctx context.Context) bool {
	if wait := time.Until(l.nextLook); wait > 0 {
		l.retryIn(wait)
		return false
	}
	room, bl, err := l.s.room(ctx, l.st, l.work, l.slots)
	if err != nil {
		// NATS is away: look again later, later each time.
		wait := l.lookFailures.fail(l.s.log, "scheduler: read work queue backlog", err)
		l.credit, l.nextLook = 0, time.Now().Add(wait)
		l.retryIn(wait)
		return false
	}
	l.lookFailures.ok(l.s.log, "scheduler: work queue backlog read again")
	l.credit = room
	l.lookEvery = nextPollInterval(l.lookEvery, bl, room)
	l.nextLook = time.Time{}
	if room == 0 {
		l.nextLook = time.Now().Add(l.lookEvery)
	}
	return true
}

// retryC is the retry timer's channel; nil (never ready) when none is set.
func (l *leader) retryC() <-chan time.Time {
	if l.retry == nil {
		return nil
	}
	return l.retry.C
}

// retryIn makes the loop come round again within d.
func (l *leader) retryIn(d time.Duration) {
	at := time.Now().Add(d)
	switch {
	case l.retry == nil:
		l.retry = time.NewTimer(d)
	case at.Before(l.retryAt):
		l.retry.Reset(d)
	default:
		return
	}
	l.retryAt = at
}

// failStreak paces a loop through failures in a row (NATS away): each
// retry waits twice as long as the one before, from pollBlocked up to
// failRetryMax, and only the first failure and then one every
// failLogEvery are logged, with the count, so that an outage of minutes
// writes a few lines rather than one per retry.
type failStreak struct {
	n      int
	logged time.Time
}

const (
	failRetryMax = time.Second
	failLogEvery = 10 * time.Second
)

// fail counts a failure, logs it if it is due, and returns how long to
// wait before trying again.
func (f *failStreak) fail(log *slog.Logger, msg string, err error) time.Duration {
	f.n++
	if f.n == 1 || time.Since(f.logged) >= failLogEvery {
		log.Warn(msg, "err", err, "failures_in_a_row", f.n)
		f.logged = time.Now()
	}
	return min(pollBlocked<<min(f.n-1, 8), failRetryMax)
}

// ok ends a streak, saying so if there was one.
func (f *failStreak) ok(log *slog.Logger, msg string) {
	if f.n > 0 {
		log.Info(msg, "after_failures", f.n)
		f.n = 0
	}
}

// nextPollInterval adapts how soon a ready queue found full is looked at
// again to how fast the workers drain it. A look that finds it still full
// came too early: wait twice as long next time, up to pollFullMax. A look
// that finds it empty with workers waiting came too late, as idle slots
// show: go back to pollFull. Anything between was about right. At a
// turn rate the cushion (ReadyDepth) covers for pollFullMax, the queue is
// looked at a few times per interval rather than once per arriving turn
// or every pollFull; at higher rates the interval stays near pollFull.
func nextPollInterval(cur time.Duration, bl bus.Backlog, room int) time.Duration {
	switch {
	case room == 0:
		return min(2*cur, pollFullMax)
	case bl.Undelivered == 0 && bl.Waiting > 0:
		return pollFull
	}
	return cur
}

// pull feeds the intake until ctx ends: one blocking pull for the next
// turn (so an idle queue answers at once), then whatever else is queued
// in one more round trip (so a busy one is read in batches).
func (s *Scheduler) pull(ctx context.Context, src *bus.TurnSource, intake chan<- *bus.Delivery) {
	for {
		d, err := src.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, bus.ErrClosed) {
				return
			}
			s.log.Warn("scheduler pull", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			continue
		}
		ds := []*bus.Delivery{d}
		if more, err := src.FetchReady(ctx, pullBatchMax); err == nil {
			ds = append(ds, more...)
		}
		for _, d := range ds {
			select {
			case intake <- d:
			case <-ctx.Done():
				return
			}
		}
	}
}
