package wire

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// CallbackView is a run's callback as GET /v1/runs/{id} shows it.
type CallbackView struct {
	URL       string            `json:"url"`
	State     string            `json:"state"`
	WebhookID string            `json:"webhook_id"`
	Attempts  int               `json:"attempts"`
	NextAt    *time.Time        `json:"next_attempt_at,omitempty"`
	Log       []CallbackAttempt `json:"log"`
}

// RunView is GET /v1/runs/{id} as a client reads it: the run and, when
// it has one, its callback (viewRun).
type RunView struct {
	agentfleet.Run
	Callback *CallbackView `json:"callback,omitempty"`
}

// CallbackSecretView is the answer of POST /v1/tenants/{id}/callback-secret.
type CallbackSecretView struct {
	Tenant         string `json:"tenant"`
	CallbackSecret string `json:"callback_secret"`
}

// CallbackAttempt is one delivery attempt of a run's callback.
type CallbackAttempt struct {
	At time.Time `json:"at"`
	// Status is the receiver's HTTP status (0: no answer); Error says
	// why the attempt failed.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}
