package bus

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/agentfleet"
)

// PublishChunk publishes a response_chunk event (a piece of a streamed
// model reply) on core NATS, <p>.stream.<tenant>.<run>: not stored and
// not acknowledged, so a subscriber that is not listening misses it. The
// run's model_call event, stored, carries the whole reply. It does not
// wait for the server: the connection flushes it at once, and a chunk is
// worth sending only while it is fresh.
func (b *Bus) PublishChunk(ev agentfleet.Event) error {
	if err := validRun(ev.Tenant, ev.RunID); err != nil {
		return fmt.Errorf("publish chunk: %w", err)
	}
	if ev.V == 0 {
		ev.V = agentfleet.EventVersion
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("publish chunk of run %s: %w", ev.RunID, err)
	}
	if err := b.nc.Publish(b.n.streamSubject(ev.Tenant, ev.RunID), data); err != nil {
		return fmt.Errorf("publish chunk of run %s: %w", ev.RunID, err)
	}
	return nil
}

// ChunkSubject is the subject of a run's response chunks.
func (b *Bus) ChunkSubject(tenant, runID string) string { return b.n.streamSubject(tenant, runID) }

// SubscribeChunks calls fn with each response chunk of one run (every run
// of the tenant when runID is empty) as it is published, from one goroutine at a time; fn should not block. The
// subscription is registered at the server when SubscribeChunks returns,
// and ends with unsubscribe or Close. A message that is not a chunk event
// is skipped.
func (b *Bus) SubscribeChunks(ctx context.Context, tenant, runID string, fn func(agentfleet.Event)) (unsubscribe func(), err error) {
	if err := validToken(tenant); err != nil {
		return nil, fmt.Errorf("subscribe to chunks: tenant: %w", err)
	}
	if runID != "" {
		if err := validToken(runID); err != nil {
			return nil, fmt.Errorf("subscribe to chunks: run id: %w", err)
		}
	}
	return b.subscribe(ctx, b.n.streamSubject(tenant, runID), func(m *nats.Msg) {
		var ev agentfleet.Event
		if json.Unmarshal(m.Data, &ev) != nil || ev.Type != agentfleet.EventResponseChunk {
			return
		}
		fn(ev)
	})
}
