package rules

import (
	"context"
	"fmt"
	"slices"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// SkillCols are a skill's columns.
const SkillCols = `tenant, name, description, body, agents, source, source_run, created_at, updated_at`

// SkillPut validates p and fills its defaults: Source imported, Agents
// once each, never nil (empty: all).
func SkillPut(p store.SkillPutParams) (store.SkillPutParams, error) {
	if p.Tenant == "" {
		return p, Invalidf("skill: tenant is required")
	}
	if err := agentfleet.CheckSkillName(p.Name); err != nil {
		return p, Invalidf("%v", err)
	}
	switch {
	case len(p.Body) > agentfleet.SkillBodyMaxBytes:
		return p, Invalidf("skill %s: body is %d bytes; the limit is %d (64 KiB): split it into several skills", p.Name, len(p.Body), agentfleet.SkillBodyMaxBytes)
	case len(p.Description) > agentfleet.SkillDescriptionMaxBytes:
		return p, Invalidf("skill %s: description is %d bytes; the limit is %d: say in a sentence what the skill is for", p.Name, len(p.Description), agentfleet.SkillDescriptionMaxBytes)
	case len(p.Agents) > agentfleet.SkillAgentsMax:
		return p, Invalidf("skill %s: %d agents; at most %d (none: every agent)", p.Name, len(p.Agents), agentfleet.SkillAgentsMax)
	}
	if err := checkTexts("skill description", p.Description, "skill body", p.Body, "skill source run", p.SourceRun); err != nil {
		return p, err
	}
	switch p.Source {
	case "":
		p.Source = agentfleet.SkillSourceImported
	case agentfleet.SkillSourceImported, agentfleet.SkillSourceCompiled:
	default:
		return p, Invalidf("skill %s: source %q: use %q or %q", p.Name, p.Source, agentfleet.SkillSourceImported, agentfleet.SkillSourceCompiled)
	}
	agents := make([]string, 0, len(p.Agents))
	for _, a := range p.Agents {
		if err := CheckID("skill agent", a); err != nil {
			return p, err
		}
		if !slices.Contains(agents, a) {
			agents = append(agents, a)
		}
	}
	p.Agents = agents
	return p, nil
}

func checkSkillRef(tenant, name string) error {
	if tenant == "" {
		return Invalidf("skill: tenant is required")
	}
	if name == "" {
		return Invalidf("skill: name is required")
	}
	return nil
}

// Skill scans SkillCols.
func (s Scans) Skill(sc Scanner) (agentfleet.Skill, error) {
	var x agentfleet.Skill
	var agents []byte
	if err := sc.Scan(&x.Tenant, &x.Name, &x.Description, &x.Body, &agents, &x.Source, &x.SourceRun,
		s.Time(&x.CreatedAt), s.Time(&x.UpdatedAt)); err != nil {
		return x, err
	}
	var err error
	if x.Agents, err = DecodeStrings(agents); err == nil && x.Agents == nil {
		x.Agents = []string{}
	}
	return x, err
}

// SkillPut writes the skill and moves the tenant's revision on in one
// transaction, so a reader that saw the revision sees the write.
func (s *Store) SkillPut(ctx context.Context, p store.SkillPutParams) (agentfleet.Skill, error) {
	p, err := SkillPut(p)
	if err != nil {
		return agentfleet.Skill{}, err
	}
	var x agentfleet.Skill
	err = s.d.Tx(ctx, func(tx driver.Executor) error {
		var err error
		if x, err = tx.SkillUpsert(ctx, p, Now()); err != nil {
			return err
		}
		_, err = tx.SkillRevisionBump(ctx, p.Tenant)
		return err
	})
	if err != nil {
		return agentfleet.Skill{}, fmt.Errorf("put skill %s/%s: %w", p.Tenant, p.Name, err)
	}
	return x, nil
}

func (s *Store) SkillGet(ctx context.Context, tenant, name string) (agentfleet.Skill, error) {
	if err := checkSkillRef(tenant, name); err != nil {
		return agentfleet.Skill{}, err
	}
	x, err := s.d.SkillGet(ctx, tenant, name)
	if err != nil {
		return agentfleet.Skill{}, fmt.Errorf("get skill %s/%s: %w", tenant, name, err)
	}
	return x, nil
}

// SkillList of an unknown tenant is ErrNotFound; the tenant is read
// only when it lists none.
func (s *Store) SkillList(ctx context.Context, tenant string) ([]agentfleet.Skill, error) {
	if tenant == "" {
		return nil, Invalidf("skill list: tenant is required")
	}
	var xs []agentfleet.Skill
	err := s.d.Read(ctx, func(x driver.Executor) error {
		var err error
		if xs, err = x.SkillList(ctx, tenant); err != nil || len(xs) > 0 {
			return err
		}
		_, err = x.TenantGet(ctx, tenant)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list skills of %s: %w", tenant, err)
	}
	return xs, nil
}

func (s *Store) SkillDelete(ctx context.Context, tenant, name string) error {
	if err := checkSkillRef(tenant, name); err != nil {
		return err
	}
	err := s.d.Tx(ctx, func(tx driver.Executor) error {
		ok, err := tx.SkillDelete(ctx, tenant, name)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		_, err = tx.SkillRevisionBump(ctx, tenant)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete skill %s/%s: %w", tenant, name, err)
	}
	return nil
}

func (s *Store) SkillRevision(ctx context.Context, tenant string) (int64, error) {
	if tenant == "" {
		return 0, Invalidf("skill revision: tenant is required")
	}
	n, err := s.d.SkillRevisionGet(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("read the skills revision of %s: %w", tenant, err)
	}
	return n, nil
}
