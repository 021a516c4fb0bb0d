package store

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// TenantCreateParams creates a tenant. Zero TokenLimit means unlimited;
// Window is agentfleet.WindowDay, WindowMonth or a Go duration ("24h").
type TenantCreateParams struct {
	ID                string
	TokenLimit        int64
	Window            agentfleet.BudgetWindow
	TokensPerMinute   int64
	MaxConcurrentRuns int
	// MaxQueuedRuns caps runs not finished; zero means
	// MaxQueuedRunsDefault.
	MaxQueuedRuns int
	Weight        int // zero means 1
	Exhausted     agentfleet.ExhaustedPolicy
	// DefaultAgent is the spec of the tenant's "default" agent (its
	// version 1).
	DefaultAgent agentfleet.AgentSpec
}

// TenantUpdateParams changes the set fields of a tenant. Changing the
// window restarts it (used 0, reservations kept; the next use opens
// the new window).
//
// Giving an unlimited tenant a limit (a token limit or a per-minute
// one) sets, in the same transaction, its used to what the usage
// ledger has charged in the current window (opening the window a use
// now would open when none is), and its minute's count to what the
// ledger has charged in the current minute, so the ceiling holds from
// that moment. Settlements of reservations taken while it was
// unlimited are charged against the new limit (capped). A window
// change in the same update wins: the window restarts from zero.
type TenantUpdateParams struct {
	ID                string
	TokenLimit        *int64
	Window            *agentfleet.BudgetWindow
	TokensPerMinute   *int64
	MaxConcurrentRuns *int
	MaxQueuedRuns     *int // zero means MaxQueuedRunsDefault
	Weight            *int
	Exhausted         *agentfleet.ExhaustedPolicy
}

type TenantListParams struct {
	Limit  int // zero: 50
	Cursor string
}

type TenantListResult struct {
	Tenants    []agentfleet.Tenant
	NextCursor string // empty on the last page
}

// APIKey is a tenant's API key as the store shows it: never the key or
// its hash.
type APIKey struct {
	// ID names the key in URLs ("key_" and 32 hex digits); it is not
	// secret.
	ID     string
	Tenant string
	Name   string
	// Scopes are what the key may do, in APIKeyScopes' order.
	Scopes     []string
	CreatedAt  time.Time
	LastUsedAt time.Time // zero: never used
}

// The scopes of an API key (docs/api.md, "API keys"): admin manages the tenant's
// keys, callback secret, secrets, agents and triggers; submit starts
// and stops work (runs, batches, approvals); read reads.
const (
	ScopeAdmin  = "admin"
	ScopeSubmit = "submit"
	ScopeRead   = "read"
)

// APIKeyScopes are every scope, in the order a key lists them; a key
// made without scopes has them all.
var APIKeyScopes = []string{ScopeAdmin, ScopeSubmit, ScopeRead}

// APIKeyCreateParams stores Key (hashed) for Tenant. Name says what it is
// for (at most 100 bytes); Scopes what it may do (nil: every scope).
type APIKeyCreateParams struct {
	Tenant string
	Key    string
	Name   string
	Scopes []string
}

// APIKeyListParams pages a tenant's keys, newest first. Cursor is the
// NextCursor of the previous page.
type APIKeyListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type APIKeyListResult struct {
	Keys       []APIKey
	NextCursor string // empty on the last page
}

type APIKeyDeleteParams struct {
	Tenant string
	ID     string
}

// TenantGetByAPIKeyParams looks up Key; Now is when it is used (zero:
// the store's clock).
type TenantGetByAPIKeyParams struct {
	Key string
	Now time.Time
}

type TenantGetByAPIKeyResult struct {
	Tenant agentfleet.Tenant
	Key    APIKey
}
