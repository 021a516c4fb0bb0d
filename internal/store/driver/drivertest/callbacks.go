package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// run creates a run of tenant through the store and returns its id.
func run(t *testing.T, b Backend, tenant string) string {
	t.Helper()
	res, err := b.Store.RunCreate(context.Background(), store.RunCreateParams{Tenant: tenant, Message: "hi"})
	require.NoError(t, err)
	return res.Run.ID
}

// end moves a run to a terminal status through the store.
func end(t *testing.T, b Backend, id string) {
	t.Helper()
	_, err := b.Store.RunCancel(context.Background(), store.RunCancelParams{ID: id, Reason: "test"})
	require.NoError(t, err)
}

func exerciseCallbacks(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("Secrets", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		_, err := b.Driver.CallbackSecretGet(ctx, "t1")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.NoError(t, b.Driver.CallbackSecretUpsert(ctx, "t1", "s1", now()))
		require.NoError(t, b.Driver.CallbackSecretUpsert(ctx, "t1", "s2", now()))
		got, err := b.Driver.CallbackSecretGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, "s2", got)
	})
	t.Run("ClaimTakesEndedRunsDue", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		ended, live := run(t, b, "t1"), run(t, b, "t1")
		end(t, b, ended)
		for _, id := range []string{ended, live} {
			c, err := b.Driver.RunCallbackInsert(ctx, id, "t1", "https://example.com/cb", at)
			require.NoError(t, err)
			require.Equal(t, store.RunCallback{RunID: id, Tenant: "t1", URL: "https://example.com/cb", State: store.CallbackPending,
				NextAt: at, CreatedAt: at, UpdatedAt: at}, c)
		}
		_, err := b.Driver.RunCallbackInsert(ctx, ended, "t1", "https://example.com/cb", at)
		require.ErrorIs(t, err, store.ErrConflict)

		cs, err := b.Driver.RunCallbackClaim(ctx, at.Add(-time.Second), at.Add(time.Minute), 10)
		require.NoError(t, err)
		require.Empty(t, cs, "not due yet")
		cs, err = b.Driver.RunCallbackClaim(ctx, at, at.Add(time.Minute), 10)
		require.NoError(t, err)
		require.Len(t, cs, 1, "only the ended run's")
		require.Equal(t, ended, cs[0].RunID)
		require.Equal(t, at.Add(time.Minute), cs[0].NextAt)
		cs, err = b.Driver.RunCallbackClaim(ctx, at, at.Add(time.Minute), 10)
		require.NoError(t, err)
		require.Empty(t, cs, "claimed: due again later")
	})
	t.Run("RecordAndPrune", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		id := run(t, b, "t1")
		_, err := b.Driver.RunCallbackInsert(ctx, id, "t1", "https://example.com/cb", at)
		require.NoError(t, err)
		var c store.RunCallback
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			raw, err := x.RunCallbackLogLock(ctx, id)
			require.Empty(t, raw)
			if err != nil {
				return err
			}
			c, err = x.RunCallbackUpdate(ctx, driver.RunCallbackUpdateParams{RunID: id, State: store.CallbackFailed,
				Log: []byte(`[{"at":"2026-01-01T00:00:00Z","status":500}]`), NextAt: at.Add(time.Hour), FirstAt: at, Now: at})
			return err
		}))
		require.Equal(t, 1, c.Attempts)
		require.Equal(t, store.CallbackFailed, c.State)
		require.Equal(t, at, c.FirstAt)
		require.Len(t, c.Log, 1)
		c, err = b.Driver.RunCallbackUpdate(ctx, driver.RunCallbackUpdateParams{RunID: id, State: store.CallbackDelivered,
			Log: []byte(`[]`), NextAt: at, FirstAt: at.Add(time.Hour), Now: at})
		require.NoError(t, err)
		require.Equal(t, 2, c.Attempts)
		require.Equal(t, at, c.FirstAt, "the first attempt's time stays")

		n, err := b.Driver.RunCallbackDeleteOrphans(ctx, at.Add(time.Hour))
		require.NoError(t, err)
		require.Zero(t, n, "its run is there")
		end(t, b, id)
		require.NoError(t, b.Store.RunDelete(ctx, store.RunDeleteParams{Tenant: "t1", ID: id}))
		n, err = b.Driver.RunCallbackDeleteOrphans(ctx, at)
		require.NoError(t, err)
		require.Zero(t, n, "created at before, not before")
		n, err = b.Driver.RunCallbackDeleteOrphans(ctx, at.Add(time.Microsecond))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = b.Driver.RunCallbackGet(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
