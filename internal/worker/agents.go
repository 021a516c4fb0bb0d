package worker

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/ttlcache"
)

// agentCacheMax bounds the agent versions a worker keeps.
const agentCacheMax = 10_000

// agentCache keeps agent versions for a few seconds: every turn needs its
// run's. A version never changes, so only a run admitted before agents
// had versions (version 0: the agent's current one) may see a
// replacement a few seconds late.
type agentCache struct {
	store   store.Store
	entries *ttlcache.Cache[agentVersion, agentfleet.Agent]
}

type agentVersion struct {
	tenant, name string
	version      int
}

func newAgentCache(s store.Store, ttl time.Duration) agentCache {
	return agentCache{store: s, entries: ttlcache.New[agentVersion, agentfleet.Agent](ttl, agentCacheMax)}
}

func (c *agentCache) get(ctx context.Context, tenant, name string, version int) (agentfleet.Agent, error) {
	key := agentVersion{tenant, name, version}
	if a, ok := c.entries.Get(key); ok {
		return a, nil
	}
	a, err := c.store.AgentGetByName(ctx, store.AgentGetByNameParams{Tenant: tenant, Name: name, Version: version})
	if err != nil {
		return agentfleet.Agent{}, err
	}
	c.entries.Put(key, a)
	return a, nil
}
