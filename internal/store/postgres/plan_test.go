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
// planFixture is a store on one connection (so the plans the first calls
// make are the ones later calls use) in a fresh, never analyzed schema,
// and a reader of its table counters.
type planFixture struct {
	ctx    context.Context
	s      *postgres.Store
	schema string
	admin  *pgx.Conn
}

func newPlanFixture(t *testing.T) planFixture {
	t.Helper()
	url, schema := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	return planFixture{ctx: ctx, s: s, schema: schema, admin: admin}
}

// queued creates n queued runs.
func (f planFixture) queued(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		res, err := f.s.RunCreate(f.ctx, store.RunCreateParams{Tenant: "acme", Message: "task"})
		require.NoError(t, err)
		ids[i] = res.Run.ID
	}
	return ids
}

// counters returns the runs table's sequential scans and index entries
// read so far. A backend publishes its counters when a transaction ends
// at least a second after it last did: wait, then make the store's one
// connection end one.
func (f planFixture) counters(t *testing.T) (seqScans, indexRead int64) {
	t.Helper()
	time.Sleep(1100 * time.Millisecond)
	_, err := f.s.TenantGetByID(f.ctx, "acme")
	require.NoError(t, err)
	require.NoError(t, f.admin.QueryRow(f.ctx, `SELECT t.seq_scan, (SELECT sum(i.idx_tup_read)::bigint FROM pg_stat_user_indexes i
		WHERE i.relid = t.relid) FROM pg_stat_user_tables t WHERE t.schemaname = $1 AND t.relname = 'runs'`, f.schema).Scan(&seqScans, &indexRead))
	return seqScans, indexRead
}

// Loading a run for its first turn finds it by key, and starts it without
// walking the other queued runs.
func TestTurnLoadFindsTheRunByKey(t *testing.T) {
	t.Parallel()
	f := newPlanFixture(t)
	for _, id := range f.queued(t, 40) {
		_, err := f.s.TurnLoad(f.ctx, store.TurnLoadParams{RunID: id, Turn: 1})
		require.NoError(t, err)
	}
	grown := f.queued(t, 2000)
	scans0, read0 := f.counters(t)
	for _, id := range grown[:50] {
		ld, err := f.s.TurnLoad(f.ctx, store.TurnLoadParams{RunID: id, Turn: 1})
		require.NoError(t, err)
		require.True(t, ld.Started)
	}
	scans1, read1 := f.counters(t)
	require.Zero(t, scans1-scans0, "scans of runs")
	require.Less(t, read1-read0, int64(50*5), "index entries read for 50 loads among 2,000 queued runs")
}

func TestCommitBatchesDoNotScanRuns(t *testing.T) {
	t.Parallel()
	f := newPlanFixture(t)
	s, ctx := f.s, f.ctx
	newRuns := func(n int) []string {
		ids := f.queued(t, n)
		for _, id := range ids {
			_, err := s.TurnLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 1})
			require.NoError(t, err)
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
	before, _ := f.counters(t)
	commit(grown[:200])
	after, _ := f.counters(t)
	require.Zero(t, after-before, fmt.Sprintf("%d scans of runs for 50 commit batches", after-before))
}
