package outbox

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
)

// recorder is a Bus and a Store that record what the outbox does.
type recorder struct {
	events   []agentfleet.Event
	turns    []bus.Turn
	controls []string
	ended    []string
	family   store.RunFamilySettleResult
	failTurn error
}

func (r *recorder) PublishEvents(_ context.Context, evs []agentfleet.Event) error {
	r.events = append(r.events, evs...)
	return nil
}

func (r *recorder) PublishEventsBulk(ctx context.Context, evs []agentfleet.Event) error {
	return r.PublishEvents(ctx, evs)
}

func (r *recorder) EnqueueTurn(_ context.Context, t bus.Turn) error {
	if r.failTurn != nil {
		return r.failTurn
	}
	r.turns = append(r.turns, t)
	return nil
}

func (r *recorder) PublishControl(_ context.Context, _, runID, verb string) error {
	r.controls = append(r.controls, runID+"/"+verb)
	return nil
}

func (r *recorder) RunFamilySettle(_ context.Context, p store.RunFamilySettleParams) (store.RunFamilySettleResult, error) {
	r.ended = append(r.ended, p.ID)
	return r.family, nil
}

func ev(run string) agentfleet.Event { return agentfleet.Event{RunID: run, Type: agentfleet.EventLog} }

// Every turn a run is owed carries its class and wake, whoever builds it.
func TestTurns(t *testing.T) {
	t.Parallel()
	run := agentfleet.Run{ID: "r1", Tenant: "acme", Turn: 2, Wake: 5}
	batch := run
	batch.BatchID = "b1"
	for name, c := range map[string]struct {
		got, want bus.Turn
	}{
		"first":         {bus.FirstTurn(run), bus.Turn{RunID: "r1", Tenant: "acme", Turn: 1, Wake: 5}},
		"first batch":   {bus.FirstTurn(batch), bus.Turn{RunID: "r1", Tenant: "acme", Turn: 1, Wake: 5, Batch: true}},
		"next":          {bus.NextTurn(run), bus.Turn{RunID: "r1", Tenant: "acme", Turn: 3, Wake: 5}},
		"next batch":    {bus.NextTurn(batch), bus.Turn{RunID: "r1", Tenant: "acme", Turn: 3, Wake: 5, Batch: true}},
		"decided":       {DecidedTurn(run), bus.Turn{RunID: "r1", Tenant: "acme", Turn: 3, Wake: 5, Retried: true}},
		"decided batch": {DecidedTurn(batch), bus.Turn{RunID: "r1", Tenant: "acme", Turn: 3, Wake: 5, Retried: true, Batch: true}},
	} {
		require.Equal(t, c.want, c.got, name)
	}
}

// A change that ended a run with a family publishes its events, starts
// its session's next run, settles the family and publishes what that
// changed: woken parents' next turns, released batch runs' first, a
// cancel for the children asked to stop.
func TestChangedSettlesTheFamily(t *testing.T) {
	t.Parallel()
	parent := agentfleet.Run{ID: "p", Tenant: "acme", Turn: 1, Wake: 1, Status: agentfleet.StatusRunning}
	released := agentfleet.Run{ID: "b2", Tenant: "acme", BatchID: "b"}
	r := &recorder{family: store.RunFamilySettleResult{
		Changes:  []store.RunChangeResult{{Run: parent, Events: []agentfleet.Event{ev("p")}}},
		Woken:    []agentfleet.Run{parent},
		Released: []agentfleet.Run{released},
		Stopping: []agentfleet.Run{{ID: "c", Tenant: "acme"}},
	}}
	o := Outbox{Bus: r, Store: r}
	next := agentfleet.Run{ID: "s2", Tenant: "acme"}
	ended := agentfleet.Run{ID: "r", Tenant: "acme", ParentRunID: "p", Status: agentfleet.StatusCompleted}
	require.NoError(t, o.Changed(t.Context(), store.RunChangeResult{Run: ended, Events: []agentfleet.Event{ev("r")}, SessionNext: &next}))
	require.Equal(t, []agentfleet.Event{ev("r"), ev("p")}, r.events)
	require.Equal(t, []string{"r"}, r.ended)
	require.Equal(t, []bus.Turn{
		{RunID: "s2", Tenant: "acme", Turn: 1},
		{RunID: "p", Tenant: "acme", Turn: 2, Wake: 1},
		{RunID: "b2", Tenant: "acme", Turn: 1, Batch: true},
	}, r.turns)
	require.Equal(t, []string{"c/cancel"}, r.controls)

	// A run that ended without a family settles nothing.
	r2 := &recorder{}
	require.NoError(t, Outbox{Bus: r2, Store: r2}.Changed(t.Context(), store.RunChangeResult{Run: agentfleet.Run{ID: "x", Status: agentfleet.StatusCompleted}}))
	require.Empty(t, r2.ended)
}

// A cancel that ended the run at once is a change; one left to the
// worker is a control message.
func TestCancelled(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	o := Outbox{Bus: r, Store: r}
	run := agentfleet.Run{ID: "r", Tenant: "acme", Status: agentfleet.StatusRunning}
	require.NoError(t, o.Cancelled(t.Context(), store.RunCancelResult{RunChangeResult: store.RunChangeResult{Run: run}}))
	require.Equal(t, []string{"r/cancel"}, r.controls)
	run.Status = agentfleet.StatusCancelled
	require.NoError(t, o.Cancelled(t.Context(), store.RunCancelResult{Immediate: true,
		RunChangeResult: store.RunChangeResult{Run: run, Events: []agentfleet.Event{ev("r")}}}))
	require.Equal(t, []agentfleet.Event{ev("r")}, r.events)
	require.Len(t, r.controls, 1)
}

// A turn that cannot be published is the caller's error; the rest is
// still published.
func TestFamilyReportsWhatFailed(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := &recorder{failTurn: boom}
	err := Outbox{Bus: r, Store: r}.Family(t.Context(), store.RunFamilySettleResult{
		Woken: []agentfleet.Run{{ID: "p", Tenant: "acme"}}, Stopping: []agentfleet.Run{{ID: "c", Tenant: "acme"}},
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, []string{"c/cancel"}, r.controls)
}
