package store

import (
	"time"

	"github.com/agentfleet/agentfleet/wire"
)

type TenantCallbackSecretSetParams struct {
	Tenant string
	Secret string // sealed
}

// CallbackState is where a run's callback stands.
type CallbackState string

const (
	CallbackPending   CallbackState = "pending"   // not sent yet, or to be tried again
	CallbackDelivered CallbackState = "delivered" // the receiver answered 2xx
	CallbackFailed    CallbackState = "failed"    // given up on
)

// CallbackLogMax is how many attempts a callback's log keeps.
const CallbackLogMax = 20

// CallbackAttempt is one POST of a run's callback.
type CallbackAttempt = wire.CallbackAttempt

// RunCallback is a run's completion callback: the outbox row the
// dispatcher drains.
type RunCallback struct {
	RunID     string
	Tenant    string
	URL       string
	State     CallbackState
	Attempts  int
	Log       []CallbackAttempt // the last attempts, oldest first
	NextAt    time.Time
	FirstAt   time.Time // the first attempt; zero before it
	CreatedAt time.Time
	UpdatedAt time.Time
}

type RunCallbackCreateParams struct {
	RunID  string
	Tenant string
	URL    string
}

type RunCallbackClaimParams struct {
	Now   time.Time
	Limit int
	Lease time.Duration
}

type RunCallbackRecordParams struct {
	RunID   string
	Attempt CallbackAttempt
	State   CallbackState
	// NextAt is the next attempt, for a pending callback.
	NextAt time.Time
}
