package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func testStats(t *testing.T, newStore NewStore) {
	t.Run("TenantTokensPerHour", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		since := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		at := func(h, m int) time.Time { return since.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
		settle := func(tenant string, prompt, completion int64, now time.Time) {
			_, err := b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{Tenant: tenant, RunID: "r", Usage: agentfleet.Usage{PromptTokens: prompt, CompletionTokens: completion}, Now: now})
			require.NoError(t, err)
		}
		settle(ten.ID, 10, 1, at(0, 0)) // the window's first instant
		settle(ten.ID, 20, 2, at(0, 59))
		settle(ten.ID, 40, 4, at(3, 30))
		settle(ten.ID, 1000, 1000, since.Add(-time.Microsecond)) // before the window
		settle(ten.ID, 1000, 1000, at(24, 0))                    // at its end: outside
		settle(other.ID, 500, 500, at(0, 30))                    // another tenant's

		w := store.StatsWindow{Since: since, Until: at(24, 0), Bucket: time.Hour}
		got, err := b.s.TenantStatsGet(b.ctx, store.TenantStatsGetParams{Tenant: ten.ID, StatsWindow: w})
		require.NoError(t, err)
		require.Equal(t, []store.StatsBucket{
			{Start: at(0, 0), PromptTokens: 30, CompletionTokens: 3},
			{Start: at(3, 0), PromptTokens: 40, CompletionTokens: 4},
		}, got)

		// Quarter-hour buckets from an origin off the hour.
		w = store.StatsWindow{Since: at(0, 50), Until: at(4, 0), Bucket: 15 * time.Minute}
		got, err = b.s.TenantStatsGet(b.ctx, store.TenantStatsGetParams{Tenant: ten.ID, StatsWindow: w})
		require.NoError(t, err)
		require.Equal(t, []store.StatsBucket{
			{Start: at(0, 50), PromptTokens: 20, CompletionTokens: 2},
			{Start: at(3, 20), PromptTokens: 40, CompletionTokens: 4},
		}, got)

		got, err = b.s.TenantStatsGet(b.ctx, store.TenantStatsGetParams{Tenant: "nobody", StatsWindow: w})
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("TenantRunsByOutcome", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		before := time.Now().UTC().Add(-time.Minute)
		end := func(tenant string, to agentfleet.RunStatus) {
			r := b.started(t, tenant)
			b.transition(t, r.ID, to)
		}
		end(ten.ID, agentfleet.StatusCompleted)
		end(ten.ID, agentfleet.StatusCompleted)
		end(ten.ID, agentfleet.StatusFailed)
		end(ten.ID, agentfleet.StatusMaxTurns)
		end(other.ID, agentfleet.StatusFailed)
		b.started(t, ten.ID)                                               // running: not ended
		b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "queued"}) // queued: not ended
		queued := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "cancel me"})
		_, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: queued.ID, Reason: "test"})
		require.NoError(t, err)

		w := store.StatsWindow{Since: before.Truncate(time.Hour), Until: before.Truncate(time.Hour).Add(3 * time.Hour), Bucket: time.Hour}
		got, err := b.s.TenantStatsGet(b.ctx, store.TenantStatsGetParams{Tenant: ten.ID, StatsWindow: w})
		require.NoError(t, err)
		ended := map[agentfleet.RunStatus]int{}
		for _, bk := range got {
			require.False(t, bk.Start.Before(w.Since))
			require.True(t, bk.Start.Before(w.Until))
			require.Zero(t, bk.Start.Sub(w.Since)%time.Hour, "buckets start on the hour")
			for s, n := range bk.Ended {
				ended[s] += n
			}
		}
		require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusCompleted: 2, agentfleet.StatusFailed: 1,
			agentfleet.StatusMaxTurns: 1, agentfleet.StatusCancelled: 1}, ended)

		// A window that ended before the runs did has none of them.
		old := store.StatsWindow{Since: before.Add(-48 * time.Hour), Until: before.Add(-24 * time.Hour), Bucket: time.Hour}
		got, err = b.s.TenantStatsGet(b.ctx, store.TenantStatsGetParams{Tenant: ten.ID, StatsWindow: old})
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("BatchRunsEnded", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		bt := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID}, 5, 5, 0)
		other := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID}, 2, 2, 0)
		before := time.Now().UTC().Add(-time.Second)
		runs := func(id string) []store.BatchRun {
			page, err := b.s.BatchRunList(b.ctx, store.BatchRunListParams{ID: id, AfterIndex: -1, Limit: 10})
			require.NoError(t, err)
			return page
		}
		mine := runs(bt.ID)
		for i, to := range []agentfleet.RunStatus{agentfleet.StatusCompleted, agentfleet.StatusCompleted, agentfleet.StatusFailed} {
			b.transition(t, mine[i].Run.ID, agentfleet.StatusRunning)
			b.transition(t, mine[i].Run.ID, to)
		}
		theirs := runs(other.ID)
		b.transition(t, theirs[0].Run.ID, agentfleet.StatusRunning)
		b.transition(t, theirs[0].Run.ID, agentfleet.StatusCompleted)

		w := store.StatsWindow{Since: before, Until: time.Now().UTC().Add(time.Minute), Bucket: time.Second}
		got, err := b.s.BatchStatsGet(b.ctx, store.BatchStatsGetParams{BatchID: bt.ID, StatsWindow: w})
		require.NoError(t, err)
		ended := map[agentfleet.RunStatus]int{}
		for i, bk := range got {
			if i > 0 {
				require.True(t, bk.Start.After(got[i-1].Start), "in time order")
			}
			require.Zero(t, bk.PromptTokens)
			for s, n := range bk.Ended {
				ended[s] += n
			}
		}
		require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusCompleted: 2, agentfleet.StatusFailed: 1}, ended)

		got, err = b.s.BatchStatsGet(b.ctx, store.BatchStatsGetParams{BatchID: "", StatsWindow: w})
		require.NoError(t, err)
		require.Empty(t, got, "runs of no batch are no batch's")
	})

	t.Run("Invalid", func(t *testing.T) {
		b := setup(t, newStore)
		now := time.Now().UTC()
		for name, w := range map[string]store.StatsWindow{
			"no since":         {Until: now, Bucket: time.Hour},
			"until before":     {Since: now, Until: now.Add(-time.Hour), Bucket: time.Hour},
			"no bucket":        {Since: now.Add(-time.Hour), Until: now},
			"part of a second": {Since: now.Add(-time.Hour), Until: now, Bucket: 1500 * time.Millisecond},
			"too many":         {Since: now.Add(-24 * time.Hour), Until: now, Bucket: time.Second},
		} {
			_, err := b.s.TenantStatsGet(b.ctx, store.TenantStatsGetParams{Tenant: "t", StatsWindow: w})
			require.ErrorIs(t, err, store.ErrInvalid, name)
			_, err = b.s.BatchStatsGet(b.ctx, store.BatchStatsGetParams{BatchID: "b", StatsWindow: w})
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
	})
}
