package api_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// TestRunEventsInterleavesChunks: response chunks published on NATS
// reach an event stream as they come, as "event: response_chunk" without
// an id; another run's do not; a stream resumed from the last id replays
// only stored events.
func TestRunEventsInterleavesChunks(t *testing.T) {
	t.Parallel()
	e, key, run, s := watchNewRun(t)
	chunk := func(runID string, i int, text string) agentfleet.Event {
		return agentfleet.Event{RunID: runID, Tenant: "acme", Turn: 1, Type: agentfleet.EventResponseChunk, Index: i, Text: text}
	}
	require.NoError(t, e.bus.PublishChunk(chunk("other-run", 1, "not yours")))
	for i, text := range []string{"Hel", "lo"} {
		require.NoError(t, e.bus.PublishChunk(chunk(run.ID, i+1, text)))
	}
	for i, text := range []string{"Hel", "lo"} {
		f, err := s.next()
		require.NoError(t, err)
		require.Empty(t, f.id, "a chunk has no id")
		require.Equal(t, "response_chunk", f.event)
		var ev agentfleet.Event
		require.NoError(t, json.Unmarshal([]byte(f.data), &ev))
		require.Equal(t, run.ID, ev.RunID)
		require.Equal(t, i+1, ev.Index)
		require.Equal(t, text, ev.Text)
		require.Zero(t, ev.Seq)
	}
	res, err := e.store.TurnCommit(e.ctx, store.TurnCommitParams{RunID: run.ID, Turn: 1, Status: agentfleet.StatusCompleted,
		Answer: json.RawMessage(`"Hello"`), Events: []agentfleet.Event{{Type: agentfleet.EventResponse, Content: "Hello"}, {Type: agentfleet.EventDone}}})
	require.NoError(t, err)
	require.NoError(t, e.bus.PublishEvents(e.ctx, res.Events))
	got := s.frames(2)
	require.Equal(t, []agentfleet.EventType{agentfleet.EventResponse, agentfleet.EventDone}, eventTypes(got))
	s.requireEnd()

	resumed := e.openEvents(key, "/v1/runs/"+run.ID+"/events", "Last-Event-ID", "1")
	require.Equal(t, []agentfleet.EventType{agentfleet.EventResponse, agentfleet.EventDone}, eventTypes(resumed.frames(2)))
	resumed.requireEnd()
}
