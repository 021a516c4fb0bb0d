package sqlite

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) TenantInsert(ctx context.Context, p driver.TenantInsertParams) (agentfleet.Tenant, error) {
	now := p.Now.UnixMicro()
	return row(ctx, e, `INSERT INTO tenants (id, token_limit, budget_window, tokens_per_minute, max_concurrent_runs, max_queued_runs, weight, exhausted, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+rules.TenantCols, scans.TenantRow,
		p.ID, p.TokenLimit, string(p.Window), p.TokensPerMinute, p.MaxConcurrentRuns, p.MaxQueuedRuns, p.Weight, string(p.Exhausted), now, now)
}

func (e exec) TenantGet(ctx context.Context, id string) (agentfleet.Tenant, error) {
	return one(ctx, e, `SELECT `+rules.TenantCols+` FROM tenants WHERE id = ?`, scans.TenantRow, id)
}

func (e exec) TenantList(ctx context.Context, limit int, after *driver.TenantPos) ([]agentfleet.Tenant, error) {
	q, args := `SELECT `+rules.TenantCols+` FROM tenants`, []any{}
	if after != nil {
		at := after.CreatedAt.UnixMicro()
		q += ` WHERE created_at < ? OR (created_at = ? AND id < ?)`
		args = append(args, at, at, after.ID)
	}
	return all(ctx, e, q+` ORDER BY created_at DESC, id DESC LIMIT ?`, scans.TenantRow, append(args, limit)...)
}

func (e exec) APIKeyInsert(ctx context.Context, p driver.APIKeyInsertParams) (store.APIKey, error) {
	return row(ctx, e, `INSERT INTO api_keys (id, hash, tenant, name, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING `+rules.APIKeyCols,
		scans.APIKey, p.ID, p.Hash, p.Tenant, p.Name, p.Scopes, p.Now.UnixMicro())
}

func (e exec) APIKeyList(ctx context.Context, tenant string, afterSeq int64, limit int) ([]driver.APIKeyRow, error) {
	return all(ctx, e, rules.APIKeyListSQL, scans.APIKeyRow, tenant, afterSeq, limit)
}

func (e exec) APIKeyDelete(ctx context.Context, tenant, id string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM api_keys WHERE id = ? AND tenant = ?`, id, tenant)
	return n > 0, err
}

// TenantGetByAPIKey reads on the read pool; only a due last-use write
// goes to the writer.
func (e exec) TenantGetByAPIKey(ctx context.Context, hash string, now, touchBefore time.Time) (store.TenantGetByAPIKeyResult, error) {
	res, err := one(ctx, e, `SELECT `+rules.PrefixCols("t.", rules.TenantCols)+`, `+rules.PrefixCols("k.", rules.APIKeyCols)+`
		FROM api_keys k JOIN tenants t ON t.id = k.tenant WHERE k.hash = ?`, scans.TenantByAPIKey, hash)
	if err != nil {
		return store.TenantGetByAPIKeyResult{}, err
	}
	if !res.Key.LastUsedAt.After(touchBefore) {
		// Best effort: a use that could not be written is no reason to
		// refuse the key.
		_, _ = e.run(ctx, `UPDATE api_keys SET last_used_at = ? WHERE hash = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
			now.UnixMicro(), hash, touchBefore.UnixMicro())
	}
	return res, nil
}

// textArg stores JSON text as TEXT (not BLOB), NULL when absent.
func textArg(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
