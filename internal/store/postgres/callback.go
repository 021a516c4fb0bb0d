package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (s *Store) TenantCallbackSecretSet(ctx context.Context, p store.TenantCallbackSecretSetParams) error {
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `INSERT INTO tenant_callback_secrets (tenant, secret, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (tenant) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at`, p.Tenant, p.Secret, rules.Now())
		return err
	})
	if err = mapErr(err); err != nil {
		return fmt.Errorf("set callback secret of %s: %w", p.Tenant, err)
	}
	return nil
}

func (s *Store) TenantCallbackSecretGet(ctx context.Context, tenant string) (string, error) {
	secret, err := queryOne(ctx, s, `SELECT secret FROM tenant_callback_secrets WHERE tenant = $1`, func(sc scanner) (string, error) {
		var v string
		return v, sc.Scan(&v)
	}, tenant)
	if err != nil {
		return "", fmt.Errorf("get callback secret of %s: %w", tenant, err)
	}
	return secret, nil
}

const callbackCols = `run_id, tenant, url, state, attempts, attempt_log, next_at, first_at, created_at, updated_at`

func scanCallback(sc scanner) (store.RunCallback, error) {
	var c store.RunCallback
	var log []byte
	var first *time.Time
	if err := sc.Scan(&c.RunID, &c.Tenant, &c.URL, &c.State, &c.Attempts, &log, &c.NextAt, &first, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return c, err
	}
	c.NextAt, c.FirstAt, c.CreatedAt, c.UpdatedAt = c.NextAt.UTC(), tsVal(first), c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	var err error
	c.Log, err = rules.DecodeCallbackLog(log)
	return c, err
}

func (s *Store) RunCallbackCreate(ctx context.Context, p store.RunCallbackCreateParams) (store.RunCallback, error) {
	if err := rules.RunCallbackCreate(p); err != nil {
		return store.RunCallback{}, err
	}
	c, err := queryOne(ctx, s, `INSERT INTO run_callbacks (run_id, tenant, url, state, next_at, created_at, updated_at)
		VALUES ($1, $2, $3, 'pending', $4, $4, $4) RETURNING `+callbackCols, scanCallback, p.RunID, p.Tenant, p.URL, rules.Now())
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("create callback of run %s: %w", p.RunID, err)
	}
	return c, nil
}

func (s *Store) RunCallbackGetByID(ctx context.Context, runID string) (store.RunCallback, error) {
	c, err := queryOne(ctx, s, `SELECT `+callbackCols+` FROM run_callbacks WHERE run_id = $1`, scanCallback, runID)
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("get callback of run %s: %w", runID, err)
	}
	return c, nil
}

// RunCallbackClaim skips rows another claim holds locked, so dispatchers
// claiming at once take different callbacks.
func (s *Store) RunCallbackClaim(ctx context.Context, p store.RunCallbackClaimParams) ([]store.RunCallback, error) {
	p, err := rules.RunCallbackClaim(p)
	if err != nil {
		return nil, err
	}
	cs, err := queryAll(ctx, s, `UPDATE run_callbacks SET next_at = $2, updated_at = $1
		WHERE run_id IN (
			SELECT c.run_id FROM run_callbacks c JOIN runs r ON r.id = c.run_id
			WHERE c.state = 'pending' AND c.next_at <= $1 AND r.status IN (`+rules.SQLList(rules.Terminal)+`)
			ORDER BY c.next_at LIMIT $3 FOR UPDATE OF c SKIP LOCKED)
		RETURNING `+callbackCols, scanCallback, p.Now, p.Now.Add(p.Lease), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim run callbacks: %w", err)
	}
	return cs, nil
}

func (s *Store) RunCallbackRecord(ctx context.Context, p store.RunCallbackRecordParams) (store.RunCallback, error) {
	p, err := rules.RunCallbackRecord(p)
	if err != nil {
		return store.RunCallback{}, err
	}
	var c store.RunCallback
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT attempt_log FROM run_callbacks WHERE run_id = $1 FOR UPDATE`, p.RunID).Scan(&raw); err != nil {
			return err
		}
		log, err := rules.AppendCallbackLog(raw, p.Attempt)
		if err != nil {
			return err
		}
		next := p.NextAt
		if next.IsZero() {
			next = p.Attempt.At
		}
		c, err = scanCallback(tx.QueryRow(ctx, `UPDATE run_callbacks SET state = $2, attempts = attempts + 1, attempt_log = $3,
				next_at = $4, first_at = COALESCE(first_at, $5), updated_at = $6
			WHERE run_id = $1 RETURNING `+callbackCols, p.RunID, string(p.State), log, next, p.Attempt.At, rules.Now()))
		return err
	})
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("record callback attempt of run %s: %w", p.RunID, err)
	}
	return c, nil
}

func (s *Store) RunCallbackPrune(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `DELETE FROM run_callbacks c WHERE c.created_at < $1 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = c.run_id)`, rules.Time(before))
		n = tag.RowsAffected()
		return err
	})
	if err = mapErr(err); err != nil {
		return 0, fmt.Errorf("prune run callbacks: %w", err)
	}
	return int(n), nil
}
