package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// Skills are a tenant's (DESIGN.md section 20): with its API key (admin
// scope) tenant is "" (or the key's own tenant); with the admin token
// tenant names it.

// PutSkill creates the skill name or replaces it whole.
func (c *Client) PutSkill(ctx context.Context, tenant, name string, req wire.SkillRequest) (agentfleet.Skill, error) {
	var out agentfleet.Skill
	err := c.do(ctx, http.MethodPut, skillPath(tenant, name), req, &out)
	return out, err
}

// GetSkill reads a skill, its body included.
func (c *Client) GetSkill(ctx context.Context, tenant, name string) (agentfleet.Skill, error) {
	var out agentfleet.Skill
	err := c.do(ctx, http.MethodGet, skillPath(tenant, name), nil, &out)
	return out, err
}

// ListSkillsParams pages GET /v1/skills.
type ListSkillsParams struct {
	Tenant string
	Limit  int
	Cursor string
}

// ListSkills lists a tenant's skills by name, without their bodies.
func (c *Client) ListSkills(ctx context.Context, p ListSkillsParams) (wire.SkillList, error) {
	q := pageQuery(p.Limit, p.Cursor)
	if p.Tenant != "" {
		q.Set("tenant", p.Tenant)
	}
	var out wire.SkillList
	err := c.do(ctx, http.MethodGet, "/v1/skills?"+q.Encode(), nil, &out)
	return out, err
}

// DeleteSkill deletes a skill.
func (c *Client) DeleteSkill(ctx context.Context, tenant, name string) error {
	return c.do(ctx, http.MethodDelete, skillPath(tenant, name), nil, nil)
}

// CompileRunSkill compiles the completed run runID into a skill of its
// tenant (409 for a run not completed).
func (c *Client) CompileRunSkill(ctx context.Context, runID string, req wire.SkillCompileRequest) (agentfleet.Skill, error) {
	var out agentfleet.Skill
	err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/skill", req, &out)
	return out, err
}

func skillPath(tenant, name string) string {
	p := "/v1/skills/" + url.PathEscape(name)
	if tenant != "" {
		p += "?tenant=" + url.QueryEscape(tenant)
	}
	return p
}
