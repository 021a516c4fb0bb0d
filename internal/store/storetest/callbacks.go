package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func testRunCallback(t *testing.T, newStore NewStore) {
	t.Run("TenantSecret", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		_, err := b.s.TenantCallbackSecretGet(b.ctx, ten.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.NoError(t, b.s.TenantCallbackSecretSet(b.ctx, store.TenantCallbackSecretSetParams{Tenant: ten.ID, Secret: "sealed-1"}))
		require.NoError(t, b.s.TenantCallbackSecretSet(b.ctx, store.TenantCallbackSecretSetParams{Tenant: ten.ID, Secret: "sealed-2"}))
		got, err := b.s.TenantCallbackSecretGet(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, "sealed-2", got)
		require.ErrorIs(t, b.s.TenantCallbackSecretSet(b.ctx, store.TenantCallbackSecretSetParams{Tenant: "nobody", Secret: "x"}), store.ErrNotFound)
	})
	t.Run("ClaimRecord", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		// The callback row comes first, then its run.
		cb, err := b.s.RunCallbackCreate(b.ctx, store.RunCallbackCreateParams{RunID: "run-cb-1", Tenant: ten.ID, URL: "https://example.com/cb"})
		require.NoError(t, err)
		require.Equal(t, store.CallbackPending, cb.State)
		require.Zero(t, cb.Attempts)
		require.True(t, cb.FirstAt.IsZero())
		_, err = b.s.RunCallbackCreate(b.ctx, store.RunCallbackCreateParams{RunID: "run-cb-1", Tenant: ten.ID, URL: "https://example.com/cb"})
		require.ErrorIs(t, err, store.ErrConflict)
		run := b.run(t, store.RunCreateParams{ID: "run-cb-1", Tenant: ten.ID, Message: "task"})
		_, err = b.s.RunCallbackCreate(b.ctx, store.RunCallbackCreateParams{RunID: "run-orphan", Tenant: ten.ID, URL: "https://example.com/cb"})
		require.NoError(t, err)

		now := time.Now()
		claim := func(at time.Time) []store.RunCallback {
			t.Helper()
			cs, err := b.s.RunCallbackClaim(b.ctx, store.RunCallbackClaimParams{Now: at, Limit: 10, Lease: time.Minute})
			require.NoError(t, err)
			return cs
		}
		require.Empty(t, claim(now), "the run has not ended")
		b.transition(t, run.ID, agentfleet.StatusRunning)
		b.transition(t, run.ID, agentfleet.StatusCompleted)
		got := claim(now)
		require.Len(t, got, 1, "the orphan has no run to end")
		require.Equal(t, run.ID, got[0].RunID)
		require.Empty(t, claim(now.Add(30*time.Second)), "claimed: leased a minute")

		at := now.Add(time.Second).UTC().Truncate(time.Microsecond)
		rec, err := b.s.RunCallbackRecord(b.ctx, store.RunCallbackRecordParams{
			RunID: run.ID, Attempt: store.CallbackAttempt{At: at, Status: 500, Error: "HTTP 500"}, State: store.CallbackPending, NextAt: at.Add(5 * time.Second),
		})
		require.NoError(t, err)
		require.Equal(t, 1, rec.Attempts)
		require.Equal(t, at, rec.FirstAt)
		require.Equal(t, []store.CallbackAttempt{{At: at, Status: 500, Error: "HTTP 500"}}, rec.Log)
		require.Empty(t, claim(at.Add(4*time.Second)))
		require.Len(t, claim(at.Add(5*time.Second)), 1)
		rec, err = b.s.RunCallbackRecord(b.ctx, store.RunCallbackRecordParams{
			RunID: run.ID, Attempt: store.CallbackAttempt{At: at.Add(6 * time.Second), Status: 204}, State: store.CallbackDelivered,
		})
		require.NoError(t, err)
		require.Equal(t, store.CallbackDelivered, rec.State)
		require.Equal(t, 2, rec.Attempts)
		require.Equal(t, at, rec.FirstAt, "the first attempt's time stays")
		require.Len(t, rec.Log, 2)
		require.Empty(t, claim(at.Add(time.Hour)), "delivered")
		got2, err := b.s.RunCallbackGetByID(b.ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, rec, got2)

		// The log keeps the last attempts.
		cb3, err := b.s.RunCallbackCreate(b.ctx, store.RunCallbackCreateParams{RunID: "run-cb-3", Tenant: ten.ID, URL: "https://example.com/cb"})
		require.NoError(t, err)
		for i := range store.CallbackLogMax + 5 {
			rec, err = b.s.RunCallbackRecord(b.ctx, store.RunCallbackRecordParams{
				RunID: cb3.RunID, Attempt: store.CallbackAttempt{Error: fmt.Sprint(i)}, State: store.CallbackPending, NextAt: now,
			})
			require.NoError(t, err)
		}
		require.Equal(t, store.CallbackLogMax+5, rec.Attempts)
		require.Len(t, rec.Log, store.CallbackLogMax)
		require.Equal(t, fmt.Sprint(store.CallbackLogMax+4), rec.Log[len(rec.Log)-1].Error)

		// Pruning takes callbacks whose run does not exist, once old.
		n, err := b.s.RunCallbackPrune(b.ctx, now.Add(-time.Hour))
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.s.RunCallbackPrune(b.ctx, now.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, 2, n, "the orphan and run-cb-3")
		_, err = b.s.RunCallbackGetByID(b.ctx, "run-orphan")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.RunCallbackGetByID(b.ctx, run.ID)
		require.NoError(t, err)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		_, err := b.s.RunCallbackCreate(b.ctx, store.RunCallbackCreateParams{RunID: "x", Tenant: "nobody", URL: "https://e.com"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.RunCallbackCreate(b.ctx, store.RunCallbackCreateParams{RunID: "a.b", Tenant: "t", URL: "https://e.com"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.RunCallbackRecord(b.ctx, store.RunCallbackRecordParams{RunID: "nope", State: store.CallbackDelivered})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.RunCallbackRecord(b.ctx, store.RunCallbackRecordParams{RunID: "nope", State: "lost"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.RunCallbackClaim(b.ctx, store.RunCallbackClaimParams{})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}
