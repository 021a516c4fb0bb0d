package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	_, err := api.New(api.Config{})
	require.Error(t, err)
	e := newEnv(t)
	_, err = api.New(api.Config{Store: e.store, Bus: e.bus, MaxBodyBytes: -1})
	require.Error(t, err)
}

// authedEndpoints is every endpoint that needs a token.
var authedEndpoints = []struct{ method, path string }{
	{"POST", "/v1/runs"},
	{"GET", "/v1/runs"},
	{"GET", "/v1/runs/r1"},
	{"GET", "/v1/runs/r1/events"},
	{"POST", "/v1/runs/r1/cancel"},
	{"POST", "/v1/tenants"},
	{"GET", "/v1/tenants/acme"},
	{"PUT", "/v1/tenants/acme"},
	{"GET", "/v1/tenants/acme/usage"},
	{"POST", "/v1/tenants/acme/keys"},
	{"GET", "/v1/tenants/acme/keys"},
	{"DELETE", "/v1/tenants/acme/keys/key_1"},
}

func TestAuthRejectsMissingGarbledAndUnknownTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	cases := []struct {
		name, header string
		want         []string
	}{
		{"missing", "", []string{"missing bearer token", "Authorization: Bearer"}},
		{"basic scheme", "Basic YWRtaW46c2VjcmV0", []string{"missing bearer token", "Authorization: Bearer"}},
		{"scheme only", "Bearer", []string{"missing bearer token"}},
		{"empty token", "Bearer ", []string{"missing bearer token"}},
		{"key without scheme", key, []string{"missing bearer token"}},
		{"unknown key", "Bearer af_not-a-key", []string{"invalid API key"}},
		{"key with extra space", "Bearer  " + key, []string{"invalid API key"}},
		{"truncated key", "Bearer " + key[:len(key)-1], []string{"invalid API key"}},
		{"admin token prefix", "Bearer " + adminToken[:5], []string{"invalid API key"}},
	}
	for _, c := range cases {
		for _, ep := range authedEndpoints {
			t.Run(c.name+"/"+ep.method+ep.path, func(t *testing.T) {
				e := e.sub(t)
				var hdr []string
				if c.header != "" {
					hdr = []string{"Authorization", c.header}
				}
				r := e.do(ep.method, ep.path, "", nil, hdr...)
				requireError(t, r, http.StatusUnauthorized, "unauthorized", c.want...)
				require.Equal(t, `Bearer realm="agentfleet"`, r.header.Get("WWW-Authenticate"))
			})
		}
	}
	// The auth scheme is case-insensitive (RFC 9110 §11.1).
	r := e.do("GET", "/v1/runs", "", nil, "Authorization", "bearer "+key)
	require.Equal(t, http.StatusOK, r.status, "answer: %s", r)
}

func TestAdminEndpointsRefuseTenantKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/tenants", map[string]any{"id": "evil"}},
		{"PUT", "/v1/tenants/acme", map[string]any{"weight": 1000}},
		{"PUT", "/v1/tenants/other", map[string]any{"weight": 1000}},
	} {
		requireError(t, e.do(c.method, c.path, key, c.body), http.StatusForbidden, "forbidden", "admin token")
	}
	// Nothing changed.
	v := decode[wire.TenantView](t, e.do("GET", "/v1/tenants/acme", key, nil), http.StatusOK)
	require.Equal(t, 1, v.Weight)
	requireError(t, e.do("GET", "/v1/tenants/evil", adminToken, nil), http.StatusNotFound, "not_found")
	require.Empty(t, e.changed)
}

func TestAdminTokenWorksOnTenantEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keyA, keyB := e.tenant("acme"), e.tenant("globex")
	runA := e.createRun(keyA, map[string]any{"message": "a"})
	runB := e.createRun(keyB, map[string]any{"message": "b"})

	got := e.getRun(adminToken, runA.ID)
	require.Equal(t, runA.ID, got.ID)
	require.Equal(t, "acme", got.Tenant)

	// The admin lists every tenant's runs, or one tenant's with ?tenant=.
	all := decode[wire.RunList](t, e.do("GET", "/v1/runs", adminToken, nil), http.StatusOK)
	require.ElementsMatch(t, []string{runA.ID, runB.ID}, runIDs(all.Runs))
	only := decode[wire.RunList](t, e.do("GET", "/v1/runs?tenant=globex", adminToken, nil), http.StatusOK)
	require.Equal(t, []string{runB.ID}, runIDs(only.Runs))

	v := decode[wire.TenantView](t, e.do("GET", "/v1/tenants/acme", adminToken, nil), http.StatusOK)
	require.Equal(t, "acme", v.ID)
	require.Empty(t, v.APIKey, "the key is shown once, at creation")
	decode[wire.UsageReport](t, e.do("GET", "/v1/tenants/acme/usage", adminToken, nil), http.StatusOK)

	s := e.openEvents(adminToken, "/v1/runs/"+runA.ID+"/events")
	require.Equal(t, agentfleet.EventQueued, s.frame().Type)

	c := decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+runA.ID+"/cancel", adminToken, nil), http.StatusAccepted)
	require.Equal(t, agentfleet.StatusCancelled, c.Status)
	require.Equal(t, []agentfleet.EventType{agentfleet.EventCancelled, agentfleet.EventDone}, eventTypes(s.frames(2)))
	s.requireEnd()

	// Runs belong to a tenant: the admin cannot submit one.
	requireError(t, e.do("POST", "/v1/runs", adminToken, map[string]any{"message": "x"}),
		http.StatusUnprocessableEntity, "unprocessable", "tenant's API key")
}

func TestEmptyAdminTokenDisablesAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.AdminToken = "" })
	key, err := api.CreateTenant(e.ctx, e.store, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)

	for _, tok := range []string{adminToken, "x"} {
		requireError(t, e.do("POST", "/v1/tenants", tok, map[string]any{"id": "new"}), http.StatusUnauthorized, "unauthorized", "invalid API key")
		requireError(t, e.do("PUT", "/v1/tenants/acme", tok, map[string]any{"weight": 2}), http.StatusUnauthorized, "unauthorized")
		requireError(t, e.do("GET", "/v1/runs", tok, nil), http.StatusUnauthorized, "unauthorized")
	}
	// An empty bearer never matches the empty admin token.
	requireError(t, e.do("POST", "/v1/tenants", "", map[string]any{"id": "new"}, "Authorization", "Bearer "),
		http.StatusUnauthorized, "unauthorized")

	// Tenant keys still work, and still are not admin.
	decode[wire.RunList](t, e.do("GET", "/v1/runs", key, nil), http.StatusOK)
	decode[wire.TenantView](t, e.do("GET", "/v1/tenants/acme", key, nil), http.StatusOK)
	requireError(t, e.do("POST", "/v1/tenants", key, map[string]any{"id": "new"}), http.StatusForbidden, "forbidden")
}

// TestTenantIsolation: another tenant's run, events, cancel, tenant and
// usage are 404, exactly like ids that do not exist, so ids do not leak.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keyA, keyB := e.tenant("acme"), e.tenant("globex")
	runA := e.createRun(keyA, map[string]any{"message": "secret plans", "session_id": "s1"})
	runB := e.createRun(keyB, map[string]any{"message": "b", "session_id": "s1"})

	for _, c := range []struct {
		method, path, missing, want string
	}{
		{"GET", "/v1/runs/" + runA.ID, "/v1/runs/nope", "no run"},
		{"GET", "/v1/runs/" + runA.ID + "/events", "/v1/runs/nope/events", "no run"},
		{"POST", "/v1/runs/" + runA.ID + "/cancel", "/v1/runs/nope/cancel", "no run"},
		{"GET", "/v1/tenants/acme", "/v1/tenants/nope", "no tenant"},
		{"GET", "/v1/tenants/acme/usage", "/v1/tenants/nope/usage", "no tenant"},
		{"GET", "/v1/tenants/acme/usage?group_by=run", "/v1/tenants/nope/usage?group_by=run", "no tenant"},
	} {
		t.Run(c.method+c.path, func(t *testing.T) {
			e := e.sub(t)
			theirs := e.do(c.method, c.path, keyB, nil)
			msg := requireError(t, theirs, http.StatusNotFound, "not_found", c.want)
			require.NotContains(t, msg, "globex")
			missing := e.do(c.method, c.missing, keyB, nil)
			msgMissing := requireError(t, missing, http.StatusNotFound, "not_found", c.want)
			// Same answer as for an id that does not exist, but for the id.
			require.Equal(t, strings.ReplaceAll(msgMissing, "nope", "X"),
				strings.ReplaceAll(strings.ReplaceAll(msg, runA.ID, "X"), "acme", "X"))
		})
	}
	// The cancel attempt changed nothing.
	require.Equal(t, agentfleet.StatusQueued, e.getRun(keyA, runA.ID).Status)
	require.Len(t, e.storedEvents(runA.ID), 1)

	// Listing shows only one's own runs, whatever the query says.
	for _, q := range []string{"", "?tenant=acme", "?session_id=s1", "?status=queued"} {
		l := decode[wire.RunList](t, e.do("GET", "/v1/runs"+q, keyB, nil), http.StatusOK)
		require.Equal(t, []string{runB.ID}, runIDs(l.Runs), "query %q", q)
	}
	l := decode[wire.RunList](t, e.do("GET", "/v1/runs", keyA, nil), http.StatusOK)
	require.Equal(t, []string{runA.ID}, runIDs(l.Runs))
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	e := newEnv(t, func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	for _, path := range []string{"/healthz", "/readyz"} {
		r := e.do("GET", path, "", nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
	}
	require.JSONEq(t, `{"status":"ok"}`, string(e.do("GET", "/healthz", "", nil).body))
	require.JSONEq(t, `{"status":"ok","checks":{"store":"ok","nats":"ok"}}`, string(e.do("GET", "/readyz", "", nil).body))

	require.NoError(t, e.bus.Close())
	natsErr := e.bus.Ready(e.ctx)
	require.Error(t, natsErr)
	// A probe every second for a while: the same fixed answer each time,
	// and one log line with the cause, not one per probe.
	for range 5 {
		requireUnready(t, e.do("GET", "/readyz", "", nil), `{"store":"ok","nats":"failing"}`, natsErr)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "readiness check failing"), "logs: %s", logs)
	require.Contains(t, logs.String(), natsErr.Error(), "the cause is logged server-side")
	// Liveness does not depend on NATS.
	require.Equal(t, http.StatusOK, e.do("GET", "/healthz", "", nil).status)
}

func TestReadinessWithStoreClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, e.store.Close())
	_, storeErr := e.store.TenantList(e.ctx, store.TenantListParams{Limit: 1})
	require.Error(t, storeErr)
	requireUnready(t, e.do("GET", "/readyz", "", nil), `{"store":"failing","nats":"ok"}`, storeErr)
}

// requireUnready asserts a 503 from /readyz that names the checks and
// says nothing of the cause.
func requireUnready(t *testing.T, r reply, checks string, cause error) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, r.status, "answer: %s", r)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.JSONEq(t, `{"status":"unavailable","checks":`+checks+`}`, string(r.body))
	require.NotContains(t, string(r.body), cause.Error())
}

// TestMetricsNotOnAPIPort: the metrics name every tenant and need no key,
// so the API port does not serve them (the dispatcher serves them on a
// listener of its own, internal/fleet).
func TestMetricsNotOnAPIPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	for _, token := range []string{"", adminToken} {
		msg := requireError(t, e.do("GET", "/metrics", token, nil), http.StatusNotFound, "not_found", "AGENTFLEET_METRICS_LISTEN")
		require.NotContains(t, msg, "acme")
	}
}

func TestUnknownPathIs404JSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	for _, c := range []struct{ method, path, token string }{
		{"GET", "/", ""},
		{"GET", "/nope", ""},
		{"GET", "/v1/runz", key},
		{"GET", "/v2/runs", key},
		{"GET", "/v1/runs/x/y/z", key},
	} {
		requireError(t, e.do(c.method, c.path, c.token, nil), http.StatusNotFound, "not_found", "no such endpoint", c.method+" "+c.path)
	}
}

func runIDs(runs []agentfleet.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// rawJSON decodes a JSON object into a map to check which keys it has.
func rawJSON(t *testing.T, data []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &m), "%s", data)
	return m
}
