package budget_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/budget"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// clock is a fake clock the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

type bundle struct {
	ctx    context.Context
	store  store.Store
	clock  *clock
	meter  *budget.Meter
	keeper *budget.Keeper
	// resumed records the runs the keeper woke, in order.
	mu      sync.Mutex
	resumed []agentfleet.Run
}

func setup(t *testing.T, tenant store.TenantCreateParams) *bundle {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "budget.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	b := &bundle{ctx: ctx, store: st, clock: &clock{now: time.Date(2026, time.November, 29, 10, 0, 0, 0, time.UTC)}}
	b.meter, err = budget.NewMeter(budget.MeterConfig{Store: st, Lease: time.Minute, Now: b.clock.Now})
	require.NoError(t, err)
	b.keeper, err = budget.NewKeeper(budget.KeeperConfig{Store: st, Now: b.clock.Now, WakeEstimate: 100,
		Resume: func(_ context.Context, run agentfleet.Run) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.resumed = append(b.resumed, run)
			return nil
		}})
	require.NoError(t, err)
	if tenant.ID == "" {
		tenant.ID = "acme"
	}
	_, err = st.TenantCreate(ctx, tenant)
	require.NoError(t, err)
	return b
}

func (b *bundle) reserve(t *testing.T, tokens int64) (agentfleet.Reservation, error) {
	t.Helper()
	return b.meter.Reserve(b.ctx, "acme", "run-1", tokens)
}

func (b *bundle) state(t *testing.T) agentfleet.BudgetState {
	t.Helper()
	st, err := b.store.BudgetGet(b.ctx, "acme", b.clock.Now())
	require.NoError(t, err)
	return st
}

// parkedRun creates a run and parks it in waiting_budget, as a worker
// does when a reservation is refused.
func (b *bundle) parkedRun(t *testing.T) agentfleet.Run {
	t.Helper()
	res, err := b.store.RunCreate(b.ctx, store.RunCreateParams{Tenant: "acme", Agent: agentfleet.DefaultAgent, Message: "task"})
	require.NoError(t, err)
	for _, to := range []agentfleet.RunStatus{agentfleet.StatusRunning, agentfleet.StatusWaitingBudget} {
		_, err := b.store.RunTransition(b.ctx, store.RunTransitionParams{ID: res.Run.ID, To: to})
		require.NoError(t, err)
	}
	return res.Run
}

func requireExhausted(t *testing.T, err error) *agentfleet.BudgetExhaustedError {
	t.Helper()
	var be *agentfleet.BudgetExhaustedError
	require.True(t, errors.As(err, &be), "want a budget refusal, got %v", err)
	return be
}

func TestMeterWindowRolls(t *testing.T) {
	t.Parallel()
	b := setup(t, store.TenantCreateParams{TokenLimit: 1000, Window: agentfleet.WindowDay})
	r, err := b.reserve(t, 600)
	require.NoError(t, err)
	require.NoError(t, b.meter.Settle(b.ctx, r, agentfleet.Usage{PromptTokens: 500, CompletionTokens: 100}, "m"))

	_, err = b.reserve(t, 500)
	be := requireExhausted(t, err)
	require.EqualValues(t, 400, be.Left())
	require.Equal(t, time.Date(2026, time.November, 30, 0, 0, 0, 0, time.UTC), be.WindowEnd)

	// The calendar day ends: the window rolls and the budget is back.
	b.clock.Set(time.Date(2026, time.November, 30, 0, 0, 1, 0, time.UTC))
	_, err = b.reserve(t, 500)
	require.NoError(t, err)
	st := b.state(t)
	require.Zero(t, st.Used)
	require.EqualValues(t, 500, st.Reserved)
	require.Equal(t, time.Date(2026, time.November, 30, 0, 0, 0, 0, time.UTC), st.WindowStart)
}

func TestMeterRollingHoursWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, store.TenantCreateParams{TokenLimit: 100, Window: "2h"})
	r, err := b.reserve(t, 100)
	require.NoError(t, err)
	require.NoError(t, b.meter.Settle(b.ctx, r, agentfleet.Usage{CompletionTokens: 100}, "m"))
	_, err = b.reserve(t, 1)
	requireExhausted(t, err)
	b.clock.Set(b.clock.Now().Add(2*time.Hour - time.Second))
	_, err = b.reserve(t, 1)
	requireExhausted(t, err)
	b.clock.Set(b.clock.Now().Add(2 * time.Second))
	_, err = b.reserve(t, 1)
	require.NoError(t, err, "two hours after the window opened, it rolls")
}

func TestExpiredReservationReturnsBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, store.TenantCreateParams{TokenLimit: 1000, Window: agentfleet.WindowDay})
	held, err := b.reserve(t, 900) // a worker reserves, then dies
	require.NoError(t, err)
	_, err = b.reserve(t, 200)
	requireExhausted(t, err)

	b.clock.Set(b.clock.Now().Add(30 * time.Second))
	require.NoError(t, b.keeper.Pass(b.ctx))
	_, err = b.reserve(t, 200)
	requireExhausted(t, err)

	b.clock.Set(b.clock.Now().Add(31 * time.Second)) // past the one-minute lease
	require.NoError(t, b.keeper.Pass(b.ctx))
	r, err := b.reserve(t, 200)
	require.NoError(t, err)
	require.EqualValues(t, 200, b.state(t).Reserved)

	// The dead worker's call did happen after all: settling its expired
	// reservation still charges what it used, within the limit.
	require.NoError(t, b.meter.Settle(b.ctx, held, agentfleet.Usage{PromptTokens: 300}, "m"))
	require.NoError(t, b.meter.Settle(b.ctx, r, agentfleet.Usage{PromptTokens: 200}, "m"))
	st := b.state(t)
	require.EqualValues(t, 500, st.Used)
	require.Zero(t, st.Reserved)
}

func TestKeeperWakesParkedRunsWhenLimitRaised(t *testing.T) {
	t.Parallel()
	b := setup(t, store.TenantCreateParams{TokenLimit: 100, Window: agentfleet.WindowDay})
	r, err := b.reserve(t, 100)
	require.NoError(t, err)
	require.NoError(t, b.meter.Settle(b.ctx, r, agentfleet.Usage{CompletionTokens: 100}, "m"))
	first, second := b.parkedRun(t), b.parkedRun(t)

	require.NoError(t, b.keeper.Pass(b.ctx))
	require.Empty(t, b.resumed, "no budget, no wake")

	limit := int64(250) // room for one run by the wake estimate of 100... and a half
	_, err = b.store.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: "acme", TokenLimit: &limit})
	require.NoError(t, err)
	require.NoError(t, b.keeper.Pass(b.ctx))
	require.Len(t, b.resumed, 1, "150 tokens left wake one run")
	require.Equal(t, first.ID, b.resumed[0].ID, "oldest parked run first")
	require.Equal(t, agentfleet.StatusRunning, b.resumed[0].Status)
	require.Equal(t, 1, b.resumed[0].Wake, "a woken run's next turn gets a fresh message id")

	limit = 10_000
	_, err = b.store.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: "acme", TokenLimit: &limit})
	require.NoError(t, err)
	require.NoError(t, b.keeper.Pass(b.ctx))
	require.Len(t, b.resumed, 2)
	require.Equal(t, second.ID, b.resumed[1].ID)
	require.NoError(t, b.keeper.Pass(b.ctx))
	require.Len(t, b.resumed, 2, "a woken run is not woken twice")
}

func TestKeeperWakesParkedRunsWhenWindowRolls(t *testing.T) {
	t.Parallel()
	b := setup(t, store.TenantCreateParams{TokenLimit: 100, Window: agentfleet.WindowMonth})
	r, err := b.reserve(t, 100)
	require.NoError(t, err)
	require.NoError(t, b.meter.Settle(b.ctx, r, agentfleet.Usage{CompletionTokens: 100}, "m"))
	run := b.parkedRun(t)
	require.NoError(t, b.keeper.Pass(b.ctx))
	require.Empty(t, b.resumed)

	b.clock.Set(time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, b.keeper.Pass(b.ctx))
	require.Len(t, b.resumed, 1, "a new month brings the budget back")
	require.Equal(t, run.ID, b.resumed[0].ID)
}

func TestKeeperReparksWhenResumeFails(t *testing.T) {
	t.Parallel()
	b := setup(t, store.TenantCreateParams{})
	run := b.parkedRun(t)
	failing, err := budget.NewKeeper(budget.KeeperConfig{Store: b.store, Now: b.clock.Now,
		Resume: func(context.Context, agentfleet.Run) error { return errors.New("nats down") }})
	require.NoError(t, err)
	require.Error(t, failing.Pass(b.ctx))
	got, err := b.store.RunGetByID(b.ctx, store.RunGetByIDParams{ID: run.ID})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusWaitingBudget, got.Status, "a run whose turn could not be published stays parked")
}

func TestUnlimitedTenantNeverRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, store.TenantCreateParams{})
	for range 10 {
		r, err := b.reserve(t, 1_000_000)
		require.NoError(t, err)
		require.NoError(t, b.meter.Settle(b.ctx, r, agentfleet.Usage{PromptTokens: 1_000_000}, "m"))
	}
	require.EqualValues(t, 10_000_000, b.state(t).Used)
}
