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

// lead is the scheduling loop of the leader.
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

	st := newState()
	refills := make(chan refill, 16)
	var refillers sync.WaitGroup
	defer refillers.Wait()
	if err := s.reclaimSpills(ctx, st); err != nil {
		return err
	}
	// credit is how many more turns the workers' queue can take by its
	// last reported backlog. When that backlog left no room, the next
	// look waits until nextLook, however many turns arrive meanwhile.
	credit := 0
	lookEvery := pollFull
	var nextLook time.Time
	var retry *time.Timer
	var retryAt time.Time
	var lookFailures failStreak
	retryC := func() <-chan time.Time {
		if retry == nil {
			return nil
		}
		return retry.C
	}
	// retryIn makes the loop come round again within d.
	retryIn := func(d time.Duration) {
		at := time.Now().Add(d)
		switch {
		case retry == nil:
			retry = time.NewTimer(d)
		case at.Before(retryAt):
			retry.Reset(d)
		default:
			return
		}
		retryAt = at
	}
	for {
		// After the last round's forwards: a spilling tenant holding few
		// turns takes some back.
		s.startRefills(ctx, st, refills, &refillers)
		select {
		case <-ctx.Done():
			return nil
		case d := <-intake:
			s.take(ctx, st, d)
		drain:
			for {
				select {
				case d := <-intake:
					s.take(ctx, st, d)
				default:
					break drain
				}
			}
		case r := <-refills:
			s.refilled(ctx, st, r)
		case <-retryC():
			retry = nil
		}
		s.relieve(ctx, st)
		if st.q.Len() == 0 {
			continue
		}
		// Asking the server for the workers' backlog is a JetStream API
		// call; ask only when the room it last reported is used up, and
		// after a look that found no room, not before nextLook: turns
		// arriving meanwhile would otherwise each cost a look.
		if credit <= 0 {
			if wait := time.Until(nextLook); wait > 0 {
				retryIn(wait)
				continue
			}
			room, bl, err := s.room(ctx, st, work, slots)
			if err != nil {
				// NATS is away: look again later, later each time.
				wait := lookFailures.fail(s.log, "scheduler: read work queue backlog", err)
				credit, nextLook = 0, time.Now().Add(wait)
				retryIn(wait)
				continue
			}
			lookFailures.ok(s.log, "scheduler: work queue backlog read again")
			credit = room
			lookEvery = nextPollInterval(lookEvery, bl, room)
			nextLook = time.Time{}
			if room == 0 {
				nextLook = time.Now().Add(lookEvery)
			}
		}
		room := credit
		n := s.dispatch(ctx, st, room)
		credit -= n
		if st.q.Len() == 0 {
			continue
		}
		// Turns are left: the ready queue is full (look again soon), or
		// what is left is held back (a tenant at its max concurrent
		// runs, a failed forward): look again later.
		if n == room {
			retryIn(lookEvery)
		} else {
			retryIn(pollBlocked)
		}
	}
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
