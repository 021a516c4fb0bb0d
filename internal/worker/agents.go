package worker

import (
	"context"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// agentCache keeps agent profiles for a few seconds: every turn needs its
// agent, agents change rarely, and a changed profile taking effect a few
// seconds late is harmless.
type agentCache struct {
	store   store.Store
	ttl     time.Duration
	mu      sync.Mutex
	entries map[[2]string]agentEntry
}

type agentEntry struct {
	agent   agentfleet.Agent
	fetched time.Time
}

func (c *agentCache) get(ctx context.Context, tenant, name string) (agentfleet.Agent, error) {
	key := [2]string{tenant, name}
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && time.Since(e.fetched) < c.ttl {
		return e.agent, nil
	}
	a, err := c.store.AgentGetByName(ctx, store.AgentGetByNameParams{Tenant: tenant, Name: name})
	if err != nil {
		return agentfleet.Agent{}, err
	}
	c.mu.Lock()
	c.entries[key] = agentEntry{agent: a, fetched: time.Now()}
	c.mu.Unlock()
	return a, nil
}
