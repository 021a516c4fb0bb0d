package worker

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/ttlcache"
)

// agentCacheMax bounds the agent profiles a worker keeps.
const agentCacheMax = 10_000

// agentCache keeps agent profiles for a few seconds: every turn needs its
// agent, agents change rarely, and a changed profile taking effect a few
// seconds late is harmless.
type agentCache struct {
	store   store.Store
	entries *ttlcache.Cache[[2]string, agentfleet.Agent]
}

func newAgentCache(s store.Store, ttl time.Duration) agentCache {
	return agentCache{store: s, entries: ttlcache.New[[2]string, agentfleet.Agent](ttl, agentCacheMax)}
}

func (c *agentCache) get(ctx context.Context, tenant, name string) (agentfleet.Agent, error) {
	key := [2]string{tenant, name}
	if a, ok := c.entries.Get(key); ok {
		return a, nil
	}
	a, err := c.store.AgentGetByName(ctx, store.AgentGetByNameParams{Tenant: tenant, Name: name})
	if err != nil {
		return agentfleet.Agent{}, err
	}
	c.entries.Put(key, a)
	return a, nil
}
