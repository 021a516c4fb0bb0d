package api_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/store"
)

// DELETE /v1/runs/{id} deletes an ended run with its trace (204); a run
// that has not ended is 409 and stays as it was; an unknown run, or
// another tenant's, is 404. The admin token may delete any tenant's.
func TestRunDelete(t *testing.T) {
	t.Parallel()
	deleted := prometheus.NewCounter(prometheus.CounterOpts{Name: "deleted"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(deleted)
	count := func(t *testing.T) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		return mfs[0].GetMetric()[0].GetCounter().GetValue()
	}
	e := newEnv(t, func(c *api.Config) { c.RunsDeleted = deleted })
	key := e.tenant("acme")
	otherKey := e.tenant("other")

	t.Run("ended run goes with its trace", func(t *testing.T) {
		e := e.sub(t)
		run := e.createRun(key, map[string]any{"message": "m"})
		e.complete(run.ID)
		before := count(t)
		r := e.do("DELETE", "/v1/runs/"+run.ID, key, nil)
		require.Equal(t, http.StatusNoContent, r.status, "answer: %s", r)
		require.Empty(t, r.body)
		require.Equal(t, before+1, count(t))
		requireError(t, e.do("GET", "/v1/runs/"+run.ID, key, nil), http.StatusNotFound, "not_found")
		require.Empty(t, e.storedEvents(run.ID))
		steps, err := e.store.StepListByRun(e.ctx, store.StepListByRunParams{RunID: run.ID})
		require.NoError(t, err)
		require.Empty(t, steps)
		requireError(t, e.do("DELETE", "/v1/runs/"+run.ID, key, nil), http.StatusNotFound, "not_found", run.ID)
	})

	t.Run("unfinished run is a conflict", func(t *testing.T) {
		e := e.sub(t)
		queued := e.createRun(key, map[string]any{"message": "m"})
		running := e.createRun(key, map[string]any{"message": "m"})
		e.start(running.ID)
		for _, run := range []agentfleet.Run{queued, running} {
			status := e.getRun(key, run.ID).Status
			requireError(t, e.do("DELETE", "/v1/runs/"+run.ID, key, nil), http.StatusConflict, "conflict",
				string(status), "cancel it first", "/v1/runs/"+run.ID+"/cancel")
			require.Equal(t, status, e.getRun(key, run.ID).Status)
			require.NotEmpty(t, e.storedEvents(run.ID))
		}
		// Cancelled, it can go.
		decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+queued.ID+"/cancel", key, nil), http.StatusAccepted)
		require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/runs/"+queued.ID, key, nil).status)
	})

	t.Run("another tenant's run is not found", func(t *testing.T) {
		e := e.sub(t)
		run := e.createRun(key, map[string]any{"message": "m"})
		e.complete(run.ID)
		requireError(t, e.do("DELETE", "/v1/runs/"+run.ID, otherKey, nil), http.StatusNotFound, "not_found", run.ID)
		require.Equal(t, agentfleet.StatusCompleted, e.getRun(key, run.ID).Status)
		requireError(t, e.do("DELETE", "/v1/runs/nope", key, nil), http.StatusNotFound, "not_found", `no run "nope"`)
	})

	t.Run("admin deletes any tenant's", func(t *testing.T) {
		e := e.sub(t)
		run := e.createRun(key, map[string]any{"message": "m"})
		e.complete(run.ID)
		require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/runs/"+run.ID, adminToken, nil).status)
		requireError(t, e.do("GET", "/v1/runs/"+run.ID, key, nil), http.StatusNotFound, "not_found")
	})

	t.Run("needs a key", func(t *testing.T) {
		e := e.sub(t)
		requireError(t, e.do("DELETE", "/v1/runs/nope", "", nil), http.StatusUnauthorized, "unauthorized")
	})
}
