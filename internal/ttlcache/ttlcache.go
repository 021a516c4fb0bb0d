// Package ttlcache holds the fleet's cache of lookups: a bounded map whose
// entries expire a fixed time after they were put. The API keeps API keys
// (and, briefly, tokens that are no key) and agents in it, the worker
// agent profiles: answers that change rarely, asked for on every request
// or turn.
package ttlcache

import (
	"sync"
	"time"
)

// Cache is a map whose entries expire ttl after they were put, holding
// at most limit entries. A nil *Cache holds nothing: Get always misses
// and Put does nothing, which is how caching is turned off. Safe for
// concurrent use.
type Cache[K comparable, V any] struct {
	ttl   time.Duration
	limit int
	now   func() time.Time // time.Now; tests set it

	mu sync.Mutex
	m  map[K]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache, or nil (caching off) when ttl or limit is
// not positive.
func New[K comparable, V any](ttl time.Duration, limit int) *Cache[K, V] {
	if ttl <= 0 || limit <= 0 {
		return nil
	}
	return &Cache[K, V]{ttl: ttl, limit: limit, now: time.Now, m: make(map[K]entry[V])}
}

// Get returns k's value when it was put less than ttl ago.
func (c *Cache[K, V]) Get(k K) (V, bool) {
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

// Put stores v under k for ttl. A full cache first drops its expired
// entries and then, until a quarter of it is free, arbitrary ones (map
// order is random): when that is needed the live keys outnumber the
// cache and no choice of victim would save many lookups, and freeing a
// quarter keeps the sweep to once per limit/4 puts.
func (c *Cache[K, V]) Put(k K, v V) {
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
	c.m[k] = entry[V]{v: v, expires: now.Add(c.ttl)}
}

// Delete removes k.
func (c *Cache[K, V]) Delete(k K) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// DeleteFunc removes every entry for which match is true and returns how
// many it removed. It visits every entry: for rare events (a revoked
// key), not for a request path.
func (c *Cache[K, V]) DeleteFunc(match func(K, V) bool) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, e := range c.m {
		if match(k, e.v) {
			delete(c.m, k)
			n++
		}
	}
	return n
}

// Len is the number of entries held, expired or not.
func (c *Cache[K, V]) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
