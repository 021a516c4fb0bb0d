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
	"github.com/agentfleet/agentfleet/wire"
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
// to ttl, then mods applied.
func newCountingEnv(t *testing.T, ttl time.Duration, mods ...func(*api.Config)) (*env, *countingStore) {
	t.Helper()
	var cs *countingStore
	e := newEnv(t, append([]func(*api.Config){func(c *api.Config) {
		cs = &countingStore{Store: c.Store}
		c.Store = cs
		c.LookupCacheTTL = ttl
	}}, mods...)...)
	return e, cs
}

func storeKey(tenant, key string) store.APIKeyCreateParams {
	return store.APIKeyCreateParams{Tenant: tenant, Key: key, Name: "test"}
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
	e, cs := newCountingEnv(t, 0, func(c *api.Config) { c.UnknownKeyTTL = time.Hour })
	e.tenant("acme")
	for _, token := range []string{"af_not_a_key", "af_not_a_key_either"} {
		for range 3 {
			requireError(t, e.do("POST", "/v1/runs", token, map[string]any{"message": "go"}), http.StatusUnauthorized, "unauthorized", "invalid API key")
		}
	}
	keys, _ := cs.lookups()
	require.EqualValues(t, 2, keys, "an unknown token costs the store one lookup, then is refused from memory")

	// A key made meanwhile works at once.
	k := decode[wire.APIKeyView](t, e.do("POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"name": "later"}), http.StatusCreated)
	r := e.createRun(k.APIKey, map[string]any{"message": "go"})
	require.Equal(t, "acme", r.Tenant)
}

func TestLookupCacheUnknownKeyExpires(t *testing.T) {
	t.Parallel()
	const ttl = 50 * time.Millisecond
	e, cs := newCountingEnv(t, 0, func(c *api.Config) { c.UnknownKeyTTL = ttl })
	const token = "af_created_later"
	requireError(t, e.do("GET", "/v1/runs", token, nil), http.StatusUnauthorized, "unauthorized")
	e.tenant("acme")
	_, err := e.store.APIKeyCreate(e.ctx, storeKey("acme", token))
	require.NoError(t, err)
	// The refusal was kept when the answer came back, so it has expired
	// one ttl after it. What this waits for is the clock.
	time.Sleep(ttl)
	keys, _ := cs.lookups()
	e.createRun(token, map[string]any{"message": "go"})
	k2, _ := cs.lookups()
	require.Equal(t, keys+1, k2, "after UnknownKeyTTL the store is asked again")
}

func TestLookupCacheUnknownKeyOff(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t, 0, func(c *api.Config) { c.UnknownKeyTTL = -1 })
	for i := range 3 {
		requireError(t, e.do("GET", "/v1/runs", "af_nope", nil), http.StatusUnauthorized, "unauthorized")
		keys, _ := cs.lookups()
		require.EqualValues(t, i+1, keys, "a negative UnknownKeyTTL asks every time")
	}
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

	_, err := e.store.AgentUpsert(e.ctx, store.AgentUpsertParams{Tenant: "acme", Name: "researcher", Spec: agentfleet.AgentSpec{Persona: "You research."}})
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
