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
func pipelineFixture(t testing.TB, n int) (context.Context, *postgres.Store, []agentfleet.Run) {
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

// Turn loads in one pipeline share two statements (the runs, and the
// histories of those past turn 1), and each load gets what it would get
// alone: its run, whether it started it, and its history only if the run
// stands where the load's turn says. Of two loads of one queued run only
// the first is merged, and exactly one of them starts it.
func TestPipelineMergesTurnLoads(t *testing.T) {
	t.Parallel()
	ctx, s, runs := pipelineFixture(t, 12)
	// runs[0:8] have committed turn 1 with two steps, and turn 2 for
	// runs[0:2] as well; runs[8:12] stay queued.
	for i, r := range runs[:8] {
		ld, err := s.TurnLoad(ctx, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.NoError(t, err)
		require.True(t, ld.Started)
		for turn := 1; turn <= 1+boolInt(i < 2); turn++ {
			_, err = s.TurnCommit(ctx, store.TurnCommitParams{RunID: r.ID, Turn: turn, Status: agentfleet.StatusRunning,
				Args: []byte(`{}`), Steps: []agentfleet.Step{
					{Kind: agentfleet.StepModel, Content: fmt.Sprintf("reply %d.%d", i, turn), Model: "m"},
					{Kind: agentfleet.StepObservation, Content: fmt.Sprintf("observed %d.%d", i, turn)},
				}})
			require.NoError(t, err)
		}
	}
	type load struct {
		p   store.TurnLoadParams
		res store.TurnLoadResult
		err error
	}
	var loads []*load
	add := func(p store.TurnLoadParams) { loads = append(loads, &load{p: p}) }
	add(store.TurnLoadParams{RunID: runs[0].ID, Turn: 3, HistoryFrom: 2}) // turn 2's steps only
	add(store.TurnLoadParams{RunID: runs[1].ID, Turn: 2})                 // the run is past turn 2: no history
	for _, r := range runs[2:8] {
		add(store.TurnLoadParams{RunID: r.ID, Turn: 2})
	}
	for _, r := range runs[8:12] {
		add(store.TurnLoadParams{RunID: r.ID, Turn: 1})
	}
	add(store.TurnLoadParams{RunID: runs[8].ID, Turn: 1}) // the same queued run twice
	var calls []func()
	for _, l := range loads {
		calls = append(calls, func() { l.res, l.err = s.TurnLoad(ctx, l.p) })
	}
	behind(t, ctx, s, calls...)

	started := map[string]int{}
	for i, l := range loads {
		require.NoError(t, l.err, "load %d", i)
		require.Equal(t, l.p.RunID, l.res.Run.ID, "load %d", i)
		got, err := s.RunGetByID(ctx, store.RunGetByIDParams{ID: l.p.RunID})
		require.NoError(t, err)
		if l.res.Started {
			started[l.p.RunID]++
			require.Equal(t, got, l.res.Run, "load %d: the run as stored", i)
		}
		if l.p.Turn == 1 {
			require.False(t, l.res.HistoryLoaded, "load %d", i)
			continue
		}
		require.False(t, l.res.Started, "load %d: a running run is not started", i)
		if l.res.Run.Turn != l.p.Turn-1 {
			require.False(t, l.res.HistoryLoaded, "load %d: the run is not where the load's turn says", i)
			require.Nil(t, l.res.Steps)
			continue
		}
		require.True(t, l.res.HistoryLoaded, "load %d", i)
		want, err := s.StepListByRun(ctx, store.StepListByRunParams{RunID: l.p.RunID, FromTurn: l.p.HistoryFrom})
		require.NoError(t, err)
		require.Equal(t, want, l.res.Steps, "load %d", i)
		require.NotEmpty(t, l.res.Steps, "load %d", i)
	}
	for _, r := range runs[8:12] {
		require.Equal(t, 1, started[r.ID], "run %s started exactly once", r.ID)
	}
	require.Equal(t, int64(len(loads)-1), postgres.MergedCalls(s), "every load but the second of one run shared statements")
}

// Reply records of tenants without limits, in one pipeline, share one
// statement, and each gets what it would get alone: its reply, charged in
// full once. A pipeline holding any record the statement would not
// insert (a lost fence, a reply already there, a tenant with a limit by
// now) runs every record alone instead, with the same outcomes as ever.
func TestPipelineMergesUnlimitedReplyRecords(t *testing.T) {
	t.Parallel()
	ctx, s, runs := pipelineFixture(t, 12)
	_, err := s.TenantCreate(ctx, store.TenantCreateParams{ID: "capped", TokenLimit: 25, Window: agentfleet.WindowDay})
	require.NoError(t, err)
	capped, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: "capped", Message: "task"})
	require.NoError(t, err)
	for _, r := range append(runs, capped.Run) {
		_, err := s.TurnLoad(ctx, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.NoError(t, err)
	}
	type rec struct {
		p   store.ModelReplyRecordParams
		res store.ModelReplyRecordResult
		err error
	}
	record := func(tenant, runID string, turn int, tokens int64) *rec {
		u := agentfleet.Usage{PromptTokens: 10, CompletionTokens: tokens}
		return &rec{p: store.ModelReplyRecordParams{
			ModelReply: store.ModelReply{RunID: runID, Turn: turn, Content: fmt.Sprintf("reply %s %d", runID, tokens), Model: "m", Usage: u, UsageReported: true},
			// Unreserved: the tenant had no limits when its turn was
			// loaded.
			Charge: &store.BudgetSettleParams{Tenant: tenant, RunID: runID, Usage: u, Model: "m"},
		}}
	}
	run := func(recs ...*rec) {
		var calls []func()
		for _, r := range recs {
			calls = append(calls, func() { r.res, r.err = s.ModelReplyRecord(ctx, r.p) })
		}
		behind(t, ctx, s, calls...)
	}
	requireRecorded := func(r *rec, charged int64) {
		t.Helper()
		require.NoError(t, r.err)
		require.False(t, r.res.Existed)
		require.NoError(t, r.res.ChargeErr)
		require.Equal(t, charged, r.res.Settled.Charged)
		require.Equal(t, r.p.Usage.Total()-charged, r.res.Settled.Overage)
		got, err := s.ModelReplyGet(ctx, r.p.RunID, r.p.Turn)
		require.NoError(t, err)
		require.Equal(t, r.res.Reply, got)
		require.Equal(t, r.p.Content, got.Content)
	}

	var clean []*rec
	var total int64
	for i, r := range runs[:8] {
		clean = append(clean, record("acme", r.ID, 1, int64(i)))
		total += 10 + int64(i)
	}
	run(clean...)
	for _, r := range clean {
		requireRecorded(r, r.p.Usage.Total())
	}
	require.Equal(t, int64(len(clean)), postgres.MergedCalls(s), "the records shared one statement")

	var fresh []*rec
	for i, r := range runs[8:] {
		fresh = append(fresh, record("acme", r.ID, 1, int64(100+i)))
		total += 110 + int64(i)
	}
	again := record("acme", runs[0].ID, 1, 50)        // turn 1 of runs[0] has its reply
	early := record("acme", runs[1].ID, 3, 60)        // runs[1] has not committed turn 2
	limited := record("capped", capped.Run.ID, 1, 30) // 40 tokens against a limit of 25
	run(append(fresh, again, early, limited)...)
	for _, r := range fresh {
		requireRecorded(r, r.p.Usage.Total())
	}
	require.NoError(t, again.err)
	require.True(t, again.res.Existed)
	require.Equal(t, clean[0].res.Reply, again.res.Reply, "the reply recorded first")
	require.ErrorIs(t, early.err, store.ErrConflict)
	requireRecorded(limited, 25)
	require.Equal(t, int64(len(clean)), postgres.MergedCalls(s), "the mixed pipeline ran each record alone")

	b, err := s.BudgetGet(ctx, "acme", time.Now())
	require.NoError(t, err)
	require.Equal(t, total, b.Used, "each recorded reply charged once, nothing for the others")
	b, err = s.BudgetGet(ctx, "capped", time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(25), b.Used, "the capped tenant charged up to its limit")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
