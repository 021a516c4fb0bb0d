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

func exerciseReserve(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	// reservation is one of tokens for run, leased an hour from at.
	reservation := func(tenant, run, id string, tokens int64, at time.Time) agentfleet.Reservation {
		return agentfleet.Reservation{ID: id, Tenant: tenant, RunID: run, Tokens: tokens, LeaseUntil: at.Add(time.Hour)}
	}
	t.Run("HoldsWithinTheLimits", func(t *testing.T) {
		b := open(t)
		_, err := b.Store.TenantCreate(ctx, store.TenantCreateParams{ID: "t1", TokenLimit: 1000, TokensPerMinute: 500})
		require.NoError(t, err)
		id := run(t, b, "t1")
		at := now()
		ok, l, err := b.Driver.LedgerReserve(ctx, reservation("t1", id, "res-1", 300, at), at)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, driver.Ledger{Tenant: "t1", Limit: 1000, Window: agentfleet.WindowDay, TokensPerMinute: 500}, l,
			"the ledger as read, before the reserve")

		l, err = b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)
		dayStart := time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
		minute := at.Truncate(time.Minute)
		require.Equal(t, driver.Ledger{Tenant: "t1", Limit: 1000, Window: agentfleet.WindowDay, Reserved: 300, WindowStart: dayStart,
			WindowEnd: dayStart.AddDate(0, 0, 1), TokensPerMinute: 500, MinuteStart: minute, MinuteUsed: 300}, l, "the window opened")
		require.NoError(t, b.Driver.ReservationRelease(ctx, "res-1"), "the reservation was recorded")
		end(t, b, id)
	})
	t.Run("RefusesWritingNothing", func(t *testing.T) {
		b := open(t)
		_, err := b.Store.TenantCreate(ctx, store.TenantCreateParams{ID: "t1", TokenLimit: 1000, TokensPerMinute: 800})
		require.NoError(t, err)
		id := run(t, b, "t1")
		at := now()
		ok, _, err := b.Driver.LedgerReserve(ctx, reservation("t1", id, "res-1", 400, at), at)
		require.NoError(t, err)
		require.True(t, ok)
		before, err := b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)

		ok, l, err := b.Driver.LedgerReserve(ctx, reservation("t1", id, "res-2", 500, at), at)
		require.NoError(t, err)
		require.False(t, ok, "the minute has 400 left")
		require.Equal(t, before, l)
		ok, l, err = b.Driver.LedgerReserve(ctx, reservation("t1", id, "res-3", 700, at.Add(time.Minute)), at.Add(time.Minute))
		require.NoError(t, err)
		require.False(t, ok, "the window has 600 left")
		require.Equal(t, before, l)

		after, err := b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, before, after)
		require.ErrorIs(t, b.Driver.ReservationRelease(ctx, "res-2"), store.ErrNotFound, "no reservation recorded")
		require.ErrorIs(t, b.Driver.ReservationRelease(ctx, "res-3"), store.ErrNotFound)
		ok, _, err = b.Driver.LedgerReserve(ctx, reservation("t1", id, "res-4", 600, at.Add(time.Minute)), at.Add(time.Minute))
		require.NoError(t, err)
		require.True(t, ok, "exactly what is left, in a new minute")
		end(t, b, id)
	})
	t.Run("RollsAnEndedWindow", func(t *testing.T) {
		b := open(t)
		_, err := b.Store.TenantCreate(ctx, store.TenantCreateParams{ID: "t1", TokenLimit: 1000, Window: "1h"})
		require.NoError(t, err)
		id := run(t, b, "t1")
		at := now()
		old := at.Add(-2 * time.Hour)
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			tn, l, err := x.LedgerLock(ctx, "t1")
			if err != nil {
				return err
			}
			l.Used, l.WindowStart, l.WindowEnd = 900, old, old.Add(time.Hour)
			_, err = x.TenantUpdate(ctx, tn, nil, l, at)
			return err
		}))
		ok, l, err := b.Driver.LedgerReserve(ctx, reservation("t1", id, "res-1", 800, at), at)
		require.NoError(t, err)
		require.True(t, ok, "the window that held 900 ended")
		require.Equal(t, int64(900), l.Used, "as read")
		l, err = b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)
		require.Zero(t, l.Used)
		require.Equal(t, int64(800), l.Reserved)
		require.Equal(t, at, l.WindowStart, "a duration window opens at the use")
		require.Equal(t, at.Add(time.Hour), l.WindowEnd)
		end(t, b, id)
	})
	t.Run("UnlimitedWritesNothing", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		before, err := b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)
		at := now()
		ok, l, err := b.Driver.LedgerReserve(ctx, reservation("t1", id, "res-1", 1<<40, at), at)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, before, l)
		after, err := b.Driver.LedgerGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, before, after)
		require.ErrorIs(t, b.Driver.ReservationRelease(ctx, "res-1"), store.ErrNotFound)
		end(t, b, id)
	})
	t.Run("MissingTenant", func(t *testing.T) {
		b := open(t)
		at := now()
		_, _, err := b.Driver.LedgerReserve(ctx, reservation("nope", "", "res-1", 1, at), at)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
