package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (s *Store) TenantCallbackSecretSet(ctx context.Context, p store.TenantCallbackSecretSetParams) error {
	err := s.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tenant_callback_secrets (tenant, secret, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (tenant) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at`, p.Tenant, p.Secret, rules.Now().UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("set callback secret of %s: %w", p.Tenant, err)
	}
	return nil
}

func (s *Store) TenantCallbackSecretGet(ctx context.Context, tenant string) (string, error) {
	var secret string
	if err := s.rd.QueryRowContext(ctx, `SELECT secret FROM tenant_callback_secrets WHERE tenant = ?`, tenant).Scan(&secret); err != nil {
		return "", fmt.Errorf("get callback secret of %s: %w", tenant, mapErr(err))
	}
	return secret, nil
}

const callbackCols = `run_id, tenant, url, state, attempts, attempt_log, next_at, first_at, created_at, updated_at`

func scanCallback(sc interface{ Scan(...any) error }) (store.RunCallback, error) {
	var c store.RunCallback
	var log []byte
	var next, created, updated int64
	var first sql.NullInt64
	if err := sc.Scan(&c.RunID, &c.Tenant, &c.URL, &c.State, &c.Attempts, &log, &next, &first, &created, &updated); err != nil {
		return c, err
	}
	c.NextAt, c.FirstAt, c.CreatedAt, c.UpdatedAt = fromMicros(next), tsVal(first), fromMicros(created), fromMicros(updated)
	var err error
	c.Log, err = rules.DecodeCallbackLog(log)
	return c, err
}

func (s *Store) RunCallbackCreate(ctx context.Context, p store.RunCallbackCreateParams) (store.RunCallback, error) {
	if err := rules.RunCallbackCreate(p); err != nil {
		return store.RunCallback{}, err
	}
	now := rules.Now().UnixMicro()
	var c store.RunCallback
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		c, err = scanCallback(tx.QueryRowContext(ctx, `INSERT INTO run_callbacks (run_id, tenant, url, state, next_at, created_at, updated_at)
			VALUES (?, ?, ?, 'pending', ?, ?, ?) RETURNING `+callbackCols, p.RunID, p.Tenant, p.URL, now, now, now))
		return err
	})
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("create callback of run %s: %w", p.RunID, err)
	}
	return c, nil
}

func (s *Store) RunCallbackGetByID(ctx context.Context, runID string) (store.RunCallback, error) {
	c, err := scanCallback(s.rd.QueryRowContext(ctx, `SELECT `+callbackCols+` FROM run_callbacks WHERE run_id = ?`, runID))
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("get callback of run %s: %w", runID, mapErr(err))
	}
	return c, nil
}

func (s *Store) RunCallbackClaim(ctx context.Context, p store.RunCallbackClaimParams) ([]store.RunCallback, error) {
	p, err := rules.RunCallbackClaim(p)
	if err != nil {
		return nil, err
	}
	var cs []store.RunCallback
	err = s.write(ctx, func(tx *wtx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE run_callbacks SET next_at = ?, updated_at = ?
			WHERE run_id IN (
				SELECT c.run_id FROM run_callbacks c JOIN runs r ON r.id = c.run_id
				WHERE c.state = 'pending' AND c.next_at <= ? AND r.status IN (`+rules.SQLList(rules.Terminal)+`)
				ORDER BY c.next_at LIMIT ?)
			RETURNING `+callbackCols, p.Now.Add(p.Lease).UnixMicro(), p.Now.UnixMicro(), p.Now.UnixMicro(), p.Limit)
		if err != nil {
			return err
		}
		cs, err = collect(rows, scanCallback)
		return err
	})
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
	next := p.NextAt
	if next.IsZero() {
		next = p.Attempt.At
	}
	var c store.RunCallback
	err = s.write(ctx, func(tx *wtx) error {
		var raw []byte
		if err := tx.QueryRowContext(ctx, `SELECT attempt_log FROM run_callbacks WHERE run_id = ?`, p.RunID).Scan(&raw); err != nil {
			return err
		}
		log, err := rules.AppendCallbackLog(raw, p.Attempt)
		if err != nil {
			return err
		}
		c, err = scanCallback(tx.QueryRowContext(ctx, `UPDATE run_callbacks SET state = ?, attempts = attempts + 1, attempt_log = ?,
				next_at = ?, first_at = COALESCE(first_at, ?), updated_at = ?
			WHERE run_id = ? RETURNING `+callbackCols,
			string(p.State), string(log), next.UnixMicro(), p.Attempt.At.UnixMicro(), rules.Now().UnixMicro(), p.RunID))
		return err
	})
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("record callback attempt of run %s: %w", p.RunID, err)
	}
	return c, nil
}

func (s *Store) RunCallbackPrune(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM run_callbacks WHERE created_at < ? AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = run_callbacks.run_id)`, rules.Time(before).UnixMicro())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune run callbacks: %w", err)
	}
	return int(n), nil
}
