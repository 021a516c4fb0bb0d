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

func exerciseBudget(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("Reservations", func(t *testing.T) {
		b := open(t)
		_, err := b.Store.TenantCreate(ctx, store.TenantCreateParams{ID: "t1", TokenLimit: 1000})
		require.NoError(t, err)
		id := run(t, b, "t1")
		at := now()
		r1, err := b.Store.BudgetReserve(ctx, store.BudgetReserveParams{Tenant: "t1", RunID: id, Tokens: 100, Now: at, Lease: time.Minute})
		require.NoError(t, err)
		_, err = b.Store.BudgetReserve(ctx, store.BudgetReserveParams{Tenant: "t1", RunID: id, Tokens: 200, Now: at, Lease: time.Hour})
		require.NoError(t, err)

		require.NoError(t, b.Driver.ReservationRelease(ctx, r1.ID))
		require.ErrorIs(t, b.Driver.ReservationRelease(ctx, r1.ID), store.ErrNotFound, "released")
		st, err := b.Store.BudgetGet(ctx, "t1", at)
		require.NoError(t, err)
		require.Equal(t, int64(200), st.Reserved)

		n, err := b.Driver.ReservationExpire(ctx, at.Add(time.Minute))
		require.NoError(t, err)
		require.Zero(t, n, "the lease runs an hour")
		n, err = b.Driver.ReservationExpire(ctx, at.Add(2*time.Hour))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		st, err = b.Store.BudgetGet(ctx, "t1", at)
		require.NoError(t, err)
		require.Zero(t, st.Reserved)
		end(t, b, id)
	})
	t.Run("LedgerAndUpdate", func(t *testing.T) {
		b := open(t)
		_, err := b.Store.TenantCreate(ctx, store.TenantCreateParams{ID: "t1", TokenLimit: 1000})
		require.NoError(t, err)
		l, err := b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, driver.Ledger{Tenant: "t1", Limit: 1000, Window: agentfleet.WindowDay}, l)
		_, err = b.Driver.LedgerGet(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, ok, err := b.Driver.UsageFirst(ctx, "t1", time.Time{})
		require.NoError(t, err)
		require.False(t, ok)
		n, err := b.Driver.UsageSum(ctx, "t1", time.Time{}, now())
		require.NoError(t, err)
		require.Zero(t, n)

		at := now()
		var got agentfleet.Tenant
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			tn, l, err := x.LedgerLock(ctx, "t1")
			if err != nil {
				return err
			}
			tn.TokenLimit, tn.Weight = 2000, 3
			l.Used, l.WindowStart, l.WindowEnd = 7, at, at.Add(time.Hour)
			got, err = x.TenantUpdate(ctx, tn, nil, l, at)
			return err
		}))
		require.Equal(t, int64(2000), got.TokenLimit)
		require.Equal(t, 3, got.Weight)
		require.Equal(t, at, got.UpdatedAt)
		l, err = b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, driver.Ledger{Tenant: "t1", Limit: 2000, Window: agentfleet.WindowDay, Used: 7, WindowStart: at, WindowEnd: at.Add(time.Hour)}, l)
	})
	t.Run("UsageAndJournalEmpty", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		rows, err := b.Driver.UsageList(ctx, store.UsageListParams{Tenant: "t1", GroupBy: "model"})
		require.NoError(t, err)
		require.Empty(t, rows)
		js, err := b.Driver.JournalList(ctx, "nope", 0)
		require.NoError(t, err)
		require.Empty(t, js)
	})
}
