package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// agentCols reads a version (v) and its agent's creation time.
const agentCols = `v.tenant, v.name, v.version, v.spec, v.created_at`

// currentAgentSQL reads agents' current versions.
const currentAgentSQL = `SELECT ` + agentCols + `, a.created_at FROM agents a
	JOIN agent_versions v ON v.tenant = a.tenant AND v.name = a.name AND v.version = a.version`

func scanAgent(sc scanner) (agentfleet.Agent, error) {
	var a agentfleet.Agent
	var spec []byte
	if err := sc.Scan(&a.Tenant, &a.Name, &a.Version, &spec, &a.UpdatedAt, &a.CreatedAt); err != nil {
		return a, err
	}
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	var err error
	a.AgentSpec, err = rules.DecodeAgentSpec(spec)
	return a, err
}

// AgentUpsert takes the agent's name lock, so that two replacements of
// one agent number their versions one after the other, compares with the
// current spec and stores a new version when it differs.
func (s *Store) AgentUpsert(ctx context.Context, p store.AgentUpsertParams) (agentfleet.Agent, error) {
	if err := rules.AgentUpsert(p); err != nil {
		return agentfleet.Agent{}, err
	}
	spec := rules.EncodeAgentSpec(p.Spec)
	want, err := rules.DecodeAgentSpec(spec)
	if err != nil {
		return agentfleet.Agent{}, err
	}
	var a agentfleet.Agent
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '/' || $2 || '/' || $3))`, lockAgent, p.Tenant, p.Name); err != nil {
			return err
		}
		cur, err := scanAgent(tx.QueryRow(ctx, currentAgentSQL+` WHERE a.tenant = $1 AND a.name = $2`, p.Tenant, p.Name))
		exists := err == nil
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case reflect.DeepEqual(cur.AgentSpec, want):
			a = cur
			return nil
		}
		now := rules.Now()
		upsert := `UPDATE agents SET version = (SELECT version FROM v) WHERE tenant = $1 AND name = $2`
		if !exists {
			upsert = `INSERT INTO agents (tenant, name, version, created_at) SELECT $1::text, $2::text, version, $4::timestamptz FROM v`
		}
		a, err = scanAgent(tx.QueryRow(ctx, `WITH v AS (
				INSERT INTO agent_versions (tenant, name, version, spec, created_at)
				SELECT $1::text, $2::text, COALESCE(MAX(version), 0) + 1, $3::jsonb, $4::timestamptz FROM agent_versions WHERE tenant = $1 AND name = $2
				RETURNING tenant, name, version, spec, created_at
			), a AS (`+upsert+`)
			SELECT `+agentCols+`, COALESCE((SELECT created_at FROM agents WHERE tenant = $1 AND name = $2), $4::timestamptz) FROM v`,
			p.Tenant, p.Name, spec, now))
		return err
	})
	if err != nil {
		return agentfleet.Agent{}, fmt.Errorf("upsert agent %s/%s: %w", p.Tenant, p.Name, err)
	}
	return a, nil
}

func (s *Store) AgentGetByName(ctx context.Context, p store.AgentGetByNameParams) (agentfleet.Agent, error) {
	var a agentfleet.Agent
	var err error
	if p.Version == 0 {
		a, err = queryOne(ctx, s, currentAgentSQL+` WHERE a.tenant = $1 AND a.name = $2`, scanAgent, p.Tenant, p.Name)
	} else {
		// The agent's creation is its first version's.
		a, err = queryOne(ctx, s, `SELECT `+agentCols+`, (SELECT MIN(created_at) FROM agent_versions f
			WHERE f.tenant = v.tenant AND f.name = v.name) FROM agent_versions v WHERE v.tenant = $1 AND v.name = $2 AND v.version = $3`,
			scanAgent, p.Tenant, p.Name, p.Version)
	}
	if err != nil {
		return agentfleet.Agent{}, fmt.Errorf("get agent %s/%s: %w", p.Tenant, p.Name, err)
	}
	return a, nil
}

func (s *Store) AgentList(ctx context.Context, p store.AgentListParams) (store.AgentListResult, error) {
	p, after, err := rules.AgentList(p)
	if err != nil {
		return store.AgentListResult{}, err
	}
	q, args := currentAgentSQL+` WHERE a.tenant = $2`, []any{p.Limit + 1, p.Tenant}
	if after != nil {
		q += ` AND (a.created_at, a.name COLLATE "C") < ($3, $4)`
		args = append(args, time.UnixMicro(after.CreatedAt).UTC(), after.Name)
	}
	as, err := queryAll(ctx, s, q+` ORDER BY a.created_at DESC, a.name COLLATE "C" DESC LIMIT $1`, scanAgent, args...)
	if err != nil {
		return store.AgentListResult{}, fmt.Errorf("list agents of %s: %w", p.Tenant, err)
	}
	return rules.AgentPage(as, p), nil
}

func (s *Store) AgentDelete(ctx context.Context, p store.AgentDeleteParams) error {
	if err := rules.AgentDelete(p); err != nil {
		return err
	}
	n, err := queryOne(ctx, s, `WITH d AS (DELETE FROM agents WHERE tenant = $1 AND name = $2 RETURNING 1) SELECT count(*) FROM d`,
		func(sc scanner) (int, error) {
			var n int
			err := sc.Scan(&n)
			return n, err
		}, p.Tenant, p.Name)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete agent %s/%s: %w", p.Tenant, p.Name, err)
	}
	return nil
}
