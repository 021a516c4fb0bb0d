package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// A run submission asks the store three things: the API key's
// tenant, whether the agent exists, and the insert. Only the insert has
// to be fresh. The store can neither revoke a key nor delete an agent, so
// a positive answer to either lookup stays true, and the server keeps it
// for a short while (Config.LookupCacheTTL). Negative answers are never
// kept: a key or agent created a moment after a rejection works at once,
// and an unknown one is rejected every time.

// Defaults of the lookup caches.
const (
	LookupCacheTTLDefault = 5 * time.Second
	// lookupCacheMax bounds each cache; at this size a cache holds a
	// few MiB at most.
	lookupCacheMax = 10_000
)

// agentKey names an agent of a tenant.
type agentKey struct {
	tenant, name string
}

// tenantByAPIKey returns the id of the tenant whose API key token is, or
// a 401 when there is none.
func (s *Server) tenantByAPIKey(ctx context.Context, token string) (string, error) {
	// The map is keyed by the key's digest, so the server's memory
	// holds no usable key.
	digest := sha256.Sum256([]byte(token))
	if id, ok := s.keys.get(digest); ok {
		return id, nil
	}
	t, err := s.cfg.Store.TenantGetByAPIKey(ctx, token)
	if errors.Is(err, store.ErrNotFound) {
		return "", errUnauthorized("invalid API key")
	}
	if err != nil {
		return "", fmt.Errorf("look up API key: %w", err)
	}
	s.keys.put(digest, t.ID)
	return t.ID, nil
}

// checkAgent returns nil when tenant has an agent called name, and a 422
// naming the default agent when it has not.
func (s *Server) checkAgent(ctx context.Context, tenant, name string) error {
	k := agentKey{tenant: tenant, name: name}
	if _, ok := s.agents.get(k); ok {
		return nil
	}
	if _, err := s.cfg.Store.AgentGetByName(ctx, store.AgentGetByNameParams{Tenant: tenant, Name: name}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errUnprocessable("unknown agent %q (every tenant has %q)", name, agentfleet.DefaultAgent)
		}
		return err
	}
	s.agents.put(k, struct{}{})
	return nil
}

// ttlCache is a map whose entries expire ttl after they were put, holding
// at most limit entries. A nil *ttlCache holds nothing: get always misses
// and put does nothing, which is how caching is turned off. Safe for
// concurrent use.
type ttlCache[K comparable, V any] struct {
	ttl   time.Duration
	limit int
	now   func() time.Time // time.Now; tests set it

	mu sync.Mutex
	m  map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

// newTTLCache returns a cache, or nil (caching off) when ttl or limit is
// not positive.
func newTTLCache[K comparable, V any](ttl time.Duration, limit int) *ttlCache[K, V] {
	if ttl <= 0 || limit <= 0 {
		return nil
	}
	return &ttlCache[K, V]{ttl: ttl, limit: limit, now: time.Now, m: make(map[K]ttlEntry[V])}
}

// get returns k's value when it was put less than ttl ago.
func (c *ttlCache[K, V]) get(k K) (V, bool) {
	var zero V
	if c == nil {
		return zero, false
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return zero, false
	}
	if !now.Before(e.expires) {
		delete(c.m, k)
		return zero, false
	}
	return e.v, true
}

// put stores v under k for ttl. A full cache first drops its expired
// entries and then, until a quarter of it is free, arbitrary ones (map
// order is random): when that is needed the live keys outnumber the
// cache and no choice of victim would save many lookups, and freeing a
// quarter keeps the sweep to once per limit/4 puts.
func (c *ttlCache[K, V]) put(k K, v V) {
	if c == nil {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.limit {
		for ek, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, ek)
			}
		}
		keep := c.limit - max(c.limit/4, 1)
		for ek := range c.m {
			if len(c.m) <= keep {
				break
			}
			delete(c.m, ek)
		}
	}
	c.m[k] = ttlEntry[V]{v: v, expires: now.Add(c.ttl)}
}

// size is the number of entries held, expired or not.
func (c *ttlCache[K, V]) size() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
