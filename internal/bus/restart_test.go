package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

type nextResult struct {
	d   *bus.Delivery
	err error
}

func nextAsync(ctx context.Context, src *bus.TurnSource) <-chan nextResult {
	ch := make(chan nextResult, 1)
	go func() {
		d, err := src.Next(ctx)
		ch <- nextResult{d, err}
	}()
	return ch
}

// enqueueWhenReady retries as callers are told to: a publish that failed
// because the connection was down is retried once the Bus is ready again.
func enqueueWhenReady(t *testing.T, ctx context.Context, b *bus.Bus, turn bus.Turn) {
	t.Helper()
	for {
		require.NoError(t, b.WaitReady(ctx))
		err := b.EnqueueTurn(ctx, turn)
		if err == nil {
			return
		}
		t.Logf("enqueue after restart: %v (retrying)", err)
		require.NoError(t, ctx.Err())
	}
}

func TestServerRestart(t *testing.T) {
	t.Parallel()
	for _, fresh := range []bool{false, true} {
		name := "same store"
		if fresh {
			name = "fresh store"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			e := bustest.StartServer(t)
			b := bustest.ConnectURL(t, e.ClientURL(), func(c *bus.Config) { c.PullExpiry = 500 * time.Millisecond })
			src, err := b.TurnSource(ctx, bus.QueueRunQ, "workers")
			require.NoError(t, err)

			before := bus.Turn{Tenant: "acme", RunID: "before", Turn: 1}
			require.NoError(t, b.EnqueueTurn(ctx, before))
			held, err := src.Next(ctx)
			require.NoError(t, err)
			require.Equal(t, before, held.Turn)

			// A slot waits for work while the server goes away.
			waiting := nextAsync(ctx, src)
			e.Shutdown()
			storeDir := e.StoreDir()
			if fresh {
				storeDir = t.TempDir()
			}
			bustest.StartServerAt(t, e.Listen(), storeDir)

			after := bus.Turn{Tenant: "acme", RunID: "after", Turn: 1}
			enqueueWhenReady(t, ctx, b, after)
			r := <-waiting
			require.NoError(t, r.err)
			require.Equal(t, after, r.d.Turn)
			require.NoError(t, r.d.Ack(ctx))

			if !fresh {
				// Consumer state survived: the delivery made before the
				// restart can still be settled. (With a fresh store it
				// died with the old store; the store of record re-queues
				// such turns.)
				require.NoError(t, held.Ack(ctx))
			}
			depth, err := b.QueueDepth(ctx, bus.QueueRunQ)
			require.NoError(t, err)
			require.Zero(t, depth)
			require.NoError(t, b.Ready(ctx))
		})
	}
}
