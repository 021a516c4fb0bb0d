package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func TestRunEventsHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	run := e.createRun(key, map[string]any{"message": "m", "session_id": "s1"})
	e.complete(run.ID)
	want := []agentfleet.EventType{agentfleet.EventQueued, agentfleet.EventStarted, agentfleet.EventModelCall,
		agentfleet.EventResponse, agentfleet.EventDone}
	path := "/v1/runs/" + run.ID + "/events"

	t.Run("all", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		s := e.openEvents(key, path)
		evs := s.frames(len(want))
		s.requireEnd()
		require.Equal(t, want, eventTypes(evs))
		require.Equal(t, []int64{1, 2, 3, 4, 5}, seqs(evs), "ids are dense from 1")
		for _, ev := range evs {
			require.Equal(t, run.ID, ev.RunID)
			require.Equal(t, "acme", ev.Tenant)
			require.Equal(t, "s1", ev.SessionID)
			require.Equal(t, agentfleet.EventVersion, ev.V)
			require.False(t, ev.TS.IsZero())
		}
		require.Equal(t, "m", evs[0].Content)
		require.Equal(t, &agentfleet.Tokens{Prompt: 10, Completion: 5}, evs[2].Tokens)
		require.Equal(t, 1, evs[2].Turn)
		require.Equal(t, "42", evs[3].Content)
	})
	for _, c := range []struct {
		name  string
		query string
		hdr   []string
		from  int64 // first seq expected; 6 means none
	}{
		{"Last-Event-ID", "", []string{"Last-Event-ID", "2"}, 3},
		{"Last-Event-ID 0", "", []string{"Last-Event-ID", "0"}, 1},
		{"after", "?after=3", nil, 4},
		{"header wins over after", "?after=1", []string{"Last-Event-ID", "4"}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := e.sub(t)
			s := e.openEvents(key, path+c.query, c.hdr...)
			evs := s.frames(int(6 - c.from))
			s.requireEnd()
			for i, ev := range evs {
				require.Equal(t, c.from+int64(i), ev.Seq)
				require.Equal(t, want[ev.Seq-1], ev.Type)
			}
		})
	}
	// Resuming after the end of an ended run is 204 at once, rather than a
	// stream that waits for ever: an EventSource reconnects after every
	// stream with the id of done, and 204 tells it to stop.
	t.Run("after the end", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		for _, c := range []struct {
			query string
			hdr   []string
		}{
			{"", []string{"Last-Event-ID", "5"}},
			{"?after=5", nil},
			{"?after=99", nil},
		} {
			r := e.do("GET", path+c.query, key, nil, c.hdr...)
			require.Equal(t, http.StatusNoContent, r.status, "answer: %s", r)
			require.Empty(t, r.body)
		}
		// One event short of the end is the done event, then the end.
		s := e.openEvents(key, path, "Last-Event-ID", "4")
		require.Equal(t, agentfleet.EventDone, s.frame().Type)
		s.requireEnd()
	})
	t.Run("bad resume point", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		for _, c := range []struct {
			query string
			hdr   []string
			want  string
		}{
			{"", []string{"Last-Event-ID", "abc"}, `Last-Event-ID "abc"`},
			{"", []string{"Last-Event-ID", "-1"}, `Last-Event-ID "-1"`},
			{"", []string{"Last-Event-ID", "1.5"}, `Last-Event-ID "1.5"`},
			{"?after=x", nil, `after "x"`},
			{"?after=-3", nil, `after "-3"`},
		} {
			requireError(t, e.do("GET", path+c.query, key, nil, c.hdr...), http.StatusBadRequest, "bad_request", c.want, "event seq")
		}
	})
	t.Run("unknown run", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		requireError(t, e.do("GET", "/v1/runs/nope/events", key, nil), http.StatusNotFound, "not_found", `no run "nope"`)
	})
}

// TestRunEventsDataShape: data: is the event JSON of docs/api.md, "Events".
func TestRunEventsDataShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	run := e.createRun(key, map[string]any{"message": "m"})
	e.complete(run.ID)
	s := e.openEvents(key, "/v1/runs/"+run.ID+"/events?after=2")
	f, err := s.next()
	require.NoError(t, err)
	require.Equal(t, "3", f.id)
	require.Equal(t, "model_call", f.event)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(f.data), &m))
	for _, k := range []string{"v", "run_id", "tenant", "seq", "turn", "type", "ts", "tokens"} {
		require.Contains(t, m, k)
	}
	require.JSONEq(t, `{"prompt":10,"completion":5}`, string(m["tokens"]))
}

// TestRunEventsLive: events published while the client waits arrive, a
// gap in what NATS delivers is filled from the store, and the stream ends
// after done.
func TestRunEventsLive(t *testing.T) {
	t.Parallel()
	e, _, run, s := watchNewRun(t)

	// A worker starts the run: store first, then NATS.
	ch, err := e.store.RunTransition(e.ctx, store.RunTransitionParams{ID: run.ID, To: agentfleet.StatusRunning,
		Events: []agentfleet.Event{{Type: agentfleet.EventStarted}}})
	require.NoError(t, err)
	require.NoError(t, e.bus.PublishEvents(e.ctx, ch.Events))
	ev := s.frame()
	require.Equal(t, agentfleet.EventStarted, ev.Type)
	require.EqualValues(t, 2, ev.Seq)

	// Three more are stored, but only the last is published (yet): the
	// stream fills the gap from the store, in order.
	evs, err := e.store.EventAppend(e.ctx, store.EventAppendParams{RunID: run.ID, Events: []agentfleet.Event{
		{Type: agentfleet.EventLog, Content: "a"}, {Type: agentfleet.EventLog, Content: "b"}, {Type: agentfleet.EventWarning, Content: "c"},
	}})
	require.NoError(t, err)
	require.NoError(t, e.bus.PublishEvents(e.ctx, evs[2:]))
	got := s.frames(3)
	require.Equal(t, []int64{3, 4, 5}, seqs(got))
	require.Equal(t, []string{"a", "b", "c"}, []string{got[0].Content, got[1].Content, got[2].Content})
	// The late publishes of 3 and 4 are not sent twice.
	require.NoError(t, e.bus.PublishEvents(e.ctx, evs[:2]))

	res, err := e.store.TurnCommit(e.ctx, store.TurnCommitParams{RunID: run.ID, Turn: 1, Status: agentfleet.StatusCompleted,
		Answer: json.RawMessage(`"ok"`), Events: []agentfleet.Event{{Type: agentfleet.EventResponse, Content: "ok"}, {Type: agentfleet.EventDone}}})
	require.NoError(t, err)
	require.NoError(t, e.bus.PublishEvents(e.ctx, res.Events))
	got = s.frames(2)
	require.Equal(t, []int64{6, 7}, seqs(got))
	require.Equal(t, agentfleet.EventDone, got[1].Type)
	s.requireEnd()
}

// TestRunEventsStoreOnly: an event that was stored but whose publish was
// lost still reaches the client, from the store.
func TestRunEventsStoreOnly(t *testing.T) {
	t.Parallel()
	e, _, run, s := watchNewRun(t)

	_, err := e.store.RunCancel(e.ctx, store.RunCancelParams{ID: run.ID, Reason: "test",
		Events: []agentfleet.Event{{Type: agentfleet.EventCancelled}, {Type: agentfleet.EventDone}}})
	require.NoError(t, err)
	got := s.frames(2)
	require.Equal(t, []agentfleet.EventType{agentfleet.EventCancelled, agentfleet.EventDone}, eventTypes(got))
	s.requireEnd()
}

// TestRunEventsFollowCancel: a client watching a queued run sees the
// cancellation the API makes, and the end.
func TestRunEventsFollowCancel(t *testing.T) {
	t.Parallel()
	e, key, run, s := watchNewRun(t)
	decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+run.ID+"/cancel", key, nil), http.StatusAccepted)
	require.Equal(t, []agentfleet.EventType{agentfleet.EventCancelled, agentfleet.EventDone}, eventTypes(s.frames(2)))
	s.requireEnd()
}

// TestRunEventsWithoutNATS: the store is the truth; with NATS gone a
// stream still serves what the store has.
func TestRunEventsWithoutNATS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	run := e.createRun(key, map[string]any{"message": "m"})
	e.complete(run.ID)
	require.NoError(t, e.bus.Close())
	s := e.openEvents(key, "/v1/runs/"+run.ID+"/events")
	require.Equal(t, []int64{1, 2, 3, 4, 5}, seqs(s.frames(5)))
	s.requireEnd()
}

// watchNewRun creates a run for a new tenant and follows its events past
// the first, queued.
func watchNewRun(t *testing.T) (e *env, key string, run agentfleet.Run, s *sseStream) {
	t.Helper()
	e = newEnv(t)
	key = e.tenant("acme")
	run = e.createRun(key, map[string]any{"message": "m"})
	s = e.openEvents(key, "/v1/runs/"+run.ID+"/events")
	require.Equal(t, agentfleet.EventQueued, s.frame().Type)
	return e, key, run, s
}
