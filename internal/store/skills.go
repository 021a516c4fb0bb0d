package store

// SkillPutParams create or replace a tenant's skill (agentfleet.Skill):
// Body is markdown of at most agentfleet.SkillBodyMaxBytes; Agents empty
// means all the tenant's agents; Source is agentfleet.SkillSourceImported
// (the default) or SkillSourceCompiled, with SourceRun the run compiled.
type SkillPutParams struct {
	Tenant, Name      string
	Description, Body string
	Agents            []string
	Source, SourceRun string
}
