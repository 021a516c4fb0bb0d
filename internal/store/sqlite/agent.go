package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// agentCols reads an agent's version joined to its agents row (a) or not
// (v alone: a version kept past its agent's delete).
const agentCols = `v.tenant, v.name, v.version, v.spec, v.created_at`

func scanAgent(sc interface{ Scan(...any) error }, created *int64) (agentfleet.Agent, error) {
	var a agentfleet.Agent
	var spec []byte
	var updated int64
	if err := sc.Scan(&a.Tenant, &a.Name, &a.Version, &spec, &updated, created); err != nil {
		return a, err
	}
	a.CreatedAt, a.UpdatedAt = fromMicros(*created), fromMicros(updated)
	var err error
	a.AgentSpec, err = rules.DecodeAgentSpec(spec)
	return a, err
}

func scanCurrentAgent(sc interface{ Scan(...any) error }) (agentfleet.Agent, error) {
	var created int64
	return scanAgent(sc, &created)
}

const currentAgentSQL = `SELECT ` + agentCols + `, a.created_at FROM agents a
	JOIN agent_versions v ON v.tenant = a.tenant AND v.name = a.name AND v.version = a.version`

// insertAgentVersion stores version of an agent and makes it current.
func insertAgentVersion(ctx context.Context, tx *wtx, tenant, name string, version int, spec agentfleet.AgentSpec, now int64, created bool) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO agent_versions (tenant, name, version, spec, created_at) VALUES (?, ?, ?, ?, ?)`,
		tenant, name, version, string(rules.EncodeAgentSpec(spec)), now); err != nil {
		return err
	}
	if created {
		_, err := tx.ExecContext(ctx, `INSERT INTO agents (tenant, name, version, created_at) VALUES (?, ?, ?, ?)`, tenant, name, version, now)
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE agents SET version = ? WHERE tenant = ? AND name = ?`, version, tenant, name)
	return err
}

func (s *Store) AgentUpsert(ctx context.Context, p store.AgentUpsertParams) (agentfleet.Agent, error) {
	if err := rules.AgentUpsert(p); err != nil {
		return agentfleet.Agent{}, err
	}
	now := rules.Now().UnixMicro()
	var a agentfleet.Agent
	err := s.write(ctx, func(tx *wtx) error {
		cur, err := scanCurrentAgent(tx.QueryRowContext(ctx, currentAgentSQL+` WHERE a.tenant = ? AND a.name = ?`, p.Tenant, p.Name))
		exists := err == nil
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case reflect.DeepEqual(cur.AgentSpec, mustRoundTrip(p.Spec)):
			a = cur
			return nil
		}
		var last int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM agent_versions WHERE tenant = ? AND name = ?`,
			p.Tenant, p.Name).Scan(&last); err != nil {
			return err
		}
		if err := insertAgentVersion(ctx, tx, p.Tenant, p.Name, last+1, p.Spec, now, !exists); err != nil {
			return err
		}
		a, err = scanCurrentAgent(tx.QueryRowContext(ctx, currentAgentSQL+` WHERE a.tenant = ? AND a.name = ?`, p.Tenant, p.Name))
		return err
	})
	if err != nil {
		return agentfleet.Agent{}, fmt.Errorf("upsert agent %s/%s: %w", p.Tenant, p.Name, mapErr(err))
	}
	return a, nil
}

// mustRoundTrip is spec as a store read would return it, for comparing
// with a stored one.
func mustRoundTrip(spec agentfleet.AgentSpec) agentfleet.AgentSpec {
	out, err := rules.DecodeAgentSpec(rules.EncodeAgentSpec(spec))
	if err != nil {
		panic(err)
	}
	return out
}

func (s *Store) AgentGetByName(ctx context.Context, p store.AgentGetByNameParams) (agentfleet.Agent, error) {
	var row *sql.Row
	if p.Version == 0 {
		row = s.rd.QueryRowContext(ctx, currentAgentSQL+` WHERE a.tenant = ? AND a.name = ?`, p.Tenant, p.Name)
	} else {
		// The agent's creation is its first version's.
		row = s.rd.QueryRowContext(ctx, `SELECT `+agentCols+`, (SELECT MIN(created_at) FROM agent_versions f
			WHERE f.tenant = v.tenant AND f.name = v.name) FROM agent_versions v WHERE v.tenant = ? AND v.name = ? AND v.version = ?`,
			p.Tenant, p.Name, p.Version)
	}
	a, err := scanCurrentAgent(row)
	if err != nil {
		return agentfleet.Agent{}, fmt.Errorf("get agent %s/%s: %w", p.Tenant, p.Name, mapErr(err))
	}
	return a, nil
}

func (s *Store) AgentList(ctx context.Context, p store.AgentListParams) (store.AgentListResult, error) {
	p, after, err := rules.AgentList(p)
	if err != nil {
		return store.AgentListResult{}, err
	}
	q, args := currentAgentSQL+` WHERE a.tenant = ?`, []any{p.Tenant}
	if after != nil {
		q += ` AND (a.created_at < ? OR (a.created_at = ? AND a.name < ?))`
		args = append(args, after.CreatedAt, after.CreatedAt, after.Name)
	}
	rows, err := s.rd.QueryContext(ctx, q+` ORDER BY a.created_at DESC, a.name DESC LIMIT ?`, append(args, p.Limit+1)...)
	if err != nil {
		return store.AgentListResult{}, fmt.Errorf("list agents of %s: %w", p.Tenant, mapErr(err))
	}
	as, err := collect(rows, scanCurrentAgent)
	if err != nil {
		return store.AgentListResult{}, fmt.Errorf("list agents of %s: %w", p.Tenant, mapErr(err))
	}
	return rules.AgentPage(as, p), nil
}

func (s *Store) AgentDelete(ctx context.Context, p store.AgentDeleteParams) error {
	if err := rules.AgentDelete(p); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM agents WHERE tenant = ? AND name = ?`, p.Tenant, p.Name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete agent %s/%s: %w", p.Tenant, p.Name, mapErr(err))
	}
	return nil
}
