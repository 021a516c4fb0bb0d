package loop_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/loop"
)

// splitModel streams its reply in the deltas given, and breaks after
// breakAfter of them when that is set; a plain call answers reply.
type splitModel struct {
	deltas     []string
	breakAfter int
	usage      agentfleet.Usage
	mu         sync.Mutex
	streams    int
	plains     int
}

func (m *splitModel) reply() string { return strings.Join(m.deltas, "") }

func (m *splitModel) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	m.mu.Lock()
	m.plains++
	m.mu.Unlock()
	return agentfleet.ModelResponse{Content: m.reply(), Model: "split", Usage: m.usage, UsageReported: true}, nil
}

func (m *splitModel) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	m.mu.Lock()
	m.streams++
	m.mu.Unlock()
	var got strings.Builder
	for i, d := range m.deltas {
		if m.breakAfter > 0 && i == m.breakAfter {
			return agentfleet.ModelResponse{Content: got.String(), Usage: agentfleet.Usage{PromptTokens: 999, CompletionTokens: 999}},
				errors.New("stream broke: connection reset")
		}
		got.WriteString(d)
		if err := fn(agentfleet.ModelChunk{Delta: d}); err != nil {
			return agentfleet.ModelResponse{}, err
		}
	}
	resp := agentfleet.ModelResponse{Content: got.String(), Model: "split", Usage: m.usage, UsageReported: true}
	return resp, fn(agentfleet.ModelChunk{Done: true, Response: resp})
}

func streamSetup(t *testing.T, m *splitModel) (*loop.Engine, *memMeter) {
	t.Helper()
	meter := &memMeter{}
	e, err := loop.New(loop.Config{Model: m, Sandbox: pool(t), Meter: meter, Recorder: &memRecorder{meter: meter}})
	require.NoError(t, err)
	return e, meter
}

func stepStreamed(t *testing.T, e *loop.Engine, in loop.TurnInput) (loop.TurnResult, []agentfleet.Event) {
	t.Helper()
	var chunks []agentfleet.Event
	in.OnChunk = func(ev agentfleet.Event) { chunks = append(chunks, ev) }
	if in.Run.ID == "" {
		in.Run = agentfleet.Run{ID: "run-st", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "say it"}
	}
	res, err := e.Step(context.Background(), in)
	require.NoError(t, err)
	return res, chunks
}

func chunkText(chunks []agentfleet.Event) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString(c.Text)
	}
	return b.String()
}

// A streamed turn sends its reply as response_chunk events, indexed from
// 1, that join into the recorded model step; none of them is an event of
// the result, and a secret split across two deltas reaches no chunk even
// in part.
func TestStepStreamsItsReplyAsRedactedChunks(t *testing.T) {
	t.Parallel()
	m := &splitModel{deltas: []string{"The key is gh-VAL", "UE-0f0e0d0c, and", " the ", "end."}, usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}}
	e, _ := streamSetup(t, m)
	res, chunks := stepStreamed(t, e, loop.TurnInput{TenantSecrets: tenantSecrets()})
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.Equal(t, "The key is [secret:gh], and the end.", res.Steps[0].Content)
	require.Equal(t, res.Steps[0].Content, chunkText(chunks))
	require.Greater(t, len(chunks), 1)
	for i, c := range chunks {
		require.Equal(t, agentfleet.EventResponseChunk, c.Type)
		require.Equal(t, i+1, c.Index)
		require.Equal(t, 1, c.Turn)
		require.Equal(t, "run-st", c.RunID)
		require.Equal(t, "acme", c.Tenant)
		require.Zero(t, c.Seq)
		for j := 0; j+4 <= len(ghValue); j++ {
			require.NotContains(t, c.Text, ghValue[j:j+4], "chunk %d %q", c.Index, c.Text)
		}
	}
	for _, ev := range res.Events {
		require.NotEqual(t, agentfleet.EventResponseChunk, ev.Type)
	}
	require.Equal(t, 1, m.streams)
	require.Zero(t, m.plains)
}

// Without OnChunk the call is plain.
func TestStepWithoutOnChunkDoesNotStream(t *testing.T) {
	t.Parallel()
	m := &splitModel{deltas: []string{"just ", "this"}}
	e, _ := streamSetup(t, m)
	res, err := e.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "m"}})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.Equal(t, 0, m.streams)
	require.Equal(t, 1, m.plains)
}

// A stream that breaks midway is made again as a plain call, whose reply
// starts the chunks over at index 1; the turn is charged once, with the
// plain call's usage, and a warning says what happened.
func TestStepRetriesABrokenStreamAsAPlainCallChargedOnce(t *testing.T) {
	t.Parallel()
	m := &splitModel{deltas: []string{"first half, ", "second half."}, breakAfter: 1, usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}}
	e, meter := streamSetup(t, m)
	res, chunks := stepStreamed(t, e, loop.TurnInput{})
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.Equal(t, 1, m.streams)
	require.Equal(t, 1, m.plains)
	require.Equal(t, m.usage, res.Usage)
	require.Equal(t, int64(15), meter.used, "charged once, the plain call's usage")
	require.Len(t, chunks, 2)
	require.Equal(t, []int{1, 1}, []int{chunks[0].Index, chunks[1].Index})
	require.Equal(t, "first half, ", chunks[0].Text)
	require.Equal(t, "first half, second half.", chunks[1].Text, "the restart carries the whole reply")
	require.Equal(t, res.Steps[0].Content, chunks[1].Text)
	require.Contains(t, eventTypes(res.Events), agentfleet.EventWarning)
}
