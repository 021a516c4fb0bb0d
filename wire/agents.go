package wire

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// AgentRequest is the body of PUT /v1/agents/{name}: the whole agent,
// whose fields left out take their defaults. Name, when given, must be
// the path's and Tenant the caller's; Version and the timestamps are set
// by the server and ignored here, so that an agent as GET shows it can
// be put back.
type AgentRequest struct {
	Name      string     `json:"name,omitempty"`
	Tenant    string     `json:"tenant,omitempty"`
	Version   int        `json:"version,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	agentfleet.AgentSpec
}

// AgentList is a page of GET /v1/agents, newest first.
type AgentList struct {
	Agents     []agentfleet.Agent `json:"agents"`
	NextCursor string             `json:"next_cursor,omitempty"`
}
