package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A worker out of resources takes fewer turns: the limit drops to three
// quarters of the turns running when one was shed, never below one, and
// grows back by one per success up to the configured slots.
func TestSlotGateShrinksOnExhaustionAndGrowsBack(t *testing.T) {
	t.Parallel()
	g := newSlotGate(8)
	require.Equal(t, 8, g.tryTake(10), "all slots free")
	require.Equal(t, 0, g.tryTake(1))

	require.Equal(t, 6, g.shrink(), "8 running when one was shed")
	g.release(1) // the shed turn's slot
	require.Equal(t, 0, g.tryTake(1), "7 running, limit 6")
	require.Equal(t, 5, g.shrink(), "a second shed at 7 running")
	g.release(7)
	require.Equal(t, 5, g.tryTake(8), "the limit holds once the turns end")
	g.release(5)

	require.True(t, g.take(context.Background(), nil))
	require.Equal(t, 1, g.shrink(), "one running: never below one")
	require.Equal(t, 1, g.shrink())
	g.release(1)
	require.Equal(t, 1, g.current())
	for want := 2; want <= 8; want++ {
		g.grow()
		require.Equal(t, want, g.current())
	}
	g.grow()
	require.Equal(t, 8, g.current(), "not beyond the slots")
}

// A taker waiting on a full gate is woken by a released slot or a limit
// that grows, and gives up when its context ends.
func TestSlotGateTakeWaits(t *testing.T) {
	t.Parallel()
	g := newSlotGate(2)
	require.Equal(t, 2, g.tryTake(2))
	g.shrink() // limit 1 with 2 running

	took := make(chan bool, 1)
	go func() { took <- g.take(context.Background(), nil) }()
	g.release(1) // 1 running, limit 1: still full
	select {
	case <-took:
		t.Fatal("took a slot beyond the limit")
	case <-time.After(50 * time.Millisecond):
	}
	g.grow()
	require.True(t, <-took, "woken by the limit growing")

	ctx, cancel := context.WithCancel(context.Background())
	go func() { took <- g.take(ctx, nil) }()
	cancel()
	require.False(t, <-took)
	stop := make(chan struct{})
	go func() { took <- g.take(context.Background(), stop) }()
	close(stop)
	require.False(t, <-took)
}
