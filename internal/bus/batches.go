package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// PublishBatchEvent publishes ev to AF_EVENTS on
// <p>.batches.<tenant>.<batch>.<type>, apart from the runs' events so that
// consumers filtering <p>.events.<tenant>.<run>.> never see it. n numbers
// the batch's events of that type (msg id <batch>/<type>/<n>), so a
// repeat is stored once.
func (b *Bus) PublishBatchEvent(ctx context.Context, ev wire.BatchEvent, n int64) error {
	if err := validToken(ev.Tenant); err != nil {
		return fmt.Errorf("batch event: tenant: %w", err)
	}
	if err := validToken(ev.Batch); err != nil {
		return fmt.Errorf("batch event: batch: %w", err)
	}
	if err := validToken(ev.Type); err != nil {
		return fmt.Errorf("batch event: type: %w", err)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("batch event: %w", err)
	}
	msg := &nats.Msg{Subject: b.n.batchSubject(ev.Tenant, ev.Batch, ev.Type), Data: data}
	id := ev.Batch + "/" + ev.Type + "/" + strconv.FormatInt(n, 10)
	if _, err := b.publish(ctx, msg, b.n.stream(streamEvents), id); err != nil {
		return fmt.Errorf("publish batch event %s: %w", id, err)
	}
	return nil
}

// PublishEventsBulk is PublishEvents for many events (a batch's queued
// events), sent in windows of publishWindow.
func (b *Bus) PublishEventsBulk(ctx context.Context, evs []agentfleet.Event) error {
	for from := 0; from < len(evs); from += publishWindow {
		if err := b.PublishEvents(ctx, evs[from:min(len(evs), from+publishWindow)]); err != nil {
			return err
		}
	}
	return nil
}

// SubscribeBatchEvents calls fn for every batch event of tenant (of one
// batch when batch is set) published from now on, as SubscribeEvents does
// for runs' events.
func (b *Bus) SubscribeBatchEvents(ctx context.Context, tenant, batch string, fn func(wire.BatchEvent)) (unsubscribe func(), err error) {
	if err := validToken(tenant); err != nil {
		return nil, fmt.Errorf("subscribe batch events: tenant: %w", err)
	}
	if batch != "" {
		if err := validToken(batch); err != nil {
			return nil, fmt.Errorf("subscribe batch events: batch: %w", err)
		}
	}
	return b.subscribe(ctx, b.n.batchSubject(tenant, batch, ""), func(m *nats.Msg) {
		var ev wire.BatchEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			b.log.Warn("skip undecodable batch event", "subject", m.Subject, "err", err)
			return
		}
		fn(ev)
	})
}
