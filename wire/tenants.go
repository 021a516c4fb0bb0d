package wire

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// BudgetSpec is a tenant's token limit and its window ("day", "month" or
// a duration like "24h").
type BudgetSpec struct {
	Tokens *int64  `json:"tokens,omitempty"`
	Window *string `json:"window,omitempty"`
}

// TenantRequest is the body of POST and PUT /v1/tenants; on PUT only the
// fields present change.
type TenantRequest struct {
	ID                string      `json:"id,omitempty"`
	Budget            *BudgetSpec `json:"budget,omitempty"`
	TokensPerMinute   *int64      `json:"tokens_per_minute,omitempty"`
	MaxConcurrentRuns *int        `json:"max_concurrent_runs,omitempty"`
	// MaxQueuedRuns caps the tenant's runs not yet finished (0 or
	// absent: the fleet's default); beyond it submissions are 429.
	MaxQueuedRuns *int    `json:"max_queued_runs,omitempty"`
	Weight        *int    `json:"weight,omitempty"`
	Exhausted     *string `json:"exhausted,omitempty"`
}

// TenantView is a tenant as the API shows it.
type TenantView struct {
	ID                string                     `json:"id"`
	Budget            agentfleet.BudgetState     `json:"budget"`
	TokensPerMinute   int64                      `json:"tokens_per_minute"`
	MaxConcurrentRuns int                        `json:"max_concurrent_runs"`
	MaxQueuedRuns     int                        `json:"max_queued_runs"`
	Weight            int                        `json:"weight"`
	Exhausted         agentfleet.ExhaustedPolicy `json:"exhausted"`
	WaitingRuns       int                        `json:"waiting_runs"`
	ActiveRuns        int                        `json:"active_runs"`
	CreatedAt         time.Time                  `json:"created_at"`
	UpdatedAt         time.Time                  `json:"updated_at"`
	APIKey            string                     `json:"api_key,omitempty"`
	// CallbackSecret signs the tenant's run callbacks (whsec_); shown
	// once, when made (callbacks.go).
	CallbackSecret string `json:"callback_secret,omitempty"`
}

// UsageReport is GET /v1/tenants/{id}/usage: settled usage grouped by
// model or run.
type UsageReport struct {
	GroupBy string     `json:"group_by"`
	Rows    []UsageRow `json:"rows"`
}

// UsageRow is one group of a UsageReport.
type UsageRow struct {
	Key   string           `json:"key"`
	Usage agentfleet.Usage `json:"usage"`
	Calls int64            `json:"calls"`
}

// APIKeyRequest is the body of POST /v1/tenants/{id}/keys.
type APIKeyRequest struct {
	Name string `json:"name"`
	// Scopes are what the key may do: "admin" (keys, callback secret,
	// secrets, agents, triggers), "submit" (runs, batches, approvals),
	// "read". None: all three.
	Scopes []string `json:"scopes,omitempty"`
}

// APIKeyView is an API key as the API shows it. APIKey, the key itself,
// is only in the answer to its creation.
type APIKeyView struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"` // null: never used
	APIKey     string     `json:"api_key,omitempty"`
}

// APIKeyList is a page of GET /v1/tenants/{id}/keys, newest first.
type APIKeyList struct {
	Keys       []APIKeyView `json:"keys"`
	NextCursor string       `json:"next_cursor,omitempty"`
}
