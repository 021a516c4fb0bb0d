package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
)

// Reserver holds the coarse primitive under the rules' BudgetReserve.
type Reserver interface {
	// LedgerReserve holds r.Tokens of tenant r.Tenant at now, and records
	// reservation r (its id, run and lease), only when the tenant is
	// limited and its window and per-minute limits allow (rules.Ledger's
	// Reserve, window roll included), atomically: on PostgreSQL the one
	// statement that takes the row lock, on SQLite one write of the group
	// commit. It returns whether it reserved and the ledger as it read it
	// (before the reserve); an unlimited tenant's row is not written. A
	// missing tenant is store.ErrNotFound.
	LedgerReserve(ctx context.Context, r agentfleet.Reservation, now time.Time) (reserved bool, l Ledger, err error)
}
