package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func (b bundle) turnLoad(t *testing.T, p store.TurnLoadParams) store.TurnLoadResult {
	t.Helper()
	res, err := b.s.TurnLoad(b.ctx, p)
	require.NoError(t, err)
	return res
}

func testTurnLoad(t *testing.T, newStore NewStore) {
	t.Run("StartsTheFirstTurn", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})

		// Only the run's next turn starts it.
		ld := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 2})
		require.False(t, ld.Started)
		require.Equal(t, agentfleet.StatusQueued, ld.Run.Status)
		require.False(t, ld.HistoryLoaded, "the run is not at turn 1")

		ld = b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.True(t, ld.Started)
		require.Equal(t, agentfleet.StatusRunning, ld.Run.Status)
		require.Equal(t, b.get(t, r.ID), ld.Run, "the result is the run as stored")
		require.False(t, ld.HistoryLoaded, "turn 1 loads no history")
		require.Nil(t, ld.Steps)

		again := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.False(t, again.Started, "a redelivered first turn starts nothing")
		require.Equal(t, ld.Run, again.Run)
	})
	t.Run("StartsARequeuedRun", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		_, err := b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t"))
		require.NoError(t, err)
		// Parked between turns, then put back in the queue.
		b.transition(t, r.ID, agentfleet.StatusWaitingBudget)
		b.transition(t, r.ID, agentfleet.StatusQueued)

		ld := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 3})
		require.False(t, ld.Started, "not the run's next turn")
		require.Equal(t, agentfleet.StatusQueued, ld.Run.Status)

		ld = b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 2})
		require.True(t, ld.Started)
		require.Equal(t, agentfleet.StatusRunning, ld.Run.Status)
		require.True(t, ld.HistoryLoaded)
		require.Equal(t, b.steps(t, r.ID), ld.Steps)
		require.Equal(t, b.get(t, r.ID), ld.Run)
	})
	t.Run("StartsOnce", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
		results, errs := atOnce(8, func(int) (store.TurnLoadResult, error) {
			return b.s.TurnLoad(b.ctx, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		})
		started := 0
		for i, res := range results {
			require.NoError(t, errs[i])
			require.Equal(t, agentfleet.StatusRunning, res.Run.Status)
			if res.Started {
				started++
			}
		}
		require.Equal(t, 1, started, "exactly one load starts the run")
	})
	t.Run("LeavesEndedAndCancelledRuns", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
		_, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID, Tenant: ten.ID, Reason: "no"})
		require.NoError(t, err)
		ld := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.False(t, ld.Started)
		require.Equal(t, agentfleet.StatusCancelled, ld.Run.Status)

		// A running run whose cancel was requested is left for the
		// worker to end at the turn boundary.
		run := b.started(t, ten.ID)
		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: run.ID, Tenant: ten.ID, Reason: "stop"})
		require.NoError(t, err)
		ld = b.turnLoad(t, store.TurnLoadParams{RunID: run.ID, Turn: 1})
		require.False(t, ld.Started)
		require.Equal(t, agentfleet.StatusRunning, ld.Run.Status)
		require.True(t, ld.Run.CancelRequested)
	})
	t.Run("History", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		for turn := 1; turn <= 3; turn++ {
			_, err := b.s.TurnCommit(b.ctx, commitParams(r.ID, turn, agentfleet.StatusRunning, "t"))
			require.NoError(t, err)
		}
		all := b.steps(t, r.ID)
		require.Len(t, all, 7, "the message and two steps per turn")

		ld := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 4})
		require.True(t, ld.HistoryLoaded)
		require.Equal(t, all, ld.Steps, "from turn 0: the whole trace")
		require.Equal(t, 3, ld.Run.Turn)

		ld = b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 4, HistoryFrom: 3})
		require.True(t, ld.HistoryLoaded)
		require.Equal(t, all[5:], ld.Steps, "the window starts at HistoryFrom")

		// A message for a committed turn (a redelivery) or one ahead of
		// the run gets the run, and no history: it will not execute.
		for _, turn := range []int{3, 5} {
			ld = b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: turn})
			require.False(t, ld.HistoryLoaded, "turn %d", turn)
			require.Nil(t, ld.Steps, "turn %d", turn)
			require.Equal(t, 3, ld.Run.Turn)
		}
	})
	t.Run("TenantUnlimited", func(t *testing.T) {
		b := setup(t, newStore)
		free := b.tenant(t, store.TenantCreateParams{})
		capped := b.tenant(t, store.TenantCreateParams{TokenLimit: 1000})
		paced := b.tenant(t, store.TenantCreateParams{TokensPerMinute: 100})
		for _, c := range []struct {
			tenant    string
			unlimited bool
		}{{free.ID, true}, {capped.ID, false}, {paced.ID, false}} {
			r := b.run(t, store.RunCreateParams{Tenant: c.tenant, Message: "task"})
			ld := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 1})
			require.Equal(t, c.unlimited, ld.TenantUnlimited, "tenant %s", c.tenant)
		}

		r := b.run(t, store.RunCreateParams{Tenant: free.ID, Message: "task"})
		_, err := b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: free.ID, TokenLimit: ptr(int64(500))})
		require.NoError(t, err)
		ld := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.False(t, ld.TenantUnlimited, "a limit applies from the next load")
	})
	t.Run("SkillsRevision", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
		ld := b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.Zero(t, ld.SkillsRevision, "a tenant that never had a skill")
		_, err := b.s.SkillPut(b.ctx, store.SkillPutParams{Tenant: ten.ID, Name: "csv", Description: "Summarise a CSV", Body: "x"})
		require.NoError(t, err)
		want, err := b.s.SkillRevision(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Positive(t, want)
		ld = b.turnLoad(t, store.TurnLoadParams{RunID: r.ID, Turn: 1})
		require.Equal(t, want, ld.SkillsRevision, "the load reads what SkillRevision says")
		other := b.tenant(t, store.TenantCreateParams{})
		ld = b.turnLoad(t, store.TurnLoadParams{RunID: b.run(t, store.RunCreateParams{Tenant: other.ID, Message: "task"}).ID, Turn: 1})
		require.Zero(t, ld.SkillsRevision, "another tenant's skills are not this tenant's")
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
		for _, p := range []store.TurnLoadParams{
			{Turn: 1},
			{RunID: r.ID, Turn: 0},
			{RunID: r.ID, Turn: 2, HistoryFrom: -1},
		} {
			_, err := b.s.TurnLoad(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, "%+v", p)
		}
		_, err := b.s.TurnLoad(b.ctx, store.TurnLoadParams{RunID: "no-such-run", Turn: 1})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, agentfleet.StatusQueued, b.get(t, r.ID).Status, "a failed load starts nothing")
	})
}
