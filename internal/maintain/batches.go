package maintain

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// The batch sweep: every BatchSweepIntervalDefault the leading
// dispatcher releases the held runs a missed RunFamilySettle owed
// (store.BatchSweep), finishes the batches whose runs have all ended, and
// publishes on <p>.batches.<tenant>.<batch>.<type> a progress event for
// each unfinished batch whose counts changed (so at most one a second)
// and a done event for each that finished, then POSTs done to the
// batch's callback_url, signed as a run's callback is (callbacks.go), a
// few times until the receiver answers 2xx.

const (
	// BatchSweepIntervalDefault is how often the batch sweep runs.
	BatchSweepIntervalDefault = time.Second
	batchSweepMax             = 100
	batchCallbackAttempts     = 3
)

// BatchesConfig configures the batch sweep (zero Interval:
// BatchSweepIntervalDefault).
type BatchesConfig struct {
	Store    store.Store
	Bus      *bus.Bus
	Signer   *Signer
	Interval time.Duration
	Leading  Leading
	Logger   *slog.Logger
}

// Batches is the batch sweep. Its passes are one at a time.
type Batches struct {
	sweep
	cfg BatchesConfig
	// seen is what earlier passes published of each open batch.
	seen map[string]*batchEventSeq
	// callbacks are the batch callbacks passes started.
	callbacks sync.WaitGroup
}

// batchEventSeq numbers a batch's published events of each type, for
// their message ids.
type batchEventSeq struct {
	progress int64
	counts   map[agentfleet.RunStatus]int
}

// NewBatches returns the batch sweep.
func NewBatches(cfg BatchesConfig) *Batches {
	cfg.Interval = cmp.Or(cfg.Interval, BatchSweepIntervalDefault)
	return &Batches{sweep: newSweep(cfg.Store, cfg.Bus, cfg.Logger), cfg: cfg, seen: map[string]*batchEventSeq{}}
}

// Run runs the batch sweep every interval until ctx ends, while this
// process leads. It waits for the callbacks it started before it returns.
func (b *Batches) Run(ctx context.Context) error {
	defer b.callbacks.Wait()
	return every(ctx, b.cfg.Interval, b.log, "batch sweep", leader(b.cfg.Leading, b.pass))
}

// Pass is one pass of the batch sweep, which waits for the callbacks it
// sends.
func (b *Batches) Pass(ctx context.Context) error {
	defer b.callbacks.Wait()
	return b.pass(ctx)
}

func (b *Batches) pass(ctx context.Context) error {
	res, err := b.cfg.Store.BatchSweep(ctx, store.BatchSweepParams{Now: time.Now(), Limit: batchSweepMax})
	if err != nil {
		return err
	}
	if err := b.outbox.Family(ctx, store.RunFamilySettleResult{Released: res.Released}); err != nil {
		b.log.Warn("publish the runs a batch released", "err", err)
	}
	for _, fin := range res.Finished {
		got, err := b.cfg.Store.BatchGetByID(ctx, store.BatchGetByIDParams{ID: fin.ID})
		if err != nil {
			return err
		}
		ev := batchEvent(got, wire.BatchEventDone)
		if err := b.cfg.Bus.PublishBatchEvent(ctx, ev, 1); err != nil {
			b.log.Warn("publish a batch's done event", "batch", got.ID, "err", err)
		}
		delete(b.seen, got.ID)
		if got.CallbackURL != "" {
			b.callbacks.Go(func() { b.sendCallback(ctx, got, ev) })
		}
	}
	open, err := b.cfg.Store.BatchUnfinished(ctx, batchSweepMax)
	if err != nil {
		return err
	}
	for _, u := range open {
		got, err := b.cfg.Store.BatchGetByID(ctx, store.BatchGetByIDParams{ID: u.ID})
		if err != nil {
			return err
		}
		st := b.seen[got.ID]
		if st == nil {
			st = &batchEventSeq{}
			b.seen[got.ID] = st
		}
		if maps.Equal(st.counts, got.Counts) {
			continue
		}
		if err := b.cfg.Bus.PublishBatchEvent(ctx, batchEvent(got, wire.BatchEventProgress), st.progress+1); err != nil {
			b.log.Warn("publish a batch's progress", "batch", got.ID, "err", err)
			continue
		}
		st.progress++
		st.counts = got.Counts
	}
	return nil
}

func batchEvent(b store.Batch, typ string) wire.BatchEvent {
	return wire.BatchEvent{V: agentfleet.EventVersion, Type: typ, Batch: b.ID, Tenant: b.Tenant, Status: string(b.Status),
		Total: b.Total, Counts: b.Counts, Usage: b.Usage, TS: time.Now().UTC()}
}

// sendCallback POSTs a finished batch's done event to its callback_url,
// trying again a few times while the receiver fails.
func (b *Batches) sendCallback(ctx context.Context, batch store.Batch, ev wire.BatchEvent) {
	if b.cfg.Signer == nil {
		return
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return
	}
	wait := b.cfg.Signer.backoff
	for attempt := 1; attempt <= batchCallbackAttempts; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, callbackTimeout)
		_, err = b.cfg.Signer.Post(cctx, batch.Tenant, batch.CallbackURL, "batch_"+batch.ID+"_done", body)
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
	b.log.Warn("batch callback failed", "batch", batch.ID, "url", batch.CallbackURL, "err", fmt.Errorf("after %d attempts: %w", batchCallbackAttempts, err))
}
