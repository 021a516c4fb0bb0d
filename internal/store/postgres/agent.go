package postgres

import (
	"context"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) AgentLock(ctx context.Context, tenant, name string) error {
	_, err := e.run(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '/' || $2 || '/' || $3))`, lockAgent, tenant, name)
	return err
}

func (e exec) AgentGet(ctx context.Context, tenant, name string, version int) (agentfleet.Agent, error) {
	if version == 0 {
		return one(ctx, e, rules.CurrentAgentSQL+` WHERE a.tenant = $1 AND a.name = $2`, scans.Agent, tenant, name)
	}
	return one(ctx, e, rules.AgentVersionSQL, scans.Agent, tenant, name, version)
}

// AgentVersionInsert numbers, inserts and makes current the version in
// one statement.
func (e exec) AgentVersionInsert(ctx context.Context, p driver.AgentVersionInsertParams) (agentfleet.Agent, error) {
	upsert := `UPDATE agents SET version = (SELECT version FROM v) WHERE tenant = $1 AND name = $2`
	if !p.Exists {
		upsert = `INSERT INTO agents (tenant, name, version, created_at) SELECT $1::text, $2::text, version, $4::timestamptz FROM v`
	}
	return one(ctx, e, `WITH v AS (
			INSERT INTO agent_versions (tenant, name, version, spec, created_at)
			SELECT $1::text, $2::text, COALESCE(MAX(version), 0) + 1, $3::jsonb, $4::timestamptz FROM agent_versions WHERE tenant = $1 AND name = $2
			RETURNING tenant, name, version, spec, created_at
		), a AS (`+upsert+`)
		SELECT `+rules.AgentCols+`, COALESCE((SELECT created_at FROM agents WHERE tenant = $1 AND name = $2), $4::timestamptz) FROM v`,
		scans.Agent, p.Tenant, p.Name, p.Spec, p.Now)
}

func (e exec) AgentList(ctx context.Context, p driver.AgentListParams) ([]agentfleet.Agent, error) {
	q, args := rules.CurrentAgentSQL+` WHERE a.tenant = $2`, []any{p.Limit, p.Tenant}
	if p.After != nil {
		q += ` AND (a.created_at, a.name COLLATE "C") < ($3, $4)`
		args = append(args, p.After.CreatedAt, p.After.Name)
	}
	return all(ctx, e, q+` ORDER BY a.created_at DESC, a.name COLLATE "C" DESC LIMIT $1`, scans.Agent, args...)
}

func (e exec) AgentDelete(ctx context.Context, tenant, name string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM agents WHERE tenant = $1 AND name = $2`, tenant, name)
	return n > 0, err
}
