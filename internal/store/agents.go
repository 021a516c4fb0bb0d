package store

import "github.com/agentfleet/agentfleet"

type AgentUpsertParams struct {
	Tenant string
	Name   string
	Spec   agentfleet.AgentSpec
}

// AgentGetByNameParams reads an agent; Version zero means its current
// version.
type AgentGetByNameParams struct {
	Tenant  string
	Name    string
	Version int
}

type AgentListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type AgentListResult struct {
	Agents     []agentfleet.Agent
	NextCursor string // empty on the last page
}

type AgentDeleteParams struct {
	Tenant string
	Name   string
}
