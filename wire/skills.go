package wire

import "github.com/agentfleet/agentfleet"

// SkillRequest is the body of PUT /v1/skills/{name}: the whole skill (a
// PUT replaces it). Body is markdown of at most
// agentfleet.SkillBodyMaxBytes; Agents names the agents that see it
// (empty: all).
type SkillRequest struct {
	Description string   `json:"description"`
	Body        string   `json:"body"`
	Agents      []string `json:"agents,omitempty"`
}

// SkillList is a page of GET /v1/skills, by name, without bodies (GET
// /v1/skills/{name} reads one).
type SkillList struct {
	Skills     []agentfleet.Skill `json:"skills"`
	NextCursor string             `json:"next_cursor,omitempty"`
}

// SkillCompileRequest is the body of POST /v1/runs/{id}/skill: the
// skill's name (empty: from the run's task) and the agents that see it
// (empty: all). A skill of that name is replaced.
type SkillCompileRequest struct {
	Name   string   `json:"name,omitempty"`
	Agents []string `json:"agents,omitempty"`
}
