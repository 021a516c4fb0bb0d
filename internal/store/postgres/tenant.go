package postgres

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) TenantInsert(ctx context.Context, p driver.TenantInsertParams) (agentfleet.Tenant, error) {
	return one(ctx, e, `INSERT INTO tenants (id, token_limit, budget_window, window_us, tokens_per_minute, max_concurrent_runs, weight, exhausted, created_at, updated_at, max_queued_runs)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10) RETURNING `+rules.TenantCols, scans.TenantRow,
		p.ID, p.TokenLimit, string(p.Window), p.WindowEvery.Microseconds(), p.TokensPerMinute, p.MaxConcurrentRuns, p.Weight,
		string(p.Exhausted), p.Now, p.MaxQueuedRuns)
}

func (e exec) TenantGet(ctx context.Context, id string) (agentfleet.Tenant, error) {
	return one(ctx, e, `SELECT `+rules.TenantCols+` FROM tenants WHERE id = $1`, scans.TenantRow, id)
}

func (e exec) TenantList(ctx context.Context, limit int, after *driver.TenantPos) ([]agentfleet.Tenant, error) {
	q, args := `SELECT `+rules.TenantCols+` FROM tenants`, []any{limit}
	if after != nil {
		q += ` WHERE (created_at, id COLLATE "C") < ($2, $3)`
		args = append(args, after.CreatedAt, after.ID)
	}
	return all(ctx, e, q+` ORDER BY created_at DESC, id COLLATE "C" DESC LIMIT $1`, scans.TenantRow, args...)
}

func (e exec) APIKeyInsert(ctx context.Context, p driver.APIKeyInsertParams) (store.APIKey, error) {
	return one(ctx, e, `INSERT INTO api_keys (id, hash, tenant, name, scopes, created_at) VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING `+rules.APIKeyCols, scans.APIKey,
		p.ID, p.Hash, p.Tenant, p.Name, p.Scopes, p.Now)
}

func (e exec) APIKeyList(ctx context.Context, tenant string, afterSeq int64, limit int) ([]driver.APIKeyRow, error) {
	return all(ctx, e, rules.APIKeyListSQL, scans.APIKeyRow, tenant, afterSeq, limit)
}

func (e exec) APIKeyDelete(ctx context.Context, tenant, id string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM api_keys WHERE id = $1 AND tenant = $2`, id, tenant)
	return n > 0, err
}

// tenantByAPIKeySQL finds a key and its tenant and, in the same
// statement, writes the key's last use when it is older than $3 (an
// UPDATE whose WHERE fails writes nothing).
var tenantByAPIKeySQL = `WITH k AS (
		SELECT ` + rules.APIKeyCols + ` FROM api_keys WHERE hash = $1
	), u AS (
		UPDATE api_keys SET last_used_at = $2 WHERE hash = $1 AND (last_used_at IS NULL OR last_used_at <= $3)
	)
	SELECT ` + rules.PrefixCols("t.", rules.TenantCols) + `, ` + rules.PrefixCols("k.", rules.APIKeyCols) + ` FROM k JOIN tenants t ON t.id = k.tenant`

func (e exec) TenantGetByAPIKey(ctx context.Context, hash string, now, touchBefore time.Time) (store.TenantGetByAPIKeyResult, error) {
	return one(ctx, e, tenantByAPIKeySQL, scans.TenantByAPIKey, hash, now, touchBefore)
}
