package agentfleet

import (
	"fmt"
	"time"
)

// Reservation is a hold on a tenant's tokens for one model call, made
// before the call and settled to the real usage after it. A reservation
// that is neither settled nor released expires after its lease, so a dead
// worker cannot hold budget for ever.
type Reservation struct {
	ID         string    `json:"id"`
	Tenant     string    `json:"tenant"`
	RunID      string    `json:"run_id"`
	Tokens     int64     `json:"tokens"`
	LeaseUntil time.Time `json:"lease_until"`
}

// BudgetExhaustedError says a reservation did not fit the tenant's budget:
// what it needed and what was left. Callers branch on it with errors.As.
type BudgetExhaustedError struct {
	Tenant    string
	Need      int64
	Limit     int64
	Used      int64
	Reserved  int64
	WindowEnd time.Time
	// PerMinute is set when the tokens-per-minute limit refused it,
	// not the window limit.
	PerMinute bool
}

// Left is what the window still has to give (never negative).
func (e *BudgetExhaustedError) Left() int64 {
	if left := e.Limit - e.Used - e.Reserved; left > 0 {
		return left
	}
	return 0
}

func (e *BudgetExhaustedError) Error() string {
	if e.PerMinute {
		return fmt.Sprintf("tenant %s: tokens-per-minute limit %d reached (need %d)", e.Tenant, e.Limit, e.Need)
	}
	return fmt.Sprintf("tenant %s: token budget exhausted: need %d, %d left of %d (used %d, reserved %d) until %s",
		e.Tenant, e.Need, e.Left(), e.Limit, e.Used, e.Reserved, e.WindowEnd.UTC().Format(time.RFC3339))
}

// BudgetState is a tenant's budget as of now.
type BudgetState struct {
	Tenant string `json:"-"`
	// Limit is the token limit per window; zero means unlimited.
	Limit       int64        `json:"tokens"`
	Window      BudgetWindow `json:"window"`
	Used        int64        `json:"used"`
	Reserved    int64        `json:"reserved"`
	WindowStart time.Time    `json:"window_start,omitzero"`
	WindowEnd   time.Time    `json:"window_end,omitzero"`
	// TokensPerMinute is the per-minute limit (zero: none) and
	// MinuteUsed what the current minute has taken.
	TokensPerMinute int64 `json:"tokens_per_minute,omitempty"`
	MinuteUsed      int64 `json:"minute_used,omitempty"`
}
