package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// BudgetDriver holds the budget ledger's writes that stay one coarse
// primitive per backend: PostgreSQL settles in one statement (its window
// roll inside the UPDATE that takes the row lock).
type BudgetDriver interface {
	// LedgerSettle charges a validated settle (rules.BudgetSettle) as its
	// own transaction. A reservation gone or, without one, a tenant that
	// does not exist is store.ErrNotFound, and nothing was written.
	LedgerSettle(ctx context.Context, p store.BudgetSettleParams) (store.BudgetSettleResult, error)
}

// BudgetExecutor holds what of the budget ledger is a plain read or a
// one-step write. Reserving and settling are the coarse Reserver and
// BudgetDriver (PostgreSQL decides the window roll and the limit in the
// one UPDATE that takes the row lock; see store/postgres/budget.go).
type BudgetExecutor interface {
	// ReservationRelease deletes a reservation and gives its tokens back
	// to its tenant; none is store.ErrNotFound.
	ReservationRelease(ctx context.Context, id string) error
	// ReservationExpire deletes the reservations whose lease ended before
	// now, gives their tokens back and counts them. Concurrent calls do
	// not deadlock.
	ReservationExpire(ctx context.Context, now time.Time) (int, error)
	// UsageList sums a tenant's usage ledger since p.Since (zero: all)
	// grouped by p.GroupBy ("model" or "run"), of p.RunID when set,
	// ordered by the key (bytewise).
	UsageList(ctx context.Context, p store.UsageListParams) ([]store.UsageRow, error)
	// LedgerGet reads a tenant's budget ledger; LedgerLock reads it with
	// the tenant and holds the row until the transaction ends (waiting
	// out every settle still inserting into the usage ledger).
	LedgerGet(ctx context.Context, tenant string) (Ledger, error)
	LedgerLock(ctx context.Context, tenant string) (agentfleet.Tenant, Ledger, error)
	// UsageFirst finds a tenant's first usage ledger entry at or after t
	// (zero: the first); ok is false when there is none.
	UsageFirst(ctx context.Context, tenant string, t time.Time) (at time.Time, ok bool, err error)
	// UsageSum is what the usage ledger charged a tenant in [from, to).
	UsageSum(ctx context.Context, tenant string, from, to time.Time) (int64, error)
	// TenantUpdate writes a tenant's settings (t, updated at now; with
	// windowEvery, when not nil, the window's length) and its ledger's
	// used, window and minute columns (not reserved).
	TenantUpdate(ctx context.Context, t agentfleet.Tenant, windowEvery *time.Duration, l Ledger, now time.Time) (agentfleet.Tenant, error)
	// JournalGet reads a journal entry; none is store.ErrNotFound.
	JournalGet(ctx context.Context, runID string, turn, index int) (agentfleet.JournalEntry, error)
	// JournalList reads a run's journal in order (turn, index), of turn
	// only when turn is positive.
	JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error)
}

// Ledger is a tenant's budget row as stored (rules.Ledger parses it).
type Ledger struct {
	Tenant          string
	Limit           int64
	Window          agentfleet.BudgetWindow
	Used, Reserved  int64
	WindowStart     time.Time
	WindowEnd       time.Time
	TokensPerMinute int64
	MinuteStart     time.Time
	MinuteUsed      int64
}
