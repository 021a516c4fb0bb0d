package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// admittedTTL is how long a run admitted by the scheduler counts against
// its tenant's max concurrent runs on the scheduler's own say-so, until
// the store's count of active runs (refreshed every TenantTTL) includes
// it. Counting it twice meanwhile errs on the side of the cap.
const admittedTTL = 5 * time.Second

// tenantCache keeps what scheduling needs of each tenant: its weight and
// max concurrent runs, and its count of active runs.
type tenantCache struct {
	store store.Store
	ttl   time.Duration
	mu    sync.Mutex
	m     map[string]*tenantInfo
}

type tenantInfo struct {
	weight        int
	maxConcurrent int
	active        int
	fetched       time.Time
	admitted      []time.Time
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
	if time.Since(ti.fetched) < c.ttl {
		return ti
	}
	ti.fetched = time.Now()
	if t, err := c.store.TenantGetByID(ctx, tenant); err == nil {
		ti.weight, ti.maxConcurrent = max(1, t.Weight), t.MaxConcurrentRuns
	}
	if ti.maxConcurrent > 0 {
		if n, err := c.store.RunCountActive(ctx, tenant); err == nil {
			ti.active = n
		}
	}
	return ti
}

// admit reports whether the tenant may start another run now.
func (c *tenantCache) admit(ctx context.Context, tenant string) bool {
	ti := c.get(ctx, tenant)
	if ti.maxConcurrent <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	kept := ti.admitted[:0]
	for _, at := range ti.admitted {
		if now.Sub(at) < admittedTTL {
			kept = append(kept, at)
		}
	}
	ti.admitted = kept
	return ti.active+len(ti.admitted) < ti.maxConcurrent
}

// admitted records that a run of the tenant was just started.
func (c *tenantCache) admitted(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ti, ok := c.m[tenant]; ok && ti.maxConcurrent > 0 {
		ti.admitted = append(ti.admitted, time.Now())
	}
}
