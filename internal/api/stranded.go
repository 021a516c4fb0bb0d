package api

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Runs stranded at admission.
//
// handleRunCreate records a run in the store and then publishes its
// queued event and its first turn. When the dispatcher dies between the
// two, or NATS refuses the publish and the client never submits again
// with the same idempotency key (a client that sent none cannot), the run
// stays queued with no turn message anywhere and nothing would ever start
// it. The dispatcher's sweep (SweepStranded) finds such runs and publishes
// what their submission owed. Publishing twice is harmless: both messages
// carry ids the streams deduplicate, and a worker drops a turn message
// for a run that is no longer due it.

const (
	// StrandedAfterDefault is how long a run must have been queued for
	// its first turn before the sweep looks at it: well beyond the
	// submission's own publishes (publishTimeout).
	StrandedAfterDefault = time.Minute
	// StrandedIntervalDefault is how often the sweep runs.
	StrandedIntervalDefault = 30 * time.Second
	strandedPage            = 200
	// strandedPassMax bounds one pass: a backlog of runs legitimately
	// queued (each with its turn waiting in AF_RUNQ) costs two NATS
	// lookups per run, and the next pass goes on where this one stopped.
	strandedPassMax = 2000
)

// SweepStranded calls RequeueStranded every interval, for the runs queued
// longer than after, until ctx ends.
func (s *Server) SweepStranded(ctx context.Context, interval, after time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.RequeueStranded(ctx, time.Now().Add(-after))
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sweep of runs stranded at admission", "err", err)
		}
		if n > 0 {
			s.log.Warn("requeued runs whose submission recorded them but never queued them", "runs", n)
		}
	}
}

// RequeueStranded looks at up to strandedPassMax runs queued for their
// first turn since before cutoff, oldest first from where the previous
// pass stopped, and for each that may start (no session, or the head of
// its session) and has no turn message in either queue publishes its
// admission again: its queued event and its first turn. It returns how
// many runs it requeued.
func (s *Server) RequeueStranded(ctx context.Context, cutoff time.Time) (int, error) {
	s.stranded.Lock()
	defer s.stranded.Unlock()
	requeued, looked := 0, 0
	for looked < strandedPassMax {
		page, err := s.cfg.Store.RunList(ctx, store.RunListParams{
			Status: []agentfleet.RunStatus{agentfleet.StatusQueued}, Oldest: true,
			Limit: strandedPage, Cursor: s.stranded.cursor,
		})
		if err != nil {
			return requeued, fmt.Errorf("list queued runs: %w", err)
		}
		for _, run := range page.Runs {
			if !run.CreatedAt.Before(cutoff) {
				// Every later run is newer still: start over next pass.
				s.stranded.cursor = ""
				return requeued, nil
			}
			looked++
			ok, err := s.requeueIfStranded(ctx, run)
			if err != nil {
				// The cursor stays before this page: the next pass
				// looks at this run again.
				return requeued, err
			}
			if ok {
				requeued++
			}
		}
		s.stranded.cursor = page.NextCursor
		if page.NextCursor == "" {
			return requeued, nil
		}
	}
	return requeued, nil
}

// requeueIfStranded publishes run's admission again when it is still
// queued for its first turn, may start, and no turn message of it waits
// in a queue.
func (s *Server) requeueIfStranded(ctx context.Context, run agentfleet.Run) (bool, error) {
	if run.Turn != 0 {
		// Put back in the queue after a turn: whoever put it back owns
		// its next message.
		return false, nil
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
	waiting, err := s.cfg.Bus.TurnWaiting(ctx, run.Tenant, run.ID)
	if err != nil || waiting {
		return false, err
	}
	// Read the run again: a turn message consumed between the listing
	// and the lookup has started it.
	run, err = s.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: run.ID})
	if err != nil {
		return false, fmt.Errorf("run %s: %w", run.ID, err)
	}
	if run.Status != agentfleet.StatusQueued || run.Turn != 0 {
		return false, nil
	}
	evs, err := s.cfg.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: run.ID, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("events of run %s: %w", run.ID, err)
	}
	if err := s.publishAdmission(ctx, run, evs, true); err != nil {
		return false, fmt.Errorf("requeue run %s: %w", run.ID, err)
	}
	return true, nil
}
