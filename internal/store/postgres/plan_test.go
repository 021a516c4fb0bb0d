package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// Commit batches find their runs by key, whatever the statistics say. The
// connection makes its first plans while runs is nearly empty and never
// analyzed (a scan is cheapest then) and keeps them; were they scans, every
// batch would read the whole table once it has grown.
func TestCommitBatchesDoNotScanRuns(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// One connection, so the plans the first batches make are the ones
	// the later batches use.
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema, MaxConns: 1})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)

	newRuns := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			res, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: "task"})
			require.NoError(t, err)
			_, err = s.TurnLoad(ctx, store.TurnLoadParams{RunID: res.Run.ID, Turn: 1})
			require.NoError(t, err)
			ids[i] = res.Run.ID
		}
		return ids
	}
	commit := func(ids []string) {
		for len(ids) > 0 {
			n := min(len(ids), 4)
			var ps []store.TurnCommitParams
			for _, id := range ids[:n] {
				ps = append(ps, store.TurnCommitParams{RunID: id, Turn: 1, Status: agentfleet.StatusCompleted,
					Answer: []byte(`"done"`), Events: []agentfleet.Event{{Type: agentfleet.EventDone}}})
			}
			_, errs, err := s.TurnCommitMany(ctx, ps)
			require.NoError(t, err)
			for _, e := range errs {
				require.NoError(t, e)
			}
			ids = ids[n:]
		}
	}
	// Enough batches on a nearly empty table for the connection to settle
	// on cached (generic) plans.
	commit(newRuns(40))
	grown := newRuns(2000)

	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	scans := func() int64 {
		// A backend publishes its counters when a transaction ends at
		// least a second after it last did: wait, then make the
		// store's one connection end one.
		time.Sleep(1100 * time.Millisecond)
		_, err := s.TenantGetByID(ctx, "acme")
		require.NoError(t, err)
		var n int64
		require.NoError(t, admin.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'runs'`, schema).Scan(&n))
		return n
	}
	before := scans()
	commit(grown[:200])
	after := scans()
	require.Zero(t, after-before, fmt.Sprintf("%d scans of runs for 50 commit batches", after-before))
}
