package api_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// GET /v1/sessions lists a tenant's sessions from their runs, newest
// updated first, paged and filtered by the latest run's agent; GET
// /v1/sessions/{id} reads one with its runs in order and its latest
// checkpoint; DELETE takes its runs once they have all ended (409
// before, 404 after). Another tenant's session of the same id is never
// seen; the admin token names the tenant.
func TestSessions(t *testing.T) {
	t.Parallel()
	deleted := prometheus.NewCounter(prometheus.CounterOpts{Name: "deleted"})
	e := newEnv(t, func(c *api.Config) { c.RunsDeleted = deleted })
	key := e.tenant("acme")
	otherKey := e.tenant("other")
	decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/coder", key, map[string]any{"system": "You code."}), http.StatusCreated)

	first := e.createRun(key, map[string]any{"message": "hello", "session_id": "chat"})
	e.complete(first.ID)
	other := e.createRun(key, map[string]any{"message": "elsewhere", "session_id": "side"})
	e.complete(other.ID)
	second := e.createRun(key, map[string]any{"message": "and then?", "session_id": "chat", "agent": "coder"})
	e.createRun(key, map[string]any{"message": "no session"})
	e.createRun(otherKey, map[string]any{"message": "theirs", "session_id": "chat"})

	t.Run("list", func(t *testing.T) {
		e := e.sub(t)
		l := decode[wire.SessionList](t, e.do("GET", "/v1/sessions", key, nil), http.StatusOK)
		require.Empty(t, l.NextCursor)
		require.Len(t, l.Sessions, 2)
		chat := l.Sessions[0]
		require.Equal(t, "chat", chat.ID, "updated last")
		require.Equal(t, "coder", chat.Agent, "the latest run's agent")
		require.Equal(t, 2, chat.Runs)
		require.Equal(t, second.ID, chat.LastRunID)
		require.Equal(t, agentfleet.StatusQueued, chat.LastStatus)
		require.EqualValues(t, 15, chat.Tokens, "the completed run's 10 + 5")
		require.Equal(t, first.CreatedAt, chat.CreatedAt)
		require.Equal(t, "side", l.Sessions[1].ID)

		p1 := decode[wire.SessionList](t, e.do("GET", "/v1/sessions?limit=1", key, nil), http.StatusOK)
		require.Equal(t, []wire.Session{chat}, p1.Sessions)
		require.NotEmpty(t, p1.NextCursor)
		p2 := decode[wire.SessionList](t, e.do("GET", "/v1/sessions?limit=1&cursor="+p1.NextCursor, key, nil), http.StatusOK)
		require.Len(t, p2.Sessions, 1)
		require.Equal(t, "side", p2.Sessions[0].ID)
		require.Empty(t, p2.NextCursor)

		byAgent := decode[wire.SessionList](t, e.do("GET", "/v1/sessions?agent=default", key, nil), http.StatusOK)
		require.Len(t, byAgent.Sessions, 1)
		require.Equal(t, "side", byAgent.Sessions[0].ID)

		theirs := decode[wire.SessionList](t, e.do("GET", "/v1/sessions", otherKey, nil), http.StatusOK)
		require.Len(t, theirs.Sessions, 1)
		require.Equal(t, 1, theirs.Sessions[0].Runs)
		admin := decode[wire.SessionList](t, e.do("GET", "/v1/sessions?tenant=acme", adminToken, nil), http.StatusOK)
		require.Len(t, admin.Sessions, 2)

		requireError(t, e.do("GET", "/v1/sessions?cursor=bogus", key, nil), http.StatusBadRequest, "bad_request", "cursor")
		requireError(t, e.do("GET", "/v1/sessions?limit=0", key, nil), http.StatusBadRequest, "bad_request", "limit")
		requireError(t, e.do("GET", "/v1/sessions?agent=a%20b", key, nil), http.StatusUnprocessableEntity, "unprocessable", "agent")
		requireError(t, e.do("GET", "/v1/sessions", adminToken, nil), http.StatusUnprocessableEntity, "unprocessable", "?tenant=")
		requireError(t, e.do("GET", "/v1/sessions?tenant=other", key, nil), http.StatusNotFound, "not_found")
		requireError(t, e.do("GET", "/v1/sessions?tenant=nobody", adminToken, nil), http.StatusNotFound, "not_found", `no tenant "nobody"`)
	})

	t.Run("get", func(t *testing.T) {
		e := e.sub(t)
		v := decode[wire.SessionView](t, e.do("GET", "/v1/sessions/side", key, nil), http.StatusOK)
		require.Equal(t, "side", v.Session.ID)
		require.Len(t, v.Runs, 1)
		require.Equal(t, "elsewhere", v.Runs[0].Message)
		require.JSONEq(t, `"42"`, string(v.Runs[0].Answer))
		require.Nil(t, v.Checkpoint)

		// A summary step of the session's latest run is its checkpoint.
		e.start(second.ID)
		_, err := e.store.TurnCommit(e.ctx, store.TurnCommitParams{RunID: second.ID, Turn: 1, Status: agentfleet.StatusRunning,
			Steps: []agentfleet.Step{{Kind: agentfleet.StepModel, Content: "reply"}, {Kind: agentfleet.StepSummary, Content: "so far: hello"}}})
		require.NoError(t, err)
		v = decode[wire.SessionView](t, e.do("GET", "/v1/sessions/chat", key, nil), http.StatusOK)
		require.Equal(t, []string{first.ID, second.ID}, []string{v.Runs[0].ID, v.Runs[1].ID}, "oldest first")
		require.NotNil(t, v.Checkpoint)
		require.Equal(t, second.ID, v.Checkpoint.RunID)
		require.Equal(t, agentfleet.StepSummary, v.Checkpoint.Kind)
		require.Equal(t, "so far: hello", v.Checkpoint.Content)

		requireError(t, e.do("GET", "/v1/sessions/nope", key, nil), http.StatusNotFound, "not_found", `no session "nope"`)
		theirs := decode[wire.SessionView](t, e.do("GET", "/v1/sessions/chat", otherKey, nil), http.StatusOK)
		require.Len(t, theirs.Runs, 1)
		require.Equal(t, "theirs", theirs.Runs[0].Message)
	})

	t.Run("delete", func(t *testing.T) {
		e := e.sub(t)
		before := counterValue(t, deleted)
		r := e.createRun(key, map[string]any{"message": "m", "session_id": "gone"})
		e.complete(r.ID)
		waiting := e.createRun(key, map[string]any{"message": "m2", "session_id": "gone"})
		requireError(t, e.do("DELETE", "/v1/sessions/gone", key, nil), http.StatusConflict, "conflict",
			waiting.ID, "queued", "/v1/runs/"+waiting.ID+"/cancel")
		require.Equal(t, agentfleet.StatusCompleted, e.getRun(key, r.ID).Status, "nothing deleted")
		requireError(t, e.do("DELETE", "/v1/sessions/gone", otherKey, nil), http.StatusNotFound, "not_found")

		decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+waiting.ID+"/cancel", key, nil), http.StatusAccepted)
		d := decode[wire.SessionDeleted](t, e.do("DELETE", "/v1/sessions/gone", key, nil), http.StatusOK)
		require.Equal(t, wire.SessionDeleted{ID: "gone", Deleted: 2}, d)
		require.Equal(t, before+2, counterValue(t, deleted))
		requireError(t, e.do("GET", "/v1/runs/"+r.ID, key, nil), http.StatusNotFound, "not_found")
		require.Empty(t, e.storedEvents(r.ID))
		requireError(t, e.do("GET", "/v1/sessions/gone", key, nil), http.StatusNotFound, "not_found")
		requireError(t, e.do("DELETE", "/v1/sessions/gone", key, nil), http.StatusNotFound, "not_found", `no session "gone"`)

		// The admin token deletes a tenant's session it names.
		x := e.createRun(otherKey, map[string]any{"message": "m", "session_id": "adm"})
		e.complete(x.ID)
		d = decode[wire.SessionDeleted](t, e.do("DELETE", "/v1/sessions/adm?tenant=other", adminToken, nil), http.StatusOK)
		require.Equal(t, 1, d.Deleted)
	})
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}
