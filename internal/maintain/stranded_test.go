package maintain_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/outbox"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// The sweeps' tests run against real parts, as the API's do: an embedded
// NATS server with JetStream and a SQLite file; no worker or scheduler
// runs, so a run moves only as a test drives it through the store.

type env struct {
	t     *testing.T
	ctx   context.Context
	store *sqlite.Store
	bus   *bus.Bus
	turns *bustest.Turns // on AF_RUNQ
}

// newEnv starts NATS and opens a SQLite store with tenant acme.
func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := t.Context()
	b := bustest.Connect(t, bustest.StartServer(t))
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "maintain.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	return &env{t: t, ctx: ctx, store: st, bus: b, turns: bustest.NewTurns(b, bus.QueueRunQ, "maintaintest")}
}

// createRun admits a run of acme as POST /v1/runs does: recorded, then
// its queued event and first turn published.
func (e *env) createRun(message string) agentfleet.Run {
	e.t.Helper()
	run := e.recordOnly("acme", message, "")
	evs, err := e.store.EventListByRun(e.ctx, store.EventListByRunParams{RunID: run.ID})
	require.NoError(e.t, err)
	o := outbox.Outbox{Bus: e.bus, Store: e.store, Log: slog.New(slog.DiscardHandler)}
	require.NoError(e.t, o.Admitted(e.ctx, store.RunCreateResult{Run: run, Events: evs, Startable: true}, ""))
	return run
}

func (e *env) nextTurn() bus.Turn { e.t.Helper(); return e.turns.Next(e.t) }

func (e *env) queued() uint64 { e.t.Helper(); return bustest.Depth(e.t, e.bus, bus.QueueRunQ) }

func (e *env) liveEvents(f bus.EventFilter) <-chan agentfleet.Event {
	e.t.Helper()
	return bustest.Events(e.t, e.bus, f)
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return bustest.Recv(t, ch, what)
}

// start starts a queued run as the worker that takes its first turn
// does.
func (e *env) start(runID string) {
	e.t.Helper()
	ld, err := e.store.TurnLoad(e.ctx, store.TurnLoadParams{RunID: runID, Turn: 1})
	require.NoError(e.t, err)
	require.True(e.t, ld.Started)
}

// scrape is reg's metrics as Prometheus reads them.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return rec.Body.String()
}

// recordOnly records a run as a submission does and publishes nothing, as
// when the dispatcher dies between the store and NATS.
func (e *env) recordOnly(tenant, message, session string) agentfleet.Run {
	e.t.Helper()
	res, err := e.store.RunCreate(e.ctx, store.RunCreateParams{
		Tenant: tenant, Agent: agentfleet.DefaultAgent, SessionID: session, Message: message,
		Events: []agentfleet.Event{{
			V: agentfleet.EventVersion, Tenant: tenant, SessionID: session,
			Type: agentfleet.EventQueued, TS: time.Now().UTC(), Content: message,
		}},
	})
	require.NoError(e.t, err)
	require.True(e.t, res.Created)
	return res.Run
}

// TestRequeueStranded: a run recorded but never queued is queued by the
// sweep, with its queued event, and a running run whose turn message is
// gone gets its next turn; runs whose turn waits in a queue, runs behind
// the head of their session and runs changed after the cutoff are left
// alone, and a second pass queues nothing more.
func TestRequeueStranded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t)
	requeued := func(status string) string {
		return `agentfleet_runs_requeued_total{status="` + status + `"}`
	}

	submitted := e.createRun("queued properly")
	stranded := e.recordOnly("acme", "stranded", "")
	head := e.recordOnly("acme", "stranded head", "s1")
	behind := e.recordOnly("acme", "behind the head", "s1")
	require.EqualValues(t, 1, e.queued())

	cutoff := time.Now()
	time.Sleep(5 * time.Millisecond)
	fresh := e.recordOnly("acme", "too new to tell", "")

	events := e.liveEvents(bus.EventFilter{Tenant: "acme", RunID: stranded.ID})
	sweep, err := maintain.NewStranded(maintain.StrandedConfig{Store: e.store, Bus: e.bus, Registerer: reg})
	require.NoError(t, err)
	n, err := sweep.Requeue(e.ctx, cutoff)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the stranded run and the stranded head of s1")
	require.EqualValues(t, 3, e.queued())
	metrics := scrape(t, reg)
	require.Contains(t, metrics, requeued("queued")+" 2")
	require.NotContains(t, metrics, requeued("running"))

	ev := recv(t, events, "the stranded run's queued event on NATS")
	require.Equal(t, agentfleet.EventQueued, ev.Type)
	require.EqualValues(t, 1, ev.Seq)
	require.Equal(t, "stranded", ev.Content)

	got := map[string]bus.Turn{}
	for range 3 {
		turn := e.nextTurn()
		got[turn.RunID] = turn
	}
	require.Equal(t, bus.Turn{RunID: stranded.ID, Tenant: "acme", Turn: 1}, got[stranded.ID])
	require.Equal(t, bus.Turn{RunID: head.ID, Tenant: "acme", Turn: 1}, got[head.ID])
	require.Contains(t, got, submitted.ID)
	require.NotContains(t, got, behind.ID)
	require.NotContains(t, got, fresh.ID)

	// Taking the turns off the queue without starting the runs would
	// strand them again; start them, as the worker that took them does,
	// and the next pass finds nothing to queue (the run behind s1's head
	// now waits for a run that is active).
	for _, r := range []agentfleet.Run{submitted, stranded, head} {
		e.start(r.ID)
	}
	n, err = sweep.Requeue(e.ctx, cutoff)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, e.queued())

	// A turn committed for one of them, as a worker would, short of the
	// end.
	_, err = e.store.TurnCommit(e.ctx, store.TurnCommitParams{
		RunID: stranded.ID, Turn: 1, Status: agentfleet.StatusRunning,
		Events: []agentfleet.Event{{Type: agentfleet.EventModelCall, Tokens: &agentfleet.Tokens{Prompt: 10, Completion: 5}}},
	})
	require.NoError(t, err)

	// Past a later cutoff, the fresh run is queued like the first two,
	// and the three running runs, whose turn messages are gone, are each
	// owed their next turn: straight to AF_WORK, marked Retried. A
	// second pass finds every turn waiting and queues nothing more.
	n, err = sweep.Requeue(e.ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, 4, n)
	n, err = sweep.Requeue(e.ctx, time.Now())
	require.NoError(t, err)
	require.Zero(t, n)
	require.EqualValues(t, 1, e.queued())
	require.Equal(t, fresh.ID, e.nextTurn().RunID)
	metrics = scrape(t, reg)
	require.Contains(t, metrics, requeued("queued")+" 3")
	require.Contains(t, metrics, requeued("running")+" 3")

	work, err := e.bus.TurnSource(e.ctx, bus.QueueWork, "apitest-work")
	require.NoError(t, err)
	got = map[string]bus.Turn{}
	for range 3 {
		d, err := work.Next(e.ctx)
		require.NoError(t, err)
		require.NoError(t, d.Ack(e.ctx))
		got[d.Turn.RunID] = d.Turn
	}
	require.Equal(t, map[string]bus.Turn{
		submitted.ID: {RunID: submitted.ID, Tenant: "acme", Turn: 1, Retried: true},
		head.ID:      {RunID: head.ID, Tenant: "acme", Turn: 1, Retried: true},
		stranded.ID:  {RunID: stranded.ID, Tenant: "acme", Turn: 2, Retried: true},
	}, got)
}
