package fleet

import (
	"context"
	"github.com/agentfleet/agentfleet/wire"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/scheduler"
)

// TestFleetSampler: the sampler hears the workers' slots and counts the
// turns queued, keeps at most an hour of samples, oldest first, and
// stops with its context.
func TestFleetSampler(t *testing.T) {
	t.Parallel()
	emb := bustest.StartServer(t)
	b := bustest.Connect(t, emb)
	ctx := t.Context()
	require.NoError(t, b.AnnounceSlots(scheduler.WorkersDefault, "w1", 8))
	for i := range 3 {
		require.NoError(t, b.EnqueueTurn(ctx, bus.Turn{RunID: "run-" + string(rune('a'+i)), Tenant: "acme", Turn: 1}))
	}
	s := newFleetSampler(b, 50*time.Millisecond, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	done := make(chan error, 1)
	runCtx, stop := contextWithCancel(t)
	go func() { done <- s.Run(runCtx) }()
	require.Eventually(t, func() bool {
		_ = b.AnnounceSlots(scheduler.WorkersDefault, "w1", 8)
		_, got := s.FleetSamples()
		return len(got) >= 3 && got[len(got)-1].Slots == 8
	}, 10*time.Second, 20*time.Millisecond)
	every, got := s.FleetSamples()
	require.Equal(t, 50*time.Millisecond, every)
	last := got[len(got)-1]
	require.Equal(t, int64(3), last.QueueDepth, "three turns in AF_RUNQ")
	require.Zero(t, last.SlotsInUse)
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].At.Before(got[i-1].At), "oldest first")
	}
	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the sampler did not stop with its context")
	}

	// The ring keeps the newest hour.
	r := newFleetSampler(b, 20*time.Minute, slog.Default())
	for i := range 5 {
		r.keep(sampleAt(i))
	}
	_, kept := r.FleetSamples()
	require.Len(t, kept, 3)
	require.Equal(t, []int{2, 3, 4}, []int{kept[0].Slots, kept[1].Slots, kept[2].Slots})
}

func sampleAt(i int) wire.FleetSample {
	return wire.FleetSample{At: time.Unix(int64(i), 0), Slots: i}
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}
