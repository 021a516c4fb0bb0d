package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// activeTTL is how stale a capped tenant's count of active runs may be
// when the scheduler asks whether it may start another: short, so a slot
// freed by a finished run is reused quickly.
const activeTTL = 50 * time.Millisecond

// tenantCache keeps what scheduling needs of each tenant: its weight and
// max concurrent runs (refreshed every ttl), and, for tenants with a cap,
// its count of active runs (refreshed every activeTTL, and counted up at
// once when the scheduler starts a run).
type tenantCache struct {
	store store.Store
	ttl   time.Duration
	mu    sync.Mutex
	m     map[string]*tenantInfo
}

type tenantInfo struct {
	weight        int
	maxConcurrent int
	fetched       time.Time
	active        int
	counted       time.Time
}

func newTenantCache(s store.Store, ttl time.Duration) *tenantCache {
	return &tenantCache{store: s, ttl: ttl, m: map[string]*tenantInfo{}}
}

// get returns the tenant's settings, refreshed when stale. A store error
// keeps the stale values (or weight 1, no cap): scheduling must go on.
func (c *tenantCache) get(ctx context.Context, tenant string) *tenantInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	ti, ok := c.m[tenant]
	if !ok {
		ti = &tenantInfo{weight: 1}
		c.m[tenant] = ti
	}
	if time.Since(ti.fetched) >= c.ttl {
		ti.fetched = time.Now()
		if t, err := c.store.TenantGetByID(ctx, tenant); err == nil {
			ti.weight, ti.maxConcurrent = max(1, t.Weight), t.MaxConcurrentRuns
		}
	}
	return ti
}

// capped reports whether the tenant limits its concurrent runs.
func (c *tenantCache) capped(ctx context.Context, tenant string) bool {
	return c.get(ctx, tenant).maxConcurrent > 0
}

// admit reports whether the tenant may start another run now.
func (c *tenantCache) admit(ctx context.Context, tenant string) bool {
	ti := c.get(ctx, tenant)
	if ti.maxConcurrent <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(ti.counted) >= activeTTL {
		if n, err := c.store.RunCountActive(ctx, tenant); err == nil {
			ti.active, ti.counted = n, time.Now()
		}
	}
	return ti.active < ti.maxConcurrent
}

// started counts a run the scheduler just started, until the next count
// from the store includes it.
func (c *tenantCache) started(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ti, ok := c.m[tenant]; ok {
		ti.active++
	}
}
