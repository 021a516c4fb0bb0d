package wire

import (
	"encoding/json"
	"time"
)

// TriggerRequest is the body of POST /v1/triggers and PATCH
// /v1/triggers/{id}; on PATCH only the fields present change.
type TriggerRequest struct {
	Name         *string   `json:"name,omitempty"`
	Agent        *string   `json:"agent,omitempty"`
	Message      *string   `json:"message,omitempty"`
	SessionID    *string   `json:"session_id,omitempty"`
	Scheme       *string   `json:"scheme,omitempty"`
	Secret       *string   `json:"secret,omitempty"`
	Events       *[]string `json:"events,omitempty"`
	MaxTurns     *int      `json:"max_turns,omitempty"`
	MaxTokens    *int64    `json:"max_tokens,omitempty"`
	MaxBodyBytes *int64    `json:"max_body_bytes,omitempty"`
	Enabled      *bool     `json:"enabled,omitempty"`
	// CallbackURL receives the final view of each run the trigger
	// starts ("" on PATCH: none).
	CallbackURL *string `json:"callback_url,omitempty"`
	// RotateSecret (PATCH) replaces the secret with a generated one,
	// shown in the answer; the old one is accepted for SecretGrace.
	RotateSecret bool `json:"rotate_secret,omitempty"`
}

// TriggerView is a trigger as the API shows it. Secret is set only in
// the answer that generated it.
type TriggerView struct {
	ID           string    `json:"id"`
	Tenant       string    `json:"tenant"`
	Name         string    `json:"name"`
	Agent        string    `json:"agent"`
	Scheme       string    `json:"scheme"`
	Message      string    `json:"message"`
	SessionID    string    `json:"session_id,omitempty"`
	Events       []string  `json:"events"`
	MaxTurns     int       `json:"max_turns,omitempty"`
	MaxTokens    int64     `json:"max_tokens,omitempty"`
	MaxBodyBytes int64     `json:"max_body_bytes"`
	Enabled      bool      `json:"enabled"`
	CallbackURL  string    `json:"callback_url,omitempty"`
	URL          string    `json:"url"`
	Secret       string    `json:"secret,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// PreviousSecretExpiresAt is when a rotated-out secret stops being
	// accepted, while it still is.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
}

// TriggerList is a page of GET /v1/triggers.
type TriggerList struct {
	Triggers   []TriggerView `json:"triggers"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// DeliveryView is one line of a trigger's delivery log.
type DeliveryView struct {
	ID         string    `json:"id"`
	Delivery   string    `json:"delivery"`
	ReceivedAt time.Time `json:"received_at"`
	Event      string    `json:"event"`
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason,omitempty"`
	RunID      string    `json:"run_id,omitempty"`
}

// DeliveryList is a page of GET /v1/triggers/{id}/deliveries.
type DeliveryList struct {
	Deliveries []DeliveryView `json:"deliveries"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// TriggerTestRequest is the body of POST /v1/triggers/{id}/test.
type TriggerTestRequest struct {
	Event   string          `json:"event"`
	Payload json.RawMessage `json:"payload"`
}
