package wire

import (
	"encoding/json"

	"github.com/agentfleet/agentfleet"
)

// RunCreateRequest is the body of POST /v1/runs.
type RunCreateRequest struct {
	Agent          string            `json:"agent,omitempty"`
	Message        string            `json:"message"`
	SessionID      string            `json:"session_id,omitempty"`
	Context        json.RawMessage   `json:"context,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	MaxTurns       int               `json:"max_turns,omitempty"`
	MaxTokens      int64             `json:"max_tokens,omitempty"`
	// Timeout is a Go duration ("90s", "10m") after which the run fails.
	Timeout string `json:"timeout,omitempty"`
	// CallbackURL receives the run's final view when it ends
	// (callbacks.go).
	CallbackURL string `json:"callback_url,omitempty"`
}

// RunList is a page of GET /v1/runs.
type RunList struct {
	Runs       []agentfleet.Run `json:"runs"`
	NextCursor string           `json:"next_cursor,omitempty"`
}
