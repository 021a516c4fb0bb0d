package wire

import (
	"encoding/json"
	"time"

	"github.com/agentfleet/agentfleet"
)

// BatchInput is one input of a batch, one run: a line of a JSONL body or
// an element of BatchCreateRequest.Inputs. CustomID is echoed in the
// input's result line.
type BatchInput struct {
	Message        string            `json:"message"`
	CustomID       string            `json:"custom_id,omitempty"`
	Context        json.RawMessage   `json:"context,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	SessionID      string            `json:"session_id,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
}

// BatchCreateRequest is the JSON body of POST /v1/batches. The body is
// read as a stream: agent, idempotency_key, max_turns and max_tokens
// apply to every input, so in a JSON body they come before inputs (the
// field order here); max_concurrent, metadata and callback_url may come
// anywhere. A JSONL body (application/x-ndjson) is the inputs alone, with
// the rest as query parameters.
type BatchCreateRequest struct {
	Agent          string            `json:"agent,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	MaxTurns       int               `json:"max_turns,omitempty"`
	MaxTokens      int64             `json:"max_tokens,omitempty"`
	MaxConcurrent  int               `json:"max_concurrent,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	CallbackURL    string            `json:"callback_url,omitempty"`
	Inputs         []BatchInput      `json:"inputs"`
}

// Batch is the view of a batch (POST /v1/batches, GET /v1/batches/{id}).
// Counts and Usage are its runs by status and their summed usage (GET of
// one batch only).
type Batch struct {
	ID            string                       `json:"id"`
	Tenant        string                       `json:"tenant"`
	Agent         string                       `json:"agent"`
	Status        string                       `json:"status"`
	Total         int                          `json:"total"`
	MaxConcurrent int                          `json:"max_concurrent,omitempty"`
	Counts        map[agentfleet.RunStatus]int `json:"counts,omitempty"`
	Usage         *agentfleet.Usage            `json:"usage,omitempty"`
	Metadata      map[string]string            `json:"metadata,omitempty"`
	RetryOf       string                       `json:"retry_of,omitempty"`
	CreatedAt     time.Time                    `json:"created_at"`
	FinishedAt    *time.Time                   `json:"finished_at,omitempty"`
}

// BatchList is a page of GET /v1/batches.
type BatchList struct {
	Batches    []Batch `json:"batches"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

// BatchResult is one line of GET /v1/batches/{id}/results: an input's
// run, in input order (Index from 0).
type BatchResult struct {
	Index    int                  `json:"index"`
	CustomID string               `json:"custom_id,omitempty"`
	RunID    string               `json:"run_id"`
	Status   agentfleet.RunStatus `json:"status"`
	Answer   json.RawMessage      `json:"answer,omitempty"`
	Error    string               `json:"error,omitempty"`
	Usage    agentfleet.Usage     `json:"usage"`
	Metadata map[string]string    `json:"metadata,omitempty"`
}

// BatchEvent is published on <p>.batches.<tenant>.<batch>.<type>
// ("progress" at most once a second while the batch runs, "done" once),
// and is the body of a batch's callback.
type BatchEvent struct {
	V      int                          `json:"v"`
	Type   string                       `json:"type"`
	Batch  string                       `json:"batch_id"`
	Tenant string                       `json:"tenant"`
	Status string                       `json:"status"`
	Total  int                          `json:"total"`
	Counts map[agentfleet.RunStatus]int `json:"counts"`
	Usage  agentfleet.Usage             `json:"usage"`
	TS     time.Time                    `json:"ts"`
}

// Batch event types.
const (
	BatchEventProgress = "progress"
	BatchEventDone     = "done"
)
