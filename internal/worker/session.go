package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/ttlcache"
)

// Bounds of the session histories a worker keeps.
const (
	sessionCacheTTL = 10 * time.Minute
	sessionCacheMax = 128
)

// sessionCache keeps, per running session run, what its prompt recalls of
// its session: the earlier runs ended before it started, which stay as
// they are while it runs (its session runs one run at a time), so its
// later turns on this worker read nothing more.
type sessionCache struct {
	store   store.Store
	entries *ttlcache.Cache[string, []loop.SessionRun]
}

func newSessionCache(s store.Store) sessionCache {
	return sessionCache{store: s, entries: ttlcache.New[string, []loop.SessionRun](sessionCacheTTL, sessionCacheMax)}
}

// get is the session history of run; nil, reading nothing, for a run
// without a session.
func (c *sessionCache) get(ctx context.Context, run agentfleet.Run) ([]loop.SessionRun, error) {
	if run.SessionID == "" {
		return nil, nil
	}
	if h, ok := c.entries.Get(run.ID); ok {
		return h, nil
	}
	rs, err := store.SessionHistory(ctx, c.store, store.SessionHistoryParams{
		Tenant: run.Tenant, SessionID: run.SessionID, RunID: run.ID, Before: run.CreatedAt,
	})
	if err != nil {
		return nil, fmt.Errorf("load the history of session %s for run %s: %w", run.SessionID, run.ID, err)
	}
	h := make([]loop.SessionRun, len(rs))
	for i, r := range rs {
		h[i] = loop.SessionRun{Run: r.Run, Steps: r.Steps}
	}
	c.entries.Put(run.ID, h)
	return h, nil
}

// forget drops a run's entry once its last turn has run.
func (c *sessionCache) forget(runID string) { c.entries.Delete(runID) }
