package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const tenantCols = `id, token_limit, budget_window, tokens_per_minute, max_concurrent_runs, max_queued_runs, weight, exhausted, created_at, updated_at`

func scanTenant(sc interface{ Scan(...any) error }) (agentfleet.Tenant, error) {
	return scanTenantThen(sc)
}

// scanTenantThen scans tenantCols, then any extra trailing columns.
func scanTenantThen(sc interface{ Scan(...any) error }, extra ...any) (agentfleet.Tenant, error) {
	var t agentfleet.Tenant
	var created, updated int64
	err := sc.Scan(append([]any{&t.ID, &t.TokenLimit, &t.Window, &t.TokensPerMinute, &t.MaxConcurrentRuns, &t.MaxQueuedRuns,
		&t.Weight, &t.Exhausted, &created, &updated}, extra...)...)
	t.CreatedAt, t.UpdatedAt = fromMicros(created), fromMicros(updated)
	return t, err
}

func (e exec) TenantInsert(ctx context.Context, p driver.TenantInsertParams) (agentfleet.Tenant, error) {
	now := p.Now.UnixMicro()
	return row(ctx, e, `INSERT INTO tenants (id, token_limit, budget_window, tokens_per_minute, max_concurrent_runs, max_queued_runs, weight, exhausted, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+tenantCols, scanTenant,
		p.ID, p.TokenLimit, string(p.Window), p.TokensPerMinute, p.MaxConcurrentRuns, p.MaxQueuedRuns, p.Weight, string(p.Exhausted), now, now)
}

func (e exec) TenantGet(ctx context.Context, id string) (agentfleet.Tenant, error) {
	return one(ctx, e, `SELECT `+tenantCols+` FROM tenants WHERE id = ?`, scanTenant, id)
}

func (e exec) TenantList(ctx context.Context, limit int, after *driver.TenantPos) ([]agentfleet.Tenant, error) {
	q, args := `SELECT `+tenantCols+` FROM tenants`, []any{}
	if after != nil {
		at := after.CreatedAt.UnixMicro()
		q += ` WHERE created_at < ? OR (created_at = ? AND id < ?)`
		args = append(args, at, at, after.ID)
	}
	return all(ctx, e, q+` ORDER BY created_at DESC, id DESC LIMIT ?`, scanTenant, append(args, limit)...)
}

const apiKeyCols = `id, tenant, name, scopes, created_at, last_used_at`

// apiKeyRow is apiKeyCols as scanned; key turns it into the record.
type apiKeyRow struct {
	k       store.APIKey
	scopes  string
	created int64
	used    sql.NullInt64
}

func (r *apiKeyRow) dest() []any {
	return []any{&r.k.ID, &r.k.Tenant, &r.k.Name, &r.scopes, &r.created, &r.used}
}

func (r *apiKeyRow) key() store.APIKey {
	k := r.k
	k.CreatedAt, k.LastUsedAt, k.Scopes = fromMicros(r.created), tsVal(r.used), rules.DecodeAPIKeyScopes(r.scopes)
	return k
}

func (e exec) APIKeyInsert(ctx context.Context, p driver.APIKeyInsertParams) (store.APIKey, error) {
	var r apiKeyRow
	err := e.write(ctx, func(tx *wtx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO api_keys (id, hash, tenant, name, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING `+apiKeyCols,
			p.ID, p.Hash, p.Tenant, p.Name, p.Scopes, p.Now.UnixMicro()).Scan(r.dest()...)
	})
	return r.key(), err
}

func (e exec) APIKeyList(ctx context.Context, tenant string, afterSeq int64, limit int) ([]driver.APIKeyRow, error) {
	return all(ctx, e, `SELECT `+apiKeyCols+`, seq FROM api_keys WHERE tenant = ? AND (? = 0 OR seq < ?)
		ORDER BY seq DESC LIMIT ?`, func(sc interface{ Scan(...any) error }) (driver.APIKeyRow, error) {
		var r apiKeyRow
		var seq int64
		err := sc.Scan(append(r.dest(), &seq)...)
		return driver.APIKeyRow{Key: r.key(), Seq: seq}, err
	}, tenant, afterSeq, afterSeq, limit)
}

func (e exec) APIKeyDelete(ctx context.Context, tenant, id string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM api_keys WHERE id = ? AND tenant = ?`, id, tenant)
	return n > 0, err
}

// TenantGetByAPIKey reads on the read pool; only a due last-use write
// goes to the writer.
func (e exec) TenantGetByAPIKey(ctx context.Context, hash string, now, touchBefore time.Time) (store.TenantGetByAPIKeyResult, error) {
	var r apiKeyRow
	t, err := scanTenantThen(e.q.QueryRowContext(ctx, `SELECT `+prefixCols("t.", tenantCols)+`, `+prefixCols("k.", apiKeyCols)+`
		FROM api_keys k JOIN tenants t ON t.id = k.tenant WHERE k.hash = ?`, hash), r.dest()...)
	if err != nil {
		return store.TenantGetByAPIKeyResult{}, mapErr(err)
	}
	res := store.TenantGetByAPIKeyResult{Tenant: t, Key: r.key()}
	if !res.Key.LastUsedAt.After(touchBefore) {
		// Best effort: a use that could not be written is no reason to
		// refuse the key.
		_, _ = e.run(ctx, `UPDATE api_keys SET last_used_at = ? WHERE hash = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
			now.UnixMicro(), hash, touchBefore.UnixMicro())
	}
	return res, nil
}

const skillCols = `tenant, name, description, code, created_at, updated_at`

func scanSkill(sc interface{ Scan(...any) error }) (store.Skill, error) {
	var k store.Skill
	var created, updated int64
	err := sc.Scan(&k.Tenant, &k.Name, &k.Description, &k.Code, &created, &updated)
	k.CreatedAt, k.UpdatedAt = fromMicros(created), fromMicros(updated)
	return k, err
}

func (e exec) SkillUpsert(ctx context.Context, p store.SkillUpsertParams, now time.Time) (store.Skill, error) {
	at := now.UnixMicro()
	return row(ctx, e, `INSERT INTO skills (`+skillCols+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, name) DO UPDATE SET description = excluded.description, code = excluded.code, updated_at = excluded.updated_at
		RETURNING `+skillCols, scanSkill, p.Tenant, p.Name, p.Description, p.Code, at, at)
}

func (e exec) SkillGet(ctx context.Context, tenant, name string) (store.Skill, error) {
	return one(ctx, e, `SELECT `+skillCols+` FROM skills WHERE tenant = ? AND name = ?`, scanSkill, tenant, name)
}

func (e exec) SkillList(ctx context.Context, tenant string) ([]store.Skill, error) {
	return all(ctx, e, `SELECT `+skillCols+` FROM skills WHERE tenant = ? ORDER BY name`, scanSkill, tenant)
}

// collect scans every row and closes rows.
func collect[T any](rows *sql.Rows, scan func(interface{ Scan(...any) error }) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

// textArg stores JSON text as TEXT (not BLOB), NULL when absent.
func textArg(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// prefixCols qualifies a column list with a table alias.
func prefixCols(prefix, cols string) string {
	parts := strings.Split(cols, ", ")
	for i, c := range parts {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}
