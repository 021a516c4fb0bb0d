package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
)

// AgentExecutor stores agents and their versions.
type AgentExecutor interface {
	// AgentLock holds the agent's name until the transaction ends, so two
	// upserts of one agent number their versions one after the other. A
	// backend with one writer at a time may do nothing.
	AgentLock(ctx context.Context, tenant, name string) error
	// AgentGet reads the agent's current version, or with version > 0
	// that version (kept past replacements and the agent's delete; its
	// CreatedAt is the agent's first version's). None is store.ErrNotFound.
	AgentGet(ctx context.Context, tenant, name string, version int) (agentfleet.Agent, error)
	// AgentVersionInsert stores spec (encoded) as the agent's next
	// version, numbered on from its highest (1 for the first), makes it
	// current (creating the agents row at now when the agent has none)
	// and returns the agent as AgentGet would.
	AgentVersionInsert(ctx context.Context, p AgentVersionInsertParams) (agentfleet.Agent, error)
	// AgentList reads up to Limit current agents of a tenant, newest
	// first (by creation, then name descending, bytewise), after After
	// when set.
	AgentList(ctx context.Context, p AgentListParams) ([]agentfleet.Agent, error)
	// AgentDelete deletes the agents row (its versions stay) and reports
	// whether there was one.
	AgentDelete(ctx context.Context, tenant, name string) (bool, error)
}

// AgentVersionInsertParams are AgentVersionInsert's.
type AgentVersionInsertParams struct {
	Tenant, Name string
	Spec         []byte // JSON, as rules.EncodeAgentSpec makes it
	// Exists says the agent has an agents row (a current version).
	Exists bool
	Now    time.Time
}

// AgentListParams are AgentList's.
type AgentListParams struct {
	Tenant string
	Limit  int
	// After, when not nil, is where the previous page ended.
	After *AgentPos
}

// AgentPos is a position in an agent listing: the agent made at CreatedAt
// with Name.
type AgentPos struct {
	CreatedAt time.Time
	Name      string
}
