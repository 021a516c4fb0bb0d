package store

import (
	"encoding/json"
	"time"
)

// Trigger turns signed webhook deliveries into runs. Message and
// SessionID are templates; Secret and PrevSecret are kept as given (the
// API seals them), never read by the store.
type Trigger struct {
	ID              string
	Tenant          string
	Name            string
	Agent           string
	Scheme          string
	Message         string
	SessionID       string
	Events          []string
	Secret          string
	PrevSecret      string
	PrevSecretUntil time.Time
	MaxTurns        int
	MaxTokens       int64
	MaxBodyBytes    int64
	Enabled         bool
	CallbackURL     string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// TriggerCreateParams creates a trigger. ID is generated (UUIDv7) when
// empty.
type TriggerCreateParams struct {
	ID           string
	Tenant       string
	Name         string
	Agent        string
	Scheme       string
	Message      string
	SessionID    string
	Events       []string
	Secret       string
	MaxTurns     int
	MaxTokens    int64
	MaxBodyBytes int64
	Enabled      bool
	CallbackURL  string
}

// TriggerGetByIDParams reads a trigger; a non-empty Tenant scopes the
// lookup, so another tenant's trigger is ErrNotFound.
type TriggerGetByIDParams struct {
	ID     string
	Tenant string
}

type TriggerListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type TriggerListResult struct {
	Triggers   []Trigger
	NextCursor string // empty on the last page
}

// TriggerUpdateParams changes the set fields of a tenant's trigger.
type TriggerUpdateParams struct {
	ID           string
	Tenant       string
	Name         *string
	Agent        *string
	Message      *string
	SessionID    *string
	Events       *[]string
	MaxTurns     *int
	MaxTokens    *int64
	MaxBodyBytes *int64
	Enabled      *bool
	CallbackURL  *string
	// Secret replaces the secret; the replaced one becomes PrevSecret,
	// accepted until PrevSecretUntil.
	Secret          *string
	PrevSecretUntil time.Time
}

type TriggerDeleteParams struct {
	ID     string
	Tenant string
}

// DeliveryOutcome is what the intake did with a delivery.
type DeliveryOutcome string

const (
	DeliveryAccepted  DeliveryOutcome = "accepted"  // a run was created
	DeliveryDuplicate DeliveryOutcome = "duplicate" // a retry: the first run's id answered
	DeliveryIgnored   DeliveryOutcome = "ignored"   // a ping, or an event the trigger does not take
	DeliveryRejected  DeliveryOutcome = "rejected"  // bad signature, stale timestamp, or no room
	DeliveryFailed    DeliveryOutcome = "failed"    // signed, but no run could be made of it
)

// TriggerDelivery is one line of a trigger's delivery log.
type TriggerDelivery struct {
	ID         string
	TriggerID  string
	Delivery   string
	ReceivedAt time.Time
	Event      string
	Action     string
	Outcome    DeliveryOutcome
	Reason     string
	RunID      string
	// Payload is kept only for deliveries that may be redelivered but
	// made no run (rejected for want of room), and read back only by a
	// listing filtered by Delivery.
	Payload json.RawMessage
}

// TriggerDeliveryRecordParams appends log lines (their ID is generated;
// a zero ReceivedAt means now). Keep is how many lines each trigger
// keeps (zero: 1,000).
type TriggerDeliveryRecordParams struct {
	Lines []TriggerDelivery
	Keep  int
}

// TriggerDeliveryListParams pages a trigger's log, newest first; a
// non-empty Delivery lists only that delivery's lines, with payloads.
type TriggerDeliveryListParams struct {
	TriggerID string
	Delivery  string
	Limit     int // zero: 50
	Cursor    string
}

type TriggerDeliveryListResult struct {
	Deliveries []TriggerDelivery
	NextCursor string // empty on the last page
}

// TriggerDigestWindowDefault is how long a body digest's claim holds.
const TriggerDigestWindowDefault = 72 * time.Hour

// DigestClaim is one delivery's claim of its body's digest (SHA-256, 32
// bytes) in its trigger.
type DigestClaim struct {
	TriggerID string
	Digest    []byte
	Delivery  string
}

// TriggerDigestClaimParams claims digests at At (zero: now) for Window
// (zero: TriggerDigestWindowDefault).
type TriggerDigestClaimParams struct {
	Claims []DigestClaim
	Window time.Duration
	At     time.Time
}
