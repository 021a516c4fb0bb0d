package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func (b bundle) reserve(t *testing.T, tenant string, tokens int64, now time.Time) agentfleet.Reservation {
	t.Helper()
	r, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: tenant, RunID: "run-1", Tokens: tokens, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	return r
}

// settle settles r as a caller does: naming the reservation, and its
// tenant and run for when it has no id (an unlimited tenant's).
func (b bundle) settle(t *testing.T, r agentfleet.Reservation, prompt, completion int64, now time.Time) store.BudgetSettleResult {
	t.Helper()
	res, err := b.s.BudgetSettle(b.ctx, settleParams(r, prompt, completion, now))
	require.NoError(t, err)
	return res
}

func settleParams(r agentfleet.Reservation, prompt, completion int64, now time.Time) store.BudgetSettleParams {
	return store.BudgetSettleParams{ReservationID: r.ID, Tenant: r.Tenant, RunID: r.RunID, Model: "m1",
		Usage: agentfleet.Usage{PromptTokens: prompt, CompletionTokens: completion}, Now: now}
}

func (b bundle) budget(t *testing.T, tenant string, now time.Time) agentfleet.BudgetState {
	t.Helper()
	st, err := b.s.BudgetGet(b.ctx, tenant, now)
	require.NoError(t, err)
	return st
}

func exhausted(t *testing.T, err error) *agentfleet.BudgetExhaustedError {
	t.Helper()
	var be *agentfleet.BudgetExhaustedError
	require.True(t, errors.As(err, &be), "want a *BudgetExhaustedError, got %v", err)
	return be
}

func testBudget(t *testing.T, newStore NewStore) {
	dayStart := time.Date(2025, time.March, 14, 0, 0, 0, 0, time.UTC)
	dayEnd := dayStart.AddDate(0, 0, 1)

	t.Run("ReserveSettle", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 1000})
		r := b.reserve(t, ten.ID, 300, day)
		require.NotEmpty(t, r.ID)
		require.Equal(t, agentfleet.Reservation{ID: r.ID, Tenant: ten.ID, RunID: "run-1", Tokens: 300, LeaseUntil: day.Add(time.Minute)}, r)
		require.Equal(t, agentfleet.BudgetState{Tenant: ten.ID, Limit: 1000, Window: agentfleet.WindowDay, Reserved: 300,
			WindowStart: dayStart, WindowEnd: dayEnd, MinuteUsed: 300}, b.budget(t, ten.ID, day), "the minute's count is kept without a per-minute limit too")

		res := b.settle(t, r, 150, 50, day.Add(time.Second))
		require.Equal(t, store.BudgetSettleResult{Charged: 200}, res)
		st := b.budget(t, ten.ID, day.Add(2*time.Second))
		require.Equal(t, int64(200), st.Used)
		require.Zero(t, st.Reserved)

		_, err := b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{ReservationID: r.ID, Now: day})
		require.ErrorIs(t, err, store.ErrNotFound, "settled twice")

		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{{Key: "m1", Usage: agentfleet.Usage{PromptTokens: 150, CompletionTokens: 50}, Calls: 1}}, rows)
	})
	t.Run("Exhausted", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100})
		b.reserve(t, ten.ID, 60, day)
		_, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 50, Now: day})
		be := exhausted(t, err)
		require.Equal(t, agentfleet.BudgetExhaustedError{Tenant: ten.ID, Need: 50, Limit: 100, Used: 0, Reserved: 60, WindowEnd: dayEnd}, *be)
		require.Equal(t, int64(40), be.Left())
		b.reserve(t, ten.ID, 40, day) // exactly fits
		st := b.budget(t, ten.ID, day)
		require.Equal(t, int64(100), st.Reserved)
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 1, Now: day})
		exhausted(t, err)
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 101, Now: day.AddDate(0, 0, 5)})
		exhausted(t, err)
	})
	t.Run("Unlimited", func(t *testing.T) {
		// An unlimited tenant's reservations are not recorded: the
		// reservation has no id, settling it appends to the usage ledger
		// only, and BudgetGet sums the ledger.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.reserve(t, ten.ID, 1_000_000_000_000, day)
		require.Equal(t, agentfleet.Reservation{Tenant: ten.ID, RunID: "run-1", Tokens: 1_000_000_000_000, LeaseUntil: day.Add(time.Minute)}, r)
		st := b.budget(t, ten.ID, day)
		require.Equal(t, agentfleet.BudgetState{Tenant: ten.ID, Window: agentfleet.WindowDay, WindowStart: dayStart, WindowEnd: dayEnd}, st,
			"nothing reserved, nothing counted per minute")
		res := b.settle(t, r, 7, 8, day)
		require.Equal(t, store.BudgetSettleResult{Charged: 15}, res)
		st = b.budget(t, ten.ID, day)
		require.Equal(t, int64(15), st.Used)
		require.Zero(t, st.Reserved)
		require.NoError(t, b.s.BudgetRelease(b.ctx, ""), "releasing an unlimited reservation is a no-op")
		require.Equal(t, st, b.budget(t, ten.ID, day))

		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "run"})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{{Key: "run-1", Usage: agentfleet.Usage{PromptTokens: 7, CompletionTokens: 8}, Calls: 1}}, rows)

		// A settle without a reservation names the tenant.
		_, err = b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{Usage: agentfleet.Usage{PromptTokens: 1}, Now: day})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{Tenant: "nobody", Usage: agentfleet.Usage{PromptTokens: 1}, Now: day})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{Tenant: ten.ID, Usage: agentfleet.Usage{PromptTokens: -1}, Now: day})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Equal(t, int64(15), b.budget(t, ten.ID, day).Used)
	})
	t.Run("UnlimitedWindows", func(t *testing.T) {
		// BudgetGet of an unlimited tenant sums the ledger over the
		// window as it would have rolled.
		b := setup(t, newStore)
		cal := b.tenant(t, store.TenantCreateParams{Window: agentfleet.WindowDay})
		at := func(tokens int64, when time.Time) {
			b.settle(t, b.reserve(t, cal.ID, 1000, when), tokens, 0, when)
		}
		at(10, dayStart.Add(-time.Microsecond)) // the day before
		at(20, dayStart)
		at(30, day)
		at(40, dayEnd.Add(-time.Microsecond))
		at(50, dayEnd) // the next day
		require.Equal(t, agentfleet.BudgetState{Tenant: cal.ID, Window: agentfleet.WindowDay, Used: 90, WindowStart: dayStart, WindowEnd: dayEnd},
			b.budget(t, cal.ID, day))
		require.Equal(t, int64(10), b.budget(t, cal.ID, dayStart.Add(-time.Hour)).Used)
		require.Equal(t, int64(50), b.budget(t, cal.ID, dayEnd.Add(time.Hour)).Used)
		require.Zero(t, b.budget(t, cal.ID, dayEnd.AddDate(0, 0, 3)).Used)

		dur := b.tenant(t, store.TenantCreateParams{Window: "1h"})
		first := day
		st := b.budget(t, dur.ID, first)
		require.Zero(t, st.Used)
		require.True(t, st.WindowStart.IsZero(), "no use yet: no window")
		for _, x := range []struct {
			tokens int64
			after  time.Duration
		}{{1, 0}, {2, 30 * time.Minute}, {4, 59 * time.Minute}, {8, 90 * time.Minute}, {16, 149 * time.Minute}, {32, 151 * time.Minute}} {
			b.settle(t, b.reserve(t, dur.ID, 100, first.Add(x.after)), x.tokens, 0, first.Add(x.after))
		}
		// Windows: [0, 60m) holds 1+2+4, [90m, 150m) 8+16, [151m, 211m) 32.
		for _, c := range []struct {
			at         time.Duration
			used       int64
			start, end time.Duration
			closed     bool
		}{
			{at: 10 * time.Minute, used: 7, start: 0, end: time.Hour},
			{at: 60 * time.Minute, closed: true},
			{at: 100 * time.Minute, used: 24, start: 90 * time.Minute, end: 150 * time.Minute},
			{at: 150 * time.Minute, closed: true},
			{at: 200 * time.Minute, used: 32, start: 151 * time.Minute, end: 211 * time.Minute},
			{at: 211 * time.Minute, closed: true},
		} {
			st := b.budget(t, dur.ID, first.Add(c.at))
			if c.closed {
				require.Equal(t, agentfleet.BudgetState{Tenant: dur.ID, Window: "1h"}, st, "at %s the window has ended", c.at)
				continue
			}
			require.Equal(t, agentfleet.BudgetState{Tenant: dur.ID, Window: "1h", Used: c.used,
				WindowStart: first.Add(c.start), WindowEnd: first.Add(c.end)}, st, "at %s", c.at)
		}
	})
	t.Run("UnlimitedConcurrent", func(t *testing.T) {
		// 32 workers reserve and settle (or release) against an
		// unlimited tenant at once. Nothing is reserved, every settle
		// charges in full, and the ledger sum is exactly what was
		// reported.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{Window: agentfleet.WindowDay})
		var reported atomic.Int64
		concurrently(t, 32, func(w int) error {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 20 {
				need := 1 + rng.Int64N(1500)
				r, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, RunID: fmt.Sprint("w", w), Tokens: need, Now: day})
				if err != nil {
					return err
				}
				if r.ID != "" || r.Tokens != need || r.Tenant != ten.ID {
					return fmt.Errorf("unlimited reservation: got %+v", r)
				}
				if rng.IntN(5) == 0 {
					if err := b.s.BudgetRelease(b.ctx, r.ID); err != nil {
						return err
					}
					continue
				}
				used := rng.Int64N(2 * need) // may exceed the estimate: nothing caps it
				res, err := b.s.BudgetSettle(b.ctx, settleParams(r, used/2, used-used/2, day))
				if err != nil {
					return err
				}
				if res.Overage != 0 || res.Charged != used {
					return fmt.Errorf("unlimited settle of %d: charged %d, overage %d", used, res.Charged, res.Overage)
				}
				reported.Add(used)
			}
			return nil
		})
		st := b.budget(t, ten.ID, day)
		require.Equal(t, reported.Load(), st.Used)
		require.Zero(t, st.Reserved)
		require.Zero(t, st.Limit)
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, reported.Load(), rows[0].Usage.Total())
		n, err := b.s.BudgetExpire(b.ctx, day.Add(time.Hour))
		require.NoError(t, err)
		require.Zero(t, n, "no reservation was recorded")
	})
	t.Run("UnlimitedToLimited", func(t *testing.T) {
		// A tenant given a limit mid-window starts from what the ledger
		// charged in that window; the ceiling holds from then on, for
		// calls reserved before the change too. TenantUpdate works at
		// the store's clock, so this test does too.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{Window: "24h"})
		now := time.Now().UTC()
		for _, n := range []int64{100, 200, 300} {
			b.settle(t, b.reserve(t, ten.ID, 1000, now), n, 0, now)
		}
		inFlight := b.reserve(t, ten.ID, 400, now) // taken while unlimited
		require.Empty(t, inFlight.ID)
		require.Equal(t, int64(600), b.budget(t, ten.ID, now).Used)

		_, err := b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, TokenLimit: ptr[int64](1000)})
		require.NoError(t, err)
		st := b.budget(t, ten.ID, now)
		require.Equal(t, int64(1000), st.Limit)
		require.Equal(t, int64(600), st.Used, "used carries the window's ledger")
		require.Zero(t, st.Reserved)
		require.False(t, st.WindowStart.IsZero())
		require.Equal(t, 24*time.Hour, st.WindowEnd.Sub(st.WindowStart))
		require.False(t, st.WindowStart.After(now), "the window is the one the ledger opened")

		held := b.reserve(t, ten.ID, 300, now)
		require.NotEmpty(t, held.ID, "a limited tenant's reservations are recorded")
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 101, Now: now})
		be := exhausted(t, err)
		require.Equal(t, int64(600), be.Used)
		require.Equal(t, int64(300), be.Reserved)
		last := b.reserve(t, ten.ID, 100, now) // exactly fits
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 1, Now: now})
		exhausted(t, err)
		require.NoError(t, b.s.BudgetRelease(b.ctx, last.ID))

		// The call reserved while unlimited settles against the limit.
		require.Equal(t, store.BudgetSettleResult{Charged: 250}, b.settle(t, inFlight, 250, 0, now))
		require.Equal(t, store.BudgetSettleResult{Charged: 150, Overage: 150}, b.settle(t, held, 300, 0, now))
		st = b.budget(t, ten.ID, now)
		require.Equal(t, int64(1000), st.Used, "used never exceeds the limit")
		require.Zero(t, st.Reserved)
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 1, Now: now})
		exhausted(t, err)

		// Unlimited again: reservations stop being recorded, the ledger
		// keeps counting.
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, TokenLimit: ptr[int64](0)})
		require.NoError(t, err)
		again := b.reserve(t, ten.ID, 5000, now)
		require.Empty(t, again.ID)
		b.settle(t, again, 5000, 0, now)
		require.Equal(t, int64(6000), b.budget(t, ten.ID, now).Used)
		// And limited again: refused at once.
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, TokenLimit: ptr[int64](6500)})
		require.NoError(t, err)
		require.Equal(t, int64(6000), b.budget(t, ten.ID, now).Used)
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 501, Now: now})
		require.Equal(t, int64(6000), exhausted(t, err).Used)
		b.reserve(t, ten.ID, 500, now)
	})
	t.Run("UnlimitedToLimitedConcurrent", func(t *testing.T) {
		// A limit given while settlements are in flight misses none of
		// them: each is in the sum TenantUpdate starts from, or charged
		// to the row after it. With a limit never reached, the row's used
		// ends exactly at what was reported.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{Window: "24h"})
		var reported, settled atomic.Int64
		limitAt := int64(60)
		limited := make(chan error, 1)
		concurrently(t, 16, func(w int) error {
			for i := range 15 {
				r, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, RunID: fmt.Sprint("w", w), Tokens: 100})
				if err != nil {
					return err
				}
				used := int64(1 + (w*31+i*7)%97)
				res, err := b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{ReservationID: r.ID, Tenant: r.Tenant, RunID: r.RunID,
					Usage: agentfleet.Usage{CompletionTokens: used}})
				if err != nil {
					return err
				}
				if res.Charged != used {
					return fmt.Errorf("settle of %d charged %d", used, res.Charged)
				}
				reported.Add(used)
				if settled.Add(1) == limitAt {
					go func() {
						_, err := b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, TokenLimit: ptr[int64](1 << 40)})
						limited <- err
					}()
				}
			}
			return nil
		})
		require.NoError(t, <-limited)
		st := b.budget(t, ten.ID, time.Now())
		require.Equal(t, int64(1<<40), st.Limit)
		require.Equal(t, reported.Load(), st.Used, "no settlement lost across the change")
		require.Zero(t, st.Reserved)
	})
	t.Run("UnlimitedToLimitedFresh", func(t *testing.T) {
		// With no usage in the window (or none at all), the limit starts
		// from zero; a window change in the same update restarts it.
		b := setup(t, newStore)
		now := time.Now().UTC()
		fresh := b.tenant(t, store.TenantCreateParams{Window: "1h"})
		_, err := b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: fresh.ID, TokenLimit: ptr[int64](100)})
		require.NoError(t, err)
		st := b.budget(t, fresh.ID, now)
		require.Zero(t, st.Used)
		b.reserve(t, fresh.ID, 100, now)

		moved := b.tenant(t, store.TenantCreateParams{Window: agentfleet.WindowMonth})
		b.settle(t, b.reserve(t, moved.ID, 10, now), 80, 0, now)
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: moved.ID, TokenLimit: ptr[int64](100), Window: ptr[agentfleet.BudgetWindow]("1h")})
		require.NoError(t, err)
		require.Zero(t, b.budget(t, moved.ID, now).Used, "a new window starts from zero")
		b.reserve(t, moved.ID, 100, now)

		// A per-minute limit alone makes a tenant limited too: its
		// minute starts from what the ledger charged in it.
		tpm := b.tenant(t, store.TenantCreateParams{})
		before := time.Now().UTC()
		b.settle(t, b.reserve(t, tpm.ID, 10, before), 60, 0, before)
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: tpm.ID, TokensPerMinute: ptr[int64](100)})
		require.NoError(t, err)
		after := time.Now().UTC()
		st = b.budget(t, tpm.ID, after)
		if before.Truncate(24 * time.Hour).Equal(after.Truncate(24 * time.Hour)) {
			require.Equal(t, int64(60), st.Used)
		}
		r, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: tpm.ID, Tokens: 41, Now: after})
		if before.Truncate(time.Minute).Equal(after.Truncate(time.Minute)) {
			require.Equal(t, int64(60), st.MinuteUsed)
			require.True(t, exhausted(t, err).PerMinute)
		} else {
			require.NoError(t, err, "a new minute began meanwhile") // rare: the clock crossed a minute
			require.NotEmpty(t, r.ID)
		}
	})
	t.Run("TokensPerMinute", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokensPerMinute: 100})
		at := time.Date(2025, 3, 14, 10, 30, 5, 0, time.UTC)
		b.reserve(t, ten.ID, 60, at)
		_, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 50, Now: at.Add(35 * time.Second)})
		be := exhausted(t, err)
		require.True(t, be.PerMinute)
		require.Equal(t, int64(100), be.Limit)
		require.Equal(t, int64(60), be.Used)
		require.Equal(t, time.Date(2025, 3, 14, 10, 31, 0, 0, time.UTC), be.WindowEnd)
		b.reserve(t, ten.ID, 40, at.Add(40*time.Second))
		next := time.Date(2025, 3, 14, 10, 31, 0, 0, time.UTC)
		b.reserve(t, ten.ID, 50, next) // a new minute
		st := b.budget(t, ten.ID, next.Add(10*time.Second))
		require.Equal(t, int64(100), st.TokensPerMinute)
		require.Equal(t, int64(50), st.MinuteUsed)
		require.Zero(t, b.budget(t, ten.ID, next.Add(time.Minute)).MinuteUsed)
	})
	t.Run("SettleOverage", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100})
		r := b.reserve(t, ten.ID, 80, day)
		res := b.settle(t, r, 100, 50, day)
		require.Equal(t, store.BudgetSettleResult{Charged: 100, Overage: 50}, res, "capped at the limit")
		require.Equal(t, int64(100), b.budget(t, ten.ID, day).Used)

		other := b.tenant(t, store.TenantCreateParams{TokenLimit: 100})
		r1 := b.reserve(t, other.ID, 50, day)
		r2 := b.reserve(t, other.ID, 50, day)
		require.Equal(t, store.BudgetSettleResult{Charged: 80}, b.settle(t, r1, 80, 0, day))
		require.Equal(t, store.BudgetSettleResult{Charged: 20, Overage: 30}, b.settle(t, r2, 50, 0, day))
		st := b.budget(t, other.ID, day)
		require.Equal(t, int64(100), st.Used, "used never exceeds the limit")
		require.Zero(t, st.Reserved)
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: other.ID, GroupBy: "model"})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{{Key: "m1", Usage: agentfleet.Usage{PromptTokens: 130}, Calls: 2}}, rows, "the ledger keeps what was reported")
	})
	t.Run("Release", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100})
		r := b.reserve(t, ten.ID, 70, day)
		require.NoError(t, b.s.BudgetRelease(b.ctx, r.ID))
		require.Zero(t, b.budget(t, ten.ID, day).Reserved)
		require.ErrorIs(t, b.s.BudgetRelease(b.ctx, r.ID), store.ErrNotFound)
		_, err := b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{ReservationID: r.ID, Now: day})
		require.ErrorIs(t, err, store.ErrNotFound)
		b.reserve(t, ten.ID, 100, day) // the released tokens are back
	})
	t.Run("Expire", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100})
		short, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 30, Now: day, Lease: time.Minute})
		require.NoError(t, err)
		long, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 20, Now: day, Lease: 10 * time.Minute})
		require.NoError(t, err)
		n, err := b.s.BudgetExpire(b.ctx, day.Add(time.Minute))
		require.NoError(t, err)
		require.Zero(t, n, "a lease that ends at now has not ended before it")
		n, err = b.s.BudgetExpire(b.ctx, day.Add(2*time.Minute))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, int64(20), b.budget(t, ten.ID, day).Reserved)
		_, err = b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{ReservationID: short.ID, Now: day})
		require.ErrorIs(t, err, store.ErrNotFound, "an expired reservation is gone")
		b.settle(t, long, 10, 0, day)
		n, err = b.s.BudgetExpire(b.ctx, day.Add(time.Hour))
		require.NoError(t, err)
		require.Zero(t, n)

		// The default lease applies when none is given.
		d, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 1, Now: day})
		require.NoError(t, err)
		require.True(t, d.LeaseUntil.After(day.Add(time.Minute)))
	})
	t.Run("WindowDay", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100, Window: agentfleet.WindowDay})
		late := time.Date(2025, 3, 14, 23, 0, 0, 0, time.UTC)
		b.settle(t, b.reserve(t, ten.ID, 60, late), 60, 0, late)
		held := b.reserve(t, ten.ID, 30, late) // outstanding across the roll
		_, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 50, Now: late.Add(30 * time.Minute)})
		require.Equal(t, dayEnd, exhausted(t, err).WindowEnd)
		require.Equal(t, agentfleet.BudgetState{Tenant: ten.ID, Limit: 100, Window: agentfleet.WindowDay, Used: 60, Reserved: 30,
			WindowStart: dayStart, WindowEnd: dayEnd}, b.budget(t, ten.ID, dayEnd.Add(-time.Microsecond)))

		// At midnight the window rolls: used starts again, the
		// reservation carries over.
		require.Equal(t, agentfleet.BudgetState{Tenant: ten.ID, Limit: 100, Window: agentfleet.WindowDay, Used: 0, Reserved: 30,
			WindowStart: dayEnd, WindowEnd: dayEnd.AddDate(0, 0, 1)}, b.budget(t, ten.ID, dayEnd))
		b.reserve(t, ten.ID, 70, dayEnd)
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 1, Now: dayEnd})
		exhausted(t, err)
		// The carried reservation settles into the new window.
		b.settle(t, held, 25, 0, dayEnd.Add(time.Hour))
		st := b.budget(t, ten.ID, dayEnd.Add(time.Hour))
		require.Equal(t, int64(25), st.Used)
		require.Equal(t, int64(70), st.Reserved)
		require.Equal(t, dayEnd, st.WindowStart)
	})
	t.Run("WindowMonth", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100, Window: agentfleet.WindowMonth})
		jan := time.Date(2025, 1, 31, 23, 59, 59, 0, time.UTC)
		feb := time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)
		mar := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
		b.settle(t, b.reserve(t, ten.ID, 90, jan), 90, 0, jan)
		st := b.budget(t, ten.ID, time.Date(2025, 1, 15, 0, 0, 0, 0, time.UTC))
		require.Equal(t, int64(90), st.Used)
		require.Equal(t, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), st.WindowStart)
		require.Equal(t, feb, st.WindowEnd)
		_, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 20, Now: jan})
		exhausted(t, err)

		st = b.budget(t, ten.ID, feb)
		require.Zero(t, st.Used)
		require.Equal(t, feb, st.WindowStart)
		require.Equal(t, mar, st.WindowEnd)
		b.reserve(t, ten.ID, 100, feb.Add(27*24*time.Hour))
	})
	t.Run("WindowDuration", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100, Window: "1h"})
		first := time.Date(2025, 3, 14, 10, 17, 0, 0, time.UTC)
		st := b.budget(t, ten.ID, first.Add(-time.Hour))
		require.True(t, st.WindowStart.IsZero(), "a duration window opens at first use")
		require.Equal(t, agentfleet.BudgetWindow("1h"), st.Window)

		b.settle(t, b.reserve(t, ten.ID, 100, first), 100, 0, first.Add(3*time.Minute))
		st = b.budget(t, ten.ID, first.Add(time.Hour-time.Second))
		require.Equal(t, int64(100), st.Used)
		require.Equal(t, first, st.WindowStart)
		require.Equal(t, first.Add(time.Hour), st.WindowEnd)
		_, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 1, Now: first.Add(59 * time.Minute)})
		require.Equal(t, first.Add(time.Hour), exhausted(t, err).WindowEnd)

		st = b.budget(t, ten.ID, first.Add(time.Hour))
		require.Zero(t, st.Used, "the window ended")
		require.True(t, st.WindowStart.IsZero())

		// Tumbling: the next window opens at the next use, not at the end
		// of the previous one.
		use := first.Add(time.Hour + 23*time.Minute)
		b.reserve(t, ten.ID, 40, use)
		st = b.budget(t, ten.ID, use)
		require.Equal(t, use, st.WindowStart)
		require.Equal(t, use.Add(time.Hour), st.WindowEnd)
		require.Equal(t, int64(40), st.Reserved)
	})
	t.Run("WindowChangeRestarts", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100})
		b.settle(t, b.reserve(t, ten.ID, 50, day), 50, 0, day)
		b.reserve(t, ten.ID, 10, day)
		_, err := b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, TokenLimit: ptr[int64](200)})
		require.NoError(t, err)
		require.Equal(t, int64(50), b.budget(t, ten.ID, day).Used, "a new limit keeps the window")
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, Window: ptr(agentfleet.WindowMonth)})
		require.NoError(t, err)
		st := b.budget(t, ten.ID, day)
		require.Zero(t, st.Used, "a new window starts from zero")
		require.Equal(t, int64(10), st.Reserved)
		require.Equal(t, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), st.WindowStart)
	})
	t.Run("Usage", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		settle := func(run, model string, prompt int64, at time.Time) {
			r, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, RunID: run, Tokens: 1000, Now: at})
			require.NoError(t, err)
			_, err = b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{ReservationID: r.ID, Tenant: r.Tenant, RunID: r.RunID, Model: model,
				Usage: agentfleet.Usage{PromptTokens: prompt, CompletionTokens: 1}, Now: at})
			require.NoError(t, err)
		}
		settle("ra", "m1", 10, day)
		settle("ra", "m2", 20, day.Add(time.Hour))
		settle("rb", "m1", 30, day.Add(2*time.Hour))
		byModel, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "model"})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{
			{Key: "m1", Usage: agentfleet.Usage{PromptTokens: 40, CompletionTokens: 2}, Calls: 2},
			{Key: "m2", Usage: agentfleet.Usage{PromptTokens: 20, CompletionTokens: 1}, Calls: 1},
		}, byModel)
		byRun, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "run"})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{
			{Key: "ra", Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 2}, Calls: 2},
			{Key: "rb", Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 1}, Calls: 1},
		}, byRun)
		since, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "run", Since: day.Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{
			{Key: "ra", Usage: agentfleet.Usage{PromptTokens: 20, CompletionTokens: 1}, Calls: 1},
			{Key: "rb", Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 1}, Calls: 1},
		}, since)
		one, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, RunID: "rb"})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{{Key: "m1", Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 1}, Calls: 1}}, one)
		_, err = b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "day"})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100})
		_, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: "nobody", Tokens: 1, Now: day})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: 0, Now: day})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, Tokens: -5, Now: day})
		require.ErrorIs(t, err, store.ErrInvalid)
		r := b.reserve(t, ten.ID, 10, day)
		_, err = b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{ReservationID: r.ID, Usage: agentfleet.Usage{PromptTokens: -1}, Now: day})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.BudgetGet(b.ctx, "nobody", day)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.s.BudgetRelease(b.ctx, "nope"), store.ErrNotFound)
	})
	t.Run("Concurrent", func(t *testing.T) {
		// 32 workers reserve random amounts against one budget, settle
		// what they "used" (never more than reserved) or release. The
		// limit holds at every success and at the end, and what was
		// charged is exactly what was reported.
		b := setup(t, newStore)
		const limit = 20_000
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: limit})
		var reported, refused atomic.Int64
		concurrently(t, 32, func(w int) error {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range 25 {
				need := 1 + rng.Int64N(1500)
				r, err := b.s.BudgetReserve(b.ctx, store.BudgetReserveParams{Tenant: ten.ID, RunID: fmt.Sprint("w", w), Tokens: need, Now: day})
				var be *agentfleet.BudgetExhaustedError
				if errors.As(err, &be) {
					refused.Add(1)
					continue
				}
				if err != nil {
					return err
				}
				st, err := b.s.BudgetGet(b.ctx, ten.ID, day)
				if err != nil {
					return err
				}
				if st.Used+st.Reserved > limit {
					return fmt.Errorf("after a reservation: used %d + reserved %d > limit %d", st.Used, st.Reserved, limit)
				}
				if rng.IntN(5) == 0 {
					if err := b.s.BudgetRelease(b.ctx, r.ID); err != nil {
						return err
					}
					continue
				}
				used := rng.Int64N(need + 1)
				res, err := b.s.BudgetSettle(b.ctx, store.BudgetSettleParams{ReservationID: r.ID, Model: "m",
					Usage: agentfleet.Usage{PromptTokens: used / 2, CompletionTokens: used - used/2}, Now: day})
				if err != nil {
					return err
				}
				if res.Overage != 0 || res.Charged != used {
					return fmt.Errorf("settle %d within its reservation: charged %d, overage %d", used, res.Charged, res.Overage)
				}
				reported.Add(used)
			}
			return nil
		})
		st := b.budget(t, ten.ID, day)
		require.LessOrEqual(t, st.Used, int64(limit))
		require.Zero(t, st.Reserved, "every reservation settled or released")
		require.Equal(t, reported.Load(), st.Used)
		require.Positive(t, refused.Load(), "the workers asked for more than the limit")
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, reported.Load(), rows[0].Usage.Total())
	})
}
