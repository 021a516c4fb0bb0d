package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// TenantExecutor stores tenants and their API keys (their skills are
// the SkillExecutor's). The
// ledger columns of a tenant (budget) are the BudgetExecutor's.
type TenantExecutor interface {
	// TenantInsert inserts a tenant (created and updated at Now); an id
	// taken is store.ErrConflict. Its default agent is the caller's to
	// insert (AgentVersionInsert).
	TenantInsert(ctx context.Context, p TenantInsertParams) (agentfleet.Tenant, error)
	TenantGet(ctx context.Context, id string) (agentfleet.Tenant, error)
	// TenantList reads up to Limit tenants, newest first (by creation,
	// then id descending, bytewise), after After when set.
	TenantList(ctx context.Context, limit int, after *TenantPos) ([]agentfleet.Tenant, error)

	// APIKeyInsert stores a key's record under its hash; a hash stored
	// before is store.ErrConflict, an unknown tenant store.ErrNotFound.
	APIKeyInsert(ctx context.Context, p APIKeyInsertParams) (store.APIKey, error)
	// APIKeyList reads up to limit of a tenant's keys, newest first,
	// those below position afterSeq when it is not zero.
	APIKeyList(ctx context.Context, tenant string, afterSeq int64, limit int) ([]APIKeyRow, error)
	// APIKeyDelete deletes a tenant's key and reports whether there was one.
	APIKeyDelete(ctx context.Context, tenant, id string) (bool, error)
	// TenantGetByAPIKey reads the key stored under hash and its tenant,
	// and writes the key's last use as now when it had none or had it at
	// or before touchBefore; the result holds the last use as read. A
	// last use that could not be written is no error (the next lookup
	// writes it).
	TenantGetByAPIKey(ctx context.Context, hash string, now, touchBefore time.Time) (store.TenantGetByAPIKeyResult, error)
}

// TenantInsertParams are TenantInsert's: the validated, defaulted create
// params and the window's length (zero for a calendar window).
type TenantInsertParams struct {
	store.TenantCreateParams
	WindowEvery time.Duration
	Now         time.Time
}

// TenantPos is a position in a tenant listing.
type TenantPos struct {
	CreatedAt time.Time
	ID        string
}

// APIKeyInsertParams are APIKeyInsert's. Scopes are encoded
// (rules.EncodeAPIKeyScopes).
type APIKeyInsertParams struct {
	ID, Hash, Tenant, Name, Scopes string
	Now                            time.Time
}

// APIKeyRow is a key and its listing position.
type APIKeyRow struct {
	Key store.APIKey
	Seq int64
}
