package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
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

// TenantCreate creates a tenant and its "default" agent (version 1 is
// p.DefaultAgent), so every tenant has one.
func (s *Store) TenantCreate(ctx context.Context, p store.TenantCreateParams) (agentfleet.Tenant, error) {
	p, _, err := rules.TenantCreate(p)
	if err != nil {
		return agentfleet.Tenant{}, err
	}
	now := rules.Now()
	var t agentfleet.Tenant
	err = s.write(ctx, func(tx *wtx) error {
		row := tx.QueryRowContext(ctx, `INSERT INTO tenants (id, token_limit, budget_window, tokens_per_minute, max_concurrent_runs, max_queued_runs, weight, exhausted, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+tenantCols,
			p.ID, p.TokenLimit, string(p.Window), p.TokensPerMinute, p.MaxConcurrentRuns, p.MaxQueuedRuns, p.Weight, string(p.Exhausted), now.UnixMicro(), now.UnixMicro())
		var err error
		if t, err = scanTenant(row); err != nil {
			return err
		}
		return insertAgentVersion(ctx, tx, p.ID, agentfleet.DefaultAgent, 1, p.DefaultAgent, now.UnixMicro(), true)
	})
	if err != nil {
		return agentfleet.Tenant{}, fmt.Errorf("create tenant %s: %w", p.ID, err)
	}
	return t, nil
}

func (s *Store) TenantGetByID(ctx context.Context, id string) (agentfleet.Tenant, error) {
	t, err := scanTenant(s.rd.QueryRowContext(ctx, `SELECT `+tenantCols+` FROM tenants WHERE id = ?`, id))
	if err != nil {
		return agentfleet.Tenant{}, fmt.Errorf("get tenant %s: %w", id, mapErr(err))
	}
	return t, nil
}

// TenantUpdate changes the set fields. A changed window restarts: used
// starts again from zero and the next use opens the new window;
// reservations carry over. An unlimited tenant given a limit starts from
// what its usage ledger charged in the current window (see
// store.TenantUpdateParams); inside the write transaction no settlement
// can slip past that sum.
func (s *Store) TenantUpdate(ctx context.Context, p store.TenantUpdateParams) (agentfleet.Tenant, error) {
	p, w, err := rules.TenantUpdate(p)
	if err != nil {
		return agentfleet.Tenant{}, err
	}
	now := rules.Now()
	var t agentfleet.Tenant
	err = s.write(ctx, func(tx *wtx) error {
		cur, err := scanTenant(tx.QueryRowContext(ctx, `SELECT `+tenantCols+` FROM tenants WHERE id = ?`, p.ID))
		if err != nil {
			return err
		}
		l, err := loadLedger(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		restart := w != nil && w.Name != cur.Window
		wasUnlimited := l.Unlimited()
		if p.TokenLimit != nil {
			cur.TokenLimit = *p.TokenLimit
		}
		if p.Window != nil {
			cur.Window = *p.Window
		}
		if p.TokensPerMinute != nil {
			cur.TokensPerMinute = *p.TokensPerMinute
		}
		if p.MaxConcurrentRuns != nil {
			cur.MaxConcurrentRuns = *p.MaxConcurrentRuns
		}
		if p.MaxQueuedRuns != nil {
			cur.MaxQueuedRuns = *p.MaxQueuedRuns
		}
		if p.Weight != nil {
			cur.Weight = *p.Weight
		}
		if p.Exhausted != nil {
			cur.Exhausted = *p.Exhausted
		}
		switch {
		case restart:
			l.Used, l.WindowStart, l.WindowEnd = 0, time.Time{}, time.Time{}
		case wasUnlimited && !rules.Unlimited(cur.TokenLimit, cur.TokensPerMinute):
			if l, err = startLimited(ctx, tx, l, now); err != nil {
				return err
			}
		}
		t, err = scanTenant(tx.QueryRowContext(ctx, `UPDATE tenants SET token_limit = ?, budget_window = ?, tokens_per_minute = ?,
				max_concurrent_runs = ?, max_queued_runs = ?, weight = ?, exhausted = ?, updated_at = ?,
				used = ?, window_start = ?, window_end = ?, minute_start = ?, minute_used = ?
			WHERE id = ? RETURNING `+tenantCols,
			cur.TokenLimit, string(cur.Window), cur.TokensPerMinute, cur.MaxConcurrentRuns, cur.MaxQueuedRuns, cur.Weight, string(cur.Exhausted), now.UnixMicro(),
			l.Used, tsArg(l.WindowStart), tsArg(l.WindowEnd), tsArg(l.MinuteStart), l.MinuteUsed, p.ID))
		return err
	})
	if err != nil {
		return agentfleet.Tenant{}, fmt.Errorf("update tenant %s: %w", p.ID, err)
	}
	if p.MaxQueuedRuns != nil {
		s.queue.Forget(p.ID)
	}
	return t, nil
}

// startLimited is the ledger of an unlimited tenant given a limit at now
// (rules.Ledger.StartLimited), read from its usage ledger.
func startLimited(ctx context.Context, q queryer, l rules.Ledger, now time.Time) (rules.Ledger, error) {
	return l.StartLimited(now, nextUse(ctx, q, l.Tenant), func(from, to time.Time) (int64, error) {
		return ledgerSum(ctx, q, l.Tenant, from, to)
	})
}

func (s *Store) TenantList(ctx context.Context, p store.TenantListParams) (store.TenantListResult, error) {
	p, after, err := rules.TenantList(p)
	if err != nil {
		return store.TenantListResult{}, err
	}
	q, args := `SELECT `+tenantCols+` FROM tenants`, []any{}
	if after != nil {
		q += ` WHERE created_at < ? OR (created_at = ? AND id < ?)`
		args = append(args, after.CreatedAt, after.CreatedAt, after.ID)
	}
	rows, err := s.rd.QueryContext(ctx, q+` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, p.Limit+1)...)
	if err != nil {
		return store.TenantListResult{}, fmt.Errorf("list tenants: %w", mapErr(err))
	}
	ts, err := collect(rows, scanTenant)
	if err != nil {
		return store.TenantListResult{}, fmt.Errorf("list tenants: %w", mapErr(err))
	}
	return rules.TenantPage(ts, p), nil
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

func (s *Store) APIKeyCreate(ctx context.Context, p store.APIKeyCreateParams) (store.APIKey, error) {
	scopes, err := rules.APIKeyCreate(p)
	if err != nil {
		return store.APIKey{}, err
	}
	var r apiKeyRow
	err = s.write(ctx, func(tx *wtx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO api_keys (id, hash, tenant, name, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING `+apiKeyCols,
			rules.NewAPIKeyID(), rules.HashAPIKey(p.Key), p.Tenant, p.Name, scopes, rules.Now().UnixMicro()).Scan(r.dest()...)
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("create api key %q for tenant %s: %w", p.Name, p.Tenant, err)
	}
	return r.key(), nil
}

func (s *Store) APIKeyList(ctx context.Context, p store.APIKeyListParams) (store.APIKeyListResult, error) {
	p, after, err := rules.APIKeyList(p)
	if err != nil {
		return store.APIKeyListResult{}, err
	}
	rows, err := s.rd.QueryContext(ctx, `SELECT `+apiKeyCols+`, seq FROM api_keys WHERE tenant = ? AND (? = 0 OR seq < ?)
		ORDER BY seq DESC LIMIT ?`, p.Tenant, after, after, p.Limit+1)
	if err != nil {
		return store.APIKeyListResult{}, fmt.Errorf("list api keys of %s: %w", p.Tenant, mapErr(err))
	}
	var keys []store.APIKey
	var seqs []int64
	_, err = collect(rows, func(sc interface{ Scan(...any) error }) (struct{}, error) {
		var r apiKeyRow
		var seq int64
		if err := sc.Scan(append(r.dest(), &seq)...); err != nil {
			return struct{}{}, err
		}
		keys, seqs = append(keys, r.key()), append(seqs, seq)
		return struct{}{}, nil
	})
	if err != nil {
		return store.APIKeyListResult{}, fmt.Errorf("list api keys of %s: %w", p.Tenant, mapErr(err))
	}
	return rules.APIKeyPage(keys, seqs, p), nil
}

func (s *Store) APIKeyDelete(ctx context.Context, p store.APIKeyDeleteParams) error {
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM api_keys WHERE id = ? AND tenant = ?`, p.ID, p.Tenant)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("revoke api key %s of tenant %s: %w", p.ID, p.Tenant, err)
	}
	return nil
}

// TenantGetByAPIKey reads on the read pool; only a due last-use write
// (rules.APIKeyTouchDue) goes to the writer.
func (s *Store) TenantGetByAPIKey(ctx context.Context, p store.TenantGetByAPIKeyParams) (store.TenantGetByAPIKeyResult, error) {
	now := rules.NowOr(p.Now)
	hash := rules.HashAPIKey(p.Key)
	var r apiKeyRow
	t, err := scanTenantThen(s.rd.QueryRowContext(ctx, `SELECT `+prefixCols("t.", tenantCols)+`, `+prefixCols("k.", apiKeyCols)+`
		FROM api_keys k JOIN tenants t ON t.id = k.tenant WHERE k.hash = ?`, hash), r.dest()...)
	if err != nil {
		return store.TenantGetByAPIKeyResult{}, fmt.Errorf("get tenant by api key: %w", mapErr(err))
	}
	res := store.TenantGetByAPIKeyResult{Tenant: t, Key: r.key()}
	if rules.APIKeyTouchDue(res.Key.LastUsedAt, now) {
		// Best effort: a use that could not be written is no reason to
		// refuse the key; the next lookup writes it.
		err := s.write(ctx, func(tx *wtx) error {
			_, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ? WHERE hash = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
				now.UnixMicro(), hash, now.Add(-rules.APIKeyTouchEvery).UnixMicro())
			return err
		})
		if err == nil {
			res.Key.LastUsedAt = now
		}
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

func (s *Store) SkillUpsert(ctx context.Context, p store.SkillUpsertParams) (store.Skill, error) {
	if err := rules.SkillUpsert(p); err != nil {
		return store.Skill{}, err
	}
	now := rules.Now().UnixMicro()
	var k store.Skill
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		k, err = scanSkill(tx.QueryRowContext(ctx, `INSERT INTO skills (`+skillCols+`) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant, name) DO UPDATE SET description = excluded.description, code = excluded.code, updated_at = excluded.updated_at
			RETURNING `+skillCols,
			p.Tenant, p.Name, p.Description, p.Code, now, now))
		return err
	})
	if err != nil {
		return store.Skill{}, fmt.Errorf("upsert skill %s/%s: %w", p.Tenant, p.Name, err)
	}
	return k, nil
}

func (s *Store) SkillGetByName(ctx context.Context, tenant, name string) (store.Skill, error) {
	k, err := scanSkill(s.rd.QueryRowContext(ctx, `SELECT `+skillCols+` FROM skills WHERE tenant = ? AND name = ?`, tenant, name))
	if err != nil {
		return store.Skill{}, fmt.Errorf("get skill %s/%s: %w", tenant, name, mapErr(err))
	}
	return k, nil
}

func (s *Store) SkillList(ctx context.Context, tenant string) ([]store.Skill, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT `+skillCols+` FROM skills WHERE tenant = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list skills of %s: %w", tenant, err)
	}
	return collect(rows, scanSkill)
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
