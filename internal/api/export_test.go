package api

import (
	"context"
	"sync"
)

// KeyCreatedForTest is what creating a key through s does to its cache.
func KeyCreatedForTest(s *Server, token string) { s.keyCreated(token) }

// SweepBatchesForTest runs one pass of the batch sweep and waits for the
// callbacks it sends.
func SweepBatchesForTest(ctx context.Context, s *Server) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	return s.sweepBatchesOnce(ctx, map[string]*batchEventSeq{}, &wg)
}

// ScopeForTest is the scope a tenant's key needs for the route pattern.
func ScopeForTest(pattern string) string { return scopeFor(pattern) }
