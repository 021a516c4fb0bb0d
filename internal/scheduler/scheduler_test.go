package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/budget"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// A forwarded turn is marked Direct (its successor may skip the
// scheduler) exactly when no other tenant's turn is left waiting: with
// two tenants queued, only the very last turn forwarded is; with one
// tenant, every turn is.
func TestDispatchMarksTurnsDirectOnlyWhenNoOtherTenantWaits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := bustest.Connect(t, bustest.StartServer(t))
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "store.db")})
	require.NoError(t, err)
	defer st.Close()
	s, err := New(Config{Bus: b, Store: st})
	require.NoError(t, err)
	runq, err := b.TurnSource(ctx, bus.QueueRunQ, s.cfg.Durable)
	require.NoError(t, err)
	work, err := b.TurnSource(ctx, bus.QueueWork, s.cfg.WorkersDurable)
	require.NoError(t, err)

	// forward queues the turns of the tenants given (three runs each,
	// in turn), hands them to the scheduler's state, dispatches them
	// in rounds of the sizes given, and returns what the workers get.
	forward := func(tenants []string, rounds ...int) []bus.Turn {
		t.Helper()
		var want int
		for i := range 3 {
			for _, ten := range tenants {
				require.NoError(t, b.EnqueueTurn(ctx, bus.Turn{Tenant: ten, RunID: fmt.Sprintf("%s-%d", ten, i), Turn: 2}))
				want++
			}
		}
		state := &state{q: budget.NewFairQueue[string](), held: map[string]*bus.Delivery{}}
		for got := 0; got < want; {
			ds, err := runq.Fetch(ctx, want-got, time.Second)
			require.NoError(t, err)
			for _, d := range ds {
				s.take(ctx, state, d)
			}
			got += len(ds)
		}
		for _, n := range rounds {
			require.Equal(t, n, s.dispatch(ctx, state, n))
		}
		require.Zero(t, state.q.Len())
		var out []bus.Turn
		for range want {
			d, err := work.Next(ctx)
			require.NoError(t, err)
			require.NoError(t, d.Ack(ctx))
			out = append(out, d.Turn)
		}
		return out
	}

	got := forward([]string{"a", "b"}, 4, 2)
	for i, turn := range got {
		require.Equal(t, i == len(got)-1, turn.Direct, "turn %d (%s): Direct only once no other tenant waits", i, turn.RunID)
	}
	for i, turn := range forward([]string{"c"}, 2, 1) {
		require.True(t, turn.Direct, "turn %d (%s): one tenant alone", i, turn.RunID)
	}
}
