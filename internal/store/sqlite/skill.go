package sqlite

import (
	"context"
	"errors"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) SkillUpsert(ctx context.Context, p store.SkillPutParams, now time.Time) (agentfleet.Skill, error) {
	at := now.UnixMicro()
	agents := rules.EncodeStrings(p.Agents)
	if agents == nil {
		agents = []byte("[]")
	}
	return row(ctx, e, `INSERT INTO skills (`+rules.SkillCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, name) DO UPDATE SET description = excluded.description, body = excluded.body,
			agents = excluded.agents, source = excluded.source, source_run = excluded.source_run, updated_at = excluded.updated_at
		RETURNING `+rules.SkillCols, scans.Skill,
		p.Tenant, p.Name, p.Description, p.Body, string(agents), p.Source, p.SourceRun, at, at)
}

func (e exec) SkillGet(ctx context.Context, tenant, name string) (agentfleet.Skill, error) {
	return one(ctx, e, `SELECT `+rules.SkillCols+` FROM skills WHERE tenant = ? AND name = ?`, scans.Skill, tenant, name)
}

func (e exec) SkillList(ctx context.Context, tenant string) ([]agentfleet.Skill, error) {
	return all(ctx, e, `SELECT `+rules.SkillCols+` FROM skills WHERE tenant = ? ORDER BY name`, scans.Skill, tenant)
}

func (e exec) SkillDelete(ctx context.Context, tenant, name string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM skills WHERE tenant = ? AND name = ?`, tenant, name)
	return n > 0, err
}

func (e exec) SkillRevisionBump(ctx context.Context, tenant string) (int64, error) {
	return row(ctx, e, `INSERT INTO skill_revisions (tenant, revision) VALUES (?, 1)
		ON CONFLICT (tenant) DO UPDATE SET revision = skill_revisions.revision + 1
		RETURNING revision`, rules.ScanInt64, tenant)
}

func (e exec) SkillRevisionGet(ctx context.Context, tenant string) (int64, error) {
	n, err := one(ctx, e, `SELECT revision FROM skill_revisions WHERE tenant = ?`, rules.ScanInt64, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	return n, err
}
