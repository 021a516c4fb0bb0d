package sqlite

import (
	"context"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// AgentLock does nothing: the one writer connection already serialises
// upserts.
func (e exec) AgentLock(context.Context, string, string) error { return nil }

func (e exec) AgentGet(ctx context.Context, tenant, name string, version int) (agentfleet.Agent, error) {
	if version == 0 {
		return one(ctx, e, rules.CurrentAgentSQL+` WHERE a.tenant = ? AND a.name = ?`, scans.Agent, tenant, name)
	}
	return one(ctx, e, rules.AgentVersionSQL, scans.Agent, tenant, name, version)
}

func (e exec) AgentVersionInsert(ctx context.Context, p driver.AgentVersionInsertParams) (agentfleet.Agent, error) {
	var a agentfleet.Agent
	err := e.write(ctx, func(tx *wtx) error {
		now := p.Now.UnixMicro()
		var version int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM agent_versions WHERE tenant = ? AND name = ?`,
			p.Tenant, p.Name).Scan(&version); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO agent_versions (tenant, name, version, spec, created_at) VALUES (?, ?, ?, ?, ?)`,
			p.Tenant, p.Name, version, string(p.Spec), now); err != nil {
			return err
		}
		q, args := `UPDATE agents SET version = ? WHERE tenant = ? AND name = ?`, []any{version, p.Tenant, p.Name}
		if !p.Exists {
			q, args = `INSERT INTO agents (tenant, name, version, created_at) VALUES (?, ?, ?, ?)`, []any{p.Tenant, p.Name, version, now}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		var err error
		a, err = scans.Agent(tx.QueryRowContext(ctx, rules.CurrentAgentSQL+` WHERE a.tenant = ? AND a.name = ?`, p.Tenant, p.Name))
		return err
	})
	return a, err
}

func (e exec) AgentList(ctx context.Context, p driver.AgentListParams) ([]agentfleet.Agent, error) {
	q, args := rules.CurrentAgentSQL+` WHERE a.tenant = ?`, []any{p.Tenant}
	if p.After != nil {
		at := p.After.CreatedAt.UnixMicro()
		q += ` AND (a.created_at < ? OR (a.created_at = ? AND a.name < ?))`
		args = append(args, at, at, p.After.Name)
	}
	return all(ctx, e, q+` ORDER BY a.created_at DESC, a.name DESC LIMIT ?`, scans.Agent, append(args, p.Limit)...)
}

func (e exec) AgentDelete(ctx context.Context, tenant, name string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM agents WHERE tenant = ? AND name = ?`, tenant, name)
	return n > 0, err
}
