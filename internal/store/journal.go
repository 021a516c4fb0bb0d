package store

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// ModelReply is the recorded model output of one turn.
type ModelReply struct {
	RunID         string
	Turn          int
	Content       string
	Model         string
	Usage         agentfleet.Usage
	UsageReported bool
	CreatedAt     time.Time
}

type ModelReplyRecordParams struct {
	ModelReply
	// Charge, when set, settles the model call's reservation in the
	// same transaction as the reply insert (see ModelReplyRecord).
	Charge *BudgetSettleParams
}

type ModelReplyRecordResult struct {
	Reply   ModelReply
	Existed bool
	// Settled is the charge's outcome, when Charge was set and applied
	// (err nil, Existed false, ChargeErr nil); zero otherwise.
	Settled BudgetSettleResult
	// ChargeErr says why a Charge was not applied although this call
	// recorded the reply: ErrNotFound when the reservation is gone
	// (settled, released or expired) or, for an empty ReservationID,
	// the tenant does not exist. The reply is recorded either way; the
	// caller charges by other means. Nil when charged, when Charge was
	// nil, and when Existed.
	ChargeErr error
}

type JournalRecordParams struct {
	agentfleet.JournalEntry
	// Charge, when set, settles the ai() call's reservation in the same
	// transaction as the insert (see JournalRecord).
	Charge *BudgetSettleParams
}

// JournalRecordResult is ModelReplyRecordResult's counterpart: the charge
// happened exactly when err == nil, !Existed and ChargeErr == nil.
type JournalRecordResult struct {
	Entry     agentfleet.JournalEntry
	Existed   bool
	Settled   BudgetSettleResult
	ChargeErr error
}

type JournalListByRunParams struct {
	RunID string
	// Turn, when positive, lists that turn's entries only.
	Turn int
}
