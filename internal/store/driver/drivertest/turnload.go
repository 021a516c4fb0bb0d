package drivertest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func exerciseTurnLoad(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("Start", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		at := now()
		res, err := b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 1}, at)
		require.NoError(t, err)
		require.True(t, res.Started)
		require.True(t, res.TenantUnlimited)
		require.False(t, res.HistoryLoaded, "turn 1 has no history")
		require.Equal(t, agentfleet.StatusRunning, res.Run.Status)
		require.Equal(t, at, res.Run.UpdatedAt)
		read, err := b.Driver.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, read.Run, res.Run, "the run as stored")

		again, err := b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 1}, now())
		require.NoError(t, err)
		require.False(t, again.Started, "a running run is not started")
		require.Equal(t, res.Run, again.Run)

		_, err = b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: "nope", Turn: 1}, now())
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("NotStarted", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		limit := int64(1000)
		_, err := b.Store.TenantUpdate(ctx, store.TenantUpdateParams{ID: "t1", TokenLimit: &limit})
		require.NoError(t, err)
		id := run(t, b, "t1")
		res, err := b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 2}, now())
		require.NoError(t, err)
		require.False(t, res.Started, "queued for turn 1, not 2")
		require.False(t, res.TenantUnlimited)
		require.Equal(t, agentfleet.StatusQueued, res.Run.Status)
		ended := run(t, b, "t1")
		end(t, b, ended)
		res, err = b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: ended, Turn: 1}, now())
		require.NoError(t, err)
		require.False(t, res.Started, "an ended run")
		require.Equal(t, agentfleet.StatusCancelled, res.Run.Status)
	})
	t.Run("StartedOnce", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		results := make([]store.TurnLoadResult, 8)
		errs := make([]error, len(results))
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 1}, now())
			}()
		}
		wg.Wait()
		started := 0
		for i, res := range results {
			require.NoError(t, errs[i])
			require.Equal(t, agentfleet.StatusRunning, res.Run.Status)
			if res.Started {
				started++
			}
		}
		require.Equal(t, 1, started)
	})
	t.Run("History", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		_, err := b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 1}, now())
		require.NoError(t, err)
		_, err = b.Store.TurnCommit(ctx, store.TurnCommitParams{RunID: id, Turn: 1, Status: agentfleet.StatusRunning,
			Args: []byte(`{}`), Steps: []agentfleet.Step{
				{Kind: agentfleet.StepModel, Content: "reply", Model: "m"},
				{Kind: agentfleet.StepObservation, Content: "observed"},
			}})
		require.NoError(t, err)
		res, err := b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 2}, now())
		require.NoError(t, err)
		require.False(t, res.Started)
		require.True(t, res.HistoryLoaded)
		all, err := b.Driver.StepList(ctx, id, 0, 2)
		require.NoError(t, err)
		require.Len(t, all, 3, "the user's step and turn 1's")
		require.Equal(t, all, res.Steps)
		res, err = b.Driver.RunLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 2, HistoryFrom: 1}, now())
		require.NoError(t, err)
		require.True(t, res.HistoryLoaded)
		require.Equal(t, all[1:], res.Steps, "from turn 1")
	})
}
