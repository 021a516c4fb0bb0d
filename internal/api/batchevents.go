package api

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Batch events and the batch sweep.
//
// Every BatchSweepIntervalDefault the leading dispatcher releases the
// held runs a missed RunEnded owed (store.BatchSweep), finishes the
// batches whose runs have all ended, and publishes on
// <p>.batches.<tenant>.<batch>.<type> a progress event for each
// unfinished batch whose counts changed (so at most one a second) and a
// done event for each that finished, then POSTs done to the batch's
// callback_url, signed as a run's callback is (callbacks.go), a few times
// until the receiver answers 2xx.

const (
	// BatchSweepIntervalDefault is how often the batch sweep runs.
	BatchSweepIntervalDefault = time.Second
	batchSweepMax             = 100
	batchCallbackAttempts     = 3
)

// batchEventSeq numbers a batch's published events of each type, for
// their message ids.
type batchEventSeq struct {
	progress int64
	counts   map[agentfleet.RunStatus]int
}

// SweepBatches runs the batch sweep every interval until ctx ends, while
// leading says this process schedules (nil: always). It waits for the
// callbacks it started before it returns.
func (s *Server) SweepBatches(ctx context.Context, interval time.Duration, leading func() bool) {
	var callbacks sync.WaitGroup
	defer callbacks.Wait()
	seen := map[string]*batchEventSeq{}
	whileLeading(ctx, interval, leading, func() {
		if err := s.sweepBatchesOnce(ctx, seen, &callbacks); err != nil && ctx.Err() == nil {
			s.log.Warn("batch sweep", "err", err)
		}
	})
}

// sweepBatchesOnce is one pass of the batch sweep; seen is what earlier
// passes published. Callbacks it starts join callbacks.
func (s *Server) sweepBatchesOnce(ctx context.Context, seen map[string]*batchEventSeq, callbacks *sync.WaitGroup) error {
	res, err := s.cfg.Store.BatchSweep(ctx, store.BatchSweepParams{Now: time.Now(), Limit: batchSweepMax})
	if err != nil {
		return err
	}
	s.publishFamily(ctx, store.RunEndedResult{Released: res.Released})
	for _, fin := range res.Finished {
		b, err := s.cfg.Store.BatchGetByID(ctx, store.BatchGetByIDParams{ID: fin.ID})
		if err != nil {
			return err
		}
		ev := batchEvent(b, wire.BatchEventDone)
		if err := s.cfg.Bus.PublishBatchEvent(ctx, ev, 1); err != nil {
			s.log.Warn("publish a batch's done event", "batch", b.ID, "err", err)
		}
		delete(seen, b.ID)
		if b.CallbackURL != "" && callbacks != nil {
			callbacks.Go(func() { s.sendBatchCallback(ctx, b, ev) })
		}
	}
	open, err := s.cfg.Store.BatchUnfinished(ctx, batchSweepMax)
	if err != nil {
		return err
	}
	for _, u := range open {
		b, err := s.cfg.Store.BatchGetByID(ctx, store.BatchGetByIDParams{ID: u.ID})
		if err != nil {
			return err
		}
		st := seen[b.ID]
		if st == nil {
			st = &batchEventSeq{}
			if seen != nil {
				seen[b.ID] = st
			}
		}
		if maps.Equal(st.counts, b.Counts) {
			continue
		}
		if err := s.cfg.Bus.PublishBatchEvent(ctx, batchEvent(b, wire.BatchEventProgress), st.progress+1); err != nil {
			s.log.Warn("publish a batch's progress", "batch", b.ID, "err", err)
			continue
		}
		st.progress++
		st.counts = b.Counts
	}
	return nil
}

func batchEvent(b store.Batch, typ string) wire.BatchEvent {
	return wire.BatchEvent{V: agentfleet.EventVersion, Type: typ, Batch: b.ID, Tenant: b.Tenant, Status: string(b.Status),
		Total: b.Total, Counts: b.Counts, Usage: b.Usage, TS: time.Now().UTC()}
}

// sendBatchCallback POSTs a finished batch's done event to its
// callback_url, trying again a few times while the receiver fails.
func (s *Server) sendBatchCallback(ctx context.Context, b store.Batch, ev wire.BatchEvent) {
	body, err := json.Marshal(ev)
	if err != nil {
		return
	}
	wait := s.callbacks.backoff
	for attempt := 1; attempt <= batchCallbackAttempts; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, callbackTimeout)
		_, err = s.postSigned(cctx, b.Tenant, b.CallbackURL, "batch_"+b.ID+"_done", body)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 4
	}
	s.log.Warn("batch callback failed", "batch", b.ID, "url", b.CallbackURL, "err", fmt.Errorf("after %d attempts: %w", batchCallbackAttempts, err))
}
