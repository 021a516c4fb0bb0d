package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

func TestKeysCreateListRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.tenant("acme")
	other := e.tenant("globex")

	// The key the tenant was made with is listed as "default", never
	// shown again.
	l := decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys", adminToken, nil), http.StatusOK)
	require.Len(t, l.Keys, 1)
	def := l.Keys[0]
	require.Equal(t, "default", def.Name)
	require.True(t, strings.HasPrefix(def.ID, "key_"), def.ID)
	require.Nil(t, def.LastUsedAt, "not used yet")
	require.Empty(t, def.APIKey)

	// A tenant makes itself a key with its own; the key is shown once.
	r := e.do("POST", "/v1/tenants/acme/keys", first, map[string]any{"name": "ci"})
	ci := decode[wire.APIKeyView](t, r, http.StatusCreated)
	require.Equal(t, "ci", ci.Name)
	require.NotEqual(t, def.ID, ci.ID)
	require.True(t, strings.HasPrefix(ci.APIKey, "af_"))
	require.False(t, ci.CreatedAt.IsZero())
	raw := rawJSON(t, r.body)
	for _, k := range []string{"id", "name", "created_at", "last_used_at", "api_key"} {
		require.Contains(t, raw, k)
	}
	e.createRun(ci.APIKey, map[string]any{"message": "go"}) // works at once

	l = decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys", first, nil), http.StatusOK)
	require.Equal(t, []string{ci.ID, def.ID}, []string{l.Keys[0].ID, l.Keys[1].ID}, "newest first")
	require.NotNil(t, l.Keys[0].LastUsedAt, "ci was used")
	require.NotNil(t, l.Keys[1].LastUsedAt, "the default key was used to list")
	body := string(e.do("GET", "/v1/tenants/acme/keys", adminToken, nil).body)
	require.NotContains(t, body, ci.APIKey, "a listing never shows a key")
	require.NotContains(t, body, first)
	require.NotContains(t, body, "api_key")
	page := decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys?limit=1", adminToken, nil), http.StatusOK)
	require.Len(t, page.Keys, 1)
	require.NotEmpty(t, page.NextCursor)
	rest := decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys?limit=1&cursor="+page.NextCursor, adminToken, nil), http.StatusOK)
	require.Equal(t, def.ID, rest.Keys[0].ID)
	require.Empty(t, rest.NextCursor)
	requireError(t, e.do("GET", "/v1/tenants/acme/keys?cursor=bogus!", adminToken, nil), 400, "bad_request", "cursor")
	requireError(t, e.do("GET", "/v1/tenants/acme/keys?limit=0", adminToken, nil), 400, "bad_request", "limit")

	// Another tenant sees none of it.
	requireError(t, e.do("GET", "/v1/tenants/acme/keys", other, nil), 404, "not_found", `no tenant "acme"`)
	requireError(t, e.do("POST", "/v1/tenants/acme/keys", other, map[string]any{"name": "x"}), 404, "not_found")
	requireError(t, e.do("DELETE", "/v1/tenants/acme/keys/"+ci.ID, other, nil), 404, "not_found")
	requireError(t, e.do("DELETE", "/v1/tenants/globex/keys/"+ci.ID, adminToken, nil), 404, "not_found", "has no key")
	requireError(t, e.do("GET", "/v1/tenants/nobody/keys", adminToken, nil), 404, "not_found", `no tenant "nobody"`)

	// Bad names.
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{}`, 422, "name is required"},
		{`{"name":"  "}`, 422, "name is required"},
		{`{"name":"` + strings.Repeat("n", 101) + `"}`, 422, "limit is 100"},
		{`{"name":"a\u0000"}`, 422, "contains U+0000"},
		{`{"nme":"x"}`, 400, "unknown field"},
	} {
		r := e.do("POST", "/v1/tenants/acme/keys", adminToken, c.body)
		require.Equal(t, c.status, r.status, "%s: %s", c.body, r)
		require.Contains(t, string(r.body), c.want, c.body)
	}

	// Revocation is at once, though the key is cached.
	r = e.do("DELETE", "/v1/tenants/acme/keys/"+ci.ID, adminToken, nil)
	require.Equal(t, http.StatusNoContent, r.status, "answer: %s", r)
	requireError(t, e.do("POST", "/v1/runs", ci.APIKey, map[string]any{"message": "go"}), 401, "unauthorized", "invalid API key")
	requireError(t, e.do("DELETE", "/v1/tenants/acme/keys/"+ci.ID, adminToken, nil), 404, "not_found", "has no key")

	// A tenant may revoke the key it calls with, its last one included;
	// the admin token can make it a new one.
	r = e.do("DELETE", "/v1/tenants/acme/keys/"+def.ID, first, nil)
	require.Equal(t, http.StatusNoContent, r.status, "answer: %s", r)
	requireError(t, e.do("GET", "/v1/tenants/acme", first, nil), 401, "unauthorized")
	again := decode[wire.APIKeyView](t, e.do("POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"name": "again"}), http.StatusCreated)
	e.getRun(again.APIKey, e.createRun(again.APIKey, map[string]any{"message": "go"}).ID)
}

// observedRevocations is a real KeyRevocations (the bus) that reports
// each revocation after the server it serves has handled it.
type observedRevocations struct {
	api.KeyRevocations
	handled chan string
}

func (o *observedRevocations) SubscribeKeyRevoked(fn func(keyID string)) (func(), error) {
	return o.KeyRevocations.SubscribeKeyRevoked(func(id string) {
		fn(id)
		o.handled <- id
	})
}

func TestKeyRevokedOnEveryDispatcher(t *testing.T) {
	t.Parallel()
	// Two dispatchers on one store and one NATS. Their caches keep keys
	// for an hour, so only the broadcast can make the second one let go.
	e := newEnv(t, func(c *api.Config) { c.LookupCacheTTL = time.Hour })
	key := e.tenant("acme")
	keep := decode[wire.APIKeyView](t, e.do("POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"name": "keep"}), http.StatusCreated)
	ids := map[string]string{}
	for _, k := range decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys", adminToken, nil), http.StatusOK).Keys {
		ids[k.Name] = k.ID
	}

	emb := bustest.StartServer(t)
	servers := make([]*env, 2)
	observed := make([]*observedRevocations, 2)
	for i := range servers {
		b := bustest.Connect(t, emb)
		observed[i] = &observedRevocations{KeyRevocations: b, handled: make(chan string, 10)}
		srv, err := api.New(api.Config{Store: e.store, Bus: b, AdminToken: adminToken, LookupCacheTTL: time.Hour,
			KeyRevocations: observed[i], Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		servers[i] = &env{t: t, fixture: &fixture{ctx: e.ctx, store: e.store, bus: b, srv: hs, api: srv}}
	}
	a, b := servers[0], servers[1]
	for _, s := range servers {
		for _, k := range []string{key, keep.APIKey} {
			decode[wire.TenantView](t, s.do("GET", "/v1/tenants/acme", k, nil), http.StatusOK) // now cached
		}
	}

	r := a.do("DELETE", "/v1/tenants/acme/keys/"+ids["default"], adminToken, nil)
	require.Equal(t, http.StatusNoContent, r.status, "answer: %s", r)
	requireError(t, a.do("GET", "/v1/tenants/acme", key, nil), 401, "unauthorized")
	select {
	case id := <-observed[1].handled:
		require.Equal(t, ids["default"], id)
	case <-time.After(waitFor):
		t.Fatal("the other dispatcher never heard of the revocation")
	}
	requireError(t, b.do("GET", "/v1/tenants/acme", key, nil), 401, "unauthorized")
	for _, s := range servers {
		decode[wire.TenantView](t, s.do("GET", "/v1/tenants/acme", keep.APIKey, nil), http.StatusOK) // the other key stands
	}
}

func TestKeyCreatedForgetsUnknownToken(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t, 0, func(c *api.Config) { c.UnknownKeyTTL = time.Hour })
	e.tenant("acme")
	const token = "af_chosen_token"
	requireError(t, e.do("GET", "/v1/runs", token, nil), 401, "unauthorized")
	requireError(t, e.do("GET", "/v1/runs", token, nil), 401, "unauthorized")
	keys, _ := cs.lookups()
	require.EqualValues(t, 1, keys)
	// Keys made through the server are random, so this is what making
	// one under a token it refused would do.
	_, err := e.store.APIKeyCreate(context.Background(), storeKey("acme", token))
	require.NoError(t, err)
	api.KeyCreatedForTest(e.api, token)
	e.getRun(token, e.createRun(token, map[string]any{"message": "go"}).ID)
}

// pausingStore is the real store, except that the first lookup of token
// waits, after it has read the key, until the test lets it answer.
type pausingStore struct {
	store.Store
	token        string
	read, resume chan struct{}
	once         sync.Once
}

func (s *pausingStore) TenantGetByAPIKey(ctx context.Context, p store.TenantGetByAPIKeyParams) (store.TenantGetByAPIKeyResult, error) {
	res, err := s.Store.TenantGetByAPIKey(ctx, p)
	if p.Key == s.token {
		s.once.Do(func() {
			close(s.read)
			<-s.resume
		})
	}
	return res, err
}

func TestKeyRevokedWhileLookedUp(t *testing.T) {
	t.Parallel()
	// A lookup that read the key just before it was revoked must not
	// put it into the cache afterwards, where it would live for an hour.
	const token = "af_doomed"
	ps := &pausingStore{token: token, read: make(chan struct{}), resume: make(chan struct{})}
	e := newEnv(t, func(c *api.Config) {
		ps.Store = c.Store
		c.Store = ps
		c.LookupCacheTTL = time.Hour
	})
	e.tenant("acme")
	k, err := e.store.APIKeyCreate(e.ctx, storeKey("acme", token))
	require.NoError(t, err)

	// The request is sent by hand: e.do fails the test, which only the
	// test's own goroutine may do.
	answer := make(chan reply, 1)
	req, err := http.NewRequestWithContext(e.ctx, "GET", e.srv.URL+"/v1/tenants/acme", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	go func() {
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			answer <- reply{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answer <- reply{status: resp.StatusCode, header: resp.Header, body: body}
	}()
	<-ps.read // the key was found valid
	r := e.do("DELETE", "/v1/tenants/acme/keys/"+k.ID, adminToken, nil)
	require.Equal(t, http.StatusNoContent, r.status, "answer: %s", r)
	close(ps.resume)
	requireError(t, bustest.Recv(t, answer, "the paused request"), 401, "unauthorized", "revoked")
	requireError(t, e.do("GET", "/v1/tenants/acme", token, nil), 401, "unauthorized")
}

// TestKeyScopes: a key may do what its scopes say and is refused the
// rest with a 403 naming the scope needed, on a route of each class; a
// key made without scopes may do everything; revocation still holds.
func TestKeyScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := e.tenant("acme")
	makeKey := func(name string, scopes ...string) string {
		body := map[string]any{"name": name}
		if scopes != nil {
			body["scopes"] = scopes
		}
		v := decode[wire.APIKeyView](t, e.do("POST", "/v1/tenants/acme/keys", all, body), http.StatusCreated)
		if scopes == nil {
			scopes = store.APIKeyScopes
		}
		require.ElementsMatch(t, scopes, v.Scopes, name)
		return v.APIKey
	}
	keys := map[string]string{
		"read":        makeKey("dashboard", "read"),
		"submit":      makeKey("producer", "submit"),
		"admin":       makeKey("ops", "admin"),
		"submit,read": makeKey("worker", "read", "submit"),
		"all":         makeKey("everything"),
	}
	run := e.createRun(all, map[string]any{"message": "hi"})

	routes := []struct {
		method, path string
		body         any
		need         string
	}{
		{"POST", "/v1/tenants/acme/keys", map[string]any{"name": "more"}, "admin"},
		{"GET", "/v1/tenants/acme/keys", nil, "admin"},
		{"POST", "/v1/tenants/acme/callback-secret", nil, "admin"},
		{"PUT", "/v1/agents/helper", map[string]any{"system": "help"}, "admin"},
		{"GET", "/v1/triggers", nil, "admin"},
		{"POST", "/v1/runs", map[string]any{"message": "go"}, "submit"},
		{"POST", "/v1/runs/" + run.ID + "/cancel", nil, "submit"},
		{"POST", "/v1/batches", `{"inputs":[{"message":"a"}]}`, "submit"},
		{"POST", "/v1/approvals/nope/approve", map[string]any{}, "submit"},
		{"GET", "/v1/runs", nil, "read"},
		{"GET", "/v1/runs/" + run.ID, nil, "read"},
		{"GET", "/v1/batches", nil, "read"},
		{"GET", "/v1/approvals", nil, "read"},
		{"GET", "/v1/agents", nil, "read"},
		{"GET", "/v1/tenants/acme/usage", nil, "read"},
	}
	for name, key := range keys {
		for _, rt := range routes {
			r := e.do(rt.method, rt.path, key, rt.body)
			allowed := name == "all" || strings.Contains(name, rt.need)
			if allowed {
				require.NotEqual(t, http.StatusForbidden, r.status, "%s key, %s %s: %s", name, rt.method, rt.path, r)
				continue
			}
			requireError(t, r, http.StatusForbidden, "forbidden", `needs the "`+rt.need+`" scope`, "this api key has the scopes "+name)
		}
	}
	// The admin token is not a key: it needs no scope.
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/runs?tenant=acme", adminToken, nil).status)

	// Bad scopes are refused and make no key.
	before := len(decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys", all, nil), http.StatusOK).Keys)
	requireError(t, e.do("POST", "/v1/tenants/acme/keys", all, map[string]any{"name": "x", "scopes": []string{"write"}}),
		http.StatusUnprocessableEntity, "unprocessable", `"write" is not a scope`)
	requireError(t, e.do("POST", "/v1/tenants/acme/keys", all, map[string]any{"name": "x", "scopes": []string{}}),
		http.StatusUnprocessableEntity, "unprocessable", "scopes is empty")
	require.Len(t, decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys", all, nil), http.StatusOK).Keys, before)

	// A scoped key looked up from the cache keeps its scopes, and its
	// revocation holds at once.
	for range 2 {
		requireError(t, e.do("POST", "/v1/runs", keys["read"], map[string]any{"message": "go"}), http.StatusForbidden, "forbidden")
	}
	var readID string
	for _, k := range decode[wire.APIKeyList](t, e.do("GET", "/v1/tenants/acme/keys", all, nil), http.StatusOK).Keys {
		if k.Name == "dashboard" {
			readID = k.ID
			require.Equal(t, []string{"read"}, k.Scopes)
		}
	}
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/tenants/acme/keys/"+readID, all, nil).status)
	requireError(t, e.do("GET", "/v1/runs", keys["read"], nil), http.StatusUnauthorized, "unauthorized")
}

// TestEveryRouteHasItsScope pins the scope each route needs of a
// tenant's key (those that authenticate): a new route is read (GET) or
// admin until it is given a rule, and this table must name it.
func TestEveryRouteHasItsScope(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"POST /v1/runs":                                          "submit",
		"GET /v1/runs":                                           "read",
		"GET /v1/runs/{id}":                                      "read",
		"GET /v1/runs/{id}/events":                               "read",
		"GET /v1/runs/{id}/steps":                                "read",
		"POST /v1/runs/{id}/cancel":                              "submit",
		"DELETE /v1/runs/{id}":                                   "submit",
		"POST /v1/tenants":                                       "admin",
		"GET /v1/tenants/{id}":                                   "read",
		"PUT /v1/tenants/{id}":                                   "admin",
		"GET /v1/tenants/{id}/usage":                             "read",
		"POST /v1/triggers":                                      "admin",
		"GET /v1/triggers":                                       "admin",
		"GET /v1/triggers/{id}":                                  "admin",
		"PATCH /v1/triggers/{id}":                                "admin",
		"DELETE /v1/triggers/{id}":                               "admin",
		"GET /v1/triggers/{id}/deliveries":                       "admin",
		"POST /v1/triggers/{id}/test":                            "admin",
		"POST /v1/batches":                                       "submit",
		"GET /v1/batches":                                        "read",
		"GET /v1/batches/{id}":                                   "read",
		"GET /v1/batches/{id}/results":                           "read",
		"GET /v1/batches/{id}/stats":                             "read",
		"GET /v1/tenants/{id}/stats":                             "read",
		"GET /v1/fleet/stats":                                    "read",
		"POST /v1/batches/{id}/cancel":                           "submit",
		"POST /v1/batches/{id}/retry":                            "submit",
		"POST /v1/tenants/{id}/callback-secret":                  "admin",
		"POST /v1/tenants/{id}/keys":                             "admin",
		"GET /v1/tenants/{id}/keys":                              "admin",
		"DELETE /v1/tenants/{id}/keys/{key}":                     "admin",
		"GET /v1/tenants/{id}/nats-creds":                        "admin",
		"DELETE /v1/tenants/{id}/nats-creds":                     "admin",
		"PUT /v1/agents/{name}":                                  "admin",
		"GET /v1/agents":                                         "read",
		"GET /v1/agents/{name}":                                  "read",
		"DELETE /v1/agents/{name}":                               "admin",
		"GET /v1/approvals":                                      "read",
		"GET /v1/approvals/{id}":                                 "read",
		"POST /v1/approvals/{id}/approve":                        "submit",
		"POST /v1/approvals/{id}/deny":                           "submit",
		"GET /v1/events":                                         "read",
		"GET /v1/tenants":                                        "read",
		"POST /v1/triggers/{id}/deliveries/{delivery}/redeliver": "admin",
		"PUT /v1/secrets/{name}":                                 "admin",
		"GET /v1/secrets":                                        "admin",
		"GET /v1/secrets/{name}":                                 "admin",
		"DELETE /v1/secrets/{name}":                              "admin",
		"POST /v1/secrets/rekey":                                 "admin",
		"PUT /v1/skills/{name}":                                  "admin",
		"GET /v1/skills":                                         "admin",
		"GET /v1/skills/{name}":                                  "admin",
		"DELETE /v1/skills/{name}":                               "admin",
		"POST /v1/runs/{id}/skill":                               "admin",
		"GET /v1/sessions":                                       "read",
		"GET /v1/sessions/{id}":                                  "read",
		"DELETE /v1/sessions/{id}":                               "submit",
	}
	// Routes that take no key.
	public := map[string]bool{"POST /v1/hooks/{id}": true, "GET /metrics": true, "GET /healthz": true, "GET /readyz": true,
		"GET /v1/openapi.json": true, "/": true, "GET /{$}": true, "GET /console/": true}
	e := newEnv(t)
	for _, r := range e.api.Routes() {
		if public[r] {
			continue
		}
		need, ok := want[r]
		require.True(t, ok, "route %s has no scope in this table: add it (and a scopeRules entry if the default is wrong)", r)
		require.Equal(t, need, api.ScopeForTest(r), r)
		delete(want, r)
	}
	require.Empty(t, want, "routes in the table the server does not serve")
}
