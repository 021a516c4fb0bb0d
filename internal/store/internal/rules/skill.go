package rules

import "github.com/agentfleet/agentfleet/internal/store"

// SkillUpsert validates p.
func SkillUpsert(p store.SkillUpsertParams) error {
	if p.Tenant == "" || p.Name == "" {
		return Invalidf("skill: tenant and name are required")
	}
	return checkTexts("skill name", p.Name, "skill description", p.Description, "skill code", p.Code)
}
