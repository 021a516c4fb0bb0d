package bus_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
)

// The tally sums the latest announcement of each worker of its consumer:
// a worker that announces again replaces its count, one that announces 0
// leaves at once, one that falls silent leaves after SlotsTTL, and
// another consumer's workers never count.
func TestSlotTallySumsLiveWorkers(t *testing.T) {
	t.Parallel()
	s := setup(t)
	tally, err := s.b.TallySlots(s.ctx, "workers")
	require.NoError(t, err)
	defer tally.Close()
	var now atomic.Int64
	now.Store(time.Unix(1700000000, 0).UnixNano())
	tally.SetClockForTest(func() time.Time { return time.Unix(0, now.Load()) })

	require.Zero(t, tally.Total(), "nobody announced yet")
	require.NoError(t, s.b.AnnounceSlots("workers", "w1", 64))
	require.NoError(t, s.b.AnnounceSlots("workers", "w2", 8))
	require.NoError(t, s.b.AnnounceSlots("others", "w3", 100))
	require.Eventually(t, func() bool { return tally.Total() == 72 }, 5*time.Second, 5*time.Millisecond)

	require.NoError(t, s.b.AnnounceSlots("workers", "w2", 16))
	require.Eventually(t, func() bool { return tally.Total() == 80 }, 5*time.Second, 5*time.Millisecond)

	require.NoError(t, s.b.AnnounceSlots("workers", "w1", 0))
	require.Eventually(t, func() bool { return tally.Total() == 16 }, 5*time.Second, 5*time.Millisecond)

	now.Add(int64(bus.SlotsTTL - time.Millisecond))
	require.Equal(t, 16, tally.Total(), "w2 is still within its TTL")
	now.Add(int64(2 * time.Millisecond))
	require.Zero(t, tally.Total(), "w2 fell silent for longer than SlotsTTL")
}

func TestAnnounceSlotsRejectsBadInput(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.ErrorContains(t, s.b.AnnounceSlots("work.ers", "w1", 1), "durable")
	require.ErrorContains(t, s.b.AnnounceSlots("workers", "", 1), "worker id")
	require.ErrorContains(t, s.b.AnnounceSlots("workers", "w1", -1), "slots >= 0")
}
