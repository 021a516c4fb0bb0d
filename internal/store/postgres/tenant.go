package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const tenantCols = `id, token_limit, budget_window, tokens_per_minute, max_concurrent_runs, max_queued_runs, weight, exhausted, created_at, updated_at`

func scanTenant(sc scanner) (agentfleet.Tenant, error) { return scanTenantThen(sc) }

// scanTenantThen scans tenantCols, then any extra trailing columns.
func scanTenantThen(sc scanner, extra ...any) (agentfleet.Tenant, error) {
	var t agentfleet.Tenant
	err := sc.Scan(append([]any{&t.ID, &t.TokenLimit, &t.Window, &t.TokensPerMinute, &t.MaxConcurrentRuns, &t.MaxQueuedRuns,
		&t.Weight, &t.Exhausted, &t.CreatedAt, &t.UpdatedAt}, extra...)...)
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	return t, err
}

// prefixCols qualifies a column list with a table alias.
func prefixCols(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

func (e exec) TenantInsert(ctx context.Context, p driver.TenantInsertParams) (agentfleet.Tenant, error) {
	return one(ctx, e, `INSERT INTO tenants (id, token_limit, budget_window, window_us, tokens_per_minute, max_concurrent_runs, weight, exhausted, created_at, updated_at, max_queued_runs)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10) RETURNING `+tenantCols, scanTenant,
		p.ID, p.TokenLimit, string(p.Window), p.WindowEvery.Microseconds(), p.TokensPerMinute, p.MaxConcurrentRuns, p.Weight,
		string(p.Exhausted), p.Now, p.MaxQueuedRuns)
}

func (e exec) TenantGet(ctx context.Context, id string) (agentfleet.Tenant, error) {
	return one(ctx, e, `SELECT `+tenantCols+` FROM tenants WHERE id = $1`, scanTenant, id)
}

func (e exec) TenantList(ctx context.Context, limit int, after *driver.TenantPos) ([]agentfleet.Tenant, error) {
	q, args := `SELECT `+tenantCols+` FROM tenants`, []any{limit}
	if after != nil {
		q += ` WHERE (created_at, id COLLATE "C") < ($2, $3)`
		args = append(args, after.CreatedAt, after.ID)
	}
	return all(ctx, e, q+` ORDER BY created_at DESC, id COLLATE "C" DESC LIMIT $1`, scanTenant, args...)
}

const apiKeyCols = `id, tenant, name, scopes, created_at, last_used_at`

// scanAPIKey scans apiKeyCols, then any extra trailing columns.
func scanAPIKey(sc scanner, extra ...any) (store.APIKey, error) {
	var k store.APIKey
	var used *time.Time
	var scopes string
	err := sc.Scan(append(apiKeyDest(&k, &scopes, &used), extra...)...)
	k.CreatedAt, k.LastUsedAt, k.Scopes = k.CreatedAt.UTC(), tsVal(used), rules.DecodeAPIKeyScopes(scopes)
	return k, err
}

// apiKeyDest is where apiKeyCols scan to; scopes are the stored scopes,
// used is the last use.
func apiKeyDest(k *store.APIKey, scopes *string, used **time.Time) []any {
	return []any{&k.ID, &k.Tenant, &k.Name, scopes, &k.CreatedAt, used}
}

func (e exec) APIKeyInsert(ctx context.Context, p driver.APIKeyInsertParams) (store.APIKey, error) {
	return one(ctx, e, `INSERT INTO api_keys (id, hash, tenant, name, scopes, created_at) VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING `+apiKeyCols, func(sc scanner) (store.APIKey, error) { return scanAPIKey(sc) },
		p.ID, p.Hash, p.Tenant, p.Name, p.Scopes, p.Now)
}

func (e exec) APIKeyList(ctx context.Context, tenant string, afterSeq int64, limit int) ([]driver.APIKeyRow, error) {
	return all(ctx, e, `SELECT `+apiKeyCols+`, seq FROM api_keys WHERE tenant = $1 AND ($2 = 0 OR seq < $2)
		ORDER BY seq DESC LIMIT $3`, func(sc scanner) (driver.APIKeyRow, error) {
		var r driver.APIKeyRow
		var err error
		r.Key, err = scanAPIKey(sc, &r.Seq)
		return r, err
	}, tenant, afterSeq, limit)
}

func (e exec) APIKeyDelete(ctx context.Context, tenant, id string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM api_keys WHERE id = $1 AND tenant = $2`, id, tenant)
	return n > 0, err
}

// tenantByAPIKeySQL finds a key and its tenant and, in the same
// statement, writes the key's last use when it is older than $3 (an
// UPDATE whose WHERE fails writes nothing).
var tenantByAPIKeySQL = `WITH k AS (
		SELECT ` + apiKeyCols + ` FROM api_keys WHERE hash = $1
	), u AS (
		UPDATE api_keys SET last_used_at = $2 WHERE hash = $1 AND (last_used_at IS NULL OR last_used_at <= $3)
	)
	SELECT ` + prefixCols("t.", tenantCols) + `, ` + prefixCols("k.", apiKeyCols) + ` FROM k JOIN tenants t ON t.id = k.tenant`

func (e exec) TenantGetByAPIKey(ctx context.Context, hash string, now, touchBefore time.Time) (store.TenantGetByAPIKeyResult, error) {
	return one(ctx, e, tenantByAPIKeySQL, func(sc scanner) (store.TenantGetByAPIKeyResult, error) {
		var r store.TenantGetByAPIKeyResult
		var used *time.Time
		var scopes string
		var err error
		r.Tenant, err = scanTenantThen(sc, apiKeyDest(&r.Key, &scopes, &used)...)
		r.Key.CreatedAt, r.Key.LastUsedAt, r.Key.Scopes = r.Key.CreatedAt.UTC(), tsVal(used), rules.DecodeAPIKeyScopes(scopes)
		return r, err
	}, hash, now, touchBefore)
}

const skillCols = `tenant, name, description, code, created_at, updated_at`

func scanSkill(sc scanner) (store.Skill, error) {
	var k store.Skill
	err := sc.Scan(&k.Tenant, &k.Name, &k.Description, &k.Code, &k.CreatedAt, &k.UpdatedAt)
	k.CreatedAt, k.UpdatedAt = k.CreatedAt.UTC(), k.UpdatedAt.UTC()
	return k, err
}

func (e exec) SkillUpsert(ctx context.Context, p store.SkillUpsertParams, now time.Time) (store.Skill, error) {
	return one(ctx, e, `INSERT INTO skills (`+skillCols+`) VALUES ($1, $2, $3, $4, $5, $5)
		ON CONFLICT (tenant, name) DO UPDATE SET description = excluded.description, code = excluded.code, updated_at = excluded.updated_at
		RETURNING `+skillCols, scanSkill, p.Tenant, p.Name, p.Description, p.Code, now)
}

func (e exec) SkillGet(ctx context.Context, tenant, name string) (store.Skill, error) {
	return one(ctx, e, `SELECT `+skillCols+` FROM skills WHERE tenant = $1 AND name = $2`, scanSkill, tenant, name)
}

func (e exec) SkillList(ctx context.Context, tenant string) ([]store.Skill, error) {
	return all(ctx, e, `SELECT `+skillCols+` FROM skills WHERE tenant = $1 ORDER BY name COLLATE "C"`, scanSkill, tenant)
}
