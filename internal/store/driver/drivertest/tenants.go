package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

func exerciseTenants(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	insert := func(t *testing.T, b Backend, id string, at time.Time) agentfleet.Tenant {
		t.Helper()
		tn, err := b.Driver.TenantInsert(ctx, driver.TenantInsertParams{TenantCreateParams: store.TenantCreateParams{
			ID: id, Window: agentfleet.WindowDay, Weight: 1, Exhausted: agentfleet.ExhaustedQueue, MaxQueuedRuns: 5,
		}, Now: at})
		require.NoError(t, err)
		return tn
	}
	t.Run("InsertGet", func(t *testing.T) {
		b := open(t)
		at := now()
		tn := insert(t, b, "t1", at)
		require.Equal(t, "t1", tn.ID)
		require.Equal(t, at, tn.CreatedAt)
		require.Equal(t, at, tn.UpdatedAt)
		require.Equal(t, 5, tn.MaxQueuedRuns)
		got, err := b.Driver.TenantGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, tn, got)
		_, err = b.Driver.TenantInsert(ctx, driver.TenantInsertParams{TenantCreateParams: store.TenantCreateParams{
			ID: "t1", Window: agentfleet.WindowDay, Weight: 1, Exhausted: agentfleet.ExhaustedQueue, MaxQueuedRuns: 5,
		}, Now: at})
		require.ErrorIs(t, err, store.ErrConflict)
		_, err = b.Driver.TenantGet(ctx, "t2")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("ListPages", func(t *testing.T) {
		b := open(t)
		at := now()
		insert(t, b, "a", at)
		insert(t, b, "c", at)
		insert(t, b, "b", at.Add(time.Second))
		ids := func(limit int, after *driver.TenantPos) []string {
			ts, err := b.Driver.TenantList(ctx, limit, after)
			require.NoError(t, err)
			var out []string
			for _, tn := range ts {
				out = append(out, tn.ID)
			}
			return out
		}
		require.Equal(t, []string{"b", "c", "a"}, ids(10, nil))
		require.Equal(t, []string{"b"}, ids(1, nil))
		require.Equal(t, []string{"a"}, ids(10, &driver.TenantPos{CreatedAt: at, ID: "c"}))
	})
	t.Run("APIKeys", func(t *testing.T) {
		b := open(t)
		at := now()
		insert(t, b, "t1", at)
		k1, err := b.Driver.APIKeyInsert(ctx, driver.APIKeyInsertParams{ID: "key_1", Hash: "h1", Tenant: "t1", Name: "one", Scopes: "runs:read,runs:write", Now: at})
		require.NoError(t, err)
		require.Equal(t, store.APIKey{ID: "key_1", Tenant: "t1", Name: "one", Scopes: []string{"runs:read", "runs:write"}, CreatedAt: at}, k1)
		_, err = b.Driver.APIKeyInsert(ctx, driver.APIKeyInsertParams{ID: "key_2", Hash: "h2", Tenant: "t1", Name: "two", Now: at})
		require.NoError(t, err)
		_, err = b.Driver.APIKeyInsert(ctx, driver.APIKeyInsertParams{ID: "key_3", Hash: "h1", Tenant: "t1", Now: at})
		require.ErrorIs(t, err, store.ErrConflict, "a hash stored before")
		_, err = b.Driver.APIKeyInsert(ctx, driver.APIKeyInsertParams{ID: "key_4", Hash: "h4", Tenant: "nope", Now: at})
		require.ErrorIs(t, err, store.ErrNotFound, "an unknown tenant")

		rows, err := b.Driver.APIKeyList(ctx, "t1", 0, 10)
		require.NoError(t, err)
		require.Len(t, rows, 2)
		require.Equal(t, "key_2", rows[0].Key.ID, "newest first")
		rows, err = b.Driver.APIKeyList(ctx, "t1", rows[0].Seq, 10)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, k1, rows[0].Key)

		// A key never used is touched; one used after touchBefore is not.
		res, err := b.Driver.TenantGetByAPIKey(ctx, "h1", at, at.Add(-time.Minute))
		require.NoError(t, err)
		require.Equal(t, "t1", res.Tenant.ID)
		require.True(t, res.Key.LastUsedAt.IsZero(), "the last use as read")
		res, err = b.Driver.TenantGetByAPIKey(ctx, "h1", at.Add(time.Second), at.Add(-time.Minute))
		require.NoError(t, err)
		require.Equal(t, at, res.Key.LastUsedAt)
		res, err = b.Driver.TenantGetByAPIKey(ctx, "h1", at.Add(2*time.Second), at.Add(-time.Minute))
		require.NoError(t, err)
		require.Equal(t, at, res.Key.LastUsedAt, "not due: not written")

		ok, err := b.Driver.APIKeyDelete(ctx, "t2", "key_1")
		require.NoError(t, err)
		require.False(t, ok, "another tenant's key")
		ok, err = b.Driver.APIKeyDelete(ctx, "t1", "key_1")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = b.Driver.TenantGetByAPIKey(ctx, "h1", at, at)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
