package api_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/store"
)

// countingStore is the real store, counting the two lookups the server
// may keep answers of. Every call still goes to SQLite.
type countingStore struct {
	store.Store
	keyLookups   atomic.Int64
	agentLookups atomic.Int64
}

func (s *countingStore) TenantGetByAPIKey(ctx context.Context, p store.TenantGetByAPIKeyParams) (store.TenantGetByAPIKeyResult, error) {
	s.keyLookups.Add(1)
	return s.Store.TenantGetByAPIKey(ctx, p)
}

func (s *countingStore) AgentGetByName(ctx context.Context, p store.AgentGetByNameParams) (agentfleet.Agent, error) {
	s.agentLookups.Add(1)
	return s.Store.AgentGetByName(ctx, p)
}

// lookups is how many times the store was asked for a key and an agent.
func (s *countingStore) lookups() (keys, agents int64) {
	return s.keyLookups.Load(), s.agentLookups.Load()
}

// newCountingEnv is newEnv with the store counted and LookupCacheTTL set
// to ttl.
func newCountingEnv(t *testing.T, ttl time.Duration) (*env, *countingStore) {
	t.Helper()
	var cs *countingStore
	e := newEnv(t, func(c *api.Config) {
		cs = &countingStore{Store: c.Store}
		c.Store = cs
		c.LookupCacheTTL = ttl
	})
	return e, cs
}

func TestLookupCacheRepeatedSubmission(t *testing.T) {
	t.Parallel()
	// Long enough that a slow run of the test cannot see an entry expire.
	e, cs := newCountingEnv(t, time.Hour)
	acme := e.tenant("acme")
	globex := e.tenant("globex")
	keys, agents := cs.lookups()
	require.Zero(t, keys, "the admin token is checked without the store")
	require.Zero(t, agents)

	var runs []agentfleet.Run
	for range 5 {
		runs = append(runs, e.createRun(acme, map[string]any{"message": "go"}))
	}
	keys, agents = cs.lookups()
	require.EqualValues(t, 1, keys, "the key is looked up once, then kept")
	require.EqualValues(t, 1, agents, "the agent is looked up once, then kept")
	for _, r := range runs {
		require.Equal(t, "acme", r.Tenant)
	}

	// Every endpoint shares the key's entry.
	e.getRun(acme, runs[0].ID)
	keys, _ = cs.lookups()
	require.EqualValues(t, 1, keys)

	// Another tenant's key and agent are entries of their own: globex
	// neither passes as acme nor borrows acme's "default".
	r := e.createRun(globex, map[string]any{"message": "go"})
	require.Equal(t, "globex", r.Tenant)
	requireError(t, e.do("GET", "/v1/runs/"+runs[0].ID, globex, nil), http.StatusNotFound, "not_found")
	keys, agents = cs.lookups()
	require.EqualValues(t, 2, keys)
	require.EqualValues(t, 2, agents)
}

func TestLookupCacheUnknownKey(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t, 0)
	e.tenant("acme")
	const key = "af_key_created_later"

	for i := range 3 {
		requireError(t, e.do("POST", "/v1/runs", key, map[string]any{"message": "go"}), http.StatusUnauthorized, "unauthorized", "invalid API key")
		keys, _ := cs.lookups()
		require.EqualValues(t, i+1, keys, "a rejected key is asked for every time")
	}

	_, err := e.store.APIKeyCreate(e.ctx, store.APIKeyCreateParams{Tenant: "acme", Key: key, Name: "later"})
	require.NoError(t, err)
	r := e.createRun(key, map[string]any{"message": "go"})
	require.Equal(t, "acme", r.Tenant, "a key created after a rejection works at once")
}

func TestLookupCacheUnknownAgent(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t, 0)
	key := e.tenant("acme")
	body := map[string]any{"agent": "researcher", "message": "go"}

	for i := range 3 {
		requireError(t, e.do("POST", "/v1/runs", key, body), http.StatusUnprocessableEntity, "unprocessable", `unknown agent "researcher"`)
		_, agents := cs.lookups()
		require.EqualValues(t, i+1, agents, "an unknown agent is asked for every time")
	}

	_, err := e.store.AgentUpsert(e.ctx, store.AgentUpsertParams{Tenant: "acme", Name: "researcher", Persona: "You research."})
	require.NoError(t, err)
	r := e.createRun(key, body)
	require.Equal(t, "researcher", r.Agent, "an agent created after a rejection is accepted at once")

	// Another tenant's agent of that name does not exist for it.
	other := e.tenant("globex")
	requireError(t, e.do("POST", "/v1/runs", other, body), http.StatusUnprocessableEntity, "unprocessable", `unknown agent "researcher"`)
}

func TestLookupCacheExpires(t *testing.T) {
	t.Parallel()
	const ttl = 50 * time.Millisecond
	e, cs := newCountingEnv(t, ttl)
	key := e.tenant("acme")

	start := time.Now()
	e.createRun(key, map[string]any{"message": "go"})
	e.createRun(key, map[string]any{"message": "go"})
	keys, agents := cs.lookups()
	// The entries were put after start, so they live at least until
	// start+ttl: a second answer before then came from them. A machine
	// too slow for that proves nothing either way.
	if time.Since(start) < ttl {
		require.EqualValues(t, 1, keys, "within the ttl the key is kept")
		require.EqualValues(t, 1, agents, "within the ttl the agent is kept")
	} else {
		t.Logf("two submissions took longer than the %v ttl; not checking that they shared a lookup", ttl)
	}

	// The entries were put before the last answer came back, so they
	// have expired one ttl after it. What this waits for is the clock.
	time.Sleep(ttl)
	e.createRun(key, map[string]any{"message": "go"})
	k2, a2 := cs.lookups()
	require.Equal(t, keys+1, k2, "an expired key is asked for again")
	require.Equal(t, agents+1, a2, "an expired agent is asked for again")
}

func TestLookupCacheOff(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t, -1)
	key := e.tenant("acme")

	for i := range 3 {
		e.createRun(key, map[string]any{"message": "go"})
		keys, agents := cs.lookups()
		require.EqualValues(t, i+1, keys, "a negative LookupCacheTTL keeps nothing")
		require.EqualValues(t, i+1, agents)
	}
}
