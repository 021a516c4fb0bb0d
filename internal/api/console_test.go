package api_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// tenantFrame reads the next event of GET /v1/events: its id is its
// position in the events stream.
func (s *sseStream) tenantFrame() (uint64, agentfleet.Event) {
	s.t.Helper()
	f, err := s.next()
	require.NoError(s.t, err)
	pos, err := strconv.ParseUint(f.id, 10, 64)
	require.NoError(s.t, err, "id: %q", f.id)
	ev := decodeEvent(s.t, f)
	return pos, ev
}

// position reads the first block of GET /v1/events: an id alone.
func (s *sseStream) position() uint64 {
	s.t.Helper()
	f, err := s.next()
	require.NoError(s.t, err)
	require.Empty(s.t, f.data, "the first block is a position, not an event")
	pos, err := strconv.ParseUint(f.id, 10, 64)
	require.NoError(s.t, err, "id: %q", f.id)
	return pos
}

func decodeEvent(t *testing.T, f sseFrame) agentfleet.Event {
	t.Helper()
	var ev agentfleet.Event
	require.NoError(t, json.Unmarshal([]byte(f.data), &ev), "data: %s", f.data)
	require.Equal(t, string(ev.Type), f.event, "event: is the event's type")
	return ev
}

// publishTurn starts run and commits its only turn, publishing the
// events, as a worker does.
func (e *env) publishTurn(runID string) {
	e.t.Helper()
	e.complete(runID)
	require.NoError(e.t, e.bus.PublishEvents(e.ctx, e.storedEvents(runID)[1:]))
}

// TestEventsOfTheTenant: GET /v1/events streams every run's events of
// the caller's tenant and no other's, each with its stream position as
// id; a client resuming with Last-Event-ID gets exactly what came after,
// including what was published while it was away.
func TestEventsOfTheTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme, globex := e.tenant("acme"), e.tenant("globex")
	old := e.createRun(acme, map[string]any{"message": "before the stream opened"})

	s := e.openEvents(acme, "/v1/events")
	start := s.position()
	require.NotZero(t, start, "the stream holds the older run's queued event")

	run := e.createRun(acme, map[string]any{"message": "one"})
	e.createRun(globex, map[string]any{"message": "not acme's"})
	pos, ev := s.tenantFrame()
	require.Greater(t, pos, start)
	require.Equal(t, run.ID, ev.RunID, "the older run's history is not replayed")
	require.Equal(t, agentfleet.EventQueued, ev.Type)
	require.Equal(t, "acme", ev.Tenant)

	e.publishTurn(run.ID)
	var got []agentfleet.EventType
	var last uint64
	for range 2 {
		p, ev := s.tenantFrame()
		require.Equal(t, run.ID, ev.RunID)
		require.Greater(t, p, pos, "positions increase")
		pos, last = p, p
		got = append(got, ev.Type)
	}
	require.Equal(t, []agentfleet.EventType{agentfleet.EventStarted, agentfleet.EventModelCall}, got)

	// Away: the rest of the run and another run are published.
	e.publishTurn(old.ID)
	resumed := e.openEvents(acme, "/v1/events", "Last-Event-ID", strconv.FormatUint(last, 10))
	require.Equal(t, last, resumed.position())
	var rest []string
	for range 2 + 4 {
		_, ev := resumed.tenantFrame()
		rest = append(rest, ev.RunID+" "+string(ev.Type))
	}
	require.Equal(t, []string{
		run.ID + " response", run.ID + " done",
		old.ID + " started", old.ID + " model_call", old.ID + " response", old.ID + " done",
	}, rest)

	// A client that reconnects before any event came resumes from the
	// position the stream started after, and misses nothing either.
	fromStart := e.openEvents(acme, "/v1/events?after="+strconv.FormatUint(start, 10))
	require.Equal(t, start, fromStart.position())
	_, ev = fromStart.tenantFrame()
	require.Equal(t, run.ID, ev.RunID)
	require.Equal(t, agentfleet.EventQueued, ev.Type)
}

// TestEventsAdmin: the admin token streams every tenant's events, or one
// tenant's with ?tenant=.
func TestEventsAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme, globex := e.tenant("acme"), e.tenant("globex")
	a := e.createRun(acme, map[string]any{"message": "a"})
	g := e.createRun(globex, map[string]any{"message": "g"})

	all := e.openEvents(adminToken, "/v1/events?after=0")
	require.Zero(t, all.position())
	_, first := all.tenantFrame()
	_, second := all.tenantFrame()
	require.Equal(t, []string{a.ID, g.ID}, []string{first.RunID, second.RunID})

	one := e.openEvents(adminToken, "/v1/events?after=0&tenant=globex")
	one.position()
	_, ev := one.tenantFrame()
	require.Equal(t, g.ID, ev.RunID)

	// A tenant key's ?tenant= is its own tenant whatever it says.
	own := e.openEvents(acme, "/v1/events?after=0&tenant=globex")
	own.position()
	_, ev = own.tenantFrame()
	require.Equal(t, a.ID, ev.RunID)
}

func TestEventsErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	requireError(t, e.do("GET", "/v1/events", "", nil), http.StatusUnauthorized, "unauthorized")
	requireError(t, e.do("GET", "/v1/events", key, nil, "Last-Event-ID", "x"), http.StatusBadRequest, "bad_request", "Last-Event-ID", "position")
	requireError(t, e.do("GET", "/v1/events?after=-1", key, nil), http.StatusBadRequest, "bad_request", "after")
	requireError(t, e.do("GET", "/v1/events?tenant=a.b", adminToken, nil), http.StatusBadRequest, "bad_request", "tenant")
	require.NoError(t, e.bus.Close())
	requireError(t, e.do("GET", "/v1/events", key, nil), http.StatusServiceUnavailable, "unavailable", "try again")
}

// TestTenantList: the admin pages through tenants newest first, with
// their budgets; a tenant's key lists its own tenant alone.
func TestTenantList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var keys []string
	for _, id := range []string{"t1", "t2", "t3"} {
		keys = append(keys, e.tenant(id))
	}
	limit := int64(5000)
	_, err := e.store.TenantUpdate(e.ctx, store.TenantUpdateParams{ID: "t2", TokenLimit: &limit})
	require.NoError(t, err)

	var ids []string
	cursor := ""
	for pages := 1; ; pages++ {
		page := decode[wire.TenantList](t, e.do("GET", "/v1/tenants?limit=2&cursor="+cursor, adminToken, nil), http.StatusOK)
		for _, v := range page.Tenants {
			ids = append(ids, v.ID)
			if v.ID == "t2" {
				require.EqualValues(t, 5000, v.Budget.Limit)
				require.Equal(t, agentfleet.WindowDay, v.Budget.Window)
			}
		}
		if page.NextCursor == "" {
			require.Equal(t, 2, pages)
			break
		}
		cursor = page.NextCursor
	}
	require.ElementsMatch(t, []string{"t1", "t2", "t3"}, ids)

	raw := e.do("GET", "/v1/tenants", adminToken, nil)
	require.Contains(t, string(raw.body), `"tenants":[{"id":"t3",`, "newest first")
	require.Contains(t, string(raw.body), `"waiting_runs":0`)

	own := decode[wire.TenantList](t, e.do("GET", "/v1/tenants", keys[1], nil), http.StatusOK)
	require.Len(t, own.Tenants, 1)
	require.Equal(t, "t2", own.Tenants[0].ID)
	require.Empty(t, own.NextCursor)

	requireError(t, e.do("GET", "/v1/tenants?cursor=nope", adminToken, nil), http.StatusBadRequest, "bad_request", "cursor")
	requireError(t, e.do("GET", "/v1/tenants?limit=0", adminToken, nil), http.StatusBadRequest, "bad_request", "limit")
	requireError(t, e.do("GET", "/v1/tenants", "", nil), http.StatusUnauthorized, "unauthorized")
}

// TestConsoleMounted: with a console, / and /console/... are its; every
// other path stays the API's, and without one / is a JSON 404.
func TestConsoleMounted(t *testing.T) {
	t.Parallel()
	served := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("console " + r.URL.Path)) })
	e := newEnv(t, func(c *api.Config) { c.Console = served })
	for _, path := range []string{"/", "/console/js/main.js"} {
		r := e.do("GET", path, "", nil)
		require.Equal(t, http.StatusOK, r.status, path)
		require.Equal(t, "console "+path, string(r.body))
	}
	requireError(t, e.do("GET", "/other", "", nil), http.StatusNotFound, "not_found", "no such endpoint")
	requireError(t, e.do("POST", "/", "", nil), http.StatusNotFound, "not_found")
	requireError(t, e.do("GET", "/v1/runs", "", nil), http.StatusUnauthorized, "unauthorized")

	bare := newEnv(t)
	requireError(t, bare.do("GET", "/", "", nil), http.StatusNotFound, "not_found", "no such endpoint")
}
