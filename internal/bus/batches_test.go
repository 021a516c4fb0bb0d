package bus_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/wire"
)

func TestBatchEventsKeptApartFromRunEvents(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ev := wire.BatchEvent{V: 1, Type: wire.BatchEventProgress, Batch: "b1", Tenant: "acme", Status: "running", Total: 3,
		Counts: map[agentfleet.RunStatus]int{agentfleet.StatusQueued: 3}, TS: time.Now().UTC()}
	require.NoError(t, s.b.PublishBatchEvent(s.ctx, ev, 1))
	require.NoError(t, s.b.PublishBatchEvent(s.ctx, ev, 1), "a repeat is stored once")
	ev.Type = wire.BatchEventDone
	require.NoError(t, s.b.PublishBatchEvent(s.ctx, ev, 1))
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 1, 1)))

	st, err := s.js.Stream(s.ctx, "AF_EVENTS")
	require.NoError(t, err)
	info, err := st.Info(s.ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Subjects["af.batches.acme.b1.progress"])
	require.EqualValues(t, 1, info.State.Subjects["af.batches.acme.b1.done"])
	require.EqualValues(t, 3, info.State.Msgs)
	// A consumer of the runs' events sees none of the batch's.
	info, err = st.Info(s.ctx, jetstream.WithSubjectFilter("af.events.>"))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, 1)

	ev.Batch = "b.1"
	require.ErrorIs(t, s.b.PublishBatchEvent(s.ctx, ev, 1), bus.ErrInvalidToken)
}

func TestEnqueueTurnsInWindows(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var ts []bus.Turn
	for i := range 2500 {
		ts = append(ts, bus.Turn{RunID: fmt.Sprintf("r%d", i), Tenant: "acme", Turn: 1, Batch: true})
	}
	require.NoError(t, s.b.EnqueueTurns(s.ctx, ts))
	require.NoError(t, s.b.EnqueueTurns(s.ctx, ts[:10]), "repeats are dropped")
	require.EqualValues(t, 2500, streamInfo(t, s.js, "AF_RUNQ").State.Msgs)
	bad := []bus.Turn{{RunID: "r", Tenant: "acme", Turn: 0}}
	require.Error(t, s.b.EnqueueTurns(s.ctx, bad), "refused before anything is sent")
}
