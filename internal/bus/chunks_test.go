package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

// A run's chunks reach its subscribers on core NATS, in order, and no
// other run's; nothing of them is stored in the events stream.
func TestChunksReachTheirRunsSubscribersOnly(t *testing.T) {
	t.Parallel()
	emb := bustest.StartServer(t)
	b := bustest.Connect(t, emb)
	got := make(chan agentfleet.Event, 16)
	stop, err := b.SubscribeChunks(context.Background(), "acme", "run-1", func(ev agentfleet.Event) { got <- ev })
	require.NoError(t, err)
	defer stop()
	require.Equal(t, "af.stream.acme.run-1", b.ChunkSubject("acme", "run-1"))
	evs := bustest.Events(t, b, bus.EventFilter{Tenant: "acme"})

	chunk := func(run string, i int) agentfleet.Event {
		return agentfleet.Event{RunID: run, Tenant: "acme", Turn: 1, Type: agentfleet.EventResponseChunk, Index: i, Text: "piece"}
	}
	require.NoError(t, b.PublishChunk(chunk("run-2", 1)))
	for i := 1; i <= 3; i++ {
		require.NoError(t, b.PublishChunk(chunk("run-1", i)))
	}
	for i := 1; i <= 3; i++ {
		ev := bustest.Recv(t, got, "chunk")
		require.Equal(t, "run-1", ev.RunID)
		require.Equal(t, i, ev.Index)
		require.Equal(t, "piece", ev.Text)
		require.Equal(t, agentfleet.EventVersion, ev.V)
	}
	select {
	case ev := <-got:
		t.Fatalf("unexpected chunk %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
	// Not events: nothing of them is on the events subjects.
	select {
	case ev := <-evs:
		t.Fatalf("a chunk was stored: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	require.ErrorIs(t, b.PublishChunk(agentfleet.Event{RunID: "a.b", Tenant: "acme"}), bus.ErrInvalidToken)
}
