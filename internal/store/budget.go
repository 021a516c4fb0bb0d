package store

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

type BudgetReserveParams struct {
	Tenant string
	RunID  string
	Tokens int64
	Now    time.Time
	Lease  time.Duration
}

// BudgetSettleParams settles one model call. ReservationID names the
// reservation; when it is empty (an unlimited tenant's reservation),
// Tenant is required and the usage is charged to Tenant and RunID.
// Tenant and RunID are ignored when ReservationID is set (the
// reservation's own are used), so callers may always fill them in.
type BudgetSettleParams struct {
	ReservationID string
	Tenant        string
	RunID         string
	Usage         agentfleet.Usage
	Model         string
	Now           time.Time
}

type BudgetSettleResult struct {
	Charged int64
	Overage int64
}

// UsageListParams: GroupBy is "model" or "run".
type UsageListParams struct {
	Tenant  string
	RunID   string
	Since   time.Time
	GroupBy string
}

type UsageRow struct {
	Key   string // the model or the run id
	Usage agentfleet.Usage
	Calls int64
}
