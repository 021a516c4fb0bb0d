package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// pipelineFixture is a store with one tenant and n queued runs.
func pipelineFixture(t *testing.T, n int) (context.Context, *postgres.Store, []agentfleet.Run) {
	t.Helper()
	url, schema := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	runs := make([]agentfleet.Run, n)
	for i := range runs {
		res, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: fmt.Sprint("task ", i)})
		require.NoError(t, err)
		runs[i] = res.Run
	}
	return ctx, s, runs
}

// behind runs calls while the pipeline is held by a slow call, so they
// queue up and go out together in the next pipeline.
func behind(t *testing.T, ctx context.Context, s *postgres.Store, calls ...func()) {
	t.Helper()
	held := make(chan error, 1)
	go func() { held <- postgres.HoldPipeline(ctx, s, 300*time.Millisecond) }()
	time.Sleep(100 * time.Millisecond) // the hold is on the wire
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Go(call)
	}
	wg.Wait()
	require.NoError(t, <-held)
}

// Concurrent turn loads and reply records share pipelines, and each gets
// its own result.
func TestPipelineSharesRoundTrips(t *testing.T) {
	t.Parallel()
	ctx, s, runs := pipelineFixture(t, 16)
	loads := make([]store.TurnLoadResult, len(runs))
	errs := make([]error, len(runs))
	var calls []func()
	for i, r := range runs {
		calls = append(calls, func() { loads[i], errs[i] = s.TurnLoad(ctx, store.TurnLoadParams{RunID: r.ID, Turn: 1}) })
	}
	behind(t, ctx, s, calls...)
	for i, r := range runs {
		require.NoError(t, errs[i])
		require.Equal(t, r.ID, loads[i].Run.ID)
		require.True(t, loads[i].Started, "run %d", i)
		require.True(t, loads[i].TenantUnlimited)
	}
	pipes, carried := postgres.SharedPipelines(s)
	require.GreaterOrEqual(t, pipes, int64(1))
	require.Equal(t, int64(len(runs)), carried, "every load went out in a shared pipeline")

	recs := make([]store.ModelReplyRecordResult, len(runs))
	calls = calls[:0]
	for i, r := range runs {
		calls = append(calls, func() {
			recs[i], errs[i] = s.ModelReplyRecord(ctx, store.ModelReplyRecordParams{
				ModelReply: store.ModelReply{RunID: r.ID, Turn: 1, Content: fmt.Sprint("reply ", i), Model: "m",
					Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: int64(i)}, UsageReported: true},
				Charge: &store.BudgetSettleParams{Tenant: "acme", RunID: r.ID, Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: int64(i)}, Model: "m"},
			})
		})
	}
	behind(t, ctx, s, calls...)
	var total int64
	for i, r := range runs {
		require.NoError(t, errs[i])
		require.False(t, recs[i].Existed)
		require.NoError(t, recs[i].ChargeErr)
		require.Equal(t, fmt.Sprint("reply ", i), recs[i].Reply.Content)
		got, err := s.ModelReplyGet(ctx, r.ID, 1)
		require.NoError(t, err)
		require.Equal(t, recs[i].Reply, got)
		total += 10 + int64(i)
	}
	b, err := s.BudgetGet(ctx, "acme", time.Now())
	require.NoError(t, err)
	require.Equal(t, total, b.Used, "each record charged once")
	pipes2, carried2 := postgres.SharedPipelines(s)
	require.Greater(t, pipes2, pipes)
	require.Equal(t, int64(2*len(runs)), carried2)
}

// A call that fails inside a shared pipeline rolls the pipeline back, and
// every other call runs again on its own: nothing is done twice and no
// call sees another's error.
func TestPipelineFailureIsTheCallersAlone(t *testing.T) {
	t.Parallel()
	ctx, s, runs := pipelineFixture(t, 8)
	loads := make([]store.TurnLoadResult, len(runs))
	errs := make([]error, len(runs))
	var missingErr error
	calls := []func(){func() {
		_, missingErr = s.TurnLoad(ctx, store.TurnLoadParams{RunID: "no-such-run", Turn: 1})
	}}
	for i, r := range runs {
		calls = append(calls, func() { loads[i], errs[i] = s.TurnLoad(ctx, store.TurnLoadParams{RunID: r.ID, Turn: 1}) })
	}
	behind(t, ctx, s, calls...)
	require.ErrorIs(t, missingErr, store.ErrNotFound)
	for i := range runs {
		require.NoError(t, errs[i])
		// Had the failed pipeline's starts been kept, the second run
		// of each load would find its run running and not start it.
		require.True(t, loads[i].Started, "run %d: started exactly once, by its own load", i)
		require.Equal(t, agentfleet.StatusRunning, loads[i].Run.Status)
	}
	pipes, _ := postgres.SharedPipelines(s)
	require.Zero(t, pipes, "the failed pipeline did not commit")
}
