package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/wire"
)

// oneThousand answers at once, reporting exactly 1,000 tokens per call.
func oneThousand(fakeserver.Request) (string, agentfleet.Usage, error) {
	return "Done.", agentfleet.Usage{PromptTokens: 900, CompletionTokens: 100}, nil
}

func (f *testFleet) counts(tenant string) map[agentfleet.RunStatus]int {
	f.t.Helper()
	c, err := f.store.RunCountByStatus(f.ctx, tenant)
	require.NoError(f.t, err)
	return c
}

func TestFleetBudgetIsAHardCeiling(t *testing.T) {
	limit := int64(20_000)
	f := setupFleetWith(t, fleetOptions{responder: oneThousand, workers: 4, slots: 8,
		tenant: wire.TenantRequest{ID: "acme", Budget: &wire.BudgetSpec{Tokens: &limit}}})

	// Watch the ledger the whole time: used never passes the limit, nor
	// used + reserved.
	var maxUsed, maxHeld atomic.Int64
	watchCtx, stopWatch := context.WithCancel(f.ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			st, err := f.store.BudgetGet(watchCtx, "acme", time.Now())
			if err == nil {
				maxUsed.Store(max(maxUsed.Load(), st.Used))
				maxHeld.Store(max(maxHeld.Load(), st.Used+st.Reserved))
			}
			time.Sleep(time.Millisecond)
		}
	}()

	const runs = 100
	for i := range runs {
		f.submit(wire.RunCreateRequest{Message: fmt.Sprintf("task %d", i)})
	}
	// The budget runs out: every run is either done or parked, and the
	// tenant view counts the parked ones. The keeper wakes one parked run
	// whenever any budget is left, and that run parks again when its
	// reservation does not fit, so the counts and the view are read
	// together until they agree.
	var c map[agentfleet.RunStatus]int
	var view wire.TenantView
	require.Eventually(t, func() bool {
		c = f.counts("acme")
		v, err := f.tenant.GetTenant(f.ctx, "acme")
		if err != nil {
			return false
		}
		view = v
		return c[agentfleet.StatusCompleted]+c[agentfleet.StatusWaitingBudget] == runs && view.WaitingRuns == c[agentfleet.StatusWaitingBudget]
	}, 60*time.Second, 10*time.Millisecond)
	st, err := f.store.BudgetGet(f.ctx, "acme", time.Now())
	require.NoError(t, err)
	t.Logf("budget spent: used %d of %d, %d runs completed, %d parked", st.Used, limit, c[agentfleet.StatusCompleted], c[agentfleet.StatusWaitingBudget])
	require.GreaterOrEqual(t, st.Used, int64(15_000), "the budget is used, not wasted")
	require.LessOrEqual(t, st.Used, limit)
	require.Zero(t, c[agentfleet.StatusFailed])
	require.Positive(t, c[agentfleet.StatusWaitingBudget])
	require.EqualValues(t, st.Used/1000, c[agentfleet.StatusCompleted], "each completed run paid exactly once")

	require.Equal(t, limit, view.Budget.Limit)

	stopWatch()
	<-watched
	require.LessOrEqual(t, maxUsed.Load(), limit, "used passed the limit")
	require.LessOrEqual(t, maxHeld.Load(), limit, "used + reserved passed the limit")
	t.Logf("max used %d, max used+reserved %d, limit %d", maxUsed.Load(), maxHeld.Load(), limit)

	// Raise the limit: the parked runs resume by themselves.
	raised := int64(1_000_000)
	_, err = f.admin.UpdateTenant(f.ctx, "acme", wire.TenantRequest{Budget: &wire.BudgetSpec{Tokens: &raised}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.counts("acme")[agentfleet.StatusCompleted] == runs }, 60*time.Second, 10*time.Millisecond)
	st, err = f.store.BudgetGet(f.ctx, "acme", time.Now())
	require.NoError(t, err)
	require.EqualValues(t, runs*1000, st.Used)
	require.Zero(t, st.Reserved)
	require.Equal(t, runs, len(f.model.Received()), "a parked run never called the model")
}

func TestFleetBudgetFailPolicy(t *testing.T) {
	limit, fail := int64(100), string(agentfleet.ExhaustedFail)
	f := setupFleetWith(t, fleetOptions{responder: oneThousand,
		tenant: wire.TenantRequest{ID: "acme", Budget: &wire.BudgetSpec{Tokens: &limit}, Exhausted: &fail}})
	run := f.wait(f.submit(wire.RunCreateRequest{Message: "task"}).ID, 10*time.Second)
	require.Equal(t, agentfleet.StatusFailed, run.Status)
	require.Contains(t, run.Error, "budget exhausted")
	require.Empty(t, f.model.Received())
	evs := f.events(run.ID)
	require.Equal(t, agentfleet.EventDone, evs[len(evs)-1].Type)
	require.Equal(t, agentfleet.EventError, evs[len(evs)-2].Type)
}

func TestFleetRunMaxTokens(t *testing.T) {
	f := setupFleet(t, func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		reply, _, err := threeTurns(r)
		return reply, agentfleet.Usage{PromptTokens: 900, CompletionTokens: 100}, err
	}, 0)
	run := f.wait(f.submit(wire.RunCreateRequest{Message: "compute 3", MaxTokens: 1500}).ID, 10*time.Second)
	require.Equal(t, agentfleet.StatusFailed, run.Status)
	require.Contains(t, run.Error, "max_tokens")
	require.EqualValues(t, 1000, run.Usage.Total(), "the second call would not fit: it is never made")
	require.Len(t, f.model.Received(), 1)
}

func TestFleetMaxConcurrentRuns(t *testing.T) {
	two := 2
	f := setupFleetWith(t, fleetOptions{responder: threeTurns, latency: 30 * time.Millisecond,
		tenant: wire.TenantRequest{ID: "acme", MaxConcurrentRuns: &two}})
	var ids []string
	for i := range 6 {
		ids = append(ids, f.submit(wire.RunCreateRequest{Message: fmt.Sprintf("compute %d", i)}).ID)
	}
	var peak atomic.Int64
	watchCtx, stop := context.WithCancel(f.ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			n, err := f.store.RunCountActive(watchCtx, "acme")
			if err == nil {
				peak.Store(max(peak.Load(), int64(n)))
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for _, id := range ids {
		require.Equal(t, agentfleet.StatusCompleted, f.wait(id, 30*time.Second).Status)
	}
	stop()
	<-watched
	require.LessOrEqual(t, peak.Load(), int64(2))
	require.EqualValues(t, 2, peak.Load(), "the cap is used, not undershot")
}

// twoTurns answers any task in two turns.
func twoTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	if assistantTurns(r) == 0 {
		return "Step.\n```js\nfunction run(args) { return {step: 1} }\n```", agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}, nil
	}
	return "Done.\n```js\nfunction run(args) { answer('ok') }\n```", agentfleet.Usage{PromptTokens: 60, CompletionTokens: 10}, nil
}

// TestFleetFairness: tenant A queues 300 runs of 2 turns on 2 workers x 4
// slots with a 100 ms model; tenant B then submits 4 runs of 2 turns. B's
// runs must all finish within 1.5 s of submission while A's backlog takes
// several seconds.
func TestFleetFairness(t *testing.T) {
	if testing.Short() {
		t.Skip("fairness scenario takes ~10s")
	}
	f := setupFleetWith(t, fleetOptions{responder: twoTurns, latency: 100 * time.Millisecond, workers: 2, slots: 4})
	tb, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "bravo"})
	require.NoError(t, err)
	bravo := apiClient(t, f.dispatcher.URL(), tb.APIKey)

	start := time.Now()
	aIDs := make([]string, 300)
	var submit sync.WaitGroup
	for w := range 6 {
		submit.Add(1)
		go func() {
			defer submit.Done()
			for i := w; i < len(aIDs); i += 6 {
				run, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Message: fmt.Sprintf("a%d", i)})
				if err != nil {
					t.Errorf("submit A's run %d: %v", i, err)
					return
				}
				aIDs[i] = run.ID
			}
		}()
	}
	submit.Wait()
	require.False(t, t.Failed())
	// Let A's backlog build up and the fleet saturate.
	time.Sleep(500 * time.Millisecond)

	aDoneAtBStart := f.counts("acme")[agentfleet.StatusCompleted]
	bStart := time.Now()
	var wg sync.WaitGroup
	bDur := make([]time.Duration, 4)
	for i := range 4 {
		run, err := bravo.CreateRun(f.ctx, wire.RunCreateRequest{Message: fmt.Sprintf("b%d", i)})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
			defer cancel()
			done, err := bravo.Wait(ctx, run.ID)
			if err == nil && done.Status == agentfleet.StatusCompleted {
				bDur[i] = time.Since(bStart)
			}
		}()
	}
	wg.Wait()
	bWorst := max(bDur[0], bDur[1], bDur[2], bDur[3])
	aDoneAtB := f.counts("acme")[agentfleet.StatusCompleted]
	for _, id := range aIDs {
		require.Equal(t, agentfleet.StatusCompleted, f.wait(id, 60*time.Second).Status)
	}
	aTotal := time.Since(start)
	t.Logf("fairness: B's 4 runs done %v after submission; A's 300 runs took %v; A had %d done when B was submitted, %d when B finished",
		bDur, aTotal.Round(time.Millisecond), aDoneAtBStart, aDoneAtB)
	for i, d := range bDur {
		require.NotZero(t, d, "B's run %d did not complete", i)
	}
	// Fairness, whatever the machine's speed: B did not wait for A's
	// backlog, most of which was still queued when B was done.
	backlog := 300 - aDoneAtBStart
	require.Greater(t, backlog, 100, "A's backlog should be large when B arrives")
	require.Less(t, aDoneAtB-aDoneAtBStart, backlog/3, "B finished only after much of A's backlog")
	if !raceEnabled {
		require.Less(t, bWorst, 1500*time.Millisecond, "B waited behind A's backlog")
		require.Greater(t, aTotal, 3*time.Second, "A's backlog should take several seconds")
	}
}
